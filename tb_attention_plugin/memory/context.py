"""Shared lookups over one analysed trace, and where in it a memory event happened.

:class:`TraceContext` memoises what several parts of the memory block ask of the same ranges
(names, parsed inputs, inferred outputs, public call numbers); :func:`innermost_ranges` and
:func:`phase_of` place events (allocations) on the CPU range stack and so in attention.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..attention import patterns as P
from ..attention.tagger import call_numbers
from ..trace.arrays import lexorder, unique_ints
from ..trace.correlate import Links
from ..trace.records import Trace
from ..trace.shapes import SignatureArgs
from .outputs import op_outputs, short_name


class TraceContext:
    """Shared lookups over one analysed trace."""

    def __init__(self, trace: Trace, links: Links, tagging):
        self.t, self.L, self.tag = trace, links, tagging
        R = trace.ranges
        self.R = R
        self.kind = R["kind"]
        self.name_id = R["name"]
        self.sig = R["sig"]
        self.strings = trace.strings
        self._args = SignatureArgs(trace.signatures)
        self._outs: dict[tuple, list] = {}
        self._calls: Optional[dict] = None
        self.maker_memo: dict[tuple, dict] = {}  # (op stack, size, device type) -> maker (makers.py)
        self.end_ns = R["ts_ns"] + R["dur_ns"]

    def name(self, r: int) -> str:
        return self.strings[self.name_id[r]]

    def call(self, instance: int) -> Optional[int]:
        """The report's number of an attention call (the kernels' ``instance``)."""
        if self._calls is None:
            self._calls = call_numbers(self.t, self.tag)
        return self._calls.get(instance) if instance >= 0 else None

    def short(self, r: int) -> str:
        return short_name(self.name(r))

    def args(self, r: int) -> Optional[list]:
        return self._args(int(self.sig[r]))

    def outputs(self, r: int) -> list:
        # an op's outputs depend only on its name and recorded inputs: memoised on those, so
        # the same op in every layer and step is inferred once
        key = (int(self.name_id[r]), int(self.sig[r]))
        o = self._outs.get(key)
        if o is None:
            a = self.args(r)
            nm = self.name(r)
            if a is None:
                # factories recorded without shapes still allocate; nothing to infer
                o = []
            else:
                try:
                    o = op_outputs(nm, a)
                except (IndexError, ValueError, TypeError, ZeroDivisionError):
                    o = []
            self._outs[key] = o
        return o

    def direction(self, r: int) -> str:
        return "backward" if r >= 0 and self.L.backward_root[r] >= 0 else "forward"


def innermost_ranges(trace: Trace, links: Links, threads: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """Per query (thread index, time): the innermost CPU range on that thread containing the
    time (start <= t <= end), or -1."""
    R = trace.ranges
    out = np.full(len(ts_ns), -1, dtype=np.int64)
    if not len(ts_ns) or not len(R["ts_ns"]):
        return out
    r_thread = R["thread"]
    end = R["ts_ns"] + R["dur_ns"]
    parent = links.parent
    for th in unique_ints(threads).tolist():
        q = np.flatnonzero(threads == th)
        rs = np.flatnonzero(r_thread == th)
        if not len(rs):
            continue
        o = rs[lexorder(R["ts_ns"][rs], -R["dur_ns"][rs])]
        st = R["ts_ns"][o]
        t = ts_ns[q]
        pos = np.searchsorted(st, t, side="right") - 1
        cand = np.where(pos >= 0, o[np.maximum(pos, 0)], -1)
        for _ in range(512):
            bad = (cand >= 0) & (end[np.maximum(cand, 0)] < t)
            if not bad.any():
                break
            cand[bad] = parent[cand[bad]]
        out[q] = cand
    return out


def phase_of(tag, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(instance, phase code) of ranges; -1 outside attention; 'other' for unphased ranges."""
    ok = r >= 0
    inst = np.where(ok, tag.range_instance[np.maximum(r, 0)], -1)
    ph = np.where(ok, tag.range_phase[np.maximum(r, 0)], -1).astype(np.int64)
    ph = np.where((inst >= 0) & (ph < 0), P.PHASE_INDEX["other"], ph)
    ph = np.where(inst >= 0, ph, -1)
    return inst, ph


def step_window(trace: Trace, report: dict) -> Optional[tuple]:
    """[start, end] in ns of the analysed step (``--step``), or None for the whole trace."""
    step = report.get("step")
    if not step:
        return None
    want = str(step)
    num = want.split("#")[-1]
    for s in report.get("steps") or []:
        if s["name"] == want or s["name"].split("#")[-1] == num:
            t0 = int(round((s["ts"] - trace.base_us) * 1000.0))
            return (t0, t0 + int(round((s["dur_us"] or 0) * 1000.0)))
    return None
