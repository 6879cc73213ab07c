"""Kernels replayed from CUDA graphs: give them back the CPU context the replay does not record.

A ``cudaGraphLaunch`` replays every kernel captured into the graph, and the profiler links all of
them to that one runtime call: no op, no shapes, no module. Inference servers and
``torch.compile(mode="reduce-overhead")`` run almost everything this way, so without help only
kernels whose *names* say attention are found. Three ways back, best first:

1. **Reference** (exact). The same step run eagerly (``--reference EAGER_TRACE``), or the
   capture itself: launches recorded between ``cudaStreamBeginCapture`` and ``EndCapture`` with
   their ops and modules but no kernels (the kernels run later, in the replay). The replayed
   kernel sequence of each graph launch is aligned with the reference's (exact names first, then
   names without template arguments inside the gaps; a capture-time reference carries no kernel
   names, so it is used only when its launches match the replay one for one, in order and kind).
   Each matched kernel takes the reference kernel's launching op and enclosing ranges, so op,
   module, shapes, phase, direction and cost all follow from the reference's records.
2. **Structure** (heuristic, no shapes). Within one graph launch, around each kernel that is
   attention by name: the kernels from the first GEMM after the last normalisation (a reduction)
   up to the attention kernel are its input side (GEMMs: Q/K/V projections; index_copy / scatter
   / reshape_and_cache: KV-cache writes; the rest: rotary or other elementwise work), and the
   kernels after it up to and including the first GEMM are its output side (that GEMM: the
   output projection).
3. **Name** only (the tagger's ``kernel_name`` source).

The merged trace keeps the replay's own timing, streams and steps; the reference contributes CPU
ranges only (on threads of their own, so nothing nests across the two files).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..trace.arrays import unique_ints
from ..trace.correlate import Links, link
from ..trace.records import ANNOTATION, KERNEL, LAUNCH, MEMCPY, MEMSET, NARROWED_RANGE_IDS, Trace, narrow_ids
from . import patterns as P
from .structure import (  # noqa: F401 - re-exported: the structure of a replay
    CACHE_WRITE_KERNEL,
    GEMM_KERNEL,
    NORM_KERNEL,
    ROTARY_KERNEL,
    SPLITK_REDUCE,
    StructureTagger,
    structure_phases,
)
from .tagger import SOURCES, Tagging

GRAPH_LAUNCH = re.compile(r"^(cu(da)?|hip)GraphLaunch")  # ROCm: hipGraphLaunch
CAPTURE_BEGIN = re.compile(r"^(cu(da)?|hip)StreamBeginCapture")
CAPTURE_END = re.compile(r"^(cu(da)?|hip)StreamEndCapture")
# runtime / driver calls that put one node into a graph being captured, by GPU activity kind
NODE_CALL = (
    (KERNEL, re.compile(r"^(cudaLaunch\w*|cuLaunch\w*|hip(Ext)?(Module)?Launch\w*)$")),
    (MEMCPY, re.compile(r"^(cu(da)?|hip)Memcpy\w*Async")),
    (MEMSET, re.compile(r"^(cu(da)?|hip)Memset\w*Async")),
)
_STEP = re.compile(r"^ProfilerStep#\d+$")

# how a replayed kernel got its context (the report's per-kernel ``graph`` field)
ATTRIBUTION = ("reference", "structure", "none")
REF, STRUCT, NONE = 0, 1, 2


@dataclass
class GraphContext:
    """What the analysis learned about graph replays in one trace."""

    replayed: np.ndarray  # bool per GPU activity: launched by a graph launch, no op of its own
    how: np.ndarray  # int8 per GPU activity: ATTRIBUTION code, -1 when not replayed
    reference: Optional[str] = None  # path of the reference trace, "capture" for the trace's own capture
    reference_kind: Optional[str] = None  # "eager" | "capture"
    given: Optional[str] = None  # the reference passed (or found beside the trace), matched or not
    launches: int = 0  # graph launches with replayed work
    notes: list[str] = field(default_factory=list)

    @property
    def n_replayed(self) -> int:
        return int(self.replayed.sum())

    def counts(self) -> dict[str, int]:
        how = self.how[self.replayed]
        return {ATTRIBUTION[i]: int((how == i).sum()) for i in range(len(ATTRIBUTION))}


def _names_matching(strings: list[str], pattern: re.Pattern[str]) -> np.ndarray:
    return np.array([bool(pattern.search(s)) for s in strings], dtype=bool) if strings else np.zeros(0, bool)


def has_graph_launches(trace: Trace) -> bool:
    """Whether any CPU range is a graph launch: a cheap test before linking the trace."""
    names = trace.ranges["name"]
    return bool(len(names)) and bool(_names_matching(trace.strings, GRAPH_LAUNCH)[names].any())


def replayed(trace: Trace, links: Links) -> np.ndarray:
    """GPU activities launched by a graph launch. An op around the launch (a wrapper that replays
    the graph) did not launch them: its shapes are not theirs."""
    R = trace.ranges
    gl = links.gpu_launch
    if not len(gl) or not len(R["kind"]):
        return np.zeros(len(gl), dtype=bool)
    is_graph = _names_matching(trace.strings, GRAPH_LAUNCH)
    has = gl >= 0
    out = np.zeros(len(gl), dtype=bool)
    out[has] = is_graph[R["name"][gl[has]]]
    return out


def _groups(trace: Trace, links: Links, mask: np.ndarray) -> list[np.ndarray]:
    """Replayed activities per graph launch, each in GPU start order."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return []
    G = trace.gpu
    order = idx[np.lexsort((G["ts_ns"][idx], links.gpu_launch[idx]))]
    launch = links.gpu_launch[order]
    cuts = np.flatnonzero(np.diff(launch)) + 1
    return [g for g in np.split(order, cuts) if len(g)]


