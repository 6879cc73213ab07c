"""The memory block: allocations per phase, the peak and what held it, S×S scores vs a fused
kernel, the K/V footprint and its GQA/MQA/MLA alternatives, data movement and its flags."""

import glob
import json
import os

import pytest

from helpers import ROOT
from synth import BF16, SynthTrace, naive_attention
from tb_attention_plugin.cli import main
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.memory import MLA_LATENT_DIM, MLA_ROPE_DIM, op_outputs
from tb_attention_plugin.report import analyze_trace
from tb_attention_plugin.trace.records import Signature, load_trace
from tb_attention_plugin.trace.shapes import parse_args

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "memory")


def analyze(path):
    rep = analyze_trace(load_trace(str(path)))
    # the block is plain JSON
    return rep, json.loads(to_json(rep["memory"]))


def cpu(kind, s):
    return os.path.join(DATA, f"cpu_{kind}_s{s}.json.gz")


def h200(name):
    for pat in (
        os.path.join(ROOT, "sample_traces", "validation", name, "*.pt.trace.json*"),
        os.path.join(ROOT, "validation", "traces", name, "*.pt.trace.json*"),
    ):
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    pytest.skip(f"H200 trace {name} is not available")


# ---------------------------------------------------------------- S×S scores: naive vs fused
@pytest.mark.parametrize("s", [64, 128])
def test_cpu_naive_allocates_score_matrices_fused_does_not(s):
    b, h, d, itemsize = 1, 2, 16, 4
    score = b * h * s * s * itemsize
    _, naive = analyze(cpu("naive", s))
    assert naive["recorded"] and naive["primary"] == "cpu"
    dev = naive["devices"][0]
    assert dev["device_type"] == "cpu"
    sm = dev["score_matrices"]
    # QK^T, scale, masked_fill, softmax, dropout mask and output: six S×S tensors, each B·H·S·S·4
    assert sm["allocs"] == 6 and sm["max_bytes"] == score and sm["bytes"] == 6 * score
    qk = next(p for p in dev["phases"] if p["phase"] == "qk_matmul")
    assert qk["score_allocs"] == 1 and qk["largest"]["bytes"] == score
    assert qk["largest"]["shape"] == [b, h, s, s] and qk["largest"]["op"] == "aten::matmul"
    assert qk["largest"]["alloc_op"] == "aten::bmm"
    peak = dev["attention_peak"]
    held = [g for g in peak["held_by"] if g["score_matrix"]]
    assert held and all(g["shape"] == [b, h, s, s] for g in held)
    assert peak["score_bytes"] == sum(g["bytes"] for g in held) >= 3 * score
    call = dev["calls"][0]
    assert call["fused_path"] is False and call["score_allocs"] == 6
    assert call["score_matrix_bytes"] == score
    # a fused kernel allocates out [B,H,S,D] + logsumexp [B,H,S] fp32
    assert call["fused_alloc_bytes"] == b * h * s * d * itemsize + b * h * s * 4
    assert call["core_peak_bytes"] > 3 * score > call["fused_alloc_bytes"]
    assert any(f["code"] == "score_matrix" for f in naive["flags"])

    _, fused = analyze(cpu("sdpa", s))
    dev = fused["devices"][0]
    assert dev["score_matrices"]["allocs"] == 0
    assert not any(p["score_allocs"] for p in dev["phases"])
    assert all(not g["score_matrix"] for g in dev["attention_peak"]["held_by"])
    fa = next(p for p in dev["phases"] if p["phase"] == "fused_attention")
    assert fa["alloc_bytes"] < score
    assert any(
        g["shape"] == [b, h, s, d] and g["phase"] == "fused_attention" and g["dtype"] == "fp32"
        for g in dev["attention_peak"]["held_by"]
    )
    assert not any(f["code"] == "score_matrix" for f in fused["flags"])
    naive_peak = naive["devices"][0]["attention_peak"]
    assert dev["attention_peak"]["total_allocated_bytes"] < naive_peak["total_allocated_bytes"]


