"""`tb-attention compare` and `tb-attention check` (the CI gate)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import SAMPLES, sample
from synth_sdpa import decode_pair
from tb_attention_plugin.cli import main

FLASH, MATH = os.path.join(SAMPLES, "sdpa_flash_s2048_fwd"), os.path.join(SAMPLES, "sdpa_math_s2048_fwd")


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_table(capsys):
    code, out, err = run(["compare", FLASH, MATH, "--wide"], capsys)
    assert code == 0 and err == ""
    assert "new run is slower in attention" in out
    assert "core attention fwd" in out and "fused attention 315.1 µs" in out
    assert "QK^T matmul" in out and "pytorch_flash::flash_fwd_kernel" in out
    assert "32.67x slower" in out or "32.68x slower" in out


def test_compare_markdown(capsys):
    code, out, _ = run(["compare", FLASH, MATH, "--format", "markdown"], capsys)
    assert code == 0 and out.startswith("## Attention comparison")
    assert "| core attention fwd |" in out and "### Phases" in out


def test_compare_json_shape(capsys):
    code, out, _ = run(
        ["compare", sample("sdpa_flash_s2048_fwd"), sample("sdpa_cudnn_s2048_fwd"), "-f", "json"], capsys
    )
    assert code == 0
    d = json.loads(out)
    assert d["kind"] == "tb-attention-compare" and d["schema"] == 1
    for key in (
        "base",
        "new",
        "normalization",
        "verdict",
        "totals",
        "sections",
        "phases",
        "kernel_groups",
        "advice",
        "devices",
        "notes",
    ):
        assert key in d
    assert d["verdict"]["faster"] == "new"
    t = d["totals"]["attention_time_us"]
    assert set(t) == {"base", "new", "delta", "delta_pct", "ratio", "speedup"} and t["speedup"] > 1
    row = d["phases"][0]
    assert {"phase", "direction", "label", "core", "base", "new", "delta", "delta_pct", "ratio", "speedup"} <= set(row)


def test_compare_directory_aggregates_its_traces(tmp_path, capsys):
    d = tmp_path / "two"
    d.mkdir()
    src = sample("sdpa_flash_s2048_fwd")
    for i in (1, 2):
        shutil.copy(src, d / f"rank{i}.pt.trace.json.gz")
    code, out, _ = run(["compare", src, str(d), "-f", "json"], capsys)
    assert code == 0
    c = json.loads(out)
    assert c["new"]["traces"] == 2 and c["new"]["steps"] == 4 and c["base"]["steps"] == 2
    assert c["normalization"]["mode"] == "per_step"
    assert c["verdict"]["faster"] == "same" and c["totals"]["attention_time_us"]["delta"] == 0


def test_check_regression_exits_1_with_explanation(capsys):
    code, out, err = run(["check", MATH, "--baseline", FLASH, "--max-regression", "10"], capsys)
    assert code == 1 and err == ""
    assert out.startswith("FAIL: Attention time regressed by +")
    assert "softmax fwd" in out and "budget +10%" in out
    assert len(out.strip().splitlines()) == 1  # one paragraph


def test_check_same_and_improvement_exit_0(capsys):
    code, out, _ = run(["check", FLASH, "--baseline", FLASH, "--max-regression", "0"], capsys)
    assert code == 0 and out.startswith("PASS: ")
    code, out, _ = run(["check", FLASH, "--baseline", MATH, "--max-regression", "5"], capsys)
    assert code == 0 and "-96.9%" in out


def test_check_attention_share(capsys):
    code, out, _ = run(["check", os.path.join(SAMPLES, "gpt4l_sdpa_train"), "--max-attention-share", "5%"], capsys)
    assert code == 1 and "over the 5.0% budget" in out
    code, _, _ = run(["check", os.path.join(SAMPLES, "gpt4l_sdpa_train"), "--max-attention-share", "0.5"], capsys)
    assert code == 0


def test_check_json(capsys):
    code, out, _ = run(["check", MATH, "-b", FLASH, "--max-regression", "10", "-f", "json"], capsys)
    d = json.loads(out)
    assert code == 1 and d["passed"] is False and d["failures"] == ["regression"] and d["regression_pct"] > 3000
    assert d["comparison"]["kind"] == "tb-attention-compare"


def test_check_missing_file_exits_2(tmp_path, capsys):
    missing = str(tmp_path / "nope.json")
    code, out, err = run(["check", missing, "--baseline", FLASH, "--max-regression", "5"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"error: {missing}: cannot open: No such file or directory"]


def test_check_corrupt_baseline_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ')
    code, out, err = run(["check", FLASH, "--baseline", str(bad), "--max-regression", "5"], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: ") and "Traceback" not in err


def test_check_needs_a_budget_and_a_baseline_for_regressions(capsys):
    code, _, err = run(["check", FLASH, "--baseline", FLASH], capsys)
    assert code == 3 and err.startswith("error: check:")  # a gate asked for wrongly: 3, not 2 (unreadable)
    code, _, err = run(["check", FLASH, "--max-regression", "5"], capsys)
    assert code == 3 and "--baseline" in err


def test_check_decode_gqa_math_vs_flash(tmp_path, capsys):
    flash, math = decode_pair(tmp_path)
    code, out, _ = run(["check", math, "--baseline", flash, "--max-regression", "10"], capsys)
    assert code == 1 and "regressed" in out
    code, _, _ = run(["check", flash, "--baseline", math, "--max-regression", "10"], capsys)
    assert code == 0


def test_console_script_check_exit_code():
    exe = os.path.join(os.path.dirname(sys.executable), "tb-attention")
    if not os.path.exists(exe):
        pytest.skip("console script not installed")
    p = subprocess.run(
        [exe, "check", MATH, "--baseline", FLASH, "--max-regression", "5", "--no-cache"], capture_output=True, text=True
    )
    assert p.returncode == 1 and p.stdout.startswith("FAIL:")


def test_check_without_a_budget_has_its_own_exit_code(capsys):
    """Issue #41: a gate asked for wrongly exits 3, apart from an unreadable trace (2)."""
    from helpers import sample
    from tb_attention_plugin.cli import main

    assert main(["check", sample("sdpa_flash_s2048_fwd")]) == 3
    assert "give --max-regression" in capsys.readouterr().err
    assert main(["check", sample("sdpa_flash_s2048_fwd"), "--max-attention-share", "lots"]) == 3
    assert main(["check", "/nonexistent.pt.trace.json", "--max-attention-share", "0.5"]) == 2