def capture_nodes(trace: Trace, links: Links) -> tuple[np.ndarray, np.ndarray]:
    """Node-creating calls made while a stream was being captured, in call order: (launch ranges,
    GPU activity kind of each). They have no GPU activity of their own."""
    R = trace.ranges
    kind = R["kind"]
    if not len(kind):
        return np.zeros(0, np.int64), np.zeros(0, np.int8)
    names = trace.strings
    launches = np.flatnonzero(kind == LAUNCH)
    nm = R["name"][launches]
    begin = _names_matching(names, CAPTURE_BEGIN)[nm]
    end = _names_matching(names, CAPTURE_END)[nm]
    if not begin.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int8)
    node_kind = np.full(len(names), -1, dtype=np.int8)
    for k, pat in NODE_CALL:
        node_kind[_names_matching(names, pat) & (node_kind < 0)] = k
    linked = np.zeros(len(kind), dtype=bool)
    linked[links.gpu_launch[links.gpu_launch >= 0]] = True
    out_r, out_k = [], []
    th, ts = R["thread"][launches], R["ts_ns"][launches]
    for t in unique_ints(th[begin]).tolist():
        sel = np.flatnonzero(th == t)
        sel = sel[np.argsort(ts[sel], kind="stable")]
        capturing = False
        for j in sel.tolist():
            if begin[j]:
                capturing = True
            elif end[j]:
                capturing = False
            elif capturing:
                r = int(launches[j])
                k = node_kind[nm[j]]
                if k >= 0 and not linked[r]:
                    out_r.append(r)
                    out_k.append(k)
    return np.array(out_r, dtype=np.int64), np.array(out_k, dtype=np.int8)


# -- alignment -------------------------------------------------------------------------------
def _loose(name: str, memo: dict[str, str]) -> str:
    """The name without template arguments and with single spaces (``memo``: each name's, found
    once: a gap of a long reference holds the same few hundred names many times over)."""
    out = memo.get(name)
    if out is None:
        out = memo[name] = " ".join(P.strip_templates(name).split())
    return out


