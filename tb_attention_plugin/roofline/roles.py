"""Kernel roles: what one kernel of a multi-kernel op does, told by what the kernel is.

One op often launches several kernels that do different work: a fused attention backward runs a
``dot(dO, O)`` pre-pass, the main loop and a dQ conversion; a split-KV decode runs the partial
attention and a combine; a split-K GEMM its partial products and a reduction; a radix sort one
pass per digit. Sharing the op's bytes over them by duration gives the small kernels the big
one's traffic (a 4 µs combine with 16 MB) and leaves the main kernel with little; each kernel is
costed by its role instead (``cost.role_costs``, formulas in docs/cost-model.md, *Cost by role*).

This module is the one home of the role names and of the kernel-name families that carry them,
per backend. A rule matches the kernel's function name (templates and parameters stripped, so
words inside template arguments — a CUTLASS GEMM's ``Copy`` atoms — do not count) unless it
names a class that only appears as a template argument (FlashAttention-3's kernels are all
``cutlass::device_kernel<flash::...>``): then the whole demangled name is searched.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from ..attention.patterns import strip_templates

MAIN = "main"  # the op's own work: the GEMM, the attention loop (forward or backward), split-KV partials
DOT_DO_O = "dot_do_o"  # attention backward pre-pass: delta = rowsum(dO * O), the fp32 dQ accumulator zeroed
CONVERT_DQ = "convert_dq"  # attention backward post-pass: the fp32 dQ accumulator cast to dQ
CONVERT_DKV = "convert_dkv"  # attention backward: fp32 dK/dV accumulators cast to dK, dV
CLEAR_ACCUM = "clear_accum"  # attention backward: the fp32 dK/dV accumulators zeroed
COMBINE = "combine"  # split-KV: the partial outputs merged by their log-sum-exp
REDUCE_HEAD = "reduce_head"  # GQA backward: per-query-head dK/dV summed to the key/value heads (no matmul)
SPLITK_REDUCE = "splitk_reduce"  # split-K GEMM: the fp32 partial products summed into the output
SORT_PASS = "sort_pass"  # radix sort: one pass over keys and values per digit
SORT_HISTOGRAM = "sort_histogram"  # radix sort: the digit histograms (reads the keys once)
SORT_SCAN = "sort_scan"  # radix sort: the prefix sums of the digit histograms (a few KB)
SORT_INIT = "sort_init"  # sort: the int64 indices written before they are sorted with the keys
AUX = "aux"  # a helper the op's formula does not describe (small scans, fills, casts inside the op)

ROLES: dict[str, str] = {
    MAIN: "the op's own work (GEMM, attention main loop, split-KV partial attention)",
    DOT_DO_O: "reads O and dO, writes delta (fp32 per row) and zeroes the fp32 dQ accumulator",
    CONVERT_DQ: "reads the fp32 dQ accumulator, writes dQ",
    CONVERT_DKV: "reads the fp32 dK/dV accumulators, writes dK and dV",
    CLEAR_ACCUM: "zeroes the fp32 dK/dV accumulators",
    COMBINE: "reads the fp32 partial outputs and log-sum-exps of every split, writes O (and its LSE)",
    REDUCE_HEAD: "reads dK/dV per query head, writes them summed per key/value head",
    SPLITK_REDUCE: "reads the fp32 partial products of every split, writes the output",
    SORT_PASS: "reads and writes every key and value once",
    SORT_HISTOGRAM: "reads every key once",
    SORT_SCAN: "reads and writes the digit histograms (256 bins of 4 bytes per digit)",
    SORT_INIT: "writes the int64 indices that are sorted with the keys",
    AUX: "no formula of its own: its bytes are unknown, it gets no FLOPs",
}


ROLE_NAMES: tuple[str, ...] = tuple(ROLES)  # a role's code in Attribution.role is its index here
ROLE_INDEX: dict[str, int] = {r: i for i, r in enumerate(ROLE_NAMES)}


@dataclass(frozen=True)
class KernelRole:
    """A kernel-name family and the role its kernels play in their op."""

    role: str
    backend: str
    pattern: re.Pattern[str]
    source: str  # where the kernel is defined (for whoever updates this table)
    whole_name: bool = False  # search the whole demangled name (the class is a template argument)
    splits_grid: Optional[str] = None  # the grid dimension that holds the split count


def _r(
    role: str, backend: str, pattern: str, source: str, whole_name: bool = False, splits_grid: Optional[str] = None
) -> KernelRole:
    return KernelRole(role, backend, re.compile(pattern), source, whole_name, splits_grid)


# First match wins; more specific names come first.
RULES: tuple[KernelRole, ...] = (
    # --- FlashAttention-2 (flash-attn and PyTorch's pytorch_flash:: copy)
    _r(
        DOT_DO_O,
        "FlashAttention-2",
        r"flash_bwd_dot_do_o_kernel",
        "flash-attention csrc/flash_attn/src/flash_bwd_preprocess_kernel.h",
    ),
    _r(CONVERT_DQ, "FlashAttention-2", r"flash_bwd_convert_dq_kernel", "flash_bwd_preprocess_kernel.h"),
    _r(CONVERT_DKV, "FlashAttention-2", r"flash_bwd_convert_dkv_kernel", "flash_bwd_preprocess_kernel.h"),
    _r(CLEAR_ACCUM, "FlashAttention-2", r"flash_bwd_clear_dkvaccum_kernel", "flash_bwd_preprocess_kernel.h"),
    _r(COMBINE, "FlashAttention-2", r"flash_fwd_splitkv(_mla)?_combine_kernel", "flash_fwd_kernel.h"),
    # grid (num_m_blocks, num_splits, batch * heads) when split (flash_fwd_launch_template.h)
    _r(MAIN, "FlashAttention-2", r"flash_fwd_splitkv(_mla)?_kernel", "flash_fwd_launch_template.h", splits_grid="y"),
    _r(MAIN, "FlashAttention-2", r"flash_fwd_kernel|flash_bwd_dq_dk_dv_loop\w*_kernel", "flash_fwd_kernel.h"),
    # --- FlashAttention-3 (hopper/): classes inside cutlass::device_kernel<...>
    _r(DOT_DO_O, "FlashAttention-3", r"flash::FlashAttnBwdPreprocess", "hopper/flash_bwd_preprocess_kernel.h", True),
    _r(
        CONVERT_DQ,
        "FlashAttention-3",
        r"flash::FlashAttnBwdPostprocessConvertdQ",
        "hopper/flash_bwd_postprocess_kernel.h",
        True,
    ),
    _r(COMBINE, "FlashAttention-3", r"flash::FlashAttnFwdCombine", "hopper/flash_fwd_combine_kernel.h", True),
    _r(MAIN, "FlashAttention-3", r"flash::FlashAttn(Fwd|Bwd)Sm\d+", "hopper/flash_fwd_kernel_sm90.h", True),
    # --- FlashAttention-4 (CuTe DSL)
    _r(DOT_DO_O, "FlashAttention-4", r"FlashAttentionBackwardPreprocess", "flash_attn/cute/flash_bwd_preprocess.py"),
    _r(
        CONVERT_DQ, "FlashAttention-4", r"FlashAttentionBackwardPostprocess", "flash_attn/cute/flash_bwd_postprocess.py"
    ),
    _r(MAIN, "FlashAttention-4", r"FlashAttention(Forward|Backward)", "flash_attn/cute/flash_fwd_sm100.py"),
    # --- cuDNN SDPA (PyTorch's cudnn backend)
    _r(DOT_DO_O, "cuDNN", r"compute_dot_do_o", "cuDNN SDPA backward graph (pre-pass)"),
    _r(CONVERT_DQ, "cuDNN", r"convert_dq_to_16bits", "cuDNN SDPA backward graph (post-pass)"),
    _r(REDUCE_HEAD, "cuDNN", r"fmha_reduce_head", "cuDNN SDPA backward with fewer key/value heads (GQA)"),
    _r(COMBINE, "cuDNN", r"lean_reduction_kernel", "cuDNN SDPA forward split over the keys (decode)"),
    _r(MAIN, "cuDNN", r"cudnn_generated_\w*sdpa\w*|cudnn\w*_fmha", "cuDNN frontend SDPA graphs"),
    # --- mem-efficient attention (xformers / PyTorch's CUTLASS kernels)
    _r(MAIN, "mem-efficient", r"fmha_cutlass[FB]_|\bAttention(Backward)?Kernel\b", "PyTorch mem_eff_attention/kernels"),
    # --- GEMM libraries
    _r(SPLITK_REDUCE, "cuBLAS", r"splitKreduce_kernel", "cuBLAS / cuBLASLt split-K reduction"),
    # --- CUB radix sort (torch.sort / argsort of long rows)
    _r(
        SORT_HISTOGRAM,
        "CUB",
        r"DeviceRadixSort(Histogram|Upsweep)Kernel",
        "cub/device/dispatch/dispatch_radix_sort.cuh",
    ),
    _r(
        SORT_PASS,
        "CUB",
        r"DeviceRadixSort(Onesweep|Downsweep|SingleTile)Kernel|DeviceSegmentedRadixSortKernel",
        "cub/device/dispatch/dispatch_radix_sort.cuh",
    ),
    _r(SORT_SCAN, "CUB", r"DeviceRadixSortExclusiveSumKernel", "cub/device/dispatch/dispatch_radix_sort.cuh"),
    _r(SORT_INIT, "PyTorch", r"fill_reverse_indices_kernel|fill_index_and_segment_kernel", "ATen/native/cuda/Sort.cu"),
)

# Roles whose kernels each do the whole role's work (one radix pass per kernel); the kernels of
# any other role share its traffic (cuDNN reduces dK and dV in two fmha_reduce_head kernels).
PER_KERNEL_ROLES = frozenset({SORT_PASS})

# Kernels that are the work of a matmul or attention op when no rule above names them ...
_MATRIX = re.compile(
    r"gemm|mma|nvjet|cutlass|cublas|Cijk_|flash_fwd|flash_bwd|dq_dk_dv|fmha|sdpa|attention|"
    r"AttentionKernel|triton_tem|_mm_|matmul|dot_product|gemv",
    re.I,
)
# ... and helpers that are not (searched in the function name only).
_HELPER = re.compile(r"zero|fill|memset|reduce_kernel|copy|prepare_grouped|scal_kernel|elementwise", re.I)
_MANGLED_PART = re.compile(r"(\d+)")


def function_name(name: str) -> str:
    """The kernel's function name without template arguments or parameters, so that words
    inside them are not matched. Mangled names (``_ZN7cutlass13device_kernelI...``) keep their
    nested name."""
    if name.startswith("_ZN"):
        parts, i = [], 3
        while True:
            m = _MANGLED_PART.match(name, i)
            if not m:
                break
            n = int(m.group(1))
            parts.append(name[m.end() : m.end() + n])
            i = m.end() + n
        return "::".join(parts) or name
    bare = strip_templates(name.replace("(anonymous namespace)", "{anonymous}"))
    return bare.split("(", 1)[0].removeprefix("void ").strip()


@functools.lru_cache(maxsize=8192)
def kernel_rule(name: str) -> Optional[KernelRole]:
    """The table entry a kernel name belongs to, or None."""
    fn = function_name(name)
    for r in RULES:
        if r.pattern.search(name if r.whole_name else fn):
            return r
    return None


@functools.lru_cache(maxsize=8192)
def kernel_role(name: str, matrix_op: bool) -> Optional[str]:
    """The role of a kernel in its op: the table's, else MAIN for a matrix-engine kernel of a
    matmul/attention op (``matrix_op``) and AUX for a helper of one; None when the name says
    nothing (the op's kernels then share its cost by duration)."""
    r = kernel_rule(name)
    if r is not None:
        return r.role
    if not matrix_op:
        return None
    if _HELPER.search(function_name(name)):
        return AUX
    if _MATRIX.search(name):
        return MAIN
    return None


def is_matrix_kernel(name: str) -> bool:
    """Whether a kernel's function name says matrix-engine work (a GEMM or attention kernel) and
    not a helper (fills, copies, reductions, elementwise)."""
    fn = function_name(name)
    return bool(_MATRIX.search(fn)) and not _HELPER.search(fn)
