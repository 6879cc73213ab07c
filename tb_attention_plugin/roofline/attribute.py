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

from ..trace.arrays import unique_ints
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

    def owners_of(self, rs: np.ndarray) -> np.ndarray:
        """:meth:`owner` of each range of ``rs`` (distinct). A range with a cost is its own owner:
        those are found with array operations and one cost per distinct (name, signature) (a
        trace launches most kernels from ops with a formula, each op of every step its own range);
        the others walk outwards one by one."""
        names = self.t.strings
        formula = np.fromiter((has_formula(x) for x in names), dtype=bool, count=len(names))
        sig = self.sig[rs].astype(np.int64)
        nm = self.name[rs].astype(np.int64)
        cand = np.flatnonzero((self.kind[rs] == OP) & (sig >= 0) & formula[nm])
        out = np.full(len(rs), -1, dtype=np.int64)
        own = np.zeros(len(rs), dtype=bool)
        if len(cand):
            key = nm[cand] * (len(self.t.signatures) + 1) + sig[cand]
            ukey, first, kinv = unique_ints(key, return_index=True, return_inverse=True)
            ucost = [self.cost_of(int(rs[cand[i]])) for i in first.tolist()]
            has = np.array([c is not None for c in ucost], dtype=bool)[kinv.reshape(-1)]
            direct = cand[has]
            out[direct] = rs[direct]
            own[direct] = True
            by_range, memo = self.by_range, self.memo
            for r, ci in zip(rs[direct].tolist(), kinv.reshape(-1)[has].tolist()):
                by_range[r] = ucost[ci]
                memo[r] = r
        for i in np.flatnonzero(~own).tolist():
            out[i] = self.owner(int(rs[i]))
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
    uniq, inv = unique_ints(ops, return_inverse=True)
    uniq_owner = owners.owners_of(uniq)
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
    out = _Out(flops, nbytes, reads, share, role, undescribed)
    # Owners of several kernels: a training trace repeats the same op with the same kernels in
    # every step, so they are grouped by (cost, kernel names) and each group is costed at once.
    groups: dict[tuple[int, tuple[str, ...]], list[list[int]]] = {}
    owner_keys = []
    for j in multi.tolist():
        ks = order[starts[j] : starts[j] + counts[j]].tolist()
        c = _cost(owners, int(owner[ks[0]]))
        key = (id(c), tuple([kname[k] for k in ks]))
        groups.setdefault(key, []).append(ks)
        owner_keys.append((int(owner[ks[0]]), key))
    group_cost: dict[tuple[int, tuple[str, ...]], Cost] = {}
    for key, members in groups.items():
        c = _cost(owners, int(owner[members[0][0]]))
        if c.bytes is None and "elements" in c.detail:
            c = _with_itemsize_from_kernel(c, list(key[1]))
        group_cost[key] = c
    for o, key in owner_keys:  # in owner order, as before
        costs[o] = group_cost[key]
    for (cid, knames), members in groups.items():
        c = group_cost[(cid, knames)]
        kroles = _roles(c, list(knames))
        if len(knames) < _BATCH_MAX and len(members) > 1 and _BATCH:
            _owners_at_once(out, c, kroles, list(knames), np.asarray(members, dtype=np.int64), grid, dur)
        else:
            for ks in members:
                _one_owner(out, c, kroles, list(knames), ks, grid, dur)
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


@dataclass
class _Out:
    """The per-kernel columns :func:`attribute` fills."""

    flops: np.ndarray
    bytes: np.ndarray
    reads: np.ndarray
    share: np.ndarray
    role: np.ndarray
    undescribed: np.ndarray


# Groups of owners with the same cost and kernels are costed with array operations over the
# group when they have fewer kernels than this: numpy sums fewer than 8 numbers left to right, as
# the column-by-column sums of _rowsum do (8 or more it sums pairwise), so the shares are the
# per-owner ones to the last bit. _BATCH False: every owner alone (tests compare the two).
_BATCH_MAX = 8
_BATCH = True


def _rowsum(d: np.ndarray) -> np.ndarray:
    """Each row's sum, left to right (what ``row.sum()`` gives for a row of fewer than 8)."""
    s: np.ndarray = d[:, 0].copy()
    for j in range(1, d.shape[1]):
        s += d[:, j]
    return s