def align(query: list[str], ref: list[str], loose: Optional[dict[str, str]] = None) -> list[tuple[int, int]]:
    """Pairs (i, j) of query[i] ~ ref[j], increasing in both: exact-name blocks first
    (difflib, no junk heuristics), then the gaps between blocks matched on names without template
    arguments (positionally when a gap has the same length on both sides and every name agrees,
    else by a second difflib pass on the loose names). ``loose``: a memo of the loose names, for
    a caller that aligns many queries against one reference."""
    sm = difflib.SequenceMatcher(None, query, ref, autojunk=False)
    memo = {} if loose is None else loose
    pairs: list[tuple[int, int]] = []
    qi = rj = 0
    for a, b, size in sm.get_matching_blocks():
        pairs.extend(_gap(query, ref, qi, a, rj, b, memo))
        pairs.extend((a + t, b + t) for t in range(size))
        qi, rj = a + size, b + size
    return pairs


def _gap(
    query: list[str], ref: list[str], q0: int, q1: int, r0: int, r1: int, memo: dict[str, str]
) -> list[tuple[int, int]]:
    if q1 <= q0 or r1 <= r0:
        return []
    same_length = q1 - q0 == r1 - r0
    too_large = (q1 - q0) * (r1 - r0) > 4_000_000  # a gap that large is not the same step...
    if too_large and not same_length:
        return []  # ...known before any name is stripped (such a gap can hold most of the reference)
    lq = [_loose(x, memo) for x in query[q0:q1]]
    lr = [_loose(x, memo) for x in ref[r0:r1]]
    if same_length and lq == lr:
        return [(q0 + t, r0 + t) for t in range(len(lq))]
    if too_large:
        return []
    sm = difflib.SequenceMatcher(None, lq, lr, autojunk=False)
    return [(q0 + a + t, r0 + b + t) for a, b, size in sm.get_matching_blocks() for t in range(size)]


# -- merging a reference trace ---------------------------------------------------------------
# Every graph launch is one run of the captured ops, so each gets its own copy of the reference's
# ranges: kernels of two replays never share an op (an op's cost is split among its kernels, and
# an attention call is the kernels under one range). Past this many copied ranges, further graph
# launches keep no reference context (and a note says so) rather than exhaust memory.
MAX_COPIED_RANGES = 4_000_000


