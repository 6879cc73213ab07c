"""Compare two runs: attention time per phase and direction, fused vs decomposed core
attention, projections, top kernel groups — and the regression gate built on it.

Pure functions over reports (the dicts of :mod:`.report`); nothing here reads files.

* :func:`summarize` reduces one report to a *side*: totals, phase rows, kernel groups, step
  count, device — everything a comparison needs and no kernel rows.
* :func:`aggregate` sums several sides (a directory of traces is one side).
* :func:`compare_reports` compares a baseline with a new run (reports or sides) and returns the
  documented structure (docs/report-schema.md, "Comparison"). The CLI (``tb-attention
  compare`` / ``check``) and the dashboard's ``/compare`` route both call it.
* :func:`check` applies a regression budget to a comparison.
* :func:`render` writes a comparison as a terminal table or markdown.

Conventions: ``delta`` = new − base, ``delta_pct`` = 100·delta/base, ``ratio`` = new/base,
``speedup`` = base/new (above 1: the new run is faster). When the two sides hold different
numbers of profiler steps, times, FLOPs, bytes and counts are per-step averages of each side
(``normalization``); utilisations and bounds never need normalising.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Optional

from .attention.backends import BACKEND_LABELS, backends as _kernel_backends, describe as _describe_backends
from .attention.patterns import strip_templates
from .attention.vocabulary import FLOW_ORDER, PHASE_LABELS, UNFUSED_CORE_PHASES
from .formats import (
    cut_middle,
    para,
    pct as _pct,
    signed_pct as _signed_pct,
    signed_us as _signed_us,
    significant as _sig,
    text_table,
    us as _us,
)
from .trace.arrays import unique_ints

COMPARE_SCHEMA = 1

# the vocabulary's core phases, in the order a layer runs them (attention/vocabulary.py)
UNFUSED_CORE = tuple(p for p in FLOW_ORDER if p in UNFUSED_CORE_PHASES)
CORE = UNFUSED_CORE + ("fused_attention",)
PROJECTIONS = ("qkv_proj", "out_proj")
OTHER = ("rotary", "layout", "other")
SECTIONS = (
    ("core", "core attention", CORE),
    ("projections", "projections", PROJECTIONS),
    ("other", "rotary, layout and other attention work", OTHER),
)
DIRECTIONS = ("forward", "backward")

# Report totals compared, by kind: times are normalised per step, shares are not.
TIME_TOTALS = (
    "attention_time_us",
    "core_attention_time_us",
    "projection_time_us",
    "forward_time_us",
    "backward_time_us",
    "fused_time_us",
    "unfused_core_time_us",
    "gpu_time_us",
    "gpu_busy_us",
    "kernel_time_us",
    "span_us",
    "idle_us",
    "step_time_us",
)
COUNT_TOTALS = ("attention_kernels", "instances")
SHARE_TOTALS = ("attention_share",)
# Phase-row fields carried per side; the first group is normalised per step.
_PHASE_SUMS = ("time_us", "kernels", "instances", "flops", "bytes")
_PHASE_RATES = (
    "share",
    "achieved_flops_per_s",
    "achieved_bytes_per_s",
    "intensity",
    "compute_util",
    "memory_util",
    "bound",
    "latency_cause",  # the trace view's cause of a latency-bound phase (launch, occupancy, stalled)
    "estimated",
    "cost_coverage",
)
ROOF_REACHED = 0.5
SAME_PCT = 1.0  # |delta_pct| below this: "about the same"
STEP_CHANGE_PCT = 10.0  # a step-time change (GPU span) the verdict names
STEP_NOT_ATTENTION = 5.0  # a step change this many times attention's: launches and idle time changed, not attention


# ---------------------------------------------------------------- kernel groups

_TEMPLATE_CHARS = re.compile(r"[<>]")
_SIZE = re.compile(r"\d+x\d*")  # 256x128, 64x4, 1x2x1, tilesize128x128x8, 5x
_NUMBER = re.compile(r"^\d+$")
_HEX = re.compile(r"^(0x[0-9a-fA-F]+|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,})$")
_TRANSPOSE = re.compile(r"^([TN]{1,3}|[tn]{1,2})$")
_PARAM_WORDS = frozenset({"knob", "tilesize", "stage", "warpsize", "cga"})  # a parameter's name, its value cut


def kernel_group(name: str) -> str:
    """The group a kernel name belongs to (docs/report-schema.md, "Kernel groups").

    1. drop ``void``, ``(anonymous namespace)::``, every template argument list ``<...>`` and the
       parameter list ``(...)``;
    2. split on ``_`` and cut the name at the first token that is a launch/tile parameter: a number
       (``7``), a size list (``256x128``, ``64x4``, ``tilesize128x128x8``, ``cga1x1x1``, ``5x``) or
       a hex hash (``0x7f3a``, ``51a2ada3``);
    3. drop trailing transpose/layout codes (``TN``, ``NNT``, ``tn``, ``n``) and parameter names
       whose value was cut (``knob``, ``tilesize``, ``stage``, ``warpsize``, ``cga``).

    So ``nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT`` and ``..._NNT`` are ``nvjet_sm90_tst``,
    ``void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, ...>>(...)`` is
    ``pytorch_flash::flash_fwd_kernel``, ``triton_red_fused__softmax_3`` is
    ``triton_red_fused__softmax`` and ``sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize...`` is
    ``sm80_xmma_gemm_f32f32_f32f32_f32``: dtype and architecture tokens stay.
    """
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.replace("(anonymous namespace)::", "")
    s = strip_templates(s)
    cut = s.find("(")
    if cut > 0:
        s = s[:cut]
    s = s.strip()
    tokens = s.split("_")
    kept: list[str] = []
    for i, tok in enumerate(tokens):
        if i > 0 and (_NUMBER.match(tok) or _SIZE.search(tok) or _HEX.match(tok)):
            break
        kept.append(tok)
    while len(kept) > 1 and (_TRANSPOSE.match(kept[-1]) or kept[-1] in _PARAM_WORDS):
        kept.pop()
    while len(kept) > 1 and kept[-1] == "":
        kept.pop()
    out = "_".join(kept).strip()
    return out or name


def _attention_kernels(kernels) -> Iterable[tuple]:
    """(name, phase, direction, dur_us) of the attention kernels of a kernel table: the engine's
    columnar table, the dashboard's compact table, or a list of row dicts."""
    if kernels is None:
        return []
    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "attention" in cols:  # table.KernelTable
        import numpy as np

        idx = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
        return zip(*(_col(cols[c], idx) for c in ("name", "phase", "direction", "dur_us")))
    if hasattr(kernels, "text_values") and hasattr(kernels, "attention"):  # server.index.KernelTable
        import numpy as np

        idx = np.flatnonzero(kernels.attention)
        names = kernels.text_values["name"]
        name = [names[c] for c in kernels.text["name"][idx].tolist()]

        def cat(col):
            vals = kernels.cat_values.get(col, [])
            return [vals[c] if c >= 0 else None for c in kernels.cat[col][idx].tolist()]

        return zip(name, cat("phase"), cat("direction"), kernels.num["dur_us"][idx].tolist())
    return ((k.get("name"), k.get("phase"), k.get("direction"), k.get("dur_us")) for k in kernels if k.get("attention"))


