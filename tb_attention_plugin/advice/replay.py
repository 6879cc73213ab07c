"""The step replayed without the profiler, and with a change: wall-clock step time saved.

GPU time saved is not step time saved. A kernel made shorter shortens the step only where the GPU
was the bottleneck; where the GPU waited for the CPU to launch the next kernel, the step is as long
as the CPU's launches, and only removing launches (fewer ops, a CUDA graph) shortens it. And a
profiled step is longer than an unprofiled one: the profiler spends CPU time on every op and every
runtime call it records, which widens the gaps between kernels.

:class:`StepModel` replays the trace's own timeline:

* every GPU activity keeps its duration and its stream, and is launched at its launch call's CPU
  time less the profiler's overhead recorded before it (``PROFILER_OP_US`` per op,
  ``PROFILER_RUNTIME_US`` per runtime call: fitted on 54 H200 traces whose unprofiled step time was
  measured, validation/raw/2026-11-30/meta and validation/modern/2026-12-01/meta; docs/advice.md,
  *Step replay*);
* on each stream a kernel starts when it is launched (plus ``LAUNCH_LATENCY_US``) or when the
  previous kernel on that stream ends, whichever is later; kernels of a CUDA graph start
  ``GRAPH_GAP_US`` after the previous one;
* a host sync (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, a
  blocking ``cudaMemcpy``) holds the CPU until the GPU work launched before it has finished;
* collective-communication activity (trace/busy.py) is left out: its waits on other ranks are
  not this rank's to replay.

The step is the time from the first launch to the later of the last launch and the last kernel's
end. :class:`WhatIf` describes a change (new kernel durations, kernels that no longer run, CPU time
no longer spent, kernels launched together from a CUDA graph); ``gain(what_if)`` is the replayed
step time without it less with it, over the whole trace. An estimate: cross-stream dependencies are
not replayed, and the overhead constants are means (the fit's worst trace is off by 1.85×).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..trace.arrays import unique_ints
from ..trace.records import LAUNCH, OP

PROFILER_OP_US = 5.0  # CPU time the profiler adds per recorded op (record_shapes, with_stack): the fit
PROFILER_OP_US_HIGH = 8.0  # ... the upper end of what the most CPU-bound traces of the fit need each
# (best fit per trace: decode_graph_eager 8.3, hf_llama_sdpa_fwd 7.6, mem_naive_s1024 7.2, decode_mha_flash 6.2,
# flex_causal 5.1, decode_gqa_flash 5.0, hf_deepseek 4.2, mla_moe 3.9 µs)
PROFILER_OP_US_LOW = 2.0  # ... and the low end: CPU-bound twins timed with CUDA events (2026-12-01) need 1.9-4.5
# (dropout_eval_infer 1.9, dropout_train_infer 3.5, decode_eager 4.0, ffn_block_eager 4.5 µs)
# what a step-time claim (launch_overhead) rests on: the profiler's cost per op of THIS trace, estimated as a
# share of its profiled CPU time per op (StepModel.profiler_op_us). Over 74 CPU-bound H200 traces with a measured
# unprofiled step (validation/profiler_cost_fit.py), the best-fit cost per op is 0.47x the trace's profiled CPU
# time per op (median; quartiles 0.39-0.61): the profiler's cost grows with what each op records. Against a
# constant 5 µs this halves the median error (1.48 -> 1.08 µs per op; 90th percentile 4.8 -> 3.3 µs)
PROFILER_SHARE_OF_OP_CPU = 0.47
PROFILER_RUNTIME_US = 1.0  # ... and per recorded CUDA runtime call
LAUNCH_LATENCY_US = 2.0  # launch call to kernel start when the GPU is idle
GRAPH_GAP_US = 0.4  # between kernels replayed from a CUDA graph (median in tests/data/modern/decode_graph_replay)
GRAPH_LAUNCH_US = 10.0  # CPU time of one cudaGraphLaunch
MAX_REPLAY_ACTIVITIES = 400_000  # beyond this the replay is skipped (its Python loop would cost seconds)
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


@dataclass
class WhatIf:
    """A change to replay. ``dur``: GPU activity id -> its new duration (µs); ``removed``: activities
    that no longer run (neither launched nor on the GPU); ``cpu_saved``: (original CPU time t, µs of
    unprofiled CPU time no longer spent before t: every launch after t comes that much earlier);
    ``graphs``: groups of activity ids launched together
    from one CUDA graph (at the first one's launch)."""

    dur: dict[int, float] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)
    cpu_saved: list[tuple[float, float]] = field(default_factory=list)
    graphs: list[list[int]] = field(default_factory=list)


