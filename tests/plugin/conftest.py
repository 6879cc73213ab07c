"""Fixtures for the plugin's backend tests: a temporary logdir, the plugin served through
TensorBoard's own WSGI app, and werkzeug's test client."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time

import pytest
from werkzeug.test import Client

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_traces")
PREFIX = "/data/plugin/attention"
XSS = "<img src=x onerror=window.__xss=1>"


def sample_file(run: str) -> str:
    d = os.path.join(SAMPLES, run)
    if not os.path.isdir(d):
        pytest.skip(f"sample_traces/{run} is not available")
    files = sorted(f for f in os.listdir(d) if f.endswith((".json", ".json.gz")))
    if not files:
        pytest.skip(f"no trace in sample_traces/{run}")
    return os.path.join(d, files[0])


def put(logdir, run: str, sample: str, name: str = None) -> str:
    """Copy a sample trace into logdir/run (atomically: written aside, then renamed)."""
    src = sample_file(sample)
    d = os.path.join(str(logdir), run)
    os.makedirs(d, exist_ok=True)
    dst = os.path.join(d, name or os.path.basename(src))
    tmp = os.path.join(str(logdir), ".incoming-" + os.path.basename(dst))
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return dst


def read_trace(sample: str) -> dict:
    src = sample_file(sample)
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8") as f:
        return json.load(f)


def xss_trace(dst: str, sample: str = "sdpa_flash_s2048_fwd") -> str:
    """A copy of a sample trace whose GPU kernels are all named like an HTML injection."""
    data = read_trace(sample)
    n = 0
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") == "kernel":
            ev["name"] = XSS
            n += 1
    assert n
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return dst


def wait_for(pred, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Served:
    """The plugin inside TensorBoard's WSGI app, and helpers to talk to it."""

    def __init__(self, logdir, **loader_kw):
        from tensorboard.backend import application
        from tensorboard.plugins import base_plugin

        from tb_attention_plugin.plugin import AttentionPlugin
        from tb_attention_plugin.server.loader import Loader

        kw = dict(poll_secs=0.1, settle_secs=0.0, grace_secs=0.0, mode="thread", use_cache=False)
        kw.update(loader_kw)
        self.logdir = str(logdir)
        self.loader = Loader(self.logdir, **kw)
        self.plugin = AttentionPlugin(base_plugin.TBContext(logdir=self.logdir), loader=self.loader)
        self.app = application.TensorBoardWSGI([self.plugin])
        self.client = Client(self.app)

    def get(self, route: str, **params):
        from urllib.parse import urlencode

        q = ("?" + urlencode({k: v for k, v in params.items() if v is not None})) if params else ""
        return self.client.get(PREFIX + route + q)

    def raw(self, path_and_query: str):
        return self.client.get(PREFIX + path_and_query)

    def runs(self) -> dict:
        r = self.get("/runs")
        assert r.status_code == 200, r.data
        return r.json

    def file_states(self) -> dict:
        return {f["path"]: f["state"] for run in self.runs()["runs"] for f in run["files"]}

    def settled(self, n_files: int = None) -> dict:
        def ok():
            d = self.runs()
            c = d["counts"]
            if not d["scanned"] or c["waiting"] + c["queued"] + c["loading"]:
                return None
            if n_files is not None and c["files"] != n_files:
                return None
            return d

        return wait_for(ok, what=f"{n_files} traces analysed")

    def close(self):
        self.plugin.close()


@pytest.fixture
def logdir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d


@pytest.fixture
def served(logdir):
    servers = []

    def make(**kw):
        s = Served(logdir, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
