"""Read the next trace of a job in a forked child while this process analyses the current one.

A job of many traces (one file per rank) is analysed file after file. Reading a big file uses
both CPUs of a two-core machine (trace/parallel.py), but its analysis uses one: the other stays
idle for about half of each file's time. :class:`ReadAhead` fills that half: once a file has been
read, a forked child reads the next one serially (one process, ``jobs=1``) and hands the
:class:`~.records.Trace` back when the analysis gets to it. Only the read moves; the child never
analyses, so the two processes hold one trace's analysis and one trace's columns at a time, not
two analyses (that split, tried on the 2-rank benchmark job, went over the memory budget).

The trace comes back through a pipe as a pickle whose arrays travel out of band (pickle protocol
5): the child writes each column's bytes once and the parent receives each into one buffer of its
own, so neither side makes a pickled copy of the columns. Anything unusual (the child fails, the
file is unreadable, the pipe breaks) makes :meth:`ReadAhead.take` answer None, and the caller
reads the file itself, which also gives the proper error for a bad file.
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Callable, Optional

from . import parallel

if TYPE_CHECKING:
    from .records import Trace

# The columns of a trace come back in pieces of at most this many bytes (a column of a 1 GB trace
# is ~30 MB; the parent's buffers are made at their full size first, so this bounds no memory,
# only the size of one write).
PIECE_BYTES = 8 << 20


def _child(conn: Connection, load: Callable[[str], Trace], path: str) -> None:
    gc.disable()  # a collection would touch (and copy) every object shared with the parent
    try:
        trace = load(path)
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(trace, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
        conn.send(("ok", head, [v.nbytes for v in views]))
        for v in views:
            for at in range(0, v.nbytes, PIECE_BYTES):
                conn.send_bytes(v[at : at + PIECE_BYTES])
    except BaseException as e:  # noqa: BLE001 - the parent reads the file itself
        try:
            conn.send(("error", f"{type(e).__name__}: {e}", []))
        except OSError:
            pass
    finally:
        conn.close()


def _receive(conn: Connection) -> Optional[Trace]:
    kind, head, sizes = conn.recv()
    if kind != "ok":
        return None
    buffers = []
    for n in sizes:
        buf = bytearray(n)  # writable: the analysis may update a column in place
        with memoryview(buf) as mv:
            at = 0
            while at < n:
                at += conn.recv_bytes_into(mv[at:])
        buffers.append(buf)
    trace: Trace = pickle.loads(head, buffers=buffers)
    return trace


class ReadAhead:
    """The traces of a job in the order they are analysed; :meth:`started` (called once a file
    has been read) reads the next one that ``wanted`` accepts in a forked child, and
    :meth:`take` hands it over. A context manager: leaving it stops a child still reading.

    ``load(path)``: the serial read the child runs (records.load_trace with ``jobs=1``).
    ``wanted(path)``: whether a file needs reading at all (False: its report is cached).
    ``jobs`` and ``min_bytes``: as for the parallel reader (:func:`.parallel.suitable`): a child
    is started only for a big file, with a fork-safe process and a CPU that is idle now."""

    def __init__(
        self,
        paths: Sequence[str],
        load: Callable[[str], Trace],
        wanted: Callable[[str], bool] = lambda p: True,
        jobs: Optional[int] = None,
        min_bytes: Optional[int] = None,
    ):
        self.paths = list(paths)
        self.load = load
        self.wanted = wanted
        self.jobs, self.min_bytes = jobs, min_bytes
        self._path: Optional[str] = None  # the file the child reads
        self._proc: Optional[BaseProcess] = None
        self._conn: Optional[Connection] = None

    def started(self, path: str) -> None:
        """``path`` has been read: read the next file in the child (if none is being read)."""
        if self._proc is not None or path not in self.paths:
            return
        for nxt in self.paths[self.paths.index(path) + 1 :]:
            if not self.wanted(nxt):
                continue
            if parallel.suitable(nxt, self.jobs, self.min_bytes):
                self._start(nxt)
            return

    def _start(self, path: str) -> None:
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        parallel.widen_pipe(send)
        try:
            proc = ctx.Process(target=_child, args=(send, self.load, path), daemon=True)
            proc.start()
        except OSError:
            recv.close()
            send.close()
            return
        send.close()
        self._path, self._proc, self._conn = path, proc, recv

    def take(self, path: str) -> Optional[Trace]:
        """The trace of ``path`` read by the child (waiting for it), or None: no child read it,
        or it failed (the caller then reads the file itself). A child reading another file (one
        the caller skipped: its report came from the cache after all) is stopped."""
        if self._path != path:
            self.close()
            return None
        conn = self._conn
        try:
            return _receive(conn) if conn is not None else None
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            return None
        finally:
            self.close()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the child (if any) and forget what it read."""
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            self._proc.join(5 if self._proc.exitcode is None else 0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(1)
        self._path = self._proc = self._conn = None


def serial_reader(max_bytes: int, salvage: bool, keep_python: Optional[str] = None) -> Callable[[str], Trace]:
    """The read a :class:`ReadAhead` child runs: :func:`.records.load_trace` in one process."""
    from .records import DEFAULT_KEEP_PYTHON, load_trace

    kp = keep_python or DEFAULT_KEEP_PYTHON

    def load(path: str) -> Trace:
        return load_trace(path, max_bytes=max_bytes, keep_python=kp, salvage=salvage, jobs=1)

    return load
