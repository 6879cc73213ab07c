"""The dashboard's Timeline: GPU activity per stream over a time window, decimated on the server.

A training step holds tens of thousands of kernels; a canvas 1000 px wide can show at most a few
thousand distinct rectangles per stream. :func:`decimate` turns the kernels that overlap a window
into *runs* per lane (device, stream): a kernel at least one pixel wide stays one run (so that
hover and click can name it); neighbouring kernels narrower than a pixel, with gaps under a pixel,
merge into one run coloured by the category that holds most of its busy time. The answer is
bounded by lanes x pixels whatever the number of kernels, so the page stays fast on 100k kernels.

Attention calls (kernels sharing an ``instance``) are returned per lane as their extents, merged
the same way, so the page can draw a bracket over each call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..trace.arrays import unique_ints

MAX_WIDTH = 8000  # pixels; the page asks for its canvas width
NON_ATTENTION = -1  # category of a kernel outside attention (phase codes are >= 0)


@dataclass
class Columns:
    """What the timeline needs of a kernel table, as numpy arrays of equal length."""

    ts: np.ndarray  # start, µs (float64)
    dur: np.ndarray  # duration, µs (float64)
    lane: np.ndarray  # int64 index into ``lanes``
    lanes: list[tuple[int, int]]  # (device, stream) per lane
    cat: np.ndarray  # int32: phase code (>= 0) or NON_ATTENTION
    cats: list[str]  # phase names, by code
    instance: np.ndarray  # int64 attention-call id, -1 when none
    ids: np.ndarray  # int64 kernel ids (the kernel table's ``id``)
    step: np.ndarray  # int32 step code, -1 when none
    steps: list[str]  # step names, by code


def _runs(s: np.ndarray, e: np.ndarray, c: np.ndarray, ids: np.ndarray, px: float, ncat: int) -> dict[str, Any]:
    """Runs of one lane's kernels (sorted by start). ``c`` holds category codes shifted to >= 0."""
    n = len(s)
    if n == 0:
        return {"start": [], "end": [], "cat": [], "n": [], "id": [], "busy": []}
    big = (e - s) >= px
    reach = np.maximum.accumulate(e)  # end of everything started so far
    gap = s[1:] - reach[:-1] > px
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = big[1:] | big[:-1] | gap
    starts = np.flatnonzero(new)
    gid = np.cumsum(new) - 1
    g_s = s[starts]
    g_e = np.maximum.reduceat(e, starts)
    count = np.diff(np.append(starts, n))
    dur = e - s
    busy = np.add.reduceat(dur, starts)
    by_cat = np.zeros((len(starts), ncat), dtype=np.float64)
    np.add.at(by_cat, (gid, c), dur)
    cat = by_cat.argmax(axis=1)
    kid = np.where(count == 1, ids[starts], -1)
    return {"start": g_s, "end": g_e, "cat": cat, "n": count, "id": kid, "busy": busy}


def _calls(s: np.ndarray, e: np.ndarray, inst: np.ndarray, px: float) -> dict[str, Any]:
    """Extents of the attention calls of one lane, neighbours closer than a pixel merged."""
    m = inst >= 0
    if not m.any():
        return {"start": [], "end": [], "n": []}
    inst_m, s_m, e_m = inst[m], s[m], e[m]
    uniq, inv = unique_ints(inst_m, return_inverse=True)
    c_s = np.full(len(uniq), np.inf)
    c_e = np.full(len(uniq), -np.inf)
    np.minimum.at(c_s, inv, s_m)
    np.maximum.at(c_e, inv, e_m)
    order = np.argsort(c_s, kind="stable")
    c_s, c_e = c_s[order], c_e[order]
    reach = np.maximum.accumulate(c_e)
    new = np.empty(len(c_s), dtype=bool)
    new[0] = True
    new[1:] = c_s[1:] - reach[:-1] > px
    starts = np.flatnonzero(new)
    return {"start": c_s[starts], "end": np.maximum.reduceat(c_e, starts), "n": np.diff(np.append(starts, len(c_s)))}


def _rel(a: Any, t0: float) -> list[float]:
    out: list[float] = np.round(np.asarray(a, dtype=np.float64) - t0, 3).tolist()
    return out


def decimate(cols: Columns, t0: Optional[float], t1: Optional[float], width: int) -> dict[str, Any]:
    """Runs per lane for the window [t0, t1] (µs, the trace's clock; None = the whole extent)
    drawn ``width`` pixels wide. Times in the answer are relative to ``t0``."""
    width = int(max(1, min(MAX_WIDTH, width)))
    end = cols.ts + cols.dur
    if len(cols.ts):
        extent = [float(cols.ts.min()), float(end.max())]
    else:
        extent = [0.0, 0.0]
    a = extent[0] if t0 is None else float(t0)
    b = extent[1] if t1 is None else float(t1)
    if b <= a:
        b = a + 1.0
    px = (b - a) / width
    ncat = len(cols.cats) + 1
    lanes = []
    inside = (end >= a) & (cols.ts <= b)
    for li, (device, stream) in enumerate(cols.lanes):
        m = inside & (cols.lane == li)
        idx = np.flatnonzero(m)
        total = int((cols.lane == li).sum())
        order = idx[np.argsort(cols.ts[idx], kind="stable")]
        s = np.maximum(cols.ts[order], a)
        e = np.minimum(end[order], b)
        c = cols.cat[order] + 1  # NON_ATTENTION -> 0
        r = _runs(s, e, c, cols.ids[order], px, ncat)
        calls = _calls(s, e, cols.instance[order], px)
        att = cols.cat[order] >= 0
        lanes.append(
            {
                "device": device,
                "stream": stream,
                "kernels": int(len(order)),
                "kernels_total": total,
                "busy_us": round(float((e - s).sum()), 3),
                "attention_us": round(float((e - s)[att].sum()), 3),
                "runs": {
                    "start": _rel(r["start"], a),
                    "end": _rel(r["end"], a),
                    "cat": (np.asarray(r["cat"], dtype=np.int64) - 1).tolist(),
                    "n": np.asarray(r["n"], dtype=np.int64).tolist(),
                    "id": np.asarray(r["id"], dtype=np.int64).tolist(),
                    "busy": np.round(np.asarray(r["busy"], dtype=np.float64), 3).tolist(),
                },
                "calls": {
                    "start": _rel(calls["start"], a),
                    "end": _rel(calls["end"], a),
                    "n": np.asarray(calls["n"], dtype=np.int64).tolist(),
                },
            }
        )
    return {
        "t0": a,
        "t1": b,
        "width": width,
        "px_us": px,
        "extent": extent,
        "categories": list(cols.cats),
        "lanes": lanes,
        "steps": step_extents(cols),
    }


