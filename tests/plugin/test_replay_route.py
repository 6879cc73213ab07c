"""/replay_script: the replay script of a trace's attention calls, a download (as /annotated is)."""

from __future__ import annotations

import time

import pytest
from replay_helpers import calls_of, fake_replay

from conftest import Served, put


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "naive", "naive_bf16_s2048_fwd")
    s = Served(logdir)
    s.settled(2)
    yield s, logdir
    s.close()


def test_the_script_is_a_download_of_the_trace_calls(served, tmp_path):
    s, logdir = served
    r = s.get("/replay_script", run="naive")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/x-python")
    cd = r.headers["Content-Disposition"]
    assert cd.startswith('attachment; filename="') and cd.endswith('.replay.py"')
    text = r.get_data(as_text=True)
    compile(text, "replay.py", "exec")
    trace = next((logdir / "naive").iterdir())
    for c in calls_of(trace):
        assert c["id"] in text


@pytest.mark.parametrize("params", [{"run": "naive", "file": "../../etc/passwd"}, {"run": "/etc"}])
def test_only_files_of_the_run_table(served, params):
    s, _ = served
    r = s.get("/replay_script", **params)
    assert r.status_code in (400, 404) and r.json["error"]


def test_a_replay_beside_the_trace_reaches_the_summary(served):
    s, logdir = served
    trace = next((logdir / "flash").iterdir())
    assert s.get("/summary", run="flash").json["summary"]["replay"]["measured"] is None
    fake_replay(trace, {"flash": (1000.0, None), "cudnn": (600.0, None), "math": (9000.0, None)})
    for _ in range(100):  # the scan sees the new file beside the trace and analyses it again
        d = s.get("/summary", run="flash").json
        if d.get("state") == "ready" and (d["summary"].get("replay") or {}).get("measured"):
            break
        time.sleep(0.1)
    rep = d["summary"]
    assert rep["replay"]["measured"]["used_for_advice"]
    assert any(a["id"] == "measured_backend" for a in rep["advice"])
