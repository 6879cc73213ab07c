"""Which implementation ran core attention: the SDPA backend or what stands in for it.

``compare`` and ``check`` name the backend of each side ("cuDNN (SDPA) -> FlashAttention (SDPA)"),
because a backend change explains most attention-time changes between two runs. The backend is
read from the core-attention kernel rows of a report (phase, launching op, kernel name, scope),
so it works on any report, cached or not, without the trace:

* a fused-attention kernel is named by its launching op (``aten::_flash_attention_forward``,
  ``aten::_efficient_attention_*``, ``aten::_cudnn_attention_*``, ``flex_attention``) or, failing
  that, by its kernel name (``pytorch_flash::``, ``fmha_cutlass`` / ``PyTorchMemEffAttention``,
  ``cudnn``, ``flex_attention``, ``triton_``; flash-attn / xFormers / FlashInfer /
  Transformer Engine kernels are "library");
* decomposed core attention (QK^T, softmax, PV ... kernels) is SDPA's math backend when it ran
  inside ``scaled_dot_product_attention``, torch.compile when any of its kernels is a Triton
  kernel, and eager (hand-written matmul-softmax-matmul) otherwise.

Kernels that say nothing (a memset or copy whose op is generic) are not counted.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Optional

from . import patterns as P

BACKEND_LABELS = {
    "flash": "FlashAttention (SDPA)",
    "efficient": "mem-efficient CUTLASS (SDPA)",
    "cudnn": "cuDNN (SDPA)",
    "math": "SDPA math backend",
    "flex": "FlexAttention",
    "compiled": "torch.compile (Triton)",
    "eager": "eager (decomposed)",
    "library": "attention library kernel",
    "fused_other": "other fused kernel",
}
FUSED_BACKENDS = frozenset({"flash", "efficient", "cudnn", "flex", "library", "fused_other"})

# (substring of the launching op or kernel name, backend), first match wins
_FUSED_OPS = (
    ("flex_attention", "flex"),
    ("flash_attention", "flash"),
    ("efficient_attention", "efficient"),
    ("cudnn_attention", "cudnn"),
    ("fused_attention_overrideable", "fused_other"),
)
# PyTorch's own SDPA kernels by name, before the library catalogue (their names are also a
# library's: PyTorch ships copies of FlashAttention-2 and of xFormers' CUTLASS kernels)
_SDPA_NAMES = (
    ("flex_attention", "flex"),
    ("pytorch_flash::", "flash"),
    ("fmha_cutlass", "efficient"),
    ("PyTorchMemEffAttention", "efficient"),
    ("cudnn", "cudnn"),
)
_FUSED_NAMES = (
    ("triton_", "compiled"),
    ("flash_fwd", "library"),
    ("flash_bwd", "library"),
    ("xformers", "library"),
    ("flashinfer", "library"),
    ("fmha", "library"),
    ("fused_attn", "library"),
)
_GENERIC = ("memset", "memcpy", "copy", "elementwise_kernel", "fill")


@functools.lru_cache(maxsize=4096)
def fused_backend(op: Optional[str], name: Optional[str]) -> Optional[str]:
    """The backend of one fused-attention kernel, or None when neither its op nor its name says.
    (Memoised: a pure function of two strings, asked for every call of every step.)"""
    o = (op or "").lower()
    for key, be in _FUSED_OPS:
        if key in o:
            return be
    n = name or ""
    low = n.lower()
    # a Triton template is never a copy or a fill: Inductor names it after the ops fused into it
    # (FP8 Flex: triton_tem_fused__to_copy_clone_flex_attention_...); and a library kernel is what its
    # family says, whatever its template arguments spell (CK's BatchPrefill holds "fill")
    if any(g in low for g in _GENERIC) and not low.startswith("triton_tem") and P.library_kernel(n) is None:
        return None
    for key, be in _SDPA_NAMES:
        if key.lower() in low:
            return be
    if P.library_kernel(n) is not None:  # FlashAttention 2/3/4, FlashInfer, CK, aiter, SageAttention...
        return "library"
    for key, be in _FUSED_NAMES:
        if key.lower() in low:
            return be
    return "fused_other" if n else None


@functools.lru_cache(maxsize=4096)
def library_family(name: Optional[str]) -> Optional[str]:
    """The attention library a kernel name belongs to ("FlashAttention-3", "CK-tile FMHA"...), from
    the catalogue (attention/patterns.py), or None."""
    lib = P.library_kernel(name or "")
    return lib.library if lib is not None else None


def _rows(kernels: Any) -> Iterable[tuple[Any, ...]]:
    """(phase, direction, dur_us, op, name, scope, id) of the attention kernels of a kernel table: the
    engine's columnar table, the dashboard's compact table, or a list of row dicts."""
    import numpy as np

    if kernels is None:
        return []
    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "attention" in cols:  # table.KernelTable
        idx = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))

        def col(c: str) -> list[Any]:
            x = cols.get(c)
            if x is None:
                return [None] * len(idx)
            if hasattr(x, "codes"):
                v = x.vocab
                return [v[i] for i in np.asarray(x.codes)[idx].tolist()]
            if isinstance(x, np.ndarray):
                return list(x[idx].tolist())
            return [x[i] for i in idx.tolist()]

        return zip(*(col(c) for c in ("phase", "direction", "dur_us", "op", "name", "scope", "id")))
    if hasattr(kernels, "text_values") and hasattr(kernels, "attention"):  # server.index.KernelTable
        idx = np.flatnonzero(kernels.attention)

        def col(c: str) -> list[Any]:
            if c in kernels.text:
                v = kernels.text_values[c]
                return [v[i] if i >= 0 else None for i in kernels.text[c][idx].tolist()]
            if c in kernels.cat:
                v = kernels.cat_values.get(c, [])
                return [v[i] if i >= 0 else None for i in kernels.cat[c][idx].tolist()]
            if c in kernels.num:
                return list(kernels.num[c][idx].tolist())
            return [None] * len(idx)

        return zip(*(col(c) for c in ("phase", "direction", "dur_us", "op", "name", "scope", "id")))
    return (
        (k.get("phase"), k.get("direction"), k.get("dur_us"), k.get("op"), k.get("name"), k.get("scope"), k.get("id"))
        for k in kernels
        if k.get("attention")
    )


def backends(kernels: Any, math_ids: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """The core-attention implementations of a report's kernels, longest first:
    ``[{backend, label, time_us, kernels, forward_us, backward_us}]``. ``math_ids``: ids of the
    kernels the trace shows inside SDPA's math backend (the op tree, which the rows do not hold)."""
    memo: dict[tuple[Any, Any], Optional[str]] = {}
    out: dict[tuple[str, Optional[str]], dict[str, Any]] = {}

    def add(be: str, direction: str, d: float, family: Optional[str] = None) -> None:
        e = out.setdefault(
            (be, family),
            {
                "backend": be,
                "family": family,
                "label": family or BACKEND_LABELS[be],
                "time_us": 0.0,
                "kernels": 0,
                "forward_us": 0.0,
                "backward_us": 0.0,
            },
        )
        e["time_us"] += d
        e["kernels"] += 1
        e["backward_us" if direction == "backward" else "forward_us"] += d

    triton = False
    eager: list[tuple[Any, float]] = []
    rows = [r for r in _rows(kernels) if r[0] in P.CORE_PHASES]
    # a kernel that ran with no CPU op (launched before the profiling window opened) is the backend
    # its name has where the same name ran under an op: a flash kernel stays FlashAttention
    by_name: dict[Any, Optional[str]] = {}
    for phase, _, _, op, name, _, _ in rows:
        if phase == "fused_attention" and op and name not in by_name:
            by_name[name] = fused_backend(op, name)
    for phase, direction, dur, op, name, scope, kid in rows:
        d = float(dur or 0.0)
        if d != d:
            d = 0.0
        if phase == "fused_attention":
            key = (op, name)
            be = memo.get(key, "?")
            if be == "?":
                be = memo[key] = (by_name.get(name) if not op else None) or fused_backend(op, name)
            if be is not None:
                add(be, direction, d, library_family(name) if be in ("library", "fused_other") else None)
            continue
        if (
            kid in math_ids
            or "scaled_dot_product_attention" in (scope or "")
            or "_scaled_dot_product_attention_math" in (op or "")
        ):
            add("math", direction, d)
            continue
        triton = triton or (name or "").startswith("triton_")
        eager.append((direction, d))
    for direction, d in eager:
        add("compiled" if triton else "eager", direction, d)
    ordered = sorted(out.values(), key=lambda e: -e["time_us"])
    for e in ordered:
        for k in ("time_us", "forward_us", "backward_us"):
            e[k] = round(e[k], 3)
    return ordered


def describe(rows: list[dict[str, Any]], share: float = 0.05) -> str:
    """A side's backends in words: the main one, and any other above ``share`` of core time
    ("cuDNN (SDPA)", "FlashAttention (SDPA) + eager (decomposed)"); "none" without core attention."""
    total = sum(r["time_us"] for r in rows)
    if not rows or total <= 0:
        return "none"
    return " + ".join(r["label"] for r in rows if r["time_us"] >= share * total) or rows[0]["label"]


def main_backend(rows: list[dict[str, Any]]) -> Optional[str]:
    return str(rows[0]["backend"]) if rows and rows[0]["time_us"] > 0 else None
