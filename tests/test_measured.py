"""Hardware counters instead of the model: Nsight Compute exports beside a trace and CUPTI
counter ranges inside it (tb_attention_plugin/roofline/measured.py)."""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest

from helpers import SHARED, needs_shared
from synth import SynthTrace, naive_attention
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cache import ReportCache
from tb_attention_plugin.jsonout import to_json
from tb_attention_plugin.options import Options
from tb_attention_plugin.roofline import measured as M, ncu

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "measured")
DECODE = "decode_gqa_flash.pt.trace.json.gz"
SDPA = "sdpa_flash_fwdbwd_causal.pt.trace.json.gz"
HTA = os.path.join(SHARED, "public", "hta", "cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")

DRAM, TENSOR, FMA = M.DRAM_PCT[0], M.TENSOR_PCT[0], M.FMA_PCT[0]


def counter_label(dram, tensor, fma):
    """validation/compare.py's rule: the 'truth' the engine is checked against."""
    comp = max(tensor, fma)
    if dram >= 60 and dram >= comp:
        return "memory"
    if comp >= 60 and comp > dram:
        return "compute"
    if max(dram, comp) < 40:
        return "latency"
    return "unclear"


def place(tmp_path, trace: str, csvs: dict) -> str:
    """Copy a trace of tests/data/measured and exports (data name -> name beside it) into tmp_path."""
    dst = tmp_path / trace
    shutil.copy(os.path.join(DATA, trace), dst)
    for src, name in csvs.items():
        shutil.copy(os.path.join(DATA, src), tmp_path / name)
    return str(dst)


def report(path: str, **opt) -> dict:
    rep = analyze_path(path, Options(**opt))
    assert rep["status"] == "ok", rep
    return json.loads(to_json(rep))


def kernels(rep: dict) -> list:
    return [k for k in rep["kernels"] if k["kind"] == "kernel"]


# ---------------------------------------------------------------- real Nsight Compute data


def test_ncu_export_named_after_the_trace_joins_every_kernel(tmp_path):
    path = place(tmp_path, DECODE, {"decode_gqa_flash.ncu.csv": DECODE + ".ncu.csv"})
    rep = report(path)
    m = rep["measurements"]
    assert m["source"] == "ncu" and m["file"] == DECODE + ".ncu.csv"
    assert m["kernels_joined"] == m["kernels_total"] == 12 and m["match_rate"] == 1.0
    assert m["window"]["first_row"] == 11 and m["window"]["last_row"] == 22  # the marker (ID 10) is skipped
    assert m["window"]["steps"] == ["ProfilerStep#1"] and m["window"]["equal_windows"] == 1
    rows = {r["ID"]: r for r in ncu.read(os.path.join(DATA, "decode_gqa_flash.ncu.csv")).rows}
    clear = 0
    for k in kernels(rep):
        meas = k["measured"]
        assert meas is not None and meas["source"] == "ncu" and meas["file"] == m["file"]
        r = rows[meas["row"]]
        assert ncu.short_name(r["Kernel Name"]) == ncu.short_name(k["name"])
        assert meas["dram_bytes"] == round(r["dram__bytes_read.sum"] + r["dram__bytes_write.sum"])
        assert meas["flops"] == meas["tensor_flops"] + meas["core_flops"]
        assert meas["tensor_flops"] == round(
            r["sm__ops_path_tensor_src_bf16_dst_fp32.sum"] + r["sm__ops_path_tensor_src_tf32_dst_fp32.sum"]
        )
        assert meas["dram_pct"] == round(r[DRAM], 2) and meas["sm_pct"] is not None
        assert abs(meas["dur_us"] - r["gpu__time_duration.sum"] * 1e6) < 1e-3
        # the report uses the counters
        assert k["memory_util"] == pytest.approx(r[DRAM] / 100, abs=1e-4)
        assert k["compute_util"] == pytest.approx(max(r[TENSOR], r[FMA]) / 100, abs=1e-4)
        assert k["dram_bytes"] == pytest.approx(meas["dram_bytes"], rel=1e-3)
        assert k["estimated"] is False
        assert k["bound_reason"].startswith(f"measured (Nsight Compute): DRAM {r[DRAM]:.0f}%, tensor pipe")
        assert set(meas["replaces"]) >= {"memory_util", "compute_util", "dram_bytes", "bound"}
        label = counter_label(r[DRAM], r[TENSOR], r[FMA])
        if label != "unclear":
            clear += 1
            assert k["bound"] == label, (k["name"], label, k["bound"])
    assert clear >= 10
    split = [k for k in kernels(rep) if "flash_fwd_splitkv_kernel" in k["name"]][0]
    assert (
        split["bound"] == "memory"
        and split["bound_reason"] == "measured (Nsight Compute): DRAM 81%, tensor pipe 43%, FMA pipe 12%"
    )
    # phases follow the measured utilisations
    fused = [p for p in rep["phases"] if p["phase"] == "fused_attention"][0]
    assert fused["memory_util"] == pytest.approx(split["memory_util"], abs=0.05)


