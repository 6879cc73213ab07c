from synth import BF16, F32, SynthTrace, mlp_and_loss, naive_attention
from tb_attention_plugin.attention.patterns import PHASES, triton_phase
from tb_attention_plugin.attention.tagger import tag
from tb_attention_plugin.trace.correlate import link
from tb_attention_plugin.trace.records import load_trace


def run(t, tmp_path, **kw):
    tr = load_trace(t.write(tmp_path / "t.json"))
    L = link(tr)
    T = tag(tr, L, **kw)
    rows = []
    for k in range(tr.n_gpu):
        att = T.gpu_instance[k] >= 0
        rows.append(
            (
                tr.strings[tr.gpu["name"][k]],
                PHASES[T.gpu_phase[k]] if att else None,
                "bwd" if T.gpu_backward[k] else "fwd",
            )
        )
    return rows, T


NAIVE_PHASES = ["qkv_proj", "qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "out_proj"]


def test_module_scope_phases_and_non_attention_untagged(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    mlp_and_loss(t)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows[:8]] == NAIVE_PHASES
    assert [r[1] for r in rows[8:]] == [None, None, None]  # MLP GEMM, GELU, loss softmax


def test_annotation_scope(tmp_path):
    t = SynthTrace()
    with t.annotation("my_attention_block"):
        naive_attention(t, module=False)
    rows, T = run(t, tmp_path)
    assert [r[1] for r in rows] == NAIVE_PHASES
    assert set(T.instances[i]["source"] for i in set(T.gpu_instance.tolist())) == {"annotation"}


def test_custom_module_pattern(tmp_path):
    t = SynthTrace()
    with t.module("MixerBlock_0"):
        naive_attention(t, module=False)
    rows, _ = run(t, tmp_path)
    # MixerBlock is not an attention name: the eager pattern and the projections beside it are found
    assert [r[1] for r in rows] == NAIVE_PHASES
    rows, T = run(t, tmp_path, module_pattern="Mixer")
    assert [r[1] for r in rows] == NAIVE_PHASES
    assert {T.instances[i]["source"] for i in set(T.gpu_instance.tolist())} == {"module"}


def test_unscoped_eager_pattern_reaches_its_projections(tmp_path):
    t = SynthTrace()
    naive_attention(t, module=False)
    mlp_and_loss(t)
    rows, T = run(t, tmp_path)
    # without a scope, the projections next to the core (its sibling ops) are its own; the MLP after
    # the output projection is not
    assert [r[1] for r in rows] == NAIVE_PHASES + [None, None, None]
    assert {T.instances[i]["source"] for i in set(T.gpu_instance.tolist()) if i >= 0} == {"pattern"}


def _sdpa(
    t, name="aten::_scaled_dot_product_flash_attention", kernel="void pytorch_flash::flash_fwd_kernel<>", seq=None
):
    dims = [[2, 4, 128, 64]] * 3 + [[], [], [], []]
    with t.op(
        "aten::scaled_dot_product_attention",
        dims=dims + [[]],
        types=[BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
        concrete=["", "", "", "", "0.", "True", "", "False"],
        seq=seq,
    ):
        with t.op(
            name,
            dims=dims,
            types=[BF16] * 3 + ["Scalar"] * 4,
            concrete=["", "", "", "0.", "True", "False", ""],
            seq=seq,
        ):
            t.kernel(kernel, dur=30)


def test_sdpa_op_without_module_is_fused_attention(tmp_path):
    t = SynthTrace()
    _sdpa(t)
    rows, T = run(t, tmp_path)
    assert rows == [("void pytorch_flash::flash_fwd_kernel<>", "fused_attention", "fwd")]


def test_module_with_sdpa_projections_and_layout(tmp_path):
    t = SynthTrace()
    with t.module("LlamaSdpaAttention_0"):
        for _name in ("q_proj", "k_proj", "v_proj"):
            with t.module("Linear_0"):
                with t.op("aten::linear", dims=[[2, 128, 256], [256, 256], []], types=[BF16, BF16, ""]):
                    with t.op("aten::mm", dims=[[256, 256], [256, 256]], types=[BF16, BF16]):
                        t.kernel("nvjet_gemm", dur=5)
        with t.function("modeling_llama.py(150): apply_rotary_pos_emb"):
            with t.op("aten::mul", dims=[[2, 4, 128, 64], [1, 1, 128, 64]], types=[BF16, BF16]):
                t.kernel("vectorized_elementwise_kernel<mul>", dur=2)
        _sdpa(
            t,
            name="aten::_scaled_dot_product_cudnn_attention",
            kernel="cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
        )
        with t.op("aten::contiguous", dims=[[2, 128, 4, 64]], types=[BF16]):
            with t.op("aten::clone", dims=[[2, 128, 4, 64], []], types=[BF16, ""]):
                with t.op("aten::copy_", dims=[[2, 128, 4, 64], [2, 128, 4, 64], []], types=[BF16, BF16, "Scalar"]):
                    t.kernel("elementwise_kernel<direct_copy_kernel_cuda>", dur=3)
        with t.module("Linear_3"):
            with t.op("aten::linear", dims=[[2, 128, 256], [256, 256], []], types=[BF16, BF16, ""]):
                with t.op("aten::mm", dims=[[256, 256], [256, 256]], types=[BF16, BF16]):
                    t.kernel("nvjet_gemm", dur=5)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["qkv_proj"] * 3 + ["rotary", "fused_attention", "layout", "out_proj"]


def test_backward_inherits_forward_phase_and_module(tmp_path):
    t = SynthTrace()
    seqs = naive_attention(t)
    mlp_seq = t.seq = t.seq + 1
    with t.module("MLP_0"):
        with t.op("aten::mm", dims=[[256, 256], [256, 1024]], types=[BF16, BF16], seq=mlp_seq):
            t.kernel("mlp_gemm")
    for tag_, s in list(seqs.items()) + [("mlp", mlp_seq)]:
        with t.op(f"autograd::engine::evaluate_function: {tag_}Backward0", tid=200, seq=s):
            with t.op("aten::mm", tid=200):
                t.kernel(f"bwd_{tag_}", tid=200)
    rows, _ = run(t, tmp_path)
    bwd = {r[0]: r[1] for r in rows if r[2] == "bwd"}
    assert bwd == {
        "bwd_qkv": "qkv_proj",
        "bwd_qk": "qk_matmul",
        "bwd_scale": "scale",
        "bwd_mask": "mask",
        "bwd_softmax": "softmax",
        "bwd_dropout": "dropout",
        "bwd_pv": "pv_matmul",
        "bwd_out": "out_proj",
        "bwd_mlp": None,
    }


def test_sdpa_backward_op_is_attention_even_unlinked(tmp_path):
    t = SynthTrace()
    with t.op("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", tid=200, seq=99):
        with t.op("aten::_scaled_dot_product_flash_attention_backward", tid=200):
            t.kernel("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<>", tid=200)
            t.kernel("void pytorch_flash::flash_bwd_convert_dq_kernel<>", tid=200)
    rows, _ = run(t, tmp_path)
    assert rows == [
        ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<>", "fused_attention", "bwd"),
        ("void pytorch_flash::flash_bwd_convert_dq_kernel<>", "fused_attention", "bwd"),
    ]


def test_kernel_name_fallback_without_cpu_side(tmp_path):
    t = SynthTrace()
    t.kernel("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>")
    t.kernel("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<>)")
    t.kernel("triton_per_fused__softmax_div_masked_fill_0")
    t.kernel("triton_per_fused__log_softmax_nll_loss_0")
    t.kernel("nvjet_gemm")
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["fused_attention", "fused_attention", "softmax", None, None]


def test_triton_phase_names():
    assert triton_phase("triton_per_fused__softmax_0") == "softmax"
    assert triton_phase("triton_red_fused__log_softmax_0") is None
    assert triton_phase("triton_tem_fused_flex_attention_0") == "fused_attention"
    assert triton_phase("triton_poi_fused_native_dropout_1") == "dropout"
    assert triton_phase("ampere_gemm") is None


def test_mha_fast_path_and_multihead_attention_module(tmp_path):
    t = SynthTrace()
    with t.module("MultiheadAttention_0"):
        with t.op("aten::linear", dims=[[128, 32, 1024], [3072, 1024], [3072]], types=[F32] * 3):
            with t.op("aten::addmm", dims=[[3072], [4096, 1024], [1024, 3072]], types=[F32] * 3):
                t.kernel("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma")
        with t.op("aten::mul", dims=[[512, 128, 64], []], types=[F32, "Scalar"]):
            t.kernel("vectorized_elementwise_kernel<mul>")
        with t.op("aten::bmm", dims=[[512, 128, 64], [512, 64, 128]], types=[F32] * 2):
            t.kernel("gemm_qk")
        with t.op("aten::_softmax", dims=[[512, 128, 128], [], []], types=[F32, "Scalar", "Scalar"]):
            t.kernel("softmax_warp_forward")
        with t.op("aten::bmm", dims=[[512, 128, 128], [512, 128, 64]], types=[F32] * 2):
            t.kernel("gemm_pv")
        with t.op("aten::linear", dims=[[4096, 1024], [1024, 1024], [1024]], types=[F32] * 3):
            with t.op("aten::addmm", dims=[[1024], [4096, 1024], [1024, 1024]], types=[F32] * 3):
                t.kernel("gemm_out")
        with t.op("aten::mean", dims=[[32, 16, 128, 128], [], [], []], types=[F32, "ScalarList", "Scalar", ""]):
            t.kernel("reduce_kernel<MeanOps>")
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["qkv_proj", "scale", "qk_matmul", "softmax", "pv_matmul", "out_proj", "other"]


def test_matmul_without_bmm_child_resolved_by_softmax_position(tmp_path):
    t = SynthTrace()
    with t.module("TinyAttention_0"):
        for nm in ("proj", "qk", "softmax", "pv", "out"):
            if nm == "softmax":
                with t.op("aten::softmax", dims=[[128, 128], [], []], types=[F32, "Scalar", ""]):
                    t.kernel("softmax")
            else:
                with t.op("aten::mm", dims=[[128, 64], [64, 128]], types=[F32, F32]):
                    t.kernel(nm)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["qkv_proj", "qk_matmul", "softmax", "pv_matmul", "out_proj"]


def test_kernel_launched_from_python_inside_attention_module(tmp_path):
    """A custom Triton attention kernel called straight from the module's forward (no aten op)."""
    t = SynthTrace()
    with t.module("CustomAttention_0"):
        with t.op("aten::linear", dims=[[2, 128, 256], [768, 256], []], types=[BF16, BF16, ""]):
            t.kernel("nvjet_gemm")
        t.kernel("_attn_fwd")  # cuLaunchKernel under the module's Python frame
    mlp_and_loss(t)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows[:2]] == ["qkv_proj", "fused_attention"]
    assert [r[1] for r in rows[2:]] == [None, None, None]


def test_mla_latent_norms_are_part_of_the_projections(tmp_path):
    """DeepSeek-V2/V3 MLA: q down -> RMSNorm -> q up; kv down -> RMSNorm -> kv up, inside the attention module."""
    t = SynthTrace()
    with t.module("DeepseekV3Attention_0"):
        for lin, norm in (("Linear_0", "DeepseekV3RMSNorm_1"), ("Linear_2", "DeepseekV3RMSNorm_2")):
            with t.module(lin):
                with t.op("aten::linear", dims=[[2, 64, 256], [32, 256]], types=[BF16, BF16]):
                    t.kernel("gemm_down", dur=2)
            with t.module(norm):
                with t.op("aten::pow", dims=[[2, 64, 32], []], types=[F32, ""]):
                    t.kernel("pow_kernel", dur=1)
                with t.op("aten::mul", dims=[[2, 64, 32], [2, 64, 32]], types=[F32, F32]):
                    t.kernel("mul_kernel", dur=1)
            with t.module(lin.replace("_0", "_1").replace("_2", "_3")):
                with t.op("aten::linear", dims=[[2, 64, 32], [512, 32]], types=[BF16, BF16]):
                    t.kernel("gemm_up", dur=2)
        with t.op(
            "aten::_scaled_dot_product_efficient_attention",
            dims=[[2, 8, 64, 64], [2, 8, 64, 64], [2, 8, 64, 64]],
            types=[BF16] * 3,
        ):
            t.kernel("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", dur=5)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["qkv_proj"] * 8 + ["fused_attention"]
