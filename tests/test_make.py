"""`make demo` installs the package and what it needs, never the test tools; `make test` installs
those too (so that .ci/run on a fresh machine has everything). Checked on `make -n` (what make
would run) with a virtualenv that does not exist yet, as on a fresh clone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

TEST_ONLY = re.compile(r"requirements-dev|pytest|playwright|torch-tb-profiler|hypothesis|\bruff\b|\bmypy\b|torch==")


def _dry(target: str, tmp_path) -> str:
    r = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'fresh-venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, MAKEFLAGS=""),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.replace(str(tmp_path / "fresh-venv"), "VENV")  # the path holds "pytest-of-..."


def test_demo_installs_no_test_only_package(tmp_path):
    out = _dry("demo", tmp_path)
    pip = [ln for ln in out.splitlines() if "pip install" in ln]
    assert any("-e ." in ln for ln in pip), out  # the package, with setup.py's dependencies
    assert not any(TEST_ONLY.search(ln) for ln in pip), pip
    assert "tensorboard --logdir" in out


def test_test_installs_the_dev_requirements(tmp_path):
    out = _dry("test", tmp_path)
    assert "-r requirements-dev.txt" in out and "-e ." in out
    assert "pytest" in out


def test_dev_requirements_hold_what_the_tests_import():
    req = open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8").read()
    setup = open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read()
    for pkg in ("pytest", "hypothesis", "ruff", "mypy", "torch", "playwright", "torch-tb-profiler"):
        assert re.search(rf"^{re.escape(pkg)}\b", req, re.M), pkg
        assert f'"{pkg}' not in setup, f"{pkg} is a test tool, not a dependency of the package"
