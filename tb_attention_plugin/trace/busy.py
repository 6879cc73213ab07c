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

import numpy as np

from .correlate import Links, outermost_marked
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
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    gaps = np.maximum(s[1:] - run_end[:-1], 0)
    return int(run_end[-1] - s[0] - gaps.sum())


def _matches(codes: np.ndarray, names: list, pattern: re.Pattern) -> np.ndarray:
    """``pattern`` searched in the string of each code (once per distinct code)."""
    if not len(codes):
        return np.zeros(0, dtype=bool)
    uniq, inv = np.unique(codes, return_inverse=True)
    hit = np.fromiter((bool(pattern.search(names[i])) for i in uniq.tolist()), dtype=bool, count=len(uniq))
    return hit[inv.reshape(-1)]


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
        inside = outermost_marked(links.parent, marked) >= 0
        gp = links.gpu_parent
        comm |= (gp >= 0) & inside[np.maximum(gp, 0)]
    if comm.any():
        key = G["device"].astype(np.int64) * (1 << 32) + G["stream"].astype(np.int64)
        comm |= (G["kind"] == MEMCPY) & np.isin(key, np.unique(key[comm]))
    return comm


def busy_times(trace: Trace, sel: np.ndarray, comm: np.ndarray, attention: np.ndarray) -> dict:
    """The report's busy-time fields over the activities in ``sel`` (docs/report-schema.md):
    ``gpu_busy_us``, ``compute_busy_us``, ``attention_busy_us``, ``span_us``, ``idle_us``,
    ``communication`` and ``streams``. Times are summed over devices."""
    G = trace.gpu
    t0, dur_ns, dev, stream = G["ts_ns"], G["dur_ns"], G["device"], G["stream"]
    t1 = t0 + dur_ns
    compute = sel & ~comm
    att = attention & compute
    com = sel & comm
    tot = dict(all=0, compute=0, attention=0, comm=0, comm_compute=0, comm_attention=0, span=0)
    for dv in np.unique(dev[sel]).tolist():
        on = dev == dv
        m_all, m_cmp, m_att, m_com = sel & on, compute & on, att & on, com & on
        u_all = union_ns(t0[m_all], t1[m_all])
        u_cmp = union_ns(t0[m_cmp], t1[m_cmp])
        u_att = union_ns(t0[m_att], t1[m_att])
        u_com = union_ns(t0[m_com], t1[m_com])
        tot["all"] += u_all
        tot["compute"] += u_cmp
        tot["attention"] += u_att
        tot["comm"] += u_com
        tot["span"] += int(t1[m_all].max() - t0[m_all].min())
        if u_com:
            # |A ∩ B| = |A| + |B| - |A ∪ B|
            both = m_com | m_cmp
            tot["comm_compute"] += u_com + u_cmp - union_ns(t0[both], t1[both])
            both = m_com | m_att
            tot["comm_attention"] += u_com + u_att - union_ns(t0[both], t1[both])
    streams = []
    keys = np.unique(np.stack([dev[sel], stream[sel]], axis=1), axis=0) if sel.any() else np.zeros((0, 2), int)
    for dv, st in keys.tolist():
        m = sel & (dev == dv) & (stream == st)
        streams.append({"device": int(dv), "stream": int(st), "busy_us": _us(union_ns(t0[m], t1[m])),
                        "kernels": int(m.sum()), "communication": bool((m & comm).any())})
    return {
        "gpu_busy_us": _us(tot["all"]),
        "compute_busy_us": _us(tot["compute"]),
        "attention_busy_us": _us(tot["attention"]),
        "span_us": _us(tot["span"]),
        "idle_us": _us(tot["span"] - tot["all"]),
        "communication": {
            "time_us": _us(int(dur_ns[com].sum())), "busy_us": _us(tot["comm"]),
            "overlap_with_compute_us": _us(tot["comm_compute"]),
            "overlap_with_attention_us": _us(tot["comm_attention"]), "kernels": int(com.sum()),
        },
        "streams": streams,
    }


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)
