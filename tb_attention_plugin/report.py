"""Build the JSON report of one trace: the contract shared by the CLI and the dashboard.

The schema is documented in docs/report-schema.md (and summarised in the README). Every GPU
activity of the trace appears exactly once in ``kernels`` (``kind`` says kernel, memcpy or
memset); numbers that are estimates say so (``estimated``), numbers we cannot know are null.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import __version__, progress
from .attention import graphs, patterns as P
from .attention.tagger import SOURCES, Tagging, call_numbers, tag
from .heap import return_freed_memory
from .options import Options
from .roofline import devices as D, frame as F, measured as M
from .roofline.attribute import Attribution, attribute
from .roofline.classify import (
    BOUND_UNKNOWN,
    BOUNDS,
    CAUSES,
    LOW_OCCUPANCY_PCT,
    ROOF_REACHED,
    SHORT_KERNEL_US,
    TINY_GRID_SM_FRACTION,
    classify,
    decide,
    raise_roofs,
)
from .roofline.frame import KernelFrame
from .roofline.measured import Result
from .roofline.roles import ROLE_NAMES
from .table import Coded, KernelTable
from .trace.arrays import unique_ints
from .trace.busy import busy_times
from .trace.correlate import Links, link, nearest_marked_ancestor
from .trace.records import ANNOTATION, GPU_KIND_NAMES, KERNEL, MODULE, Trace
from .trace.shapes import parse_args
from .trace.sidecars import Sidecars, find as find_sidecars

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


class _Modules:
    """Module path of a CPU range (nn.Module names outermost first), memoised. A range's path
    is its innermost enclosing-or-own module's, so only module ranges are walked (one
    vectorised pass finds each range's innermost module)."""

    def __init__(self, trace: Trace, links: Links):
        self.t, self.L = trace, links
        self.memo: dict[int, tuple] = {}
        self.kind = trace.ranges["kind"]
        self.name = trace.ranges["name"]
        is_mod = self.kind == MODULE
        self.up = nearest_marked_ancestor(links.parent, is_mod)  # innermost module strictly above
        self.own = np.where(is_mod, np.arange(len(is_mod)), self.up)  # ... or the range itself

    def path(self, r: int) -> tuple:
        if r < 0:
            return ()
        m = int(self.own[r])
        if m < 0:
            return ()
        hit = self.memo.get(m)
        if hit is not None:
            return hit
        chain = []
        x = m
        while x >= 0 and x not in self.memo:
            chain.append(x)
            x = int(self.up[x])
        base = self.memo.get(x, ()) if x >= 0 else ()
        for y in reversed(chain):
            nm = self.t.strings[self.name[y]]
            base = base + (nm.split(":", 1)[1].strip() if ":" in nm else nm,)
            self.memo[y] = base
        return self.memo[m]


def _notices(
    trace: Trace, n_kernels: int, n_attention: int, shapes_seen: bool, devices: list[D.DevicePeaks], used_devices: set
) -> list[dict]:
    out = []
    meta = trace.meta
    if n_kernels == 0:
        msg = "no GPU kernels in this trace" + (" (a CPU-only profile)" if not D.device_properties(meta) else "")
        out.append(
            {
                "code": "no_gpu_kernels",
                "message": msg,
                "fix": "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU run",
            }
        )
    elif n_attention == 0:
        out.append(
            {
                "code": "no_attention",
                "message": "no attention found among the GPU kernels",
                "fix": (
                    "profile with with_stack=True so nn.Module scopes are recorded, wrap attention in "
                    "torch.profiler.record_function('attention'), or pass --module-pattern matching "
                    "your attention module's class name"
                ),
            }
        )
    # a file that says it recorded shapes (or stacks) and lacks them got its kernels elsewhere
    # (CUDA-graph replays: see the graph_replay notice); advising the flag again would be wrong
    if n_kernels and not shapes_seen and not meta.get("record_shapes"):
        out.append(
            {
                "code": "no_shapes",
                "message": "no input shapes recorded: FLOPs and bytes are unknown",
                "fix": "profile with record_shapes=True",
            }
        )
    if n_kernels and not any(trace.ranges["kind"] == MODULE) and n_attention and not meta.get("with_stack"):
        out.append(
            {
                "code": "no_stack",
                "message": "no nn.Module scopes recorded: projections and module "
                "context come only from op and annotation names",
                "fix": "profile with with_stack=True to attribute projections to attention modules",
            }
        )
    unknown: dict[str, list[int]] = {}
    for d in devices:
        if d.id in used_devices and not d.known:
            unknown.setdefault(d.name, []).append(d.id)
    for name, ids in unknown.items():  # once per kind of device, not once per rank or GCD
        which = f"device {ids[0]}" if len(ids) == 1 else f"devices {', '.join(map(str, ids))}"
        out.append(
            {
                "code": "unknown_gpu",
                "message": f"unknown GPU '{name}' ({which}): neither its name nor its recorded properties "
                "are in the peak table, so utilisation and bound cannot be computed",
                "fix": "give its peaks: --peaks bf16=<TFLOP/s>,fp32=<TFLOP/s>,memory=<TB/s> or a JSON file "
                "(tb-attention devices lists the built-in ones)",
            }
        )
    return out


