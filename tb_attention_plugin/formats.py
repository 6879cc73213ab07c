"""Render reports for people (terminal table, markdown) and spreadsheets (CSV), and the one home
of number formatting: every module that prints a time, a share, a rate or a size, or rounds a
number for the JSON, uses the helpers here, so a missing value reads the same everywhere."""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
from typing import Optional

from .attention.patterns import PHASE_LABELS, strip_templates
from .steps import divisor, per_step

_BOUND_WORD = {
    "memory": "memory-bound",
    "compute": "compute-bound",
    "latency": "latency-bound",
    "unknown": "unknown (no cost)",
}
_UPPER_BOUND_WORD = "unknown (≤ dense)"  # dense upper-bound costs (FlexAttention): no roof is claimed


# ------------------------------------------------------------------ numbers
MISSING = "–"  # a value that is unknown or does not apply, in every text output
MINUS = "-"  # the one minus sign (deltas, savings, negative sizes): plain ASCII, as Python
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


def signed_pct(x: Optional[float], digits: int = 1, unit: str = "%") -> str:
    """A change already in percent: 12.5 -> ``+12.5%``; infinity (from zero) -> ``+∞%``; ``unit``
    " pt" for a change of a share in percentage points."""
    if x is None:
        return MISSING
    if math.isinf(x):
        return _sign(x) + "∞" + unit
    return _sign(x) + f"{abs(x):.{digits}f}{unit}"


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


ELLIPSIS = "…"
MIN_WIDTH = 80  # narrower terminals get 80 columns: the tables need that much to stay legible
_MIN_CUT = 12  # a column cut in the middle keeps at least this many characters
_SOFT_CUT = 24  # ... and this many while a less important column can still be left out
_SOFT_WRAP = 20  # a column whose cells wrap: as narrow, before columns are left out
_SEP = "  "


def cut_middle(text: str, width: Optional[int]) -> str:
    """``text`` cut to ``width`` characters in the middle, where an ellipsis stands for what was
    left out (kernel names differ at both ends: the namespace in front, the template at the end)."""
    if width is None or len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def para(text: str, width: Optional[int], indent: str = "  ") -> str:
    """A paragraph wrapped to ``width`` (unchanged when None), continuation lines indented."""
    if width is None or len(text) <= width:
        return text
    return (
        "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=True))
        or text
    )


def est(text: str, estimated: Optional[bool], upper_bound: Optional[bool] = False) -> str:
    """``~`` in front of an estimated figure, ``≤`` in front of one from a dense upper-bound cost
    (FlexAttention with a mask the trace does not record), as the dashboard marks them."""
    if text == MISSING:
        return text
    return f"≤{text}" if upper_bound else f"~{text}" if estimated else text


def _header_width(h: str, lines: int) -> int:
    """The narrowest column that shows header ``h`` on at most ``lines`` lines."""
    for w in range(1, len(h) + 1):
        if len(textwrap.wrap(h, w, break_on_hyphens=True, break_long_words=False)) <= lines and all(
            len(x) <= w for x in textwrap.wrap(h, w, break_on_hyphens=True, break_long_words=False)
        ):
            return w
    return len(h)


def _widths(
    headers: list[str],
    rows: list[list[str]],
    cols: list[int],
    width: int,
    cut: set[int],
    wrap: set[int],
    floor_cut: int,
    floor_wrap: int,
) -> Optional[list[int]]:
    """Column widths for ``cols`` that fit in ``width``, or None. Headers go over two lines, then
    over as many as their words need; then columns that wrap (losing nothing) and columns cut in
    the middle narrow (down to ``floor_wrap`` and ``floor_cut`` characters), widest first. Room left over goes back
    to the headers, in column order, then to the cut columns."""

    def need(i: int) -> int:
        return max((len(r[i]) for r in rows), default=0)

    def total(ws: list[int]) -> int:
        return sum(ws) + len(_SEP) * (len(ws) - 1)

    natural = [max(len(headers[i]), need(i)) for i in cols]
    if total(natural) <= width:
        return natural
    fitted = None
    for lines in (2, 99):  # headers on two lines if the cells can give enough, else on more
        ws = [max(_header_width(headers[i], lines), need(i)) for i in cols]
        floor = [
            max(_header_width(headers[i], lines), min(floor_cut if i in cut else floor_wrap, need(i)))
            if i in cut or i in wrap
            else w
            for i, w in zip(cols, ws)
        ]
        over = total(ws) - width
        while over > 0:
            j = max(range(len(cols)), key=lambda k: (ws[k] - floor[k], ws[k]))
            room = ws[j] - floor[j]
            if room <= 0:
                break
            others = [ws[k] for k in range(len(cols)) if k != j and (cols[k] in cut or cols[k] in wrap)]
            step = min(room, over, max(1, ws[j] - max(others, default=0)))
            ws[j] -= step
            over -= step
        if over <= 0:
            fitted = ws
            break
    if fitted is None:
        return None
    ws = fitted
    slack = width - total(ws)
    for lines in (2, 1):  # fewer header lines where the room allows
        for k, i in enumerate(cols):
            want = min(natural[k], max(ws[k], _header_width(headers[i], lines)))
            if ws[k] < want <= ws[k] + slack:
                slack -= want - ws[k]
                ws[k] = want
    for k in sorted(range(len(cols)), key=lambda k: ws[k]):  # cut cells get back what is left
        if cols[k] not in cut and cols[k] not in wrap:
            continue
        if slack <= 0:
            break
        give = min(slack, natural[k] - ws[k])
        ws[k] += give
        slack -= give
    return ws


_UNIT = re.compile(r"(?<=\d) (?=(?:µs|ms|s|%|B|KiB|MiB|GiB|TiB)\b)")


def _wrap_cell(text: str, width: int) -> list[str]:
    """A cell over several lines: broken after `` + `` / `` = `` where it can be (a sum of
    parts), never between a number and its unit."""
    keep = _UNIT.sub("\u00a0", text)  # textwrap does not break at a no-break space
    lines: list[str] = []
    for part in re.split(r"(?<= [+=]) ", keep):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        elif len(part) <= width:
            lines.append(part)
        else:
            lines += textwrap.wrap(part, width, break_on_hyphens=False)
    return [x.replace("\u00a0", " ") for x in lines] or [""]


