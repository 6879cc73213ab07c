"""What the tab's second pass (issue #21) needs from the routes: which runs are jobs, a job's
stragglers in the runs overview, the partial analysis of a truncated file, server paths kept out
of the answers, the page's short kernel names, and roofline utilisations capped like the rows'."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time

import pytest

from conftest import put, read_trace, sample_file, wait_for

ROOT_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
MODERN = os.path.join(ROOT_DATA, "modern")
DDP2 = os.path.join(ROOT_DATA, "ddp2", "ddp2_gpt_sdpa")


def _copy(src_dir: str, dst_dir, name: str = None) -> str:
    files = sorted(f for f in os.listdir(src_dir) if f.endswith(".json.gz"))
    if not files:
        pytest.skip(f"no trace in {src_dir}")
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(str(dst_dir), name or files[0])
    shutil.copyfile(os.path.join(src_dir, files[0]), dst)
    return dst


def _ready(s, **sel):
    def ok():
        r = s.get("/summary", **sel)
        return r.status_code == 200 and r.json.get("state") == "ready" and r.json

    return wait_for(ok, what=f"summary of {sel}")


@pytest.mark.parametrize("named", [False, True])
def test_one_ranks_traces_are_not_a_job(logdir, served, named):
    """An eager trace beside its CUDA-graph twin: two workers of one rank (0 in both names, or
    no rank at all), not a job of two ranks; the reference found beside the replay is named by
    its path in the log directory, not the server's."""
    run = logdir / "decode"
    eager = "decode_eager_rank0.1.pt.trace.json.gz" if named else None
    replay = "decode_replay_rank0.2.pt.trace.json.gz" if named else None
    _copy(os.path.join(MODERN, "decode_graph_eager"), run, eager)
    rp = _copy(os.path.join(MODERN, "decode_graph_replay"), run, replay)
    put(logdir, "ddp", "sdpa_flash_s2048_fwd")  # a control: not a job either (one trace)
    s = served()
    s.settled(3)
    runs = {r["run"]: r for r in s.runs()["runs"]}
    assert len(runs["decode"]["workers"]) == 2
    assert runs["decode"]["job"] is False and ("rank 0" in runs["decode"]["job_reason"]) == named
    assert runs["ddp"]["job"] is False
    ranks = s.get("/ranks", run="decode").json
    assert ranks["job"] is False and len(ranks["ranks"]) == 2
    summ = _ready(s, run="decode", file=os.path.basename(rp))
    ref = summ["summary"]["graphs"]["reference"]
    assert ref == "decode/" + (eager or sorted(os.listdir(run))[0]), ref
    assert not os.path.isabs(summ["summary"]["path"]) and summ["summary"]["path"].startswith("decode/")
    assert str(logdir) not in json.dumps(summ)


def test_two_ranks_are_a_job(logdir, served):
    if not os.path.isdir(DDP2):
        pytest.skip("tests/data/ddp2 is not available")
    for f in sorted(os.listdir(DDP2)):
        os.makedirs(logdir / "ddp2", exist_ok=True)
        shutil.copyfile(os.path.join(DDP2, f), logdir / "ddp2" / f)
    s = served()
    s.settled(2)
    (run,) = s.runs()["runs"]
    assert run["job"] is True and run["job_reason"] == "2 ranks"
    assert s.get("/ranks", run="ddp2").json["job"] is True
    row = s.get("/overview").json["runs"][0]
    assert row["job"]["ranks"] == 2 and row["job"]["stragglers"] == [] and row["job"]["min_ranks"] == 3


def _rank_trace(dst, rank: int, world: int, slow: float = 1.0) -> None:
    data = read_trace("sdpa_flash_s2048_fwd")
    data["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") == "kernel" and isinstance(ev.get("dur"), (int, float)):
            ev["dur"] = ev["dur"] * slow
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        json.dump(data, f)