def analyze_trace(
    trace: Trace,
    options: Optional[Options] = None,
    reference: Optional[Trace] = None,
    reference_path: Optional[str] = None,
    sidecars: Optional[Sidecars] = None,
    reference_notes: Sequence[str] = (),
) -> dict:
    """The report dict of one loaded trace. ``reference``: a trace of the same step run without
    CUDA graphs (or of the graph capture), whose CPU context is given to replayed kernels.
    ``sidecars``: the files beside the trace (trace/sidecars.py), listed here when not given.
    ``reference_notes``: what the search for a reference beside the trace read and did not take
    (analyze.find_reference), for the graph_replay notice.
    The trace is consumed: the columns no later stage reads are released as the analysis goes
    (``_LAST_READS``), so a caller that needs the whole trace afterwards loads it again."""
    opt = options or Options()
    progress.stage("analysing")
    if sidecars is None and trace.path:
        sidecars = find_sidecars(trace.path)
    links = link(trace)
    trace, links, graph = graphs.attach(trace, links, reference, reference_path, reference_notes)
    _release_before(trace, "tag")  # the flows, External ids, sequence numbers: read by the linking alone
    tagging = tag(trace, links, opt.module_pattern, opt.annotation_pattern)
    graphs.apply(trace, links, tagging, graph)
    attr = attribute(trace, links)
    rep = build_report(trace, links, tagging, attr, opt, sidecars.ncu if sidecars is not None else None)
    progress.stage("memory")
    _release_before(trace, "memory")
    rep["memory"] = _memory_block(trace, links, tagging, attr, rep)
    _release_before(trace, "sources")
    _sources(rep, trace, links)  # sources.py: the user's source line per attention kernel
    # model.py: sites, flops_ledger, boundary (before advice, whose rules may read them)
    _release_before(trace, "model")
    rep.update(_model(rep, trace, links, attr))
    del attr  # the costs of every op (~5 MB on a 250 MB trace): nothing after the model reads them
    _release_before(trace, "replay")
    rep["replay"] = _replay_block(rep, trace, links, tagging, sidecars)  # replay/: the calls, measured backends
    del tagging  # the per-range tags (~6 MB on a 250 MB trace): the advice reads the report's columns
    _release_before(trace, "advice")
    progress.stage("advice")
    # advice/: findings, what each rule checked, and the attention backends that compare/check name
    rep["advice"], rep["advice_checks"], rep["attention_backends"] = _advice(rep, trace, links)
    if isinstance(rep.get("memory"), dict):
        rep["memory"].pop("_kernel_ids", None)  # the flags' GPU activities: for the advice only
    _top_findings(rep)
    return rep


# The trace's columns (trace/records.py's tables) that each stage from tagging on still reads,
# where it is the last stage to read them; what the stages before tagging read and nothing later
# does (the flows, the External ids, the ranges' correlation ids, sequence numbers) is in none.
# Found by logging every column read over the repository's traces and the public corpus;
# tests/test_release.py checks that every report is the same with the releases as without.
# Before a stage, analyze_trace releases what neither it nor a later stage reads: the advice,
# where a cold analysis peaks, then runs with a third of the trace (~27 of 40 MB released on a
# 263 MB trace).
_LAST_READS: tuple[tuple[str, dict[str, str]], ...] = (
    ("tag", {}),  # tagging, attribution: nothing that a later stage does not read as well
    # the Nsight Compute join matches kernels by correlation id
    ("build_report", {"gpu": "block_x block_y block_z corr grid_x grid_y grid_z occupancy registers shared_memory"}),
    (
        "memory",
        {
            "memory": "addr bytes device_id device_type thread total_allocated total_reserved ts ts_ns",
            "gpu": "bytes",
            "ranges": "dur_ns",
        },
    ),
    ("sources", {"stacks": "dur_ns name thread ts ts_ns", "ranges": "thread"}),
    ("model", {}),  # sites, FLOPs ledger, boundary: nothing of their own
    ("replay", {"gpu": "dur_ns ts_ns", "ranges": "ts_ns"}),
    ("advice", {"gpu": "device dur kind name stream ts", "ranges": "dur kind name sig ts"}),
)


def _release_before(trace: Trace, stage: str) -> None:
    """Release the columns of ``trace`` that neither ``stage`` nor a stage after it reads, and give
    the heap's free pages back: what the stage before freed (its temporaries, these columns) does
    not always fit what the next allocates, and a cold analysis of a 263 MB trace peaked ~12 MB
    higher without the trims (6 of them, ~2 ms each)."""
    first = [s for s, _ in _LAST_READS].index(stage)
    keep: dict[str, set[str]] = {}
    for _, reads in _LAST_READS[first:]:
        for table, cols in reads.items():
            keep.setdefault(table, set()).update(cols.split())
    trace.release(keep)
    return_freed_memory()


