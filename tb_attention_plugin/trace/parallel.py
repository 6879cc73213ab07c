"""Read a large trace with two processes.

The parent inflates the file and cuts the event list into chunks at line breaks that separate
events (a raw line break cannot occur inside a JSON string, so such a cut is never inside a
name); a forked child builds the columns of the chunks it is handed and the parent builds the
others (the child gets one whenever fewer than two wait for it, so the work balances itself).
The child's per-chunk results come back through a pipe and are merged in file order, so the
result is the same :class:`~.records.Trace` the serial reader builds.

Used by :func:`.records.load_trace` for big files when more than one CPU is available and the
process has a single thread, or only threads marked fork_safe (forking a threaded process is
unsafe). Anything unusual — a file written on one line, a chunk that does not decode, a child
that fails — makes it give up and the caller reads the file serially.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import stat
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Optional

from .. import progress as _progress
from . import reader as _reader
from .reader import ByteSource, TraceParser, TraceReadError, TraceTruncated, decode_events

if TYPE_CHECKING:
    from .records import TraceBuilder

_WS = b" \t\r"
# Files smaller than this are read serially: starting a process costs more than it saves
# (settings.py: TB_ATTENTION_PARALLEL_MIN_BYTES, passed in as ``min_bytes``).
MIN_PARALLEL_BYTES = 48 << 20
# The runnable-thread count is a snapshot: a thread that wakes for a moment (a sampler, a
# progress bar) can be caught running. The fewest over a few reads 2 ms apart is the load that
# stays; the reads cost up to ~10 ms, against ~1 s that the second process saves on a big file.
SPARE_READS = 5
SPARE_READ_GAP_S = 0.002


class NotSuited(Exception):
    """This file cannot be cut safely for parallel reading; read it serially."""


def jobs_wanted(jobs: Optional[int] = None) -> int:
    """Processes to read one trace with: ``jobs`` (settings.py: TB_ATTENTION_JOBS), else up to 2 by CPUs."""
    if jobs is not None:
        return max(1, int(jobs))
    return min(2, os.cpu_count() or 1)


def _only_fork_safe_threads() -> bool:
    """No other thread could hold a lock at fork time (threads marked ``fork_safe`` only sleep)."""
    me = threading.current_thread()
    return all(t is me or getattr(t, "fork_safe", False) for t in threading.enumerate())


def _runnable_threads() -> int:
    """The kernel's count of runnable threads now, system-wide (Linux ``/proc/loadavg``, its fourth field)."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


