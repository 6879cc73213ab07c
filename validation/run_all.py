"""Orchestrate the device run: traces for every workload, then Nsight Compute.

    python3 validation/run_all.py --out WORKDIR --tar-dir TARDIR --budget 480

Everything is written progressively under WORKDIR and re-packed into
TARDIR/*.tgz after every phase and every ncu batch, so a run killed at its
time limit still returns what it had.  The run never starts a piece of work
that its own estimate says would pass the budget (seconds since --t0).

Phases
 1. ncu capabilities: --version, --list-sections, --query-metrics (saved), the
    suffix list of the candidate metrics, and the chosen metric list.
 2. traces: validation/trace_workloads.py, one process per family.
 3. ncu smoke: two cheap workloads under ncu (checks the metric list; times
    ncu per kernel); falls back to sections only if the metric list fails.
 4. ncu batches by priority, skipping workloads whose one step has more than
    --max-kernels kernels (those get their own process capped with
    --launch-count).
 5. join check: trace kernel names vs ncu kernel names per workload.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ncu_csv  # noqa: E402  (stdlib only)

# (base metric, full name) candidates; kept only if the base exists on this ncu/GPU
CANDIDATE_METRICS = [
    # time, clocks
    ("gpu__time_duration", "gpu__time_duration.sum"),
    ("sm__cycles_elapsed", "sm__cycles_elapsed.avg.per_second"),
    ("dram__cycles_elapsed", "dram__cycles_elapsed.avg.per_second"),
    # memory
    ("dram__bytes_read", "dram__bytes_read.sum"),
    ("dram__bytes_write", "dram__bytes_write.sum"),
    ("dram__throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("gpu__compute_memory_throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("lts__t_bytes", "lts__t_bytes.sum"),
    ("lts__throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("l1tex__throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
    # compute
    ("sm__throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("sm__pipe_tensor_op_gmma_cycles_active", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__pipe_tensor_op_hmma_cycles_active", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__pipe_tensor_cycles_active", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__pipe_shared_cycles_active", "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__pipe_fma_cycles_active", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__inst_executed_pipe_fma", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
    ("sm__pipe_alu_cycles_active", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("sm__inst_executed_pipe_xu", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("sm__inst_executed_pipe_lsu", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
    ("sm__warps_active", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    # FLOP counts: SASS thread-level (fp32/fp16/fp64) and tensor-path ops
    ("smsp__sass_thread_inst_executed_op_ffma_pred_on", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_fadd_pred_on", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_fmul_pred_on", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_hfma_pred_on", "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_hadd_pred_on", "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_hmul_pred_on", "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum"),
    ("smsp__sass_thread_inst_executed_op_dfma_pred_on", "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum"),
    ("sm__ops_path_tensor_src_bf16_dst_fp32", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"),
    # ncu 2025.3 on H200 names the fp16 counter without a dst type (the *_dst_* forms are absent there);
    # it was missing from the 2026-11-30 run, so fp16 tensor FLOPs are not in that data set
    ("sm__ops_path_tensor_src_fp16", "sm__ops_path_tensor_src_fp16.sum"),
    ("sm__ops_path_tensor_src_fp8", "sm__ops_path_tensor_src_fp8.sum"),
    ("sm__inst_executed_pipe_tensor", "sm__inst_executed_pipe_tensor.sum"),
    ("sm__ops_path_tensor_src_fp16_dst_fp32", "sm__ops_path_tensor_src_fp16_dst_fp32.sum"),
    ("sm__ops_path_tensor_src_fp16_dst_fp16", "sm__ops_path_tensor_src_fp16_dst_fp16.sum"),
    ("sm__ops_path_tensor_src_tf32_dst_fp32", "sm__ops_path_tensor_src_tf32_dst_fp32.sum"),
    ("sm__inst_executed_pipe_tensor_op_gmma", "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    ("sm__inst_executed_pipe_tensor_op_hmma", "sm__inst_executed_pipe_tensor_op_hmma.sum"),
]
WANTED_SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy"]
MINIMAL_METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
]

T0 = time.time()
LOG = None
DRY = False


def log(msg: str):
    line = f"[{time.time() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def sh(cmd, timeout, out_path=None, env=None):
    """Run cmd (list) in its own process group; return (rc, seconds, combined output text).

    On timeout the whole group (ncu and the python it launched) is killed."""
    import signal

    t = time.time()
    try:
        p = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except FileNotFoundError as e:
        return 127, 0.0, str(e)
    try:
        txt, _ = p.communicate(timeout=max(1, timeout))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except Exception:
            p.kill()
        txt, _ = p.communicate()
        rc = 124
        txt = (txt or "") + f"\n[run_all] TIMEOUT after {timeout:.0f}s\n"
    if out_path:
        with open(out_path, "a") as f:
            f.write(f"$ {' '.join(shlex.quote(c) for c in cmd)}\n{txt}\n[rc={rc}]\n")
    return rc, time.time() - t, txt


class Packer:
    """Re-pack WORKDIR into TARDIR tarballs (each < 15 MiB, max 8 files back)."""

    def __init__(self, work, tardir):
        self.work, self.tardir = work, tardir
        os.makedirs(tardir, exist_ok=True)

    def _tar(self, name, paths):
        tmp = os.path.join(self.tardir, name + ".tmp")
        with tarfile.open(tmp, "w:gz") as tf:
            for p in paths:
                full = os.path.join(self.work, p)
                if os.path.exists(full):
                    tf.add(full, arcname=p)
        os.replace(tmp, os.path.join(self.tardir, name))
        return os.path.getsize(os.path.join(self.tardir, name))

    def meta(self):
        paths = [p for p in os.listdir(self.work) if p not in ("traces",)]
        # ncu reports go to their own tarball
        sz = 0
        tmp = os.path.join(self.tardir, "results_meta.tgz.tmp")
        with tarfile.open(tmp, "w:gz") as tf:
            for p in paths:
                full = os.path.join(self.work, p)
                tf.add(full, arcname=p, filter=lambda ti: None if ti.name.endswith(".ncu-rep") else ti)
        os.replace(tmp, os.path.join(self.tardir, "results_meta.tgz"))
        sz = os.path.getsize(os.path.join(self.tardir, "results_meta.tgz"))
        return sz

    def reports(self):
        reps = sorted(glob.glob(os.path.join(self.work, "ncu", "*.ncu-rep")))
        groups, cur, cur_sz = [], [], 0
        for r in reps:
            s = os.path.getsize(r)
            if cur and cur_sz + s > 14 * 2**20:
                groups.append(cur)
                cur, cur_sz = [], 0
            cur.append(r)
            cur_sz += s
        if cur:
            groups.append(cur)
        for i, g in enumerate(groups[:2]):
            self._tar(f"ncu_reports_{i}.tgz", [os.path.relpath(r, self.work) for r in g])

    def traces(self):
        fams = {}
        for m in glob.glob(os.path.join(self.work, "meta", "*.json")):
            try:
                d = json.load(open(m))
            except Exception:
                continue
            fams.setdefault(d.get("family", "misc"), []).append(d["workload"])
        # two tarballs: lighter families and heavier ones
        a = [w for f in ("sdpa", "naive", "decode", "mha") for w in fams.get(f, [])]
        b = [w for f, ws in fams.items() if f not in ("sdpa", "naive", "decode", "mha") for w in ws] + ["_generate"]
        for name, ws in (("traces_a.tgz", a), ("traces_b.tgz", b)):
            sz = self._tar(name, [os.path.join("traces", w) for w in ws])
            log(f"packed {name}: {sz / 2**20:.2f} MiB")


def select_metrics(work):
    """Query ncu for available metrics/sections; return (sections, metrics)."""
    d = os.path.join(work, "ncu_caps")
    os.makedirs(d, exist_ok=True)
    rc, _, txt = sh(["ncu", "--version"], 30, os.path.join(d, "ncu_version.txt"))
    rc, _, secs = sh(["ncu", "--list-sections"], 60, os.path.join(d, "ncu_list_sections.txt"))
    rc, dt, qm = sh(["ncu", "--query-metrics"], 90)
    with open(os.path.join(d, "ncu_query_metrics.txt"), "w") as f:
        f.write(qm)
    log(f"ncu --query-metrics rc={rc} {dt:.1f}s lines={len(qm.splitlines())}")
    avail = set()
    for ln in qm.splitlines():
        tok = ln.strip().split()
        if tok and "__" in tok[0]:
            avail.add(tok[0])
    bases = [b for b, _ in CANDIDATE_METRICS if b in avail]
    missing = [b for b, _ in CANDIDATE_METRICS if b not in avail]
    log(f"candidate metric bases available {len(bases)}/{len(CANDIDATE_METRICS)}; missing: {missing}")
    rc2, dt, suf = sh(["ncu", "--query-metrics-mode", "suffix", "--metrics", ",".join(bases)], 90)
    with open(os.path.join(d, "ncu_query_metrics_suffix.txt"), "w") as f:
        f.write(suf)
    suf_tokens = set(suf.split())
    fulls = [full for b, full in CANDIDATE_METRICS if b in avail]
    if sum(1 for x in fulls if x in suf_tokens) < len(fulls) // 2:
        log("suffix listing does not look like full metric names; not filtering by it")
        suf_tokens = set()
    metrics = []
    for b, full in CANDIDATE_METRICS:
        if b not in avail:
            continue
        if rc2 == 0 and suf_tokens and full not in suf_tokens:
            # suffix list present but this full name not in it
            log(f"metric {full}: suffix not listed, dropped")
            continue
        metrics.append(full)
    if not avail:
        log("no metric list from ncu; using the minimal metric list")
        metrics = list(MINIMAL_METRICS)
    sections = [s for s in WANTED_SECTIONS if s in secs]
    roof = "SpeedOfLight_RooflineChart"
    if roof in secs:
        sections.append(roof)
    with open(os.path.join(d, "ncu_selected.json"), "w") as f:
        json.dump({"sections": sections, "metrics": metrics, "missing_bases": missing}, f, indent=1)
    log(f"sections={sections} metrics={len(metrics)}")
    return sections, metrics


def ncu_cmd(rep, sections, metrics, names, status, launch_count=None):
    cmd = [
        "ncu",
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--replay-mode",
        "kernel",
        "--target-processes",
        "application-only",
        "--nvtx",
        "-f",
        "-o",
        rep,
    ]
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    if launch_count:
        cmd += ["--launch-count", str(launch_count)]
    cmd += [sys.executable, os.path.join(HERE, "ncu_step.py"), "--workloads", ",".join(names), "--status", status]
    if DRY:
        cmd += ["--small", "--device", "cpu"]
    return cmd


def export_csv(rep, csv_path, logf):
    rc, _, txt = sh(
        ["ncu", "--import", rep, "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "demangled"],
        120,
    )
    if rc != 0 or '"ID"' not in txt:
        rc, _, txt = sh(["ncu", "--import", rep, "--csv", "--page", "raw"], 120)
    with open(csv_path, "w") as f:
        f.write(txt)
    if rc != 0:
        with open(logf, "a") as f:
            f.write(f"export {rep} rc={rc}\n{txt[-3000:]}\n")
    return rc, txt


def run_batch(work, tag, names, sections, metrics, timeout, launch_count=None, env=None):
    ncu_dir = os.path.join(work, "ncu")
    os.makedirs(ncu_dir, exist_ok=True)
    rep = os.path.join(ncu_dir, tag)
    status = os.path.join(ncu_dir, f"status_{tag}.jsonl")
    logf = os.path.join(work, "logs", f"ncu_{tag}.log")
    cmd = ncu_cmd(rep, sections, metrics, names, status, launch_count)
    rc, dt, txt = sh(cmd, timeout, logf, env=env)
    res = {
        "tag": tag,
        "workloads": names,
        "rc": rc,
        "seconds": dt,
        "launch_count": launch_count,
        "sections": sections,
        "metrics": metrics,
        "per_workload": {},
    }
    stats = []
    if os.path.exists(status):
        stats = [json.loads(l) for l in open(status) if l.strip()]
    res["status"] = stats
    if os.path.exists(rep + ".ncu-rep"):
        erc, csvtxt = export_csv(rep + ".ncu-rep", rep + ".csv", logf)
        res.update(write_workload_jsons(work, tag, csvtxt, stats, launch_count))
    tail = "\n".join(txt.splitlines()[-8:])
    log(f"ncu batch {tag}: rc={rc} {dt:.1f}s rows={res.get('n_rows')} nvtx_col={res.get('nvtx_column')!r}\n{tail}")
    with open(os.path.join(ncu_dir, f"batch_{tag}.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    return res


KEY_PREFIXES = (
    "gpu__time_duration",
    "dram__",
    "lts__t_bytes",
    "lts__throughput",
    "l1tex__throughput",
    "sm__throughput",
    "gpu__compute_memory_throughput",
    "sm__pipe_",
    "sm__inst_executed_pipe_",
    "smsp__sass_thread_inst_executed_op_",
    "sm__sass_thread_inst_executed_op_",
    "sm__ops_path_tensor",
    "launch__",
    "sm__warps_active",
    "sm__cycles_elapsed",
    "gpc__cycles_elapsed",
    "smsp__cycles_elapsed",
    "sm__maximum_warps",
    "derived__",
)


def key_columns(columns):
    """Identity/NVTX columns plus the metrics the comparison needs (no .min/.max variants,
    no device__attribute_* constants)."""
    keep = []
    for c in columns:
        if c in ncu_csv.IDENTITY_COLUMNS or "Range" in c:
            keep.append(c)
        elif c.startswith(KEY_PREFIXES) and ".min" not in c and ".max" not in c:
            keep.append(c)
    return keep


def write_workload_jsons(work, tag, csvtxt, stats, launch_count=None):
    """Split one batch's raw CSV into ncu/<workload>.json (compact: key columns only)."""
    res = {}
    try:
        table = ncu_csv.parse(csvtxt)
    except ValueError:
        return res
    names = [st["workload"] for st in stats]  # markers were launched in this order
    parts = ncu_csv.split_by_marker(table.rows, names)
    nv = ncu_csv.nvtx_column(table.columns)
    cols = key_columns(table.columns)
    res.update(nvtx_column=nv, n_rows=len(table.rows), per_workload={})
    for st in stats:
        w = st["workload"]
        rows = [{c: r.get(c) for c in cols} for r in parts.get(w, [])]
        out = {
            "workload": w,
            "batch": tag,
            "status": st["status"],
            "units": {c: table.units.get(c, "") for c in cols},
            "n_kernels": len(rows),
            "truncated_by_launch_count": bool(launch_count),
            "join": "rows between this workload's marker kernel (spin_kernel) and the next; order = launch order",
            "step_seconds_under_ncu": st["t_end"] - st["t_start"],
            "kernels": rows,
        }
        with open(os.path.join(work, "ncu", f"{w}.json"), "w") as f:
            json.dump(out, f, separators=(",", ":"), default=str)
        res["per_workload"][w] = {
            "n_kernels": len(rows),
            "seconds": st["t_end"] - st["t_start"],
            "status": st["status"],
        }
    return res


