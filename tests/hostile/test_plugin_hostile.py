"""The plugin against the hostile corpus: every broken file shows its error, every other run
keeps working, no route ever answers 5xx, loading stays bounded in threads and memory."""

from __future__ import annotations

import gzip
import json
import os
import re
import resource
import threading
import time

import pytest

from conftest import harness
from tb_attention_plugin.options import Options

PREFIX = harness.PREFIX
MAX_BYTES = 64 << 20  # the bombs hit the decompressed-size cap quickly


def _all_routes(s, run: str, file: str = None) -> dict:
    """Every route about one trace: path -> status."""
    sel = {"run": run, "file": file}
    out = {}
    for route, extra in (
        ("/summary", {}),
        ("/phases", {}),
        ("/kernels", {"scope": "all", "q": "<script>"}),
        ("/kernel", {"id": "0"}),
        ("/roofline", {"group": "0"}),
        ("/memory", {}),
        ("/report", {}),
        ("/annotated", {}),
        ("/timeline", {"width": "400"}),
    ):
        r = s.get(route, **sel, **extra)
        out[route] = r.status_code
        ctype = r.headers.get("Content-Type", "")
        if route == "/annotated" and r.status_code == 200:
            assert ctype in ("application/json", "application/gzip")
        else:
            assert ctype == "application/json", (route, ctype)
        assert r.headers.get("X-Content-Type-Options") == "nosniff", route
    r = s.get("/compare", base="good", new=run, new_file=file)
    out["/compare"] = r.status_code
    r = s.get("/overview")
    assert r.status_code == 200 and r.headers.get("Content-Type") == "application/json"
    return out


def test_the_corpus_in_a_logdir(corpus, served):
    root, cases = corpus
    s = served(root, options=Options(max_bytes=MAX_BYTES), mode="process")
    listed = [c for c in cases if c.plugin != "absent"]
    threads_before = threading.active_count()
    d = harness.wait_for(
        lambda: (
            lambda d: (
                d
                if d["scanned"]
                and d["counts"]["files"] == len(listed)
                and not (d["counts"]["waiting"] + d["counts"]["queued"] + d["counts"]["loading"])
                else None
            )
        )(s.runs()),
        timeout=120,
        what="the corpus analysed",
    )
    files = {f["path"]: f for r in d["runs"] for f in r["files"]}
    assert sorted(files) == sorted(c.rel for c in listed)
    for c in cases:
        if c.plugin == "absent":
            assert c.rel not in files and s.get("/summary", run=c.name).status_code == 404, c.name
            continue
        f = files[c.rel]
        assert f["state"] == c.plugin, (c.name, f["state"], f["message"])
        summ = s.get("/summary", run=c.name)
        assert summ.status_code == 200, (c.name, summ.status_code)
        if c.plugin in ("error", "incomplete"):
            assert re.search(c.problem, f["message"]), (c.name, f["message"])
            assert summ.json["state"] == c.plugin and summ.json["error"] == f["message"]
            assert "\n" not in f["message"] and "Traceback" not in f["message"]
        elif c.cli == "warn":
            assert any(re.search(c.problem, w) for w in summ.json["summary"]["warnings"]), (
                c.name,
                summ.json["summary"]["warnings"],
            )
        # every route about this trace answers, none with 5xx (errors are JSON with the message)
        codes = _all_routes(s, c.name, os.path.basename(c.rel))
        assert all(code < 500 for code in codes.values()), (c.name, codes)
        if c.plugin == "ready":
            assert codes["/summary"] == codes["/phases"] == codes["/kernels"] == codes["/roofline"] == 200, codes
    # the good run next to all of it is untouched
    ok = s.get("/kernels", run="good", scope="all").json
    assert ok["state"] == "ready" and ok["total"] > 0
    st = s.get("/status").json
    assert st["counts"]["ready"] + st["counts"]["error"] + st["counts"]["incomplete"] == len(listed)
    assert threading.active_count() <= threads_before + 1


def test_thousands_of_tiny_traces_in_one_run(tmp_path, served):
    """2000 traces: all analysed, no thread per trace, memory that does not grow with them."""
    from corpus import write_tiny_traces

    logdir = tmp_path / "logs"
    logdir.mkdir()
    write_tiny_traces(str(logdir / "many_tiny"), 2000)
    harness.put(logdir, "good", "sdpa_flash_s2048_fwd")
    threads0 = threading.active_count()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    s = served(str(logdir), mode="process")
    t0 = time.monotonic()
    peak_threads = [0]

    def done():
        peak_threads[0] = max(peak_threads[0], threading.active_count())
        d = s.runs()
        c = d["counts"]
        return d if d["scanned"] and c["files"] == 2001 and c["ready"] == 2001 else None

    d = harness.wait_for(done, timeout=120, interval=0.2, what="2001 traces analysed")
    took = time.monotonic() - t0
    assert peak_threads[0] <= threads0 + 2, peak_threads  # a poller and one worker thread, whatever the count
    run = next(r for r in d["runs"] if r["run"] == "many_tiny")
    assert len(run["files"]) == 2000 and len(run["workers"]) == 2000
    t = time.monotonic()
    assert s.get("/runs").status_code == 200 and time.monotonic() - t < 2.0
    assert s.get("/summary", run="many_tiny", file="w01999.2000.pt.trace.json").json["state"] == "ready"
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    print(
        f"2001 traces analysed in {took:.1f} s; peak threads {peak_threads[0]} (from {threads0}); "
        f"max RSS grew {grown_mb:.0f} MB"
    )
    assert grown_mb < 400
    s.close()
    time.sleep(0.2)
    assert threading.active_count() <= threads0


