"""Measured hardware counters: use them instead of the model where a trace has them.

Two sources (docs/cost-model.md, *Measured counters*):

* **CUPTI counter ranges inside the trace** — ``cuda_profiler_range`` events (Kineto's CUPTI
  range profiler), collected by the reader into ``trace.counters``. In per-kernel (auto-range)
  mode each range is named after its kernel. Kineto spreads these events evenly over the
  profiling span ("the actual times do not really matter", CuptiRangeProfiler.cpp), so their
  ``ts``/``dur`` are never used as timings; only a ``gpu__time_duration`` metric is.
* **An Nsight Compute export beside the trace file** — ``ncu --csv --page raw`` output saved as
  ``<trace file name>.ncu.csv`` (``w.1700.pt.trace.json.gz.ncu.csv``) or ``<trace stem>.ncu.csv``
  (``w.1700.ncu.csv``), or any other ``*.ncu.csv`` / ``*ncu*.csv`` in the same directory whose
  header is an ncu raw page. Every candidate is tried; the best join wins.

**Join.** ncu (and CUPTI) list kernels in launch order, often a subset of the program (one step,
``--launch-skip/--launch-count``, an NVTX range) or more than the trace holds. The trace's
kernels are put in launch order (correlation id, else launch time), both sides reduced to
:func:`.ncu.short_name` (function name without namespaces, template arguments, parameters),
marker kernels dropped (``spin_kernel``: ``torch.cuda._sleep``), and the shorter sequence is
slid along the longer one. The window with the most equal names wins (ties: the window whose
durations agree best, then the earliest); it is accepted when at least ``MIN_MATCH_RATE`` of the
shorter sequence matches and at least ``MIN_MATCHES`` kernels do (or both sequences match
whole). Only positions whose names match are joined. No gaps are allowed: a kernel missing on
one side inside the window shifts everything after it.

**Values** (base units): DRAM bytes = ``dram__bytes_read.sum + dram__bytes_write.sum``; FLOPs =
tensor-pipe ops (``sm__ops_path_tensor_src_*``, counted per source type) + CUDA-core ops from
``smsp__sass_thread_inst_executed_op_*_pred_on.sum`` (2·fma + add + mul for fp32, fp16, fp64, as
Kineto's ``kineto__cuda_core_flops`` and HTA count them); DRAM %, tensor-pipe %, FMA-pipe %, SM %
(of peak) and the duration. Whatever a source lacks stays modelled, and the row says so.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from ..table import Coded
from ..trace.arrays import unique_ints
from ..trace.correlate import Links
from ..trace.records import Trace
from . import ncu as N
from .classify import BOUND_LATENCY, CAUSES, ROOF_REACHED, SHORT_KERNEL_US, decide, latency_cause, rate
from .devices import MATRIX_PEAKS, DevicePeaks
from .frame import KernelFrame

MIN_MATCH_RATE = 0.9  # of the shorter sequence
MIN_MATCHES = 3
MAX_CSV_BYTES = 512 << 20
MAX_CANDIDATES = 8  # CSV files tried per trace
MAX_RANGES_LISTED = 20000
MARKERS = frozenset({"spin_kernel"})
SOURCE_LABEL = {"ncu": "Nsight Compute", "cupti": "CUPTI"}

# metric names (ncu / CUPTI perfworks names; the first present wins)
DUR = ("gpu__time_duration.sum", "gpu__time_duration.avg")
DRAM_READ, DRAM_WRITE, DRAM_TOTAL = "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum"
DRAM_PCT = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
TENSOR_PCT = (
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
)
FMA_PCT = (
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
)
SM_PCT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
_TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_([a-z0-9]+))?\.sum$")
_SASS = re.compile(r"^smsp__sass_thread_inst_executed_op_([dfh])(fma|add|mul)_pred_on\.sum$")
_WANTED = set(DUR + DRAM_PCT + TENSOR_PCT + FMA_PCT + SM_PCT) | {DRAM_READ, DRAM_WRITE, DRAM_TOTAL}
_LAUNCH = re.compile(r"launch.*kernel|cuLaunch", re.I)


def wanted_metric(name: str) -> bool:
    return name in _WANTED or bool(_TENSOR_OPS.match(name) or _SASS.match(name))


# ---------------------------------------------------------------- values


@dataclass
class Values:
    """What one kernel's counters say, in base units (None = not measured)."""

    dur_us: Optional[float] = None
    dram_bytes: Optional[float] = None
    tensor_flops: Optional[float] = None
    core_flops: Optional[float] = None
    dram_pct: Optional[float] = None
    tensor_pct: Optional[float] = None
    fma_pct: Optional[float] = None
    sm_pct: Optional[float] = None

    @property
    def flops(self) -> Optional[float]:
        if self.tensor_flops is None and self.core_flops is None:
            return None
        return (self.tensor_flops or 0.0) + (self.core_flops or 0.0)


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _first(m: dict[str, Any], names: Iterable[str]) -> Optional[float]:
    for k in names:
        v = _num(m.get(k))
        if v is not None:
            return v
    return None


