"""Side-by-side comparison of two reports, per phase and direction.

A deliberately small function of two report summaries (reports without their kernel rows) so
that an engine-level comparison can replace it: ``compare(base, new) -> dict`` with the shape
documented in docs/plugin.md (``/compare``).
"""
from __future__ import annotations

from typing import Optional

TOTALS = ("gpu_time_us", "gpu_busy_us", "attention_time_us", "attention_share", "core_attention_time_us",
          "projection_time_us", "forward_time_us", "backward_time_us", "fused_time_us",
          "unfused_core_time_us", "attention_kernels", "instances")
_SIDE = ("time_us", "share", "kernels", "instances", "flops", "bytes", "achieved_flops_per_s",
         "achieved_bytes_per_s", "compute_util", "memory_util", "bound", "estimated", "cost_coverage")


def _delta(a: Optional[float], b: Optional[float]) -> dict:
    if a is None or b is None:
        return {"delta": None, "ratio": None, "speedup": None}
    return {"delta": round(b - a, 6),
            "ratio": round(b / a, 4) if a else None,
            "speedup": round(a / b, 4) if b else None}


def compare(base: dict, new: dict) -> dict:
    """Per-(phase, direction) rows with both sides, the differences, and the totals."""
    def by_key(rep):
        return {(p["phase"], p["direction"]): p for p in rep.get("phases") or []}

    bp, np_ = by_key(base), by_key(new)
    order = []
    for src in (base.get("phases") or [], new.get("phases") or []):
        for p in src:
            k = (p["phase"], p["direction"])
            if k not in order:
                order.append(k)
    order.sort(key=lambda k: (k[1] != "forward",))   # stable: engine order inside a direction
    rows = []
    for k in order:
        a, b = bp.get(k), np_.get(k)
        label = (a or b)["label"]
        row = {"phase": k[0], "direction": k[1], "label": label, "core": (a or b).get("core"),
               "base": {f: a.get(f) for f in _SIDE} if a else None,
               "new": {f: b.get(f) for f in _SIDE} if b else None}
        row.update(_delta(a["time_us"] if a else 0.0, b["time_us"] if b else 0.0))
        rows.append(row)
    totals = {}
    for f in TOTALS:
        a, b = base.get(f), new.get(f)
        totals[f] = {"base": a, "new": b, **_delta(a, b)}
    return {
        "phases": rows,
        "totals": totals,
        "devices": {"base": _dev(base), "new": _dev(new)},
        "notes": _notes(base, new),
    }


def _dev(rep: dict) -> Optional[dict]:
    d = rep.get("device")
    return {"label": d.get("label"), "name": d.get("name"), "basis": d.get("basis")} if d else None


def _notes(base: dict, new: dict) -> list[str]:
    out = []
    db, dn = base.get("device") or {}, new.get("device") or {}
    if db.get("name") != dn.get("name"):
        out.append(f"different GPUs: {db.get('name')} vs {dn.get('name')}")
    sb, sn = len(base.get("steps") or []), len(new.get("steps") or [])
    if base.get("step") is None and new.get("step") is None and sb != sn:
        out.append(f"different numbers of profiled steps ({sb} vs {sn}): compare one step of each, "
                   "or time per step")
    return out
