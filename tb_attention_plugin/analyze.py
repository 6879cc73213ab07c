"""One entry point for both faces: a path in, a report (or a one-line error) out.

``analyze_path`` loads a trace, runs the analysis and returns the report dict of
:mod:`.report`. Errors in the input never raise: they come back as ``{"status": "error",
"error": "..."}`` with a one-line message. Results are cached on disk by (path, size, mtime,
options, engine version) through :mod:`.cache`.
"""
from __future__ import annotations

import gzip
import os
import zlib
from typing import Iterator, Optional

from .cache import ReportCache
from .options import Options
from .report import analyze_trace, error_entry
from .trace.reader import DEFAULT_MAX_BYTES, TraceReadError
from .trace.records import load_trace

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


def looks_like_trace(path: str) -> bool:
    """Cheap sniff of the first bytes: a JSON object with traceEvents, or a list of events."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, 65536)
        except zlib.error:
            return False
    text = head.lstrip()
    if text[:1] == b"[":
        return b'"ph"' in text[:65536]
    if text[:1] != b"{":
        return False
    return b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"deviceProperties"' in text


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def expand_paths(paths: list[str]) -> Iterator[tuple[str, bool]]:
    """Files to analyse: named files as given (explicit=True); directories are walked for trace
    files (``*.pt.trace.json[.gz]`` always, other ``*.json[.gz]`` when they look like traces)."""
    for p in paths:
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs.sort()
                for f in sorted(files):
                    full = os.path.join(root, f)
                    if f.endswith((".pt.trace.json", ".pt.trace.json.gz")):
                        found.append(full)
                    elif f.endswith((".json", ".json.gz")) and looks_like_trace(full):
                        found.append(full)
            for f in found:
                yield f, False
        else:
            yield p, True


def analyze_path(path: str, options: Optional[Options] = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 cache: Optional[ReportCache] = None) -> dict:
    """The report of one trace file, or an error entry. Never raises for bad input."""
    opt = options or Options()
    try:
        st = os.stat(path)
    except OSError as e:
        return error_entry(path, f"cannot open: {e.strerror or e}")
    if os.path.isdir(path):
        return error_entry(path, "is a directory, not a trace file")
    key = None
    if cache is not None:
        key = cache.key(path, st, opt.key())
        hit = cache.get(key)
        if hit is not None:
            hit["path"] = path
            return hit
    try:
        trace = load_trace(path, max_bytes=max_bytes)
        report = analyze_trace(trace, opt)
    except TraceReadError as e:
        return error_entry(path, str(e))
    except ValueError as e:       # e.g. an unknown --step
        return error_entry(path, str(e))
    except MemoryError:
        return error_entry(path, "out of memory while analysing; try --max-bytes or a smaller trace")
    except RecursionError:
        return error_entry(path, "JSON nested too deeply")
    if cache is not None and key is not None:
        cache.put(key, report)
    return report