def test_a_straggler_job_says_so_in_the_overview(logdir, served):
    """Rank 3 of 4 runs its kernels 1.5x longer: its Runs row names it (the row's figures are
    rank 0's trace, the Trace view's default)."""
    for r in range(4):
        _rank_trace(str(logdir / "job" / f"host_{r}.{100 + r}.pt.trace.json.gz"), r, 4, 1.5 if r == 3 else 1.0)
    s = served()
    s.settled(4)
    assert s.runs()["runs"][0]["job"] is True

    def row():
        j = s.get("/overview").json["runs"][0].get("job")
        return j if j and j["state"] == "ready" else None

    j = wait_for(row, what="the job's summaries")
    assert j["ranks"] == 4 and [x["rank"] for x in j["stragglers"]] == [3]
    assert j["stragglers"][0]["excess_pct"] > 40 and j["max_over_median"] > 1.4


def test_truncated_file_offers_its_partial_analysis(logdir, served):
    data = gzip.decompress(open(sample_file("naive_bf16_s2048_fwd"), "rb").read())
    path = logdir / "cut" / "cut.pt.trace.json"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) * 9 // 10])  # the kernels are at the end: most of them kept
    old = time.time() - 3600
    os.utime(path, (old, old))
    s = served(grace_secs=30.0)
    s.settled(1)
    f = s.runs()["runs"][0]["files"][0]
    assert f["state"] == "incomplete" and f["truncated"] is True
    assert s.get("/summary", run="cut").json["state"] == "incomplete"
    r = _ready(s, run="cut", partial="1")
    assert r["selection"]["partial"] is True
    tr = r["summary"]["trace"]
    assert tr["partial"] is True and tr["truncated"] is True
    assert r["summary"]["attention_kernels"] > 0  # the events before the cut hold attention kernels
    k = s.get("/kernels", run="cut", partial="1").json
    assert k["state"] == "ready" and k["total"] > 0
    # the whole file stays incomplete, and is counted once
    assert s.runs()["runs"][0]["files"][0]["state"] == "incomplete"
    assert s.get("/status").json["counts"]["files"] == 1 and s.get("/status").json["counts"]["incomplete"] == 1


def test_complete_file_with_partial_is_its_report(logdir, served):
    put(logdir, "run", "sdpa_flash_s2048_fwd")
    s = served()
    s.settled(1)
    whole = _ready(s, run="run")["summary"]
    part = _ready(s, run="run", partial="1")["summary"]
    assert not part["trace"].get("partial") and part["attention_time_us"] == whole["attention_time_us"]


def test_kernel_names_as_the_page_shows_them(logdir, served):
    from tb_attention_plugin.formats import short_kernel_name

    put(logdir, "run", "naive_bf16_s2048_fwd")
    s = served()
    s.settled(1)
    rows = s.get("/kernels", run="run", scope="all", limit=1000).json["rows"]
    assert rows and all(len(r["short_name"]) <= 120 for r in rows)
    fits = [r for r in rows if len(short_kernel_name(r["name"])) <= 120]
    assert all(r["short_name"] == short_kernel_name(r["name"]) for r in fits)
    long = [r for r in rows if len(r["name"]) > 160]
    assert long and all(len(r["short_name"]) <= 120 and "<" not in r["short_name"] for r in long)
    pts = s.get("/roofline", run="run", scope="all").json["points"]
    assert pts and all(p["short_name"] == short_kernel_name(p["name"]) for p in pts if len(p["name"]) < 200)
    summ = _ready(s, run="run")
    names = {k["name"] for p in summ["summary"]["phases"] for k in p["top_kernels"]}
    assert names and set(summ["short_names"]) == names | {
        k["name"] for a in summ["summary"]["advice"] for k in a["evidence"].get("kernels") or []
    }


def test_roofline_utilisations_are_capped_like_the_rows(logdir, served):
    put(logdir, "run", "gpt4l_naive_train")
    s = served()
    s.settled(1)
    for group in ("1", "0"):
        pts = s.get("/roofline", run="run", scope="all", group=group).json["points"]
        assert pts
        for p in pts:
            for k in ("compute_util", "memory_util"):
                assert p[k] is None or 0 <= p[k] <= 1.0, (p["name"][:60], k, p[k])
