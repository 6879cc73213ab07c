"""The replay script (replay/emit.py + replay/runner.py) and ``tb-attention replay``, without a GPU:
it compiles, its calls are the trace's, and it runs on the CPU at tiny shapes (--scale-down)."""

from __future__ import annotations

import ast
import contextlib
import glob
import io
import json
import os
import py_compile
import subprocess
import sys

import pytest
from replay_helpers import calls_of, varlen_trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = sorted(
    glob.glob(os.path.join(ROOT, "tests", "data", "modern", "*", "*.json.gz"))
    + glob.glob(os.path.join(ROOT, "validation", "traces", "sdpa_*", "*.json.gz"))
    + glob.glob(os.path.join(ROOT, "validation", "traces", "hf_llama_*", "*.json.gz"))
    + glob.glob(os.path.join(ROOT, "validation", "traces", "decode_*", "*.json.gz"))
)


def cli(*args, check=True) -> subprocess.CompletedProcess:
    """``tb-attention ARGS`` in this process (a subprocess per trace made this file slow)."""
    from tb_attention_plugin.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    r = subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())
    if check:
        assert r.returncode == 0, r.stderr
    return r


def payload_of(script: str) -> dict:
    """The PAYLOAD literal of an emitted script, read without running it."""
    tree = ast.parse(open(script).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PAYLOAD":
            src = ast.get_source_segment(open(script).read(), node.value)
            return eval(src, {"true": True, "false": False, "null": None})  # noqa: S307 - our own literal
    raise AssertionError("no PAYLOAD")


def test_the_project_traces_are_found():
    assert len(TRACES) >= 30


def test_list_json_has_the_issue_schema():
    p = [t for t in TRACES if "sdpa_flash_fwdbwd_causal" in t][0]
    d = json.loads(cli("replay", p, "--list", "--format", "json").stdout)
    assert d["schema"] == 1 and len(d["calls"]) == 1
    c = d["calls"][0]
    # issue #20's list schema, restated on purpose (not replay.calls.LIST_KEYS: that is what is checked)
    for k in (
        "id",
        "kind",
        "op",
        "q_shape",
        "k_shape",
        "v_shape",
        "dtype",
        "causal",
        "dropout_p",
        "scale",
        "enable_gqa",
        "mask",
        "directions",
        "count",
        "trace_time_us",
        "backends",
    ):
        assert k in c, k
    assert d["traces"][0]["calls"] == [c["id"]]


def test_list_table(tmp_path):
    out = cli("replay", os.path.join(ROOT, "validation", "traces", "decode_gqa_flash"), "--wide").stdout
    assert "1 distinct attention call" in out and "decode-" in out and "kv 8192" in out


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_emit_compiles_and_holds_the_trace_calls(tmp_path, path):
    script = str(tmp_path / "replay.py")
    r = cli("replay", path, "--emit", script)
    assert "wrote" in r.stdout
    py_compile.compile(script, doraise=True)
    pl = payload_of(script)
    want = calls_of(path)
    assert [c["id"] for c in pl["calls"]] == [c["id"] for c in want]
    assert pl["calls"] == json.loads(json.dumps(want))  # every recorded shape, stride, flag, step
    assert pl["traces"] == [{"file": os.path.basename(path), "calls": [c["id"] for c in want]}]
    text = open(script).read()
    assert "import tb_attention_plugin" not in text and "from tb_attention_plugin" not in text
    listed = subprocess.run([sys.executable, script, "--list"], capture_output=True, text=True)
    assert listed.returncode == 0 and all(c["id"] in listed.stdout for c in want)


def test_one_script_for_many_traces_times_shared_calls_once(tmp_path):
    paths = [t for t in TRACES if "decode_graph_eager" in t or "decode_graph_capture" in t]
    script = str(tmp_path / "r.py")
    cli("replay", *paths, "--emit", script)
    pl = payload_of(script)
    assert len(pl["traces"]) == 2 and len(pl["calls"]) == 1  # the same decode step in both
    assert pl["calls"][0]["count"] == 8


def _run(script, *args, timeout=600):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout)


