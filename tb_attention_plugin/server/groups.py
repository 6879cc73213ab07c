"""The kernel table grouped by kernel: one row per (kernel name, phase, direction) of the
launches a ``/kernels`` query selects (``group=1``), with its calls, total, mean, min and max
time, Tensor Core use, mean occupancy and the bound holding most of its time; sorted and
paginated here like the launches (a trace of 100k launches has a few hundred such rows).

Tensor Core use is read from the roof the classifier put each launch on (``peak``): a matrix
engine peak (roofline/devices.py ``MATRIX_PEAKS``) is given only to a matmul-like or fused
attention kernel of that dtype (roofline/classify.py ``peak_key``); an elementwise kernel of a
bf16 tensor is on the fp32 vector roof, a copy on none.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..roofline.devices import MATRIX_PEAKS  # the peak table alone: no engine in TensorBoard's process
from .index import KernelQuery, KernelTable, filter_mask

GROUP_SORT_KEYS = (
    "total_us",
    "calls",
    "mean_us",
    "min_us",
    "max_us",
    "tensor_core",
    "occupancy_pct",
    "name",
    "op",
    "module_path",
    "phase",
    "direction",
    "bound",
)
GROUP_DESCENDING = ("total_us", "calls", "mean_us", "min_us", "max_us", "tensor_core", "occupancy_pct")


def _codes(t: KernelTable, col: str, idx: np.ndarray) -> np.ndarray:
    """A categorical column's codes shifted by one (null -> 0), as int64."""
    return t.cat[col][idx].astype(np.int64) + 1


