"""Sites, the FLOPs ledger and the FFN boundary (model.py, attention/sites.py, roofline/ledger.py,
memory/boundary.py) on synthetic traces shaped as torch records them, and on the H200 traces."""

import contextlib
import dataclasses
import glob
import os
import types

import pytest

from helpers import ROOT
from synth import BF16, SynthTrace
from synth_sdpa import sdpa_call
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.memory.boundary import fusion_estimates

GEMM = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
FA_FWD_128x128 = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true>(pytorch_flash::Flash_fwd_params)"
)


@contextlib.contextmanager
def modules(t, *names):
    with contextlib.ExitStack() as st:
        for n in names:
            st.enter_context(t.module(n))
        yield


def linear(t, b, s, e_in, e_out, dur=20.0, module=None):
    ctx = t.module(module) if module else contextlib.nullcontext()
    with ctx, t.op("aten::linear", dims=[[b, s, e_in], [e_out, e_in]], types=[BF16] * 2):
        with t.op("aten::mm", dims=[[b * s, e_in], [e_in, e_out]], types=[BF16] * 2):
            t.kernel(GEMM, dur=dur)


def add(t, shape, dur=8.0):
    with t.op("aten::add", dims=[shape, shape, []], types=[BF16, BF16, "Scalar"], concrete=["", "", "1"]):
        t.kernel(ADD, dur=dur)


def rms_norm(t, shape, module, dur=6.0):
    """Hugging Face's eager RMSNorm: to(fp32), pow, mean, add eps, rsqrt, mul, to(bf16), mul weight."""
    f32 = "float"
    with t.module(module):
        for op, dims, types in (
            ("aten::_to_copy", [shape], [BF16]),
            ("aten::pow", [shape, []], [f32, "Scalar"]),
            ("aten::mean", [shape, [], [], []], [f32, "", "Scalar", ""]),
            ("aten::add", [shape[:-1] + [1], [], []], [f32, "Scalar", "Scalar"]),
            ("aten::rsqrt", [shape[:-1] + [1]], [f32]),
            ("aten::mul", [shape, shape[:-1] + [1]], [f32, f32]),
            ("aten::_to_copy", [shape], [f32]),
            ("aten::mul", [[shape[-1]], shape], [BF16, BF16]),
        ):
            with t.op(op, dims=dims, types=types):
                t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::Functor>", dur=dur)


def attention_block(t, name, b, sq, sk, h, d, dur, causal=False, kernel=FA_FWD_128x128, extra=()):
    """q/k/v projections, one flash SDPA call and the output projection inside module ``name``."""
    e = h * d
    with modules(t, *extra, name):
        for i in range(3):
            linear(t, b, sq if i == 0 else sk, e, e, dur=5.0, module=f"Linear_{i}")
        sdpa_call(t, "flash", b=b, h=h, hk=h, sq=sq, sk=sk, d=d, dur=dur, causal=causal, kernel=kernel)
        linear(t, b, sq, e, e, dur=10.0, module="Linear_3")


def run(tmp_path, t, name="x"):
    rep = analyze_path(t.write(tmp_path / f"{name}.pt.trace.json"))
    assert rep["status"] == "ok" and not rep["warnings"], rep.get("warnings")
    return rep