@pytest.mark.parametrize("s", [1024, 4096])
def test_h200_naive_vs_flash_scores_on_the_gpu(s):
    b, h, d, itemsize = 2, 16, 64, 2
    score = b * h * s * s * itemsize
    _, naive = analyze(h200(f"mem_naive_s{s}"))
    gpu = naive["devices"][0]
    assert gpu["device"] == "cuda:0" and naive["primary"] == "cuda:0"
    # CPU events of the same trace are a device of their own, never mixed into the GPU figures
    assert all(d["device_type"] != "cuda" for d in naive["devices"][1:])
    assert gpu["score_matrices"]["max_bytes"] == score and gpu["score_matrices"]["allocs"] >= 5
    pk = gpu["attention_peak"]
    assert {tuple(g["shape"]) for g in pk["held_by"] if g["score_matrix"]} == {(b, h, s, s)}
    assert pk["score_bytes"] >= 3 * score
    _, flash = analyze(h200(f"mem_flash_s{s}"))
    gpu = flash["devices"][0]
    assert gpu["score_matrices"]["allocs"] == 0
    call = gpu["calls"][0]
    # flash allocates exactly what the model says a fused kernel needs (out + lse), to the 512 B block
    assert abs(call["core_peak_bytes"] - call["fused_alloc_bytes"]) <= 2048
    assert call["shapes"] == {"b": b, "h": h, "hk": h, "sq": s, "sk": s, "d": d, "dv": d, "dtype": "bf16", "sk_min": s}


# ---------------------------------------------------------------- attribution (synthetic)
def _mem_trace(tmp_path, backward=True):
    t = SynthTrace()
    b, h, s, d = 2, 4, 128, 64
    score = b * h * s * s * 2
    with t.step(1):
        with t.module("NaiveAttention_0"):
            with t.op("aten::bmm", dims=[[b * h, s, d], [b * h, d, s]], types=[BF16] * 2, seq=11):
                t.memory(score, 0xA000)
                t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_TNN", dur=8)
            with t.op(
                "aten::_softmax",
                dims=[[b, h, s, s], [], []],
                types=[BF16, "Scalar", "Scalar"],
                concrete=["", "-1", "False"],
                seq=12,
                flow_start=5,
            ):
                t.memory(score, 0xB000)
                t.memory(100, 0xC000, device_type=0, device_id=-1)  # a CPU allocation
                t.kernel("softmax_warp_forward", dur=7)
            with t.op("aten::bmm", dims=[[b * h, s, s], [b * h, s, d]], types=[BF16] * 2, seq=13):
                t.memory(b * h * s * d * 2, 0xD000)
                t.kernel("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNN", dur=8)
        t.memory(-score, 0xA000)
        with t.op("aten::linear", dims=[[b, s, 256], [256, 256]], types=[BF16] * 2):
            t.memory(b * s * 256 * 2, 0xE000)  # outside attention
            t.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dur=5)
        if backward:
            with t.op("autograd::engine::evaluate_function: SoftmaxBackward0", tid=200) as ev:
                t.flow_end(5, ev["ts"], 200)
                with t.op(
                    "aten::_softmax_backward_data",
                    dims=[[b, h, s, s], [b, h, s, s], [], []],
                    types=[BF16, BF16, "Scalar", "Scalar"],
                    tid=200,
                ):
                    t.memory(score, 0xF000, tid=200)
                    t.kernel("softmax_warp_backward", dur=7, tid=200)
    return t.write(tmp_path / "mem.json")


