#!/usr/bin/env python3
"""The parse floor: one msgspec typed decode of the whole file into minimal event structs.

    python benchmarks/floor.py FILE_OR_RUN_DIR...

What any Python tool reading a Chrome/Kineto trace has to pay at least: the file read whole,
gzip inflated if it is gzip, and every event decoded by msgspec (the fastest typed JSON decoder
for Python) into a struct of the seven fields any analysis needs (``ph``, ``cat``, ``name``,
``pid``, ``tid``, ``ts``, ``dur``). No ``args``, no columns, no analysis. bench.py times it in a
fresh process beside the tools (its "parse floor" row) and checks our cold analysis against it;
benchmarks/profile_stages.py measures it in the same process run as its stage table.

Prints one line (events, bytes, seconds) and exits 0; non-zero if nothing decoded.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from typing import Union

import msgspec

try:  # as the reader does: ISA-L inflates about 3x faster than zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover
    _zlib = zlib  # type: ignore[misc]


class FloorEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: float = 0.0
    dur: float = 0.0


class FloorTrace(msgspec.Struct, gc=False):
    traceEvents: list[FloorEvent] = []


_DECODE = msgspec.json.Decoder(FloorTrace).decode


def files_of(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if ".json" in f)
        else:
            out.append(p)
    return out


def decode_file(path: str) -> tuple[int, int]:
    """(events, uncompressed bytes) of one file, decoded whole."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = _zlib.decompress(raw, 31)
    doc = _DECODE(raw)
    return len(doc.traceEvents), len(raw)


def floor(paths: list[str]) -> tuple[int, int]:
    n = size = 0
    for p in files_of(paths):
        e, b = decode_file(p)
        n, size = n + e, size + b
    return n, size


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    t0, c0 = time.perf_counter(), time.process_time()
    n, size = floor(argv)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"floor ok: {n} events, {size / 1e6:.1f} MB, decode {wall:.3f} s wall, {cpu:.3f} s CPU")
    return 0 if n else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
