"""Twin runs for the advice rules (issue #19) and the site/boundary/ledger data of issue #23.

Each *run* is one workload (a builder of workloads.py / round3_workloads.py, or one below), recorded twice:

- profiled: torch.profiler, one warm-up step then 2 active steps, record_shapes + with_stack, TensorBoard layout
  ``OUT/<run>/<run>.<ts>.pt.trace.json.gz``;
- timed, unprofiled: after warm-up, >= 10 steps each bracketed by CUDA events (``step_ms``: GPU time from the
  step's first launch to its last kernel, launch gaps included) and by the host clock with a synchronize
  (``wall_ms``); medians kept.

From the trace: ``gpu_kernel_ms_per_step`` (sum of kernel durations / active steps) and
``attention_fwd_gpu_ms_per_step`` (kernels launched inside an ``nn.Module`` whose class name contains "Attention":
forward only, backward kernels run on autograd's thread outside module scopes; graph replays have no scope).

A *pair* names a rule, its problem run and its fix run; ``--manifest`` writes ``OUT/manifest.json`` with per pair
{rule, problem, fix, measured_saving_ms_per_step (problem step_ms - fix step_ms), notes, shapes}.

    python3 validation/twins.py --out DIR --group eager|compile|ddp [--deadline UNIX_T] [--small --device cpu]
    python3 validation/twins.py --out DIR --manifest
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import workloads as W  # noqa: E402  (first: it imports the family modules below)

# isort: split
import round3_workloads as R  # noqa: E402
from modern_workloads import RMSNorm, _dtype  # noqa: E402

from trace_workloads import env_info, profile_steps, sync  # noqa: E402

TIMED_STEPS = 12
WARMUP = 3
ACTIVE = 2

# ---------------------------------------------------------------------------
# twin-only models
# ---------------------------------------------------------------------------


class SpatialAttention(nn.Module):
    """Attention over the patches of each frame: [B*T, N, C]."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class TemporalAttention(SpatialAttention):
    """Attention over the frames at each patch position: [B*N, T, C] (T = 16 frames; full, not causal, not decode)."""


class VideoBlock(nn.Module):
    def __init__(self, dim: int, heads: int, frames: int, patches: int):
        super().__init__()
        self.t, self.n = frames, patches
        self.norm_s, self.norm_t, self.norm_m = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.spatial_attn = SpatialAttention(dim, heads)
        self.temporal_attn = TemporalAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):  # x [B, T, N, C]
        b, t, n, c = x.shape
        x = x + self.spatial_attn(self.norm_s(x).reshape(b * t, n, c)).view(b, t, n, c)
        y = self.temporal_attn(self.norm_t(x).transpose(1, 2).reshape(b * n, t, c))
        x = x + y.view(b, n, t, c).transpose(1, 2)
        return x + self.mlp(self.norm_m(x))


def build_video(device, small, *, B=2, frames=16, patches=256, dim=512, heads=8, layers=2):
    if small:
        B, frames, patches, dim, heads, layers = 1, 4, 16, 32, 2, 1
    dt = _dtype(device, small)
    mod = nn.Sequential(*[VideoBlock(dim, heads, frames, patches) for _ in range(layers)]).to(device=device, dtype=dt)
    mod.train()
    x = W._rand((B, frames, patches, dim), dt, device, True)
    step = W._train_or_infer(mod, lambda: mod(x), True, (x,))
    meta = dict(
        kind="video_spatial_temporal",
        B=B,
        frames=frames,
        patches=patches,
        dim=dim,
        heads=heads,
        head_dim=dim // heads,
        layers=layers,
        spatial="SDPA over N patches per frame, batch B*T",
        temporal="SDPA over T frames per patch, batch B*N (full attention, training: not decode)",
        dtype=W._dt_name(dt),
        pass_="fwd+bwd",
        module="VideoBlock/SpatialAttention|TemporalAttention",
    )
    return W.Workload("", step, meta, keep=[mod, x])


class LlamaBlockAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.h = heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        b, s, e = x.shape

        def heads(t):
            return t.view(b, s, self.h, e // self.h).transpose(1, 2)

        o = F.scaled_dot_product_attention(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)), is_causal=True
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, s, e))


