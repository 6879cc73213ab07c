"""Copy what ``run_device_round4_model.sh OUTDIR`` wrote into the repository layout.

    python3 validation/unpack_round4.py --date YYYY-MM-DD OUTDIR     (OUTDIR: a folder or a .tgz of it)

Writes

    validation/round4/<date>/   env.txt, log.txt, summary.json, meta/<workload>.json (trace_files pointing at
                                tests/data/round4), ncu/r4.csv(.gz), ncu/status.jsonl, ncu/ncu.log
    tests/data/round4/<workload>/*.pt.trace.json.gz

.ncu-rep files are not kept (the CSV's raw page carries the rows).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _source(path: str, tmp: str) -> str:
    if os.path.isdir(path):
        return path
    with tarfile.open(path) as tf:
        tf.extractall(tmp, filter="data")
    hits = [os.path.dirname(p) for p in glob.glob(os.path.join(tmp, "**", "summary.json"), recursive=True)]
    if not hits:
        raise SystemExit(f"{path}: no summary.json inside")
    return hits[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--date", required=True)
    ap.add_argument("outdir")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = _source(a.outdir, tmp)
        res = os.path.join(HERE, "round4", a.date)
        data = os.path.join(ROOT, "tests", "data", "round4")
        os.makedirs(os.path.join(res, "meta"), exist_ok=True)
        os.makedirs(os.path.join(res, "ncu"), exist_ok=True)
        for f in ("env.txt", "log.txt", "summary.json"):
            if os.path.exists(os.path.join(src, f)):
                shutil.copy(os.path.join(src, f), res)
        for d in sorted(glob.glob(os.path.join(src, "traces", "*"))):
            dst = os.path.join(data, os.path.basename(d))
            if os.path.exists(dst):
                shutil.rmtree(dst)
            os.makedirs(dst)
            for t in glob.glob(os.path.join(d, "*.pt.trace.json.gz")):
                shutil.copy(t, dst)
        for m in sorted(glob.glob(os.path.join(src, "meta", "*.json"))):
            with open(m) as f:
                meta = json.load(f)
            meta["trace_files"] = [
                os.path.join("..", "tests", "data", "round4", f[len("traces/") :]) if f.startswith("traces/") else f
                for f in meta.get("trace_files") or []
            ]
            with open(os.path.join(res, "meta", os.path.basename(m)), "w") as f:
                json.dump(meta, f, indent=1)
        for f in ("status.jsonl", "ncu.log"):
            p = os.path.join(src, "ncu", f)
            if os.path.exists(p):
                shutil.copy(p, os.path.join(res, "ncu"))
        csv = os.path.join(src, "ncu", "r4.csv")
        if os.path.exists(csv):
            with open(csv, "rb") as fi, gzip.open(os.path.join(res, "ncu", "r4.csv.gz"), "wb") as fo:
                shutil.copyfileobj(fi, fo)
        print(f"unpacked {src} -> {os.path.relpath(res, ROOT)}, {os.path.relpath(data, ROOT)}")


if __name__ == "__main__":
    main()
