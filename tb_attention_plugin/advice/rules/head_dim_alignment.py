"""Head dim not a multiple of 8 → pad it (or change the head count).

Premise: a head dim (SDPA's recorded inputs, or the contraction size of an eager QK^T matmul) that is
not a multiple of 8. Estimate (attention GPU time, whole trace):

* SDPA calls: their attention kernels' time less the predicted time of the backend the dispatcher
  picks at the padded head dim (sdpa_choice.py: cuDNN and mem-efficient reject unaligned head dims,
  flash pads them internally), on the padded FLOPs. The pad and copy kernels SDPA makes around the
  kernel are not in the gain: the fix as written (``F.pad`` of q/k/v per call, recorded by the twins
  ``headdim*_pad*``) makes the same copies; the detail names them as what an aligned head count removes;
* eager QK^T / PV matmuls: their time less the padded FLOPs at the rate the trace's own aligned
  attention GEMMs (the projections) reach; null when the trace has none.
"""

from __future__ import annotations

from typing import Any, Optional

from ...attention.headdim import head_dims
from ...formats import rounded as _r, us as _us
from ..base import GPU, Finding, Rule, Silent, total
from ..equivalence import sdpa_line
from ..replay import WhatIf
from ..run import Run
from ..sdpa_choice import LABELS, Inputs, arch_of, choose, inputs_of_call, predict_once

HEAD_DIM_ALIGN = 8

FIX = """\
# pad the head dim to the next multiple of 8 once (zeros change nothing when the scale is explicit)
pad = (-q.size(-1)) % 8
q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(head_dim))[..., :head_dim]
# or choose n_heads so that hidden // n_heads is a multiple of 8 (64, 80, 96, 128)"""


def _pad(d: int) -> int:
    return d + (-d) % HEAD_DIM_ALIGN


