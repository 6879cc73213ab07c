"""Measure the two roofline ceilings on the current GPU (a few seconds).

* DRAM bandwidth: device-to-device copy of a 2 GiB tensor (bytes read + written).
* Matrix rate: 8192^3 matmul on random data, bf16 / fp16 / fp32 (tf32 off) / tf32.

Writes JSON to the path given (or stdout).  Times with CUDA events, median of reps.

    python3 validation/ceilings.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys

import torch


def _time(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts), ts


def main():
    out = {}
    p = torch.cuda.get_device_properties(0)
    out["device"] = p.name
    out["sm_count"] = p.multi_processor_count
    out["l2_bytes"] = getattr(p, "L2_cache_size", None)
    n = 2 * 2**30 // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    t, ts = _time(lambda: dst.copy_(src), 20)
    out["copy_bytes_moved"] = 2 * src.numel() * 4
    out["copy_TBps"] = out["copy_bytes_moved"] / t / 1e12
    del src, dst
    N = 8192
    for name, dt, tf32 in (
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, False),
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
    ):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(N, N, device="cuda", dtype=dt)
        b = torch.randn(N, N, device="cuda", dtype=dt)
        t, _ = _time(lambda: a @ b, 10 if name in ("bf16", "fp16") else 5)
        out[f"matmul_{name}_TFLOPs"] = 2 * N**3 / t / 1e12
        del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    txt = json.dumps(out, indent=1)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(txt)
    print(txt)


if __name__ == "__main__":
    main()
