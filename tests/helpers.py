"""Paths shared by the tests: the repo's sample traces and ../shared (when present)."""

import glob
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SAMPLES = os.path.join(ROOT, "sample_traces")
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "traces"))


def recorded_traces(dirs: tuple[str, ...], max_bytes: int) -> list[str]:
    """The H200 trace files under tests/data/<dir>/<run>/ smaller than ``max_bytes`` (compressed),
    sorted: the recorded traces the fast equivalence tests run over."""
    return sorted(
        p
        for d in dirs
        for p in glob.glob(os.path.join(HERE, "data", d, "*", "*.pt.trace.json.gz"))
        if os.path.getsize(p) < max_bytes
    )


def sample(run: str) -> str:
    """The one trace file of a sample run directory."""
    d = os.path.join(SAMPLES, run)
    files = sorted(f for f in os.listdir(d) if f.endswith((".json", ".json.gz")))
    assert files, d
    return os.path.join(d, files[0])


needs_shared = pytest.mark.skipif(
    not os.path.isdir(os.path.join(SHARED, "public")), reason="../shared/traces/public is not available"
)
