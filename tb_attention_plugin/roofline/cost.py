"""FLOPs and minimum bytes of an op, from its recorded input shapes.

Conventions (documented in docs/cost-model.md):

* Matmuls count 2·M·N·K, as ``torch.utils.flop_counter`` does; bias adds are not counted.
* Scaled dot-product attention counts its two matmuls (forward, 4·B·H·Sq·Sk·D for D=Dv) and the
  five of the backward (2.5x forward), as ``flop_counter`` does — except that a causal mask
  scales both by the fraction of (query, key) pairs that are not masked, because fused kernels
  skip masked blocks. ``flops_dense`` keeps the unmasked count.
* Elementwise, softmax and dropout FLOPs are estimates per element (``flops_estimated``); their
  bytes are exact minimums. Bytes are always the minimum traffic: every input read once and
  every output written once, at the recorded dtypes.
* Unknown stays ``None``: an op we have no formula for, or one recorded without shapes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Callable, Optional

from ..trace.shapes import SCALAR_TYPE_CODES, Arg

MATRIX, VECTOR, NONE = "matrix", "vector", "none"


@dataclass
class Cost:
    flops: Optional[float]
    bytes: Optional[float]
    dtype: Optional[str]
    engine: str = VECTOR              # which roof applies: matrix engine or vector units
    flops_estimated: bool = False     # a per-element estimate rather than an exact count
    flops_dense: Optional[float] = None
    detail: dict = field(default_factory=dict)
    reads: Optional[float] = None     # the part of ``bytes`` that is read (the rest is written)
    parts: Optional[dict] = None      # sub-step -> (bytes read, bytes written), fused attention backward
    fp32_on_tensor_cores: bool = False  # fp32 work this op's kernels do on TF32 tensor cores


def _tensors(args: list[Arg]) -> list[Arg]:
    return [a for a in args if a.is_tensor]


def broadcast_shapes(*shapes: tuple) -> Optional[tuple]:
    """The shape of ``shapes`` broadcast together (numpy rules), or None if they do not broadcast."""
    if not shapes:
        return None
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        dims = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _first_dtype(args: list[Arg]) -> Optional[str]:
    for a in args:
        if a.is_tensor and a.dtype:
            return a.dtype
    return None


# -- matmuls -------------------------------------------------------------------------------
def _mm(args):
    t = _tensors(args)
    if len(t) < 2 or len(t[0].shape) != 2 or len(t[1].shape) != 2:
        return None
    (m, k), (k2, n) = t[0].shape, t[1].shape
    reads = float((m * k + k2 * n) * t[0].itemsize)
    return Cost(2.0 * m * n * k, reads + m * n * t[0].itemsize,
                t[0].dtype, MATRIX, detail={"m": m, "n": n, "k": k}, reads=reads)


def _addmm(args):
    t = _tensors(args)
    if len(t) < 3:
        return None
    bias, a, b = t[0], t[1], t[2]
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, k), (_, n) = a.shape, b.shape
    reads = float(bias.nbytes + a.nbytes + b.nbytes)
    return Cost(2.0 * m * n * k, reads + m * n * a.itemsize,
                a.dtype, MATRIX, detail={"m": m, "n": n, "k": k}, reads=reads)


def _bmm(args):
    t = _tensors(args)
    if len(t) < 2 or len(t[0].shape) != 3 or len(t[1].shape) != 3:
        return None
    (b, m, k), (_, _, n) = t[0].shape, t[1].shape
    out = b * m * n * t[0].itemsize
    reads = float(t[0].nbytes + t[1].nbytes)
    return Cost(2.0 * b * m * n * k, reads + out, t[0].dtype, MATRIX,
                detail={"batch": b, "m": m, "n": n, "k": k}, reads=reads)


def _baddbmm(args):
    t = _tensors(args)
    if len(t) < 3 or len(t[1].shape) != 3 or len(t[2].shape) != 3:
        return None
    (b, m, k), (_, _, n) = t[1].shape, t[2].shape
    out = b * m * n * t[1].itemsize
    reads = float(t[0].nbytes + t[1].nbytes + t[2].nbytes)
    return Cost(2.0 * b * m * n * k, reads + out, t[1].dtype,
                MATRIX, detail={"batch": b, "m": m, "n": n, "k": k}, reads=reads)


def matmul_dims(a: tuple, b: tuple) -> Optional[tuple[int, int, int, int, tuple]]:
    """(batch, m, n, k, out_shape) of torch.matmul(a, b) with broadcasting."""
    if not a or not b:
        return None
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    m, k = a2[-2], a2[-1]
    k2, n = b2[-2], b2[-1]
    if k != k2:
        return None
    batch = broadcast_shapes(a2[:-2], b2[:-2]) if (len(a2) > 2 or len(b2) > 2) else ()
    if batch is None:
        return None
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    return prod(batch), m, n, k, out


def _matmul(args):
    t = _tensors(args)
    if len(t) < 2:
        return None
    r = matmul_dims(t[0].shape, t[1].shape)
    if r is None:
        return None
    batch, m, n, k, out = r
    reads = float(t[0].nbytes + t[1].nbytes)
    return Cost(2.0 * batch * m * n * k, reads + prod(out) * t[0].itemsize,
                t[0].dtype, MATRIX, detail={"batch": batch, "m": m, "n": n, "k": k}, reads=reads)


def _linear(args):
    t = _tensors(args)
    if len(t) < 2 or len(t[1].shape) != 2 or not t[0].shape:
        return None
    x, w = t[0], t[1]
    n, k = w.shape
    if x.shape[-1] != k:
        return None
    rows = prod(x.shape[:-1])
    bias = t[2].nbytes if len(t) > 2 else 0
    reads = float(x.nbytes + w.nbytes + bias)
    return Cost(2.0 * rows * n * k, reads + rows * n * x.itemsize, x.dtype,
                MATRIX, detail={"m": rows, "n": n, "k": k}, reads=reads)


def _scaled_mm(args):
    t = _tensors(args)
    if len(t) < 2 or len(t[0].shape) != 2 or len(t[1].shape) != 2:
        return None
    (m, k), (_, n) = t[0].shape, t[1].shape
    reads = float(t[0].nbytes + t[1].nbytes)
    return Cost(2.0 * m * n * k, reads + m * n * 2, t[0].dtype, MATRIX,
                detail={"m": m, "n": n, "k": k}, reads=reads)


# -- scaled dot-product attention ------------------------------------------------------------
def causal_fraction(sq: int, sk: int, bottom_right: bool = False) -> float:
    """Share of (query, key) pairs a causal mask keeps: query i sees keys 0..i (top-left
    aligned, PyTorch's is_causal) or 0..i+sk-sq (bottom-right aligned)."""
    if sq <= 0 or sk <= 0:
        return 1.0
    shift = sk - sq if bottom_right else 0
    # row i keeps clamp(i + 1 + shift, 0, sk) keys
    i0 = min(max(0, -shift), sq)             # first row that keeps anything
    i1 = min(max(i0, sk - 1 - shift), sq)    # first row that keeps every key
    partial = (i1 - i0) * (1 + shift) + (i0 + i1 - 1) * (i1 - i0) // 2
    return (partial + (sq - i1) * sk) / float(sq * sk)


@dataclass(frozen=True)
class SdpaSchema:
    q: int                  # index of query (grad_out comes first in backwards)
    layout: str             # "bhsd" or "bshd"
    causal: Optional[int]   # index of is_causal (bool) ...
    mask_type: Optional[int] = None   # ... or of custom_mask_type (0 none, 1 top-left, 2 bottom-right)
    backward: bool = False
    mask: Optional[int] = None        # index of an attention mask / bias tensor
    dropout: Optional[int] = None
    lse_out: bool = True    # writes a logsumexp (fp32, B·H·Sq)


# Positions follow native_functions.yaml; each value is validated when read.
SDPA_SCHEMAS: dict[str, SdpaSchema] = {
    "aten::scaled_dot_product_attention": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4, lse_out=False),
    "aten::_scaled_dot_product_attention_math": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4, lse_out=False),
    "aten::_scaled_dot_product_flash_attention": SdpaSchema(0, "bhsd", 4, dropout=3),
    "aten::_scaled_dot_product_flash_attention_for_cpu": SdpaSchema(0, "bhsd", 4, dropout=3),
    "aten::_scaled_dot_product_efficient_attention": SdpaSchema(0, "bhsd", 6, mask=3, dropout=5),
    "aten::_scaled_dot_product_cudnn_attention": SdpaSchema(0, "bhsd", 6, mask=3, dropout=5),
    "aten::_scaled_dot_product_fused_attention_overrideable": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4),
    "aten::_flash_attention_forward": SdpaSchema(0, "bshd", 8, dropout=7),
    "aten::_efficient_attention_forward": SdpaSchema(0, "bshd", None, mask_type=9, mask=3, dropout=8),
    "aten::_cudnn_attention_forward": SdpaSchema(0, "bhsd", 10, mask=3, dropout=9),
    "aten::_scaled_dot_product_flash_attention_backward": SdpaSchema(1, "bhsd", 11, backward=True, dropout=10),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": SdpaSchema(1, "bhsd", 6, backward=True, dropout=5),
    "aten::_flash_attention_backward": SdpaSchema(1, "bshd", 11, backward=True, dropout=10),
    "aten::_scaled_dot_product_efficient_attention_backward": SdpaSchema(1, "bhsd", 11, backward=True, mask=4, dropout=9),
    "aten::_efficient_attention_backward": SdpaSchema(1, "bshd", None, mask_type=14, backward=True, mask=4, dropout=11),
    "aten::_scaled_dot_product_cudnn_attention_backward": SdpaSchema(1, "bhsd", 14, backward=True, mask=8, dropout=13),
    "aten::_cudnn_attention_backward": SdpaSchema(1, "bhsd", 14, backward=True, mask=8, dropout=13),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": SdpaSchema(1, "bhsd", None, backward=True),
}


