"""Compact, columnar records of one trace: what the analysis needs and nothing more.

Events stream in from :mod:`.reader` and are appended into typed ``array`` columns (8 bytes a
value instead of a Python object each), then frozen into numpy arrays. Strings (op, kernel and
module names) are interned once. Input shapes are interned as *signatures*: the raw JSON of
``Input Dims``/``Input type``/``Input Strides``/``Concrete Inputs``, decoded only for the ops the
cost model actually looks at. Both Kineto schemas are mapped to one vocabulary here:

* CPU ranges (``Range*`` kinds): ``cpu_op``/``Operator``, ``user_annotation``, the kept
  ``python_function`` events (``nn.Module: ...`` and functions named like attention/rotary),
  and the runtime/driver launches (``cuda_runtime``, ``cuda_driver``, ``Runtime``).
* GPU activities: ``kernel``/``Kernel``, ``gpu_memcpy``/``Memcpy``, ``gpu_memset``/``Memset``.
* ``fwdbwd`` flows, ``[memory]`` instant events, ``gpu_user_annotation`` ranges, CUPTI
  ``cuda_profiler_range`` counter events, thread names.
* ``stacks``: the user's own Python frames among the other ``python_function`` events
  (``train.py(42): forward``; :mod:`.stacks` says which are user code), kept apart from the
  ranges so that they change no nesting: they only answer "where in my code" (source lines).
"""

from __future__ import annotations

import functools
import gc
import re
import struct
from array import array
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress
from typing import TYPE_CHECKING, Any, Callable, Optional, Union, get_args

import msgspec
import numpy as np

from .. import progress as _progress
from .events import TAGGED_KINDS, Event
from .reader import DEFAULT_MAX_BYTES, TraceReadError, TraceTruncated, read_trace
from .stacks import user_frame

# CPU range kinds
OP, ANNOTATION, MODULE, PYFUNC, LAUNCH = 0, 1, 2, 3, 4
RANGE_KIND_NAMES = ("op", "annotation", "module", "python", "launch")
# GPU activity kinds
KERNEL, MEMCPY, MEMSET = 0, 1, 2
GPU_KIND_NAMES = ("kernel", "memcpy", "memset")

_RANGE_CATS = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": ANNOTATION,
    "python_function": PYFUNC,
    "python": PYFUNC,
    "cuda_runtime": LAUNCH,
    "cuda_driver": LAUNCH,
    "runtime": LAUNCH,
}
_GPU_CATS = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
}
# Python frames worth keeping besides nn.Module ones: they scope attention and rotary code.
DEFAULT_KEEP_PYTHON = r"(?i)attention|attn|rotary|rope\b|apply_rotary|sdpa|flash"

_NONE = -1
_COUNTER_CAT = "cuda_profiler_range"  # CUPTI counter ranges: their args are read whole (add_raw)
# Timestamps are microseconds (Kineto: since the epoch, ~1.8e15 today); they become int64
# nanoseconds relative to the earliest one, so |ts| and dur must stay well inside 9.2e15 us.
MAX_TS_US = 4e15  # the year 2096
MAX_DUR_US = 1e12  # 11.6 days
_decode_any = msgspec.json.Decoder().decode


def _int(x: Any, default: int = _NONE) -> int:
    if x is None or isinstance(x, bool):
        return default
    if isinstance(x, int):
        return x if -(1 << 63) <= x < (1 << 63) else default
    if isinstance(x, str):
        try:
            v = int(x, 0)
        except ValueError:
            m = re.search(r"-?\d+", x)
            if not m:
                return default
            v = int(m.group())
        return v if -(1 << 63) <= v < (1 << 63) else default
    return default


class _Interner:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.index: dict[Any, int] = {}

    def __call__(self, s: Any) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i

    def ids(self, keys: list[Any]) -> list[int]:
        """The id of each key; new keys are interned first, in order of appearance."""
        out = list(map(self.index.get, keys))
        if None in out:
            for k in dict.fromkeys(k for k, i in zip(keys, out) if i is None):
                self(k)
            out = list(map(self.index.__getitem__, keys))
        return out  # type: ignore[return-value]


@dataclass
class Signature:
    """Raw JSON of an op's recorded inputs; decoded lazily by :mod:`..roofline.cost`."""

    dims: bytes
    types: bytes
    strides: bytes
    concrete: bytes
    _decoded: Optional[tuple[list[Any], list[Any], list[Any], list[Any]]] = None

    def decoded(self) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        if self._decoded is None:

            def dec(b: bytes) -> list[Any]:
                if not b:
                    return []
                try:
                    v = msgspec.json.decode(b)
                except msgspec.DecodeError:
                    return []
                return v if isinstance(v, list) else []

            self._decoded = (dec(self.dims), dec(self.types), dec(self.strides), dec(self.concrete))
        return self._decoded


# The column tables of a Trace, by attribute name.
TABLES = ("ranges", "gpu", "flows", "memory", "gpu_annotations", "stacks")