def test_t5_encoder_decoder_sites(tmp_path):
    """Encoder self-attention, decoder self- and cross-attention are three sites; their layers fold.
    The site ends at the attention scope (the outermost module named like attention: T5's
    T5LayerSelfAttention / T5LayerCrossAttention, which hold T5Attention)."""
    t = SynthTrace()
    b, enc, dec, h, d = 4, 512, 128, 8, 64
    n = 0
    with t.step(1), t.module("T5Model_0"):
        with t.module("T5Stack_0"):
            for i in range(2):
                with modules(t, f"T5Block_{i}", f"T5LayerSelfAttention_{i}"):
                    attention_block(t, f"T5Attention_{n}", b, enc, enc, h, d, dur=40.0)
                    n += 1
        with t.module("T5Stack_1"):
            for i in range(2, 4):
                with t.module(f"T5Block_{i}"):
                    with t.module(f"T5LayerSelfAttention_{i}"):
                        attention_block(t, f"T5Attention_{n}", b, dec, dec, h, d, dur=10.0, causal=True)
                        n += 1
                    with t.module(f"T5LayerCrossAttention_{i - 2}"):
                        attention_block(t, f"T5Attention_{n}", b, dec, enc, h, d, dur=20.0)
                        n += 1
    rep = run(tmp_path, t)
    sites = {s["name"]: s for s in rep["sites"]}
    assert set(sites) == {
        "T5Model_0/T5Stack_0/T5Block_*/T5LayerSelfAttention_0",
        "T5Model_0/T5Stack_1/T5Block_*/T5LayerSelfAttention_0",
        "T5Model_0/T5Stack_1/T5Block_*/T5LayerCrossAttention_0",
    }
    cross = sites["T5Model_0/T5Stack_1/T5Block_*/T5LayerCrossAttention_0"]
    assert cross["calls"] == 2 and cross["layers"] == 2
    assert cross["shapes"][0]["sq"] == dec and cross["shapes"][0]["sk"] == enc
    assert cross["backends"][0]["backend"] == "flash"
    dec_self = sites["T5Model_0/T5Stack_1/T5Block_*/T5LayerSelfAttention_0"]
    assert dec_self["shapes"][0]["mask"] == "causal (top-left)"
    # every attention kernel row names its site; the ledger's sites are the same ids
    kt = rep["kernels"]
    site_col = kt.column("site")
    att = kt.column("attention")
    assert all((s is not None) == a for s, a in zip(site_col, att))
    assert {s["site"] for s in rep["flops_ledger"]["sites"]} == {s["id"] for s in rep["sites"]}


def test_spatial_and_temporal_attention_have_their_own_bound(tmp_path):
    """A video block's spatial attention (long sequences: compute-bound) and temporal attention
    (short sequences, many of them: not compute-bound) are two sites with different bounds."""
    t = SynthTrace()
    d, h = 64, 16
    with t.step(1), t.module("VideoModel_0"):
        for i in range(3):
            with t.module(f"Block_{i}"):
                # spatial: 16 frames x 4096 tokens; 2·(2·64)·16·4096²·16 = 1.1e12 FLOP in 2.2 ms: ~62 % of 801.5
                with t.module(f"Attention_{2 * i}"):
                    sdpa_call(t, "flash", b=16, h=h, hk=h, sq=4096, sk=4096, d=d, dur=2200.0, kernel=FA_FWD_128x128)
                # temporal: 4096 positions x 16 frames; 2.2e9 FLOP in 200 µs: ~1 % of the roof
                with t.module(f"Attention_{2 * i + 1}"):
                    sdpa_call(t, "flash", b=4096, h=h, hk=h, sq=16, sk=16, d=d, dur=200.0, kernel=FA_FWD_128x128)
    rep = run(tmp_path, t)
    sites = {s["name"]: s for s in rep["sites"]}
    assert set(sites) == {"VideoModel_0/Block_*/Attention_0", "VideoModel_0/Block_*/Attention_1"}
    assert sites["VideoModel_0/Block_*/Attention_0"]["bound"] == "compute"
    assert sites["VideoModel_0/Block_*/Attention_1"]["bound"] in ("memory", "latency")
    assert sites["VideoModel_0/Block_*/Attention_0"]["calls"] == 3


