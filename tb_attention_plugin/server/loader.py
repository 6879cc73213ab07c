"""Background discovery and analysis of the traces under the logdir.

* A poller thread rescans the logdir every ``poll_secs``: new files appear, changed files are
  analysed again, removed files disappear. A file that is new or changed and was modified less
  than ``settle_secs`` ago waits one poll (it may still be being written).
* A bounded pool (``workers`` threads, each driving one worker process of its own, or doing
  the work itself in ``mode="thread"``) analyses queued files, smallest first; requests for a
  step or for an evicted index jump the queue. A worker process that dies (out of memory, a
  crash) fails only the trace it was analysing; the next job starts a new one. Idle worker
  processes exit after ``idle_secs``.
* A result that says the file ends early, for a file modified less than ``grace_secs`` ago, is
  held back ("waiting") and used only if the file stays unchanged for that long.
* Indexes are kept in memory under an LRU byte budget; summaries stay. An evicted index is
  rebuilt on demand from the on-disk ReportCache (fast) or by analysing again.

* A run of many workers (more than ``lazy_workers``, :data:`LAZY_WORKERS` by default: a job of
  many ranks) is opened lazily: a file whose rank summary is in the report cache (``tb-attention
  summarize``, or an earlier analysis, wrote it: ranks/store.py) is not loaded; its entry keeps
  the summary and the state ``summarized``, which is all the Ranks view needs. Its report is
  loaded (from the cache, or analysed) when a route first asks for that file. Files without a
  cached summary are analysed as usual (which keeps their summary). So TensorBoard opens a
  summarised 1024-rank job by reading 1024 files of ~1 KB, not 1024 reports.

Each file goes through ``waiting -> queued -> loading -> ready | error``, or ``waiting ->
summarized -> queued -> ...`` in a lazy run.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from .. import settings
from ..cache import ReportCache
from ..options import Options
from ..progress import Progress, active as progress_active
from ..ranks import store as rank_store
from .discovery import FileInfo, Scanner, still_inside
from .index import Loaded
from .jobs import analyze_job
from .worker import WorkerDied, WorkerProcess

log = logging.getLogger("tb_attention_plugin")

# "incomplete": the file is truncated (still being written, or cut short) and stayed so past the
# grace period; it is analysed again when it changes. Not an error of the trace's content, and
# never shown as a CPU-only trace.
# "summarized": a file of a lazy run whose rank summary was in the cache; its report is loaded
# on first request.
STATES = ("waiting", "queued", "loading", "ready", "error", "incomplete", "summarized")
PRIO_INTERACTIVE, PRIO_BACKGROUND = 0, 1
# A run with more workers than this is opened lazily (see above). Eight: one node's GPUs still
# load as before; beyond that, loading every rank's report costs minutes and memory for views that
# show one rank at a time.
LAZY_WORKERS = 8


@dataclass
class Entry:
    """The analysis of one (file, step) at one (size, mtime)."""

    rel: str
    step: Optional[str]
    stat_key: tuple
    state: str = "waiting"
    message: Optional[str] = None
    summary: Optional[dict] = None
    loaded: Optional[Loaded] = None
    created: float = field(default_factory=time.time)
    queued_at: Optional[float] = None
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    seconds: Optional[float] = None
    attempts: int = 0
    held: Optional[dict] = None  # a result kept back while the file may still be growing
    in_queue: bool = False
    prio: int = PRIO_BACKGROUND
    running: bool = False
    progress: Optional[Progress] = None  # the record of the analysis while it runs
    rank: Optional[dict] = None  # the cached rank summary (ranks/store.py), in a lazy run
    # the events before the cut of a truncated file (Options.allow_partial), asked for by the page:
    # an entry of its own beside the whole file's
    partial: bool = False

    @property
    def key(self) -> tuple:
        return (self.rel, self.step, True) if self.partial else (self.rel, self.step)


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of an entry's fields for one request."""

    rel: str
    step: Optional[str]
    state: str
    message: Optional[str]
    summary: Optional[dict]
    loaded: Optional[Loaded]
    seconds: Optional[float]
    running: bool
    queued_at: Optional[float]
    started_at: Optional[float]
    progress: Optional[dict] = None  # stage and bytes read, while it is being analysed
    rank: Optional[dict] = None  # the cached rank summary of a lazy run's file
    partial: bool = False  # the analysis of the events before a truncation (Entry.partial)
    truncated: bool = False  # the file ends early (a result held back, or "incomplete")


