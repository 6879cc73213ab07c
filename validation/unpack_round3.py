"""Unpack the tarballs of ``run_device_round3.sh`` into the repository layout.

    python3 validation/unpack_round3.py --date YYYY-MM-DD OUTDIR

Writes

    validation/round3/<date>/   logs/, meta/, ncu/ (batch CSVs, status, per-workload JSON), ncu_caps/ (metric lists,
                                gzipped), join_report.json, summary_top_kernels.txt   (as validation/raw/<date>/)
    tests/data/round3/<workload>/*.pt.trace.json.gz
    validation/twins/<date>/manifest.json and <run>/result.json
    tests/data/twins/<run>/*.pt.trace.json.gz           (the DDP runs: rank0.*, rank1.*)

then rebuilds the per-workload ncu JSON, the join report and the summary.  .ncu-rep files are not kept.
"""

import argparse
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from unpack_results import _extract  # noqa: E402


def _replace_tree(src: str, dst: str) -> None:
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def _point_meta_at_tests_data(meta_dir: str) -> None:
    """The traces live in tests/data/round3 (the tests read them), not validation/traces: the meta
    files' ``trace_files`` (relative to validation/) are rewritten to say so, or the joins find nothing."""
    for path in glob.glob(os.path.join(meta_dir, "*.json")):
        with open(path) as f:
            meta = json.load(f)
        files = meta.get("trace_files") or []
        moved = [
            os.path.join("..", "tests", "data", "round3", f[len("traces/") :]) if f.startswith("traces/") else f
            for f in files
        ]
        if moved != files:
            meta["trace_files"] = moved
            with open(path, "w") as f:
                json.dump(meta, f, indent=1)


def unpack_twins(ttmp: str, twins: str) -> None:
    """validation/twins.py's output (extracted in ``ttmp``) into ``twins`` (manifest, result.json per run)
    and tests/data/twins/<run>/ (the traces)."""
    os.makedirs(twins, exist_ok=True)
    if os.path.exists(os.path.join(ttmp, "manifest.json")):
        shutil.copy(os.path.join(ttmp, "manifest.json"), twins)
    for rd in glob.glob(os.path.join(ttmp, "*", "")):
        run = os.path.basename(os.path.dirname(rd))
        os.makedirs(os.path.join(twins, run), exist_ok=True)
        for f in glob.glob(os.path.join(rd, "*.json")):
            shutil.copy(f, os.path.join(twins, run))
        traces = glob.glob(os.path.join(rd, "*.pt.trace.json*"))
        if traces:
            dst = os.path.join(ROOT, "tests", "data", "twins", run)
            if os.path.exists(dst):
                shutil.rmtree(dst)
            os.makedirs(dst)
            for f in traces:
                shutil.copy(f, dst)
    for f in glob.glob(os.path.join(ttmp, "*_timing_rank*.json")):
        shutil.copy(f, twins)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--date", required=True)
    ap.add_argument("outdir")
    a = ap.parse_args()
    res = os.path.join(HERE, "round3", a.date)
    twins = os.path.join(HERE, "twins", a.date)
    os.makedirs(res, exist_ok=True)
    tmp, ttmp = tempfile.mkdtemp(), tempfile.mkdtemp()
    for t in glob.glob(os.path.join(a.outdir, "*.tgz")):
        b = os.path.basename(t)
        if b.startswith("twins_"):
            _extract(t, ttmp)
        elif "ncu_reports" not in b:
            _extract(t, tmp)
    for sub in ("logs", "meta", "ncu_caps"):
        if os.path.isdir(os.path.join(tmp, sub)):
            shutil.copytree(os.path.join(tmp, sub), os.path.join(res, sub), dirs_exist_ok=True)
    os.makedirs(os.path.join(res, "ncu"), exist_ok=True)
    for f in glob.glob(os.path.join(tmp, "ncu", "*")):
        if not f.endswith(".ncu-rep"):
            shutil.copy(f, os.path.join(res, "ncu"))
    for big in glob.glob(os.path.join(res, "ncu_caps", "ncu_query_metrics*.txt")):
        with open(big, "rb") as fi, gzip.open(big + ".gz", "wb") as fo:
            shutil.copyfileobj(fi, fo)
        os.remove(big)
    for td in glob.glob(os.path.join(tmp, "traces", "*")):
        _replace_tree(td, os.path.join(ROOT, "tests", "data", "round3", os.path.basename(td)))
    _point_meta_at_tests_data(os.path.join(res, "meta"))
    unpack_twins(ttmp, twins)
    shutil.rmtree(tmp)
    shutil.rmtree(ttmp)
    import run_all

    run_all.postprocess(res)
    run_all.join_check(res)
    run_all.summary(res)
    print(
        f"unpacked into {os.path.relpath(res, ROOT)}, {os.path.relpath(twins, ROOT)}"
        ", tests/data/round3 and tests/data/twins"
    )


if __name__ == "__main__":
    main()
