"""Source lines (sources.py, trace/stacks.py): the innermost user frame around each attention
kernel's op, from with_stack Python frames; library and interpreter frames are skipped."""

import pytest

from helpers import sample
from synth import SynthTrace, naive_attention
from synth_sdpa import sdpa_backward, sdpa_call
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cli import main
from tb_attention_plugin.trace.stacks import user_frame


@pytest.mark.parametrize(
    "name,frame",
    [
        ("train.py(42): step", ("train.py", 42, "step")),
        ("models/gpt.py(67): forward", ("models/gpt.py", 67, "forward")),
        (
            "transformers/models/llama/modeling_llama.py(243): forward",
            ("transformers/models/llama/modeling_llama.py", 243, "forward"),
        ),
        ("torch/nn/modules/module.py(1739): _call_impl", None),
        ("torch/nn/functional.py(5100): scaled_dot_product_attention", None),
        ("typing.py(2154): cast", None),
        ("logging/__init__.py(1776): getEffectiveLevel", None),
        ("<frozen os>(680): __getitem__", None),
        ("<built-in method cat of type object>", None),
        ("/usr/lib/python3.11/site-packages/foo/bar.py(3): f", None),
        ("/usr/lib/python3.11/json/decoder.py(3): f", None),
        ("torch/profiler/profiler.py(700): __enter__", None),
        ("nn.Module: Attention_0", None),
    ],
)
def test_user_frame(name, frame):
    assert user_frame(name) == frame


def _with_frames() -> SynthTrace:
    t = SynthTrace()
    with t.function("train.py(10): step"):
        with t.function("model.py(42): attend"):
            with t.module("Attention_0"):
                with t.function("torch/nn/functional.py(5100): scaled_dot_product_attention"):
                    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, causal=True, dur=100.0, seq=7)
        with t.function("model.py(80): other_attend"):
            naive_attention(t)
    sdpa_backward(t, seq=7, dur=250.0)  # autograd thread: no Python frames around it
    return t


def test_kernel_rows_and_phases_carry_the_innermost_user_frame(tmp_path):
    rep = analyze_path(_with_frames().write(tmp_path / "t.json"))
    att = [k for k in rep["kernels"] if k["attention"]]
    fused = [k for k in att if k["phase"] == "fused_attention"]
    assert {(k["direction"], k["source"]["file"], k["source"]["line"], k["source"]["function"]) for k in fused} == {
        ("forward", "model.py", 42, "attend"),
        ("backward", "model.py", 42, "attend"),
    }  # backward: its forward's
    eager = [k for k in att if k["phase"] in ("qk_matmul", "softmax", "pv_matmul")]
    assert eager and all(k["source"] == {"file": "model.py", "line": 80, "function": "other_attend"} for k in eager)
    ph = next(p for p in rep["phases"] if p["phase"] == "fused_attention" and p["direction"] == "backward")
    assert ph["sources"] == [{"file": "model.py", "line": 42, "function": "attend", "time_us": 250.0}]
    assert all("source" not in k for k in rep["kernels"] if not k["attention"])
    calls = {(c["instance"], c["direction"]): c.get("source") for c in rep["memory"]["attention_spans"]}
    assert {"file": "model.py", "line": 80, "function": "other_attend"} in calls.values()
    assert {"file": "model.py", "line": 42, "function": "attend"} in calls.values()


def test_without_stacks_there_is_no_source(tmp_path):
    t = SynthTrace()
    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, dur=100.0)
    rep = analyze_path(t.write(tmp_path / "t.json"))
    assert not any("source" in k for k in rep["kernels"]) and not any("sources" in p for p in rep["phases"])


def test_cli_prints_source_lines(tmp_path, capsys):
    t = SynthTrace()
    with t.function("model.py(80): other_attend"):
        naive_attention(t)
    path = t.write(tmp_path / "t.json")
    assert main(["analyze", path, "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "source" in out and "model.py:80" in out
    assert "  where: model.py:80 (other_attend)" in out  # under the fused-attention advice
    assert main(["analyze", sample("gpt4l_naive_train"), "--no-cache"]) == 0
    assert "gen_traces.py:65" in capsys.readouterr().out  # a real with_stack H200 trace


def test_a_function_named_like_attention_is_a_frame_too(tmp_path):
    """``eager_attention_forward`` (a name the tagger keeps as an attention scope) in the model's
    code is also the innermost frame of the kernels it launches: they point to it, not to the
    ``def forward`` around it (issue #21, HF Llama)."""
    t = SynthTrace()
    with t.function("models/llama.py(243): forward"):
        with t.function("models/llama.py(191): eager_attention_forward"):
            naive_attention(t)
    rep = analyze_path(t.write(tmp_path / "t.json"))
    att = [k for k in rep["kernels"] if k["attention"]]
    assert att and {(k["source"]["line"], k["source"]["function"]) for k in att} == {(191, "eager_attention_forward")}


def test_hf_llama_kernels_name_the_launching_function():
    import glob
    import os

    from helpers import ROOT

    files = glob.glob(os.path.join(ROOT, "validation", "traces", "hf_llama_eager_fwdbwd", "*.json.gz"))
    if not files:
        pytest.skip("validation/traces/hf_llama_eager_fwdbwd is not available")
    rep = analyze_path(files[0])
    by_phase = {}
    for k in rep["kernels"]:
        if k["attention"] and k.get("source"):
            by_phase.setdefault(k["phase"], set()).add(k["source"]["function"])
    # the score path runs in eager_attention_forward, the rotary in apply_rotary_pos_emb; the
    # projections are called from LlamaAttention.forward itself
    assert by_phase["softmax"] == {"eager_attention_forward"} and by_phase["qk_matmul"] == {"eager_attention_forward"}
    assert "apply_rotary_pos_emb" in by_phase["rotary"]
    assert by_phase["qkv_proj"] == {"forward"}
