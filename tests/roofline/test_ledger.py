"""The FLOPs ledger's pure functions against brute-force masks and hand counts."""

import msgspec
import numpy as np
import pytest

from tb_attention_plugin.roofline import ledger as L
from tb_attention_plugin.trace.records import Signature
from tb_attention_plugin.trace.shapes import parse_args

BF = "c10::BFloat16"


def args(dims, types, concrete=None):
    enc = msgspec.json.encode
    return parse_args(Signature(enc(dims), enc(types), enc([[] for _ in dims]), enc(concrete or [""] * len(dims))))


def brute(sq, sk, mask):
    """The kept-pair matrix of a mask, element by element."""
    i = np.arange(sq)[:, None] + (sk - sq if mask.bottom_right else 0)
    j = np.arange(sk)[None, :]
    keep = np.ones((sq, sk), dtype=bool)
    if mask.kind == "causal":
        keep = j <= i
    elif mask.kind == "window":
        if mask.left is not None:
            keep &= j >= i - mask.left
        if mask.right is not None:
            keep &= j <= i + mask.right
    return keep


def brute_tiles(keep, m, n):
    """Whole M x N tiles holding a kept pair (a partial tile at the edge computes its padding)."""
    sq, sk = keep.shape
    total = 0
    for a in range(0, sq, m):
        for b in range(0, sk, n):
            t = keep[a : a + m, b : b + n]
            if t.any():
                total += m * n
    return total


MASKS = [
    L.NO_MASK,
    L.Mask("causal"),
    L.Mask("causal", bottom_right=True),
    L.Mask("window", left=5, right=0),
    L.Mask("window", bottom_right=True, left=7, right=0),
    L.Mask("window", left=3, right=2),
]


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: m.label())
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 37), (4, 37), (16, 16), (33, 17), (50, 64), (64, 50)])
def test_kept_and_tile_pairs_equal_brute_force(mask, sq, sk):
    keep = brute(sq, sk, mask)
    assert L.kept_pairs(sq, sk, mask) == int(keep.sum())
    for m, n in ((16, 16), (8, 32), (64, 64), (128, 64)):
        assert L.tile_pairs(sq, sk, mask, m, n) == brute_tiles(keep, m, n)


def test_causal_8192_useful_is_half_plus_diagonal_and_executed_between():
    g = L.Geometry(b=2, h=16, hk=16, sq=8192, sk=8192, d=128, dv=128, mask=L.Mask("causal"))
    c = L.counts(g, "forward", "flash", tile=(128, 64))
    per_pair = 2 * 16 * (2 * 128 + 2 * 128)  # b·h·(2·D + 2·Dv)
    assert c.dense == per_pair * 8192 * 8192
    assert c.useful == per_pair * 8192 * 8193 // 2  # dense / 2 + the diagonal
    assert c.useful == pytest.approx(c.dense / 2 + per_pair * 8192 / 2)
    assert c.useful < c.executed < c.dense
    # whole 128x64 tiles along the diagonal: 64 query tiles, tile t visits 2(t+1) key tiles
    assert c.executed == per_pair * sum(128 * 64 * 2 * (t + 1) for t in range(64))
    assert c.useful_exact and c.executed_basis == "tiles 128x64"


def test_backward_counts_model_flops_and_recompute():
    g = L.Geometry(b=1, h=8, hk=8, sq=1024, sk=1024, d=64, dv=64, mask=L.NO_MASK)
    f = L.counts(g, "forward", "flash")
    b = L.counts(g, "backward", "flash")
    assert b.useful == b.dense == 2 * f.dense  # 4 matmuls, no recomputation
    assert b.executed == 2.5 * f.dense  # 5 matmuls: QK^T recomputed (cost.py's count)
    # decomposed attention executes its matmul kernels' FLOPs, whatever the mask
    e = L.counts(g, "backward", "eager", decomposed_flops=123.0)
    assert e.executed == 123.0 and e.useful == b.useful


def test_bottom_right_decode_counts_only_the_keys_each_query_sees():
    # 4 new tokens against a cache of 1000: query i sees 997 + i keys
    g = L.Geometry(b=1, h=32, hk=8, sq=4, sk=1000, d=128, dv=128, mask=L.Mask("causal", bottom_right=True))
    c = L.counts(g, "forward", "efficient", tile=(64, 64))
    assert L.useful_pairs(g) == 997 + 998 + 999 + 1000
    assert c.useful == 32 * 512 * (997 + 998 + 999 + 1000)
    # top-left would keep 1 + 2 + 3 + 4 keys: the difference the alignment makes
    assert L.kept_pairs(4, 1000, L.Mask("causal")) == 10
    # one decode token sees every key; GQA: FLOPs use the query heads
    g1 = L.Geometry(b=8, h=32, hk=8, sq=1, sk=4096, d=128, dv=128, mask=L.Mask("causal", bottom_right=True))
    assert L.counts(g1, "forward", "flash").useful == 8 * 32 * 4096 * 512