def _own_runnable_threads() -> int:
    """This process's runnable threads now, this one included (``/proc/self/task``; 1 where it
    cannot be read). numpy's BLAS starts worker threads at import that spin for a while before
    they sleep: they are no other work, but ``/proc/loadavg`` counts them."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    n = 0
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                n += f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return max(1, n)


def _spare_cpus(reads: int = SPARE_READS, gap_s: float = SPARE_READ_GAP_S) -> Optional[int]:
    """CPUs this process may use that run nothing right now: the CPUs less this thread and the
    fewest runnable threads of other processes over ``reads`` reads ``gap_s`` apart; None where
    the count cannot be read."""
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        others = max(0, _runnable_threads() - _own_runnable_threads())
        for _ in range(reads - 1):
            if not others:  # nothing else runs: no later read can show less
                break
            time.sleep(gap_s)
            others = min(others, max(0, _runnable_threads() - _own_runnable_threads()))
    except (OSError, ValueError, IndexError):
        return None
    return cpus - 1 - others


def suitable(path: str, jobs: Optional[int] = None, min_bytes: Optional[int] = None) -> bool:
    """Worth reading ``path`` in parallel? ``min_bytes`` None: :data:`MIN_PARALLEL_BYTES`.

    ``jobs`` None (the default: no TB_ATTENTION_JOBS) also asks for a CPU that is idle now: the
    child on a CPU other work keeps busy only adds its overhead (~1 s of CPU on a 250 MB trace;
    on 2 cores shared with other jobs the cold analyze of llama took 9.5-11.0 s wall with the
    child, 7.4 s without). An explicit ``jobs`` >= 2 always tries. The idle-CPU reads (up to
    ~10 ms) come last: a file too small for two processes never waits for them."""
    if jobs_wanted(jobs) < 2 or not _only_fork_safe_threads():
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # never open a named pipe: it could block
            return False
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    if st.st_size * (8 if gz else 1) < (MIN_PARALLEL_BYTES if min_bytes is None else min_bytes):
        return False
    if jobs is None:
        spare = _spare_cpus()
        if spare is not None and spare < 1:
            return False
    return True


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
            if buf[a] == 0x2C and b < n and buf[b] == 0x7B:  # ',' ... '{'
                a -= 1
                while a > start and buf[a] in b" \t\r\n":
                    a -= 1
                if buf[a] == 0x7D:  # '}'
                    return a
            j = k

    def _events(self, on_chunk: Callable[[Any], None]) -> None:
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
                on_chunk(self.buf[self.pos : end + 1])
                self.events_seen += 1  # (chunks, not events: tells a cut file from a bad one)
                self.pos = end + 1
                continue
            if len(self.buf) - self.pos >= _reader.CHUNK_TARGET:
                raise NotSuited("no line breaks between events")
            end = self._value_end()  # the last events: scanned exactly
            on_chunk(self.buf[self.pos : end])
            self.events_seen += 1
            self.pos = end


PIPE_BYTES = 4 << 20  # pipe buffer asked for (Linux caps it at /proc/sys/fs/pipe-max-size, 1 MiB by default)


def widen_pipe(conn: Connection) -> None:
    """Grow the kernel buffer of the pipe behind ``conn`` where the system allows it (Linux).

    A result (the columns of one 4 MB segment: ~0.7 MB on the 250 MB llama trace) is written in
    one go into a wide pipe; through the default 64 KiB one, the child's send blocked for most of
    it: each of the parent's reads then waits up to a GIL switch interval (5 ms) for its main
    thread. Measured on llama: the child's sends took 0.3-1.2 s of its ~1.6-3.7 s of wall, with
    1 MiB pipes 0.1-0.2 s."""
    try:
        import fcntl

        setsz, getsz = getattr(fcntl, "F_SETPIPE_SZ", None), getattr(fcntl, "F_GETPIPE_SZ", None)
        if setsz is None or getsz is None:
            return
        want = PIPE_BYTES
        try:
            with open("/proc/sys/fs/pipe-max-size") as f:
                want = min(want, int(f.read()))
        except (OSError, ValueError):
            pass
        if want > fcntl.fcntl(conn.fileno(), getsz):  # never shrink it
            fcntl.fcntl(conn.fileno(), setsz, want)
    except (ImportError, OSError, ValueError):
        pass  # the default buffer: slower, not wrong


def _partial(chunk: bytes, make: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """Decode one chunk and build its columns with a fresh builder (``make()``)."""
    stats: dict[str, int] = {}
    events = decode_events(chunk, stats, tagged=True)
    stats.pop("_tagged_miss", None)
    if events is None:
        raise NotSuited("a chunk did not decode")
    b = make()
    b.add(events)
    if b.wants_raw() and b'"cuda_profiler_range"' in chunk:
        b.add_raw(chunk)
    return b.export(), stats


def _send_all(results: Connection, produce: Callable[[], Iterator[tuple[int, Any]]]) -> None:
    """In the child: send every ``(index, result)`` that ``produce()`` yields, then None; a
    failure is sent as ``("unsuited" | "error", message)`` and the parent reads serially."""
    try:
        for item in produce():
            results.send(item)
        results.send(None)
    except NotSuited as e:
        results.send(("unsuited", str(e)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which reads serially
        results.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        results.close()


def _start_receiver(res_r: Connection, store: dict[int, Any], problem: list[str], name: str) -> threading.Thread:
    """In the parent: a thread that files the child's results into ``store`` by index as soon as
    they arrive (the child would otherwise wait on its send while the parent works) and notes a
    failure in ``problem``. It ends with the child's final None."""

    def receive() -> None:
        try:
            while True:
                item = res_r.recv()
                if item is None:
                    return
                if isinstance(item[0], str):
                    problem.append(item[1])
                    return
                store[item[0]] = item[1]
        except Exception as e:  # noqa: BLE001 - EOF, a cut message: the parent reads on its own
            problem.append(f"child stopped: {type(e).__name__}: {e}")

    t = threading.Thread(target=receive, name=name, daemon=True)
    t.start()
    return t


def _child(jobs: Connection, results: Connection, make: Callable[[], Any]) -> None:
    def produce() -> Iterator[tuple[int, Any]]:
        while True:
            item = jobs.recv()
            if item is None:
                return
            idx, chunk = item
            yield idx, _partial(chunk, make)

    _send_all(results, produce)


