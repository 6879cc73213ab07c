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
from typing import Any, Callable, Optional, Union

from ..trace.shapes import SCALAR_TYPE_CODES, Arg
from . import roles as R

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
    # how the op's work divides over the kernels it launches, by their role (roles.py): see role_bytes
    roles: Optional[RoleModel] = None
    fp32_on_tensor_cores: bool = False  # fp32 work this op's kernels do on TF32 tensor cores
    upper_bound: bool = False  # FLOPs/bytes are a dense upper bound (mask sparsity unknown)
    l2_hint: Optional[str] = None  # why some reads likely come from L2, not DRAM (see l2_reuse)
    l2_bytes: float = 0.0  # the bytes of ``reads`` that l2_hint says are likely L2 hits
    inputs: tuple[InputSig, ...] = ()  # (shape, dtype, bytes read) of each tensor read
    output: Optional[OutputSig] = None  # (shape, dtype) of the tensor written, when there is one


Formula = Callable[[list[Arg]], Optional[Cost]]


# -- cost by role -------------------------------------------------------------------------
# An op that launches several kernels is costed kernel by kernel by what each kernel does
# (roofline/roles.py names the roles): the op's formula leaves a role model on its Cost, and
# role_bytes gives the (bytes read, bytes written) of each role present. The op's FLOPs go to its
# MAIN kernels only. docs/cost-model.md, *Cost by role*, has the formulas.
@dataclass(frozen=True)
class SdpaRoles:
    """The sizes a fused attention op's roles move: rows are batch x sequence (packed tokens for
    varlen), heads h (query) and hk (key/value), head dims d and dv, the element size."""

    b: int
    h: int
    hk: int
    rows_q: int
    rows_k: int
    sq: int  # query rows per sequence (the longest, for varlen)
    d: int
    dv: int
    itemsize: int
    backward: bool
    lse: bool
    mask_bytes: float


@dataclass(frozen=True)
class GemmRoles:
    """A matmul's output size, for a split-K reduction's partial products."""

    out_elems: int
    out_itemsize: int


@dataclass(frozen=True)
class SortRoles:
    """A sort's keys (n of key_itemsize bytes) and the int64 indices sorted with them."""

    n: int
    key_itemsize: int
    value_itemsize: int = 8


RoleModel = Union[SdpaRoles, GemmRoles, SortRoles]
ACC_ITEMSIZE = 4  # fp32 accumulators and partial results (dQ, dK/dV, split-KV, split-K)
MIN_SPLITS = 2  # a split kernel writes at least two partial results


def role_bytes(c: Cost, present: frozenset[str], splits: int = MIN_SPLITS) -> dict[str, tuple[float, float]]:
    """(bytes read, bytes written) of each role in ``present`` that the op's role model
    describes (roles it does not describe are absent: their cost is unknown). ``splits``: the
    number of partial results of a split-KV attention (see sdpa_splits)."""
    m = c.roles
    if isinstance(m, SdpaRoles):
        return _sdpa_role_bytes(m, present, splits)
    if isinstance(m, GemmRoles):
        reads = float(c.reads if c.reads is not None else 0.0)
        writes = float(c.bytes or 0.0) - reads
        if R.SPLITK_REDUCE in present:
            partial = float(MIN_SPLITS * m.out_elems * ACC_ITEMSIZE)  # a lower bound: 2 splits
            return {R.MAIN: (reads, partial), R.SPLITK_REDUCE: (partial, writes)}
        return {R.MAIN: (reads, writes)}
    if isinstance(m, SortRoles):
        kv = float(m.n * (m.key_itemsize + m.value_itemsize))
        reads = float(c.reads if c.reads is not None else 0.0)
        hist = float(m.key_itemsize * 256 * 4)  # one 8-bit digit per key byte, 256 bins of 4 bytes
        return {
            R.SORT_PASS: (kv, kv),
            R.SORT_HISTOGRAM: (float(m.n * m.key_itemsize), hist),
            R.SORT_SCAN: (hist, hist),
            R.SORT_INIT: (0.0, float(m.n * m.value_itemsize)),
            R.MAIN: (reads, float(c.bytes or 0.0) - reads),
        }
    return {}


