"""Which op made an allocation, and which tensor of its outputs the allocation holds.

An allocation is matched to the innermost op around it whose inferred output has its size (CUDA
sizes rounded up as the caching allocator does), then to the outermost enclosing op that
returns the same tensor (``contiguous`` rather than the ``clone`` inside it).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from ..attention import patterns as P
from ..table import group_rows
from ..trace.records import OP
from .context import TraceContext
from .outputs import EMPTY_OPS, size_match

NO_MAKER: dict[str, Any] = {"op": None, "alloc_op": None, "shape": None, "dtype": None, "output": None, "match": None}
_CHAIN = 10  # enclosing ops looked at for an allocation's maker


def maker(ctx: TraceContext, r: int, nbytes: int, device_type: int) -> dict:
    """The op that made an allocation and the tensor it returned (see the module doc). A fresh
    dict (callers mark it); the work is memoised on the op stack's names and inputs."""
    if r < 0:
        return dict(NO_MAKER)
    op = r if ctx.kind[r] == OP else int(ctx.L.op_ancestor[r])
    if op < 0:
        return dict(NO_MAKER)
    chain: list[int] = []
    x = op
    anc = ctx.L.op_ancestor
    while x >= 0 and len(chain) < _CHAIN:
        chain.append(x)
        x = int(anc[x])
    key = (tuple((int(ctx.name_id[c]), int(ctx.sig[c])) for c in chain), nbytes, device_type)
    hit = ctx.maker_memo.get(key)
    if hit is None:
        hit = ctx.maker_memo[key] = _maker_of_chain(ctx, chain, nbytes, device_type)
    return dict(hit)


def makers_of(ctx: TraceContext, pos: np.ndarray, rng: np.ndarray, nbytes: np.ndarray, device_type: int) -> dict:
    """:func:`maker` of many allocations at once: their op stacks are built with whole-array
    steps and the maker is worked out once per distinct (stack of names and inputs, size).
    Allocations of one group share one dict (tens of thousands of copies were ~18 MB on a 263 MB
    trace): a caller that marks one replaces it with a marked copy."""
    if not len(pos):
        return {}
    anc = ctx.L.op_ancestor
    r = rng[pos]
    rr = np.maximum(r, 0)
    op = np.where(r >= 0, np.where(ctx.kind[rr] == OP, rr, anc[rr]), -1)
    # the op stack of each allocation, one column per level outwards (columns, not a matrix of
    # keys: the key columns are grouped one by one)
    chain = [op]
    for _ in range(1, _CHAIN):
        prev = chain[-1]
        chain.append(np.where(prev >= 0, anc[np.maximum(prev, 0)], -1))
    names = [np.where(c >= 0, ctx.name_id[np.maximum(c, 0)], -1) for c in chain]
    sigs = [np.where(c >= 0, ctx.sig[np.maximum(c, 0)], -2) for c in chain]
    first, inv = group_rows(*names, *sigs, nbytes[pos])  # np.unique(key, axis=0): 10x slower
    del names, sigs
    made = []
    for f in first.tolist():
        made.append(maker(ctx, int(rng[pos[f]]), int(nbytes[pos[f]]), device_type) if op[f] >= 0 else dict(NO_MAKER))
    return {p: made[g] for p, g in zip(pos.tolist(), inv.tolist())}


def _maker_of_chain(ctx: TraceContext, chain: list, nbytes: int, device_type: int) -> dict:
    out = dict(NO_MAKER)
    out["alloc_op"] = ctx.name(chain[0])
    first = None
    for j, c in enumerate(chain):
        hit = match_outputs(ctx.outputs(c), nbytes, device_type)
        if hit is not None:
            first = (j, hit)
            break
    if first is None:
        # no rule matched: name the innermost op that is not an allocator primitive
        for c in chain:
            if ctx.short(c) not in EMPTY_OPS and ctx.short(c) not in ("as_strided", "resize_"):
                out["op"] = ctx.name(c)
                break
        if out["op"] is None:
            out["op"] = ctx.name(chain[0])
        return out
    j, hit = first
    best = (chain[j], hit)
    # extend outwards while the enclosing op returns a tensor of the same shape and size
    for c in chain[j + 1 :]:
        nm = ctx.name(c)
        if P.TRANSPARENT_OP.search(nm) or (P.SDPA_OP.search(nm) and not P.FUSED_OP.search(nm)):
            break
        h2 = match_outputs(ctx.outputs(c), nbytes, device_type)
        if h2 is None or prod(h2[0]) != prod(best[1][0]):
            break
        best = (c, h2)
    c, (shape, dt, _, label, match) = best
    out.update(op=ctx.name(c), shape=list(shape), dtype=dt, output=label, match=match)
    return out


def match_outputs(outs: list, nbytes: int, device_type: int):
    for shape, dt, it, label in outs:
        n = prod(shape)
        if it:
            m = size_match(n * it, nbytes, device_type)
            if m:
                return (shape, dt, it, label, m)
        else:
            for it2, nm in ((4, "fp32"), (2, "bf16/fp16"), (1, "int8/bool"), (8, "fp64/int64")):
                m = size_match(n * it2, nbytes, device_type)
                if m:
                    return (shape, nm, it2, label, m)
    return None


def is_score(mk: dict, nbytes: int, s: dict, device_type: int) -> bool:
    """An allocation the size of the call's score matrix (B·H·Sq·Sk elements, any dtype)."""
    if s["sq"] <= 1 or s["sk"] <= 1:
        return False  # decode: one query row is no matrix
    n = s["score_numel"]
    if mk.get("shape") is not None:
        return prod(mk["shape"]) == n and len(mk["shape"]) >= 2 and tuple(mk["shape"][-2:]) == (s["sq"], s["sk"])
    return any(size_match(n * it, nbytes, device_type) for it in (1, 2, 4))


def maker_json(mk: dict) -> dict:
    return {
        "op": mk.get("op"),
        "alloc_op": mk.get("alloc_op"),
        "shape": mk.get("shape"),
        "dtype": mk.get("dtype"),
        "output": mk.get("output"),
        "score_matrix": bool(mk.get("score_matrix")),
    }


def group_makers(items: list, limit: int) -> list[dict]:
    groups: dict = {}
    for mk, nb in items:
        key = (mk.get("op"), tuple(mk["shape"]) if mk.get("shape") else None, mk.get("dtype"))
        g = groups.setdefault(key, {"count": 0, "bytes": 0, **maker_json(mk)})
        g["count"] += 1
        g["bytes"] += nb
    return sorted(groups.values(), key=lambda g: -g["bytes"])[:limit]
