"""Render reports for people (terminal table, markdown) and spreadsheets (CSV)."""
from __future__ import annotations

import csv
import io
from typing import Optional

from .attention.patterns import PHASE_LABELS

_BOUND_WORD = {"memory": "memory-bound", "compute": "compute-bound", "latency": "latency-bound",
               "unknown": "unknown (no shapes)"}


def us(x: Optional[float]) -> str:
    if x is None:
        return "–"
    if x >= 1e6:
        return f"{x / 1e6:.2f} s"
    if x >= 1e3:
        return f"{x / 1e3:.2f} ms"
    return f"{x:.1f} µs"


def pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def rate(x: Optional[float], unit: str) -> str:
    if x is None:
        return "–"
    for scale, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def text_table(headers: list[str], rows: list[list], markdown: bool) -> str:
    """A plain-text table (columns padded) or a markdown one; cells are shown with str()."""
    rows = [[str(c) for c in r] for r in rows]
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def device_line(rep: dict) -> str:
    d = rep.get("device") or {}
    if not d:
        return "device: none recorded"
    peaks = d.get("peaks") or {}
    fl = peaks.get("flops") or {}
    if not d.get("key") and not fl:
        return f"device: {d.get('name')} (unknown: give peaks with --peaks)"
    parts = [f"{k} {rate(fl[k], 'FLOP/s')}" for k in ("bf16", "fp16", "tf32", "fp32") if k in fl]
    bw = peaks.get("memory_bandwidth")
    return (f"device: {d.get('name')} ({d.get('label') or 'user peaks'}; {d.get('basis')} peaks: "
            + ", ".join(parts) + f", memory {rate(bw, 'B/s')})")


def measurements_line(rep: dict) -> str:
    """'measured: ...' when hardware counters replaced the model (roofline/measured.py), else ''."""
    m = rep.get("measurements")
    if not m or not m.get("source"):
        return ""
    src = f"Nsight Compute export {m.get('file')}" if m["source"] == "ncu" else "CUPTI counter ranges"
    if m.get("ranges") is not None:
        return (f"measured: {src}, {m.get('rows')} ranges without a kernel timeline "
                "(listed in the JSON report under measurements.ranges)")
    steps = (m.get("window") or {}).get("steps") or []
    return (f"measured: {src}, {m['kernels_joined']} of {m['kernels_total']} kernels"
            + (f" ({', '.join(steps)})" if steps else "") + ": utilisations and bounds from the counters")


def phase_rows(rep: dict) -> list[list[str]]:
    rows = []
    for p in rep.get("phases", []):
        rows.append([PHASE_LABELS.get(p["phase"], p["phase"]), "fwd" if p["direction"] == "forward" else "bwd",
                     us(p["time_us"]), _BOUND_WORD.get(p["bound"], p["bound"]), pct(p["memory_util"]),
                     pct(p["compute_util"]), str(p["kernels"]), pct(p["share"])])
    return rows


PHASE_HEADERS = ["operation", "dir", "latency", "bottleneck", "memory-bandwidth utilization",
                 "compute utilization", "kernels", "share of attention"]


def render_text(reports: list[dict], markdown: bool = False, top: int = 10, memory: bool = False) -> str:
    out = []
    for rep in reports:
        if rep.get("status") != "ok":
            continue
        h = "## " if markdown else ""
        out.append(f"{h}{rep['path']}")
        out.append(device_line(rep))
        if measurements_line(rep):
            out.append(measurements_line(rep))
        share = rep.get("attention_share")
        out.append(
            f"GPU time {us(rep['gpu_time_us'])} (busy {us(rep['gpu_busy_us'])}); attention {us(rep['attention_time_us'])}"
            f" ({pct(share)}): core {us(rep['core_attention_time_us'])}, projections {us(rep['projection_time_us'])};"
            f" forward {us(rep['forward_time_us'])}, backward {us(rep['backward_time_us'])};"
            f" fused {us(rep['fused_time_us'])}, unfused core {us(rep['unfused_core_time_us'])}")
        if rep.get("step"):
            out.append(f"step: {rep['step']}")
        out.append("")
        if rep.get("phases"):
            out.append(text_table(PHASE_HEADERS, phase_rows(rep), markdown))
            out.append("")
            att = [k for k in rep["kernels"] if k["attention"]]
            att.sort(key=lambda k: -(k["dur_us"] or 0))
            groups: dict = {}
            for k in att:
                g = groups.setdefault((k["name"], k["phase"], k["direction"]), [0.0, 0, k])
                g[0] += k["dur_us"] or 0
                g[1] += 1
            top_rows = sorted(groups.items(), key=lambda x: -x[1][0])[:top]
            if top_rows:
                out.append(("### " if markdown else "") + f"Top attention kernels (by total time)")
                rows = []
                for (name, ph, d), (t, n, k) in top_rows:
                    nm = name if len(name) <= 70 else name[:67] + "..."
                    rows.append([nm, PHASE_LABELS.get(ph, ph), "fwd" if d == "forward" else "bwd", str(n), us(t), k["bound"],
                                 pct(k["memory_util"]), pct(k["compute_util"])])
                out.append(text_table(["kernel", "phase", "dir", "calls", "total", "bound", "mem util", "compute util"],
                                  rows, markdown))
                out.append("")
        if memory:
            from .memory import render_memory_text
            out.append(render_memory_text(rep, markdown))
        for n in rep.get("notices", []):
            out.append(f"note: {n['message']} — {n['fix']}")
        for w in rep.get("warnings", []):
            out.append(f"warning: {w}")
        for a in rep.get("advice", []) or []:
            gain = a.get("estimated_gain_us")
            est = f", est. gain {us(gain)}" if gain else ""
            out.append(f"advice [{a.get('severity')}{est}]: {a.get('title')}: {a.get('detail')}")
            if a.get("how"):
                out.append(f"  how: {a['how']}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


CSV_COLUMNS = ["path", "id", "name", "kind", "ts", "dur_us", "device", "stream", "step", "attention", "phase",
               "direction", "tag_source", "scope", "op", "cost_op", "module_path", "dtype", "flops", "bytes",
               "intensity", "achieved_flops_per_s", "achieved_bytes_per_s", "compute_util", "memory_util",
               "bound", "bound_reason", "estimated"]


def render_csv(reports: list[dict], memory: bool = False) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for rep in reports:
        if rep.get("status") != "ok":
            continue
        for k in rep["kernels"]:
            w.writerow([rep["path"] if c == "path" else ("" if k.get(c) is None else k.get(c)) for c in CSV_COLUMNS])
    if memory:
        # a second table after one blank line: the memory section, one long table (memory.py)
        from .memory import MEMORY_CSV_COLUMNS, memory_csv_rows
        buf.write("\n")
        w.writerow(MEMORY_CSV_COLUMNS)
        for rep in reports:
            if rep.get("status") == "ok":
                w.writerows(memory_csv_rows(rep))
    return buf.getvalue()
