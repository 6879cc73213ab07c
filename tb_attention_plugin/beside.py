"""Work of one analysis done beside it, in a forked child, while this process goes on.

A cold analysis of a big trace reads it with two processes (trace/parallel.py), then ran every
stage in one: on two CPUs, one sat idle for the second half of the run. Some stages read the
report and the trace but make what only later stages read (the memory block and the replay calls:
report.py). A forked child, which has this process's report and trace as they were at the fork,
computes those while this process builds the others; the result comes back pickled through a pipe.

A child is forked only where the parallel reader would fork one (trace/parallel.py: two
processes wanted and a CPU idle now, no thread that could hold a lock, a trace at least the size
read in parallel). Otherwise, or when the child fails, the caller computes the result itself, so
the report is the same either way.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Generic, Optional, TypeVar

from .trace.parallel import MIN_PARALLEL_BYTES, may_fork, work_bytes

T = TypeVar("T")


class Beside(Generic[T]):
    """A value that a forked child computes; :meth:`result` waits for it."""

    def __init__(self, proc: BaseProcess, conn: Connection):
        self._proc, self._conn = proc, conn

    def result(self) -> Optional[T]:
        """The child's value, or None when the child failed (the caller then computes it itself)."""
        try:
            ok, value = self._conn.recv()
        except Exception:  # noqa: BLE001 - EOF (the child died), a cut or unreadable message
            ok, value = False, None
        finally:
            self._conn.close()
        self._proc.join(timeout=5)
        if self._proc.is_alive():  # it sent its value and hangs at exit: never wait on it
            self._proc.kill()
            self._proc.join()
        return value if ok else None


def worth_forking(path: Optional[str], jobs: Optional[int] = None, min_bytes: Optional[int] = None) -> bool:
    """Fork a child beside the analysis of the trace at ``path``? The parallel reader's rule
    (``jobs`` and ``min_bytes`` as for :func:`.trace.parallel.suitable`): a trace too small to
    read with two processes gains less from the child than its fork costs (~5-10 ms)."""
    if not path:
        return False
    size = work_bytes(path)
    if size is None or size < (MIN_PARALLEL_BYTES if min_bytes is None else min_bytes):
        return False
    return may_fork(jobs)


def start(fn: Callable[..., T], *args: Any) -> Optional[Beside[T]]:
    """``fn(*args)`` in a forked child, or None where no child could be started."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True, name="tb-attention-beside")
    try:
        proc.start()  # multiprocessing flushes the standard streams first: the child never repeats them
    except OSError:
        receive.close()
        send.close()
        return None
    send.close()
    return Beside(proc, receive)


def _child(conn: Connection, fn: Callable[..., Any], args: tuple) -> None:
    try:
        value = fn(*args)
        conn.send((True, value))
    except BaseException as e:  # noqa: BLE001 - the parent computes the value itself
        try:
            conn.send((False, f"{type(e).__name__}: {e}"))
        except Exception:  # noqa: BLE001 - the parent then sees EOF, with the same outcome
            pass
    finally:
        conn.close()
