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

import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

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
    rows: list
    time_us: float = 0.0
    bytes: float = 0.0
    reads: float = 0.0
    last_writes: float = 0.0  # what its last kernel writes (a norm's: the normalised activations)

    @property
    def writes(self) -> float:
        return max(self.bytes - self.reads, 0.0)


def _is_matmul(op: Optional[str], name: str) -> bool:
    if op in MATMUL_OPS:
        return True
    return is_matrix_kernel(name) and "attention" not in name.split("(", 1)[0].lower()


def _role(op: Optional[str], name: str, module: Optional[str]) -> str:
    """The role of a kernel after the projection: the norm (by op, module or Triton name), the
    residual add, both in one kernel, or other."""
    o = op or ""
    if name.startswith("triton_"):
        fused = name.split("fused", 1)[-1]
        normish = bool(_NORM.search(fused)) or ("mean" in fused and "pow" in fused)
        if normish and "add" in fused:
            return "add_norm"
        if normish:
            return "norm"
        return "residual_add" if re.search(r"(^|_)add(_|$)", fused) else "other"
    if _NORM_OPS.search(o) or (module and _NORM.search(module)):
        return "norm"
    if o in _ADD_OPS:
        return "residual_add"
    return "other"


class _Stream:
    """Kernel rows of one (device, stream) in start order; ``pos`` (shared by every stream of a
    table, whose kernels they partition): each row's place in its stream's order, -1 for a row
    in no stream."""

    def __init__(self, rows: np.ndarray, ts: np.ndarray, pos: np.ndarray):
        self.rows = rows[np.argsort(ts[rows], kind="stable")]
        pos[self.rows] = np.arange(len(self.rows))
        self.pos = pos


def _nan_to_num(x: float) -> float:
    """``float(np.nan_to_num(x))`` of one Python float (NaN 0, infinities the largest finite
    floats), without numpy's per-call cost."""
    if x != x:
        return 0.0
    if x in (math.inf, -math.inf):
        return math.copysign(sys.float_info.max, x)
    return x


