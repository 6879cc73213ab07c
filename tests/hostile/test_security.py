"""Every route parameter that names a run, worker, span or file resolves inside the log
directory, and only through the table discovery built: path tricks in every spelling, symlinks
out of the logdir (also swapped in after a scan), and every answer JSON with nosniff."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

from conftest import harness

PREFIX = harness.PREFIX
SECRET = "SECRET_7f3a_do_not_serve"
TRACE_ROUTES = (
    "/summary",
    "/phases",
    "/kernels",
    "/kernel",
    "/roofline",
    "/memory",
    "/report",
    "/annotated",
    "/timeline",
)
NAME_KEYS = ("run", "worker", "span", "file")
TRICKS = [
    "..",
    "../",
    "../..",
    "../../../../etc/passwd",
    "gpt/..",
    "gpt/../..",
    "gpt/./../..",
    "./../gpt",
    "/etc/passwd",
    "/",
    "~",
    "~root",
    "..\\..\\windows",
    "gpt\\..\\..",
    "C:\\Windows\\win.ini",
    "C:/Windows",
    "%2e%2e",
    "%2e%2e%2f",
    "..%2f..%2fetc",
    "%2E%2E%2F%2E%2E%2F",
    "%252e%252e%252f",
    "%25252e%25252e",
    "..%5c..%5c",
    "%c0%ae%c0%ae%c0%af",
    "\uff0e\uff0e/",
    "gpt\x00",
    "\x00",
    "gpt\n",
    "a" * 5000,
    "linked_dir",
    "evil.pt.trace.json.gz",
    "outside",
    "secret.pt.trace.json.gz",
]


@pytest.fixture
def world(tmp_path, served):
    logdir = tmp_path / "logs"
    outside = tmp_path / "outside"
    logdir.mkdir()
    outside.mkdir()
    harness.put(logdir, "gpt", "sdpa_flash_s2048_fwd", "w.1.pt.trace.json.gz")
    harness.put(logdir, "math", "sdpa_math_s2048_fwd", "w.1.pt.trace.json.gz")
    # a perfectly good trace outside the logdir whose kernels are all named SECRET
    data = harness.read_trace("sdpa_flash_s2048_fwd")
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") in ("kernel", "cpu_op"):
            ev["name"] = SECRET
    secret = outside / "secret.pt.trace.json.gz"
    with gzip.open(secret, "wt") as f:
        json.dump(data, f)
    (outside / "notes.txt").write_text(SECRET)
    os.symlink(outside, logdir / "linked_dir")  # a directory link out
    os.symlink(secret, logdir / "gpt" / "evil.pt.trace.json.gz")  # a file link out
    os.symlink(outside / "notes.txt", logdir / "gpt" / "notes.pt.trace.json")  # to a non-trace
    os.symlink("w.1.pt.trace.json.gz", logdir / "gpt" / "alias.pt.trace.json.gz")  # a link that stays inside
    s = served(str(logdir))
    s.settled(3)
    return s, logdir, outside


def _check(r, what):
    raw = r.get_data()
    body = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", "replace")
    assert SECRET not in body, what
    assert r.status_code < 500, (what, r.status_code, body[:200])
    assert r.headers.get("X-Content-Type-Options") == "nosniff", what
    return body


def test_listing_holds_only_what_is_inside(world):
    s, _, _ = world
    r = s.get("/runs")
    _check(r, "/runs")
    runs = {x["run"]: sorted(f["file"] for f in x["files"]) for x in r.json["runs"]}
    assert runs == {"gpt": ["alias.pt.trace.json.gz", "w.1.pt.trace.json.gz"], "math": ["w.1.pt.trace.json.gz"]}


@pytest.mark.parametrize("route", TRACE_ROUTES)
def test_every_route_refuses_every_trick_in_every_name(world, route):
    s, _, _ = world
    n = 0
    for key in NAME_KEYS:
        for value in TRICKS:
            params = {"run": "gpt", key: value}
            if route == "/kernel":
                params["id"] = "0"
            r = s.get(route, **params)
            _check(r, (route, key, value))
            assert r.status_code in (400, 404), (route, key, value, r.status_code)
            assert r.headers["Content-Type"] == "application/json" and r.json["error"]
            n += 1
    assert n == len(NAME_KEYS) * len(TRICKS)


def test_compare_refuses_every_trick_on_both_sides(world):
    s, _, _ = world
    for key in ("base", "new", "base_worker", "new_worker", "base_span", "new_span", "base_file", "new_file"):
        for value in TRICKS:
            params = {"base": "gpt", "new": "math", key: value}
            r = s.get("/compare", **params)
            _check(r, (key, value))
            assert r.status_code in (400, 404), (key, value, r.status_code)


@pytest.mark.parametrize(
    "raw",
    [
        "/summary?run=..%2F..%2Fetc",
        "/summary?run=%2Fetc%2Fpasswd",
        "/summary?run=%252e%252e%252f",
        "/summary?run=gpt&file=%2e%2e%2f%2e%2e%2fsecret.pt.trace.json.gz",
        "/summary?run=gpt%00",
        "/summary?run=gpt&file=w.1.pt.trace.json.gz%00.txt",
        "/summary?run=%C0%AE%C0%AE%C0%AF",
        "/summary?run=gpt&run=..",
        "/summary?run=gpt&file=..%5C..%5Csetup.py",
        "/annotated?run=linked_dir",
        "/annotated?run=gpt&file=evil.pt.trace.json.gz",
        "/report?run=gpt&file=notes.pt.trace.json",
        "/kernels?run=gpt&q=" + "%2e" * 5000,
        "/summary?run=" + "a" * 100_000,
    ],
)
def test_raw_query_strings(world, raw):
    s, _, _ = world
    r = s.raw(raw)
    _check(r, raw)
    assert r.status_code in (400, 404), (raw, r.status_code)


@pytest.mark.parametrize(
    "path",
    [
        "/static/..%2fplugin.py",
        "/static/%2e%2e%2fplugin.py",
        "/static/../plugin.py",
        "/static/..%5cplugin.py",
        "/static/.%2e/.%2e/setup.py",
        "/static/index.js%00.py",
        "/static/",
        "/static/%00",
        "/static/.gitignore",
        "/index.js/../../plugin.py",
        "/static/" + "a" * 5000,
    ],
)
def test_static_files_are_only_the_bundle(world, path):
    s, _, _ = world
    r = s.client.get(PREFIX + path)
    body = r.get_data()
    assert r.status_code in (400, 404), (path, r.status_code)
    assert b"import " not in body and b"def " not in body, path  # no Python source served


def test_a_symlink_swapped_in_after_the_scan_is_not_followed(tmp_path, served):
    """/annotated reads the trace at request time: a file replaced by a link out of the logdir
    between two scans must not be streamed (the poller would notice only at its next scan)."""
    logdir, outside = tmp_path / "logs", tmp_path / "outside"
    logdir.mkdir()
    outside.mkdir()
    dst = harness.put(logdir, "gpt", "sdpa_flash_s2048_fwd", "w.1.pt.trace.json.gz")
    data = harness.read_trace("sdpa_flash_s2048_fwd")
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") == "kernel":
            ev["name"] = SECRET
    with gzip.open(outside / "secret.pt.trace.json.gz", "wt") as f:
        json.dump(data, f)
    s = served(str(logdir), poll_secs=3600.0)  # no rescan during the test
    s.loader.poke()
    s.settled(1)
    ok = s.get("/annotated", run="gpt")
    assert ok.status_code == 200 and b"traceEvents" in gzip.decompress(ok.get_data())
    _check(ok, "before the swap")
    os.remove(dst)
    os.symlink(outside / "secret.pt.trace.json.gz", dst)  # the same name, now a link out
    r = s.get("/annotated", run="gpt")
    _check(r, "swapped file")
    assert r.status_code == 404
    os.remove(dst)  # a directory above it swapped instead
    shutil.rmtree(logdir / "gpt")
    os.symlink(outside, logdir / "gpt")
    os.rename(outside / "secret.pt.trace.json.gz", outside / "w.1.pt.trace.json.gz")
    r = s.get("/annotated", run="gpt")
    _check(r, "swapped directory")
    assert r.status_code == 404


def test_every_answer_is_json_with_nosniff(world):
    s, _, _ = world
    seen = set()
    for path in [
        "/runs",
        "/status",
        "/summary?run=gpt",
        "/summary?run=nope",
        "/summary?run=..",
        "/kernels?run=gpt",
        "/kernel?run=gpt&id=999999",
        "/roofline?run=gpt",
        "/compare?base=gpt&new=math",
        "/memory?run=gpt",
        "/report?run=gpt",
        "/kernels?run=gpt&limit=ten",
        "/annotated?run=gpt&file=nope",
        "/timeline?run=gpt&width=300",
        "/timeline?run=gpt&t0=inf",
        "/overview",
    ]:
        r = s.raw(path)
        seen.add(r.status_code)
        _check(r, path)
        assert r.headers["Content-Type"] == "application/json", path
        json.loads(r.get_data())
    for method in ("post", "put", "delete", "patch"):
        r = getattr(s.client, method)(PREFIX + "/summary?run=gpt")
        assert r.status_code == 405 and r.headers["Content-Type"] == "application/json"
        assert r.headers.get("X-Content-Type-Options") == "nosniff"
        seen.add(405)
    assert {200, 400, 404, 405} <= seen
    for path, ctype in (("/index.js", "text/javascript; charset=utf-8"), ("/index.css", "text/css; charset=utf-8")):
        r = s.client.get(PREFIX + path)
        assert r.status_code == 200 and r.headers["Content-Type"] == ctype
        assert r.headers.get("X-Content-Type-Options") == "nosniff"


def test_search_text_is_a_substring_not_a_pattern(world):
    s, _, _ = world
    rows = s.get("/kernels", run="gpt", scope="all", limit="1000").json["rows"]

    def expected(q):
        q = q.lower()
        return sum(1 for k in rows if any(q in str(k.get(f) or "").lower() for f in ("name", "op", "module_path")))

    for q in (".*", "(", "[", "\\", "a|b", "(?i)x", "%", "'; DROP TABLE", "<script>", "*", "+"):
        r = s.get("/kernels", run="gpt", scope="all", q=q)
        _check(r, q)
        assert r.status_code == 200 and r.json["total"] == expected(q), (q, r.json.get("total"), expected(q))
