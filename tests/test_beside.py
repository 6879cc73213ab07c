"""The memory and replay blocks made beside the analysis, in a forked child (beside.py): the
report must be the one made in a single process, warnings in their places, and a child that fails
or dies must cost nothing but time."""

import glob
import os
import shutil

import pytest

from helpers import ROOT
from tb_attention_plugin import beside, report
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.options import Options
from tb_attention_plugin.trace import parallel

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

MEMORY_TRACE = os.path.join(ROOT, "tests/data/memory/h200/gpt4l_naive_train_mem.pt.trace.json.gz")
FORKED = Options(read_jobs=2, parallel_min_bytes=0, debug=True)  # a child beside every trace
SERIAL = Options(read_jobs=1, debug=True)


@pytest.fixture(autouse=True)
def _no_foreign_threads(monkeypatch):
    """Other tests' threads (servers, samplers) would stop the fork: they are not the subject."""
    monkeypatch.setattr(parallel, "_only_fork_safe_threads", lambda: True)


def _pid(_: int) -> int:
    return os.getpid()


def _raise(_: int) -> int:
    raise RuntimeError("boom")


def _die(_: int) -> int:
    os._exit(3)


def test_the_value_comes_from_another_process():
    child = beside.start(_pid, 0)
    assert child is not None
    assert child.result() not in (None, os.getpid())


@pytest.mark.parametrize("fn", [_raise, _die], ids=["raises", "dies"])
def test_a_failed_child_gives_none(fn):
    child = beside.start(fn, 0)
    assert child is not None and child.result() is None


def test_worth_forking_follows_the_parallel_readers_rule(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + b" " * 1000 + b"]")
    assert beside.worth_forking(str(p), jobs=2, min_bytes=0)
    assert not beside.worth_forking(str(p), jobs=2, min_bytes=1003)
    assert not beside.worth_forking(str(p), jobs=1, min_bytes=0)
    assert not beside.worth_forking(str(p), jobs=2) and parallel.MIN_PARALLEL_BYTES == 48 << 20
    assert not beside.worth_forking(None, jobs=2, min_bytes=0)  # a trace not read from a file


def _forks(monkeypatch) -> list[int]:
    """Count the children analyze_trace starts."""
    started: list[int] = []
    real = beside.start

    def counting(fn, *args):
        started.append(1)
        return real(fn, *args)

    monkeypatch.setattr(beside, "start", counting)
    return started


@pytest.mark.parametrize(
    "pattern",
    [
        "tests/data/memory/h200/gpt4l_naive_train_mem.pt.trace.json.gz",  # memory events, stacks
        "tests/data/memory/h200/hf_llama_decode_sdpa_mem.pt.trace.json.gz",
        "tests/data/modern/flex_causal_fwdbwd/*.pt.trace.json.gz",
        "tests/data/modern/decode_graph_replay/*.pt.trace.json.gz",  # CUDA-graph replays
        "tests/data/ddp2/ddp2_gpt_sdpa/rank0.*.pt.trace.json.gz",
        "tests/data/eager_cpu/*.json*",  # no GPU
    ],
)
def test_same_report_with_the_child(pattern, monkeypatch):
    hits = sorted(glob.glob(os.path.join(ROOT, pattern)))
    assert hits, pattern
    started = _forks(monkeypatch)
    forked = analyze_path(hits[0], FORKED)
    assert started, "no child was started"
    assert to_json(forked) == to_json(analyze_path(hits[0], SERIAL))


def test_warnings_keep_their_places(tmp_path, monkeypatch):
    """The memory block's warning before the model's, the replay file's after it, as in one process."""
    trace = tmp_path / os.path.basename(MEMORY_TRACE)
    shutil.copyfile(MEMORY_TRACE, trace)
    (tmp_path / (trace.name + ".replay.json")).write_text("{not json")

    def broken(*_a, **_k):
        raise RuntimeError("memory broke")

    def broken_model(*_a, **_k):
        raise RuntimeError("model broke")

    import tb_attention_plugin.memory as memory
    import tb_attention_plugin.model as model

    monkeypatch.setattr(memory, "memory_report", broken)
    monkeypatch.setattr(model, "build", broken_model)
    started = _forks(monkeypatch)
    forked = analyze_path(str(trace), FORKED)
    serial = analyze_path(str(trace), SERIAL)
    assert started
    assert forked["warnings"] == serial["warnings"]
    mine = [w for w in serial["warnings"] if "broke" in w or w.startswith("replay:")]
    assert [w.split(":")[0] for w in mine] == ["memory analysis failed", "sites and FLOPs ledger failed", "replay"]
    assert to_json(forked) == to_json(serial)


def test_a_child_that_dies_is_redone_here(monkeypatch):
    parent = os.getpid()
    real = report._memory_and_replay

    def dies_in_the_child(*args):
        if os.getpid() != parent:
            os._exit(9)
        return real(*args)

    monkeypatch.setattr(report, "_memory_and_replay", dies_in_the_child)
    started = _forks(monkeypatch)
    forked = analyze_path(MEMORY_TRACE, FORKED)
    assert started
    assert to_json(forked) == to_json(analyze_path(MEMORY_TRACE, SERIAL))
