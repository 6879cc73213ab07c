"""Cost by role (roofline/roles.py, cost.role_bytes): each kernel of a multi-kernel op gets the
traffic of what it does, from the op's shapes; FLOPs go to its main kernels only. Checked on
synthetic traces that record what PyTorch records, and on the H200 traces of validation/ against
the Nsight Compute rows measured for them."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from helpers import ROOT
from synth import BF16, SynthTrace
from tb_attention_plugin.roofline import roles as R
from tb_attention_plugin.roofline.attribute import attribute
from tb_attention_plugin.roofline.cost import op_cost, varlen_pairs
from tb_attention_plugin.trace.correlate import link
from tb_attention_plugin.trace.records import KERNEL, load_trace

FA2 = (
    "void pytorch_flash::{}<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>>"
    "(Flash_fwd_params)"
)


@pytest.mark.parametrize(
    "name, role",
    [
        (FA2.format("flash_fwd_kernel"), R.MAIN),
        (FA2.format("flash_fwd_splitkv_kernel"), R.MAIN),
        (FA2.format("flash_fwd_splitkv_combine_kernel"), R.COMBINE),
        (FA2.format("flash_bwd_dot_do_o_kernel"), R.DOT_DO_O),
        (FA2.format("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"), R.MAIN),
        (FA2.format("flash_bwd_convert_dq_kernel"), R.CONVERT_DQ),
        (FA2.format("flash_bwd_convert_dkv_kernel"), R.CONVERT_DKV),
        ("void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<>, 128>>(Params)", R.DOT_DO_O),
        ("void cutlass::device_kernel<flash::FlashAttnBwdPostprocessConvertdQ<128>>(Params)", R.CONVERT_DQ),
        ("void cutlass::device_kernel<flash::FlashAttnFwdCombine<128>>(Params)", R.COMBINE),
        ("void cutlass::device_kernel<flash::FlashAttnBwdSm90<128>>(Params)", R.MAIN),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void*)", R.DOT_DO_O),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
            R.MAIN,
        ),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)", R.CONVERT_DQ),
        ("void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int)", R.REDUCE_HEAD),
        ("void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*, float*)", R.COMBINE),
        (
            "fmha_cutlassB_bf16_aligned_64x64_k64_seqaligned_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)",
            R.MAIN,
        ),
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasLt::Params)",
            R.SPLITK_REDUCE,
        ),
        (
            "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<policy_hub<long>, long>()",
            R.SORT_PASS,
        ),
        ("at::native::(anonymous namespace)::fill_reverse_indices_kernel(long*, int)", R.SORT_INIT),
    ],
)
def test_roles_are_told_by_what_the_kernel_is(name, role):
    assert R.kernel_role(name, matrix_op=True) == role


def test_template_arguments_do_not_make_a_gemm_a_helper():
    # a CUTLASS grouped GEMM names Copy atoms among its template arguments: still the main work
    name = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_grouped<SM80_CP_ASYNC_CACHEGLOBAL<Copy>>>(Params)"
    assert R.kernel_role(name, matrix_op=True) == R.MAIN
    assert R.kernel_role("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>()", True) == R.AUX


def _attributed(t: SynthTrace, tmp_path):
    tr = load_trace(t.write(tmp_path / "t.json"))
    a = attribute(tr, link(tr))
    ks = np.flatnonzero(tr.gpu["kind"] == KERNEL)
    return tr, a, ks


B, H, S, D, IT = 4, 16, 2048, 64, 2
Q = B * H * S * D * IT  # one [B, H, S, D] bf16 tensor
LSE = B * H * S * 4
ACC = B * H * S * D * 4  # the fp32 dQ accumulator


def _flash_backward(t: SynthTrace, h: int = H, hk: int = H, names=None, cudnn: bool = False):
    q, kv = [B, S, h, D], [B, S, hk, D]
    op = "aten::_cudnn_attention_backward" if cudnn else "aten::_flash_attention_backward"
    if cudnn:
        qb, kvb = [B, h, S, D], [B, hk, S, D]
        dims = [qb, qb, kvb, kvb, qb, [B, h, S], [], [], [], [], [], [], [], [], [], []]
        types = [BF16] * 5 + ["float"] + [""] * 10
        conc = [""] * 14 + ["True", ""]
    else:
        dims = [q, q, kv, kv, q, [B, h, S], [], [], [], [], [], [], [], [], [], [], []]
        types = [BF16] * 5 + ["float"] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar"] + [""] * 5
        conc = [""] * 8 + [str(S), str(S), "0.", "True"] + [""] * 5
    with t.op(op, dims=dims, types=types, concrete=conc):
        for nm, dur in names or (
            (FA2.format("flash_bwd_dot_do_o_kernel"), 17.0),
            (FA2.format("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"), 390.0),
            (FA2.format("flash_bwd_convert_dq_kernel"), 17.0),
        ):
            t.kernel(nm, dur=dur)


def test_fused_backward_main_kernel_moves_its_tensors_and_the_dq_accumulator(tmp_path):
    """Before: the pre- and post-pass took their traffic out of the op's total and the main kernel
    kept the rest (17 MB where Nsight Compute measures 151 MB on this shape)."""
    t = SynthTrace()
    _flash_backward(t)
    tr, a, ks = _attributed(t, tmp_path)
    pre, main, post = ks
    # the main loop: Q, K, V, dO, LSE, delta read, the dQ accumulator read and written, dK, dV written
    assert a.reads[main] == pytest.approx(4 * Q + 2 * LSE + ACC)
    assert a.bytes[main] == pytest.approx(4 * Q + 2 * LSE + ACC + ACC + 2 * Q)
    assert a.bytes[pre] == pytest.approx(2 * Q + LSE + ACC) and a.reads[pre] == pytest.approx(2 * Q)
    assert a.bytes[post] == pytest.approx(ACC + Q) and a.reads[post] == pytest.approx(ACC)
    c = a.costs[int(a.owner[main])]
    # FLOPs: the main kernel only, all of them
    assert a.flops[pre] == 0 and a.flops[post] == 0 and a.flops[main] == pytest.approx(c.flops)
    # every tensor of the op is moved by some kernel: the kernels together move at least the op
    assert a.bytes[ks].sum() >= c.bytes


def test_cudnn_gqa_backward_reduces_heads_without_flops(tmp_path):
    t = SynthTrace()
    names = (
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*)", 18.0),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_kernel0_0", 211.0),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)", 16.7),
        ("void cudnn::fusion::fmha_reduce_head<true>(void const*, void*)", 7.4),
        ("void cudnn::fusion::fmha_reduce_head<true>(void const*, void*)", 7.5),
    )
    _flash_backward(t, h=16, hk=4, names=names, cudnn=True)
    tr, a, ks = _attributed(t, tmp_path)
    pre, main, post, r1, r2 = ks
    assert a.flops[r1] == 0 and a.flops[r2] == 0 and a.flops[main] > 0
    kv4 = B * 4 * S * D * IT  # dK (or dV) at the 4 key/value heads
    kv16 = B * 16 * S * D * IT  # ... and per query head, before the reduction
    # the two reduce_head kernels together read dK, dV per query head and write them per kv head
    assert a.bytes[r1] + a.bytes[r2] == pytest.approx(2 * kv16 + 2 * kv4)
    assert a.bytes[main] > 2 * kv16  # it writes the per-query-head dK, dV
    assert all(a.bytes[k] > 0 for k in ks)


def test_split_kv_combine_reads_the_partials_of_every_split(tmp_path):
    """decode_gqa_flash: FlashAttention-2 split the 8192 keys in 4 (grid.y); the combine reads 4 fp32
    partial outputs: 0.59 MB (Nsight Compute: 0.55 MB), not a duration share of the 269 MB op."""
    t = SynthTrace()
    b, h, hk, sk, d = 8, 32, 8, 8192, 128
    dims = [[b, 1, h, d], [b, sk, hk, d], [b, sk, hk, d]] + [[]] * 12
    types = [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "", ""]
    conc = ["", "", "", "", "", "1", str(sk), "0.", "False", "False", "0.088", "", "", "", ""]
    with t.op("aten::_flash_attention_forward", dims=dims, types=types, concrete=conc):
        t.kernel(FA2.format("flash_fwd_splitkv_kernel"), dur=66.9, grid=(1, 4, 64))
        t.kernel(FA2.format("flash_fwd_splitkv_combine_kernel"), dur=3.8, grid=(64, 1, 1))
    tr, a, ks = _attributed(t, tmp_path)
    main, comb = ks
    partial = 4 * b * h * (d + 1) * 4
    o = b * h * d * 2
    assert a.bytes[comb] == pytest.approx(partial + o + b * h * 4)
    assert a.bytes[comb] == pytest.approx(0.55e6, rel=0.1)  # Nsight Compute's DRAM bytes
    assert a.reads[main] == pytest.approx(b * h * d * 2 + 2 * b * hk * sk * d * 2)
    assert a.flops[comb] == 0 and a.flops[main] == pytest.approx(a.costs[int(a.owner[main])].flops)


def test_split_k_gemm_reduction_reads_partials_not_the_weights(tmp_path):
    t = SynthTrace()
    with t.op("aten::mm", dims=[[8, 2048], [2048, 8192]], types=[BF16, BF16]):
        t.kernel("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", dur=11.0)
        t.kernel("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasLt::Params)", dur=1.6)
    tr, a, ks = _attributed(t, tmp_path)
    gemm, red = ks
    out = 8 * 8192
    assert a.bytes[red] == pytest.approx(2 * out * 4 + out * 2)  # two fp32 partials (a lower bound), bf16 out
    assert a.reads[gemm] == pytest.approx((8 * 2048 + 2048 * 8192) * 2)
    assert a.flops[red] == 0 and a.flops[gemm] == pytest.approx(2.0 * 8 * 2048 * 8192)


def test_each_radix_sort_pass_moves_keys_and_indices(tmp_path):
    t = SynthTrace()
    cub = "void at_cuda_detail::cub::detail::radix_sort::{}<policy_hub<long, long>, long, long>()"
    with t.op(
        "aten::sort", dims=[[8192], [], []], types=["long int", "Scalar", "Scalar"], concrete=["", "-1", "False"]
    ):
        t.kernel("at::native::(anonymous namespace)::fill_reverse_indices_kernel(long*, int)", dur=1.2)
        t.kernel(cub.format("DeviceRadixSortHistogramKernel"), dur=3.0)
        t.kernel(cub.format("DeviceRadixSortExclusiveSumKernel"), dur=1.1)
        for _ in range(8):  # int64 keys: 8 digits
            t.kernel(cub.format("DeviceRadixSortOnesweepKernel"), dur=6.0)
    tr, a, ks = _attributed(t, tmp_path)
    passes = ks[3:]
    kv = 8192 * (8 + 8)
    assert all(a.bytes[k] == pytest.approx(2 * kv) for k in passes)
    assert a.bytes[ks[0]] == pytest.approx(8192 * 8) and a.reads[ks[0]] == 0
    assert a.reads[ks[1]] == pytest.approx(8192 * 8)
    assert np.isfinite(a.bytes[ks]).all()


# -- varlen / jagged -------------------------------------------------------------------------
LENS = [512, 896, 1280, 1664, 2048, 2432, 2816, 3072]  # validation/round3_workloads.py JAGGED_LENGTHS


def _jagged_forward(t: SynthTrace, lens=LENS, h=16, d=64, causal=False, backend="flash"):
    """What torch 2.11 records for SDPA on nested jagged tensors (torch/nested/_internal/sdpa.py):
    the packed [total, H, D] buffers, the int32 offsets as [B + 1] tensors (values not recorded),
    the longest sequence as an int."""
    tot, n, mx = sum(lens), len(lens), max(lens)
    if backend == "flash":
        dims = [[tot, h, d]] * 3 + [[n + 1], [n + 1]] + [[]] * 10
        types = [BF16] * 3 + ["int", "int"] + ["Scalar"] * 6 + [""] * 4
        conc = [""] * 5 + [str(mx), str(mx), "0.", str(causal), "False", "0.125", "", "", "", ""]
        name = "aten::_flash_attention_forward"
    else:  # _efficient_attention_forward(q [1, T, H, D], ..., bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, ...)
        dims = [[1, tot, h, d]] * 3 + [[], [n + 1], [n + 1]] + [[]] * 8
        types = [BF16] * 3 + ["", "int", "int"] + ["Scalar"] * 5 + [""] * 3
        conc = [""] * 6 + [str(mx), str(mx), "0.", "1" if causal else "0", "True", "", "", ""]
        name = "aten::_efficient_attention_forward"
    with t.op(name, dims=dims, types=types, concrete=conc):
        t.kernel(
            FA2.format("flash_fwd_kernel") if backend == "flash" else "fmha_cutlassF_bf16_aligned_64x64_rf_sm80()",
            dur=900.0,
        )


@pytest.mark.parametrize("backend", ["flash", "efficient"])
@pytest.mark.parametrize("causal", [False, True])
def test_jagged_attention_is_costed_from_the_packed_tensors_with_bounded_flops(tmp_path, backend, causal):
    """98 % of a jagged SDPA's time was 'unknown (no cost)'. The offsets' values are not in the
    trace, so the FLOPs are an upper bound (flagged) that holds the true Σᵢ 4·Lᵢ²·H·D, and the
    lower bound in the detail is below it; the bytes are the packed tensors'."""
    t = SynthTrace()
    _jagged_forward(t, causal=causal, backend=backend)
    tr, a, ks = _attributed(t, tmp_path)
    c = a.costs[int(a.owner[ks[0]])]
    h, d, tot = 16, 64, sum(LENS)
    pairs = sum(n * (n + 1) / 2 if causal else n * n for n in LENS)
    exact = 4.0 * h * d * pairs
    vl = c.detail["varlen"]
    assert c.upper_bound and vl["batch"] == len(LENS) and vl["total_q"] == tot and not vl["flops_exact"]
    assert vl["flops_lower"] <= exact <= c.flops
    assert c.flops <= 1.5 * exact  # the bound is useful, not dense attention over all 14720 tokens
    assert c.flops < 4.0 * h * d * tot * tot / 4
    packed = tot * h * d * 2
    assert c.bytes == pytest.approx(3 * packed + packed + tot * h * 4)


