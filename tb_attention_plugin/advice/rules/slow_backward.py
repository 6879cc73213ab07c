"""Backward attention much slower than its forward → what makes it so.

Premise: core attention's backward takes more than 1.4× the backward/forward ratio that is normal
for its implementation — the single-GPU ratio the backend table predicts at the trace's own SDPA
calls (the sweep measured 2.3–9× over its shapes: small sequences and batches run the backward
relatively slower), else the backend's mean over the table's unmasked shapes (FlashAttention 3.0×,
cuDNN 3.4×, mem-efficient 3.7×, math 1.1–1.3× on the H200), else 2.5× (the FLOP ratio) — for ≥ 1 %
of attention time, and its backward kernels do not overlap
collective communication (a DDP rank's backward shares the GPU with NCCL: that is contention, not
the kernel). FlexAttention gets its own fix (its kernel options), not SDPA's.

Estimate (attention GPU time, whole trace): backward − the normal ratio × forward.
"""

from __future__ import annotations

from typing import Any, Optional

from ...attention import patterns as P
from ...formats import rounded as _r, us as _us
from ..base import GPU, MIN_SHARE, Finding, Rule, Silent, group_kernels, phase_rows, total
from ..replay import WhatIf
from ..run import Run, is_flex
from ..sdpa_choice import _rows, arch_of, inputs_of_call, predict_once

BACKWARD_FLOP_RATIO = 2.5  # fused backward FLOPs / forward FLOPs
BACKWARD_SLACK = 1.4  # fire above the normal ratio × 1.4
COMM_OVERLAP_SHARE = 0.2  # backward overlapping communication for this share of its time: contention

FIX = """\
torch.use_deterministic_algorithms(False)      # deterministic flash / mem-efficient backwards are slower
from torch.nn.attention import SDPBackend, sdpa_kernel
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):   # compare backends for the backward
    loss = model(x).sum()
loss.backward()
q, k, v = q.contiguous(), k.contiguous(), v.contiguous()   # a strided q/k/v makes the backward copy"""


def normal_ratio(backend: Optional[str], arch: Optional[str]) -> tuple[float, str]:
    """The backward/forward time ratio the measured table gives this backend on this GPU family
    (mean over its shapes), else the FLOP ratio."""
    if backend:
        rows = [r for r in _rows(arch) if r["backend"] == backend and r["mask"] in ("none", "causal")]
        fw: dict[tuple, list[float]] = {}
        for r in rows:
            if r["pass"] == "forward":
                fw.setdefault(_shape_key(r), []).append(r["time_us"])
        # each backward against the forward of the same shapes (the mean of its forward rows)
        ratios = [
            r["time_us"] * len(fw[_shape_key(r)]) / sum(fw[_shape_key(r)])
            for r in rows
            if r["pass"] == "backward" and _shape_key(r) in fw
        ]
        if ratios:
            return sum(ratios) / len(ratios), f"{backend} on this GPU family (measured table)"
    return BACKWARD_FLOP_RATIO, "the FLOP ratio of a fused backward"


def _ratio_at_calls(run: Run, backend: Optional[str], arch: Optional[str]) -> Optional[tuple[float, str]]:
    """The backward/forward ratio the measured table predicts for ``backend`` at the trace's own SDPA
    calls (weighted by their forward time): it ranges 2.3-9x over the table's shapes, so a mean over
    shapes misjudges a call at a shape far from it."""
    if backend not in ("flash", "efficient", "cudnn"):
        return None
    num = den = 0.0
    for c in run.sdpa_calls():
        x = inputs_of_call(c, True)
        if x is None:
            continue
        pf = predict_once(backend, "forward", x, run, arch)
        pb = predict_once(backend, "backward", x, run, arch)
        if pf is None or pb is None or pf.source != "table" or pf.time_us <= 0:
            continue
        w = total(k for k in run.call_rows(c) if k["direction"] == "forward") or pf.time_us
        num += w * pb.time_us / pf.time_us
        den += w
    if den <= 0:
        return None
    return num / den, f"{backend} at these calls' shapes (measured table)"


def _shape_key(r: dict) -> tuple:
    return (r["mask"], bool(r.get("mask_batched")), r["d"], r["b"], r["h"], r["sq"], r["sk"], r["dtype"])


def _backend(rows: list[dict]) -> Optional[str]:
    from ...attention.backends import fused_backend

    t: dict = {}
    for k in rows:
        if k["phase"] == "fused_attention":
            b = fused_backend(k.get("op"), k.get("name"))
            if b:
                t[b] = t.get(b, 0.0) + (k["dur_us"] or 0.0)
    return max(t.items(), key=lambda x: x[1])[0] if t else None


