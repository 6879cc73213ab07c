"""Each advice rule fires where the run shows its evidence and stays silent where it does not; each
finding carries its basis and both gains; "No finding" says what was checked."""

import copy
import os

import pytest

from helpers import ROOT, sample
from synth import BF16, F32, SynthTrace, naive_attention
from synth_sdpa import decode_pair, sdpa_backward, sdpa_call
from tb_attention_plugin.advice import FINDING_KEYS, RULES, advise
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.formats import render_text
from tb_attention_plugin.trace.files import expand_paths

SAMPLES = (
    "seed_mha",
    "naive_bf16_s2048_fwd",
    "sdpa_flash_s2048_fwd",
    "sdpa_efficient_s2048_fwd",
    "sdpa_cudnn_s2048_fwd",
    "sdpa_math_s2048_fwd",
    "gpt4l_sdpa_train",
    "gpt4l_naive_train",
)
# where each rule fires on the sample traces (and nowhere else among them)
EXPECTED = {
    "seed_mha": {"fp32_attention", "fuse_attention"},
    "naive_bf16_s2048_fwd": {"fuse_attention", "dropout_in_inference", "memory_repeated_copy"},
    "sdpa_flash_s2048_fwd": set(),
    "sdpa_efficient_s2048_fwd": {"slow_backend"},  # mem-efficient where cuDNN runs ~3x faster on the H200
    "sdpa_cudnn_s2048_fwd": set(),
    "sdpa_math_s2048_fwd": {"sdpa_math_backend"},
    "gpt4l_sdpa_train": {"memory_repeated_copy"},  # autocast recasts the fp32 projection weights every call
    "gpt4l_naive_train": {"fuse_attention", "memory_repeated_copy"},
}
KEYS = set(FINDING_KEYS)
VALIDATION = os.path.join(ROOT, "validation", "traces")
MODERN = os.path.join(ROOT, "tests", "data", "modern")


@pytest.fixture(scope="module")
def reports():
    return {run: analyze_path(sample(run)) for run in SAMPLES}


def ids(rep):
    return {a["id"] for a in rep["advice"]}


def by_id(rep, i):
    return next(a for a in rep["advice"] if a["id"] == i)


def check_of(rep, i):
    return next(c for c in rep["advice_checks"] if c["id"] == i)


def synth_report(tmp_path, t, name="t.json"):
    rep = analyze_path(t.write(tmp_path / name))
    assert rep["status"] == "ok"
    return rep


def real(path):
    if not os.path.isdir(path):
        pytest.skip(f"{path} is not in this checkout")
    return analyze_path(next(expand_paths([path]))[0])


@pytest.mark.parametrize("run", SAMPLES)
def test_sample_traces_get_exactly_their_advice(reports, run):
    rep = reports[run]
    assert ids(rep) == EXPECTED[run]
    for a in rep["advice"]:
        assert set(a) == KEYS
        assert a["severity"] in ("high", "medium", "low")
        assert a["evidence"] and a["detail"] and a["how"] and a["fix_code"]
        assert a["gain_basis"] in ("gpu", "step")
        g = a["estimated_gain_us"]
        assert g == (a["gpu_gain_us"] if a["gain_basis"] == "gpu" else a["step_gain_us"])
        assert g is None or 0 <= g <= a["removable_us"] + 1e-6
        if a["gain_basis"] == "gpu":
            assert g is None or g <= rep["attention_time_us"] * 1.0001


def test_findings_ranked_by_step_time_saved_where_known(reports):
    from tb_attention_plugin.advice import rank_key

    for rep in reports.values():
        keys = [rank_key(a) for a in rep["advice"]]
        assert keys == sorted(keys)


def test_every_rule_is_checked_and_says_why_not(reports):
    rules = [r.id for r in RULES]
    for run, rep in reports.items():
        checks = rep["advice_checks"]
        assert [c["id"] for c in checks] == rules, run
        for c in checks:
            assert c["fired"] == (c["reason"] is None), (run, c)
            assert c["basis"] in ("gpu", "step")
    quiet = reports["sdpa_cudnn_s2048_fwd"]
    assert not quiet["advice"] and all(c["reason"] for c in quiet["advice_checks"])
    assert "multiples of 8" in check_of(quiet, "head_dim_alignment")["reason"]
    text = render_text([quiet])
    assert "advice: no finding; checked: fuse_attention (" in text


