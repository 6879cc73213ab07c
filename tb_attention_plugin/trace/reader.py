"""Stream a Chrome/Kineto trace file into chunks of decoded events, in bounded memory.

Accepts ``.json`` and gzip (sniffed by magic, not by name), a top-level object holding
``traceEvents`` (with any other keys before or after it) or a bare list of events.

The file is never held whole: it is decompressed block by block, cut at event boundaries and
each chunk is decoded by msgspec into :class:`~.events.Event` structs. A boundary is a ``}``,
``,``, ``{`` sequence; one that falls inside a string makes the chunk fail to decode, and we
retry with an earlier boundary, then fall back to scanning a single event exactly. Errors are
:class:`TraceReadError` with a one-line message; a stream that ends early raises
:class:`TraceTruncated` after every complete event before the cut has been delivered.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat as _stat
import types
import zlib
from typing import Any, BinaryIO, Callable, NoReturn, Optional, Protocol, Union

import msgspec

from .. import progress as _progress
from ..formats import fmt_bytes as _fmt_bytes
from .events import TAGGED_LIST, Args, Event

_zlib: types.ModuleType
try:  # ISA-L inflates about 3x faster than zlib; optional.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - exercised where isal is absent
    _zlib = zlib

BLOCK = 1 << 20  # bytes read (and inflated) per step
CHUNK_TARGET = 128 << 10  # bytes of events decoded per msgspec call: their objects (~3x that) stay in the
# core's cache while the builder reads them (2 MB chunks took 2.6x the cache misses, for 3 % fewer instructions)
MAX_EVENT_BYTES = 64 << 20  # one event, or one non-event top-level value, larger than this is refused
DEFAULT_MAX_BYTES = 16 << 30  # refuse traces that decompress to more (settings.py: TB_ATTENTION_MAX_BYTES)

_WS = b" \t\r\n"
_WS_RE = re.compile(rb"[ \t\r\n]*")
_STRUCT_RE = re.compile(rb'["\[\]{}]')
_LITERAL_RE = re.compile(rb"[^,\]\}\s]*")
_EVENT_LIST = msgspec.json.Decoder(list[Event])
_TAGGED_LIST = msgspec.json.Decoder(TAGGED_LIST)
# After this many chunks in a row that are not all of the kinds the tagged decoder knows (a trace
# of another schema), a parser stops trying it: each miss costs a partial decode.
TAGGED_MISSES = 8


class TraceReadError(ValueError):
    """The file is not a readable trace. ``str(err)`` is one line meant for the user."""


class TraceTruncated(TraceReadError):
    """The file ends in the middle of the trace (still being written, or cut off). ``meta`` and
    ``stats``: what the reader had when it stopped (set by :func:`read_trace`)."""

    meta: dict[str, Any]
    stats: dict[str, Any]


def _string_end(buf: bytes, start: int, resume: int = 0) -> int:
    """Index just past the JSON string whose opening quote is ``buf[start]``; -1 if ``buf`` ends
    first. Linear time and no per-character state (a backtracking regex needs ~100 bytes of
    memory per character: a 64 MiB string would take gigabytes). ``resume``: what
    :func:`_string_resume` said after an earlier call found no end in a shorter buffer."""
    i = max(start + 1, resume)
    for _ in range(64):
        j = buf.find(b'"', i)
        if j < 0:
            return -1
        if buf[j - 1] != 0x5C:  # not preceded by a backslash: the common case
            return j + 1
        seg = buf[max(start + 1, j - 64) : j]
        run = len(seg) - len(seg.rstrip(b"\\"))
        if run == len(seg) and j - 64 > start + 1:
            seg = buf[start + 1 : j]
            run = len(seg) - len(seg.rstrip(b"\\"))
        if run % 2 == 0:  # the backslashes escape each other
            return j + 1
        i = j + 1
    # Many escaped quotes: resolve every escape of the string at once. Escapes pair up from the
    # left, so dropping ``\\\\`` pairs and then ``\\"`` leaves only real quotes.
    p = max(start + 1, resume)
    w = buf[p:].replace(b"\\\\", b"__").replace(b'\\"', b"__")
    j = w.find(b'"')
    return -1 if j < 0 else p + 1 + j


def _string_resume(buf: bytes, start: int) -> int:
    """Where the search for the end of the string opened at ``buf[start]`` can go on once the
    buffer grows: its end, less a trailing run of backslashes (their pairing is not settled).
    No escape spans that point, so nothing before it is looked at again: without this, a 60 MiB
    string of escaped quotes was re-scanned from its start for every block read (18 s)."""
    n = len(buf)
    seg = buf[max(start + 1, n - 64) :]
    run = len(seg) - len(seg.rstrip(b"\\"))
    if run == len(seg) and n - 64 > start + 1:
        seg = buf[start + 1 :]
        run = len(seg) - len(seg.rstrip(b"\\"))
    return n - run


def _open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading without ever blocking (a named pipe with no writer would hang
    ``open``), and refuse anything that is not a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise TraceReadError("is a directory, not a trace file") from None
    except OSError as e:
        raise TraceReadError(f"cannot open: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if _stat.S_ISDIR(mode):
            raise TraceReadError("is a directory, not a trace file")
        if not _stat.S_ISREG(mode):
            kind = "a named pipe" if _stat.S_ISFIFO(mode) else "a socket" if _stat.S_ISSOCK(mode) else "a device"
            raise TraceReadError(f"not a regular file ({kind})")
        if getattr(os, "O_NONBLOCK", 0):
            try:
                os.set_blocking(fd, True)
            except (AttributeError, OSError):
                pass
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class ByteSource:
    """Decompressed bytes of a file, one block at a time, with a cap on the total."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES, report: bool = True):
        self.path = path
        self.max_bytes = max_bytes
        self._f = _open_regular(path)
        self.gzip = self._f.read(2) == b"\x1f\x8b"
        self._f.seek(0)
        self._inflate: Any = _zlib.decompressobj(31) if self.gzip else None  # None: not gzip
        self._pending = b""  # compressed input not yet consumed
        self.total = 0
        self.eof = False
        self.truncated = False
        # progress: one comparison per block on the hot path; never true without a record
        self._progress: Optional[_progress.Progress] = _progress.current() if report else None
        self._next_report = _progress.REPORT_BYTES if self._progress is not None else math.inf
        self._reported = 0

    def _report(self) -> None:
        assert self._progress is not None  # else _next_report is infinite
        pos = self._f.tell()  # file bytes consumed: compressed ones for gzip
        self._progress.add(pos - self._reported)
        self._reported = pos
        self._next_report = self.total + _progress.REPORT_BYTES

    def close(self) -> None:
        if self._progress is not None and not self._f.closed:
            self._report()
        self._f.close()

    def read(self) -> bytes:
        if self.eof:
            return b""
        if not self.gzip:
            out = self._f.read(BLOCK)
            if not out:
                self.eof = True
        else:
            out = self._read_gzip()
        self.total += len(out)
        if self.total > self.max_bytes:
            raise TraceReadError(
                f"decompressed size exceeds the limit of {_fmt_bytes(self.max_bytes)} "
                "(raise it with --max-bytes or TB_ATTENTION_MAX_BYTES)"
            )
        if self.total >= self._next_report:
            self._report()
        return out

    def _read_gzip(self) -> bytes:
        while True:
            if self._inflate.eof:
                # A gzip member ended; what follows is another member or trailing junk.
                rest = self._inflate.unused_data + self._pending
                if not rest:
                    rest = self._f.read(BLOCK)
                if rest[:2] != b"\x1f\x8b":
                    self.eof = True
                    return b""
                self._inflate = _zlib.decompressobj(31)
                self._pending = rest
            if not self._pending:
                self._pending = self._f.read(BLOCK)
                if not self._pending:
                    self.eof = True
                    self.truncated = True
                    return b""
            try:
                out: bytes = self._inflate.decompress(self._pending, BLOCK)
            except MemoryError:
                raise  # out of memory is not corrupt data: the caller says which it was
            except Exception as e:  # zlib.error, or isal's equivalent
                raise TraceReadError(f"corrupt gzip data: {e}") from None
            self._pending = self._inflate.unconsumed_tail
            if out:
                return out


