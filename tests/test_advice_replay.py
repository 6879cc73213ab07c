"""The step replay (advice/replay.py) against the per-run formula it was written from.

``StepModel.simulate`` groups every segment's kernels by stream once and sums all runs of one
length together; ``_reference`` is the plain version (one pass per segment and stream, as the
replay was first written). They must agree to the last bit on random steps with host syncs,
several streams, removed kernels, changed durations, saved CPU time and CUDA-graph groups.
"""

from __future__ import annotations

import numpy as np
import pytest

from tb_attention_plugin.advice import replay as RP
from tb_attention_plugin.advice.replay import GRAPH_GAP_US, LAUNCH_LATENCY_US, StepModel, WhatIf


def _reference(m: StepModel, what, overhead: bool = True) -> float:
    launch = m.launch
    adj = launch - m.overhead_before(launch) if overhead else launch.copy()
    adj = np.maximum.accumulate(adj)
    dur = m.dur
    graph_first: dict[int, int] = {}
    removed: set[int] = set()
    pos = {int(i): p for p, i in enumerate(m.ids.tolist())}  # the plain lookup, not the model's array
    if what is not None:
        if what.cpu_saved:
            st = np.asarray(sorted(what.cpu_saved))
            cum = np.concatenate(([0.0], np.cumsum(st[:, 1])))
            adj = adj - cum[np.searchsorted(st[:, 0], launch, side="left")]
        if what.dur:
            dur = dur.copy()
            for i, d in what.dur.items():
                p = pos.get(int(i))
                if p is not None:
                    dur[p] = max(0.0, d)
        removed = {p for p in (pos.get(int(i)) for i in what.removed) if p is not None}
        for g in what.graphs:
            ps = sorted(p for p in (pos.get(int(i)) for i in g) if p is not None)
            for p in ps[1:]:
                graph_first[p] = ps[0]
    syncs = m.syncs
    s_adj: list = []
    if syncs:
        arr = np.asarray(syncs)
        a0 = arr[:, 0] - (m.overhead_before(arr[:, 0]) if overhead else 0.0)
        a1 = arr[:, 1] - (m.overhead_before(arr[:, 1]) if overhead else 0.0)
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
    if graph_first:
        mem = np.fromiter(graph_first, dtype=np.int64)
        firsts = np.fromiter(graph_first.values(), dtype=np.int64)
        adj = adj.copy()
        adj[mem] = adj[firsts]
        gap[mem] = GRAPH_GAP_US
        member[mem] = True
    cuts = np.searchsorted(launch, np.asarray([t for t, _ in syncs]), side="left") if syncs else np.zeros(0, int)
    bounds = [0, *cuts.tolist(), len(adj)]
    stream = m.stream
    stream_end: dict[int, float] = {}
    gpu_end = -np.inf
    first_launch, last_launch = np.inf, -np.inf
    shift = 0.0
    for si in range(len(bounds) - 1):
        if si > 0:
            arrive = s_adj[si - 1][0] + shift
            shift = max(arrive, gpu_end) - s_adj[si - 1][1]
        lo, hi = bounds[si], bounds[si + 1]
        if hi <= lo:
            continue
        seg = np.arange(lo, hi)[keep[lo:hi]]
        if not len(seg):
            continue
        lp = adj[seg] + shift
        own = ~member[seg]
        if own.any():
            first_launch = min(first_launch, float(lp[own].min()))
            last_launch = max(last_launch, float(lp[own].max()))
        st = stream[seg]
        order = np.argsort(st, kind="stable")
        st_o, seg_o, lp_o = st[order], seg[order], lp[order]
        cut = np.flatnonzero(np.diff(st_o)) + 1
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(st_o)]):
            sid = int(st_o[a])
            dd = dur[seg_o[a:b]]
            gg = gap[seg_o[a:b]]
            c = np.concatenate(([0.0], np.cumsum(dd)[:-1])) + np.cumsum(gg)
            x = np.maximum.accumulate(lp_o[a:b] + LAUNCH_LATENCY_US - c)
            x = np.maximum(x, stream_end.get(sid, -np.inf))
            end = x[-1] + c[-1] + dd[-1]
            stream_end[sid] = float(end)
            gpu_end = max(gpu_end, float(end))
    if first_launch == np.inf:
        return 0.0
    return float(max(gpu_end, last_launch) - first_launch)


