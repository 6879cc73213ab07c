"""The roofline route's points: the rows behind them are fetched in one batch, and grouped
points are exactly the (name, phase, direction, peak) groups of the kernel table. On a 1M-event
trace a row at a time made ``group=0`` take ~0.3 s (benchmarks/bench_routes.py)."""

import pytest

from helpers import sample
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.server import index


@pytest.fixture(scope="module")
def report():
    rep = analyze_path(sample("gpt4l_sdpa_train"))
    assert rep["status"] == "ok"
    return rep


class Counting:
    """A row store that counts the calls made to it."""

    def __init__(self, store):
        self.store, self.calls = store, 0

    def rows(self, idx, fields=None):
        self.calls += 1
        return self.store.rows(idx, fields=fields)

    def nbytes(self):
        return self.store.nbytes()


@pytest.mark.parametrize("group", [False, True])
def test_point_rows_in_one_batch(report, group):
    loaded = index.build(report)
    full = index.roofline(loaded, scope="all", group=group, limit=20000)
    assert len(full["points"]) > 10
    loaded.kernels.store = Counting(loaded.kernels.store)
    again = index.roofline(loaded, scope="all", group=group, limit=20000)
    assert again == full
    assert loaded.kernels.store.calls == 1


def test_ungrouped_points_carry_their_kernel_fields(report):
    loaded = index.build(report)
    t = loaded.kernels
    out = index.roofline(loaded, scope="all", group=False, limit=150)
    pts = out["points"]
    assert len(pts) == 150 and out["omitted"]["over_limit"] > 0
    for p in pts:
        row = index.find_kernel(t, p["id"])
        for k in index._POINT_FIELDS:
            assert p[k] == row.get(k), k
        assert p["time_us"] == round(row["dur_us"], 3) and p["flops"] == row["flops"] and p["bytes"] == row["bytes"]
    assert [p["time_us"] for p in pts] == sorted((p["time_us"] for p in pts), reverse=True)


@pytest.mark.parametrize("scope", ["attention", "all", "other"])
def test_grouped_points_are_the_groups(report, scope):
    loaded = index.build(report)
    out = index.roofline(loaded, scope=scope, group=True, limit=20000)
    want = {}
    for r in report["kernels"]:
        if (
            r["kind"] != "kernel"
            or not r["flops"]
            or not r["bytes"]
            or not r["dur_us"]
            or (scope == "attention" and not r["attention"])
            or (scope == "other" and r["attention"])
        ):
            continue
        g = want.setdefault((r["name"], r["phase"], r["direction"], r["peak"]), [0, 0.0, 0.0, 0.0, None])
        g[0] += 1
        g[1] += r["dur_us"]
        g[2] += r["flops"]
        g[3] += r["bytes"]
        if g[4] is None or r["dur_us"] > g[4][0]:
            g[4] = (r["dur_us"], r["bound"])
    got = {(p["name"], p["phase"], p["direction"], p["peak"]): p for p in out["points"]}
    assert set(got) == set(want) and out["omitted"]["over_limit"] == 0
    for k, (n, t, fl, by, longest) in want.items():
        p = got[k]
        assert p["count"] == n and p["time_us"] == pytest.approx(t, abs=1e-3)
        assert p["flops"] == pytest.approx(fl) and p["bytes"] == pytest.approx(by)
        assert p["bound"] == longest[1]  # the group's longest kernel speaks for it
    assert [p["time_us"] for p in out["points"]] == sorted((p["time_us"] for p in out["points"]), reverse=True)


def test_packed_rows_give_the_same_points(report):
    """A report whose kernels are plain row dicts (msgpack store) gives the same points."""
    columnar = index.build(report)
    packed = index.build(dict(report, kernels=list(report["kernels"])))
    assert isinstance(packed.kernels.store, index._PackedRows)
    for group in (False, True):
        assert index.roofline(packed, scope="all", group=group) == index.roofline(columnar, scope="all", group=group)


def test_flex_points_say_they_are_upper_bounds():
    """FlexAttention's dense FLOPs and bytes are upper bounds: its points carry ``upper_bound`` so
    that the tab marks their figures "≤"; exact kernels' points do not."""
    import glob
    import os

    path = glob.glob(
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "data",
            "modern",
            "flex_causal_fwdbwd",
            "*.json.gz",
        )
    )[0]
    out = index.roofline(index.build(analyze_path(path)), scope="attention", group=True)
    flex = [p for p in out["points"] if p["name"].startswith("triton_tem_fused_flex_attention")]
    assert flex and all(p["upper_bound"] is True for p in flex)
    assert any(not p["upper_bound"] for p in out["points"])
