"""Every route of the plugin, through TensorBoard's WSGI app and werkzeug's test client."""

from __future__ import annotations

import os
import threading

import pytest

from conftest import PREFIX, XSS, Served, put, sample_file, xss_trace
from tb_attention_plugin.analyze import analyze_path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "math", "sdpa_math_s2048_fwd")
    put(logdir, "gpt", "gpt4l_sdpa_train")
    s = Served(logdir)
    s.settled(3)
    yield s
    s.close()


def test_frontend_metadata_and_static(two_runs):
    s = two_runs
    p = s.plugin
    assert p.plugin_name == "attention"
    md = p.frontend_metadata()
    assert md.es_module_path == "/index.js" and md.tab_name == "Attention"
    r = s.get("/index.js")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/javascript")
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert b"render" in r.data
    r = s.get("/index.css")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/css")
    for bad in ("/static/../plugin.py", "/static/%2e%2e/plugin.py", "/static/nope.js", "/static/.hidden"):
        assert s.raw(bad).status_code == 404, bad
    # the listing that TensorBoard's frontend reads
    r = s.client.get("/data/plugins_listing")
    entry = r.json["attention"]
    assert entry["enabled"] is True and entry["tab_name"] == "Attention"
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/attention/index.js"}
    # the iframe's entry page imports our module
    r = s.client.get("/data/plugin_entry.html?name=attention")
    assert r.status_code == 200 and b"./index.js" in r.data


def test_is_active_is_cheap_and_follows_discovery(logdir, served):
    s = served()
    calls = []
    orig = s.loader._scanner.scan

    def counting():
        calls.append(threading.current_thread().name)
        return orig()

    s.loader._scanner.scan = counting
    assert s.plugin.is_active() is False
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    from conftest import wait_for

    wait_for(lambda: s.plugin.is_active(), what="is_active")
    main = threading.current_thread().name
    assert main not in calls  # is_active never scans in the caller's thread


def test_runs_listing(logdir, served):
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "nested/deeper/seed", "seed_mha")  # export_chrome_trace json
    put(logdir, "flash", "sdpa_flash_s2048_fwd", "host_42.1700000000000000000.pt.trace.json.gz")
    (logdir / "flash" / "config.json").write_text('{"lr": 0.1}')  # not a trace
    (logdir / "flash" / "events.out.tfevents.1.host").write_bytes(b"\0\0")
    hidden = logdir / ".hidden"
    hidden.mkdir()
    put(logdir, ".hidden", "sdpa_flash_s2048_fwd")
    s = served()
    d = s.settled(3)
    runs = {r["run"]: r for r in d["runs"]}
    assert set(runs) == {"flash", "nested/deeper/seed"}
    flash = runs["flash"]
    workers = {w["worker"]: w for w in flash["workers"]}
    assert set(workers) == {"sdpa_flash_s2048_fwd_rank0", "host_42"}
    assert workers["host_42"]["spans"] == [
        {"span": "1700000000000000000", "index": 1, "file": "host_42.1700000000000000000.pt.trace.json.gz"}
    ]
    seed = runs["nested/deeper/seed"]["files"][0]
    assert seed["worker"] == "attention_trace" and seed["span"] is None and seed["state"] == "ready"
    for f in flash["files"]:
        assert f["state"] == "ready" and f["device"] and f["steps"]
    assert d["counts"]["ready"] == 3 and d["scanned"] is True
    assert s.get("/status").json["counts"]["files"] == 3


def test_summary_phases_match_the_engine(two_runs):
    s = two_runs
    r = s.get("/summary", run="gpt")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    body = r.json
    assert body["state"] == "ready"
    assert body["selection"]["run"] == "gpt" and body["selection"]["step"] is None
    summ = body["summary"]
    ref = analyze_path(sample_file("gpt4l_sdpa_train"))
    for k in (
        "attention_time_us",
        "gpu_time_us",
        "forward_time_us",
        "backward_time_us",
        "fused_time_us",
        "attention_kernels",
        "phases",
        "notices",
        "device",
    ):
        assert summ[k] == ref[k], k
    assert "kernels" not in summ
    r = s.get("/phases", run="gpt")
    ph = r.json
    assert ph["phases"] == ref["phases"]
    dirs = {d["direction"]: d for d in ph["directions"]}
    assert set(dirs) == {"forward", "backward"}
    assert abs(dirs["forward"]["time_us"] - ref["forward_time_us"]) < 0.01


