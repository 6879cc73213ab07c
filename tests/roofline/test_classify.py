from tb_attention_plugin.roofline.classify import ROOF_REACHED, classify, peak_key
from tb_attention_plugin.roofline.cost import MATRIX, NONE, VECTOR

H200 = {"bf16": 801.5e12, "fp32": 50.5e12, "tf32": 440.3e12, "fp16": 801.5e12}
BW = 4.24e12


def test_compute_bound_gemm():
    v = classify(100.0, 0.8 * 801.5e12 * 100e-6, 1e8, 801.5e12, BW, "bf16 peak")
    assert v.bound == "compute" and abs(v.compute_util - 0.8) < 1e-9 and "80%" in v.reason


def test_memory_bound_softmax():
    v = classify(100.0, 1e8, 0.9 * BW * 100e-6, 50.5e12, BW, "fp32 peak")
    assert v.bound == "memory" and v.memory_util > v.compute_util


def test_latency_bound_reasons():
    v = classify(2.0, 1e3, 1e4, 50.5e12, BW, "fp32 peak", blocks=4, num_sms=132, occupancy_pct=5)
    assert v.bound == "latency"
    assert "launch overhead" in v.reason and "4 blocks < 132 SMs" in v.reason and "occupancy 5%" in v.reason
    v = classify(500.0, 1e9, 1e8, 801.5e12, BW, "bf16 peak", blocks=1000, num_sms=132)
    assert v.bound == "latency" and "neither roof" in v.reason


def test_unknown_without_cost_or_peaks():
    assert classify(10.0, None, 1e6, 1e12, BW).bound == "unknown"
    assert classify(10.0, 1e6, 1e6, None, None).bound == "unknown"


def test_threshold_is_the_documented_one():
    just_below = classify(100.0, 0, (ROOF_REACHED - 0.01) * BW * 100e-6, 1e12, BW)
    just_above = classify(100.0, 0, (ROOF_REACHED + 0.01) * BW * 100e-6, 1e12, BW)
    assert (just_below.bound, just_above.bound) == ("latency", "memory")


def test_peak_choice():
    assert peak_key("bf16", MATRIX, "nvjet", H200)[0] == "bf16"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma", H200)[0] == "fp32"
    assert peak_key("fp32", MATRIX, "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", H200)[0] == "tf32"
    assert peak_key("bf16", VECTOR, "softmax", H200)[0] == "fp32"
    assert peak_key("bf16", NONE, "copy", H200)[0] is None
    assert peak_key("bf16", MATRIX, "gemm", {"fp32": 15.7e12, "fp16": 125e12})[0] == "fp32"   # V100: no bf16 TC
