"""attribute() costs owners that repeat (same cost, same kernels: every step of a training trace)
as one group with array operations; owner by owner must give the same numbers to the last bit."""

from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import recorded_traces
from tb_attention_plugin.roofline import attribute as A
from tb_attention_plugin.trace.correlate import link
from tb_attention_plugin.trace.records import load_trace

# H200 traces with multi-kernel owners of many kinds (split-KV and cuDNN attention, GEMMs with
# split-K reductions, sorts, eager/SDPA/flex/jagged, forward and backward), small enough to run fast
TRACES = recorded_traces(("twins", "round3", "modern"), 250_000)


def _fields(a: A.Attribution) -> dict:
    return {k: v for k, v in vars(a).items() if k != "costs"}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_grouped_owners_cost_like_single_ones(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = load_trace(path)
    links = link(trace)
    grouped = A.attribute(trace, links)
    monkeypatch.setattr(A, "_BATCH", False)
    single = A.attribute(trace, links)
    for k, v in _fields(single).items():
        assert np.array_equal(v, _fields(grouped)[k], equal_nan=True), k
        assert v.tobytes() == _fields(grouped)[k].tobytes(), k  # the same bits, -0.0 and NaN included
    assert single.costs == grouped.costs
    assert list(single.costs) == list(grouped.costs)


def test_groups_are_exercised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The traces above do reach the grouped path, with several kernels per owner and role tables."""
    seen: list[tuple[int, int]] = []
    real = A._owners_at_once

    def spy(out, c, kroles, knames, ks, grid, dur):
        seen.append(ks.shape)
        return real(out, c, kroles, knames, ks, grid, dur)

    monkeypatch.setattr(A, "_owners_at_once", spy)
    for p in TRACES:
        trace = load_trace(p)
        A.attribute(trace, link(trace))
    assert len(seen) >= 10
    assert max(m for _, m in seen) >= 3 and max(k for k, _ in seen) >= 5


def test_rowsum_is_numpys_sum_below_eight() -> None:
    rng = np.random.default_rng(3)
    for m in range(1, A._BATCH_MAX):
        d = rng.exponential(10.0, (200, m)) * rng.choice([1e-3, 1.0, 1e3], (200, m))
        assert A._rowsum(d).tolist() == [float(r.sum()) for r in d]


@pytest.mark.parametrize("path", TRACES[::4], ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_owners_at_once_are_the_walks(path: str) -> None:
    """_Owners.owners_of (ops with a cost found with array operations) gives each op's owner and
    cost as owner() finds them one by one."""
    trace = load_trace(path)
    links = link(trace)
    ops = np.unique(links.gpu_op[links.gpu_op >= 0])
    at_once, walked = A._Owners(trace, links), A._Owners(trace, links)
    got = at_once.owners_of(ops).tolist()
    assert got == [walked.owner(int(r)) for r in ops.tolist()]
    assert [at_once.cost_of(o) for o in got if o >= 0] == [walked.cost_of(o) for o in got if o >= 0]


def test_the_owner_walks_meet_ops_that_own_their_kernels() -> None:
    """The traces above include ops that own their kernels (not only graph replays, whose launches no
    op with a cost owns), so the comparison covers that case too."""
    owning = 0
    for path in TRACES[::4]:
        trace = load_trace(path)
        links = link(trace)
        ops = np.unique(links.gpu_op[links.gpu_op >= 0])
        got = A._Owners(trace, links).owners_of(ops).tolist()
        owning += sum(o == r for o, r in zip(got, ops.tolist()))
    assert owning > 0
