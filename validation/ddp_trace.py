"""Two-rank DDP training of a small GPT with SDPA attention, one torch.profiler trace per rank (issue #13 test data).

Both ranks share ONE GPU (NCCL refuses two ranks on one device), so the process group is gloo: gradient
all-reduces go through host copies, not NCCL kernels.  ``tensorboard_trace_handler`` writes
``OUT/<run>/rank<R>.<ts>.pt.trace.json.gz`` with ``distributedInfo`` (rank, world_size, backend) in each file.

    python3 validation/ddp_trace.py --out DIR [--steps 2] [--world 2] [--slow-rank R] [--time-steps N]
        [--small --device cpu]

``--slow-rank R`` makes a straggler (rank R's attention on SDPA's math backend); ``--time-steps N`` then times N
unprofiled steps per rank (CUDA events) into ``OUT/<run>_timing_rank<R>.json``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gpt_model import GPT  # noqa: E402  (the model of every job recording)

from trace_workloads import profile_steps, step_times_ms, sync  # noqa: E402


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    dev = torch.device(a.device)
    torch.manual_seed(rank)
    vocab, seq, d, h, layers, batch = (8192, 1024, 768, 12, 4, 4) if not a.small else (64, 32, 32, 2, 2, 2)
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = GPT(vocab, seq, d, h, layers, slow=rank == a.slow_rank).to(dev)
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
    sync(str(dev))
    # the ranks share the run's folder: none of them clears it
    profile_steps(step, os.path.join(a.out, a.run), f"rank{rank}", str(dev), active=a.steps, clear=False)
    if a.time_steps:
        import json
        import statistics

        ms = step_times_ms(step, a.time_steps, str(dev))
        with open(os.path.join(a.out, f"{a.run}_timing_rank{rank}.json"), "w") as f:
            json.dump(dict(rank=rank, slow=rank == a.slow_rank, step_ms_median=statistics.median(ms), steps_ms=ms), f)
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
    ap.add_argument("--slow-rank", type=int, default=-1, help="this rank's attention runs on the math backend")
    ap.add_argument("--time-steps", type=int, default=0, help="then time this many unprofiled steps per rank")
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
