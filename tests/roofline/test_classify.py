"""The one classifier (roofline/classify.py), as the report uses it: on a kernel frame."""

import numpy as np
import pytest

from tb_attention_plugin.roofline.classify import (
    BOUNDS,
    CAUSES,
    M_NO_FORMULA,
    M_NO_OP,
    M_NO_SHAPES,
    N_BYTES_HIGH,
    N_L2,
    N_ROOF_RAISED,
    ROOF_REACHED,
    SHORT_KERNEL_US,
    classify,
    decide,
    peak_key,
    raise_roofs,
)
from tb_attention_plugin.roofline.cost import MATRIX, NONE, VECTOR
from tb_attention_plugin.roofline.frame import from_columns
from tb_attention_plugin.trace.records import KERNEL, MEMCPY

H200 = {"bf16": 801.5e12, "fp32": 50.5e12, "tf32": 440.3e12, "fp16": 801.5e12}
BW = 4.24e12


def one(dur_us, flops, nbytes, peak_flops=801.5e12, bw=BW, peak="bf16", **kw):
    f = classify(
        from_columns(
            dur_us, flops=flops, bytes=nbytes, reads=nbytes, peak_flops=peak_flops, bandwidth=bw, peak=peak, **kw
        )
    )
    return {
        "bound": BOUNDS[f.bound[0]],
        "reason": f.reason[0],
        "cu": f.compute_util[0],
        "mu": f.memory_util[0],
        "cause": CAUSES[f.cause[0]] if f.cause[0] >= 0 else None,
    }


def test_compute_bound_gemm():
    v = one(100.0, 0.8 * 801.5e12 * 100e-6, 1e8)
    assert v["bound"] == "compute" and abs(v["cu"] - 0.8) < 1e-9
    assert v["reason"] == "reaches 80% of the bf16 peak (641 TFLOP/s)"


def test_memory_bound_softmax():
    v = one(100.0, 1e8, 0.9 * BW * 100e-6, 50.5e12, peak="fp32")
    assert v["bound"] == "memory" and v["mu"] > v["cu"]
    assert v["reason"].startswith("reaches 90% of memory bandwidth (3.82 TB/s")


def test_short_kernels_are_latency_bound_whatever_their_traffic():
    # 3 µs at 90 % of bandwidth by the model: too short to have reached it
    v = one(3.0, 0, 0.9 * BW * 3e-6, 50.5e12, peak="fp32", blocks=4, num_sms=132, occupancy=5.0)
    assert v["bound"] == "latency"
    assert v["reason"] == (
        "latency (launch): only 3.0 µs: launch overhead dominates; grid of 4 blocks < 132 SMs; "
        "estimated occupancy 5% (90% of bandwidth, 0% of fp32 peak)"
    )
    # the rule is for kernels: a short device copy that reaches bandwidth stays memory-bound
    v = one(3.0, 0, 0.9 * BW * 3e-6, np.nan, peak=None, kind=MEMCPY)
    assert v["bound"] == "memory"


def test_latency_when_neither_roof_is_reached():
    v = one(500.0, 1e9, 1e8, blocks=1000, num_sms=132)
    assert v["bound"] == "latency"
    assert v["reason"].startswith("latency (stalled): neither roof reached with a full grid")
    assert SHORT_KERNEL_US < 500.0


def test_short_kernel_without_cost_is_latency_and_says_what_is_missing():
    v = one(2.0, np.nan, np.nan, missing=M_NO_FORMULA)
    assert v["bound"] == "latency"
    assert v["reason"] == (
        "latency (launch): only 2.0 µs: launch overhead dominates "
        "(FLOPs and bytes unknown: no cost formula for its op or the ops around it)"
    )


def test_a_kernel_without_cost_on_a_tiny_grid_is_latency_bound():
    # a MoE router's top-k on 4 blocks for 40 µs: no formula, but 4 of 132 SMs reach half of no roof
    v = one(40.0, np.nan, np.nan, blocks=4, num_sms=132, missing=M_NO_FORMULA)
    assert v["bound"] == "latency" and v["cause"] == "occupancy"
    assert v["reason"].startswith("latency (occupancy): grid of 4 blocks < 132 SMs")
    assert v["reason"].endswith("(FLOPs and bytes unknown: no cost formula for its op or the ops around it)")
    # a small grid is not enough without a cost: 32 blocks of a grid-stride loop reach 88 % of DRAM
    v = one(40.0, np.nan, np.nan, blocks=32, num_sms=132, missing=M_NO_SHAPES)
    assert v["bound"] == "unknown"
    assert v["reason"] == "FLOPs or bytes unknown: no input shapes in the trace (profile with record_shapes=True)"
    v = one(40.0, np.nan, np.nan, blocks=2, num_sms=132, missing=M_NO_OP)
    assert v["bound"] == "latency" and "replayed from a CUDA graph" in v["reason"]


