"""Attention calls bound by kernel launches → capture them in a CUDA graph.

Premise: many short attention kernels (≥ 8 under 10 µs, at least half of them) and a GPU that idles
between the kernels of one attention call once the profiler's own CPU time is taken out (the step
replay, replay.py, finds the call's kernels waiting for their launches), in a step that can be
captured: no host sync (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``.item()`` /
``aten::_local_scalar_dense``) and no op with a data-dependent output shape (``nonzero``,
``masked_select``, ``unique``) inside the attention calls. Kernels already replayed from a graph
are not this premise.

Estimate (**step** time, whole trace): the step replayed with each attention call launched as one
graph (its kernels back to back, ``GRAPH_GAP_US`` apart, their CPU time replaced by one
cudaGraphLaunch) against the step replayed as recorded, both without the profiler's overhead.
It claims the attention calls only: capturing the whole step (MLP, norms) saves more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...formats import rounded as _r, us as _us
from ..base import STEP, Finding, Rule, Silent, group_kernels, pct0, total
from ..replay import (
    GRAPH_GAP_US,
    GRAPH_LAUNCH_US,
    PROFILER_OP_US,
    PROFILER_OP_US_HIGH,
    PROFILER_OP_US_LOW,
    PROFILER_RUNTIME_US,
    PROFILER_SHARE_OF_OP_CPU,
    WhatIf,
)
from ..run import Run

SHORT_KERNEL_US = 10.0
LONG_GAP_US = 1000.0  # unprofiled CPU time between two launches of one call beyond which it is not launch overhead
MIN_SHORT_KERNELS = 8
SHORT_COUNT_SHARE = 0.5
MIN_STEP_SHARE = 0.01  # a step saving below 1 % of the step: silent
SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::tolist")
DYNAMIC_OPS = ("aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::unique_consecutive")

FIX = """\
# capture the step (or the decoder layers) in CUDA graphs; inputs and the KV cache in static buffers
model = torch.compile(model, mode="reduce-overhead")
# or by hand:
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_out = model(static_in)
static_in.copy_(x); g.replay()   # every step"""


def _blockers(run: Run, calls: list[list[int]]) -> tuple[list[str], list[str]]:
    """Host syncs and data-dependent-shape ops: (inside attention ``calls``, elsewhere in the trace)."""
    if run.trace is None or run.links is None:
        return [], []
    R, names = run.trace.ranges, run.trace.strings
    want = set(SYNC_RUNTIME) | set(SYNC_OPS) | set(DYNAMIC_OPS)
    codes = {i: s for i, s in enumerate(names) if s in want or s.startswith(SYNC_RUNTIME)}
    if not codes:
        return [], []
    hit = np.flatnonzero(np.isin(R["name"], np.fromiter(codes, dtype=np.int64)))
    if not len(hit):
        return [], []
    # attention calls' CPU windows: the launches of their kernels, by start (then end)
    m = run.replay
    starts = ends = np.zeros(0)
    if m is not None and calls:
        first = m.launches([c[0] for c in calls])
        last = m.launches([c[-1] for c in calls])
        o = np.lexsort((last, first))
        starts, ends = first[o], last[o]
    # each blocker in the window that starts last at or before it, if it has not ended by then
    t = R["ts"][hit]
    within = np.zeros(len(hit), dtype=bool)
    if len(starts):
        i = np.searchsorted(starts, t, side="right") - 1
        within = (i >= 0) & (t <= ends[np.maximum(i, 0)])
    name = R["name"][hit]
    inside = [codes[c] for c in name[within].tolist()]
    outside = [codes[c] for c in name[~within].tolist()]
    return inside, outside


