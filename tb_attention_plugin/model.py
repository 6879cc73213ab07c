"""Attention in its model: the report's ``sites`` and ``flops_ledger`` blocks (and the
``boundary`` block from memory/boundary.py), assembled from the kernel table and the trace.

* ``sites`` — the attention calls grouped by where the model makes them (attention/sites.py
  names them), with each site's calls, time, shapes, backends, bounds, FLOPs and top finding.
  Every attention kernel row gets the ``site`` it belongs to, so the dashboard can filter by it.
* ``flops_ledger`` — per call, site and step: useful, executed and dense attention FLOPs
  (roofline/ledger.py), attention MFU on each basis and the step's hardware FLOPs utilisation.

Numbers come from the report's own kernel rows (times, FLOPs, roofs, bounds); the geometry of
each call from its attention op's recorded inputs. Schema: docs/report-schema.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .attention import patterns as P
from .attention.backends import BACKEND_LABELS, fused_backend
from .attention.sites import CallPlace, name_sites
from .memory.boundary import boundary_block
from .roofline import ledger as L
from .roofline.classify import BOUNDS, decide
from .table import Coded
from .trace.arrays import unique_ints
from .trace.jagged import JaggedLengths
from .trace.shapes import SignatureArgs

MAX_LISTED_CALLS = 512  # per-call lists (ledger, boundary) beyond this are summarised, not listed
TOP_SHAPES = 3
_BASES = ("useful", "executed", "dense")
_UPPER = ("dense (block counts not recorded)", "upper bound")
_SEVERITY = {"high": 0, "medium": 1, "low": 2}
_CORE = frozenset(P.CORE_PHASES)
_SDPA_OUTER = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math")
_MATH_PHASES = frozenset({"fused_attention", "qk_matmul", "pv_matmul"})  # the kernels doing attention's matmuls
MFU_FORMULA = (
    "attention MFU = FLOPs / Σ(core attention kernel time × the roof of the call's attention kernel); "
    "HFU = Σ over costed kernels of FLOPs / roof (attention kernels: executed FLOPs) ÷ the step's GPU span"
)


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    if x is None or x != x:
        return None
    return round(float(x), nd)


def _sig(x: Optional[float]) -> Optional[float]:
    if x is None or x != x:
        return None
    return float(f"{float(x):.4g}") if x else 0.0


class _Cols:
    """Typed access to the report's kernel table columns (engine table)."""

    def __init__(self, kt: Any):
        self.kt = kt
        self.c = kt.columns

    def codes(self, name: str) -> tuple[np.ndarray, list]:
        return self.kt.codes(name)

    def among(self, name: str, values: Any) -> np.ndarray:
        """Per row: whether its ``name`` label is one of ``values`` (a collection, not a string)."""
        codes, vocab = self.codes(name)
        return np.asarray([v in values for v in vocab], dtype=bool)[codes]

    def text(self, name: str, rows: np.ndarray) -> list:
        codes, vocab = self.codes(name)
        return [vocab[i] for i in codes[rows].tolist()]

    def num(self, name: str) -> np.ndarray:
        return self.kt.num(name)


@dataclass
class Call:
    """One attention call: its kernel rows (indices into the kernel table) and how to name it."""

    call: int
    rows: np.ndarray
    place: CallPlace = field(default_factory=CallPlace)
    site: int = -1
    step: Optional[str] = None


def calls_of(kt: Any) -> list[Call]:
    """The attention calls of a kernel table, in call order."""
    cols = _Cols(kt)
    inst = cols.num("instance")
    rows = np.flatnonzero(~np.isnan(inst))
    if not len(rows):
        return []
    order = np.argsort(inst[rows], kind="stable")
    rows = rows[order]
    vals = inst[rows].astype(np.int64)
    cut = np.flatnonzero(np.diff(vals)) + 1
    return [Call(int(vals[g[0]]), rows[g]) for g in np.split(np.arange(len(rows)), cut)]


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    first = paths[0]
    n = len(first)
    for p in paths[1:]:
        n = min(n, len(p))
        for i in range(n):
            if p[i] != first[i]:
                n = i
                break
    return first[:n]


_SIGNATURE_PHASES = ("fused_attention", "qk_matmul", "pv_matmul")


def _signature_row(use: list[int], phase_of: list, core: list[int], dur: list[float]) -> int:
    """The kernel row whose op and shapes sign a call: its attention matmul (the longest fused
    kernel, else QK^T, else PV), whose inputs are the call's geometry. Not the longest core
    kernel of any phase: that changes from layer to layer of one site (T5's first layer computes
    the relative position bias, whose gather is its longest kernel), and a signature that changes
    keeps repeated layers from folding."""
    for phase in _SIGNATURE_PHASES:
        hits = [x for x in use if phase_of[x] == phase]
        if hits:
            return max(hits, key=dur.__getitem__)
    return max(core or use, key=dur.__getitem__)


def _places(kt: Any, calls: list[Call]) -> None:
    """Fill each call's CallPlace: module path (the common prefix of its forward kernels'
    modules, cut at its scope module), scope annotation, source line and op signature."""
    cols = _Cols(kt)
    # the loop reads single rows: Python lists answer that faster than numpy scalars
    is_core, backward = cols.among("phase", _CORE).tolist(), cols.among("direction", ("backward",)).tolist()
    mp_codes, mp_vocab = cols.codes("module_path")
    mp_l = mp_codes.tolist()
    sc_codes, sc_vocab = cols.codes("scope")
    ts_codes, ts_vocab = cols.codes("tag_source")
    op_codes, op_vocab = cols.codes("cost_op")
    st_codes, st_vocab = cols.codes("step")
    dur = np.nan_to_num(cols.num("dur_us")).tolist()
    ph_codes, ph_vocab = cols.codes("phase")
    phase_of = [ph_vocab[x] for x in ph_codes.tolist()]
    split_memo: dict[int, tuple[str, ...]] = {}
    extras = getattr(kt, "extras", {}) or {}
    for c in calls:
        r = c.rows.tolist()
        use = [x for x in r if not backward[x]] or r
        paths = []
        for code in sorted({mp_l[x] for x in use}):
            if mp_vocab[code] is None:
                continue
            p = split_memo.get(code)
            if p is None:
                p = split_memo[code] = tuple(x for x in str(mp_vocab[code]).split("/") if x)
            paths.append(p)
        mods = _common_prefix(paths)
        scope = sc_vocab[sc_codes[r[0]]]
        source = ts_vocab[ts_codes[r[0]]]
        if scope and str(scope).startswith("nn.Module:"):
            own = str(scope).split(":", 1)[1].strip()
            if own in mods:
                mods = mods[: mods.index(own) + 1]
        annotation = str(scope) if source == "annotation" and scope else None
        core = [x for x in use if is_core[x]]
        main = _signature_row(use, phase_of, core, dur)
        e = extras.get(main) or {}
        shapes = e.get("shapes") or []
        tensors = [s for s in shapes if isinstance(s, list) and len(s) >= 3][:2]
        sig = " ".join([str(op_vocab[op_codes[main]] or "")] + ["[" + ",".join(map(str, s)) + "]" for s in tensors])
        src = None
        best = -1.0
        for x in core or use:
            s = (extras.get(x) or {}).get("source")
            if s and dur[x] > best:
                best, src = dur[x], f"{s.get('file')}:{s.get('line')}"
        c.place = CallPlace(modules=mods, annotation=annotation, source=src, signature=sig.strip())
        c.step = st_vocab[st_codes[r[0]]]


