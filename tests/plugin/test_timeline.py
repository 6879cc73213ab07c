"""The Timeline's server-side decimation (server/timeline.py) and the /timeline and /overview
routes."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import Served, put
from tb_attention_plugin.server.overview import overview_row
from tb_attention_plugin.server.timeline import NON_ATTENTION, Columns, decimate


def _cols(ts, dur, lane=None, cat=None, inst=None, step=None) -> Columns:
    n = len(ts)
    lane = np.zeros(n, dtype=np.int64) if lane is None else np.asarray(lane, dtype=np.int64)
    return Columns(
        ts=np.asarray(ts, dtype=np.float64),
        dur=np.asarray(dur, dtype=np.float64),
        lane=lane,
        lanes=[(0, s) for s in range(int(lane.max()) + 1 if n else 1)],
        cat=np.full(n, NON_ATTENTION, dtype=np.int32) if cat is None else np.asarray(cat, dtype=np.int32),
        cats=["softmax", "mask", "fused_attention"],
        instance=np.full(n, -1, dtype=np.int64) if inst is None else np.asarray(inst, dtype=np.int64),
        ids=np.arange(n, dtype=np.int64),
        step=np.full(n, -1, dtype=np.int32) if step is None else np.asarray(step, dtype=np.int32),
        steps=["ProfilerStep#1", "ProfilerStep#2"],
    )


def test_wide_kernels_stay_single_and_keep_their_id():
    c = _cols([0, 100, 200], [50, 50, 50], cat=[0, 1, NON_ATTENTION])
    d = decimate(c, 0, 250, 250)  # 1 µs per pixel: every kernel is 50 px wide
    r = d["lanes"][0]["runs"]
    assert r["id"] == [0, 1, 2] and r["n"] == [1, 1, 1]
    assert r["cat"] == [0, 1, NON_ATTENTION]
    assert r["start"] == [0, 100, 200] and r["end"] == [50, 150, 250]


def test_narrow_kernels_merge_into_one_run_per_pixel_gap():
    # 10 000 kernels of 0.1 µs every 0.2 µs, then a gap, then 10 000 more: two runs at 1 µs/px
    a = np.arange(10000) * 0.2
    ts = np.concatenate([a, a + 5000])
    c = _cols(ts, np.full(len(ts), 0.1), cat=[0] * 10000 + [1] * 10000)
    d = decimate(c, 0, 7000, 7000)
    r = d["lanes"][0]["runs"]
    assert r["n"] == [10000, 10000]
    assert r["id"] == [-1, -1] and r["cat"] == [0, 1]
    assert sum(r["busy"]) == pytest.approx(2000.0)
    # the answer is bounded by the width, whatever the number of kernels
    many = _cols(np.arange(100000) * 0.5, np.full(100000, 0.4))
    assert len(decimate(many, None, None, 800)["lanes"][0]["runs"]["n"]) <= 800


def test_dominant_category_and_window_clipping():
    c = _cols([0, 0.3, 0.6, 10], [0.2, 0.2, 0.2, 20], cat=[0, 1, 1, 2])
    d = decimate(c, 5, 15, 10)  # only the last kernel overlaps; clipped to the window
    r = d["lanes"][0]["runs"]
    assert d["t0"] == 5 and r["start"] == [5.0] and r["end"] == [10.0] and r["id"] == [3]
    d = decimate(c, 0, 1, 1)  # everything in one pixel: mask (1) holds most time
    assert d["lanes"][0]["runs"]["cat"] == [1]


def test_lanes_calls_and_steps():
    c = _cols(
        [0, 10, 20, 30],
        [5, 5, 5, 5],
        lane=[0, 1, 0, 0],
        cat=[0, 2, 0, NON_ATTENTION],
        inst=[7, 8, 7, -1],
        step=[0, 0, 1, 1],
    )
    d = decimate(c, None, None, 1000)
    assert [(ln["device"], ln["stream"]) for ln in d["lanes"]] == [(0, 0), (0, 1)]
    assert d["lanes"][0]["kernels"] == 3 and d["lanes"][1]["kernels"] == 1
    assert d["lanes"][0]["attention_us"] == 10 and d["lanes"][0]["busy_us"] == 15
    calls = d["lanes"][0]["calls"]
    assert calls["start"] == [0] and calls["end"] == [25] and calls["n"] == [1]
    steps = [(s["name"], s["t0"], s["t1"]) for s in d["steps"]]
    assert steps == [("ProfilerStep#1", 0, 15), ("ProfilerStep#2", 20, 35)]
    empty = decimate(_cols([], []), None, None, 100)
    assert empty["lanes"][0]["runs"]["n"] == []


def test_overview_row():
    s = {
        "status": "ok",
        "attention_time_us": 100.0,
        "attention_share": 0.5,
        "gpu_busy_us": 200.0,
        "phases": [
            {"phase": "softmax", "label": "softmax", "direction": "forward", "time_us": 60, "share": 0.6},
            {"phase": "mask", "label": "mask", "direction": "forward", "time_us": 40, "share": 0.4},
        ],
        "bound_time_us": {"memory": 60, "latency": 40},
        "notices": [{"code": "no_stack", "message": "m", "fix": "f"}],
        "advice": [{"id": "fuse_attention", "title": "t", "severity": "high", "estimated_gain_us": 50}],
        "trace": {"truncated": False},
    }
    r = overview_row(s)
    assert r["top_phase"]["phase"] == "softmax" and r["advice"] == 1 and r["top_advice"]["id"] == "fuse_attention"
    assert r["bound_time_us"] == {"compute": 0.0, "memory": 60, "latency": 40, "unknown": 0.0}
    assert r["notices"] == [{"code": "no_stack", "message": "m"}] and r["partial"] is False
    assert overview_row({})["top_phase"] is None


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "gpt", "gpt4l_sdpa_train")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    s = Served(logdir)
    s.settled(2)
    yield s
    s.close()


def test_timeline_route(served):
    r = served.get("/timeline", run="gpt", width=600)
    assert r.status_code == 200, r.data
    d = r.json
    assert d["state"] == "ready" and d["lanes"] and d["steps"]
    kernels = served.get("/kernels", run="gpt", scope="all", limit=1).json["all"]
    assert sum(ln["kernels"] for ln in d["lanes"]) == kernels
    for lane in d["lanes"]:
        runs = lane["runs"]
        assert len(runs["start"]) <= 2 * 600
        assert all(0 <= a <= b <= d["t1"] - d["t0"] + 1e-6 for a, b in zip(runs["start"], runs["end"]))
        assert all(c in range(-1, len(d["categories"])) for c in runs["cat"])
    # a single kernel's id names a real kernel
    step = d["steps"][0]
    z = served.get("/timeline", run="gpt", t0=step["t0"], t1=step["t0"] + 200, width=2000).json
    ids = [i for lane in z["lanes"] for i in lane["runs"]["id"] if i >= 0]
    assert ids and served.get("/kernel", run="gpt", id=ids[0]).status_code == 200
    assert served.get("/timeline", run="gpt", t0=5, t1=1).status_code == 400
    assert served.get("/timeline", run="gpt", t0="nan").status_code == 400
    assert served.get("/timeline", run="nope").status_code == 404


def test_overview_route(served):
    d = served.get("/overview").json
    rows = {r["run"]: r for r in d["runs"]}
    assert set(rows) == {"gpt", "flash"}
    assert rows["gpt"]["state"] == "ready" and rows["gpt"]["attention_time_us"] > 0
    assert rows["gpt"]["top_phase"]["phase"]
    assert abs(sum(rows["gpt"]["bound_time_us"].values()) - rows["gpt"]["attention_time_us"]) < 1.0


def test_kernels_search_by_a_whole_long_kernel_name(served):
    """The timeline and the roofline select a kernel by searching its full name (C++ names run to
    hundreds of characters)."""
    rows = served.get("/kernels", run="gpt", scope="all", sort="name", limit=1000).json["rows"]
    name = max((r["name"] for r in rows), key=len)
    assert len(name) > 200
    r = served.get("/kernels", run="gpt", scope="all", q=name)
    assert r.status_code == 200, r.data
    assert r.json["total"] >= 1 and all(x["name"] == name for x in r.json["rows"])


def test_columns_from_engine_table_and_packed_rows_agree():
    """The loaded kernel table holds either the engine's columns or packed row dicts (older cache
    entries); the timeline reads both the same way."""
    from conftest import sample_file
    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.server.index import build
    from tb_attention_plugin.server.timeline import columns_of

    r = analyze_path(sample_file("gpt4l_sdpa_train"))
    a = columns_of(build(r).kernels)
    r["kernels"] = list(r["kernels"])
    b = columns_of(build(r).kernels)
    assert a.lanes == b.lanes
    for f in ("ts", "dur", "lane", "instance", "ids"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f

    def names(codes, vocab):  # the vocabularies may list values in another order
        return [vocab[c] if c >= 0 else None for c in codes.tolist()]

    assert names(a.cat, a.cats) == names(b.cat, b.cats)
    assert names(a.step, a.steps) == names(b.step, b.steps)
    assert (a.instance >= 0).any() and (a.cat >= 0).any()
