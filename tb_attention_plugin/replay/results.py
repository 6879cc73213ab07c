"""Replay results beside a trace: ``<trace file>.replay.json``, written by the emitted script.

The file is matched to the trace's calls by id (a hash of each call's signature, replay/calls.py):
a call of the trace whose id the file holds gets ``replayed`` — per backend its status, its time
per direction (kernel time from the script's profiler pass, the trace's own measure, else CUDA
event time), its error against the math backend — and the fastest backend that passed the check.

What the advice reads is :func:`replay_times` (``{call_id: {backend: {forward, backward, total,
basis}}}``) and :func:`measured_alternative`; both give nothing without a usable replay, so a
trace without one is analysed exactly as before. A replay is not used for gains (only shown) when
it was run at scaled-down shapes (``--scale-down``, a test of the script) or on another GPU than
the trace's.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional

from ..attention.backends import BACKEND_LABELS

REPLAY_SCHEMA = 1
MAX_BYTES = 32 << 20
LABELS = dict(BACKEND_LABELS, eager="eager (as recorded)", compiled="torch.compile (eager pattern)")
# the SDPA backends that replace a math-backend or eager call (what sdpa_math_backend / fuse_attention advise)
FUSED_SDPA = ("flash", "efficient", "cudnn")
OK_CHECKS = ("ok", "reference")


class ReplayFileError(ValueError):
    """A replay file that cannot be used (one line: why)."""


def read(path: str) -> dict[str, Any]:
    """The parsed replay file, checked for the fields the analysis reads."""
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise ReplayFileError(f"{size} bytes, more than the {MAX_BYTES >> 20} MB read for a replay")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeError, json.JSONDecodeError) as e:
        raise ReplayFileError(f"not readable as JSON ({e})") from None
    if not isinstance(data, dict) or data.get("tool") != "tb-attention replay":
        raise ReplayFileError("not a tb-attention replay result")
    if data.get("schema") != REPLAY_SCHEMA:
        raise ReplayFileError(f"replay schema {data.get('schema')!r}, this version reads {REPLAY_SCHEMA}")
    if not isinstance(data.get("calls"), list):
        raise ReplayFileError("no 'calls' list")
    return data


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _direction(d: Any) -> tuple[Optional[float], Optional[float]]:
    """(kernel time, event time) of one direction's measurement."""
    if not isinstance(d, dict):
        return None, None
    return _num(d.get("kernel_us")), _num(d.get("time_us"))


def summarize(rec: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
    """A call's ``replayed`` block from its record in the replay file."""
    dirs = call.get("directions") or ["forward"]
    rows = []
    for b in rec.get("backends") or []:
        if not isinstance(b, dict) or not isinstance(b.get("backend"), str):
            continue
        be = b["backend"]
        kf, ef = _direction(b.get("forward"))
        kb, eb = _direction(b.get("backward"))
        err = b.get("error_vs_math") if isinstance(b.get("error_vs_math"), dict) else {}
        rows.append(
            {
                "backend": be,
                "label": LABELS.get(be, be),
                "status": b.get("status") if b.get("status") in ("ok", "refused", "error", "skipped") else "error",
                "reason": b.get("reason") if isinstance(b.get("reason"), str) else None,
                "forward_us": ef,
                "backward_us": eb if "backward" in dirs else None,
                "kernel_forward_us": kf,
                "kernel_backward_us": kb if "backward" in dirs else None,
                "error_vs_math": {"forward": _num(err.get("forward")), "backward": _num(err.get("backward"))}
                if err
                else None,
                "check": b.get("check") if isinstance(b.get("check"), str) else None,
                "first_run_s": _num(b.get("first_run_s")),
            }
        )
    usable = [r for r in rows if _usable(r, dirs)]
    basis = "kernel" if usable and all(_total(r, dirs, "kernel") is not None for r in usable) else "event"
    for r in rows:
        r["total_us"] = _total(r, dirs, basis) if _usable(r, dirs) else None
    tb = call.get("trace_backend")
    cur = next((r for r in rows if r["backend"] == tb and r["total_us"]), None)
    best = min((r for r in rows if r["total_us"]), key=lambda r: r["total_us"], default=None)
    out: dict[str, Any] = {
        "basis": basis,
        "trace_backend": tb,
        "backends": rows,
        "best": best["backend"] if best else None,
        "speedup": round(cur["total_us"] / best["total_us"], 3) if cur and best and best["total_us"] else None,
    }
    if rec.get("error"):
        out["error"] = str(rec["error"])[:300]
    return out


def _usable(r: dict[str, Any], dirs: list[str]) -> bool:
    return r["status"] == "ok" and r["check"] in OK_CHECKS and r["forward_us"] is not None


def _total(r: dict[str, Any], dirs: list[str], basis: str) -> Optional[float]:
    keys = ("kernel_forward_us", "kernel_backward_us") if basis == "kernel" else ("forward_us", "backward_us")
    f = r[keys[0]]
    if f is None:
        return None
    if "backward" in dirs:
        b = r[keys[1]]
        if b is None:
            return None
        return round(f + b, 3)
    return round(f, 3)


def _norm(name: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name or "").lower())


def same_device(a: Any, b: Any) -> bool:
    x, y = _norm(a), _norm(b)
    return bool(x and y) and (x in y or y in x)


def attach(found: dict[str, Any], rep: dict[str, Any], sidecars: Any) -> dict[str, Any]:
    """The ``replay`` block: the calls, and the first replay file beside the trace that reads."""
    block = dict(found, file=None, measured=None, warnings=[])
    files = list(getattr(sidecars, "replay", ()) or ())
    for name, _, _ in files:
        try:
            data = read(sidecars.path(name))
        except ReplayFileError as e:
            block["warnings"].append(f"{name}: {e}")
            continue
        _match(block, data, name, rep)
        break
    for w in block["warnings"]:
        rep.setdefault("warnings", []).append(f"replay: {w}")
    return block