def test_kernels_filter_sort_paginate(two_runs):
    s = two_runs
    ref = analyze_path(sample_file("gpt4l_sdpa_train"))
    ref["kernels"] = list(ref["kernels"])
    att = [k for k in ref["kernels"] if k["attention"]]
    r = s.get("/kernels", run="gpt", limit=1000)
    d = r.json
    assert d["total"] == len(att) == ref["attention_kernels"] and d["all"] == len(ref["kernels"])
    durs = [k["dur_us"] for k in d["rows"]]
    assert durs == sorted(durs, reverse=True)
    # all GPU activity, ascending by name, paginated
    page1 = s.get("/kernels", run="gpt", scope="all", sort="name", order="asc", limit=10).json
    page2 = s.get("/kernels", run="gpt", scope="all", sort="name", order="asc", limit=10, offset=10).json
    assert page1["total"] == len(ref["kernels"]) and len(page1["rows"]) == 10
    names = [k["name"].lower() for k in page1["rows"] + page2["rows"]]
    assert names == sorted(names)
    assert {k["id"] for k in page1["rows"]}.isdisjoint({k["id"] for k in page2["rows"]})
    # filters
    fb = s.get("/kernels", run="gpt", phase="fused_attention", direction="backward", limit=1000).json
    assert fb["total"] == sum(1 for k in att if k["phase"] == "fused_attention" and k["direction"] == "backward") > 0
    assert all(k["phase"] == "fused_attention" and k["direction"] == "backward" for k in fb["rows"])
    two = s.get("/kernels", run="gpt", phase="qkv_proj,out_proj", limit=1000).json
    assert two["total"] == sum(1 for k in att if k["phase"] in ("qkv_proj", "out_proj"))
    cb = s.get("/kernels", run="gpt", bound="compute", limit=1000).json
    assert cb["total"] == sum(1 for k in att if k["bound"] == "compute")
    q = s.get("/kernels", run="gpt", q="FLASH_BPROP", limit=1000).json  # case-insensitive search
    assert q["total"] == sum(1 for k in att if "flash_bprop" in k["name"].lower()) > 0
    mod = s.get("/kernels", run="gpt", q="Block_2/SdpaAttention", limit=1000).json
    assert mod["total"] == sum(1 for k in att if "Block_2/SdpaAttention" in (k["module_path"] or ""))
    # a site of the Sites table (model.py): exactly its kernels
    site = ref["sites"][0]
    st = s.get("/kernels", run="gpt", site=site["name"], limit=1000).json
    assert st["total"] == site["kernels"] == sum(1 for k in att if k["site"] == site["name"]) > 0
    assert all(k["site"] == site["name"] for k in st["rows"])
    assert s.get("/kernels", run="gpt", site="no such site", limit=10).json["total"] == 0
    # nulls last, both directions
    for order in ("asc", "desc"):
        rows = s.get("/kernels", run="gpt", scope="all", sort="compute_util", order=order, limit=1000).json["rows"]
        vals = [k["compute_util"] for k in rows]
        known = [v for v in vals if v is not None]
        assert vals[: len(known)] == known and all(v is None for v in vals[len(known) :])
        assert known == sorted(known, reverse=order == "desc")
    # one kernel by id
    k0 = d["rows"][0]
    one = s.get("/kernel", run="gpt", id=k0["id"]).json
    assert one["kernel"] == k0
    assert s.get("/kernel", run="gpt", id=10**9).status_code == 404
    assert set(d["facets"]["phase"]) == {k["phase"] for k in att}


