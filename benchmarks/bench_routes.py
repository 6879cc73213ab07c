#!/usr/bin/env python3
"""Route benchmark: a real TensorBoard serving the Attention tab on a ~1M-event trace.

    .venv/bin/python benchmarks/bench_routes.py              # ~1M events, 100 requests per route
    .venv/bin/python benchmarks/bench_routes.py --record     # same, and append the report to RESULTS.md
    .venv/bin/python benchmarks/bench_routes.py --requests 50 --skip-warm
    .venv/bin/python benchmarks/bench_routes.py --trace some.pt.trace.json --downloads

What it does (benchmarks/README.md, "Route benchmark"):

1. makes (or reuses) a trace of ``--events`` events with make_large_trace.py and puts it in a
   fresh log directory as run ``big`` (``<logdir>/big/worker0.<ms>.pt.trace.json``, the layout of
   ``tensorboard_trace_handler``), next to a small run ``small`` (the committed 12-layer SDPA
   trace) to compare against; the report cache is a fresh folder (``TB_ATTENTION_CACHE_DIR``);
2. **cold pass**: spawns ``tensorboard --logdir <logdir> --port <free>`` from this Python's
   environment and times spawn -> TensorBoard answers HTTP -> the plugin's routes answer ->
   the big trace is ready, recording the loading states and progress the routes report on the
   way (and how fast ``runs``/``status`` answer meanwhile);
3. times every data route the dashboard uses, ``--requests`` times each after ``--warmup``
   unmeasured ones, sequentially over HTTP, round-robin over the routes; p50/p95/max per route
   and overall against the issue's target (p95 <= 100 ms);
4. **warm pass**: stops TensorBoard and starts it again on the same logdir and cache, times the
   same start-up milestones (the trace now comes from the disk cache) and a shorter round of the
   routes;
5. prints a markdown report (``--record``: appends it to benchmarks/RESULTS.md) and leaves raw
   numbers in ``benchmarks/_work/routes-<stamp>.json``.

TensorBoard and every process under it (the plugin's analysis workers,
``python -m tb_attention_plugin.server.worker``, run in sessions of their own) are killed on
exit, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional
from urllib.parse import urlencode

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORK = os.path.join(HERE, "_work")
sys.path.insert(0, HERE)
import bench  # noqa: E402  (machine_info, pip_versions, code_fingerprint, dir_bytes)
import make_large_trace  # noqa: E402

PREFIX = "/data/plugin/attention"
TARGET_P95_MS = 100.0
SMALL_SOURCE = os.path.join(HERE, "traces", "gpt12_sdpa_train_mem.pt.trace.json.gz")
BIG, SMALL = "big", "small"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):
    raise Interrupted(f"signal {signum}")


# ---------------------------------------------------------------------------- processes
def _proc_stat(pid: int) -> Optional[tuple[int, int]]:
    """(ppid, start time in clock ticks) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    if rest[0] == "Z":
        return None
    return int(rest[1]), int(rest[19])


def descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live process below ``root``."""
    children: dict[int, list[int]] = {}
    starts = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
                starts[int(name)] = st[1]
    out, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out[c] = starts[c]
                todo.append(c)
    return out


class TensorBoard:
    """One ``tensorboard`` process (own session) and what it starts; ``stop()`` ends them all."""

    def __init__(self, logdir: str, port: int, env: dict, log_path: str):
        exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
        self.cmd = ([exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "tensorboard.main"]) + [
            "--logdir",
            logdir,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ]
        self.port = port
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        self.known: dict[int, int] = {}  # pid -> start time: everything seen below it

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def remember_children(self) -> None:
        if self.alive():
            self.known.update(descendants(self.proc.pid))

    def worker_pids(self) -> list[int]:
        self.remember_children()
        out = []
        for pid in self.known:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"tb_attention_plugin.server.worker" in f.read():
                        out.append(pid)
            except OSError:
                pass
        return sorted(out)

    def stop(self) -> list[int]:
        """Terminate TensorBoard, then kill whatever it started that is still there. Returns
        the pids that had to be killed after TensorBoard was gone."""
        self.remember_children()
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait(5)
        killed = []
        deadline = time.monotonic() + 3.0  # workers exit by themselves once their parent is gone
        while True:
            left = [p for p, start in self.known.items() if (_proc_stat(p) or (0, None))[1] == start]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for p in left:  # same pid and same start time: still ours
            try:
                os.kill(p, signal.SIGKILL)
                killed.append(p)
            except OSError:
                pass
        self._log.close()
        return killed

    def log_tail(self, n: int = 30) -> str:
        return bench.tail(self.log_path, n)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- HTTP
class Client:
    """One keep-alive connection to 127.0.0.1 (reconnects when the server closed it)."""

    def __init__(self, port: int, timeout: float = 120.0):
        self.port, self.timeout = port, timeout
        self.conn: Optional[http.client.HTTPConnection] = None
        self.connects = 0  # connections opened (keep-alive: one, unless the server closes)
        self.requests = 0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, seconds from sending the request to having read the whole body)."""
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                self.connects += 1
            self.requests += 1
            t0 = time.perf_counter()
            try:
                self.conn.request("GET", path, headers={"Accept": "application/json"})
                r = self.conn.getresponse()
                body = r.read()
                dt = time.perf_counter() - t0
                if r.getheader("Connection", "").lower() == "close" or r.version == 10:
                    self.close()
                return r.status, body, dt
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt:
                    raise
            except Exception:
                self.close()
                raise
        raise AssertionError("unreachable")

    def try_get(self, path: str) -> Optional[tuple[int, bytes, float]]:
        try:
            return self.get(path)
        except OSError:
            self.close()
            return None


