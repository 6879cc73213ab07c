"""The head dimension of attention, from the attention op's own shapes: one home for the rule,
read by the advice (head-dim alignment) and anything else that names a head dim.

Only shapes in which the head dimension *is* a known axis count:

* a fused or SDPA-family kernel: its cost formula's ``d`` (query/key) and ``dv`` (value), read from
  the op's q/k/v with their layout;
* an eager **forward** QK^T matmul ([.., Sq, D] x [.., D, Sk]): its contraction dim ``k`` is D.

Not a backward QK^T kernel: dQ = dS·K and dK = dSᵀ·Q contract over the keys or the queries (on a
Swin window that is 49, the 7x7 window's tokens, while the head dim is 32). Not a PV matmul either
(it contracts over the keys)."""

from __future__ import annotations

from typing import Any, Optional


def head_dims(phase: Optional[str], direction: Optional[str], cost_detail: Optional[dict[str, Any]]) -> set[int]:
    """The head dims a kernel row's cost inputs show (empty when they show none)."""
    cd = cost_detail or {}
    out: set[int] = set()
    if "d" in cd:  # SDPA-family / fused formula inputs: q/k head dim and v head dim
        for key in ("d", "dv"):
            v = cd.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                out.add(v)
        return out
    if phase == "qk_matmul" and direction != "backward":
        k = cd.get("k")
        if isinstance(k, int) and not isinstance(k, bool) and k > 0:
            out.add(k)
    return out
