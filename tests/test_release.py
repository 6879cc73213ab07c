"""The analysis releases the trace's columns that no later stage reads (report._LAST_READS): the
reports must be the same as when nothing is released, on every kind of trace the stages treat
differently, and the declared columns must be real ones."""

import glob
import os

import numpy as np
import pytest

from helpers import ROOT, SHARED, needs_shared
from tb_attention_plugin import report
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.options import Options
from tb_attention_plugin.trace.records import TABLES, Trace, load_trace


def _one(pattern: str) -> str:
    hits = sorted(glob.glob(os.path.join(ROOT, pattern)))
    assert hits, pattern
    return hits[0]


# (trace, reference or None): memory events, stacks, fused and eager attention, backward, CUDA-graph
# replay with and without its eager reference, Nsight Compute counters beside the trace, Flex,
# compiled kernels, jagged SDPA, a DDP rank, a CPU-only trace
CASES = [
    ("tests/data/memory/h200/gpt4l_naive_train_mem.pt.trace.json.gz", None),
    ("tests/data/memory/h200/hf_llama_decode_sdpa_mem.pt.trace.json.gz", None),
    ("sample_traces/gpt4l_sdpa_train/*.pt.trace.json*", None),
    ("sample_traces/validation/hf_llama_eager_fwdbwd/*.pt.trace.json*", None),
    ("sample_traces/validation/compiled_naive_fwdbwd/*.pt.trace.json*", None),
    ("tests/data/modern/decode_graph_replay/*.pt.trace.json.gz", None),
    ("tests/data/modern/decode_graph_replay/*.pt.trace.json.gz", "tests/data/modern/decode_graph_eager/*.json.gz"),
    ("tests/data/modern/flex_causal_fwdbwd/*.pt.trace.json.gz", None),
    ("tests/data/measured/decode_gqa_flash.pt.trace.json.gz", None),
    ("tests/data/round3/r3_jagged_fwdbwd/*.pt.trace.json.gz", None),
    ("tests/data/round4/ffn_block_b2_s2048_eager_cudagraph/*.pt.trace.json.gz", None),
    ("tests/data/ddp2/ddp2_gpt_sdpa/rank0.*.pt.trace.json.gz", None),
    ("tests/data/eager_cpu/*.json*", None),
]


def _report(path: str, reference, release: bool, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        if not release:
            m.setattr(Trace, "release", lambda self, keep: None)
        return analyze_path(path, Options(reference=reference, debug=True))


def _with_and_without_release(path: str, reference, monkeypatch) -> tuple[dict, dict]:
    return _report(path, reference, True, monkeypatch), _report(path, reference, False, monkeypatch)


IDS = [c[0].split("/")[-2] + ("+ref" if c[1] else "") for c in CASES]


@pytest.mark.parametrize("pattern,reference", CASES, ids=IDS)
def test_reports_same_with_release(pattern, reference, monkeypatch):
    released, kept = _with_and_without_release(_one(pattern), _one(reference) if reference else None, monkeypatch)
    assert released["status"] == "ok", released.get("error")
    # no stage fell back on its error path (a read of a released column would raise KeyError)
    assert not [w for w in released.get("warnings", []) if "failed" in w]
    assert to_json(released) == to_json(kept)


@needs_shared
@pytest.mark.parametrize("folder", ["hta", "tb_plugin", "kineto"])
def test_public_reports_same_with_release(folder, monkeypatch):
    """Old formats, ROCm, CPU-only, counters: the public corpus (the first few files of each folder)."""
    files = sorted(p for p in glob.glob(os.path.join(SHARED, "public", folder, "**", "*.json*"), recursive=True))
    files = [p for p in files if os.path.getsize(p) < 4_000_000][:6]
    assert files
    for p in files:
        released, kept = _with_and_without_release(p, None, monkeypatch)
        assert to_json(released) == to_json(kept), p


def test_declared_columns_exist():
    """Every column _LAST_READS names is a column of its table: a misspelt name would release the
    column the stage reads."""
    tr = load_trace(_one("tests/data/memory/h200/gpt4l_naive_train_mem.pt.trace.json.gz"))
    assert [s for s, _ in report._LAST_READS][-1] == "advice"
    for stage, reads in report._LAST_READS:
        for table, cols in reads.items():
            assert table in TABLES, (stage, table)
            missing = set(cols.split()) - set(getattr(tr, table))
            assert not missing, (stage, table, missing)


def test_release_drops_what_is_not_kept():
    tr = load_trace(_one("tests/data/memory/h200/gpt4l_naive_train_mem.pt.trace.json.gz"))
    ts = tr.ranges["ts"]
    tr.release({"ranges": {"ts", "kind"}, "gpu": ["dur"]})
    assert sorted(tr.ranges) == ["kind", "ts"] and tr.ranges["ts"] is ts
    assert list(tr.gpu) == ["dur"]
    assert tr.memory == {} and tr.flows == {} and tr.stacks == {}
    with pytest.raises(KeyError):
        tr.ranges["ts_ns"]
    assert isinstance(tr.gpu["dur"], np.ndarray)