def _match(block: dict[str, Any], data: dict[str, Any], name: str, rep: dict[str, Any]) -> None:
    recs: dict[str, dict[str, Any]] = {
        str(r["id"]): r for r in data["calls"] if isinstance(r, dict) and isinstance(r.get("id"), str)
    }
    matched = 0
    for c in block["calls"]:
        rec = recs.get(c["id"])
        if rec is not None:
            c["replayed"] = summarize(rec, c)
            matched += 1
    dev: dict[str, Any] = data["device"] if isinstance(data.get("device"), dict) else {}
    trace_dev = (rep.get("device") or {}).get("name")
    reasons = []
    if data.get("scaled_down"):
        reasons.append("it was run at scaled-down shapes (--scale-down, a test of the script)")
    if dev.get("name") and trace_dev and not same_device(dev.get("name"), trace_dev):
        reasons.append(f"it ran on {dev.get('name')}, the trace on {trace_dev}")
    settings = data["settings"] if isinstance(data.get("settings"), dict) else {}
    if not str(settings.get("device", "cuda")).startswith("cuda"):
        reasons.append("it ran on the CPU")
    ids = {c["id"] for c in block["calls"]}
    block["file"] = name
    block["measured"] = {
        "device": dev.get("name"),
        "torch": data.get("torch"),
        "cuda": data.get("cuda"),
        "created": data.get("created"),
        "scaled_down": bool(data.get("scaled_down")),
        "calls_matched": matched,
        "calls_in_file": len(recs),
        "unmatched_ids": sorted(i for i in recs if i not in ids)[:20],
        "used_for_advice": not reasons and matched > 0,
        "not_used_because": "; ".join(reasons) or None,
    }
    if reasons and matched:
        block["warnings"].append(f"{name} is shown but not used for the advice: " + "; ".join(reasons))
    if not matched:
        block["warnings"].append(
            f"{name} holds none of this trace's calls (ids {', '.join(sorted(recs)[:3])}...): "
            "another trace's replay, or the trace was re-recorded with other shapes"
        )


# ------------------------------------------------------------------ what the advice reads


def _block(report_or_block: dict[str, Any]) -> dict[str, Any]:
    if "calls" in report_or_block and "measured" in report_or_block:
        return report_or_block
    return report_or_block.get("replay") or {}


def usable_calls(report_or_block: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls whose replay may stand in for estimates (none when the replay is not usable)."""
    b = _block(report_or_block)
    if not (b.get("measured") or {}).get("used_for_advice"):
        return []
    return [c for c in b.get("calls") or [] if c.get("replayed")]


def replay_times(report_or_block: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{call_id: {backend: {"forward", "backward", "total", "basis"}}}`` (µs per call) of the
    backends that ran and passed the check against the math backend; ``{}`` without a usable replay.
    ``basis``: "kernel" (sum of kernel durations, the trace's measure) or "event" (CUDA events)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for c in usable_calls(report_or_block):
        rp = c["replayed"]
        k = rp["basis"] == "kernel"
        times = {}
        for r in rp["backends"]:
            if r["total_us"] is None:
                continue
            times[r["backend"]] = {
                "forward": r["kernel_forward_us"] if k else r["forward_us"],
                "backward": r["kernel_backward_us"] if k else r["backward_us"],
                "total": r["total_us"],
                "basis": rp["basis"],
            }
        if times:
            out[c["id"]] = times
    return out


def measured_alternative(
    report_or_block: dict[str, Any], calls: list[dict[str, Any]], candidates: tuple[str, ...]
) -> Optional[dict[str, Any]]:
    """The measured gain of moving ``calls`` (replay call entries) from their trace backend to the
    fastest of ``candidates`` each: ``{gain_us, current_us, calls: [...], backends: {backend: n}}``,
    or None unless every call (by trace time) has a usable replay of its own backend and of a
    candidate. The gain scales each call's trace time by the replayed ratio (best / current)."""
    times = replay_times(report_or_block)
    total = sum(float(c.get("trace_time_us") or 0.0) for c in calls)
    if not calls or total <= 0:
        return None
    rows, gain, covered = [], 0.0, 0.0
    for c in calls:
        t = times.get(c["id"]) or {}
        cur = t.get(c.get("trace_backend") or "")
        alts = [(be, t[be]["total"]) for be in candidates if be in t and be != c.get("trace_backend")]
        if cur is None or not alts or not cur["total"]:
            continue
        be, best = min(alts, key=lambda x: x[1])
        tt = float(c.get("trace_time_us") or 0.0)
        ratio = best / cur["total"]
        g = max(0.0, tt * (1.0 - ratio))
        gain += g
        covered += tt
        rows.append(
            {
                "id": c["id"],
                "kind": c["kind"],
                "trace_backend": c.get("trace_backend"),
                "backend": be,
                "speedup": round(cur["total"] / best, 3) if best else None,
                "replayed_current_us": cur["total"],
                "replayed_best_us": best,
                "trace_time_us": tt,
                "gain_us": round(g, 3),
                "basis": cur["basis"],
            }
        )
    if covered < 0.999 * total:
        return None
    by_be: dict[str, int] = {}
    for r in rows:
        by_be[r["backend"]] = by_be.get(r["backend"], 0) + 1
    return {"gain_us": round(gain, 3), "current_us": round(total, 3), "calls": rows, "backends": by_be}
