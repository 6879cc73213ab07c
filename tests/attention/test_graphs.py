"""CUDA-graph replays: structure tags, --reference (eager or capture), the trace's own capture, a
reference found next to the replay, and truthful notices. Synthetic traces and the recorded H200
decode step (tests/data/modern: eager, replay, capture of the same 4-layer GQA decode step)."""

import glob
import json
import os
import re
import shutil

import pytest

from synth import BF16, SynthTrace
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.attention.graphs import align, structure_phases
from tb_attention_plugin.options import Options

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "modern")

# one decoder layer as a decode step launches it (names as PyTorch / cuBLAS / FlashAttention write them)
LAYER = [
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, rsqrt_kernel_cuda>", "norm"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "q"),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "k"),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "v"),
    ("void at::native::elementwise_kernel<128, 4, neg_kernel_cuda>", "rope"),
    ("void at::native::index_elementwise_kernel<128, 4, index_copy_kernel_impl>", "cache"),
    ("void at::native::index_elementwise_kernel<128, 4, index_copy_kernel_impl>", "cache"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>", "attn"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, 4>", "attn"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "o"),
    ("void at::native::vectorized_elementwise_kernel<8, CUDAFunctor_add>", "residual"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", "norm"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "up"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "down"),
]
EXPECTED = {
    "q": "qkv_proj",
    "k": "qkv_proj",
    "v": "qkv_proj",
    "rope": "rotary",
    "cache": "layout",
    "attn": "fused_attention",
    "o": "out_proj",
}


def graph_launch(t: SynthTrace, kernels: list[str], dur: float = 5.0) -> None:
    """One cudaGraphLaunch and the kernels it replays: one correlation id, no op."""
    t.corr += 1
    ts = t._tick(0.5)
    t.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": t.pid,
            "tid": t.tid,
            "ts": ts,
            "dur": 3.0,
            "args": {"correlation": t.corr, "cbid": 311},
        }
    )
    t.gpu_now = max(t.gpu_now, ts + 1)
    for name in kernels:
        t.gpu_now += 0.2
        t.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": round(t.gpu_now, 3),
                "dur": dur,
                "args": {
                    "queued": 0,
                    "device": 0,
                    "context": 1,
                    "stream": 7,
                    "correlation": t.corr,
                    "grid": [132, 1, 1],  # as the eager run launched it (synth.kernel)
                    "block": [128, 1, 1],
                    "registers per thread": 32,
                    "shared memory": 0,
                    "blocks per SM": 0.2,
                    "warps per SM": 1.0,
                    "est. achieved occupancy %": 2,
                },
            }
        )
        t.gpu_now += dur


def eager_layer(t: SynthTrace, b=8, h=2048, attention_module="DecodeAttention_0") -> None:
    """The same layer run eagerly with modules, ops and shapes."""

    def lin(name, n):
        with t.module(f"Linear_{name}"):
            with t.op("aten::linear", dims=[[b, 1, h], [n, h]], types=[BF16, BF16]):
                with t.op("aten::mm", dims=[[b, h], [h, n]], types=[BF16, BF16]):
                    t.kernel(next(it), dur=5)

    it = iter(n for n, _ in LAYER)
    with t.module("DecodeLayer_0"):
        with t.module("RMSNorm_0"):
            with t.op("aten::mean", dims=[[b, 1, h]], types=["float"]):
                t.kernel(next(it), dur=5)
            with t.op("aten::rsqrt", dims=[[b, 1, 1]], types=["float"]):
                t.kernel(next(it), dur=5)
        with t.module(attention_module):
            lin("q", h)
            lin("k", 512)
            lin("v", 512)
            with t.op("aten::neg", dims=[[b, 16, 1, 64]], types=[BF16]):
                t.kernel(next(it), dur=5)
            for _ in range(2):
                with t.op(
                    "aten::index_copy_",
                    dims=[[b, 4, 4096, 128], [], [1], [b, 4, 1, 128]],
                    types=[BF16, "", "long", BF16],
                ):
                    t.kernel(next(it), dur=5)
            with t.op(
                "aten::scaled_dot_product_attention",
                dims=[[b, 16, 1, 128], [b, 4, 4096, 128], [b, 4, 4096, 128]],
                types=[BF16] * 3,
            ):
                with t.op(
                    "aten::_scaled_dot_product_flash_attention",
                    dims=[[b, 16, 1, 128], [b, 4, 4096, 128], [b, 4, 4096, 128]],
                    types=[BF16] * 3,
                ):
                    t.kernel(next(it), dur=5)
                    t.kernel(next(it), dur=5)
            lin("o", h)
        with t.op("aten::add", dims=[[b, 1, h], [b, 1, h]], types=[BF16, BF16]):
            t.kernel(next(it), dur=5)
        with t.module("RMSNorm_1"):
            with t.op("aten::mean", dims=[[b, 1, h]], types=["float"]):
                t.kernel(next(it), dur=5)
        with t.module("MLP_0"):
            lin("up", 5632)
            lin("down", h)


