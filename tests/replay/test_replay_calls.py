"""replay/calls.py: the distinct attention calls of the project's traces, as a replay rebuilds them."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from replay_helpers import calls_of, varlen_trace

from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.replay.calls import LIST_KEYS, call_id

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def trace(rel: str) -> str:
    found = sorted(glob.glob(os.path.join(ROOT, rel, "*.json*")))
    assert found, rel
    return found[0]


def only(rel: str) -> dict:
    cs = calls_of(trace(rel))
    assert len(cs) == 1, cs
    return cs[0]


def kernel_time(rep: dict, instances: list[int], direction: str, phases=None) -> float:
    """Attention kernel time of the report's calls (the kernel table, the engine's own tagging)."""
    kt = rep["kernels"]
    rows = kt.rows(np.flatnonzero(np.asarray(kt.columns["attention"], dtype=bool)))
    return sum(
        r["dur_us"]
        for r in rows
        if r["instance"] in instances and r["direction"] == direction and (phases is None or r["phase"] in phases)
    )


def test_sdpa_training_flash():
    p = trace("validation/traces/sdpa_flash_fwdbwd_causal")
    c = calls_of(p)[0]
    assert list(c)[: len(LIST_KEYS)] == list(LIST_KEYS)
    assert c["kind"] == "sdpa" and c["op"] == "aten::scaled_dot_product_attention"
    assert c["q_shape"] == c["k_shape"] == c["v_shape"] == [4, 16, 2048, 64] and c["dtype"] == "bf16"
    assert c["q_stride"] == [2097152, 131072, 64, 1]
    assert c["causal"] is True and c["dropout_p"] == 0.0 and c["scale"] is None and c["enable_gqa"] is False
    assert c["mask"] is None and c["directions"] == ["forward", "backward"] and c["count"] == 1
    assert c["trace_backend"] == "flash" and c["backends"][:4] == ["flash", "efficient", "cudnn", "math"]
    # the call's kernel time: its fused kernels (and the backward's copies inside the fused op)
    rep = analyze_path(p)
    assert c["per_call_us"]["forward"] == pytest.approx(kernel_time(rep, [0], "forward", {"fused_attention"}), abs=1e-3)
    assert c["per_call_us"]["backward"] == pytest.approx(kernel_time(rep, [0], "backward"), abs=1e-3)
    assert c["trace_time_us"] == pytest.approx(c["per_call_us"]["forward"] + c["per_call_us"]["backward"], abs=1e-2)


@pytest.mark.parametrize(
    "rel, backend",
    [
        ("validation/traces/sdpa_efficient_fwdbwd_causal", "efficient"),
        ("validation/traces/sdpa_cudnn_fwdbwd_causal", "cudnn"),
        ("validation/traces/sdpa_math_fwdbwd_causal", "math"),
    ],
)
def test_the_trace_backend_is_the_one_that_ran(rel, backend):
    assert only(rel)["trace_backend"] == backend


def test_gqa_decode_with_a_kv_cache():
    c = only("validation/traces/decode_gqa_flash")
    assert c["kind"] == "decode" and c["detail"] == {"kv_len": 8192, "q_len": 1}
    assert c["q_shape"] == [8, 32, 1, 128] and c["k_shape"] == [8, 8, 8192, 128] and c["enable_gqa"] is True
    assert c["directions"] == ["forward"] and c["trace_backend"] == "flash"
    assert c["per_call_us"]["forward"] == pytest.approx(66.912 + 3.84, abs=0.01)  # split-KV kernel + combine


def test_decode_steps_of_one_shape_are_one_call():
    c = only("tests/data/modern/decode_graph_eager")
    assert c["count"] == 4 and c["instances"] == [0, 1, 2, 3] and c["trace_backend"] == "cudnn"


def test_eager_hf_llama_pattern_as_recorded():
    p = trace("validation/traces/hf_llama_eager_fwdbwd")
    c = calls_of(p)[0]
    assert c["kind"] == "eager" and c["trace_backend"] == "eager"
    assert c["q_shape"] == [2, 16, 2048, 128] and c["q_stride"] == [4194304, 128, 2048, 1]
    # k as the recorded k^T operand read back: k.transpose(-2, -1) has the recorded strides
    assert c["k_shape"] == [2, 16, 2048, 128] and c["k_stride"] == [4194304, 262144, 128, 1]
    ops = [s["op"] for s in c["detail"]["steps"]]
    assert ops == ["qk", "scale", "mask", "softmax", "cast", "dropout", "pv"]
    assert c["detail"]["steps"][3]["dtype"] == "fp32" and c["detail"]["steps"][4]["dtype"] == "bf16"
    assert c["mask"] == {
        "shape": [2, 1, 2048, 2048],
        "stride": [4194304, 4194304, 2048, 1],
        "dtype": "bf16",
        "kind": "causal_tensor",  # transformers' sdpa_mask compares query and key positions in the trace
        "apply": "add",
    }
    assert any("the mask is the causal one" in n for n in c["notes"])
    assert c["scale"] is None and c["detail"]["assumed_scale"] == pytest.approx(128**-0.5, rel=1e-6)
    assert any("not recorded" in n for n in c["notes"])
    # its time: the kernels from the QK^T matmul to the PV matmul and their backward, at least the
    # core phases the engine tags (the softmax's cast back to bf16 is a layout kernel between them)
    rep = analyze_path(p)
    core = {"qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul"}
    for d in ("forward", "backward"):
        assert c["per_call_us"][d] >= kernel_time(rep, [0], d, core) - 1e-3
        assert c["per_call_us"][d] <= kernel_time(rep, [0], d)


def test_naive_attention_builds_its_mask_inside_the_call():
    c = only("validation/traces/naive_bf16_s2048_d64_fwdbwd")
    assert c["kind"] == "eager" and c["causal"] is True and c["dropout_p"] == pytest.approx(0.1)
    steps = c["detail"]["steps"]
    assert [s["op"] for s in steps] == ["qk", "scale", "mask_build", "mask", "softmax", "dropout", "pv"]
    assert steps[2] == {"op": "mask_build", "fn": "triu", "diagonal": 1, "shape": [2048, 2048], "dtype": "bool"}
    assert c["mask"]["kind"] == "causal_tensor" and c["mask"]["apply"] == "masked_fill"


def test_flex_causal_and_sliding_window_from_create_block_mask():
    c = only("tests/data/modern/flex_causal_fwdbwd")
    bm = c["detail"]["block_mask"]
    assert c["kind"] == "flex" and c["trace_backend"] == "flex" and c["causal"] is True
    assert bm["mask_mod"] == "causal" and (bm["q_blocks"], bm["kv_blocks"], bm["q_block"]) == (16, 16, 128)
    assert c["q_stride"] == [6291456, 64, 3072, 1]  # q, k, v are views of one packed qkv projection
    # its time: the flex template kernels (not create_block_mask's, not the projections)
    rep = analyze_path(trace("tests/data/modern/flex_causal_fwdbwd"))
    kt = rep["kernels"]
    rows = [r for r in kt.rows(np.arange(len(kt))) if r["attention"] and "flex_attention" in (r["op"] or "")]
    for d in ("forward", "backward"):
        want = sum(r["dur_us"] for r in rows if r["direction"] == d)
        assert want > 0 and c["per_call_us"][d] == pytest.approx(want, abs=1e-3)
    s = only("tests/data/modern/flex_swa_fwdbwd")["detail"]["block_mask"]
    assert s["mask_mod"] == "sliding_window" and s["window"] == 256


def test_flex_without_the_mask_in_the_trace_says_so():
    c = only("tests/data/modern/hf_llama_flex_fwdbwd")
    assert c["kind"] == "flex" and c["count"] == 2 and c["enable_gqa"] is True
    assert c["detail"]["block_mask"]["mask_mod"] is None
    assert any("upper bound" in n for n in c["notes"])


def test_multihead_attention_is_replayed_as_the_module():
    c = only("validation/traces/mha_bf16_needw")
    assert c["kind"] == "mha" and c["trace_backend"] == "eager"
    d = c["detail"]
    assert (d["embed_dim"], d["num_heads"], d["need_weights"], d["batch_first"]) == (1024, 16, True, True)
    rep = analyze_path(trace("validation/traces/mha_bf16_needw"))
    assert c["trace_time_us"] == pytest.approx(kernel_time(rep, [0], "forward"), abs=1e-2)  # the whole module
    assert only("validation/traces/mha_fp32_noweights")["trace_backend"] == "efficient"


def test_varlen_jagged_sdpa(tmp_path):
    p = varlen_trace(tmp_path / "jagged.pt.trace.json")
    c = only_path(p)
    assert c["kind"] == "varlen" and c["op"] == "aten::_flash_attention_forward" and c["trace_backend"] == "flash"
    d = c["detail"]
    assert (d["sequences"], d["total_q"], d["max_q"], d["heads"], d["head_dim"]) == (4, 3000, 1500, 16, 64)
    assert c["causal"] is True and c["scale"] == 0.125
    assert c["per_call_us"]["forward"] == pytest.approx(250.0)
    assert any("not recorded" in n for n in c["notes"])


def only_path(p) -> dict:
    cs = calls_of(p)
    assert len(cs) == 1, cs
    return cs[0]


def test_the_id_is_a_hash_of_the_signature():
    c = only("validation/traces/sdpa_flash_fwdbwd_causal")
    sig = {
        k: c[k]
        for k in c
        if k not in ("id", "count", "instances", "directions", "trace_time_us", "per_call_us", "backends")
    }
    assert call_id(sig) == c["id"] and c["id"].startswith("sdpa-")
    assert only("validation/traces/sdpa_flash_fwdbwd_full")["id"] != c["id"]  # not causal: another call


def test_compiled_regions_are_listed_as_not_replayable():
    rep = analyze_path(trace("validation/traces/compiled_naive_fwdbwd"))
    b = rep["replay"]
    assert b["calls"] == [] and b["unsupported"] and "torch.compile" in b["unsupported"][0]["reason"]


def test_an_amp_call_is_replayed_under_autocast(tmp_path):
    """Under torch.autocast(bf16) an HF eager attention's matmuls get fp32 inputs (rotary promotes q
    and k) and run as bf16 kernels: the cast ops in the trace say so, and the replay runs the call
    under autocast with the recorded fp32 inputs, not fp32 math the trace never ran."""
    from replay_helpers import amp_trace

    c = calls_of(amp_trace(tmp_path / "amp.pt.trace.json"))[0]
    assert c["kind"] == "eager" and c["dtype"] == "fp32" and c["autocast"] == "bf16"
    assert any("autocast" in n for n in c["notes"])
