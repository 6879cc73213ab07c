"""The distinct attention calls of a trace: what a replay script rebuilds and times.

An attention *call* is one of the tagger's instances (attention/tagger.py: the module, function,
annotation or SDPA op that scopes attention, or an eager pattern found on its own). Inside it this
module finds the ops that compute attention and reads their recorded inputs (``record_shapes``:
shapes, strides, dtypes, scalar values):

* ``sdpa`` — an SDPA-family op (``F.scaled_dot_product_attention`` or a backend op called
  directly), any backend; ``decode`` — the same with a query of at most ``DECODE_MAX_SQ`` rows
  against a longer K/V (a step with a KV cache; ``detail.kv_len``); ``varlen`` — a fused op with
  sequence offsets (``cum_seq_q``/``cu_seqlens_q``: nested/jagged tensors, packed batches);
* ``eager`` — QK^T matmul -> (scale, mask, softmax, cast, dropout) -> PV matmul, the steps as
  recorded (``detail.steps``);
* ``mha`` — ``nn.MultiheadAttention`` (its fast path ``aten::_native_multi_head_attention``, or the
  training path inside the module);
* ``flex`` — a compiled FlexAttention template (Inductor's ``triton_tem_fused_*flex_attention*``),
  with its block mask's geometry and, when ``create_block_mask`` ran in the trace, its mask
  (causal, sliding window).

Calls with the same *signature* (kind, op, shapes, strides, dtypes, flags, mask, steps, backend)
are one entry with a ``count``; its ``id`` is a hash of the signature, so the emitted script, the
replay JSON and a later analysis of the same trace agree on it. ``trace_time_us`` is the kernel
time of the ops a replay re-runs (for eager: QK^T to PV; for flex: the flex kernels; for SDPA: the
SDPA op; for MHA: the whole module, projections included), forward and backward, over the calls
in the analysed step(s); ``per_call_us`` is its mean per call and direction.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from math import sqrt
from typing import Any, Optional

import numpy as np

from ..advice.equivalence import mask_facts
from ..attention import backends as B, patterns as P
from ..attention.tagger import Tagging, call_numbers
from ..roofline.cost import SDPA_SCHEMAS, flex_qkv, looks_like_flex
from ..trace.correlate import Links
from ..trace.jagged import JaggedLengths
from ..trace.records import OP, Trace
from ..trace.shapes import SCALAR_TYPE_CODES, Arg, SignatureArgs

KINDS = ("sdpa", "decode", "varlen", "eager", "mha", "flex")
DECODE_MAX_SQ = 16  # a query of at most this many rows against a longer K/V: a decode step
MAX_CALLS = 64  # distinct calls listed (longest first); the rest are counted in ``omitted``

# The backends a replay tries, per kind (attention/backends.py's vocabulary). ``eager`` and
# ``compiled`` are the recorded pattern and its torch.compile; for nn.MultiheadAttention ``eager`` is
# the module as recorded and the SDPA backends are the module with need_weights=False under
# sdpa_kernel(backend).
_SDPA_BACKENDS = ["flash", "efficient", "cudnn", "math"]
BACKENDS_BY_KIND = {
    "sdpa": _SDPA_BACKENDS + ["flex"],
    "decode": _SDPA_BACKENDS + ["flex"],
    "varlen": _SDPA_BACKENDS + ["flex"],
    "eager": ["eager", "compiled"] + _SDPA_BACKENDS + ["flex"],
    "mha": ["eager", "compiled"] + _SDPA_BACKENDS,
    "flex": ["flex"] + _SDPA_BACKENDS,
}

# (scale, enable_gqa, attn_mask) argument positions of the [B, H, S, D] SDPA ops (native_functions.yaml)
_SDPA_EXTRA: dict[str, tuple[Optional[int], Optional[int], Optional[int]]] = {
    "aten::scaled_dot_product_attention": (6, 7, 3),
    "aten::_scaled_dot_product_attention_math": (7, 8, 3),
    "aten::_scaled_dot_product_flash_attention": (6, None, None),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (6, None, 5),
    "aten::_scaled_dot_product_efficient_attention": (7, None, 3),
    "aten::_scaled_dot_product_cudnn_attention": (8, None, 3),
    "aten::_scaled_dot_product_fused_attention_overrideable": (7, None, 3),
}
# varlen ops: q/k/v packed [T, H, D] (flash) or [1, T, H, D] (efficient), offsets [B + 1]:
# (cum_seq_q, cum_seq_k, max_q, max_k, dropout, causal or custom_mask_type, scale, mask)
_VARLEN: dict[str, tuple[int, int, int, int, int, int, int, Optional[int]]] = {
    "aten::_flash_attention_forward": (3, 4, 5, 6, 7, 8, 10, None),
    "aten::_efficient_attention_forward": (4, 5, 6, 7, 8, 9, 11, 3),
    "aten::_cudnn_attention_forward": (4, 5, 6, 7, 9, 10, 12, 3),
}
_FLEX_KERNEL_OP = re.compile(r"flex_(attention|decoding)")
_BACKWARD_NAME = re.compile(r"backward", re.I)
_MHA_MODULE = re.compile(r"MultiheadAttention")
_CAST_OPS = frozenset({"to", "_to_copy", "type_as", "float", "half", "bfloat16"})


def _tensor(a: Arg) -> dict[str, Any]:
    return {"shape": list(a.dims), "stride": list(a.strides) if a.strides else None, "dtype": a.dtype}


def _tensor_mask(a: Optional[Arg]) -> Optional[dict[str, Any]]:
    """A recorded attn_mask tensor's shape, stride and dtype (its values are not recorded), or None."""
    return dict(_tensor(a), kind="tensor") if a is not None and a.is_tensor else None


