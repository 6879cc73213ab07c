import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own report cache directory."""
    monkeypatch.setenv("TB_ATTENTION_CACHE_DIR", str(tmp_path / "cache"))