def _finite(x: Any) -> Optional[float]:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, str):
        try:
            v = float(x)
        except ValueError:
            return None
        return v if math.isfinite(v) else None
    return None


def _scalar(x: Any) -> Union[int, str, None]:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int) or isinstance(x, str) or x is None:
        return x
    if isinstance(x, float) and math.isfinite(x):
        return int(x)
    return None


def _text(x: Any) -> Optional[str]:
    if isinstance(x, str):
        return x
    if x is None:
        return None
    return str(x)


def _lenient_events(items: Any, stats: dict[str, int]) -> list[Event]:
    """Turn untyped decoded JSON into Events, coercing what can be coerced honestly."""
    out: list[Event] = []
    if not isinstance(items, list):
        return out
    for it in items:
        if not isinstance(it, dict):
            stats["skipped"] = stats.get("skipped", 0) + 1
            continue
        args = it.get("args")
        ts, dur = _finite(it.get("ts")), _finite(it.get("dur"))
        out.append(
            Event(
                ph=_text(it.get("ph")),
                cat=_text(it.get("cat")),
                name=_text(it.get("name")) or "",
                pid=_scalar(it.get("pid")),
                tid=_scalar(it.get("tid")),
                ts=math.nan if ts is None else ts,
                dur=0.0 if dur is None else dur,
                id=_scalar(it.get("id")),
                s=_text(it.get("s")),
                args=lenient_args(args) if isinstance(args, dict) else Args(),
            )
        )
    stats["coerced_chunks"] = stats.get("coerced_chunks", 0) + 1
    return out


