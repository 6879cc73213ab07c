"""Helpers and the shared fixture of the rank tests. Not a conftest.py: other test directories
import helpers with ``from conftest import ...`` at run time, and a conftest here would be the
``conftest`` module they got. Each test module declares its ``job8`` fixture over :func:`job8`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import make_rank_job  # noqa: E402,F401

STRAGGLER = 5
_JOB8: dict = {}


def job8(tmp_path_factory) -> tuple:
    """8 ranks from the default sources (the recorded 2-rank DDP job), rank 5 slowed 1.3x; made
    once per session (each test module's ``job8`` fixture calls this)."""
    if "job" not in _JOB8:
        out = str(tmp_path_factory.mktemp("job8"))
        paths = make_rank_job.make_job(out, 8, stragglers=(STRAGGLER,), slowdown=1.3, jitter=0.01, seed=1)
        _JOB8["job"] = (out, paths)
    return _JOB8["job"]


def cli(*args, env_extra=None, timeout=300) -> subprocess.CompletedProcess:
    """Run ``tb-attention`` as a separate process (the Dask paths start processes of their own)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def plugin_helpers():
    """tests/plugin/conftest.py (Served, wait_for) under a name of its own."""
    name = "tb_attention_plugin_test_helpers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", "plugin", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