def _graphed(m: Any, calls: list[list[int]]) -> tuple[WhatIf, float, int, float]:
    """Each attention call launched as CUDA graphs on model ``m``: the what-if, the CPU time of the
    calls, and the CPU pauses (> LONG_GAP_US between two launches) left out and splitting the graphs:
    no launch takes that long (CPU work, a one-time setup such as a cuDNN plan, a host-side cache
    update)."""
    w = WhatIf()
    cpu_in_calls, long_gaps, long_us = 0.0, 0, 0.0
    calls = [ks for ks in calls if ks]
    if not calls:
        return w, cpu_in_calls, long_gaps, long_us
    # every gap of every call in one pass (a long trace has tens of thousands of attention kernels);
    # a part is a run of a call's kernels without a long gap, cut where one is
    ids = [k for ks in calls for k in ks]
    launch = m.launches(ids)
    gap = m.cpu_us_between(launch[:-1], launch[1:])
    starts = np.cumsum([0] + [len(ks) for ks in calls[:-1]])
    cut = np.zeros(len(ids), dtype=bool)
    cut[starts] = True
    long = np.zeros(len(ids), dtype=bool)
    long[1:] = gap > LONG_GAP_US
    long[starts] = False
    for g in gap[long[1:]].tolist():
        long_gaps += 1
        long_us += g
    first = np.flatnonzero(cut | long)
    last = np.concatenate((first[1:], [len(ids)])) - 1
    many = last > first
    first, last = first[many], last[many]
    cpu = m.cpu_us_between(launch[first], launch[last]).tolist()
    for a, b, c, l1 in zip(first.tolist(), last.tolist(), cpu, launch[last].tolist()):
        w.graphs.append(ids[a : b + 1])
        cpu_in_calls += c
        w.cpu_saved.append((l1, max(0.0, c - GRAPH_LAUNCH_US)))
    return w, cpu_in_calls, long_gaps, long_us


def _count(names: list[str]) -> str:
    c: dict = {}
    for n in names:
        c[n] = c.get(n, 0) + 1
    return ", ".join(f"{n} x{k}" for n, k in sorted(c.items(), key=lambda x: -x[1]))


