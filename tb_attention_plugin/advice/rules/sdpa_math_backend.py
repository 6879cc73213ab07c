"""SDPA fell back to its math backend → what rules out the fused ones, and how to get one.

Premise: an ``aten::scaled_dot_product_attention`` call ran ``aten::_scaled_dot_product_attention_math``
and launched kernels. Estimate (attention GPU time, whole trace): the calls' kernel time less the
predicted time of the backend the dispatcher would pick once the blocker is fixed (sdpa_choice.py,
measured table), or of the best fused backend the inputs allow when nothing blocks them (forced).
"""

from __future__ import annotations

from typing import Any

from ...formats import rounded as _r, us as _us
from ..base import GPU, Finding, Rule, Silent, group_kernels, pct0, phase_rows, total
from ..equivalence import sdpa_line
from ..replay import WhatIf
from ..run import Run
from ..sdpa_choice import LABELS, Inputs, arch_of, choose, inputs_of_call, predict_once, why_not

HEAD_DIM_ALIGN = 8

FIX = """\
from torch.nn.attention import SDPBackend, sdpa_kernel
# let the dispatcher pick a fused backend (it raises, with the reason, if none applies)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
    out = F.scaled_dot_product_attention(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16),
                                         attn_mask=mask, enable_gqa=(q.size(1) != k.size(1)))  # the call's mask"""


def _shape_key(c: dict) -> tuple:
    s = c["shapes"] or {}
    return tuple(
        s.get(x) for x in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype", "causal", "mask_bytes", "dropout_p")
    ) + (c["enable_gqa"], c.get("mask_dtype"))