class FfnBoundaryBlock(nn.Module):
    """norm -> attention -> o_proj -> + residual -> norm -> gate/up -> silu*up -> down -> + residual: the ops after
    attention's output (o_proj epilogue, residual add, norm, the FFN's first matmul) that torch.compile fuses."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaBlockAttention(hidden, heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, 4 * hidden, bias=False)
        self.up_proj = nn.Linear(hidden, 4 * hidden, bias=False)
        self.down_proj = nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def build_ffn_block(device, small, *, compiled, B=2, S=2048, hidden=1024, heads=16):
    if small:
        B, S, hidden, heads = 1, 32, 64, 4
    dt = _dtype(device, small)
    mod = FfnBoundaryBlock(hidden, heads).to(device=device, dtype=dt).eval()
    fn = torch.compile(mod) if compiled else mod
    x = torch.randn(B, S, hidden, device=device, dtype=dt)

    def step():
        with torch.no_grad():
            return fn(x)

    meta = dict(
        kind="ffn_boundary_block",
        compiled=compiled,
        B=B,
        S=S,
        hidden=hidden,
        heads=heads,
        head_dim=hidden // heads,
        ffn=4 * hidden,
        dtype=W._dt_name(dt),
        causal=True,
        pass_="fwd",
        module="FfnBoundaryBlock/LlamaBlockAttention",
    )
    return W.Workload("", step, meta, keep=[mod, fn, x])


def build_dropout(device, small, *, train, B=4, H=16, S=1024, D=64):
    """NaiveAttention (dropout 0.1 on the probabilities) run for inference under no_grad, left in train() (dropout
    applied) or switched to eval()."""
    if small:
        B, H, S, D = 1, 2, 32, 16
    dt = _dtype(device, small)
    mod = W.NaiveAttention(H * D, H, dropout=0.1, causal=True).to(device=device, dtype=dt).train(train)
    x = torch.randn(B, S, H * D, device=device, dtype=dt)

    def step():
        with torch.no_grad():
            return mod(x)

    meta = dict(
        kind="naive",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=W._dt_name(dt),
        causal=True,
        dropout=0.1,
        module_mode="train()" if train else "eval()",
        pass_="fwd (inference, no_grad)",
        module="NaiveAttention",
    )
    return W.Workload("", step, meta, keep=[mod, x])


# ---------------------------------------------------------------------------
# runs and pairs
# ---------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    group: str  # eager | compile | ddp: one process per group on the device
    builder: Callable[..., W.Workload] | None
    kwargs: dict[str, Any] = field(default_factory=dict)


LLAMA = dict(bwd=True, hidden=1024, heads=16, kv_heads=4, seq=2048, batch=2, layers=2)
BLOCK = dict(B=2, H=16, S=4096, D=128, bwd=True)
GQA_DEC = dict(backend=None, B=8, H=32, KVH=8, S=8192, Sq=1, causal=False, bwd=False)
GQA_PRE = dict(backend=None, B=1, H=32, KVH=8, S=4096, causal=True, bwd=False)
HD = dict(B=2, H=16, S=2048, bwd=True)

RUNS = [
    Run("llama_eager", "eager", W.build_hf_llama, dict(attn="eager", **LLAMA)),
    Run("llama_sdpa", "eager", W.build_hf_llama, dict(attn="sdpa", **LLAMA)),
    Run("t5_eager", "eager", R.build_t5, dict(attn="eager", bwd=True)),
    Run("t5_sdpa", "eager", R.build_t5, dict(attn="sdpa", bwd=True)),
    Run("block_efficient", "eager", R.build_block, dict(backend="efficient", **BLOCK)),
    Run("block_flash", "eager", R.build_block, dict(backend="flash", **BLOCK)),
    Run("block_cudnn", "eager", R.build_block, dict(backend="cudnn", **BLOCK)),
    Run(
        "gqa_float_mask_math",
        "eager",
        R.build_sdpa_core,
        dict(backend=None, B=2, H=16, KVH=4, S=2048, D=128, bwd=True, kv_layout="gqa", mask="additive_causal"),
    ),
    Run(
        "gqa_is_causal_flash",
        "eager",
        R.build_sdpa_core,
        dict(backend=None, B=2, H=16, KVH=4, S=2048, D=128, bwd=True, kv_layout="gqa"),
    ),
    Run("block_fp32", "eager", R.build_block, dict(backend=None, B=2, H=16, S=2048, D=64, bwd=True, dtype="fp32")),
    Run("block_bf16", "eager", R.build_block, dict(backend=None, B=2, H=16, S=2048, D=64, bwd=True, dtype="bf16")),
    Run("decode_repeat_kv", "eager", R.build_sdpa_core, dict(kv_layout="repeat_kv", **GQA_DEC)),
    Run("decode_enable_gqa", "eager", R.build_sdpa_core, dict(kv_layout="gqa", **GQA_DEC)),
    Run("prefill_repeat_kv", "eager", R.build_sdpa_core, dict(kv_layout="repeat_kv", **GQA_PRE)),
    Run("prefill_enable_gqa", "eager", R.build_sdpa_core, dict(kv_layout="gqa", **GQA_PRE)),
    Run("headdim100", "eager", R.build_block, dict(backend=None, D=100, **HD)),
    Run("headdim100_pad104", "eager", R.build_block, dict(backend=None, D=100, pad_to=104, **HD)),
    Run("dropout_train_infer", "eager", build_dropout, dict(train=True)),
    Run("dropout_eval_infer", "eager", build_dropout, dict(train=False)),
    Run("video_spatial_temporal", "eager", build_video, {}),
    Run("sdpa_causal_s4096", "eager", R.build_sdpa_core, dict(backend=None, bwd=False)),
    Run(
        "sdpa_causal_swa1024_s4096",
        "eager",
        R.build_sdpa_core,
        dict(backend=None, bwd=False, mask="sliding", window=1024),
    ),
    Run(
        "decode_q4_top_left",
        "eager",
        R.build_sdpa_core,
        dict(backend=None, B=8, H=32, S=4096, Sq=4, causal=True, bwd=False),
    ),
    Run(
        "decode_q4_lower_right",
        "eager",
        R.build_sdpa_core,
        dict(backend=None, B=8, H=32, S=4096, Sq=4, bwd=False, mask="lower_right"),
    ),
    Run("decode_eager", "eager", R.build_decode_step, dict(mode="eager")),
    Run("decode_cuda_graph", "eager", R.build_decode_step, dict(mode="graph")),
    Run("decode_compile_ro", "compile", R.build_decode_step, dict(mode="compile_ro")),
    Run("ffn_block_eager", "eager", build_ffn_block, dict(compiled=False)),
    Run("ffn_block_compiled", "compile", build_ffn_block, dict(compiled=True)),
    Run("ddp2_straggler", "ddp", None, dict(slow_rank=1)),
    Run("ddp2_balanced", "ddp", None, {}),
]
# Second held-out set (group "heldout2"), written after the rules were changed against the first
# recording (2026-12-01): the same fixes at shapes no rule, constant or table row was fitted on.
LLAMA_H2 = dict(bwd=True, hidden=2048, heads=16, kv_heads=16, seq=1024, batch=4, layers=2)
BLOCK_H2 = dict(B=1, H=16, S=8192, D=64, bwd=True)
GQA_MASK_H2 = dict(backend=None, B=1, H=32, KVH=8, S=4096, D=128, bwd=True, kv_layout="gqa")
FP32_H2 = dict(backend=None, B=4, H=8, S=1024, D=128, bwd=True)
GQA_DEC_H2 = dict(backend=None, B=4, H=32, KVH=4, S=16384, Sq=1, causal=False, bwd=False)
RUNS += [
    Run("llama_eager_h2", "heldout2", W.build_hf_llama, dict(attn="eager", **LLAMA_H2)),
    Run("llama_sdpa_h2", "heldout2", W.build_hf_llama, dict(attn="sdpa", **LLAMA_H2)),
    Run("block_efficient_h2", "heldout2", R.build_block, dict(backend="efficient", **BLOCK_H2)),
    Run("block_cudnn_h2", "heldout2", R.build_block, dict(backend="cudnn", **BLOCK_H2)),
    Run("gqa_float_mask_h2", "heldout2", R.build_sdpa_core, dict(mask="additive_causal", **GQA_MASK_H2)),
    Run("gqa_is_causal_h2", "heldout2", R.build_sdpa_core, dict(**GQA_MASK_H2)),
    Run(
        "block_fp32_h2", "heldout2", R.build_block, dict(backend=None, B=4, H=8, S=1024, D=128, bwd=True, dtype="fp32")
    ),
    Run(
        "block_bf16_h2", "heldout2", R.build_block, dict(backend=None, B=4, H=8, S=1024, D=128, bwd=True, dtype="bf16")
    ),
    Run("decode_repeat_kv_h2", "heldout2", R.build_sdpa_core, dict(kv_layout="repeat_kv", **GQA_DEC_H2)),
    Run("decode_enable_gqa_h2", "heldout2", R.build_sdpa_core, dict(kv_layout="gqa", **GQA_DEC_H2)),
    Run("headdim60_h2", "heldout2", R.build_block, dict(backend=None, D=60, **HD)),
    Run("headdim60_pad64_h2", "heldout2", R.build_block, dict(backend=None, D=60, pad_to=64, **HD)),
    # the fix fuse_attention names for T5 (after the first recording): the bias made contiguous
    Run("t5_eager_h3", "heldout3", R.build_t5, dict(attn="eager", bwd=True)),
    Run("t5_sdpa_contiguous_bias_h3", "heldout3", R.build_t5, dict(attn="sdpa", bwd=True, contiguous_bias=True)),
]
# Fourth held-out set (group "heldout4", 2026-12-02), written before the backend table was rebuilt from the
# measured sweep (validation/backend_sweep.py): shapes between the sweep's grid points (head dims 70/72 and
# 48/50/56, S 768 and 3072, T5 at other lengths), so the table's interpolation is what they check
HD4 = dict(B=4, H=12, S=1024, bwd=True)
HD4_INFER = dict(B=8, H=8, S=768, bwd=False)
T5_H4 = dict(batch=8, enc_len=256, dec_len=64, bwd=True)
BLOCK_H4 = dict(B=2, H=16, S=3072, D=96, bwd=True)
RUNS += [
    Run("headdim70_h4", "heldout4", R.build_block, dict(backend=None, D=70, **HD4)),
    Run("headdim70_pad72_h4", "heldout4", R.build_block, dict(backend=None, D=70, pad_to=72, **HD4)),
    Run("headdim50_h4", "heldout4", R.build_block, dict(backend=None, D=50, **HD4_INFER)),
    Run("headdim50_pad56_h4", "heldout4", R.build_block, dict(backend=None, D=50, pad_to=56, **HD4_INFER)),
    Run("t5_eager_h4", "heldout4", R.build_t5, dict(attn="eager", **T5_H4)),
    Run("t5_sdpa_contiguous_bias_h4", "heldout4", R.build_t5, dict(attn="sdpa", contiguous_bias=True, **T5_H4)),
    Run("block_efficient_h4", "heldout4", R.build_block, dict(backend="efficient", **BLOCK_H4)),
    Run("block_flash_h4", "heldout4", R.build_block, dict(backend="flash", **BLOCK_H4)),
    Run("block_fp32_h4", "heldout4", R.build_block, dict(backend=None, B=8, H=8, S=512, D=64, bwd=True, dtype="fp32")),
    Run("block_bf16_h4", "heldout4", R.build_block, dict(backend=None, B=8, H=8, S=512, D=64, bwd=True, dtype="bf16")),
]
# Fifth held-out set (group "heldout5", 2026-12-02), written after the fourth was read and before the second
# sweep (backend_sweep.py --grid 2) was run: the head-dim, T5 and backend fixes at shapes neither sweep has
LLAMA_H5 = dict(bwd=True, hidden=1536, heads=12, kv_heads=4, seq=1536, batch=2, layers=2)
T5_H5 = dict(batch=2, enc_len=384, dec_len=96, bwd=True)
BLOCK_H5 = dict(B=3, H=16, S=1536, D=80, bwd=True)
RUNS += [
    Run("headdim36_h5", "heldout5", R.build_block, dict(backend=None, D=36, B=2, H=24, S=1536, bwd=True)),
    Run(
        "headdim36_pad40_h5",
        "heldout5",
        R.build_block,
        dict(backend=None, D=36, pad_to=40, B=2, H=24, S=1536, bwd=True),
    ),
    Run("headdim90_h5", "heldout5", R.build_block, dict(backend=None, D=90, B=4, H=8, S=2048, bwd=True)),
    Run(
        "headdim90_pad96_h5", "heldout5", R.build_block, dict(backend=None, D=90, pad_to=96, B=4, H=8, S=2048, bwd=True)
    ),
    Run("t5_eager_h5", "heldout5", R.build_t5, dict(attn="eager", **T5_H5)),
    Run("t5_sdpa_contiguous_bias_h5", "heldout5", R.build_t5, dict(attn="sdpa", contiguous_bias=True, **T5_H5)),
    Run("block_efficient_h5", "heldout5", R.build_block, dict(backend="efficient", **BLOCK_H5)),
    Run("block_cudnn_h5", "heldout5", R.build_block, dict(backend="cudnn", **BLOCK_H5)),
    Run("llama_eager_h5", "heldout5", W.build_hf_llama, dict(attn="eager", **LLAMA_H5)),
    Run("llama_sdpa_h5", "heldout5", W.build_hf_llama, dict(attn="sdpa", **LLAMA_H5)),
]
# Sixth held-out set (group "heldout6", 2026-12-02), written after every change of the day and before the
# third sweep (backend_sweep.py --grid 3) was recorded: the rules at shapes no set had
LLAMA_H6 = dict(bwd=True, hidden=2560, heads=20, kv_heads=4, seq=1024, batch=3, layers=2)
T5_H6 = dict(batch=4, enc_len=512, dec_len=64, bwd=True)
BLOCK_H6 = dict(B=1, H=16, S=6144, D=64, bwd=True)
HD6 = dict(B=3, H=16, S=2560, bwd=True)
HD6_INFER = dict(B=2, H=12, S=3072, bwd=False)
RUNS += [
    Run("llama_eager_h6", "heldout6", W.build_hf_llama, dict(attn="eager", **LLAMA_H6)),
    Run("llama_sdpa_h6", "heldout6", W.build_hf_llama, dict(attn="sdpa", **LLAMA_H6)),
    Run("headdim44_h6", "heldout6", R.build_block, dict(backend=None, D=44, **HD6)),
    Run("headdim44_pad48_h6", "heldout6", R.build_block, dict(backend=None, D=44, pad_to=48, **HD6)),
    Run("headdim114_h6", "heldout6", R.build_block, dict(backend=None, D=114, **HD6_INFER)),
    Run("headdim114_pad120_h6", "heldout6", R.build_block, dict(backend=None, D=114, pad_to=120, **HD6_INFER)),
    Run("t5_eager_h6", "heldout6", R.build_t5, dict(attn="eager", **T5_H6)),
    Run("t5_sdpa_contiguous_bias_h6", "heldout6", R.build_t5, dict(attn="sdpa", contiguous_bias=True, **T5_H6)),
    Run("block_efficient_h6", "heldout6", R.build_block, dict(backend="efficient", **BLOCK_H6)),
    Run("block_flash_h6", "heldout6", R.build_block, dict(backend="flash", **BLOCK_H6)),
    Run("block_fp32_h6", "heldout6", R.build_block, dict(backend=None, B=2, H=8, S=2048, D=96, bwd=True, dtype="fp32")),
    Run("block_bf16_h6", "heldout6", R.build_block, dict(backend=None, B=2, H=8, S=2048, D=96, bwd=True, dtype="bf16")),
    Run("dropout_train_infer_h6", "heldout6", build_dropout, dict(train=True, B=2, H=12, S=2048, D=64)),
    Run("dropout_eval_infer_h6", "heldout6", build_dropout, dict(train=False, B=2, H=12, S=2048, D=64)),
]
# Seventh held-out set (group "heldout7", 2026-12-02, second session), written after fuse_attention learned
# the bias's fix-side costs and the backend rates whole tiles: every rule at shapes no set had, lengths that
# are no multiple of the kernels' tiles, and the decode pairs three times over (the default shapes again, the
# 4-layer reference shapes of decode_graph_eager, and new ones) to see how the profiler's cost per op moves
# within one session
LLAMA_H7 = dict(bwd=True, hidden=1536, heads=12, kv_heads=4, seq=1536, batch=2, layers=2)
T5_H7 = dict(batch=3, enc_len=320, dec_len=80, bwd=True)
BLOCK_H7 = dict(B=2, H=12, S=3000, D=128, bwd=True)
HD7 = dict(B=2, H=16, S=2048, bwd=True)
DEC_REF = dict(layers=4)  # the shapes of tests/data/modern/decode_graph_eager
DEC_H7 = dict(layers=3, kv_heads=8, max_len=2048, batch=4)
RUNS += [
    Run("decode_eager_rep_h7", "heldout7", R.build_decode_step, dict(mode="eager")),
    Run("decode_cuda_graph_rep_h7", "heldout7", R.build_decode_step, dict(mode="graph")),
    Run("decode_eager_ref_h7", "heldout7", R.build_decode_step, dict(mode="eager", **DEC_REF)),
    Run("decode_cuda_graph_ref_h7", "heldout7", R.build_decode_step, dict(mode="graph", **DEC_REF)),
    Run("decode_eager_h7", "heldout7", R.build_decode_step, dict(mode="eager", **DEC_H7)),
    Run("decode_cuda_graph_h7", "heldout7", R.build_decode_step, dict(mode="graph", **DEC_H7)),
    Run("decode_compile_ro_h7", "heldout7", R.build_decode_step, dict(mode="compile_ro", **DEC_H7)),
    Run("llama_eager_h7", "heldout7", W.build_hf_llama, dict(attn="eager", **LLAMA_H7)),
    Run("llama_sdpa_h7", "heldout7", W.build_hf_llama, dict(attn="sdpa", **LLAMA_H7)),
    Run("t5_eager_h7", "heldout7", R.build_t5, dict(attn="eager", **T5_H7)),
    Run("t5_sdpa_contiguous_bias_h7", "heldout7", R.build_t5, dict(attn="sdpa", contiguous_bias=True, **T5_H7)),
    Run("block_efficient_h7", "heldout7", R.build_block, dict(backend="efficient", **BLOCK_H7)),
    Run("block_cudnn_h7", "heldout7", R.build_block, dict(backend="cudnn", **BLOCK_H7)),
    Run("block_flash_h7", "heldout7", R.build_block, dict(backend="flash", **BLOCK_H7)),
    Run("headdim76_h7", "heldout7", R.build_block, dict(backend=None, D=76, **HD7)),
    Run("headdim76_pad80_h7", "heldout7", R.build_block, dict(backend=None, D=76, pad_to=80, **HD7)),
    Run(
        "block_fp32_h7", "heldout7", R.build_block, dict(backend=None, B=1, H=16, S=3072, D=64, bwd=True, dtype="fp32")
    ),
    Run(
        "block_bf16_h7", "heldout7", R.build_block, dict(backend=None, B=1, H=16, S=3072, D=64, bwd=True, dtype="bf16")
    ),
    Run("dropout_train_infer_h7", "heldout7", build_dropout, dict(train=True, B=3, H=16, S=1536, D=128)),
    Run("dropout_eval_infer_h7", "heldout7", build_dropout, dict(train=False, B=3, H=16, S=1536, D=128)),
]
# Eighth held-out set (group "heldout8", 2026-12-02, second session), written after launch_overhead moved to the
# trace's own profiler cost per op (fitted with heldout7's decode pairs in): decode steps at shapes no fit saw
DEC_H8A = dict(layers=6, hidden=1024, heads=8, kv_heads=2, head_dim=128, max_len=1024, batch=2)
DEC_H8B = dict(layers=1, hidden=4096, heads=32, kv_heads=8, head_dim=128, max_len=8192, batch=16)
T5_H8 = dict(batch=6, enc_len=200, dec_len=56, bwd=True)  # lengths no multiple of 64
BLOCK_H8 = dict(B=4, H=16, S=1000, D=64, bwd=True)
RUNS += [
    Run("decode_eager_rep_h8", "heldout8", R.build_decode_step, dict(mode="eager")),
    Run("decode_cuda_graph_rep_h8", "heldout8", R.build_decode_step, dict(mode="graph")),
    Run("decode_eager_h8a", "heldout8", R.build_decode_step, dict(mode="eager", **DEC_H8A)),
    Run("decode_cuda_graph_h8a", "heldout8", R.build_decode_step, dict(mode="graph", **DEC_H8A)),
    Run("decode_compile_ro_h8a", "heldout8", R.build_decode_step, dict(mode="compile_ro", **DEC_H8A)),
    Run("decode_eager_h8b", "heldout8", R.build_decode_step, dict(mode="eager", **DEC_H8B)),
    Run("decode_cuda_graph_h8b", "heldout8", R.build_decode_step, dict(mode="graph", **DEC_H8B)),
    Run("t5_eager_h8", "heldout8", R.build_t5, dict(attn="eager", **T5_H8)),
    Run("t5_sdpa_contiguous_bias_h8", "heldout8", R.build_t5, dict(attn="sdpa", contiguous_bias=True, **T5_H8)),
    Run("block_efficient_h8", "heldout8", R.build_block, dict(backend="efficient", **BLOCK_H8)),
    Run("block_flash_h8", "heldout8", R.build_block, dict(backend="flash", **BLOCK_H8)),
]
RUN_BY_NAME = {r.name: r for r in RUNS}

# (pair, rule, problem run, fix run, notes)
PAIRS = [
    ("llama_eager_to_sdpa", "fused_attention", "llama_eager", "llama_sdpa", "HF Llama 2 layers fwd+bwd"),
    (
        "t5_eager_to_sdpa",
        "fused_attention (must not fire / predicts no gain)",
        "t5_eager",
        "t5_sdpa",
        "float relative-position bias: SDPA may be SLOWER (saving may be negative; that is the point)",
    ),
    ("memeff_to_flash", "slow_backend", "block_efficient", "block_flash", "training step S4096 D128 bf16"),
    ("memeff_to_cudnn", "slow_backend", "block_efficient", "block_cudnn", "training step S4096 D128 bf16"),
    (
        "math_fallback_to_flash",
        "math_fallback",
        "gqa_float_mask_math",
        "gqa_is_causal_flash",
        "GQA + float additive causal mask: flash takes no mask, mem-efficient no GQA -> math; fix: is_causal=True",
    ),
    ("decode_eager_to_cuda_graph", "launch_overhead", "decode_eager", "decode_cuda_graph", "torch.cuda.graph replay"),
    (
        "decode_eager_to_compile_ro",
        "launch_overhead",
        "decode_eager",
        "decode_compile_ro",
        'torch.compile(mode="reduce-overhead")',
    ),
    ("fp32_to_bf16", "dtype", "block_fp32", "block_bf16", "fp32 picks mem-efficient/math, bf16 flash"),
    ("decode_repeat_kv_to_gqa", "repeat_kv", "decode_repeat_kv", "decode_enable_gqa", "decode q1 KV8192"),
    ("prefill_repeat_kv_to_gqa", "repeat_kv", "prefill_repeat_kv", "prefill_enable_gqa", "prefill S4096 causal"),
    ("headdim100_to_104", "head_dim_alignment", "headdim100", "headdim100_pad104", "zero-pad D to 104, slice back"),
    ("dropout_train_to_eval", "dropout_in_inference", "dropout_train_infer", "dropout_eval_infer", "no_grad fwd"),
    (
        "video_spatial_temporal",
        "decode_kv_heads (premise absent); sites with two bounds",
        "video_spatial_temporal",
        None,
        "16-frame temporal attention in training: not decode; no fix run",
    ),
    ("ffn_boundary_compile", "ffn_boundary", "ffn_block_eager", "ffn_block_compiled", "torch.compile of the block"),
    (
        "causal_vs_sliding_window",
        "flops_ledger",
        "sdpa_causal_s4096",
        "sdpa_causal_swa1024_s4096",
        "ledger data, not an advice pair: useful FLOPs of a window 1024 mask",
    ),
    (
        "decode_top_left_vs_lower_right",
        "flops_ledger",
        "decode_q4_top_left",
        "decode_q4_lower_right",
        "ledger data: is_causal=True with q4 vs KV4096 is top-left (wrong for decode); "
        "lower-right sees all cached keys",
    ),
    (
        "ddp_straggler",
        "slow_backward (check overlap before blaming determinism)",
        "ddp2_straggler",
        "ddp2_balanced",
        "2-rank gloo DDP on one GPU; rank 1's attention forced to the math backend",
    ),
]

PAIRS += [
    ("llama_eager_to_sdpa_h2", "fused_attention", "llama_eager_h2", "llama_sdpa_h2", "HF Llama MHA d2048 S1024 B4"),
    ("memeff_to_cudnn_h2", "slow_backend", "block_efficient_h2", "block_cudnn_h2", "training S8192 D64 B1"),
    (
        "gqa_mask_to_is_causal_h2",
        "slow_backend",
        "gqa_float_mask_h2",
        "gqa_is_causal_h2",
        "GQA 32/8 S4096 D128: float causal mask -> is_causal=True",
    ),
    ("fp32_to_bf16_h2", "dtype", "block_fp32_h2", "block_bf16_h2", "block S1024 D128 B4 H8"),
    ("decode_repeat_kv_to_gqa_h2", "repeat_kv", "decode_repeat_kv_h2", "decode_enable_gqa_h2", "decode KV16384 32/4"),
    ("headdim60_to_64_h2", "head_dim_alignment", "headdim60_h2", "headdim60_pad64_h2", "zero-pad D 60 to 64"),
    (
        "t5_eager_to_sdpa_contiguous_bias_h3",
        "fused_attention",
        "t5_eager_h3",
        "t5_sdpa_contiguous_bias_h3",
        "the fix fuse_attention names: SDPA with the learned bias made contiguous (mem-efficient, not math)",
    ),
    ("headdim70_to_72_h4", "head_dim_alignment", "headdim70_h4", "headdim70_pad72_h4", "B4 H12 S1024 fwd+bwd"),
    ("headdim50_to_56_h4", "head_dim_alignment", "headdim50_h4", "headdim50_pad56_h4", "B8 H8 S768 inference"),
    (
        "t5_eager_to_sdpa_contiguous_bias_h4",
        "fused_attention",
        "t5_eager_h4",
        "t5_sdpa_contiguous_bias_h4",
        "T5 batch 8, encoder 256, decoder 64, fwd+bwd: SDPA with the bias made contiguous",
    ),
    ("memeff_to_flash_h4", "slow_backend", "block_efficient_h4", "block_flash_h4", "block S3072 D96 B2 H16"),
    ("fp32_to_bf16_h4", "dtype", "block_fp32_h4", "block_bf16_h4", "block S512 D64 B8 H8"),
    ("headdim36_to_40_h5", "head_dim_alignment", "headdim36_h5", "headdim36_pad40_h5", "B2 H24 S1536 fwd+bwd"),
    ("headdim90_to_96_h5", "head_dim_alignment", "headdim90_h5", "headdim90_pad96_h5", "B4 H8 S2048 fwd+bwd"),
    (
        "t5_eager_to_sdpa_contiguous_bias_h5",
        "fused_attention",
        "t5_eager_h5",
        "t5_sdpa_contiguous_bias_h5",
        "T5 batch 2, encoder 384, decoder 96, fwd+bwd: SDPA with the bias made contiguous",
    ),
    ("memeff_to_cudnn_h5", "slow_backend", "block_efficient_h5", "block_cudnn_h5", "block S1536 D80 B3 H16"),
    ("llama_eager_to_sdpa_h5", "fused_attention", "llama_eager_h5", "llama_sdpa_h5", "HF Llama d1536 12/4 S1536 B2"),
    ("llama_eager_to_sdpa_h6", "fused_attention", "llama_eager_h6", "llama_sdpa_h6", "HF Llama d2560 20/4 S1024 B3"),
    ("headdim44_to_48_h6", "head_dim_alignment", "headdim44_h6", "headdim44_pad48_h6", "B3 H16 S2560 fwd+bwd"),
    ("headdim114_to_120_h6", "head_dim_alignment", "headdim114_h6", "headdim114_pad120_h6", "B2 H12 S3072 inference"),
    (
        "t5_eager_to_sdpa_contiguous_bias_h6",
        "fused_attention",
        "t5_eager_h6",
        "t5_sdpa_contiguous_bias_h6",
        "T5 batch 4, encoder 512, decoder 64, fwd+bwd: SDPA with the bias made contiguous",
    ),
    ("memeff_to_flash_h6", "slow_backend", "block_efficient_h6", "block_flash_h6", "block S6144 D64 B1 H16"),
    ("fp32_to_bf16_h6", "dtype", "block_fp32_h6", "block_bf16_h6", "block S2048 D96 B2 H8"),
    (
        "dropout_train_to_eval_h6",
        "dropout_in_inference",
        "dropout_train_infer_h6",
        "dropout_eval_infer_h6",
        "B2 H12 S2048",
    ),
    ("llama_eager_to_sdpa_h7", "fused_attention", "llama_eager_h7", "llama_sdpa_h7", "HF Llama d1536 12/4 S1536 B2"),
    (
        "t5_eager_to_sdpa_contiguous_bias_h7",
        "fused_attention",
        "t5_eager_h7",
        "t5_sdpa_contiguous_bias_h7",
        "T5 batch 3, encoder 320, decoder 80, fwd+bwd: SDPA with the bias made contiguous",
    ),
    ("memeff_to_cudnn_h7", "slow_backend", "block_efficient_h7", "block_cudnn_h7", "block S3000 D128 B2 H12"),
    ("memeff_to_flash_h7", "slow_backend", "block_efficient_h7", "block_flash_h7", "block S3000 D128 B2 H12"),
    ("headdim76_to_80_h7", "head_dim_alignment", "headdim76_h7", "headdim76_pad80_h7", "B2 H16 S2048 fwd+bwd"),
    ("fp32_to_bf16_h7", "dtype", "block_fp32_h7", "block_bf16_h7", "block S3072 D64 B1 H16"),
    (
        "dropout_train_to_eval_h7",
        "dropout_in_inference",
        "dropout_train_infer_h7",
        "dropout_eval_infer_h7",
        "B3 H16 S1536 D128",
    ),
    (
        "decode_eager_to_cuda_graph_rep_h7",
        "launch_overhead",
        "decode_eager_rep_h7",
        "decode_cuda_graph_rep_h7",
        "the first recording's decode pair again",
    ),
    (
        "decode_eager_to_cuda_graph_ref_h7",
        "launch_overhead",
        "decode_eager_ref_h7",
        "decode_cuda_graph_ref_h7",
        "4 layers: the shapes of tests/data/modern/decode_graph_eager",
    ),
    (
        "decode_eager_to_cuda_graph_h7",
        "launch_overhead",
        "decode_eager_h7",
        "decode_cuda_graph_h7",
        "3 layers KV 8/2048 B4",
    ),
    (
        "decode_eager_to_compile_ro_h7",
        "launch_overhead",
        "decode_eager_h7",
        "decode_compile_ro_h7",
        "3 layers KV 8/2048 B4",
    ),
    (
        "decode_eager_to_cuda_graph_rep_h8",
        "launch_overhead",
        "decode_eager_rep_h8",
        "decode_cuda_graph_rep_h8",
        "the first recording's decode pair, a third session",
    ),
    (
        "decode_eager_to_cuda_graph_h8a",
        "launch_overhead",
        "decode_eager_h8a",
        "decode_cuda_graph_h8a",
        "6 layers d1024",
    ),
    (
        "decode_eager_to_compile_ro_h8a",
        "launch_overhead",
        "decode_eager_h8a",
        "decode_compile_ro_h8a",
        "6 layers d1024",
    ),
    (
        "decode_eager_to_cuda_graph_h8b",
        "launch_overhead",
        "decode_eager_h8b",
        "decode_cuda_graph_h8b",
        "1 layer d4096 B16",
    ),
    (
        "t5_eager_to_sdpa_contiguous_bias_h8",
        "fused_attention",
        "t5_eager_h8",
        "t5_sdpa_contiguous_bias_h8",
        "T5 batch 6, encoder 200, decoder 56, fwd+bwd: SDPA with the bias made contiguous",
    ),
    ("memeff_to_flash_h8", "slow_backend", "block_efficient_h8", "block_flash_h8", "block S1000 D64 B4 H16"),
]

# ---------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------


def time_steps(step, device: str, n: int = TIMED_STEPS) -> dict:
    cuda = device.startswith("cuda")
    ev, wall = [], []
    for _ in range(n):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t = time.perf_counter()
        step()
        if cuda:
            b.record()
        sync(device)
        wall.append((time.perf_counter() - t) * 1e3)
        if cuda:
            ev.append(a.elapsed_time(b))
    return dict(
        step_ms_median=statistics.median(ev) if ev else statistics.median(wall),
        step_ms_basis="CUDA events around each step" if ev else "host clock (no CUDA)",
        wall_ms_median=statistics.median(wall),
        timed_steps=n,
    )


def trace_figures(path: str, active: int) -> dict:
    """Kernel time per step, and the forward-scope attention kernel time (see the module docstring)."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f).get("traceEvents", [])
    scopes: dict[Any, list] = {}
    launch: dict[int, tuple] = {}
    kernels = []
    for e in ev:
        if e.get("ph") != "X":
            continue
        cat, a = e.get("cat"), e.get("args", {})
        if cat == "python_function" and e["name"].startswith("nn.Module:") and "Attention" in e["name"]:
            scopes.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0)))
        elif cat == "cuda_runtime" and "correlation" in a:
            launch[a["correlation"]] = (e.get("tid"), e["ts"])
        elif cat == "kernel":
            kernels.append((a.get("correlation"), e.get("dur", 0)))
    attn = 0.0
    for corr, dur in kernels:
        tid, ts = launch.get(corr, (None, None))
        if ts is not None and any(s <= ts <= t for s, t in scopes.get(tid, ())):
            attn += dur
    return dict(
        gpu_kernel_ms_per_step=sum(d for _, d in kernels) / active / 1e3,
        attention_fwd_gpu_ms_per_step=attn / active / 1e3,
        n_kernels_per_step=len(kernels) / active,
        trace_bytes=os.path.getsize(path),
    )


