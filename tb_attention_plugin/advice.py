"""Recommendations from the numbers of one run.

``advise(report, trace, links, tagging)`` returns a list of findings, each::

    {"id", "severity": "high" | "medium" | "low", "title", "detail", "evidence": {...},
     "estimated_gain_us": float | None, "how": text}

Every finding cites the run's own numbers (kernels, phases, times, utilisations, recorded op
inputs); a rule with no evidence in the run stays silent. ``estimated_gain_us`` is GPU time that
the change would save in this trace (all its steps), from the stated assumption, or null when the
run gives no basis for a number. Severity follows the gain's share of attention time (high ≥
25 %, medium ≥ 5 %, low otherwise or unknown).

The rules (docs/advice.md has the list with thresholds and assumptions):

``fuse_attention``      unfused (eager) attention whose scale/mask/softmax/dropout kernels are
                        memory- or latency-bound → F.scaled_dot_product_attention
``sdpa_math_backend``   SDPA ran on the math backend → why (recorded inputs) and how to get a
                        fused backend
``fp32_attention``      attention matmuls in fp32 → bf16/fp16 autocast or TF32
``head_dim_alignment``  head dims that are not multiples of 8
``decode_kv_heads``     memory-bound decode attention with as many KV heads as query heads → GQA/MQA
``dropout_in_inference`` dropout kernels in a trace without a backward pass
``launch_overhead``     many short attention kernels and an idle GPU between them → CUDA graphs /
                        torch.compile
``slow_backward``       backward attention far slower than 2.5× its forward
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .attention import patterns as P
from .attention.headdim import head_dims
from .formats import pct, rounded as _r, us as _us
from .roofline.cost import SDPA_SCHEMAS, sdpa_shapes
from .trace.records import OP
from .trace.shapes import parse_args

# -- assumptions and thresholds (documented in docs/advice.md) ---------------------------------
FUSED_PEAK_FRACTION = 0.35  # a fused attention kernel's FLOP rate, as a fraction of the bf16/fp16 peak
FUSED_PEAK_FRACTION_FP32 = 0.6  # ... and of the fp32 peak for fp32 inputs (mem-efficient kernel on CUDA cores)
FUSED_BANDWIDTH_FRACTION = 0.8  # ... and its memory rate when it is bandwidth-limited (decode)
ELEMENTWISE_SHARE = 0.10  # mem/latency-bound scale/mask/softmax/dropout time ≥ this share of unfused core
SHORT_KERNEL_US = 10.0
MIN_SHORT_KERNELS = 8
SHORT_COUNT_SHARE = 0.5  # short kernels ≥ half of the attention kernels ...
SHORT_TIME_SHARE = 0.5  # ... and ≥ half of attention time, or
IDLE_RATIO = 1.0  # ... the GPU idles inside attention calls at least as long as it works
LONG_GAP_US = 1000.0  # an idle gap longer than this is not launch latency (CPU work, sync, setup)
GRAPH_GAP_US = 0.4  # the gap left between kernels replayed from a CUDA graph (median measured on
# the H200 in tests/data/modern/decode_graph_replay)
BACKWARD_FLOP_RATIO = 2.5  # fused backward FLOPs / forward FLOPs
BACKWARD_SLACK = 1.4  # fire above 2.5 × 1.4 = 3.5× the forward time
DECODE_MAX_SQ = 16
GQA_GROUP = 8  # query heads per KV head suggested (Llama-style GQA)
HEAD_DIM_ALIGN = 8
MIN_SHARE = 0.01  # ignore work below 1 % of attention time
HIGH, MEDIUM = 0.25, 0.05

# every finding's keys; estimated_gain_us <= removable_us, the time the change acts on
FINDING_KEYS = ("id", "severity", "title", "detail", "evidence", "estimated_gain_us", "removable_us", "how")
_HF_MODELS = ("Llama", "Mistral", "Qwen", "Gemma", "GPT2", "Bert", "Phi", "Falcon")
_MATMUL_PHASES = ("qkv_proj", "qk_matmul", "pv_matmul", "out_proj", "fused_attention")
_ELEMENTWISE = ("scale", "mask", "softmax", "dropout")


def advise(report: dict, trace=None, links=None, tagging=None) -> list[dict]:
    """The findings for one report (trace, links and tagging give the recorded op inputs; without
    them the rules that need inputs stay silent)."""
    return _advise(_Run(report, trace, links))


def advice_and_backends(report: dict, trace=None, links=None, tagging=None) -> tuple[list[dict], list[dict]]:
    """``advice`` and ``attention_backends`` of one report, from one look at its SDPA calls."""
    from .attention.backends import backends

    run = _Run(report, trace, links)
    return _advise(run), backends(report.get("kernels"), frozenset(run.math_kernel_ids()))


def _advise(run: _Run) -> list[dict]:
    report = run.rep
    if report.get("status") not in (None, "ok") or not report.get("attention_time_us"):
        return []
    out = []
    for rule in (
        _fuse_attention,
        _sdpa_math_backend,
        _fp32_attention,
        _head_dim_alignment,
        _decode_kv_heads,
        _dropout_in_inference,
        _launch_overhead,
        _slow_backward,
    ):
        a = rule(run)
        if a is not None:
            a["severity"] = run.severity(a["estimated_gain_us"])
            out.append({k: a[k] for k in FINDING_KEYS})
    rank = {"high": 0, "medium": 1, "low": 2}
    out.sort(key=lambda a: (rank[a["severity"]], -(a["estimated_gain_us"] or 0.0)))
    return out


# ------------------------------------------------------------------ the run, in a usable form


class _Run:
    def __init__(self, report: dict, trace, links):
        self.rep = report
        self.trace, self.links = trace, links
        self.att_time = float(report.get("attention_time_us") or 0.0)
        dev = report.get("device") or {}
        peaks = dev.get("peaks") or {}
        self.flops_peak = peaks.get("flops") or {}
        self.bw = peaks.get("memory_bandwidth")
        self.device = dev.get("name")
        self.k = _attention_rows(report.get("kernels"))
        self.by_id = {k["id"]: k for k in self.k}
        self.steps = 1 if report.get("step") is not None else max(1, len(report.get("steps") or []))
        self._sdpa: Optional[list[dict]] = None
        self.has_backward = any(k["direction"] == "backward" for k in self.k) or self._trace_has_backward()

    def _trace_has_backward(self) -> bool:
        if self.links is None:
            return False
        return bool((self.links.backward_root >= 0).any())

    def severity(self, gain) -> str:
        if gain is None or self.att_time <= 0:
            return "low"
        s = gain / self.att_time
        return "high" if s >= HIGH else "medium" if s >= MEDIUM else "low"

    @property
    def peak_bf16(self) -> Optional[float]:
        return self.flops_peak.get("bf16") or self.flops_peak.get("fp16")

    # SDPA calls: outermost SDPA-family forward op, its recorded inputs, backend and kernels
    def sdpa_calls(self) -> list[dict]:
        if self._sdpa is None:
            self._sdpa = (
                _sdpa_calls(self.trace, self.links, {k["id"] for k in self.k})
                if self.trace is not None and self.links is not None
                else []
            )
        return self._sdpa

    def math_kernel_ids(self) -> set:
        return {i for c in self.sdpa_calls() if c["backend"] == "math" for i in c["kernel_ids"]}

    def call_rows(self, c: dict) -> list[dict]:
        """The attention kernel rows of one SDPA call (a dict lookup per kernel: rules that
        visit every call stay linear in the number of kernels)."""
        get = self.by_id.get
        return [r for r in (get(i) for i in c["kernel_ids"]) if r is not None]

    def fused_peak(self, dtype: Optional[str]) -> tuple[Optional[str], Optional[float], float]:
        """The FLOP peak a fused kernel on inputs of ``dtype`` runs against, its name and the
        fraction of it assumed: the dtype's own peak (fp16 and bf16 Tensor Cores; fp32 for fp32
        inputs, which only the mem-efficient kernel takes); when the dtype was not recorded, the
        bf16 peak, named so."""
        if dtype == "fp32":
            return (
                ("fp32", self.flops_peak["fp32"], FUSED_PEAK_FRACTION_FP32)
                if self.flops_peak.get("fp32")
                else (None, None, FUSED_PEAK_FRACTION_FP32)
            )
        for name in (dtype, "fp16" if dtype == "bf16" else "bf16") if dtype in ("bf16", "fp16") else ("bf16",):
            if self.flops_peak.get(name):
                return name, self.flops_peak[name], FUSED_PEAK_FRACTION
        return None, None, FUSED_PEAK_FRACTION


# the kernel fields the rules read (building only these is several times cheaper)
_ROW_FIELDS = (
    "id",
    "name",
    "ts",
    "dur_us",
    "device",
    "phase",
    "direction",
    "bound",
    "flops",
    "bytes",
    "memory_util",
    "compute_util",
    "instance",
    "dtype",
    "peak",
    "kind",
    "op",
    "cost_op",
    "module",
    "scope",
    "attention",
    "core",
    "estimated",
    "intensity",
    "shapes",
    "cost_detail",
    "module_path",
    "source",
    "graph",
)


def _attention_rows(kernels) -> list[dict]:
    if kernels is None:
        return []
    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "attention" in cols and hasattr(kernels, "rows"):
        idx = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
        rows = kernels.rows(idx, _ROW_FIELDS) if len(idx) else []
    else:
        rows = [k for k in kernels if k.get("attention")]
    return rows


def _pct(x) -> str:
    return pct(x, digits=0)  # findings read in whole percents


def _dir(d: str) -> str:
    return "fwd" if d == "forward" else "bwd"


def _group(rows: list[dict], top: int = 5) -> list[dict]:
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


def _phases(rows: list[dict]) -> list[dict]:
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


def _fused_time_us(
    flops: Optional[float],
    io_bytes: Optional[float],
    peak: Optional[float],
    bw: Optional[float],
    fraction: float = FUSED_PEAK_FRACTION,
) -> Optional[float]:
    """A fused kernel's time: its FLOPs at ``fraction`` of the peak of its dtype, or its minimum
    bytes at FUSED_BANDWIDTH_FRACTION of the bandwidth, whichever is longer."""
    if not flops or not peak:
        return None
    t = flops / (fraction * peak)
    if io_bytes and bw:
        t = max(t, io_bytes / (FUSED_BANDWIDTH_FRACTION * bw))
    return t * 1e6


# ------------------------------------------------------------------ SDPA calls from the trace

_BACKEND_OF = (
    ("_scaled_dot_product_attention_math", "math"),
    ("flash", "flash"),
    ("efficient", "efficient"),
    ("cudnn", "cudnn"),
    ("fused_attention_overrideable", "overrideable"),
)


def _sdpa_calls(trace, links, attention_ids: set) -> list[dict]:
    R = trace.ranges
    names = trace.strings
    n = len(R["kind"])
    if not n:
        return []
    sdpa_name = np.zeros(len(names), dtype=bool)
    for i, s in enumerate(names):
        sch = SDPA_SCHEMAS.get(s)
        if sch is not None and not sch.backward:
            sdpa_name[i] = True
    is_sdpa = sdpa_name[R["name"]] & (R["kind"] == OP)
    if not is_sdpa.any():
        return []
    parent = links.parent
    top = np.full(n, -2, dtype=np.int64)  # -2 unknown, -1 none, else the outermost SDPA op

    def top_of(r: int) -> int:
        chain = []
        x = r
        while x >= 0 and top[x] == -2:
            chain.append(x)
            x = int(parent[x])
        t = int(top[x]) if x >= 0 else -1
        for y in reversed(chain):
            if t < 0 and is_sdpa[y]:
                t = y
            top[y] = t
        return int(top[r])

    calls: dict[int, dict] = {}
    for r in np.flatnonzero(is_sdpa).tolist():
        t = top_of(r)
        if t == r:
            calls[r] = {"range": r, "op": names[R["name"][r]], "kernel_ids": [], "inner": set()}
    for r in np.flatnonzero(is_sdpa).tolist():
        t = top_of(r)
        if t in calls and t != r:
            calls[t]["inner"].add(names[R["name"][r]])
    gp = links.gpu_parent
    broot, fwd = links.backward_root, links.forward_of
    for k in sorted(attention_ids):
        r = int(gp[k]) if k < len(gp) else -1
        if r < 0:
            continue
        b = int(broot[r])
        if b >= 0:
            r = int(fwd[b])
            if r < 0:
                continue
        t = top_of(r)
        if t in calls:
            calls[t]["kernel_ids"].append(k)
    out = []
    for r, c in calls.items():
        inner = " ".join(sorted(c["inner"])) + " " + c["op"]
        backend = None
        for key, be in _BACKEND_OF:
            if key in inner:
                backend = be
                break
        sig = int(R["sig"][r])
        args = parse_args(trace.signatures[sig]) if sig >= 0 else []
        shapes = sdpa_shapes(c["op"], args) if args else None
        gqa_flag = None
        if c["op"] == "aten::scaled_dot_product_attention" and len(args) > 7:
            v = args[7].value.strip().lower()
            gqa_flag = True if v in ("true", "1") else False if v in ("false", "0") else None
        q = args[SDPA_SCHEMAS[c["op"]].q : SDPA_SCHEMAS[c["op"]].q + 3] if args else []
        out.append(
            {
                "range": r,
                "op": c["op"],
                "backend": backend,
                "kernel_ids": c["kernel_ids"],
                "shapes": shapes,
                "enable_gqa": gqa_flag,
                "qkv": q,
            }
        )
    return out


def _shape_key(c: dict) -> tuple:
    s = c["shapes"] or {}
    return tuple(
        s.get(x) for x in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype", "causal", "mask_bytes", "dropout_p")
    ) + (c["enable_gqa"],)


def _call_inputs(c: dict) -> dict:
    s = c["shapes"] or {}
    out = {k: s.get(k) for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype", "causal", "dropout_p")}
    out["attn_mask"] = bool(s.get("mask_bytes"))
    out["enable_gqa"] = c["enable_gqa"]
    out["last_dim_strides"] = [a.strides[-1] if a.strides else None for a in c["qkv"]]
    out["contiguous"] = [a.is_contiguous() for a in c["qkv"]]
    return out


# ------------------------------------------------------------------ rules


def _fuse_attention(run: _Run) -> Optional[dict]:
    math_ids = run.math_kernel_ids()
    rows = [k for k in run.k if k["phase"] in P.UNFUSED_CORE_PHASES and k["id"] not in math_ids]
    unfused = sum(k["dur_us"] or 0.0 for k in rows)
    if unfused <= 0 or unfused < MIN_SHARE * run.att_time:
        return None
    if not any(k["phase"] in ("qk_matmul", "pv_matmul") for k in rows):
        return None  # no QK^T / PV seen: not the matmul-softmax-matmul pattern
    slow = [k for k in rows if k["phase"] in _ELEMENTWISE and k["bound"] in ("memory", "latency")]
    slow_t = sum(k["dur_us"] or 0.0 for k in slow)
    if slow_t < ELEMENTWISE_SHARE * unfused:
        return None
    # a fused kernel does the two matmuls' FLOPs (backward: 2.5x the forward's) in the dtype the
    # matmuls run in now, and reads q, k, v once
    dtype = _main_dtype(k for k in rows if k["phase"] in ("qk_matmul", "pv_matmul"))
    peak_name, peak, frac = run.fused_peak(dtype)
    item = _ITEMSIZE.get(dtype or "", 2)
    fwd_fl, io, per_inst = 0.0, 0.0, set()
    for k in rows:
        if k["direction"] == "forward" and k["phase"] in ("qk_matmul", "pv_matmul") and k["flops"]:
            fwd_fl += k["flops"]
            cd = k.get("cost_detail") or {}
            key = (k["instance"], k["phase"])
            if key not in per_inst and {"m", "n", "k"} <= set(cd):
                per_inst.add(key)
                b = cd.get("batch", 1)
                # qk: Q (m x k) and K (k x n) read; pv: V (n x k) read and O (m x n) written
                io += (
                    item * b * (cd["m"] * cd["k"] + cd["k"] * cd["n"])
                    if k["phase"] == "qk_matmul"
                    else item * b * (cd["k"] * cd["n"] + cd["m"] * cd["n"])
                )
    t_fwd = sum(k["dur_us"] or 0.0 for k in rows if k["direction"] == "forward")
    t_bwd = unfused - t_fwd
    est_f = _fused_time_us(fwd_fl, io, peak, run.bw, frac) if t_fwd > 0 else 0.0
    est_b = _fused_time_us(BACKWARD_FLOP_RATIO * fwd_fl, 2 * io, peak, run.bw, frac) if t_bwd > 0 else 0.0
    gain = fused_us = None
    if est_f is not None and est_b is not None:
        fused_us = est_f + est_b
        gain = _r(max(0.0, unfused - fused_us))
        if gain is not None and gain < MIN_SHARE * run.att_time:
            return None  # a fused kernel in this dtype would not be faster (fp32: see fp32_attention)
    mods = {(k.get("module_path") or "") + " " + (k.get("scope") or "") for k in rows}
    ctx = " ".join(mods)
    how = _sdpa_call_hint(rows)
    if "MultiheadAttention" in ctx:
        how = (
            "nn.MultiheadAttention runs the unfused path when it must return the attention weights: call it "
            "with need_weights=False (and batch_first=True) so it uses scaled_dot_product_attention. " + how
        )
    elif "eager_attention_forward" in ctx or any(m in ctx for m in _HF_MODELS):
        how = (
            'Hugging Face models: load with attn_implementation="sdpa" (or "flash_attention_2") instead of '
            '"eager". ' + how
        )
    phases = _phases(rows)
    slow_ph = [p for p in phases if p["phase"] in _ELEMENTWISE]
    worst = sorted(slow_ph, key=lambda p: -p["time_us"])[:3]
    detail = (
        f"Core attention runs as {len(rows)} separate kernels taking {_us(unfused)} "
        f"({_pct(unfused / run.att_time)} of attention time); the scale/mask/softmax/dropout kernels alone take "
        f"{_us(slow_t)} and are memory- or latency-bound: "
        + ", ".join(
            f"{p['phase']} {_dir(p['direction'])} {_us(p['time_us'])} at {_pct(p['memory_util'])} of bandwidth"
            for p in worst
        )
        + ". A fused kernel keeps the score matrix on chip and skips these round trips through memory."
    )
    if gain is not None and fused_us is not None and peak:
        detail += (
            f" At {frac:.0%} of the {_peak_label(peak_name, dtype)} ({peak / 1e12:.0f} TFLOP/s) "
            f"the same matmul FLOPs take about {_us(fused_us)} fused"
        )
        detail += " (backward counted as 2.5x the forward's FLOPs)." if t_bwd > 0 else "."
    return {
        "id": "fuse_attention",
        "title": "Use fused attention (scaled_dot_product_attention)",
        "detail": detail,
        "evidence": {
            "time_us": _r(unfused),
            "memory_or_latency_bound_elementwise_us": _r(slow_t),
            "share_of_attention": _r(unfused / run.att_time, 4),
            "phases": phases,
            "kernels": _group(slow),
            "matmul_flops_forward": fwd_fl or None,
            "fused_estimate_us": _r(fused_us) if gain is not None else None,
            "dtype": dtype,
            "peak": peak_name,
            "peak_flops_per_s": peak,
            "assumption": f"fused kernel at {frac:.0%} of the "
            f"{_peak_label(peak_name, dtype)} (or {FUSED_BANDWIDTH_FRACTION:.0%} of "
            f"bandwidth if longer)",
        },
        "estimated_gain_us": gain,
        "removable_us": _r(unfused),
        "how": how,
    }


_ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def _main_dtype(rows) -> Optional[str]:
    """The dtype that most of these kernels' time runs in (None when none was recorded)."""
    t: dict = {}
    for k in rows:
        if k.get("dtype"):
            t[k["dtype"]] = t.get(k["dtype"], 0.0) + (k["dur_us"] or 0.0)
    return max(t.items(), key=lambda x: x[1])[0] if t else None