def _top_findings(rep) -> None:
    """Each site's ``top_finding`` (model.py), once advice has run."""
    from .model import attach_top_findings

    try:
        attach_top_findings(rep)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"sites' top findings failed: {type(e).__name__}: {e}")


def _model(rep, trace, links, attr) -> dict:
    """``sites``, ``flops_ledger`` and ``boundary`` (model.py); a failure never loses the report."""
    from .model import build

    try:
        return build(rep, trace, links, attr)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"sites and FLOPs ledger failed: {type(e).__name__}: {e}")
        return {"sites": [], "flops_ledger": None, "boundary": None}


def _sources(rep, trace, links) -> None:
    """``source`` on attention kernel rows and calls, ``sources`` on phase rows; a failure never loses the report."""
    from .sources import attach_sources

    try:
        attach_sources(rep, trace, links)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"source lines failed: {type(e).__name__}: {e}")


def _replay_block(rep, trace, links, tagging, sidecars) -> Optional[dict]:
    """``replay`` (replay/): the distinct attention calls a replay script rebuilds, and the backend
    times of a ``*.replay.json`` beside the trace; a failure there never loses the report."""
    from .replay.block import replay_block

    try:
        return replay_block(rep, trace, links, tagging, sidecars)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"replay calls failed: {type(e).__name__}: {e}")
        return None


def _advice(rep, trace, links) -> tuple:
    """``advice``, ``advice_checks`` and ``attention_backends`` (advice/): findings from this run's
    numbers, what each rule checked, and its attention implementations; a failure there never loses
    the report."""
    from .advice import advice_block

    try:
        return advice_block(rep, trace, links)
    except Exception as e:  # noqa: BLE001 - reported in warnings
        rep["warnings"].append(f"advice failed: {type(e).__name__}: {e}")
        return [], [], []


def _memory_block(trace, links, tagging, attr, rep) -> dict:
    """The ``memory`` block (memory/); a failure there never loses the rest of the report."""
    from .memory import memory_report

    try:
        return memory_report(trace, links, tagging, attr, rep)
    except Exception as e:  # noqa: BLE001 - reported in the block and in warnings
        rep["warnings"].append(f"memory analysis failed: {type(e).__name__}: {e}")
        return {"recorded": bool(len(trace.memory["ts"])), "error": f"{type(e).__name__}: {e}"}


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


def build_report(
    trace: Trace,
    links: Links,
    tagging: Tagging,
    attr: Attribution,
    opt: Options,
    ncu_files: Optional[Any] = None,
) -> dict:
    """The report of one trace, in named steps: devices, steps, the kernel frame (costed,
    classified, overlaid with counters), the attention context of each kernel, the kernel table,
    and the aggregates over the selected step."""
    devices = _devices(trace, opt)
    steps = _steps(trace, links, opt)
    # hardware counters are joined first: what they measured is evidence for the roofs
    frame, adjustments, joined = roofline_frame(trace, links, attr, devices, opt, steps.launch_t, ncu_files)
    frame, meas = M.overlay(trace, frame, joined, steps.kernel_step, steps.names, devices)
    frame = _replay_reasons(frame, tagging.graph)
    ctx = _context(trace, links, tagging)
    table = _kernel_table(trace, attr, frame, ctx, steps, meas.column)
    if not steps.keep.all():
        table = table.take(np.flatnonzero(steps.keep))
    rep = _assemble(trace, opt, devices, adjustments, steps, frame, ctx, table, meas)
    # CUDA-graph replays (attention/graphs.py): how their kernels got CPU context, and a notice when some have none
    g_notice = graphs.notice(tagging.graph) if tagging.graph is not None else None
    if g_notice:
        rep["notices"].append(g_notice)
    rep["graphs"] = graphs.summary(tagging.graph) if tagging.graph is not None else None
    return rep


def _replay_reasons(frame: KernelFrame, graph: Optional[graphs.GraphContext]) -> KernelFrame:
    """Kernels replayed from a CUDA graph without a reference and left unknown say so, and how to fix
    it: the generic reason would send the user to a profiler flag they already set."""
    if graph is None or not graph.n_replayed:
        return frame
    m = (frame.bound == BOUND_UNKNOWN) & graph.replayed & (graph.how != graphs.REF)
    if not m.any():
        return frame
    vocab = list(frame.reason.vocab) + [graphs.replay_reason(graph)]
    return dataclasses.replace(frame, reason=Coded(np.where(m, len(vocab) - 1, frame.reason.codes), vocab))


def _devices(trace: Trace, opt: Options) -> dict:
    """Peaks of every device the trace's kernels ran on or its metadata describes."""
    G = trace.gpu
    dev_ids = set(G["device"].tolist()) if len(G["kind"]) else set()
    props_ids: set[int] = {p["id"] for p in D.device_properties(trace.meta) if isinstance(p.get("id"), int)}
    return {i: D.resolve(trace.meta, i, opt.user_peaks, opt.peak_basis) for i in sorted(dev_ids | props_ids)}


