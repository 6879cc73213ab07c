"""Typed shapes of the trace events and of the ``args`` we read.

Decoding into these msgspec structs reads only the fields listed here; everything else in the
file is skipped by the decoder without building Python objects, which is what makes large
traces cheap. ``args`` stays raw bytes until we know the event is one we use.
"""
from __future__ import annotations

from typing import Optional, Union

import msgspec

Raw = msgspec.Raw
Scalar = Union[int, str, None]


class Args(msgspec.Struct, gc=False, rename={
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
}):
    """Every ``args`` field any event kind needs, decoded in the same pass as the event.
    Unlisted keys (``Python id``, ``Ev Idx``, CUPTI metrics...) are skipped by the decoder."""
    # ops, launches, annotations, GPU activities
    external_id: Optional[int] = None
    external_id_v1: Optional[int] = None
    correlation: Optional[int] = None
    # ops
    seq: Optional[int] = None
    fwd_tid: Optional[int] = None
    dims: Raw = Raw()
    types: Raw = Raw()
    strides: Raw = Raw()
    concrete: Raw = Raw()
    # GPU activities
    device: Optional[int] = None
    stream: Scalar = None
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    registers: Optional[int] = None
    shared_memory: Optional[int] = None
    blocks_per_sm: Optional[float] = None
    warps_per_sm: Optional[float] = None
    occupancy: Optional[float] = None
    bytes: Optional[int] = None
    # [memory] instant events
    addr: Optional[int] = None
    nbytes: Optional[int] = None
    total_allocated: Optional[int] = None
    total_reserved: Optional[int] = None
    device_type: Optional[int] = None
    device_id: Optional[int] = None
    # thread_name / process_name metadata
    name: Optional[str] = None

    @property
    def ext(self) -> Optional[int]:
        return self.external_id if self.external_id is not None else self.external_id_v1


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Scalar = None
    tid: Scalar = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    id: Scalar = None
    s: Optional[str] = None
    args: Optional[Args] = None
