"""The job view: rank order, spread, and the straggler rule (ranks/job.py)."""

from __future__ import annotations

import random

from tb_attention_plugin.ranks import job as J


def _s(rank, att, phases=None, file=None):
    phases = phases or {"forward": {"fused_attention": att * 0.3}, "backward": {"fused_attention": att * 0.7}}
    return {
        "status": "ok",
        "rank": rank,
        "worker": f"w{rank}",
        "span": None,
        "file": file or f"w{rank}.pt.trace.json",
        "path": "x",
        "attention_time_us": att,
        "compute_busy_us": att * 4,
        "attention_share": 0.25,
        "phases": phases,
        "communication_us": 10.0,
        "communication": {},
    }


def test_rows_sorted_by_rank_number_not_name():
    v = J.job_view([_s(10, 100), _s(2, 100), _s(None, 100, file="a"), _s(1, 100)])
    assert [r["rank"] for r in v["ranks"]] == [1, 2, 10, None]


def test_one_slow_rank_is_named_with_the_phase_that_explains_it():
    rng = random.Random(3)
    rows = [_s(r, 1000 * (1 + rng.uniform(-0.01, 0.01))) for r in range(16)]
    slow = {"forward": {"fused_attention": 300.0, "softmax": 10.0}, "backward": {"fused_attention": 1000.0}}
    rows[9] = _s(9, 1310.0, phases=slow)
    v = J.job_view(rows)
    assert [s["rank"] for s in v["stragglers"]] == [9]
    st = v["stragglers"][0]
    assert 29 < st["excess_pct"] < 33
    assert list(st["phases"]["backward"]) == ["fused_attention"]
    assert st["phases"]["backward"]["fused_attention"]["excess_us"] > 250
    assert abs(v["spread"]["max_over_median"] - 1.31) < 0.02


def test_noise_never_flags():
    rng = random.Random(7)
    for n in (3, 8, 64, 1024):
        v = J.job_view([_s(r, 1000 * (1 + rng.uniform(-0.03, 0.03))) for r in range(n)])
        assert v["stragglers"] == [], n


def test_small_excess_over_a_tight_job_is_not_flagged():
    # MAD is tiny (identical ranks), so only the minimum relative excess protects a 4 % slower rank
    rows = [_s(r, 1000.0) for r in range(32)] + [_s(32, 1040.0)]
    assert J.job_view(rows)["stragglers"] == []
    rows[-1] = _s(32, 1000.0 * (1 + J.MIN_EXCESS) + 1)
    assert [s["rank"] for s in J.job_view(rows)["stragglers"]] == [32]


def test_two_ranks_are_not_judged():
    v = J.job_view([_s(0, 1000.0), _s(1, 2000.0)])
    assert v["stragglers"] == [] and v["spread"]["threshold_us"] is None
    assert v["spread"]["max_over_median"] == round(2000 / 1500, 3)


def test_spread_numbers():
    v = J.job_view([_s(r, float(t)) for r, t in enumerate([10, 20, 30, 40, 50])])
    sp = v["spread"]
    assert (sp["median_us"], sp["p90_us"], sp["max_us"], sp["mad_us"]) == (30.0, 46.0, 50.0, 10.0)


def test_errors_and_duplicates_are_reported():
    bad = {"status": "error", "path": "p", "file": "p", "error": "bad"}
    v = J.job_view([_s(0, 1.0), _s(0, 1.0, file="other"), bad])
    assert v["duplicate_ranks"] == [0] and v["errors"] == [{"file": "p", "path": "p", "error": "bad"}]


def test_job_kind_needs_two_distinct_ranks():
    assert J.job_kind([0, 1]) == (True, "2 ranks")
    assert J.job_kind([0, 1, None, 1])[0] is True
    is_job, why = J.job_kind([0, 0])  # an eager trace beside its CUDA-graph twin, both rank 0
    assert not is_job and "rank 0" in why
    assert J.job_kind([None, None])[0] is False  # two runs of one script (host_pid1, host_pid2)
    assert J.job_kind([3]) == (False, "one trace")
    v = J.job_view([_s(0, 1.0), _s(0, 1.0, file="other")])
    assert v["job"] is False and "rank 0" in v["job_reason"]
    assert J.rank_from_name("x_rank12.3.pt.trace.json.gz") == 12 and J.rank_from_name("host_123.pt.trace.json") is None
