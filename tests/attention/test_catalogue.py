"""The library kernel catalogue (attention/patterns.py KERNEL_CATALOGUE) on synthetic traces made
from documented kernel names: unscoped kernels (no CPU op, as in a CUDA-graph replay or a C++
extension called outside any module) are attention by name, with the phase of their role; KV-cache
writes are attention data movement ('layout'), never fused attention despite 'flash' in the name;
CUTLASS GEMMs and MoE routing are not attention."""

import pytest

from synth import SynthTrace
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.attention import patterns as P

# (demangled name as the profiler writes it, library, phase)
DOCUMENTED = [
    # FlashAttention-2 (csrc/flash_attn/src) and PyTorch's copy of it
    (
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, "
        "true, false, false, false, true, true, false>(flash::Flash_fwd_params)",
        "FlashAttention-2",
        "fused_attention",
    ),
    (
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, false, true>(Flash_fwd_params)",
        "FlashAttention-2",
        "fused_attention",
    ),
    (
        "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, 4, 2, true>(...)",
        "FlashAttention-2",
        "fused_attention",
    ),
    (
        "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>(...)",
        "FlashAttention-2",
        "fused_attention",
    ),
    (
        "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8>>(...)",
        "FlashAttention-2",
        "fused_attention",
    ),
    # FlashAttention-3 (hopper/): inside cutlass::device_kernel<...>
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
        "<2, cute::tuple<cute::C<1>>, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128>>, 128, cutlass::bfloat16_t>>>>"
        "(flash::FlashAttnFwdSm90::Params)",
        "FlashAttention-3",
        "fused_attention",
    ),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<...>>>(...)",
        "FlashAttention-3",
        "fused_attention",
    ),
    (
        "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>>, 7, 256, 1>>(...)",
        "FlashAttention-3",
        "fused_attention",
    ),
    (
        "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>>, float>>(...)",
        "FlashAttention-3",
        "fused_attention",
    ),
    # FlashAttention-4 (flash_attn/cute, CuTe DSL kernel symbols carry the class name)
    (
        "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11",
        "FlashAttention-4",
        "fused_attention",
    ),
    # xformers / PyTorch memory-efficient attention
    (
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)",
        "xformers / PyTorch mem-efficient",
        "fused_attention",
    ),
    ("fmha_cutlassB_bf16_aligned_128x64_k128_sm80(...)", "xformers / PyTorch mem-efficient", "fused_attention"),
    # FlashInfer (include/flashinfer/attention)
    (
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...>, flashinfer::BatchPrefill"
        "PagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>>(...)",
        "FlashInfer",
        "fused_attention",
    ),
    (
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u>"
        "(...)",
        "FlashInfer",
        "fused_attention",
    ),
    (
        "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<true, 2u, 4u, 64u>>(...)",
        "FlashInfer",
        "fused_attention",
    ),
    (
        "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>"
        "(...)",
        "FlashInfer",
        "fused_attention",
    ),
    (
        "void flashinfer::MergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16>(...)",
        "FlashInfer",
        "fused_attention",
    ),
    # vLLM
    (
        "void vllm::paged_attention_v1_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, "
        "false>(...)",
        "vLLM",
        "fused_attention",
    ),
    (
        "void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, 0, false, 512>(...)",
        "vLLM",
        "fused_attention",
    ),
    ("void vllm::paged_attention_v2_reduce_kernel<__nv_bfloat16, 128, 128, 512>(...)", "vLLM", "fused_attention"),
    ("kernel_unified_attention_2d", "vLLM", "fused_attention"),
    ("kernel_unified_attention_3d", "vLLM", "fused_attention"),
    # FlashMLA (csrc/kernels)
    (
        "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>,"
        " (flash::Flash_fwd_mla_params)>",
        "FlashMLA",
        "fused_attention",
    ),
    (
        "void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, float, 512, 64>(...)",
        "FlashMLA",
        "fused_attention",
    ),
    # cuDNN SDPA graphs (PyTorch's cudnn backend; Transformer Engine fused_attn_fwd/bwd)
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_cga1x1x1_kernel0_0",
        "cuDNN (SDPA, Transformer Engine fused_attn)",
        "fused_attention",
    ),
    # TensorRT-LLM
    (
        "fmhaSm100fKernel_QkvBfloat16OBfloat16HQk576HV512PagedKvDenseP64VarSeqQ8Kv128PersistentSwap",
        "TensorRT-LLM",
        "fused_attention",
    ),
    # KV-cache writes: data movement of the attention layer, NOT fused attention
    (
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)",
        "vLLM",
        "layout",
    ),
    (
        "void vllm::reshape_and_cache_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)",
        "vLLM",
        "layout",
    ),
    (
        "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)",
        "vLLM",
        "layout",
    ),
    ("void flashinfer::AppendPagedKVCacheKernel<128u, 8u, __nv_bfloat16, int>(...)", "FlashInfer", "layout"),
]

