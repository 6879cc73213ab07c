import json
import os
import subprocess
import sys

from helpers import SAMPLES, sample
from tb_attention_plugin.cli import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_analyze_table_has_seed_style_columns(capsys):
    code, out, err = run(["analyze", sample("naive_bf16_s2048_fwd"), "--wide"], capsys)
    assert code == 0 and err == ""
    for col in ("operation", "latency", "bottleneck", "memory-bandwidth utilization", "compute utilization"):
        assert col in out
    assert "QK^T matmul" in out and "memory-bound" in out and "NVIDIA H200" in out


def test_analyze_directory_json_contract(capsys):
    code, out, _ = run(["analyze", SAMPLES, "--format", "json"], capsys)
    assert code == 0
    data = json.loads(out)
    n_files = sum(
        1
        for _, _, fs in os.walk(SAMPLES)
        for f in fs
        if f.endswith((".pt.trace.json.gz", ".pt.trace.json")) or f == "attention_trace.json"
    )
    assert data["schema"] == 1 and len(data["traces"]) == n_files >= 8
    for t in data["traces"]:
        assert t["status"] == "ok"
        for key in (
            "path",
            "device",
            "gpu_time_us",
            "attention_time_us",
            "attention_share",
            "phases",
            "kernels",
            "warnings",
        ):
            assert key in t
        for k in t["kernels"][:5]:
            for key in (
                "name",
                "ts",
                "dur_us",
                "stream",
                "attention",
                "phase",
                "direction",
                "op",
                "module",
                "flops",
                "bytes",
                "intensity",
                "achieved_flops_per_s",
                "achieved_bytes_per_s",
                "compute_util",
                "memory_util",
                "bound",
                "dtype",
            ):
                assert key in k


def test_ts_exactly_as_in_trace(capsys):
    import gzip

    path = sample("sdpa_flash_s2048_fwd")
    raw = json.load(gzip.open(path))
    want = sorted(e["ts"] for e in raw["traceEvents"] if e.get("cat") == "kernel")
    code, out, _ = run(["analyze", path, "-f", "json"], capsys)
    got = sorted(k["ts"] for k in json.loads(out)["traces"][0]["kernels"] if k["kind"] == "kernel")
    assert got == want


def test_csv_and_markdown(capsys):
    code, out, _ = run(["analyze", sample("seed_mha"), "-f", "csv"], capsys)
    lines = out.strip().splitlines()
    assert lines[0].startswith("path,id,name,kind") and len(lines) == 1 + 9
    code, out, _ = run(["analyze", sample("seed_mha"), "-f", "markdown"], capsys)
    assert "| operation | dir | latency |" in out


def test_bad_inputs_exit_2_with_one_line_each_and_good_ones_still_reported(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(b"")
    code, out, err = run(
        ["analyze", str(bad), str(empty), str(tmp_path / "missing.json"), sample("seed_mha"), "-f", "json"], capsys
    )
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert f"error: {bad}: " in err and "Traceback" not in err
    data = json.loads(out)
    assert [t["status"] for t in data["traces"]].count("ok") == 1


def test_unknown_gpu_peaks_option(tmp_path, capsys):
    import gzip

    raw = json.load(gzip.open(sample("sdpa_flash_s2048_fwd")))
    # neither its name nor its properties are in the table (a renamed H200 is still found by them)
    raw["deviceProperties"][0].update(name="Mystery Accelerator 9000", computeMajor=13, numSms=999)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(raw))
    code, out, _ = run(["analyze", str(p), "-f", "json"], capsys)
    t = json.loads(out)["traces"][0]
    assert "unknown_gpu" in {n["code"] for n in t["notices"]}
    assert {k["bound"] for k in t["kernels"]} == {"unknown"}
    code, out, _ = run(["analyze", str(p), "-f", "json", "--peaks", "bf16=800,fp32=50,memory=4"], capsys)
    t = json.loads(out)["traces"][0]
    assert t["device"]["basis"] == "user" and t["kernels"][0]["bound"] != "unknown"


def test_step_option(capsys):
    code, out, _ = run(["analyze", sample("naive_bf16_s2048_fwd"), "-f", "json", "--step", "3"], capsys)
    t = json.loads(out)["traces"][0]
    assert {k["step"] for k in t["kernels"]} == {"ProfilerStep#3"}
    code, out, err = run(["analyze", sample("naive_bf16_s2048_fwd"), "--step", "99"], capsys)
    assert code == 2 and "no step '99'" in err


def test_cache_hit_is_identical(tmp_path, capsys):
    args = ["analyze", sample("gpt4l_sdpa_train"), "-f", "json", "--cache-dir", str(tmp_path)]
    _, first, _ = run(args, capsys)
    assert os.listdir(tmp_path)
    _, second, _ = run(args, capsys)
    assert json.loads(first) == json.loads(second)


def test_console_script_runs():
    exe = os.path.join(os.path.dirname(sys.executable), "tb-attention")
    r = subprocess.run([exe, "analyze", sample("seed_mha")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "MultiheadAttention" not in r.stderr
    r = subprocess.run([exe, "devices"], capture_output=True, text=True, timeout=60)
    assert "H200" in r.stdout and "measured" in r.stdout
