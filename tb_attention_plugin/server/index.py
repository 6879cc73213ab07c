"""Compact, query-ready form of one report, built where the analysis runs.

A report of a big trace holds 100k+ kernel rows; as Python dicts that is hundreds of MB. Here
the rows are kept as one msgpack blob with offsets (decoded only for the page asked for) next
to numpy columns for filtering and sorting, so a filtered, sorted page of 100k kernels takes a
few milliseconds and the memory is about the size of the msgpack encoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import msgspec
import numpy as np

from ..attention import vocabulary as V
from ..trace.arrays import unique_ints

# numeric columns that the kernel table sorts on (null -> NaN)
NUMERIC = (
    "id",
    "ts",
    "dur_us",
    "flops",
    "bytes",
    "intensity",
    "achieved_flops_per_s",
    "achieved_bytes_per_s",
    "compute_util",
    "memory_util",
    "occupancy_pct",
)
# categorical columns (value -> small int code; null -> -1)
CATEGORICAL = ("phase", "direction", "bound", "kind", "step", "peak", "dtype", "tag_source", "site")
# text columns searched by ``q`` and sortable by their text
TEXT = ("name", "module_path", "op")
SORT_KEYS = NUMERIC + CATEGORICAL + TEXT + ("attention",)
BOUNDS = V.BOUNDS

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class _PackedRows:
    """Rows as one msgpack blob + offsets (for reports whose kernels are a list of dicts)."""

    def __init__(self, rows: list):
        parts = []
        self.offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        pos = 0
        for i, r in enumerate(rows):
            b = _enc.encode(r)
            parts.append(b)
            pos += len(b)
            self.offsets[i + 1] = pos
        self.blob = b"".join(parts)

    def rows(self, idx, fields=None) -> list:
        """Row dicts (whole: ``fields`` is accepted for the interface and ignored)."""
        o, b = self.offsets, self.blob
        return [_dec.decode(b[o[i] : o[i + 1]]) for i in (int(x) for x in idx)]

    def nbytes(self) -> int:
        return len(self.blob) + self.offsets.nbytes


class _EngineRows:
    """The engine's columnar table (``report["kernels"]`` with ``.columns``): rows on demand."""

    def __init__(self, table):
        self.table = table

    def rows(self, idx, fields=None) -> list:
        """Row dicts; only ``fields`` (those the table has) when given."""
        idx = np.asarray(list(idx) if not isinstance(idx, np.ndarray) else idx, dtype=np.int64)
        return self.table.rows(idx, fields=fields) if len(idx) else []

    def nbytes(self) -> int:
        total = 0
        for c in self.table.columns.values():
            if isinstance(c, np.ndarray):
                total += c.nbytes
            elif hasattr(c, "codes"):
                total += c.codes.nbytes + sum(len(v or "") + 50 for v in c.vocab)
            else:
                total += 64 * len(c)
        return total + 400 * len(getattr(self.table, "extras", {}) or {})


@dataclass
class KernelTable:
    n: int
    store: Union[_PackedRows, _EngineRows]
    num: dict  # name -> float64 array
    cat: dict  # name -> int16 codes (-1 = null)
    cat_values: dict  # name -> list of values (code -> value)
    text: dict  # name -> int32 codes
    text_values: dict  # name -> list of strings (code -> text)
    attention: np.ndarray  # bool
    measured: Optional[np.ndarray] = None  # bool: the row's bound comes from hardware counters
    _lower: dict = field(default_factory=dict, repr=False)
    _rank: dict = field(default_factory=dict, repr=False)
    memo: dict = field(default_factory=dict, repr=False)  # derived views (server/timeline.py)

    def __getstate__(self):  # memo caches are not pickled across processes
        d = dict(self.__dict__)
        d["_lower"], d["_rank"], d["memo"] = {}, {}, {}
        return d

    def row(self, i: int) -> dict:
        return self.store.rows([i])[0]

    def rows(self, idx) -> list:
        return self.store.rows(idx)

    def nbytes(self) -> int:
        total = self.store.nbytes() + self.attention.nbytes
        total += sum(a.nbytes for a in self.num.values()) + sum(a.nbytes for a in self.cat.values())
        total += sum(a.nbytes for a in self.text.values())
        total += sum(sum(len(s) + 50 for s in v) for v in self.text_values.values())
        return total

    def lower(self, col: str) -> list:
        v = self._lower.get(col)
        if v is None:
            v = [s.lower() for s in self.text_values[col]]
            self._lower[col] = v
        return v

    def rank(self, col: str) -> np.ndarray:
        """Sort rank of each code of a text or categorical column (alphabetical)."""
        r = self._rank.get(col)
        if r is None:
            vals = self.text_values[col] if col in self.text else self.cat_values[col]
            order = sorted(range(len(vals)), key=lambda i: str(vals[i]).lower())
            r = np.empty(len(vals), dtype=np.int64)
            r[order] = np.arange(len(vals))
            self._rank[col] = r
        return r


