"""On-disk cache of analysis reports, so that reopening a big trace is instant.

Entries live in ``$TB_ATTENTION_CACHE_DIR`` (default ``$XDG_CACHE_HOME/tb-attention`` or
``~/.cache/tb-attention``), never next to the user's traces. The key covers the file's absolute
path, size and mtime, the analysis options and the engine version, so a changed file or a new
release is analysed again. Entries are msgpack, zlib-compressed; the directory is pruned to
``max_bytes`` (oldest first).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import zlib
from typing import Optional

import msgspec

from . import __version__

ENGINE_VERSION = f"{__version__}+r1"
DEFAULT_MAX_BYTES = 1 << 30


def default_dir() -> str:
    d = os.environ.get("TB_ATTENTION_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tb-attention")


class ReportCache:
    def __init__(self, directory: Optional[str] = None, max_bytes: int = DEFAULT_MAX_BYTES):
        self.dir = directory or default_dir()
        self.max_bytes = max_bytes
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder()

    def key(self, path: str, st: os.stat_result, options_key: str) -> str:
        ident = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{options_key}\0{ENGINE_VERSION}"
        return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:40]

    def _file(self, key: str) -> str:
        return os.path.join(self.dir, key + ".msgpack.z")

    def get(self, key: str) -> Optional[dict]:
        try:
            with open(self._file(key), "rb") as f:
                data = f.read()
            out = self._dec.decode(zlib.decompress(data))
            os.utime(self._file(key))
            return out if isinstance(out, dict) else None
        except (OSError, zlib.error, msgspec.DecodeError):
            return None

    def put(self, key: str, report: dict) -> None:
        try:
            os.makedirs(self.dir, exist_ok=True)
            blob = zlib.compress(self._enc.encode(report), 1)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self._file(key))
            self._prune()
        except (OSError, TypeError, ValueError):
            pass  # a cache that cannot be written is only a slower cache

    def _prune(self) -> None:
        try:
            entries = []
            for name in os.listdir(self.dir):
                if name.endswith(".msgpack.z"):
                    p = os.path.join(self.dir, name)
                    st = os.stat(p)
                    entries.append((st.st_mtime, st.st_size, p))
        except OSError:
            return
        total = sum(e[1] for e in entries)
        for _, size, p in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                os.remove(p)
                total -= size
            except OSError:
                pass
