"""The kernel frame: one row per GPU activity, held as numpy columns, for the roofline steps.

A trace has up to hundreds of thousands of GPU activities, and every step of the roofline works
on all of them at once. The frame is the one place their numbers live between those steps:

1. :func:`build` fills it from the cost attribution (FLOPs, bytes, dtype) and the device table
   (which roof applies, its value, bandwidth, SMs, L2) — the inputs;
2. :func:`.classify.classify` places each row on the roofline (rates, utilisations) and says
   what bounds it (bound, latency cause, reason);
3. :func:`.measured.apply` overlays hardware counters where a trace has them.

Each step returns a new frame (``dataclasses.replace``); none mutates another's arrays. The
report turns the frame into kernel-table columns and aggregates it; nothing else classifies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..table import Coded, group_rows
from ..trace.arrays import unique_ints
from ..trace.busy import communication_mask
from ..trace.correlate import Links
from ..trace.records import KERNEL, MEMCPY, Trace
from . import cost as C, devices as D, occupancy as O
from .attribute import Attribution
from .classify import (
    BOUND_UNKNOWN,
    M_HELPER,
    M_INCOMPLETE,
    M_NO_FORMULA,
    M_NO_OP,
    M_NO_SHAPES,
    M_OP_NO_SHAPES,
    peak_key,
)
from .cost import NONE

F64 = np.ndarray  # float64 column, NaN = unknown
# Where a kernel's occupancy comes from: Kineto's "est. achieved occupancy %" (a recorded 0 means
# Kineto did not compute it, never 0 %), or the CUDA occupancy calculation from the launch record.
OCCUPANCY_SOURCES = O.SOURCES


@dataclass(frozen=True)
class KernelFrame:
    """Columns of equal length, one row per GPU activity (the trace's ``gpu`` order)."""

    # -- inputs: the activity, its cost and its roofs ------------------------------------------
    kind: np.ndarray  # int64 GPU activity kind (trace.records KERNEL, MEMCPY, MEMSET)
    device: np.ndarray  # int64 device id
    dur_us: F64
    flops: F64  # this activity's share of its cost op's FLOPs
    bytes: F64  # ... of its minimum bytes
    reads: F64  # the part of ``bytes`` that is read
    dram_bytes: F64  # estimated (or measured) DRAM traffic
    l2_hint: Coded  # why some reads were likely L2 hits (cost.l2_reuse), or None
    dtype: Coded  # input dtype of the cost op
    peak: Coded  # which FLOP roof applies (None: data movement)
    peak_flops: F64  # its value, FLOP/s
    bandwidth: F64  # device memory bandwidth, B/s (NaN: unknown GPU)
    num_sms: np.ndarray  # int64, 0 = unknown
    l2_bytes: F64
    blocks: np.ndarray  # int64 blocks in the grid (0: not recorded, copies and fills)
    occupancy: F64  # occupancy %, NaN when neither recorded nor computable
    occupancy_source: np.ndarray  # int8 index into OCCUPANCY_SOURCES, -1 with no occupancy
    waves: F64  # blocks / (SMs x resident blocks per SM), NaN when unknown
    host_copy: np.ndarray  # bool: memcpy over the host link
    communication: np.ndarray  # bool: a collective-communication kernel (trace.busy.COMMUNICATION)
    estimated: np.ndarray  # bool: FLOPs per-element estimates, or a split cost
    upper_bound: np.ndarray  # bool: FLOPs/bytes are a dense upper bound (unknown sparsity)
    # bool: FLOPs from shapes (no per-element estimate, no upper bound), and this kernel holds all of
    # its op's FLOPs (the op's only matrix kernel): exact evidence that may raise a roof
    flops_exact: np.ndarray
    l2_reuse_bytes: F64  # bytes of its reads likely served from L2 (cost.l2_reuse), 0 where none
    missing: np.ndarray  # int8 index into classify.MISSING: why FLOPs/bytes are unknown, -1 when known
    # -- placed on the roofline and classified (classify.classify) ------------------------------
    achieved_flops: F64
    achieved_bytes: F64
    intensity: F64
    compute_util: F64
    memory_util: F64
    bound: np.ndarray  # int8 index into classify.BOUNDS
    cause: np.ndarray  # int8 index into classify.CAUSES, -1 where bound is not latency
    note: np.ndarray  # int8 bit flags (classify.N_*): roof raised, L2 traffic, capped estimate
    reason: Coded  # the evidence in words
    # a bytes-model miss (classify.N_BYTES_HIGH): how many times the roof the estimated DRAM
    # traffic needs, and the memory utilisation it shows at least (the estimate less a whole L2);
    # NaN elsewhere
    bytes_over_roof: F64
    memory_floor: F64

    def __len__(self) -> int:
        return len(self.dur_us)


def _nan(n: int) -> F64:
    return np.full(n, np.nan)


# Write-back caching, fitted to Nsight Compute's DRAM bytes on the H200 (validation/raw/2026-11-30,
# 60 MiB L2): at a kernel's end about 27 MB of its output is still dirty in L2 when it wrote more
# than that (outputs of 34 MB to 1 GB, with reads of 0 to 67 MB), less when it streamed more reads
# than writes (a GEMM reading 1.1 GB and writing 34 MB left 1 MB) — the resident lines are the
# kernel's most recent traffic, writes in proportion to their share of it.
DIRTY_L2_SHARE = 0.43  # of the L2: the most of a kernel's output still in cache when it ends
RESIDENT_L2_SHARE = 0.86  # of the L2: the most recent traffic still resident when it ends


def dram_traffic(nbytes: F64, reads: F64, l2: F64) -> F64:
    """Estimated DRAM bytes of each kernel: everything read, and what is written beyond what
    the last-level cache still holds when the kernel ends (a write-back cache keeps the last
    writes until later): at most DIRTY_L2_SHARE of the L2, and of the RESIDENT_L2_SHARE of it
    that holds the kernel's latest traffic only the writes' share. Checked against Nsight
    Compute's DRAM bytes in validation/ (docs/cost-model.md, *DRAM traffic*)."""
    rd = np.where(np.isnan(reads), nbytes, reads)
    wr = np.maximum(nbytes - rd, 0.0)
    moved = np.maximum(rd + wr, 1.0)
    kept = np.minimum(DIRTY_L2_SHARE * l2, RESIDENT_L2_SHARE * l2 * wr / moved)
    out: F64 = rd + np.maximum(wr - kept, 0.0)
    return out


def _cost_kinds(attr: Attribution) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Per activity, a code into a list of the distinct (dtype, engine, TF32 flag, estimated,
    upper bound) of its cost op: what the roof and the flags depend on, read once per owner."""
    own_u, own_inv = unique_ints(attr.owner, return_inverse=True)
    kinds: dict[tuple[Any, ...], int] = {}
    u_kind = np.array(
        [
            kinds.setdefault(
                (
                    c.dtype,
                    c.engine,
                    c.fp32_on_tensor_cores,
                    bool(c.flops_estimated),
                    bool(getattr(c, "upper_bound", False)),
                )
                if c is not None
                else (None, NONE, False, False, False),
                len(kinds),
            )
            for c in map(attr.costs.get, own_u.tolist())
        ],
        dtype=np.int64,
    )
    return (u_kind[own_inv.reshape(-1)] if len(attr.owner) else np.zeros(0, np.int64)), list(kinds)


def _roofs(
    trace: Trace, devices: dict[int, D.DevicePeaks], kind_code: np.ndarray, kinds: list[tuple[Any, ...]], resolve: Any
) -> tuple[Coded, F64, F64, np.ndarray, F64]:
    """Per activity: peak key, peak FLOP/s, bandwidth, SMs, L2 bytes, looked up once per distinct
    (cost kind, kernel name, device) and spread to the activities."""
    G = trace.gpu
    n = len(G["kind"])
    names = trace.strings
    first, code = group_rows(kind_code, G["name"], G["device"])
    combos = [(*kinds[int(kind_code[i])][:3], int(G["name"][i]), int(G["device"][i])) for i in first.tolist()]
    keys: list[Optional[str]] = []
    vals, bws, sms, l2s = [], [], [], []
    for dtype, engine, tc32, nid, dev in combos:
        d = devices.get(dev) or resolve(dev)
        devices.setdefault(dev, d)
        pk, _ = peak_key(dtype, engine, names[nid], d.flops, tc32)
        keys.append(pk)
        vals.append(d.flops.get(pk, np.nan) if pk else np.nan)
        bws.append(d.memory_bandwidth if d.memory_bandwidth else np.nan)
        sms.append(d.num_sms or 0)
        l2s.append(float(d.l2_bytes or 0))

    def col(v: list[Any], dtype: Any) -> np.ndarray:
        return np.asarray(v, dtype=dtype)[code] if n else np.zeros(0, dtype)

    # one vocabulary entry per distinct key (the combos repeat keys)
    vocab: dict[Optional[str], int] = {}
    kc = np.asarray([vocab.setdefault(k, len(vocab)) for k in keys], dtype=np.int32)
    peak = Coded(kc[code] if n else np.zeros(0, np.int32), list(vocab) or [None])
    return peak, col(vals, float), col(bws, float), col(sms, np.int64), col(l2s, float)


def _missing(trace: Trace, attr: Attribution, launch_op: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Why each kernel's cost is unknown (index into MISSING), -1 where it is known or the
    activity is a copy or fill (they carry their own byte counts)."""
    unknown = (kind == KERNEL) & (np.isnan(attr.flops) | np.isnan(attr.bytes))
    out = np.full(len(kind), -1, dtype=np.int8)
    if not unknown.any():
        return out
    sig = trace.ranges["sig"]
    has_op = launch_op >= 0
    op_sig = np.where(has_op, sig[np.maximum(launch_op, 0)] if len(sig) else -1, -1)
    no_shapes = M_OP_NO_SHAPES if (sig >= 0).any() else M_NO_SHAPES
    helper = attr.undescribed if len(attr.undescribed) == len(kind) else np.zeros(len(kind), bool)
    out[unknown] = np.select(
        [helper[unknown], attr.owner[unknown] >= 0, ~has_op[unknown], op_sig[unknown] < 0],
        [M_HELPER, M_INCOMPLETE, M_NO_OP, no_shapes],
        M_NO_FORMULA,
    )
    return out


def build(
    trace: Trace, links: Links, attr: Attribution, devices: dict[int, D.DevicePeaks], resolve: Any
) -> KernelFrame:
    """The frame's inputs from the cost attribution and the device table. ``devices`` maps a
    device id to its :class:`.devices.DevicePeaks` (devices met only here are added through
    ``resolve(device_id)``). The classified columns are left unknown: see classify.classify."""
    G = trace.gpu
    n = len(G["kind"])
    names = trace.strings
    kind = G["kind"].astype(np.int64)
    dur = G["dur"].astype(np.float64)
    kind_code, kinds = _cost_kinds(attr)
    peak, peak_f, bw, sms, l2 = _roofs(trace, devices, kind_code, kinds, resolve)
    is_copy = kind == MEMCPY
    host_copy = is_copy & ~_name_matches(G["name"], names, is_copy, ("DtoD", "PtoP"))
    gx, gy, gz = (G[k].astype(np.int64) for k in ("grid_x", "grid_y", "grid_z"))
    blocks = np.where((gx > 0) & (gy > 0) & (gz > 0), gx * gy * gz, 0)
    occ, occ_src, waves = _occupancy(trace, devices, kind, blocks)
    dtype_vocab: dict[Optional[str], int] = {None: 0}
    k_dtype = np.array([dtype_vocab.setdefault(k[0], len(dtype_vocab)) for k in kinds], dtype=np.int32)
    k_est = np.array([k[3] for k in kinds], dtype=bool)
    k_upper = np.array([k[4] for k in kinds], dtype=bool)
    estimated = k_est[kind_code] | ((attr.owner >= 0) & (attr.share < 1.0))
    dram = dram_traffic(attr.bytes, attr.reads, l2)
    hints, l2_reuse = _l2_hints(trace, attr, kind, dur, dram, bw, l2)
    return KernelFrame(
        kind=kind,
        device=G["device"].astype(np.int64),
        dur_us=dur,
        flops=attr.flops,
        bytes=attr.bytes,
        reads=attr.reads,
        dram_bytes=dram,
        l2_hint=hints,
        dtype=Coded(k_dtype[kind_code], list(dtype_vocab)),
        peak=peak,
        peak_flops=peak_f,
        bandwidth=bw,
        num_sms=sms,
        l2_bytes=l2,
        blocks=blocks.astype(np.int64),
        occupancy=occ,
        occupancy_source=occ_src,
        waves=waves,
        host_copy=host_copy,
        communication=communication_mask(trace, links),
        estimated=estimated,
        # a dense upper bound is the work of the main kernel: the per-token passes of the same op (delta,
        # dQ conversion: no FLOPs) move the same bytes whatever the mask or the sequence lengths
        upper_bound=k_upper[kind_code] & ~((kind == KERNEL) & (attr.flops == 0)),
        flops_exact=_flops_exact(attr, kind) & ~k_est[kind_code] & ~k_upper[kind_code],
        l2_reuse_bytes=l2_reuse,
        missing=_missing(trace, attr, links.gpu_op, kind),
        achieved_flops=_nan(n),
        achieved_bytes=_nan(n),
        intensity=_nan(n),
        compute_util=_nan(n),
        memory_util=_nan(n),
        bound=np.full(n, BOUND_UNKNOWN, dtype=np.int8),
        cause=np.full(n, -1, dtype=np.int8),
        note=np.zeros(n, np.int8),
        reason=Coded(np.zeros(n, np.int32), [""]),
        bytes_over_roof=_nan(n),
        memory_floor=_nan(n),
    )


def _flops_exact(attr: Attribution, kind: np.ndarray) -> np.ndarray:
    """Kernels that hold all of their cost op's FLOPs (its only matrix kernel, or its only
    kernel): their FLOPs are the op's own count, not a share of it by duration."""
    own = attr.owner
    out: np.ndarray = (kind == KERNEL) & (own >= 0) & np.isfinite(attr.flops) & (attr.flops > 0)
    if not out.any():
        return out
    rows = np.flatnonzero(out)
    u, inv = unique_ints(own[rows], return_inverse=True)
    total = np.array(
        [(c.flops if c is not None and c.flops is not None else np.nan) for c in map(attr.costs.get, u.tolist())]
    )
    whole = total[inv.reshape(-1)]
    with np.errstate(invalid="ignore"):
        out[rows] = np.abs(attr.flops[rows] - whole) <= 1e-9 * whole
    return out


def _l2_hints(
    trace: Trace, attr: Attribution, kind: np.ndarray, dur: F64, dram: F64, bw: F64, l2: F64
) -> tuple[Coded, F64]:
    """For the kernels whose estimated DRAM traffic is more than the bandwidth delivers in their
    time (few), the cost model's account of which input was likely still in L2 (``l2_reuse`` over
    the ops just before it on its stream: a tensor an op just before wrote, that fits in L2 with
    everything moved since), e.g. the safe-softmax ``where`` reading the softmax just written,
    and the kernel's share of those bytes. Only those kernels: the search walks back op by op,
    too slow for every kernel."""
    n = len(kind)
    reuse = np.zeros(n)
    sec = dur * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        over = (kind == KERNEL) & (attr.owner >= 0) & (sec > 0) & (dram / sec > bw)
    codes = np.zeros(n, dtype=np.int32)
    vocab: dict[Optional[str], int] = {None: 0}
    if over.any():
        G = trace.gpu
        ks = np.flatnonzero(kind == KERNEL)
        ks = ks[np.lexsort((G["ts_ns"][ks], G["stream"][ks], G["device"][ks]))]
        pos = np.empty(n, dtype=np.int64)
        pos[ks] = np.arange(len(ks))
        same = G["device"][ks].astype(np.int64) * (1 << 32) + G["stream"][ks].astype(np.int64)
        # l2_reuse depends on the window's cost objects and the L2 size only; ops of one name and
        # inputs share one Cost, so every step repeats the same windows: each is looked at once
        seen: dict[tuple[Any, ...], tuple[Optional[str], float]] = {}
        for k in np.flatnonzero(over).tolist():
            p = int(pos[k])
            lo = max(0, p - 4 * C.L2_WINDOW)
            rows = ks[lo : p + 1][same[lo : p + 1] == same[p]].tolist()
            window = [attr.costs.get(int(attr.owner[r])) for r in rows]
            key = (*map(id, window), float(l2[k]))
            if key in seen:
                note, l2_bytes = seen[key]
            else:
                hint = C.l2_reuse(window, float(l2[k]), last_only=True)[-1]
                note, l2_bytes = seen[key] = (
                    (hint.l2_hint, float(hint.l2_bytes)) if hint is not None and hint.l2_hint else (None, 0.0)
                )
            if note:
                codes[k] = vocab.setdefault(note, len(vocab))
                reuse[k] = l2_bytes * float(attr.share[k])
    return Coded(codes, list(vocab)), reuse


def _name_matches(codes: np.ndarray, names: list[str], rows: np.ndarray, words: tuple[str, ...]) -> np.ndarray:
    """Rows (among ``rows``) whose name contains one of ``words``, tested once per name."""
    out = np.zeros(len(codes), dtype=bool)
    if rows.any():
        u, inv = unique_ints(codes[rows], return_inverse=True)
        hit = np.array([any(w in names[i] for w in words) for i in u.tolist()], dtype=bool)
        out[rows] = hit[inv.reshape(-1)]
    return out


def _occupancy(
    trace: Trace, devices: dict[int, D.DevicePeaks], kind: np.ndarray, blocks: np.ndarray
) -> tuple[F64, np.ndarray, F64]:
    """Occupancy %, its source and waves per kernel (roofline/occupancy.py), one device at a time:
    Kineto's estimate where it is positive (0 means it was not computed), else the theoretical
    occupancy from registers, shared memory and block size against the device's per-SM limits."""
    G = trace.gpu
    n = len(kind)
    occ, src, waves = np.full(n, np.nan), np.full(n, -1, dtype=np.int8), np.full(n, np.nan)
    is_k = kind == KERNEL
    if not is_k.any():
        return occ, src, waves
    bx, by, bz = (G[k].astype(np.int64) for k in ("block_x", "block_y", "block_z"))
    threads = np.where((bx > 0) & (by > 0) & (bz > 0), bx * by * bz, 0)
    props = {p.get("id"): p for p in D.device_properties(trace.meta)}
    for dev in unique_ints(G["device"][is_k]).tolist():
        rows = np.flatnonzero(is_k & (G["device"] == dev))
        d = devices.get(dev)
        p = props.get(dev) or (next(iter(props.values())) if props else {})
        limits = D.sm_limits(p, d.key if d is not None else None)
        ko = O.kernel_occupancy(
            threads[rows],
            G["registers"][rows],
            G["shared_memory"][rows],
            blocks[rows],
            G["occupancy"][rows],
            limits,
            d.num_sms if d is not None else None,
        )
        occ[rows], src[rows], waves[rows] = ko.pct, ko.source, ko.waves
    return occ, src, waves


def from_columns(dur_us: Any, **columns: Any) -> KernelFrame:
    """A frame from the given input columns (scalars broadcast); the rest take their
    "nothing recorded" values: kernels, unknown cost, no roof, no occupancy. For callers that
    classify numbers that did not come from a trace (tests, what-if estimates)."""
    d = np.atleast_1d(np.asarray(dur_us, dtype=np.float64))
    n = len(d)

    def col(name: str, default: Any, dtype: Any) -> np.ndarray:
        out: np.ndarray = np.broadcast_to(np.asarray(columns.pop(name, default), dtype=dtype), (n,)).copy()
        return out

    peak = columns.pop("peak", None)
    peak_col = (
        peak if isinstance(peak, Coded) else Coded.from_values([peak] * n if not isinstance(peak, list) else peak)
    )
    nbytes = col("bytes", np.nan, np.float64)
    reads = col("reads", np.nan, np.float64)
    est = col("estimated", False, bool)
    ub = col("upper_bound", False, bool)
    fl = col("flops", np.nan, np.float64)
    l2 = col("l2_bytes", 0.0, np.float64)
    occ = col("occupancy", np.nan, np.float64)
    f = KernelFrame(
        kind=col("kind", KERNEL, np.int64),
        device=col("device", 0, np.int64),
        dur_us=d,
        flops=fl,
        bytes=nbytes,
        reads=reads,
        dram_bytes=col("dram_bytes", np.nan, np.float64)
        if "dram_bytes" in columns
        else dram_traffic(nbytes, reads, l2),
        l2_hint=Coded.from_values(columns.pop("l2_hint", [None] * n)),
        dtype=Coded.from_values([None] * n),
        peak=peak_col,
        peak_flops=col("peak_flops", np.nan, np.float64),
        bandwidth=col("bandwidth", np.nan, np.float64),
        num_sms=col("num_sms", 0, np.int64),
        l2_bytes=l2,
        blocks=col("blocks", 0, np.int64),
        occupancy=occ,
        occupancy_source=col("occupancy_source", np.where(np.isnan(occ), -1, 0), np.int8),
        waves=col("waves", np.nan, np.float64),
        host_copy=col("host_copy", False, bool),
        communication=col("communication", False, bool),
        estimated=est,
        upper_bound=ub,
        flops_exact=col("flops_exact", ~est & ~ub & np.isfinite(fl), bool),
        l2_reuse_bytes=col("l2_reuse_bytes", 0.0, np.float64),
        missing=col("missing", -1, np.int8),
        achieved_flops=_nan(n),
        achieved_bytes=_nan(n),
        intensity=_nan(n),
        compute_util=_nan(n),
        memory_util=_nan(n),
        bound=np.full(n, BOUND_UNKNOWN, dtype=np.int8),
        cause=np.full(n, -1, dtype=np.int8),
        note=np.zeros(n, np.int8),
        reason=Coded(np.zeros(n, np.int32), [""]),
        bytes_over_roof=_nan(n),
        memory_floor=_nan(n),
    )
    if columns:
        raise TypeError(f"unknown frame columns: {', '.join(sorted(columns))}")
    return f
