"""Per-rank summaries (ranks/summary.py) and their cache (ranks/store.py)."""

from __future__ import annotations

import glob
import os

import pytest
import rankjob
from rankjob import ROOT

from helpers import SHARED
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cache import ReportCache
from tb_attention_plugin.options import Options
from tb_attention_plugin.ranks import store
from tb_attention_plugin.ranks.summary import gpu_activity, rank_summary


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    return rankjob.job8(tmp_path_factory)


PUBLIC = os.path.join(SHARED, "public", "hta", "trace_filter")


def _one(run):
    return glob.glob(os.path.join(ROOT, "sample_traces", run, "*.json*"))[0]


def test_invariants_on_a_real_training_trace():
    path = _one("gpt4l_sdpa_train")
    rep = analyze_path(path)
    s = rank_summary(rep, path)
    assert s["rank"] == 0 and s["rank_source"] == "file_name"  # "..._rank0.<span>.pt.trace.json.gz"
    assert s["worker"] == "gpt4l_sdpa_train_rank0" and s["span"] == "1796022794211767299"
    assert 0 < s["attention_time_us"] <= s["compute_busy_us"] <= s["span_us"]
    assert 0 < s["attention_share"] <= 1
    total = sum(t for ps in s["phases"].values() for t in ps.values())
    assert abs(total - s["attention_time_us"]) < 0.01 * s["attention_time_us"]
    assert set(s["phases"]) == {"forward", "backward"}
    assert s["top_kernel_groups"] and s["top_kernel_groups"][0]["time_us"] >= s["top_kernel_groups"][-1]["time_us"]
    assert s["communication"]["kernels"] == 0 and s["communication_us"] == 0
    assert len(repr(s)) < 8000  # compact


def test_rank_from_distributed_info(job8):
    _, paths = job8
    s = rank_summary(analyze_path(paths[3]), paths[3])
    assert (s["rank"], s["world_size"], s["rank_source"]) == (3, 8, "distributedInfo")


def _row(name, ts, dur, device=0, attention=False):
    return {"name": name, "ts": ts, "dur_us": dur, "device": device, "attention": attention}


def test_communication_and_overlap_computed_from_intervals():
    rep = {
        "kernels": [
            _row("sm90_gemm", 0, 10),  # compute 0-10
            _row("flash_fwd", 5, 10, attention=True),  # compute + attention 5-15 (another stream)
            _row("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 12, 10),  # comm 12-22: 3 µs with attention
            _row("c10d::allreduce_", 30, 5),  # comm 30-35, alone
            _row("flash_fwd", 0, 4, device=1, attention=True),  # another GPU: compute 0-4
        ]
    }
    a = gpu_activity(rep)
    assert a["source"] == "kernels"
    assert a["compute_busy_us"] == 15 + 4
    c = a["communication"]
    assert (c["time_us"], c["busy_us"], c["kernels"]) == (15, 15, 2)
    assert c["overlap_with_attention_us"] == 3 and c["overlap_with_compute_us"] == 3
    assert a["span_us"] == 35  # first start to last end, over all devices (the contract's span_us)


def test_report_fields_are_used_when_the_engine_has_them():
    rep = {
        "compute_busy_us": 100.0,
        "span_us": 120.0,
        "kernels": [],
        "communication": {
            "time_us": 7.0,
            "busy_us": 6.0,
            "overlap_with_attention_us": 1.0,
            "overlap_with_compute_us": 2.0,
            "kernels": 3,
        },
    }
    a = gpu_activity(rep)
    assert a["source"] == "report" and a["compute_busy_us"] == 100.0 and a["communication"]["kernels"] == 3
    s = rank_summary(dict(rep, attention_time_us=30.0, attention_share=0.28), "rank3.pt.trace.json")
    assert (s["activity_source"], s["attention_share"], s["communication_us"], s["rank"]) == ("report", 0.28, 7.0, 3)


@pytest.mark.skipif(not os.path.isdir(PUBLIC), reason="../shared (public traces) is absent")
def test_public_multi_rank_traces_have_nccl_communication():
    for r in (0, 1):
        p = os.path.join(PUBLIC, f"sampled_rank-{r}.json.gz")
        s = rank_summary(analyze_path(p), p)
        c = s["communication"]
        assert s["rank"] == r and s["world_size"] == 128 and s["rank_source"] == "distributedInfo"
        assert c["kernels"] > 0 and 0 < c["busy_us"] <= c["time_us"]
        assert c["overlap_with_compute_us"] <= min(c["busy_us"], s["compute_busy_us"])
        assert s["compute_busy_us"] <= s["span_us"] and c["busy_us"] <= s["span_us"]


def test_the_summary_is_kept_with_the_cached_report(tmp_path):
    path = _one("sdpa_flash_s2048_fwd")
    cache = ReportCache(str(tmp_path / "c"))
    rep = analyze_path(path, Options(), cache=cache)
    key = store.summary_key(cache, path, Options())
    got = store.get(cache, key)
    assert got is not None and got["attention_time_us"] == rep["attention_time_us"]
    assert os.path.exists(os.path.join(cache.dir, key + ".rank.msgpack.z"))
    assert store.get(cache, store.summary_key(cache, path, Options(step="1"))) is None  # options are in the key
