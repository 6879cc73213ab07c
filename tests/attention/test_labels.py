"""Labels from the trace's facts, not from templates (issue #18), on the CPU side of eager blocks as
torch records them (tests/data/eager_cpu/record.py: torch.profiler on the CPU, one kernel per op
that would launch one): Swin's head dim, T5's and Swin's relative-position bias, additive
(Bahdanau) scores, and the S×S tensors a call really allocates."""

import os

import pytest

from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.attention.headdim import head_dims
from tb_attention_plugin.formats import render_text

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "eager_cpu")


def rep(name: str) -> dict:
    return analyze_path(os.path.join(DATA, name + ".pt.trace.json.gz"))


def att(r: dict, direction: str = "forward") -> list:
    return [k for k in r["kernels"] if k["attention"] and k["direction"] == direction]


def by_op(ks: list) -> dict:
    out: dict = {}
    for k in ks:
        out.setdefault(k["op"], []).append(k["phase"])
    return out


def test_swin_head_dim_is_32_not_the_window_tokens():
    """Swin's 7x7 windows hold 49 tokens and its heads 32 dims: the backward of QK^T contracts over
    the 49 tokens (dQ = dS·K), which is no head dim; only the forward QK^T and the formulas say."""
    r = rep("swin_block_fwdbwd")
    assert "head_dim_alignment" not in {a["id"] for a in r["advice"]}
    fwd = [k for k in att(r) if k["phase"] == "qk_matmul"]
    bwd = [k for k in att(r, "backward") if k["phase"] == "qk_matmul"]
    assert fwd and bwd
    assert {d for k in fwd for d in head_dims(k["phase"], k["direction"], k.get("cost_detail"))} == {32}
    assert all(not head_dims(k["phase"], k["direction"], k.get("cost_detail")) for k in bwd)
    assert {(k.get("cost_detail") or {}).get("k") for k in bwd} >= {49}  # what was taken for a head dim
    # a real odd head dim is still found
    assert head_dims("qk_matmul", "forward", {"batch": 8, "m": 128, "n": 128, "k": 49}) == {49}
    assert head_dims("fused_attention", "backward", {"d": 72, "dv": 64}) == {72, 64}


def test_swin_relative_position_bias_and_shift_mask():
    ks = att(rep("swin_block"))
    ops = by_op(ks)
    # the per-head table gather and its broadcast add: position bias; the shift mask: a mask
    assert ops["aten::index"] == ["position_bias"]
    assert ops["aten::add"] == ["position_bias", "mask"]
    adds = [k for k in ks if k["op"] == "aten::add"]
    assert adds[0]["shapes"] == [[32, 4, 49, 49], [1, 4, 49, 49], None]  # per head, not per window
    assert adds[1]["shapes"][1] == [1, 16, 1, 49, 49]  # per window, the same for every head
    assert ops["aten::bmm"] == ["qk_matmul", "pv_matmul"] and ops["aten::_softmax"] == ["softmax"]


@pytest.mark.parametrize("name", ["t5_attention", "t5_attention_bias_first"])
def test_t5_relative_position_bias_is_position_bias_not_rotary(name):
    """T5's buckets (sub, abs or the decoder's neg, log of the distance, min, where), the per-head
    embedding lookup and the add to the scores are position bias, whether they run before or after
    QK^T; nothing is rotary (the decoder's neg is no rotate_half)."""
    r = rep(name)
    ks = att(r)
    phases = {k["phase"] for k in ks}
    assert "rotary" not in phases and "position_bias" in phases
    for scope in ("T5Attention_0", "T5Attention_1"):
        mine = [k for k in ks if scope in (k["module_path"] or "")]
        ops = by_op(mine)
        assert set(ops["aten::embedding"]) == {"position_bias"}
        for op in ("aten::abs", "aten::log", "aten::neg", "aten::minimum", "aten::where", "aten::sub"):
            assert set(ops.get(op, ["position_bias"])) == {"position_bias"}, (scope, op, ops.get(op))
        assert ops["aten::add_"][-1] == "position_bias"  # scores += position_bias
        assert [p for p in ops["aten::bmm"]] == ["qk_matmul", "pv_matmul"]
    assert "neg" in {k["op"].split("::")[-1] for k in ks if k["phase"] == "position_bias"}
    labels = {p["phase"]: p["label"] for p in r["phases"]}
    assert labels["position_bias"] == "position bias" and "rotary" not in labels
    assert "position bias" in render_text([r])


def test_additive_attention_scores_are_not_a_mask():
    ks = att(rep("additive_attention"))
    ops = by_op(ks)
    assert ops["aten::add"] == ["additive_score"]  # [B, Tq, 1, A] + [B, 1, Tk, A]
    assert ops["aten::tanh"] == ["additive_score"]
    mm = [k["phase"] for k in ks if k["op"] == "aten::mm"]
    assert mm == ["qkv_proj", "qkv_proj", "additive_score"]  # W q, U k, then v^T (...)
    assert ops["aten::bmm"] == ["pv_matmul"] and ops["aten::_softmax"] == ["softmax"]
    assert "mask" not in {k["phase"] for k in ks}


def test_score_tensors_are_what_the_call_allocates():
    """bf16 eager attention with its softmax upcast and cast back, a second no-op .to(float32) and
    dropout at p=0: QK^T and the scale (bf16), the upcast copy and the softmax (fp32), the cast back
    (bf16); the no-op cast and the dropout allocate nothing."""
    r = rep("upcast_attention")
    (layer,) = r["memory"]["footprint"]["layers"]
    assert layer["score_tensors"] == 5 and layer["score_tensor_dtypes"] == {"bf16": 3, "fp32": 2}
    one = 2 * 4 * 128 * 128
    assert layer["score_matrix_bytes"] == one * 2 and layer["score_tensor_bytes"] == one * (3 * 2 + 2 * 4)
    assert layer["unfused_activation_bytes"] == layer["fused_activation_bytes"] + layer["score_tensor_bytes"]
    assert "5, 1.75 MiB (3 bf16, 2 fp32)" in render_text([r], memory=True)
    # fp32 T5: the upcast is a no-op, dropout p=0, scores += bias in place: QK^T and softmax only,
    # and the PV output ([B, H, S, D] with D == S == 64) is no score tensor
    t5 = {g["scope"]: g for g in rep("t5_attention")["memory"]["footprint"]["layers"]}
    assert {s: g["score_tensors"] for s, g in t5.items()} == {
        "nn.Module: T5Attention_0": 2,
        "nn.Module: T5Attention_1": 2,
    }