def _json(body: bytes) -> dict:
    try:
        d = json.loads(body)
        return d if isinstance(d, dict) else {}
    except ValueError:
        return {}


def pct(xs: list[float], p: float) -> Optional[float]:
    """Nearest-rank percentile (p in 0..100): the smallest value with at least p% of the
    samples at or below it."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


def lat_stats(xs: list[float]) -> dict:
    return {
        "n": len(xs),
        "p50_ms": _ms(pct(xs, 50)),
        "p95_ms": _ms(pct(xs, 95)),
        "max_ms": _ms(max(xs) if xs else None),
    }


def _ms(s: Optional[float]) -> Optional[float]:
    return None if s is None else round(s * 1000.0, 2)


# ---------------------------------------------------------------------------- the log directory
def prepare_trace(args) -> dict:
    if args.trace:
        path = os.path.abspath(args.trace)
        log(f"counting the events of {path} ...")
        return {
            "out": path,
            "bytes_uncompressed": make_large_trace._uncompressed_size(path),
            "bytes_on_disk": os.path.getsize(path),
            "events": bench.count_events(path),
            "source": path,
            "given": True,
        }
    src = os.path.abspath(args.source or make_large_trace.default_source())
    doc = make_large_trace.load_source(src)
    plan = make_large_trace.Plan(doc, 100.0)
    outside = len(doc["traceEvents"]) - len(plan.block_idx)
    reps = max(1, math.ceil((args.events - outside) / max(1, len(plan.block_idx))))
    del doc, plan
    stem = re.sub(r"(_rank\d+)?(\.\d+)?\.pt\.trace\.json(\.gz)?$|\.json(\.gz)?$", "", os.path.basename(src))
    name = f"routes_{stem}"
    out = os.path.join(WORK, "traces", f"{name}_x{reps}.pt.trace.json")
    meta = out + ".meta.json"
    if os.path.exists(meta):
        with open(meta) as f:
            info = json.load(f)
        if (
            os.path.exists(info["out"])
            and os.path.getsize(info["out"]) == info.get("bytes_on_disk")
            and os.path.abspath(info.get("source", "")) == src
            and info.get("events")
        ):
            log(f"reusing {os.path.relpath(info['out'], REPO)} ({info['events']:,} events)")
            return info
    os.makedirs(os.path.dirname(out), exist_ok=True)
    log(f"making a trace of ~{args.events:,} events ({reps} copies of the steps of {os.path.relpath(src, REPO)}) ...")
    info = make_large_trace.make(source=src, reps=reps, out=out, name=name)
    with open(meta, "w") as f:
        json.dump(info, f, indent=1)
    return info


def make_logdir(root: str, trace: dict) -> dict:
    """<root>/logdir/{big,small}/worker0.<ms>.pt.trace.json[.gz] and an empty <root>/cache."""
    logdir, cache = os.path.join(root, "logdir"), os.path.join(root, "cache")
    os.makedirs(cache)
    ms = int(time.time() * 1000)
    files = {}
    for run, src in ((BIG, trace["out"]), (SMALL, SMALL_SOURCE)):
        d = os.path.join(logdir, run)
        os.makedirs(d)
        dst = os.path.join(d, f"worker0.{ms}.pt.trace.json" + (".gz" if src.endswith(".gz") else ""))
        try:
            os.link(src, dst)  # keeps the source's mtime: no settling wait
        except OSError:
            shutil.copy2(src, dst)
        files[run] = dst
    return {"logdir": logdir, "cache": cache, "files": files}


# ---------------------------------------------------------------------------- start-up
def wait_until_ready(tb: TensorBoard, timeout: float, poll: float = 0.2) -> dict:
    """Spawn -> HTTP -> plugin routes -> both runs ready, with what the routes said meanwhile."""
    c = Client(tb.port, timeout=30)
    out: dict = {"progress": [], "pending_answers": [], "during_load": {"runs": [], "status": []}}
    deadline = time.perf_counter() + timeout

    def check():
        if not tb.alive():
            raise RuntimeError(f"tensorboard exited (rc {tb.proc.returncode}):\n{tb.log_tail()}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"not ready after {timeout:.0f} s:\n{tb.log_tail()}")

    while True:  # 1. any HTTP answer
        check()
        r = c.try_get("/")
        if r is not None:
            out["http_s"] = round(tb.elapsed(), 3)
            out["http_status"] = r[0]
            break
        time.sleep(0.02)
    while True:  # 2. the plugin's own routes
        check()
        r = c.try_get(PREFIX + "/runs")
        if r is not None and r[0] == 200:
            out["plugin_s"] = round(tb.elapsed(), 3)
            break
        time.sleep(0.02)
    r = c.try_get("/data/plugins_listing")
    if r is not None and r[0] == 200:
        out["listed_active"] = bool((_json(r[1]).get("attention") or {}).get("enabled"))
    last_summary = -1e9
    last_key = None
    sel: dict = {}
    probe: Optional[threading.Thread] = None
    pc = Client(tb.port, timeout=30)

    def probe_summary(t: float) -> None:
        s = pc.try_get(PREFIX + "/summary?" + urlencode({"run": BIG}))
        if s is not None:
            sd = _json(s[1])
            out["pending_answers"].append(
                {
                    "t": round(t, 2),
                    "status": s[0],
                    "seconds": round(s[2], 3),
                    "state": sd.get("state"),
                    "message": sd.get("message"),
                    "counts": sd.get("counts"),
                }
            )
            if s[0] == 200 and sd.get("state") == "ready" and "summary_ready_s" not in out:
                out["summary_ready_s"] = round(tb.elapsed(), 3)

    while True:  # 3. both runs analysed
        check()
        t = tb.elapsed()
        r = c.try_get(PREFIX + "/runs")
        if r is None:
            time.sleep(poll)
            continue
        out["during_load"]["runs"].append(r[2])
        d = _json(r[1])
        states = {}
        for run in d.get("runs") or []:
            for f in run.get("files") or []:
                states[run["run"]] = f
        st = c.try_get(PREFIX + "/status")
        loading = []
        if st is not None:
            out["during_load"]["status"].append(st[2])
            loading = [
                {
                    "file": x.get("file", "").split("/")[0],
                    "elapsed_s": x.get("elapsed_s"),
                    "size_mb": round((x.get("size") or 0) / 1e6, 1),
                    "stage": (x.get("progress") or {}).get("stage"),
                    "fraction": (x.get("progress") or {}).get("fraction"),
                }
                for x in _json(st[1]).get("loading") or []
            ]
        for run, f in states.items():  # /runs carries the same progress per file
            if f.get("progress"):
                out.setdefault("runs_progress", {}).setdefault(run, 0)
                out["runs_progress"][run] += 1
        counts = d.get("counts") or {}
        key = (
            json.dumps({k: (v.get("state"), v.get("message")) for k, v in sorted(states.items())}),
            json.dumps([(x["file"], x["stage"]) for x in loading]),
        )
        sample = {
            "t": round(t, 2),
            "counts": {k: v for k, v in counts.items() if v},
            "states": {k: v.get("state") for k, v in sorted(states.items())},
            "messages": {k: v.get("message") for k, v in sorted(states.items()) if v.get("message")},
            "loading": loading,
        }
        out["progress"].append(sample)
        if key != last_key:
            last_key = key
            log(
                f"  {t:6.2f} s  "
                + ", ".join(f"{k}: {v}" for k, v in sample["states"].items())
                + (
                    "  loading " + ", ".join(f"{x['file']} ({x['elapsed_s']} s, {_prog(x)})" for x in loading)
                    if loading
                    else ""
                )
            )
        for run, f in states.items():
            if f.get("state") in ("ready", "error") and f"{run}_ready_s" not in out:
                out[f"{run}_ready_s"] = round(t, 3)
                out[f"{run}_state"] = f.get("state")
                out[f"{run}_analysis_s"] = f.get("seconds")
                if f.get("state") == "error":
                    raise RuntimeError(f"run {run} failed: {f.get('message')}")
        big = states.get(BIG) or {}
        if big.get("state") == "loading" and t - last_summary > 2.0 and not (probe and probe.is_alive()):
            # what the dashboard's routes answer while the trace loads (202 + state + counts,
            # after waiting up to 1.5 s for it); from a thread with its own connection, so that
            # the 0.2 s samples of /runs and /status (and the progress they carry) go on meanwhile
            last_summary = t
            probe = threading.Thread(target=probe_summary, args=(t,), daemon=True)
            probe.start()
        if all(f"{r}_ready_s" in out for r in (BIG, SMALL)):
            for run, f in states.items():
                sel[run] = {"run": run, "worker": f.get("worker"), "span": f.get("span"), "file": f.get("file")}
            out["selection"] = sel
            big_file = states[BIG]
            out["big_analysis_s"] = big_file.get("seconds")
            break
        time.sleep(poll)
    out["workers"] = tb.worker_pids()
    if probe is not None:
        probe.join(5)
    pc.close()
    c.close()
    for k in ("runs", "status"):
        out["during_load"][k] = lat_stats(out["during_load"][k])
    out["big_progress"] = progress_seen(out, BIG)
    log(f"  progress seen while {BIG} loaded: {progress_summary(out['big_progress'])}")
    return out


def _prog(x: dict) -> str:
    """`reading 45 %` from a loading entry's stage and fraction."""
    if not x.get("stage"):
        return "no progress"
    f = x.get("fraction")
    return x["stage"] + ("" if f is None else f" {f * 100:.0f} %")


