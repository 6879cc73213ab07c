"""The full report of every sample trace equals its reviewed golden copy (tests/golden/).
Optimisations must leave results unchanged; intended changes rewrite the goldens with
`python tests/golden.py --update` and show up in review as a diff.

Floats are compared to 1e-9 relative: numpy releases change the order of their summations (2.4
moved some figures by one unit in the last place), which is not a change of result."""

import math
import os

import pytest

import golden

REL_TOL = 1e-9


def same(got, want) -> bool:
    """Equal structure and values; floats equal to REL_TOL (ints and bools exactly)."""
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(want, bool) or got is None or want is None:
            return got == want
        if isinstance(got, str) or isinstance(want, str):
            return got == want
        return math.isclose(got, want, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    return got == want


def test_same_is_strict_beyond_rounding():
    assert same({"a": [1.0, 104899999.99999999]}, {"a": [1.0, 104900000.00000001]})
    assert not same({"a": 1.0}, {"a": 1.001})
    assert not same({"a": 1}, {"a": 2})
    assert not same({"a": [1.0]}, {"a": [1.0, 2.0]})
    assert not same({"a": None}, {"a": 0.0})


@pytest.mark.parametrize("run", golden.runs())
def test_report_matches_golden(run):
    assert os.path.exists(golden.path(run)), f"no golden for {run}: run python tests/golden.py --update"
    want = golden.load(run)
    got = golden.current(run)
    assert set(got) == set(want)
    for key in want:
        if key == "kernels":
            assert len(got["kernels"]) == len(want["kernels"])
            for g, w in zip(got["kernels"], want["kernels"]):
                assert same(g, w), f"kernel {w['id']} ({w['name'][:60]}) differs: " + ", ".join(
                    f"{k}: {g.get(k)!r} != {w.get(k)!r}" for k in w if not same(g.get(k), w.get(k))
                )
        else:
            assert same(got[key], want[key]), key