def _col(c, idx) -> list:
    if hasattr(c, "codes") and hasattr(c, "vocab"):
        v = c.vocab
        return [v[x] for x in c.codes[idx].tolist()]
    if hasattr(c, "tolist") and hasattr(c, "dtype"):
        return c[idx].tolist()
    return [c[i] for i in idx.tolist()]


def _attention_codes(kernels) -> Optional[tuple]:
    """The attention kernels of a columnar table as codes: ``(name codes, name vocab, phase codes,
    phase vocab, direction codes, direction vocab, dur_us)`` (code -1 = None), or None for a list
    of row dicts or a table without coded columns."""
    import numpy as np

    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "attention" in cols:  # table.KernelTable
        coded: list[Any] = [cols.get(c) for c in ("name", "phase", "direction")]  # table.Coded, duck-typed
        dur = cols.get("dur_us")
        if not all(hasattr(c, "codes") and hasattr(c, "vocab") for c in coded) or not isinstance(dur, np.ndarray):
            return None
        idx = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
        out = []
        for c in coded:
            vocab = list(c.vocab)
            codes = np.asarray(c.codes)[idx].astype(np.int64)
            if any(v is None for v in vocab):  # None -> -1, as in the dashboard's table
                remap = np.array([-1 if v is None else i for i, v in enumerate(vocab)], dtype=np.int64)
                codes = remap[codes] if len(vocab) else codes
            out += [codes, vocab]
        return (*out, np.asarray(dur, dtype=np.float64)[idx])
    if hasattr(kernels, "text_values") and hasattr(kernels, "attention"):  # server.index.KernelTable
        idx = np.flatnonzero(kernels.attention)
        return (
            kernels.text["name"][idx].astype(np.int64),
            kernels.text_values["name"],
            kernels.cat["phase"][idx].astype(np.int64),
            kernels.cat_values.get("phase", []),
            kernels.cat["direction"][idx].astype(np.int64),
            kernels.cat_values.get("direction", []),
            kernels.num["dur_us"][idx],
        )
    return None


