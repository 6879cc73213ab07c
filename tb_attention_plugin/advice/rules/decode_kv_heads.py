"""Memory-bound decode attention with as many KV heads as query heads → GQA / MQA.

Premise: decode — an SDPA call with a query of ≤ 16 tokens over a KV cache at least 4× longer, in a
trace without a backward pass (a training step's short attention, e.g. a video model's 16-frame
temporal attention, is not decode) — with as many KV heads as query heads, whose core kernels are
memory-bound (≥ half their time) or below the ridge point. Estimate (attention GPU time, whole
trace): time × the share of bytes GQA with 8 query heads per KV head would not move. The fix changes
the model (uptraining), so no twin measures the gain; its twin ``video_spatial_temporal`` is the
run where the premise is absent (a training step's temporal attention) and it must stay silent.
"""

from __future__ import annotations

from typing import Any

from ...attention import patterns as P
from ...formats import rounded as _r, us as _us
from ..base import GPU, MIN_SHARE, Finding, Rule, Silent, pct0, total
from ..replay import WhatIf
from ..run import Run

DECODE_MAX_SQ = 16
CACHE_RATIO = 4  # keys at least this many times the queries: a KV cache
GQA_GROUP = 8  # query heads per KV head suggested (Llama-style GQA)

FIX = """\
# n_kv_heads = n_heads // 8: project k/v to fewer heads and let the kernel share them
k = self.k_proj(x).view(b, s, n_kv_heads, head_dim).transpose(1, 2)
v = self.v_proj(x).view(b, s, n_kv_heads, head_dim).transpose(1, 2)
out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)   # uptrain from the MHA checkpoint"""


def check(run: Run) -> Any:
    if run.has_backward:
        return Silent("the trace has a backward pass: a training step, not decode")
    hits = []
    near = 0
    for c in run.sdpa_calls():
        s = c["shapes"]
        if not s or s["sq"] > DECODE_MAX_SQ:
            continue
        if s["sk"] < CACHE_RATIO * s["sq"]:
            near += 1
            continue
        if s["h"] != s["hk"] or s["h"] < 2:
            continue
        rows = [k for k in run.call_rows(c) if k["phase"] in P.CORE_PHASES]
        if not rows:
            continue
        t = total(rows)
        fl = sum(k["flops"] or 0.0 for k in rows)
        by = sum(k["bytes"] or 0.0 for k in rows)
        mem_t = total(k for k in rows if k["bound"] == "memory")
        ridge = (run.flops_peak.get(s["dtype"]) or run.peak_bf16 or 0) / run.bw if run.bw else None
        inten = fl / by if by else None
        memory_side = mem_t >= 0.5 * t or (inten is not None and ridge is not None and inten < ridge)
        if not memory_side:
            continue
        hits.append((c, s, rows, t, inten, ridge, mem_t))
    if not hits:
        if near:
            return Silent(f"{near} short-query call(s) attend over about as many keys as queries: no KV cache")
        return Silent("no memory-bound decode call (query ≤ 16 tokens over a KV cache) with one KV head per query head")
    t_all = sum(h[3] for h in hits)
    if t_all < MIN_SHARE * run.att_time:
        return Silent(f"decode calls without GQA take {_us(t_all)}, under 1 % of attention time")
    gain, ev = 0.0, []
    w = WhatIf()
    for _c, s, rows, t, inten, ridge, mem_t in hits:
        it = s["itemsize"]
        kv = 2.0 * s["b"] * s["hk"] * s["sk"] * s["d"] * it
        qo = 2.0 * s["b"] * s["h"] * s["sq"] * s["d"] * it
        g = max(1, s["h"] // GQA_GROUP) if s["h"] % GQA_GROUP == 0 else 1
        kv_new = kv * g / s["hk"]
        saved = (kv - kv_new) / (kv + qo)
        gain += t * saved
        for k in rows:
            w.dur[k["id"]] = (k["dur_us"] or 0.0) * (1 - saved)
        ev.append(
            {
                "b": s["b"],
                "h": s["h"],
                "hk": s["hk"],
                "sq": s["sq"],
                "sk": s["sk"],
                "d": s["d"],
                "dtype": s["dtype"],
                "time_us": _r(t),
                "memory_bound_us": _r(mem_t),
                "intensity": _r(inten, 3),
                "ridge_point": _r(ridge, 1),
                "kv_bytes_per_call": kv,
                "kv_bytes_with_gqa": kv_new,
                "suggested_kv_heads": g,
                "kv_bytes_with_mqa": kv / s["hk"],
            }
        )
    e = ev[0]
    detail = (
        f"Decode attention (query length {e['sq']}, {e['sk']} cached keys, no backward) reads {e['h']} key/value "
        f"heads for {e['h']} query heads: {_us(t_all)}, {pct0(t_all / run.att_time)} of attention time, on the "
        f"memory side of the roofline (intensity {e['intensity']} FLOP/B vs ridge point {e['ridge_point']}). Each "
        f"call moves {e['kv_bytes_per_call'] / 1e6:.1f} MB of KV cache; with {e['suggested_kv_heads']} KV heads (GQA, "
        f"{e['h'] // e['suggested_kv_heads']} query heads per KV head) it would move "
        f"{e['kv_bytes_with_gqa'] / 1e6:.1f} MB, with MQA {e['kv_bytes_with_mqa'] / 1e6:.2f} MB."
    )
    return Finding(
        detail=detail,
        evidence={"calls": ev, "time_us": _r(t_all), "share_of_attention": _r(t_all / run.att_time, 4)},
        how=(
            "Use grouped-query attention (n_kv_heads = n_heads / 8, as Llama 2/3 70B) or multi-query "
            "attention: project k/v to fewer heads and call F.scaled_dot_product_attention(q, k, v, "
            "enable_gqa=True). This changes the model (fine-tune or uptrain from the MHA checkpoint by "
            "mean-pooling KV heads); it also shrinks the KV cache by the same factor. Estimate: attention time "
            "scales with the bytes moved."
        ),
        removable_us=t_all,
        gpu_gain_us=gain,
        what_if=w,
    )


RULE = Rule(
    id="decode_kv_heads",
    title="Memory-bound decode attention without GQA/MQA",
    premise=(
        "an SDPA call with ≤ 16 query tokens over ≥ 4× as many cached keys, no backward pass in the trace, as many "
        "KV heads as query heads, its kernels memory-bound or below the ridge point"
    ),
    basis=GPU,
    estimate="µs of attention GPU time over the trace: time × the share of bytes GQA (8 query heads per KV head) saves",
    fix=FIX,
    twin="video_spatial_temporal",
    absent=("decode_gqa_flash", "sdpa_flash_s2048_fwd"),
    check=check,
)