def _peak_label(peak_name: Optional[str], dtype: Optional[str]) -> str:
    if dtype is None:
        return f"{peak_name} peak (dtype not recorded)"
    return f"{peak_name} peak" if peak_name == dtype else f"{peak_name} peak (no {dtype} peak known)"


def _sdpa_call_hint(rows: list[dict]) -> str:
    """The SDPA call that replaces this unfused attention, with only the arguments the run shows
    a need for: dropout_p when dropout kernels ran, is_causal / attn_mask when mask kernels ran."""
    phases = {k["phase"] for k in rows}
    args = "q, k, v"
    if "dropout" in phases:
        args += ", dropout_p=p if self.training else 0.0"
    text = (
        f"Replace the explicit matmul → softmax → matmul with torch.nn.functional.scaled_dot_product_attention({args})"
    )
    if "mask" in phases:
        text += (
            " plus is_causal=True if the mask this run applies is the causal one, or attn_mask=mask for any other mask"
        )
    return text + "; it dispatches to FlashAttention, memory-efficient or cuDNN kernels."


def _math_reasons(c: dict) -> list[str]:
    s = c["shapes"] or {}
    why = []
    dt = s.get("dtype")
    if dt and dt not in ("fp16", "bf16"):
        why.append(
            f"inputs are {dt}: the flash and cuDNN kernels need fp16/bf16 (mem-efficient accepts fp32 "
            f"but is slower than bf16)"
        )
    d, dv = s.get("d"), s.get("dv")
    if d is not None and dv is not None and d != dv:
        why.append(f"query/key head dim {d} differs from the value head dim {dv}: flash needs them equal")
    if d is not None and d % HEAD_DIM_ALIGN:
        why.append(
            f"head dim {d} is not a multiple of {HEAD_DIM_ALIGN}: the mem-efficient kernel needs aligned "
            f"head dims and flash pads them"
        )
    if d is not None and d > 256:
        why.append(f"head dim {d} > 256: beyond the flash kernel's limit")
    if s.get("mask_bytes"):
        why.append(
            "an explicit attn_mask tensor is passed: flash takes no mask (use is_causal=True for a causal "
            "mask); mem-efficient and cuDNN take one, with its last dim aligned to 16 bytes"
        )
    for name, a in zip(("query", "key", "value"), c["qkv"]):
        if a.strides and a.strides[-1] != 1:
            why.append(
                f"{name} has last-dim stride {a.strides[-1]} (not contiguous in the head dim): fused kernels "
                f"need stride 1; call .contiguous() or fix the transpose"
            )
            break
    h, hk = s.get("h"), s.get("hk")
    if h and hk and h != hk and c["enable_gqa"] is not True:
        why.append(
            f"{h} query heads but {hk} key/value heads without enable_gqa=True: only the math backend "
            f"broadcasts this; pass enable_gqa=True (flash supports it) or repeat k/v"
        )
    return why