def test_events_attributed_to_phases_and_directions(tmp_path):
    _, m = analyze(_mem_trace(tmp_path))
    assert [d["device"] for d in m["devices"]] == ["cuda:0", "cpu"]
    gpu, host = m["devices"]
    phases = {(p["phase"], p["direction"]): p for p in gpu["phases"]}
    b, h, s, d = 2, 4, 128, 64
    score = b * h * s * s * 2
    assert phases[("qk_matmul", "forward")]["alloc_bytes"] == score
    assert phases[("softmax", "forward")]["alloc_bytes"] == score
    assert phases[("pv_matmul", "forward")]["alloc_bytes"] == b * h * s * d * 2
    # the backward allocation inherits the forward softmax's call and phase through the fwdbwd flow
    assert phases[("softmax", "backward")]["alloc_bytes"] == score
    # the linear outside attention and the free after it are not attention's
    assert gpu["attention"]["alloc_bytes"] == 3 * score + b * h * s * d * 2
    assert gpu["alloc_bytes"] == gpu["attention"]["alloc_bytes"] + b * s * 256 * 2
    # bmm [b,m,k] x [b,k,n] -> [b,m,n] names the allocation
    qk = phases[("qk_matmul", "forward")]["largest"]
    assert qk["op"] == "aten::bmm" and qk["shape"] == [b * h, s, s] and qk["score_matrix"] is True
    # the CPU allocation stays on the CPU device
    assert host["allocs"] == 1 and host["alloc_bytes"] == 100
    # peak inside attention: after the backward softmax allocation, before nothing is freed
    pk = gpu["attention_peak"]
    assert pk["direction"] == "backward" and pk["phase"] == "softmax"
    assert pk["total_allocated_bytes"] == 2 * score + b * h * s * d * 2 + b * s * 256 * 2  # QK^T's was freed
    assert pk["live_bytes"] == pk["total_allocated_bytes"] and pk["before_window_bytes"] == 0
    assert {g["phase"] for g in pk["held_by"] if g["attention"]} == {"softmax", "pv_matmul"}
    assert len(gpu["curve"]["ts"]) == gpu["events"] and gpu["curve"]["allocated"][-1] == gpu["end_allocated_bytes"]
    spans = m["attention_spans"]
    assert {s["direction"] for s in spans} == {"forward", "backward"}


