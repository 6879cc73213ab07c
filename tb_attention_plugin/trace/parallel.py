"""Read a large trace with two processes.

The parent inflates the file and cuts the event list into chunks at line breaks that separate
events (a raw line break cannot occur inside a JSON string, so such a cut is never inside a
name); a forked child builds the columns of the chunks it is handed and the parent builds the
others (the child gets one whenever fewer than two wait for it, so the work balances itself).
The child's per-chunk results come back through a pipe and are merged in file order, so the
result is the same :class:`~.records.Trace` the serial reader builds.

Used by :func:`.records.load_trace` for big files when more than one CPU is available and the
process has a single thread, or only threads marked fork_safe (forking a threaded process is unsafe). Anything unusual — a file
written on one line, a chunk that does not decode, a child that fails — makes it give up and
the caller reads the file serially.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from array import array
from typing import Any, Callable, Optional

import numpy as np

from . import reader as _reader
from .reader import ByteSource, TraceParser, TraceTruncated, decode_events

_WS = b" \t\r"
# Files smaller than this are read serially: starting a process costs more than it saves.
MIN_PARALLEL_BYTES = int(os.environ.get("TB_ATTENTION_PARALLEL_MIN_BYTES", 48 << 20))


class NotSuited(Exception):
    """This file cannot be cut safely for parallel reading; read it serially."""


def jobs_wanted() -> int:
    env = os.environ.get("TB_ATTENTION_JOBS", "").strip()
    if env.isdigit():
        return max(1, int(env))
    return min(2, os.cpu_count() or 1)


def _only_fork_safe_threads() -> bool:
    """No other thread could hold a lock at fork time (threads marked ``fork_safe`` only sleep)."""
    me = threading.current_thread()
    return all(t is me or getattr(t, "fork_safe", False) for t in threading.enumerate())


def suitable(path: str) -> bool:
    if jobs_wanted() < 2 or not _only_fork_safe_threads():
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    return size * (8 if gz else 1) >= MIN_PARALLEL_BYTES


class RawChunkParser(TraceParser):
    """The top-level grammar of :class:`TraceParser`, but ``traceEvents`` is handed out as raw
    chunks of whole events (``{...},{...}``) cut at line breaks, undecoded."""

    def _line_split(self, start: int, limit: int) -> Optional[int]:
        """Index of the ``}`` in the last ``}`` ``,`` newline ``{`` (with spaces) before limit."""
        buf = self.buf
        j = limit
        while True:
            k = buf.rfind(b"\n", start + 1, j)
            if k < 0:
                return None
            a = k - 1
            while a > start and buf[a] in _WS:
                a -= 1
            b = k + 1
            n = len(buf)
            while b < n and buf[b] in b" \t\r\n":
                b += 1
            if buf[a] == 0x2C and b < n and buf[b] == 0x7B:   # ',' ... '{'
                a -= 1
                while a > start and buf[a] in b" \t\r\n":
                    a -= 1
                if buf[a] == 0x7D:                              # '}'
                    return a
            j = k

    def _events(self, on_chunk) -> None:
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
                raise NotSuited("non-object entries in traceEvents")
            while len(self.buf) - self.pos < _reader.CHUNK_TARGET and self._fill():
                pass
            end = self._line_split(self.pos, len(self.buf))
            if end is not None:
                on_chunk(self.buf[self.pos:end + 1])
                self.events_seen += 1        # (chunks, not events: tells a cut file from a bad one)
                self.pos = end + 1
                continue
            if len(self.buf) - self.pos >= _reader.CHUNK_TARGET:
                raise NotSuited("no line breaks between events")
            end = self._value_end()          # the last events: scanned exactly
            on_chunk(self.buf[self.pos:end])
            self.events_seen += 1
            self.pos = end


def _partial(chunk: bytes, keep_python: str) -> tuple:
    """Decode one chunk and build its columns with a fresh builder."""
    from .records import TraceBuilder
    stats: dict = {}
    events = decode_events(chunk, stats)
    if events is None:
        raise NotSuited("a chunk did not decode")
    b = TraceBuilder(keep_python)
    b.add(events)
    if b'"cuda_profiler_range"' in chunk:
        b.add_raw(chunk)
    return b.export(), stats


def _child(jobs, results, keep_python: str) -> None:
    try:
        while True:
            item = jobs.recv()
            if item is None:
                break
            idx, chunk = item
            results.send((idx, _partial(chunk, keep_python)))
        results.send(None)
    except NotSuited as e:
        results.send(("unsuited", str(e)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which reads serially
        results.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        results.close()


def load_parallel(path: str, max_bytes: int, keep_python: str, builder) -> tuple[dict, dict, Optional[str]]:
    """Fill ``builder`` (a fresh TraceBuilder) from ``path`` with two processes.

    Returns (metadata, reader stats, truncation message or None). Raises NotSuited when the
    file or the child cannot do it; the caller then reads serially with a fresh builder."""
    ctx = multiprocessing.get_context("fork")
    jobs_r, jobs_w = ctx.Pipe(duplex=False)
    res_r, res_w = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(jobs_r, res_w, keep_python), daemon=True)
    proc.start()
    jobs_r.close()
    res_w.close()
    received: dict[int, Any] = {}
    problem: list[str] = []

    def receive():
        try:
            while True:
                item = res_r.recv()
                if item is None:
                    return
                if isinstance(item[0], str):
                    problem.append(item[1])
                    return
                received[item[0]] = item[1]
        except (EOFError, OSError) as e:
            problem.append(f"child stopped: {e}")

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    # Chunks go to the child from a thread: a 2 MB send blocks until the child has read it, and
    # the child reads only between chunks, so sending inline would make the parent wait for the
    # child's current chunk every other chunk.
    outbox: queue.Queue = queue.Queue()

    def send_jobs():
        try:
            while True:
                item = outbox.get()
                jobs_w.send(item)
                if item is None:
                    return
        except (OSError, ValueError) as e:
            problem.append(f"child stopped: {e}")
            while outbox.get() is not None:      # drain, so the producer never blocks
                pass

    sender = threading.Thread(target=send_jobs, daemon=True)
    sender.start()
    own: dict[int, Any] = {}
    count = [0]
    merged = [0]          # chunks [0, merged) are in the builder already
    stats_acc: dict = {}

    def merge_ready() -> None:
        # merge in file order as soon as possible, so partial results are not all held at once
        while True:
            i = merged[0]
            part = own.pop(i, None)
            if part is None:
                part = received.pop(i, None)
            if part is None:
                return
            exported, chunk_stats = part
            for k, v in chunk_stats.items():
                stats_acc[k] = stats_acc.get(k, 0) + v
            builder.merge(exported)
            merged[0] = i + 1

    def on_chunk(chunk: bytes) -> None:
        i = count[0]
        count[0] += 1
        if problem:
            raise NotSuited(problem[0])
        # The child gets a chunk while it has fewer than two waiting; otherwise the parent builds
        # it: the work balances itself, and a child starved of CPU by other processes on the
        # machine never makes the parent wait.
        if outbox.qsize() < 2:
            outbox.put((i, chunk))
        else:
            own[i] = _partial(chunk, keep_python)
        merge_ready()

    src = ByteSource(path, max_bytes)
    truncated = None
    parser = RawChunkParser(src)
    try:
        try:
            meta = parser.parse(on_chunk)
            if src.truncated:
                raise TraceTruncated("gzip stream ends early; it may still be being written")
        except TraceTruncated as e:
            truncated, meta = str(e), parser.meta
        outbox.put(None)
        sender.join()
        reader.join()
    except BaseException:
        outbox.put(None)
        sender.join(2)
        _stop(proc, jobs_w)
        raise
    finally:
        src.close()
    jobs_w.close()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    res_r.close()
    if problem:
        raise NotSuited(problem[0])
    merge_ready()
    if merged[0] != count[0]:
        raise NotSuited(f"chunk {merged[0]} missing")
    stats = dict(parser.stats)
    for k, v in stats_acc.items():
        stats[k] = stats.get(k, 0) + v
    stats["bytes"] = src.total
    stats["parallel"] = True
    return meta, stats, truncated


def _stop(proc, jobs_w) -> None:
    try:
        jobs_w.send(None)
    except OSError:
        pass
    proc.join(2)
    if proc.is_alive():
        proc.kill()