def _operands(q: Arg, k: Arg, v: Arg) -> dict[str, Any]:
    """The q/k/v shape and stride fields of a call's signature, as recorded."""
    return {
        "q_shape": list(q.dims),
        "k_shape": list(k.dims),
        "v_shape": list(v.dims),
        "q_stride": list(q.strides) if q.strides else None,
        "k_stride": list(k.strides) if k.strides else None,
        "v_stride": list(v.strides) if v.strides else None,
    }


def _float(a: Optional[Arg]) -> Optional[float]:
    if a is None or a.is_tensor:
        return None
    try:
        return float(a.value)
    except ValueError:
        return None


def _bool(a: Optional[Arg]) -> Optional[bool]:
    if a is None:
        return None
    v = a.value.strip().lower()
    return True if v in ("true", "1") else False if v in ("false", "0") else None


def _int(a: Optional[Arg]) -> Optional[int]:
    f = _float(a)
    return int(f) if f is not None and f == int(f) else None


def _at(args: list[Arg], i: Optional[int]) -> Optional[Arg]:
    return args[i] if i is not None and 0 <= i < len(args) else None


def _swap_last(x: Optional[list[int]]) -> Optional[list[int]]:
    if x is None or len(x) < 2:
        return x
    return x[:-2] + [x[-1], x[-2]]


@dataclass
class Occurrence:
    """One attention call of the trace as a replay sees it."""

    instance: int  # the tagger's instance id
    sig: dict[str, Any]  # the signature: everything the script needs, nothing measured
    tops: set[int] = field(default_factory=set)  # op ranges whose kernels (and their backward) are replayed
    whole: bool = False  # every kernel of the instance (nn.MultiheadAttention)
    flex: bool = False  # the flex template kernels of the instance
    time_us: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "backward": 0.0})


class _Reader:
    """The trace's ops as the extraction reads them (names, arguments, nesting), memoised."""

    def __init__(self, trace: Trace, links: Links, tagging: Tagging):
        self.t, self.L, self.tag = trace, links, tagging
        R = trace.ranges
        self.kind, self.name_id, self.sig, self.ts = R["kind"], R["name"], R["sig"], R["ts_ns"]
        self.names = trace.strings
        self._args = SignatureArgs(trace.signatures)
        self.jagged = JaggedLengths(trace)
        self.trace = trace  # what advice/equivalence.mask_facts reads (with op_args)
        self._mask_builders: Any = None

    def name(self, r: int) -> str:
        return str(self.names[int(self.name_id[r])])

    def args(self, r: int) -> list[Arg]:
        return self._args(int(self.sig[r])) or []

    def op_args(self, r: int) -> list[Arg]:
        return self.args(r)

    def phase(self, r: int) -> Optional[str]:
        c = int(self.tag.range_phase[r])
        return P.PHASES[c] if c >= 0 else None

    def subtree_ops(self, r: int) -> list[int]:
        return [x for x in self.L.subtree(r) if self.kind[x] == OP]


def replay_calls(
    trace: Trace, links: Links, tagging: Tagging, kernel_ids: Optional[np.ndarray] = None
) -> dict[str, Any]:
    """``{"calls": [...], "omitted": n, "unsupported": [{instance, scope, reason}]}``: the distinct
    calls, longest trace time first. ``kernel_ids``: the GPU activities the report covers (one
    step with ``--step``); all when None."""
    rd = _Reader(trace, links, tagging)
    numbers = call_numbers(trace, tagging)
    occs, unsupported = _occurrences(rd)
    _attribute_kernels(rd, occs, kernel_ids)
    groups: dict[str, dict[str, Any]] = {}
    # the occurrences of repeated instances share their signature dict (_occurrences' memo): its
    # id is hashed once, not once per occurrence (a json.dumps and a sha1 each)
    ids_of: dict[int, str] = {}
    for o in occs:
        cid = ids_of.get(id(o.sig))
        if cid is None:
            cid = ids_of[id(o.sig)] = call_id(o.sig)
        g = groups.get(cid)
        if g is None:
            g = groups[cid] = {
                "id": cid,
                **o.sig,
                "count": 0,
                "instances": set(),
                "_t": {"forward": 0.0, "backward": 0.0},
            }
            g["_n"] = {"forward": 0, "backward": 0}
        g["count"] += 1
        n = numbers.get(o.instance)
        if n is not None:
            g["instances"].add(n)
        for d, t in o.time_us.items():
            g["_t"][d] += t
            if t > 0:
                g["_n"][d] += 1
    calls = []
    for g in groups.values():
        t, n = g.pop("_t"), g.pop("_n")
        g["directions"] = ["forward"] + (["backward"] if n["backward"] else [])
        g["trace_time_us"] = round(t["forward"] + t["backward"], 3)
        g["per_call_us"] = {d: round(t[d] / n[d], 3) if n[d] else None for d in ("forward", "backward")}
        g["instances"] = sorted(g["instances"])
        g["backends"] = list(BACKENDS_BY_KIND[g["kind"]])
        calls.append(g)
    calls.sort(key=lambda c: (-c["trace_time_us"], c["id"]))
    return {
        "calls": [_ordered(c) for c in calls[:MAX_CALLS]],
        "omitted": max(0, len(calls) - MAX_CALLS),
        "unsupported": unsupported,
    }