def test_without_memory_events_says_how_to_record(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    rep, m = analyze(t.write(tmp_path / "n.json"))
    assert m["recorded"] is False and m["devices"] == [] and m["primary"] is None
    assert "profile_memory=True" in m["notice"]["fix"]
    assert m["footprint"]["layers"]  # shapes alone still give the footprint
    assert rep["trace"]["profile_memory"] is False


def test_op_outputs_rules():
    def args(dims, types, concrete=None):
        return parse_args(
            Signature(
                json.dumps(dims).encode(),
                json.dumps(types).encode(),
                b"",
                json.dumps(concrete or [""] * len(dims)).encode(),
            )
        )

    assert op_outputs("aten::bmm", args([[8, 128, 64], [8, 64, 256]], [BF16] * 2))[0][:3] == ((8, 128, 256), "bf16", 2)
    assert op_outputs("aten::matmul", args([[2, 4, 128, 64], [2, 4, 64, 128]], [BF16] * 2))[0][0] == (2, 4, 128, 128)
    assert op_outputs("aten::linear", args([[2, 10, 32], [96, 32]], ["float"] * 2))[0][0] == (2, 10, 96)
    outs = op_outputs("aten::native_dropout", args([[2, 4, 8, 8], [], []], [BF16, "Scalar", "Scalar"]))
    assert [(o[0], o[1]) for o in outs] == [((2, 4, 8, 8), "bf16"), ((2, 4, 8, 8), "bool")]
    empty = args([[], [], []], ["ScalarList", "Scalar", ""], ["[128, 128]", "11", ""])
    assert op_outputs("aten::empty", empty)[0][:3] == ((128, 128), "bool", 1)
    softmax = args([[2, 8, 8], [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "True"])
    assert op_outputs("aten::_softmax", softmax)[0][1] == "fp32"
    cat = op_outputs("aten::cat", args([[[1, 8, 100, 64], [1, 8, 1, 64]], []], ["TensorList", "Scalar"], ["", "2"]))
    assert cat[0][0] == (1, 8, 101, 64)
    sd = op_outputs(
        "aten::_scaled_dot_product_flash_attention",
        args([[2, 16, 128, 64], [2, 4, 256, 64], [2, 4, 256, 64], [], []], [BF16] * 3 + ["Scalar"] * 2),
    )
    assert sd[0][0] == (2, 16, 128, 64) and sd[1][:2] == ((2, 16, 128), "fp32")


# ---------------------------------------------------------------- K/V footprint and alternatives
def _sdpa_call(t, b, h, hk, sq, sk, d, name="LlamaAttention_0"):
    with t.module(name):
        with t.op(
            "aten::scaled_dot_product_attention",
            dims=[[b, h, sq, d], [b, hk, sk, d], [b, hk, sk, d], [], [], [], [], []],
            types=[BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
            concrete=["", "", "", "", "0.", "False", "", "True"],
        ):
            with t.op(
                "aten::_scaled_dot_product_flash_attention",
                dims=[[b, h, sq, d], [b, hk, sk, d], [b, hk, sk, d], [], []],
                types=[BF16] * 3 + ["Scalar", "Scalar"],
                concrete=["", "", "", "0.", "False"],
            ):
                t.kernel("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>", dur=20)


def test_kv_footprint_and_gqa_mqa_mla_arithmetic(tmp_path):
    b, h, hk, sk, d = 8, 32, 8, 4096, 128
    t = SynthTrace()
    with t.step(1):
        for layer in range(4):  # decode: one query token, four layers
            _sdpa_call(t, b, h, hk, 1, sk, d, name=f"LlamaAttention_{layer}")
    _, m = analyze(t.write(tmp_path / "decode.json"))
    fp = m["footprint"]
    per_call = b * hk * sk * (d + d) * 2
    assert fp["calls"] == 4 and fp["basis_calls"] == 4 and fp["kv_bytes"] == 4 * per_call
    layer = fp["layers"][0]
    assert layer["kv_bytes_per_call"] == per_call and layer["kv_source"] == "sdpa_inputs"
    assert layer["shapes"] == {
        "b": b,
        "h": h,
        "hk": hk,
        "sq": 1,
        "sk": sk,
        "d": d,
        "dv": d,
        "dtype": "bf16",
        "sk_min": sk,
    }
    assert layer["score_matrix_bytes"] == 0 and layer["score_tensors"] == 0  # decode has no S×S
    alt = {a["name"]: a for a in fp["alternatives"]}
    assert alt["current"]["bytes"] == 4 * per_call and alt["current"]["kv_heads"] == hk
    assert alt["MHA"]["bytes"] == 4 * b * h * sk * 2 * d * 2 == 4 * alt["current"]["bytes"]
    assert alt["GQA-8"]["bytes"] == alt["current"]["bytes"] and alt["GQA-8"]["saving"] == 0
    assert alt["MQA"]["bytes"] == 4 * b * 1 * sk * 2 * d * 2 and alt["MQA"]["saving"] == pytest.approx(1 - 1 / hk)
    mla = next(a for a in fp["alternatives"] if a["name"].startswith("MLA"))
    assert mla["bytes"] == 4 * b * sk * (MLA_LATENT_DIM + MLA_ROPE_DIM) * 2
    assert mla["saving"] == pytest.approx(1 - (MLA_LATENT_DIM + MLA_ROPE_DIM) / (hk * 2 * d), abs=1e-4)
    # fused activations: q + k + v + out + fp32 logsumexp
    assert layer["fused_activation_bytes"] == (
        b * h * 1 * d * 2 + 2 * b * hk * sk * d * 2 + b * h * 1 * d * 2 + b * h * 1 * 4
    )


def test_eager_kv_from_matmul_operands_and_repeat_kv(tmp_path):
    b, h, hk, s, d = 2, 16, 4, 256, 64
    t = SynthTrace()
    with t.module("LlamaAttention_0"):
        with t.op(
            "aten::expand",
            dims=[[b, hk, 1, s, d], [], []],
            types=[BF16, "ScalarList", "Scalar"],
            concrete=["", f"[{b}, {hk}, {h // hk}, {s}, {d}]", "False"],
        ):
            pass
        with t.op("aten::matmul", dims=[[b, h, s, d], [b, h, d, s]], types=[BF16] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, d], [b * h, d, s]], types=[BF16] * 2):
                t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_TNN", dur=8)
        with t.op(
            "aten::_softmax",
            dims=[[b, h, s, s], [], []],
            types=[BF16, "Scalar", "Scalar"],
            concrete=["", "-1", "False"],
        ):
            t.kernel("softmax_warp_forward", dur=7)
        with t.op("aten::matmul", dims=[[b, h, s, s], [b, h, s, d]], types=[BF16] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, s], [b * h, s, d]], types=[BF16] * 2):
                t.kernel("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNN", dur=8)
    _, m = analyze(t.write(tmp_path / "eager.json"))
    layer = m["footprint"]["layers"][0]
    assert layer["kv_source"] == "repeat_kv"
    assert layer["shapes"]["h"] == h and layer["shapes"]["hk"] == hk
    assert layer["kv_bytes_per_call"] == b * hk * s * 2 * d * 2
    assert layer["score_matrix_bytes"] == b * h * s * s * 2 and layer["score_tensors"] == 2  # QK^T + softmax


