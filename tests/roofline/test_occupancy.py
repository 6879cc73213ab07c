"""Theoretical occupancy (the CUDA occupancy calculation) against hand-computed cases and against
the occupancy CUPTI estimated for the H200 kernels of validation/traces."""

import glob
import os

import numpy as np
import pytest

from helpers import ROOT
from tb_attention_plugin.roofline.devices import sm_limits
from tb_attention_plugin.roofline.occupancy import LIMITERS, theoretical_occupancy, waves

H200 = {
    "name": "NVIDIA H200",
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


def occ(props, threads, regs, smem, key=None):
    o = theoretical_occupancy(np.array([threads]), np.array([regs]), np.array([smem]), sm_limits(props, key))
    return float(o.blocks_per_sm[0]), float(o.fraction[0]), (LIMITERS[o.limiter[0]] if o.limiter[0] >= 0 else None)


@pytest.mark.parametrize(
    "props,threads,regs,smem,blocks,frac,limiter",
    [
        # H200, FlashAttention-2 forward: 255 regs x 32 -> 8192 per warp, 2 warps per register partition,
        # 8 warps = 2 blocks of 4 (shared memory alone would allow 4): 12.5 % (CUPTI: 13 %)
        (H200, 128, 255, 49152, 2, 0.125, "registers"),
        # H200, flash backward pre-pass: 44 regs -> 1536 per warp, 10 warps per partition, 40 per SM,
        # 5 blocks of 8 warps: 62.5 % (CUPTI: 63 %)
        (H200, 256, 44, 0, 5, 0.625, "registers"),
        # H200, elementwise: 18 regs; 16 blocks of 128 threads fill the 2048 threads: 100 %
        (H200, 128, 18, 0, 16, 1.0, "threads"),
        # sm_70 (the calculator's default: 256 threads, 32 regs, 4 KB): every limit at 8 blocks, 100 %
        ({"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}, 256, 32, 4096, 8, 1.0, "threads"),
        # sm_80, 64 regs: 2048 per warp, 8 warps per partition, 32 warps = 4 blocks of 8: 50 %
        ({"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}, 256, 64, 0, 4, 0.5, "registers"),
        # sm_80, 48 KB + 1 KB reserve per block in 164 KB: 3 blocks of 4 warps = 12 of 64: 18.75 %
        (
            {"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0},
            128,
            32,
            48 * 1024,
            3,
            0.1875,
            "shared_memory",
        ),
        # sm_86: 1536 threads per SM -> 6 blocks of 256 fill it
        ({"name": "NVIDIA A10", "computeMajor": 8, "computeMinor": 6}, 256, 32, 0, 6, 1.0, "threads"),
        # 114 KB per block: the runtime's 1 KB reserve makes two blocks not fit in 228 KB (1 block, 4 warps)
        (H200, 128, 32, 114 * 1024, 1, 4 / 64, "shared_memory"),
        # tiny blocks hit the 32-block limit: 32 x 1 warp of 64 = 50 %
        (H200, 32, 16, 0, 32, 0.5, "blocks"),
        # more shared memory than a block may have: cannot launch
        (H200, 128, 32, 240 * 1024, 0, 0.0, "unlaunchable"),
    ],
)
def test_hand_computed_cases(props, threads, regs, smem, blocks, frac, limiter):
    assert occ(props, threads, regs, smem) == (blocks, pytest.approx(frac), limiter)


def test_architecture_from_the_table_key_and_amd_unknown():
    assert sm_limits({"name": "NVIDIA H100 80GB HBM3"}, "H100-SXM").arch == "sm_90"
    assert sm_limits({"name": "AMD Instinct MI250X", "computeMajor": 9, "computeMinor": 0}) is None
    assert sm_limits({"name": "Future GPU", "computeMajor": 13, "computeMinor": 0}) is None
    b, f, lim = occ({"name": "AMD Instinct MI250X"}, 256, 32, 0)
    assert np.isnan(b) and np.isnan(f) and lim is None


def test_not_recorded_is_nan_not_zero():
    o = theoretical_occupancy(np.array([128, 0, 128]), np.array([0, 32, 32]), np.array([0, 0, -1]), sm_limits(H200))
    assert np.isnan(o.fraction).all() and (o.limiter == -1).all()


def test_waves():
    w = waves(np.array([1024, 66, 0, 10]), 132, np.array([2.0, 2.0, 2.0, np.nan]))
    assert w[0] == pytest.approx(1024 / 264) and w[1] == pytest.approx(0.25)
    assert np.isnan(w[2]) and np.isnan(w[3])
    assert np.isnan(waves(np.array([10]), None, np.array([1.0]))).all()


TRACES = sorted(glob.glob(os.path.join(ROOT, "validation", "traces", "*", "*.pt.trace.json.gz")))


@pytest.mark.skipif(not TRACES, reason="validation/traces not available")
def test_agrees_with_cupti_on_every_full_wave_h200_kernel():
    """CUPTI's estimate (Kineto's ``est. achieved occupancy %``) is the theoretical occupancy
    capped by the grid; where the grid fills at least one wave they must agree (to its rounding)."""
    from tb_attention_plugin.roofline.devices import device_properties
    from tb_attention_plugin.trace.records import load_trace

    n = 0
    for f in TRACES:
        t = load_trace(f)
        G = t.gpu
        props = device_properties(t.meta)[0]
        o = theoretical_occupancy(
            G["block_x"] * G["block_y"] * G["block_z"], G["registers"], G["shared_memory"], sm_limits(props)
        )
        w = waves(G["grid_x"] * G["grid_y"] * G["grid_z"], props["numSms"], o.blocks_per_sm)
        m = (G["occupancy"] > 0) & np.isfinite(o.fraction) & (w >= 1)
        assert np.all(np.abs(o.fraction[m] * 100 - G["occupancy"][m]) <= 1.0), f
        n += int(m.sum())
    assert n >= 500


def test_kernel_occupancy_prefers_the_recorded_estimate_and_never_reports_zero_for_missing():
    from tb_attention_plugin.roofline.occupancy import SOURCES, kernel_occupancy

    k = kernel_occupancy(
        np.array([128, 128, 128, 0]),
        np.array([255, 18, 0, 0]),
        np.array([49152, 0, 0, 0]),
        np.array([1024, 16384, 10, 1]),
        np.array([0.0, 100.0, 0.0, 0.0]),
        sm_limits(H200),
        132,
    )
    assert k.pct[0] == pytest.approx(12.5) and SOURCES[k.source[0]] == "theoretical"  # FlashAttention: 0 recorded
    assert k.pct[1] == 100.0 and SOURCES[k.source[1]] == "recorded"
    assert np.isnan(k.pct[2]) and k.source[2] == -1 and np.isnan(k.pct[3])
    assert k.waves[0] == pytest.approx(1024 / (132 * 2))


def test_each_launch_configuration_is_worked_out_once_with_the_same_answer():
    """theoretical_occupancy computes each distinct (block, registers, shared memory) once and gives
    it to every kernel launched with it: the same arrays as the element-wise arithmetic, on random
    launches that repeat, with unknown, unlaunchable and negative values among them."""
    from tb_attention_plugin.roofline.occupancy import _occupancy

    rng = np.random.default_rng(5)
    lim = sm_limits(H200)
    for n in (1, 7, 500):
        threads = rng.choice([0, 32, 96, 128, 256, 1024, 2048], n)
        regs = rng.choice([0, 18, 64, 128, 255, 300], n)
        smem = rng.choice([-1, 0, 4096, 49152, 1 << 20], n)
        got, want = theoretical_occupancy(threads, regs, smem, lim), _occupancy(threads, regs, smem, lim)
        for a, b in ((got.blocks_per_sm, want.blocks_per_sm), (got.fraction, want.fraction)):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
        assert got.limiter.dtype == want.limiter.dtype and np.array_equal(got.limiter, want.limiter)
