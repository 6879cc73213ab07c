"""Join tb-attention's per-kernel verdicts with Nsight Compute counters and report agreement.

    python validation/compare.py                      # newest raw/<date>, writes results/ + RESULTS.md
    python validation/compare.py --raw validation/raw/2026-11-30 --no-write

For every workload with both a trace and ncu rows, the trace's kernels (GPU kernels only, in
launch order) are analysed by the engine exactly as a user would (`analyze_path`, default
options) and joined one-to-one with the ncu rows of the same step (names checked with
`ncu_csv.short_name`).

Counter label (the "truth" the model is checked against) — from three counters:
``dram%`` = dram__throughput (pct of peak, elapsed), ``tensor%`` = sm__pipe_tensor_cycles_active
and ``fma%`` = sm__pipe_fma_cycles_active (pct of peak, active), ``compute% = max(tensor%, fma%)``:

* memory  — dram% >= 60 and dram% >= compute%
* compute — compute% >= 60 and compute% > dram%
* latency — max(dram%, compute%) < 40: nothing near a roof
* unclear — anything else (a roof half reached); excluded from the agreement rate.
"""

from __future__ import annotations

import argparse
import csv
import glob
import gzip
import json
import os
import statistics
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import ncu_csv  # noqa: E402

DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
FMA = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DUR = "gpu__time_duration.sum"
DRAM_R, DRAM_W = "dram__bytes_read.sum", "dram__bytes_write.sum"
TFLOPS_BF16 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
TFLOPS_TF32 = "sm__ops_path_tensor_src_tf32_dst_fp32.sum"
FFMA, FADD, FMUL = (
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
)
HIGH, LOW = 60.0, 40.0


def counter_label(dram: float, tensor: float, fma: float) -> str:
    comp = max(tensor, fma)
    if dram >= HIGH and dram >= comp:
        return "memory"
    if comp >= HIGH and comp > dram:
        return "compute"
    if max(dram, comp) < LOW:
        return "latency"
    return "unclear"


def _num(row: dict, key: str) -> float:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) else float("nan")


def newest_raw() -> str:
    dirs = sorted(d for d in glob.glob(os.path.join(HERE, "raw", "*")) if os.path.isdir(os.path.join(d, "ncu")))
    if not dirs:
        raise SystemExit("no validation/raw/<date>/ncu data")
    return dirs[-1]


