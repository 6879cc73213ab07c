"""Advice: what to change in the run, what it would save, and the fix (docs/advice.md).

A package of rules (``rules/``, one module per rule: premise, estimate and unit, fix as code, the
twin that validates it), run by the registry (``registry.py``) over one report. The report's
``advice`` (findings) and ``advice_checks`` (what each rule looked at and why it did or did not fire)
come from here; the dashboard, the CLI and ``compare`` read the same findings.
"""

from __future__ import annotations

from typing import Any

from .registry import FINDING_KEYS, RULES, rank_key, run_rules
from .run import Run


def advise(report: dict, trace: Any = None, links: Any = None, tagging: Any = None) -> list[dict]:
    """The findings for one report (trace and links give the recorded op inputs and the step replay;
    without them the rules that need them stay silent and say so)."""
    return run_rules(Run(report, trace, links))[0]


def advice_block(
    report: dict, trace: Any = None, links: Any = None, tagging: Any = None
) -> tuple[list[dict], list[dict], list[dict]]:
    """``advice``, ``advice_checks`` and ``attention_backends`` of one report, from one look at its
    SDPA calls."""
    from ..attention.backends import backends

    run = Run(report, trace, links)
    findings, checks = run_rules(run)
    return findings, checks, backends(report.get("kernels"), frozenset(run.math_kernel_ids()))


def advice_and_backends(report: dict, trace: Any = None, links: Any = None, tagging: Any = None) -> tuple:
    """``advice`` and ``attention_backends`` (kept for callers of the single-module advice)."""
    findings, _, be = advice_block(report, trace, links, tagging)
    return findings, be


__all__ = ["FINDING_KEYS", "RULES", "advise", "advice_block", "advice_and_backends", "rank_key"]
