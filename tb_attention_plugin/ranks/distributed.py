"""Per-file work of ``ranks``, ``summarize`` and ``analyze`` in-process, on a local Dask cluster,
or on an existing Dask scheduler.

Dask distributed is the engine (the one Nsight Systems' multi-report recipes use): a scheduler
hands files to worker processes, each worker reads its trace from the shared path, analyses it,
keeps the report and its summary in the report cache, and sends back only the summary (a few
KB) — never a whole report. Plan (:func:`plan`):

* ``--scheduler tcp://host:8786``: an existing cluster; workers must see the same paths (and,
  for ``analyze``, the same cache directory, from which the client then prints the reports);
* otherwise, more than ``FEW_FILES`` files that are not summarised yet: a ``LocalCluster`` of
  worker processes on this machine (one thread each, so a worker holds one trace at a time);
* otherwise, or ``--workers 0``: plain in-process work.

Memory: each worker runs one analysis at a time and has a memory limit (``--worker-memory``;
default: the machine's memory shared equally); a worker past it is restarted by its nanny and
its file is reported as failed (``allowed-failures`` 0 on the local cluster: a trace that kills a
worker is not handed to the next one). A file that fails, or a worker that dies, is one error
entry; the others complete.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Optional

from ..analyze import analyze_path, read_ahead, shown_path
from ..cache import ReportCache
from ..options import Options
from . import store
from .summary import error_summary, rank_summary

FEW_FILES = 4  # up to this many files to analyse: in-process (a cluster starts in seconds)
# Seconds to connect to a scheduler, and to wait for its first worker
# (TB_ATTENTION_DASK_TIMEOUT overrides both: tests use a short one).
# (settings.py reads it; it reaches _client as ``timeout``).
CONNECT_TIMEOUT_S = 20.0
WORKERS_TIMEOUT_S = 60.0


class ClusterError(Exception):
    """The cluster could not be started or reached (one line, for ``error: --scheduler: ...``)."""


def plan(n_todo: int, scheduler: Optional[str], workers: Optional[int]) -> tuple[str, int]:
    """("scheduler" | "local" | "inprocess", local worker count)."""
    if scheduler:
        return "scheduler", 0
    if n_todo == 0 or workers == 0:
        return "inprocess", 0
    cpus = os.cpu_count() or 1
    if workers is None:
        if n_todo <= FEW_FILES or cpus < 2:
            return "inprocess", 0
        return "local", min(cpus, n_todo)
    return "local", max(1, min(workers, n_todo))


# ---------------------------------------------------------------- the unit of work (runs on workers)


def summarize_file(
    path: str,
    options: Options,
    cache_dir: Optional[str],
    use_cache: bool,
    keep_json: bool = False,
    ahead: Any = None,
) -> dict:
    """The rank summary of one trace (from the summary cache, else by analysing it), or an error
    summary. With ``keep_json`` the report's JSON body is also kept in the cache for
    ``analyze --format json``. ``ahead``: in-process runs only, the job's files read one ahead
    (analyze.read_ahead). Never raises for bad input."""
    shown = shown_path(path)
    cache = ReportCache(cache_dir) if (use_cache and cache_dir) else None
    key = store.summary_key(cache, path, options) if cache is not None else None
    if cache is not None and not keep_json:
        hit = store.get(cache, key)
        if hit is not None:
            return dict(hit, path=shown, file=os.path.basename(shown))
    try:
        rep = analyze_path(path, options, cache, ahead)
        if rep.get("status") != "ok":
            return error_summary(shown, " ".join(str(rep.get("error") or "unknown error").split()))
        s = rank_summary(rep, shown)
        if cache is not None:
            store.put(cache, key, s)
            if keep_json and key is not None and cache.get_json(key) is None:
                _keep_json(cache, key, rep)
        return s
    except MemoryError:
        return error_summary(shown, "out of memory while analysing; try --max-bytes or a larger --worker-memory")
    except Exception as e:  # an engine bug: one line for this file
        if options.debug:
            raise
        return error_summary(shown, f"internal error: {type(e).__name__}: {e} (please report it)")


def _keep_json(cache: ReportCache, key: str, rep: dict) -> None:
    from ..jsonout import iter_trace_body

    w = cache.json_writer(key)
    for c in iter_trace_body(rep):
        w.write(c)
    w.commit()


# ---------------------------------------------------------------- running many


def _quiet_dask() -> None:
    for name in (
        "distributed",
        "distributed.nanny",
        "distributed.scheduler",
        "distributed.worker",
        "distributed.core",
        "distributed.comm",
        "distributed.client",
        "tornado",
        "asyncio",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextmanager
def _client(
    mode: str, n_workers: int, scheduler: Optional[str], worker_memory: Optional[int], timeout: Optional[float] = None
) -> Iterator[Any]:
    connect_s, workers_s = timeout or CONNECT_TIMEOUT_S, timeout or WORKERS_TIMEOUT_S
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise ClusterError(f"Dask distributed is not installed ({e}); pip install 'dask[distributed]'") from None
    _quiet_dask()
    cluster = client = None
    try:
        if mode == "scheduler":
            try:
                client = Client(scheduler, timeout=f"{connect_s}s", set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise ClusterError(f"cannot connect to the Dask scheduler at {scheduler}: {e}") from None
            try:
                client.wait_for_workers(1, timeout=workers_s)
            except (TimeoutError, OSError):
                raise ClusterError(
                    f"the Dask scheduler at {scheduler} has no workers (none joined within {workers_s} s)"
                ) from None
        else:
            # a file whose analysis killed a worker is not handed to the next one
            with dask.config.set(
                {
                    "distributed.scheduler.allowed-failures": 0,
                    # a worker holds one trace and nothing to spill; pausing one
                    # whose memory stays high after a big trace would stall the run,
                    # so only the nanny's limit applies (restart at 95 %)
                    "distributed.worker.memory.spill": False,
                    "distributed.worker.memory.target": False,
                    "distributed.worker.memory.pause": False,
                }
            ):
                try:
                    cluster = LocalCluster(
                        n_workers=n_workers,
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=None,
                        memory_limit=worker_memory if worker_memory else "auto",
                        silence_logs=logging.CRITICAL,
                    )
                    client = Client(cluster, set_as_default=False)
                except (OSError, RuntimeError, TimeoutError) as e:
                    raise ClusterError(f"cannot start a local Dask cluster: {e}") from None
        yield client
    finally:
        if client is not None:
            try:
                client.close(timeout=10)
            except Exception:  # closing must never hide the results
                pass
        if cluster is not None:
            try:
                cluster.close(timeout=20)
            except Exception:
                pass


def _failure(e: BaseException) -> str:
    name = type(e).__name__
    if name == "KilledWorker":
        return (
            "the Dask worker analysing it died (out of memory or a crash; see --worker-memory / --max-bytes); "
            "the other files are unaffected"
        )
    if name == "CancelledError":
        return "cancelled: the Dask worker or scheduler went away"
    return f"failed on a Dask worker: {name}: {' '.join(str(e).split())}"


def run(
    calls: list[tuple[str, Callable, tuple]],
    scheduler: Optional[str] = None,
    workers: Optional[int] = None,
    worker_memory: Optional[int] = None,
    mode: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Iterator[tuple[str, Any]]:
    """Run ``fn(*args)`` for each ``(label, fn, args)``, yielding ``(label, result)`` as each
    finishes; a call that raises (or whose worker dies) yields ``(label, error_summary)``.
    ``mode``: forced plan (else :func:`plan` from the number of calls)."""
    if mode is None:
        mode, n = plan(len(calls), scheduler, workers)
    else:
        n = max(1, workers or min(os.cpu_count() or 1, len(calls)))
    if mode == "inprocess":
        for label, fn, args in calls:
            try:
                yield label, fn(*args)
            except Exception as e:  # the task functions return errors as values; defensive
                yield label, error_summary(label, f"internal error: {type(e).__name__}: {e}")
        return
    from distributed import as_completed

    with _client(mode, n, scheduler, worker_memory, timeout) as client:
        futures: dict[Any, str] = {}
        run_id = uuid.uuid4().hex[:12]  # keys unique across clients sharing a scheduler
        todo = iter(enumerate(calls))
        done = as_completed(loop=client.loop)

        def submit_next() -> None:
            nxt = next(todo, None)
            if nxt is not None:
                i, (label, fn, args) = nxt
                fut = client.submit(fn, *args, key=f"tb-attention-{run_id}-{i}", pure=False, retries=0)
                futures[fut] = label
                done.add(fut)

        # As many files in flight as the cluster has threads: each worker holds one file, so a
        # worker that dies takes only that file with it (the scheduler would otherwise assign a
        # small batch to each worker at once, and fail every file assigned to a dead one).
        for _ in range(max(1, _threads(client))):
            submit_next()
        for fut in done:
            label = futures.pop(fut)
            try:
                res = fut.result()
            except Exception as e:
                res = error_summary(label, _failure(e))
            fut.release()
            submit_next()
            yield label, res


def _threads(client: Any) -> int:
    try:
        return sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
    except (KeyError, AttributeError, TypeError):
        return 1


def summarize_files(
    paths: list[str],
    options: Options,
    cache_dir: Optional[str],
    use_cache: bool,
    scheduler: Optional[str] = None,
    workers: Optional[int] = None,
    worker_memory: Optional[int] = None,
    keep_json: bool = False,
    timeout: Optional[float] = None,
) -> tuple[list[dict], dict]:
    """Summaries of ``paths`` (in the order given) and what ran them: ``{mode, workers, cached,
    analysed}``. Files already summarised in the cache are read here, not sent anywhere (a
    ``keep_json`` run sends every file: the JSON body may be missing)."""
    cache = ReportCache(cache_dir) if (use_cache and cache_dir) else None
    out: dict[str, dict] = {}
    todo = []
    for p in paths:
        hit = None
        if cache is not None and not keep_json:
            hit = store.get(cache, store.summary_key(cache, p, options))
        if hit is not None:
            shown = shown_path(p)
            out[p] = dict(hit, path=shown, file=os.path.basename(shown))
        else:
            todo.append(p)
    cache_dir = cache.dir if cache is not None else cache_dir
    mode, n = plan(len(todo), scheduler, workers)
    # in this process the files are analysed in turn: the next one is read while one is analysed
    # (the workers of a cluster get None: each analyses its own files)
    ahead = read_ahead(todo, options, cache) if mode == "inprocess" else None
    with ahead if ahead is not None else nullcontext():
        calls = [(p, summarize_file, (p, options, cache_dir, use_cache, keep_json, ahead)) for p in todo]
        for label, res in run(
            calls, scheduler=scheduler, workers=n or workers, worker_memory=worker_memory, mode=mode, timeout=timeout
        ):
            out[label] = res
    info = {
        "mode": mode,
        "workers": n if mode == "local" else None,
        "cached": len(paths) - len(todo),
        "analysed": len(todo),
    }
    return [out[p] for p in paths], info
