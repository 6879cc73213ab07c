"""Busy time as interval unions, communication apart (trace/busy.py, report fields)."""

import glob
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from synth import SynthTrace, mlp_and_loss, naive_attention  # noqa: E402
from tb_attention_plugin.analyze import analyze_path  # noqa: E402
from tb_attention_plugin.trace.busy import union_ns  # noqa: E402

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def test_union_of_intervals():
    s = np.array([0, 5, 20, 2], dtype=np.int64)
    e = np.array([10, 8, 30, 4], dtype=np.int64)
    assert union_ns(s, e) == 20
    assert union_ns(s[:0], e[:0]) == 0


def _rank(tmp_path, name: str, nccl_us: float) -> dict:
    """One data-parallel rank: attention and an MLP on stream 7, and an all-reduce on stream 20
    that starts with the attention kernels (overlapping them) and lasts ``nccl_us``."""
    t = SynthTrace()
    with t.step(1):
        start = t.gpu_now
        naive_attention(t)
        mlp_and_loss(t)
        with t.op("nccl:all_reduce"):
            ev = t.kernel(NCCL, dur=nccl_us, stream=20)
    ev["ts"] = round(start + 5.0, 3)  # launched early on its own stream: overlaps compute
    rep = analyze_path(t.write(tmp_path / f"{name}.json"))
    assert rep["status"] == "ok", rep
    return rep


def test_ranks_of_one_model_get_one_share_over_compute_busy_time(tmp_path):
    a, b = _rank(tmp_path, "r0", 50.0), _rank(tmp_path, "r1", 400.0)
    for r in (a, b):
        c = r["communication"]
        assert c["kernels"] == 1 and c["busy_us"] == c["time_us"]
        assert 0 < c["overlap_with_attention_us"] <= c["overlap_with_compute_us"] <= c["busy_us"]
        assert r["attention_busy_us"] <= r["compute_busy_us"] <= r["gpu_busy_us"] <= r["span_us"]
        assert r["attention_time_us"] <= r["compute_busy_us"]
        assert r["idle_us"] == pytest.approx(r["span_us"] - r["gpu_busy_us"], abs=1e-3)
        assert r["attention_share"] == pytest.approx(r["attention_time_us"] / r["compute_busy_us"], abs=1e-4)
        streams = {s["stream"]: s for s in r["streams"]}
        assert streams[20]["communication"] and not streams[7]["communication"]
        assert streams[20]["kernels"] == 1 and streams[20]["busy_us"] == c["busy_us"]
    # the longer wait for peers changes GPU busy time, not attention's share of the compute
    assert a["gpu_busy_us"] != b["gpu_busy_us"]
    assert a["attention_share"] == b["attention_share"]
    assert a["communication"]["overlap_with_compute_us"] < b["communication"]["overlap_with_compute_us"]


def test_recorded_gloo_ddp_ranks_share_attention_of_compute_alike():
    """tests/data/ddp2: a 2-rank gloo DDP GPT on H200s. Gloo stages gradients through the host:
    the DtoH copies launched inside c10d::allreduce_ and the HtoD copies back on the same streams
    are communication, not compute."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sorted(glob.glob(os.path.join(here, "data", "ddp2", "*", "*.json.gz")))
    assert len(paths) == 2
    a, b = (analyze_path(p) for p in paths)
    for r in (a, b):
        c = r["communication"]
        assert c["kernels"] == 24 and c["busy_us"] > r["compute_busy_us"]  # half the busy time is waiting
        assert r["compute_busy_us"] + c["busy_us"] - c["overlap_with_compute_us"] == pytest.approx(
            r["gpu_busy_us"], abs=0.01
        )
        assert r["attention_share"] == pytest.approx(r["attention_time_us"] / r["compute_busy_us"], abs=1e-4)
    assert abs(a["attention_share"] - b["attention_share"]) < 0.005
