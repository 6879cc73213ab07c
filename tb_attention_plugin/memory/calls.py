"""The shapes of every attention call (B, H, Hk, Sq, Sk, D, Dv, dtype) and the bytes they imply:
what a fused kernel allocates and keeps (q, k, v, out, logsumexp) and what K/V holds."""

from __future__ import annotations

from math import prod
from typing import Optional

import numpy as np

from ..attention import patterns as P
from ..roofline.cost import SDPA_SCHEMAS, matmul_dims, sdpa_shapes
from ..trace.records import OP
from .context import TraceContext
from .outputs import int_value, ints_text, short_name

# ops whose inputs say an eager call's shapes (QK^T / PV operands) or that it repeats K/V heads
_SHAPE_OPS = ("matmul", "bmm", "baddbmm", "mm", "expand", "repeat_interleave")


def instance_shapes(ctx: TraceContext, step_window: Optional[tuple]) -> dict[int, dict]:
    """B, H, Hk, Sq, Sk, D, Dv and dtype of every attention call's forward pass, from the SDPA
    op's inputs or the QK^T (and PV) matmul operands of eager attention."""
    R, tag, L = ctx.R, ctx.tag, ctx.L
    cand = np.flatnonzero((ctx.kind == OP) & (tag.range_instance >= 0) & (L.backward_root < 0) & (ctx.sig >= 0))
    wanted = {i for i, nm in enumerate(ctx.strings) if nm in SDPA_SCHEMAS or short_name(nm) in _SHAPE_OPS}
    if len(cand):
        cand = cand[np.isin(ctx.name_id[cand], np.fromiter(wanted, dtype=np.int64, count=len(wanted)))]
    if step_window is not None and len(cand):
        cand = cand[(R["ts_ns"][cand] >= step_window[0]) & (R["ts_ns"][cand] <= step_window[1])]
    if not len(cand):
        return {}
    cand = cand[np.lexsort((-R["dur_ns"][cand], R["ts_ns"][cand]))]
    qk_ph, pv_ph = P.PHASE_INDEX["qk_matmul"], P.PHASE_INDEX["pv_matmul"]
    info: dict[int, dict] = {}
    sdpa_memo: dict[tuple[str, int], Optional[dict]] = {}  # every step repeats its calls' inputs (read only)
    # the loop reads single ops: Python lists answer that faster than numpy scalars
    ops = zip(
        cand.tolist(),
        tag.range_instance[cand].tolist(),
        R["ts_ns"][cand].tolist(),
        ctx.name_id[cand].tolist(),
        tag.range_phase[cand].tolist(),
        ctx.sig[cand].tolist(),
    )
    for r, inst, ts, nid, ph, sig in ops:
        d = info.setdefault(inst, {"ts": ts})
        nm = ctx.strings[nid]
        s = short_name(nm)
        if nm in SDPA_SCHEMAS and "sdpa" not in d:
            key = (nm, sig)
            if key not in sdpa_memo:
                sdpa_memo[key] = sdpa_shapes(nm, ctx.args(r) or [])
            sh = sdpa_memo[key]
            if sh and not sh["backward"]:
                d["sdpa"] = sh
                d["sdpa_op"] = nm
        elif ph == qk_ph and s in ("matmul", "bmm", "baddbmm", "mm") and "qk" not in d:
            a = [x for x in (ctx.args(r) or []) if x.is_tensor]
            if s == "baddbmm":
                a = a[1:]
            if len(a) >= 2 and len(a[0].shape) >= 2 and len(a[1].shape) >= 2:
                d["qk"] = (a[0], a[1])
                d["qk_calls"] = d.get("qk_calls", 0) + 1
        elif ph == pv_ph and s in ("matmul", "bmm", "baddbmm", "mm") and "pv" not in d:
            a = [x for x in (ctx.args(r) or []) if x.is_tensor]
            if s == "baddbmm":
                a = a[1:]
            if len(a) >= 2 and len(a[1].shape) >= 2:
                d["pv"] = (a[0], a[1])
        elif s == "expand" and "rep_kv" not in d:
            a = ctx.args(r) or []
            if a and a[0].is_tensor and len(a[0].shape) == 5 and a[0].shape[2] == 1:
                tgt = ints_text(a[1].value) if len(a) > 1 else None
                if tgt and len(tgt) == 5 and tgt[2] > 1:
                    d["rep_kv"] = (a[0].shape[1], tgt[2])
        elif s == "repeat_interleave" and "rep_kv" not in d:
            a = ctx.args(r) or []
            rep = int_value(a, 1)
            dim = int_value(a, 2)
            if a and a[0].is_tensor and len(a[0].shape) == 4 and rep and dim in (1, -3):
                d["rep_kv"] = (a[0].shape[1], rep)
    out = {}
    for inst, d in info.items():
        shapes = _shapes_of(d)
        if shapes is not None:
            out[inst] = shapes
    return out


def _shapes_of(d: dict) -> Optional[dict]:
    if "sdpa" in d:
        sh = d["sdpa"]
        b, h, hk, sq, sk, dd, dv = (sh[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv"))
        src = "sdpa_inputs"
        if "rep_kv" in d and hk == h and d["rep_kv"][0] * d["rep_kv"][1] == h:
            hk, src = d["rep_kv"][0], "repeat_kv"
        return dict(
            b=b,
            h=h,
            hk=hk,
            sq=sq,
            sk=sk,
            d=dd,
            dv=dv,
            dtype=sh["dtype"],
            itemsize=sh["itemsize"],
            heads_known=True,
            kv_source=src,
            op=d.get("sdpa_op"),
            score_numel=b * h * sq * sk,
            score_shape=[b, h, sq, sk],
        )
    if "qk" in d:
        qa, ka = d["qk"]
        r = matmul_dims(qa.shape, ka.shape)
        if r is None:
            return None
        _, sq, sk, dd, out_shape = r
        batch = out_shape[:-2]
        if len(batch) >= 2:
            b, h, heads_known = prod(batch[:-1]), batch[-1], True
        else:
            b, h, heads_known = prod(batch) if batch else 1, 1, False
        dv = dd
        if "pv" in d:
            dv = d["pv"][1].shape[-1]
        hk, src = h, "matmul_operands"
        if "rep_kv" in d and heads_known and d["rep_kv"][0] * d["rep_kv"][1] == h:
            hk, src = d["rep_kv"][0], "repeat_kv"
        return dict(
            b=b,
            h=h,
            hk=hk,
            sq=sq,
            sk=sk,
            d=dd,
            dv=dv,
            dtype=qa.dtype,
            itemsize=qa.itemsize,
            heads_known=heads_known,
            kv_source=src,
            op="QK^T/PV matmuls",
            score_numel=prod(out_shape),
            score_shape=list(out_shape),
        )
    return None


def fused_bytes(s: dict) -> dict:
    it = s["itemsize"]
    b, h, hk, sq, sk, d, dv = s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"]
    q = b * h * sq * d * it
    k = b * hk * sk * d * it
    v = b * hk * sk * dv * it
    o = b * h * sq * dv * it
    lse = b * h * sq * 4
    return {"q": q, "k": k, "v": v, "out": o, "logsumexp": lse, "alloc": o + lse, "working_set": q + k + v + o + lse}


def call_start(ctx: TraceContext, inst: int) -> int:
    if 0 <= inst < len(ctx.R["ts_ns"]):
        return int(ctx.R["ts_ns"][inst])
    return -1


def kv_bytes(s: dict) -> int:
    return s["b"] * s["hk"] * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"]