def test_varlen_pairs_exact_cases_and_bounds():
    hi, lo, exact = varlen_pairs(1, 100, 100, 100, 100, False)
    assert exact and hi == lo == 100 * 100
    hi, lo, exact = varlen_pairs(4, 400, 400, 100, 100, False)  # all at the maximum: exact
    assert exact and hi == lo == 4 * 100 * 100
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 12))
        lens = rng.integers(1, 300, n).tolist()
        tot, mx = sum(lens), max(lens)
        for causal in (False, True):
            true = sum(x * (x + 1) / 2 if causal else x * x for x in lens)
            hi, lo, exact = varlen_pairs(n, tot, tot, mx, mx, causal)
            assert lo - 1e-6 <= true <= hi + 1e-6


# -- Inductor kernels -----------------------------------------------------------------------------
def _triton(name, dims, types, conc, strides=None):
    import msgspec

    from tb_attention_plugin.trace.records import Signature
    from tb_attention_plugin.trace.shapes import parse_args

    enc = msgspec.json.encode
    return op_cost(name, parse_args(Signature(enc(dims), enc(types), enc(strides or [[] for _ in dims]), enc(conc))))


def test_inductor_single_buffer_softmax_writes_its_output():
    """One buffer (Inductor's in_out_ptr0): read and written, not read only (0.5x ncu before)."""
    c = _triton(
        "triton_red_fused__softmax_0", [[64, 2048, 2048], [], []], [BF16, "Scalar", "Scalar"], ["", "131072", "2048"]
    )
    n = 64 * 2048 * 2048
    assert c.reads == n * 2 and c.bytes == 2 * n * 2
    assert c.flops == pytest.approx(5.0 * n)  # the softmax, once