def _sdpa_math_backend(run: _Run) -> Optional[dict]:
    calls = [c for c in run.sdpa_calls() if c["backend"] == "math" and c["kernel_ids"]]
    if not calls:
        return None
    rows = [k for c in calls for k in run.call_rows(c)]
    t = sum(k["dur_us"] or 0.0 for k in rows)
    if t <= 0:
        return None
    by_shape: dict = {}
    for c in calls:
        by_shape.setdefault(_shape_key(c), []).append(c)
    inputs, reasons, est = [], [], 0.0
    peaks_used: set = set()
    est_known = True
    bwd = any(k["direction"] == "backward" for k in rows)
    for cs in by_shape.values():
        c = cs[0]
        why = _math_reasons(c)
        for w in why:
            if w not in reasons:
                reasons.append(w)
        inp = _call_inputs(c)
        inp["calls"] = len(cs)
        inputs.append(inp)
        s = c["shapes"]
        if s is None:
            est_known = False
            continue
        frac = 0.5 if s["causal"] and s["sq"] == s["sk"] else 1.0
        fl = 2.0 * s["b"] * s["h"] * s["sq"] * s["sk"] * (s["d"] + s["dv"]) * frac
        io = s["itemsize"] * (
            s["b"] * s["h"] * s["sq"] * (s["d"] + s["dv"]) + s["b"] * s["hk"] * s["sk"] * (s["d"] + s["dv"])
        )
        peak_name, peak, frac = run.fused_peak(s["dtype"])
        peaks_used.add(f"{frac:.0%} of the {_peak_label(peak_name, s['dtype'])}")
        f = _fused_time_us(fl, io, peak, run.bw, frac)
        fb = _fused_time_us(BACKWARD_FLOP_RATIO * fl, 2 * io, peak, run.bw, frac) if bwd else 0.0
        if f is None or fb is None:
            est_known = False
        else:
            est += (f + fb) * len(cs)
    gain = _r(max(0.0, t - est)) if est_known else None
    upcast = [k for k in rows if k["phase"] in ("qk_matmul", "pv_matmul") and k["dtype"] == "fp32"]
    in_dt = {d for d in ((c["shapes"] or {}).get("dtype") for c in calls) if isinstance(d, str)}
    detail = (
        f"{len(calls)} scaled_dot_product_attention call(s) ran on the math backend: {len(rows)} kernels, "
        f"{_us(t)} ({_pct(t / run.att_time)} of attention time). "
    )
    if upcast and in_dt & {"bf16", "fp16"}:
        detail += (
            f"The math backend computes {'/'.join(sorted(in_dt & {'bf16', 'fp16'}))} inputs in fp32 here "
            f"(fp32 GEMMs: {_us(sum(k['dur_us'] for k in upcast))}) and materialises the full score matrix. "
        )
    if reasons:
        detail += "What rules out the fused backends, from the recorded inputs: " + "; ".join(reasons) + "."
    else:
        detail += (
            "No recorded input rules out a fused backend (dtype, head dim, mask, strides and heads all "
            "qualify), so the math backend was most likely forced: sdpa_kernel(SDPBackend.MATH), "
            "torch.backends.cuda.enable_flash_sdp(False) / enable_mem_efficient_sdp(False) / "
            "enable_cudnn_sdp(False), or a PyTorch build without fused kernels for this GPU."
        )
    if gain is not None:
        detail += f" A fused kernel at {' / '.join(sorted(peaks_used))} would take about {_us(est)} for the same calls."
    masked = any((c["shapes"] or {}).get("mask_bytes") for c in calls)
    gqa = any((c["shapes"] or {}).get("h") != (c["shapes"] or {}).get("hk") for c in calls if c["shapes"])
    how = (
        "Let PyTorch pick a fused kernel: remove sdpa_kernel(SDPBackend.MATH) / the enable_*_sdp(False) "
        "switches, or ask for one explicitly with `with torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION, "
        "SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):` (it raises, with the reason, if none "
        "applies). Flash and cuDNN need fp16/bf16 inputs (torch.autocast('cuda', dtype=torch.bfloat16)), "
        "head dims ≤ 256 and a multiple of 8"
        + (", no attn_mask tensor (is_causal=True instead, if the mask is causal)" if masked else "")
        + " and q/k/v contiguous in the last dim"
        + ("; for GQA pass enable_gqa=True." if gqa else ".")
    )
    return {
        "id": "sdpa_math_backend",
        "title": "SDPA fell back to the math backend",
        "detail": detail,
        "evidence": {
            "time_us": _r(t),
            "share_of_attention": _r(t / run.att_time, 4),
            "calls": len(calls),
            "inputs": inputs,
            "blockers": reasons,
            "phases": _phases(rows),
            "kernels": _group(rows),
            "fused_estimate_us": _r(est) if est_known else None,
        },
        "estimated_gain_us": gain,
        "removable_us": _r(t),
        "how": how,
    }


