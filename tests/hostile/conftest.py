"""Shared pieces of the hostile-input tests: the corpus (built once per session) and the plugin
test harness of tests/plugin (TensorBoard's WSGI app around the plugin, werkzeug's client)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

_spec = importlib.util.spec_from_file_location(
    "plugin_harness", os.path.join(os.path.dirname(HERE), "plugin", "conftest.py")
)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """The hostile corpus (no 2000-trace run: the tests that want it make their own)."""
    from corpus import build

    root = tmp_path_factory.mktemp("hostile")
    return str(root), build(str(root), tiny_traces=0)


@pytest.fixture
def served(tmp_path):
    servers = []

    def make(logdir, **kw):
        s = harness.Served(logdir, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
