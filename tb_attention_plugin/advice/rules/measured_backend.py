"""A faster backend, measured by a replay beside the trace (tb-attention replay, replay/).

Premise: a ``*.replay.json`` beside the trace covers calls that run on a fused kernel, and another
backend ran the same call ≥ 10 % faster on this GPU. Estimate (attention GPU time, whole trace,
measured): each such call's kernel time in this trace × (1 − replayed best / replayed current).
The arithmetic and the replay's own checks live in replay/findings.py; this module is its rule.
"""

from __future__ import annotations

from typing import Any

from ..base import GPU, Finding, Rule, Silent
from ..run import Run

FIX = """\
from torch.nn.attention import SDPBackend, sdpa_kernel

with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):  # the backend the replay measured fastest
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # the call's own mask (or is_causal as it had)"""


def check(run: Run) -> Any:
    from ...replay.findings import measured_backend

    if not (run.rep.get("replay") or {}).get("measured"):
        return Silent("no replay results beside this trace (tb-attention replay --emit, then run the script)")
    m = measured_backend(run.rep, run.att_time)
    if m is None:
        return Silent("the replay measured no backend ≥ 10 % faster on these calls")
    return Finding(
        title=m["title"],
        detail=m["detail"],
        evidence=m["evidence"],
        how=m["how"],
        removable_us=m["removable_us"],
        gpu_gain_us=m["estimated_gain_us"],
    )


RULE = Rule(
    id="measured_backend",
    title="A faster attention backend, measured by a replay",
    premise="a replay beside the trace measured another backend ≥ 10 % faster on calls that run a fused kernel",
    basis=GPU,
    estimate="µs of attention GPU time over the trace, measured: kernel time × (1 − replayed best / replayed current)",
    fix=FIX,
    twin="memeff_to_flash",  # the replay's alternative against the twin trace that ran it
    absent=("sdpa_efficient_fwdbwd_causal", "sdpa_math_fwdbwd_causal"),  # no replay beside them
    check=check,
)
