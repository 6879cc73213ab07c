#!/usr/bin/env python3
"""The profiler's CPU cost per recorded op, fitted trace by trace (advice/replay.py, PROFILER_SHARE_OF_OP_CPU).

    python validation/profiler_cost_fit.py [--json out.json] [--only NAME]

Every H200 trace in the repository whose unprofiled step time was measured in the same process (the
round-2 traces of validation/traces with validation/raw/2026-11-30/meta, the modern ones of tests/data/modern
with validation/modern/2026-12-01/meta, and every twin run of validation/twins/*/manifest.json, timed with
CUDA events) is replayed by the step model (advice/replay.StepModel) at profiler costs of 0–15 µs per op in
0.1 µs steps; the smallest cost whose replayed step is no longer than the measured one is the trace's best
fit. Only CPU-bound traces tell the cost apart (profiled step ≥ 1.5× its kernel time, ≥ 30 ops a step):
for them the table gives the best fit beside the trace's profiled CPU time per op
(StepModel.profiled_cpu_per_op) and their ratio, whose median is the share the claim rests on.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from advice_twins import _meta_step_us  # noqa: E402

MAX_US, STEP_US = 15.0, 0.1


def traces() -> list[tuple[str, str, str, float]]:
    """(source, name, trace path, measured unprofiled step in ms)."""
    out = []
    for src, meta_dir, trace_dir in (
        ("raw", "validation/raw/2026-11-30/meta", "validation/traces"),
        ("modern", "validation/modern/2026-12-01/meta", "tests/data/modern"),
    ):
        for mp in sorted(glob.glob(os.path.join(ROOT, meta_dir, "*.json*"))):
            name = os.path.basename(mp).split(".json")[0]
            t = glob.glob(os.path.join(ROOT, trace_dir, name, "*.pt.trace.json*"))
            st_us = _meta_step_us(meta_dir, name)  # the meta's step_ms_wall, as advice_twins reads it
            if t and st_us:
                out.append((src, name, t[0], st_us / 1000.0))
    for mf in sorted(glob.glob(os.path.join(HERE, "twins", "*", "manifest.json"))):
        with open(mf) as f:
            m = json.load(f)
        runs: dict[str, tuple[str, float]] = {}
        for p in (m.get("pairs") or {}).values():
            for side in ("problem", "fix"):
                r = p.get(side) or {}
                if r.get("trace_files") and r.get("step_ms_median") and not r.get("ranks"):
                    runs[r["dir"]] = (r["trace_files"][0], float(r["step_ms_median"]))
        for d, (tf, st) in sorted(runs.items()):
            t = os.path.join(ROOT, "tests", "data", "twins", tf)
            if os.path.exists(t):
                out.append((os.path.basename(os.path.dirname(mf)), d, t, st))
    return out


def step_model(path: str):
    """The advice's step model of one trace (None when it cannot be built)."""
    import tb_attention_plugin.advice as A
    import tb_attention_plugin.advice.registry as REG
    from tb_attention_plugin.analyze import analyze_path

    got: dict = {}
    orig = REG.run_rules

    def capture(run):
        got["m"] = run.replay
        return orig(run)

    A.run_rules = capture
    try:
        analyze_path(path)
    finally:
        A.run_rules = orig
    return got.get("m")


def best_fit(m, target_us: float) -> float | None:
    """The smallest cost per op whose replayed step is no longer than ``target_us`` (linear between
    grid points); None when even no overhead replays shorter (the model's step is then too short)."""

    def step(c: float) -> float:
        return float(m.variant(c).base_us) / m.steps

    prev = step(0.0)
    if prev <= target_us:
        return None
    c = 0.0
    while c < MAX_US:
        v = step(c + STEP_US)
        if v <= target_us:
            return c + STEP_US * (prev - target_us) / max(1e-9, prev - v)
        c, prev = c + STEP_US, v
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write every trace's row here")
    ap.add_argument("--only", default="", help="traces whose name contains this")
    a = ap.parse_args(argv)
    rows = []
    for src, name, path, st in traces():
        if a.only and a.only not in name:
            continue
        m = step_model(path)
        if m is None:
            continue
        profiled = m.profiled_us / m.steps
        gpu = float(m.dur.sum()) / m.steps
        ops = int(m._ovh_is_op.sum()) / m.steps
        c = best_fit(m, st * 1000.0)
        rows.append(
            dict(
                source=src,
                name=name,
                measured_us=round(st * 1000.0, 1),
                profiled_us=round(profiled, 1),
                kernel_us=round(gpu, 1),
                ops_per_step=ops,
                cpu_bound=profiled >= 1.5 * gpu and ops >= 30,
                best_op_us=None if c is None else round(c, 2),
                cpu_per_op_us=round(m.profiled_cpu_per_op(), 2),
            )
        )
    fit = [r for r in rows if r["cpu_bound"] and r["best_op_us"] is not None]
    print(
        "| source | trace | measured step µs | profiled µs | kernels µs | best fit µs/op | profiled CPU µs/op | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(fit, key=lambda r: r["best_op_us"] / r["cpu_per_op_us"]):
        print(
            f"| {r['source']} | {r['name']} | {r['measured_us']:.0f} | {r['profiled_us']:.0f} | {r['kernel_us']:.0f} | "
            f"{r['best_op_us']:.2f} | {r['cpu_per_op_us']:.2f} | {r['best_op_us'] / r['cpu_per_op_us']:.2f} |"
        )
    if fit:
        ratio = [r["best_op_us"] / r["cpu_per_op_us"] for r in fit]
        best = [r["best_op_us"] for r in fit]
        q = statistics.quantiles(ratio, n=4)
        share = statistics.median(ratio)
        err_share = statistics.median(abs(r["best_op_us"] - share * r["cpu_per_op_us"]) for r in fit)
        err_const = statistics.median(abs(b - statistics.median(best)) for b in best)
        print(
            f"\n{len(fit)} CPU-bound traces of {len(rows)}: best fit / profiled CPU per op, median {share:.3f} "
            f"(quartiles {q[0]:.3f}-{q[2]:.3f}); median |error| per op: {err_share:.2f} µs at that share, "
            f"{err_const:.2f} µs at one constant ({statistics.median(best):.2f} µs)"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
