"""The 12-layer GPT training traces recorded on the H200 for the large-trace benchmark
(benchmarks/traces/, made by benchmarks/generate_gpt12_trace.py: GPT-2 small shapes, batch 8,
seq 1024, bf16 autocast, causal attention, shapes + stacks + memory events, 2 profiled steps)."""

import collections
import os

import pytest

from helpers import ROOT
from tb_attention_plugin.analyze import analyze_path

LAYERS, B, H, S, D = 12, 8, 12, 1024, 64


@pytest.fixture(scope="module")
def reports():
    out = {}
    for attn in ("naive", "sdpa"):
        rep = analyze_path(os.path.join(ROOT, "benchmarks", "traces", f"gpt12_{attn}_train_mem.pt.trace.json.gz"))
        assert rep["status"] == "ok", rep
        out[attn] = rep
    return out


def last_step(rep):
    name = rep["steps"][-1]["name"]
    return [k for k in rep["kernels"] if k["step"] == name]


def test_naive_attention_phases_per_layer(reports):
    rep = reports["naive"]
    assert [s["name"] for s in rep["steps"]] == ["ProfilerStep#3", "ProfilerStep#4"]
    assert rep["instances"] == 2 * LAYERS
    ks = last_step(rep)
    att = [k for k in ks if k["attention"]]
    pairs = {(k["phase"], k["direction"]) for k in att}
    core = ("qk_matmul", "scale", "mask", "softmax", "pv_matmul")
    assert pairs == {(p, d) for p in ("qkv_proj", *core, "out_proj", "layout") for d in ("forward", "backward")}
    assert rep["fused_time_us"] == 0
    # every layer's attention module, and nothing from the MLPs, the norms or the loss
    assert {k["module_path"].split("/")[1] for k in att} == {f"Block_{i}" for i in range(LAYERS)}
    assert all("Attention" in k["module_path"] for k in att)
    assert not any(k["attention"] for k in ks if k["module_path"] and "MLP" in k["module_path"])
    # QK^T: one GEMM per layer, B*H batched [S,64]x[64,S]
    qk = [k for k in att if k["phase"] == "qk_matmul" and k["direction"] == "forward" and k["kind"] == "kernel"]
    assert len(qk) == LAYERS
    assert all(k["flops"] == pytest.approx(2 * B * H * S * S * D, rel=1e-3) for k in qk)
    soft = [k for k in att if k["phase"] == "softmax" and k["direction"] == "forward"]
    assert len(soft) == LAYERS and all(k["bound"] == "memory" for k in soft)


def test_naive_attention_memory_and_advice(reports):
    rep = reports["naive"]
    assert [a["id"] for a in rep["advice"]][:1] == ["fuse_attention"]
    mem = rep["memory"]
    assert "score_matrix" in {f["code"] for f in mem["flags"]}
    peak = mem["devices"][0]["attention_peak"]
    top = peak["held_by"][0]
    # the fp32 softmax outputs of the forward pass, one [B, H, S, S] per layer, hold the peak
    assert top["score_matrix"] and top["shape"] == [B, H, S, S] and top["dtype"] == "fp32"
    assert top["op"] == "aten::softmax" and top["count"] == LAYERS


def test_sdpa_runs_cudnn_fused_attention(reports):
    rep = reports["sdpa"]
    assert rep["instances"] == 2 * LAYERS
    ks = last_step(rep)
    att = [k for k in ks if k["attention"]]
    assert {k["phase"] for k in att} == {"qkv_proj", "fused_attention", "out_proj", "layout"}
    assert rep["unfused_core_time_us"] == 0
    fused = [k for k in att if k["phase"] == "fused_attention" and k["kind"] == "kernel"]
    by_name = collections.Counter(
        (
            "fprop"
            if "flash_fprop" in k["name"]
            else "bprop"
            if "flash_bprop" in k["name"]
            else "dot_do_o"
            if "dot_do_o" in k["name"]
            else "convert_dq"
            if "convert_dq" in k["name"]
            else k["name"],
            k["direction"],
        )
        for k in fused
    )
    assert by_name == {
        ("fprop", "forward"): LAYERS,
        ("bprop", "backward"): LAYERS,
        ("dot_do_o", "backward"): LAYERS,
        ("convert_dq", "backward"): LAYERS,
    }
    fwd = [k for k in fused if "flash_fprop" in k["name"]]
    for k in fwd:
        d = k["cost_detail"]
        assert (d["b"], d["h"], d["sq"], d["sk"], d["d"], d["causal"]) == (B, H, S, S, D, True)
        assert k["flops"] == pytest.approx(4 * B * H * S * S * D * (S + 1) / (2 * S), rel=1e-3)
        assert k["bound"] != "memory" and k["compute_util"] > k["memory_util"]
    assert "fuse_attention" not in {a["id"] for a in rep["advice"]}