@dataclass
class Trace:
    """Everything read from one file. Columns are numpy arrays of equal length per table."""

    path: str
    meta: dict[str, Any]
    strings: list[str]
    ranges: dict[str, np.ndarray]
    gpu: dict[str, np.ndarray]
    flows: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    gpu_annotations: dict[str, np.ndarray]
    signatures: list[Signature]
    counters: list[dict[str, Any]]
    thread_names: dict[tuple[Any, Any], str]
    threads: list[tuple[Any, Any]]  # thread index -> (pid, tid) as written in the trace
    base_us: float  # every *_ns column is nanoseconds after this timestamp
    stats: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    stacks: dict[str, np.ndarray] = field(default_factory=dict)  # user Python frames (trace/stacks.py)

    @property
    def n_ranges(self) -> int:
        return len(self.ranges["kind"])

    @property
    def n_gpu(self) -> int:
        return len(self.gpu["kind"])

    def name(self, i: int) -> str:
        return self.strings[i]

    def release(self, keep: Mapping[str, Collection[str]]) -> None:
        """Drop every column of the tables (``ranges``, ``gpu``, ``flows``, ``memory``,
        ``gpu_annotations``, ``stacks``) that ``keep`` does not name; a table ``keep`` leaves out
        is emptied. For the analysis (report.analyze_trace), which consumes its trace: the
        columns only its earlier stages read go back before the later ones hold the kernel table
        and the advice's replay (a read of a released column raises KeyError)."""
        for table in TABLES:
            cols = getattr(self, table)
            wanted = keep.get(table, ())
            for k in [k for k in cols if k not in wanted]:
                del cols[k]


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


# Range columns of ids read as int64 and kept as int32 when every value fits (External and
# correlation ids, autograd sequence numbers count up from 0 in a session): 4.4 MB less on a
# trace of 370k ranges.
NARROWED_RANGE_IDS = ("ext", "corr", "seq")


def narrow_ids(a: np.ndarray) -> np.ndarray:
    """``a`` as int32 when every value fits, else as it is."""
    i32 = np.iinfo(np.int32)
    if a.dtype == np.int32 or (len(a) and (a.min() < i32.min or a.max() > i32.max)):
        return a
    return a.astype(np.int32)


def _clean_int(v: Any, default: int = _NONE) -> int:
    if v is None or isinstance(v, bool) or not isinstance(v, int):
        return _int(v, default)
    return v if _I64_MIN <= v <= _I64_MAX else default


# Columns are packed with ``struct`` (a list of Python numbers to C values in one call, about
# half the work of ``array(typecode, list)``, which parses each item as a function argument);
# a value ``struct`` refuses (None, a string, out of range) sends the column down the tolerant
# path, which gives what ``array`` with the clean-ups below gives.
_pack = struct.pack
Col = Union[bytes, bytearray, "array[Any]"]


def _col_q(values: list[Any]) -> Col:
    """int64 column; values that are missing or out of range become -1."""
    try:
        return _pack(f"{len(values)}q", *values)
    except struct.error:
        pass
    try:
        return array("q", values)
    except TypeError:
        try:  # the common case: some values are missing
            return array("q", [-1 if v is None else v for v in values])
        except (OverflowError, TypeError):
            pass
    except OverflowError:
        pass
    return array("q", [_clean_int(v) for v in values])


def _int_col(values: list[Any]) -> Col:
    """int64 column of values read with :func:`_int` (numeric strings parsed)."""
    if set(map(type, values)) <= {int}:
        try:
            return _pack(f"{len(values)}q", *values)
        except struct.error:
            pass
    return array("q", [_int(v) for v in values])


def _col_q_missing(values: list[int], none: bytes) -> Col:
    """:func:`_col_q` of a field that is usually absent (-1 everywhere): ``none`` then, no conversion."""
    if values.count(_NONE) == len(values):
        return none
    return _col_q(values)


def _dims3(dims: list[Any]) -> tuple[Col, Col, Col]:
    """The x, y, z columns of ``grid`` or ``block`` lists; (0, 0, 0) unless a list of three."""
    n = len(dims)
    if dims.count(None) == n:
        zero = bytes(4 * n)
        return zero, zero, zero
    d3 = [d if d and len(d) == 3 else _ZERO3 for d in dims]
    try:
        xyz = np.frombuffer(_pack(f"{3 * n}i", *chain.from_iterable(d3)), dtype=np.int32).reshape(n, 3)
    except struct.error:  # a value out of int32 range: that one becomes 0
        return _col_l([d[0] for d in d3]), _col_l([d[1] for d in d3]), _col_l([d[2] for d in d3])
    return xyz[:, 0].tobytes(), xyz[:, 1].tobytes(), xyz[:, 2].tobytes()


_ZERO3 = (0, 0, 0)
_NONE_Q, _NONE_I = struct.pack("q", _NONE), struct.pack("i", _NONE)


def _stream_col(args: list[Any], evs: list[Any]) -> Col:
    """The stream of each GPU activity: ``args.stream``, or the event's tid when absent."""
    streams = [a.stream for a in args]
    if set(map(type, streams)) <= {int}:
        try:
            return _pack(f"{len(streams)}q", *streams)
        except struct.error:
            pass
    return array("q", [_int(a.stream) if a.stream is not None else _int(e.tid) for a, e in zip(args, evs)])