def _merge(trace: Trace, ref: Trace, keeps: list[np.ndarray]) -> tuple[Trace, list[int]]:
    """``trace`` plus one copy of the reference ranges ``keeps[c]`` per copy ``c`` (with the flows
    that start or end on them), renumbered: strings and signatures appended once; each copy on
    threads of its own (so that copies, which overlap in time, never nest in one another);
    correlation and External ids cleared so that nothing of the replay links to them; autograd
    sequence numbers shifted past the trace's own and the previous copy's. Returns the merged
    trace and the index of each copy's first range."""
    strings = list(trace.strings)
    index = {s: i for i, s in enumerate(strings)}
    smap = np.empty(len(ref.strings), dtype=np.int64)
    for i, s in enumerate(ref.strings):
        j = index.get(s)
        if j is None:
            j = index[s] = len(strings)
            strings.append(s)
        smap[i] = j
    R, Q = trace.ranges, ref.ranges
    n0 = len(R["kind"])
    n_ref_threads = len(ref.threads)
    g_off = len(trace.signatures)
    seq_step = int(Q["seq"].max()) + 1 if len(Q["seq"]) and (Q["seq"] >= 0).any() else 0
    seq0 = max(int(R["seq"].max()) + 1 if n0 and (R["seq"] >= 0).any() else 0, 0)
    F, FQ = trace.flows, ref.flows
    id_step = int(FQ["id"].max()) + 1 if len(FQ["id"]) else 0
    id0 = int(F["id"].max()) + 1 if len(F["id"]) else 0
    fkey = FQ["thread"].astype(np.int64) * (1 << 40) + FQ["ts_ns"] if len(FQ["id"]) else np.zeros(0, np.int64)
    r_parts: dict[str, list[np.ndarray]] = {k: [col] for k, col in R.items()}
    f_parts: dict[str, list[np.ndarray]] = {k: [col] for k, col in F.items()}
    offsets, n, threads = [], n0, list(trace.threads)
    flows_of: dict[bytes, np.ndarray] = {}  # the reference flows of each distinct context (copies repeat)
    for c, keep in enumerate(keeps):
        offsets.append(n)
        n += len(keep)
        t_off = len(trace.threads) + c * n_ref_threads
        threads += [("reference", c) + tuple(t) for t in ref.threads]
        for k, col in R.items():
            add = Q[k][keep]
            if k == "name":
                add = smap[add]
            elif k == "thread":
                add = add + t_off
            elif k == "sig":
                add = np.where(add >= 0, add + g_off, -1)
            elif k in ("corr", "ext"):
                add = np.full(len(add), -1)
            elif k == "seq":
                add = np.where(add >= 0, add + seq0 + c * seq_step, -1)
            # ids may outgrow their column's int32 once shifted: int64 here, narrowed after
            r_parts[k].append(np.asarray(add).astype(np.int64 if k in NARROWED_RANGE_IDS else col.dtype))
        if len(fkey):
            key = keep.tobytes()
            fsel = flows_of.get(key)
            if fsel is None:
                rkey = Q["thread"][keep].astype(np.int64) * (1 << 40) + Q["ts_ns"][keep]
                fsel = flows_of[key] = np.isin(fkey, rkey)
            for k, col in F.items():
                add = FQ[k][fsel]
                if k == "thread":
                    add = add + t_off
                elif k == "id":
                    add = add + id0 + c * id_step
                f_parts[k].append(np.asarray(add).astype(col.dtype))
    ranges = {k: np.concatenate(v) for k, v in r_parts.items()}
    for k in NARROWED_RANGE_IDS:
        ranges[k] = narrow_ids(ranges[k])
    flows = {k: np.concatenate(v) for k, v in f_parts.items()}
    merged = Trace(
        path=trace.path,
        meta=trace.meta,
        strings=strings,
        ranges=ranges,
        gpu=trace.gpu,
        flows=flows,
        memory=trace.memory,
        gpu_annotations=trace.gpu_annotations,
        signatures=list(trace.signatures) + list(ref.signatures),
        counters=trace.counters,
        thread_names=trace.thread_names,
        threads=threads,
        base_us=trace.base_us,
        stats=trace.stats,
        warnings=trace.warnings,
        stacks=trace.stacks,
    )
    return merged, offsets


def _context_ranges(ref: Trace, rlinks: Links, kernels: np.ndarray) -> np.ndarray:
    """Reference ranges to carry over: every range under a top-level range that holds a matched
    kernel's launch (or the forward op of its backward), ProfilerStep annotations excepted — they
    would add the reference's steps to the replay's."""
    seeds = [int(x) for x in rlinks.gpu_launch[kernels].tolist() if x >= 0]
    seeds += [int(x) for x in rlinks.gpu_op[kernels].tolist() if x >= 0]
    return _context_ranges_of_ranges(ref, rlinks, np.array(seeds, dtype=np.int64))


def _reference_sequence(ref: Trace, rlinks: Links) -> tuple[str, np.ndarray, np.ndarray, list[str]]:
    """("capture", launch ranges, kinds, []) when the reference holds a capture, else
    ("eager", GPU activities with an op, kinds, names) in GPU start order."""
    nodes, kinds = capture_nodes(ref, rlinks)
    if len(nodes):
        return "capture", nodes, kinds, []
    G = ref.gpu
    idx = np.flatnonzero((rlinks.gpu_op >= 0) & np.isin(G["kind"], (KERNEL, MEMCPY, MEMSET)))
    idx = idx[np.lexsort((G["ts_ns"][idx], G["device"][idx]))]
    return "eager", idx, G["kind"][idx], [ref.strings[i] for i in G["name"][idx].tolist()]


def _given(ctx: GraphContext, reference: Optional[Trace], reference_path: Optional[str]) -> None:
    if reference is not None:
        ctx.given = reference_path or reference.path


