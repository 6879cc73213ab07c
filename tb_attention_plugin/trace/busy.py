"""GPU busy time as unions of intervals: per stream, per device, compute apart from communication.

Shares must be taken over the time the GPU was doing the model's work. Summing kernel
durations counts twice whatever overlaps (two streams at once), and counting collective
communication kernels (NCCL, RCCL, c10d) as busy time makes the share of everything else depend
on how long a rank waited for its peers: the two ranks of one data-parallel model then report
different attention shares. So busy time is the length of the union of activity intervals, on
each device (summed over devices), and communication kernels are measured apart, with how much
of them overlaps compute and attention. Everything here is vectorised (sorts and cumulative
maxima); the per-device and per-stream loops run once per distinct device or stream.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .arrays import unique_ints
from .correlate import Links
from .records import MEMCPY, Trace

# Collective-communication kernels: NCCL's (ncclKernel_*, ncclDevKernel_*), ROCm's RCCL (whose
# kernels keep the nccl names) and anything named after PyTorch's c10d.
COMMUNICATION = re.compile(r"nccl|rccl|c10d", re.I)
# CPU ranges of a collective: c10d's ops, the backends' record_function ranges (nccl:all_reduce,
# gloo:all_reduce) and Kineto's record_param_comms. GPU work launched inside them (gloo's staging
# copies of a CUDA tensor to and from the host) is communication too.
COMMUNICATION_RANGE = re.compile(r"^(c10d::|nccl:|gloo:|ucc:|mpi:|record_param_comms$)")


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals [starts, ends) (integer ns)."""
    if not len(starts):
        return 0
    o = np.argsort(starts, kind="stable")
    return _union_sorted(starts[o], ends[o])


def _union_sorted(s: np.ndarray, e: np.ndarray) -> int:
    """Union length of intervals already sorted by start (any subset of a sorted set is)."""
    if not len(s):
        return 0
    run_end = np.maximum.accumulate(e)
    gaps = np.maximum(s[1:] - run_end[:-1], 0)
    return int(run_end[-1] - s[0] - gaps.sum())


def _matches(codes: np.ndarray, names: list[str], pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern`` searched in the string of each code, once per string in use."""
    if not len(codes):
        return np.zeros(0, dtype=bool)
    used = np.flatnonzero(np.bincount(codes, minlength=len(names)))
    hit = np.zeros(max(len(names), int(used[-1]) + 1), dtype=bool)
    hit[used] = [bool(pattern.search(names[i])) for i in used.tolist()]
    out: np.ndarray = hit[codes]
    return out


def communication_mask(trace: Trace, links: Links) -> np.ndarray:
    """Per GPU activity: collective communication. A kernel named so (NCCL, RCCL, c10d); any
    activity launched inside a collective's CPU range (c10d ops, ``nccl:``/``gloo:`` ranges,
    ``record_param_comms``); and copies on a stream that carries such activity (gloo's staging
    copies back to the device are launched from its own thread, outside those ranges)."""
    G, R = trace.gpu, trace.ranges
    n = len(G["name"])
    comm = _matches(G["name"], trace.strings, COMMUNICATION)
    if not n:
        return comm
    marked = _matches(R["name"], trace.strings, COMMUNICATION_RANGE)
    if marked.any():
        inside = links.outermost_marked(marked) >= 0
        gp = links.gpu_parent
        comm |= (gp >= 0) & inside[np.maximum(gp, 0)]
    if comm.any():
        key = G["device"].astype(np.int64) * (1 << 32) + G["stream"].astype(np.int64)
        comm |= (G["kind"] == MEMCPY) & np.isin(key, unique_ints(key[comm]))
    return comm


def busy_times(trace: Trace, sel: np.ndarray, comm: np.ndarray, attention: np.ndarray) -> dict[str, Any]:
    """The report's busy-time fields over the activities in ``sel`` (docs/report-schema.md):
    ``gpu_busy_us``, ``compute_busy_us``, ``attention_busy_us``, ``span_us``, ``idle_us``,
    ``communication`` and ``streams``. Times are summed over devices. The activities are sorted
    by start once; every union is then a cumulative maximum over a subset."""
    G = trace.gpu
    idx = np.flatnonzero(sel)
    idx = idx[np.argsort(G["ts_ns"][idx], kind="stable")]
    t0 = G["ts_ns"][idx]
    t1 = t0 + G["dur_ns"][idx]
    dev, stream = G["device"][idx], G["stream"][idx]
    com = comm[idx]
    cmp = ~com
    att = attention[idx] & cmp
    tot = dict(all=0, compute=0, attention=0, comm=0, comm_compute=0, comm_attention=0, span=0)

    def u(m: np.ndarray) -> int:
        return _union_sorted(t0[m], t1[m])

    devices = unique_ints(dev)
    for dv in devices.tolist():
        on = dev == dv
        u_all, u_cmp, u_att = u(on), u(on & cmp), u(on & att)
        tot["all"] += u_all
        tot["compute"] += u_cmp
        tot["attention"] += u_att
        tot["span"] += int(t1[on].max() - t0[on].min())
        if (on & com).any():
            # |A ∩ B| = |A| + |B| - |A ∪ B|
            u_com = u(on & com)
            tot["comm"] += u_com
            tot["comm_compute"] += u_com + u_cmp - u_all
            tot["comm_attention"] += u_com + u_att - u(on & (com | att))
    streams = []
    if len(idx):
        key = dev.astype(np.int64) * (1 << 32) + stream.astype(np.int64)
        keys, first, inv = unique_ints(key, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        counts = np.bincount(inv, minlength=len(keys))
        has_comm = np.bincount(inv, weights=com, minlength=len(keys)) > 0
        for j in range(len(keys)):
            m = inv == j
            streams.append(
                {
                    "device": int(dev[first[j]]),
                    "stream": int(stream[first[j]]),
                    "busy_us": _us(u(m)),
                    "kernels": int(counts[j]),
                    "communication": bool(has_comm[j]),
                }
            )
    return {
        "gpu_busy_us": _us(tot["all"]),
        "compute_busy_us": _us(tot["compute"]),
        "attention_busy_us": _us(tot["attention"]),
        "span_us": _us(tot["span"]),
        "idle_us": _us(tot["span"] - tot["all"]),
        "communication": {
            "time_us": _us(int(G["dur_ns"][idx][com].sum())),
            "busy_us": _us(tot["comm"]),
            "overlap_with_compute_us": _us(tot["comm_compute"]),
            "overlap_with_attention_us": _us(tot["comm_attention"]),
            "kernels": int(com.sum()),
        },
        "streams": streams,
    }


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)