def relative_paths(summary: dict, rel: str, logdir: str) -> None:
    """Paths in a summary as the page shows them: relative to the logdir (the trace's own
    ``path``, the reference trace of CUDA-graph replays found beside it), never the server's
    absolute paths. A path outside the logdir (an explicit reference) keeps only its name."""
    summary["path"] = rel
    g = summary.get("graphs")
    if not isinstance(g, dict):
        return
    ref = g.get("reference")
    if isinstance(ref, str) and os.path.isabs(ref):
        inside = ref.startswith(logdir.rstrip(os.sep) + os.sep)
        g["reference"] = os.path.relpath(ref, logdir).replace(os.sep, "/") if inside else os.path.basename(ref)


class Loader:
    def __init__(
        self,
        logdir: str,
        options: Optional[Options] = None,
        *,
        poll_secs: float = 3.0,
        settle_secs: float = 1.0,
        grace_secs: float = 30.0,
        workers: int = 1,
        mode: str = "process",
        memory_budget: int = 1 << 30,
        cache_dir: Optional[str] = None,
        use_cache: bool = True,
        idle_secs: float = 60.0,
        job: Callable = analyze_job,
        worker_cmd: Optional[list] = None,
        lazy_workers: int = LAZY_WORKERS,
    ):
        self.logdir = os.path.realpath(logdir)
        self.options = options or Options()
        self.poll_secs = poll_secs
        self.settle_secs = settle_secs
        self.grace_secs = grace_secs
        self.workers = max(1, int(workers))
        self.mode = mode if mode in ("process", "thread") else "process"
        self.memory_budget = memory_budget
        # None: the environment's (settings.py), as the plugin would have it
        self.cache_dir = cache_dir or settings.from_env().cache_dir
        self.use_cache = use_cache
        self.idle_secs = idle_secs
        self.lazy_workers = lazy_workers
        self._job = job
        self._scanner = Scanner(self.logdir)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._files: dict[str, FileInfo] = {}
        self._entries: dict[tuple, Entry] = {}
        self._queue: list = []
        self._seq = itertools.count()
        self._lru: OrderedDict[tuple, int] = OrderedDict()
        self._lru_bytes = 0
        self._stop = threading.Event()
        self._wake_poller = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._procs: list[WorkerProcess] = [WorkerProcess(worker_cmd) for _ in range(self.workers)]
        self._busy = 0
        self._last_busy = time.monotonic()
        self.scans = 0
        self.last_scan: Optional[float] = None
        self.last_scan_secs: Optional[float] = None
        self.scan_error: Optional[str] = None
        self.scan_skipped_links: list = []  # symlinks the walk does not follow (discovery.py)
        self.scan_truncated = False
        self.first_scan_done = threading.Event()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        t = threading.Thread(target=self._poll_loop, name="tb-attention-poller", daemon=True)
        t.start()
        self._threads.append(t)
        for i in range(self.workers):
            w = threading.Thread(
                target=self._work_loop, args=(self._procs[i],), name=f"tb-attention-worker-{i}", daemon=True
            )
            w.start()
            self._threads.append(w)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake_poller.set()
        with self._changed:
            self._changed.notify_all()
        for w in self._procs:
            w.close(kill=True)
        for t in self._threads:
            t.join(timeout)
        for w in self._procs:
            w.close(kill=True)

    def poke(self) -> None:
        """Rescan soon (e.g. when the page asks for fresh data)."""
        self._wake_poller.set()

    # ------------------------------------------------------------ scanning

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan_once()
            except Exception:  # never let the poller die
                log.exception("tb-attention: scan failed")
            for w in self._procs:
                w.close_if_idle(self.idle_secs)
            self._wake_poller.wait(self.poll_secs)
            self._wake_poller.clear()

    def scan_once(self) -> None:
        t0 = time.monotonic()
        res = self._scanner.scan()
        now = time.time()
        ranked = self._cached_summaries(res.files)  # file reads: outside the lock
        with self._changed:
            self.scan_error = res.error
            self.scan_truncated = res.truncated
            self.scan_skipped_links = res.skipped_links
            old_files = self._files
            self._files = res.files
            for rel, info in res.files.items():
                e = self._entries.get((rel, None))
                if e is None or e.stat_key != info.stat_key:
                    self._drop_rel(rel)
                    e = Entry(rel=rel, step=None, stat_key=info.stat_key)
                    self._entries[e.key] = e
                    if self._fresh(info, now):
                        e.message = "the file was just modified; waiting for it to settle"
                    elif not self._summarized(e, ranked.get(rel)):
                        self._enqueue(e, PRIO_BACKGROUND, info.size)
                elif e.state == "waiting":
                    if e.held is not None:
                        if now - info.mtime_ns / 1e9 >= self.grace_secs:
                            held, e.held = e.held, None
                            self._apply(e, held, final=True)
                    elif not self._summarized(e, ranked.get(rel)):
                        self._enqueue(e, PRIO_BACKGROUND, info.size)  # unchanged since last poll
            for rel in set(old_files) - set(res.files):
                self._drop_rel(rel)
            for e in list(self._entries.values()):  # step variants held back or waiting
                if (e.step is None and not e.partial) or e.state != "waiting" or e.rel not in res.files:
                    continue
                if e.held is None:
                    self._enqueue(e, PRIO_INTERACTIVE)
                elif now - res.files[e.rel].mtime_ns / 1e9 >= self.grace_secs:
                    held, e.held = e.held, None
                    self._apply(e, held, final=True)
            self.scans += 1
            self.last_scan = now
            self.last_scan_secs = round(time.monotonic() - t0, 4)
            self._changed.notify_all()
        self.first_scan_done.set()

    def _cached_summaries(self, files: dict[str, FileInfo]) -> dict[str, tuple[tuple, dict]]:
        """rel -> (stat_key, cached rank summary) for the files of lazy runs (more than
        ``lazy_workers`` workers) that have no entry yet, or one still waiting."""
        if not (self.use_cache and self.cache_dir):
            return {}
        workers: dict[str, set[str]] = {}
        for info in files.values():
            workers.setdefault(info.run, set()).add(info.worker)
        lazy = {run for run, ws in workers.items() if len(ws) > self.lazy_workers}
        if not lazy:
            return {}
        with self._lock:
            todo = [
                info
                for rel, info in files.items()
                if info.run in lazy
                and (
                    (e := self._entries.get((rel, None))) is None
                    or e.stat_key != info.stat_key
                    or (e.state == "waiting" and e.held is None)
                )
            ]
        cache = ReportCache(self.cache_dir)
        options = dataclasses.replace(self.options, step=None)  # as _run analyses the whole trace
        out: dict[str, tuple[tuple, dict]] = {}
        for info in todo:
            if self._stop.is_set():
                break
            if not still_inside(info, self.logdir):
                continue  # the work loop reports it when asked
            try:
                st = os.stat(info.abspath)
            except OSError:
                continue
            if (st.st_size, st.st_mtime_ns) != info.stat_key[:2]:
                continue  # changed since the scan: analysed as usual
            s = rank_store.get(cache, cache.key(info.abspath, st, options.key()))
            if s is not None and s.get("status") != "error":
                out[info.rel] = (info.stat_key, s)
        return out

    def _summarized(self, e: Entry, hit: Optional[tuple[tuple, dict]]) -> bool:
        """Keep a lazy run's file as its cached summary instead of loading it (False: load it)."""
        if hit is None or hit[0] != e.stat_key:
            return False
        e.state, e.message, e.rank = "summarized", None, hit[1]
        return True

    def _fresh(self, info: FileInfo, now: float) -> bool:
        age = now - info.mtime_ns / 1e9
        return age < self.settle_secs

    def _drop_rel(self, rel: str) -> None:
        for k in [k for k in self._entries if k[0] == rel]:
            self._entries.pop(k)
            n = self._lru.pop(k, None)
            if n is not None:
                self._lru_bytes -= n

    # ------------------------------------------------------------ queue

    def _enqueue(self, e: Entry, prio: int, size: int = 0) -> None:
        if e.in_queue:
            if prio < e.prio:  # promote: push again; the stale item is skipped
                e.prio = prio
                heapq.heappush(self._queue, (prio, 0, next(self._seq), e.key, id(e)))
            return
        e.prio = prio
        e.state = "queued" if e.state != "ready" else e.state
        e.queued_at = time.time()
        e.in_queue = True
        heapq.heappush(self._queue, (prio, size if prio else 0, next(self._seq), e.key, id(e)))
        self._changed.notify_all()

    def _next_job(self) -> Optional[Entry]:
        with self._changed:
            while not self._stop.is_set():
                while self._queue:
                    _, _, _, key, eid = heapq.heappop(self._queue)
                    e = self._entries.get(key)
                    if e is None or id(e) != eid or not e.in_queue:
                        continue
                    e.in_queue = False
                    if e.state == "ready" and e.loaded is not None:
                        continue
                    if e.state != "ready":
                        e.state = "loading"
                    e.started_at = time.time()
                    e.running = True
                    e.attempts += 1
                    self._busy += 1
                    self._changed.notify_all()
                    return e
                self._changed.wait(1.0)
        return None

    def _work_loop(self, proc: WorkerProcess) -> None:
        while not self._stop.is_set():
            e = self._next_job()
            if e is None:
                return
            proc.progress.reset()  # before it is shown: not the previous job's numbers
            e.progress = proc.progress
            try:
                info = self._files.get(e.rel)
                if info is None:
                    result = None
                elif not still_inside(info, self.logdir):
                    result = {"status": "error", "error": "the path leaves the log directory", "truncated": False}
                else:
                    result = self._run(proc, info.abspath, e.step, e.partial)
            except Exception as ex:  # defensive: the loop must survive anything
                log.exception("tb-attention: analysis of %s failed", e.rel)
                result = {"status": "error", "error": f"internal error: {type(ex).__name__}: {ex}", "truncated": False}
            with self._changed:
                e.running = False
                e.progress = None
                self._busy -= 1
                self._last_busy = time.monotonic()
                if result is not None and self._entries.get(e.key) is e:
                    self._finish(e, result)
                self._changed.notify_all()

    def _run(self, proc: WorkerProcess, path: str, step: Optional[str], partial: bool = False) -> dict:
        options = dataclasses.replace(self.options, step=step, allow_partial=partial or self.options.allow_partial)
        args = (path, options, self.cache_dir, self.use_cache)
        if self.mode == "thread":
            with progress_active(proc.progress):
                return self._job(*args)
        try:
            return proc.run(args)
        except WorkerDied as e:
            log.warning("tb-attention: worker died while analysing %s: %s", path, e)
            return {
                "status": "error",
                "truncated": False,
                "error": f"{e}; the trace may be too big for this machine (see TB_ATTENTION_MAX_BYTES)",
            }
        except OSError as e:  # cannot start a process here: do it in this thread
            log.warning("tb-attention: cannot start a worker process (%s); analysing in-process", e)
            self.mode = "thread"
            with progress_active(proc.progress):
                return self._job(*args)

    # ------------------------------------------------------------ results

    def _finish(self, e: Entry, result: dict) -> None:
        info = self._files.get(e.rel)
        e.seconds = result.get("seconds")
        if info is None or info.stat_key != e.stat_key:
            e.state, e.message = "waiting", "the file changed while it was analysed"
            return
        try:
            st = os.stat(info.abspath)
            if (st.st_size, st.st_mtime_ns) != e.stat_key[:2]:
                e.state, e.message = "waiting", "the file changed while it was analysed"
                return
        except OSError:
            e.state, e.message = "waiting", "the file disappeared while it was analysed"
            return
        fresh = time.time() - info.mtime_ns / 1e9 < self.grace_secs
        if result.get("truncated") and fresh and e.state != "ready" and not e.partial:
            e.state = "waiting"
            e.held = result
            e.message = "the file ends early: it may still be being written; waiting for it to settle"
            return
        self._apply(e, result, final=True)

    def _apply(self, e: Entry, result: dict, final: bool) -> None:
        e.finished_at = time.time()
        e.held = None
        if result.get("status") == "ok":
            loaded: Loaded = result["loaded"]
            info = self._files.get(e.rel)
            if info is not None:
                relative_paths(loaded.summary, info.rel, self.logdir)
            e.state, e.message = "ready", None
            e.summary = loaded.summary
            e.loaded = loaded
            self._remember(e)
        else:
            e.state = "incomplete" if result.get("incomplete") else "error"
            e.message = result.get("error") or "unknown error"
            e.summary, e.loaded = None, None
        self._changed.notify_all()

    def _remember(self, e: Entry) -> None:
        assert e.loaded is not None
        n = e.loaded.nbytes()
        old = self._lru.pop(e.key, None)
        if old is not None:
            self._lru_bytes -= old
        self._lru[e.key] = n
        self._lru_bytes += n
        while self._lru_bytes > self.memory_budget and len(self._lru) > 1:
            k, sz = self._lru.popitem(last=False)
            self._lru_bytes -= sz
            victim = self._entries.get(k)
            if victim is not None:
                victim.loaded = None

    # ------------------------------------------------------------ queries (routes)

    def _progress_of(self, e: Entry) -> Optional[dict]:
        """How far the running analysis of ``e`` has got; None when it is not running. Only reads
        memory: a worker that died, or one not started yet, shows its last numbers or none."""
        if not e.running:
            return None
        rec = e.progress
        snap = rec.snapshot() if rec is not None else None
        info = self._files.get(e.rel)
        size = info.size if info is not None else None
        if snap is None or (snap["stage"] == "starting" and not snap["bytes_total"]):
            gz = info is not None and info.name.endswith(".gz")
            snap = {
                "stage": "starting",
                "bytes_read": 0,
                "bytes_total": size or None,
                "fraction": 0.0 if size else None,
                "basis": "compressed" if gz else "file",
            }
        return snap

    def files(self) -> dict:
        with self._lock:
            return dict(self._files)

    def listing(self) -> list:
        """[(FileInfo, Snapshot of its whole-trace entry or None)] under one lock."""
        with self._lock:
            out = []
            for rel, info in self._files.items():
                e = self._entries.get((rel, None))
                snap = (
                    None
                    if e is None
                    else Snapshot(
                        e.rel,
                        None,
                        e.state,
                        e.message,
                        e.summary,
                        None,
                        e.seconds,
                        e.running,
                        e.queued_at,
                        e.started_at,
                        self._progress_of(e),
                        e.rank,
                        False,
                        e.state == "incomplete" or (e.held is not None and bool(e.held.get("truncated"))),
                    )
                )
                out.append((info, snap))
            return out

    def request(
        self, rel: str, step: Optional[str], need_index: bool, wait: float = 0.0, partial: bool = False
    ) -> Optional[Snapshot]:
        """The entry of (file, step), analysing it now if needed; waits up to ``wait`` seconds
        for it to become ready. None if the file is not in the table. ``partial``: the analysis
        of the events before the cut of a truncated file (a complete file gives its usual
        report, marked not partial)."""
        deadline = time.monotonic() + wait
        with self._changed:
            info = self._files.get(rel)
            if info is None:
                return None
            e = self._entries.get((rel, step, True) if partial else (rel, step))
            if e is None:
                e = Entry(rel=rel, step=step, stat_key=info.stat_key, partial=partial)
                self._entries[e.key] = e
                self._enqueue(e, PRIO_INTERACTIVE)
            elif e.state in ("queued", "waiting") and step is not None and e.held is None:
                self._enqueue(e, PRIO_INTERACTIVE)
            elif e.state == "ready" and need_index and e.loaded is None:
                self._enqueue(e, PRIO_INTERACTIVE)
            elif e.state == "summarized":
                self._enqueue(e, PRIO_INTERACTIVE)  # a lazy run's file, asked for: load it now
            elif e.state == "queued":
                self._enqueue(e, PRIO_INTERACTIVE)  # the page is looking at it: go first
            while True:
                done = e.state == "error" or (e.state == "ready" and (e.loaded is not None or not need_index))
                if done or self._entries.get(e.key) is not e:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            if e.state == "ready" and e.loaded is not None and e.key in self._lru:
                self._lru.move_to_end(e.key)
            return Snapshot(
                e.rel,
                e.step,
                e.state,
                e.message,
                e.summary,
                e.loaded,
                e.seconds,
                e.running,
                e.queued_at,
                e.started_at,
                self._progress_of(e),
                e.rank,
                e.partial,
                e.state == "incomplete" or (e.held is not None and bool(e.held.get("truncated"))),
            )

    def counts(self) -> dict:
        with self._lock:
            c = {s: 0 for s in STATES}
            for k, e in self._entries.items():
                if k[1] is None and not e.partial:
                    c[e.state] += 1
            c["files"] = len(self._files)
            return c

    def status(self) -> dict:
        with self._lock:
            loading = []
            now = time.time()
            for e in self._entries.values():
                if e.running:
                    info = self._files.get(e.rel)
                    loading.append(
                        {
                            "file": e.rel,
                            "step": e.step,
                            "size": info.size if info else None,
                            "elapsed_s": round(now - (e.started_at or now), 1),
                            "progress": self._progress_of(e),
                        }
                    )
            return {
                "logdir": self.logdir,
                "counts": self.counts(),
                "loading": loading,
                "queue": sum(1 for e in self._entries.values() if e.in_queue),
                "scans": self.scans,
                "last_scan": self.last_scan,
                "last_scan_secs": self.last_scan_secs,
                "scan_error": self.scan_error,
                "scan_truncated": self.scan_truncated,
                "poll_secs": self.poll_secs,
                "workers": self.workers,
                "mode": self.mode,
                "lazy_workers": self.lazy_workers,
                "memory": {"indexes": len(self._lru), "bytes": self._lru_bytes, "budget": self.memory_budget},
            }
