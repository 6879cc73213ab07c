"""A worker process that analyses traces for the plugin: ``python -m tb_attention_plugin.server.worker``.

Started with :mod:`subprocess` rather than :mod:`multiprocessing` so that nothing of the host
program (TensorBoard, a notebook, a script without a ``__main__`` guard) is imported again in
the child. Protocol on stdin/stdout: 8-byte little-endian length + pickle, one job at a time;
the child exits at end of input. A child that dies (out of memory, a crash) fails only the job
it was running; the parent starts a new one for the next job. While a job runs, the child writes
its progress (:mod:`..progress`) into a small file shared by descriptor, which the parent reads
whenever asked, without a message on the pipe.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from .. import progress as _progress

_HDR = struct.Struct("<Q")


class WorkerDied(RuntimeError):
    pass


def _read_exact(f, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


class WorkerProcess:
    """The parent's handle on one child; used by one loader thread at a time."""

    def __init__(
        self, cmd: Optional[list] = None, max_jobs: int = 16, recycle_bytes: int = 256 << 20, max_jobs_hard: int = 2000
    ):
        self.cmd = cmd or [sys.executable, "-m", "tb_attention_plugin.server.worker"]
        self.max_jobs = max_jobs
        self.recycle_bytes = recycle_bytes
        self.max_jobs_hard = max_jobs_hard
        self._proc: Optional[subprocess.Popen] = None
        self._jobs = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.last_used = time.monotonic()
        self.progress, self._progress_file = _progress_record()

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def _start(self) -> subprocess.Popen:
        from ..settings import PROGRESS_FD

        env = dict(os.environ)
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        # the child must import this very package, wherever the parent found it
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop(PROGRESS_FD, None)
        fds: tuple = ()
        if self._progress_file is not None:
            fds = (self._progress_file.fileno(),)
            env[PROGRESS_FD] = str(fds[0])
        return subprocess.Popen(
            self.cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            close_fds=True,
            pass_fds=fds,
            start_new_session=True,
        )

    def run(self, args: tuple):
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
                self._jobs = 0
                self._bytes = 0
            p = self._proc
            assert p.stdin is not None and p.stdout is not None  # started with pipes
            self.progress.reset()
            blob = pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL)
            try:
                p.stdin.write(_HDR.pack(len(blob)) + blob)
                p.stdin.flush()
                hdr = _read_exact(p.stdout, _HDR.size)
                if len(hdr) < _HDR.size:
                    raise WorkerDied(self._why(p))
                (n,) = _HDR.unpack(hdr)
                body = _read_exact(p.stdout, n)
                if len(body) < n:
                    raise WorkerDied(self._why(p))
            except (BrokenPipeError, OSError) as e:
                self._kill()
                raise WorkerDied(str(e)) from None
            except WorkerDied:
                self._kill()
                raise
            self._jobs += 1
            try:
                self._bytes += os.path.getsize(args[0])
            except (OSError, TypeError, IndexError):
                pass
            self.last_used = time.monotonic()
            # Give the memory of big traces back now and then: after max_jobs jobs that read at
            # least recycle_bytes between them. Restarting every 16 jobs whatever their size made
            # a run of 2000 tiny traces pay 125 interpreter starts (63 s instead of ~10 s).
            if (self._jobs >= self.max_jobs and self._bytes >= self.recycle_bytes) or self._jobs >= self.max_jobs_hard:
                self._close()
            return pickle.loads(body)

    def _why(self, p: subprocess.Popen) -> str:
        try:
            rc = p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None and rc < 0:
            return f"the analysis process was killed (signal {-rc}; out of memory?)"
        return f"the analysis process exited unexpectedly (code {rc})"

    def _kill(self) -> None:
        p, self._proc = self._proc, None
        if p is None:
            return
        try:
            p.kill()
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (p.stdin, p.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def _close(self) -> None:
        p, self._proc = self._proc, None
        if p is None:
            return
        try:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            try:
                p.kill()
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            if p.stdout is not None:
                p.stdout.close()
        except OSError:
            pass

    def close(self, kill: bool = False) -> None:
        """Stop the child (idle, or shutting down). Safe to call from any thread."""
        if kill:
            p = self._proc
            if p is not None:
                try:
                    p.kill()
                except OSError:
                    pass
        if self._lock.acquire(timeout=0 if kill else 10):
            try:
                self._kill() if kill else self._close()
            finally:
                self._lock.release()

    def close_if_idle(self, idle_secs: float) -> None:
        if self._proc is not None and time.monotonic() - self.last_used > idle_secs:
            if self._lock.acquire(blocking=False):
                try:
                    if time.monotonic() - self.last_used > idle_secs:
                        self._close()
                finally:
                    self._lock.release()


def _progress_record():
    """(record, file): the progress record of this worker's jobs, in an unlinked temporary file
    (nothing is left behind whatever happens to either process) that every child it starts maps.
    Where that is not possible, an in-memory record and no file: thread mode still reports, the
    child does not."""
    if os.name == "posix":
        f = None
        try:
            f = tempfile.TemporaryFile()
            f.truncate(_progress.SIZE)
            rec = _progress.Progress.on_fd(f.fileno())
            rec.reset()
            return rec, f
        except (OSError, ValueError):
            if f is not None:
                f.close()
    return _progress.Progress.anonymous(), None


def _exit_with_parent(poll_secs: float = 1.0) -> None:
    """End this process when the TensorBoard that started it is gone (killed, crashed): a worker
    in the middle of a long analysis would otherwise go on alone until the job ends."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(poll_secs)
            if os.getppid() != parent:
                os._exit(0)

    t = threading.Thread(target=watch, name="tb-attention-parent-watch", daemon=True)
    t.fork_safe = True  # type: ignore[attr-defined]  # holds no lock: the parallel reader may still fork (parallel.py)
    t.start()


def main() -> int:
    _exit_with_parent()
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    from ..settings import PROGRESS_FD  # here, not at import: the worker starts watching its parent first
    from .jobs import analyze_job

    record = _progress.from_fd(os.environ.get(PROGRESS_FD))
    while True:
        hdr = _read_exact(inp, _HDR.size)
        if len(hdr) < _HDR.size:
            return 0
        (n,) = _HDR.unpack(hdr)
        args = pickle.loads(_read_exact(inp, n))
        with _progress.active(record):
            res = analyze_job(*args)
        blob = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HDR.pack(len(blob)) + blob)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
