"""Give each GPU activity its share of an op's FLOPs and bytes.

The *cost owner* of a kernel is the innermost op around its launch that has a cost formula and
recorded shapes (walking outwards through ops without one). When one owner launches several
kernels, each kernel is costed by its role (roofline/roles.py; formulas in cost.role_bytes):

* FLOPs go to the owner's MAIN kernels (the GEMM, the attention loop), in proportion to their
  durations; pre/post passes, split-KV combines, head reductions, split-K reductions and other
  helpers get none. When no kernel is a MAIN one, all share the FLOPs by duration.
* Bytes are the traffic of each kernel's role, from the op's shapes (kernels of one role share
  that role's bytes by duration); a helper the op's role model does not describe gets unknown
  bytes rather than a share of the others'. Ops without a role model, or whose kernels have no
  recognised role, share their bytes by duration.

Memcpy and memset activities carry their own byte counts in the trace; those are used as
measured values and never take a share of an op's cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..trace.correlate import Links
from ..trace.records import KERNEL, MEMCPY, MEMSET, OP, Trace
from ..trace.shapes import parse_args
from . import roles as R
from .cost import MATRIX, Cost, SdpaRoles, has_formula, op_cost, role_bytes, sdpa_splits


@dataclass
class Attribution:
    owner: np.ndarray  # GPU activity -> cost-owner op range, or -1
    flops: np.ndarray  # float, NaN = unknown
    bytes: np.ndarray  # float, NaN = unknown (minimum traffic)
    reads: np.ndarray  # the part of ``bytes`` that is read
    share: np.ndarray  # share of the owner's time this activity is (1.0 when alone)
    costs: dict[int, Cost]  # owner range -> the op's full cost
    # int8 index into roles.ROLE_NAMES: the kernel's role in a multi-kernel op, -1 for a kernel
    # that is its op's only one or whose role is unknown
    role: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    # bool: the op's role model does not describe this kernel (its bytes are unknown)
    undescribed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


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
    role = np.full(n, -1, dtype=np.int8)
    undescribed = np.zeros(n, dtype=bool)
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
    grid = np.stack([G["grid_x"], G["grid_y"], G["grid_z"]], axis=1) if n else np.zeros((0, 3), np.int64)
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
        kroles = _roles(c, [kname[k] for k in ks])
        role[ks] = [R.ROLE_INDEX[r] if r is not None else -1 for r in kroles]
        by_role = _by_role(c, kroles, [kname[k] for k in ks], grid[ks], d) if c.roles is not None else None
        if by_role is not None:
            nbytes[ks], reads[ks] = by_role
            if c.bytes is not None:
                undescribed[ks] = np.isnan(by_role[0])
        elif c.bytes is not None:
            nbytes[ks] = float(c.bytes) * fr
            reads[ks] = float(c.reads if c.reads is not None else c.bytes) * fr
        if c.flops is not None:
            main = np.array([r == R.MAIN for r in kroles])
            f = np.where(main, d / d[main].sum(), 0.0) if main.any() and d[main].sum() > 0 else fr
            flops[ks] = c.flops * f
    return Attribution(
        owner=owner,
        flops=flops,
        bytes=nbytes,
        reads=reads,
        share=share,
        costs=costs,
        role=role,
        undescribed=undescribed,
    )


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


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


def _roles(c: Cost, knames: list[str]) -> list[Optional[str]]:
    """Each kernel's role in its op (roles.kernel_role). In an attention op whose other kernels
    are recognised helpers, a kernel the names do not tell is its main loop."""
    kroles = [R.kernel_role(nm, c.engine == MATRIX) for nm in knames]
    if isinstance(c.roles, SdpaRoles) and R.MAIN not in kroles and any(r is not None for r in kroles):
        kroles = [R.MAIN if r is None else r for r in kroles]
    return kroles


def _by_role(
    c: Cost, kroles: list[Optional[str]], knames: list[str], grids: np.ndarray, d: np.ndarray
) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(bytes, bytes read) of each of the owner's kernels from its role (cost.role_bytes), or
    None when the kernels' roles say nothing beyond one MAIN kind of work (then they share the
    op's cost by duration). Kernels of one role share that role's traffic by duration; kernels
    the op's role model does not describe get NaN (unknown)."""
    present = frozenset(r for r in kroles if r is not None)
    if not present or present in ({R.MAIN}, {R.AUX}):
        return None  # one kind of work (or nothing recognised): shared by duration
    splits = 1
    if isinstance(c.roles, SdpaRoles) and R.COMBINE in present and R.MAIN in kroles:
        i = kroles.index(R.MAIN)
        rule = R.kernel_rule(knames[i])
        g = (int(grids[i][0]), int(grids[i][1]), int(grids[i][2]))
        splits, _ = sdpa_splits(c.roles, g, rule.splits_grid if rule else None)
    table = role_bytes(c, present, splits)
    if not table:
        return None
    b = np.full(len(kroles), np.nan)
    r_ = np.full(len(kroles), np.nan)
    for role, (rd, wr) in table.items():
        idx = [i for i, x in enumerate(kroles) if x == role]
        if not idx:
            continue
        w = d[idx]
        if role in R.PER_KERNEL_ROLES:
            w = np.ones(len(idx))
        else:
            w = w / w.sum() if w.sum() > 0 else np.full(len(idx), 1.0 / len(idx))
        b[idx] = (rd + wr) * w
        r_[idx] = rd * w
    return b, r_
