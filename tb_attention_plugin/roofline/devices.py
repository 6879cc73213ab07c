"""Device peaks: the roofs of the roofline, with where each number comes from.

Peaks are dense (no sparsity) per-GPU numbers. ``flops`` keys:

* ``fp64``, ``fp32``: vector (CUDA-core / shader) FMA peak. Elementwise work and fp32 matmul
  without TF32 (PyTorch's default: ``torch.backends.cuda.matmul.allow_tf32 = False``) run here.
* ``fp64_tensor``, ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``int8``: matrix-engine peaks
  (Tensor Cores / Matrix Cores) for matmul-like kernels of that input type.

``memory_bandwidth`` is DRAM/HBM bytes per second. ``l2_mib`` is the last-level cache size (from
the vendors' architecture documents; the H200's as PyTorch reports it on the device here), used
to estimate which writes stay in cache during a kernel. Each device carries ``sources``: a datasheet
reference, or a measurement (with what was measured). Where a measurement exists it is the
default basis, because achievable peaks make utilisation comparable across kernels; the
datasheet numbers stay available with ``--peak-basis datasheet``. A measured figure taken apart
from the others (the H200's fp8 ``_scaled_mm`` peak) carries its own source in ``sources``.

ROCm reports one device per GCD (an MI250 is two), so AMD entries are per GCD.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Optional

T = 1e12

# name regex, key, label, datasheet peaks, source
_TABLE: list[dict[str, Any]] = [
    dict(
        key="GB200",
        l2_mib=126,
        match=r"GB200",
        label="NVIDIA GB200 (one Blackwell GPU)",
        flops=dict(
            fp64=40 * T,
            fp32=80 * T,
            fp64_tensor=40 * T,
            tf32=1250 * T,
            bf16=2500 * T,
            fp16=2500 * T,
            fp8=5000 * T,
            int8=5000 * T,
        ),
        memory_bandwidth=8.0e12,
        source=(
            "NVIDIA GB200 NVL72 datasheet, per GPU (dense = half the sparsity figures: BF16 5 PF, "
            "FP8 10 PF, TF32 2.5 PF sparse; FP32 80 TF, FP64 40 TF; 186 GB HBM3e at 8 TB/s)"
        ),
    ),
    dict(
        key="B200",
        l2_mib=126,
        match=r"\bB200\b",
        label="NVIDIA B200 (HGX, 1000 W)",
        flops=dict(
            fp64=37 * T,
            fp32=75 * T,
            fp64_tensor=37 * T,
            tf32=1100 * T,
            bf16=2250 * T,
            fp16=2250 * T,
            fp8=4500 * T,
            int8=4500 * T,
        ),
        memory_bandwidth=7.7e12,
        source=(
            "NVIDIA HGX B200 datasheet, per GPU (dense = half the sparsity figures: BF16 4.5 PF, FP8 "
            "9 PF, TF32 2.2 PF sparse; FP32 75 TF, FP64 37 TF; 180 GB HBM3e at 7.7 TB/s)"
        ),
    ),
    dict(
        key="B100",
        l2_mib=126,
        match=r"\bB100\b",
        label="NVIDIA B100 (700 W)",
        flops=dict(
            fp64=30 * T,
            fp32=60 * T,
            fp64_tensor=30 * T,
            tf32=900 * T,
            bf16=1750 * T,
            fp16=1750 * T,
            fp8=3500 * T,
            int8=3500 * T,
        ),
        memory_bandwidth=8.0e12,
        source="NVIDIA Blackwell launch figures for B100 (dense = half of BF16 3.5 PF / FP8 7 PF sparse; 8 TB/s)",
    ),
    dict(
        key="H200-SXM",
        l2_mib=60,
        match=r"H200(?!.*NVL)",
        label="NVIDIA H200 SXM 141GB",
        flops=dict(
            fp64=34 * T,
            fp32=67 * T,
            fp64_tensor=67 * T,
            tf32=494.7 * T,
            bf16=989.4 * T,
            fp16=989.4 * T,
            fp8=1978.9 * T,
            int8=1978.9 * T,
        ),
        memory_bandwidth=4.8e12,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM column; dense = half the sparsity figures)",
        measured=dict(
            flops=dict(bf16=801.5 * T, fp16=801.5 * T, fp32=50.5 * T, tf32=440.3 * T, fp8=1467 * T),
            memory_bandwidth=4.24e12,
            source=(
                "measured on an H200 SXM here: 8192^3 dense matmul (bf16 801.5, fp32 "
                "without TF32 50.5, TF32 440.3 TFLOP/s; fp16 taken equal to bf16); "
                "device-to-device copy 4.24 TB/s"
            ),
            sources=dict(
                fp8=(
                    "measured on an H200 SXM here with torch 2.11: torch._scaled_mm of "
                    "float8_e4m3fn operands at 8192^3, bf16 output, 1467 TFLOP/s "
                    "(datasheet dense: 1978.9)"
                )
            ),
            # Real kernels measured on this GPU above a benchmark: that figure is no ceiling, so the
            # roof is the datasheet's (docs/cost-model.md, *Roofs from the best evidence*).
            beaten=dict(
                bf16=(
                    "GEMMs with exact FLOPs (2·M·N·K from their recorded shapes) ran at up to 926 TFLOP/s on "
                    "an H200 SXM in our recorded traces (an nvjet 192x192 GEMM of 687 µs in a GPT training step; "
                    "830 TFLOP/s in a Hugging Face Llama training step), above the 801.5 TFLOP/s of the "
                    "8192^3 benchmark"
                ),
                fp16=(
                    "fp16 runs on the same Tensor Cores at the bf16 rate, which GEMMs with exact FLOPs beat "
                    "(926 TFLOP/s against the 801.5 benchmark)"
                ),
                memory_bandwidth=(
                    "Nsight Compute measured up to 4.42 TB/s of DRAM traffic (dram__bytes read + write over "
                    "gpu__time_duration; 91.9 % of its DRAM peak) on an elementwise kernel moving 1.33 GB in "
                    "302 µs (our Nsight Compute validation of 2026-11-30), above the 4.24 TB/s copy benchmark"
                ),
            ),
        ),
    ),
    dict(
        key="H200-NVL",
        l2_mib=60,
        match=r"H200.*NVL",
        label="NVIDIA H200 NVL",
        flops=dict(
            fp64=30 * T,
            fp32=60 * T,
            fp64_tensor=60 * T,
            tf32=417.5 * T,
            bf16=835.5 * T,
            fp16=835.5 * T,
            fp8=1670.5 * T,
            int8=1670.5 * T,
        ),
        memory_bandwidth=4.8e12,
        source="NVIDIA H200 NVL datasheet (dense)",
    ),
    dict(
        key="H100-PCIe",
        l2_mib=50,
        match=r"H100.*PCIe",
        label="NVIDIA H100 PCIe 80GB",
        flops=dict(
            fp64=26 * T,
            fp32=51 * T,
            fp64_tensor=51 * T,
            tf32=378 * T,
            bf16=756 * T,
            fp16=756 * T,
            fp8=1513 * T,
            int8=1513 * T,
        ),
        memory_bandwidth=2.0e12,
        source="NVIDIA H100 Tensor Core GPU datasheet (PCIe column, dense)",
    ),
    dict(
        key="H100-NVL",
        l2_mib=50,
        match=r"H100.*NVL",
        label="NVIDIA H100 NVL 94GB",
        flops=dict(
            fp64=30 * T,
            fp32=60 * T,
            fp64_tensor=60 * T,
            tf32=417.5 * T,
            bf16=835.5 * T,
            fp16=835.5 * T,
            fp8=1670.5 * T,
            int8=1670.5 * T,
        ),
        memory_bandwidth=3.9e12,
        source="NVIDIA H100 NVL datasheet (per GPU, dense)",
    ),
    dict(
        key="H20",
        l2_mib=60,
        match=r"\bH20\b",
        label="NVIDIA H20 96GB",
        flops=dict(
            fp64=1 * T,
            fp32=44 * T,
            fp64_tensor=1 * T,
            tf32=74 * T,
            bf16=148 * T,
            fp16=148 * T,
            fp8=296 * T,
            int8=296 * T,
        ),
        memory_bandwidth=4.0e12,
        source="NVIDIA H20 product brief (dense: BF16 148, FP8 296, TF32 74, FP32 44 TFLOP/s; 96 GB HBM3 at 4.0 TB/s)",
    ),
    dict(
        key="H800",
        l2_mib=50,
        match=r"H800",
        label="NVIDIA H800 SXM5 80GB",
        flops=dict(
            fp64=1 * T,
            fp32=67 * T,
            fp64_tensor=1 * T,
            tf32=494.7 * T,
            bf16=989.4 * T,
            fp16=989.4 * T,
            fp8=1978.9 * T,
            int8=1978.9 * T,
        ),
        memory_bandwidth=3.35e12,
        source="NVIDIA H800 SXM5 datasheet (dense): H100 SXM's Tensor Core and memory figures, FP64 cut to 1 TFLOP/s",
    ),
    dict(
        key="H100-SXM",
        l2_mib=50,
        match=r"H100",
        label="NVIDIA H100 SXM5 80GB",
        flops=dict(
            fp64=34 * T,
            fp32=67 * T,
            fp64_tensor=67 * T,
            tf32=494.7 * T,
            bf16=989.4 * T,
            fp16=989.4 * T,
            fp8=1978.9 * T,
            int8=1978.9 * T,
        ),
        memory_bandwidth=3.35e12,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM column, dense); an unqualified 'H100' is taken as SXM",
    ),
    dict(
        key="A100-PCIe-80GB",
        l2_mib=40,
        match=r"A100.*(PCIE.*80GB|80GB.*PCIE)",
        label="NVIDIA A100 80GB PCIe",
        flops=dict(
            fp64=9.7 * T, fp32=19.5 * T, fp64_tensor=19.5 * T, tf32=156 * T, bf16=312 * T, fp16=312 * T, int8=624 * T
        ),
        memory_bandwidth=1.935e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe, dense)",
    ),
    dict(
        key="A100-80GB",
        l2_mib=40,
        match=r"A100.*80GB|A100.*80G\b",
        label="NVIDIA A100 80GB (SXM4)",
        flops=dict(
            fp64=9.7 * T, fp32=19.5 * T, fp64_tensor=19.5 * T, tf32=156 * T, bf16=312 * T, fp16=312 * T, int8=624 * T
        ),
        memory_bandwidth=2.039e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM, dense)",
    ),
    dict(
        key="A100-40GB",
        l2_mib=40,
        match=r"A100",
        label="NVIDIA A100 40GB",
        flops=dict(
            fp64=9.7 * T, fp32=19.5 * T, fp64_tensor=19.5 * T, tf32=156 * T, bf16=312 * T, fp16=312 * T, int8=624 * T
        ),
        memory_bandwidth=1.555e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (40GB, dense); A100 names without a size are matched by memory",
    ),
    dict(
        key="V100S",
        l2_mib=6,
        match=r"V100S",
        label="NVIDIA V100S PCIe 32GB",
        flops=dict(fp64=8.2 * T, fp32=16.4 * T, fp16=130 * T),
        memory_bandwidth=1.134e12,
        source="NVIDIA V100S datasheet",
    ),
    dict(
        key="V100-PCIe",
        l2_mib=6,
        match=r"V100.*PCIE",
        label="NVIDIA V100 PCIe",
        flops=dict(fp64=7 * T, fp32=14 * T, fp16=112 * T),
        memory_bandwidth=0.9e12,
        source="NVIDIA V100 datasheet (PCIe column)",
    ),
    dict(
        key="V100-SXM2",
        l2_mib=6,
        match=r"V100",
        label="NVIDIA V100 SXM2",
        flops=dict(fp64=7.8 * T, fp32=15.7 * T, fp16=125 * T),
        memory_bandwidth=0.9e12,
        source="NVIDIA V100 datasheet (SXM2 column; DGX Station V100-DGXS uses the same clocks); no bf16 Tensor Cores",
    ),
    dict(
        key="L40S",
        l2_mib=96,
        match=r"L40S",
        label="NVIDIA L40S",
        flops=dict(fp32=91.6 * T, tf32=183 * T, bf16=362.05 * T, fp16=362.05 * T, fp8=733 * T, int8=733 * T),
        memory_bandwidth=0.864e12,
        source="NVIDIA L40S datasheet (dense)",
    ),
    dict(
        key="L4",
        l2_mib=48,
        match=r"\bL4\b",
        label="NVIDIA L4",
        flops=dict(fp32=30.3 * T, tf32=60 * T, bf16=121 * T, fp16=121 * T, fp8=242.5 * T, int8=242.5 * T),
        memory_bandwidth=0.3e12,
        source="NVIDIA L4 datasheet (dense = half the sparsity figures)",
    ),
    dict(
        key="A10",
        l2_mib=6,
        match=r"\bA10\b|A10G",
        label="NVIDIA A10",
        flops=dict(fp32=31.2 * T, tf32=62.5 * T, bf16=125 * T, fp16=125 * T, int8=250 * T),
        memory_bandwidth=0.6e12,
        source="NVIDIA A10 datasheet (dense)",
    ),
    dict(
        key="RTX4090",
        l2_mib=72,
        match=r"RTX 4090",
        label="NVIDIA GeForce RTX 4090",
        flops=dict(
            fp64=1.29 * T, fp32=82.6 * T, tf32=82.6 * T, bf16=165.2 * T, fp16=165.2 * T, fp8=330.3 * T, int8=660.6 * T
        ),
        memory_bandwidth=1.008e12,
        source="NVIDIA Ada GPU architecture whitepaper, RTX 4090 (Tensor peaks with FP32 accumulate, as PyTorch uses)",
    ),
    dict(
        key="RTX5090",
        l2_mib=96,
        match=r"RTX 5090",
        label="NVIDIA GeForce RTX 5090",
        flops=dict(fp32=104.8 * T, tf32=104.8 * T, bf16=209.5 * T, fp16=209.5 * T, fp8=419 * T, int8=838 * T),
        memory_bandwidth=1.792e12,
        source="NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090 (dense, Tensor peaks with FP32 accumulate)",
    ),
    dict(
        key="RTX6000Ada",
        l2_mib=96,
        match=r"RTX 6000 Ada",
        label="NVIDIA RTX 6000 Ada Generation",
        flops=dict(fp32=91.1 * T, tf32=182.1 * T, bf16=364.2 * T, fp16=364.2 * T, fp8=728.5 * T, int8=728.5 * T),
        memory_bandwidth=0.96e12,
        source="NVIDIA RTX 6000 Ada datasheet (dense = half the sparsity figures)",
    ),
    dict(
        key="L40",
        l2_mib=96,
        match=r"\bL40\b",
        label="NVIDIA L40",
        flops=dict(fp32=90.5 * T, tf32=90.5 * T, bf16=181 * T, fp16=181 * T, fp8=362 * T, int8=362 * T),
        memory_bandwidth=0.864e12,
        source="NVIDIA L40 datasheet (dense = half the sparsity figures)",
    ),
    dict(
        key="RTX4080",
        l2_mib=64,
        match=r"RTX 4080",
        label="NVIDIA GeForce RTX 4080",
        flops=dict(fp32=48.7 * T, tf32=48.7 * T, bf16=97.5 * T, fp16=97.5 * T, fp8=194.9 * T, int8=389.9 * T),
        memory_bandwidth=0.7168e12,
        source="NVIDIA Ada GPU architecture whitepaper, RTX 4080 (dense, Tensor peaks with FP32 accumulate)",
    ),
    dict(
        key="RTX3090",
        l2_mib=6,
        match=r"RTX 3090",
        label="NVIDIA GeForce RTX 3090",
        flops=dict(fp32=35.6 * T, tf32=35.6 * T, bf16=71 * T, fp16=71 * T, int8=284 * T),
        memory_bandwidth=0.936e12,
        source="NVIDIA Ampere GA102 GPU architecture whitepaper, RTX 3090 (dense, Tensor peaks with FP32 accumulate)",
    ),
    dict(
        key="RTX3080",
        l2_mib=5,
        match=r"RTX 3080",
        label="NVIDIA GeForce RTX 3080",
        flops=dict(fp32=29.8 * T, tf32=29.8 * T, bf16=59.5 * T, fp16=59.5 * T, int8=238 * T),
        memory_bandwidth=0.76e12,
        source="NVIDIA Ampere GA102 GPU architecture whitepaper, RTX 3080 (dense, Tensor peaks with FP32 accumulate)",
    ),
    dict(
        key="RTXA6000",
        l2_mib=6,
        match=r"RTX A6000",
        label="NVIDIA RTX A6000",
        flops=dict(fp32=38.7 * T, tf32=77.4 * T, bf16=154.8 * T, fp16=154.8 * T, int8=309.7 * T),
        memory_bandwidth=0.768e12,
        source="NVIDIA RTX A6000 datasheet (dense = half the sparsity figures)",
    ),
    dict(
        key="A40",
        l2_mib=6,
        match=r"\bA40\b",
        label="NVIDIA A40",
        flops=dict(fp32=37.4 * T, tf32=74.8 * T, bf16=149.7 * T, fp16=149.7 * T, int8=299.3 * T),
        memory_bandwidth=0.696e12,
        source="NVIDIA A40 datasheet (dense = half the sparsity figures)",
    ),
    dict(
        key="A30",
        l2_mib=24,
        match=r"\bA30\b",
        label="NVIDIA A30",
        flops=dict(
            fp64=5.2 * T, fp32=10.3 * T, fp64_tensor=10.3 * T, tf32=82 * T, bf16=165 * T, fp16=165 * T, int8=330 * T
        ),
        memory_bandwidth=0.933e12,
        source="NVIDIA A30 datasheet (dense)",
    ),
    dict(
        key="RTX2080Ti",
        l2_mib=5.5,
        match=r"RTX 2080 Ti",
        label="NVIDIA GeForce RTX 2080 Ti",
        flops=dict(fp32=13.4 * T, fp16=53.8 * T, int8=215.2 * T),
        memory_bandwidth=0.616e12,
        source="NVIDIA Turing GPU architecture whitepaper, RTX 2080 Ti reference (FP16 Tensor with FP32 accumulate)",
    ),
    dict(
        key="T4",
        l2_mib=4,
        match=r"\bT4\b",
        label="NVIDIA T4",
        flops=dict(fp32=8.1 * T, fp16=65 * T, int8=130 * T),
        memory_bandwidth=0.32e12,
        source="NVIDIA T4 datasheet",
    ),
    dict(
        key="GP100",
        l2_mib=4,
        match=r"GP100",
        label="NVIDIA Quadro GP100",
        flops=dict(fp64=5.2 * T, fp32=10.3 * T),
        memory_bandwidth=0.717e12,
        source="NVIDIA Quadro GP100 datasheet (no Tensor Cores)",
    ),
    dict(
        key="MI355X",
        l2_mib=256,
        match=r"MI355X",
        label="AMD Instinct MI355X",
        flops=dict(
            fp64=78.6 * T,
            fp32=157.3 * T,
            fp64_tensor=78.6 * T,
            bf16=2516.6 * T,
            fp16=2516.6 * T,
            fp8=5033.2 * T,
            int8=5033.2 * T,
        ),
        memory_bandwidth=8.0e12,
        source="AMD Instinct MI355X data sheet (dense; 256 CUs, 288 GB HBM3E at 8 TB/s, 256 MB Infinity Cache)",
    ),
    dict(
        key="MI350X",
        l2_mib=256,
        match=r"MI350X",
        label="AMD Instinct MI350X",
        flops=dict(
            fp64=72.1 * T,
            fp32=144.2 * T,
            fp64_tensor=72.1 * T,
            bf16=2306.9 * T,
            fp16=2306.9 * T,
            fp8=4613.7 * T,
            int8=4613.7 * T,
        ),
        memory_bandwidth=8.0e12,
        source="AMD Instinct MI350X data sheet (dense; 256 CUs, 288 GB HBM3E at 8 TB/s)",
    ),
    dict(
        key="MI325X",
        l2_mib=256,
        match=r"MI325X",
        label="AMD Instinct MI325X",
        flops=dict(
            fp64=81.7 * T,
            fp32=163.4 * T,
            fp64_tensor=163.4 * T,
            tf32=653.7 * T,
            bf16=1307.4 * T,
            fp16=1307.4 * T,
            fp8=2614.9 * T,
            int8=2614.9 * T,
        ),
        memory_bandwidth=6.0e12,
        source="AMD Instinct MI325X data sheet (dense; MI300X's 304 CUs with 256 GB HBM3E at 6 TB/s)",
    ),
    dict(
        key="MI300A",
        l2_mib=256,
        match=r"MI300A",
        label="AMD Instinct MI300A",
        flops=dict(
            fp64=61.3 * T,
            fp32=122.6 * T,
            fp64_tensor=122.6 * T,
            tf32=490.3 * T,
            bf16=980.6 * T,
            fp16=980.6 * T,
            fp8=1961.2 * T,
            int8=1961.2 * T,
        ),
        memory_bandwidth=5.3e12,
        source="AMD Instinct MI300A data sheet (dense; 228 CUs, 128 GB unified HBM3 at 5.3 TB/s)",
    ),
    dict(
        key="MI300X",
        l2_mib=256,
        match=r"MI300X",
        label="AMD Instinct MI300X",
        flops=dict(
            fp64=81.7 * T,
            fp32=163.4 * T,
            fp64_tensor=163.4 * T,
            tf32=653.7 * T,
            bf16=1307.4 * T,
            fp16=1307.4 * T,
            fp8=2614.9 * T,
            int8=2614.9 * T,
        ),
        memory_bandwidth=5.3e12,
        source="AMD Instinct MI300X data sheet (dense)",
    ),
    dict(
        key="MI250X-GCD",
        l2_mib=8,
        match=r"MI250X",
        label="AMD Instinct MI250X (one GCD)",
        flops=dict(
            fp64=23.95 * T, fp32=23.95 * T, fp64_tensor=47.9 * T, bf16=191.5 * T, fp16=191.5 * T, int8=191.5 * T
        ),
        memory_bandwidth=1.6e12,
        source="AMD Instinct MI250X data sheet, halved: ROCm shows each of the 2 GCDs as a device",
    ),
    dict(
        key="MI250-GCD",
        l2_mib=8,
        match=r"MI250|MI210",
        label="AMD Instinct MI250 (one GCD) / MI210",
        flops=dict(fp64=22.6 * T, fp32=22.6 * T, fp64_tensor=45.3 * T, bf16=181 * T, fp16=181 * T, int8=181 * T),
        memory_bandwidth=1.6e12,
        source="AMD Instinct MI250 data sheet halved per GCD (equal to the MI210 data sheet)",
    ),
]
_BY_KEY = {d["key"]: d for d in _TABLE}


@dataclass(frozen=True)
class _Signature:
    """A device known by its recorded properties alone, for traces whose device name is generic
    ("AMD Radeon Graphics"), empty (GPUs under some virtualisation) or unknown to the table:
    compute capability (ROCm: the gfx major/minor), SM or CU count and, where one chip comes with
    several memory sizes, a memory range in GiB."""

    major: int
    minor: int
    sms: int
    key: str
    mem_gib: tuple[float, float] = (0.0, float("inf"))
    note: str = ""


# One row per (capability, SMs/CUs[, memory]) that only one table entry has. Counts are the shipped
# products' (CUDA deviceQuery / rocminfo); a signature two products share (L40, L40S and RTX 6000
# Ada: 8.9 with 142 SMs and 48 GB) is left out rather than guessed.
_SIGNATURES: tuple[_Signature, ...] = (
    _Signature(10, 0, 148, "B200", (0, 182)),
    _Signature(10, 0, 148, "GB200", (182, 400)),
    _Signature(9, 0, 132, "H100-SXM", (0, 88), "an H800 SXM has the same properties"),
    _Signature(9, 0, 132, "H100-NVL", (88, 100)),
    _Signature(9, 0, 132, "H200-SXM", (100, 400), "an H200 NVL has the same properties"),
    _Signature(9, 0, 114, "H100-PCIe"),
    _Signature(9, 0, 78, "H20"),
    _Signature(8, 0, 108, "A100-40GB", (0, 60)),
    _Signature(8, 0, 108, "A100-80GB", (60, 200)),
    _Signature(8, 0, 56, "A30"),
    _Signature(8, 9, 128, "RTX4090"),
    _Signature(8, 9, 76, "RTX4080"),
    _Signature(8, 9, 58, "L4"),
    _Signature(8, 6, 82, "RTX3090"),
    _Signature(8, 6, 68, "RTX3080"),
    _Signature(8, 6, 72, "A10"),
    _Signature(7, 0, 80, "V100-SXM2"),
    _Signature(7, 5, 40, "T4"),
    _Signature(7, 5, 68, "RTX2080Ti"),
    # ROCm: gfx90a (CDNA2, one GCD a device), gfx942 (CDNA3), gfx950 (CDNA4)
    _Signature(9, 0, 104, "MI250-GCD"),
    _Signature(9, 0, 110, "MI250X-GCD"),
    _Signature(9, 4, 304, "MI300X", (0, 200)),
    _Signature(9, 4, 304, "MI325X", (200, 400)),
    _Signature(9, 4, 228, "MI300A"),
    _Signature(9, 5, 256, "MI355X", note="an MI350X has the same properties at lower clocks (8 % lower peaks)"),
)

PEAK_KEYS = ("fp64", "fp32", "fp64_tensor", "tf32", "bf16", "fp16", "fp8", "int8")
# The peaks of the matrix engines (Tensor Cores, Matrix Cores): a kernel on one of these roofs runs on them
# (roofline/classify.py gives them only to matmul-like or fused attention kernels of that dtype).
MATRIX_PEAKS = frozenset({"bf16", "fp16", "tf32", "fp8", "int8", "fp64_tensor"})


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources that bound how many thread blocks are resident at once (the inputs of the
    CUDA occupancy calculation, roofline/occupancy.py)."""

    arch: str  # "sm_90"...
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_block: int
    register_unit: int  # registers are allocated per warp in units of this many
    sub_partitions: int  # register files per SM (a warp's registers live in one)
    shared_per_sm: int  # bytes, the largest carveout
    shared_unit: int  # shared memory is allocated in units of this many bytes
    shared_reserved_per_block: int  # bytes the CUDA runtime reserves in each block
    max_shared_per_block: int  # bytes, opt-in maximum
    warp_size: int = 32
    source: str = ""


