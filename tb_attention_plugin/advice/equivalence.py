"""What a trace shows about an attention call's meaning, so that no fix changes the model's result.

A rule may propose ``is_causal=True`` only where the trace shows that the mask it replaces *is* the
causal one and the same for every sequence: an encoder's key-padding mask (BERT) expanded to
``[B, 1, Sq, Sk]`` is score-shaped too, and ``is_causal`` would make the encoder causal and drop the
padding. Evidence of a causal mask: an op that builds one at the call's ``(Sq, Sk)`` (``triu`` /
``tril``, or a comparison of position ranges broadcast to ``[Sq, Sk]``), or a frame of a library's
causal-mask builder; evidence against it: a mask that varies per sequence (a batch dim > 1 with a
stride), or an encoder's padding-mask builder (``_prepare_4d_attention_mask``, ``get_extended_attention_mask``).

Soft-capped scores (Gemma 2: ``tanh(scores / cap) * cap`` before the softmax) are something no SDPA
backend computes: the fused option there is FlexAttention with a ``score_mod``, and an SDPA flag
(``enable_gqa``) is no fix for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..attention import patterns as P
from ..trace.records import OP, PYFUNC

_CAUSAL_BUILDERS = frozenset({"triu", "tril", "triu_", "tril_"})
_COMPARISONS = frozenset({"le", "lt", "ge", "gt"})
# ops that fold a per-sequence key-padding mask into an attention mask
_COMBINERS = frozenset(
    {
        "__and__",
        "bitwise_and",
        "logical_and",
        "__or__",
        "bitwise_or",
        "logical_or",
        "masked_fill",
        "masked_fill_",
        "where",
        "rsub",
        "index",
        "expand",
    }
)
# with_stack frames of libraries' mask builders
_CAUSAL_FRAME = re.compile(
    r"(?i)causal_mask|_prepare_4d_causal_attention_mask|create_causal_mask|_update_causal_mask|make_causal_mask|"
    r"causal_mask_function|sliding_window_causal"
)
_PADDING_FRAME = re.compile(
    r"(?i)_prepare_4d_attention_mask(?!_for_sdpa_causal)|_expand_mask\b|get_extended_attention_mask|"
    r"invert_attention_mask|padding_mask_function|bidirectional_mask"
)


@dataclass(frozen=True)
class MaskFacts:
    """What the trace shows of one call's mask."""

    causal: bool  # shown to be the causal mask, the same for every sequence: is_causal=True is equivalent
    reason: str  # the evidence, or why is_causal would change the result


def mask_facts(run: Any, sq: int, sk: int, mask_shape: Optional[tuple[int, ...]] = None) -> MaskFacts:
    """Whether ``is_causal=True`` is equivalent to the mask a call at ``(sq, sk)`` applies."""
    if sq != sk:
        return MaskFacts(False, f"Sq {sq} ≠ Sk {sk}: is_causal aligns the diagonal differently from a cached mask")
    seen = _builders(run)
    if seen.padding:
        return MaskFacts(False, f"{seen.padding}: an encoder's key-padding mask, not a causal one")
    pad = seen.per_sequence.get(sk)
    if pad and mask_shape and len(mask_shape) >= 3 and mask_shape[0] > 1:
        return MaskFacts(False, f"{pad}: the mask differs per sequence (key padding), which is_causal would drop")
    hit = seen.causal.get((sq, sk)) or seen.causal_frame
    if hit:
        return MaskFacts(True, hit)
    return MaskFacts(
        False, "nothing in the trace shows the mask is the causal one (no triu/tril or causal-mask builder)"
    )


@dataclass
class _Builders:
    causal: dict[tuple[int, int], str]  # (Sq, Sk) -> the op that built a causal mask of that size
    causal_frame: Optional[str]  # a library's causal-mask builder frame
    padding: Optional[str]  # a library's padding-mask builder frame
    per_sequence: dict[int, str]  # Sk -> a mask op that combines a per-sequence [B, Sk] mask