def _kernel_groups_coded(codes: tuple) -> list[dict]:
    """:func:`kernel_groups` over codes: names are normalised once per distinct name and the
    sums are taken with ``np.bincount``, which adds row by row in trace order like the loop does,
    so the result is the same, in the same order."""
    import numpy as np

    name_c, names, phase_c, phases, dir_c, dirs, dur = codes
    keep = name_c >= 0  # a kernel without a name is skipped
    if not keep.all():
        name_c, phase_c, dir_c, dur = name_c[keep], phase_c[keep], dir_c[keep], dur[keep]
    if not len(name_c):
        return []
    n_p, n_d = len(phases) + 1, len(dirs) + 1
    combo = (name_c * n_p + (phase_c + 1)) * n_d + (dir_c + 1)
    uniq, first, inv = unique_ints(combo, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    group_of: dict = {}  # group key -> group number, first seen first
    pair_of: dict = {}  # (group number, name) -> pair number
    combo_group = np.empty(len(uniq), dtype=np.int64)
    combo_pair = np.empty(len(uniq), dtype=np.int64)
    memo: dict = {}
    groups: list = []
    for u in np.argsort(first, kind="stable").tolist():
        rest, d = divmod(int(uniq[u]), n_d)
        nc, p = divmod(rest, n_p)
        name = names[nc]
        phase = phases[p - 1] if p else None
        direction = (dirs[d - 1] if d else None) or "forward"
        grp = memo.get(name)
        if grp is None:
            grp = memo[name] = kernel_group(name)
        key = (grp, phase, direction)
        gi = group_of.get(key)
        if gi is None:
            gi = group_of[key] = len(groups)
            groups.append(
                {"group": grp, "phase": phase, "direction": direction, "time_us": 0.0, "calls": 0, "names": []}
            )
        pk = (gi, name)
        pi = pair_of.get(pk)
        if pi is None:
            pi = pair_of[pk] = len(pair_of)
            groups[gi]["names"].append((name, pi))
        combo_group[u], combo_pair[u] = gi, pi
    row_group, row_pair = combo_group[inv], combo_pair[inv]
    g_time = np.bincount(row_group, weights=dur, minlength=len(groups)).tolist()
    g_calls = np.bincount(row_group, minlength=len(groups)).tolist()
    p_time = np.bincount(row_pair, weights=dur, minlength=len(pair_of)).tolist()
    for gi, g in enumerate(groups):
        g["time_us"], g["calls"] = g_time[gi], g_calls[gi]
        g["names"] = {name: p_time[pi] for name, pi in g["names"]}
    return groups


def kernel_groups(kernels) -> list[dict]:
    """Attention kernels grouped by (normalised name, phase, direction), longest first:
    ``[{group, phase, direction, time_us, calls, names: {name: time_us}}]``."""
    codes = _attention_codes(kernels) if kernels is not None else None
    if codes is not None:
        out = sorted(_kernel_groups_coded(codes), key=lambda g: -g["time_us"])
    else:
        groups: dict = {}
        memo: dict = {}
        for name, phase, direction, dur in _attention_kernels(kernels):
            if name is None:
                continue
            grp = memo.get(name)
            if grp is None:
                grp = memo[name] = kernel_group(name)
            key = (grp, phase, direction or "forward")
            g = groups.get(key)
            if g is None:
                g = groups[key] = {
                    "group": key[0],
                    "phase": phase,
                    "direction": key[2],
                    "time_us": 0.0,
                    "calls": 0,
                    "names": {},
                }
            d = float(dur or 0.0)
            g["time_us"] += d
            g["calls"] += 1
            g["names"][name] = g["names"].get(name, 0.0) + d
        out = sorted(groups.values(), key=lambda g: -g["time_us"])
    for g in out:
        g["time_us"] = round(g["time_us"], 3)
        g["names"] = {n: round(t, 3) for n, t in sorted(g["names"].items(), key=lambda x: -x[1])}
    return out


# ---------------------------------------------------------------- sides


def is_side(x: dict) -> bool:
    return isinstance(x, dict) and x.get("kind") == "side"


def summarize(report: dict, label: Optional[str] = None) -> dict:
    """One report as a comparison side (no kernel rows)."""
    if is_side(report):
        return report
    if report.get("status") not in (None, "ok"):
        raise ValueError(f"{report.get('path')}: {report.get('error')}")
    steps = report.get("steps") or []
    n_steps = 1 if report.get("step") is not None else max(1, len(steps))
    totals = {f: report.get(f) for f in TIME_TOTALS + COUNT_TOTALS + SHARE_TOTALS}
    # the profiled steps' wall time (their CPU ranges), when the trace has ProfilerStep ranges
    sel = [x for x in steps if report.get("step") is None or x.get("name") == report.get("step")]
    totals["step_time_us"] = round(sum(x.get("dur_us") or 0.0 for x in sel), 3) if sel else None
    phases = []
    for p in report.get("phases") or []:
        row = {k: p.get(k) for k in ("phase", "direction", "label", "core") + _PHASE_SUMS + _PHASE_RATES}
        row["bound_time_us"] = dict(p.get("bound_time_us") or {})
        row["latency_cause_time_us"] = dict(p.get("latency_cause_time_us") or {})
        row["top_kernels"] = list(p.get("top_kernels") or [])
        phases.append(row)
    kernels = report.get("kernels")
    groups = kernel_groups(kernels) if kernels is not None else _groups_from_phases(phases)
    dev = report.get("device") or None
    path = report.get("path")
    return {
        "kind": "side",
        "label": label or path or "run",
        "paths": [path] if path else [],
        "traces": 1,
        "steps": n_steps,
        "step": report.get("step"),
        "device": {
            "name": dev.get("name"),
            "label": dev.get("label"),
            "basis": dev.get("basis"),
            "peaks": dev.get("peaks"),
        }
        if dev
        else None,
        "totals": totals,
        "phases": phases,
        "kernel_groups": groups,
        "kernel_groups_source": "kernels" if kernels is not None else "phase_top_kernels",
        "advice": [
            {
                "id": a.get("id"),
                "title": a.get("title"),
                "estimated_gain_us": a.get("estimated_gain_us"),
                "gain_basis": a.get("gain_basis"),
                "gpu_gain_us": a.get("gpu_gain_us"),
                "step_gain_us": a.get("step_gain_us"),
            }
            for a in report.get("advice") or []
        ],
        "notices": [n.get("code") for n in report.get("notices") or []],
        "roof_reached": (report.get("thresholds") or {}).get("roof_reached", ROOF_REACHED),
        "backends": _side_backends(report, kernels),
        "partial": bool((report.get("trace") or {}).get("partial")),
    }


def _side_backends(report: dict, kernels) -> list[dict]:
    """The report's ``attention_backends`` (the engine's, which sees SDPA's math backend in the op
    tree); for a report from before that field, the same from its kernel rows."""
    got = report.get("attention_backends")
    if got is not None:
        return [dict(b) for b in got]
    return _kernel_backends(kernels) if kernels is not None else []


def _groups_from_phases(phases: list[dict]) -> list[dict]:
    """Without kernel rows, the phases' five longest kernel names are the best we have."""
    rows = []
    for p in phases:
        for k in p.get("top_kernels") or []:
            rows.append(
                {
                    "name": k["name"],
                    "phase": p["phase"],
                    "direction": p["direction"],
                    "dur_us": k.get("time_us") or 0.0,
                    "attention": True,
                }
            )
    out = kernel_groups(rows)
    for g in out:
        g["calls"] = None  # unknown: the phase rows do not count calls per name
    return out


def aggregate(sides: list[dict], label: Optional[str] = None) -> dict:
    """Several sides (e.g. every trace of a directory) as one: times, counts, FLOPs and bytes are
    summed, utilisations re-weighted by time, steps summed (a trace without ProfilerStep ranges
    counts as one step)."""
    sides = [summarize(s) for s in sides]
    if not sides:
        raise ValueError("nothing to aggregate")
    if len(sides) == 1:
        s = dict(sides[0])
        if label:
            s["label"] = label
        return s
    totals: dict = {}
    for f in TIME_TOTALS + COUNT_TOTALS:
        vals = [s["totals"].get(f) for s in sides]
        totals[f] = _sum(vals)
    g, a = totals.get("gpu_time_us"), totals.get("attention_time_us")
    totals["attention_share"] = round(a / g, 4) if g and a is not None else None
    phases: dict = {}
    for s in sides:
        for p in s["phases"]:
            phases.setdefault((p["phase"], p["direction"]), []).append(p)
    roof = sides[0].get("roof_reached", ROOF_REACHED)
    merged = [_merge_phase(rows, a, roof) for rows in phases.values()]
    merged.sort(key=_phase_key)
    groups: dict = {}
    for s in sides:
        for gr in s["kernel_groups"]:
            key = (gr["group"], gr["phase"], gr["direction"])
            m = groups.get(key)
            if m is None:
                groups[key] = {**gr, "names": dict(gr["names"])}
                continue
            m["time_us"] = round(m["time_us"] + gr["time_us"], 3)
            m["calls"] = None if m["calls"] is None or gr["calls"] is None else m["calls"] + gr["calls"]
            for n, t in gr["names"].items():
                m["names"][n] = round(m["names"].get(n, 0.0) + t, 3)
    devs = {(s["device"] or {}).get("name") for s in sides}
    adv: dict = {}
    for s in sides:
        for x in s["advice"]:
            if x["id"] not in adv:
                adv[x["id"]] = dict(x)
            else:
                for g in ("estimated_gain_us", "gpu_gain_us", "step_gain_us"):
                    if x.get(g) is not None and adv[x["id"]].get(g) is not None:
                        adv[x["id"]][g] = round(adv[x["id"]][g] + x[g], 3)
    return {
        "kind": "side",
        "label": label or ", ".join(s["label"] for s in sides),
        "paths": [p for s in sides for p in s["paths"]],
        "traces": sum(s["traces"] for s in sides),
        "steps": sum(s["steps"] for s in sides),
        "step": sides[0].get("step"),
        "device": sides[0]["device"],
        "devices_differ": len(devs) > 1,
        "totals": totals,
        "phases": merged,
        "kernel_groups": sorted(groups.values(), key=lambda x: -x["time_us"]),
        "kernel_groups_source": (
            "kernels" if all(s["kernel_groups_source"] == "kernels" for s in sides) else "phase_top_kernels"
        ),
        "advice": list(adv.values()),
        "notices": sorted({c for s in sides for c in s["notices"]}),
        "roof_reached": roof,
        "backends": _merge_backends([s.get("backends") or [] for s in sides]),
        "partial": any(s.get("partial") for s in sides),
    }


def _merge_backends(lists: list[list[dict]]) -> list[dict]:
    out: dict = {}
    for rows in lists:
        for r in rows:
            e = out.setdefault(
                (r["backend"], r.get("family")),
                {
                    "backend": r["backend"],
                    "family": r.get("family"),
                    "label": r.get("label") or BACKEND_LABELS.get(r["backend"], r["backend"]),
                    "time_us": 0.0,
                    "kernels": 0,
                    "forward_us": 0.0,
                    "backward_us": 0.0,
                },
            )
            for k in ("time_us", "kernels", "forward_us", "backward_us"):
                e[k] = round(e[k] + (r.get(k) or 0), 3)
    return sorted(out.values(), key=lambda e: -e["time_us"])


def _sum(vals):
    known = [v for v in vals if v is not None]
    return round(sum(known), 3) if known else None


def _merge_phase(rows: list[dict], att_time, roof: float) -> dict:
    t = sum(r["time_us"] or 0.0 for r in rows)
    kt = sum((r["time_us"] or 0.0) * (r["cost_coverage"] or 0.0) for r in rows)

    def wmean(f):
        w = [((r["time_us"] or 0.0) * (r["cost_coverage"] or 0.0), r[f]) for r in rows if r.get(f) is not None]
        tw = sum(x for x, _ in w)
        return round(sum(x * v for x, v in w) / tw, 4) if tw > 0 else None

    cu, mu = wmean("compute_util"), wmean("memory_util")
    if cu is None or mu is None:
        bound = "unknown"
    elif max(cu, mu) >= roof:
        bound = "compute" if cu >= mu else "memory"
    else:
        bound = "latency"
    fl, by = _sum([r["flops"] for r in rows]), _sum([r["bytes"] for r in rows])
    sec = kt * 1e-6
    bt: dict = {}
    ct: dict = {}
    for r in rows:
        for b, v in (r.get("bound_time_us") or {}).items():
            bt[b] = round(bt.get(b, 0.0) + v, 3)
        for c, v in (r.get("latency_cause_time_us") or {}).items():
            ct[c] = round(ct.get(c, 0.0) + v, 3)
    tops: dict = {}
    for r in rows:
        for k in r.get("top_kernels") or []:
            tops[k["name"]] = tops.get(k["name"], 0.0) + (k.get("time_us") or 0.0)
    first = rows[0]
    return {
        "phase": first["phase"],
        "direction": first["direction"],
        "label": first.get("label"),
        "core": first.get("core"),
        "time_us": round(t, 3),
        "kernels": _sum([r["kernels"] for r in rows]),
        "instances": _sum([r["instances"] for r in rows]),
        "flops": fl,
        "bytes": by,
        "share": round(t / att_time, 4) if att_time else None,
        "achieved_flops_per_s": _sig(fl / sec) if fl is not None and sec > 0 else None,
        "achieved_bytes_per_s": _sig(by / sec) if by is not None and sec > 0 else None,
        "intensity": _sig(fl / by) if fl is not None and by else None,
        "compute_util": cu,
        "memory_util": mu,
        "bound": bound,
        "latency_cause": max(ct, key=ct.__getitem__) if bound == "latency" and ct else None,
        "estimated": any(r.get("estimated") for r in rows),
        "cost_coverage": round(kt / t, 4) if t > 0 else None,
        "bound_time_us": bt,
        "latency_cause_time_us": ct,
        "top_kernels": [{"name": n, "time_us": round(v, 3)} for n, v in sorted(tops.items(), key=lambda x: -x[1])[:5]],
    }


def _phase_key(p) -> tuple:
    d = DIRECTIONS.index(p["direction"]) if p["direction"] in DIRECTIONS else 2
    ph = FLOW_ORDER.index(p["phase"]) if p["phase"] in FLOW_ORDER else len(FLOW_ORDER)
    return (d, ph)


# ---------------------------------------------------------------- comparison


def _delta(a, b) -> dict:
    """delta = b − a, delta_pct, ratio = b / a, speedup = a / b (None where undefined)."""
    if a is None or b is None:
        return {"delta": None, "delta_pct": None, "ratio": None, "speedup": None}
    return {
        "delta": round(b - a, 3),
        "delta_pct": round(100.0 * (b - a) / a, 2) if a else None,
        # significant digits, not decimals: a 49x slowdown's speedup (0.02045) must keep its digits
        "ratio": _sig4(b / a) if a else None,
        "speedup": _sig4(a / b) if a and b else None,
    }


def _sig4(x: float) -> float:
    return float(f"{x:.4g}")


def _scale(x, div):
    if x is None or isinstance(x, bool):
        return x
    return round(x / div, 3) if div != 1 else x


def _norm_phase(p: Optional[dict], div: float) -> Optional[dict]:
    if p is None:
        return None
    out = {f: _scale(p.get(f), div) for f in _PHASE_SUMS}
    out.update({f: p.get(f) for f in _PHASE_RATES})
    out["bound_time_us"] = {b: _scale(v, div) for b, v in (p.get("bound_time_us") or {}).items()}
    out["latency_cause_time_us"] = {c: _scale(v, div) for c, v in (p.get("latency_cause_time_us") or {}).items()}
    return out


def compare_reports(base: dict, new: dict, *, normalize: str = "auto", top: int = 12) -> dict:
    """Compare a baseline with a new run. Each argument is a report (``status: ok``) or a side
    from :func:`summarize` / :func:`aggregate`. ``normalize``: ``auto`` (per step when the step
    counts differ), ``per_step`` or ``total``. ``top``: kernel groups listed (0 = all)."""
    b, n = summarize(base), summarize(new)
    if normalize not in ("auto", "per_step", "total"):
        raise ValueError(f"normalize must be auto, per_step or total, not {normalize!r}")
    per_step = normalize == "per_step" or (normalize == "auto" and b["steps"] != n["steps"])
    bd, nd = (b["steps"], n["steps"]) if per_step else (1, 1)

    totals = {}
    for f in TIME_TOTALS + COUNT_TOTALS:
        x, y = _scale(b["totals"].get(f), bd), _scale(n["totals"].get(f), nd)
        totals[f] = {"base": x, "new": y, **_delta(x, y)}
    for f in SHARE_TOTALS:
        x, y = b["totals"].get(f), n["totals"].get(f)
        totals[f] = {
            "base": x,
            "new": y,
            "delta": round(y - x, 4) if x is not None and y is not None else None,
            "delta_pct": None,
            "ratio": None,
            "speedup": None,
        }

    bp = {(p["phase"], p["direction"]): p for p in b["phases"]}
    np_ = {(p["phase"], p["direction"]): p for p in n["phases"]}
    keys = sorted(set(bp) | set(np_), key=lambda k: _phase_key({"phase": k[0], "direction": k[1]}))
    phases = []
    for k in keys:
        x, y = _norm_phase(bp.get(k), bd), _norm_phase(np_.get(k), nd)
        row = {
            "phase": k[0],
            "direction": k[1],
            "label": PHASE_LABELS.get(k[0], k[0]),
            "core": k[0] in CORE,
            "base": x,
            "new": y,
        }
        row.update(_delta(x["time_us"] if x else 0.0, y["time_us"] if y else 0.0))
        phases.append(row)

    sections = []
    for direction in DIRECTIONS:
        for sec, label, members in SECTIONS:
            xs = _section_side(bp, direction, members, bd)
            ys = _section_side(np_, direction, members, nd)
            if xs is None and ys is None:
                continue
            row = {
                "section": sec,
                "direction": direction,
                "label": label,
                "base": xs,
                "new": ys,
                "summary": f"{_composition(xs)} vs {_composition(ys)}",
            }
            row.update(_delta(xs["time_us"] if xs else 0.0, ys["time_us"] if ys else 0.0))
            sections.append(row)

    groups = _compare_groups(b, n, bd, nd, top)
    att = totals["attention_time_us"]
    if att["base"] is None or att["new"] is None:
        faster = None
    elif att["base"] == att["new"] or (att["delta_pct"] is not None and abs(att["delta_pct"]) < SAME_PCT):
        faster = "same"
    else:
        faster = "new" if att["new"] < att["base"] else "base"
    notes = _notes(b, n, per_step)
    unit = "per step" if per_step else "in total"
    be = _compare_backends(b, n, bd, nd)
    step = _step_change(totals, faster)
    return {
        "kind": "tb-attention-compare",
        "schema": COMPARE_SCHEMA,
        "base": _side_info(b),
        "new": _side_info(n),
        "normalization": {
            "mode": "per_step" if per_step else "total",
            "base_divisor": bd,
            "new_divisor": nd,
            "base_steps": b["steps"],
            "new_steps": n["steps"],
            "unit": unit,
        },
        "verdict": {
            "attention_time_us": {k: att[k] for k in ("base", "new", "delta", "delta_pct", "ratio", "speedup")},
            "faster": faster,
            "summary": _verdict_text(att, faster, unit) + _step_clause(step, unit) + _backend_clause(be),
            "step": step,
        },
        "backends": be,
        "totals": totals,
        "sections": sections,
        "phases": phases,
        "kernel_groups": groups,
        "advice": {
            "base": b["advice"],
            "new": n["advice"],
            "only_base": sorted({a["id"] for a in b["advice"]} - {a["id"] for a in n["advice"]}),
            "only_new": sorted({a["id"] for a in n["advice"]} - {a["id"] for a in b["advice"]}),
        },
        "devices": {"base": _dev(b), "new": _dev(n)},
        "notes": notes,
    }


def _side_info(s: dict) -> dict:
    return {
        "label": s["label"],
        "paths": s["paths"],
        "traces": s["traces"],
        "steps": s["steps"],
        "step": s.get("step"),
        "device": _dev(s),
        "kernel_groups_source": s["kernel_groups_source"],
        "backend": _describe_backends(s.get("backends") or []),
        "partial": bool(s.get("partial")),
    }


def _compare_backends(b: dict, n: dict, bd: float, nd: float) -> dict:
    """Each side's core-attention implementations (per step when normalised), their names in
    words, the main backend of each, and whether the set of backends changed."""

    def side(s, div):
        rows = [
            dict(
                r,
                time_us=_scale(r["time_us"], div),
                forward_us=_scale(r["forward_us"], div),
                backward_us=_scale(r["backward_us"], div),
                kernels=_scale(r["kernels"], div),
            )
            for r in s.get("backends") or []
        ]
        return rows

    x, y = side(b, bd), side(n, nd)
    dx, dy = _describe_backends(x), _describe_backends(y)
    return {
        "base": x,
        "new": y,
        "base_label": dx,
        "new_label": dy,
        "base_main": x[0]["backend"] if x else None,
        "new_main": y[0]["backend"] if y else None,
        "changed": dx != dy,
    }


def _backend_clause(be: dict) -> str:
    if be["changed"]:
        return f"; attention backend changed: {be['base_label']} → {be['new_label']}"
    if be["base_label"] != "none":
        return f"; attention backend: {be['base_label']} on both sides"
    return ""


def _dev(s: dict) -> Optional[dict]:
    d = s.get("device")
    return {"label": d.get("label"), "name": d.get("name"), "basis": d.get("basis")} if d else None


def _section_side(phases: dict, direction: str, members: tuple, div: float) -> Optional[dict]:
    parts = [phases[(m, direction)] for m in members if (m, direction) in phases]
    if not parts:
        return None
    t = sum(p["time_us"] or 0.0 for p in parts)
    fused = sum(p["time_us"] or 0.0 for p in parts if p["phase"] == "fused_attention")
    out = {
        "time_us": _scale(round(t, 3), div),
        "kernels": _scale(sum(p["kernels"] or 0 for p in parts), div),
        "parts": [
            {
                "phase": p["phase"],
                "label": PHASE_LABELS.get(p["phase"], p["phase"]),
                "time_us": _scale(p["time_us"], div),
                "bound": p["bound"],
            }
            for p in parts
        ],
    }
    if "fused_attention" in members:
        out["fused_time_us"] = _scale(round(fused, 3), div)
        out["unfused_time_us"] = _scale(round(t - fused, 3), div)
        out["implementation"] = "fused" if fused and fused == t else ("unfused" if not fused else "mixed")
    return out


def _composition(s: Optional[dict]) -> str:
    if s is None:
        return "nothing"
    return " + ".join(p["label"] for p in s["parts"])


def _compare_groups(b: dict, n: dict, bd: float, nd: float, top: int) -> list[dict]:
    def index(side):
        return {(g["group"], g["phase"], g["direction"]): g for g in side["kernel_groups"]}

    bi, ni = index(b), index(n)
    rows = []
    for key in set(bi) | set(ni):
        x, y = bi.get(key), ni.get(key)

        def side(g, div):
            if g is None:
                return None
            return {
                "time_us": _scale(g["time_us"], div),
                "calls": _scale(g["calls"], div) if g["calls"] is not None else None,
                "names": list(g["names"])[:3],
                "distinct_names": len(g["names"]),
            }

        xs, ys = side(x, bd), side(y, nd)
        row = {
            "group": key[0],
            "phase": key[1],
            "direction": key[2],
            "label": PHASE_LABELS.get(key[1], key[1]) if key[1] else None,
            "base": xs,
            "new": ys,
        }
        row.update(_delta(xs["time_us"] if xs else 0.0, ys["time_us"] if ys else 0.0))
        rows.append(row)
    rows.sort(key=lambda r: -max((r["base"] or {}).get("time_us") or 0.0, (r["new"] or {}).get("time_us") or 0.0))
    return rows[:top] if top else rows


def _notes(b: dict, n: dict, per_step: bool) -> list[str]:
    out = []
    if per_step:
        out.append(
            f"the runs hold different numbers of profiler steps ({b['steps']} vs {n['steps']}): times, "
            f"FLOPs, bytes and counts are per-step averages"
        )
    db, dn = (b.get("device") or {}).get("name"), (n.get("device") or {}).get("name")
    if db != dn:
        out.append(f"different GPUs: {db} vs {dn}; utilisations are relative to each GPU's own peaks")
    for s, which in ((b, "baseline"), (n, "new run")):
        if s.get("devices_differ"):
            out.append(f"the {which} aggregates traces from different GPUs")
        if s["traces"] > 1:
            out.append(f"the {which} aggregates {s['traces']} traces ({s['steps']} steps)")
        if s.get("partial"):
            out.append(
                f"the {which} holds a truncated trace read with --allow-partial: its numbers cover only "
                f"the events before the cut"
            )
        if (s["totals"].get("attention_time_us") or 0) == 0:
            out.append(f"no attention found in the {which}")
        if "no_shapes" in s["notices"]:
            out.append(f"the {which} was recorded without shapes: FLOPs, bytes and bounds are unknown")
        if s["kernel_groups_source"] != "kernels":
            out.append(f"kernel groups of the {which} come from each phase's five longest kernel names only")
    return out


def _step_change(totals: dict, faster: Optional[str]) -> dict:
    """The step-time side of the verdict: the GPU span (first to last GPU activity: the step as the
    GPU saw it) and its idle part on both sides, and whether the step changed by ≥ STEP_CHANGE_PCT.
    A CUDA graph or fewer launches leave attention's GPU time as it was and shorten the step: the
    verdict must say so rather than "about the same"."""
    span, idle = totals.get("span_us") or {}, totals.get("idle_us") or {}
    att = totals.get("attention_time_us") or {}
    d = span.get("delta_pct")
    changed = d is not None and abs(d) >= STEP_CHANGE_PCT
    return {
        "span_us": {k: span.get(k) for k in ("base", "new", "delta", "delta_pct", "ratio", "speedup")},
        "idle_us": {k: idle.get(k) for k in ("base", "new", "delta", "delta_pct")},
        "changed": changed,
        "faster": None if not changed else ("new" if (span.get("delta") or 0) < 0 else "base"),
        # attention time about the same, or its change a small part of the step's
        "not_attention": faster == "same"
        or (
            span.get("delta") is not None
            and att.get("delta") is not None
            and abs(span["delta"]) >= STEP_NOT_ATTENTION * abs(att["delta"])
        ),
    }


def _step_clause(step: dict, unit: str) -> str:
    if not step.get("changed"):
        return ""
    sp, idle = step["span_us"], step["idle_us"]
    how = (
        f"{sp['speedup']:.1f}x faster"
        if step["faster"] == "new" and sp.get("speedup")
        else f"{1 / sp['speedup']:.1f}x slower"
        if sp.get("speedup")
        else "changed"
    )
    text = (
        f"; step time (GPU span) {_us(sp['base'])} → {_us(sp['new'])} {unit} ({how}), GPU idle "
        f"{_us(idle.get('base'))} → {_us(idle.get('new'))}"
    )
    if step.get("not_attention"):
        text += ": the change is in launches and idle time (CUDA graphs, fewer ops, host syncs), not attention kernels"
    return text


def _verdict_text(att: dict, faster: Optional[str], unit: str) -> str:
    if faster is None:
        return "attention time unknown"
    x, y = _us(att["base"]), _us(att["new"])
    if faster == "same":
        return f"attention time about the same {unit}: {x} (base) vs {y} (new)"
    if faster == "new":
        if not att["speedup"]:  # the new run has no attention time at all: no ratio to print
            return f"new run has no attention time {unit}; the baseline has {x}"
        return (
            f"new run is faster in attention: {y} vs {x} {unit} "
            f"({_signed_pct(att['delta_pct'])}, {att['speedup']:.2f}x speedup)"
        )
    if att["base"] == 0:
        return f"new run has attention work that the baseline has none of: {y} {unit}"
    return (
        f"new run is slower in attention: {y} vs {x} {unit} "
        f"({_signed_pct(att['delta_pct'])}, {_slower(att):.2f}x the baseline's time)"
        if att["speedup"]
        else f"new run is slower in attention: {y} vs {x} {unit}"
    )


# ---------------------------------------------------------------- regression gate


def parse_share(text: str) -> float:
    """'0.4', '40%' or '40' (a number above 1 is read as a percentage) -> 0.4."""
    t = str(text).strip()
    pct = t.endswith("%")
    v = float(t.rstrip("%"))
    if pct or v > 1:
        v /= 100.0
    if not 0 <= v <= 1:
        raise ValueError(f"not a share: {text!r}")
    return v


def check(cmp: dict, max_regression_pct: Optional[float] = None, max_attention_share: Optional[float] = None) -> dict:
    """Apply the budget: ``{passed, failures: [code], regression_pct, attention_share, explanation}``.

    Fails when the new run's attention time (per step when the step counts differ) exceeds the
    baseline's by more than ``max_regression_pct`` percent, or when its attention share of GPU time
    exceeds ``max_attention_share`` (a fraction)."""
    att = cmp["totals"]["attention_time_us"]
    share = cmp["totals"]["attention_share"]["new"]
    unit = cmp["normalization"]["unit"]
    failures = []
    reg = att["delta_pct"]
    if att["base"] == 0 and (att["new"] or 0) > 0:
        reg = float("inf")
    if max_regression_pct is not None and reg is not None and reg > max_regression_pct:
        failures.append("regression")
    if max_attention_share is not None and share is not None and share > max_attention_share:
        failures.append("attention_share")
    parts = []
    # (the `is not None` tests repeat what a failure implies, for the type checker)
    if "regression" in failures and max_regression_pct is not None:
        parts.append(_regression_text(cmp, max_regression_pct))
    if "attention_share" in failures and max_attention_share is not None:
        parts.append(
            f"Attention takes {share * 100:.1f}% of the new run's GPU time, over the "
            f"{max_attention_share * 100:.1f}% budget."
        )
    if not failures:
        msg = [f"attention time {_us(att['new'])} {unit} vs baseline {_us(att['base'])}"]
        if reg is not None and reg != float("inf"):
            msg.append(f" ({_signed_pct(reg)}")
            msg.append(f", budget +{max_regression_pct:g}%)" if max_regression_pct is not None else ")")
        if max_attention_share is not None and share is not None:
            msg.append(f"; attention share {share * 100:.1f}% (budget {max_attention_share * 100:.1f}%)")
        parts.append("".join(msg) + ".")
        be = cmp.get("backends")
        if be and be.get("changed"):
            parts.append(f"The attention backend changed: {be['base_label']} → {be['new_label']}.")
    for nt in cmp["notes"]:
        if nt.startswith(("the runs hold different numbers", "different GPUs")) or "truncated trace" in nt:
            parts.append(f"Note: {nt}.")
    return {
        "passed": not failures,
        "failures": failures,
        "regression_pct": None if reg is None or reg == float("inf") else reg,
        "attention_share": share,
        "max_regression_pct": max_regression_pct,
        "max_attention_share": max_attention_share,
        "explanation": " ".join(parts),
    }


def _regression_text(cmp: dict, budget: float) -> str:
    att = cmp["totals"]["attention_time_us"]
    unit = cmp["normalization"]["unit"]
    if att["base"] == 0:
        head = (
            f"Attention time regressed: the baseline has none and the new run spends {_us(att['new'])} {unit} "
            f"(budget +{budget:g}%)."
        )
    else:
        head = (
            f"Attention time regressed by {_signed_pct(att['delta_pct'])} (budget +{budget:g}%): "
            f"{_us(att['base'])} -> {_us(att['new'])} {unit} ({_signed_us(att['delta'])})."
        )
    core = [s for s in cmp["sections"] if s["section"] == "core" and (s["delta"] or 0) > 0]
    bits = []
    for s in core:
        if (s["base"] or {}).get("implementation") != (s["new"] or {}).get("implementation"):
            bits.append(
                f"{s['direction']} core attention changed from {_composition(s['base'])} "
                f"({_us((s['base'] or {}).get('time_us'))}) to {_composition(s['new'])} "
                f"({_us((s['new'] or {}).get('time_us'))})"
            )
    grew = sorted((p for p in cmp["phases"] if (p["delta"] or 0) > 0), key=lambda p: -p["delta"])
    shown = []
    for p in grew[:5]:
        x = (p["base"] or {}).get("time_us") or 0.0
        y = (p["new"] or {}).get("time_us") or 0.0
        pct = f", {_signed_pct(p['delta_pct'])}" if p["delta_pct"] is not None else ", new"
        bound = (p["new"] or {}).get("bound")
        shown.append(
            f"{p['label']} {_dir(p['direction'])} {_us(x)} -> {_us(y)} ({_signed_us(p['delta'])}{pct}"
            + (f", {bound}-bound" if bound and bound != "unknown" else "")
            + ")"
        )
    text = head
    be = cmp.get("backends")
    if be and be.get("changed"):
        text += f" The attention backend changed: {be['base_label']} (base) → {be['new_label']} (new)."
    elif be and be.get("base_label") not in (None, "none"):
        text += f" Attention backend on both sides: {be['base_label']}."
    if bits:
        j = "; ".join(bits)
        text += " " + j[:1].upper() + j[1:] + "."
    if shown:
        text += " Phases that grew: " + "; ".join(shown) + "."
    if len(grew) > 5:
        rest = sum(p["delta"] for p in grew[5:])
        more = len(grew) - 5
        text += f" {more} more phase{'s' if more > 1 else ''} grew by {_us(rest)}" + (" together." if more > 1 else ".")
    shrank = sorted((p for p in cmp["phases"] if (p["delta"] or 0) < 0), key=lambda p: p["delta"])
    if shrank:
        text += " Shrank: " + "; ".join(
            f"{p['label']} {_dir(p['direction'])} {_signed_us(p['delta'])}" for p in shrank[:3]
        )
        if len(shrank) > 3:
            text += f" and {len(shrank) - 3} more ({_signed_us(sum(p['delta'] for p in shrank[3:]))})"
        text += "."
    return text


# ---------------------------------------------------------------- rendering


def _dir(d: str) -> str:
    return "fwd" if d == "forward" else "bwd"


def _speed(r: dict) -> str:
    s = r.get("speedup")
    if s is None or s <= 0:
        return "–"
    if abs(s - 1) < 0.005:
        return "same"
    return f"{s:.2f}x faster" if s > 1 else f"{_slower(r):.2f}x slower"


def _slower(r: dict) -> float:
    """How many times the baseline's time the new run takes: from the unrounded times where the
    row has them (1 / a rounded speedup is off in the last digits: 49.02x for 48.90x), else the
    ratio."""
    a, b = r.get("base"), r.get("new")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
        return float(b) / float(a)
    return float(r["ratio"]) if r.get("ratio") else 1.0 / float(r["speedup"])


def render(cmp: dict, markdown: bool = False, width: Optional[int] = None) -> str:
    """A comparison as a terminal table (or markdown for PR comments). ``width``: fit every line
    to that many columns (formats.text_table, formats.para); None prints everything."""
    if markdown:
        width = None
    h2 = "## " if markdown else ""
    h3 = "### " if markdown else ""
    b, n = cmp["base"], cmp["new"]
    unit = cmp["normalization"]["unit"]
    li = "- " if markdown else ""
    out = [
        f"{h2}Attention comparison",
        "",
        para(f"{li}base: {b['label']} ({b['traces']} trace(s), {b['steps']} step(s))", width, "      "),
        para(f"{li}new:  {n['label']} ({n['traces']} trace(s), {n['steps']} step(s))", width, "      "),
        f"{li}times are {unit}" + ("" if unit == "in total" else " (per-step averages)"),
        "",
        ("**" + cmp["verdict"]["summary"] + "**") if markdown else para(cmp["verdict"]["summary"], width),
        "",
    ]
    for nt in cmp["notes"]:
        out.append(para(f"{li}note: {nt}", width))
    if cmp["notes"]:
        out.append("")
    rows = []
    for f, label in (
        ("attention_time_us", "attention"),
        ("forward_time_us", "  forward"),
        ("backward_time_us", "  backward"),
        ("core_attention_time_us", "  core attention"),
        ("fused_time_us", "    fused"),
        ("unfused_core_time_us", "    unfused"),
        ("projection_time_us", "  projections"),
        ("gpu_time_us", "GPU time (all kernels)"),
    ):
        t = cmp["totals"][f]
        rows.append(
            [label, _us(t["base"]), _us(t["new"]), _signed_us(t["delta"]), _signed_pct(t["delta_pct"]), _speed(t)]
        )
    sh = cmp["totals"]["attention_share"]
    rows.append(
        [
            "attention share",
            _pct(sh["base"]),
            _pct(sh["new"]),
            _signed_pct(sh["delta"] * 100 if sh["delta"] is not None else None, unit=" pt"),
            "",
            "",
        ]
    )
    out += [f"{h3}Totals", text_table(["", "base", "new", "Δ", "Δ%", "speedup"], rows, markdown, width, drop=(5,)), ""]
    rows = []
    for s in cmp["sections"]:
        rows.append(
            [
                f"{s['label']} {_dir(s['direction'])}",
                _parts(s["base"]),
                _parts(s["new"]),
                _signed_us(s["delta"]),
                _signed_pct(s["delta_pct"]),
                _speed(s),
            ]
        )
    if rows:
        out += [
            f"{h3}Matched work (fused vs decomposed side by side)",
            text_table(
                ["", "base", "new", "Δ", "Δ%", "speedup"], rows, markdown, width, cut=(0,), wrap=(1, 2), drop=(5, 4)
            ),
            "",
        ]
    rows = []
    for p in cmp["phases"]:
        x, y = p["base"] or {}, p["new"] or {}
        rows.append(
            [
                p["label"],
                _dir(p["direction"]),
                _us(x.get("time_us")),
                x.get("bound", "–") if x else "–",
                _us(y.get("time_us")),
                y.get("bound", "–") if y else "–",
                _signed_us(p["delta"]),
                _signed_pct(p["delta_pct"]),
                _speed(p),
            ]
        )
    if rows:
        out += [
            f"{h3}Phases",
            text_table(
                ["phase", "dir", "base", "bound", "new", "bound", "Δ", "Δ%", "speedup"],
                rows,
                markdown,
                width,
                cut=(0,),
                drop=(8, 7),
            ),
            "",
        ]
    rows = []
    for g in cmp["kernel_groups"]:
        x, y = g["base"] or {}, g["new"] or {}
        nm = cut_middle(g["group"], 60 if markdown else None)
        rows.append(
            [
                nm,
                g["label"] or "–",
                _dir(g["direction"]),
                f"{_us(x.get('time_us'))} ({_calls(x)})" if x else "–",
                f"{_us(y.get('time_us'))} ({_calls(y)})" if y else "–",
                _signed_us(g["delta"]),
                _speed(g),
            ]
        )
    if rows:
        out += [
            f"{h3}Top kernel groups",
            text_table(
                ["kernel group", "phase", "dir", "base", "new", "Δ", "speedup"],
                rows,
                markdown,
                width,
                cut=(0, 1),
                drop=(6, 2),
            ),
            "",
        ]
    adv = cmp.get("advice") or {}
    for which, key in (("new run only", "only_new"), ("baseline only", "only_base")):
        ids = adv.get(key) or []
        if ids:
            side = adv["new" if key == "only_new" else "base"]
            titles = [a["title"] for a in side if a["id"] in ids]
            out.append(para(f"{li}advice ({which}): " + "; ".join(titles), width))
    return "\n".join(out).rstrip() + "\n"


def _calls(x: dict) -> str:
    c = x.get("calls")
    if c is None:
        return "? calls"
    return f"{c:g} call" + ("" if c == 1 else "s")


def _parts(s: Optional[dict]) -> str:
    if not s:
        return "–"
    if len(s["parts"]) == 1:
        return f"{s['parts'][0]['label']} {_us(s['time_us'])}"
    return f"{_us(s['time_us'])} = " + " + ".join(f"{p['label']} {_us(p['time_us'])}" for p in s["parts"])