_CUDA_GUIDE = (
    "CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability' (threads, blocks, "
    "registers and shared memory per SM, shared memory reserved per block); allocation units and "
    "register-file partitions as in the CUDA Occupancy Calculator (cuda_occupancy.h)"
)
# compute capability -> limits. The trace's deviceProperties override the per-SM totals it records.
_SM_LIMITS: dict[tuple[int, int], SmLimits] = {
    (7, 0): SmLimits("sm_70", 2048, 32, 65536, 65536, 256, 4, 96 * 1024, 256, 0, 96 * 1024, source=_CUDA_GUIDE),
    (7, 5): SmLimits("sm_75", 1024, 16, 65536, 65536, 256, 4, 64 * 1024, 256, 0, 64 * 1024, source=_CUDA_GUIDE),
    (8, 0): SmLimits("sm_80", 2048, 32, 65536, 65536, 256, 4, 164 * 1024, 128, 1024, 163 * 1024, source=_CUDA_GUIDE),
    (8, 6): SmLimits("sm_86", 1536, 16, 65536, 65536, 256, 4, 100 * 1024, 128, 1024, 99 * 1024, source=_CUDA_GUIDE),
    (8, 7): SmLimits("sm_87", 1536, 16, 65536, 65536, 256, 4, 164 * 1024, 128, 1024, 163 * 1024, source=_CUDA_GUIDE),
    (8, 9): SmLimits("sm_89", 1536, 24, 65536, 65536, 256, 4, 100 * 1024, 128, 1024, 99 * 1024, source=_CUDA_GUIDE),
    (9, 0): SmLimits("sm_90", 2048, 32, 65536, 65536, 256, 4, 228 * 1024, 128, 1024, 227 * 1024, source=_CUDA_GUIDE),
    (10, 0): SmLimits("sm_100", 2048, 32, 65536, 65536, 256, 4, 228 * 1024, 128, 1024, 227 * 1024, source=_CUDA_GUIDE),
    (12, 0): SmLimits("sm_120", 1536, 32, 65536, 65536, 256, 4, 100 * 1024, 128, 1024, 99 * 1024, source=_CUDA_GUIDE),
}
# Table entries without compute capability in the trace: their architecture.
_ARCH_OF_KEY = {
    "GB200": (10, 0),
    "B200": (10, 0),
    "B100": (10, 0),
    "H20": (9, 0),
    "H800": (9, 0),
    "H200-SXM": (9, 0),
    "H200-NVL": (9, 0),
    "H100-PCIe": (9, 0),
    "H100-NVL": (9, 0),
    "H100-SXM": (9, 0),
    "A100-PCIe-80GB": (8, 0),
    "A100-80GB": (8, 0),
    "A100-40GB": (8, 0),
    "V100S": (7, 0),
    "V100-PCIe": (7, 0),
    "V100-SXM2": (7, 0),
    "L40S": (8, 9),
    "L4": (8, 9),
    "A10": (8, 6),
    "RTX4090": (8, 9),
    "T4": (7, 5),
    "RTX2080Ti": (7, 5),
    "GP100": (6, 0),
    "RTX5090": (12, 0),
    "RTX6000Ada": (8, 9),
    "L40": (8, 9),
    "RTX4080": (8, 9),
    "RTX3090": (8, 6),
    "RTX3080": (8, 6),
    "RTXA6000": (8, 6),
    "A40": (8, 6),
    "A30": (8, 0),
}