def text_table(
    headers: list[str],
    rows: list[list],
    markdown: bool,
    width: Optional[int] = None,
    cut: tuple[int, ...] = (),
    wrap: tuple[int, ...] = (),
    drop: tuple[int, ...] = (),
) -> str:
    """A plain-text table (columns padded) or a markdown one; cells are shown with str().

    With a ``width``, a text table gives way in this order until it fits: headers go over
    several lines; columns in ``cut`` are cut in the middle (``…``) and columns in ``wrap``
    wrap over several lines, down to a floor; then columns in ``drop`` are left out, the first
    first. Markdown tables (for files and PR comments) are never narrowed."""
    rows = [[str(c) for c in r] for r in rows]
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(out)
    cols = list(range(len(headers)))
    ws: Optional[list[int]] = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    if width is not None:
        elastic = set(cut) | set(wrap)
        # while a column can still be left out, names and wrapped cells keep a legible width;
        # only then do they narrow down to the hard floor
        for floor_cut, floor_wrap in ((_SOFT_CUT, _SOFT_WRAP), (_MIN_CUT, _MIN_CUT)):
            cols = list(range(len(headers)))
            fit = _widths(headers, rows, cols, width, set(cut), set(wrap), floor_cut, floor_wrap)
            for d in drop:
                if fit is not None:
                    break
                cols = [c for c in cols if c != d]
                fit = _widths(headers, rows, cols, width, set(cut), set(wrap), floor_cut, floor_wrap)
            if fit is not None:
                break
        if fit is None:  # nothing left to give: as narrow as it gets
            fit = [
                max(_header_width(headers[i], 99), min(_MIN_CUT, max((len(r[i]) for r in rows), default=0)))
                if i in elastic
                else max(_header_width(headers[i], 99), max((len(r[i]) for r in rows), default=0))
                for i in cols
            ]
        ws = fit
    assert ws is not None
    head = [
        textwrap.wrap(headers[i], w, break_on_hyphens=True) or [""] if len(headers[i]) > w else [headers[i]]
        for i, w in zip(cols, ws)
    ]
    depth = max(len(h) for h in head)
    head = [[""] * (depth - len(h)) + h for h in head]  # bottom-aligned over the rule
    out = [_SEP.join(h[k].ljust(w) for h, w in zip(head, ws)).rstrip() for k in range(depth)]
    out.append(_SEP.join("-" * w for w in ws))
    for r in rows:
        cells = []
        for i, w in zip(cols, ws):
            c = r[i]
            if len(c) <= w:
                cells.append([c])
            elif i in wrap:
                cells.append(_wrap_cell(c, w))
            else:
                cells.append([cut_middle(c, w)])
        for k in range(max(len(c) for c in cells)):
            out.append(_SEP.join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, ws)).rstrip())
    return "\n".join(out)


def device_line(rep: dict) -> str:
    d = rep.get("device") or {}
    if not d:
        return "device: none recorded"
    peaks = d.get("peaks") or {}
    fl = peaks.get("flops") or {}
    if not d.get("key") and not fl:
        return f"device: {d.get('name')} (unknown: give peaks with --peaks)"
    raised = {a.get("peak"): a for a in d.get("roof_adjustments") or []}
    keys = [k for k in ("bf16", "fp16", "fp8", "tf32", "fp32") if k in fl and (k != "fp8" or "fp8" in raised)]
    parts = [f"{k} {rate(fl[k], 'FLOP/s')}{_raised(raised.get(k), 'FLOP/s')}" for k in keys]
    bw = peaks.get("memory_bandwidth")
    return (
        f"device: {d.get('name')} ({d.get('label') or 'user peaks'}; {d.get('basis')} peaks: "
        + ", ".join(parts)
        + f", memory {rate(bw, 'B/s')}{_raised(raised.get('memory_bandwidth'), 'B/s')})"
    )


def _raised(a: Optional[dict], unit: str) -> str:
    """`` (datasheet; a real kernel beat the 802 TFLOP/s benchmark)``: a roof raised above the
    table's figure (device.roof_adjustments), in a few words; the JSON has the whole reason."""
    if not a or a.get("from") is None:
        return ""
    old = rate(float(a["from"]), unit)
    if a.get("to_basis") == "datasheet":
        who = {
            "recorded": f"a real kernel beat the {old} benchmark",
            "exact_flops": f"a kernel here with exact FLOPs beat {old}",
            "measured_dram": f"counters here measured more than {old}",
        }.get(str(a.get("evidence")), f"{old} was beaten")
        return f" (datasheet; {who})"
    return f" (raised from {old}: the best achieved here, above the datasheet: check the count)"


def _score_tensors_text(g: dict) -> str:
    """``5 × 128 MiB``, or with mixed dtypes ``5, 512 MiB (3 bf16, 2 fp32)``: the S×S tensors one
    call allocates, each at its own dtype (memory/footprint.py)."""
    n = g.get("score_tensors") or 0
    if not n:
        return "–"
    dts = g.get("score_tensor_dtypes") or {}
    total = g.get("score_tensor_bytes")
    if total is None or (len(dts) <= 1 and total == n * g["score_matrix_bytes"]):
        return f"{n} × {fmt_bytes(g['score_matrix_bytes'])}"
    parts = ", ".join(f"{c} {d}" for d, c in sorted(dts.items(), key=lambda x: -x[1]))
    return f"{n}, {fmt_bytes(total)} ({parts})"


def measurements_line(rep: dict) -> str:
    """'measured: ...' when hardware counters replaced the model (roofline/measured.py), else ''."""
    m = rep.get("measurements")
    if not m or not m.get("source"):
        return ""
    src = f"Nsight Compute export {m.get('file')}" if m["source"] == "ncu" else "CUPTI counter ranges"
    if m.get("ranges") is not None:
        return (
            f"measured: {src}, {m.get('rows')} ranges without a kernel timeline "
            "(listed in the JSON report under measurements.ranges)"
        )
    steps = (m.get("window") or {}).get("steps") or []
    return (
        f"measured: {src}, {m['kernels_joined']} of {m['kernels_total']} kernels"
        + (f" ({', '.join(steps)})" if steps else "")
        + ": utilisations and bounds from the counters"
    )


