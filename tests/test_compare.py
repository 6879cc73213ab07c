"""The comparison engine (compare.py) on the H200 sample traces and on synthetic pairs."""

import os

import pytest

from helpers import ROOT, sample
from synth import SynthTrace
from synth_sdpa import decode_pair, sdpa_call
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.compare import (
    aggregate,
    check,
    compare_reports,
    kernel_group,
    kernel_groups,
    render,
    summarize,
)

BACKENDS = ("sdpa_flash_s2048_fwd", "sdpa_efficient_s2048_fwd", "sdpa_cudnn_s2048_fwd", "sdpa_math_s2048_fwd")


@pytest.fixture(scope="module")
def reports():
    out = {}
    for run in BACKENDS + ("gpt4l_sdpa_train", "gpt4l_naive_train", "naive_bf16_s2048_fwd"):
        rep = analyze_path(sample(run))
        assert rep["status"] == "ok"
        out[run] = rep
    return out


@pytest.mark.parametrize(
    "name,group",
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "nvjet_sm90_tst"),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst"),
        ("nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NTT", "nvjet_sm90_tst"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, "
            "Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true>(pytorch_flash::Flash_fwd_params)",
            "pytorch_flash::flash_fwd_kernel",
        ),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
            "kernel__5x_cublas",
            "sm80_xmma_gemm_f32f32_f32f32_f32",
        ),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_"
            "kernel__5x_cublas",
            "sm80_xmma_gemm_f32f32_f32f32_f32",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
            "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
            "fmha_cutlassF_bf16_aligned",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, int)",
            "softmax_warp_forward",
        ),
        ("triton_red_fused__softmax_div_masked_fill_3", "triton_red_fused__softmax_div_masked_fill"),
        ("my_kernel_0x7f3a12", "my_kernel"),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD"),
    ],
)
def test_kernel_group_rule(name, group):
    assert kernel_group(name) == group


def _side_time(side):
    return sum(g["time_us"] for g in side["kernel_groups"])


@pytest.mark.parametrize("new", [r for r in BACKENDS if r != "sdpa_flash_s2048_fwd"])
def test_backends_against_flash_match_individual_reports(reports, new):
    base, rep = reports["sdpa_flash_s2048_fwd"], reports[new]
    c = compare_reports(base, rep, top=0)
    assert c["normalization"]["mode"] == "total"  # both traces hold 2 steps
    att = c["totals"]["attention_time_us"]
    assert att["base"] == base["attention_time_us"] and att["new"] == rep["attention_time_us"]
    assert att["delta"] == pytest.approx(rep["attention_time_us"] - base["attention_time_us"], abs=1e-3)
    assert att["speedup"] == pytest.approx(base["attention_time_us"] / rep["attention_time_us"], rel=1e-3)
    assert att["delta_pct"] == pytest.approx(100 * (rep["attention_time_us"] / base["attention_time_us"] - 1), abs=0.01)
    # every phase row carries the individual report's figures
    for side, r in (("base", base), ("new", rep)):
        mine = {(p["phase"], p["direction"]): p[side] for p in c["phases"] if p[side]}
        theirs = {(p["phase"], p["direction"]): p for p in r["phases"]}
        assert set(mine) == set(theirs)
        for k, p in theirs.items():
            assert mine[k]["time_us"] == p["time_us"] and mine[k]["bound"] == p["bound"]
            assert mine[k]["memory_util"] == p["memory_util"] and mine[k]["kernels"] == p["kernels"]
    # kernel groups cover every attention kernel
    assert sum(g["base"]["time_us"] for g in c["kernel_groups"] if g["base"]) == pytest.approx(
        base["attention_time_us"], abs=0.01
    )
    assert sum(g["new"]["time_us"] for g in c["kernel_groups"] if g["new"]) == pytest.approx(
        rep["attention_time_us"], abs=0.01
    )
    core = [s for s in c["sections"] if s["section"] == "core"]
    assert len(core) == 1 and core[0]["base"]["implementation"] == "fused"
    assert core[0]["new"]["time_us"] == pytest.approx(rep["core_attention_time_us"], abs=0.01)


