"""The command line against the hostile corpus: one subprocess per file, each under a wall-clock
timeout and an address-space limit. A bad file gives exactly one ``error: <file>: <problem>``
line on stderr and exit code 2; a file that is only partly usable is analysed with a warning
that says what was skipped; nothing prints a traceback, hangs or grows without bound."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from corpus import build

TIMEOUT = 60  # seconds per file
LIMIT_AS = 2 << 30  # bytes of address space per process
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", TB_ATTENTION_NO_CACHE="1")


def _limit(nbytes: int):
    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))

    return pre


def run_cli(args: list, env: dict = None, limit: int = LIMIT_AS, timeout: float = TIMEOUT):
    """(returncode, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", *args],
        capture_output=True,
        timeout=timeout,
        preexec_fn=_limit(limit),
        env=env or ENV,
    )
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8"), time.monotonic() - t0


def shown(path: str) -> str:
    """How the CLI prints a file name (control characters escaped)."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], path)


def one_error_line(stderr: str, path: str) -> str:
    """The problem of the single ``error: <path>: <problem>`` line that stderr must consist of."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), stderr
    prefix = f"error: {shown(path)}: "
    assert lines[0].startswith(prefix), (lines[0], prefix)
    problem = lines[0][len(prefix) :]
    assert problem and problem == " ".join(problem.split()), problem
    return problem


@pytest.fixture(scope="module")
def cli_results(corpus):
    """Every corpus file through ``tb-attention analyze`` (table format), a few at a time."""
    root, cases = corpus

    def one(c):
        args = ["analyze", "--no-cache", os.path.join(root, c.rel)]
        if c.slow:  # decompresses to gigabytes: the cap (its default: test below)
            args += ["--max-bytes", "32M"]
        return c.name, run_cli(args)

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as ex:
        return dict(ex.map(one, cases))


def pytest_generate_tests(metafunc):
    if "case_name" in metafunc.fixturenames:
        import tempfile

        with tempfile.TemporaryDirectory() as d:  # the names only; the corpus fixture builds the files
            names = [c.name for c in build(d, tiny_traces=0, bombs=False)]
        metafunc.parametrize("case_name", names + ["gzip_bomb_string", "gzip_bomb_events"])


def test_each_corpus_file(corpus, cli_results, case_name):
    root, cases = corpus
    c = next(x for x in cases if x.name == case_name)
    code, out, err, secs = cli_results[c.name]
    path = os.path.join(root, c.rel)
    if c.cli == "error":
        assert code == 2, (c.name, code, err)
        problem = one_error_line(err, path)
        assert re.search(c.problem, problem), (c.name, problem)
    else:
        assert code == 0, (c.name, code, err)
        assert err == "", (c.name, err)  # no RuntimeWarning, no stray output
        # a warning wraps to the terminal width: its continuation lines are indented
        warnings = [
            w[len("warning: ") :].replace("\n  ", " ") for w in re.findall(r"^warning: .*(?:\n  .*)*", out, flags=re.M)
        ]
        if c.cli == "warn":
            assert any(re.search(c.problem, w) for w in warnings), (c.name, warnings)
    assert secs < TIMEOUT


def test_the_size_cap_is_configurable_and_says_how(corpus):
    root, _ = corpus
    bomb = os.path.join(root, "gzip_bomb_events", "w.1.pt.trace.json.gz")
    msg = "decompressed size exceeds the limit of 16 MiB (raise it with --max-bytes or TB_ATTENTION_MAX_BYTES)"
    code, _, err, _ = run_cli(["analyze", "--max-bytes", "16M", bomb])
    assert code == 2 and one_error_line(err, bomb) == msg
    code, _, err, _ = run_cli(["analyze", bomb], env=dict(ENV, TB_ATTENTION_MAX_BYTES="16M"))
    assert code == 2 and one_error_line(err, bomb) == msg
    # a bad value of the variable is a warning and the default, never a crash at import
    code, _, err, _ = run_cli(["analyze", "--max-bytes", "16M", bomb], env=dict(ENV, TB_ATTENTION_MAX_BYTES="lots"))
    assert code == 2 and err.splitlines()[0].startswith("warning: TB_ATTENTION_MAX_BYTES ignored: not a size")
    assert err.splitlines()[1] == f"error: {bomb}: {msg}"


def test_a_bomb_under_the_default_cap_stays_inside_its_memory_limit(corpus):
    """4 GiB of valid events under the default 16 GiB cap, in 1 GiB of address space: one clear
    line when memory runs out, no traceback, no hang."""
    root, _ = corpus
    bomb = os.path.join(root, "gzip_bomb_events", "w.1.pt.trace.json.gz")
    code, _, err, secs = run_cli(["analyze", bomb], limit=1 << 30)
    assert code == 2
    assert one_error_line(err, bomb) in (
        "out of memory while reading",
        "out of memory while analysing; try --max-bytes or a smaller trace",
    )
    print(f"4 GiB event bomb, default cap, 1 GiB address space: out of memory after {secs:.1f} s")


def _complete_events(text: str) -> list:
    """The event objects that are whole in a cut trace (decoded with the json module)."""
    i = text.index("[", text.index('"traceEvents"')) + 1
    dec = json.JSONDecoder()
    out = []
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            ev, i = dec.raw_decode(text, i)
        except ValueError:
            return out
        out.append(ev)


