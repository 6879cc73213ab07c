"""Allocations: the ``devices`` list of the memory block.

Every ``[memory]`` event is attributed to the innermost CPU range on its thread at its
timestamp, and through it to the attention call and phase the tagger gave that range (backward
ranges carry the forward op's call and phase, like kernels). Figures are kept per device; each
device's events travel together as one :class:`DeviceEvents`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..attention import patterns as P
from ..formats import rounded
from ..trace.arrays import unique_ints
from .calls import fused_bytes
from .context import TraceContext, innermost_ranges, phase_of
from .makers import group_makers, is_score, maker, maker_json, makers_of
from .outputs import CUDA

DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 20: "privateuse1"}
CURVE_POINTS = 1200  # the allocation curve is downsampled to about this many points
MAX_SPANS = 4000
MAX_HELD = 12
MAX_INFER = 60000  # allocations whose maker op is looked up (largest first)


@dataclass
class DeviceEvents:
    """One device's memory events in time order (a step's window when ``--step`` is given), with
    what each one belongs to. Arrays are per event; ``makers`` (event -> the op that made that
    allocation) is filled as allocations are looked at and shared by the peaks."""

    ctx: TraceContext
    shapes: dict  # attention call -> its shapes (calls.instance_shapes)
    device_type: int  # the profiler's Device Type code (1 = CUDA)
    device_id: int
    rng: np.ndarray  # innermost CPU range, or -1
    inst: np.ndarray  # attention call (instance id), or -1
    ph: np.ndarray  # phase code, or -1 outside attention
    bwd: np.ndarray  # bool: in a backward range
    b: np.ndarray  # bytes: + allocated, - freed
    ts: np.ndarray  # µs
    tot: np.ndarray  # Total Allocated after the event
    res: np.ndarray  # Total Reserved after the event
    free_at: np.ndarray  # index of the free of each allocation (n + 1 when never freed)
    makers: dict[int, dict] = field(default_factory=dict)
    score: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # score-matrix allocations

    @property
    def n(self) -> int:
        return len(self.b)

    @property
    def alloc(self) -> np.ndarray:
        return self.b > 0

    @property
    def free(self) -> np.ndarray:
        return self.b < 0

    @property
    def att(self) -> np.ndarray:
        return self.inst >= 0

    def maker(self, q: int) -> dict:
        """A fresh lookup of the op that made allocation ``q`` (not remembered)."""
        return maker(self.ctx, int(self.rng[q]), int(self.b[q]), self.device_type)


def device_entries(ctx: TraceContext, shapes: dict, window) -> list[dict]:
    """One entry per device that recorded memory events, CUDA devices first."""
    M = ctx.t.memory
    order = np.argsort(M["ts_ns"], kind="stable")  # by time, file order among equal times
    if window is not None:
        order = order[(M["ts_ns"][order] >= window[0]) & (M["ts_ns"][order] <= window[1])]
    rng = innermost_ranges(ctx.t, ctx.L, M["thread"][order], M["ts_ns"][order])
    inst, ph = phase_of(ctx.tag, rng)
    bwd = np.where(rng >= 0, ctx.L.backward_root[np.maximum(rng, 0)] >= 0, False)
    dt, di = M["device_type"][order], M["device_id"][order]
    devs = sorted(set(zip(dt.tolist(), di.tolist())), key=lambda x: (x[0] != CUDA, x[0], x[1]))
    out = []
    for t, i in devs:
        m = (dt == t) & (di == i)
        ev = _events(ctx, shapes, order[m], rng[m], inst[m], ph[m], bwd[m], t, i)
        out.append(_device_entry(ev))
    return out


def _events(
    ctx: TraceContext,
    shapes: dict,
    idx: np.ndarray,
    rng: np.ndarray,
    inst: np.ndarray,
    ph: np.ndarray,
    bwd: np.ndarray,
    device_type: int,
    device_id: int,
) -> DeviceEvents:
    """A device's events (rows ``idx`` of the trace's memory table), with allocations paired
    with their frees and attention's own allocations matched to their maker ops."""
    M = ctx.t.memory
    n = len(idx)
    b = M["bytes"][idx].astype(np.int64)
    addr = M["addr"][idx]
    tot = M["total_allocated"][idx].astype(np.int64)
    if (tot < 0).any():
        # no Total Allocated recorded: rebuild it from the deltas (relative to the window start)
        tot = np.cumsum(b)
        tot -= min(0, int(tot.min()))
    # pair each allocation with the next free of the same address
    o = np.argsort(addr, kind="stable")  # by address, then position
    a_s, b_s = addr[o], b[o]
    pair = (a_s[:-1] == a_s[1:]) & (b_s[:-1] > 0) & (b_s[1:] < 0)
    free_at = np.full(n, n + 1, dtype=np.int64)
    free_at[o[:-1][pair]] = o[1:][pair]
    ev = DeviceEvents(
        ctx=ctx,
        shapes=shapes,
        device_type=int(device_type),
        device_id=int(device_id),
        rng=rng,
        inst=inst,
        ph=ph,
        bwd=bwd,
        b=b,
        ts=M["ts"][idx],
        tot=tot,
        res=M["total_reserved"][idx].astype(np.int64),
        free_at=free_at,
    )
    # makers of the allocations that matter: attention's own, and the ones live at the peaks
    am = np.flatnonzero(ev.alloc & ev.att)
    if len(am) > MAX_INFER:
        am = am[np.argsort(-b[am], kind="stable")[:MAX_INFER]]
    ev.makers.update(makers_of(ctx, am, rng, b, ev.device_type))
    ev.score = np.zeros(n, dtype=bool)
    # makers_of shares one maker dict among the allocations of a group, and every step repeats the
    # same calls: the test is made once per maker, size and call shape, and a maker's marked copy is
    # shared the same way. The memos are keyed by id() and hold the maker, so no id is reused meanwhile.
    verdict: dict[tuple, tuple[bool, dict]] = {}
    marked: dict[int, tuple[dict, dict]] = {}
    for p, i, nb in zip(am.tolist(), inst[am].tolist(), b[am].tolist()):
        s = shapes.get(i)
        if s is None:
            continue
        mk = ev.makers[p]
        key = (id(mk), nb, s["sq"], s["sk"], s["score_numel"])
        got = verdict.get(key)
        if got is None:
            got = verdict[key] = (is_score(mk, nb, s, ev.device_type), mk)
        if got[0]:
            ev.score[p] = True
            pair = marked.get(id(mk))
            if pair is None:  # a marked copy: makers_of shares its dicts
                pair = marked[id(mk)] = (mk, dict(mk, score_matrix=True))
            ev.makers[p] = pair[1]
    return ev