def test_unknown_without_cost_or_peaks():
    assert one(10.0, np.nan, 1e6)["bound"] == "unknown"
    v = one(10.0, 1e6, 1e6, np.nan, np.nan)
    assert v["bound"] == "unknown" and "--peaks" in v["reason"]
    assert one(0.0, 1e6, 1e6)["reason"] == "zero duration"


def test_host_copies_are_bound_by_the_host_link():
    v = one(50.0, 0.0, 2e6, np.nan, peak=None, kind=MEMCPY, host_copy=True)
    assert v["bound"] == "memory" and np.isnan(v["cu"]) and np.isnan(v["mu"])
    assert v["reason"] == "host-device transfer over the host link (2 MB)"


def test_threshold_is_the_documented_one():
    below = one(100.0, 0, (ROOF_REACHED - 0.01) * BW * 100e-6, 1e12)
    above = one(100.0, 0, (ROOF_REACHED + 0.01) * BW * 100e-6, 1e12)
    assert (below["bound"], above["bound"]) == ("latency", "memory")


def test_decide_is_the_rule_for_phases_and_counters():
    cu = np.array([0.6, 0.2, 0.1, np.nan, 0.9])
    mu = np.array([0.3, 0.7, 0.2, 0.5, 0.1])
    short = np.array([False, False, False, False, True])
    assert [BOUNDS[b] for b in decide(cu, mu, short)] == ["compute", "memory", "latency", "unknown", "latency"]
    # counters that show a roof reached overrule the short-kernel rule
    assert BOUNDS[decide(cu, mu, short, np.array([False, False, False, False, True]))[4]] == "compute"


def test_vectorised_equals_one_by_one_and_words_each_reason_once():
    rng = np.random.default_rng(0)
    n = 400
    base = rng.choice([2.0, 40.0, 400.0], n)
    fl = rng.choice([np.nan, 0.0, 1e9, 3e10], n)
    nb = rng.choice([np.nan, 1e6, 1e9], n)
    blocks = rng.choice([8, 1000], n)
    f = classify(
        from_columns(
            base,
            flops=fl,
            bytes=nb,
            reads=nb,
            peak_flops=801.5e12,
            bandwidth=BW,
            peak="bf16",
            blocks=blocks,
            num_sms=132,
            kind=KERNEL,
        )
    )
    for i in range(0, n, 37):
        v = one(base[i], fl[i], nb[i], blocks=blocks[i], num_sms=132)
        assert (BOUNDS[f.bound[i]], f.reason[i]) == (v["bound"], v["reason"])
    assert len(set(f.reason.vocab)) == len(f.reason.vocab) <= 3 * 4 * 3 * 2  # one per distinct input, not per row


def test_peak_choice():
    assert peak_key("bf16", MATRIX, "nvjet", H200)[0] == "bf16"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma", H200)[0] == "fp32"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", H200)[0] == "tf32"
    assert peak_key("bf16", VECTOR, "softmax", H200)[0] == "fp32"
    assert peak_key("bf16", NONE, "copy", H200)[0] is None
    assert peak_key("bf16", MATRIX, "gemm", {"fp32": 15.7e12, "fp16": 125e12})[0] == "fp32"  # V100: no bf16 TC


def test_a_kernel_faster_than_the_table_peak_raises_the_roof():
    # LM-head GEMM at 869 TFLOP/s against a measured bf16 peak of 801.5: that benchmark is no
    # ceiling, so the roof is the datasheet's 989.4 (the kernel did not beat that)
    dur = np.array([100.0, 100.0, 100.0])
    fl = np.array([869e12, 400e12, 2000e12]) * 100e-6
    f = from_columns(
        dur,
        flops=fl,
        bytes=1e8,
        reads=1e8,
        peak_flops=801.5e12,
        bandwidth=BW,
        peak="bf16",
        estimated=np.array([False, False, True]),
    )
    f, adj = raise_roofs(f, lambda dev, pk: 989.4e12 if pk == "bf16" else None)
    assert adj == [
        {
            "device": 0,
            "peak": "bf16",
            "from": 801.5e12,
            "to": 989.4e12,
            "evidence": "exact_flops",
            "to_basis": "datasheet",
            "reason": adj[0]["reason"],
        }
    ]
    assert "869 TFLOP/s" in adj[0]["reason"] and "datasheet's dense bf16 peak of 989 TFLOP/s" in adj[0]["reason"]
    f = classify(f)
    assert (f.peak_flops == 989.4e12).all()
    assert f.compute_util[0] == pytest.approx(869 / 989.4) and f.note[0] & N_ROOF_RAISED
    assert f.compute_util[1] == pytest.approx(400 / 989.4)
    assert "raised to 989 TFLOP/s" in f.reason[0] and "raised" not in f.reason[1]
    # an estimate above even the raised roof does not move it: it is shown at the roof, and says so
    assert f.compute_util[2] == 1.0 and "FLOP estimate exceeds" in f.reason[2]
    # above the datasheet too: the FLOP count is suspect, the roof is the achieved rate, and the reason says so
    g, adj = raise_roofs(
        from_columns(
            100.0, flops=1100e12 * 100e-6, bytes=1e8, reads=1e8, peak_flops=801.5e12, bandwidth=BW, peak="bf16"
        ),
        lambda dev, pk: 989.4e12,
    )
    assert adj[0]["to"] == pytest.approx(1100e12) and adj[0]["to_basis"] == "achieved"
    assert "check the FLOP count" in adj[0]["reason"]
    assert classify(g).compute_util[0] == pytest.approx(1.0)
    # a kernel that holds only a share of its op's FLOPs, an estimate or an upper bound is no evidence
    for kw in ({"flops_exact": False}, {"estimated": True}, {"upper_bound": True}):
        h = from_columns(
            100.0, flops=869e12 * 100e-6, bytes=1e8, reads=1e8, peak_flops=801.5e12, bandwidth=BW, peak="bf16", **kw
        )
        assert raise_roofs(h, lambda dev, pk: 989.4e12)[1] == []


