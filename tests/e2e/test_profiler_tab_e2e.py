"""The profiler tab PyTorch users lost (issue #41) in a real TensorBoard, as a user sees it (Debian's
chromium driven by Playwright): run names shortened from the hash side.

Runs: the eager Hugging Face Llama step of validation/traces (H200; sources, sites and advice with
their kernels' source lines) and the naive bf16 sample in a run directory named like its file.
Screenshots go to tests/_artifacts/.
"""

from __future__ import annotations

import os
from urllib.parse import urlencode

import pytest
from tbutil import CHROMIUM, plugin_frame, serving_runs, shot

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

API = "/data/plugin/attention"
EAGER = "llama_eager"
LONG_RUN = "naive_bf16_s2048_fwd_rank0.1796022790297793763.pt.trace.json.gz"
RUNS = {EAGER: "validation/traces/hf_llama_eager_fwdbwd", LONG_RUN: "sample_traces/naive_bf16_s2048_fwd"}


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    for src in RUNS.values():
        if not os.path.isdir(os.path.join(os.path.dirname(__file__), "..", "..", src)):
            pytest.skip(f"{src} is not available")
    with serving_runs(tmp_path_factory, RUNS) as (base, _):
        yield base


def _trace(page, base, run=EAGER, extra=""):
    page.goto(base + "/#attention&" + urlencode({"att.view": "run", "att.run": run}) + extra)
    frame = plugin_frame(page)
    frame.wait_for_function(
        "r => { const s = document.getElementById('trace-run');"
        " const b = document.querySelector('#kernels .kernels-body');"
        " return s && s.value === r && b && b.getAttribute('aria-busy') === 'false'; }",
        arg=run,
        timeout=30000,
    )
    frame.wait_for_selector("#kernel-table tbody tr[data-id]", timeout=30000)
    return frame


def test_run_names_are_shortened_from_the_hash_side(tb, page):
    head = "naive_bf16_s2048_fwd_rank0\u2026"
    frame = _trace(page, tb, LONG_RUN)
    opt = frame.eval_on_selector(
        "#trace-run",
        "(s, r) => { const o = [...s.options].find(o => o.value === r); return [o.textContent, o.title, s.title]; }",
        LONG_RUN,
    )
    assert opt == [head, LONG_RUN, LONG_RUN]
    frame.click("#tab-runs")
    btn = frame.wait_for_selector(f'#runs-table button.run-link[data-run="{LONG_RUN}"]', timeout=20000)
    assert btn.inner_text() == head and LONG_RUN in btn.get_attribute("title")
    assert frame.inner_text(f'#runs-table tr[data-run="{LONG_RUN}"] .run-file') == head
    assert "1796022790297793763" not in frame.inner_text("#runs-table")
    assert frame.inner_text(f'#runs-table button.run-link[data-run="{EAGER}"]') == EAGER  # a plain name stays whole
    shot(page, "e2e41_run_names.png")
    btn.click()
    frame.wait_for_function("r => document.getElementById('trace-run')?.value === r", arg=LONG_RUN, timeout=20000)