def load_json(path: str):
    """``path`` or, where only that exists, ``path + ".gz"`` (later data sets are stored gzipped)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)


def workloads_in(raw: str) -> list[str]:
    """Workloads of a data set with both ncu rows and metadata."""
    out = []
    for path in sorted(
        glob.glob(os.path.join(raw, "ncu", "*.json")) + glob.glob(os.path.join(raw, "ncu", "*.json.gz"))
    ):
        w = os.path.basename(path).split(".json")[0]
        if w.startswith(("batch_", "skipped")):
            continue
        if any(os.path.exists(os.path.join(raw, "meta", w + ext)) for ext in (".json", ".json.gz")):
            out.append(w)
    return out


def join_workload(raw: str, workload: str, analyze) -> list[dict]:
    ncu = load_json(os.path.join(raw, "ncu", workload + ".json"))
    meta = load_json(os.path.join(raw, "meta", workload + ".json"))
    trace = os.path.join(HERE, meta["trace_files"][0])
    ref = meta.get("reference_workload")  # a CUDA-graph replay is analysed with --reference EAGER
    if ref:
        rmeta = load_json(os.path.join(raw, "meta", ref + ".json"))
        rep = analyze(trace, os.path.join(HERE, rmeta["trace_files"][0]))
    else:
        rep = analyze(trace)
    if rep.get("status") != "ok":
        raise RuntimeError(f"{workload}: {rep.get('error')}")
    ks = [k for k in rep["kernels"] if k["kind"] == "kernel"]
    ks.sort(key=lambda k: (k["ts"], k["id"]))
    rows = ncu["kernels"]
    if ncu.get("truncated_by_launch_count") and len(rows) < len(ks):
        ks = ks[: len(rows)]  # ncu measured the first launches only (--launch-count)
    if len(ks) != len(rows):
        raise RuntimeError(f"{workload}: {len(ks)} trace kernels vs {len(rows)} ncu rows")
    out = []
    for k, r in zip(ks, rows):
        if ncu_csv.short_name(k["name"]) != ncu_csv.short_name(str(r["Kernel Name"])):
            raise RuntimeError(f"{workload}: {k['name'][:60]} vs {str(r['Kernel Name'])[:60]}")
        dram, tensor, fma = _num(r, DRAM), _num(r, TENSOR), _num(r, FMA)
        dram_bytes = _num(r, DRAM_R) + _num(r, DRAM_W)
        tflops = sum(x for x in (_num(r, TFLOPS_BF16), _num(r, TFLOPS_TF32)) if x == x)
        cflops = 2 * _num(r, FFMA) + _num(r, FADD) + _num(r, FMUL)
        out.append(
            {
                "workload": workload,
                "kernel": k["name"],
                "short": ncu_csv.short_name(k["name"]),
                "phase": k["phase"],
                "direction": k["direction"],
                "attention": k["attention"],
                "trace_dur_us": k["dur_us"],
                "ncu_dur_us": _num(r, DUR) / 1e3,
                "ours_bound": k["bound"],
                "ours_compute_util": k["compute_util"],
                "ours_memory_util": k["memory_util"],
                "ours_flops": k["flops"],
                "ours_bytes": k["bytes"],
                "ours_dram_bytes": k.get("dram_bytes"),
                "ours_intensity": k["intensity"],
                "peak": k["peak"],
                "dtype": k["dtype"],
                "cost_op": k["cost_op"],
                "estimated": k["estimated"],
                "ncu_dram_pct": dram,
                "ncu_tensor_pct": tensor,
                "ncu_fma_pct": fma,
                "ncu_sm_pct": _num(r, SM),
                "ncu_dram_bytes": dram_bytes,
                "ncu_tensor_flops": tflops,
                "ncu_core_flops": cflops,
                "ncu_label": counter_label(dram, tensor, fma),
            }
        )
    return out


def summarize(rows: list[dict]) -> dict:
    clear = [r for r in rows if r["ncu_label"] != "unclear"]
    agree = [r for r in clear if r["ours_bound"] == r["ncu_label"]]
    confusion = Counter((r["ncu_label"], r["ours_bound"]) for r in rows)
    mem_err = [
        abs(r["ours_memory_util"] - r["ncu_dram_pct"] / 100.0)
        for r in rows
        if r["ours_memory_util"] is not None and r["ncu_dram_pct"] == r["ncu_dram_pct"]
    ]
    ratio = [
        r["ours_dram_bytes"] / r["ncu_dram_bytes"]
        for r in rows
        if r["ours_dram_bytes"] and r["ncu_dram_bytes"] and r["ncu_dram_bytes"] > 1e6
    ]
    min_ratio = [
        r["ours_bytes"] / r["ncu_dram_bytes"]
        for r in rows
        if r["ours_bytes"] and r["ncu_dram_bytes"] and r["ncu_dram_bytes"] > 1e6
    ]
    # time-weighted agreement too: long kernels matter more to users
    tw = sum(r["trace_dur_us"] for r in agree) / max(1e-9, sum(r["trace_dur_us"] for r in clear))
    return {
        "kernels": len(rows),
        "clear": len(clear),
        "agree": len(agree),
        "agreement": len(agree) / len(clear) if clear else None,
        "agreement_time_weighted": tw,
        "by_label": {
            lab: (
                sum(1 for r in clear if r["ncu_label"] == lab and r["ours_bound"] == lab),
                sum(1 for r in clear if r["ncu_label"] == lab),
            )
            for lab in ("memory", "compute", "latency")
        },
        "confusion": {f"{a}->{b}": n for (a, b), n in sorted(confusion.items())},
        "memory_util_abs_err_median": statistics.median(mem_err) if mem_err else None,
        "bytes_ratio_median": statistics.median(ratio) if ratio else None,
        "bytes_far": sum(1 for x in ratio if x < 0.5 or x > 2.0),
        "bytes_known": len(ratio),
        "min_bytes_ratio_median": statistics.median(min_ratio) if min_ratio else None,
        "sensitivity": {
            f"{hi:.0f}/{lo:.0f}": _agreement(rows, hi, lo)
            for hi, lo in ((50, 30), (50, 40), (60, 30), (60, 40), (70, 40), (70, 50))
        },
    }


def _agreement(rows: list[dict], hi: float, lo: float):
    """Agreement under other counter thresholds (memory/compute >= hi, latency < lo)."""
    global HIGH, LOW
    keep = HIGH, LOW
    HIGH, LOW = hi, lo
    try:
        labels = [counter_label(r["ncu_dram_pct"], r["ncu_tensor_pct"], r["ncu_fma_pct"]) for r in rows]
    finally:
        HIGH, LOW = keep
    clear = [(lab, r) for lab, r in zip(labels, rows) if lab != "unclear"]
    agree = sum(1 for lab, r in clear if r["ours_bound"] == lab)
    return {"clear": len(clear), "agreement": round(agree / len(clear), 4) if clear else None}


def fused_flops(rows: list[dict]) -> list[dict]:
    """Fused attention kernels: our analytic FLOPs vs the tensor-pipe FLOPs ncu counted."""
    out = []
    for r in rows:
        if r["phase"] == "fused_attention" and r["ours_flops"] and r["ncu_tensor_flops"] > 0:
            out.append(
                {
                    "workload": r["workload"],
                    "short": r["short"],
                    "direction": r["direction"],
                    "ours_flops": r["ours_flops"],
                    "ncu_tensor_flops": r["ncu_tensor_flops"],
                    "ratio_ncu_over_ours": r["ncu_tensor_flops"] / r["ours_flops"],
                }
            )
    return out


def render(raw: str, summary: dict, rows: list[dict], fused: list[dict], per_workload: dict, env: dict) -> str:
    s = summary
    lines = [
        "# Validation: the model against Nsight Compute on an H200",
        "",
        f"Data: `{os.path.relpath(raw, ROOT)}` — {env.get('gpu')}, torch {env.get('torch')}, CUDA {env.get('cuda_runtime')},"
        f" cuDNN {env.get('cudnn')}, triton {env.get('triton')}, transformers {env.get('transformers')}.",
        "Command: `python validation/compare.py` (joins each workload's trace kernels with the ncu rows of the same"
        " step by launch order; names checked). Counter labels: memory = DRAM% >= 60 and the largest;"
        " compute = max(tensor%, FMA%) >= 60 and the largest; latency = everything < 40%; unclear otherwise.",
        "",
        "## What the evidence changed in the model",
        "",
        "The first comparison (engine at commit 2424f98) agreed on 84.5% of the clear kernels (time-weighted"
        " 96.8%); median |memory_util − DRAM%| was 0.14. The disagreements pointed at four general effects,"
        " now in the model (docs/cost-model.md); none is a rule about a particular kernel:",
        "",
        "1. **Write-back caching.** Outputs that fit in L2 next to the kernel's reads are not written to DRAM"
        " during the kernel (ncu: a 16 MB fill moves 7 KB; copies move their reads only). memory_util now uses"
        " estimated DRAM traffic (reads + writes beyond the room left in L2).",
        "2. **Short kernels.** Under 5 µs no kernel reached 60% of any roof (ncu); they are latency-bound whatever"
        " their estimated traffic (split-K reductions, decode combine kernels, small fills).",
        "3. **Fused backward sub-steps.** The pre-pass (rowsum(dO∘O) that also zeroes the fp32 dq accumulator) and"
        " the post-pass (dq cast) stream tensors at 60–70% of DRAM bandwidth; they now get their own bytes"
        " instead of a duration share of the whole op.",
        "4. **fp32 fused attention uses TF32 tensor cores** (tensor pipe active, FMA idle), so its roof is TF32.",
        "5. **Recorded strides and out= tensors.** Inputs are read at the size their strides address (an expanded,"
        " stride-0 dimension once) and out= tensors are written, not read. The SDPA math backend's"
        " repeat_interleave of K/V in GQA decode went from 2.147 GB per copy (1.63x ncu's 1.316 GB) to 1.342 GB"
        " (1.02x); the safe-softmax where of SDPA math from 3.22 GB to 2.15 GB (ncu 2.12 GB).",
        "",
        "Plus cost formulas for what had none (Inductor Triton kernels from their recorded buffers, cumsum,"
        " random fills, activation backwards) and `aten::cat`'s element size from its kernel template.",
        "These changes were made with this data set, so the agreement below is in-sample; the sensitivity"
        " table shows it does not hinge on the counter thresholds.",
        "",
        "## Agreement of the bound",
        "",
        "| kernels | clear | agree | agreement | time-weighted | memory | compute | latency |",
        "|---|---|---|---|---|---|---|---|",
        f"| {s['kernels']} | {s['clear']} | {s['agree']} | {s['agreement']:.3f} | {s['agreement_time_weighted']:.3f} | "
        + " | ".join(f"{a}/{b}" for a, b in (s["by_label"][k] for k in ("memory", "compute", "latency")))
        + " |",
        "",
        "Confusion (counter label -> our bound): " + ", ".join(f"{k}: {v}" for k, v in s["confusion"].items()),
        "",
        "## Bytes and bandwidth",
        "",
        f"- median |memory_util − DRAM%|: {s['memory_util_abs_err_median']:.3f} (absolute, as a fraction of peak)",
        f"- median ratio of our estimated DRAM bytes to measured DRAM bytes (kernels moving > 1 MB):"
        f" {s['bytes_ratio_median']:.2f}; {s['bytes_far']} of {s['bytes_known']} kernels are off by more than 2x"
        " (see results/kernels.csv: kernels that re-read inputs, e.g. K/V per query tile, and broadcast inputs)",
        f"- the same ratio for the minimum bytes (before modelling write-back caching): {s['min_bytes_ratio_median']:.2f}",
        "",
        "Sensitivity to the counter thresholds (memory/compute at >= first, latency below second):",
        "",
        "| thresholds | clear kernels | agreement |",
        "|---|---|---|",
        *[f"| {k} | {v['clear']} | {v['agreement']} |" for k, v in s["sensitivity"].items()],
        "",
        "## Fused attention FLOPs",
        "",
        "| workload | kernel | dir | ours (analytic) | ncu tensor-pipe FLOPs | ncu / ours |",
        "|---|---|---|---|---|---|",
    ]
    for f in fused:
        lines.append(
            f"| {f['workload']} | {f['short']} | {f['direction'][:3]} | {f['ours_flops']:.4g} |"
            f" {f['ncu_tensor_flops']:.4g} | {f['ratio_ncu_over_ours']:.3f} |"
        )
    lines += [
        "",
        "Full (non-causal) attention: the tensor pipes did exactly our analytic count (1.000). Causal:"
        " kernels compute whole tiles on the diagonal, 3–6% more than the kept (query, key) pairs at"
        " S=2048 (12% at S=1024); our `flops` is the useful work and `cost_detail.causal_fraction` says"
        " which fraction was kept. Decode (one query row) pads the query to a whole tile, so the hardware"
        " does 17× (GQA, 4 query heads per KV head in a tile) to 128× (MHA) the useful FLOPs; fp32 fused"
        " attention runs three TF32 MMAs per product (3× the analytic count).",
        "",
        "## Per workload",
        "",
        "| workload | kernels | clear | agree |",
        "|---|---|---|---|",
    ]
    for w, (n, c, a) in sorted(per_workload.items()):
        lines.append(f"| {w} | {n} | {c} | {a} |")
    lines += [
        "",
        "## Disagreements on clear kernels",
        "",
        "| workload | kernel | counters (DRAM / tensor / FMA %) | ncu | ours | our mem / compute util |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["ncu_label"] != "unclear" and r["ncu_label"] != r["ours_bound"]:
            lines.append(
                f"| {r['workload']} | {r['short']} | {r['ncu_dram_pct']:.0f} / {r['ncu_tensor_pct']:.0f} /"
                f" {r['ncu_fma_pct']:.0f} | {r['ncu_label']} | {r['ours_bound']} |"
                f" {_pct(r['ours_memory_util'])} / {_pct(r['ours_compute_util'])} |"
            )
    return "\n".join(lines) + "\n"


def _pct(x):
    return "–" if x is None else f"{100 * x:.0f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", default=None, help="validation/raw/<date> (default: newest)")
    ap.add_argument("--no-write", action="store_true", help="print the summary only")
    a = ap.parse_args(argv)
    raw = a.raw or newest_raw()
    from tb_attention_plugin.analyze import analyze_path

    from tb_attention_plugin.options import Options

    def analyze(p, reference=None):
        return analyze_path(p, Options(reference=reference), cache=None)

    rows, per_workload, failures = [], {}, []
    env = {}
    for w in workloads_in(raw):
        try:
            jr = join_workload(raw, w, analyze)
        except (RuntimeError, KeyError, OSError) as e:
            failures.append(str(e))
            continue
        if not env:
            env = load_json(os.path.join(raw, "meta", w + ".json")).get("env", {})
        rows += jr
        clear = [r for r in jr if r["ncu_label"] != "unclear"]
        per_workload[w] = (len(jr), len(clear), sum(1 for r in clear if r["ours_bound"] == r["ncu_label"]))
    summary = summarize(rows)
    fused = fused_flops(rows)
    print(json.dumps(summary, indent=1))
    for f in failures:
        print("skipped:", f, file=sys.stderr)
    if not a.no_write:
        out = os.path.join(HERE, "results")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "kernels.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(
                {"summary": summary, "fused_flops": fused, "per_workload": per_workload, "failures": failures},
                f,
                indent=1,
            )
        with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
            f.write(render(raw, summary, rows, fused, per_workload, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