def _builders(run: Any) -> _Builders:
    """The mask builders the trace records, read once per run."""
    got: Optional[_Builders] = getattr(run, "_mask_builders", None)
    if got is not None:
        return got
    out = _Builders({}, None, None, {})
    tr = getattr(run, "trace", None)
    if tr is not None and len(tr.ranges["kind"]):
        names, R = tr.strings, tr.ranges
        kinds = R["kind"]
        for nid in set(R["name"][(kinds == OP) | (kinds == PYFUNC)].tolist()):
            nm = names[nid]
            fn = P.python_function(nm)
            if out.causal_frame is None and _CAUSAL_FRAME.search(fn):
                out.causal_frame = f"the causal-mask builder {fn} runs in the trace"
            if out.padding is None and _PADDING_FRAME.search(fn):
                out.padding = f"the padding-mask builder {fn} runs in the trace"
        wanted = [i for i, s in enumerate(names) if P.short_op(s) in _CAUSAL_BUILDERS | _COMPARISONS | _COMBINERS]
        rows: list[int] = np.flatnonzero(np.isin(R["name"], wanted) & (kinds == OP)).tolist() if wanted else []
        for r in rows:
            op = P.short_op(names[R["name"][r]])
            dims = [a.dims for a in run.op_args(r) if a.is_tensor and a.dims]
            if op in _COMBINERS:
                # a per-sequence mask ([B, Sk], [B, 1, 1, Sk]) combined into the mask: key padding
                for d in dims:
                    if len(d) in (2, 3, 4) and d[0] > 1 and all(x == 1 for x in d[1:-1]) and d[-1] > 1:
                        out.per_sequence.setdefault(d[-1], f"aten::{op} combines a per-sequence mask {list(d)}")
            elif op in _CAUSAL_BUILDERS and dims and len(dims[0]) >= 2:
                sq, sk = dims[0][-2], dims[0][-1]
                out.causal.setdefault((sq, sk), f"aten::{op} of a [{sq}, {sk}] tensor builds a causal mask")
            elif op in _COMPARISONS and len(dims) == 2:
                # query positions [.., Sq, 1] against key positions [.., 1, Sk], either way round: the
                # causal comparison kv_idx <= q_idx (transformers' sdpa_mask builds it so)
                for q, kv in (dims, dims[::-1]):
                    if len(q) >= 2 and len(kv) >= 2 and q[-1] == 1 and kv[-2] == 1 and q[-2] > 1 and kv[-1] > 1:
                        msg = f"aten::{op} of query positions {list(q)} and key positions {list(kv)}"
                        out.causal.setdefault((q[-2], kv[-1]), msg)
    run._mask_builders = out
    return out


def softcap(rows: list[Any]) -> Optional[str]:
    """The evidence that an eager call soft-caps its scores (a tanh between QK^T and the softmax),
    or None."""
    for k in rows:
        if (
            k.get("phase") in ("scale", "mask", "other")
            and "tanh" in ((k.get("op") or "") + " " + (k.get("cost_op") or "") + " " + (k.get("name") or "")).lower()
        ):
            return f"a tanh ({k.get('op') or 'kernel'}) on the scores before the softmax: logit soft-capping"
    return None


_TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


def sdpa_line(
    mask: str, gqa: bool = False, dropout: bool = False, mask_cast: Optional[str] = None, scale: Optional[str] = None
) -> str:
    """The SDPA call of a fix, equivalent to the call it replaces: ``mask`` is ``"causal"`` (shown
    causal: is_causal=True), ``"tensor"`` (the mask or bias the call applies, kept as attn_mask,
    cast to ``mask_cast`` where its dtype rules the fused backends out) or ``"none"``."""
    args = ["q", "k", "v"]
    if mask == "causal":
        args.append("is_causal=True")
    elif mask == "tensor":
        args.append("attn_mask=mask" + (f".to({_TORCH_DTYPE.get(mask_cast, mask_cast)})" if mask_cast else ""))
    if dropout:
        args.append("dropout_p=p if self.training else 0.0")
    if gqa:
        args.append("enable_gqa=True")
    if scale:
        args.append(f"scale={scale}")
    return f"out = F.scaled_dot_product_attention({', '.join(args)})"
