"""The unit of background work: analyse one trace file and return its compact form.

Module-level and free of plugin state so that it can run in a worker process (spawned: it
imports only this package). It never raises for bad input: errors come back as values.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .. import progress
from ..cache import ReportCache
from ..options import Options

TRUNCATION_WARNING = "the file is truncated"
TRUNCATION_ERRORS = ("may still be being written", "ends early", "file is empty", "not a complete JSON trace")


def is_truncation(result: dict) -> bool:
    """Does the result look like a file that is still being written?"""
    if result.get("status") == "error":
        msg = result.get("error") or ""
        return any(s in msg for s in TRUNCATION_ERRORS)
    loaded: Any = result.get("loaded")
    warnings = (loaded.summary.get("warnings") if loaded else None) or []
    return any(str(w).startswith(TRUNCATION_WARNING) for w in warnings)


def analyze_job(
    path: str, options: Optional[Options] = None, cache_dir: Optional[str] = None, use_cache: bool = True
) -> dict:
    """The compact form of ``path``'s analysis (``cache_dir`` None: no on-disk cache)."""
    from ..analyze import TRUNCATED, analyze_path  # the engine: imported by the worker that runs a job
    from .index import build

    t0 = time.monotonic()
    cache = ReportCache(cache_dir) if (use_cache and cache_dir) else None
    try:
        report = analyze_path(path, options, cache)
    except MemoryError:
        report = {"status": "error", "error": "out of memory while analysing"}
    except Exception as e:  # an engine bug must not take the server down: report it per file
        report = {"status": "error", "error": f"internal error while analysing: {type(e).__name__}: {e}"}
    out: dict[str, Any]
    if report.get("status") != "ok":
        out = {"status": "error", "error": " ".join(str(report.get("error") or "unknown error").split())}
    else:
        progress.stage("indexing")
        try:
            out = {"status": "ok", "loaded": build(report)}
        except MemoryError:
            out = {"status": "error", "error": "out of memory while indexing the report"}
    out["seconds"] = round(time.monotonic() - t0, 3)
    out["truncated"] = is_truncation(out)
    # the file ends early (analyze.truncation_error): "incomplete" in the dashboard, not an error
    out["incomplete"] = out["status"] == "error" and str(out.get("error") or "").startswith(TRUNCATED + ":")
    return out