def _model(rng: np.random.Generator, n: int, streams: int, n_syncs: int) -> StepModel:
    # microseconds since the epoch, as Kineto writes them: every sum rounds
    launch = np.cumsum(rng.exponential(7.3, n)) + 1.7e12 + 1000.0 * rng.random()
    dur = rng.exponential(11.1, n) * (rng.random(n) > 0.05)  # some zero-length activities
    stream = rng.integers(0, streams, n).astype(np.int64) * (1 << 32) + 7
    ids = rng.permutation(n * 3)[:n].astype(np.int64)
    ovh_ts = np.sort(rng.uniform(launch[0] - 50, launch[-1] + 50, 2 * n))
    ovh_is_op = rng.random(2 * n) < 0.4
    t = np.sort(rng.uniform(launch[0], launch[-1], n_syncs))
    syncs = [(float(a), float(a + rng.exponential(40.0))) for a in t]
    # a sync at a kernel's exact launch time (its segment starts there)
    if n_syncs and n > 10:
        syncs.append((float(launch[n // 2]), float(launch[n // 2] + 3.3)))
    return StepModel(ids, launch, dur, stream, ovh_ts, ovh_is_op, syncs, steps=3)


def _what_ifs(rng: np.random.Generator, m: StepModel):
    ids = m.ids.tolist()
    n = len(ids)
    yield None
    yield WhatIf(dur={i: float(d) for i, d in zip(rng.choice(ids, n // 3), rng.exponential(3.0, n // 3))})
    yield WhatIf(removed=set(rng.choice(ids, n // 4).tolist()))
    yield WhatIf(removed=set(ids))  # nothing left to run
    lo, hi = float(m.launch[0]), float(m.launch[-1])
    yield WhatIf(cpu_saved=[(float(t), float(s)) for t, s in zip(rng.uniform(lo, hi, 9), rng.exponential(20.0, 9))])
    groups = [sorted(rng.choice(ids, 6, replace=False).tolist()) for _ in range(max(1, n // 40))]
    yield WhatIf(graphs=groups, removed=set(rng.choice(ids, 3).tolist()), dur={ids[0]: 0.0, -5: 3.0})
    yield WhatIf(graphs=[ids[: n // 2]], cpu_saved=[(lo + 0.5 * (hi - lo), 100.0)])
    # graphs that overlap (a kernel in two goes with the later one), repeat a kernel, name ids the
    # model does not replay, or are empty: StepModel._graph_members against the dict of the reference
    half = ids[: n // 2]
    yield WhatIf(graphs=[half, ids[n // 4 :], [], [-7, ids[-1], ids[-1], 10**9], list(reversed(half))])


@pytest.mark.parametrize("seed", range(12))
def test_simulate_matches_the_per_run_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    m = _model(rng, n, streams=int(rng.integers(1, 5)), n_syncs=int(rng.integers(0, 30)))
    for what in _what_ifs(rng, m):
        for overhead in (True, False):
            assert m.simulate(what, overhead) == _reference(m, what, overhead)


def test_run_sums_are_each_runs_cumsum() -> None:
    rng = np.random.default_rng(5)
    dd, gg = rng.exponential(5.0, 500), rng.exponential(0.4, 500) * (rng.random(500) < 0.3)
    g0 = np.unique(np.concatenate(([0], rng.integers(1, 500, 60))))
    g1 = np.append(g0[1:], 500)
    c = RP._run_sums(dd, gg, g0, g1)
    for a, b in zip(g0.tolist(), g1.tolist()):
        ref = np.concatenate(([0.0], np.cumsum(dd[a:b])[:-1])) + np.cumsum(gg[a:b])
        assert c[a:b].tolist() == ref.tolist()
    c0 = RP._run_sums(dd, None, g0, g1)
    for a, b in zip(g0.tolist(), g1.tolist()):
        assert c0[a:b].tolist() == np.concatenate(([0.0], np.cumsum(dd[a:b])[:-1])).tolist()


def test_profiler_cost_per_op_is_a_share_of_the_profiled_cpu_time_per_op():
    """The launch-overhead claim's profiler cost per op: PROFILER_SHARE_OF_OP_CPU of the trace's profiled
    CPU time per op (launch span, less host syncs and 1 µs per runtime call), within [LOW, HIGH]."""
    # 100 launches 10 µs apart (span 990 µs), 90 ops and 10 runtime calls in between, one 90 µs sync
    launch = 1.7e12 + np.arange(100, dtype=np.float64) * 10.0
    ids = np.arange(100, dtype=np.int64)
    ovh_ts = launch[0] + np.linspace(0.0, 990.0, 100)
    ovh_is_op = np.arange(100) % 10 != 0
    m = StepModel(
        ids, launch, np.ones(100), np.zeros(100, dtype=np.int64), ovh_ts, ovh_is_op, [(launch[5], launch[5] + 90.0)], 1
    )
    cpu = (990.0 - 90.0 - RP.PROFILER_RUNTIME_US * 10) / 90
    assert m.profiled_cpu_per_op() == pytest.approx(cpu)
    assert m.profiler_op_us() == pytest.approx(round(RP.PROFILER_SHARE_OF_OP_CPU * cpu, 2))
    # a fast CPU: the fit's low end; a slow one: its high end
    fast = StepModel(
        ids, launch / 1e6 + 1.7e12 - 1.7e6, np.ones(100), np.zeros(100, dtype=np.int64), ovh_ts, ovh_is_op, [], 1
    )
    assert fast.profiler_op_us() == RP.PROFILER_OP_US_LOW
    slow_launch = 1.7e12 + np.arange(100, dtype=np.float64) * 100.0
    slow = StepModel(ids, slow_launch, np.ones(100), np.zeros(100, dtype=np.int64), ovh_ts, ovh_is_op, [], 1)
    assert slow.profiler_op_us() == RP.PROFILER_OP_US_HIGH


def test_tile_padding_counts_a_partial_last_tile_whole():
    from tb_attention_plugin.advice.sdpa_choice import tile_padding

    assert tile_padding("efficient", "forward", 128, 4096) == 1.0
    assert tile_padding("efficient", "forward", 96, 96) == pytest.approx(128 * 128 / (96 * 96))
    assert tile_padding("flash", "forward", 200, 200) == pytest.approx(256 * 256 / (200 * 200))
    assert tile_padding("flash", "backward", 200, 200) == pytest.approx(256 * 256 / (200 * 200))
    assert tile_padding("cudnn", "forward", 130, 64) == pytest.approx(256 / 130)
    # a length under one tile stays as it is (decode: a few queries, bound by the bytes of k and v)
    assert tile_padding("flash", "forward", 1, 4096) == 1.0
    assert tile_padding("efficient", "backward", 4, 100) == pytest.approx(128 / 100)
    assert tile_padding("math", "forward", 97, 97) == 1.0
