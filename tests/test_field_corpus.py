"""The field corpus (validation/field): every trace other people published analyses as an expert
reads it. The traces are not in the repository; tests skip where the corpus is absent."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "validation", "field"))

import field_corpus as C  # noqa: E402

ENTRIES = C.entries() if os.path.exists(os.path.join(C.HERE, "corpus.json")) else []
# Disagreements not yet fixed in the engine, kept visible: a strict xfail fails the day it passes.
KNOWN: dict[str, str] = {}


def test_every_entry_has_its_sources_and_an_expectation():
    assert len(ENTRIES) >= 30
    assert len({e["repository"] for e in ENTRIES}) >= 6
    for e in ENTRIES:
        assert e["files"] and e["repository"] and e["licence"] and e["path"], e["id"]
        exp = C.expectation(e["id"])
        assert exp["id"] == e["id"] and "has_attention" in exp and "expert_note" in exp


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(e, marks=[pytest.mark.xfail(strict=True, reason=KNOWN[e["id"]])] if e["id"] in KNOWN else [])
        for e in ENTRIES
    ],
    ids=[e["id"] for e in ENTRIES],
)
def test_field_trace_reads_as_an_expert_reads_it(entry):
    where = C.locate(entry)
    if where is None:
        pytest.skip("the field corpus is not on this machine")
    rep = C.analyze(entry, where)
    assert C.check(C.expectation(entry["id"]), rep, C.launches(where.trace)) == []
