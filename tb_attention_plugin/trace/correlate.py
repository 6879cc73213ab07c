"""Link the records of one trace: GPU work -> launch -> CPU op stack -> modules, and
backward ops -> the forward op they differentiate.

* Nesting: on each CPU thread, ranges (ops, annotations, kept Python frames, launches) are
  nested by time; ``parent`` is the innermost range that contains a range.
* GPU activity -> launch: the runtime/driver call with the same correlation id. A GPU activity
  with no launch record falls back to the CPU op with its External id.
* Backward -> forward: an ``autograd::engine::evaluate_function: XBackward0`` range is a
  *backward root*; its forward op is found through the ``fwdbwd`` flow that ends on it (or on
  the node op just inside it), else through the autograd sequence number. Everything nested in
  a backward root inherits that forward op's context.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arrays import lexorder
from .records import LAUNCH, OP, Trace

BACKWARD_PREFIX = "autograd::engine::evaluate_function:"


@dataclass
class Links:
    parent: np.ndarray  # range -> innermost enclosing range on its thread, or -1
    op_ancestor: np.ndarray  # range -> nearest enclosing OP range, or -1
    backward_root: np.ndarray  # range -> enclosing backward root (itself if it is one), or -1
    forward_of: np.ndarray  # backward root -> the forward op it differentiates, or -1
    gpu_launch: np.ndarray  # GPU activity -> launch range, or -1
    gpu_parent: np.ndarray  # GPU activity -> innermost CPU range around its launch, or -1
    gpu_op: np.ndarray  # GPU activity -> innermost CPU op that launched it, or -1
    child_start: np.ndarray  # CSR of children in time order: children of r are
    child_index: np.ndarray  #   child_index[child_start[r]:child_start[r+1]]
    roots: np.ndarray  # ranges with no parent, in time order

    def children(self, r: int) -> np.ndarray:
        return self.child_index[self.child_start[r] : self.child_start[r + 1]]

    def subtree(self, r: int) -> np.ndarray:
        """r and every range nested in it (r first; in depth-first order of the children)."""
        pos, size, pre = self._preorder()
        p = int(pos[r])
        return pre[p : p + int(size[r])]

    def preorder(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position of each range in the depth-first preorder, its subtree's size, the preorder):
        ``subtree(r)`` is ``pre[pos[r] : pos[r] + size[r]]``, and the sizes along a subtree say its
        shape (for telling repeated subtrees apart without walking them)."""
        return self._preorder()

    def _preorder(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position of each range in a depth-first preorder of the forest, its subtree's size,
        the preorder): a subtree is one slice. Built once, in whole-array steps per depth level
        (Python lists of the CSR took 36 bytes an entry, 28 MB on a 390k-range trace)."""
        cache = self.__dict__.get("_preorder_cache")
        if cache is None or cache[0] is not self.child_start or cache[1] is not self.child_index:
            cache = (self.child_start, self.child_index, *_preorder(self.child_start, self.child_index, self.roots))
            self.__dict__["_preorder_cache"] = cache
        return cache[2], cache[3], cache[4]

    def outermost_marked(self, marked: np.ndarray) -> np.ndarray:
        """Each range's outermost marked range around it (itself included), or -1: what
        :func:`outermost_marked` gives from ``parent``, read off the preorder. A subtree is a slice
        of the preorder, so the outermost marked ranges are those whose slice starts past the end of
        every earlier one, and each marks its slice: whole-array passes over the marked subtrees
        only, where the walk up the parents takes a pass over every range per level (~40-50 ms of
        the tagger's four calls on a 263 MB trace) and allocates several arrays over all ranges."""
        pos, size, pre = self._preorder()
        top = np.full(len(marked), -1, dtype=np.int64)
        rows = np.flatnonzero(marked)
        if not len(rows):
            return top
        rows = rows[np.argsort(pos[rows], kind="stable")]
        start = pos[rows].astype(np.int64)
        end = start + size[rows]
        reach = np.maximum.accumulate(end)
        outer = np.ones(len(rows), dtype=bool)
        outer[1:] = start[1:] >= reach[:-1]  # not inside an earlier marked range's subtree
        r, a, lens = rows[outer], start[outer], (end - start)[outer]
        offsets = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        top[pre[np.repeat(a, lens) + offsets]] = np.repeat(r, lens)
        return top

    def forward_context(self, ranges: np.ndarray) -> np.ndarray:
        """Per range: itself, or, inside a backward root, the forward op that root differentiates
        (-1 where unlinked, and for -1). A backward kernel's work belongs to the forward code that
        asked for it: its module, source line, attention call."""
        r = np.asarray(ranges, dtype=np.int64)
        br = take_or(self.backward_root, r)
        out: np.ndarray = r.copy()
        inb = br >= 0
        out[inb] = self.forward_of[br[inb]]
        return out

    def ancestors(self, r: int) -> Iterator[int]:
        """r's ancestors, innermost first."""
        p = self.parent[r]
        while p >= 0:
            yield int(p)
            p = self.parent[p]


def _children_of(start: np.ndarray, index: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The children of ``nodes`` (each node's in CSR order, node after node) and, for each
    child, the position in ``nodes`` of its parent."""
    counts = start[nodes + 1] - start[nodes]
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(nodes)), counts)
    first = np.cumsum(counts) - counts  # exclusive
    offs = np.arange(total) - first[owner]
    return index[start[nodes][owner] + offs], owner


def _preorder(start: np.ndarray, index: np.ndarray, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(start) - 1
    levels = [np.asarray(roots, dtype=np.int64)]
    owners = [np.zeros(0, dtype=np.int64)]
    while len(levels[-1]):
        kids, owner = _children_of(start, index, levels[-1])
        levels.append(kids)
        owners.append(owner)
    size = np.ones(n, dtype=np.int64)
    for d in range(len(levels) - 1, 0, -1):  # bottom up: a node's size is 1 + its children's
        np.add.at(size, levels[d - 1][owners[d]], size[levels[d]])
    pos = np.zeros(n, dtype=np.int64)
    top = levels[0]
    pos[top] = np.cumsum(size[top]) - size[top]
    for d in range(1, len(levels)):  # top down: after the parent, the earlier siblings' subtrees
        kids, owner = levels[d], owners[d]
        if not len(kids):
            continue
        sz = size[kids]
        csum = np.cumsum(sz) - sz
        group_first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        base = np.repeat(csum[group_first], np.diff(np.r_[group_first, len(kids)]))
        pos[kids] = pos[levels[d - 1][owner]] + 1 + (csum - base)
    pre = np.empty(n, dtype=np.int64)
    pre[pos] = np.arange(n)
    it = index_dtype(n)
    return pos.astype(it), size.astype(it), pre.astype(it)


def index_dtype(n: int) -> type:
    """The integer type the link arrays of ``n`` ranges are kept in: int32 while it holds every
    index and the -1 for none (half the memory: ten such arrays are ~30 MB as int64 on a 250 MB
    trace), int64 beyond."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def nearest_marked_ancestor(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, its innermost strict ancestor with ``marked`` set, or -1.

    Pointer jumping: every round, a node whose current candidate is not marked jumps to that
    candidate's candidate, so chains of any depth resolve in O(log depth) vectorised rounds."""
    cand: np.ndarray = parent.copy()
    todo = np.flatnonzero(cand >= 0)
    todo = todo[~marked[cand[todo]]]
    while len(todo):
        cand[todo] = cand[cand[todo]]
        keep = cand[todo] >= 0
        todo = todo[keep]
        todo = todo[~marked[cand[todo]]]
    return cand


def outermost_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, its outermost ancestor-or-self with ``marked`` set, or -1."""
    n = len(parent)
    res = np.where(marked, np.arange(n), -1)
    up = parent.copy()
    active = np.flatnonzero(up >= 0)
    while len(active):
        anc = up[active]
        better = res[anc]
        take = better >= 0
        res[active[take]] = better[take]
        up[active] = up[anc]
        active = active[up[active] >= 0]
    return res


def _nest(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parent of every range on its thread: the nearest earlier range (in start order, longest
    first) that ends no earlier — for properly nested ranges, the innermost one containing it.
    Vectorised: each range starts from its predecessor and jumps along candidates' parents past
    ranges that end too early (they, and everything nested in them, closed before it began)."""
    R = trace.ranges
    n = len(R["kind"])
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), e.copy(), e.copy()
    ts = R["ts_ns"]
    end = ts + R["dur_ns"]
    # Sort by thread, start, longest first, file order (a stable sort): parents precede their
    # children.
    order = lexorder(R["thread"], ts, -R["dur_ns"])
    th = R["thread"][order]
    e = end[order]
    cand = np.arange(n, dtype=np.int64) - 1
    cand[0] = -1
    cand[1:][th[1:] != th[:-1]] = -1
    todo = np.flatnonzero(cand >= 0)
    todo = todo[e[cand[todo]] < e[todo]]
    while len(todo):
        cand[todo] = cand[cand[todo]]
        todo = todo[cand[todo] >= 0]
        todo = todo[e[cand[todo]] < e[todo]]
    parent = np.full(n, -1, dtype=np.int64)
    has = cand >= 0
    parent[order[has]] = order[cand[has]]

    kind = R["kind"]
    names = trace.strings
    is_bwd_name = np.array([s.startswith(BACKWARD_PREFIX) for s in names], dtype=bool)
    bwd_flag = is_bwd_name[R["name"]] & (kind == OP) if len(names) else np.zeros(n, bool)
    op_anc = nearest_marked_ancestor(parent, kind == OP)
    broot = outermost_marked(parent, bwd_flag)
    return parent, op_anc, broot, order


def _children_csr(parent: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(parent)
    order = lexorder(parent, ts)  # stable: ties keep their order
    sorted_parent = parent[order]
    start = np.searchsorted(sorted_parent, np.arange(n + 1), side="left")
    roots = order[sorted_parent < 0]
    return start.astype(np.int64), order.astype(np.int64), roots


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values[j] where keys[j] == query (first match), else -1; keys < 0 never match."""
    out = np.full(len(queries), -1, dtype=np.int64)
    ok = keys >= 0
    keys, values = keys[ok], values[ok]
    if not len(keys) or not len(queries):
        return out
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.searchsorted(sk, queries)
    pos_c = np.minimum(pos, len(sk) - 1)
    hit = (sk[pos_c] == queries) & (queries >= 0)
    out[hit] = values[order[pos_c[hit]]]
    return out


def _link_backward(trace: Trace, parent: np.ndarray, broot: np.ndarray) -> np.ndarray:
    """forward_of[root] for every backward root range."""
    R = trace.ranges
    n = len(parent)
    fwd = np.full(n, -1, dtype=np.int64)
    roots = np.flatnonzero(broot == np.arange(n))
    if not len(roots):
        return fwd
    kind, seq, thread, ts = R["kind"], R["seq"], R["thread"], R["ts_ns"]
    # Forward candidates: ops with a sequence number outside any backward subtree.
    is_fwd = (kind == OP) & (seq >= 0) & (broot < 0)
    depth = _depth(parent)

    F = trace.flows
    if len(F["id"]):
        # Bind flow ends to ranges that start exactly at the flow's timestamp on its thread.
        key_r = thread.astype(np.int64) * (1 << 40) + ts
        starts = F["start"] == 1
        # forward side: the innermost forward-candidate op starting there
        cand = np.flatnonzero(is_fwd)
        # prefer deeper ops: sort candidates by (key, depth desc)
        c_order = cand[np.lexsort((-depth[cand], key_r[cand]))]
        ck = key_r[c_order]
        fkey = F["thread"].astype(np.int64) * (1 << 40) + F["ts_ns"]
        pos = np.searchsorted(ck, fkey)
        pos_c = np.minimum(pos, max(len(ck) - 1, 0))
        s_hit = starts & (len(ck) > 0) & (ck[pos_c] == fkey) if len(ck) else np.zeros(len(fkey), bool)
        s_op = np.where(s_hit, c_order[pos_c] if len(ck) else -1, -1)
        # backward side: the range starting there, mapped to its backward root
        all_order = np.argsort(key_r, kind="stable")
        ak = key_r[all_order]
        pos2 = np.searchsorted(ak, fkey)
        pos2_c = np.minimum(pos2, max(len(ak) - 1, 0))
        f_hit = (~starts) & (ak[pos2_c] == fkey)
        f_root = np.where(f_hit, broot[all_order[pos2_c]], -1)
        # pair by flow id
        s_ids, s_ops = F["id"][starts & (s_op >= 0)], s_op[starts & (s_op >= 0)]
        f_ids, f_roots = F["id"][f_hit & (f_root >= 0)], f_root[f_hit & (f_root >= 0)]
        matched = _lookup(s_ids, s_ops, f_ids)
        ok = matched >= 0
        fwd[f_roots[ok]] = matched[ok]

    # Fallback: sequence numbers (the root's own, or its node op's just inside it).
    todo = roots[fwd[roots] < 0]
    if len(todo):
        root_seq = seq[todo].copy()
        missing = root_seq < 0
        if missing.any():
            inner = np.flatnonzero((broot >= 0) & (seq >= 0) & (kind == OP))
            inner_seq = _lookup(broot[inner], seq[inner], todo[missing])
            root_seq[missing] = inner_seq
        cand = np.flatnonzero(is_fwd)
        # for each sequence number keep the deepest forward op
        c_order = cand[np.lexsort((-depth[cand], seq[cand]))]
        fwd[todo] = _lookup(seq[c_order], c_order, root_seq)
    return fwd


def take_or(values: np.ndarray, idx: np.ndarray, default: Any = -1) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``default``; also when ``values`` is empty (a trace
    with GPU kernels but no CPU events), where ``values[np.maximum(idx, 0)]`` would raise."""
    if len(values) == 0:
        return np.full(len(idx), default, dtype=np.result_type(values.dtype, np.asarray(default).dtype))
    out: np.ndarray = np.where(idx >= 0, values[np.maximum(idx, 0)], default)
    return out


def _depth(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node, by pointer jumping: O(log depth) vectorised rounds."""
    depth = (parent >= 0).astype(np.int64)  # hops from each node to up[node]
    up = parent.copy()
    active = np.flatnonzero(up >= 0)
    while len(active):
        a = up[active]
        depth[active] += depth[a]  # both gathers read this round's values (synchronous jumps)
        up[active] = up[a]
        active = active[up[active] >= 0]
    return depth


def link(trace: Trace) -> Links:
    R, G = trace.ranges, trace.gpu
    parent, op_anc, broot, _ = _nest(trace)
    child_start, child_index, roots = _children_csr(parent, R["ts_ns"])
    forward_of = _link_backward(trace, parent, broot)

    launch_idx = np.flatnonzero(R["kind"] == LAUNCH)
    gpu_launch = _lookup(R["corr"][launch_idx], launch_idx, G["corr"])
    gpu_parent = take_or(parent, gpu_launch)
    gpu_op = take_or(op_anc, gpu_launch)
    # No launch record (or a launch outside any op): fall back to the External id.
    need = gpu_op < 0
    if need.any():
        op_idx = np.flatnonzero(R["kind"] == OP)
        by_ext = _lookup(R["ext"][op_idx], op_idx, G["ext"][need])
        gpu_op[need] = by_ext
        gp = gpu_parent[need]
        gpu_parent[need] = np.where(gp < 0, by_ext, gp)
    it = index_dtype(len(parent) + 1)  # child_start holds n
    return Links(
        parent=parent.astype(it),
        op_ancestor=op_anc.astype(it),
        backward_root=broot.astype(it),
        forward_of=forward_of.astype(it),
        gpu_launch=gpu_launch.astype(it),
        gpu_parent=gpu_parent.astype(it),
        gpu_op=gpu_op.astype(it),
        child_start=child_start.astype(it),
        child_index=child_index.astype(it),
        roots=roots.astype(it),
    )
