"""The checks of issue #24 on a real multi-GPU job (validation/nccl_job.py, recorded by
validation/run_device_nccl.sh into tests/data/nccl/: one folder per run and manifest.json), and on the
2-rank gloo job of tests/data/ddp2 where they apply.

* ``tb-attention ranks`` reads every rank of every run and names the planted straggler, and nothing else;
* each rank's communication time, busy time and overlap with attention are what the trace's own events give
  (communication found from the raw JSON by the documented definition, docs/report-schema.md);
* the slow-backward finding (looked up by its id in the report's ``advice``, whatever module the rule lives
  in) blames the communication when a rank's backward attention ran beside NCCL kernels.

The NCCL tests skip when tests/data/nccl is absent (no multi-GPU machine has recorded it yet);
``TB_ATTENTION_NCCL_DATA=DIR`` points them at another recording (a CPU dry run of run_device_nccl.sh: its
traces have no GPU activity, so the checks of GPU time skip, and say so).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from synth import SynthTrace
from synth_sdpa import sdpa_backward, sdpa_call
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "validation")
NCCL_DATA = os.environ.get("TB_ATTENTION_NCCL_DATA") or os.path.join(ROOT, "tests", "data", "nccl")
DDP2 = os.path.join(ROOT, "tests", "data", "ddp2", "ddp2_gpt_sdpa")
NO_NCCL = f"no {os.path.relpath(NCCL_DATA, ROOT)}/manifest.json: record it with validation/run_device_nccl.sh"

# the definition of docs/report-schema.md (`communication`), restated here to check the engine against the raw
# events rather than against itself
COMM_NAME = re.compile(r"nccl|rccl|c10d", re.I)
COMM_RANGE = re.compile(r"^(c10d::|nccl:|gloo:|ucc:|mpi:|record_param_comms$)")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# docs/advice.md, slow_backward: fires when backward core attention exceeds 2.5x (FLOPs) x 1.4 (slack) its forward
SLOW_BACKWARD_RATIO = 3.5
MATERIAL_OVERLAP = 0.10  # a backward that ran beside communication for >= 10 % of its time


@dataclass
class Job:
    name: str
    folder: str
    entry: dict = field(default_factory=dict)

    @property
    def traces(self) -> list:
        return sorted(os.path.join(self.folder, f) for f in os.listdir(self.folder) if ".pt.trace.json" in f)


def _nccl_jobs() -> list:
    path = os.path.join(NCCL_DATA, "manifest.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        runs = json.load(f)["runs"]
    return [Job(run, os.path.join(NCCL_DATA, e["dir"]), e) for run, e in sorted(runs.items()) if e["status"] == "ok"]


def _params(with_ddp2: bool) -> list:
    jobs = [pytest.param(j, id=j.name) for j in _nccl_jobs()]
    if not jobs:
        jobs = [pytest.param(None, id="nccl", marks=pytest.mark.skipif(True, reason=NO_NCCL))]
    if with_ddp2:
        # recorded by validation/ddp_trace.py before --slow-rank existed: two like ranks sharing one H200 over gloo
        ddp2 = dict(piece="ddp", backend="gloo", world_size=2, device_type="cuda", expected_stragglers=[])
        jobs.append(pytest.param(Job("ddp2_gloo", DDP2, ddp2), id="ddp2_gloo"))
    return jobs


_REPORTS: dict = {}


def _report(path: str) -> dict:
    if path not in _REPORTS:
        rep = analyze_path(path)
        assert rep["status"] == "ok", (path, rep.get("status"))
        _REPORTS[path] = rep
    return _REPORTS[path]


def _events(path: str) -> list:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return json.load(f)["traceEvents"]


def _ns(us: float) -> int:
    return round(us * 1000)


def _union(iv: list) -> list:
    out: list = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(iv: list) -> int:
    return sum(e - s for s, e in _union(iv))


def _intersection(a: list, b: list) -> int:
    """|union(a) ∩ union(b)| in ns."""
    ua, ub = _union(a), _union(b)
    i = j = tot = 0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        tot += max(0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return tot


def raw_communication(path: str) -> dict:
    """The trace's collective-communication activities from its raw events: {(device, stream, ts_ns, dur_ns)}
    per the documented definition: a GPU activity named nccl/rccl/c10d, one launched (its runtime call) inside
    a collective's CPU range on the same thread, and a copy on a stream that carries either."""
    ev = _events(path)
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    ranges: dict = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and COMM_RANGE.match(e["name"]):
            ranges.setdefault((e["pid"], e["tid"]), []).append((_ns(e["ts"]), _ns(e["ts"] + e.get("dur", 0))))

    def key(e: dict) -> tuple:
        a = e.get("args", {})
        return (a.get("device"), a.get("stream"), _ns(e["ts"]), _ns(e.get("dur", 0)))

    comm = set()
    for e in gpu:
        hit = bool(COMM_NAME.search(e["name"]))
        la = launch.get(e.get("args", {}).get("correlation"))
        if not hit and la is not None:
            t = _ns(la["ts"])
            hit = any(s <= t <= x for s, x in ranges.get((la["pid"], la["tid"]), ()))
        if hit:
            comm.add(key(e))
    streams = {(d, s) for d, s, _, _ in comm}
    comm |= {key(e) for e in gpu if e["cat"] == "gpu_memcpy" and (key(e)[0], key(e)[1]) in streams}
    nccl = sum(1 for e in gpu if e["cat"] == "kernel" and re.match(r"nccl", e["name"], re.I))
    return {"activities": comm, "gpu_activities": len(gpu), "nccl_kernels": nccl}


