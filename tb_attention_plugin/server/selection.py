"""Which analysed trace a request means, and the answer while it is not there yet.

The run table is built from the loader's listing; ``run``/``worker``/``span``/``file``/``step``
parameters are looked up in it (never joined into a path). A trace still loading answers 202
with its state (:class:`Pending`), one that failed its one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..ranks.job import job_kind, rank_from_name
from .discovery import FileInfo
from .loader import Loader, Snapshot
from .params import bool_param, name_param, not_found, step_param

WAIT_SUMMARY = 1.5  # seconds a route waits for an analysis before answering "loading"

RunTable = dict[str, dict[str, tuple[FileInfo, Optional[Snapshot]]]]


def run_table(loader: Loader) -> RunTable:
    """run -> {file name: (FileInfo, Snapshot or None)}"""
    runs: RunTable = {}
    for info, snap in loader.listing():
        runs.setdefault(info.run, {})[info.name] = (info, snap)
    return runs


def span_key(span: Optional[str]) -> tuple[bool, int, str]:
    """Spans in the order the profiler wrote them (numbers as numbers), files without one first."""
    return (span is not None, int(span) if span and span.isdigit() else 0, span or "")


@dataclass(frozen=True)
class Selection:
    info: FileInfo
    step: Optional[str]
    echo: dict[str, Any]  # what was selected, as the routes answer it ("selection")
    partial: bool = False  # the events before the cut of a truncated file (``partial=1``)


def select(table: RunTable, args: Any, prefix: str = "", run_key: str = "run") -> Selection:
    """The file and step that run/worker/span/file/step parameters name (404 when none)."""
    run = name_param(args, run_key, required=True, what="run")
    worker = name_param(args, prefix + "worker", what="worker")
    span = name_param(args, prefix + "span", what="span")
    fname = name_param(args, prefix + "file", what="file")
    step = step_param(args, prefix + "step")
    partial = bool_param(args, prefix + "partial", False)
    files = table.get(run) if run is not None else None
    if files is None:
        raise not_found(f"no run '{run}'", param=run_key)
    if fname is not None:
        hit = files.get(fname)
        if hit is None:
            raise not_found(f"no trace file '{fname}' in run '{run}'", param=prefix + "file")
        info = hit[0]
    else:
        infos = [f[0] for f in files.values()]
        if worker is None and span is None:  # default: prefer traces that analysed fine
            good = [f[0] for f in files.values() if f[1] is not None and f[1].state == "ready"]
            infos = good or infos
        if worker is not None:
            infos = [i for i in infos if i.worker == worker]
            if not infos:
                raise not_found(f"no worker '{worker}' in run '{run}'", param=prefix + "worker")
        else:
            first = sorted({i.worker for i in infos})[0]
            infos = [i for i in infos if i.worker == first]
        if span is not None:
            infos = [i for i in infos if (i.span or "") == span]
            if not infos:
                raise not_found(f"no span '{span}' for that worker in run '{run}'", param=prefix + "span")
        info = sorted(infos, key=lambda i: (span_key(i.span), i.name))[-1]
    echo: dict[str, Any] = {"run": info.run, "worker": info.worker, "span": info.span, "file": info.name, "step": step}
    if partial:
        echo["partial"] = True
    return Selection(info, step, echo, partial)


@dataclass(frozen=True)
class Pending:
    """The answer for a trace that is not analysed (yet): 202 with its state, or its error."""

    body: dict[str, Any]
    code: int

    @property
    def state(self) -> str:
        return str(self.body.get("state", "loading"))


def pending(snap: Snapshot, echo: dict[str, Any], counts: dict[str, Any]) -> Pending:
    if snap.state in ("error", "incomplete"):  # incomplete: a truncated file (loader.STATES)
        return Pending({"state": snap.state, "error": snap.message, "selection": echo}, 200)
    state = snap.state if snap.state != "ready" else "loading"
    return Pending({"state": state, "message": snap.message, "selection": echo, "counts": counts}, 202)


class NotReady(Exception):
    """Raised by :func:`fetch`: answer with ``pending`` (the route's wrapper does)."""

    def __init__(self, pending: Pending):
        super().__init__(pending.state)
        self.pending = pending


def fetch(
    loader: Loader, args: Any, need_index: bool, prefix: str = "", run_key: str = "run", wait: float = WAIT_SUMMARY
) -> tuple[Snapshot, Selection]:
    """The analysed entry the parameters name; :class:`NotReady` while it is not there."""
    snap, sel, not_yet = fetch_state(loader, args, need_index, prefix, run_key, wait)
    if snap is None:
        assert not_yet is not None  # fetch_state gives one or the other
        raise NotReady(not_yet)
    return snap, sel


def fetch_state(
    loader: Loader, args: Any, need_index: bool, prefix: str = "", run_key: str = "run", wait: float = WAIT_SUMMARY
) -> tuple[Optional[Snapshot], Selection, Optional[Pending]]:
    """The analysed entry the parameters name, or why it is not there (yet)."""
    sel = select(run_table(loader), args, prefix, run_key)
    if sel.step is not None:
        base = loader.request(sel.info.rel, None, need_index=False, wait=wait, partial=sel.partial)
        if base is None:
            raise not_found(f"trace '{sel.info.rel}' disappeared")
        if base.state != "ready":
            return None, sel, pending(base, sel.echo, loader.counts())
        steps = [s.get("name") for s in (base.summary or {}).get("steps") or []]
        if sel.step not in steps:
            raise not_found(
                f"no step '{sel.step}' in this trace (steps: {', '.join(steps) or 'none'})", param=prefix + "step"
            )
    snap = loader.request(sel.info.rel, sel.step, need_index=need_index, wait=wait, partial=sel.partial)
    if snap is None:
        raise not_found(f"trace '{sel.info.rel}' disappeared")
    if snap.state == "ready" and (snap.loaded is not None or not need_index):
        return snap, sel, None
    return None, sel, pending(snap, sel.echo, loader.counts())


def file_json(info: FileInfo, snap: Optional[Snapshot]) -> dict[str, Any]:
    """One file of ``/runs``: where it is, its load state, and a few summary fields once ready
    (or summarized: from the rank summary, without ``steps``)."""
    d: dict[str, Any] = {
        "file": info.name,
        "path": info.rel,
        "worker": info.worker,
        "span": info.span,
        "size": info.size,
        "mtime": info.mtime_ns / 1e9,
        "state": snap.state if snap else "waiting",
        "message": snap.message if snap else None,
        "seconds": snap.seconds if snap else None,
    }
    if snap is not None and snap.progress is not None:
        d["progress"] = snap.progress
    if snap is not None and snap.truncated:
        d["truncated"] = True  # the file ends early: the page offers the partial analysis (partial=1)
    if snap is not None and snap.state == "ready" and snap.summary is not None:
        s = snap.summary
        d["device"] = (s.get("device") or {}).get("label")
        d["steps"] = [x.get("name") for x in s.get("steps") or []]
        d["attention_time_us"] = s.get("attention_time_us")
        d["notices"] = [n.get("code") for n in s.get("notices") or []]
    elif snap is not None and snap.rank is not None:  # a lazy run's file: its cached rank summary
        r = snap.rank
        d["device"] = r.get("device")
        d["attention_time_us"] = r.get("attention_time_us")
        d["notices"] = list(r.get("notices") or [])
    return d


def file_rank(info: FileInfo, snap: Optional[Snapshot]) -> Optional[int]:
    """The rank a trace states: its ``distributedInfo`` once analysed (the report's, or the cached
    rank summary's), else a ``rank<N>`` in its file name (ranks/summary.py, rank_of), else None."""
    if snap is not None:
        dist = ((snap.summary or {}).get("trace") or {}).get("distributed") or {}
        r = dist.get("rank") if isinstance(dist, dict) else None
        if snap.rank is not None and r is None:
            r = snap.rank.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
    return rank_from_name(info.name)


def runs_listing(loader: Loader) -> dict[str, Any]:
    """The ``/runs`` answer: every run with its files, workers and spans, and the loader's counts."""
    out = []
    for run, files in sorted(run_table(loader).items()):
        rows: list[dict[str, Any]] = []
        workers: dict[str, list[FileInfo]] = {}
        for _name, (info, snap) in sorted(files.items()):
            rows.append(file_json(info, snap))
            workers.setdefault(info.worker, []).append(info)
        wl = []
        for w in sorted(workers):
            spans = sorted(workers[w], key=lambda i: (span_key(i.span), i.name))
            wl.append(
                {"worker": w, "spans": [{"span": i.span, "index": n + 1, "file": i.name} for n, i in enumerate(spans)]}
            )
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["state"]] = counts.get(r["state"], 0) + 1
        is_job, why = job_kind([file_rank(info, snap) for info, snap in files.values()])
        out.append({"run": run, "files": rows, "workers": wl, "counts": counts, "job": is_job, "job_reason": why})
    return {
        "logdir": loader.logdir,
        "runs": out,
        "counts": loader.counts(),
        "scanned": loader.first_scan_done.is_set(),
        "scan_error": loader.scan_error,
        "skipped_links": loader.scan_skipped_links,
        "poll_secs": loader.poll_secs,
    }
