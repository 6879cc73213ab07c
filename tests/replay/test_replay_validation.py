"""validation/replay_run.sh --emit-only and validation/replay_check.py, without a GPU: replay JSONs
whose times equal the trace's pass the check, others fail it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from replay_helpers import calls_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _result(path: str, scale: float, twin: dict) -> dict:
    """A replay record of every call of a trace: its own backend at ``scale`` x the trace's time,
    the twins' backends at their twin's time."""
    out = []
    for c in calls_of(path):
        per = c["per_call_us"]
        bs = [
            {
                "backend": c["trace_backend"],
                "status": "ok",
                "forward": {"time_us": per["forward"] * scale * 1.1, "kernel_us": per["forward"] * scale},
                "backward": {"kernel_us": per["backward"] * scale, "time_us": per["backward"]}
                if per["backward"]
                else None,
                "check": "ok",
            }
        ]
        for be, t in twin.items():
            tp = calls_of(t)[0]["per_call_us"]
            bs.append(
                {
                    "backend": be,
                    "status": "ok",
                    "forward": {"kernel_us": tp["forward"], "time_us": tp["forward"]},
                    "backward": {"kernel_us": tp["backward"], "time_us": tp["backward"]} if tp["backward"] else None,
                    "check": "ok",
                }
            )
        out.append({"id": c["id"], "backends": bs})
    return {
        "schema": 1,
        "tool": "tb-attention replay",
        "trace": os.path.basename(path),
        "calls": out,
        "device": {"name": "NVIDIA H200"},
        "settings": {"device": "cuda"},
    }


def test_the_check_compares_with_the_trace_and_its_twin(tmp_path):
    flash = os.path.join(ROOT, "validation", "traces", "sdpa_flash_fwdbwd_causal")
    eff = os.path.join(ROOT, "validation", "traces", "sdpa_efficient_fwdbwd_causal")
    lst = tmp_path / "list.txt"
    lst.write_text(f"# a comment\nflash {flash} efficient={eff}\n")
    r = subprocess.run(
        [sys.executable, "validation/replay_check.py", "--traces", str(lst)], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    (trace,) = r.stdout.split()
    res = tmp_path / "res" / "json"
    res.mkdir(parents=True)
    effs = [os.path.join(eff, f) for f in os.listdir(eff)]
    for scale, want in ((1.05, "pass"), (1.3, "FAIL")):
        with open(res / (os.path.basename(trace) + ".replay.json"), "w") as f:
            json.dump(_result(trace, scale, {"efficient": effs[0]}), f)
        out = tmp_path / f"REPLAY-{scale}.md"
        r = subprocess.run(
            [sys.executable, "validation/replay_check.py", str(lst), str(tmp_path / "res"), "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        text = out.read_text()
        own = [ln for ln in text.splitlines() if ln.startswith("| flash | sdpa-")]
        alt = [ln for ln in text.splitlines() if ln.startswith("| flash | efficient |")]
        assert own and own[0].rstrip(" |").endswith(want), own
        assert alt and alt[0].rstrip(" |").endswith("pass"), alt
        assert "NVIDIA H200" in text


def test_emit_only_writes_the_script_and_the_calls(tmp_path):
    if not shutil.which("bash"):
        return
    lst = tmp_path / "list.txt"
    lst.write_text("decode validation/traces/decode_gqa_flash\n")
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run(
        ["bash", "validation/replay_run.sh", "--emit-only", str(tmp_path / "e"), str(lst)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "e" / "replay.py").is_file() and "decode-" in r.stdout
    calls = json.loads((tmp_path / "e" / "calls.json").read_text())
    assert calls["schema"] == 1 and calls["calls"][0]["kind"] == "decode"
