"""The job view (:mod:`.job`) for people (a table) and spreadsheets (CSV)."""

from __future__ import annotations

import csv
import io
from typing import Optional

from ..attention.patterns import PHASE_LABELS
from ..formats import MISSING, para, pct, text_table, us

_DIR = {"forward": "fwd", "backward": "bwd"}


def _phase_name(direction: str, phase: str) -> str:
    return f"{PHASE_LABELS.get(phase, phase)} {_DIR.get(direction, direction)}"


def _top_phase(row: dict) -> str:
    best = None
    for d, ps in (row.get("phases") or {}).items():
        for p, t in ps.items():
            if best is None or (t or 0) > best[0]:
                best = (t or 0, d, p)
    return f"{_phase_name(best[1], best[2])} {us(best[0])}" if best else MISSING


def explanation(phases: dict) -> str:
    parts = []
    for d, ps in phases.items():
        for p, x in ps.items():
            parts.append(
                (
                    x["excess_us"],
                    f"{_phase_name(d, p)} +{us(x['excess_us'])} ({100 * x['share_of_excess']:.0f}% of the excess)",
                )
            )
    return ", ".join(t for _, t in sorted(parts, reverse=True)) or "no single phase stands out"


def render_text(view: dict, markdown: bool = False, width: Optional[int] = None) -> str:
    """The rows, the spread and the stragglers; with a ``width`` the table and the lines fit it
    (worker and phase names cut first, then the largest-phase and overlap columns left out)."""
    flagged = {(s["rank"], s["file"]) for s in view["stragglers"]}
    rows = []
    for r in view["ranks"]:
        comm = r.get("communication") or {}
        rows.append(
            [
                r["rank"] if r["rank"] is not None else "?",
                r["worker"],
                us(r["attention_time_us"]),
                us(r["compute_busy_us"]),
                pct(r["attention_share"]),
                us(r["communication_us"]),
                us(comm.get("overlap_with_attention_us")),
                _top_phase(r),
                "STRAGGLER" if (r["rank"], r["file"]) in flagged else "partial" if r.get("partial") else "",
            ]
        )
    out = [
        text_table(
            ["rank", "worker", "attention", "compute busy", "share", "comm", "comm ∩ attn", "largest phase", ""],
            rows,
            markdown,
            width=width,
            cut=(1, 7),
            drop=(7, 6),
        )
    ]
    sp = view["spread"]
    out.append("")
    out.append(
        para(
            f"spread over {sp['ranks']} rank(s): median {us(sp['median_us'])}, p90 {us(sp['p90_us'])}, "
            f"max {us(sp['max_us'])}"
            + (f" ({sp['max_over_median']:.3g}x the median)" if sp.get("max_over_median") else ""),
            width,
        )
    )
    if view["stragglers"]:
        out.append(para(f"stragglers ({view['rule']['text']}):", width))
        for s in view["stragglers"]:
            out.append(
                para(
                    f"  rank {s['rank'] if s['rank'] is not None else '?'} ({s['worker']}): "
                    f"{us(s['attention_time_us'])}, +{s['excess_pct']:.1f}% over the median; "
                    f"explained by: {explanation(s['phases'])}",
                    width,
                    indent="    ",
                )
            )
    elif sp["ranks"] < view["rule"]["min_ranks"]:
        out.append(f"stragglers: not judged with fewer than {view['rule']['min_ranks']} ranks")
    else:
        out.append(para(f"stragglers: none ({view['rule']['text']})", width))
    if view.get("job") is False and len(view["ranks"]) > 1:
        out.append(para(f"note: not a job of several ranks: {view.get('job_reason')}", width))
    elif view.get("duplicate_ranks"):
        out.append(
            para(
                "note: several traces for rank(s) "
                + ", ".join(map(str, view["duplicate_ranks"][:20]))
                + " (several profiling windows?); each is listed",
                width,
            )
        )
    return "\n".join(out) + "\n"


def render_csv(view: dict) -> str:
    flagged = {(s["rank"], s["file"]) for s in view["stragglers"]}
    keys = sorted({(d, p) for r in view["ranks"] for d, ps in (r.get("phases") or {}).items() for p in ps})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "rank",
            "worker",
            "file",
            "device",
            "attention_time_us",
            "compute_busy_us",
            "attention_share",
            "communication_us",
            "communication_overlap_with_attention_us",
            "straggler",
        ]
        + [f"{p}.{d}_us" for d, p in keys]
    )
    for r in view["ranks"]:
        comm = r.get("communication") or {}
        w.writerow(
            [
                r["rank"],
                r["worker"],
                r["file"],
                r["device"],
                r["attention_time_us"],
                r["compute_busy_us"],
                r["attention_share"],
                r["communication_us"],
                comm.get("overlap_with_attention_us"),
                int((r["rank"], r["file"]) in flagged),
            ]
            + [((r.get("phases") or {}).get(d) or {}).get(p, 0.0) for d, p in keys]
        )
    return buf.getvalue()
