"""The per-kernel rows of a report, stored by column.

A training trace has tens or hundreds of thousands of GPU activities. Holding each as a Python
dict costs ~3 KB; holding them as columns (numpy arrays, interned strings) costs ~200 bytes,
lets the dashboard filter and sort with numpy, and lets the JSON be written in chunks. To the
rest of the code a :class:`KernelTable` is a sequence of row dicts (``len``, indexing, slicing,
iteration), with the fields documented in docs/report-schema.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Optional

import msgspec
import numpy as np

from .trace.arrays import unique_ints

# Output order of the row fields.
FIELDS = (
    "id",
    "name",
    "kind",
    "ts",
    "dur_us",
    "device",
    "stream",
    "step",
    "attention",
    "phase",
    "direction",
    "core",
    "tag_source",
    "graph",
    "instance",
    "scope",
    "site",
    "op",
    "cost_op",
    "module",
    "module_path",
    "dtype",
    "flops",
    "bytes",
    "dram_bytes",
    "intensity",
    "achieved_flops_per_s",
    "achieved_bytes_per_s",
    "peak",
    "peak_flops_per_s",
    "compute_util",
    "memory_util",
    "bytes_over_roof",
    "bound",
    "latency_cause",
    "bound_reason",
    "estimated",
    "upper_bound",
    "upper_bound_flops_per_s",
    "upper_bound_bytes_per_s",
    "cost_share",
    "cost_role",
    "grid",
    "block",
    "occupancy_pct",
    "occupancy_source",
    "waves",
    "measured",
)
# Optional fields, present on attention rows only (source: sources.py, with_stack traces).
EXTRA = ("shapes", "cost_detail", "source")


@functools.lru_cache(maxsize=8)
def _row_struct(names: tuple) -> type:
    """A struct type with ``names`` (always encoded) and the optional EXTRA fields (omitted
    while unset)."""
    return msgspec.defstruct("KernelRow", [*names, *((k, object, msgspec.UNSET) for k in EXTRA)], gc=False)


class Coded:
    """A column of strings (or None) stored as int32 codes into a vocabulary."""

    __slots__ = ("codes", "vocab")

    def __init__(self, codes: np.ndarray, vocab: Sequence[Any]):
        self.codes = np.asarray(codes, dtype=np.int32)
        self.vocab = list(vocab)

    def __getitem__(self, i):
        return self.vocab[self.codes[i]]

    def tolist(self) -> list:
        v = self.vocab
        return [v[c] for c in self.codes.tolist()]

    def take(self, idx: np.ndarray) -> Coded:
        return Coded(self.codes[idx], self.vocab)

    def __len__(self):
        return len(self.codes)

    @classmethod
    def from_values(cls, values: Sequence[Optional[str]]) -> Coded:
        vocab: dict = {}
        codes = [vocab.setdefault(v, len(vocab)) for v in values]
        return cls(np.asarray(codes, dtype=np.int32), list(vocab))


def group_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows with equal values in all ``columns``: ``(first, inverse)`` — the index of each
    group's first row and each row's group. Faster than ``np.unique(np.stack(columns), axis=0)``
    (a sort of opaque row bytes): each column is factorised on its own — small non-negative
    integers as they are, other values by sorting only the rows where they are not 0 — and the
    codes are combined, re-factorised when the code space grows large. NaN equals NaN."""
    return group_rows_of(len(columns[0]) if columns else 0, columns)


