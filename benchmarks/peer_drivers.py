#!/usr/bin/env python3
"""What bench.py times for each peer, one process per measurement (run with the peers' venv).

    python peer_drivers.py tbprof RUN_DIR     # torch-tb-profiler 0.4.3, as its TensorBoard plugin loads a run
    python peer_drivers.py hta TRACE_DIR      # Holistic Trace Analysis 0.5.0: load + get_gpu_kernel_breakdown
    python peer_drivers.py tracelens FILE...  # TraceLens (AMD): its PyTorch perf report of each file, to xlsx
    python peer_drivers.py orjson FILE...     # reference: orjson decode of the whole file(s)

Each exits non-zero if the tool produced nothing (both peers swallow some errors), and prints a
one-line summary on stdout so that a run can be checked after the fact.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile


def tbprof(run_dir: str) -> int:
    """torch-tb-profiler: exactly what ``TorchProfilerPlugin._load_run`` does for one run.

    ``RunLoader.load`` finds ``<worker>[.<span>].pt.trace.json[.gz]`` files, and for each one starts a
    ``spawn`` process that runs ``RunProfileData.parse`` (json.loads, event objects, op tree,
    module/kernel/memory aggregation) and ``RunGenerator.generate_run_profile`` (every view's
    tables), then sends the profile back through a multiprocessing queue.
    """
    from torch_tb_profiler import io as tbio
    from torch_tb_profiler.profiler import RunLoader

    cache_dir = tempfile.mkdtemp(prefix="tbprof-cache-")
    try:
        run = RunLoader(os.path.basename(os.path.normpath(run_dir)), run_dir, tbio.Cache(cache_dir)).load()
        profiles = list(run.profiles.values())
        if not profiles:
            print("torch-tb-profiler produced no profile (it logs the parse error and carries on)", file=sys.stderr)
            return 3
        p = profiles[0]
        views = [v.name for v in getattr(p, "views", [])]
        steps = "?"
        try:
            steps = len(p.overview["steps"]["rows"])
        except (TypeError, KeyError):
            pass
        kernels = (
            len(p.kernel_table["data"]["rows"])
            if isinstance(p.kernel_table, dict) and isinstance(p.kernel_table.get("data"), dict)
            else "?"
        )
        print(f"tbprof ok: {len(profiles)} profile(s), views={views}, steps={steps}, kernel rows={kernels}")
        return 0
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def hta(trace_dir: str) -> int:
    """HTA: ``TraceAnalysis(trace_dir)`` (parse into a DataFrame) + ``get_gpu_kernel_breakdown()``."""
    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=trace_dir)
    by_type, by_kernel = analyzer.get_gpu_kernel_breakdown(visualize=False)
    if by_kernel is None or len(by_kernel) == 0:
        print("HTA returned an empty kernel breakdown", file=sys.stderr)
        return 3
    n_events = sum(len(df) for df in analyzer.t.traces.values())
    print(f"hta ok: {n_events} trace rows, {len(by_type)} kernel types, {len(by_kernel)} kernel rows")
    return 0


def tracelens(*paths: str) -> int:
    """TraceLens: ``TraceLens_generate_perf_report_pytorch --profile_json_path FILE`` for each
    file (a job: each rank's file, one after the other), the report written as its default
    xlsx, into a temporary folder."""
    from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch

    out_dir = tempfile.mkdtemp(prefix="tracelens-")
    try:
        sheets = 0
        for i, path in enumerate(paths):
            dfs = generate_perf_report_pytorch(path, output_xlsx_path=os.path.join(out_dir, f"report{i}.xlsx"))
            if not dfs:
                print(f"TraceLens produced no report for {path}", file=sys.stderr)
                return 3
            sheets += len(dfs)
        print(f"tracelens ok: {len(paths)} file(s), {sheets} sheets")
        return 0
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def orjson_decode(*paths: str) -> int:
    import orjson

    n = 0
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = orjson.loads(raw)
        n += len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)
        del doc, raw
    print(f"orjson ok: {n} events in {len(paths)} file(s)")
    return 0


def main(argv) -> int:
    if len(argv) < 3 or argv[1] not in ("tbprof", "hta", "tracelens", "orjson"):
        print(__doc__, file=sys.stderr)
        return 2
    return {"tbprof": tbprof, "hta": hta, "tracelens": tracelens, "orjson": orjson_decode}[argv[1]](*argv[2:])


if __name__ == "__main__":  # the guard matters: torch-tb-profiler spawns processes that import this
    sys.exit(main(sys.argv))
