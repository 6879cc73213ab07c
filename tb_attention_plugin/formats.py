"""Render reports for people (terminal table, markdown) and spreadsheets (CSV), and the one home
of number formatting: every module that prints a time, a share, a rate or a size, or rounds a
number for the JSON, uses the helpers here, so a missing value reads the same everywhere."""
from __future__ import annotations

import csv
import io
import math
from typing import Optional

from .attention.patterns import PHASE_LABELS

_BOUND_WORD = {"memory": "memory-bound", "compute": "compute-bound", "latency": "latency-bound",
               "unknown": "unknown (no shapes)"}


# ------------------------------------------------------------------ numbers
MISSING = "–"        # a value that is unknown or does not apply, in every text output
MINUS = "-"          # the one minus sign (deltas, savings, negative sizes): plain ASCII, as Python
                     # prints negative numbers, so text output can be grepped and pasted into code


def _sign(x: float) -> str:
    return "+" if x > 0 else MINUS if x < 0 else "±"


def us(x: Optional[float]) -> str:
    """A duration given in µs, in the unit that reads best: ``812.3 µs``, ``4.21 ms``, ``1.50 s``."""
    if x is None:
        return MISSING
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.2f} s"
    if a >= 1e3:
        return f"{x / 1e3:.2f} ms"
    return f"{x:.1f} µs"


def signed_us(x: Optional[float]) -> str:
    """A change of duration: ``+1.20 ms``, ``-45.0 µs``, ``±0.0 µs``."""
    return MISSING if x is None else _sign(x) + us(abs(x))


def pct(x: Optional[float], digits: int = 1) -> str:
    """A fraction as a percentage: 0.423 -> ``42.3%``."""
    return MISSING if x is None else f"{100 * x:.{digits}f}%"


def signed_pct(x: Optional[float], digits: int = 1) -> str:
    """A change already in percent: 12.5 -> ``+12.5%``; infinity (from zero) -> ``+∞%``."""
    if x is None:
        return MISSING
    if math.isinf(x):
        return _sign(x) + "∞%"
    return _sign(x) + f"{abs(x):.{digits}f}%"


def rate(x: Optional[float], unit: str) -> str:
    """A rate with an SI prefix: ``1.23 TFLOP/s``, ``4.8 TB/s``."""
    if x is None:
        return MISSING
    for scale, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def fmt_bytes(b: Optional[float]) -> str:
    """A size in binary units, as memory is usually read: ``512 B``, ``1.5 MiB``, ``16 GiB``."""
    if b is None:
        return MISSING
    b = float(b)
    sign = MINUS if b < 0 else ""
    b = abs(b)
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or u == "TiB":
            return f"{sign}{b:.0f} {u}" if u == "B" else f"{sign}{b:.3g} {u}"
        b /= 1024
    return f"{sign}{b:.3g} TiB"


def rounded(x: Optional[float], nd: int = 3) -> Optional[float]:
    """A number for the JSON, rounded to ``nd`` decimals; None, NaN and inf become null."""
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if math.isfinite(x) else None