def test_roofline(two_runs):
    s = two_runs
    d = s.get("/roofline", run="gpt").json
    assert d["state"] == "ready" and d["grouped"] is True
    assert d["roofs"]["memory_bandwidth"] > 1e12 and d["roofs"]["compute"]["bf16"] > 1e14
    assert d["points"]
    for p in d["points"]:
        assert p["flops"] > 0 and p["bytes"] > 0 and p["intensity"] > 0 and p["achieved_flops_per_s"] > 0
        assert p["phase"] and p["bound"] and p["bound_reason"] and p["count"] >= 1
    times = [p["time_us"] for p in d["points"]]
    assert times == sorted(times, reverse=True)
    ungrouped = s.get("/roofline", run="gpt", group=0).json
    assert sum(p["count"] for p in d["points"]) == len(ungrouped["points"])
    capped = s.get("/roofline", run="gpt", group=0, limit=3).json
    assert len(capped["points"]) == 3 and capped["omitted"]["over_limit"] == len(ungrouped["points"]) - 3
    allk = s.get("/roofline", run="gpt", scope="all").json
    assert len(allk["points"]) >= len(d["points"])


def test_compare(two_runs):
    s = two_runs
    r = s.get("/compare", base="flash", new="math")
    assert r.status_code == 200, r.data
    d = r.json
    assert d["selection"]["base"]["run"] == "flash" and d["selection"]["new"]["run"] == "math"
    keys = {(x["phase"], x["direction"]) for x in d["phases"]}
    assert ("fused_attention", "forward") in keys
    fused = next(x for x in d["phases"] if x["phase"] == "fused_attention")
    assert fused["base"]["time_us"] > 0
    t = d["totals"]["attention_time_us"]
    assert t["delta"] == pytest.approx(t["new"] - t["base"], abs=1e-3)
    # the math backend decomposes attention: phases only on the new side
    only_new = [x for x in d["phases"] if x["base"] is None]
    assert only_new and all(x["new"]["time_us"] > 0 for x in only_new)
    assert s.get("/compare", base="flash").status_code == 400
    assert s.get("/compare", base="flash", new="nope").status_code == 404


def test_step_selection(two_runs):
    s = two_runs
    d = s.get("/summary", run="gpt", step="3").json
    assert d["state"] == "ready" and d["selection"]["step"] == "ProfilerStep#3"
    assert d["summary"]["step"] == "ProfilerStep#3"
    full = s.get("/summary", run="gpt").json["summary"]
    assert d["summary"]["attention_time_us"] < full["attention_time_us"]
    rows = s.get("/kernels", run="gpt", step="ProfilerStep#3", scope="all", limit=1000).json["rows"]
    assert rows and {k["step"] for k in rows} == {"ProfilerStep#3"}
    assert s.get("/summary", run="gpt", step="99").status_code == 404


def test_report_download(two_runs):
    s = two_runs
    r = s.get("/report", run="flash")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    assert r.headers["Content-Disposition"].startswith("attachment; filename=")
    d = r.json
    assert d["schema"] == 1 and len(d["traces"]) == 1
    ref = analyze_path(sample_file("sdpa_flash_s2048_fwd"))
    got = d["traces"][0]
    assert set(got) == set(ref)
    assert got["kernels"] == list(ref["kernels"]) and got["phases"] == ref["phases"]


@pytest.mark.parametrize(
    "route,params",
    [
        ("/summary", {}),
        ("/kernels", {"run": "gpt", "offset": "-1"}),
        ("/kernels", {"run": "gpt", "limit": "0"}),
        ("/kernels", {"run": "gpt", "limit": "5000"}),
        ("/kernels", {"run": "gpt", "limit": "ten"}),
        ("/kernels", {"run": "gpt", "sort": "__class__"}),
        ("/kernels", {"run": "gpt", "order": "sideways"}),
        ("/kernels", {"run": "gpt", "phase": "softmax,bogus"}),
        ("/kernels", {"run": "gpt", "bound": "io"}),
        ("/kernels", {"run": "gpt", "direction": "up"}),
        ("/kernels", {"run": "gpt", "scope": "everything"}),
        ("/kernels", {"run": "gpt", "kind": "sync"}),
        ("/kernels", {"run": "gpt", "q": "x" * 5000}),
        ("/kernels", {"run": "gpt", "q": "a\x00b"}),
        ("/summary", {"run": "gpt", "step": "three"}),
        ("/roofline", {"run": "gpt", "group": "maybe"}),
        ("/roofline", {"run": "gpt", "limit": "0"}),
        ("/kernel", {"run": "gpt"}),
        ("/kernel", {"run": "gpt", "id": "x"}),
        ("/compare", {"new": "gpt"}),
    ],
)
def test_bad_parameters_are_400(two_runs, route, params):
    r = two_runs.get(route, **params)
    assert r.status_code == 400, (route, params, r.data)
    assert r.headers["Content-Type"] == "application/json"
    assert r.json["error"]