def test_every_rule_has_premise_estimate_fix_and_twin():
    for r in RULES:
        assert r.premise and r.estimate and r.fix and r.absent, r.id
        assert r.basis in ("gpu", "step")
        assert ("step" in r.estimate) == (r.basis == "step") or r.basis == "gpu", r.id
        compile(r.fix, r.id, "exec")  # the fix is code


# ------------------------------------------------------------------ fuse_attention


def test_fuse_attention_predicts_the_backend_sdpa_would_pick(reports):
    rep = reports["naive_bf16_s2048_fwd"]
    a = by_id(rep, "fuse_attention")
    ev = a["evidence"]
    slow = {p["phase"] for p in ev["phases"] if p["phase"] in ("scale", "mask", "softmax", "dropout")}
    assert slow == {"scale", "mask", "softmax", "dropout"}
    # dropout 0.1 is no multiple of 1/16: cuDNN is passed over, flash runs (is_causal)
    assert ev["predicted_backend"] == "flash" and "cudnn" in ev["passed_over"]
    assert 0 < ev["fused_estimate_us"] < ev["time_us"]
    assert a["gpu_gain_us"] == pytest.approx(ev["time_us"] - ev["fused_estimate_us"], abs=0.02)
    assert (
        "TFLOP/s (measured table: rows nearest S 2048x2048, D 128" in a["detail"]
        and "scaled_dot_product_attention" in a["how"]
    )
    # the trace builds the mask with aten::triu at the call's size: is_causal is shown equivalent, and said why
    assert "is_causal=True (" in a["how"] and "aten::triu" in a["how"] and "dropout_p=" in a["how"]
    assert "is_causal=True" in a["fix_code"] and "attn_mask" not in a["fix_code"]
    assert a["severity"] == "high" and a["step_gain_us"] is not None
    g = by_id(reports["gpt4l_naive_train"], "fuse_attention")
    assert {p["direction"] for p in g["evidence"]["phases"]} == {"forward", "backward"}


def test_fuse_attention_gain_matches_the_sdpa_twin_on_gpu_time():
    """HF Llama eager vs SDPA (same shapes, H200): attention GPU time fell 4.23 -> 1.11 ms; the rule,
    which counts the unfused core and the score-sized casts SDPA never makes, predicts within 10 %."""
    eager = real(os.path.join(VALIDATION, "hf_llama_eager_fwdbwd"))
    sdpa = real(os.path.join(VALIDATION, "hf_llama_sdpa_fwdbwd"))
    a = by_id(eager, "fuse_attention")
    saved = eager["attention_time_us"] - sdpa["attention_time_us"]
    assert 0.9 < a["gpu_gain_us"] / saved < 1.1
    assert a["evidence"]["predicted_backend"] == "cudnn"
    assert "attn_implementation" in a["how"]


def test_fuse_attention_names_the_fallback_peak_of_the_dtype(tmp_path):
    """fp32 eager attention: SDPA would run mem-efficient, which has no measured fp32 row: the
    estimate is 60 % of the fp32 peak and says so; fp16 reads the bf16/fp16 rows of the table."""
    t = SynthTrace()
    naive_attention(t, dtype=F32)
    rep = synth_report(tmp_path, t, "fp32.json")
    c = check_of(rep, "fuse_attention")
    text = (by_id(rep, "fuse_attention")["detail"] if c["fired"] else c["reason"]) if rep["advice"] else c["reason"]
    assert "mem-efficient" in text and "fp32 peak" in text
    t = SynthTrace()
    naive_attention(t, dtype="c10::Half")
    a = by_id(synth_report(tmp_path, t, "fp16.json"), "fuse_attention")
    # nothing in this trace shows its bool mask is the causal one: kept as attn_mask, which flash refuses
    assert a["evidence"]["dtype"] == "fp16" and a["evidence"]["predicted_backend"] == "efficient"
    assert "attn_mask=mask" in a["fix_code"] and "is_causal" not in a["fix_code"]
    assert "fp16 peak" not in a["detail"]  # the table's rows, not a peak fraction


def test_fuse_attention_suggests_no_mask_or_dropout_the_run_does_not_have(tmp_path):
    t = SynthTrace()
    naive_attention(t, causal_mask=False, dropout=False)
    a = by_id(synth_report(tmp_path, t), "fuse_attention")
    assert "is_causal" not in a["how"] and "attn_mask" not in a["how"] and "dropout_p" not in a["how"]


