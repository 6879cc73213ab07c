"""Progress of an analysis (tb_attention_plugin/progress.py): bytes read, throttled, counted by
both processes of a parallel read, and the stages of a job.

The parallel cases run in a fresh interpreter: the parallel reader only forks a single-threaded
process (tests/trace/test_parallel.py does the same)."""

import gzip
import json
import mmap
import os
import subprocess
import sys

import pytest

from helpers import ROOT, sample
from synth import SynthTrace, mlp_and_loss, naive_attention
from tb_attention_plugin import progress
from tb_attention_plugin.server.jobs import analyze_job
from tb_attention_plugin.trace import reader
from tb_attention_plugin.trace.records import load_trace


def _plain_copy(tmp_path, run="gpt4l_sdpa_train"):
    p = tmp_path / "t.pt.trace.json"
    with gzip.open(sample(run), "rb") as f:
        p.write_bytes(f.read())
    return str(p)


class Counting(progress.Progress):
    def __init__(self, buf):
        super().__init__(buf)
        self.adds, self.stages = 0, []

    def add(self, n):
        self.adds += 1
        super().add(n)

    def set_stage(self, name):
        self.stages.append(name)
        super().set_stage(name)

    def begin_read(self, total, gzip):
        self.stages.append("reading")
        super().begin_read(total, gzip)


def _record():
    rec = Counting(mmap.mmap(-1, progress.SIZE))
    rec.reset()
    return rec


def test_no_record_no_reports(tmp_path):
    path = _plain_copy(tmp_path)
    assert progress.current() is None
    src = reader.ByteSource(path)
    assert src._progress is None
    while src.read():
        pass
    src.close()
    progress.stage("reading")  # no record: a no-op, not an error


def test_reads_are_throttled_and_add_up(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "BLOCK", 16 << 10)  # many blocks...
    monkeypatch.setattr(progress, "REPORT_BYTES", 256 << 10)  # ...few reports
    path = _plain_copy(tmp_path)
    size = os.path.getsize(path)
    rec = _record()
    with progress.active(rec):
        load_trace(path)
    snap = rec.snapshot()
    assert snap == {"stage": "reading", "bytes_read": size, "bytes_total": size, "fraction": 1.0, "basis": "file"}
    blocks = size // (16 << 10)
    assert blocks > 100 and rec.adds <= size // (256 << 10) + 2, (blocks, rec.adds)


def test_gzip_counts_compressed_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "BLOCK", 16 << 10)
    monkeypatch.setattr(progress, "REPORT_BYTES", 64 << 10)
    path = sample("gpt4l_sdpa_train")
    size = os.path.getsize(path)
    seen = []
    rec = _record()
    orig = rec.add

    def add(n):
        orig(n)
        seen.append(rec.snapshot()["bytes_read"])

    rec.add = add
    with progress.active(rec):
        load_trace(path)
    snap = rec.snapshot()
    assert snap["basis"] == "compressed" and snap["bytes_total"] == size and snap["bytes_read"] == size
    assert len(seen) > 3 and seen == sorted(seen) and 0 < seen[0] < size  # it moved, forwards


def test_job_stages_in_order(tmp_path):
    path = _plain_copy(tmp_path)
    rec = _record()
    with progress.active(rec):
        out = analyze_job(path, use_cache=False)
    assert out["status"] == "ok"
    assert rec.stages == ["reading", "analysing", "memory", "advice", "indexing"]
    assert rec.snapshot()["fraction"] == 1.0
    assert progress.current() is None  # restored after the job


def test_a_stale_writer_cannot_touch_the_next_job():
    rec = progress.Progress.anonymous()
    rec.attach()
    rec.begin_read(1000, False)
    rec.add(300)
    old = progress.Progress(rec._mm)
    old.attach()  # e.g. the reader's child of an earlier job
    rec.reset()  # the loader starts the next job
    old.add(999)
    old.set_stage("indexing")
    assert rec.snapshot() == {
        "stage": "starting",
        "bytes_read": 0,
        "bytes_total": None,
        "fraction": None,
        "basis": "file",
    }


def test_unreadable_record_is_none():
    rec = progress.Progress.anonymous()
    rec._mm[:4] = b"\0\0\0\0"
    assert rec.snapshot() is None
    rec._mm.close()
    assert rec.snapshot() is None


def test_from_fd():
    assert progress.from_fd(None) is None and progress.from_fd("") is None
    assert progress.from_fd("not a number") is None
    assert progress.from_fd("987654") is None  # no such descriptor


SCRIPT = r"""
import json, sys
from tb_attention_plugin import progress
from tb_attention_plugin.trace import parallel, reader
from tb_attention_plugin.trace.records import load_trace
parallel.MIN_PARALLEL_BYTES = 0
reader.CHUNK_TARGET = 4096
parallel.SEGMENT_BYTES = 8192
parallel.MAX_SEGMENTS = 64
progress.REPORT_BYTES = 4096
rec = progress.Progress.anonymous()
with progress.active(rec):
    tr = load_trace(sys.argv[1], jobs=int(sys.argv[2]))
print(json.dumps({"parallel": tr.stats.get("parallel"), "snapshot": rec.snapshot(),
                  "by_process": rec.by_process()}))
"""


def _run(path, jobs=2):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(jobs)], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_parallel_plain_read_counts_both_processes(tmp_path):
    path = _plain_copy(tmp_path)
    size = os.path.getsize(path)
    out = _run(path)
    assert out["parallel"] is True
    parent, child = out["by_process"][:2]
    assert parent > 0 and child > 0, out["by_process"]  # both read segments, each in its slot
    assert parent + child == size and out["by_process"][2:] == [0, 0]
    assert out["snapshot"]["bytes_read"] == size and out["snapshot"]["fraction"] == 1.0


def test_parallel_gzip_read_counts_the_parent(tmp_path):
    path = sample("gpt4l_sdpa_train")  # gzip: the parent reads, the child decodes
    out = _run(path)
    assert out["parallel"] is True
    assert out["by_process"][0] == os.path.getsize(path) and out["by_process"][1] == 0
    assert out["snapshot"]["basis"] == "compressed" and out["snapshot"]["fraction"] == 1.0


def _trace_doc(n=30):
    t = SynthTrace()
    for _ in range(n):
        naive_attention(t)
    mlp_and_loss(t)
    return t.doc()


@pytest.mark.parametrize("kind", ["one_line", "meta_last"])
def test_parallel_read_that_gives_up_counts_from_zero(tmp_path, kind):
    """A file the parallel reader cannot cut (one line), or gives up on after reading segments
    (cuts inside metadata after the events): the serial read starts counting again at 0."""
    d = _trace_doc()
    p = tmp_path / f"{kind}.json"
    if kind == "one_line":
        p.write_text(json.dumps(d, separators=(",", ":")))
    else:
        dev = d.pop("deviceProperties")
        d["deviceProperties"] = dev + [dict(dev[0], id=i) for i in range(1, 200)]
        p.write_text(json.dumps(d, indent=1))
    out = _run(p)
    size = os.path.getsize(p)
    assert out["snapshot"]["bytes_read"] == size == sum(out["by_process"])
    if out["parallel"] is None:
        assert out["by_process"][0] == size


def test_serial_read_in_a_fresh_process(tmp_path):
    path = _plain_copy(tmp_path)
    out = _run(path, jobs=1)
    assert out["parallel"] is None and out["by_process"][0] == os.path.getsize(path)
