"""Where in the user's code: the innermost user Python frame around an op.

Traces recorded with ``with_stack=True`` hold a ``python_function`` event per Python call, named
``file.py(line): function`` (Kineto shortens paths to what follows the ``sys.path`` entry:
``train.py``, ``transformers/models/llama/modeling_llama.py``, ``torch/nn/modules/module.py``,
``typing.py``). The reader keeps only the *user* frames among them (:func:`user_frame`: not
PyTorch, Triton, the standard library, ``site-packages``, built-ins or the profiler) in the
trace's ``stacks`` table; :func:`innermost` then finds, for many (thread, time) points at once,
the innermost kept frame that contains each point: one sort, one parent pass and a few
vectorised steps up the nesting, never a scan per query.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from typing import Any, Optional

import numpy as np

_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
# first path component of library code (besides the standard library)
_LIBRARIES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "functorch",
        "triton",
        "numpy",
        "_pytest",
        "pytest",
        "pluggy",
        "IPython",
        "ipykernel",
        "tqdm",
    }
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {
    "typing",
    "enum",
    "dataclasses",
    "logging",
    "contextlib",
    "threading",
    "functools",
    "abc",
    "collections",
    "os",
    "runpy",
    "importlib",
}


@lru_cache(maxsize=65536)
def user_frame(name: str) -> Optional[tuple[str, int, str]]:
    """``(file, line, function)`` of a ``python_function`` event name when it is user code, else
    None (PyTorch and its family, the standard library, site-packages, ``<built-in>`` and
    ``<frozen ...>`` frames, the profiler's own frames, ``nn.Module`` scopes)."""
    m = _FRAME.match(name)
    if m is None:
        return None
    path = m.group("file")
    if path.startswith("<") or "site-packages/" in path or "dist-packages/" in path or "profiler" in path:
        return None
    parts = path.replace("\\", "/").lstrip("/").split("/")
    if "lib" in parts and any(p.startswith("python") for p in parts):
        return None  # an absolute path into an interpreter's lib
    head = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
    if head in _LIBRARIES or head in _STDLIB:
        return None
    return path, int(m.group("line")), m.group("func")


def innermost(stacks: dict[str, np.ndarray], thread: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """For each (thread, time) point, the index (into ``stacks``) of the innermost user frame on
    that thread whose span contains the time, or -1."""
    out = np.full(len(thread), -1, dtype=np.int64)
    n = len(stacks.get("ts_ns", ()))
    if not n or not len(thread):
        return out
    f_thr = stacks["thread"].astype(np.int64)
    f_start = stacks["ts_ns"]
    f_end = f_start + stacks["dur_ns"]
    # sort by thread, start, longest first: a parent precedes the children that start with it
    order = np.lexsort((-stacks["dur_ns"], f_start, f_thr))
    t_s, s_s, e_s = f_thr[order], f_start[order], f_end[order]
    parent = np.full(n, -1, dtype=np.int64)
    ends = e_s.tolist()
    stack: list[int] = []
    last_thr = None
    for i, (th, st, en) in enumerate(zip(t_s.tolist(), s_s.tolist(), ends)):
        if th != last_thr:
            stack, last_thr = [], th
        while stack and (ends[stack[-1]] <= st or ends[stack[-1]] < en):  # closed, or not around i
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    # the last frame on the same thread that starts at or before each point, then up the nesting
    # until one contains it
    lo = np.searchsorted(t_s, thread, side="left")
    hi = np.searchsorted(t_s, thread, side="right")
    base = s_s.astype(np.int64)
    idx = np.full(len(thread), -1, dtype=np.int64)
    q = np.flatnonzero(hi > lo)
    for th_lo, th_hi in {(int(a), int(b)) for a, b in zip(lo[q].tolist(), hi[q].tolist())}:
        sel = q[(lo[q] == th_lo)]
        pos = np.searchsorted(base[th_lo:th_hi], ts_ns[sel], side="right") - 1
        idx[sel] = np.where(pos >= 0, pos + th_lo, -1)
    live = np.flatnonzero(idx >= 0)
    while len(live):
        j = idx[live]
        inside = e_s[j] >= ts_ns[live]
        done = live[inside]
        out[done] = order[idx[done]]
        live = live[~inside]
        idx[live] = parent[idx[live]]
        live = live[idx[live] >= 0]
    return out


def frame_json(strings: list[str], stacks: dict[str, np.ndarray], i: int) -> Optional[dict[str, Any]]:
    """``{file, line, function}`` of frame ``i`` of the stacks table (None for -1)."""
    if i < 0:
        return None
    hit = user_frame(strings[int(stacks["name"][i])])
    if hit is None:
        return None
    return {"file": hit[0], "line": hit[1], "function": hit[2]}