def roofline_frame(
    trace: Trace,
    links: Links,
    attr: Attribution,
    devices: dict,
    opt: Options,
    launch_t: Optional[np.ndarray] = None,
    ncu_files: Optional[Any] = None,
) -> tuple[KernelFrame, list, M.Joined]:
    """The classified kernel frame of a trace's cost attribution (before measured counters are
    overlaid), the roofs raised by exact evidence (classify.raise_roofs: a kernel with exact
    FLOPs, or DRAM traffic that the joined counters measured, beating the roof), and the joined
    counters."""

    def resolve(dev: int) -> D.DevicePeaks:
        return D.resolve(trace.meta, dev, opt.user_peaks, opt.peak_basis)

    def datasheet(dev: int, peak: str) -> Optional[float]:
        return D.datasheet_peak(trace.meta, dev, peak)

    frame = F.build(trace, links, attr, devices, resolve)
    lt = launch_t if launch_t is not None else trace.gpu["ts_ns"]
    joined = M.join(trace, links, frame, lt, ncu_files)
    frame, adjustments = raise_roofs(frame, datasheet, joined.dram_rates(len(frame)))
    return classify(frame), adjustments, joined


def _device_json(d: D.DevicePeaks, adjustments: list) -> dict:
    """A device entry: its roofs as used and every raise above the table's figures, with why:
    those the table's own evidence makes (a benchmark beaten by a real kernel measured on this
    GPU) and those this trace's exact evidence makes (a kernel with exact FLOPs, or measured DRAM
    traffic, above the roof)."""
    out = d.to_json()
    mine = [{k: v for k, v in a.items() if k != "device"} for a in adjustments if a["device"] == d.id]
    for a in mine:
        if a["peak"] == "memory_bandwidth":
            out["peaks"]["memory_bandwidth"] = a["to"]
        else:
            out["peaks"]["flops"][a["peak"]] = a["to"]
    out["roof_adjustments"] = list(out.get("roof_adjustments") or []) + mine
    return out


@dataclass
class Steps:
    """ProfilerStep ranges, each kernel's step, and the kernels of the step analysed."""

    rows: list  # [(start ns, end ns, name, number, ts µs)] in time order
    launch_t: np.ndarray  # per kernel: its launch's CPU time (ns), else its own start
    kernel_step: np.ndarray  # per kernel: index into rows, -1 outside any step
    keep: np.ndarray  # bool per kernel: in the step analysed (all without --step)

    @property
    def names(self) -> list:
        return [s[2] for s in self.rows]


def _steps(trace: Trace, links: Links, opt: Options) -> Steps:
    """Steps: the ProfilerStep whose CPU range holds the launch (or the kernel, without a launch)."""
    G, R = trace.gpu, trace.ranges
    names = trace.strings
    n = len(G["kind"])
    step_rows = []
    for r in np.flatnonzero(R["kind"] == ANNOTATION).tolist():
        m = _STEP.match(names[R["name"][r]])
        if m:
            step_rows.append(
                (
                    int(R["ts_ns"][r]),
                    int(R["ts_ns"][r] + R["dur_ns"][r]),
                    names[R["name"][r]],
                    int(m.group(1)),
                    float(R["ts"][r]),
                )
            )
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
    return Steps(step_rows, launch_t, k_step, keep)


@dataclass
class Context:
    """Per kernel: what attention call and phase it belongs to, and where in the model."""

    attention: np.ndarray  # bool
    instance: np.ndarray  # tagger instance id, -1 outside attention
    call: np.ndarray  # attention call number (GPU order), -1 outside attention
    phase: np.ndarray  # index into attention.patterns.PHASES, -1 outside attention
    backward: np.ndarray  # bool
    columns: dict  # kernel-table columns: phase, direction, core, tag_source, scope, op, module...