def extract(m: dict[str, Any], dur_to_us: float = 1e-3, bytes_scale: float = 1.0) -> Values:
    """Values from one kernel's metrics (``name -> number``). ``dur_to_us`` converts
    ``gpu__time_duration`` to µs (CUPTI and unconverted ncu: nanoseconds)."""
    v = Values()
    d = _first(m, DUR)
    v.dur_us = d * dur_to_us if d is not None else None
    rd, wr = _num(m.get(DRAM_READ)), _num(m.get(DRAM_WRITE))
    if rd is not None and wr is not None:
        v.dram_bytes = (rd + wr) * bytes_scale
    else:
        tot = _num(m.get(DRAM_TOTAL))
        v.dram_bytes = tot * bytes_scale if tot is not None else None
    v.dram_pct, v.tensor_pct = _first(m, DRAM_PCT), _first(m, TENSOR_PCT)
    v.fma_pct, v.sm_pct = _first(m, FMA_PCT), _first(m, SM_PCT)
    # tensor ops per source type: the plain metric if there is one, else the sum of its _dst_ variants
    plain: dict[str, float] = {}
    by_dst: dict[str, float] = {}
    core: dict[tuple[str, str], float] = {}
    for k, x in m.items():
        if not k.startswith(("sm__ops_path_tensor_src_", "smsp__sass_thread_inst_executed_op_")):
            continue
        x = _num(x)
        if x is None:
            continue
        t = _TENSOR_OPS.match(k)
        if t:
            if t.group(2) is None:
                plain[t.group(1)] = x
            else:
                by_dst[t.group(1)] = by_dst.get(t.group(1), 0.0) + x
            continue
        s = _SASS.match(k)
        if s:
            core[(s.group(1), s.group(2))] = x
    if plain or by_dst:
        v.tensor_flops = sum(plain.get(src, by_dst.get(src, 0.0)) for src in set(plain) | set(by_dst))
    if core:
        v.core_flops = sum(
            core.get((p, "fma"), 0.0) * 2 + core.get((p, "add"), 0.0) + core.get((p, "mul"), 0.0) for p in "dfh"
        )
    return v


# ---------------------------------------------------------------- sources


@dataclass
class Row:
    name: str
    short: str
    values: Values
    ident: Optional[int] = None  # ncu "ID"
    metrics: Optional[dict[str, Any]] = None  # CUPTI: the counters as recorded


@dataclass
class Source:
    kind: str  # "ncu" | "cupti"
    file: Optional[str]  # file name beside the trace (ncu), None (in the trace)
    rows: list[Row]  # in launch order, markers dropped
    group: Optional[str] = None  # "process 1234" when the export holds several processes


is_sidecar_name, sidecar_files, signature = N.is_sidecar_name, N.sidecar_files, N.sidecar_signature
_stems = N.sidecar_stems


def sources_from_sidecars(
    trace_path: str, names: Optional[list[tuple[str, int, Any]]] = None
) -> tuple[list[Source], list[str]]:
    """Parsed ncu exports beside a trace, and warnings."""
    d = os.path.dirname(os.path.abspath(trace_path))
    own = _stems(os.path.basename(trace_path))
    out, warns = [], []
    side = sidecar_files(trace_path) if names is None else names
    for name, size, _ in side[:MAX_CANDIDATES]:
        p = os.path.join(d, name)
        if name not in own and not N.sniff(p):
            continue
        if size > MAX_CSV_BYTES:
            warns.append(f"{name}: {size} bytes is more than the {MAX_CSV_BYTES >> 20} MB read for counters; skipped")
            continue
        try:
            table = N.read(p, base_units=True, max_bytes=MAX_CSV_BYTES)
        except (OSError, ValueError, UnicodeError, csv.Error) as e:
            warns.append(f"{name}: not an Nsight Compute raw page ({e})")
            continue
        out.extend(_ncu_sources(name, table))
    if len(side) > MAX_CANDIDATES:
        warns.append(f"{len(side)} ncu exports beside the trace; only the first {MAX_CANDIDATES} were tried")
    return out, warns


