"""The head dimension of attention, from the attention op's own shapes: one home for the rule,
read by the advice (head-dim alignment) and anything else that names a head dim.

Only shapes in which the head dimension *is* a known axis count:

* a fused or SDPA-family kernel: its cost formula's ``d`` (query/key) and ``dv`` (value), read from
  the op's q/k/v with their layout;
* an eager **forward** QK^T matmul ([.., Sq, D] x [.., D, Sk]): its contraction dim ``k`` is D;
* an eager **forward** PV matmul ([.., Sq, Sk] x [.., Sk, Dv]): its output dim ``n`` is Dv.

Not a backward kernel of either: dQ = dS·K and dK = dSᵀ·Q contract over the keys or the queries
(on a Swin window that is 49, the 7x7 window's tokens, while the head dim is 32); nor PV's
contraction (the keys)."""

from __future__ import annotations

from typing import Any, Optional


def head_dims(phase: Optional[str], direction: Optional[str], cost_detail: Optional[dict[str, Any]]) -> set[int]:
    """The head dims a kernel row's cost inputs show (empty when they show none)."""
    cd = cost_detail or {}
    out: set[int] = set()
    if "d" in cd:  # SDPA-family / fused formula inputs: q/k head dim and v head dim
        for name in ("d", "dv"):
            v = cd.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                out.add(v)
        return out
    # QK^T [.., Sq, D] x [.., D, Sk] contracts over D; PV [.., Sq, Sk] x [.., Sk, Dv] yields Dv
    axis = "k" if phase == "qk_matmul" else "n" if phase == "pv_matmul" else None
    if axis and direction != "backward":
        v = cd.get(axis)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            out.add(v)
    return out
