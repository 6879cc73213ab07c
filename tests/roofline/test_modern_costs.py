"""The cost model on H200 traces of issue #12's forms (tests/data/modern): FP8 projections, FlexAttention,
DeepSeek-V3-style MoE."""

import glob
import os

import numpy as np
import pytest

from helpers import ROOT

MODERN = os.path.join(ROOT, "tests", "data", "modern")


def trace(name):
    paths = glob.glob(os.path.join(MODERN, name, "*.pt.trace.json.gz"))
    if not paths:
        pytest.skip(f"tests/data/modern/{name} not available")
    return paths[0]


def attributed(name):
    from tb_attention_plugin.roofline.attribute import attribute
    from tb_attention_plugin.trace.correlate import link
    from tb_attention_plugin.trace.records import load_trace

    t = load_trace(trace(name))
    return t, attribute(t, link(t))


def kernels_of(t, a, op):
    names = t.strings
    return [i for i in np.flatnonzero(a.owner >= 0).tolist() if names[t.ranges["name"][a.owner[i]]] == op]


def test_fp8_scaled_mm_flops_and_roof():
    from tb_attention_plugin.analyze import analyze_path

    r = analyze_path(trace("fp8_attn_fwd"), cache=None)
    mm = [k for k in r["kernels"] if k["cost_op"] == "aten::_scaled_mm"]
    assert len(mm) == 4
    for k in mm:
        assert k["flops"] == pytest.approx(2.0 * 8192 * 2048 * 2048, rel=1e-3)
        assert k["dtype"] == "fp8" and k["peak"] == "fp8" and k["peak_flops_per_s"] == 1467e12
        assert k["compute_util"] <= 1.0
    # the quantisation around them (abs, amax, scale, clamp, cast to e4m3) is costed, never unknown
    ops = {k["cost_op"] for k in r["kernels"] if k["bound"] != "unknown"}
    assert {"aten::abs", "aten::amax", "aten::clamp", "aten::mul", "aten::copy_"} <= ops
    assert not [k for k in r["kernels"] if k["bound"] == "unknown" and k["dur_us"] >= 5]


@pytest.mark.parametrize("name", ["flex_causal_fwdbwd", "flex_swa_fwdbwd", "hf_llama_flex_fwdbwd"])
def test_flex_templates_are_dense_upper_bounds(name):
    t, a = attributed(name)
    flex = [o for o, c in a.costs.items() if c is not None and c.upper_bound]
    assert flex, "no FlexAttention template costed"
    for o in flex:
        c = a.costs[o]
        d = c.detail
        fwd = 4.0 * d["b"] * d["h"] * d["sq"] * d["sk"] * d["d"]
        assert c.flops in (pytest.approx(fwd), pytest.approx(2.5 * fwd))
        assert c.flops == c.flops_dense and c.engine == "matrix"
    assert any("backward" in t.strings[t.ranges["name"][o]] for o in flex)


def test_moe_grouped_gemm_flops_go_to_the_gemm_not_its_setup_kernel():
    t, a = attributed("hf_deepseek_v3_fwdbwd")
    ks = kernels_of(t, a, "aten::_grouped_mm")
    assert ks
    names = t.strings
    for i in ks:
        kn = names[t.gpu["name"][i]]
        if "prepare_grouped_gemm_data" in kn:
            assert a.flops[i] == 0
        else:
            assert a.flops[i] > 0
    # routing work has a cost
    for op in ("aten::topk", "aten::sort", "aten::gather", "aten::histc", "aten::scatter_add_"):
        got = kernels_of(t, a, op)
        assert got and all(np.isfinite(a.bytes[i]) for i in got), op


@pytest.mark.parametrize("name", ["fp8_attn_fwd", "hf_deepseek_v3_fwdbwd", "mla_moe_hand_fwdbwd", "decode_graph_eager"])
def test_no_compute_util_above_one_from_an_exact_cost(name):
    """Utilisation > 1 against a measured peak is an impossible number; only an upper-bound cost may
    exceed (and the engine words it as a bound)."""
    from tb_attention_plugin.analyze import analyze_path

    r = analyze_path(trace(name), cache=None)
    over = [(k["name"][:60], k["compute_util"]) for k in r["kernels"] if (k["compute_util"] or 0) > 1.0]
    assert not over


def test_l2_reuse_marks_the_mask_comparison_that_reads_what_was_just_written():
    """flex_swa: the sliding-window mask's ``lt`` reads the [2048, 2048] int64 difference the
    previous op wrote (33.6 MB, in the 60 MB L2): 6 TB/s from 'DRAM' otherwise. Tiny scalar
    operands from L2 are not worth a note."""
    from tb_attention_plugin.roofline.cost import l2_reuse

    t, a = attributed("flex_swa_fwdbwd")
    order = np.argsort(t.gpu["ts"], kind="stable")
    costs = [a.costs.get(int(a.owner[i])) if a.owner[i] >= 0 else None for i in order.tolist()]
    out = l2_reuse(costs, 60 * 2**20)
    noted = {
        t.strings[t.ranges["name"][a.owner[i]]]: c for i, c in zip(order.tolist(), out) if c is not None and c.l2_hint
    }
    assert "aten::lt" in noted and "int64 [2048, 2048]" in noted["aten::lt"].l2_hint
    assert all(c.l2_bytes >= 2**20 for c in noted.values())