_LAUNCH_CONFIG = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def matches(trace: Trace, links: Links, reference: Trace) -> int:
    """How many of ``trace``'s replayed activities the reference matches (no merge): what a
    search for a reference among sibling files compares. An eager reference's kernel counts only
    when it also ran the replayed kernel's grid and block: names alone pair the common kernels
    (elementwise, GEMM, norm) of any two models, and a run of the same block at another batch size
    or sequence length has the names and not the shapes. On the recorded H200 traces, counted so:
    the same step run eagerly (or compiled without graphs) matches 73-100 % of the replayed kernels;
    another model, or the same block at other shapes, 0-42 % (by name alone: 41-97 %)."""
    rep = replayed(trace, links)
    if not rep.any():
        return 0
    links = _replace(links, gpu_op=np.where(rep, -1, links.gpu_op))
    rlinks = link(reference)
    per_group, kind = _match_reference(trace, _groups(trace, links, rep), reference, rlinks)
    if kind == "capture":  # the capture's own launch sequence: matched kind by kind, in full
        return sum(len(m) for m in per_group)
    mine = np.fromiter((a for m in per_group for a in m), dtype=np.int64)
    theirs = np.fromiter((b for m in per_group for b in m.values()), dtype=np.int64)
    same = np.ones(len(mine), dtype=bool)
    for f in _LAUNCH_CONFIG:
        if f in trace.gpu and f in reference.gpu:
            same &= trace.gpu[f][mine] == reference.gpu[f][theirs]
    return int(same.sum())


def _match_reference(
    trace: Trace, groups: list[np.ndarray], reference: Trace, rlinks: Links
) -> tuple[list[dict[int, int]], str]:
    """Per graph launch, {replayed activity: reference range (capture) or activity (eager)}."""
    kind, seq, rkinds, rnames = _reference_sequence(reference, rlinks)
    out: list[dict[int, int]] = []
    if not len(seq):
        return out, kind
    G = trace.gpu
    # every replay of a graph launches the same kernels: each distinct sequence is aligned once
    aligned: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    loose: dict[str, str] = {}
    for g in groups:
        match: dict[int, int] = {}
        if kind == "capture":
            if len(g) == len(seq) and np.array_equal(G["kind"][g], rkinds):
                match.update(zip(g.tolist(), seq.tolist()))
        else:
            codes = tuple(G["name"][g].tolist())
            pairs = aligned.get(codes)
            if pairs is None:
                pairs = aligned[codes] = align([trace.strings[i] for i in codes], rnames, loose)
            for i, j in pairs:
                if G["kind"][g[i]] == rkinds[j]:
                    match[int(g[i])] = int(seq[j])
        out.append(match)
    return out, kind