# -- the FLOPs ledger of each call ---------------------------------------------------------------
@dataclass
class LedgerEntry:
    call: int
    site: int
    direction: str
    backend: Optional[str]
    op: Optional[str]
    geometry: Optional[L.Geometry]
    counts: Optional[L.Counts]
    tile: Optional[tuple[int, int]]
    time_us: float
    peak_time: float  # Σ time × roof (FLOP the roofs allow in that time), 0 when unknown
    rows: np.ndarray
    step: Optional[str]
    peak_row: Optional[int] = None  # the kernel row whose roof the call's MFU is measured on


GEOMETRY_HOPS = 12  # how far out from a kernel's op the ledger looks for the attention op that sizes it
_ALL = 1 << 30


class _Ops:
    """Per cost-owner range: op name and parsed inputs, memoised."""

    def __init__(self, trace: Any, links: Any):
        self.t, self.L = trace, links
        self.R = trace.ranges
        self.memo: dict[int, tuple[str, Optional[list]]] = {}
        self.args = SignatureArgs(trace.signatures)  # one parse for every op with those inputs
        self.jagged = JaggedLengths(trace)  # the sequence lengths a jagged call's trace records
        self.geoms: dict[tuple[int, int], Any] = {}  # (name, signature) codes -> (geometry, name)
        # range -> how many ranges from it outwards hold no geometry (a call's owners share the ops
        # around them: a decomposed call's nine kernels walk the same module ranges)
        self.barren: dict[int, int] = {}

    def get(self, r: int) -> tuple[str, Optional[list]]:
        hit = self.memo.get(r)
        if hit is None:
            name = str(self.t.strings[self.R["name"][r]])
            hit = self.memo[r] = (name, self.args(int(self.R["sig"][r])))
        return hit

    def geometry(self, r: int) -> tuple[Optional[L.Geometry], str]:
        """(L.geometry of the op's name and recorded inputs, its name), memoised per name and
        signature: every step repeats the same calls, and a call's owners share the ops around
        them (the ledger walks up to 12 of them per owner)."""
        key = (int(self.R["name"][r]), int(self.R["sig"][r]))
        hit = self.geoms.get(key)
        if hit is None:
            name, args = self.get(r)
            hit = self.geoms[key] = (L.geometry(name, args) if args else None, name)
        return hit

    def nearest_geometry(self, r: int, hops: int = GEOMETRY_HOPS) -> Optional[tuple[L.Geometry, str]]:
        """(geometry, op name) of the first of ``r`` and the ops around it, innermost first, up to
        ``hops`` ranges, that has one: usually ``r`` itself; the SDPA op around a math-backend
        matmul a few ranges up."""
        parent = self.L.parent
        walked: list[int] = []
        while r >= 0 and len(walked) < hops:
            if self.barren.get(r, 0) >= hops - len(walked):
                break  # walked from here before, as far: nothing
            g, name = self.geometry(r)
            if g is not None:
                return g, name
            walked.append(r)
            r = int(parent[r])
        everything = r < 0  # the walk reached the outermost range: nothing at any distance
        for i, x in enumerate(walked):
            self.barren[x] = max(self.barren.get(x, 0), _ALL if everything else hops - i)
        return None

    def recorded_blocks(self, r: int) -> Optional[L.RecordedBlocks]:
        """The block counts of the innermost ``flex_blocks:`` record_function around range ``r``
        (roofline/ledger.py's FLEX_BLOCKS_ANNOTATION), if any: the compiled Flex op sits a few
        ranges below the user's annotation (Dynamo's and AOT's wrappers between them)."""
        for x in self.ancestors(r, hops=48):
            name = str(self.t.strings[self.R["name"][x]])
            if L.FLEX_BLOCKS_ANNOTATION in name:
                rb = L.parse_flex_blocks(name)
                if rb is not None:
                    return rb
        return None

    def ancestors(self, r: int, hops: int = 12) -> list[int]:
        """``r`` and the ops around it, innermost first: the attention op whose inputs give the
        geometry may be the kernel's own op (fused), or the SDPA op around a math-backend matmul."""
        parent = self.L.parent
        out: list[int] = []
        while r >= 0 and len(out) < hops:
            out.append(r)
            r = int(parent[r])
        return out


def _backend(op: Optional[str], name: str, phase: str, scope: Optional[str], names: list) -> str:
    """The backend of one call's core attention (attention/backends.py's rules, per call)."""
    if phase == "fused_attention":
        return fused_backend(op, name) or "fused_other"
    if "scaled_dot_product_attention" in (scope or "") or "_scaled_dot_product_attention_math" in (op or ""):
        return "math"
    return "compiled" if any(str(n or "").startswith("triton_") for n in names) else "eager"