def _sdpa_role_bytes(m: SdpaRoles, present: frozenset[str], splits: int) -> dict[str, tuple[float, float]]:
    it = m.itemsize
    q = float(m.rows_q * m.h * m.d * it)
    k = float(m.rows_k * m.hk * m.d * it)
    v = float(m.rows_k * m.hk * m.dv * it)
    o = float(m.rows_q * m.h * m.dv * it)
    lse = float(m.rows_q * m.h * 4)
    out: dict[str, tuple[float, float]] = {}
    if not m.backward:
        final = o + (lse if m.lse else 0.0)
        if R.COMBINE in present:
            # each split writes an fp32 partial output and its LSE; the combine reads them all
            partial = float(max(splits, MIN_SPLITS) * m.rows_q * m.h * (m.dv + 1) * ACC_ITEMSIZE)
            out[R.MAIN] = (q + k + v + m.mask_bytes, partial)
            out[R.COMBINE] = (partial, final)
        else:
            out[R.MAIN] = (q + k + v + m.mask_bytes, final)
        return out
    acc = float(m.rows_q * m.h * m.d * ACC_ITEMSIZE)  # the fp32 dQ accumulator
    pre, post = R.DOT_DO_O in present, R.CONVERT_DQ in present
    reads = q + k + v + o + lse + m.mask_bytes  # Q, K, V, dO, LSE (+ mask)
    writes = 0.0
    if pre:
        out[R.DOT_DO_O] = (2.0 * o, lse + (acc if post else 0.0))  # O and dO -> delta (+ zeroed dQ accumulator)
        reads += lse  # delta
    else:
        reads += o  # O, to compute delta in the kernel
    if post:
        reads += acc  # dQ accumulated (atomically) into the fp32 buffer: read and written
        writes += acc
        out[R.CONVERT_DQ] = (acc, q)
    else:
        writes += q
    grouped = m.h != m.hk
    if R.CONVERT_DKV in present:
        acc_kv = float(m.rows_k * m.hk * (m.d + m.dv) * ACC_ITEMSIZE)
        reads += acc_kv
        writes += acc_kv
        out[R.CONVERT_DKV] = (acc_kv, k + v)
        if R.CLEAR_ACCUM in present:
            out[R.CLEAR_ACCUM] = (0.0, acc_kv)
    else:
        # with fewer key/value heads dK/dV are written per query head at the op's dtype, then summed
        # (cuDNN: its reduce_head kernels; FlashAttention-2: PyTorch's sum, an op of its own). At
        # fp32 the two reduce_head kernels of hf_llama_sdpa_fwdbwd would move 5 TB/s: not fp32.
        heads = m.h if grouped else m.hk
        dkv = float(m.rows_k * heads * (m.d + m.dv) * it)
        writes += dkv
        if R.REDUCE_HEAD in present:
            out[R.REDUCE_HEAD] = (dkv, k + v)
    out[R.MAIN] = (reads, writes)
    return out