def _ncu_sources(name: str, table: N.NcuTable) -> list[Source]:
    dur_col = next((c for c in DUR if c in table.units), DUR[0])
    unit = table.units.get(dur_col, "")
    dur_to_us = 1e6 if unit == "second" else 1e-3  # base-unit seconds, else ncu's default ns
    procs: dict[Any, list[Row]] = {}
    for r in table.rows:
        kname = str(r.get("Kernel Name") or "")
        short = N.short_name(kname)
        if not kname or short in MARKERS:
            continue
        metrics = {k: v for k, v in r.items() if k not in N.IDENTITY_COLUMNS}
        rid = r.get("ID")
        ident = rid if isinstance(rid, int) else None
        procs.setdefault(r.get("Process ID"), []).append(Row(kname, short, extract(metrics, dur_to_us), ident))
    if len(procs) == 1:
        return [Source("ncu", name, next(iter(procs.values())))]
    return [Source("ncu", name, rows, group=f"process {pid}") for pid, rows in procs.items()]


def cupti_source(trace: Trace) -> Optional[Source]:
    rows = []
    for c in trace.counters:
        nm = str(c.get("name") or "")
        m = c.get("metrics") or {}
        rows.append(Row(nm, N.short_name(nm), extract(m, 1e-3), metrics=m))
    rows = [r for r in rows if r.short not in MARKERS]
    return Source("cupti", None, rows) if rows else None


# ---------------------------------------------------------------- join


@dataclass
class Alignment:
    offset: int  # measured row j <-> trace kernel j + offset (in launch order)
    matches: int
    lo: int  # overlapping measured rows: [lo, hi)
    hi: int
    pairs: list[tuple[int, int]]  # (launch-order position, row index) whose names match
    ties: int  # other windows with as many matches
    rate: float  # matches / length of the shorter sequence


def align(
    trace_names: list[str],
    rows: list[str],
    trace_dur: Optional[list[float]] = None,
    row_dur: Optional[list[Optional[float]]] = None,
) -> Optional[Alignment]:
    """Best window of ``rows`` (short names) against ``trace_names`` (short names), or None."""
    n, m = len(trace_names), len(rows)
    if not n or not m:
        return None
    vocab: dict[str, int] = {}
    a = np.fromiter((vocab.setdefault(x, len(vocab)) for x in trace_names), dtype=np.int64, count=n)
    b = np.fromiter((vocab.get(x, -1) for x in rows), dtype=np.int64, count=m)
    both = unique_ints(b[b >= 0])
    if not len(both):
        return None
    cnt_a = np.bincount(a, minlength=len(vocab))
    cnt_b = np.bincount(b[b >= 0], minlength=len(vocab))
    # anchors: the names shared by both sides with the fewest (trace x measured) pairings
    cost = cnt_a[both] * cnt_b[both]
    offsets = []
    budget = 0
    for code in both[np.argsort(cost, kind="stable")][:16].tolist():
        pa = np.flatnonzero(a == code)
        pb = np.flatnonzero(b == code)
        if budget and budget + len(pa) * len(pb) > 200_000:
            break
        budget += len(pa) * len(pb)
        offsets.append((pa[:, None] - pb[None, :]).ravel())
    cand = unique_ints(np.concatenate(offsets))
    best = None
    scored = []
    for o in cand.tolist():
        lo, hi = max(0, -o), min(m, n - o)
        if hi <= lo:
            continue
        k = int(np.count_nonzero(a[lo + o : hi + o] == b[lo:hi]))
        scored.append((k, o))
        if best is None or k > best:
            best = k
    if not best:
        return None
    top = [o for k, o in scored if k == best]
    chosen = top[0]
    if len(top) > 1 and trace_dur is not None and row_dur is not None:

        def spread(o: int) -> float:
            lo, hi = max(0, -o), min(m, n - o)
            eq = np.flatnonzero(a[lo + o : hi + o] == b[lo:hi]) + lo
            ds = [
                abs(math.log(trace_dur[j + o] / row_dur[j]))
                for j in eq.tolist()
                if trace_dur[j + o] and row_dur[j] and trace_dur[j + o] > 0 and row_dur[j] > 0
            ]
            return float(np.median(ds)) if ds else math.inf

        chosen = min(top, key=lambda o: (spread(o), top.index(o)))
    lo, hi = max(0, -chosen), min(m, n - chosen)
    eq = np.flatnonzero(a[lo + chosen : hi + chosen] == b[lo:hi]) + lo
    pairs = [(j + chosen, j) for j in eq.tolist()]
    return Alignment(chosen, best, lo, hi, pairs, len(top) - 1, best / min(n, m))


def accepted(al: Optional[Alignment], n: int, m: int) -> bool:
    if al is None:
        return False
    whole = al.matches == n == m
    return al.rate >= MIN_MATCH_RATE and (al.matches >= MIN_MATCHES or whole)


