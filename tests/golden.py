"""Golden reports of the sample traces: the analysis must not change unless we mean it to.

    python tests/golden.py            # compare (what the test does)
    python tests/golden.py --update   # after an intended change: rewrite, then review the diff

Each golden file is the JSON report of one sample trace (paths made relative), gzipped.
"""

import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from helpers import SAMPLES, sample  # noqa: E402

GOLDEN = os.path.join(HERE, "golden")


def runs() -> list[str]:
    return sorted(
        d
        for d in os.listdir(SAMPLES)
        if os.path.isdir(os.path.join(SAMPLES, d))
        and any(f.endswith((".json", ".json.gz")) for f in os.listdir(os.path.join(SAMPLES, d)))
    )


# Blocks produced by the add-on analyses (memory/, advice/, replay/, model.py) have tests of their own;
# the goldens pin the core analysis: tagging, phases, costs, bounds, totals. The kernel rows'
# ``site`` (model.py) is that add-on's too.
ADDONS = ("memory", "advice", "advice_checks", "replay", "sites", "flops_ledger", "boundary")
ADDON_ROW_FIELDS = ("site",)


def current(run: str) -> dict:
    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.jsonout import to_json

    rep = analyze_path(sample(run))
    rep = json.loads(to_json(rep))
    rep["path"] = os.path.relpath(rep["path"], SAMPLES)
    for key in ADDONS:
        rep.pop(key, None)
    # Hardware counters (roofline/measured.py; tests/test_measured.py): the sample traces carry
    # none and have no ncu export beside them, so nothing may be measured.
    assert rep.pop("measurements", None) is None, run
    for k in rep["kernels"]:
        assert k.pop("measured", None) is None, (run, k["id"])
        for f in ADDON_ROW_FIELDS:
            k.pop(f, None)
    return rep


def path(run: str) -> str:
    return os.path.join(GOLDEN, run + ".json.gz")


def load(run: str) -> dict:
    with gzip.open(path(run), "rt") as f:
        return json.load(f)


def update() -> None:
    os.makedirs(GOLDEN, exist_ok=True)
    for run in runs():
        with gzip.GzipFile(path(run), "wb", mtime=0) as f:
            f.write(json.dumps(current(run), indent=0, sort_keys=True).encode())
        print("wrote", path(run))


if __name__ == "__main__":
    os.environ.setdefault("TB_ATTENTION_CACHE_DIR", os.path.join(HERE, "_artifacts", "golden-cache"))
    if "--update" in sys.argv:
        update()
    else:
        bad = [r for r in runs() if current(r) != load(r)]
        print("differ:", bad or "none")
        sys.exit(1 if bad else 0)
