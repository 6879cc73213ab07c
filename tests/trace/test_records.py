import json

import numpy as np
import pytest

from helpers import sample
from synth import SynthTrace, naive_attention
from tb_attention_plugin.trace.records import KERNEL, LAUNCH, MEMCPY, MODULE, OP, PYFUNC, load_trace
from tb_attention_plugin.trace.shapes import parse_args


def test_kinds_columns_and_interning(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    with t.function("transformers/models/llama/modeling_llama.py(100): apply_rotary_pos_emb"):
        pass
    with t.function("torch/nn/modules/module.py(1751): _call_impl"):
        pass
    tr = load_trace(t.write(tmp_path / "a.json"))
    kinds = tr.ranges["kind"]
    assert (kinds == MODULE).sum() == 1
    assert (kinds == PYFUNC).sum() == 1  # the rotary frame is kept, _call_impl is dropped
    assert tr.stats["python_dropped"] == 1
    assert (kinds == LAUNCH).sum() == (tr.gpu["kind"] == KERNEL).sum() == 8
    ops = np.flatnonzero(kinds == OP)
    assert (tr.ranges["sig"][ops] >= 0).all()
    names = {tr.strings[i] for i in tr.ranges["name"][ops]}
    assert {"aten::bmm", "aten::_softmax", "aten::native_dropout"} <= names
    # ns columns are exact integers after the earliest timestamp
    assert tr.ranges["ts_ns"].min() >= 0 and tr.ranges["ts_ns"].dtype == np.int64


def test_signature_parsing(tmp_path):
    t = SynthTrace()
    with t.op("aten::cat", dims=[[[4, 16, 8], [4, 16, 8]], []], types=["TensorList", "Scalar"], concrete=["", "0"]):
        pass
    with t.op("aten::where", dims=[[8, 8], [], []], types=["bool", "Scalar", "float"], concrete=["", "0.", ""]):
        pass
    tr = load_trace(t.write(tmp_path / "a.json"))
    sigs = [parse_args(s) for s in tr.signatures]
    cat = sigs[0]
    assert cat[0].shapes == ((4, 16, 8), (4, 16, 8)) and not cat[0].is_tensor
    where = sigs[1]
    assert where[0].shape == (8, 8) and where[0].dtype == "bool"
    assert not where[1].is_tensor and where[1].value == "0."
    assert where[2].shape == () and where[2].numel == 1  # a 0-dim tensor


def test_legacy_pytorch_19_schema(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::mm",
            "pid": 1,
            "tid": "1",
            "ts": 100,
            "dur": 50,
            "args": {"external id": 7, "Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"]},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": "1",
            "ts": 110,
            "dur": 5,
            "args": {"correlation": 9, "external id": 7},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "sgemm",
            "pid": 0,
            "tid": "stream 7",
            "ts": 120,
            "dur": 10,
            "args": {"device": 0, "stream": 7, "correlation": 9, "external id": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 140,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": 10, "bytes": 640},
        },
    ]
    p = tmp_path / "old.json"
    p.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "computeProperties": [{"id": 0, "name": "Tesla V100-DGXS-32GB"}],
                "traceEvents": events,
            }
        )
    )
    tr = load_trace(str(p))
    assert list(tr.gpu["kind"]) == [KERNEL, MEMCPY]
    assert tr.gpu["ext"][0] == 7 and tr.gpu["bytes"][1] == 640
    assert tr.ranges["ext"][0] == 7
    assert "Operator" in tr.stats["categories"]


def test_int64_ids_and_out_of_range_ints(tmp_path):
    big = (1 << 63) - 5
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"External id": big}},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "b",
            "pid": 1,
            "tid": 1,
            "ts": 3,
            "dur": 1,
            "args": {"External id": 10159970886766084423},
        },
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    tr = load_trace(str(p))
    assert tr.ranges["ext"][0] == big
    assert tr.ranges["ext"][1] == -1  # beyond int64: unknown, not a crash


def test_epoch_microsecond_timestamps_keep_precision(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1695835542515301 + i, "dur": 0.5}
        for i in range(3)
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    tr = load_trace(str(p))
    assert list(tr.ranges["ts_ns"]) == [0, 1000, 2000]
    assert list(tr.ranges["dur_ns"]) == [500] * 3


