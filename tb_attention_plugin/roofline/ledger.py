"""The FLOPs ledger of one attention call: the math its mask keeps, what its kernel computes,
and the dense count, each as a pure function of the call's geometry.

Three counts, because three conventions meet in every MFU argument (docs/cost-model.md,
*The FLOPs ledger*):

* ``useful`` — the (query, key) pairs the mask keeps: causal top-left or bottom-right (query i
  of Sq sees keys 0..i+Sk−Sq), sliding windows, jagged/varlen sequences (Σᵢ Lqᵢ·Lkᵢ kept
  pairs, never the padded batch), FlexAttention's block mask where its block counts are known.
  Matmuls counted as model FLOPs: 2 in the forward (QKᵀ, PV), 4 in the backward (dV, dP, dQ,
  dK), the recomputation of QKᵀ not included — torchtitan's and Megatron's convention.
* ``executed`` — what the kernel computes: a fused kernel visits whole tiles (M query rows ×
  N keys) that hold at least one kept pair, and its backward recomputes QKᵀ (5 matmuls); a
  decomposed (math/eager/compiled) attention computes every pair of its matmuls. Tile sizes
  come from the kernel's name where it carries them, else from the backend's defaults below
  (estimates). A partial tile at the matrix's edge counts whole: its padding rows go through the
  Tensor Cores too (Nsight Compute's sm__ops_path_tensor counts on the H200: a 4-query decode in
  128-row tiles executes 32x its pairs). A one-token GQA decode on flash or cuDNN packs the
  query heads of one K/V head into a tile's rows (FlashAttention-2's seqlenq_ngroups_swapped;
  cuDNN's decode did the same on the H200), so its tiles hold H/Hk rows, not 1.
* ``dense`` — every (query, key) pair, no mask, model FLOPs (2 forward / 4 backward matmuls):
  what ``12·l·h·q·t`` (torchtitan) counts.

Everything here is arithmetic on integers from the recorded shapes; nothing reads a trace.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np

from ..trace.shapes import Arg
from .cost import flex_qkv, sdpa_shapes, sum_squares_bounds

# matmuls per (query, key) pair and head, as multiples of the forward's 2·(D + Dv) FLOPs
USEFUL_BACKWARD = 2.0  # dV = PᵀdO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q: 4 matmuls = 2x forward
FUSED_BACKWARD_QK = 3  # fused backwards recompute S = Q Kᵀ: QK-sized matmuls S, dQ, dK ...
FUSED_BACKWARD_PV = 2  # ... and PV-sized dV, dP (cost.py's SDPA backward: 2.5x forward at D = Dv)

# Default tiles (query rows M x keys N) per backend and head dim when the kernel name does not
# carry them — estimates from the kernels seen on sm80/sm90 (FlashAttention-2 in PyTorch's
# pytorch_flash::, cuDNN's fprop/bprop names, CUTLASS mem-efficient); FlexAttention iterates over
# its block mask's 128x128 blocks.
DEFAULT_TILES: dict[tuple[str, str], tuple[tuple[int, tuple[int, int]], ...]] = {
    # (backend, direction): ((max head dim, (M, N)), ...), first head-dim bound that fits wins
    ("flash", "forward"): ((64, (128, 128)), (128, (128, 64)), (256, (64, 64))),
    ("flash", "backward"): ((64, (128, 128)), (128, (64, 128)), (256, (64, 64))),
    ("cudnn", "forward"): ((256, (64, 128)),),
    ("cudnn", "backward"): ((256, (64, 64)),),
    ("efficient", "forward"): ((256, (64, 64)),),
    ("efficient", "backward"): ((256, (64, 64)),),
    ("flex", "forward"): ((1 << 30, (128, 128)),),
    ("flex", "backward"): ((1 << 30, (128, 128)),),
    ("library", "forward"): ((64, (128, 128)), (128, (128, 64)), (256, (64, 64))),
    ("library", "backward"): ((64, (128, 128)), (128, (64, 128)), (256, (64, 64))),
}
FUSED_TILED = frozenset(b for b, _ in DEFAULT_TILES)

# Tile sizes in kernel names, (regex, group of M, group of N): FlashAttention-2's kernel traits
# <kHeadDim, kBlockM, kBlockN, ...>; cuDNN's ..._<M>x<N>x<D>_..._cga...; CUTLASS mem-efficient
# AttentionKernel<scalar, arch, aligned, kQueriesPerBlock, kKeysPerBlock, ...> and
# AttentionBackwardKernel<arch, scalar, aligned, dropout, preload, kBlockSizeI, kBlockSizeJ, ...>;
# FlashAttention-3's CuTe tile shape tuple<C<M>, C<N>, C<D>>.
_TILE_NAMES: tuple[tuple[re.Pattern[str], int, int], ...] = (
    (re.compile(r"Flash_(?:fwd|bwd)_kernel_traits<\s*\d+,\s*(\d+),\s*(\d+)"), 1, 2),
    (re.compile(r"_(\d+)x(\d+)x\d+_\d+x\d+x\d+_cga"), 1, 2),
    (re.compile(r"AttentionKernel<[^,<>]+,\s*[^,<>]+,\s*(?:true|false),\s*(\d+),\s*(\d+)"), 1, 2),
    (
        re.compile(
            r"AttentionBackwardKernel<[^,<>]+,\s*[^,<>]+,\s*(?:true|false),\s*(?:true|false),\s*(?:true|false),"
            r"\s*(\d+),\s*(\d+)"
        ),
        1,
        2,
    ),
    (re.compile(r"tuple<cute::C<(\d+)>,\s*cute::C<(\d+)>,\s*cute::C<\d+>\s*>"), 1, 2),
)


# Query rows a kernel computes in whole blocks larger than its named tile: cuDNN's sm90 wgmma
# forward kernels (``..._sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x<D>_...``) computed the
# queries in 128-row blocks on the H200 (Nsight Compute's tensor counts, 2026-12-02: 4000 queries
# executed 4096 rows, 16 queries 128 rows), while their causal skipping follows the named 64-row
# tile (S = 4096 causal, 2026-12-01: exact at 64 rows). Applied to calls without a mask (measured);
# with a mask (causal, window, a mask tensor) it is not applied: not measured there.
_ROW_BLOCK_NAMES: tuple[tuple[re.Pattern[str], int], ...] = ((re.compile(r"_sdpa_sm90_flash_fprop_wgmma_"), 128),)


def row_block_from_name(name: Optional[str]) -> Optional[int]:
    """The query-row block a fused kernel pads to, where it is larger than its tile (see above)."""
    for rx, rows in _ROW_BLOCK_NAMES:
        if name and rx.search(name):
            return rows
    return None


@dataclass(frozen=True)
class Mask:
    """Which keys each query sees. ``kind``: ``none`` (all), ``causal`` (keys up to the query's
    own position: top-left, or bottom-right when ``bottom_right``), ``window`` (a band of
    ``left`` keys before and ``right`` after the query's position; None = unbounded), ``block``
    (a FlexAttention block mask), ``tensor`` (an explicit mask whose contents the trace does not
    hold) or ``unknown`` (the flag could not be read)."""

    kind: str = "none"
    bottom_right: bool = False
    left: Optional[int] = None
    right: Optional[int] = None

    @property
    def known(self) -> bool:
        """The kept pairs follow from the shapes (no tensor contents needed)."""
        return self.kind in ("none", "causal", "window")

    def label(self) -> str:
        if self.kind == "causal":
            return "causal (bottom-right)" if self.bottom_right else "causal (top-left)"
        if self.kind == "window":
            side = "bottom-right" if self.bottom_right else "top-left"
            lo = "∞" if self.left is None else str(self.left)
            hi = "∞" if self.right is None else str(self.right)
            return f"sliding window ({lo} before, {hi} after; {side})"
        return {
            "none": "none",
            "block": "block mask",
            "tensor": "mask tensor (contents not recorded)",
            "unknown": "unknown",
        }.get(self.kind, self.kind)


NO_MASK = Mask()


@dataclass(frozen=True)
class BlockSparsity:
    """A FlexAttention block mask as far as the trace shows it: the block grid (from the
    ``KV_NUM_BLKS``/``KV_IDX`` shapes) and, where recorded, how many blocks are visited."""

    q_block: int  # query rows per block (128 by default)
    kv_block: int  # keys per block
    visited: Optional[float] = None  # visited (q block, kv block) pairs per batch·head, when recorded
    total: Optional[int] = None  # all blocks of the grid per batch·head
    source: str = "not recorded"  # where ``visited`` comes from
    full: Optional[float] = None  # of ``visited``, the blocks the mask keeps whole (per batch·head)


@dataclass(frozen=True)
class Geometry:
    """Shapes of one attention call (one direction): batch, query heads, K/V heads, lengths and
    head dims, and the mask. Jagged/varlen calls carry per-sequence lengths (``lengths_q``,
    ``lengths_k``; ``b`` is their count) or only the total and the maximum (``lengths`` is then
    ``"total_max"`` and the kept pairs are bounded, not known)."""

    b: int
    h: int
    hk: int
    sq: int
    sk: int
    d: int
    dv: int
    mask: Mask = NO_MASK
    lengths_q: Optional[tuple[int, ...]] = None
    lengths_k: Optional[tuple[int, ...]] = None
    lengths: str = "uniform"  # "uniform" | "per_sequence" | "total_max"
    total_q: Optional[int] = None  # jagged: Σ Lq (the packed dimension)
    total_k: Optional[int] = None
    block: Optional[BlockSparsity] = None
    shortest: Optional[int] = None  # jagged, lengths not recorded: the shortest sequence, where the trace shows it

    def sequences(self) -> list[tuple[int, int]]:
        """(Lq, Lk) of every sequence when known (uniform: b times (sq, sk))."""
        if self.lengths_q is not None and self.lengths_k is not None:
            return list(zip(self.lengths_q, self.lengths_k))
        return [(self.sq, self.sk)] * self.b


def _rows(sq: int, sk: int, mask: Mask) -> tuple[np.ndarray, np.ndarray]:
    """Per query row: first and last kept key (inclusive; last < first means none)."""
    i = np.arange(sq, dtype=np.int64)
    pos = i + (sk - sq if mask.bottom_right else 0)
    if mask.kind == "causal":
        lo = np.zeros(sq, dtype=np.int64)
        hi = np.minimum(pos, sk - 1)
    elif mask.kind == "window":
        lo = np.zeros(sq, dtype=np.int64) if mask.left is None else np.maximum(pos - mask.left, 0)
        hi = np.full(sq, sk - 1, dtype=np.int64) if mask.right is None else np.minimum(pos + mask.right, sk - 1)
    else:
        lo = np.zeros(sq, dtype=np.int64)
        hi = np.full(sq, sk - 1, dtype=np.int64)
    return lo, hi


@lru_cache(maxsize=4096)
def kept_pairs(sq: int, sk: int, mask: Mask) -> int:
    """(query, key) pairs of one Sq x Sk score matrix that the mask keeps (exact; a mask the
    shapes do not decide — tensor, block, unknown — keeps all of them here)."""
    if sq <= 0 or sk <= 0:
        return 0
    if not mask.known or mask.kind == "none":
        return sq * sk
    lo, hi = _rows(sq, sk, mask)
    return int(np.maximum(hi - lo + 1, 0).sum())


@lru_cache(maxsize=4096)
def tile_pairs(sq: int, sk: int, mask: Mask, m: int, n: int) -> int:
    """(query, key) pairs a tiled kernel computes: every M x N tile holding at least one kept
    pair, whole (a partial tile at the edge computes its padding too). For no mask (or one the
    shapes do not decide) that is the whole matrix, rounded up to whole tiles."""
    if sq <= 0 or sk <= 0:
        return 0
    if m <= 0 or n <= 0:
        return sq * sk
    if not mask.known or mask.kind == "none":
        return -(-sq // m) * m * (-(-sk // n) * n)
    lo, hi = _rows(sq, sk, mask)
    total = 0
    for t0 in range(0, sq, m):
        t1 = min(t0 + m, sq)
        blo, bhi = lo[t0:t1], hi[t0:t1]
        keep = bhi >= blo
        if not keep.any():
            continue
        first = int(blo[keep].min()) // n * n
        last = (int(bhi[keep].max()) // n + 1) * n
        total += m * (last - first)
    return total


def packed_query_heads(g: Geometry, backend: str) -> int:
    """Query heads a tile's rows hold together: H/Hk for a one-token GQA decode on flash
    (FlashAttention-2 swaps the group into the rows when Sq = 1, H > Hk, no window; PyTorch keeps
    no dropout at decode) or cuDNN (seen on the H200: its decode tiles executed H/Hk rows), where
    every query sees every key; else 1."""
    if (
        backend in ("flash", "cudnn")
        and g.sq == 1
        and g.h > g.hk > 0
        and g.h % g.hk == 0
        and g.lengths == "uniform"
        and (g.mask.kind == "none" or (g.mask.kind == "causal" and g.mask.bottom_right))
    ):
        return g.h // g.hk
    return 1


@lru_cache(maxsize=4096)
def tile_from_name(name: Optional[str]) -> Optional[tuple[int, int]]:
    """(M query rows, N keys) of a fused attention kernel whose name carries its tile (memoised:
    asked for every call of every step, of a few kernel names)."""
    if not name:
        return None
    for rx, gm, gn in _TILE_NAMES:
        mt = rx.search(name)
        if mt:
            return int(mt.group(gm)), int(mt.group(gn))
    return None


def default_tile(backend: str, direction: str, d: int) -> Optional[tuple[int, int]]:
    """The backend's usual tile for head dim ``d`` (an estimate), or None when it is not tiled."""
    for bound, tile in DEFAULT_TILES.get((backend, direction), ()):
        if d <= bound:
            return tile
    return None


def pair_flops(d: int, dv: int) -> float:
    """FLOPs of the forward's two matmuls per (query, key) pair and query head: 2·D + 2·Dv."""
    return 2.0 * d + 2.0 * dv


def flex_backward_pair_flops(d: int, dv: int) -> float:
    """FLOPs per pair and head of FlexAttention's backward: its dQ pass recomputes S = QKᵀ and
    dP = dO·Vᵀ and its dK/dV pass both again — 2·(4·D + 3·Dv), 3.5x the forward at D = Dv
    (Nsight Compute on the H200: 69.5 of 19.9 GFLOP tensor ops on r3_flex_doc_fwdbwd)."""
    return 2.0 * (4 * d + 3 * dv)


def fused_backward_pair_flops(d: int, dv: int) -> float:
    """FLOPs per pair and head of a fused backward (QKᵀ recomputed): 2·(3·D + 2·Dv)."""
    return 2.0 * (FUSED_BACKWARD_QK * d + FUSED_BACKWARD_PV * dv)


def _sum_pairs(g: Geometry, per_sequence: Callable[[int, int], int]) -> int:
    return sum(per_sequence(lq, lk) for lq, lk in g.sequences())


def useful_pairs(g: Geometry) -> int:
    """Σ over sequences of the pairs the mask keeps (the block mask's visited blocks, at block
    granularity, when recorded)."""
    if g.mask.kind == "block" and g.block is not None and g.block.visited is not None:
        return _block_pairs(g, g.block, g.block.visited)
    return _sum_pairs(g, lambda lq, lk: kept_pairs(lq, lk, g.mask))


def _block_pairs(g: Geometry, blk: BlockSparsity, blocks: float) -> int:
    """Pairs of ``blocks`` whole blocks per batch·head (at most the matrix), over the batch."""
    return int(round(g.b * min(blocks * blk.q_block * blk.kv_block, g.sq * g.sk)))


def dense_pairs(g: Geometry) -> int:
    """Σ over sequences of Lq·Lk: every pair, no mask (jagged: the sequences, not the padding)."""
    return _sum_pairs(g, lambda lq, lk: lq * lk)


def executed_pairs(g: Geometry, tile: Optional[tuple[int, int]], row_block: Optional[int] = None) -> int:
    """Σ over sequences of the pairs a tiled kernel computes (``tile`` None: every pair); with
    ``row_block`` and no mask, the queries round up to whole row blocks."""
    if g.mask.kind == "block" and g.block is not None:
        if g.block.visited is None:
            return dense_pairs(g)
        return _block_pairs(g, g.block, g.block.visited)
    if tile is None:
        return dense_pairs(g)
    m, n = tile
    if row_block and row_block > m and g.mask.kind == "none":
        return _sum_pairs(g, lambda lq, lk: tile_pairs(lq, lk, g.mask, row_block, n))
    return _sum_pairs(g, lambda lq, lk: tile_pairs(lq, lk, g.mask, m, n))


@dataclass(frozen=True)
class Counts:
    """The ledger of one call and direction (FLOPs), and how each was obtained."""

    useful: float
    executed: float
    dense: float
    useful_exact: bool  # False: the mask's contents or the sequence lengths are not in the trace
    executed_basis: str  # "tiles" | "tiles (default for the backend: estimate)" | "dense" | ...
    useful_low: Optional[float] = None  # a lower bound, where only bounds are known (varlen)


def counts(
    g: Geometry,
    direction: str,
    backend: str,
    tile: Optional[tuple[int, int]] = None,
    tile_estimated: bool = False,
    decomposed_flops: Optional[float] = None,
    row_block: Optional[int] = None,
) -> Counts:
    """useful / executed / dense FLOPs of one call in one direction.

    ``backend``: the attention backend (attention/backends.py). Fused tiled backends execute
    whole tiles (``tile``, else the backend's default) and recompute QKᵀ in the backward;
    decomposed attention (math, eager, compiled) executes ``decomposed_flops`` — the FLOPs of
    its QKᵀ and PV kernels — or, without them, every pair of its matmuls."""
    h = g.h
    fwd = pair_flops(g.d, g.dv)
    scale = USEFUL_BACKWARD if direction == "backward" else 1.0
    if g.lengths == "total_max" and g.total_q and g.total_k:
        return _varlen_bounds(g, direction, backend, decomposed_flops)
    useful = h * fwd * scale * useful_pairs(g)
    dense = h * fwd * scale * dense_pairs(g)
    exact = g.mask.known and g.lengths != "total_max"
    useful_low: Optional[float] = None
    if g.mask.kind == "block" and g.block is not None and g.block.visited is not None:
        exact = False  # block granularity: partial blocks count whole
        if g.block.full is not None:  # the blocks the mask keeps whole: a lower bound
            useful_low = float(h * fwd * scale * _block_pairs(g, g.block, g.block.full))
    if backend in FUSED_TILED:
        if tile is None:
            tile = default_tile(backend, direction, max(g.d, g.dv))
            tile_estimated = True
        per = fused_backward_pair_flops(g.d, g.dv) if direction == "backward" else fwd
        if backend == "flex" and direction == "backward":
            per = flex_backward_pair_flops(g.d, g.dv)
        packed = packed_query_heads(g, backend) if tile is not None else 1
        if packed > 1 and tile is not None:
            executed = g.hk * per * g.b * tile_pairs(packed, g.sk, NO_MASK, tile[0], tile[1])
        else:
            executed = h * per * executed_pairs(g, tile, row_block)
        if g.mask.kind == "block":
            recorded = g.block is not None and g.block.visited is not None
            basis = "block counts" if recorded else "dense (block counts not recorded)"
        elif tile is None or not g.mask.known or (g.mask.kind == "none" and executed == h * per * dense_pairs(g)):
            basis = "dense"
        else:
            basis = f"tiles {tile[0]}x{tile[1]}" + (" (the backend's default: estimate)" if tile_estimated else "")
            if row_block and row_block > tile[0] and g.mask.kind == "none" and executed != h * per * dense_pairs(g):
                basis += f", queries in {row_block}-row blocks"
            if packed > 1:
                basis += f", {packed} query heads per tile row block (GQA decode)"
    else:
        executed = float(decomposed_flops) if decomposed_flops is not None else h * fwd * scale * dense_pairs(g)
        basis = "the QK^T and PV kernels' FLOPs (every pair)"
    return Counts(float(useful), float(executed), float(dense), exact, basis, useful_low)


def _varlen_bounds(g: Geometry, direction: str, backend: str, decomposed_flops: Optional[float]) -> Counts:
    """A varlen call whose per-sequence lengths are not recorded (only the packed totals, the
    number of sequences and the longest): Σᵢ Lqᵢ·Lkᵢ is bounded, not known. Useful and dense
    are the upper bounds (``useful_low`` the lower), executed the upper bound of its pairs."""
    tq, tk = int(g.total_q or 0), int(g.total_k or 0)
    if tq == tk:
        low2, high2 = sum_squares_bounds(tq, min(g.sq, tq), g.b, g.shortest)
    else:  # cross lengths: Σ Lq·Lk ≤ min(max_q·Σ Lk, max_k·Σ Lq)
        high2 = min(g.sq * tk, g.sk * tq)
        low2 = 0
    causal = g.mask.kind == "causal"
    lo = (low2 + tq) // 2 if causal else low2
    hi = (high2 + tq) // 2 if causal else high2
    fwd = pair_flops(g.d, g.dv)
    scale = USEFUL_BACKWARD if direction == "backward" else 1.0
    per = fused_backward_pair_flops(g.d, g.dv) if direction == "backward" else fwd
    h = g.h
    if backend in FUSED_TILED:
        executed = h * per * hi
    else:
        executed = float(decomposed_flops) if decomposed_flops is not None else h * fwd * scale * high2
    return Counts(
        useful=float(h * fwd * scale * hi),
        executed=float(executed),
        dense=float(h * fwd * scale * high2),
        useful_exact=False,
        executed_basis="upper bound (per-sequence lengths not recorded: total, count and longest only)",
        useful_low=float(h * fwd * scale * lo),
    )


# -- Flex block counts recorded by an annotation ----------------------------------------------
# The record_function convention that carries a BlockMask's counts into a trace (the profiler
# records a block mask's tensors' shapes only, never their values; neither the compiled Flex
# path nor "Concrete Inputs" holds a count):
#     flex_blocks:partial=P,full=F,mask_bh=MBxMH,q_blocks=NQ,kv_blocks=NK,block=BQxBK
# around the flex_attention call, P = kv_num_blocks.sum(), F = full_kv_num_blocks.sum() over the
# mask's own [MB, MH, NQ] tensors (MB = MH = 1 when built with B=None, H=None: broadcast).
# No "attention" in the name: the default annotation pattern would take it for an attention
# scope. validation/round4_model.py records it; docs/cost-model.md documents it.
# The name may carry a dotted namespace before the convention (``mylib.flex_blocks:...``; the
# H200 recording of 2026-12-02 wrote ``tb_attention.flex_blocks:...``).
FLEX_BLOCKS_ANNOTATION = "flex_blocks:"
_FLEX_NAME = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?flex_blocks:(.*)$")
_FLEX_KV = re.compile(r"(\w+)=([0-9x]+)")


@dataclass(frozen=True)
class RecordedBlocks:
    """The counts of a ``flex_blocks:`` annotation (see FLEX_BLOCKS_ANNOTATION)."""

    partial: int
    full: int
    mask_b: int = 1
    mask_h: int = 1
    q_blocks: Optional[int] = None
    kv_blocks: Optional[int] = None
    block: Optional[tuple[int, int]] = None


def flex_blocks_name(block_mask: Any) -> str:
    """The record_function name of the convention for a FlexAttention ``BlockMask`` (duck-typed:
    ``kv_num_blocks``, ``full_kv_num_blocks``, ``kv_indices``, ``BLOCK_SIZE``; no torch import)::

        from tb_attention_plugin.roofline.ledger import flex_blocks_name
        tag = flex_blocks_name(block_mask)          # once per mask: it reads two sums
        with torch.profiler.record_function(tag):
            out = flex_attention(q, k, v, block_mask=block_mask)
    """
    kv = block_mask.kv_num_blocks
    full = getattr(block_mask, "full_kv_num_blocks", None)
    mb, mh, nq = (int(x) for x in kv.shape)
    nk = int(block_mask.kv_indices.shape[-1])
    bq, bk = (int(x) for x in block_mask.BLOCK_SIZE)
    p = int(kv.sum())
    f = int(full.sum()) if full is not None else 0
    grid = f"mask_bh={mb}x{mh},q_blocks={nq},kv_blocks={nk},block={bq}x{bk}"
    return f"{FLEX_BLOCKS_ANNOTATION}partial={p},full={f},{grid}"


def parse_flex_blocks(name: str) -> Optional[RecordedBlocks]:
    """The counts of one record_function name of the flex_blocks convention, or None when the
    name is not one or lacks ``partial`` (a malformed field drops the whole annotation)."""
    mt = _FLEX_NAME.match(name)
    if mt is None:
        return None
    kv = dict(_FLEX_KV.findall(mt.group(1)))

    def pair(key: str) -> Optional[tuple[int, int]]:
        v = kv.get(key)
        if v is None:
            return None
        a, sep, b = v.partition("x")
        return (int(a), int(b)) if sep and a.isdigit() and b.isdigit() else None

    def one(key: str) -> Optional[int]:
        v = kv.get(key)
        return int(v) if v is not None and v.isdigit() else None

    partial, full = one("partial"), one("full")
    if partial is None:
        return None
    bh = pair("mask_bh") or (1, 1)
    if bh[0] <= 0 or bh[1] <= 0 or ("mask_bh" in kv and pair("mask_bh") is None):
        return None
    return RecordedBlocks(partial, full or 0, bh[0], bh[1], one("q_blocks"), one("kv_blocks"), pair("block"))


def with_recorded_blocks(g: Geometry, rb: RecordedBlocks) -> Optional[Geometry]:
    """``g`` (a Flex call) with the annotation's block counts, per batch·head: (P + F) / (MB·MH)
    visited, F / (MB·MH) of them whole. None when the annotation describes another grid than the
    call's recorded KV_IDX shape, or another block size, or a mask batch/head layout that does not
    divide the call's."""
    blk = g.block
    if g.mask.kind != "block" or blk is None:
        return None
    nq, nk = -(-g.sq // blk.q_block), -(-g.sk // blk.kv_block)
    if (rb.q_blocks is not None and rb.q_blocks != nq) or (rb.kv_blocks is not None and rb.kv_blocks != nk):
        return None
    if rb.block is not None and rb.block != (blk.q_block, blk.kv_block):
        return None
    if g.b % rb.mask_b or g.h % rb.mask_h:
        return None
    per = float(rb.mask_b * rb.mask_h)
    visited = (rb.partial + rb.full) / per
    if blk.total is not None and visited > blk.total:
        return None
    new = dataclasses.replace(blk, visited=visited, full=rb.full / per, source="flex_blocks annotation")
    return dataclasses.replace(g, block=new)


# -- jagged / varlen lengths ---------------------------------------------------------------------
# -- utilisation -----------------------------------------------------------------------------------
def utilization(flops: Optional[float], peak_seconds: Optional[float]) -> Optional[float]:
    """``flops`` / (time × peak) given Σ time·peak (FLOP the roof allows), or None when unknown
    or impossible (above 1: the count includes work the kernel did not do — the caller says so)."""
    if flops is None or not peak_seconds or peak_seconds <= 0:
        return None
    u = flops / peak_seconds
    return u if u <= 1.0 else None


# -- geometry from an op's recorded inputs -----------------------------------------------------------
# Varlen/windowed FlashAttention and CUTLASS ops (native_functions.yaml): positions of cu_seqlens
# (q, k), max_seqlen (q, k), is_causal / custom_mask_type and the window sizes.
@dataclass(frozen=True)
class _Varlen:
    q: int  # index of query
    cu_q: int
    max_q: int
    causal: Optional[int] = None
    mask_type: Optional[int] = None
    window_left: Optional[int] = None
    window_right: Optional[int] = None
    window: Optional[int] = None  # CUTLASS: one symmetric window_size


_VARLEN: dict[str, _Varlen] = {
    "aten::_flash_attention_forward": _Varlen(0, 3, 5, causal=8, window_left=11, window_right=12),
    "aten::_flash_attention_backward": _Varlen(1, 6, 8, causal=11, window_left=15, window_right=16),
    "aten::_efficient_attention_forward": _Varlen(0, 4, 6, mask_type=9, window=13),
    "aten::_efficient_attention_backward": _Varlen(1, 6, 8, mask_type=14, window=17),
}


def _int(args: list[Arg], i: Optional[int]) -> Optional[int]:
    if i is None or i >= len(args) or args[i].is_tensor:
        return None
    try:
        return int(float(args[i].value))
    except ValueError:
        return None


def _causal_mask(causal: bool, bottom_right: bool, left: Optional[int], right: Optional[int]) -> Mask:
    """The mask of a fused op's flags: a window (FlashAttention's window_size_left/right, −1 or
    absent = unbounded) narrows causal or full attention."""
    left = left if left is not None and left >= 0 else None
    right = right if right is not None and right >= 0 else None
    if causal:
        right = 0 if right is None else min(right, 0)
    if left is not None or right not in (None, 0):
        return Mask("window", bottom_right=bottom_right, left=left, right=right)
    if causal:
        return Mask("causal", bottom_right=bottom_right)
    return NO_MASK


def geometry(op: str, args: list[Arg]) -> Optional[Geometry]:
    """The geometry of one attention op from its recorded inputs (None when the op is not an
    attention op or its inputs are not usable): SDPA and its backends (cost.sdpa_shapes), their
    varlen forms (3-D packed q/k/v with cu_seqlens: jagged), and FlexAttention templates."""
    v = _VARLEN.get(op)
    if v is not None and len(args) > v.q + 2 and args[v.q].is_tensor and len(args[v.q].dims) in (3, 4):
        q, k, vv = args[v.q], args[v.q + 1], args[v.q + 2]
        cu = args[v.cu_q] if v.cu_q < len(args) else None
        if cu is not None and cu.is_tensor and len(cu.dims) == 1 and cu.dims[0] >= 2 and k.is_tensor and vv.is_tensor:
            qd, kd, vd = q.dims[-3:], k.dims[-3:], vv.dims[-3:]
            if len(qd) == 3 and len(kd) == 3 and len(vd) == 3:
                n = cu.dims[0] - 1
                max_q, max_k = _int(args, v.max_q), _int(args, v.max_q + 1)
                left: Optional[int] = None
                right: Optional[int] = None
                if v.mask_type is not None:
                    mt = _int(args, v.mask_type)
                    causal, br = mt in (1, 2), mt == 2
                    w = _int(args, v.window)
                    left = w if w else None
                else:
                    causal, br = (args[v.causal].value.strip().lower() in ("true", "1")) if v.causal else False, True
                    left, right = _int(args, v.window_left), _int(args, v.window_right)
                return Geometry(
                    b=n,
                    h=qd[1],
                    hk=kd[1],
                    sq=max_q or qd[0],
                    sk=max_k or kd[0],
                    d=qd[2],
                    dv=vd[2],
                    mask=_causal_mask(causal, br, left, right),
                    lengths="total_max",
                    total_q=qd[0],
                    total_k=kd[0],
                )
    s = sdpa_shapes(op, args)
    if s is not None:
        if s["mask_bytes"]:
            mask = Mask("tensor")
        elif not s["causal_known"]:
            mask = Mask("unknown")
        else:
            wl: Optional[int] = None
            wr: Optional[int] = None
            if v is not None and v.window_left is not None:
                wl, wr = _int(args, v.window_left), _int(args, v.window_right)
            elif v is not None and v.window is not None:
                w = _int(args, v.window)
                wl = w if w else None
            mask = _causal_mask(bool(s["causal"]), bool(s["bottom_right"]), wl, wr)
        return Geometry(s["b"], s["h"], s["hk"], s["sq"], s["sk"], s["d"], s["dv"], mask)
    qkv = flex_qkv(args)
    if qkv is not None and any(a.is_tensor and a.dtype == "int32" and len(a.dims) == 4 for a in args):
        q, k, vv = qkv
        b, h, sq, d = q.dims
        idx = next(a for a in args if a.is_tensor and a.dtype == "int32" and len(a.dims) == 4)
        qb, kb = idx.dims[2], idx.dims[3]
        block = BlockSparsity(
            q_block=-(-sq // qb) if qb else sq,
            kv_block=-(-k.dims[2] // kb) if kb else k.dims[2],
            total=qb * kb,
        )
        if qb * kb == 1:  # flex_attention without a block mask: one block of the whole matrix, visited
            block = dataclasses.replace(block, visited=1.0, full=None, source="one-block grid (no block mask)")
        return Geometry(b, h, k.dims[1], sq, k.dims[2], d, vv.dims[3], Mask("block"), block=block)
    return None