def test_fuse_attention_silent_on_fused_and_math_backend(reports):
    for run in ("sdpa_flash_s2048_fwd", "gpt4l_sdpa_train", "sdpa_math_s2048_fwd"):
        assert "fuse_attention" not in ids(reports[run])


def test_fuse_attention_nn_multihead_attention_hint(reports):
    assert "need_weights=False" in by_id(reports["seed_mha"], "fuse_attention")["how"]


def _additive(t: SynthTrace, b=2, s=128, e=256):
    """Bahdanau attention: score = v·tanh(Wq + Uk), softmax, weights @ V (no QK^T dot product)."""
    with t.module("AdditiveAttention_0"):
        with t.op("aten::linear", dims=[[b, s, e], [e, e]], types=[BF16] * 2):
            t.kernel("nvjet_sm90_tst_128x64_64x4_h_bz_TNN", dur=6)
        with t.op("aten::linear", dims=[[b, s, e], [e, e]], types=[BF16] * 2):
            t.kernel("nvjet_sm90_tst_128x64_64x4_h_bz_TNN", dur=6)
        with t.op("aten::add", dims=[[b, s, 1, e], [b, 1, s, e], []], types=[BF16, BF16, "Scalar"]):
            t.kernel("void at::native::elementwise_kernel<128, 4, AddFunctor>", dur=20)
        with t.op("aten::tanh", dims=[[b, s, s, e]], types=[BF16]):
            t.kernel("void at::native::vectorized_elementwise_kernel<4, tanh_kernel_cuda>", dur=20)
        with t.op("aten::matmul", dims=[[b, s, s, e], [e, 1]], types=[BF16] * 2):
            with t.op("aten::mm", dims=[[b * s * s, e], [e, 1]], types=[BF16] * 2):
                t.kernel("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNN", dur=10)
        sm = dict(types=[BF16, "Scalar", "Scalar"], concrete=["", "-1", ""])
        with t.op("aten::_softmax", dims=[[b, s, s], [], []], **sm):
            t.kernel("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 7>", dur=7)
        with t.op("aten::bmm", dims=[[b, s, s], [b, s, e]], types=[BF16] * 2):
            t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_NNN", dur=8)


def test_additive_attention_gets_no_sdpa_advice(tmp_path):
    t = SynthTrace()
    _additive(t)
    rep = synth_report(tmp_path, t)
    # the broadcast add, tanh and score projection are the additive score phase (no QK^T)
    assert rep["attention_time_us"] > 0 and any(p["phase"] == "additive_score" for p in rep["phases"])
    assert not any(p["phase"] == "qk_matmul" for p in rep["phases"])
    assert "fuse_attention" not in ids(rep)
    assert "additive attention" in check_of(rep, "fuse_attention")["reason"]
    assert "sdpa_math_backend" not in ids(rep)


def _biased(t: SynthTrace, bias_dtype: str, dtype: str = BF16, b=2, h=8, s=512, d=64):
    """Eager attention with a per-head float bias added to the scores (T5's relative positions)."""
    with t.module("T5Attention_0"):
        with t.op("aten::matmul", dims=[[b, h, s, d], [b, h, d, s]], types=[dtype] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, d], [b * h, d, s]], types=[dtype] * 2):
                t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_TNN", dur=30)
        with t.op("aten::add_", dims=[[b, h, s, s], [1, h, s, s], []], types=[dtype, bias_dtype, "Scalar"]):
            t.kernel("void at::native::elementwise_kernel<128, 4, AddFunctor>", dur=60)
        sm = dict(types=[dtype, "Scalar", "Scalar"], concrete=["", "-1", ""])
        with t.op("aten::_softmax", dims=[[b, h, s, s], [], []], **sm):
            t.kernel("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 10>", dur=60)
        with t.op("aten::matmul", dims=[[b, h, s, s], [b, h, s, d]], types=[dtype] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, s], [b * h, s, d]], types=[dtype] * 2):
                t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_NNN", dur=30)


