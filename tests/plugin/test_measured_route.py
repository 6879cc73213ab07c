"""An Nsight Compute export dropped beside a loaded trace: the trace is analysed again and the
routes show the measured counters (roofline/measured.py)."""

from __future__ import annotations

import os
import shutil

from conftest import Served, wait_for

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "measured")
TRACE = "decode_gqa_flash.pt.trace.json.gz"


def test_dropping_an_ncu_export_reanalyses_the_trace(logdir):
    run = logdir / "decode"
    run.mkdir()
    shutil.copyfile(os.path.join(DATA, TRACE), run / TRACE)
    s = Served(logdir)
    try:
        s.settled(1)
        before = s.get("/kernels", run="decode", scope="all", limit=100).json
        assert before["total"] == 12 and all(k["measured"] is None for k in before["rows"])
        assert s.get("/summary", run="decode").json["summary"]["measurements"] is None

        tmp = logdir / ".incoming.csv"
        shutil.copyfile(os.path.join(DATA, "decode_gqa_flash.ncu.csv"), tmp)
        os.replace(tmp, run / (TRACE + ".ncu.csv"))

        def measured_rows():
            d = s.get("/kernels", run="decode", scope="all", limit=100).json
            rows = d.get("rows") or []
            return rows if rows and all(k["measured"] for k in rows) else None

        rows = wait_for(measured_rows, what="the measured re-analysis")
        assert {k["measured"]["source"] for k in rows} == {"ncu"}
        assert all(k["bound_reason"].startswith("measured (Nsight Compute)") for k in rows)
        summ = s.get("/summary", run="decode").json["summary"]
        assert summ["measurements"]["kernels_joined"] == 12
        assert summ["measurements"]["file"] == TRACE + ".ncu.csv"
        one = s.get("/kernel", run="decode", id=rows[0]["id"]).json
        assert (one.get("kernel") or one)["measured"]["row"] is not None
        pts = s.get("/roofline", run="decode", scope="all").json["points"]
        assert pts and all(p["measured"] for p in pts)

        # removing it goes back to the model
        os.remove(run / (TRACE + ".ncu.csv"))
        wait_for(
            lambda: all(
                k["measured"] is None
                for k in s.get("/kernels", run="decode", scope="all", limit=100).json.get("rows") or [{"measured": 1}]
            ),
            what="the modelled re-analysis",
        )
    finally:
        s.close()