def test_without_a_gpu_the_script_says_where_to_run_it(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    p = [t for t in TRACES if "sdpa_flash_fwdbwd_causal" in t][0]
    script = str(tmp_path / "r.py")
    cli("replay", p, "--emit", script)
    r = _run(script, "--out-dir", str(tmp_path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "machine with the GPU" in r.stderr
    assert not glob.glob(str(tmp_path / "*.replay.json"))


def test_run_without_a_gpu_is_one_clear_error(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    p = [t for t in TRACES if "sdpa_flash_fwdbwd_causal" in t][0]
    r = cli("replay", p, "--run", check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: --run needs PyTorch and a CUDA GPU") and "machine with the GPU" in r.stderr


def test_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "x.pt.trace.json"
    bad.write_text("{")
    r = cli("replay", str(bad), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(bad) in r.stderr


CPU_TRACES = ("sdpa_flash_fwdbwd_causal", "hf_llama_eager_fwdbwd", "decode_gqa_flash", "flex_swa_fwdbwd")


def test_the_script_runs_on_the_cpu_at_tiny_shapes(tmp_path):
    """The script's logic with CPU torch: inputs at the recorded layouts, every backend tried, the
    refusals recorded with their reason, outputs checked against the math backend."""
    pytest.importorskip("torch")
    paths = [t for t in TRACES if any(f"/{n}/" in t for n in CPU_TRACES)]
    paths.append(varlen_trace(tmp_path / "jagged.pt.trace.json"))
    script = str(tmp_path / "r.py")
    cli("replay", *paths, "--emit", script)
    r = _run(
        script,
        "--all",
        "--device",
        "cpu",
        "--scale-down",
        "--no-compile",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--min-time-ms",
        "0.05",
        "--out-dir",
        str(tmp_path / "out"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for p in paths:
        out = json.load(open(tmp_path / "out" / (os.path.basename(p) + ".replay.json")))
        assert out["schema"] == 1 and out["tool"] == "tb-attention replay" and out["scaled_down"] is True
        assert out["trace"] == os.path.basename(p) and out["device"]["name"].startswith("cpu")
        want = calls_of(p)
        assert [c["id"] for c in out["calls"]] == [c["id"] for c in want]
        for rec, call in zip(out["calls"], want):
            assert "error" not in rec, rec
            by = {b["backend"]: b for b in rec["backends"]}
            assert list(by) == call["backends"]
            for b in by.values():
                assert b["status"] in ("ok", "refused", "error", "skipped")
                if b["status"] != "ok":
                    assert b["reason"], b
            assert by["math"]["status"] == "ok" and by["math"]["check"] == "reference"
            assert by["flex"]["status"] == "skipped" and by["flex"]["reason"] == "--no-compile"
            ok = [b for b in by.values() if b["status"] == "ok"]
            # math and at least one other backend ran (the CPU has no kernel for the varlen ops)
            assert len(ok) >= (1 if call["kind"] == "varlen" else 2), by
            for b in ok:
                assert b["forward"]["time_us"] > 0 and len(b["forward"]["times_us"]) == 2
                assert ("backward" in call["directions"]) == bool(b.get("backward"))
                assert b["check"] in ("ok", "reference"), b  # outputs match the math backend
            if call["kind"] != "mha":  # the CPU has no mem-efficient or cuDNN kernel: refused, with why
                assert by["cudnn"]["status"] == "refused" and by["efficient"]["status"] == "refused"


def test_kernel_times_from_the_profiler_pass():
    """The GPU side of the script that the CPU cannot run: kernels count for the labelled range
    their launch falls in (backward launches come from autograd's thread: time, not thread)."""
    from tb_attention_plugin.replay import runner

    evs = [
        {"ph": "X", "cat": "user_annotation", "name": "replay::flash:forward", "ts": 100.0, "dur": 50.0, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "replay::flash:backward", "ts": 200.0, "dur": 50.0, "tid": 1},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 110.0,
            "dur": 2,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "cuda_driver",
            "name": "cuLaunchKernelEx",
            "ts": 120.0,
            "dur": 2,
            "args": {"correlation": 8},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 210.0,
            "dur": 2,
            "tid": 9,
            "args": {"correlation": 9},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 300.0,
            "dur": 2,
            "args": {"correlation": 10},
        },
        {"ph": "X", "cat": "kernel", "name": "flash_fwd", "ts": 130.0, "dur": 30.0, "args": {"correlation": 7}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 161.0, "dur": 3.0, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "flash_bwd", "ts": 230.0, "dur": 90.0, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "outside", "ts": 330.0, "dur": 9.0, "args": {"correlation": 10}},
    ]
    assert runner.kernel_times(evs, iters=1) == {"flash:forward": (33.0, 1.0 * 2), "flash:backward": (90.0, 1.0)}
    assert runner.kernel_times(evs, iters=3)["flash:forward"] == (11.0, 0.67)
    # the backend sweep (validation/backend_sweep.py) labels its ranges sweep::: only those count for it
    renamed = [dict(e, name=e["name"].replace("replay::", "sweep::")) for e in evs]
    assert runner.kernel_times(renamed, iters=1, prefix="sweep::") == runner.kernel_times(evs, iters=1)
    assert runner.kernel_times(renamed, iters=1) == {}


def test_the_numerics_check_draws_its_gradient_in_the_timed_runs_layout():
    """cuDNN's backward reuses a plan made for one gradient layout on another and returns wrong
    gradients (validation/replay/FINDINGS.md): the check's gradient must have the output's strides,
    as the timed backward's randn_like has, or it reports a mismatch the model never sees."""
    torch = pytest.importorskip("torch")
    from tb_attention_plugin.replay import runner

    out = torch.zeros(2, 5, 3, 4).transpose(1, 2)  # [B,H,S,D] viewed from [B,S,H,D], as cuDNN returns it
    go = runner._grad_out(torch, out, seed=1)
    assert go.shape == out.shape and go.stride() == out.stride() == torch.randn_like(out).stride()
    again = runner._grad_out(torch, out, seed=1)
    assert torch.equal(go, again) and go.abs().sum() > 0  # seeded values, not the empty buffer


def test_a_call_forward_only_in_one_trace_and_trained_in_another_is_timed_both_ways():
    """The H200 jagged traces (round 3): the same packed call, inference in one trace and a training
    step in the other; the script for both must time its backward too (it timed the forward only)."""
    from tb_attention_plugin.replay.calls import merge_call

    fwd = {
        "id": "c",
        "count": 1,
        "trace_time_us": 10.0,
        "directions": ["forward"],
        "per_call_us": {"forward": 10.0, "backward": None},
    }
    both = {
        "id": "c",
        "count": 1,
        "trace_time_us": 40.0,
        "directions": ["forward", "backward"],
        "per_call_us": {"forward": 11.0, "backward": 29.0},
    }
    calls: dict = {}
    merge_call(calls, fwd)
    merge_call(calls, both)
    c = calls["c"]
    assert c["directions"] == ["forward", "backward"] and c["count"] == 2 and c["trace_time_us"] == 50.0
    assert c["per_call_us"] == {"forward": 10.0, "backward": 29.0}
    assert fwd["directions"] == ["forward"]  # the trace's own call is not changed


def test_isolate_a_fault_that_ends_the_process_costs_one_backend(tmp_path):
    """A CUDA fault (an illegal memory access) poisons the process: every backend and call after it
    failed (the H200 jagged run). With --isolate each call runs in a child process, and when one dies
    each of its backends runs again alone: the fault costs that backend only (CPU, a simulated fault)."""
    pytest.importorskip("torch")
    path = next(t for t in TRACES if "/sdpa_flash_fwdbwd_causal/" in t)
    script = str(tmp_path / "r.py")
    cli("replay", path, "--emit", script)
    common = ["--device", "cpu", "--scale-down", "--no-compile", "--repeats", "1", "--warmup", "0"]
    common += ["--min-time-ms", "0.01", "--no-profile", "--out-dir", str(tmp_path / "out")]
    r = _run(script, *common, "--isolate", "yes", "--crash-on", "efficient")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.load(open(tmp_path / "out" / (os.path.basename(path) + ".replay.json")))
    by = {b["backend"]: b for b in out["calls"][0]["backends"]}
    assert by["efficient"]["status"] == "error" and "process died" in by["efficient"]["reason"]
    assert by["math"]["status"] == "ok" and by["math"]["check"] == "reference"
    assert by["flash"]["status"] in ("ok", "refused")  # ran after the fault, in a process of its own
    assert list(by) == calls_of(path)[0]["backends"]


def test_budget_default_calls_progress_and_results_written_as_measured(tmp_path):
    """--budget-s is a promise (no call or backend starts after it; they are listed as skipped), the
    default run picks the calls carrying most of the time (--all for the rest), every call's result
    is on disk as soon as it is measured, and each call prints one progress line with the time left."""
    pytest.importorskip("torch")
    p = [t for t in TRACES if "/hf_llama_eager_fwdbwd/" in t][0]
    script = str(tmp_path / "r.py")
    cli("replay", p, "--emit", script)
    listing = _run(script, "--list")
    assert listing.returncode == 0 and "estimated: ~" in listing.stdout
    common = ("--device", "cpu", "--scale-down", "--no-compile", "--repeats", "1", "--warmup", "0")
    r = _run(script, "--all", "--budget-s", "0.000001", *common, "--out-dir", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.load(open(tmp_path / "b" / (os.path.basename(p) + ".replay.json")))
    assert out["complete"] is True and out["settings"]["budget_s"] == 0.000001
    backends = [b for c in out["calls"] for b in c["backends"]]
    assert backends and all(b["status"] == "skipped" and "budget" in b["reason"] for b in backends)
    assert sum(1 for line in r.stderr.splitlines() if line.startswith("replay: [")) >= len(out["calls"])
    r = _run(script, *common, "--out-dir", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "estimated" in r.stderr and "--budget-s 75" in r.stderr
    out = json.load(open(tmp_path / "d" / (os.path.basename(p) + ".replay.json")))
    assert 1 <= len(out["calls"]) <= 6 and out["settings"]["all_calls"] is False


def test_an_amp_call_runs_under_autocast(tmp_path):
    pytest.importorskip("torch")
    from replay_helpers import amp_trace

    p = amp_trace(tmp_path / "amp.pt.trace.json")
    script = str(tmp_path / "r.py")
    cli("replay", p, "--emit", script)
    r = _run(
        script,
        "--all",
        "--device",
        "cpu",
        "--scale-down",
        "--no-compile",
        "--repeats",
        "1",
        "--out-dir",
        str(tmp_path / "o"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.load(open(tmp_path / "o" / "amp.pt.trace.json.replay.json"))["calls"][0]
    by = {b["backend"]: b for b in rec["backends"]}
    assert by["eager"]["status"] == "ok" and by["math"]["status"] == "ok", by