def test_float_bias_in_another_dtype_says_to_cast_it(tmp_path):
    t = SynthTrace()
    _biased(t, F32)
    rep = synth_report(tmp_path, t)
    a = by_id(rep, "fuse_attention")
    ev = a["evidence"]
    assert ev["mask"]["kind"] == "float" and ev["mask"]["dtype"] == "fp32"
    assert ev["as_is"]["backend"] == "math"  # as written, SDPA would run math
    assert ev["predicted_backend"] in ("cudnn", "efficient")  # once the bias is cast to bf16
    assert ".to(bf16)" in a["how"] and "math" in a["detail"]
    # the same bias in the inputs' dtype: no cast to ask for
    t = SynthTrace()
    _biased(t, BF16)
    a = by_id(synth_report(tmp_path, t, "same.json"), "fuse_attention")
    assert a["evidence"]["as_is"] is None and ".to(" not in a["how"]


# ------------------------------------------------------------------ SDPA backends


def test_math_backend_forced_when_inputs_qualify(reports):
    rep = reports["sdpa_math_s2048_fwd"]
    a = by_id(rep, "sdpa_math_backend")
    ev = a["evidence"]
    assert ev["blockers"] == [] and "most likely forced" in a["detail"]
    inp = ev["inputs"][0]
    assert (inp["dtype"], inp["h"], inp["hk"], inp["sq"], inp["d"], inp["attn_mask"], inp["calls"]) == (
        "bf16",
        16,
        16,
        2048,
        64,
        False,
        2,
    )
    assert "fp32" in a["detail"]  # the math backend upcast bf16 to fp32 GEMMs
    assert ev["time_us"] == pytest.approx(rep["attention_time_us"], abs=0.01)
    assert ev["predicted_backend"] == ["cudnn"]
    assert "sdpa_kernel" in a["how"] and a["severity"] == "high"


def test_math_backend_text_never_calls_a_bandwidth_estimate_a_peak_share():
    """A decode call's fused estimate is bandwidth-bound: the detail says so, not "% of the bf16 peak"."""
    rep = real(os.path.join(VALIDATION, "decode_gqa_math"))
    a = by_id(rep, "sdpa_math_backend")
    assert "bandwidth-bound" in a["detail"] and "peak" not in a["detail"].split("would take")[-1]
    flash = real(os.path.join(VALIDATION, "decode_gqa_flash"))
    # predicted 0.5-1.5x of what the flash twin measured
    saved = rep["attention_time_us"] - flash["attention_time_us"]
    assert 0.75 < a["gpu_gain_us"] / saved < 1.33


def test_math_backend_reasons_from_recorded_inputs(tmp_path):
    t = SynthTrace()
    sdpa_call(t, "math", b=2, h=8, hk=8, sq=512, sk=512, d=64, dtype=F32, mask=True, dur=100)
    a = by_id(synth_report(tmp_path, t), "sdpa_math_backend")
    text = " ".join(a["evidence"]["blockers"])
    assert "fp32" in text and "attn_mask" in text and "most likely forced" not in a["detail"]
    t = SynthTrace()
    sdpa_call(t, "math", b=2, h=8, hk=2, sq=512, sk=512, d=64, dur=100, strides=[[262144, 32768, 1, 512]] * 3)
    a = by_id(synth_report(tmp_path, t, "gqa.json"), "sdpa_math_backend")
    text = " ".join(a["evidence"]["blockers"])
    assert "enable_gqa" in text and "stride" in text


def test_math_backend_silent_on_fused_backends(reports):
    for run in ("sdpa_flash_s2048_fwd", "sdpa_efficient_s2048_fwd", "sdpa_cudnn_s2048_fwd", "gpt4l_sdpa_train"):
        assert "sdpa_math_backend" not in ids(reports[run])


def test_slow_backend_on_the_mem_efficient_training_twin():
    """mem-efficient fwd+bwd (its backward at ~10 % of the bf16 peak) vs the flash and cuDNN runs of the
    same shapes: a backend finding with a gain, per alternative, within 0.75-1.33x of each twin."""
    eff = real(os.path.join(VALIDATION, "sdpa_efficient_fwdbwd_causal"))
    a = by_id(eff, "slow_backend")
    assert a["evidence"]["backend"] == "efficient" and a["gain_basis"] == "gpu"
    for alt in ("flash", "cudnn"):
        twin = real(os.path.join(VALIDATION, f"sdpa_{alt}_fwdbwd_causal"))
        saved = eff["attention_time_us"] - twin["attention_time_us"]
        got = a["evidence"]["alternatives"][alt]["gain_us"]
        assert 0.75 < got / saved < 1.33, (alt, got, saved)
    assert "forced" in a["detail"] and "sdpa_kernel" in a["how"]


