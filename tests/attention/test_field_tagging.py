"""Tagging rules that traces from the field (serving engines, tensor-parallel jobs, ROCm) need,
each on a small hand-made trace shaped like the published one that showed the problem."""

from test_tagger import run

from synth import BF16, SynthTrace

Q = [[8, 4096], [4096, 4096]]


def tp_attention_layer(t: SynthTrace, comm: str) -> None:
    """A tensor-parallel attention layer as vLLM runs it: the QKV GEMM, the attention op, the
    row-parallel output projection whose forward ends in an all-reduce."""
    with t.module("LlamaAttention_0"):
        with t.module("QKVParallelLinear_0"):
            with t.op("aten::linear", dims=Q, types=[BF16] * 2):
                t.kernel("nvjet_tst_128x64_64x4_1x2_h_bz_TNT", dur=20)
        with t.op("vllm::unified_attention_with_output", dims=[[8, 32, 128]] * 3, types=[BF16] * 3):
            t.kernel("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>", dur=30)
        with t.module("RowParallelLinear_0"):
            with t.op("aten::linear", dims=Q, types=[BF16] * 2):
                t.kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", dur=15)
            if comm == "custom":
                with t.function("vllm/distributed/communication_op.py(11): tensor_model_parallel_all_reduce"):
                    with t.op("vllm::all_reduce"):
                        t.memcpy("DtoD (Device -> Device)", nbytes=65536)
                        t.kernel("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", dur=12)
            elif comm == "nccl":
                with t.op("c10d::allreduce_"):
                    with t.annotation("nccl:all_reduce"):
                        t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", dur=12)
            elif comm == "symm":
                with t.op("symm_mem::multimem_all_reduce_"):
                    t.kernel("multimem_all_reduce_kernel", dur=12)


def test_collectives_inside_an_attention_module_are_not_attention(tmp_path):
    for comm in ("custom", "nccl", "symm"):
        t = SynthTrace()
        tp_attention_layer(t, comm)
        rows, _ = run(t, tmp_path)
        got = {name: phase for name, phase, _ in rows}
        assert [p for n, p in got.items() if n.startswith("nvjet")] == ["qkv_proj", "out_proj"], comm
        assert any(p == "fused_attention" for p in got.values())
        comm_rows = [(n, p) for n, p in got.items() if not n.startswith(("nvjet", "void flash"))]
        assert comm_rows and all(p is None for _, p in comm_rows), (comm, comm_rows)


def test_a_collective_kernel_with_no_cpu_range_is_not_attention(tmp_path):
    t = SynthTrace()
    t.kernel("two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>", dur=10)
    t.kernel("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", dur=10)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == [None, "fused_attention"]


def test_helper_kernels_of_a_fused_op_are_layout_not_fused_attention(tmp_path):
    t = SynthTrace()
    with t.module("Attention_0"):
        with t.op("aten::_efficient_attention_backward", dims=[[1, 8, 512, 64]] * 3, types=[BF16] * 3):
            t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", dur=2)
            t.kernel("Memset (Device)", dur=1, cat="gpu_memset")
            t.kernel("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)")
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["layout", "layout", "fused_attention"]


def test_inductor_kernels_named_after_attention_ops_are_what_they_compute(tmp_path):
    """A pointwise kernel fused from the cat/transpose before SDPA, a reduction that is a norm:
    their names list an attention op, their work is layout and a norm, not fused attention."""
    t = SynthTrace()
    with t.module("Attention_0"):
        with t.op("Torch-Compiled Region: 0/0"):
            t.kernel("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_0", dur=3)
            with t.op("aten::_scaled_dot_product_flash_attention", dims=[[1, 8, 512, 64]] * 3, types=[BF16] * 3):
                t.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", dur=20)
            t.kernel("triton_red_fused_add_fmha_v3_fwd_mean_mul_pow_rsqrt_1", dur=3)
    t.kernel("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_0", dur=3)  # unscoped
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["layout", "fused_attention", "other", None]


def test_library_attention_ops_open_a_call_and_their_norms_do_not(tmp_path):
    t = SynthTrace()
    with t.op("aiter::rmsnorm2d_fwd", dims=[[8, 4096]], types=[BF16]):
        t.kernel("void ck_tile::kentry<ck_tile::Rmsnorm2dFwd<>>", dur=3)
    with t.op("sageattention::qk_int8_sv_f8_accum_f32_attn", dims=[[1, 24, 4096, 128]] * 3, types=[BF16] * 3):
        t.kernel("void qk_int_sv_f8_attn_kernel<128u, 64u>(signed char*)", dur=40)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == [None, "fused_attention"]


def _row(phase, name, op=None, dur=10.0, direction="forward"):
    return {"attention": True, "phase": phase, "name": name, "op": op, "dur_us": dur, "direction": direction}