def _device_entry(ev: DeviceEvents) -> dict:
    n, b, tot, res, ts = ev.n, ev.b, ev.tot, ev.res, ev.ts
    alloc, free, att = ev.alloc, ev.free, ev.att
    name = DEVICE_TYPES.get(ev.device_type, f"type{ev.device_type}")
    label = name if ev.device_type == 0 or ev.device_id < 0 else f"{name}:{ev.device_id}"
    peak_i = int(np.argmax(tot)) if n else 0
    e: dict = {
        "device": label,
        "device_type": name,
        "device_type_code": ev.device_type,
        "device_id": ev.device_id,
        "events": int(n),
        "allocs": int(alloc.sum()),
        "frees": int(free.sum()),
        "alloc_bytes": int(b[alloc].sum()),
        "free_bytes": int(-b[free].sum()),
        "start_allocated_bytes": int(tot[0] - b[0]) if n else 0,
        "end_allocated_bytes": int(tot[-1]) if n else 0,
        "peak_allocated_bytes": int(tot[peak_i]) if n else 0,
        "peak_ts": float(ts[peak_i]) if n else None,
        "peak_in_attention": bool(att[peak_i]) if n else False,
        # the CPU allocator reports no reserved memory (always 0): null, not 0
        "peak_reserved_bytes": int(res.max()) if n and (res > 0).any() else None,
    }
    # inside attention
    a_al, a_fr = alloc & att, free & att
    e["attention"] = {
        "events": int(att.sum()),
        "allocs": int(a_al.sum()),
        "frees": int(a_fr.sum()),
        "alloc_bytes": int(b[a_al].sum()),
        "free_bytes": int(-b[a_fr].sum()),
        "share_of_alloc_bytes": rounded(b[a_al].sum() / b[alloc].sum(), 4) if b[alloc].sum() > 0 else None,
        "empty_allocs": None,
    }
    e["phases"] = _phase_rows(ev)
    sc = np.flatnonzero(ev.score)
    e["score_matrices"] = {
        "allocs": int(len(sc)),
        "bytes": int(b[sc].sum()),
        "max_bytes": int(b[sc].max()) if len(sc) else 0,
        "examples": group_makers([(ev.makers[p], int(b[p])) for p in sc.tolist()], limit=4),
    }
    # the peak inside attention, and what held it
    e["attention_peak"] = None
    if att.any():
        ai = np.flatnonzero(att)
        e["attention_peak"] = _peak(ev, int(ai[np.argmax(tot[ai])]))
    if n:
        e["peak"] = _peak(ev, peak_i)
    e["calls"] = _call_comparison(ev)
    e["curve"] = _curve(ts, tot, res, peak_i)
    return e