def test_slow_backend_silent_where_the_backend_is_the_fast_one():
    for run in ("sdpa_flash_fwdbwd_causal", "sdpa_cudnn_fwdbwd_causal", "mem_flash_s1024", "hf_llama_sdpa_fwdbwd"):
        rep = real(os.path.join(VALIDATION, run))
        assert "slow_backend" not in ids(rep), run
    flex = real(os.path.join(MODERN, "flex_causal_fwdbwd"))
    assert not {"slow_backend", "sdpa_math_backend"} & ids(flex)


# ------------------------------------------------------------------ the other rules


def test_fp32_attention(reports):
    a = by_id(reports["seed_mha"], "fp32_attention")
    assert {k["phase"] for k in a["evidence"]["kernels"]} <= {"qkv_proj", "qk_matmul", "pv_matmul", "out_proj"}
    assert "allow_tf32" in a["how"] and "autocast" in a["how"]
    assert a["evidence"]["peaks_flops_per_s"]["fp32"] < a["evidence"]["peaks_flops_per_s"]["bf16"]
    for run in ("naive_bf16_s2048_fwd", "gpt4l_sdpa_train", "gpt4l_naive_train", "sdpa_math_s2048_fwd"):
        assert "fp32_attention" not in ids(reports[run])


def test_head_dim_alignment_carries_a_gain(tmp_path, reports):
    t = SynthTrace()
    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=100, causal=True, dur=300)
    a = by_id(synth_report(tmp_path, t, "s.json"), "head_dim_alignment")
    hd = a["evidence"]["head_dims"]["100"]
    assert hd["source"] == "sdpa inputs" and hd["padded"] == 104
    # padded to 104 the dispatcher picks cuDNN (it rejects 100): faster than this flash call
    assert a["gpu_gain_us"] and 0 < a["gpu_gain_us"] < 300 and "cuDNN" in " ".join(a["evidence"]["prediction"])
    t = SynthTrace()
    naive_attention(t, h=4, d=100)
    a = by_id(synth_report(tmp_path, t), "head_dim_alignment")
    assert "head dim 100" in a["detail"]
    t = SynthTrace()
    naive_attention(t, h=4, d=64)
    assert "head_dim_alignment" not in ids(synth_report(tmp_path, t, "ok.json"))
    assert not any("head_dim_alignment" in ids(r) for r in reports.values())


def test_decode_kv_heads(tmp_path, reports):
    flash, math = decode_pair(tmp_path, kv_heads=32)
    for path in (flash, math):
        rep = analyze_path(path)
        a = by_id(rep, "decode_kv_heads")
        call = a["evidence"]["calls"][0]
        assert (call["h"], call["hk"], call["sq"], call["sk"]) == (32, 32, 1, 8192)
        assert call["kv_bytes_per_call"] == 2 * 8 * 32 * 8192 * 128 * 2
        assert call["kv_bytes_with_gqa"] == call["kv_bytes_per_call"] / 8
        assert 0 < a["estimated_gain_us"] < rep["attention_time_us"]
    gf, gm = decode_pair(tmp_path / "..", kv_heads=8)
    assert "decode_kv_heads" not in ids(analyze_path(gf)) | ids(analyze_path(gm))
    assert not any("decode_kv_heads" in ids(r) for r in reports.values())


def test_decode_kv_heads_silent_on_a_training_steps_short_attention(tmp_path):
    """A video model's 16-frame temporal attention in a training step: q_len 16, but 16 keys (no cache)
    and a backward pass: not decode."""
    t = SynthTrace()
    with t.module("TemporalAttention_0"):
        sdpa_call(t, "flash", b=512, h=8, hk=8, sq=16, sk=16, d=64, dur=40, seq=7)
    sdpa_backward(t, seq=7, b=512, h=8, sq=16, d=64, dur=90, causal=False)
    rep = synth_report(tmp_path, t)
    assert "decode_kv_heads" not in ids(rep)
    assert "training step" in check_of(rep, "decode_kv_heads")["reason"]
    t = SynthTrace()  # the same shapes without a backward: still no KV cache
    with t.module("TemporalAttention_0"):
        sdpa_call(t, "flash", b=512, h=8, hk=8, sq=16, sk=16, d=64, dur=40)
    rep = synth_report(tmp_path, t, "fwd.json")
    assert "decode_kv_heads" not in ids(rep) and "no KV cache" in check_of(rep, "decode_kv_heads")["reason"]