@dataclass
class Loaded:
    """A report without its kernel rows (``summary``) plus the kernel table."""

    summary: dict
    key_order: list
    kernels: KernelTable

    def nbytes(self) -> int:
        return self.kernels.nbytes() + 4096 + 200 * len(self.summary.get("phases") or ())

    def report(self) -> dict:
        """The full report again, keys in the engine's order (``kernels`` is the engine's own
        table when it gave one, else a list of row dicts)."""
        out = {}
        store = self.kernels.store
        for k in self.key_order:
            if k == "kernels":
                out[k] = store.table if isinstance(store, _EngineRows) else self.kernels.rows(range(self.kernels.n))
            else:
                out[k] = self.summary[k]
        return out


def _f(v) -> float:
    if v is None or isinstance(v, bool):
        return np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def _coded(values: list, null_code: bool) -> tuple[np.ndarray, list]:
    m: dict = {}
    codes = np.empty(len(values), dtype=np.int32)
    for i, v in enumerate(values):
        if v is None and null_code:
            codes[i] = -1
            continue
        if v is None:
            v = ""
        c = m.get(v)
        if c is None:
            c = m[v] = len(m)
        codes[i] = c
    return codes, list(m)


def _engine_column(table, name: str):
    """('num', float array) | ('coded', codes, vocab) | ('list', values) of an engine column."""
    c = table.columns.get(name) if hasattr(table, "columns") else None
    if isinstance(c, np.ndarray):
        return ("num", c)
    if c is not None and hasattr(c, "codes") and hasattr(c, "vocab"):
        return ("coded", np.asarray(c.codes), list(c.vocab))
    return ("list", table.column(name) if hasattr(table, "column") else [r.get(name) for r in table])


def _from_coded(codes: np.ndarray, vocab: list, null_code: bool) -> tuple[np.ndarray, list]:
    """Recode so that None is -1 (categorical) or "" (text), other values keep their order."""
    vocab = list(vocab)
    remap = np.arange(len(vocab), dtype=np.int64)
    values: list[Any] = []
    for i, v in enumerate(vocab):
        if v is None and null_code:
            remap[i] = -1
            continue
        v = "" if v is None else v
        remap[i] = len(values)
        values.append(v)
    out = remap[codes] if len(vocab) else np.zeros(len(codes), dtype=np.int64)
    return out.astype(np.int32), values


def build(report: dict) -> Loaded:
    """The compact form of an ``ok`` report. Uses the engine's columns when ``kernels`` is its
    columnar table; a plain list of row dicts is packed into msgpack."""
    kt = report.get("kernels")
    if kt is None:
        kt = []
    engine = hasattr(kt, "columns") and hasattr(kt, "rows")
    rows: list[Any] = [] if engine else list(kt)
    n = len(kt)

    def column(name: str):
        if engine:
            return _engine_column(kt, name)
        return ("list", [r.get(name) for r in rows])

    num = {}
    for c in NUMERIC:
        col = column(c)
        if col[0] == "num":
            num[c] = np.asarray(col[1], dtype=np.float64)
        else:
            vals = col[1] if col[0] == "list" else [col[2][x] for x in col[1]]
            num[c] = np.fromiter((_f(v) for v in vals), dtype=np.float64, count=n)
    cat, cat_values = {}, {}
    for c in CATEGORICAL:
        col = column(c)
        codes, vals = _from_coded(col[1], col[2], True) if col[0] == "coded" else _coded(list(col[1]), True)
        cat[c], cat_values[c] = codes.astype(np.int16), vals
    text, text_values = {}, {}
    for c in TEXT:
        col = column(c)
        if col[0] == "coded":
            codes, vals = _from_coded(col[1], col[2], False)
        else:
            codes, vals = _coded([None if v is None else str(v) for v in col[1]], False)
        text[c], text_values[c] = codes, vals
    att = column("attention")
    if att[0] == "num":
        attention = np.asarray(att[1], dtype=bool)
    elif att[0] == "coded":
        attention = np.asarray([bool(att[2][x]) for x in att[1]], dtype=bool)
    else:
        attention = np.asarray([bool(v) for v in att[1]], dtype=bool)
    store = _EngineRows(kt) if engine else _PackedRows(rows)
    mcol = column("measured")
    measured = np.fromiter((v is not None for v in mcol[1]), dtype=bool, count=n) if mcol[0] == "list" else None
    table = KernelTable(
        n=n,
        store=store,
        num=num,
        cat=cat,
        cat_values=cat_values,
        text=text,
        text_values=text_values,
        attention=attention,
        measured=measured if measured is not None and measured.any() else None,
    )
    summary = {k: v for k, v in report.items() if k != "kernels"}
    return Loaded(summary=summary, key_order=list(report.keys()), kernels=table)


