"""Reading with two processes gives the same analysis as reading serially.

Each case runs in a fresh interpreter: the parallel reader only forks a single-threaded
process, and a test run has other threads (the plugin tests' loaders)."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, sample
from synth import SynthTrace, mlp_and_loss, naive_attention

SCRIPT = r"""
import json, sys
from tb_attention_plugin.trace import parallel, reader
from tb_attention_plugin.trace.records import load_trace
from tb_attention_plugin.report import analyze_trace
from tb_attention_plugin.jsonout import to_json
parallel.MIN_PARALLEL_BYTES = 0
reader.CHUNK_TARGET = 4096            # many chunks: both processes get work
parallel.SEGMENT_BYTES = 8192         # many segments (plain files are read in segments)
parallel.MAX_SEGMENTS = 64
path, mode, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
tr = load_trace(path, jobs=jobs)
rep = json.loads(to_json(analyze_trace(tr)))
rep.pop("path"); rep.pop("trace")
print(json.dumps({"parallel": tr.stats.get("parallel"), "truncated": tr.stats.get("truncated"),
                  "n_gpu": tr.n_gpu, "warnings": tr.warnings, "report": rep if mode == "full" else None}))
"""


def run(path, jobs, mode="full"):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), mode, str(jobs)], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("run_name", ["gpt4l_sdpa_train", "naive_bf16_s2048_fwd", "seed_mha"])
def test_parallel_equals_serial(run_name):
    path = sample(run_name)
    par, ser = run(path, 2), run(path, 1)
    assert par["parallel"] is True and ser["parallel"] is None
    assert par["report"] == ser["report"]


def test_single_line_file_falls_back_to_serial(tmp_path):
    t = SynthTrace()
    for _ in range(30):
        naive_attention(t)
    mlp_and_loss(t)
    p = tmp_path / "one_line.json"
    p.write_text(json.dumps(t.doc(), separators=(",", ":")))  # no line breaks at all
    out = run(p, 2, "summary")
    assert out["parallel"] is None and out["n_gpu"] == 30 * 8 + 3


def test_truncated_file_in_parallel_is_salvaged(tmp_path):
    t = SynthTrace()
    for _ in range(40):
        naive_attention(t)
    text = json.dumps(t.doc(), indent=1)
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) * 3 // 4])
    out = run(p, 2, "summary")
    assert out["parallel"] is True and out["truncated"] and 0 < out["n_gpu"] < 40 * 8
    assert any("truncated" in w for w in out["warnings"])


def _trace_text(n=40, indent=1, **extra):
    t = SynthTrace()
    for _ in range(n):
        naive_attention(t)
    mlp_and_loss(t)
    d = t.doc()
    d.update(extra)
    return d, json.dumps(d, indent=indent)


def test_metadata_after_the_events_is_not_cut(tmp_path):
    """Keys after traceEvents holding lists of objects on separate lines (deviceProperties
    written last) look like event boundaries; the result must still equal a serial read."""
    d, _ = _trace_text()
    dev = d.pop("deviceProperties")
    d["deviceProperties"] = dev + [dict(dev[0], id=i) for i in range(1, 200)]
    p = tmp_path / "meta_last.json"
    p.write_text(json.dumps(d, indent=1))
    par, ser = run(p, 2), run(p, 1)
    assert par["report"] == ser["report"]


def test_bare_event_list(tmp_path):
    d, _ = _trace_text()
    p = tmp_path / "bare.json"
    p.write_text(json.dumps(d["traceEvents"], indent=1))
    par, ser = run(p, 2), run(p, 1)
    assert par["parallel"] is True and par["report"] == ser["report"]


def test_gzip_files_use_the_chunk_reader(tmp_path):
    import gzip

    _, text = _trace_text()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    par, ser = run(p, 2), run(p, 1)
    assert par["parallel"] is True and par["report"] == ser["report"]


def test_min_bytes_decides_and_none_means_the_default(tmp_path, monkeypatch):
    from tb_attention_plugin.trace import parallel

    monkeypatch.setattr(parallel, "_only_fork_safe_threads", lambda: True)  # other tests' threads
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + b" " * 1000 + b"]")
    assert parallel.suitable(str(p), jobs=2, min_bytes=0)
    assert parallel.suitable(str(p), jobs=2, min_bytes=1002)
    assert not parallel.suitable(str(p), jobs=2, min_bytes=1003)
    assert not parallel.suitable(str(p), jobs=1, min_bytes=0)
    assert not parallel.suitable(str(p), jobs=2) and parallel.MIN_PARALLEL_BYTES == 48 << 20


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_named_pipe_is_never_opened(tmp_path):
    from tb_attention_plugin.trace import parallel

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert parallel.suitable(str(fifo)) is False  # returns at once: nothing opened it


STALLED_CHILD = r"""
import json, os, sys, time
from tb_attention_plugin.trace import parallel, reader
from tb_attention_plugin.trace.records import load_trace
from tb_attention_plugin.report import analyze_trace
from tb_attention_plugin.jsonout import to_json
parallel.MIN_PARALLEL_BYTES = 0
reader.CHUNK_TARGET = 4096
parallel.SEGMENT_BYTES = 8192
parallel.MAX_SEGMENTS = 64
parent = os.getpid()
segment = parallel._segment

def stalls_in_the_child(path, cuts, i, *a, **k):
    if os.getpid() == parent and i == 0:
        time.sleep(1.0)  # the child claims the next segments meanwhile
    elif os.getpid() != parent and i >= 2:
        time.sleep(120)  # a child starved of CPU, or stuck: the parent must not wait for it
    return segment(path, cuts, i, *a, **k)

