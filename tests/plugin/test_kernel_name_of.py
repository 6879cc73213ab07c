"""Short page URLs (issue #41): ``/kernels?name_of=<kernel id>`` filters by exactly that kernel's
name, as ``name=`` with the name would, and says which name it resolved to (``named``), so that a
click-through puts a kernel id in the page's URL instead of a templated C++ name of kilobytes."""

from __future__ import annotations

import pytest

from conftest import Served, put


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("name_of")
    put(logdir, "gpt", "gpt4l_sdpa_train")
    s = Served(logdir)
    s.settled(1)
    yield s
    s.close()


def _ids(d: dict) -> list:
    return [r["id"] for r in d["rows"]]


def test_name_of_is_the_kernels_name(served):
    rows = served.get("/kernels", run="gpt", scope="all", limit=1000).json["rows"]
    longest = max(rows, key=lambda r: len(r["name"]))  # a templated name: the long URLs of the issue
    assert len(longest["name"]) > 100
    for k in (rows[0], longest):
        by_id = served.get("/kernels", run="gpt", scope="all", name_of=k["id"], limit=1000).json
        by_name = served.get("/kernels", run="gpt", scope="all", name=k["name"], limit=1000).json
        assert by_id["named"] == k["name"] and "named" not in by_name
        assert by_id["total"] == by_name["total"] >= 1 and _ids(by_id) == _ids(by_name)
        assert {r["name"] for r in by_id["rows"]} == {k["name"]}
        # the other filters still apply on top of it, and name_of wins over a stale name=
        other = served.get("/kernels", run="gpt", scope="all", name_of=k["id"], name="nope", limit=1000).json
        assert _ids(other) == _ids(by_id)


def test_name_of_groups(served):
    k = served.get("/kernels", run="gpt", scope="all", limit=1).json["rows"][0]
    by_id = served.get("/kernels", run="gpt", scope="all", group=1, name_of=k["id"]).json
    by_name = served.get("/kernels", run="gpt", scope="all", group=1, name=k["name"]).json
    assert by_id["grouped"] is True and by_id["named"] == k["name"]
    assert by_id["rows"] and by_id["rows"] == by_name["rows"]
    assert by_id["launches"] == by_name["launches"] and {r["name"] for r in by_id["rows"]} == {k["name"]}


@pytest.mark.parametrize("group", [None, 1])
def test_bad_name_of(served, group):
    r = served.get("/kernels", run="gpt", name_of=10**9, group=group)
    assert r.status_code == 404 and r.json["param"] == "name_of" and "10" in r.json["error"]
    for bad in ("x", "-3", "1.5"):
        r = served.get("/kernels", run="gpt", name_of=bad, group=group)
        assert r.status_code == 400 and r.json["param"] == "name_of"


@pytest.mark.parametrize("group", [0, 1])
def test_roofline_points_name_a_kernel(served, group):
    """A roofline point (grouped ones too, whose ``id`` is null) carries ``name_id``: the id the
    page's URL keeps when the point is clicked."""
    pts = served.get("/roofline", run="gpt", scope="all", group=group).json["points"]
    assert pts
    for p in pts[:5]:
        d = served.get("/kernels", run="gpt", scope="all", name_of=p["name_id"], limit=1000).json
        assert d["named"] == p["name"] and d["total"] >= p["count"]
