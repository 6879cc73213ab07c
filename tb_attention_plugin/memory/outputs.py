"""The tensors an op returns, inferred from its recorded inputs (``op_outputs``), and whether an
allocation's size fits one of them (``size_match``): how an allocation is tied to the op and
output shape that made it."""

from __future__ import annotations

from math import prod
from typing import Optional

from ..roofline.cost import SDPA_SCHEMAS, broadcast_shapes, matmul_dims, sdpa_shapes
from ..trace.shapes import SCALAR_TYPE_CODES, Arg

CUDA = 1  # the profiler's Device Type of a CUDA GPU
CUDA_BLOCK = 512  # the CUDA caching allocator rounds requests up to 512 bytes
CUDA_SPLIT_SLACK = 1 << 20  # ... and may hand out a large-pool block up to 1 MiB larger

_SDPA_FWD = {k for k, s in SDPA_SCHEMAS.items() if not s.backward}
_FACTORY_SIZE_DTYPE = {  # op -> (index of the size list, index of the dtype code)
    "empty": (0, 1),
    "zeros": (0, 1),
    "ones": (0, 1),
    "rand": (0, 1),
    "randn": (0, 1),
    "empty_strided": (0, 2),
    "full": (0, 2),
    "new_empty": (1, 2),
    "new_zeros": (1, 2),
    "new_ones": (1, 2),
    "new_full": (1, 3),
    "new_empty_strided": (1, 3),
    "scalar_tensor": (None, 1),
}
_LIKE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "bernoulli"}
_SAME_SHAPE = {
    "clone",
    "contiguous",
    "copy",
    "_softmax",
    "softmax",
    "_safe_softmax",
    "_log_softmax",
    "log_softmax",
    "_masked_softmax",
    "native_dropout",
    "dropout",
    "feature_dropout",
    "_softmax_backward_data",
    "native_dropout_backward",
    "triu",
    "tril",
    "neg",
    "exp",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "rsqrt",
    "sqrt",
    "abs",
    "reciprocal",
    "log",
    "erf",
    "square",
    "sin",
    "cos",
    "_to_copy",
    "to",
    "type_as",
    "bernoulli_",
    "masked_fill",
    "where",
    "add",
    "sub",
    "mul",
    "div",
    "true_divide",
    "rsub",
    "maximum",
    "minimum",
    "pow",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "logical_and",
    "logical_or",
    "isneginf",
    "isinf",
    "isnan",
    "scaled_dot_product_attention",
}
_BOOL_OUT = {
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "logical_and",
    "logical_or",
    "isneginf",
    "isinf",
    "isnan",
}
# allocator primitives: never the op a tensor is attributed to
EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


# ------------------------------------------------------------------------------ helpers
def short_name(name: str) -> str:
    return name[6:] if name.startswith("aten::") else name


def ints_text(text: str) -> Optional[tuple]:
    """'[1, 2, 128]' -> (1, 2, 128)."""
    t = (text or "").strip()
    if not (t.startswith("[") and t.endswith("]")):
        return None
    body = t[1:-1].strip()
    if not body:
        return ()
    try:
        return tuple(int(x) for x in body.split(","))
    except ValueError:
        return None


def code_dtype(text: str) -> Optional[tuple[str, int]]:
    t = (text or "").strip()
    if t.lstrip("-").isdigit():
        return SCALAR_TYPE_CODES.get(int(t))
    return None


def int_value(args: list[Arg], i: int) -> Optional[int]:
    if i >= len(args):
        return None
    t = args[i].value.strip()
    try:
        return int(t)
    except ValueError:
        return None