_ARGS_FIELDS = {f.encode_name: f.name for f in msgspec.structs.fields(Args)}


def lenient_args(d: dict[Any, Any]) -> Args:
    """Args from an untyped dict: each field decoded on its own, the ones that don't fit dropped."""
    fields = {}
    enc = msgspec.json.encode
    for key, value in d.items():
        f = _ARGS_FIELDS.get(key) if isinstance(key, str) else None
        if f is None:
            continue
        try:
            part = msgspec.json.decode(enc({key: value}), type=Args)
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            continue
        fields[f] = getattr(part, f)
    return Args(**fields)


def _nan_safe_loads(text: str) -> Any:
    # json accepts NaN/Infinity; it recurses, so nesting is bounded by the caller's size cap
    # and by RecursionError, which we map to a decode failure.
    return json.loads(text)


_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])


class _TooDeep(Exception):
    """The JSON is well formed as far as we can tell but nests deeper than the decoders recurse."""


def _decode_items(data: bytes, stats: dict[str, int]) -> Any:
    """Untyped decoding of ``[...]``: msgspec, else the json module (NaN/Infinity, invalid
    UTF-8). None when it is not valid JSON; :class:`_TooDeep` when it nests too deeply."""
    deep = False
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        pass
    except RecursionError:
        deep = True
    try:
        items = _nan_safe_loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    except RecursionError:
        raise _TooDeep() from None
    if not deep:
        stats["repaired"] = stats.get("repaired", 0) + 1
    return items


def _framed(buf: bytes, start: int, end: int) -> bytes:
    """``[`` + buf[start:end] + ``]`` with one copy."""
    with memoryview(buf) as mv:
        return b"".join((b"[", mv[start:end], b"]"))


def decode_events(
    chunk: bytes, stats: dict[str, int], framed: bool = False, tagged: bool = False
) -> Optional[list[Any]]:
    """Decode ``{..},{..}`` (no brackets; ``framed``: already inside ``[`` ``]``). None if it is
    not a whole number of events (or one of them nests too deeply to decode: the caller isolates
    it and skips it). ``tagged``: try the tagged kinds of events.py first (the fast path); the
    result is then a list of those when every event is one of them, else of :class:`Event`."""
    data = chunk if framed else b"[" + chunk + b"]"
    if tagged:
        try:
            return _TAGGED_LIST.decode(data)  # type: ignore[no-any-return]
        except msgspec.ValidationError:
            stats["_tagged_miss"] = 1  # an event of another kind or shape: the general decoder
        except msgspec.DecodeError:
            return _tolerant(data, stats)  # not valid JSON: the general typed decoder fails too
        except RecursionError:
            pass
    try:
        return _EVENT_LIST.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    return _tolerant(data, stats)


def _tolerant(data: bytes, stats: dict[str, int]) -> Optional[list[Event]]:
    """Slow, tolerant path: wrong field types, NaN/Infinity, invalid UTF-8, huge integers."""
    try:
        items = _decode_items(data, stats)
    except _TooDeep:
        return None
    if items is None:
        return None
    return _lenient_events(items, stats)


