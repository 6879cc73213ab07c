"""Rank summaries -> the job view: rows in rank order, the spread, the stragglers.

Straggler rule (robust: one slow rank cannot hide itself by moving the statistics). With ``m``
the median attention time over the ranks and ``MAD`` the median absolute deviation from it, a
rank is a straggler when

    attention_time > m + K_MAD * 1.4826 * MAD   and   attention_time > m * (1 + MIN_EXCESS)

``1.4826 * MAD`` estimates the standard deviation of normally distributed times, and
``K_MAD = 3.5`` is Iglewicz and Hoaglin's cut-off for the modified z-score: noise among hundreds
of ranks stays below it. The second condition keeps ranks that are statistically unusual but
only a few percent slower (a job whose ranks agree to 0.1 % has a tiny MAD) from being flagged:
``MIN_EXCESS = 0.05``. With fewer than ``MIN_RANKS`` ranks there is no majority to compare
with (of two ranks, neither is "the" slow one), so no rank is flagged; the spread still shows.

Each straggler lists the phases that explain its excess: per (phase, direction) its time minus
the median of that phase over the ranks, the largest first, keeping those that make up at least
``MIN_PHASE_SHARE`` of the rank's positive phase excess.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Optional

from ..formats import rounded

K_MAD = 3.5
MAD_TO_SIGMA = 1.4826
MIN_EXCESS = 0.05
MIN_RANKS = 3
MIN_PHASE_SHARE = 0.10
JOB_SCHEMA = 1
# rank in a worker or file name when the trace has no distributedInfo: "rank3", "rank-3", "rank_3"
RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: str) -> Optional[int]:
    """The rank a file name states (``rank3.123.pt.trace.json``), or None."""
    m = RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def job_kind(ranks: list[Optional[int]]) -> tuple[bool, str]:
    """Are these traces (the ranks each states, None where unknown) one job of several ranks, and
    why (one line)? A job has at least two distinct ranks. Several traces of one rank are not a
    job: the same script profiled twice into one directory (workers ``host_pid1``, ``host_pid2``),
    several profiling windows, or an eager trace beside its CUDA-graph twin (both rank 0); traces
    that state no rank (no ``distributedInfo``: torch.distributed was not initialised, and no
    ``rank<N>`` in the name) are not one either."""
    known = sorted({r for r in ranks if r is not None})
    if len(known) >= 2:
        return True, f"{len(known)} ranks"
    if len(ranks) < 2:
        return False, "one trace"
    if known:
        return False, (
            f"every trace that states its rank is rank {known[0]} (several traces of one process: "
            "profiling windows, repeated runs or a CUDA-graph twin)"
        )
    return False, "no trace states its rank (no distributedInfo, no rank<N> in the file name)"


def _median(xs: list[float]) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _quantile(xs: list[float], q: float) -> Optional[float]:
    """Linear interpolation between order statistics (numpy's default)."""
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def sort_key(s: dict) -> tuple:
    """Rank number first (ranks without one after, by file name), then span and file."""
    r = s.get("rank")
    return (r is None, r if r is not None else 0, str(s.get("span") or ""), str(s.get("file") or ""))


RANK_FIELDS = (
    "rank",
    "world_size",
    "worker",
    "span",
    "file",
    "path",
    "device",
    "attention_time_us",
    "compute_busy_us",
    "attention_share",
    "phases",
    "communication_us",
    "communication",
    "forward_time_us",
    "backward_time_us",
    "fused_time_us",
    "unfused_core_time_us",
    "bound_time_us",
    "top_kernel_groups",
    "steps",
    "rank_source",
    "activity_source",
    "partial",
)


def spread(times: list[float]) -> dict:
    med = _median(times)
    mx = max(times) if times else None
    mad = _median([abs(t - med) for t in times]) if med is not None else None
    return {
        "ranks": len(times),
        "median_us": rounded(med),
        "p90_us": rounded(_quantile(times, 0.9)),
        "min_us": rounded(min(times) if times else None),
        "max_us": rounded(mx),
        "max_over_median": rounded(mx / med) if (med and mx is not None) else None,
        "mad_us": rounded(mad),
    }


def _phase_medians(rows: list[dict]) -> dict:
    keys = {(d, p) for r in rows for d, ps in (r.get("phases") or {}).items() for p in ps}
    return {k: _median([float(((r.get("phases") or {}).get(k[0]) or {}).get(k[1]) or 0.0) for r in rows]) for k in keys}


def explain(row: dict, medians: dict) -> dict:
    """The phases that explain a rank's excess: ``{direction: {phase: {time_us, median_us,
    excess_us, share_of_excess}}}``, the largest excess first."""
    ex = []
    for (d, p), med in medians.items():
        t = float(((row.get("phases") or {}).get(d) or {}).get(p) or 0.0)
        if t - med > 0:
            ex.append((t - med, d, p, t, med))
    total = sum(e[0] for e in ex)
    out: dict = {}
    for e, d, p, t, med in sorted(ex, reverse=True):
        share = e / total if total else 0.0
        if share < MIN_PHASE_SHARE:
            break
        out.setdefault(d, {})[p] = {
            "time_us": rounded(t),
            "median_us": rounded(med),
            "excess_us": rounded(e),
            "share_of_excess": round(share, 4),
        }
    return out


def job_view(summaries: list[dict]) -> dict:
    """``{schema, ranks, spread, stragglers, rule, errors}`` from rank summaries (error entries
    go to ``errors``)."""
    ok = sorted((s for s in summaries if s.get("status") == "ok"), key=sort_key)
    bad = [
        {"file": s.get("file"), "path": s.get("path"), "error": s.get("error")}
        for s in summaries
        if s.get("status") != "ok"
    ]
    rows = [{k: s.get(k) for k in RANK_FIELDS} for s in ok]
    times = [float(r["attention_time_us"] or 0.0) for r in rows]
    sp = spread(times)
    med, mad = sp["median_us"], sp["mad_us"]
    stragglers = []
    if med and len(rows) >= MIN_RANKS:
        threshold = max(med + K_MAD * MAD_TO_SIGMA * (mad or 0.0), med * (1.0 + MIN_EXCESS))
        medians = _phase_medians(rows)
        for r, t in zip(rows, times):
            if t > threshold:
                stragglers.append(
                    {
                        "rank": r["rank"],
                        "worker": r["worker"],
                        "file": r["file"],
                        "attention_time_us": rounded(t),
                        "excess_us": rounded(t - med),
                        "excess_pct": round(100.0 * (t - med) / med, 2),
                        "phases": explain(r, medians),
                    }
                )
        sp["threshold_us"] = rounded(threshold)
    else:
        sp["threshold_us"] = None
    comm = [float(c) for c in (r.get("communication_us") for r in rows) if c is not None]
    sp["communication_median_us"] = rounded(_median(comm))
    seen = Counter(r["rank"] for r in rows if r["rank"] is not None)
    dup = sorted(x for x, n in seen.items() if n > 1)
    is_job, why = job_kind([r["rank"] for r in rows])
    return {
        "schema": JOB_SCHEMA,
        "kind": "tb-attention-ranks",
        "ranks": rows,
        "spread": sp,
        "stragglers": stragglers,
        "rule": {
            "k_mad": K_MAD,
            "mad_to_sigma": MAD_TO_SIGMA,
            "min_excess": MIN_EXCESS,
            "min_ranks": MIN_RANKS,
            "text": f"attention time > median + {K_MAD} x {MAD_TO_SIGMA} x MAD and > median x {1 + MIN_EXCESS:g}",
        },
        "duplicate_ranks": dup,
        "job": is_job,
        "job_reason": why,
        "errors": bad,
    }
