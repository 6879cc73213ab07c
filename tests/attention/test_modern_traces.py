"""Tagging precision and recall by time on our own H200 traces of attention as run in late 2026
(tests/data/modern, tests/data/ddp2; recorded with validation/run_device_modern.sh), against the
module truth of validation/tagging_accuracy.py. Issue #12 asks for >= 0.95 on every one (CUDA-graph
replay with --reference)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "validation"))

import tagging_accuracy as TA  # noqa: E402


@pytest.mark.parametrize("name,trace,reference,truth", TA.CASES, ids=[c[0] for c in TA.CASES])
def test_precision_and_recall_by_time(name, trace, reference, truth):
    try:
        paths = [TA.trace_file(x) if x else None for x in (trace, reference, truth)]
    except FileNotFoundError:
        pytest.skip("trace not present")
    m = TA.measure(*paths)
    assert m["attention_us"] > 0
    assert m["precision"] >= 0.95 and m["recall"] >= 0.95, m