def call_inputs(c: dict) -> dict:
    s = c["shapes"] or {}
    out = {k: s.get(k) for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype", "causal", "dropout_p")}
    out["attn_mask"] = bool(s.get("mask_bytes"))
    out["mask_dtype"] = c.get("mask_dtype")
    out["enable_gqa"] = c["enable_gqa"]
    out["last_dim_strides"] = [a.strides[-1] if a.strides else None for a in c["qkv"]]
    out["contiguous"] = [a.is_contiguous() for a in c["qkv"]]
    return out


def math_reasons(c: dict) -> list[str]:
    s = c["shapes"] or {}
    why = []
    dt = s.get("dtype")
    if dt and dt not in ("fp16", "bf16"):
        why.append(
            f"inputs are {dt}: the flash and cuDNN kernels need fp16/bf16 (mem-efficient accepts fp32 "
            f"but is slower than bf16)"
        )
    d, dv = s.get("d"), s.get("dv")
    if d is not None and dv is not None and d != dv:
        why.append(f"query/key head dim {d} differs from the value head dim {dv}: flash needs them equal")
    if d is not None and d % HEAD_DIM_ALIGN:
        why.append(
            f"head dim {d} is not a multiple of {HEAD_DIM_ALIGN}: the mem-efficient and cuDNN kernels need aligned "
            f"head dims and flash pads them"
        )
    if d is not None and d > 256:
        why.append(f"head dim {d} > 256: beyond the flash kernel's limit")
    if s.get("mask_bytes"):
        md = c.get("mask_dtype")
        if md and dt and md not in ("bool", dt):
            why.append(f"the attn_mask is {md} while q/k/v are {dt}: cast it to {dt} (or pass a bool mask)")
        else:
            why.append(
                "an explicit attn_mask tensor is passed: flash takes no mask (is_causal=True only where the mask "
                "is the causal mask); mem-efficient and cuDNN take one, with its last dim aligned to 16 bytes"
            )
    for name, a in zip(("query", "key", "value"), c["qkv"]):
        if a.strides and a.strides[-1] != 1:
            why.append(
                f"{name} has last-dim stride {a.strides[-1]} (not contiguous in the head dim): fused kernels "
                f"need stride 1; call .contiguous() or fix the transpose"
            )
            break
    h, hk = s.get("h"), s.get("hk")
    if h and hk and h != hk and c["enable_gqa"] is not True:
        why.append(
            f"{h} query heads but {hk} key/value heads without enable_gqa=True: only the math backend "
            f"broadcasts this; pass enable_gqa=True (flash supports it) or repeat k/v"
        )
    return why


def fixed_inputs(x: Inputs) -> Inputs:
    """The inputs once the usual blockers are fixed: bf16, aligned head dims, a mask in the inputs'
    dtype (or is_causal), enable_gqa where KV heads are fewer."""
    dt = x.dtype if x.dtype in ("bf16", "fp16") else "bf16"
    pad = lambda d: d + (-d) % HEAD_DIM_ALIGN  # noqa: E731
    return Inputs(
        **dict(
            x.__dict__,
            dtype=dt,
            d=pad(x.d),
            dv=pad(x.dv),
            mask_dtype=dt if x.mask == "float" else None,
            enable_gqa=True if x.h != x.hk else x.enable_gqa,
        )
    )


def check(run: Run) -> Any:
    calls = [c for c in run.sdpa_calls() if c["backend"] == "math" and c["kernel_ids"]]
    if not calls:
        if run.trace is None:
            return Silent("no trace to read SDPA's op tree from (a cached report)")
        return Silent("no scaled_dot_product_attention call ran on the math backend")
    rows = [k for c in calls for k in run.call_rows(c)]
    t = total(rows)
    if t <= 0:
        return Silent("the math-backend calls launched no kernels")
    by_shape: dict = {}
    for c in calls:
        by_shape.setdefault(_shape_key(c), []).append(c)
    arch = arch_of(run)
    inputs, reasons, notes = [], [], []
    est, est_known = 0.0, True
    bwd = any(k["direction"] == "backward" for k in rows)
    chosen: set = set()
    for cs in by_shape.values():
        c = cs[0]
        for why in math_reasons(c):
            if why not in reasons:
                reasons.append(why)
        inp = call_inputs(c)
        inp["calls"] = len(cs)
        inputs.append(inp)
        x = inputs_of_call(c, bwd)
        if x is None:
            est_known = False
            continue
        fx = fixed_inputs(x)
        be, _ = choose(fx, arch)
        if be == "math":  # nothing fixable would leave math: the best fused backend these inputs allow
            be = next((b for b in ("cudnn", "flash", "efficient") if why_not(b, fx, arch) is None), "math")
        chosen.add(be)
        for pas in ("forward",) + (("backward",) if bwd else ()):
            p = predict_once(be, pas, fx, run, arch)
            if p is None:
                est_known = False
                continue
            est += p.time_us * len(cs)
            if p.note not in notes:
                notes.append(p.note)
    gain = max(0.0, t - est) if est_known else None
    upcast = [k for k in rows if k["phase"] in ("qk_matmul", "pv_matmul") and k["dtype"] == "fp32"]
    in_dt = {d for d in ((c["shapes"] or {}).get("dtype") for c in calls) if isinstance(d, str)}
    detail = (
        f"{len(calls)} scaled_dot_product_attention call(s) ran on the math backend: {len(rows)} kernels, "
        f"{_us(t)} ({pct0(t / run.att_time)} of attention time). "
    )
    if upcast and in_dt & {"bf16", "fp16"}:
        detail += (
            f"The math backend computes {'/'.join(sorted(in_dt & {'bf16', 'fp16'}))} inputs in fp32 here "
            f"(fp32 GEMMs: {_us(total(upcast))}) and materialises the full score matrix. "
        )
    if reasons:
        detail += "What rules out the fused backends, from the recorded inputs: " + "; ".join(reasons) + "."
    else:
        detail += (
            "No recorded input rules out a fused backend (dtype, head dim, mask, strides and heads all "
            "qualify), so the math backend was most likely forced: sdpa_kernel(SDPBackend.MATH), "
            "torch.backends.cuda.enable_flash_sdp(False) / enable_mem_efficient_sdp(False) / "
            "enable_cudnn_sdp(False), or a PyTorch build without fused kernels for this GPU."
        )
    if gain is not None:
        names = "/".join(LABELS.get(b, b) for b in sorted(chosen))
        detail += f" On {names} the same calls would take ~{_us(est)} ({'; '.join(notes)})."
    masked = any((c["shapes"] or {}).get("mask_bytes") for c in calls)
    gqa = any((c["shapes"] or {}).get("h") != (c["shapes"] or {}).get("hk") for c in calls if c["shapes"])
    how = (
        "Let PyTorch pick a fused kernel: remove sdpa_kernel(SDPBackend.MATH) / the enable_*_sdp(False) "
        "switches, or ask for one explicitly with `with torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION, "
        "SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):` (it raises, with the reason, if none "
        "applies). Flash and cuDNN need fp16/bf16 inputs (torch.autocast('cuda', dtype=torch.bfloat16)), "
        "head dims ≤ 256 and a multiple of 8"
        + (
            ", a mask in the inputs' dtype or none (is_causal=True instead only where the trace shows it causal)"
            if masked
            else ""
        )
        + " and q/k/v contiguous in the last dim"
        + ("; for GQA pass enable_gqa=True." if gqa else ".")
    )
    w = WhatIf()
    if gain is not None:
        for k in rows:
            w.dur[k["id"]] = (k["dur_us"] or 0.0) * (est / t)
    return Finding(
        detail=detail,
        fix_code=_fix_code(inputs),
        evidence={
            "time_us": _r(t),
            "share_of_attention": _r(t / run.att_time, 4),
            "calls": len(calls),
            "inputs": inputs,
            "blockers": reasons,
            "predicted_backend": sorted(chosen),
            "prediction": notes,
            "phases": phase_rows(rows),
            "kernels": group_kernels(rows),
            "fused_estimate_us": _r(est) if est_known else None,
        },
        how=how,
        removable_us=t,
        gpu_gain_us=gain,
        what_if=w if gain is not None else None,
    )


def _fix_code(inputs: list[dict]) -> str:
    """The fix for the first call shape, computing what the call computed: its mask or bias kept as
    attn_mask (in the inputs' dtype), is_causal only where the call passed it, enable_gqa only where
    K/V have fewer heads, the inputs cast to bf16 where they were fp32."""
    x = inputs[0] if inputs else {}
    dt = x.get("dtype")
    mask = "causal" if x.get("causal") else ("tensor" if x.get("attn_mask") else "none")
    target = dt if dt in ("bf16", "fp16") else "bf16"
    cast = x.get("mask_dtype") not in (None, "bool", target)
    line = sdpa_line(
        mask,
        gqa=bool(x.get("h") and x.get("hk") and x["h"] != x["hk"]),
        dropout=bool(x.get("dropout_p")),
        mask_cast=target if cast else None,
    )
    if dt not in ("bf16", "fp16"):
        line = line.replace("(q, k, v", "(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)", 1)
    return (
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        "# let the dispatcher pick a fused backend (it raises, with the reason, if none applies)\n"
        "with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):\n"
        f"    {line}"
    )


RULE = Rule(
    id="sdpa_math_backend",
    title="SDPA fell back to the math backend",
    premise="an scaled_dot_product_attention call ran aten::_scaled_dot_product_attention_math and launched kernels",
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: the math calls' kernel time − the predicted time (measured backend "
        "table) of the backend the dispatcher picks once the blockers are fixed"
    ),
    fix=FIX,
    twin="math_fallback_to_flash",
    absent=("sdpa_cudnn_fwd_full", "sdpa_flash_s2048_fwd", "naive_bf16_s2048_fwd", "hf_llama_sdpa_fwdbwd"),
    check=check,
)
