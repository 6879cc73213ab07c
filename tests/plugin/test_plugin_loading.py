"""Background discovery and loading: traces added, changed, removed, broken, half-written;
worker processes; memory bound; the kernel table's speed on 100k+ kernels."""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import time

from conftest import put, read_trace, sample_file, wait_for
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.server import index as I


def test_bad_trace_next_to_a_good_one(logdir, served):
    put(logdir, "mixed", "sdpa_flash_s2048_fwd")
    (logdir / "mixed" / "broken.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": ')
    (logdir / "mixed" / "garbage.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00not gzip at all")
    (logdir / "mixed" / "empty.pt.trace.json").write_bytes(b"")
    put(logdir, "other", "sdpa_math_s2048_fwd")
    s = served()
    d = s.settled(5)
    files = {f["file"]: f for r in d["runs"] for f in r["files"]}
    for bad in ("broken.pt.trace.json", "garbage.pt.trace.json.gz", "empty.pt.trace.json"):
        assert files[bad]["state"] == "error" and files[bad]["message"], bad
    assert d["counts"]["error"] == 3 and d["counts"]["ready"] == 2
    # the run's default selection is the good trace; the bad one answers with its message
    r = s.get("/summary", run="mixed").json
    assert r["state"] == "ready" and r["selection"]["file"].startswith("sdpa_flash")
    r = s.get("/summary", run="mixed", file="broken.pt.trace.json")
    assert r.status_code == 200 and r.json["state"] == "error" and r.json["error"]
    assert s.get("/kernels", run="mixed", file="garbage.pt.trace.json.gz").json["state"] == "error"
    assert s.get("/summary", run="other").json["state"] == "ready"


def test_trace_added_after_start_appears(logdir, served):
    put(logdir, "first", "sdpa_flash_s2048_fwd")
    s = served()
    s.settled(1)
    put(logdir, "later", "sdpa_math_s2048_fwd")
    d = s.settled(2)
    assert {r["run"] for r in d["runs"]} == {"first", "later"}
    assert s.get("/summary", run="later").json["state"] == "ready"


def test_modified_trace_is_analysed_again(logdir, served):
    dst = put(logdir, "run", "sdpa_flash_s2048_fwd", "w.pt.trace.json.gz")
    s = served()
    s.settled(1)
    before = s.get("/summary", run="run").json["summary"]
    # another trace under the same name (as a profiler that rewrites its file would)
    tmp = str(logdir / ".tmp.gz")
    shutil.copyfile(sample_file("sdpa_math_s2048_fwd"), tmp)
    os.replace(tmp, dst)
    st = os.stat(dst)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    def changed():
        r = s.get("/summary", run="run")
        return (
            r.status_code == 200
            and r.json.get("state") == "ready"
            and r.json["summary"]["attention_time_us"] != before["attention_time_us"]
            and r.json
        )

    after = wait_for(changed, what="re-analysis")["summary"]
    ref = analyze_path(sample_file("sdpa_math_s2048_fwd"))
    assert after["attention_time_us"] == ref["attention_time_us"]
    assert after["phases"] == ref["phases"]


def test_removed_trace_disappears(logdir, served):
    keep = put(logdir, "keep", "sdpa_flash_s2048_fwd")
    gone = put(logdir, "gone", "sdpa_math_s2048_fwd")
    s = served()
    s.settled(2)
    os.remove(gone)
    wait_for(lambda: [r["run"] for r in s.runs()["runs"]] == ["keep"], what="removal")
    assert s.get("/summary", run="gone").status_code == 404
    assert s.get("/summary", run="keep").json["state"] == "ready"
    assert os.path.exists(keep)


def test_half_written_trace_waits_then_loads(logdir, served):
    data = gzip.decompress(open(sample_file("sdpa_flash_s2048_fwd"), "rb").read())
    d = logdir / "live"
    d.mkdir()
    path = d / "host_1.1700000000000000001.pt.trace.json"
    path.write_bytes(data[: len(data) // 2])  # the profiler is still writing
    s = served(grace_secs=30.0)
    wait_for(
        lambda: (
            s.file_states().get("live/host_1.1700000000000000001.pt.trace.json") == "waiting"
            and s.loader.status()["queue"] == 0
            and not s.loader.status()["loading"]
        ),
        what="waiting state",
    )
    time.sleep(0.3)  # several polls: it must stay waiting, not error
    assert s.file_states()["live/host_1.1700000000000000001.pt.trace.json"] == "waiting"
    r = s.get("/summary", run="live")
    assert r.status_code == 202 and r.json["state"] == "waiting"
    with open(path, "ab") as f:  # the writer finishes
        f.write(data[len(data) // 2 :])
    wait_for(
        lambda: s.file_states().get("live/host_1.1700000000000000001.pt.trace.json") == "ready",
        what="ready after completion",
    )
    summ = s.get("/summary", run="live").json["summary"]
    assert summ["attention_time_us"] == analyze_path(sample_file("sdpa_flash_s2048_fwd"))["attention_time_us"]
    assert not summ["warnings"]


def test_truncated_old_trace_is_incomplete_not_cpu_only(logdir, served):
    """A file that stays truncated past the grace period is "incomplete" (in /runs, /status and
    every route), with the truncation message: never analysed as a trace without GPU kernels."""
    data = gzip.decompress(open(sample_file("sdpa_flash_s2048_fwd"), "rb").read())
    path = logdir / "cut" / "old.pt.trace.json"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) * 2 // 3])
    old = time.time() - 3600
    os.utime(path, (old, old))
    s = served(grace_secs=30.0)
    s.settled(1)
    r = s.get("/summary", run="cut").json
    assert r["state"] == "incomplete" and r["error"].startswith("truncated: ")
    f = s.runs()["runs"][0]["files"][0]
    assert f["state"] == "incomplete" and f["message"] == r["error"] and "notices" not in f
    assert s.get("/status").json["counts"]["incomplete"] == 1


def test_fresh_file_waits_for_settling(logdir, served):
    s = served(settle_secs=3600.0, poll_secs=0.05)  # every new file looks "just modified"
    put(logdir, "new", "sdpa_flash_s2048_fwd")
    # first seen: waiting; unchanged at the next poll: analysed
    wait_for(
        lambda: s.file_states().get(next(iter(s.file_states()), None)) in ("queued", "loading", "ready"),
        what="queued after one stable poll",
    )
    s.settled(1)


def test_worker_process_mode(logdir, served):
    put(logdir, "a", "sdpa_flash_s2048_fwd")
    (logdir / "a" / "bad.pt.trace.json").write_text("not json")
    s = served(mode="process")
    d = s.settled(2)
    states = {f["file"]: f["state"] for r in d["runs"] for f in r["files"]}
    assert sorted(states.values()) == ["error", "ready"]
    k = s.get("/kernels", run="a", scope="all").json
    assert k["state"] == "ready" and k["total"] > 0
    pid = s.loader._procs[0].pid
    assert pid is not None and pid != os.getpid()


def test_a_worker_that_dies_fails_only_its_trace(logdir, served):
    put(logdir, "a", "sdpa_flash_s2048_fwd")
    crash = [sys.executable, "-c", "import os, sys; sys.stdin.buffer.read(8); os._exit(3)"]
    s = served(mode="process", worker_cmd=crash)
    d = s.settled(1)
    f = d["runs"][0]["files"][0]
    assert f["state"] == "error" and "exited unexpectedly" in f["message"]
    assert s.get("/status").status_code == 200  # the server is fine


def test_memory_budget_evicts_and_reloads(logdir, served):
    put(logdir, "a", "gpt4l_sdpa_train")
    put(logdir, "b", "gpt4l_naive_train")
    s = served(memory_budget=1)  # only the latest index stays
    s.settled(2)
    st = s.get("/status").json
    assert st["memory"]["indexes"] == 1
    for run in ("a", "b", "a"):
        r = s.get("/kernels", run=run, limit=5)
        assert r.status_code == 200 and r.json["state"] == "ready" and len(r.json["rows"]) == 5
    assert s.get("/status").json["memory"]["indexes"] == 1
    # summaries stay available without reloading
    assert s.get("/summary", run="b").json["state"] == "ready"


def test_disk_cache_is_used(logdir, served, tmp_path):
    put(logdir, "a", "sdpa_flash_s2048_fwd")
    cache = tmp_path / "cache"
    s = served(use_cache=True, cache_dir=str(cache))
    s.settled(1)
    assert any(cache.iterdir())
    s.close()
    s2 = served(use_cache=True, cache_dir=str(cache))
    d = s2.settled(1)
    assert d["runs"][0]["files"][0]["state"] == "ready"


def _big_report(n_target: int = 120_000) -> dict:
    """A real report whose kernel rows are repeated to 100k+ (ids renumbered)."""
    rep = analyze_path(sample_file("gpt4l_sdpa_train"))
    rows = list(rep["kernels"])
    reps = n_target // len(rows) + 1
    big = []
    for r in range(reps):
        for k in rows:
            k2 = dict(k)
            k2["id"] = len(big)
            k2["dur_us"] = (k["dur_us"] or 0) * (1 + (r % 7) * 0.01)
            big.append(k2)
    rep["kernels"] = big
    return rep


def test_kernel_queries_on_100k_kernels():
    """Every kind of query answers on a 120k-kernel table, with consistent totals and pages.
    (Speed is measured by benchmarks/bench_routes.py on a 1M-event trace, not here.)"""
    rep = _big_report()
    loaded = I.build(rep)
    t = loaded.kernels
    assert t.n >= 100_000
    queries = [
        I.KernelQuery(),
        I.KernelQuery(scope="all"),
        I.KernelQuery(scope="all", sort="name", descending=False),
        I.KernelQuery(scope="all", sort="compute_util"),
        I.KernelQuery(phase=["fused_attention"], direction="backward"),
        I.KernelQuery(bound=["latency", "memory"], sort="memory_util"),
        I.KernelQuery(scope="all", q="nvjet"),
        I.KernelQuery(scope="all", q="block_3/sdpa", sort="phase"),
        I.KernelQuery(scope="all", offset=90_000, limit=500),
        I.KernelQuery(scope="other", sort="module_path"),
    ]
    outs = [I.query_kernels(t, q) for q in queries]
    assert outs[1]["total"] == t.n and outs[0]["total"] + outs[-1]["total"] == t.n
    assert all(
        0 <= o["total"] <= t.n and len(o["rows"]) == min(q.limit, max(0, o["total"] - q.offset))
        for o, q in zip(outs, queries)
    )
    names = [r["name"] for r in outs[2]["rows"]]
    assert names == sorted(names)
    assert I.roofline(loaded)["points"]


def test_kernels_route_on_100k_kernels(logdir, served):
    """Through the HTTP route (validation, lookup, JSON) with a 120k-kernel report."""
    put(logdir, "big", "sdpa_flash_s2048_fwd")
    big = I.build(_big_report())

    def job(*args):
        return {"status": "ok", "loaded": big, "truncated": False, "seconds": 0.0}

    s = served(job=job)
    s.settled(1)
    params = [
        dict(),
        dict(scope="all", sort="name", order="asc"),
        dict(scope="all", q="elementwise"),
        dict(phase="qkv_proj,out_proj", sort="compute_util"),
        dict(scope="all", offset=100_000, limit=100),
        dict(bound="latency", direction="backward", sort="memory_util", order="asc"),
    ]
    for p in params:
        r = s.get("/kernels", run="big", **p)
        assert r.status_code == 200 and r.json["all"] >= 100_000
        assert len(r.json["rows"]) == min(r.json["limit"], max(0, r.json["total"] - r.json["offset"]))


def test_plain_list_reports_are_indexed_too():
    rep = analyze_path(sample_file("sdpa_math_s2048_fwd"))
    rows = list(rep["kernels"])
    rep_list = dict(rep, kernels=rows)
    a, b = I.build(rep), I.build(rep_list)
    for q in (I.KernelQuery(scope="all", sort="name", descending=False), I.KernelQuery(q="softmax")):
        assert I.query_kernels(a.kernels, q) == I.query_kernels(b.kernels, q)
    assert I.roofline(a) == I.roofline(b)
    assert b.report()["kernels"] == rows


def test_export_chrome_trace_json_is_found(logdir, served):
    put(logdir, "seed", "seed_mha")
    s = served()
    d = s.settled(1)
    f = d["runs"][0]["files"][0]
    assert f["file"] == "attention_trace.json" and f["state"] == "ready"
    data = read_trace("seed_mha")
    assert s.get("/summary", run="seed").json["summary"]["trace"]["events"] >= len(data["traceEvents"]) // 2
