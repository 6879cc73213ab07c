#!/usr/bin/env python3
"""Generate small PyTorch profiler (Kineto) traces of attention workloads.

Writes TensorBoard log-dir layout, one run per workload:

    OUT/<run>/<run>_rank0.<ts>.pt.trace.json.gz

(``torch.profiler.tensorboard_trace_handler(dir, worker_name=..., use_gzip=True)``),
profiled with ``record_shapes=True, with_stack=True`` and a schedule
(wait=1, warmup=1, active=2 for the micro-benchmarks, active=1 for training).

Runs (mirroring the team's H200 traces in shared/traces/h200/manifest.json):

  seed_mha                  nn.MultiheadAttention fp32 L128 N32 E1024
  naive_bf16_s2048_fwd      NaiveAttention (QK^T/scale/causal mask/softmax/dropout/PV/out_proj) B1 H32 S2048 D128
  sdpa_<backend>_s2048_fwd  F.scaled_dot_product_attention under sdpa_kernel(backend), B4 H16 S2048 D64 bf16 causal,
                            inside record_function("sdpa_<backend>"); backend in flash, efficient, math, cudnn
  gpt4l_sdpa_train          4-layer GPT d1024 h16 seq1024 b4, autocast bf16, AdamW, fwd+bwd, SdpaAttention
  gpt4l_naive_train         same with NaiveAttention

On a CPU (``--device cpu``, the default without a GPU) every shape is shrunk
so the whole set finishes in well under a minute on 2 cores, and the backends
that need CUDA (efficient, cudnn) are skipped.

    python3 sample_traces/generate.py --out /tmp/traces [--device cpu|cuda] [--only NAME[,NAME]]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------


class NaiveAttention(nn.Module):
    """Explicit attention: qkv -> QK^T -> scale -> causal mask -> softmax -> dropout -> PV -> out_proj."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__()
        self.h, self.d = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = torch.matmul(att, v)
        return self.out_proj(y.transpose(1, 2).reshape(b, s, e))


class SdpaAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__()
        self.h, self.d, self.p = n_heads, d_model // n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
        return self.out_proj(y.transpose(1, 2).reshape(b, s, e))


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(0.1)
        )

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, attn_cls):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attn_cls(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, n_heads: int, n_layers: int, attn_cls):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, attn_cls) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------------------
# runs: each returns (step_fn, active_steps)
# ---------------------------------------------------------------------------

_SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
    "cudnn": "CUDNN_ATTENTION",
}


def run_seed_mha(dev, cpu):
    L, N, E = (128, 32, 1024) if not cpu else (64, 4, 256)
    mha = nn.MultiheadAttention(E, 16, dropout=0.0).to(dev)  # fp32, (L, N, E) layout
    x = torch.randn(L, N, E, device=dev)

    def step():
        with torch.no_grad():
            return mha(x, x, x)

    return step, 2


def run_naive_bf16_s2048_fwd(dev, cpu):
    B, H, S, D = (1, 32, 2048, 128) if not cpu else (1, 4, 256, 32)
    mod = NaiveAttention(H * D, H).to(dev, torch.bfloat16).train()
    x = torch.randn(B, S, H * D, device=dev, dtype=torch.bfloat16)

    def step():
        with torch.no_grad():
            return mod(x)

    return step, 2


def make_sdpa_run(backend):
    def run(dev, cpu):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        B, H, S, D = (4, 16, 2048, 64) if not cpu else (1, 4, 256, 32)
        q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
        be = getattr(SDPBackend, _SDPA_BACKENDS[backend])

        def step():
            with torch.no_grad(), sdpa_kernel(be), torch.profiler.record_function(f"sdpa_{backend}"):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return step, 2

    return run


def make_gpt_run(attn_cls):
    def run(dev, cpu):
        vocab, seq, d, h, layers, b = (8192, 1024, 1024, 16, 4, 4) if not cpu else (512, 128, 128, 4, 4, 2)
        model = GPT(vocab, seq, d, h, layers, attn_cls).to(dev).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        idx = torch.randint(0, vocab, (b, seq), device=dev)
        tgt = torch.randint(0, vocab, (b, seq), device=dev)
        dev_type = "cuda" if str(dev).startswith("cuda") else "cpu"

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev_type, dtype=torch.bfloat16):
                logits = model(idx)
                loss = F.cross_entropy(logits.view(-1, vocab).float(), tgt.view(-1))
            loss.backward()
            opt.step()
            return loss

        return step, 1

    return run


RUNS = {
    "seed_mha": (run_seed_mha, False),
    "naive_bf16_s2048_fwd": (run_naive_bf16_s2048_fwd, False),
    "sdpa_flash_s2048_fwd": (make_sdpa_run("flash"), False),
    "sdpa_efficient_s2048_fwd": (make_sdpa_run("efficient"), True),
    "sdpa_math_s2048_fwd": (make_sdpa_run("math"), False),
    "sdpa_cudnn_s2048_fwd": (make_sdpa_run("cudnn"), True),
    "gpt4l_sdpa_train": (make_gpt_run(SdpaAttention), False),
    "gpt4l_naive_train": (make_gpt_run(NaiveAttention), False),
}


def sync(dev):
    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def profile_run(name: str, out: str, dev: str) -> str:
    fn, _ = RUNS[name]
    cpu = not str(dev).startswith("cuda")
    step, active = fn(dev, cpu)
    step()  # build / first-call work outside the profiler
    sync(dev)
    run_dir = os.path.join(out, name)
    os.makedirs(run_dir, exist_ok=True)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if not cpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(run_dir, worker_name=f"{name}_rank0", use_gzip=True),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(2 + active):
            step()
            sync(dev)
            prof.step()
    files = sorted(glob.glob(os.path.join(run_dir, "*.pt.trace.json.gz")), key=os.path.getmtime)
    return files[-1] if files else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="TensorBoard log dir to write runs into")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but no CUDA device is available")
    names = [n for n in a.only.split(",") if n] or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {unknown}; choose from {list(RUNS)}")
    torch.manual_seed(0)
    if a.device == "cpu":
        torch.set_num_threads(min(2, torch.get_num_threads()))
    failed = 0
    for n in names:
        if RUNS[n][1] and a.device != "cuda":
            print(f"{n}: skipped (backend needs CUDA)")
            continue
        t = time.time()
        try:
            f = profile_run(n, a.out, a.device)
            size = os.path.getsize(f) if f else 0
            print(
                f"{n}: {os.path.relpath(f, a.out) if f else '(no trace written)'} {size / 1024:.0f} KiB "
                f"{time.time() - t:.1f}s"
            )
        except Exception as e:  # keep going; report at the end
            failed += 1
            print(f"{n}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        with contextlib.suppress(Exception):
            if a.device == "cuda":
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
