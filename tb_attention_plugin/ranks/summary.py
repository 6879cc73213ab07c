"""One trace's report -> the compact per-rank summary the job view is built from.

A summary holds what comparing ranks needs — attention time, compute busy time, phases per
direction, bounds, communication and its overlap with attention, the longest kernel groups — in
a few KB, so a 1024-rank job's summaries fit in a few MB and travel from Dask workers cheaply.

Communication and compute busy time: the report's own ``compute_busy_us``, ``attention_share`` and
``communication`` block (trace/busy.py). A report without them (a kernel table alone, as in a
test or an older report) gets them computed here from the kernel rows (:func:`gpu_activity`), a
kernel being communication when its name says so (``trace.busy.COMMUNICATION``); that fallback
does not see the engine's other communication evidence (GPU work inside a collective's CPU range).
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

import numpy as np

from ..compare import kernel_groups
from ..formats import rounded
from ..trace.arrays import unique_ints
from ..trace.busy import COMMUNICATION as COMMUNICATION_NAME
from .job import rank_from_name
from .store import SUMMARY_SCHEMA

TOP_GROUPS = 5
_PT_TRACE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?:\.gz)?$")
_PLAIN = re.compile(r"^(?P<stem>.+?)\.json(?:\.gz)?$")


def worker_of(path: str) -> tuple[str, Optional[str]]:
    """(worker, span) from a file name as ``tensorboard_trace_handler`` writes it
    (``{worker}.{span}.pt.trace.json[.gz]``); other names: the name without ``.json[.gz]``."""
    name = os.path.basename(path)
    m = _PT_TRACE.match(name)
    if m:
        return m.group("worker"), m.group("span")
    m = _PLAIN.match(name)
    return (m.group("stem") if m else name), None


def rank_of(report: dict, path: str) -> tuple[Optional[int], Optional[int], str]:
    """(rank, world_size, source): ``distributedInfo`` of the trace, else a ``rank<N>`` in the
    file name, else (None, None, "none")."""
    dist = (report.get("trace") or {}).get("distributed") or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    world = world if isinstance(world, int) and not isinstance(world, bool) else None
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return rank, world, "distributedInfo"
    named = rank_from_name(path)
    if named is not None:
        return named, world, "file_name"
    return None, world, "none"


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the given ones."""
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], run_end[last]


def _length(iv: tuple[np.ndarray, np.ndarray]) -> float:
    return float((iv[1] - iv[0]).sum()) if len(iv[0]) else 0.0


