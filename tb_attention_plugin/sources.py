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

from .trace.arrays import unique_ints
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
    # each distinct frame's {file, line, function} (None: no user frame), made once, and the
    # distinct lines they name (two frames can name one line)
    frames, at_frame = unique_ints(kernel_frames(trace, links, ids), return_inverse=True)
    srcs = [frame_json(trace.strings, trace.stacks, f) for f in frames.tolist()]
    line_ids: dict[tuple[str, int, str], int] = {}
    line_of = [
        -1 if s is None else line_ids.setdefault((s["file"], s["line"], s["function"]), len(line_ids)) for s in srcs
    ]
    at_frame = at_frame.reshape(-1)
    line = np.asarray(line_of, dtype=np.int64)[at_frame]
    ok = np.flatnonzero(line >= 0)
    if not len(ok):
        return
    lines = list(line_ids)
    _set_row_sources(kt, rows[ok], at_frame[ok], srcs)
    dur = np.nan_to_num(np.asarray(cols["dur_us"], dtype=np.float64))[rows[ok]]
    line = line[ok]
    ph, ph_vocab = _codes(kt, "phase", rows[ok])
    dr, dr_vocab = _codes(kt, "direction", rows[ok])
    per_phase = _time_per_line(ph.astype(np.int64) * len(dr_vocab) + dr, line, dur, len(lines))
    for p in report.get("phases") or []:
        key = (_index(ph_vocab, p.get("phase")), _index(dr_vocab, p.get("direction")))
        items = per_phase.get(key[0] * len(dr_vocab) + key[1]) if key[0] >= 0 and key[1] >= 0 else None
        if items:
            top = sorted(items, key=lambda x: -x[1])[:TOP_SOURCES]
            p["sources"] = [{**_line_json(lines[ln]), "time_us": round(t, 3)} for ln, t in top]
    if "instance" not in cols:
        return
    c = cols["instance"]
    if isinstance(c, np.ndarray) and c.dtype.kind == "f":  # report.py's: NaN where a kernel has no call
        v = c[rows[ok]]
        has = ~np.isnan(v)
        inst = np.where(has, v, 0).astype(np.int64)
    else:
        values = kt._col_values("instance", rows[ok])
        has = np.fromiter((v is not None for v in values), dtype=bool, count=len(ok))
        inst = np.fromiter((0 if v is None else int(v) for v in values), dtype=np.int64, count=len(ok))
    per_call = _time_per_line(inst[has] * len(dr_vocab) + dr[has], line[has], dur[has], len(lines))
    for span in (report.get("memory") or {}).get("attention_spans") or []:
        i, d = span.get("instance"), _index(dr_vocab, span.get("direction"))
        whole = isinstance(i, (int, float)) and not isinstance(i, bool) and float(i).is_integer()
        items = per_call.get(int(i) * len(dr_vocab) + d) if whole and d >= 0 else None
        if items:
            span["source"] = _line_json(lines[max(items, key=lambda x: x[1])[0]])


def _set_row_sources(kt, rows: np.ndarray, at_frame: np.ndarray, srcs: list[Optional[dict]]) -> None:
    """Each row's extras replaced by a dict with its ``source`` added: rows share their extras
    dicts (report._extras), so a row's is replaced, never changed in place, and rows of one extras
    dict and frame share the new one."""
    with_source: dict[tuple[int, int], tuple[Optional[dict], dict]] = {}
    extras = kt.extras
    for row, f in zip(rows.tolist(), at_frame.tolist()):
        e = extras.get(row)
        got = with_source.get((id(e), f))
        if got is None:  # the pair's dict, made once (e is kept alive with it: its id stays its own)
            got = with_source[id(e), f] = (e, {**(e or {}), "source": srcs[f]})
        extras[row] = got[1]


def _time_per_line(group: np.ndarray, line: np.ndarray, dur: np.ndarray, n_lines: int) -> dict[int, list]:
    """Per group: ``[(line, kernel time)]`` in the order the lines first appear in it. The times
    add in row order (np.bincount), as a loop over the rows would."""
    key = group.astype(np.int64) * n_lines + line
    u, first, inv = unique_ints(key, return_index=True, return_inverse=True)
    t = np.bincount(inv.reshape(-1), weights=dur, minlength=len(u))
    out: dict[int, list] = {}
    for i in np.argsort(first, kind="stable").tolist():
        k = int(u[i])
        out.setdefault(k // n_lines, []).append((k % n_lines, float(t[i])))
    return out


def _codes(kt, name: str, rows: np.ndarray) -> tuple[np.ndarray, list]:
    """A string column's codes at ``rows`` and its vocabulary; equal values get one code (the
    lines are summed per value)."""
    codes, vocab = kt.codes(name)
    first: dict = {}
    canon = np.asarray([first.setdefault(v, i) for i, v in enumerate(vocab)], dtype=np.int64)
    return canon[codes[rows]] if len(canon) else codes[rows].astype(np.int64), vocab


def _index(vocab: list, value) -> int:
    """``value``'s code in ``vocab``, or -1."""
    for i, v in enumerate(vocab):
        if v == value and type(v) is type(value):
            return i
    return -1


def _line_json(line: tuple[str, int, str]) -> dict:
    return {"file": line[0], "line": line[1], "function": line[2]}
