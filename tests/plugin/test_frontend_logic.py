"""The dashboard's pure logic (frontend/test/logic.test.mjs: overview strip and diagnosis, advice
ranking, span label, bound wording), run with Node's test runner. Skipped without Node or
frontend/node_modules (`npm ci` in frontend/, as `make test` does)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

FRONTEND = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "frontend")


def test_frontend_logic():
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(FRONTEND, "node_modules", "esbuild")):
        pytest.skip("node or frontend/node_modules is missing")
    r = subprocess.run([node, "--test", "test/"], cwd=FRONTEND, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "# fail 0" in r.stdout
