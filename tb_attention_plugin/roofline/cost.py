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
* Inputs are read at the size their recorded strides address (``Arg.read_bytes``): an expanded
  (stride-0) dimension is read once, a slice or view only what it covers. ``out=`` tensors (the
  arguments after an op's inputs) are written, never read. A mixed-dtype op's ``dtype`` is the
  promoted (result) dtype of the bytes it moves; each tensor's bytes are at its own dtype.
* ``upper_bound``: FLOPs and bytes are a dense upper bound (FlexAttention: the block mask's
  sparsity is not in the trace). The classifier must not claim a roof from an upper bound.
* Unknown stays ``None``: an op we have no formula for, or one recorded without shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, Callable, Optional

from ..trace.shapes import SCALAR_TYPE_CODES, Arg

MATRIX, VECTOR, NONE = "matrix", "vector", "none"
InputSig = tuple[tuple[int, ...], Optional[str], int]  # shape, dtype, bytes read
OutputSig = tuple[Optional[tuple[int, ...]], Optional[str]]  # shape (None: data-dependent), dtype


@dataclass
class Cost:
    flops: Optional[float]
    bytes: Optional[float]
    dtype: Optional[str]
    engine: str = VECTOR  # which roof applies: matrix engine or vector units
    flops_estimated: bool = False  # a per-element estimate rather than an exact count
    flops_dense: Optional[float] = None
    detail: dict[str, Any] = field(default_factory=dict)
    reads: Optional[float] = None  # the part of ``bytes`` that is read (the rest is written)
    # sub-step -> (bytes read, bytes written), fused attention backward
    parts: Optional[dict[str, tuple[float, float]]] = None
    fp32_on_tensor_cores: bool = False  # fp32 work this op's kernels do on TF32 tensor cores
    upper_bound: bool = False  # FLOPs/bytes are a dense upper bound (mask sparsity unknown)
    l2_hint: Optional[str] = None  # why some reads likely come from L2, not DRAM (see l2_reuse)
    l2_bytes: float = 0.0  # the bytes of ``reads`` that l2_hint says are likely L2 hits
    inputs: tuple[InputSig, ...] = ()  # (shape, dtype, bytes read) of each tensor read
    output: Optional[OutputSig] = None  # (shape, dtype) of the tensor written, when there is one


Formula = Callable[[list[Arg]], Optional[Cost]]


def _tensors(args: list[Arg]) -> list[Arg]:
    return [a for a in args if a.is_tensor]


def _split(args: list[Arg], n_in: int) -> tuple[list[Arg], list[Arg]]:
    """Tensors among an op's first ``n_in`` arguments (its inputs), and after them: PyTorch records
    ``out=`` tensors as trailing arguments (``mul.out(self, other, *, out)``); they are written,
    not read."""
    return [a for a in args[:n_in] if a.is_tensor], [a for a in args[n_in:] if a.is_tensor]


def _reads(ts: list[Arg]) -> float:
    return float(sum(a.read_bytes for a in ts))


def _sigs(ts: list[Arg]) -> tuple[InputSig, ...]:
    return tuple((a.dims, a.dtype, a.read_bytes) for a in ts)


# Type promotion categories (torch.result_type): bool < integer < floating < complex.
_CATEGORY = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 1,
    "int32": 1,
    "int64": 1,
    "fp4": 2,
    "fp8": 2,
    "fp16": 2,
    "bf16": 2,
    "fp32": 2,
    "fp64": 2,
    "complex32": 3,
    "complex64": 3,
    "complex128": 3,
}
_ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "fp4": 1,
    "fp8": 1,
    "fp16": 2,
    "bf16": 2,
    "fp32": 4,
    "fp64": 8,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
}


def _promote(dtypes: list[str]) -> Optional[str]:
    known = [d for d in dtypes if d in _CATEGORY]
    if not known:
        return None
    cat = max(_CATEGORY[d] for d in known)
    top = [d for d in known if _CATEGORY[d] == cat]
    size = max(_ITEMSIZE[d] for d in top)
    widest = {d for d in top if _ITEMSIZE[d] == size}
    if widest == {"fp16", "bf16"}:
        return "fp32"  # half and bfloat16 promote to float
    return sorted(widest)[0]


def result_dtype(tensors: list[Arg]) -> Optional[str]:
    """The dtype of an elementwise op's result (``torch.result_type``, simplified): tensors with
    dimensions set it; 0-dim tensors only when of a higher category. The trace records a wrapped
    Python float as a 0-dim fp64 tensor, which promotes to the default dtype (fp32), not fp64."""
    dim = _promote([a.dtype for a in tensors if a.dims and a.dtype])
    zero = _promote([a.dtype for a in tensors if a.is_tensor and a.dims == () and a.dtype])
    if zero == "fp64":
        zero = "fp32"
    if dim is None:
        return zero
    if zero is not None and _CATEGORY[zero] > _CATEGORY[dim]:
        return zero
    return dim


def broadcast_shapes(*shapes: tuple[int, ...]) -> Optional[tuple[int, ...]]:
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


# -- matmuls -------------------------------------------------------------------------------
def _gemm(
    ins: list[Arg],
    outs: list[Arg],
    out_shape: tuple[int, ...],
    flops: float,
    dtype: Optional[str],
    detail: dict[str, Any],
    out_itemsize: Optional[int] = None,
    out_dtype: Optional[str] = None,
) -> Cost:
    """A matmul-like op: its inputs read at the size their strides address, one output written
    (an ``out=`` tensor's dtype when there is one, else ``out_itemsize`` or the first input's)."""
    reads = _reads(ins)
    it = outs[0].itemsize if outs else (out_itemsize or ins[0].itemsize)
    od = outs[0].dtype if outs else (out_dtype or ins[0].dtype)
    return Cost(
        flops,
        reads + prod(out_shape) * it,
        dtype,
        MATRIX,
        detail=detail,
        reads=reads,
        inputs=_sigs(ins),
        output=(tuple(out_shape), od),
    )


def _mm(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 2)
    if len(ins) < 2 or len(ins[0].dims) != 2 or len(ins[1].dims) != 2:
        return None
    (m, k), (_, n) = ins[0].dims, ins[1].dims
    return _gemm(ins, outs, (m, n), 2.0 * m * n * k, ins[0].dtype, {"m": m, "n": n, "k": k})


def _addmm(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 5)  # addmm(self, mat1, mat2, *, beta, alpha)
    if len(ins) < 3:
        return None
    a, b = ins[1], ins[2]
    if len(a.dims) != 2 or len(b.dims) != 2:
        return None
    (m, k), (_, n) = a.dims, b.dims
    return _gemm(ins, outs, (m, n), 2.0 * m * n * k, a.dtype, {"m": m, "n": n, "k": k})


