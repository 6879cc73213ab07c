"""Build the JSON report of one trace: the contract shared by the CLI and the dashboard.

The schema is documented in docs/report-schema.md (and summarised in the README). Every GPU
activity of the trace appears exactly once in ``kernels`` (``kind`` says kernel, memcpy or
memset); numbers that are estimates say so (``estimated``), numbers we cannot know are null.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterator, Optional

import msgspec
import numpy as np

from . import __version__, progress
from .attention import patterns as P
from .options import Options
from .attention.tagger import SOURCES, Tagging, call_numbers, tag
from .roofline import devices as D
from .roofline.attribute import Attribution, attribute
from .roofline.classify import LOW_OCCUPANCY_PCT, ROOF_REACHED, SHORT_KERNEL_US, peak_key
from .roofline.cost import MATRIX, NONE
from .roofline.measured import apply as _measure
from .trace.correlate import Links, link, take_or
from .trace.records import ANNOTATION, GPU_KIND_NAMES, KERNEL, MEMCPY, MODULE, Trace
from .trace.shapes import parse_args
from .table import Coded, KernelTable

SCHEMA_VERSION = 1
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


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
    progress.stage("analysing")
    links = link(trace)
    tagging = tag(trace, links, opt.module_pattern, opt.annotation_pattern)
    attr = attribute(trace, links)
    rep = build_report(trace, links, tagging, attr, opt)
    progress.stage("memory")
    rep["memory"] = _memory_block(trace, links, tagging, attr, rep)
    _sources(rep, trace, links)                   # sources.py: the user's source line per attention kernel
    progress.stage("advice")
    # advice.py: findings, and the attention backends that compare/check name
    rep["advice"], rep["attention_backends"] = _advice(rep, trace, links, tagging)
    return rep


def _sources(rep, trace, links) -> None:
    """``source`` on attention kernel rows and calls, ``sources`` on phase rows; a failure never loses the report."""
    from .sources import attach_sources
    try:
        attach_sources(rep, trace, links)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"source lines failed: {type(e).__name__}: {e}")


def _advice(rep, trace, links, tagging) -> tuple:
    """``advice`` and ``attention_backends`` (advice.py): findings from this run's numbers and its
    attention implementations; a failure there never loses the report."""
    from .advice import advice_and_backends
    try:
        return advice_and_backends(rep, trace, links, tagging)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"advice failed: {type(e).__name__}: {e}")
        return [], []


def _memory_block(trace, links, tagging, attr, rep) -> dict:
    """The ``memory`` block (memory/); a failure there never loses the rest of the report."""
    from .memory import memory_report
    try:
        return memory_report(trace, links, tagging, attr, rep)
    except Exception as e:  # noqa: BLE001 - reported in the block and in warnings
        rep["warnings"].append(f"memory analysis failed: {type(e).__name__}: {e}")
        return {"recorded": bool(len(trace.memory["ts"])), "error": f"{type(e).__name__}: {e}"}


_BOUNDS = ("memory", "compute", "latency", "unknown")


def _sig_round(x: np.ndarray, digits: int = 4) -> np.ndarray:
    """Round to ``digits`` significant digits (vectorised; NaN stays NaN)."""
    out = np.array(x, dtype=np.float64, copy=True)
    ok = np.isfinite(out) & (out != 0)
    if ok.any():
        e = np.floor(np.log10(np.abs(out[ok])))
        scale = 10.0 ** (digits - 1 - e)
        out[ok] = np.round(out[ok] * scale) / scale
    out[~np.isfinite(out)] = np.nan
    return out


def _kernel_peaks(trace: Trace, devices: dict, attr: Attribution, opt: Options):
    """Per kernel: peak key, peak FLOP/s, memory bandwidth, SM count, L2 bytes (by unique combo)."""
    G = trace.gpu
    n = len(G["kind"])
    names = trace.strings
    owner = attr.owner
    combos: dict = {}
    code = np.empty(n, dtype=np.int64)
    for k, (o, nid, dev) in enumerate(zip(owner.tolist(), G["name"].tolist(), G["device"].tolist())):
        c = attr.costs.get(o)
        key = (c.dtype if c else None, c.engine if c else NONE, c.fp32_on_tensor_cores if c else False, nid, dev)
        j = combos.get(key)
        if j is None:
            j = combos[key] = len(combos)
        code[k] = j
    pk_keys, pk_vals, bws, sms, l2s = [], [], [], [], []
    for (dtype, engine, tc32, nid, dev) in combos:
        d = devices.get(dev) or D.resolve(trace.meta, dev, opt.user_peaks, opt.peak_basis)
        devices.setdefault(dev, d)
        pk, _ = peak_key(dtype, engine, names[nid], d.flops, tc32)
        pk_keys.append(pk)
        pk_vals.append(d.flops.get(pk, np.nan) if pk else np.nan)
        bws.append(d.memory_bandwidth if d.memory_bandwidth else np.nan)
        sms.append(d.num_sms or 0)
        l2s.append(float(d.l2_bytes or 0))

    def col(vals, dtype):
        return np.asarray(vals, dtype=dtype)[code] if n else np.zeros(0, dtype)
    return Coded(code, pk_keys), col(pk_vals, float), col(bws, float), col(sms, np.int64), col(l2s, float)


def dram_traffic(nbytes: np.ndarray, reads: np.ndarray, l2: np.ndarray) -> np.ndarray:
    """Estimated DRAM bytes of each kernel: everything read, and what is written beyond the room
    the reads leave in the last-level cache (a write-back cache keeps smaller outputs until
    later). Checked against Nsight Compute's DRAM bytes in validation/."""
    rd = np.where(np.isnan(reads), nbytes, reads)
    wr = np.maximum(nbytes - rd, 0.0)
    room = np.maximum(l2 - rd, 0.0)
    return rd + np.maximum(wr - room, 0.0)


