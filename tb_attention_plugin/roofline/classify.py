"""Place a kernel on the roofline and say what bounds it.

``compute_util`` = achieved FLOP/s / the peak for the kernel's dtype and engine;
``memory_util``  = achieved bytes/s / the memory bandwidth.

``bound``:

* ``compute`` / ``memory`` — that roof is reached: its utilisation is at least ``ROOF_REACHED``
  and the larger of the two (for a kernel left of the ridge point memory_util > compute_util and
  vice versa, so this is the roofline's own verdict).
* ``latency`` — neither roof is reached. The reason names the likely cause from the launch
  record: too short to amortise the launch (< ``SHORT_KERNEL_US``), a grid smaller than the
  number of SMs, low estimated occupancy, or none of these (stalls, poor access pattern).
* ``unknown`` — FLOPs or bytes are unknown (no shapes recorded, or an op without a formula).

Thresholds are documented in docs/cost-model.md and checked against Nsight Compute in
validation/.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .cost import MATRIX, NONE, VECTOR

ROOF_REACHED = 0.5
SHORT_KERNEL_US = 5.0
LOW_OCCUPANCY_PCT = 20.0

_TF32_KERNEL = re.compile(r"tf32|xmma_gemm_tf32|s1688gemm|s16816gemm|_tf32_", re.I)
_F32_TENSOR_KERNEL = re.compile(r"f32f32_f32f32.*ffma|ffma|sgemm", re.I)


def peak_key(dtype: Optional[str], engine: str, kernel_name: str, available: dict,
             fp32_on_tensor_cores: bool = False) -> tuple[Optional[str], str]:
    """Which FLOP peak applies, and why."""
    if engine == NONE or dtype is None:
        return None, "data movement: no arithmetic roof"
    if engine == MATRIX:
        if dtype in ("bf16", "fp16", "fp8", "int8"):
            if dtype in available:
                return dtype, f"{dtype} matrix-engine peak"
            if dtype == "bf16" and "fp16" in available:
                return "fp32", "no bf16 matrix engine on this GPU: fp32 vector peak"
            return "fp32", f"no {dtype} matrix peak known: fp32 vector peak"
        if dtype == "fp32":
            if _TF32_KERNEL.search(kernel_name) and "tf32" in available:
                return "tf32", "fp32 matmul on TF32 Tensor Cores (kernel name says tf32)"
            if fp32_on_tensor_cores and "tf32" in available:
                return "tf32", "fp32 fused attention runs on TF32 Tensor Cores"
            return "fp32", "fp32 matmul without TF32 (PyTorch's default): fp32 vector peak"
        if dtype == "fp64":
            return ("fp64_tensor", "fp64 matrix-engine peak") if "fp64_tensor" in available else ("fp64", "fp64 peak")
        return "fp32", f"{dtype} matmul: fp32 vector peak"
    # vector work runs in fp32 "opmath" even for half inputs
    if dtype == "fp64":
        return "fp64", "fp64 vector peak"
    return "fp32", "elementwise math runs in fp32: fp32 vector peak"


@dataclass
class Verdict:
    bound: str
    reason: str
    compute_util: Optional[float]
    memory_util: Optional[float]
    achieved_flops_per_s: Optional[float]
    achieved_bytes_per_s: Optional[float]
    intensity: Optional[float]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def classify(dur_us: float, flops: Optional[float], nbytes: Optional[float], peak_flops: Optional[float],
             peak_bw: Optional[float], peak_label: str = "", blocks: int = 0, num_sms: Optional[int] = None,
             occupancy_pct: Optional[float] = None) -> Verdict:
    if dur_us <= 0:
        return Verdict("unknown", "zero duration", None, None, None, None, None)
    sec = dur_us * 1e-6
    afl = flops / sec if flops is not None else None
    aby = nbytes / sec if nbytes is not None else None
    intensity = (flops / nbytes) if (flops is not None and nbytes) else None
    if nbytes is None or flops is None:
        return Verdict("unknown", "FLOPs or bytes unknown (no recorded shapes, or an op without a cost formula)",
                       None, None, afl, aby, intensity)
    if peak_bw is None:
        return Verdict("unknown", "unknown GPU: give its peaks with --peaks", None, None, afl, aby, intensity)
    mu = aby / peak_bw
    cu = (afl / peak_flops) if (peak_flops and flops > 0) else 0.0
    if max(cu, mu) >= ROOF_REACHED:
        if cu >= mu:
            reason = f"reaches {_pct(cu)} of the {peak_label} ({_rate(afl, 'FLOP/s')})"
            return Verdict("compute", reason, cu, mu, afl, aby, intensity)
        reason = f"reaches {_pct(mu)} of memory bandwidth ({_rate(aby, 'B/s')})"
        return Verdict("memory", reason, cu, mu, afl, aby, intensity)
    why = []
    if dur_us < SHORT_KERNEL_US:
        why.append(f"only {dur_us:.1f} µs: launch overhead dominates")
    if num_sms and 0 < blocks < num_sms:
        why.append(f"grid of {blocks} blocks < {num_sms} SMs")
    if occupancy_pct is not None and 0 < occupancy_pct < LOW_OCCUPANCY_PCT:
        why.append(f"estimated occupancy {occupancy_pct:.0f}%")
    if not why:
        why.append("neither roof reached: stalls, poor access pattern or too little parallel work")
    reason = "; ".join(why) + f" ({_pct(mu)} of bandwidth, {_pct(cu)} of {peak_label or 'compute peak'})"
    return Verdict("latency", reason, cu, mu, afl, aby, intensity)
