#!/usr/bin/env python3
"""Profile a 12-layer GPT training loop into a real Kineto trace (for the large-trace benchmark).

The issue's reference case is "a 12-layer GPT training trace from an H200 (with shapes, stacks
and memory events) with its steps repeated 20 times (893k events, 267 MB)". This script makes the
12-layer trace; make_large_trace.py repeats its steps:

    # on a GPU machine (needs torch with CUDA; nothing else)
    python benchmarks/generate_gpt12_trace.py --out-dir /tmp/gpt12
    # anywhere
    python benchmarks/make_large_trace.py --source /tmp/gpt12/worker0.*.pt.trace.json.gz --reps 20
    python benchmarks/bench.py --trace benchmarks/_work/traces/<that file>

The model is GPT-2 small shaped (12 layers, d_model 768, 12 heads, seq 1024, vocab 50304), batch 8,
bf16 autocast, causal attention through F.scaled_dot_product_attention (``--attn naive`` writes it
out: QK^T, mask, softmax, dropout, PV), AdamW. The profiler records shapes, stacks, memory and
FLOPs over ``--active`` steps after ``--wait``/``--warmup`` steps, and tensorboard_trace_handler
writes ``worker0.<ts>.pt.trace.json[.gz]``.

It has not been run on this repo's CPU-only machines except as a smoke test (``--device cpu
--tiny``), which checks the code path, not the trace's size.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float, impl: str):
        super().__init__()
        self.n_heads, self.impl, self.dropout = n_heads, impl, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        if self.impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), p=p, training=self.training)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout, impl):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, dropout, impl)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, seq, vocab, dropout, impl):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout, impl) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--out-dir", default="gpt12_trace", help="where the trace goes (default ./gpt12_trace)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--attn", choices=("sdpa", "naive"), default="sdpa")
    ap.add_argument("--wait", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--active", type=int, default=2, help="profiled steps (default 2)")
    ap.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="smoke test: 2 layers, d_model 64, seq 64, batch 2")
    args = ap.parse_args(argv)
    if args.tiny:
        args.layers, args.d_model, args.heads, args.seq, args.batch, args.vocab = 2, 64, 4, 64, 2, 512

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(
            "CUDA is not available: run this on a GPU machine (or --device cpu --tiny to smoke-test)", file=sys.stderr
        )
        return 2
    torch.manual_seed(0)
    model = GPT(args.layers, args.d_model, args.heads, args.seq, args.vocab, args.dropout, args.attn).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=dev.type == "cuda")
    amp_dtype = torch.bfloat16
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    os.makedirs(args.out_dir, exist_ok=True)

    def batch():
        idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
        return idx, torch.roll(idx, -1, dims=1)

    def train_step():
        with record_function("train_step"):
            idx, tgt = batch()
            with torch.autocast(device_type=dev.type, dtype=amp_dtype):
                loss = model(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    # compile-free warm-up outside the profiler (cuBLAS/cuDNN handles, allocator)
    for _ in range(2):
        train_step()
    if dev.type == "cuda":
        torch.cuda.synchronize()

    total = args.wait + args.warmup + args.active
    t0 = time.time()
    with profile(
        activities=activities,
        schedule=schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(args.out_dir, worker_name="worker0", use_gzip=not args.no_gzip),
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        with_flops=True,
    ) as prof:
        for _ in range(total):
            loss = train_step()
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    files = sorted(glob.glob(os.path.join(args.out_dir, "worker0.*.pt.trace.json*")), key=os.path.getmtime)
    if not files:
        print("no trace was written", file=sys.stderr)
        return 1
    out = files[-1]
    print(
        f"loss {loss.item():.3f}; {total} steps ({args.active} profiled) in {time.time() - t0:.1f} s; "
        f"torch {torch.__version__}, {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}"
    )
    print(f"trace: {out} ({os.path.getsize(out) / 1e6:.1f} MB on disk)")
    print("next: python benchmarks/make_large_trace.py --source " + out + " --reps 20")
    return 0


if __name__ == "__main__":
    sys.exit(main())