NOT_ATTENTION = [
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<...>>>(...)",  # a CUTLASS GEMM
    "nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_TNT",
    "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(...)",  # MoE router top-k
    "void at::native::(anonymous namespace)::radixSortKVInPlace<-2, -1, 16, 4, float, long>(...)",
    "void vllm::moe::moe_align_block_size_kernel<int>(...)",
    "fused_moe_kernel",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<...>>(...)",
    "void at::native::(anonymous namespace)::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>",
]


@pytest.mark.parametrize("name,library,phase", DOCUMENTED, ids=[f"{d[1]}:{d[0][:40]}" for d in DOCUMENTED])
def test_catalogue_entry(name, library, phase):
    e = P.library_kernel(name)
    assert e is not None and e.library == library and e.phase == phase
    assert e.phase in P.PHASES and e.source


@pytest.mark.parametrize("name", NOT_ATTENTION)
def test_not_attention_by_name(name):
    assert P.library_kernel(name) is None and not P.ATTENTION_KERNEL.search(name)


def test_unscoped_kernels_tagged_with_their_phase(tmp_path):
    t = SynthTrace()
    for name, _, _ in DOCUMENTED:
        t.kernel(name, dur=4)  # launched with no CPU op around it
    for name in NOT_ATTENTION:
        t.kernel(name, dur=4)
    rep = analyze_path(t.write(tmp_path / "x.json"))
    ks = [k for k in rep["kernels"] if k["kind"] == "kernel"]
    for k, (name, _, phase) in zip(ks, DOCUMENTED):
        assert k["attention"] and k["phase"] == phase and k["tag_source"] == "kernel_name", name
    for k in ks[len(DOCUMENTED) :]:
        assert not k["attention"], k["name"]
    # the KV-cache writes are attention time but not fused attention time
    writes = sum(k["dur_us"] for k in ks if k["phase"] == "layout")
    assert writes == pytest.approx(4 * 4)
    assert rep["fused_time_us"] == pytest.approx(4 * (len(DOCUMENTED) - 4))


def test_kv_cache_write_inside_an_attention_module_is_layout(tmp_path):
    t = SynthTrace()
    with t.module("LlamaAttention_0"):
        with t.op("_C_cache_ops::reshape_and_cache_flash"):
            t.kernel(DOCUMENTED[-4][0], dur=3)
        with t.op("_vllm_fa2_C::varlen_fwd"):
            t.kernel(DOCUMENTED[0][0], dur=20)
    rep = analyze_path(t.write(tmp_path / "x.json"))
    ks = [k for k in rep["kernels"] if k["kind"] == "kernel"]
    assert [(k["attention"], k["phase"]) for k in ks] == [(True, "layout"), (True, "fused_attention")]


def test_transformer_engine_fused_attn_op_is_fused_attention(tmp_path):
    t = SynthTrace()
    with t.op("FusedAttnFunc"):
        t.kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wmma_f16_knob_7_64x64x64", dur=10)
    rep = analyze_path(t.write(tmp_path / "x.json"))
    k = [k for k in rep["kernels"] if k["kind"] == "kernel"][0]
    assert k["attention"] and k["phase"] == "fused_attention" and k["tag_source"] == "sdpa_op"