class Source(Protocol):
    """What :class:`TraceParser` reads from: :class:`ByteSource`, or a segment of a file
    (parallel.py)."""

    total: int
    eof: bool
    truncated: bool

    def read(self) -> bytes: ...

    def close(self) -> None: ...


class TraceParser:
    """Pull-parser over the top-level JSON value; calls ``on_events(list[Event])`` per chunk."""

    def __init__(self, src: Source):
        self.src = src
        self.buf = b""
        self.pos = 0
        self.offset = 0  # absolute position of buf[0] in the decompressed stream
        self.meta: dict[str, Any] = {}
        self.stats: dict[str, int] = {}
        self.events_seen = 0
        # Called with the raw bytes of chunks that contain ``raw_marker`` (events whose whole
        # ``args`` are needed, e.g. CUPTI counter ranges).
        self.on_raw: Optional[Callable[[bytes], None]] = None
        self.raw_marker = b'"cuda_profiler_range"'
        # Asked after ``on_events`` has taken a chunk: False when nothing in it is for ``on_raw``,
        # which spares the search for the marker (0.07 s over 250 MB); None: always search.
        self.raw_wanted: Optional[Callable[[], bool]] = None
        # Decode with the tagged kinds of events.py first (for records.py, which reads only
        # what they hold); False: always :class:`Event` (every field of every event).
        self.tagged = False
        self._misses = 0

    # -- buffer handling -------------------------------------------------------------------
    def _fill(self) -> bool:
        data = self.src.read()
        if not data:
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def _fill_to(self, want: int) -> None:
        """Read until ``want`` bytes are buffered after ``pos`` (or the stream ends), joining
        the blocks once: growing the buffer a block at a time copied it again for every block."""
        have = len(self.buf) - self.pos
        if have >= want:
            return
        head = memoryview(self.buf)[self.pos :]
        parts: list[Union[bytes, memoryview]] = [head]
        while have < want:
            data = self.src.read()
            if not data:
                break
            parts.append(data)
            have += len(data)
        if len(parts) > 1:
            self.offset += self.pos
            self.buf = b"".join(parts)
            self.pos = 0
        head.release()

    def _where(self) -> str:
        return f"byte {self.offset + self.pos}"

    def _peek(self) -> Optional[int]:
        """Skip whitespace and return the next byte (None at the end of the stream)."""
        while True:
            self.pos = _WS_RE.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # matches ""
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return None

    def _end_of_stream(self, what: str) -> NoReturn:
        if self.events_seen or self.src.truncated:
            raise TraceTruncated(f"file ends early ({what}); it may still be being written")
        if self.src.total == 0:
            raise TraceReadError("file is empty")
        raise TraceReadError(f"not a complete JSON trace (ends {what})")

    def _string(self) -> str:
        resume = 0  # absolute offset where the search for the end goes on
        while True:
            end = _string_end(self.buf, self.pos, resume - self.offset)
            if end >= 0:
                break
            if len(self.buf) - self.pos > MAX_EVENT_BYTES:
                raise TraceReadError(f"a string longer than {_fmt_bytes(MAX_EVENT_BYTES)} at {self._where()}")
            resume = self.offset + _string_resume(self.buf, self.pos)
            if not self._fill():
                self._end_of_stream("inside a string")
        raw = self.buf[self.pos : end]
        self.pos = end
        try:
            return str(msgspec.json.decode(raw))
        except msgspec.DecodeError:
            return raw[1:-1].decode("utf-8", errors="replace")

    def _value_end(self) -> int:
        """Index just past the JSON value starting at ``pos`` (reads more as needed)."""
        i = self.pos
        depth = 0
        open_string = (-1, 0)  # (absolute start, absolute resume) of a string still open
        while True:
            buf = self.buf
            if i - self.pos > MAX_EVENT_BYTES:
                raise TraceReadError(f"one value is larger than {_fmt_bytes(MAX_EVENT_BYTES)} at {self._where()}")
            if depth == 0 and i == self.pos and i < len(buf) and buf[i] not in b'"[{':
                # A literal (number, true, null...): it ends at a delimiter.
                m = _LITERAL_RE.match(buf, i)
                assert m is not None  # the pattern matches "" too
                if m.end() == i:  # '}' or ']' where a value must start: never skip nothing (a loop)
                    raise TraceReadError(f"malformed JSON at {self._where()} (unexpected {chr(buf[i])!r})")
                if m.end() < len(buf) or self.src.eof:
                    return m.end()
            else:
                m = _STRUCT_RE.search(buf, i)
                if m:
                    c = buf[m.start()]
                    if c == 0x22:  # '"'
                        q = m.start()
                        resume = open_string[1] - self.offset if open_string[0] == self.offset + q else 0
                        s = _string_end(buf, q, resume)
                        if s >= 0:
                            i = s
                            if depth == 0:
                                return i
                            continue
                        open_string = (self.offset + q, self.offset + _string_resume(buf, q))
                    elif c in b"[{":
                        depth += 1
                        i = m.end()
                        continue
                    else:
                        depth -= 1
                        i = m.end()
                        if depth <= 0:
                            return i
                        continue
            if len(buf) - self.pos > MAX_EVENT_BYTES:  # e.g. inside a string that never ends
                raise TraceReadError(f"one value is larger than {_fmt_bytes(MAX_EVENT_BYTES)} at {self._where()}")
            rel = i - self.pos
            if not self._fill():
                self._end_of_stream("inside an event")
            i = self.pos + rel

    def _last_split(self, start: int, limit: int) -> Optional[int]:
        """Index of the ``}`` of the last ``}`` ws ``,`` ws ``{`` in buf[start:limit]."""
        buf = self.buf
        j = limit
        while True:
            k = buf.rfind(b"{", start + 1, j)
            if k < 0:
                return None
            i = k - 1
            while i > start and buf[i] in _WS:
                i -= 1
            if buf[i] == 0x2C:  # ','
                i -= 1
                while i > start and buf[i] in _WS:
                    i -= 1
                if buf[i] == 0x7D:  # '}'
                    return i
            j = k

    # -- grammar -------------------------------------------------------------------------------
    def parse(self, on_events: Callable[[Any], None]) -> dict[str, Any]:
        c = self._peek()
        if c is None:
            self._end_of_stream("before any data")
        if c == 0x5B:  # '[' bare list of events
            self.pos += 1
            self._events(on_events)
            return self.meta
        if c != 0x7B:
            raise TraceReadError("not a JSON trace (it does not start with '{' or '[')")
        self.pos += 1
        saw_events = False
        while True:
            c = self._peek()
            if c is None:
                self._end_of_stream("before the closing '}'")
            if c == 0x7D:
                self.pos += 1
                break
            if c == 0x2C:
                self.pos += 1
                continue
            if c != 0x22:
                raise TraceReadError(f"malformed JSON at {self._where()} (expected a key)")
            key = self._string()
            if self._peek() != 0x3A:
                raise TraceReadError(f"malformed JSON at {self._where()} (expected ':')")
            self.pos += 1
            c = self._peek()
            if c is None:
                self._end_of_stream("after a key")
            if key == "traceEvents":
                if c != 0x5B:
                    raise TraceReadError('"traceEvents" is not a list')
                self.pos += 1
                self._events(on_events)
                saw_events = True
            else:
                end = self._value_end()
                raw = self.buf[self.pos : end]
                self.pos = end
                try:
                    value = _decode_items(raw, {})
                except _TooDeep:
                    value = None
                if value is None:
                    self.stats["bad_metadata"] = self.stats.get("bad_metadata", 0) + 1
                else:
                    self.meta[key] = value
        if not saw_events:
            raise TraceReadError('no "traceEvents" list: this JSON is not a Chrome/Kineto trace')
        return self.meta

    def _decode(self, framed: bytes) -> Optional[list[Any]]:
        """:func:`decode_events` of a framed chunk, tagged while that keeps working."""
        events = decode_events(framed, self.stats, framed=True, tagged=self.tagged)
        if self.stats.pop("_tagged_miss", None):
            self._misses += 1
            if self._misses >= TAGGED_MISSES:
                self.tagged = False
        elif self.tagged and events:
            self._misses = 0
        return events

    def _emit(self, events: Any, on_events: Callable[[Any], None], chunk: bytes = b"", framed: bool = False) -> None:
        self.events_seen += len(events)
        on_events(events)
        if self.on_raw is not None and (self.raw_wanted is None or self.raw_wanted()) and self.raw_marker in chunk:
            self.on_raw(chunk[1:-1] if framed else chunk)

    def _events(self, on_events: Callable[[Any], None]) -> None:
        while True:
            c = self._peek()
            if c is None:
                self._end_of_stream("inside traceEvents")
            if c == 0x5D:  # ']'
                self.pos += 1
                return
            if c == 0x2C:
                self.pos += 1
                continue
            if c != 0x7B:
                # Not an event object (a number, a string, null...): skip it, count it.
                if not self._skip_non_events():
                    end = self._value_end()
                    self.pos = end
                    self.stats["skipped"] = self.stats.get("skipped", 0) + 1
                continue
            self._fill_to(CHUNK_TARGET)
            # Decode as many events as possible at once; when a chunk does not decode, halve it
            # (not one event less: a bad event in the middle of a buffer of n events would cost
            # n decodes of the buffer, quadratic).
            limit = min(len(self.buf), self.pos + CHUNK_TARGET)
            done = False
            while True:
                split = self._last_split(self.pos, limit)
                if split is None:
                    break
                framed = _framed(self.buf, self.pos, split + 1)
                events = self._decode(framed)
                if events is not None:
                    self._emit(events, on_events, framed, framed=True)
                    self.pos = split + 1
                    done = True
                    break
                limit = self.pos + (split - self.pos) // 2 + 1
            if done:
                continue
            # Slow path: exactly one event.
            end = self._value_end()
            chunk = self.buf[self.pos : end]
            events = decode_events(chunk, self.stats)
            if events is None:
                if not self._too_deep(chunk):
                    raise TraceReadError(f"malformed event at {self._where()}")
                # Valid JSON nested deeper than any decoder recurses: skip this one event.
                self.stats["too_deep"] = self.stats.get("too_deep", 0) + 1
                self.events_seen += 1
                self.pos = end
                continue
            self._emit(events, on_events, chunk)
            self.pos = end

    def _too_deep(self, chunk: bytes) -> bool:
        try:
            _decode_items(b"[" + chunk + b"]", {})
        except _TooDeep:
            return True
        return False

    def _skip_non_events(self) -> bool:
        """Skip a run of entries that are not objects (``null, 1, "x", [..]``) in one decode
        instead of one Python step each. False when nothing could be skipped this way."""
        self._fill_to(CHUNK_TARGET)
        buf, start = self.buf, self.pos
        brace = buf.find(b"{", start, start + CHUNK_TARGET)
        limit = brace if brace >= 0 else min(len(buf), start + CHUNK_TARGET)
        for _ in range(4):
            k = buf.rfind(b",", start, limit)
            if k <= start:
                return False
            # msgspec only, entries as Raw (no nested lists built): a comma inside a string or a
            # NaN fails here and halves the span; the one-entry path after it handles those.
            try:
                items = _RAW_ITEMS.decode(_framed(buf, start, k))
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                items = None
            if items is not None:  # no '{' in the span, so no objects in it
                self.stats["skipped"] = self.stats.get("skipped", 0) + len(items)
                self.pos = k + 1
                return True
            limit = start + (k - start) // 2
        return False


def read_trace(
    path: str,
    on_events: Callable[[list[Event]], None],
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_raw: Optional[Callable[[bytes], None]] = None,
    tagged: bool = False,
    raw_wanted: Optional[Callable[[], bool]] = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse ``path``; returns (top-level metadata, reader stats). ``tagged``: chunks come as
    the tagged kinds of events.py when they can (only what records.py reads), else as
    :class:`Event`. ``raw_wanted``: :attr:`TraceParser.raw_wanted`."""
    src = ByteSource(path, max_bytes)
    try:
        p = TraceParser(src)
        p.on_raw = on_raw
        p.raw_wanted = raw_wanted
        p.tagged = tagged
        try:
            meta = p.parse(on_events)
            if src.truncated:
                raise TraceTruncated("gzip stream ends early; it may still be being written")
        except TraceTruncated as e:
            e.meta, e.stats = p.meta, p.stats
            raise
        except RecursionError:
            raise TraceReadError("JSON nested too deeply") from None
        except MemoryError:
            raise TraceReadError("out of memory while reading") from None
        p.stats["bytes"] = src.total
        return meta, p.stats
    finally:
        src.close()
