"""The FFN boundary: what attention's output costs the step around it.

Attention writes its output to HBM; the output projection reads it back and writes its own, the
residual add reads that and the residual stream and writes their sum, the norm reads the sum
(eager RMSNorm: several times) and writes the normalised activations, and the next matmul (the
FFN's first, or the MoE router's) reads those. Each hop is a kernel that moves bytes and does
almost no math. Per forward attention call this module follows its GPU stream from the call's
last core-attention kernel to the next matmul after the output projection, and names every
kernel on the way by its role:

* ``layout`` — copies of the attention output before the projection (``transpose().contiguous()``);
* ``o_proj`` — the output projection (the call's ``out_proj`` kernels, or the first matmul);
* ``residual_add`` — the add after it; ``norm`` — the norm's kernels (ops or modules named norm);
  ``add_norm`` — one kernel doing both (torch.compile's fused Triton kernel); ``other``.

Three fusions remove part of it (their estimates, :func:`fusion_estimates`, have the shape of an
advice rule — premise, unit, twin — so advice can state them as findings):

* **o_proj epilogue + residual add**: the GEMM adds the residual in its epilogue and writes the
  sum: the projection's output is neither written nor read back (2 × its bytes), and the add
  kernel goes; the epilogue reads the residual instead.
* **add + norm**: one kernel reads the projection's output and the residual once and writes the
  sum and the normalised activations (what Inductor generates): removes every byte of the add
  and norm kernels beyond those four tensors.
* **norm in the next matmul's prologue**: the next GEMM normalises its operand as it loads it:
  the norm's kernels and their bytes go (the GEMM reads the sum instead of the normalised copy, of
  the same size).

Estimates assume the bytes a fusion still moves go at ``FUSED_BANDWIDTH_FRACTION`` of the DRAM
bandwidth; every figure is marked estimated. Times are the trace's (all steps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..roofline.roles import is_matrix_kernel

FUSED_BANDWIDTH_FRACTION = 0.8  # the rate at which a fused kernel moves the bytes it still moves
MAX_BOUNDARY_KERNELS = 48  # a walk that finds no next matmul within this many kernels is cut
MAX_LISTED_CALLS = 512
ROLES = ("layout", "o_proj", "residual_add", "norm", "add_norm", "other")
ROLE_LABELS = {
    "layout": "layout copies",
    "o_proj": "o_proj",
    "residual_add": "residual add",
    "norm": "norm",
    "add_norm": "add+norm (one kernel)",
    "other": "other",
}
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::_scaled_mm_v2",
        "aten::_grouped_mm",
        "aten::_scaled_grouped_mm",
    }
)
_NORM = re.compile(r"norm|rsqrt|var_mean", re.I)
_NORM_OPS = re.compile(r"layer_norm|rms_norm|batch_norm|group_norm", re.I)
_ADD_OPS = frozenset({"aten::add", "aten::add_"})
_OUTPUT = frozenset({"pv_matmul", "fused_attention"})
_REMOVABLE = frozenset({"layout", "residual_add", "norm", "add_norm"})  # what the fusions together remove
_CORE = frozenset({"qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "fused_attention"})
TWIN = (
    "the same block run with torch.compile (Inductor fuses the residual add and the norm into one kernel; "
    "max-autotune templates can also fuse epilogues): the boundary's time in the twin's trace is the check"
)
FUSIONS = {
    "oproj_residual_epilogue": (
        "o_proj epilogue with the residual add",
        "the output projection writes its result and a separate add kernel reads it back with the residual",
        "add the residual in the GEMM's epilogue (torch.compile with max-autotune; a fused Linear+residual kernel)",
    ),
    "add_norm": (
        "residual add + norm in one kernel",
        "the residual add and the norm run as separate kernels between the projection and the next matmul",
        "torch.compile the block (Inductor fuses add+norm), or a fused add+RMSNorm kernel (e.g. Apex/TE/Liger)",
    ),
    "norm_prologue": (
        "norm fused into the next matmul's prologue",
        "the norm writes its normalised copy and the next matmul reads it back",
        "a GEMM that normalises its operand on load (torch.compile prologue fusion; TE's LayerNormLinear)",
    ),
}


@dataclass
class Item:
    """Boundary kernels of one role (in GPU order) of one call."""

    role: str
    kernels: int  # how many, consecutive on the stream
    time_us: float = 0.0
    bytes: float = 0.0
    reads: float = 0.0
    last_writes: float = 0.0  # what its last kernel writes (a norm's: the normalised activations)

    @property
    def writes(self) -> float:
        return max(self.bytes - self.reads, 0.0)


_ROLE = {r: i for i, r in enumerate(ROLES)}


def _name_is_matmul(name: str) -> bool:
    """A GEMM by its kernel name (an attention kernel whose name mentions a GEMM is not one)."""
    return is_matrix_kernel(name) and "attention" not in name.split("(", 1)[0].lower()


def _triton_role(name: str) -> str:
    """The role of a Triton kernel, by the ops its name says it fused."""
    fused = name.split("fused", 1)[-1]
    normish = bool(_NORM.search(fused)) or ("mean" in fused and "pow" in fused)
    if normish and "add" in fused:
        return "add_norm"
    if normish:
        return "norm"
    return "residual_add" if re.search(r"(^|_)add(_|$)", fused) else "other"


class _Column:
    """A string column of the kernel table, asked per row what a test says of its value: each
    distinct value is tested once, and only the values of the rows asked about (a C++ template
    name takes microseconds to search; the table has hundreds of thousands of rows)."""

    def __init__(self, kt: Any, name: str):
        self.codes, self.values = kt.codes(name)

    def test(self, fn: Callable[[Any], Any], rows: np.ndarray, dtype: Any = bool) -> np.ndarray:
        codes = self.codes[rows]
        used = np.zeros(len(self.values), dtype=bool)
        used[codes] = True
        per_value = np.zeros(len(self.values), dtype=dtype)
        for code in np.flatnonzero(used).tolist():
            per_value[code] = fn(self.values[code])
        return per_value[codes]


def _first(mask: np.ndarray) -> np.ndarray:
    """Per row of a 2-D mask, the column of its first True; the number of columns where none."""
    return np.where(mask.any(axis=1), mask.argmax(axis=1), mask.shape[1])


def _output_kernels(calls: list, end: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(calls, rows): the calls with a row that ``ok`` marks, in call order, and of each the row
    that ends last (the first of equals in the call's row order)."""
    rows = np.concatenate([np.asarray(c.rows, dtype=np.int64) for c in calls])
    owner = np.repeat(np.arange(len(calls)), [len(c.rows) for c in calls])
    keep = ok[rows]
    rows, owner = rows[keep], owner[keep]
    order = np.lexsort((-end[rows], owner))  # stable: equals keep the call's row order
    rows, owner = rows[order], owner[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = owner[1:] != owner[:-1]
    return owner[first], rows[first]


def _following(kt: Any, ts: np.ndarray, is_kernel: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(grid, valid): per row, the MAX_BOUNDARY_KERNELS kernels after it on its (device, stream)
    in start order (then row order); ``valid`` is False past the stream's last kernel."""
    dev = np.asarray(kt.columns["device"], dtype=np.int64)
    stream = np.asarray(kt.columns["stream"], dtype=np.int64)
    k = np.flatnonzero(is_kernel)
    in_order = k[np.lexsort((ts[k], stream[k], dev[k]))]  # each stream one run, by start
    place = np.full(len(ts), -1, dtype=np.int64)
    place[in_order] = np.arange(len(in_order))
    starts = np.ones(len(in_order), dtype=bool)
    starts[1:] = (dev[in_order][1:] != dev[in_order][:-1]) | (stream[in_order][1:] != stream[in_order][:-1])
    first = np.flatnonzero(starts)
    stream_end = np.repeat(np.r_[first[1:], len(in_order)], np.diff(np.r_[first, len(in_order)]))
    at = place[rows]
    pos = at[:, None] + np.arange(1, MAX_BOUNDARY_KERNELS + 1)[None, :]
    valid = pos < stream_end[at][:, None]
    return in_order[np.where(valid, pos, at[:, None])], valid


def walk(kt: Any, calls: list, attr: Any = None) -> list[dict]:
    """Per forward attention call (model.Call: ``call``, ``rows``, ``site``), its boundary
    kernels by role, in GPU order.

    From the call's output kernel the walk follows its stream: before the projection's first
    GEMM (layout copies, the projection's own prologue), in the projection (its GEMMs and
    out_proj kernels), after it (the add and the norm) until the next GEMM. Whole-array: the
    kernels after each call's output make a row of a (call × step) grid, and each state ends at
    the first step of the row where a condition holds."""
    if not len(kt) or not calls:
        return []
    ts = kt.num("ts")
    dur = np.nan_to_num(kt.num("dur_us"))
    ids = np.asarray(kt.columns["id"], dtype=np.int64)
    reads = np.full(len(kt), np.nan)
    if attr is not None and len(getattr(attr, "reads", ())):
        ok = (ids >= 0) & (ids < len(attr.reads))
        reads[ok] = np.asarray(attr.reads, dtype=np.float64)[ids[ok]]
    phase, name, op, module = (_Column(kt, c) for c in ("phase", "name", "cost_op", "module"))
    every = np.arange(len(kt))
    is_kernel = _Column(kt, "kind").test(lambda v: v == "kernel", every)
    backward = _Column(kt, "direction").test(lambda v: v == "backward", every)
    # attention's output is written by its last fused or PV kernel (a call without one — e.g. a
    # block mask's construction — has no output to follow)
    output = phase.test(lambda v: v in _OUTPUT, every) & ~backward & is_kernel
    who, last = _output_kernels(calls, ts + dur, output)
    if not len(who):
        return []
    grid, valid = _following(kt, ts, is_kernel, last)
    step = np.arange(MAX_BOUNDARY_KERNELS)[None, :]
    call = np.asarray([calls[i].call for i in who.tolist()], dtype=np.float64)[:, None]
    inst = kt.num("instance")[grid]
    mine = (inst == inst) & (np.trunc(inst) == call)
    # it stops at the stream's end, a backward kernel or another call's core attention
    stop = _first(~valid | backward[grid] | (~mine & phase.test(lambda v: v in _CORE, grid)))
    live = step < stop[:, None]
    matmul = live & (
        name.test(lambda v: _name_is_matmul(str(v or "")), grid) | op.test(lambda v: v in MATMUL_OPS, grid)
    )
    out_proj = mine & phase.test(lambda v: v == "out_proj", grid)
    gemm = _first(matmul)  # the projection's first GEMM
    leave = _first(live & (step > gemm[:, None]) & ~(out_proj | (matmul & mine)))  # its first other kernel
    each = np.arange(len(who))
    next_mm = np.where(
        (leave < stop) & matmul[each, np.minimum(leave, MAX_BOUNDARY_KERNELS - 1)],
        leave,  # a GEMM not the call's own: the next matmul, right after the projection
        _first(matmul & (step > leave[:, None])),
    )
    end = np.minimum(next_mm, stop)
    layout = mine & phase.test(lambda v: v == "layout", grid)
    role = np.where(out_proj, _ROLE["o_proj"], np.where(layout, _ROLE["layout"], _ROLE["other"]))
    role[(step >= gemm[:, None]) & (step < leave[:, None])] = _ROLE["o_proj"]
    after = (step >= leave[:, None]) & (step < end[:, None])
    role[after] = _after_roles(grid[after], name, op, module)
    return _items(kt, calls, who, grid, role, end, next_mm < stop, dur, reads)


def _after_roles(rows: np.ndarray, name: _Column, op: _Column, module: _Column) -> np.ndarray:
    """The role of each kernel after the projection: a Triton kernel's by the ops its name fused;
    another's the norm (by op or module), the residual add (by op), else other."""
    triton = name.test(lambda v: str(v or "").startswith("triton_"), rows)
    out = np.empty(len(rows), dtype=np.int64)
    out[triton] = name.test(lambda v: _ROLE[_triton_role(str(v or ""))], rows[triton], dtype=np.int64)
    eager = rows[~triton]
    norm = op.test(lambda v: bool(_NORM_OPS.search(v or "")), eager) | module.test(
        lambda v: bool(v and _NORM.search(v)), eager
    )
    add = op.test(lambda v: (v or "") in _ADD_OPS, eager)
    out[~triton] = np.where(norm, _ROLE["norm"], np.where(add, _ROLE["residual_add"], _ROLE["other"]))
    return out


def _items(
    kt: Any,
    calls: list,
    who: np.ndarray,
    grid: np.ndarray,
    role: np.ndarray,
    end: np.ndarray,
    has_next: np.ndarray,
    dur: np.ndarray,
    reads: np.ndarray,
) -> list[dict]:
    """The walks: each call's steps before ``end`` as Items, a run of equal roles each. Sums are
    added a step at a time, in GPU order (the order a loop over the kernels adds them in)."""
    nbytes = kt.num("bytes")
    m, width = grid.shape
    step = np.arange(width)[None, :]
    within = step < end[:, None]
    role = np.where(within, role, -1)
    starts = within & (role != np.concatenate([np.full((m, 1), -1), role[:, :-1]], axis=1))
    # running sums along each row, restarted where an item starts: one Python add per kernel in
    # a loop is the same sequence of float additions
    b, x = nbytes[grid].T, reads[grid].T
    adds = (dur[grid].T, np.where(b != b, 0.0, b), np.where(x != x, 0.0, x))
    w = b - np.nan_to_num(x)
    last_writes = np.where(b != b, 0.0, np.where(0.0 > w, 0.0, w)).T
    restart = starts.T
    sums = [np.empty((width, m)) for _ in adds]
    for total, add in zip(sums, adds):
        total[0] = 0.0 + add[0]
        for j in range(1, width):
            total[j] = np.where(restart[j], 0.0, total[j - 1]) + add[j]
    time_us, nb, rd = (t.T for t in sums)
    costed = ~(np.isnan(nbytes[grid]) & within).any(axis=1)
    ci, js = np.nonzero(starts)  # row-major: by call, then step
    same = np.r_[ci[1:] == ci[:-1], False]
    stops = np.where(same, np.r_[js[1:], 0], end[ci])
    at = (ci, stops - 1)  # an item's last step: its sums, its last kernel's writes
    items: list[list[Item]] = [[] for _ in range(m)]
    vals = zip(
        ci.tolist(),
        js.tolist(),
        stops.tolist(),
        role[ci, js].tolist(),
        time_us[at].tolist(),
        nb[at].tolist(),
        rd[at].tolist(),
        last_writes[at].tolist(),
    )
    for c, a, z, ro, t, b, x, lw in vals:
        items[c].append(Item(ROLES[ro], z - a, t, b, x, lw))
    nm_c, nm_v = kt.codes("name")
    op_c, op_v = kt.codes("cost_op")
    md_c, md_v = kt.codes("module")
    complete = has_next & ((role == _ROLE["o_proj"]) & within).any(axis=1)
    end_l, next_l, complete_l, costed_l = end.tolist(), has_next.tolist(), complete.tolist(), costed.tolist()
    out = []
    for i, c in enumerate(who.tolist()):
        nxt = int(grid[i, end_l[i]]) if next_l[i] else None
        out.append(
            {
                "call": calls[c].call,
                "site": calls[c].site,
                "items": items[i],
                "next": None
                if nxt is None
                else {"name": nm_v[nm_c[nxt]], "op": op_v[op_c[nxt]], "module": md_v[md_c[nxt]]},
                "complete": complete_l[i],
                "costed": costed_l[i],
            }
        )
    return out


def _by_role(items: list[Item]) -> dict[str, Item]:
    out: dict[str, Item] = {}
    for it in items:
        agg = out.setdefault(it.role, Item(it.role, 0))
        agg.kernels += it.kernels
        agg.time_us += it.time_us
        agg.bytes += it.bytes
        agg.reads += it.reads
        agg.last_writes = it.last_writes
    return out


def call_fusions(roles: dict[str, Item], bandwidth: Optional[float]) -> dict[str, dict]:
    """Per fusion that applies to one call's boundary (its items summed by role, :func:`_by_role`):
    removable bytes and estimated gain (µs)."""
    bw = bandwidth * FUSED_BANDWIDTH_FRACTION if bandwidth else None
    op, add, norm, both = roles.get("o_proj"), roles.get("residual_add"), roles.get("norm"), roles.get("add_norm")
    out: dict[str, dict] = {}

    def at_bw(b: float) -> Optional[float]:
        return b / bw * 1e6 if bw else None

    y = op.writes if op is not None else 0.0  # the projection's output
    if op is not None and add is not None and y > 0:
        resid = max(add.reads - y, 0.0)
        t = at_bw(resid)
        out["oproj_residual_epilogue"] = {
            "removable_bytes": 2.0 * y,
            "removable_us": add.time_us,
            "estimated_gain_us": None if t is None else max(add.time_us - t, 0.0),
        }
    if add is not None and norm is not None:
        # the fused kernel reads y and the residual and writes the sum and the normalised copy:
        # the copy is what the norm's last kernel writes, not all its kernels' writes (an eager
        # RMSNorm's fp32 intermediates are what the fusion removes)
        s_bytes = add.writes
        n_bytes = norm.last_writes or norm.writes or s_bytes
        fused = add.reads + s_bytes + n_bytes
        t = at_bw(fused)
        out["add_norm"] = {
            "removable_bytes": max(add.bytes + norm.bytes - fused, 0.0),
            "removable_us": add.time_us + norm.time_us,
            "estimated_gain_us": None if t is None else max(add.time_us + norm.time_us - t, 0.0),
        }
    if norm is not None:  # a separate norm goes whole
        out["norm_prologue"] = {
            "removable_bytes": norm.bytes,
            "removable_us": norm.time_us,
            "estimated_gain_us": norm.time_us,
        }
    elif both is not None:
        # a fused add+norm kernel keeps the sum and loses its normalised copy: half its writes,
        # and the next matmul's read of it
        t = at_bw(both.writes / 2.0)
        out["norm_prologue"] = {
            "removable_bytes": both.writes / 2.0,
            "removable_us": both.time_us,
            "estimated_gain_us": None if t is None else min(t, both.time_us),
        }
    return out


def _all_fusions(
    items: list[Item], roles: dict[str, Item], bandwidth: Optional[float]
) -> tuple[float, float, Optional[float]]:
    """(removable bytes, removable µs, estimated gain µs) with every fusion applied: the layout
    copies, the residual add and the norm go, the projection reads the residual in its epilogue;
    ``other`` kernels (dropout, quantisation for an FP8 matmul...) stay."""
    bw = bandwidth * FUSED_BANDWIDTH_FRACTION if bandwidth else None
    rest = [it for it in items if it.role in _REMOVABLE]
    b = sum(it.bytes for it in rest)
    t = sum(it.time_us for it in rest)
    op, add = roles.get("o_proj"), roles.get("residual_add") or roles.get("add_norm")
    resid = max(add.reads - op.writes, 0.0) if op is not None and add is not None else 0.0
    gain = None if bw is None else max(t - resid / bw * 1e6, 0.0)
    return max(b - resid, 0.0), t, gain


def _call_json(w: dict, items: list[Item], b: float, t: float, rb: float, g: Optional[float], fus: dict) -> dict:
    return {
        "call": w["call"],
        "site": w["site"],
        "complete": w["complete"],
        "costed": w["costed"],
        "next": w["next"],
        "bytes": _sig(b),
        "time_us": _r(t),
        "removable_bytes": _sig(rb),
        "estimated_gain_us": _r(g),
        "items": [
            {"role": it.role, "kernels": it.kernels, "time_us": _r(it.time_us), "bytes": _sig(it.bytes)} for it in items
        ],
        "fusions": sorted(fus),
    }


def boundary_block(kt: Any, calls: list, attr: Any, bandwidth: Optional[float]) -> Optional[dict]:
    """The report's ``boundary`` block (docs/report-schema.md), or None without attention calls."""
    walks = walk(kt, calls, attr)
    if not walks:
        return None
    per_call: list[dict[str, Any]] = []
    tot = {"bytes": 0.0, "time_us": 0.0, "removable_bytes": 0.0, "removable_us": 0.0, "estimated_gain_us": 0.0}
    fus_tot: dict[str, dict] = {}
    gain_known = bandwidth is not None
    for w in walks:
        items: list[Item] = w["items"]
        b = sum(it.bytes for it in items)
        t = sum(it.time_us for it in items)
        roles_of = _by_role(items)
        rb, rt, g = _all_fusions(items, roles_of, bandwidth)
        fus = call_fusions(roles_of, bandwidth) if w["complete"] else {}
        if not w["complete"]:  # no projection and next matmul found: listed, not counted
            rb, rt, g = 0.0, 0.0, None
        if len(per_call) < MAX_LISTED_CALLS:
            per_call.append(_call_json(w, items, b, t, rb, g, fus))
        if not w["complete"]:
            continue
        tot["bytes"] += b
        tot["time_us"] += t
        tot["removable_bytes"] += rb
        tot["removable_us"] += rt
        tot["estimated_gain_us"] += g or 0.0
        for k, f in fus.items():
            agg = fus_tot.setdefault(
                k, {"calls": 0, "removable_bytes": 0.0, "removable_us": 0.0, "estimated_gain_us": 0.0}
            )
            agg["calls"] += 1
            agg["removable_bytes"] += f["removable_bytes"]
            agg["removable_us"] += f["removable_us"]
            agg["estimated_gain_us"] += f["estimated_gain_us"] or 0.0
    roles: dict[str, dict] = {}
    for w in walks:
        if not w["complete"]:
            continue
        for it in w["items"]:
            r = roles.setdefault(it.role, {"role": it.role, "kernels": 0, "time_us": 0.0, "bytes": 0.0})
            r["kernels"] += it.kernels
            r["time_us"] += it.time_us
            r["bytes"] += it.bytes
    complete = sum(1 for w in walks if w["complete"])
    return {
        "calls": len(walks),
        "complete_calls": complete,
        "bytes": _sig(tot["bytes"]),
        "time_us": _r(tot["time_us"]),
        "removable_bytes": _sig(tot["removable_bytes"]),
        "removable_us": _r(tot["removable_us"]),
        "estimated_gain_us": _r(tot["estimated_gain_us"]) if gain_known else None,
        "estimated": True,
        "bandwidth": bandwidth,
        "bandwidth_fraction": FUSED_BANDWIDTH_FRACTION,
        "roles": [
            {**r, "time_us": _r(r["time_us"]), "bytes": _sig(r["bytes"])}
            for r in sorted(roles.values(), key=lambda r: ROLES.index(r["role"]))
        ],
        "fusions": [
            {
                "id": k,
                "label": FUSIONS[k][0],
                "calls": v["calls"],
                "removable_bytes": _sig(v["removable_bytes"]),
                "removable_us": _r(v["removable_us"]),
                "estimated_gain_us": _r(v["estimated_gain_us"]) if gain_known else None,
            }
            for k, v in sorted(fus_tot.items(), key=lambda kv: -kv[1]["estimated_gain_us"])
        ],
        "calls_listed": len(per_call),
        "per_call": per_call,
    }


@dataclass(frozen=True)
class FusionEstimate:
    """One boundary fusion as an advice rule states it: what it rests on, in what unit, and the
    twin run that checks it."""

    id: str
    title: str
    premise: str  # the evidence in this trace
    unit: str  # what estimated_gain_us counts
    twin: str  # the run with the fusion applied that checks the estimate
    estimated_gain_us: Optional[float]
    removable_us: float  # the kernel time the fusion acts on (≥ the gain)
    removable_bytes: float
    calls: int
    how: str


def fusion_estimates(block: Optional[dict]) -> list[FusionEstimate]:
    """The boundary's fusions, largest estimated gain first (for advice: one finding each)."""
    if not block:
        return []
    out = []
    for f in block.get("fusions") or []:
        label, premise, how = FUSIONS[f["id"]]
        g = f.get("estimated_gain_us")
        out.append(
            FusionEstimate(
                id=f["id"],
                title=label,
                premise=f"in {f['calls']} attention call(s) {premise} "
                f"({_r(f['removable_us'])} µs of kernels, {_sig(f['removable_bytes'])} bytes they would not move)",
                unit="µs of GPU time in this trace (all its steps)",
                twin=TWIN,
                estimated_gain_us=None if g is None else min(g, f["removable_us"] or 0.0),
                removable_us=float(f["removable_us"] or 0.0),
                removable_bytes=float(f["removable_bytes"] or 0.0),
                calls=int(f["calls"]),
                how=how,
            )
        )
    return out


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    return None if x is None or x != x else round(float(x), nd)


def _sig(x: Optional[float]) -> Optional[float]:
    return None if x is None or x != x else (float(f"{float(x):.4g}") if x else 0.0)
