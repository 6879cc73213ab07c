"""Which GPU work belongs to attention, in which phase and direction.

1. **Scopes.** A CPU range opens an attention *instance* when it is an attention module
   (``nn.Module: *Attention*``), an attention function (``eager_attention_forward``...), a
   ``record_function`` range named like attention, or an SDPA-family op. The outermost one wins;
   everything nested inside belongs to that instance.
2. **Pattern.** Without any scope (no stack, no annotation), an eager ``matmul -> softmax ->
   matmul`` sequence among sibling ops is recognised as an instance of its own, reaching back over
   mask, scale and layout ops to the input projection and forward to the output projection.
3. **Phases.** An instance is cut into *units* in call order: projection modules/ops, matmuls,
   softmax, dropout, elementwise ops, layout ops, fused SDPA ops, rotary functions. A small state
   machine (before QK^T / after QK^T / after softmax / after PV) names each unit's phase, so the
   same ``aten::mul`` is ``scale`` between QK^T and softmax and ``rotary`` before QK^T.
4. **Backward.** A backward root (``evaluate_function: XBackward0``) takes the instance and phase
   of the forward op it differentiates; ops of the SDPA family are attention on their own too.
5. **Kernels.** A GPU activity takes the instance and phase of the innermost CPU range around its
   launch. Kernels with no CPU scope are attention when their name says so: the library catalogue
   (``patterns.KERNEL_CATALOGUE``: FlashAttention 2/3/4, xformers, FlashInfer, vLLM, FlashMLA,
   cuDNN/Transformer Engine, TensorRT-LLM; KV-cache writes there are phase ``layout``), then the
   generic name pattern (fMHA, Inductor's fused softmax...). CUDA-graph replays: ``graphs.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod
from typing import Any, Optional

import numpy as np

from ..trace.arrays import unique_ints
from ..trace.correlate import Links, index_dtype, take_or
from ..trace.records import ANNOTATION, LAUNCH, MODULE, OP, PYFUNC, Trace
from ..trace.shapes import FLOAT_DTYPES, Arg, SignatureArgs
from . import patterns as P
from .structure import StructureTagger

SOURCES = (
    "module",
    "function",
    "annotation",
    "sdpa_op",
    "pattern",
    "kernel_name",
    "gpu_annotation",
    "graph_reference",
    "graph_structure",
    "compiled_structure",
)
_SRC = {s: i for i, s in enumerate(SOURCES)}


@dataclass
class Tagging:
    """Per CPU range and per GPU activity: instance (-1 = not attention), phase and source codes."""

    range_instance: np.ndarray
    range_phase: np.ndarray
    range_source: np.ndarray
    gpu_instance: np.ndarray
    gpu_phase: np.ndarray
    gpu_source: np.ndarray
    gpu_backward: np.ndarray  # bool
    instances: dict[int, dict[str, str]]  # instance id -> {"name", "source"}
    graph: Any = None  # graphs.GraphContext: CUDA-graph replays and how they were attributed

    def phase_name(self, code: int) -> Optional[str]:
        return P.PHASES[code] if code >= 0 else None


class _Ctx:
    def __init__(self, trace: Trace, links: Links, module_re: re.Pattern[str], annotation_re: re.Pattern[str]):
        self.t = trace
        self.L = links
        R = trace.ranges
        self.kind = R["kind"]
        self.name_id = R["name"]
        self.sig = R["sig"]
        self.strings = trace.strings
        self.module_re = module_re
        self.annotation_re = annotation_re
        self._args = SignatureArgs(trace.signatures)
        # per range: the name code of the kernel a launch range launched, -1 elsewhere (a launch unit
        # is what it launched: a Triton attention kernel launched from Python advances the phases)
        self.launched = np.full(len(self.kind), -1, dtype=np.int64)
        gl = links.gpu_launch
        ok = gl >= 0
        self.launched[gl[ok]] = trace.gpu["name"][ok]

    def launched_name(self, r: int) -> Optional[str]:
        code = int(self.launched[r])
        return str(self.strings[code]) if code >= 0 else None

    def launches_attention(self, r: int) -> bool:
        """Whether an op runs attention inside: it launches a kernel that is attention by name (a
        library's custom op this module does not know by name), or an op it wraps is a fused
        attention op (a profiler's wrapper op around aiter::mha_batch_prefill)."""
        for c in self.L.subtree(r).tolist()[1:]:
            k = self.kind[c]
            if k == LAUNCH:
                nm = self.launched_name(c)
                if nm is not None and _attention_kernel_name(nm):
                    return True
            elif k == OP and P.FUSED_OP.search(self.name(c)):
                return True
        return False

    def name(self, r: int) -> str:
        return str(self.strings[self.name_id[r]])

    def args(self, r: int) -> Optional[list[Arg]]:
        return self._args(int(self.sig[r]))


def _root_source(ctx: _Ctx, kinds: np.ndarray, names: list[str]) -> np.ndarray:
    """Per range: the tag source code if the range opens an attention scope, else -1."""
    n = len(kinds)
    src = np.full(n, -1, dtype=np.int8)
    # Decide once per distinct (kind, name).
    width = max(len(names), 1)  # keys within a small range: counted, not sorted (trace/arrays.py)
    pairs = kinds.astype(np.int64) * width + ctx.name_id.astype(np.int64)
    uniq, inverse = unique_ints(pairs, return_inverse=True)
    codes = np.full(len(uniq), -1, dtype=np.int8)
    for j, key in enumerate(uniq.tolist()):
        k, nid = divmod(key, width)
        nm = names[nid]
        c = -1
        if k == MODULE:
            if ctx.module_re.search(P.module_class(nm)):
                c = _SRC["module"]
        elif k == PYFUNC:
            if P.ATTENTION_FUNCTION.search(P.python_function(nm)):
                c = _SRC["function"]
        elif k == ANNOTATION:
            if ctx.annotation_re.search(nm) and not nm.startswith("ProfilerStep"):
                c = _SRC["annotation"]
        elif k == OP:
            if P.SDPA_OP.search(nm) or _is_attention_function(nm):
                c = _SRC["sdpa_op"]
        codes[j] = c
    src[:] = codes[inverse]
    return src


# -- units and phases ------------------------------------------------------------------------
class _Unit:
    __slots__ = ("range", "cat", "op", "fixed_phase", "ranges", "args")

    def __init__(self, r: int, cat: str, op: str = "", fixed_phase: Optional[str] = None):
        self.range = r
        self.cat = cat  # proj | mm | softmax | dropout | scale | mask | layout | fused | rotary | norm | other
        self.op = op
        self.fixed_phase = fixed_phase
        self.args: Optional[list[Arg]] = None  # the op's recorded inputs (op units), for shape rules


def _first_descendant_op(ctx: _Ctx, r: int, wanted: frozenset[str]) -> Optional[str]:
    stack = list(ctx.L.children(r))
    while stack:
        c = int(stack.pop(0))
        if ctx.kind[c] == OP:
            nm = P.short_op(ctx.name(c))
            if nm in wanted:
                return nm
        stack.extend(int(x) for x in ctx.L.children(c))
    return None


def _op_unit(ctx: _Ctx, r: int) -> _Unit:
    name = ctx.name(r)
    op = P.short_op(name)
    if P.FUSED_OP.search(name):
        return _Unit(r, "fused", op)
    fn = _autograd_function_unit(r, name)
    if fn is not None:
        return fn
    if name.startswith("triton_"):
        return _Unit(r, P.triton_unit(name), op)
    if op in P.PROJ_OPS:
        return _Unit(r, "proj", op)
    if op in P.BATCHED_MM_OPS:
        return _Unit(r, "mm", op)
    if op in P.AMBIGUOUS_MM_OPS:
        inner = _first_descendant_op(ctx, r, frozenset({"bmm", "baddbmm", "mm", "addmm"}))
        if inner in ("bmm", "baddbmm"):
            return _Unit(r, "mm", op)
        args = ctx.args(r)
        if args:
            tens = [a.shape for a in args if a.shape is not None]  # the tensors' shapes
            if len(tens) >= 2 and len(tens[1]) == 2 and len(tens[0]) >= 2 and op != "mm":
                return _Unit(r, "proj?", op)
            if len(tens) >= 2 and len(tens[0]) >= 3 and len(tens[1]) >= 3:
                return _Unit(r, "mm", op)
            if len(tens) >= 2 and len(tens[0]) == 2 and len(tens[1]) == 2:
                (m, k), (_, n) = tens[0], tens[1]
                # a 2-D matmul can be single-head attention: QK^T makes a square [S, S] from a
                # thin inner dim, PV consumes a square [S, S]; anything else is a projection
                if not ((m == n and k < m) or (m == k and n < k)):
                    return _Unit(r, "proj", op)
        return _Unit(r, "mm?", op)
    if op in P.SOFTMAX_OPS and not P.LOG_SOFTMAX.search(op):
        return _Unit(r, "softmax", op)
    if op in P.DROPOUT_OPS:
        return _Unit(r, "dropout", op)
    if op in P.SCALE_OPS:
        return _Unit(r, "scale", op)
    if op in P.MASK_OPS:
        return _Unit(r, "mask", op)
    if op in P.LAYOUT_OPS:
        return _Unit(r, "layout", op)
    if op in P.ROTARY_MARKERS:
        return _Unit(r, "rotary?", op)
    if ctx.launches_attention(r):
        return _Unit(r, "fused", op)
    if P.NORM_OP.search(op):
        return _Unit(r, "norm", op)
    return _Unit(r, "other", op)


def _containers(ctx: _Ctx, links: Links, marked: np.ndarray) -> np.ndarray:
    """Attention-named modules that are containers, not one attention call: a model or block class
    whose name says attention (LinearAttentionTransformer, AttentionBlock) around two or more
    attention modules, or around an MLP / feed-forward / experts module. The attention modules
    inside them are the calls; the MLP, norms and the rest of the model are not attention."""
    out = np.zeros(len(marked), dtype=bool)
    idx = np.flatnonzero(marked)
    if not len(idx):
        return out
    parent = links.parent
    is_module = ctx.kind == MODULE
    mlp_names = np.zeros(len(ctx.strings), dtype=bool)
    for nid in unique_ints(ctx.name_id[is_module]).tolist():
        mlp_names[nid] = bool(P.FFN_MODULE.search(P.module_class(ctx.strings[nid])))
    ffn = np.flatnonzero(is_module & mlp_names[ctx.name_id])
    # nearest marked ancestor (strictly above) of each marked module and of each FFN module
    members = np.concatenate([idx, ffn])
    anc = parent[members].astype(np.int64)
    while True:
        open_ = (anc >= 0) & ~marked[np.maximum(anc, 0)]
        if not open_.any():
            break
        anc[open_] = parent[anc[open_]]
    inner = anc[: len(idx)]
    counts = np.bincount(inner[inner >= 0], minlength=len(marked))
    out[counts >= 2] = True
    holds_ffn = anc[len(idx) :]
    out[holds_ffn[holds_ffn >= 0]] = True
    containers: np.ndarray = out & marked
    return containers


def _is_autograd_function(name: str) -> bool:
    """An op named by a custom autograd Function's class (no namespace, CamelCase), forward or
    its ``...Backward`` node."""
    return "::" not in name and name[:1].isupper() and " " not in name


def _is_attention_function(name: str) -> bool:
    """A custom autograd Function that wraps attention (its forward or its backward node)."""
    return _is_autograd_function(name) and bool(P.AUTOGRAD_ATTENTION_FUNCTION.search(name))


def _autograd_function_unit(r: int, name: str) -> Optional[_Unit]:
    """A custom autograd Function (an op with no namespace, named by its class) whose name says what
    it wraps: attention (RopeLoraFlashAttnVarlenFunc), a projection (LinearWithGradAccumulationFP8)
    or a norm. Its kernels are that unit's, whatever ops it runs inside."""
    if not _is_autograd_function(name):
        return None
    if P.AUTOGRAD_ATTENTION_FUNCTION.search(name):
        return _Unit(r, "fused", name)
    if P.LINEAR_MODULE.search(name):
        return _Unit(r, "proj", name)
    if P.NORM_MODULE.search(name):
        return _Unit(r, "norm", name)
    return None


def _units(ctx: _Ctx, root: int) -> list[_Unit]:
    """Units of an instance rooted at a range, in call order."""
    out: list[_Unit] = []

    def visit(r: int, top: bool) -> None:
        k = ctx.kind[r]
        name = ctx.name(r)
        if k == MODULE and not top:
            cls = P.module_class(name)
            if P.LINEAR_MODULE.search(cls):
                out.append(_Unit(r, "proj", cls))
                return
            if P.NORM_MODULE.search(cls):
                out.append(_Unit(r, "norm", cls))
                return
            if P.ROTARY_NAME.search(cls):
                out.append(_Unit(r, "rotary", cls, "rotary"))
                return
            if P.DROPOUT_MODULE.search(cls):
                out.append(_Unit(r, "dropout", cls))
                return
            if P.SOFTMAX_MODULE.search(cls):
                out.append(_Unit(r, "softmax", cls))
                return
        elif k == PYFUNC and not top:
            if P.ROTARY_NAME.search(P.python_function(name)):
                out.append(_Unit(r, "rotary", P.python_function(name), "rotary"))
                return
        elif k == OP:
            fn = _autograd_function_unit(r, name) if not top else None
            if fn is not None:
                out.append(fn)
                return
            kids = ctx.L.children(r)
            # Wrappers that are not operators (torch.compile's "Torch-Compiled Region",
            # "CompiledFunction"...) hold the real ops: look inside them.
            wrapper = "::" not in name and any(ctx.kind[c] != LAUNCH for c in kids)
            if not wrapper and (not P.TRANSPARENT_OP.search(name) or len(kids) == 0):
                out.append(_op_unit(ctx, r))
                return
        elif k == LAUNCH:
            out.append(_Unit(r, "launch", ctx.launched_name(r) or name))
            return
        for c in ctx.L.children(r):
            visit(int(c), False)

    visit(root, True)
    for u in out:
        if ctx.kind[u.range] == OP:
            u.args = ctx.args(u.range)
        elif u.cat == "softmax":  # a Softmax module: the shapes of the op it runs
            u.args = _first_descendant_args(ctx, u.range)
    return out


def _first_descendant_args(ctx: _Ctx, r: int) -> Optional[list[Arg]]:
    stack = list(ctx.L.children(r))
    while stack:
        c = int(stack.pop(0))
        if ctx.kind[c] == OP:
            a = ctx.args(c)
            if a:
                return a
        stack.extend(int(x) for x in ctx.L.children(c))
    return None


# -- score-side phases from the shapes: position bias, additive scores --------------------------
_TABLE_LOOKUPS = frozenset({"embedding", "index", "index_select", "gather", "take", "embedding_bag"})
_ADD_OPS = frozenset({"add", "add_"})


def _tensors(u: _Unit) -> list[Arg]:
    return [a for a in (u.args or []) if a.is_tensor]


def _score_shape(units: list[_Unit]) -> Optional[tuple[int, ...]]:
    """The score tensor's shape: the first softmax's input (.., [H,] Sq, Sk), or, where a fused
    kernel never writes the scores, the one its q [B, H, Sq, D] and k [B, Hk, Sk, D] make (T5 on
    SDPA still computes its position bias and passes it as attn_mask)."""
    for u in units:
        if u.cat == "softmax":
            t = [a.dims for a in _tensors(u) if len(a.dims) >= 2]
            if t:
                return t[0]
    for u in units:
        if u.cat == "fused":
            t = [a.dims for a in _tensors(u)]
            if len(t) >= 2 and len(t[0]) == 4 and len(t[1]) == 4:
                return (t[0][0], t[0][1], t[0][2], t[1][2])
    return None


def _position_bias(units: list[_Unit], score: Optional[tuple[int, ...]]) -> set[int]:
    """Units that compute a position bias and add it to the scores, from what their shapes say.

    A position bias is computed from positions, not from q or k: its tensors carry no batch and
    no head dimension — at most the score's (Sq, Sk) — and it is integer arithmetic on position
    indices (T5's relative-position buckets: sub, abs, log of the distances, min, where) or a
    lookup in a per-head table (``embedding``/``index`` of a [buckets, H] table: T5, Swin's
    relative-position table); its views take the [Sq, Sk, H] result to [1, H, Sq, Sk], and an add
    of such a per-head, batch-free tensor to the score-sized scores applies it (a mask is the
    same for every head: its head dim is 1). Runs of such units are kept whole, so the float
    steps between integer ones (T5's log of the distance) are bias too."""
    if score is None or len(score) < 3:
        return set()
    sq, sk = score[-2], score[-1]
    heads = score[-3] if len(score) >= 4 else None
    n_score = prod(score)
    pos_dims = {1, sq, sk}
    bias_dims = pos_dims | ({heads, sq * sk} if heads else set())
    bias_numel = (heads or 0) * sq * sk

    def shapes(u: _Unit) -> list[tuple[int, ...]]:
        return [a.dims for a in _tensors(u) if len(a.dims) > 0]  # 0-dim: wrapped scalars

    def positional(u: _Unit) -> bool:  # all tensors batch- and head-free, at most [Sq, Sk]
        sh = shapes(u)
        return bool(sh) and all(len(d) <= 2 and all(x in pos_dims for x in d) for d in sh)

    def integer(u: _Unit) -> bool:
        return any((a.dtype or "").startswith(("int", "uint")) for a in _tensors(u) if a.dims)

    def lookup(u: _Unit) -> bool:  # a per-head table read by position indices
        t = _tensors(u)
        return (
            u.op in _TABLE_LOOKUPS
            and heads is not None
            and heads > 1
            and bool(t)
            and len(t[0].dims) == 2
            and heads in t[0].dims
            and (t[0].dtype or "") in FLOAT_DTYPES
        )

    def bias_shaped(u: _Unit) -> bool:  # the looked-up bias on its way to [1, H, Sq, Sk]
        sh = shapes(u)
        return bool(sh) and bias_numel > 0 and all(prod(d) == bias_numel and all(x in bias_dims for x in d) for d in sh)

    def bias_add(u: _Unit) -> bool:
        sh = shapes(u)
        if u.op not in _ADD_OPS or len(sh) != 2:
            return False
        a, b = sh
        per_head = [d for d in (a, b) if prod(d) == bias_numel and len(d) >= 3 and d[-3] == heads]
        return bias_numel > 0 and prod(a) == n_score and bool(per_head) and prod(b) < n_score

    seeds = [i for i, u in enumerate(units) if (positional(u) and integer(u)) or lookup(u)]
    adds = [i for i, u in enumerate(units) if bias_add(u)]
    # integer position arithmetic alone may build a mask; a bias needs its per-head table or its add
    if not seeds or not (adds or any(lookup(units[i]) for i in seeds)):
        return set()

    def member(u: _Unit) -> bool:
        if u.cat in ("mm", "mm?", "proj", "proj?", "fused", "softmax", "norm", "launch"):
            return False
        return positional(u) or lookup(u) or bias_shaped(u) or not shapes(u)

    out: set[int] = set()
    i = 0
    while i < len(units):
        if not member(units[i]):
            i += 1
            continue
        j = i
        while j < len(units) and member(units[j]):
            j += 1
        run = range(i, j)
        if any(k in seeds for k in run):
            out.update(k for k in run if shapes(units[k]) or units[k].cat in ("mask", "other", "scale"))
        i = j
    if out:
        out.update(adds)
    return out


def _additive_scores(units: list[_Unit]) -> set[int]:
    """Additive (Bahdanau) attention: before any QK^T, a broadcast add of projected queries
    [.., Tq, 1, A] and keys [.., 1, Tk, A] into [.., Tq, Tk, A] (an outer sum, not a mask: each
    operand is broadcast along a dimension the other has), then the tanh and the projection to
    one score per (query, key) up to the softmax. Returns the units of that score computation."""
    first_core = next((i for i, u in enumerate(units) if u.cat in ("mm", "fused")), len(units))
    soft = next((i for i, u in enumerate(units) if u.cat == "softmax"), None)
    if soft is None:
        return set()
    for i, u in enumerate(units[: min(first_core, soft)]):
        sh = [a.dims for a in _tensors(u) if a.dims]
        if u.op not in _ADD_OPS or len(sh) != 2 or len(sh[0]) != len(sh[1]) or len(sh[0]) < 3:
            continue
        a, b = sh
        a_bcast = any(x == 1 < y for x, y in zip(a, b))
        b_bcast = any(y == 1 < x for x, y in zip(a, b))
        if a_bcast and b_bcast:
            return {i} | {k for k in range(i + 1, soft) if units[k].cat in ("other", "proj", "proj?", "mm?", "scale")}
    return set()


def _resolve_ambiguous(units: list[_Unit]) -> None:
    """mm?/proj?: a matmul is core attention when a softmax follows it before the next matmul
    (QK^T) or follows a softmax/dropout since the previous matmul (PV); else a projection."""
    mm_like = {"mm", "mm?", "proj", "proj?", "fused"}
    for i, u in enumerate(units):
        if u.cat not in ("mm?", "proj?"):
            continue
        nxt = next((v.cat for v in units[i + 1 :] if v.cat in mm_like | {"softmax"}), None)
        prv = next((v.cat for v in reversed(units[:i]) if v.cat in mm_like | {"softmax", "dropout"}), None)
        if nxt == "softmax" or prv in ("softmax", "dropout"):
            u.cat = "mm"
        else:
            u.cat = "proj"


# _assign_phases' word for a unit of the block around attention, not of attention
BLOCK = "block"


def _assign_phases(units: list[_Unit]) -> list[str]:
    additive = _additive_scores(units)
    for i in additive:  # the score projection (v^T ...) is no Q/K/V projection
        if units[i].cat in ("proj?", "mm?"):
            units[i].cat = "other"
    _resolve_ambiguous(units)
    bias = _position_bias(units, _score_shape(units)) - additive
    # Rotary without a named function: neg/sin/cos between the projections and QK^T (not the
    # neg of T5's unidirectional position buckets: that is position bias).
    first_core = next((i for i, u in enumerate(units) if u.cat in ("mm", "softmax", "fused")), len(units))
    last_proj = max((i for i, u in enumerate(units[:first_core]) if u.cat == "proj"), default=-1)
    rotary_mode = any(
        u.cat == "rotary?" for i, u in enumerate(units[last_proj + 1 : first_core], last_proj + 1) if i not in bias
    )
    stage = 0  # 0 before QK^T, 1 after QK^T, 2 after softmax, 3 after PV / fused
    phases = []
    proj_seen = out_seen = False
    for i, u in enumerate(units):
        c = u.cat
        # the block's own work inside an attention-named scope is not attention: its input norm
        # (a norm before any projection: T5LayerSelfAttention's pre-norm, a VAE attention block's
        # group norm), and after the output projection the residual branch's dropout, the residual
        # add and the norm after it (BertSelfOutput)
        if (c == "norm" and not proj_seen and stage == 0) or (
            out_seen and (c in ("norm", "dropout") or (c == "mask" and u.op in ("add", "add_")))
        ):
            phases.append(BLOCK)
            continue
        if u.fixed_phase:
            ph = u.fixed_phase
        elif i in additive:
            ph, stage = "additive_score", max(stage, 1)
        elif i in bias:
            ph = "position_bias"
        elif c == "proj":
            # between QK^T and PV only an input projection can still be needed (torch.compile
            # schedules the V projection after the softmax)
            ph = "out_proj" if stage == 3 else "qkv_proj"
        elif c == "mm":
            if stage in (1, 2):
                ph, stage = "pv_matmul", 3
            else:
                ph, stage = "qk_matmul", 1
        elif c == "fused":
            ph, stage = "fused_attention", 3
        elif c == "norm":
            ph = "qkv_proj" if stage == 0 else "other"
        elif c == "softmax":
            ph, stage = "softmax", 2
        elif c == "dropout":
            ph = "dropout" if stage == 2 else "other"
        elif c == "scale":
            if stage == 0 and rotary_mode and last_proj < i < first_core and u.op.startswith("mul"):
                ph = "rotary"
            else:
                ph = "scale" if stage <= 1 else "other"
        elif c == "mask":
            if stage == 0 and rotary_mode and last_proj < i < first_core and u.op in ("add", "add_", "sub"):
                ph = "rotary"
            else:
                ph = "mask" if stage <= 1 else ("mask" if stage == 2 and u.op.startswith("masked_fill") else "other")
        elif c == "rotary?":
            ph = "rotary" if stage == 0 else "other"
        elif c == "layout":
            if (
                stage == 0
                and rotary_mode
                and last_proj < i < first_core
                and u.op in ("cat", "slice", "narrow", "chunk")
            ):
                ph = "rotary"
            else:
                ph = "layout"
        elif c == "launch":
            tp = P.triton_phase(u.op)
            if _attention_kernel_name(u.op):
                ph, stage = "fused_attention", 3
            elif tp == "matmul":
                ph, stage = ("pv_matmul", 3) if stage in (1, 2) else ("qk_matmul", 1)
            elif tp:
                ph = tp
                if tp == "softmax":
                    stage = 2
                elif tp == "fused_attention":
                    stage = 3
            else:
                ph = "other"
        else:
            ph = "other"
        proj_seen = proj_seen or c == "proj"
        out_seen = out_seen or ph == "out_proj"
        phases.append(ph)
    return phases


def _pattern_instances(ctx: _Ctx, inst: np.ndarray, broot: np.ndarray) -> list[list[int]]:
    """Unscoped eager attention: sibling ops matmul -> (scale/mask/layout)* -> softmax ->
    (dropout/layout/mask)* -> matmul. Returns the unit ranges of each match."""
    R = ctx.t.ranges
    names = ctx.strings
    soft_ids = {i for i, s in enumerate(names) if P.short_op(s) in P.SOFTMAX_OPS}
    if not soft_ids:
        return []
    cand = [
        r
        for r in np.flatnonzero(
            np.isin(ctx.name_id, list(soft_ids)) & (ctx.kind == OP) & (inst < 0) & (broot < 0)
        ).tolist()
    ]
    found: list[list[int]] = []
    used: set[int] = set()
    parent = ctx.L.parent
    # (parent, None), or (-1, thread) for top-level ops -> (sibling ops, their positions)
    siblings: dict[tuple[int, Optional[int]], tuple[list[int], dict[int, int]]] = {}
    for r in cand:
        top = r
        while parent[top] >= 0 and ctx.kind[parent[top]] == OP:
            top = int(parent[top])
        if top in used:
            continue
        p = int(parent[top])
        key: tuple[int, Optional[int]] = (p, None) if p >= 0 else (-1, int(R["thread"][top]))
        hit = siblings.get(key)
        if hit is None:  # built once per parent: per candidate it was O(n^2) on long flat threads
            if p >= 0:
                sib = [int(c) for c in ctx.L.children(p) if ctx.kind[c] == OP]
            else:
                th = R["thread"][top]
                roots = ctx.L.roots
                sib = [int(c) for c in roots[(R["thread"][roots] == th) & (ctx.kind[roots] == OP)]]
            hit = siblings[key] = (sib, {c: k for k, c in enumerate(sib)})
        sib, position = hit
        i = position.get(top)
        if i is None:
            continue
        qk = pv = None
        for j in range(i - 1, max(-1, i - 9), -1):
            u = _op_unit(ctx, sib[j])
            if u.cat in ("mm", "mm?"):
                qk = j
                break
            if u.cat not in ("scale", "mask", "layout", "other"):
                break
        for j in range(i + 1, min(len(sib), i + 9)):
            u = _op_unit(ctx, sib[j])
            if u.cat in ("mm", "mm?"):
                pv = j
                break
            if u.cat not in ("dropout", "layout", "mask", "scale", "other"):
                break
        if qk is None or pv is None:
            continue
        lo, hi = _projection_reach(ctx, sib, qk, pv, inst, used)
        group = sib[lo : hi + 1]
        if any(inst[g] >= 0 or g in used for g in group):
            continue
        used.update(group)
        found.append(group)
    return found


# sibling ops the reach from the core to its projections walks at most (an MHA's in-projection is
# a few views, transposes and mask ops away from its QK^T)
_REACH = 24


def _projection_reach(ctx: _Ctx, sib: list[int], qk: int, pv: int, inst: np.ndarray, used: set[int]) -> tuple[int, int]:
    """An unscoped eager call's extent among its sibling ops: back from QK^T over the mask, scale and
    layout ops to the input projection, forward from PV over layout ops to the output projection and
    past it the ops that read the attention weights (need_weights' head average). Where no
    projection is within reach on a side, that side stays at the core."""

    def free(j: int) -> bool:
        return inst[sib[j]] < 0 and sib[j] not in used

    lo = qk
    for j in range(qk - 1, max(-1, qk - 1 - _REACH), -1):
        if not free(j):
            break
        u = _op_unit(ctx, sib[j])
        if u.cat in ("proj", "proj?"):
            lo = j
            # the call's mask made before its projection (F.multi_head_attention_forward turns a
            # bool key-padding mask into an additive one first: zeros_like, masked_fill_)
            k = lo - 1
            while k >= max(0, lo - _REACH) and free(k):
                if P.short_op(ctx.name(sib[k])) in _MASK_BUILDERS:
                    lo = k
                elif _op_unit(ctx, sib[k]).cat not in ("layout", "proj", "proj?"):
                    break
                k -= 1
            break
        if u.cat not in ("scale", "mask", "layout", "other", "rotary?"):
            break
    hi = pv
    for j in range(pv + 1, min(len(sib), pv + 1 + _REACH)):
        if not free(j):
            break
        u = _op_unit(ctx, sib[j])
        if u.cat in ("proj", "proj?"):
            hi = j
            break
        if u.cat not in ("layout", "other"):
            break
    if hi > pv:  # the attention weights' reads after the output projection (need_weights' head average)
        score = _score_numel(ctx, sib[qk])
        for j in range(hi + 1, min(len(sib), hi + 1 + _REACH)):
            if not score or not free(j):
                break
            if any(prod(a.dims) == score for a in (ctx.args(sib[j]) or []) if a.is_tensor and a.dims):
                hi = j
            elif _op_unit(ctx, sib[j]).cat != "layout":
                break
    return lo, hi


# ops that build an additive mask from a bool one
_MASK_BUILDERS = frozenset(
    {"zeros_like", "zeros", "full", "full_like", "masked_fill", "masked_fill_", "fill_", "where"}
)


def _score_numel(ctx: _Ctx, qk_op: int) -> int:
    """Elements of the score matrix a QK^T matmul makes (batch·heads × Sq × Sk), 0 when unknown."""
    t = [a.dims for a in (ctx.args(qk_op) or []) if a.is_tensor and len(a.dims) >= 2]
    if len(t) < 2:
        return 0
    q, k = t[-2], t[-1]  # baddbmm(bias, q, k^T): the last two; bmm / matmul: both
    return int(prod(q[:-1]) * k[-1]) if q[-1] == k[-2] else 0


def call_numbers(trace: Trace, tagging: Tagging) -> dict[int, int]:
    """The public number of every attention call: 0, 1, 2... in the order its first kernel ran
    on the GPU, then the calls without kernels in the order they started on the CPU. Internal
    instance ids are range indices, which depend on how the file was read; these do not."""
    keys: dict[int, tuple[int, int]] = {}
    g_inst = tagging.gpu_instance
    att = np.flatnonzero(g_inst >= 0)
    if len(att):
        ids, inv = unique_ints(g_inst[att], return_inverse=True)
        start = np.full(len(ids), np.iinfo(np.int64).max)
        np.minimum.at(start, inv, trace.gpu["ts_ns"][att])
        keys.update(zip(ids.tolist(), ((0, t) for t in start.tolist())))
    r_inst = tagging.range_instance
    sel = np.flatnonzero(r_inst >= 0)
    if len(sel):
        ids, inv = unique_ints(r_inst[sel], return_inverse=True)
        start = np.full(len(ids), np.iinfo(np.int64).max)
        np.minimum.at(start, inv, trace.ranges["ts_ns"][sel])
        for i, t in zip(ids.tolist(), start.tolist()):
            keys.setdefault(i, (1, t))
    return {i: n for n, i in enumerate(sorted(keys, key=lambda i: (*keys[i], i)))}


# False: every instance's units and phases worked out anew (tests compare the two)
_REUSE = True


def tag(
    trace: Trace,
    links: Links,
    module_pattern: str = P.DEFAULT_MODULE_PATTERN,
    annotation_pattern: str = P.DEFAULT_ANNOTATION_PATTERN,
) -> Tagging:
    ctx = _Ctx(trace, links, re.compile(module_pattern), re.compile(annotation_pattern))
    R, G = trace.ranges, trace.gpu
    n = len(R["kind"])
    kinds = R["kind"]
    broot = links.backward_root
    own = _root_source(ctx, kinds, trace.strings)

    # 1. forward scopes. Module and function scopes take precedence over annotations and SDPA
    #    ops around them (a record_function around several layers must not merge them into one
    #    call); among scopes of one precedence the outermost wins (BertAttention > BertSelfAttention).
    fwd_mask = broot < 0
    own = np.where(_containers(ctx, links, own == _SRC["module"]), -1, own)
    strong = (own == _SRC["module"]) | (own == _SRC["function"])
    inst_strong = links.outermost_marked(strong & fwd_mask)
    inst_weak = links.outermost_marked((own >= 0) & ~strong & fwd_mask)
    inst = np.where(fwd_mask, np.where(inst_strong >= 0, inst_strong, inst_weak), -1)
    source = np.full(n, -1, dtype=np.int8)
    ok = inst >= 0
    source[ok] = own[inst[ok]]
    instances: dict[int, dict[str, str]] = {}
    for root in unique_ints(inst[ok]).tolist():
        instances[root] = {"name": ctx.name(root), "source": SOURCES[own[root]]}

    phase = np.full(n, -1, dtype=np.int8)
    # 2. pattern instances (no scope at all)
    groups = _pattern_instances(ctx, inst, broot)
    # 3. phases, forward side. Every step repeats its calls: an instance whose subtree has the
    #    same shape, kinds, names and recorded inputs as one already read gets the same phases at
    #    the same places (units and phases are functions of the subtree alone), and the units of
    #    one instance are disjoint subtrees, so its phases are one pattern over its slice.
    pre_pos, pre_size, _ = links.preorder()
    patterns: dict[tuple[bytes, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for root in instances:
        sub = links.subtree(root)
        key = (
            kinds[sub].tobytes(),
            ctx.name_id[sub].tobytes(),
            ctx.sig[sub].tobytes(),
            pre_size[sub].tobytes(),
            ctx.launched[sub].tobytes(),
        )
        hit = patterns.get(key) if _REUSE else None
        if hit is None:
            units = _units(ctx, root)
            codes = np.full(len(sub), -1, dtype=np.int8)
            p0 = int(pre_pos[root])
            for u, ph in zip(units, _assign_phases(units)):
                a = int(pre_pos[u.range]) - p0
                codes[a : a + int(pre_size[u.range])] = P.PHASE_INDEX[ph] if ph != BLOCK else -2
            where = np.flatnonzero(codes >= 0)
            hit = patterns[key] = (where, codes[where], np.flatnonzero(codes == -2))
        phase[sub[hit[0]]] = hit[1]
        if len(hit[2]):  # the block's own units leave the call
            inst[sub[hit[2]]] = -1
            source[sub[hit[2]]] = -1
    for group in groups:
        gid = group[0]
        units = [_op_unit(ctx, g) for g in group]
        instances[gid] = {"name": "matmul-softmax-matmul at " + ctx.name(gid), "source": "pattern"}
        for u, ph in zip(units, _assign_phases(units)):
            if ph == BLOCK:
                continue
            sub = links.subtree(u.range)
            inst[sub] = gid
            source[sub] = _SRC["pattern"]
            phase[sub] = P.PHASE_INDEX[ph]

    # 4. backward: everything under a backward root takes the instance, phase and source of the
    #    forward op it differentiates; under an unlinked root, SDPA-family ops stand on their own.
    fwd = links.forward_of
    fused_phase = P.PHASE_INDEX["fused_attention"]
    bmask = broot >= 0
    roots = np.flatnonzero(broot == np.arange(n))
    f = fwd[roots]
    ok = f >= 0
    ok[ok] = inst[f[ok]] >= 0
    root_inst = np.full(n, -1, dtype=np.int64)
    root_phase = np.full(n, -1, dtype=np.int8)
    root_src = np.full(n, -1, dtype=np.int8)
    root_inst[roots[ok]] = inst[f[ok]]
    root_phase[roots[ok]] = phase[f[ok]]
    root_src[roots[ok]] = source[f[ok]]
    b_idx = np.flatnonzero(bmask)
    via = root_inst[broot[b_idx]]
    linked = b_idx[via >= 0]
    inst[linked] = root_inst[broot[linked]]
    phase[linked] = root_phase[broot[linked]]
    source[linked] = root_src[broot[linked]]
    unlinked = np.zeros(n, dtype=bool)
    unlinked[b_idx[via < 0]] = True
    sd = links.outermost_marked((own == _SRC["sdpa_op"]) & unlinked)
    opened = np.flatnonzero(unlinked & (sd >= 0))
    if len(opened):
        top = unique_ints(sd[opened])
        top_phase = {}
        for r in top.tolist():
            nm = ctx.name(r)
            top_phase[r] = fused_phase if P.FUSED_OP.search(nm) or not P.TRANSPARENT_OP.search(nm) else -1
            instances.setdefault(r, {"name": nm, "source": "sdpa_op"})
        inst[opened] = sd[opened]
        source[opened] = _SRC["sdpa_op"]
        phase[opened] = np.array([top_phase[r] for r in sd[opened].tolist()], dtype=np.int8)

    # collective communication is never attention: ranges under a collective lose their tags
    names_all = trace.strings
    comm_names = _names_where(
        names_all,
        np.concatenate([ctx.name_id[(kinds != LAUNCH) & (kinds != MODULE)], trace.gpu["name"]]),
        P.is_communication,
    )
    comm_range = _communication_ranges(ctx, links, comm_names)
    inst[comm_range] = -1
    phase[comm_range] = -1
    source[comm_range] = -1

    # 5. GPU activities
    gp = links.gpu_parent
    has = gp >= 0
    g_inst = take_or(inst, gp)
    g_phase = take_or(phase, gp).astype(np.int8)
    g_src = take_or(source, gp).astype(np.int8)
    g_bwd = has & (take_or(broot, gp) >= 0)
    # ...or inside a range that marks backward work run outside the autograd engine's ranges
    user_range = np.isin(kinds, (ANNOTATION, PYFUNC))
    marks_bwd = _names_where(names_all, ctx.name_id[user_range], lambda s: bool(P.BACKWARD_RANGE.search(s)))
    bwd_range = marks_bwd[ctx.name_id] & user_range
    if bwd_range.any():
        g_bwd |= has & take_or(links.outermost_marked(bwd_range) >= 0, gp, False).astype(bool)
    # a launch on an autograd thread outside any evaluate_function is still backward
    # kernels in scope whose phase is unknown: use the kernel name, else "other"
    names = trace.strings
    gname = G["name"]
    other = P.PHASE_INDEX["other"]
    # kernels launched straight from Python in an attention scope (a custom Triton kernel, say),
    # or whose unit says nothing, get the phase their name implies
    by_kernel_name: dict[int, int] = {}
    for k in np.flatnonzero((g_inst >= 0) & ((g_phase == other) | (g_phase < 0))).tolist():
        nid = int(gname[k])
        code = by_kernel_name.get(nid)
        if code is None:
            code = by_kernel_name[nid] = _phase_by_kernel_name(names[nid])
        if code >= 0:
            g_phase[k] = code
        elif g_phase[k] < 0:
            g_phase[k] = other
    # copies launched inside a matmul, projection or softmax unit (non-contiguous inputs,
    # autocast casts, .float() around softmax) are data movement: report them as layout
    copy_ids = {i for i, s in enumerate(names) if P.short_op(s) in P.COPY_OPS}
    if copy_ids:
        gop = links.gpu_op
        refine = {P.PHASE_INDEX[p] for p in P.COPY_REFINED_PHASES}
        layout = P.PHASE_INDEX["layout"]
        cand = np.flatnonzero((g_inst >= 0) & (gop >= 0))
        copies = np.isin(g_phase[cand], list(refine)) & np.isin(R["name"][gop[cand]], list(copy_ids))
        g_phase[cand[copies]] = layout
    # kernels of a composite fused op (a custom autograd Function around attention: LoRA up-
    # projections, rotary, casts and the attention kernel in one Function) are what they compute
    _split_composite(ctx, links, g_inst, g_phase, names)
    # helper kernels of a fused attention op (zero-fills, memsets, copies) keep their own phase
    # (and a library's KV-cache writes and quantisation kernels launched inside its attention op:
    # the catalogue's phase, layout)
    helper_names = np.zeros(len(names), dtype=bool)
    for nid in unique_ints(gname[g_phase == fused_phase]).tolist():
        helper_names[nid] = bool(P.HELPER_KERNEL.search(names[nid])) or _library_data_movement(names[nid])
    helpers = (g_phase == fused_phase) & helper_names[gname]
    g_phase[helpers] = P.PHASE_INDEX["layout"]
    # communication kernels by their own name (a collective launched with no CPU range around it)
    g_comm = take_or(comm_range, gp, False).astype(bool) | comm_names[gname]
    g_inst[g_comm] = -1
    g_phase[g_comm] = -1
    g_src[g_comm] = -1
    # unscoped kernels that are attention by name
    uniq = unique_ints(gname[g_inst < 0]).tolist()
    by_name = {}
    for nid in uniq:
        nm = names[nid]
        if comm_names[nid]:
            continue
        lib = P.library_kernel(nm)  # the library catalogue first: it knows KV-cache writes
        if lib is not None:
            by_name[nid] = P.PHASE_INDEX[lib.phase]
        elif P.attention_by_name(nm):
            by_name[nid] = fused_phase
        else:
            tp = P.triton_phase(nm)
            if tp in ("softmax", "fused_attention"):
                by_name[nid] = P.PHASE_INDEX[tp]
    if by_name:
        phase_of_name = np.full(len(names), -1, dtype=np.int64)
        phase_of_name[list(by_name)] = list(by_name.values())
        unscoped = np.flatnonzero(g_inst < 0)
        code = phase_of_name[gname[unscoped]]
        hit = unscoped[code >= 0]
        g_inst[hit] = n + hit  # kernel-only instances: ids past the range indices
        g_phase[hit] = code[code >= 0]
        g_src[hit] = _SRC["kernel_name"]
        for k, nid in zip(hit.tolist(), gname[hit].tolist()):
            instances[n + k] = {"name": names[nid], "source": "kernel_name"}
    _compiled_structure(ctx, links, g_inst, g_phase, g_src, instances)
    return Tagging(
        range_instance=inst.astype(index_dtype(n), copy=False),  # range indices: int32 (1.5 MB per 370k ranges)
        range_phase=phase,
        range_source=source,
        gpu_instance=g_inst,
        gpu_phase=g_phase,
        gpu_source=g_src,
        gpu_backward=g_bwd.astype(bool),
        instances=instances,
    )


def _library_data_movement(nm: str) -> bool:
    """A library kernel that only moves data for attention (a KV-cache write, a quantisation)."""
    lib = P.library_kernel(nm)
    return lib is not None and lib.phase == "layout"


def _attention_kernel_name(nm: str) -> bool:
    """A kernel whose name says it computes attention (a library's or by the generic pattern)."""
    lib = P.library_kernel(nm)
    if lib is not None:
        return lib.phase == "fused_attention"
    return P.attention_by_name(nm)


def _split_composite(ctx: _Ctx, links: Links, g_inst: np.ndarray, g_phase: np.ndarray, names: list[str]) -> None:
    """Within each call of a custom autograd Function that wraps attention, the kernels that are not
    attention by name get the phase of what they compute, by their place around its attention
    kernels: GEMMs before the first one are input projections, after the last one the output
    projection; rotary kernels rotary; the rest (casts to FP8, transposes, copies) layout."""
    from .structure import GEMM_KERNEL, ROTARY_KERNEL

    fused = P.PHASE_INDEX["fused_attention"]
    gop = links.gpu_op
    cand = np.flatnonzero((g_inst >= 0) & (g_phase == fused) & (gop >= 0))
    if not len(cand):
        return
    is_fn = _names_where(names, ctx.name_id[gop[cand]], _is_attention_function)
    cand = cand[is_fn[ctx.name_id[gop[cand]]]]
    if not len(cand):
        return
    ts = ctx.t.gpu["ts_ns"]
    gname = ctx.t.gpu["name"]
    memo: dict[int, tuple[bool, bool, bool]] = {}
    # forwards first: a backward node has the gradients of the projections its forward had (an
    # output projection inside the Function, or only input ones such as LoRA up-projections)
    ops = unique_ints(gop[cand]).tolist()
    fn_name = {op: ctx.name(op) for op in ops}
    ops.sort(key=lambda op: fn_name[op].endswith("Backward"))
    out_side: dict[str, bool] = {}
    for op in ops:
        name = fn_name[op]
        backward = name.endswith("Backward")
        ks = cand[gop[cand] == op]
        ks = ks[np.argsort(ts[ks], kind="stable")]
        kinds = []
        for k in ks.tolist():
            nid = int(gname[k])
            t = memo.get(nid)
            if t is None:
                nm = names[nid]
                t = memo[nid] = (
                    _attention_kernel_name(nm),
                    bool(GEMM_KERNEL.search(nm)),
                    bool(ROTARY_KERNEL.search(nm)),
                )
            kinds.append(t)
        att = [i for i, t in enumerate(kinds) if t[0]]
        if not att:
            continue
        first, last = att[0], att[-1]
        if not backward:
            out_side[name] = out_side.get(name, False) or any(t[1] for t in kinds[last + 1 :])
        # backward runs the layer in reverse: the output projection's gradients come first, and
        # only where the forward had one; anything else is an input projection's (or its recompute)
        has_out = out_side.get(name[: -len("Backward")], False) if backward else True
        for i, (k, (is_att, gemm, rot)) in enumerate(zip(ks.tolist(), kinds)):
            if is_att or first < i < last:
                continue
            if gemm:
                outside = (i < first) if backward else (i > last)
                g_phase[k] = P.PHASE_INDEX["out_proj" if outside and has_out else "qkv_proj"]
            elif rot:
                g_phase[k] = P.PHASE_INDEX["rotary"]
            else:
                g_phase[k] = P.PHASE_INDEX["layout"]


def _phase_by_kernel_name(nm: str) -> int:
    """The phase code a kernel's name implies inside an attention scope, or -1: a library kernel's
    catalogue phase, fused attention by name, an Inductor kernel's phase from the ops in its name
    (layout when it fuses only copies and views)."""
    lib = P.library_kernel(nm)
    if lib is not None:
        return P.PHASE_INDEX[lib.phase]
    if P.attention_by_name(nm):
        return P.PHASE_INDEX["fused_attention"]
    tp = P.triton_phase(nm)
    if tp and tp != "matmul":
        return P.PHASE_INDEX[tp]
    if P.triton_unit(nm) == "layout":
        return P.PHASE_INDEX["layout"]
    return -1


def _names_where(names: list[str], used: np.ndarray, test: Any) -> np.ndarray:
    """Per string of the trace: ``test(name)`` for the strings in ``used`` (name codes, repeated),
    False for the rest; each distinct name tested once."""
    out = np.zeros(len(names), dtype=bool)
    for nid in unique_ints(np.asarray(used, dtype=np.int64)).tolist():
        out[nid] = bool(test(names[nid]))
    return out


def _communication_ranges(ctx: _Ctx, links: Links, comm_names: np.ndarray) -> np.ndarray:
    """Per CPU range: whether it is, or runs inside, a collective (an op, an annotation such as
    ``nccl:all_reduce`` or a Python frame such as ``tensor_model_parallel_all_reduce``)."""
    kinds = ctx.kind
    is_comm: np.ndarray = comm_names[ctx.name_id] & (kinds != LAUNCH) & (kinds != MODULE)
    if not is_comm.any():
        return is_comm
    inside: np.ndarray = links.outermost_marked(is_comm) >= 0
    return inside


def _compiled_structure(
    ctx: _Ctx,
    links: Links,
    g_inst: np.ndarray,
    g_phase: np.ndarray,
    g_src: np.ndarray,
    instances: dict[int, dict[str, str]],
) -> None:
    """Compiled code (torch.compile without CUDA graphs) has no module scope inside its compiled
    region: the attention kernel is found (by its SDPA op or its name), the projections, rotary
    and KV-cache writes around it are not. They are given the same structure a CUDA-graph replay
    of those kernels gets (graphs.structure_phases): within one compiled region, in GPU order,
    from the first GEMM after the last normalisation up to the attention kernel, and after it up
    to the first GEMM. Only kernels no scope tagged are placed (source ``compiled_structure``).
    Where the region's ops record shapes, the projections are then read from them
    (:func:`_projections_by_shape`)."""
    trace = ctx.t
    names = trace.strings
    R = trace.ranges
    if not len(R["kind"]) or not any(P.COMPILED_REGION.search(s) for s in names):
        return
    is_region = np.array([bool(P.COMPILED_REGION.search(s)) for s in names], dtype=bool)[R["name"]]
    region = links.outermost_marked(is_region & np.isin(R["kind"], (OP, ANNOTATION)))
    k_region = take_or(region, links.gpu_parent)
    G = trace.gpu
    fused = P.PHASE_INDEX["fused_attention"]
    src = _SRC["compiled_structure"]
    idx = np.flatnonzero(k_region >= 0)
    if not len(idx) or not (g_phase[idx] == fused).any():
        return
    idx = idx[np.lexsort((G["ts_ns"][idx], k_region[idx]))]
    cuts = np.flatnonzero(np.diff(k_region[idx])) + 1
    structure = StructureTagger(names)
    for g in np.split(idx, cuts):
        att = (g_inst[g] >= 0) & (g_phase[g] == fused)
        if att.any():
            structure.tag(g, G["name"][g], att, g_inst, g_phase, g_src, src)
            _projections_by_shape(ctx, links, g, att, g_inst, g_phase, g_src, src)


# ops whose kernel is a projection GEMM in compiled code (Inductor's extern kernels)
_GEMM_OPS = frozenset({"mm", "addmm", "linear", "_scaled_mm", "matmul"})


def _gemm_mkn(args: list[Arg], op: str) -> Optional[tuple[int, int, int]]:
    """(M, K, N) of a projection op's recorded inputs, or None."""
    t = [a.dims for a in args if a.is_tensor and a.dims]
    if op == "addmm" and len(t) >= 3:
        t = t[1:]
    if len(t) < 2 or len(t[0]) < 2 or len(t[1]) != 2:
        return None
    x, w = t[0], t[1]
    m = int(prod(x[:-1]))
    if op == "linear":  # weight [N, K]
        return (m, int(w[1]), int(w[0])) if w[1] == x[-1] else None
    return (m, int(w[0]), int(w[1])) if w[0] == x[-1] else None


def _projections_by_shape(
    ctx: _Ctx,
    links: Links,
    g: np.ndarray,
    att: np.ndarray,
    g_inst: np.ndarray,
    g_phase: np.ndarray,
    g_src: np.ndarray,
    src: int,
) -> None:
    """Projections of a compiled region's attention calls by what their GEMMs compute, where the
    ops record shapes: between the previous call and this one, every GEMM whose output is as wide
    as the call's heads (heads × head dim of q, k or v) is an input projection, and the norms
    between the first of them and the call are QK-norms; after the call, per stream (each M, the
    token count, of the input projections) the first GEMM reading that width back is the output
    projection. Joint attention (SD3.5's MMDiT: an image and a text stream, each with q/k/v
    interleaved with QK-norms, and two output projections around the next layer norm) is read
    whole this way, where the name-only structure stops at the first norm."""
    gop = links.gpu_op
    norm_phase = P.PHASE_INDEX["qkv_proj"]
    # one call per run of adjacent attention kernels of one instance (a split-KV kernel and its combine)
    pos: list[tuple[int, int]] = []
    for i in np.flatnonzero(att).tolist():
        if pos and pos[-1][1] == i - 1 and g_inst[g[i]] == g_inst[g[pos[-1][0]]]:
            pos[-1] = (pos[-1][0], i)
        else:
            pos.append((i, i))
    info: list[tuple[int, Optional[tuple[int, int, int]]]] = []  # per kernel of g: (op, (M, K, N) or None)
    for k in g.tolist():
        r = int(gop[k])
        mkn = None
        if r >= 0:
            op = P.short_op(ctx.name(r))
            if op in _GEMM_OPS:
                mkn = _gemm_mkn(ctx.args(r) or [], op)
        info.append((r, mkn))
    start = 0
    for n, (a, b) in enumerate(pos):
        r = info[a][0]
        dims = [x.dims for x in ((ctx.args(r) or []) if r >= 0 else []) if x.is_tensor and len(x.dims) == 4][:3]
        widths = {int(d[1] * d[3]) for d in dims} | {int(d[2] * d[3]) for d in dims}
        if not widths:
            start = b + 1
            continue
        inst = int(g_inst[g[a]])
        shaped = {i: mkn for i, (_, mkn) in enumerate(info[start:a], start) if mkn is not None}
        wide = [i for i, mkn in shaped.items() if mkn[2] in widths]
        # the projections of one call read one hidden state: the input width of the one nearest the
        # call (an MLP's down projection before them writes the same width from another)
        hidden = shaped[wide[-1]][1] if wide else None
        ins = [i for i in wide if shaped[i][1] == hidden]
        ms = {shaped[i][0] for i in ins}
        for i in ins:
            k = int(g[i])
            if g_inst[k] < 0 or g_src[k] == src:
                g_inst[k], g_phase[k], g_src[k] = inst, P.PHASE_INDEX["qkv_proj"], src
        if ins:  # the QK-norms between the projections and the call
            for i in range(ins[0], a):
                k = int(g[i])
                if g_inst[k] < 0 and _is_norm_kernel(ctx.t.strings[ctx.t.gpu["name"][k]]):
                    g_inst[k], g_phase[k], g_src[k] = inst, norm_phase, src
        nxt = pos[n + 1][0] if n + 1 < len(pos) else len(g)
        start = b + 1  # the next call's input side begins after this call's output projections
        for m in ms:
            for i in range(b + 1, nxt):
                mkn = info[i][1]
                # the output projection reads the heads' width back into the hidden state's
                if mkn is not None and mkn[0] == m and mkn[1] in widths and mkn[2] == hidden:
                    k = int(g[i])
                    if g_inst[k] < 0 or g_src[k] == src:
                        g_inst[k], g_phase[k], g_src[k] = inst, P.PHASE_INDEX["out_proj"], src
                    start = max(start, i + 1)
                    break


def _is_norm_kernel(name: str) -> bool:
    from .structure import NORM_KERNEL

    return bool(NORM_KERNEL.search(name))
