"""Kernel names as the dashboard shows them: the CLI's shortening, sent beside the full name.

A demangled C++ kernel name carries its return type, namespaces, every template argument and the
parameter list: 300 characters and more. The CLI's tables show
:func:`~tb_attention_plugin.formats.short_kernel_name` (``at::native::cunn_SoftMaxForward``);
the routes send the same text as ``short_name`` next to every ``name`` the page displays (kernel
rows, roofline points; for the summary's kernels, a phase's longest and a finding's, a map
``short_names`` beside the summary, which stays the engine's), so there is one
shortening, in Python, and the page never prints a raw name where a short one fits (the full
name stays in ``name``: titles, the kernel's details, the search).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

# a shortened name is cut in the middle to this many characters (a long Triton or library name
# without templates is not shortened by the rule)
SHORT_MAX = 120


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """The name the page shows for a kernel: the CLI's short form, cut to SHORT_MAX."""
    from ..formats import cut_middle, short_kernel_name  # the CLI's formatters (no engine)

    return cut_middle(short_kernel_name(name), SHORT_MAX)


def add_short(row: Optional[dict[str, Any]], key: str = "name") -> None:
    """``row["short_name"]`` from ``row[key]`` (in place; rows without a text name are left alone)."""
    if row is not None and isinstance(row.get(key), str):
        row["short_name"] = short_name(row[key])


def summary_short_names(summary: Optional[dict[str, Any]]) -> dict[str, str]:
    """``{name: short name}`` of the kernels a report summary names (its phases' ``top_kernels``,
    its findings' ``evidence.kernels``): sent beside the summary, which stays the engine's."""
    out: dict[str, str] = {}
    names = [k.get("name") for p in (summary or {}).get("phases") or [] for k in p.get("top_kernels") or []]
    for a in (summary or {}).get("advice") or []:
        ev = a.get("evidence") if isinstance(a, dict) else None
        ks = ev.get("kernels") if isinstance(ev, dict) else None
        names += [k.get("name") for k in ks or [] if isinstance(k, dict)]
    for n in names:
        if isinstance(n, str) and n not in out:
            out[n] = short_name(n)
    return out