def walk(kt: Any, calls: list, attr: Any = None) -> list[dict]:
    """Per forward attention call (model.Call: ``call``, ``rows``, ``site``), its boundary
    kernels by role, in GPU order."""
    n = len(kt)
    if not n:
        return []
    ts = kt.num("ts")
    dur = np.nan_to_num(kt.num("dur_us"))
    nbytes = kt.num("bytes")
    ids = np.asarray(kt.columns["id"], dtype=np.int64)
    reads = np.full(n, np.nan)
    if attr is not None and len(getattr(attr, "reads", ())):
        ok = (ids >= 0) & (ids < len(attr.reads))
        reads[ok] = np.asarray(attr.reads, dtype=np.float64)[ids[ok]]
    kind_c, kind_v = kt.codes("kind")
    ph_c, ph_v = kt.codes("phase")
    dir_c, dir_v = kt.codes("direction")
    nm_c, nm_v = kt.codes("name")
    op_c, op_v = kt.codes("cost_op")
    md_c, md_v = kt.codes("module")
    inst = kt.num("instance")
    dev = np.asarray(kt.columns["device"], dtype=np.int64)
    stream = np.asarray(kt.columns["stream"], dtype=np.int64)
    streams: dict[tuple[int, int], _Stream] = {}
    is_kernel = np.asarray([v == "kernel" for v in kind_v], dtype=bool)[kind_c]
    pos = np.full(n, -1, dtype=np.int64)
    for a, b in sorted(set(zip(dev.tolist(), stream.tolist()))):  # np.unique(axis=0): 10x slower
        m = np.flatnonzero((dev == a) & (stream == b) & is_kernel)
        streams[(a, b)] = _Stream(m, ts, pos)
    # the loop below reads single rows: Python lists answer that faster than numpy scalars
    ph_l, dir_l, inst_l = ph_c.tolist(), dir_c.tolist(), inst.tolist()
    dur_l, nb_l, rd_l = dur.tolist(), nbytes.tolist(), reads.tolist()
    op_l, nm_l, md_l, kernel_l = op_c.tolist(), nm_c.tolist(), md_c.tolist(), is_kernel.tolist()
    # a kernel's matmul-ness and role depend on its op, name and module only: found once each
    matmul_memo: dict[tuple[int, int], bool] = {}
    role_memo: dict[tuple[int, int, int], str] = {}

    def matmul(r: int) -> bool:
        k = (op_l[r], nm_l[r])
        hit = matmul_memo.get(k)
        if hit is None:
            hit = matmul_memo[k] = _is_matmul(op_v[k[0]], str(nm_v[k[1]] or ""))
        return hit

    def role_of(r: int) -> str:
        k = (op_l[r], nm_l[r], md_l[r])
        hit = role_memo.get(k)
        if hit is None:
            hit = role_memo[k] = _role(op_v[k[0]], str(nm_v[k[1]] or ""), md_v[k[2]])
        return hit

    out = []
    for c in calls:
        # attention's output is written by its last fused or PV kernel (a call without one — e.g.
        # a block mask's construction — has no output to follow)
        core = [
            int(r)
            for r in c.rows.tolist()
            if ph_v[ph_l[r]] in _OUTPUT and dir_v[dir_l[r]] != "backward" and kernel_l[r]
        ]
        if not core:
            continue
        last = max(core, key=lambda r: ts[r] + dur[r])
        st = streams.get((int(dev[last]), int(stream[last])))
        if st is None or st.pos[last] < 0:
            continue
        items: list[Item] = []
        state, nxt, complete = "before", None, False
        at = int(st.pos[last])
        seq = st.rows[at + 1 : at + 1 + MAX_BOUNDARY_KERNELS].tolist()
        for r in seq:
            iv = inst_l[r]
            mine = iv == iv and int(iv) == c.call
            ph = ph_v[ph_l[r]]
            if dir_v[dir_l[r]] == "backward" or (not mine and ph in _CORE):
                break
            if state == "before":
                # up to the projection's GEMM: its own prologue (the out_proj phase: an FP8
                # projection's quantisation of its input), layout copies, other kernels
                if matmul(r):
                    role = "o_proj"
                    state = "oproj"
                elif mine and ph == "out_proj":
                    role = "o_proj"
                elif mine and ph == "layout":
                    role = "layout"
                else:
                    role = "other"
            elif state == "oproj":
                if (mine and ph == "out_proj") or (matmul(r) and mine):
                    role = "o_proj"
                elif matmul(r):
                    nxt, complete = r, True
                    break
                else:
                    state = "after"
                    role = role_of(r)
            else:
                if matmul(r):
                    nxt, complete = r, True
                    break
                role = role_of(r)
            if items and items[-1].role == role:
                it = items[-1]
            else:
                it = Item(role, [])
                items.append(it)
            it.rows.append(r)
            b, rd = nb_l[r], rd_l[r]
            it.time_us += dur_l[r]
            it.bytes += 0.0 if b != b else b
            it.reads += 0.0 if rd != rd else rd
            it.last_writes = 0.0 if b != b else max(b - _nan_to_num(rd), 0.0)
        costed = all(nb_l[r] == nb_l[r] for it in items for r in it.rows)
        out.append(
            {
                "call": c.call,
                "site": c.site,
                "items": items,
                "next": None
                if nxt is None
                else {"name": nm_v[nm_c[nxt]], "op": op_v[op_c[nxt]], "module": md_v[md_c[nxt]]},
                "complete": complete and any(it.role == "o_proj" for it in items),
                "costed": costed,
            }
        )
    return out


def _by_role(items: list[Item]) -> dict[str, Item]:
    out: dict[str, Item] = {}
    for it in items:
        agg = out.setdefault(it.role, Item(it.role, []))
        agg.rows += it.rows
        agg.time_us += it.time_us
        agg.bytes += it.bytes
        agg.reads += it.reads
        agg.last_writes = it.last_writes
    return out


def call_fusions(items: list[Item], bandwidth: Optional[float]) -> dict[str, dict]:
    """Per fusion that applies to one call's boundary: removable bytes and estimated gain (µs)."""
    bw = bandwidth * FUSED_BANDWIDTH_FRACTION if bandwidth else None
    roles = _by_role(items)
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


def _all_fusions(items: list[Item], bandwidth: Optional[float]) -> tuple[float, float, Optional[float]]:
    """(removable bytes, removable µs, estimated gain µs) with every fusion applied: the layout
    copies, the residual add and the norm go, the projection reads the residual in its epilogue;
    ``other`` kernels (dropout, quantisation for an FP8 matmul...) stay."""
    bw = bandwidth * FUSED_BANDWIDTH_FRACTION if bandwidth else None
    roles = _by_role(items)
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
            {"role": it.role, "kernels": len(it.rows), "time_us": _r(it.time_us), "bytes": _sig(it.bytes)}
            for it in items
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
        rb, rt, g = _all_fusions(items, bandwidth)
        fus = call_fusions(items, bandwidth) if w["complete"] else {}
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
            r["kernels"] += len(it.rows)
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
