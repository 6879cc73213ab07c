"""Fixtures of the rank tests: jobs of N ranks generated from real rank traces."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rankjob import STRAGGLER, make_rank_job  # noqa: E402


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    """8 ranks from the default sources (the 2-rank DDP traces when present), rank 5 slowed 1.3x."""
    out = str(tmp_path_factory.mktemp("job8"))
    paths = make_rank_job.make_job(out, 8, stragglers=(STRAGGLER,), slowdown=1.3, jitter=0.01, seed=1)
    return out, paths
