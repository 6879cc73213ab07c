#!/usr/bin/env python3
"""Measure SDPA's fused backends over a grid of shapes on this GPU: the rows of advice's backend table.

    python validation/backend_sweep.py OUTDIR [--budget-s 240] [--device cuda] [--small]

The first table (validation/backend_table.py, from the 2026-11-30 traces) had one shape: B4 H16 S2048,
D 64/128, causal or not, no mask tensor. Advice then predicted a call at S=512 with a learned bias, or
at head dim 104, from the rate of that one shape (issue #19's misses: T5's contiguous bias 4.2x over,
head-dim padding 1.6-1.9x over). This sweep measures what those predictions need, on the GPU:

* the base grid: S (= Sq = Sk) 256 … 8192, head dims 32 … 256, FlashAttention, mem-efficient and cuDNN,
  no mask and causal, with B·S = 16384 tokens of H 16 heads; and a small-batch grid (B·S = 2048) at
  S 512 and 2048, where the GPU is not full;
* the mask grid: a bool mask [B, 1, S, S], a float bias [1, H, S, S] and [B, H, S, S], each bias also
  requiring grad (a learned bias in training: its gradient is a backward output), on mem-efficient
  and cuDNN, D 64 and 128, S 256 … 4096.

Inputs are laid out as models give them ([B, S, H, D] viewed as [B, H, S, D]), bf16. Each pass is
timed as the traces time it: the sum of the GPU kernels (and memsets/copies) a call launches, from one
torch.profiler pass per (S, D) group with each measurement in a labelled range (3 iterations after a
warm-up). Backward is ``torch.autograd.grad`` of the forward's output (no gradient accumulation
kernels). A backend that refuses the inputs is recorded with the first line of its reason.

Writes OUTDIR/backend_sweep.json after every group (a run stopped at its budget keeps what it had).
Needs torch only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import warnings

BACKENDS = ("flash", "efficient", "cudnn")
ITERS = 3


def grid2(small: bool) -> list[dict]:
    """The second sweep (2026-12-02, after the first): batch·heads varied at each length (the first grid
    tied it to S, and a small batch leaves SMs idle: cuDNN at D72, 48 batch·heads ran 1.5x the time per
    pair of 256), short sequences (64, 128: decoder self-attention), cross-attention shapes (Sq ≠ Sk),
    and float biases with their gradient at small batches (T5-like)."""
    if small:
        return [dict(s=32, sk=64, d=16, b=2, h=2, cases=[("flash", "none")])]
    groups = []
    base = [(be, m) for be in BACKENDS for m in ("none", "causal")]
    for s in (1024, 256, 4096, 128, 2048, 512, 64):
        for bh in (48, 16, 128, 512):
            for d in (64, 128, 80):
                groups.append(dict(s=s, d=d, b=bh // 16, h=16, cases=base))
    for sq, sk in ((64, 256), (128, 512), (256, 1024), (1024, 256)):
        for bh in (64, 256):
            groups.append(dict(s=sq, sk=sk, d=64, b=bh // 16, h=16, cases=[(be, "none") for be in BACKENDS]))
    masked = [(be, m) for be in ("efficient", "cudnn") for m in ("float_1hss_grad", "float_bhss_grad", "float_bhss")]
    for s in (64, 128, 256, 512, 1024):
        for bh in (32, 128, 512):
            groups.append(dict(s=s, d=64, b=bh // 8, h=8, cases=masked))
    for sq, sk in ((64, 256), (128, 512)):
        for bh in (64, 256):
            groups.append(dict(s=sq, sk=sk, d=64, b=bh // 8, h=8, cases=masked))
    return groups


def grid3(small: bool) -> list[dict]:
    """The third sweep (2026-12-02, after the fifth held-out set was read): batch·heads varied at the head
    dims grid 2 left at one batch (32, 96, 104, 256: cuDNN D96 at S2048 ran 318 TFLOP/s at 32 batch·heads
    against 408 at 128, a trend the wave count alone does not give), and bias rows below 32 batch·heads."""
    if small:
        return [dict(s=32, d=16, b=1, h=2, cases=[("flash", "causal")])]
    groups = []
    base = [(be, m) for be in BACKENDS for m in ("none", "causal")]
    for s in (2048, 1024, 4096, 512):
        for bh in (32, 16, 64, 128):
            for d in (96, 104, 32, 256):
                groups.append(dict(s=s, d=d, b=max(1, bh // 16), h=min(16, bh), cases=base))
    masked = [(be, m) for be in ("efficient", "cudnn") for m in ("float_1hss_grad", "float_bhss_grad", "float_bhss")]
    for s in (384, 256, 512, 128):
        for bh in (8, 16):
            groups.append(dict(s=s, d=64, b=max(1, bh // 8), h=min(8, bh), cases=masked))
    return groups


def grid(small: bool) -> list[dict]:
    """The groups to measure, each (S, D, B, H) with the (backend, mask) cases run at it."""
    if small:
        return [
            dict(s=64, d=16, b=2, h=2, cases=[(be, m) for be in BACKENDS for m in ("none", "causal")]),
            dict(s=64, d=16, b=2, h=2, cases=[("efficient", m) for m in MASKS if m not in ("none", "causal")]),
        ]
    groups = []
    base = [(be, m) for be in BACKENDS for m in ("none", "causal")]
    for s in (256, 512, 1024, 2048, 4096, 8192):
        for d in (64, 128, 104, 96, 80, 32, 256):
            groups.append(dict(s=s, d=d, b=16384 // s, h=16, cases=base))
    for s in (512, 2048):  # a GPU that is not full: 2048 tokens
        for d in (64, 128):
            groups.append(dict(s=s, d=d, b=2048 // s, h=16, cases=base))
    masked = [(be, m) for be in ("efficient", "cudnn") for m in MASKS if m not in ("none", "causal")]
    for s in (512, 2048, 256, 1024, 4096):
        for d in (64, 128):
            groups.append(dict(s=s, d=d, b=max(1, 8192 // s), h=16, cases=masked))
    # the order above puts the shapes advice meets most first: a budget cut drops the rarest
    return groups


# mask kinds: (what attn_mask is, its shape as a function of B, H, S, whether it requires grad)
MASKS = {
    "none": None,
    "causal": None,
    "bool": ("bool", lambda b, h, s, sk: (b, 1, s, sk), False),
    "float_1hss": ("float", lambda b, h, s, sk: (1, h, s, sk), False),
    "float_bhss": ("float", lambda b, h, s, sk: (b, h, s, sk), False),
    "float_1hss_grad": ("float", lambda b, h, s, sk: (1, h, s, sk), True),
    "float_bhss_grad": ("float", lambda b, h, s, sk: (b, h, s, sk), True),
}


def _backend(torch, name):
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[name]


def _inputs(torch, g, dev, dt, mask):
    b, h, s, d = g["b"], g["h"], g["s"], g["d"]
    sk = g.get("sk", s)

    def t(n):  # [B, S, H, D] viewed as [B, H, S, D], as a model's projections give it
        return torch.randn(b, n, h, d, device=dev, dtype=dt).transpose(1, 2).requires_grad_(True)

    q, k, v = t(s), t(sk), t(sk)
    am = None
    spec = MASKS[mask]
    if spec is not None:
        kind, shape, grad = spec
        if kind == "bool":
            am = torch.ones(shape(b, h, s, sk), device=dev, dtype=torch.bool).tril_()
        else:
            am = (0.1 * torch.randn(shape(b, h, s, sk), device=dev, dtype=dt)).requires_grad_(grad)
    return q, k, v, am


def _runs(torch, g, dev, dt, backend, mask):
    """(forward fn, backward fn) of one case, or the reason the backend refuses it."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q, k, v, am = _inputs(torch, g, dev, dt, mask)
    be = _backend(torch, backend)
    causal = mask == "causal"  # square calls only: the grids give causal cases Sq = Sk

    def fwd():
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=am, is_causal=causal)

    ins = [x for x in (q, k, v, am) if x is not None and x.requires_grad]
    with torch.enable_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fwd()
        except RuntimeError as e:  # the reasons are warnings sdpa_kernel issued before it gave up
            return None, None, _reason(caught, e)
        go = torch.randn_like(out)

        def bwd():
            with sdpa_kernel([be]):
                return torch.autograd.grad(out, ins, go, retain_graph=True)

        try:
            bwd()
        except RuntimeError as e:
            return fwd, None, "backward: " + _reason(caught, e)
    torch.cuda.synchronize() if dev.startswith("cuda") else None
    return fwd, bwd, None