def phase_rows(rep: dict) -> list[list[str]]:
    rows = []
    for p in rep.get("phases", []):
        e, ub = p.get("estimated"), p.get("upper_bound")
        word = _UPPER_BOUND_WORD if ub and p["bound"] == "unknown" else _BOUND_WORD.get(p["bound"], p["bound"])
        rows.append(
            [
                PHASE_LABELS.get(p["phase"], p["phase"]),
                "fwd" if p["direction"] == "forward" else "bwd",
                us(p["time_us"]),
                word,
                est(pct(p["memory_util"]), e, ub),
                est(pct(p["compute_util"]), e, ub),
                str(p["kernels"]),
                pct(p["share"]),
            ]
        )
    return rows


PHASE_HEADERS = [
    "operation",
    "dir",
    "latency",
    "bottleneck",
    "memory-bandwidth utilization",
    "compute utilization",
    "kernels",
    "share of attention",
]
KERNEL_HEADERS = ["kernel", "phase", "dir", "calls", "total", "bound", "mem util", "compute util"]


def where(src: Optional[dict]) -> str:
    """A source line (sources.py) as ``file.py:123`` (the file's last path component); empty without."""
    if not src:
        return ""
    return f"{src['file'].rsplit('/', 1)[-1]}:{src['line']}"


def gain_text(finding: dict) -> str:
    """A finding's gains per step, the step time first: ", per step: ~1.80 ms of step time, ~2.33 ms
    of GPU time" (estimates carry "~"; a GPU figure a replay measured says "measured"), or ""
    without either. Totals over the trace where the report has no per-step block."""
    ps = finding.get("per_step")
    measured = (finding.get("evidence") or {}).get("gain_source") == "measured"
    src = ps if ps else finding
    parts = []
    for b in ("step", "gpu"):
        v = src.get(f"{b}_gain_us")
        if v is None and not ps and b == (finding.get("gain_basis") or "gpu"):
            v = finding.get("estimated_gain_us")
        if v:
            mark = "measured " if measured and b == "gpu" else "~"
            parts.append(f"{mark}{us(v)} of {'GPU' if b == 'gpu' else 'step'} time")
    if not parts:
        return ""
    where = "per step" if ps else "over the trace"
    return f", {where}: " + ", ".join(parts)


def advice_sources(finding: dict, n: int = 3) -> list[dict]:
    """The distinct source lines of a finding's evidence kernel groups, longest first."""
    seen, out = set(), []
    for g in sorted((finding.get("evidence") or {}).get("kernels") or [], key=lambda g: -(g.get("time_us") or 0)):
        s = g.get("source")
        if s and (s["file"], s["line"]) not in seen:
            seen.add((s["file"], s["line"]))
            out.append(s)
    return out[:n]


def short_kernel_name(name: str) -> str:
    """A kernel's name without what a narrow table cannot afford: the return type, ``(anonymous
    namespace)::``, template arguments and the parameter list (``--wide`` shows the whole name)."""
    s = name[5:] if name.startswith("void ") else name
    s = strip_templates(s.replace("(anonymous namespace)::", ""))
    cut = s.find("(")
    return (s[:cut] if cut > 0 else s).strip() or name


# Template wrappers whose first argument says what the kernel computes (PyTorch's TensorIterator
# kernels are all one of a few loop templates; the functor or lambda's enclosing function tells them apart).
_LOOP_WRAPPERS = frozenset({"gpu_kernel_impl", "gpu_kernel_impl_nocast"})
_TYPE_ARG = re.compile(
    r"(?:std::|c10::|at::Half\b|at::BFloat16\b|float\b|double\b|int\b|long\b|bool\b|unsigned\b|char\b"
    r"|short\b|__half\b|__nv_bfloat16\b|Trivial)"
)
_IDENT = re.compile(r"[A-Za-z_][\w:]*")


def _template_args(s: str) -> Optional[list[str]]:
    """The top-level template arguments of the first ``<...>`` in ``s`` before any ``(``; None without."""
    lt, paren = s.find("<"), s.find("(")
    if lt < 0 or 0 <= paren < lt:
        return None
    args, depth, start = [], 0, lt + 1
    for i in range(lt, len(s)):
        ch = s[i]
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
            if depth == 0:
                args.append(s[start:i])
                return [a.strip() for a in args]
        elif ch == "," and depth == 1:
            args.append(s[start:i])
            start = i + 1
    return None


def _arg_hint(arg: str, depth: int = 0) -> Optional[str]:
    """What one template argument names: a functor's or enclosing function's last name component,
    through loop wrappers (``gpu_kernel_impl_nocast<...>``) and into a functor's own functor argument."""
    m = _IDENT.match(arg)
    if not m or _TYPE_ARG.match(arg) or depth > 3:
        return None
    last = m.group(0).rstrip(":").rsplit("::", 1)[-1]
    inner = _template_args(arg) if arg[m.end() :].startswith("<") else None
    inner_hint = next((h for a in inner or [] if (h := _arg_hint(a, depth + 1))), None)
    if last in _LOOP_WRAPPERS:
        return inner_hint
    if inner_hint and last.endswith("Functor") and inner_hint.endswith("Functor"):
        return f"{last}<{inner_hint}>"
    return last


def kernel_template_hint(name: str) -> Optional[str]:
    """What a templated kernel computes, from its first telling template argument: ``direct_copy_kernel_cuda``
    for ``at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)::{lambda...}, ...>``,
    ``BinaryFunctor<MulFunctor>`` for a vectorized multiply; None when the name has no such argument."""
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)::", "")
    for a in _template_args(s) or []:
        if not a or a[0].isdigit():
            continue
        h = _arg_hint(a)
        if h:
            return h
    return None


def distinct_short_names(names: list[str]) -> list[str]:
    """``short_kernel_name`` of each name, except where two different names would read the same: those
    show their last name component with what their template argument computes
    (``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``), so a narrow table keeps them apart."""
    shorts = [short_kernel_name(n) for n in names]
    owners: dict[str, set[str]] = {}
    for n, sh in zip(names, shorts):
        owners.setdefault(sh, set()).add(n)
    out = []
    for n, sh in zip(names, shorts):
        hint = kernel_template_hint(n) if len(owners[sh]) > 1 else None
        out.append(f"{sh.rsplit('::', 1)[-1]}<{hint}>" if hint else sh)
    return out


