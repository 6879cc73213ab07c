"""The tab's Sites table (issue #23) in a real TensorBoard, on the H200 T5 twin trace: encoder
self-attention, decoder self-attention and decoder cross-attention are three rows, and clicking a
site lists exactly its kernels."""

from __future__ import annotations

import os
import re
from urllib.parse import urlencode

import pytest
from tbutil import CHROMIUM, get_json, plugin_frame, serving_runs, shot

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

RUN, SRC = "t5_sdpa", "tests/data/twins/t5_sdpa"
FP8_RUN, FP8_SRC = "fp8_block", "tests/data/round4/fp8_block_fwd_e4m3"
# FlexAttention with and without a flex_blocks annotation (H200, round 4)
FLEX_RUNS = {
    "flex_annotated": "tests/data/round4/flex_doc_fwdbwd_annotated",
    "flex_plain": "tests/data/round4/flex_doc_fwdbwd_mask_in_step",
}
RUNS = {RUN: SRC, FP8_RUN: FP8_SRC, **FLEX_RUNS}
API = "/data/plugin/attention"


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with serving_runs(tmp_path_factory, RUNS) as (base, _):
        yield base


def test_sites_table_rows_and_click_through(tb, page):
    page.goto(tb + f"/#attention&att.view=run&att.run={RUN}")
    frame = plugin_frame(page)
    frame.wait_for_selector("#site-table tbody tr[data-site]", timeout=30000)
    names = frame.eval_on_selector_all(
        "#site-table tbody tr[data-site] th button", "bs => bs.map(b => b.getAttribute('title'))"
    )
    sites = {re.sub(r"^show the kernels of ", "", n) for n in names}
    assert sites == {
        "T5Model_0/T5Stack_0/T5Block_*/T5LayerSelfAttention_0",
        "T5Model_0/T5Stack_1/T5Block_*/T5LayerSelfAttention_0",
        "T5Model_0/T5Stack_1/T5Block_*/T5LayerCrossAttention_0",
    }
    # each site's place on the roofline under its bound pill, from the JSON's `roofline`
    api = get_json(tb + API + "/summary?" + urlencode({"run": RUN}))["summary"]
    want_lines = {
        f"{st['name']}": st["roofline"]
        for st in (api.get("sites") or [])
        if st.get("roofline") and st["roofline"].get("intensity") is not None
    }
    shown_lines = frame.eval_on_selector_all(
        "#site-table tbody tr[data-site]",
        "rs => rs.map(r => [r.querySelector('th button').getAttribute('title'),"
        " r.querySelectorAll('td')[5].innerText])",
    )
    assert want_lines and len(shown_lines) == 3
    for title, cell in shown_lines:
        r = want_lines[re.sub(r"^show the kernels of ", "", title)]
        assert "FLOP/B" in cell and f"{r['side']} side" in cell, cell
    frame.query_selector("#site-table").scroll_into_view_if_needed()
    shot(page, "sites_t5_sdpa.png")
    cross = "T5Model_0/T5Stack_1/T5Block_*/T5LayerCrossAttention_0"
    frame.click(f'#site-table tbody tr[data-site] th button[title="show the kernels of {cross}"]')
    frame.wait_for_selector("#kernel-site", timeout=10000)
    assert frame.eval_on_selector("#kernel-site .mono", "e => e.title") == cross
    frame.wait_for_selector("#kernel-table tbody tr[data-id]", timeout=10000)
    want = get_json(tb + API + "/kernels?" + urlencode({"run": RUN, "site": cross, "limit": 1000}))["total"]
    shown = frame.eval_on_selector_all("#kernel-table tbody tr[data-id]", "rs => rs.length")
    assert 0 < shown <= want


def test_ledger_line_puts_fp8_kernels_on_their_own_roof(tb, page):
    """An e4m3 _scaled_mm block (H200, round 4): the ledger line gives each dtype's kernels on their own
    roof, with the figures of the JSON's hfu.by_roof."""
    page.goto(tb + f"/#attention&att.view=run&att.run={FP8_RUN}")
    frame = plugin_frame(page)
    frame.wait_for_selector("#flops-ledger", timeout=30000)
    text = frame.inner_text("#flops-ledger")
    roofs = get_json(tb + API + "/summary?" + urlencode({"run": FP8_RUN}))["summary"]["flops_ledger"]["hfu"]["by_roof"]
    fp8 = roofs["fp8"]
    assert fp8["utilization"] > 0.9 and "per roof" in text, text
    assert f"fp8 ~{100 * fp8['utilization']:.1f} %" in text and "bf16 ~" in text, text


def test_flex_block_counts_line(tb, page):
    """FlexAttention (H200, round 4): the block grid of the ledger calls, with the blocks visited and full
    per batch·head where a flex_blocks annotation recorded them; without it, that the executed count is an
    upper bound and how to record the counts."""
    for run, annotated in (("flex_annotated", True), ("flex_plain", False)):
        page.goto(tb + f"/#attention&att.view=run&att.run={run}")
        frame = plugin_frame(page)
        frame.wait_for_selector("#flex-blocks", timeout=30000)
        text = frame.inner_text("#flex-blocks")
        calls = get_json(tb + API + "/summary?" + urlencode({"run": run}))["summary"]["flops_ledger"]["calls"]
        blk = next(c["shapes"]["block"] for c in calls if (c.get("shapes") or {}).get("block"))
        assert f"{blk['blocks']:,} blocks of {blk['q_block']}×{blk['kv_block']}" in text, text
        if annotated:
            assert f"{round(blk['visited']):,} visited per batch·head ({round(blk['full']):,} full)" in text, text
            assert "flex_blocks annotation" in text, text
        else:
            assert "visited" not in blk and "upper bound" in text and "flex_blocks_name" in text, text