def significant(x: Optional[float], digits: int = 4) -> Optional[float]:
    """A number for the JSON with ``digits`` significant digits (FLOPs, bytes, rates); None, NaN
    and inf become null."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}") if x else 0.0


# ------------------------------------------------------------------ text
def shape_text(sh) -> str:
    """``[2, 16, 2048, 64]``; a list of shapes joined with ``+``; ``?`` when unknown."""
    if not sh:
        return "?"
    if isinstance(sh[0], list):
        return " + ".join("[" + ", ".join(str(x) for x in s) + "]" for s in sh)
    return "[" + ", ".join(str(x) for x in sh) + "]"


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
            f"GPU time {us(rep['gpu_time_us'])} (busy {us(rep['gpu_busy_us'])});"
            f" attention {us(rep['attention_time_us'])}"
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
                out.append(("### " if markdown else "") + "Top attention kernels (by total time)")
                rows = []
                for (name, ph, d), (t, n, k) in top_rows:
                    nm = name if len(name) <= 70 else name[:67] + "..."
                    rows.append([nm, PHASE_LABELS.get(ph, ph), "fwd" if d == "forward" else "bwd", str(n), us(t),
                                 k["bound"],
                                 pct(k["memory_util"]), pct(k["compute_util"])])
                out.append(text_table(["kernel", "phase", "dir", "calls", "total", "bound", "mem util", "compute util"],
                                  rows, markdown))
                out.append("")
        if memory:
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
        # a second table after one blank line: the memory section, one long table
        buf.write("\n")
        w.writerow(MEMORY_CSV_COLUMNS)
        for rep in reports:
            if rep.get("status") == "ok":
                w.writerows(memory_csv_rows(rep))
    return buf.getvalue()


def _held_phase(g: dict) -> str:
    if not g["attention"]:
        return "outside attention"
    return PHASE_LABELS.get(g["phase"], g["phase"]) + (" bwd" if g["direction"] == "backward" else "")


def render_memory_text(rep: dict, markdown: bool = False) -> str:
    """The memory section of the table / markdown report."""
    mem = rep.get("memory")
    h = "### " if markdown else ""
    if not mem:
        return f"{h}Memory\nno memory analysis in this report (re-run without a stale cache)\n"
    out = [f"{h}Memory and data movement"]
    if not mem.get("recorded"):
        fix = (mem.get("notice") or {}).get("fix")
        out.append("allocations: not recorded" + (f" — {fix}" if fix else ""))
    if mem.get("error"):
        out.append(f"memory analysis failed: {mem['error']}")
    for d in mem.get("devices") or []:
        a = d["attention"]
        out.append(
            f"{d['device']}: {d['allocs']} allocations ({fmt_bytes(d['alloc_bytes'])}), {d['frees']} frees; "
            f"peak allocated {fmt_bytes(d['peak_allocated_bytes'])}"
            + (f" (reserved {fmt_bytes(d['peak_reserved_bytes'])})" if d.get("peak_reserved_bytes") is not None else "")
            + f"; inside attention {a['allocs']} allocations, {fmt_bytes(a['alloc_bytes'])}")
        if d["phases"]:
            rows = [[PHASE_LABELS.get(p["phase"], p["phase"]), "fwd" if p["direction"] == "forward" else "bwd",
                     str(p["allocs"]), fmt_bytes(p["alloc_bytes"]), str(p["frees"]), fmt_bytes(p["free_bytes"]),
                     fmt_bytes(p["net_bytes"]),
                     (f"{(p['largest'] or {}).get('op') or '?'} {shape_text((p['largest'] or {}).get('shape'))} "
                      f"{fmt_bytes((p['largest'] or {}).get('bytes'))}") if p.get("largest") else "–",
                     str(p["score_allocs"])]
                    for p in d["phases"]]
            out.append("")
            out.append(text_table(["phase", "dir", "allocs", "allocated", "frees", "freed", "net", "largest allocation",
                               "S×S"], rows, markdown))
        pk = d.get("attention_peak")
        if pk:
            out.append("")
            out.append(f"peak inside attention: {fmt_bytes(pk['total_allocated_bytes'])} allocated at "
                       f"{PHASE_LABELS.get(pk['phase'], pk['phase'])} ({pk['direction']}, {pk['op'] or '?'}); "
                       f"held by:")
            rows = []
            for g in pk["held_by"]:
                rows.append([g["op"] or "?", shape_text(g["shape"]), g["dtype"] or "?",
                             _held_phase(g),
                             str(g["count"]), fmt_bytes(g["bytes"]), f"{100 * (g['share'] or 0):.1f}%",
                             "S×S scores" if g["score_matrix"] else ""])
            if pk["before_window_bytes"]:
                rows.append(["(allocated before the trace)", "", "", "", "", fmt_bytes(pk["before_window_bytes"]),
                             f"{100 * pk['before_window_bytes'] / max(1, pk['total_allocated_bytes']):.1f}%", ""])
            out.append(text_table(["op", "shape", "dtype", "phase", "count", "bytes", "share", ""], rows, markdown))
        calls = [c for c in d.get("calls") or [] if c.get("fused_alloc_bytes") is not None]
        if calls:
            out.append("")
            rows = []
            for c in calls[:10]:
                s = c["shapes"]
                rows.append([c["scope"] or "?", str(c["calls"]),
                             f"B{s['b']} H{s['h']}/{s['hk']} S{s['sq']}x{s['sk']} D{s['d']} {s['dtype']}",
                             fmt_bytes(c["core_peak_bytes"]), fmt_bytes(c["fused_alloc_bytes"]),
                             str(c["score_allocs"]), fmt_bytes(c.get("score_matrix_bytes"))])
            out.append(text_table(["attention call", "calls", "shapes", "core peak above inputs",
                               "fused kernel (out+lse)", "S×S allocs/call", "one S×S"], rows, markdown))
    fp = mem.get("footprint") or {}
    if fp.get("layers"):
        out.append("")
        out.append(f"K/V footprint from shapes: {fmt_bytes(fp['kv_bytes'])} over {fp['basis_calls']} attention "
                   f"calls ({fp['basis']})")
        rows = []
        for g in fp["layers"][:10]:
            s = g["shapes"]
            rows.append([g["scope"] or "?", str(g["calls"]),
                         f"B{s['b']} H{s['h']} KV{s['hk']} Sq{s['sq']} Sk{s['sk']} D{s['d']} {s['dtype']}",
                         fmt_bytes(g["kv_bytes_per_call"]), fmt_bytes(g["fused_activation_bytes"]),
                         (f"{g['score_tensors']} × {fmt_bytes(g['score_matrix_bytes'])}"
                          if g["score_tensors"] else "–"),
                         g["kv_source"]])
        out.append(text_table(["attention call", "calls", "shapes", "K/V per call", "fused q+k+v+out+lse",
                           "S×S tensors", "K/V from"], rows, markdown))
        if len(fp.get("alternatives") or []) > 1:
            rows = [[a["name"], str(a["kv_heads"]) if a["kv_heads"] is not None else "latent", fmt_bytes(a["bytes"]),
                     f"{100 * ((a['ratio'] or 1) - 1):+.1f}%"] for a in fp["alternatives"]]
            out.append(text_table(["KV layout", "KV heads", "K/V bytes", "vs current"], rows, markdown))
            out.append(f"({mem['assumptions']['mla']})")
    elif fp.get("message"):
        out.append(f"K/V footprint: {fp['message']}")
    dm = mem.get("data_movement") or {}
    if dm.get("copies") or dm.get("transfers") or dm.get("allocator_calls"):
        out.append("")
        t = dm["totals"]
        out.append(f"data movement inside attention: {t['copy_calls']} copies ({us(t['copy_gpu_time_us'])} GPU, "
                   f"{fmt_bytes(t['copy_bytes'])}), {t['transfer_calls']} memcpy/memset ({us(t['transfer_time_us'])}, "
                   f"{fmt_bytes(t['transfer_bytes'])}), {dm['allocator_calls']} aten::empty* calls")
        rows = [[g["op"] + (f" in {g['within']}" if g["within"] else ""), g["kind"],
                 PHASE_LABELS.get(g["phase"], g["phase"]), "fwd" if g["direction"] == "forward" else "bwd",
                 shape_text(g["shape"]), str(g["calls"]), str(g["instances"]), us(g["gpu_time_us"]),
                 us(g["cpu_time_us"]), fmt_bytes(g["bytes"]) + ("*" if g["bytes_estimated"] else "")]
                for g in dm["copies"][:15]]
        rows += [[g["name"], g["kind"], PHASE_LABELS.get(g["phase"], g["phase"]),
                  "fwd" if g["direction"] == "forward" else "bwd", "", str(g["calls"]), str(g["instances"]),
                  us(g["time_us"]), "", fmt_bytes(g["bytes"])] for g in dm["transfers"][:10]]
        if rows:
            out.append(text_table(["op", "kind", "phase", "dir", "shape", "calls", "attn calls", "GPU time", "CPU time",
                               "bytes"], rows, markdown))
    for f in mem.get("flags") or []:
        out.append(f"memory {f['severity']}: {f['message']} — {f['evidence']}. Fix: {f['fix']}")
    return "\n".join(out) + "\n"


MEMORY_CSV_COLUMNS = ["section", "path", "device", "phase", "direction", "op", "shape", "dtype", "kind", "count",
                      "bytes", "time_us", "detail"]


def memory_csv_rows(rep: dict) -> list[list]:
    """The memory section as rows of one long table (``MEMORY_CSV_COLUMNS``)."""
    mem = rep.get("memory") or {}
    path = rep.get("path")
    rows = []
    if not mem.get("recorded"):
        rows.append(["notice", path, "", "", "", "", "", "", "no_memory_events", "", "", "",
                     (mem.get("notice") or {}).get("fix") or ""])
    for d in mem.get("devices") or []:
        rows.append(["device", path, d["device"], "", "", "", "", "", "peak_allocated", d["allocs"],
                     d["peak_allocated_bytes"], "", f"alloc_bytes={d['alloc_bytes']} frees={d['frees']}"])
        for p in d["phases"]:
            lg = p.get("largest") or {}
            rows.append(["phase_allocs", path, d["device"], p["phase"], p["direction"], lg.get("op") or "",
                         shape_text(lg.get("shape")) if lg else "", lg.get("dtype") or "", "alloc", p["allocs"],
                         p["alloc_bytes"], "", f"frees={p['frees']} free_bytes={p['free_bytes']} "
                                                 f"score_allocs={p['score_allocs']}"])
        pk = d.get("attention_peak")
        if pk:
            for g in pk["held_by"]:
                rows.append(["peak_held_by", path, d["device"], g["phase"] or "", g["direction"], g["op"] or "",
                             shape_text(g["shape"]), g["dtype"] or "",
                             "score_matrix" if g["score_matrix"] else ("attention" if g["attention"] else "outside"),
                             g["count"], g["bytes"], "", f"peak={pk['total_allocated_bytes']}"])
        for c in d.get("calls") or []:
            rows.append(["call_vs_fused", path, d["device"], "", "forward", c["scope"] or "",
                         str(c.get("shapes") or ""), (c.get("shapes") or {}).get("dtype") or "", "core_peak",
                         c["calls"], c.get("core_peak_bytes") or "", "",
                         f"fused_alloc_bytes={c.get('fused_alloc_bytes')} score_allocs={c['score_allocs']}"])
    fp = mem.get("footprint") or {}
    for g in fp.get("layers") or []:
        rows.append(["kv_footprint", path, "", "", "forward", g["scope"] or "", str(g["shapes"]), g["shapes"]["dtype"],
                     g["kv_source"], g["calls"], g["kv_bytes_per_call"], "",
                     f"fused_activation_bytes={g['fused_activation_bytes']} score_tensors={g['score_tensors']}"])
    for a in fp.get("alternatives") or []:
        rows.append(["kv_alternative", path, "", "", "", a["name"], "", "", "kv_heads=" + str(a["kv_heads"]), "",
                     a["bytes"], "", f"saving={a['saving']}"])
    dm = mem.get("data_movement") or {}
    for g in dm.get("copies") or []:
        rows.append(["copy", path, "", g["phase"], g["direction"], g["op"], shape_text(g["shape"]), g["dtype"] or "",
                     g["kind"], g["calls"], g["bytes"] if g["bytes"] is not None else "", g["gpu_time_us"],
                     (g["within"] or "") + (" " + g["detail"] if g["detail"] else "")])
    for g in dm.get("transfers") or []:
        rows.append(["transfer", path, "", g["phase"], g["direction"], g["name"], "", "", g["kind"], g["calls"],
                     g["bytes"], g["time_us"], g["copy"] or ""])
    for f in mem.get("flags") or []:
        rows.append(["flag", path, "", "", "", f["code"], "", "", f["severity"], f.get("calls") or "",
                     f.get("bytes") if f.get("bytes") is not None else "", f.get("time_us") or "",
                     f"{f['message']}: {f['evidence']}"])
    return rows