# ---------------------------------------------------------------- into the report


@dataclass
class Result:
    block: Optional[dict[str, Any]] = None  # report["measurements"]
    column: Optional[list[Any]] = None  # per GPU activity: the "measured" dict or None
    warnings: list[str] = field(default_factory=list)
    notices: list[dict[str, str]] = field(default_factory=list)


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _clean(x: Optional[float], nd: int = 2) -> Optional[float]:
    if x is None or not math.isfinite(x):
        return None
    if nd == 0:
        return int(round(x)) if abs(x) < 2**53 else float(f"{x:.6g}")
    return round(x, nd)


def measured_json(src: Source, v: Values, row: Row, used: list[str]) -> dict[str, Any]:
    return {
        "source": src.kind,
        "file": src.file,
        "dram_bytes": _clean(v.dram_bytes, 0),
        "flops": _clean(v.flops, 0),
        "dram_pct": _clean(v.dram_pct),
        "tensor_pct": _clean(v.tensor_pct),
        "fma_pct": _clean(v.fma_pct),
        "sm_pct": _clean(v.sm_pct),
        "dur_us": _clean(v.dur_us, 3),
        "tensor_flops": _clean(v.tensor_flops, 0),
        "core_flops": _clean(v.core_flops, 0),
        "row": row.ident,
        "replaces": used,
    }


def launch_order(trace: Trace, launch_t: np.ndarray) -> np.ndarray:
    """Indices of the trace's kernels (GPU activities of kind kernel) in launch order."""
    from ..trace.records import KERNEL

    G = trace.gpu
    k = np.flatnonzero(G["kind"] == KERNEL)
    if not len(k):
        return k
    corr = G["corr"][k]
    if (corr >= 0).all() and len(unique_ints(corr)) == len(corr):
        return k[np.argsort(corr, kind="stable")]
    return k[np.lexsort((G["ts_ns"][k], launch_t[k]))]


def _join(short: list[str], durs: list[float], src: Source) -> tuple[Optional[Alignment], bool]:
    al = align(short, [r.short for r in src.rows], durs, [r.values.dur_us for r in src.rows])
    return al, accepted(al, len(short), len(src.rows))


@dataclass
class Joined:
    """The counters found for a trace and how they line up with its kernels, before they touch
    the frame: the join does not depend on the roofs, the overlay does (and the roofs may be
    raised by what the counters measured: classify.raise_roofs)."""

    res: Result
    src: Optional[Source] = None
    al: Optional[Alignment] = None
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tried: list[dict[str, Any]] = field(default_factory=list)

    def pairs(self) -> list[tuple[int, Row]]:
        """(kernel index, counter row) of every joined kernel."""
        if self.src is None or self.al is None:
            return []
        return [(int(self.order[pos]), self.src.rows[j]) for pos, j in self.al.pairs]

    def dram_rates(self, n: int) -> np.ndarray:
        """Measured DRAM bytes per second of each joined kernel over the counters' own duration
        (NaN where either is missing): the exact evidence that may raise the DRAM roof."""
        out = np.full(n, np.nan)
        for k, row in self.pairs():
            v = row.values
            if v.dram_bytes is not None and v.dur_us is not None and v.dur_us > 0:
                out[k] = v.dram_bytes / (v.dur_us * 1e-6)
        return out


def apply(
    trace: Trace,
    links: Links,
    frame: KernelFrame,
    launch_t: np.ndarray,
    k_step: np.ndarray,
    step_names: list[str],
    devices: dict[int, DevicePeaks],
    ncu_files: Optional[Sequence[tuple[str, int, int]]] = None,
) -> tuple[KernelFrame, Result]:
    """Find counters for the trace, join them, and return a new frame whose rows carry the
    measured numbers where counters measure them, with what was joined. Never raises: a problem
    with the counters returns the model's frame untouched and says so in ``warnings``.
    ``ncu_files``: the exports beside the trace as trace/sidecars.py found them for this analysis
    (listed here when not given)."""
    return overlay(trace, frame, join(trace, links, frame, launch_t, ncu_files), k_step, step_names, devices)


def join(
    trace: Trace,
    links: Links,
    frame: KernelFrame,
    launch_t: np.ndarray,
    ncu_files: Optional[Sequence[tuple[str, int, int]]] = None,
) -> Joined:
    """The counters of a trace (CUPTI ranges in it, ncu exports beside it: ``ncu_files`` as
    trace/sidecars.py found them, listed here when not given) joined to its kernels. Never
    raises: a problem with the counters joins nothing and says so in ``warnings``."""
    try:
        return _join_all(trace, links, frame, launch_t, ncu_files)
    except Exception as e:  # noqa: BLE001 - a counter file must never cost the report
        return Joined(Result(warnings=[f"hardware counters ignored: {type(e).__name__}: {e}"]))


