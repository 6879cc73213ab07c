"""Compiled code without CUDA graphs is tagged as well as the same kernels replayed from a graph.

torch.compile runs its generated code in a compiled region (``Torch-Compiled Region``, ``## Call
CompiledFxGraph ##``) where no submodule's forward runs: only the attention kernel is found (its
SDPA op), and before this the projections, rotary and KV-cache writes around it were lost (recall
0.54 by time on a compiled decode step) while the same kernels replayed from a graph were placed by
graphs.structure_phases. The two traces below are one compiled decode layer as torch records it
without graphs (extern GEMMs as aten::mm, Triton kernels as ops of their own, the SDPA op) and
the same kernel sequence replayed from a CUDA graph (mode="reduce-overhead")."""

from test_graphs import graph_launch

from synth import BF16, SynthTrace
from tb_attention_plugin.analyze import analyze_path

B, H, HK, D, S = 8, 16, 4, 128, 4096
HID = H * D
# one decoder layer of a compiled decode step: (kernel, op, its inputs, role)
LAYER = [
    (
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        [[B, 1, HID], [HID], [B, 1, HID]],
        "norm",
    ),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "aten::mm", [[B, HID], [HID, HID]], "q"),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "aten::mm", [[B, HID], [HID, HK * D]], "k"),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "aten::mm", [[B, HID], [HID, HK * D]], "v"),
    (
        "triton_poi_fused_add_cat_mul_neg_slice_1",
        "triton_poi_fused_add_cat_mul_neg_slice_1",
        [[B, 1, H, D], [1, 1, D], [1, 1, D], [B, H, 1, D]],
        "rope",
    ),
    ("triton_poi_fused_index_copy_2", "triton_poi_fused_index_copy_2", [[1], [B, 1, HK, D], [B, HK, S, D]], "cache"),
    ("triton_poi_fused_index_copy_3", "triton_poi_fused_index_copy_3", [[1], [B, 1, HK, D], [B, HK, S, D]], "cache"),
    (
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>",
        "aten::_scaled_dot_product_flash_attention",
        [[B, H, 1, D], [B, HK, S, D], [B, HK, S, D]],
        "attn",
    ),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, 4>", None, None, "attn"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "aten::mm", [[B, HID], [HID, HID]], "o"),
    (
        "triton_red_fused_add_mean_mul_pow_rsqrt_4",
        "triton_red_fused_add_mean_mul_pow_rsqrt_4",
        [[B, 1, HID], [B, 1, HID], [HID]],
        "norm",
    ),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "aten::mm", [[B, HID], [HID, 5632]], "up"),
    ("triton_poi_fused_mul_silu_5", "triton_poi_fused_mul_silu_5", [[B, 5632], [B, 5632]], "act"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "aten::mm", [[B, 5632], [5632, HID]], "down"),
]
WANT = {
    "q": "qkv_proj",
    "k": "qkv_proj",
    "v": "qkv_proj",
    "rope": "rotary",
    "cache": "layout",
    "attn": "fused_attention",
    "o": "out_proj",
}


def _layer(t: SynthTrace) -> None:
    """One layer's ops and kernels as torch records them (the SDPA op launches the split-KV kernel
    and its combine)."""
    rows = iter(LAYER)
    for kname, op, dims, role in rows:
        if role == "attn":
            combine = next(rows)[0]
            with t.op(op, dims=dims, types=[BF16] * 3):
                t.kernel(kname, dur=6)
                t.kernel(combine, dur=4)
            continue
        with t.op(op, dims=dims, types=[BF16] * len(dims)):
            t.kernel(kname, dur=6)


def compiled_trace(tmp_path, layers=2, name="compiled.pt.trace.json") -> str:
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    with t.step(1):
        with t.module("OptimizedModule_0"):
            with t.module("DecodeModel_0"):
                with t.op("Torch-Compiled Region: 0/0"):
                    with t.annotation("## Call CompiledFxGraph fabc123 ##"):
                        for _ in range(layers):
                            _layer(t)
    return t.write(tmp_path / name)


def replay_trace(tmp_path, layers=2) -> str:
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    with t.step(1):
        graph_launch(t, [k for _ in range(layers) for k, *_ in LAYER])
    return t.write(tmp_path / "replayed.pt.trace.json")


def kernels(rep):
    return [k for k in rep["kernels"] if k["kind"] == "kernel"]


def test_compiled_decode_is_tagged_as_its_graph_replay(tmp_path):
    comp = kernels(analyze_path(compiled_trace(tmp_path)))
    rep = kernels(analyze_path(replay_trace(tmp_path)))
    roles = [r for _ in range(2) for *_, r in LAYER]
    assert [k["name"] for k in comp] == [k["name"] for k in rep]
    for k, r, role in zip(comp, rep, roles):
        want = WANT.get(role)
        assert k["attention"] == r["attention"] == (want is not None), (role, k["name"])
        if want:
            assert k["phase"] == r["phase"] == want, role
    # the projections and cache writes join the attention call of their layer
    src = {k["tag_source"] for k, role in zip(comp, roles) if role in ("q", "k", "v", "rope", "cache", "o")}
    assert src == {"compiled_structure"}
    calls = [k["instance"] for k, role in zip(comp, roles) if WANT.get(role)]
    assert len(set(calls)) == 2 and calls[: len(calls) // 2] == [calls[0]] * (len(calls) // 2)
    # and they keep their cost: their ops have shapes (unlike the replay's)
    assert all(k["flops"] for k, role in zip(comp, roles) if role in ("q", "k", "v", "o"))
    # recall by time (at the compiled run's durations) of what the replay tags: 1, not 0.54
    found = sum(k["dur_us"] for k, r in zip(comp, rep) if k["attention"] and r["attention"])
    assert found == sum(k["dur_us"] for k, r in zip(comp, rep) if r["attention"])


def test_nothing_moves_outside_a_compiled_region(tmp_path):
    """The same kernels launched eagerly with no module scope keep their tags: the structure is
    for compiled regions (and graph replays), not for any unscoped code."""
    t = SynthTrace()
    t.meta.update(record_shapes=1, with_stack=1)
    with t.step(1):
        _layer(t)
    ks = kernels(analyze_path(t.write(tmp_path / "eager.pt.trace.json")))
    assert {k["tag_source"] for k in ks if k["attention"]} == {"sdpa_op"}
    assert [k["attention"] for k in ks] == [r == "attn" for *_, r in LAYER]
    # the structure itself: Inductor's rotary kernel is named after the neg/cat it fuses
    from tb_attention_plugin.attention.graphs import ROTARY_KERNEL

    assert ROTARY_KERNEL.search("triton_poi_fused_add_cat_mul_neg_slice_1")
    assert not ROTARY_KERNEL.search("triton_poi_fused_index_copy_2") and not ROTARY_KERNEL.search(
        "triton_poi_fused_mul_silu_5"
    )
