"""Helpers of the browser tests: a real TensorBoard on 127.0.0.1 (always stopped), the plugin's
iframe, JSON from the plugin's routes, screenshots into tests/_artifacts/."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "tests", "_artifacts")
CHROMIUM = os.environ.get("TB_ATTENTION_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except OSError:
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def copy_run(logdir: str, run: str, src_dir: str) -> None:
    """A run directory with the trace files of ``src_dir`` (no CSV or notes beside them)."""
    d = os.path.join(logdir, run)
    os.makedirs(d, exist_ok=True)
    for f in sorted(os.listdir(src_dir)):
        if f.endswith((".json", ".json.gz")):
            shutil.copyfile(os.path.join(src_dir, f), os.path.join(d, f))


@contextlib.contextmanager
def tensorboard(logdir: str, tmp: str, env: dict = None):
    """TensorBoard on 127.0.0.1 over ``logdir``; stopped on exit (its log printed on a traceback)."""
    port = free_port()
    e = dict(os.environ, TB_ATTENTION_POLL_SECS="0.5", TB_ATTENTION_CACHE_DIR=os.path.join(tmp, "cache"))
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    log = open(os.path.join(tmp, "tensorboard.log"), "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            logdir,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--reload_interval",
            "0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=e,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: proc.poll() is None and get_json(base + "/data/plugins_listing"), 60, "tensorboard")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.seek(0)
        tail = log.read()[-3000:]
        log.close()
        if "Traceback" in tail:
            print(tail)


def settled(base: str, n: int, timeout: float = 120) -> dict:
    def ok():
        d = get_json(base + "/data/plugin/attention/runs")
        c = d["counts"]
        return d if c["files"] >= n and c["ready"] + c["error"] == c["files"] else None

    return wait(ok, timeout, f"{n} traces analysed")


@contextlib.contextmanager
def serving_runs(tmp_path_factory, runs: dict):
    """TensorBoard over a fresh log directory holding a copy of each run's traces (``runs``: run
    name -> source directory, relative to the repository), once every run is analysed: yields
    (base URL, log directory)."""
    logdir = str(tmp_path_factory.mktemp("logdir"))
    for run, src in runs.items():
        copy_run(logdir, run, os.path.join(ROOT, src))
    with tensorboard(logdir, str(tmp_path_factory.mktemp("tb"))) as base:
        settled(base, len(runs))
        yield base, logdir


def plugin_frame(page, name: str = "attention", timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in page.frames:
            if "plugin_entry.html" in f.url and f"name={name}" in f.url:
                return f
        page.wait_for_timeout(100)
    raise AssertionError(f"the {name} tab's iframe did not appear")


def trace_view_ready(frame, run: str, timeout: float = 30000):
    """Wait until the Trace view shows ``run`` with its kernel rows: a hash change on the same page
    keeps the last run's rows until the new ones arrive (a click on an expander of the old table
    would be lost when it is redrawn)."""
    frame.wait_for_function(
        "r => { const s = document.getElementById('trace-run');"
        " const b = document.querySelector('#kernels .kernels-body');"
        " return s && s.value === r && b && b.getAttribute('aria-busy') === 'false'; }",
        arg=run,
        timeout=timeout,
    )
    frame.wait_for_selector("#kernel-table tbody tr[data-id]", timeout=timeout)
    return frame


@contextlib.contextmanager
def chromium():
    """Debian's chromium, headless, driven by Playwright: the browser of every e2e test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def new_page(browser, width: int = 1500, height: int = 1000):
    """A page of ``width`` x ``height`` whose uncaught script errors collect in ``page.errors``."""
    pg = browser.new_page(viewport={"width": width, "height": height})
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    return pg


def shot(page, name: str) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    page.screenshot(path=path)
    return path
