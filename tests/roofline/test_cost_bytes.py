"""Bytes from recorded strides, out= tensors, mixed dtypes and the L2 reuse note (issue #11).

The signatures below are copied from real H200 traces (validation/traces), with the Nsight
Compute DRAM bytes of the same kernels (validation/results/kernels.csv) where they exist."""

import msgspec
import pytest

from tb_attention_plugin.roofline.cost import Cost, l2_reuse, op_cost, result_dtype
from tb_attention_plugin.trace.records import Signature
from tb_attention_plugin.trace.shapes import parse_args

BF, F = "c10::BFloat16", "float"


def sargs(dims, types, strides=None, concrete=None):
    enc = msgspec.json.encode
    strides = strides if strides is not None else [[] for _ in dims]
    return parse_args(Signature(enc(dims), enc(types), enc(strides), enc(concrete or [""] * len(dims))))


def test_expanded_kv_repeat_reads_each_element_once():
    """SDPA math backend, GQA decode: repeat_interleave copies K [8, 8, 8192, 128] fp32 expanded
    4x along a stride-0 dim. Nsight Compute: 1,316,434,688 DRAM bytes for this kernel."""
    shape = [8, 8, 4, 8192, 128]
    a = sargs(
        [shape, shape, []],
        [F, F, "Scalar"],
        [[33554432, 4194304, 1048576, 128, 1], [8388608, 1048576, 0, 128, 1], []],
        ["", "", "False"],
    )
    c = op_cost("aten::copy_", a)
    src = 8 * 8 * 8192 * 128 * 4
    assert c.reads == src and c.bytes == src + 4 * src
    assert c.bytes / 1_316_434_688 < 1.3  # was 2.147 GB (1.63x) with logical sizes
    assert c.bytes / 1_316_434_688 > 0.95


def test_slice_reads_what_it_touches():
    """A KV-cache write: copy_ into a [8, 8, 1, 128] slice of an [8, 8, 8192, 128] cache."""
    a = sargs(
        [[8, 8, 1, 128], [8, 8, 1, 128], []], [BF, BF, "Scalar"], [[8388608, 1048576, 128, 1], [1024, 128, 1024, 1], []]
    )
    c = op_cost("aten::copy_", a)
    assert c.bytes == 2 * 8 * 8 * 128 * 2
    # a transposed (permuted) view is read whole: every element is distinct
    a = sargs([[8, 32, 128, 8192], []], [F, "double"], [[33554432, 1048576, 1, 128], []])
    assert op_cost("aten::mul", a).reads == 8 * 32 * 128 * 8192 * 4 + 8
    # overlapping windows (unfold): at most the span from the first to the last element
    a = sargs([[100, 10], []], [F, "Scalar"], [[1, 1], []], ["", "1"])
    assert op_cost("aten::clone", a).reads == (1 + 99 + 9) * 4


def test_out_tensor_is_written_not_read():
    """mul.out(self, Scalar other, *, out): the third tensor is the output (HTA public trace)."""
    n = 1024 * 1705
    c = op_cost("aten::mul", sargs([[1024, 1705], [], [1024, 1705]], [F, "double", F]))
    assert c.reads == n * 4 + 8 and c.bytes == n * 4 * 2 + 8
    # _softmax.out(self, dim, half_to_float, *, out): 805 MB -> 537 MB (ncu: 510,759,936)
    shape = [16, 16, 512, 512]
    c = op_cost(
        "aten::_softmax", sargs([shape, [], [], shape], [F, "Scalar", "Scalar", F], concrete=["", "-1", "False", ""])
    )
    assert c.bytes == 2 * 16 * 16 * 512 * 512 * 4
    # where.self_out(cond, self, other, *, out) of the safe softmax (decode_gqa_math)
    s = [8, 32, 1, 8192]
    c = op_cost("aten::where", sargs([[8, 32, 1, 1], [], s, s], ["bool", F, F, F]))
    n = 8 * 32 * 8192
    assert c.bytes == 8 * 32 + 4 + n * 4 + n * 4
    # linear.out(input, weight, bias=None, *, out): the out tensor is not a bias
    c = op_cost("aten::linear", sargs([[8, 64], [32, 64], [], [8, 32]], [BF, BF, "", BF]))
    assert c.reads == (8 * 64 + 32 * 64) * 2 and c.bytes == c.reads + 8 * 32 * 2
    # isneginf.out(self, *, out): a unary op's second tensor is its output
    c = op_cost("aten::isneginf", sargs([[64], [64]], [F, "bool"]))
    assert c.reads == 64 * 4 and c.bytes == 64 * 4 + 64