def _per_group(inv: np.ndarray, g: int, codes: np.ndarray, n: int, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """(g, n) table: per group, the count (or the sum of ``weights``) of each code 0..n-1."""
    flat = np.bincount(inv * n + codes, weights=weights, minlength=g * n)
    return flat.reshape(g, n)


class _Groups:
    """The groups of the launches ``idx`` (positions in the table), with their figures as arrays."""

    def __init__(self, t: KernelTable, idx: np.ndarray):
        self.t = t
        dur = t.num["dur_us"][idx]
        dur0 = np.where(np.isnan(dur), 0.0, dur)
        n_phase = len(t.cat_values["phase"]) + 1
        n_dir = len(t.cat_values["direction"]) + 1
        name = t.text["name"][idx].astype(np.int64)
        key = (name * n_phase + _codes(t, "phase", idx)) * n_dir + _codes(t, "direction", idx)
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.reshape(-1)
        g = self.n = len(uniq)
        self.name = uniq // (n_phase * n_dir)
        self.phase = (uniq // n_dir) % n_phase - 1  # categorical codes again (-1: null)
        self.direction = uniq % n_dir - 1
        self.calls = np.bincount(inv, minlength=g)
        self.total = np.bincount(inv, weights=dur0, minlength=g)
        self.mean = self.total / np.maximum(self.calls, 1)
        self.min = np.full(g, np.inf)
        np.minimum.at(self.min, inv, np.where(np.isnan(dur), np.inf, dur))
        self.max = np.full(g, -np.inf)
        np.maximum.at(self.max, inv, np.where(np.isnan(dur), -np.inf, dur))
        occ = t.num["occupancy_pct"][idx]
        has_occ = ~np.isnan(occ)
        self.occ_calls = np.bincount(inv[has_occ], minlength=g)
        occ_sum = np.bincount(inv[has_occ], weights=occ[has_occ], minlength=g)
        self.occupancy = np.where(self.occ_calls > 0, occ_sum / np.maximum(self.occ_calls, 1), np.nan)
        peaks = t.cat_values["peak"]
        self.peak_calls = _per_group(inv, g, _codes(t, "peak", idx), len(peaks) + 1)  # column 0: no roof
        matrix = np.array([0] + [1 if p in MATRIX_PEAKS else 0 for p in peaks], dtype=np.int64)
        self.tc_calls = (self.peak_calls * matrix).sum(axis=1)
        self.roof_calls = self.calls - self.peak_calls[:, 0]
        # the Tensor Core share: of the launches with an arithmetic roof (NaN: none has one)
        self.tc_share = np.where(self.roof_calls > 0, self.tc_calls / np.maximum(self.roof_calls, 1), np.nan)
        dtypes = t.cat_values["dtype"]
        self.dtype_calls = _per_group(inv, g, _codes(t, "dtype", idx), len(dtypes) + 1)
        bounds = t.cat_values["bound"]
        self.bound_time = _per_group(inv, g, _codes(t, "bound", idx), len(bounds) + 1, dur0)
        self.bound_calls = _per_group(inv, g, _codes(t, "bound", idx), len(bounds) + 1)
        self.bound = np.argmax(self.bound_time + self.bound_calls * 1e-9, axis=1) - 1  # most time (null: -1)
        # the longest launch of each group: its row stands for the group (source, op, details)
        order = np.lexsort((-dur0, inv))
        first = np.ones(len(order), dtype=bool)
        first[1:] = inv[order][1:] != inv[order][:-1]
        self.longest = idx[order[first]]

    def sort_key(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, null) of a sort key, per group."""
        t = self.t
        if key == "name":
            return t.rank("name")[self.name].astype(np.float64), np.zeros(self.n, dtype=bool)
        if key in ("op", "module_path"):  # the longest launch's, as the row shows it
            return t.rank(key)[t.text[key][self.longest]].astype(np.float64), np.zeros(self.n, dtype=bool)
        if key in ("phase", "direction", "bound"):
            codes = {"phase": self.phase, "direction": self.direction, "bound": self.bound}[key]
            null = codes < 0
            return np.where(null, 0, t.rank(key)[np.maximum(codes, 0)]).astype(np.float64), null
        v = {
            "total_us": self.total,
            "calls": self.calls.astype(np.float64),
            "mean_us": self.mean,
            "min_us": self.min,
            "max_us": self.max,
            "tensor_core": self.tc_share,
            "occupancy_pct": self.occupancy,
        }[key]
        null = np.isnan(v)
        return np.where(null, 0.0, v), null

    def order(self, key: str, descending: bool) -> np.ndarray:
        """Groups sorted by ``key``; nulls last either way; ties by total time, then by the trace
        order of their longest launch."""
        v, null = self.sort_key(key)
        if descending:
            v = -v
        return np.lexsort((self.longest, -self.total, v, null))


def _r(x: float) -> Optional[float]:
    return None if x is None or not np.isfinite(x) else round(float(x), 3)


def _counts(t: KernelTable, col: str, row: np.ndarray) -> dict[str, int]:
    """{value: launches} of a categorical column for one group (null left out)."""
    vals = t.cat_values[col]
    return {str(vals[i - 1]): int(c) for i, c in enumerate(row.tolist()) if i > 0 and c}


def _row(gr: _Groups, i: int, longest: dict[str, Any], total_time: float) -> dict[str, Any]:
    t = gr.t
    bounds = t.cat_values["bound"]
    return {
        "id": longest.get("id"),  # the longest launch's: one per group
        "name": longest.get("name"),
        "kind": longest.get("kind"),
        "attention": bool(longest.get("attention")),
        "phase": longest.get("phase"),
        "direction": longest.get("direction"),
        "calls": int(gr.calls[i]),
        "total_us": _r(gr.total[i]),
        "mean_us": _r(gr.mean[i]),
        "min_us": _r(gr.min[i]),
        "max_us": _r(gr.max[i]),
        "share": _r(gr.total[i] / total_time) if total_time > 0 else None,
        "tensor_core_calls": int(gr.tc_calls[i]),
        "roof_calls": int(gr.roof_calls[i]),
        "peaks": _counts(t, "peak", gr.peak_calls[i]),
        "dtypes": _counts(t, "dtype", gr.dtype_calls[i]),
        "occupancy_pct": _r(gr.occupancy[i]),
        "occupancy_calls": int(gr.occ_calls[i]),
        "bound": str(bounds[gr.bound[i]]) if gr.bound[i] >= 0 else "unknown",
        "bound_time_us": {
            str(bounds[j - 1]): _r(v) for j, v in enumerate(gr.bound_time[i].tolist()) if j > 0 and gr.bound_calls[i][j]
        },
        "longest": longest,
    }


def query_groups(t: KernelTable, q: KernelQuery) -> dict[str, Any]:
    """A sorted page of the groups of the launches ``q`` selects (``q.sort`` a GROUP_SORT_KEYS key)."""
    sort = q.sort if q.sort in GROUP_SORT_KEYS else "total_us"
    idx = np.flatnonzero(filter_mask(t, q))
    total_time = float(np.nansum(t.num["dur_us"][idx])) if len(idx) else 0.0
    rows: list[dict[str, Any]] = []
    n = 0
    if len(idx):
        gr = _Groups(t, idx)
        n = gr.n
        page = gr.order(sort, q.descending)[q.offset : q.offset + q.limit]
        longest = t.rows(gr.longest[page])
        rows = [_row(gr, int(i), lr, total_time) for i, lr in zip(page, longest)]
    return {
        "grouped": True,
        "total": int(n),
        "launches": int(len(idx)),
        "total_time_us": round(total_time, 3),
        "all": t.n,
        "offset": q.offset,
        "limit": q.limit,
        "sort": sort,
        "order": "desc" if q.descending else "asc",
        "rows": rows,
    }
