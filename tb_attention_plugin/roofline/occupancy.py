"""Theoretical occupancy and waves of kernel launches, from what Kineto records per kernel.

Kineto writes ``est. achieved occupancy %`` = 0 when it did not compute it, so a recorded 0 is
"not recorded", never 0 %. What it does record for every CUDA kernel — ``registers per thread``,
``shared memory`` (static + dynamic bytes per block), ``block`` and ``grid`` — is what the CUDA
occupancy calculation needs, with the device's per-SM limits (``devices.sm_limits``):

* warps per block = ceil(threads / warp size)
* by threads:   floor(max threads per SM / (warps per block x warp size))
* by registers: registers per warp = ceil(registers per thread x warp size / allocation unit) x unit;
  each of the SM's register-file partitions holds floor(registers per partition / registers per
  warp) warps, so floor(partitions x that / warps per block) blocks (0 when one block needs more
  than the per-block maximum)
* by shared memory: ceil((bytes per block + runtime reserve) / allocation unit) x unit per block,
  floor(shared memory per SM / that) blocks (no limit when a block uses none)
* by the hardware's maximum blocks per SM

blocks per SM = the minimum; theoretical occupancy = blocks per SM x warps per block / max warps per
SM; waves = grid blocks / (SMs x blocks per SM). Everything is computed on whole arrays.

Signatures (the engine wires these into the kernel table):

    theoretical_occupancy(block_threads: np.ndarray, registers: np.ndarray, shared_bytes: np.ndarray,
                          limits: Optional[SmLimits]) -> Occupancy
    waves(grid_blocks: np.ndarray, num_sms: Optional[int], blocks_per_sm: np.ndarray) -> np.ndarray
    kernel_occupancy(block_threads, registers, shared_bytes, grid_blocks, recorded_pct: np.ndarray,
                     limits: Optional[SmLimits], num_sms: Optional[int]) -> KernelOccupancy

``kernel_occupancy`` is what a kernel table shows: the recorded estimate where CUPTI wrote one
(> 0), else the theoretical occupancy, with where it came from, and the waves.

``registers`` <= 0 or ``block_threads`` <= 0 mean "not recorded" (NaN results); a shared-memory
size < 0 likewise; ``limits`` None (AMD, unknown architecture) gives NaN everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..table import group_rows
from .devices import SmLimits

# why a launch's blocks per SM is what it is (the first limit reached)
LIMITERS = ("threads", "registers", "shared_memory", "blocks", "unlaunchable")


@dataclass
class Occupancy:
    blocks_per_sm: np.ndarray  # float: resident blocks per SM, NaN when unknown, 0 when it cannot launch
    fraction: np.ndarray  # float in [0, 1]: resident warps / max warps per SM, NaN when unknown
    limiter: np.ndarray  # int8 index into LIMITERS, -1 when unknown


def _ceil_to(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-x // unit) * unit


def theoretical_occupancy(
    block_threads: np.ndarray, registers: np.ndarray, shared_bytes: np.ndarray, limits: Optional[SmLimits]
) -> Occupancy:
    threads = np.asarray(block_threads, dtype=np.int64)
    regs = np.asarray(registers, dtype=np.int64)
    smem = np.asarray(shared_bytes, dtype=np.int64)
    n = len(threads)
    if limits is None or n == 0:
        nan = np.full(n, np.nan)
        return Occupancy(nan, nan.copy(), np.full(n, -1, dtype=np.int8))
    # every call of a kernel launches with the same block, registers and shared memory: each
    # distinct launch configuration is worked out once (a 250 MB decode trace has 266k kernels of a
    # few hundred configurations, and the per-kernel arithmetic held ~30 temporaries of 2 MB each)
    first, inv = group_rows(threads, regs, smem)
    o = _occupancy(threads[first], regs[first], smem[first], limits)
    return Occupancy(o.blocks_per_sm[inv], o.fraction[inv], o.limiter[inv])


def _occupancy(threads: np.ndarray, regs: np.ndarray, smem: np.ndarray, limits: SmLimits) -> Occupancy:
    """:func:`theoretical_occupancy` of each launch configuration, element-wise."""
    n = len(threads)
    L = limits
    known = (threads > 0) & (regs > 0) & (smem >= 0)
    t = np.where(known, threads, 1)
    r = np.where(known, regs, 1)
    s = np.where(known, smem, 0)
    warps = -(-t // L.warp_size)
    max_warps = L.max_threads_per_sm // L.warp_size
    by_threads = max_warps // warps
    regs_per_warp = _ceil_to(r * L.warp_size, L.register_unit)
    warps_per_partition = (L.registers_per_sm // L.sub_partitions) // regs_per_warp
    by_regs = (warps_per_partition * L.sub_partitions) // warps
    by_regs = np.where(regs_per_warp * warps > L.max_registers_per_block, 0, by_regs)
    smem_alloc = _ceil_to(s + L.shared_reserved_per_block, L.shared_unit)
    by_smem = np.where(s > 0, L.shared_per_sm // np.maximum(smem_alloc, 1), np.iinfo(np.int64).max)
    by_smem = np.where(s > L.max_shared_per_block, 0, by_smem)
    by_blocks = np.full(n, L.max_blocks_per_sm, dtype=np.int64)
    stack = np.stack([by_threads, by_regs, by_smem, by_blocks])
    blocks = stack.min(axis=0)
    limiter = stack.argmin(axis=0).astype(np.int8)
    # a block larger than the SM allows (threads) or too many registers per thread cannot launch
    bad = (t > L.max_threads_per_sm) | (r > 255) | (blocks <= 0)
    limiter = np.where(bad, np.int8(LIMITERS.index("unlaunchable")), limiter)
    blocks = np.where(bad, 0, blocks)
    frac = np.minimum(blocks * warps / max_warps, 1.0)
    return Occupancy(
        np.where(known, blocks.astype(np.float64), np.nan),
        np.where(known, frac, np.nan),
        np.where(known, limiter, np.int8(-1)).astype(np.int8),
    )


def waves(grid_blocks: np.ndarray, num_sms: Optional[int], blocks_per_sm: np.ndarray) -> np.ndarray:
    """Grid blocks / (SMs x resident blocks per SM): < 1 leaves SMs idle, a fractional last wave
    (e.g. 1.1) runs mostly empty. NaN when the SM count or blocks per SM is unknown or 0."""
    g = np.asarray(grid_blocks, dtype=np.float64)
    b = np.asarray(blocks_per_sm, dtype=np.float64)
    if not num_sms or num_sms <= 0:
        return np.full(len(g), np.nan)
    cap = num_sms * b
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((cap > 0) & (g > 0), g / cap, np.nan)
    return out


SOURCES = ("recorded", "theoretical")  # KernelOccupancy.source codes 0, 1; -1 = neither


@dataclass
class KernelOccupancy:
    pct: np.ndarray  # float, 0-100; NaN when neither recorded nor computable
    source: np.ndarray  # int8 index into SOURCES, -1 with a NaN pct
    theoretical: Occupancy
    waves: np.ndarray  # float, NaN when unknown


def kernel_occupancy(
    block_threads: np.ndarray,
    registers: np.ndarray,
    shared_bytes: np.ndarray,
    grid_blocks: np.ndarray,
    recorded_pct: np.ndarray,
    limits: Optional[SmLimits],
    num_sms: Optional[int],
) -> KernelOccupancy:
    """Occupancy per kernel of one device: Kineto's ``est. achieved occupancy %`` where it is > 0
    (0 means CUPTI did not compute it), else the theoretical occupancy; and waves."""
    th = theoretical_occupancy(block_threads, registers, shared_bytes, limits)
    rec = np.asarray(recorded_pct, dtype=np.float64)
    has_rec = np.isfinite(rec) & (rec > 0)
    has_th = np.isfinite(th.fraction)
    pct = np.where(has_rec, rec, np.where(has_th, th.fraction * 100.0, np.nan))
    source = np.where(has_rec, 0, np.where(has_th, 1, -1)).astype(np.int8)
    return KernelOccupancy(pct, source, th, waves(grid_blocks, num_sms, th.blocks_per_sm))