def _bmm(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 2)
    if len(ins) < 2 or len(ins[0].dims) != 3 or len(ins[1].dims) != 3:
        return None
    (b, m, k), (_, _, n) = ins[0].dims, ins[1].dims
    return _gemm(ins, outs, (b, m, n), 2.0 * b * m * n * k, ins[0].dtype, {"batch": b, "m": m, "n": n, "k": k})


def _baddbmm(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 5)  # baddbmm(self, batch1, batch2, *, beta, alpha)
    if len(ins) < 3 or len(ins[1].dims) != 3 or len(ins[2].dims) != 3:
        return None
    (b, m, k), (_, _, n) = ins[1].dims, ins[2].dims
    return _gemm(
        ins,
        outs,
        (b, m, n),
        2.0 * b * m * n * k,
        ins[1].dtype,
        {"batch": b, "m": m, "n": n, "k": k},
        out_itemsize=ins[1].itemsize,
        out_dtype=ins[1].dtype,
    )


def matmul_dims(a: tuple[int, ...], b: tuple[int, ...]) -> Optional[tuple[int, int, int, int, tuple[int, ...]]]:
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


def _matmul(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 2)
    if len(ins) < 2:
        return None
    r = matmul_dims(ins[0].dims, ins[1].dims)
    if r is None:
        return None
    batch, m, n, k, out = r
    return _gemm(ins, outs, out, 2.0 * batch * m * n * k, ins[0].dtype, {"batch": batch, "m": m, "n": n, "k": k})


def _linear(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 3)  # linear(input, weight, bias=None)
    if len(ins) < 2 or len(ins[1].dims) != 2 or not ins[0].dims:
        return None
    x, w = ins[0], ins[1]
    n, k = w.dims
    if x.dims[-1] != k:
        return None
    rows = prod(x.dims[:-1])
    return _gemm(ins, outs, x.dims[:-1] + (n,), 2.0 * rows * n * k, x.dtype, {"m": rows, "n": n, "k": k})


# _scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
# use_fast_accum=False): fp8 (or int8) operands, per-tensor / row-wise / block scales, output in
# out_dtype (a ScalarType code; the input dtype when absent).
_SCALED_MM_OUT_DTYPE = 6


def _scaled_mm(args: list[Arg]) -> Optional[Cost]:
    ins, outs = _split(args, 8)
    if len(ins) < 2 or len(ins[0].dims) != 2 or len(ins[1].dims) != 2:
        return None
    a, b = ins[0], ins[1]
    (m, k), (k2, n) = a.dims, b.dims
    if k != k2:
        return None
    out_dtype, out_itemsize = a.dtype, a.itemsize
    code = args[_SCALED_MM_OUT_DTYPE].value.strip() if len(args) > _SCALED_MM_OUT_DTYPE else ""
    if code.lstrip("-").isdigit() and int(code) in SCALAR_TYPE_CODES:
        out_dtype, out_itemsize = SCALAR_TYPE_CODES[int(code)]
    # the roof is the operands' (fp8 Tensor Cores), whatever the output dtype
    return _gemm(
        ins,
        outs,
        (m, n),
        2.0 * m * n * k,
        a.dtype,
        {"m": m, "n": n, "k": k},
        out_itemsize=out_itemsize,
        out_dtype=out_dtype,
    )


def _scaled_mm_v2(args: list[Arg]) -> Optional[Cost]:
    """_scaled_mm_v2(self, mat2, scale_a[], recipe_a, swizzle_a, scale_b[], recipe_b, swizzle_b,
    bias, out_dtype, ...): the same GEMM as _scaled_mm, scales given as tensor lists."""
    ins, outs = _split(args, 12)
    if len(ins) < 2 or len(ins[0].dims) != 2 or len(ins[1].dims) != 2:
        return None
    a, b = ins[0], ins[1]
    (m, k), (k2, n) = a.dims, b.dims
    if k != k2:
        return None
    out_dtype, out_itemsize = a.dtype, a.itemsize
    code = args[9].value.strip() if len(args) > 9 else ""
    if code.lstrip("-").isdigit() and int(code) in SCALAR_TYPE_CODES:
        out_dtype, out_itemsize = SCALAR_TYPE_CODES[int(code)]
    c = _gemm(
        ins,
        outs,
        (m, n),
        2.0 * m * n * k,
        a.dtype,
        {"m": m, "n": n, "k": k},
        out_itemsize=out_itemsize,
        out_dtype=out_dtype,
    )
    # scale lists record no dtype: fp32 per element (row-wise / tensor-wise scales)
    n_scale = (
        sum(prod(sh) for x in (args[2], args[5]) if x.shapes is not None for sh in x.shapes) if len(args) > 5 else 0
    )
    if n_scale and c.bytes is not None and c.reads is not None:
        c.bytes += 4.0 * n_scale
        c.reads += 4.0 * n_scale
    return c


