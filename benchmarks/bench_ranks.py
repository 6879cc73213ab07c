#!/usr/bin/env python3
"""A job of many ranks: ``tb-attention ranks`` in one process vs a 2-worker local Dask cluster.

1. Makes a ~5 MB rank trace (the H200 ``gpt4l_sdpa_train`` sample, its steps repeated by
   make_large_trace.py) and a 256-rank job of it (make_rank_job.py: distributedInfo and names
   rewritten, 1 % jitter, rank 100's attention 1.3x slower).
2. Runs ``tb-attention ranks JOB --format json --no-cache`` with ``--workers 0`` (in-process) and
   ``--workers 2`` (LocalCluster of two worker processes), each a fresh process; samples the RSS of
   the whole process tree every 50 ms: wall time, peak RSS summed over the tree, peak of any one
   process. Checks the answer: 256 ranks in order, exactly rank 100 flagged.
3. Where one file's time goes (in-process): reading, analysis, summary; the summary's size (what
   a Dask worker ships back) against the report's.
4. ``summarize`` into a cache, then the plugin's ``/ranks`` route over the 256 cached summaries
   (first answer, memoised answer).
5. Optionally (``--large-ranks N``) the same for N ranks of ~100 MB (the 12-layer GPT reference
   trace repeated), to see per-file costs at a size where reading dominates.
6. ``--view-only``: the Ranks view of a 1024-rank job with cached summaries, in a TensorBoard and
   headless Chromium (route latency, click -> table drawn).

The machine is shared (2 cores, other work running): read ratios, not seconds. ``--record``
appends the output to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import zlib

import msgspec
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(HERE, "_work", "ranks")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import make_large_trace  # noqa: E402
import make_rank_job  # noqa: E402

MB = 1e6


def _tree_rss(proc: psutil.Process) -> tuple[int, int]:
    total = peak_one = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            r = p.memory_info().rss
        except psutil.Error:
            continue
        total += r
        peak_one = max(peak_one, r)
    return total, peak_one


def run_measured(args: list[str], env: dict) -> dict:
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    ps = psutil.Process(p.pid)
    peak = {"total": 0, "one": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            t, o = _tree_rss(ps)
            peak["total"], peak["one"] = max(peak["total"], t), max(peak["one"], o)
            done.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    done.set()
    th.join()
    return {
        "wall_s": time.perf_counter() - t0,
        "rc": p.returncode,
        "stdout": out,
        "stderr": err,
        "peak_tree_mb": peak["total"] / MB,
        "peak_process_mb": peak["one"] / MB,
    }


def make_job(name: str, ranks: int, target_mb: float, source: str, straggler: int) -> tuple[str, list[str]]:
    src = os.path.join(WORK, f"{name}_source.pt.trace.json")
    if not os.path.exists(src):
        make_large_trace.make(source=source, target_mb=target_mb, out=src, quiet=True)
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    paths = make_rank_job.make_job(out, ranks, sources=[src], stragglers=(straggler,), slowdown=1.3, jitter=0.01)
    return out, paths


def breakdown(path: str) -> dict:
    from tb_attention_plugin.options import Options
    from tb_attention_plugin.ranks.summary import rank_summary
    from tb_attention_plugin.report import analyze_trace
    from tb_attention_plugin.trace.records import load_trace

    t0 = time.perf_counter()
    tr = load_trace(path)
    t1 = time.perf_counter()
    rep = analyze_trace(tr, Options())
    t2 = time.perf_counter()
    rep["path"] = path
    s = rank_summary(rep, path)
    t3 = time.perf_counter()
    from tb_attention_plugin.jsonout import iter_json

    report_bytes = sum(len(c) for c in iter_json({"traces": [rep]}))
    packed = msgspec.msgpack.encode(s)
    return {
        "file_mb": os.path.getsize(path) / MB,
        "read_s": t1 - t0,
        "analyse_s": t2 - t1,
        "summary_s": t3 - t2,
        "summary_bytes": len(packed),
        "summary_zbytes": len(zlib.compress(packed, 6)),
        "report_json_bytes": report_bytes,
        "kernels": len(rep["kernels"]),
    }


def route_latency(logdir: str, cache: str) -> dict:
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_attention_plugin.plugin import AttentionPlugin
    from tb_attention_plugin.server.loader import Loader

    loader = Loader(logdir, poll_secs=3600, settle_secs=0, grace_secs=0, mode="thread", use_cache=True, cache_dir=cache)
    plugin = AttentionPlugin(base_plugin.TBContext(logdir=logdir), loader=loader)
    loader.stop()  # only the cache answers: nothing analysed
    loader.scan_once()
    c = Client(application.TensorBoardWSGI([plugin]))
    run = "."  # the job directory is the logdir
    out = {}
    for what in ("first", "memoised"):
        t0 = time.perf_counter()
        r = c.get(f"/data/plugin/attention/ranks?run={run}")
        out[what + "_s"] = time.perf_counter() - t0
        out["bytes"] = len(r.data)
        body = r.json
    out["ranks"] = len(body["ranks"])
    out["stragglers"] = [s["rank"] for s in body["stragglers"]]
    plugin.close()
    return out


def view_latency(ranks: int = 1024) -> dict:
    """The Ranks view of a ``ranks``-rank job with cached summaries, in a TensorBoard of this
    process (the default plugins and ours; not torch-tb-profiler, which would parse every trace)
    and headless Chromium: the /ranks route (first, memoised) and click -> table drawn. The job
    is copies of a small real trace, rank 700 slowed; the copies share rank 0's summary under
    their own cache keys (as tests/ranks/test_plugin_ranks.py does)."""
    import urllib.request

    from playwright.sync_api import sync_playwright
    from tensorboard import default, program

    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.cache import ReportCache
    from tb_attention_plugin.options import Options
    from tb_attention_plugin.ranks import store
    from tb_attention_plugin.ranks.summary import rank_summary

    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    from test_tensorboard_e2e import ARGS, CHROMIUM, _free_port, _plugin_frame, _wait

    small = os.path.join(ROOT, "sample_traces", "sdpa_flash_s2048_fwd")
    logdir = os.path.join(WORK, "view_logs")
    paths = make_rank_job.make_job(
        os.path.join(logdir, "job"),
        ranks,
        sources=[os.path.join(small, f) for f in os.listdir(small)],
        stragglers=(700,),
        slowdown=1.4,
        jitter=0.0,
        gz=True,
    )
    cache = ReportCache(os.path.join(WORK, "view_cache"))
    opt = Options()
    base = rank_summary(analyze_path(paths[0], opt), paths[0])
    for r, p in enumerate(paths):
        s = rank_summary(analyze_path(p, opt), p) if r == 700 else dict(base, rank=r)
        store.put(cache, store.summary_key(cache, p, opt), s)
    os.environ["TB_ATTENTION_CACHE_DIR"] = cache.dir
    port = _free_port()
    tb = program.TensorBoard(
        plugins=[p for p in default.get_plugins() if "torch_tb_profiler" not in getattr(p, "__module__", "")]
    )
    tb.configure(argv=[None, "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1"])
    tb.launch()
    url = f"http://127.0.0.1:{port}"

    def get(path: str) -> bytes:
        with urllib.request.urlopen(url + path, timeout=60) as r:
            return r.read()

    _wait(lambda: get("/data/plugins_listing"), 60, "tensorboard")
    out = {}
    for what in ("first", "memoised"):
        t0 = time.perf_counter()
        body = get("/data/plugin/attention/ranks?run=job")
        out[f"route_{what}_s"] = time.perf_counter() - t0
    out["bytes"] = len(body)
    with sync_playwright() as pw:
        br = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = br.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(url + "/#attention")
        fr = _plugin_frame(page)
        fr.wait_for_selector("#tab-ranks:not([hidden])", timeout=60000)
        t0 = time.perf_counter()
        fr.click("#tab-ranks")
        fr.wait_for_selector("#ranks-table tbody tr", timeout=60000)
        out["view_s"] = time.perf_counter() - t0
        out["bars"] = fr.locator("#rank-chart rect.bar-att").count()
        out["stragglers"] = fr.eval_on_selector_all(
            '#rank-chart rect.bar-att[data-straggler="1"]', "rs => rs.map(r => Number(r.dataset.rank))"
        )
        br.close()
    return out


def bench_job(label: str, job: str, paths: list[str], straggler: int, env: dict, lines: list) -> None:
    sizes = [os.path.getsize(p) for p in paths]
    lines.append(
        f"### {label}: {len(paths)} ranks, {sum(sizes) / len(sizes) / MB:.1f} MB per rank "
        f"({sum(sizes) / MB:.0f} MB in all), rank {straggler} slowed 1.3x"
    )
    lines.append("")
    lines.append("| mode | wall s | s per rank | peak RSS, process tree | peak RSS, largest process | answer |")
    lines.append("|---|---|---|---|---|---|")
    cli = [sys.executable, "-m", "tb_attention_plugin.cli", "ranks", job, "--format", "json", "--no-cache"]
    for mode, extra in (
        ("in-process (--workers 0)", ["--workers", "0"]),
        ("LocalCluster, 2 workers (--workers 2)", ["--workers", "2"]),
    ):
        m = run_measured(cli + extra, env)
        ok = "?"
        if m["rc"] == 0:
            v = json.loads(m["stdout"])
            ranks_ok = [r["rank"] for r in v["ranks"]] == list(range(len(paths)))
            ok = f"{len(v['ranks'])} ranks in order: {ranks_ok}; stragglers {[s['rank'] for s in v['stragglers']]}"
        else:
            ok = f"rc {m['rc']}: {m['stderr'][-300:]}"
        lines.append(
            f"| {mode} | {m['wall_s']:.1f} | {m['wall_s'] / len(paths):.3f} | {m['peak_tree_mb']:.0f} MB | "
            f"{m['peak_process_mb']:.0f} MB | {ok} |"
        )
    b = breakdown(paths[0])
    lines.append("")
    lines.append(
        f"One rank in-process ({b['file_mb']:.1f} MB, {b['kernels']} GPU activities): "
        f"read {b['read_s']:.3f} s, "
        f"analyse {b['analyse_s']:.3f} s, summary {b['summary_s'] * 1000:.1f} ms; the summary is "
        f"{b['summary_bytes']} B msgpack ({b['summary_zbytes']} B compressed) vs the report's JSON "
        f"{b['report_json_bytes'] / MB:.2f} MB."
    )
    lines.append("")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument(
        "--target-mb",
        type=float,
        default=5.8,
        help="source size before make_rank_job's compact re-encoding (5.8 -> ~5 MB per rank)",
    )
    ap.add_argument("--large-ranks", type=int, default=0, help="also N ranks of ~100 MB (0: skip)")
    ap.add_argument("--record", action="store_true", help="append the output to benchmarks/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the generated jobs in benchmarks/_work/ranks")
    ap.add_argument("--view-only", action="store_true", help="only the 1024-rank Ranks view in a browser")
    a = ap.parse_args(argv)
    os.makedirs(WORK, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TB_ATTENTION_CACHE_DIR", None)
    cmd = " ".join(["benchmarks/bench_ranks.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} — `python {cmd}`",
        "",
        f"{platform.node() or 'host'}, {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 1e9:.0f} GB, "
        f"load average {os.getloadavg()[0]:.1f} at the start",
        "",
    ]
    if a.view_only:
        v = view_latency(1024)
        lines.append(
            f"Ranks view, 1024 ranks with cached summaries (TensorBoard in-process, headless Chromium): "
            f"/ranks first {v['route_first_s'] * 1000:.0f} ms, memoised {v['route_memoised_s'] * 1000:.0f} ms "
            f"({v['bytes'] / 1e6:.2f} MB of JSON); click on the tab -> table drawn {v['view_s']:.2f} s; "
            f"{v['bars']} bars, stragglers {v['stragglers']}."
        )
        return _finish(a, lines)
    small_src = os.path.join(
        ROOT,
        "sample_traces",
        "gpt4l_sdpa_train",
        os.listdir(os.path.join(ROOT, "sample_traces", "gpt4l_sdpa_train"))[0],
    )
    job, paths = make_job("job256", a.ranks, a.target_mb, small_src, 100)
    bench_job("Small ranks", job, paths, 100, env, lines)
    cache = os.path.join(WORK, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", "summarize", job, "--workers", "2", "--cache-dir", cache],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    summ = time.perf_counter() - t0
    lat = route_latency(job, cache)
    lines.append(
        f"`summarize` ({r.stdout.strip() or r.stderr.strip()[-200:]}) took {summ:.1f} s; then the plugin's "
        f"/ranks over {lat['ranks']} cached summaries: first answer {lat['first_s'] * 1000:.0f} ms, "
        f"memoised {lat['memoised_s'] * 1000:.0f} ms, {lat['bytes'] / 1e3:.0f} kB of JSON, stragglers "
        f"{lat['stragglers']}."
    )
    lines.append("")
    if a.large_ranks:
        ref = make_large_trace.REFERENCE_SOURCE
        job_l, paths_l = make_job("job_large", a.large_ranks, 115, ref, 1)
        bench_job("Large ranks", job_l, paths_l, 1, env, lines)
    return _finish(a, lines)


def _finish(a, lines: list) -> int:
    if not a.keep:
        shutil.rmtree(WORK, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.record:
        with open(os.path.join(HERE, "RESULTS.md"), "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
