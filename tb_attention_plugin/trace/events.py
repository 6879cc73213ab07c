"""Typed shapes of the trace events and of the ``args`` we read.

Decoding into these msgspec structs reads only the fields listed here; everything else in the
file is skipped by the decoder without building Python objects, which is what makes large
traces cheap. ``args`` stays raw bytes until we know the event is one we use.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import msgspec

Raw = msgspec.Raw
Scalar = Union[int, str, None]


class Args(
    msgspec.Struct,
    gc=False,
    frozen=True,
    rename={
        "external_id": "External id",
        "external_id_v1": "external id",
        "seq": "Sequence number",
        "fwd_tid": "Fwd thread id",
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
    },
):
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
    fwd_tid: int = -1
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