def _fp32_attention(run: _Run) -> Optional[dict]:
    math_bf16 = {
        i
        for c in run.sdpa_calls()
        if c["backend"] == "math" and (c["shapes"] or {}).get("dtype") in ("bf16", "fp16")
        for i in c["kernel_ids"]
    }
    rows = [
        k
        for k in run.k
        if k["phase"] in _MATMUL_PHASES
        and k["dtype"] == "fp32"
        and (k["flops"] or 0) > 0
        and k["peak"] == "fp32"
        and k["id"] not in math_bf16
        and _is_matmul_op(k.get("cost_op"))
    ]
    t = sum(k["dur_us"] or 0.0 for k in rows)
    if t <= 0 or t < MIN_SHARE * run.att_time:
        return None
    p32, p16, ptf = run.flops_peak.get("fp32"), run.peak_bf16, run.flops_peak.get("tf32")
    gain = None
    if p32 and p16:
        g = 0.0
        for k in rows:
            d = k["dur_us"] or 0.0
            if k["bound"] == "compute":
                g += d * (1 - p32 / p16)  # same fraction of the bf16 peak
            elif k["bound"] == "memory":
                g += d * 0.5  # half the bytes
        gain = _r(g)
    detail = (
        f"{len(rows)} attention matmul kernels run in fp32 on the fp32 vector peak ({p32 / 1e12:.1f} TFLOP/s"
        if p32
        else f"{len(rows)} attention matmul kernels run in fp32 ("
    )
    detail += (
        (f"; bf16 Tensor Cores: {p16 / 1e12:.0f} TFLOP/s" if p16 else "")
        + (f", TF32: {ptf / 1e12:.0f} TFLOP/s" if ptf else "")
        + f"): {_us(t)}, {_pct(t / run.att_time)} of attention time."
    )
    comp = [k for k in rows if k["bound"] == "compute"]
    if comp:
        detail += f" {_us(sum(k['dur_us'] for k in comp))} of it is compute-bound on the fp32 roof."
    if gain is not None:
        detail += (
            " Estimated with compute-bound kernels reaching the same fraction of the bf16 peak and "
            "memory-bound ones moving half the bytes."
        )
    how = (
        "Run attention in bf16: `with torch.autocast('cuda', dtype=torch.bfloat16):` around the forward (or "
        "model.to(torch.bfloat16)); fused SDPA kernels then apply too. If the model must stay fp32, allow TF32 "
        "for matmuls: torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))."
    )
    return {
        "id": "fp32_attention",
        "title": "Attention matmuls run in fp32",
        "detail": detail,
        "evidence": {
            "time_us": _r(t),
            "share_of_attention": _r(t / run.att_time, 4),
            "kernels": _group(rows),
            "phases": _phases(rows),
            "peaks_flops_per_s": {"fp32": p32, "tf32": ptf, "bf16": p16},
        },
        "estimated_gain_us": gain,
        "removable_us": _r(t),
        "how": how,
    }


_MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "_scaled_mm", "einsum"})


def _is_matmul_op(op: Optional[str]) -> bool:
    if not op:
        return False
    return P.short_op(op) in _MATMUL_OPS or bool(P.SDPA_OP.match(op))


def _head_dims(run: _Run) -> dict:
    """head dim -> (time_us, kernels, source) from SDPA inputs and eager QK^T matmuls."""
    out: dict = {}
    seen = set()
    for c in run.sdpa_calls():
        s = c["shapes"]
        if not s:
            continue
        t = sum(k["dur_us"] or 0.0 for k in run.call_rows(c))
        for d in {s["d"], s["dv"]}:
            e = out.setdefault(d, {"time_us": 0.0, "calls": 0, "source": "sdpa inputs"})
            e["time_us"] += t
            e["calls"] += 1
        seen.update(c["kernel_ids"])
    for k in run.k:
        if k["id"] in seen or k["phase"] not in ("qk_matmul", "fused_attention"):
            continue
        # attention/headdim.py: forward QK^T contraction or the formula's d (a backward QK^T kernel
        # contracts over the sequence)
        for d in head_dims(k["phase"], k.get("direction"), k.get("cost_detail")):
            e = out.setdefault(d, {"time_us": 0.0, "calls": 0, "source": "kernel shapes"})
            e["time_us"] += k["dur_us"] or 0.0
            e["calls"] += 1
    return out


