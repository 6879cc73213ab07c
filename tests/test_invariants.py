"""Physical invariants of every report, over every trace we have.

Impossible numbers are the worst bugs a profiler can show (docs/robustness.md): utilisation above
100 %, phases that do not add up to attention time, attention longer than the GPU was busy, negative
FLOPs or bytes, a gain larger than the time it could remove, advice or a notice whose premise the run
does not show. These tests check each of them on every trace in the repository (sample_traces/,
validation/traces/, tests/data/**, benchmarks/traces/) and on the public traces in
../shared/traces/public when that directory is present (``TB_ATTENTION_SHARED_TRACES`` points
elsewhere). New trace files are picked up without editing this file.

Each trace is analysed once per session (``_analysed``); every invariant is its own test per file,
so a failure names the file and the invariant.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Optional

import numpy as np
import pytest

from helpers import ROOT, SHARED
from tb_attention_plugin.advice import RULES as ADVICE_RULES
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.attention import patterns as P
from tb_attention_plugin.trace.files import expand_paths

# ------------------------------------------------------------------------- the traces

_REPO_DIRS = (
    "sample_traces",
    os.path.join("validation", "traces"),
    os.path.join("tests", "data"),
    os.path.join("benchmarks", "traces"),
)
_PUBLIC = os.path.join(os.environ.get("TB_ATTENTION_SHARED_TRACES") or SHARED, "public")

UTIL_TOL = 1e-6  # utilisations are rounded to 4 decimals in the JSON
TIME_TOL_US = 0.02  # times are rounded to 3 decimals: a few rounding steps


def _short_id(rel: str) -> str:
    """A test id under pytest's 100-character limit: the profiler's numeric file suffix dropped."""
    return re.sub(r"[._]\d{16,}(?=\.)", "", rel).replace(".pt.trace.json", "").replace(".json", "")


def _trace_files() -> list[tuple[str, str]]:
    out = []
    for d in _REPO_DIRS:
        full = os.path.join(ROOT, d)
        if os.path.isdir(full):
            out += [(_short_id(os.path.relpath(f, ROOT)), f) for f, _ in expand_paths([full])]
    if os.path.isdir(_PUBLIC):
        out += [(_short_id("public/" + os.path.relpath(f, _PUBLIC)), f) for f, _ in expand_paths([_PUBLIC])]
    assert len({n for n, _ in out}) == len(set(out)), "two trace files share a test id"
    return sorted(set(out))


FILES = _trace_files()
IDS = [name for name, _ in FILES]
PATHS = dict(FILES)


class _Analysed:
    """A report and the op names its trace records (premises that only the trace shows)."""

    def __init__(self, report: dict, names: frozenset):
        self.rep = report
        self.names = names
        k = report.get("kernels") or []
        cols = getattr(k, "columns", None)
        self.rows = list(k) if cols is None else None
        self.kernels = k

    def col(self, name: str) -> np.ndarray:
        """A kernel-row field as an array (floats: NaN for null)."""
        k = self.kernels
        cols = getattr(k, "columns", None)
        if cols is not None and name in cols and isinstance(cols[name], np.ndarray):
            return cols[name]
        vals = [r.get(name) for r in (k if cols is None else k.rows(np.arange(len(k)), (name,)))]
        try:
            return np.asarray([np.nan if v is None else v for v in vals], dtype=np.float64)
        except (TypeError, ValueError):
            return np.asarray(vals, dtype=object)


@functools.cache
def _analysed(name: str) -> _Analysed:
    from tb_attention_plugin.trace.records import load_trace

    path = PATHS[name]
    rep = analyze_path(path)  # no disk cache: the engine under test, every session
    names: frozenset = frozenset()
    if rep.get("status") == "ok":
        try:
            names = frozenset(load_trace(path).strings)
        except Exception:  # the report loaded it: a second read does not fail
            names = frozenset()
    return _Analysed(rep, names)


def _ok(name: str) -> _Analysed:
    a = _analysed(name)
    if a.rep.get("status") != "ok":
        pytest.skip(f"{name}: {a.rep.get('error')}")
    return a


def _busy_and_span(a: _Analysed) -> tuple[float, Optional[float]]:
    """GPU busy time of the compute streams (the engine's compute_busy_us when the report has it,
    else gpu_busy_us) and the span of GPU activity (span_us, else first start to last end)."""
    rep = a.rep
    busy = rep.get("compute_busy_us")
    if busy is None:
        busy = rep.get("gpu_busy_us")
    span = rep.get("span_us")
    if span is None and len(a.kernels):
        ts, dur = a.col("ts"), np.nan_to_num(a.col("dur_us"))
        dev = a.col("device")
        spans = []
        for d in set(dev.tolist()):
            m = (dev == d) & ~np.isnan(ts)
            if m.any():
                spans.append(float((ts[m] + dur[m]).max() - ts[m].min()))
        span = sum(spans) if spans else None
    return float(busy or 0.0), span


def _idle_us(a: _Analysed) -> float:
    """Span minus the union of GPU activity, per device: all the GPU idle time in the trace."""
    if a.rep.get("idle_us") is not None:
        return float(a.rep["idle_us"])
    ts, te = a.col("ts"), a.col("ts") + np.nan_to_num(a.col("dur_us"))
    dev = a.col("device")
    idle = 0.0
    for d in set(dev.tolist()):
        m = (dev == d) & ~np.isnan(ts)
        if not m.any():
            continue
        s, e = ts[m], te[m]
        o = np.argsort(s, kind="stable")
        s, e = s[o], np.maximum.accumulate(e[o])
        idle += float(np.clip(s[1:] - e[:-1], 0, None).sum())
    return idle


param = pytest.mark.parametrize("name", IDS)

# ------------------------------------------------------------------------- every report


@param
def test_report_loads(name):
    """Every trace we keep analyses (an error entry here is a regression, not bad input)."""
    rep = _analysed(name).rep
    assert rep.get("status") == "ok", rep.get("error")


@param
def test_utilisations_within_0_and_1(name):
    a = _ok(name)
    bad = []
    for field in ("compute_util", "memory_util"):
        v = a.col(field)
        if v.dtype == object:
            continue
        over = np.flatnonzero((v > 1.0 + UTIL_TOL) | (v < 0))
        if len(over):
            names = a.kernels.rows(over[:3], ("name",)) if hasattr(a.kernels, "rows") else [a.rows[i] for i in over[:3]]
            bad.append(
                f"{len(over)} kernel(s) with {field} outside [0, 1], max {np.nanmax(v):.4f}: "
                + "; ".join(r["name"][:60] for r in names)
            )
    for p in a.rep.get("phases") or []:
        for field in ("compute_util", "memory_util"):
            x = p.get(field)
            if x is not None and not 0 <= x <= 1.0 + UTIL_TOL:
                bad.append(f"phase {p['phase']} {p['direction']}: {field} {x}")
    assert not bad, "\n".join(bad)


@param
def test_phase_times_sum_to_attention_time(name):
    a = _ok(name)
    phases = a.rep.get("phases") or []
    total = sum(p.get("time_us") or 0.0 for p in phases)
    att = a.rep.get("attention_time_us") or 0.0
    assert total == pytest.approx(att, abs=TIME_TOL_US * (len(phases) + 1), rel=1e-6)


@param
def test_attention_within_busy_within_span(name):
    a = _ok(name)
    # attention's own busy time (the union of its kernels' intervals) when the report has it: on
    # decode traces attention kernels on two streams overlap, and summed time would count it twice
    att = a.rep.get("attention_busy_us")
    att = a.rep.get("attention_time_us") or 0.0 if att is None else att
    busy, span = _busy_and_span(a)
    assert att <= busy + TIME_TOL_US, f"attention {att} µs > GPU busy {busy} µs"
    if span is not None:
        assert busy <= span + TIME_TOL_US, f"GPU busy {busy} µs > span {span} µs"


@param
def test_flops_and_bytes_not_negative(name):
    a = _ok(name)
    for field in ("flops", "bytes", "dram_bytes", "dur_us"):
        v = a.col(field)
        if v.dtype == object:
            continue
        assert not (v < 0).any(), f"{int((v < 0).sum())} kernel(s) with negative {field}"
    for p in a.rep.get("phases") or []:
        for field in ("flops", "bytes", "time_us"):
            assert (p.get(field) or 0) >= 0, (p["phase"], field, p.get(field))


@functools.cache
def _attribution(name: str):
    """The trace and its cost attribution (roofline/attribute.py), for the per-op checks."""
    from tb_attention_plugin.roofline.attribute import attribute
    from tb_attention_plugin.trace.correlate import link
    from tb_attention_plugin.trace.records import load_trace

    t = load_trace(PATHS[name])
    return t, attribute(t, link(t))


@param
def test_kernels_of_an_op_share_its_flops_and_cover_its_bytes(name):
    """Cost by role (docs/cost-model.md): no kernel of an op gets more FLOPs than the op, its
    kernels' FLOPs add up to the op's, every byte count is >= 0, and when every kernel of an op
    has bytes they move at least the op's minimum traffic (each tensor it reads or writes is
    moved by one of its kernels)."""
    if _ok(name).rep.get("status") != "ok":
        return
    t, a = _attribution(name)
    own = a.owner
    for o in np.unique(own[own >= 0]).tolist():
        ks = np.flatnonzero(own == o)
        c = a.costs.get(o)
        if c is None:
            continue
        f, b, r = a.flops[ks], a.bytes[ks], a.reads[ks]
        if c.flops is not None:
            assert (f <= c.flops * (1 + 1e-9) + 1e-6).all(), (t.strings[t.ranges["name"][o]], f.max(), c.flops)
            assert f.sum() == pytest.approx(c.flops, rel=1e-9, abs=1e-6), t.strings[t.ranges["name"][o]]
        assert not (b[~np.isnan(b)] < 0).any() and not (r[~np.isnan(r)] < 0).any()
        assert (r[~np.isnan(b)] <= b[~np.isnan(b)] * (1 + 1e-9) + 1e-6).all()
        if c.bytes is not None and len(ks) > 1 and not np.isnan(b).any():
            assert b.sum() >= c.bytes * (1 - 1e-9), (t.strings[t.ranges["name"][o]], b.sum(), c.bytes)


@param
def test_gains_within_the_time_they_remove(name):
    """estimated_gain_us <= removable_us (the time the change acts on) and <= attention time; the
    removable time is attention kernel time (<= attention time), or for launch_overhead GPU idle time
    between attention kernels (<= all the idle time in the trace)."""
    a = _ok(name)
    att = a.rep.get("attention_time_us") or 0.0
    _, span = _busy_and_span(a)
    wall = max(span or 0.0, sum(s.get("dur_us") or 0.0 for s in a.rep.get("steps") or []))
    for f in a.rep.get("advice") or []:
        g, rm = f.get("estimated_gain_us"), f.get("removable_us")
        assert f["gain_basis"] in ("gpu", "step"), f["id"]
        assert g == f[f"{f['gain_basis']}_gain_us"], (f["id"], "estimated_gain_us is not in its basis")
        assert g is None or g >= 0, (f["id"], g)
        assert rm is not None and rm >= 0, (f["id"], "removable_us", rm)
        assert g is None or g <= rm + TIME_TOL_US, (f["id"], g, rm)
        for k in ("gpu_gain_us", "step_gain_us"):
            assert f.get(k) is None or f[k] >= 0, (f["id"], k, f[k])
        if f["gain_basis"] == "gpu":
            assert g is None or g <= att + TIME_TOL_US, (f["id"], "gain", g, "> attention time", att)
            assert rm <= att + TIME_TOL_US, (f["id"], "removable", rm, "> attention time", att)
        else:  # wall-clock step time: never more than the profiled wall time of the trace
            assert rm <= wall * 1.05 + TIME_TOL_US, (f["id"], "removable step time", rm, "> wall", wall)


# ------------------------------------------------------------------------- premises


def _phase_time(rep: dict, phases, direction: Optional[str] = None) -> float:
    return sum(
        p.get("time_us") or 0.0
        for p in rep.get("phases") or []
        if p["phase"] in phases and (direction is None or p["direction"] == direction)
    )


def _premise(a: _Analysed, finding: dict) -> Optional[str]:
    """Why a finding's premise is absent from the run, or None when it is present."""
    rep, i = a.rep, finding["id"]
    ev = finding.get("evidence") or {}
    dirs = set(a.col("direction").tolist()) if len(a.kernels) else set()
    if i == "fuse_attention":
        if _phase_time(rep, ("qk_matmul", "pv_matmul")) <= 0:
            return "no QK^T / PV matmul kernels"
        if _phase_time(rep, ("scale", "mask", "softmax", "dropout")) <= 0:
            return "no scale/mask/softmax/dropout kernels"
        if "is_causal" in finding["how"] and _phase_time(rep, ("mask",)) <= 0:
            return "suggests is_causal for a run without mask kernels"
        if "dropout_p" in finding["how"] and _phase_time(rep, ("dropout",)) <= 0:
            return "suggests dropout_p for a run without dropout kernels"
        # the fused estimate names the peak of the dtype the matmuls run in (not "bf16" for fp16)
        dt = _main_dtype(a, ("qk_matmul", "pv_matmul"))
        known = (rep.get("device") or {}).get("peaks", {}).get("flops", {})
        named = set(re.findall(r"of the (\w+) peak", finding["detail"]))
        if dt in known and named - {dt}:
            return f"the detail speaks of the {'/'.join(sorted(named))} peak for {dt} attention matmuls"
    elif i == "sdpa_math_backend":
        if "aten::_scaled_dot_product_attention_math" not in a.names:
            return "no aten::_scaled_dot_product_attention_math op in the trace"
    elif i == "fp32_attention":
        mm = [
            p
            for p in rep.get("phases") or []
            if p["phase"] in ("qkv_proj", "qk_matmul", "pv_matmul", "out_proj", "fused_attention")
        ]
        if not mm or "fp32" not in set(a.col("dtype").tolist()):
            return "no fp32 attention matmul kernels"
    elif i == "head_dim_alignment":
        dims = [int(d) for d in (ev.get("head_dims") or {})]
        if not dims or not all(d % 8 for d in dims):
            return f"head dims {dims} are aligned"
    elif i == "decode_kv_heads":
        if not all(c["sq"] <= 16 and c["h"] == c["hk"] for c in ev.get("calls") or []):
            return "a call is not decode or already has fewer KV heads"
    elif i == "dropout_in_inference":
        if "backward" in dirs:
            return "the trace has a backward pass"
        if _phase_time(rep, ("dropout",)) <= 0 and not ev.get("sdpa_dropout_p"):
            return "no dropout kernels and no SDPA dropout_p"
    elif i == "slow_backend":
        if ev.get("backend") not in ("flash", "efficient", "cudnn"):
            return f"backend {ev.get('backend')} is not a fused SDPA backend"
        if not any(n.startswith("aten::_scaled_dot_product_") and ev["backend"] in n for n in a.names):
            return f"no aten::_scaled_dot_product_*{ev['backend']}* op in the trace"
    elif i.startswith("memory_"):
        code = i[len("memory_") :]
        flags = [f for f in (rep.get("memory") or {}).get("flags") or [] if f.get("code") == code]
        if not flags:
            return f"the memory block has no {code} flag"
    elif i == "launch_overhead":
        dur = a.col("dur_us")
        att = a.col("attention").astype(bool) if a.col("attention").dtype != object else np.zeros(len(dur), bool)
        if int(((np.nan_to_num(dur) < 10.0) & att).sum()) < 8:
            return "fewer than 8 short attention kernels"
    elif i == "slow_backward":
        fwd = _phase_time(rep, P.CORE_PHASES, "forward")
        bwd = _phase_time(rep, P.CORE_PHASES, "backward")
        if not (fwd > 0 and bwd > 2.5 * fwd):
            return f"core backward {bwd} µs is not slow against forward {fwd} µs"
    elif i == "measured_backend":  # replay/findings.py: only from a replay beside the trace
        if not ((rep.get("replay") or {}).get("measured") or {}).get("used_for_advice"):
            return "no usable replay beside the trace"
    else:
        return f"unknown rule {i}"
    if ev.get("gain_source") == "measured" and not ((rep.get("replay") or {}).get("measured") or {}).get(
        "used_for_advice"
    ):
        return "a measured gain without a usable replay beside the trace"
    return None


