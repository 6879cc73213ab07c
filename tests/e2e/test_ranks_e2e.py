"""End to end, the Ranks view: a generated 8-rank job (rank 5 slowed), summarised ahead of time
with ``tb-attention summarize``, in a real ``tensorboard`` and headless Chromium: every rank in
order, exactly rank 5 marked, the heatmap, two ranks compared, a click opening rank 5's trace."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tbutil
from tbutil import ARTIFACTS, ROOT
from test_tensorboard_e2e import _get_json, _plugin_frame, _wait  # noqa: F401

pytestmark = pytest.mark.e2e
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import make_rank_job  # noqa: E402

STRAGGLER = 5


@pytest.fixture(scope="module")
def tensorboard_job(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("tb_ranks"))
    paths = make_rank_job.make_job(os.path.join(logdir, "job"), 8, stragglers=(STRAGGLER,), slowdown=1.3, seed=1)
    cache = str(tmp_path_factory.mktemp("cache"))
    env = dict(
        os.environ,
        TB_ATTENTION_POLL_SECS="0.5",
        TB_ATTENTION_CACHE_DIR=cache,
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    r = subprocess.run(
        [sys.executable, "-m", "tb_attention_plugin.cli", "summarize", logdir, "--workers", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    with tbutil.tensorboard(logdir, str(tmp_path_factory.mktemp("tb")), env={"TB_ATTENTION_CACHE_DIR": cache}) as base:
        yield base, paths


def test_ranks_view(tensorboard_job, browser):
    base, paths = tensorboard_job
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(base + "/#attention")
        frame = _plugin_frame(page)
        frame.wait_for_selector("#tab-ranks:not([hidden])", timeout=20000)
        frame.click("#tab-ranks")
        frame.wait_for_selector("#rank-chart rect.bar-att", timeout=20000)
        ranks = frame.eval_on_selector_all("#ranks-table tbody tr", "rs => rs.map(r => r.dataset.rank)")
        assert ranks == [str(i) for i in range(8)]
        flagged = frame.eval_on_selector_all(
            '#rank-chart rect.bar-att[data-straggler="1"]', "rs => rs.map(r => r.dataset.rank)"
        )
        assert flagged == [str(STRAGGLER)]
        assert frame.locator("#rank-heatmap rect.cell").count() >= 8
        assert f"rank {STRAGGLER}" in frame.text_content("#straggler-list")
        assert frame.eval_on_selector("#ranks-cmp-b", "e => e.value") == os.path.basename(paths[STRAGGLER])
        assert frame.locator("#ranks-compare-table tbody tr").count() >= 4
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, "e2e_ranks.png"), full_page=True)
        if os.environ.get("TB_ATTENTION_UPDATE_SCREENSHOT") == "1":  # the README picture
            import shutil

            page.set_viewport_size({"width": 1400, "height": 1500})
            page.wait_for_timeout(800)
            page.screenshot(path=os.path.join(ARTIFACTS, "e2e_ranks_readme.png"))
            shutil.copyfile(os.path.join(ARTIFACTS, "e2e_ranks_readme.png"), os.path.join(ROOT, "docs", "ranks.png"))
            page.set_viewport_size({"width": 1400, "height": 1100})
        # a click on the straggler's bar opens its trace
        frame.click(f'#rank-chart rect.bar-att[data-rank="{STRAGGLER}"]')
        frame.wait_for_selector("#trace-worker", timeout=20000)
        worker = os.path.basename(paths[STRAGGLER]).split(".")[0]
        _wait(lambda: frame.eval_on_selector("#trace-worker", "e => e.value") == worker, 20, "rank 5's trace selected")
        frame.wait_for_selector("#summary", timeout=20000)
        assert not errors, errors
    finally:
        page.close()
