"""One entry point for both faces: a path in, a report (or a one-line error) out.

``analyze_path`` loads a trace, runs the analysis and returns the report dict of
:mod:`.report`. Errors in the input never raise: they come back as ``{"status": "error",
"error": "..."}`` with a one-line message. Results are cached on disk by (path, size, mtime,
options, engine version) through :mod:`.cache`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import stat as _stat
from collections.abc import Iterator
from typing import Any, Optional

from .cache import ReportCache
from .heap import return_freed_memory
from .options import Options
from .report import analyze_trace, error_entry
from .trace import sidecars
from .trace.ahead import ReadAhead, serial_reader
from .trace.files import shown_path
from .trace.reader import DEFAULT_MAX_BYTES, TraceReadError, TraceTruncated
from .trace.records import load_trace
from .trace.sidecars import Sidecars

TRUNCATED = "truncated"
PARTIAL_FIX = (
    "let the profiler finish writing the file (or copy it again) and re-run; the missing part may hold "
    "what this notice says is absent"
)
# notices that say something is absent: in a truncated file it may be in the part that is missing
_ABSENCE_NOTICES = ("no_gpu_kernels", "no_attention", "no_shapes", "no_stack")


def truncation_error(detail: str) -> str:
    """The one-line error of a truncated trace (``error: <file>: truncated: ...``)."""
    return f"{TRUNCATED}: {detail} (--allow-partial analyses the events before the cut)"


def mark_partial(report: dict) -> None:
    """``trace.partial``: the report covers only the events before a truncation (--allow-partial).
    A notice that something is absent cannot recommend its usual fix on a partial trace (the
    kernels, shapes or scopes may be in the missing part): its message says so and its fix is the
    truncation's."""
    tr = report.get("trace")
    if not isinstance(tr, dict):
        return
    tr["partial"] = partial = bool(tr.get("truncated"))
    if not partial:
        return
    for n in report.get("notices") or []:
        if n.get("code") in _ABSENCE_NOTICES:
            n["message"] = f"{n['message']} (only the events before the cut were read: the file is truncated)"
            n["fix"] = PARTIAL_FIX