def test_math_is_slower_than_every_fused_backend(reports):
    math = reports["sdpa_math_s2048_fwd"]
    for run in BACKENDS[:3]:
        c = compare_reports(reports[run], math)
        assert c["verdict"]["faster"] == "base", run
        assert c["totals"]["attention_time_us"]["speedup"] < 0.1
        assert "slower" in c["verdict"]["summary"]
        # fused vs decomposed core attention side by side
        core = next(s for s in c["sections"] if s["section"] == "core" and s["direction"] == "forward")
        assert core["base"]["implementation"] == "fused" and core["new"]["implementation"] == "unfused"
        assert [p["phase"] for p in core["new"]["parts"]] == ["qk_matmul", "scale", "mask", "softmax", "pv_matmul"]
        assert core["summary"] == "fused attention vs QK^T matmul + scale + mask + softmax + PV matmul"
        assert core["new"]["unfused_time_us"] == pytest.approx(math["unfused_core_time_us"], abs=0.01)
    # and the reverse direction is an improvement
    c = compare_reports(math, reports["sdpa_cudnn_s2048_fwd"])
    assert c["verdict"]["faster"] == "new" and c["totals"]["attention_time_us"]["speedup"] > 10


def test_gpt_naive_vs_sdpa(reports):
    sdpa, naive = reports["gpt4l_sdpa_train"], reports["gpt4l_naive_train"]
    c = compare_reports(sdpa, naive)
    assert c["verdict"]["faster"] == "base"
    assert c["totals"]["backward_time_us"]["delta"] > 0 and c["totals"]["forward_time_us"]["delta"] > 0
    dirs = {(s["section"], s["direction"]) for s in c["sections"]}
    assert {("core", "forward"), ("core", "backward"), ("projections", "forward"), ("projections", "backward")} <= dirs
    bwd_core = next(s for s in c["sections"] if s["section"] == "core" and s["direction"] == "backward")
    assert bwd_core["base"]["implementation"] == "fused" and bwd_core["new"]["implementation"] == "unfused"
    # projections are the same model on both sides: within 20 %
    proj = next(s for s in c["sections"] if s["section"] == "projections" and s["direction"] == "forward")
    assert abs(proj["delta_pct"]) < 20
    # advice to fuse appears in the naive run only
    assert "fuse_attention" in c["advice"]["only_new"]
    assert "fuse_attention" not in [a["id"] for a in c["advice"]["base"]]
    text = render(c)
    assert "core attention bwd" in text and "Top kernel groups" in text


def test_kernel_groups_merge_tile_variants(reports):
    groups = kernel_groups(reports["gpt4l_sdpa_train"]["kernels"])
    qkv = [
        g for g in groups if g["group"] == "nvjet_sm90_tst" and g["phase"] == "qkv_proj" and g["direction"] == "forward"
    ]
    assert len(qkv) == 1 and len(qkv[0]["names"]) >= 1
    assert qkv[0]["time_us"] == pytest.approx(sum(qkv[0]["names"].values()), abs=0.01)


def test_per_step_normalisation(tmp_path):
    def trace(steps, dur):
        t = SynthTrace()
        for s in range(steps):
            with t.step(s + 1):
                sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, dur=dur)
        return analyze_path(t.write(tmp_path / f"s{steps}.json"))

    two, four = trace(2, 100.0), trace(4, 100.0)
    c = compare_reports(two, four)
    assert c["normalization"] == {
        "mode": "per_step",
        "base_divisor": 2,
        "new_divisor": 4,
        "base_steps": 2,
        "new_steps": 4,
        "unit": "per step",
    }
    att = c["totals"]["attention_time_us"]
    assert att["base"] == pytest.approx(100.0) and att["new"] == pytest.approx(100.0)
    assert c["verdict"]["faster"] == "same"
    assert any("per-step averages" in n for n in c["notes"])
    assert c["phases"][0]["base"]["kernels"] == 1 and c["phases"][0]["new"]["kernels"] == 1
    # totals can be asked for explicitly
    t = compare_reports(two, four, normalize="total")
    assert t["totals"]["attention_time_us"]["new"] == pytest.approx(400.0)
    assert check(c, 5)["passed"] and not check(t, 5)["passed"]


def test_aggregate_sums_traces(reports):
    a = reports["sdpa_flash_s2048_fwd"]
    agg = aggregate([summarize(a), summarize(a)], label="dir")
    assert agg["traces"] == 2 and agg["steps"] == 4
    assert agg["totals"]["attention_time_us"] == pytest.approx(2 * a["attention_time_us"], abs=0.01)
    assert agg["phases"][0]["time_us"] == pytest.approx(2 * a["phases"][0]["time_us"], abs=0.01)
    assert agg["phases"][0]["memory_util"] == pytest.approx(a["phases"][0]["memory_util"], abs=1e-4)
    assert agg["phases"][0]["bound"] == a["phases"][0]["bound"]
    c = compare_reports(a, agg)  # 2 steps vs 4: per step, the same
    assert c["verdict"]["faster"] == "same" and c["totals"]["attention_time_us"]["delta"] == 0


