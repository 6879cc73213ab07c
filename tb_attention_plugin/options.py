"""What changes an analysis' result (patterns, peaks, the step analysed), and how a trace is
read (size cap, reader processes). Built at the edges (:mod:`.settings`, the CLI's flags, the
plugin's requests) and passed down: the engine reads no environment. Change one field with
``dataclasses.replace(options, step="3")``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .attention import patterns as P
from .trace.reader import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Options:
    module_pattern: str = P.DEFAULT_MODULE_PATTERN
    annotation_pattern: str = P.DEFAULT_ANNOTATION_PATTERN
    peak_basis: str = "measured"  # measured | datasheet
    user_peaks: dict[str, Any] = field(default_factory=dict)
    step: Optional[str] = None  # keep only this ProfilerStep ("3" or "ProfilerStep#3")
    allow_partial: bool = False  # a truncated file: analyse the events before the cut
    reference: Optional[str] = None  # trace of the same step without CUDA graphs (or of the capture)
    # How the trace is read and errors are handled: they never change a report, so key() leaves them out.
    max_bytes: int = DEFAULT_MAX_BYTES  # refuse traces that decompress to more
    read_jobs: Optional[int] = None  # processes reading one big trace (None: up to 2, by CPUs)
    parallel_min_bytes: Optional[int] = None  # smaller traces are read serially (None: trace.parallel's)
    debug: bool = False  # an engine error raises instead of becoming an error entry

    def key(self) -> str:
        """Identity of everything that changes the result (for caches)."""
        base = (
            self.module_pattern,
            self.annotation_pattern,
            self.peak_basis,
            sorted((self.user_peaks or {}).items(), key=str),
            self.step,
            _file_identity(self.reference),
        )
        # a truncated file is an error without allow_partial: never served from a partial report
        return repr(base + (("allow_partial",) if self.allow_partial else ()))


def _file_identity(path: Optional[str]):
    """A reference trace changes the result: its path, size and mtime belong in the cache key."""
    if not path:
        return None
    import os

    try:
        st = os.stat(path)
    except OSError:
        return (path, None)
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)
