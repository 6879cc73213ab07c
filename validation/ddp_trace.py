"""Two-rank DDP training of a small GPT with SDPA attention, one torch.profiler trace per rank (issue #13 test data).

Both ranks share ONE GPU (NCCL refuses two ranks on one device), so the process group is gloo: gradient
all-reduces go through host copies, not NCCL kernels.  ``tensorboard_trace_handler`` writes
``OUT/<run>/rank<R>.<ts>.pt.trace.json.gz`` with ``distributedInfo`` (rank, world_size, backend) in each file.

    python3 validation/ddp_trace.py --out DIR [--steps 2] [--world 2] [--small --device cpu]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, h)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, h: int, layers: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    dev = torch.device(a.device)
    torch.manual_seed(rank)
    vocab, seq, d, h, layers, batch = (8192, 1024, 768, 12, 4, 4) if not a.small else (64, 32, 32, 2, 2, 2)
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = GPT(vocab, seq, d, h, layers).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    idx = torch.randint(0, vocab, (batch, seq), device=dev)

    def step() -> None:
        with torch.autocast(dev.type, dtype=dt, enabled=dev.type == "cuda"):
            logits = ddp(idx)
            loss = F.cross_entropy(logits.view(-1, vocab).float(), idx.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else []
    )
    tdir = os.path.join(a.out, a.run)
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=a.steps, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(tdir, worker_name=f"rank{rank}", use_gzip=True),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(a.steps + 1):
            step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    print(f"[ddp] rank {rank}: done", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", default="ddp2_gpt_sdpa")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.time()
    torch.multiprocessing.spawn(worker, args=(a, port), nprocs=a.world, join=True)
    print(
        f"[ddp] {a.world} ranks, {a.steps} profiled steps, {time.time() - t:.1f}s -> {os.path.join(a.out, a.run)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
