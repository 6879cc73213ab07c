"""Build the JSON report of one trace: the contract shared by the CLI and the dashboard.

The schema is documented in docs/report-schema.md (and summarised in the README). Every GPU
activity of the trace appears exactly once in ``kernels`` (``kind`` says kernel, memcpy or
memset); numbers that are estimates say so (``estimated``), numbers we cannot know are null.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import __version__
from .attention import patterns as P
from .attention.tagger import SOURCES, Tagging, tag
from .roofline import devices as D
from .roofline.attribute import Attribution, attribute
from .roofline.classify import ROOF_REACHED, classify, peak_key
from .roofline.cost import MATRIX, NONE
from .trace.correlate import Links, link
from .trace.records import ANNOTATION, GPU_KIND_NAMES, KERNEL, MEMCPY, MODULE, Trace
from .trace.shapes import parse_args

SCHEMA_VERSION = 1
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class Options:
    module_pattern: str = P.DEFAULT_MODULE_PATTERN
    annotation_pattern: str = P.DEFAULT_ANNOTATION_PATTERN
    peak_basis: str = "measured"            # measured | datasheet
    user_peaks: dict = field(default_factory=dict)
    step: Optional[str] = None              # keep only this ProfilerStep ("3" or "ProfilerStep#3")

    def key(self) -> str:
        """Identity of everything that changes the result (for caches)."""
        return repr((self.module_pattern, self.annotation_pattern, self.peak_basis,
                     sorted((self.user_peaks or {}).items(), key=str), self.step))


def _r(x, nd=3):
    """Round for JSON; NaN/inf become null."""
    if x is None:
        return None
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return None
    return round(x, nd)


def _sig(x):
    """Keep 4 significant digits (FLOPs, bytes, rates)."""
    if x is None:
        return None
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return None
    if x == 0:
        return 0.0
    return float(f"{x:.4g}")


def _union_us(starts: np.ndarray, ends: np.ndarray) -> float:
    if not len(starts):
        return 0.0
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    gaps = np.maximum(s[1:] - run_end[:-1], 0)
    return float((run_end[-1] - s[0] - gaps.sum()) / 1000.0)


class _Modules:
    """Module path of a CPU range (nn.Module names outermost first), memoised."""

    def __init__(self, trace: Trace, links: Links):
        self.t, self.L = trace, links
        self.memo: dict[int, tuple] = {}
        self.kind = trace.ranges["kind"]
        self.name = trace.ranges["name"]

    def path(self, r: int) -> tuple:
        if r < 0:
            return ()
        hit = self.memo.get(r)
        if hit is not None:
            return hit
        chain = []
        x = r
        while x >= 0 and x not in self.memo:
            chain.append(x)
            x = int(self.L.parent[x])
        base = self.memo.get(x, ()) if x >= 0 else ()
        for y in reversed(chain):
            if self.kind[y] == MODULE:
                nm = self.t.strings[self.name[y]]
                base = base + (nm.split(":", 1)[1].strip() if ":" in nm else nm,)
            self.memo[y] = base
        return self.memo[r]


def _notices(trace: Trace, n_kernels: int, n_attention: int, shapes_seen: bool,
             devices: list[D.DevicePeaks], used_devices: set) -> list[dict]:
    out = []
    meta = trace.meta
    if n_kernels == 0:
        msg = ("no GPU kernels in this trace" + (" (a CPU-only profile)" if not D.device_properties(meta) else ""))
        out.append({"code": "no_gpu_kernels", "message": msg,
                    "fix": "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU run"})
    elif n_attention == 0:
        out.append({"code": "no_attention", "message": "no attention found among the GPU kernels",
                    "fix": ("profile with with_stack=True so nn.Module scopes are recorded, wrap attention in "
                            "torch.profiler.record_function('attention'), or pass --module-pattern matching "
                            "your attention module's class name")})
    if n_kernels and not shapes_seen:
        out.append({"code": "no_shapes", "message": "no input shapes recorded: FLOPs and bytes are unknown",
                    "fix": "profile with record_shapes=True"})
    if n_kernels and not any(trace.ranges["kind"] == MODULE) and n_attention:
        out.append({"code": "no_stack", "message": "no nn.Module scopes recorded: projections and module "
                    "context come only from op and annotation names",
                    "fix": "profile with with_stack=True to attribute projections to attention modules"})
    for d in devices:
        if d.id in used_devices and not d.known:
            out.append({"code": "unknown_gpu", "message": f"unknown GPU '{d.name}': utilisation and bound cannot be computed",
                        "fix": "give its peaks: --peaks bf16=<TFLOP/s>,fp32=<TFLOP/s>,memory=<TB/s> or a JSON file"})
    return out


def analyze_trace(trace: Trace, options: Optional[Options] = None) -> dict:
    """The report dict of one loaded trace."""
    opt = options or Options()
    links = link(trace)
    tagging = tag(trace, links, opt.module_pattern, opt.annotation_pattern)
    attr = attribute(trace, links)
    return build_report(trace, links, tagging, attr, opt)


def build_report(trace: Trace, links: Links, tagging: Tagging, attr: Attribution, opt: Options) -> dict:
    G, R = trace.gpu, trace.ranges
    names = trace.strings
    n = len(G["kind"])

    # devices used and their peaks
    dev_ids = sorted(set(G["device"].tolist())) if n else []
    props_ids = [p.get("id") for p in D.device_properties(trace.meta) if isinstance(p.get("id"), int)]
    devices = {i: D.resolve(trace.meta, i, opt.user_peaks, opt.peak_basis) for i in sorted(set(dev_ids) | set(props_ids))}

    # steps
    step_rows = []
    ann = np.flatnonzero(R["kind"] == ANNOTATION)
    for r in ann.tolist():
        m = _STEP.match(names[R["name"][r]])
        if m:
            step_rows.append((int(R["ts_ns"][r]), int(R["ts_ns"][r] + R["dur_ns"][r]), names[R["name"][r]],
                              int(m.group(1)), float(R["ts"][r])))
    step_rows.sort()
    launch_t = np.where(links.gpu_launch >= 0, R["ts_ns"][np.maximum(links.gpu_launch, 0)] if len(R["ts_ns"]) else 0,
                        G["ts_ns"])
    k_step = np.full(n, -1, dtype=np.int64)
    if step_rows and n:
        st = np.array([s[0] for s in step_rows])
        en = np.array([s[1] for s in step_rows])
        pos = np.searchsorted(st, launch_t, side="right") - 1
        ok = (pos >= 0) & (launch_t <= en[np.maximum(pos, 0)])
        k_step[ok] = pos[ok]
    keep = np.ones(n, dtype=bool)
    if opt.step is not None and step_rows:
        want = str(opt.step)
        want_num = int(want.split("#")[-1]) if want.split("#")[-1].isdigit() else None
        idx = [i for i, s in enumerate(step_rows) if s[2] == want or s[3] == want_num]
        if not idx:
            raise ValueError(f"no step '{opt.step}' (steps: {', '.join(s[2] for s in step_rows)})")
        keep = k_step == idx[0]

    mods = _Modules(trace, links)
    att = tagging.gpu_instance >= 0
    bwd = tagging.gpu_backward
    dur_us = G["dur"]
    kernels = []
    shapes_seen = bool((R["sig"] >= 0).any())
    phase_acc: dict[tuple, dict] = {}
    grid_blocks = (np.maximum(G["grid_x"], 1) * np.maximum(G["grid_y"], 1) * np.maximum(G["grid_z"], 1))
    for k in np.flatnonzero(keep).tolist():
        kind = int(G["kind"][k])
        kname = names[G["name"][k]]
        dev = devices.get(int(G["device"][k])) or D.resolve(trace.meta, int(G["device"][k]), opt.user_peaks, opt.peak_basis)
        o = int(attr.owner[k])
        cost = attr.costs.get(o)
        fl = attr.flops[k]
        by = attr.bytes[k]
        fl = None if fl != fl else float(fl)
        by = None if by != by else float(by)
        dtype = cost.dtype if cost else None
        engine = cost.engine if cost else NONE
        pk, pk_why = peak_key(dtype, engine, kname, dev.flops)
        peak_f = dev.flops.get(pk) if pk else None
        d = float(dur_us[k])
        if kind == MEMCPY and not ("DtoD" in kname or "PtoP" in kname):
            bound, reason = "memory", f"host-device transfer over the host link ({_fmt_bytes(by)})"
            cu, mu, afl, aby, inten = None, None, None, (by / (d * 1e-6) if by and d > 0 else None), None
        else:
            occ = float(G["occupancy"][k])
            verdict = classify(d, fl, by, peak_f, dev.memory_bandwidth, f"{pk} peak" if pk else "",
                               int(grid_blocks[k]) if kind == KERNEL else 0, dev.num_sms,
                               occ if occ == occ else None)
            bound, reason = verdict.bound, verdict.reason
            cu, mu, afl, aby, inten = (verdict.compute_util, verdict.memory_util, verdict.achieved_flops_per_s,
                                       verdict.achieved_bytes_per_s, verdict.intensity)
        inst = int(tagging.gpu_instance[k])
        is_att = inst >= 0
        ph = tagging.phase_name(int(tagging.gpu_phase[k])) if is_att else None
        direction = "backward" if bwd[k] else "forward"
        # module context: backward kernels use their forward op's modules
        gp = int(links.gpu_parent[k])
        ctx_r = gp
        if gp >= 0 and links.backward_root[gp] >= 0:
            ctx_r = int(links.forward_of[links.backward_root[gp]])
        mpath = mods.path(ctx_r) if ctx_r >= 0 else ()
        op_r = int(links.gpu_op[k])
        estimated = bool((cost is not None and (cost.flops_estimated or attr.share[k] < 1.0)))
        row = {
            "id": k, "name": kname, "kind": GPU_KIND_NAMES[kind], "ts": float(G["ts"][k]), "dur_us": _r(d),
            "device": int(G["device"][k]), "stream": int(G["stream"][k]),
            "step": step_rows[k_step[k]][2] if k_step[k] >= 0 else None,
            "attention": is_att, "phase": ph, "direction": direction,
            "core": ph in P.CORE_PHASES if ph else False,
            "tag_source": SOURCES[int(tagging.gpu_source[k])] if is_att and tagging.gpu_source[k] >= 0 else None,
            "instance": inst if is_att else None,
            "scope": tagging.instances.get(inst, {}).get("name") if is_att else None,
            "op": names[R["name"][op_r]] if op_r >= 0 else None,
            "cost_op": names[R["name"][o]] if o >= 0 else None,
            "module": mpath[-1] if mpath else None,
            "module_path": "/".join(mpath) if mpath else None,
            "dtype": dtype, "flops": _sig(fl), "bytes": _sig(by), "intensity": _sig(inten),
            "achieved_flops_per_s": _sig(afl), "achieved_bytes_per_s": _sig(aby),
            "peak": pk, "peak_flops_per_s": _sig(peak_f), "compute_util": _r(cu, 4), "memory_util": _r(mu, 4),
            "bound": bound, "bound_reason": reason, "estimated": estimated,
            "cost_share": _r(attr.share[k], 4) if o >= 0 else None,
            "grid": [int(G["grid_x"][k]), int(G["grid_y"][k]), int(G["grid_z"][k])] if kind == KERNEL else None,
            "block": [int(G["block_x"][k]), int(G["block_y"][k]), int(G["block_z"][k])] if kind == KERNEL else None,
            "occupancy_pct": _r(G["occupancy"][k], 1) if kind == KERNEL else None,
        }
        if is_att and o >= 0:
            sig = int(R["sig"][o])
            if sig >= 0:
                row["shapes"] = [list(a.shape) if a.is_tensor else None for a in parse_args(trace.signatures[sig])]
            if cost is not None and cost.detail:
                row["cost_detail"] = cost.detail
        kernels.append(row)
        if is_att:
            acc = phase_acc.setdefault((ph, direction), _new_acc())
            _accumulate(acc, row)

    # totals
    sel = keep
    gpu_time = float(dur_us[sel].sum())
    busy = 0.0
    for dv in set(G["device"][sel].tolist()):
        m = sel & (G["device"] == dv)
        busy += _union_us(G["ts_ns"][m], G["ts_ns"][m] + G["dur_ns"][m])
    kern_time = float(dur_us[sel & (G["kind"] == KERNEL)].sum())
    att_rows = [k for k in kernels if k["attention"]]
    att_time = sum(k["dur_us"] or 0 for k in att_rows)

    def t_of(pred):
        return _r(sum(k["dur_us"] or 0 for k in att_rows if pred(k)))

    phases = []
    for (ph, direction), acc in sorted(phase_acc.items(), key=lambda x: (x[0][1] != "forward", P.PHASE_INDEX[x[0][0]])):
        phases.append(_finish_acc(acc, ph, direction, att_time))
    bound_time = {b: t_of(lambda k, b=b: k["bound"] == b) for b in ("memory", "compute", "latency", "unknown")}
    used_devs = set(G["device"][sel].tolist())
    notices = _notices(trace, int(sel.sum()), len(att_rows), shapes_seen, list(devices.values()), used_devs)
    steps = []
    for i, (s0, s1, sname, _, ts_us) in enumerate(step_rows):
        m = k_step == i
        steps.append({"name": sname, "ts": ts_us, "dur_us": _r((s1 - s0) / 1000.0),
                      "gpu_time_us": _r(dur_us[m].sum()), "attention_time_us": _r(dur_us[m & att].sum())})
    main_dev = devices.get(dev_ids[0]) if dev_ids else (next(iter(devices.values())) if devices else
                                                          D.resolve(trace.meta, 0, opt.user_peaks, opt.peak_basis))
    meta = trace.meta
    report = {
        "path": trace.path,
        "status": "ok",
        "trace": {
            "events": int(trace.stats.get("events", 0)), "bytes": int(trace.stats.get("bytes", 0) or 0),
            "format": "kineto-legacy" if _legacy(trace) else "kineto",
            "record_shapes": shapes_seen, "with_stack": bool(any(R["kind"] == MODULE)) or bool(meta.get("with_stack")),
            "profile_memory": bool(len(trace.memory["ts"])),
            "distributed": meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None,
            "base_time_ns": meta.get("baseTimeNanoseconds"),
        },
        "device": main_dev.to_json() if main_dev else None,
        "devices": [d.to_json() for d in devices.values()],
        "steps": steps,
        "step": opt.step,
        "gpu_time_us": _r(gpu_time),
        "gpu_busy_us": _r(busy),
        "kernel_time_us": _r(kern_time),
        "attention_time_us": _r(att_time),
        "attention_share": _r(att_time / gpu_time, 4) if gpu_time > 0 else None,
        "core_attention_time_us": t_of(lambda k: k["core"]),
        "projection_time_us": t_of(lambda k: k["phase"] in ("qkv_proj", "out_proj")),
        "forward_time_us": t_of(lambda k: k["direction"] == "forward"),
        "backward_time_us": t_of(lambda k: k["direction"] == "backward"),
        "fused_time_us": t_of(lambda k: k["phase"] == "fused_attention"),
        "unfused_core_time_us": t_of(lambda k: k["phase"] in P.UNFUSED_CORE_PHASES),
        "attention_kernels": len(att_rows),
        "instances": len({k["instance"] for k in att_rows}),
        "bound_time_us": bound_time,
        "phases": phases,
        "kernels": kernels,
        "notices": notices,
        "warnings": list(trace.warnings),
        "thresholds": {"roof_reached": ROOF_REACHED},
    }
    return report


def _legacy(trace: Trace) -> bool:
    """PyTorch 1.9-era traces: capitalised categories (Operator, Kernel, Runtime)."""
    return "computeProperties" in trace.meta or bool(
        trace.stats.get("categories", set()) & {"Operator", "Kernel", "Runtime"})


def _fmt_bytes(b) -> str:
    if b is None:
        return "unknown size"
    for u in ("B", "KB", "MB", "GB", "TB"):
        if b < 1000:
            return f"{b:.3g} {u}"
        b /= 1000
    return f"{b:.3g} PB"


def _new_acc() -> dict:
    return {"time": 0.0, "n": 0, "flops": 0.0, "bytes": 0.0, "known_time": 0.0, "cu_t": 0.0, "mu_t": 0.0,
            "bound": {}, "estimated": False, "names": {}, "instances": set(), "fl_unknown": False}


def _accumulate(acc: dict, k: dict) -> None:
    d = k["dur_us"] or 0.0
    acc["time"] += d
    acc["n"] += 1
    acc["bound"][k["bound"]] = acc["bound"].get(k["bound"], 0.0) + d
    acc["instances"].add(k["instance"])
    if k["flops"] is not None and k["bytes"] is not None and k["memory_util"] is not None:
        acc["flops"] += k["flops"]
        acc["bytes"] += k["bytes"]
        acc["known_time"] += d
        acc["cu_t"] += (k["compute_util"] or 0.0) * d
        acc["mu_t"] += k["memory_util"] * d
    acc["estimated"] |= bool(k["estimated"])
    acc["names"][k["name"]] = acc["names"].get(k["name"], 0.0) + d


def _finish_acc(acc: dict, phase: str, direction: str, att_time: float) -> dict:
    kt = acc["known_time"]
    cu = acc["cu_t"] / kt if kt > 0 else None
    mu = acc["mu_t"] / kt if kt > 0 else None
    if cu is None:
        bound = "unknown"
    elif max(cu, mu) >= ROOF_REACHED:
        bound = "compute" if cu >= mu else "memory"
    else:
        bound = "latency"
    sec = kt * 1e-6
    top = sorted(acc["names"].items(), key=lambda x: -x[1])[:5]
    return {
        "phase": phase, "label": P.PHASE_LABELS[phase], "direction": direction, "core": phase in P.CORE_PHASES,
        "time_us": _r(acc["time"]), "share": _r(acc["time"] / att_time, 4) if att_time > 0 else None,
        "kernels": acc["n"], "instances": len(acc["instances"]),
        "flops": _sig(acc["flops"]) if kt > 0 else None, "bytes": _sig(acc["bytes"]) if kt > 0 else None,
        "intensity": _sig(acc["flops"] / acc["bytes"]) if kt > 0 and acc["bytes"] > 0 else None,
        "achieved_flops_per_s": _sig(acc["flops"] / sec) if sec > 0 else None,
        "achieved_bytes_per_s": _sig(acc["bytes"] / sec) if sec > 0 else None,
        "compute_util": _r(cu, 4), "memory_util": _r(mu, 4), "bound": bound,
        "bound_time_us": {b: _r(t) for b, t in acc["bound"].items()},
        "cost_coverage": _r(kt / acc["time"], 4) if acc["time"] > 0 else None,
        "estimated": acc["estimated"],
        "top_kernels": [{"name": nm, "time_us": _r(t)} for nm, t in top],
    }


def error_entry(path: str, message: str) -> dict:
    return {"path": path, "status": "error", "error": message}


def envelope(traces: list[dict]) -> dict:
    return {"schema": SCHEMA_VERSION, "tool": {"name": "tb-attention", "version": __version__}, "traces": traces}