def sm_limits(props: dict[str, Any], key: Optional[str] = None) -> Optional[SmLimits]:
    """The per-SM limits of a device from its trace properties (``computeMajor``/``computeMinor``,
    else the table entry ``key``), with the totals the trace records (threads, registers and
    shared memory per SM, warp size) taking precedence. None for AMD GPUs and unknown
    architectures (their occupancy rules differ: wavefronts of 64, VGPR/LDS granularity)."""
    major, minor = props.get("computeMajor", props.get("major")), props.get("computeMinor", props.get("minor"))
    cc = (major, minor) if isinstance(major, int) and isinstance(minor, int) else _ARCH_OF_KEY.get(key or "")
    if cc is None or is_amd(props, key):
        return None
    base = _SM_LIMITS.get(cc)
    if base is None:
        return None
    over: dict[str, Any] = {}
    for field_, prop in (
        ("max_threads_per_sm", "maxThreadsPerMultiprocessor"),
        ("registers_per_sm", "regsPerMultiprocessor"),
        ("max_registers_per_block", "regsPerBlock"),
        ("shared_per_sm", "sharedMemPerMultiprocessor"),
        ("max_shared_per_block", "sharedMemPerBlockOptin"),
        ("warp_size", "warpSize"),
    ):
        v = props.get(prop)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            over[field_] = v
    return replace(base, **over) if over else base