def ledger_entries(kt: Any, calls: list[Call], trace: Any, links: Any, attr: Any) -> list[LedgerEntry]:
    """One entry per call and direction that has core attention kernels."""
    cols = _Cols(kt)
    ph_codes, ph_vocab = cols.codes("phase")
    dir_codes, dir_vocab = cols.codes("direction")
    nm_codes, nm_vocab = cols.codes("name")
    op_codes, op_vocab = cols.codes("cost_op")
    sc_codes, sc_vocab = cols.codes("scope")
    is_core, is_math = cols.among("phase", _CORE), cols.among("phase", _MATH_PHASES)
    is_qk_pv = cols.among("phase", ("qk_matmul", "pv_matmul"))
    dur = np.nan_to_num(cols.num("dur_us"))
    flops = cols.num("flops")
    flops0 = np.nan_to_num(flops)
    peak = cols.num("peak_flops_per_s")
    ids = np.asarray(kt.columns["id"], dtype=np.int64)
    ops = _Ops(trace, links) if trace is not None else None
    owner = attr.owner if attr is not None else None
    owners = _Owners.of(owner, getattr(links, "gpu_op", None), ids) if ops is not None and owner is not None else None
    out: list[LedgerEntry] = []
    counts_memo: dict[tuple, L.Counts] = {}
    # the loops below read single rows: Python lists answer that faster than numpy scalars
    core_l, math_l, qk_pv_l, dir_l = is_core.tolist(), is_math.tolist(), is_qk_pv.tolist(), dir_codes.tolist()
    dur_l, flops0_l = dur.tolist(), flops0.tolist()
    has_roof = (~np.isnan(peak) & ~np.isnan(flops) & (flops > 0)).tolist()
    phase_of = [ph_vocab[x] for x in ph_codes.tolist()]
    for c in calls:
        fwd_geom: Optional[L.Geometry] = None
        fwd_backend: Optional[str] = None
        by_dir: dict[str, list[int]] = {}
        for x in c.rows.tolist():
            if core_l[x]:
                by_dir.setdefault(str(dir_vocab[dir_l[x]]), []).append(x)
        for direction in ("forward", "backward"):
            rows = by_dir.get(direction)
            if not rows:
                continue
            arr = np.asarray(rows, dtype=np.int64)
            math_rows = [x for x in rows if math_l[x]] or rows
            main = max(math_rows, key=lambda x: (dur_l[x], flops0_l[x]))
            name = str(nm_vocab[nm_codes[main]] or "")
            op = op_vocab[op_codes[main]]
            backend = _backend(
                op, name, str(ph_vocab[ph_codes[main]]), sc_vocab[sc_codes[main]], [nm_vocab[nm_codes[x]] for x in rows]
            )
            geom: Optional[L.Geometry] = None
            source_op: Optional[str] = None
            if ops is not None and owners is not None:
                # a backward's matmuls are not the forward's QK^T and PV: its geometry comes from
                # its own attention op, else from the forward's
                geom, source_op = _geometry(ops, owners, attr, rows, phase_of, direction == "forward")
            if source_op in _SDPA_OUTER and backend in ("eager", "compiled"):
                backend = "math"  # decomposed kernels under scaled_dot_product_attention
            if direction == "forward":
                fwd_backend = backend
            elif backend in ("eager", "compiled") and fwd_backend == "math":
                backend = "math"  # its backward runs outside the op; the forward says which it was
            if geom is None and direction == "backward":
                geom = fwd_geom
            if geom is not None and geom.block is not None and geom.block.visited is None and owner is not None:
                geom = _with_block_counts(geom, ops, owners, rows, fwd_geom if direction == "backward" else None)
            if geom is not None and geom.lengths == "total_max" and ops is not None and geom.total_q == geom.total_k:
                n, total = geom.b, int(geom.total_q or 0)
                lens = ops.jagged.sequence_lengths(n, total, geom.sq)
                if lens is not None:
                    geom = dataclasses.replace(geom, lengths_q=lens, lengths_k=lens, lengths="per_sequence")
                else:
                    geom = dataclasses.replace(geom, shortest=ops.jagged.shortest(n, total, geom.sq))
            if direction == "forward":
                fwd_geom = geom
            tile = L.tile_from_name(name) if backend in L.FUSED_TILED else None
            decomposed = None
            if backend not in L.FUSED_TILED:
                mm = [x for x in rows if qk_pv_l[x]]
                f = flops[mm] if mm else np.zeros(0)
                decomposed = float(np.nansum(f)) if len(f) and not np.isnan(f).all() else None
            rb = L.row_block_from_name(name) if tile is not None else None
            counts = _counts(counts_memo, geom, direction, backend, tile, decomposed, rb) if geom else None
            t = float(dur[arr].sum())
            pr = _call_peak(rows, math_l, has_roof, dur_l)
            pk = float(peak[pr]) if pr is not None else 0.0
            out.append(
                LedgerEntry(c.call, c.site, direction, backend, op, geom, counts, tile, t, t * pk, arr, c.step, pr)
            )
    return out


def _counts(
    memo: dict[tuple, L.Counts],
    geom: L.Geometry,
    direction: str,
    backend: str,
    tile: Optional[tuple[int, int]],
    decomposed: Optional[float],
    row_block: Optional[int] = None,
) -> L.Counts:
    """L.counts, memoised over one report (a pure function of frozen values; every step of a
    training trace repeats the same calls)."""
    key = (geom, direction, backend, tile, decomposed, row_block)
    try:
        hit = memo.get(key)
    except TypeError:  # a geometry holding something unhashable
        return L.counts(geom, direction, backend, tile, decomposed_flops=decomposed, row_block=row_block)
    if hit is None:
        hit = memo[key] = L.counts(geom, direction, backend, tile, decomposed_flops=decomposed, row_block=row_block)
    return hit


def _with_block_counts(
    geom: L.Geometry,
    ops: Optional[_Ops],
    owners: Optional[_Owners],
    rows: list[int],
    fwd: Optional[L.Geometry],
) -> L.Geometry:
    """A Flex call's geometry with its block counts where the trace carries them: a
    ``flex_blocks:`` annotation around its op; for the backward (autograd's thread, outside the
    annotation) the forward's counts, when the grid is the same (both passes visit the blocks the
    mask keeps)."""
    if fwd is not None and fwd.block is not None and fwd.block.visited is not None:
        b, fb = geom.block, fwd.block
        if b is not None and (b.q_block, b.kv_block, b.total) == (fb.q_block, fb.kv_block, fb.total):
            return dataclasses.replace(geom, block=fb)
    if ops is None or owners is None:
        return geom
    for o in owners.ops_of(rows):
        rb = ops.recorded_blocks(o)
        if rb is not None:
            return L.with_recorded_blocks(geom, rb) or geom
    return geom


def _call_peak(rows: list[int], math: list[bool], has_roof: list[bool], dur: list[float]) -> Optional[int]:
    """The roof of a call's attention math: that of its longest fused / QKᵀ / PV kernel with FLOPs."""
    cand = [x for x in rows if math[x] and has_roof[x]]
    return max(cand, key=lambda x: dur[x]) if cand else None