def test_backends_name_the_library_family_forward_and_backward():
    from tb_attention_plugin.attention.backends import backends, describe

    fa3 = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<>>>"
    fa3b = "void cutlass::device_kernel<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<>>>"
    rows = backends(
        [_row("fused_attention", fa3, "flash_attn_3::fwd"), _row("fused_attention", fa3b, None, 20, "backward")]
    )
    assert [(r["backend"], r["family"]) for r in rows] == [("library", "FlashAttention-3")]
    assert rows[0]["forward_us"] == 10 and rows[0]["backward_us"] == 20
    sage = backends([_row("fused_attention", "void qk_int_sv_f8_attn_kernel<128u>(signed char*)", "sageattention::x")])
    assert describe(sage) == "SageAttention"
    ck = backends([_row("fused_attention", "void ck_tile::kentry<ck_tile::FmhaFwdKernel<>>", None)])
    assert describe(ck) == "CK-tile FMHA"


def test_a_kernel_launched_before_the_window_keeps_its_backend():
    """Its name ran under aten::_flash_attention_forward elsewhere in the trace (PyTorch on ROCm runs
    AOTriton's attn_fwd for it): FlashAttention, not "FlashAttention + Triton attention"."""
    from tb_attention_plugin.attention.backends import backends, describe

    name = "attn_fwd"
    rows = backends(
        [_row("fused_attention", name, None, 50)]
        + [_row("fused_attention", name, "aten::_flash_attention_forward")] * 3
    )
    assert describe(rows) == "FlashAttention (SDPA)"


def test_o_proj_after_a_kernel_launched_from_python_is_the_output_projection(tmp_path):
    """SGLang's Triton backend launches its decode attention kernels from Python (no op around
    them); the o_proj after them is the output projection, not a second QKV projection. The
    pre-attention norm of the layer communicator (prepare_attn) is not attention."""
    t = SynthTrace()
    with t.function("sglang/srt/layers/communicator.py(210): prepare_attn"):
        with t.op("sgl_kernel::rmsnorm", dims=[[8, 4096]], types=[BF16]):
            t.kernel("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", dur=3)
    with t.module("Qwen3Attention_0"):
        with t.module("QKVParallelLinear_0"):
            with t.op("aten::linear", dims=Q, types=[BF16] * 2):
                t.kernel("nvjet_tst_128x64_64x4_1x2_h_bz_TNT", dur=20)
        with t.module("RadixAttention_0"):
            with t.function("sglang/srt/layers/attention/triton_ops/decode_attention.py(300): decode_attention_fwd"):
                t.kernel("_fwd_grouped_kernel_stage1", dur=25)
                t.kernel("_fwd_kernel_stage2", dur=5)
        with t.module("RowParallelLinear_0"):
            with t.op("aten::linear", dims=Q, types=[BF16] * 2):
                t.kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", dur=15)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == [None, "qkv_proj", "fused_attention", "fused_attention", "out_proj"]


def test_pipeline_chunks_mark_direction_and_autograd_functions_say_what_they_wrap(tmp_path):
    """A DualPipe-style training step (DeepSeek-V3's published trace): ranges attn(F), attn(B),
    attn(W) run a layer's forward, input-gradient and weight-gradient chunks; projections and
    attention are custom autograd Functions; the backward node is not linked to its forward."""
    fa = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<>>>"
    fab = "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2>>>"
    gemm = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(Params)"
    t = SynthTrace()
    with t.annotation("attn(F)"):
        with t.op("LinearWithGradAccumulationFP8"):
            with t.op("aten::empty"):
                pass
            t.kernel(gemm, dur=30)
        with t.op("RopeLoraFlashAttnVarlenFunc"):
            t.kernel(gemm, dur=20)
            t.kernel("rotary_kernel", dur=5)
            t.kernel(fa, dur=60)
        with t.op("LinearWithGradAccumulationFP8"):
            with t.op("aten::empty"):
                pass
            t.kernel(gemm, dur=40)
    with t.annotation("attn(W)"):
        t.kernel(gemm, dur=35)
    with t.op("autograd::engine::evaluate_function: RopeLoraFlashAttnVarlenFuncBackward", tid=200):
        with t.op("RopeLoraFlashAttnVarlenFuncBackward", tid=200):
            t.kernel(fab, dur=120, tid=200)
            t.kernel("rotary_kernel", dur=5, tid=200)
            t.kernel(gemm, dur=25, tid=200)
    rows, _ = run(t, tmp_path)
    assert [(r[1], r[2]) for r in rows] == [
        ("qkv_proj", "fwd"),
        ("qkv_proj", "fwd"),
        ("rotary", "fwd"),
        ("fused_attention", "fwd"),
        ("out_proj", "fwd"),
        ("other", "bwd"),  # attn(W): a weight gradient, whichever projection's
        ("fused_attention", "bwd"),
        ("rotary", "bwd"),
        ("qkv_proj", "bwd"),
    ]


