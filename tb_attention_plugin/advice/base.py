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
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from msgspec import UNSET

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


# One C call per row for the fields a helper reads (kernel rows are advice/run.py's AttentionRow
# structs; a field without a value is msgspec.UNSET, read like a dict's missing key).
_GROUP_FIELDS = attrgetter("name", "phase", "direction", "dur_us", "bound", "source", "memory_util", "compute_util")
_PHASE_FIELDS = attrgetter("phase", "direction", "dur_us", "bound", "memory_util", "compute_util")
_DTYPE_DUR = attrgetter("dtype", "dur_us")
_DUR = attrgetter("dur_us")


def group_kernels(rows: list[Any], top: int = 5) -> list[dict]:
    """Kernel rows grouped by (name, phase, direction): calls, time, time-weighted utilisations,
    the bound of most of their time, the source line (with_stack) of most of their time."""
    g: dict = {}
    for name, phase, direction, dur, bound, src, mu, cu in map(_GROUP_FIELDS, rows):
        key = (name, phase, direction)
        e = g.get(key)
        if e is None:
            e = g[key] = {"t": 0.0, "n": 0, "mu": 0.0, "cu": 0.0, "w": 0.0, "bounds": {}, "src": {}}
        d = dur or 0.0
        e["t"] += d
        e["n"] += 1
        e["bounds"][bound] = e["bounds"].get(bound, 0.0) + d
        if src:
            sk = (src["file"], src["line"], src["function"])
            e["src"][sk] = e["src"].get(sk, 0.0) + d
        if mu is not None and cu is not None and mu is not UNSET and cu is not UNSET:
            e["mu"] += mu * d
            e["cu"] += cu * d
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


def phase_rows(rows: list[Any]) -> list[dict]:
    """Per (phase, direction): time, kernels, time-weighted utilisations, time by bound."""
    g: dict = {}
    for phase, direction, dur, bound, mu, cu in map(_PHASE_FIELDS, rows):
        key = (phase, direction)
        e = g.get(key)
        if e is None:
            e = g[key] = {"t": 0.0, "n": 0, "mu": 0.0, "cu": 0.0, "w": 0.0, "b": {}}
        d = dur or 0.0
        e["t"] += d
        e["n"] += 1
        e["b"][bound] = round(e["b"].get(bound, 0.0) + d, 3)
        if mu is not None and cu is not None and mu is not UNSET and cu is not UNSET:
            e["mu"] += mu * d
            e["cu"] += cu * d
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
    for dtype, dur in map(_DTYPE_DUR, rows):
        if dtype:
            t[dtype] = t.get(dtype, 0.0) + (dur or 0.0)
    return max(t.items(), key=lambda x: x[1])[0] if t else None


def total(rows) -> float:
    return float(sum(d or 0.0 for d in map(_DUR, rows)))