def overlay(
    trace: Trace,
    frame: KernelFrame,
    joined: Joined,
    k_step: np.ndarray,
    step_names: list[str],
    devices: dict[int, DevicePeaks],
) -> tuple[KernelFrame, Result]:
    """A new frame with the joined counters in place of the model, and what was joined."""
    try:
        return _overlay_all(trace, frame, joined, k_step, step_names, devices)
    except Exception as e:  # noqa: BLE001 - a counter file must never cost the report
        return frame, Result(warnings=[f"hardware counters ignored: {type(e).__name__}: {e}"])


def _join_all(
    trace: Trace,
    links: Links,
    frame: KernelFrame,
    launch_t: np.ndarray,
    ncu_files: Optional[Sequence[tuple[str, int, int]]] = None,
) -> Joined:
    res = Result()
    cupti = cupti_source(trace) if trace.counters else None
    if ncu_files is not None:
        side = list(ncu_files)
    else:
        side = sidecar_files(trace.path) if trace.path else []
    if cupti is None and not side:
        return Joined(res)
    sources = [cupti] if cupti is not None else []
    if side:
        ncu_sources, w = sources_from_sidecars(trace.path, side)
        sources += ncu_sources
        res.warnings += w
    if not sources:
        return Joined(res)
    dur = frame.dur_us
    order = launch_order(trace, launch_t)
    if not len(order):
        if cupti is not None:
            res.block, notice = _ranges_block(trace, links, cupti)
            res.notices.append(notice)
        elif sources:
            res.warnings.append("an ncu export lies beside the trace, but the trace has no GPU kernels to join it to")
        return Joined(res)
    names = trace.strings
    gname = trace.gpu["name"]
    short_of: dict[int, str] = {}
    short = []
    for i in gname[order].tolist():
        s = short_of.get(i)
        if s is None:
            s = short_of[i] = N.short_name(names[i])
        short.append(s)
    keep = [j for j, s in enumerate(short) if s not in MARKERS]
    order = order[keep]
    short = [short[j] for j in keep]
    durs = dur[order].tolist()
    best: Optional[tuple[Source, Alignment]] = None
    tried: list[dict[str, Any]] = []
    for src in sources:
        al, ok = _join(short, durs, src)
        label = src.file or "the trace's CUPTI ranges"
        tried.append(
            {
                "source": src.kind,
                "file": src.file,
                "group": src.group,
                "rows": len(src.rows),
                "matches": al.matches if al else 0,
                "match_rate": round(al.rate, 4) if al else 0.0,
                "accepted": ok,
            }
        )
        if ok and al is not None and (best is None or al.matches > best[1].matches):
            best = (src, al)
        if not ok and src.kind == "cupti" or not ok and src.file in _stems(os.path.basename(trace.path)):
            why = (
                f"{al.matches} of {min(len(short), len(src.rows))} kernels match in the best window"
                if al
                else "no kernel name in common"
            )
            res.warnings.append(
                f"counters in {label} were not used: they do not line up with the trace's "
                f"kernels ({why}; at least {MIN_MATCH_RATE:.0%} and {MIN_MATCHES} are needed)"
            )
    if best is None:
        if sources and not any(t["accepted"] for t in tried) and not res.warnings:
            files = ", ".join(sorted({str(t["file"]) for t in tried if t["file"]}))
            res.warnings.append(
                f"ncu exports beside the trace ({files}) do not line up with its kernels; "
                "not used (another program or run?)"
            )
        if cupti is not None:
            res.block, notice = _ranges_block(trace, links, cupti, joined=False)
        else:
            res.block = {
                "source": None,
                "file": None,
                "kernels_joined": 0,
                "kernels_total": int(len(order)),
                "match_rate": None,
                "window": None,
                "candidates": tried,
                "notes": [],
            }
        return Joined(res, order=order, tried=tried)
    return Joined(res, best[0], best[1], order, tried)


