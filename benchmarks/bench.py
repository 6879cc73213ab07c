#!/usr/bin/env python3
"""Large-trace benchmark: tb-attention against torch-tb-profiler 0.4.3, HTA 0.5.0 and (when a
checkout of it is at hand: it is not on PyPI) AMD's TraceLens, and against the parse floor
(benchmarks/floor.py) measured in the same run, on each case of the reference set.

    .venv/bin/python benchmarks/bench.py                     # every case, 3 runs of every row
    .venv/bin/python benchmarks/bench.py --cases llama cudnn --runs 2 --record   # issue #22's two traces
    .venv/bin/python benchmarks/bench.py --sizes 267 1000 --runs 5 --record
    .venv/bin/python benchmarks/bench.py --skip-peers        # only our rows
    .venv/bin/python benchmarks/bench.py --ours-fallback     # no CLI yet: time load_trace() instead

Every measurement is a fresh process; wall time from spawn to exit, peak RSS from the kernel
(``wait4`` rusage: the largest single process of the tree) and from a 10 Hz sampler summing the
PSS of the whole process tree (torch-tb-profiler and HTA parse in child processes). The rows of
one round run back to back (peers, orjson, the floor, ours), rounds repeat ``--runs`` times, and
the table reports medians and ratios. TraceLens: installed into the peers' venv from
``benchmarks/_work/TraceLens-src`` (or ``--tracelens-src DIR``) when it is not there; with no
checkout its row is skipped and the report's header says why. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORK = os.path.join(HERE, "_work")
sys.path.insert(0, HERE)
import make_large_trace  # noqa: E402

PEERS_VENV = os.path.join(WORK, "peers-venv")
PEERS_REQUIREMENTS = os.path.join(HERE, "peers-requirements.txt")
PEER_DRIVERS = os.path.join(HERE, "peer_drivers.py")
GB = 1e9
# Targets from the issues (#11, then #22).
TARGET_VS_TBPROF = 20.0
TARGET_VS_HTA = 16.0
TARGET_VS_FLOOR = 2.5  # cold wall at most this many times the parse floor's, measured in the same run
TARGET_RSS_VS_FILE = 0.6
TARGET_WARM_S = 0.5
FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.py")
# TraceLens (AMD) is not on the registry: installed into the peers' venv from a local checkout
# (`--tracelens-src DIR`, e.g. a snapshot of github.com/AMD-AGI/TraceLens), else skipped.
TRACELENS_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_work", "TraceLens-src")
TRACELENS_DEPS = ["tqdm", "tabulate", "openpyxl", "PyYAML"]  # what its PyTorch report imports
FALLBACK_SNIPPET = "import sys; from tb_attention_plugin.trace.records import load_trace; load_trace(sys.argv[1])"
# The reference set (issue #11): the kernel mixes people run, each repeated to the same size, so that
# a path that is slow on one mix only (e.g. per-SDPA-call rescans) shows. A case is a list of source
# traces; several sources make a job of several ranks (one file per rank in one run directory, each
# repeated to size / ranks), analysed as a directory by every tool.
CASES = {
    "eager": ["benchmarks/traces/gpt12_naive_train_mem.pt.trace.json.gz"],
    "sdpa": ["benchmarks/traces/gpt12_sdpa_train_mem.pt.trace.json.gz"],
    "ddp2": ["tests/data/ddp2/**/rank0.*.pt.trace.json*", "tests/data/ddp2/**/rank1.*.pt.trace.json*"],
    # issue #22's two real H200 training traces
    "llama": ["validation/traces/hf_llama_eager_fwdbwd/*.pt.trace.json*"],
    "cudnn": ["validation/traces/sdpa_cudnn_fwdbwd_causal/*.pt.trace.json*"],
}
REFERENCE_CASES = list(CASES)  # what a run measures unless --cases says otherwise
# Other kernel mixes (issue #22: "on every kernel mix"), one recorded trace of each form that the
# tests keep, repeated to 250 MB like the rest: a path that only one form takes (the replay of CUDA
# graphs, Flex's block masks, jagged tensors...) and is slow shows here. `--cases mixes`: all of them.
MIX_CASES = {
    "flex": ["tests/data/modern/hf_llama_flex_fwdbwd/*.pt.trace.json*"],
    "jagged": ["tests/data/round4/jagged_build_nt_fwdbwd/*.pt.trace.json*"],
    "cgraph": ["tests/data/round4/ffn_block_b2_s2048_compiled_cudagraph/*.pt.trace.json*"],
    "decode": ["tests/data/modern/decode_graph_replay/*.pt.trace.json*"],
    "mla": ["tests/data/modern/mla_moe_hand_fwdbwd/*.pt.trace.json*"],
    "t5": ["tests/data/twins/t5_eager/*.pt.trace.json*"],
    "swin": ["tests/data/round3/r3_swin_fwdbwd/*.pt.trace.json*"],
    "fp8": ["tests/data/round4/fp8_block_fwd_e4m3/*.pt.trace.json*"],
}
CASES.update(MIX_CASES)
# MB a case is repeated to when --sizes is not given
CASE_SIZES = {"eager": 267, "sdpa": 267, "ddp2": 267, "llama": 250, "cudnn": 250, **{c: 250 for c in MIX_CASES}}
CASE_NOTES = {
    "eager": "12-layer GPT training step on an H200, eager attention (matmul-softmax-dropout-matmul), "
    "shapes + stacks + memory events",
    "sdpa": "12-layer GPT training step on an H200, F.scaled_dot_product_attention fwd+bwd (fused "
    "kernels), shapes + stacks + memory events",
    "ddp2": "2-rank DDP training job recorded on an H200 (two processes, one file per rank)",
    "llama": "HF Llama training step on an H200, eager attention, forward + backward (validation/traces)",
    "cudnn": "F.scaled_dot_product_attention forward + backward on the cuDNN backend, causal, on an H200 "
    "(validation/traces)",
    "flex": "HF Llama with FlexAttention, forward + backward, on an H200",
    "jagged": "SDPA on jagged (nested) tensors built per batch, forward + backward, on an H200",
    "cgraph": "an attention + FFN block under torch.compile with CUDA graphs (replayed), on an H200",
    "decode": "a decode step replayed from CUDA graphs (no CPU ops around its kernels), on an H200",
    "mla": "a hand-written MLA attention + MoE block, forward + backward, on an H200",
    "t5": "T5 with eager attention and a relative position bias, forward + backward, on an H200",
    "swin": "Swin (windowed attention) forward + backward, on an H200",
    "fp8": "an attention block in FP8 (e4m3), forward, on an H200",
}


def case_sources(case: str) -> list[str]:
    """The source trace of each rank of a case; SystemExit naming the missing pattern."""
    out = []
    for pattern in CASES[case]:
        hits = sorted(glob.glob(os.path.join(REPO, pattern), recursive=True))
        if not hits:
            raise SystemExit(f"case {case}: no source trace matches {pattern}")
        out.append(hits[0])
    return out


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- measuring
@dataclass
class Sample:
    ok: bool
    wall_s: float
    rss_max_proc: int  # bytes, largest single process (rusage)
    rss_tree: int  # bytes, largest sampled sum of the process tree's PSS (shared pages split)
    rc: Optional[int]
    timed_out: bool = False
    cpu_s: float = 0.0  # user + system CPU seconds of the process and its reaped children
    note: str = ""
    rss_tree_sum: int = 0  # bytes, largest sampled sum of the tree's RSS (shared pages counted in each process)

    @property
    def rss(self) -> int:
        return max(self.rss_max_proc, self.rss_tree)


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, rss bytes) for every process we can read."""
    page = os.sysconf("SC_PAGE_SIZE")
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2 :].split()
        try:
            table[int(name)] = (int(rest[1]), int(rest[21]) * page)
        except (IndexError, ValueError):
            continue
    return table