def test_inductor_kv_cache_write_moves_one_position_not_the_cache():
    """index_copy of one position into a [8, 8, 8192, 128] cache (34 MB): the kernel's iteration
    space is the new key's 8192 elements; before: 117 MFLOP and 34 MB for a 1 us kernel."""
    c = _triton(
        "triton_poi_fused_index_copy_0",
        [[1], [8, 8, 1, 128], [8, 8, 8192, 128], []],
        ["long int", BF16, BF16, "Scalar"],
        ["", "", "", "8192"],
    )
    assert c.flops == 0
    assert c.bytes == pytest.approx(8 + 8192 * 2 + 8192 * 2)


def test_inductor_flops_come_from_op_names_not_name_tokens():
    c = _triton(
        "triton_red_fused__softmax_div_exp_masked_fill_native_dropout_prepare_softmax_online_sub_view_3",
        [[4, 16, 2048, 2048], [2048, 2048], [1], [4, 16, 2048, 2048], [4, 16, 2048, 2048], [], [], []],
        [BF16, "bool", "long int", "bool", BF16, "Scalar", "Scalar", "Scalar"],
        ["", "", "", "", "", "0", "131072", "2048"],
    )
    n = 64 * 2048 * 2048
    # softmax 5 (its parts sub/exp/div/online helper not again) + masked_fill 1 + dropout 2
    assert c.flops == pytest.approx(8.0 * n)
    assert "not_counted" not in c.detail and "prepare_softmax_online" in c.detail["fused_ops"]
    c = _triton(
        "triton_poi_fused__unsafe_view_clone_transpose_view_0",
        [[8192, 1024], [4, 16, 2048, 64], []],
        [BF16, BF16, "Scalar"],
        ["", "", "8388608"],
    )
    assert c.flops == 0 and c.bytes == pytest.approx(2 * 8192 * 1024 * 2)