# the list schema's keys first (issue #20), then what the script also needs
LIST_KEYS = (
    "id",
    "kind",
    "op",
    "q_shape",
    "k_shape",
    "v_shape",
    "dtype",
    "causal",
    "dropout_p",
    "scale",
    "enable_gqa",
    "mask",
    "directions",
    "count",
    "trace_time_us",
    "backends",
)
EXTRA_KEYS = (
    "q_stride",
    "k_stride",
    "v_stride",
    "autocast",
    "trace_backend",
    "per_call_us",
    "instances",
    "detail",
    "notes",
)


def _ordered(c: dict[str, Any]) -> dict[str, Any]:
    # ``autocast`` only where the call ran under it (the signature, and so the id, has it only then)
    return {k: c.get(k) for k in LIST_KEYS + EXTRA_KEYS if k != "autocast" or c.get(k)}


def call_id(sig: dict[str, Any]) -> str:
    """``<kind>-<10 hex>``: a hash of the signature (stable for the same trace and engine)."""
    h = hashlib.sha1(json.dumps(sig, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{sig['kind']}-{h}"


# ------------------------------------------------------------------ finding the calls


def _occurrences(rd: _Reader) -> tuple[list[Occurrence], list[dict[str, Any]]]:
    tag, L = rd.tag, rd.L
    ri = tag.range_instance
    sel = np.flatnonzero((ri >= 0) & (rd.kind == OP) & (L.backward_root < 0))
    if not len(sel):
        return [], []
    sel = sel[np.lexsort((rd.ts[sel], ri[sel]))]
    anc = L.op_ancestor
    by_inst: dict[int, list[int]] = {}
    # each op's (name, signature, enclosing op), read as Python ints once (the memo key below)
    op_key: dict[int, tuple[int, int, int]] = {}
    for r, i, nm, sg, a in zip(
        sel.tolist(), ri[sel].tolist(), rd.name_id[sel].tolist(), rd.sig[sel].tolist(), anc[sel].tolist()
    ):
        by_inst.setdefault(i, []).append(r)
        op_key[r] = (nm, sg, a)
    occs: list[Occurrence] = []
    unsupported: list[dict[str, Any]] = []
    # every step repeats its calls: an instance whose ops (names, recorded inputs and nesting) match
    # one already read gives the same calls, at its own ranges
    memo: dict[tuple[Any, ...], tuple[list[tuple[dict[str, Any], list[int], bool, bool]], str]] = {}
    for inst, ops in by_inst.items():
        scope = tag.instances.get(inst, {}).get("name") or ""
        pos = {r: i for i, r in enumerate(ops)}
        key = (scope, tuple((nm, sg, pos.get(a, -1)) for nm, sg, a in map(op_key.__getitem__, ops)))
        hit = memo.get(key)
        if hit is not None:
            found = [
                Occurrence(inst, sig, tops={ops[i] for i in tops}, whole=whole, flex=flex)
                for sig, tops, whole, flex in hit[0]
            ]
            why = hit[1]
        else:
            try:
                found, why = _instance_calls(rd, inst, ops, scope)
            except (ValueError, IndexError, KeyError, TypeError) as e:  # an odd record: say so, keep the rest
                found, why = [], f"its recorded inputs could not be read ({type(e).__name__}: {e})"
            if all(t in pos for o in found for t in o.tops):
                memo[key] = ([(o.sig, sorted(pos[t] for t in o.tops), o.whole, o.flex) for o in found], why)
        occs.extend(found)
        if not found and why:
            unsupported.append({"scope": scope, "reason": why})
    # one line per distinct reason and scope
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for u in unsupported:
        k = (u["scope"], u["reason"])
        if k in seen:
            seen[k]["calls"] += 1
        else:
            seen[k] = dict(u, calls=1)
    return occs, list(seen.values())


def _top_ops(rd: _Reader, inst: int, ops: list[int]) -> list[int]:
    """The instance's outermost ops (no enclosing op inside the same instance), in time order."""
    ri, anc = rd.tag.range_instance, rd.L.op_ancestor
    out = []
    for r in ops:
        p = int(anc[r])
        if p < 0 or int(ri[p]) != inst:
            out.append(r)
    return out


def _instance_calls(rd: _Reader, inst: int, ops: list[int], scope: str) -> tuple[list[Occurrence], str]:
    """The calls inside one instance, or none and why."""
    names = [rd.name(r) for r in ops]
    if not any(rd.sig[r] >= 0 for r in ops):
        return [], "no recorded input shapes (profile with record_shapes=True)"
    if scope.startswith("nn.Module") and _MHA_MODULE.search(P.module_class(scope)):
        o = _mha(rd, inst, ops, names)
        return ([o], "") if o is not None else ([], "nn.MultiheadAttention without recognisable inputs")
    flex = [r for r, n in zip(ops, names) if _is_flex_forward(rd, r, n)]
    if flex:
        o = _flex(rd, inst, ops, names, flex[0])
        return ([o], "") if o is not None else ([], "a FlexAttention kernel whose q, k, v could not be read")
    sdpa = [
        r
        for r, n in zip(ops, names)
        if n in SDPA_SCHEMAS and not SDPA_SCHEMAS[n].backward and not _inside_sdpa(rd, r, inst)
    ]
    if sdpa:
        out = [o for o in (_sdpa(rd, inst, r) for r in sdpa) if o is not None]
        return out, "" if out else "SDPA op without 4-D q, k, v inputs"
    tops = _top_ops(rd, inst, ops)
    out = _eager(rd, inst, tops)
    if out:
        return out, ""
    if any("Torch-Compiled Region" in n for n in names):
        return [], "torch.compile region: its pattern is fused into Triton kernels, not recorded op by op"
    return [], "no SDPA op, FlexAttention kernel or QK^T -> softmax -> PV pattern with shapes"


def _inside_sdpa(rd: _Reader, r: int, inst: int) -> bool:
    for a in rd.L.ancestors(r):
        if int(rd.tag.range_instance[a]) != inst:
            return False
        if rd.kind[a] == OP and rd.name(a) in SDPA_SCHEMAS:
            return True
    return False


def _is_flex_forward(rd: _Reader, r: int, name: str) -> bool:
    if _BACKWARD_NAME.search(name):
        return False
    if _FLEX_KERNEL_OP.search(name) and name.startswith("triton_"):
        return True
    return name.startswith("triton_tem_") and looks_like_flex(rd.args(r))


# ------------------------------------------------------------------ SDPA, decode, varlen


def _inner_backend(rd: _Reader, r: int) -> Optional[str]:
    """The SDPA backend from the ops inside the call (math: the math op; fused: the backend op)."""
    inner = [rd.name(x) for x in rd.subtree_ops(r)]
    if any("_scaled_dot_product_attention_math" in n for n in inner):
        return "math"
    for n in inner:
        if n == "aten::scaled_dot_product_attention":
            continue
        be = B.fused_backend(n, None)
        if be in ("flash", "efficient", "cudnn"):
            return be
    return None


def _varlen_op(rd: _Reader, r: int) -> Optional[int]:
    for x in rd.subtree_ops(r):
        n = rd.name(x)
        if n in _VARLEN:
            a = rd.args(x)
            cq = _at(a, _VARLEN[n][0])
            if cq is not None and cq.is_tensor and len(cq.dims) == 1:
                return x
    return None


def _sdpa(rd: _Reader, inst: int, r: int) -> Optional[Occurrence]:
    v = _varlen_op(rd, r)
    if v is not None:
        return _varlen(rd, inst, r, v)
    op = rd.name(r)
    sch = SDPA_SCHEMAS[op]
    args = rd.args(r)
    if len(args) < sch.q + 3:
        return None
    q, k, v_ = args[sch.q], args[sch.q + 1], args[sch.q + 2]
    if not all(x.is_tensor and len(x.dims) == 4 for x in (q, k, v_)):
        return None
    if sch.layout != "bhsd":  # a bshd backend op called directly: not one SDPA replays as is
        return None
    sc_i, gqa_i, mask_i = _SDPA_EXTRA.get(op, (None, None, sch.mask))
    causal = _bool(_at(args, sch.causal)) if sch.causal is not None else None
    mask_a = _at(args, mask_i)
    mask = _tensor_mask(mask_a)
    sq, sk = q.dims[2], k.dims[2]
    kind = "decode" if sq <= DECODE_MAX_SQ and sk > sq else "sdpa"
    be = _inner_backend(rd, r) if op == "aten::scaled_dot_product_attention" else _op_backend(op)
    gqa = _bool(_at(args, gqa_i))
    sig: dict[str, Any] = {
        "kind": kind,
        "op": op,
        **_operands(q, k, v_),
        "dtype": q.dtype,
        "causal": causal,
        "dropout_p": _float(_at(args, sch.dropout)) or 0.0,
        "scale": _float(_at(args, sc_i)),
        "enable_gqa": bool(gqa) if gqa is not None else q.dims[1] != k.dims[1],
        "mask": mask,
        "trace_backend": be,
        "detail": {"kv_len": sk, "q_len": sq} if kind == "decode" else {},
        "notes": [],
    }
    if mask is not None:
        sig["notes"].append("attn_mask values are not recorded: the replay keeps every position")
    _mark_autocast(rd, sig, [r])
    return Occurrence(inst, sig, tops={r})


# ops that do an attention call's math: under autocast they take the cast inputs
_MATH_OPS = frozenset({"bmm", "mm", "baddbmm", "addmm"})


def _mark_autocast(rd: _Reader, sig: dict[str, Any], ops: list[int]) -> None:
    """An fp32 call whose math ran in bf16/fp16 ran under torch.autocast (the cast ops in the trace
    say so: an op inside takes the cast operands): the replay runs it under autocast too, with the
    recorded fp32 inputs, instead of timing fp32 math the trace never ran."""
    if sig.get("dtype") != "fp32":
        return
    for r in ops:
        for c in rd.subtree_ops(r)[1:]:
            op = P.short_op(rd.name(c))
            if op in _MATH_OPS or op.startswith(("_scaled_dot_product_", "_flash_attention", "_efficient_attention")):
                t = [a for a in rd.args(c) if a.is_tensor]
                if t and t[0].dtype in ("bf16", "fp16"):
                    sig["autocast"] = t[0].dtype
                    sig["notes"].append(
                        f"recorded in fp32 under torch.autocast: aten::{op} ran in {t[0].dtype}; replayed under "
                        f"torch.autocast({t[0].dtype})"
                    )
                    return


def _op_backend(op: str) -> Optional[str]:
    if "_math" in op:
        return "math"
    be = B.fused_backend(op, None)
    return be if be in ("flash", "efficient", "cudnn") else None


def _varlen(rd: _Reader, inst: int, top: int, r: int) -> Optional[Occurrence]:
    op = rd.name(r)
    cq_i, ck_i, mq_i, mk_i, dr_i, causal_i, sc_i, mask_i = _VARLEN[op]
    args = rd.args(r)
    q, k, v = args[0], args[1], args[2]
    if not all(x.is_tensor and len(x.dims) in (3, 4) for x in (q, k, v)):
        return None
    cq = _at(args, cq_i)
    if cq is None or not cq.is_tensor or not cq.dims:
        return None
    if op == "aten::_efficient_attention_forward":
        mt = _int(_at(args, causal_i))
        causal: Optional[bool] = mt in (1, 2) if mt is not None else None
    else:
        causal = _bool(_at(args, causal_i))
    # packed [T, H, D] (flash, cuDNN) or [1, T, H, D] (efficient)
    qd, kd = (q.dims[1:], k.dims[1:]) if len(q.dims) == 4 else (q.dims, k.dims)
    mask_a = _at(args, mask_i)
    sig: dict[str, Any] = {
        "kind": "varlen",
        "op": op,
        **_operands(q, k, v),
        "dtype": q.dtype,
        "causal": causal,
        "dropout_p": _float(_at(args, dr_i)) or 0.0,
        "scale": _float(_at(args, sc_i)),
        "enable_gqa": qd[1] != kd[1],
        "mask": _tensor_mask(mask_a),
        "trace_backend": _op_backend(op),
        "detail": {
            "sequences": cq.dims[0] - 1,
            "total_q": qd[0],
            "total_k": kd[0],
            "max_q": _int(_at(args, mq_i)),
            "max_k": _int(_at(args, mk_i)),
            "heads": qd[1],
            "kv_heads": kd[1],
            "head_dim": qd[2],
            "layout": "packed [T, H, D]",
        },
        "notes": [],
    }
    det = sig["detail"]
    for side, total in (("q", qd[0]), ("k", kd[0])):
        n, longest = det["sequences"], det[f"max_{side}"]
        if not longest:
            continue
        lens = rd.jagged.sequence_lengths(n, total, longest)
        if lens:
            det[f"lengths_{side}"] = list(lens)
        else:
            lo = rd.jagged.shortest(n, total, longest)
            if lo:
                det[f"min_{side}"] = lo
    if det.get("lengths_q"):
        sig["notes"].append("the sequence lengths are the recorded pieces of the nested tensor built in the step")
    elif det.get("min_q"):
        sig["notes"].append(
            "the sequence lengths are not recorded (their number, total, shortest and longest are): the replay "
            "spreads them evenly from the shortest to the longest"
        )
    else:
        sig["notes"].append(
            "the sequence lengths are not recorded (only their number, total and maximum): the replay spreads "
            "them evenly from 2 x mean - maximum up to the maximum"
        )
    if rd.name(top) == "aten::scaled_dot_product_attention":
        sig["notes"].append("called through scaled_dot_product_attention on nested (jagged) tensors")
    return Occurrence(inst, sig, tops={top})


# ------------------------------------------------------------------ eager pattern


def _score_shape(a: Arg, b: Arg) -> Optional[list[int]]:
    if len(a.dims) < 2 or len(b.dims) < 2:
        return None
    batch = a.dims[:-2] if len(a.dims) >= len(b.dims) else b.dims[:-2]
    return list(batch) + [a.dims[-2], b.dims[-1]]


def _mm_operands(rd: _Reader, r: int) -> Optional[tuple[Arg, Arg, Optional[Arg]]]:
    """(left, right, bias) tensor operands of a matmul-like op (baddbmm: bias first)."""
    op = P.short_op(rd.name(r))
    t = [a for a in rd.args(r) if a.is_tensor]
    if op == "baddbmm" and len(t) >= 3:
        return t[1], t[2], t[0]
    if len(t) >= 2:
        return t[0], t[1], None
    return None


def _eager(rd: _Reader, inst: int, tops: list[int]) -> list[Occurrence]:
    """Each QK^T ... PV run of the instance's outermost ops."""
    out = []
    i = 0
    while i < len(tops):
        r = tops[i]
        if rd.phase(r) == "qk_matmul" and P.short_op(rd.name(r)) in ("matmul", "bmm", "baddbmm", "mm", "einsum"):
            j = i + 1
            while j < len(tops) and rd.phase(tops[j]) != "pv_matmul":
                if rd.phase(tops[j]) == "qk_matmul":
                    break
                j += 1
            if j < len(tops) and rd.phase(tops[j]) == "pv_matmul":
                o = _eager_call(rd, inst, tops[i : j + 1], tops[:i])
                if o is not None:
                    out.append(o)
                i = j + 1
                continue
        i += 1
    return out


def _eager_call(rd: _Reader, inst: int, span: list[int], before: list[int]) -> Optional[Occurrence]:
    qk, pv = span[0], span[-1]
    a = _mm_operands(rd, qk)
    b = _mm_operands(rd, pv)
    if a is None or b is None or P.short_op(rd.name(qk)) == "einsum":
        return None
    q, kt, bias = a
    v = b[1]
    score = _score_shape(q, kt)
    if score is None:
        return None
    d = q.dims[-1]
    steps: list[dict[str, Any]] = [{"op": "qk", "fn": P.short_op(rd.name(qk))}]
    notes: list[str] = []
    mask = None
    causal: Optional[bool] = None
    scale = 1.0
    scale_known = True
    dropout_p = 0.0
    if bias is not None:
        mask = dict(_tensor(bias), kind="tensor", apply="add")
        steps[0]["bias"] = True
        alpha = _float(_at(rd.args(qk), 4))
        if alpha is not None and alpha != 1.0:
            steps[0]["alpha"] = alpha
            scale *= alpha
    triu = any(P.short_op(rd.name(x)) in ("triu", "tril", "triu_", "tril_") for x in span + before[-8:])
    for r in span[1:-1]:
        op = P.short_op(rd.name(r))
        args = rd.args(r)
        ph = rd.phase(r)
        first = args[0] if args else None
        on_scores = first is not None and first.is_tensor and list(first.dims[-2:]) == score[-2:]
        if op in P.SCALE_OPS and on_scores and ph == "scale":
            other = args[1] if len(args) > 1 else None
            val = _float(other) if other is not None else None
            fn = "div" if op.startswith(("div", "true_divide", "divide")) else "mul"
            if val is None:
                scale_known = False
                val = sqrt(d) if fn == "div" else 1.0 / sqrt(d)
                notes.append(f"the scale of aten::{op} is not recorded (a Python float): assumed 1/sqrt({d})")
            steps.append({"op": "scale", "fn": fn, "value": val})
            scale = scale / val if fn == "div" else scale * val
        elif op in ("masked_fill", "masked_fill_", "where", "add", "add_") and on_scores and ph == "mask":
            m = args[1] if op != "where" else args[0]
            if op == "where":  # where(keep, scores, -inf): the scores are the second argument
                m = args[0]
            if not m.is_tensor:
                continue
            fn = "masked_fill" if op.startswith("masked_fill") else "where" if op == "where" else "add"
            mask = dict(_tensor(m), kind="causal_tensor" if triu else "tensor", apply=fn)
            steps.append(
                {"op": "mask", "fn": fn, "value": args[2].value if fn == "masked_fill" and len(args) > 2 else None}
            )
            causal = True if triu else None
        elif op in ("triu", "tril") and first is not None and first.is_tensor and list(first.dims[-2:]) == score[-2:]:
            # the mask is built inside the call (ones -> triu): the replay builds it there too
            diag = _int(_at(args, 1)) or 0
            steps.append(
                {"op": "mask_build", "fn": op, "diagonal": diag, "shape": list(first.dims), "dtype": first.dtype}
            )
        elif op in ("ones", "ones_like", "full", "zeros") and ph == "mask":
            continue  # the tensor triu/tril is applied to (rebuilt by mask_build)
        elif op in P.SOFTMAX_OPS and ph == "softmax":
            dt = _int(_at(args, 2))
            steps.append({"op": "softmax", "dtype": SCALAR_TYPE_CODES[dt][0] if dt in SCALAR_TYPE_CODES else None})
        elif op in _CAST_OPS and on_scores:
            dt = _int(_at(args, 1))
            if dt in SCALAR_TYPE_CODES:
                steps.append({"op": "cast", "dtype": SCALAR_TYPE_CODES[dt][0]})
        elif op in P.DROPOUT_OPS and ph == "dropout":
            p = _float(_at(args, 1)) or 0.0
            train = _bool(_at(args, 2))
            steps.append({"op": "dropout", "p": p, "train": True if train is None else train})
            if train is not False:
                dropout_p = p
        else:
            notes.append(f"aten::{op} between QK^T and PV is not replayed")
    steps.append({"op": "pv", "fn": P.short_op(rd.name(pv))})
    if mask is not None and mask["kind"] == "tensor" and score[-2] == score[-1]:
        facts = mask_facts(rd, score[-2], score[-1], tuple(mask["shape"]))
        if facts.causal:  # shown causal elsewhere in the trace (a causal-mask builder)
            mask["kind"], causal = "causal_tensor", True
    if mask is not None and mask["kind"] == "causal_tensor":
        notes.append(
            "the mask is the causal one (the trace builds it so): the replay fills it causal and the SDPA and Flex "
            "alternatives run is_causal=True"
        )
    elif mask is not None:
        notes.append(
            "the mask's values are not recorded and nothing shows it causal: the replay keeps every position and "
            "the SDPA and Flex alternatives take it as attn_mask"
        )
    kv_heads = _repeated_kv(rd, before, q)
    if kv_heads is not None:
        notes.append(
            f"K/V were repeated from {kv_heads} heads (repeat_kv) before QK^T: the SDPA and Flex alternatives take "
            f"the {kv_heads} heads with enable_gqa=True, as attn_implementation='sdpa' does"
        )
    operands = _operands(q, kt, v)  # the recorded K operand is Kᵀ: K's shape and stride swap its last two
    operands["k_shape"], operands["k_stride"] = _swap_last(operands["k_shape"]), _swap_last(operands["k_stride"])
    heads = len(q.dims) >= 4
    if not heads:
        notes.append("3-D operands ([B*H, S, D]): the heads are not separable; SDPA and Flex see them as B=1")
    sig: dict[str, Any] = {
        "kind": "eager",
        "op": "QK^T/PV matmuls",
        **operands,
        "dtype": q.dtype,
        "causal": causal,
        "dropout_p": dropout_p,
        "scale": round(scale, 8) if scale_known else None,
        "enable_gqa": False,
        "mask": mask,
        "trace_backend": "eager",
        "detail": {
            "steps": steps,
            "assumed_scale": None if scale_known else round(scale, 8),
            **({"kv_heads": kv_heads} if kv_heads is not None else {}),
        },
        "notes": notes,
    }
    _mark_autocast(rd, sig, [qk, pv])
    return Occurrence(inst, sig, tops=set(span))


def _repeated_kv(rd: _Reader, before: list[int], q: Arg) -> Optional[int]:
    """The K/V heads before Hugging Face's ``repeat_kv`` (an ``expand`` of [B, Hk, 1, S, D] to
    [B, Hk, n, S, D] with Hk * n query heads), among the call's ops before QK^T; else None."""
    if len(q.dims) != 4:
        return None
    for r in before[-24:]:
        if P.short_op(rd.name(r)) != "expand":
            continue
        a = rd.args(r)
        if not a or not a[0].is_tensor or len(a[0].dims) != 5 or a[0].dims[2] != 1 or len(a) < 2:
            continue
        try:
            tgt = [int(x) for x in a[1].value.strip("[]").split(",")]
        except ValueError:
            continue
        hk = a[0].dims[1]
        if len(tgt) == 5 and tgt[2] > 1 and hk * tgt[2] == q.dims[1]:
            return int(hk)
    return None


# ------------------------------------------------------------------ nn.MultiheadAttention


def _mha(rd: _Reader, inst: int, ops: list[int], names: list[str]) -> Optional[Occurrence]:
    nat = [r for r, n in zip(ops, names) if n == "aten::_native_multi_head_attention"]
    if nat:
        a = rd.args(nat[0])
        if len(a) < 9 or not (a[0].is_tensor and a[1].is_tensor and a[2].is_tensor):
            return None
        e, h = _int(a[3]), _int(a[4])
        if not e or not h:
            return None
        mask_a = _at(a, 9)
        need_w = _bool(_at(a, 10))
        detail = {
            "embed_dim": e,
            "num_heads": h,
            "bias": bool(_at(a, 6) is not None and a[6].is_tensor),
            "batch_first": True,
            "need_weights": bool(need_w),
            "path": "fast (aten::_native_multi_head_attention)",
            "self_attention": a[0].dims == a[1].dims == a[2].dims,
        }
        q, k, v, dtype = a[0], a[1], a[2], a[0].dtype
        mask = _tensor_mask(mask_a)
        dropout = 0.0
    else:
        lin = [r for r, n in zip(ops, names) if P.short_op(n) == "linear"]
        if not lin:
            return None
        la = rd.args(lin[0])
        if len(la) < 2 or not la[0].is_tensor or not la[1].is_tensor:
            return None
        x, w = la[0], la[1]
        e = x.dims[-1]
        if len(x.dims) != 3 or not e:
            return None
        h = _mha_heads(rd, ops, names, x)
        if h is None:
            return None
        sd = [r for r, n in zip(ops, names) if n == "aten::scaled_dot_product_attention"]
        drop = [r for r, n in zip(ops, names) if P.short_op(n) in P.DROPOUT_OPS]
        dropout = (_float(_at(rd.args(sd[0]), 4)) if sd else _float(_at(rd.args(drop[0]), 1)) if drop else 0.0) or 0.0
        detail = {
            "embed_dim": e,
            "num_heads": h,
            "bias": bool(len(la) > 2 and la[2].is_tensor),
            "batch_first": False,
            "need_weights": not sd,
            "path": "training (F.multi_head_attention_forward)",
            "self_attention": w.dims[0] == 3 * e,
        }
        q = k = v = x
        dtype = x.dtype
        mask = None
    sig: dict[str, Any] = {
        "kind": "mha",
        "op": "nn.MultiheadAttention",
        **_operands(q, k, v),
        "dtype": dtype,
        "causal": False if mask is None else None,
        "dropout_p": dropout,
        "scale": None,
        "enable_gqa": False,
        "mask": mask,
        "trace_backend": "eager" if detail["need_weights"] else _module_backend(rd, ops, names),
        "detail": detail,
        "notes": ["the whole module is replayed: its projections are in the times"],
    }
    return Occurrence(inst, sig, whole=True)


def _mha_heads(rd: _Reader, ops: list[int], names: list[str], x: Arg) -> Optional[int]:
    for r, n in zip(ops, names):
        s = P.short_op(n)
        a = [t for t in rd.args(r) if t.is_tensor]
        if n == "aten::scaled_dot_product_attention" and a and len(a[0].dims) == 4:
            return int(a[0].dims[1])
        if s in ("bmm", "baddbmm") and a:
            t = a[1] if s == "baddbmm" and len(a) > 1 else a[0]
            bsz = x.dims[1]  # [S, B, E] inside F.multi_head_attention_forward
            if len(t.dims) == 3 and bsz and t.dims[0] % bsz == 0:
                return int(t.dims[0] // bsz)
    return None


def _module_backend(rd: _Reader, ops: list[int], names: list[str]) -> Optional[str]:
    for r, n in zip(ops, names):
        if n == "aten::scaled_dot_product_attention":
            return _inner_backend(rd, r)
        be = _op_backend(n) if n in SDPA_SCHEMAS else None
        if be:
            return be
    return None


# ------------------------------------------------------------------ FlexAttention


_MASK_MOD_OPS = frozenset(
    {"ge", "gt", "le", "lt", "eq", "ne", "sub", "add", "__and__", "__or__", "logical_and", "logical_or", "where"}
)


def _flex_mask(rd: _Reader, ops: list[int], names: list[str], before: int) -> dict[str, Any]:
    """The mask_mod, from the ops ``create_block_mask`` ran on 0-dim index tensors (vmap) in the
    instance before the flex kernel: comparisons alone (``q_idx >= kv_idx``) are causal; a
    comparison with a subtraction and ``lt``/``le`` against a constant, and-ed, is a causal sliding
    window of that width. Anything else is not recognised (the replay then runs without a mask)."""
    body = []
    for r, n in zip(ops, names):
        if rd.ts[r] >= rd.ts[before]:
            break
        a = rd.args(r)
        op = P.short_op(n)
        if op in _MASK_MOD_OPS and any(x.is_tensor for x in a) and all(x.dims == () for x in a if x.is_tensor):
            body.append((op, [x.value for x in a if not x.is_tensor]))
    kinds = {b[0] for b in body}
    if not body:
        return {"mask_mod": None}
    if kinds in ({"ge"}, {"le"}):
        return {"mask_mod": "causal"}
    if kinds & {"ge", "le"} and "sub" in kinds and kinds & {"lt", "le"} and kinds & {"__and__", "logical_and"}:
        for o, vals in body:
            if o in ("lt", "le") and vals:
                try:
                    w = int(float(vals[0]))
                except ValueError:
                    continue
                return {"mask_mod": "sliding_window", "window": w + (1 if o == "le" else 0)}
    return {"mask_mod": None, "mask_ops": sorted(kinds)}


def _flex(rd: _Reader, inst: int, ops: list[int], names: list[str], r: int) -> Optional[Occurrence]:
    args = rd.args(r)
    qkv = flex_qkv(args)
    if qkv is None:
        return None
    q, k, v = qkv
    i32 = [a for a in args if a.is_tensor and a.dtype == "int32"]
    nblk = next((a for a in i32 if len(a.dims) == 3), None)
    idx = next((a for a in i32 if len(a.dims) == 4), None)
    bm: dict[str, Any] = {}
    if nblk is not None and idx is not None and nblk.dims[-1] and idx.dims[-1]:
        sq, sk = q.dims[2], k.dims[2]
        bm = {
            "mask_batch": nblk.dims[0],
            "mask_heads": nblk.dims[1],
            "q_blocks": nblk.dims[-1],
            "kv_blocks": idx.dims[-1],
            "q_block": -(-sq // nblk.dims[-1]),
            "kv_block": -(-sk // idx.dims[-1]),
        }
    bm.update(_flex_mask(rd, ops, names, r))
    notes = []
    if bm.get("mask_mod") is None:
        notes.append(
            "the block mask's contents are not recorded (create_block_mask did not run inside the call): "
            "the replay runs without a mask, an upper bound on the flex time"
            if idx is not None
            else "no block mask: dense"
        )
    causal = True if bm.get("mask_mod") in ("causal", "sliding_window") else None
    mask = {"kind": "block", "shape": list(idx.dims), "dtype": "int32"} if idx is not None else None
    sig: dict[str, Any] = {
        "kind": "flex",
        "op": "flex_attention (compiled)",
        **_operands(q, k, v),
        "dtype": q.dtype,
        "causal": causal,
        "dropout_p": 0.0,
        "scale": None,
        "enable_gqa": q.dims[1] != k.dims[1],
        "mask": mask,
        "trace_backend": "flex",
        "detail": {"block_mask": bm},
        "notes": notes + ["a score_mod, if any, is not recorded and not replayed"],
    }
    return Occurrence(inst, sig, flex=True)


# ------------------------------------------------------------------ kernel time per call


def _attribute_kernels(rd: _Reader, occs: list[Occurrence], kernel_ids: Optional[np.ndarray]) -> None:
    """Each occurrence's kernel time by direction: the GPU activities launched by its ops (for a
    backward kernel: by the backward of its ops), the flex template kernels of a flex call, every
    kernel of an nn.MultiheadAttention call."""
    if not occs:
        return
    t, L, tag = rd.t, rd.L, rd.tag
    gi = tag.gpu_instance
    sel = np.flatnonzero(gi >= 0)
    if kernel_ids is not None:
        sel = np.intersect1d(sel, np.asarray(kernel_ids, dtype=np.int64))
    if not len(sel):
        return
    by_top: dict[int, Occurrence] = {}
    whole: dict[int, Occurrence] = {}
    flex: dict[int, Occurrence] = {}
    for oc in occs:
        for r in oc.tops:
            by_top[r] = oc
        if oc.whole:
            whole[oc.instance] = oc
        if oc.flex:
            flex[oc.instance] = oc
    dur = t.gpu["dur_ns"]
    gop, anc = L.gpu_op, L.op_ancestor
    # the op a kernel's call is looked up from: its launching op (else the range around the launch),
    # for a backward kernel the forward op its backward differentiates
    ctx = L.forward_context(np.where(gop[sel] >= 0, gop[sel], L.gpu_parent[sel]))
    bwd = tag.gpu_backward
    memo: dict[int, Optional[Occurrence]] = {}
    # the loop reads single kernels: Python lists answer that faster than numpy scalars
    kernels = zip(ctx.tolist(), gi[sel].tolist(), bwd[sel].tolist(), dur[sel].tolist(), gop[sel].tolist())
    for r_ctx, inst, backward, dur_ns, launcher in kernels:
        d = "backward" if backward else "forward"
        us = float(dur_ns) / 1e3
        o: Optional[Occurrence] = whole.get(inst)
        if o is None and inst in flex:
            r = launcher
            if r >= 0 and _FLEX_KERNEL_OP.search(rd.name(r)):
                o = flex[inst]
        if o is None and by_top:
            r = r_ctx
            if r < 0:
                continue
            if r in memo:
                o = memo[r]
            else:
                x, chain = r, []
                found = None
                while x >= 0:
                    if x in memo:
                        found = memo[x]
                        break
                    chain.append(x)
                    if x in by_top:
                        found = by_top[x]
                        break
                    x = int(anc[x])
                for y in chain:
                    memo[y] = found
                o = found
        if o is not None:
            o.time_us[d] += us


def merge_call(calls: dict[str, dict[str, Any]], c: dict[str, Any]) -> None:
    """Add call ``c`` of one trace to ``calls`` (by id) of several: counts and trace times summed, and
    the directions of all (one trace may hold a call's forward only, another its training step: the
    script times every direction any of them ran)."""
    m = calls.get(c["id"])
    if m is None:
        calls[c["id"]] = json.loads(json.dumps(c))
        return
    m["count"] += c["count"]
    if "trace_time_us" in m and "trace_time_us" in c:
        m["trace_time_us"] = round(m["trace_time_us"] + c["trace_time_us"], 3)
    dirs = set(m.get("directions") or []) | set(c.get("directions") or [])
    m["directions"] = [d for d in ("forward", "backward") if d in dirs]
    per, other = m.get("per_call_us") or {}, c.get("per_call_us") or {}
    if per or other:
        m["per_call_us"] = {d: per.get(d) if per.get(d) is not None else other.get(d) for d in ("forward", "backward")}
