"""The ``/ranks`` route: a run of many workers (ranks) as one job view.

It reads the rank summaries kept with the report cache (ranks/store.py), so a 1024-rank run
that ``tb-attention summarize`` (or an earlier TensorBoard) analysed answers at once, before
the loader has opened any report; in a run of many workers the loader keeps those summaries
itself and opens no report until one is asked for (loader.py). A file without a cached summary
takes it from its loaded report when there is one (and keeps it); otherwise it is counted as
pending, and the page asks again. Summaries are memoised per file and (size, mtime), so repeated
requests only stat files.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Optional

from ..cache import ReportCache
from ..ranks import store
from ..ranks.job import job_view
from ..ranks.summary import error_summary, rank_summary
from .params import json_response, name_param, not_found
from .selection import run_table

_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader -> {rel: (stat_key, summary)}
_LOCK = threading.Lock()


def _named(s: dict, info) -> dict:
    """A summary as the page names things: the run's file, worker and span; the path relative to
    the logdir (never the absolute path)."""
    return dict(s, file=info.name, path=info.rel, worker=info.worker, span=info.span)


def _cached(loader, info) -> Optional[dict]:
    if not getattr(loader, "use_cache", False):
        return None
    cache = ReportCache(loader.cache_dir)
    try:
        key = cache.key(info.abspath, os.stat(info.abspath), loader.options.key())
    except OSError:
        return None
    return store.get(cache, key)


def _from_loaded(loader, info) -> Optional[dict]:
    snap = loader.request(info.rel, None, need_index=True, wait=0.0)
    if snap is None or snap.state != "ready" or snap.loaded is None:
        return None
    s = rank_summary(snap.loaded.report(), info.abspath)
    if getattr(loader, "use_cache", False):
        cache = ReportCache(loader.cache_dir)
        try:
            store.put(cache, cache.key(info.abspath, os.stat(info.abspath), loader.options.key()), s)
        except OSError:
            pass
    return s


def collect(loader, run: str, files: dict) -> tuple[list[dict], list[dict]]:
    """(summaries, pending) of a run's files: the summaries the job view is built from (error
    entries for failed files), and the files without one yet."""
    with _LOCK:
        memo = _MEMO.setdefault(loader, {})
    summaries, pending = [], []
    for _name, (info, snap) in sorted(files.items()):
        hit = memo.get(info.rel)
        if hit is not None and hit[0] == info.stat_key:
            summaries.append(hit[1])
            continue
        s = snap.rank if snap is not None and snap.rank is not None else _cached(loader, info)
        if s is None and snap is not None and snap.state == "ready":
            s = _from_loaded(loader, info)
        if s is None and snap is not None and snap.state == "error":
            summaries.append(_named(error_summary(info.rel, snap.message or "analysis failed"), info))
            continue
        if s is None:
            pending.append({"file": info.name, "worker": info.worker, "state": snap.state if snap else "waiting"})
            continue
        s = _named(s, info)
        memo[info.rel] = (info.stat_key, s)
        summaries.append(s)
    live = {i.rel for i, _ in files.values()}
    for rel in [r for r in memo if _run_of(r) == run and r not in live]:  # removed files
        memo.pop(rel, None)
    return summaries, pending


def run_job(loader, run: str, files: dict) -> dict:
    """The job view of a run (ranks/job.py) with its load state: ``state`` partial while some
    files have no summary yet, ``files``, ``pending`` (the first 50) and ``pending_count``."""
    summaries, pending = collect(loader, run, files)
    view = job_view(summaries)
    view.update(
        {
            "state": "partial" if pending else "ready",
            "run": run,
            "files": len(files),
            "pending": pending[:50],
            "pending_count": len(pending),
        }
    )
    return view


def ranks_route(plugin, request):
    run = name_param(request.args, "run", required=True, what="run")
    loader = plugin.loader
    files = run_table(loader).get(run)
    if files is None:
        raise not_found(f"no run '{run}'", param="run")
    return json_response(run_job(loader, run, files))


def _run_of(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else "."