def record(run: Run, out: str, device: str, small: bool, info: dict) -> dict:
    t0 = time.time()
    d = os.path.join(out, run.name)
    res: dict[str, Any] = dict(run=run.name, dir=run.name, status="error", env=info)
    try:
        torch.manual_seed(0)
        assert run.builder is not None
        wl = run.builder(device, small, **run.kwargs)
        res["shapes"] = {k: v for k, v in wl.meta.items() if k not in ("keep",)}
        for _ in range(WARMUP):
            wl.step()
        sync(device)
        res["build_warmup_s"] = time.time() - t0
        res.update(time_steps(wl.step, device))
        files = profile_steps(wl.step, d, run.name, device, active=ACTIVE)
        res["trace_files"] = [os.path.relpath(f, out) for f in files]
        if files and device.startswith("cuda"):
            res.update(trace_figures(files[-1], ACTIVE))
        res["status"] = "ok"
        del wl
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:1500]
        res["traceback"] = traceback.format_exc()[-3000:]
    finally:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    res["wall_s"] = time.time() - t0
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(
        f"[twins] {run.name}: {res['status']} step={res.get('step_ms_median', float('nan')):.3f}ms "
        f"wall={res['wall_s']:.1f}s {res.get('error', '')[:200]}",
        flush=True,
    )
    return res


