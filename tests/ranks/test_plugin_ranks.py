"""The ``/ranks`` route: a run of many ranks from the summaries kept with the report cache."""

from __future__ import annotations

import os

import pytest
import rankjob
from rankjob import ROOT, STRAGGLER, cli, make_rank_job, plugin_helpers

from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cache import ReportCache
from tb_attention_plugin.options import Options
from tb_attention_plugin.ranks import store
from tb_attention_plugin.ranks.summary import rank_summary


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    return rankjob.job8(tmp_path_factory)


H = plugin_helpers()
SMALL = os.path.join(ROOT, "sample_traces", "sdpa_flash_s2048_fwd")


@pytest.fixture
def servers():
    made = []

    def make(logdir, **kw):
        s = H.Served(logdir, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_a_summarized_job_answers_from_the_cache(job8, tmp_path, servers):
    d, paths = job8
    cache = str(tmp_path / "cache")
    r = cli("summarize", d, "--workers", "0", "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    # the loader stopped (it analyses nothing more): the answer comes from the summaries alone
    s = servers(d, use_cache=True, cache_dir=cache, workers=1)
    s.loader.stop()
    s.loader.scan_once()
    v = s.get("/ranks", run=".").json
    assert v["state"] == "ready" and v["pending_count"] == 0
    assert [x["rank"] for x in v["ranks"]] == list(range(8))
    assert [x["file"] for x in v["ranks"]] == [os.path.basename(p) for p in paths]
    assert [x["rank"] for x in v["stragglers"]] == [STRAGGLER]
    assert all(not os.path.isabs(x["path"]) for x in v["ranks"])


def test_without_a_cache_summaries_come_from_the_loaded_reports(job8, servers):
    d, _ = job8
    s = servers(d)  # use_cache=False
    s.settled(8)
    v = H.wait_for(
        lambda: (lambda j: j if j["state"] == "ready" else None)(s.get("/ranks", run=".").json),
        timeout=120,
        what="all ranks summarised",
    )
    assert [x["rank"] for x in v["stragglers"]] == [STRAGGLER] and len(v["ranks"]) == 8


def test_unknown_run_is_404(job8, servers):
    d, _ = job8
    s = servers(d)
    s.loader.stop()
    s.loader.scan_once()
    assert s.get("/ranks", run="nope").status_code == 404
    assert s.get("/ranks").status_code == 400


def test_1024_ranks_with_cached_summaries(tmp_path, servers):
    """A 1024-rank job (copies of a small real trace; rank 700 with its attention slowed 1.4x):
    every rank in order, exactly rank 700 flagged. The summaries are those `summarize` keeps: the
    two distinct traces (a normal rank and the slowed one) are analysed for real; the other 1022
    ranks, byte-identical to rank 0 but for distributedInfo, get rank 0's summary under their own
    cache keys (analysing 1024 copies would only make the test slow)."""
    logdir = tmp_path / "logs"
    paths = make_rank_job.make_job(
        str(logdir / "job"),
        1024,
        sources=[os.path.join(SMALL, f) for f in os.listdir(SMALL)],
        stragglers=(700,),
        slowdown=1.4,
        jitter=0.0,
        gz=True,
    )
    cache = ReportCache(str(tmp_path / "cache"))
    opt = Options()
    base = rank_summary(analyze_path(paths[0], opt, cache=None), paths[0])
    for r, p in enumerate(paths):
        s = rank_summary(analyze_path(p, opt, cache=None), p) if r in (1, 700) else dict(base, rank=r)
        assert s["rank"] == r
        store.put(cache, store.summary_key(cache, p, opt), s)
    s = servers(logdir, use_cache=True, cache_dir=cache.dir)
    s.loader.stop()  # nothing analysed by the loader: only the cache answers
    s.loader.scan_once()
    v = s.get("/ranks", run="job").json
    assert v["state"] == "ready" and v["files"] == 1024
    assert [x["rank"] for x in v["ranks"]] == list(range(1024))
    assert [x["rank"] for x in v["stragglers"]] == [700]
    assert v["spread"]["ranks"] == 1024 and v["spread"]["max_over_median"] > 1.3
    again = s.get("/ranks", run="job").json  # from the memo
    assert again["ranks"] == v["ranks"]


def test_run_names_are_looked_up_never_joined(job8, servers):
    d, _ = job8
    s = servers(d)
    s.loader.stop()
    s.loader.scan_once()
    for bad in ("..", "../..", "/etc", "a/../../b", "..\\x"):
        r = s.get("/ranks", run=bad)
        assert r.status_code in (400, 404) and "error" in r.json, bad
    assert s.get("/ranks", run=".", extra="1").status_code == 200
