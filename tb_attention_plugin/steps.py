"""The one time base of every figure: per profiled step.

A trace's totals cover its profiled steps; a user reads a saving against one step. This module is
the single definition of the step and of the per-step figures (the dashboard computes the same in
frontend/src/views/strip.ts ``context``, with the divisor of frontend/src/timebase.ts; the CLI, the
overview and the advice read this).
It imports nothing of the engine, so the plugin's server can use it without loading the engine.
"""

from __future__ import annotations

from typing import Any


def per_step(summary: dict[str, Any]) -> dict[str, Any]:
    """The run on one basis, per step (the strip's figures, frontend/src/views/strip.ts context):
    the step (the mean profiled step, or the GPU span per step when the GPU ran longer), GPU busy
    (all GPU activity, communication included: the summary's and the ranks' definition), its
    compute part, idle = step − busy, and attention time; each the trace's total over its steps."""
    steps = [s for s in summary.get("steps") or [] if summary.get("step") is None or s.get("name") == summary["step"]]
    n = divisor(summary)
    span = summary.get("span_us")
    step_sum = sum(s.get("dur_us") or 0.0 for s in steps)
    busy = (summary.get("gpu_busy_us") or 0.0) / n
    step = span / n if span is not None else (step_sum / n if step_sum else None)
    if steps and step_sum:
        step = max(step_sum / len(steps), step or 0.0)
    if step is not None and step < busy:
        step = busy
    cb = summary.get("compute_busy_us")
    return {
        "steps": len(steps),
        "step_us": round(step, 3) if step is not None else None,
        "gpu_busy_us": round(busy, 3),
        "compute_busy_us": round(cb / n, 3) if cb is not None else None,
        "idle_us": round(max(0.0, step - busy), 3) if step is not None else None,
        "attention_time_us": round((summary.get("attention_time_us") or 0.0) / n, 3),
    }


def divisor(summary: dict[str, Any]) -> int:
    """How many steps the report's totals cover: 1 for a single selected step (``--step``), else
    its profiled steps (at least 1: a trace without ProfilerStep ranges is one step)."""
    if summary.get("step") is not None:
        return 1
    return max(1, len(summary.get("steps") or []))


def finding_per_step(finding: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """A finding's savings per step: its GPU time and its step time (wall clock), each the trace's
    total over its steps, and whether the GPU figure was measured (a replay) or estimated."""
    n = divisor(summary)
    measured = (finding.get("evidence") or {}).get("gain_source") == "measured"

    def per(v: Any) -> Any:
        return round(v / n, 3) if isinstance(v, (int, float)) else None

    return {
        "steps": n,
        "gpu_gain_us": per(finding.get("gpu_gain_us")),
        "step_gain_us": per(finding.get("step_gain_us")),
        "basis": "measured" if measured else "estimated",
    }
