"""The registry: every rule, run on one report, into the documented findings and checks.

Each finding (docs/report-schema.md, *Advice*)::

    {id, severity, title, detail, evidence, how, fix_code, twin,
     gain_basis: "gpu" | "step", estimated_gain_us (in that basis), gpu_gain_us, step_gain_us,
     removable_us}

``gpu_gain_us`` is attention GPU time saved, ``step_gain_us`` wall-clock step time saved (the step
replayed without and with the change, replay.py), both over the whole trace; either may be null.
Findings are ranked by step time saved where it could be estimated, else by their gain. Each
check (``advice_checks``) says, per rule, whether it fired and, when not, why.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Optional

from ..formats import rounded as _r
from ..steps import finding_per_step
from .base import GPU, HIGH, MEDIUM, STEP, Finding, Rule, Silent
from .rules import (
    decode_kv_heads,
    dropout_in_inference,
    fp32_attention,
    fuse_attention,
    head_dim_alignment,
    launch_overhead,
    measured_backend,
    memory_traffic,
    sdpa_math_backend,
    slow_backend,
    slow_backward,
)
from .run import Run

RULES: tuple[Rule, ...] = (
    fuse_attention.RULE,
    sdpa_math_backend.RULE,
    slow_backend.RULE,
    fp32_attention.RULE,
    head_dim_alignment.RULE,
    decode_kv_heads.RULE,
    dropout_in_inference.RULE,
    launch_overhead.RULE,
    slow_backward.RULE,
    memory_traffic.RULE,
    measured_backend.RULE,
)
BY_ID = {r.id: r for r in RULES}

# every finding's keys, in this order; estimated_gain_us <= removable_us
FINDING_KEYS = (
    "id",
    "severity",
    "title",
    "detail",
    "evidence",
    "estimated_gain_us",
    "removable_us",
    "how",
    "gain_basis",
    "gpu_gain_us",
    "step_gain_us",
    "fix_code",
    "twin",
    "twin_check",
    "per_step",
)


def _severity(gain: Optional[float], basis: str, run: Run) -> str:
    whole = run.att_time if basis == GPU else (run.span or run.att_time)
    if gain is None or not whole:
        return "low"
    s = gain / whole
    return "high" if s >= HIGH else "medium" if s >= MEDIUM else "low"


def _finding(rule: Rule, f: Finding, run: Run) -> dict[str, Any]:
    step = f.step_gain_us
    if step is None and f.what_if is not None and run.replay is not None:
        # a GPU saving reaches the step only where the step waits on the GPU: at the low end of the
        # profiler's cost per op the replayed CPU is slowest, so that end is the claim (CPU-bound
        # twins: HF Llama 2.34 -> see validation/advice_twins.md)
        step = max(0.0, min(run.replay.gain(f.what_if), run.replay_low.gain(f.what_if)))
    gpu = f.gpu_gain_us
    est = gpu if rule.basis == GPU else step
    if est is not None:
        est = min(est, f.removable_us)
    out: dict[str, Any] = {
        "id": f.id or rule.id,
        "severity": _severity(est, rule.basis, run),
        "title": f.title or rule.title,
        "detail": f.detail + ("" if not f.notes else " " + " ".join(f.notes)),
        "evidence": f.evidence,
        "estimated_gain_us": _r(est) if est is not None else None,
        "removable_us": _r(f.removable_us),
        "how": f.how,
        "gain_basis": rule.basis,
        "gpu_gain_us": _r(gpu) if gpu is not None else None,
        "step_gain_us": _r(step) if step is not None else None,
        "fix_code": f.fix_code or rule.fix,
        # the twin is cited only where it confirms the rule's gain within its window
        # (validation/advice_twins.py --write-verdicts); its check is given either way
        "twin": rule.twin if twin_verdict(rule.id).get("ok") else None,
        "twin_check": twin_verdict(rule.id) or None,
    }
    if run.replay is not None:
        out["evidence"] = dict(
            out["evidence"],
            modelled_step_us=_r(run.replay.base_us / run.steps),
        )
    return out


@functools.lru_cache(maxsize=1)
def _twin_verdicts() -> dict[str, dict[str, Any]]:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "twin_verdicts.json")
    try:
        with open(path, encoding="utf-8") as f:
            data: dict[str, dict[str, Any]] = json.load(f)
    except (OSError, ValueError):
        return {}
    return data


def twin_verdict(rule_id: str) -> dict[str, Any]:
    """What the twin pair a rule cites says of its gain: ``{pair, ratio, verdict, ok}`` ({} unknown)."""
    return dict(_twin_verdicts().get(rule_id) or {})


def rank_key(a: dict[str, Any]) -> float:
    """Step time saved where it was estimated; else the GPU time saved, the most a GPU saving can
    take off the step (a math fallback with no step estimate is not outranked by small casts that
    have one); else the finding's own gain; unknown last."""
    for k in ("step_gain_us", "gpu_gain_us", "estimated_gain_us"):
        v = a.get(k)
        if v is not None:
            return -float(v)
    return 1.0


def run_rules(run: Run) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The findings and the checks of one run."""
    findings: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    report = run.rep
    usable = report.get("status") in (None, "ok") and bool(report.get("attention_time_us"))
    for rule in RULES:
        check = {"id": rule.id, "title": rule.title, "basis": rule.basis, "twin": rule.twin}
        if not usable:
            checks.append(dict(check, fired=False, reason="no attention time in this trace"))
            continue
        try:
            out = rule.check(run)
        except Exception as e:  # noqa: BLE001 - one rule's failure never loses the others
            checks.append(dict(check, fired=False, reason=f"the rule failed: {type(e).__name__}: {e}"))
            continue
        if isinstance(out, Silent):
            checks.append(dict(check, fired=False, reason=out.reason))
            continue
        got = out if isinstance(out, list) else [out]
        made = [_finding(rule, f, run) for f in got]
        findings.extend(made)
        checks.append(dict(check, fired=True, reason=None, findings=[m["id"] for m in made]))
    if usable:
        _measured(run, findings)
    for f in findings:  # after the measured gains: per step, on the basis the finding ended with
        f["per_step"] = finding_per_step(f, report)
    findings.sort(key=rank_key)
    return findings, checks


def _measured(run: Run, findings: list[dict[str, Any]]) -> None:
    """A replay beside the trace (replay/findings.py): measured GPU-time gains where it covers a
    finding's calls; without one, nothing changes. (A faster backend it measured is its own rule.)"""
    from ..replay.findings import apply_measured

    apply_measured(findings, run.rep, lambda g: _severity(g, GPU, run))


__all__ = ["FINDING_KEYS", "RULES", "BY_ID", "STEP", "GPU", "run_rules", "rank_key"]