def test_causal_flash_8192_ledger(tmp_path):
    t = SynthTrace()
    with t.step(1), t.module("Attention_0"):
        sdpa_call(t, "flash", b=1, h=16, hk=16, sq=8192, sk=8192, d=64, causal=True, dur=2000.0, kernel=FA_FWD_128x128)
    rep = run(tmp_path, t)
    led = rep["flops_ledger"]
    per_pair = 16 * (2 * 64 + 2 * 64)
    assert led["dense"] == pytest.approx(per_pair * 8192 * 8192, rel=1e-3)
    assert led["useful"] == pytest.approx(led["dense"] / 2 + per_pair * 8192 / 2, rel=1e-3)
    assert led["useful"] < led["executed"] < led["dense"]
    c = led["calls"][0]
    assert c["tile"] == [128, 128] and c["executed_basis"] == "tiles 128x128" and c["useful_exact"]
    # the cost model's FLOPs of the fused kernel are the useful (causal) count
    fused = [k for k in rep["kernels"] if k["phase"] == "fused_attention"]
    assert sum(k["flops"] for k in fused) == pytest.approx(led["useful"], rel=1e-3)
    # MFU on each basis against the kernel's roof (bf16: the datasheet's 989.4 TFLOP/s, since real
    # GEMMs beat the 801.5 benchmark: roofline/devices.py)
    assert led["mfu"]["useful"] == pytest.approx(led["useful"] / (2000e-6 * 989.4e12), rel=1e-3)
    assert led["peaks"] == {"bf16": pytest.approx(989.4e12)}
    assert led["steps"][0]["name"] == "ProfilerStep#1" and led["steps"][0]["useful"] == led["useful"]


def efficient_forward(t, sq, sk, h, hk, d, mask_type, dur=30.0):
    """aten::_efficient_attention_forward (bshd), as torch.nn.attention.bias.causal_lower_right
    dispatches it: custom_mask_type 2 is bottom-right causal."""
    q, kv = [1, sq, h, d], [1, sk, hk, d]
    dims = [q, kv, kv, [], [], [], [], [], [], [], [], [], [], []]
    types = [BF16] * 3 + [""] * 3 + ["Scalar"] * 8
    conc = ["", "", "", "", "", "", "", "", "0.0", str(mask_type), "False", "", "", ""]
    with t.op("aten::_efficient_attention_forward", dims=dims, types=types, concrete=conc):
        t.kernel(
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
            "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
            dur=dur,
        )


def test_bottom_right_decode_counts_only_the_keys_each_query_sees(tmp_path):
    t = SynthTrace()
    with t.step(1):
        with t.module("DraftAttention_0"):  # speculative decoding: 4 draft tokens over a 1000-token cache
            efficient_forward(t, 4, 1000, 32, 32, 128, mask_type=2)
        with t.module("TopLeftAttention_0"):
            efficient_forward(t, 4, 1000, 32, 32, 128, mask_type=1)
    rep = run(tmp_path, t)
    calls = {c["call"]: c for c in rep["flops_ledger"]["calls"]}
    br, tl = calls[0], calls[1]
    assert br["mask"] == "causal (bottom-right)" and tl["mask"] == "causal (top-left)"
    assert br["useful"] == pytest.approx(32 * 512 * (997 + 998 + 999 + 1000), rel=1e-3)
    assert tl["useful"] == pytest.approx(32 * 512 * (1 + 2 + 3 + 4), rel=1e-3)
    assert br["dense"] == pytest.approx(32 * 512 * 4 * 1000, rel=1e-3)
    # one 64-row tile (4 rows and 60 of padding, which the Tensor Cores compute too) visits 16
    # 64-key tiles (the last partial, computed whole)
    assert br["executed"] == pytest.approx(32 * 512 * 64 * 1024, rel=1e-3) and br["tile"] == [64, 64]
    assert tl["executed"] == pytest.approx(32 * 512 * 64 * 64, rel=1e-3)  # only the first key tile


def varlen_forward(t, lengths, h=8, d=64, dur=50.0):
    """aten::_flash_attention_forward on packed [total, H, D] q/k/v with cu_seqlens (jagged SDPA)."""
    total, n = sum(lengths), len(lengths)
    qkv = [total, h, d]
    dims = [qkv, qkv, qkv, [n + 1], [n + 1], [], [], [], [], [], []]
    types = [BF16] * 3 + ["int", "int"] + ["Scalar"] * 6
    conc = [""] * 5 + [str(max(lengths)), str(max(lengths)), "0.0", "False", "False", ""]
    with t.op("aten::_flash_attention_forward", dims=dims, types=types, concrete=conc):
        t.kernel(FA_FWD_128x128, dur=dur)


