"""Reading with two processes gives the same analysis as reading serially."""
import json

import pytest

from helpers import sample
from synth import SynthTrace, mlp_and_loss, naive_attention
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.report import analyze_trace
from tb_attention_plugin.trace import parallel, reader
from tb_attention_plugin.trace.records import load_trace


@pytest.fixture
def force_parallel(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(reader, "CHUNK_TARGET", 4096)      # many chunks, both processes busy
    monkeypatch.setenv("TB_ATTENTION_JOBS", "2")


def _report(path):
    rep = json.loads(to_json(analyze_trace(load_trace(path))))
    rep.pop("path")
    return rep


@pytest.mark.parametrize("run", ["gpt4l_sdpa_train", "naive_bf16_s2048_fwd", "seed_mha"])
def test_parallel_equals_serial(run, force_parallel, monkeypatch):
    path = sample(run)
    tr = load_trace(path)
    assert tr.stats.get("parallel") is True
    par = json.loads(to_json(analyze_trace(tr)))
    monkeypatch.setenv("TB_ATTENTION_JOBS", "1")
    ser = json.loads(to_json(analyze_trace(load_trace(path))))
    assert load_trace(path).stats.get("parallel") is None
    par.pop("trace"), ser.pop("trace")
    assert par == ser


def test_single_line_file_falls_back_to_serial(tmp_path, force_parallel):
    t = SynthTrace()
    for _ in range(30):
        naive_attention(t)
    mlp_and_loss(t)
    p = tmp_path / "one_line.json"
    p.write_text(json.dumps(t.doc(), separators=(",", ":")))      # no line breaks at all
    tr = load_trace(str(p))
    assert tr.stats.get("parallel") is None and tr.n_gpu == 30 * 8 + 3


def test_truncated_file_in_parallel_is_salvaged(tmp_path, force_parallel):
    t = SynthTrace()
    for _ in range(40):
        naive_attention(t)
    text = json.dumps(t.doc(), indent=1)
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) * 3 // 4])
    tr = load_trace(str(p))
    assert tr.stats.get("truncated") and 0 < tr.n_gpu < 40 * 8
    assert any("truncated" in w for w in tr.warnings)