def find_reference(
    path: str, trace, max_bytes: int = DEFAULT_MAX_BYTES, side: Optional[Sidecars] = None
) -> tuple[Any, Optional[str], list[str]]:
    """(trace, path, notes) of a sibling file that gives most of ``trace``'s CUDA-graph replays
    their context (an eager run or the capture of the same step), or (None, None, notes): notes
    say which siblings were read and why none was taken. Only looked for when the trace has
    replayed kernels and no capture of its own. The candidates are the ones trace/sidecars.py
    lists beside the trace (``side``, found here when not given)."""
    from .attention import graphs
    from .trace.correlate import link

    if not graphs.has_graph_launches(trace):  # most traces: no replay, no second link pass
        return None, None, []
    links = link(trace)
    replayed = int(graphs.replayed(trace, links).sum())
    if not replayed or len(graphs.capture_nodes(trace, links)[0]):
        return None, None, []
    side = side if side is not None else sidecars.find(path)
    best: tuple[Any, Optional[str]] = (None, None)
    best_n = 0
    read: list[tuple[str, int]] = []
    for c in (side.path(name) for name, _, _ in side.references):
        try:
            ref = load_trace(c, max_bytes=max_bytes)
        except (TraceReadError, OSError, ValueError, MemoryError):
            continue
        n = graphs.matches(trace, links, ref)
        read.append((shown_path(c), n))
        if n > best_n:
            best, best_n = (ref, shown_path(c)), n
    if best_n >= 0.5 * replayed:
        return best[0], best[1], []
    return (
        None,
        None,
        [
            f"{p} beside it was read as a reference and not used: {n} of {replayed} replayed kernels found a kernel "
            "of the same name, grid and block there, and a reference needs half"
            for p, n in read
        ],
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while the analysis runs, as while reading (records.py):
    the analysis makes millions of short-lived containers and no cycles worth collecting, and
    each full collection walked every live object of the trace and the report (0.3-0.4 s of
    collections in one cold analyze of a 250 MB trace; peak RSS unchanged within 1 MB)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def analyze_path(
    path: str, options: Optional[Options] = None, cache: Optional[ReportCache] = None, ahead: Optional[ReadAhead] = None
) -> dict:
    """The report of one trace file, or an error entry. Never raises for bad input (nor for an
    engine error, unless ``options.debug``). ``ahead``: the files of a job analysed in turn
    (trace/ahead.py): this file's trace when the child has read it, and the next file read while
    this one is analysed."""
    opt = options or Options()
    shown = shown_path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        return error_entry(shown, f"cannot open: {e.strerror or e}")
    if _stat.S_ISDIR(st.st_mode):
        return error_entry(shown, "is a directory, not a trace file")
    if not _stat.S_ISREG(st.st_mode):  # opening a named pipe would block forever
        kind = (
            "a named pipe" if _stat.S_ISFIFO(st.st_mode) else "a socket" if _stat.S_ISSOCK(st.st_mode) else "a device"
        )
        return error_entry(shown, f"not a regular file ({kind})")
    key = None
    side = sidecars.find(path)  # ncu exports, replay results, reference candidates: listed once
    if cache is not None:
        key = cache.key(path, st, opt.key(), side.signature())
        hit = cache.get(key)
        if hit is not None:
            hit["path"] = shown
            _keep_rank_summary(cache, key, hit, opt.debug, missing_only=True)  # a cache older than summaries
            return hit
    try:
        max_bytes = opt.max_bytes
        trace = ahead.take(path) if ahead is not None else None
        if trace is None:
            trace = load_trace(
                path,
                max_bytes=max_bytes,
                salvage=opt.allow_partial,
                jobs=opt.read_jobs,
                parallel_min_bytes=opt.parallel_min_bytes,
            )
        if ahead is not None:
            ahead.started(path)
        ref, ref_path = None, None
        ref_notes: list[str] = []
        if opt.reference:
            try:
                ref, ref_path = load_trace(opt.reference, max_bytes=max_bytes), shown_path(opt.reference)
            except TraceReadError as e:
                return error_entry(shown, f"reference {shown_path(opt.reference)}: {e}")
        else:
            ref, ref_path, ref_notes = find_reference(path, trace, max_bytes, side)
        with _collector_paused():
            report = analyze_trace(
                trace, opt, reference=ref, reference_path=ref_path, sidecars=side, reference_notes=ref_notes
            )
    except TraceTruncated as e:
        return error_entry(shown, truncation_error(str(e)))
    except TraceReadError as e:
        return error_entry(shown, str(e))
    except ValueError as e:  # e.g. an unknown --step
        return error_entry(shown, str(e))
    except MemoryError:
        return error_entry(shown, "out of memory while analysing; try --max-bytes or a smaller trace")
    except RecursionError:
        return error_entry(shown, "JSON nested too deeply")
    except Exception as e:  # an engine bug: one line for this file, never a traceback
        if opt.debug:
            raise
        return error_entry(
            shown,
            f"internal error: {type(e).__name__}: {e} (please report it; TB_ATTENTION_DEBUG=1 shows the traceback)",
        )
    trace = ref = None  # freed now, so that their pages go back
    # ~80 MB freed on a 250 MB trace: writing the report reuses it instead of growing the process
    return_freed_memory()
    report["path"] = shown
    mark_partial(report)
    if cache is not None and key is not None:
        cache.put(key, report)
        _keep_rank_summary(cache, key, report, opt.debug)
    return report


def read_ahead(paths: list[str], options: Optional[Options] = None, cache: Optional[ReportCache] = None) -> ReadAhead:
    """A :class:`~.trace.ahead.ReadAhead` over the files of a job that :func:`analyze_path` is
    about to analyse in this order: each file is read ahead unless its report is cached (with one
    file there is none to read ahead)."""
    opt = options or Options()

    def wanted(path: str) -> bool:
        if cache is None:
            return True
        try:
            return not cache.has(cache.key(path, os.stat(path), opt.key()))
        except OSError:
            return False  # analyze_path says what is wrong with it

    load = serial_reader(opt.max_bytes, opt.allow_partial)
    return ReadAhead(paths, load, wanted, opt.read_jobs, opt.parallel_min_bytes)


def _keep_rank_summary(
    cache: ReportCache, key: str, report: dict, debug: bool = False, missing_only: bool = False
) -> None:
    """The rank summary beside the cached report (ranks/store.py): what the Ranks view and
    ``tb-attention ranks`` read for a job of many traces. ``missing_only``: only when there is
    none (a report cached without one). Only a cache: a failure here never fails the analysis."""
    from .ranks.store import has, put
    from .ranks.summary import rank_summary

    if missing_only and has(cache, key):
        return
    try:
        put(cache, key, rank_summary(report))
    except Exception:
        if debug:
            raise
