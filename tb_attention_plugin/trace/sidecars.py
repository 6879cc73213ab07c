"""What lies beside a trace file and changes its analysis: the one place that finds it.

Three kinds of file in the trace's own directory change what the analysis of a trace says:

* **Nsight Compute exports** — ``<trace file>.ncu.csv``, ``<stem>.ncu.csv``, or any other
  ``*.ncu.csv`` / ``*ncu*.csv``; roofline/measured.py joins them to the kernels.
* **Replay results** — ``<trace file>.replay.json`` or ``<stem>.replay.json``, written by the
  script of ``tb-attention replay --emit`` (replay/results.py reads them: measured backend times).
  Only the trace's own names count: a replay is of one trace's calls.
* **Reference traces** — sibling trace files that may give a trace's CUDA-graph replays their
  CPU context (an eager run or the graph's capture); analyze.find_reference loads them, and only
  when the trace replays graphs. In a directory of more than ``REFERENCE_CANDIDATES`` traces (the
  ranks of a job) only files named like references (eager/capture/reference) are candidates.

:func:`find` lists all three once per analysis from names and ``stat`` only (nothing is opened);
:meth:`Sidecars.signature` is part of the report cache's key, so a new, changed or removed file
beside a trace makes its cached report stale. Regular files only, and a symlink only when it stays
in the trace's directory (a link in a log directory to a file elsewhere is never read, and pipes
would block).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass

from .files import is_trace_name

# a sibling trace is a reference candidate only up to this size (a reference is one step)
REFERENCE_CANDIDATES = 6
REFERENCE_MAX_BYTES = 512 << 20
_REFERENCE_NAME = re.compile(r"(?i)eager|capture|reference|\bref\b")
REPLAY_SUFFIX = ".replay.json"
_TRACE_STEM = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")

FileStat = tuple[str, int, int]  # (name, size, mtime_ns)


def is_ncu_name(name: str) -> bool:
    """``*.ncu.csv`` / ``*ncu*.csv`` (any case), not hidden."""
    low = name.lower()
    return low.endswith(".csv") and "ncu" in low and not name.startswith(".")


def is_replay_name(name: str) -> bool:
    """``*.replay.json``, not hidden: the output of an emitted replay script."""
    return name.endswith(REPLAY_SUFFIX) and not name.startswith(".")


def is_sidecar_name(name: str) -> bool:
    """A file whose presence beside a trace changes its analysis (ncu export or replay result)."""
    return is_ncu_name(name) or is_replay_name(name)


def trace_stem(trace_name: str) -> str:
    """``w.1700.pt.trace.json.gz`` -> ``w.1700``."""
    return _TRACE_STEM.sub("", trace_name)


def ncu_stems(trace_name: str) -> tuple[str, str]:
    """The export names that belong to one trace: ``<file name>.ncu.csv``, ``<stem>.ncu.csv``."""
    return trace_name + ".ncu.csv", trace_stem(trace_name) + ".ncu.csv"


def replay_names(trace_name: str) -> tuple[str, str]:
    """The replay results that belong to one trace: ``<file name>.replay.json``, ``<stem>.replay.json``."""
    return trace_name + REPLAY_SUFFIX, trace_stem(trace_name) + REPLAY_SUFFIX


@dataclass(frozen=True)
class Listing:
    """One directory's names, by kind (kept while the directory's mtime stays the same)."""

    ncu: tuple[str, ...]
    replay: tuple[str, ...]
    traces: tuple[str, ...]
    hinted: tuple[str, ...] = ()  # the traces whose names say eager/capture/reference


_LISTINGS: dict[str, tuple[int, Listing]] = {}  # directory -> (its mtime_ns, listing)


def listing(d: str) -> Listing:
    """The sidecar and trace names of directory ``d``. Kept while the directory's mtime stays the
    same: listing a directory of n traces once per trace was O(n^2) (2000 traces in one run: 4
    million names looked at)."""
    try:
        mtime = os.stat(d).st_mtime_ns
    except OSError:
        return Listing((), (), ())
    hit = _LISTINGS.get(d)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    ncu, replay, traces = [], [], []
    try:
        with os.scandir(d) as it:
            for e in it:
                n = e.name
                if is_ncu_name(n):
                    ncu.append(n)
                elif is_replay_name(n):
                    replay.append(n)
                elif is_trace_name(n) and not n.startswith("."):
                    traces.append(n)
    except OSError:
        return Listing((), (), ())
    ts = tuple(sorted(traces))
    out = Listing(tuple(sorted(ncu)), tuple(sorted(replay)), ts, tuple(n for n in ts if _REFERENCE_NAME.search(n)))
    if time.time() - mtime / 1e9 > 2.0:  # a listing as old as the clock's tick may miss a file
        if len(_LISTINGS) > 512:
            _LISTINGS.clear()
        _LISTINGS[d] = (mtime, out)
    return out


def _stat_inside(d: str, name: str, real_d: list[str]) -> tuple[int, int] | None:
    """(size, mtime_ns) of a regular file in ``d`` that does not lead out of it, else None."""
    p = os.path.join(d, name)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            return None
        if os.path.islink(p):
            if not real_d:
                real_d.append(os.path.realpath(d))
            if os.path.dirname(os.path.realpath(p)) != real_d[0]:
                return None
    except OSError:
        return None
    return int(st.st_size), int(st.st_mtime_ns)


@dataclass(frozen=True)
class Sidecars:
    """The files beside one trace that its analysis reads, each ``(name, size, mtime_ns)``."""

    directory: str
    ncu: tuple[FileStat, ...] = ()  # the trace's own names first
    replay: tuple[FileStat, ...] = ()  # <file>.replay.json first, then <stem>.replay.json
    references: tuple[FileStat, ...] = ()  # candidates, names that say eager/capture/reference first

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def signature(self) -> str:
        """Identity of these files for cache keys ('' when there are none)."""
        parts = []
        for kind, files in (("ncu", self.ncu), ("replay", self.replay), ("ref", self.references)):
            if files:
                parts.append(f"\0{kind}:{files!r}")
        return "".join(parts)


def ncu_files(trace_path: str) -> list[FileStat]:
    """The ncu exports that may belong to a trace (same directory), the ones named after it first."""
    d = os.path.dirname(os.path.abspath(trace_path))
    own = ncu_stems(os.path.basename(trace_path))
    real: list[str] = []
    out = []
    for name in listing(d).ncu:
        s = _stat_inside(d, name, real)
        if s is not None:
            out.append((name, s[0], s[1]))
    out.sort(key=lambda x: (x[0] not in own, x[0]))
    return out


def replay_files(trace_path: str) -> list[FileStat]:
    """The replay results named after a trace (``<file>.replay.json``, then ``<stem>.replay.json``)."""
    d = os.path.dirname(os.path.abspath(trace_path))
    names = listing(d).replay
    real: list[str] = []
    out = []
    for name in dict.fromkeys(replay_names(os.path.basename(trace_path))):
        if name in names:
            s = _stat_inside(d, name, real)
            if s is not None:
                out.append((name, s[0], s[1]))
    return out


def reference_files(trace_path: str) -> list[FileStat]:
    """Sibling traces that analyze.find_reference may read as the reference of a trace's CUDA-graph
    replays, in the order it tries them (at most ``REFERENCE_CANDIDATES``)."""
    d = os.path.dirname(os.path.abspath(trace_path))
    me = os.path.basename(trace_path)
    ls = listing(d)
    hinted = [n for n in ls.hinted if n != me]
    # in a directory of many traces (the ranks of a job), only files named as references are read:
    # reading a few siblings for every rank would multiply the work; and only the names picked are
    # stat'ed, so that a directory of N traces costs each trace its hinted names, not N stats (N² in all)
    few = len(ls.traces) - (me in ls.traces) <= REFERENCE_CANDIDATES
    rest = [n for n in ls.traces if n != me and n not in ls.hinted] if few else []
    real: list[str] = []
    out = []
    for name in hinted + rest:
        s = _stat_inside(d, name, real)
        if s is not None and s[0] <= REFERENCE_MAX_BYTES:
            out.append((name, s[0], s[1]))
            if len(out) == REFERENCE_CANDIDATES:
                break
    return out


def find(trace_path: str) -> Sidecars:
    """Everything beside a trace that its analysis reads, listed once."""
    return Sidecars(
        directory=os.path.dirname(os.path.abspath(trace_path)),
        ncu=tuple(ncu_files(trace_path)),
        replay=tuple(replay_files(trace_path)),
        references=tuple(reference_files(trace_path)),
    )
