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
from ..sdpa_choice import LABELS, Inputs, arch_of, choose, inputs_of_call, predict_once

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
    fused = _fused_fp32(run, {k["id"] for k in rows})
    fused_rows = [k for f in fused for k in f["rows"]]
    t_mm = total(rows)
    t = t_mm + total(fused_rows)
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
        for f in fused:  # the fused fp32 SDPA calls: the backend SDPA picks for bf16, at its measured rate
            g += f["now_us"] - f["bf16_us"]
            ratio = f["bf16_us"] / f["now_us"] if f["now_us"] else 1.0
            for k in f["rows"]:
                w.dur[k["id"]] = (k["dur_us"] or 0.0) * ratio
        gain = g
    detail = (
        f"{len(rows)} attention matmul kernels run in fp32 on the fp32 vector peak ({p32 / 1e12:.1f} TFLOP/s"
        if p32
        else f"{len(rows)} attention matmul kernels run in fp32 ("
    )
    detail += (
        (f"; bf16 Tensor Cores: {p16 / 1e12:.0f} TFLOP/s" if p16 else "")
        + (f", TF32: {ptf / 1e12:.0f} TFLOP/s" if ptf else "")
        + f"): {_us(t_mm)}, {pct0(t_mm / run.att_time)} of attention time."
    )
    if fused:
        t_f, t_b = sum(f["now_us"] for f in fused), sum(f["bf16_us"] for f in fused)
        detail += (
            f" {sum(f['calls'] for f in fused)} fused SDPA call(s) run in fp32 on {LABELS[fused[0]['backend']]} "
            f"({_us(t_f)}); in bf16 SDPA picks {LABELS[fused[0]['bf16_backend']]}: ~{_us(t_b)} "
            f"({'; '.join(sorted({n for f in fused for n in f['notes']}))})."
        )
    comp = [k for k in rows if k["bound"] == "compute"]
    if comp:
        detail += f" {_us(total(comp))} of it is compute-bound on the fp32 roof."
    if gain is not None:
        detail += (
            " Estimated with compute-bound matmul kernels reaching the same fraction of the bf16 peak and "
            "memory-bound ones moving half the bytes"
            + (", the fused calls at the bf16 backend's measured rate." if fused else ".")
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
            "kernels": group_kernels(rows + fused_rows),
            "phases": phase_rows(rows + fused_rows),
            "fused_fp32_calls": [
                {k: (_r(v) if isinstance(v, float) else v) for k, v in f.items() if k not in ("rows", "notes")}
                for f in fused
            ],
            "peaks_flops_per_s": {"fp32": p32, "tf32": ptf, "bf16": p16},
        },
        how=how,
        removable_us=t,
        gpu_gain_us=gain,
        what_if=w if gain is not None else None,
    )


def _fused_fp32(run: Run, seen: set) -> list[dict]:
    """fp32 SDPA calls on a fused backend (mem-efficient runs fp32; flash and cuDNN do not), with the
    time of the backend SDPA would pick for the same call in bf16, per pass, from the measured table."""
    arch = arch_of(run)
    out: dict = {}
    for c in run.sdpa_calls():
        if c["backend"] not in ("efficient", "cudnn", "flash") or not c["kernel_ids"]:
            continue
        rows = [k for k in run.call_rows(c) if k["id"] not in seen]
        bwd = any(k["direction"] == "backward" for k in rows)
        x = inputs_of_call(c, bwd)
        if x is None or x.dtype != "fp32":
            continue
        xb = Inputs(**dict(x.__dict__, dtype="bf16"))
        alt, _ = choose(xb, arch)
        pred, now = 0.0, 0.0
        notes = set()
        for pas in ("forward", "backward"):
            tt = total(k for k in rows if k["direction"] == pas)
            if tt <= 0:
                continue
            p = predict_once(alt, pas, xb, run, arch) if alt in LABELS else None
            if p is None or p.source != "table":
                break
            pred += p.time_us
            now += tt
            notes.add(p.note)
        else:
            if now <= pred:
                continue
            e = out.setdefault(
                (c["backend"], alt),
                {
                    "backend": c["backend"],
                    "bf16_backend": alt,
                    "calls": 0,
                    "now_us": 0.0,
                    "bf16_us": 0.0,
                    "rows": [],
                    "notes": set(),
                },
            )
            e["calls"] += 1
            e["now_us"] += now
            e["bf16_us"] += pred
            e["rows"] += rows
            e["notes"] |= notes
    return list(out.values())


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