def _context(trace: Trace, links: Links, tagging: Tagging) -> Context:
    G, R = trace.gpu, trace.ranges
    names = trace.strings
    n = len(G["kind"])
    inst = tagging.gpu_instance
    # Attention calls are numbered 0, 1, 2... in the order their first kernel ran on the GPU:
    # stable ids that do not depend on how the trace was read.
    call = np.full(n, -1, dtype=np.int64)
    att_idx = np.flatnonzero(inst >= 0)
    if len(att_idx):
        numbers = call_numbers(trace, tagging)
        ids, inv = unique_ints(inst[att_idx], return_inverse=True)
        call[att_idx] = np.array([numbers[i] for i in ids.tolist()], dtype=np.int64)[inv]
    att = inst >= 0
    ph_code = np.where(att, tagging.gpu_phase, -1).astype(np.int64)
    phase_col = Coded(np.where(ph_code >= 0, ph_code, len(P.PHASES)), list(P.PHASES) + [None])
    core_set = np.array([p in P.CORE_PHASES for p in P.PHASES] + [False])
    bwd = tagging.gpu_backward.astype(bool)
    src = np.where(att & (tagging.gpu_source >= 0), tagging.gpu_source, len(SOURCES)).astype(np.int32)
    mods = _Modules(trace, links)
    ctx_r = links.forward_context(links.gpu_parent)
    # one module path per distinct context range, then spread to the kernels
    ctx_u, ctx_inv = unique_ints(ctx_r, return_inverse=True)
    # a range's path is that of its innermost module: one path per distinct module, taken in the
    # order the context ranges first reach it (the vocabularies' order)
    own = np.where(ctx_u >= 0, mods.own[np.maximum(ctx_u, 0)] if len(mods.own) else -1, -1)
    m_u, m_first, m_inv = unique_ints(own, return_index=True, return_inverse=True)
    mod_vocab: dict = {None: 0}
    path_vocab: dict = {None: 0}
    m_mod, m_path = np.zeros(len(m_u), np.int32), np.zeros(len(m_u), np.int32)
    for j in np.argsort(m_first, kind="stable").tolist():
        t = mods.path(int(ctx_u[m_first[j]]))
        m_mod[j] = mod_vocab.setdefault(t[-1] if t else None, len(mod_vocab))
        m_path[j] = path_vocab.setdefault("/".join(t) if t else None, len(path_vocab))
    m_inv = m_inv.reshape(-1)
    u_mod, u_path = m_mod[m_inv], m_path[m_inv]
    op_r = links.gpu_op
    rname = R["name"]
    opname_codes = np.where(op_r >= 0, rname[np.maximum(op_r, 0)] if len(rname) else 0, -1)
    scope_vocab: dict = {None: 0}
    scope_codes = np.zeros(n, np.int32)
    if att.any():
        inst_u, inst_inv = unique_ints(inst[att], return_inverse=True)
        scope_codes[att] = np.array(
            [
                scope_vocab.setdefault(tagging.instances.get(i, {}).get("name"), len(scope_vocab))
                for i in inst_u.tolist()
            ],
            dtype=np.int32,
        )[inst_inv]
    columns = {
        "attention": att,
        "phase": phase_col,
        "direction": Coded(bwd.astype(np.int32), ["forward", "backward"]),
        "core": core_set[phase_col.codes],
        "tag_source": Coded(src, list(SOURCES) + [None]),
        "graph": Coded(*graphs.column(tagging, n)),
        "instance": np.where(att, call, np.nan).astype(np.float64),
        "scope": Coded(scope_codes, list(scope_vocab)),
        "op": Coded(np.where(opname_codes >= 0, opname_codes, len(names)), names + [None]),
        "module": Coded(u_mod[ctx_inv], list(mod_vocab)),
        "module_path": Coded(u_path[ctx_inv], list(path_vocab)),
    }
    return Context(att, inst, call, ph_code, bwd, columns)


def _kernel_table(
    trace: Trace, attr: Attribution, frame: KernelFrame, ctx: Context, steps: Steps, measured: Optional[list]
) -> KernelTable:
    """Every GPU activity as a kernel-table row (docs/report-schema.md, *Kernel row*)."""
    G, R = trace.gpu, trace.ranges
    names = trace.strings
    n = len(frame)
    rname = R["name"]
    costop_codes = np.where(attr.owner >= 0, rname[np.maximum(attr.owner, 0)] if len(rname) else 0, -1)
    is_kernel = frame.kind == KERNEL
    c = ctx.columns
    columns = {
        "id": np.arange(n, dtype=np.int64),
        "name": Coded(G["name"], names),
        "kind": Coded(frame.kind, GPU_KIND_NAMES),
        "ts": G["ts"].astype(np.float64),
        "dur_us": np.round(frame.dur_us, 3),
        "device": G["device"].astype(np.int64),
        "stream": G["stream"].astype(np.int64),
        "step": Coded(np.where(steps.kernel_step >= 0, steps.kernel_step, len(steps.rows)), steps.names + [None]),
        "attention": c["attention"],
        "phase": c["phase"],
        "direction": c["direction"],
        "core": c["core"],
        "tag_source": c["tag_source"],
        "graph": c["graph"],
        "instance": c["instance"],
        "scope": c["scope"],
        "site": Coded(np.zeros(n, dtype=np.int32), [None]),  # model.py names each call's site
        "op": c["op"],
        "cost_op": Coded(np.where(costop_codes >= 0, costop_codes, len(names)), names + [None]),
        "module": c["module"],
        "module_path": c["module_path"],
        "dtype": frame.dtype,
        "flops": _sig_round(frame.flops),
        "bytes": _sig_round(frame.bytes),
        "dram_bytes": _sig_round(frame.dram_bytes),
        "intensity": _sig_round(frame.intensity),
        # a dense upper bound's rate is no achieved rate: it is its own field
        "achieved_flops_per_s": _sig_round(np.where(frame.upper_bound, np.nan, frame.achieved_flops)),
        "achieved_bytes_per_s": _sig_round(np.where(frame.upper_bound, np.nan, frame.achieved_bytes)),
        "peak": frame.peak,
        "peak_flops_per_s": _sig_round(frame.peak_flops),
        "compute_util": np.round(frame.compute_util, 4),
        "memory_util": np.round(frame.memory_util, 4),
        "bytes_over_roof": np.round(frame.bytes_over_roof, 3),
        "bound": Coded(frame.bound, BOUNDS),
        "latency_cause": Coded(np.where(frame.cause >= 0, frame.cause, len(CAUSES)), list(CAUSES) + [None]),
        "bound_reason": frame.reason,
        "estimated": frame.estimated,
        "upper_bound": frame.upper_bound,
        "upper_bound_flops_per_s": _sig_round(np.where(frame.upper_bound, frame.achieved_flops, np.nan)),
        "upper_bound_bytes_per_s": _sig_round(np.where(frame.upper_bound, frame.achieved_bytes, np.nan)),
        "cost_share": np.where(attr.owner >= 0, np.round(attr.share, 4), np.nan),
        "cost_role": Coded(np.where(attr.role >= 0, attr.role, len(ROLE_NAMES)), list(ROLE_NAMES) + [None]),
        "grid": _dims_column(G["grid_x"], G["grid_y"], G["grid_z"], is_kernel),
        "block": _dims_column(G["block_x"], G["block_y"], G["block_z"], is_kernel),
        "occupancy_pct": np.where(is_kernel, np.round(frame.occupancy, 1), np.nan),
        "occupancy_source": Coded(
            np.where(frame.occupancy_source >= 0, frame.occupancy_source, len(F.OCCUPANCY_SOURCES)),
            list(F.OCCUPANCY_SOURCES) + [None],
        ),
        "waves": _sig_round(frame.waves, 3),
        "measured": measured if measured is not None else [None] * n,
    }
    return KernelTable(columns, _extras(trace, attr, ctx.attention))


