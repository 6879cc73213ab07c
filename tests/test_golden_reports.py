"""The full report of every sample trace equals its reviewed golden copy (tests/golden/).
Optimisations must leave results unchanged; intended changes rewrite the goldens with
`python tests/golden.py --update` and show up in review as a diff."""

import os

import pytest

import golden


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
                assert g == w, f"kernel {w['id']} ({w['name'][:60]}) differs"
        else:
            assert got[key] == want[key], key