def _bool_value(args: list[Arg], i: Optional[int]) -> Optional[bool]:
    if i is None or i >= len(args):
        return None
    v = args[i].value.strip().lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    return None


def _float_value(args: list[Arg], i: Optional[int]) -> Optional[float]:
    if i is None or i >= len(args):
        return None
    try:
        return float(args[i].value)
    except ValueError:
        return None


def sdpa_shapes(op: str, args: list[Arg]) -> Optional[dict]:
    """B, H (query heads), Hk (key/value heads), Sq, Sk, D, Dv, dtype, causal of an SDPA op."""
    sch = SDPA_SCHEMAS.get(op)
    if sch is None:
        return None
    qi = sch.q
    if len(args) < qi + 3:
        return None
    q, k, v = args[qi], args[qi + 1], args[qi + 2]
    if not (q.is_tensor and k.is_tensor and v.is_tensor) or len(q.shape) != 4 or len(k.shape) != 4 \
            or len(v.shape) != 4:
        return None
    if sch.layout == "bhsd":
        b, h, sq, d = q.shape
        _, hk, sk, _ = k.shape
        dv = v.shape[3]
    else:
        b, sq, h, d = q.shape
        _, sk, hk, _ = k.shape
        dv = v.shape[3]
    causal, bottom_right, causal_known = False, False, True
    if sch.mask_type is not None:
        try:
            mt = int(float(args[sch.mask_type].value)) if sch.mask_type < len(args) else None
        except ValueError:
            mt = None
        if mt is None:
            causal_known = False
        else:
            causal, bottom_right = mt in (1, 2), mt == 2
    elif sch.causal is not None:
        c = _bool_value(args, sch.causal)
        if c is None:
            causal_known = False
        else:
            causal = c
    else:
        causal_known = False
    mask = args[sch.mask] if sch.mask is not None and sch.mask < len(args) and args[sch.mask].is_tensor else None
    dropout = _float_value(args, sch.dropout)
    return dict(b=b, h=h, hk=hk, sq=sq, sk=sk, d=d, dv=dv, dtype=q.dtype, itemsize=q.itemsize,
                causal=causal, bottom_right=bottom_right, causal_known=causal_known,
                mask_bytes=mask.nbytes if mask is not None else 0, dropout_p=dropout,
                backward=sch.backward, lse=sch.lse_out, layout=sch.layout)