# ---------------------------------------------------------------- queries


@dataclass
class KernelQuery:
    offset: int = 0
    limit: int = 50
    sort: str = "dur_us"
    descending: bool = True
    phase: Optional[list] = None
    direction: Optional[str] = None
    bound: Optional[list] = None
    kind: Optional[str] = None
    scope: str = "attention"  # attention | all | other
    q: str = ""
    site: str = ""  # an attention site's name (report ``sites``, kernel rows' ``site``)
    name: str = ""  # exactly this kernel name (a click-through names one kernel, not a search)
    name_of: int = -1  # a kernel id: views.kernels filters by that kernel's name (short page URLs)
    group: bool = False  # one row per (kernel name, phase, direction): server/groups.py


def _cat_mask(t: KernelTable, col: str, values: list) -> np.ndarray:
    codes = [i for i, v in enumerate(t.cat_values[col]) if v in values]
    if "none" in values or None in values:
        codes.append(-1)
    return np.isin(t.cat[col], np.array(codes, dtype=np.int16)) if codes else np.zeros(t.n, dtype=bool)


def filter_mask(t: KernelTable, q: KernelQuery) -> np.ndarray:
    m = np.ones(t.n, dtype=bool)
    if q.scope == "attention":
        m &= t.attention
    elif q.scope == "other":
        m &= ~t.attention
    if q.phase:
        m &= _cat_mask(t, "phase", q.phase)
    if q.direction:
        m &= _cat_mask(t, "direction", [q.direction])
    if q.bound:
        m &= _cat_mask(t, "bound", q.bound)
    if q.kind:
        m &= _cat_mask(t, "kind", [q.kind])
    if q.site:
        m &= _cat_mask(t, "site", [q.site])
    if q.q:
        needle = q.q.lower()
        hit = np.zeros(t.n, dtype=bool)
        for col in TEXT:
            codes = [i for i, s in enumerate(t.lower(col)) if needle in s]
            if codes:
                hit |= np.isin(t.text[col], np.array(codes, dtype=np.int32))
        m &= hit
    if q.name:
        vals = t.text_values["name"]
        codes = [i for i, s in enumerate(vals) if s == q.name]
        m &= np.isin(t.text["name"], np.array(codes, dtype=np.int32)) if codes else np.zeros(t.n, dtype=bool)
    return m


def sort_order(t: KernelTable, idx: np.ndarray, key: str, descending: bool) -> np.ndarray:
    """``idx`` sorted by ``key``; nulls last in both directions; ties by trace order."""
    if key in NUMERIC:
        v = t.num[key][idx]
        null = np.isnan(v)
        v = np.where(null, 0.0, v)
    elif key in CATEGORICAL or key in TEXT:
        codes = (t.cat if key in CATEGORICAL else t.text)[key][idx].astype(np.int64)
        null = codes < 0 if key in CATEGORICAL else np.zeros(len(idx), dtype=bool)
        rank = t.rank(key)
        v = np.where(null, 0, rank[np.maximum(codes, 0)]).astype(np.float64)
    elif key == "attention":
        v = t.attention[idx].astype(np.float64)
        null = np.zeros(len(idx), dtype=bool)
    else:
        raise KeyError(key)
    if descending:
        v = -v
    order = np.lexsort((idx, v, null))
    return idx[order]


def query_kernels(t: KernelTable, q: KernelQuery) -> dict:
    mask = filter_mask(t, q)
    idx = np.flatnonzero(mask)
    total_time = float(np.nansum(t.num["dur_us"][idx])) if len(idx) else 0.0
    if q.sort:
        idx = sort_order(t, idx, q.sort, q.descending)
    page = idx[q.offset : q.offset + q.limit]
    return {
        "total": int(len(idx)),
        "total_time_us": round(total_time, 3),
        "all": t.n,
        "offset": q.offset,
        "limit": q.limit,
        "sort": q.sort,
        "order": "desc" if q.descending else "asc",
        "rows": t.rows(page),
    }


