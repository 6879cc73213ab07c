"""Attention matmuls in fp32 → bf16 autocast (or TF32).

Premise: attention matmul kernels (matmul/linear/SDPA cost ops) run in fp32 on the fp32 vector roof
for ≥ 1 % of attention time; the kernels of a math-backend call on bf16/fp16 inputs (its internal
upcast) are that rule's. Estimate (attention GPU time, whole trace): compute-bound kernels reach the
same fraction of the bf16 peak (time × (1 − fp32 peak / bf16 peak)), memory-bound ones move half
the bytes (half their time).
"""

from __future__ import annotations

from typing import Any, Optional

from ...attention import patterns as P
from ...formats import rounded as _r, us as _us
from ..base import GPU, MIN_SHARE, Finding, Rule, Silent, group_kernels, pct0, phase_rows, total
from ..replay import WhatIf
from ..run import Run

_MATMUL_PHASES = ("qkv_proj", "qk_matmul", "pv_matmul", "out_proj", "fused_attention")
_MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "_scaled_mm", "einsum"})

FIX = """\
with torch.autocast("cuda", dtype=torch.bfloat16):   # or model.to(torch.bfloat16)
    out = model(x)
# a model that must stay fp32: TF32 matmuls
torch.backends.cuda.matmul.allow_tf32 = True          # torch.set_float32_matmul_precision("high")"""


def _is_matmul_op(op: Optional[str]) -> bool:
    if not op:
        return False
    return P.short_op(op) in _MATMUL_OPS or bool(P.SDPA_OP.match(op))


def check(run: Run) -> Any:
    math_bf16 = {
        i
        for c in run.sdpa_calls()
        if c["backend"] == "math" and (c["shapes"] or {}).get("dtype") in ("bf16", "fp16")
        for i in c["kernel_ids"]
    }
    rows = [
        k
        for k in run.k
        if k["phase"] in _MATMUL_PHASES
        and k["dtype"] == "fp32"
        and (k["flops"] or 0) > 0
        and k["peak"] == "fp32"
        and k["id"] not in math_bf16
        and _is_matmul_op(k.get("cost_op"))
    ]
    t = total(rows)
    if t <= 0:
        return Silent("no attention matmul runs in fp32 on the fp32 roof")
    if t < MIN_SHARE * run.att_time:
        return Silent(f"fp32 attention matmuls take {_us(t)}, under 1 % of attention time")
    p32, p16, ptf = run.flops_peak.get("fp32"), run.peak_bf16, run.flops_peak.get("tf32")
    gain = None
    w = WhatIf()
    if p32 and p16:
        g = 0.0
        for k in rows:
            d = k["dur_us"] or 0.0
            if k["bound"] == "compute":
                nd = d * p32 / p16  # same fraction of the bf16 peak
            elif k["bound"] == "memory":
                nd = d * 0.5  # half the bytes
            else:
                nd = d
            g += d - nd
            w.dur[k["id"]] = nd
        gain = g
    detail = (
        f"{len(rows)} attention matmul kernels run in fp32 on the fp32 vector peak ({p32 / 1e12:.1f} TFLOP/s"
        if p32
        else f"{len(rows)} attention matmul kernels run in fp32 ("
    )
    detail += (
        (f"; bf16 Tensor Cores: {p16 / 1e12:.0f} TFLOP/s" if p16 else "")
        + (f", TF32: {ptf / 1e12:.0f} TFLOP/s" if ptf else "")
        + f"): {_us(t)}, {pct0(t / run.att_time)} of attention time."
    )
    comp = [k for k in rows if k["bound"] == "compute"]
    if comp:
        detail += f" {_us(total(comp))} of it is compute-bound on the fp32 roof."
    if gain is not None:
        detail += (
            " Estimated with compute-bound kernels reaching the same fraction of the bf16 peak and "
            "memory-bound ones moving half the bytes."
        )
    how = (
        "Run attention in bf16: `with torch.autocast('cuda', dtype=torch.bfloat16):` around the forward (or "
        "model.to(torch.bfloat16)); fused SDPA kernels then apply too. If the model must stay fp32, allow TF32 "
        "for matmuls: torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))."
    )
    return Finding(
        detail=detail,
        evidence={
            "time_us": _r(t),
            "share_of_attention": _r(t / run.att_time, 4),
            "kernels": group_kernels(rows),
            "phases": phase_rows(rows),
            "peaks_flops_per_s": {"fp32": p32, "tf32": ptf, "bf16": p16},
        },
        how=how,
        removable_us=t,
        gpu_gain_us=gain,
        what_if=w if gain is not None else None,
    )


RULE = Rule(
    id="fp32_attention",
    title="Attention matmuls run in fp32",
    premise="attention matmul kernels in fp32 on the fp32 roof for ≥ 1 % of attention time (not a math-backend upcast)",
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: compute-bound fp32 kernels × (1 − fp32 peak / bf16 peak), "
        "memory-bound ones halved"
    ),
    fix=FIX,
    twin="fp32_to_bf16",
    absent=("naive_bf16_s2048_fwd", "naive_fp16_s2048_d128_fwd", "sdpa_math_s2048_fwd"),
    check=check,
)
