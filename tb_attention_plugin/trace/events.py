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
    args: Raw = Raw()


class OpArgs(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "external_id_v1": "external id",
    "seq": "Sequence number",
    "fwd_tid": "Fwd thread id",
    "dims": "Input Dims",
    "types": "Input type",
    "strides": "Input Strides",
    "concrete": "Concrete Inputs",
}):
    external_id: Optional[int] = None
    external_id_v1: Optional[int] = None
    seq: Optional[int] = None
    fwd_tid: Optional[int] = None
    dims: Raw = Raw()
    types: Raw = Raw()
    strides: Raw = Raw()
    concrete: Raw = Raw()


class LaunchArgs(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "external_id_v1": "external id",
}):
    external_id: Optional[int] = None
    external_id_v1: Optional[int] = None
    correlation: Optional[int] = None


class GpuArgs(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "external_id_v1": "external id",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "blocks_per_sm": "blocks per SM",
    "warps_per_sm": "warps per SM",
    "occupancy": "est. achieved occupancy %",
}):
    external_id: Optional[int] = None
    external_id_v1: Optional[int] = None
    correlation: Optional[int] = None
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


class MemoryArgs(msgspec.Struct, gc=False, rename={
    "addr": "Addr",
    "nbytes": "Bytes",
    "total_allocated": "Total Allocated",
    "total_reserved": "Total Reserved",
    "device_type": "Device Type",
    "device_id": "Device Id",
}):
    addr: Optional[int] = None
    nbytes: Optional[int] = None
    total_allocated: Optional[int] = None
    total_reserved: Optional[int] = None
    device_type: Optional[int] = None
    device_id: Optional[int] = None


class ExternalArgs(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "external_id_v1": "external id",
}):
    external_id: Optional[int] = None
    external_id_v1: Optional[int] = None
    device: Optional[int] = None
    stream: Scalar = None
