"""A real multi-GPU job for the Ranks view and the advice (issue #24): one process per GPU, NCCL, and a
torch.profiler trace per rank.

Launched by torchrun, one piece per launch (validation/run_device_nccl.sh runs them all)::

    python3 -m torch.distributed.run --standalone --nproc-per-node=N validation/nccl_job.py \\
        --piece ddp|fsdp|tp|straggler --out DIR [--name NAME] [--small] [--steps 2] [--layers 2]

Pieces, all training the small GPT of validation/gpt_model.py (SDPA attention, bf16 autocast on CUDA):

``ddp``        DistributedDataParallel; small gradient buckets, so all-reduces start early in the backward
               and overlap it
``fsdp``       FSDP2: ``torch.distributed.fsdp.fully_shard`` on each block and on the model (bf16 params,
               fp32 gradient reduction on CUDA): all-gathers in the forward and backward, reduce-scatters in
               the backward
``tp``         tensor-parallel attention and MLP over all ranks (``torch.distributed.tensor.parallel``:
               ColwiseParallel q/k/v and the MLP's first linear, RowwiseParallel o and its second)
``straggler``  the DDP job with one rank (``--straggler-rank``, default the last) made slow on purpose: its
               sequence is ``--straggler-seq-factor`` times longer (its attention, quadratic in the
               sequence, slows most) and it sleeps ``--straggler-sleep-ms`` before each backward (the others'
               all-reduces then wait for it inside their own backward)

Each rank profiles ``--steps`` steps after two warm-up steps and one profiler warm-up step (record_shapes,
with_stack; validation/trace_workloads.profile_steps) into ``DIR/<run>/rank<R>.<ts>.pt.trace.json.gz``
(``tensorboard_trace_handler``, with ``distributedInfo``), then times ``--time-steps`` unprofiled steps (CUDA
events). Rank 0 writes what the run was into ``DIR/manifest.json`` (``runs[<run>]``: the piece, world size,
backend, versions, the model's shapes, every rank's device, sequence, straggler settings, trace files and step
times, and ``expected_stragglers``). ``--mark-failed RC --launch-log FILE`` (no torchrun) records a launch that
ended badly.

On CUDA the backend is NCCL (one GPU per process, ``LOCAL_RANK``); without CUDA (``--device cpu``, or no GPU)
it is gloo, for a dry run on CPUs: such traces have no GPU activity, so they test the job's plumbing only.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1): a
program using it can take a shared host's GPUs out of service. This script sets the three before torch is
imported and refuses to run (exit 2) when one of them is set to anything else, or NCCL_ALGO asks for NVLS.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Optional

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def multicast_problem(env: Mapping[str, str]) -> Optional[str]:
    """What in ``env`` would turn NVLink multicast on, or None."""
    bad = [f"{k}={env[k]!r} (must be {v!r})" for k, v in MULTICAST_OFF.items() if k in env and env[k] != v]
    if "nvls" in env.get("NCCL_ALGO", "").lower():
        bad.append(f"NCCL_ALGO={env['NCCL_ALGO']!r} names NVLS")
    return "; ".join(bad) or None


def multicast_off(env: MutableMapping[str, str]) -> None:
    """Set the three variables in ``env``, or exit 2 with one line when one is overridden."""
    problem = multicast_problem(env)
    if problem:
        print(f"error: nccl_job.py: NVLink multicast must stay off: {problem}", file=sys.stderr)
        sys.exit(2)
    env.update(MULTICAST_OFF)


if __name__ == "__main__":
    multicast_off(os.environ)  # before torch (and NCCL, NVSHMEM) is loaded

import argparse  # noqa: E402
import datetime  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gpt_model import GPT  # noqa: E402

from trace_workloads import profile_steps, step_times_ms, sync  # noqa: E402

PIECES = ("ddp", "fsdp", "tp", "straggler")
WARMUP_STEPS = 2
DDP_BUCKET_MB = 4  # small buckets: the first all-reduces start while most of the backward is still to run
HEAD_DIM = 64  # 8 with --small


def model_shape(world: int, small: bool, layers: int) -> dict:
    """The model of every piece: 16 heads (4 with --small) when the world size divides them, else the nearest
    multiple of the world size (tensor parallelism gives each rank whole heads)."""
    heads, hd = (4, 8) if small else (16, HEAD_DIM)
    if heads % world:
        heads = world * max(1, round(heads / world))
    vocab, seq, batch = (64, 32, 2) if small else (8192, 1024, 4)
    return dict(vocab=vocab, seq=seq, d=heads * hd, heads=heads, head_dim=hd, layers=layers, batch=batch)


def versions(dev: torch.device) -> dict:
    out = {"torch": torch.__version__, "python": sys.version.split()[0], "cuda_runtime": torch.version.cuda}
    if dev.type == "cuda":
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        out["cudnn"] = torch.backends.cudnn.version()
    return out


def build(piece: str, a: argparse.Namespace, shape: dict, dev: torch.device, rank: int, world: int):
    """The model wrapped for ``piece`` and its optimizer."""
    torch.manual_seed(0)  # the same initial weights on every rank (FSDP2 and TP shard each rank's full copy)
    seq_max = shape["seq"] * (a.straggler_seq_factor if piece == "straggler" else 1)
    model = GPT(shape["vocab"], seq_max, shape["d"], shape["heads"], shape["layers"], split_qkv=True).to(dev)
    info: dict = {}
    if piece in ("ddp", "straggler"):
        kw = dict(device_ids=[dev.index]) if dev.type == "cuda" else {}
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=DDP_BUCKET_MB, **kw)
        info["bucket_cap_mb"] = DDP_BUCKET_MB
    elif piece == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(dev.type, (world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if a.bf16 else None
        kw = dict(mesh=mesh, mp_policy=mp) if mp else dict(mesh=mesh)
        for blk in model.h:
            fully_shard(blk, **kw)
        fully_shard(model, **kw)
        info["fsdp"] = "fully_shard per block and on the root" + (", bf16 params, fp32 reduce" if mp else "")
    elif piece == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(dev.type, (world,))
        plan = {
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(),
            "mlp.0": ColwiseParallel(),
            "mlp.2": RowwiseParallel(),
        }
        for blk in model.h:
            parallelize_module(blk, mesh, plan)
        info["tp_plan"] = {k: type(v).__name__ for k, v in plan.items()}
        info["heads_per_rank"] = shape["heads"] // world
    # tensor parallelism leaves the norms, embeddings and head as plain tensors beside the DTensor shards: the
    # fused multi-tensor (foreach) update, CUDA's default, refuses such a mix
    # (stated for the others too, so that a CPU dry run takes CUDA's path)
    foreach = piece != "tp"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=foreach)
    info["optimizer"] = "AdamW" + (" (foreach=False)" if piece == "tp" else "")
    return model, opt, info


def make_step(model, opt, idx: torch.Tensor, vocab: int, dev: torch.device, autocast: bool, sleep_s: float):
    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(idx)
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), idx.reshape(-1))
        if sleep_s:
            with torch.profiler.record_function("straggler_sleep_before_backward"):
                sync(str(dev))  # the GPU has finished the forward: it idles for the whole sleep
                time.sleep(sleep_s)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _load(path: str) -> dict:
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"schema": 1, "kind": "tb-attention-nccl-job", "issue": 24, "runs": {}}


def write_entry(out: str, run: str, entry: dict) -> None:
    """Put ``runs[run]`` into ``out/manifest.json`` (the pieces run one after the other, each rank 0 writes)."""
    path = os.path.join(out, "manifest.json")
    m = _load(path)
    m["runs"][run] = entry
    m["updated"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(m, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


def env_record() -> dict:
    keep = set(MULTICAST_OFF) | {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"}
    return {k: v for k, v in sorted(os.environ.items()) if k in keep or k.startswith("NCCL_")}


def worker(a: argparse.Namespace) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = a.device != "cpu" and torch.cuda.is_available()
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(dev)
    kw = dict(device_id=dev) if use_cuda else {}
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.pg_timeout), **kw)
    t0 = time.time()
    shape = model_shape(world, a.small, a.layers)
    straggler = a.straggler_rank if a.straggler_rank >= 0 else world - 1
    slow = a.piece == "straggler" and rank == straggler
    seq = shape["seq"] * (a.straggler_seq_factor if slow else 1)
    sleep_ms = a.straggler_sleep_ms if slow else 0.0
    a.bf16 = a.bf16 or use_cuda
    model, opt, info = build(a.piece, a, shape, dev, rank, world)
    # data: each rank its own batch, except tensor parallelism, whose ranks split one batch's work
    torch.manual_seed(1234 + (0 if a.piece == "tp" else rank))
    idx = torch.randint(0, shape["vocab"], (shape["batch"], seq), device=dev)
    step = make_step(model, opt, idx, shape["vocab"], dev, a.bf16, sleep_ms / 1e3)
    for _ in range(WARMUP_STEPS):
        step()
    sync(str(dev))
    tdir = os.path.join(a.out, a.run)
    if rank == 0:
        os.makedirs(tdir, exist_ok=True)
        for old in glob.glob(os.path.join(tdir, "*.pt.trace.json*")):
            os.remove(old)
    dist.barrier()
    tp0 = time.time()
    files = profile_steps(step, tdir, f"rank{rank}", str(dev), active=a.steps, clear=False)
    profiled_s = time.time() - tp0
    step_ms = [round(x, 3) for x in step_times_ms(step, a.time_steps, str(dev))]
    mine = sorted(os.path.basename(f) for f in files if os.path.basename(f).startswith(f"rank{rank}."))
    me = dict(
        rank=rank,
        local_rank=local,
        device=str(dev),
        device_name=torch.cuda.get_device_name(dev) if use_cuda else "cpu",
        seq=seq,
        attention_slowed=slow,
        sleep_before_backward_ms=sleep_ms,
        trace_files=mine,
        profiled_wall_s=round(profiled_s, 3),
        step_ms=step_ms,
        step_ms_median=statistics.median(step_ms) if step_ms else None,
    )
    gathered: list = [None] * world
    dist.all_gather_object(gathered, me)
    if rank == 0:
        entry = dict(
            status="ok",
            piece=a.piece,
            dir=a.run,
            world_size=world,
            backend=backend,
            device_type=dev.type,
            small=a.small,
            model=dict(shape, dtype="bf16 autocast" if a.bf16 else "fp32", attention="SDPA, causal"),
            steps_profiled=a.steps,
            warmup_steps=WARMUP_STEPS,
            profiler=dict(record_shapes=True, with_stack=True, schedule="wait=0, warmup=1, active=steps"),
            versions=versions(dev),
            env=env_record(),
            parallelism=info,
            straggler=(
                dict(
                    rank=straggler,
                    seq=shape["seq"] * a.straggler_seq_factor,
                    seq_factor=a.straggler_seq_factor,
                    sleep_before_backward_ms=a.straggler_sleep_ms,
                    why="its attention runs a longer sequence (slower attention); its sleep before the backward "
                    "makes the other ranks' all-reduces wait inside their backward",
                )
                if a.piece == "straggler"
                else None
            ),
            expected_stragglers=[straggler] if a.piece == "straggler" else [],
            ranks=gathered,
            wall_s=round(time.time() - t0, 2),
            recorded=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        )
        write_entry(a.out, a.run, entry)
    dist.barrier()
    dist.destroy_process_group()
    print(f"[nccl_job] {a.run} rank {rank}/{world} ({backend}, {dev}): {len(mine)} trace(s), {profiled_s:.1f}s")
    return 0


def mark_failed(a: argparse.Namespace) -> int:
    """Record a launch that ended with ``a.mark_failed`` (124/137: its timeout), or a piece not launched
    (``a.skipped``), in the manifest."""
    path = os.path.join(a.out, "manifest.json")
    old = _load(path)["runs"].get(a.run)
    tail = ""
    if a.log and os.path.exists(a.log):
        with open(a.log, errors="replace") as f:
            tail = f.read()[-3000:]
    rc = a.mark_failed
    if old and old.get("status") == "ok":  # the traces and manifest were written; the exit came after
        old["exit_rc"], old["exit_log_tail"] = rc, tail[-1500:]
        entry = old
    else:
        status = "skipped" if a.skipped else "timeout" if rc in (124, 137) else "error"
        entry = dict(
            status=status,
            why=a.skipped,
            rc=rc,
            piece=a.piece,
            dir=a.run,
            world_size=a.world,
            log_tail=tail,
            expected_stragglers=[],
        )
    write_entry(a.out, a.run, entry)
    print(f"[nccl_job] {a.run}: recorded {entry['status']} (rc {rc}, {a.skipped or 'launched'})")
    return 0


def parser() -> argparse.ArgumentParser:
    """The options; none may be a prefix of one of torchrun's (its parser would take it: --run did)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--piece", choices=PIECES, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", dest="run", help="the run's folder under --out (default <piece><world>_gpt_sdpa)")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--time-steps", type=int, default=3, help="unprofiled steps timed after the profile")
    ap.add_argument("--small", action="store_true", help="tiny shapes (CPU dry run)")
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto", help="cpu: gloo even with GPUs")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (FSDP2: bf16 params) on CPU too, as on CUDA")
    ap.add_argument("--straggler-rank", type=int, default=-1, help="default: the last rank")
    ap.add_argument("--straggler-seq-factor", type=int, default=2)
    ap.add_argument("--straggler-sleep-ms", type=float, default=20.0)
    ap.add_argument("--pg-timeout", type=float, default=180.0, help="seconds a collective may wait")
    ap.add_argument("--mark-failed", type=int, metavar="RC", help="record that the launch ended with RC")
    ap.add_argument("--skipped", metavar="WHY", help="record that the piece was not launched, and why")
    ap.add_argument("--launch-log", dest="log", help="with --mark-failed: the launch's log (its tail is kept)")
    ap.add_argument("--world", type=int, default=0, help="with --mark-failed/--skipped: the world size")
    return ap


def main(argv: Optional[list] = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    world = a.world or int(os.environ.get("WORLD_SIZE", 0))
    a.run = a.run or f"{a.piece}{world}_gpt_sdpa"
    os.makedirs(a.out, exist_ok=True)
    if a.mark_failed is not None or a.skipped:
        return mark_failed(a)
    if "RANK" not in os.environ:
        print("error: nccl_job.py: start it with torchrun (python3 -m torch.distributed.run)", file=sys.stderr)
        return 2
    return worker(a)


if __name__ == "__main__":
    sys.exit(main())
