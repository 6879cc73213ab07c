"""Links.outermost_marked (the outermost marked range around each range, from the preorder: the
tagger, the advice's SDPA calls, busy time) must be correlate.outermost_marked's answer (the walk
up the parents), on nested marks of every kind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import recorded_traces
from tb_attention_plugin.trace.correlate import link, outermost_marked
from tb_attention_plugin.trace.records import OP, load_trace

TRACES = recorded_traces(("twins", "round3", "modern"), 150_000)[::3]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_outermost_is_outermost_marked(path: str) -> None:
    trace = load_trace(path)
    links = link(trace)
    rng = np.random.default_rng(len(path))
    n = trace.n_ranges
    masks = [
        trace.ranges["kind"] == OP,  # ops inside ops: nested marks everywhere
        rng.random(n) < 0.05,
        rng.random(n) < 0.5,
        np.zeros(n, dtype=bool),
        np.ones(n, dtype=bool),
    ]
    for m in masks:
        assert links.outermost_marked(m).tolist() == outermost_marked(links.parent, m).tolist()
