"""Writing reports as JSON, in pieces.

A kernel table is written a thousand rows at a time, so a report with 10^5 kernels never
exists as one list of dicts. Nothing here imports numpy: the CLI copies cached JSON through
these helpers without loading the analysis modules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from . import __version__

SCHEMA_VERSION = 1
_CHUNK = 1024


def _enc_hook(obj):
    if hasattr(obj, "rows") and hasattr(obj, "columns"):  # a KernelTable
        return list(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    raise TypeError(f"cannot encode {type(obj).__name__}")


# The one JSON encoder: the CLI, the plugin's routes, the cache and annotate all write through it.
_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def to_json(obj) -> bytes:
    """Encode a report (or any part of one, or any route's answer)."""
    return _ENCODER.encode(obj)


def envelope_head() -> bytes:
    """``{"schema":1,"tool":{...},"traces":[`` — the opening of an envelope written in pieces."""
    head = {"schema": SCHEMA_VERSION, "tool": {"name": "tb-attention", "version": __version__}}
    return _ENCODER.encode(head)[:-1] + b',"traces":['


def trace_json_head(path: str) -> bytes:
    return b'{"path":' + _ENCODER.encode(path) + b","


def iter_trace_body(t: dict) -> Iterator[bytes]:
    """One trace report as JSON, without its opening ``{"path":...,``."""
    kt: Any = t.get("kernels")
    rest = {k: v for k, v in t.items() if k not in ("path", "kernels")}
    if not (hasattr(kt, "rows") and hasattr(kt, "columns")):
        if kt is not None:
            rest["kernels"] = kt
        yield _ENCODER.encode(rest)[1:]
        return
    enc = _ENCODER.encode(rest)
    yield (enc[1:-1] + b',"kernels":[') if len(enc) > 2 else b'"kernels":['
    first = True
    for chunk in kt.encodable_chunks(_CHUNK, _ENCODER.encode):
        if not first:
            yield b","
        first = False
        yield _ENCODER.encode(chunk)[1:-1]
    yield b"]}"


def iter_json(data: dict) -> Iterator[bytes]:
    """A whole envelope, piece by piece."""
    yield envelope_head()
    for i, t in enumerate(data.get("traces", [])):
        if i:
            yield b","
        yield trace_json_head(t.get("path", ""))
        yield from iter_trace_body(t)
    yield b"]}"