def _pss(pid: int) -> Optional[int]:
    """Proportional set size of ``pid`` in bytes (each page shared with other processes counted as
    its share), from /proc/PID/smaps_rollup; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class TreeSampler(threading.Thread):
    """Peak of the summed memory of a process and all its descendants, sampled every ``period`` s:
    ``peak`` of the PSS sum (a page shared after fork is one page, split between the processes
    that share it), ``peak_rss_sum`` of the RSS sum (such a page counted in every process)."""

    def __init__(self, pid: int, period: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.period, self.peak, self.peak_rss_sum = pid, period, 0, 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            table = _proc_table()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            total, pss, todo = 0, 0, [self.pid]
            while todo:
                p = todo.pop()
                if p in table:
                    total += table[p][1]
                    got = _pss(p)
                    pss += table[p][1] if got is None else got
                todo.extend(children.get(p, ()))
            self.peak = max(self.peak, pss)
            self.peak_rss_sum = max(self.peak_rss_sum, total)
            self._halt.wait(self.period)

    def stop(self):
        self._halt.set()
        self.join()


# Peak RSS must come from a small launcher: at exec() Linux folds the RSS high-water mark of the
# process image being replaced into the new program's ru_maxrss, so a child forked straight from
# bench.py (tens of MB, more after it has read a report) would report at least bench.py's peak.
GNU_TIME = "/usr/bin/time"
RUSAGE_FMT = "RUSAGE %e %U %S %M"
LAUNCHER = (  # fallback where GNU time is missing: python -S -I, ~8 MB
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        os.execvp(sys.argv[2], sys.argv[2:])\n"
    "    finally:\n"
    "        os._exit(127)\n"
    "_, st, ru = os.wait4(pid, 0)\n"
    "with open(sys.argv[1], 'w') as f:\n"
    "    f.write('RUSAGE 0 %f %f %d\\n' % (ru.ru_utime, ru.ru_stime, ru.ru_maxrss))\n"
    "rc = os.waitstatus_to_exitcode(st)\n"
    "sys.exit(rc if rc >= 0 else 128 - rc)\n"
)
_launcher_kind: Optional[str] = None


def launcher(ru_file: str) -> list[str]:
    global _launcher_kind
    if _launcher_kind is None:
        try:
            ok = (
                subprocess.run([GNU_TIME, "-f", RUSAGE_FMT, "-o", os.devnull, "true"], capture_output=True).returncode
                == 0
            )
        except OSError:
            ok = False
        _launcher_kind = "time" if ok else "python"
    if _launcher_kind == "time":
        return [GNU_TIME, "-f", RUSAGE_FMT, "-o", ru_file]
    return [sys.executable, "-S", "-I", "-c", LAUNCHER, ru_file]


def launcher_note() -> str:
    if _launcher_kind == "time":
        return "GNU time (`/usr/bin/time`, ~2 MB)"
    return "a `python -S` launcher (~8 MB: the floor of every RSS figure)"


def measure(
    cmd: list[str],
    *,
    timeout: float,
    log_path: str,
    stdout_path: str = os.devnull,
    env: Optional[dict] = None,
    cwd: Optional[str] = None,
) -> Sample:
    """Run ``cmd`` once, through a small launcher in a new session; wall, CPU, peak RSS, status."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    ru_file = log_path + ".rusage"
    if os.path.exists(ru_file):
        os.remove(ru_file)
    wrapped = launcher(ru_file) + cmd
    with open(stdout_path, "wb") as out, open(log_path, "wb") as err:
        err.write(("$ " + shlex.join(cmd) + "\n").encode())
        err.flush()
        t0 = time.perf_counter()
        p = subprocess.Popen(
            wrapped, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True
        )
        sampler = TreeSampler(p.pid)
        sampler.start()
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        p.wait()
        wall = time.perf_counter() - t0
        timer.cancel()
        sampler.stop()
        rc = p.returncode
        try:  # whatever the measured process left behind in its session
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    cpu, maxrss = 0.0, 0
    try:
        with open(ru_file) as f:
            line = [ln for ln in f.read().splitlines() if ln.startswith("RUSAGE ")][-1].split()
        cpu, maxrss = float(line[2]) + float(line[3]), int(line[4]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return Sample(
        ok=(rc == 0 and not timed_out.is_set()),
        wall_s=wall,
        rss_max_proc=maxrss,
        rss_tree=sampler.peak,
        rss_tree_sum=sampler.peak_rss_sum,
        rc=rc,
        timed_out=timed_out.is_set(),
        cpu_s=cpu,
    )


def tail(path: str, n: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


# ---------------------------------------------------------------------------- peers' venv
def ensure_peers_venv(rebuild: bool = False) -> str:
    """A separate venv with the pinned peers; made on first use. Returns its python."""
    py = os.path.join(PEERS_VENV, "bin", "python")
    with open(PEERS_REQUIREMENTS, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(PEERS_VENV, ".bench-requirements.sha256")
    if not rebuild and os.path.exists(py) and os.path.exists(stamp) and open(stamp).read().strip() == want:
        return py
    if rebuild and os.path.isdir(PEERS_VENV):
        shutil.rmtree(PEERS_VENV)
    log(
        f"installing the peers into {os.path.relpath(PEERS_VENV, REPO)} (pinned in "
        f"{os.path.relpath(PEERS_REQUIREMENTS, REPO)}); first run only ..."
    )
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", PEERS_VENV], check=True)
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "-r", PEERS_REQUIREMENTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(
            "could not install the peers:\n"
            + "\n".join(line for line in r.stdout.splitlines() if "is ignored: it is neither" not in line)[-4000:]
        )
    # torch-tb-profiler and HTA must not need torch (a CUDA torch is gigabytes): make sure.
    r = subprocess.run(
        [
            py,
            "-c",
            "import torch_tb_profiler.profiler, hta.trace_analysis, orjson, sys; sys.exit('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit("the peers' venv is unusable (or imports torch):\n" + r.stderr[-3000:])
    with open(stamp, "w") as f:
        f.write(want + "\n")
    return py


def ensure_tracelens(py: str, src: str) -> tuple[Optional[str], str]:
    """TraceLens in the peers' venv: (description of how it was installed, "") or (None, why
    it is skipped). Installed once from the local checkout ``src`` (it is not on the registry:
    `pip install --no-deps SRC` and the few packages its PyTorch report imports; its other
    dependencies (xprof, office365, msal...) serve JAX, SharePoint and the agent, not this)."""
    probe = [py, "-c", "import TraceLens, importlib.metadata as m; print(m.version('TraceLens'))"]
    r = subprocess.run(probe, capture_output=True, text=True)
    if r.returncode != 0:
        if not os.path.isfile(os.path.join(src, "setup.py")):
            return None, (
                f"TraceLens is not installed in the peers' venv and no checkout is at {os.path.relpath(src, REPO)} "
                "(get one of github.com/AMD-AGI/TraceLens there, or pass --tracelens-src)"
            )
        log(f"installing TraceLens into the peers' venv from {os.path.relpath(src, REPO)} ...")
        # built from a copy outside any git work tree: its setup.py stamps the version with the
        # commit of the repository it sits in, which inside ours would be our commit
        tmp = tempfile.mkdtemp(prefix="tracelens-src-")
        try:
            shutil.copytree(src, os.path.join(tmp, "src"))
            inst = subprocess.run(
                [py, "-m", "pip", "install", "-q", *TRACELENS_DEPS],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if inst.returncode == 0:
                inst = subprocess.run(
                    [py, "-m", "pip", "install", "-q", "--no-deps", os.path.join(tmp, "src")],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=tmp,
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if inst.returncode != 0:
            return None, "TraceLens could not be installed: " + inst.stdout.strip().splitlines()[-1][:300]
        r = subprocess.run(probe, capture_output=True, text=True)
        if r.returncode != 0:
            return None, "TraceLens does not import: " + (r.stderr.strip().splitlines() or ["?"])[-1][:300]
    commit = ""
    try:
        with open(os.path.join(src, ".commit")) as f:
            commit = f" (commit {f.read().strip()[:12]})"
    except OSError:
        pass
    how = (
        f"TraceLens {r.stdout.strip()}{commit}, installed into the peers' venv by `pip install "
        + " ".join(TRACELENS_DEPS)
        + f"` and `pip install --no-deps {os.path.relpath(src, REPO)}` (a local checkout: it is not on PyPI)"
    )
    return how, ""


def precompile() -> None:
    """Byte-compile the package, as an install does: with PYTHONDONTWRITEBYTECODE set (as here)
    every run of ours would otherwise compile ~70 modules, 0.3 s no user pays."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "tb_attention_plugin")], env=env, check=False
    )


def pip_versions(py: str, names: list[str]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except Exception: out[n] = '-'\n"
        "print(json.dumps(out))"
    )
    r = subprocess.run([py, "-c", code, *names], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {n: "?" for n in names}


# ---------------------------------------------------------------------------- our tool
@dataclass
class Ours:
    cold: Optional[list[str]]  # argv with {file}; None: skip
    cached: Optional[list[str]]  # argv with {file} for the cache-using open
    label: str = "tb-attention"
    fallback: bool = False
    notes: list[str] = field(default_factory=list)


def resolve_ours(args) -> Ours:
    """Find and check our CLI; fail clearly (or fall back when asked)."""
    py = args.ours_python or sys.executable
    if args.ours_cmd:
        base = shlex.split(args.ours_cmd)
    elif shutil.which("tb-attention") and not args.ours_python:
        base = ["tb-attention", "analyze", "{file}", "--format", "json"]
    else:
        base = [py, "-m", "tb_attention_plugin.cli", "analyze", "{file}", "--format", "json"]
    if "{file}" not in base:
        base.append("{file}")
    env = ours_env(args)
    problem = None
    help_text = ""
    try:
        probe = [a for a in base if a != "{file}"]
        cut = probe.index("analyze") + 1 if "analyze" in probe else len(probe)
        r = subprocess.run(probe[:cut] + ["--help"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
        help_text = r.stdout + r.stderr
        if r.returncode != 0:
            problem = f"`{shlex.join(probe[:cut] + ['--help'])}` exited {r.returncode}:\n" + help_text[-1500:]
    except FileNotFoundError as e:
        problem = f"not found: {e.filename}"
    except subprocess.TimeoutExpired:
        problem = "`analyze --help` did not answer within 120 s"
    if problem is None:
        has_no_cache = "--no-cache" in help_text
        cold = base + (["--no-cache"] if has_no_cache else [])
        ours = Ours(cold=cold, cached=list(base), label="tb-attention")
        if not has_no_cache:
            ours.notes.append(
                "the CLI has no --no-cache option: the cold row is a first open with "
                "a fresh cache location, like the 'first open' row"
            )
        return ours
    if not args.ours_fallback:
        raise SystemExit(
            "tb-attention CLI is not usable, so our rows cannot be measured:\n  "
            + problem.replace("\n", "\n  ")
            + f"\nInstall it (`pip install -e {REPO}` in the project's venv) and run bench.py with that "
            "python, or pass --ours-cmd 'CMD ... {file}', or --skip-ours for the peers only, or "
            "--ours-fallback to time tb_attention_plugin.trace.records.load_trace() instead."
        )
    cmd = [py, "-c", FALLBACK_SNIPPET, "{file}"]
    r = subprocess.run(
        [py, "-c", "import tb_attention_plugin.trace.records"], capture_output=True, text=True, env=env, cwd=REPO
    )
    if r.returncode != 0:
        raise SystemExit(
            f"--ours-fallback: tb_attention_plugin is not importable with {py}:\n"
            + r.stderr[-1500:]
            + "\nRun bench.py with the project's venv python "
            "(.venv/bin/python) or pass --ours-python."
        )
    first = problem.splitlines()[0] if problem else ""
    return Ours(
        cold=cmd,
        cached=None,
        label="tb-attention load_trace() only (FALLBACK)",
        fallback=True,
        notes=[
            f"FALLBACK: the CLI was not usable ({first}); the tb-attention row times "
            "`load_trace(PATH)` (read + columnar records, no analysis, no cache), not "
            "`tb-attention analyze`. No warm row."
        ],
    )


def ours_env(args, cache_dir: Optional[str] = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cache_dir:
        env["XDG_CACHE_HOME"] = cache_dir
        env["TB_ATTENTION_CACHE_DIR"] = cache_dir
    for kv in args.ours_env or []:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def fill(cmd: list[str], path: str) -> list[str]:
    return [a.replace("{file}", path) for a in cmd]


def check_output(cmd: list[str], env: dict, logs: str, label: str) -> str:
    """Run our (warm) command once more, unmeasured, and check its stdout is a JSON report."""
    out = os.path.join(logs, f"{label}-ours-output.json")
    r = subprocess.run(cmd, stdout=open(out, "wb"), stderr=subprocess.PIPE, env=env, cwd=REPO)
    size = os.path.getsize(out)
    # parsed in another process: bench.py itself stays small (see launcher())
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; d = json.load(open(sys.argv[1], 'rb')); "
            "print(', '.join(list(d)[:6]) if isinstance(d, dict) else type(d).__name__)",
            out,
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0:
        verdict = f"valid JSON ({size / 1e6:.1f} MB; top-level keys: {probe.stdout.strip()})"
    else:
        verdict = f"NOT valid JSON ({size / 1e6:.1f} MB): {probe.stderr.strip().splitlines()[-1:]}"
    os.remove(out) if size > 50e6 else None
    return f"our output (checked once, unmeasured, rc {r.returncode}): {verdict}"


def code_fingerprint() -> str:
    """Hash of tb_attention_plugin's sources: tells whether the code changed during a round."""
    h = hashlib.sha256()
    pkg = os.path.join(REPO, "tb_attention_plugin")
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".py", ".json")):
                try:
                    with open(os.path.join(root, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
                except OSError:
                    pass
    return h.hexdigest()


def dir_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    n = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                n += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return n


# ---------------------------------------------------------------------------- machine
def machine_info(peers_py: Optional[str]) -> dict:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(mem / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python_ours": platform.python_version(),
    }
    try:
        rev = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--", "tb_attention_plugin"], capture_output=True, text=True
        ).stdout.strip()
        info["tb_attention_commit"] = rev + ("+dirty" if dirty else "")
    except OSError:
        pass
    info["ours_versions"] = pip_versions(sys.executable, ["msgspec", "numpy", "isal", "orjson"])
    if peers_py:
        v = subprocess.run(
            [peers_py, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        ).stdout.strip()
        info["python_peers"] = v
        info["peers_versions"] = pip_versions(
            peers_py, ["torch-tb-profiler", "HolisticTraceAnalysis", "pandas", "numpy", "orjson"]
        )
    return info


# ---------------------------------------------------------------------------- report
ROWS = [
    "torch-tb-profiler",
    "HTA",
    "TraceLens",
    "orjson decode",
    "parse floor",
    "ours cold",
    "ours first open",
    "ours warm",
    "ours load_trace",
]


def med(xs):
    return statistics.median(xs) if xs else None


def summarize(samples: list[Sample]) -> dict:
    ok = [s for s in samples if s.ok]
    return {
        "runs": len(samples),
        "ok": len(ok),
        "timeouts": sum(1 for s in samples if s.timed_out),
        "failed": sum(1 for s in samples if not s.ok and not s.timed_out),
        "wall": med([s.wall_s for s in ok]),
        "wall_min": min((s.wall_s for s in ok), default=None),
        "wall_max": max((s.wall_s for s in ok), default=None),
        "cpu": med([s.cpu_s for s in ok]),
        "rss": med([s.rss for s in ok]),
        "rss_proc": med([s.rss_max_proc for s in ok]),
        "rss_tree": med([s.rss_tree for s in ok]),
        "rss_tree_sum": med([s.rss_tree_sum for s in ok]),
    }


def fmt_s(x):
    return "—" if x is None else (f"{x:.2f}" if x < 10 else f"{x:.1f}")


def fmt_gb(x):
    return "—" if x is None else f"{x / GB:.2f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.1f}×"


def report(
    size_label: str,
    trace: dict,
    results: dict[str, list[Sample]],
    ours: Optional[Ours],
    info: dict,
    command: str,
    notes: list[str],
) -> str:
    s = {k: summarize(v) for k, v in results.items() if v}
    cold = s.get("ours cold", {})
    file_bytes = trace["bytes_uncompressed"]
    names = {
        "torch-tb-profiler": "torch-tb-profiler 0.4.3 (RunLoader: parse + run profile)",
        "HTA": "HTA 0.5.0 (TraceAnalysis + get_gpu_kernel_breakdown)",
        "TraceLens": "TraceLens (generate_perf_report_pytorch, xlsx)",
        "orjson decode": "orjson decode of the whole file (reference)",
        "parse floor": "parse floor: msgspec typed decode into 7-field event structs (benchmarks/floor.py)",
        "ours cold": (ours.label if ours and ours.fallback else "tb-attention analyze --no-cache (cold)"),
        "ours first open": "tb-attention analyze, first open (writes the cache)",
        "ours warm": "tb-attention analyze, second open (warm, from the cache)",
        "ours load_trace": "tb-attention `load_trace()` only (read + columnar records; no analysis)",
    }
    lines = []
    copies = (
        (
            f"; {trace['reps']} copies of {trace['steps_per_copy']} profiler steps = "
            f"{trace['reps'] * trace['steps_per_copy']} steps"
        )
        if trace.get("reps")
        else ""
    )
    lines.append(
        f"### {size_label}: {trace['events']:,} events, {file_bytes / 1e6:.0f} MB uncompressed"
        + (f" ({trace['bytes_on_disk'] / 1e6:.0f} MB gzip on disk)" if trace.get("gzip") else "")
        + copies
    )
    lines.append("")
    lines.append(
        "| tool | runs ok | wall (median s) [min–max] | CPU (median s) | peak RSS (median GB) | "
        "RSS / file | ratio vs ours (cold): wall | CPU | RSS |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for key in ROWS:
        if key not in s:
            continue
        r = s[key]
        runs = (
            f"{r['ok']}/{r['runs']}"
            + (f", {r['timeouts']} timeout" if r["timeouts"] else "")
            + (f", {r['failed']} failed" if r["failed"] else "")
        )
        if r["wall"] is None:
            wall = "TIMEOUT" if r["timeouts"] else "FAILED"
        else:
            wall = f"{fmt_s(r['wall'])} [{fmt_s(r['wall_min'])}–{fmt_s(r['wall_max'])}]"
        rss = fmt_gb(r["rss"])
        if r["rss"] is not None and r["rss_tree"] is not None and r["rss_tree"] > r["rss_proc"] * 1.05:
            rss += f" (largest process {fmt_gb(r['rss_proc'])})"
        if r.get("rss_tree_sum") and r["rss"] is not None and r["rss_tree_sum"] > r["rss"] * 1.05:
            rss += f" (RSS summed over the tree {fmt_gb(r['rss_tree_sum'])})"
        per_file = "—" if r["rss"] is None else f"{r['rss'] / file_bytes:.2f}"
        if key == "ours cold":
            rw = rc = rr = "1.0× (ours)"
        else:
            rw, rr = fmt_ratio(r["wall"], cold.get("wall")), fmt_ratio(r["rss"], cold.get("rss"))
            rc = fmt_ratio(r["cpu"], cold.get("cpu"))
        lines.append(
            f"| {names[key]} | {runs} | {wall} | {fmt_s(r['cpu'])} | {rss} | {per_file} | {rw} | {rc} | {rr} |"
        )
    lines.append("")
    # targets
    checks = []

    def check(label, value, ok):
        checks.append(f"| {label} | {value} | {'—' if ok is None else ('PASS' if ok else 'FAIL')} |")

    fb = " (fallback row: not the CLI)" if ours and ours.fallback else ""
    cw = cold.get("wall")
    for key, target in (("torch-tb-profiler", TARGET_VS_TBPROF), ("HTA", TARGET_VS_HTA)):
        pw = s.get(key, {}).get("wall")
        if s.get(key, {}).get("timeouts") and pw is None:
            check(f"cold ≥ {target:g}× faster than {key}{fb}", f"{key} timed out", None)
        elif pw is not None and cw:
            pc, cc = s.get(key, {}).get("cpu"), cold.get("cpu")
            cpu = f" (CPU time: {pc / cc:.1f}×)" if pc and cc else ""
            check(f"cold ≥ {target:g}× faster than {key}{fb}", f"{pw / cw:.1f}× wall{cpu}", pw / cw >= target)
        else:
            check(f"cold ≥ {target:g}× faster than {key}", "not measured", None)
    fw = s.get("parse floor", {}).get("wall")
    if fw and cw:
        fc, cc = s["parse floor"].get("cpu"), cold.get("cpu")
        cpu = f" (CPU time: {cc / fc:.2f}×)" if fc and cc else ""
        check(
            f"cold ≤ {TARGET_VS_FLOOR:g}× the parse floor (same run){fb}",
            f"{cw / fw:.2f}× ({cw:.2f} s / {fw:.2f} s){cpu}",
            cw / fw <= TARGET_VS_FLOOR,
        )
    else:
        check(f"cold ≤ {TARGET_VS_FLOOR:g}× the parse floor (same run)", "not measured", None)
    tl = s.get("TraceLens", {}).get("wall")
    if tl and cw:
        check("cold vs TraceLens (no target)", f"{tl / cw:.1f}× faster", None)
    if cold.get("rss") is not None:
        ratio = cold["rss"] / file_bytes
        ranks = trace.get("ranks", 1)
        per_rank = f"; {cold['rss'] / trace['largest_file']:.2f}× its largest rank file" if ranks > 1 else ""
        check(
            f"cold peak RSS ≤ {TARGET_RSS_VS_FILE:g}× " + ("the job's total size" if ranks > 1 else "file size") + fb,
            f"{ratio:.2f}× ({fmt_gb(cold['rss'])} GB / {file_bytes / GB:.2f} GB{per_rank})",
            ratio <= TARGET_RSS_VS_FILE,
        )
    else:
        check(f"cold peak RSS ≤ {TARGET_RSS_VS_FILE:g}× file size", "not measured", None)
    warm = s.get("ours warm", {}).get("wall")
    if warm is not None:
        check(f"warm ≤ {TARGET_WARM_S:g} s", f"{warm:.2f} s", warm <= TARGET_WARM_S)
    else:
        check(f"warm ≤ {TARGET_WARM_S:g} s", "not measured" + (" (fallback has no cache)" if fb else ""), None)
    lines.append("| target (issue) | measured | |")
    lines.append("|---|---|---|")
    lines.extend(checks)
    lines.append("")
    for n in notes:
        lines.append(f"- {n}")
    return "\n".join(lines)


def header(info: dict, command: str, trace_src: str, given: bool = False) -> str:
    pv = info.get("peers_versions", {})
    ov = info.get("ours_versions", {})
    lines = [
        f"## {info['date']} — `{command}`",
        "",
        f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram_gb']} GiB RAM, {info['os']}"
        " (shared, noisy: medians of the runs)",
        f"- load average (1 min) at start / end: {info.get('load_start', '?')} / {info.get('load_end', '?')}"
        " (above ~1 on 2 cores, other work competed with the runs: trust the CPU column over wall)",
        f"- tb-attention: commit {info.get('tb_attention_commit', '?')}, Python {info['python_ours']}, "
        + ", ".join(f"{k} {v}" for k, v in ov.items()),
    ]
    if pv:
        lines.append(
            f"- peers (own venv): Python {info.get('python_peers', '?')}, "
            + ", ".join(f"{k} {v}" for k, v in pv.items())
        )
    if info.get("tracelens"):
        lines.append(f"- TraceLens: {info['tracelens']}")
    lines.append(
        "- parse floor: `benchmarks/floor.py` with our Python (msgspec typed decode of the whole file "
        "into 7-field event structs); our package byte-compiled first (`compileall`), as an install is"
    )
    if given:
        lines.append(f"- trace: `{trace_src}` (given with --trace)")
    else:
        lines.append(
            f"- trace: made by `benchmarks/make_large_trace.py` from `{trace_src}` (its profiler "
            "steps repeated with shifted timestamps and ids)"
        )
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def prepare_trace(size_mb: float, args, source: Optional[str] = None) -> dict:
    if args.trace:
        path = os.path.abspath(args.trace)
        raw = make_large_trace._uncompressed_size(path)
        count = None
        return {
            "out": path,
            "bytes_uncompressed": raw,
            "bytes_on_disk": os.path.getsize(path),
            "events": count,
            "source": path,
            "gzip": path.endswith(".gz"),
        }
    src = source or args.source or make_large_trace.default_source()
    stem = re.sub(r"(\.\d+)?\.pt\.trace\.json(\.gz)?$|\.json(\.gz)?$", "", os.path.basename(src))
    name = f"bench_{size_mb:g}mb_{stem}"
    traces = os.path.join(WORK, "traces")
    meta = os.path.join(traces, name + (".gz" if args.gzip else "") + ".meta.json")
    if os.path.exists(meta):
        with open(meta) as f:
            info = json.load(f)
        if (
            os.path.exists(info["out"])
            and os.path.getsize(info["out"]) == info["bytes_on_disk"]
            and "source_memory_events" in info
            and os.path.abspath(info.get("source", "")) == os.path.abspath(src)
        ):
            log(f"reusing {os.path.relpath(info['out'], REPO)}")
            return info
    log(f"making a {size_mb:g} MB trace from {os.path.relpath(src, REPO)} ...")
    info = make_large_trace.make(source=src, target_mb=size_mb, use_gzip=args.gzip, name=name)
    info["gzip"] = args.gzip
    with open(meta, "w") as f:
        json.dump(info, f, indent=1)
    return info


def prepare_case(size_mb: Optional[float], args, sources: list[str]) -> dict:
    """One trace per rank, each repeated to size / ranks; totals over the ranks."""
    parts = [prepare_trace(size_mb / len(sources) if size_mb else 0, args, src) for src in sources]
    for t in parts:
        if not t.get("events"):
            t["events"] = count_events(t["out"])
    total = {k: sum(t[k] for t in parts) for k in ("bytes_uncompressed", "bytes_on_disk", "events")}
    return dict(
        parts[0], **total, parts=parts, ranks=len(parts), largest_file=max(t["bytes_uncompressed"] for t in parts)
    )


def count_events(path: str) -> int:
    import gzip as _gz

    opener = _gz.open if path.endswith(".gz") else open
    n = 0
    with opener(path, "rb") as f:
        for line in f:
            n += line.count(b'"ph"')
    return n


def run_dir_for(trace_paths: list[str], label: str) -> str:
    """A folder holding only the traces (one per rank), named as torch-tb-profiler and HTA expect."""
    d = os.path.join(WORK, "runs", label)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    for rank, trace_path in enumerate(trace_paths):
        name = f"worker{rank}.1700000000000.pt.trace.json" + (".gz" if trace_path.endswith(".gz") else "")
        dst = os.path.join(d, name)
        try:
            os.link(trace_path, dst)
        except OSError:
            shutil.copyfile(trace_path, dst)
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=None,
        help="uncompressed sizes in MB of the generated traces (default: CASE_SIZES, 267 MB for the "
        "reference set, 250 MB for the two traces of issue #22)",
    )
    ap.add_argument("--runs", type=int, default=3, help="rounds of every row (default 3); medians reported")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per measurement (default 900)")
    ap.add_argument(
        "--cases",
        nargs="+",
        choices=sorted(CASES) + ["mixes"],
        default=REFERENCE_CASES,
        help="kernel mixes to measure (default: the reference set and issue #22's two traces; 'mixes': "
        "the other forms in MIX_CASES)",
    )
    ap.add_argument("--skip-peers", action="store_true", help="no torch-tb-profiler/HTA/orjson rows")
    ap.add_argument("--skip-ours", action="store_true", help="no tb-attention rows")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=["tbprof", "hta", "tracelens", "orjson", "floor", "ours"],
        help="measure only these rows",
    )
    ap.add_argument(
        "--tracelens-src",
        default=TRACELENS_SRC,
        help="a local checkout of github.com/AMD-AGI/TraceLens to install into the peers' venv when it is not "
        "there yet (default benchmarks/_work/TraceLens-src); without one the TraceLens row is skipped",
    )
    ap.add_argument("--trace", help="benchmark this file instead of generating one")
    ap.add_argument("--source", help="source trace for make_large_trace.py (default: its default)")
    ap.add_argument("--gzip", action="store_true", help="generate and benchmark .json.gz files")
    ap.add_argument(
        "--ours-cmd",
        help="our command, with {file} for the trace (default: "
        "'tb-attention analyze {file} --format json', or 'python -m tb_attention_plugin.cli ...'"
        " when tb-attention is not on PATH); --no-cache is appended for the cold row",
    )
    ap.add_argument("--ours-python", help="python for `-m tb_attention_plugin.cli` (default: this one)")
    ap.add_argument("--ours-env", action="append", metavar="K=V", help="extra environment for our rows")
    ap.add_argument(
        "--ours-fallback",
        action="store_true",
        help="if the CLI is not usable, time load_trace(PATH) instead (labelled FALLBACK)",
    )
    ap.add_argument(
        "--load-row",
        action="store_true",
        help="add a row timing tb_attention_plugin.trace.records.load_trace() alone "
        "(how much of the cold time is reading the trace)",
    )
    ap.add_argument("--rebuild-peers", action="store_true", help="recreate the peers' venv")
    ap.add_argument("--record", action="store_true", help="append the report to benchmarks/RESULTS.md")
    ap.add_argument("--keep-cache", action="store_true", help="keep our per-round cache folders")
    args = ap.parse_args(argv)
    only = set(args.only or ["tbprof", "hta", "tracelens", "orjson", "floor", "ours"])
    if args.skip_peers:
        only -= {"tbprof", "hta", "tracelens", "orjson"}
    if args.skip_ours:
        only -= {"ours"}
    if not only:
        raise SystemExit("nothing to measure")
    exe = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO) else "python"
    command = f"{exe} benchmarks/bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    os.makedirs(WORK, exist_ok=True)

    ours = resolve_ours(args) if "ours" in only else None
    peers_py = ensure_peers_venv(args.rebuild_peers) if only & {"tbprof", "hta", "tracelens", "orjson"} else None
    tracelens_how = tracelens_skip = None
    if "tracelens" in only and peers_py:
        tracelens_how, tracelens_skip = ensure_tracelens(peers_py, args.tracelens_src)
        if tracelens_how is None:
            log(f"TraceLens row skipped: {tracelens_skip}")
            only.discard("tracelens")
    if "ours" in only:
        precompile()
    info = machine_info(peers_py)
    info["tracelens"] = tracelens_how or (f"skipped: {tracelens_skip}" if tracelens_skip else None)
    info["load_start"] = round(os.getloadavg()[0], 2)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logs = os.path.join(WORK, "logs", stamp)
    sizes = [None] if args.trace else (args.sizes or [0])  # 0: the case's own size (CASE_SIZES)
    out_md = []
    raw_all = {"machine": info, "command": command, "sizes": []}
    if args.trace or args.source:
        plan = [("custom", [args.trace or args.source])]
    else:
        cases = [c for name in args.cases for c in (MIX_CASES if name == "mixes" else [name])]
        plan = [(case, case_sources(case)) for case in dict.fromkeys(cases)]
    trace_src = ", ".join(f"{c}: " + " + ".join(f"`{os.path.relpath(x, REPO)}`" for x in srcs) for c, srcs in plan)
    for (case, sources), size in [(p, z) for p in plan for z in sizes]:
        if size == 0:
            size = CASE_SIZES.get(case, 267)
        trace = prepare_case(size, args, sources)
        trace["case"] = case
        label = f"{case}-{trace['bytes_uncompressed'] / 1e6:.0f}MB"
        rdir = run_dir_for([t["out"] for t in trace["parts"]], label)
        rfiles = sorted(os.path.join(rdir, f) for f in os.listdir(rdir))
        # One file: the file itself; a job of several ranks: its run directory, as a user passes it.
        rfile = rfiles[0] if len(rfiles) == 1 else rdir
        results: dict[str, list[Sample]] = {k: [] for k in ROWS}
        notes = list(ours.notes) if ours else []
        cache_sizes = []
        peer_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
        for i in range(1, args.runs + 1):

            def run(key, cmd, **kw):
                lp = os.path.join(logs, f"{label}-{key.replace(' ', '_')}-{i}.log")
                smp = measure(cmd, timeout=args.timeout, log_path=lp, **kw)
                results[key].append(smp)
                state = "TIMEOUT" if smp.timed_out else ("ok" if smp.ok else f"FAILED rc={smp.rc}")
                log(
                    f"[{label} round {i}/{args.runs}] {key:18s} {smp.wall_s:8.2f} s  cpu {smp.cpu_s:7.2f} s  "
                    f"{smp.rss / GB:6.2f} GB  {state}"
                )
                if not smp.ok and not smp.timed_out:
                    log(tail(lp))
                return smp

            # the peers and the floor: (--only key, row, command, environment), in this order
            others = (
                ("tbprof", "torch-tb-profiler", [peers_py, PEER_DRIVERS, "tbprof", rdir], peer_env),
                ("hta", "HTA", [peers_py, PEER_DRIVERS, "hta", rdir], peer_env),
                ("tracelens", "TraceLens", [peers_py, PEER_DRIVERS, "tracelens", *rfiles], peer_env),
                ("floor", "parse floor", [sys.executable, FLOOR, *rfiles], dict(os.environ)),
                ("orjson", "orjson decode", [peers_py, PEER_DRIVERS, "orjson", *rfiles], peer_env),
            )
            for key, row, cmd, env in others:
                if key in only:
                    run(row, cmd, env=env, cwd=WORK, stdout_path=os.path.join(logs, f"{label}-{key}-{i}.out"))
            if "ours" in only:
                # A fresh copy in a fresh folder, with a fresh cache location, every round: whatever
                # the cache is keyed on (path, inode, mtime) and wherever it lives (beside the file,
                # $XDG_CACHE_HOME, $TB_ATTENTION_CACHE_DIR), round i cannot reuse round i-1's cache.
                code_before = code_fingerprint()
                rd = os.path.join(WORK, "ours", f"{label}-round{i}")
                if os.path.isdir(rd):
                    shutil.rmtree(rd)
                cache = os.path.join(rd, "cache")
                os.makedirs(cache)
                mine = os.path.join(rd, os.path.basename(rfile))
                if rfile == rdir:
                    shutil.copytree(rdir, mine)
                else:
                    shutil.copyfile(rfile, mine)
                env = ours_env(args, cache)
                cold_cache = os.path.join(rd, "cold-cache")
                os.makedirs(cold_cache)
                run("ours cold", fill(ours.cold, mine), env=ours_env(args, cold_cache), cwd=REPO)
                if ours.cached:
                    before = dir_bytes(rd) - dir_bytes(mine)
                    run("ours first open", fill(ours.cached, mine), env=env, cwd=REPO)
                    run("ours warm", fill(ours.cached, mine), env=env, cwd=REPO)
                    cache_sizes.append(dir_bytes(rd) - dir_bytes(mine) - before)
                    first, warm = results["ours first open"][-1], results["ours warm"][-1]
                    if first.ok and warm.ok and warm.cpu_s > max(1.0, 0.5 * first.cpu_s):
                        notes.append(
                            f"round {i}: the warm open took {warm.wall_s:.1f} s ({warm.cpu_s:.1f} s CPU), "
                            "like an analysis: it missed the cache"
                        )
                    if dir_bytes(cold_cache):
                        notes.append(
                            f"round {i}: the --no-cache run wrote {dir_bytes(cold_cache) / 1e6:.1f} MB "
                            "into its cache folder"
                        )
                if args.load_row and not ours.fallback:
                    run(
                        "ours load_trace",
                        [args.ours_python or sys.executable, "-c", FALLBACK_SNIPPET, mine],
                        env=ours_env(args),
                        cwd=REPO,
                    )
                if code_fingerprint() != code_before:
                    notes.append(
                        f"round {i}: tb_attention_plugin/ changed while our rows ran (someone edited "
                        "it): that round mixes two versions of the code, and a cache keyed on the "
                        "code misses"
                    )
                if ours.cached and i == args.runs:  # unmeasured: check that what we timed printed a report
                    notes.append(check_output(fill(ours.cached, mine), env, logs, label))
                if not args.keep_cache:
                    shutil.rmtree(rd, ignore_errors=True)
        if cache_sizes:
            cs = med(cache_sizes)
            if cs == 0:
                notes.append(
                    "no cache file appeared beside the trace or under $XDG_CACHE_HOME/"
                    "$TB_ATTENTION_CACHE_DIR: if the cache lives elsewhere, rounds after the "
                    "first may find it warm (pass --ours-env to point it at a fresh folder)"
                )
            else:
                notes.append(f"on-disk cache written by the first open: {cs / 1e6:.1f} MB (median)")
        if case in CASE_NOTES:
            mem = trace.get("source_memory_events")
            has = (
                "no memory events" if mem == 0 else f"{mem} memory events per copy" if mem else "memory events unknown"
            )
            notes.append(
                f"case `{case}`: {CASE_NOTES[case]} ({has}); its profiler steps repeated to "
                f"{trace['bytes_uncompressed'] / 1e6:.0f} MB"
                + (
                    f" in {trace['ranks']} rank files of ~{trace['largest_file'] / 1e6:.0f} MB, "
                    "passed to every tool as one run directory"
                    if trace["ranks"] > 1
                    else ""
                )
            )
        notes.append(
            f"each measurement runs under {launcher_note()}; "
            "peak RSS: max of the kernel's rusage for the largest process and a 10 Hz sample of "
            "the summed PSS of the process tree (torch-tb-profiler parses in a spawned child, HTA in a "
            "forked pool worker, ours reads a big file with a forked child; PSS splits a page shared "
            "after fork between the processes that share it, where a sum of RSS counts it in each)"
        )
        notes.append(
            "wall: spawn to exit of a fresh process (interpreter start and imports included); "
            "CPU: user + system seconds of the process and its children (less sensitive than "
            "wall to other load on the machine); the trace is in the page cache for every row"
        )
        if ours and "ours" in only:
            shown = [a if a != "{file}" else "FILE" for a in (ours.cached or ours.cold)]
            shown = [os.path.relpath(a, REPO) if os.path.isabs(a) and a.startswith(REPO) else a for a in shown]
            notes.append(
                f"our command: `{shlex.join(shown)}`, stdout to /dev/null"
                + ("; the cold row adds `--no-cache`" if ours.cached and ours.cold != ours.cached else "")
            )
        md = report(
            f"{case}: {trace['bytes_uncompressed'] / 1e6:.0f} MB"
            + (f" job of {trace['ranks']} ranks" if trace["ranks"] > 1 else " trace"),
            trace,
            results,
            ours,
            info,
            command,
            notes,
        )
        out_md.append(md)
        raw_all["sizes"].append(
            {"trace": trace, "notes": notes, "results": {k: [s.__dict__ for s in v] for k, v in results.items() if v}}
        )
        shutil.rmtree(rdir, ignore_errors=True)

    info["load_end"] = round(os.getloadavg()[0], 2)
    text = header(info, command, trace_src, bool(args.trace)) + "\n" + "\n\n".join(out_md) + "\n"
    print(text)
    with open(os.path.join(WORK, f"results-{stamp}.json"), "w") as f:
        json.dump(raw_all, f, indent=1, default=str)
    if args.record:
        res = os.path.join(HERE, "RESULTS.md")
        new = not os.path.exists(res)
        with open(res, "a") as f:
            if new:
                f.write(
                    "# Large-trace benchmark results\n\nAppended by `python benchmarks/bench.py --record`; "
                    "newest last. See README.md for what is measured.\n\n"
                )
            f.write(text + "\n")
        log(f"appended to {os.path.relpath(res, REPO)}")
    log(f"logs in {os.path.relpath(logs, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
