"""Give each GPU activity its share of an op's FLOPs and bytes.

The *cost owner* of a kernel is the innermost op around its launch that has a cost formula and
recorded shapes (walking outwards through ops without one). When one owner launches several
kernels, its cost is split:

* FLOPs go to the owner's matrix-engine kernels (GEMM / attention kernels by name), in proportion
  to their durations; auxiliary kernels of a matmul or attention op (zero-fills, conversions,
  the ``dot(dO, O)`` pre-pass of a fused backward) get none. When no kernel looks like a
  matrix kernel, all share the FLOPs by duration.
* Bytes are shared by duration among all of the owner's kernels.

Memcpy and memset activities carry their own byte counts in the trace; those are used as
measured values and never take a share of an op's cost.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..attention.patterns import strip_templates
from ..trace.correlate import Links
from ..trace.records import KERNEL, MEMCPY, MEMSET, OP, Trace
from ..trace.shapes import parse_args
from .cost import Cost, has_formula, op_cost

MATRIX_KERNEL = re.compile(
    r"gemm|mma|nvjet|cutlass|cublas|Cijk_|flash_fwd|flash_bwd|dq_dk_dv|fmha|sdpa|attention|"
    r"AttentionKernel|triton_tem|_mm_|matmul|splitKreduce|dot_product",
    re.I,
)
AUX_KERNEL = re.compile(r"dot_do_o|convert_dq|zero|fill|memset|splitKreduce|reduce_kernel|copy|prepare_grouped", re.I)
_MANGLED_PART = re.compile(r"(\d+)")


def _function_name(name: str) -> str:
    """The kernel's function name without template arguments or parameters, so that the
    AUX_KERNEL words are not matched inside them (a CUTLASS grouped GEMM's template names
    ``Copy`` atoms). Mangled names (``_ZN7cutlass13device_kernelI...``) keep their nested name."""
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
    return strip_templates(name).split("(", 1)[0]


@dataclass
class Attribution:
    owner: np.ndarray  # GPU activity -> cost-owner op range, or -1
    flops: np.ndarray  # float, NaN = unknown
    bytes: np.ndarray  # float, NaN = unknown (minimum traffic)
    reads: np.ndarray  # the part of ``bytes`` that is read
    share: np.ndarray  # share of the owner's time this activity is (1.0 when alone)
    costs: dict[int, Cost]  # owner range -> the op's full cost


class _Owners:
    """Finds the cost owner of an op range, memoised.

    Walking outwards from a kernel's innermost op, an ancestor with a formula is the owner only
    if none of its other descendant ops has a formula of its own: otherwise its cost is already
    counted by those ops, and taking it again would count the same bytes twice (e.g. the
    reduction inside ``_safe_softmax`` must not receive the whole softmax's bytes).
    """

    def __init__(self, trace: Trace, links: Links):
        self.t, self.L = trace, links
        self.memo: dict[int, int] = {}
        self.cache: dict[tuple[str, int], Optional[Cost]] = {}
        self.costed_below: dict[int, bool] = {}
        self.by_range: dict[int, Optional[Cost]] = {}
        R = trace.ranges
        self.kind, self.name, self.sig = R["kind"], R["name"], R["sig"]

    def cost_of(self, r: int) -> Optional[Cost]:
        # memoised per range: owner() walks the same ancestors for every kernel below them
        if r in self.by_range:
            return self.by_range[r]
        c = self.by_range[r] = self._cost_of(r)
        return c

    def _cost_of(self, r: int) -> Optional[Cost]:
        if self.kind[r] != OP or self.sig[r] < 0:
            return None
        name = self.t.strings[self.name[r]]
        if not has_formula(name):
            return None
        key = (name, int(self.sig[r]))
        if key not in self.cache:
            self.cache[key] = op_cost(name, parse_args(self.t.signatures[int(self.sig[r])]))
        return self.cache[key]

    def _has_costed_descendant(self, r: int) -> bool:
        hit = self.costed_below.get(r)
        if hit is not None:
            return hit
        out = False
        for c in self.L.children(r).tolist():
            if self.cost_of(c) is not None or self._has_costed_descendant(c):
                out = True
                break
        self.costed_below[r] = out
        return out

    def owner(self, r: int) -> int:
        hit = self.memo.get(r)
        if hit is not None:
            return hit
        start, owner = r, -1
        if self.cost_of(r) is not None:
            owner = r
        else:
            a = int(self.L.op_ancestor[r])
            while a >= 0:
                if self.cost_of(a) is not None:
                    owner = a if not self._has_costed_descendant(a) else -1
                    break
                a = int(self.L.op_ancestor[a])
        self.memo[start] = owner
        return owner


def _cost(owners: _Owners, o: int) -> Cost:
    """The cost of an owner (an owner is a range with a cost, by definition)."""
    c = owners.cost_of(o)
    assert c is not None, o
    return c


def attribute(trace: Trace, links: Links) -> Attribution:
    G = trace.gpu
    n = len(G["kind"])
    owner = np.full(n, -1, dtype=np.int64)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    reads = np.full(n, np.nan)
    share = np.ones(n)
    owners = _Owners(trace, links)
    names = trace.strings
    kinds = G["kind"]
    gop = links.gpu_op
    # data movement measured by the tracer
    copy_b = G["bytes"].astype(np.float64)
    is_memcpy = kinds == MEMCPY
    is_memset = kinds == MEMSET
    dtod = np.array([("DtoD" in names[i] or "PtoP" in names[i]) for i in G["name"][is_memcpy]], dtype=bool)
    mc_idx = np.flatnonzero(is_memcpy)
    vals = copy_b[mc_idx]
    vals[vals < 0] = np.nan
    nbytes[mc_idx] = np.where(dtod, 2 * vals, vals)  # a device copy reads and writes
    reads[mc_idx] = np.where(dtod, vals, 0.0)
    flops[mc_idx] = 0.0
    ms_idx = np.flatnonzero(is_memset)
    vals = copy_b[ms_idx]
    vals[vals < 0] = np.nan
    nbytes[ms_idx] = vals
    reads[ms_idx] = 0.0
    flops[ms_idx] = 0.0

    costs: dict[int, Cost] = {}
    # owners are looked up once per distinct launching op, then mapped back to kernels
    kern = np.flatnonzero((kinds == KERNEL) & (gop >= 0))
    ops = gop[kern]
    uniq, inv = np.unique(ops, return_inverse=True)
    uniq_owner = np.array([owners.owner(int(r)) for r in uniq.tolist()], dtype=np.int64)
    owner[kern] = uniq_owner[inv] if len(uniq) else owner[kern]
    has = np.flatnonzero(owner >= 0)
    order = has[np.argsort(owner[has], kind="stable")]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(owner[order])) + 1)) if len(order) else np.zeros(0, np.int64)
    counts = np.diff(np.concatenate((starts, [len(order)]))) if len(order) else np.zeros(0, np.int64)
    dur = G["dur"]
    kname: list[str] = []
    # Most ops launch one kernel: their cost is the op's, assigned in one vectorised step.
    single = order[starts[counts == 1]]
    if len(single):
        cs = [_cost(owners, int(o)) for o in owner[single].tolist()]
        for o, c in zip(owner[single].tolist(), cs):
            costs[o] = c
        nan = float("nan")
        flops[single] = [c.flops if c.flops is not None else nan for c in cs]
        nbytes[single] = [c.bytes if c.bytes is not None else nan for c in cs]
        reads[single] = [(c.reads if c.reads is not None else c.bytes) if c.bytes is not None else nan for c in cs]
        need_itemsize = [i for i, c in enumerate(cs) if c.bytes is None and "elements" in c.detail]
        if need_itemsize:
            kname = [names[i] for i in G["name"].tolist()]
            for i in need_itemsize:
                k = int(single[i])
                c = _with_itemsize_from_kernel(cs[i], [kname[k]])
                costs[int(owner[k])] = c
                if c.bytes is not None:
                    nbytes[k], reads[k] = c.bytes, c.reads
    multi = np.flatnonzero(counts > 1)
    if len(multi) and not kname:
        kname = [names[i] for i in G["name"].tolist()]
    for j in multi.tolist():
        ks = order[starts[j] : starts[j] + counts[j]].tolist()
        o = int(owner[ks[0]])
        c = _cost(owners, o)
        if c.bytes is None and "elements" in c.detail:
            c = _with_itemsize_from_kernel(c, [kname[k] for k in ks])
        costs[o] = c
        d = dur[ks]
        total = float(d.sum())
        fr = np.full(len(ks), 1.0 / len(ks)) if total <= 0 else d / total
        share[ks] = fr
        if c.bytes is not None:
            b, r = _split_bytes(c, [kname[k] for k in ks], fr)
            nbytes[ks] = b
            reads[ks] = r
        if c.flops is not None:
            f = fr
            if c.engine == "matrix":
                mat = np.array([_matrix_main(kname[k]) for k in ks])
                if mat.any() and d[mat].sum() > 0:
                    f = np.where(mat, d / d[mat].sum(), 0.0)
            flops[ks] = c.flops * f
    return Attribution(owner=owner, flops=flops, bytes=nbytes, reads=reads, share=share, costs=costs)


@functools.lru_cache(maxsize=4096)
def _matrix_main(name: str) -> bool:
    """A kernel of a matrix-engine op that does the op's math (not a fill or reduce beside it).
    Cached by name: a training trace launches the same few kernels thousands of times, and the
    regexes over long template names cost ~70 us each."""
    return bool(MATRIX_KERNEL.search(name)) and not AUX_KERNEL.search(_function_name(name))


@functools.lru_cache(maxsize=4096)
def _pass_role(name: str) -> str:
    """The kernel's role in a fused attention backward: "pre" or "post" pass, or "main"."""
    return "pre" if _PRE.search(name) else "post" if _POST.search(name) else "main"


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")
_PRE = re.compile(r"dot_do_o|bwd_preprocess|preprocess", re.I)
_POST = re.compile(r"convert_dq|bwd_postprocess|postprocess", re.I)


def _with_itemsize_from_kernel(c: Cost, kernel_names: list[str]) -> Cost:
    """Tensor lists (aten::cat) record no dtype; PyTorch's cat kernels carry the element size
    as a template argument (``OpaqueType<2u>``)."""
    for nm in kernel_names:
        m = _OPAQUE.search(nm)
        if m:
            n = c.detail["elements"] * int(m.group(1))
            return Cost(
                c.flops,
                float(2 * n),
                c.dtype,
                c.engine,
                detail=dict(c.detail, itemsize=int(m.group(1))),
                reads=float(n),
            )
    return c


def _split_bytes(c: Cost, kernel_names: list[str], fr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and bytes-read of each of the owner's kernels.

    Fused attention backward: the pre-pass and post-pass kernels get their own traffic (see
    cost.py); the main kernel(s) the rest. Otherwise: by duration."""
    total = float(c.bytes or 0.0)
    reads = float(c.reads) if c.reads is not None else total
    b = total * fr
    r = reads * fr
    if c.parts and len(kernel_names) > 1:
        role = [_pass_role(nm) for nm in kernel_names]
        main = np.array([x == "main" for x in role])
        if main.any() and not main.all():
            b = np.zeros(len(role))
            r = np.zeros(len(role))
            rest_b, rest_r = total, reads
            for key, tag in (("preprocess", "pre"), ("postprocess", "post")):
                idx = [i for i, x in enumerate(role) if x == tag]
                if idx and key in c.parts:
                    pr, pw = c.parts[key]
                    for i in idx:
                        b[i] = (pr + pw) / len(idx)
                        r[i] = pr / len(idx)
                    rest_b -= pr + pw
                    rest_r -= pr
            mfr = fr * main
            mfr = mfr / mfr.sum() if mfr.sum() > 0 else main / main.sum()
            b += max(rest_b, 0.0) * mfr
            r += max(rest_r, 0.0) * mfr
    return b, r