def _top_kernel_rows(rep: dict, top: int, name_width: Optional[int], short: bool) -> list[list[str]]:
    """Attention kernels grouped by (name, phase, direction), longest total first; utilisations
    are those of the group's longest kernel."""
    att = [k for k in rep["kernels"] if k["attention"]]
    att.sort(key=lambda k: -(k["dur_us"] or 0))
    groups: dict = {}
    for k in att:
        g = groups.setdefault((k["name"], k["phase"], k["direction"]), [0.0, 0, k])
        g[0] += k["dur_us"] or 0
        g[1] += 1
    rows = []
    shown_groups = sorted(groups.items(), key=lambda x: -x[1][0])[:top]
    names = [name for (name, _, _), _ in shown_groups]
    shown_names = distinct_short_names(names) if short else names
    for ((_, ph, d), (t, n, k)), shown in zip(shown_groups, shown_names):
        e, ub = k.get("estimated"), k.get("upper_bound")
        rows.append(
            [
                cut_middle(shown, name_width),
                PHASE_LABELS.get(ph, ph),
                "fwd" if d == "forward" else "bwd",
                str(n),
                us(t),
                k["bound"],
                est(pct(k["memory_util"]), e, ub),
                est(pct(k["compute_util"]), e, ub),
                where(k.get("source")),
            ]
        )
    if not any(r[-1] for r in rows):  # the source column only for traces recorded with_stack
        rows = [r[:-1] for r in rows]
    return rows


def step_line(rep: dict) -> str:
    """The step around attention, per step (steps.per_step, the strip's figures): "step 26.8 ms (mean of
    2 profiled steps): GPU busy 18.0 ms, idle 8.8 ms (33 %); attention 10.8 ms, 40 % of the step"."""
    ps = per_step(rep)
    att = ps["attention_time_us"]
    step = ps["step_us"]
    n = ps["steps"]
    head = f"step {us(step)}" if step else "step: no profiled step"
    head += f" (mean of {n} profiled steps)" if n > 1 else (" (one profiled step)" if n == 1 else "")
    busy = f"GPU busy {us(ps['gpu_busy_us'])}"
    if ps["idle_us"] is not None and step:
        busy += f", idle {us(ps['idle_us'])} ({pct(ps['idle_us'] / step)})"
    share = f", {pct(att / step)} of the step" if step else ""
    return f"{head}: {busy}; attention {us(att)}{share}"


