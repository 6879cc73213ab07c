"""Property tests of the cost model over generated shapes, strides and dtypes (hypothesis).

Derandomised (the same examples every run, no example database written) so a failure
reproduces and CI stays deterministic."""

from math import prod

import msgspec
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from tb_attention_plugin.roofline import cost as C  # noqa: E402
from tb_attention_plugin.roofline.cost import causal_fraction, op_cost  # noqa: E402
from tb_attention_plugin.trace.records import Signature  # noqa: E402
from tb_attention_plugin.trace.shapes import DTYPES, parse_args  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)
FLOAT_TYPES = ["float", "c10::BFloat16", "c10::Half", "double", "c10::Float8_e4m3fn"]
ALL_TYPES = FLOAT_TYPES + ["long int", "int", "bool", "signed char"]


def sargs(dims, types, strides=None, concrete=None):
    enc = msgspec.json.encode
    strides = strides if strides is not None else [[] for _ in dims]
    return parse_args(Signature(enc(dims), enc(types), enc(strides), enc(concrete or [""] * len(dims))))


def contiguous(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return list(reversed(out))


shapes = st.lists(st.integers(1, 64), min_size=1, max_size=4)
dims = st.integers(1, 512)
dtypes = st.sampled_from(FLOAT_TYPES)


@st.composite
def tensor_arg(draw, shape=None):
    """A tensor: shape, a dtype, and strides that are contiguous, permuted, or expanded (0)."""
    shape = shape if shape is not None else draw(shapes)
    strides = contiguous(shape)
    kind = draw(st.sampled_from(["contiguous", "expanded", "permuted", "none"]))
    if kind == "expanded":
        i = draw(st.integers(0, len(shape) - 1))
        strides[i] = 0
    elif kind == "permuted":
        strides = list(draw(st.permutations(strides)))
    elif kind == "none":
        strides = []
    return shape, draw(st.sampled_from(ALL_TYPES)), strides


ELEMENTWISE_OPS = [
    "aten::add",
    "aten::mul",
    "aten::div",
    "aten::where",
    "aten::masked_fill",
    "aten::exp",
    "aten::eq",
    "aten::copy_",
    "aten::clone",
    "aten::_softmax",
    "aten::sum",
    "aten::cumsum",
    "aten::native_dropout",
    "aten::_to_copy",
    "aten::fill_",
    "aten::silu_backward",
]


# the registry as imported (parsed Triton kernel names are added to it at run time: not those)
FORMULA_OPS = sorted(k for k in C._FORMULAS if k not in C.COMPOSITE and not k.startswith("triton_")) + [
    "triton_poi_fused_add_mul_0",
    "triton_red_fused__softmax_1",
    "triton_tem_fused_mm_2",
    "triton_tem_fused_flex_attention_0",
    "triton_tem_fused_flex_attention_backward_1",
]


@SETTINGS
@given(
    op=st.sampled_from(FORMULA_OPS),
    ts=st.lists(tensor_arg(), min_size=1, max_size=4),
    scalar=st.sampled_from(["", "1", "0.5", "True", "6"]),
)
def test_every_formula_gives_nonnegative_flops_and_bytes(op, ts, scalar):
    """Whatever the recorded inputs, a formula returns None or non-negative numbers, reads <= bytes."""
    dims_ = [t[0] for t in ts] + [[]]
    types = [t[1] for t in ts] + ["Scalar"]
    strides = [t[2] for t in ts] + [[]]
    c = op_cost(op, sargs(dims_, types, strides, [""] * len(ts) + [scalar]))
    if c is None:
        return
    for v in (c.flops, c.bytes, c.reads, c.flops_dense):
        assert v is None or v >= 0
    if c.reads is not None and c.bytes is not None:
        assert c.reads <= c.bytes
    if c.flops is not None and c.flops_dense is not None:
        assert c.flops <= c.flops_dense


@SETTINGS
@given(op=st.sampled_from(ELEMENTWISE_OPS), shape=shapes, dt=dtypes, i=st.integers(0, 3), grow=st.integers(1, 8))
def test_bytes_are_monotone_in_shape(op, shape, dt, i, grow):
    """Growing one dimension of every tensor never lowers the bytes."""
    i = i % len(shape)
    bigger = list(shape)
    bigger[i] += grow

    def cost(s):
        return op_cost(op, sargs([s, s, []], [dt, dt, "Scalar"], [contiguous(s), contiguous(s), []], ["", "", "1"]))

    a, b = cost(shape), cost(bigger)
    assert (a is None) == (b is None)
    if a is not None and a.bytes is not None:
        assert b.bytes >= a.bytes
        assert b.flops >= a.flops


@SETTINGS
@given(
    op=st.sampled_from(ELEMENTWISE_OPS + ["aten::mm", "aten::bmm", "aten::matmul"]),
    shape=st.lists(st.integers(1, 64), min_size=2, max_size=4),
    dt=dtypes,
    i=st.integers(0, 3),
    which=st.integers(0, 1),
)
def test_a_stride_zero_never_increases_bytes(op, shape, dt, i, which):
    """Expanding a dimension (stride 0: the same elements repeated) never adds traffic."""
    if op == "aten::mm":
        shape = shape[:2]
    elif op == "aten::bmm":
        shape = (shape + [3])[:3]
    sq = list(shape[:-2]) + [shape[-1], shape[-1]] if op in ("aten::mm", "aten::bmm", "aten::matmul") else shape
    st0 = [contiguous(shape), contiguous(sq), []]
    expanded = [list(x) for x in st0]
    arr = expanded[which]
    arr[i % len(arr)] = 0
    dims_ = [shape, sq, []]
    base = op_cost(op, sargs(dims_, [dt, dt, "Scalar"], st0, ["", "", "1"]))
    exp = op_cost(op, sargs(dims_, [dt, dt, "Scalar"], expanded, ["", "", "1"]))
    if base is None or base.bytes is None:
        return
    assert exp.bytes <= base.bytes
    assert exp.flops == base.flops  # the work is the same: only the traffic falls
    size = dims_[which][i % len(dims_[which])]
    if (
        op in ("aten::copy_", "aten::clone", "aten::mul", "aten::exp")
        and (which == 1) == (op == "aten::copy_")
        and size > 1
        and len(dims_[which]) > 0
    ):
        # that input is read once: its bytes fall by the repeat factor, exactly
        it = DTYPES[dt][1]
        assert exp.reads == base.reads - prod(dims_[which]) * it * (1 - 1 / size)


@SETTINGS
@given(b=st.integers(1, 16), m=dims, n=dims, k=dims, dt=dtypes)
def test_matmul_flops_are_2mnk_per_batch(b, m, n, k, dt):
    cases = [
        ("aten::mm", [[m, k], [k, n]], 1),
        ("aten::bmm", [[b, m, k], [b, k, n]], b),
        ("aten::matmul", [[b, m, k], [k, n]], b),
        ("aten::addmm", [[n], [m, k], [k, n]], 1),
        ("aten::baddbmm", [[b, m, n], [b, m, k], [b, k, n]], b),
        ("aten::linear", [[b, m, k], [n, k]], b),
        ("aten::_scaled_mm", [[m, k], [k, n], [], []], 1),
    ]
    for op, ds, batch in cases:
        c = op_cost(op, sargs(ds, [dt] * len(ds)))
        assert c.flops == 2.0 * batch * m * n * k, op
        assert c.engine == "matrix"
        # every operand is read at least once and the output written once
        itemsize = DTYPES[dt][1]
        assert c.bytes >= (batch * m * n) * itemsize + sum(prod(d) for d in ds[:2]) * itemsize * (
            1 if op != "aten::baddbmm" else 0
        )


@SETTINGS
@given(sq=st.integers(1, 300), sk=st.integers(1, 300), br=st.booleans())
def test_causal_fraction_is_the_share_of_kept_pairs(sq, sk, br):
    shift = sk - sq if br else 0
    kept = sum(min(max(i + 1 + shift, 0), sk) for i in range(sq))
    assert causal_fraction(sq, sk, br) == pytest.approx(kept / (sq * sk))
    assert 0.0 <= causal_fraction(sq, sk, br) <= 1.0


TORCH_DTYPES = {
    "float": "float32",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "double": "float64",
    "long int": "int64",
    "int": "int32",
    "bool": "bool",
    "signed char": "int8",
}


@SETTINGS
@given(
    shape=shapes,
    a=st.sampled_from(sorted(TORCH_DTYPES)),
    b=st.sampled_from(sorted(TORCH_DTYPES)),
    zero_dim=st.booleans(),
)
def test_elementwise_output_follows_torch_type_promotion(shape, a, b, zero_dim):
    """bytes = inputs read + one output of the broadcast shape at torch.result_type's size."""
    torch = pytest.importorskip("torch")
    sb = [] if zero_dim else shape
    c = op_cost(
        "aten::add", sargs([shape, sb, []], [a, b, "Scalar"], [contiguous(shape), contiguous(sb), []], ["", "", "1"])
    )
    x = torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[a]), device="meta")
    y = torch.empty(sb, dtype=getattr(torch, TORCH_DTYPES[b]), device="meta")
    ref = torch.result_type(x, y)
    if zero_dim and ref == torch.float64 and x.dtype != torch.float64:
        ref = torch.float32  # a 0-dim double in a trace is a wrapped Python float (default dtype)
    n = prod(shape)
    assert c.bytes == n * DTYPES[a][1] + prod(sb) * DTYPES[b][1] + n * ref.itemsize


