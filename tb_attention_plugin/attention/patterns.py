"""Names that identify attention: modules, functions, ops, kernels.

Everything here is a pattern over names that PyTorch, Hugging Face and the kernel libraries
produce; nothing is tied to one model. The module pattern is configurable (``--module-pattern``).
The phase vocabulary lives in :mod:`.vocabulary` (re-exported here for the engine's users).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from .vocabulary import (
    CORE_PHASES as CORE_PHASES,
    PHASE_INDEX as PHASE_INDEX,
    PHASE_LABELS as PHASE_LABELS,
    PHASES as PHASES,
    UNFUSED_CORE_PHASES as UNFUSED_CORE_PHASES,
)

# nn.Module class names (from "nn.Module: LlamaAttention_0") that scope attention.
DEFAULT_MODULE_PATTERN = r"(?i)attention|attn|\bmha\b"
# record_function / user annotation names that scope attention.
DEFAULT_ANNOTATION_PATTERN = r"(?i)attention|attn|sdpa|\bmha\b|flash"
# Python functions (with_stack=True) that are attention implementations.
ATTENTION_FUNCTION = re.compile(
    r"(?i)(scaled_dot_product_attention|multi_head_attention_forward|eager_attention_forward|"
    r"sdpa_attention_forward|flash_attention_forward|flex_attention|^_attn$|attention_forward)"
)
ROTARY_NAME = re.compile(r"(?i)rotary|\brope\b|apply_rotary|rotate_half")

# Attention ops of libraries whose namespace also holds other ops (aiter's norms and GEMMs,
# FlashInfer's sampling): only the ones whose name says attention.
_LIBRARY_ATTENTION_OP = (
    r"^(sageattention|sageattn|aiter|flashinfer|flash_attn_3|_flash_attn_3|flash_attn_4)::"
    r"\w*(attn|attention|fmha|mha|paged|pa_fwd|mla_decode|mla_prefill)\w*"
)
# CPU ranges that mark backward work outside the autograd engine's own ranges: pipeline schedules
# that run the input-gradient and weight-gradient halves of a layer's backward themselves
# (DualPipe / zero-bubble: "attn(B)", "attn(W)", "mlp(W)"), and record_function ranges named so.
BACKWARD_RANGE = re.compile(
    r"\((B|W|dgrad|wgrad)\)$|(?i:\bbackward\b|_backward\b|\bbwd\b|_bwd\b|\bwgrad\b|\bdgrad\b|weight_grad|input_grad)"
)
# Custom autograd Functions (an op name with no namespace, as the profiler records them) that
# wrap attention or a projection: RopeLoraFlashAttnVarlenFunc, LinearWithGradAccumulationFP8.
AUTOGRAD_ATTENTION_FUNCTION = re.compile(r"(?i)flash_?attn|attention|sdpa|fmha")
# Serving engines' custom ops: their namespace holds norms, GEMMs, MoE and all-reduce too
# (vllm::rocm_aiter_rmsnorm2d_fwd_with_add): only the ones named after attention
# (sglang_profiler:: ops wrap calls and are named after the code they wrap:
# attention_paged_attention_ragged_100)
_ENGINE_ATTENTION_OP = r"^(vllm|sglang|sglang_profiler)::\w*(attn|attention)\w*"
# Ops that *are* attention (any part of the SDPA family, forward or backward).
SDPA_OP = re.compile(
    r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_\w+|"
    r"_efficient_attention_\w+|_cudnn_attention_\w+|_native_multi_head_attention|_fused_sdp_choice|"
    r"_triton_multi_head_attention|_masked_softmax|flex_attention\w*)$"
    r"|^(flash_attn|flash_attn_\d|xformers|xformers_flash|fa3|torch_flash|mha)::\w*(attn|attention|fwd|bwd|mha)\w*$"
    r"|" + _ENGINE_ATTENTION_OP + r"$"
    r"|^(FlashAttnFunc|FlashAttnQKVPackedFunc|FlashAttnVarlenFunc|MemoryEfficientAttention\w*)\b"
    r"|^(FusedAttnFunc\w*|(transformer_engine\w*::|tex::)?fused_attn_(fwd|bwd)\w*)$"
    r"|" + _LIBRARY_ATTENTION_OP + r"$"
)
# SDPA-family ops whose own kernels compute the whole attention (no per-phase children).
FUSED_OP = re.compile(
    r"^aten::(_scaled_dot_product_(flash|efficient|cudnn|fused)_attention\w*|_flash_attention_\w+|"
    r"_efficient_attention_\w+|_cudnn_attention_\w+|_scaled_dot_product_flash_attention_for_cpu\w*|flex_attention\w*)$"
    r"|^(flash_attn|flash_attn_\d|xformers|xformers_flash|fa3|torch_flash|mha)::"
    r"|" + _ENGINE_ATTENTION_OP + r"$"
    r"|^(FlashAttnFunc|FlashAttnQKVPackedFunc|FlashAttnVarlenFunc|MemoryEfficientAttention\w*)\b"
    r"|^(FusedAttnFunc\w*|(transformer_engine\w*::|tex::)?fused_attn_(fwd|bwd)\w*)$"
    r"|" + _LIBRARY_ATTENTION_OP + r"$"
)
# Composite ops: their children carry the work (math backend, nn.MultiheadAttention fast path).
TRANSPARENT_OP = re.compile(
    r"^aten::(scaled_dot_product_attention|_scaled_dot_product_attention_math|_native_multi_head_attention|"
    r"_triton_multi_head_attention|matmul_backward)$"
)

# The ranges torch.compile runs its generated code in: the compiled frame (an op), the call of one
# compiled FX graph (an annotation) and the autograd function of a compiled training graph. Inside
# them no submodule's forward runs, so attention has no module scope there.
COMPILED_REGION = re.compile(
    r"^(Torch-Compiled Region\b|## Call CompiledFxGraph\b|CompiledFunction(Backward)?$|"
    r"autograd::engine::evaluate_function: CompiledFunctionBackward)"
)

# Kernels that are attention by name alone (used when nothing on the CPU side scopes them).
ATTENTION_KERNEL = re.compile(
    r"flash_fwd|flash_bwd|pytorch_flash::|flash::|fmha|Fmha|AttentionKernel|AttentionBackwardKernel|"
    r"attention_kernel|_sdpa_|native_sdpa|sdpa_|cudnn_generated_fort_native_sdpa|flash_attn|xformers|"
    r"flex_attention|fused_attention|paged_attention|decode_attention|mha_fwd|mha_bwd|attn_fwd|attn_bwd|"
    r"flash_decoding"
)


# Collective communication: never attention, whatever scope launched it. A tensor-parallel
# attention layer ends in an all-reduce launched from inside its output projection's module, and
# serving engines name their own all-reduce kernels. Kernels by name (NCCL/RCCL/MSCCL++, PyTorch
# symmetric memory's one-/two-shot and multimem kernels, vLLM/SGLang/aiter/TensorRT-LLM custom
# all-reduce, quick-reduce, DeepEP dispatch/combine, NVSHMEM, Transformer Engine userbuffers)...
COMMUNICATION_KERNEL = re.compile(
    r"(?i:nccl|rccl|msccl|multimem|cross_device_reduce|quick_?reduce|deep_ep::|nvshmem|userbuffers)"
    r"|\b(internode|intranode)::(dispatch|combine|notify|cached_notify)\b"
    r"|(?<![A-Za-z])(?i:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)"
    r"|AllReduce|AllGather|ReduceScatter|AllToAll|Alltoall"
)
# ...and everything launched under a collective op, annotation or Python function: c10d and its
# functional collectives, the "nccl:all_reduce" ranges c10d records, record_param_comms, custom
# ops of serving engines (vllm::all_reduce, sglang / aiter / _C_custom_ar all-reduce), symm_mem ops,
# and with_stack frames such as tensor_model_parallel_all_reduce (their copies into registered
# buffers included).
COMMUNICATION_RANGE = re.compile(
    r"^(c10d::|_?c10d_functional::|nccl:|gloo:|rccl:|symm_mem::|record_param_comms$)"
    r"|(?<![A-Za-z])(?i:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast_?coalesced)(?![A-Za-z])"
    r"|(?i:deep_ep|custom_ar|quick_?reduce|multimem)"
)


@functools.lru_cache(maxsize=16384)
def is_communication(name: str) -> bool:
    """A kernel or CPU range name that is collective communication."""
    return bool(COMMUNICATION_KERNEL.search(name) or COMMUNICATION_RANGE.search(name))


@functools.lru_cache(maxsize=16384)
def attention_by_name(name: str) -> bool:
    """A kernel whose name alone says it computes attention. Not an Inductor pointwise or reduction
    kernel: those are named after the ops they were fused from, and compute none of it."""
    if not ATTENTION_KERNEL.search(name):
        return False
    m = TRITON_KERNEL.match(name)
    return m is None or m.group(1) not in ("poi", "red", "per")


@dataclass(frozen=True)
class LibraryKernel:
    """A kernel family of an attention library: what its name looks like, where the name comes
    from, and the phase its time belongs to."""

    library: str
    pattern: re.Pattern[str]
    phase: str  # one of PHASES
    role: str  # attention | combine (split-KV / cascade merge) | aux (pre/post-processing) | kv_cache_write
    source: str  # the file that defines the kernel (for whoever updates this table)


def _k(library: str, pattern: str, phase: str, role: str, source: str) -> LibraryKernel:
    return LibraryKernel(library, re.compile(pattern), phase, role, source)


# First match wins: KV-cache writes come before anything else, since their names contain "flash"
# or "paged" and they are data movement, not attention math. Names are matched on the demangled
# kernel name as the profiler writes it (templates included): a bare ``cutlass::device_kernel<...>``
# is any CUTLASS kernel (most often a GEMM); only the ``flash::`` class inside makes it attention.
KERNEL_CATALOGUE: tuple[LibraryKernel, ...] = (
    # --- KV-cache writes: the attention layer's data movement (phase 'layout')
    _k(
        "vLLM",
        r"\breshape_and_cache(_flash)?_kernel|\bconcat_and_cache_mla_kernel",
        "layout",
        "kv_cache_write",
        "vllm csrc/cache_kernels.cu",
    ),
    _k(
        "FlashInfer",
        r"\b(RopeQuantize)?AppendPagedKV(Mla)?CacheKernel",
        "layout",
        "kv_cache_write",
        "flashinfer include/flashinfer/page.cuh, pos_enc.cuh",
    ),
    _k(
        "SGLang",
        r"\bstore_kvcache\b",
        "layout",
        "kv_cache_write",
        "sglang sgl-kernel store_kvcache (memory_pool set_kv_buffer)",
    ),
    # --- split-KV / cascade combine kernels: part of the fused attention call
    _k(
        "FlashAttention-2",
        r"flash_fwd_splitkv_combine_kernel",
        "fused_attention",
        "combine",
        "flash-attention csrc/flash_attn/src/flash_fwd_kernel.h (also PyTorch's pytorch_flash:: copy)",
    ),
    _k(
        "FlashAttention-3",
        r"flash::FlashAttnFwdCombine",
        "fused_attention",
        "combine",
        "flash-attention hopper/flash_fwd_combine_kernel.h",
    ),
    _k(
        "FlashMLA",
        r"flash_fwd_splitkv_mla_combine_kernel",
        "fused_attention",
        "combine",
        "FlashMLA csrc/kernels (flash_fwd_mla_kernel.h / splitkv_mla.cu)",
    ),
    _k(
        "FlashInfer",
        r"\b(Persistent)?(VariableLength)?MergeStates?(InPlace)?Kernel",
        "fused_attention",
        "combine",
        "flashinfer include/flashinfer/attention/cascade.cuh",
    ),
    _k(
        "vLLM",
        r"paged_attention_v2_reduce_kernel|^reduce_segments$",
        "fused_attention",
        "combine",
        "vllm csrc/attention/attention_kernels.cuh; vllm/v1/attention/ops/triton_unified_attention.py",
    ),
    _k(
        "CK-tile FMHA",
        r"FmhaFwdSplitKVCombineKernel|FmhaFwdAppendKVKernel",
        "fused_attention",
        "combine",
        "composable_kernel include/ck_tile/ops/fmha/kernel (fmha_fwd_splitkv_combine_kernel.hpp)",
    ),
    _k(
        "vLLM (ROCm)",
        r"paged_attention_ll4mi_reduce_kernel",
        "fused_attention",
        "combine",
        "vllm csrc/rocm/attention.cu",
    ),
    # --- pre- and post-processing that belongs to one attention call
    _k(
        "CK-tile FMHA",
        r"FmhaBwdOGradDotOKernel|FmhaBwdConvertQGradKernel",
        "fused_attention",
        "aux",
        "composable_kernel include/ck_tile/ops/fmha/kernel (fmha_bwd_kernel.hpp)",
    ),
    _k(
        "SageAttention",
        r"\bQuantInt8Kernel|\bSubMeanKernel|\bMeanScaleKernel|\bTransposePadPermuteKernel|"
        r"\bquant_per_(block|warp|thread)_int8\w*|\bquant_query_per_thread_int8\w*|\bsage_?quant\w*",
        "layout",
        "quantize",
        "SageAttention csrc/fused/fused.cu, sageattention/triton/quant_per_block.py (Q/K to INT8, V to FP8)",
    ),
    # --- the attention kernels
    _k(
        "SageAttention",
        r"\bqk_int8?_sv_f(8|16)\w*attn\w*|\bsage_?(attn|attention|fwd)\w*|\bsageattn\w*",
        "fused_attention",
        "attention",
        "SageAttention csrc/qattn (qk_int_sv_f16_attn_kernel, qk_int_sv_f8_attn_kernel); sageattention/core.py",
    ),
    _k(
        "CK-tile FMHA",
        r"\bFmha(Fwd|Bwd|Batch)\w*Kernel|\bck(_tile)?::\w*(fmha|multihead_attention)\w*|"
        r"kernel_batched_multihead_attention_(forward|backward)",
        "fused_attention",
        "attention",
        "composable_kernel include/ck_tile/ops/fmha (FmhaFwdKernel, FmhaBwdDQDKDVKernel...); ck device_batched_mha",
    ),
    _k(
        "aiter",
        r"\baiter::\w*(fmha|mha|attn|pa_|mla)\w*|\bfmha_(v3_)?(fwd|bwd)(_v3)?_\w*(hd|bf16|fp16|fp8)\w*|"
        r"\b_ZN aiter \w*(fmha|mha|pa_|mla)\w*",
        "fused_attention",
        "attention",
        "aiter csrc/py_itfs_cu/asm_fmha_*.cu, asm_pa.cu, asm_mla.cu (hand-written assembly kernels)",
    ),
    _k(
        "vLLM (ROCm)",
        r"paged_attention_ll4mi\w*kernel",
        "fused_attention",
        "attention",
        "vllm csrc/rocm/attention.cu",
    ),
    _k(
        "FlashAttention-2",
        r"flash_fwd_kernel|flash_fwd_splitkv_kernel|flash_bwd_dq_dk_dv_loop\w*_kernel",
        "fused_attention",
        "attention",
        "flash-attention csrc/flash_attn/src/flash_fwd_kernel.h, flash_bwd_kernel.h",
    ),
    _k(
        "FlashAttention-2",
        r"flash_bwd_(dot_do_o|convert_dq|convert_dkv|clear_dkvaccum)_kernel",
        "fused_attention",
        "aux",
        "flash-attention csrc/flash_attn/src/flash_bwd_preprocess_kernel.h",
    ),
    _k(
        "FlashAttention-3",
        r"flash::FlashAttn(Fwd|Bwd)(Sm\d+)?<|flash::compute_attn(_ws)?\b|flash::compute_dq_dk_dv\w*",
        "fused_attention",
        "attention",
        "flash-attention hopper/flash_fwd_kernel_sm90.h, flash_bwd_kernel_sm90.h (in cutlass::device_kernel<...>)",
    ),
    _k(
        "FlashAttention-3",
        r"flash::FlashAttnBwd(Preprocess|Postprocess\w*)",
        "fused_attention",
        "aux",
        "flash-attention hopper/flash_bwd_preprocess_kernel.h, flash_bwd_postprocess_kernel.h",
    ),
    _k(
        "FlashAttention-4",
        r"FlashAttention(Forward|Backward)(Sm\d+|Base)?|FlashAttentionBackward(Pre|Post)process",
        "fused_attention",
        "attention",
        "flash-attention flash_attn/cute/flash_fwd_sm100.py, flash_bwd*.py (CuTe DSL)",
    ),
    _k(
        "FlashMLA",
        r"flash_fwd_splitkv_mla_kernel|flash_(sparse_)?(decode|prefill)_fwd_kernel",
        "fused_attention",
        "attention",
        "FlashMLA csrc/kernels",
    ),
    _k(
        "xformers / PyTorch mem-efficient",
        r"fmha_cutlass[FB]_|\bAttention(Backward)?Kernel<",
        "fused_attention",
        "attention",
        "xformers/csrc/attention/cuda/fmha/kernels; PyTorch "
        "aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernels",
    ),
    _k(
        "FlashInfer",
        r"\b(Batch|Single)(Prefill|Decode)With(Paged|Ragged)?KVCache(Tensor)?Kernel|"
        r"\bBatchMLAPagedAttention\w*Kernel|\bPODWithKVCacheTensorKernel",
        "fused_attention",
        "attention",
        "flashinfer include/flashinfer/attention/prefill.cuh, decode.cuh, mla.cuh, pod.cuh",
    ),
    _k(
        "vLLM",
        r"paged_attention_v[12]_kernel|kernel_unified_attention_[23]d",
        "fused_attention",
        "attention",
        "vllm csrc/attention/attention_kernels.cuh; vllm/v1/attention/ops/triton_unified_attention.py",
    ),
    _k(
        "cuDNN (SDPA, Transformer Engine fused_attn)",
        r"cudnn_generated_\w*sdpa\w*|cudnn\w*_fmha|"
        r"\bsm\d+_?x?fmha",
        "fused_attention",
        "attention",
        "cuDNN frontend SDPA graphs (PyTorch cudnn backend; transformer_engine fused_attn_fwd/bwd)",
    ),
    _k(
        "TensorRT-LLM",
        r"\bfmhaSm\d+\w*Kernel|\bfmha_v2_\w+",
        "fused_attention",
        "attention",
        "TensorRT-LLM cpp/tensorrt_llm/kernels (trtllm-gen fmha, fmha_v2)",
    ),
    # generic Triton attention names last: every library above is more specific
    _k(
        "Triton attention",
        r"^_?attn_(fwd|bwd)\w*$|^_fwd_(grouped_)?kernel_stage[12]$",
        "fused_attention",
        "attention",
        "Triton attention kernels: the tutorial's _attn_fwd (vLLM ROCm triton_flash_attention, SageAttention "
        "v1), SGLang decode_attention.py (_fwd_(grouped_)kernel_stage1/2)",
    ),
)


@functools.lru_cache(maxsize=16384)
def library_kernel(name: str) -> Optional[LibraryKernel]:
    """The catalogue entry a kernel name belongs to, or None. ROCm traces give mangled names
    (``_ZN7ck_tile6kentry...38FmhaBatchPrefill...``): their identifiers are read apart first."""
    text = unmangled(name)
    for e in KERNEL_CATALOGUE:
        if e.pattern.search(text):
            return e
    return None


def unmangled(name: str) -> str:
    """An Itanium-mangled name (``_Z...``) with each length-prefixed identifier set apart by spaces
    (``_ZN7ck_tile6kentry`` -> ``_ZN ck_tile kentry``), enough for word-bounded patterns; any other
    name as it is. Not a demangler: template arguments stay encoded."""
    if not name.startswith("_Z"):
        return name
    out, i, n = [], 0, len(name)
    while i < n:
        c = name[i]
        if c.isdigit():
            j = i
            while j < n and name[j].isdigit():
                j += 1
            length = int(name[i:j])
            if 0 < length <= n - j and (name[j].isalpha() or name[j] == "_"):
                out.append(" " + name[j : j + length] + " ")
                i = j + length
                continue
            out.append(name[i:j])
            i = j
            continue
        out.append(c)
        i += 1
    return re.sub(" +", " ", "".join(out))


# Triton kernels produced by Inductor: triton_<kind>_fused_<op>_<op>..._<n>
TRITON_KERNEL = re.compile(r"^triton_(poi|red|per|tem|mm|bmm|for|tma)_\w*?fused_?(?P<ops>\w*?)_?\d*$")

# Op names (without "aten::") by role, used to classify units inside an attention scope.
PROJ_OPS = frozenset(
    {"linear", "addmm", "addmv", "_transform_bias_rescale_qkv", "_addmm_activation", "conv1d", "_scaled_mm"}
)
BATCHED_MM_OPS = frozenset({"bmm", "baddbmm"})
AMBIGUOUS_MM_OPS = frozenset({"matmul", "mm", "einsum", "mv", "dot", "tensordot"})
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "_safe_softmax", "_masked_softmax", "special_softmax"})
DROPOUT_OPS = frozenset(
    {
        "dropout",
        "native_dropout",
        "feature_dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "_fused_dropout",
        "dropout_",
    }
)
SCALE_OPS = frozenset({"div", "div_", "mul", "mul_", "true_divide", "true_divide_", "multiply", "divide"})
MASK_OPS = frozenset(
    {
        "masked_fill",
        "masked_fill_",
        "where",
        "add",
        "add_",
        "sub",
        "sub_",
        "triu",
        "tril",
        "triu_",
        "tril_",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "zeros",
        "zeros_like",
        "fill_",
        "zero_",
        "logical_not",
        "logical_and",
        "logical_or",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "isneginf",
        "any",
        "all",
        "arange",
        "scalar_tensor",
        "bitwise_not",
        "minimum",
        "maximum",
        "clamp",
        "clamp_min",
    }
)
ROTARY_OPS = frozenset(
    {
        "neg",
        "sin",
        "cos",
        "cat",
        "mul",
        "add",
        "sub",
        "slice",
        "narrow",
        "chunk",
        "stack",
        "polar",
        "view_as_complex",
        "view_as_real",
        "_to_copy",
        "to",
        "unsqueeze",
    }
)
ROTARY_MARKERS = frozenset({"neg", "sin", "cos", "view_as_complex", "polar"})
LAYOUT_OPS = frozenset(
    {
        "copy_",
        "contiguous",
        "clone",
        "_to_copy",
        "to",
        "transpose",
        "permute",
        "cat",
        "stack",
        "view",
        "reshape",
        "expand",
        "expand_as",
        "repeat",
        "repeat_interleave",
        "index_select",
        "_unsafe_view",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "slice",
        "select",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "t",
        "as_strided",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "_reshape_alias",
        "detach",
        "alias",
        "index",
        "gather",
        "type_as",
        "movedim",
        "swapaxes",
        "lift_fresh",
        "_local_scalar_dense",
        "item",
        "resize_",
        "set_",
        "index_put_",
        "index_copy_",
        "scatter",
        "scatter_",
        "_unsafe_index",
        "index_copy",
        "pad",
        "constant_pad_nd",
    }
)
# Ops that only move data; their kernels inside matmul / projection / softmax units are 'layout'.
COPY_OPS = frozenset(
    {
        "copy_",
        "clone",
        "contiguous",
        "_to_copy",
        "cat",
        "stack",
        "index_select",
        "repeat_interleave",
        "repeat",
        "_unsafe_index",
        "gather",
    }
)
# Helper kernels a fused attention op launches besides its attention kernel: zero-fills of its
# outputs or accumulators (FillFunctor, memset), copies of its inputs. They are data movement, not
# attention math: 'layout', whatever op launched them.
HELPER_KERNEL = re.compile(r"FillFunctor|^Memset\b|^Memcpy\b|\bmemset|direct_copy_kernel|\bcopy_kernel|zero_kernel")
COPY_REFINED_PHASES = ("qkv_proj", "out_proj", "qk_matmul", "pv_matmul", "softmax", "scale")
# Modules of the feed-forward half of a block: an attention-named module around one is a block or a
# model, not an attention call
FFN_MODULE = re.compile(r"(?i)mlp|feed_?forward|\bffn|ffn\b|experts?\b|\bmoe|moe\b|SwiGLU|GatedMLP")
LINEAR_MODULE = re.compile(r"(?i)linear|conv1d|^dense")
# a norm inside an attention module: MLA's latent norms between the low-rank down and up
# projections (q_a_layernorm, kv_a_layernorm), QK-norm (q_norm, k_norm) — part of the projection path
NORM_MODULE = re.compile(r"(?i)norm")
# ops that normalise (aten::layer_norm, rms_norm, group_norm; libraries' rmsnorm ops, qk_norm helpers);
# not vector norms used as a reduction elsewhere
NORM_OP = re.compile(r"(?i)(layer|rms|group|batch|qk|instance)_?norm")
DROPOUT_MODULE = re.compile(r"(?i)dropout")
SOFTMAX_MODULE = re.compile(r"(?i)^softmax")
LOG_SOFTMAX = re.compile(r"log_softmax")


def module_class(name: str) -> str:
    """'nn.Module: LlamaAttention_0' -> 'LlamaAttention'."""
    cls = name.split(":", 1)[1].strip() if ":" in name else name
    return re.sub(r"_\d+$", "", cls)


def python_function(name: str) -> str:
    """'path/file.py(12): apply_rotary_pos_emb' -> 'apply_rotary_pos_emb'."""
    return name.rsplit(": ", 1)[-1] if ": " in name else name


def short_op(name: str) -> str:
    return name[6:] if name.startswith("aten::") else name


def triton_ops(kernel_name: str) -> list[str]:
    """:func:`_triton_ops` as a list of the caller's own (the parse is memoised: a compiled model
    repeats its few hundred kernel names in every step)."""
    return list(_triton_ops(kernel_name))


@functools.lru_cache(maxsize=16384)
def _triton_ops(kernel_name: str) -> tuple[str, ...]:
    """Op names fused into an Inductor Triton kernel name, e.g. ['_softmax', 'div', 'masked_fill'].

    Inductor joins op names with '_' (ops that start with '_' give '__'), so multi-word names are
    matched against the known vocabulary first (longest first); unknown words stay single."""
    m = TRITON_KERNEL.match(kernel_name)
    if not m:
        return ()
    body = kernel_name.split("fused", 1)[1] if "fused" in kernel_name else ""
    body = re.sub(r"_\d+$", "", body)
    body = body[1:] if body.startswith("_") else body  # the separator after 'fused'
    words = body.split("_")
    out, i = [], 0
    while i < len(words):
        if not words[i]:  # '__x' -> the op '_x'
            i += 1
            if i < len(words) and words[i]:
                words[i] = "_" + words[i]
            continue
        for j in range(min(len(words), i + 6), i, -1):
            cand = "_".join(words[i:j])
            if cand in _KNOWN_OPS or cand.lstrip("_") in _KNOWN_OPS:
                out.append(cand)
                i = j
                break
        else:
            out.append(words[i])
            i += 1
    return tuple(out)


@functools.lru_cache(maxsize=16384)
def triton_phase(kernel_name: str) -> str | None:
    """Phase of an Inductor kernel from the ops in its name, or None if it says nothing."""
    if not kernel_name.startswith("triton_"):
        return None
    low = kernel_name.lower()
    m = TRITON_KERNEL.match(kernel_name)
    # Inductor names a kernel after the ops fused into it: a pointwise or reduction kernel whose
    # name lists an attention op (the cat/transpose before it, a norm after it) computes no attention
    fused_kind = m.group(1) if m else None
    if ("flex_attention" in low or "sdpa" in low or "attention" in low or "fmha" in low) and fused_kind not in (
        "poi",
        "red",
        "per",
    ):
        return "fused_attention"
    if "log_softmax" in low or "nll_loss" in low or "cross_entropy" in low:
        return None
    if "softmax" in low:
        return "softmax"
    if "dropout" in low or "bernoulli" in low or "_rand" in low:
        return "dropout"
    if "masked_fill" in low or "where" in low:
        return "mask"
    if low.startswith(("triton_tem_fused_bmm", "triton_tem_fused_baddbmm")):
        return "matmul"
    return None


_KNOWN_OPS = (
    PROJ_OPS
    | BATCHED_MM_OPS
    | AMBIGUOUS_MM_OPS
    | SOFTMAX_OPS
    | DROPOUT_OPS
    | SCALE_OPS
    | MASK_OPS
    | LAYOUT_OPS
    | ROTARY_OPS
    | frozenset(
        {"_softmax_backward_data", "native_dropout_backward", "prepare_softmax_online", "masked_fill", "exp", "log"}
    )
    # attention ops whose inputs' views a pointwise kernel can be fused from
    | frozenset(
        {
            "scaled_dot_product_attention",
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "flex_attention",
            "flex_attention_backward",
        }
    )
)


@functools.lru_cache(maxsize=16384)
def triton_unit(kernel_name: str) -> str:
    """Unit category of an Inductor kernel from the ops fused into it (see tagger._assign_phases)."""
    ph = triton_phase(kernel_name)
    if ph == "fused_attention":
        return "fused"
    if ph == "matmul":
        return "mm"
    if ph in ("softmax", "dropout", "mask"):
        return ph
    # the attention op a pointwise kernel was fused from names no work of its own (its inputs' view)
    ops = {t.lstrip("_") for t in triton_ops(kernel_name) if not re.search(r"attention|fmha|sdpa", t)}
    if not ops:
        return "other"
    if ops <= {o.lstrip("_") for o in LAYOUT_OPS}:
        return "layout"
    if ops <= {o.lstrip("_") for o in MASK_OPS | LAYOUT_OPS}:
        return "mask"
    if ops <= {o.lstrip("_") for o in SCALE_OPS | LAYOUT_OPS}:
        return "scale"
    return "other"


def strip_templates(s: str) -> str:
    """Drop every balanced <...> (template arguments), however deeply nested."""
    if "<" not in s:
        return s
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)