def _sdpa(op: str) -> Callable:
    def cost(args):
        s = sdpa_shapes(op, args)
        if s is None:
            return None
        b, h, hk, sq, sk, d, dv, it = s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"], s["itemsize"]
        fwd_dense = 2.0 * b * h * sq * sk * d + 2.0 * b * h * sq * sk * dv
        if s["backward"]:
            dense = 2.0 * b * h * sq * sk * d * 3 + 2.0 * b * h * sq * sk * dv * 2   # 5 matmuls
        else:
            dense = fwd_dense
        frac = causal_fraction(sq, sk, s["bottom_right"]) if s["causal"] else 1.0
        q_b, k_b, v_b = b * h * sq * d * it, b * hk * sk * d * it, b * hk * sk * dv * it
        o_b = b * h * sq * dv * it
        lse_b = b * h * sq * 4 if s["lse"] else 0
        parts = None
        if s["backward"]:
            # read q, k, v, out, grad_out, logsumexp; write dq, dk, dv
            reads = q_b + k_b + v_b + 2 * o_b + b * h * sq * 4
            nbytes = reads + q_b + k_b + v_b
            # The fused backward's sub-steps (FlashAttention-2 and cuDNN alike): a pre-pass
            # delta = rowsum(dO * O) that also zeroes the fp32 dq accumulator (reads O and dO,
            # writes delta and the accumulator), the main loop, and a post-pass casting the
            # accumulator to dq (reads 4 B, writes itemsize per element). Nsight Compute's DRAM
            # bytes for these kernels match this (validation/).
            acc_b = float(b * h * sq * d * 4)
            parts = {"preprocess": (2.0 * o_b, float(b * h * sq * 4) + acc_b),
                     "postprocess": (acc_b, float(q_b))}
        else:
            reads = q_b + k_b + v_b
            nbytes = reads + o_b + lse_b
        nbytes += s["mask_bytes"]
        reads += s["mask_bytes"]
        detail = {k2: s[k2] for k2 in ("b", "h", "hk", "sq", "sk", "d", "dv", "causal", "layout")}
        detail["causal_fraction"] = round(frac, 6)
        if not s["causal_known"]:
            detail["causal"] = None
        # fp32 inputs: the only fused backend that takes them (CUTLASS memory-efficient attention)
        # runs them on TF32 tensor cores (seen in Nsight Compute: tensor pipe active, FMA pipe idle)
        return Cost(dense * frac, float(nbytes), s["dtype"], MATRIX, flops_dense=dense, detail=detail,
                    reads=float(reads), parts=parts, fp32_on_tensor_cores=op not in COMPOSITE)
    return cost


