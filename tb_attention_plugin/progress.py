"""How far the analysis running here has got: its stage and the bytes of the trace file read.

A :class:`Progress` is a 64-byte record of shared memory that the engine writes and the
TensorBoard process reads when ``/status`` or ``/runs`` is asked. It is anonymous shared memory
in thread mode (and in the reader's forked child, which inherits it), and an unlinked file passed
by descriptor to a worker process (:mod:`.server.worker`). The engine finds the record of the
analysis running in its thread with :func:`current`; with none (the CLI) every call is a no-op.

Bytes are counted per process, one slot each, so that the two processes of a parallel read
(:mod:`.trace.parallel`) both count without sharing a counter. Counts are bytes of the file as
stored: for a gzip file the compressed bytes consumed, against the file's size (the decompressed
size is unknown until the end); ``basis`` says which. Readers report at most every
:data:`REPORT_BYTES`, so the cost is a few struct writes per hundred MB. No locks: each field has
one writer, and a value read in the middle of a write is only a moment old.
"""

from __future__ import annotations

import mmap
import os
import stat as _stat
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

STAGES = ("starting", "reading", "analysing", "memory", "advice", "indexing")
REPORT_BYTES = 4 << 20  # a reader reports after about this many (decompressed) bytes
SLOTS = 4  # processes of one analysis that can count bytes
SIZE = 64

_MAGIC = 0x50414254  # "TBAP"
_HEAD = struct.Struct("<IIQQI")  # magic, stage, generation, bytes_total, flags
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_OFF_STAGE, _OFF_GEN, _OFF_TOTAL, _OFF_FLAGS, _OFF_SLOTS = 4, 8, 16, 24, 32
_GZIP = 1


class Progress:
    """One analysis' progress record. The loader side calls :meth:`reset` before each job and
    :meth:`snapshot` to read it; the engine side calls :meth:`attach` when the job starts and
    writes only while the record's generation is still the one it attached to (a straggler of an
    earlier job, e.g. the reader's child of a killed worker, cannot scribble on the next one)."""

    def __init__(self, buf: mmap.mmap):
        self._mm = buf
        self.slot = 0
        self._mine = 0
        self._gen = -1

    @classmethod
    def anonymous(cls) -> Progress:
        p = cls(mmap.mmap(-1, SIZE))  # MAP_SHARED: a forked child's writes are seen here
        p.reset()
        return p

    @classmethod
    def on_fd(cls, fd: int) -> Progress:
        return cls(mmap.mmap(fd, SIZE))

    # -- the loader's side
    def reset(self) -> None:
        """A new job: next generation, stage ``starting``, nothing read."""
        gen = _U64.unpack_from(self._mm, _OFF_GEN)[0] + 1
        self._mm[:SIZE] = bytes(SIZE)
        _HEAD.pack_into(self._mm, 0, _MAGIC, 0, gen, 0, 0)

    def snapshot(self) -> Optional[dict]:
        """``{stage, bytes_read, bytes_total, fraction, basis}``, or None if the record cannot be
        read. ``fraction`` is of the file read (null when its size is unknown)."""
        try:
            magic, stage, _, total, flags = _HEAD.unpack_from(self._mm, 0)
            done = sum(self.by_process())
        except (ValueError, struct.error, OSError):
            return None
        if magic != _MAGIC:
            return None
        done = min(done, total) if total else done
        return {
            "stage": STAGES[stage] if stage < len(STAGES) else "starting",
            "bytes_read": done,
            "bytes_total": total or None,
            "fraction": round(done / total, 4) if total else None,
            "basis": "compressed" if flags & _GZIP else "file",
        }

    def by_process(self) -> tuple:
        """Bytes read by each process of the analysis (slot 0: the one that started it)."""
        return tuple(_U64.unpack_from(self._mm, _OFF_SLOTS + 8 * i)[0] for i in range(SLOTS))

    # -- the engine's side
    def attach(self, slot: int = 0) -> None:
        self._gen = _U64.unpack_from(self._mm, _OFF_GEN)[0]
        self.slot = slot
        self._mine = 0

    def _ours(self) -> bool:
        return _U64.unpack_from(self._mm, _OFF_GEN)[0] == self._gen

    def set_stage(self, name: str) -> None:
        code = STAGES.index(name)
        if self._ours():
            _U32.pack_into(self._mm, _OFF_STAGE, code)

    def begin_read(self, total: int, gzip: bool) -> None:
        """Reading (again, after a parallel read gave up) from byte 0: every slot zeroed."""
        self._mine = 0
        if self._ours():
            _U32.pack_into(self._mm, _OFF_STAGE, STAGES.index("reading"))
            _U64.pack_into(self._mm, _OFF_TOTAL, max(0, int(total)))
            _U32.pack_into(self._mm, _OFF_FLAGS, _GZIP if gzip else 0)
            self._mm[_OFF_SLOTS : _OFF_SLOTS + 8 * SLOTS] = bytes(8 * SLOTS)

    def add(self, n: int) -> None:
        """``n`` more bytes of the file read by this process."""
        self._mine += n
        if self._ours():
            _U64.pack_into(self._mm, _OFF_SLOTS + 8 * self.slot, self._mine)

    def forked(self, slot: int) -> None:
        """In a forked child: count into ``slot`` from now on (the parent keeps its own)."""
        self.slot = slot
        self._mine = 0


# -- the record of the analysis running in this thread ---------------------------------------
# Thread-local, so that loader threads analysing side by side (thread mode) each have their own;
# a forked child keeps the forking thread's (the parallel reader relies on it).
_local = threading.local()


def current() -> Optional[Progress]:
    return getattr(_local, "progress", None)


@contextmanager
def active(p: Optional[Progress]) -> Iterator[Optional[Progress]]:
    """Report into ``p`` while the block runs in this thread."""
    prev = current()
    if p is not None:
        p.attach()
    _local.progress = p
    try:
        yield p
    finally:
        _local.progress = prev


def stage(name: str) -> None:
    p = current()
    if p is not None:
        p.set_stage(name)


def begin_read(path: str) -> None:
    """The trace file at ``path`` is about to be read from its start."""
    p = current()
    if p is None:
        return
    gz, total = False, 0
    try:
        st = os.stat(path)
        if _stat.S_ISREG(st.st_mode):  # (opening a named pipe would block)
            total = st.st_size
            with open(path, "rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        pass
    p.begin_read(total, gz)


def from_fd(text: Optional[str]) -> Optional[Progress]:
    """The record a worker process was given: the descriptor number its parent passed
    (settings.PROGRESS_FD, read by server/worker.py), or None."""
    v = text or ""
    if not v.isdigit():
        return None
    fd = int(v)
    try:
        return Progress.on_fd(fd)
    except (OSError, ValueError):
        return None
    finally:
        try:
            os.close(fd)  # the mapping stays; the descriptor is not needed any more
        except OSError:
            pass
