"""End to end: a real ``tensorboard`` process, traces dropped into its logdir after start, and
headless Chromium (Debian's /usr/bin/chromium driven by Playwright; no browser download) on
the Attention tab.

Screenshots go to tests/_artifacts/ (ignored by git). The README picture (docs/screenshot.png) is
written by test_dashboard_e2e.py with TB_ATTENTION_UPDATE_SCREENSHOT=1.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import tbutil
from tbutil import (
    CHROMIUM,
    ROOT,
    get_json as _get_json,
    plugin_frame as _plugin_frame,
    shot as _shot,
    wait as _wait,
)

SAMPLES = os.path.join(ROOT, "sample_traces")
META_SHOWS = "document.querySelector('#trace-meta') && document.querySelector('#trace-meta').textContent.includes('%s')"
XSS = "<img src=x onerror=window.__xss=1>"

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)


def _sample(run: str) -> str:
    d = os.path.join(SAMPLES, run)
    if not os.path.isdir(d):
        pytest.skip(f"sample_traces/{run} is not available")
    return os.path.join(d, sorted(f for f in os.listdir(d) if f.endswith((".json", ".json.gz")))[0])


def _drop(logdir: str, run: str, src: str, name: str = None) -> None:
    d = os.path.join(logdir, run)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(logdir, ".incoming")
    shutil.copyfile(src, tmp)
    os.replace(tmp, os.path.join(d, name or os.path.basename(src)))


def _xss_trace(dst: str) -> str:
    """A sample trace whose GPU kernels are all named like an HTML injection."""
    import gzip

    with gzip.open(_sample("sdpa_flash_s2048_fwd"), "rt", encoding="utf-8") as f:
        data = json.load(f)
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") == "kernel":
            ev["name"] = XSS
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return dst


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    for run in ("sdpa_flash_s2048_fwd", "sdpa_math_s2048_fwd", "gpt4l_sdpa_train"):
        _sample(run)
    logdir = str(tmp_path_factory.mktemp("tb_logdir"))
    with tbutil.tensorboard(logdir, str(tmp_path_factory.mktemp("tb"))) as base:
        yield base, logdir


def test_attention_tab_end_to_end(tensorboard, browser):
    base, logdir = tensorboard
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests = []
    errors = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # 1. nothing in the logdir yet: the tab explains how to produce traces
        page.goto(base + "/#attention")
        frame = _plugin_frame(page)
        frame.wait_for_selector("#state-no-traces", timeout=15000)
        assert "tensorboard_trace_handler" in frame.text_content("#state-no-traces")
        _shot(page, "e2e_no_traces.png")

        # 2. traces dropped in while TensorBoard runs appear by themselves
        _drop(logdir, "flash", _sample("sdpa_flash_s2048_fwd"))
        _drop(logdir, "gpt", _sample("gpt4l_sdpa_train"))
        _drop(logdir, "math", _sample("sdpa_math_s2048_fwd"))
        frame.wait_for_selector("#summary, #runs-table", timeout=20000)
        _wait(lambda: _get_json(base + "/data/plugin/attention/runs")["counts"]["ready"] == 3, 20, "3 traces ready")

        # 3. several runs: the runs overview is the landing page; open flash from it
        page.reload()
        frame = _plugin_frame(page)
        frame.wait_for_selector('#runs-table button[data-run="flash"]', timeout=15000)
        frame.click('#runs-table button[data-run="flash"]')
        frame.wait_for_selector("#trace-run", timeout=10000)
        assert frame.eval_on_selector("#trace-run", "e => e.value") == "flash"
        frame.wait_for_selector("#summary", timeout=10000)
        summary = frame.text_content("#summary")
        assert "Attention time" in summary and "H200" in summary and "GPU busy time" in summary
        frame.wait_for_selector(
            '#phase-table tr[data-phase="fused_attention"][data-direction="forward"]', timeout=10000
        )
        frame.wait_for_selector("#roofline-chart circle.pt", timeout=10000)
        frame.wait_for_selector("#kernel-table tbody tr", timeout=10000)
        _shot(page, "e2e_flash.png")

        # 4. another run through the selector: a training trace with forward and backward
        frame.select_option("#trace-run", "gpt")
        frame.wait_for_function(META_SHOWS % "gpt4l_sdpa_train", timeout=15000)
        frame.wait_for_selector('#phase-table tr[data-direction="backward"]', timeout=10000)
        frame.wait_for_selector("#roofline-chart circle.pt", timeout=10000)
        assert frame.locator("#roofline-chart circle.pt").count() >= 3
        share = frame.inner_text('[data-testid="attention-share"]')
        assert share.endswith("%")
        # keyboard: focus the roofline and step to the first point
        frame.focus("#roofline-chart")
        page.keyboard.press("ArrowRight")
        tip = page.frame_locator("iframe").locator("#tba-tooltip")
        assert tip.is_visible() and "time" in tip.inner_text()
        page.keyboard.press("Escape")
        # kernel table: sort by a header button with the keyboard
        frame.focus('#kernel-table button[data-sort="name"]')
        page.keyboard.press("Enter")
        frame.wait_for_selector('#kernel-table th[aria-sort="ascending"] button[data-sort="name"]', timeout=10000)
        # memory card: no memory events in this trace (how to record them), the K/V footprint from shapes
        frame.wait_for_selector("#memory #mem-kv-table tbody tr", timeout=10000)
        assert "profile_memory=True" in frame.text_content("#memory")
        assert "annotated?run=gpt" in frame.get_attribute("#download-annotated", "href")
        _shot(page, "e2e_gpt.png")

        # 5. comparison of two runs, per phase
        frame.click("#tab-compare")
        frame.wait_for_selector("#base-run", timeout=10000)
        frame.select_option("#base-run", "flash")
        frame.select_option("#new-run", "math")
        frame.wait_for_selector('#compare-table tr[data-phase="fused_attention"]', timeout=15000)
        frame.wait_for_selector('#compare-table tr[data-phase="softmax"]', timeout=10000)
        assert "Attention time" in frame.text_content("#compare-totals")
        _shot(page, "e2e_compare.png")
        frame.click("#tab-run")
        frame.wait_for_selector("#summary", timeout=10000)

        # 6. a fresh load now that traces exist: the tab is active; the README picture
        page.set_viewport_size({"width": 1400, "height": 1750})
        page.reload()
        frame = _plugin_frame(page)
        frame.wait_for_selector("#roofline-chart circle.pt", timeout=20000)  # the selection came back from the URL
        frame.select_option("#trace-run", "gpt")
        frame.wait_for_function(META_SHOWS % "gpt4l_sdpa_train", timeout=15000)
        frame.wait_for_selector("#roofline-chart circle.pt", timeout=10000)
        _shot(page, "e2e_overview.png")
    finally:
        page.close()

    # nothing left localhost, and the page raised no error
    origin = base + "/"
    outside = [u for u in requests if not (u.startswith(origin) or u.startswith(("data:", "blob:", "about:")))]
    assert not outside, outside
    assert any("/data/plugin/attention/kernels" in u for u in requests)
    assert not errors, errors


def test_kernel_names_render_as_text(tensorboard, browser, tmp_path):
    base, logdir = tensorboard
    src = _xss_trace(str(tmp_path / "xss.1700000000000000000.pt.trace.json.gz"))
    _drop(logdir, "xss", src)
    _wait(
        lambda: any(
            r["run"] == "xss" and r["files"][0]["state"] == "ready"
            for r in _get_json(base + "/data/plugin/attention/runs")["runs"]
        ),
        20,
        "xss trace ready",
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(base + "/#attention&att.view=run")  # the Trace view (the runs overview is the landing page)
        frame = _plugin_frame(page)
        frame.wait_for_selector("#trace-run", timeout=15000)
        frame.select_option("#trace-run", "xss")
        frame.wait_for_selector("#kernel-table tbody tr", timeout=15000)
        frame.wait_for_function(META_SHOWS % "xss", timeout=15000)
        frame.wait_for_selector("#kernel-table tbody tr .kname", timeout=10000)
        assert XSS in frame.inner_text("#kernel-table")
        frame.wait_for_selector("#roofline-chart circle.pt", timeout=10000)
        frame.hover("#roofline-chart circle.pt")
        assert XSS in page.frame_locator("iframe").locator("#tba-tooltip").inner_text()
        frame.click("#kernel-table tbody tr button.expander")
        frame.wait_for_selector("#kernel-table tr.details", timeout=5000)
        page.wait_for_timeout(300)
        assert frame.evaluate("window.__xss") is None
        assert page.evaluate("window.__xss") is None
        assert frame.locator('img[src="x"]').count() == 0
        assert not dialogs
        _shot(page, "e2e_xss.png")
    finally:
        page.close()


HTML_RUN = "<img src=x onerror=window.__xss=3>"
HTML_FILE = "<svg onload=window.__xss=4>.1700000000000000000.pt.trace.json.gz"


def test_run_file_and_module_names_render_as_text(tensorboard, browser, tmp_path):
    """HTML in the run directory's name, the file (worker) name and nn.Module names: shown as
    those characters in the selectors, the header and the kernel table; nothing executes."""
    import gzip

    base, logdir = tensorboard
    with gzip.open(_sample("naive_bf16_s2048_fwd"), "rt", encoding="utf-8") as f:
        data = json.load(f)
    for ev in data["traceEvents"]:
        if isinstance(ev, dict) and str(ev.get("name", "")).startswith("nn.Module: "):
            ev["name"] = ev["name"].replace("_", "<img src=x onerror=window.__xss=5>_", 1)
    src = str(tmp_path / "html.json.gz")
    with gzip.open(src, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    _drop(logdir, HTML_RUN, src, HTML_FILE)
    _wait(
        lambda: any(
            r["run"] == HTML_RUN and r["files"][0]["state"] == "ready"
            for r in _get_json(base + "/data/plugin/attention/runs")["runs"]
        ),
        30,
        "html-named run ready",
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(base + "/#attention&att.view=run")  # the Trace view (the runs overview is the landing page)
        frame = _plugin_frame(page)
        frame.wait_for_selector("#trace-run", timeout=15000)
        frame.select_option("#trace-run", HTML_RUN)
        frame.wait_for_function(
            "document.querySelector('#trace-meta') && "
            "document.querySelector('#trace-meta').textContent.includes('onerror=window.__xss=3')",
            timeout=15000,
        )
        frame.wait_for_selector("#kernel-table tbody tr", timeout=15000)
        assert HTML_RUN in frame.inner_text("#trace-meta") or HTML_FILE in frame.inner_text("#trace-meta")
        assert "<img src=x onerror=window.__xss=5>" in frame.inner_text("#kernel-table")
        page.wait_for_timeout(300)
        for f in (frame, page):
            assert f.evaluate("window.__xss") is None
        assert frame.locator('img[src="x"]').count() == 0 and frame.locator("svg[onload]").count() == 0
        assert not dialogs
        _shot(page, "e2e_xss_names.png")
    finally:
        page.close()


def test_loading_progress_bar(tensorboard, browser):
    """A file being analysed shows a progress bar with its percentage and stage. The /runs answer
    is made up (the routes' side is tests/plugin/test_progress_routes.py): the sample traces load
    too fast to catch half-read."""
    base, logdir = tensorboard
    prog = {
        "stage": "reading",
        "bytes_read": 118_466_422,
        "bytes_total": 263_258_717,
        "fraction": 0.45,
        "basis": "file",
    }
    f = {
        "file": "w.1.pt.trace.json",
        "path": "big/w.1.pt.trace.json",
        "worker": "w",
        "span": "1",
        "size": 263_258_717,
        "mtime": 1.7e9,
        "state": "loading",
        "message": None,
        "seconds": None,
        "progress": prog,
    }
    counts = {"waiting": 0, "queued": 0, "loading": 1, "ready": 0, "error": 0, "files": 1}
    runs = {
        "logdir": logdir,
        "scanned": True,
        "scan_error": None,
        "poll_secs": 0.5,
        "counts": counts,
        "runs": [
            {
                "run": "big",
                "files": [f],
                "counts": {"loading": 1},
                "workers": [{"worker": "w", "spans": [{"span": "1", "index": 1, "file": f["file"]}]}],
            }
        ],
    }
    page = browser.new_page(viewport={"width": 1400, "height": 700})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route(
        "**/data/plugin/attention/runs*",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(runs)),
    )
    try:
        page.goto(base + "/#attention")
        frame = _plugin_frame(page)
        bar = '#load-progress .file-progress[data-stage="reading"] [role="progressbar"]'
        frame.wait_for_selector(bar, timeout=15000)
        attrs = frame.eval_on_selector(
            bar,
            "e => ['aria-valuenow', 'aria-valuemin', 'aria-valuemax', 'aria-valuetext'].map(a => e.getAttribute(a))",
        )
        assert attrs == ["45", "0", "100", "45 % read, reading the trace"]
        text = frame.inner_text("#load-progress .file-progress")
        assert "45 %" in text and "Reading the trace" in text and "of 263 MB" in text
        _shot(page, "e2e_loading.png")
        # the next poll: read, now analysing (the bar stays full, the stage says what runs)
        prog.update(stage="analysing", bytes_read=prog["bytes_total"], fraction=1.0)
        frame.wait_for_selector('#load-progress .file-progress[data-stage="analysing"]', timeout=10000)
        text = frame.inner_text("#load-progress .file-progress")
        assert "100 %" in text and "Finding attention" in text and "file read" in text
    finally:
        page.close()
    assert not errors, errors