def facets(t: KernelTable) -> dict:
    """Values present, for the filter menus."""
    out = {}
    for c in ("phase", "direction", "bound", "kind"):
        present = unique_ints(t.cat[c])
        vals = t.cat_values[c]
        out[c] = sorted(str(vals[i]) for i in present.tolist() if i >= 0)
    return out


def find_kernel(t: KernelTable, kid: int) -> Optional[dict]:
    hits = np.flatnonzero(t.num["id"] == kid)
    return t.row(int(hits[0])) if len(hits) else None


# ---------------------------------------------------------------- roofline

_POINT_FIELDS = (
    "name",
    "phase",
    "direction",
    "dtype",
    "peak",
    "bound",
    "bound_reason",
    "module_path",
    "op",
    "cost_op",
    "shapes",
    "cost_detail",
    "estimated",
    "id",
    "kind",
    "measured",
    "latency_cause",
    "source",
    "upper_bound",
)  # null until the engine records them


def roofline(loaded: Loaded, scope: str = "attention", group: bool = True, limit: int = 2000) -> dict:
    """Points for the roofline chart and the device's roofs.

    A point needs FLOPs > 0 and bytes > 0 (log axes); the others are counted in ``omitted``.
    With ``group`` kernels of the same name, phase, direction and FLOP roof are merged into one
    point (FLOPs, bytes and time summed; rates over the summed time). At most ``limit`` points,
    the longest first.
    """
    t = loaded.kernels
    base = t.attention.copy() if scope == "attention" else np.ones(t.n, dtype=bool)
    if scope == "other":
        base = ~t.attention
    base &= t.cat["kind"] == _code(t, "kind", "kernel")
    fl, by, dur = t.num["flops"], t.num["bytes"], t.num["dur_us"]
    plottable = base & (fl > 0) & (by > 0) & (dur > 0)
    unknown = base & (np.isnan(fl) | np.isnan(by))
    zero_flops = base & ~unknown & ~plottable
    idx = np.flatnonzero(plottable)
    device = loaded.summary.get("device") or {}
    points = []
    if group and len(idx):
        # one int64 per (name, phase, direction, peak): codes (-1 = null) shifted by one in mixed
        # radix, so the groups come out in the same (lexicographic) order as a row-wise unique,
        # which sorts ~5x slower
        keys = np.zeros(len(idx), dtype=np.int64)
        for codes, n_values in (
            (t.text["name"], len(t.text_values["name"])),
            (t.cat["phase"], len(t.cat_values["phase"])),
            (t.cat["direction"], len(t.cat_values["direction"])),
            (t.cat["peak"], len(t.cat_values["peak"])),
        ):
            keys = keys * (n_values + 1) + (codes[idx].astype(np.int64) + 1)
        uniq, inv = unique_ints(keys, return_inverse=True)
        inv = inv.reshape(-1)
        g_time = np.bincount(inv, weights=dur[idx], minlength=len(uniq))
        g_fl = np.bincount(inv, weights=fl[idx], minlength=len(uniq))
        g_by = np.bincount(inv, weights=by[idx], minlength=len(uniq))
        g_n = np.bincount(inv, minlength=len(uniq))
        # representative kernel: the longest one of the group
        rep = np.full(len(uniq), -1, dtype=np.int64)
        o = np.lexsort((-dur[idx], inv))
        first = np.ones(len(o), dtype=bool)
        first[1:] = inv[o][1:] != inv[o][:-1]
        rep[inv[o][first]] = idx[o][first]
        order = np.argsort(-g_time, kind="stable")
        g_meas = None
        if t.measured is not None:  # groups measured whole: their counters' utilisations, time-weighted
            ms = t.measured[idx]
            g_meas = np.bincount(inv, weights=ms.astype(float), minlength=len(uniq)) == g_n
            w = np.where(ms, dur[idx], 0.0)
            g_cu = np.bincount(inv, weights=np.nan_to_num(t.num["compute_util"][idx]) * w, minlength=len(uniq))
            g_mu = np.bincount(inv, weights=np.nan_to_num(t.num["memory_util"][idx]) * w, minlength=len(uniq))
        shown_groups = order[:limit]
        for gi, r in zip(shown_groups.tolist(), _point_rows(t, rep[shown_groups])):
            utils = (
                (g_cu[gi] / g_time[gi], g_mu[gi] / g_time[gi])
                if g_meas is not None and g_meas[gi] and g_time[gi] > 0
                else None
            )
            points.append(_point(r, int(g_n[gi]), float(g_time[gi]), float(g_fl[gi]), float(g_by[gi]), device, utils))
        shown = min(len(uniq), limit)
        truncated = len(uniq) - shown
    else:
        order = idx[np.argsort(-dur[idx], kind="stable")]
        shown_rows = order[:limit]
        for i, r in zip(shown_rows.tolist(), _point_rows(t, shown_rows)):
            points.append(_point(r, 1, float(dur[i]), float(fl[i]), float(by[i]), device))
        truncated = max(0, len(idx) - limit)
    peaks = device.get("peaks") or {}
    flops_roofs = peaks.get("flops") or {}
    used = sorted({p["peak"] for p in points if p.get("peak")})
    roofs = {
        "memory_bandwidth": peaks.get("memory_bandwidth"),
        "compute": {k: flops_roofs.get(k) for k in used if flops_roofs.get(k)},
    }
    return {
        "device": {k: device.get(k) for k in ("name", "label", "key", "basis", "num_sms")},
        "roofs": roofs,
        "all_compute_roofs": {k: v for k, v in flops_roofs.items() if v},
        "grouped": bool(group),
        "scope": scope,
        "points": points,
        "omitted": {
            "unknown_cost": int(unknown.sum()),
            "unknown_cost_time_us": round(float(np.nansum(dur[unknown])), 3),
            "zero_flops": int(zero_flops.sum()),
            "zero_flops_time_us": round(float(np.nansum(dur[zero_flops])), 3),
            "over_limit": int(truncated),
        },
        "thresholds": loaded.summary.get("thresholds"),
    }