def record_ddp(run: Run, out: str, device: str, small: bool, timeout: float) -> dict:
    t0 = time.time()
    cmd = [sys.executable, os.path.join(HERE, "ddp_trace.py"), "--out", out, "--run", run.name, "--steps", "2"]
    cmd += ["--time-steps", str(TIMED_STEPS)]
    if "slow_rank" in run.kwargs:
        cmd += ["--slow-rank", str(run.kwargs["slow_rank"])]
    if small or not device.startswith("cuda"):
        cmd += ["--small", "--device", "cpu"]
    res: dict[str, Any] = dict(run=run.name, dir=run.name, status="error", cmd=cmd)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        res["rc"], res["log_tail"] = p.returncode, (p.stdout + p.stderr)[-2000:]
        timing = {}
        for r in range(2):
            tp = os.path.join(out, f"{run.name}_timing_rank{r}.json")
            if os.path.exists(tp):
                timing[f"rank{r}"] = json.load(open(tp))
        res["ranks"] = timing
        if timing:
            res["step_ms_median"] = max(t["step_ms_median"] for t in timing.values())
            res["step_ms_basis"] = "max over ranks of each rank's median CUDA-event step time"
        res["status"] = "ok" if p.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        res["error"] = f"timeout after {timeout:.0f}s"
    res["wall_s"] = time.time() - t0
    os.makedirs(os.path.join(out, run.name), exist_ok=True)
    with open(os.path.join(out, run.name, "result.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(f"[twins] {run.name}: {res['status']} step={res.get('step_ms_median')} wall={res['wall_s']:.1f}s", flush=True)
    return res


def manifest(out: str) -> dict:
    def load(run):
        if run is None:
            return None
        p = os.path.join(out, run, "result.json")
        if not os.path.exists(p):
            return {"dir": run, "status": "missing"}
        r = json.load(open(p))
        keep = (
            "dir",
            "status",
            "step_ms_median",
            "step_ms_basis",
            "wall_ms_median",
            "gpu_kernel_ms_per_step",
            "attention_fwd_gpu_ms_per_step",
            "n_kernels_per_step",
            "trace_files",
            "error",
            "ranks",
        )
        return {k: r[k] for k in keep if k in r} | {"shapes": r.get("shapes")}

    pairs = {}
    for name, rule, prob, fix, notes in PAIRS:
        p, f = load(prob), load(fix)
        saving = None
        if p and f and p.get("step_ms_median") is not None and f.get("step_ms_median") is not None:
            saving = p["step_ms_median"] - f["step_ms_median"]
        gpu_saving = None
        if p and f and p.get("gpu_kernel_ms_per_step") is not None and f.get("gpu_kernel_ms_per_step") is not None:
            gpu_saving = p["gpu_kernel_ms_per_step"] - f["gpu_kernel_ms_per_step"]
        pairs[name] = dict(
            rule=rule,
            problem=p,
            fix=f,
            measured_saving_ms_per_step=saving,
            measured_gpu_kernel_saving_ms_per_step=gpu_saving,
            notes=notes,
            shapes=(p or {}).get("shapes"),
        )
    m = dict(
        basis=dict(
            step_ms_median=f"median of {TIMED_STEPS} unprofiled steps after {WARMUP} warm-up steps",
            traces=f"torch.profiler, 1 warm-up + {ACTIVE} active steps, record_shapes, with_stack",
            measured_saving_ms_per_step="problem.step_ms_median - fix.step_ms_median (negative: the fix is slower)",
        ),
        pairs=pairs,
    )
    with open(os.path.join(out, "manifest.json"), "w") as fo:
        json.dump(m, fo, indent=1, default=str)
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--group",
        default="",
        help="eager | compile | ddp | heldout2 | heldout3 | heldout4 | heldout5 | heldout6 | heldout7 | heldout8",
    )
    ap.add_argument("--runs", default="", help="comma list of run names (debug)")
    ap.add_argument("--deadline", type=float, default=0.0, help="unix time after which no run is started")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--manifest", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.manifest:
        m = manifest(a.out)
        for k, v in m["pairs"].items():
            s = v["measured_saving_ms_per_step"]
            print(f"[twins] {k:34s} saving/step={'-' if s is None else f'{s:.3f} ms'}")
        return 0
    want = [x for x in a.runs.split(",") if x]
    sel = [r for r in RUNS if (not a.group or r.group == a.group) and (not want or r.name in want)]
    info = env_info()
    for r in sel:
        if a.deadline and time.time() > a.deadline:
            print(f"[twins] {r.name}: skipped (deadline)", flush=True)
            continue
        if r.group == "ddp":
            left = (a.deadline - time.time()) if a.deadline else 60
            record_ddp(r, a.out, a.device, a.small, max(10, left))
        else:
            record(r, a.out, a.device, a.small, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