def sdpa_splits(m: SdpaRoles, grid: tuple[int, int, int], splits_grid: Optional[str]) -> tuple[int, bool]:
    """The number of partial results of a split-KV attention: the grid dimension that holds it
    when the kernel's launch says (FlashAttention-2: ``y``), else an estimate from the grid —
    blocks / (batch x key/value heads x query tiles of 64 rows of the head group), at least 2.
    Returns (splits, exact)."""
    axis = {"x": 0, "y": 1, "z": 2}.get(splits_grid or "")
    if axis is not None and grid[axis] > 0:
        return max(1, grid[axis]), True
    blocks = grid[0] * grid[1] * grid[2]
    group = max(1, m.h // max(1, m.hk))
    tiles = max(1, -(-(m.sq * group) // 64))
    return max(MIN_SPLITS, blocks // max(1, m.b * m.hk * tiles)), False


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


def _streamed(
    ins: list[Arg],
    out_shape: Optional[tuple[int, ...]],
    out_dtype: Optional[str],
    out_itemsize: int,
    flops_per_elem: float = 0.0,
    engine: Optional[str] = None,
    extra_writes: float = 0.0,
    dtype: Optional[str] = None,
    detail: Optional[dict[str, Any]] = None,
    reads: Optional[float] = None,
) -> Cost:
    """The cost of an op that streams its inputs once and writes one output: every input read at
    the size its strides address (``reads`` overrides), the output (``out_shape`` at
    ``out_itemsize``; None: nothing written) plus ``extra_writes`` bytes written, and
    ``flops_per_elem`` estimated FLOPs per output element (per input element when there is no
    output). One place for the many one-pass ops: copies, casts, scans, dropout, norms, fills."""
    rd = _reads(ins) if reads is None else float(reads)
    n = prod(out_shape) if out_shape is not None else (ins[0].numel if ins else 0)
    wr = (n * out_itemsize if out_shape is not None else 0) + extra_writes
    flops = flops_per_elem * n
    return Cost(
        flops,
        rd + wr,
        dtype if dtype is not None else (ins[0].dtype if ins else out_dtype),
        engine if engine is not None else (VECTOR if flops_per_elem > 0 else NONE),
        flops_estimated=flops_per_elem > 0,
        reads=rd,
        inputs=_sigs(ins),
        output=(tuple(out_shape), out_dtype) if out_shape is not None else None,
        detail=detail or {},
    )


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
        roles=GemmRoles(prod(out_shape), it),
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
    cu_seq: Optional[int] = None  # index of cum_seq_q (cum_seq_k follows): varlen / jagged when a tensor
    max_seq: Optional[int] = None  # index of max_q (max_k follows)
    # is_causal aligns the mask bottom-right (query i of Sq sees keys 0..i+Sk-Sq): FlashAttention-2's
    # causal, which the CUDA flash ops keep. PyTorch sends only bottom-right causal to them when
    # Sq != Sk (sdp_utils refuses top-left is_causal there; torch.nn.attention.bias.causal_lower_right
    # calls the flash op with is_causal=True: "for this particular op it means lower right").
    causal_bottom_right: bool = False


# Positions follow native_functions.yaml; each value is validated when read.
SDPA_SCHEMAS: dict[str, SdpaSchema] = {
    "aten::scaled_dot_product_attention": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4, lse_out=False),
    "aten::_scaled_dot_product_attention_math": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4, lse_out=False),
    "aten::_scaled_dot_product_flash_attention": SdpaSchema(0, "bhsd", 4, dropout=3, causal_bottom_right=True),
    "aten::_scaled_dot_product_flash_attention_for_cpu": SdpaSchema(0, "bhsd", 4, dropout=3),
    "aten::_scaled_dot_product_efficient_attention": SdpaSchema(0, "bhsd", 6, mask=3, dropout=5),
    "aten::_scaled_dot_product_cudnn_attention": SdpaSchema(0, "bhsd", 6, mask=3, dropout=5),
    "aten::_scaled_dot_product_fused_attention_overrideable": SdpaSchema(0, "bhsd", 5, mask=3, dropout=4),
    "aten::_flash_attention_forward": SdpaSchema(
        0, "bshd", 8, dropout=7, cu_seq=3, max_seq=5, causal_bottom_right=True
    ),
    "aten::_efficient_attention_forward": SdpaSchema(
        0, "bshd", None, mask_type=9, mask=3, dropout=8, cu_seq=4, max_seq=6
    ),
    "aten::_cudnn_attention_forward": SdpaSchema(0, "bhsd", 10, mask=3, dropout=9, cu_seq=4, max_seq=6),
    "aten::_scaled_dot_product_flash_attention_backward": SdpaSchema(
        1, "bhsd", 11, backward=True, dropout=10, causal_bottom_right=True
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": SdpaSchema(1, "bhsd", 6, backward=True, dropout=5),
    "aten::_flash_attention_backward": SdpaSchema(
        1, "bshd", 11, backward=True, dropout=10, cu_seq=6, max_seq=8, causal_bottom_right=True
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": SdpaSchema(
        1, "bhsd", 11, backward=True, mask=4, dropout=9
    ),
    "aten::_efficient_attention_backward": SdpaSchema(
        1, "bshd", None, mask_type=14, backward=True, mask=4, dropout=11, cu_seq=6, max_seq=8
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": SdpaSchema(1, "bhsd", 14, backward=True, mask=8, dropout=13),
    "aten::_cudnn_attention_backward": SdpaSchema(
        1, "bhsd", 14, backward=True, mask=8, dropout=13, cu_seq=9, max_seq=11
    ),
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


def _varlen(sch: SdpaSchema, args: list[Arg]) -> Optional[dict[str, Any]]:
    """Varlen / jagged attention (nested tensors with ``layout=torch.jagged``, flash ``cu_seqlens``):
    the query and keys are packed [total, H, D] (efficient attention: [1, total, H, D]) and the
    sequences' offsets ``cum_seq_q``/``cum_seq_k`` are int tensors of B+1 entries. The profiler
    records their shapes, not their values; ``max_q``/``max_k`` are recorded ints."""
    i = sch.cu_seq
    if i is None or i + 1 >= len(args) or not args[i].is_tensor or len(args[i].dims) != 1:
        return None
    n = args[i].dims[0] - 1
    if n < 1:
        return None
    mq = _int_value(args, sch.max_seq) if sch.max_seq is not None else None
    mk = _int_value(args, sch.max_seq + 1) if sch.max_seq is not None else None
    return {"batch": n, "max_q": mq if mq and mq > 0 else None, "max_k": mk if mk and mk > 0 else None}


def sdpa_shapes(op: str, args: list[Arg]) -> Optional[dict[str, Any]]:
    """B, H (query heads), Hk (key/value heads), Sq, Sk, D, Dv, dtype, causal of an SDPA op. A
    varlen call is described as its packed tensors (b = 1, sq/sk = the total tokens) with
    ``varlen`` = {batch, max_q, max_k}."""
    sch = SDPA_SCHEMAS.get(op)
    if sch is None:
        return None
    qi = sch.q
    if len(args) < qi + 3:
        return None
    q, k, v = args[qi], args[qi + 1], args[qi + 2]
    if not (q.is_tensor and k.is_tensor and v.is_tensor):
        return None
    vl = _varlen(sch, args)
    qd, kd, vd = q.dims, k.dims, v.dims
    if vl is not None and len(qd) == 3 and len(kd) == 3 and len(vd) == 3:  # packed [total, H, D]
        qd, kd, vd = (1,) + qd, (1,) + kd, (1,) + vd
        layout = "bshd"
    elif vl is not None and len(qd) == 4 and qd[0] == 1 and sch.layout == "bshd":
        layout = "bshd"
    elif vl is None and len(qd) == 4 and len(kd) == 4 and len(vd) == 4:
        layout = sch.layout
    else:
        return None
    if len(qd) != 4 or len(kd) != 4 or len(vd) != 4:
        return None
    if layout == "bhsd":
        b, h, sq, d = qd
        _, hk, sk, _ = kd
    else:
        b, sq, h, d = qd
        _, sk, hk, _ = kd
    dv = vd[3]
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
            bottom_right = c and sch.causal_bottom_right and sq != sk  # square: the same mask either way
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
        layout=layout,
        varlen=vl,
    )


def sum_squares_bounds(total: int, longest: int, n: int, shortest: Optional[int] = None) -> tuple[int, int]:
    """Bounds on Σᵢ Lᵢ² for ``n`` sequences of ``total`` tokens, the longest ``longest``: what a
    varlen call's recorded inputs (packed length, cu_seqlens' size, max_seqlen) allow. Lower:
    one sequence of ``longest`` and the rest equal; upper: as many of ``longest`` as fit.
    ``shortest`` (a jagged nested tensor's min_seqlen, where the trace shows it) narrows both:
    one sequence of each, the other n − 2 between them — equal (lower), or as many at
    ``longest`` and the rest at ``shortest`` as the total allows (upper: Σ L² is convex)."""
    if n <= 0 or total <= 0 or longest <= 0:
        return 0, 0
    if shortest is not None and n >= 2 and 0 < shortest <= longest:
        m, rest = n - 2, total - longest - shortest
        fixed = longest * longest + shortest * shortest
        if m == 0 and rest == 0:
            return fixed, fixed
        if m > 0 and m * shortest <= rest <= m * longest:
            q, r = divmod(rest, m)
            low = fixed + r * (q + 1) ** 2 + (m - r) * q * q
            if longest == shortest:
                return low, low
            k = min((rest - m * shortest) // (longest - shortest), m)
            extra = rest - k * longest - (m - k) * shortest  # over shortest, for one sequence
            high = fixed + k * longest * longest
            if k < m:
                high += (m - k - 1) * shortest * shortest + (shortest + extra) ** 2
            return min(low, high), high
    longest = min(longest, total)
    rest = total - longest
    low = longest * longest + (rest * rest) // (n - 1) if n > 1 else longest * longest
    if n == 1:
        low = total * total
    full, rem = divmod(total, longest)
    high = full * longest * longest + rem * rem
    return min(low, high), high


def varlen_pairs(
    n: int, tq: int, tk: int, max_q: Optional[int], max_k: Optional[int], causal: bool
) -> tuple[float, float, bool]:
    """(upper, lower, exact) bounds on the (query, key) pairs Σᵢ Lqᵢ·Lkᵢ (causal: the kept ones)
    of ``n`` packed sequences of ``tq``/``tk`` tokens in all, at most ``max_q``/``max_k`` each,
    when only these totals are known (the offsets' values are not in the trace).

    Self-attention (the same totals and maxima, the usual jagged case; Lqᵢ = Lkᵢ): Σ Lᵢ² is
    largest with as many sequences at the maximum as the total allows, smallest with equal
    lengths (T²/n, and at least max² + (T − max)²/(n − 1) since one sequence has the maximum);
    causal keeps (Σ Lᵢ² + T)/2 pairs. Otherwise Σ Lqᵢ·Lkᵢ <= min(Tq·max_k, Tk·max_q, Tq·Tk),
    with no useful lower bound. One sequence, or all at the maximum length, is exact."""
    if n <= 1:
        pairs = float(tq) * tk
        if causal:
            pairs = pairs * causal_fraction(tq, tk, bottom_right=True)
        return pairs, pairs, True
    if max_q is not None and max_k is not None and max_q * n == tq and max_k * n == tk:
        pairs = float(n) * max_q * max_k
        if causal:
            pairs = pairs * causal_fraction(max_q, max_k, bottom_right=True)
        return pairs, pairs, True
    if tq == tk and max_q is not None and max_q == max_k:
        t = tq
        lo_i, hi_i = sum_squares_bounds(t, max_q, n)
        lo, hi = float(lo_i), float(hi_i)
        if causal:
            hi, lo = (hi + t) / 2.0, (lo + t) / 2.0
        return hi, min(lo, hi), False
    hi = float(tq) * tk
    if max_k is not None:
        hi = min(hi, float(tq) * max_k)
    if max_q is not None:
        hi = min(hi, float(tk) * max_q)
    return hi, 0.0, False


def _sdpa(op: str) -> Formula:
    def cost(args: list[Arg]) -> Optional[Cost]:
        s = sdpa_shapes(op, args)
        if s is None:
            return None
        b, h, hk, sq, sk, d, dv, it = s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"], s["itemsize"]
        # matmuls per (query, key) pair: forward QK^T and PV; backward 5 (2.5x forward)
        per_pair = (2.0 * d * 3 + 2.0 * dv * 2) if s["backward"] else (2.0 * d + 2.0 * dv)
        vl = s["varlen"]
        detail = {k2: s[k2] for k2 in ("b", "h", "hk", "sq", "sk", "d", "dv", "causal", "layout")}
        upper = False
        if vl is not None:
            hi, lo, exact = varlen_pairs(vl["batch"], sq, sk, vl["max_q"], vl["max_k"], s["causal"])
            dense_hi, _, _ = varlen_pairs(vl["batch"], sq, sk, vl["max_q"], vl["max_k"], False)
            flops, dense = per_pair * b * h * hi, per_pair * b * h * dense_hi
            frac = hi / dense_hi if dense_hi > 0 else 1.0
            detail["varlen"] = dict(vl, total_q=sq, total_k=sk, flops_exact=exact)
            if not exact:
                upper = True
                detail["varlen"]["flops_lower"] = per_pair * b * h * lo
                detail["varlen"]["note"] = (
                    "per-sequence lengths are not in the trace (the offsets' values are not recorded): "
                    "FLOPs are an upper bound from the totals and the longest sequence"
                )
        else:
            dense = per_pair * b * h * sq * sk
            frac = causal_fraction(sq, sk, s["bottom_right"]) if s["causal"] else 1.0
            flops = dense * frac
        q_b, k_b, v_b = b * h * sq * d * it, b * hk * sk * d * it, b * hk * sk * dv * it
        o_b = b * h * sq * dv * it
        lse_b = b * h * sq * 4 if s["lse"] else 0
        if s["backward"]:
            # read q, k, v, out, grad_out, logsumexp; write dq, dk, dv
            reads = q_b + k_b + v_b + 2 * o_b + b * h * sq * 4
            nbytes = reads + q_b + k_b + v_b
        else:
            reads = q_b + k_b + v_b
            nbytes = reads + o_b + lse_b
        nbytes += s["mask_bytes"]
        reads += s["mask_bytes"]
        detail["causal_fraction"] = round(frac, 6)
        if not s["causal_known"]:
            detail["causal"] = None
        seq_q = vl["max_q"] if vl is not None and vl["max_q"] else sq
        roles = SdpaRoles(
            b=vl["batch"] if vl is not None else b,
            h=h,
            hk=hk,
            rows_q=b * sq,
            rows_k=b * sk,
            sq=seq_q,
            d=d,
            dv=dv,
            itemsize=it,
            backward=s["backward"],
            lse=s["lse"],
            mask_bytes=float(s["mask_bytes"]),
        )
        # fp32 inputs: the only fused backend that takes them (CUTLASS memory-efficient attention)
        # runs them on TF32 tensor cores (seen in Nsight Compute: tensor pipe active, FMA pipe idle)
        return Cost(
            flops,
            float(nbytes),
            s["dtype"],
            MATRIX,
            flops_dense=dense,
            detail=detail,
            reads=float(reads),
            roles=roles if op not in COMPOSITE else None,
            fp32_on_tensor_cores=op not in COMPOSITE,
            upper_bound=upper,
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
    """native_dropout / dropout(input, p, train): read x, write the output and (training) a bool
    mask; 2 FLOPs per element (random number, select) when training, none in eval or at p = 0."""
    ins, _ = _split(args, 3)
    if not ins:
        return None
    x = ins[0]
    p = _float_value(args, 1)
    train = _bool_value(args, 2)
    if train is False or p == 0.0:
        return _streamed([x], x.dims, x.dtype, x.itemsize, engine=VECTOR)
    return _streamed([x], x.dims, x.dtype, x.itemsize, flops_per_elem=2.0, extra_writes=float(x.numel))


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
    """clone / contiguous / roll / flip...: read the tensor (what its strides address), write it whole."""
    ins, outs = _split(args, 2)
    if not ins:
        return None
    x = ins[0]
    return _streamed([x], x.dims, x.dtype, x.itemsize)


def _triangle(upper: bool, inplace: bool) -> Formula:
    """triu / tril(self, diagonal): PyTorch's triu_tril_kernel loads only the elements it keeps
    and writes every element (zeros elsewhere); in place it writes only the zeros. Kept
    elements of an [..., R, C] matrix: Σᵢ clamp(C − i − k, 0, C) for triu (columns j >= i + k),
    the rest for tril with k + 1."""

    def cost(args: list[Arg]) -> Optional[Cost]:
        ins, _ = _split(args, 1)
        if not ins or len(ins[0].dims) < 2:
            return None
        x = ins[0]
        k = _int_value(args, 1, 0) or 0
        r, c = x.dims[-2], x.dims[-1]
        if r <= 0 or c <= 0:
            return _streamed([x], x.dims, x.dtype, x.itemsize)
        upper_kept = sum(min(max(c - i - k, 0), c) for i in range(r)) if r <= 65536 else r * c // 2
        if not upper:  # tril keeps j <= i + k: the complement of triu at k + 1
            upper_kept = r * c - sum(min(max(c - i - k - 1, 0), c) for i in range(r)) if r <= 65536 else r * c // 2
        frac = upper_kept / float(r * c)
        kept = x.numel * frac
        if inplace:
            return _streamed([x], None, x.dtype, x.itemsize, extra_writes=(x.numel - kept) * x.itemsize, reads=0.0)
        return _streamed([x], x.dims, x.dtype, x.itemsize, reads=min(kept * x.itemsize, float(x.read_bytes)))

    return cost


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
    return _streamed([x], x.dims, out_dtype, out_size, dtype=x.dtype, detail={"out_itemsize": out_size})


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
    return _streamed([], t[0].dims, t[0].dtype, t[0].itemsize, dtype=t[0].dtype, reads=0.0)


# Sums of bool / narrow integers accumulate in int64: PyTorch casts the input to an int64 copy
# (its own copy_ kernel) and the reduction reads that (Nsight Compute: a bool [4.2 M] sum reads
# 34 MB, FlexAttention's block-mask construction).
_INT64_ACCUMULATED = {"bool", "uint8", "int8", "int16", "int32"}


def _accumulated_reads(x: Arg, args: list[Arg], dtype_at: Optional[int]) -> float:
    """Bytes a sum/cumsum kernel reads: its input, or the int64 copy of a bool or narrow-integer
    input when no dtype was asked for (``dtype_at``: the index of the dtype argument)."""
    asked = dtype_at is not None and dtype_at < len(args) and args[dtype_at].value.strip() not in ("", "None")
    if x.dtype in _INT64_ACCUMULATED and not asked:
        return float(x.numel * INDEX_ITEMSIZE)
    return float(x.read_bytes)


def _scan(args: list[Arg]) -> Optional[Cost]:
    """cumsum / cumprod(self, dim, dtype): read and write every element (int64 for bool and
    narrow integers, which are cast first)."""
    ins, _ = _split(args, 3)
    if not ins:
        return None
    x = ins[0]
    rd = _accumulated_reads(x, args, 2)
    it = INDEX_ITEMSIZE if rd != x.read_bytes and x.dtype in _INT64_ACCUMULATED else x.itemsize
    return _streamed([x], x.dims, x.dtype, it, flops_per_elem=1.0, reads=rd)


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
    heads_ok = q.dims[0] == k.dims[0] == v.dims[0] and k.dims[1] == v.dims[1] > 0 and q.dims[1] % k.dims[1] == 0
    if not heads_ok:
        return None
    if q.dims[3] == k.dims[3] and k.dims[2] == v.dims[2]:
        return q, k, v
    # FP8 Flex: Inductor hands the template Vᵀ ([B, Hk, Dv, Skv], from a clone_transpose before it:
    # e4m3 wgmma wants both operands K-major, and PV reduces over the keys); read as [B, Hk, Skv, Dv]
    if q.dims[3] == k.dims[3] and k.dims[2] == v.dims[3]:
        st = v.strides
        vt = replace(
            v, shape=(v.dims[0], v.dims[1], v.dims[3], v.dims[2]), strides=(st[0], st[1], st[3], st[2]) if st else st
        )
        return q, k, vt
    return None


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


def _iteration_space(args: list[Arg], tensors: list[Arg], reduction: bool) -> tuple[int, Optional[int], bool]:
    """(elements of the kernel's iteration space, elements of a reduction's result or None, known).
    Inductor passes the numels last (``xnumel``; ``ynumel, xnumel`` tiled; ``xnumel, rnumel`` for
    a reduction), recorded as Concrete Inputs; two trailing numels whose product is a buffer's
    size are one 2-D space. Without them: the largest buffer (a scatter target may be larger)."""
    vals = [int(a.value) for a in args if not a.is_tensor and a.value.strip().isdigit()]
    sizes = {a.numel for a in tensors}
    if vals:
        last = vals[-1]
        if len(vals) >= 2 and vals[-1] * vals[-2] in sizes:
            return vals[-1] * vals[-2], (vals[-2] if reduction else None), True
        if last in sizes or last <= max(sizes, default=0):
            return last, None, True
    return max(sizes, default=0), None, False


def _triton(name: str) -> Formula:
    """An Inductor-generated Triton kernel (torch.compile). Its recorded tensors are the kernel's
    buffers in Inductor's signature order — in-place buffers (read and written) first, then
    inputs, then outputs — and its numels are the trailing scalars. Bytes: the last buffer is an
    output when it can hold a result (the size of the iteration space, or of a reduction's result);
    the first is read and written too when it can hold one and no later buffer of its size and
    dtype is written (Inductor reuses a dead input's buffer for a result of the same layout); a
    single buffer is read and written (written only when the kernel generates values: ones,
    arange...). No buffer moves more elements than the iteration space has (a one-position
    KV-cache ``index_copy`` writes that position, not the cache). FLOPs: per element of the
    iteration space, summed over the ops the name lists (``fused_ops``; estimates). Matmul
    templates (``triton_tem_fused_mm``/``bmm``) count 2·M·N·K from their operands; FlexAttention
    templates are dense upper bounds."""
    flex = _flex(backward="backward" in name)
    named_flex = bool(_FLEX_TEMPLATE.search(name))
    ops, unknown = fused_ops(name)
    template = name.startswith("triton_tem")
    reduction = name.startswith(("triton_red", "triton_per"))
    per_elem = sum(_FUSED_OP_FLOPS.get(o, 0.0) for o in set(ops) if not (_SOFTMAXES & set(ops) and o in _SOFTMAX_PARTS))
    generator = bool(_GENERATORS & set(ops))

    def cost(args: list[Arg]) -> Optional[Cost]:
        t = _tensors(args)
        if not t:
            return None
        if template and (named_flex or looks_like_flex(args)):
            return flex(args)
        if template:
            out = t[-1]
            reads = _reads(t[:-1])
            nbytes = reads + out.nbytes
            r = matmul_dims(t[0].dims, t[1].dims) if len(t) >= 3 else None
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
        n, red_out, known = _iteration_space(args, t, reduction)

        def holds_result(a: Arg) -> bool:
            return a.numel == n or (red_out is not None and a.numel == red_out) or (a.numel > n > 0)

        first = t[0]
        if len(t) == 1:  # one buffer: updated in place, or written with generated values
            read_args, written = ([] if generator else [first]), [first]
        else:
            last_out = holds_result(t[-1])
            first_inplace = holds_result(first) and (
                not last_out or not any((a.numel, a.dtype) == (first.numel, first.dtype) for a in t[1:])
            )
            read_args = t[:-1] if last_out else t
            written = ([first] if first_inplace else []) + ([t[-1]] if last_out else [])
        cap = n if n > 0 else None

        def touched(a: Arg, nbytes_: int) -> float:
            return float(min(nbytes_, cap * a.itemsize) if cap is not None else nbytes_)

        reads = sum(touched(a, a.read_bytes) for a in read_args)
        writes = sum(touched(a, a.nbytes) for a in written)
        detail: dict[str, Any] = {"fused_ops": ops, "elements": n}
        if unknown:
            detail["not_counted"] = unknown
        if not known:
            detail["elements_from"] = "largest buffer (numels not recorded)"
        return Cost(
            float(per_elem * n),
            reads + writes,
            t[0].dtype,
            VECTOR,
            flops_estimated=per_elem > 0,
            reads=reads,
            detail=detail,
            inputs=_sigs(read_args),
            output=(written[-1].dims, written[-1].dtype) if written else None,
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
            # a radix sort (long rows) runs one pass over keys and indices per digit
            roles=SortRoles(x.numel, x.itemsize, INDEX_ITEMSIZE) if kind != "topk" else None,
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
    """amax / mean / all...: the input read once; the (small) result is not counted."""
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    return _streamed([x], None, x.dtype, x.itemsize, flops_per_elem=1.0)


def _sum(args: list[Arg]) -> Optional[Cost]:
    """sum(self, dim, keepdim, *, dtype) / sum(self, *, dtype): as a reduction, reading the int64
    copy of a bool or narrow-integer input."""
    t = _tensors(args)
    if not t:
        return None
    x = t[0]
    dtype_at = 3 if len(args) >= 4 else 1
    return _streamed([x], None, x.dtype, x.itemsize, flops_per_elem=1.0, reads=_accumulated_reads(x, args, dtype_at))


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

# Ops Inductor names in fused kernels besides the eager elementwise ones above.
_FUSED_ARITHMETIC = ("masked_fill", "where", "clamp", "addcmul", "addcdiv", "lerp", "erfinv", "log1p", "expm1")
_REDUCTIONS_FOR_FUSED = (
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "any",
    "all",
    "argmax",
    "argmin",
    "cumsum",
)
_MOVEMENT_FOR_FUSED = (
    "view",
    "_unsafe_view",
    "reshape",
    "clone",
    "copy",
    "copy_",
    "_to_copy",
    "transpose",
    "permute",
    "expand",
    "slice",
    "slice_scatter",
    "select",
    "select_scatter",
    "unsqueeze",
    "squeeze",
    "t",
    "cat",
    "stack",
    "split",
    "split_with_sizes",
    "unbind",
    "constant_pad_nd",
    "index",
    "index_select",
    "gather",
    "embedding",
    "index_put",
    "index_copy",
    "scatter",
    "scatter_add",
    "masked_scatter",
    "alias",
    "lift_fresh",
    "detach",
    "repeat",
    "repeat_interleave",
    "flip",
    "roll",
    "triu",
    "tril",
    "sort",
    "topk",
    "bitwise_not",
    "logical_not",
    "inductor_seeds",
    "inductor_lookup_seed",
    "inductor_random",
    "bernoulli",
    "convert_element_type",
    "unfold",
    "as_strided",
    "narrow",
    "_unsafe_index",
    "_unsafe_index_put",
    "iota",
)
# FLOPs per element of the iteration space of each op Inductor may name in a fused kernel
# (``triton_red_fused__softmax_div_exp_..._3``): the same per-element estimates as the eager
# formulas; data movement, views, casts, index arithmetic and random numbers count none. The
# parts a softmax decomposes into (amax, sub, exp, sum, div, Inductor's online-softmax helper)
# are counted as the softmax when it is named too.
_FUSED_OP_FLOPS: dict[str, float] = {
    **{op: 1.0 for op in _ELEMENTWISE_BINARY + _ELEMENTWISE_UNARY + _COMPARISONS_BINARY + _COMPARISONS_UNARY},
    **{op: 1.0 for op in _ACTIVATION_BACKWARD + _FUSED_ARITHMETIC},
    **{op: 1.0 for op in _REDUCTIONS_FOR_FUSED},
    "_softmax": 5.0,
    "softmax": 5.0,
    "_log_softmax": 5.0,
    "_safe_softmax": 5.0,
    "prepare_softmax_online": 3.0,
    "_softmax_backward_data": 4.0,
    "_log_softmax_backward_data": 4.0,
    "native_dropout": 2.0,
    "native_dropout_backward": 1.0,
    "native_layer_norm": 5.0,
    "_fused_rms_norm": 5.0,
    "native_layer_norm_backward": 8.0,
    "var_mean": 2.0,
    **{op: 0.0 for op in _MOVEMENT_FOR_FUSED},
}
_SOFTMAX_PARTS = frozenset({"amax", "sub", "exp", "sum", "div", "prepare_softmax_online"})
_SOFTMAXES = frozenset({"_softmax", "softmax", "_log_softmax", "_safe_softmax"})
_GENERATORS = frozenset(
    {"ones", "zeros", "full", "arange", "iota", "empty", "new_zeros", "new_ones", "new_full", "new_empty"}
    | {"scalar_tensor", "rand", "randn", "fill", "zero", "full_like", "zeros_like", "ones_like", "empty_like"}
)
_FUSED_VOCAB = sorted(set(_FUSED_OP_FLOPS) | _GENERATORS, key=len, reverse=True)
_TRITON_PREFIX = re.compile(r"^triton_(poi|red|per|tem|for|tma|mm|bmm)_(fused_?)?")


def fused_ops(name: str) -> tuple[list[str], list[str]]:
    """The ops an Inductor kernel name lists (``triton_red_fused__softmax_div_exp_..._3``), matched
    against the known op names longest first (they contain underscores: ``masked_fill``,
    ``native_dropout``, ``_softmax``), and the parts of the name that are none of them."""
    rest = re.sub(r"_\d+$", "", _TRITON_PREFIX.sub("", name))
    ops: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(rest):
        for w in _FUSED_VOCAB:
            if rest.startswith(w, i) and (i + len(w) == len(rest) or rest[i + len(w)] == "_"):
                ops.append(w)
                i += len(w) + 1
                break
        else:
            j = rest.find("_", i + 1)
            j = len(rest) if j < 0 else j
            if rest[i:j].strip("_"):
                unknown.append(rest[i:j].strip("_"))
            i = j + 1
    return ops, unknown


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
    "aten::triu": _triangle(True, False),
    "aten::tril": _triangle(False, False),
    "aten::triu_": _triangle(True, True),
    "aten::tril_": _triangle(False, True),
    "aten::roll": _unary_copy,
    "aten::flip": _unary_copy,
    "aten::_to_copy": _to_copy,
    "aten::cat": _cat,
    "aten::fill_": _fill,
    "aten::zero_": _fill,
    "aten::sum": _sum,
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
