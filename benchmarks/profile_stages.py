#!/usr/bin/env python3
"""Where one cold ``tb-attention analyze FILE --format json`` spends its time, stage by stage.

    python benchmarks/profile_stages.py FILE [FILE...]             # stage table, one process
    python benchmarks/profile_stages.py FILE --jobs 2              # the reader's two processes
    python benchmarks/profile_stages.py FILE --cprofile out.prof   # and a cProfile of the run
    python benchmarks/profile_stages.py FILE --tracemalloc         # and each stage's memory

Runs the CLI in this process (stdout to /dev/null, no cache) with the engine's stage functions
wrapped by timers, after the parse floor (benchmarks/floor.py: one msgspec typed decode of the
whole file into minimal event structs) has been measured in a fresh process and in this one.
Prints a markdown table per file: each stage's calls, CPU and wall seconds (inclusive; nested
stages indented), its share of the run, and the ratio to the floor. CPU time is the steadier
figure on a shared machine (``time.process_time``: this process only; with ``--jobs 2`` the
reader's child is not in it, so compare wall there).

``--jobs 1`` (the default here) keeps every stage in this process, so that each is costed; the
CLI's default reads large files with two processes (trace/parallel.py).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import os
import pstats
import resource
import subprocess
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

# (module, attribute, label): functions timed where the caller looks them up. Order = table order.
STAGES = [
    ("tb_attention_plugin.analyze", "load_trace", "read: load_trace"),
    ("tb_attention_plugin.trace.reader", "decode_events", "msgspec decode of the events"),
    ("tb_attention_plugin.trace.records", "TraceBuilder.add", "columns from the events (builder.add)"),
    ("tb_attention_plugin.trace.records", "TraceBuilder.add_raw", "CUPTI counter chunks (add_raw)"),
    ("tb_attention_plugin.trace.records", "TraceBuilder.merge", "merge of the child's columns"),
    ("tb_attention_plugin.trace.records", "TraceBuilder.finish", "freeze + clean (builder.finish)"),
    ("tb_attention_plugin.analyze", "find_reference", "find_reference (CUDA-graph reference)"),
    ("tb_attention_plugin.report", "link", "link (correlate.link)"),
    ("tb_attention_plugin.attention.graphs", "attach", "graphs.attach"),
    ("tb_attention_plugin.report", "tag", "tag (attention tagger)"),
    ("tb_attention_plugin.attention.graphs", "apply", "graphs.apply"),
    ("tb_attention_plugin.report", "attribute", "attribute (roofline/attribute)"),
    ("tb_attention_plugin.report", "build_report", "build_report"),
    ("tb_attention_plugin.report", "_devices", "devices"),
    ("tb_attention_plugin.report", "_steps", "steps"),
    ("tb_attention_plugin.report", "roofline_frame", "roofline_frame (cost + classify)"),
    ("tb_attention_plugin.report", "measure", "measured (counters)"),
    ("tb_attention_plugin.report", "_replay_reasons", "replay reasons"),
    ("tb_attention_plugin.report", "_context", "context (attention paths)"),
    ("tb_attention_plugin.report", "_kernel_table", "kernel table"),
    ("tb_attention_plugin.report", "_assemble", "assemble (aggregates, phases)"),
    ("tb_attention_plugin.report", "_memory_block", "memory block"),
    ("tb_attention_plugin.report", "_sources", "sources (user source lines)"),
    ("tb_attention_plugin.report", "_model", "model (sites, FLOPs ledger, boundary)"),
    ("tb_attention_plugin.model", "ledger_entries", "ledger entries (per call)"),
    ("tb_attention_plugin.model", "flops_ledger", "FLOPs ledger (sites, steps)"),
    ("tb_attention_plugin.model", "sites_block", "sites"),
    ("tb_attention_plugin.model", "boundary_block", "boundary (memory/boundary)"),
    ("tb_attention_plugin.report", "_replay_block", "replay calls"),
    ("tb_attention_plugin.report", "_advice", "advice"),
    ("tb_attention_plugin.advice.run", "attention_rows", "attention kernel rows (advice/run.py)"),
    ("tb_attention_plugin.advice.run", "_sdpa_calls", "SDPA calls (advice/run.py)"),
    ("tb_attention_plugin.advice.registry", "_finding", "findings' step gains (registry._finding)"),
    ("tb_attention_plugin.advice.replay", "StepModel.simulate", "step replay (StepModel.simulate)"),
    ("tb_attention_plugin.jsonout", "iter_trace_body", "JSON output (iter_trace_body)"),
]


class Timer:
    def __init__(self, traced: bool = False) -> None:
        # label -> [calls, cpu, wall, depth, peak RSS MB at exit, traced MB held at exit, traced peak MB]
        self.rows: dict[str, list[float]] = {}
        self.depth = 0
        self.order: list[str] = []
        # With tracemalloc on: the highest traced size seen in each open stage. reset_peak() is
        # global, so an inner stage hands its peak up to the stage around it before resetting.
        self.traced = traced
        self._peaks: list[int] = []

    def _row(self, label: str) -> list[float]:
        r = self.rows.get(label)
        if r is None:
            r = self.rows[label] = [0, 0.0, 0.0, self.depth, 0.0, 0.0, 0.0]
            self.order.append(label)
        return r

    def _enter(self) -> None:
        if self.traced:
            peak = tracemalloc.get_traced_memory()[1]
            if self._peaks:
                self._peaks[-1] = max(self._peaks[-1], peak)
            self._peaks.append(0)
            tracemalloc.reset_peak()

    def _exit(self, r: list[float]) -> None:
        r[4] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if self.traced:
            cur, peak = tracemalloc.get_traced_memory()
            mine = max(peak, self._peaks.pop())
            if self._peaks:
                self._peaks[-1] = max(self._peaks[-1], mine)
            tracemalloc.reset_peak()
            r[5] = cur / 1e6
            r[6] = max(r[6], mine / 1e6)

    def wrap(self, fn, label: str):
        timer = self
        if getattr(fn, "__code__", None) is not None and fn.__code__.co_flags & 0x20:  # a generator

            @functools.wraps(fn)
            def gen(*a, **k):
                it = fn(*a, **k)
                r = timer._row(label)
                r[0] += 1
                while True:
                    timer._enter()
                    c, w = time.process_time(), time.perf_counter()
                    timer.depth += 1
                    try:
                        x = next(it)
                    except StopIteration:
                        return
                    finally:
                        timer.depth -= 1
                        r[1] += time.process_time() - c
                        r[2] += time.perf_counter() - w
                        timer._exit(r)
                    yield x

            return gen

        @functools.wraps(fn)
        def timed(*a, **k):
            r = timer._row(label)
            r[0] += 1
            timer._enter()
            c, w = time.process_time(), time.perf_counter()
            timer.depth += 1
            try:
                return fn(*a, **k)
            finally:
                timer.depth -= 1
                r[1] += time.process_time() - c
                r[2] += time.perf_counter() - w
                timer._exit(r)

        return timed

    def install(self) -> None:
        for mod_name, attr, label in STAGES:
            mod = importlib.import_module(mod_name)
            owner, name = mod, attr
            if "." in attr:
                cls, name = attr.split(".")
                owner = getattr(mod, cls)
            fn = getattr(owner, name, None)
            if fn is None:
                print(f"note: {mod_name}.{attr} not found (stage skipped)", file=sys.stderr)
                continue
            setattr(owner, name, self.wrap(fn, label))
        self._rules()

    def _rules(self) -> None:
        """Each advice rule's check, timed under ``advice`` (the registry calls ``rule.check``)."""
        import dataclasses

        reg = importlib.import_module("tb_attention_plugin.advice.registry")
        reg.RULES = tuple(dataclasses.replace(r, check=self.wrap(r.check, f"rule {r.id}")) for r in reg.RULES)
        reg.BY_ID = {r.id: r for r in reg.RULES}


