"""The kernel table grouped by kernel (issue #41): ``/kernels?group=1`` answers one row per
(kernel name, phase, direction) of the launches the same filters select, with calls, total, mean,
min and max time, Tensor Core use, mean occupancy and the bound holding most of the time."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from conftest import Served, put


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("groups")
    put(logdir, "gpt", "gpt4l_sdpa_train")
    put(logdir, "naive", "naive_bf16_s2048_fwd")
    s = Served(logdir)
    s.settled(2)
    yield s
    s.close()


def _launches(s, run: str, **filters) -> list:
    d = s.get("/kernels", run=run, limit=1000, **filters).json
    assert d["total"] <= 1000
    return d["rows"]


@pytest.mark.parametrize("run", ["gpt", "naive"])
@pytest.mark.parametrize("scope", ["attention", "all"])
def test_groups_add_up_to_the_launches(served, run, scope):
    launches = _launches(served, run, scope=scope)
    d = served.get("/kernels", run=run, scope=scope, group=1, limit=1000).json
    assert d["grouped"] is True and d["launches"] == len(launches)
    by: dict = defaultdict(list)
    for k in launches:
        by[(k["name"], k["phase"], k["direction"])].append(k)
    rows = d["rows"]
    assert d["total"] == len(rows) == len(by) < len(launches)
    assert sum(r["calls"] for r in rows) == len(launches)
    assert math.isclose(sum(r["total_us"] for r in rows), d["total_time_us"], rel_tol=1e-6)
    assert math.isclose(d["total_time_us"], sum(k["dur_us"] for k in launches), rel_tol=1e-6)
    for r in rows:
        ks = by[(r["name"], r["phase"], r["direction"])]
        durs = [k["dur_us"] for k in ks]
        assert r["calls"] == len(ks) and r["short_name"]
        assert r["min_us"] == pytest.approx(min(durs), abs=1e-3) and r["max_us"] == pytest.approx(max(durs), abs=1e-3)
        assert r["mean_us"] == pytest.approx(sum(durs) / len(durs), abs=1e-3)
        occ = [k["occupancy_pct"] for k in ks if k["occupancy_pct"] is not None]
        assert r["occupancy_pct"] == (pytest.approx(sum(occ) / len(occ), abs=1e-3) if occ else None)
        tc = sum(1 for k in ks if k["peak"] in ("bf16", "fp16", "tf32", "fp8", "int8", "fp64_tensor"))
        assert r["tensor_core_calls"] == tc and r["roof_calls"] == sum(1 for k in ks if k["peak"])
        assert r["longest"]["dur_us"] == max(durs) and r["id"] == r["longest"]["id"]
        assert r["longest"]["short_name"] == r["short_name"]
        bt: dict = defaultdict(float)
        for k in ks:
            bt[k["bound"]] += k["dur_us"]
        assert r["bound"] == max(bt, key=lambda b: bt[b])


def test_tensor_cores_are_the_matmuls_and_the_fused_kernels(served):
    rows = served.get("/kernels", run="gpt", group=1, limit=1000).json["rows"]
    tc = {r["phase"] for r in rows if r["tensor_core_calls"] == r["calls"] > 0}
    assert {"qkv_proj", "out_proj", "fused_attention"} <= tc
    # elementwise work of bf16 tensors runs on the fp32 vector roof, copies on none
    assert not [r for r in rows if r["phase"] in ("softmax", "layout", "scale") and r["tensor_core_calls"]]


def test_sorted_filtered_and_paginated(served):
    for key in (
        "total_us",
        "calls",
        "mean_us",
        "max_us",
        "occupancy_pct",
        "tensor_core",
        "name",
        "op",
        "module_path",
        "phase",
        "bound",
    ):
        for order in ("asc", "desc"):
            d = served.get("/kernels", run="gpt", group=1, sort=key, order=order, limit=1000).json
            assert d["sort"] == key and d["order"] == order
    d = served.get("/kernels", run="gpt", group=1, sort="total_us", order="desc", limit=1000).json
    totals = [r["total_us"] for r in d["rows"]]
    assert totals == sorted(totals, reverse=True)
    ops = [
        (r["longest"]["op"] or "").lower()
        for r in served.get("/kernels", run="gpt", group=1, sort="op", limit=1000).json["rows"]
    ]
    assert ops == sorted(ops)
    assert served.get("/kernels", run="gpt", group=1).json["sort"] == "total_us"  # the default
    p1 = served.get("/kernels", run="gpt", group=1, limit=3).json
    p2 = served.get("/kernels", run="gpt", group=1, limit=3, offset=3).json
    assert [r["id"] for r in p1["rows"] + p2["rows"]] == [r["id"] for r in d["rows"][:6]]
    bwd = served.get("/kernels", run="gpt", group=1, direction="backward", limit=1000).json
    assert bwd["rows"] and {r["direction"] for r in bwd["rows"]} == {"backward"}
    assert bwd["launches"] == served.get("/kernels", run="gpt", direction="backward").json["total"]
    for bad in ({"group": 1, "sort": "dur_us"}, {"group": "maybe"}):
        assert served.get("/kernels", run="gpt", **bad).status_code == 400, bad


def test_matrix_peaks_are_peaks_of_the_device_table():
    from tb_attention_plugin.roofline.devices import MATRIX_PEAKS, PEAK_KEYS

    assert MATRIX_PEAKS < set(PEAK_KEYS) and "fp32" not in MATRIX_PEAKS and "fp64" not in MATRIX_PEAKS


def test_an_empty_selection(served):
    d = served.get("/kernels", run="gpt", group=1, q="no such kernel anywhere").json
    assert d["total"] == d["launches"] == 0 and d["rows"] == [] and d["total_time_us"] == 0


def test_launches_are_unchanged(served):
    d = served.get("/kernels", run="gpt", limit=5).json
    assert "grouped" not in d and d["sort"] == "dur_us"