def _give_context(
    trace: Trace,
    ref: Trace,
    rlinks: Links,
    per_group: list[dict[int, int]],
    kind: str,
    ctx: GraphContext,
    own: bool = False,
) -> tuple[Trace, Links, int]:
    """Merge one copy of the reference context per graph launch with matches and point each
    matched activity at its copy's ranges. ``own``: the reference is the trace itself (its
    capture), whose ranges serve the first launch as they are. Returns the merged trace, its
    links (with the matched activities' parent and op set) and the number of launches given
    context."""
    copies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (activities, reference ranges/activities, keep)
    total = 0
    skipped = 0
    contexts: dict[bytes, np.ndarray] = {}  # every replay of a graph matches the same reference ranges
    for m in per_group:
        if not m:
            continue
        ks = np.array(sorted(m), dtype=np.int64)
        rs = np.array([m[k] for k in ks.tolist()], dtype=np.int64)
        key = rs.tobytes()
        keep = contexts.get(key)
        if keep is None:
            keep = contexts[key] = (
                _context_ranges_of_ranges(ref, rlinks, rs) if kind == "capture" else _context_ranges(ref, rlinks, rs)
            )
        if copies and total + len(keep) > MAX_COPIED_RANGES:
            skipped += 1
            continue
        total += len(keep)
        copies.append((ks, rs, keep))
    if skipped:
        ctx.notes.append(
            f"{skipped} graph launches beyond the first {len(copies)} were not given the reference's context "
            f"(more than {MAX_COPIED_RANGES:,} copied CPU ranges)"
        )
    first = 1 if own else 0  # the trace's own capture ranges serve its first launch in place
    merged, offsets = _merge(trace, ref, [c[2] for c in copies[first:]])
    mlinks = link(merged) if len(copies) > first else rlinks
    # an op around a graph launch (a wrapper that replays it) did not launch the replayed kernels
    gp, go = mlinks.gpu_parent.copy(), np.where(ctx.replayed, -1, mlinks.gpu_op)
    n_ref = len(ref.ranges["kind"])
    for c, (ks, rs, keep) in enumerate(copies):
        if kind == "capture":
            r_parent, r_op = rlinks.parent[rs], rlinks.op_ancestor[rs]
        else:
            r_parent, r_op = rlinks.gpu_parent[rs], rlinks.gpu_op[rs]
        if c < first:
            gp[ks], go[ks] = r_parent, r_op
        else:
            new_index = np.full(n_ref, -1, dtype=np.int64)  # reference range -> this copy's merged index
            new_index[keep] = offsets[c - first] + np.arange(len(keep))
            gp[ks] = np.where(r_parent >= 0, new_index[np.maximum(r_parent, 0)], -1)
            go[ks] = np.where(r_op >= 0, new_index[np.maximum(r_op, 0)], -1)
        ctx.how[ks] = REF
    return merged, _replace(mlinks, gpu_parent=gp, gpu_op=go), len(copies)


def attach(
    trace: Trace,
    links: Links,
    reference: Optional[Trace] = None,
    reference_path: Optional[str] = None,
    notes: Sequence[str] = (),
) -> tuple[Trace, Links, GraphContext]:
    """Find replayed kernels and, where a reference is at hand (``reference`` or the trace's own
    capture), give them the reference's CPU context: one copy of it per graph launch. Returns the
    (possibly merged) trace, its links, and what was done. ``notes``: what the caller's search for
    a reference found, for the notice."""
    rep = replayed(trace, links)
    ctx = GraphContext(replayed=rep, how=np.where(rep, NONE, -1).astype(np.int8), notes=list(notes))
    _given(ctx, reference, reference_path)
    if not rep.any():
        return trace, links, ctx
    links = _replace(links, gpu_op=np.where(rep, -1, links.gpu_op))
    groups = _groups(trace, links, rep)
    ctx.launches = len(groups)
    # 1. the trace's own capture: launches recorded while capturing, matched one for one
    nodes, kinds = capture_nodes(trace, links)
    if len(nodes):
        per_group, _ = _match_reference(trace, groups, trace, links)
        if any(per_group):
            merged, mlinks, _ = _give_context(trace, trace, links, per_group, "capture", ctx, own=True)
            ctx.reference, ctx.reference_kind = "capture", "capture"
            return merged, mlinks, ctx
        ctx.notes.append(f"the capture in this trace has {len(nodes)} nodes; no graph launch replayed that many")
    if reference is None:
        return trace, links, ctx
    # 2. another trace of the same step
    rlinks = link(reference)
    per_group, kind = _match_reference(trace, groups, reference, rlinks)
    if not per_group:
        ctx.notes.append("the reference trace has no kernels with CPU context and no graph capture")
        return trace, links, ctx
    if not any(per_group):
        ctx.notes.append("no replayed kernel sequence matched the reference's")
        return trace, links, ctx
    merged, mlinks, _ = _give_context(trace, reference, rlinks, per_group, kind, ctx)
    ctx.reference, ctx.reference_kind = reference_path or reference.path, kind
    return merged, mlinks, ctx