def _phase_rows(ev: DeviceEvents) -> list[dict]:
    """Allocations per attention phase and direction, with the largest one and its maker."""
    b, alloc, free, att, score = ev.b, ev.alloc, ev.free, ev.att, ev.score
    rows = []
    for direction, dmask in (("forward", ~ev.bwd), ("backward", ev.bwd)):
        for pi, phn in enumerate(P.PHASES):
            m = att & dmask & (ev.ph == pi)
            if not m.any():
                continue
            ma, mf = m & alloc, m & free
            big = np.flatnonzero(ma)
            row = {
                "phase": phn,
                "label": P.PHASE_LABELS[phn],
                "direction": direction,
                "allocs": int(ma.sum()),
                "frees": int(mf.sum()),
                "alloc_bytes": int(b[ma].sum()),
                "free_bytes": int(-b[mf].sum()),
                "net_bytes": int(b[m].sum()),
                "score_allocs": int((ma & score).sum()),
                "score_bytes": int(b[ma & score].sum()),
                "largest": None,
            }
            if len(big):
                p = int(big[np.argmax(b[big])])
                row["largest"] = dict(maker_json(ev.makers.get(p) or ev.maker(p)), bytes=int(b[p]))
            rows.append(row)
    return rows


def _peak(ev: DeviceEvents, p: int) -> dict:
    """Total Allocated at event p and the live allocations that make it up."""
    ctx, shapes, rng, inst, ph, bwd, b, tot, ts, makers = (
        ev.ctx,
        ev.shapes,
        ev.rng,
        ev.inst,
        ev.ph,
        ev.bwd,
        ev.b,
        ev.tot,
        ev.ts,
        ev.makers,
    )
    pos = np.arange(len(b))
    live = np.flatnonzero(ev.alloc & (pos <= p) & (ev.free_at > p))
    groups: dict = {}
    live_bytes = 0
    for q in live.tolist():
        mk = makers.get(q)
        if mk is None:
            mk = makers[q] = ev.maker(q)
            s = shapes.get(int(inst[q]))
            if inst[q] >= 0 and s is not None and is_score(mk, int(b[q]), s, ev.device_type):
                mk["score_matrix"] = True
        a = inst[q] >= 0
        key = (
            mk.get("op"),
            tuple(mk["shape"]) if mk.get("shape") else None,
            mk.get("dtype"),
            P.PHASES[ph[q]] if a else None,
            "backward" if bwd[q] else "forward",
            bool(a),
        )
        g = groups.get(key)
        if g is None:
            g = groups[key] = dict(maker_json(mk), phase=key[3], direction=key[4], attention=key[5], count=0, bytes=0)
        g["count"] += 1
        g["bytes"] += int(b[q])
        live_bytes += int(b[q])
    total = int(tot[p])
    held = sorted(groups.values(), key=lambda g: -g["bytes"])
    for g in held:
        g["share"] = rounded(g["bytes"] / total, 4) if total > 0 else None
    r = int(rng[p])
    i = int(inst[p])
    return {
        "ts": float(ts[p]),
        "total_allocated_bytes": total,
        "in_attention": bool(i >= 0),
        "phase": P.PHASES[ph[p]] if i >= 0 else None,
        "direction": "backward" if bwd[p] else "forward",
        "instance": ctx.call(i),
        "scope": ctx.tag.instances.get(i, {}).get("name") if i >= 0 else None,
        "op": ctx.name(r) if r >= 0 else None,
        "live_allocs": int(len(live)),
        "live_bytes": live_bytes,
        "attention_bytes": int(sum(g["bytes"] for g in held if g["attention"])),
        "score_bytes": int(sum(g["bytes"] for g in held if g["score_matrix"])),
        "before_window_bytes": max(0, total - live_bytes),
        "held_by": held[:MAX_HELD],
        "held_by_groups": len(held),
    }


