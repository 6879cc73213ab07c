"""``tb-attention ranks`` in-process on a generated job with one slowed rank; the generator."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
import rankjob
from rankjob import STRAGGLER, cli, make_rank_job

from tb_attention_plugin.cli import main


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    return rankjob.job8(tmp_path_factory)


def _json(capsys, *args):
    rc = main(["ranks", *args, "--format", "json", "--workers", "0"])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_every_rank_in_rank_order_and_exactly_the_slowed_one_named(job8, capsys):
    d, paths = job8
    assert sorted(os.listdir(d)) != [os.path.basename(p) for p in paths]  # names do not sort by rank
    rc, v, err = _json(capsys, d)
    assert rc == 0 and err == ""
    assert [r["rank"] for r in v["ranks"]] == list(range(8))
    assert [r["file"] for r in v["ranks"]] == [os.path.basename(p) for p in paths]
    assert [s["rank"] for s in v["stragglers"]] == [STRAGGLER]
    st = v["stragglers"][0]
    assert 20 < st["excess_pct"] < 40 and st["phases"]
    for r in v["ranks"]:  # the schema
        assert {
            "rank",
            "worker",
            "file",
            "attention_time_us",
            "compute_busy_us",
            "attention_share",
            "phases",
            "communication_us",
        } <= set(r)
        assert r["attention_time_us"] <= r["compute_busy_us"]
    assert v["schema"] == 1 and set(st) >= {"rank", "attention_time_us", "excess_pct", "phases"}
    assert v["spread"]["max_over_median"] > 1.2


def test_table_and_csv(job8, capsys):
    d, _ = job8
    assert main(["ranks", d, "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "STRAGGLER" in out and f"rank {STRAGGLER} (" in out and "explained by" in out
    assert main(["ranks", d, "--workers", "0", "-f", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("rank,worker,file") and len(lines) == 9
    assert [int(x.split(",")[0]) for x in lines[1:]] == list(range(8))


def test_a_bad_file_is_one_error_line_and_the_rest_completes(job8, tmp_path, capsys):
    d, _ = job8
    job = tmp_path / "job"
    shutil.copytree(d, job)
    bad = job / "node9_1.1.pt.trace.json.gz"
    with gzip.open(bad, "wb") as f:
        f.write(b'{"traceEvents": [{"ph": "X", "na')
    rc, v, err = _json(capsys, str(job))
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {bad}: ")
    assert len(v["ranks"]) == 8 and len(v["errors"]) == 1
    assert [s["rank"] for s in v["stragglers"]] == [STRAGGLER]


def test_summaries_are_cached(job8, tmp_path, capsys):
    d, _ = job8
    cache = str(tmp_path / "cache")
    rc, first, _ = _json(capsys, d, "--cache-dir", cache)
    assert rc == 0
    assert len([f for f in os.listdir(cache) if f.endswith(".rank.msgpack.z")]) == 8
    rc, again, _ = _json(capsys, d, "--cache-dir", cache)
    assert again == first


def test_no_trace_files(tmp_path):
    r = cli("ranks", str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {tmp_path}: no trace files found")


def test_the_straggler_generator_shifts_later_gpu_work(tmp_path):
    src = make_rank_job.default_sources()[0]
    att = make_rank_job.attention_kernels(src)
    trace = make_rank_job._load(src)
    before = {id(e): (e["ts"], e.get("dur")) for e in trace["traceEvents"] if e.get("cat") == "kernel"}
    last_end = max(t + d for t, d in before.values())
    n = make_rank_job.stretch(trace, att, 1.5)
    ks = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert n > 0
    added = sum(before[id(e)][1] * 0.5 for e in ks if (make_rank_job._device(e), round(before[id(e)][0] * 1000)) in att)
    assert abs(max(e["ts"] + e["dur"] for e in ks) - (last_end + added)) < 0.01 * added + 1
    # kernels of one stream still run one after the other
    by_stream = {}
    for e in sorted(ks, key=lambda e: e["ts"]):
        prev = by_stream.get(e["tid"])
        assert prev is None or e["ts"] >= prev - 1e-3
        by_stream[e["tid"]] = e["ts"] + e["dur"]


def test_the_table_fits_the_terminal(job8, capsys, monkeypatch):
    d, _ = job8
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["ranks", d, "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 80 and "STRAGGLER" in out
    assert main(["ranks", d, "--workers", "0", "--wide"]) == 0
    assert "comm ∩ attn" in capsys.readouterr().out


def test_one_processes_traces_are_listed_but_said_not_a_job(tmp_path, capsys):
    """An eager trace beside its CUDA-graph twin (no rank stated by either): listed, with a note,
    and ``job: false`` in the JSON."""
    modern = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "modern")
    srcs = [os.path.join(modern, d) for d in ("decode_graph_eager", "decode_graph_replay")]
    if not all(os.path.isdir(s) for s in srcs):
        pytest.skip("tests/data/modern is not available")
    for s in srcs:
        for f in os.listdir(s):
            shutil.copyfile(os.path.join(s, f), tmp_path / f)
    rc, v, _ = _json(capsys, str(tmp_path))
    assert rc == 0 and len(v["ranks"]) == 2 and v["job"] is False and "no trace states its rank" in v["job_reason"]
    assert main(["ranks", str(tmp_path), "--workers", "0"]) == 0
    assert "note: not a job of several ranks" in capsys.readouterr().out
