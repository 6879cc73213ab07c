"""A trace being analysed reports its stage and the bytes read so far in /status and /runs,
in thread mode and from a worker process."""

from __future__ import annotations

import gzip
import os
import sys
import threading

from conftest import sample_file, wait_for
from tb_attention_plugin import progress
from tb_attention_plugin.options import Options
from tb_attention_plugin.server.worker import WorkerProcess
from tb_attention_plugin.trace import reader

KEYS = {"stage", "bytes_read", "bytes_total", "fraction", "basis"}


def _plain(logdir, run="big", sample="gpt4l_sdpa_train") -> str:
    d = logdir / run
    d.mkdir()
    p = d / "w.1.pt.trace.json"
    with gzip.open(sample_file(sample), "rb") as f:
        p.write_bytes(f.read())
    return str(p)


def _loading(s) -> list:
    return s.get("/status").json["loading"]


def test_a_loading_trace_reports_bytes_read_thread_mode(logdir, served, monkeypatch):
    path = _plain(logdir)
    size = os.path.getsize(path)
    monkeypatch.setattr(reader, "BLOCK", 64 << 10)
    monkeypatch.setattr(progress, "REPORT_BYTES", 64 << 10)
    gate = threading.Event()
    read = reader.ByteSource.read

    def slow_read(self):  # the read stops a few blocks in until the test has looked
        out = read(self)
        if self.total >= 4 * (64 << 10):
            gate.wait(30)
        return out

    monkeypatch.setattr(reader.ByteSource, "read", slow_read)
    s = served()
    try:
        st = wait_for(lambda: [x for x in _loading(s) if x["progress"]["bytes_read"]], what="bytes read")
        p = st[0]["progress"]
        assert set(p) == KEYS and p["stage"] == "reading" and p["basis"] == "file"
        assert p["bytes_total"] == size and 0 < p["bytes_read"] < size
        assert p["fraction"] == round(p["bytes_read"] / size, 4) and 0 < p["fraction"] < 1
        f = s.runs()["runs"][0]["files"][0]
        assert f["state"] == "loading" and set(f["progress"]) == KEYS and f["progress"]["stage"] == "reading"
        assert f["progress"]["bytes_read"] >= p["bytes_read"]
    finally:
        gate.set()
    d = s.settled(1)
    f = d["runs"][0]["files"][0]
    assert f["state"] == "ready" and "progress" not in f
    assert _loading(s) == []


FAKE_WORKER = r"""
import os, pickle, struct, sys, time
from tb_attention_plugin import progress
from tb_attention_plugin.settings import PROGRESS_FD
rec = progress.from_fd(os.environ.get(PROGRESS_FD))
inp = sys.stdin.buffer
(n,) = struct.unpack("<Q", inp.read(8))
args = pickle.loads(inp.read(n))
with progress.active(rec):
    progress.begin_read(args[0])
    rec.add(1234)
    progress.stage("analysing")
    open(sys.argv[1], "w").close()
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
blob = pickle.dumps({"status": "error", "error": "fake worker done", "truncated": False, "seconds": 0.1})
sys.stdout.buffer.write(struct.pack("<Q", len(blob)) + blob)
sys.stdout.buffer.flush()
"""


def test_a_worker_process_reports_to_tensorboard(logdir, served, tmp_path):
    d = logdir / "gz"
    d.mkdir()
    path = d / "w.1.pt.trace.json.gz"
    path.write_bytes(open(sample_file("gpt4l_sdpa_train"), "rb").read())
    started, go = tmp_path / "started", tmp_path / "go"
    s = served(mode="process", worker_cmd=[sys.executable, "-c", FAKE_WORKER, str(started), str(go)])
    try:
        wait_for(started.exists, what="the worker to start its job")
        p = _loading(s)[0]["progress"]
        assert p == {
            "stage": "analysing",
            "bytes_read": 1234,
            "bytes_total": os.path.getsize(path),
            "fraction": round(1234 / os.path.getsize(path), 4),
            "basis": "compressed",
        }
        assert s.runs()["runs"][0]["files"][0]["progress"] == p
    finally:
        go.touch()
    f = s.settled(1)["runs"][0]["files"][0]
    assert f["state"] == "error" and f["message"] == "fake worker done" and "progress" not in f


def test_a_worker_that_has_not_reported_yet_shows_starting(logdir, served):
    d = logdir / "r"
    d.mkdir()
    (d / "w.1.pt.trace.json").write_text('{"traceEvents": []}')
    hang = [sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(8); time.sleep(60)"]
    s = served(mode="process", worker_cmd=hang)
    st = wait_for(lambda: _loading(s), what="loading")
    assert st[0]["progress"] == {
        "stage": "starting",
        "bytes_read": 0,
        "bytes_total": 19,
        "fraction": 0.0,
        "basis": "file",
    }
    assert s.get("/runs").status_code == 200


def test_real_worker_writes_the_shared_record(tmp_path):
    path = sample_file("gpt4l_sdpa_train")
    w = WorkerProcess()
    try:
        out = w.run((path, Options(max_bytes=1 << 34), None, False))
        assert out["status"] == "ok"
        snap = w.progress.snapshot()  # what the child wrote, read in this process
        assert snap == {
            "stage": "indexing",
            "bytes_read": os.path.getsize(path),
            "bytes_total": os.path.getsize(path),
            "fraction": 1.0,
            "basis": "compressed",
        }
        assert w.run((path, Options(max_bytes=1 << 34), None, False))["status"] == "ok"  # the same record again
        assert w.progress.snapshot()["stage"] == "indexing"
    finally:
        w.close(kill=True)
