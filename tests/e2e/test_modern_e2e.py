"""The forms of issue #12 in the dashboard, in a real TensorBoard (Debian's chromium driven by
Playwright): a CUDA-graph replay without reference says so truthfully (the graph_replay notice with
the graphs summary, a badge on replayed kernel rows, --reference rather than record_shapes=True in
the roofline and the K/V footprint), and FlexAttention's dense upper bounds carry "≤".

Runs: the recorded H200 decode step replayed from a CUDA graph and the causal FlexAttention step
of tests/data/modern. Screenshots go to tests/_artifacts/.
"""

from __future__ import annotations

import os
import re

import pytest
from tbutil import CHROMIUM, ROOT, plugin_frame, serving_runs, shot, tensorboard

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

RUNS = {"replay": "tests/data/modern/decode_graph_replay", "flex": "tests/data/modern/flex_causal_fwdbwd"}


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with serving_runs(tmp_path_factory, RUNS) as (base, _):
        yield base


def _open_run(page, base, run):
    page.goto(base + "/#attention")
    frame = plugin_frame(page)
    frame.wait_for_selector(f'#runs-table button[data-run="{run}"]', timeout=20000)
    frame.click(f'#runs-table button[data-run="{run}"]')
    frame.wait_for_function(
        f"(document.querySelector('#trace-meta') || {{}}).textContent?.includes({run + '/'!r})", timeout=20000
    )
    return frame


def test_graph_replay_says_what_is_missing_and_how_to_give_it(tb, page):
    frame = _open_run(page, tb, "replay")
    notice = frame.inner_text('#notices .notice[data-code="graph_replay"]')
    assert "replayed from CUDA graphs" in notice and "--reference" in notice
    assert "record_shapes" not in frame.inner_text("#notices")  # the trace has shapes
    summary = frame.inner_text('#notices [data-testid="graphs-summary"]')
    assert re.search(r"\d+ kernels replayed by 1 CUDA-graph launch; context: \d+ by their place", summary)
    # the attention share says its basis
    assert "of compute busy time" in frame.inner_text('[data-testid="attention-time"]')
    # replayed kernel rows carry a badge; its title says how the kernel got its context
    frame.wait_for_selector("#kernel-table tbody tr[data-id] .badge.graph", timeout=20000)
    kinds = set(
        frame.eval_on_selector_all("#kernel-table tbody tr[data-id] .badge.graph", "bs => bs.map(b => b.dataset.graph)")
    )
    assert kinds <= {"structure", "none"} and kinds
    frame.click("#kernel-table tbody tr[data-id] button.expander")
    details = frame.inner_text("#kernel-table tr.details")
    assert "CUDA graph" in details and "replayed from a CUDA graph" in details
    # no cost anywhere: the roofline and the K/V footprint name the graph, not the flag
    frame.wait_for_selector(".roof-body .empty-chart", timeout=20000)
    roof = frame.inner_text(".roof-body .empty-chart")
    assert "--reference" in roof and "record_shapes" not in roof
    frame.wait_for_selector("#memory .mem-sub", timeout=20000)
    mem = frame.inner_text("#memory")
    assert "replayed from CUDA graphs" in mem and "record_shapes=True)" not in mem.split("K/V footprint")[1]
    assert "No copies or transfers" not in mem
    assert "not counted" in frame.inner_text('#memory [data-testid="movement-note"]')
    shot(page, "e2e12_graph_replay.png")


def test_flex_upper_bounds_carry_le(tb, page):
    frame = _open_run(page, tb, "flex")
    frame.wait_for_selector("#kernel-table tbody tr[data-id]", timeout=20000)
    frame.select_option("#kernel-rows", "launches")  # the rates are per launch
    frame.wait_for_selector('#kernel-table[data-rows="launches"] tbody tr[data-id]', timeout=20000)
    cells = "rs => rs.map(r => [...r.querySelectorAll('td')].slice(5, 10).map(t => t.textContent))"
    rows = frame.eval_on_selector_all("#kernel-table tbody tr[data-id]", cells)
    bounded = [r for r in rows if r[0].startswith("\u2264")]
    assert bounded, rows
    # FLOP/s, bandwidth and both utilisations rest on the same dense upper bound: all say so
    assert all(c.startswith("\u2264") or c == "\u2014" for r in bounded for c in r), bounded
    shot(page, "e2e12_flex.png")


def test_a_logdir_of_symlinks_says_why_it_is_empty(browser, tmp_path):
    """The plugin reads only files inside the log directory: a log directory of links to run
    directories elsewhere shows the empty state naming the links it skipped."""
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    os.symlink(os.path.join(ROOT, RUNS["flex"]), str(logdir / "flex_link"))
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    try:
        with tensorboard(str(logdir), str(tmp_path)) as base:
            page.goto(base + "/#attention")
            frame = plugin_frame(page)
            frame.wait_for_selector("#state-no-traces #skipped-links", timeout=30000)
            text = frame.inner_text("#skipped-links")
            assert "flex_link" in text and "not followed" in text and ROOT not in text
            shot(page, "e2e15_symlinks.png")
    finally:
        page.close()