def test_inductor_in_place_first_buffer_when_no_output_can_hold_the_result():
    """The softmax backward of compiled_naive_fwdbwd: its last buffer (the [2048, 2048] mask)
    cannot hold a [64, 2048, 2048] result, so the first buffer is Inductor's in_out_ptr0: read and
    written (ncu: 1395 MB read, 522 MB written)."""
    c = _triton(
        "triton_red_fused__softmax_backward_data_div_masked_fill_native_dropout_backward_view_1",
        [[4, 16, 2048, 2048], [64, 2048, 2048], [4, 16, 2048, 2048], [2048, 2048], [], []],
        [BF16, BF16, "bool", "bool", "Scalar", "Scalar"],
        ["", "", "", "", "131072", "2048"],
    )
    n = 64 * 2048 * 2048
    assert c.reads == pytest.approx(n * 2 + n * 2 + n + 2048 * 2048)
    assert c.bytes - c.reads == pytest.approx(n * 2)


def test_generated_values_are_written_not_read():
    c = _triton("triton_poi_fused_ones_triu_2", [[2048, 2048], []], ["bool", "Scalar"], ["", "4194304"])
    assert c.reads == 0 and c.bytes == 2048 * 2048


# -- on recorded traces, against Nsight Compute ---------------------------------------------------
def _ncu_rows(workload):
    with open(os.path.join(ROOT, "validation", "raw", "2026-11-30", "ncu", workload + ".json")) as f:
        return json.load(f)["kernels"]