def test_mixed_dtypes_take_the_promoted_dtype():
    """bf16 scores + fp32 mask -> fp32: the output is fp32 (4 bytes), the op is fp32."""
    s = [2, 16, 128, 128]
    c = op_cost("aten::add", sargs([s, [2, 1, 128, 128], []], [BF, F, "Scalar"], concrete=["", "", "1"]))
    n = 2 * 16 * 128 * 128
    assert c.dtype == "fp32"
    assert c.bytes == n * 2 + 2 * 128 * 128 * 4 + n * 4
    # a wrapped Python float (recorded as a 0-dim double) does not promote a bf16 tensor
    assert op_cost("aten::mul", sargs([s, []], [BF, "double"])).dtype == "bf16"
    # 0-dim bf16 values with a bool condition (HF mask creation): bf16, not fp32
    assert op_cost("aten::where", sargs([[2, 1, 64, 64], [], []], ["bool", BF, BF])).dtype == "bf16"
    assert op_cost("aten::add", sargs([s, s, []], [BF, "c10::Half", "Scalar"])).dtype == "fp32"
    assert op_cost("aten::add", sargs([s, s, []], ["long int", "int", "Scalar"])).dtype == "int64"
    # comparisons: bool out, the inputs' dtype for the op
    c = op_cost("aten::lt", sargs([s, s], [BF, BF]))
    assert c.dtype == "bf16" and c.output[1] == "bool" and c.bytes == n * 2 * 2 + n
    # an in-place op writes its self, whatever the other operand's dtype
    c = op_cost("aten::add_", sargs([s, s, []], [BF, F, "Scalar"]))
    assert c.dtype == "bf16" and c.bytes == n * 2 + n * 4 + n * 2


def test_result_dtype():
    a = sargs([[4], [], [4]], [BF, F, "signed char"])
    assert result_dtype([a[0], a[1]]) == "bf16"
    assert result_dtype([a[2], a[1]]) == "fp32"
    assert result_dtype([a[2]]) == "int8"


def _c(out, inputs, nbytes):
    return Cost(1.0, float(nbytes), "fp32", inputs=tuple(inputs), output=out, reads=float(sum(b for *_, b in inputs)))


