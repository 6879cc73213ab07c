"""On-disk cache of analysis reports, so that reopening a big trace is instant.

Entries live in the directory the edges give (settings.py: ``$TB_ATTENTION_CACHE_DIR``, default
``$XDG_CACHE_HOME/tb-attention`` or ``~/.cache/tb-attention``), never next to the user's traces.
The key covers the file's absolute path, size and mtime, the analysis options and the engine
version, so a changed file or a new release is analysed again. Entries are msgpack,
zlib-compressed; the directory is pruned to ``max_bytes`` (oldest first).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import types
import zlib
from typing import Any, Optional

import msgspec

from . import __version__
from .trace import sidecars

_inflate_lib: types.ModuleType
try:  # ISA-L inflates about 3x faster; same format as zlib
    from isal import isal_zlib as _inflate_lib
except ImportError:  # pragma: no cover
    _inflate_lib = zlib


def _source_fingerprint() -> str:
    """A hash of the package's own code and data (the advice's measured backend table): any change
    to the analysis (an upgrade, a local edit) invalidates cached reports, not only a version bump.
    Read on a cache's first key, not at import: a run without a cache (``--no-cache``) never
    pays for it (~2 ms on a quiet machine, 10-15 ms on a busy one)."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha1()
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("static", "__pycache__"))
        for f in sorted(files):
            if f.endswith((".py", ".json")):
                try:
                    with open(os.path.join(d, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
                except OSError:
                    pass
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def engine_version() -> str:
    """The package version and its code's fingerprint: part of every cache key."""
    return f"{__version__}+{_source_fingerprint()}"


_WRITTEN: dict = {}  # cache directory -> bytes this process wrote there since it last pruned
DEFAULT_MAX_BYTES = 1 << 30


class ReportCache:
    def __init__(self, directory: str, max_bytes: int = DEFAULT_MAX_BYTES):
        self.dir = directory
        self.max_bytes = max_bytes
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder()

    def key(self, path: str, st: os.stat_result, options_key: str, side: Optional[str] = None) -> str:
        """The entry of one trace: its path, size and mtime, the options, the engine, and the files
        beside it that change its analysis (trace/sidecars.py: ncu exports, replay results,
        reference candidates; ``side`` is their signature, listed here when not given)."""
        if side is None:
            side = sidecars.find(path).signature()
        ident = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{options_key}\0{engine_version()}{side}"
        return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:40]

    def _file(self, key: str) -> str:
        return os.path.join(self.dir, key + ".msgpack.z")

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (not whether it still decodes: :meth:`get` says)."""
        return os.path.isfile(self._file(key))

    def get(self, key: str) -> Optional[dict]:
        try:
            with open(self._file(key), "rb") as f:
                data = f.read()
            out = self._dec.decode(_inflate_lib.decompress(data))
            os.utime(self._file(key))
            if not isinstance(out, dict):
                return None
            if isinstance(out.get("kernels"), dict) and "columns" in out["kernels"]:
                from .table import KernelTable

                out["kernels"] = KernelTable.from_state(out["kernels"])
            return out
        except (OSError, zlib.error, msgspec.DecodeError, KeyError, ValueError, TypeError):
            return None

    def put(self, key: str, report: dict) -> None:
        try:
            os.makedirs(self.dir, exist_ok=True)
            kt: Any = report.get("kernels")
            if hasattr(kt, "to_state"):
                report = dict(report, kernels=kt.to_state())
            blob = zlib.compress(self._enc.encode(report), 1)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self._file(key))
            self._maybe_prune(len(blob))
        except (OSError, TypeError, ValueError):
            pass  # a cache that cannot be written is only a slower cache

    # The JSON form of a report, as the CLI prints it, so a warm `analyze --format json` only
    # decompresses and copies.
    def _json_file(self, key: str) -> str:
        return os.path.join(self.dir, key + ".json.z")

    def get_json(self, key: str):
        """Chunks of the cached JSON body of a trace report, or None."""
        try:
            f = open(self._json_file(key), "rb")
        except OSError:
            return None
        return self._inflate(f)

    @staticmethod
    def _inflate(f):
        with f:
            d = _inflate_lib.decompressobj()
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                yield d.decompress(block)
            yield d.flush()

    def json_writer(self, key: str) -> _JsonWriter:
        return _JsonWriter(self, key)

    def _maybe_prune(self, nbytes: int) -> None:
        """Prune on the first write of this process to the directory, then once every
        ``max_bytes / 16`` written: pruning lists and stats every entry, and doing it after every
        write made a run of n traces O(n^2) (2000 tiny traces: 8 million stat calls, 40 s)."""
        d = _WRITTEN.get(self.dir)
        if d is not None and d + nbytes < self.max_bytes // 16:
            _WRITTEN[self.dir] = d + nbytes
            return
        _WRITTEN[self.dir] = 0
        self._prune()

    def _prune(self) -> None:
        try:
            entries = []
            for name in os.listdir(self.dir):
                if name.endswith((".msgpack.z", ".json.z")):
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


class _JsonWriter:
    """Compresses chunks into a temporary file; ``commit`` publishes it atomically."""

    def __init__(self, cache: ReportCache, key: str):
        self.cache, self.key = cache, key
        self.f = None
        self.z = zlib.compressobj(1)
        try:
            os.makedirs(cache.dir, exist_ok=True)
            fd, self.tmp = tempfile.mkstemp(dir=cache.dir, suffix=".tmp")
            self.f = os.fdopen(fd, "wb")
        except OSError:
            self.f = None

    def write(self, chunk: bytes) -> None:
        if self.f is not None:
            try:
                self.f.write(self.z.compress(chunk))
            except OSError:
                self.abort()

    def commit(self) -> None:
        if self.f is None:
            return
        try:
            self.f.write(self.z.flush())
            n = self.f.tell()
            self.f.close()
            os.replace(self.tmp, self.cache._json_file(self.key))
            self.cache._maybe_prune(n)
        except OSError:
            self.abort()
        self.f = None

    def abort(self) -> None:
        if self.f is not None:
            try:
                self.f.close()
                os.remove(self.tmp)
            except OSError:
                pass
        self.f = None