def test_jagged_sdpa_ledger(tmp_path):
    lengths = [512, 896, 1280, 1664, 2048, 2432, 2816, 3072]
    h, d = 16, 64
    true = sum(4 * n * n * h * d for n in lengths)
    # without the lengths in the trace: bounds from the total, the count and the longest
    t = SynthTrace()
    with t.step(1), t.module("JaggedAttention_0"):
        varlen_forward(t, lengths, h, d)
    c = run(tmp_path, t, "a")["flops_ledger"]["calls"][0]
    assert c["shapes"]["lengths"] == "total_max" and not c["useful_exact"]
    assert c["useful_low"] <= true <= c["useful"]
    # the nested tensor built in the profiled step (its pieces' shapes recorded): exact
    t = SynthTrace()
    with t.step(1):
        dims = [[[n, h * d] for n in lengths], []]
        with t.op("aten::cat", dims=dims, types=["TensorList", "Scalar"]):
            t.kernel("void at::native::CatArrayBatchedCopy<int>", dur=5.0)
        with t.module("JaggedAttention_0"):
            varlen_forward(t, lengths, h, d)
    c = run(tmp_path, t, "b")["flops_ledger"]["calls"][0]
    assert c["shapes"]["lengths"] == "per_sequence" and c["useful_exact"]
    assert c["useful"] == pytest.approx(true, rel=0.01)
    assert c["useful"] == c["dense"]  # not causal