def build_report(trace: Trace, links: Links, tagging: Tagging, attr: Attribution, opt: Options) -> dict:
    G, R = trace.gpu, trace.ranges
    names = trace.strings
    n = len(G["kind"])

    # devices used and their peaks
    dev_ids = sorted(set(G["device"].tolist())) if n else []
    props_ids = [p.get("id") for p in D.device_properties(trace.meta) if isinstance(p.get("id"), int)]
    devices = {i: D.resolve(trace.meta, i, opt.user_peaks, opt.peak_basis) for i in sorted(set(dev_ids) | set(props_ids))}

    # steps: the ProfilerStep whose CPU range holds the launch (or the kernel, without a launch)
    step_rows = []
    for r in np.flatnonzero(R["kind"] == ANNOTATION).tolist():
        m = _STEP.match(names[R["name"][r]])
        if m:
            step_rows.append((int(R["ts_ns"][r]), int(R["ts_ns"][r] + R["dur_ns"][r]), names[R["name"][r]],
                              int(m.group(1)), float(R["ts"][r])))
    step_rows.sort()
    if len(R["ts_ns"]):
        launch_t = np.where(links.gpu_launch >= 0, R["ts_ns"][np.maximum(links.gpu_launch, 0)], G["ts_ns"])
    else:
        launch_t = G["ts_ns"]
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

    # -- per-kernel numbers, vectorised ------------------------------------------------------
    kind = G["kind"].astype(np.int64)
    dur = G["dur"].astype(np.float64)
    fl, by = attr.flops, attr.bytes
    peak_key_col, peak_f, bw, sms, l2 = _kernel_peaks(trace, devices, attr, opt)
    dram = dram_traffic(by, attr.reads, l2)
    sec = dur * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        afl = np.where(sec > 0, fl / sec, np.nan)
        aby = np.where(sec > 0, dram / sec, np.nan)
        inten = np.where(by > 0, fl / by, np.nan)
        mu = aby / bw
        cu = np.where(fl > 0, afl / peak_f, np.where(np.isnan(fl), np.nan, 0.0))
    cu = np.where(np.isnan(cu) & ~np.isnan(fl) & ~np.isnan(mu), 0.0, cu)
    known = ~np.isnan(fl) & ~np.isnan(by) & ~np.isnan(mu) & (dur > 0)
    host_copy = np.zeros(n, dtype=bool)
    mc = np.flatnonzero(kind == MEMCPY)
    for k in mc.tolist():
        nm = names[G["name"][k]]
        if not ("DtoD" in nm or "PtoP" in nm):
            host_copy[k] = True
    best = np.fmax(cu, mu)
    bound = np.full(n, 3, dtype=np.int8)                                  # unknown
    reached = known & (best >= ROOF_REACHED)
    bound[reached & (cu >= mu)] = 1                                      # compute
    bound[reached & (cu < mu)] = 0                                       # memory
    bound[known & ~reached] = 2                                          # latency
    # Too short to reach steady state on any roof, whatever its estimated traffic.
    bound[(dur > 0) & (dur < SHORT_KERNEL_US) & (kind == KERNEL)] = 2
    bound[host_copy] = 0
    cu[host_copy] = np.nan
    mu[host_copy] = np.nan
    blocks = np.maximum(G["grid_x"], 1) * np.maximum(G["grid_y"], 1) * np.maximum(G["grid_z"], 1)
    occ = G["occupancy"]
    reasons = _reasons(n, bound, host_copy, peak_key_col, cu, mu, afl, aby, dur, kind, sms, blocks,
                       G["occupancy"], by, bw)

    # -- tagging, context -------------------------------------------------------------------
    inst = tagging.gpu_instance
    # Attention calls are numbered 0, 1, 2... in the order their first kernel ran on the GPU:
    # stable ids that do not depend on how the trace was read.
    call = np.full(n, -1, dtype=np.int64)
    att_idx = np.flatnonzero(inst >= 0)
    if len(att_idx):
        numbers = call_numbers(trace, tagging)
        ids, inv = np.unique(inst[att_idx], return_inverse=True)
        call[att_idx] = np.array([numbers[i] for i in ids.tolist()], dtype=np.int64)[inv]
    att = inst >= 0
    ph_code = np.where(att, tagging.gpu_phase, -1).astype(np.int64)
    phase_vocab = list(P.PHASES) + [None]
    phase_col = Coded(np.where(ph_code >= 0, ph_code, len(P.PHASES)), phase_vocab)
    core_set = np.array([p in P.CORE_PHASES for p in P.PHASES] + [False])
    core = core_set[phase_col.codes]
    bwd = tagging.gpu_backward.astype(bool)
    src_vocab = list(SOURCES) + [None]
    src = np.where(att & (tagging.gpu_source >= 0), tagging.gpu_source, len(SOURCES)).astype(np.int32)
    mods = _Modules(trace, links)
    gp = links.gpu_parent
    ctx_r = gp.copy()
    has = gp >= 0
    br = take_or(links.backward_root, gp)
    inb = br >= 0
    ctx_r[inb] = links.forward_of[br[inb]]
    # one module path per distinct context range, then spread to the kernels
    ctx_u, ctx_inv = np.unique(ctx_r, return_inverse=True)
    mod_vocab: dict = {None: 0}
    path_vocab: dict = {None: 0}
    u_mod, u_path = np.zeros(len(ctx_u), np.int32), np.zeros(len(ctx_u), np.int32)
    for j, r in enumerate(ctx_u.tolist()):
        t = mods.path(r) if r >= 0 else ()
        u_mod[j] = mod_vocab.setdefault(t[-1] if t else None, len(mod_vocab))
        u_path[j] = path_vocab.setdefault("/".join(t) if t else None, len(path_vocab))
    mod_codes, path_codes = u_mod[ctx_inv], u_path[ctx_inv]
    op_r = links.gpu_op
    rname = R["name"]
    opname_codes = np.where(op_r >= 0, rname[np.maximum(op_r, 0)] if len(rname) else 0, -1)
    costop_codes = np.where(attr.owner >= 0, rname[np.maximum(attr.owner, 0)] if len(rname) else 0, -1)
    str_vocab = names + [None]
    none_i = len(names)
    own_u, own_inv = np.unique(attr.owner, return_inverse=True)
    dtype_vocab: dict = {None: 0}
    u_dtype = np.array([dtype_vocab.setdefault(c.dtype if c else None, len(dtype_vocab))
                        for c in map(attr.costs.get, own_u.tolist())], dtype=np.int32)
    dtype_col = Coded(u_dtype[own_inv] if n else np.zeros(0, np.int32), list(dtype_vocab))
    scope_vocab: dict = {None: 0}
    scope_codes = np.zeros(n, np.int32)
    if att.any():
        inst_u, inst_inv = np.unique(inst[att], return_inverse=True)
        scope_codes[att] = np.array([scope_vocab.setdefault(tagging.instances.get(i, {}).get("name"), len(scope_vocab))
                                     for i in inst_u.tolist()], dtype=np.int32)[inst_inv]
    est_owners = [o for o, c in attr.costs.items() if c.flops_estimated]
    estimated = np.isin(attr.owner, est_owners) if est_owners else np.zeros(n, dtype=bool)
    estimated |= (attr.owner >= 0) & (attr.share < 1.0)
    step_vocab = [s[2] for s in step_rows] + [None]
    is_kernel = kind == KERNEL
    grid = _dims_column(G["grid_x"], G["grid_y"], G["grid_z"], is_kernel)
    block = _dims_column(G["block_x"], G["block_y"], G["block_z"], is_kernel)
    # hardware counters (CUPTI ranges in the trace, an ncu export beside it) replace the model
    meas = _measure(trace, links, launch_t, k_step, [s[2] for s in step_rows], dur, cu, mu, dram, aby, bound,
                    reasons, estimated, peak_key_col.codes, peak_key_col.vocab, peak_f, bw, sms, blocks, devices)
    columns = {
        "id": np.arange(n, dtype=np.int64),
        "name": Coded(G["name"], names),
        "kind": Coded(kind, GPU_KIND_NAMES),
        "ts": G["ts"].astype(np.float64),
        "dur_us": np.round(dur, 3),
        "device": G["device"].astype(np.int64),
        "stream": G["stream"].astype(np.int64),
        "step": Coded(np.where(k_step >= 0, k_step, len(step_rows)), step_vocab),
        "attention": att,
        "phase": phase_col,
        "direction": Coded(bwd.astype(np.int32), ["forward", "backward"]),
        "core": core,
        "tag_source": Coded(src, src_vocab),
        "instance": np.where(att, call, np.nan).astype(np.float64),
        "scope": Coded(scope_codes, list(scope_vocab)),
        "op": Coded(np.where(opname_codes >= 0, opname_codes, none_i), str_vocab),
        "cost_op": Coded(np.where(costop_codes >= 0, costop_codes, none_i), str_vocab),
        "module": Coded(mod_codes, list(mod_vocab)),
        "module_path": Coded(path_codes, list(path_vocab)),
        "dtype": dtype_col,
        "flops": _sig_round(fl),
        "bytes": _sig_round(by),
        "dram_bytes": _sig_round(dram),
        "intensity": _sig_round(inten),
        "achieved_flops_per_s": _sig_round(afl),
        "achieved_bytes_per_s": _sig_round(aby),
        "peak": peak_key_col,
        "peak_flops_per_s": _sig_round(peak_f),
        "compute_util": np.round(cu, 4),
        "memory_util": np.round(mu, 4),
        "bound": Coded(bound, _BOUNDS),
        "bound_reason": reasons,
        "estimated": estimated,
        "cost_share": np.where(attr.owner >= 0, np.round(attr.share, 4), np.nan),
        "grid": grid,
        "block": block,
        "occupancy_pct": np.where(is_kernel, np.round(occ, 1), np.nan),
        "measured": meas.column if meas.column is not None else [None] * n,
    }
    # instance ids are ints in JSON
    extras: dict[int, dict] = {}
    sig_shapes: dict[int, list] = {}
    for k in np.flatnonzero(att & (attr.owner >= 0)).tolist():
        o = int(attr.owner[k])
        e = {}
        sig = int(R["sig"][o])
        if sig >= 0:
            sh = sig_shapes.get(sig)
            if sh is None:
                sh = sig_shapes[sig] = [list(a.shape) if a.is_tensor else None
                                        for a in parse_args(trace.signatures[sig])]
            e["shapes"] = sh
        c = attr.costs.get(o)
        if c is not None and c.detail:
            e["cost_detail"] = c.detail
        if e:
            extras[k] = e
    table = KernelTable(columns, extras)
    if not keep.all():
        table = table.take(np.flatnonzero(keep))
    sel = keep

    # -- aggregates --------------------------------------------------------------------------
    gpu_time = float(dur[sel].sum())
    busy = 0.0
    for dv in set(G["device"][sel].tolist()):
        m = sel & (G["device"] == dv)
        busy += _union_us(G["ts_ns"][m], G["ts_ns"][m] + G["dur_ns"][m])
    kern_time = float(dur[sel & is_kernel].sum())
    a_sel = att & sel
    att_time = float(dur[a_sel].sum())

    def t_of(mask):
        return _r(dur[a_sel & mask].sum())

    phase_names = np.array(list(P.PHASES) + [""], dtype=object)
    is_proj = np.isin(ph_code, [P.PHASE_INDEX["qkv_proj"], P.PHASE_INDEX["out_proj"]])
    unfused = np.isin(ph_code, [P.PHASE_INDEX[p] for p in P.UNFUSED_CORE_PHASES])
    phases = []
    for direction, dmask in (("forward", ~bwd), ("backward", bwd)):
        for pi, ph in enumerate(P.PHASES):
            m = a_sel & dmask & (ph_code == pi)
            if not m.any():
                continue
            phases.append(_phase_row(ph, direction, m, dur, fl, by, cu, mu, known, bound, inst,
                                     G["name"], names, estimated, att_time))
    bound_time = {b: t_of(bound == i) for i, b in enumerate(_BOUNDS)}
    used_devs = set(G["device"][sel].tolist())
    shapes_seen = bool((R["sig"] >= 0).any())
    notices = _notices(trace, int(sel.sum()), int(a_sel.sum()), shapes_seen, list(devices.values()), used_devs)
    steps = []
    for i, (s0, s1, sname, _, ts_us) in enumerate(step_rows):
        m = k_step == i
        steps.append({"name": sname, "ts": ts_us, "dur_us": _r((s1 - s0) / 1000.0),
                      "gpu_time_us": _r(dur[m].sum()), "attention_time_us": _r(dur[m & att].sum())})
    main_dev = devices.get(dev_ids[0]) if dev_ids else (next(iter(devices.values())) if devices else
                                                          D.resolve(trace.meta, 0, opt.user_peaks, opt.peak_basis))
    meta = trace.meta
    return {
        "path": trace.path,
        "status": "ok",
        "trace": {
            "events": int(trace.stats.get("events", 0)), "bytes": int(trace.stats.get("bytes", 0) or 0),
            "truncated": bool(trace.stats.get("truncated", False)),
            "format": "kineto-legacy" if _legacy(trace) else "kineto",
            "record_shapes": shapes_seen, "with_stack": bool(any(R["kind"] == MODULE)) or bool(meta.get("with_stack")),
            "profile_memory": bool(len(trace.memory["ts"])),
            "distributed": meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None,
            "base_time_ns": meta.get("baseTimeNanoseconds") if isinstance(meta.get("baseTimeNanoseconds"), int) else None,
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
        "core_attention_time_us": t_of(core),
        "projection_time_us": t_of(is_proj),
        "forward_time_us": t_of(~bwd),
        "backward_time_us": t_of(bwd),
        "fused_time_us": t_of(ph_code == P.PHASE_INDEX["fused_attention"]),
        "unfused_core_time_us": t_of(unfused),
        "attention_kernels": int(a_sel.sum()),
        "instances": int(len(np.unique(inst[a_sel]))),
        "bound_time_us": bound_time,
        "phases": phases,
        "kernels": table,
        "notices": notices + meas.notices,
        "warnings": list(trace.warnings) + meas.warnings,
        "thresholds": {"roof_reached": ROOF_REACHED, "short_kernel_us": SHORT_KERNEL_US,
                       "low_occupancy_pct": LOW_OCCUPANCY_PCT},
        "measurements": meas.block,
    }


def _dims_column(x: np.ndarray, y: np.ndarray, z: np.ndarray, is_kernel: np.ndarray) -> Coded:
    """``[x, y, z]`` per kernel (None for copies and fills), coded: a trace has few distinct
    launch shapes, and one list per kernel is most of the cost of this column."""
    if not len(x):
        return Coded(np.zeros(0, np.int32), [None])
    x, y, z = (np.asarray(a, dtype=np.int64) for a in (x, y, z))
    if x.min() >= 0 and x.max() < 1 << 31 and y.min() >= 0 and y.max() < 1 << 16 and z.min() >= 0 and z.max() < 1 << 16:
        # CUDA's limits (x < 2^31, y and z < 2^16): one int64 per launch shape sorts much faster
        uniq, inv = np.unique((x << 32) | (y << 16) | z, return_inverse=True)
        vocab = [[int(u >> 32), int((u >> 16) & 0xFFFF), int(u & 0xFFFF)] for u in uniq.tolist()] + [None]
    else:
        uniq, inv = np.unique(np.stack([x, y, z], axis=1), axis=0, return_inverse=True)
        vocab = [list(t) for t in uniq.tolist()] + [None]
    return Coded(np.where(is_kernel, inv.reshape(-1), len(uniq)), vocab)


def _reasons(n, bound, host_copy, peak_key_col, cu, mu, afl, aby, dur, kind, sms, blocks, occ, by, bw) -> list:
    """The evidence behind each kernel's bound, in words (plain lists: numpy scalars are slow)."""
    pk_vocab = peak_key_col.vocab
    arrays = (bound, host_copy, peak_key_col.codes, cu, mu, afl, aby, dur, kind, sms, blocks, occ, by, bw)
    cols = [x.tolist() for x in arrays]
    # The same kernel recurs with the same numbers in every layer and step: word each distinct
    # one once. NaN never equals itself, so the memo's key has -inf in its place.
    keys = [np.where(np.isnan(x), -np.inf, x).tolist() if x.dtype.kind == "f" else c for x, c in zip(arrays, cols)]
    out = []
    memo: dict = {}
    for key, vals in zip(zip(*keys), zip(*cols)):
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _reason(pk_vocab, *vals)
        out.append(hit)
    return out


def _reason(pk_vocab, b, hc, pkc, c, m, fl_s, by_s, d, kd, sm, bl, o, nb, w) -> str:
    if hc:
        return f"host-device transfer over the host link ({_fmt_bytes(nb if nb == nb else None)})"
    pk = pk_vocab[pkc]
    label = f"{pk} peak" if pk else "compute peak"
    if b == 1:
        return f"reaches {c * 100:.0f}% of the {label} ({_rate(fl_s, 'FLOP/s')})"
    if b == 0:
        return f"reaches {m * 100:.0f}% of memory bandwidth ({_rate(by_s, 'B/s')} of estimated DRAM traffic)"
    if b == 2:
        why = []
        if d < SHORT_KERNEL_US:
            why.append(f"only {d:.1f} µs: launch overhead dominates")
        if kd == KERNEL and sm and 0 < bl < sm:
            why.append(f"grid of {bl} blocks < {sm} SMs")
        if o == o and 0 < o < LOW_OCCUPANCY_PCT:
            why.append(f"estimated occupancy {o:.0f}%")
        if not why:
            why.append("neither roof reached: stalls, poor access pattern or too little parallel work")
        if m == m:
            return "; ".join(why) + f" ({m * 100:.0f}% of bandwidth, {(c if c == c else 0.0) * 100:.0f}% of {label})"
        return "; ".join(why) + " (FLOPs and bytes unknown)"
    if d <= 0:
        return "zero duration"
    if w != w:
        return "unknown GPU: give its peaks with --peaks"
    return "FLOPs or bytes unknown (no recorded shapes, or an op without a cost formula)"


def _phase_row(phase, direction, m, dur, fl, by, cu, mu, known, bound, inst, name_ids, names, estimated, att_time):
    t = float(dur[m].sum())
    mk = m & known
    kt = float(dur[mk].sum())
    cu_m = float((np.nan_to_num(cu[mk]) * dur[mk]).sum() / kt) if kt > 0 else None
    mu_m = float((mu[mk] * dur[mk]).sum() / kt) if kt > 0 else None
    if cu_m is None:
        b = "unknown"
    elif max(cu_m, mu_m) >= ROOF_REACHED:
        b = "compute" if cu_m >= mu_m else "memory"
    else:
        b = "latency"
    f_sum = float(np.nansum(fl[mk])) if kt > 0 else None
    b_sum = float(np.nansum(by[mk])) if kt > 0 else None
    sec = kt * 1e-6
    by_name: dict = {}
    for nid, d in zip(name_ids[m].tolist(), dur[m].tolist()):
        by_name[nid] = by_name.get(nid, 0.0) + d
    top = sorted(by_name.items(), key=lambda x: -x[1])[:5]
    btime = {}
    for i, bn in enumerate(_BOUNDS):
        v = float(dur[m & (bound == i)].sum())
        if v > 0:
            btime[bn] = _r(v)
    return {
        "phase": phase, "label": P.PHASE_LABELS[phase], "direction": direction, "core": phase in P.CORE_PHASES,
        "time_us": _r(t), "share": _r(t / att_time, 4) if att_time > 0 else None,
        "kernels": int(m.sum()), "instances": int(len(np.unique(inst[m]))),
        "flops": _sig(f_sum), "bytes": _sig(b_sum),
        "intensity": _sig(f_sum / b_sum) if kt > 0 and b_sum else None,
        "achieved_flops_per_s": _sig(f_sum / sec) if sec > 0 else None,
        "achieved_bytes_per_s": _sig(b_sum / sec) if sec > 0 else None,
        "compute_util": _r(cu_m, 4), "memory_util": _r(mu_m, 4), "bound": b, "bound_time_us": btime,
        "cost_coverage": _r(kt / t, 4) if t > 0 else None,
        "estimated": bool(estimated[m].any()),
        "top_kernels": [{"name": names[nid], "time_us": _r(tt)} for nid, tt in top],
    }


def _rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


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


def error_entry(path: str, message: str) -> dict:
    return {"path": path, "status": "error", "error": message}


def envelope(traces: list[dict]) -> dict:
    return {"schema": SCHEMA_VERSION, "tool": {"name": "tb-attention", "version": __version__}, "traces": traces}


# JSON writing lives in jsonout.py (no numpy import: a cache hit prints without it).
from .jsonout import iter_json, iter_trace_body, to_json  # noqa: E402,F401
