"""Find profiler traces under the TensorBoard log directory.

A *run* is a directory (relative to the logdir, ``.`` for the logdir itself) that holds traces:

* ``{worker}.{time_ns}.pt.trace.json[.gz]`` as ``torch.profiler.tensorboard_trace_handler``
  writes them (``worker`` defaults to ``{hostname}_{pid}``; ``time_ns`` names the *span*), or
  ``{worker}.pt.trace.json[.gz]`` without a span;
* any other ``*.json`` / ``*.json.gz`` whose first bytes look like a Chrome/Kineto trace
  (``prof.export_chrome_trace(...)``); its worker is the file name without the suffix.

The walk never follows symlinked directories, skips hidden directories, and drops files whose
real path leaves the logdir, so nothing outside the logdir is ever listed or opened. Routes
resolve user parameters only against the table built here.
"""

from __future__ import annotations

import os
import re
import stat as _stat
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..trace.files import looks_like_trace
from ..trace.sidecars import is_sidecar_name

PT_TRACE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?:\.gz)?$")
PLAIN_JSON = re.compile(r"^(?P<stem>.+?)\.json(?:\.gz)?$")
SKIP_DIRS = frozenset({"node_modules", "__pycache__"})
MAX_DEPTH = 12
MAX_FILES = 20000


@dataclass(frozen=True)
class FileInfo:
    """One trace file as seen by the last scan."""

    run: str  # directory relative to the logdir, posix separators, "." for the root
    name: str  # file name inside the run directory
    rel: str  # path relative to the logdir (unique key)
    abspath: str  # absolute real path (inside the logdir)
    worker: str
    span: Optional[str]  # time_ns string from the file name, None when absent
    size: int
    mtime_ns: int
    sidecars: tuple = ()  # (name, size, mtime_ns) of the ncu exports and replay results beside it (trace/sidecars.py)
    fs_rel: str = ""  # ``rel`` as on disk when that differs (names that are not UTF-8)

    @property
    def stat_key(self) -> tuple:
        """(size, mtime_ns), plus the files beside the trace when there are any: a new or
        changed ``*.ncu.csv`` or ``*.replay.json`` makes the trace's analysis stale."""
        return (self.size, self.mtime_ns) + ((self.sidecars,) if self.sidecars else ())


@dataclass
class ScanResult:
    files: dict = field(default_factory=dict)  # rel -> FileInfo
    truncated: bool = False  # MAX_FILES reached
    error: Optional[str] = None  # the logdir cannot be read
    # symlinked directories (never followed) and trace files whose real path leaves the logdir,
    # relative to it: said to the user, who otherwise sees an empty tab without a reason
    skipped_links: list = field(default_factory=list)


def parse_name(name: str) -> Optional[tuple[str, Optional[str], bool]]:
    """(worker, span, is_pt_trace) for a trace-like file name, or None."""
    m = PT_TRACE.match(name)
    if m:
        return m.group("worker"), m.group("span"), True
    m = PLAIN_JSON.match(name)
    if m:
        return m.group("stem"), None, False
    return None


def _text(name: str) -> str:
    """A file or directory name as text JSON can carry: bytes that are not UTF-8 (kept by Python
    as lone surrogates) become U+FFFD. One such name made every /runs answer a 500."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


MAX_SKIPPED_LISTED = 20


def _note_link(out: ScanResult, path: str, root: str) -> None:
    """Remember a link the walk does not follow (the first MAX_SKIPPED_LISTED, by relative path)."""
    if len(out.skipped_links) < MAX_SKIPPED_LISTED:
        out.skipped_links.append(_text(os.path.relpath(path, root).replace(os.sep, "/")))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Scanner:
    """Walks the logdir; remembers which plain ``.json`` files are traces (by size and mtime) so
    that a poll does not sniff unchanged files again."""

    def __init__(self, logdir: str, sniff: Callable[[str], bool] = looks_like_trace):
        self.logdir = os.path.realpath(logdir)
        self._sniff = sniff
        self._sniffed: dict[str, tuple] = {}  # rel -> (size, mtime_ns, is_trace)

    def scan(self) -> ScanResult:
        out = ScanResult()
        root = self.logdir
        if not os.path.isdir(root):
            out.error = f"log directory {root} does not exist (yet)"
            return out
        seen_sniff: dict[str, tuple] = {}
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            d, depth = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            sidecars = _sidecars(entries)
            for e in entries:
                if len(out.files) >= MAX_FILES:
                    out.truncated = True
                    break
                try:
                    if e.is_dir(follow_symlinks=False):
                        if not e.name.startswith(".") and e.name not in SKIP_DIRS and depth < MAX_DEPTH:
                            subdirs.append(e.path)
                        continue
                    if e.is_symlink() and e.is_dir() and not e.name.startswith("."):
                        _note_link(out, e.path, root)
                        continue
                except OSError:
                    continue
                parsed = parse_name(e.name)
                if parsed is None or e.name.startswith("."):
                    continue
                info = self._file(e, parsed, root, seen_sniff, sidecars)
                if info is not None:
                    out.files[info.rel] = info
                elif e.is_symlink() and not _inside(os.path.realpath(e.path), root):
                    _note_link(out, e.path, root)
            for sd in reversed(subdirs):
                stack.append((sd, depth + 1))
        self._sniffed = seen_sniff
        return out

    def _file(self, e: os.DirEntry, parsed, root: str, seen_sniff: dict, sidecars: tuple = ()) -> Optional[FileInfo]:
        worker, span, is_pt = parsed
        try:
            st = os.stat(e.path)  # follows a symlinked file: its target must stay inside
        except OSError:
            return None
        if not _stat.S_ISREG(st.st_mode):
            return None
        real = os.path.realpath(e.path)
        if not _inside(real, root):
            return None
        rel_dir = os.path.relpath(os.path.dirname(e.path), root)
        run = "." if rel_dir in (".", "") else rel_dir.replace(os.sep, "/")
        fs_rel = e.name if run == "." else f"{run}/{e.name}"
        run, name, rel, worker = _text(run), _text(e.name), _text(fs_rel), _text(worker)
        if not is_pt:
            prev = self._sniffed.get(rel)
            if prev is not None and prev[:2] == (st.st_size, st.st_mtime_ns):
                ok = prev[2]
            else:
                ok = self._sniff(real)
            seen_sniff[rel] = (st.st_size, st.st_mtime_ns, ok)
            if not ok:
                return None
        return FileInfo(
            run=run,
            name=name,
            rel=rel,
            abspath=real,
            worker=worker,
            span=span,
            size=int(st.st_size),
            mtime_ns=int(st.st_mtime_ns),
            sidecars=sidecars,
            fs_rel=fs_rel if fs_rel != rel else "",
        )


def _sidecars(entries: list) -> tuple:
    """Nsight Compute exports and replay results in a directory (by name; trace/sidecars.py)."""
    out = []
    for e in entries:
        if not is_sidecar_name(e.name):
            continue
        try:
            if e.is_file():
                st = e.stat()
                out.append((e.name, int(st.st_size), int(st.st_mtime_ns)))
        except OSError:
            continue
    return tuple(out)


def still_inside(info: FileInfo, logdir_real: str) -> bool:
    """Re-check right before opening: the path may have been swapped for an escaping symlink."""
    try:
        return _inside(os.path.realpath(os.path.join(logdir_real, *(info.fs_rel or info.rel).split("/"))), logdir_real)
    except (OSError, ValueError):
        return False