def _col_l(values: list[Any], default: int = 0) -> Col:
    """int32 column; values that are not ints in range become ``default``."""
    try:
        return _pack(f"{len(values)}i", *values)
    except struct.error:
        pass
    try:
        return array("i", values)
    except (OverflowError, TypeError):
        return array(
            "i",
            [
                v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 31) <= v < (1 << 31) else default
                for v in values
            ],
        )


def _col_d(values: list[Any], default: float = float("nan")) -> Col:
    """float64 column; values that are not numbers become ``default``."""
    try:
        return _pack(f"{len(values)}d", *values)
    except struct.error:
        pass
    try:
        return array("d", values)
    except TypeError:
        return array("d", [v if isinstance(v, float) else default for v in values])


def _ids(values: list[int]) -> bytes:
    """int32 column of interned ids."""
    return _pack(f"{len(values)}i", *values)


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else (b if b is not None else _NONE)


_RANGE_COLS = dict(kind="b", name="i", thread="i", ts="d", dur="d", ext="q", ext1="q", corr="q", seq="q", sig="i")
_GPU_COLS = dict(
    kind="b",
    name="i",
    device="i",
    stream="q",
    ts="d",
    dur="d",
    corr="q",
    ext="q",
    ext1="q",
    grid_x="i",
    grid_y="i",
    grid_z="i",
    block_x="i",
    block_y="i",
    block_z="i",
    registers="i",
    shared_memory="q",
    blocks_per_sm="d",
    warps_per_sm="d",
    occupancy="d",
    bytes="q",
    pid="q",
    tid="q",
)
_FLOW_COLS = dict(start="b", id="q", thread="i", ts="d")
_MEMORY_COLS = dict(
    ts="d", thread="i", addr="q", bytes="q", total_allocated="q", total_reserved="q", device_type="i", device_id="i"
)
_GPU_ANN_COLS = dict(name="i", device="i", stream="q", ts="d", dur="d", ext="q", ext1="q")
_STACK_COLS = dict(name="i", thread="i", ts="d", dur="d")
_USER = -2  # python frame kind: a user frame, kept in the stacks table
# Python frame codes (TraceBuilder._python_code): dropped, module, kept function, user frame, kept
# function that is also a user frame; and
# for each kept kind the table that turns a string of codes into a 0/1 selection of its frames
_PY_DROP, _PY_MODULE, _PY_FUNC, _PY_USER, _PY_USER_FUNC = b"\x00", b"\x01", b"\x02", b"\x03", b"\x04"
_USER_FUNC = -3  # selection key: kept functions that are also user frames (code 4)
_PY_SELECT = {
    kind: bytes(1 if c in codes else 0 for c in range(256))
    for kind, codes in ((MODULE, (1,)), (PYFUNC, (2, 4)), (_USER, (3,)), (_USER_FUNC, (4,)))
}

_SIG_JOIN = b"\x00".join

# Bucket codes for the dispatch loop (range kinds first, then the rest).
_B_GPU, _B_GPU_ANN, _B_COUNTER, _B_SKIP, _B_FLOW, _B_INSTANT, _B_META, _B_IGNORE = 10, 11, 12, 13, 14, 15, 16, 17
_BUCKETS = (OP, ANNOTATION, PYFUNC, LAUNCH, _B_GPU, _B_GPU_ANN, _B_COUNTER, _B_SKIP, _B_FLOW, _B_INSTANT, _B_META)
_BUCKETS_ALL = _BUCKETS + (_B_IGNORE,)


def _bucket_code(cat: Any) -> int:
    """The bucket of a complete ("X") event of category ``cat`` (case does not matter)."""
    c = cat.lower() if isinstance(cat, str) else ""
    if c in _RANGE_CATS:
        return _RANGE_CATS[c]
    if c in _GPU_CATS:
        return _B_GPU
    if c == "gpu_user_annotation":
        return _B_GPU_ANN
    if c == "cuda_profiler_range":
        return _B_COUNTER
    return _B_SKIP


def _tagged_tables() -> tuple[dict[type, int], dict[type, str], dict[type, int]]:
    """For each tagged kind (events.py): its bucket, the one the general path gives its events;
    its category when its events are complete ones (noted in ``categories``); its GPU kind."""
    bucket: dict[type, int] = {}
    x_cats: dict[type, str] = {}
    gpu_kind: dict[type, int] = {}
    for cls in TAGGED_KINDS:
        cat = str(cls.__struct_config__.tag)
        phases = get_args(next(f.type for f in msgspec.structs.fields(cls) if f.name == "ph"))
        if phases == ("X",):
            bucket[cls] = _bucket_code(cat)
            x_cats[cls] = cat
        elif cls.ROLE == "flow" and cat == "fwdbwd":
            bucket[cls] = _B_FLOW
        elif cls.ROLE == "instant":
            bucket[cls] = _B_INSTANT  # filtered by name ("[memory]") as the general path does
        else:
            bucket[cls] = _B_IGNORE  # e.g. ac2g flows: the general path drops them too
        if bucket[cls] == _B_GPU:
            gpu_kind[cls] = _GPU_CATS[cat.lower()]
    return bucket, x_cats, gpu_kind