# ---------------------------------------------------------------- data movement flags
def _layer_with_copy(t, layer, copy_k=True, cat_cache=None, htod=False, b=2, h=8, s=128, d=64):
    with t.module(f"Attention_{layer}"):
        if copy_k:
            with t.op(
                "aten::contiguous",
                dims=[[b, s, h, d], []],
                types=[BF16, "Scalar"],
                strides=[[s * h * d, d, s * d, 1], []],
            ):
                with t.op(
                    "aten::clone",
                    dims=[[b, s, h, d], []],
                    types=[BF16, "Scalar"],
                    strides=[[s * h * d, d, s * d, 1], []],
                ):
                    with t.op("aten::copy_", dims=[[b, s, h, d], [b, s, h, d], []], types=[BF16, BF16, "Scalar"]):
                        t.kernel("void at::native::elementwise_kernel<128, 4, copy_kernel>", dur=5)
        sk = s
        if cat_cache is not None:
            sk = cat_cache + 1
            with t.op(
                "aten::cat",
                dims=[[[b, h, cat_cache, d], [b, h, 1, d]], []],
                types=["TensorList", "Scalar"],
                concrete=["", "2"],
            ):
                t.kernel("void at::native::CatArrayBatchedCopy<OpaqueType<2u>, unsigned int, 4, 128, 1>", dur=6)
        if htod:
            with t.op("aten::to", dims=[[s, s], [], [], [], []], types=["bool", "", "", "Scalar", "Scalar"]):
                with t.op("aten::_to_copy", dims=[[s, s], [], [], [], [], [], []], types=["bool"] + [""] * 6):
                    with t.op("aten::copy_", dims=[[s, s], [s, s], []], types=["bool", "bool", "Scalar"]):
                        t.memcpy("HtoD (Pageable -> Device)", nbytes=s * s, dur=3)
        with t.op(
            "aten::_scaled_dot_product_flash_attention",
            dims=[[b, h, 1 if cat_cache else s, d], [b, h, sk, d], [b, h, sk, d], [], []],
            types=[BF16] * 3 + ["Scalar", "Scalar"],
            concrete=["", "", "", "0.", "False"],
        ):
            t.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", dur=20)


def _flags(tmp_path, name, build):
    t = SynthTrace()
    build(t)
    _, m = analyze(t.write(tmp_path / f"{name}.json"))
    return m["flags"], m["data_movement"]


