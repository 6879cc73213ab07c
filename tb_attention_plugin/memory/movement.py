"""Data movement inside attention: copies (``copy_``, ``contiguous``, ``clone``, ``_to_copy``,
``cat``, materialised transposes...) grouped by op, place and shape with their CPU and GPU time
and bytes; ``aten::empty*`` calls; memcpy/memset activities and host<->device transfers; host
syncs (``.item()``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Optional

import numpy as np

from ..attention import patterns as P
from ..formats import rounded
from ..roofline.cost import op_cost
from ..trace.arrays import unique_ints
from ..trace.records import MEMCPY, MEMSET, OP
from .context import TraceContext
from .outputs import EMPTY_OPS, code_dtype, int_value, short_name

# copies that always move bytes (a "leaf" copy), and thin wrappers that are the user-visible op
COPY_LEAF = {
    "copy_",
    "clone",
    "_to_copy",
    "cat",
    "stack",
    "repeat_interleave",
    "repeat",
    "index_select",
    "gather",
    "_unsafe_index",
    "index_copy_",
    "index_copy",
    "index_put_",
    "_index_put_impl_",
    "slice_scatter",
    "select_scatter",
}
COPY_WRAP = {
    "contiguous",
    "reshape",
    "to",
    "clone",
    "copy_",
    "_to_copy",
    "type_as",
    "flatten",
    "repeat_interleave",
    "cat",
    "stack",
    "repeat",
    "index_copy_",
    "index_copy",
    "index_put_",
    "_reshape_copy",
    "view_as",
    "expand_as",
    "float",
    "half",
    "bfloat16",
}
_SYNC_OPS = {"item", "_local_scalar_dense", "nonzero", "tolist"}
_SEQ_DIM = 2  # [B, H, S, D]: the dimension a KV cache grows along


def _kernel_keep(report: dict, n_gpu: int) -> np.ndarray:
    keep = np.ones(n_gpu, dtype=bool)
    kt = report.get("kernels")
    if report.get("step") and kt is not None and hasattr(kt, "columns"):
        keep[:] = False
        keep[np.asarray(kt.columns["id"], dtype=np.int64)] = True
    return keep


@dataclass
class _TopCopies:
    """The top copy ops of attention, in time order (``order``: their ranges), each with its copy
    group, its bytes (0 when unknown), whether those are estimated or unknown, and whether its
    input is non-contiguous (1), contiguous (0) or not a tensor (-1)."""

    order: np.ndarray
    group: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    unsized: list[bool] = field(default_factory=list)
    noncontiguous: list[int] = field(default_factory=list)


def _sum_groups(groups: list[dict], top: _TopCopies, inst_r, rdur, gdur, gpu_of: dict) -> None:
    """Each copy group's totals over its top copy ops, whole-array: calls, distinct calls of
    attention, CPU and GPU time, kernels, bytes and flags, and the GPU activities of its copies in
    order. The sums add in the same order as one loop over the ops would (np.bincount adds its
    weights in order), so every figure is the same to the last bit."""
    n = len(groups)
    if not n:
        return
    order = top.order
    gi = np.asarray(top.group, dtype=np.int64)
    ks = [gpu_of.get(t, ()) for t in order.tolist()]
    counts = [len(x) for x in ks]
    owner = np.repeat(np.arange(len(order)), counts)
    kernels = np.fromiter((k for x in ks for k in x), dtype=np.int64, count=len(owner))
    # a copy op's GPU time as numpy sums it: below 8 activities in order, as bincount does; from
    # 8 on in eight interleaved partial sums (pairwise), so those few ops are summed by numpy
    gtime = np.bincount(owner, weights=gdur[kernels], minlength=len(order))
    ends = np.cumsum(counts)
    for i in np.flatnonzero(np.asarray(counts) >= 8).tolist():
        gtime[i] = float(gdur[kernels[ends[i] - counts[i] : ends[i]]].sum())
    calls = np.bincount(gi, minlength=n)
    cpu = np.bincount(gi, weights=rdur[order], minlength=n)
    gpu = np.bincount(gi, weights=gtime, minlength=n)
    nk = np.bincount(gi, weights=np.asarray(counts, dtype=np.float64), minlength=n)
    nbytes = np.bincount(gi, weights=np.asarray(top.nbytes, dtype=np.float64), minlength=n)
    unsized = np.bincount(gi, weights=np.asarray(top.unsized, dtype=np.float64), minlength=n) > 0
    nc = np.asarray(top.noncontiguous, dtype=np.int64)
    any_nc = np.bincount(gi, weights=(nc == 1).astype(np.float64), minlength=n) > 0
    has_nc = np.bincount(gi, weights=(nc >= 0).astype(np.float64), minlength=n) > 0
    inst = inst_r[order] + 1  # non-negative keys (-1 would be "no call")
    width = int(inst.max(initial=0)) + 1
    instances = np.bincount(unique_ints(gi * width + inst) // width, minlength=n)  # distinct calls per group
    by_group = kernels[np.argsort(gi[owner], kind="stable")].tolist()
    at = 0
    for j, g in enumerate(groups):
        k = int(nk[j])
        g["kernel_ids"] = by_group[at : at + k]
        at += k
        g["calls"] = int(calls[j])
        g["instances"] = int(instances[j])
        g["cpu_time_us"] = rounded(float(cpu[j]))
        g["gpu_time_us"] = rounded(float(gpu[j]))
        g["kernels"] = k
        g["bytes"] = int(round(float(nbytes[j])))
        g["bytes_estimated"] = bool(unsized[j])
        g["noncontiguous_input"] = bool(any_nc[j]) if has_nc[j] else None


def data_movement(ctx: TraceContext, shapes: dict, report: dict, window) -> dict:
    t, tag, L, R = ctx.t, ctx.tag, ctx.L, ctx.R
    G = t.gpu
    n_gpu = len(G["kind"])
    keep = _kernel_keep(report, n_gpu)
    inst_r = tag.range_instance
    in_att = (inst_r >= 0) & (ctx.kind == OP)
    if window is not None:
        in_att &= (R["ts_ns"] >= window[0]) & (R["ts_ns"] <= window[1])
    att_ops = np.flatnonzero(in_att)
    names = t.strings
    short_of = {}
    for nid in unique_ints(ctx.name_id[att_ops]).tolist():
        short_of[nid] = short_name(names[nid])
    leaf_ids = {nid for nid, s in short_of.items() if s in COPY_LEAF}
    empty_ids = {nid for nid, s in short_of.items() if s in EMPTY_OPS}
    sync_ids = {nid for nid, s in short_of.items() if s in _SYNC_OPS}
    nid_att = ctx.name_id[att_ops]
    leaves = att_ops[np.isin(nid_att, list(leaf_ids))] if leaf_ids else np.zeros(0, np.int64)
    # the user-visible copy op of each leaf
    wrap_ids = {i for i, nm in enumerate(names) if short_name(nm) in COPY_WRAP}
    # Walk every leaf up to its top copy op with whole-array steps (a per-range Python walk, or
    # plain lists of whole columns, cost seconds or ~16 MB per column on a large trace).
    op_anc_a, nid_a = L.op_ancestor, ctx.name_id
    is_wrap = np.zeros(len(names) + 1, dtype=bool)
    is_wrap[list(wrap_ids)] = True  # index -1 (no name) stays False
    top_of = leaves.copy()
    up = op_anc_a[leaves] if len(leaves) else np.zeros(0, np.int64)
    live = np.arange(len(leaves))
    while len(live):
        p = up[live]
        ok = p >= 0
        live, p = live[ok], p[ok]
        ok = (inst_r[p] == inst_r[leaves[live]]) & is_wrap[nid_a[p]]
        live, p = live[ok], p[ok]
        top_of[live] = p
        up[live] = op_anc_a[p]
    tops: dict[int, int] = dict(zip(leaves.tolist(), top_of.tolist()))
    top_arr = unique_ints(top_of)
    top_set = set(top_arr.tolist())
    # GPU activities under each top copy op
    gpu_of: dict[int, list] = {}
    if top_set and n_gpu:
        gop = L.gpu_op
        # only kernels launched by a copy op itself or by one of its leaves (the usual case) can
        # belong to it: filter those with numpy, then walk them up to their top copy op together
        near = np.fromiter(set(tops) | top_set, dtype=np.int64)
        cand = np.flatnonzero((tag.gpu_instance >= 0) & keep & np.isin(gop, near))
        is_top = np.zeros(len(op_anc_a), dtype=bool)
        is_top[top_arr] = True
        x = gop[cand].astype(np.int64)
        owner = np.full(len(cand), -1, np.int64)
        live = np.arange(len(cand))
        for _ in range(12):
            xs = x[live]
            ok = xs >= 0
            live, xs = live[ok], xs[ok]
            hit = is_top[xs]
            owner[live[hit]] = xs[hit]
            live = live[~hit]
            if not len(live):
                break
            x[live] = op_anc_a[xs[~hit]]
        found = owner >= 0
        for k, o in zip(cand[found].tolist(), owner[found].tolist()):
            gpu_of.setdefault(o, []).append(k)
    groups: list[dict] = []  # the copy groups, in the order first seen
    group_of: dict = {}  # a group's key -> its index in groups
    memo: dict = {}
    order = top_arr[np.argsort(R["ts_ns"][top_arr], kind="stable")]
    top_copies = _TopCopies(order)
    parent_a = op_anc_a[order]
    per_top = zip(
        order.tolist(),
        inst_r[order].tolist(),
        parent_a.tolist(),
        np.where(parent_a >= 0, inst_r[np.maximum(parent_a, 0)], -2).tolist(),
        np.where(parent_a >= 0, nid_a[np.maximum(parent_a, 0)], -1).tolist(),
        ctx.sig[order].tolist(),
        nid_a[order].tolist(),
        tag.range_phase[order].tolist(),
        (L.backward_root[order] >= 0).tolist(),
    )
    gdur = G["dur"]
    # Everything but the times depends only on the op, its inputs, its parent, the call's shapes,
    # phase and direction: worked out once per such combination (the same copy in every layer).
    static: dict = {}
    for top, inst, parent, parent_inst, parent_nid, sg, nid, ph, bwd in per_top:
        s = shapes.get(inst)
        pnid = parent_nid if parent >= 0 and parent_inst == inst else -1
        skey = None if s is None else (s["sk"], s["h"], s["itemsize"], s["score_numel"], s["sq"])
        st = static.get((nid, sg if sg >= 0 else -top - 1, pnid, skey, ph, bwd))
        if st is None:
            args = ctx.args(top) or []
            tens = [a for a in args if a.is_tensor]
            lists = [a for a in args if a.shapes is not None]
            shape = list(tens[0].shape) if tens else ([list(x) for x in lists[0].shapes] if lists else None)
            dtype = tens[0].dtype if tens else None
            within = ctx.name(parent) if pnid >= 0 else None
            mkey = (nid, sg if sg >= 0 else -top - 1, within, skey)
            kind_bytes = memo.get(mkey)
            if kind_bytes is None:
                kind_bytes = memo[mkey] = (_copy_kind(ctx, top, args, s, within), _copy_bytes(ctx, top, s))
            (kind, detail), (nbytes, est) = kind_bytes
            key = (
                ctx.name(top),
                within,
                P.PHASES[ph] if ph >= 0 else "other",
                "backward" if bwd else "forward",
                kind,
                str(shape),
                dtype,
            )
            score_sized = bool(
                s is not None and tens and tens[0].numel == s["score_numel"] and tens[0].shape[-1:] == (s["sk"],)
            )
            nc = tens[0].is_contiguous() if tens else None
            st = static[(nid, sg if sg >= 0 else -top - 1, pnid, skey, ph, bwd)] = (
                key,
                within,
                kind,
                detail,
                shape,
                dtype,
                nbytes,
                est,
                score_sized,
                nc,
            )
        key, within, kind, detail, shape, dtype, nbytes, est, score_sized, nc = st
        gi = group_of.get(key)
        if gi is None:
            gi = group_of[key] = len(groups)
            groups.append(
                {
                    "op": key[0],
                    "within": within,
                    "phase": key[2],
                    "direction": key[3],
                    "kind": kind,
                    "shape": shape,
                    "dtype": dtype,
                    "calls": 0,
                    "instances": 0,
                    "cpu_time_us": 0.0,
                    "gpu_time_us": 0.0,
                    "kernels": 0,
                    "bytes": 0.0,
                    "bytes_estimated": False,
                    "noncontiguous_input": None,
                    "detail": detail,
                    "score_sized": score_sized,
                    "kernel_ids": [],
                }
            )
        top_copies.group.append(gi)
        top_copies.nbytes.append(0.0 if nbytes is None else nbytes)
        top_copies.unsized.append(est or nbytes is None)
        top_copies.noncontiguous.append(-1 if nc is None else int(not nc))
    _sum_groups(groups, top_copies, inst_r, R["dur"], gdur, gpu_of)
    copies = sorted(groups, key=lambda g: (-(g["gpu_time_us"] or 0), -(g["bytes"] or 0), -(g["cpu_time_us"] or 0)))
    # allocator ops
    alloc_ops: dict = {}
    for nid in empty_ids:
        c = int((nid_att == nid).sum())
        if c:
            alloc_ops[names[nid]] = c
    syncs = []
    for nid in sync_ids:
        rs = att_ops[nid_att == nid]
        if len(rs):
            syncs.append(
                {
                    "op": names[nid],
                    "calls": int(len(rs)),
                    "cpu_time_us": rounded(R["dur"][rs].sum()),
                    "instances": int(len(unique_ints(inst_r[rs]))),
                }
            )
    # memcpy / memset activities inside attention
    transfers: dict = {}
    if n_gpu:
        sel = np.flatnonzero((tag.gpu_instance >= 0) & keep & ((G["kind"] == MEMCPY) | (G["kind"] == MEMSET)))
        issuer = {k: top for top, ks in gpu_of.items() for k in ks}
        for k in sel.tolist():
            nm = names[G["name"][k]]
            kind = "memset" if G["kind"][k] == MEMSET else "memcpy"
            direc = _copy_direction(nm) if kind == "memcpy" else None
            ph = tag.gpu_phase[k]
            top = issuer.get(k)
            op_r = top if top is not None else int(L.gpu_op[k])
            tkey = (
                nm,
                kind,
                P.PHASES[ph] if ph >= 0 else "other",
                "backward" if tag.gpu_backward[k] else "forward",
                op_r >= 0 and ctx.name(op_r),
            )
            g = transfers.get(tkey)
            if g is None:
                g = transfers[tkey] = {
                    "name": nm,
                    "kind": kind,
                    "copy": direc,
                    "host_device": direc in ("HtoD", "DtoH", "HtoH"),
                    "phase": tkey[2],
                    "direction": tkey[3],
                    "op": ctx.name(op_r) if op_r >= 0 else None,
                    "counted_with_copy": top is not None,
                    "calls": 0,
                    "time_us": 0.0,
                    "bytes": 0,
                    "instances": set(),
                }
            g["calls"] += 1
            g["time_us"] += float(G["dur"][k])
            g["bytes"] += max(0, int(G["bytes"][k]))
            g["instances"].add(int(tag.gpu_instance[k]))
    tr = []
    for g in transfers.values():
        g["time_us"] = rounded(g["time_us"])
        g["instances"] = len(g["instances"])
        tr.append(g)
    tr.sort(key=lambda g: -(g["time_us"] or 0))
    att_time = report.get("attention_time_us") or 0.0
    copy_gpu = sum(g["gpu_time_us"] or 0 for g in copies)
    tr_time = sum(g["time_us"] or 0 for g in tr)
    tr_own = sum(g["time_us"] or 0 for g in tr if not g["counted_with_copy"])
    return {
        "note": _unseen_note(report),
        "copies": copies[:100],
        "copy_groups": len(copies),
        "allocator_ops": dict(sorted(alloc_ops.items(), key=lambda x: (-x[1], x[0]))),  # ties by name: stable output
        "allocator_calls": int(sum(alloc_ops.values())),
        "transfers": tr[:50],
        "syncs": syncs,
        "totals": {
            "copy_calls": int(sum(g["calls"] for g in copies)),
            "copy_cpu_time_us": rounded(sum(g["cpu_time_us"] or 0 for g in copies)),
            "copy_gpu_time_us": rounded(copy_gpu),
            "copy_bytes": int(sum(g["bytes"] or 0 for g in copies)),
            "transfer_calls": int(sum(g["calls"] for g in tr)),
            "transfer_time_us": rounded(tr_time),
            "transfer_bytes": int(sum(g["bytes"] for g in tr)),
            "host_device_time_us": rounded(sum(g["time_us"] or 0 for g in tr if g["host_device"])),
            "host_device_bytes": int(sum(g["bytes"] for g in tr if g["host_device"])),
            # memcpy/memset issued by a copy op are in that op's GPU time too: counted once here
            "share_of_attention_time": rounded((copy_gpu + tr_own) / att_time, 4) if att_time else None,
        },
    }


def _unseen_note(report: dict) -> Optional[str]:
    """Copies are found through their ops: kernels replayed from a CUDA graph without a reference
    have none, so "no copies" would be a claim the trace cannot support. Says so, or None."""
    att = (report.get("graphs") or {}).get("attributed") or {}
    n = int(att.get("structure", 0)) + int(att.get("none", 0))
    if not n:
        return None
    return (
        f"copies are found through their ops: {n} kernels replayed from CUDA graphs have no op and are not "
        "counted (pass --reference EAGER_TRACE)"
    )


def _copy_direction(name: str) -> Optional[str]:
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD"):
        if d in name:
            return d
    return None


def _copy_kind(
    ctx: TraceContext, top: int, args: list, s: Optional[dict], within: Optional[str]
) -> tuple[str, Optional[str]]:
    """What a copy is: cast, kv_concat, kv_expand, materialize (of a strided view), internal
    (inside a compute op), cache_write, copy."""
    op = ctx.short(top)
    tens = [a for a in args if a.is_tensor]
    if op in ("_to_copy", "to", "type_as"):
        code = code_dtype(args[1].value) if len(args) > 1 else None
        if code and tens and tens[0].dtype and code[0] != tens[0].dtype:
            return "cast", f"{tens[0].dtype} -> {code[0]}"
    if (
        within is not None
        and short_name(within) not in COPY_WRAP
        and not P.SDPA_OP.search(within)
        and short_name(within) not in ("matmul", "linear", "bmm", "mm")
    ):
        return "internal", f"inside {within}"
    if op in ("_to_copy", "to", "type_as"):
        return "copy", None
    if op == "copy_" and len(tens) >= 2:
        if tens[0].dtype != tens[1].dtype:
            return "cast", f"{tens[1].dtype} -> {tens[0].dtype}"
        if (
            s is not None
            and len(tens[0].shape) == 4
            and tens[0].shape[_SEQ_DIM] < s["sk"]
            and tens[0].is_contiguous() is False
        ):
            return "cache_write", "writes new positions into a preallocated cache"
        return "copy", None
    if op in ("cat", "concat"):
        lists = [a for a in args if a.shapes is not None]
        shp = list(lists[0].shapes) if lists else []
        dim = int_value(args, 1)
        if len(shp) >= 2 and all(len(x) == 4 for x in shp) and dim is not None:
            d = dim % 4
            outlen = sum(x[d] for x in shp)
            if d == _SEQ_DIM and s is not None and outlen == s["sk"] and shp[0][d] > shp[-1][d]:
                new = sum(x[d] for x in shp[1:])
                return "kv_concat", (
                    f"cat of K/V along the sequence: {shp[0][d]} cached + {new} new positions -> {outlen}"
                )
        return "copy", None
    if op in ("repeat_interleave", "repeat"):
        if s is not None and tens and len(tens[0].shape) == 4 and tens[0].shape[1] != s["h"]:
            return "kv_expand", f"expands {tens[0].shape[1]} KV heads to {s['h']}"
        return "copy", None
    if op in ("contiguous", "reshape", "clone", "flatten"):
        if (
            tens
            and len(tens[0].shape) == 5
            and tens[0].shape[2] > 1
            and tens[0].strides
            and len(tens[0].strides) == 5
            and tens[0].strides[2] == 0
        ):
            sh = tens[0].shape
            return "kv_expand", f"repeat_kv: expand + reshape of K/V from {sh[1]} to {sh[1] * sh[2]} heads"
        if tens and tens[0].is_contiguous() is False:
            return "materialize", "copies a transposed / strided view into a new contiguous tensor"
        return "copy", None
    return "copy", None


def _copy_bytes(ctx: TraceContext, top: int, s: Optional[dict]) -> tuple[Optional[float], bool]:
    """Bytes read + written by a copy op (estimated for tensor lists, whose dtype is not
    recorded: taken at the attention call's dtype)."""
    nm = ctx.name(top)
    args = ctx.args(top) or []
    c = op_cost(nm, args)
    if c is not None and c.bytes is not None:
        return float(c.bytes), False
    lists = [a for a in args if a.shapes is not None]
    if lists:
        n = sum(prod(x) for x in lists[0].shapes)
        it = s["itemsize"] if s else 2
        return float(2 * n * it), True
    outs = ctx.outputs(top)
    tens = [a for a in args if a.is_tensor]
    if outs and tens:
        o = outs[0]
        return float(tens[0].nbytes + prod(o[0]) * (o[2] or tens[0].itemsize)), False
    # walk into the leaf copy for its bytes (reshape -> clone)
    for ch in ctx.L.children(top).tolist():
        if ctx.kind[ch] == OP and ctx.short(ch) in COPY_LEAF:
            return _copy_bytes(ctx, int(ch), s)
    return None, True