def progress_seen(st: dict, run: str) -> list:
    """[(t, stage, fraction)] of ``run`` in the /status samples, consecutive repeats dropped."""
    seen = []
    for p in st["progress"]:
        for x in p["loading"]:
            if x["file"] == run and x.get("stage"):
                item = (p["t"], x["stage"], x.get("fraction"))
                if not seen or seen[-1][1:] != item[1:]:
                    seen.append(item)
    return seen


def progress_summary(seen: list) -> str:
    if not seen:
        return "none (loaded too fast to catch, or no progress reported)"
    stages = []
    for _, stage, _ in seen:
        if not stages or stages[-1] != stage:
            stages.append(stage)
    reading = [f for _, stage, f in seen if stage == "reading" and f is not None]
    return (
        f"stages {' -> '.join(stages)}; fraction read while reading: "
        + (", ".join(f"{f:.2f}" for f in reading) if reading else "none sampled")
        + f" ({len(seen)} distinct samples, {seen[0][0]:.1f}–{seen[-1][0]:.1f} s)"
    )


def progress_cell(seen: list) -> str:
    fr = [f for _, stage, f in seen if stage == "reading" and f is not None]
    if not seen:
        return "no progress seen"
    return (
        f"progress seen in {len(seen)} samples"
        + (f", {fr[0] * 100:.0f}–{fr[-1] * 100:.0f} % read" if fr else "")
        + f", up to stage `{seen[-1][1]}`"
    )


