"""Advice from a replay beside the trace: measured gains instead of estimates.

* :func:`apply_measured` — the gain of ``sdpa_math_backend`` and ``fuse_attention`` becomes the
  measured one when the replay covers their calls (the math-backend calls, the eager calls): each
  call's trace time scaled by the replayed ratio of the fastest fused SDPA backend to the backend
  the trace used. The finding says so (``evidence.gain_source: "measured"``, ``evidence.measured``)
  and keeps the model's estimate beside it.
* :func:`measured_backend` — a finding of its own (``measured_backend``), only with a replay: a call
  that already runs a fused kernel (flash, mem-efficient, cuDNN, Flex) for which another backend
  measured at least ``MIN_SPEEDUP`` faster at its shapes.

Without a usable replay both return their input / None: nothing changes.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..formats import us
from .results import FUSED_SDPA, LABELS, measured_alternative, usable_calls

MIN_SPEEDUP = 1.10  # another backend must be at least this much faster to be advised
MIN_SHARE = 0.01  # ... and save at least this share of attention time
_FUSED = ("flash", "efficient", "cudnn", "flex")
_WHAT = {"sdpa_math_backend": ("math",), "fuse_attention": ("eager",)}


def _shape(c: dict[str, Any]) -> str:
    q, k = c.get("q_shape") or [], c.get("k_shape") or []
    if c.get("kind") in ("sdpa", "decode", "flex", "eager") and len(q) == 4 and len(k) == 4:
        s = f"B{q[0]} H{q[1]}" + (f"/{k[1]}" if k[1] != q[1] else "") + f" Sq{q[2]} Sk{k[2]} D{q[3]}"
    else:
        s = "q " + "x".join(str(x) for x in q)
    s += f" {c.get('dtype')}"
    if c.get("causal"):
        s += " causal"
    return s + (" fwd+bwd" if "backward" in (c.get("directions") or []) else " fwd")


def _device(report: dict[str, Any]) -> str:
    m = (report.get("replay") or {}).get("measured") or {}
    return str(m.get("device") or "this GPU")


def _summary(report: dict[str, Any], m: dict[str, Any], vs: str) -> str:
    rows = sorted(m["calls"], key=lambda r: -r["gain_us"])
    parts = []
    for r in rows[:3]:
        name, was = LABELS.get(r["backend"], r["backend"]), vs or LABELS.get(r["trace_backend"])
        times = f"{us(r['replayed_current_us'])} → {us(r['replayed_best_us'])} per call"
        parts.append(f"{name} {r['speedup']:.2g}× faster than {was} at {_shape(_call(report, r['id']))} ({times})")
    more = f" and {len(rows) - 3} more call(s)" if len(rows) > 3 else ""
    return f"measured on {_device(report)}: " + "; ".join(parts) + more


def _call(report: dict[str, Any], cid: str) -> dict[str, Any]:
    for c in (report.get("replay") or {}).get("calls") or []:
        if c["id"] == cid:
            return c
    return {}


def apply_measured(findings: list[dict[str, Any]], report: dict[str, Any], severity: Callable[[Any], str]) -> None:
    """Measured gains for the findings whose calls the replay covers (in place)."""
    calls = usable_calls(report)
    if not calls:
        return
    for f in findings:
        backends = _WHAT.get(f.get("id", ""))
        if not backends:
            continue
        mine = [c for c in calls if c.get("trace_backend") in backends]
        # every call of that backend must be in the replay, not only some
        every = [c for c in (report.get("replay") or {}).get("calls") or [] if c.get("trace_backend") in backends]
        if not mine or len(mine) != len(every):
            continue
        m = measured_alternative(report, mine, FUSED_SDPA)
        if m is None:
            continue
        removable = f.get("removable_us")
        gain = min(m["gain_us"], removable) if isinstance(removable, (int, float)) else m["gain_us"]
        ev = f.setdefault("evidence", {})
        ev["gain_source"] = "measured"
        ev["measured"] = dict(m, device=_device(report), file=(report.get("replay") or {}).get("file"))
        # a replay measures attention GPU time: it replaces the GPU figure, and the headline gain
        # only where the finding is on that basis
        f["gpu_gain_us"] = round(gain, 3)
        if f.get("gain_basis", "gpu") == "gpu":
            ev["estimated_gain_us"] = f.get("estimated_gain_us")  # the model's, kept beside the measured one
            f["estimated_gain_us"] = round(gain, 3)
            f["severity"] = severity(f["estimated_gain_us"])
        vs = "the math backend" if backends == ("math",) else "the eager pattern"
        f["detail"] = f"{f.get('detail', '')} Replay: {_summary(report, m, vs)}; measured gain {us(gain)}."


def measured_backend(report: dict[str, Any], attention_time_us: float) -> Optional[dict[str, Any]]:
    """``measured_backend``: calls on a fused kernel that another backend ran measurably faster."""
    calls = [c for c in usable_calls(report) if c.get("trace_backend") in _FUSED]
    if not calls or attention_time_us <= 0:
        return None
    rows, gain, removable = [], 0.0, 0.0
    for c in calls:
        m = measured_alternative(report, [c], _FUSED + ("compiled",))
        if m is None or not m["calls"]:
            continue
        r = m["calls"][0]
        if (r["speedup"] or 0) < MIN_SPEEDUP:
            continue
        rows.append(r)
        gain += r["gain_us"]
        removable += r["trace_time_us"]
    if not rows or gain < MIN_SHARE * attention_time_us:
        return None
    best = max(rows, key=lambda r: r["gain_us"])
    label = LABELS.get(best["backend"], best["backend"])
    m = {"calls": rows, "gain_us": round(gain, 3), "current_us": round(removable, 3)}
    return {
        "id": "measured_backend",
        "title": f"A faster attention backend, measured on {_device(report)}: {label}",
        "detail": (
            f"Replay of {len(rows)} attention call(s) at their recorded shapes: {_summary(report, m, '')}. "
            f"Scaling each call's kernel time in this trace by the replayed ratio saves {us(gain)}."
        ),
        "evidence": {
            "gain_source": "measured",
            "time_us": round(removable, 3),
            "share_of_attention": round(removable / attention_time_us, 4),
            "measured": dict(m, device=_device(report), file=(report.get("replay") or {}).get("file")),
        },
        "estimated_gain_us": round(min(gain, removable), 3),
        "removable_us": round(removable, 3),
        "how": _how(best["backend"]),
    }


def _how(backend: str) -> str:
    if backend in FUSED_SDPA:
        name = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}[backend]
        return (
            f"Ask SDPA for it: `with torch.nn.attention.sdpa_kernel([SDPBackend.{name}]):` around the attention "
            "call (it raises, with the reason, if the inputs do not qualify); the replay ran exactly these inputs. "
            "Check the speed-up in the model: a replay runs the call alone, without the model's memory pressure "
            "or overlap."
        )
    if backend == "flex":
        return (
            "Use FlexAttention: `torch.compile(torch.nn.attention.flex_attention.flex_attention)(q, k, v, "
            "block_mask=create_block_mask(mask_mod, ...))` with the call's mask as mask_mod; build the block mask "
            "once per shape, not per call."
        )
    return "torch.compile the attention function (the replay compiled the recorded pattern alone)."