def test_contiguous_copy_every_layer_is_flagged_once_with_evidence(tmp_path):
    flags, dm = _flags(tmp_path, "two", lambda t: [_layer_with_copy(t, i) for i in range(2)])
    rep = [f for f in flags if f["code"] == "repeated_copy"]
    assert len(rep) == 1
    f = rep[0]
    assert f["op"] == "aten::contiguous" and f["calls"] == 2 and f["time_us"] == 10.0
    assert f["bytes"] == 2 * 2 * (2 * 128 * 8 * 64 * 2)  # two calls, read + write
    assert "2 of 2 attention calls" in f["message"] and "not contiguous" in f["evidence"]
    g = next(c for c in dm["copies"] if c["op"] == "aten::contiguous")
    assert g["kind"] == "materialize" and g["instances"] == 2 and g["kernels"] == 2 and g["noncontiguous_input"]
    # the same copy in one layer only is no evidence of repetition
    flags, _ = _flags(tmp_path, "one", lambda t: _layer_with_copy(t, 0))
    assert not [f for f in flags if f["code"] == "repeated_copy"]


def test_kv_cache_cat_and_host_transfer_flags(tmp_path):
    flags, dm = _flags(tmp_path, "cat", lambda t: _layer_with_copy(t, 0, copy_k=False, cat_cache=511, htod=True))
    codes = {f["code"] for f in flags}
    assert "kv_cache_cat" in codes and "host_device_transfer" in codes
    cat = next(f for f in flags if f["code"] == "kv_cache_cat")
    assert "511 cached + 1 new positions -> 512" in cat["evidence"] and "static" in cat["fix"].lower()
    tr = next(f for f in flags if f["code"] == "host_device_transfer")
    assert tr["bytes"] == 128 * 128 and tr["calls"] == 1
    # the memcpy is listed as a transfer issued by the copy op, and counted once in the totals
    t = next(g for g in dm["transfers"] if g["copy"] == "HtoD")
    assert t["op"] == "aten::to" and t["counted_with_copy"] is True
    assert dm["totals"]["host_device_bytes"] == 128 * 128


def test_decode_steps_group_by_layer_and_one_cache_flag(tmp_path):
    b, h, d, start = 2, 8, 64, 100

    def build(t):
        for step in range(3):
            with t.step(step + 1):
                for layer in range(2):
                    _layer_with_copy(t, layer, copy_k=False, cat_cache=start + step, b=b, h=h, d=d)

    flags, _ = _flags(tmp_path, "decode", build)
    t = SynthTrace()
    build(t)
    _, m = analyze(t.write(tmp_path / "decode2.json"))
    fp = m["footprint"]
    assert len(fp["layers"]) == 1
    layer = fp["layers"][0]
    assert layer["calls"] == 6 and layer["shapes"]["sk"] == start + 3 and layer["shapes"]["sk_min"] == start + 1
    assert layer["kv_bytes_per_call"] == b * h * (start + 3) * 2 * d * 2
    # totals are for one step (the one with the most K/V: the last), not the sum over steps
    assert fp["basis"].startswith("ProfilerStep#3") and fp["basis_calls"] == 2
    assert fp["kv_bytes"] == 2 * b * h * (start + 3) * 2 * d * 2
    cat = [f for f in flags if f["code"] == "kv_cache_cat"]
    assert len(cat) == 1 and cat[0]["calls"] == 6 and cat[0]["shapes"] == 3


def test_clean_fused_attention_has_no_flags(tmp_path):
    flags, dm = _flags(tmp_path, "clean", lambda t: [_layer_with_copy(t, i, copy_k=False) for i in range(3)])
    assert flags == [] and dm["copies"] == [] and dm["transfers"] == []


# ---------------------------------------------------------------- CLI
def test_cli_memory_section_in_every_format(capsys):
    path = cpu("naive", 64)
    for fmt, needle in (
        ("table", "Memory and data movement"),
        ("markdown", "### Memory and data movement"),
        ("csv", "section,path,device,phase"),
    ):
        assert main(["analyze", path, "-f", fmt, "--memory", "--no-cache"]) == 0
        out = capsys.readouterr().out
        assert needle in out and "S×S" in out or fmt == "csv"
        if fmt == "csv":
            assert ",score_matrix," in out and "peak_held_by" in out
    assert main(["analyze", path, "-f", "table", "--no-cache"]) == 0
    assert "Memory and data movement" not in capsys.readouterr().out
    # JSON always carries the block
    assert main(["analyze", path, "-f", "json", "--no-cache"]) == 0
    t = json.loads(capsys.readouterr().out)["traces"][0]
    assert t["memory"]["recorded"] is True and t["memory"]["devices"][0]["score_matrices"]["allocs"] == 6