def block(t, e, module_prefix, compiled):
    """o_proj -> residual add -> RMSNorm -> FFN up-projection, eager or as Inductor fuses it."""
    b, s = 2, 1024
    shape = [b, s, e]
    with t.module(f"{module_prefix}Attention_0"):
        sdpa_call(t, "flash", b=b, h=16, hk=16, sq=s, sk=s, d=e // 16, dur=100.0, causal=True)
        linear(t, b, s, e, e, dur=20.0, module="Linear_3")
    if compiled:
        buf = [shape, shape, [e], shape, shape]
        with t.op("triton_red_fused_add_mean_mul_pow_rsqrt_0", dims=buf, types=[BF16] * 5):
            t.kernel("triton_red_fused_add_mean_mul_pow_rsqrt_0", dur=10.0)
    else:
        add(t, shape, dur=8.0)
        rms_norm(t, shape, "LlamaRMSNorm_1", dur=6.0)
    linear(t, b, s, e, 4 * e, dur=60.0, module="Linear_4")


def test_ffn_boundary_eager_and_compiled(tmp_path):
    e = 2048
    t = SynthTrace()
    with t.step(1):
        block(t, e, "", compiled=False)
    rep = run(tmp_path, t, "eager")
    bd = rep["boundary"]
    assert bd["calls"] == 1 and bd["complete_calls"] == 1
    roles = {r["role"]: r for r in bd["roles"]}
    assert set(roles) == {"o_proj", "residual_add", "norm"} and roles["norm"]["kernels"] == 8
    call = bd["per_call"][0]
    assert call["next"]["op"] == "aten::mm" and call["next"]["module"] == "Linear_4"
    assert bd["time_us"] == pytest.approx(20 + 8 + 8 * 6, abs=0.01)
    y = 2 * 1024 * e * 2  # the projection's output, bf16
    fus = {f["id"]: f for f in bd["fusions"]}
    assert fus["oproj_residual_epilogue"]["removable_bytes"] == pytest.approx(2 * y, rel=1e-3)
    assert fus["norm_prologue"]["removable_us"] == pytest.approx(48.0)
    assert set(fus) == {"oproj_residual_epilogue", "add_norm", "norm_prologue"}
    for f in bd["fusions"]:
        assert 0 <= f["estimated_gain_us"] <= f["removable_us"]
    # the estimate as an advice rule states it
    est = fusion_estimates(bd)
    assert {x.id for x in est} == set(fus) and all(x.twin and x.premise and x.unit for x in est)
    add_norm = next(x for x in est if x.id == "add_norm")
    assert add_norm.estimated_gain_us <= add_norm.removable_us == pytest.approx(8 + 48)
    # the twin: torch.compile's one add+norm kernel
    t = SynthTrace()
    with t.step(1):
        block(t, e, "", compiled=True)
    c = run(tmp_path, t, "compiled")["boundary"]
    assert {r["role"] for r in c["roles"]} == {"o_proj", "add_norm"}
    assert {f["id"] for f in c["fusions"]} == {"norm_prologue"}
    assert c["time_us"] < bd["time_us"]


def test_flex_without_block_counts_is_an_upper_bound(tmp_path):
    rep = analyze_path(glob.glob(os.path.join(ROOT, "tests/data/modern/flex_swa_fwdbwd/*.gz"))[0])
    led = rep["flops_ledger"]
    fwd = next(c for c in led["calls"] if c["backend"] == "flex" and c["direction"] == "forward")
    assert fwd["mask"] == "block mask" and not fwd["useful_exact"]
    assert fwd["executed_basis"] == "dense (block counts not recorded)"
    assert fwd["shapes"]["block"] == {"q_block": 128, "kv_block": 128, "blocks": 256}
    assert not led["useful_exact"]


@pytest.mark.parametrize(
    "trace,site,backend,mask",
    [
        (
            "validation/traces/hf_llama_sdpa_fwdbwd",
            "LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0",
            "cudnn",
            "causal (top-left)",
        ),
        (
            "tests/data/modern/hf_deepseek_v3_fwdbwd",
            "DeepseekV3ForCausalLM_0/DeepseekV3Model_0/DeepseekV3DecoderLayer_*/DeepseekV3Attention_0",
            "cudnn",
            "causal (top-left)",
        ),
        ("validation/traces/decode_gqa_flash", "LlamaLikeAttention_0", "flash", "none"),
    ],
)
def test_sites_on_h200_traces(trace, site, backend, mask):
    rep = analyze_path(glob.glob(os.path.join(ROOT, trace, "*.gz"))[0])
    s = next(s for s in rep["sites"] if s["name"] == site)
    assert s["backends"][0]["backend"] == backend and s["shapes"][0]["mask"] == mask
    assert s["share"] > 0.9
    led = rep["flops_ledger"]
    for c in led["calls"]:
        m, n = c["tile"] or (1, 1)
        sh = c["shapes"]
        padding = (-(-sh["sq"] // m) * m / sh["sq"]) * (-(-sh["sk"] // n) * n / sh["sk"])  # whole tiles
        assert c["useful"] <= c["executed"] <= c["dense"] * padding * 2.5 / 2 + 1


def test_record_function_names_fold_and_top_finding(tmp_path):
    """record_function("model.layers.3.self_attn") scopes: one site, numbers folded; the SDPA math
    backend's finding is the site's top finding."""
    t = SynthTrace()
    with t.step(1):
        for i in range(3):
            with t.annotation(f"model.layers.{i}.self_attn"):
                sdpa_call(t, "math", b=2, h=8, hk=8, sq=512, sk=512, d=64, dur=400.0)
    rep = run(tmp_path, t)
    assert [(s["name"], s["kind"], s["calls"]) for s in rep["sites"]] == [("model.layers.*.self_attn", "annotation", 3)]
    s = rep["sites"][0]
    assert s["backends"][0]["backend"] == "math"
    assert s["top_finding"] is not None and s["top_finding"]["id"] == "sdpa_math_backend"
    assert {f["id"] for f in rep["advice"]} >= {"sdpa_math_backend"}


@pytest.mark.parametrize(
    "trace",
    [
        "validation/traces/hf_llama_eager_fwdbwd",
        "sample_traces/gpt4l_naive_train",
        "validation/traces/naive_bf16_s2048_d64_fwd",
    ],
)
def test_decomposed_site_shape_splits_batch_and_heads_as_recorded(trace):
    """Decomposed attention's bmm folds B and H into one batch dim; the site's shape takes B and H
    from the 4-D input torch.matmul recorded, as the replay block's calls do (it said B1 H32 for
    a [2, 16, S, D] Llama step, beside the replay's q 2x16)."""
    files = glob.glob(os.path.join(ROOT, trace, "*.json*"))
    if not files:
        pytest.skip(f"{trace} is not available")
    rep = analyze_path(files[0])
    calls = [c for c in rep["replay"]["calls"] if c["kind"] == "eager"]
    assert calls
    q = calls[0]["q_shape"]
    for s in rep["sites"]:
        sh = s["shapes"][0]
        if "sq" not in sh:
            continue
        assert (sh["b"], sh["h"], sh["sq"], sh["d"]) == (q[0], q[1], q[2], q[3]), (s["name"], sh, q)


def test_flex_blocks_annotation_parsing_and_checks():
    from tb_attention_plugin.roofline import ledger as L

    rb = L.parse_flex_blocks("flex_blocks:partial=32,full=116,mask_bh=2x1,q_blocks=32,kv_blocks=32,block=128x128")
    assert rb == L.RecordedBlocks(32, 116, 2, 1, 32, 32, (128, 128))
    assert L.parse_flex_blocks("flex_blocks:partial=7") == L.RecordedBlocks(7, 0)
    assert L.parse_flex_blocks("tb_attention.flex_blocks:partial=7,full=2") == L.RecordedBlocks(7, 2)  # namespaced
    assert L.parse_flex_blocks("my flex_blocks:partial=7") is None
    assert L.parse_flex_blocks("xflex_blocks:partial=7") is None
    for bad in ("flex_blocks:full=3", "flex_blocks:partial=3,mask_bh=2", "flex_blocks:partial=3,mask_bh=0x1", "x"):
        assert L.parse_flex_blocks(bad) is None, bad
    g = L.Geometry(2, 16, 16, 4096, 4096, 64, 64, L.Mask("block"), block=L.BlockSparsity(128, 128, total=1024))
    got = L.with_recorded_blocks(g, rb)
    assert got is not None and got.block is not None
    assert (got.block.visited, got.block.full) == (74.0, 58.0)  # per batch·head: the mask has 2 batches
    c = L.counts(got, "forward", "flex")
    per_bh = 74 * 128 * 128
    assert c.executed == 2 * 16 * 256 * per_bh and c.useful == c.executed and not c.useful_exact
    assert c.useful_low == 2 * 16 * 256 * 58 * 128 * 128

    # the helper a user calls on a BlockMask writes what the parser reads (a stand-in mask: no torch here)
    class T:
        def __init__(self, shape, total):
            self.shape, self.total = shape, total

        def sum(self):
            return self.total

    mask = types.SimpleNamespace(
        kv_num_blocks=T((2, 1, 32), 64), full_kv_num_blocks=T((2, 1, 32), 232), kv_indices=T((2, 1, 32, 32), 0),
        BLOCK_SIZE=(128, 128),
    )  # fmt: skip
    assert L.parse_flex_blocks(L.flex_blocks_name(mask)) == L.RecordedBlocks(64, 232, 2, 1, 32, 32, (128, 128))
    # another grid, another block size, a mask batch that does not divide the call's, too many blocks
    assert L.with_recorded_blocks(g, dataclasses.replace(rb, q_blocks=16)) is None
    assert L.with_recorded_blocks(g, dataclasses.replace(rb, block=(64, 128))) is None
    assert L.with_recorded_blocks(g, dataclasses.replace(rb, mask_b=3)) is None
    assert L.with_recorded_blocks(g, L.RecordedBlocks(2000, 0)) is None