def _events_json(n: int, start: float = 1000.0) -> list:
    evs = []
    for i in range(n):
        ts = start + 10 * i
        evs.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::softmax",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 5,
                "args": {"External id": i + 1},
            }
        )
        evs.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i + 1, "External id": i + 1},
            }
        )
        evs.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "softmax_warp_forward",
                "pid": 0,
                "tid": 7,
                "ts": ts + 3,
                "dur": 4,
                "args": {"correlation": i + 1, "External id": i + 1, "device": 0, "stream": 7},
            }
        )
    return evs


def test_a_file_that_grows_while_it_is_watched(tmp_path, served):
    """A profiler writing a trace slowly: it waits (never 'error'), then loads whole."""
    logdir = tmp_path / "logs"
    (logdir / "live").mkdir(parents=True)
    path = logdir / "live" / "w.1.pt.trace.json"
    body = ",\n".join(json.dumps(e) for e in _events_json(3000)).encode()
    data = b'{"schemaVersion": 1, "traceEvents": [\n' + body + b"\n]}"
    s = served(str(logdir), grace_secs=30.0, settle_secs=0.2, poll_secs=0.05)
    states = set()
    with open(path, "wb") as f:
        for k in range(20):  # 20 appends over ~2 s, cut anywhere
            f.write(data[k * len(data) // 20 : (k + 1) * len(data) // 20])
            f.flush()
            time.sleep(0.1)
            states.update(s.file_states().values())
            if k in (5, 12):  # a page asking meanwhile (it long-polls up to 1.5 s)
                r = s.get("/summary", run="live")
                assert r.status_code in (202, 200, 404), r.status_code
                if r.status_code == 200:
                    assert r.json["state"] != "error", r.json
    assert "error" not in states, states
    harness.wait_for(
        lambda: s.file_states().get("live/w.1.pt.trace.json") == "ready", timeout=30, what="ready once complete"
    )
    k = s.get("/kernels", run="live", scope="all").json
    assert k["total"] == 3000
    assert not s.get("/summary", run="live").json["summary"]["warnings"]


def test_a_file_deleted_or_replaced_while_it_is_analysed(tmp_path, served):
    logdir = tmp_path / "logs"
    (logdir / "big").mkdir(parents=True)
    harness.put(logdir, "good", "sdpa_flash_s2048_fwd")
    big = logdir / "big" / "w.1.pt.trace.json.gz"
    with gzip.open(big, "wt") as f:  # ~8 MB of JSON: long enough to catch it loading
        json.dump({"traceEvents": _events_json(20000)}, f)
    s = served(str(logdir), mode="process")
    harness.wait_for(
        lambda: s.file_states().get("big/w.1.pt.trace.json.gz") == "loading", timeout=30, interval=0.01, what="loading"
    )
    os.remove(big)
    harness.wait_for(lambda: "big/w.1.pt.trace.json.gz" not in s.file_states(), what="gone")
    assert s.get("/summary", run="big").status_code == 404
    assert s.get("/summary", run="good").json["state"] == "ready"
    # replaced while loading: analysed again, the old result never shows
    with gzip.open(big, "wt") as f:
        json.dump({"traceEvents": _events_json(20000)}, f)
    harness.wait_for(
        lambda: s.file_states().get("big/w.1.pt.trace.json.gz") == "loading",
        timeout=30,
        interval=0.01,
        what="loading again",
    )
    tmp = logdir / ".swap"
    with open(tmp, "w") as f:
        json.dump({"traceEvents": _events_json(7)}, f)
    os.replace(tmp, big)
    harness.wait_for(
        lambda: (lambda r: r.status_code == 200 and r.json.get("state") == "ready" and r.json["total"] == 7)(
            s.get("/kernels", run="big", scope="all")
        ),
        timeout=60,
        what="the replacement analysed",
    )


@pytest.mark.skipif(os.uname().sysname == "Darwin", reason="macOS refuses file names that are not UTF-8")
def test_names_that_are_not_utf8(tmp_path, served):
    """One such file name made every /runs answer 500 (surrogates cannot be encoded as JSON)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    harness.put(logdir, "good", "sdpa_flash_s2048_fwd")
    raw_dir = os.path.join(os.fsencode(str(logdir)), b"run\xff")
    os.mkdir(raw_dir)
    with open(harness.sample_file("sdpa_math_s2048_fwd"), "rb") as src:
        blob = src.read()
    with open(os.path.join(raw_dir, b"w\xfe.1.pt.trace.json.gz"), "wb") as f:
        f.write(blob)
    s = served(str(logdir))
    d = s.settled(2)
    runs = {r["run"]: r for r in d["runs"]}
    assert set(runs) == {"good", "run\ufffd"}
    f = runs["run\ufffd"]["files"][0]
    assert f["file"] == "w\ufffd.1.pt.trace.json.gz" and f["state"] == "ready"
    r = s.get("/summary", run="run\ufffd", file=f["file"])
    assert r.status_code == 200 and r.json["state"] == "ready"