def test_dropout_in_inference(reports, tmp_path):
    a = by_id(reports["naive_bf16_s2048_fwd"], "dropout_in_inference")
    assert a["evidence"]["ops"] == [{"op": "aten::native_dropout", "p": "0.1", "train": "True", "calls": 2}]
    ph = next(p for p in reports["naive_bf16_s2048_fwd"]["phases"] if p["phase"] == "dropout")
    assert a["gpu_gain_us"] == pytest.approx(ph["time_us"], abs=0.01)
    assert a["step_gain_us"] and a["step_gain_us"] > 0
    assert "model.eval()" in a["how"]
    assert "dropout_in_inference" not in ids(reports["gpt4l_naive_train"])
    t = SynthTrace()
    naive_attention(t, dropout=False)
    assert "dropout_in_inference" not in ids(synth_report(tmp_path, t))
    t = SynthTrace()
    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, dropout=0.1, causal=True, dur=400)
    a = by_id(synth_report(tmp_path, t, "p.json"), "dropout_in_inference")
    assert a["evidence"]["sdpa_dropout_p"] == [0.1]
    assert a["gpu_gain_us"] is not None and 0 < a["gpu_gain_us"] < 400  # the call without dropout, predicted


# ------------------------------------------------------------------ launch overhead (step basis)


def test_launch_overhead_is_step_time_on_the_cuda_graph_twin():
    """Eager GQA decode vs the same step replayed from a CUDA graph (H200; unprofiled steps 2.60 and
    0.66 ms, validation/modern/2026-12-01/meta): the finding is on the step basis, claims the
    attention calls only — at least 0.3x of the measured saving and never more — and the graph
    replay gets no such finding."""
    eager = real(os.path.join(MODERN, "decode_graph_eager"))
    replay = real(os.path.join(MODERN, "decode_graph_replay"))
    a = by_id(eager, "launch_overhead")
    assert a["gain_basis"] == "step" and a["estimated_gain_us"] == a["step_gain_us"]
    measured = 2596.1 - 658.1
    # the bound is [0.3, 1.0]; 5 % of slack above it for this pair's host-clock step times (3 steps, not
    # CUDA events): at the claim's 5 µs per op it claims 1.02x here and 0.30x on the CUDA-event twin
    # decode_eager_to_cuda_graph (validation/advice_twins.md): no one constant puts both inside
    assert 0.3 * measured <= a["step_gain_us"] <= 1.05 * measured
    assert a["step_gain_us"] > eager["attention_time_us"]  # not attention's GPU time: the wrong unit before
    assert "profiler" in a["detail"] and 'mode="reduce-overhead"' in a["how"] and "torch.cuda.graph" in a["how"]
    assert "launch_overhead" not in ids(replay)
    assert "replayed from a CUDA graph" in check_of(replay, "launch_overhead")["reason"]


def _launch_bound(n_kernels: int, dur: float, gap: float, sync_inside: bool = False) -> SynthTrace:
    t = SynthTrace()
    with t.module("Attention_0"):
        for i in range(n_kernels):
            with t.op("aten::mul", dims=[[8, 32, 1, 128], []], types=[BF16, "Scalar"]):
                t.kernel("void at::native::vectorized_elementwise_kernel<4, MulFunctor>", dur=dur)
            if sync_inside and i == n_kernels // 2:
                with t.op("aten::item", dims=[[]], types=[BF16]):
                    with t.op("aten::_local_scalar_dense", dims=[[]], types=[BF16]):
                        pass
            t.now += gap
    return t


def test_launch_overhead_synthetic(tmp_path, reports):
    rep = synth_report(tmp_path, _launch_bound(12, 2.0, 30.0))
    a = by_id(rep, "launch_overhead")
    assert a["evidence"]["short_kernels"] == 12 and a["gain_basis"] == "step"
    assert 0 < a["step_gain_us"] < 12 * 30.0
    assert "launch_overhead" not in ids(synth_report(tmp_path, _launch_bound(12, 50.0, 1.0), "long.json"))
    assert "launch_overhead" not in ids(synth_report(tmp_path, _launch_bound(4, 2.0, 30.0), "few.json"))
    assert not any("launch_overhead" in ids(r) for r in reports.values())


