"""Regression tests for what the hostile corpus broke, one per fix, small and fast."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from tb_attention_plugin import settings
from tb_attention_plugin.settings import parse_size
from tb_attention_plugin.trace import reader
from tb_attention_plugin.trace.reader import TraceReadError, read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EV = {
    "ph": "X",
    "cat": "kernel",
    "name": "k",
    "pid": 0,
    "tid": 7,
    "ts": 1.0,
    "dur": 2.0,
    "args": {"correlation": 1, "device": 0, "stream": 7},
}


def _read(path, **kw):
    out = []
    meta, stats = read_trace(str(path), out.extend, **kw)
    return meta, stats, out


def _events(n, ts0=1.0):
    return [json.dumps(dict(EV, ts=ts0 + i)).encode() for i in range(n)]


# --- reader: TB_ATTENTION_MAX_BYTES=1G crashed every import (int("1G")); the environment is now
# read by settings.py only, and never at import time (tests/test_settings.py has the rules)
def test_max_bytes_env_accepts_sizes_and_survives_garbage():
    assert parse_size("1G") == 1 << 30 and parse_size("512M") == 512 << 20 and parse_size("1.5GiB") == 3 << 29
    assert parse_size("1000") == 1000
    for bad in ("", "abc", "-1G", "nan", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert settings.from_env({"TB_ATTENTION_MAX_BYTES": "2G"}).options.max_bytes == 2 << 30
    s = settings.from_env({"TB_ATTENTION_MAX_BYTES": "lots"})
    assert s.options.max_bytes == reader.DEFAULT_MAX_BYTES == 16 << 30
    assert any("TB_ATTENTION_MAX_BYTES" in w for w in s.warnings)
    r = subprocess.run(
        [sys.executable, "-c", "from tb_attention_plugin.trace import reader; print(reader.DEFAULT_MAX_BYTES)"],
        capture_output=True,
        text=True,
        env=dict(os.environ, TB_ATTENTION_MAX_BYTES="garbage"),
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == str(16 << 30), r.stderr


# --- reader: strings were matched by a backtracking regex (~100 bytes of memory per character)
def test_string_end_agrees_with_json_on_escapes():
    rnd = random.Random(7)
    alphabet = ["a", '"', "\\", "\n", "é", "}", ",", "{"]
    for _ in range(3000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40)))
        enc = json.dumps(s).encode()
        buf = b"xx" + enc + b', "next"'
        assert reader._string_end(buf, 2) == 2 + len(enc), enc
        assert reader._string_end(enc[:-1], 0) == -1  # unterminated
    many = json.dumps('\\"' * 500 + "end").encode()  # > 64 escaped quotes: the bulk path
    assert reader._string_end(many + b"]", 0) == len(many)
    assert reader._string_end(b'"' + b"\\" * 200 + b'"', 0) == 202  # an even run: the quote closes it


def test_a_long_string_does_not_cost_memory_per_character(tmp_path):
    """A 40 MiB unterminated string under a 1 GiB address-space limit: a clear error, no MemoryError."""
    p = tmp_path / "t.json"
    with open(p, "wb") as f:
        f.write(b'{"traceEvents":[{"ph":"X","name":"')
        for _ in range(40):
            f.write(b"A" * (1 << 20))
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30));"
        "from tb_attention_plugin.trace.reader import read_trace, TraceReadError\n"
        "try:\n    read_trace(sys.argv[1], lambda e: None)\nexcept TraceReadError as e:\n    print(e)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(p)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ends early" in r.stdout or "not a complete" in r.stdout, r.stdout


# --- reader: a bad event in the middle of a buffer made the chunk retry one event at a time
def test_a_malformed_event_mid_buffer_is_found_in_linear_time(tmp_path):
    body = b",".join(_events(8000))
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[' + body + b',{"ph":"X" "name":1},' + body + b"]}")
    t0 = time.monotonic()
    with pytest.raises(TraceReadError) as e:
        _read(p)
    assert "malformed event" in str(e.value)
    assert time.monotonic() - t0 < 5, "quadratic retry"  # was 27 s at 2000 events, hours at 8000


# --- reader: one event nested 100k deep failed the whole file ("JSON nested too deeply")
def test_an_event_nested_too_deeply_is_skipped_and_counted(tmp_path):
    deep = b'{"ph":"X","name":"deep","ts":5,"dur":1,"args":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    body = b",".join(_events(3000))
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[' + body + b"," + deep + b"," + body + b"]}")
    t0 = time.monotonic()
    _, stats, evs = _read(p)
    assert len(evs) == 6000 and stats["too_deep"] == 1
    assert time.monotonic() - t0 < 5


def test_metadata_nested_too_deeply_is_ignored(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(
        b'{"deviceProperties":' + b"[" * 100_000 + b"]" * 100_000 + b',"traceEvents":[' + b",".join(_events(10)) + b"]}"
    )
    _, stats, evs = _read(p)
    assert len(evs) == 10 and stats["bad_metadata"] == 1


# --- reader: entries that are not objects were skipped one Python step each (10 MB of nulls: 8 s)
def test_many_non_object_entries_are_skipped_fast(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[' + b'null, 1, "x,y", [1, [2]], ' * 400_000 + b",".join(_events(5)) + b"]}")
    t0 = time.process_time()  # CPU time: the guard is against quadratic work, not a loaded machine
    _, stats, evs = _read(p)
    assert len(evs) == 5 and stats["skipped"] == 1_600_000
    assert time.process_time() - t0 < 5


# --- reader: a named pipe named like a trace blocked open() forever
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    p = tmp_path / "w.pt.trace.json"
    os.mkfifo(p)
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(TraceReadError, _read, p)), daemon=True)
    t.start()
    t.join(10)
    assert done, "open() blocked on a named pipe"
    assert "not a regular file" in str(done[0].value)


# --- engine: a trace with GPU kernels but no CPU events crashed (IndexError on an empty column)
def test_a_gpu_only_trace_is_analysed(tmp_path):
    from tb_attention_plugin.analyze import analyze_path

    p = tmp_path / "w.1.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": [dict(EV, name="flash_fwd_kernel", ts=1.0 + 10 * i) for i in range(3)]}))
    rep = analyze_path(str(p))
    assert rep["status"] == "ok", rep.get("error")
    assert len(rep["kernels"]) == 3
    assert not [w for w in rep["warnings"] if "failed" in w], rep["warnings"]


# --- reader: a string that never ends was buffered to the end of the file (a 2 GiB gzip bomb:
# quadratic copying, no error); the per-value cap now counts what is buffered, not what is parsed
def test_an_unterminated_string_hits_the_value_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_EVENT_BYTES", 1 << 16)
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[{"ph":"X","name":"' + b"A" * (4 << 20) + b'"}]}')
    with pytest.raises(TraceReadError) as e:
        _read(p)
    assert "larger than 64 KiB" in str(e.value)


# --- records: ts=1e300 overflowed the int64 nanosecond columns (RuntimeWarnings, garbage times)
def test_times_out_of_range_are_dropped_with_a_warning(tmp_path):
    import warnings

    from tb_attention_plugin.trace.records import load_trace

    p = tmp_path / "t.json"
    evs = [dict(EV, ts=10.0 + i) for i in range(3)] + [
        dict(EV, ts=1e300, dur=1e300),
        dict(EV, ts=5.0, dur=1e25),
        dict(EV, ts=-(10**30)),
    ]
    p.write_text(json.dumps({"traceEvents": evs}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = load_trace(str(p))
    assert len(t.gpu["ts"]) == 3 and t.gpu["ts_ns"].max() == 2000
    assert any("3 events had a timestamp or duration out of range" in w for w in t.warnings)


@pytest.mark.parametrize(
    "content,msg",
    [
        (b"[1, 2, 3]", "none of the 3 entries of traceEvents is an event object"),
        (b'{"traceEvents": [[[[]]], null]}', "none of the 2 entries"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 1}]}', "no usable events"),
    ],
)
def test_files_without_a_single_usable_event_are_errors(tmp_path, content, msg):
    from tb_attention_plugin.analyze import analyze_path

    p = tmp_path / "t.json"
    p.write_bytes(content)
    rep = analyze_path(str(p))
    assert rep["status"] == "error" and msg in rep["error"], rep


# --- analyze/CLI: named pipes blocked (analyze_path, the directory walk's sniff, parallel.suitable)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_named_pipes_never_block_the_cli(tmp_path):
    os.mkfifo(tmp_path / "a.pt.trace.json")
    os.mkfifo(tmp_path / "export.json")  # a plain .json is sniffed: must not open it
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tb_attention_plugin.cli",
            "analyze",
            "--no-cache",
            str(tmp_path),
            str(tmp_path / "a.pt.trace.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    # the directory walk skips both pipes; the one named on the command line is refused
    assert r.stderr.splitlines() == [f"error: {tmp_path / 'a.pt.trace.json'}: not a regular file (a named pipe)"]


# --- CLI: a newline or a terminal escape in a file name split the error line; a name that is not
# UTF-8 made --format json raise UnicodeEncodeError (a traceback)
def test_file_names_are_shown_escaped_on_one_line(tmp_path):
    bad = tmp_path / "evil\n\x1b[31mred.pt.trace.json"
    bad.write_bytes(b"")
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", "analyze", "--no-cache", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr == f"error: {tmp_path}/evil\\n\\x1b[31mred.pt.trace.json: file is empty\n"


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
@pytest.mark.parametrize("fmt", ["json", "table", "csv", "markdown"])
def test_a_file_name_that_is_not_utf8(tmp_path, fmt):
    d = os.fsencode(str(tmp_path))
    with open(os.path.join(d, b"\xff\xfe.pt.trace.json"), "w") as f:
        json.dump({"traceEvents": [dict(EV, ts=1.0 + i) for i in range(3)]}, f)
    with open(os.path.join(d, b"\xfe-empty.pt.trace.json"), "w"):
        pass
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", "analyze", "--no-cache", "-f", fmt, str(tmp_path)],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr.decode(errors="replace")
    assert r.stderr.decode() == f"error: {tmp_path}/\\xfe-empty.pt.trace.json: file is empty\n"
    out = r.stdout.decode("utf-8")  # valid UTF-8 whatever the format
    if fmt == "json":
        paths = [t["path"] for t in json.loads(out)["traces"]]
        assert f"{tmp_path}/\\xff\\xfe.pt.trace.json" in paths


# --- analyze: an unexpected exception in the engine printed a traceback from the CLI
def test_an_engine_bug_is_one_error_line(tmp_path, monkeypatch):
    from tb_attention_plugin import analyze

    monkeypatch.delenv("TB_ATTENTION_DEBUG", raising=False)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [EV]}))

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(analyze, "analyze_trace", boom)
    rep = analyze.analyze_path(str(p))
    assert rep["status"] == "error" and rep["error"].startswith("internal error: KeyError: 'surprise'")


# --- engine: an Nsight Compute export beside a trace was read through any symlink, so a link in
# a log directory to a file elsewhere was read into the report (and a FIFO would have blocked);
# listing the directory once per trace was O(n^2) for a run of thousands of traces
def test_sidecar_exports_are_never_read_through_a_link_out_of_the_directory(tmp_path):
    from tb_attention_plugin.roofline import ncu

    data = os.path.join(ROOT, "tests", "data", "measured")
    trace = "decode_gqa_flash.pt.trace.json.gz"
    inside, outside = tmp_path / "logs", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    import shutil

    shutil.copy(os.path.join(data, trace), inside / trace)
    shutil.copy(os.path.join(data, "decode_gqa_flash.ncu.csv"), outside / "secret.ncu.csv")
    os.symlink(outside / "secret.ncu.csv", inside / (trace + ".ncu.csv"))
    shutil.copy(os.path.join(data, "decode_gqa_flash.ncu.csv"), inside / "real.ncu.csv")
    os.symlink("real.ncu.csv", inside / "alias.ncu.csv")  # a link that stays: fine
    if hasattr(os, "mkfifo"):
        os.mkfifo(inside / "pipe.ncu.csv")
    names = [n for n, _, _ in ncu.sidecar_files(str(inside / trace))]
    assert sorted(names) == ["alias.ncu.csv", "real.ncu.csv"]
    from tb_attention_plugin.analyze import analyze_path

    rep = analyze_path(str(inside / trace))
    assert rep["status"] == "ok"
    assert "secret" not in json.dumps(rep, default=str) and trace + ".ncu.csv" not in json.dumps(rep, default=str)


def test_sidecar_listing_is_not_quadratic(tmp_path, monkeypatch):
    from tb_attention_plugin.roofline import ncu
    from tb_attention_plugin.trace import sidecars

    for i in range(300):
        (tmp_path / f"w{i}.{i}.pt.trace.json").write_bytes(b"{}")
    old = time.time() - 60
    os.utime(tmp_path, (old, old))  # a directory not modified in the last seconds
    calls = []
    real = sidecars.is_ncu_name  # the directory listing (trace/sidecars.py) classifies each name once
    monkeypatch.setattr(sidecars, "is_ncu_name", lambda n: calls.append(n) or real(n))
    for i in range(300):
        assert ncu.sidecar_files(str(tmp_path / f"w{i}.{i}.pt.trace.json")) == []
    assert len(calls) == 300  # one listing, not one per trace
    (tmp_path / "late.ncu.csv").write_text("x")  # a new export changes the directory: seen
    assert [n for n, _, _ in ncu.sidecar_files(str(tmp_path / "w1.1.pt.trace.json"))] == ["late.ncu.csv"]


# --- compare: a new run with no attention time at all raised TypeError (f"{None:.2f}") in the
# verdict: a 500 from /compare, a traceback from `tb-attention compare`
def test_compare_against_a_run_without_attention(tmp_path):
    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.compare import compare_reports

    sample = os.path.join(ROOT, "sample_traces", "sdpa_flash_s2048_fwd")
    base = analyze_path(os.path.join(sample, sorted(os.listdir(sample))[0]))
    p = tmp_path / "none.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": [dict(EV, name="elementwise_kernel")]}))
    new = analyze_path(str(p))
    assert base["status"] == new["status"] == "ok" and not new["attention_time_us"]
    out = compare_reports(base, new)
    assert out["verdict"]["faster"] == "new" and "no attention time" in out["verdict"]["summary"]


# --- tagger: the eager-pattern search listed a softmax's siblings once per softmax: O(n^2) on a
# long flat thread (60 000 top-level softmax ops: ~5 minutes, now ~1 s)
def test_a_long_flat_thread_of_softmax_ops_is_linear(tmp_path):
    from tb_attention_plugin.analyze import analyze_path

    evs = []
    for i in range(30000):
        ts = 1000.0 + 10 * i
        evs += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::softmax",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 5,
                "args": {"External id": i + 1},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i + 1, "External id": i + 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "softmax_warp_forward",
                "pid": 0,
                "tid": 7,
                "ts": ts + 3,
                "dur": 4,
                "args": {"correlation": i + 1, "External id": i + 1, "device": 0, "stream": 7},
            },
        ]
    p = tmp_path / "flat.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    t0 = time.monotonic()
    rep = analyze_path(str(p))
    assert rep["status"] == "ok" and len(rep["kernels"]) == 30000
    assert time.monotonic() - t0 < 10  # ~75 s before


# --- cache: every write listed and stat-ed the whole cache directory, O(n^2) over a run of many
# traces (2000 tiny traces: 8 million stat calls, `analyze -f json DIR` 27 s, now 5 s)
def test_the_report_cache_prunes_without_listing_itself_on_every_write(tmp_path, monkeypatch):
    from tb_attention_plugin import cache as C

    cap = 64 << 10
    c = C.ReportCache(str(tmp_path / "c"), max_bytes=cap)
    calls = []
    real = c._prune
    monkeypatch.setattr(c, "_prune", lambda: calls.append(1) or real())
    for i in range(400):
        c.put(f"k{i:04d}", {"status": "ok", "pad": os.urandom(600).hex()})
    total = sum(p.stat().st_size for p in (tmp_path / "c").iterdir())
    assert total <= cap + cap // 16 + 4096, total  # still bounded
    assert 1 <= len(calls) <= 150, len(calls)  # not once per write (400)


def test_the_plugin_reads_max_bytes_from_its_environment_and_warns_on_garbage():
    s = settings.from_env({"TB_ATTENTION_MAX_BYTES": "512M"})
    assert s.options.max_bytes == 512 << 20 and not s.warnings
    s = settings.from_env({"TB_ATTENTION_MAX_BYTES": "lots"})
    assert s.options.max_bytes == 16 << 30 and any("TB_ATTENTION_MAX_BYTES ignored" in w for w in s.warnings)


# --- CLI: the table/markdown/compare reports printed kernel names raw, so a trace could send
# terminal escape sequences (set the window title, clear the screen...) to whoever ran the CLI
def test_text_reports_escape_control_characters_from_the_trace(tmp_path):
    evil = "flash_fwd_kernel\x1b]2;pwned\x07\x1b[2Jkern"
    evs = [dict(EV, name=evil, ts=1.0 + 10 * i) for i in range(3)]
    p = tmp_path / "esc.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    for args in (["analyze", "-f", "table"], ["analyze", "-f", "markdown"], ["compare"]):
        paths = [str(p)] * (2 if args == ["compare"] else 1)
        r = subprocess.run(
            [sys.executable, "-m", "tb_attention_plugin.cli", *args, "--no-cache", *paths],
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert b"\x1b" not in r.stdout and b"\x07" not in r.stdout, args
    # --wide: at the default width the name is cut in the middle (formats.cut_middle), not dropped
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tb_attention_plugin.cli",
            "analyze",
            "-f",
            "table",
            "--top",
            "5",
            "--wide",
            "--no-cache",
            str(p),
        ],
        capture_output=True,
        timeout=60,
    )
    assert b"\\x1b]2;pwned\\x07\\x1b[2Jkern" in r.stdout  # shown, escaped
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", "analyze", "-f", "json", "--no-cache", str(p)],
        capture_output=True,
        timeout=60,
    )
    assert json.loads(r.stdout)["traces"][0]["kernels"][0]["name"] == evil  # the data itself is kept


# --- reader: a string still open when the buffer ran out was searched again from its start after
# every block read; a 60 MiB string of escaped quotes took 18 s (now ~2 s). Resuming must not
# change what is read: strings cut anywhere by tiny blocks decode exactly as json does.
def test_strings_cut_by_tiny_blocks_decode_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "BLOCK", 7)
    monkeypatch.setattr(reader, "CHUNK_TARGET", 16)  # every event through the slow path
    rnd = random.Random(11)
    alphabet = ["a", '"', "\\", "\n", "}", ",", "{", "]", "é"]
    names = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 150))) for _ in range(200)]
    names += ["\\" * 129 + '"', '"' * 300]
    key = "".join(rnd.choice(alphabet) for _ in range(500))
    p = tmp_path / "t.json"
    p.write_text(json.dumps({key: 1, "traceEvents": [dict(EV, name=n, ts=float(i)) for i, n in enumerate(names)]}))
    meta, _, evs = _read(p)
    assert [e.name for e in evs] == names and meta == {key: 1}


def test_a_long_string_of_escaped_quotes_is_read_in_linear_time(tmp_path):
    p = tmp_path / "t.json"
    name = '"' * (28 << 20)
    p.write_text(json.dumps({"traceEvents": [dict(EV, name=name), EV]}))  # 56 MiB of \"
    t0 = time.monotonic()
    _, _, evs = _read(p)
    assert len(evs) == 2 and evs[0].name == name
    assert time.monotonic() - t0 < 8  # ~15 s before, ~2 s now