def _call_comparison(ev: DeviceEvents) -> list[dict]:
    """Per attention call (grouped by scope and shapes): what core attention allocated at its
    peak beyond what was allocated before it, vs what a fused kernel allocates (out + lse)."""
    ctx, shapes, inst, ph, bwd, b, tot, score = ev.ctx, ev.shapes, ev.inst, ev.ph, ev.bwd, ev.b, ev.tot, ev.score
    core = np.isin(ph, [P.PHASE_INDEX[p] for p in P.CORE_PHASES])
    fwd = ~bwd
    sel = np.flatnonzero((inst >= 0) & fwd)
    if not len(sel):
        return []
    per: dict[int, dict] = {}
    # the loop reads single events: Python lists answer that faster than numpy scalars
    events = zip(
        sel.tolist(), inst[sel].tolist(), tot[sel].tolist(), b[sel].tolist(), score[sel].tolist(), core[sel].tolist()
    )
    for p, i, t, nb, scored, in_core in events:
        d = per.get(i)
        if d is None:
            d = per[i] = {
                "first": p,
                "core_first": None,
                "max": t,
                "core_max": None,
                "alloc": 0,
                "score_alloc": 0,
                "score_n": 0,
            }
        d["max"] = max(d["max"], t)
        if nb > 0:
            d["alloc"] += nb
            if scored:
                d["score_alloc"] += nb
                d["score_n"] += 1
        if in_core:
            if d["core_first"] is None:
                d["core_first"] = p
                d["core_max"] = t
            d["core_max"] = max(d["core_max"], t)
    groups: dict = {}
    for i, d in per.items():
        s = shapes.get(i)
        before = int(tot[d["first"]] - b[d["first"]])
        call_peak = d["max"] - before
        core_peak = None
        if d["core_first"] is not None:
            cf = d["core_first"]
            core_peak = d["core_max"] - int(tot[cf] - b[cf])
        scope = ctx.tag.instances.get(i, {}).get("name")
        key = (
            re.sub(r"_\d+$", "", scope or ""),
            tuple(sorted((k, v) for k, v in (s or {}).items() if k in ("b", "h", "hk", "sq", "d", "dv", "dtype"))),
        )
        g = groups.get(key)
        if g is not None and s and g["shapes"] and s["sk"] > g["shapes"]["sk"]:
            # decode steps of one layer differ only in the K/V length: keep the longest as the figures
            sk_min = g["shapes"]["sk_min"]
            g["shapes"] = dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=sk_min)
            fb = fused_bytes(s)
            g["score_matrix_bytes"] = s["score_numel"] * s["itemsize"]
            g["fused_alloc_bytes"] = fb["alloc"]
            g["fused_working_set_bytes"] = fb["working_set"]
        elif g is not None and s and g["shapes"]:
            g["shapes"]["sk_min"] = min(g["shapes"]["sk_min"], s["sk"])
        if g is None:
            g = groups[key] = {
                "scope": scope,
                "calls": 0,
                "shapes": None,
                "fused_path": None,
                "call_peak_bytes": 0,
                "core_peak_bytes": None,
                "alloc_bytes": 0,
                "score_allocs": 0,
                "score_alloc_bytes": 0,
            }
            if s:
                g["shapes"] = dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=s["sk"])
                fb = fused_bytes(s)
                g["score_matrix_bytes"] = s["score_numel"] * s["itemsize"]
                g["fused_alloc_bytes"] = fb["alloc"]
                g["fused_working_set_bytes"] = fb["working_set"]
                g["fused_path"] = s["kv_source"] != "matmul_operands" and "matmul" not in (s.get("op") or "")
        g["calls"] += 1
        g.setdefault("_scopes", set()).add(scope)
        g["call_peak_bytes"] = max(g["call_peak_bytes"], call_peak)
        if core_peak is not None:
            g["core_peak_bytes"] = max(g["core_peak_bytes"] or 0, core_peak)
        g["alloc_bytes"] = max(g["alloc_bytes"], d["alloc"])
        g["score_allocs"] = max(g["score_allocs"], d["score_n"])
        g["score_alloc_bytes"] = max(g["score_alloc_bytes"], d["score_alloc"])
    out = []
    for key, g in groups.items():
        if len(g.pop("_scopes")) > 1:
            g["scope"] = key[0]
        if g["core_peak_bytes"] is None:
            continue  # no core-attention allocation of this call on this device
        if g.get("fused_alloc_bytes") is not None and g["core_peak_bytes"] is not None:
            g["excess_over_fused_bytes"] = g["core_peak_bytes"] - g["fused_alloc_bytes"]
            fused = g["fused_alloc_bytes"]
            g["core_peak_vs_fused"] = rounded(g["core_peak_bytes"] / fused, 3) if fused else None
        out.append(g)
    out.sort(key=lambda g: -(g["core_peak_bytes"] or g["call_peak_bytes"] or 0))
    return out[:50]


