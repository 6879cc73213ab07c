"""Attention's memory and data movement: the ``memory`` block of a report.

Three parts, documented field by field in docs/report-schema.md:

* **Allocations** (``devices``), from the ``[memory]`` instant events that
  ``torch.profiler.profile(profile_memory=True)`` records (``Addr``, ``Bytes`` (+ alloc, − free),
  ``Total Allocated``, ``Total Reserved``, ``Device Type``, ``Device Id``). Every event is
  attributed to the innermost CPU range on its thread at its timestamp, and through it to the
  attention call and phase the tagger gave that range (backward ranges carry the forward op's
  call and phase, like kernels). Figures are kept per device: ``Device Type`` 1 (CUDA) entries
  are the GPU figures; CPU (type 0) events are reported as a device of their own and never mixed
  into a GPU's numbers. Each allocation is matched to the op that made it and that op's output
  shape (see :func:`op_outputs`), which says what held the peak (e.g. ``[B, H, S, S]`` scores).
* **Footprint** (``footprint``), from shapes alone: K/V bytes of every attention call (the
  SDPA op's inputs, or the K/V operands of the QK^T / PV matmuls of eager attention) — what a KV
  cache holds at these shapes — and what MHA, GQA, MQA and an MLA-style latent cache would
  hold instead; the activations of a fused kernel (q, k, v, out, logsumexp) vs the
  score-sized tensors the unfused path materialises.
* **Data movement** (``data_movement``, ``flags``): copies (``copy_``, ``contiguous``,
  ``clone``, ``_to_copy``, ``cat``, materialised transposes...), ``aten::empty*`` calls,
  memcpy/memset activities and host<->device transfers inside attention, with time and bytes;
  ``flags`` name the repeated or avoidable ones, each with the evidence that triggered it.
"""
from __future__ import annotations

import math
import re
from math import prod
from typing import Optional

import numpy as np

from .attention import patterns as P
from .attention.tagger import call_numbers
from .formats import text_table
from .roofline.cost import SDPA_SCHEMAS, broadcast_shapes, matmul_dims, op_cost, sdpa_shapes
from .trace.correlate import Links
from .trace.records import MEMCPY, MEMSET, OP, Trace
from .trace.shapes import DTYPES, SCALAR_TYPE_CODES, Arg, parse_args

DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 20: "privateuse1"}
CUDA = 1
# MLA (DeepSeek-V2): per token and layer a 512-dim compressed KV latent plus a 64-dim decoupled
# RoPE key, shared by all heads, stored at the K/V dtype.
MLA_LATENT_DIM = 512
MLA_ROPE_DIM = 64
GQA_GROUPS = 8                 # the GQA alternative keeps 8 KV heads (Llama-2/3 70B style)
CURVE_POINTS = 1200            # the allocation curve is downsampled to about this many points
MAX_SPANS = 4000
MAX_HELD = 12
MAX_INFER = 60000              # allocations whose maker op is looked up (largest first)
CUDA_BLOCK = 512               # the CUDA caching allocator rounds requests up to 512 bytes
CUDA_SPLIT_SLACK = 1 << 20     # ... and may hand out a large-pool block up to 1 MiB larger
HOW_TO_RECORD = ("profile with torch.profiler.profile(..., profile_memory=True, record_shapes=True, "
                 "with_stack=True): allocations are then recorded as [memory] events")

_SDPA_FWD = {k for k, s in SDPA_SCHEMAS.items() if not s.backward}
_FACTORY_SIZE_DTYPE = {   # op -> (index of the size list, index of the dtype code)
    "empty": (0, 1), "zeros": (0, 1), "ones": (0, 1), "rand": (0, 1), "randn": (0, 1),
    "empty_strided": (0, 2), "full": (0, 2), "new_empty": (1, 2), "new_zeros": (1, 2),
    "new_ones": (1, 2), "new_full": (1, 3), "new_empty_strided": (1, 3), "scalar_tensor": (None, 1),
}
_LIKE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
         "randint_like", "bernoulli"}
_SAME_SHAPE = {"clone", "contiguous", "copy", "_softmax", "softmax", "_safe_softmax", "_log_softmax",
               "log_softmax", "_masked_softmax", "native_dropout", "dropout", "feature_dropout",
               "_softmax_backward_data", "native_dropout_backward", "triu", "tril", "neg", "exp",
               "relu", "gelu", "silu", "sigmoid", "tanh", "rsqrt", "sqrt", "abs", "reciprocal",
               "log", "erf", "square", "sin", "cos", "_to_copy", "to", "type_as", "bernoulli_",
               "masked_fill", "where", "add", "sub", "mul", "div", "true_divide", "rsub", "maximum",
               "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
               "logical_or", "isneginf", "isinf", "isnan", "scaled_dot_product_attention"}
_BOOL_OUT = {"eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
             "isneginf", "isinf", "isnan"}
# copies that always move bytes (a "leaf" copy), and thin wrappers that are the user-visible op
_COPY_LEAF = {"copy_", "clone", "_to_copy", "cat", "stack", "repeat_interleave", "repeat",
              "index_select", "gather", "_unsafe_index", "index_copy_", "index_copy", "index_put_",
              "_index_put_impl_", "slice_scatter", "select_scatter"}
_COPY_WRAP = {"contiguous", "reshape", "to", "clone", "copy_", "_to_copy", "type_as", "flatten",
              "repeat_interleave", "cat", "stack", "repeat", "index_copy_", "index_copy", "index_put_",
              "_reshape_copy", "view_as", "expand_as", "float", "half", "bfloat16"}
_EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_SYNC_OPS = {"item", "_local_scalar_dense", "nonzero", "tolist"}
_SEQ_DIM = 2   # [B, H, S, D]: the dimension a KV cache grows along


# ------------------------------------------------------------------------------ helpers
def _short(name: str) -> str:
    return name[6:] if name.startswith("aten::") else name


def _ints_text(text: str) -> Optional[tuple]:
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


def _code_dtype(text: str) -> Optional[tuple[str, int]]:
    t = (text or "").strip()
    if t.lstrip("-").isdigit():
        return SCALAR_TYPE_CODES.get(int(t))
    return None


def _int_value(args: list[Arg], i: int) -> Optional[int]:
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


def _sig(x) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.4g}") if x else 0.0


def _r(x, nd=3) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if math.isfinite(x) else None