def group_rows_of(n: int, columns: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_rows` of ``n`` rows whose columns come one at a time (a generator: only the
    column being factorised need exist)."""
    code = np.zeros(n, dtype=np.int64)
    size = 1
    for c in columns:
        inv, card = _factorise(np.asarray(c))
        if size * card >= 1 << 62:
            _, code = unique_ints(code, return_inverse=True)
            code = code.reshape(-1).astype(np.int64)
            size = int(code.max()) + 1 if n else 1
        code = code * card + inv
        size *= card
    _, first, inverse = unique_ints(code, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _factorise(c: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes 0..card-1 of a column's values (NaN one code of its own)."""
    if c.dtype.kind == "b":
        return c.astype(np.int64), 2
    if c.dtype.kind == "f":
        nan = np.isnan(c)
        c = np.where(nan, 0.0, c)
        if np.isfinite(c).all() and (c == np.floor(c)).all() and (not len(c) or (c.min() >= 0 and c.max() < 1 << 20)):
            out = c.astype(np.int64) + 1
            out[nan] = 0
            return out, int(out.max()) + 1 if len(out) else 1
        c = np.where(nan, -np.inf, c)
    elif len(c) and c.min() >= 0 and c.max() < 1 << 20:
        return c.astype(np.int64), int(c.max()) + 1
    out = np.zeros(len(c), dtype=np.int64)
    nz = c != 0
    if not nz.any():
        return out, 1
    u, inv = unique_ints(c[nz], return_inverse=True)
    out[nz] = inv.reshape(-1) + 1
    return out, len(u) + 1


def _nullable(values: list) -> list:
    """NaN -> None (JSON null)."""
    return [None if x != x else x for x in values]


def _nullable_array(a: np.ndarray) -> list:
    """:func:`_nullable` of ``a.tolist()``, in numpy (a column of a large table)."""
    nan = np.isnan(a)
    if not nan.any():
        return a.tolist()
    out = a.astype(object)
    out[nan] = None
    return out.tolist()


def _shared_floats(c: Any, idx: np.ndarray) -> Optional[list]:
    """``_col_values`` of a float column with few distinct values among ``idx``, one Python float
    per distinct value shared by its rows (a float per row and field is ~24 bytes), else None."""
    if not isinstance(c, np.ndarray) or c.dtype.kind != "f" or len(idx) < 64:
        return None
    a = np.ascontiguousarray(c[idx], dtype=np.float64)
    _, first, inv = unique_ints(a.view(np.int64), return_index=True, return_inverse=True)  # -0.0 apart from 0.0
    if len(first) * 4 > len(idx):
        return None
    vals = _nullable_array(c[idx[first]])
    return list(map(vals.__getitem__, inv.reshape(-1).tolist()))


def _vocab_array(vocab: list) -> np.ndarray:
    """The vocabulary as an object array, to look codes up in C (``[vocab[c] for c in codes]``)."""
    out = np.empty(len(vocab), dtype=object)
    for i, v in enumerate(vocab):  # one by one: an entry may be a list, which numpy would unpack
        out[i] = v
    return out


class KernelTable(Sequence):
    """Columns (equal length) -> rows on demand.

    Column kinds: numpy float arrays (NaN = null), numpy int/bool arrays, :class:`Coded`
    strings, or plain lists (``grid``, ``block``, extras)."""

    def __init__(self, columns: dict[str, Any], extras: Optional[dict[int, dict]] = None):
        self.columns = columns
        self.extras = extras or {}  # row index -> {"shapes": ..., "cost_detail": ...}
        self._n = len(columns["id"])

    def __len__(self) -> int:
        return self._n

    def _col_values(self, name: str, idx) -> list:
        c = self.columns[name]
        if isinstance(c, Coded):
            return _vocab_array(c.vocab)[c.codes[idx]].tolist()
        if isinstance(c, np.ndarray):
            if c.dtype.kind == "f":
                return _nullable_array(c[idx])
            return c[idx].tolist()
        if isinstance(idx, slice):
            return list(c[idx])
        return [c[i] for i in idx.tolist()]

    def codes(self, name: str) -> tuple[np.ndarray, list]:
        """A string column as codes (one per row) into a vocabulary, for whole-array grouping: a
        :class:`Coded` column's own (a vocabulary may name a value twice); another column's values
        coded in the order they first appear; a column the table lacks: code 0 of ``[None]``."""
        c = self.columns.get(name)
        if c is None:
            return np.zeros(self._n, dtype=np.int32), [None]
        if not isinstance(c, Coded):
            c = Coded.from_values(self._col_values(name, slice(0, self._n)))
        return c.codes, list(c.vocab)

    def num(self, name: str) -> np.ndarray:
        """A numeric column as a float64 array of its own (NaN where null); all NaN for a column
        the table lacks or one that is not an array."""
        c = self.columns.get(name)
        if isinstance(c, np.ndarray):
            return c.astype(np.float64)
        return np.full(self._n, np.nan)

    def rows(self, idx, fields: Optional[Sequence[str]] = None) -> list[dict]:
        """Row dicts for an index array or a slice (only ``fields``, when given: cheaper)."""
        if isinstance(idx, slice):
            positions = list(range(*idx.indices(self._n)))
            idx_arr = np.asarray(positions, dtype=np.int64)
        else:
            idx_arr = np.asarray(idx, dtype=np.int64)
            positions = idx_arr.tolist()
        names = tuple(f for f in (FIELDS if fields is None else fields) if f in self.columns)
        extra_keys = EXTRA if fields is None else tuple(f for f in fields if f in EXTRA)
        cols = [self._col_values(f, idx_arr) for f in names]
        out = [dict(zip(names, vals)) for vals in zip(*cols)]
        if self.extras and extra_keys:
            for row, p in zip(out, positions):
                e = self.extras.get(p)
                if e:
                    row.update((k, v) for k, v in e.items() if k in extra_keys)
        return out

    def row_structs(self, idx: np.ndarray, row_type: type, fields: Sequence[str]) -> list:
        """Rows ``idx`` as instances of ``row_type``, a msgspec struct whose fields are ``fields``
        in that order, each defaulting to ``msgspec.UNSET``: a field this table has no column (or,
        for the EXTRA fields, no value) for stays unset. A struct of 30 fields is ~300 bytes
        where a dict is ~800, and is built in C."""
        idx = np.asarray(idx, dtype=np.int64)
        n = len(idx)
        cols: list[Any] = []
        unset = [msgspec.UNSET] * n
        for f in fields:
            if f in EXTRA:
                cols.append(list(unset))
            elif f in self.columns:
                cols.append(_shared_floats(self.columns[f], idx) or self._col_values(f, idx))
            else:
                cols.append(unset)
        if self.extras:
            extra_at = [(j, f) for j, f in enumerate(fields) if f in EXTRA]
            if extra_at:
                get = self.extras.get
                for r, p in enumerate(idx.tolist()):
                    e = get(p)
                    if e:
                        for j, f in extra_at:
                            if f in e:
                                cols[j][r] = e[f]
        return list(map(row_type, *cols))

    def encodable_chunks(self, size: int, encode: Callable[[Any], bytes] = msgspec.json.encode) -> Iterator[list]:
        """All rows, ``size`` at a time, as structs that encode (with ``encode``: the writer's own
        encoder, its hooks included) exactly like :meth:`rows` (:class:`_EncodePlan`: the
        few-valued columns pre-encoded): the JSON writer's path."""
        plan = _EncodePlan(self, encode)
        get = self.extras.get
        for s in range(0, self._n, size):
            e = min(s + size, self._n)
            cols = [
                plan.values(f, s, e) if run is not None else self._col_values(f, slice(s, e))
                for f, run in zip(plan.fields, plan.runs)
            ]
            out = list(map(plan.row_type, *cols))
            if self.extras:
                for i, row in enumerate(out, s):
                    x = get(i)
                    if x:
                        for k, v in x.items():
                            if k in EXTRA:
                                setattr(row, k, v)
            yield out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.rows(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self.rows(np.asarray([i]))[0]

    def __iter__(self) -> Iterator[dict]:
        step = 4096
        for s in range(0, self._n, step):
            yield from self.rows(slice(s, min(s + step, self._n)))

    def column(self, name: str) -> list:
        return self._col_values(name, np.arange(self._n))

    def take(self, idx: np.ndarray) -> KernelTable:
        """A new table with the selected rows (filters for the dashboard)."""
        cols = {}
        for k, c in self.columns.items():
            if isinstance(c, (Coded, np.ndarray)):
                cols[k] = c.take(idx) if isinstance(c, Coded) else c[idx]
            else:
                cols[k] = [c[i] for i in idx.tolist()]
        extras = {}
        if self.extras:
            for new, old in enumerate(idx.tolist()):
                e = self.extras.get(old)
                if e:
                    extras[new] = e
        return KernelTable(cols, extras)

    # -- serialisation (cache) ---------------------------------------------------------------
    def to_state(self) -> dict:
        cols = {}
        for k, c in self.columns.items():
            if isinstance(c, Coded):
                cols[k] = {"coded": c.codes.tobytes(), "vocab": c.vocab}
            elif isinstance(c, np.ndarray):
                cols[k] = {"array": c.tobytes(), "dtype": c.dtype.str}
            else:
                cols[k] = {"list": c}
        return {"columns": cols, "extras": [[i, e] for i, e in self.extras.items()]}

    @classmethod
    def from_state(cls, state: dict) -> KernelTable:
        cols = {}
        for k, c in state["columns"].items():
            if "coded" in c:
                cols[k] = Coded(np.frombuffer(c["coded"], dtype=np.int32).copy(), c["vocab"])
            elif "array" in c:
                cols[k] = np.frombuffer(c["array"], dtype=np.dtype(c["dtype"])).copy()
            else:
                cols[k] = c["list"]
        return cls(cols, {int(i): e for i, e in state.get("extras", [])})


_SPARSE_SPACE = 8  # pairs are factorised by a sort, not a mask, when the code space is this many times the rows
_FEW = 16  # a column whose distinct values are at most 1/_FEW of the rows is written from a vocabulary


class _EncodePlan:
    """How :meth:`KernelTable.encodable_chunks` writes rows: runs of adjacent columns with few
    distinct values (names, phases, FLOPs of a repeated shape...) are written as one pre-encoded
    JSON fragment per distinct combination of their values (``msgspec.Raw``, copied as it is), the
    other columns as values. A run's fragment is held by its first field and carries the run's
    later ``"key":value`` pairs after its own value, so the bytes are those of one field per column:
    the rows encode exactly like :meth:`KernelTable.rows`, with a third of the fields to build and
    no float to format twice."""

    def __init__(self, table: KernelTable, enc: Callable[[Any], bytes]):
        n = len(table)
        self.fields: list[str] = []  # the struct's fields, in order
        self.runs: list[Optional[list[str]]] = []  # per field: the columns of its run, None for a plain field
        # a run's first field -> (each row's combination, the Raw of each combination)
        self.run_of: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        limit = max(1, n // _FEW)
        run: list[str] = []
        cols: list[tuple[np.ndarray, list]] = []  # the open run's columns: codes, encoded value per code
        combo = np.zeros(n, dtype=np.int64)
        k = 1  # distinct combinations of the open run

        def close() -> None:
            if run:
                self.run_of[run[0]] = (combo, _vocab_array(_fragments(run, cols, combo, k)))

        for f in (f for f in FIELDS if f in table.columns):
            got = _few_values(table.columns[f], n)
            if got is None:
                close()
                run, cols = [], []
                self.fields.append(f)
                self.runs.append(None)
                continue
            codes, vals = got[0], [enc(v) for v in got[1]]
            if run:
                pair = _combine(combo, k, codes, len(vals), limit)
                if pair is not None:  # the run takes this column: its combinations stay few
                    combo, k = pair
                    run.append(f)
                    cols.append((codes, vals))
                    continue
                close()
            run, cols = [f], [(codes, vals)]
            combo, k = codes, len(vals)
            self.fields.append(f)
            self.runs.append(run)
        close()
        self.row_type = _row_struct(tuple(self.fields))

    def values(self, field: str, start: int, stop: int) -> list:
        """A run's ``msgspec.Raw`` per row of ``start:stop``."""
        inv, raws = self.run_of[field]
        return raws[inv[start:stop]].tolist()  # an object array: the lookups in C


def _combine(a: np.ndarray, ka: int, b: np.ndarray, kb: int, limit: int) -> Optional[tuple[np.ndarray, int]]:
    """Dense codes 0..k-1 of the pairs (a, b) (codes below ``ka`` and ``kb``) and k, or None when
    there are more than ``limit`` distinct pairs. Factorised with a mask over the code space, or by a
    sort when that space is sparse (a mask and a cumulative sum over millions of codes for 10^5 rows)."""
    space = ka * kb
    if space > 1 << 24:
        return None
    pair = a * kb + b
    if space > _SPARSE_SPACE * len(pair):  # a sparse code space: sorting the pairs is cheaper
        u, inv = unique_ints(pair, return_inverse=True)
        return (inv.reshape(-1).astype(np.int64), len(u)) if len(u) <= limit else None
    mark = np.zeros(space, dtype=bool)
    mark[pair] = True
    k = int(np.count_nonzero(mark))
    if k > limit:
        return None
    dense = np.cumsum(mark, dtype=np.int64) - 1
    return dense[pair], k


def _fragments(run: list[str], cols: list, combo: np.ndarray, k: int) -> list:
    """The JSON of each of a run's ``k`` combinations (``combo``: each row's; ``cols``: each
    column's codes and encoded values): the first column's value, then ``,"key":value`` of each
    later one."""
    first = np.zeros(k, dtype=np.int64)
    first[combo] = np.arange(len(combo))  # a row of each combination
    pieces = []
    for j, (f, (codes, vals)) in enumerate(zip(run, cols)):
        key = b',"' + f.encode() + b'":'
        frag = vals if j == 0 else [key + v for v in vals]
        pieces.append([frag[c] for c in codes[first].tolist()])
    return [msgspec.Raw(b"".join(p)) for p in zip(*pieces)]


def _few_values(c: Any, n: int) -> Optional[tuple[np.ndarray, list]]:
    """(codes, the value of each code as :meth:`KernelTable.rows` gives it) of a column with few
    distinct values, else None."""
    limit = max(1, n // _FEW)
    if isinstance(c, Coded):
        if len(c.vocab) > limit and len(c.vocab) > 64:
            return None
        codes = np.asarray(c.codes, dtype=np.int64)
        codes = np.where(codes < 0, codes + len(c.vocab), codes)  # as vocab[code] reads a negative code
        return codes, list(c.vocab)
    if isinstance(c, np.ndarray):
        if c.dtype.kind == "f":
            bits = np.ascontiguousarray(c, dtype=np.float64).view(np.int64)  # -0.0 apart from 0.0
            if _many_values(bits, limit):
                return None
            _, first, inv = unique_ints(bits, return_index=True, return_inverse=True)
            if len(first) > limit:
                return None
            return inv.reshape(-1).astype(np.int64), _nullable_array(c[first])
        if c.dtype.kind in "biu":
            if _many_values(c, limit):
                return None
            _, first, inv = unique_ints(c, return_index=True, return_inverse=True)
            if len(first) > limit:
                return None
            return inv.reshape(-1).astype(np.int64), c[first].tolist()
        return None
    if isinstance(c, list) and all(v is None for v in c):
        return np.zeros(n, dtype=np.int64), [None]
    return None


def _many_values(a: np.ndarray, limit: int) -> bool:
    """Whether ``a`` certainly has more than ``limit`` distinct values, from its first rows alone
    (a prefix has no more distinct values than the whole): a column of times or durations is
    turned down without sorting it all, with its index and inverse."""
    head = a[: 2 * limit + 2]
    return len(head) > limit and len(unique_ints(head)) > limit