def _overlay_all(
    trace: Trace,
    frame: KernelFrame,
    joined: Joined,
    k_step: np.ndarray,
    step_names: list[str],
    devices: dict[int, DevicePeaks],
) -> tuple[KernelFrame, Result]:
    res = joined.res
    if joined.src is None or joined.al is None:
        return frame, res
    src, al, order, tried = joined.src, joined.al, joined.order, joined.tried
    n = len(frame)
    col: list[Any] = [None] * n
    step_set = set()
    label = SOURCE_LABEL[src.kind]
    overlays = []
    for k, row in joined.pairs():
        ov = _overlay(k, row.values, label, frame, devices.get(int(trace.gpu["device"][k])))
        overlays.append(ov)
        col[k] = measured_json(src, row.values, row, ov.used)
        if k_step[k] >= 0:
            step_set.add(int(k_step[k]))
    first, last = int(order[al.lo + al.offset]), int(order[al.hi - 1 + al.offset])
    notes = []
    if al.ties:
        notes.append(
            f"{al.ties + 1} alignments match equally well; joined to the one whose durations agree best"
            + (" (" + ", ".join(step_names[s] for s in sorted(step_set)) + ")" if step_set else "")
        )
    missing = _missing(src)
    if missing:
        notes.append("not in these counters, so still modelled: " + ", ".join(missing))
    res.block = {
        "source": src.kind,
        "file": src.file,
        "group": src.group,
        "kernels_joined": len(overlays),
        "kernels_total": int(len(order)),
        "rows": len(src.rows),
        "match_rate": round(al.rate, 4),
        "window": {
            "offset": al.offset,
            "first_kernel_id": first,
            "last_kernel_id": last,
            "first_ts": float(trace.gpu["ts"][first]),
            "last_ts": float(trace.gpu["ts"][last]),
            "kernels": al.hi - al.lo,
            "steps": [step_names[s] for s in sorted(step_set)],
            "first_row": src.rows[al.lo].ident,
            "last_row": src.rows[al.hi - 1].ident,
            "equal_windows": al.ties + 1,
        },
        "candidates": tried,
        "notes": notes,
    }
    res.column = col
    return _overlaid(frame, overlays), res


@dataclass
class Overlay:
    """What the counters measure of one kernel (None: not measured, the model stands)."""

    k: int
    text: str  # "measured (Nsight Compute): DRAM 81%, ..."
    used: list[str]  # the report fields the counters replace
    dram_bytes: Optional[float] = None
    memory_util: Optional[float] = None
    compute_util: Optional[float] = None


def _overlay(k: int, v: Values, label: str, frame: KernelFrame, dev: Optional[DevicePeaks]) -> Overlay:
    """What kernel k's counters measure, against the roofs of its frame row."""
    used = []
    d = float(frame.dur_us[k])
    sec = d * 1e-6
    bwk = float(frame.bandwidth[k])
    pk = frame.peak[k]
    if v.dram_bytes is not None:
        used.append("dram_bytes")
    m_mem = None
    if v.dram_pct is not None:
        m_mem = v.dram_pct / 100.0
    elif v.dram_bytes is not None and sec > 0 and bwk == bwk and bwk > 0:
        m_mem = v.dram_bytes / sec / bwk
    if m_mem is not None:
        used.append("memory_util")
    m_cu, how = None, None
    pipes = [x for x in (v.tensor_pct, v.fma_pct) if x is not None]
    if pipes:
        m_cu, how = max(pipes) / 100.0, "pipes"
    elif sec > 0 and dev is not None:
        m_cu = _compute_from_counts(v, sec, pk, float(frame.peak_flops[k]), dev.flops)
        how = "flops" if m_cu is not None else None
    if m_cu is not None:
        used.append("compute_util")
    parts = []
    if v.dram_pct is not None or v.tensor_pct is not None or v.fma_pct is not None:
        parts.append(f"DRAM {_pct(v.dram_pct)}, tensor pipe {_pct(v.tensor_pct)}, FMA pipe {_pct(v.fma_pct)}")
    rates = []
    if how == "flops" and m_cu is not None and v.flops is not None:
        over = ": above the roof, shown at 100%" if m_cu > 1.0 else ""
        rates.append(f"{rate(v.flops / sec, 'FLOP/s')} ({100 * m_cu:.0f}% of the {pk + ' ' if pk else ''}peak{over})")
    elif v.flops is not None and sec > 0 and not pipes:
        rates.append(f"{rate(v.flops / sec, 'FLOP/s')} on CUDA cores (no tensor-pipe counters: not used)")
    if m_mem is not None and v.dram_pct is None and v.dram_bytes is not None:
        over = ": above the roof, shown at 100%" if m_mem > 1.0 else ""
        rates.append(f"{rate(v.dram_bytes / sec, 'B/s')} of DRAM traffic ({100 * m_mem:.0f}% of bandwidth{over})")
    if rates:
        parts.append(", ".join(rates))
    text = f"measured ({label}): " + "; ".join(parts) if parts else f"measured ({label})"
    c = m_cu if m_cu is not None else float(frame.compute_util[k])
    m = m_mem if m_mem is not None else float(frame.memory_util[k])
    if (m_mem is not None or m_cu is not None) and c == c and m == m:
        used.append("bound")
    return Overlay(k, text, used, v.dram_bytes, m_mem, m_cu)


