"""SDPA calls for synthetic traces (on top of synth.SynthTrace): one scaled_dot_product_attention
call on a chosen backend, with the op inputs PyTorch records, its kernels and optionally its
backward. Used by the comparison and advice tests."""

from __future__ import annotations

from synth import BF16, F32, SynthTrace

FLASH_KERNEL = (
    "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
FLASH_BWD_KERNEL = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>>()"


def _flag(x: bool) -> str:
    return "True" if x else "False"


def sdpa_call(
    t: SynthTrace,
    backend: str = "flash",
    b: int = 8,
    h: int = 32,
    hk: int = 32,
    sq: int = 1,
    sk: int = 4096,
    d: int = 128,
    dtype: str = BF16,
    enable_gqa: bool = False,
    mask: bool = False,
    dropout: float = 0.0,
    causal: bool = False,
    dur: float = 180.0,
    seq=None,
    strides=None,
    kernel: str = FLASH_KERNEL,
) -> None:
    """One F.scaled_dot_product_attention call. ``dur`` is the fused kernel's duration; the math
    backend splits it over its kernels (QK^T 30 %, scale 10 %, softmax 30 %, PV 30 %)."""
    q, k, v = [b, h, sq, d], [b, hk, sk, d], [b, hk, sk, d]
    m = [sq, sk] if mask else []
    top_dims = [q, k, v, m, [], [], [], []]
    top_types = [dtype] * 3 + [dtype if mask else "", "Scalar", "Scalar", "", "Scalar"]
    top_conc = ["", "", "", "", f"{dropout}", _flag(causal), "", _flag(enable_gqa)]
    st = strides or [[h * sq * d, sq * d, d, 1], [hk * sk * d, sk * d, d, 1], [hk * sk * d, sk * d, d, 1]]
    with t.op(
        "aten::scaled_dot_product_attention",
        dims=top_dims,
        types=top_types,
        concrete=top_conc,
        strides=st + [[] for _ in range(5)],
        seq=seq,
    ):
        if backend == "flash":
            with t.op(
                "aten::_scaled_dot_product_flash_attention",
                dims=[q, k, v, [], [], [], []],
                types=[dtype] * 3 + ["Scalar"] * 4,
                concrete=["", "", "", f"{dropout}", _flag(causal), "False", ""],
                strides=st + [[] for _ in range(4)],
                seq=seq,
            ):
                t.kernel(kernel, dur=dur)
        elif backend == "math":
            with t.op(
                "aten::_scaled_dot_product_attention_math",
                dims=[q, k, v, m, [], [], [], [], []],
                types=[dtype] * 3 + [dtype if mask else "", "Scalar", "Scalar", "", "", "Scalar"],
                concrete=["", "", "", "", f"{dropout}", _flag(causal), "", "", _flag(enable_gqa)],
                strides=st + [[] for _ in range(6)],
            ):
                with t.op("aten::mul", dims=[q, []], types=[dtype, "Scalar"]):
                    t.kernel(
                        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<MulFunctor>>",
                        dur=0.1 * dur,
                    )
                with t.op("aten::matmul", dims=[[b, h, sq, d], [b, h, d, sk]], types=[dtype] * 2):
                    with t.op("aten::bmm", dims=[[b * h, sq, d], [b * h, d, sk]], types=[dtype] * 2):
                        t.kernel("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNN", dur=0.3 * dur)
                with t.op(
                    "aten::_softmax",
                    dims=[[b, h, sq, sk], [], []],
                    types=[dtype, "Scalar", "Scalar"],
                    concrete=["", "-1", "False"],
                ):
                    t.kernel(
                        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>",
                        dur=0.3 * dur,
                    )
                with t.op("aten::matmul", dims=[[b, h, sq, sk], [b, h, sk, d]], types=[dtype] * 2):
                    with t.op("aten::bmm", dims=[[b * h, sq, sk], [b * h, sk, d]], types=[dtype] * 2):
                        t.kernel("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNN", dur=0.3 * dur)
        else:
            raise ValueError(backend)


def sdpa_backward(t: SynthTrace, seq: int, b=4, h=16, sq=2048, d=64, dur=300.0, causal=True) -> None:
    """The backward of a flash SDPA call whose forward carried sequence number ``seq``."""
    q = [b, h, sq, d]
    dims = [q, q, q, q, q, [b, h, sq], [], [], [], [], [], [], [], []]
    types = [BF16] * 5 + ["float"] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "", ""]
    conc = [""] * 8 + [str(sq), str(sq), "0.", _flag(causal), "", ""]
    with t.op("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", tid=200, seq=seq):
        with t.op("aten::_scaled_dot_product_flash_attention_backward", dims=dims, types=types, concrete=conc, tid=200):
            t.kernel(FLASH_BWD_KERNEL, dur=dur, tid=200)


def decode_pair(tmp_path, kv_heads: int = 8, steps: int = 1):
    """The same GQA decode step (8 x 32 query heads over a 8192-token KV cache, D=128, bf16) on the
    flash backend (enable_gqa=True) and on the math backend: (flash_path, math_path)."""
    paths = []
    # flash: the KV cache at ~45-90 % of the H200's bandwidth; math: ~15x slower, as on the H200
    for backend, dur in (("flash", 9.0 * kv_heads), ("math", 150.0 * kv_heads)):
        t = SynthTrace()
        for s in range(steps):
            with t.step(s + 1):
                with t.module("LlamaLikeAttention_0"):
                    sdpa_call(
                        t, backend, b=8, h=32, hk=kv_heads, sq=1, sk=8192, d=128, enable_gqa=kv_heads != 32, dur=dur
                    )
        paths.append(t.write(tmp_path / f"decode_gqa_{backend}.pt.trace.json"))
    return paths[0], paths[1]


__all__ = ["sdpa_call", "sdpa_backward", "decode_pair", "BF16", "F32", "SynthTrace"]