def _reason(caught, e: BaseException) -> str:
    msgs = [str(w.message) for w in caught if "because" in str(w.message)]
    return ("; ".join(" ".join(m.split()) for m in msgs) or _first_line(e))[:400]


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # sdpa_kernel's refusal lists every backend's reason: keep the requested backend's
    useful = [ln for ln in lines if "not used because" not in ln] or lines
    return (useful[0] if useful else type(e).__name__)[:300]


def _runner():
    """The replay script's runner (tb_attention_plugin/replay/runner.py: torch and the standard library
    only), loaded from its file so that the package's own dependencies need not be on the GPU machine:
    the sweep times its rows as the replay times a call (its ``profiled_kernel_times``)."""
    import importlib.util

    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tb_attention_plugin", "replay", "runner.py"
    )
    spec = importlib.util.spec_from_file_location("tb_attention_replay_runner", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure_group(torch, g, dev, dt):
    from torch.profiler import ProfilerActivity, profile, record_function

    rows, runs = [], []
    for backend, mask in g["cases"]:
        base = dict(backend=backend, mask=mask, b=g["b"], h=g["h"], sq=g["s"], sk=g.get("sk", g["s"]), d=g["d"])
        try:
            fwd, bwd, why = _runs(torch, g, dev, dt, backend, mask)
        except Exception as e:  # noqa: BLE001 - one case never ends the sweep
            fwd, bwd, why = None, None, f"{type(e).__name__}: {_first_line(e)}"
        if fwd is None:
            rows.append(dict(base, **{"pass": "forward", "refused": why}))
            continue
        if bwd is None:
            rows.append(dict(base, **{"pass": "backward", "refused": why}))
        runs.append((base, fwd, bwd))
    if not runs:
        return rows
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        for i, (_, fwd, bwd) in enumerate(runs):
            for pas, fn in (("forward", fwd), ("backward", bwd)):
                if fn is None:
                    continue
                with torch.enable_grad():
                    fn()  # warm-up (and the first call's plan building, outside the range)
                    fn()
                    torch.cuda.synchronize() if dev.startswith("cuda") else None
                    with record_function(f"sweep::{i}:{pas}"):
                        for _ in range(ITERS):
                            fn()
                        torch.cuda.synchronize() if dev.startswith("cuda") else None
    times = _runner().profiled_kernel_times(prof, ITERS, "sweep::")
    for i, (base, fwd, bwd) in enumerate(runs):
        for pas, fn in (("forward", fwd), ("backward", bwd)):
            if fn is None:
                continue
            got = times.get(f"{i}:{pas}")
            if got is None:
                rows.append(dict(base, **{"pass": pas, "refused": "no GPU activity in its range"}))
                continue
            rows.append(dict(base, **{"pass": pas, "time_us": got[0], "kernels": got[1]}))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a dry run of the control flow)")
    ap.add_argument(
        "--grid", type=int, default=1, choices=(1, 2, 3), help="which sweep's grid (see grid, grid2, grid3)"
    )
    args = ap.parse_args(argv)
    import torch

    t0 = time.time()
    os.makedirs(args.outdir, exist_ok=True)
    dev = args.device
    dt = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if dev.startswith("cuda") else None,
        "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else None,
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count if dev.startswith("cuda") else None,
        "layout": "bshd viewed as bhsd",
        "dtype": str(dt).replace("torch.", ""),
        "iters": ITERS,
    }
    out = {"env": env, "rows": [], "errors": [], "complete": False}
    path = os.path.join(args.outdir, "backend_sweep.json")
    groups = {1: grid, 2: grid2, 3: grid3}[args.grid](args.small)
    env["grid"] = args.grid
    for n, g in enumerate(groups):
        if time.time() - t0 > args.budget_s:
            out["errors"].append(f"budget reached after {n} of {len(groups)} groups")
            break
        try:
            rows = measure_group(torch, g, dev, dt)
        except Exception:  # noqa: BLE001 - a group's failure is recorded, the sweep goes on
            out["errors"].append(f"group {g['s']}x{g['d']} b{g['b']}: {traceback.format_exc()[-800:]}")
            rows = []
        for r in rows:
            r["dtype"] = env["dtype"]
        out["rows"].extend(rows)
        ok = sum(1 for r in rows if "time_us" in r)
        shape = f"S{g['s']}x{g.get('sk', g['s'])} D{g['d']} B{g['b']}"
        print(f"[sweep] {shape}: {ok} timed, {len(rows) - ok} refused ({time.time() - t0:.0f}s)")
        sys.stdout.flush()
        with open(path, "w") as f:
            json.dump(out, f, indent=0)
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
    else:
        out["complete"] = True
    out["wall_s"] = round(time.time() - t0, 1)
    with open(path, "w") as f:
        json.dump(out, f, indent=0)
    print(f"[sweep] {len(out['rows'])} rows, {out['wall_s']} s, complete={out['complete']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
