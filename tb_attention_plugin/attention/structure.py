"""The structure of a kernel sequence around attention kernels, when nothing on the CPU side
scopes them: CUDA-graph replays (graphs.py) and torch.compile's compiled regions (tagger.py).

Within one sequence (a graph launch, a compiled region), around each kernel that is attention:
the kernels from the first GEMM after the last normalisation (a reduction) up to the attention
kernel are its input side (GEMMs: Q/K/V projections; index_copy / scatter / reshape_and_cache:
KV-cache writes; rotary-looking kernels: rotary; the rest: other), and the kernels after it up to
and including the first GEMM are its output side (that GEMM: the output projection)."""

from __future__ import annotations

import re
from typing import Optional

from . import patterns as P

GEMM_KERNEL = re.compile(r"gemm|nvjet|cutlass|cublas|Cijk_|sm\d\d_xmma|_mm_|matmul|triton_tem_fused_(mm|addmm)", re.I)
NORM_KERNEL = re.compile(r"reduce_kernel|norm|rms|welford|layer_norm|triton_(red|per)_", re.I)
# generic cache writes (index_copy_/scatter_ into a static cache); library ones are in the catalogue
CACHE_WRITE_KERNEL = re.compile(r"index_copy|scatter|index_put|store_kvcache|kv_cache", re.I)
# rotate_half's neg and cat, or the sin/cos tables: eager kernels by their functors, Inductor's by the
# fused ops its kernel name lists (triton_poi_fused_add_cat_mul_neg_slice_1)
ROTARY_KERNEL = re.compile(
    r"rotary|rope|neg_kernel|sin_kernel|cos_kernel|CatArrayBatchedCopy|^triton_\w+?_fused\w*?_(neg|sin|cos)(_|$)",
    re.I,
)
SPLITK_REDUCE = re.compile(r"splitKreduce", re.I)


def _role(name: str) -> Optional[str]:
    lib = P.library_kernel(name)
    return lib.role if lib else None


def structure_phases(names: list[str], attention: list[bool]) -> dict[int, tuple[str, int]]:
    """Phases of the kernels around recognised attention kernels in one replayed sequence.

    ``attention[i]`` marks kernels that are attention by name. Returns {index: (phase, index of
    the attention kernel it belongs to)} for the kernels the structure adds (the attention
    kernels themselves are not in it)."""
    out: dict[int, tuple[str, int]] = {}
    n = len(names)
    att_idx = [i for i in range(n) if attention[i]]
    if not att_idx:
        return out
    # runs of adjacent attention kernels (a split-KV kernel and its combine) are one call
    runs: list[tuple[int, int]] = []
    for i in att_idx:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    prev_end = -1
    for ri, (a, b) in enumerate(runs):
        nxt = runs[ri + 1][0] if ri + 1 < len(runs) else n
        # input side: back from a to the last normalisation, then forward to the first GEMM
        lo = a
        j = a - 1
        while j > prev_end and not NORM_KERNEL.search(names[j]):
            lo = j
            j -= 1
        first_gemm = next((k for k in range(lo, a) if GEMM_KERNEL.search(names[k]) and not attention[k]), None)
        if first_gemm is not None:
            for k in range(first_gemm, a):
                nm = names[k]
                if attention[k]:
                    continue
                if GEMM_KERNEL.search(nm) or SPLITK_REDUCE.search(nm):
                    out[k] = ("qkv_proj", a)
                elif CACHE_WRITE_KERNEL.search(nm) or _role(nm) == "kv_cache_write":
                    out[k] = ("layout", a)
                elif ROTARY_KERNEL.search(nm):
                    out[k] = ("rotary", a)
                else:
                    out[k] = ("other", a)
        # output side: up to and including the first GEMM (and its split-K reduction)
        k = b + 1
        while k < nxt:
            nm = names[k]
            if GEMM_KERNEL.search(nm):
                out[k] = ("out_proj", a)
                if k + 1 < nxt and SPLITK_REDUCE.search(names[k + 1]):
                    out[k + 1] = ("out_proj", a)
                    k += 1
                break
            if NORM_KERNEL.search(nm) and not nm.startswith("void cudnn"):
                break
            out[k] = ("layout" if re.search(r"copy|transpose|permute", nm, re.I) else "other", a)
            k += 1
        prev_end = max(b, k)
    return out
