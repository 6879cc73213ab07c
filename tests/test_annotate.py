"""tb-attention annotate: a copy of the trace, every original event kept byte for byte, plus
attention calls and phases as their own timeline tracks."""

import gzip
import hashlib
import json
import os

import pytest

from helpers import sample
from synth import SynthTrace, naive_attention
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.annotate import (
    CALL_CAT,
    PHASE_CAT,
    PID_BASE,
    AnnotateError,
    annotate_file,
    annotated_name,
    locate,
)
from tb_attention_plugin.cli import main


def raw_bytes(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def events_hash(events):
    h = hashlib.sha256()
    for e in events:
        h.update(json.dumps(e, sort_keys=True).encode())
    return h.hexdigest()


def check_annotated(src, dst):
    """The copy is valid JSON, keeps every original event and key, and adds well-formed tracks."""
    a, b = raw_bytes(src), raw_bytes(dst)
    orig, new = json.loads(a), json.loads(b)
    n = len(orig["traceEvents"])
    assert len(new["traceEvents"]) > n
    assert events_hash(new["traceEvents"][:n]) == events_hash(orig["traceEvents"])
    assert {k: v for k, v in new.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}
    # byte for byte: the original stream with one insertion before the ']' of traceEvents
    close_at, entries, _ = locate(src)
    assert entries == n and a[close_at : close_at + 1] == b"]"
    inserted = len(b) - len(a)
    assert b[:close_at] == a[:close_at] and b[close_at + inserted :] == a[close_at:]
    added = new["traceEvents"][n:]
    orig_pids = {e.get("pid") for e in orig["traceEvents"]}
    assert all(e["pid"] not in orig_pids and e["pid"] >= PID_BASE for e in added)
    # Trace Event Format: integer pid/tid, numeric ts/dur, named tracks; complete events on one
    # track nest properly (chrome://tracing draws overlapping siblings wrongly)
    tracks: dict = {}
    for e in added:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["ph"] in ("X", "M")
        if e["ph"] == "M":
            assert (
                e["name"]
                in ("process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index")
                and "args" in e
            )
            continue
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        t0, d = round(e["ts"] * 1000), round(e["dur"] * 1000)  # integer ns, as viewers read them
        tracks.setdefault((e["pid"], e["tid"]), []).append((t0, -d, t0 + d))
    named = {(e["pid"], e["tid"]) for e in added if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks) <= named
    for spans_ in tracks.values():
        stack = []
        for t0, _, t1 in sorted(spans_):
            while stack and stack[-1] <= t0:
                stack.pop()
            assert not stack or t1 <= stack[-1], "overlapping slices on one track"
            stack.append(t1)
    return orig, added


def spans(added, cat):
    return [e for e in added if e.get("ph") == "X" and e.get("cat") == cat]


def test_annotate_naive_h200_trace(tmp_path):
    src = sample("naive_bf16_s2048_fwd")
    dst = str(tmp_path / "out.pt.trace.json.gz")
    assert main(["annotate", src, "-o", dst, "--no-cache"]) == 0
    with open(dst, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"  # .gz -> gzip
    orig, added = check_annotated(src, dst)
    meta = [e for e in added if e["ph"] == "M"]
    assert {"process_name", "thread_name", "process_sort_index"} <= {e["name"] for e in meta}
    thread = next(e for e in meta if e["name"] == "thread_name")
    assert thread["args"]["name"] == "Attention phases (GPU 0, stream 7)" and thread["tid"] == 7
    phases = spans(added, PHASE_CAT)
    calls = spans(added, CALL_CAT)
    rep = analyze_path(src)
    att = [k for k in rep["kernels"] if k["attention"]]
    # every attention kernel is in exactly one phase span; the names follow the phase labels
    assert sum(p["args"]["kernels"] for p in phases) == len(att)
    names = {p["name"] for p in phases}
    assert {"QK^T matmul", "softmax", "PV matmul", "dropout", "mask", "scale"} <= names
    for p in phases:
        a = p["args"]
        for key in ("bound", "memory_util", "compute_util", "flops", "bytes", "direction", "kernels", "gpu_time_us"):
            assert key in a
        assert a["bound"] in ("memory", "compute", "latency", "unknown") and p["dur"] >= 0
    # phase spans nest inside their call span on the same track
    for p in phases:
        c = [
            c
            for c in calls
            if c["tid"] == p["tid"]
            and c["args"]["instance"] == p["args"]["instance"]
            and round(c["ts"] * 1000) <= round(p["ts"] * 1000)
            and round(p["ts"] * 1000) + round(p["dur"] * 1000) <= round(c["ts"] * 1000) + round(c["dur"] * 1000)
        ]
        assert len(c) == 1
    # the GPU time in the spans is the attention GPU time of the report
    assert sum(p["args"]["gpu_time_us"] for p in phases) == pytest.approx(rep["attention_time_us"], abs=0.01)
    # runs: consecutive kernels of the same phase merge; per-kernel mode gives one span each
    dst2 = str(tmp_path / "per_kernel.json")
    assert main(["annotate", src, "-o", dst2, "--per-kernel", "--no-cache"]) == 0
    _, added2 = check_annotated(src, dst2)
    assert len(spans(added2, PHASE_CAT)) == len(att) >= len(phases)


def test_annotated_trace_analyses_the_same(tmp_path):
    src = sample("gpt4l_sdpa_train")
    dst = str(tmp_path / "gpt.json")
    st = annotate_file(src, dst, analyze=analyze_path)
    assert st["phase_spans"] > 0 and st["call_spans"] > 0
    orig, added = check_annotated(src, dst)
    # forward and backward both get their spans
    assert {p["args"]["direction"] for p in spans(added, PHASE_CAT)} == {"forward", "backward"}
    a, b = analyze_path(src), analyze_path(dst)
    for key in ("attention_time_us", "phases", "gpu_time_us", "instances"):
        assert a[key] == b[key]
    assert list(a["kernels"]) == list(b["kernels"])


def test_annotate_plain_json_and_bare_list(tmp_path):
    t = SynthTrace()
    with t.step(1):
        naive_attention(t)
    src = t.write(tmp_path / "t.json")
    dst = str(tmp_path / "t.annotated.json")
    annotate_file(src, dst, analyze=analyze_path)
    with open(dst, "rb") as f:
        assert f.read(1) == b"{"
    check_annotated(src, dst)
    # a bare list of events (no enclosing object)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(t.events))
    dst = str(tmp_path / "bare.out.json")
    annotate_file(str(bare), dst, analyze=analyze_path)
    new = json.loads(open(dst).read())
    assert new[: len(t.events)] == t.events and len(new) > len(t.events)


def test_annotate_refuses_bad_inputs(tmp_path, capsys):
    t = SynthTrace()
    naive_attention(t)
    src = t.write(tmp_path / "t.json")
    with pytest.raises(AnnotateError):
        annotate_file(src, src, analyze=analyze_path)
    cut = tmp_path / "cut.json"
    cut.write_bytes(open(src, "rb").read()[:-200])
    code = main(["annotate", str(cut), "-o", str(tmp_path / "o.json"), "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "o.json")
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_annotated_name():
    assert annotated_name("w.123.pt.trace.json.gz") == "w.123.attention.pt.trace.json.gz"
    assert annotated_name("trace.json") == "trace.attention.json"
