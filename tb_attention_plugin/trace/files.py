"""Which files are traces, and how their names are shown: the cheap part of reading, with no
analysis imported (the plugin's discovery and the CLI's cache hits use it without the engine)."""

from __future__ import annotations

import os
import stat as _stat
import zlib
from collections.abc import Iterator

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


def is_trace_name(name: str) -> bool:
    """A file name that may hold a trace (its content decides: :func:`looks_like_trace`)."""
    return name.endswith(TRACE_SUFFIXES)


def looks_like_trace(path: str) -> bool:
    """Cheap sniff of the first bytes: a JSON object with traceEvents, or a list of events."""
    try:
        st = os.stat(path)
        if not _stat.S_ISREG(st.st_mode):  # a named pipe would block open() forever
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            if not _stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            head = os.read(fd, 65536)
        finally:
            os.close(fd)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, 65536)
        except zlib.error:
            return False
    text = head.lstrip()
    if text[:1] == b"[":
        return b'"ph"' in text[:65536]
    if text[:1] != b"{":
        return False
    return b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"deviceProperties"' in text


def shown_path(path: str) -> str:
    """``path`` as text that can always be printed and encoded as JSON: bytes of a file name that
    are not UTF-8 (kept by Python as lone surrogates) become ``\\xff`` escapes."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        try:
            return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return path.encode("utf-8", "backslashreplace").decode("utf-8")


def expand_paths(paths: list[str]) -> Iterator[tuple[str, bool]]:
    """Files to analyse: named files as given (explicit=True); directories are walked for trace
    files (``*.pt.trace.json[.gz]`` always, other ``*.json[.gz]`` when they look like traces)."""
    for p in paths:
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs.sort()
                for f in sorted(files):
                    full = os.path.join(root, f)
                    try:
                        if not _stat.S_ISREG(os.stat(full).st_mode):  # pipes, sockets, dangling links
                            continue
                    except OSError:
                        continue
                    if f.endswith((".pt.trace.json", ".pt.trace.json.gz")):
                        found.append(full)
                    elif f.endswith((".json", ".json.gz")) and looks_like_trace(full):
                        found.append(full)
            for f in found:
                yield f, False
        else:
            yield p, True