def render_text(
    reports: list[dict], markdown: bool = False, top: int = 10, memory: bool = False, width: Optional[int] = None
) -> str:
    """The readable report: per trace its summary, phase table, top kernels, (memory), notes and
    advice. ``width``: fit every line to that many columns (tables narrow, prose wraps, names
    are cut in the middle); None prints everything (``--wide``, files, markdown)."""
    # markdown is never narrowed, but names its kernels as a terminal does (whole names with --wide)
    short_names = width is not None
    if markdown:
        width = None
    out = []
    for rep in reports:
        if rep.get("status") != "ok":
            continue
        h = "## " if markdown else ""
        out.append(f"{h}{cut_middle(rep['path'], width)}")
        if (rep.get("trace") or {}).get("partial"):
            mark = "**" if markdown else ""
            out.append(
                para(
                    f"{mark}PARTIAL: the file is truncated; only the events before the cut were analysed "
                    f"(--allow-partial){mark}",
                    width,
                )
            )
        out.append(para(device_line(rep), width))
        if measurements_line(rep):
            out.append(para(measurements_line(rep), width))
        share = rep.get("attention_share")
        out.append(para(step_line(rep), width))
        n = divisor(rep)
        out.append(
            para(
                (f"over the {n} profiled steps: " if n > 1 else "")
                + f"GPU time {us(rep['gpu_time_us'])} (busy {us(rep['gpu_busy_us'])});"
                f" attention {us(rep['attention_time_us'])}"
                f" ({pct(share)} of GPU work): core {us(rep['core_attention_time_us'])},"
                f" projections {us(rep['projection_time_us'])};"
                f" forward {us(rep['forward_time_us'])}, backward {us(rep['backward_time_us'])};"
                f" fused {us(rep['fused_time_us'])}, unfused core {us(rep['unfused_core_time_us'])}",
                width,
            )
        )
        if rep.get("step"):
            out.append(f"step: {rep['step']}")
        out.append("")
        if rep.get("phases"):
            # narrowed: the operation label gives first, then the kernel count, then the share
            out.append(text_table(PHASE_HEADERS, phase_rows(rep), markdown, width, cut=(0,), drop=(6, 7)))
            out.append("")
            rows = _top_kernel_rows(rep, top, None, short=short_names)
            if rows:
                out.append(("### " if markdown else "") + "Top attention kernels (by total time)")
                # the user's source line (sources.py) of each group's longest kernel, when recorded
                with_src = len(rows[0]) > len(KERNEL_HEADERS)
                headers = KERNEL_HEADERS + (["source"] if with_src else [])
                out.append(
                    text_table(
                        headers,
                        rows,
                        markdown,
                        width,
                        cut=(0, 1) + ((8,) if with_src else ()),
                        drop=(3, 7) + ((8,) if with_src else ()) + (2,),
                    )
                )
                out.append("")
        out += model_text(rep, markdown, width)
        if memory:
            out.append(render_memory_text(rep, markdown, width))
        for n in rep.get("notices", []):
            out.append(para(f"note: {n['message']} — {n['fix']}", width))
        for w in rep.get("warnings", []):
            out.append(para(f"warning: {w}", width))
        replay = replay_text(rep, markdown, width)
        if replay:
            out.append(replay)
        for a in rep.get("advice", []) or []:
            out.append(para(f"advice [{a.get('severity')}{gain_text(a)}]: {a.get('title')}: {a.get('detail')}", width))
            if a.get("how"):
                out.append(para(f"  how: {a['how']}", width, indent="    "))
            srcs = advice_sources(a)
            if srcs:
                out.append(
                    para("  where: " + ", ".join(f"{where(s)} ({s['function']})" for s in srcs), width, indent="    ")
                )
        checks = rep.get("advice_checks") or []
        if not rep.get("advice") and checks:
            out.append(
                para(
                    "advice: no finding; checked: "
                    + "; ".join(f"{c['id']} ({c.get('reason') or 'fired'})" for c in checks),
                    width,
                )
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


REPLAY_HEADERS = ["call", "backend", "status", "fwd", "bwd", "total", "vs trace's", "err vs math / why not"]


def replay_text(rep: dict, markdown: bool = False, width: Optional[int] = None) -> str:
    """The backends a replay beside the trace measured, per call (replay/results.py); '' without one."""
    block = rep.get("replay") or {}
    m = block.get("measured")
    calls = [c for c in block.get("calls") or [] if c.get("replayed")]
    if not m or not calls:
        return ""
    h = "### " if markdown else ""
    used = "" if m.get("used_for_advice") else f" — not used for the advice: {m.get('not_used_because')}"
    head = f"{h}Replayed backends ({block.get('file')}, {m.get('device')}, torch {m.get('torch')}){used}"
    rows = []
    for c in calls:
        rp = c["replayed"]
        cur = next((r for r in rp["backends"] if r["backend"] == rp.get("trace_backend") and r["total_us"]), None)
        for r in rp["backends"]:
            k = rp["basis"] == "kernel"
            f = r["kernel_forward_us"] if k else r["forward_us"]
            b = r["kernel_backward_us"] if k else r["backward_us"]
            err = r.get("error_vs_math") or {}
            why = r.get("reason") or ""
            if r["status"] == "ok":
                e = [x for x in (err.get("forward"), err.get("backward")) if x is not None]
                why = (f"{max(e):.2g}" if e else "") + (f" {r['check']}" if r.get("check") not in (None, "ok") else "")
            mark = "*" if r["backend"] == rp.get("trace_backend") else ""
            ratio = f"{cur['total_us'] / r['total_us']:.2f}x" if cur and r["total_us"] else ""
            rows.append(
                [c["id"], r["backend"] + mark, r["status"], us(f), us(b) if b else "", us(r["total_us"]), ratio, why]
            )
    note = (
        f"({'kernel time' if calls[0]['replayed']['basis'] == 'kernel' else 'CUDA event time'} per call; "
        "* the trace's backend; 'vs trace's' > 1 is faster)"
    )
    table = text_table(REPLAY_HEADERS, rows, markdown, width, cut=(0, 7), wrap=(7,), drop=(6, 3, 4))
    return "\n".join([para(head, width), table, para(note, width), ""])


SITE_HEADERS = ["site", "calls", "time", "fwd", "bwd", "share", "shape", "backend", "bound", "MFU", "top finding"]


def _site_shape(s: dict) -> str:
    sh = (s.get("shapes") or [{}])[0]
    if "sq" not in sh:
        return sh.get("inputs") or "?"
    heads = f"{sh['h']}/{sh['hk']}" if sh["hk"] != sh["h"] else f"{sh['h']}"
    return f"B{sh['b']} H{heads} {sh['sq']}x{sh['sk']} D{sh['d']}" + (f"/{sh['dv']}" if sh["dv"] != sh["d"] else "")


def site_prefix(rep: dict) -> str:
    """The module path every site shares (``T5Model_0/``), when there are several module sites
    and each keeps a name of its own without it: a narrow text table then shows the part that
    tells them apart (a middle cut of ``T5Model_0/T5Stack_0/...`` hid encoder from decoder)."""
    sites = rep.get("sites") or []
    if len(sites) < 2 or any(s.get("kind") != "module" for s in sites):
        return ""
    parts = [str(s["name"]).split("/") for s in sites]
    n = 0
    while all(len(p) > n + 1 for p in parts) and len({p[n] for p in parts}) == 1:
        n += 1
    return "/".join(parts[0][:n]) + "/" if n else ""


def site_rows(rep: dict, prefix: str = "") -> list[list[str]]:
    """One row per attention site (model.py), longest first; names without ``prefix``."""
    rows = []
    for s in rep.get("sites") or []:
        mfu = (s.get("mfu") or {}).get("useful")
        exact = True
        for x in (rep.get("flops_ledger") or {}).get("sites") or []:
            if x.get("site") == s["id"]:
                exact = x.get("useful_exact", True)
        f = s.get("top_finding")
        rows.append(
            [
                s["name"][len(prefix) :] if prefix and s["name"].startswith(prefix) else s["name"],
                str(s["calls"]),
                us(s["time_us"]),
                us(s["forward_us"]),
                us(s["backward_us"]),
                pct(s.get("share")),
                _site_shape(s),
                "+".join(b["backend"] for b in s.get("backends") or []) or MISSING,
                s.get("bound") or MISSING,
                est(pct(mfu), False, not exact) if mfu is not None else MISSING,
                f"{f['id']} ({f['severity']})" if f else "",
            ]
        )
    return rows


def _flops(x: Optional[float]) -> str:
    return rate(x, "FLOP") if x is not None else MISSING


def ledger_line(rep: dict) -> Optional[str]:
    """The FLOPs ledger in one sentence: the three counts, attention MFU on each and the HFU."""
    led = rep.get("flops_ledger")
    if not led or led.get("useful") is None:
        return None
    exact = led.get("useful_exact")
    mfu = led.get("mfu") or {}
    over = set(led.get("exceeds_peak") or [])

    def m(k: str) -> str:
        if k in over:
            return "above the roof (the count includes work the kernels skip)"
        upper = (k == "useful" and not exact) or (k == "executed" and bool(led.get("executed_upper_bound")))
        return est(pct(mfu.get(k)), k == "executed", upper)

    peaks = ", ".join(f"{k} {rate(v, 'FLOP/s')}" for k, v in (led.get("peaks") or {}).items())
    hfu = (led.get("hfu") or {}).get("value")
    hfu_mark = "≤" if (led.get("hfu") or {}).get("upper_bound") else "~"
    # FP8 kernels on their own roof (hfu.by_roof), not folded into one model-wide figure
    fp8 = ((led.get("hfu") or {}).get("by_roof") or {}).get("fp8")
    fp8_text = (
        f" (fp8 kernels ~{pct(fp8.get('utilization'))} of the fp8 roof {rate(fp8.get('peak_flops_per_s'), 'FLOP/s')})"
        if fp8
        else ""
    )
    # Flex calls whose block counts the trace lacks: how to record them (docs/cost-model.md, Block masks)
    no_counts = any(c.get("executed_basis") == "dense (block counts not recorded)" for c in led.get("calls") or [])
    hint = (
        ". Flex block counts are not in the trace: record_function(flex_blocks_name(block_mask)) around the "
        "call records them (tb_attention_plugin.roofline.ledger)"
        if no_counts
        else ""
    )
    return (
        f"FLOPs ledger (attention): useful {est(_flops(led['useful']), False, not exact)}, "
        f"executed {est(_flops(led['executed']), True, bool(led.get('executed_upper_bound')))}, "
        f"dense {_flops(led['dense'])}; attention MFU: useful {m('useful')}, "
        f"executed {m('executed')}, dense {m('dense')} (roof {peaks or MISSING}); "
        f"HFU of the GPU span {hfu_mark}{pct(hfu)}{fp8_text}{hint}"
    )


def boundary_line(rep: dict) -> Optional[str]:
    """The FFN boundary in one sentence: what runs after attention's output, and the fusions."""
    b = rep.get("boundary")
    if not b or not b.get("complete_calls"):
        return None
    from .memory.boundary import ROLE_LABELS

    roles = ", ".join(
        f"{ROLE_LABELS.get(r['role'], r['role'])} {us(r['time_us'])} in {r['kernels']} kernel"
        + ("s" if r["kernels"] != 1 else "")
        for r in b["roles"]
    )
    fus = "; ".join(f"{f['label']} ~{us(f['estimated_gain_us'])}" for f in b.get("fusions") or [])
    return (
        f"FFN boundary: {b['complete_calls']} call(s), {us(b['time_us'])} and {fmt_bytes(b['bytes'])} "
        f"from attention's output to the next matmul ({roles}); fusions: {fus or 'none apply'}"
        + (
            f"; all of them ~{us(b['estimated_gain_us'])} (~{fmt_bytes(b['removable_bytes'])} not moved)"
            if b.get("fusions")
            else ""
        )
    )


def model_text(rep: dict, markdown: bool, width: Optional[int]) -> list[str]:
    """The Sites table, the FLOPs ledger and the FFN boundary lines of the text/markdown output."""
    out = []
    prefix = "" if markdown else site_prefix(rep)
    rows = site_rows(rep, prefix)
    if rows:
        out.append(("### " if markdown else "") + "Attention sites" + (f" (under {prefix})" if prefix else ""))
        out.append(text_table(SITE_HEADERS, rows, markdown, width, cut=(0, 6, 10), drop=(10, 4, 3, 5, 6)))
        out.append("")
    for line in (ledger_line(rep), boundary_line(rep)):
        if line:
            out.append(para(line, width))
    if len(out) and out[-1] != "":
        out.append("")
    return out


def render_devices(rows: list[dict], width: Optional[int] = None) -> str:
    """``tb-attention devices``: each table entry's datasheet peaks and source, then the measured
    ones where the table has them (roofline/devices.py)."""
    out = []
    for e in rows:
        fl = ", ".join(f"{k} {v / 1e12:g}" for k, v in e["flops"].items())
        out.append(
            para(
                f"{e['label']}: {fl} TFLOP/s; memory {e['memory_bandwidth'] / 1e12:g} TB/s  [{e['source']}]",
                width,
                indent="      ",
            )
        )
        if e.get("measured"):
            m = e["measured"]
            fl = ", ".join(f"{k} {v / 1e12:g}" for k, v in m["flops"].items())
            out.append(
                para(
                    f"    measured: {fl} TFLOP/s; memory {m['memory_bandwidth'] / 1e12:g} TB/s  [{m['source']}]",
                    width,
                    indent="      ",
                )
            )
            for k, src in m.get("sources", {}).items():
                out.append(para(f"    measured {k}: [{src}]", width, indent="      "))
            for k, why in m.get("beaten", {}).items():
                out.append(
                    para(
                        f"    roof {k}: the datasheet's, a real kernel beat the measured figure [{why}]",
                        width,
                        indent="      ",
                    )
                )
    return "\n".join(out) + "\n"


CSV_COLUMNS = [
    "path",
    "id",
    "name",
    "kind",
    "ts",
    "dur_us",
    "device",
    "stream",
    "step",
    "attention",
    "phase",
    "direction",
    "tag_source",
    "scope",
    "op",
    "cost_op",
    "module_path",
    "dtype",
    "flops",
    "bytes",
    "intensity",
    "achieved_flops_per_s",
    "achieved_bytes_per_s",
    "compute_util",
    "memory_util",
    "bound",
    "bound_reason",
    "estimated",
    "partial",
]


def render_csv(reports: list[dict], memory: bool = False) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for rep in reports:
        if rep.get("status") != "ok":
            continue
        partial = bool((rep.get("trace") or {}).get("partial"))  # a truncated file read with --allow-partial
        for k in rep["kernels"]:
            w.writerow(
                [
                    rep["path"]
                    if c == "path"
                    else partial
                    if c == "partial"
                    else ("" if k.get(c) is None else k.get(c))
                    for c in CSV_COLUMNS
                ]
            )
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


def render_memory_text(rep: dict, markdown: bool = False, width: Optional[int] = None) -> str:
    """The memory section of the table / markdown report (``width``: as in :func:`render_text`)."""
    if markdown:
        width = None
    mem = rep.get("memory")
    h = "### " if markdown else ""
    if not mem:
        return f"{h}Memory\nno memory analysis in this report (re-run without a stale cache)\n"
    out = [f"{h}Memory and data movement"]
    if not mem.get("recorded"):
        fix = (mem.get("notice") or {}).get("fix")
        out.append(para("allocations: not recorded" + (f" — {fix}" if fix else ""), width))
    if mem.get("error"):
        out.append(para(f"memory analysis failed: {mem['error']}", width))
    for d in mem.get("devices") or []:
        a = d["attention"]
        out.append(
            para(
                f"{d['device']}: {d['allocs']} allocations ({fmt_bytes(d['alloc_bytes'])}), {d['frees']} frees; "
                f"peak allocated {fmt_bytes(d['peak_allocated_bytes'])}"
                + (
                    f" (reserved {fmt_bytes(d['peak_reserved_bytes'])})"
                    if d.get("peak_reserved_bytes") is not None
                    else ""
                )
                + f"; inside attention {a['allocs']} allocations, {fmt_bytes(a['alloc_bytes'])}",
                width,
            )
        )
        if d["phases"]:
            rows = [
                [
                    PHASE_LABELS.get(p["phase"], p["phase"]),
                    "fwd" if p["direction"] == "forward" else "bwd",
                    str(p["allocs"]),
                    fmt_bytes(p["alloc_bytes"]),
                    str(p["frees"]),
                    fmt_bytes(p["free_bytes"]),
                    fmt_bytes(p["net_bytes"]),
                    (
                        f"{(p['largest'] or {}).get('op') or '?'} {shape_text((p['largest'] or {}).get('shape'))} "
                        f"{fmt_bytes((p['largest'] or {}).get('bytes'))}"
                    )
                    if p.get("largest")
                    else "–",
                    str(p["score_allocs"]),
                ]
                for p in d["phases"]
            ]
            out.append("")
            out.append(
                text_table(
                    ["phase", "dir", "allocs", "allocated", "frees", "freed", "net", "largest allocation", "S×S"],
                    rows,
                    markdown,
                    width,
                    cut=(0,),
                    wrap=(7,),
                    drop=(4, 5),
                )
            )
        pk = d.get("attention_peak")
        if pk:
            out.append("")
            out.append(
                para(
                    f"peak inside attention: {fmt_bytes(pk['total_allocated_bytes'])} allocated at "
                    f"{PHASE_LABELS.get(pk['phase'], pk['phase'])} ({pk['direction']}, {pk['op'] or '?'}); "
                    f"held by:",
                    width,
                )
            )
            rows = []
            for g in pk["held_by"]:
                rows.append(
                    [
                        g["op"] or "?",
                        shape_text(g["shape"]),
                        g["dtype"] or "?",
                        _held_phase(g),
                        str(g["count"]),
                        fmt_bytes(g["bytes"]),
                        f"{100 * (g['share'] or 0):.1f}%",
                        "S×S scores" if g["score_matrix"] else "",
                    ]
                )
            if pk["before_window_bytes"]:
                rows.append(
                    [
                        "(allocated before the trace)",
                        "",
                        "",
                        "",
                        "",
                        fmt_bytes(pk["before_window_bytes"]),
                        f"{100 * pk['before_window_bytes'] / max(1, pk['total_allocated_bytes']):.1f}%",
                        "",
                    ]
                )
            out.append(
                text_table(
                    ["op", "shape", "dtype", "phase", "count", "bytes", "share", ""],
                    rows,
                    markdown,
                    width,
                    cut=(0, 3),
                    wrap=(1,),
                    drop=(2,),
                )
            )
        calls = [c for c in d.get("calls") or [] if c.get("fused_alloc_bytes") is not None]
        if calls:
            out.append("")
            rows = []
            for c in calls[:10]:
                s = c["shapes"]
                rows.append(
                    [
                        c["scope"] or "?",
                        str(c["calls"]),
                        f"B{s['b']} H{s['h']}/{s['hk']} S{s['sq']}x{s['sk']} D{s['d']} {s['dtype']}",
                        fmt_bytes(c["core_peak_bytes"]),
                        fmt_bytes(c["fused_alloc_bytes"]),
                        str(c["score_allocs"]),
                        fmt_bytes(c.get("score_matrix_bytes")),
                    ]
                )
            out.append(
                text_table(
                    [
                        "attention call",
                        "calls",
                        "shapes",
                        "core peak above inputs",
                        "fused kernel (out+lse)",
                        "S×S allocs/call",
                        "one S×S",
                    ],
                    rows,
                    markdown,
                    width,
                    cut=(0,),
                    wrap=(2,),
                    drop=(1, 6),
                )
            )
    fp = mem.get("footprint") or {}
    if fp.get("layers"):
        out.append("")
        out.append(
            para(
                f"K/V footprint from shapes: {fmt_bytes(fp['kv_bytes'])} over {fp['basis_calls']} "
                f"attention calls ({fp['basis']})",
                width,
            )
        )
        rows = []
        for g in fp["layers"][:10]:
            s = g["shapes"]
            rows.append(
                [
                    g["scope"] or "?",
                    str(g["calls"]),
                    f"B{s['b']} H{s['h']} KV{s['hk']} Sq{s['sq']} Sk{s['sk']} D{s['d']} {s['dtype']}",
                    fmt_bytes(g["kv_bytes_per_call"]),
                    fmt_bytes(g["fused_activation_bytes"]),
                    _score_tensors_text(g),
                    g["kv_source"],
                ]
            )
        out.append(
            text_table(
                ["attention call", "calls", "shapes", "K/V per call", "fused q+k+v+out+lse", "S×S tensors", "K/V from"],
                rows,
                markdown,
                width,
                cut=(0, 6),
                wrap=(2,),
                drop=(1, 6),
            )
        )
        if len(fp.get("alternatives") or []) > 1:
            rows = [
                [
                    a["name"],
                    str(a["kv_heads"]) if a["kv_heads"] is not None else "latent",
                    fmt_bytes(a["bytes"]),
                    signed_pct(100 * ((a["ratio"] or 1) - 1)),
                ]
                for a in fp["alternatives"]
            ]
            out.append(text_table(["KV layout", "KV heads", "K/V bytes", "vs current"], rows, markdown, width))
            out.append(para(f"({mem['assumptions']['mla']})", width))
    elif fp.get("message"):
        out.append(para(f"K/V footprint: {fp['message']}", width))
    dm = mem.get("data_movement") or {}
    if dm.get("note"):
        out.append(para(f"data movement: {dm['note']}", width))
    if dm.get("copies") or dm.get("transfers") or dm.get("allocator_calls"):
        out.append("")
        t = dm["totals"]
        out.append(
            para(
                f"data movement inside attention: {t['copy_calls']} copies ({us(t['copy_gpu_time_us'])} "
                f"GPU, {fmt_bytes(t['copy_bytes'])}), {t['transfer_calls']} memcpy/memset "
                f"({us(t['transfer_time_us'])}, {fmt_bytes(t['transfer_bytes'])}), "
                f"{dm['allocator_calls']} aten::empty* calls",
                width,
            )
        )
        rows = [
            [
                g["op"] + (f" in {g['within']}" if g["within"] else ""),
                g["kind"],
                PHASE_LABELS.get(g["phase"], g["phase"]),
                "fwd" if g["direction"] == "forward" else "bwd",
                shape_text(g["shape"]),
                str(g["calls"]),
                str(g["instances"]),
                us(g["gpu_time_us"]),
                us(g["cpu_time_us"]),
                est(fmt_bytes(g["bytes"]), g["bytes_estimated"]),
            ]
            for g in dm["copies"][:15]
        ]
        rows += [
            [
                g["name"],
                g["kind"],
                PHASE_LABELS.get(g["phase"], g["phase"]),
                "fwd" if g["direction"] == "forward" else "bwd",
                "",
                str(g["calls"]),
                str(g["instances"]),
                us(g["time_us"]),
                "",
                fmt_bytes(g["bytes"]),
            ]
            for g in dm["transfers"][:10]
        ]
        if rows:
            out.append(
                text_table(
                    ["op", "kind", "phase", "dir", "shape", "calls", "attn calls", "GPU time", "CPU time", "bytes"],
                    rows,
                    markdown,
                    width,
                    cut=(0, 2),
                    wrap=(4,),
                    drop=(6, 8, 1),
                )
            )
    for f in mem.get("flags") or []:
        out.append(para(f"memory {f['severity']}: {f['message']} — {f['evidence']}. Fix: {f['fix']}", width))
    return "\n".join(out) + "\n"


MEMORY_CSV_COLUMNS = [
    "section",
    "path",
    "device",
    "phase",
    "direction",
    "op",
    "shape",
    "dtype",
    "kind",
    "count",
    "bytes",
    "time_us",
    "detail",
]


def memory_csv_rows(rep: dict) -> list[list]:
    """The memory section as rows of one long table (``MEMORY_CSV_COLUMNS``)."""
    mem = rep.get("memory") or {}
    path = rep.get("path")
    rows = []
    if not mem.get("recorded"):
        rows.append(
            [
                "notice",
                path,
                "",
                "",
                "",
                "",
                "",
                "",
                "no_memory_events",
                "",
                "",
                "",
                (mem.get("notice") or {}).get("fix") or "",
            ]
        )
    for d in mem.get("devices") or []:
        rows.append(
            [
                "device",
                path,
                d["device"],
                "",
                "",
                "",
                "",
                "",
                "peak_allocated",
                d["allocs"],
                d["peak_allocated_bytes"],
                "",
                f"alloc_bytes={d['alloc_bytes']} frees={d['frees']}",
            ]
        )
        for p in d["phases"]:
            lg = p.get("largest") or {}
            rows.append(
                [
                    "phase_allocs",
                    path,
                    d["device"],
                    p["phase"],
                    p["direction"],
                    lg.get("op") or "",
                    shape_text(lg.get("shape")) if lg else "",
                    lg.get("dtype") or "",
                    "alloc",
                    p["allocs"],
                    p["alloc_bytes"],
                    "",
                    f"frees={p['frees']} free_bytes={p['free_bytes']} score_allocs={p['score_allocs']}",
                ]
            )
        pk = d.get("attention_peak")
        if pk:
            for g in pk["held_by"]:
                rows.append(
                    [
                        "peak_held_by",
                        path,
                        d["device"],
                        g["phase"] or "",
                        g["direction"],
                        g["op"] or "",
                        shape_text(g["shape"]),
                        g["dtype"] or "",
                        "score_matrix" if g["score_matrix"] else ("attention" if g["attention"] else "outside"),
                        g["count"],
                        g["bytes"],
                        "",
                        f"peak={pk['total_allocated_bytes']}",
                    ]
                )
        for c in d.get("calls") or []:
            rows.append(
                [
                    "call_vs_fused",
                    path,
                    d["device"],
                    "",
                    "forward",
                    c["scope"] or "",
                    str(c.get("shapes") or ""),
                    (c.get("shapes") or {}).get("dtype") or "",
                    "core_peak",
                    c["calls"],
                    c.get("core_peak_bytes") or "",
                    "",
                    f"fused_alloc_bytes={c.get('fused_alloc_bytes')} score_allocs={c['score_allocs']}",
                ]
            )
    fp = mem.get("footprint") or {}
    for g in fp.get("layers") or []:
        rows.append(
            [
                "kv_footprint",
                path,
                "",
                "",
                "forward",
                g["scope"] or "",
                str(g["shapes"]),
                g["shapes"]["dtype"],
                g["kv_source"],
                g["calls"],
                g["kv_bytes_per_call"],
                "",
                f"fused_activation_bytes={g['fused_activation_bytes']} score_tensors={g['score_tensors']} "
                f"score_tensor_bytes={g.get('score_tensor_bytes')}",
            ]
        )
    for a in fp.get("alternatives") or []:
        rows.append(
            [
                "kv_alternative",
                path,
                "",
                "",
                "",
                a["name"],
                "",
                "",
                "kv_heads=" + str(a["kv_heads"]),
                "",
                a["bytes"],
                "",
                f"saving={a['saving']}",
            ]
        )
    dm = mem.get("data_movement") or {}
    for g in dm.get("copies") or []:
        rows.append(
            [
                "copy",
                path,
                "",
                g["phase"],
                g["direction"],
                g["op"],
                shape_text(g["shape"]),
                g["dtype"] or "",
                g["kind"],
                g["calls"],
                g["bytes"] if g["bytes"] is not None else "",
                g["gpu_time_us"],
                (g["within"] or "") + (" " + g["detail"] if g["detail"] else ""),
            ]
        )
    for g in dm.get("transfers") or []:
        rows.append(
            [
                "transfer",
                path,
                "",
                g["phase"],
                g["direction"],
                g["name"],
                "",
                "",
                g["kind"],
                g["calls"],
                g["bytes"],
                g["time_us"],
                g["copy"] or "",
            ]
        )
    for f in mem.get("flags") or []:
        rows.append(
            [
                "flag",
                path,
                "",
                "",
                "",
                f["code"],
                "",
                "",
                f["severity"],
                f.get("calls") or "",
                f.get("bytes") if f.get("bytes") is not None else "",
                f.get("time_us") or "",
                f"{f['message']}: {f['evidence']}",
            ]
        )
    return rows
