"""Reading a job's next trace in a forked child (trace/ahead.py) changes nothing but the time.

Each case runs in a fresh interpreter: a child is forked only from a process whose threads are
all fork-safe, and a test run has other threads (the plugin tests' loaders)."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

DDP2 = os.path.join(ROOT, "tests", "data", "ddp2", "ddp2_gpt_sdpa")
RANKS = sorted(os.path.join(DDP2, f) for f in os.listdir(DDP2) if f.endswith(".pt.trace.json.gz"))

# A CLI command on the files, with the read-ahead on or off; stderr ends with what ReadAhead.take
# gave.
CLI = r"""
import io, json, os, sys
from tb_attention_plugin.trace import ahead
command, mode, files = sys.argv[1], sys.argv[2], sys.argv[3:]
taken = []
take = ahead.ReadAhead.take
def recorded(self, path):
    tr = take(self, path)
    taken.append([os.path.basename(path), tr is not None])
    return tr
ahead.ReadAhead.take = recorded
if mode == "off":
    ahead.ReadAhead.started = lambda self, path: None
from tb_attention_plugin import cli
out = io.BytesIO()
class Out:
    buffer = out
    def write(self, s): out.write(s.encode())
    def flush(self): pass
sys.stdout = Out()
try:
    rc = cli.main([command, *files, "--format", "json", "--no-cache"])
except SystemExit as e:
    rc = e.code
sys.stdout = sys.__stdout__
sys.stdout.buffer.write(out.getvalue())
print("\n" + json.dumps({"rc": rc, "taken": taken}), file=sys.stderr)
"""


def run_cli(files, mode, tmp_path, command="analyze"):
    env = dict(
        os.environ,
        PYTHONPATH=ROOT,
        TB_ATTENTION_JOBS="2",  # an explicit 2: the child is tried whatever the machine's load
        TB_ATTENTION_PARALLEL_MIN_BYTES="0",  # the test traces are small
        TB_ATTENTION_CACHE_DIR=str(tmp_path / "cache"),
    )
    r = subprocess.run(
        [sys.executable, "-c", CLI, command, mode, *map(str, files)], capture_output=True, env=env, timeout=300
    )
    tail = json.loads(r.stderr.decode().strip().splitlines()[-1])
    return r.stdout, tail


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
def test_job_read_ahead_gives_the_same_reports(tmp_path):
    on, tail_on = run_cli(RANKS, "on", tmp_path)
    off, tail_off = run_cli(RANKS, "off", tmp_path)
    assert tail_on["rc"] == tail_off["rc"] == 0
    # with it on, the second rank's trace came from the child; off, nothing was read ahead
    assert tail_on["taken"] == [[os.path.basename(RANKS[0]), False], [os.path.basename(RANKS[1]), True]]
    assert [t for _, t in tail_off["taken"]] == [False, False]
    assert on == off
    assert len(json.loads(on)["traces"]) == 2


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
def test_ranks_in_process_reads_ahead_too(tmp_path):
    """``tb-attention ranks`` on a few files analyses them in this process (ranks/distributed.py):
    the same read-ahead, the same summaries."""
    on, tail_on = run_cli(RANKS, "on", tmp_path, "ranks")
    off, tail_off = run_cli(RANKS, "off", tmp_path, "ranks")
    assert tail_on["rc"] == tail_off["rc"] == 0
    assert [t for _, t in tail_on["taken"]] == [False, True]
    assert on == off and len(json.loads(on)["ranks"]) == 2


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
def test_a_bad_next_file_is_reported_as_without_read_ahead(tmp_path):
    bad = tmp_path / "rank9.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}, oops')
    cut = tmp_path / "rank8.pt.trace.json"
    with gzip.open(RANKS[1], "rb") as f:
        raw = f.read()
    cut.write_bytes(raw[: len(raw) // 2])  # truncated: an error without --allow-partial
    files = [RANKS[0], str(cut), str(bad)]
    on, tail_on = run_cli(files, "on", tmp_path)
    off, tail_off = run_cli(files, "off", tmp_path)
    assert tail_on["rc"] == tail_off["rc"] == 2
    assert on == off
    errors = [t for t in json.loads(on)["traces"] if t.get("status") == "error"]
    assert [os.path.basename(e["path"]) for e in errors] == ["rank8.pt.trace.json", "rank9.pt.trace.json"]
    assert "truncated" in errors[0]["error"]
    # the child failed on both and the parent read them itself
    assert [t for _, t in tail_on["taken"]] == [False, False, False]


# ReadAhead on its own: what comes back is the serial read's trace, writable, and a file that is
# not wanted (its report is cached) is not read.
DIRECT = r"""
import json, sys, numpy as np
from tb_attention_plugin.trace.ahead import ReadAhead, serial_reader
from tb_attention_plugin.trace.records import load_trace, TABLES
a, b, wanted = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
ra = ReadAhead([a, b], serial_reader(1 << 34, False), lambda p: wanted, jobs=2, min_bytes=0)
ra.started(a)
tr = ra.take(b)
ra.close()
out = {"got": tr is not None}
if tr is not None:
    ref = load_trace(b, jobs=1)
    same = all(
        getattr(tr, t).keys() == getattr(ref, t).keys()
        and all(np.array_equal(getattr(tr, t)[k], getattr(ref, t)[k], equal_nan=True) for k in getattr(ref, t))
        for t in TABLES
    )
    rest = {k: v for k, v in vars(tr).items() if k not in TABLES}
    ref_rest = {k: v for k, v in vars(ref).items() if k not in TABLES}
    out["same_columns"] = same
    out["same_rest"] = rest == ref_rest  # (by value: a set in the stats pickles in hash order)
    out["writable"] = all(a.flags.writeable for t in TABLES for a in getattr(tr, t).values())
print(json.dumps(out))
"""


def run_direct(a, b, wanted):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", DIRECT, str(a), str(b), "1" if wanted else "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
def test_the_trace_read_ahead_is_the_serial_read(tmp_path):
    out = run_direct(RANKS[0], RANKS[1], True)
    assert out == {"got": True, "same_columns": True, "same_rest": True, "writable": True}


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
def test_a_file_not_wanted_is_not_read_ahead():
    assert run_direct(RANKS[0], RANKS[1], False) == {"got": False}


# A child that dies while reading (killed, out of memory) or that hangs up half-way: the caller
# gets None and reads the file itself; nothing is left running.
DYING = r"""
import json, os, sys
from tb_attention_plugin.trace.ahead import ReadAhead, serial_reader
a, b, how = sys.argv[1], sys.argv[2], sys.argv[3]
read = serial_reader(1 << 34, False)
def load(path):
    if how == "exit":
        os._exit(9)  # as if killed
    tr = read(path)
    if how == "raise":
        raise MemoryError("no room")
    return tr
ra = ReadAhead([a, b], load, jobs=2, min_bytes=0)
ra.started(a)
child = ra._proc
got = ra.take(b)
print(json.dumps({"got": got is not None, "started": child is not None, "alive": child.is_alive() if child else None}))
"""


@pytest.mark.skipif(len(RANKS) < 2, reason="the 2-rank job is not in tests/data")
@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_child_that_fails_hands_back_nothing(how):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", DYING, RANKS[0], RANKS[1], how], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == {"got": False, "started": True, "alive": False}