@dataclass
class DevicePeaks:
    """The roofs used for one device, and how they were chosen."""

    id: int
    name: str  # as the trace names it
    key: Optional[str]  # table entry, None when unknown
    label: Optional[str]
    flops: dict[str, float]
    memory_bandwidth: Optional[float]
    basis: str  # measured | datasheet | user | unknown
    sources: dict[str, str] = field(default_factory=dict)
    num_sms: Optional[int] = None
    matched_by: Optional[str] = None
    l2_bytes: Optional[int] = None  # last-level cache that absorbs writes (MI300X: Infinity Cache)
    # roofs raised from the table's own evidence (a benchmark beaten by a real kernel measured on
    # this GPU): [{peak, from, to, evidence, to_basis, reason}], the shape of roof_adjustments
    adjustments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return self.memory_bandwidth is not None and bool(self.flops)

    def to_json(self) -> dict[str, Any]:
        refs = sorted(set(self.sources.values()))
        return {
            "id": self.id,
            "name": self.name,
            "key": self.key,
            "label": self.label,
            "peaks": {"flops": dict(self.flops), "memory_bandwidth": self.memory_bandwidth},
            "basis": self.basis,
            "peak_source": {k: refs.index(v) for k, v in self.sources.items()},
            "references": refs,
            "num_sms": self.num_sms,
            "matched_by": self.matched_by,
            "l2_bytes": self.l2_bytes,
            "roof_adjustments": [dict(a) for a in self.adjustments],
        }