def _context_ranges_of_ranges(ref: Trace, rlinks: Links, ranges: np.ndarray) -> np.ndarray:
    """As :func:`_context_ranges`, seeded by capture-time launch ranges."""
    R = ref.ranges
    n = len(R["kind"])
    is_step = _names_matching(ref.strings, _STEP)
    step = (R["kind"] == ANNOTATION) & is_step[R["name"]] if n else np.zeros(0, bool)
    tops = set()
    for s in ranges.tolist():
        top = s
        for a in rlinks.ancestors(s):
            if step[a]:
                break
            top = a
        tops.add(top)
    keep = np.zeros(n, dtype=bool)
    for t in tops:
        keep[rlinks.subtree(t)] = True
    keep &= ~step
    return np.flatnonzero(keep)


def _replace(links: Links, **kw: np.ndarray) -> Links:
    """``links`` with some fields replaced; its caches (of the old fields) are not carried over."""
    return dataclasses.replace(links, **kw)


# -- structure: attention/structure.py (shared with compiled regions, tagger.py) -------------


def apply(trace: Trace, links: Links, tagging: Tagging, ctx: GraphContext) -> None:
    """After tagging: mark the sources of kernels attributed through the reference, and tag the
    replayed kernels still untagged by their place around attention kernels. The structure is
    read over each launch's whole sequence, with or without a reference: a kernel that it (or its
    name) makes attention without a reference stays attention with one, where the reference's
    op is not in an attention scope or the kernel found no partner there."""
    src_ref, src_struct = SOURCES.index("graph_reference"), SOURCES.index("graph_structure")
    tagging.graph = ctx
    if not ctx.n_replayed:
        return
    inst, phase, source = tagging.gpu_instance, tagging.gpu_phase, tagging.gpu_source
    ref = (ctx.how == REF) & (inst >= 0)
    source[ref] = src_ref
    names = trace.strings
    G = trace.gpu
    by_name = SOURCES.index("kernel_name")
    fused = P.PHASE_INDEX["fused_attention"]
    named = source == by_name  # the launches are disjoint: what one changes, no other reads
    structure = StructureTagger(names)
    for g in _groups(trace, links, ctx.replayed):
        _join_named_runs(g, inst, named, tagging.instances)
        # anchors: the attention kernels themselves (a KV-cache write tagged by name is not one)
        att = (inst[g] >= 0) & (phase[g] == fused)
        k = structure.tag(g, G["name"][g], att, inst, phase, source, src_struct)
        ctx.how[k[ctx.how[k] == NONE]] = STRUCT
    _piecewise(trace, tagging, ctx, structure, src_struct)


def _piecewise(trace: Trace, tagging: Tagging, ctx: GraphContext, structure: StructureTagger, code: int) -> None:
    """Piecewise graphs (vLLM's PIECEWISE mode, torch.compile splitting graphs at attention):
    attention runs eagerly between two graph launches, and its projections, rotary and norms are
    replayed in the launches before and after it. The structure is read per stream over the eager
    attention calls and the replayed kernels around them; only replayed kernels are placed."""
    inst, phase, source = tagging.gpu_instance, tagging.gpu_phase, tagging.gpu_source
    eager_att = (inst >= 0) & (phase == P.PHASE_INDEX["fused_attention"]) & ~ctx.replayed
    if not eager_att.any():
        return
    G = trace.gpu
    streams = G["device"].astype(np.int64) * (1 << 32) + G["stream"].astype(np.int64)
    for s in np.unique(streams[eager_att]).tolist():
        g = np.flatnonzero(streams == s)
        g = g[np.argsort(G["ts_ns"][g], kind="stable")]
        if not ctx.replayed[g].any():
            continue
        k = structure.tag(g, G["name"][g], eager_att[g], inst, phase, source, code)
        eager = k[~ctx.replayed[k]]  # an eager kernel has its own context: not the structure's to place
        inst[eager] = -1
        phase[eager] = -1
        source[eager] = -1
        placed = k[ctx.replayed[k]]
        ctx.how[placed[ctx.how[placed] == NONE]] = STRUCT