def _main_dtype(a: _Analysed, phases: tuple) -> Optional[str]:
    """The dtype most of these phases' attention kernel time runs in, from the kernel rows."""
    ph, dt, dur, att = a.col("phase"), a.col("dtype"), np.nan_to_num(a.col("dur_us")), a.col("attention")
    t: dict = {}
    for p, d, x, at in zip(ph.tolist(), dt.tolist(), dur.tolist(), att.tolist()):
        if at and p in phases and d:
            t[d] = t.get(d, 0.0) + x
    return max(t.items(), key=lambda x: x[1])[0] if t else None


@param
def test_every_advice_premise_is_in_the_run(name):
    a = _ok(name)
    bad = [f"{f['id']}: {why}" for f in a.rep.get("advice") or [] if (why := _premise(a, f))]
    assert not bad, "; ".join(bad)


@param
def test_no_finding_changes_the_model_the_trace_does_not_show_equivalent(name):
    """is_causal=True is proposed only where the trace shows a causal mask (its builder: triu/tril, a
    position comparison, a causal-mask frame) or the call already passed is_causal; never for an
    encoder's padding mask (advice/equivalence.py)."""
    a = _ok(name)
    shown = any(
        re.search(r"^aten::(triu|tril|le|ge|lt|gt)_?$|causal_mask|create_causal_mask|causal_mask_function", s)
        for s in a.names
    )
    for f in a.rep.get("advice") or []:
        code = (f.get("fix_code") or "") + "\n" + (f.get("how") or "")
        if "is_causal=True" in code and "attn_mask" not in code.split("is_causal=True")[0][-40:]:
            ev = f.get("evidence") or {}
            already = (
                any((i or {}).get("causal") for i in ev.get("inputs") or [])
                or ev.get("causal_mask_evidence")
                or ev.get("call_is_causal")
                or ev.get("call_mask") == "causal"
            )
            assert shown or already, f"{f['id']} proposes is_causal=True with no causal mask in the trace"


