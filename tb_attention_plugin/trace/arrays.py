"""Array helpers of the analysis: the stable order of rows by several integer keys, and the
distinct values of an integer column. numpy only (no module of the package), so that every room
can use them: trace/, the report, the table writer."""

from __future__ import annotations

from typing import Any

import numpy as np

LEXORDER_BITS = 62  # a combined key spans at most this many bits (int64, with room for the sign)


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """The stable order of rows by integer ``keys``, the major key first: ``np.lexsort(keys[::-1])``.
    The leading keys whose value ranges fit in one int64 together are combined into one key and
    sorted once, stably; timsort on the trace's nearly time-ordered columns is ~20x faster than
    lexsort's full sort per key (40 ms for thread, start, longest first on 370k ranges). The keys
    left over only break ties of the combined ones, so only the rows in runs of equal combined
    keys are ordered by them (the same way, with the run as their major key): a trace spanning
    minutes has nanosecond starts and durations too wide to combine with the thread, and lexsort
    of all 1.5M ranges of a 1 GB trace took 160 ms where this takes a tenth. Float keys, and a
    leading key wider than an int64 can combine, go to lexsort."""
    if not keys or not len(keys[0]) or any(k.dtype.kind not in "biu" for k in keys):
        return np.lexsort(keys[::-1])
    combined, used = _combine(keys)
    if not used:
        return np.lexsort(keys[::-1])
    order = np.argsort(combined, kind="stable")
    if used == len(keys):
        return order
    c = combined[order]
    tie = c[1:] == c[:-1]
    if not tie.any():
        return order
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] = tie
    in_run[:-1] |= tie
    at = np.flatnonzero(in_run)  # positions (in the order) of rows that tie with a neighbour
    run = np.zeros(len(order), dtype=np.int64)
    np.cumsum(~tie, out=run[1:])  # a new run starts wherever the combined key changes
    run = run[at]
    rows = order[at]  # within a run in row order (the sort was stable)
    rest = [k[rows] for k in keys[used:]]
    # the run and the next key combine (each level orders by one key more), else lexsort
    fits = _span(run)[1].bit_length() + _span(rest[0])[1].bit_length() <= LEXORDER_BITS
    sub = lexorder(run, *rest) if fits else np.lexsort((*rest[::-1], run))
    order[at] = rows[sub]
    return order


def _span(k: np.ndarray) -> tuple[int, int]:
    """The lowest value of an integer key and the width of its value range."""
    lo = int(k.min())
    return lo, int(k.max()) - lo + 1


def _combine(keys: tuple[np.ndarray, ...]) -> tuple[np.ndarray, int]:
    """The leading keys that fit in :data:`LEXORDER_BITS` together as one int64 key whose order is
    theirs, and how many were combined (0: the first key alone is too wide)."""
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    bits = 0
    for i, k in enumerate(keys):
        lo, width = _span(k)
        bits += width.bit_length()
        if bits > LEXORDER_BITS:
            return combined, i
        combined *= width
        combined += k.astype(np.int64) - lo
    return combined, len(keys)


DENSE_SPAN_PER_ROW = 4  # within this many values per row, the inverse is a cumulative sum over the range
MASK_SPAN = 1 << 22  # a value range up to this wide is counted by a mask (4 MB of bool), whatever the rows


def unique_ints(a: np.ndarray, return_index: bool = False, return_inverse: bool = False) -> Any:
    """``np.unique(a, return_index=..., return_inverse=...)`` of a 1-D integer array, the same
    arrays. Where the values span a range of at most :data:`MASK_SPAN` (or
    :data:`DENSE_SPAN_PER_ROW` per row) — range indices, name codes, instance ids, the analysis'
    usual keys — they are found with a mask over that range in linear time; np.unique sorts (with
    an inverse, an argsort of every row: ~10 ms per 370k ranges, and several such calls per
    analysis). The inverse is a cumulative sum over the range where it is dense, a binary search
    in the distinct values where it is sparse (a sum over a range 30x the rows cost more than the
    search). Other arrays go to np.unique."""
    a = np.asarray(a)
    n = len(a)
    lo = int(a.min()) if n and a.ndim == 1 and a.dtype.kind in "iu" else 0
    span = int(a.max()) - lo + 1 if n and a.ndim == 1 and a.dtype.kind in "iu" else -1
    dense = span <= max(DENSE_SPAN_PER_ROW * n, 1 << 12)
    if span < 0 or (span > MASK_SPAN and not dense):
        return np.unique(a, return_index=return_index, return_inverse=return_inverse)  # type: ignore[call-overload]
    off = a.astype(np.intp)
    off -= lo
    present = np.zeros(span, dtype=bool)
    present[off] = True
    at = np.flatnonzero(present)
    out: list[np.ndarray] = [(at + lo).astype(a.dtype)]
    if return_index:
        first = np.full(span, n, dtype=np.intp)
        np.minimum.at(first, off, np.arange(n, dtype=np.intp))
        out.append(first[at])
    if return_inverse:
        if dense:
            code = np.cumsum(present, dtype=np.intp)
            code -= 1
            out.append(code[off])
        else:
            out.append(np.searchsorted(at, off).astype(np.intp, copy=False))
    return out[0] if len(out) == 1 else tuple(out)