def progress_lines(st: dict) -> list[str]:
    """The loading states as they changed, compressed to one line per change."""
    lines, last, samples = [], None, st["progress"]

    def key_of(p):
        return (json.dumps(p["states"]), json.dumps([(x["file"], x.get("stage")) for x in p["loading"]]))

    for i, p in enumerate(samples):
        key = key_of(p)
        nxt = samples[i + 1] if i + 1 < len(samples) else None
        before_change = nxt is not None and key != key_of(nxt)
        if key == last and not (before_change and p["loading"]):
            continue
        last = key
        loading = ", ".join(f"`{x['file']}` {x['elapsed_s']} s, {_prog(x)}" for x in p["loading"]) or "—"
        lines.append(
            f"| {p['t']:.2f} | "
            + ", ".join(
                f"{k}: {v}" + (f" ({p['messages'][k]})" if p["messages"].get(k) else "") for k, v in p["states"].items()
            )
            + f" | {loading} | "
            + ", ".join(f"{k} {v}" for k, v in p["counts"].items())
            + " |"
        )
    return lines


# ---------------------------------------------------------------------------- the routes
def sel_params(sel: dict, prefix: str = "") -> dict:
    run_key = prefix[:-1] if prefix else "run"
    out = {run_key: sel["run"]}
    for k in ("worker", "span", "file"):
        if sel.get(k) is not None:
            out[prefix + k] = sel[k]
    return out


