"""Roofs from the best evidence (roofline/devices.py, classify.raise_roofs, measured.join): per
dtype and for DRAM the highest of the benchmark, the datasheet where a real kernel beats the
benchmark, and the best that exact evidence shows (a kernel with exact FLOPs; DRAM traffic
measured by hardware counters). A bytes *estimate* is never evidence. Every raise is listed in
``device.roof_adjustments`` and shown on the CLI's device line."""

import glob
import os

import pytest
from test_measured import write_ncu

from helpers import ROOT
from synth import BF16, SynthTrace, naive_attention
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.formats import device_line
from tb_attention_plugin.options import Options
from tb_attention_plugin.roofline import devices as D

BENCH = D.load_user_peaks("bf16=801.5,memory=4.24")  # the H200's benchmarks, as a user's roofs


def lm_head(tmp_path, tflops: float = 856.0) -> str:
    """An LM-head linear: one GEMM of exact FLOPs (2·M·N·K) and a fill kernel under the same op,
    so the op's bytes are split by duration while the GEMM holds all of its FLOPs."""
    t = SynthTrace()
    t.meta.update(record_shapes=1)
    m, k, n = 8192, 4096, 32000
    dur = 2 * m * n * k / (tflops * 1e12) * 1e6
    with t.step(1):
        with t.module("LMHead_0"):
            with t.op("aten::linear", dims=[[m, k], [n, k]], types=[BF16, BF16]):
                with t.op("aten::mm", dims=[[m, k], [k, n]], types=[BF16, BF16]):
                    t.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dur=round(dur, 3))
                    t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", dur=2)
    return t.write(tmp_path / "lm.pt.trace.json")


def test_an_lm_head_gemm_with_exact_flops_raises_the_roof_to_the_datasheet(tmp_path):
    rep = analyze_path(lm_head(tmp_path), Options(user_peaks=BENCH))
    gemm = next(k for k in rep["kernels"] if k["name"].startswith("nvjet"))
    # its op's cost is split with the fill kernel (estimated bytes), but its FLOPs are the op's own
    assert gemm["cost_share"] < 1 and gemm["flops"] == pytest.approx(2 * 8192 * 4096 * 32000, rel=1e-3)
    adj = [a for a in rep["device"]["roof_adjustments"] if a["peak"] == "bf16"]
    assert len(adj) == 1 and adj[0]["evidence"] == "exact_flops" and adj[0]["to_basis"] == "datasheet"
    assert adj[0]["from"] == 801.5e12 and adj[0]["to"] == pytest.approx(989.4e12)
    assert "856 TFLOP/s" in adj[0]["reason"]
    assert rep["device"]["peaks"]["flops"]["bf16"] == pytest.approx(989.4e12)
    assert gemm["compute_util"] == pytest.approx(856 / 989.4, rel=2e-3) and "raised to 989" in gemm["bound_reason"]
    line = device_line(rep)
    assert "bf16 989 TFLOP/s (datasheet; a kernel here with exact FLOPs beat 802 TFLOP/s)" in line
    # above the datasheet too: the roof is the achieved rate and the count is to be checked
    rep = analyze_path(lm_head(tmp_path, 1050.0), Options(user_peaks=BENCH))
    adj = [a for a in rep["device"]["roof_adjustments"] if a["peak"] == "bf16"][0]
    assert adj["to_basis"] == "achieved" and adj["to"] == pytest.approx(1050e12, rel=1e-3)
    assert "check the FLOP count" in adj["reason"] and "check the count" in device_line(rep)


