"""Run ONE step of each named workload bracketed for Nsight Compute.

Meant to be launched under ``ncu --profile-from-start off``.  For every
workload (in the order given) it builds the inputs, warms up outside the
profiled range, then:

    cudaProfilerStart()
    nvtx.range_push(<workload>)
    marker kernel (torch.cuda._sleep -> a kernel whose name contains "sleep"/"spin")
    step()
    synchronize
    nvtx.range_pop()
    cudaProfilerStop()

The marker kernel is the first profiled kernel of each workload, so the rows
of one ncu report can be split per workload even when ncu's NVTX columns are
missing (backward kernels run on autograd's own thread and are outside the
main thread's push/pop range).  ``OUT/ncu_status_<tag>.jsonl`` records the
order and status of each workload.

    python3 validation/ncu_step.py --workloads a,b,c --status FILE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import workloads as W  # noqa: E402

MARKER_CYCLES = 1000


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--status", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-marker", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: dry run of the control flow (no profiler calls)")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args(argv)
    cuda = a.device.startswith("cuda")
    if cuda:
        cudart = torch.cuda.cudart()
    else:  # dry run on a CPU: no-op stand-ins

        class _Nop:
            def __getattr__(self, _):
                return lambda *x, **k: None

        cudart = _Nop()
    torch.manual_seed(0)
    for name in [n for n in a.workloads.split(",") if n]:
        rec = {"workload": name, "status": "error", "marker": not a.no_marker, "t_start": time.time()}
        try:
            wl = W.build(name, device=a.device, small=a.small)
            for _ in range(a.warmup):
                wl.step()
            sync()
            cudart.cudaProfilerStart()
            if cuda:
                torch.cuda.nvtx.range_push(name)
                if not a.no_marker:
                    torch.cuda._sleep(MARKER_CYCLES)
            wl.step()
            sync()
            if cuda:
                torch.cuda.nvtx.range_pop()
            cudart.cudaProfilerStop()
            rec["status"] = "ok"
            rec["meta"] = wl.meta
            del wl
        except Exception as e:
            try:
                cudart.cudaProfilerStop()
            except Exception:
                pass
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            rec["traceback"] = traceback.format_exc()[-3000:]
            print(f"[ncu_step] {name}: FAILED {rec['error'][:300]}", flush=True)
        finally:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        rec["t_end"] = time.time()
        with open(a.status, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        print(f"[ncu_step] {name}: {rec['status']} ({rec['t_end'] - rec['t_start']:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