def test_check_budget(reports):
    flash, math = reports["sdpa_flash_s2048_fwd"], reports["sdpa_math_s2048_fwd"]
    bad = check(compare_reports(flash, math), 10)
    assert not bad["passed"] and bad["failures"] == ["regression"]
    e = bad["explanation"]
    assert e.startswith("Attention time regressed by +3") and "softmax fwd" in e and "ms" in e
    assert "from fused attention" in e and "to QK^T matmul + scale + mask + softmax + PV matmul" in e
    assert check(compare_reports(math, flash), 10)["passed"]
    assert check(compare_reports(flash, flash), 0)["passed"]
    share = check(compare_reports(flash, flash), None, 0.5)
    assert not share["passed"] and share["failures"] == ["attention_share"]


def test_summary_without_kernel_rows_still_compares(reports):
    """The dashboard may hold a report without its kernel rows: groups come from top_kernels."""
    a = {k: v for k, v in reports["sdpa_flash_s2048_fwd"].items() if k != "kernels"}
    b = {k: v for k, v in reports["sdpa_math_s2048_fwd"].items() if k != "kernels"}
    c = compare_reports(a, b)
    assert c["kernel_groups"] and c["base"]["kernel_groups_source"] == "phase_top_kernels"
    assert c["totals"]["attention_time_us"]["new"] == reports["sdpa_math_s2048_fwd"]["attention_time_us"]


# -- decode with a KV cache and GQA: math vs flash ------------------------------------------------


def _validation_pair():
    d = os.path.join(ROOT, "sample_traces", "validation")
    f, m = os.path.join(d, "decode_gqa_flash"), os.path.join(d, "decode_gqa_math")
    return (f, m) if os.path.isdir(f) and os.path.isdir(m) else None


def _one(d):
    from tb_attention_plugin.trace.files import expand_paths

    files = [f for f, _ in expand_paths([d])]
    assert len(files) == 1, files
    return analyze_path(files[0])


@pytest.mark.skipif(_validation_pair() is None, reason="sample_traces/validation/decode_gqa_* not in this checkout")
def test_decode_gqa_math_vs_flash_h200():
    """One GQA decode step (B8, 32 query / 8 KV heads, 8192 cached tokens, D128 bf16) on an H200."""
    f, m = _validation_pair()
    flash, math = _one(f), _one(m)
    c = compare_reports(flash, math)
    assert c["verdict"]["faster"] == "base" and c["totals"]["attention_time_us"]["delta_pct"] > 100
    core = next(s for s in c["sections"] if s["section"] == "core")
    assert core["base"]["implementation"] == "fused" and core["new"]["implementation"] == "unfused"
    assert core["base"]["time_us"] == pytest.approx(flash["core_attention_time_us"], abs=0.01)
    assert core["new"]["time_us"] == pytest.approx(math["core_attention_time_us"], abs=0.01)
    groups = {g["group"] for g in c["kernel_groups"] if g["base"]}
    assert "pytorch_flash::flash_fwd_splitkv_kernel" in groups
    r = check(c, 10)
    assert not r["passed"] and r["failures"] == ["regression"]
    assert check(compare_reports(math, flash), 10)["passed"]