def test_an_attention_named_model_is_a_container_and_linear_attention_is_attention(tmp_path):
    """A linear-attention model (elu+1 feature map, einsums, no softmax) whose model class is
    named LinearAttentionTransformer: its LinearAttention modules are the calls; the MLP, the norms
    and the loss are not attention."""
    t = SynthTrace()
    with t.module("LinearAttentionTransformer_0"):
        for i in range(2):
            with t.module(f"Block_{i}"):
                with t.module("LayerNorm_0"):
                    with t.op("aten::layer_norm", dims=[[4, 256, 512]], types=[BF16]):
                        t.kernel("void at::native::vectorized_layer_norm_kernel<float>", dur=3)
                with t.module("LinearAttention_0"):
                    with t.module("Linear_0"):
                        with t.op("aten::linear", dims=[[4, 256, 512], [1536, 512]], types=[BF16] * 2):
                            t.kernel("nvjet_tst_128x64_64x4_1x2_h_bz_TNT", dur=10)
                    with t.op("aten::elu", dims=[[4, 8, 256, 64]], types=[BF16]):
                        t.kernel("void at::native::vectorized_elementwise_kernel<4, elu_kernel>", dur=2)
                    with t.op("aten::einsum", dims=[[4, 8, 256, 64], [4, 8, 256, 64]], types=[BF16] * 2):
                        t.kernel("nvjet_tst_64x64_64x4_1x1_v_bz_TNN", dur=4)
                    with t.op("aten::einsum", dims=[[4, 8, 256, 64], [4, 8, 64, 64]], types=[BF16] * 2):
                        t.kernel("nvjet_tst_64x64_64x4_1x1_v_bz_NNN", dur=4)
                with t.module("MLP_0"):
                    with t.op("aten::linear", dims=[[4, 256, 512], [2048, 512]], types=[BF16] * 2):
                        t.kernel("nvjet_tst_256x128_64x4_1x2_h_bz_TNT", dur=20)
    rows, T = run(t, tmp_path)
    att = [r[1] is not None for r in rows]
    assert att == [False, True, True, True, True, False] * 2
    assert len({T.instances[i]["name"] for i in set(T.gpu_instance.tolist()) if i >= 0}) == 1  # LinearAttention
    assert sum(1 for i in set(T.gpu_instance.tolist()) if i >= 0) == 2


def test_a_serving_engines_norm_op_is_not_attention(tmp_path):
    """vLLM's namespace holds norms and MoE ops beside its attention op: a name with "fwd" in it
    (rocm_aiter_rmsnorm2d_fwd_with_add) is no attention call."""
    t = SynthTrace()
    with t.op("vllm::rocm_aiter_rmsnorm2d_fwd_with_add", dims=[[8, 2880]], types=[BF16]):
        t.kernel("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", dur=3)
    with t.op("vllm::unified_attention_with_output", dims=[[8, 64, 64]] * 3, types=[BF16] * 3):
        t.kernel("kernel_unified_attention_2d", dur=10)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == [None, "fused_attention"]


def test_replay_structure_reaches_back_over_qk_norms_to_the_projection():
    """SGLang's Qwen3 decode replayed from a HIP graph: input norm, QKV GEMM, q_norm and k_norm (each
    behind a copy), rotary, KV-cache store, paged attention and its reduce, o_proj."""
    from tb_attention_plugin.attention.structure import structure_phases

    seq = [
        ("Cijk_Alik_Bljk_BBS_BH_MT256x32x64_MI16x16x1 (previous MLP down)", None),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256", None),  # input norm
        ("Cijk_Alik_Bljk_BBS_BH_Bias_MT64x32x256_MI16x16x1", "qkv_proj"),
        ("void at::native::elementwise_kernel_manual_unroll<direct_copy_kernel_cuda>", "layout"),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64", "qkv_proj"),  # q_norm
        ("void at::native::elementwise_kernel_manual_unroll<direct_copy_kernel_cuda>", "layout"),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64", "qkv_proj"),  # k_norm
        ("void rotary_embedding_kernel<c10::BFloat16, true>", "rotary"),
        ("void (anonymous namespace)::store_kvcache<2048l, 4, false, long>", "layout"),
        ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>", "attention"),
        ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16>", "attention"),
        ("Cijk_Alik_Bljk_BBS_BH_Bias_MT16x32x512_MI16x16x1", "out_proj"),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256", None),  # post-attention norm
    ]
    names = [n for n, _ in seq]
    got = structure_phases(names, [p == "attention" for _, p in seq])
    assert [got.get(i, (None,))[0] for i in range(len(seq))] == [p if p != "attention" else None for _, p in seq]