def test_l2_reuse_notes_an_operand_just_written():
    """safe softmax: _softmax writes P; isneginf, all and a scalar fill follow; where reads P."""
    p = ((8, 32, 1, 8192), "fp32")
    nb = 8 * 32 * 8192 * 4
    softmax = _c(p, [((8, 32, 1, 8192), "fp32", nb)], 2 * nb)
    isneginf = _c(((8, 32, 1, 8192), "bool"), [((8, 32, 1, 8192), "fp32", nb)], nb + nb // 4)
    fill = _c(((), "fp32"), [], 4)
    where = _c(
        ((8, 32, 1, 8192), "fp32"),
        [((8, 32, 1, 1), "bool", 256), ((), "fp32", 4), ((8, 32, 1, 8192), "fp32", nb)],
        2 * nb,
    )
    out = l2_reuse([softmax, softmax, isneginf, fill, where], 60 * 2**20)
    assert out[4].l2_hint and "3 ops earlier" in out[4].l2_hint and out[4].l2_bytes == nb
    assert out[2].l2_hint and out[0].l2_hint is None and out[3].l2_hint is None
    assert where.l2_hint is None  # the input costs are never mutated
    # too much traffic in between: evicted
    assert l2_reuse([softmax, isneginf, fill, where], 16 * 2**20)[3].l2_hint is None
    # an unknown op in between: no claim
    assert l2_reuse([softmax, None, where], 60 * 2**20)[2].l2_hint is None
    # no L2 size known: nothing
    assert l2_reuse([softmax, where], None)[1].l2_hint is None


@pytest.mark.parametrize(
    "strides,expect",
    [
        ([4, 1], 8),
        ([0, 1], 4),
        ([0, 0], 1),
        ([1, 2], 8),
        ([8, 2], 8),
        ([1, 1], 5),
    ],
)
def test_distinct_elements(strides, expect):
    a = sargs([[2, 4]], [F], [strides])[0]
    assert a.distinct_elements == expect and a.read_bytes == 4 * expect


FP8 = "c10::Float8_e4m3fn"


def test_scaled_mm_flops_from_dims_and_the_fp8_roof():
    """torch._scaled_mm(a [m,k] e4m3, b [k,n] e4m3 column-major, scale_a, scale_b, out_dtype=bf16)."""
    m, k, n = 8192, 4096, 14336
    a = sargs(
        [[m, k], [k, n], [], [], [], [], [], []],
        [FP8, FP8, F, F, "", "", "Scalar", "Scalar"],
        [[k, 1], [1, k], [], [], [], [], [], []],
        ["", "", "", "", "", "", "15", "False"],
    )
    c = op_cost("aten::_scaled_mm", a)
    assert c.flops == 2.0 * m * n * k and c.dtype == "fp8" and c.engine == "matrix"
    assert c.bytes == m * k + k * n + 4 + 4 + m * n * 2  # fp8 operands, fp32 scales, bf16 out
    assert c.output == ((m, n), "bf16")
    # row-wise scales [m, 1] and [1, n]; no out_dtype: fp8 output
    a = sargs([[m, k], [k, n], [m, 1], [1, n]], [FP8, FP8, F, F])
    c = op_cost("aten::_scaled_mm", a)
    assert c.bytes == m * k + k * n + 4 * (m + n) + m * n
    # the v2 API (scales as tensor lists)
    a = sargs(
        [[m, k], [k, n], [[m, 1]], [], [], [[1, n]], [], [], [], []],
        [FP8, FP8, "TensorList", "", "", "TensorList", "", "", "", "Scalar"],
        concrete=[""] * 9 + ["15"],
    )
    c = op_cost("aten::_scaled_mm_v2", a)
    assert c.flops == 2.0 * m * n * k and c.bytes == m * k + k * n + 4 * (m + n) + m * n * 2


def test_grouped_mm_for_moe_experts():
    t, k, n, g = 4096, 2048, 1408, 64
    c = op_cost("aten::_grouped_mm", sargs([[t, k], [g, k, n], [g]], [BF, BF, "int"]))
    assert c.flops == 2.0 * t * k * n and c.bytes == (t * k + g * k * n + t * n) * 2 + g * 4
    c = op_cost("aten::_grouped_mm", sargs([[g, 16, k], [g, k, n]], [BF, BF]))
    assert c.flops == 2.0 * g * 16 * k * n
    c = op_cost("aten::_grouped_mm", sargs([[n, t], [t, k], [g]], [BF, BF, "int"]))  # weight gradient
    assert c.flops == 2.0 * n * t * k and c.output[0] == (g, n, k)
    c = op_cost("aten::_scaled_grouped_mm", sargs([[t, k], [g, k, n], [t], [g, n], [g]], [FP8, FP8, F, F, "int"]))
    assert c.flops == 2.0 * t * k * n and c.dtype == "fp8"


def test_quantisation_ops_are_elementwise_and_reductions():
    """amax(abs(x)) -> scale = 448 / amax -> clamp(x * scale) -> _to_copy(float8_e4m3fn)."""
    x = [4096, 4096]
    n = 4096 * 4096
    assert op_cost("aten::abs", sargs([x], [BF])).bytes == n * 4
    assert op_cost("aten::amax", sargs([x, [], []], [BF, "ScalarList", "Scalar"])).bytes == n * 2
    assert op_cost("aten::reciprocal", sargs([[]], [F])).bytes == 8
    assert (
        op_cost("aten::clamp", sargs([x, [], []], [F, "Scalar", "Scalar"], concrete=["", "-448", "448"])).bytes == n * 8
    )
    c = op_cost(
        "aten::_to_copy",
        sargs([x] + [[]] * 6, [F, "Scalar", "", "", "", "Scalar", ""], concrete=["", "24", "", "", "", "False", ""]),
    )
    assert c.bytes == n * 4 + n and c.output == (tuple(x), "fp8")


I32 = "int"


def flex_fwd_args(b=2, h=16, hk=4, s=2048, d=128):
    """Inductor's flex forward template: Q, K, V, M, L, KV_NUM_BLKS, KV_IDX, FULL_KV_NUM_BLKS,
    FULL_KV_IDX, then the output (128-token blocks)."""
    nb = s // 128
    q, k = [b, h, s, d], [b, hk, s, d]
    dims = [q, k, k, [b, h, s], [b, h, s], [b, 1, nb], [b, 1, nb, nb], [b, 1, nb], [b, 1, nb, nb], q]
    types = [BF, BF, BF, F, F, I32, I32, I32, I32, BF]
    return sargs(dims, types)


@pytest.mark.parametrize("name", ["triton_tem_fused_flex_attention_0", "triton_tem_fused__unsafe_view_split_view_53"])
def test_flex_attention_forward_is_a_dense_upper_bound(name):
    b, h, hk, s, d = 2, 16, 4, 2048, 128
    c = op_cost(name, flex_fwd_args(b, h, hk, s, d))
    assert c.upper_bound and c.engine == "matrix" and c.dtype == "bf16"
    assert c.flops == c.flops_dense == 4.0 * b * h * s * s * d
    assert c.detail["hk"] == hk and c.detail["causal"] is None
    qb, kb = b * h * s * d * 2, b * hk * s * d * 2
    assert c.bytes >= qb + 2 * kb + qb  # q, k, v read, out written (at least)


def test_flex_attention_backward_is_two_and_a_half_forwards():
    b, h, s, d = 1, 8, 1024, 64
    q = [b, h, s, d]
    nb = s // 128
    dims = [q, q, q, [b, h, s], [b, h, s], q, q, q, [b, 1, nb], [b, 1, nb, nb], [b, 1, nb], [b, 1, nb, nb], q]
    types = [BF, BF, BF, F, F, BF, BF, BF, I32, I32, I32, I32, BF]
    for name in ("triton_tem_fused_flex_attention_backward_1", "triton_tem_fused_zeros_1"):
        c = op_cost(name, sargs(dims, types))
        assert c.upper_bound and c.flops == 2.5 * 4.0 * b * h * s * s * d, name


def test_a_matmul_template_is_not_flex():
    c = op_cost("triton_tem_fused_mm_0", sargs([[64, 32], [32, 16], [64, 16]], [BF, BF, BF]))
    assert not c.upper_bound and c.flops == 2 * 64 * 32 * 16


def test_moe_routing_ops_get_memory_costs():
    t, e, k = 4096, 64, 8
    logits = [t, e]
    c = op_cost(
        "aten::topk",
        sargs(
            [logits, [], [], [], []],
            [F, "Scalar", "Scalar", "Scalar", "Scalar"],
            concrete=["", str(k), "-1", "True", "True"],
        ),
    )
    assert c.bytes == t * e * 4 + t * k * (4 + 8)
    c = op_cost("aten::sort", sargs([[t * k], [], []], ["long int", "Scalar", "Scalar"], concrete=["", "0", "False"]))
    assert c.bytes == t * k * 8 * 3
    c = op_cost(
        "aten::argsort", sargs([[t * k], [], []], ["long int", "Scalar", "Scalar"], concrete=["", "0", "False"])
    )
    assert c.bytes == t * k * 8 * 2
    h = 2048
    # token permutation: index_select rows of the hidden states
    c = op_cost("aten::index_select", sargs([[t, h], [], [t * k]], [BF, "Scalar", "long int"], concrete=["", "0", ""]))
    assert c.bytes == t * k * 8 + min(t * k * h * 2, t * h * 2) + t * k * h * 2
    c = op_cost("aten::gather", sargs([[t, e], [], [t, k]], [F, "Scalar", "long int"], concrete=["", "1", ""]))
    assert c.bytes == t * k * 8 + t * k * 4 + t * k * 4
    # combine: scatter_add_ of expert outputs back into tokens (read-modify-write what it touches)
    c = op_cost("aten::scatter_add_", sargs([[t, h], [], [t * k, h], [t * k, h]], [BF, "Scalar", "long int", BF]))
    assert c.bytes == t * k * h * 8 + t * k * h * 2 + t * h * 2 * 2
    c = op_cost("aten::index_add_", sargs([[t, h], [], [t * k], [t * k, h]], [BF, "Scalar", "long int", BF]))
    assert c.reads == t * k * 8 + t * k * h * 2 + t * h * 2
    assert op_cost("aten::histc", sargs([[t * k], [], [], []], [F, "Scalar", "Scalar", "Scalar"])).bytes == t * k * 4
    assert op_cost("aten::bincount", sargs([[t * k], [], []], ["long int", "", "Scalar"])).bytes == t * k * 8
    c = op_cost("aten::one_hot", sargs([[t, k], []], ["long int", "Scalar"], concrete=["", str(e)]))
    assert c.bytes == t * k * 8 + t * k * e * 8
    # advanced indexing: x[idx] with idx [t*k] int64 (a tensor list: no dtype recorded)
    c = op_cost("aten::index", sargs([[t, h], [[t * k]]], [BF, "TensorList"]))
    assert c.bytes == t * k * 8 + t * h * 2 + t * k * h * 2
    # KV-cache write: index_copy_ of the new token's K into the cache
    c = op_cost(
        "aten::index_copy_",
        sargs([[8, 8, 4096, 128], [], [1], [8, 8, 1, 128]], [BF, "Scalar", "long int", BF], concrete=["", "2", "", ""]),
    )
    assert c.bytes == 8 + 2 * 8 * 8 * 128 * 2


def test_index_put_without_a_recorded_index_list():
    """MoE combine (HF DeepseekV3): _index_put_impl_(out [2048, 1024], <indices not recorded>,
    values [8192, 1024], accumulate=True): the values say what is written."""
    c = op_cost(
        "aten::_index_put_impl_",
        sargs(
            [[2048, 1024], [], [8192, 1024], [], []],
            [BF, "", BF, "Scalar", "Scalar"],
            concrete=["", "", "", "True", "True"],
        ),
    )
    touched = 2048 * 1024 * 2
    assert c.reads == 8192 * 1024 * 2 + touched and c.bytes == c.reads + touched
    assert "indices" in c.detail
    # aten::index with no recorded index list: what it selects is unknown
    assert op_cost("aten::index", sargs([[2048, 1024], []], [BF, ""])) is None


def test_norms_losses_and_embedding_backward():
    """The ops around attention in a training step: no longer 'unknown'."""
    x = [4, 2048, 1024]
    n = 4 * 2048 * 1024
    c = op_cost("aten::native_layer_norm", sargs([x, [], [1024], [1024], []], [BF, "ScalarList", BF, BF, "Scalar"]))
    assert c.bytes == n * 2 + 2 * 1024 * 2 + n * 2 and c.dtype == "bf16"
    c = op_cost(
        "aten::native_layer_norm_backward",
        sargs(
            [x, x, [], [4, 2048, 1], [4, 2048, 1], [1024], [1024], []],
            [BF, BF, "ScalarList", F, F, BF, BF, "GenericList"],
        ),
    )
    assert c.reads == 2 * n * 2 + 2 * 4 * 2048 * 4 + 2 * 1024 * 2 and c.bytes == c.reads + n * 2
    # cudnn_batch_norm_backward(input, grad_output, ...): the input's gradient at the input's size
    c = op_cost("aten::cudnn_batch_norm_backward", sargs([[32, 64, 56, 56], [32, 64, 56, 56], [64]], [F, F, F]))
    assert c.bytes == 3 * 32 * 64 * 56 * 56 * 4 + 64 * 4
    # PyTorch 1.9's _log_softmax_backward_data(grad_output, output, dim, self): self is an input, not out=
    c = op_cost("aten::_log_softmax_backward_data", sargs([[32, 1000], [32, 1000], [], [32, 1000]], [F, F, "Int", F]))
    assert c.bytes == 3 * 32 * 1000 * 4
    c = op_cost("aten::nll_loss_forward", sargs([[32, 1000], [32], [], [], []], [F, "long int", "", "Int", "Int"]))
    assert c.reads == 32 * 8 + 32 * 4
    c = op_cost(
        "aten::embedding_dense_backward",
        sargs(
            [[2, 1024, 1024], [2, 1024], [], [], []],
            [BF, "long int", "Scalar", "Scalar", "Scalar"],
            concrete=["", "", "32000", "-1", "False"],
        ),
    )
    assert c.bytes == 2 * 1024 * 1024 * 2 + 2 * 1024 * 8 + 32000 * 1024 * 2
