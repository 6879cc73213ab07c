"""A replay beside a trace: measured gains in the advice (CLI text, JSON); without one nothing changes."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shutil

import pytest
from replay_helpers import calls_of, fake_replay

from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cache import ReportCache
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.replay.results import measured_alternative, replay_times
from tb_attention_plugin.trace import sidecars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def copy(rel: str, tmp_path) -> str:
    src = sorted(glob.glob(os.path.join(ROOT, rel, "*.json.gz")))[0]
    dst = tmp_path / os.path.basename(src)
    shutil.copyfile(src, dst)
    return str(dst)


def report(path: str) -> dict:
    rep = analyze_path(path)
    assert rep["status"] == "ok"
    return json.loads(to_json(rep))


def cli_text(*args) -> str:
    from tb_attention_plugin.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


def finding(rep: dict, fid: str) -> dict:
    return next(a for a in rep["advice"] if a["id"] == fid)


def test_without_a_replay_nothing_changes(tmp_path):
    p = copy("validation/traces/sdpa_math_fwdbwd_causal", tmp_path)
    before = report(p)
    assert before["replay"]["measured"] is None and before["replay"]["file"] is None
    assert not any("gain_source" in a["evidence"] for a in before["advice"])
    assert not any(a["id"] == "measured_backend" for a in before["advice"])
    assert "measured gain" not in cli_text("analyze", p, "--no-cache") and "Replayed backends" not in cli_text(
        "analyze", p, "--no-cache"
    )


def test_math_backend_gain_is_measured(tmp_path):
    p = copy("validation/traces/sdpa_math_fwdbwd_causal", tmp_path)
    est = finding(report(p), "sdpa_math_backend")
    fake_replay(
        p, {"math": (5000.0, 5000.0), "flash": (160.0, 480.0), "cudnn": (170.0, 400.0), "efficient": (330.0, 1050.0)}
    )
    rep = report(p)
    f = finding(rep, "sdpa_math_backend")
    assert f["evidence"]["gain_source"] == "measured"
    assert f["evidence"]["estimated_gain_us"] == est["estimated_gain_us"]  # the model's estimate kept beside
    m = f["evidence"]["measured"]
    assert m["device"] == "NVIDIA H200" and m["calls"][0]["backend"] == "cudnn"
    call = rep["replay"]["calls"][0]
    want = call["trace_time_us"] * (1 - 570.0 / 10000.0)
    assert f["estimated_gain_us"] == pytest.approx(min(want, f["removable_us"]), rel=1e-3)
    assert "measured on NVIDIA H200" in f["detail"] and "faster than the math backend" in f["detail"]
    assert f["gain_basis"] == "gpu" and f["gpu_gain_us"] == f["estimated_gain_us"]  # the GPU figure is the measured one
    # the rest of the finding, and every other finding, as before
    changed = ("estimated_gain_us", "gpu_gain_us", "severity", "detail", "evidence", "per_step")
    assert f["per_step"]["basis"] == "measured" and est["per_step"]["basis"] == "estimated"
    assert {k: v for k, v in f.items() if k not in changed} == {k: v for k, v in est.items() if k not in changed}
    text = cli_text("analyze", p, "--no-cache")
    assert "measured gain" in text and "Replayed backends" in text and "cudnn" in text


def test_eager_fuse_attention_gain_is_measured(tmp_path):
    p = copy("validation/traces/hf_llama_eager_fwdbwd", tmp_path)
    fake_replay(
        p, {"eager": (1600.0, 1780.0), "math": (3000.0, 3000.0), "flash": (160.0, 475.0), "cudnn": (170.0, 400.0)}
    )
    f = finding(report(p), "fuse_attention")
    assert f["evidence"]["gain_source"] == "measured" and f["estimated_gain_us"] <= f["removable_us"]
    assert f["evidence"]["measured"]["calls"][0]["speedup"] == pytest.approx(3380.0 / 570.0, rel=1e-3)


def test_a_faster_fused_backend_measured_is_a_finding(tmp_path):
    p = copy("validation/traces/sdpa_efficient_fwdbwd_causal", tmp_path)
    assert not any(a["id"] == "measured_backend" for a in report(p)["advice"])
    fake_replay(p, {"efficient": (335.0, 1053.0), "cudnn": (170.0, 400.0), "flash": (160.0, 475.0), "math": (5e3, 5e3)})
    rep = report(p)
    f = finding(rep, "measured_backend")
    assert f["evidence"]["gain_source"] == "measured" and f["severity"] == "high"
    assert "cuDNN" in f["title"] and "CUDNN_ATTENTION" in f["how"]
    t = rep["replay"]["calls"][0]["trace_time_us"]
    assert f["estimated_gain_us"] == pytest.approx(t * (1 - 570.0 / 1388.0), rel=1e-3) and f["removable_us"] == t
    # a backend within 10 % of the trace's is no finding
    fake_replay(p, {"efficient": (335.0, 1053.0), "cudnn": (330.0, 1000.0)})
    assert not any(a["id"] == "measured_backend" for a in report(p)["advice"])


def test_the_report_has_the_backends_per_call(tmp_path):
    p = copy("validation/traces/sdpa_flash_fwdbwd_causal", tmp_path)
    fake_replay(p, {"flash": (160.0, 475.0), "math": (5e3, 5e3), "cudnn": (150.0, 420.0)})
    b = report(p)["replay"]
    assert b["file"] == os.path.basename(p) + ".replay.json"
    assert b["measured"]["used_for_advice"] and b["measured"]["calls_matched"] == 1
    rp = b["calls"][0]["replayed"]
    assert rp["basis"] == "kernel" and rp["trace_backend"] == "flash" and rp["best"] == "cudnn"
    assert rp["speedup"] == pytest.approx(635.0 / 570.0, rel=1e-3)
    rows = {r["backend"]: r for r in rp["backends"]}
    assert rows["flash"]["total_us"] == 635.0 and rows["efficient"]["status"] == "refused"
    assert rows["efficient"]["reason"] and rows["efficient"]["total_us"] is None
    times = replay_times(b)
    assert set(times[b["calls"][0]["id"]]) == {"flash", "math", "cudnn"}
    assert times[b["calls"][0]["id"]]["cudnn"] == {
        "forward": 150.0,
        "backward": 420.0,
        "total": 570.0,
        "basis": "kernel",
    }
    m = measured_alternative(b, b["calls"], ("cudnn",))
    assert m["calls"][0]["backend"] == "cudnn" and m["gain_us"] > 0


@pytest.mark.parametrize(
    "kw, why",
    [
        ({"scaled_down": True}, "scaled-down"),
        ({"device": "NVIDIA A100-SXM4-80GB"}, "ran on NVIDIA A100"),
        ({"check": "mismatch"}, None),
    ],
)
def test_a_replay_that_cannot_stand_for_this_trace_is_shown_not_used(tmp_path, kw, why):
    p = copy("validation/traces/sdpa_efficient_fwdbwd_causal", tmp_path)
    base = report(p)["advice"]
    fake_replay(p, {"efficient": (335.0, 1053.0), "cudnn": (170.0, 400.0), "math": (5e3, 5e3)}, **kw)
    rep = report(p)
    assert rep["advice"] == base
    if why:
        assert not rep["replay"]["measured"]["used_for_advice"] and why in rep["replay"]["measured"]["not_used_because"]
        assert any("not used for the advice" in w for w in rep["warnings"])
    else:  # outputs that do not match the math backend: that backend is not a candidate
        assert rep["replay"]["calls"][0]["replayed"]["best"] in ("efficient", "math")


def test_a_replay_of_other_calls_or_no_replay_at_all_is_a_warning(tmp_path):
    p = copy("validation/traces/sdpa_flash_fwdbwd_causal", tmp_path)
    other = copy("validation/traces/sdpa_flash_fwdbwd_full", tmp_path)
    fake_replay(other, {"flash": (1.0, 2.0)}, name=os.path.basename(p) + ".replay.json")
    rep = report(p)
    assert rep["replay"]["measured"]["calls_matched"] == 0 and any(
        "holds none of this trace" in w for w in rep["warnings"]
    )
    with open(p + ".replay.json", "w") as f:
        f.write("{not json")
    rep = report(p)
    assert rep["replay"]["measured"] is None and any("not readable as JSON" in w for w in rep["warnings"])


def test_a_replay_beside_the_trace_is_part_of_the_cache_key(tmp_path):
    p = copy("validation/traces/sdpa_efficient_fwdbwd_causal", tmp_path)
    cache = ReportCache(str(tmp_path / "cache"))
    st = os.stat(p)
    k0 = cache.key(p, st, "o")
    assert analyze_path(p, cache=cache)["replay"]["measured"] is None
    fake_replay(p, {"efficient": (335.0, 1053.0), "cudnn": (170.0, 400.0)})
    assert cache.key(p, st, "o") != k0
    assert analyze_path(p, cache=cache)["replay"]["measured"]["used_for_advice"]  # not the stale entry


def test_sidecars_lists_everything_beside_a_trace_once(tmp_path):
    p = copy("validation/traces/sdpa_flash_fwdbwd_causal", tmp_path)
    name = os.path.basename(p)
    stem = name.replace(".pt.trace.json.gz", "")
    (tmp_path / (name + ".ncu.csv")).write_text("x")
    (tmp_path / (stem + ".replay.json")).write_text("{}")
    (tmp_path / "other.replay.json").write_text("{}")  # another trace's: not this one's
    (tmp_path / "eager_reference.pt.trace.json").write_text("{}")
    s = sidecars.find(p)
    assert [n for n, _, _ in s.ncu] == [name + ".ncu.csv"]
    assert [n for n, _, _ in s.replay] == [stem + ".replay.json"]
    assert [n for n, _, _ in s.references] == ["eager_reference.pt.trace.json"]  # replay JSONs are no traces
    sig = s.signature()
    assert "\0ncu:" in sig and "\0replay:" in sig and "\0ref:" in sig
    assert calls_of(p)  # the odd files beside it do not break the analysis