# -- elementwise, reductions, copies ----------------------------------------------------------
def _elementwise(flops_per_elem: float, out_itemsize: Optional[int] = None, estimated: bool = True):
    """Inputs read once each, one output of the broadcast shape (at the first tensor's dtype
    unless ``out_itemsize`` says otherwise, e.g. 1 for comparisons)."""
    def cost(args):
        t = _tensors(args)
        if not t:
            return None
        out_shape = broadcast_shapes(*[a.shape for a in t])
        if out_shape is None:
            out_shape = t[0].shape
        n = prod(out_shape)
        # where(cond, x, y): the values, not the bool condition, set the dtype
        main = next((a for a in t if a.dtype != "bool"), t[0])
        itemsize = out_itemsize or main.itemsize
        reads = float(sum(a.nbytes for a in t))
        return Cost(flops_per_elem * n, reads + n * itemsize, main.dtype, VECTOR,
                    flops_estimated=estimated and flops_per_elem > 0, reads=reads)
    return cost


def _softmax(flops_per_elem: float):
    def cost(args):
        t = _tensors(args)
        if not t:
            return None
        x = t[0]
        out_itemsize = x.itemsize
        # _softmax(self, dim, half_to_float): fp32 output; softmax(self, dim, dtype) casts.
        if len(args) > 2 and args[2].value.strip().lower() == "true":
            out_itemsize = 4
        elif len(args) > 2 and args[2].value.strip().lstrip("-").isdigit():
            code = int(args[2].value)
            out_itemsize = SCALAR_TYPE_CODES.get(code, (None, x.itemsize))[1]
        mask_b = sum(a.nbytes for a in t[1:])
        return Cost(flops_per_elem * x.numel, float(x.nbytes + x.numel * out_itemsize + mask_b), x.dtype,
                    VECTOR, flops_estimated=True, reads=float(x.nbytes + mask_b))
    return cost


def _softmax_backward(args):
    t = _tensors(args)
    if len(t) < 2:
        return None
    n = t[0].numel
    return Cost(4.0 * n, float(t[0].nbytes + t[1].nbytes + n * t[0].itemsize), t[0].dtype, VECTOR,
                flops_estimated=True, reads=float(t[0].nbytes + t[1].nbytes))