def test_measured_dram_traffic_raises_the_dram_roof_estimates_never_do():
    # counters measured 4.42 TB/s against a 4.24 TB/s copy benchmark: the datasheet's 4.8 is the roof
    f = from_columns(
        [300.0, 300.0], flops=0.0, bytes=1.45e9, reads=1.45e9, peak_flops=50.5e12, bandwidth=BW, peak="fp32"
    )
    measured = np.array([4.42e12, np.nan])
    g, adj = raise_roofs(f, lambda dev, pk: 4.8e12 if pk == "memory_bandwidth" else None, measured_dram=measured)
    assert [(a["peak"], a["from"], a["to"], a["evidence"], a["to_basis"]) for a in adj] == [
        ("memory_bandwidth", BW, 4.8e12, "measured_dram", "datasheet")
    ]
    assert (g.bandwidth == 4.8e12).all() and "4.42 TB/s" in adj[0]["reason"]
    # the same traffic as an estimate (1.45 GB in 300 µs = 4.83 TB/s) moves no roof
    assert raise_roofs(f, lambda dev, pk: 4.8e12)[1] == []


def test_traffic_above_dram_bandwidth_is_a_bytes_model_miss():
    # 1.5x what DRAM delivers, no reason to think part of it was in L2: the estimate is too high
    v = one(100.0, 1e8, 1.5 * BW * 100e-6, 50.5e12, peak="fp32")
    assert np.isnan(v["mu"]) and "served from L2" not in v["reason"]
    assert "bytes estimate too high by ≥1.5×" in v["reason"] and "6.36 TB/s > the 4.24 TB/s roof" in v["reason"]
    # no L2 known: the floor is the estimate itself, so the memory roof was reached
    assert v["bound"] == "memory" and "memory-bound" in v["reason"]
    # a 537 MB K/V stream cannot hide in a 60 MB L2: at least (537 - 63) MB came from DRAM
    dur = 537e6 / (1.2 * BW) * 1e6
    f = classify(
        from_columns(
            dur, flops=1e8, bytes=537e6, reads=537e6, peak_flops=50.5e12, bandwidth=BW, peak="fp32", l2_bytes=60 * 2**20
        )
    )
    assert np.isnan(f.memory_util[0]) and f.note[0] & N_BYTES_HIGH and BOUNDS[f.bound[0]] == "memory"
    assert f.memory_floor[0] == pytest.approx(min(1.0, (537e6 - 60 * 2**20) / 537e6 * 1.2))
    # most of it could have been in L2: the bound is unknown, never a false 100 %
    v = one(100.0, 1e6, 1.5 * BW * 100e-6, 50.5e12, peak="fp32", l2_bytes=0.9 * 1.5 * BW * 100e-6)
    assert v["bound"] == "unknown" and np.isnan(v["mu"])


def test_reads_of_a_tensor_just_written_are_l2_hits():
    # the safe-softmax where: 1.5x the roof, reading the softmax output just written (fits in L2):
    # L2 reuse is claimed, with the tensor; how much reached DRAM is unknown (never a false 100 %)
    nb = 1.5 * BW * 100e-6
    hint = "reads the bf16 [8, 16, 2048, 2048] tensor written 1 op earlier"
    f = classify(
        from_columns(
            100.0,
            flops=1e6,
            bytes=nb,
            reads=nb,
            peak_flops=50.5e12,
            bandwidth=BW,
            peak="fp32",
            l2_bytes=60 * 2**20,
            l2_reuse_bytes=0.6 * nb,
            l2_hint=[hint],
        )
    )
    assert f.note[0] & N_L2 and not f.note[0] & N_BYTES_HIGH and np.isnan(f.bytes_over_roof[0])
    assert np.isnan(f.memory_util[0]) and "likely served from L2" in f.reason[0] and hint in f.reason[0]
    # the floor (the estimate less a whole 63 MB L2: 573 MB) still reaches the roof
    assert BOUNDS[f.bound[0]] == "memory" and f.memory_floor[0] == pytest.approx(1.0)
