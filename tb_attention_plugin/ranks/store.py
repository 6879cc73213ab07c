"""Rank summaries kept with the report cache (:mod:`..cache`).

Same directory and same key as the report (file path, size, mtime, analysis options, engine
version), file ``<key>.rank.msgpack.z``: the report cache's pruning removes them with the
reports, and a changed trace or a new engine is summarised again. A summary is a few KB, so
reading a 1024-rank job's summaries is a few MB of I/O instead of 1024 reports.

Reading needs none of the engine (the plugin's loader reads summaries in TensorBoard's process):
this module imports no analysis; :mod:`.summary` makes the summaries and imports this one.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from typing import Optional

import msgspec

from ..cache import ReportCache
from ..options import Options

SUMMARY_SCHEMA = 1  # bumped when a summary's fields change: older files are summarised again

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _file(cache: ReportCache, key: str) -> str:
    return os.path.join(cache.dir, key + ".rank.msgpack.z")


def summary_key(cache: ReportCache, path: str, options: Options) -> Optional[str]:
    try:
        return cache.key(path, os.stat(path), options.key())
    except OSError:
        return None


def has(cache: ReportCache, key: Optional[str]) -> bool:
    """Is there a summary under ``key`` (without reading it)?"""
    return key is not None and os.path.isfile(_file(cache, key))


def get(cache: ReportCache, key: Optional[str]) -> Optional[dict]:
    if key is None:
        return None
    try:
        with open(_file(cache, key), "rb") as f:
            out = _dec.decode(zlib.decompress(f.read()))
    except (OSError, zlib.error, msgspec.DecodeError):
        return None
    if not isinstance(out, dict) or out.get("schema") != SUMMARY_SCHEMA:
        return None
    return out


def put(cache: ReportCache, key: Optional[str], summary: dict) -> None:
    if key is None:
        return
    try:
        os.makedirs(cache.dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.dir, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(zlib.compress(_enc.encode(summary), 6))
        os.replace(tmp, _file(cache, key))
    except (OSError, TypeError, ValueError):
        pass  # a summary that cannot be kept is only computed again