def _extras(trace: Trace, attr: Attribution, att: np.ndarray) -> dict[int, dict]:
    """Attention rows' optional fields: the cost op's input shapes and the formula's inputs. Rows
    of one input signature and cost detail share one dict (every step repeats its calls: ~4 MB of
    dicts on a 263 MB trace), so the dicts are never changed in place (sources.py replaces them)."""
    R = trace.ranges
    extras: dict[int, dict] = {}
    sig_shapes: dict[int, list] = {}
    shared: dict[tuple[int, int], dict] = {}  # (signature, id of the cost detail) -> the rows' dict
    rows = np.flatnonzero(att & (attr.owner >= 0))
    owners = attr.owner[rows]
    for k, o, sig in zip(rows.tolist(), owners.tolist(), R["sig"][owners].tolist()):
        c = attr.costs.get(o)
        detail = c.detail if c is not None and c.detail else None
        key = (sig, id(detail))  # a detail lives as long as attr: its id is not reused meanwhile
        e = shared.get(key)
        if e is None:
            e = shared[key] = {}
            if sig >= 0:
                sh = sig_shapes.get(sig)
                if sh is None:
                    sh = sig_shapes[sig] = [
                        list(a.shape or ()) if a.is_tensor else None for a in parse_args(trace.signatures[sig])
                    ]
                e["shapes"] = sh
            if detail is not None:
                e["cost_detail"] = detail
        if e:
            extras[k] = e
    return extras


def _costed(frame: KernelFrame) -> np.ndarray:
    """Rows whose FLOPs and bytes are known on a GPU of known peaks: they enter phase means."""
    return ~np.isnan(frame.flops) & ~np.isnan(frame.bytes) & ~np.isnan(frame.bandwidth) & (frame.dur_us > 0)