def _resolve_view(shape: tuple, numel: int) -> Optional[tuple]:
    """reshape target with one -1 resolved."""
    if shape.count(-1) > 1:
        return None
    if -1 in shape:
        rest = prod(d for d in shape if d != -1)
        if rest <= 0 or numel % rest:
            return None
        shape = tuple(numel // rest if d == -1 else d for d in shape)
    return shape if prod(shape) == numel else None


def op_outputs(op: str, args: list[Arg]) -> list[tuple[tuple, Optional[str], int, str]]:
    """The tensors an op returns, inferred from its recorded inputs:
    ``[(shape, dtype, itemsize, label)]``. Empty when no rule applies.

    Rules: matmuls by their operands (``bmm [b,m,k]x[b,k,n] -> [b,m,n]``, ``matmul`` with
    broadcasting, ``linear [..,in]x[out,in] -> [..,out]``); SDPA forward -> ``out [B,H,Sq,Dv]``
    and an fp32 ``logsumexp``; elementwise, softmax, dropout (+ a bool mask), copies and casts ->
    the broadcast input shape (dtype from a ``dtype`` code where the schema has one); ``*_like``
    -> the input's shape; factories (``empty``, ``ones``...) -> their size list; ``cat``/``stack``
    of the tensor list; ``repeat_interleave`` along its dim; ``reshape``/``view`` -> the target.
    """
    s = short_name(op)
    t = [a for a in args if a.is_tensor]
    ts = [a.shape for a in t if a.shape is not None]  # their shapes (ts[i] is t[i]'s)
    out: list = []

    def add(shape, dtype=None, itemsize=0, label="output"):
        if shape is None:
            return
        if dtype is None and t:
            main = next((a for a in t if a.dtype != "bool"), t[0])
            dtype, itemsize = main.dtype, main.itemsize
        out.append((tuple(shape), dtype, itemsize, label))

    if s in ("mm", "bmm") and len(t) >= 2:
        a, b = ts[0], ts[1]
        if len(a) == len(b) and len(a) in (2, 3):
            add(a[:-1] + (b[-1],))
    elif s in ("addmm", "baddbmm") and len(t) >= 3:
        a, b = ts[1], ts[2]
        if len(a) == len(b) and len(a) in (2, 3):
            add(a[:-1] + (b[-1],), t[1].dtype, t[1].itemsize)
    elif s == "matmul" and len(t) >= 2:
        r = matmul_dims(ts[0], ts[1])
        if r is not None:
            add(r[4])
    elif s == "linear" and len(t) >= 2 and len(ts[1]) == 2 and ts[0]:
        add(ts[0][:-1] + (ts[1][0],))
    elif op in _SDPA_FWD or s in ("scaled_dot_product_attention", "_scaled_dot_product_attention_math"):
        sd = sdpa_shapes(op if op in SDPA_SCHEMAS else "aten::" + s, args)
        if sd:
            b, h, sq, sk, dv = sd["b"], sd["h"], sd["sq"], sd["sk"], sd["dv"]
            if sd["layout"] == "bhsd":
                add((b, h, sq, dv), sd["dtype"], sd["itemsize"], "attention output")
            else:
                add((b, sq, h, dv), sd["dtype"], sd["itemsize"], "attention output")
            add((b, h, sq), "fp32", 4, "logsumexp")
            add((b, h, (sq + 31) // 32 * 32), "fp32", 4, "logsumexp (padded)")
            if "math" in s:
                add((b, h, sq, sk), sd["dtype"], sd["itemsize"], "attention weights")
    elif op in SDPA_SCHEMAS:  # backward: dq, dk, dv
        sch = SDPA_SCHEMAS[op]
        qi = sch.q
        for lab, i in (("grad q", qi), ("grad k", qi + 1), ("grad v", qi + 2)):
            if i < len(args) and args[i].is_tensor:
                add(args[i].shape, args[i].dtype, args[i].itemsize, lab)
    elif s in _FACTORY_SIZE_DTYPE:
        si, di = _FACTORY_SIZE_DTYPE[s]
        size = () if si is None else (ints_text(args[si].value) if si < len(args) else None)
        dt = code_dtype(args[di].value) if di < len(args) else None
        if size is not None:
            if dt:
                add(size, dt[0], dt[1])
            elif s.startswith("new_") and t:
                add(size, t[0].dtype, t[0].itemsize)
            else:
                add(size, None, 0)
    elif s in _LIKE and t:
        dt = code_dtype(args[1].value) if len(args) > 1 else None
        add(ts[0], *(dt if dt else (t[0].dtype, t[0].itemsize)))
    elif s in ("cat", "stack", "concat"):
        lists = [a for a in args if a.shapes is not None]
        if lists and lists[0].shapes:
            shapes = list(lists[0].shapes)
            dim = int_value(args, 1) or 0
            it = t[0] if t else None
            out_dt: tuple[Optional[str], int] = (None, 0) if it is None else (it.dtype, it.itemsize)
            if s == "stack":
                base = shapes[0]
                d = dim % (len(base) + 1)
                add(base[:d] + (len(shapes),) + base[d:], *out_dt)
            else:
                shapes = [sh for sh in shapes if sh != (0,)]
                if shapes:
                    nd = len(shapes[0])
                    d = dim % nd if nd else 0
                    if all(len(sh) == nd for sh in shapes):
                        tot = sum(sh[d] for sh in shapes)
                        add(shapes[0][:d] + (tot,) + shapes[0][d + 1 :], *out_dt)
    elif s == "repeat_interleave" and t:
        rep = int_value(args, 1)
        rep_dim = int_value(args, 2)
        sh = ts[0]
        if rep and rep_dim is not None and sh:
            d = rep_dim % len(sh)
            add(sh[:d] + (sh[d] * rep,) + sh[d + 1 :])
    elif s == "repeat" and t:
        reps = ints_text(args[1].value) if len(args) > 1 else None
        sh = ts[0]
        if reps and len(reps) >= len(sh):
            sh2 = (1,) * (len(reps) - len(sh)) + sh
            add(tuple(a * b for a, b in zip(sh2, reps)))
    elif s in ("reshape", "view", "_unsafe_view", "_reshape_copy") and t:
        tgt = ints_text(args[1].value) if len(args) > 1 else None
        if tgt is not None:
            add(_resolve_view(tgt, t[0].numel))
    elif s == "flatten" and t:
        sh = ts[0]
        a0, a1 = int_value(args, 1), int_value(args, 2)
        if sh and a0 is not None and a1 is not None:
            a0, a1 = a0 % len(sh), a1 % len(sh)
            add(sh[:a0] + (prod(sh[a0 : a1 + 1]),) + sh[a1 + 1 :])
    elif s in _SAME_SHAPE and t:
        shape = broadcast_shapes(*ts) or ts[0]
        # the dtype code of softmax (argument 2) and of casts (argument 1)
        cast = (
            code_dtype(args[2].value)
            if s in ("softmax", "log_softmax") and len(args) > 2
            else code_dtype(args[1].value)
            if s in ("_to_copy", "to") and len(args) > 1
            else None
        )
        if s in _BOOL_OUT:
            add(shape, "bool", 1)
        elif s in ("_softmax", "_log_softmax") and len(args) > 2 and args[2].value.strip().lower() == "true":
            add(shape, "fp32", 4)
        elif s in ("softmax", "log_softmax") and cast:
            add(shape, *cast)
        elif s in ("_to_copy", "to") and cast:
            add(shape, *cast)
        elif s == "copy":
            add(shape)
        else:
            add(shape)
            if s in ("native_dropout",):
                add(shape, "bool", 1, "dropout mask")
    return out


def size_match(need: int, nbytes: int, device_type: int) -> Optional[str]:
    """Does an allocation of ``nbytes`` hold a tensor of ``need`` bytes?"""
    if need <= 0:
        return None
    if need == nbytes:
        return "exact"
    if device_type == CUDA:
        rounded = max(CUDA_BLOCK, -(-need // CUDA_BLOCK) * CUDA_BLOCK)
        if rounded == nbytes:
            return "exact"
        if rounded > CUDA_SPLIT_SLACK and rounded < nbytes <= rounded + CUDA_SPLIT_SLACK:
            return "block"
    return None