@pytest.mark.parametrize(
    "params",
    [
        {"run": "nope"},
        {"run": "gpt", "worker": "nope"},
        {"run": "gpt", "span": "123"},
        {"run": "gpt", "file": "other.pt.trace.json"},
        {"run": "gpt", "step": "42"},
    ],
)
def test_unknown_names_are_404(two_runs, params):
    r = two_runs.get("/summary", **params)
    assert r.status_code == 404, (params, r.data)
    assert r.json["error"]


ESCAPES = [
    "../",
    "..",
    "../../etc",
    "gpt/../..",
    "/etc",
    "/etc/passwd",
    "~root",
    "..\\..\\windows",
    "C:\\Windows",
    "C:/Windows",
    "%2e%2e%2f",
    "%2e%2e",
    "..%2f..%2fetc",
    "%252e%252e%252fetc",
    "gpt\x00",
    "gpt/../../../etc",
]


@pytest.mark.parametrize("value", ESCAPES)
@pytest.mark.parametrize("key", ["run", "worker", "span", "file"])
def test_path_escapes_are_refused(two_runs, key, value):
    params = {"run": "gpt", key: value}
    r = two_runs.get("/summary", **params)
    assert r.status_code in (400, 404), (key, value, r.status_code)
    assert r.json["error"]


def test_raw_encoded_escapes(two_runs):
    s = two_runs
    for q in (
        "/summary?run=..%2F..%2Fetc",
        "/summary?run=%2Fetc%2Fpasswd",
        "/summary?run=%252e%252e%252f",
        "/kernels?run=gpt&file=..%2F..%2Fsetup.py",
        "/report?run=%2e%2e",
        "/summary?run=gpt&file=%2Fetc%2Fpasswd",
        "/report?run=gpt&file=..%5C..%5Csetup.py",
    ):
        r = s.raw(q)
        assert r.status_code == 400, (q, r.status_code, r.data)


def test_symlinks_out_of_the_logdir_are_not_served(tmp_path, logdir, served):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.pt.trace.json.gz"
    secret.write_bytes(open(sample_file("sdpa_flash_s2048_fwd"), "rb").read())
    put(logdir, "good", "sdpa_flash_s2048_fwd")
    os.symlink(str(outside), str(logdir / "linked_dir"))  # directory symlink
    (logdir / "good" / "link.pt.trace.json.gz").symlink_to(secret)  # file symlink escaping
    inner = logdir / "good" / "inner.pt.trace.json.gz"  # symlink staying inside
    inner.symlink_to(logdir / "good" / os.listdir(logdir / "good")[0])
    s = served()
    d = s.settled(2)
    runs = {r["run"]: r for r in d["runs"]}
    assert set(runs) == {"good"}
    names = {f["file"] for f in runs["good"]["files"]}
    assert "link.pt.trace.json.gz" not in names and "inner.pt.trace.json.gz" in names
    # the links not followed are named (relative to the logdir, never their targets), so that a
    # log directory of links is not an empty tab without a reason; a link staying inside is read
    assert sorted(d["skipped_links"]) == ["good/link.pt.trace.json.gz", "linked_dir"]
    assert s.get("/summary", run="linked_dir").status_code == 404
    assert s.get("/summary", run="good", file="link.pt.trace.json.gz").status_code == 404


def test_xss_names_are_plain_json_text(logdir, served):
    xss_trace(str(logdir / "xss" / "x.pt.trace.json.gz"))
    s = served()
    s.settled(1)
    rows = s.get("/kernels", run="xss", scope="all").json["rows"]
    assert rows and all(k["name"] == XSS for k in rows)
    r = s.get("/kernels", run="xss", scope="all")
    assert r.headers["Content-Type"] == "application/json"


def test_methods_other_than_get_are_refused(two_runs):
    r = two_runs.client.post(PREFIX + "/runs")
    assert r.status_code == 405