class StepModel:
    def __init__(
        self,
        ids: np.ndarray,
        launch: np.ndarray,
        dur: np.ndarray,
        stream: np.ndarray,
        ovh_ts: np.ndarray,
        ovh_is_op: np.ndarray,
        syncs: list[tuple[float, float]],
        steps: int,
        op_us: float = PROFILER_OP_US,
        sorted_: bool = False,
        pos: Optional[np.ndarray] = None,
    ):
        if not sorted_:
            o = np.lexsort((ids, launch))
            ids, launch, dur, stream = ids[o], launch[o], dur[o], stream[o]
        self.ids, self.launch, self.dur, self.stream = ids, launch, dur, stream
        if pos is None:  # kernel id -> its position in launch order (-1: not replayed)
            pos = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int64)
            pos[ids] = np.arange(len(ids))
        self._pos = pos  # an array, not a dict of every kernel id: ~0.5 MB instead of ~6 on 61k kernels
        self.op_us = op_us
        self._ovh_ts, self._ovh_is_op = ovh_ts, ovh_is_op
        # the profiler's time before each recorded event: a running sum, written in place
        cum = np.empty(len(ovh_is_op) + 1)
        cum[0] = 0.0
        cum[1:] = PROFILER_RUNTIME_US
        cum[1:][ovh_is_op] = op_us
        np.cumsum(cum[1:], out=cum[1:])
        self._ovh_cum = cum
        self.syncs = sorted(syncs)
        self.steps = steps
        self.base_us = self.simulate(None)
        self._profiled: Optional[float] = None

    def variant(self, op_us: float) -> StepModel:
        """The same trace replayed with another per-op profiler overhead (a new model: each holds
        its own running sum of the overhead, as large as the trace's op count)."""
        return StepModel(
            self.ids,
            self.launch,
            self.dur,
            self.stream,
            self._ovh_ts,
            self._ovh_is_op,
            self.syncs,
            self.steps,
            op_us=op_us,
            sorted_=True,
            pos=self._pos,
        )

    def profiled_cpu_per_op(self) -> float:
        """The profiled CPU time per recorded op: from the first launch to the last, less host syncs
        and ``PROFILER_RUNTIME_US`` per runtime call, over the ops recorded in between."""
        n_ops = int(self._ovh_is_op.sum())
        if not n_ops or not len(self.launch):
            return 0.0
        span = float(self.launch.max() - self.launch.min())
        held = sum(b - a for a, b in self.syncs)
        return max(0.0, span - held - PROFILER_RUNTIME_US * float((~self._ovh_is_op).sum())) / n_ops

    def profiler_op_us(self) -> float:
        """This trace's profiler cost per op (:data:`PROFILER_SHARE_OF_OP_CPU` of its profiled CPU time
        per op), within the fit's range [``PROFILER_OP_US_LOW``, ``PROFILER_OP_US_HIGH``]."""
        est = PROFILER_SHARE_OF_OP_CPU * self.profiled_cpu_per_op()
        return round(min(PROFILER_OP_US_HIGH, max(PROFILER_OP_US_LOW, est)), 2)

    @property
    def profiled_us(self) -> float:
        """The step replayed as recorded, the profiler's overhead left in."""
        if self._profiled is None:
            self._profiled = self.simulate(None, overhead=False)
        return self._profiled

    @classmethod
    def build(cls, trace: Any, links: Any, report: dict) -> Optional[StepModel]:
        from ..trace.busy import communication_mask

        G, R = trace.gpu, trace.ranges
        kt = report.get("kernels")
        cols = getattr(kt, "columns", None)
        if not isinstance(cols, dict) or "id" not in cols:
            return None
        ids = np.asarray(cols["id"], dtype=np.int64)
        if not len(ids) or len(ids) > MAX_REPLAY_ACTIVITIES:
            return None
        ok = ids < len(G["ts"])
        ids = ids[ok]
        gl = links.gpu_launch[ids]
        comm = communication_mask(trace, links)[ids]
        keep = (gl >= 0) & ~comm & np.isfinite(G["dur"][ids])
        ids, gl = ids[keep], gl[keep]
        if not len(ids):
            return None
        launch = R["ts"][gl].astype(np.float64)
        dur = np.maximum(G["dur"][ids].astype(np.float64), 0.0)
        stream = G["device"][ids].astype(np.int64) * (1 << 32) + G["stream"][ids].astype(np.int64)
        lo, hi = float(launch.min()), float(launch.max())
        kind = R["kind"]
        ts = R["ts"]
        # the recorded ops and runtime calls in the launches' span, in time order (their times
        # are the largest array the replay holds: no other copy of them is kept)
        ev = np.flatnonzero(((kind == OP) | (kind == LAUNCH)) & (ts >= lo) & (ts <= hi))
        ovh_ts = ts[ev].astype(np.float64, copy=False)
        ovh_is_op = kind[ev] == OP
        del ev
        o = np.argsort(ovh_ts, kind="stable")
        ovh_ts, ovh_is_op = ovh_ts[o], ovh_is_op[o]
        del o
        names = trace.strings
        sync_codes = {
            i for i, s in enumerate(names) if s.startswith(SYNC_CALLS) and not s.startswith("cudaMemcpyAsync")
        }
        syncs = []
        if sync_codes:
            la = np.flatnonzero((kind == LAUNCH) & (ts >= lo) & (ts <= hi))
            hit = np.isin(R["name"][la], np.fromiter(sync_codes, dtype=np.int64))
            for r in la[hit].tolist():
                syncs.append((float(ts[r]), float(ts[r] + R["dur"][r])))
        steps = 1 if report.get("step") is not None else max(1, len(report.get("steps") or []))
        return cls(ids, launch, dur, stream, ovh_ts, ovh_is_op, syncs, steps)

    def positions(self, kernel_ids) -> np.ndarray:
        """Each kernel id's position in launch order, -1 for one not replayed."""
        a = np.asarray(kernel_ids, dtype=np.int64).reshape(-1)
        out = np.full(len(a), -1, dtype=np.int64)
        ok = (a >= 0) & (a < len(self._pos))
        out[ok] = self._pos[a[ok]]
        return out

    # the profiler's CPU time recorded before each original CPU time
    def overhead_before(self, t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self._ovh_ts, t, side="left")
        out: np.ndarray = self._ovh_cum[i]
        return out

    def cpu_us(self, t0: float, t1: float) -> float:
        """Unprofiled CPU time between two original CPU times (the profiler's overhead taken out)."""
        if t1 <= t0:
            return 0.0
        ov = self.overhead_before(np.asarray([t0, t1]))
        return float(max(0.0, (t1 - t0) - (ov[1] - ov[0])))

    def cpu_us_between(self, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        """:meth:`cpu_us` of each pair (t0[i], t1[i]), in one pass: the same arithmetic, element-wise."""
        t0 = np.asarray(t0, dtype=np.float64)
        t1 = np.asarray(t1, dtype=np.float64)
        out = (t1 - t0) - (self.overhead_before(t1) - self.overhead_before(t0))
        out = np.where(out > 0.0, out, 0.0)
        return np.where(t1 <= t0, 0.0, out)

    def launches(self, kernel_ids) -> np.ndarray:
        """:meth:`launch_of` of each kernel id, NaN for one not replayed."""
        p = self.positions(kernel_ids)
        out = np.full(len(p), np.nan)
        ok = p >= 0
        out[ok] = self.launch[p[ok]]
        return out

    def calls(self, key_of: dict[int, Any]) -> list[list[int]]:
        """Kernels grouped into calls: maximal runs, in launch order, of kernels with the same key
        (an attention instance and direction). A module called in every step keeps its instance
        across steps; splitting where another kernel is launched between keeps each call apart."""
        n = len(self.ids)
        if not n or not key_of:
            return []
        codes: dict[Any, int] = {}
        key_code = np.fromiter((codes.setdefault(key, len(codes)) for key in key_of.values()), np.int64, len(key_of))
        p = self.positions(list(key_of))
        k = np.full(n, -1, dtype=np.int64)
        k[p[p >= 0]] = key_code[p >= 0]
        start = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        out = []
        ids = self.ids
        for a, b in zip(start.tolist(), [*start[1:].tolist(), n]):
            if k[a] >= 0:
                out.append([int(x) for x in ids[a:b]])
        return out

    def launch_of(self, kernel_id: int) -> Optional[float]:
        p = int(self.positions([int(kernel_id)])[0])
        return float(self.launch[p]) if p >= 0 else None

    def simulate(self, what: Optional[WhatIf], overhead: bool = True) -> float:
        launch = self.launch
        adj = launch - self.overhead_before(launch) if overhead else launch.copy()
        adj = np.maximum.accumulate(adj)  # taking overhead out never sends a launch before the one before it
        dur = self.dur
        graph_members = graph_firsts = np.zeros(0, dtype=np.int64)
        removed: set[int] = set()
        if what is not None:
            if what.cpu_saved:
                st = np.asarray(sorted(what.cpu_saved))
                cum = np.concatenate(([0.0], np.cumsum(st[:, 1])))
                # a saving at CPU time t moves the launches after t (strictly) earlier
                adj = adj - cum[np.searchsorted(st[:, 0], launch, side="left")]
            if what.dur:
                dur = dur.copy()
                p = self.positions([int(i) for i in what.dur])
                d = np.fromiter(what.dur.values(), np.float64, len(what.dur))
                ok = p >= 0
                dur[p[ok]] = np.where(d[ok] > 0.0, d[ok], 0.0)  # max(0.0, d), NaN to 0.0 as max does
            if what.removed:
                p = self.positions([int(i) for i in what.removed])
                removed = set(p[p >= 0].tolist())
            if what.graphs:
                graph_members, graph_firsts = self._graph_members(what.graphs)
        syncs = self.syncs
        s_adj: list[tuple[float, float]] = []
        if syncs:
            arr = np.asarray(syncs)
            a0 = arr[:, 0] - (self.overhead_before(arr[:, 0]) if overhead else 0.0)
            a1 = arr[:, 1] - (self.overhead_before(arr[:, 1]) if overhead else 0.0)
            if what is not None and what.cpu_saved:
                st = np.asarray(sorted(what.cpu_saved))
                cum = np.concatenate(([0.0], np.cumsum(st[:, 1])))
                a0 = a0 - cum[np.searchsorted(st[:, 0], arr[:, 0], side="left")]
                a1 = a1 - cum[np.searchsorted(st[:, 0], arr[:, 1], side="left")]
            s_adj = list(zip(a0.tolist(), a1.tolist()))
        gap = np.zeros(len(adj))
        keep = np.ones(len(adj), dtype=bool)
        member = np.zeros(len(adj), dtype=bool)
        if removed:
            keep[list(removed)] = False
        if len(graph_members):
            mem, firsts = graph_members, graph_firsts
            adj = adj.copy()
            adj[mem] = adj[firsts]  # launched with the graph (its first kernel's launch)
            gap[mem] = GRAPH_GAP_US
            member[mem] = True
        # segments between host syncs: a sync holds the CPU until the GPU work before it is done
        cuts = np.searchsorted(launch, np.asarray([t for t, _ in syncs]), side="left") if syncs else np.zeros(0, int)
        return _replay(adj, dur, gap, keep, member, self.stream, cuts, s_adj)

    def _graph_members(self, graphs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The positions launched with a graph's first kernel rather than their own, and that first
        kernel's position, for all graphs in one pass: in each graph every replayed kernel after the
        earliest one (in launch order); a kernel in two graphs goes with the later graph."""
        sizes = np.fromiter((len(g) for g in graphs), np.int64, len(graphs))
        if not sizes.sum():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        p = self.positions(np.fromiter((int(i) for g in graphs for i in g), np.int64, int(sizes.sum())))
        gid = np.repeat(np.arange(len(graphs)), sizes)
        ok = p >= 0
        p, gid = p[ok], gid[ok]
        o = np.lexsort((p, gid))  # by graph, launch order within each
        p, gid = p[o], gid[o]
        head = np.ones(len(p), dtype=bool)
        head[1:] = gid[1:] != gid[:-1]
        firsts = np.maximum.accumulate(np.where(head, np.arange(len(p)), 0))
        mem, first_of = p[~head], p[firsts[~head]]
        # a position in two graphs: the later graph's first kernel (the last occurrence)
        _, last = unique_ints(mem[::-1], return_index=True)
        keep = len(mem) - 1 - last
        return mem[keep], first_of[keep]

    def gain(self, what: WhatIf) -> float:
        return float(self.base_us - self.simulate(what))


def _replay(
    adj: np.ndarray,
    dur: np.ndarray,
    gap: np.ndarray,
    keep: np.ndarray,
    member: np.ndarray,
    stream: np.ndarray,
    cuts: np.ndarray,
    s_adj: list[tuple[float, float]],
) -> float:
    """The replayed step of :meth:`StepModel.simulate`: kernels in launch order (``adj``: their launch
    times, overhead taken out), cut into segments by the host syncs before ``cuts`` (``s_adj``: each
    sync's adjusted start and end).

    On each stream ``start_k = max(L_k + latency, end_(k-1) + gap_k)``; with ``C_k = sum(d_<k) +
    sum(gap_<=k)`` (local to a segment's run of the stream) ``start_k - C_k`` is a running maximum, so
    a run's end is ``max(its previous end, max_k(L_k + latency - C_k)) + C_last + d_last``. Segments
    are sequential (a sync waits for the GPU, which moves every later launch by ``shift``), so
    everything that does not depend on the shift (the kept kernels of each segment grouped by stream,
    the sums ``C``, the earliest and latest own launch) is computed for all segments at once, and each
    segment costs a few array operations instead of one pass per stream (a trace syncs every few
    dozen kernels: 900 segments in a 300-step training trace). The arithmetic is the per-run
    formula's, operation for operation, so the result is the same to the last bit.
    """
    pos = np.flatnonzero(keep)
    if not len(pos):
        return 0.0
    n_seg = len(cuts) + 1
    seg = np.searchsorted(cuts, pos, side="right")  # segment si covers [cuts[si-1], cuts[si])
    order = np.lexsort((stream[pos], seg))  # by segment, then stream, launch order kept within
    p = pos[order]
    sg, st = seg[order], stream[p]
    new = np.ones(len(p), dtype=bool)
    new[1:] = (sg[1:] != sg[:-1]) | (st[1:] != st[:-1])
    g0 = np.flatnonzero(new)  # first element of each (segment, stream) run
    g1 = np.append(g0[1:], len(p))
    dd = dur[p]
    c = _run_sums(dd, gap[p] if member.any() else None, g0, g1)
    base = adj[p]
    last = g1 - 1
    c_last, d_last = c[last].tolist(), dd[last].tolist()  # C and d of each run's last kernel
    run_stream = st[g0].tolist()
    run_seg = sg[g0]
    # runs of each segment: [r0[si], r1[si])
    r0 = np.searchsorted(run_seg, np.arange(n_seg), side="left").tolist()
    r1 = np.searchsorted(run_seg, np.arange(n_seg), side="right").tolist()
    starts = g0.tolist() + [len(p)]
    # earliest and latest launch of each run's kernels not replayed from a graph (min(L + s) is
    # min(L) + s: rounding is monotonic)
    own = ~member[p]
    lo_own = np.minimum.reduceat(np.where(own, base, np.inf), g0).tolist()
    hi_own = np.maximum.reduceat(np.where(own, base, -np.inf), g0).tolist()
    stream_end: dict[int, float] = {}
    gpu_end = -np.inf
    first_launch, last_launch = np.inf, -np.inf
    shift = 0.0
    for si in range(n_seg):
        if si > 0:  # the sync before this segment
            arrive = s_adj[si - 1][0] + shift
            shift = max(arrive, gpu_end) - s_adj[si - 1][1]
        ra, rb = r0[si], r1[si]
        if ra == rb:
            continue
        for r in range(ra, rb):
            if lo_own[r] != np.inf:
                first_launch = min(first_launch, lo_own[r] + shift)
                last_launch = max(last_launch, hi_own[r] + shift)
        a, b = starts[ra], starts[rb]
        v = base[a:b] + shift + LAUNCH_LATENCY_US - c[a:b]
        peaks = [float(v.max())] if rb - ra == 1 else np.maximum.reduceat(v, np.asarray(starts[ra:rb]) - a).tolist()
        for r, x in zip(range(ra, rb), peaks):
            sid = run_stream[r]
            x = max(x, stream_end.get(sid, -np.inf))
            end = x + c_last[r] + d_last[r]
            stream_end[sid] = end
            gpu_end = max(gpu_end, end)
    if first_launch == np.inf:
        return 0.0
    return float(max(gpu_end, last_launch) - first_launch)


def _run_sums(dd: np.ndarray, gg: Optional[np.ndarray], g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """``C_k = sum(d_<k) + sum(gap_<=k)`` within each run ``[g0, g1)``, summed in order from each
    run's start as one run's ``cumsum`` does. Runs of equal length are summed together, as the rows
    of one matrix (a step's runs repeat in every step: a few lengths for the whole trace); ``gg``
    None: no gaps (no kernel replayed from a graph)."""
    c = np.empty(len(dd))
    lens = g1 - g0
    for n in unique_ints(lens).tolist():
        idx = g0[lens == n][:, None] + np.arange(n)
        sums = np.zeros(idx.shape)
        if n > 1:
            np.cumsum(dd[idx[:, :-1]], axis=1, out=sums[:, 1:])
        if gg is not None:
            sums += np.cumsum(gg[idx], axis=1)
        c[idx] = sums
    return c
