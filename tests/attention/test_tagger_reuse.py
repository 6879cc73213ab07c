"""tag() reads the phases of an instance whose subtree repeats one already read (every step of a
training trace) from that one; reading each instance anew must give the same tagging."""

from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import recorded_traces
from tb_attention_plugin.attention import tagger
from tb_attention_plugin.trace.correlate import link
from tb_attention_plugin.trace.records import load_trace

TRACES = recorded_traces(("twins", "round3", "modern"), 250_000)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_reused_phases_are_the_phases(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = load_trace(path)
    links = link(trace)
    reused = tagger.tag(trace, links)
    monkeypatch.setattr(tagger, "_REUSE", False)
    fresh = tagger.tag(trace, links)
    for k, v in vars(fresh).items():
        if isinstance(v, np.ndarray):
            assert v.tobytes() == getattr(reused, k).tobytes(), k
        elif k != "graph":
            assert v == getattr(reused, k), k


def test_instances_do_repeat() -> None:
    """Some of these traces have repeated instances (several steps or layers): the reuse is used."""
    repeats = 0
    for p in TRACES:
        trace = load_trace(p)
        links = link(trace)
        t = tagger.tag(trace, links)
        keys = set()
        scoped = [r for r in t.instances if 0 <= r < trace.n_ranges]  # (ids past the ranges: by kernel name)
        for root in scoped:
            sub = links.subtree(root)
            keys.add((trace.ranges["name"][sub].tobytes(), trace.ranges["sig"][sub].tobytes()))
        repeats += len(scoped) - len(keys)
    assert repeats >= 20


def test_same_ops_other_shapes_are_not_reused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attention modules with the same ops, nesting and names, whose first 2-D mm is QKᵀ in
    one (a square [S, S] from a thin inner dim) and a projection in the other: their recorded
    inputs tell them apart, so the second one's phases are not the first one's."""
    from tests.synth import SynthTrace

    t = SynthTrace()
    bf = ["c10::BFloat16"] * 2
    for second in ([64, 128], [64, 32]):
        with t.module("SelfAttention_0"):  # the same module called twice
            with t.op("aten::mm", dims=[[128, 64], second], types=bf):
                t.kernel("gemm_a", dur=10)
            with t.op("aten::softmax", dims=[[128, second[1]]], types=bf[:1]):
                t.kernel("softmax_kernel", dur=5)
            with t.op("aten::matmul", dims=[[128, second[1]], [second[1], 64]], types=bf):
                t.kernel("gemm_b", dur=10)
    trace = load_trace(t.write(tmp_path / "two.json"))
    links = link(trace)
    reused = tagger.tag(trace, links)
    monkeypatch.setattr(tagger, "_REUSE", False)
    fresh = tagger.tag(trace, links)
    assert reused.gpu_phase.tolist() == fresh.gpu_phase.tolist()
    first = [reused.phase_name(int(c)) for c in reused.gpu_phase[[0, 3]]]
    assert first[0] != first[1], first  # QKᵀ in one, a projection in the other