def _match(props: dict[str, Any]) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    name = str(props.get("name", ""))
    mem = props.get("totalGlobalMem") or 0
    for entry in _TABLE:
        if re.search(entry["match"], name, re.I):
            if entry["key"] == "A100-40GB" and isinstance(mem, (int, float)) and mem > 60 * 2**30:
                entry = _BY_KEY["A100-80GB"] if "PCIE" not in name.upper() else _BY_KEY["A100-PCIe-80GB"]
                return entry, f"name '{name}' and {mem / 2**30:.0f} GiB of memory"
            return entry, f"name '{name}'"
    return _by_signature(props)


def _by_signature(props: dict[str, Any]) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """The table entry whose recorded properties (capability, SMs/CUs, memory) the device has."""
    major = props.get("computeMajor", props.get("major"))
    minor = props.get("computeMinor", props.get("minor"))
    sms = props.get("numSms")
    mem = props.get("totalGlobalMem")
    gib = mem / 2**30 if isinstance(mem, (int, float)) and mem > 0 else None
    for sig in _SIGNATURES:
        if (sig.major, sig.minor, sig.sms) != (major, minor, sms):
            continue
        lo, hi = sig.mem_gib
        if gib is None and (lo, hi) != (0.0, float("inf")):
            continue  # several memory sizes and none recorded
        if gib is not None and not lo <= gib < hi:
            continue
        units = "compute units" if _is_amd_signature(sig) else "SMs"
        how = f"compute capability {major}.{minor} with {sms} {units}"
        how += f" and {gib:.0f} GiB of memory" if gib is not None else ""
        name = str(props.get("name") or "")
        how = (f"device named '{name}': " if name else "unnamed device: ") + how
        return _BY_KEY[sig.key], how + (f" ({sig.note})" if sig.note else "")
    return None, None