# the row fields that _point reads
_POINT_ROW_FIELDS = _POINT_FIELDS + ("compute_util", "memory_util")


def _point_rows(t: KernelTable, idx: np.ndarray) -> list:
    """The rows of the points, fetched in one batch (a row at a time costs a pass over every
    column per row: ~0.1 ms each, 2000 points ~0.3 s), with only the fields a point needs."""
    return t.store.rows(np.asarray(idx, dtype=np.int64), fields=_POINT_ROW_FIELDS) if len(idx) else []


def _code(t: KernelTable, col: str, value) -> int:
    try:
        return t.cat_values[col].index(value)
    except ValueError:
        return -2


def _cap(u: Optional[float]) -> Optional[float]:
    return None if u is None else min(1.0, u)


def _point(
    r: dict, n: int, time_us: float, flops: float, nbytes: float, device: dict, measured_utils: Optional[tuple] = None
) -> dict:
    sec = time_us * 1e-6
    afl = flops / sec if sec > 0 else None
    aby = nbytes / sec if sec > 0 else None
    peaks = device.get("peaks") or {}
    pf = (peaks.get("flops") or {}).get(r.get("peak")) if r.get("peak") else None
    bw = peaks.get("memory_bandwidth")
    p = {k: r.get(k) for k in _POINT_FIELDS}
    p.update(
        {
            "count": n,
            "time_us": round(time_us, 3),
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes if nbytes > 0 else None,
            "achieved_flops_per_s": afl,
            "achieved_bytes_per_s": aby,
            # a single kernel's utilisations are the classifier's (a bytes-model miss has none); a
            # group's are capped at 1 as the kernel rows are (docs/report-schema.md, compute_util):
            # a group's rate above a roof (dense upper bounds) is shown at it, and a kernel above a
            # roof raised it (device.roof_adjustments); the point's position keeps the estimate
            "compute_util": r.get("compute_util") if n == 1 else _cap(afl / pf if (afl is not None and pf) else None),
            "memory_util": r.get("memory_util") if n == 1 else _cap(aby / bw if (aby is not None and bw) else None),
        }
    )
    if r.get("measured"):
        # hardware counters: the utilisations are the measured ones (the position stays the model's
        # useful FLOPs over its bytes); a group shows them when all its kernels were measured
        if n == 1:
            p["compute_util"], p["memory_util"] = r.get("compute_util"), r.get("memory_util")
        elif measured_utils is not None:
            p["compute_util"], p["memory_util"] = (round(float(x), 4) for x in measured_utils)
        else:
            p["measured"] = None
    p["name_id"] = r.get("id")  # a kernel of this name (a group's longest): /kernels?name_of= (short page URLs)
    if n > 1:
        p["id"] = None
    return p