def step_extents(cols: Columns) -> list[dict[str, Any]]:
    """GPU extent of each profiler step's kernels (the step's CPU range leads its GPU work)."""
    out: list[dict[str, Any]] = []
    end = cols.ts + cols.dur
    for code, name in enumerate(cols.steps):
        m = cols.step == code
        if m.any():
            out.append(
                {"name": name, "t0": float(cols.ts[m].min()), "t1": float(end[m].max()), "kernels": int(m.sum())}
            )
    out.sort(key=lambda x: float(x["t0"]))
    return out


# ---------------------------------------------------------------- from the plugin's kernel table


def _int_field(t: Any, name: str, null: int, rows: Optional[list[dict[str, Any]]]) -> np.ndarray:
    """An integer column of the loaded kernel table: the engine's array when it has one, else
    from ``rows`` (the decoded row dicts); NaN and None -> ``null``."""
    table = getattr(t.store, "table", None)
    if table is not None and hasattr(table, "columns") and name in table.columns:
        c = table.columns[name]
        if isinstance(c, np.ndarray) and c.dtype.kind in "fiub":
            a = c.astype(np.float64)
            return np.where(np.isnan(a), null, a).astype(np.int64)
        vals = table.column(name)
    else:
        vals = [r.get(name) for r in rows or ()]
    return np.fromiter((null if v is None or v != v else int(v) for v in vals), dtype=np.int64, count=t.n)


def columns_of(t: Any) -> Columns:
    """:class:`Columns` of a :class:`server.index.KernelTable` (computed once, then memoised)."""
    if getattr(t, "memo", None) is None:  # a table unpickled from an older cache
        t.memo = {}
    memo: Optional[Columns] = t.memo.get("timeline")
    if memo is not None:
        return memo
    engine = getattr(t.store, "table", None) is not None
    rows = None if engine else t.store.rows(range(t.n))  # packed rows: decoded once
    dev = _int_field(t, "device", 0, rows)
    stream = _int_field(t, "stream", 0, rows)
    pairs = np.stack([dev, stream], axis=1) if t.n else np.zeros((0, 2), dtype=np.int64)
    uniq, lane = np.unique(pairs, axis=0, return_inverse=True)
    lanes = [(int(d), int(s)) for d, s in uniq.tolist()]
    phase_codes = t.cat["phase"].astype(np.int32)
    cat = np.where(t.attention, phase_codes, NON_ATTENTION).astype(np.int32)
    cols = Columns(
        ts=np.nan_to_num(t.num["ts"], nan=0.0),
        dur=np.nan_to_num(t.num["dur_us"], nan=0.0),
        lane=np.asarray(lane, dtype=np.int64).reshape(-1),
        lanes=lanes,
        cat=cat,
        cats=list(t.cat_values["phase"]),
        instance=_int_field(t, "instance", -1, rows),
        ids=np.nan_to_num(t.num["id"], nan=-1).astype(np.int64),
        step=t.cat["step"].astype(np.int32),
        steps=list(t.cat_values["step"]),
    )
    t.memo["timeline"] = cols
    return cols


def route(plugin: Any, request: Any) -> Any:
    """``/timeline``: the selection's parameters plus ``t0``, ``t1`` (µs, optional) and ``width``."""
    from .params import bad, int_param, json_response
    from .selection import fetch

    def num(key: str) -> Optional[float]:
        v = request.args.get(key)
        if v is None or v == "":
            return None
        try:
            x = float(v)
        except ValueError:
            raise bad(f"parameter '{key}' must be a number", param=key) from None
        if not np.isfinite(x):
            raise bad(f"parameter '{key}' must be a finite number", param=key)
        return x

    t0, t1 = num("t0"), num("t1")
    width = int_param(request.args, "width", 1000, 1, MAX_WIDTH)
    if t0 is not None and t1 is not None and t1 <= t0:
        raise bad("t1 must be after t0", param="t1")
    snap, sel = fetch(plugin.loader, request.args, need_index=True)  # NotReady: the route answers 202
    assert snap.loaded is not None  # fetch with need_index gives the loaded index
    out = decimate(columns_of(snap.loaded.kernels), t0, t1, width)
    out.update({"state": "ready", "selection": sel.echo})
    return json_response(out)