def test_export_holding_more_than_the_trace_joins_the_right_window(tmp_path):
    # two exports pasted together (decode_mha_flash, then decode_gqa_flash), generic name
    path = place(tmp_path, DECODE, {"decode_ncu_batch.csv": "decode_ncu_batch.csv"})
    m = report(path)["measurements"]
    assert m["file"] == "decode_ncu_batch.csv" and m["kernels_joined"] == 12 and m["rows"] == 23
    assert (m["window"]["first_row"], m["window"]["last_row"]) == (11, 22) and m["window"]["offset"] == -11


def test_equal_windows_are_told_apart_by_duration(tmp_path):
    # causal and full SDPA fwd+bwd run the same six kernels; only durations differ
    path = place(tmp_path, SDPA, {"sdpa_flash_ncu_batch.csv": "sdpa_flash_ncu_batch.csv"})
    rep = report(path)
    m = rep["measurements"]
    assert m["kernels_joined"] == 6 and m["window"]["equal_windows"] == 2
    assert [k["measured"]["row"] for k in kernels(rep)] == [76, 77, 78, 79, 80, 81]  # the causal rows
    assert "durations agree best" in m["notes"][0]


def test_export_of_another_program_is_not_joined(tmp_path):
    plain = report(place(tmp_path, DECODE, {}))
    assert plain["measurements"] is None
    path = place(tmp_path, DECODE, {"other_program.ncu.csv": "other_program.ncu.csv"})
    rep = report(path)
    assert rep["measurements"]["kernels_joined"] == 0 and rep["measurements"]["source"] is None
    assert rep["measurements"]["candidates"][0]["accepted"] is False
    assert any("other_program.ncu.csv" in w and "do not line up" in w for w in rep["warnings"])
    assert all(k["measured"] is None for k in rep["kernels"])
    assert [k["bound"] for k in rep["kernels"]] == [k["bound"] for k in plain["kernels"]]
    assert [k["bound_reason"] for k in rep["kernels"]] == [k["bound_reason"] for k in plain["kernels"]]


def test_files_that_are_not_raw_pages_are_ignored(tmp_path):
    path = place(tmp_path, DECODE, {})
    (tmp_path / "my_ncu_notes.csv").write_text("kernel,comment\nflash,fast\n")
    rep = report(path)
    assert rep["measurements"] is None and not rep["warnings"]
    # named after the trace, a bad file is reported
    (tmp_path / (DECODE + ".ncu.csv")).write_text("kernel,comment\n")
    rep = report(path)
    assert rep["measurements"] is None and any("not an Nsight Compute raw page" in w for w in rep["warnings"])


def test_cache_key_follows_the_export(tmp_path):
    path = place(tmp_path, DECODE, {})
    cache = ReportCache(str(tmp_path / "cache"))
    first = analyze_path(path, Options(), cache=cache)
    assert first["measurements"] is None
    st = os.stat(path)
    key0 = cache.key(path, st, Options().key())
    shutil.copy(os.path.join(DATA, "decode_gqa_flash.ncu.csv"), tmp_path / (DECODE + ".ncu.csv"))
    assert cache.key(path, st, Options().key()) != key0
    again = analyze_path(path, Options(), cache=cache)
    assert again["measurements"]["kernels_joined"] == 12
    assert analyze_path(path, Options(), cache=cache)["measurements"]["kernels_joined"] == 12  # cached


# ---------------------------------------------------------------- synthetic exports