def _notice_premise(a: _Analysed, code: str) -> Optional[str]:
    rep = a.rep
    kinds = a.col("kind").tolist() if len(a.kernels) else []
    n_kernels = sum(1 for k in kinds if k == "kernel")
    if code == "no_gpu_kernels":
        if n_kernels:
            return f"{n_kernels} GPU kernels"
        if (rep.get("trace") or {}).get("partial"):
            return "a truncated trace: the missing kernels may be in the lost part"
    elif code == "no_attention":
        if not n_kernels or (rep.get("attention_time_us") or 0) > 0:
            return "no kernels, or attention found"
    elif code == "no_shapes":
        fl = a.col("flops")
        if fl.dtype != object and (np.nan_to_num(fl) > 0).any():
            return "kernels have FLOPs: shapes were recorded"
    elif code == "no_stack":
        if any(s.startswith("nn.Module:") for s in a.names):
            return "nn.Module scopes are recorded"
    elif code == "unknown_gpu":
        devs = (rep.get("devices") or []) + [rep.get("device") or {}]
        if not any(d and (d.get("key") is None or d.get("basis") == "unknown") for d in devs):
            return "every device is known"
    return None


@param
def test_every_notice_premise_is_in_the_run(name):
    a = _ok(name)
    bad = [f"{n['code']}: {why}" for n in a.rep.get("notices") or [] if (why := _notice_premise(a, n["code"]))]
    flags = (a.rep.get("memory") or {}).get("flags") or []
    if (
        any(f.get("code") == "sdpa_math_copies" for f in flags)
        and "aten::_scaled_dot_product_attention_math" not in a.names
    ):
        bad.append("sdpa_math_copies: no SDPA call ran on the math backend")
    assert not bad, "; ".join(bad)