_TAGGED_BUCKET, _X_CATS, _GPU_KIND_OF = _tagged_tables()


def _noting(cls: type, append: Callable[[Any], None], seen: set[type]) -> Callable[[Any], None]:
    """``append``, noting in ``seen`` that an event of ``cls`` came (no reference back to the
    caller's dict of appends: the reader runs with the cyclic collector paused)."""

    def note(e: Any) -> None:
        seen.add(cls)
        append(e)

    return note


class _Table:
    """The columns of one table, each a bytearray the chunks' packed values are appended to.
    A bytearray grows in place (large ones by remapping pages, without copying them) and the
    frozen column is a numpy view on it: no second copy of the columns at any time (parts
    joined at the end held the columns twice at the peak)."""

    def __init__(self, spec: dict[str, str]):
        self.spec = spec
        self.cols: dict[str, bytearray] = {k: bytearray() for k in spec}

    def extend(self, **cols: Col) -> None:
        for k, a in cols.items():
            self.cols[k] += a

    def joined(self, k: str) -> bytearray:
        """Column ``k`` so far (for the builder it is merged into; pickled for another process)."""
        return self.cols[k]

    def freeze(self) -> dict[str, np.ndarray]:
        return {k: np.frombuffer(self.cols[k], dtype=t) for k, t in self.spec.items()}