def test_launch_overhead_not_offered_where_capture_is_impossible(tmp_path):
    rep = synth_report(tmp_path, _launch_bound(12, 2.0, 30.0, sync_inside=True), "sync.json")
    assert "launch_overhead" not in ids(rep)
    reason = check_of(rep, "launch_overhead")["reason"]
    assert "cannot be captured" in reason and "aten::item" in reason


# ------------------------------------------------------------------ slow backward


def _fwd_bwd(fwd_us: float, bwd_us: float) -> SynthTrace:
    t = SynthTrace()
    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, causal=True, dur=fwd_us, seq=41)
    sdpa_backward(t, seq=41, dur=bwd_us)
    return t


def test_slow_backward_uses_the_backends_own_ratio(tmp_path, reports):
    rep = synth_report(tmp_path, _fwd_bwd(100.0, 500.0))
    a = by_id(rep, "slow_backward")
    d = a["evidence"]["directions"][0]
    got = (d["kind"], d["backend"], d["forward_us"], d["backward_us"], d["ratio"])
    assert got == ("fused", "flash", 100.0, 500.0, 5.0)
    assert 2.4 < d["normal_ratio"] < 3.0  # FlashAttention on the H200: backward 2.6-2.7x forward
    assert a["gpu_gain_us"] == pytest.approx(500.0 - d["normal_ratio"] * 100.0, abs=0.5)
    assert "slow_backward" not in ids(synth_report(tmp_path, _fwd_bwd(100.0, 280.0), "ok.json"))
    assert "slow_backward" not in ids(reports["gpt4l_sdpa_train"]) | ids(reports["gpt4l_naive_train"])


def test_slow_backward_blames_communication_overlap_before_the_kernel(tmp_path):
    rep = synth_report(tmp_path, _fwd_bwd(100.0, 500.0))
    rep2 = copy.copy(rep)
    rep2["communication"] = dict(rep.get("communication") or {}, overlap_with_attention_us=300.0)
    found = {a["id"]: a for a in advise(rep2)}
    a = found["slow_backward"]
    assert "communication" in a["title"].lower() and "NCCL" in a["detail"]
    assert "deterministic" not in a["detail"] and "deterministic" not in a["how"]
    assert a["evidence"]["communication_overlap_us"] == pytest.approx(300.0)
    alone = {a["id"]: a for a in advise(rep)}["slow_backward"]
    assert "communication" not in alone["title"].lower() and "deterministic" in alone["detail"]


def test_slow_backward_on_flex_attention_names_flex_fixes():
    rep = real(os.path.join(MODERN, "hf_llama_flex_fwdbwd"))
    if "slow_backward" in ids(rep):
        a = by_id(rep, "slow_backward")
        assert "sdpa_kernel" not in a["how"] and "BlockMask" in a["how"]


# ------------------------------------------------------------------ memory findings, rendering


def test_memory_flags_become_findings_with_their_gain(reports):
    rep = reports["gpt4l_sdpa_train"]
    a = by_id(rep, "memory_repeated_copy")
    flags = [f for f in rep["memory"]["flags"] if f["code"] == "repeated_copy"]
    assert a["gpu_gain_us"] == pytest.approx(sum(f["time_us"] for f in flags), abs=0.01)
    assert a["evidence"]["kernels_found"] == sum(f["calls"] for f in flags)
    assert "_kernel_ids" not in rep["memory"]


def test_advice_rendered_in_table_and_markdown(reports):
    text = render_text([reports["naive_bf16_s2048_fwd"]])
    # gains per step, the step time first (the figure users act on), then the GPU time
    assert "advice [high, " in text and " of step time, ~" in text and " of GPU time]: Use fused attention" in text
    assert "  how: Replace the explicit matmul" in text
    md = render_text([reports["naive_bf16_s2048_fwd"]], markdown=True)
    assert "Use fused attention" in md


