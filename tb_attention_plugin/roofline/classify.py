"""Place every GPU activity on the roofline and say what bounds it: the one classifier.

``compute_util`` = achieved FLOP/s / the peak for the kernel's dtype and engine;
``memory_util``  = achieved DRAM bytes/s / the memory bandwidth.

``bound`` (rule in :func:`decide`, used for kernels, measured kernels and phase rows alike):

* ``latency`` first for kernels shorter than ``SHORT_KERNEL_US``: launch and ramp-up dominate,
  whatever the estimated traffic (unless measured counters show a roof reached).
* ``compute`` / ``memory`` — that roof is reached: its utilisation is at least ``ROOF_REACHED``
  and the larger of the two (for a kernel left of the ridge point memory_util > compute_util and
  vice versa, so this is the roofline's own verdict).
* ``latency`` — neither roof is reached. The reason names the likely cause from the launch
  record: too short to amortise the launch, a grid smaller than the number of SMs, low
  estimated occupancy, or none of these (stalls, poor access pattern).
* ``unknown`` — FLOPs or bytes are unknown (no shapes recorded, or an op without a formula).

Host-device copies are memory-bound by definition (the host link, not DRAM, is their roof).

The thresholds live here and nowhere else; they are documented in docs/cost-model.md, reported
in the JSON's ``thresholds`` and checked against Nsight Compute in validation/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from ..table import Coded, group_rows_of
from ..trace.arrays import unique_ints
from ..trace.records import KERNEL
from .cost import MATRIX, NONE

if TYPE_CHECKING:  # the frame module imports this one to pick roofs
    from .frame import KernelFrame

ROOF_REACHED = 0.5
SHORT_KERNEL_US = 5.0
LOW_OCCUPANCY_PCT = 20.0
# A grid of at most 1/TINY_GRID_SM_FRACTION of the SMs reaches half of neither roof, whatever its
# cost: its share of the matrix engines is that fraction, and one SM's load/store path (~64 B per
# cycle) draws at most ~1/30 of an H200's DRAM bandwidth (Nsight Compute: a 32-block elementwise
# kernel at 88 %). Used only when the cost is unknown, to give such kernels a bound.
TINY_GRID_SM_FRACTION = 16

BOUNDS = ("memory", "compute", "latency", "unknown")
BOUND_MEMORY, BOUND_COMPUTE, BOUND_LATENCY, BOUND_UNKNOWN = range(4)

# Reason codes: which sentence explains a row's bound (worded once per distinct set of numbers).
(
    R_HOST,
    R_COMPUTE,
    R_MEMORY,
    R_LATENCY,
    R_LATENCY_UNCOSTED,
    R_ZERO,
    R_NO_PEAKS,
    R_NO_COST,
    R_UPPER,
    R_COMM,
    R_BYTES_HIGH,
) = range(11)
# Latency evidence from the launch record (bit flags).
E_SHORT, E_SMALL_GRID, E_LOW_OCCUPANCY, E_FEW_WAVES = 1, 2, 4, 8
# Why a kernel's FLOPs or bytes are unknown (frame.missing), in words: the reason names what is missing.
MISSING = (
    "no CPU op recorded around its launch (e.g. replayed from a CUDA graph)",
    "no input shapes in the trace (profile with record_shapes=True)",
    "its op recorded no input shapes",
    "no cost formula for its op or the ops around it",
    "its op's cost formula could not use the recorded inputs",
    "a helper kernel of its op that the op's cost by role does not describe (roofline/roles.py)",
)
M_NO_OP, M_NO_SHAPES, M_OP_NO_SHAPES, M_NO_FORMULA, M_INCOMPLETE, M_HELPER = range(6)
# Why a latency-bound kernel reached no roof (frame.cause): too short for anything but the launch
# to matter; too little parallel work resident (a grid smaller than the SMs, low occupancy, less
# than one wave); or a full grid that still reaches neither roof (stalls, dependencies, access
# pattern). "Latency-bound" alone is one word for these three, which call for different fixes.
CAUSES = ("launch", "occupancy", "stalled")
CAUSE_LAUNCH, CAUSE_OCCUPANCY, CAUSE_STALLED = range(3)
# Notes on a row's numbers (bit flags, frame.note): its rate raised its roof (raise_roofs); part of
# its reads were likely L2 hits (a tensor just written that still fits in L2: cost.l2_reuse), not
# DRAM traffic; its FLOP estimate exceeded the roof (shown at the roof); its FLOPs and bytes are
# dense upper bounds; its estimated DRAM traffic needs more than the roof even so (a bytes-model
# miss: the estimate is too high, its memory utilisation unknown).
N_ROOF_RAISED, N_L2, N_CAPPED, N_UPPER, N_BYTES_HIGH = 1, 2, 4, 8, 16

_TF32_KERNEL = re.compile(r"tf32|xmma_gemm_tf32|s1688gemm|s16816gemm|_tf32_", re.I)


def peak_key(
    dtype: Optional[str], engine: str, kernel_name: str, available: dict[str, float], fp32_on_tensor_cores: bool = False
) -> tuple[Optional[str], str]:
    """Which FLOP peak applies, and why."""
    if engine == NONE or dtype is None:
        return None, "data movement: no arithmetic roof"
    if engine == MATRIX:
        if dtype in ("bf16", "fp16", "fp8", "int8"):
            if dtype in available:
                return dtype, f"{dtype} matrix-engine peak"
            if dtype == "bf16" and "fp16" in available:
                return "fp32", "no bf16 matrix engine on this GPU: fp32 vector peak"
            return "fp32", f"no {dtype} matrix peak known: fp32 vector peak"
        if dtype == "fp32":
            if _TF32_KERNEL.search(kernel_name) and "tf32" in available:
                return "tf32", "fp32 matmul on TF32 Tensor Cores (kernel name says tf32)"
            if fp32_on_tensor_cores and "tf32" in available:
                return "tf32", "fp32 fused attention runs on TF32 Tensor Cores"
            return "fp32", "fp32 matmul without TF32 (PyTorch's default): fp32 vector peak"
        if dtype == "fp64":
            return ("fp64_tensor", "fp64 matrix-engine peak") if "fp64_tensor" in available else ("fp64", "fp64 peak")
        return "fp32", f"{dtype} matmul: fp32 vector peak"
    # vector work runs in fp32 "opmath" even for half inputs
    if dtype == "fp64":
        return "fp64", "fp64 vector peak"
    return "fp32", "elementwise math runs in fp32: fp32 vector peak"


def decide(
    cu: np.ndarray, mu: np.ndarray, short: np.ndarray, measured_reached: Optional[np.ndarray] = None
) -> np.ndarray:
    """The bound (codes into ``BOUNDS``) from utilisations: unknown where either is NaN; the
    larger roof where it is reached; latency otherwise and for ``short`` kernels — unless
    ``measured_reached`` (a measured utilisation reached a roof, so the short-kernel rule,
    which exists because the model cannot see what counters show, does not apply)."""
    cu = np.asarray(cu, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    known = ~np.isnan(cu) & ~np.isnan(mu)
    bound = np.full(len(cu), BOUND_UNKNOWN, dtype=np.int8)
    reached = known & (np.fmax(cu, mu) >= ROOF_REACHED)
    bound[reached & (cu >= mu)] = BOUND_COMPUTE
    bound[reached & (cu < mu)] = BOUND_MEMORY
    bound[known & ~reached] = BOUND_LATENCY
    override = short if measured_reached is None else short & ~measured_reached
    bound[override] = BOUND_LATENCY
    return bound


def raise_roofs(
    frame: KernelFrame,
    datasheet: Callable[[int, str], Optional[float]],
    measured_dram: Optional[np.ndarray] = None,
) -> tuple[KernelFrame, list[dict[str, Any]]]:
    """Roofs no kernel's exact evidence exceeds: ``(frame, adjustments)``.

    Evidence, and only exact evidence: a kernel whose FLOPs are exact (from shapes — not a
    per-element estimate, not an upper bound — and all of its op's FLOPs, ``flops_exact``), and a
    kernel whose DRAM traffic hardware counters measured (``measured_dram``: bytes per second over
    the counters' own duration, NaN where none). A bytes *estimate* above the bandwidth never
    raises the DRAM roof: it is a bytes-model miss (classify says so), not evidence.

    A kernel cannot beat the GPU's true peak, so when one beats the roof in use, that figure was
    no ceiling. The roof becomes the best figure the evidence allows: the datasheet's
    (``datasheet(device, peak)``, with ``"memory_bandwidth"`` for DRAM) when the beaten roof was
    below it and the kernel did not beat the datasheet too; else the highest achieved rate, and
    the reason asks to check the count (a kernel above the datasheet is more likely a wrong FLOP
    count than a wrong datasheet). Every kernel on that roof is measured against the new one; the
    kernels with exact FLOPs that beat the old one carry ``N_ROOF_RAISED``; each change is listed
    as ``{device, peak, from, to, evidence, to_basis, reason}``."""
    sec = frame.dur_us * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(sec > 0, frame.flops / sec, np.nan)
    exact = (frame.kind == KERNEL) & frame.flops_exact & ~frame.upper_bound & np.isfinite(frame.peak_flops)
    with np.errstate(invalid="ignore"):
        over = exact & (achieved > frame.peak_flops)
    peak_f = frame.peak_flops.copy()
    bw = frame.bandwidth.copy()
    note = frame.note.copy()
    adjustments = []
    if over.any():
        pairs = np.unique(np.stack([frame.device[over], frame.peak.codes[over]], axis=1), axis=0)
        for dev, pc in pairs.tolist():
            group = (frame.device == dev) & (frame.peak.codes == pc)
            fast = group & over
            old = float(frame.peak_flops[fast][0])
            top = float(np.max(achieved[fast]))
            pk = str(frame.peak.vocab[pc])
            n = int(fast.sum())
            ran = (
                f"{n} kernel{'s' if n > 1 else ''} with exact FLOPs ran at up to {rate(top, 'FLOP/s')}, above "
                f"the {pk} roof of {rate(old, 'FLOP/s')}"
            )
            new, basis, why = _new_roof(old, top, datasheet(int(dev), pk), f"dense {pk} peak", "FLOP count", "FLOP/s")
            peak_f[group] = new
            note[fast] |= N_ROOF_RAISED
            adjustments.append(
                {
                    "device": int(dev),
                    "peak": pk,
                    "from": old,
                    "to": new,
                    "evidence": "exact_flops",
                    "to_basis": basis,
                    "reason": f"{ran}: {why}",
                }
            )
    if measured_dram is not None:
        with np.errstate(invalid="ignore"):
            over_m = np.isfinite(measured_dram) & np.isfinite(bw) & (measured_dram > bw)
        for dev in unique_ints(frame.device[over_m]).tolist():
            group = frame.device == dev
            fast = group & over_m
            old = float(bw[fast][0])
            top = float(np.nanmax(measured_dram[fast]))
            n = int(fast.sum())
            ran = (
                f"hardware counters measured {n} kernel{'s' if n > 1 else ''} moving up to {rate(top, 'B/s')} "
                f"of DRAM traffic, above the roof of {rate(old, 'B/s')}"
            )
            new, basis, why = _new_roof(
                old, top, datasheet(int(dev), "memory_bandwidth"), "DRAM bandwidth", "counters", "B/s"
            )
            bw[group] = new
            adjustments.append(
                {
                    "device": int(dev),
                    "peak": "memory_bandwidth",
                    "from": old,
                    "to": new,
                    "evidence": "measured_dram",
                    "to_basis": basis,
                    "reason": f"{ran}: {why}",
                }
            )
    if not adjustments:
        return frame, []
    return replace(frame, peak_flops=peak_f, bandwidth=bw, note=note), adjustments


def _new_roof(old: float, top: float, ds: Optional[float], what: str, count: str, unit: str) -> tuple[float, str, str]:
    """(new roof, "datasheet" | "achieved", why) for a roof ``old`` that exact evidence beat at
    ``top``: the datasheet's figure ``ds`` when it is above both, else the evidence itself."""
    if ds is not None and ds > old and ds >= top:
        return ds, "datasheet", f"that figure is no ceiling, so the roof is the datasheet's {what} of {rate(ds, unit)}"
    if ds is not None and ds < top:
        return (
            top,
            "achieved",
            f"the roof is the highest achieved rate, above the datasheet's {what} of {rate(ds, unit)} too: "
            f"check the {count}",
        )
    return top, "achieved", "the roof is the highest achieved rate"


def latency_evidence(frame: KernelFrame) -> np.ndarray:
    """Bit flags of what the launch record says about a kernel that reached no roof."""
    d, occ, sms, bl = frame.dur_us, frame.occupancy, frame.num_sms, frame.blocks
    flags = np.where(d < SHORT_KERNEL_US, E_SHORT, 0)
    small = (frame.kind == KERNEL) & (sms > 0) & (bl > 0) & (bl < sms)
    flags |= np.where(small, E_SMALL_GRID, 0)
    with np.errstate(invalid="ignore"):
        flags |= np.where((occ > 0) & (occ < LOW_OCCUPANCY_PCT), E_LOW_OCCUPANCY, 0)
        flags |= np.where(~small & (frame.waves < 1.0), E_FEW_WAVES, 0)
    return flags.astype(np.int8)


def latency_cause(frame: KernelFrame, bound: np.ndarray) -> np.ndarray:
    """The cause (index into ``CAUSES``) of each latency-bound row, -1 elsewhere and where the
    launch record cannot tell (a copy or a kernel whose grid or GPU is unknown, not short)."""
    flags = latency_evidence(frame)
    lat = bound == BOUND_LATENCY
    cause = np.full(len(bound), -1, dtype=np.int8)
    grid_known = (frame.kind == KERNEL) & (frame.num_sms > 0) & (frame.blocks > 0)
    cause[lat & grid_known] = CAUSE_STALLED
    cause[lat & ((flags & (E_SMALL_GRID | E_LOW_OCCUPANCY | E_FEW_WAVES)) != 0)] = CAUSE_OCCUPANCY
    cause[lat & ((flags & E_SHORT) != 0)] = CAUSE_LAUNCH
    return cause


def classify(frame: KernelFrame) -> KernelFrame:
    """Rates, utilisations, bound and reason of every row: a new frame."""
    dur, fl, by = frame.dur_us, frame.flops, frame.bytes
    sec = dur * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        afl = np.where(sec > 0, fl / sec, np.nan)
        aby = np.where(sec > 0, frame.dram_bytes / sec, np.nan)
        inten = np.where(by > 0, fl / by, np.nan)
        mu = aby / frame.bandwidth
        cu = np.where(fl > 0, afl / frame.peak_flops, np.where(np.isnan(fl), np.nan, 0.0))
    # no FLOP roof for this dtype (data movement): it reaches none of it
    cu = np.where(np.isnan(cu) & ~np.isnan(fl) & ~np.isnan(mu), 0.0, cu)
    host = frame.host_copy
    note = frame.note.copy()
    dram = frame.dram_bytes
    # Estimated DRAM traffic that needs more than the roof: DRAM moved at most bandwidth x time,
    # so the estimate is not all DRAM traffic. Where the cost model knows why (an input a kernel
    # just before wrote, that still fits in L2 with everything moved since: cost.l2_reuse), part of
    # it was likely served from L2; else the bytes estimate is too high (a bytes-model miss). Either
    # way how much reached DRAM is unknown: no memory utilisation (never a false 100 %), and what is
    # known is kept: at least the estimate less a whole L2 came from DRAM (``mu_floor``), which
    # can still show the memory roof reached.
    with np.errstate(invalid="ignore"):
        over = ~host & (mu > 1.0)
    mu_floor = np.full(len(mu), np.nan)
    over_ratio = np.full(len(mu), np.nan)
    if over.any():
        reuse = over & (frame.l2_reuse_bytes > 0)
        high = over & ~reuse
        note[reuse] |= N_L2
        note[high] |= N_BYTES_HIGH
        over_ratio = np.where(high, mu, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            floor = np.maximum(dram - frame.l2_bytes, 0.0) / sec / frame.bandwidth
        mu_floor = np.where(over, np.minimum(floor, 1.0), np.nan)
        mu = np.where(over, np.nan, mu)
        aby = np.where(over, np.nan, aby)
    upper = frame.upper_bound
    note[upper] |= N_UPPER
    # FLOPs above the roof after raise_roofs are estimates (or upper bounds): shown at the roof
    with np.errstate(invalid="ignore"):
        capped = cu > 1.0
    note[capped & ~upper] |= N_CAPPED
    cu = np.where(capped, 1.0, cu)
    costed = ~np.isnan(fl) & ~np.isnan(by) & (dur > 0)
    cu_k = np.where(costed, cu, np.nan)
    short = (dur > 0) & (dur < SHORT_KERNEL_US) & (frame.kind == KERNEL)
    bound = decide(cu_k, np.where(costed, mu, np.nan), short)
    # a bytes-model miss: memory-bound when even its floor reaches the roof, else unknown (the true
    # traffic lies between the floor and the roof; a compute claim would need the roof's side known)
    miss = costed & ((note & (N_BYTES_HIGH | N_L2)) != 0)
    if miss.any():
        with np.errstate(invalid="ignore"):
            mem = miss & (mu_floor >= ROOF_REACHED) & (mu_floor >= np.nan_to_num(cu))
        bound[miss] = BOUND_UNKNOWN
        bound[mem] = BOUND_MEMORY
        bound[miss & short] = BOUND_LATENCY
    # no cost, but a grid too small to reach either roof: latency all the same
    tiny = (
        ~costed
        & (dur > 0)
        & (frame.kind == KERNEL)
        & ~frame.communication
        & (frame.num_sms > 0)
        & (frame.blocks > 0)
        & (frame.blocks * TINY_GRID_SM_FRACTION <= frame.num_sms)
        & ~np.isnan(frame.bandwidth)
    )
    bound[tiny] = BOUND_LATENCY
    # an upper bound shows that a roof was not reached, never that it was
    claimed = upper & ((bound == BOUND_COMPUTE) | (bound == BOUND_MEMORY))
    bound[claimed] = BOUND_UNKNOWN
    bound[host] = BOUND_MEMORY
    # collective communication waits on the interconnect and the other ranks: no roof of this GPU
    comm = frame.communication
    bound[comm] = BOUND_UNKNOWN
    cu = np.where(host, np.nan, cu)
    mu = np.where(host, np.nan, mu)
    code = np.select(
        [
            comm,
            host,
            claimed,
            miss & ~short,
            bound == BOUND_COMPUTE,
            bound == BOUND_MEMORY,
            (bound == BOUND_LATENCY) & (~np.isnan(mu) | miss),
            bound == BOUND_LATENCY,
            dur <= 0,
            np.isnan(frame.bandwidth),
        ],
        [R_COMM, R_HOST, R_UPPER, R_BYTES_HIGH, R_COMPUTE, R_MEMORY, R_LATENCY, R_LATENCY_UNCOSTED, R_ZERO, R_NO_PEAKS],
        R_NO_COST,
    ).astype(np.int8)
    out = replace(
        frame,
        dram_bytes=dram,
        achieved_flops=afl,
        achieved_bytes=aby,
        intensity=inten,
        compute_util=cu,
        memory_util=mu,
        bound=bound,
        note=note,
        bytes_over_roof=over_ratio,
        memory_floor=mu_floor,
    )
    out = replace(out, cause=latency_cause(out, bound))
    return replace(out, reason=word(out, code))


# ------------------------------------------------------------------------------ reasons


def _pct_key(x: np.ndarray) -> np.ndarray:
    """What ``f"{100 * x:.0f}"`` shows, as a number (NaN kept)."""
    return np.round(x * 100.0)


def _times(x: float) -> str:
    """``1.04×``, ``1.2×``: how many times the roof, two decimals near 1 (where one would say 1.0)."""
    return f"{x:.2f}×" if x < 1.095 else f"{x:.1f}×"


def _times_key(x: np.ndarray) -> np.ndarray:
    """What :func:`_times` shows, as a number (NaN kept)."""
    return np.where(x < 1.095, np.round(x, 2), np.round(x, 1))


def _sig_key(x: np.ndarray, digits: int = 3) -> np.ndarray:
    out = np.array(x, dtype=np.float64, copy=True)
    ok = np.isfinite(out) & (out != 0)
    if ok.any():
        scale = 10.0 ** (digits - 1 - np.floor(np.log10(np.abs(out[ok]))))
        out[ok] = np.round(out[ok] * scale) / scale
    return out


def word(frame: KernelFrame, code: np.ndarray) -> Coded:
    """The reason of every row, from its reason code and the numbers that code's sentence shows.
    The same kernel recurs with the same numbers in every layer and step: rows whose shown
    numbers agree share one sentence, worded once."""
    n = len(code)
    z = np.zeros(n)
    flags = latency_evidence(frame)
    lat = (code == R_LATENCY) | (code == R_LATENCY_UNCOSTED)
    f_lat = np.where(lat, flags, 0)
    cu0 = np.where(np.isnan(frame.compute_util), 0.0, frame.compute_util)
    roofed = (code == R_COMPUTE) | (code == R_LATENCY) | (code == R_UPPER)

    def shown() -> Iterator[np.ndarray]:
        """The numbers each row's sentence shows, a column at a time: each is factorised and
        dropped before the next is built (19-26 float columns of every GPU activity at once were
        the largest transient of a 250 MB trace's analysis)."""
        yield code.astype(np.float64)
        yield np.where(roofed, frame.peak.codes, 0)
        yield np.where(code == R_HOST, frame.bytes, z)
        yield np.where(
            code == R_COMPUTE,
            _pct_key(frame.compute_util),
            np.where((code == R_LATENCY) | (code == R_UPPER), _pct_key(cu0), z),
        )
        yield np.where((code == R_MEMORY) | (code == R_LATENCY) | (code == R_UPPER), _pct_key(frame.memory_util), z)
        yield np.where(code == R_HOST, 0, frame.note).astype(np.float64)
        yield np.where(frame.note & N_ROOF_RAISED, _sig_key(frame.peak_flops), z)
        yield np.where(frame.note & N_L2, frame.l2_hint.codes, 0)
        yield np.where(
            code == R_COMPUTE,
            _sig_key(frame.achieved_flops),
            np.where(code == R_MEMORY, _sig_key(frame.achieved_bytes), z),
        )
        yield f_lat.astype(np.float64)
        yield np.where(f_lat & E_SHORT, frame.dur_us, z)
        yield np.where(f_lat & E_SMALL_GRID, frame.blocks, z)
        yield np.where(f_lat & E_SMALL_GRID, frame.num_sms, z)
        yield np.where(f_lat & E_LOW_OCCUPANCY, frame.occupancy, z)
        yield np.where(f_lat & E_LOW_OCCUPANCY, frame.occupancy_source, z)
        yield np.where(f_lat & E_FEW_WAVES, np.round(frame.waves, 2), z)
        yield np.where(lat, frame.cause, z)
        yield np.where((code == R_LATENCY_UNCOSTED) | (code == R_NO_COST), frame.missing, z)
        yield np.where(frame.note & N_BYTES_HIGH, _times_key(frame.bytes_over_roof), z)
        high = code == R_BYTES_HIGH
        if high.any():
            mem = high & (frame.bound == BOUND_MEMORY)
            with np.errstate(divide="ignore", invalid="ignore"):
                need = frame.dram_bytes / (frame.dur_us * 1e-6)
            yield np.where(high, _sig_key(need), z)
            yield np.where(high, _sig_key(frame.bandwidth), z)
            yield np.where(high, _times_key(frame.bytes_over_roof), z)
            yield np.where(mem, _sig_key(frame.l2_bytes), z)
            yield np.where(mem, _pct_key(frame.memory_floor), z)
            yield np.where(high & ~mem, _pct_key(cu0), z)
            yield np.where(high & ~mem, frame.peak.codes, 0)

    if not n:
        return Coded(np.zeros(0, np.int32), [])
    first, inv = group_rows_of(n, shown())
    vocab = [_sentence(frame, int(code[i]), int(flags[i]), i) + _notes(frame, int(code[i]), i) for i in first.tolist()]
    return Coded(inv.reshape(-1), vocab)


def _notes(f: KernelFrame, code: int, i: int) -> str:
    note = 0 if code == R_HOST else int(f.note[i])
    out = ""
    pk = f.peak[i]
    if note & N_ROOF_RAISED:
        out += (
            f"; it ran faster than the table's {pk} peak, so that roof is raised to "
            f"{rate(float(f.peak_flops[i]), 'FLOP/s')} (device.roof_adjustments)"
        )
    if note & N_L2 and code not in (R_BYTES_HIGH, R_LATENCY):
        out += (
            f"; its estimated traffic needs more than the DRAM roof, and it {f.l2_hint[i]}: how much "
            "reached DRAM is unknown"
        )
    if note & N_BYTES_HIGH and code not in (R_BYTES_HIGH, R_LATENCY):
        out += (
            f"; its estimated DRAM traffic needs ≥{_times(float(f.bytes_over_roof[i]))} the DRAM roof: the bytes "
            "estimate is too high (its memory utilisation is unknown)"
        )
    if note & N_CAPPED:
        out += f"; the FLOP estimate exceeds the {pk or 'compute'} roof, so it is shown at the roof"
    return out


def _sentence(f: KernelFrame, code: int, flags: int, i: int) -> str:
    if code == R_HOST:
        nb = float(f.bytes[i])
        return f"host-device transfer over the host link ({fmt_bytes(nb if nb == nb else None)})"
    if code == R_COMM:
        return (
            "collective communication (NCCL/RCCL): its time is the interconnect's and the other ranks', "
            "not bounded by this GPU's roofs"
        )
    if code == R_ZERO:
        return "zero duration"
    if code == R_NO_PEAKS:
        return "unknown GPU: give its peaks with --peaks"
    if code == R_NO_COST:
        return f"FLOPs or bytes unknown: {_missing_words(f, i)}"
    pk = f.peak[i]
    label = f"{pk} peak" if pk else "compute peak"
    c, m = float(f.compute_util[i]), float(f.memory_util[i])
    if code == R_COMPUTE:
        return f"reaches {c * 100:.0f}% of the {label} ({rate(float(f.achieved_flops[i]), 'FLOP/s')})"
    if code == R_UPPER:
        return (
            f"FLOPs and bytes are dense upper bounds (the mask's sparsity is not in the trace): "
            f"≤ {c * 100:.0f}% of the {label}, ≤ {m * 100:.0f}% of memory bandwidth; "
            "a bound cannot be claimed from upper bounds"
        )
    if code == R_BYTES_HIGH:
        sec = float(f.dur_us[i]) * 1e-6
        need = float(f.dram_bytes[i]) / sec if sec > 0 else float("nan")
        head = f"estimated DRAM traffic needs {rate(need, 'B/s')} > the {rate(float(f.bandwidth[i]), 'B/s')} roof: "
        if f.note[i] & N_L2:
            head += (
                f"it {f.l2_hint[i]}, so part of it was likely served from L2 and how much reached DRAM is "
                "unknown (no memory utilisation)"
            )
        else:
            head += (
                f"bytes estimate too high by ≥{_times(float(f.bytes_over_roof[i]))} (a bytes-model miss; DRAM "
                "moves at most the roof, so the memory utilisation is unknown)"
            )
        if f.bound[i] == BOUND_MEMORY:
            return head + (
                f"; even had a whole L2 ({fmt_bytes(float(f.l2_bytes[i]))}) of it been cached, at least "
                f"{float(f.memory_floor[i]) * 100:.0f}% of bandwidth came from DRAM: memory-bound"
            )
        return head + f"; {c * 100 if c == c else 0.0:.0f}% of the {label}, so the bound is unknown"
    if code == R_MEMORY:
        return (
            f"reaches {m * 100:.0f}% of memory bandwidth "
            f"({rate(float(f.achieved_bytes[i]), 'B/s')} of estimated DRAM traffic)"
        )
    why = []
    if flags & E_SHORT:
        why.append(f"only {float(f.dur_us[i]):.1f} µs: launch overhead dominates")
    if flags & E_SMALL_GRID:
        why.append(f"grid of {int(f.blocks[i])} blocks < {int(f.num_sms[i])} SMs")
    if flags & E_LOW_OCCUPANCY:
        kind = "estimated" if f.occupancy_source[i] == 0 else "theoretical"
        why.append(f"{kind} occupancy {float(f.occupancy[i]):.0f}%")
    if flags & E_FEW_WAVES:
        why.append(f"{float(f.waves[i]):.2f} of a wave: fewer blocks than the SMs hold at once")
    cause = int(f.cause[i])
    if not why:
        why.append(
            "neither roof reached with a full grid: stalls, dependencies or a poor access pattern"
            if cause == CAUSE_STALLED
            else "neither roof reached: stalls, poor access pattern or too little parallel work"
        )
    head = f"latency ({CAUSES[cause]}): " if cause >= 0 else ""
    if code == R_LATENCY:
        le = "≤ " if f.upper_bound[i] else ""
        if m == m:
            mem = f"{le}{m * 100:.0f}% of bandwidth"
        elif f.note[i] & N_L2:
            mem = f"memory unknown: it {f.l2_hint[i]}"
        else:
            mem = f"memory unknown: bytes estimate ≥{_times(float(f.bytes_over_roof[i]))} the DRAM roof, too high"
        return head + "; ".join(why) + f" ({mem}, {le}{(c if c == c else 0.0) * 100:.0f}% of {label})"
    if not flags & E_SHORT and flags & E_SMALL_GRID:
        why.append(f"a grid of at most 1/{TINY_GRID_SM_FRACTION} of the SMs reaches half of neither roof")
    return head + "; ".join(why) + f" (FLOPs and bytes unknown: {_missing_words(f, i)})"


def _missing_words(f: KernelFrame, i: int) -> str:
    m = int(f.missing[i])
    return MISSING[m] if m >= 0 else "no recorded shapes, or an op without a cost formula"


def rate(x: float, unit: str) -> str:
    """``1.23 TFLOP/s``: three significant digits and an SI prefix."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_bytes(b: Optional[float]) -> str:
    if b is None:
        return "unknown size"
    for u in ("B", "KB", "MB", "GB", "TB"):
        if b < 1000:
            return f"{b:.3g} {u}"
        b /= 1000
    return f"{b:.3g} PB"
