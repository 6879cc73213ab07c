"""A run of many workers opens lazily: after ``tb-attention summarize`` the loader keeps each
rank's cached summary (state ``summarized``) and loads no report until a rank is asked for."""

from __future__ import annotations

import os
import threading

import pytest
import rankjob
from rankjob import STRAGGLER, cli, plugin_helpers

from tb_attention_plugin.cache import ReportCache
from tb_attention_plugin.options import Options
from tb_attention_plugin.ranks import store
from tb_attention_plugin.server.jobs import analyze_job
from tb_attention_plugin.server.loader import LAZY_WORKERS, Loader

H = plugin_helpers()


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    return rankjob.job8(tmp_path_factory)


@pytest.fixture(scope="module")
def summarized(job8, tmp_path_factory):
    d, _ = job8
    cache = str(tmp_path_factory.mktemp("lazy") / "cache")
    r = cli("summarize", d, "--workers", "0", "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    return cache


class Recorder:
    """The loader's job, recording which traces it was asked to open (report cache or analysis)."""

    def __init__(self):
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, path, *args):
        with self._lock:
            self.paths.append(os.path.basename(path))
        return analyze_job(path, *args)


@pytest.fixture
def served():
    made = []

    def make(logdir, **kw):
        s = H.Served(logdir, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _counts(s):
    return s.runs()["counts"]


def test_a_summarized_run_of_many_workers_loads_no_report_until_a_rank_is_picked(job8, summarized, served):
    d, paths = job8
    job = Recorder()
    # 8 workers: above a threshold of 4 (the default, LAZY_WORKERS, is 8: a run of 9 or more)
    s = served(d, use_cache=True, cache_dir=summarized, lazy_workers=4, job=job)
    H.wait_for(lambda: _counts(s)["summarized"] == 8 or None, what="8 summarized traces")
    c = _counts(s)
    assert c["queued"] == c["loading"] == c["ready"] == 0 and job.paths == []
    files = s.runs()["runs"][0]["files"]
    assert {f["state"] for f in files} == {"summarized"}
    assert all(f["attention_time_us"] > 0 for f in files)

    v = s.get("/ranks", run=".").json
    assert v["state"] == "ready" and v["pending_count"] == 0
    assert [x["rank"] for x in v["ranks"]] == list(range(8))
    assert [x["rank"] for x in v["stragglers"]] == [STRAGGLER]
    assert job.paths == [], "the Ranks view opened a report"

    picked = v["ranks"][3]
    first = s.get("/summary", run=".", worker=picked["worker"])
    assert first.status_code in (200, 202)
    if first.status_code == 202:  # the usual answer while it loads
        assert first.json["state"] in ("queued", "loading")
    body = H.wait_for(
        lambda: (lambda r: r.json if r.status_code == 200 else None)(
            s.get("/summary", run=".", worker=picked["worker"])
        ),
        what="the picked rank loaded",
    )
    assert body["selection"]["file"] == picked["file"]
    assert body["summary"]["attention_time_us"] == pytest.approx(picked["attention_time_us"], rel=1e-6)
    assert job.paths == [picked["file"]]  # that rank only
    states = {f["file"]: f["state"] for f in s.runs()["runs"][0]["files"]}
    assert states.pop(picked["file"]) == "ready" and set(states.values()) == {"summarized"}
    k = s.get("/kernels", run=".", worker=picked["worker"])
    assert k.status_code == 200 and job.paths == [picked["file"]]


def test_a_file_without_a_cached_summary_is_analysed_and_its_summary_kept(job8, summarized, served, tmp_path):
    d, paths = job8
    cache = ReportCache(summarized)
    gone = paths[2]
    key = store.summary_key(cache, gone, Options())
    os.remove(os.path.join(cache.dir, key + ".rank.msgpack.z"))
    assert store.get(cache, key) is None
    job = Recorder()
    s = served(d, use_cache=True, cache_dir=summarized, lazy_workers=4, job=job)
    H.wait_for(
        lambda: (lambda c: c if c["summarized"] == 7 and c["ready"] == 1 else None)(_counts(s)),
        what="7 summarized, 1 analysed",
    )
    assert job.paths == [os.path.basename(gone)]
    assert store.get(cache, key) is not None  # kept for the next start
    v = s.get("/ranks", run=".").json
    assert v["state"] == "ready" and len(v["ranks"]) == 8 and [x["rank"] for x in v["stragglers"]] == [STRAGGLER]


def test_runs_with_few_workers_load_as_before(job8, summarized):
    d, _ = job8
    assert LAZY_WORKERS == 8
    loader = Loader(d, use_cache=True, cache_dir=summarized, mode="thread", settle_secs=0.0)  # not started
    loader.scan_once()
    c = loader.counts()
    assert c["queued"] == 8 and c["summarized"] == 0
    lazy = Loader(d, use_cache=True, cache_dir=summarized, mode="thread", settle_secs=0.0, lazy_workers=7)
    lazy.scan_once()
    assert lazy.counts()["summarized"] == 8
    nocache = Loader(d, use_cache=False, cache_dir=summarized, mode="thread", settle_secs=0.0, lazy_workers=1)
    nocache.scan_once()
    assert nocache.counts()["queued"] == 8