def route_plan(c: Client, sel: dict) -> tuple[list[tuple[str, str, str]], dict]:
    """[(label, what, path)] of what the dashboard asks for, with its parameters."""
    b, s = sel[BIG], sel[SMALL]

    def q(route, **kw):
        return f"{PREFIX}/{route}?" + urlencode({**sel_params(b), **{k: v for k, v in kw.items() if v is not None}})

    first = q("kernels", offset=0, limit=50, sort="dur_us", order="desc", scope="attention")
    st, body, _ = c.get(q("kernels", offset=0, limit=50, sort="dur_us", order="desc", scope="all"))
    d = _json(body)
    if st != 200 or d.get("state") != "ready":
        raise RuntimeError(f"kernels answered {st}: {body[:300]!r}")
    total_all = int(d["total"])
    kid = d["rows"][0]["id"] if d.get("rows") else 0
    deep = max(0, (total_all - 1) // 50 * 50)
    mid = (total_all // 2) // 50 * 50
    st, body, _ = c.get(first)
    total_att = int(_json(body).get("total") or 0)
    info = {"kernels_all": total_all, "kernels_attention": total_att, "deep_offset": deep}
    st, body, _ = c.get(q("timeline", width=100))
    ext = (_json(body).get("extent") or [0.0, 1.0]) if st == 200 else [0.0, 1.0]
    plan = [
        ("index.js", "the dashboard's code", f"{PREFIX}/index.js"),
        ("runs", "run table (polled every 1.5–10 s)", f"{PREFIX}/runs"),
        ("status", "loader state", f"{PREFIX}/status"),
        ("summary", "summary + advice + notices", q("summary")),
        ("phases", "phase breakdown", q("phases")),
        ("memory", "memory block", q("memory")),
        ("roofline", "attention, grouped (dashboard default)", q("roofline", scope="attention", group=1)),
        ("roofline", "all kernels, grouped", q("roofline", scope="all", group=1)),
        ("roofline", "attention, one point per kernel (≤2000)", q("roofline", scope="attention", group=0)),
        ("kernels", "first page (dashboard default: attention, by duration)", first),
        (
            "kernels",
            "all GPU activity, first page",
            q("kernels", offset=0, limit=50, sort="dur_us", order="desc", scope="all"),
        ),
        (
            "kernels",
            f"all, middle page (offset {mid:,})",
            q("kernels", offset=mid, limit=50, sort="dur_us", order="desc", scope="all"),
        ),
        (
            "kernels",
            f"all, last page (offset {deep:,})",
            q("kernels", offset=deep, limit=50, sort="dur_us", order="desc", scope="all"),
        ),
        ("kernels", "all, sorted by name", q("kernels", offset=0, limit=50, sort="name", order="asc", scope="all")),
        (
            "kernels",
            "all, sorted by memory util., bound=memory",
            q("kernels", offset=0, limit=50, sort="memory_util", order="desc", scope="all", bound="memory"),
        ),
        (
            "kernels",
            "phase=softmax, direction=backward",
            q(
                "kernels",
                offset=0,
                limit=50,
                sort="dur_us",
                order="desc",
                scope="attention",
                phase="softmax",
                direction="backward",
            ),
        ),
        (
            "kernels",
            "text search q=softmax (all)",
            q("kernels", offset=0, limit=50, sort="dur_us", order="desc", scope="all", q="softmax"),
        ),
        (
            "kernels",
            "text search q=attn, page 3, by FLOPs",
            q("kernels", offset=100, limit=50, sort="flops", order="desc", scope="all", q="attn"),
        ),
        (
            "kernels",
            "limit=1000 (largest page)",
            q("kernels", offset=0, limit=1000, sort="dur_us", order="desc", scope="all"),
        ),
        ("kernel", "one row by id", q("kernel", id=kid)),
        ("overview", "runs overview (one row per run)", f"{PREFIX}/overview"),
        ("timeline", "whole trace, 1200 px (every kernel merged per pixel)", q("timeline", width=1200)),
        (
            "timeline",
            "zoomed: the first 1 % of the trace, 1200 px",
            q("timeline", width=1200, t0=ext[0], t1=ext[0] + (ext[1] - ext[0]) / 100),
        ),
        (
            "compare",
            f"{BIG} vs {SMALL}",
            f"{PREFIX}/compare?" + urlencode({**sel_params(b, "base_"), **sel_params(s, "new_")}),
        ),
    ]
    return plan, info


def measure_routes(c: Client, plan: list, requests: int, warmup: int, budget_s: float, min_requests: int) -> list[dict]:
    """Round-robin over the routes: each round sends every route once (after ``warmup``
    unmeasured rounds). A route whose measured time passes ``budget_s`` stops once it has
    ``min_requests`` samples."""
    res = [{"route": lab, "what": what, "path": path, "lat": [], "bytes": 0, "bad": []} for lab, what, path in plan]
    for _ in range(warmup):
        for r in res:
            st, body, dt = c.get(r["path"])
            r.setdefault("warmup_ms", []).append(_ms(dt))
            _check(r, st, body)
    for i in range(requests):
        active = [r for r in res if not (sum(r["lat"]) > budget_s and len(r["lat"]) >= min_requests)]
        if not active:
            break
        for r in active:
            st, body, dt = c.get(r["path"])
            r["lat"].append(dt)
            r["bytes"] = len(body)
            _check(r, st, body)
        if (i + 1) % 10 == 0:
            log(f"  round {i + 1}/{requests}")
    for r in res:
        r.update(lat_stats(r["lat"]))
        r["capped"] = len(r["lat"]) < requests
    return res


def _check(r: dict, st: int, body: bytes) -> None:
    ok = st == 200
    if ok and r["route"] not in ("index.js", "runs", "status"):
        ok = _json(body).get("state") == "ready"
    if not ok and len(r["bad"]) < 3:
        r["bad"].append(f"{st}: {body[:200]!r}")


def measure_downloads(c: Client, sel: dict, n: int) -> list[dict]:
    out = []
    for lab, route in (("report", "report"), ("annotated", "annotated")):
        path = f"{PREFIX}/{route}?" + urlencode(sel_params(sel[BIG]))
        lat, size, bad = [], 0, []
        for _ in range(n):
            st, body, dt = c.get(path)
            lat.append(dt)
            size = len(body)
            if st != 200:
                bad.append(f"{st}: {body[:200]!r}")
        out.append({"route": lab, "path": path, "lat": lat, "bytes": size, "bad": bad, **lat_stats(lat)})
    return out


# ---------------------------------------------------------------------------- report
def fmt_ms(x: Optional[float]) -> str:
    return "—" if x is None else (f"{x:.1f}" if x < 100 else f"{x:.0f}")


def fmt_bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else (f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B")


def route_table(rows: list[dict], target: bool = True) -> list[str]:
    lines = [
        "| route | request | n | p50 ms | p95 ms | max ms | answer | p95 ≤ 100 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = ("PASS" if r["p95_ms"] is not None and r["p95_ms"] <= TARGET_P95_MS else "FAIL") if target else "—"
        if r["bad"]:
            verdict += f" ({len(r['bad'])} bad answers)"
        lines.append(
            f"| `{r['route']}` | {r.get('what', '')} | {r['n']}{' (capped)' if r.get('capped') else ''} | "
            f"{fmt_ms(r['p50_ms'])} | {fmt_ms(r['p95_ms'])} | {fmt_ms(r['max_ms'])} | {fmt_bytes(r['bytes'])} | {verdict} |"
        )
    return lines


def overall(rows: list[dict]) -> dict:
    return lat_stats([x for r in rows for x in r["lat"]])


def startup_table(passes: dict) -> list[str]:
    cols = [k for k in ("cold", "warm") if k in passes]
    lines = ["| from spawn of `tensorboard` to … (s) | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]

    def row(label, key):
        vals = []
        for k in cols:
            v = passes[k]["startup"].get(key)
            vals.append("—" if v is None else f"{v:.2f}")
        lines.append(f"| {label} | " + " | ".join(vals) + " |")

    row("TensorBoard answers HTTP (`/`)", "http_s")
    row("the plugin's routes answer (`/runs` 200)", "plugin_s")
    row(f"run `{SMALL}` ready", f"{SMALL}_ready_s")
    row(f"run `{BIG}` ready (`/runs` says ready)", f"{BIG}_ready_s")
    vals = []
    for k in cols:
        v = passes[k]["startup"].get("big_analysis_s")
        vals.append("—" if v is None else f"{v:.2f}")
    lines.append(f"| (`{BIG}`: seconds the worker reported for the analysis / cache read) | " + " | ".join(vals) + " |")
    for key, label in (("runs", "`/runs`"), ("status", "`/status`")):
        vals = []
        for k in cols:
            d = passes[k]["startup"]["during_load"][key]
            vals.append(
                f"p50 {fmt_ms(d['p50_ms'])} ms, p95 {fmt_ms(d['p95_ms'])} ms, max {fmt_ms(d['max_ms'])} ms (n {d['n']})"
            )
        lines.append(f"| while loading: {label} latency | " + " | ".join(vals) + " |")
    return lines


def build_report(
    info: dict, trace: dict, passes: dict, downloads: list, command: str, notes: list[str], route_info: dict
) -> str:
    ov = info.get("ours_versions", {})
    lines = [
        f"## {info['date']} — `{command}`",
        "",
        f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram_gb']} GiB RAM, {info['os']} (shared, noisy)",
        f"- load average (1 min) at start / end: {info.get('load_start', '?')} / {info.get('load_end', '?')}"
        " (above ~1 on 2 cores, other work competed with TensorBoard and its worker)",
        f"- tb-attention: commit {info.get('tb_attention_commit', '?')}, Python {info['python_ours']}, "
        + ", ".join(f"{k} {v}" for k, v in ov.items()),
    ]
    if trace.get("given"):
        lines.append(f"- trace: `{trace['out']}` (given with --trace)")
    else:
        lines.append(
            f"- trace: made by `benchmarks/make_large_trace.py` from `{os.path.relpath(trace['source'], REPO)}` "
            f"({trace.get('reps')} copies of its {trace.get('steps_per_copy')} profiler steps, "
            f"{trace.get('source_memory_events', 0) * trace.get('reps', 0):,} memory events)"
        )
    lines += [
        f"- run `{BIG}`: {trace['events']:,} events, {trace['bytes_uncompressed'] / 1e6:.0f} MB uncompressed; "
        f"{route_info['kernels_all']:,} GPU activities, {route_info['kernels_attention']:,} in attention; "
        f"run `{SMALL}`: `{os.path.relpath(SMALL_SOURCE, REPO)}` (to compare against)",
        "",
        "### Start-up and loading",
        "",
    ]
    lines += startup_table(passes)
    for name in ("cold", "warm"):
        if name not in passes:
            continue
        su = passes[name]["startup"]
        pend = su["pending_answers"]
        lines += [
            "",
            f"{name.capitalize()} pass: what the routes reported while loading "
            "(`/runs` file states, `/status` loading list with elapsed seconds and progress, `/runs` counts; "
            "one line per change of state or stage, and the last sample before it):",
            "",
            "| s | file states | loading | counts |",
            "|---|---|---|---|",
        ]
        lines += progress_lines(su)
        if su.get("big_progress") is not None:
            lines += [
                "",
                f"Progress of `{BIG}` in `/status` (sampled every 0.2 s): "
                + progress_summary(su["big_progress"])
                + f"; `/runs` carried it in {su.get('runs_progress', {}).get(BIG, 0)} samples"
                + ".",
            ]
        if pend:
            codes = sorted({p["status"] for p in pend})
            secs = [p["seconds"] for p in pend if p["status"] == 202]
            ex = next((p for p in pend if p["status"] == 202), pend[0])
            lines += [
                "",
                f"`/summary?run={BIG}` while it loaded: {len(pend)} answer{'s' if len(pend) != 1 else ''}, HTTP {'/'.join(map(str, codes))}"
                + (
                    f", each after {min(secs):.2f}–{max(secs):.2f} s (the route waits up to 1.5 s for the analysis)"
                    if secs
                    else ""
                )
                + f"; e.g. `{json.dumps({k: ex.get(k) for k in ('state', 'message', 'counts')})}`",
            ]
    lines += ["", "### Route latency (cold pass, after the trace was ready)", ""]
    rows = passes["cold"]["routes"]
    lines += route_table(rows)
    o = overall(rows)
    lines += [
        "",
        f"All requests: n {o['n']}, p50 {fmt_ms(o['p50_ms'])} ms, p95 {fmt_ms(o['p95_ms'])} ms, "
        f"max {fmt_ms(o['max_ms'])} ms.",
    ]
    if "warm" in passes and passes["warm"].get("routes"):
        wr = passes["warm"]["routes"]
        ow = overall(wr)
        worst = max(wr, key=lambda r: r["p95_ms"] or 0)
        lines += [
            "",
            f"Warm pass (after the restart, trace from the disk cache): n {ow['n']}, "
            f"p50 {fmt_ms(ow['p50_ms'])} ms, p95 {fmt_ms(ow['p95_ms'])} ms, max {fmt_ms(ow['max_ms'])} ms; "
            f"slowest route by p95: `{worst['route']}` {worst['what']} ({fmt_ms(worst['p95_ms'])} ms); "
            f"{sum(1 for r in wr if (r['p95_ms'] or 0) > TARGET_P95_MS)} of {len(wr)} over 100 ms.",
        ]
    if downloads:
        lines += [
            "",
            "Downloads (files, not held to the 100 ms target):",
            "",
            "| route | n | p50 ms | max ms | answer |",
            "|---|---|---|---|---|",
        ]
        for d in downloads:
            lines.append(
                f"| `{d['route']}` | {d['n']} | {fmt_ms(d['p50_ms'])} | {fmt_ms(d['max_ms'])} | "
                f"{fmt_bytes(d['bytes'])}{' — ' + d['bad'][0] if d['bad'] else ''} |"
            )
    # targets
    cold = passes["cold"]
    fails = [r for r in rows if r["p95_ms"] is None or r["p95_ms"] > TARGET_P95_MS]
    bad = [r for r in rows if r["bad"]]
    su = cold["startup"]
    serving = su["plugin_s"] < su[f"{BIG}_ready_s"]
    saw_pending = any(p["status"] == 202 for p in su["pending_answers"])
    lines += [
        "",
        "| target (issue) | measured | |",
        "|---|---|---|",
        "| every dashboard route p95 ≤ 100 ms on a loaded run of ~1M events | "
        + (
            f"{len(rows) - len(fails)}/{len(rows)} routes; worst p95 "
            f"{fmt_ms(max(r['p95_ms'] or 0 for r in rows))} ms (`{max(rows, key=lambda r: r['p95_ms'] or 0)['route']}`: "
            f"{max(rows, key=lambda r: r['p95_ms'] or 0)['what']}); all requests p95 {fmt_ms(o['p95_ms'])} ms"
        )
        + f" | {'PASS' if not fails and not bad else 'FAIL'} |",
        f"| TensorBoard serves while the big trace loads, with progress | plugin routes answered "
        f"{su['plugin_s']:.2f} s after spawn, the trace was ready at {su[f'{BIG}_ready_s']:.2f} s; "
        f"`/runs` p95 {fmt_ms(su['during_load']['runs']['p95_ms'])} ms meanwhile; "
        f"{'202 + state + counts seen' if saw_pending else 'no 202 seen (loaded too fast to catch)'}; "
        f"{progress_cell(su.get('big_progress') or [])} | "
        f"{'PASS' if serving else 'FAIL'} |",
    ]
    if "warm" in passes:
        w = passes["warm"]["startup"]
        lines.append(
            f"| (for reference) warm restart: ready from the disk cache | {w[f'{BIG}_ready_s']:.2f} s after spawn "
            f"(cold: {su[f'{BIG}_ready_s']:.2f} s) | — |"
        )
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main
def run_pass(name: str, paths: dict, args, env: dict, root: str, requests: int, cleanup: list) -> dict:
    port = args.port or free_port()
    log(f"{name} pass: tensorboard on 127.0.0.1:{port}")
    tb = TensorBoard(paths["logdir"], port, env, os.path.join(root, f"tensorboard-{name}.log"))
    cleanup.append(tb)
    try:
        startup = wait_until_ready(tb, args.ready_timeout)
        log(
            f"  HTTP at {startup['http_s']:.2f} s, plugin routes at {startup['plugin_s']:.2f} s, "
            f"{BIG} ready at {startup[f'{BIG}_ready_s']:.2f} s"
        )
        c = Client(port)
        plan, rinfo = route_plan(c, startup["selection"])
        log(f"  {len(plan)} requests x {requests} (+{args.warmup} warm-up) ...")
        routes = (
            measure_routes(c, plan, requests, args.warmup, args.route_budget, min(requests, args.min_requests))
            if requests
            else []
        )
        downloads = (
            measure_downloads(c, startup["selection"], args.download_requests)
            if args.downloads and name == "cold"
            else []
        )
        conn = {"connections": c.connects, "requests": c.requests}
        c.close()
        tb.remember_children()
        traceback_in_log = "Traceback" in open(tb.log_path, errors="replace").read()
        return {
            "startup": startup,
            "routes": routes,
            "route_info": rinfo,
            "downloads": downloads,
            "http": conn,
            "port": port,
            "cmd": tb.cmd,
            "traceback_in_log": traceback_in_log,
        }
    finally:
        killed = tb.stop()
        cleanup.remove(tb)
        if killed:
            log(f"  killed leftover processes {killed}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--events",
        type=int,
        default=1_000_000,
        help="events in the big trace: enough copies of the source's steps to reach it (1,000,000)",
    )
    ap.add_argument(
        "--source",
        help="trace whose steps are repeated (default: make_large_trace.py's, "
        "benchmarks/traces/gpt12_naive_train_mem.pt.trace.json.gz)",
    )
    ap.add_argument("--trace", help="use this trace as the big run instead of making one")
    ap.add_argument("--requests", type=int, default=100, help="measured requests per route, cold pass (100)")
    ap.add_argument("--warm-requests", type=int, default=20, help="measured requests per route after the restart (20)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured requests per route first (2)")
    ap.add_argument(
        "--route-budget",
        type=float,
        default=20.0,
        help="stop a route after this many measured seconds once it has --min-requests (20)",
    )
    ap.add_argument("--min-requests", type=int, default=20)
    ap.add_argument("--skip-warm", action="store_true", help="no restart from the disk cache")
    ap.add_argument("--downloads", action="store_true", help="also time /report and /annotated (file downloads)")
    ap.add_argument("--download-requests", type=int, default=2)
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the trace (600)")
    ap.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    ap.add_argument("--keep", action="store_true", help="keep the log directory and cache under _work/")
    ap.add_argument("--record", action="store_true", help="append the report to benchmarks/RESULTS.md")
    args = ap.parse_args(argv)

    command = ".venv/bin/python benchmarks/bench_routes.py" + (
        " " + shlex.join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(WORK, exist_ok=True)
    root = os.path.join(WORK, f"routes-{stamp}")
    cleanup: list[TensorBoard] = []
    info = bench.machine_info(None)
    info["ours_versions"] = bench.pip_versions(sys.executable, ["tensorboard", "werkzeug", "numpy", "msgspec"])
    info["load_start"] = round(os.getloadavg()[0], 2)
    fingerprint = bench.code_fingerprint()
    try:
        trace = prepare_trace(args)
        os.makedirs(root)
        paths = make_logdir(root, trace)
        age = time.time() - os.path.getmtime(trace["out"])
        if age < 2.0:  # just written: let it be older than the loader's settling time (1 s)
            time.sleep(2.0 - age)
        env = dict(os.environ, TB_ATTENTION_CACHE_DIR=paths["cache"], PYTHONDONTWRITEBYTECODE="1")
        env.pop("TB_ATTENTION_NO_CACHE", None)
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        passes = {"cold": run_pass("cold", paths, args, env, root, args.requests, cleanup)}
        cache_bytes = bench.dir_bytes(paths["cache"])
        if not args.skip_warm:
            passes["warm"] = run_pass("warm", paths, args, env, root, args.warm_requests, cleanup)
        info["load_end"] = round(os.getloadavg()[0], 2)
        notes = [
            f"logdir: `{BIG}/worker0.<ms>.pt.trace.json` (hard link to the trace) and "
            f"`{SMALL}/worker0.<ms>.pt.trace.json.gz`; `TB_ATTENTION_CACHE_DIR` a fresh folder (empty for the cold "
            f"pass, {cache_bytes / 1e6:.1f} MB after it; the warm pass restarts TensorBoard on the same logdir and cache); "
            f"other settings default (1 worker process, poll every 3 s)",
            f"TensorBoard: `{shlex.join(os.path.relpath(a, REPO) if a.startswith(REPO) else a for a in passes['cold']['cmd'][:1])} "
            f"--logdir LOGDIR --port PORT --host 127.0.0.1`, the working tree on `PYTHONPATH`",
            "latency: one client, one request at a time, from sending the request "
            f"to having read the whole answer; {args.warmup} unmeasured warm-up requests per route, then round-robin over "
            f"the routes (cold: up to {args.requests} per route, warm: up to {args.warm_requests}; a route stops after "
            f"{args.route_budget:g} s of measured time once it has {args.min_requests}); p95 = nearest rank",
            f"start-up: `/` and `/runs` polled every 20 ms from spawn, then `/runs` + `/status` every 0.2 s until both runs "
            f"are ready; `/summary?run={BIG}` every 2 s while it loads (the dashboard itself only polls `/runs` until then)",
        ]
        if not (trace.get("given")) and 0.95e6 <= trace["events"] <= 1.1e6:
            notes.append(
                "the issue's target case: \"dashboard routes answer in ≤ 100 ms at p95 for a loaded run of 1M "
                "events; TensorBoard starts serving immediately while big traces load in the background, "
                'with progress"'
            )
        for name, p in passes.items():
            if p["traceback_in_log"]:
                notes.append(f"{name} pass: the TensorBoard log has a Traceback (see {os.path.relpath(root, REPO)})")
            bad = [r for r in p["routes"] if r["bad"]]
            for r in bad:
                notes.append(
                    f"{name} pass: `{r['route']}` ({r['what']}) gave {len(r['bad'])}+ bad answers, e.g. {r['bad'][0]}"
                )
        h = passes["cold"]["http"]
        notes.append(
            f"HTTP: {h['requests']} requests of the cold pass over {h['connections']} TCP connection(s)"
            + (
                " (TensorBoard's server closes the connection after each answer, as it does for a browser: "
                "the times include connecting to 127.0.0.1)"
                if h["connections"] >= 0.9 * h["requests"]
                else " (keep-alive)"
            )
        )
        if "warm" in passes:
            cold_s = passes["cold"]["startup"].get("big_analysis_s") or 0
            warm_s = passes["warm"]["startup"].get("big_analysis_s") or 0
            if cold_s and warm_s > 0.5 * cold_s:
                notes.append(
                    f"the warm pass looks like a cache miss (the worker took {warm_s:.1f} s, cold {cold_s:.1f} s): "
                    "the cache key covers the package's code, which may have changed between the passes"
                )
        if bench.code_fingerprint() != fingerprint:
            notes.append("tb_attention_plugin/ changed while this ran: the numbers may mix two versions")
        text = build_report(
            info, trace, passes, passes["cold"].get("downloads") or [], command, notes, passes["cold"]["route_info"]
        )
        print(text)
        raw = {"info": info, "trace": trace, "passes": passes, "notes": notes}
        with open(os.path.join(WORK, f"routes-{stamp}.json"), "w") as f:
            json.dump(raw, f, indent=1, default=str)
        if args.record:
            res = os.path.join(HERE, "RESULTS.md")
            with open(res, "a") as f:
                f.write(text + "\n")
            log(f"appended to {os.path.relpath(res, REPO)}")
        return 0
    except RuntimeError as e:  # tensorboard exited, a run failed, a route answered an error
        log(f"error: {e}")
        return 1
    except (KeyboardInterrupt, Interrupted) as e:
        log(f"interrupted ({str(e) or 'Ctrl-C'}): stopping TensorBoard")
        return 130
    finally:
        for tb in list(cleanup):
            killed = tb.stop()
            if killed:
                log(f"killed leftover processes {killed}")
        if not args.keep and os.path.isdir(root):
            for sub in ("logdir", "cache"):
                shutil.rmtree(os.path.join(root, sub), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