def fmt_bytes(b) -> str:
    """Binary units, as memory is usually read (GiB, MiB)."""
    if b is None:
        return "–"
    b = float(b)
    sign = "-" if b < 0 else ""
    b = abs(b)
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or u == "TiB":
            return f"{sign}{b:.0f} {u}" if u == "B" else f"{sign}{b:.3g} {u}"
        b /= 1024
    return f"{sign}{b:.3g} TiB"


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
    s = _short(op)
    t = [a for a in args if a.is_tensor]
    out: list = []

    def add(shape, dtype=None, itemsize=0, label="output"):
        if shape is None:
            return
        if dtype is None and t:
            main = next((a for a in t if a.dtype != "bool"), t[0])
            dtype, itemsize = main.dtype, main.itemsize
        out.append((tuple(shape), dtype, itemsize, label))

    if s in ("mm", "bmm") and len(t) >= 2:
        a, b = t[0].shape, t[1].shape
        if len(a) == len(b) and len(a) in (2, 3):
            add(a[:-1] + (b[-1],))
    elif s in ("addmm", "baddbmm") and len(t) >= 3:
        a, b = t[1].shape, t[2].shape
        if len(a) == len(b) and len(a) in (2, 3):
            add(a[:-1] + (b[-1],), t[1].dtype, t[1].itemsize)
    elif s == "matmul" and len(t) >= 2:
        r = matmul_dims(t[0].shape, t[1].shape)
        if r is not None:
            add(r[4])
    elif s == "linear" and len(t) >= 2 and len(t[1].shape) == 2 and t[0].shape:
        add(t[0].shape[:-1] + (t[1].shape[0],))
    elif op in _SDPA_FWD or s in ("scaled_dot_product_attention", "_scaled_dot_product_attention_math"):
        sh = sdpa_shapes(op if op in SDPA_SCHEMAS else "aten::" + s, args)
        if sh:
            b, h, sq, sk, dv = sh["b"], sh["h"], sh["sq"], sh["sk"], sh["dv"]
            if sh["layout"] == "bhsd":
                add((b, h, sq, dv), sh["dtype"], sh["itemsize"], "attention output")
            else:
                add((b, sq, h, dv), sh["dtype"], sh["itemsize"], "attention output")
            add((b, h, sq), "fp32", 4, "logsumexp")
            add((b, h, (sq + 31) // 32 * 32), "fp32", 4, "logsumexp (padded)")
            if "math" in s:
                add((b, h, sq, sk), sh["dtype"], sh["itemsize"], "attention weights")
    elif op in SDPA_SCHEMAS:      # backward: dq, dk, dv
        sch = SDPA_SCHEMAS[op]
        qi = sch.q
        for lab, i in (("grad q", qi), ("grad k", qi + 1), ("grad v", qi + 2)):
            if i < len(args) and args[i].is_tensor:
                add(args[i].shape, args[i].dtype, args[i].itemsize, lab)
    elif s in _FACTORY_SIZE_DTYPE:
        si, di = _FACTORY_SIZE_DTYPE[s]
        size = () if si is None else (_ints_text(args[si].value) if si < len(args) else None)
        dt = _code_dtype(args[di].value) if di < len(args) else None
        if size is not None:
            if dt:
                add(size, dt[0], dt[1])
            elif s.startswith("new_") and t:
                add(size, t[0].dtype, t[0].itemsize)
            else:
                add(size, None, 0)
    elif s in _LIKE and t:
        dt = _code_dtype(args[1].value) if len(args) > 1 else None
        add(t[0].shape, *(dt if dt else (t[0].dtype, t[0].itemsize)))
    elif s in ("cat", "stack", "concat"):
        lists = [a for a in args if a.shapes is not None]
        if lists and lists[0].shapes:
            shapes = list(lists[0].shapes)
            dim = _int_value(args, 1) or 0
            it = t[0] if t else None
            dt = (None, 0) if it is None else (it.dtype, it.itemsize)
            if s == "stack":
                base = shapes[0]
                d = dim % (len(base) + 1)
                add(base[:d] + (len(shapes),) + base[d:], *dt)
            else:
                shapes = [sh for sh in shapes if sh != (0,)]
                if shapes:
                    nd = len(shapes[0])
                    d = dim % nd if nd else 0
                    if all(len(sh) == nd for sh in shapes):
                        tot = sum(sh[d] for sh in shapes)
                        add(shapes[0][:d] + (tot,) + shapes[0][d + 1:], *dt)
    elif s == "repeat_interleave" and t:
        rep = _int_value(args, 1)
        dim = _int_value(args, 2)
        sh = t[0].shape
        if rep and dim is not None and sh:
            d = dim % len(sh)
            add(sh[:d] + (sh[d] * rep,) + sh[d + 1:])
    elif s == "repeat" and t:
        reps = _ints_text(args[1].value) if len(args) > 1 else None
        sh = t[0].shape
        if reps and len(reps) >= len(sh):
            sh2 = (1,) * (len(reps) - len(sh)) + sh
            add(tuple(a * b for a, b in zip(sh2, reps)))
    elif s in ("reshape", "view", "_unsafe_view", "_reshape_copy") and t:
        tgt = _ints_text(args[1].value) if len(args) > 1 else None
        if tgt is not None:
            add(_resolve_view(tgt, t[0].numel))
    elif s == "flatten" and t:
        sh = t[0].shape
        a0, a1 = _int_value(args, 1), _int_value(args, 2)
        if sh and a0 is not None and a1 is not None:
            a0, a1 = a0 % len(sh), a1 % len(sh)
            add(sh[:a0] + (prod(sh[a0:a1 + 1]),) + sh[a1 + 1:])
    elif s in _SAME_SHAPE and t:
        shape = broadcast_shapes(*[a.shape for a in t]) or t[0].shape
        if s in _BOOL_OUT:
            add(shape, "bool", 1)
        elif s in ("_softmax", "_log_softmax") and len(args) > 2 and args[2].value.strip().lower() == "true":
            add(shape, "fp32", 4)
        elif s in ("softmax", "log_softmax") and len(args) > 2 and _code_dtype(args[2].value):
            add(shape, *_code_dtype(args[2].value))
        elif s in ("_to_copy", "to") and len(args) > 1 and _code_dtype(args[1].value):
            add(shape, *_code_dtype(args[1].value))
        elif s == "copy":
            add(shape)
        else:
            add(shape)
            if s in ("native_dropout",):
                add(shape, "bool", 1, "dropout mask")
    return out


def _size_match(need: int, nbytes: int, device_type: int) -> Optional[str]:
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


class _Context:
    """Shared lookups over one analysed trace."""

    def __init__(self, trace: Trace, links: Links, tagging):
        self.t, self.L, self.tag = trace, links, tagging
        R = trace.ranges
        self.R = R
        self.kind = R["kind"]
        self.name_id = R["name"]
        self.sig = R["sig"]
        self.strings = trace.strings
        self._args: dict[int, list] = {}
        self._outs: dict[tuple, list] = {}
        self._calls: Optional[dict] = None
        self._makers: dict[tuple, dict] = {}
        self.end_ns = R["ts_ns"] + R["dur_ns"]

    def name(self, r: int) -> str:
        return self.strings[self.name_id[r]]

    def call(self, instance: int) -> Optional[int]:
        """The report's number of an attention call (the kernels' ``instance``)."""
        if self._calls is None:
            self._calls = call_numbers(self.t, self.tag)
        return self._calls.get(instance) if instance >= 0 else None

    def short(self, r: int) -> str:
        return _short(self.name(r))

    def args(self, r: int) -> Optional[list]:
        s = int(self.sig[r])
        if s < 0:
            return None
        a = self._args.get(s)
        if a is None:
            a = self._args[s] = parse_args(self.t.signatures[s])
        return a

    def outputs(self, r: int) -> list:
        # an op's outputs depend only on its name and recorded inputs: memoised on those, so
        # the same op in every layer and step is inferred once
        key = (int(self.name_id[r]), int(self.sig[r]))
        o = self._outs.get(key)
        if o is None:
            a = self.args(r)
            nm = self.name(r)
            if a is None:
                # factories recorded without shapes still allocate; nothing to infer
                o = []
            else:
                try:
                    o = op_outputs(nm, a)
                except (IndexError, ValueError, TypeError, ZeroDivisionError):
                    o = []
            self._outs[key] = o
        return o

    def direction(self, r: int) -> str:
        return "backward" if r >= 0 and self.L.backward_root[r] >= 0 else "forward"


# ------------------------------------------------------------------------------ attribution
def innermost_ranges(trace: Trace, links: Links, threads: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """Per query (thread index, time): the innermost CPU range on that thread containing the
    time (start <= t <= end), or -1."""
    R = trace.ranges
    out = np.full(len(ts_ns), -1, dtype=np.int64)
    if not len(ts_ns) or not len(R["ts_ns"]):
        return out
    r_thread = R["thread"]
    end = R["ts_ns"] + R["dur_ns"]
    parent = links.parent
    for th in np.unique(threads).tolist():
        q = np.flatnonzero(threads == th)
        rs = np.flatnonzero(r_thread == th)
        if not len(rs):
            continue
        o = rs[np.lexsort((-R["dur_ns"][rs], R["ts_ns"][rs]))]
        st = R["ts_ns"][o]
        t = ts_ns[q]
        pos = np.searchsorted(st, t, side="right") - 1
        cand = np.where(pos >= 0, o[np.maximum(pos, 0)], -1)
        for _ in range(512):
            bad = (cand >= 0) & (end[np.maximum(cand, 0)] < t)
            if not bad.any():
                break
            cand[bad] = parent[cand[bad]]
        out[q] = cand
    return out


def _phase_of(tag, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(instance, phase code) of ranges; -1 outside attention; 'other' for unphased ranges."""
    ok = r >= 0
    inst = np.where(ok, tag.range_instance[np.maximum(r, 0)], -1)
    ph = np.where(ok, tag.range_phase[np.maximum(r, 0)], -1).astype(np.int64)
    ph = np.where((inst >= 0) & (ph < 0), P.PHASE_INDEX["other"], ph)
    ph = np.where(inst >= 0, ph, -1)
    return inst, ph


# ------------------------------------------------------------------------------ shapes per call
def instance_shapes(ctx: _Context, step_window: Optional[tuple]) -> dict[int, dict]:
    """B, H, Hk, Sq, Sk, D, Dv and dtype of every attention call's forward pass, from the SDPA
    op's inputs or the QK^T (and PV) matmul operands of eager attention."""
    R, tag, L = ctx.R, ctx.tag, ctx.L
    cand = np.flatnonzero((ctx.kind == OP) & (tag.range_instance >= 0) & (L.backward_root < 0)
                          & (ctx.sig >= 0))
    wanted = {i for i, nm in enumerate(ctx.strings)
              if nm in SDPA_SCHEMAS or _short(nm) in ("matmul", "bmm", "baddbmm", "mm", "expand", "repeat_interleave")}
    if len(cand):
        cand = cand[np.isin(ctx.name_id[cand], np.fromiter(wanted, dtype=np.int64, count=len(wanted)))]
    if step_window is not None and len(cand):
        cand = cand[(R["ts_ns"][cand] >= step_window[0]) & (R["ts_ns"][cand] <= step_window[1])]
    if not len(cand):
        return {}
    cand = cand[np.lexsort((-R["dur_ns"][cand], R["ts_ns"][cand]))]
    qk_ph, pv_ph = P.PHASE_INDEX["qk_matmul"], P.PHASE_INDEX["pv_matmul"]
    info: dict[int, dict] = {}
    for r in cand.tolist():
        inst = int(tag.range_instance[r])
        d = info.setdefault(inst, {"ts": int(R["ts_ns"][r])})
        nm = ctx.name(r)
        s = _short(nm)
        ph = int(tag.range_phase[r])
        if nm in SDPA_SCHEMAS and "sdpa" not in d:
            sh = sdpa_shapes(nm, ctx.args(r) or [])
            if sh and not sh["backward"]:
                d["sdpa"] = sh
                d["sdpa_op"] = nm
        elif ph == qk_ph and s in ("matmul", "bmm", "baddbmm", "mm") and "qk" not in d:
            a = [x for x in (ctx.args(r) or []) if x.is_tensor]
            if s == "baddbmm":
                a = a[1:]
            if len(a) >= 2 and len(a[0].shape) >= 2 and len(a[1].shape) >= 2:
                d["qk"] = (a[0], a[1])
                d["qk_calls"] = d.get("qk_calls", 0) + 1
        elif ph == pv_ph and s in ("matmul", "bmm", "baddbmm", "mm") and "pv" not in d:
            a = [x for x in (ctx.args(r) or []) if x.is_tensor]
            if s == "baddbmm":
                a = a[1:]
            if len(a) >= 2 and len(a[1].shape) >= 2:
                d["pv"] = (a[0], a[1])
        elif s == "expand" and "rep_kv" not in d:
            a = ctx.args(r) or []
            if a and a[0].is_tensor and len(a[0].shape) == 5 and a[0].shape[2] == 1:
                tgt = _ints_text(a[1].value) if len(a) > 1 else None
                if tgt and len(tgt) == 5 and tgt[2] > 1:
                    d["rep_kv"] = (a[0].shape[1], tgt[2])
        elif s == "repeat_interleave" and "rep_kv" not in d:
            a = ctx.args(r) or []
            rep = _int_value(a, 1)
            dim = _int_value(a, 2)
            if a and a[0].is_tensor and len(a[0].shape) == 4 and rep and dim in (1, -3):
                d["rep_kv"] = (a[0].shape[1], rep)
    out = {}
    for inst, d in info.items():
        s = _shapes_of(d)
        if s is not None:
            out[inst] = s
    return out


def _shapes_of(d: dict) -> Optional[dict]:
    if "sdpa" in d:
        sh = d["sdpa"]
        b, h, hk, sq, sk, dd, dv = (sh[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv"))
        src = "sdpa_inputs"
        if "rep_kv" in d and hk == h and d["rep_kv"][0] * d["rep_kv"][1] == h:
            hk, src = d["rep_kv"][0], "repeat_kv"
        return dict(b=b, h=h, hk=hk, sq=sq, sk=sk, d=dd, dv=dv, dtype=sh["dtype"], itemsize=sh["itemsize"],
                    heads_known=True, kv_source=src, op=d.get("sdpa_op"), score_numel=b * h * sq * sk,
                    score_shape=[b, h, sq, sk])
    if "qk" in d:
        qa, ka = d["qk"]
        r = matmul_dims(qa.shape, ka.shape)
        if r is None:
            return None
        _, sq, sk, dd, out_shape = r
        batch = out_shape[:-2]
        if len(batch) >= 2:
            b, h, heads_known = prod(batch[:-1]), batch[-1], True
        else:
            b, h, heads_known = prod(batch) if batch else 1, 1, False
        dv = dd
        if "pv" in d:
            dv = d["pv"][1].shape[-1]
        hk, src = h, "matmul_operands"
        if "rep_kv" in d and heads_known and d["rep_kv"][0] * d["rep_kv"][1] == h:
            hk, src = d["rep_kv"][0], "repeat_kv"
        return dict(b=b, h=h, hk=hk, sq=sq, sk=sk, d=dd, dv=dv, dtype=qa.dtype, itemsize=qa.itemsize,
                    heads_known=heads_known, kv_source=src, op="QK^T/PV matmuls", score_numel=prod(out_shape),
                    score_shape=list(out_shape))
    return None


def _fused_bytes(s: dict) -> dict:
    it = s["itemsize"]
    b, h, hk, sq, sk, d, dv = s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"]
    q = b * h * sq * d * it
    k = b * hk * sk * d * it
    v = b * hk * sk * dv * it
    o = b * h * sq * dv * it
    lse = b * h * sq * 4
    return {"q": q, "k": k, "v": v, "out": o, "logsumexp": lse, "alloc": o + lse, "working_set": q + k + v + o + lse}


# ------------------------------------------------------------------------------ the block
def memory_report(trace: Trace, links: Links, tagging, attr, report: dict) -> dict:
    """The ``memory`` block of a report (see docs/report-schema.md)."""
    ctx = _Context(trace, links, tagging)
    window = _step_window(trace, report)
    shapes = instance_shapes(ctx, window)
    M = trace.memory
    n_mem = len(M["ts"])
    spans = _attention_spans(ctx, window)
    out: dict = {
        "recorded": bool(n_mem),
        "notice": None if n_mem else {"code": "no_memory_events",
                                      "message": "no memory events in this trace: allocations are unknown",
                                      "fix": HOW_TO_RECORD},
        "devices": [],
        "primary": None,
        "attention_spans": spans,
    }
    if n_mem:
        out["devices"] = _devices(ctx, shapes, window)
        if out["devices"]:
            out["primary"] = out["devices"][0]["device"]
    out["footprint"] = _footprint(ctx, shapes, report, window)
    out["data_movement"] = _data_movement(ctx, shapes, report, window)
    out["flags"] = _flags(out, shapes)
    out["assumptions"] = {
        "gpu_events": "only Device Type 1 (CUDA) events count for a GPU; CPU events (type 0) are reported as "
                      "the 'cpu' device, separately",
        "attribution": "an event belongs to the innermost CPU range on its thread at its timestamp; backward "
                       "ranges carry the attention call and phase of the forward op they differentiate",
        "maker_op": "an allocation is matched to the innermost op around it whose inferred output has its size "
                    "(CUDA sizes rounded up to 512 B; a large-pool block may be up to 1 MiB larger), then to the "
                    "outermost enclosing op that returns the same tensor",
        "mla": f"MLA-style latent KV as in DeepSeek-V2: {MLA_LATENT_DIM}-dim compressed latent + {MLA_ROPE_DIM}-dim "
               "decoupled RoPE key per token and layer, at the K/V dtype",
        "gqa": f"GQA alternative: {GQA_GROUPS} KV heads (when the model has more query heads); MQA: 1 KV head",
    }
    return out


def _step_window(trace: Trace, report: dict) -> Optional[tuple]:
    """[start, end] in ns of the analysed step (``--step``), or None for the whole trace."""
    step = report.get("step")
    if not step:
        return None
    want = str(step)
    num = want.split("#")[-1]
    for s in report.get("steps") or []:
        if s["name"] == want or s["name"].split("#")[-1] == num:
            t0 = int(round((s["ts"] - trace.base_us) * 1000.0))
            return (t0, t0 + int(round((s["dur_us"] or 0) * 1000.0)))
    return None


def _attention_spans(ctx: _Context, window) -> list[dict]:
    """CPU time span of every attention call, per direction (for shading the curve)."""
    R, tag, L = ctx.R, ctx.tag, ctx.L
    inst = tag.range_instance
    sel = np.flatnonzero(inst >= 0)
    if not len(sel):
        return []
    bwd = (L.backward_root[sel] >= 0).astype(np.int64)
    key = inst[sel] * 2 + bwd
    o = np.argsort(key, kind="stable")
    k_sorted = key[o]
    starts = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
    t0 = np.minimum.reduceat(R["ts_ns"][sel][o], starts)
    t1 = np.maximum.reduceat(ctx.end_ns[sel][o], starts)
    keys = k_sorted[starts]
    order = np.argsort(t0, kind="stable")
    base = ctx.t.base_us
    out = []
    for j in order.tolist():
        a, b = int(t0[j]), int(t1[j])
        if window is not None and (b < window[0] or a > window[1]):
            continue
        i = int(keys[j]) // 2
        out.append({"ts": round(base + a / 1000.0, 3), "end": round(base + b / 1000.0, 3),
                    "direction": "backward" if int(keys[j]) % 2 else "forward", "instance": ctx.call(i),
                    "scope": ctx.tag.instances.get(i, {}).get("name")})
        if len(out) >= MAX_SPANS:
            break
    return out


# ------------------------------------------------------------------------------ allocations
def _devices(ctx: _Context, shapes: dict, window) -> list[dict]:
    M = ctx.t.memory
    n = len(M["ts"])
    order = np.lexsort((np.arange(n), M["ts_ns"]))
    if window is not None:
        order = order[(M["ts_ns"][order] >= window[0]) & (M["ts_ns"][order] <= window[1])]
    rng = innermost_ranges(ctx.t, ctx.L, M["thread"][order], M["ts_ns"][order])
    inst, ph = _phase_of(ctx.tag, rng)
    bwd = np.where(rng >= 0, ctx.L.backward_root[np.maximum(rng, 0)] >= 0, False)
    dt, di = M["device_type"][order], M["device_id"][order]
    devs = sorted(set(zip(dt.tolist(), di.tolist())), key=lambda x: (x[0] != CUDA, x[0], x[1]))
    out = []
    for t, i in devs:
        m = (dt == t) & (di == i)
        out.append(_device_entry(ctx, shapes, order[m], rng[m], inst[m], ph[m], bwd[m], t, i))
    return out


def _device_entry(ctx, shapes, idx, rng, inst, ph, bwd, dtype_code, dev_id) -> dict:
    M = ctx.t.memory
    base = ctx.t.base_us
    n = len(idx)
    b = M["bytes"][idx].astype(np.int64)
    addr = M["addr"][idx]
    ts = M["ts"][idx]
    tot = M["total_allocated"][idx].astype(np.int64)
    res = M["total_reserved"][idx].astype(np.int64)
    if (tot < 0).any():
        # no Total Allocated recorded: rebuild it from the deltas (relative to the window start)
        tot = np.cumsum(b)
        tot -= min(0, int(tot.min()))
    alloc, free = b > 0, b < 0
    pos = np.arange(n)
    # pair each allocation with the next free of the same address
    o = np.lexsort((pos, addr))
    a_s, b_s = addr[o], b[o]
    pair = (a_s[:-1] == a_s[1:]) & (b_s[:-1] > 0) & (b_s[1:] < 0)
    free_at = np.full(n, n + 1, dtype=np.int64)
    free_at[o[:-1][pair]] = o[1:][pair]
    att = inst >= 0
    name = DEVICE_TYPES.get(dtype_code, f"type{dtype_code}")
    label = name if dtype_code == 0 or dev_id < 0 else f"{name}:{dev_id}"
    peak_i = int(np.argmax(tot)) if n else 0
    e: dict = {
        "device": label, "device_type": name, "device_type_code": int(dtype_code), "device_id": int(dev_id),
        "events": int(n), "allocs": int(alloc.sum()), "frees": int(free.sum()),
        "alloc_bytes": int(b[alloc].sum()), "free_bytes": int(-b[free].sum()),
        "start_allocated_bytes": int(tot[0] - b[0]) if n else 0,
        "end_allocated_bytes": int(tot[-1]) if n else 0,
        "peak_allocated_bytes": int(tot[peak_i]) if n else 0,
        "peak_ts": float(ts[peak_i]) if n else None,
        "peak_in_attention": bool(att[peak_i]) if n else False,
        # the CPU allocator reports no reserved memory (always 0): null, not 0
        "peak_reserved_bytes": int(res.max()) if n and (res > 0).any() else None,
    }
    # makers of the allocations that matter: attention's own, and the ones live at the peaks
    am = np.flatnonzero(alloc & att)
    if len(am) > MAX_INFER:
        am = am[np.argsort(-b[am], kind="stable")[:MAX_INFER]]
    makers: dict[int, dict] = {}
    makers.update(_makers(ctx, am, rng, b, dtype_code))
    score = np.zeros(n, dtype=bool)
    for p in am.tolist():
        s = shapes.get(int(inst[p]))
        if s is not None and _is_score(makers[p], int(b[p]), s, dtype_code):
            score[p] = True
            makers[p]["score_matrix"] = True
    # inside attention
    a_al, a_fr = alloc & att, free & att
    e["attention"] = {
        "events": int(att.sum()), "allocs": int(a_al.sum()), "frees": int(a_fr.sum()),
        "alloc_bytes": int(b[a_al].sum()), "free_bytes": int(-b[a_fr].sum()),
        "share_of_alloc_bytes": _r(b[a_al].sum() / b[alloc].sum(), 4) if b[alloc].sum() > 0 else None,
        "empty_allocs": None,
    }
    # per phase and direction
    rows = []
    for direction, dmask in (("forward", ~bwd), ("backward", bwd)):
        for pi, phn in enumerate(P.PHASES):
            m = att & dmask & (ph == pi)
            if not m.any():
                continue
            ma, mf = m & alloc, m & free
            big = np.flatnonzero(ma)
            row = {"phase": phn, "label": P.PHASE_LABELS[phn], "direction": direction,
                   "allocs": int(ma.sum()), "frees": int(mf.sum()),
                   "alloc_bytes": int(b[ma].sum()), "free_bytes": int(-b[mf].sum()),
                   "net_bytes": int(b[m].sum()),
                   "score_allocs": int((ma & score).sum()), "score_bytes": int(b[ma & score].sum()),
                   "largest": None}
            if len(big):
                p = int(big[np.argmax(b[big])])
                row["largest"] = dict(_maker_json(makers.get(p) or _maker(ctx, int(rng[p]), int(b[p]), dtype_code)),
                                      bytes=int(b[p]))
            rows.append(row)
    e["phases"] = rows
    sc = np.flatnonzero(score)
    e["score_matrices"] = {
        "allocs": int(len(sc)), "bytes": int(b[sc].sum()),
        "max_bytes": int(b[sc].max()) if len(sc) else 0,
        "examples": _group_makers([(makers[p], int(b[p])) for p in sc.tolist()], limit=4),
    }
    # the peak inside attention, and what held it
    e["attention_peak"] = None
    if att.any():
        ai = np.flatnonzero(att)
        p = int(ai[np.argmax(tot[ai])])
        e["attention_peak"] = _peak(ctx, shapes, p, idx, rng, inst, ph, bwd, b, alloc, free_at, tot, ts,
                                    makers, score, dtype_code)
    if n:
        e["peak"] = _peak(ctx, shapes, peak_i, idx, rng, inst, ph, bwd, b, alloc, free_at, tot, ts,
                          makers, score, dtype_code)
    e["calls"] = _call_comparison(ctx, shapes, rng, inst, ph, bwd, b, tot, score, dtype_code)
    e["curve"] = _curve(ts, tot, res, peak_i)
    return e


def _maker(ctx: _Context, r: int, nbytes: int, device_type: int) -> dict:
    """The op that made an allocation and the tensor it returned (see the module doc). A fresh
    dict (callers mark it); the work is memoised on the op stack's names and inputs."""
    if r < 0:
        return dict(_NO_MAKER)
    op = r if ctx.kind[r] == OP else int(ctx.L.op_ancestor[r])
    if op < 0:
        return dict(_NO_MAKER)
    chain = []
    x = op
    anc = ctx.L.op_ancestor
    while x >= 0 and len(chain) < _CHAIN:
        chain.append(x)
        x = int(anc[x])
    key = (tuple((int(ctx.name_id[c]), int(ctx.sig[c])) for c in chain), nbytes, device_type)
    hit = ctx._makers.get(key)
    if hit is None:
        hit = ctx._makers[key] = _maker_of_chain(ctx, chain, nbytes, device_type)
    return dict(hit)


_NO_MAKER = {"op": None, "alloc_op": None, "shape": None, "dtype": None, "output": None, "match": None}
_CHAIN = 10          # enclosing ops looked at for an allocation's maker


def _makers(ctx: _Context, pos: np.ndarray, rng: np.ndarray, nbytes: np.ndarray, device_type: int) -> dict:
    """:func:`_maker` of many allocations at once: their op stacks are built with whole-array
    steps and the maker is worked out once per distinct (stack of names and inputs, size)."""
    if not len(pos):
        return {}
    anc = ctx.L.op_ancestor
    r = rng[pos].astype(np.int64)
    ok = r >= 0
    rr = np.maximum(r, 0)
    op = np.where(ok, np.where(ctx.kind[rr] == OP, rr, anc[rr]), -1)
    chain = np.full((len(pos), _CHAIN), -1, dtype=np.int64)
    chain[:, 0] = op
    for j in range(1, _CHAIN):
        prev = chain[:, j - 1]
        chain[:, j] = np.where(prev >= 0, anc[np.maximum(prev, 0)], -1)
    live = chain >= 0
    safe = np.maximum(chain, 0)
    key = np.concatenate([np.where(live, ctx.name_id[safe], -1), np.where(live, ctx.sig[safe], -2),
                          nbytes[pos].astype(np.int64)[:, None]], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    made = []
    for f in first.tolist():
        c = chain[f]
        made.append(_maker(ctx, int(rng[pos[f]]), int(nbytes[pos[f]]), device_type) if c[0] >= 0
                    else dict(_NO_MAKER))
    return {p: dict(made[g]) for p, g in zip(pos.tolist(), inv.tolist())}


def _maker_of_chain(ctx: _Context, chain: list, nbytes: int, device_type: int) -> dict:
    out = dict(_NO_MAKER)
    out["alloc_op"] = ctx.name(chain[0])
    first = None
    for j, c in enumerate(chain):
        hit = _match_outputs(ctx.outputs(c), nbytes, device_type)
        if hit is not None:
            first = (j, hit)
            break
    if first is None:
        # no rule matched: name the innermost op that is not an allocator primitive
        for c in chain:
            if ctx.short(c) not in _EMPTY_OPS and ctx.short(c) not in ("as_strided", "resize_"):
                out["op"] = ctx.name(c)
                break
        if out["op"] is None:
            out["op"] = ctx.name(chain[0])
        return out
    j, hit = first
    best = (chain[j], hit)
    # extend outwards while the enclosing op returns a tensor of the same shape and size
    for c in chain[j + 1:]:
        nm = ctx.name(c)
        if P.TRANSPARENT_OP.search(nm) or (P.SDPA_OP.search(nm) and not P.FUSED_OP.search(nm)):
            break
        h2 = _match_outputs(ctx.outputs(c), nbytes, device_type)
        if h2 is None or prod(h2[0]) != prod(best[1][0]):
            break
        best = (c, h2)
    c, (shape, dt, _, label, match) = best
    out.update(op=ctx.name(c), shape=list(shape), dtype=dt, output=label, match=match)
    return out


def _match_outputs(outs: list, nbytes: int, device_type: int):
    for shape, dt, it, label in outs:
        n = prod(shape)
        if it:
            m = _size_match(n * it, nbytes, device_type)
            if m:
                return (shape, dt, it, label, m)
        else:
            for it2, nm in ((4, "fp32"), (2, "bf16/fp16"), (1, "int8/bool"), (8, "fp64/int64")):
                m = _size_match(n * it2, nbytes, device_type)
                if m:
                    return (shape, nm, it2, label, m)
    return None


def _is_score(mk: dict, nbytes: int, s: dict, device_type: int) -> bool:
    """An allocation the size of the call's score matrix (B·H·Sq·Sk elements, any dtype)."""
    if s["sq"] <= 1 or s["sk"] <= 1:
        return False           # decode: one query row is no matrix
    n = s["score_numel"]
    if mk.get("shape") is not None:
        return prod(mk["shape"]) == n and len(mk["shape"]) >= 2 and tuple(mk["shape"][-2:]) == (s["sq"], s["sk"])
    return any(_size_match(n * it, nbytes, device_type) for it in (1, 2, 4))


def _maker_json(mk: dict) -> dict:
    return {"op": mk.get("op"), "alloc_op": mk.get("alloc_op"), "shape": mk.get("shape"), "dtype": mk.get("dtype"),
            "output": mk.get("output"), "score_matrix": bool(mk.get("score_matrix"))}


def _group_makers(items: list, limit: int) -> list[dict]:
    groups: dict = {}
    for mk, nb in items:
        key = (mk.get("op"), tuple(mk["shape"]) if mk.get("shape") else None, mk.get("dtype"))
        g = groups.setdefault(key, {"count": 0, "bytes": 0, **_maker_json(mk)})
        g["count"] += 1
        g["bytes"] += nb
    return sorted(groups.values(), key=lambda g: -g["bytes"])[:limit]


def _peak(ctx, shapes, p, idx, rng, inst, ph, bwd, b, alloc, free_at, tot, ts, makers, score, dtype_code) -> dict:
    """Total Allocated at event p and the live allocations that make it up."""
    pos = np.arange(len(b))
    live = np.flatnonzero(alloc & (pos <= p) & (free_at > p))
    groups: dict = {}
    live_bytes = 0
    for q in live.tolist():
        mk = makers.get(q)
        if mk is None:
            mk = makers[q] = _maker(ctx, int(rng[q]), int(b[q]), dtype_code)
            s = shapes.get(int(inst[q]))
            if inst[q] >= 0 and s is not None and _is_score(mk, int(b[q]), s, dtype_code):
                mk["score_matrix"] = True
        a = inst[q] >= 0
        key = (mk.get("op"), tuple(mk["shape"]) if mk.get("shape") else None, mk.get("dtype"),
               P.PHASES[ph[q]] if a else None, "backward" if bwd[q] else "forward", bool(a))
        g = groups.get(key)
        if g is None:
            g = groups[key] = dict(_maker_json(mk), phase=key[3], direction=key[4], attention=key[5],
                                   count=0, bytes=0)
        g["count"] += 1
        g["bytes"] += int(b[q])
        live_bytes += int(b[q])
    total = int(tot[p])
    held = sorted(groups.values(), key=lambda g: -g["bytes"])
    for g in held:
        g["share"] = _r(g["bytes"] / total, 4) if total > 0 else None
    r = int(rng[p])
    i = int(inst[p])
    return {
        "ts": float(ts[p]), "total_allocated_bytes": total,
        "in_attention": bool(i >= 0),
        "phase": P.PHASES[ph[p]] if i >= 0 else None,
        "direction": "backward" if bwd[p] else "forward",
        "instance": ctx.call(i),
        "scope": ctx.tag.instances.get(i, {}).get("name") if i >= 0 else None,
        "op": ctx.name(r) if r >= 0 else None,
        "live_allocs": int(len(live)), "live_bytes": live_bytes,
        "attention_bytes": int(sum(g["bytes"] for g in held if g["attention"])),
        "score_bytes": int(sum(g["bytes"] for g in held if g["score_matrix"])),
        "before_window_bytes": max(0, total - live_bytes),
        "held_by": held[:MAX_HELD],
        "held_by_groups": len(held),
    }


def _call_comparison(ctx, shapes, rng, inst, ph, bwd, b, tot, score, dtype_code) -> list[dict]:
    """Per attention call (grouped by scope and shapes): what core attention allocated at its
    peak beyond what was allocated before it, vs what a fused kernel allocates (out + lse)."""
    core = np.isin(ph, [P.PHASE_INDEX[p] for p in P.CORE_PHASES])
    fwd = ~bwd
    sel = np.flatnonzero((inst >= 0) & fwd)
    if not len(sel):
        return []
    per: dict[int, dict] = {}
    for p in sel.tolist():
        i = int(inst[p])
        d = per.get(i)
        if d is None:
            d = per[i] = {"first": p, "core_first": None, "max": int(tot[p]), "core_max": None,
                          "alloc": 0, "score_alloc": 0, "score_n": 0}
        d["max"] = max(d["max"], int(tot[p]))
        if b[p] > 0:
            d["alloc"] += int(b[p])
            if score[p]:
                d["score_alloc"] += int(b[p])
                d["score_n"] += 1
        if core[p]:
            if d["core_first"] is None:
                d["core_first"] = p
                d["core_max"] = int(tot[p])
            d["core_max"] = max(d["core_max"], int(tot[p]))
    groups: dict = {}
    for i, d in per.items():
        s = shapes.get(i)
        before = int(tot[d["first"]] - b[d["first"]])
        call_peak = d["max"] - before
        core_peak = None
        if d["core_first"] is not None:
            cf = d["core_first"]
            core_peak = d["core_max"] - int(tot[cf] - b[cf])
        scope = ctx.tag.instances.get(i, {}).get("name")
        key = (re.sub(r"_\d+$", "", scope or ""), tuple(sorted((k, v) for k, v in (s or {}).items()
                                                              if k in ("b", "h", "hk", "sq", "d", "dv", "dtype"))))
        g = groups.get(key)
        if g is not None and s and g["shapes"] and s["sk"] > g["shapes"]["sk"]:
            # decode steps of one layer differ only in the K/V length: keep the longest as the figures
            sk_min = g["shapes"]["sk_min"]
            g["shapes"] = dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=sk_min)
            fb = _fused_bytes(s)
            g["score_matrix_bytes"] = s["score_numel"] * s["itemsize"]
            g["fused_alloc_bytes"] = fb["alloc"]
            g["fused_working_set_bytes"] = fb["working_set"]
        elif g is not None and s and g["shapes"]:
            g["shapes"]["sk_min"] = min(g["shapes"]["sk_min"], s["sk"])
        if g is None:
            g = groups[key] = {"scope": scope, "calls": 0, "shapes": None, "fused_path": None,
                               "call_peak_bytes": 0, "core_peak_bytes": None, "alloc_bytes": 0,
                               "score_allocs": 0, "score_alloc_bytes": 0}
            if s:
                g["shapes"] = dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=s["sk"])
                fb = _fused_bytes(s)
                g["score_matrix_bytes"] = s["score_numel"] * s["itemsize"]
                g["fused_alloc_bytes"] = fb["alloc"]
                g["fused_working_set_bytes"] = fb["working_set"]
                g["fused_path"] = s["kv_source"] != "matmul_operands" and "matmul" not in (s.get("op") or "")
        g["calls"] += 1
        g.setdefault("_scopes", set()).add(scope)
        g["call_peak_bytes"] = max(g["call_peak_bytes"], call_peak)
        if core_peak is not None:
            g["core_peak_bytes"] = max(g["core_peak_bytes"] or 0, core_peak)
        g["alloc_bytes"] = max(g["alloc_bytes"], d["alloc"])
        g["score_allocs"] = max(g["score_allocs"], d["score_n"])
        g["score_alloc_bytes"] = max(g["score_alloc_bytes"], d["score_alloc"])
    out = []
    for key, g in groups.items():
        if len(g.pop("_scopes")) > 1:
            g["scope"] = key[0]
        if g["core_peak_bytes"] is None:
            continue              # no core-attention allocation of this call on this device
        if g.get("fused_alloc_bytes") is not None and g["core_peak_bytes"] is not None:
            g["excess_over_fused_bytes"] = g["core_peak_bytes"] - g["fused_alloc_bytes"]
            g["core_peak_vs_fused"] = _r(g["core_peak_bytes"] / g["fused_alloc_bytes"], 3) if g["fused_alloc_bytes"] else None
        out.append(g)
    out.sort(key=lambda g: -(g["core_peak_bytes"] or g["call_peak_bytes"] or 0))
    return out[:50]


def _curve(ts: np.ndarray, tot: np.ndarray, res: np.ndarray, peak_i: int) -> dict:
    n = len(ts)
    if n <= CURVE_POINTS:
        keep = np.arange(n)
    else:
        buckets = CURVE_POINTS // 2
        edges = np.linspace(0, n, buckets + 1).astype(np.int64)
        lo = np.minimum.reduceat(tot, edges[:-1])
        hi = np.maximum.reduceat(tot, edges[:-1])
        pick = []
        for k in range(buckets):
            a, z = edges[k], edges[k + 1]
            if z <= a:
                continue
            seg = tot[a:z]
            i_lo = a + int(np.argmax(seg == lo[k]))
            i_hi = a + int(np.argmax(seg == hi[k]))
            pick.extend((i_lo, i_hi))
        keep = np.unique(np.asarray(pick + [0, n - 1, peak_i], dtype=np.int64))
    return {"ts": [round(float(x), 3) for x in ts[keep].tolist()],
            "allocated": tot[keep].tolist(),
            "reserved": res[keep].tolist() if (res >= 0).all() and (res > 0).any() else None,
            "points": int(n), "downsampled": bool(n > CURVE_POINTS)}


# ------------------------------------------------------------------------------ footprint
def _footprint(ctx: _Context, shapes: dict, report: dict, window) -> dict:
    """K/V bytes per call from shapes, per step, and what other KV layouts would hold."""
    if not shapes:
        return {"calls": 0, "layers": [], "kv_bytes": None, "basis": None, "alternatives": [],
                "message": "no attention call with recorded K/V shapes (record_shapes=True)"}
    R = ctx.R
    steps = []
    for r in np.flatnonzero(ctx.kind == 1).tolist():       # ANNOTATION
        nm = ctx.name(r)
        if nm.startswith("ProfilerStep#"):
            steps.append((int(R["ts_ns"][r]), int(ctx.end_ns[r]), nm))
    steps.sort()
    by_step: dict = {}
    starts = np.asarray([a for a, _, _ in steps], dtype=np.int64)
    for i in shapes:
        t0 = s_ts(ctx, i)
        k = int(np.searchsorted(starts, t0, side="right")) - 1 if len(starts) else -1
        st = k if k >= 0 and steps[k][0] <= t0 <= steps[k][1] else None
        by_step.setdefault(st, []).append(i)
    if steps and any(k is not None for k in by_step):
        best = max((k for k in by_step if k is not None), key=lambda k: sum(_kv(shapes[i]) for i in by_step[k]))
        basis_calls = by_step[best]
        basis = f"{steps[best][2]} (the step with the most K/V)"
    else:
        basis_calls = list(shapes)
        basis = "all calls in the trace"
    layers: dict = {}
    for i, s in shapes.items():
        scope = ctx.tag.instances.get(i, {}).get("name")
        key = (re.sub(r"_\d+$", "", scope or ""),) + tuple(s[k] for k in ("b", "h", "hk", "sq", "d", "dv", "dtype"))
        g = layers.get(key)
        sk_min = s["sk"]
        if g is not None and s["sk"] > g["shapes"]["sk"]:
            # decode steps of one layer differ only in the K/V length: the longest gives the figures
            sk_min, calls, scopes = g["shapes"]["sk_min"], g["calls"], g["_scopes"]
            g = None
        elif g is not None:
            g["shapes"]["sk_min"] = min(g["shapes"]["sk_min"], s["sk"])
        else:
            calls, scopes = 0, set()
        if g is None:
            fb = _fused_bytes(s)
            g = layers[key] = {
                "scope": scope, "calls": calls, "_scopes": scopes, "source": s["op"], "kv_source": s["kv_source"],
                "shapes": dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=sk_min),
                "heads_known": s["heads_known"],
                "kv_bytes_per_call": _kv(s), "k_bytes": fb["k"], "v_bytes": fb["v"], "q_bytes": fb["q"],
                "out_bytes": fb["out"], "logsumexp_bytes": fb["logsumexp"],
                "fused_activation_bytes": fb["working_set"],
                "score_matrix_bytes": s["score_numel"] * s["itemsize"] if s["sq"] > 1 else 0,
                "score_shape": s["score_shape"],
                "score_tensors": _score_tensors(ctx, i, s),
            }
            g["unfused_activation_bytes"] = g["fused_activation_bytes"] + g["score_tensors"] * g["score_matrix_bytes"]
        g["calls"] += 1
        g["_scopes"].add(scope)
    for key, g in layers.items():
        if len(g.pop("_scopes")) > 1:
            g["scope"] = key[0]
    kv_total = sum(_kv(shapes[i]) for i in basis_calls)
    alts = _alternatives([shapes[i] for i in basis_calls])
    return {"calls": len(shapes), "basis": basis, "basis_calls": len(basis_calls), "kv_bytes": kv_total,
            "layers": sorted(layers.values(), key=lambda g: -g["kv_bytes_per_call"] * g["calls"])[:50],
            "alternatives": alts, "message": None}


def s_ts(ctx: _Context, inst: int) -> int:
    if 0 <= inst < len(ctx.R["ts_ns"]):
        return int(ctx.R["ts_ns"][inst])
    return -1


def _kv(s: dict) -> int:
    return s["b"] * s["hk"] * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"]


def _alternatives(calls: list[dict]) -> list[dict]:
    if not calls:
        return []
    cur = sum(_kv(s) for s in calls)
    known = all(s["heads_known"] for s in calls)
    rows = [{"name": "current", "kv_heads": _heads_label(calls, "hk"), "bytes": cur, "saving": 0.0, "ratio": 1.0}]
    if not known:
        return rows
    mha = sum(s["b"] * s["h"] * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
    rows.append({"name": "MHA", "kv_heads": _heads_label(calls, "h"), "bytes": mha})
    if all(s["h"] > GQA_GROUPS and s["h"] % GQA_GROUPS == 0 for s in calls):
        g = sum(s["b"] * GQA_GROUPS * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
        rows.append({"name": f"GQA-{GQA_GROUPS}", "kv_heads": GQA_GROUPS, "bytes": g})
    mqa = sum(s["b"] * 1 * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
    rows.append({"name": "MQA", "kv_heads": 1, "bytes": mqa})
    mla = sum(s["b"] * s["sk"] * (MLA_LATENT_DIM + MLA_ROPE_DIM) * s["itemsize"] for s in calls)
    rows.append({"name": f"MLA (latent {MLA_LATENT_DIM}+{MLA_ROPE_DIM})", "kv_heads": None, "bytes": mla})
    for r in rows:
        r["saving"] = _r(1 - r["bytes"] / cur, 4) if cur else None
        r["ratio"] = _r(r["bytes"] / cur, 4) if cur else None
    return rows


def _heads_label(calls, key):
    v = {s[key] for s in calls}
    return v.pop() if len(v) == 1 else sorted(v)


def _score_tensors(ctx: _Context, inst: int, s: dict) -> int:
    """Ops of one forward call whose output has the score matrix's shape [.., Sq, Sk]."""
    if s["sq"] <= 1:
        return 0
    tag = ctx.tag
    R = ctx.R
    lo = s_ts(ctx, inst)
    sel = np.flatnonzero((tag.range_instance == inst) & (ctx.kind == OP) & (ctx.L.backward_root < 0))
    core = {P.PHASE_INDEX[p] for p in P.CORE_PHASES}
    count = 0
    seen_chain: set = set()
    for r in sel[np.argsort(R["ts_ns"][sel], kind="stable")].tolist():
        if int(tag.range_phase[r]) not in core:
            continue
        # only the outermost op of a chain that returns the same tensor
        p = int(ctx.L.op_ancestor[r])
        if p >= 0 and int(tag.range_instance[p]) == inst and p in seen_chain:
            seen_chain.add(r)
            continue
        outs = ctx.outputs(r)
        hits = [o for o in outs if prod(o[0]) == s["score_numel"] and len(o[0]) >= 2 and o[0][-2:] == (s["sq"], s["sk"])]
        if hits:
            count += len(hits)
            seen_chain.add(r)
    del lo
    return count


# ------------------------------------------------------------------------------ data movement
def _kernel_keep(report: dict, n_gpu: int) -> np.ndarray:
    keep = np.ones(n_gpu, dtype=bool)
    kt = report.get("kernels")
    if report.get("step") and kt is not None and hasattr(kt, "columns"):
        keep[:] = False
        keep[np.asarray(kt.columns["id"], dtype=np.int64)] = True
    return keep


def _data_movement(ctx: _Context, shapes: dict, report: dict, window) -> dict:
    t, tag, L, R = ctx.t, ctx.tag, ctx.L, ctx.R
    G = t.gpu
    n_gpu = len(G["kind"])
    keep = _kernel_keep(report, n_gpu)
    inst_r = tag.range_instance
    in_att = (inst_r >= 0) & (ctx.kind == OP)
    if window is not None:
        in_att &= (R["ts_ns"] >= window[0]) & (R["ts_ns"] <= window[1])
    att_ops = np.flatnonzero(in_att)
    names = t.strings
    short_of = {}
    for nid in np.unique(ctx.name_id[att_ops]).tolist():
        short_of[nid] = _short(names[nid])
    leaf_ids = {nid for nid, s in short_of.items() if s in _COPY_LEAF}
    empty_ids = {nid for nid, s in short_of.items() if s in _EMPTY_OPS}
    sync_ids = {nid for nid, s in short_of.items() if s in _SYNC_OPS}
    nid_att = ctx.name_id[att_ops]
    leaves = att_ops[np.isin(nid_att, list(leaf_ids))] if leaf_ids else np.zeros(0, np.int64)
    # the user-visible copy op of each leaf
    wrap_ids = {i for i, nm in enumerate(names) if _short(nm) in _COPY_WRAP}
    # Walk every leaf up to its top copy op with whole-array steps (a per-range Python walk, or
    # plain lists of whole columns, cost seconds or ~16 MB per column on a large trace).
    op_anc_a, nid_a = L.op_ancestor, ctx.name_id
    is_wrap = np.zeros(len(names) + 1, dtype=bool)
    is_wrap[list(wrap_ids)] = True                      # index -1 (no name) stays False
    top_of = leaves.copy()
    up = op_anc_a[leaves] if len(leaves) else np.zeros(0, np.int64)
    live = np.arange(len(leaves))
    while len(live):
        p = up[live]
        ok = p >= 0
        live, p = live[ok], p[ok]
        ok = (inst_r[p] == inst_r[leaves[live]]) & is_wrap[nid_a[p]]
        live, p = live[ok], p[ok]
        top_of[live] = p
        up[live] = op_anc_a[p]
    tops: dict[int, int] = dict(zip(leaves.tolist(), top_of.tolist()))
    top_arr = np.unique(top_of)
    top_set = set(top_arr.tolist())
    # GPU activities under each top copy op
    gpu_of: dict[int, list] = {}
    if top_set and n_gpu:
        gop = L.gpu_op
        # only kernels launched by a copy op itself or by one of its leaves (the usual case) can
        # belong to it: filter those with numpy, then walk them up to their top copy op together
        near = np.fromiter(set(tops) | top_set, dtype=np.int64)
        cand = np.flatnonzero((tag.gpu_instance >= 0) & keep & np.isin(gop, near))
        is_top = np.zeros(len(op_anc_a), dtype=bool)
        is_top[top_arr] = True
        x = gop[cand].astype(np.int64)
        owner = np.full(len(cand), -1, np.int64)
        live = np.arange(len(cand))
        for _ in range(12):
            xs = x[live]
            ok = xs >= 0
            live, xs = live[ok], xs[ok]
            hit = is_top[xs]
            owner[live[hit]] = xs[hit]
            live = live[~hit]
            if not len(live):
                break
            x[live] = op_anc_a[xs[~hit]]
        found = owner >= 0
        for k, o in zip(cand[found].tolist(), owner[found].tolist()):
            gpu_of.setdefault(o, []).append(k)
    groups: dict = {}
    memo: dict = {}
    order = top_arr[np.argsort(R["ts_ns"][top_arr], kind="stable")]
    parent_a = op_anc_a[order]
    per_top = zip(order.tolist(), inst_r[order].tolist(), parent_a.tolist(),
                  np.where(parent_a >= 0, inst_r[np.maximum(parent_a, 0)], -2).tolist(),
                  ctx.sig[order].tolist(), nid_a[order].tolist(), tag.range_phase[order].tolist(),
                  R["dur"][order].tolist(), (L.backward_root[order] >= 0).tolist())
    gdur = G["dur"]
    # Everything but the times depends only on the op, its inputs, its parent, the call's shapes,
    # phase and direction: worked out once per such combination (the same copy in every layer).
    static: dict = {}
    for top, inst, parent, parent_inst, sg, nid, ph, rdur, bwd in per_top:
        s = shapes.get(inst)
        pnid = int(nid_a[parent]) if parent >= 0 and parent_inst == inst else -1
        skey = None if s is None else (s["sk"], s["h"], s["itemsize"], s["score_numel"], s["sq"])
        st = static.get((nid, sg if sg >= 0 else -top - 1, pnid, skey, ph, bwd))
        if st is None:
            args = ctx.args(top) or []
            tens = [a for a in args if a.is_tensor]
            lists = [a for a in args if a.shapes is not None]
            shape = list(tens[0].shape) if tens else ([list(x) for x in lists[0].shapes] if lists else None)
            dtype = tens[0].dtype if tens else None
            within = ctx.name(parent) if pnid >= 0 else None
            mkey = (nid, sg if sg >= 0 else -top - 1, within, skey)
            hit = memo.get(mkey)
            if hit is None:
                hit = memo[mkey] = (_copy_kind(ctx, top, args, s, within), _copy_bytes(ctx, top, s))
            (kind, detail), (nbytes, est) = hit
            key = (ctx.name(top), within, P.PHASES[ph] if ph >= 0 else "other",
                   "backward" if bwd else "forward", kind, str(shape), dtype)
            score_sized = bool(s is not None and tens and tens[0].numel == s["score_numel"]
                               and tens[0].shape[-1:] == (s["sk"],))
            nc = tens[0].is_contiguous() if tens else None
            st = static[(nid, sg if sg >= 0 else -top - 1, pnid, skey, ph, bwd)] = (
                key, within, kind, detail, shape, dtype, nbytes, est, score_sized, nc)
        key, within, kind, detail, shape, dtype, nbytes, est, score_sized, nc = st
        ks = gpu_of.get(top, [])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"op": key[0], "within": within, "phase": key[2], "direction": key[3], "kind": kind,
                               "shape": shape, "dtype": dtype, "calls": 0, "instances": set(), "cpu_time_us": 0.0,
                               "gpu_time_us": 0.0, "kernels": 0, "bytes": 0.0, "bytes_estimated": False,
                               "noncontiguous_input": None, "detail": detail, "score_sized": score_sized}
        g["calls"] += 1
        g["instances"].add(inst)
        g["cpu_time_us"] += rdur
        g["gpu_time_us"] += float(gdur[ks].sum()) if ks else 0.0
        g["kernels"] += len(ks)
        if nbytes is not None:
            g["bytes"] += nbytes
        g["bytes_estimated"] |= est or nbytes is None
        if nc is not None:
            g["noncontiguous_input"] = (not nc) or bool(g["noncontiguous_input"])
    copies = []
    for g in groups.values():
        g["instances"] = len(g["instances"])
        g["cpu_time_us"] = _r(g["cpu_time_us"])
        g["gpu_time_us"] = _r(g["gpu_time_us"])
        g["bytes"] = int(round(g["bytes"]))
        copies.append(g)
    copies.sort(key=lambda g: (-(g["gpu_time_us"] or 0), -(g["bytes"] or 0), -(g["cpu_time_us"] or 0)))
    # allocator ops
    alloc_ops: dict = {}
    for nid in empty_ids:
        c = int((nid_att == nid).sum())
        if c:
            alloc_ops[names[nid]] = c
    syncs = []
    for nid in sync_ids:
        rs = att_ops[nid_att == nid]
        if len(rs):
            syncs.append({"op": names[nid], "calls": int(len(rs)), "cpu_time_us": _r(R["dur"][rs].sum()),
                          "instances": int(len(np.unique(inst_r[rs])))})
    # memcpy / memset activities inside attention
    transfers: dict = {}
    if n_gpu:
        sel = np.flatnonzero((tag.gpu_instance >= 0) & keep & ((G["kind"] == MEMCPY) | (G["kind"] == MEMSET)))
        issuer = {k: top for top, ks in gpu_of.items() for k in ks}
        for k in sel.tolist():
            nm = names[G["name"][k]]
            kind = "memset" if G["kind"][k] == MEMSET else "memcpy"
            direc = _copy_direction(nm) if kind == "memcpy" else None
            ph = tag.gpu_phase[k]
            top = issuer.get(k)
            op_r = top if top is not None else int(L.gpu_op[k])
            key = (nm, kind, P.PHASES[ph] if ph >= 0 else "other",
                   "backward" if tag.gpu_backward[k] else "forward", op_r >= 0 and ctx.name(op_r))
            g = transfers.get(key)
            if g is None:
                g = transfers[key] = {"name": nm, "kind": kind, "copy": direc,
                                      "host_device": direc in ("HtoD", "DtoH", "HtoH"), "phase": key[2],
                                      "direction": key[3], "op": ctx.name(op_r) if op_r >= 0 else None,
                                      "counted_with_copy": top is not None,
                                      "calls": 0, "time_us": 0.0, "bytes": 0, "instances": set()}
            g["calls"] += 1
            g["time_us"] += float(G["dur"][k])
            g["bytes"] += max(0, int(G["bytes"][k]))
            g["instances"].add(int(tag.gpu_instance[k]))
    tr = []
    for g in transfers.values():
        g["time_us"] = _r(g["time_us"])
        g["instances"] = len(g["instances"])
        tr.append(g)
    tr.sort(key=lambda g: -(g["time_us"] or 0))
    att_time = report.get("attention_time_us") or 0.0
    copy_gpu = sum(g["gpu_time_us"] or 0 for g in copies)
    tr_time = sum(g["time_us"] or 0 for g in tr)
    tr_own = sum(g["time_us"] or 0 for g in tr if not g["counted_with_copy"])
    return {
        "copies": copies[:100],
        "copy_groups": len(copies),
        "allocator_ops": dict(sorted(alloc_ops.items(), key=lambda x: -x[1])),
        "allocator_calls": int(sum(alloc_ops.values())),
        "transfers": tr[:50],
        "syncs": syncs,
        "totals": {
            "copy_calls": int(sum(g["calls"] for g in copies)),
            "copy_cpu_time_us": _r(sum(g["cpu_time_us"] or 0 for g in copies)),
            "copy_gpu_time_us": _r(copy_gpu),
            "copy_bytes": int(sum(g["bytes"] or 0 for g in copies)),
            "transfer_calls": int(sum(g["calls"] for g in tr)),
            "transfer_time_us": _r(tr_time),
            "transfer_bytes": int(sum(g["bytes"] for g in tr)),
            "host_device_time_us": _r(sum(g["time_us"] or 0 for g in tr if g["host_device"])),
            "host_device_bytes": int(sum(g["bytes"] for g in tr if g["host_device"])),
            # memcpy/memset issued by a copy op are in that op's GPU time too: counted once here
            "share_of_attention_time": _r((copy_gpu + tr_own) / att_time, 4) if att_time else None,
        },
    }


def _copy_direction(name: str) -> Optional[str]:
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD"):
        if d in name:
            return d
    return None


def _copy_kind(ctx: _Context, top: int, args: list, s: Optional[dict], within: Optional[str]) -> tuple[str, Optional[str]]:
    """What a copy is: cast, kv_concat, kv_expand, materialize (of a strided view), internal
    (inside a compute op), cache_write, copy."""
    op = ctx.short(top)
    tens = [a for a in args if a.is_tensor]
    if op in ("_to_copy", "to", "type_as"):
        code = _code_dtype(args[1].value) if len(args) > 1 else None
        if code and tens and tens[0].dtype and code[0] != tens[0].dtype:
            return "cast", f"{tens[0].dtype} -> {code[0]}"
    if within is not None and _short(within) not in _COPY_WRAP and not P.SDPA_OP.search(within) \
            and _short(within) not in ("matmul", "linear", "bmm", "mm"):
        return "internal", f"inside {within}"
    if op in ("_to_copy", "to", "type_as"):
        return "copy", None
    if op == "copy_" and len(tens) >= 2:
        if tens[0].dtype != tens[1].dtype:
            return "cast", f"{tens[1].dtype} -> {tens[0].dtype}"
        if s is not None and len(tens[0].shape) == 4 and tens[0].shape[_SEQ_DIM] < s["sk"] and tens[0].is_contiguous() is False:
            return "cache_write", "writes new positions into a preallocated cache"
        return "copy", None
    if op in ("cat", "concat"):
        lists = [a for a in args if a.shapes is not None]
        shp = list(lists[0].shapes) if lists else []
        dim = _int_value(args, 1)
        if len(shp) >= 2 and all(len(x) == 4 for x in shp) and dim is not None:
            d = dim % 4
            outlen = sum(x[d] for x in shp)
            if d == _SEQ_DIM and s is not None and outlen == s["sk"] and shp[0][d] > shp[-1][d]:
                return "kv_concat", (f"cat of K/V along the sequence: {shp[0][d]} cached + {sum(x[d] for x in shp[1:])} "
                                     f"new positions -> {outlen}")
        return "copy", None
    if op in ("repeat_interleave", "repeat"):
        if s is not None and tens and len(tens[0].shape) == 4 and tens[0].shape[1] != s["h"]:
            return "kv_expand", f"expands {tens[0].shape[1]} KV heads to {s['h']}"
        return "copy", None
    if op in ("contiguous", "reshape", "clone", "flatten"):
        if tens and len(tens[0].shape) == 5 and tens[0].shape[2] > 1 and tens[0].strides \
                and len(tens[0].strides) == 5 and tens[0].strides[2] == 0:
            sh = tens[0].shape
            return "kv_expand", f"repeat_kv: expand + reshape of K/V from {sh[1]} to {sh[1] * sh[2]} heads"
        if tens and tens[0].is_contiguous() is False:
            return "materialize", "copies a transposed / strided view into a new contiguous tensor"
        return "copy", None
    return "copy", None


def _copy_bytes(ctx: _Context, top: int, s: Optional[dict]) -> tuple[Optional[float], bool]:
    """Bytes read + written by a copy op (estimated for tensor lists, whose dtype is not
    recorded: taken at the attention call's dtype)."""
    nm = ctx.name(top)
    args = ctx.args(top) or []
    c = op_cost(nm, args)
    if c is not None and c.bytes is not None:
        return float(c.bytes), False
    lists = [a for a in args if a.shapes is not None]
    if lists:
        n = sum(prod(x) for x in lists[0].shapes)
        it = s["itemsize"] if s else 2
        return float(2 * n * it), True
    outs = ctx.outputs(top)
    tens = [a for a in args if a.is_tensor]
    if outs and tens:
        o = outs[0]
        return float(tens[0].nbytes + prod(o[0]) * (o[2] or tens[0].itemsize)), False
    # walk into the leaf copy for its bytes (reshape -> clone)
    for ch in ctx.L.children(top).tolist():
        if ctx.kind[ch] == OP and ctx.short(ch) in _COPY_LEAF:
            return _copy_bytes(ctx, int(ch), s)
    return None, True


# ------------------------------------------------------------------------------ flags
MAX_COPY_FLAGS = 6
_SDPA_MATH = ("aten::_scaled_dot_product_attention_math", "aten::scaled_dot_product_attention")


def _copy_flag(g: dict, n_calls: Optional[int]) -> Optional[dict]:
    """A flag for one copy group, or None when the evidence does not support one.

    * ``kv_cache_cat``: a ``cat`` along the sequence whose result is the K/V the call attends over
      (grown from a cache) — one call is evidence enough.
    * ``kv_expand``: K/V repeated per query head (repeat_kv, repeat_interleave) — copies the whole
      K/V every call by construction.
    * ``sdpa_math_copies``: copies inside SDPA's math backend (it expands / casts K/V).
    * ``score_cast``: a dtype cast of a score-sized (B·H·Sq·Sk) tensor.
    * ``repeated_copy``: a layout copy or cast of the same shape in two or more attention calls
      (e.g. ``contiguous()`` of K every layer).
    """
    shape = g["shape"]
    if not shape or (isinstance(shape[0], int) and prod(shape) < 2):
        return None
    cost = (f"{g['calls']} calls, {_us(g['gpu_time_us'])} GPU, {_us(g['cpu_time_us'])} CPU, "
            f"{fmt_bytes(g['bytes'])} moved" + (" (estimated)" if g["bytes_estimated"] else ""))
    where = f"in {P.PHASE_LABELS.get(g['phase'], g['phase'])} ({g['direction']})"
    shp = "×".join(str(x) for x in shape) if isinstance(shape[0], int) else _shape_text(shape)
    every = (f"{g['instances']} of {n_calls} attention calls" if n_calls else f"{g['instances']} attention calls")
    base = {"calls": g["calls"], "time_us": g["gpu_time_us"], "bytes": g["bytes"], "op": g["op"], "shape": shape,
            "phase": g["phase"], "direction": g["direction"], "within": g["within"], "instances": g["instances"]}
    if g["kind"] == "kv_concat":
        return dict(base, code="kv_cache_cat", severity="warning",
                    message=f"the KV cache grows by {g['op']} {where}: every step copies the whole cache",
                    evidence=f"{g['detail']}; {cost}",
                    fix="preallocate a static KV cache (transformers' StaticCache, or a [B, H, max_len, D] buffer "
                        "written in place with index_copy_ / slice assignment) and attend over its prefix")
    if g["within"] in _SDPA_MATH and g["kind"] in ("kv_expand", "cast", "copy", "materialize"):
        return dict(base, code="sdpa_math_copies", severity="warning",
                    message=f"SDPA's math backend copies [{shp}] ({g['detail'] or g['kind']}) {where}",
                    evidence=f"{g['op']} [{shp}] ({g['detail'] or g['kind']}) inside {g['within']}: {cost}",
                    fix="let scaled_dot_product_attention pick a fused backend (flash / memory-efficient / cuDNN): "
                        "check the inputs it rejects (dtype, head dim, mask, enable_gqa) with "
                        "torch.backends.cuda.sdp_kernel / sdpa_kernel")
    if g["kind"] == "kv_expand":
        return dict(base, code="kv_expand", severity="warning",
                    message=f"{g['op']} [{shp}] {g['detail']} {where}",
                    evidence=f"{cost}; in {every}",
                    fix="let the kernel share KV heads: scaled_dot_product_attention(..., enable_gqa=True) or a "
                        "GQA-aware kernel (FlashAttention) instead of repeating K/V per query head")
    if g["kind"] == "cast" and g.get("score_sized"):
        return dict(base, code="score_cast", severity="warning",
                    message=f"{g['op']} casts the attention scores ({g['detail']}) {where}",
                    evidence=f"[{shp}] in {every}; {cost}",
                    fix="a fused kernel keeps the softmax in fp32 registers: use scaled_dot_product_attention "
                        "instead of softmax(..., dtype=float32).to(dtype) on materialised scores")
    if g["instances"] >= 2 and g["kind"] in ("materialize", "cast"):
        if g["kind"] == "cast":
            what = f"casts ({g['detail']})"
            fix = ("the same tensor is cast in every call: store it in the compute dtype once (model.to(dtype), a "
                   "bf16 cache) instead of casting per call (autocast recasts fp32 weights on every forward)")
        else:
            what = "materialises a strided (transposed) view"
            if g["within"] and _short(g["within"]) in ("matmul", "bmm", "einsum"):
                fix = ("torch.matmul copies its transposed operand (K^T) into a contiguous buffer before the bmm: "
                       "scaled_dot_product_attention reads strided q/k/v in place")
            else:
                fix = ("write the layout the consumer wants in the producer (e.g. project straight into "
                       "[B, S, 3, H, D]) and pass strided tensors on: scaled_dot_product_attention accepts "
                       "non-contiguous q/k/v, so .contiguous() / .reshape() copies are not needed")
        return dict(base, code="repeated_copy", severity="warning",
                    message=f"{g['op']}" + (f" in {g['within']}" if g["within"] else "") + f" [{shp}] {what} {where}, "
                            f"in {every}",
                    evidence=cost + ("; its input is not contiguous" if g["noncontiguous_input"] else ""),
                    fix=fix)
    return None


def _merge_shapes(flags: list[dict]) -> list[dict]:
    """One flag per (code, op, within, phase, direction): copies of one layer at several K/V
    lengths (decode steps) are the same finding."""
    out: dict = {}
    for f in flags:
        # score casts are one finding wherever they are; others per op and place
        key = (f["code"],) if f["code"] == "score_cast" else (f["code"], f["op"], f.get("within"), f["phase"], f["direction"])
        g = out.get(key)
        if g is None:
            out[key] = dict(f, shapes=1)
            continue
        g["shapes"] += 1
        g["calls"] += f["calls"]
        g["instances"] = (g.get("instances") or 0) + (f.get("instances") or 0)
        g["time_us"] = _r((g["time_us"] or 0) + (f["time_us"] or 0))
        g["bytes"] = (g["bytes"] or 0) + (f["bytes"] or 0)
    for g in out.values():
        if g["shapes"] > 1:
            more = "place(s)" if g["code"] == "score_cast" else "shape(s)"
            g["evidence"] += (f"; the same in {g['shapes'] - 1} more {more}: "
                              f"{g['calls']} calls, {_us(g['time_us'])} GPU, {fmt_bytes(g['bytes'])} in all")
    return list(out.values())


def _flags(mem: dict, shapes: dict) -> list[dict]:
    """Repeated or avoidable memory traffic, each with the evidence in hand."""
    flags = []
    dm = mem["data_movement"]
    n_calls = len(shapes) or None
    copy_flags = [f for f in (_copy_flag(g, n_calls) for g in dm["copies"]) if f is not None]
    copy_flags.sort(key=lambda f: (-(f["time_us"] or 0), -(f["bytes"] or 0)))
    copy_flags = _merge_shapes(copy_flags)
    math = [f for f in copy_flags if f["code"] == "sdpa_math_copies"]
    if len(math) > 1:
        copy_flags = [f for f in copy_flags if f["code"] != "sdpa_math_copies"]
        copy_flags.insert(0, {
            "code": "sdpa_math_copies", "severity": "warning",
            "message": f"SDPA's math backend copies K/V and scores inside attention ({len(math)} kinds of copies)",
            "evidence": "; ".join(f["evidence"] for f in math[:4]) + (f"; and {len(math) - 4} more" if len(math) > 4 else ""),
            "fix": math[0]["fix"], "calls": sum(f["calls"] for f in math),
            "time_us": _r(sum(f["time_us"] or 0 for f in math)), "bytes": sum(f["bytes"] or 0 for f in math),
            "op": math[0]["op"], "shape": math[0]["shape"], "phase": math[0]["phase"], "direction": math[0]["direction"]})
    kept = [f for f in copy_flags if f["code"] != "repeated_copy"]
    rep = [f for f in copy_flags if f["code"] == "repeated_copy"]
    kept += rep[:MAX_COPY_FLAGS]
    if len(rep) > MAX_COPY_FLAGS:
        rest = rep[MAX_COPY_FLAGS:]
        kept.append({"code": "repeated_copy", "severity": "info",
                     "message": f"{len(rest)} more repeated copies inside attention",
                     "evidence": f"{sum(f['calls'] for f in rest)} calls, {_us(sum(f['time_us'] or 0 for f in rest))} "
                                 f"GPU, {fmt_bytes(sum(f['bytes'] or 0 for f in rest))}",
                     "fix": "see data_movement.copies", "calls": sum(f["calls"] for f in rest),
                     "time_us": _r(sum(f["time_us"] or 0 for f in rest)), "bytes": sum(f["bytes"] or 0 for f in rest)})
    flags += kept
    for g in dm["transfers"]:
        if g["host_device"]:
            flags.append({
                "code": "host_device_transfer", "severity": "warning",
                "message": f"{g['copy']} transfer inside attention ({P.PHASE_LABELS.get(g['phase'], g['phase'])}, "
                           f"{g['direction']})",
                "evidence": f"{g['calls']} × '{g['name']}' in {g['instances']} attention calls, {_us(g['time_us'])}, "
                            f"{fmt_bytes(g['bytes'])}",
                "fix": "build masks / positions / scales on the device (torch.ones(..., device=q.device)) or once "
                       "outside the step; avoid .item() / .cpu() / .tolist() inside attention",
                "calls": g["calls"], "time_us": g["time_us"], "bytes": g["bytes"]})
    for s in dm["syncs"]:
        flags.append({
            "code": "host_sync", "severity": "info",
            "message": f"{s['op']} inside attention waits for the GPU",
            "evidence": f"{s['calls']} calls in {s['instances']} attention calls, {_us(s['cpu_time_us'])} CPU",
            "fix": "keep the value on the device, or read it once outside the attention loop",
            "calls": s["calls"], "time_us": None, "bytes": None})
    for d in mem["devices"]:
        sm = d.get("score_matrices") or {}
        if sm.get("allocs"):
            ex = (sm.get("examples") or [{}])[0]
            shp = "×".join(str(x) for x in ex.get("shape") or []) or "?"
            cmp = next((c for c in d.get("calls") or [] if c.get("fused_alloc_bytes") is not None
                        and (c.get("score_allocs") or 0) > 0), None)
            ev = f"{sm['allocs']} score-matrix allocations on {d['device']} ({fmt_bytes(sm['bytes'])} in all, " \
                 f"largest {fmt_bytes(sm['max_bytes'])}, e.g. {ex.get('op')} [{shp}] {ex.get('dtype') or ''})"
            if cmp is not None:
                ev += (f"; core attention peaked at {fmt_bytes(cmp['core_peak_bytes'])} above its inputs vs "
                       f"{fmt_bytes(cmp['fused_alloc_bytes'])} (out + logsumexp) for a fused kernel")
            flags.append({
                "code": "score_matrix", "severity": "warning", "device": d["device"],
                "message": "unfused attention materialises the S×S score matrix",
                "evidence": ev,
                "fix": "use torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient backends "
                       "never allocate S×S) or attn_implementation='sdpa' / 'flash_attention_2' in transformers",
                "calls": sm["allocs"], "time_us": None, "bytes": sm["bytes"]})
    return flags


def _us(x) -> str:
    if x is None:
        return "–"
    if x >= 1e3:
        return f"{x / 1e3:.2f} ms"
    return f"{x:.1f} µs"


# ------------------------------------------------------------------------------ rendering
def _shape_text(sh) -> str:
    if not sh:
        return "?"
    if isinstance(sh[0], list):
        return " + ".join("[" + ", ".join(str(x) for x in s) + "]" for s in sh)
    return "[" + ", ".join(str(x) for x in sh) + "]"


def render_memory_text(rep: dict, markdown: bool = False) -> str:
    """The memory section of the table / markdown report."""
    mem = rep.get("memory")
    h = "### " if markdown else ""
    if not mem:
        return f"{h}Memory\nno memory analysis in this report (re-run without a stale cache)\n"
    out = [f"{h}Memory and data movement"]
    if not mem.get("recorded"):
        out.append(f"allocations: not recorded — {HOW_TO_RECORD}")
    for d in mem.get("devices") or []:
        a = d["attention"]
        out.append(
            f"{d['device']}: {d['allocs']} allocations ({fmt_bytes(d['alloc_bytes'])}), {d['frees']} frees; "
            f"peak allocated {fmt_bytes(d['peak_allocated_bytes'])}"
            + (f" (reserved {fmt_bytes(d['peak_reserved_bytes'])})" if d.get("peak_reserved_bytes") is not None else "")
            + f"; inside attention {a['allocs']} allocations, {fmt_bytes(a['alloc_bytes'])}")
        if d["phases"]:
            rows = [[P.PHASE_LABELS.get(p["phase"], p["phase"]), "fwd" if p["direction"] == "forward" else "bwd",
                     str(p["allocs"]), fmt_bytes(p["alloc_bytes"]), str(p["frees"]), fmt_bytes(p["free_bytes"]),
                     fmt_bytes(p["net_bytes"]),
                     (f"{(p['largest'] or {}).get('op') or '?'} {_shape_text((p['largest'] or {}).get('shape'))} "
                      f"{fmt_bytes((p['largest'] or {}).get('bytes'))}") if p.get("largest") else "–",
                     str(p["score_allocs"])]
                    for p in d["phases"]]
            out.append("")
            out.append(text_table(["phase", "dir", "allocs", "allocated", "frees", "freed", "net", "largest allocation",
                               "S×S"], rows, markdown))
        pk = d.get("attention_peak")
        if pk:
            out.append("")
            out.append(f"peak inside attention: {fmt_bytes(pk['total_allocated_bytes'])} allocated at "
                       f"{P.PHASE_LABELS.get(pk['phase'], pk['phase'])} ({pk['direction']}, {pk['op'] or '?'}); "
                       f"held by:")
            rows = []
            for g in pk["held_by"]:
                rows.append([g["op"] or "?", _shape_text(g["shape"]), g["dtype"] or "?",
                             (P.PHASE_LABELS.get(g["phase"], g["phase"]) + (" bwd" if g["direction"] == "backward" else ""))
                             if g["attention"] else "outside attention",
                             str(g["count"]), fmt_bytes(g["bytes"]), f"{100 * (g['share'] or 0):.1f}%",
                             "S×S scores" if g["score_matrix"] else ""])
            if pk["before_window_bytes"]:
                rows.append(["(allocated before the trace)", "", "", "", "", fmt_bytes(pk["before_window_bytes"]),
                             f"{100 * pk['before_window_bytes'] / max(1, pk['total_allocated_bytes']):.1f}%", ""])
            out.append(text_table(["op", "shape", "dtype", "phase", "count", "bytes", "share", ""], rows, markdown))
        calls = [c for c in d.get("calls") or [] if c.get("fused_alloc_bytes") is not None]
        if calls:
            out.append("")
            rows = []
            for c in calls[:10]:
                s = c["shapes"]
                rows.append([c["scope"] or "?", str(c["calls"]),
                             f"B{s['b']} H{s['h']}/{s['hk']} S{s['sq']}x{s['sk']} D{s['d']} {s['dtype']}",
                             fmt_bytes(c["core_peak_bytes"]), fmt_bytes(c["fused_alloc_bytes"]),
                             str(c["score_allocs"]), fmt_bytes(c.get("score_matrix_bytes"))])
            out.append(text_table(["attention call", "calls", "shapes", "core peak above inputs",
                               "fused kernel (out+lse)", "S×S allocs/call", "one S×S"], rows, markdown))
    fp = mem.get("footprint") or {}
    if fp.get("layers"):
        out.append("")
        out.append(f"K/V footprint from shapes: {fmt_bytes(fp['kv_bytes'])} over {fp['basis_calls']} attention "
                   f"calls ({fp['basis']})")
        rows = []
        for g in fp["layers"][:10]:
            s = g["shapes"]
            rows.append([g["scope"] or "?", str(g["calls"]),
                         f"B{s['b']} H{s['h']} KV{s['hk']} Sq{s['sq']} Sk{s['sk']} D{s['d']} {s['dtype']}",
                         fmt_bytes(g["kv_bytes_per_call"]), fmt_bytes(g["fused_activation_bytes"]),
                         f"{g['score_tensors']} × {fmt_bytes(g['score_matrix_bytes'])}" if g["score_tensors"] else "–",
                         g["kv_source"]])
        out.append(text_table(["attention call", "calls", "shapes", "K/V per call", "fused q+k+v+out+lse",
                           "S×S tensors", "K/V from"], rows, markdown))
        if len(fp.get("alternatives") or []) > 1:
            rows = [[a["name"], str(a["kv_heads"]) if a["kv_heads"] is not None else "latent", fmt_bytes(a["bytes"]),
                     f"{100 * ((a['ratio'] or 1) - 1):+.1f}%"] for a in fp["alternatives"]]
            out.append(text_table(["KV layout", "KV heads", "K/V bytes", "vs current"], rows, markdown))
            out.append(f"({mem['assumptions']['mla']})")
    elif fp.get("message"):
        out.append(f"K/V footprint: {fp['message']}")
    dm = mem.get("data_movement") or {}
    if dm.get("copies") or dm.get("transfers") or dm.get("allocator_calls"):
        out.append("")
        t = dm["totals"]
        out.append(f"data movement inside attention: {t['copy_calls']} copies ({_us(t['copy_gpu_time_us'])} GPU, "
                   f"{fmt_bytes(t['copy_bytes'])}), {t['transfer_calls']} memcpy/memset ({_us(t['transfer_time_us'])}, "
                   f"{fmt_bytes(t['transfer_bytes'])}), {dm['allocator_calls']} aten::empty* calls")
        rows = [[g["op"] + (f" in {g['within']}" if g["within"] else ""), g["kind"],
                 P.PHASE_LABELS.get(g["phase"], g["phase"]), "fwd" if g["direction"] == "forward" else "bwd",
                 _shape_text(g["shape"]), str(g["calls"]), str(g["instances"]), _us(g["gpu_time_us"]),
                 _us(g["cpu_time_us"]), fmt_bytes(g["bytes"]) + ("*" if g["bytes_estimated"] else "")]
                for g in dm["copies"][:15]]
        rows += [[g["name"], g["kind"], P.PHASE_LABELS.get(g["phase"], g["phase"]),
                  "fwd" if g["direction"] == "forward" else "bwd", "", str(g["calls"]), str(g["instances"]),
                  _us(g["time_us"]), "", fmt_bytes(g["bytes"])] for g in dm["transfers"][:10]]
        if rows:
            out.append(text_table(["op", "kind", "phase", "dir", "shape", "calls", "attn calls", "GPU time", "CPU time",
                               "bytes"], rows, markdown))
    for f in mem.get("flags") or []:
        out.append(f"memory {f['severity']}: {f['message']} — {f['evidence']}. Fix: {f['fix']}")
    return "\n".join(out) + "\n"


MEMORY_CSV_COLUMNS = ["section", "path", "device", "phase", "direction", "op", "shape", "dtype", "kind", "count",
                      "bytes", "time_us", "detail"]


def memory_csv_rows(rep: dict) -> list[list]:
    """The memory section as rows of one long table (``MEMORY_CSV_COLUMNS``)."""
    mem = rep.get("memory") or {}
    path = rep.get("path")
    rows = []
    if not mem.get("recorded"):
        rows.append(["notice", path, "", "", "", "", "", "", "no_memory_events", "", "", "", HOW_TO_RECORD])
    for d in mem.get("devices") or []:
        rows.append(["device", path, d["device"], "", "", "", "", "", "peak_allocated", d["allocs"],
                     d["peak_allocated_bytes"], "", f"alloc_bytes={d['alloc_bytes']} frees={d['frees']}"])
        for p in d["phases"]:
            lg = p.get("largest") or {}
            rows.append(["phase_allocs", path, d["device"], p["phase"], p["direction"], lg.get("op") or "",
                         _shape_text(lg.get("shape")) if lg else "", lg.get("dtype") or "", "alloc", p["allocs"],
                         p["alloc_bytes"], "", f"frees={p['frees']} free_bytes={p['free_bytes']} "
                                                 f"score_allocs={p['score_allocs']}"])
        pk = d.get("attention_peak")
        if pk:
            for g in pk["held_by"]:
                rows.append(["peak_held_by", path, d["device"], g["phase"] or "", g["direction"], g["op"] or "",
                             _shape_text(g["shape"]), g["dtype"] or "",
                             "score_matrix" if g["score_matrix"] else ("attention" if g["attention"] else "outside"),
                             g["count"], g["bytes"], "", f"peak={pk['total_allocated_bytes']}"])
        for c in d.get("calls") or []:
            rows.append(["call_vs_fused", path, d["device"], "", "forward", c["scope"] or "",
                         str(c.get("shapes") or ""), (c.get("shapes") or {}).get("dtype") or "", "core_peak",
                         c["calls"], c.get("core_peak_bytes") or "", "",
                         f"fused_alloc_bytes={c.get('fused_alloc_bytes')} score_allocs={c['score_allocs']}"])
    fp = mem.get("footprint") or {}
    for g in fp.get("layers") or []:
        rows.append(["kv_footprint", path, "", "", "forward", g["scope"] or "", str(g["shapes"]), g["shapes"]["dtype"],
                     g["kv_source"], g["calls"], g["kv_bytes_per_call"], "",
                     f"fused_activation_bytes={g['fused_activation_bytes']} score_tensors={g['score_tensors']}"])
    for a in fp.get("alternatives") or []:
        rows.append(["kv_alternative", path, "", "", "", a["name"], "", "", "kv_heads=" + str(a["kv_heads"]), "",
                     a["bytes"], "", f"saving={a['saving']}"])
    dm = mem.get("data_movement") or {}
    for g in dm.get("copies") or []:
        rows.append(["copy", path, "", g["phase"], g["direction"], g["op"], _shape_text(g["shape"]), g["dtype"] or "",
                     g["kind"], g["calls"], g["bytes"] if g["bytes"] is not None else "", g["gpu_time_us"],
                     (g["within"] or "") + (" " + g["detail"] if g["detail"] else "")])
    for g in dm.get("transfers") or []:
        rows.append(["transfer", path, "", g["phase"], g["direction"], g["name"], "", "", g["kind"], g["calls"],
                     g["bytes"], g["time_us"], g["copy"] or ""])
    for f in mem.get("flags") or []:
        rows.append(["flag", path, "", "", "", f["code"], "", "", f["severity"], f.get("calls") or "",
                     f.get("bytes") if f.get("bytes") is not None else "", f.get("time_us") or "",
                     f"{f['message']}: {f['evidence']}"])
    return rows
