"""Giving the memory the analysis freed back to the system.

glibc keeps freed memory in its heap for reuse, and returns the free pages inside the heap only
when asked (``malloc_trim``). A cold analysis frees a lot at a few points (the linking's
temporaries, the trace's columns no later stage reads, the trace itself at the end), and what
later stages allocate does not always fit in the holes: without a trim there the process grew
past what it held by ~20 MB on a 263 MB trace.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None (another C library, another system)."""
    try:
        import ctypes

        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def return_freed_memory() -> None:
    """Give the system back the free pages of the heap (a few ms; nothing where there is no glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
