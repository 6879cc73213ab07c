"""The one classifier (roofline/classify.py), as the report uses it: on a kernel frame."""
import numpy as np

from tb_attention_plugin.roofline.classify import (BOUNDS, ROOF_REACHED, SHORT_KERNEL_US, classify, decide,
                                                   peak_key)
from tb_attention_plugin.roofline.cost import MATRIX, NONE, VECTOR
from tb_attention_plugin.roofline.frame import from_columns
from tb_attention_plugin.trace.records import KERNEL, MEMCPY

H200 = {"bf16": 801.5e12, "fp32": 50.5e12, "tf32": 440.3e12, "fp16": 801.5e12}
BW = 4.24e12


def one(dur_us, flops, nbytes, peak_flops=801.5e12, bw=BW, peak="bf16", **kw):
    f = classify(from_columns(dur_us, flops=flops, bytes=nbytes, reads=nbytes, peak_flops=peak_flops,
                              bandwidth=bw, peak=peak, **kw))
    return {"bound": BOUNDS[f.bound[0]], "reason": f.reason[0], "cu": f.compute_util[0], "mu": f.memory_util[0]}


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
    assert v["reason"] == ("only 3.0 µs: launch overhead dominates; grid of 4 blocks < 132 SMs; "
                           "estimated occupancy 5% (90% of bandwidth, 0% of fp32 peak)")
    # the rule is for kernels: a short device copy that reaches bandwidth stays memory-bound
    v = one(3.0, 0, 0.9 * BW * 3e-6, np.nan, peak=None, kind=MEMCPY)
    assert v["bound"] == "memory"


def test_latency_when_neither_roof_is_reached():
    v = one(500.0, 1e9, 1e8, blocks=1000, num_sms=132)
    assert v["bound"] == "latency" and v["reason"].startswith("neither roof reached")
    assert SHORT_KERNEL_US < 500.0


def test_short_kernel_without_cost_is_latency_and_says_what_is_missing():
    v = one(2.0, np.nan, np.nan)
    assert v["bound"] == "latency" and v["reason"] == "only 2.0 µs: launch overhead dominates (FLOPs and bytes unknown)"


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
    fl = rng.choice([np.nan, 0.0, 1e9, 3e11], n)
    nb = rng.choice([np.nan, 1e6, 1e9], n)
    blocks = rng.choice([8, 1000], n)
    f = classify(from_columns(base, flops=fl, bytes=nb, reads=nb, peak_flops=801.5e12, bandwidth=BW, peak="bf16",
                              blocks=blocks, num_sms=132, kind=KERNEL))
    for i in range(0, n, 37):
        v = one(base[i], fl[i], nb[i], blocks=blocks[i], num_sms=132)
        assert (BOUNDS[f.bound[i]], f.reason[i]) == (v["bound"], v["reason"])
    assert len(set(f.reason.vocab)) == len(f.reason.vocab) < 30


def test_peak_choice():
    assert peak_key("bf16", MATRIX, "nvjet", H200)[0] == "bf16"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma", H200)[0] == "fp32"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", H200)[0] == "tf32"
    assert peak_key("bf16", VECTOR, "softmax", H200)[0] == "fp32"
    assert peak_key("bf16", NONE, "copy", H200)[0] is None
    assert peak_key("bf16", MATRIX, "gemm", {"fp32": 15.7e12, "fp16": 125e12})[0] == "fp32"   # V100: no bf16 TC
