"""The dashboard's runs overview: one row per run, from the summaries already analysed.

With several runs in a log directory the first question is *which one is worth a look*: where is
attention time largest, which phase leads, what bounds it, what did the analysis warn about. Each
row comes from the run's default trace file (the one the Trace view opens: an analysed file of
the first worker, latest span); nothing is analysed here and nothing waits.
"""

from __future__ import annotations

from typing import Any, Optional

from ..steps import per_step

BOUNDS = ("compute", "memory", "latency", "unknown")


def overview_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The overview figures of one trace report summary (fields of docs/report-schema.md; the
    engine's newer fields ``compute_busy_us``, ``span_us``, ``idle_us`` when present)."""
    att = summary.get("attention_time_us") or 0.0
    phases = summary.get("phases") or []
    top: Optional[dict[str, Any]] = None
    if phases:
        p = max(phases, key=lambda r: r.get("time_us") or 0.0)
        if (p.get("time_us") or 0.0) > 0:
            top = {
                "phase": p.get("phase"),
                "label": p.get("label"),
                "direction": p.get("direction"),
                "time_us": p.get("time_us"),
                "share": p.get("share"),
            }
    advice = summary.get("advice") or []
    best = None
    if advice:
        a = advice[0]  # the engine ranks by step time saved where estimated, else by gain
        best = {
            "id": a.get("id"),
            "title": a.get("title"),
            "severity": a.get("severity"),
            "estimated_gain_us": a.get("estimated_gain_us"),
            "gain_basis": a.get("gain_basis"),
            "step_gain_us": a.get("step_gain_us"),
            "per_step": a.get("per_step"),  # its savings per profiled step (steps.finding_per_step)
        }
    device = summary.get("device") or {}
    return {
        "per_step": per_step(summary),
        "status": summary.get("status"),
        "device": device.get("label") or device.get("name"),
        "steps": len(summary.get("steps") or []),
        "attention_time_us": att,
        "attention_share": summary.get("attention_share"),
        "gpu_busy_us": summary.get("gpu_busy_us"),
        "compute_busy_us": summary.get("compute_busy_us"),
        "span_us": summary.get("span_us"),
        "idle_us": summary.get("idle_us"),
        "top_phase": top,
        "bound_time_us": {b: (summary.get("bound_time_us") or {}).get(b, 0.0) for b in BOUNDS},
        "notices": [{"code": n.get("code"), "message": n.get("message")} for n in summary.get("notices") or []],
        "advice": len(advice),
        "top_advice": best,
        "partial": bool((summary.get("trace") or {}).get("partial") or (summary.get("trace") or {}).get("truncated")),
    }


def job_row(loader: Any, run: str, files: dict) -> dict[str, Any]:
    """A multi-rank run's line in the overview: its ranks, the spread and the stragglers (the
    Ranks view's rule, ranks/job.py), so that a job with a slow rank does not look like its
    first rank's numbers. ``state`` is ``partial`` while some ranks are not summarised yet."""
    from .ranks import run_job  # the rank summaries: the engine's, imported when first needed

    v = run_job(loader, run, files)
    sp = v["spread"]
    return {
        "state": v["state"],
        "ranks": sp["ranks"],
        "median_us": sp["median_us"],
        "max_us": sp["max_us"],
        "max_over_median": sp["max_over_median"],
        "min_ranks": v["rule"]["min_ranks"],
        "stragglers": [
            {"rank": st["rank"], "worker": st["worker"], "excess_pct": st["excess_pct"]} for st in v["stragglers"]
        ],
        "errors": len(v["errors"]),
    }


def route(plugin: Any, request: Any) -> Any:
    """``/overview``: ``{runs: [{run, file, state, message, ...overview_row}]}``, one per run."""
    from werkzeug.datastructures import MultiDict

    from ..ranks.job import job_kind
    from .params import json_response
    from .selection import file_rank, run_table, select

    rows = []
    table = run_table(plugin.loader)
    for run, files in sorted(table.items()):
        info = select(table, MultiDict({"run": run})).info  # one table: the file is there
        snap = files.get(info.name, (None, None))[1]
        row = {
            "run": run,
            "file": info.name,
            "files": len(files),
            "state": snap.state if snap else "waiting",
            "message": snap.message if snap else None,
        }
        if snap is not None and snap.state == "ready" and snap.summary is not None:
            row.update(overview_row(snap.summary))
        if job_kind([file_rank(i, s) for i, s in files.values()])[0]:
            row["job"] = job_row(plugin.loader, run, files)
        rows.append(row)
    return json_response({"runs": rows})
