"""Compact, query-ready form of one report, built where the analysis runs.

A report of a big trace holds 100k+ kernel rows; as Python dicts that is hundreds of MB. Here
the rows are kept as one msgpack blob with offsets (decoded only for the page asked for) next
to numpy columns for filtering and sorting, so a filtered, sorted page of 100k kernels takes a
few milliseconds and the memory is about the size of the msgpack encoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import msgspec
import numpy as np

# numeric columns that the kernel table sorts on (null -> NaN)
NUMERIC = ("id", "ts", "dur_us", "flops", "bytes", "intensity", "achieved_flops_per_s",
           "achieved_bytes_per_s", "compute_util", "memory_util", "occupancy_pct")
# categorical columns (value -> small int code; null -> -1)
CATEGORICAL = ("phase", "direction", "bound", "kind", "step", "peak", "dtype", "tag_source")
# text columns searched by ``q`` and sortable by their text
TEXT = ("name", "module_path", "op")
SORT_KEYS = NUMERIC + CATEGORICAL + TEXT + ("attention",)
BOUNDS = ("memory", "compute", "latency", "unknown")

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


@dataclass
class KernelTable:
    n: int
    blob: bytes
    offsets: np.ndarray                      # n+1 int64
    num: dict                                # name -> float64 array
    cat: dict                                # name -> int16 codes
    cat_values: dict                         # name -> list of values (code -> value)
    text: dict                               # name -> int32 codes
    text_values: dict                        # name -> list of strings (code -> text)
    attention: np.ndarray                    # bool
    _lower: dict = field(default_factory=dict, repr=False)
    _rank: dict = field(default_factory=dict, repr=False)

    def __getstate__(self):                  # memo caches are not pickled across processes
        d = dict(self.__dict__)
        d["_lower"], d["_rank"] = {}, {}
        return d

    def row(self, i: int) -> dict:
        return _dec.decode(self.blob[self.offsets[i]:self.offsets[i + 1]])

    def rows(self, idx) -> list:
        return [self.row(int(i)) for i in idx]

    def nbytes(self) -> int:
        total = len(self.blob) + self.offsets.nbytes + self.attention.nbytes
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
        """The full report again, keys in the engine's order."""
        out = {}
        for k in self.key_order:
            out[k] = self.kernels.rows(range(self.kernels.n)) if k == "kernels" else self.summary[k]
        return out


def _f(v) -> float:
    if v is None or isinstance(v, bool):
        return np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def build(report: dict) -> Loaded:
    """The compact form of an ``ok`` report."""
    rows = report.get("kernels") or []
    n = len(rows)
    parts = []
    offsets = np.zeros(n + 1, dtype=np.int64)
    pos = 0
    num = {c: np.empty(n, dtype=np.float64) for c in NUMERIC}
    cat_maps = {c: {} for c in CATEGORICAL}
    cat = {c: np.empty(n, dtype=np.int16) for c in CATEGORICAL}
    text_maps = {c: {} for c in TEXT}
    text = {c: np.empty(n, dtype=np.int32) for c in TEXT}
    attention = np.zeros(n, dtype=bool)
    for i, r in enumerate(rows):
        b = _enc.encode(r)
        parts.append(b)
        pos += len(b)
        offsets[i + 1] = pos
        for c in NUMERIC:
            num[c][i] = _f(r.get(c))
        for c in CATEGORICAL:
            v = r.get(c)
            if v is None:
                cat[c][i] = -1
            else:
                m = cat_maps[c]
                code = m.get(v)
                if code is None:
                    code = m[v] = len(m)
                cat[c][i] = code
        for c in TEXT:
            v = r.get(c)
            v = "" if v is None else str(v)
            m = text_maps[c]
            code = m.get(v)
            if code is None:
                code = m[v] = len(m)
            text[c][i] = code
        attention[i] = bool(r.get("attention"))
    table = KernelTable(
        n=n, blob=b"".join(parts), offsets=offsets, num=num, cat=cat,
        cat_values={c: list(m) for c, m in cat_maps.items()}, text=text,
        text_values={c: list(m) for c, m in text_maps.items()}, attention=attention)
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
    scope: str = "attention"          # attention | all | other
    q: str = ""


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
    if q.q:
        needle = q.q.lower()
        hit = np.zeros(t.n, dtype=bool)
        for col in TEXT:
            codes = [i for i, s in enumerate(t.lower(col)) if needle in s]
            if codes:
                hit |= np.isin(t.text[col], np.array(codes, dtype=np.int32))
        m &= hit
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
    page = idx[q.offset:q.offset + q.limit]
    return {"total": int(len(idx)), "total_time_us": round(total_time, 3), "all": t.n,
            "offset": q.offset, "limit": q.limit, "sort": q.sort,
            "order": "desc" if q.descending else "asc", "rows": t.rows(page)}


