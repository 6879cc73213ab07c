"""What every rule is made of, and the small helpers their findings share.

A rule (one module in ``advice/rules/``) is a :class:`Rule`: its premise (what in the trace makes it
fire), the estimate and its unit (``basis``: ``"gpu"``, attention GPU time saved, or ``"step"``,
wall-clock step time saved), the fix as code, the twin pair that validates it (a name in the
validation twins manifest, docs/advice.md *Twins*) and the traces where its premise is absent (it
must stay silent there: tests/test_advice_rules.py). ``check(run)`` returns a :class:`Finding` or a
:class:`Silent` that says why the rule did not fire; the registry turns both into JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..attention import patterns as P
from ..formats import pct, rounded as _r

if TYPE_CHECKING:
    from .run import Run

GPU, STEP = "gpu", "step"
BASES = (GPU, STEP)
MIN_SHARE = 0.01  # ignore work below 1 % of attention time
HIGH, MEDIUM = 0.25, 0.05  # severity: the gain's share of attention time (gpu) or of the step (step)


@dataclass
class Finding:
    """What a rule found. ``gpu_gain_us``: attention GPU time the fix saves (None: no basis for a
    number, or not a GPU-time change); ``step_gain_us``: wall-clock step time it saves (the replay
    model, advice/replay.py; None when it cannot be estimated). Both per the whole trace.
    ``removable_us``: the time the change acts on, an upper bound on the gain of its basis."""

    detail: str
    evidence: dict[str, Any]
    how: str
    removable_us: float
    gpu_gain_us: Optional[float] = None
    step_gain_us: Optional[float] = None
    title: Optional[str] = None  # a rule may sharpen its title for this run
    what_if: Any = None  # a replay.WhatIf: the registry replays it for step_gain_us
    notes: list[str] = field(default_factory=list)
    id: Optional[str] = None  # a rule with several findings names each (default: the rule's id)
    fix_code: Optional[str] = None  # code for this finding alone (default: the rule's fix)


@dataclass
class Silent:
    """Why a rule did not fire on this run (listed under "No finding")."""

    reason: str


Outcome = Union[Finding, Silent]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    premise: str  # what in the trace makes it fire
    basis: str  # GPU or STEP: the unit of estimated_gain_us
    estimate: str  # how the gain is estimated, in words
    fix: str  # the fix, as code
    twin: Optional[str]  # the twin pair (validation twins manifest) that validates it
    absent: tuple[str, ...]  # traces without its premise: it must be silent there
    check: Callable[[Run], Outcome]


# ------------------------------------------------------------------ helpers of the findings


def pct0(x: Optional[float]) -> str:
    return pct(x, digits=0)  # findings read in whole percents


def direction_short(d: str) -> str:
    return "fwd" if d == "forward" else "bwd"


def group_kernels(rows: list[dict], top: int = 5) -> list[dict]:
    """Kernel rows grouped by (name, phase, direction): calls, time, time-weighted utilisations,
    the bound of most of their time, the source line (with_stack) of most of their time."""
    g: dict = {}
    for k in rows:
        key = (k["name"], k["phase"], k["direction"])
        e = g.setdefault(key, {"t": 0.0, "n": 0, "mu": 0.0, "cu": 0.0, "w": 0.0, "bounds": {}, "src": {}})
        d = k["dur_us"] or 0.0
        e["t"] += d
        e["n"] += 1
        e["bounds"][k["bound"]] = e["bounds"].get(k["bound"], 0.0) + d
        src = k.get("source")
        if src:
            sk = (src["file"], src["line"], src["function"])
            e["src"][sk] = e["src"].get(sk, 0.0) + d
        if k.get("memory_util") is not None and k.get("compute_util") is not None:
            e["mu"] += k["memory_util"] * d
            e["cu"] += k["compute_util"] * d
            e["w"] += d
    out = []
    for (name, phase, direction), e in sorted(g.items(), key=lambda x: -x[1]["t"])[:top]:
        out.append(
            {
                "name": name,
                "phase": phase,
                "direction": direction,
                "calls": e["n"],
                "time_us": _r(e["t"]),
                "bound": max(e["bounds"].items(), key=lambda x: x[1])[0],
                "memory_util": _r(e["mu"] / e["w"], 4) if e["w"] else None,
                "compute_util": _r(e["cu"] / e["w"], 4) if e["w"] else None,
                "source": _main_source(e["src"]),
            }
        )
    return out


def _main_source(acc: dict) -> Optional[dict]:
    if not acc:
        return None
    f, ln, fn = max(acc.items(), key=lambda x: x[1])[0]
    return {"file": f, "line": ln, "function": fn}


def phase_rows(rows: list[dict]) -> list[dict]:
    """Per (phase, direction): time, kernels, time-weighted utilisations, time by bound."""
    g: dict = {}
    for k in rows:
        e = g.setdefault((k["phase"], k["direction"]), {"t": 0.0, "n": 0, "mu": 0.0, "cu": 0.0, "w": 0.0, "b": {}})
        d = k["dur_us"] or 0.0
        e["t"] += d
        e["n"] += 1
        e["b"][k["bound"]] = round(e["b"].get(k["bound"], 0.0) + d, 3)
        if k.get("memory_util") is not None and k.get("compute_util") is not None:
            e["mu"] += k["memory_util"] * d
            e["cu"] += k["compute_util"] * d
            e["w"] += d
    order = {p: i for i, p in enumerate(P.PHASES)}
    out = []
    for (ph, dr), e in sorted(g.items(), key=lambda x: (x[0][1] != "forward", order.get(x[0][0], 99))):
        out.append(
            {
                "phase": ph,
                "direction": dr,
                "time_us": _r(e["t"]),
                "kernels": e["n"],
                "memory_util": _r(e["mu"] / e["w"], 4) if e["w"] else None,
                "compute_util": _r(e["cu"] / e["w"], 4) if e["w"] else None,
                "bound_time_us": e["b"],
            }
        )
    return out


ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def main_dtype(rows) -> Optional[str]:
    """The dtype that most of these kernels' time runs in (None when none was recorded)."""
    t: dict = {}
    for k in rows:
        if k.get("dtype"):
            t[k["dtype"]] = t.get(k["dtype"], 0.0) + (k["dur_us"] or 0.0)
    return max(t.items(), key=lambda x: x[1])[0] if t else None


def total(rows) -> float:
    return float(sum(k["dur_us"] or 0.0 for k in rows))