def _grouped(out_dtype_at: int, offs_at: int, n_in: int) -> Formula:
    """_grouped_mm / _scaled_grouped_mm (MoE experts): ``self`` [T, K] tokens sorted by group with
    ``offs`` the group ends and ``mat2`` [G, K, N] one weight per group: 2·T·K·N; [G, M, K] x
    [G, K, N]: 2·G·M·N·K; [M, T] x [T, N] split along T (weight gradients): 2·M·T·N."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, outs = _split(args, n_in)
        if len(ins) < 2:
            return None
        a, b = ins[0], ins[1]
        out_shape: tuple[int, ...]
        if len(a.dims) == 2 and len(b.dims) == 3 and a.dims[1] == b.dims[1]:
            (t, k), (g, _, n) = a.dims, b.dims
            flops, out_shape, detail = 2.0 * t * k * n, (t, n), {"tokens": t, "groups": g, "n": n, "k": k}
        elif len(a.dims) == 3 and len(b.dims) == 3 and a.dims[0] == b.dims[0] and a.dims[2] == b.dims[1]:
            (g, m, k), (_, _, n) = a.dims, b.dims
            flops, out_shape, detail = 2.0 * g * m * n * k, (g, m, n), {"batch": g, "m": m, "n": n, "k": k}
        elif (
            len(a.dims) == 2
            and len(b.dims) == 2
            and a.dims[1] == b.dims[0]
            and len(args) > offs_at
            and args[offs_at].is_tensor
        ):
            (m, t), (_, n) = a.dims, b.dims
            g = args[offs_at].numel
            flops, out_shape, detail = 2.0 * m * t * n, (g, m, n), {"groups": g, "m": m, "n": n, "k": t}
        else:
            return None
        out_dtype, out_itemsize = a.dtype, a.itemsize
        code = args[out_dtype_at].value.strip() if len(args) > out_dtype_at else ""
        if code.lstrip("-").isdigit() and int(code) in SCALAR_TYPE_CODES:
            out_dtype, out_itemsize = SCALAR_TYPE_CODES[int(code)]
        return _gemm(ins, outs, out_shape, flops, a.dtype, detail, out_itemsize=out_itemsize, out_dtype=out_dtype)

    return cost


# -- scaled dot-product attention ------------------------------------------------------------
def causal_fraction(sq: int, sk: int, bottom_right: bool = False) -> float:
    """Share of (query, key) pairs a causal mask keeps: query i sees keys 0..i (top-left
    aligned, PyTorch's is_causal) or 0..i+sk-sq (bottom-right aligned)."""
    if sq <= 0 or sk <= 0:
        return 1.0
    shift = sk - sq if bottom_right else 0
    # row i keeps clamp(i + 1 + shift, 0, sk) keys
    i0 = min(max(0, -shift), sq)  # first row that keeps anything
    i1 = min(max(i0, sk - 1 - shift), sq)  # first row that keeps every key
    partial = (i1 - i0) * (1 + shift) + (i0 + i1 - 1) * (i1 - i0) // 2
    return (partial + (sq - i1) * sk) / float(sq * sk)


@dataclass(frozen=True)
class SdpaSchema:
    q: int  # index of query (grad_out comes first in backwards)
    layout: str  # "bhsd" or "bshd"
    causal: Optional[int]  # index of is_causal (bool) ...
    mask_type: Optional[int] = None  # ... or of custom_mask_type (0 none, 1 top-left, 2 bottom-right)
    backward: bool = False
    mask: Optional[int] = None  # index of an attention mask / bias tensor
    dropout: Optional[int] = None
    lse_out: bool = True  # writes a logsumexp (fp32, B·H·Sq)


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
    "aten::_scaled_dot_product_efficient_attention_backward": SdpaSchema(
        1, "bhsd", 11, backward=True, mask=4, dropout=9
    ),
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


def sdpa_shapes(op: str, args: list[Arg]) -> Optional[dict[str, Any]]:
    """B, H (query heads), Hk (key/value heads), Sq, Sk, D, Dv, dtype, causal of an SDPA op."""
    sch = SDPA_SCHEMAS.get(op)
    if sch is None:
        return None
    qi = sch.q
    if len(args) < qi + 3:
        return None
    q, k, v = args[qi], args[qi + 1], args[qi + 2]
    if not (q.is_tensor and k.is_tensor and v.is_tensor) or len(q.dims) != 4 or len(k.dims) != 4 or len(v.dims) != 4:
        return None
    if sch.layout == "bhsd":
        b, h, sq, d = q.dims
        _, hk, sk, _ = k.dims
        dv = v.dims[3]
    else:
        b, sq, h, d = q.dims
        _, sk, hk, _ = k.dims
        dv = v.dims[3]
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
    return dict(
        b=b,
        h=h,
        hk=hk,
        sq=sq,
        sk=sk,
        d=d,
        dv=dv,
        dtype=q.dtype,
        itemsize=q.itemsize,
        causal=causal,
        bottom_right=bottom_right,
        causal_known=causal_known,
        mask_bytes=mask.read_bytes if mask is not None else 0,
        dropout_p=dropout,
        backward=sch.backward,
        lse=sch.lse_out,
        layout=sch.layout,
    )


def _sdpa(op: str) -> Formula:
    def cost(args: list[Arg]) -> Optional[Cost]:
        s = sdpa_shapes(op, args)
        if s is None:
            return None
        b, h, hk, sq, sk, d, dv, it = s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"], s["itemsize"]
        fwd_dense = 2.0 * b * h * sq * sk * d + 2.0 * b * h * sq * sk * dv
        if s["backward"]:
            dense = 2.0 * b * h * sq * sk * d * 3 + 2.0 * b * h * sq * sk * dv * 2  # 5 matmuls
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
            parts = {"preprocess": (2.0 * o_b, float(b * h * sq * 4) + acc_b), "postprocess": (acc_b, float(q_b))}
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
        return Cost(
            dense * frac,
            float(nbytes),
            s["dtype"],
            MATRIX,
            flops_dense=dense,
            detail=detail,
            reads=float(reads),
            parts=parts,
            fp32_on_tensor_cores=op not in COMPOSITE,
        )

    return cost


# -- elementwise, reductions, copies ----------------------------------------------------------
def _elementwise(
    flops_per_elem: float, n_in: int, out_dtype: Optional[str] = None, estimated: bool = True, inplace: bool = False
) -> Formula:
    """Inputs (the first ``n_in`` arguments) read once each at the size their strides address,
    one output of the broadcast shape written: an ``out=`` tensor (the first tensor argument
    after the inputs: written, not read), ``self`` for in-place ops, else a new tensor at the
    promoted dtype (``out_dtype``, e.g. bool for comparisons, overrides it)."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, outs = _split(args, n_in)
        if not ins:
            return None
        out_shape = broadcast_shapes(*[a.dims for a in ins])
        if out_shape is None:
            out_shape = ins[0].dims
        if outs:
            dt, it = outs[0].dtype, outs[0].itemsize
        elif inplace:
            dt, it = ins[0].dtype, ins[0].itemsize
        else:
            dt = out_dtype or result_dtype(ins) or ins[0].dtype
            it = _ITEMSIZE.get(dt or "", ins[0].itemsize)
        n = prod(out_shape)
        reads = _reads(ins)
        # the op's dtype: the bytes it moves (a bool output of a comparison is not the math's dtype)
        dtype = dt if out_dtype is None else (result_dtype(ins) or ins[0].dtype)
        return Cost(
            flops_per_elem * n,
            reads + n * it,
            dtype,
            VECTOR,
            flops_estimated=estimated and flops_per_elem > 0,
            reads=reads,
            inputs=_sigs(ins),
            output=(tuple(out_shape), dt),
        )

    return cost


def _softmax(flops_per_elem: float, n_in: int = 3) -> Formula:
    """softmax(self, dim, dtype) / _softmax(self, dim, half_to_float) / _masked_softmax(self,
    mask, dim, mask_type): the input and any mask read, the output written (fp32 when
    half_to_float, the given dtype for softmax(dtype=))."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, outs = _split(args, n_in)
        if not ins:
            return None
        x = ins[0]
        out_dtype, out_itemsize = x.dtype, x.itemsize
        if len(args) > 2 and args[2].value.strip().lower() == "true":
            out_dtype, out_itemsize = "fp32", 4
        elif len(args) > 2 and args[2].value.strip().lstrip("-").isdigit():
            out_dtype, out_itemsize = SCALAR_TYPE_CODES.get(int(args[2].value), (x.dtype, x.itemsize))
        if outs:
            out_dtype, out_itemsize = outs[0].dtype, outs[0].itemsize
        reads = _reads(ins)
        return Cost(
            flops_per_elem * x.numel,
            reads + x.numel * out_itemsize,
            x.dtype,
            VECTOR,
            flops_estimated=True,
            reads=reads,
            inputs=_sigs(ins),
            output=(x.dims, out_dtype),
        )

    return cost


def _softmax_backward(args: list[Arg]) -> Optional[Cost]:
    """_softmax_backward_data(grad_output, output, dim, input_dtype): grad_input at input_dtype."""
    ins, outs = _split(args, 4)
    if len(ins) < 2:
        return None
    g = ins[0]
    n = g.numel
    dt, it = g.dtype, g.itemsize
    if outs:
        dt, it = outs[0].dtype, outs[0].itemsize
    elif len(args) > 3 and args[3].value.strip().lstrip("-").isdigit():
        dt, it = SCALAR_TYPE_CODES.get(int(args[3].value), (dt, it))
    reads = _reads(ins[:2])
    return Cost(
        4.0 * n,
        reads + n * it,
        g.dtype,
        VECTOR,
        flops_estimated=True,
        reads=reads,
        inputs=_sigs(ins[:2]),
        output=(g.dims, dt),
    )


def _dropout(args: list[Arg]) -> Optional[Cost]:
    ins, _ = _split(args, 3)
    if not ins:
        return None
    x = ins[0]
    p = _float_value(args, 1)
    train = _bool_value(args, 2)
    reads = float(x.read_bytes)
    if train is False or p == 0.0:
        return Cost(0.0, reads + x.nbytes, x.dtype, VECTOR, reads=reads, inputs=_sigs([x]), output=(x.dims, x.dtype))
    # read x, write out and a bool mask
    return Cost(
        2.0 * x.numel,
        reads + x.nbytes + x.numel,
        x.dtype,
        VECTOR,
        flops_estimated=True,
        reads=reads,
        inputs=_sigs([x]),
        output=(x.dims, x.dtype),
    )


def _copy(args: list[Arg]) -> Optional[Cost]:
    """copy_(self, src): ``self`` (the destination, often a slice of a cache) is written, ``src``
    read at the size its strides address (an expanded K/V repeat reads each element once)."""
    t = _tensors(args)
    if len(t) < 2:
        return None
    dst, src = t[0], t[1]
    reads = float(src.read_bytes)
    return Cost(
        0.0,
        reads + dst.numel * dst.itemsize,
        dst.dtype,
        NONE,
        reads=reads,
        inputs=_sigs([src]),
        output=(dst.dims, dst.dtype),
    )


def _unary_copy(args: list[Arg]) -> Optional[Cost]:
    """clone / contiguous / triu...: read the tensor (what its strides address), write it whole."""
    ins, outs = _split(args, 2)
    if not ins:
        return None
    x = ins[0]
    reads = float(x.read_bytes)
    return Cost(0.0, reads + x.nbytes, x.dtype, NONE, reads=reads, inputs=_sigs([x]), output=(x.dims, x.dtype))


def _to_copy(args: list[Arg]) -> Optional[Cost]:
    """_to_copy(self, dtype, ...): a cast (quantisation to fp8 included) reads the input and
    writes it at the new dtype."""
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    out_dtype, out_size = x.dtype, x.itemsize
    if len(args) > 1 and args[1].value.strip().lstrip("-").isdigit():
        out_dtype, out_size = SCALAR_TYPE_CODES.get(int(args[1].value), (x.dtype, x.itemsize))
    reads = float(x.read_bytes)
    return Cost(
        0.0,
        reads + x.numel * out_size,
        x.dtype,
        NONE,
        detail={"out_itemsize": out_size},
        reads=reads,
        inputs=_sigs([x]),
        output=(x.dims, out_dtype),
    )


def _cat(args: list[Arg]) -> Optional[Cost]:
    lists = [a for a in args if a.shapes is not None]
    if not lists or not lists[0].shapes:
        return None
    n = sum(prod(s) for s in lists[0].shapes)
    # Tensor lists carry no element type; the kernel's template (OpaqueType<N>) may say (attribute.py).
    return Cost(0.0, None, None, NONE, detail={"elements": n})


def _fill(args: list[Arg]) -> Optional[Cost]:
    """fill_ / zero_, and random fills (uniform_, normal_, bernoulli_...): write every element,
    read none (the random numbers are generated in registers)."""
    t = _tensors(args)
    if not t:
        return None
    return Cost(0.0, float(t[0].nbytes), t[0].dtype, NONE, reads=0.0, output=(t[0].dims, t[0].dtype))


def _scan(args: list[Arg]) -> Optional[Cost]:
    """cumsum / cumprod: read and write every element."""
    ins, _ = _split(args, 3)
    if not ins:
        return None
    x = ins[0]
    reads = float(x.read_bytes)
    return Cost(
        float(x.numel),
        reads + x.nbytes,
        x.dtype,
        VECTOR,
        flops_estimated=True,
        reads=reads,
        inputs=_sigs([x]),
        output=(x.dims, x.dtype),
    )


def _transform_bias_rescale_qkv(args: list[Arg]) -> Optional[Cost]:
    """nn.MultiheadAttention fast path: qkv [B, S, 3E] + bias [3E] -> q, k, v [B, H, S, D]."""
    t = _tensors(args)
    if len(t) < 2:
        return None
    qkv, bias = t[0], t[1]
    reads = _reads([qkv, bias])
    return Cost(
        2.0 * qkv.numel,
        reads + qkv.nbytes,
        qkv.dtype,
        VECTOR,
        flops_estimated=True,
        reads=reads,
        inputs=_sigs([qkv, bias]),
    )


_FLEX_TEMPLATE = re.compile(r"^triton_tem_fused_.*flex_(attention|decoding)")
_FLOAT = {"fp64", "fp32", "fp16", "bf16", "fp8"}


def flex_qkv(args: list[Arg]) -> Optional[tuple[Arg, Arg, Arg]]:
    """q, k, v of a FlexAttention template launch: its first three floating-point 4-D buffers
    ([B, H, S, D] logically, whatever the strides), checked for consistent B, D, Skv and GQA heads.
    The block-mask tensors (int32 ``KV_NUM_BLKS``/``KV_IDX``...) and score-mod buffers follow."""
    f4 = [a for a in args if a.is_tensor and len(a.dims) == 4 and a.dtype in _FLOAT]
    if len(f4) < 3:
        return None
    q, k, v = f4[0], f4[1], f4[2]
    if not (
        q.dims[0] == k.dims[0] == v.dims[0]
        and q.dims[3] == k.dims[3]
        and k.dims[1] == v.dims[1]
        and k.dims[2] == v.dims[2]
        and k.dims[1] > 0
        and q.dims[1] % k.dims[1] == 0
    ):
        return None
    return q, k, v


def looks_like_flex(args: list[Arg]) -> bool:
    """A Triton template launched with q, k, v and a block mask (an int32 4-D ``KV_IDX``): Inductor
    names flex templates after the ops fused into them (``triton_tem_fused__unsafe_view_...``)
    as often as ``..._flex_attention_...``."""
    return flex_qkv(args) is not None and any(a.is_tensor and a.dtype == "int32" and len(a.dims) == 4 for a in args)


def _flex(backward: bool) -> Formula:
    """FlexAttention (torch.nn.attention.flex_attention, compiled: Inductor's
    ``triton_tem_fused_flex_attention*`` / ``flex_decoding`` templates). The block mask's sparsity
    (causal, sliding window, documents) is not in the trace, so FLOPs and bytes are those of DENSE
    attention at the recorded dims: an upper bound (``upper_bound``). FLOPs follow SDPA's
    convention (forward 2 matmuls, backward 5 = 2.5x); bytes are every recorded buffer read once
    (q, k, v, block-mask and score-mod buffers, LSE) and the last one written."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        qkv = flex_qkv(args)
        if qkv is None:
            return None
        q, k, v = qkv
        # the backward template also takes dO, dQ, dV (and writes dK): 7 such buffers to 4
        backward_ = backward or sum(1 for a in args if a.is_tensor and len(a.dims) == 4 and a.dtype in _FLOAT) >= 6
        b, h, sq, d = q.dims
        hk, sk, dv = k.dims[1], k.dims[2], v.dims[3]
        fwd = 2.0 * b * h * sq * sk * d + 2.0 * b * h * sq * sk * dv
        dense = (2.0 * b * h * sq * sk * d * 3 + 2.0 * b * h * sq * sk * dv * 2) if backward_ else fwd
        t = _tensors(args)
        reads = _reads(t[:-1])
        return Cost(
            dense,
            reads + t[-1].nbytes,
            q.dtype,
            MATRIX,
            flops_dense=dense,
            reads=reads,
            upper_bound=True,
            inputs=_sigs(t[:-1]),
            detail={
                "b": b,
                "h": h,
                "hk": hk,
                "sq": sq,
                "sk": sk,
                "d": d,
                "dv": dv,
                "causal": None,
                "mask": "block mask (sparsity not recorded): dense upper bound",
            },
        )

    return cost


def _triton(name: str) -> Formula:
    """An Inductor-generated Triton kernel (torch.compile). Its recorded inputs are the kernel's
    buffers — inputs first, the output last — so each is read or written once; FLOPs are
    estimated as one per element per fused op named in the kernel (``fused__softmax_div_...``).
    Matmul templates (``triton_tem_fused_mm``/``bmm``) count 2·M·N·K from their operands."""
    flex = _flex(backward="backward" in name)
    named_flex = bool(_FLEX_TEMPLATE.search(name))
    ops = [t for t in re.split(r"_(?=_?[a-z])", name.split("fused", 1)[-1].strip("_")) if t and not t.isdigit()]
    per_elem = max(1, len(ops))
    template = name.startswith("triton_tem")

    def cost(args: list[Arg]) -> Optional[Cost]:
        t = _tensors(args)
        if not t:
            return None
        out = t[-1]
        reads = _reads(t[:-1])
        nbytes = reads + out.nbytes
        if template and (named_flex or looks_like_flex(args)):
            return flex(args)
        if template and len(t) >= 3:
            r = matmul_dims(t[0].dims, t[1].dims)
            if r is not None:
                batch, m, n, k, _ = r
                return Cost(
                    2.0 * batch * m * n * k,
                    nbytes,
                    t[0].dtype,
                    MATRIX,
                    reads=reads,
                    detail={"batch": batch, "m": m, "n": n, "k": k},
                )
            return Cost(None, nbytes, t[0].dtype, MATRIX, reads=reads)
        n = max(a.numel for a in t)
        return Cost(
            float(per_elem * n),
            nbytes,
            t[0].dtype,
            VECTOR,
            flops_estimated=True,
            reads=reads,
            detail={"fused_ops": ops},
        )

    return cost


# -- normalisation and losses (the ops around attention in a training step) -----------------------
def _norm(n_in: int, stats_dtype_bytes: int = 4) -> Formula:
    """native_layer_norm(input, normalized_shape, weight, bias, eps) / native_batch_norm /
    cudnn_batch_norm(input, weight, bias, running_mean, running_var, ...) / _fused_rms_norm:
    the input and the (small) affine parameters read once, the output written at the input's
    dtype (plus per-row fp32 statistics, small). FLOPs: an estimate of 5 per element."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, _ = _split(args, n_in)
        if not ins:
            return None
        x = ins[0]
        reads = _reads(ins)
        return Cost(
            5.0 * x.numel,
            reads + x.nbytes,
            x.dtype,
            VECTOR,
            flops_estimated=True,
            reads=reads,
            inputs=_sigs(ins),
            output=(x.dims, x.dtype),
        )

    return cost


def _norm_backward(grad_at: int, input_at: int, n_in: int) -> Formula:
    """native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
    output_mask) and the like: grad_out, input and the small statistics/parameters read, the
    input's gradient written (the parameter gradients are small). 8 FLOPs per element (estimate)."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        if len(args) <= max(grad_at, input_at) or not args[grad_at].is_tensor or not args[input_at].is_tensor:
            return None
        ins, _ = _split(args, n_in)
        x = args[input_at]
        reads = _reads(ins)
        return Cost(
            8.0 * x.numel,
            reads + x.nbytes,
            x.dtype,
            VECTOR,
            flops_estimated=True,
            reads=reads,
            inputs=_sigs(ins),
            output=(x.dims, x.dtype),
        )

    return cost


def _nll_loss(args: list[Arg]) -> Optional[Cost]:
    """nll_loss_forward(self [N, C], target [N], ...): the targets and one logit per row read."""
    ins, _ = _split(args, 3)
    if len(ins) < 2:
        return None
    x, target = ins[0], ins[1]
    reads = float(target.read_bytes + min(target.numel * x.itemsize, x.read_bytes))
    return Cost(float(target.numel), reads + 8.0, x.dtype, VECTOR, flops_estimated=True, reads=reads)


def _nll_loss_backward(args: list[Arg]) -> Optional[Cost]:
    """nll_loss_backward(grad_output, self, target, ...): the targets read, one gradient per row
    written into grad_input (its zero fill is a separate fill_)."""
    if len(args) < 3 or not args[1].is_tensor or not args[2].is_tensor:
        return None
    x, target = args[1], args[2]
    reads = float(target.read_bytes) + 8.0
    return Cost(
        float(target.numel), reads + target.numel * x.itemsize, x.dtype, VECTOR, flops_estimated=True, reads=reads
    )


def _embedding_backward(args: list[Arg]) -> Optional[Cost]:
    """embedding_dense_backward(grad_output [..., D], indices, num_weights, ...): the gradient and
    indices read, a [num_weights, D] gradient written (its sort/segment kernels move the indices
    again: not counted, a minimum)."""
    if len(args) < 3 or not args[0].is_tensor or not args[1].is_tensor:
        return None
    g, idx = args[0], args[1]
    nw = _int_value(args, 2)
    if nw is None or not g.dims:
        return None
    reads = float(g.read_bytes + idx.read_bytes)
    return Cost(
        float(g.numel),
        reads + nw * g.dims[-1] * g.itemsize,
        g.dtype,
        VECTOR,
        flops_estimated=True,
        reads=reads,
        output=((nw, g.dims[-1]), g.dtype),
    )


# -- routing, sorting and indexing (MoE routers, top-k, token permutation, KV-cache writes) ------
INDEX_ITEMSIZE = 8  # int64 indices: what topk/sort/argsort write, and index lists record no dtype


def _int_value(args: list[Arg], i: int, default: Optional[int] = None) -> Optional[int]:
    if i >= len(args):
        return default
    v = args[i].value.strip()
    return int(v) if v.lstrip("-").isdigit() else default


def _dim_size(x: Arg, dim: Optional[int]) -> int:
    if not x.dims:
        return 1
    d = -1 if dim is None else dim
    return x.dims[d] if -len(x.dims) <= d < len(x.dims) else 1


def _sorting(kind: str) -> Formula:
    """topk(self, k, dim) / sort(self, dim) / argsort(self, dim): read the input once; write the
    values (not for argsort) and int64 indices — k per row for topk. FLOPs: an estimate of
    n·log2(row) comparisons. (sort.stable records ``stable`` before ``dim``.)"""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, _ = _split(args, 1)
        if not ins:
            return None
        x = ins[0]
        rest = [a for a in args[1:] if not a.is_tensor]
        if kind == "topk":
            k = _int_value(args, 1)
            dim = _int_value(args, 2, -1)
            if k is None:
                return None
            row = _dim_size(x, dim)
            out_n = x.numel // max(row, 1) * min(k, row)
        else:
            ints = [int(a.value) for a in rest if a.value.strip().lstrip("-").isdigit()]
            dim = ints[0] if ints else -1
            row = _dim_size(x, dim)
            out_n = x.numel
        reads = float(x.read_bytes)
        writes = out_n * INDEX_ITEMSIZE + (0 if kind == "argsort" else out_n * x.itemsize)
        flops = float(x.numel * max(1, int(row).bit_length()))
        return Cost(
            flops,
            reads + writes,
            x.dtype,
            VECTOR,
            flops_estimated=True,
            reads=reads,
            inputs=_sigs([x]),
            output=(x.dims, x.dtype),
        )

    return cost


def _counting(args: list[Arg]) -> Optional[Cost]:
    """histc / bincount: read the input (and weights) once; the histogram is small."""
    ins, _ = _split(args, 2)
    if not ins:
        return None
    reads = _reads(ins)
    return Cost(float(ins[0].numel), reads, ins[0].dtype, VECTOR, flops_estimated=True, reads=reads, inputs=_sigs(ins))


def _gather_like(index_at: int, src_at: int, rows_from_index: bool) -> Formula:
    """gather(self, dim, index) / index_select(self, dim, index) / embedding(weight, indices):
    read the indices and the selected elements (at most the whole source), write them.
    ``rows_from_index``: the output is ``index`` elements of whole rows along ``dim``
    (index_select, embedding) rather than one element per index (gather)."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        if len(args) <= max(index_at, src_at) or not args[index_at].is_tensor or not args[src_at].is_tensor:
            return None
        src, idx = args[src_at], args[index_at]
        if rows_from_index:
            if src_at == 0 and index_at == 2:  # index_select(self, dim, index)
                dim = _int_value(args, 1, 0) or 0
                row = src.numel // max(_dim_size(src, dim), 1)
            else:  # embedding(weight [V, D], indices)
                row = src.numel // max(src.dims[0], 1) if src.dims else 1
            n = idx.numel * row
        else:
            n = idx.numel
        gathered = min(n * src.itemsize, src.read_bytes)
        reads = float(idx.read_bytes + gathered)
        return Cost(
            0.0, reads + n * src.itemsize, src.dtype, NONE, reads=reads, inputs=_sigs([idx]), output=(None, src.dtype)
        )

    return cost


def _scatter(accumulate: bool, inplace: bool, self_at: int = 0, index_at: int = 2, src_at: int = 3) -> Formula:
    """scatter / scatter_add / scatter_reduce(self, dim, index, src), index_add / index_copy(self,
    dim, index, source) (index_copy_ is a KV-cache write), in place or not: read the indices and
    the source, write the elements of ``self`` they update (one per source element), reading them
    first when ``accumulate``; out of place, ``self`` is also read and written whole."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        if len(args) <= max(self_at, index_at) or not args[self_at].is_tensor or not args[index_at].is_tensor:
            return None
        dst, idx = args[self_at], args[index_at]
        src = args[src_at] if src_at < len(args) and args[src_at].is_tensor else None
        n = src.numel if src is not None else idx.numel
        touched = min(n, dst.numel) * dst.itemsize
        reads = float(idx.read_bytes + (src.read_bytes if src is not None else 0) + (touched if accumulate else 0))
        writes = float(touched)
        if not inplace:
            reads += dst.read_bytes
            writes = float(dst.nbytes)
        return Cost(
            0.0,
            reads + writes,
            dst.dtype,
            NONE,
            reads=reads,
            inputs=_sigs([a for a in (idx, src) if a is not None]),
            output=(dst.dims, dst.dtype),
        )

    return cost


def _index_list(args: list[Arg]) -> Optional[tuple[Arg, int, int]]:
    """self, selected positions and index bytes of an advanced-indexing op (``self[idx...]``):
    the index tensors (a tensor list: shapes recorded, dtypes not; taken as int64) broadcast."""
    if len(args) < 2 or not args[0].is_tensor or args[1].shapes is None:
        return None
    x, shapes = args[0], [sh for sh in args[1].shapes]
    if not shapes:
        return None
    b = broadcast_shapes(*shapes)
    if b is None:
        return None
    sel = prod(b) * prod(x.dims[len(shapes) :])
    return x, sel, sum(prod(sh) for sh in shapes) * INDEX_ITEMSIZE


def _index(args: list[Arg]) -> Optional[Cost]:
    """index(self, indices): gather the selected elements (bool masks: every position, an upper
    bound) — read the indices and what they select, write it."""
    r = _index_list(args)
    if r is None:
        return None
    x, sel, idx_b = r
    reads = float(idx_b + min(sel * x.itemsize, x.read_bytes))
    return Cost(0.0, reads + sel * x.itemsize, x.dtype, NONE, reads=reads, output=(None, x.dtype))


def _index_put(args: list[Arg]) -> Optional[Cost]:
    """index_put_(self, indices, values, accumulate): read the indices and values, write the
    selected elements (read them too when accumulating). PyTorch often records the optional
    index list without its shapes; then the values say how many elements are written and the
    indices' own bytes are left out (``detail.indices``: a lower bound)."""
    if len(args) < 3 or not args[0].is_tensor:
        return None
    x = args[0]
    vals = args[2] if args[2].is_tensor else None
    r = _index_list(args)
    detail: dict[str, Any] = {}
    if r is not None:
        _, sel, idx_b = r
    elif vals is not None:
        sel, idx_b = vals.numel, 0
        detail["indices"] = "not recorded: their bytes are left out"
    else:
        return None
    acc = _bool_value(args, 3) is True
    touched = min(sel, x.numel) * x.itemsize
    reads = float(idx_b + (vals.read_bytes if vals is not None else 0) + (touched if acc else 0))
    return Cost(0.0, reads + touched, x.dtype, NONE, reads=reads, output=(x.dims, x.dtype), detail=detail)


def _one_hot(args: list[Arg]) -> Optional[Cost]:
    """one_hot(self, num_classes): read the labels, write num_classes int64 per label."""
    ins, _ = _split(args, 1)
    c = _int_value(args, 1)
    if not ins or c is None or c <= 0:
        return None
    x = ins[0]
    reads = float(x.read_bytes)
    return Cost(0.0, reads + x.numel * c * 8, "int64", NONE, reads=reads, output=(x.dims + (c,), "int64"))


def _read_only(args: list[Arg]) -> Optional[Cost]:
    """nonzero / masked_select / _unique2 / searchsorted...: the inputs read once; the output's
    size depends on the data (not recorded), so it is left out: a lower bound of the traffic."""
    t = _tensors(args)
    if not t:
        return None
    reads = _reads(t)
    return Cost(0.0, reads, t[0].dtype, NONE, reads=reads, inputs=_sigs(t), detail={"output": "data-dependent"})


def _reduction(args: list[Arg]) -> Optional[Cost]:
    """sum / mean / amax / all...: the input read once; the (small) result is not counted."""
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    reads = float(x.read_bytes)
    return Cost(float(x.numel), reads, x.dtype, VECTOR, flops_estimated=True, reads=reads, inputs=_sigs([x]))


# Elementwise ops by the number of leading arguments that can be input tensors (``alpha``,
# ``rounding_mode``... are never tensors, so a tensor after them is an ``out=`` tensor).
_ELEMENTWISE_BINARY = (
    "add",
    "sub",
    "mul",
    "div",
    "true_divide",
    "rsub",
    "maximum",
    "minimum",
    "pow",
    "bitwise_and",
    "bitwise_or",
    "clamp_min",
    "clamp_max",
)
_ELEMENTWISE_UNARY = (
    "neg",
    "exp",
    "sin",
    "cos",
    "rsqrt",
    "sqrt",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "relu",
    "abs",
    "reciprocal",
    "log",
    "erf",
    "square",
    # fp8 quantisation: scale = max / amax(abs(x)), clamp, round, cast (_to_copy)
    "round",
    "floor",
    "ceil",
    "trunc",
    "sign",
    "exp2",
    "log2",
    "nan_to_num",
)
# Produce a bool tensor.
_COMPARISONS_BINARY = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or")
_COMPARISONS_UNARY = ("logical_not", "isneginf", "isposinf", "isinf", "isnan")
_ACTIVATION_BACKWARD = (
    "silu_backward",
    "gelu_backward",
    "threshold_backward",
    "sigmoid_backward",
    "tanh_backward",
    "hardtanh_backward",
    "leaky_relu_backward",
)

_FORMULAS: dict[str, Formula] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul,
    "aten::linear": _linear,
    "aten::_scaled_mm": _scaled_mm,
    "aten::_scaled_mm_v2": _scaled_mm_v2,
    "aten::_grouped_mm": _grouped(4, 2, 5),
    "aten::_scaled_grouped_mm": _grouped(7, 4, 9),
    "aten::_scaled_grouped_mm_v2": _grouped(10, 8, 13),
    "aten::_softmax": _softmax(5),
    "aten::softmax": _softmax(5),
    "aten::_safe_softmax": _softmax(5),
    "aten::_masked_softmax": _softmax(5, n_in=4),
    "aten::_log_softmax": _softmax(5),
    "aten::_softmax_backward_data": _softmax_backward,
    "aten::_log_softmax_backward_data": _softmax_backward,
    "aten::native_layer_norm": _norm(4),
    "aten::_fused_rms_norm": _norm(3),
    "aten::native_batch_norm": _norm(5),
    "aten::cudnn_batch_norm": _norm(5),
    "aten::native_layer_norm_backward": _norm_backward(0, 1, 7),
    "aten::_fused_rms_norm_backward": _norm_backward(0, 1, 5),
    "aten::native_batch_norm_backward": _norm_backward(0, 1, 7),
    "aten::cudnn_batch_norm_backward": _norm_backward(1, 0, 9),
    "aten::nll_loss_forward": _nll_loss,
    "aten::nll_loss_backward": _nll_loss_backward,
    "aten::embedding_dense_backward": _embedding_backward,
    "aten::native_dropout": _dropout,
    "aten::dropout": _dropout,
    "aten::feature_dropout": _dropout,
    "aten::native_dropout_backward": _elementwise(1, 2),
    "aten::masked_fill": _elementwise(1, 3),
    "aten::masked_fill_": _elementwise(1, 3, inplace=True),
    "aten::where": _elementwise(1, 3),
    # clamp(self, min, max): min and max are Scalars or (clamp.Tensor) tensors
    "aten::clamp": _elementwise(1, 3),
    "aten::clamp_": _elementwise(1, 3, inplace=True),
    "aten::copy_": _copy,
    "aten::clone": _unary_copy,
    "aten::contiguous": _unary_copy,
    "aten::triu": _unary_copy,
    "aten::tril": _unary_copy,
    "aten::triu_": _unary_copy,
    "aten::tril_": _unary_copy,
    "aten::_to_copy": _to_copy,
    "aten::cat": _cat,
    "aten::fill_": _fill,
    "aten::zero_": _fill,
    "aten::sum": _reduction,
    "aten::mean": _reduction,
    "aten::amax": _reduction,
    "aten::max": _reduction,
    "aten::all": _reduction,
    "aten::any": _reduction,
    "aten::amin": _reduction,
    "aten::min": _reduction,
    "aten::cumsum": _scan,
    "aten::cumprod": _scan,
    "aten::uniform_": _fill,
    "aten::normal_": _fill,
    "aten::bernoulli_": _fill,
    "aten::exponential_": _fill,
    "aten::random_": _fill,
    "aten::_transform_bias_rescale_qkv": _transform_bias_rescale_qkv,
    "aten::topk": _sorting("topk"),
    "aten::sort": _sorting("sort"),
    "aten::argsort": _sorting("argsort"),
    "aten::histc": _counting,
    "aten::bincount": _counting,
    "aten::argmax": _reduction,
    "aten::argmin": _reduction,
    "aten::gather": _gather_like(2, 0, False),
    "aten::index_select": _gather_like(2, 0, True),
    "aten::embedding": _gather_like(1, 0, True),
    "aten::scatter": _scatter(False, False),
    "aten::scatter_": _scatter(False, True),
    "aten::scatter_add": _scatter(True, False),
    "aten::scatter_add_": _scatter(True, True),
    "aten::scatter_reduce": _scatter(True, False),
    "aten::scatter_reduce_": _scatter(True, True),
    "aten::index_add": _scatter(True, False),
    "aten::index_add_": _scatter(True, True),
    "aten::index_copy": _scatter(False, False),
    "aten::index_copy_": _scatter(False, True),
    "aten::index": _index,
    "aten::index_put_": _index_put,
    "aten::_index_put_impl_": _index_put,
    "aten::one_hot": _one_hot,
    "aten::nonzero": _read_only,
    "aten::masked_select": _read_only,
    "aten::_unique2": _read_only,
    "aten::searchsorted": _read_only,
    "aten::bucketize": _read_only,
    "aten::masked_scatter": _read_only,
}
_names: tuple[str, ...]
for _names, _n_in in ((_ELEMENTWISE_BINARY, 2), (_ELEMENTWISE_UNARY, 1)):
    for _n in _names:
        _FORMULAS[f"aten::{_n}"] = _elementwise(1, _n_in)
        _FORMULAS[f"aten::{_n}_"] = _elementwise(1, _n_in, inplace=True)