@pytest.mark.parametrize(
    "workload",
    [
        "sdpa_flash_fwdbwd_causal",
        "sdpa_flash_fwdbwd_full",
        "sdpa_flash_fwdbwd_causal_d128",
        "sdpa_cudnn_fwdbwd_causal",
        "sdpa_cudnn_fwdbwd_full",
        "sdpa_cudnn_fwdbwd_causal_d128",
        "decode_gqa_flash",
    ],
)
def test_every_kernel_of_a_fused_attention_op_is_within_half_and_one_and_a_half_of_ncu(workload):
    """The kernels of fused attention ops, one by one (pre-pass, main loop, post-pass, split-KV
    and combine) against the DRAM bytes Nsight Compute measured for the same step."""
    from tb_attention_plugin.analyze import analyze_path

    path = glob.glob(os.path.join(ROOT, "validation", "traces", workload, "*.json.gz"))[0]
    rep = analyze_path(path, cache=None)
    ks = sorted((k for k in rep["kernels"] if k["kind"] == "kernel"), key=lambda k: (k["ts"], k["id"]))
    rows = _ncu_rows(workload)
    assert len(ks) == len(rows)
    checked = 0
    for k, r in zip(ks, rows):
        if "attention" not in (k["cost_op"] or ""):
            continue
        ncu = r["dram__bytes_read.sum"] + r["dram__bytes_write.sum"]
        if ncu < 1e5:
            continue
        assert 0.5 <= k["dram_bytes"] / ncu <= 1.5, (k["name"][:60], k["dram_bytes"], ncu)
        checked += 1
    assert checked >= 2


