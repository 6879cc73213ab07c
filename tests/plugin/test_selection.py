"""server/selection.py: which trace a request names, and the answer while it is not ready; the
plugin's temporary shims of its old private API return what route modules expect."""

from __future__ import annotations

import pytest
from werkzeug.datastructures import MultiDict

from conftest import Served, put
from tb_attention_plugin.server import selection
from tb_attention_plugin.server.params import HttpError


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logs")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "flash", "sdpa_flash_s2048_fwd", name="w1.2.pt.trace.json")
    s = Served(logdir)
    s.settled(2)
    yield s
    s.close()


def test_select_and_fetch(served):
    loader = served.loader
    table = selection.run_table(loader)
    assert set(table) == {"flash"} and len(table["flash"]) == 2
    sel = selection.select(table, MultiDict({"run": "flash", "file": "w1.2.pt.trace.json"}))
    assert (sel.info.name, sel.step, sel.echo["worker"]) == ("w1.2.pt.trace.json", None, sel.info.worker)
    with pytest.raises(HttpError) as e:
        selection.select(table, MultiDict({"run": "nope"}))
    assert e.value.code == 404 and e.value.extra == {"param": "run"}
    snap, sel = selection.fetch(loader, MultiDict({"run": "flash"}), need_index=True)
    assert snap.state == "ready" and snap.loaded is not None and sel.echo["run"] == "flash"
    snap, sel, not_yet = selection.fetch_state(loader, MultiDict({"run": "flash"}), need_index=False)
    assert not_yet is None and snap.summary is not None


def test_pending_answers():
    from tb_attention_plugin.server.loader import Snapshot

    snap = Snapshot(
        rel="a",
        step=None,
        state="queued",
        message="waiting for a worker",
        summary=None,
        loaded=None,
        seconds=None,
        running=False,
        queued_at=None,
        started_at=None,
    )
    p = selection.pending(snap, {"run": "a"}, {"files": 1})
    assert p.code == 202 and p.state == "queued" and p.body["counts"] == {"files": 1}
    err = selection.pending(Snapshot(**{**snap.__dict__, "state": "error", "message": "bad"}), {}, {})
    assert err.code == 200 and err.body == {"state": "error", "error": "bad", "selection": {}}
    ready_without_index = selection.pending(Snapshot(**{**snap.__dict__, "state": "ready"}), {}, {})
    assert ready_without_index.state == "loading"  # the index is being rebuilt