def test_dtype_itemsizes_match_torch():
    torch = pytest.importorskip("torch")
    by_cpp = {
        "float": torch.float32,
        "double": torch.float64,
        "c10::Half": torch.float16,
        "c10::BFloat16": torch.bfloat16,
        "int": torch.int32,
        "long int": torch.int64,
        "short int": torch.int16,
        "signed char": torch.int8,
        "unsigned char": torch.uint8,
        "bool": torch.bool,
        "c10::complex<float>": torch.complex64,
        "c10::complex<double>": torch.complex128,
        "c10::Float8_e4m3fn": torch.float8_e4m3fn,
        "c10::Float8_e5m2": torch.float8_e5m2,
    }
    for name, dt in by_cpp.items():
        assert DTYPES[name][1] == torch.empty(0, dtype=dt).element_size(), name
    for name, (short, size) in DTYPES.items():
        assert C._ITEMSIZE[short] == size, name


@SETTINGS
@given(
    b=st.integers(1, 4),
    hk=st.integers(1, 4),
    g=st.integers(1, 4),
    sq=st.integers(1, 512),
    sk=st.integers(1, 512),
    d=st.sampled_from([32, 64, 128]),
    causal=st.booleans(),
)
def test_flex_upper_bound_is_at_least_sdpa_with_any_mask(b, hk, g, sq, sk, d, causal):
    """FlexAttention's dense count bounds the same attention with any mask (here SDPA's causal)."""
    h = hk * g
    q, k = [b, h, sq, d], [b, hk, sk, d]
    nb_q, nb_k = -(-sq // 128), -(-sk // 128)
    flex = op_cost(
        "triton_tem_fused_flex_attention_0",
        sargs(
            [q, k, k, [b, h, sq], [b, h, sq], [b, 1, nb_q], [b, 1, nb_q, nb_k], q],
            ["c10::BFloat16"] * 3 + ["float"] * 2 + ["int"] * 2 + ["c10::BFloat16"],
        ),
    )
    sdpa = op_cost(
        "aten::_scaled_dot_product_flash_attention",
        sargs(
            [q, k, k, [], [], [], []],
            ["c10::BFloat16"] * 3 + ["Scalar"] * 4,
            concrete=["", "", "", "0.", str(causal), "False", ""],
        ),
    )
    assert flex.upper_bound and not sdpa.upper_bound
    assert flex.flops >= sdpa.flops and flex.flops == sdpa.flops_dense


# -- cost by role (cost.role_bytes, roofline/roles.py) -----------------------------------------
from tb_attention_plugin.roofline import roles as R  # noqa: E402

# the kernels each backend launches for one fused attention op (docs/cost-model.md, Cost by role)
BACKEND_ROLES = {
    "flash_fwd": frozenset({R.MAIN}),
    "split_kv_fwd": frozenset({R.MAIN, R.COMBINE}),
    "flash_bwd": frozenset({R.DOT_DO_O, R.MAIN, R.CONVERT_DQ}),
    "cudnn_gqa_bwd": frozenset({R.DOT_DO_O, R.MAIN, R.CONVERT_DQ, R.REDUCE_HEAD}),
    "fa2_dkv_bwd": frozenset({R.DOT_DO_O, R.MAIN, R.CONVERT_DQ, R.CONVERT_DKV, R.CLEAR_ACCUM}),
    "efficient_bwd": frozenset({R.MAIN}),
}


@SETTINGS
@given(
    b=st.integers(1, 4),
    hk=st.integers(1, 4),
    g=st.sampled_from([1, 2, 4]),
    sq=st.integers(1, 1024),
    sk=st.integers(1, 1024),
    d=st.sampled_from([32, 64, 128]),
    dt=st.sampled_from(["c10::BFloat16", "c10::Half", "float"]),
    causal=st.booleans(),
    backend=st.sampled_from(sorted(BACKEND_ROLES)),
    splits=st.integers(1, 16),
)
def test_every_role_moves_at_least_its_compulsory_traffic(b, hk, g, sq, sk, d, dt, causal, backend, splits):
    """Each role's bytes cover what that kernel must touch; together the roles move at least the
    op's minimum (every tensor the op reads and writes is moved by one of its kernels)."""
    h = hk * g
    bwd = backend.endswith("bwd")
    it = 4 if dt == "float" else 2
    q, kv = [b, sq, h, d], [b, sk, hk, d]
    if bwd:
        dims = [q, q, kv, kv, q, [b, h, sq]] + [[]] * 11
        types = [dt] * 5 + ["float"] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar"] + [""] * 5
        conc = [""] * 8 + [str(sq), str(sk), "0.", str(causal)] + [""] * 5
        c = op_cost("aten::_flash_attention_backward", sargs(dims, types, concrete=conc))
    else:
        dims = [q, kv, kv] + [[]] * 12
        types = [dt] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"] + [""] * 4
        conc = ["", "", "", "", "", str(sq), str(sk), "0.", str(causal), "False", "0.1"] + [""] * 4
        c = op_cost("aten::_flash_attention_forward", sargs(dims, types, concrete=conc))
    present = BACKEND_ROLES[backend]
    table = C.role_bytes(c, present, splits)
    assert set(table) == present
    Q, K, OUT, L = b * sq * h * d * it, b * sk * hk * d * it, b * sq * h * d * it, b * h * sq * 4
    for role, (rd, wr) in table.items():
        assert rd >= 0 and wr >= 0, role
    main_r, main_w = table[R.MAIN]
    if bwd:
        assert main_r >= Q + 2 * K + OUT + L  # Q, K, V, dO, LSE
        assert main_w >= 2 * K or R.CONVERT_DKV in present  # dK, dV (or their fp32 accumulators)
        if R.DOT_DO_O in present:
            assert table[R.DOT_DO_O][0] >= 2 * OUT
        if R.CONVERT_DQ in present:
            assert table[R.CONVERT_DQ][1] >= Q
        if R.REDUCE_HEAD in present:
            assert table[R.REDUCE_HEAD][1] >= 2 * K
    else:
        assert main_r >= Q + 2 * K
        final = table[R.COMBINE][1] if R.COMBINE in present else main_w
        assert final >= OUT + L
    assert sum(rd + wr for rd, wr in table.values()) >= c.bytes * (1 - 1e-9)
    # FLOPs are the main kernels': no role model gives them to a helper
    assert R.MAIN in present