def floor_fresh(path: str) -> tuple[float, float]:
    """(wall, CPU) seconds of benchmarks/floor.py in a fresh process, interpreter start included."""
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, os.path.join(HERE, "floor.py"), path], check=True, stdout=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def floor_here(path: str) -> tuple[float, float]:
    import floor

    c, w = time.process_time(), time.perf_counter()
    floor.floor([path])
    return time.perf_counter() - w, time.process_time() - c


def run_cli(path: str, extra: list[str]) -> tuple[float, float]:
    from tb_attention_plugin import cli

    devnull = open(os.devnull, "wb")
    old = sys.stdout
    sys.stdout = io.TextIOWrapper(devnull)
    c, w = time.process_time(), time.perf_counter()
    try:
        rc = cli.main(["analyze", path, "--format", "json", "--no-cache", *extra])
    except SystemExit as e:
        rc = e.code
    finally:
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        sys.stdout.flush()
        sys.stdout = old
    if rc:
        raise SystemExit(f"analyze exited {rc}")
    return wall, cpu


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def matrix(runs: list[dict], label: str, jobs: int) -> str:
    """One table for several files: CPU seconds of each stage (rows) in each file (columns)."""
    names = [os.path.basename(os.path.normpath(r["path"])).split(".pt.trace")[0][:28] for r in runs]
    order: list[str] = []
    depth: dict[str, int] = {}
    for r in runs:
        for k, v in r["stages"].items():
            if k not in depth:
                order.append(k)
                depth[k] = int(v[3])
    lines = [
        f"#### Stage CPU seconds{' — ' + label if label else ''} (reader jobs={jobs}; one process per file)",
        "",
        "| stage | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for k in order:
        cells = [f"{r['stages'][k][1]:.2f}" if k in r["stages"] else "—" for r in runs]
        lines.append(f"| {'&nbsp;' * 4 * depth[k]}{k} | " + " | ".join(cells) + " |")

    def row(label: str, fn) -> str:
        return f"| **{label}** | " + " | ".join(fn(r) for r in runs) + " |"

    lines.append(row("analyze, CPU s (in process, imports done)", lambda r: f"{r['total'][1]:.2f}"))
    lines.append(row("analyze, wall s", lambda r: f"{r['total'][0]:.2f}"))
    lines.append(row("parse floor, CPU s (fresh process)", lambda r: f"{r['floor_fresh'][1]:.2f}"))
    lines.append(row("parse floor, wall s (fresh process)", lambda r: f"{r['floor_fresh'][0]:.2f}"))
    lines.append(row("analyze CPU ÷ floor CPU (fresh)", lambda r: f"{r['total'][1] / r['floor_fresh'][1]:.2f}"))
    lines.append(row("peak RSS ÷ file", lambda r: f"{r['rss'] / r['size']:.2f}"))
    return "\n".join(lines)


def table(path: str, t: Timer, total: tuple[float, float], fl_fresh, fl_here, rss: int, jobs: int) -> str:
    size = _size(path)
    wall, cpu = total
    lines = [
        f"#### `{os.path.basename(path)}` ({size / 1e6:.0f} MB, reader jobs={jobs})",
        "",
        f"- parse floor, fresh process: {fl_fresh[0]:.2f} s wall, {fl_fresh[1]:.2f} s CPU; in this "
        f"process: {fl_here[0]:.2f} s wall, {fl_here[1]:.2f} s CPU",
        f"- analyze (in process, imports done): {wall:.2f} s wall, {cpu:.2f} s CPU = "
        f"{wall / fl_here[0]:.2f}× the floor's wall, {cpu / fl_here[1]:.2f}× its CPU; peak RSS "
        f"{rss / 1e6:.0f} MB = {rss / size:.2f}× the file",
        "",
        "| stage | calls | CPU s | wall s | % of CPU | × floor CPU | peak RSS MB after |"
        + (" traced MB held after | traced MB peak during |" if t.traced else ""),
        "|---|---|---|---|---|---|---|" + ("---|---|" if t.traced else ""),
    ]
    for label in t.order:
        n, c, w, d, peak, held, tpeak = t.rows[label]
        lines.append(
            f"| {'&nbsp;' * 4 * int(d)}{label} | {int(n)} | {c:.3f} | {w:.3f} | {100 * c / cpu:.1f} | "
            f"{c / fl_here[1]:.2f} | {peak:.0f} |" + (f" {held:.1f} | {tpeak:.1f} |" if t.traced else "")
        )
    if t.traced:
        lines += ["", "(tracemalloc on: times are inflated; the traced columns count Python and numpy allocations)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--jobs", type=int, default=1, help="reader processes (TB_ATTENTION_JOBS; default 1)")
    ap.add_argument("--cprofile", help="also write a cProfile of the analyze run here (slows it down)")
    ap.add_argument("--top", type=int, default=40, help="cProfile rows printed (by own time)")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor measurements")
    ap.add_argument("--memory", action="store_true", help="pass --memory to analyze")
    ap.add_argument(
        "--tracemalloc",
        action="store_true",
        help="also record each stage's traced memory (held at exit, peak during); slows the run",
    )
    ap.add_argument("--json-out", help=argparse.SUPPRESS)  # one file's numbers, for the matrix
    ap.add_argument("--label", default="", help="a name for the code measured (the matrix's title)")
    args = ap.parse_args(argv)
    os.environ["TB_ATTENTION_JOBS"] = str(args.jobs)
    if len(args.paths) > 1:  # one process per file: peak RSS and warm caches must not mix
        import json
        import tempfile

        rc = 0
        runs = []
        for p in args.paths:
            out = tempfile.mktemp(suffix=".json")
            sub = [sys.executable, os.path.abspath(__file__), p, "--jobs", str(args.jobs), "--top", str(args.top)]
            sub += ["--no-floor"] if args.no_floor else []
            sub += ["--memory"] if args.memory else []
            sub += ["--json-out", out]
            if args.cprofile:
                sub += ["--cprofile", f"{args.cprofile}.{os.path.basename(p)}"]
            rc |= subprocess.run(sub).returncode
            if os.path.exists(out):
                with open(out) as f:
                    runs.append(json.load(f))
                os.remove(out)
        print(matrix(runs, args.label, args.jobs))
        return rc
    path = args.paths[0]
    fl_fresh = fl_here = (float("nan"), float("nan"))
    if not args.no_floor:
        fl_fresh = floor_fresh(path)
    t = Timer(traced=args.tracemalloc)
    t.install()
    extra = ["--memory"] if args.memory else []
    prof = cProfile.Profile() if args.cprofile else None
    if prof:
        prof.enable()
    if args.tracemalloc:
        tracemalloc.start()
    total = run_cli(path, extra)
    if args.tracemalloc:
        tracemalloc.stop()
    if prof:
        prof.disable()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before the floor runs here
    if not args.no_floor:
        fl_here = floor_here(path)
    print(table(path, t, total, fl_fresh, fl_here, rss, args.jobs))
    if args.json_out:
        import json

        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "path": path,
                    "total": total,
                    "floor_fresh": fl_fresh,
                    "floor_here": fl_here,
                    "rss": rss,
                    "size": _size(path),
                    "stages": {k: t.rows[k] for k in t.order},
                },
                f,
            )
    if prof:
        prof.dump_stats(args.cprofile)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
        print("\n```\n" + s.getvalue().strip() + "\n```")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