# ------------------------------------------------------------------------- where each rule must not fire


def _named(fragment: str) -> list[str]:
    return [n for n in IDS if fragment in n]


# rule -> real traces whose evidence rules it out (the rule must stay silent there): the advice rules'
# own lists (each rule module's ``absent``, tb_attention_plugin/advice/rules/), plus a memory flag and a
# notice
SILENT = {r.id: r.absent for r in ADVICE_RULES}
SILENT.update(
    {
        "sdpa_math_copies": ("sdpa_cudnn_fwdbwd_causal", "sdpa_flash_fwdbwd_full", "hf_llama_sdpa_fwdbwd"),
        "no_gpu_kernels": ("sdpa_cudnn_s2048_fwd", "naive_bf16_s2048_fwd"),
    }
)


@pytest.mark.parametrize("rule", sorted(SILENT))
def test_each_rule_is_silent_where_its_premise_is_absent(rule):
    runs = [n for frag in SILENT[rule] for n in _named(frag)]
    if not runs:
        pytest.skip(f"none of {SILENT[rule]} in this checkout")
    fired = []
    for n in runs:
        rep = _ok(n).rep
        codes = (
            {f["id"] for f in rep.get("advice") or []}
            | {c["id"] for c in rep.get("advice_checks") or [] if c.get("fired")}
            | {x["code"] for x in rep.get("notices") or []}
            | {f.get("code") for f in (rep.get("memory") or {}).get("flags") or []}
        )
        if rule in codes:
            fired.append(n)
    assert not fired, f"{rule} fired on {fired}"