def _overlaid(frame: KernelFrame, overlays: list[Overlay]) -> KernelFrame:
    """A new frame: the measured numbers in place of the model's, the bound decided again by
    the classifier's rule on them, and reasons citing the counters."""
    if not overlays:
        return frame
    ks = np.array([o.k for o in overlays], dtype=np.int64)

    def opt(vals: list[Optional[float]]) -> np.ndarray:
        return np.array([np.nan if x is None else x for x in vals], dtype=np.float64)

    m_dram = opt([o.dram_bytes for o in overlays])
    # utilisations are fractions of a roof: counter noise or a FLOP count over the roof stays at 1
    m_mem = np.minimum(opt([o.memory_util for o in overlays]), 1.0)
    m_cu = np.minimum(opt([o.compute_util for o in overlays]), 1.0)
    dur = frame.dur_us[ks]
    sec = dur * 1e-6
    dram, aby = frame.dram_bytes.copy(), frame.achieved_bytes.copy()
    mu, cu = frame.memory_util.copy(), frame.compute_util.copy()
    has_dram = ~np.isnan(m_dram)
    dram[ks[has_dram]] = m_dram[has_dram]
    timed = has_dram & (sec > 0)
    aby[ks[timed]] = m_dram[timed] / sec[timed]
    mu[ks[~np.isnan(m_mem)]] = m_mem[~np.isnan(m_mem)]
    cu[ks[~np.isnan(m_cu)]] = m_cu[~np.isnan(m_cu)]
    c, m = cu[ks], mu[ks]
    any_measured = ~np.isnan(m_mem) | ~np.isnan(m_cu)
    decided = any_measured & ~np.isnan(c) & ~np.isnan(m)
    measured_reached = np.fmax(m_mem, m_cu) >= ROOF_REACHED
    verdict = decide(c, m, dur < SHORT_KERNEL_US, measured_reached)
    bound = frame.bound.copy()
    bound[ks[decided]] = verdict[decided]
    cause = latency_cause(frame, bound)
    estimated = frame.estimated.copy()
    both = ~np.isnan(m_mem) & ~np.isnan(m_cu)
    estimated[ks[decided & both]] = False
    vocab = list(frame.reason.vocab)
    index = {t: i for i, t in enumerate(vocab)}
    codes = frame.reason.codes.copy()
    for j, o in enumerate(overlays):
        if not any_measured[j]:
            # nothing the bound rests on was measured: the model's verdict stands
            text = f"{frame.reason[o.k]} [{o.text}]"
        else:
            modelled = [s for s, ok in (("memory", m_mem[j] == m_mem[j]), ("compute", m_cu[j] == m_cu[j])) if not ok]
            text = o.text + _verdict(
                j, o.k, frame, verdict, decided, modelled, float(c[j]), float(m[j]), int(cause[o.k])
            )
        codes[o.k] = index.setdefault(text, len(index))
    return replace(
        frame,
        dram_bytes=dram,
        achieved_bytes=aby,
        memory_util=mu,
        compute_util=cu,
        bound=bound,
        cause=cause,
        estimated=estimated,
        reason=Coded(codes, list(index)),
    )


def _verdict(
    j: int,
    k: int,
    frame: KernelFrame,
    verdict: np.ndarray,
    decided: np.ndarray,
    modelled: list[str],
    c: float,
    m: float,
    cause: int,
) -> str:
    if not decided[j]:
        return f"; {' and '.join(modelled)} unknown, so the bound is unknown"
    out = ""
    if verdict[j] == BOUND_LATENCY:
        why = []
        d, nsm, nblocks = float(frame.dur_us[k]), int(frame.num_sms[k]), int(frame.blocks[k])
        if d < SHORT_KERNEL_US:
            why.append(f"only {d:.1f} µs")
        if nsm and 0 < nblocks < nsm:
            why.append(f"grid of {nblocks} blocks < {nsm} SMs")
        if cause >= 0:
            why.insert(0, f"latency ({CAUSES[cause]})")
        out = ": neither roof reached" + (f" ({'; '.join(why)})" if why else "")
    if modelled:
        out += f" ({modelled[0]} modelled: {100 * (m if modelled[0] == 'memory' else c):.0f}%)"
    return out


def _missing(src: Source) -> list[str]:
    have = {
        f
        for f in ("dram_pct", "dram_bytes", "tensor_pct", "fma_pct", "tensor_flops", "core_flops", "dur_us")
        if any(getattr(r.values, f) is not None for r in src.rows)
    }
    out = []
    if "dram_pct" not in have and "dram_bytes" not in have:
        out.append("DRAM traffic")
    if not ({"tensor_pct", "fma_pct", "tensor_flops"} & have):
        out.append("tensor-pipe work" if "core_flops" in have else "FLOPs and pipe utilisation")
    return out