def test_truncated_trace_is_salvaged_with_a_warning(tmp_path):
    t = SynthTrace()
    for _ in range(20):
        naive_attention(t)
    text = json.dumps(t.doc(), indent=1)
    p = tmp_path / "t.json"
    p.write_text(text[: len(text) // 2])
    tr = load_trace(str(p))
    assert tr.n_gpu > 0
    assert any("truncated" in w for w in tr.warnings)


def _tables(tr):
    out = {}
    for name in ("ranges", "gpu", "flows", "memory", "gpu_annotations", "stacks"):
        for k, v in getattr(tr, name).items():
            out[f"{name}.{k}"] = (v.dtype.str, v.tobytes())
    st = dict(tr.stats)
    return out, tr.strings, [(s.dims, s.types, s.strides, s.concrete) for s in tr.signatures], tr.threads, st


@pytest.mark.parametrize("run", ["gpt4l_sdpa_train", "gpt4l_naive_train"])
def test_tagged_fast_path_gives_what_the_general_path_gives(run, monkeypatch):
    """The per-kind decode (events.py TAGGED_KINDS) and the general Event decode build the same
    Trace: same rows in the same order, strings, signatures, threads and stats."""
    from tb_attention_plugin.trace import reader

    seen = []
    orig = reader.decode_events

    def spy(chunk, stats, framed=False, tagged=False):
        evs = orig(chunk, stats, framed, tagged)
        seen.append(type(evs[0]).__name__ if evs else None)
        return evs

    monkeypatch.setattr(reader, "decode_events", spy)
    fast = load_trace(sample(run), jobs=1)
    # only the chunks holding the metadata events (no ``cat``) at the ends take the general path
    assert seen.count("Event") <= 3 < len(seen), seen
    monkeypatch.setattr(reader, "decode_events", lambda c, s, framed=False, tagged=False: orig(c, s, framed))
    general = load_trace(sample(run), jobs=1)
    assert _tables(fast) == _tables(general)
    assert fast.thread_names == general.thread_names and fast.warnings == general.warnings


def test_an_unknown_category_sends_its_chunk_down_the_general_path(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    p = t.write(tmp_path / "a.json")
    doc = json.loads(open(p).read())
    doc["traceEvents"].insert(
        3, {"ph": "X", "cat": "something_new", "name": "x", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    )
    q = tmp_path / "b.json"
    q.write_text(json.dumps(doc))
    a, b = load_trace(str(p)), load_trace(str(q))
    assert b.stats["other"] == a.stats["other"] + 1 and "something_new" in b.stats["categories"]
    assert (a.ranges["ts_ns"] == b.ranges["ts_ns"]).all() and a.n_gpu == b.n_gpu


def test_the_collector_is_paused_only_while_reading(tmp_path):
    import gc

    t = SynthTrace()
    naive_attention(t)
    p = t.write(tmp_path / "a.json")
    assert gc.isenabled()
    load_trace(str(p))
    assert gc.isenabled()
    gc.disable()
    try:
        load_trace(str(p))
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("tagged", [True, False])
def test_counter_ranges_are_read_whole_on_both_paths(tmp_path, monkeypatch, tagged):
    """CUPTI counter ranges keep their args (add_raw) whichever decoder took their chunk; a chunk
    that only names the category (a kernel called so) gives no counter."""
    from tb_attention_plugin.trace import reader

    t = SynthTrace()
    naive_attention(t)
    t.counter_range("k0", {"dram__bytes_read.sum": 1024, "sm__cycles_elapsed.avg": 7.5})
    t.counter_range("k1", {"dram__bytes_read.sum": 2048})
    p = t.write(tmp_path / "a.json")
    doc = json.loads(open(p).read())
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": '"cuda_profiler_range"',
            "pid": 0,
            "tid": 7,
            "ts": 10.0,
            "dur": 1.0,
            "args": {"device": 0, "stream": 7},
        }
    )
    only_name = tmp_path / "b.json"
    only_name.write_text(json.dumps({"traceEvents": doc["traceEvents"][-1:]}))
    if not tagged:
        orig = reader.decode_events
        monkeypatch.setattr(reader, "decode_events", lambda c, s, framed=False, tagged=False: orig(c, s, framed))
    tr = load_trace(str(p), jobs=1)
    assert [(c["name"], c["metrics"]) for c in tr.counters] == [
        ("k0", {"dram__bytes_read.sum": 1024, "sm__cycles_elapsed.avg": 7.5}),
        ("k1", {"dram__bytes_read.sum": 2048}),
    ]
    assert load_trace(str(only_name), jobs=1).counters == []