# ---------------------------------------------------------------- H200 traces with profile_memory=True
H200_MEM = os.path.join(DATA, "h200")  # tests/data/memory/h200/make_traces.py made them


def test_h200_training_step_backward_allocations_on_their_forward_phases():
    _, m = analyze(os.path.join(H200_MEM, "gpt4l_naive_train_mem.pt.trace.json.gz"))
    gpu = m["devices"][0]
    assert gpu["device"] == "cuda:0"
    ph = {(p["phase"], p["direction"]): p for p in gpu["phases"]}
    b, h, s = 4, 16, 1024
    for phase in ("scale", "mask", "softmax", "dropout"):
        assert ph[(phase, "backward")]["score_allocs"] >= 4  # one per layer at least
    assert ph[("softmax", "backward")]["largest"]["op"] == "aten::_softmax_backward_data"
    assert ph[("softmax", "backward")]["largest"]["shape"] == [b, h, s, s]
    pk = gpu["attention_peak"]
    assert pk["direction"] == "backward" and pk["score_bytes"] > pk["total_allocated_bytes"] / 2
    call = gpu["calls"][0]
    assert call["scope"] == "nn.Module: NaiveAttention" and call["calls"] == 4  # four layers, one group
    assert call["core_peak_bytes"] > 10 * call["fused_alloc_bytes"]


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_h200_llama_decode_dynamic_cache_is_flagged(impl):
    _, m = analyze(os.path.join(H200_MEM, f"hf_llama_decode_{impl}_mem.pt.trace.json.gz"))
    flags = {f["code"]: f for f in m["flags"]}
    cat = flags["kv_cache_cat"]
    # K and V of 2 layers over 3 decode steps, one finding
    assert cat["calls"] == 12 and cat["shapes"] == 3 and "cached + 1 new positions" in cat["evidence"]
    layer = m["footprint"]["layers"][0]
    assert layer["calls"] == 6 and (layer["shapes"]["h"], layer["shapes"]["hk"], layer["shapes"]["sq"]) == (16, 4, 1)
    assert (layer["shapes"]["sk_min"], layer["shapes"]["sk"]) == (516, 518)
    assert m["footprint"]["kv_bytes"] == 2 * 4 * 4 * 518 * 2 * 64 * 2
    if impl == "eager":
        assert layer["kv_source"] == "repeat_kv" and "kv_expand" in flags and "score_cast" in flags
    else:
        assert layer["kv_source"] == "sdpa_inputs" and set(flags) == {"kv_cache_cat"}


def test_call_numbers_match_the_kernels():
    """``instance`` in the memory block is the kernels' call number, not an internal id."""
    rep, mem = analyze(os.path.join(DATA, "h200", "gpt4l_naive_train_mem.pt.trace.json.gz"))
    kernel_calls = {k["instance"] for k in rep["kernels"] if k["attention"]}
    span_calls = {s["instance"] for s in mem["attention_spans"]}
    assert span_calls and span_calls <= kernel_calls
    assert kernel_calls == set(range(len(kernel_calls)))
    peak = mem["devices"][0]["attention_peak"]
    assert peak["instance"] in kernel_calls
    # the call that held the peak ran kernels of the peak's phase
    assert any(k["instance"] == peak["instance"] and k["phase"] == peak["phase"] for k in rep["kernels"])