def _assemble(
    trace: Trace,
    opt: Options,
    devices: dict,
    adjustments: list,
    steps: Steps,
    frame: KernelFrame,
    ctx: Context,
    table: KernelTable,
    meas: Result,
) -> dict:
    """The report dict: totals, phases and steps over the selected kernels, around the table."""
    G, R = trace.gpu, trace.ranges
    sel = steps.keep
    dur = frame.dur_us
    att, bwd, ph_code, inst = ctx.attention, ctx.backward, ctx.phase, ctx.instance
    gpu_time = float(dur[sel].sum())
    busy = busy_times(trace, sel, frame.communication, att)
    kern_time = float(dur[sel & (frame.kind == KERNEL)].sum())
    a_sel = att & sel
    att_time = float(dur[a_sel].sum())

    def t_of(mask):
        return _r(dur[a_sel & mask].sum())

    is_proj = np.isin(ph_code, [P.PHASE_INDEX["qkv_proj"], P.PHASE_INDEX["out_proj"]])
    unfused = np.isin(ph_code, [P.PHASE_INDEX[p] for p in P.UNFUSED_CORE_PHASES])
    known = _costed(frame)
    phases = []
    for direction, dmask in (("forward", ~bwd), ("backward", bwd)):
        for pi, ph in enumerate(P.PHASES):
            m = a_sel & dmask & (ph_code == pi)
            if m.any():
                phases.append(_phase_row(ph, direction, m, frame, known, inst, G["name"], trace.strings, att_time))
    used_devs = set(G["device"][sel].tolist())
    shapes_seen = bool((R["sig"] >= 0).any())
    notices = _notices(trace, int(sel.sum()), int(a_sel.sum()), shapes_seen, list(devices.values()), used_devs)
    step_list = []
    # each step's kernels in row order from one stable sort (a mask of the whole table per step was
    # quadratic in steps: 3530 profiled steps in a long training trace); the same values summed in
    # the same order
    order = np.argsort(steps.kernel_step, kind="stable")
    bounds = np.searchsorted(steps.kernel_step[order], np.arange(len(steps.rows) + 1)).tolist()
    dur_o, att_o = dur[order], att[order]
    for i, (s0, s1, sname, _, ts_us) in enumerate(steps.rows):
        d, a = dur_o[bounds[i] : bounds[i + 1]], att_o[bounds[i] : bounds[i + 1]]
        step_list.append(
            {
                "name": sname,
                "ts": ts_us,
                "dur_us": _r((s1 - s0) / 1000.0),
                "gpu_time_us": _r(d.sum()),
                "attention_time_us": _r(d[a].sum()),
            }
        )
    dev_ids = sorted(set(G["device"].tolist())) if len(G["kind"]) else []
    main_dev = (
        devices.get(dev_ids[0])
        if dev_ids
        else (next(iter(devices.values())) if devices else D.resolve(trace.meta, 0, opt.user_peaks, opt.peak_basis))
    )
    meta = trace.meta
    return {
        "path": trace.path,
        "status": "ok",
        "trace": {
            "events": int(trace.stats.get("events", 0)),
            "bytes": int(trace.stats.get("bytes", 0) or 0),
            "truncated": bool(trace.stats.get("truncated", False)),
            "format": "kineto-legacy" if _legacy(trace) else "kineto",
            # as recorded: the file's flag counts too (CUDA-graph replays carry no shapes of their own)
            "record_shapes": shapes_seen or bool(meta.get("record_shapes")),
            "with_stack": bool(any(R["kind"] == MODULE)) or bool(meta.get("with_stack")),
            "profile_memory": bool(len(trace.memory["ts"])),
            "distributed": meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None,
            "base_time_ns": (
                meta.get("baseTimeNanoseconds") if isinstance(meta.get("baseTimeNanoseconds"), int) else None
            ),
        },
        "device": _device_json(main_dev, adjustments) if main_dev else None,
        "devices": [_device_json(d, adjustments) for d in devices.values()],
        "steps": step_list,
        "step": opt.step,
        "gpu_time_us": _r(gpu_time),
        "gpu_busy_us": busy["gpu_busy_us"],
        "compute_busy_us": busy["compute_busy_us"],
        "span_us": busy["span_us"],
        "idle_us": busy["idle_us"],
        "kernel_time_us": _r(kern_time),
        "attention_time_us": _r(att_time),
        "attention_busy_us": busy["attention_busy_us"],
        "attention_share": _share(busy["attention_busy_us"], busy["compute_busy_us"]),
        "communication": busy["communication"],
        "streams": busy["streams"],
        "core_attention_time_us": t_of(ctx.columns["core"]),
        "projection_time_us": t_of(is_proj),
        "forward_time_us": t_of(~bwd),
        "backward_time_us": t_of(bwd),
        "fused_time_us": t_of(ph_code == P.PHASE_INDEX["fused_attention"]),
        "unfused_core_time_us": t_of(unfused),
        "attention_kernels": int(a_sel.sum()),
        "instances": int(len(unique_ints(inst[a_sel]))),
        "bound_time_us": {b: t_of(frame.bound == i) for i, b in enumerate(BOUNDS)},
        "latency_cause_time_us": {c: t_of(frame.cause == i) for i, c in enumerate(CAUSES)},
        "phases": phases,
        "kernels": table,
        "notices": notices + meas.notices,
        "warnings": list(trace.warnings) + meas.warnings,
        "thresholds": {
            "roof_reached": ROOF_REACHED,
            "short_kernel_us": SHORT_KERNEL_US,
            "low_occupancy_pct": LOW_OCCUPANCY_PCT,
            "tiny_grid_sm_fraction": TINY_GRID_SM_FRACTION,
        },
        "measurements": meas.block,
    }