def _compute_from_counts(
    v: Values, sec: float, pk: Optional[str], pf: float, peaks: dict[str, float]
) -> Optional[float]:
    """Compute utilisation from FLOP counts when no pipe % was measured: tensor ops over the
    kernel's matrix roof, CUDA-core ops over the fp32 vector roof. CUDA-core counts alone say
    nothing about a kernel whose roof is a matrix engine (its tensor work is not counted)."""
    matrix = pk in MATRIX_PEAKS
    if v.tensor_flops is None and (matrix or v.core_flops is None):
        return None
    util = 0.0
    if v.tensor_flops:
        p_t = pf if matrix and pf == pf else peaks.get("bf16") or peaks.get("fp16")
        if not p_t:
            return None
        util += v.tensor_flops / sec / p_t
    if v.core_flops:
        p_v = peaks.get("fp32")
        if not p_v:
            return None
        util += v.core_flops / sec / p_v
    return util


def _ranges_block(
    trace: Trace, links: Optional[Links], src: Source, joined: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    """A trace with counter ranges but no kernel timeline (Kineto's CUPTI range-profiler mode
    cannot record kernels at the same time): the ranges themselves are the measured kernels.
    Range i is the i-th kernel launch on the CPU side when the counts agree (as HTA joins them),
    which names the op that launched it."""
    from ..trace.records import LAUNCH

    R = trace.ranges
    ops: list[Optional[str]] = [None] * len(src.rows)
    launches = np.zeros(0, dtype=np.int64)
    if len(R["kind"]):
        lk = np.flatnonzero(R["kind"] == LAUNCH)
        names = trace.strings
        is_k = (
            np.array([bool(_LAUNCH.search(names[i])) for i in R["name"][lk].tolist()], dtype=bool)
            if len(lk)
            else np.zeros(0, dtype=bool)
        )
        launches = lk[is_k]
        launches = launches[np.argsort(R["ts_ns"][launches], kind="stable")]
    by_launch = len(launches) == len(src.rows) and len(launches) > 0
    if by_launch:
        for i, r in enumerate(launches.tolist()):
            op = int(links.op_ancestor[r]) if links is not None else -1
            ops[i] = trace.strings[R["name"][op]] if op >= 0 else None
    rows = []
    tot_f, tot_b = 0.0, 0.0
    any_f = any_b = False
    for i, r in enumerate(src.rows[:MAX_RANGES_LISTED]):
        v = r.values
        rows.append(
            {"index": i, "name": r.name, "op": ops[i], "measured": measured_json(src, v, r, []), "metrics": r.metrics}
        )
        if v.flops is not None:
            tot_f += v.flops
            any_f = True
        if v.dram_bytes is not None:
            tot_b += v.dram_bytes
            any_b = True
    missing = _missing(src)
    notes = [
        "CUPTI range-profiler mode: the trace holds counter ranges but no kernel timeline, so the ranges "
        "are listed here as measured kernels; their ts/dur are placeholders Kineto spreads over the "
        "profiling span, not timings"
        if joined
        else "the trace's CUPTI ranges did not line up with its kernels; listed as recorded"
    ]
    if by_launch:
        notes.append(
            "range i was launched by the i-th kernel launch on the CPU side (counts agree): "
            "`op` is the op around that launch"
        )
    elif len(launches):
        notes.append(f"{len(launches)} kernel launches vs {len(src.rows)} ranges: ops not assigned")
    if missing:
        notes.append("not in these counters: " + ", ".join(missing))
    block = {
        "source": "cupti",
        "file": None,
        "group": None,
        "kernels_joined": 0,
        "kernels_total": int(np.count_nonzero(trace.gpu["kind"] == 0)),
        "rows": len(src.rows),
        "match_rate": None,
        "window": None,
        "candidates": [],
        "notes": notes,
        "ranges": rows,
        "ranges_total": {
            "count": len(src.rows),
            "flops": _clean(tot_f, 0) if any_f else None,
            "dram_bytes": _clean(tot_b, 0) if any_b else None,
        },
    }
    notice = {
        "code": "counters_only",
        "message": f"{len(src.rows)} CUPTI counter ranges and no kernel timeline (range-profiler mode)",
        "fix": "the measured counters are listed under measurements.ranges; for times and bounds, profile "
        "again with ProfilerActivity.CUDA (the range profiler cannot record kernels at the same time)",
    }
    return block, notice