@param
def test_engine_denominators_and_roofs(name):
    """The report's own busy-time fields are ordered, communication overlaps nest, a dense upper bound
    never claims a roof, and a raised roof is above the table figure it replaced."""
    rep = _ok(name).rep
    eps = 1e-3
    assert rep["attention_busy_us"] <= rep["compute_busy_us"] + eps
    assert rep["compute_busy_us"] <= rep["gpu_busy_us"] + eps <= rep["span_us"] + 2 * eps
    assert rep["attention_share"] is None or 0.0 <= rep["attention_share"] <= 1.0
    c = rep["communication"]
    assert c["overlap_with_attention_us"] <= c["overlap_with_compute_us"] + eps <= c["busy_us"] + 2 * eps
    a = _ok(name)
    ub = a.col("upper_bound")
    if ub.dtype != object and ub.any():
        bounds = (
            a.kernels.rows(np.flatnonzero(ub == 1), ("bound",))
            if hasattr(a.kernels, "rows")
            else [a.rows[i] for i in np.flatnonzero(ub == 1)]
        )
        assert all(r["bound"] not in ("compute", "memory") for r in bounds)
    for d in rep["devices"]:
        for adj in d.get("roof_adjustments") or []:
            used = (
                d["peaks"]["memory_bandwidth"]
                if adj["peak"] == "memory_bandwidth"
                else d["peaks"]["flops"][adj["peak"]]
            )
            assert adj["to"] > adj["from"] and used == adj["to"]
            assert adj["evidence"] in ("recorded", "exact_flops", "measured_dram")
            assert adj["to_basis"] in ("datasheet", "achieved")
    for k in a.kernels:
        # a dense upper bound is never an achieved rate; a bytes-model miss shows no utilisation
        if k["upper_bound"]:
            assert k["achieved_flops_per_s"] is None and k["achieved_bytes_per_s"] is None, k["name"]
        if k["bytes_over_roof"] is not None:
            assert k["bytes_over_roof"] > 1 and (k["memory_util"] is None or k["measured"]), k["name"]
        occ = k["occupancy_pct"]
        assert occ is None or 0 < occ <= 100, (k["name"], occ)  # 0 means "not computed": never shown
        assert k["latency_cause"] is None or k["bound"] == "latency", (k["name"], k["latency_cause"])
        assert (k["occupancy_pct"] is None) == (k["occupancy_source"] is None), k["name"]
    for p in rep["phases"]:
        assert p["latency_cause"] is None or p["bound"] == "latency", (p["phase"], p["latency_cause"])
        assert sum(p["latency_cause_time_us"].values()) <= p["bound_time_us"].get("latency", 0) + eps


