"""Array helpers of the analysis: the stable order of rows by several integer keys, and the
distinct values of an integer column. numpy only (no module of the package), so that every room
can use them: trace/, the report, the table writer."""

from __future__ import annotations

from typing import Any

import numpy as np

LEXORDER_BITS = 62  # a combined key spans at most this many bits (int64, with room for the sign)


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """The stable order of rows by integer ``keys``, the major key first: ``np.lexsort(keys[::-1])``.
    When the keys' value ranges fit in one int64 together they are combined into one key and
    sorted once, stably; timsort on the trace's nearly time-ordered columns is ~20x faster than
    lexsort's full sort per key (40 ms for thread, start, longest first on 370k ranges). Other
    keys (floats, too wide) fall back to lexsort."""
    if not keys or not len(keys[0]) or any(k.dtype.kind not in "biu" for k in keys):
        return np.lexsort(keys[::-1])
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    bits = 0
    for k in keys:
        lo, hi = int(k.min()), int(k.max())
        width = hi - lo + 1
        bits += width.bit_length()
        if bits > LEXORDER_BITS:
            return np.lexsort(keys[::-1])
        combined *= width
        combined += k.astype(np.int64) - lo
    return np.argsort(combined, kind="stable")


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