def _share(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    """``part / whole`` for the JSON (4 decimals), null without a whole."""
    return _r(part / whole, 4) if part is not None and whole else None


def _dims_column(x: np.ndarray, y: np.ndarray, z: np.ndarray, is_kernel: np.ndarray) -> Coded:
    """``[x, y, z]`` per kernel (None for copies and fills), coded: a trace has few distinct
    launch shapes, and one list per kernel is most of the cost of this column."""
    if not len(x):
        return Coded(np.zeros(0, np.int32), [None])
    # each dimension's values by rank, then one small key per launch shape: counted, not sorted
    # (trace/arrays.py), in the order of the shapes (x, then y, then z)
    (ux, cx), (uy, cy), (uz, cz) = (unique_ints(np.asarray(a, dtype=np.int64), return_inverse=True) for a in (x, y, z))
    uniq, inv = unique_ints((cx * len(uy) + cy) * len(uz) + cz, return_inverse=True)
    xi, rest = np.divmod(uniq, len(uy) * len(uz))
    yi, zi = np.divmod(rest, len(uz))
    vocab: list = [list(t) for t in zip(ux[xi].tolist(), uy[yi].tolist(), uz[zi].tolist())] + [None]
    return Coded(np.where(is_kernel, inv.reshape(-1), len(uniq)), vocab)


def _phase_row(
    phase: str,
    direction: str,
    m: np.ndarray,
    frame: KernelFrame,
    known: np.ndarray,
    inst: np.ndarray,
    name_ids: np.ndarray,
    names: list,
    att_time: float,
) -> dict:
    dur, fl, by, cu, mu = frame.dur_us, frame.flops, frame.bytes, frame.compute_util, frame.memory_util
    t = float(dur[m].sum())
    mk = m & known
    kt = float(dur[mk].sum())
    cu_m = float((np.nan_to_num(cu[mk]) * dur[mk]).sum() / kt) if kt > 0 else None
    # kernels whose bytes estimate needs more than the DRAM roof have no memory utilisation: they
    # count in the phase's mean at the floor they show (classify: the estimate less a whole L2)
    mu = np.where(np.isnan(mu), frame.memory_floor, mu)
    mm = mk & ~np.isnan(mu)
    mt = float(dur[mm].sum())
    mu_m = float((mu[mm] * dur[mm]).sum() / mt) if mt > 0 else (None if kt <= 0 else float("nan"))
    b = "unknown" if cu_m is None else BOUNDS[int(decide(np.array([cu_m]), np.array([mu_m]), np.zeros(1, bool))[0])]
    # means over dense upper bounds are upper bounds: they show a roof not reached, never reached
    upper = bool(frame.upper_bound[mk].any())
    if upper and b in ("compute", "memory"):
        b = "unknown"
    f_sum = float(np.nansum(fl[mk])) if kt > 0 else None
    b_sum = float(np.nansum(by[mk])) if kt > 0 else None
    sec = kt * 1e-6
    by_name: dict = {}
    for nid, d in zip(name_ids[m].tolist(), dur[m].tolist()):
        by_name[nid] = by_name.get(nid, 0.0) + d
    top = sorted(by_name.items(), key=lambda x: -x[1])[:5]
    btime = {}
    for i, bn in enumerate(BOUNDS):
        v = float(dur[m & (frame.bound == i)].sum())
        if v > 0:
            btime[bn] = _r(v)
    ctime = _cause_time(dur, m, frame.cause)
    return {
        "phase": phase,
        "label": P.PHASE_LABELS[phase],
        "direction": direction,
        "core": phase in P.CORE_PHASES,
        "time_us": _r(t),
        "share": _r(t / att_time, 4) if att_time > 0 else None,
        "kernels": int(m.sum()),
        "instances": int(len(unique_ints(inst[m]))),
        "flops": _sig(f_sum),
        "bytes": _sig(b_sum),
        "intensity": _sig(f_sum / b_sum) if f_sum is not None and b_sum else None,
        "achieved_flops_per_s": _sig(f_sum / sec) if f_sum is not None and sec > 0 and not upper else None,
        "achieved_bytes_per_s": _sig(b_sum / sec) if b_sum is not None and sec > 0 and not upper else None,
        "upper_bound_flops_per_s": _sig(f_sum / sec) if f_sum is not None and sec > 0 and upper else None,
        "upper_bound_bytes_per_s": _sig(b_sum / sec) if b_sum is not None and sec > 0 and upper else None,
        "compute_util": _r(cu_m, 4),
        "memory_util": _r(mu_m, 4),
        "bound": b,
        "latency_cause": max(ctime, key=ctime.__getitem__) if b == "latency" and ctime else None,
        "bound_time_us": btime,
        "latency_cause_time_us": ctime,
        "cost_coverage": _r(kt / t, 4) if t > 0 else None,
        "estimated": bool(frame.estimated[m].any()),
        "upper_bound": upper,
        "top_kernels": [{"name": names[nid], "time_us": _r(tt)} for nid, tt in top],
    }


def _cause_time(dur: np.ndarray, m: np.ndarray, cause: np.ndarray) -> dict:
    """Time of the latency-bound rows in ``m`` by cause (causes with time only)."""
    out = {}
    for i, c in enumerate(CAUSES):
        v = float(dur[m & (cause == i)].sum())
        if v > 0:
            out[c] = _r(v)
    return out


def _legacy(trace: Trace) -> bool:
    """PyTorch 1.9-era traces: capitalised categories (Operator, Kernel, Runtime)."""
    return "computeProperties" in trace.meta or bool(
        trace.stats.get("categories", set()) & {"Operator", "Kernel", "Runtime"}
    )


def error_entry(path: str, message: str) -> dict:
    return {"path": path, "status": "error", "error": message}


def envelope(traces: list[dict]) -> dict:
    return {"schema": SCHEMA_VERSION, "tool": {"name": "tb-attention", "version": __version__}, "traces": traces}