def _mfu_values(block: dict) -> list[tuple[str, float]]:
    out = [(f"mfu.{k}", v) for k, v in (block.get("mfu") or {}).items() if v is not None]
    h = (block.get("hfu") or {}).get("value")
    if h is not None:
        out.append(("hfu", h))
    return out


@param
def test_flops_ledger_mfu_never_above_one_and_ordered(name):
    """No MFU or HFU above 100 % on any basis, for the trace, any site, step or call; useful ≤
    executed ≤ dense for fused kernels (whole tiles of kept pairs: dense rounded up to the tile) and
    useful ≤ dense always; the ledger's calls name sites that exist."""
    rep = _ok(name).rep
    led = rep.get("flops_ledger")
    if led is None:
        assert not rep.get("instances"), "attention calls but no ledger"
        return
    blocks = (
        [("trace", led)] + [(f"site {s['site']}", s) for s in led["sites"]] + [(s["name"], s) for s in led["steps"]]
    )
    blocks += [(f"call {c['call']} {c['direction']}", c) for c in led["calls"]]
    bad = [f"{where}: {k} = {v}" for where, b in blocks for k, v in _mfu_values(b) if not 0 <= v <= 1 + UTIL_TOL]
    assert not bad, "\n".join(bad)
    site_ids = {s["id"] for s in rep["sites"]}
    for c in led["calls"]:
        assert c["site"] in site_ids, c
        if c["useful"] is None:
            continue
        tol = 1e-3 * c["dense"]
        assert c["useful"] <= c["dense"] + tol, c
        assert c["useful"] <= c["executed"] + tol or c["backend"] in ("math", "eager", "compiled"), c
        if c["direction"] == "forward" and c["backend"] in ("flash", "cudnn", "efficient", "flex", "library"):
            assert c["executed"] <= c["dense"] * _tile_padding(c) * (1 + 1e-3) + tol, c  # 4-digit JSON