def check(run: Run) -> Any:
    arch = arch_of(run)
    dims: dict = {}
    seen: set = set()
    gain: Optional[float] = 0.0
    copies = 0.0  # the SDPA calls' pad and copy kernels (they stay with a per-call F.pad)
    notes: list[str] = []
    w = WhatIf()
    mask_kind = "none"  # the misaligned calls' mask, kept by the fix
    for c in run.sdpa_calls():
        s = c["shapes"]
        if not s:
            continue
        if s["d"] % HEAD_DIM_ALIGN or s["dv"] % HEAD_DIM_ALIGN:
            mask_kind = "causal" if s.get("causal") else ("tensor" if s.get("mask_bytes") else mask_kind)
        seen.update(c["kernel_ids"])
        rows = run.call_rows(c)
        t = total(rows)
        for d in {s["d"], s["dv"]}:
            e = dims.setdefault(d, {"time_us": 0.0, "calls": 0, "source": "sdpa inputs"})
            e["time_us"] += t
            e["calls"] += 1
        if s["d"] % HEAD_DIM_ALIGN == 0 and s["dv"] % HEAD_DIM_ALIGN == 0:
            continue
        bwd = any(k["direction"] == "backward" for k in rows)
        # the pads and copies around the kernel stay when q/k/v are padded per call (F.pad): only the
        # attention kernels are replaced by the padded call's
        fused = [k for k in rows if k["phase"] == "fused_attention"] or rows
        tf = total(fused)
        copies += t - tf
        x = inputs_of_call(c, bwd)
        if x is None or gain is None:
            gain = None
            continue
        xp = Inputs(**dict(x.__dict__, d=_pad(x.d), dv=_pad(x.dv)))
        be, _ = choose(xp, arch)
        pt = 0.0
        for pas in ("forward",) + (("backward",) if bwd else ()):
            p = predict_once(be, pas, xp, run, arch)
            if p is None:
                gain = None
                break
            pt += p.time_us
            note = f"at head dim {xp.d}: {p.note}"
            if note not in notes:
                notes.append(note)
        if gain is not None:
            gain += max(0.0, tf - pt)
            for k in fused:
                w.dur[k["id"]] = (k["dur_us"] or 0.0) * min(1.0, pt / tf) if tf else 0.0
            if LABELS.get(be) and f"padded: {LABELS[be]}" not in notes:
                notes.append(f"padded: {LABELS[be]}")
    eager = []
    for k in run.k:
        if k["id"] in seen or k["phase"] not in ("qk_matmul", "pv_matmul", "fused_attention"):
            continue
        if k["direction"] != "forward":  # the backward's matmuls contract over other dims
            continue
        # attention/headdim.py: the forward QK^T / PV contraction or the formula's d, dv
        for d in sorted(head_dims(k["phase"], k["direction"], k.get("cost_detail"))):
            e = dims.setdefault(d, {"time_us": 0.0, "calls": 0, "source": "kernel shapes"})
            e["time_us"] += k["dur_us"] or 0.0
            e["calls"] += 1
            if d % HEAD_DIM_ALIGN:
                eager.append((k, d))
                break
    bad = {d: e for d, e in dims.items() if d % HEAD_DIM_ALIGN}
    if not bad:
        return Silent(f"head dims {sorted(dims) or 'not recorded'} are multiples of {HEAD_DIM_ALIGN}")
    if eager and gain is not None:
        rate = _aligned_gemm_rate(run)
        if rate is None:
            gain = None
            notes.append("eager matmuls: no aligned attention GEMM in the trace to take a rate from")
        else:
            for k, d in eager:
                if not k["flops"]:
                    continue
                pt = k["flops"] * _pad(d) / d / rate * 1e6
                gain += max(0.0, (k["dur_us"] or 0.0) - pt)
                w.dur[k["id"]] = min(k["dur_us"] or 0.0, pt)
            notes.append(
                f"eager matmuls padded, at the {rate / 1e12:.0f} TFLOP/s the trace's aligned attention GEMMs reach"
            )
    t_all = sum(e["time_us"] for e in bad.values())
    desc = ", ".join(f"{d} ({_us(e['time_us'])}, from {e['source']})" for d, e in sorted(bad.items()))
    detail = (
        f"Attention runs with head dim {desc}. Tensor-core kernels work on 8-element (16-byte) "
        f"fragments: the mem-efficient and cuDNN SDPA kernels reject such head dims, flash pads them (wasted "
        f"work and a copy), and cuBLAS falls back to slower unaligned GEMMs."
    )
    if gain is not None:
        detail += f" Padded to {', '.join(str(_pad(d)) for d in sorted(bad))}: ~{_us(gain)} less ({'; '.join(notes)})."
    if copies > 0:
        detail += (
            f" The calls' pad and copy kernels ({_us(copies)}) stay when q/k/v are padded per call; an aligned "
            f"head count, or projection weights padded with zero rows, removes them too (not in the estimate)."
        )
    line = sdpa_line(mask_kind, scale="1 / math.sqrt(head_dim)") + "[..., :head_dim]"
    fix = (
        "# pad the head dim to the next multiple of 8 once (zeros change nothing when the scale is explicit)\n"
        "pad = (-q.size(-1)) % 8\n"
        "q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))\n" + line
    )
    return Finding(
        detail=detail,
        fix_code=fix,
        evidence={
            "call_mask": mask_kind,
            "head_dims": {
                str(d): {"time_us": _r(e["time_us"]), "calls": e["calls"], "source": e["source"], "padded": _pad(d)}
                for d, e in sorted(bad.items())
            },
            "time_us": _r(t_all),
            "copies_us": _r(copies),
            "prediction": notes,
        },
        how=(
            f"Choose a head dim that is a multiple of {HEAD_DIM_ALIGN} (64, 80, 96, 128): e.g. change "
            f"n_heads so that hidden / n_heads is aligned, or pad q/k/v to the next multiple of 8 once "
            f"(zeros in the pad do not change the result if the scale is set explicitly)."
        ),
        removable_us=min(t_all, run.att_time),
        gpu_gain_us=gain if gain else (None if gain is None else 0.0),
        what_if=w if gain else None,
    )


def _aligned_gemm_rate(run: Run) -> Optional[float]:
    """The time-weighted FLOP rate of the trace's aligned attention projection GEMMs."""
    fl = t = 0.0
    for k in run.k:
        if k["phase"] in ("qkv_proj", "out_proj") and k["flops"] and k["dur_us"]:
            cd = k.get("cost_detail") or {}
            if all(isinstance(cd.get(x), int) and cd[x] % HEAD_DIM_ALIGN == 0 for x in ("m", "n", "k") if x in cd):
                fl += k["flops"]
                t += k["dur_us"]
    return fl / (t * 1e-6) if t else None


RULE = Rule(
    id="head_dim_alignment",
    title="Head dimension not a multiple of 8",
    premise="a head dim (SDPA inputs, or the QK^T matmul's contraction) that is not a multiple of 8",
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: SDPA calls − the padded call on the backend the dispatcher then "
        "picks (measured table); eager matmuls − their padded FLOPs at the rate of the trace's aligned GEMMs"
    ),
    fix=FIX,
    twin="headdim100_to_104",
    absent=("naive_bf16_s2048_d64_fwd", "sdpa_flash_fwdbwd_causal_d128"),
    check=check,
)
