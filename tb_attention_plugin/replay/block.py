"""The report's ``replay`` block: the distinct attention calls (what ``replay --list`` prints and
``replay --emit`` rebuilds) and, when a ``*.replay.json`` lies beside the trace, the backend times
measured for them (replay/results.py). Documented in docs/report-schema.md (*Replay*)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .calls import replay_calls


def replay_block(rep: dict[str, Any], trace, links, tagging, sidecars) -> dict[str, Any]:
    kt = rep.get("kernels")
    cols = getattr(kt, "columns", None)
    ids: Optional[np.ndarray] = None
    if isinstance(cols, dict) and "id" in cols:
        ids = np.asarray(cols["id"], dtype=np.int64)
        if len(ids) == len(trace.gpu["kind"]):
            ids = None  # every kernel: no filter
    found = replay_calls(trace, links, tagging, ids)
    from .results import attach

    return attach(found, rep, sidecars)
