"""Unpack the tarballs of ``run_device_nccl.sh`` (issue #24) into the repository layout.

    python3 validation/unpack_nccl.py --date YYYY-MM-DD OUTDIR [--dest tests/data/nccl] [--logs DIR]

Writes

    tests/data/nccl/manifest.json               what each run was (validation/nccl_job.py), the latest one
    tests/data/nccl/<run>/rank<R>.<ts>.pt.trace.json.gz   every rank's trace of each run that has traces
    validation/nccl/<date>/ (or --logs)         logs/ (one per piece), env.txt, manifest.json

A run folder is replaced whole (no rank of an older recording is left beside the new ones). Prints each run's
status, rank count and size: the traces are meant to be committed, so a run that came out large says so.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from unpack_results import _extract  # noqa: E402


def _size(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*")))


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--date", required=True)
    ap.add_argument("--dest", default=os.path.join(ROOT, "tests", "data", "nccl"))
    ap.add_argument("--logs", help="where the logs go (default validation/nccl/<date>)")
    ap.add_argument("outdir")
    a = ap.parse_args(argv)
    tars = sorted(glob.glob(os.path.join(a.outdir, "*.tgz")))
    if not tars:
        print(f"error: {a.outdir}: no .tgz files", file=sys.stderr)
        return 2
    tmp, meta = tempfile.mkdtemp(), tempfile.mkdtemp()
    manifest: dict = {}
    for t in tars:
        if os.path.basename(t) == "meta.tgz":
            _extract(t, meta)
            continue
        _extract(t, tmp)
        mp = os.path.join(tmp, "manifest.json")
        if os.path.exists(mp):  # each piece's tarball holds the manifest as it was after that piece: keep the fullest
            with open(mp) as f:
                m = json.load(f)
            if len(m.get("runs", {})) >= len(manifest.get("runs", {})):
                manifest = m
    mp = os.path.join(meta, "traces", "manifest.json")
    if os.path.exists(mp):  # meta.tgz is rewritten after every piece: its manifest is the last one
        with open(mp) as f:
            manifest = json.load(f)
    if not manifest:
        print(f"error: {a.outdir}: no manifest.json in the tarballs", file=sys.stderr)
        return 2
    os.makedirs(a.dest, exist_ok=True)
    with open(os.path.join(a.dest, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    for run, entry in sorted(manifest["runs"].items()):
        src = os.path.join(tmp, entry.get("dir", run))
        traces = sorted(glob.glob(os.path.join(src, "*.pt.trace.json*")))
        line = f"{run}: {entry.get('status')}, {entry.get('world_size')} ranks"
        if traces:
            dst = os.path.join(a.dest, entry.get("dir", run))
            if os.path.exists(dst):
                shutil.rmtree(dst)
            os.makedirs(dst)
            for p in traces:
                shutil.copy(p, dst)
            line += f", {len(traces)} traces, {_size(dst) / 2**20:.1f} MiB -> {os.path.relpath(dst, ROOT)}"
        print(line)
    res = a.logs or os.path.join(HERE, "nccl", a.date)
    os.makedirs(res, exist_ok=True)
    for sub in ("logs",):
        if os.path.isdir(os.path.join(meta, sub)):
            shutil.copytree(os.path.join(meta, sub), os.path.join(res, sub), dirs_exist_ok=True)
    for f in ("env.txt",):
        if os.path.exists(os.path.join(meta, f)):
            shutil.copy(os.path.join(meta, f), res)
    shutil.copy(os.path.join(a.dest, "manifest.json"), res)
    shutil.rmtree(tmp)
    shutil.rmtree(meta)
    print(f"manifest -> {os.path.relpath(a.dest, ROOT)}/manifest.json; logs -> {os.path.relpath(res, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
