"""The per-file work on Dask: a real LocalCluster, and a scheduler and a worker started as separate
processes (``python -m dask scheduler`` / ``dask worker``) on 127.0.0.1. Every process is stopped,
and every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import rankjob
from rankjob import ROOT, STRAGGLER, cli

from tb_attention_plugin.options import Options
from tb_attention_plugin.ranks import distributed as Dd


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    return rankjob.job8(tmp_path_factory)


pytest.importorskip("distributed")


def _ranks_json(*args):
    r = cli("ranks", *args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _core(v):
    return [(r["rank"], r["file"], r["attention_time_us"], r["compute_busy_us"]) for r in v["ranks"]], [
        s["rank"] for s in v["stragglers"]
    ]


def test_local_cluster_gives_the_in_process_answer(job8, tmp_path):
    d, _ = job8
    inproc = _ranks_json(d, "--workers", "0", "--no-cache")
    local = _ranks_json(d, "--workers", "2", "--cache-dir", str(tmp_path / "c"))
    assert _core(local) == _core(inproc)
    assert [s["rank"] for s in local["stragglers"]] == [STRAGGLER]


def test_a_worker_that_dies_fails_only_its_file(job8, tmp_path):
    d, paths = job8
    calls = [(p, Dd.summarize_file, (p, Options(max_bytes=1 << 30), str(tmp_path / "c"), True)) for p in paths[:3]]
    calls.append(("dies", os._exit, (3,)))
    got = dict(Dd.run(calls, workers=2, mode="local"))
    assert got["dies"]["status"] == "error" and "died" in got["dies"]["error"]
    assert all(got[p]["status"] == "ok" for p in paths[:3])


@pytest.fixture
def dask_cluster(tmp_path):
    """A scheduler and one worker as separate processes; yields the scheduler's address."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sfile = str(tmp_path / "scheduler.json")
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dask",
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    sfile,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(sfile):
            assert time.monotonic() < deadline, "the dask scheduler did not start within 60 s"
            assert procs[0].poll() is None, "the dask scheduler exited"
            time.sleep(0.2)
        time.sleep(0.2)
        with open(sfile) as f:
            address = json.load(f)["address"]
        assert address.startswith("tcp://127.0.0.1:")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dask",
                    "worker",
                    "--scheduler-file",
                    sfile,
                    "--host",
                    "127.0.0.1",
                    "--nworkers",
                    "1",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--memory-limit",
                    "2GB",
                ],
                env=env,
                cwd=str(tmp_path),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        yield address
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


def test_ranks_analyze_and_summarize_on_a_scheduler_we_started(job8, dask_cluster, tmp_path):
    d, paths = job8
    cache = str(tmp_path / "shared-cache")
    remote = _ranks_json(d, "--scheduler", dask_cluster, "--cache-dir", cache)
    assert [r["rank"] for r in remote["ranks"]] == list(range(8))
    assert [s["rank"] for s in remote["stragglers"]] == [STRAGGLER]
    assert _core(remote) == _core(_ranks_json(d, "--workers", "0", "--no-cache"))
    # analyze: the workers keep the reports in the cache; the client prints the same JSON
    a_remote = cli(
        "analyze",
        paths[0],
        paths[STRAGGLER],
        "-f",
        "json",
        "--scheduler",
        dask_cluster,
        "--cache-dir",
        str(tmp_path / "c2"),
    )
    a_local = cli("analyze", paths[0], paths[STRAGGLER], "-f", "json", "--no-cache")
    assert a_remote.returncode == 0, a_remote.stderr
    assert json.loads(a_remote.stdout) == json.loads(a_local.stdout)
    # summarize fills the cache: a later `ranks` analyses nothing
    s = cli("summarize", d, "--scheduler", dask_cluster, "--cache-dir", str(tmp_path / "c3"))
    assert s.returncode == 0, s.stderr
    assert "summarized 8 trace(s)" in s.stdout and "0 already cached, 8 analysed on the Dask cluster" in s.stdout
    again = cli("summarize", d, "--cache-dir", str(tmp_path / "c3"))
    assert "8 already cached, 0 analysed" in again.stdout


def test_an_unreachable_scheduler_is_one_error_line(job8):
    d, _ = job8
    r = cli("ranks", d, "--scheduler", "tcp://127.0.0.1:9", env_extra={"TB_ATTENTION_DASK_TIMEOUT": "2"}, timeout=120)
    assert r.returncode == 2
    assert r.stderr.startswith("error: --scheduler tcp://127.0.0.1:9: cannot connect") and r.stderr.count("\n") == 1