def _one_owner(
    out: _Out, c: Cost, kroles: list[Optional[str]], knames: list[str], ks: list[int], grid: np.ndarray, dur: np.ndarray
) -> None:
    """Shares, roles, bytes and FLOPs of the kernels ``ks`` of one owner of cost ``c``."""
    d = dur[ks]
    total = float(d.sum())
    fr = np.full(len(ks), 1.0 / len(ks)) if total <= 0 else d / total
    out.share[ks] = fr
    out.role[ks] = [R.ROLE_INDEX[r] if r is not None else -1 for r in kroles]
    by_role = _by_role(c, kroles, knames, grid[ks], d) if c.roles is not None else None
    if by_role is not None:
        out.bytes[ks], out.reads[ks] = by_role
        if c.bytes is not None:
            out.undescribed[ks] = np.isnan(by_role[0])
    elif c.bytes is not None:
        out.bytes[ks] = float(c.bytes) * fr
        out.reads[ks] = float(c.reads if c.reads is not None else c.bytes) * fr
    if c.flops is not None:
        main = np.array([r == R.MAIN for r in kroles])
        f = np.where(main, d / d[main].sum(), 0.0) if main.any() and d[main].sum() > 0 else fr
        out.flops[ks] = c.flops * f


def _owners_at_once(
    out: _Out,
    c: Cost,
    kroles: list[Optional[str]],
    knames: list[str],
    ks: np.ndarray,
    grid: np.ndarray,
    dur: np.ndarray,
) -> None:
    """:func:`_one_owner` for many owners of the same cost and kernel names (``ks``: one row of
    kernel indices per owner, fewer than 8 columns), the same arithmetic as array operations."""
    m = ks.shape[1]
    d = dur[ks]
    total = _rowsum(d)
    fr = np.full(d.shape, 1.0 / m)
    pos = total > 0
    fr[pos] = d[pos] / total[pos][:, None]
    out.share[ks] = fr
    out.role[ks] = np.asarray([R.ROLE_INDEX[r] if r is not None else -1 for r in kroles], dtype=out.role.dtype)
    tables = _role_tables(c, kroles, knames, grid, ks) if c.roles is not None else [(np.arange(len(ks)), None)]
    for rows, table in tables:
        kr = ks[rows]
        if table is None:  # shared by duration
            if c.bytes is not None:
                out.bytes[kr] = float(c.bytes) * fr[rows]
                out.reads[kr] = float(c.reads if c.reads is not None else c.bytes) * fr[rows]
            continue
        b = np.full((len(rows), m), np.nan)
        r_ = np.full((len(rows), m), np.nan)
        dr = d[rows]
        for role, (rd, wr) in table.items():
            idx = [i for i, x in enumerate(kroles) if x == role]
            if not idx:
                continue
            if role in R.PER_KERNEL_ROLES:
                w = np.ones((len(rows), len(idx)))
            else:
                ws = _rowsum(dr[:, idx])
                ok = ws > 0
                w = np.full((len(rows), len(idx)), 1.0 / len(idx))
                w[ok] = dr[ok][:, idx] / ws[ok][:, None]
            b[:, idx] = (rd + wr) * w
            r_[:, idx] = rd * w
        out.bytes[kr], out.reads[kr] = b, r_
        if c.bytes is not None:
            out.undescribed[kr] = np.isnan(b)
    if c.flops is not None:
        main = np.array([r == R.MAIN for r in kroles])
        f = fr
        if main.any():
            ms = _rowsum(d[:, main])
            ok = ms > 0
            f = fr.copy()
            f[ok] = np.where(main, d[ok] / ms[ok][:, None], 0.0)
        out.flops[ks] = c.flops * f


def _role_tables(
    c: Cost, kroles: list[Optional[str]], knames: list[str], grid: np.ndarray, ks: np.ndarray
) -> list[tuple[np.ndarray, Optional[dict[str, tuple[float, float]]]]]:
    """:func:`_by_role`'s role traffic for the owners ``ks`` (rows) of one cost and kernel names:
    (rows, table) per distinct split count (a split-KV attention's partial results depend on its
    main kernel's grid); table None where the bytes are shared by duration instead."""
    every = np.arange(len(ks))
    present = frozenset(r for r in kroles if r is not None)
    if not present or present in ({R.MAIN}, {R.AUX}):
        return [(every, None)]
    if not (isinstance(c.roles, SdpaRoles) and R.COMBINE in present and R.MAIN in kroles):
        return [(every, role_bytes(c, present, 1) or None)]
    i = kroles.index(R.MAIN)
    rule = R.kernel_rule(knames[i])
    grids, inv = np.unique(grid[ks[:, i]], axis=0, return_inverse=True)
    out: list[tuple[np.ndarray, Optional[dict[str, tuple[float, float]]]]] = []
    for gi, g in enumerate(grids.tolist()):
        splits, _ = sdpa_splits(c.roles, (int(g[0]), int(g[1]), int(g[2])), rule.splits_grid if rule else None)
        out.append((np.flatnonzero(inv.reshape(-1) == gi), role_bytes(c, present, splits) or None))
    return out


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
