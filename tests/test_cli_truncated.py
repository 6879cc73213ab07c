"""Truncated traces (a file still being written, a copy cut short): every command exits 2 with
``error: <file>: truncated: ...``; ``--allow-partial`` analyses the events before the cut and marks
the result partial in every output; no notice recommends a fix for a cause the trace does not show."""

import csv
import gzip
import io
import json

import pytest

from helpers import sample
from tb_attention_plugin.analyze import PARTIAL_FIX
from tb_attention_plugin.cli import main

SOURCE = "gpt4l_sdpa_train"  # a real H200 training trace, forward and backward
FRACTIONS = (0.02, 0.3, 0.5, 0.9, 0.995)


def run(args, capsys):
    code = main(args + ["--no-cache"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def whole() -> bytes:
    return gzip.decompress(open(sample(SOURCE), "rb").read())


def _cut(tmp_path, whole: bytes, frac: float, gz: bool) -> str:
    if gz:
        data = gzip.compress(whole, 6, mtime=0)
        p = tmp_path / f"cut{frac}.pt.trace.json.gz"
    else:
        data = whole
        p = tmp_path / f"cut{frac}.pt.trace.json"
    p.write_bytes(data[: int(len(data) * frac)])
    return str(p)


@pytest.mark.parametrize("gz", (False, True), ids=("plain", "gzip"))
@pytest.mark.parametrize("frac", FRACTIONS)
def test_every_command_refuses_a_truncated_trace(tmp_path, capsys, whole, frac, gz):
    path = _cut(tmp_path, whole, frac, gz)
    good = sample(SOURCE)
    for args in (
        ["analyze", path],
        ["analyze", path, "-f", "json"],
        ["compare", good, path],
        ["check", path, "--baseline", good, "--max-regression", "5"],
        ["annotate", path, "-o", str(tmp_path / "out.json")],
    ):
        code, out, err = run(args, capsys)
        assert code == 2, (args, code, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: truncated: "), (args, err)
        assert "no GPU kernels" not in out + err and "ProfilerActivity" not in out + err


@pytest.mark.parametrize("gz", (False, True), ids=("plain", "gzip"))
@pytest.mark.parametrize("frac", FRACTIONS)
def test_allow_partial_marks_every_output(tmp_path, capsys, whole, frac, gz):
    path = _cut(tmp_path, whole, frac, gz)
    code, out, err = run(["analyze", path, "-f", "json", "--allow-partial"], capsys)
    if code == 2:  # nothing usable before the cut (inside the first event or the gzip header)
        assert f"error: {path}: " in err
        return
    assert code == 0 and err == "", err
    rep = json.loads(out)["traces"][0]
    assert rep["trace"]["partial"] is True and rep["trace"]["truncated"] is True
    assert any(w.startswith("the file is truncated") for w in rep["warnings"])
    for n in rep["notices"]:
        # a notice that something is absent cannot send the user to profile differently: the
        # missing part may hold it
        if n["code"] in ("no_gpu_kernels", "no_attention", "no_shapes", "no_stack"):
            assert n["fix"] == PARTIAL_FIX and "truncated" in n["message"], n
    for fmt in ("table", "markdown"):
        code, out, _ = run(["analyze", path, "-f", fmt, "--allow-partial"], capsys)
        assert code == 0 and "PARTIAL: the file is truncated" in out
        assert "ProfilerActivity" not in out
    code, out, _ = run(["analyze", path, "-f", "csv", "--allow-partial"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and all(r["partial"] == "True" for r in rows)
    code, out, _ = run(["compare", sample(SOURCE), path, "-f", "json", "--allow-partial"], capsys)
    cmp = json.loads(out)
    assert code == 0 and cmp["new"]["partial"] is True and cmp["base"]["partial"] is False
    assert any("truncated trace read with --allow-partial" in n for n in cmp["notes"])


def test_allow_partial_is_not_served_from_the_cache_without_the_flag(tmp_path, capsys, whole):
    path = _cut(tmp_path, whole, 0.5, False)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["analyze", path, "--allow-partial"] + cache) == 0
    assert main(["analyze", path, "-f", "json", "--allow-partial"] + cache) == 0
    capsys.readouterr()
    for fmt in ("table", "json"):
        assert main(["analyze", path, "-f", fmt] + cache) == 2
        assert "truncated: " in capsys.readouterr().err


def test_a_whole_trace_is_not_partial(capsys):
    code, out, _ = run(["analyze", sample(SOURCE), "-f", "json"], capsys)
    rep = json.loads(out)["traces"][0]
    assert code == 0 and rep["trace"]["partial"] is False