def facets(t: KernelTable) -> dict:
    """Values present, for the filter menus."""
    out = {}
    for c in ("phase", "direction", "bound", "kind"):
        out[c] = sorted(v for v in t.cat_values[c] if v is not None)
    return out


def find_kernel(t: KernelTable, kid: int) -> Optional[dict]:
    ids = t.num["id"]
    pos = int(np.searchsorted(ids, kid))
    if pos < t.n and ids[pos] == kid:
        return t.row(pos)
    hits = np.flatnonzero(ids == kid)       # ids are ascending in engine output; be safe anyway
    return t.row(int(hits[0])) if len(hits) else None


# ---------------------------------------------------------------- roofline

_POINT_FIELDS = ("name", "phase", "direction", "dtype", "peak", "bound", "bound_reason", "module_path",
                 "op", "cost_op", "shapes", "cost_detail", "estimated", "id", "kind")


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
        keys = np.stack([t.text["name"][idx].astype(np.int64), t.cat["phase"][idx].astype(np.int64),
                         t.cat["direction"][idx].astype(np.int64), t.cat["peak"][idx].astype(np.int64)], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
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
        for gi in order[:limit].tolist():
            r = t.row(int(rep[gi]))
            points.append(_point(r, int(g_n[gi]), float(g_time[gi]), float(g_fl[gi]), float(g_by[gi]), device))
        shown = min(len(uniq), limit)
        truncated = len(uniq) - shown
    else:
        order = idx[np.argsort(-dur[idx], kind="stable")]
        for i in order[:limit].tolist():
            r = t.row(i)
            points.append(_point(r, 1, float(dur[i]), float(fl[i]), float(by[i]), device))
        truncated = max(0, len(idx) - limit)
    peaks = device.get("peaks") or {}
    flops_roofs = peaks.get("flops") or {}
    used = sorted({p["peak"] for p in points if p.get("peak")})
    roofs = {"memory_bandwidth": peaks.get("memory_bandwidth"),
             "compute": {k: flops_roofs.get(k) for k in used if flops_roofs.get(k)}}
    return {
        "device": {k: device.get(k) for k in ("name", "label", "key", "basis", "num_sms")},
        "roofs": roofs,
        "all_compute_roofs": {k: v for k, v in flops_roofs.items() if v},
        "grouped": bool(group), "scope": scope, "points": points,
        "omitted": {"unknown_cost": int(unknown.sum()), "unknown_cost_time_us": round(float(np.nansum(dur[unknown])), 3),
                    "zero_flops": int(zero_flops.sum()), "zero_flops_time_us": round(float(np.nansum(dur[zero_flops])), 3),
                    "over_limit": int(truncated)},
        "thresholds": loaded.summary.get("thresholds"),
    }


def _code(t: KernelTable, col: str, value) -> int:
    try:
        return t.cat_values[col].index(value)
    except ValueError:
        return -2


def _point(r: dict, n: int, time_us: float, flops: float, nbytes: float, device: dict) -> dict:
    sec = time_us * 1e-6
    afl = flops / sec if sec > 0 else None
    aby = nbytes / sec if sec > 0 else None
    peaks = (device.get("peaks") or {})
    pf = (peaks.get("flops") or {}).get(r.get("peak")) if r.get("peak") else None
    bw = peaks.get("memory_bandwidth")
    p = {k: r.get(k) for k in _POINT_FIELDS}
    p.update({
        "count": n, "time_us": round(time_us, 3), "flops": flops, "bytes": nbytes,
        "intensity": flops / nbytes if nbytes > 0 else None,
        "achieved_flops_per_s": afl, "achieved_bytes_per_s": aby,
        "compute_util": (afl / pf) if (afl is not None and pf) else (r.get("compute_util") if n == 1 else None),
        "memory_util": (aby / bw) if (aby is not None and bw) else (r.get("memory_util") if n == 1 else None),
    })
    if n > 1:
        p["id"] = None
    return p
