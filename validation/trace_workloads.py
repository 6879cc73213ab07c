"""Profile validation workloads with torch.profiler (Kineto).

For each workload: build, warm up, profile ONE step (schedule wait=0,
warmup=1, active=1) with record_shapes=True and with_stack=True (plus
profile_memory=True for the memory workloads), write the trace in
TensorBoard log-dir layout ``OUT/traces/<workload>/<worker>.<ts>.pt.trace.json.gz``
and a metadata file ``OUT/meta/<workload>.json`` holding versions, shapes,
dtype and the kernel names of the profiled step in launch order.

    python3 validation/trace_workloads.py --out DIR --workloads a,b,c [--device cuda] [--small]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import workloads as W  # noqa: E402


def env_info() -> dict:
    info = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": sys.version.split()[0],
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except Exception:
        info["transformers"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(
            gpu=p.name, sm_count=p.multi_processor_count, gpu_mem=p.total_memory, capability=f"{p.major}.{p.minor}"
        )
    return info


def kernels_from_trace(path: str) -> list:
    """GPU kernels of a Kineto trace, in launch order (by correlation id)."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        d = json.load(f)
    ks = []
    for e in d.get("traceEvents", []):
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            a = e.get("args", {})
            ks.append(
                (
                    a.get("correlation", 0),
                    e.get("ts", 0),
                    e["name"],
                    e.get("dur"),
                    a.get("grid"),
                    a.get("block"),
                    a.get("stream"),
                )
            )
    ks.sort(key=lambda t: (t[0], t[1]))
    return [dict(name=k[2], dur_us=k[3], grid=k[4], block=k[5], stream=k[6], correlation=k[0]) for k in ks]


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_times_ms(step, n: int, device: str) -> list:
    """``n`` unprofiled steps' times in ms: CUDA events around each step on a GPU (its GPU time from the first
    launch to the last kernel), the host clock elsewhere."""
    cuda = device.startswith("cuda")
    ms = []
    for _ in range(n):
        t0 = time.perf_counter()
        if cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        step()
        if cuda:
            ev1.record()
            torch.cuda.synchronize()
            ms.append(ev0.elapsed_time(ev1))
        else:
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def profile_steps(
    step, tdir: str, worker: str, device: str, active: int = 1, profile_memory: bool = False, clear: bool = True
) -> list:
    """Profile ``active`` steps after one profiler warm-up step (record_shapes, with_stack) into ``tdir`` in
    TensorBoard layout (``<worker>.<ts>.pt.trace.json.gz``); returns the trace files written (all of ``tdir``'s).
    ``clear`` first removes the traces already in ``tdir``; the ranks of a job, which share one folder, pass
    False (one of them clears it before they start)."""
    os.makedirs(tdir, exist_ok=True)
    for old in glob.glob(os.path.join(tdir, "*.pt.trace.json*")) if clear else ():
        os.remove(old)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    if profile_memory and device.startswith("cuda"):
        torch.cuda.empty_cache()
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(tdir, worker_name=worker, use_gzip=True),
        record_shapes=True,
        with_stack=True,
        profile_memory=profile_memory,
    ) as prof:
        for _ in range(1 + active):
            step()
            sync(device)
            prof.step()
    return sorted(glob.glob(os.path.join(tdir, "*.pt.trace.json.gz")))


def run_one(name: str, out: str, device: str, small: bool, warmup: int, info: dict) -> dict:
    t0 = time.time()
    meta = {"workload": name, "status": "error", "env": info}
    try:
        wl = W.build(name, device=device, small=small)
        meta.update(wl.meta)
        for _ in range(warmup):
            wl.step()
        sync(device)
        t_build = time.time() - t0
        # step timing (outside the profiler), a few reps
        reps = 3
        t1 = time.time()
        for _ in range(reps):
            wl.step()
        sync(device)
        meta["step_ms_wall"] = (time.time() - t1) / reps * 1e3

        tdir = os.path.join(out, "traces", name)
        files = profile_steps(wl.step, tdir, name, device, active=1, profile_memory=wl.profile_memory)
        meta["trace_files"] = [os.path.relpath(f, out) for f in files]
        if files:
            ks = kernels_from_trace(files[-1])
            meta["kernels"] = [k["name"] for k in ks]
            meta["kernel_durations_us"] = [k["dur_us"] for k in ks]
            meta["kernel_grid_block"] = [[k["grid"], k["block"]] for k in ks]
            meta["n_kernels"] = len(ks)
            meta["has_triton_kernels"] = any(k["name"].startswith("triton") for k in ks)
            meta["trace_bytes"] = os.path.getsize(files[-1])
        if wl.profile_memory and device.startswith("cuda"):
            meta["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        meta["build_warmup_s"] = t_build
        meta["status"] = "ok"
        del wl
    except Exception as e:  # keep going with the next workload
        meta["error"] = f"{type(e).__name__}: {e}"
        meta["traceback"] = traceback.format_exc()[-4000:]
        print(f"[trace] {name}: FAILED {meta['error'][:300]}", flush=True)
    finally:
        if device.startswith("cuda"):
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            except Exception:
                pass
    meta["wall_s"] = time.time() - t0
    os.makedirs(os.path.join(out, "meta"), exist_ok=True)
    with open(os.path.join(out, "meta", f"{name}.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print(
        f"[trace] {name}: {meta['status']} kernels={meta.get('n_kernels')} "
        f"step={meta.get('step_ms_wall', float('nan')):.2f}ms wall={meta['wall_s']:.1f}s",
        flush=True,
    )
    return meta


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workloads", default="all", help="comma list, family:NAME, or 'all'")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=0.0, help="unix time after which remaining workloads are skipped")
    a = ap.parse_args(argv)
    sel = resolve(a.workloads)
    info = env_info()
    torch.manual_seed(0)
    results = []
    for n in sel:
        if a.deadline and time.time() > a.deadline:
            print(f"[trace] {n}: skipped (deadline)", flush=True)
            continue
        sp = W.SPECS[n]
        if sp.needs_cuda and not a.device.startswith("cuda"):
            print(f"[trace] {n}: skipped (needs cuda)", flush=True)
            continue
        results.append(run_one(n, a.out, a.device, a.small, a.warmup, info))
    bad = [r["workload"] for r in results if r["status"] != "ok"]
    print(f"[trace] done: {len(results) - len(bad)} ok, {len(bad)} failed {bad}", flush=True)
    return 0


def resolve(spec: str) -> list:
    if spec == "all":
        return W.names()
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("family:"):
            out += W.names(part.split(":", 1)[1])
        else:
            if part not in W.SPECS:
                raise SystemExit(f"unknown workload {part}")
            out.append(part)
    return out


if __name__ == "__main__":
    sys.exit(main())
