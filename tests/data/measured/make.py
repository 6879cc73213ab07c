"""Rebuild this directory's test data from validation/raw/2026-11-30 (run from the repo root).

* ``decode_gqa_flash.pt.trace.json.gz`` / ``sdpa_flash_fwdbwd_causal.pt.trace.json.gz``: the
  H200 traces of validation/traces/ (one profiler step each).
* ``decode_gqa_flash.ncu.csv``: the ncu raw page of that workload's step (all columns), with
  the marker kernel before it, cut from batch b01.
* ``decode_ncu_batch.csv``: decode_mha_flash then decode_gqa_flash (b01; two ncu exports
  pasted together), markers included: an export holding more than the trace.
* ``sdpa_flash_ncu_batch.csv``: sdpa_flash_fwdbwd_causal then sdpa_flash_fwdbwd_full (b02):
  the same six kernel names twice; only the durations tell them apart.
* ``other_program.ncu.csv``: naive_fp16_s512_d64_fwd (b05): another program's kernels.

The last three keep the identity columns and the metrics measured.py reads.
"""

import csv
import glob
import os
import shutil
import sys

sys.path.insert(0, os.getcwd())
from tb_attention_plugin.roofline import measured, ncu  # noqa: E402

RAW = "validation/raw/2026-11-30/ncu"
HERE = os.path.dirname(os.path.abspath(__file__))


def cut(src: str, ids: list, dst: str, trim: bool) -> None:
    with open(os.path.join(RAW, src), newline="") as f:
        rows = list(csv.reader(f))
    header, units, body = rows[0], rows[1], rows[2:]
    cols = [i for i, h in enumerate(header) if not trim or h in ncu.IDENTITY_COLUMNS or measured.wanted_metric(h)]
    by_id = {r[0]: r for r in body}
    with open(os.path.join(HERE, dst), "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for r in [header, units] + [by_id[str(i)] for i in ids]:  # in the order given
            w.writerow([r[i] for i in cols])


def trace(workload: str) -> None:
    src = glob.glob(f"validation/traces/{workload}/*.pt.trace.json.gz")[0]
    shutil.copy(src, os.path.join(HERE, f"{workload}.pt.trace.json.gz"))


if __name__ == "__main__":
    trace("decode_gqa_flash")
    trace("sdpa_flash_fwdbwd_causal")
    cut("b01.csv", range(10, 23), "decode_gqa_flash.ncu.csv", trim=False)  # marker 10, kernels 11-22
    cut("b01.csv", list(range(50, 62)) + list(range(10, 23)), "decode_ncu_batch.csv", trim=True)
    cut("b02.csv", range(75, 89), "sdpa_flash_ncu_batch.csv", trim=True)  # causal 76-81, full 83-88
    cut("b05.csv", range(14, 31), "other_program.ncu.csv", trim=True)