@dataclass(frozen=True)
class _Owners:
    """Per kernel-table row (lists: the ledger reads a few rows per call): the op its cost is
    attributed to and the op that launched it, -1 for none."""

    cost: list[int]
    launch: list[int]

    @staticmethod
    def of(owner: np.ndarray, launch: Optional[Any], ids: np.ndarray) -> _Owners:
        ok = (ids >= 0) & (ids < len(owner))
        at = np.where(ok, ids, 0)
        cost = np.where(ok, owner[at], -1) if len(owner) else np.full(len(ids), -1)
        by_launch = np.full(len(ids), -1)
        if launch is not None and len(owner):
            by_launch = np.where(ok, np.asarray(launch)[at], -1)
        return _Owners(cost.tolist(), by_launch.tolist())

    def ops_of(self, rows: list[int]) -> list[int]:
        """The ops of kernel rows ``rows``, each once, in order: those their costs are attributed
        to, then those that launched them (an op without a cost formula, such as varlen
        FlashAttention, owns no kernel)."""
        found = [o for o in (self.cost[x] for x in rows) if o >= 0]
        found += [o for o in (self.launch[x] for x in rows) if o >= 0]
        return list(dict.fromkeys(found))


def _geometry(
    ops: _Ops,
    owners: _Owners,
    attr: Any,
    rows: list[int],
    phase_of: list,
    decomposed: bool,
) -> tuple[Optional[L.Geometry], Optional[str]]:
    """The call's geometry in one direction and the op it came from: its fused op's recorded
    inputs, the SDPA op around a math-backend call, or the QKᵀ and PV matmuls of decomposed
    attention (no op)."""
    for o in owners.ops_of(rows):
        hit = ops.nearest_geometry(o)
        if hit is not None:
            return hit
    if not decomposed:
        return None, None
    qk = pv = None
    qk_owner = -1
    has_mask = False
    for x in rows:
        o, ph = owners.cost[x], phase_of[x]
        has_mask = has_mask or ph == "mask"
        c = attr.costs.get(o) if o >= 0 else None
        d = c.detail if c is not None else None
        if not d or "m" not in d:
            continue
        if ph == "qk_matmul" and qk is None:
            qk, qk_owner = d, int(o)
        elif ph == "pv_matmul" and pv is None:
            pv = d
    if qk is None:
        return None, None
    heads = int(qk.get("batch", 1))
    b = _batch_of(ops, qk_owner, heads)
    dv = int(pv["n"]) if pv is not None else int(qk["k"])
    mask = L.Mask("tensor") if has_mask else L.NO_MASK
    return L.Geometry(b, heads // b, heads // b, int(qk["m"]), int(qk["n"]), int(qk["k"]), dv, mask), None


def _batch_of(ops: _Ops, owner: int, bh: int) -> int:
    """B of decomposed attention whose QKᵀ matmul batches ``bh`` = B × H matrices: the leading dim
    of the 4-D [B, H, S, D] input of the matmul op around its kernel (torch.matmul records it before
    folding B and H into the bmm's one batch dim), else 1 (the bmm alone does not say; the FLOPs do
    not depend on the split)."""
    for r in ops.ancestors(owner, 4) if owner >= 0 else []:
        _, args = ops.get(r)
        for a in args or []:
            sh = a.shape
            if sh is not None and len(sh) == 4 and sh[0] * sh[1] == bh and sh[0] > 0:
                return int(sh[0])
    return 1


# -- JSON ---------------------------------------------------------------------------------------------
def _mfu(useful: float, executed: float, dense: float, peak_time: float) -> tuple[dict, list]:
    """MFU on each basis (null when unknown or above 1) and the bases above the roof."""
    out, over = {}, []
    for k, v in (("useful", useful), ("executed", executed), ("dense", dense)):
        u = L.utilization(v, peak_time * 1e-6) if peak_time else None
        out[k] = _r(u, 4)
        if u is None and peak_time and v > peak_time * 1e-6:
            over.append(k)
    return out, over


def _geom_json(g: Optional[L.Geometry]) -> Optional[dict]:
    if g is None:
        return None
    out: dict[str, Any] = {"b": g.b, "h": g.h, "hk": g.hk, "sq": g.sq, "sk": g.sk, "d": g.d, "dv": g.dv}
    if g.lengths != "uniform":
        out["lengths"] = g.lengths
        out["total_q"], out["total_k"] = g.total_q, g.total_k
        if g.shortest is not None:
            out["shortest"] = g.shortest
    if g.block is not None:
        out["block"] = {"q_block": g.block.q_block, "kv_block": g.block.kv_block, "blocks": g.block.total}
        if g.block.visited is not None:
            out["block"].update(visited=_sig(g.block.visited), full=_sig(g.block.full), source=g.block.source)
    return out


def _entry_json(e: LedgerEntry) -> dict:
    c = e.counts
    mfu, over = _mfu(c.useful, c.executed, c.dense, e.peak_time) if c else (dict.fromkeys(_BASES), [])
    out: dict[str, Any] = {
        "call": e.call,
        "site": e.site,
        "direction": e.direction,
        "step": e.step,
        "backend": e.backend,
        "op": e.op,
        "shapes": _geom_json(e.geometry),
        "mask": e.geometry.mask.label() if e.geometry else None,
        "useful": _sig(c.useful) if c else None,
        "executed": _sig(c.executed) if c else None,
        "dense": _sig(c.dense) if c else None,
        "useful_exact": c.useful_exact if c else False,
        "executed_basis": c.executed_basis if c else None,
        "tile": list(e.tile) if e.tile else None,
        "time_us": _r(e.time_us),
        "peak_flops_per_s": _sig(e.peak_time / e.time_us) if e.time_us and e.peak_time else None,
        "mfu": mfu,
    }
    if c is not None and c.useful_low is not None:
        out["useful_low"] = _sig(c.useful_low)
    if over:
        out["exceeds_peak"] = over
    return out


def _totals(entries: list[LedgerEntry], memo: Optional[dict[tuple[int, ...], tuple]] = None) -> dict:
    """useful / executed / dense over entries, their MFU and coverage. ``memo``: the sums that
    depend only on the entries' counts, by the counts objects (ledger_entries memoises them: every
    step of a training trace has the same ones); the entries must outlive the memo."""
    have = [e for e in entries if e.counts is not None]
    key = tuple(id(e.counts) for e in have)
    fixed = memo.get(key) if memo is not None else None
    if fixed is None:
        u = sum(e.counts.useful for e in have if e.counts)
        x = sum(e.counts.executed for e in have if e.counts)
        d = sum(e.counts.dense for e in have if e.counts)
        low = [e.counts.useful_low if e.counts.useful_low is not None else e.counts.useful for e in have if e.counts]
        fixed = (
            u,
            x,
            d,
            _sig(u) if have else None,
            _sig(x) if have else None,
            _sig(d) if have else None,
            all(e.counts.useful_exact for e in have if e.counts) if have else False,
            # executed is an upper bound where a block mask's counts or varlen lengths are missing
            any(_executed_is_bound(e.counts) for e in have if e.counts),
            any(e.counts.useful_low is not None for e in have if e.counts),
            _sig(sum(low)),
        )
        if memo is not None:
            memo[key] = fixed
    u, x, d, su, sx, sd, exact, bound, has_low, slow = fixed
    pt = sum(e.peak_time for e in have)
    all_peak = all(e.peak_time > 0 for e in have)
    mfu, over = _mfu(u, x, d, pt if all_peak else 0.0)
    out: dict[str, Any] = {
        "useful": su,
        "executed": sx,
        "dense": sd,
        "useful_exact": exact,
        "executed_upper_bound": bound,
        "time_us": _r(sum(e.time_us for e in entries)),
        "costed_time_us": _r(sum(e.time_us for e in have)),
        "mfu": mfu,
    }
    if has_low:
        out["useful_low"] = slow
    if over:
        out["exceeds_peak"] = over
    return out


def _executed_is_bound(c: L.Counts) -> bool:
    """The executed count is a bound (Flex without block counts, varlen without lengths)."""
    return c.executed_basis.startswith(_UPPER)


class _HfuCols:
    """The kernel-table columns ``_hfu`` reads, converted once: the ledger asks for the whole
    trace and for every profiled step (thousands of steps in a long training trace)."""

    def __init__(self, kt: Any):
        cols = _Cols(kt)
        self.dur = np.nan_to_num(cols.num("dur_us"))
        self.flops = cols.num("flops")
        self.peak = cols.num("peak_flops_per_s")
        self.ts = cols.num("ts")
        self.dev = np.asarray(kt.columns["device"]) if "device" in kt.columns else np.zeros(len(kt), dtype=np.int64)


def _executed_flops(hc: _HfuCols, entries: list[LedgerEntry], rows: Optional[np.ndarray]) -> tuple[np.ndarray, bool]:
    """The FLOPs of the kernels ``rows`` (ascending kernel-table rows; None: every row) with each
    costed call's executed FLOPs shared among its kernels there by their own FLOPs (or time),
    and whether one of those calls' executed counts is a bound: only the rows' slice of the
    columns is touched."""
    dur = hc.dur if rows is None else hc.dur[rows]
    flops = hc.flops.copy() if rows is None else hc.flops[rows]
    n = len(flops)
    upper = False
    if rows is None:
        upper = any(e.counts is not None and len(e.rows) > 0 and _executed_is_bound(e.counts) for e in entries)
        entries = _share_grouped(flops, dur, entries)
    for e in entries:
        if e.counts is None:
            continue
        if rows is None:
            r = e.rows
        else:
            p = np.searchsorted(rows, e.rows)
            inside = p < n
            inside[inside] = rows[p[inside]] == e.rows[inside]
            r = p[inside]
        if not len(r):
            continue
        upper = upper or _executed_is_bound(e.counts)
        f = flops[r]
        if not np.isfinite(f).all():
            f = np.nan_to_num(f)
        w = f / f.sum() if f.sum() > 0 else dur[r] / max(dur[r].sum(), 1e-12)
        flops[r] = e.counts.executed * w
    return flops, upper


def _share_grouped(flops: np.ndarray, dur: np.ndarray, entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """:func:`_executed_flops`' sharing over the whole table for the costed entries with the same
    number of kernels (fewer than 8) at once, as rows of a matrix; returns the entries left for the
    loop (more kernels, or kernels shared between entries, where the order of the writes counts).
    Row sums are taken left to right, as numpy sums fewer than 8 values, so the shares are the
    loop's to the last bit (a training trace has one or two kernel counts per call for thousands
    of calls)."""
    costed = [e for e in entries if e.counts is not None and 0 < len(e.rows) < 8]
    if len(costed) < 2:
        return entries
    every = np.concatenate([e.rows for e in costed])
    if len(unique_ints(every)) != len(every):
        return entries
    by_len: dict[int, list[LedgerEntry]] = {}
    for e in costed:
        by_len.setdefault(len(e.rows), []).append(e)
    for group in by_len.values():
        r = np.stack([e.rows for e in group])
        f = flops[r]
        if not np.isfinite(f).all():
            f = np.nan_to_num(f)
        fs = _row_sums(f)
        d = dur[r]
        ok = fs > 0
        w = np.empty(f.shape)
        w[ok] = f[ok] / fs[ok][:, None]
        if not ok.all():
            dd = d[~ok]
            w[~ok] = dd / np.maximum(_row_sums(dd), 1e-12)[:, None]
        flops[r] = np.array([e.counts.executed for e in group if e.counts is not None])[:, None] * w
    done = {id(e) for e in costed}
    return [e for e in entries if id(e) not in done]


def _row_sums(a: np.ndarray) -> np.ndarray:
    """Each row's sum, left to right: what ``row.sum()`` gives for rows of fewer than 8 values."""
    s: np.ndarray = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        s += a[:, j]
    return s


def _hfu_json(work: float, span: float, flops_total: float, unknown_peak: bool, upper: bool) -> dict:
    u = work / span if span > 0 and not unknown_peak else None
    out: dict[str, Any] = {
        "value": _r(u, 4) if u is not None and u <= 1 else None,
        "flops": _sig(flops_total),
        "roof_time_us": _r(work),
        "span_us": _r(span),
    }
    if u is not None and u > 1:
        out["exceeds_peak"] = True
    if upper:
        out["upper_bound"] = True
    if unknown_peak:
        out["note"] = "some costed kernels ran on a GPU of unknown peaks"
    return out


def _hfu(
    hc: _HfuCols, entries: list[LedgerEntry], rows: np.ndarray, shared: Optional[tuple[np.ndarray, bool]] = None
) -> dict:
    """Hardware FLOPs utilisation of the kernels ``rows`` (ascending kernel-table rows): Σ
    FLOPs/roof over costed kernels (attention core kernels with their call's executed FLOPs,
    shared by their own FLOPs or time) over the GPU span (per device, summed). A kernel's time
    at the roof is at most its own time: an executed count above what the roof allows in it
    (Flex's dense upper bound without block counts: 1.4x the roof on the H200's document mask)
    is work it did not do. ``upper_bound`` when some call's executed count is a bound, not a
    count. Works on the rows' slice of the columns only, in row order (the sums add the same
    values in the same order as over a mask of the whole table). ``shared``: those rows'
    ``_executed_flops``, if known."""
    flops, upper = shared if shared is not None else _executed_flops(hc, entries, rows)
    dur = hc.dur[rows]
    peak = hc.peak[rows]
    ok = ~np.isnan(flops) & (flops > 0)
    unknown_peak = bool((ok & np.isnan(peak)).any())
    at = ok & ~np.isnan(peak)
    work = float(np.minimum(flops[at] / peak[at] * 1e6, dur[at]).sum())  # µs at the roof, each ≤ its time
    ts = hc.ts[rows]
    dev = hc.dev[rows]
    span = 0.0
    for d in unique_ints(dev).tolist():
        m = dev == d
        span += float(np.max(ts[m] + dur[m]) - np.min(ts[m]))
    return _hfu_json(work, span, float(np.nansum(flops[ok])), unknown_peak, upper)


def _hfu_by_roof(hc: _HfuCols, flops: np.ndarray, pk_codes: np.ndarray, pk_vocab: list) -> dict[str, dict]:
    """The costed kernels of the trace per roof (the kernel row's ``peak``: bf16, fp8, fp32, …):
    how many, their FLOPs (attention kernels: their call's executed share), their time, their time
    at that roof (each at most its own) and ``utilization`` = roof time / time — the FLOPs those
    kernels did over what that roof allows in their time. FP8 GEMMs are thus measured on the FP8
    roof (on the H200 the measured e4m3 ``_scaled_mm`` one), not on bf16's."""
    ok = ~np.isnan(flops) & (flops > 0) & ~np.isnan(hc.peak)
    out: dict[str, dict] = {}
    for code in sorted(set(pk_codes[ok].tolist()), key=lambda c: str(pk_vocab[c])):
        if pk_vocab[code] is None:
            continue
        m = ok & (pk_codes == code)
        f, pk, dur = flops[m], hc.peak[m], hc.dur[m]
        roof = float(np.minimum(f / pk * 1e6, dur).sum())
        t = float(dur.sum())
        out[str(pk_vocab[code])] = {
            "peak_flops_per_s": _sig(float(pk.max())),
            "kernels": int(m.sum()),
            "flops": _sig(float(f.sum())),
            "time_us": _r(t),
            "roof_time_us": _r(roof),
            "utilization": _r(roof / t, 4) if t > 0 else None,
        }
    return out


def _step_hfus(
    hc: _HfuCols,
    entries: list[LedgerEntry],
    flops: np.ndarray,
    st_codes: np.ndarray,
    code_of: dict,
    order: np.ndarray,
    bounds: np.ndarray,
) -> Optional[dict[int, dict]]:
    """Every step's ``_hfu`` (by step code) from one pass over the whole table, when it is the
    same as step by step: every costed call's kernels lie in its own step (then no call changes
    another step's FLOPs, and the whole table's shared FLOPs are each step's). Each step's sums
    still add its own rows' values in row order, so the figures are the same bits. None
    otherwise (the caller goes step by step). ``flops``: the whole table's shared FLOPs."""
    costed = [e for e in entries if e.counts is not None]
    upper: set[int] = set()  # steps with a costed call (with kernels) whose count is a bound
    if costed:
        codes = np.array([code_of.get(e.step, -1) for e in costed], dtype=np.int64)
        rows_all = np.concatenate([e.rows for e in costed]).astype(np.int64)
        want = np.repeat(codes, [len(e.rows) for e in costed])
        if not np.array_equal(st_codes[rows_all].astype(np.int64), want):
            return None
        for e, c in zip(costed, codes.tolist()):
            if len(e.rows) and e.counts is not None and _executed_is_bound(e.counts):
                upper.add(c)
    ok = ~np.isnan(flops) & (flops > 0)
    nan_peak = np.isnan(hc.peak)
    known = ok & ~nan_peak
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(known, np.minimum(flops / hc.peak * 1e6, hc.dur), 0.0)
    qp, kp, fp, okp = q[order], known[order], flops[order], ok[order]
    unk = np.concatenate([[0], np.cumsum((ok & nan_peak)[order])])
    # spans: per step and device (ascending), the latest end minus the first start
    o2 = np.lexsort((hc.dev, st_codes))
    c2, d2 = st_codes[o2], hc.dev[o2]
    if len(o2):
        starts = np.flatnonzero(np.concatenate([[True], (c2[1:] != c2[:-1]) | (d2[1:] != d2[:-1])]))
        hi = np.maximum.reduceat((hc.ts + hc.dur)[o2], starts)
        lo = np.minimum.reduceat(hc.ts[o2], starts)
        gcode = c2[starts].tolist()
    else:
        hi = lo = np.zeros(0)
        gcode = []
    spans: dict[int, float] = {}
    for c, h, low in zip(gcode, hi, lo):
        spans[c] = spans.get(c, 0.0) + float(h - low)
    out: dict[int, dict] = {}
    for code in range(len(bounds) - 1):
        a, b = int(bounds[code]), int(bounds[code + 1])
        if a == b:
            continue
        work = float(qp[a:b][kp[a:b]].sum())
        total = float(np.nansum(fp[a:b][okp[a:b]]))
        out[code] = _hfu_json(work, spans.get(code, 0.0), total, bool(unk[b] - unk[a]), code in upper)
    return out


def flops_ledger(kt: Any, entries: list[LedgerEntry], steps: list[dict], n_sites: int) -> dict:
    cols = _Cols(kt)
    st_codes, st_vocab = cols.codes("step")
    hc = _HfuCols(kt)
    out: dict[str, Any] = _totals(entries)
    shared_all = _executed_flops(hc, entries, None)
    out["hfu"] = _hfu(hc, entries, np.arange(len(kt)), shared_all)
    peaks: dict[str, float] = {}
    pk_codes, pk_vocab = cols.codes("peak")
    peak = cols.num("peak_flops_per_s")
    out["hfu"]["by_roof"] = _hfu_by_roof(hc, shared_all[0], pk_codes, pk_vocab)
    for e in entries:
        x = e.peak_row
        if x is not None and pk_vocab[pk_codes[x]]:
            name = str(pk_vocab[pk_codes[x]])
            peaks[name] = max(peaks.get(name, 0.0), float(peak[x]))
    out["peaks"] = {k: _sig(v) for k, v in sorted(peaks.items())}
    out["formula"] = MFU_FORMULA
    out["estimated"] = any(
        e.counts is not None and ("estimate" in e.counts.executed_basis or not e.counts.useful_exact) for e in entries
    )
    by_site: dict[int, list[LedgerEntry]] = {}
    by_step: dict[Optional[str], list[LedgerEntry]] = {}
    for e in entries:
        by_site.setdefault(e.site, []).append(e)
        by_step.setdefault(e.step, []).append(e)
    out["sites"] = [dict(site=s, **_totals(by_site.get(s, []))) for s in range(n_sites)]
    # each step's kernel rows (ascending), grouped in one sort instead of a mask per step
    code_of: dict[Any, int] = {}
    for i, v in enumerate(st_vocab):
        code_of.setdefault(v, i)  # the first, as list.index finds it
    order = np.argsort(st_codes, kind="stable")
    bounds = np.searchsorted(st_codes[order], np.arange(len(st_vocab) + 1))
    names = [str(s.get("name")) for s in steps]
    fast = _step_hfus(hc, entries, shared_all[0], st_codes, code_of, order, bounds) if len(names) > 1 else None
    step_rows = []
    step_memo: dict[tuple[int, ...], tuple] = {}
    for name in names:
        code = code_of.get(name, -1)
        if code < 0:
            continue
        rows = order[bounds[code] : bounds[code + 1]]
        if not len(rows):
            continue
        row = dict(name=name, **_totals(by_step.get(name, []), step_memo))
        row["hfu"] = fast[code] if fast is not None else _hfu(hc, by_step.get(name, []), rows)
        step_rows.append(row)
    out["steps"] = step_rows
    out["calls_total"] = len(entries)
    out["calls"] = [_entry_json(e) for e in entries[:MAX_LISTED_CALLS]]
    return out


# -- sites ----------------------------------------------------------------------------------------
def _bound_of(rows: np.ndarray, cols: _Cols) -> str:
    """The phase rows' rule over time-weighted means of the costed rows."""
    dur = np.nan_to_num(cols.num("dur_us"))[rows]
    cu, mu = cols.num("compute_util")[rows], cols.num("memory_util")[rows]
    fl, by = cols.num("flops")[rows], cols.num("bytes")[rows]
    known = ~np.isnan(fl) & ~np.isnan(by) & ~np.isnan(mu) & (dur > 0)
    kt = float(dur[known].sum())
    if kt <= 0:
        return "unknown"
    c = float((np.nan_to_num(cu[known]) * dur[known]).sum() / kt)
    m = float((mu[known] * dur[known]).sum() / kt)
    b = BOUNDS[int(decide(np.array([c]), np.array([m]), np.zeros(1, bool))[0])]
    ub = cols.c.get("upper_bound")
    if isinstance(ub, np.ndarray) and ub[rows][known].any() and b in ("compute", "memory"):
        return "unknown"
    return b


def _roofline_of(rows: np.ndarray, cols: _Cols) -> Optional[dict]:
    """Where a site's core kernels sit on the roofline, which ``bound`` (the regime reached)
    does not say: ``intensity`` (Σ FLOPs / Σ bytes), ``side`` (the roof that caps them: compute
    where their time at the compute roofs, Σ FLOPs/peak, exceeds their time at the memory roof,
    Σ bytes/bandwidth — per kernel that is intensity above the ridge point) and ``roof_share``
    (Σ time at that roof / Σ their time: 1 is on the roof). Two sites of one bound label can sit
    16x apart in intensity (a video model's spatial and temporal attention)."""
    dur = np.nan_to_num(cols.num("dur_us"))[rows]
    cu, mu = cols.num("compute_util")[rows], cols.num("memory_util")[rows]
    fl, by = cols.num("flops")[rows], cols.num("bytes")[rows]
    known = ~np.isnan(fl) & ~np.isnan(by) & ~np.isnan(mu) & ~np.isnan(cu) & (dur > 0)
    kt = float(dur[known].sum())
    if kt <= 0 or float(by[known].sum()) <= 0:
        return None
    at_compute = float((cu[known] * dur[known]).sum())
    at_memory = float((mu[known] * dur[known]).sum())
    side = "compute" if at_compute > at_memory else "memory"
    return {
        "intensity": _sig(float(fl[known].sum()) / float(by[known].sum())),
        "side": side,
        "roof_share": _r(max(at_compute, at_memory) / kt, 4),
    }


def _rank(f: dict) -> tuple:
    return (_SEVERITY.get(f.get("severity") or "", 3), -(f.get("estimated_gain_us") or 0.0))


def _cited(advice: list) -> dict[int, set]:
    """(name, phase, direction) of the kernels each finding cites."""
    out: dict[int, set] = {}
    for i, f in enumerate(advice or []):
        ks = (f.get("evidence") or {}).get("kernels") or []
        out[i] = {(k.get("name"), k.get("phase"), k.get("direction")) for k in ks}
    return out


def sites_block(kt: Any, calls: list[Call], names: list, entries: list[LedgerEntry], rep: dict) -> list[dict]:
    cols = _Cols(kt)
    is_core, backward = cols.among("phase", _CORE), cols.among("direction", ("backward",))
    nm_codes, nm_vocab = cols.codes("name")
    dt_codes, dt_vocab = cols.codes("dtype")
    dur = np.nan_to_num(cols.num("dur_us"))
    flops, nbytes = cols.num("flops"), cols.num("bytes")
    extras = getattr(kt, "extras", {}) or {}
    att_time = float(rep.get("attention_time_us") or 0.0)
    out = []
    for s, sn in enumerate(names):
        mine = [c for c in calls if c.site == s]
        rows = np.concatenate([c.rows for c in mine]) if mine else np.zeros(0, dtype=np.int64)
        bwd, core = backward[rows], is_core[rows]
        t = float(dur[rows].sum())
        btime = {}
        for b in BOUNDS:
            v = float(dur[rows][cols.among("bound", (b,))[rows]].sum())
            if v > 0:
                btime[b] = _r(v)
        known = ~np.isnan(flops[rows]) & ~np.isnan(nbytes[rows])
        es = [e for e in entries if e.site == s]
        backends: dict[str, float] = {}
        for e in es:
            if e.backend:
                backends[e.backend] = backends.get(e.backend, 0.0) + e.time_us
        shapes: dict[tuple[Any, ...], int] = {}
        for e in es:
            if e.direction == "forward" and e.geometry is not None:
                g = e.geometry
                gk: tuple[Any, ...] = (g.b, g.h, g.hk, g.sq, g.sk, g.d, g.dv, g.mask.label())
                shapes[gk] = shapes.get(gk, 0) + 1
        if not shapes:  # no geometry: the recorded inputs of its longest core kernel
            for c in mine:
                core_rows = c.rows[is_core[c.rows]].tolist()
                if core_rows:
                    x = max(core_rows, key=lambda r: dur[r])
                    sh = (extras.get(x) or {}).get("shapes")
                    if sh:
                        ik: tuple[Any, ...] = ("inputs", str(sh))
                        shapes[ik] = shapes.get(ik, 0) + 1
        shape_rows: list[dict[str, Any]] = []
        for key, n in sorted(shapes.items(), key=lambda kv: -kv[1])[:TOP_SHAPES]:
            if key[0] == "inputs":
                shape_rows.append({"inputs": key[1], "calls": n})
            else:
                shape_rows.append(dict(zip(("b", "h", "hk", "sq", "sk", "d", "dv", "mask"), key), calls=n))
        srcs: dict[str, float] = {}
        for c in mine:
            if c.place.source:
                srcs[c.place.source] = srcs.get(c.place.source, 0.0) + float(dur[c.rows].sum())
        dts: dict[str, float] = {}
        for x in rows[core].tolist():
            v = dt_vocab[dt_codes[x]]
            if v:
                dts[v] = dts.get(v, 0.0) + dur[x]
        led = _totals(es)
        out.append(
            {
                "id": s,
                "name": sn.name,
                "kind": sn.kind,
                "calls": len(mine),
                "layers": len({c.place.modules for c in mine if c.place.modules}) or None,
                "time_us": _r(t),
                "forward_us": _r(float(dur[rows][~bwd].sum())),
                "backward_us": _r(float(dur[rows][bwd].sum())),
                "core_us": _r(float(dur[rows][core].sum())),
                "share": _r(t / att_time, 4) if att_time > 0 else None,
                "kernels": int(len(rows)),
                "shapes": shape_rows,
                "dtype": max(dts, key=dts.__getitem__) if dts else None,
                "backends": [
                    {"backend": b, "label": BACKEND_LABELS.get(b, b), "time_us": _r(v)}
                    for b, v in sorted(backends.items(), key=lambda kv: -kv[1])
                ],
                "bound": _bound_of(rows[core] if core.any() else rows, cols),
                "roofline": _roofline_of(rows[core] if core.any() else rows, cols),
                "bound_time_us": btime,
                "flops": _sig(float(np.nansum(flops[rows][known]))) if known.any() else None,
                "bytes": _sig(float(np.nansum(nbytes[rows][known]))) if known.any() else None,
                "cost_coverage": _r(float(dur[rows][known].sum()) / t, 4) if t > 0 else None,
                "useful": led["useful"],
                "executed": led["executed"],
                "dense": led["dense"],
                "mfu": led["mfu"],
                "source": max(srcs, key=srcs.__getitem__) if srcs else None,
                "top_finding": None,  # attach_top_findings, once advice has run
            }
        )
    order = sorted(range(len(out)), key=lambda i: -(out[i]["time_us"] or 0.0))
    return [out[i] for i in order]


def attach_top_findings(rep: dict) -> None:
    """Set each site's ``top_finding``: the most severe (then largest-gain) advice finding citing
    one of the site's kernels (by name, phase and direction, as findings cite them)."""
    kt = rep.get("kernels")
    sites = rep.get("sites") or []
    advice = rep.get("advice") or []
    if kt is None or not hasattr(kt, "columns") or not sites or not advice:
        return
    cols = _Cols(kt)
    site_c, site_v = cols.codes("site")
    nm_c, nm_v = cols.codes("name")
    ph_c, ph_v = cols.codes("phase")
    dir_c, dir_v = cols.codes("direction")
    keys: dict[str, set] = {}
    for x in np.flatnonzero(np.asarray([v is not None for v in site_v])[site_c]).tolist():
        keys.setdefault(site_v[site_c[x]], set()).add((nm_v[nm_c[x]], ph_v[ph_c[x]], dir_v[dir_c[x]]))
    cited = _cited(advice)
    order = sorted(cited, key=lambda i: _rank(advice[i]))
    for s in sites:
        kset = keys.get(s["name"], set())
        for i in order:
            if cited[i] & kset:
                f = advice[i]
                s["top_finding"] = {"id": f.get("id"), "severity": f.get("severity"), "title": f.get("title")}
                break


def _site_column(kt: Any, calls: list[Call], names: list) -> Coded:
    codes = np.full(len(kt), len(names), dtype=np.int32)
    for c in calls:
        codes[c.rows] = c.site
    return Coded(codes, [n.name for n in names] + [None])


def build(rep: dict, trace: Any = None, links: Any = None, attr: Any = None) -> dict:
    """``sites``, ``flops_ledger`` and ``boundary`` of a report (sets the kernel table's ``site``
    column)."""
    kt = rep.get("kernels")
    if kt is None or not hasattr(kt, "columns"):
        return {"sites": [], "flops_ledger": None, "boundary": None}
    calls = calls_of(kt)
    _places(kt, calls)
    site_of, names = name_sites([c.place for c in calls])
    for c, s in zip(calls, site_of):
        c.site = s
    kt.columns["site"] = _site_column(kt, calls, names)
    entries = ledger_entries(kt, calls, trace, links, attr)
    bw = ((rep.get("device") or {}).get("peaks") or {}).get("memory_bandwidth")
    return {
        "sites": sites_block(kt, calls, names, entries, rep),
        "flops_ledger": flops_ledger(kt, entries, rep.get("steps") or [], len(names)),
        "boundary": boundary_block(kt, calls, attr, bw),
    }