def test_a_profilers_wrapper_op_around_the_attention_op_is_attention(tmp_path):
    """SGLang's profiler wraps calls in ops of its own (sglang_profiler::mha__mha_batch_prefill_167 around
    aiter::mha_batch_prefill): the o_proj after it is the output projection; its QK-norm op is on the
    projection path; its KV-cache store is layout."""
    t = SynthTrace()
    with t.module("Qwen3Attention_0"):
        with t.module("QKVParallelLinear_0"):
            with t.op("aten::mm", dims=Q, types=[BF16] * 2):
                t.kernel("Cijk_Alik_Bljk_BBS_BH_MT256x192x64_MI16x16x1", dur=20)
        with t.op("sglang_profiler::utils_apply_qk_norm_487"):
            with t.op("aiter::rmsnorm", dims=[[8, 32, 128]], types=[BF16]):
                t.kernel("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8", dur=3)
        with t.op("sglang_profiler::memory_pool__set_kv_buffer_impl_353"):
            with t.op("sglang::store_cache"):
                t.kernel("void (anonymous namespace)::store_kvcache<2048l, 4, false, long>(Params)", dur=2)
        with t.op("sglang_profiler::mha__mha_batch_prefill_167"):
            with t.op("aiter::mha_batch_prefill", dims=[[8, 32, 128]] * 3, types=[BF16] * 3):
                t.kernel("void ck_tile::kentry<ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<>>", dur=30)
        with t.module("RowParallelLinear_0"):
            with t.op("aten::mm", dims=Q, types=[BF16] * 2):
                t.kernel("Cijk_Alik_Bljk_BBS_BH_MT320x224x64_MI16x16x1", dur=15)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == ["qkv_proj", "qkv_proj", "layout", "fused_attention", "out_proj"]


def test_mangled_rocm_kernel_names_are_read_apart():
    """ROCm traces give mangled names: the length-prefixed identifiers are set apart so the catalogue's
    word-bounded patterns see them (a CK-tile batch-prefill kernel, an aiter kernel)."""
    from tb_attention_plugin.attention.backends import fused_backend, library_family
    from tb_attention_plugin.attention.patterns import unmangled

    ck = "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipeline"
    assert unmangled(ck).startswith("_ZN ck_tile kentry ")
    assert library_family(ck) == "CK-tile FMHA" and fused_backend("aiter::mha_batch_prefill", ck) == "library"
    assert library_family("_ZN5aiter23fmha_bwd_hd128_bf16_a16E") == "aiter"
    assert library_family("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8") is None
    assert unmangled("void flash::flash_fwd_kernel<>") == "void flash::flash_fwd_kernel<>"


def test_compiled_joint_attention_projections_by_their_shapes(tmp_path):
    """SD3.5's MMDiT, compiled: two streams' q/k projections interleaved with their QK-norms, the
    value projections, the attention kernel, then the image stream's output projection, the next layer
    norm, the text stream's output projection, and the MLP. The ops' shapes say which GEMM is which."""
    t = SynthTrace()
    C, M1, M2 = 2432, 8192, 666
    norm = "triton_per_fused__to_copy_add_addmm_mean_mul_pow_rsqrt_transpose_view_5"
    gemm = "Cijk_Alik_Bljk_BBS_BH_Bias_MT320x224x64_MI16x16x1"

    def mm(m, k, n, bias=False):
        op, dims = ("aten::addmm", [[n], [m, k], [k, n]]) if bias else ("aten::mm", [[m, k], [k, n]])
        with t.op(op, dims=dims, types=[BF16] * len(dims)):
            t.kernel(gemm, dur=10)

    with t.op("Torch-Compiled Region: 0/0"):
        with t.op("triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_9"):
            t.kernel("triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_9", dur=3)
        for m in (M1, M2):
            mm(m, C, C)
            with t.op(norm):
                t.kernel(norm, dur=2)
        mm(M1, C, C, bias=True)
        mm(M2, C, C, bias=True)
        with t.op("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10"):
            t.kernel("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", dur=2)
        with t.op("aten::_flash_attention_forward", dims=[[2, 4429, 38, 64]] * 3, types=[BF16] * 3):
            t.kernel("attn_fwd", dur=50)
        mm(M1, C, C)
        with t.op("triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_21"):
            t.kernel("triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_21", dur=3)
        mm(M2, C, C)
        mm(M1, C, 4 * C)
    rows, _ = run(t, tmp_path)
    assert [r[1] for r in rows] == [
        None,
        "qkv_proj", "qkv_proj",  # q (image) and its QK-norm
        "qkv_proj", "qkv_proj",  # q (text) and its QK-norm
        "qkv_proj", "qkv_proj",  # the value projections
        "layout", "fused_attention",
        "out_proj", None, "out_proj",  # image out, the next layer norm, text out
        None,  # the MLP
    ]  # fmt: skip