def check(run: Run) -> Any:
    rows = run.k
    if not rows:
        return Silent("no attention kernels")
    if sum(1 for k in rows if k.get("graph")) * 2 >= len(rows):
        return Silent("the attention kernels are replayed from a CUDA graph already")
    short = [k for k in rows if (k["dur_us"] or 0) < SHORT_KERNEL_US]
    if len(short) < MIN_SHORT_KERNELS or len(short) < SHORT_COUNT_SHARE * len(rows):
        return Silent(
            f"{len(short)} of {len(rows)} attention kernels run under {SHORT_KERNEL_US:g} µs: not a launch-bound "
            "pattern"
        )
    m = run.replay
    if m is None:
        return Silent("no trace to replay the step from (a cached report): the launch gaps cannot be measured")
    calls = m.calls({k["id"]: (k["instance"], k["direction"]) for k in rows if k.get("instance") is not None})
    inside, outside = _blockers(run, calls)
    if inside:
        return Silent(
            f"the attention calls cannot be captured in a CUDA graph: {_count(inside)} inside them (host syncs or "
            "data-dependent shapes)"
        )
    if not any(len(c) > 1 for c in calls):
        return Silent("no attention call with two or more kernels")
    # a graph removes launch time, not the profiler's; the profiler's cost per op varies between traces
    # and sessions (CPU-bound traces need 2-8 µs): the saving at both ends of that range, and the claim
    # at the fit's median
    op_claim = m.profiler_op_us()
    # the low end is the run's own low replay (the findings' step gains use it too); the others are
    # built one at a time (each holds a running sum as long as the trace's op count)
    known = {PROFILER_OP_US: m, PROFILER_OP_US_LOW: run.replay_low}
    gains: dict[float, float] = {}
    for op in sorted({PROFILER_OP_US_LOW, PROFILER_OP_US, op_claim, PROFILER_OP_US_HIGH}):
        mm = known.get(op) or m.variant(op)
        got = _graphed(mm, calls)
        gains[op] = max(0.0, mm.gain(got[0]))
        if op == op_claim:
            (w, cpu_in_calls, long_gaps, long_us), whole = got, mm.base_us
        del mm, got
    gain = gains[op_claim]
    if gain < MIN_STEP_SHARE * whole:
        return Silent(
            f"replayed without the profiler, graphs of the attention calls would save ~{_us(gain)} of a "
            f"{_us(whole)} step: the GPU, not the launches, bounds these calls"
        )
    t_short = total(short)
    prof_gap = m.profiled_us - whole
    detail = (
        f"{len(short)} of {len(rows)} attention kernels run for less than {SHORT_KERNEL_US:g} µs "
        f"({_us(t_short)}, {pct0(t_short / run.att_time)} of attention time) and the CPU launches them more slowly "
        f"than the GPU runs them: {len(w.graphs)} attention calls spend ~{_us(cpu_in_calls)} of CPU time launching "
        f"kernels that do {_us(run.att_time)} of GPU work. Replayed without the profiler (its "
        f"~{op_claim:g} µs per recorded op — {pct0(PROFILER_SHARE_OF_OP_CPU)} of the {m.profiled_cpu_per_op():.1f} µs "
        f"of profiled CPU time per op — and ~{PROFILER_RUNTIME_US:g} µs per runtime call taken out: "
        f"{_us(prof_gap)} of this "
        f"trace), the step takes ~{_us(whole / run.steps)}"
        + (" per step" if run.steps > 1 else "")
        + f"; with each attention call launched as one CUDA graph ({GRAPH_GAP_US:g} µs between its kernels) "
        f"~{_us((whole - gain) / run.steps)}: ~{_us(gain)} of step time saved in this trace (~"
        f"{_us(gains[PROFILER_OP_US_HIGH])}–{_us(gains[PROFILER_OP_US_LOW])} for a profiler overhead of "
        f"{PROFILER_OP_US_HIGH:g}–{PROFILER_OP_US_LOW:g} µs per op, the range CPU-bound traces need). Capturing the "
        "whole step (MLP, norms too) saves more."
    )
    if long_gaps:
        detail += (
            f" {long_gaps} CPU pause(s) inside attention calls ({_us(long_us)}, each over {_us(LONG_GAP_US)}) are not "
            "counted: no launch takes that long (CPU work, a host-side cache update, a one-time setup such as a "
            "cuDNN plan)."
        )
    if outside:
        detail += (
            f" Elsewhere in the trace {_count(outside)} would split a graph of the whole step (torch.compile then "
            "makes several graphs; capture the decoder layers by hand)."
        )
    return Finding(
        detail=detail,
        evidence={
            "short_kernels": len(short),
            "attention_kernels": len(rows),
            "short_time_us": _r(t_short),
            "threshold_us": SHORT_KERNEL_US,
            "calls": len(w.graphs),
            "cpu_in_calls_us": _r(cpu_in_calls),
            "profiled_step_us": _r(m.profiled_us / run.steps),
            "profiler_op_us_claimed": op_claim,
            "profiled_cpu_per_op_us": _r(m.profiled_cpu_per_op()),
            "unprofiled_step_us": _r(whole / run.steps),
            "graphed_step_us": _r((whole - gain) / run.steps),
            "profiler_overhead_us": _r(prof_gap),
            "gain_by_profiler_op_us": {f"{k:g}": _r(v) for k, v in gains.items()},
            "profiler_op_us": [PROFILER_OP_US_LOW, op_claim, PROFILER_OP_US_HIGH],
            "profiler_runtime_us": PROFILER_RUNTIME_US,
            "graph_gap_us": GRAPH_GAP_US,
            "long_gaps": long_gaps,
            "long_gap_cpu_us": _r(long_us),
            "long_gap_us": LONG_GAP_US,
            "capture_blockers_elsewhere": sorted(set(outside)),
            "kernels": group_kernels(short),
        },
        how=(
            'Capture the step in a CUDA graph: torch.compile(model, mode="reduce-overhead") (also fuses the '
            "small elementwise kernels), or torch.cuda.CUDAGraph / torch.cuda.graph / "
            "torch.cuda.graphs.make_graphed_callables with static input buffers (a preallocated KV cache for "
            "decode). The estimate counts the attention calls only, replayed without the profiler's overhead."
        ),
        removable_us=whole,
        step_gain_us=gain,
    )


RULE = Rule(
    id="launch_overhead",
    title="Attention calls bound by kernel launches: CUDA graphs",
    premise=(
        "≥ 8 attention kernels under 10 µs (at least half of them), launched more slowly than they run once the "
        "profiler's overhead is taken out, and no host sync or data-dependent shape inside the attention calls"
    ),
    basis=STEP,
    estimate=(
        "µs of step (wall-clock) time over the trace: the step replayed without the profiler, as recorded − with each "
        "attention call launched as one CUDA graph"
    ),
    fix=FIX,
    twin="decode_eager_to_cuda_graph",
    absent=("naive_bf16_s2048_fwd", "sdpa_flash_fwdbwd_causal", "mem_naive_s4096", "decode_graph_replay"),
    check=check,
)