def load_parallel(
    path: str, max_bytes: int, keep_python: str, builder: TraceBuilder
) -> tuple[dict[str, Any], dict[str, Any], Optional[str]]:
    """Fill ``builder`` (a fresh TraceBuilder) from ``path`` with two processes.

    Returns (metadata, reader stats, truncation message or None). Raises NotSuited when the
    file or the child cannot do it; the caller then reads serially with a fresh builder.
    Builders for the chunks are made like ``builder`` (records.py hands it in, so this module
    never imports records.py, which imports this one)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if not gz:
        return load_split(path, max_bytes, keep_python, builder)
    ctx = multiprocessing.get_context("fork")
    jobs_r, jobs_w = ctx.Pipe(duplex=False)
    res_r, res_w = ctx.Pipe(duplex=False)
    widen_pipe(jobs_w)
    widen_pipe(res_w)
    make = builder.sibling  # fresh builders like the caller's, sharing its per-name caches
    proc = ctx.Process(target=_child, args=(jobs_r, res_w, make), daemon=True)
    proc.start()
    jobs_r.close()
    res_w.close()
    received: dict[int, Any] = {}
    problem: list[str] = []

    reader = _start_receiver(res_r, received, problem, "tb-attention-chunk-receiver")
    # Chunks go to the child from a thread: a 2 MB send blocks until the child has read it, and
    # the child reads only between chunks, so sending inline would make the parent wait for the
    # child's current chunk every other chunk.
    outbox: queue.Queue[Optional[tuple[int, bytes]]] = queue.Queue()

    def send_jobs() -> None:
        try:
            while True:
                item = outbox.get()
                jobs_w.send(item)
                if item is None:
                    return
        except (OSError, ValueError) as e:
            problem.append(f"child stopped: {e}")
            while outbox.get() is not None:  # drain, so the producer never blocks
                pass

    sender = threading.Thread(target=send_jobs, daemon=True)
    sender.start()
    own: dict[int, Any] = {}
    count = [0]
    merged = [0]  # chunks [0, merged) are in the builder already
    stats_acc: dict[str, int] = {}

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
            own[i] = _partial(chunk, make)
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
    _reap(proc, 10)
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


def _stop(proc: BaseProcess, jobs_w: Connection) -> None:
    try:
        jobs_w.send(None)
    except OSError:
        pass
    _reap(proc, 2)


def _reap(proc: BaseProcess, timeout: float) -> None:
    """Wait for the child to end; kill it if it has not within ``timeout`` seconds."""
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()


# -- uncompressed files: contiguous segments read by both processes --------------------------
# A plain file can be read from anywhere, so instead of the parent cutting and sending every
# chunk, the events region is split into segments at line breaks between events; the parent and
# the child claim segments from a shared counter, each reading its own from the file and
# building it into its own columns, and the parent merges them in file order. Each segment is
# parsed as a small document of its own: ``{"traceEvents":[`` + its bytes + ``]}`` (the first
# keeps the file's header, the last its trailing keys), with the same parser as a serial read.

SEGMENT_BYTES = 4 << 20  # about this much per segment (at most MAX_SEGMENTS): small, so that
MAX_SEGMENTS = 128  # the last one either process is busy with, which the other may redo, is short


class _SegmentSource:
    """A ByteSource over ``prefix`` + file[start:end] + ``suffix`` (end None: to EOF)."""

    def __init__(self, path: str, start: int, end: Optional[int], prefix: bytes, suffix: bytes, report: bool = True):
        self.path, self.gzip = path, False
        self._f = open(path, "rb")
        self._f.seek(start)
        self._left = None if end is None else end - start
        self._parts = [prefix] if prefix else []
        self._suffix = suffix
        self.total = 0  # bytes of the file read (not the synthetic ones)
        self.eof = False
        self.truncated = False
        # as ByteSource: one test a block
        self._progress: Optional[_progress.Progress] = _progress.current() if report else None
        self._next_report = _progress.REPORT_BYTES if self._progress is not None else math.inf
        self._reported = 0

    def _report(self) -> None:
        assert self._progress is not None  # else _next_report is infinite
        self._progress.add(self.total - self._reported)
        self._reported = self.total
        self._next_report = self.total + _progress.REPORT_BYTES

    def close(self) -> None:
        if self._progress is not None:
            self._report()
        self._f.close()

    def read(self) -> bytes:
        if self._parts:
            return self._parts.pop()
        if self.eof:
            return b""
        n = _reader.BLOCK if self._left is None else min(_reader.BLOCK, self._left)
        out = self._f.read(n) if n > 0 else b""
        self.total += len(out)
        if self.total >= self._next_report:
            self._report()
        if self._left is not None:
            self._left -= len(out)
        if out:
            return out
        self.eof = True
        s, self._suffix = self._suffix, b""
        return s


class _HeaderParser(TraceParser):
    """Parses up to the first event of ``traceEvents`` and stops there."""

    class Done(Exception):
        pass

    def _events(self, on_events: Callable[[Any], None]) -> None:
        self.events_start = self.offset + self.pos
        raise self.Done()


class _SegmentParser(TraceParser):
    """Records where the events list ended, to check it ended where the segment does."""

    events_end: Optional[int] = None

    def _events(self, on_events: Callable[[Any], None]) -> None:
        super()._events(on_events)
        self.events_end = self.offset + self.pos  # just past the ']'


def _find_cut(f: BinaryIO, offset: int, limit: int) -> Optional[int]:
    """Absolute position just after the ``,`` of the first ``}`` , newline ``{`` at or after
    ``offset`` (and before ``limit``): a point between two events where no string can be.
    Looked for in the first 64 KB, then in 4 MB (reading 4 MB per cut read the whole file
    again to plan 64 segments): a cut found in the smaller window is the first in the larger."""
    for window in (64 << 10, 4 << 20):
        f.seek(offset)
        buf = f.read(min(window, max(0, limit - offset)))
        at = _first_cut(buf)
        if at is not None:
            return int(offset + at)
        if len(buf) < window:  # the window reached the limit: there is none
            return None
    return None


def _first_cut(buf: bytes) -> Optional[int]:
    """Index just after the ``,`` of the first ``}`` , newline ``{`` in ``buf``, or None."""
    k = -1
    while True:
        k = buf.find(b"\n", k + 1)
        if k < 0:
            return None
        a = k - 1
        while a >= 0 and buf[a] in _WS:
            a -= 1
        b = k + 1
        while b < len(buf) and buf[b] in b" \t\r\n":
            b += 1
        if a < 1 or b >= len(buf) or buf[a] != 0x2C or buf[b] != 0x7B:
            continue
        c = a - 1
        while c >= 0 and buf[c] in b" \t\r\n":
            c -= 1
        if c >= 0 and buf[c] == 0x7D:
            return a + 1


def _plan_segments(path: str, size: int, max_bytes: int) -> tuple[list[Optional[int]], bool]:
    """Cut points ``[0, c1, ..., None]`` and whether the top level is a bare list."""
    if size > max_bytes:
        raise NotSuited("over the size cap")  # the serial reader says so properly
    hp = _HeaderParser(ByteSource(path, max_bytes, report=False))  # the segments count the bytes
    try:
        hp.parse(lambda events: None)
        raise NotSuited("no traceEvents list")
    except _HeaderParser.Done:
        pass
    finally:
        hp.src.close()
    bare = _first_byte(path) == b"["
    start = hp.events_start
    n = max(2, min(MAX_SEGMENTS, (size - start) // SEGMENT_BYTES))
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, n):
            at = _find_cut(f, start + (size - start) * k // n, size)
            if at is None or at <= cuts[-1] or at <= start:
                continue
            cuts.append(at)
    if len(cuts) < 2:
        raise NotSuited("no line breaks between events")
    return cuts + [None], bare


def _first_byte(path: str) -> bytes:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return head[:1]


def _segment(
    path: str, cuts: list[Any], i: int, bare: bool, max_bytes: int, b: TraceBuilder, report: bool = True
) -> tuple[TraceBuilder, dict[str, Any], dict[str, int], int, Optional[str]]:
    """Parse segment ``i`` into the builder ``b``; returns (builder, meta, stats, file bytes
    read, truncation message of the last segment or None). ``report``: count its bytes in the
    progress record (not when the parent redoes a segment the child has counted)."""
    first, last = i == 0, cuts[i + 1] is None
    open_ = b"[" if bare else b'{"traceEvents":['
    close = b"]" if bare else b"]}"
    src = _SegmentSource(path, cuts[i], cuts[i + 1], b"" if first else open_, b"" if last else close, report)
    p = _SegmentParser(src)
    p.on_raw = b.add_raw
    p.raw_wanted = b.wants_raw
    p.tagged = True
    truncated = None
    try:
        meta = p.parse(b.add)
    except TraceTruncated as e:
        if not last:
            raise NotSuited(f"segment {i} ends early") from None
        truncated, meta = str(e), p.meta  # the file itself ends early: salvage, as serially
    except (TraceReadError, RecursionError, MemoryError) as e:
        raise NotSuited(f"segment {i}: {e}") from None
    finally:
        src.close()
    if not last:
        # the events list must end exactly at the end of this segment: a cut anywhere else
        # (inside metadata that follows the events, say) would misread the file
        synthetic = (0 if first else len(open_)) + (cuts[i + 1] - cuts[i]) + 1
        if p.events_end != synthetic:
            raise NotSuited(f"segment {i} does not end inside the events")
    return b, meta, p.stats, src.total, truncated


def _split_child(
    path: str, cuts: list[Any], bare: bool, max_bytes: int, make: Callable[[], Any], counter: Any, results: Connection
) -> None:
    p = _progress.current()  # the parent's record, inherited through fork
    if p is not None:
        p.forked(1)  # its own slot: the parent goes on counting in slot 0

    def produce() -> Iterator[tuple[int, Any]]:
        while True:
            with counter.get_lock():
                i = counter.value
                counter.value += 1
            if i >= len(cuts) - 1:
                return
            b, meta, stats, nbytes, truncated = _segment(path, cuts, i, bare, max_bytes, make())
            yield i, ("exported", b.export(), meta, stats, nbytes, truncated)

    _send_all(results, produce)


def load_split(
    path: str, max_bytes: int, keep_python: str, builder: TraceBuilder
) -> tuple[dict[str, Any], dict[str, Any], Optional[str]]:
    """Fill ``builder`` (a fresh TraceBuilder) from the uncompressed trace ``path`` with two
    processes reading contiguous segments. Raises NotSuited when it cannot (the caller then
    reads serially with a fresh builder, which also gives the proper error for a bad file).

    The parent never waits for the child: once no segment is left to claim, it reads the
    child's unfinished ones itself, in order, and uses whichever copy is there first (a child
    slowed down by other work on the machine, or starved of a core, costs at most the segment
    the parent redoes); then the child is stopped."""
    size = os.path.getsize(path)
    cuts, bare = _plan_segments(path, size, max_bytes)
    n_seg = len(cuts) - 1
    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("i", 1)  # the parent takes segment 0 (the header) first
    res_r, res_w = ctx.Pipe(duplex=False)
    widen_pipe(res_w)
    make = builder.sibling  # fresh builders like the caller's, sharing its per-name caches
    proc = ctx.Process(target=_split_child, args=(path, cuts, bare, max_bytes, make, counter, res_w), daemon=True)
    proc.start()
    res_w.close()
    parts: dict[int, Any] = {}
    problem: list[str] = []
    receiver = _start_receiver(res_r, parts, problem, "tb-attention-split-receiver")
    merged = 1
    metas, stats_all, total, truncated = [], [], 0, []

    def merge_ready() -> None:
        nonlocal merged, total
        while merged < n_seg and merged in parts:
            kind, data, meta, stats, nbytes, cut = parts.pop(merged)
            if cut:
                truncated.append(cut)
            if kind == "exported":
                builder.merge(data)
            else:
                builder.merge(data.export())
            metas.append(meta)
            stats_all.append(stats)
            total += nbytes
            merged += 1

    def own(i: int, report: bool = True) -> None:
        b, meta, stats, nbytes, cut = _segment(path, cuts, i, bare, max_bytes, make(), report)
        parts.setdefault(i, ("builder", b, meta, stats, nbytes, cut))

    try:
        _, meta0, stats0, n0, cut0 = _segment(path, cuts, 0, bare, max_bytes, builder)
        if cut0:
            truncated.append(cut0)
        metas.append(meta0)
        stats_all.append(stats0)
        total += n0
        while not problem:
            merge_ready()
            with counter.get_lock():
                i = counter.value
                counter.value += 1
            if i >= n_seg:
                break
            own(i)
        while not problem and merged < n_seg:
            merge_ready()
            if merged < n_seg and merged not in parts:
                own(merged, report=False)  # the child's, not back yet: read it here
        if problem and merged < n_seg:
            raise NotSuited(problem[0])
    except BaseException:
        proc.kill()
        raise
    finally:
        if proc.is_alive():
            proc.kill()  # done, or failed: its unfinished segment is not needed
        proc.join(10)
        receiver.join(10)  # ends at the child's None, or at EOF once it is gone
        res_r.close()
        parts.clear()  # the child's copies of segments the parent read itself
    meta_all: dict[str, Any] = {}
    for m in metas:
        meta_all.update(m)
    stats_sum: dict[str, Any] = {}
    for s in stats_all:
        for k, v in s.items():
            stats_sum[k] = stats_sum.get(k, 0) + v
    stats_sum["bytes"] = total
    stats_sum["parallel"] = True
    return meta_all, stats_sum, (truncated[0] if truncated else None)
