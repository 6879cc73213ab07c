"""The dashboard's /compare route answers with the engine's comparison (compare.compare_reports),
the same numbers as `tb-attention compare`."""

import pytest

from conftest import Served, put, sample_file
from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.compare import compare_reports


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "math", "sdpa_math_s2048_fwd")
    s = Served(logdir)
    s.settled(2)
    yield s
    s.close()


def test_compare_route_is_the_engine_comparison(served):
    r = served.get("/compare", base="flash", new="math")
    assert r.status_code == 200, r.data
    d = r.json
    assert d["state"] == "ready" and d["kind"] == "tb-attention-compare"
    want = compare_reports(
        analyze_path(sample_file("sdpa_flash_s2048_fwd")), analyze_path(sample_file("sdpa_math_s2048_fwd"))
    )
    assert d["totals"] == want["totals"]
    assert d["sections"] == want["sections"]
    assert [(p["phase"], p["direction"], p["delta"]) for p in d["phases"]] == [
        (p["phase"], p["direction"], p["delta"]) for p in want["phases"]
    ]
    # kernel groups come from the loaded kernel table, not only the phases' top kernels
    assert d["base"]["kernel_groups_source"] == "kernels"
    assert [(g["group"], g["phase"], g["delta"]) for g in d["kernel_groups"]] == [
        (g["group"], g["phase"], g["delta"]) for g in want["kernel_groups"]
    ]
    assert d["verdict"]["faster"] == "base"