def _head_dim_alignment(run: _Run) -> Optional[dict]:
    dims = _head_dims(run)
    bad = {d: e for d, e in dims.items() if d % HEAD_DIM_ALIGN}
    if not bad:
        return None
    t = sum(e["time_us"] for e in bad.values())
    desc = ", ".join(f"{d} ({_us(e['time_us'])}, from {e['source']})" for d, e in sorted(bad.items()))
    return {
        "id": "head_dim_alignment",
        "title": "Head dimension not a multiple of 8",
        "detail": (
            f"Attention runs with head dim {desc}. Tensor-core kernels work on 8-element (16-byte) "
            f"fragments: the mem-efficient SDPA kernel rejects such head dims, flash pads them (wasted "
            f"work and a copy), and cuBLAS falls back to slower unaligned GEMMs."
        ),
        "evidence": {
            "head_dims": {
                str(d): {"time_us": _r(e["time_us"]), "calls": e["calls"], "source": e["source"]}
                for d, e in sorted(bad.items())
            },
            "time_us": _r(t),
        },
        "estimated_gain_us": None,
        "removable_us": _r(t),
        "how": (
            f"Choose a head dim that is a multiple of {HEAD_DIM_ALIGN} (64, 80, 96, 128): e.g. change "
            f"n_heads so that hidden / n_heads is aligned, or pad q/k/v to the next multiple of 8 once "
            f"(zeros in the pad do not change the result if the scale is set explicitly)."
        ),
    }