def check(run: Run) -> Any:
    rows = run.k
    core = [k for k in rows if k["phase"] in P.CORE_PHASES]
    if not any(k["direction"] == "backward" for k in core):
        return Silent("no backward core attention in this trace")
    arch = arch_of(run)
    hits = []
    checked = []
    for kind in ("fused", "unfused"):
        members = [k for k in core if (k["phase"] == "fused_attention") == (kind == "fused")]
        f = total(k for k in members if k["direction"] == "forward")
        b = total(k for k in members if k["direction"] == "backward")
        if f <= 0 or b <= 0:
            continue
        be = (
            _backend(members)
            if kind == "fused"
            else ("math" if run.math_kernel_ids() & {k["id"] for k in members} else None)
        )
        ratio, basis = (_ratio_at_calls(run, be, arch) if kind == "fused" else None) or normal_ratio(be, arch)
        limit = ratio * BACKWARD_SLACK
        checked.append(f"{kind} backward {b / f:.1f}x forward (normal {ratio:.1f}x: {basis})")
        if b > limit * f and b >= MIN_SHARE * run.att_time:
            hits.append((kind, f, b, members, ratio, basis, be))
    if not hits:
        return Silent("; ".join(checked) or "no forward/backward pair of core attention")
    comm = run.rep.get("communication") or {}
    ov = comm.get("overlap_with_attention_us") or 0.0
    bwd_t = sum(b for _, _, b, *_ in hits)
    beside_comm = ov >= COMM_OVERLAP_SHARE * bwd_t
    gain = sum(b - ratio * f for _, f, b, _, ratio, _, _ in hits)
    flex = any(is_flex(m) for _, _, _, m, *_ in hits)
    parts, ev = [], []
    w = WhatIf()
    for kind, f, b, members, ratio, basis, be in hits:
        parts.append(
            f"{kind} core attention: backward {_us(b)} vs forward {_us(f)} ({b / f:.1f}x; normal {ratio:.1f}x, {basis})"
        )
        bwd_rows = [k for k in members if k["direction"] == "backward"]
        for k in bwd_rows:
            w.dur[k["id"]] = (k["dur_us"] or 0.0) * (ratio * f / b)
        ev.append(
            {
                "kind": kind,
                "backend": be,
                "forward_us": _r(f),
                "backward_us": _r(b),
                "ratio": _r(b / f, 2),
                "normal_ratio": _r(ratio, 2),
                "phases": phase_rows(members),
                "kernels": group_kernels(bwd_rows),
            }
        )
    if beside_comm:
        # A DDP/FSDP rank's backward shares SMs and memory bandwidth with NCCL: contention, not the kernel.
        return Finding(
            title="Backward attention slowed by communication running beside it",
            detail="; ".join(parts)
            + f". Collective communication (NCCL) overlaps attention for {_us(ov)} of its {_us(bwd_t)} backward: the "
            "kernels share the GPU with the all-reduce/all-gather, so the slowdown is contention, not the attention "
            "kernel; the same step on one GPU runs the backward at its normal ratio. The gain is at most the time "
            "over that ratio: the communication itself still has to run.",
            evidence={
                "directions": ev,
                "slack": BACKWARD_SLACK,
                "communication_overlap_us": _r(ov),
                "communication_share_of_backward": _r(min(1.0, ov / bwd_t), 3),
            },
            how=(
                "Give NCCL fewer SMs while compute runs (NCCL_MAX_CTAS / NCCL_MIN_CTAS), use larger DDP buckets "
                "(bucket_cap_mb) or FSDP's reshard_after_forward=False for fewer, larger collectives, and check with "
                "the same step on one GPU that the backward returns to its normal ratio."
            ),
            removable_us=bwd_t,
            gpu_gain_us=gain,
            what_if=w,
            id="slow_backward",
        )
    if flex:
        cause = (
            "FlexAttention's generated backward: its block sizes, a score_mod/mask_mod the backward "
            "recomputes, or a block mask that is not created once and reused"
        )
        how = (
            "Create the BlockMask once (create_block_mask outside the step) and reuse it; try "
            "flex_attention(..., kernel_options={'BLOCK_M': 64, 'BLOCK_N': 64}) for the backward; keep score_mod "
            "free of captured tensors that need gradients."
        )
    else:
        cause = (
            "deterministic mode, an extra dq accumulation pass, atomics, a fallback kernel for this shape, or a "
            "recomputation (activation checkpointing)"
        )
        how = (
            "Check torch.are_deterministic_algorithms_enabled() (deterministic flash/mem-efficient "
            "backwards are slower); compare SDPA backends for the backward with torch.nn.attention.sdpa_kernel "
            "(cuDNN and flash backwards differ by shape); keep q/k/v contiguous so the backward does not copy; "
            "with activation checkpointing the forward is recomputed inside the backward (expected)."
        )
    return Finding(
        detail="; ".join(parts) + f". No communication overlaps it, so the kernel itself is slow: {cause}.",
        evidence={"directions": ev, "slack": BACKWARD_SLACK, "communication_overlap_us": _r(ov)},
        how=how,
        removable_us=bwd_t,
        gpu_gain_us=gain,
        what_if=w,
    )


RULE = Rule(
    id="slow_backward",
    title="Backward attention much slower than its forward",
    premise=(
        "core attention's backward above 1.4× the normal backward/forward ratio of its backend (measured table, else "
        "2.5×), ≥ 1 % of attention time; when it overlaps collective communication for ≥ 20 % of it, the finding "
        "blames the contention, not the kernel"
    ),
    basis=GPU,
    estimate="µs of attention GPU time over the trace: backward − the normal ratio × forward",
    fix=FIX,
    twin="ddp_straggler",
    absent=("sdpa_flash_fwdbwd_causal", "gpt4l_sdpa_train", "gpt4l_naive_train"),
    check=check,
)