class TraceBuilder:
    """Receives event chunks from the reader and fills the columns.

    Each chunk is first split into buckets by category in one tight loop; each bucket is then
    turned into columns with list comprehensions and one batched msgspec call for its ``args``.
    """

    def __init__(self, keep_python: str = DEFAULT_KEEP_PYTHON):
        self.strings = _Interner()
        self.sigs = _Interner()
        self.threads = _Interner()
        self.keep_py = re.compile(keep_python)
        self._py_kind: dict[str, int] = {}  # python frame name -> its code (_python_code)
        self._cat_bucket: dict[Any, int] = {}
        self._noted: set[type] = set()  # tagged classes whose category is noted
        self.categories: set[str] = set()
        self.ranges = _Table(_RANGE_COLS)
        self.gpu = _Table(_GPU_COLS)
        self.flows = _Table(_FLOW_COLS)
        self.memory = _Table(_MEMORY_COLS)
        self.gpu_ann = _Table(_GPU_ANN_COLS)
        self.stacks = _Table(_STACK_COLS)
        self.counters: list[dict[str, Any]] = []
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.counts = {"events": 0, "python_dropped": 0, "no_ts": 0, "negative_dur": 0, "other": 0}
        self._counter_chunk = False  # the last chunk added holds a CUPTI counter range (wants_raw)

    def sibling(self) -> TraceBuilder:
        """A fresh builder like this one (same Python-frame pattern) that shares its per-name
        classification of Python frames: the parallel reader makes one per segment."""
        b = type(self)(self.keep_py.pattern)
        b._py_kind = self._py_kind
        return b

    def _bucket_of(self, cat: Any) -> int:
        b = self._cat_bucket.get(cat)
        if b is None:
            if isinstance(cat, str) and len(self._cat_bucket) < 1000:
                self.categories.add(cat)
            b = self._cat_bucket[cat] = _bucket_code(cat)
        return b

    def add(self, events: list[Any]) -> None:
        """One decoded chunk: :class:`Event` structs (the general path) or tagged kinds (the
        fast path, :data:`.events.TAGGED_KINDS`), which give the same rows in the same order."""
        self.counts["events"] += len(events)
        self._counter_chunk = False
        if not events:
            return
        if type(events[0]) in _TAGGED_BUCKET:
            buckets, gpu_kinds = self._split_tagged(events)
            # a counter range decodes tagged only as that kind (tags match exactly)
            self._counter_chunk = bool(buckets[_B_COUNTER])
        else:
            buckets, gpu_kinds = self._split_generic(events), None
            self._counter_chunk = _COUNTER_CAT in {e.cat for e in events}
        self.counts["other"] += len(buckets[_B_SKIP])
        for kind in (OP, ANNOTATION, LAUNCH):
            if buckets[kind]:
                self._add_ranges(kind, buckets[kind])
        if buckets[PYFUNC]:
            self._add_python(buckets[PYFUNC])
        if buckets[_B_GPU]:
            self._add_gpu(buckets[_B_GPU], gpu_kinds)
        if buckets[_B_GPU_ANN]:
            self._add_gpu_annotations(buckets[_B_GPU_ANN])
        if buckets[_B_FLOW]:
            self._add_flows(buckets[_B_FLOW])
        if buckets[_B_INSTANT]:
            self._add_memory(buckets[_B_INSTANT])
        for e in buckets[_B_META]:
            self._add_meta(e)

    def _split_generic(self, events: list[Event]) -> dict[int, list[Any]]:
        """Events into buckets by ``ph`` and ``cat``, one test per event."""
        buckets: dict[int, list[Any]] = {b: [] for b in _BUCKETS}
        flows, instants, metas = buckets[_B_FLOW], buckets[_B_INSTANT], buckets[_B_META]
        bucket_of = self._cat_bucket.get
        slow = self._bucket_of
        for e in events:
            ph = e.ph
            if ph == "X":
                b = bucket_of(e.cat)
                if b is None:
                    b = slow(e.cat)
                buckets[b].append(e)
            elif ph == "s" or ph == "f" or ph == "t":
                if e.cat == "fwdbwd":
                    flows.append(e)
            elif ph == "i" or ph == "I":
                if e.name == "[memory]":
                    instants.append(e)
            elif ph == "M":
                metas.append(e)
        return buckets

    def _split_tagged(self, events: list[Any]) -> tuple[dict[int, list[Any]], Optional[bytes]]:
        """Tagged events into buckets by their class (the decoder checked ``ph``), keeping file
        order within a bucket; and the GPU kind of each GPU activity."""
        buckets: dict[int, list[Any]] = {b: [] for b in _BUCKETS_ALL}
        appends = {cls: buckets[b].append for cls, b in _TAGGED_BUCKET.items()}
        seen: set[type] = set()
        for cls in _X_CATS.keys() - self._noted:
            appends[cls] = _noting(cls, appends[cls], seen)
        for e in events:
            appends[type(e)](e)
        for cls in seen:  # complete events of a class met for the first time: their category
            self._bucket_of(_X_CATS[cls])  # is noted, as the general path notes every new one
            self._noted.add(cls)
        inst = buckets[_B_INSTANT]
        if inst and [e.name for e in inst].count("[memory]") != len(inst):
            buckets[_B_INSTANT] = [e for e in inst if e.name == "[memory]"]
        gpu = buckets[_B_GPU]
        gpu_kinds = bytes([_GPU_KIND_OF[type(e)] for e in gpu]) if gpu else None
        return buckets, gpu_kinds

    def _intern_threads(self, evs: list[Any]) -> Col:
        pids = [e.pid for e in evs]
        pid = pids[0]
        n = len(pids)
        if pids.count(pid) == n:
            # one process (the usual case): look threads up by tid alone, no tuple per event
            tids = [e.tid for e in evs]
            tid = tids[0]
            if tids.count(tid) == n:
                return _pack("i", self.threads((pid, tid))) * n
            local = {t: self.threads((pid, t)) for t in set(tids)}
            return _ids(list(map(local.__getitem__, tids)))
        return _ids(self.threads.ids([(e.pid, e.tid) for e in evs]))

    def _intern_names(self, names: list[Any]) -> Col:
        return _ids(self.strings.ids(names))

    def _add_python(self, evs: list[Any]) -> None:
        """Python frames: each name is classified once (module, kept function, user frame, kept
        function that is also a user frame, or dropped); per event only a code, in bytes, so that
        counting and selecting run in C."""
        get = self._py_kind.get
        codes = [get(e.name) for e in evs]
        if None in codes:
            for name in dict.fromkeys(e.name for e, c in zip(evs, codes) if c is None):
                self._py_kind[name] = self._python_code(name)
            codes = [get(e.name) for e in evs]
        kb = bytes(codes)  # type: ignore[arg-type]
        n = len(evs)
        n_drop = kb.count(_PY_DROP)
        self.counts["python_dropped"] += n_drop
        if n_drop == n:
            return
        if kb.count(_PY_MODULE):
            self._add_ranges(MODULE, list(compress(evs, kb.translate(_PY_SELECT[MODULE]))))
        n_user_func = kb.count(_PY_USER_FUNC)
        if kb.count(_PY_FUNC) or n_user_func:
            self._add_ranges(PYFUNC, list(compress(evs, kb.translate(_PY_SELECT[PYFUNC]))))
        users = list(compress(evs, kb.translate(_PY_SELECT[_USER]))) if kb.count(_PY_USER) else []
        # a function named like attention or rotary in the user's or the model's code
        # (``eager_attention_forward``, ``apply_rotary_pos_emb``) is a scope *and* a frame: without
        # it, the kernels it launches point to the ``def forward`` around it (sources.py)
        if n_user_func:
            users += compress(evs, kb.translate(_PY_SELECT[_USER_FUNC]))
        if users:
            self.stacks.extend(
                name=self._intern_names([e.name for e in users]),
                thread=self._intern_threads(users),
                ts=_col_d([e.ts for e in users]),
                dur=_col_d([e.dur for e in users]),
            )

    def _python_code(self, name: Any) -> int:
        """What a Python frame of this name is: a module, a kept function, a user frame or none."""
        if not isinstance(name, str):
            return 0
        if name.startswith("nn.Module"):
            return 1
        if self.keep_py.search(name):
            return 4 if user_frame(name) is not None else 2
        if user_frame(name) is not None:
            return 3
        return 0

    def _add_ranges(self, kind: int, evs: list[Any]) -> None:
        n = len(evs)
        none = _NONE_Q * n
        cols = dict(
            kind=bytes([kind]) * n,
            name=self._intern_names([e.name for e in evs]),
            thread=self._intern_threads(evs),
            ts=_col_d([e.ts for e in evs]),
            dur=_col_d([e.dur for e in evs]),
        )
        if kind == OP or kind == LAUNCH or kind == ANNOTATION:
            args = [e.args for e in evs]
            cols["ext"] = _col_q([a.external_id for a in args])
            cols["ext1"] = _col_q_missing([a.external_id_v1 for a in args], none)
            if kind == OP:
                cols["corr"] = none
                cols["seq"] = _col_q([a.seq for a in args])
                keys = [_SIG_JOIN((a.dims, a.types, a.strides, a.concrete)) for a in args]
                cols["sig"] = _ids(self.sigs.ids(keys))
            else:
                cols["corr"] = _col_q([a.correlation for a in args]) if kind == LAUNCH else none
                cols["seq"] = none
                cols["sig"] = _NONE_I * n
        else:
            cols["ext"] = cols["ext1"] = cols["corr"] = cols["seq"] = none
            cols["sig"] = _NONE_I * n
        self.ranges.extend(**cols)

    def _add_gpu(self, evs: list[Any], kinds: Optional[bytes] = None) -> None:
        if kinds is None:  # general path: the kind from each event's category
            gpu_kind = {cat: _GPU_CATS[cat.lower()] for cat in {e.cat for e in evs}}
            kinds = bytes([gpu_kind[e.cat] for e in evs])
        n = len(evs)
        args = [e.args for e in evs]
        grids = [a.grid for a in args]
        blocks = [a.block for a in args]
        gx, gy, gz = _dims3(grids)
        bx, by, bz = _dims3(blocks)
        none = _NONE_Q * n
        self.gpu.extend(
            kind=kinds,
            name=self._intern_names([e.name for e in evs]),
            device=_col_l([a.device for a in args]),
            stream=_stream_col(args, evs),
            ts=_col_d([e.ts for e in evs]),
            dur=_col_d([e.dur for e in evs]),
            corr=_col_q([a.correlation for a in args]),
            ext=_col_q([a.external_id for a in args]),
            ext1=_col_q_missing([a.external_id_v1 for a in args], none),
            grid_x=gx,
            grid_y=gy,
            grid_z=gz,
            block_x=bx,
            block_y=by,
            block_z=bz,
            registers=_col_l([a.registers for a in args]),
            shared_memory=_col_q([a.shared_memory for a in args]),
            blocks_per_sm=_col_d([a.blocks_per_sm for a in args]),
            warps_per_sm=_col_d([a.warps_per_sm for a in args]),
            occupancy=_col_d([a.occupancy for a in args]),
            bytes=_col_q_missing([a.bytes for a in args], none),
            pid=_int_col([e.pid for e in evs]),
            tid=_int_col([e.tid for e in evs]),
        )

    def _add_gpu_annotations(self, evs: list[Any]) -> None:
        args = [e.args for e in evs]
        self.gpu_ann.extend(
            name=self._intern_names([e.name for e in evs]),
            device=_col_l([a.device if a.device >= 0 else _int(e.pid, 0) for a, e in zip(args, evs)]),
            stream=_col_q([_int(a.stream) if a.stream is not None else _int(e.tid) for a, e in zip(args, evs)]),
            ts=_col_d([e.ts for e in evs]),
            dur=_col_d([e.dur for e in evs]),
            ext=_col_q([a.external_id for a in args]),
            ext1=_col_q([a.external_id_v1 for a in args]),
        )

    def _add_flows(self, evs: list[Any]) -> None:
        ids = [e.id for e in evs]
        id_col: Col
        try:  # typed ints (never bools: the decoders make those ints or reject them)
            id_col = _pack(f"{len(ids)}q", *ids)
        except struct.error:
            id_col = _col_q([_int(i) for i in ids])
        self.flows.extend(
            start=_pack(f"{len(evs)}b", *[e.ph == "s" for e in evs]),
            id=id_col,
            thread=self._intern_threads(evs),
            ts=_col_d([e.ts for e in evs]),
        )

    def _add_memory(self, evs: list[Any]) -> None:
        args = [e.args for e in evs]
        self.memory.extend(
            ts=_col_d([e.ts for e in evs]),
            thread=self._intern_threads(evs),
            addr=_col_q([a.addr for a in args]),
            bytes=_col_q([a.nbytes for a in args]),
            total_allocated=_col_q([a.total_allocated for a in args]),
            total_reserved=_col_q([a.total_reserved for a in args]),
            device_type=_col_l([a.device_type for a in args], _NONE),
            device_id=_col_l([a.device_id for a in args], _NONE),
        )

    def wants_raw(self) -> bool:
        """Whether the chunk :meth:`add` took last holds an event :meth:`add_raw` keeps (one of
        category ``cuda_profiler_range``): the reader hands it the raw bytes only then."""
        return self._counter_chunk

    def add_raw(self, chunk: bytes) -> None:
        """Chunks holding CUPTI counter ranges: their args (metric -> value) are kept whole."""
        try:
            items = _decode_any(b"[" + chunk + b"]")
        except msgspec.DecodeError:
            return
        for it in items if isinstance(items, list) else ():
            if not isinstance(it, dict) or it.get("cat") != _COUNTER_CAT or len(self.counters) >= 1_000_000:
                continue
            a = it.get("args")
            metrics = (
                {k: v for k, v in a.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                if isinstance(a, dict)
                else {}
            )
            self.counters.append(
                {"name": str(it.get("name") or ""), "ts": it.get("ts"), "dur": it.get("dur"), "metrics": metrics}
            )

    def _add_meta(self, e: Event) -> None:
        if e.name == "thread_name" and isinstance(e.args.name, str):
            self.thread_names[(e.pid, e.tid)] = e.args.name

    # -- parallel reading (parallel.py): one chunk's columns out, merged back in file order ------
    def export(self) -> dict[str, Any]:
        return {
            "strings": self.strings.items,
            "threads": self.threads.items,
            "sigs": self.sigs.items,
            "tables": {
                name: {k: getattr(self, name).joined(k) for k in getattr(self, name).spec}
                for name in ("ranges", "gpu", "flows", "memory", "gpu_ann", "stacks")
            },
            "thread_names": self.thread_names,
            "counters": self.counters,
            "counts": self.counts,
            "categories": self.categories,
        }

    def merge(self, exp: dict[str, Any]) -> None:
        """Append another builder's columns, renumbering its strings, threads and signatures."""

        def mapping(intern: _Interner, items: list[Any]) -> np.ndarray:
            # one id per item, and -1 last: a column's -1 ("none") indexes it and stays -1
            return np.array([intern(x) for x in items] + [_NONE], dtype=np.int64)

        smap = mapping(self.strings, exp["strings"])
        tmap = mapping(self.threads, exp["threads"])
        gmap = mapping(self.sigs, exp["sigs"])
        remap = {
            "ranges": {"name": smap, "thread": tmap, "sig": gmap},
            "gpu": {"name": smap},
            "flows": {"thread": tmap},
            "memory": {"thread": tmap},
            "gpu_ann": {"name": smap},
            "stacks": {"name": smap, "thread": tmap},
        }
        for name, cols in exp["tables"].items():
            table = getattr(self, name)
            for k, a in cols.items():
                m = remap[name].get(k)
                if m is not None and len(a):
                    v = np.frombuffer(a, dtype=table.spec[k])
                    table.extend(**{k: m[v].astype(v.dtype).tobytes()})  # ids are >= -1
                elif len(a):
                    table.extend(**{k: a})
        self.thread_names.update(exp["thread_names"])
        self.counters.extend(exp["counters"][: max(0, 1_000_000 - len(self.counters))])
        for k, v in exp["counts"].items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.categories |= exp["categories"]

    def _clean(self, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Column fix-ups done once, vectorised: rows without a timestamp go, the two spellings
        of External id merge, negative durations become 0."""
        ts = t["ts"]
        bad = np.isnan(ts) | np.isinf(ts)
        if bad.any():
            self.counts["no_ts"] += int(bad.sum())
        # times nanosecond int64 columns cannot hold (ts=1e300, dur=1e25...): dropped, counted
        far = np.abs(ts) > MAX_TS_US
        if "dur" in t:
            far |= t["dur"] > MAX_DUR_US
        far &= ~bad
        if far.any():
            self.counts["out_of_range"] = self.counts.get("out_of_range", 0) + int(far.sum())
            bad |= far
        if bad.any():
            t = {k: v[~bad] for k, v in t.items()}
        if "ext1" in t:
            ext1 = t.pop("ext1")
            t["ext"] = np.where(t["ext"] >= 0, t["ext"], ext1)
        if "dur" in t:
            d = t["dur"]
            neg = (d < 0) | np.isnan(d)
            if neg.any():
                self.counts["negative_dur"] += int((d < 0).sum())
                t["dur"] = np.where(neg, 0.0, d)
        return t

    def finish(self, path: str, meta: dict[str, Any], stats: dict[str, Any]) -> Trace:
        ranges = self._clean(self.ranges.freeze())
        for k in NARROWED_RANGE_IDS:
            ranges[k] = narrow_ids(ranges[k])
        gpu = self._clean(self.gpu.freeze())
        flows = self._clean(self.flows.freeze())
        memory = self._clean(self.memory.freeze())
        gpu_ann = self._clean(self.gpu_ann.freeze())
        stacks = self._clean(self.stacks.freeze())
        # a GPU activity without a device field is on the device its pid names
        gpu["device"] = np.where(gpu["device"] >= 0, gpu["device"], np.maximum(gpu["pid"], 0)).astype(np.int32)
        # ops recorded without shapes: their empty signature is no signature
        empty = self.sigs.index.get(b"\x00\x00\x00")
        if empty is not None and len(ranges["sig"]):
            ranges["sig"] = np.where(ranges["sig"] == empty, -1, ranges["sig"]).astype(np.int32)
        # All times become integer nanoseconds after the earliest timestamp: exact ordering and
        # containment tests, and no float64 precision loss on epoch-based microsecond clocks.
        starts = [t["ts"] for t in (ranges, gpu, flows, memory, gpu_ann) if len(t["ts"])]
        base = float(min(a.min() for a in starts)) if starts else 0.0
        for t in (ranges, gpu, gpu_ann, stacks):
            t["ts_ns"] = np.rint((t["ts"] - base) * 1000.0).astype(np.int64)
            t["dur_ns"] = np.rint(t["dur"] * 1000.0).astype(np.int64)
        for t in (flows, memory):
            t["ts_ns"] = np.rint((t["ts"] - base) * 1000.0).astype(np.int64)
        sigs = [Signature(*k.split(b"\x00")) for k in self.sigs.items]
        st = dict(stats)
        st.update(self.counts)
        st["categories"] = set(self.categories)
        return Trace(
            path=path,
            meta=meta,
            strings=self.strings.items,
            ranges=ranges,
            gpu=gpu,
            flows=flows,
            memory=memory,
            gpu_annotations=gpu_ann,
            signatures=sigs,
            counters=self.counters,
            thread_names=self.thread_names,
            threads=self.threads.items,
            base_us=base,
            stats=st,
            stacks=stacks,
        )


if TYPE_CHECKING:  # typing.ParamSpec is Python 3.10; the package runs on 3.9 (annotations are strings)
    from typing import ParamSpec

    _P = ParamSpec("_P")


def _collector_paused(fn: Callable[_P, Trace]) -> Callable[_P, Trace]:
    """``fn`` with the cyclic garbage collector paused while it runs (and restored after)."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> Trace:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


@_collector_paused
def load_trace(
    path: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep_python: str = DEFAULT_KEEP_PYTHON,
    salvage: bool = True,
    *,
    jobs: Optional[int] = None,
    parallel_min_bytes: Optional[int] = None,
) -> Trace:
    """Read ``path`` into a :class:`Trace`.

    A file that ends early keeps the events read before the cut (``salvage``) and says so in
    ``warnings``; with ``salvage=False`` it raises :class:`TraceTruncated`. ``jobs`` and
    ``parallel_min_bytes``: when to read with two processes (:func:`.parallel.suitable`).

    The cyclic garbage collector is paused while reading: the reader makes no cycles, and the
    collections its allocations trigger (lists per chunk) only walked every live object, a
    tenth of the reading's cache misses.
    """
    from . import parallel

    truncated: Optional[str] = None
    meta: Optional[dict[str, Any]] = None
    stats: Optional[dict[str, Any]] = None
    _progress.begin_read(path)
    tried_parallel = parallel.suitable(path, jobs, parallel_min_bytes)
    if tried_parallel:
        builder = TraceBuilder(keep_python)
        try:
            meta, stats, truncated = parallel.load_parallel(path, max_bytes, keep_python, builder)
        except parallel.NotSuited:
            meta = stats = None
        if truncated is not None and stats is not None:
            if not salvage or builder.counts["events"] == 0:
                raise TraceTruncated(truncated)
            stats["truncated"] = True
    if stats is None:
        builder = TraceBuilder(keep_python)
        if tried_parallel:
            _progress.begin_read(path)  # the parallel read gave up: count from byte 0 again
        try:
            meta, stats = read_trace(
                path,
                builder.add,
                max_bytes=max_bytes,
                on_raw=builder.add_raw,
                tagged=True,
                raw_wanted=builder.wants_raw,
            )
        except TraceTruncated as e:
            if not salvage or builder.counts["events"] == 0:
                raise
            truncated = str(e)
            meta, stats = getattr(e, "meta", {}), dict(getattr(e, "stats", {}), truncated=True)
    trace = builder.finish(path, meta if isinstance(meta, dict) else {}, stats)
    n_events = builder.counts["events"]
    kept = sum(len(t["ts"]) for t in (trace.ranges, trace.gpu, trace.flows, trace.memory, trace.gpu_annotations))
    if not n_events and stats.get("skipped", 0) + stats.get("too_deep", 0):
        raise TraceReadError(
            f"no trace events: none of the {stats.get('skipped', 0) + stats.get('too_deep', 0)} "
            "entries of traceEvents is an event object"
        )
    dropped = builder.counts["no_ts"] + builder.counts.get("out_of_range", 0)
    if n_events and not kept and dropped:
        raise TraceReadError(
            f"no usable events: {dropped} of the {n_events} events have no timestamp (or one out of range)"
        )
    if truncated:
        trace.warnings.append(
            f"the file is truncated ({truncated}); analysed the {builder.counts['events']} events before the cut"
        )
    skipped = stats.get("skipped", 0)
    if skipped:
        trace.warnings.append(f"{skipped} entries of traceEvents were not event objects and were skipped")
    if stats.get("coerced_chunks", 0) > stats.get("repaired", 0):  # repaired chunks are coerced too
        trace.warnings.append("some events had fields of unexpected types; they were coerced or dropped")
    if builder.counts["negative_dur"]:
        trace.warnings.append(f"{builder.counts['negative_dur']} events had a negative duration (treated as 0)")
    if builder.counts.get("out_of_range"):
        trace.warnings.append(
            f"{builder.counts['out_of_range']} events had a timestamp or duration out of range "
            f"(|ts| > {MAX_TS_US:.0e} us or dur > {MAX_DUR_US:.0e} us) and were dropped"
        )
    if stats.get("too_deep"):
        trace.warnings.append(f"{stats['too_deep']} events nested too deeply to decode and were skipped")
    if stats.get("repaired"):
        trace.warnings.append(
            "some events held invalid UTF-8 or NaN/Infinity: bad characters were replaced, non-finite numbers dropped"
        )
    return trace