def test_sliding_window_and_jagged():
    g = L.Geometry(b=1, h=1, hk=1, sq=4096, sk=4096, d=64, dv=64, mask=L.Mask("window", left=1023, right=0))
    # every query past the first 1023 sees exactly 1024 keys
    assert L.useful_pairs(g) == sum(min(i + 1, 1024) for i in range(4096))
    lengths = (100, 2000, 37, 513)
    j = L.Geometry(
        b=4, h=8, hk=8, sq=2000, sk=2000, d=64, dv=64, lengths_q=lengths, lengths_k=lengths, lengths="per_sequence"
    )
    assert L.counts(j, "forward", "flash").useful == sum(4 * n * n * 8 * 64 for n in lengths)
    lo, hi = L.sum_squares_bounds(sum(lengths), 2000, 4)
    assert lo <= sum(n * n for n in lengths) <= hi


@pytest.mark.parametrize("n,lo,hi,total", [(2, 3, 9, 12), (3, 2, 7, 13), (4, 1, 6, 14), (5, 2, 5, 17), (6, 3, 3, 18)])
def test_sum_squares_bounds_with_the_shortest_are_the_extremes(n, lo, hi, total):
    """With the shortest and the longest known (a jagged nested tensor's min/max_seqlen), the
    bounds are the least and the largest Σ L² over every set of n lengths in [lo, hi] holding
    both and summing to the total (brute force), and never looser than without the shortest."""
    import itertools

    sums = [
        sum(x * x for x in ls) + lo * lo + hi * hi
        for ls in itertools.combinations_with_replacement(range(lo, hi + 1), n - 2)
        if sum(ls) + lo + hi == total
    ]
    assert sums, "no such lengths"
    assert L.sum_squares_bounds(total, hi, n, lo) == (min(sums), max(sums))
    loose = L.sum_squares_bounds(total, hi, n)
    assert loose[0] <= min(sums) and max(sums) <= loose[1]


def test_tiles_from_kernel_names():
    assert L.tile_from_name(
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false>"
    ) == (128, 64)
    assert L.tile_from_name(
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
    ) == (
        64,
        128,
    )
    assert L.tile_from_name(
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
        "cutlass::arch::Sm80, true, 32, 128, 64, true, true>::Params)"
    ) == (32, 128)
    assert L.tile_from_name(
        "fmha_cutlassB_bf16_aligned_64x64_k64_seqaligned_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
        "cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, true>::Params)"
    ) == (64, 64)
    assert L.tile_from_name("triton_tem_fused_flex_attention_0") is None
    assert L.default_tile("flash", "forward", 128) == (128, 64) and L.default_tile("eager", "forward", 64) is None


def test_geometry_from_recorded_inputs():
    # efficient attention with custom_mask_type 2 (bottom-right causal): KV-cache decode
    q, kv = [1, 4, 32, 128], [1, 1000, 32, 128]
    a = args(
        [q, kv, kv, [], [], [], [], [], [], [], [], [], [], []],
        [BF, BF, BF] + [""] * 11,
        ["", "", "", "", "", "", "", "", "0.0", "2", "True", "", "", ""],
    )
    g = L.geometry("aten::_efficient_attention_forward", a)
    assert g is not None and g.mask == L.Mask("causal", bottom_right=True) and (g.sq, g.sk, g.h) == (4, 1000, 32)
    # SDPA with an attn_mask tensor: the mask's contents are not in the trace
    a = args(
        [[2, 8, 64, 64]] * 3 + [[2, 1, 64, 64], [], []], [BF] * 4 + ["Scalar", "Scalar"], [""] * 4 + ["0.0", "False"]
    )
    g = L.geometry("aten::_scaled_dot_product_efficient_attention", a)
    assert g is not None and g.mask.kind == "tensor" and not g.mask.known
    # varlen FlashAttention (jagged q/k/v packed as [total, H, D]): total and max only
    a = args(
        [[2650, 8, 64]] * 3 + [[5], [5], [], [], [], [], []],
        [BF] * 3 + ["int", "int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
        [""] * 5 + ["2000", "2000", "0.0", "False", "False"],
    )
    g = L.geometry("aten::_flash_attention_forward", a)
    assert g is not None and g.lengths == "total_max" and g.b == 4 and g.total_q == 2650 and g.sq == 2000


def test_utilization_never_above_one():
    assert L.utilization(5.0, 10.0) == 0.5
    assert L.utilization(11.0, 10.0) is None  # impossible: the count includes skipped work
    assert L.utilization(None, 10.0) is None and L.utilization(1.0, 0.0) is None


def test_varlen_without_lengths_is_bounded():
    g = L.Geometry(b=4, h=8, hk=8, sq=2000, sk=2000, d=64, dv=64, lengths="total_max", total_q=2650, total_k=2650)
    c = L.counts(g, "forward", "flash")
    true = sum(4 * n * n * 8 * 64 for n in (100, 2000, 37, 513))
    assert not c.useful_exact and c.useful_low <= true <= c.useful
    assert c.useful <= c.dense