parallel._segment = stalls_in_the_child
t0 = time.monotonic()
tr = load_trace(sys.argv[1], jobs=2)
rep = json.loads(to_json(analyze_trace(tr)))
rep.pop("path"); rep.pop("trace")
print(json.dumps({"parallel": tr.stats.get("parallel"), "s": time.monotonic() - t0, "report": rep}))
"""


def test_the_parent_reads_what_a_stalled_child_holds(tmp_path):
    """The parent reads the segments the child has not sent back itself and stops the child:
    the read takes no longer than a serial one, and gives the same report."""
    path = tmp_path / "trace.json"  # uncompressed: read in segments by both processes
    with gzip.open(sample("gpt4l_sdpa_train"), "rb") as f:
        path.write_bytes(f.read())
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", STALLED_CHILD, str(path)], capture_output=True, text=True, env=env, timeout=100
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["parallel"] is True and out["s"] < 60
    assert out["report"] == run(path, 1)["report"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_result_pipes_are_widened_where_the_system_allows():
    """A segment's columns (~0.7 MB) go through the pipe in one write: with the default 64 KiB
    buffer the child waited on the parent's reads for a third of its time."""
    import fcntl
    import multiprocessing

    from tb_attention_plugin.trace import parallel

    with open("/proc/sys/fs/pipe-max-size") as f:
        cap = int(f.read())
    r, w = multiprocessing.get_context("fork").Pipe(duplex=False)
    try:
        before = fcntl.fcntl(w.fileno(), fcntl.F_GETPIPE_SZ)
        parallel.widen_pipe(w)
        after = fcntl.fcntl(w.fileno(), fcntl.F_GETPIPE_SZ)
    finally:
        r.close()
        w.close()
    assert after == max(before, min(parallel.PIPE_BYTES, cap))


def test_the_default_wants_an_idle_cpu_an_explicit_jobs_does_not(tmp_path, monkeypatch):
    """Unset TB_ATTENTION_JOBS: a second process only when a CPU runs nothing now (on a core
    other work keeps busy the child only adds its overhead); ``jobs=2`` always tries."""
    from tb_attention_plugin.trace import parallel

    monkeypatch.setattr(parallel, "_only_fork_safe_threads", lambda: True)  # other tests' threads
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + b" " * 1000 + b"]")
    for spare, default in ((1, True), (0, False), (-3, False), (None, True)):
        monkeypatch.setattr(parallel, "_spare_cpus", lambda s=spare: s)
        assert parallel.suitable(str(p), min_bytes=0) is default, spare
        assert parallel.suitable(str(p), jobs=2, min_bytes=0) is True


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="Linux's /proc/loadavg")
def test_spare_cpus_counts_this_thread_as_running():
    from tb_attention_plugin.trace import parallel

    spare = parallel._spare_cpus()
    assert spare is not None and spare <= len(os.sched_getaffinity(0)) - 1


def test_spare_cpus_counts_the_fewest_runnable_threads_of_its_reads(monkeypatch):
    """A thread caught running in one read (a sampler waking) does not take a CPU away: the
    fewest runnable threads over the reads count; a file that cannot be read gives None."""
    import builtins
    import io

    from tb_attention_plugin.trace import parallel

    counts = iter([3, 2, 4, 2, 3])
    real_open = builtins.open

    def fake_open(path, *a, **k):
        if path == "/proc/loadavg":
            return io.StringIO(f"0.50 0.40 0.30 {next(counts)}/812 4242\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(parallel, "_own_runnable_threads", lambda: 1)  # this thread alone
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert parallel._spare_cpus(reads=5, gap_s=0) == 3 - 2
    counts = iter([1, 5])  # only this thread runs: the first read settles it
    assert parallel._spare_cpus(reads=2, gap_s=0) == 3 - 1
    monkeypatch.setattr(builtins, "open", lambda *a, **k: io.StringIO("garbage"))
    assert parallel._spare_cpus(reads=3, gap_s=0) is None


def test_spare_cpus_does_not_count_this_process_s_own_threads(monkeypatch):
    """numpy's BLAS workers spinning after import are runnable threads of this process, not other
    work: two CPUs, this thread and one spinning worker running, and nothing else, leave one spare;
    a thread of another process takes it."""
    from tb_attention_plugin.trace import parallel

    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(parallel, "_own_runnable_threads", lambda: 2)
    monkeypatch.setattr(parallel, "_runnable_threads", lambda: 2)
    assert parallel._spare_cpus(reads=3, gap_s=0) == 1
    monkeypatch.setattr(parallel, "_runnable_threads", lambda: 3)
    assert parallel._spare_cpus(reads=3, gap_s=0) == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux's /proc/self/task")
def test_own_runnable_threads_counts_this_one():
    from tb_attention_plugin.trace import parallel

    assert 1 <= parallel._own_runnable_threads() <= len(os.listdir("/proc/self/task"))


def test_a_file_too_small_for_two_processes_never_reads_the_load(tmp_path, monkeypatch):
    """The idle-CPU reads sleep between them: a small file (most traces) is turned down first."""
    from tb_attention_plugin.trace import parallel

    monkeypatch.setattr(parallel, "_only_fork_safe_threads", lambda: True)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)

    def loaded():
        raise AssertionError("read the load for a small file")

    monkeypatch.setattr(parallel, "_spare_cpus", loaded)
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + b" " * 1000 + b"]")
    assert parallel.suitable(str(p), min_bytes=2000) is False
