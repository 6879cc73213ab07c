"""The memory view's flags as findings: repeated casts and copies, K/V repeated per head, a KV cache
grown by ``cat``, host↔device transfers inside attention (memory/flags.py finds them).

Premise: a flag of the report's ``memory`` block with GPU time — ``repeated_copy`` (a cast or layout
copy of the same shape in two or more attention calls: autocast recasting fp32 weights every call),
``kv_expand`` (``repeat_kv`` / ``repeat_interleave``), ``kv_cache_cat``, ``host_device_transfer``.
``score_cast`` and ``sdpa_math_copies`` are part of ``fuse_attention`` / ``sdpa_math_backend``'s
time and stay with them. One finding per flag kind.

Estimate (attention GPU time, whole trace): the flagged copies' GPU time (the fix removes them);
the step figure replays the step without them and their launches.
"""

from __future__ import annotations

from typing import Any

from ...formats import rounded as _r, us as _us
from ..base import GPU, MIN_SHARE, Finding, Rule, Silent
from ..equivalence import softcap
from ..replay import WhatIf
from ..run import Run

KINDS = {
    "repeated_copy": "Repeated casts and copies inside attention",
    "kv_expand": "K/V repeated per query head: use enable_gqa",
    "kv_cache_cat": "KV cache grown by cat every step",
    "host_device_transfer": "Host↔device transfers inside attention",
}
COPY_CPU_US = 5.0  # unprofiled CPU time of one copy/cast op

FIX = """\
model.to(torch.bfloat16)                      # weights stored in the compute dtype: autocast stops recasting them
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # the call's own mask; no repeat_kv
cache = StaticCache(...)                      # or a preallocated [B, H, max_len, D] buffer written with index_copy_"""
# each flag kind's line of FIX: a finding shows the code of its own kind (a repeat_kv finding
# showed the autocast and KV cache lines too); transfers have none of their own and keep all of FIX
KIND_FIX = {
    "repeated_copy": FIX.splitlines()[0],
    "kv_expand": FIX.splitlines()[1],
    "kv_cache_cat": FIX.splitlines()[2],
}


FLEX_GQA_FIX = """\
from torch.nn.attention.flex_attention import flex_attention
def softcap(score, b, h, q_idx, kv_idx):          # the model's own logit soft-capping, kept
    return cap * torch.tanh(score / cap)
out = flex_attention(q, k, v, score_mod=softcap, enable_gqa=True)   # instead of repeat_kv(k), repeat_kv(v)"""


def check(run: Run) -> Any:
    mem = run.rep.get("memory") or {}
    flags = [f for f in mem.get("flags") or [] if f.get("code") in KINDS]
    timed = [f for f in flags if (f.get("time_us") or 0) > 0]
    if not timed:
        return Silent(
            "the memory view flags no repeated cast, K/V repeat, cache cat or transfer with GPU time"
            if not flags
            else "the memory view's flags carry no GPU time"
        )
    by: dict = {}
    for f in timed:
        by.setdefault(f["code"], []).append(f)
    ids = _copy_kernels(run, by)
    out = []
    for code, fs in by.items():
        t = sum(f["time_us"] or 0.0 for f in fs)
        if t < MIN_SHARE * run.att_time:
            continue
        w = WhatIf(removed=set(ids.get(code, ())))
        m = run.replay
        if m is not None:
            launched = m.launches(list(w.removed)).tolist()
            w.cpu_saved.extend((la, COPY_CPU_US) for la in launched if la == la)  # NaN: not replayed
        fix, how = KIND_FIX.get(code), "; ".join(x for x in dict.fromkeys(f.get("fix") or "" for f in fs) if x)
        capped = softcap(run.k) if code == "kv_expand" else None
        if capped:  # SDPA cannot soft-cap: the GQA-aware fused option that keeps the model is Flex
            fix = FLEX_GQA_FIX
            how = (
                f"The scores are soft-capped ({capped}), which no SDPA backend computes: use FlexAttention with "
                "the soft-cap as its score_mod and enable_gqa=True instead of repeating K/V per query head"
            )
        lines = "; ".join(f"{f['message']} ({f['evidence']})" for f in fs[:4])
        more = f"; and {len(fs) - 4} more" if len(fs) > 4 else ""
        out.append(
            Finding(
                id=f"memory_{code}",
                title=KINDS[code],
                detail=(
                    f"The memory view flags {len(fs)} {code.replace('_', ' ')} finding(s) inside attention, "
                    f"{_us(t)} of GPU time ({sum(f.get('calls') or 0 for f in fs)} calls): {lines}{more}."
                ),
                evidence={
                    "time_us": _r(t),
                    "flags": [
                        {
                            k: f.get(k)
                            for k in ("code", "message", "op", "shape", "phase", "direction", "calls", "time_us")
                        }
                        for f in fs
                    ],
                    "kernels_found": len(w.removed),
                },
                # the flags' distinct fixes, one clause each (joined with a bare space they read as one
                # run-on sentence in the tab and the text output)
                fix_code=fix,
                how=how,
                removable_us=min(t, run.att_time),
                gpu_gain_us=min(t, run.att_time),
                what_if=w,
            )
        )
    if not out:
        return Silent("the memory view's flagged copies take under 1 % of attention time")
    return out


def _copy_kernels(run: Run, by: dict) -> dict:
    """The GPU activities of each flag kind's copies: the memory block hands them over
    (``memory._kernel_ids``, dropped from the report after the advice); for transfers, the memcpy
    activities inside attention."""
    given = (run.rep.get("memory") or {}).get("_kernel_ids") or {}
    out: dict = {}
    for code in by:
        if code == "host_device_transfer":
            out[code] = [k["id"] for k in run.k if k.get("kind") == "memcpy"]
        else:
            out[code] = list(given.get(code) or ())
    return out


RULE = Rule(
    id="memory_traffic",
    title="Avoidable copies and casts inside attention",
    premise=(
        "a memory-view flag with GPU time: repeated casts/copies in every attention call, K/V repeated per head, a "
        "KV cache grown by cat, host↔device transfers"
    ),
    basis=GPU,
    estimate="µs of attention GPU time over the trace: the flagged copies' GPU time",
    fix=FIX,
    twin="prefill_repeat_kv_to_gqa",
    absent=("sdpa_flash_fwdbwd_causal", "sdpa_cudnn_fwd_full"),
    check=check,
)
