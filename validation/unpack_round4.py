"""Unpack the tarballs of ``run_device_round4.sh`` into the repository layout.

    python3 validation/unpack_round4.py --date YYYY-MM-DD OUTDIR

Writes

    validation/results/backend_sweep/<date>[-grid2]/backend_sweep.json
    validation/replay/results/<date>/replay_results.tgz          (replay_check.py reads it as it is)
    validation/twins/<date>-h4|-h5/manifest.json and <run>/result.json
    tests/data/twins/<run>/*.pt.trace.json.gz
    validation/round4/<date>/logs/                               (every phase's console)

then says what to run next: backend_table.py (the table from the sweep), replay_check.py, advice_twins.py.
"""

import argparse
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from unpack_results import _extract  # noqa: E402
from unpack_round3 import unpack_twins  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--date", required=True)
    ap.add_argument("outdir")
    a = ap.parse_args()
    replay = os.path.join(a.outdir, "replay_results.tgz")
    if os.path.exists(replay):
        dst = os.path.join(HERE, "replay", "results", a.date)
        os.makedirs(dst, exist_ok=True)
        shutil.copy(replay, dst)
    for t in glob.glob(os.path.join(a.outdir, "*.tgz")):
        name = os.path.basename(t)[: -len(".tgz")]
        if name == "replay_results":
            continue
        tmp = tempfile.mkdtemp()
        _extract(t, tmp)
        if os.path.isdir(os.path.join(tmp, "logs")):
            shutil.copytree(os.path.join(tmp, "logs"), os.path.join(HERE, "round4", a.date, "logs"), dirs_exist_ok=True)
        for grid in ("sweep", "sweep2", "sweep3"):  # the later grids' rows under <date>-grid2, -grid3
            sweep = os.path.join(tmp, grid, "backend_sweep.json")
            if os.path.exists(sweep):
                dst = os.path.join(HERE, "results", "backend_sweep", a.date + ("-grid" + grid[5:] if grid[5:] else ""))
                os.makedirs(dst, exist_ok=True)
                shutil.copy(sweep, dst)
        if name.startswith("twins_h") and os.path.isdir(os.path.join(tmp, "twins")):
            unpack_twins(os.path.join(tmp, "twins"), os.path.join(HERE, "twins", f"{a.date}-{name[len('twins_') :]}"))
        shutil.rmtree(tmp)
    print(
        "next: python validation/backend_table.py; python3 validation/replay_check.py validation/replay_traces.txt "
        f"validation/replay/results/{a.date}/replay_results.tgz; python validation/advice_twins.py --manifest "
        f"validation/twins/{a.date}-h4/manifest.json --write"
    )


if __name__ == "__main__":
    main()
