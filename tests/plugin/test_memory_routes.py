"""The memory and annotated-trace routes of the plugin."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

from conftest import Served, put

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_NAIVE = os.path.join(os.path.dirname(HERE), "data", "memory", "cpu_naive_s128.json.gz")


@pytest.fixture(scope="module")
def mem_runs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "naive", "naive_bf16_s2048_fwd")
    d = logdir / "cpu"
    d.mkdir()
    shutil.copyfile(CPU_NAIVE, d / "cpu_naive.pt.trace.json.gz")
    put(logdir, "plain", "seed_mha", "trace.json")  # export_chrome_trace-style, not gzipped
    s = Served(logdir)
    s.settled(3)
    yield s, logdir
    s.close()


def test_memory_route(mem_runs):
    s, _ = mem_runs
    r = s.get("/memory", run="cpu")
    assert r.status_code == 200
    d = r.json
    assert d["state"] == "ready" and d["selection"]["run"] == "cpu"
    m = d["memory"]
    assert m["recorded"] and m["primary"] == "cpu"
    dev = m["devices"][0]
    assert dev["score_matrices"]["allocs"] == 6 and dev["curve"]["ts"] and dev["attention_peak"]["held_by"]
    assert m["attention_spans"] and m["footprint"]["layers"]
    # a trace without memory events still answers, with the notice and the footprint
    m = s.get("/memory", run="naive").json["memory"]
    assert m["recorded"] is False and "profile_memory=True" in m["notice"]["fix"] and m["footprint"]["kv_bytes"]
    assert s.get("/memory", run="nope").status_code == 404


def _check_download(r, src_bytes, gz):
    assert r.status_code == 200
    cd = r.headers["Content-Disposition"]
    assert cd.startswith("attachment; filename=") and ".attention." in cd
    body = r.get_data()
    if gz:
        assert r.headers["Content-Type"] == "application/gzip"
        body = gzip.decompress(body)
    else:
        assert r.headers["Content-Type"].startswith("application/json")
    orig, new = json.loads(src_bytes), json.loads(body)
    n = len(orig["traceEvents"])
    assert new["traceEvents"][:n] == orig["traceEvents"] and len(new["traceEvents"]) > n
    added = new["traceEvents"][n:]
    assert any(e.get("cat") == "attention.phase" for e in added)
    assert any(e.get("name") == "thread_name" and e["args"]["name"].startswith("Attention phases (GPU") for e in added)


def test_annotated_download(mem_runs):
    s, logdir = mem_runs
    src = next((logdir / "naive").iterdir())
    r = s.get("/annotated", run="naive")
    _check_download(r, gzip.decompress(src.read_bytes()), gz=True)
    r = s.get("/annotated", run="plain", file="trace.json")
    _check_download(r, (logdir / "plain" / "trace.json").read_bytes(), gz=False)


@pytest.mark.parametrize(
    "params", [{"run": "naive", "file": "../../etc/passwd"}, {"run": "/etc"}, {"run": "naive", "file": "/etc/passwd"}]
)
def test_annotated_resolves_files_only_through_the_run_table(mem_runs, params):
    s, _ = mem_runs
    r = s.get("/annotated", **params)
    assert r.status_code in (400, 404) and r.json["error"]
    assert s.get("/annotated", run="naive", file="other.json").status_code == 404