def _dropout(args):
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    p = _float_value(args, 1)
    train = _bool_value(args, 2)
    if train is False or p == 0.0:
        return Cost(0.0, float(x.nbytes * 2), x.dtype, VECTOR, reads=float(x.nbytes))
    # read x, write out and a bool mask
    return Cost(2.0 * x.numel, float(x.nbytes * 2 + x.numel), x.dtype, VECTOR, flops_estimated=True,
                reads=float(x.nbytes))


def _copy(args):
    t = _tensors(args)
    if len(t) < 2:
        return None
    dst, src = t[0], t[1]
    return Cost(0.0, float(src.numel * src.itemsize + dst.numel * dst.itemsize), dst.dtype, NONE,
                reads=float(src.numel * src.itemsize))


def _unary_copy(args):
    """clone / contiguous / triu...: read and write the tensor once."""
    t = _tensors(args)
    if not t:
        return None
    return Cost(0.0, float(2 * t[0].nbytes), t[0].dtype, NONE, reads=float(t[0].nbytes))


def _to_copy(args):
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    out_size = x.itemsize
    if len(args) > 1 and args[1].value.strip().lstrip("-").isdigit():
        out_size = SCALAR_TYPE_CODES.get(int(args[1].value), (None, x.itemsize))[1]
    return Cost(0.0, float(x.nbytes + x.numel * out_size), x.dtype, NONE,
                detail={"out_itemsize": out_size}, reads=float(x.nbytes))


def _cat(args):
    lists = [a for a in args if a.shapes is not None]
    if not lists or not lists[0].shapes:
        return None
    n = sum(prod(s) for s in lists[0].shapes)
    # Tensor lists carry no element type; the kernel's template (OpaqueType<N>) may say (attribute.py).
    return Cost(0.0, None, None, NONE, detail={"elements": n})


def _fill(args):
    """fill_ / zero_, and random fills (uniform_, normal_, bernoulli_...): write every element,
    read none (the random numbers are generated in registers)."""
    t = _tensors(args)
    if not t:
        return None
    return Cost(0.0, float(t[0].nbytes), t[0].dtype, NONE, reads=0.0)


def _scan(args):
    """cumsum / cumprod: read and write every element."""
    t = _tensors(args)
    if not t:
        return None
    return Cost(float(t[0].numel), float(2 * t[0].nbytes), t[0].dtype, VECTOR, flops_estimated=True,
                reads=float(t[0].nbytes))


def _transform_bias_rescale_qkv(args):
    """nn.MultiheadAttention fast path: qkv [B, S, 3E] + bias [3E] -> q, k, v [B, H, S, D]."""
    t = _tensors(args)
    if len(t) < 2:
        return None
    qkv, bias = t[0], t[1]
    reads = float(qkv.nbytes + bias.nbytes)
    return Cost(2.0 * qkv.numel, reads + qkv.nbytes, qkv.dtype, VECTOR, flops_estimated=True, reads=reads)


def _triton(name: str) -> Callable:
    """An Inductor-generated Triton kernel (torch.compile). Its recorded inputs are the kernel's
    buffers — inputs first, the output last — so each is read or written once; FLOPs are
    estimated as one per element per fused op named in the kernel (``fused__softmax_div_...``).
    Matmul templates (``triton_tem_fused_mm``/``bmm``) count 2·M·N·K from their operands."""
    ops = [t for t in re.split(r"_(?=_?[a-z])", name.split("fused", 1)[-1].strip("_")) if t and not t.isdigit()]
    per_elem = max(1, len(ops))
    template = name.startswith("triton_tem")

    def cost(args):
        t = _tensors(args)
        if not t:
            return None
        out = t[-1]
        reads = float(sum(a.nbytes for a in t[:-1]))
        nbytes = reads + out.nbytes
        if template and len(t) >= 3:
            r = matmul_dims(t[0].shape, t[1].shape)
            if r is not None:
                batch, m, n, k, _ = r
                return Cost(2.0 * batch * m * n * k, nbytes, t[0].dtype, MATRIX, reads=reads,
                            detail={"batch": batch, "m": m, "n": n, "k": k})
            return Cost(None, nbytes, t[0].dtype, MATRIX, reads=reads)
        n = max(a.numel for a in t)
        return Cost(float(per_elem * n), nbytes, t[0].dtype, VECTOR, flops_estimated=True, reads=reads,
                    detail={"fused_ops": ops})
    return cost


