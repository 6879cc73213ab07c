"""Source lines: the user's code that launched each attention kernel.

With ``with_stack=True`` a trace records the Python frames around every op. For each attention
kernel, the op that launched it (for a backward kernel: the forward op it differentiates, since
autograd runs the backward outside any Python frame) is looked up in the trace's user frames
(trace/stacks.py): the innermost one is the kernel row's ``source: {file, line, function}``.
Phase rows get ``sources``: the three lines with the most kernel time in the phase; each attention
call (``memory.attention_spans``: one per call and direction) the line of most of its kernel time. All lookups
are one vectorised pass over the attention kernels, and one dict per distinct frame.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .trace.stacks import frame_json, innermost

TOP_SOURCES = 3


def kernel_frames(trace, links, ids: np.ndarray) -> np.ndarray:
    """For GPU activity ids, the index of the innermost user frame around the op that launched
    each (its forward op for backward kernels), or -1."""
    out = np.full(len(ids), -1, dtype=np.int64)
    stacks = getattr(trace, "stacks", None) or {}
    if not len(ids) or not len(stacks.get("ts", ())):
        return out
    gp = np.asarray(links.gpu_parent)
    ok = (ids >= 0) & (ids < len(gp))
    r = np.full(len(ids), -1, dtype=np.int64)
    r[ok] = gp[ids[ok]]
    r = links.forward_context(r)
    has = r >= 0
    R = trace.ranges
    out[has] = innermost(stacks, R["thread"][r[has]].astype(np.int64), R["ts_ns"][r[has]])
    return out


def attach_sources(report: dict, trace, links) -> None:
    """Set ``source`` on the attention kernel rows and calls, ``sources`` on the phase rows."""
    kt = report.get("kernels")
    cols = getattr(kt, "columns", None)
    if kt is None or not isinstance(cols, dict) or "attention" not in cols or trace is None or links is None:
        return
    rows = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
    if not len(rows) or not len((getattr(trace, "stacks", None) or {}).get("ts", ())):
        return
    ids = np.asarray(cols["id"], dtype=np.int64)[rows]
    frames = kernel_frames(trace, links, ids)
    memo: dict[int, Optional[dict]] = {}
    # (id of a row's extras, id of its source) -> (those extras, the row's new extras): rows share
    # their extras dicts (report._extras), so a row's is replaced, never changed in place
    with_source: dict[tuple[int, int], tuple[Optional[dict], dict]] = {}
    dur = np.nan_to_num(np.asarray(cols["dur_us"], dtype=np.float64))[rows]
    phase, direction = kt._col_values("phase", rows), kt._col_values("direction", rows)
    instance = kt._col_values("instance", rows) if "instance" in cols else [None] * len(rows)
    per_phase: dict = {}
    per_call: dict = {}
    for row, f, d, ph, dr, inst in zip(rows.tolist(), frames.tolist(), dur.tolist(), phase, direction, instance):
        if f < 0:
            continue
        if f in memo:
            src = memo[f]
        else:
            src = memo[f] = frame_json(trace.strings, trace.stacks, f)
        if src is None:
            continue
        e = kt.extras.get(row)
        got = with_source.get((id(e), id(src)))
        if got is None:  # the pair's dict, made once (e is kept alive with it: its id stays its own)
            got = with_source[id(e), id(src)] = (e, {**(e or {}), "source": src})
        kt.extras[row] = got[1]
        key = (src["file"], src["line"], src["function"])
        acc = per_phase.setdefault((ph, dr), {})
        acc[key] = acc.get(key, 0.0) + d
        if inst is not None:
            acc = per_call.setdefault((int(inst), dr), {})
            acc[key] = acc.get(key, 0.0) + d
    for p in report.get("phases") or []:
        acc = per_phase.get((p.get("phase"), p.get("direction")))
        if acc:
            top = sorted(acc.items(), key=lambda x: -x[1])[:TOP_SOURCES]
            p["sources"] = [{"file": f, "line": ln, "function": fn, "time_us": round(t, 3)} for (f, ln, fn), t in top]
    for span in (report.get("memory") or {}).get("attention_spans") or []:
        acc = per_call.get((span.get("instance"), span.get("direction")))
        if acc:
            f, ln, fn = max(acc.items(), key=lambda x: x[1])[0]
            span["source"] = {"file": f, "line": ln, "function": fn}