def _is_amd_signature(sig: _Signature) -> bool:
    return sig.key.startswith("MI")


def is_amd(props: dict[str, Any], key: Optional[str] = None) -> bool:
    """An AMD GPU: by its name, its table entry, or its wavefront of 64 (an unnamed ROCm device)."""
    name = str(props.get("name", "")).upper()
    return (
        "AMD" in name
        or "RADEON" in name
        or "INSTINCT" in name
        or (key or "").startswith("MI")
        or props.get("warpSize") == 64
    )


def load_user_peaks(spec: Optional[str]) -> dict[str, Any]:
    """User peaks from a JSON file path or inline ``key=value,...`` (TFLOP/s and TB/s units).

    File format: ``{"flops": {"bf16": 312e12, ...}, "memory_bandwidth": 1.5e12}`` or a list of
    such objects with a ``"match"`` regex on the device name.
    """
    if not spec:
        return {}
    if os.path.exists(spec):
        with open(spec, encoding="utf-8") as f:
            data = json.load(f)
        return {"entries": data if isinstance(data, list) else [data]}
    flops, bw = {}, None
    for part in spec.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"bad peak '{part}': expected KEY=VALUE (e.g. bf16=312,memory=1.5)")
        k, v = (x.strip() for x in part.split("=", 1))
        val = float(v)
        if k in ("memory", "memory_bandwidth", "bw"):
            bw = val * 1e12 if val < 1e6 else val  # TB/s unless given in B/s
        elif k in PEAK_KEYS:
            flops[k] = val * 1e12 if val < 1e9 else val  # TFLOP/s unless given in FLOP/s
        else:
            raise ValueError(f"unknown peak '{k}' (use one of {', '.join(PEAK_KEYS)}, memory)")
    return {"entries": [{"flops": flops, "memory_bandwidth": bw}]}