def _join_named_runs(g: np.ndarray, inst: np.ndarray, named: np.ndarray, instances: dict[int, Any]) -> None:
    """Adjacent kernels of one launch that are attention by name (a split-KV kernel and its
    combine) are one call: each run of them takes the instance of its first, and the instances
    it replaces are dropped. Whole-array per launch (a decode trace replays 10^5 kernels)."""
    nm = named[g]
    if np.count_nonzero(nm) < 2:
        return
    pos = np.arange(len(g))
    start = nm.copy()
    start[1:] &= ~nm[:-1]
    head = np.maximum.accumulate(np.where(start, pos, -1))  # the run each position is in
    follow = nm & ~start
    ks = g[follow]
    old, new = inst[ks], inst[g[head[follow]]]
    for x in old[old != new].tolist():
        instances.pop(int(x), None)
    inst[ks] = new


def column(tagging: Tagging, n: int) -> tuple[np.ndarray, list[Optional[str]]]:
    """Codes and vocabulary of the per-kernel ``graph`` field: how a replayed kernel got its
    context (``reference``, ``structure``, ``none``), None for kernels not replayed."""
    ctx = getattr(tagging, "graph", None)
    vocab: list[Optional[str]] = [*ATTRIBUTION, None]
    if ctx is None or len(ctx.how) != n:
        return np.full(n, len(ATTRIBUTION), dtype=np.int32), vocab
    return np.where(ctx.how >= 0, ctx.how, len(ATTRIBUTION)).astype(np.int32), vocab


REPLAY_REASON = "replayed from a CUDA graph: no CPU op, so no shapes and no cost (pass --reference EAGER_TRACE)"


def replay_reason(ctx: GraphContext) -> str:
    """The bound reason of a replayed kernel left without cost: what to pass, or, when a
    reference was passed, that this kernel found no partner in it."""
    if ctx.given is None:
        return REPLAY_REASON
    return (
        f"replayed from a CUDA graph and not matched in the reference {_shown(ctx.given)}: no CPU op, "
        "so no shapes and no cost"
    )


def _shown(path: str) -> str:
    return "(the trace's own capture)" if path == "capture" else path


def notice(ctx: GraphContext) -> Optional[dict[str, str]]:
    """The truthful notice about replayed kernels, or None. It speaks of what was passed: without
    a reference it asks for one; with one it says how much of the replay the reference matched."""
    counts = ctx.counts()
    missing = counts["structure"] + counts["none"]
    if not ctx.n_replayed or not missing:
        return None
    tagged = (
        f"they are tagged by name and by their place around attention kernels ({counts['structure']})"
        if counts["structure"]
        else "they are tagged by name only"
    )
    if ctx.given is None and ctx.reference != "capture":
        msg = (
            f"{missing} of {ctx.n_replayed} kernels were replayed from CUDA graphs and have no CPU context "
            f"(no op, shapes or module): {tagged}, and have no cost"
        )
        fix = (
            "pass --reference EAGER_TRACE (the same step run without the graph, or a trace of the graph capture), "
            "or keep such a trace in the same directory"
        )
    else:
        given = ctx.reference if ctx.reference == "capture" and ctx.given is None else ctx.given
        assert given is not None
        msg = (
            f"{missing} of {ctx.n_replayed} kernels replayed from CUDA graphs found no partner in the reference "
            f"{_shown(given)} ({counts['reference']} did): those have no CPU context (no op, shapes or module); "
            f"{tagged}, and have no cost"
        )
        fix = (
            "the reference must run the same step without the graph (same model, shapes and kernel sequence), "
            "or be a trace of this graph's capture; one step is enough"
        )
    if ctx.notes:
        msg += "; " + "; ".join(ctx.notes)
    return {"code": "graph_replay", "message": msg, "fix": fix}


def summary(ctx: GraphContext) -> Optional[dict[str, Any]]:
    """The report's ``graphs`` block (None when nothing was replayed)."""
    if not ctx.n_replayed:
        return None
    return {
        "launches": ctx.launches,
        "replayed_kernels": ctx.n_replayed,
        "attributed": ctx.counts(),
        "reference": ctx.reference,
        "reference_kind": ctx.reference_kind,
    }