for _names, _n_in in ((_COMPARISONS_BINARY, 2), (_COMPARISONS_UNARY, 1)):
    for _n in _names:
        _FORMULAS[f"aten::{_n}"] = _elementwise(1, _n_in, out_dtype="bool")
for _n in _ACTIVATION_BACKWARD:
    _FORMULAS[f"aten::{_n}"] = _elementwise(1, 2)
for _n in SDPA_SCHEMAS:
    _FORMULAS[_n] = _sdpa(_n)

_TRITON_OP = re.compile(r"^triton_(poi|red|per|tem|for)_\w+$")

# Ops whose work is done by the ops they call: never the owner of a kernel's cost.
COMPOSITE = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math"}


L2_WINDOW = 16  # ops looked back at for the writer of an input
L2_MIN_SHARE = 0.25  # the share of an op's reads an L2-resident input must be to be worth a note
L2_MIN_BYTES = 2**20  # ... and its size: a few kB from L2 change no verdict


def l2_reuse(
    costs: Sequence[Optional[Cost]], l2_bytes: Optional[float], last_only: bool = False
) -> list[Optional[Cost]]:
    """``costs`` (the cost of each kernel of one stream, in launch order; consecutive kernels of
    one op share one Cost object) with ``l2_hint``/``l2_bytes`` set where an input was probably
    still in L2: an earlier op (at most ``L2_WINDOW`` ops back) wrote a tensor of the input's
    shape and dtype, and that tensor plus every byte moved since fits in the L2 (an LRU cache of
    that size still holds it), and that input is at least a quarter of the op's reads and 1 MiB.
    The safe-softmax ``where`` reading the softmax just written is the common case. Such reads
    are not DRAM traffic, so a memory roof must not be claimed from them.
    Unknown costs in between end the search (their traffic is unknown). ``last_only``: look only
    for the last op's inputs (the report asks about one kernel at a time). Signature:
    ``l2_reuse(costs: Sequence[Optional[Cost]], l2_bytes: Optional[float], last_only: bool = False)
    -> list[Optional[Cost]]``."""
    out: list[Optional[Cost]] = list(costs)
    if not l2_bytes:
        return out
    ops: list[tuple[int, Optional[Cost]]] = []  # (first kernel index, cost) of each op
    for i, c in enumerate(costs):
        if not ops or ops[-1][1] is not c:
            ops.append((i, c))
    for j, (i, c) in enumerate(ops):
        if c is None or not c.inputs or c.bytes is None or (last_only and j != len(ops) - 1):
            continue
        wanted = {(sh, dt): b for sh, dt, b in c.inputs}
        moved, hit = 0.0, None
        for k in range(j - 1, max(-1, j - 1 - L2_WINDOW), -1):
            p = ops[k][1]
            if p is None or p.bytes is None:
                break
            if p.output is not None and p.output in wanted:
                b = float(wanted.pop(p.output))
                if moved + b <= l2_bytes and (hit is None or b > hit[0]):
                    hit = (b, p.output, j - k)
            moved += p.bytes
            if moved > l2_bytes or not wanted:
                break
        # a tiny operand (a 0-dim scalar, a bias) from L2 does not change the verdict
        if hit is None or hit[0] < max(L2_MIN_SHARE * (c.reads or 0.0), L2_MIN_BYTES):
            continue
        b, (shape, dtype), back = hit
        note = (
            f"reads the {dtype} {list(shape)} tensor written {back} op{'s' if back > 1 else ''} earlier "
            f"({b / 1e6:.3g} MB, fits in L2 with everything moved since): likely an L2 hit, not DRAM traffic"
        )
        new = replace(c, l2_hint=note, l2_bytes=min(b, c.reads if c.reads is not None else b))
        for q in range(i, len(costs)):
            if costs[q] is not c:
                break
            out[q] = new
    return out


def has_formula(op: str) -> bool:
    return (op in _FORMULAS and op not in COMPOSITE) or bool(_TRITON_OP.match(op))


def op_cost(op: str, args: list[Arg]) -> Optional[Cost]:
    f = _FORMULAS.get(op)
    if f is None:
        if not _TRITON_OP.match(op):
            return None
        f = _triton(op)
        if len(_FORMULAS) < 100_000:  # remember the parsed kernel name
            _FORMULAS[op] = f
    try:
        return f(args)
    except (IndexError, ValueError, TypeError, ZeroDivisionError):
        return None