def _decode_kv_heads(run: _Run) -> Optional[dict]:
    hits = []
    for c in run.sdpa_calls():
        s = c["shapes"]
        if not s or s["sq"] > DECODE_MAX_SQ or s["h"] != s["hk"] or s["h"] < 2:
            continue
        rows = [k for k in run.call_rows(c) if k["phase"] in P.CORE_PHASES]
        if not rows:
            continue
        t = sum(k["dur_us"] or 0.0 for k in rows)
        fl = sum(k["flops"] or 0.0 for k in rows)
        by = sum(k["bytes"] or 0.0 for k in rows)
        mem_t = sum(k["dur_us"] or 0.0 for k in rows if k["bound"] == "memory")
        ridge = (run.flops_peak.get(s["dtype"]) or run.peak_bf16 or 0) / run.bw if run.bw else None
        inten = fl / by if by else None
        memory_side = mem_t >= 0.5 * t or (inten is not None and ridge is not None and inten < ridge)
        if not memory_side:
            continue
        hits.append((c, s, rows, t, inten, ridge, mem_t))
    if not hits:
        return None
    t_all = sum(h[3] for h in hits)
    if t_all < MIN_SHARE * run.att_time:
        return None
    gain, ev = 0.0, []
    for _c, s, _rows, t, inten, ridge, mem_t in hits:
        it = s["itemsize"]
        kv = 2.0 * s["b"] * s["hk"] * s["sk"] * s["d"] * it
        qo = 2.0 * s["b"] * s["h"] * s["sq"] * s["d"] * it
        g = max(1, s["h"] // GQA_GROUP) if s["h"] % GQA_GROUP == 0 else 1
        kv_new = kv * g / s["hk"]
        saved = (kv - kv_new) / (kv + qo)
        gain += t * saved
        ev.append(
            {
                "b": s["b"],
                "h": s["h"],
                "hk": s["hk"],
                "sq": s["sq"],
                "sk": s["sk"],
                "d": s["d"],
                "dtype": s["dtype"],
                "time_us": _r(t),
                "memory_bound_us": _r(mem_t),
                "intensity": _r(inten, 3),
                "ridge_point": _r(ridge, 1),
                "kv_bytes_per_call": kv,
                "kv_bytes_with_gqa": kv_new,
                "suggested_kv_heads": g,
                "kv_bytes_with_mqa": kv / s["hk"],
            }
        )
    e = ev[0]
    detail = (
        f"Decode attention (query length {e['sq']}, {e['sk']} cached keys) reads {e['h']} key/value heads for "
        f"{e['h']} query heads: {_us(t_all)}, {_pct(t_all / run.att_time)} of attention time, on the memory side "
        f"of the roofline (intensity {e['intensity']} FLOP/B vs ridge point {e['ridge_point']}). Each call moves "
        f"{e['kv_bytes_per_call'] / 1e6:.1f} MB of KV cache; with {e['suggested_kv_heads']} KV heads (GQA, "
        f"{e['h'] // e['suggested_kv_heads']} query heads per KV head) it would move "
        f"{e['kv_bytes_with_gqa'] / 1e6:.1f} MB, with MQA {e['kv_bytes_with_mqa'] / 1e6:.2f} MB."
    )
    return {
        "id": "decode_kv_heads",
        "title": "Memory-bound decode attention without GQA/MQA",
        "detail": detail,
        "evidence": {"calls": ev, "time_us": _r(t_all), "share_of_attention": _r(t_all / run.att_time, 4)},
        "estimated_gain_us": _r(gain),
        "removable_us": _r(t_all),
        "how": (
            "Use grouped-query attention (n_kv_heads = n_heads / 8, as Llama 2/3 70B) or multi-query "
            "attention: project k/v to fewer heads and call F.scaled_dot_product_attention(q, k, v, "
            "enable_gqa=True). This changes the model (fine-tune or uptrain from the MHA checkpoint by "
            "mean-pooling KV heads); it also shrinks the KV cache by the same factor. Estimate: attention time "
            "scales with the bytes moved."
        ),
    }


def _dropout_in_inference(run: _Run) -> Optional[dict]:
    if run.has_backward:
        return None
    rows = [k for k in run.k if k["phase"] == "dropout" and (k["dur_us"] or 0) > 0]
    ops = _dropout_ops(run, rows)
    sdpa_p = [c for c in run.sdpa_calls() if (c["shapes"] or {}).get("dropout_p") and c["kernel_ids"]]
    if not rows and not sdpa_p:
        return None
    t = sum(k["dur_us"] or 0.0 for k in rows)
    detail = "This trace has no backward pass, yet attention applies dropout"
    ev = {"time_us": _r(t), "kernels": _group(rows), "ops": ops}
    if rows:
        detail += f": {len(rows)} dropout kernels take {_us(t)} ({_pct(t / run.att_time)} of attention time)"
    if sdpa_p:
        ps = sorted({c["shapes"]["dropout_p"] for c in sdpa_p})
        plist = ", ".join(f"{p:g}" for p in ps)
        detail += (
            ("; " if rows else ": ") + f"{len(sdpa_p)} SDPA call(s) pass dropout_p={plist}"
            " (the fused kernel generates random numbers and cannot use its fastest path)"
        )
        ev["sdpa_dropout_p"] = ps
    if ops:
        detail += "; recorded: " + ", ".join(f"{o['op']}(p={o['p']}, train={o['train']}) x{o['calls']}" for o in ops)
    detail += ". If this is inference, dropout only adds noise and time."
    return {
        "id": "dropout_in_inference",
        "title": "Dropout active without a backward pass",
        "detail": detail,
        "evidence": ev,
        "estimated_gain_us": _r(t) if rows else None,
        "removable_us": _r(t) if rows else _r(sum(k["dur_us"] or 0.0 for c in sdpa_p for k in run.call_rows(c))),
        "how": (
            "Call model.eval() before inference (nn.Dropout becomes the identity) and run under "
            "torch.inference_mode(); for F.scaled_dot_product_attention pass dropout_p=self.p if "
            "self.training else 0.0."
        ),
    }


def _dropout_ops(run: _Run, rows: list[dict]) -> list[dict]:
    if run.trace is None or run.links is None or not rows:
        return []
    R, names, gop = run.trace.ranges, run.trace.strings, run.links.gpu_op
    found: dict = {}
    for k in rows:
        r = int(gop[k["id"]]) if k["id"] < len(gop) else -1
        while r >= 0:
            nm = names[R["name"][r]]
            if P.short_op(nm) in P.DROPOUT_OPS:
                sig = int(R["sig"][r])
                args = parse_args(run.trace.signatures[sig]) if sig >= 0 else []
                p = _num(args[1].value) if len(args) > 1 else ""
                tr = args[2].value if len(args) > 2 else ""
                key = (nm, p, tr)
                found[key] = found.get(key, 0) + 1
                break
            r = int(run.links.parent[r])
    return [{"op": a, "p": b or "?", "train": c or "?", "calls": n} for (a, b, c), n in found.items()]


def _num(text: str) -> str:
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


def _busy_curve(ts: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of intervals [ts, te) as sorted disjoint segments (starts, ends) and the busy
    time before each segment starts (for busy-time-in-[a, b] lookups by searchsorted)."""
    o = np.argsort(ts, kind="stable")
    ts, te = ts[o], np.maximum.accumulate(te[o])
    new_seg = np.ones(len(ts), dtype=bool)
    new_seg[1:] = ts[1:] > te[:-1]
    starts = ts[new_seg]
    ends = np.append(te[np.flatnonzero(new_seg)[1:] - 1], te[-1]) if len(ts) else ts
    before = np.concatenate(([0.0], np.cumsum(ends - starts)[:-1])) if len(ts) else ts
    return starts, ends, before


def _busy_until(curve: tuple, t: np.ndarray) -> np.ndarray:
    """GPU busy time from the start of the trace up to each time in ``t``."""
    starts, ends, before = curve
    if not len(starts):
        return np.zeros(len(t))
    i = np.searchsorted(starts, t, side="right") - 1
    ok = i >= 0
    ic = np.maximum(i, 0)
    return np.where(ok, before[ic] + np.clip(t - starts[ic], 0.0, ends[ic] - starts[ic]), 0.0)


def _attention_gaps(run: _Run) -> dict:
    """The GPU's idle time between consecutive kernels of the same attention call (same device,
    call and direction), with no GPU activity at all in between: what kernel launches cost.

    Gaps whose idle part is longer than LONG_GAP_US are set apart: no kernel launch takes that
    long, so they are CPU work, a host sync or a one-time setup (a cuDNN plan, a cuBLAS handle),
    which CUDA graphs do not remove. Overlapping gaps (calls on two streams) count once.
    Vectorised: one sort per device, no per-call rescans."""
    out = {"idle_us": 0.0, "gaps": 0, "long_gaps": 0, "long_gap_idle_us": 0.0}
    rows = [k for k in run.k if k["ts"] is not None and k["instance"] is not None]
    kt = run.rep.get("kernels")
    cols = getattr(kt, "columns", None)
    if not rows or kt is None:
        return out
    if isinstance(cols, dict) and "ts" in cols:
        all_ts = np.asarray(cols["ts"], dtype=np.float64)
        all_te = all_ts + np.nan_to_num(np.asarray(cols["dur_us"], dtype=np.float64))
        all_dev = np.asarray(kt.column("device"), dtype=object) if "device" in cols else np.zeros(len(all_ts), object)
    else:
        pairs = [(k["ts"], k["ts"] + (k["dur_us"] or 0.0), k.get("device")) for k in kt if k.get("ts") is not None]
        all_ts = np.asarray([a for a, _, _ in pairs], dtype=np.float64)
        all_te = np.asarray([b for _, b, _ in pairs], dtype=np.float64)
        all_dev = np.asarray([d for _, _, d in pairs], dtype=object)
    ok = ~np.isnan(all_ts)
    for dev in {k.get("device") for k in rows}:
        mine = [k for k in rows if k.get("device") == dev]
        sel = ok & (all_dev == dev)
        curve = _busy_curve(all_ts[sel], all_te[sel])
        ts = np.asarray([k["ts"] for k in mine], dtype=np.float64)
        te = ts + np.asarray([k["dur_us"] or 0.0 for k in mine], dtype=np.float64)
        keys: dict[tuple[Any, str], int] = {}
        call = np.asarray([keys.setdefault((k["instance"], k["direction"]), len(keys)) for k in mine], dtype=np.int64)
        o = np.lexsort((ts, call))
        ts, te, call = ts[o], te[o], call[o]
        # the end of the call's work so far (kernels of one call can overlap on two streams)
        run_end = te.copy()
        for c in np.unique(call):
            m = call == c
            run_end[m] = np.maximum.accumulate(te[m])
        same = call[1:] == call[:-1]
        a, b = run_end[:-1][same], ts[1:][same]
        pos = b > a
        a, b = a[pos], b[pos]
        idle = (b - a) - (_busy_until(curve, b) - _busy_until(curve, a))
        long = idle > LONG_GAP_US
        out["long_gaps"] += int(long.sum())
        out["long_gap_idle_us"] += float(idle[long].sum())
        a, b = a[~long], b[~long]
        out["gaps"] += int((idle[~long] > 0).sum())
        if len(a):
            ga, gb, _ = _busy_curve(a, b)  # the union of the kept gaps
            out["idle_us"] += float(((gb - ga) - (_busy_until(curve, gb) - _busy_until(curve, ga))).sum())
    return out


def _launch_overhead(run: _Run) -> Optional[dict]:
    rows = run.k
    if not rows:
        return None
    # kernels replayed from a CUDA graph are not launched by the CPU one by one: no such premise
    if sum(1 for k in rows if k.get("graph")) * 2 >= len(rows):
        return None
    short = [k for k in rows if (k["dur_us"] or 0) < SHORT_KERNEL_US]
    if len(short) < MIN_SHORT_KERNELS or len(short) < SHORT_COUNT_SHARE * len(rows):
        return None
    t_short = sum(k["dur_us"] or 0.0 for k in short)
    gaps = _attention_gaps(run)
    idle = gaps["idle_us"]
    if t_short < SHORT_TIME_SHARE * run.att_time and idle < IDLE_RATIO * run.att_time:
        return None
    gain = max(0.0, idle - GRAPH_GAP_US * gaps["gaps"])  # a replayed graph still leaves ~0.4 µs a gap
    # The gaps of a profiled run include the profiler's own CPU time per op, so they overstate what an
    # unprofiled run loses; the estimate claims at most attention's own GPU time.
    capped = gain > run.att_time
    gain = min(gain, run.att_time)
    detail = (
        f"{len(short)} of {len(rows)} attention kernels run for less than {SHORT_KERNEL_US:g} µs "
        f"({_us(t_short)}, {_pct(t_short / run.att_time)} of attention time), and the GPU sits idle for "
        f"{_us(idle)} in {gaps['gaps']} gaps between consecutive kernels of the same attention call, with no "
        f"GPU work at all (attention kernels run {_us(run.att_time)}). The CPU cannot launch kernels as fast as "
        f"the GPU finishes them."
    )
    if gaps["long_gaps"]:
        detail += (
            f" {gaps['long_gaps']} longer gap(s) ({_us(gaps['long_gap_idle_us'])} idle, each over "
            f"{_us(LONG_GAP_US)}) are not counted: no launch takes that long (CPU work, a host sync or a "
            f"one-time setup such as a cuDNN plan)."
        )
    detail += (
        " The profiler's own overhead widens these gaps (more so with with_stack=True): confirm with a lighter trace."
    )
    if capped:
        detail += (
            f" The estimate is held to attention's own GPU time ({_us(run.att_time)}) because part of the "
            "idle time is the profiler's."
        )
    return {
        "id": "launch_overhead",
        "title": "Many short attention kernels: launch-bound",
        "detail": detail,
        "evidence": {
            "short_kernels": len(short),
            "attention_kernels": len(rows),
            "short_time_us": _r(t_short),
            "idle_in_attention_us": _r(idle),
            "idle_gaps": gaps["gaps"],
            "long_gaps": gaps["long_gaps"],
            "long_gap_idle_us": _r(gaps["long_gap_idle_us"]),
            "long_gap_us": LONG_GAP_US,
            "graph_gap_us": GRAPH_GAP_US,
            "threshold_us": SHORT_KERNEL_US,
            "kernels": _group(short),
        },
        "estimated_gain_us": _r(gain) if gain > 0 else None,
        "removable_us": _r(idle),
        "how": (
            'Capture the step in a CUDA graph: torch.compile(model, mode="reduce-overhead") (also fuses the '
            "small elementwise kernels), or torch.cuda.CUDAGraph / torch.cuda.graphs.make_graphed_callables "
            "with static input buffers (a preallocated KV cache for decode). The estimate is the GPU's idle "
            "time between kernels of the same attention call less the ~0.4 µs a replayed graph still leaves "
            "per gap (at most attention's GPU time): an upper bound on what graphs remove."
        ),
    }


def _slow_backward(run: _Run) -> Optional[dict]:
    rows = run.k
    fwd = {"fused": 0.0, "unfused": 0.0}
    bwd = {"fused": 0.0, "unfused": 0.0}
    for k in rows:
        if k["phase"] not in P.CORE_PHASES:
            continue
        kind = "fused" if k["phase"] == "fused_attention" else "unfused"
        (bwd if k["direction"] == "backward" else fwd)[kind] += k["dur_us"] or 0.0
    limit = BACKWARD_FLOP_RATIO * BACKWARD_SLACK
    hits = []
    for kind in ("fused", "unfused"):
        f, b = fwd[kind], bwd[kind]
        if f > 0 and b > limit * f and b >= MIN_SHARE * run.att_time:
            hits.append((kind, f, b))
    if not hits:
        return None
    gain = sum(b - BACKWARD_FLOP_RATIO * f for _, f, b in hits)
    parts = []
    ev = []
    for kind, f, b in hits:
        members = [
            k for k in rows if k["phase"] in P.CORE_PHASES and (k["phase"] == "fused_attention") == (kind == "fused")
        ]
        ph = _phases(members)
        cu = {
            p["direction"]: p["compute_util"]
            for p in ph
            if p["phase"] == ("fused_attention" if kind == "fused" else p["phase"])
        }
        parts.append(f"{kind} core attention: backward {_us(b)} vs forward {_us(f)} ({b / f:.1f}x)")
        ev.append(
            {
                "kind": kind,
                "forward_us": _r(f),
                "backward_us": _r(b),
                "ratio": _r(b / f, 2),
                "phases": ph,
                "kernels": _group([k for k in members if k["direction"] == "backward"]),
                "compute_util": cu,
            }
        )
    return {
        "id": "slow_backward",
        "title": "Backward attention much slower than 2.5x forward",
        "detail": (
            "; ".join(parts) + f". The backward does {BACKWARD_FLOP_RATIO:g}x the forward's matmul "
            f"FLOPs, so a ratio above {limit:.1f}x means it runs at a much lower efficiency than the "
            "forward: deterministic mode, an extra dq accumulation pass, atomics, a fallback kernel for "
            "this shape, or a recomputation."
        ),
        "evidence": {"directions": ev, "threshold_ratio": limit},
        "estimated_gain_us": _r(gain),
        "removable_us": _r(sum(b for _, _, b in hits)),
        "how": (
            "Check torch.are_deterministic_algorithms_enabled() (deterministic flash/mem-efficient "
            "backwards are slower); compare SDPA backends for the backward with torch.nn.attention.sdpa_kernel "
            "(cuDNN and flash backwards differ by shape); keep q/k/v contiguous so the backward does not copy; "
            "with activation checkpointing the forward is recomputed inside the backward (expected)."
        ),
    }