def device_properties(meta: dict[str, Any]) -> list[dict[str, Any]]:
    props = meta.get("deviceProperties")
    if props is None:
        props = meta.get("computeProperties")
    if isinstance(props, dict):
        props = [props]
    if not isinstance(props, list):
        return []
    return [p for p in props if isinstance(p, dict)]


def resolve(
    meta: dict[str, Any], device_id: int, user: Optional[dict[str, Any]] = None, basis: str = "measured"
) -> DevicePeaks:
    """Peaks for ``device_id`` of a trace, from the table, a measurement or the user."""
    props = next((p for p in device_properties(meta) if p.get("id") == device_id), None)
    if props is None and device_properties(meta):
        props = device_properties(meta)[0]
    props = props or {}
    name = str(props.get("name") or "unnamed device")
    entry, how = _match(props)
    sms = props.get("numSms") if isinstance(props.get("numSms"), int) else None
    if entry is not None:
        flops = dict(entry["flops"])
        bw = entry["memory_bandwidth"]
        sources = {k: entry["source"] for k in list(flops) + ["memory_bandwidth"]}
        used = "datasheet"
        m = entry.get("measured")
        adjustments: list[dict[str, Any]] = []
        if m and basis == "measured":
            for k, v in m["flops"].items():
                flops[k] = v
                sources[k] = m.get("sources", {}).get(k, m["source"])
            if m.get("memory_bandwidth"):
                bw = m["memory_bandwidth"]
                sources["memory_bandwidth"] = m["source"]
            used = "measured"
            for k, why in m.get("beaten", {}).items():
                ds = entry["memory_bandwidth"] if k == "memory_bandwidth" else entry["flops"].get(k)
                cur = bw if k == "memory_bandwidth" else flops.get(k)
                if ds is None or cur is None or ds <= cur:
                    continue
                if k == "memory_bandwidth":
                    bw = ds
                else:
                    flops[k] = ds
                sources[k] = f"{entry['source']}; the measured {_fmt_peak(k, cur)} is no ceiling: {why}"
                adjustments.append(
                    {
                        "peak": k,
                        "from": cur,
                        "to": ds,
                        "evidence": "recorded",
                        "to_basis": "datasheet",
                        "reason": (
                            f"a real kernel beat the measured {_fmt_peak(k, cur)}: {why}; "
                            f"the roof is the datasheet's {_fmt_peak(k, ds)}"
                        ),
                    }
                )
        dev = DevicePeaks(
            id=device_id,
            name=name,
            key=entry["key"],
            label=entry["label"],
            flops=flops,
            memory_bandwidth=bw,
            basis=used,
            sources=sources,
            num_sms=sms,
            matched_by=how,
            l2_bytes=int(entry["l2_mib"] * 2**20) if entry.get("l2_mib") else None,
            adjustments=adjustments,
        )
    else:
        dev = DevicePeaks(
            id=device_id, name=name, key=None, label=None, flops={}, memory_bandwidth=None, basis="unknown", num_sms=sms
        )
    for e in (user or {}).get("entries", []):
        pat = e.get("match")
        if pat and not re.search(pat, name, re.I):
            continue
        for k, v in (e.get("flops") or {}).items():
            if k in PEAK_KEYS and isinstance(v, (int, float)) and v > 0:
                dev.flops[k] = float(v)
                dev.sources[k] = "given by the user"
                dev.adjustments = [a for a in dev.adjustments if a["peak"] != k]  # the user's figure wins
        bw = e.get("memory_bandwidth")
        if isinstance(bw, (int, float)) and bw > 0:
            dev.memory_bandwidth = float(bw)
            dev.sources["memory_bandwidth"] = "given by the user"
            dev.adjustments = [a for a in dev.adjustments if a["peak"] != "memory_bandwidth"]
        dev.basis = "user" if dev.key is None else dev.basis + "+user"
    return dev


def _fmt_peak(key: str, v: float) -> str:
    """``801.5 TFLOP/s`` (``bf16``) or ``4.24 TB/s`` (``memory_bandwidth``), for reasons."""
    return f"{key} {v / 1e12:.4g} TFLOP/s" if key != "memory_bandwidth" else f"{v / 1e12:.3g} TB/s of DRAM bandwidth"


def datasheet_peak(meta: dict[str, Any], device_id: int, key: str) -> Optional[float]:
    """The datasheet's figure of one roof (a FLOP key or ``memory_bandwidth``), None when the table
    has none for this device."""
    d = resolve(meta, device_id, None, "datasheet")
    if key == "memory_bandwidth":
        return d.memory_bandwidth
    return d.flops.get(key)


def table() -> list[dict[str, Any]]:
    """The built-in table, for documentation and ``tb-attention devices``."""
    return [dict(e) for e in _TABLE]
