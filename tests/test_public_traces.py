"""Every public trace in ../shared/traces/public analyses without error and says what it lacks.
(These traces may not be copied into the repository; the tests skip without ../shared.)"""

import glob
import os

import pytest

from helpers import SHARED, needs_shared
from tb_attention_plugin.analyze import analyze_path

PUBLIC = sorted(glob.glob(os.path.join(SHARED, "public", "**", "*.json*"), recursive=True))


@needs_shared
@pytest.mark.parametrize("path", PUBLIC, ids=[os.path.relpath(p, SHARED) for p in PUBLIC])
def test_public_trace_analyses(path):
    rep = analyze_path(path)
    assert rep["status"] == "ok", rep.get("error")
    codes = {n["code"] for n in rep["notices"]}
    if not rep["kernels"]:
        assert "no_gpu_kernels" in codes
    elif not rep["attention_kernels"]:
        assert "no_attention" in codes  # none of these traces has attention
    ids = [k["id"] for k in rep["kernels"]]
    assert len(ids) == len(set(ids))  # every GPU activity once


@needs_shared
def test_specific_public_formats():
    def rep(rel):
        return analyze_path(os.path.join(SHARED, "public", rel))

    legacy = rep("tb_plugin/worker0.1623143089861.pt.trace.json.gz")
    assert legacy["trace"]["format"] == "kineto-legacy" and legacy["device"]["key"] == "V100-SXM2"
    kernels = [k for k in legacy["kernels"] if k["kind"] == "kernel"]
    assert sum(k["op"] is not None for k in kernels) / len(kernels) > 0.95  # linked through 'external id'
    amd = rep("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert amd["device"]["key"] == "MI250-GCD"
    cpu = rep("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert [n["code"] for n in cpu["notices"]] == ["no_gpu_kernels"]
    noshape = rep("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    assert "no_shapes" in {n["code"] for n in noshape["notices"]}
    assert all(k["bound"] in ("unknown", "memory", "latency") for k in noshape["kernels"])
    ns = rep("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert ns["gpu_time_us"] > 0