def test_copy_group_totals_match_one_loop_over_the_ops_to_the_bit(monkeypatch):
    """movement._sum_groups adds whole arrays; the figures must be those of one loop over the
    top copy ops in time order (the code it replaced), bit for bit, with 0 to 9 activities per op,
    unknown sizes and ops without a tensor input."""
    import numpy as np

    from tb_attention_plugin.memory import movement

    monkeypatch.setattr(movement, "rounded", lambda x: x)  # the sums themselves, unrounded
    rounded = movement.rounded
    _sum_groups = movement._sum_groups

    rng = np.random.default_rng(7)
    n_top, n_groups = 400, 7
    order = rng.permutation(1000)[:n_top]
    inst_r = rng.integers(0, 30, size=1000)
    rdur = rng.random(1000) * 1e3
    gdur = rng.random(5000) * 1e2 + rng.random(5000) * 1e-9
    gi = rng.integers(0, n_groups, size=n_top)
    gpu_of = {}
    nk = rng.choice([0, 1, 1, 2, 3, 7, 8, 9, 20], size=n_top)  # numpy sums 8 and more pairwise
    for t, k in zip(order.tolist(), nk.tolist()):
        if k:
            gpu_of[t] = rng.integers(0, 5000, size=k).tolist()
    top_bytes = [float(x) if x % 5 else 0.0 for x in rng.integers(0, 1 << 40, size=n_top).tolist()]
    sized = rng.random(n_top) > 0.1  # the caller passes 0.0 bytes for an op of unknown size
    top_bytes = [b if s else 0.0 for b, s in zip(top_bytes, sized.tolist())]
    top_unsized = [(not s) or e for s, e in zip(sized.tolist(), (rng.random(n_top) > 0.8).tolist())]
    top_nc = rng.choice([-1, 0, 1], size=n_top).tolist()

    loop = [
        {
            "calls": 0,
            "instances": set(),
            "cpu": 0.0,
            "gpu": 0.0,
            "kernels": 0,
            "bytes": 0.0,
            "est": False,
            "nc": None,
            "ids": [],
        }
        for _ in range(n_groups)
    ]
    for i, t in enumerate(order.tolist()):
        g, ks = loop[gi[i]], gpu_of.get(t, [])
        g["ids"].extend(ks)
        g["calls"] += 1
        g["instances"].add(int(inst_r[t]))
        g["cpu"] += float(rdur[t])
        g["gpu"] += float(gdur[ks].sum()) if ks else 0.0
        g["kernels"] += len(ks)
        if sized[i]:
            g["bytes"] += top_bytes[i]
        g["est"] |= top_unsized[i]
        if top_nc[i] >= 0:
            g["nc"] = bool(top_nc[i]) or bool(g["nc"])
    groups: list[dict] = [{} for _ in range(n_groups)]
    top = movement._TopCopies(order, gi.tolist(), top_bytes, top_unsized, top_nc)
    _sum_groups(groups, top, inst_r, rdur, gdur, gpu_of)
    for g, want in zip(groups, loop):
        assert g["kernel_ids"] == want["ids"]
        assert (g["calls"], g["instances"], g["kernels"]) == (want["calls"], len(want["instances"]), want["kernels"])
        assert g["cpu_time_us"] == rounded(want["cpu"]) and g["gpu_time_us"] == rounded(want["gpu"])
        assert g["bytes"] == int(round(want["bytes"]))
        assert (g["bytes_estimated"], g["noncontiguous_input"]) == (want["est"], want["nc"])


def test_a_strided_copy_fix_names_the_operand_of_its_matmul():
    """Issue #41: a PV matmul's copy is of V, not of K^T."""
    from tb_attention_plugin.memory.flags import _copy_flag

    base = dict(
        kind="materialize",
        instances=4,
        within="aten::matmul",
        op="aten::contiguous",
        shape=[8, 64, 2048],
        detail="",
        noncontiguous_input=True,
        direction="forward",
        calls=8,
        gpu_time_us=10.0,
        cpu_time_us=5.0,
        bytes=1e6,
        bytes_estimated=False,
    )
    fixes = {ph: (_copy_flag(dict(base, phase=ph), 8) or {}).get("fix", "") for ph in ("qk_matmul", "pv_matmul")}
    assert "strided K^T" in fixes["qk_matmul"] and "strided V" in fixes["pv_matmul"]