def write_ncu(path, rows: list, process: int = 4242) -> str:
    """A minimal ncu raw page: rows are (kernel name, duration ns, dram %, tensor %, fma %, dram bytes)."""
    metrics = [
        "gpu__time_duration.sum",
        DRAM,
        TENSOR,
        FMA,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    ]
    ident = ["ID", "Process ID", "Process Name", "Kernel Name", "Context", "Stream", "Device"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(ident + metrics)
        w.writerow([""] * len(ident) + ["ns", "%", "%", "%", "%", "byte", "byte", ""])
        for i, (name, d, dram, tensor, fma, nbytes) in enumerate(rows):
            w.writerow(
                [
                    i,
                    process,
                    "python3",
                    name,
                    1,
                    7,
                    0,
                    f"{d:,.0f}",
                    dram,
                    tensor,
                    fma,
                    50,
                    f"{nbytes * 0.75:,.0f}",
                    f"{nbytes * 0.25:,.0f}",
                    "1,000,000",
                ]
            )
    return str(path)


def three_steps(tmp_path) -> tuple:
    t = SynthTrace()
    for step in (1, 2, 3):
        with t.step(step):
            naive_attention(t)
            for ev in t.events:  # give each step its own durations: step n runs n times longer
                if ev.get("cat") == "kernel" and not ev.get("_scaled"):
                    ev["dur"] = round(ev["dur"] * step, 3)
                    ev["_scaled"] = True
    path = t.write(tmp_path / "w.1.pt.trace.json")
    ks = [ev for ev in t.events if ev.get("cat") == "kernel"]
    return path, ks


def test_one_step_of_several(tmp_path):
    path, ks = three_steps(tmp_path)
    assert len(ks) == 24
    step2 = ks[8:16]
    write_ncu(tmp_path / "w.1.ncu.csv", [(k["name"], k["dur"] * 1e3, 85.0, 2.0, 1.0, 1e8) for k in step2])
    rep = report(path)
    m = rep["measurements"]
    assert m["kernels_joined"] == 8 and m["kernels_total"] == 24 and m["match_rate"] == 1.0
    assert m["window"]["steps"] == ["ProfilerStep#2"] and m["window"]["equal_windows"] == 3
    got = [k["measured"] is not None for k in rep["kernels"]]
    assert got == [False] * 8 + [True] * 8 + [False] * 8
    for k in rep["kernels"][8:16]:
        assert k["bound"] == "memory" and k["memory_util"] == 0.85 and k["compute_util"] == 0.02
        assert k["dram_bytes"] == pytest.approx(1e8) and k["estimated"] is False
    # --step keeps the rows of that step, still measured
    rep2 = report(path, step="2")
    assert all(k["measured"] for k in rep2["kernels"]) and len(rep2["kernels"]) == 8


def test_launch_count_subset_and_short_sequences(tmp_path):
    path, ks = three_steps(tmp_path)
    # --launch-skip 10 --launch-count 4: four kernels from the middle of step 2
    write_ncu(tmp_path / "w.1.ncu.csv", [(k["name"], k["dur"] * 1e3, 30.0, 70.0, 5.0, 1e6) for k in ks[10:14]])
    rep = report(path)
    assert rep["measurements"]["kernels_joined"] == 4
    assert [i for i, k in enumerate(rep["kernels"]) if k["measured"]] == [10, 11, 12, 13]
    assert all(k["bound"] == "compute" for k in rep["kernels"][10:14])
    # two kernels are too few to trust a match
    write_ncu(tmp_path / "w.1.ncu.csv", [(k["name"], k["dur"] * 1e3, 30.0, 70.0, 5.0, 1e6) for k in ks[10:12]])
    rep = report(path)
    assert rep["measurements"]["kernels_joined"] == 0 and rep["warnings"]


def test_several_processes_in_one_export(tmp_path):
    path, ks = three_steps(tmp_path)
    f = tmp_path / "w.1.ncu.csv"
    write_ncu(f, [("unrelated_kernel", 1e3, 1, 1, 1, 1)] * 5, process=1)
    with open(f) as fh:
        head = fh.read()
    write_ncu(tmp_path / "b.csv", [(k["name"], k["dur"] * 1e3, 70.0, 1.0, 1.0, 1e6) for k in ks[:8]], process=2)
    with open(tmp_path / "b.csv") as fh:
        body = fh.read().split("\n", 2)[2]
    os.remove(tmp_path / "b.csv")
    with open(f, "w") as fh:
        fh.write(head + body)
    m = report(path)["measurements"]
    assert m["kernels_joined"] == 8 and m["group"] == "process 2"


# ---------------------------------------------------------------- CUPTI ranges


FULL = {
    "gpu__time_duration.sum": 12000,
    DRAM: 20.0,
    TENSOR: 75.0,
    FMA: 10.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 80.0,
    "dram__bytes_read.sum": 3_000_000,
    "dram__bytes_write.sum": 1_000_000,
    "sm__ops_path_tensor_src_bf16.sum": 4_000_000_000,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 3_000_000_000,
}  # part of the plain one
SASS = {
    f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum": 0
    for op in ("dadd", "dfma", "dmul", "hadd", "hfma", "hmul", "fadd", "ffma", "fmul")
}


def test_extract_counts_flops_once():
    v = M.extract(
        {
            **FULL,
            **SASS,
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 10,
            "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 3,
            "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": 2,
        }
    )
    assert v.tensor_flops == 4e9 and v.core_flops == 2 * 10 + 3 + 2 * 2 and v.flops == 4e9 + 27
    assert v.dram_bytes == 4e6 and v.dur_us == 12.0 and (v.dram_pct, v.tensor_pct, v.fma_pct) == (20, 75, 10)
    only_dst = M.extract(
        {"sm__ops_path_tensor_src_fp16_dst_fp16.sum": 5, "sm__ops_path_tensor_src_fp16_dst_fp32.sum": 7}
    )
    assert only_dst.tensor_flops == 12 and only_dst.core_flops is None and only_dst.dram_bytes is None
    assert M.extract({}).flops is None


def synth_with_ranges(metrics_for) -> SynthTrace:
    t = SynthTrace()
    with t.step(1):
        naive_attention(t)
    for ev in [e for e in t.events if e.get("cat") == "kernel"]:
        t.counter_range(ev["name"], metrics_for(ev))
    return t


def test_cupti_ranges_join_kernels_by_name_and_order(tmp_path):
    t = synth_with_ranges(lambda ev: FULL)
    rep = report(t.write(tmp_path / "c.json"))
    m = rep["measurements"]
    assert m["source"] == "cupti" and m["file"] is None and m["kernels_joined"] == 8 == m["kernels_total"]
    for k in kernels(rep):
        meas = k["measured"]
        assert meas["source"] == "cupti" and meas["dram_bytes"] == 4_000_000 and meas["tensor_pct"] == 75.0
        assert k["bound"] == "compute" and k["compute_util"] == 0.75 and k["memory_util"] == 0.2
        assert k["bound_reason"].startswith("measured (CUPTI): DRAM 20%, tensor pipe 75%, FMA pipe 10%")
        assert k["estimated"] is False


def test_cupti_flop_counters_only(tmp_path):
    """HTA-style counters (CUDA-core instruction counts, no DRAM): only what is measured is used."""

    def metrics(ev):
        m = dict(SASS)
        m["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] = 4e8
        return m

    t = synth_with_ranges(metrics)
    path = t.write(tmp_path / "c.json")
    plain_t = SynthTrace()
    with plain_t.step(1):
        naive_attention(plain_t)
    plain = report(plain_t.write(tmp_path / "p.json"))
    rep = report(path)
    m = rep["measurements"]
    assert m["kernels_joined"] == 8
    assert any("DRAM traffic" in n for n in m["notes"]) and any("tensor-pipe work" in n for n in m["notes"])
    for k, p in zip(kernels(rep), kernels(plain)):
        meas = k["measured"]
        assert meas["flops"] == 8e8 and meas["dram_pct"] is None and meas["dram_bytes"] is None
        assert k["memory_util"] == p["memory_util"]  # memory stays modelled
        if p["peak"] in M.MATRIX_PEAKS:
            # CUDA-core counts say nothing about a tensor-core kernel: the model's verdict stands
            assert "compute_util" not in meas["replaces"] and k["bound"] == p["bound"]
            assert k["compute_util"] == p["compute_util"] and "not used" in k["bound_reason"]
        else:
            assert meas["replaces"] == ["compute_util", "bound"]
            util = 8e8 / (k["dur_us"] * 1e-6) / k["peak_flops_per_s"]
            # a utilisation is a fraction of its roof: a count above it is shown at the roof, and said
            assert k["compute_util"] == pytest.approx(min(util, 1.0), rel=1e-3)
            assert (util > 1) == ("above the roof, shown at 100%" in k["bound_reason"])
            assert "memory modelled" in k["bound_reason"] and k["estimated"] == p["estimated"]


def test_ranges_without_kernels_are_listed(tmp_path):
    t = SynthTrace()
    with t.step(1):
        naive_attention(t)
    names = [e["name"] for e in t.events if e.get("cat") == "kernel"]
    t.events = [e for e in t.events if e.get("cat") != "kernel"]  # range-profiler mode: no kernels
    for nm in names:
        t.counter_range(nm, FULL)
    rep = report(t.write(tmp_path / "r.json"))
    m = rep["measurements"]
    assert m["source"] == "cupti" and m["kernels_joined"] == 0 and m["rows"] == 8
    assert [r["name"] for r in m["ranges"]] == names
    assert [r["op"] for r in m["ranges"]][:2] == ["aten::addmm", "aten::bmm"]
    assert m["ranges"][0]["measured"]["dram_bytes"] == 4_000_000 and m["ranges"][0]["metrics"] == FULL
    assert m["ranges_total"] == {"count": 8, "flops": 8 * 4_000_000_000, "dram_bytes": 8 * 4_000_000}
    assert [n["code"] for n in rep["notices"]].count("counters_only") == 1


@needs_shared
def test_hta_range_profiler_trace():
    if not os.path.exists(HTA):
        pytest.skip("HTA cupti_profiler trace not available")
    rep = report(HTA)
    m = rep["measurements"]
    assert m["source"] == "cupti" and m["rows"] == 77 and len(m["ranges"]) == 77
    assert all(r["op"] for r in m["ranges"])  # 77 ranges, 77 cudaLaunchKernel: one op each
    assert m["ranges_total"]["flops"] > 1e10 and m["ranges_total"]["dram_bytes"] is None
    first = m["ranges"][0]["measured"]
    assert first["flops"] == 2 * 38731776 + 2 * 4866048 and first["dur_us"] is None
    assert any("DRAM traffic" in n for n in m["notes"])
    assert "counters_only" in [n["code"] for n in rep["notices"]]


def test_roofline_points_say_measured(tmp_path):
    from tb_attention_plugin.server import index

    path = place(tmp_path, DECODE, {"decode_gqa_flash.ncu.csv": DECODE + ".ncu.csv"})
    loaded = index.build(analyze_path(path))
    pts = index.roofline(loaded, scope="all", group=False)["points"]
    assert pts and all(p["measured"] for p in pts)
    rows = {k["id"]: k for k in loaded.report()["kernels"]}
    for p in pts:
        assert p["memory_util"] == rows[p["id"]]["memory_util"]
    grouped = index.roofline(loaded, scope="all", group=True)["points"]
    assert all(p["measured"] for p in grouped)


def test_ncu_helpers(tmp_path):
    assert ncu.is_raw_page('"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n')
    assert not ncu.is_raw_page("kernel,comment\n")
    for n in ("a.ncu.csv", "run_NCU_1.csv", "ncu.csv"):
        assert ncu.is_sidecar_name(n)
    for n in ("a.csv", ".x.ncu.csv", "ncu.json"):
        assert not ncu.is_sidecar_name(n)
    trace = tmp_path / "w.5.pt.trace.json.gz"
    trace.write_bytes(b"")
    for n in ("a_ncu.csv", "w.5.ncu.csv", "w.5.pt.trace.json.gz.ncu.csv"):
        (tmp_path / n).write_text("x")
    assert [x[0] for x in ncu.sidecar_files(str(trace))] == ["w.5.ncu.csv", "w.5.pt.trace.json.gz.ncu.csv", "a_ncu.csv"]
    assert ncu.sidecar_signature(str(trace)).startswith("\0ncu:")
    t = ncu.parse(open(os.path.join(DATA, "decode_gqa_flash.ncu.csv")).read(), base_units=True, keep=M.wanted_metric)
    assert len(t.rows) == 13 and DRAM in t.rows[1] and "launch__grid_size" not in t.rows[1]
    assert t.rows[1]["gpu__time_duration.sum"] < 1e-3  # seconds after base_units


def test_a_failure_in_the_counters_leaves_the_model(tmp_path, monkeypatch):
    path = place(tmp_path, DECODE, {})
    plain = report(path)
    shutil.copy(os.path.join(DATA, "decode_gqa_flash.ncu.csv"), tmp_path / (DECODE + ".ncu.csv"))
    calls = []

    def boom(k, *a, **kw):
        calls.append(k)
        if len(calls) == 5:
            raise RuntimeError("bad counter")
        return real(k, *a, **kw)

    real = M._overlay
    monkeypatch.setattr(M, "_overlay", boom)
    rep = report(path)
    assert rep["measurements"] is None and any("hardware counters ignored" in w for w in rep["warnings"])
    for a, b in zip(rep["kernels"], plain["kernels"]):
        assert {k: v for k, v in a.items()} == b