def _curve(ts: np.ndarray, tot: np.ndarray, res: np.ndarray, peak_i: int) -> dict:
    n = len(ts)
    if n <= CURVE_POINTS:
        keep = np.arange(n)
    else:
        buckets = CURVE_POINTS // 2
        edges = np.linspace(0, n, buckets + 1).astype(np.int64)
        lo = np.minimum.reduceat(tot, edges[:-1])
        hi = np.maximum.reduceat(tot, edges[:-1])
        pick: list[int] = []
        for k in range(buckets):
            a, z = edges[k], edges[k + 1]
            if z <= a:
                continue
            seg = tot[a:z]
            i_lo = a + int(np.argmax(seg == lo[k]))
            i_hi = a + int(np.argmax(seg == hi[k]))
            pick.extend((i_lo, i_hi))
        keep = unique_ints(np.asarray(pick + [0, n - 1, peak_i], dtype=np.int64))
    return {
        "ts": [round(float(x), 3) for x in ts[keep].tolist()],
        "allocated": tot[keep].tolist(),
        "reserved": res[keep].tolist() if (res >= 0).all() and (res > 0).any() else None,
        "points": int(n),
        "downsampled": bool(n > CURVE_POINTS),
    }


def attention_spans(ctx: TraceContext, window) -> list[dict]:
    """CPU time span of every attention call, per direction (for shading the curve)."""
    R, tag, L = ctx.R, ctx.tag, ctx.L
    inst = tag.range_instance
    sel = np.flatnonzero(inst >= 0)
    if not len(sel):
        return []
    bwd = (L.backward_root[sel] >= 0).astype(np.int64)
    key = inst[sel] * 2 + bwd
    o = np.argsort(key, kind="stable")
    k_sorted = key[o]
    starts = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
    t0 = np.minimum.reduceat(R["ts_ns"][sel][o], starts)
    t1 = np.maximum.reduceat(ctx.end_ns[sel][o], starts)
    keys = k_sorted[starts]
    order = np.argsort(t0, kind="stable")
    base = ctx.t.base_us
    out = []
    for j in order.tolist():
        a, b = int(t0[j]), int(t1[j])
        if window is not None and (b < window[0] or a > window[1]):
            continue
        i = int(keys[j]) // 2
        out.append(
            {
                "ts": round(base + a / 1000.0, 3),
                "end": round(base + b / 1000.0, 3),
                "direction": "backward" if int(keys[j]) % 2 else "forward",
                "instance": ctx.call(i),
                "scope": ctx.tag.instances.get(i, {}).get("name"),
            }
        )
        if len(out) >= MAX_SPANS:
            break
    return out