def _tile_padding(c: dict) -> float:
    """How much whole tiles add to a call's dense count: its query and key lengths rounded up to
    the tile (a 4-query decode in 128-row tiles: 32x); 1 without a tile or for jagged calls."""
    sh, tile = c.get("shapes") or {}, c.get("tile")
    if not tile or sh.get("lengths") or not sh.get("sq") or not sh.get("sk"):
        return 1.0
    m, n = tile
    rows = re.search(r"queries in (\d+)-row blocks", c.get("executed_basis") or "")
    if rows:  # the kernel pads queries to a larger block than its tile (cuDNN's sm90 forward)
        m = max(m, int(rows.group(1)))
    sq, sk = sh["sq"], sh["sk"]
    return (-(-sq // m) * m / sq) * (-(-sk // n) * n / sk)


@param
def test_sites_and_boundary_add_up(name):
    """Sites partition the attention calls and their time; the boundary's removable bytes and
    estimated gain are within the bytes and time it measured."""
    rep = _ok(name).rep
    sites = rep.get("sites") or []
    assert sum(s["calls"] for s in sites) == (rep.get("instances") or 0)
    att = rep.get("attention_time_us") or 0.0
    assert sum(s["time_us"] or 0 for s in sites) == pytest.approx(att, abs=TIME_TOL_US * (len(sites) + 1), rel=1e-6)
    for s in sites:
        assert (s["forward_us"] or 0) + (s["backward_us"] or 0) == pytest.approx(s["time_us"] or 0, abs=2 * TIME_TOL_US)
    b = rep.get("boundary")
    if b:
        assert 0 <= (b["removable_bytes"] or 0) <= (b["bytes"] or 0) * (1 + 1e-3) + 1
        assert 0 <= (b["removable_us"] or 0) <= (b["time_us"] or 0) + TIME_TOL_US
        assert b["estimated_gain_us"] is None or 0 <= b["estimated_gain_us"] <= b["removable_us"] + TIME_TOL_US
        for f in b["fusions"]:
            assert f["estimated_gain_us"] is None or f["estimated_gain_us"] <= f["removable_us"] + TIME_TOL_US, f


# ------------------------------------------------------------------ CUDA-graph replays


def test_a_replay_costs_each_kernel_as_its_reference_and_its_capture():
    """The recorded decode step replayed from a CUDA graph, given the eager run as --reference, and
    the same step's trace holding its own capture: every replayed kernel costs what its kernel of
    the eager step costs (an op's only kernel exactly; a kernel sharing its op within 2 % in FLOPs),
    and no kernel tagged without the reference loses its tag with it."""
    import glob

    from tb_attention_plugin.options import Options

    data = os.path.join(ROOT, "tests", "data", "modern")
    paths = {
        n: glob.glob(os.path.join(data, f"decode_graph_{n}", "*.pt.trace.json.gz"))
        for n in ("eager", "replay", "capture")
    }
    if not all(paths.values()):
        pytest.skip("the decode_graph traces are not in this checkout")
    eager = analyze_path(paths["eager"][0])
    alone = analyze_path(paths["replay"][0])
    given = analyze_path(paths["replay"][0], Options(reference=paths["eager"][0]))
    own = analyze_path(paths["capture"][0])
    es = [k for k in eager["kernels"] if k["kind"] == "kernel"]
    for rep in (given, own):
        ks = [k for k in rep["kernels"] if k["kind"] == "kernel" and k["graph"]]
        assert [k["name"] for k in ks] == [e["name"] for e in es]
        for k, e in zip(ks, es):
            if e["cost_share"] == 1.0:
                assert (k["flops"], k["bytes"]) == (e["flops"], e["bytes"]), k["name"]
            elif e["flops"]:
                assert k["flops"] == pytest.approx(e["flops"], rel=0.02), k["name"]
    tagged = [k["attention"] for k in alone["kernels"] if k["kind"] == "kernel"]
    with_ref = [k["attention"] for k in given["kernels"] if k["kind"] == "kernel"]
    assert all(b for a, b in zip(tagged, with_ref) if a)