def _reduction(args):
    t = _tensors(args)
    if not t:
        return None
    return Cost(float(t[0].numel), float(t[0].nbytes), t[0].dtype, VECTOR, flops_estimated=True,
                reads=float(t[0].nbytes))


_ELEMENTWISE_BINARY = ("add", "sub", "mul", "div", "true_divide", "rsub", "maximum", "minimum",
                       "pow", "bitwise_and", "bitwise_or")
_ELEMENTWISE_UNARY = ("neg", "exp", "sin", "cos", "rsqrt", "sqrt", "tanh", "sigmoid", "silu", "gelu",
                      "relu", "abs", "reciprocal", "log", "erf", "square")
# Produce a bool tensor.
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not",
                "isneginf", "isposinf", "isinf", "isnan")

_FORMULAS: dict[str, Callable] = {
    "aten::mm": _mm, "aten::addmm": _addmm, "aten::bmm": _bmm, "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul, "aten::linear": _linear, "aten::_scaled_mm": _scaled_mm,
    "aten::_softmax": _softmax(5), "aten::softmax": _softmax(5), "aten::_safe_softmax": _softmax(5),
    "aten::_masked_softmax": _softmax(5), "aten::_log_softmax": _softmax(5),
    "aten::_softmax_backward_data": _softmax_backward,
    "aten::native_dropout": _dropout, "aten::dropout": _dropout, "aten::feature_dropout": _dropout,
    "aten::native_dropout_backward": _elementwise(1),
    "aten::masked_fill": _elementwise(1), "aten::masked_fill_": _elementwise(1),
    "aten::where": _elementwise(1),
    "aten::copy_": _copy, "aten::clone": _unary_copy, "aten::contiguous": _unary_copy,
    "aten::triu": _unary_copy, "aten::tril": _unary_copy, "aten::triu_": _unary_copy,
    "aten::tril_": _unary_copy, "aten::_to_copy": _to_copy,
    "aten::cat": _cat, "aten::fill_": _fill, "aten::zero_": _fill,
    "aten::sum": _reduction, "aten::mean": _reduction, "aten::amax": _reduction, "aten::max": _reduction,
    "aten::all": _reduction, "aten::any": _reduction, "aten::amin": _reduction, "aten::min": _reduction,
    "aten::cumsum": _scan, "aten::cumprod": _scan,
    "aten::uniform_": _fill, "aten::normal_": _fill, "aten::bernoulli_": _fill,
    "aten::exponential_": _fill, "aten::random_": _fill,
    "aten::_transform_bias_rescale_qkv": _transform_bias_rescale_qkv,
}
for _n in _ELEMENTWISE_BINARY:
    _FORMULAS[f"aten::{_n}"] = _elementwise(1)
    _FORMULAS[f"aten::{_n}_"] = _elementwise(1)
for _n in _ELEMENTWISE_UNARY:
    _FORMULAS[f"aten::{_n}"] = _elementwise(1)
    _FORMULAS[f"aten::{_n}_"] = _elementwise(1)
for _n in _COMPARISONS:
    _FORMULAS[f"aten::{_n}"] = _elementwise(1, out_itemsize=1)
for _n in SDPA_SCHEMAS:
    _FORMULAS[_n] = _sdpa(_n)

for _n in ("silu_backward", "gelu_backward", "threshold_backward", "sigmoid_backward", "tanh_backward",
           "hardtanh_backward", "leaky_relu_backward"):
    _FORMULAS[f"aten::{_n}"] = _elementwise(1)
_TRITON_OP = re.compile(r"^triton_(poi|red|per|tem|for)_\w+$")

# Ops whose work is done by the ops they call: never the owner of a kernel's cost.
COMPOSITE = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math"}


def has_formula(op: str) -> bool:
    return (op in _FORMULAS and op not in COMPOSITE) or bool(_TRITON_OP.match(op))


def op_cost(op: str, args: list[Arg]) -> Optional[Cost]:
    f = _FORMULAS.get(op)
    if f is None:
        if not _TRITON_OP.match(op):
            return None
        f = _triton(op)
        if len(_FORMULAS) < 100_000:      # remember the parsed kernel name
            _FORMULAS[op] = f
    try:
        return f(args)
    except (IndexError, ValueError, TypeError, ZeroDivisionError):
        return None