def test_a_truncated_trace_is_analysed_up_to_the_cut_with_allow_partial(corpus):
    root, _ = corpus
    path = os.path.join(root, "truncated_json", "w.1.pt.trace.json")
    with open(path, encoding="utf-8") as f:
        whole = _complete_events(f.read())
    gpu = [e for e in whole if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    code, out, err, _ = run_cli(["analyze", "-f", "json", path])
    assert code == 2 and one_error_line(err, path).startswith("truncated: ")
    code, out, err, _ = run_cli(["analyze", "-f", "json", "--allow-partial", path])
    assert code == 0 and err == ""
    rep = json.loads(out)["traces"][0]
    assert rep["status"] == "ok" and rep["trace"]["partial"] is True
    assert any(f"analysed the {len(whole)} events before the cut" in w for w in rep["warnings"]), rep["warnings"]
    full_path = os.path.join(root, "good", "w.1.pt.trace.json.gz")
    full = json.loads(run_cli(["analyze", "-f", "json", full_path])[1])["traces"][0]
    assert 0 < len(rep["kernels"]) == len(gpu) < len(full["kernels"])
    assert [k["name"] for k in rep["kernels"]] == [k["name"] for k in full["kernels"]][: len(gpu)]


def _trace_bytes(n: int) -> bytes:
    evs = []
    for i in range(n):
        ts = 1000.0 + 10 * i
        evs.append(
            json.dumps(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "softmax_warp_forward",
                    "pid": 0,
                    "tid": 7,
                    "ts": ts,
                    "dur": 4,
                    "args": {"correlation": i + 1, "device": 0, "stream": 7},
                }
            )
        )
    return b'{"traceEvents": [\n' + ",\n".join(evs).encode() + b"\n]}"


def test_a_file_that_grows_while_it_is_read(tmp_path):
    """The profiler still writing: with --allow-partial whatever the CLI sees is analysed, with a
    warning if it ends early; it never hangs waiting for more and never fails on a half-written
    event."""
    data = _trace_bytes(60_000)
    path = tmp_path / "live.pt.trace.json"
    path.write_bytes(data[: len(data) // 10])
    stop = threading.Event()

    def writer():
        with open(path, "ab") as f:
            for k in range(1, 10):
                if stop.is_set():
                    return
                f.write(data[k * len(data) // 10 : (k + 1) * len(data) // 10])
                f.flush()
                time.sleep(0.05)

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, out, err, _ = run_cli(["analyze", "-f", "json", "--allow-partial", str(path)])
    finally:
        stop.set()
        t.join()
    assert code == 0 and err == "", err
    rep = json.loads(out)["traces"][0]
    n = len(rep["kernels"])
    truncated = [w for w in rep["warnings"] if w.startswith("the file is truncated")]
    assert 0 < n <= 60_000
    assert (n < 60_000) == bool(truncated) == rep["trace"]["partial"], (n, rep["warnings"])


def test_a_file_deleted_while_it_is_read(tmp_path):
    path = tmp_path / "gone.pt.trace.json"
    path.write_bytes(_trace_bytes(150_000))
    p = subprocess.Popen(
        [sys.executable, "-m", "tb_attention_plugin.cli", "analyze", "-f", "json", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        preexec_fn=_limit(LIMIT_AS),
    )
    time.sleep(0.3)
    os.remove(path)
    out, err = p.communicate(timeout=TIMEOUT)
    err = err.decode()
    if p.returncode == 0:  # it had the file open: an open file outlives its name
        assert err == "" and len(json.loads(out)["traces"][0]["kernels"]) == 150_000
    else:  # removed before it was opened
        assert p.returncode == 2 and "No such file" in one_error_line(err, str(path))


def test_a_directory_of_thousands_of_tiny_traces(tmp_path):
    from corpus import write_tiny_traces

    write_tiny_traces(str(tmp_path / "many_tiny"), 2000)
    code, out, err, secs = run_cli(["analyze", "-f", "json", str(tmp_path / "many_tiny")])
    assert code == 0 and err == ""
    traces = json.loads(out)["traces"]
    assert len(traces) == 2000 and all(t["status"] == "ok" for t in traces)
    print(f"2000 tiny traces: {secs:.1f} s")


def test_annotate_on_every_corpus_file(corpus, tmp_path):
    """``tb-attention annotate``: a copy, or one error line (a directory, a pipe, a symlink loop
    or a missing file raised TraceReadError out of annotate.locate: a traceback)."""
    root, cases = corpus

    def one(c):
        out = tmp_path / f"{abs(hash(c.name))}.json.gz"
        return c, run_cli(["annotate", "--no-cache", "--max-bytes", "32M", os.path.join(root, c.rel), "-o", str(out)])

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as ex:
        results = list(
            ex.map(
                one,
                cases + [cases[0].__class__("missing", "no/such.pt.trace.json", "", "error", "No such file", "absent")],
            )
        )
    for c, (code, _out, err, _) in results:
        assert code in (0, 2), (c.name, code, err)
        assert "Traceback" not in err, (c.name, err)
        if code == 2:
            one_error_line(err, os.path.join(root, c.rel))
        if c.cli == "error":
            assert code == 2, c.name