def _rows_by_device(rows: list) -> dict:
    out: dict = {}
    for k in rows:
        out.setdefault(k["device"], []).append((_ns(k["ts"]), _ns(k["ts"]) + _ns(k["dur_us"] or 0.0)))
    return out


def _comm_by_device(comm: set) -> dict:
    out: dict = {}
    for d, _, t, dur in comm:
        out.setdefault(d, []).append((t, t + dur))
    return out


_RANKS: dict = {}


def _ranks(capsys, folder: str) -> dict:
    """``tb-attention ranks --format json FOLDER``, in-process, once per folder and session."""
    if folder not in _RANKS:
        rc = main(["ranks", folder, "--format", "json", "--workers", "0"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        _RANKS[folder] = json.loads(out.out)
    return _RANKS[folder]


def _gpu_less(job: Job) -> bool:
    return all(raw_communication(p)["gpu_activities"] == 0 for p in job.traces)


# ------------------------------------------------------------------------------------------- the recorder


def _nccl_job():
    sys.path.insert(0, VALIDATION)
    import nccl_job

    return nccl_job


def test_multicast_stays_off_or_nothing_runs(tmp_path):
    nj = _nccl_job()
    assert nj.multicast_problem({}) is None and nj.multicast_problem(dict(nj.MULTICAST_OFF)) is None
    assert "NCCL_NVLS_ENABLE" in nj.multicast_problem({"NCCL_NVLS_ENABLE": "1"})
    assert "NVLS" in nj.multicast_problem({"NCCL_ALGO": "Ring,NVLS"})
    env = dict(os.environ)
    nj.multicast_off(env)
    assert all(env[k] == v for k, v in nj.MULTICAST_OFF.items())
    for k, bad in (("NCCL_NVLS_ENABLE", "1"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"), ("NCCL_ALGO", "nvls")):
        env = dict(os.environ, **{k: bad})
        job = [sys.executable, os.path.join(VALIDATION, "nccl_job.py"), "--piece", "ddp", "--out", str(tmp_path)]
        p = subprocess.run(job, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and k in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        sh = ["bash", os.path.join(VALIDATION, "run_device_nccl.sh"), str(tmp_path / "out"), "30"]
        p = subprocess.run(sh, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and k in p.stderr and not (tmp_path / "out").exists(), p.stderr
    assert not any(tmp_path.iterdir())  # refused before writing anything


def test_job_options_reach_it_through_torchrun():
    """torchrun's parser takes an option after the script that abbreviates one of its own (``--run`` was read
    as ``--run-path``): none of the job's may."""
    from torch.distributed.run import get_args_parser

    theirs = [s for a in get_args_parser()._actions for s in a.option_strings]
    mine = [s for a in _nccl_job().parser()._actions for s in a.option_strings if s not in ("-h", "--help")]
    assert {m: [t for t in theirs if t.startswith(m)] for m in mine if any(t.startswith(m) for t in theirs)} == {}


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_tensor_parallel_ranks_get_whole_heads(world):
    for small in (False, True):
        s = _nccl_job().model_shape(world, small, 2)
        assert s["heads"] % world == 0 and s["d"] == s["heads"] * s["head_dim"]


# ------------------------------------------------------------------------------------------- the manifest


@pytest.mark.skipif(not os.path.exists(os.path.join(NCCL_DATA, "manifest.json")), reason=NO_NCCL)
def test_manifest_says_what_each_run_was():
    with open(os.path.join(NCCL_DATA, "manifest.json")) as f:
        m = json.load(f)
    assert m["kind"] == "tb-attention-nccl-job"
    runs = m["runs"]
    by_piece = {e["piece"]: e for e in runs.values()}
    # DDP and the straggler are the job the issue is about; FSDP2 and TP are recorded "if they run"
    assert by_piece["ddp"]["status"] == "ok" and by_piece["straggler"]["status"] == "ok", {
        p: (e["status"], e.get("log_tail", "")[-300:]) for p, e in by_piece.items()
    }
    for e in runs.values():
        assert e["status"] in ("ok", "error", "timeout", "skipped")
        if e["status"] != "ok":
            continue
        assert e["env"]["NCCL_NVLS_ENABLE"] == "0" and e["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert e["env"]["NVSHMEM_DISABLE_NVLS"] == "1"
        assert [r["rank"] for r in e["ranks"]] == list(range(e["world_size"]))
        files = {f for r in e["ranks"] for f in r["trace_files"]}
        assert files == set(os.listdir(os.path.join(NCCL_DATA, e["dir"]))), e["dir"]
        slowed = [r["rank"] for r in e["ranks"] if r["attention_slowed"]]
        assert slowed == e["expected_stragglers"]
        if e["device_type"] == "cuda":
            assert e["backend"] == "nccl" and len({r["device"] for r in e["ranks"]}) == e["world_size"]


# ------------------------------------------------------------------------------------------- ranks


@pytest.mark.parametrize("job", _params(with_ddp2=True))
def test_ranks_reads_every_rank_of_the_job(job, capsys):
    v = _ranks(capsys, job.folder)
    n = job.entry["world_size"]
    assert v["errors"] == [] and v["duplicate_ranks"] == []
    assert [r["rank"] for r in v["ranks"]] == list(range(n))
    assert {r["world_size"] for r in v["ranks"]} == {n}
    assert {r["rank_source"] for r in v["ranks"]} == {"distributedInfo"}
    if job.entry.get("ranks"):
        want = {r["rank"]: r["trace_files"] for r in job.entry["ranks"]}
        assert all([r["file"]] == want[r["rank"]] for r in v["ranks"])


@pytest.mark.parametrize("job", _params(with_ddp2=True))
def test_ranks_names_the_planted_straggler_and_nothing_else(job, capsys):
    if _gpu_less(job):
        pytest.skip(f"{job.name}: no GPU activity in its traces (a CPU dry run): attention time is 0 on every rank")
    v = _ranks(capsys, job.folder)
    named = sorted(s["rank"] for s in v["stragglers"])
    n, least = job.entry["world_size"], v["rule"]["min_ranks"]
    expected = sorted(job.entry["expected_stragglers"])
    if n < least:
        assert named == []
        pytest.skip(f"{job.name}: {n} ranks: the straggler rule judges none below {least} (planted: {expected})")
    assert named == expected, {r["rank"]: r["attention_time_us"] for r in v["ranks"]}
    for s in v["stragglers"]:  # named for its attention: the planted rank runs a longer sequence
        assert any(p in s["phases"].get(d, {}) for d in ("forward", "backward") for p in ("fused_attention",))


# ------------------------------------------------------------------------------------------- communication


@pytest.mark.parametrize("job", _params(with_ddp2=True))
def test_communication_and_its_overlap_with_attention_as_the_trace_shows(job, capsys):
    if _gpu_less(job):
        pytest.skip(f"{job.name}: no GPU activity in its traces (a CPU dry run): no communication on a GPU")
    summaries = {r["path"]: r for r in _ranks(capsys, job.folder)["ranks"]}
    for path in job.traces:
        rep, raw = _report(path), raw_communication(path)
        comm = raw["activities"]
        c = rep["communication"]
        assert c["kernels"] == len(comm), path
        assert c["time_us"] == pytest.approx(sum(d for *_, d in comm) / 1000, abs=0.01)
        by_dev = _comm_by_device(comm)
        assert c["busy_us"] == pytest.approx(sum(_length(iv) for iv in by_dev.values()) / 1000, abs=0.01)
        comm_rows = {(k["device"], k["stream"], _ns(k["ts"]), _ns(k["dur_us"] or 0.0)) for k in rep["kernels"]}
        assert comm <= comm_rows, "communication activities the report's kernel rows lack"
        att = _rows_by_device(
            [
                k
                for k in rep["kernels"]
                if k["attention"] and (k["device"], k["stream"], _ns(k["ts"]), _ns(k["dur_us"] or 0.0)) not in comm
            ]
        )
        overlap = sum(_intersection(by_dev.get(d, []), att[d]) for d in att) / 1000
        assert c["overlap_with_attention_us"] == pytest.approx(overlap, abs=0.01)
        assert 0 <= c["overlap_with_attention_us"] <= c["overlap_with_compute_us"] <= c["busy_us"]
        # the ranks summary carries the report's figures
        assert summaries[path]["communication"] == c and summaries[path]["communication_us"] == c["time_us"]
        if job.entry.get("backend") == "nccl":
            # one process per GPU, gradients reduced by NCCL kernels on the GPU, some of them beside compute
            assert raw["nccl_kernels"] > 0 and c["kernels"] >= raw["nccl_kernels"], path
            if job.entry["piece"] in ("ddp", "straggler", "fsdp"):
                assert c["overlap_with_compute_us"] > 0, path


def _tp_jobs() -> list:
    jobs = [pytest.param(j, id=j.name) for j in _nccl_jobs() if j.entry["piece"] == "tp"]
    return jobs or [pytest.param(None, id="tp", marks=pytest.mark.skipif(True, reason=NO_NCCL + " (with its tp run)"))]


@pytest.mark.parametrize("job", _tp_jobs())
def test_tensor_parallel_projections_cost_their_shard(job):
    """A DTensor op is recorded twice: the outer op (aten::linear) with the global shapes, the local op inside
    it (aten::addmm) with the shard's. A rank's projection FLOPs are its shard's: 1/N of the model's."""
    if _gpu_less(job):
        pytest.skip(f"{job.name}: no GPU activity in its traces (a CPU dry run)")
    m, n = job.entry["model"], job.entry["world_size"]
    tokens, d, calls = m["batch"] * m["seq"], m["d"], m["layers"] * job.entry["steps_profiled"]
    want = {"qkv_proj": calls * 3 * 2 * tokens * d * (d // n), "out_proj": calls * 2 * tokens * (d // n) * d}
    for path in job.traces:
        got = {p["phase"]: p["flops"] for p in _report(path)["phases"] if p["direction"] == "forward"}
        for phase, flops in want.items():
            assert got.get(phase) == pytest.approx(flops, rel=0.01), (path, phase, got.get(phase), flops)


# ------------------------------------------------------------------------------------------- advice


def _numbers_under(obj: Any, pattern: re.Pattern) -> list:
    """Numbers held under any key matching ``pattern`` (at any depth) of a finding's evidence."""
    out: list = []

    def walk(o: Any, inside: bool) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, inside or bool(pattern.search(str(k))))
        elif isinstance(o, list):
            for v in o:
                walk(v, inside)
        elif inside and isinstance(o, (int, float)) and not isinstance(o, bool):
            out.append(o)

    walk(obj, False)
    return out


def _backward_beside_communication(rep: dict, comm: set) -> Optional[dict]:
    """Forward and backward core-attention time, and the share of the backward's union that ran beside
    communication on its GPU; None without core attention in both directions."""
    core = [k for k in rep["kernels"] if k["attention"] and k["core"]]
    fwd = sum(k["dur_us"] or 0.0 for k in core if k["direction"] != "backward")
    bwd_rows = [k for k in core if k["direction"] == "backward"]
    bwd = sum(k["dur_us"] or 0.0 for k in bwd_rows)
    if not fwd or not bwd:
        return None
    by_dev, b_dev = _comm_by_device(comm), _rows_by_device(bwd_rows)
    beside = sum(_intersection(by_dev.get(d, []), iv) for d, iv in b_dev.items())
    union = sum(_length(iv) for iv in b_dev.values())
    return dict(ratio=bwd / fwd, share_beside_comm=beside / union if union else 0.0, backward_us=bwd)


def _judge_slow_backward(paths: list) -> tuple:
    """Check the slow-backward finding on every rank whose backward core attention exceeds the rule's ratio
    while running beside communication for a material share of it; returns (ranks judged, what each showed)."""
    seen, judged = {}, 0
    for path in paths:
        rep = _report(path)
        b = _backward_beside_communication(rep, raw_communication(path)["activities"])
        seen[os.path.basename(path)] = b and {k: round(v, 3) for k, v in b.items()}
        if not b or b["ratio"] <= SLOW_BACKWARD_RATIO or b["share_beside_comm"] < MATERIAL_OVERLAP:
            continue
        judged += 1
        found = [f for f in rep["advice"] if f["id"] == "slow_backward"]
        assert found, f"{path}: backward {b['ratio']:.2f}x forward beside communication, and no slow_backward"
        f = found[0]
        text = " ".join(str(f.get(k) or "") for k in ("title", "detail"))
        assert re.search(r"communication|nccl", text, re.I), f"{path}: the finding does not name it: {text}"
        cited = _numbers_under(f.get("evidence", {}), re.compile(r"communication|nccl", re.I))
        assert any(x > 0 for x in cited), f"{path}: no communication figure in the evidence: {f.get('evidence')}"
    return judged, seen


@pytest.mark.parametrize("job", _params(with_ddp2=True))
def test_slow_backward_beside_communication_is_blamed_on_it(job):
    if _gpu_less(job):
        pytest.skip(f"{job.name}: no GPU activity in its traces (a CPU dry run)")
    judged, seen = _judge_slow_backward(job.traces)
    if not judged:
        pytest.skip(
            f"{job.name}: no rank's backward attention exceeds {SLOW_BACKWARD_RATIO}x its forward while beside "
            f"communication for >= {MATERIAL_OVERLAP:.0%} of it: {seen}"
        )


NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _backward_beside_allreduce(tmp_path) -> str:
    """One rank's step as the straggler run should give it: a flash forward (100 us), its backward at 5x
    (500 us), and an all-reduce waiting for a slower peer on its own stream beside the whole backward."""
    t = SynthTrace()
    sdpa_call(t, "flash", b=4, h=16, hk=16, sq=2048, sk=2048, d=64, causal=True, dur=100.0, seq=41)
    with t.op("nccl:all_reduce"):
        nccl = t.kernel(NCCL_KERNEL, dur=10.0, stream=20)
    sdpa_backward(t, seq=41, dur=500.0)
    bwd = [e for e in t.events if e.get("cat") == "kernel"][-1]
    nccl["ts"], nccl["dur"] = bwd["ts"], bwd["dur"]
    return t.write(tmp_path / "rank0.pt.trace.json")


def test_the_check_sees_a_backward_beside_an_allreduce(tmp_path):
    path = _backward_beside_allreduce(tmp_path)
    rep = _report(path)
    b = _backward_beside_communication(rep, raw_communication(path)["activities"])
    assert b == dict(ratio=pytest.approx(5.0), share_beside_comm=pytest.approx(1.0), backward_us=500.0)
    assert rep["communication"]["overlap_with_attention_us"] == pytest.approx(500.0)
    assert "slow_backward" in {f["id"] for f in rep["advice"]}


def test_slow_backward_beside_an_allreduce_is_blamed_on_it(tmp_path):
    judged, _ = _judge_slow_backward([_backward_beside_allreduce(tmp_path)])
    assert judged == 1