def test_jagged_backward_kernels_are_costed_by_role(tmp_path):
    """_flash_attention_backward on the packed tensors (grad_out, q, k, v, out [T, H, D], lse,
    cum_seq_q/k [B + 1], max_q/k): every kernel gets bytes, the main loop all the (bounded) FLOPs."""
    t = SynthTrace()
    tot, n, mx, h, d = sum(LENS), len(LENS), max(LENS), 16, 64
    p = [tot, h, d]
    dims = [p, p, p, p, p, [h, tot], [n + 1], [n + 1]] + [[]] * 9
    types = [BF16] * 5 + ["float", "int", "int"] + ["Scalar"] * 4 + [""] * 5
    conc = [""] * 8 + [str(mx), str(mx), "0.", "True"] + [""] * 5
    with t.op("aten::_flash_attention_backward", dims=dims, types=types, concrete=conc):
        t.kernel(FA2.format("flash_bwd_dot_do_o_kernel"), dur=20.0)
        t.kernel(FA2.format("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"), dur=900.0)
        t.kernel(FA2.format("flash_bwd_convert_dq_kernel"), dur=20.0)
    tr, a, ks = _attributed(t, tmp_path)
    c = a.costs[int(a.owner[ks[0]])]
    assert c.upper_bound and c.detail["varlen"]["batch"] == n
    true = 10.0 * h * d * sum(x * (x + 1) / 2 for x in LENS)  # 5 matmuls, causal
    assert c.detail["varlen"]["flops_lower"] <= true <= c.flops
    assert np.isfinite(a.bytes[ks]).all() and a.flops[ks[1]] == pytest.approx(c.flops)
    packed = tot * h * d * 2
    assert a.reads[ks[1]] >= 4 * packed  # Q, K, V, dO


def test_the_per_token_passes_of_a_bounded_op_are_classified():
    """A jagged SDPA backward's FLOPs are an upper bound (the lengths are not recorded), but its
    pre-pass (delta = rowsum(dO·O)) moves the packed tensors' bytes whatever the lengths: ncu measured
    it memory-bound (64 % DRAM) on the H200 (round 3); it was 'unknown' with the op's bound flag."""
    from tb_attention_plugin.analyze import analyze_path

    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "round3", "r3_jagged_fwdbwd")
    rep = analyze_path(glob.glob(os.path.join(d, "*.json.gz"))[0])
    ks = [k for k in rep["kernels"] if k["kind"] == "kernel" and k["attention"]]
    pre = [k for k in ks if k.get("cost_role") == "dot_do_o"]
    main = [k for k in ks if k.get("cost_role") == "main" and k["op"] == "aten::_flash_attention_backward"]
    assert pre and all(not k["upper_bound"] and k["bound"] == "memory" for k in pre)
    assert main and all(k["upper_bound"] for k in main)  # the main kernel's FLOPs stay a bound