def _overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Length of the intersection of two sets of disjoint sorted intervals."""
    if not len(a[0]) or not len(b[0]):
        return 0.0
    s = np.concatenate([a[0], b[0]])
    e = np.concatenate([a[1], b[1]])
    # |A ∩ B| = |A| + |B| - |A ∪ B|
    return max(0.0, _length(a) + _length(b) - _length(_union(s, e)))


def _columns(kernels: Any) -> Optional[dict]:
    """name, ts, dur_us, device, attention of every GPU activity, as arrays (None: no rows)."""
    if kernels is None:
        return None
    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "ts" in cols:
        name = cols["name"]
        if hasattr(name, "codes"):
            vocab = name.vocab
            is_comm_code = np.array([bool(v and COMMUNICATION_NAME.search(v)) for v in vocab] or [False])
            comm = is_comm_code[np.asarray(name.codes)] if len(vocab) else np.zeros(len(kernels), dtype=bool)
        else:
            comm = np.array([bool(v and COMMUNICATION_NAME.search(v)) for v in name], dtype=bool)
        dev = cols.get("device")
        return {
            "ts": np.asarray(cols["ts"], dtype=np.float64),
            "dur": np.asarray(cols["dur_us"], dtype=np.float64),
            "device": np.asarray(dev if dev is not None else np.zeros(len(kernels)), dtype=np.float64),
            "attention": np.asarray(cols["attention"], dtype=bool),
            "comm": comm,
        }
    rows = list(kernels)
    return {
        "ts": np.array([r.get("ts") or 0.0 for r in rows], dtype=np.float64),
        "dur": np.array([r.get("dur_us") or 0.0 for r in rows], dtype=np.float64),
        "device": np.array([-1 if r.get("device") is None else r["device"] for r in rows], dtype=np.float64),
        "attention": np.array([bool(r.get("attention")) for r in rows], dtype=bool),
        "comm": np.array([bool(COMMUNICATION_NAME.search(r.get("name") or "")) for r in rows], dtype=bool),
    }


def gpu_activity(report: dict) -> dict:
    """``{compute_busy_us, span_us, communication: {time_us, busy_us, overlap_with_attention_us,
    overlap_with_compute_us, kernels}, source}``: from the report's own fields when the engine
    wrote them (``source: "report"``), else computed from its kernel rows (``"kernels"``).

    Per device: the union of the intervals of non-communication activity (compute busy), of
    communication, of attention; overlaps are intersections of those unions, summed over devices."""
    comm_rep = report.get("communication")
    if report.get("compute_busy_us") is not None and isinstance(comm_rep, dict):
        return {
            "compute_busy_us": rounded(report["compute_busy_us"]),
            "span_us": rounded(report.get("span_us")),
            "communication": {
                k: comm_rep.get(k)
                for k in ("time_us", "busy_us", "overlap_with_attention_us", "overlap_with_compute_us", "kernels")
            },
            "source": "report",
        }
    c = _columns(report.get("kernels"))
    busy = comm_busy = comm_time = ov_att = ov_comp = 0.0
    span = None
    n_comm = 0
    if c is not None and len(c["ts"]):
        ok = np.isfinite(c["ts"]) & np.isfinite(c["dur"])
        first, last = np.inf, -np.inf
        for d in unique_ints(c["device"][ok]).tolist():
            m = ok & (c["device"] == d)
            ts, end = c["ts"][m], c["ts"][m] + np.maximum(c["dur"][m], 0.0)
            comm, att = c["comm"][m], c["attention"][m] & ~c["comm"][m]
            compute_iv = _union(ts[~comm], end[~comm])
            comm_iv = _union(ts[comm], end[comm])
            att_iv = _union(ts[att], end[att])
            busy += _length(compute_iv)
            comm_busy += _length(comm_iv)
            comm_time += float(np.maximum(c["dur"][m][comm], 0.0).sum())
            ov_att += _overlap(comm_iv, att_iv)
            ov_comp += _overlap(comm_iv, compute_iv)
            n_comm += int(comm.sum())
            first, last = min(first, float(ts.min())), max(last, float(end.max()))
        span = last - first if last >= first else None
    return {
        "compute_busy_us": rounded(busy),
        "span_us": rounded(span),
        "communication": {
            "time_us": rounded(comm_time),
            "busy_us": rounded(comm_busy),
            "overlap_with_attention_us": rounded(ov_att),
            "overlap_with_compute_us": rounded(ov_comp),
            "kernels": n_comm,
        },
        "source": "kernels",
    }


def rank_summary(report: dict, path: Optional[str] = None) -> dict:
    """The compact summary of one analysed trace (``status: "ok"`` report)."""
    path = path or report.get("path") or ""
    rank, world, rank_source = rank_of(report, path)
    worker, span = worker_of(path)
    act = gpu_activity(report)
    att = float(report.get("attention_time_us") or 0.0)
    busy = act["compute_busy_us"]
    phases: dict[str, dict[str, Optional[float]]] = {}
    for p in report.get("phases") or []:
        t = p.get("time_us")
        if t:
            d = phases.setdefault(p.get("direction") or "forward", {})
            d[p["phase"]] = rounded((d.get(p["phase"]) or 0.0) + float(t))
    groups = [
        {
            "group": g["group"],
            "phase": g["phase"],
            "direction": g["direction"],
            "time_us": g["time_us"],
            "calls": g["calls"],
        }
        for g in kernel_groups(report.get("kernels"))[:TOP_GROUPS]
    ]
    dev = report.get("device") or {}
    steps = report.get("steps") or []
    return {
        "schema": SUMMARY_SCHEMA,
        "status": "ok",
        "rank": rank,
        "world_size": world,
        "rank_source": rank_source,
        "worker": worker,
        "span": span,
        "file": os.path.basename(path),
        "path": path,
        "device": dev.get("label"),
        "steps": len(steps) if report.get("step") is None else 1,
        "attention_time_us": rounded(att),
        "compute_busy_us": busy,
        # the engine's share (attention busy / compute busy) when the report has it; else attention
        # time over compute busy time from the kernel rows
        "attention_share": (
            report.get("attention_share") if act["source"] == "report" else (rounded(att / busy) if busy else None)
        ),
        "gpu_busy_us": rounded(report.get("gpu_busy_us")),
        "span_us": act["span_us"],
        "forward_time_us": rounded(report.get("forward_time_us")),
        "backward_time_us": rounded(report.get("backward_time_us")),
        "fused_time_us": rounded(report.get("fused_time_us")),
        "unfused_core_time_us": rounded(report.get("unfused_core_time_us")),
        "bound_time_us": {k: rounded(v) for k, v in (report.get("bound_time_us") or {}).items()},
        "phases": phases,
        "communication_us": act["communication"]["time_us"],
        "communication": act["communication"],
        "activity_source": act["source"],
        "top_kernel_groups": groups,
        "notices": [n.get("code") for n in report.get("notices") or []],
        # analysed with --allow-partial from a truncated file: its times cover only the events
        # before the cut, so the rank looks faster than it was
        "partial": bool((report.get("trace") or {}).get("partial")),
    }


def error_summary(path: str, error: str) -> dict:
    worker, span = worker_of(path)
    return {
        "schema": SUMMARY_SCHEMA,
        "status": "error",
        "path": path,
        "file": os.path.basename(path),
        "worker": worker,
        "span": span,
        "error": error,
    }
