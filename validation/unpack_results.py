"""Unpack the tarballs of a device run into the repository layout.

    python3 validation/unpack_results.py --date YYYY-MM-DD MAIN_DIR [REPAIR_DIR ...]

MAIN_DIR holds the main run's files (results_meta.tgz, traces_a.tgz,
traces_b.tgz, console.tgz); each REPAIR_DIR a later ncu-only run made with
``--reuse validation/raw/<date>`` (results_meta.tgz, console.tgz).  Writes

    validation/raw/<date>/   logs, meta/, ncu/ (batch CSVs, status, per-workload JSON),
                             ncu_caps/ (metric lists, gzipped), ceilings.json,
                             join_report.json, summary_top_kernels.txt
    validation/traces/<workload>/*.pt.trace.json.gz   (+ _generate_h200/ from sample_traces/generate.py)

then rebuilds the per-workload ncu JSON, the join report and the summary.
The .ncu-rep reports are not kept (tens of MB each).
"""

import argparse
import glob
import gzip
import os
import shutil
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _extract(tgz, dest):
    with tarfile.open(tgz) as tf:
        tf.extractall(dest)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--date", required=True)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    raw = os.path.join(HERE, "raw", a.date)
    traces = os.path.join(HERE, "traces")
    os.makedirs(raw, exist_ok=True)
    for i, d in enumerate(a.dirs):
        tmp = tempfile.mkdtemp()
        for t in glob.glob(os.path.join(d, "*.tgz")):
            if "ncu_reports" not in t:
                _extract(t, tmp)
        logs_dst = os.path.join(raw, "logs") if i == 0 else os.path.join(raw, "logs", f"repair{i}")
        if os.path.isdir(os.path.join(tmp, "logs")):
            shutil.copytree(os.path.join(tmp, "logs"), logs_dst, dirs_exist_ok=True)
        os.makedirs(os.path.join(raw, "ncu"), exist_ok=True)
        for f in glob.glob(os.path.join(tmp, "ncu", "*")):
            b = os.path.basename(f)
            if b.endswith(".ncu-rep"):
                continue
            if b == "skipped.json" and i:
                b = f"skipped_repair{i}.json"
            shutil.copy(f, os.path.join(raw, "ncu", b))
        if i == 0:
            for sub in ("meta", "ncu_caps"):
                if os.path.isdir(os.path.join(tmp, sub)):
                    shutil.copytree(os.path.join(tmp, sub), os.path.join(raw, sub), dirs_exist_ok=True)
            for f in ("ceilings.json",):
                if os.path.exists(os.path.join(tmp, f)):
                    shutil.copy(os.path.join(tmp, f), raw)
            for big in glob.glob(os.path.join(raw, "ncu_caps", "ncu_query_metrics*.txt")):
                with open(big, "rb") as fi, gzip.open(big + ".gz", "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                os.remove(big)
            for td in glob.glob(os.path.join(tmp, "traces", "*")):
                name = os.path.basename(td)
                name = "_generate_h200" if name == "_generate" else name
                dst = os.path.join(traces, name)
                if os.path.exists(dst):
                    shutil.rmtree(dst)
                shutil.copytree(td, dst)
        shutil.rmtree(tmp)
    import run_all

    run_all.postprocess(raw)
    run_all.join_check(raw)
    run_all.summary(raw)


if __name__ == "__main__":
    main()