def test_the_h200_roofs_are_the_datasheets_where_real_kernels_beat_the_benchmarks():
    """On every H200 trace: bf16/fp16 at the datasheet's 989.4 (GEMMs with exact FLOPs reach
    926), DRAM at 4.8 TB/s (Nsight Compute measured 4.42); fp32, TF32 and fp8 stay measured."""
    path = glob.glob(os.path.join(ROOT, "tests", "data", "modern", "decode_graph_eager", "*.json.gz"))[0]
    rep = analyze_path(path)
    d = rep["device"]
    assert d["basis"] == "measured"
    assert d["peaks"]["flops"]["bf16"] == pytest.approx(989.4e12) and d["peaks"]["memory_bandwidth"] == 4.8e12
    assert (d["peaks"]["flops"]["fp32"], d["peaks"]["flops"]["tf32"]) == (50.5e12, 440.3e12)
    got = {a["peak"]: a for a in d["roof_adjustments"]}
    assert set(got) == {"bf16", "fp16", "memory_bandwidth"}
    for a in got.values():
        assert set(a) == {"peak", "from", "to", "evidence", "to_basis", "reason"} and a["evidence"] == "recorded"
    line = device_line(rep)
    assert "memory 4.8 TB/s (datasheet; a real kernel beat the 4.24 TB/s benchmark)" in line
    # the datasheet basis raises nothing: those are the datasheet's figures already
    ds = analyze_path(path, Options(peak_basis="datasheet"))
    assert ds["device"]["roof_adjustments"] == [] and "datasheet" not in device_line(ds).split("peaks:")[1]


def test_measured_dram_traffic_raises_the_dram_roof(tmp_path):
    """ncu rows beside the trace measured 4.42 TB/s against a 4.24 TB/s roof: the roof is the
    datasheet's 4.8 TB/s, and the model's kernels are measured against it."""
    t = SynthTrace()
    with t.step(1):
        naive_attention(t)
    path = t.write(tmp_path / "w.1.pt.trace.json")
    ks = [e for e in t.events if e.get("cat") == "kernel"]
    rows = [(k["name"], k["dur"] * 1e3, 85.0, 2.0, 1.0, 1e6) for k in ks]
    rows[0] = (ks[0]["name"], 1000.0 * 1e3, 92.0, 0.0, 1.0, 4.42e12 * 1000e-6)  # 4.42 TB/s over 1 ms
    write_ncu(tmp_path / "w.1.ncu.csv", rows)
    rep = analyze_path(path, Options(user_peaks=BENCH), cache=None)
    assert rep["measurements"]["kernels_joined"] == len(ks)
    adj = [a for a in rep["device"]["roof_adjustments"] if a["peak"] == "memory_bandwidth"]
    assert len(adj) == 1 and (adj[0]["from"], adj[0]["to"]) == (4.24e12, 4.8e12)
    assert adj[0]["evidence"] == "measured_dram" and "4.42 TB/s" in adj[0]["reason"]
    assert rep["device"]["peaks"]["memory_bandwidth"] == 4.8e12
    # without that row nothing is raised: the model's own estimates are no evidence
    write_ncu(tmp_path / "w.1.ncu.csv", [(k["name"], k["dur"] * 1e3, 85.0, 2.0, 1.0, 1e6) for k in ks])
    rep = analyze_path(path, Options(user_peaks=BENCH), cache=None)
    assert not [a for a in rep["device"]["roof_adjustments"] if a["peak"] == "memory_bandwidth"]


def test_a_dense_upper_bound_is_never_an_achieved_rate():
    path = glob.glob(os.path.join(ROOT, "tests", "data", "modern", "flex_swa_fwdbwd", "*.json.gz"))[0]
    rep = analyze_path(path)
    flex = [k for k in rep["kernels"] if k["upper_bound"]]
    assert flex
    for k in flex:
        assert k["achieved_flops_per_s"] is None and k["achieved_bytes_per_s"] is None
        assert k["upper_bound_flops_per_s"] > 0 and k["upper_bound_bytes_per_s"] > 0
    others = [k for k in rep["kernels"] if not k["upper_bound"]]
    assert all(k["upper_bound_flops_per_s"] is None for k in others)
    ph = [p for p in rep["phases"] if p["upper_bound"]]
    assert ph and all(p["achieved_flops_per_s"] is None and p["upper_bound_flops_per_s"] for p in ph)
