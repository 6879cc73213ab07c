"""The FLOPs ledger shares each costed call's executed FLOPs among its kernels for many calls at
once (model._share_grouped); the call-by-call loop must give the same ledger, bit for bit."""

from __future__ import annotations

import glob
import json
import os

import pytest

from helpers import recorded_traces
from tb_attention_plugin import model
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.jsonout import iter_trace_body

RUNS = sorted(os.path.dirname(p) for p in recorded_traces(("round3", "twins"), 120_000))[:24]


@pytest.mark.parametrize("run", RUNS, ids=os.path.basename)
def test_grouped_sharing_is_the_loops(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = sorted(glob.glob(os.path.join(run, "*.pt.trace.json.gz")))[0]
    grouped = analyze_path(path)
    monkeypatch.setattr(model, "_share_grouped", lambda flops, dur, entries: entries)
    loop = analyze_path(path)
    assert json.dumps(grouped.get("flops_ledger"), sort_keys=True) == json.dumps(
        loop.get("flops_ledger"), sort_keys=True
    )
    assert b"".join(iter_trace_body(grouped)) == b"".join(iter_trace_body(loop))
