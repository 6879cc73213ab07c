"""The structure of a kernel sequence around attention kernels, when nothing on the CPU side
scopes them: CUDA-graph replays (graphs.py) and torch.compile's compiled regions (tagger.py).

Within one sequence (a graph launch, a compiled region), around each kernel that is attention:
the kernels from the first GEMM after the last normalisation (a reduction) up to the attention
kernel are its input side (GEMMs: Q/K/V projections; index_copy / scatter / reshape_and_cache:
KV-cache writes; rotary-looking kernels: rotary; the rest: other), and the kernels after it up to
and including the first GEMM are its output side (that GEMM: the output projection)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

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


LAYOUT_KERNEL = re.compile(r"copy|transpose|permute|CatArrayBatchedCopy", re.I)


def _role(name: str) -> Optional[str]:
    lib = P.library_kernel(name)
    return lib.role if lib else None


@dataclass(frozen=True)
class Traits:
    """What the structure reads of one kernel name."""

    gemm: bool
    norm: bool  # a normalisation (a reduction): where the input side of an attention kernel begins
    norm_stop: bool  # a normalisation that ends its output side (cuDNN's own kernels do not)
    splitk: bool  # a split-K reduction: part of the GEMM before it
    cache_write: bool  # a KV-cache write, generic or in the library catalogue
    rotary: bool
    layout: bool  # a copy, transpose or permute
    communication: bool  # a collective: never placed, and it ends a side like a normalisation

    @staticmethod
    def of(name: str) -> Traits:
        norm = bool(NORM_KERNEL.search(name))
        return Traits(
            gemm=bool(GEMM_KERNEL.search(name)),
            norm=norm,
            norm_stop=norm and not name.startswith("void cudnn"),
            splitk=bool(SPLITK_REDUCE.search(name)),
            cache_write=bool(CACHE_WRITE_KERNEL.search(name)) or _role(name) == "kv_cache_write",
            rotary=bool(ROTARY_KERNEL.search(name)),
            layout=bool(LAYOUT_KERNEL.search(name)) or P.triton_unit(name) == "layout",
            communication=P.is_communication(name),
        )


class NameTraits:
    """:class:`Traits` of each distinct kernel name, found once: a trace replays the same few
    hundred names hundreds of thousands of times, and a C++ template name of a few thousand
    characters costs ~10 µs a pattern (a 250 MB decode trace replayed from CUDA graphs spent 19 s
    searching them again for every kernel). One per analysis, shared by its sequences."""

    def __init__(self) -> None:
        self._memo: dict[str, Traits] = {}

    def __call__(self, names: list[str]) -> list[Traits]:
        memo = self._memo
        out = []
        for nm in names:
            t = memo.get(nm)
            if t is None:
                t = memo[nm] = Traits.of(nm)
            out.append(t)
        return out


def structure_phases(
    names: list[str], attention: list[bool], traits: Optional[NameTraits] = None
) -> dict[int, tuple[str, int]]:
    """Phases of the kernels around recognised attention kernels in one replayed sequence.

    ``attention[i]`` marks kernels that are attention by name. Returns {index: (phase, index of
    the attention kernel it belongs to)} for the kernels the structure adds (the attention
    kernels themselves are not in it). ``traits``: the caller's memo of what each name is, shared
    between its sequences."""
    out: dict[int, tuple[str, int]] = {}
    n = len(names)
    att_idx = [i for i in range(n) if attention[i]]
    if not att_idx:
        return out
    tr = (traits or NameTraits())(names)
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
        # input side: back from a over what runs between the projections and the attention kernel
        # (rotary, KV-cache writes, copies, QK-norms: a norm with a GEMM before it), then over the
        # projection GEMMs, to the normalisation before them; forward from there to the first GEMM
        lo = a
        j = a - 1
        seen_gemm = False
        qk_norms = 0  # QK-norm normalises q and k: at most two norm kernels between GEMM and attention
        while j > prev_end and not attention[j] and not tr[j].communication:
            t = tr[j]
            if t.gemm:
                seen_gemm = True
            elif t.norm and not t.rotary:  # a kernel that norms and rotates q, k is on the input side
                if seen_gemm or qk_norms == 2 or not _gemm_before(tr, attention, j, prev_end):
                    break
                qk_norms += 1
            lo = j
            j -= 1
        first_gemm = next((k for k in range(lo, a) if tr[k].gemm and not attention[k]), None)
        if first_gemm is not None:
            for k in range(first_gemm, a):
                t = tr[k]
                if attention[k]:
                    continue
                if t.gemm or t.splitk:
                    out[k] = ("qkv_proj", a)
                elif t.cache_write:
                    out[k] = ("layout", a)
                elif t.rotary:
                    out[k] = ("rotary", a)
                elif t.norm:  # a norm after the first GEMM: QK-norm
                    out[k] = ("qkv_proj", a)
                elif t.layout:  # q, k, v's copies, transposes and concatenations
                    out[k] = ("layout", a)
                else:
                    out[k] = ("other", a)
        # output side: up to and including the first GEMM (and its split-K reduction)
        k = b + 1
        while k < nxt:
            t = tr[k]
            if t.gemm:
                out[k] = ("out_proj", a)
                if k + 1 < nxt and tr[k + 1].splitk:
                    out[k + 1] = ("out_proj", a)
                    k += 1
                break
            if t.norm_stop or t.communication:
                break
            out[k] = ("layout" if t.layout else "other", a)
            k += 1
        prev_end = max(b, k)
    return out


def _gemm_before(tr: list[Traits], attention: list[bool], j: int, stop: int) -> bool:
    """Whether a GEMM runs before the normalisation at ``j`` with at most one other normalisation
    between (q's norm before k's): a QK-norm on the projections' output, not a layer's input norm
    (the kernels before that are the previous layer's)."""
    k = j - 1
    norms = 0
    while k > stop and not attention[k] and not tr[k].communication:
        if tr[k].gemm:
            return True
        if tr[k].norm:
            norms += 1
            if norms > 1:
                return False
        k -= 1
    return False


class StructureTagger:
    """:func:`structure_phases` over the kernel sequences of one trace, written into its per-GPU-
    activity tag columns. Every replay of a graph, and every step's call of a compiled region,
    launches the same sequence: each distinct sequence (names and anchors) is read once."""

    def __init__(self, names: list[str]):
        self.names = names  # the trace's strings: the sequences come as name codes
        self.traits = NameTraits()
        self._read: dict[tuple[bytes, bytes], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def tag(
        self,
        g: np.ndarray,
        name_codes: np.ndarray,
        anchors: np.ndarray,
        inst: np.ndarray,
        phase: np.ndarray,
        source: np.ndarray,
        source_code: int,
    ) -> np.ndarray:
        """Give the kernels ``g`` (one sequence, in GPU order) that the structure places and no
        one tagged yet (``inst`` < 0) the instance of their attention kernel, the structure's phase
        and ``source_code``. ``anchors``: per kernel of ``g``, whether it is a tagged attention
        kernel. Returns the activities tagged."""
        key = (name_codes.tobytes(), anchors.tobytes())
        read = self._read.get(key)
        if read is None:
            by_pos = structure_phases([self.names[i] for i in name_codes.tolist()], anchors.tolist(), self.traits)
            read = self._read[key] = (
                np.fromiter(by_pos, dtype=np.int64, count=len(by_pos)),
                np.asarray([P.PHASE_INDEX[ph] for ph, _ in by_pos.values()], dtype=np.int64),
                np.fromiter((a for _, a in by_pos.values()), dtype=np.int64, count=len(by_pos)),
            )
        at, ph, anchor = read
        placed, a = g[at], g[anchor]
        free = inst[placed] < 0
        k: np.ndarray = placed[free]
        a = a[free]
        # the anchors are tagged and never among the kernels placed: no write below feeds a read
        inst[k] = inst[a]
        phase[k] = ph[free]
        source[k] = source_code
        return k