@pytest.mark.parametrize(
    "run,expected",
    [
        ("decode_mha_flash", {"decode_kv_heads"}),
        ("decode_gqa_flash", {"launch_overhead"}),
        ("decode_gqa_math", {"sdpa_math_backend", "launch_overhead"}),
        ("hf_llama_eager_fwdbwd", {"fuse_attention", "memory_kv_expand"}),
        ("hf_llama_sdpa_fwdbwd", set()),
        ("mem_naive_s4096", {"fuse_attention", "dropout_in_inference"}),
        ("compiled_naive_fwdbwd", {"fuse_attention"}),
        ("sdpa_flash_fwdbwd_causal", set()),
        ("sdpa_cudnn_fwdbwd_causal", set()),
        ("sdpa_efficient_fwdbwd_causal", {"slow_backend"}),
        ("sdpa_math_fwdbwd_causal", {"sdpa_math_backend"}),
    ],
)
def test_h200_validation_traces(run, expected):
    assert ids(real(os.path.join(VALIDATION, run))) == expected


def test_sdpa_math_copies_needs_the_math_backend(tmp_path):
    """A copy that SDPA's dispatcher makes before a cuDNN kernel is not the math backend's."""
    t = SynthTrace()
    q = [4, 16, 1024, 64]
    for layer in range(2):
        with t.module(f"Attention_{layer}"):
            with t.op(
                "aten::scaled_dot_product_attention",
                dims=[q, q, q, [], [], [], [], []],
                types=[BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
                concrete=["", "", "", "", "0.0", "True", "", "False"],
            ):
                with t.op("aten::contiguous", dims=[q, []], types=[BF16, ""], strides=[[1048576, 64, 1024, 1], []]):
                    with t.op("aten::clone", dims=[q, []], types=[BF16, ""]):
                        with t.op("aten::copy_", dims=[q, q, []], types=[BF16, BF16, "Scalar"]):
                            t.kernel("void at::native::elementwise_kernel<128, 2, direct_copy_kernel_cuda>", dur=20)
                with t.op(
                    "aten::_scaled_dot_product_cudnn_attention",
                    dims=[q, q, q, [], [], [], [], []],
                    types=[BF16] * 3 + ["", "Scalar", "Scalar", "Scalar", ""],
                ):
                    t.kernel(
                        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
                        dur=100,
                    )
    rep = synth_report(tmp_path, t)
    codes = [f["code"] for f in rep["memory"]["flags"]]
    assert "sdpa_math_copies" not in codes
    assert rep["memory"]["data_movement"]["copies"], "the copy itself is still listed"


# ------------------------------------------------------------------ what SDPA's dispatcher picks


def test_dispatcher_facts_measured_on_the_h200():
    """validation/sdpa_choice_probe.py on the H200 (torch 2.11): a bias that requires grad rules cuDNN
    out of a training step (mem-efficient then runs); a bias whose last dim is strided (T5's, a permuted
    view of [Sq, Sk, H]) rules mem-efficient out, so a learned strided bias leaves only math, as the T5
    SDPA twin ran. Inference, or a contiguous bias without grad, keeps cuDNN."""
    from tb_attention_plugin.advice.sdpa_choice import Inputs, choose

    base = dict(dtype="bf16", b=4, h=8, hk=8, sq=512, sk=512, d=64, dv=64, mask="float", mask_dtype="bf16")
    assert choose(Inputs(**base, backward=True), "sm_90")[0] == "cudnn"
    assert choose(Inputs(**base, mask_grad=True, backward=True), "sm_90")[0] == "efficient"
    assert choose(Inputs(**base, mask_grad=True, backward=False), "sm_90")[0] == "cudnn"
    be, passed = choose(Inputs(**base, mask_grad=True, mask_strided=True, backward=True), "sm_90")
    assert be == "math" and "requires grad" in passed["cudnn"] and "not contiguous" in passed["efficient"]


def test_t5_eager_predicts_no_gain_as_written_and_names_the_bias_fix():
    """T5 eager (H200 twin): its learned relative-position bias is a strided view, so SDPA as written runs
    math (the SDPA twin's attention was 0.6 ms/step slower); the finding says so and names the fix."""
    path = os.path.join(ROOT, "tests", "data", "twins", "t5_eager")
    if not os.path.isdir(path):
        pytest.skip("twin traces not in this checkout")
    a = by_id(real(path), "fuse_attention")
    assert a["evidence"]["as_is"] == {"backend": "math", "predicted_us": None, "gain_us": 0.0}
    assert a["evidence"]["mask"]["strided"] and a["evidence"]["mask"]["requires_grad"]
    assert "bias.contiguous()" in a["how"] and "no fused kernel, no gain" in a["detail"]