@pytest.mark.skipif(_validation_pair() is None, reason="sample_traces/validation/decode_gqa_* not in this checkout")
def test_check_cli_decode_gqa_h200(capsys):
    from tb_attention_plugin.cli import main

    f, m = _validation_pair()
    assert main(["check", m, "--baseline", f, "--max-regression", "10"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: Attention time regressed") and "fused attention" in out


def test_decode_gqa_math_vs_flash_synthetic(tmp_path):
    f, m = decode_pair(tmp_path)
    flash, math = analyze_path(f), analyze_path(m)
    c = compare_reports(flash, math)
    assert c["verdict"]["faster"] == "base"
    assert c["totals"]["attention_time_us"]["new"] > 10 * c["totals"]["attention_time_us"]["base"]
    core = next(s for s in c["sections"] if s["section"] == "core")
    assert core["base"]["implementation"] == "fused" and core["new"]["implementation"] == "unfused"
    r = check(c, 10)
    assert not r["passed"] and "Attention time regressed" in r["explanation"]
    assert check(compare_reports(math, flash), 10)["passed"]


@pytest.mark.parametrize(
    "base,new,base_label,new_label",
    [
        ("sdpa_cudnn_s2048_fwd", "sdpa_flash_s2048_fwd", "cuDNN (SDPA)", "FlashAttention (SDPA)"),
        ("sdpa_efficient_s2048_fwd", "sdpa_flash_s2048_fwd", "mem-efficient CUTLASS (SDPA)", "FlashAttention (SDPA)"),
        ("sdpa_math_s2048_fwd", "sdpa_cudnn_s2048_fwd", "SDPA math backend", "cuDNN (SDPA)"),
        ("naive_bf16_s2048_fwd", "sdpa_flash_s2048_fwd", "eager (decomposed)", "FlashAttention (SDPA)"),
    ],
)
def test_compare_names_the_backend_change(reports, base, new, base_label, new_label):
    c = compare_reports(reports[base], reports[new])
    be = c["backends"]
    assert (be["base_label"], be["new_label"], be["changed"]) == (base_label, new_label, True)
    assert f"attention backend changed: {base_label} → {new_label}" in c["verdict"]["summary"]
    assert c["base"]["backend"] == base_label and c["new"]["backend"] == new_label
    assert be["base"][0]["time_us"] == pytest.approx(reports[base]["core_attention_time_us"], rel=0.02)
    assert f"{base_label} → {new_label}" in render(c)
    # the gate's failure paragraph names both (the slower side regressed)
    slow, fast = (base, new) if reports[base]["attention_time_us"] < reports[new]["attention_time_us"] else (new, base)
    r = check(compare_reports(reports[slow], reports[fast]), max_regression_pct=1.0)
    assert not r["passed"] and "The attention backend changed:" in r["explanation"]


def test_compare_same_backend_says_so(reports):
    c = compare_reports(reports["sdpa_flash_s2048_fwd"], reports["sdpa_flash_s2048_fwd"])
    assert not c["backends"]["changed"]
    assert c["verdict"]["summary"].endswith("attention backend: FlashAttention (SDPA) on both sides")


def test_backends_of_the_other_implementations():
    """torch.compile (Triton kernels), the math backend seen in the op tree, library kernels."""
    from tb_attention_plugin.attention.backends import backends, fused_backend

    rows = [
        {
            "attention": True,
            "phase": "qk_matmul",
            "direction": "forward",
            "dur_us": 5.0,
            "op": "aten::bmm",
            "name": "nvjet_sm90_tst_256x128",
            "scope": "nn.Module: A",
            "id": 0,
        },
        {
            "attention": True,
            "phase": "softmax",
            "direction": "forward",
            "dur_us": 3.0,
            "op": "triton_red_fused",
            "name": "triton_red_fused__softmax_3",
            "scope": "nn.Module: A",
            "id": 1,
        },
    ]
    assert [b["backend"] for b in backends(rows)] == ["compiled"]
    assert [b["backend"] for b in backends(rows, frozenset({0, 1}))] == ["math"]
    assert fused_backend(None, "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "library"
    assert fused_backend(None, "triton_tem_fused_flex_attention_0") == "flex"
    assert fused_backend("aten::_cudnn_attention_forward", "Memset (Device)") == "cudnn"
    assert fused_backend(None, "Memset (Device)") is None


def test_aggregated_sides_sum_their_backends(reports):
    side = aggregate([summarize(reports["sdpa_flash_s2048_fwd"]), summarize(reports["naive_bf16_s2048_fwd"])], "dir")
    got = {b["backend"]: b["time_us"] for b in side["backends"]}
    assert got["flash"] == pytest.approx(reports["sdpa_flash_s2048_fwd"]["fused_time_us"], abs=0.01)
    assert got["eager"] == pytest.approx(reports["naive_bf16_s2048_fwd"]["unfused_core_time_us"], abs=0.01)
    c = compare_reports(side, reports["sdpa_flash_s2048_fwd"])
    assert c["backends"]["base_label"] == "eager (decomposed) + FlashAttention (SDPA)" and c["backends"]["changed"]


def test_ratios_come_from_unrounded_values():
    """A 48.90x slowdown printed as 49.02x came from inverting a speedup rounded to 4 decimals
    (0.0204); ratios keep 4 significant digits and the text divides the times themselves."""
    from tb_attention_plugin.compare import _delta, _speed, _verdict_text

    d = {"base": 100.0, "new": 4890.0, **_delta(100.0, 4890.0)}
    assert d["speedup"] == 0.02045 and d["ratio"] == 48.9
    assert _speed(d) == "48.90x slower"
    assert "48.90x the baseline's time" in _verdict_text(d, "base", "per step")
    fast = {"base": 4890.0, "new": 100.0, **_delta(4890.0, 100.0)}
    assert _speed(fast) == "48.90x faster" and "48.90x speedup" in _verdict_text(fast, "new", "per step")
    # a row without its times falls back on the ratio
    assert _speed({"ratio": 48.9, "speedup": 0.02045}) == "48.90x slower"
