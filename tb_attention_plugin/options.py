"""What changes an analysis' result: patterns, peaks and the step analysed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .attention import patterns as P


@dataclass
class Options:
    module_pattern: str = P.DEFAULT_MODULE_PATTERN
    annotation_pattern: str = P.DEFAULT_ANNOTATION_PATTERN
    peak_basis: str = "measured"            # measured | datasheet
    user_peaks: dict = field(default_factory=dict)
    step: Optional[str] = None              # keep only this ProfilerStep ("3" or "ProfilerStep#3")
    allow_partial: bool = False             # a truncated file: analyse the events before the cut
    reference: Optional[str] = None         # trace of the same step without CUDA graphs (or of the capture)

    def key(self) -> str:
        """Identity of everything that changes the result (for caches)."""
        base = (self.module_pattern, self.annotation_pattern, self.peak_basis,
                sorted((self.user_peaks or {}).items(), key=str), self.step, _file_identity(self.reference))
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
