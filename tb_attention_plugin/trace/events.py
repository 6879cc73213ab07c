"""Typed shapes of the trace events and of the ``args`` we read.

Decoding into these msgspec structs reads only the fields listed here; everything else in the
file is skipped by the decoder without building Python objects, which is what makes large
traces cheap. ``args`` stays raw bytes until we know the event is one we use.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Optional, Union

import msgspec

Raw = msgspec.Raw
Scalar = Union[int, str, None]


# The profiler's spelling of every ``args`` key we read, by field name: one mapping for all the
# structs below (a struct uses the names of its own fields and ignores the rest).
ARG_KEYS = {
    "external_id": "External id",
    "external_id_v1": "external id",
    "seq": "Sequence number",
    "dims": "Input Dims",
    "types": "Input type",
    "strides": "Input Strides",
    "concrete": "Concrete Inputs",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "blocks_per_sm": "blocks per SM",
    "warps_per_sm": "warps per SM",
    "occupancy": "est. achieved occupancy %",
    "addr": "Addr",
    "nbytes": "Bytes",
    "total_allocated": "Total Allocated",
    "total_reserved": "Total Reserved",
    "device_type": "Device Type",
    "device_id": "Device Id",
}


class Args(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """Every ``args`` field any event kind needs, decoded in the same pass as the event.
    Unlisted keys (``Python id``, ``Ev Idx``, CUPTI metrics...) are skipped by the decoder.
    Missing integers are -1 and missing floats NaN (not None), so columns are filled straight
    from the structs; a JSON null or a wrong type sends the chunk down the tolerant path."""

    # ops, launches, annotations, GPU activities
    external_id: int = -1
    external_id_v1: int = -1
    correlation: int = -1
    # ops
    seq: int = -1
    dims: Raw = Raw()
    types: Raw = Raw()
    strides: Raw = Raw()
    concrete: Raw = Raw()
    # GPU activities
    device: int = -1
    stream: Scalar = None
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    registers: int = 0
    shared_memory: int = 0
    blocks_per_sm: float = math.nan
    warps_per_sm: float = math.nan
    occupancy: float = math.nan
    bytes: int = -1
    # [memory] instant events
    addr: int = 0
    nbytes: int = 0
    total_allocated: int = -1
    total_reserved: int = -1
    device_type: int = -1
    device_id: int = -1
    # thread_name / process_name metadata
    name: Optional[str] = None


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    cat: Optional[str] = None
    name: str = ""
    pid: Scalar = None
    tid: Scalar = None
    ts: float = math.nan  # NaN: no timestamp (such events are dropped)
    dur: float = 0.0
    id: Scalar = None
    s: Optional[str] = None
    args: Args = NO_ARGS


# -- tagged kinds: the fast path ---------------------------------------------------------------
# A chunk of a well-formed Kineto trace is decoded in one call into one struct type per category
# (``cat`` is the tag), each with only the fields its kind is read for: a Python frame has no
# args, a CPU->GPU flow (``ac2g``) no fields at all, an op's args only its ids and input
# signature. That is fewer Python objects per event to make and to free, and the builder sorts
# the events by their class instead of testing each one's ``ph`` and ``cat``. ``ph`` is a
# Literal of the phases under which the kind's events are used (shared objects, not one string
# per event), so every struct a tagged decode returns is used as its class says. An unknown
# category, a missing ``cat`` or ``ph``, another phase or a wrong field type makes the chunk's
# tagged decode fail and the chunk is decoded as :class:`Event` (the reader's general path),
# which gives the same columns.
X = Literal["X"]
FLOW_PHASES = Literal["s", "f", "t"]
INSTANT_PHASES = Literal["i", "I"]


class IdArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of a CPU annotation (``user_annotation``)."""

    external_id: int = -1
    external_id_v1: int = -1


class OpArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of an op: its ids and the raw JSON of its input signature."""

    external_id: int = -1
    external_id_v1: int = -1
    seq: int = -1
    dims: Raw = Raw()
    types: Raw = Raw()
    strides: Raw = Raw()
    concrete: Raw = Raw()


class LaunchArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of a runtime/driver call."""

    external_id: int = -1
    external_id_v1: int = -1
    correlation: int = -1


class GpuArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of a GPU activity (kernel, memcpy, memset)."""

    external_id: int = -1
    external_id_v1: int = -1
    correlation: int = -1
    device: int = -1
    stream: Scalar = None
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    registers: int = 0
    shared_memory: int = 0
    blocks_per_sm: float = math.nan
    warps_per_sm: float = math.nan
    occupancy: float = math.nan
    bytes: int = -1


class GpuAnnArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of a GPU annotation (``gpu_user_annotation``)."""

    external_id: int = -1
    external_id_v1: int = -1
    device: int = -1
    stream: Scalar = None


class MemArgs(msgspec.Struct, gc=False, frozen=True, rename=ARG_KEYS):
    """``args`` of a ``[memory]`` instant event."""

    addr: int = 0
    nbytes: int = 0
    total_allocated: int = -1
    total_reserved: int = -1
    device_type: int = -1
    device_id: int = -1


class Kind(msgspec.Struct, tag_field="cat", gc=False):
    """Base of the tagged kinds. ``ROLE`` says which table the events go to (records.py)."""

    ROLE: ClassVar[str] = "skip"


class _Range(Kind):
    ph: X
    name: str = ""
    pid: Scalar = None
    tid: Scalar = None
    ts: float = math.nan
    dur: float = 0.0


class OpEvent(_Range, tag="cpu_op"):
    ROLE: ClassVar[str] = "op"
    args: OpArgs = OpArgs()


class AnnotationEvent(_Range, tag="user_annotation"):
    ROLE: ClassVar[str] = "annotation"
    args: IdArgs = IdArgs()


class PythonEvent(_Range, tag="python_function"):
    ROLE: ClassVar[str] = "python"


class LaunchEvent(_Range, tag="cuda_runtime"):
    ROLE: ClassVar[str] = "launch"
    args: LaunchArgs = LaunchArgs()


class GpuEvent(_Range, tag="kernel"):
    ROLE: ClassVar[str] = "gpu"
    args: GpuArgs = GpuArgs()


class GpuAnnotationEvent(_Range, tag="gpu_user_annotation"):
    ROLE: ClassVar[str] = "gpu_annotation"
    args: GpuAnnArgs = GpuAnnArgs()


class FlowEvent(Kind, tag="fwdbwd"):
    ROLE: ClassVar[str] = "flow"
    ph: FLOW_PHASES
    id: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float = math.nan


class InstantEvent(Kind, tag="cpu_instant_event"):
    ROLE: ClassVar[str] = "instant"
    ph: INSTANT_PHASES
    name: str = ""
    pid: Scalar = None
    tid: Scalar = None
    ts: float = math.nan
    args: MemArgs = MemArgs()


class _SkippedRange(Kind):
    """Complete events of a category nothing reads: only counted (``other``)."""

    ph: X


class _SkippedFlow(Kind):
    """Flows other than ``fwdbwd`` (the CPU->GPU ``ac2g`` ones: launches carry the correlation)."""

    ph: FLOW_PHASES


def _spelling(base: type[Kind], cat: str) -> type[Kind]:
    """The same kind under another spelling of its category (Kineto's older schema)."""
    return type(f"{base.__name__}_{cat}", (base,), {}, tag=cat)


_KINDS: list[type[Kind]] = [
    OpEvent,
    _spelling(OpEvent, "Operator"),
    AnnotationEvent,
    PythonEvent,
    _spelling(PythonEvent, "python"),
    LaunchEvent,
    _spelling(LaunchEvent, "cuda_driver"),
    _spelling(LaunchEvent, "Runtime"),
    GpuEvent,
    _spelling(GpuEvent, "Kernel"),
    _spelling(GpuEvent, "gpu_memcpy"),
    _spelling(GpuEvent, "Memcpy"),
    _spelling(GpuEvent, "gpu_memset"),
    _spelling(GpuEvent, "Memset"),
    GpuAnnotationEvent,
    FlowEvent,
    InstantEvent,
    *(_spelling(_SkippedRange, c) for c in ("Trace", "overhead", "cuda_sync", "cuda_profiler_range")),
    *(_spelling(_SkippedFlow, c) for c in ("ac2g", "async", "async_cpu_to_gpu")),
]
TAGGED_KINDS: tuple[type[Kind], ...] = tuple(_KINDS)
# what the fast path decodes a chunk into (a list of any of the kinds, told apart by ``cat``)
TAGGED_LIST: Any = list[Union[tuple(_KINDS)]]  # type: ignore[misc]