def postprocess(work):
    """Rebuild ncu/<workload>.json from the batch CSVs + status files (e.g. after a parser change)."""
    for b in sorted(glob.glob(os.path.join(work, "ncu", "batch_*.json"))):
        info = json.load(open(b))
        tag = info["tag"]
        csvp = os.path.join(work, "ncu", f"{tag}.csv")
        stp = os.path.join(work, "ncu", f"status_{tag}.jsonl")
        if os.path.exists(csvp) and os.path.exists(stp):
            stats = [json.loads(l) for l in open(stp) if l.strip()]
            write_workload_jsons(work, tag, open(csvp).read(), stats, info.get("launch_count"))


def load_meta(work):
    out = {}
    for m in glob.glob(os.path.join(work, "meta", "*.json")):
        try:
            d = json.load(open(m))
            out[d["workload"]] = d
        except Exception:
            pass
    return out


def join_check(work):
    import workloads as W  # noqa: F401  (only for spec names; torch import is fine here)

    meta = load_meta(work)
    report = {}
    for w, m in sorted(meta.items()):
        p = os.path.join(work, "ncu", f"{w}.json")
        if not os.path.exists(p) or m.get("status") != "ok":
            report[w] = {"trace_kernels": m.get("n_kernels"), "ncu": "missing"}
            continue
        n = json.load(open(p))
        tk = m.get("kernels", [])
        nk = [r.get("Kernel Name", "") for r in n["kernels"]]
        exact = sum(1 for a, b in zip(tk, nk) if a == b)
        short = sum(1 for a, b in zip(tk, nk) if ncu_csv.short_name(a) == ncu_csv.short_name(b))
        mism = [
            (i, a[:120], b[:120])
            for i, (a, b) in enumerate(zip(tk, nk))
            if ncu_csv.short_name(a) != ncu_csv.short_name(b)
        ][:10]
        report[w] = {
            "trace_kernels": len(tk),
            "ncu_kernels": len(nk),
            "exact_name_matches": exact,
            "short_name_matches": short,
            "count_match": len(tk) == len(nk),
            "truncated": n.get("truncated_by_launch_count"),
            "first_mismatches": mism,
        }
    with open(os.path.join(work, "join_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    return report


def summary(work):
    """Print a compact per-kernel table of the key metrics (the reply tail shows it)."""
    keys = {
        "dur_us": "gpu__time_duration.sum",
        "dram%": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "mem%": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "tensor%": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "fma%": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
        "xu%": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
        "occ%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    }
    lines = []
    for p in sorted(glob.glob(os.path.join(work, "ncu", "*.json"))):
        b = os.path.basename(p)
        if b.startswith("batch_"):
            continue
        d = json.load(open(p))
        if "kernels" not in d or not isinstance(d.get("kernels"), list):
            continue
        rows = sorted(d["kernels"], key=lambda r: -(r.get("gpu__time_duration.sum") or 0))[:3]
        for r in rows:
            vals = []
            for k, col in keys.items():
                v = r.get(col)
                if k == "dur_us" and isinstance(v, (int, float)):
                    v = v * ncu_csv.unit_scale(d["units"].get(col, "nsecond"))[0] * 1e6
                vals.append(f"{k}={v:.1f}" if isinstance(v, (int, float)) else f"{k}=-")
            lines.append(
                f"{d['workload'][:28]:28s} {ncu_csv.short_name(str(r.get('Kernel Name')))[:40]:40s} " + " ".join(vals)
            )
    txt = "\n".join(lines)
    with open(os.path.join(work, "summary_top_kernels.txt"), "w") as f:
        f.write(txt + "\n")
    # console: only the longest kernel of each workload (the reply shows the tail)
    seen, short = set(), []
    for ln in lines:
        w = ln[:28]
        if w not in seen:
            seen.add(w)
            short.append(ln)
    print("\n".join(short), flush=True)


def main():
    global LOG, T0, DRY
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tar-dir", required=True)
    ap.add_argument("--budget", type=float, default=480, help="seconds since --t0 to finish everything")
    ap.add_argument("--t0", type=float, default=0.0)
    ap.add_argument("--trace-until", type=float, default=190, help="seconds since t0: start no trace family after")
    ap.add_argument("--max-kernels", type=int, default=60)
    ap.add_argument("--batch-kernels", type=int, default=100)
    ap.add_argument(
        "--cap-kernels",
        type=int,
        default=0,
        help="launch-count cap for workloads over --max-kernels (default: --max-kernels)",
    )
    ap.add_argument("--only", default="", help="comma list of workloads (debug)")
    ap.add_argument(
        "--reuse",
        default="",
        help="earlier result dir: take meta/, ncu_caps/ncu_selected.json and "
        "ncu cost from it; skip ceilings, traces and the ncu smoke (ncu-only repair run)",
    )
    ap.add_argument("--tag-prefix", default="b")
    ap.add_argument("--keep-reports", action="store_true", help="also pack the (large) .ncu-rep files")
    ap.add_argument("--cpu-dry-run", action="store_true", help="local test: small CPU shapes (use a fake ncu)")
    ap.add_argument(
        "--families",
        default="sdpa,decode,naive,compile,mha,memory,hf",
        help="trace families, in this order (workloads.FAMILIES)",
    )
    ap.add_argument("--family-timeout", type=float, default=150, help="seconds one trace family may take")
    ap.add_argument("--skip-ceilings", action="store_true", help="do not re-measure copy/matmul ceilings")
    ap.add_argument("--no-generate", action="store_true", help="do not run sample_traces/generate.py")
    a = ap.parse_args()
    if a.t0:
        T0 = a.t0
    DRY = a.cpu_dry_run
    work = os.path.abspath(a.out)
    for sub in ("logs", "meta", "traces", "ncu"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    LOG = open(os.path.join(work, "logs", "run_all.log"), "a")
    pk = Packer(work, a.tar_dir)
    end = T0 + a.budget
    left = lambda: end - time.time()  # noqa: E731

    import workloads as W

    only = [x for x in a.only.split(",") if x]

    reuse = os.path.abspath(a.reuse) if a.reuse else ""
    if reuse:
        import shutil

        for m in glob.glob(os.path.join(reuse, "meta", "*.json")):
            shutil.copy(m, os.path.join(work, "meta"))
        sel = json.load(open(os.path.join(reuse, "ncu_caps", "ncu_selected.json")))
        sections, metrics = sel["sections"], sel["metrics"]
        log(
            f"reusing {reuse}: {len(glob.glob(os.path.join(work, 'meta', '*.json')))} meta files, "
            f"{len(metrics)} metrics, sections {sections}"
        )
    else:
        # ---- 1. ncu capabilities
        try:
            sections, metrics = select_metrics(work)
        except Exception as e:
            log(f"metric selection failed: {e}")
            sections, metrics = WANTED_SECTIONS, MINIMAL_METRICS
    if not DRY and not reuse and not a.skip_ceilings:
        rc, dt, txt = sh(
            [sys.executable, os.path.join(HERE, "ceilings.py"), os.path.join(work, "ceilings.json")],
            90,
            os.path.join(work, "logs", "ceilings.log"),
        )
        log(f"ceilings rc={rc} {dt:.1f}s {' '.join(l.strip() for l in txt.splitlines() if 'TF' in l or 'TBps' in l)}")
    pk.meta()

    # ---- 2. traces, one process per family
    order = [f for f in a.families.split(",") if f]
    for fam in [] if reuse else order:
        names = [n for n in W.names(fam) if not only or n in only]
        if not names:
            continue
        if time.time() - T0 > a.trace_until:
            log(f"trace family {fam}: skipped (trace phase time used up)")
            continue
        deadline = T0 + a.trace_until + 20
        to = max(30, min(left() - 200, deadline + 60 - time.time(), a.family_timeout))
        rc, dt, txt = sh(
            [
                sys.executable,
                os.path.join(HERE, "trace_workloads.py"),
                "--out",
                work,
                "--workloads",
                ",".join(names),
                "--deadline",
                str(deadline),
            ]
            + (["--small", "--device", "cpu"] if DRY else []),
            to,
            os.path.join(work, "logs", f"trace_{fam}.log"),
        )
        log(
            f"trace family {fam}: rc={rc} {dt:.1f}s\n"
            + "\n".join(l for l in txt.splitlines() if l.startswith("[trace]"))
        )
    # the sample-trace generator, on this GPU (checks it runs on CUDA; small traces)
    if not reuse and not a.no_generate and time.time() - T0 < a.trace_until + 30:
        gen = os.path.join(os.path.dirname(HERE), "sample_traces", "generate.py")
        rc, dt, txt = sh(
            [sys.executable, gen, "--out", os.path.join(work, "traces", "_generate")]
            + (["--device", "cpu"] if DRY else []),
            90,
            os.path.join(work, "logs", "generate.log"),
        )
        log(
            f"sample_traces/generate.py rc={rc} {dt:.1f}s\n"
            + "\n".join(l for l in txt.splitlines() if "USDT" not in l)[-1500:]
        )
    if not reuse:
        pk.traces()
    pk.meta()

    meta = load_meta(work)
    okw = [w for w, m in meta.items() if m.get("status") == "ok"]
    log(f"traces ok: {len(okw)}/{len(meta)}")

    # ---- 3. ncu smoke (2 cheap workloads) -> per-kernel cost; metric-list fallback
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONUNBUFFERED="1")
    smoke = [w for w in ("sdpa_flash_fwd_causal", "naive_bf16_s2048_d64_fwd") if w in okw]
    if not smoke:
        smoke = sorted(okw, key=lambda w: (W.SPECS[w].ncu_priority, w))[:2]
    per_kernel, fixed = 1.0, 15.0
    done = set()
    if reuse and os.path.exists(os.path.join(reuse, "ncu", "skipped.json")):
        prev = json.load(open(os.path.join(reuse, "ncu", "skipped.json")))
        per_kernel, fixed = prev.get("per_kernel_s", per_kernel), prev.get("fixed_s", fixed)
        smoke = []
        done.update(w for w in okw if os.path.exists(os.path.join(reuse, "ncu", f"{w}.json")))
        log(f"ncu cost from the earlier run: {per_kernel:.2f}s/kernel, {fixed:.1f}s fixed")
    if smoke and left() > 60:
        res = run_batch(work, "b00_smoke", smoke, sections, metrics, min(150, left() - 30), env=env)
        if not res.get("n_rows"):
            log("smoke with full metric list produced no rows; retrying with sections only")
            metrics_try = []
            res = run_batch(work, "b00_smoke_sections", smoke, sections, metrics_try, min(120, left() - 30), env=env)
            if res.get("n_rows"):
                metrics = metrics_try
            else:
                log("sections-only failed too; retrying minimal metrics, no sections")
                res = run_batch(work, "b00_smoke_min", smoke, [], MINIMAL_METRICS, min(120, left() - 30), env=env)
                sections, metrics = [], MINIMAL_METRICS
        if res.get("n_rows"):
            k = sum(v["n_kernels"] + 1 for v in res["per_workload"].values())
            ws = sum(v["seconds"] for v in res["per_workload"].values())
            build = sum(meta[w].get("build_warmup_s", 1.0) for w in smoke)
            per_kernel = max(0.05, (ws - build) / max(1, k))
            fixed = max(3.0, res["seconds"] - ws)
            done.update(w for w, v in res["per_workload"].items() if v["status"] == "ok")
        log(f"ncu cost estimate: {per_kernel:.2f}s/kernel, {fixed:.1f}s fixed per process")
    pk.meta()
    if a.keep_reports:
        pk.reports()

    # ---- 4. ncu batches by priority
    todo = sorted(
        [w for w in okw if w not in done and (not only or w in only)], key=lambda w: (W.SPECS[w].ncu_priority, w)
    )
    big = [w for w in todo if meta[w].get("n_kernels", 0) > a.max_kernels]
    small = [w for w in todo if w not in big]

    def est(w):
        return (
            min(meta[w].get("build_warmup_s", 2.0), 20.0) * 1.2
            + (min(meta[w].get("n_kernels", 10), a.max_kernels) + 1) * per_kernel
        )

    bi = 1
    P = a.tag_prefix
    queue = list(small)
    skipped = []
    while queue:
        batch, kern, t_est = [], 0, fixed
        for w in list(queue):
            nk = meta[w].get("n_kernels", 10)
            if batch and (kern + nk > a.batch_kernels or len(batch) >= 10):
                break
            if t_est + est(w) > left() - 25:
                if not batch:
                    skipped.append(w)
                    queue.remove(w)
                    continue
                break
            batch.append(w)
            kern += nk
            t_est += est(w)
            queue.remove(w)
        if not batch:
            continue
        res = run_batch(work, f"{P}{bi:02d}", batch, sections, metrics, min(left() - 15, 2.5 * t_est + 30), env=env)
        bi += 1
        if res.get("n_rows") and res["per_workload"]:
            # refine the estimate from measured numbers
            k = sum(v["n_kernels"] + 1 for v in res["per_workload"].values())
            ws = sum(v["seconds"] for v in res["per_workload"].values())
            build = sum(meta[w].get("build_warmup_s", 1.0) for w in res["per_workload"])
            if k >= 5 and ws > build:
                per_kernel = 0.5 * per_kernel + 0.5 * max(0.05, (ws - build) / k)
            log(f"ncu cost estimate now {per_kernel:.2f}s/kernel; {left():.0f}s left")
        pk.meta()
    for w in big:
        cap = (a.cap_kernels or a.max_kernels) + 1
        t_est = fixed + meta[w].get("build_warmup_s", 2.0) * 1.2 + cap * per_kernel
        if t_est > left() - 25:
            skipped.append(w)
            continue
        run_batch(
            work,
            f"{P}{bi:02d}_cap",
            [w],
            sections,
            metrics,
            min(left() - 15, 2.5 * t_est + 30),
            launch_count=cap,
            env=env,
        )
        bi += 1
        pk.meta()
    if skipped:
        log(f"ncu skipped for lack of time: {skipped}")
    with open(os.path.join(work, "ncu", "skipped.json"), "w") as f:
        json.dump({"skipped_for_time": skipped, "per_kernel_s": per_kernel, "fixed_s": fixed}, f, indent=1)

    # ---- 5. join check + summary
    try:
        rep = join_check(work)
        bad = {
            w: r
            for w, r in rep.items()
            if r.get("ncu") != "missing"
            and (not r.get("count_match") or r.get("short_name_matches") != r.get("trace_kernels"))
        }
        log(
            f"join: {sum(1 for r in rep.values() if r.get('ncu') != 'missing')} workloads with ncu, "
            f"{len(bad)} with count/name mismatches: "
            + ", ".join(f"{w}({r.get('trace_kernels')}/{r.get('ncu_kernels')})" for w, r in bad.items())
        )
    except Exception as e:
        log(f"join check failed: {e}")
    try:
        summary(work)
    except Exception as e:
        log(f"summary failed: {e}")
    pk.meta()
    if a.keep_reports:
        pk.reports()
    log("done")


if __name__ == "__main__":
    main()