def replay_trace(tmp_path, name="replay.pt.trace.json", layers=2, meta=True, launches=1) -> str:
    t = SynthTrace()
    if meta:
        t.meta.update(record_shapes=1, with_stack=1)
    for s in range(launches):
        with t.step(1 + s):
            graph_launch(t, [n for _ in range(layers) for n, _ in LAYER])
    return t.write(tmp_path / name)


def eager_trace(tmp_path, name="eager.pt.trace.json", layers=2, attention_module="DecodeAttention_0") -> str:
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    with t.step(5):
        for _ in range(layers):
            eager_layer(t, attention_module=attention_module)
    return t.write(tmp_path / name)


def replayed_n_times(src: str, n: int, dst) -> str:
    """A recorded trace whose graph launch (with its kernels and its ProfilerStep) is repeated n
    times, later in time, with new correlation ids: what profiling n decode steps of a graph
    records."""
    import copy
    import gzip
    import json

    with gzip.open(src, "rt") if src.endswith(".gz") else open(src) as f:
        d = json.load(f)
    ev = d["traceEvents"]
    launches = [e for e in ev if str(e.get("name", "")).startswith("cudaGraphLaunch")]
    corr = {e["args"]["correlation"] for e in launches}
    gpu = [
        e
        for e in ev
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("args", {}).get("correlation") in corr
    ]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep")]
    t0 = min(e["ts"] for e in steps + launches + gpu)
    span = max(e["ts"] + e.get("dur", 0) for e in steps + launches + gpu) - t0 + 100.0
    top = max(int(e["args"]["correlation"]) for e in ev if isinstance(e.get("args", {}).get("correlation"), int))
    for i in range(1, n):
        for e in launches + gpu + steps:
            c = copy.deepcopy(e)
            c["ts"] = e["ts"] + i * span
            if "correlation" in c.get("args", {}):
                c["args"]["correlation"] = e["args"]["correlation"] + i * (top + 1)
            if c.get("cat") == "user_annotation":
                c["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + i}"
                c["args"].pop("External id", None)
            ev.append(c)
    with gzip.open(dst, "wt") as f:
        json.dump(d, f)
    return str(dst)


def kernels(rep):
    return [k for k in rep["kernels"] if k["kind"] == "kernel"]


def test_structure_tags_the_projections_cache_writes_and_out_projection(tmp_path):
    rep = analyze_path(replay_trace(tmp_path))
    ks = kernels(rep)
    roles = [r for _ in range(2) for _, r in LAYER]
    for k, role in zip(ks, roles):
        want = EXPECTED.get(role)
        assert k["attention"] == (want is not None), (role, k["name"])
        if want:
            assert k["phase"] == want, role
            assert k["tag_source"] == ("kernel_name" if role == "attn" else "graph_structure")
            assert k["graph"] == ("none" if role == "attn" else "structure")
        else:
            assert k["graph"] == "none"
    # the two layers are two attention calls, each with its own projections
    assert rep["instances"] == 2
    assert len({k["instance"] for k in ks if k["attention"]}) == 2


def test_replay_notice_tells_the_truth(tmp_path):
    rep = analyze_path(replay_trace(tmp_path))
    codes = [n["code"] for n in rep["notices"]]
    assert "graph_replay" in codes
    # the file says it recorded shapes and stacks: never advise the flags again
    assert "no_shapes" not in codes and "no_stack" not in codes
    msg = next(n for n in rep["notices"] if n["code"] == "graph_replay")
    assert msg["message"].startswith(f"{2 * len(LAYER)} of {2 * len(LAYER)} kernels were replayed")
    assert "--reference" in msg["fix"]
    assert rep["graphs"] == {
        "launches": 1,
        "replayed_kernels": 2 * len(LAYER),
        "attributed": {"reference": 0, "structure": 14, "none": 16},
        "reference": None,
        "reference_kind": None,
    }


def test_old_trace_without_flags_still_gets_the_flag_advice(tmp_path):
    t = SynthTrace()
    with t.op("aten::mm"):
        t.kernel("flash_fwd_kernel", dur=5)
    codes = [n["code"] for n in analyze_path(t.write(tmp_path / "x.json"))["notices"]]
    assert "no_shapes" in codes


def test_reference_carries_op_module_shapes_and_cost(tmp_path):
    eager = analyze_path(eager_trace(tmp_path))
    rep = analyze_path(replay_trace(tmp_path), Options(reference=str(tmp_path / "eager.pt.trace.json")))
    ks, es = kernels(rep), kernels(eager)
    assert len(ks) == len(es)
    assert all(k["graph"] == "reference" for k in ks)
    for k, e in zip(ks, es):
        assert k["name"] == e["name"]
        for f in ("attention", "phase", "direction", "op", "module_path", "flops", "bytes", "dtype"):
            assert k[f] == e[f], (f, k["name"])
        if k["attention"]:
            assert k["tag_source"] == "graph_reference"
            assert k.get("shapes") == e.get("shapes")
    assert rep["attention_time_us"] == pytest.approx(eager["attention_time_us"])
    assert rep["instances"] == eager["instances"] == 2
    assert rep["graphs"]["attributed"] == {"reference": 30, "structure": 0, "none": 0}
    assert rep["graphs"]["reference_kind"] == "eager"
    assert "graph_replay" not in {n["code"] for n in rep["notices"]}
    # the replay keeps its own steps: the reference's ProfilerStep#5 is not added
    assert [s["name"] for s in rep["steps"]] == ["ProfilerStep#1"]


def test_reference_alignment_survives_extra_and_missing_kernels(tmp_path):
    ref = [n for n, _ in LAYER]
    q = ref[:3] + ["void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>"] + ref[3:12] + ref[13:]
    pairs = align(q, ref)
    matched = {i for i, _ in pairs}
    assert 3 not in matched  # the extra kernel has no partner
    assert len(pairs) == len(ref) - 1  # everything else but the dropped one
    assert all(q[i] == ref[j] or q[i].split("<")[0] == ref[j].split("<")[0] for i, j in pairs)
    assert [j for _, j in pairs] == sorted(j for _, j in pairs)


def test_reference_match_on_names_without_template_arguments(tmp_path):
    q = ["void k<1>()", "gemm_a", "void k<2>()"]
    r = ["void k<7>()", "gemm_a", "void k<9>()"]
    assert align(q, r) == [(0, 0), (1, 1), (2, 2)]


def test_reference_found_next_to_the_replay(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    replay_trace(run, "worker.replay.pt.trace.json")
    eager_trace(run, "worker.eager.pt.trace.json")
    rep = analyze_path(str(run / "worker.replay.pt.trace.json"))
    assert rep["graphs"]["attributed"]["reference"] == 30
    assert rep["graphs"]["reference"].endswith("worker.eager.pt.trace.json")
    # a directory of replays alone finds nothing and says so
    other = tmp_path / "other"
    other.mkdir()
    replay_trace(other, "a.pt.trace.json")
    replay_trace(other, "b.pt.trace.json")
    rep = analyze_path(str(other / "a.pt.trace.json"))
    assert rep["graphs"]["reference"] is None and "graph_replay" in {n["code"] for n in rep["notices"]}


def test_reference_that_does_not_match_changes_nothing(tmp_path):
    t = SynthTrace()
    with t.module("Other_0"):
        with t.op("aten::mm", dims=[[4, 4], [4, 4]], types=[BF16, BF16]):
            t.kernel("some_unrelated_kernel", dur=5)
    ref = t.write(tmp_path / "unrelated.json")
    base = analyze_path(replay_trace(tmp_path))
    rep = analyze_path(str(tmp_path / "replay.pt.trace.json"), Options(reference=ref))
    assert [k["attention"] for k in kernels(rep)] == [k["attention"] for k in kernels(base)]
    assert rep["graphs"]["attributed"]["reference"] == 0
    assert "matched" in next(n for n in rep["notices"] if n["code"] == "graph_replay")["message"]


def test_every_graph_launch_costs_as_the_reference_step(tmp_path):
    """Two graph launches of the same step: each replayed kernel takes its reference kernel's
    whole cost (they were each given half when both launches shared the reference's ops), and
    each launch is its own attention calls."""
    eager = analyze_path(eager_trace(tmp_path))
    rep = analyze_path(replay_trace(tmp_path, launches=2), Options(reference=str(tmp_path / "eager.pt.trace.json")))
    ks, es = kernels(rep), kernels(eager)
    assert len(ks) == 2 * len(es)
    for i, k in enumerate(ks):
        e = es[i % len(es)]
        assert (k["name"], k["phase"], k["flops"], k["bytes"], k["cost_share"]) == (
            e["name"],
            e["phase"],
            e["flops"],
            e["bytes"],
            e["cost_share"],
        )
    assert rep["instances"] == 2 * eager["instances"] == 4
    assert rep["graphs"]["attributed"] == {"reference": 60, "structure": 0, "none": 0}


def test_tags_found_without_a_reference_are_kept_with_one(tmp_path):
    """A reference whose attention module the pattern does not name (its kernels are not
    attention there): the replay's kernels that the structure tags without a reference stay
    attention with it, and take the reference's cost."""
    alone = analyze_path(replay_trace(tmp_path))
    ref = eager_trace(tmp_path, "block.pt.trace.json", attention_module="DecodeBlockMixer_0")
    rep = analyze_path(str(tmp_path / "replay.pt.trace.json"), Options(reference=ref))
    assert [k["attention"] for k in kernels(rep)] == [k["attention"] for k in kernels(alone)]
    assert [k["phase"] for k in kernels(rep)] == [k["phase"] for k in kernels(alone)]
    att = [k for k in kernels(rep) if k["attention"]]
    assert all(k["graph"] == "reference" for k in att)
    assert all(k["flops"] is not None for k in att if k["phase"] in ("qkv_proj", "out_proj", "fused_attention"))
    # a reference that matches half of the replay: the other half is still tagged by structure
    half = eager_trace(tmp_path, "half.pt.trace.json", layers=1)
    rep = analyze_path(str(tmp_path / "replay.pt.trace.json"), Options(reference=half))
    assert [k["attention"] for k in kernels(rep)] == [k["attention"] for k in kernels(alone)]
    assert rep["graphs"]["attributed"]["reference"] == len(LAYER)


def test_notice_speaks_of_the_reference_that_was_passed(tmp_path):
    half = eager_trace(tmp_path, "half.pt.trace.json", layers=1)
    rep = analyze_path(replay_trace(tmp_path), Options(reference=half))
    msg = next(n for n in rep["notices"] if n["code"] == "graph_replay")
    assert "half.pt.trace.json" in msg["message"] and f"({len(LAYER)} did)" in msg["message"]
    assert "pass --reference" not in msg["fix"] and "same step" in msg["fix"]
    unknown = [k for k in kernels(rep) if k["bound"] == "unknown" and k["graph"] != "reference"]
    assert unknown and all("not matched in the reference" in k["bound_reason"] for k in unknown)
    assert not any("pass --reference" in k["bound_reason"] for k in kernels(rep))
    # nothing matched: the notice still names the reference given, not "pass --reference"
    t = SynthTrace()
    with t.module("Other_0"):
        with t.op("aten::mm", dims=[[4, 4], [4, 4]], types=[BF16, BF16]):
            t.kernel("some_unrelated_kernel", dur=5)
    rep = analyze_path(str(tmp_path / "replay.pt.trace.json"), Options(reference=t.write(tmp_path / "u.json")))
    msg = next(n for n in rep["notices"] if n["code"] == "graph_replay")
    assert "u.json" in msg["message"] and "(0 did)" in msg["message"] and "pass --reference" not in msg["fix"]


def test_structure_phases_unit():
    names = [n for n, _ in LAYER]
    att = [r == "attn" for _, r in LAYER]
    got = {i: ph for i, (ph, _) in structure_phases(names, att).items()}
    want = {i: EXPECTED[r] for i, (_, r) in enumerate(LAYER) if r in EXPECTED and r != "attn"}
    assert got == want
    assert structure_phases(names, [False] * len(names)) == {}


# -- the recorded H200 decode step ----------------------------------------------------------
def one(name):
    hits = glob.glob(os.path.join(DATA, name, "*.pt.trace.json.gz"))
    if not hits:
        pytest.skip(f"{name} trace not present")
    return hits[0]


def test_recorded_replay_with_reference_equals_eager():
    eager = analyze_path(one("decode_graph_eager"))
    rep = analyze_path(one("decode_graph_replay"), Options(reference=one("decode_graph_eager")))
    ks, es = kernels(rep), kernels(eager)
    assert [k["name"] for k in ks] == [e["name"] for e in es]
    assert all(k["graph"] == "reference" for k in ks)
    for k, e in zip(ks, es):
        assert (k["attention"], k["phase"], k["op"], k["module_path"], k["cost_op"], k["dtype"]) == (
            e["attention"],
            e["phase"],
            e["op"],
            e["module_path"],
            e["cost_op"],
            e["dtype"],
        )
        if k["cost_share"] == 1.0:
            assert (k["flops"], k["bytes"]) == (e["flops"], e["bytes"])
    # an op's cost is split among its kernels by their durations, which are the replay's own
    for f in ("flops", "bytes"):
        assert sum(k[f] or 0 for k in ks) == pytest.approx(sum(e[f] or 0 for e in es), rel=1e-3)
    assert not any(k["bound"] == "unknown" for k in ks)
    assert {n["code"] for n in rep["notices"]}.isdisjoint({"no_shapes", "no_stack", "graph_replay"})


@pytest.mark.parametrize("how", ["eager", "capture"])
def test_recorded_replays_each_cost_as_the_reference(tmp_path, how):
    """Three replays of the recorded decode graph, given the eager step or with the trace's own
    capture: every replayed kernel costs what its kernel of the eager step costs. Kernels that
    are an op's only kernel (cost_share 1) take the op's cost exactly; an op with several
    kernels gives its FLOPs to its matrix kernels (within 2 %: the split among several is by
    duration) and shares its bytes by the kernels' durations, which are each run's own (within
    5 %); each launch's op totals equal the eager step's."""
    src = one("decode_graph_replay" if how == "eager" else "decode_graph_capture")
    path = replayed_n_times(src, 3, tmp_path / f"{how}3.pt.trace.json.gz")
    opt = Options(reference=one("decode_graph_eager")) if how == "eager" else None
    rep = analyze_path(path, opt)
    eager = analyze_path(one("decode_graph_eager"))
    es = kernels(eager)
    ks = [k for k in kernels(rep) if k["graph"]]
    assert len(ks) == 3 * len(es) and all(k["graph"] == "reference" for k in ks)
    assert rep["instances"] == 3 * eager["instances"]
    for launch in range(3):
        part = ks[launch * len(es) : (launch + 1) * len(es)]
        for k, e in zip(part, es):
            assert (k["name"], k["phase"], k["cost_op"]) == (e["name"], e["phase"], e["cost_op"])
            if e["cost_share"] == 1.0:
                assert (k["flops"], k["bytes"]) == (e["flops"], e["bytes"])
            elif e["cost_share"] is not None and e["cost_share"] > 0.5:
                assert k["flops"] == pytest.approx(e["flops"], rel=0.02)
                assert k["bytes"] == pytest.approx(e["bytes"], rel=0.05)
        for f in ("flops", "bytes"):
            assert sum(k[f] or 0 for k in part) == pytest.approx(sum(e[f] or 0 for e in es), rel=2e-3)
        assert [k["bound"] for k in part if k["phase"] == "fused_attention" and k["cost_share"] > 0.5] == [
            e["bound"] for e in es if e["phase"] == "fused_attention" and e["cost_share"] > 0.5
        ]


def test_recorded_capture_trace_uses_its_own_capture():
    eager = analyze_path(one("decode_graph_eager"))
    rep = analyze_path(one("decode_graph_capture"))
    assert rep["graphs"]["reference_kind"] == "capture" and rep["graphs"]["attributed"]["none"] == 0
    att = [(k["name"], k["phase"]) for k in kernels(rep) if k["attention"]]
    assert att == [(k["name"], k["phase"]) for k in kernels(eager) if k["attention"]]


def test_recorded_replay_alone_by_structure_and_notice():
    rep = analyze_path(one("decode_graph_replay"))
    codes = {n["code"] for n in rep["notices"]}
    assert "graph_replay" in codes and not codes & {"no_shapes", "no_stack"}
    eager = analyze_path(one("decode_graph_eager"))
    # the same kernels are attention as in the eager step, found without any reference
    assert [k["attention"] for k in kernels(rep)] == [k["attention"] for k in kernels(eager)]


def test_memory_footprint_names_the_replay_not_the_flag(tmp_path):
    """A replay without reference has no K/V shapes: the memory block says why (the graph, --reference)
    instead of advising record_shapes=True, which the file says it had; a file without the flag gets it."""
    mem = analyze_path(one("decode_graph_replay"))["memory"]
    msg = mem["footprint"]["message"]
    assert "record_shapes" not in msg and "--reference" in msg and "CUDA graphs" in msg
    # no op, so no copy can be seen: the block says its zero is incomplete rather than "no copies"
    assert mem["data_movement"]["note"].startswith("copies are found through their ops: 193 kernels replayed")
    eager = analyze_path(one("decode_graph_eager"))["memory"]
    assert eager["footprint"]["message"] is None and eager["data_movement"]["note"] is None
    t = SynthTrace()
    with t.op("aten::mm"):
        t.kernel("flash_fwd_kernel", dur=5)
    assert "record_shapes=True" in analyze_path(t.write(tmp_path / "x.json"))["memory"]["footprint"]["message"]


def test_recorded_replay_finds_the_eager_trace_in_its_run_directory(tmp_path):
    shutil.copy(one("decode_graph_replay"), tmp_path / "decode.replay.pt.trace.json.gz")
    shutil.copy(one("decode_graph_eager"), tmp_path / "decode.eager.pt.trace.json.gz")
    rep = analyze_path(str(tmp_path / "decode.replay.pt.trace.json.gz"))
    assert rep["graphs"]["attributed"] == {"reference": 193, "structure": 0, "none": 0}


def test_cli_reference_that_is_not_a_file(tmp_path, capsys):
    from tb_attention_plugin.cli import main

    try:
        rc = main(["analyze", replay_trace(tmp_path), "--reference", str(tmp_path / "missing.json"), "--no-cache"])
    except SystemExit as e:  # option errors leave through SystemExit, as for --peaks
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "--reference" in err[0]


def test_cli_reference_json(tmp_path, capsys):
    import json

    from tb_attention_plugin.cli import main

    rc = main(["analyze", replay_trace(tmp_path), "--reference", eager_trace(tmp_path), "--no-cache", "-f", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    rep = out["traces"][0] if "traces" in out else out
    assert rep["graphs"]["attributed"]["reference"] == 30


def test_unknown_replayed_kernels_say_why(tmp_path):
    rep = analyze_path(replay_trace(tmp_path))
    unknown = [k for k in kernels(rep) if k["bound"] == "unknown"]
    assert unknown and all("CUDA graph" in k["bound_reason"] and "--reference" in k["bound_reason"] for k in unknown)


def test_op_around_the_graph_launch_lends_no_cost(tmp_path):
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    with t.op("aten::mm", dims=[[4096, 4096], [4096, 4096]], types=[BF16, BF16]):  # a wrapper, say
        graph_launch(t, [n for n, _ in LAYER])
    rep = analyze_path(t.write(tmp_path / "x.json"))
    ks = kernels(rep)
    assert all(k["op"] is None and k["flops"] is None for k in ks)
    assert rep["graphs"]["replayed_kernels"] == len(LAYER)


def test_no_cuda_graph_advice_for_a_cuda_graph_replay():
    for ref in (None, "decode_graph_eager"):
        rep = analyze_path(one("decode_graph_replay"), Options(reference=one(ref) if ref else None))
        assert "launch_overhead" not in {a["id"] for a in rep["advice"]}
    # the same step run eagerly is launch-bound, and is told to use CUDA graphs
    assert "launch_overhead" in {a["id"] for a in analyze_path(one("decode_graph_eager"))["advice"]}


def test_many_ranks_do_not_read_each_other(tmp_path):
    run = tmp_path / "job"
    run.mkdir()
    for r in range(8):
        replay_trace(run, f"rank{r}.pt.trace.json")
    eager_trace(run, "zz_unnamed.pt.trace.json")  # not named as a reference, among many files
    rep = analyze_path(str(run / "rank0.pt.trace.json"))
    assert rep["graphs"]["reference"] is None
    eager_trace(run, "step.reference.pt.trace.json")  # named: found even among many
    rep = analyze_path(str(run / "rank0.pt.trace.json"))
    assert rep["graphs"]["reference"].endswith("step.reference.pt.trace.json")


R3 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "round3")


def test_a_cudagraph_trees_replay_takes_its_compiled_run_as_reference(tmp_path, capsys):
    """torch.compile(mode="reduce-overhead") replays its kernels from CUDA graphs: no shapes, no cost.
    The same step compiled without graphs (its kernels are the same Inductor code) is a reference, and
    --reference takes the run's directory as the traces themselves may be given (H200, round 3)."""
    from tb_attention_plugin.cli import main

    ro, comp = os.path.join(R3, "r3_decode_compiled_ro"), os.path.join(R3, "r3_decode_compiled")
    bare = analyze_path(glob.glob(os.path.join(ro, "*.json.gz"))[0])
    assert any(k["bound"] == "unknown" for k in kernels(bare) if k["attention"])
    out = tmp_path / "r.json"
    assert main(["analyze", ro, "--reference", comp, "--format", "json", "--output", str(out)]) == 0
    rep = json.loads(out.read_text())["traces"][0]
    att = [k for k in rep["kernels"] if k["kind"] == "kernel" and k["attention"]]
    assert att and all(k["bound"] != "unknown" for k in att)
    with pytest.raises(SystemExit) as e:
        main(["analyze", ro, "--reference", R3])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--reference: the directory holds" in err[0] and "name one" in err[0]


def test_named_runs_join_as_the_pairwise_loop_did():
    """graphs._join_named_runs (whole-array per launch) gives each run of adjacent by-name kernels
    the instance of its first and drops the instances it replaces, as the loop over adjacent pairs
    it replaced did: on random launches with runs, gaps and shared instances."""
    import numpy as np

    from tb_attention_plugin.attention.graphs import _join_named_runs

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        g = rng.permutation(60)[:n]
        named = rng.random(60) < 0.6
        inst = rng.integers(-1, 8, 60)
        instances = {i: {"name": str(i)} for i in range(-1, 8)}
        want_inst, want_instances = inst.copy(), dict(instances)
        for a, b in zip(g[:-1].tolist(), g[1:].tolist()):
            if named[a] and named[b] and want_inst[a] != want_inst[b]:
                want_instances.pop(int(want_inst[b]), None)
                want_inst[b] = want_inst[a]
        _join_named_runs(g, inst, named, instances)
        assert inst.tolist() == want_inst.tolist()
        assert instances == want_instances


def test_each_distinct_launch_sequence_is_aligned_on_its_own(tmp_path):
    """_match_reference aligns each distinct kernel sequence once and reuses it for the launches
    that repeat it: a launch of another sequence (one kernel fewer) gets its own alignment, and
    every launch's matches are those of aligning it alone."""
    import numpy as np

    from tb_attention_plugin.attention import graphs
    from tb_attention_plugin.trace.correlate import link
    from tb_attention_plugin.trace.records import load_trace

    names = [n for n, _ in LAYER]
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    for s, ks in enumerate([names, names[:5] + names[6:], names]):
        with t.step(1 + s):
            graph_launch(t, ks)
    tr = load_trace(t.write(tmp_path / "replay.pt.trace.json"))
    ref = load_trace(eager_trace(tmp_path, layers=1))
    links = link(tr)
    rep = graphs.replayed(tr, links)
    groups = graphs._groups(tr, graphs._replace(links, gpu_op=np.where(rep, -1, links.gpu_op)), rep)
    rlinks = link(ref)
    per_group, _ = graphs._match_reference(tr, groups, ref, rlinks)
    _, seq, rkinds, rnames = graphs._reference_sequence(ref, rlinks)
    G = tr.gpu
    for g, got in zip(groups, per_group):
        q = [tr.strings[i] for i in G["name"][g].tolist()]
        want = {int(g[i]): int(seq[j]) for i, j in align(q, rnames) if G["kind"][g[i]] == rkinds[j]}
        assert got == want
    assert [len(m) for m in per_group] == [len(names), len(names) - 1, len(names)]


R4 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "round4")
TWINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "twins")


@pytest.mark.parametrize(
    "sibling, found",
    [
        (os.path.join(R4, "ffn_block_b2_s2048_eager"), True),  # the same block, eager
        (os.path.join(R4, "ffn_block_b8_s4096_eager"), False),  # the same block at B 8, S 4096: names, not shapes
        (os.path.join(TWINS, "t5_eager"), False),  # another model: common kernel names
        (os.path.join(TWINS, "llama_eager_h7"), False),
    ],
    ids=["same_block", "block_b8_s4096", "t5", "llama"],
)
def test_a_sibling_is_the_reference_only_when_it_ran_the_replayed_launches(tmp_path, sibling, found):
    """A trace named like a reference beside a CUDA-graph replay gives it ops, shapes and costs only
    when it ran the replayed kernels with the same grid and block. Matched by name alone, a T5 or
    Llama training step "matched" 67-70 % of an FFN block's replayed kernels, and the block run at
    another batch size and sequence length 97 %, and their ops lent the replay their shapes
    (recorded H200 traces, round 4 and the twins)."""
    replay = os.path.join(R4, "ffn_block_b2_s2048_eager_cudagraph")
    shutil.copy(glob.glob(os.path.join(replay, "*.pt.trace.json.gz"))[0], tmp_path / "block.replay.pt.trace.json.gz")
    shutil.copy(glob.glob(os.path.join(sibling, "*.pt.trace.json.gz"))[0], tmp_path / "block.eager.pt.trace.json.gz")
    rep = analyze_path(str(tmp_path / "block.replay.pt.trace.json.gz"))
    if found:
        assert rep["graphs"]["reference"].endswith("block.eager.pt.trace.json.gz")
        assert rep["graphs"]["attributed"]["reference"] == 66
    else:
        assert rep["graphs"]["reference"] is None
        assert rep["graphs"]["attributed"]["reference"] == 0
        # the notice says which sibling was read, and why it was not taken
        msg = next(n for n in rep["notices"] if n["code"] == "graph_replay")["message"]
        assert "block.eager.pt.trace.json.gz beside it was read as a reference and not used" in msg
        assert re.search(r": (\d+) of 66 replayed kernels found a kernel of the same name, grid and block", msg)
        assert int(re.search(r"(\d+) of 66 replayed", msg).group(1)) < 33


def as_rocm(src: str, dst) -> str:
    """The recorded trace as ROCm's profiler names its runtime calls: hipGraphLaunch,
    hipLaunchKernel, hipStreamBeginCapture... (Kineto keeps the cuda_runtime category)."""
    import gzip

    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    renames = {"cudaGraphLaunch": "hipGraphLaunch", "cudaLaunchKernel": "hipLaunchKernel"}
    for ev in doc["traceEvents"]:
        if ev.get("cat") in ("cuda_runtime", "cuda_driver"):
            nm = ev.get("name", "")
            ev["name"] = renames.get(nm, re.sub(r"^cuda", "hip", nm))
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return str(dst)


def test_hip_graph_replays_are_graph_replays(tmp_path):
    """A ROCm trace: hipGraphLaunch replays its kernels as cudaGraphLaunch does; --reference
    to the eager step and the trace's own capture (hipStreamBeginCapture) work the same."""
    eager = analyze_path(one("decode_graph_eager"))
    replay = as_rocm(one("decode_graph_replay"), tmp_path / "replay.pt.trace.json.gz")
    alone = analyze_path(replay)
    assert alone["graphs"] is not None and alone["graphs"]["replayed_kernels"] > 0
    assert [k["attention"] for k in kernels(alone)] == [k["attention"] for k in kernels(eager)]
    ref = analyze_path(replay, Options(reference=one("decode_graph_eager")))
    assert all(k["graph"] == "reference" for k in kernels(ref))
    assert [(k["phase"], k["cost_op"]) for k in kernels(ref)] == [(e["phase"], e["cost_op"]) for e in kernels(eager)]
    capture = analyze_path(as_rocm(one("decode_graph_capture"), tmp_path / "capture.pt.trace.json.gz"))
    assert capture["graphs"]["reference_kind"] == "capture" and capture["graphs"]["attributed"]["none"] == 0


def test_piecewise_graphs_around_an_eager_attention_call(tmp_path):
    """vLLM's PIECEWISE mode: the graph launch before the attention op replays the input norm, the
    QKV GEMM and rotary; the attention op runs eagerly; the launch after it replays o_proj and the
    MLP. The replayed projections are placed around the eager attention kernel."""
    t = SynthTrace()
    norm = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>"
    gemm = "Cijk_Alik_Bljk_BBS_BH_Bias_MT256x192x64_MI16x16x1"
    graph_launch(t, [norm, gemm, "void vllm::rotary_embedding_kernel<c10::BFloat16, true>"])
    with t.op("vllm::unified_attention_with_output", dims=[[8, 64, 64]] * 3, types=[BF16] * 3):
        t.kernel("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>", dur=2)
        t.kernel("kernel_unified_attention_2d", dur=10)
    graph_launch(t, [gemm, norm, gemm, gemm])
    rep = analyze_path(t.write(tmp_path / "piecewise.pt.trace.json"))
    got = [(k["attention"] and k["phase"]) or None for k in kernels(rep)]
    assert got == [None, "qkv_proj", "rotary", "layout", "fused_attention", "out_proj", None, None, None]
