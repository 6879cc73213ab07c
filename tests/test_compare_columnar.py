"""kernel_groups() over columns (the engine's table and the dashboard's) gives exactly what the
row-by-row definition gives, and normalises each distinct kernel name once (on a 1M-event trace
the per-kernel regexes made the dashboard's /compare take ~1 s; benchmarks/bench_routes.py)."""

import json

import numpy as np
import pytest

from helpers import sample
from tb_attention_plugin import compare
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.server.index import build
from tb_attention_plugin.table import Coded, KernelTable


@pytest.fixture(scope="module")
def reports():
    out = {}
    for run in ("gpt4l_sdpa_train", "gpt4l_naive_train", "sdpa_flash_s2048_fwd"):
        rep = analyze_path(sample(run))
        assert rep["status"] == "ok" and isinstance(rep["kernels"], KernelTable)
        out[run] = rep
    return out


def _same(a, b):
    assert json.dumps(a) == json.dumps(b)  # values, key order and list order


def _variants(report):
    """The same kernels as the engine's table, a list of row dicts and the dashboard's table."""
    table = report["kernels"]
    return table, list(table), build(report).kernels


@pytest.mark.parametrize("run", ["gpt4l_sdpa_train", "gpt4l_naive_train", "sdpa_flash_s2048_fwd"])
def test_columnar_groups_equal_row_groups(reports, run):
    engine, rows, dashboard = _variants(reports[run])
    want = compare.kernel_groups(rows)  # the row-by-row loop
    assert want
    _same(compare.kernel_groups(engine), want)
    _same(compare.kernel_groups(dashboard), want)


def _edited(report):
    """A copy whose attention kernels include nameless ones, phases and directions that are
    null, and null directions mixed with "forward" (both count as forward)."""
    table = report["kernels"]
    cols = dict(table.columns)
    att = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
    assert len(att) > 20
    names, phases, dirs = (cols[c].tolist() for c in ("name", "phase", "direction"))
    for k, i in enumerate(att.tolist()):
        if k % 7 == 0:
            names[i] = None
        if k % 5 == 1:
            phases[i] = None
        if k % 3 == 2:
            dirs[i] = None if dirs[i] == "forward" else dirs[i]
    dur = np.array(cols["dur_us"], dtype=np.float64)
    dur[att[1::4]] = dur[att[0::4]][: len(att[1::4])]  # ties in time
    cols.update(
        name=Coded.from_values(names), phase=Coded.from_values(phases), direction=Coded.from_values(dirs), dur_us=dur
    )
    return dict(report, kernels=KernelTable(cols, table.extras))


def test_columnar_groups_with_nulls_and_ties(reports):
    edited = _edited(reports["gpt4l_sdpa_train"])
    engine, rows, dashboard = _variants(edited)
    want = compare.kernel_groups(rows)
    assert any(g["phase"] is None for g in want)
    assert sum(g["calls"] for g in want) < sum(1 for r in rows if r["attention"])  # the nameless are left out
    _same(compare.kernel_groups(engine), want)
    # the dashboard's table keeps a missing name as "" (a text column), which is grouped as such
    _same(
        compare.kernel_groups(dashboard),
        compare.kernel_groups([dict(r, name="" if r["name"] is None else r["name"]) for r in rows]),
    )


def test_compare_reports_same_from_columns_and_rows(reports):
    base, new = reports["gpt4l_naive_train"], reports["gpt4l_sdpa_train"]
    want = compare.compare_reports(dict(base, kernels=list(base["kernels"])), dict(new, kernels=list(new["kernels"])))
    _same(compare.compare_reports(base, new), want)
    _same(compare.compare_reports(dict(base, kernels=build(base).kernels), dict(new, kernels=build(new).kernels)), want)


def test_each_kernel_name_is_normalised_once(reports, monkeypatch):
    calls = []
    real = compare.kernel_group
    monkeypatch.setattr(compare, "kernel_group", lambda name: calls.append(name) or real(name))
    report = reports["gpt4l_naive_train"]
    for kernels in _variants(report):
        calls.clear()
        compare.kernel_groups(kernels)
        att_names = [r["name"] for r in report["kernels"] if r["attention"]]
        assert len(att_names) > len(set(att_names))  # names do repeat in a training trace
        assert sorted(calls) == sorted(set(att_names))
