"""The dashboard of issue #15 in a real TensorBoard (Debian's chromium driven by Playwright): the
runs overview as landing page, the advice panel and overview strip, click-through to the kernel
table, the selection in the URL across a reload, TensorBoard's dark mode, the 1000 px layout, the
canvas timeline, and compare starting from the run being viewed.

Runs: the eager and SDPA Hugging Face Llama training steps of validation/traces (H200) and the
flash sample. Screenshots go to tests/_artifacts/.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
from tbutil import CHROMIUM, ROOT, get_json, plugin_frame, serving_runs, shot

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

RUNS = {
    "llama_eager": "validation/traces/hf_llama_eager_fwdbwd",
    "llama_sdpa": "validation/traces/hf_llama_sdpa_fwdbwd",
    "flash": "sample_traces/sdpa_flash_s2048_fwd",
}
API = "/data/plugin/attention"
LOGDIR = {}  # the module's log directory (the last test adds a run to it)


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    for src in RUNS.values():
        if not os.path.isdir(os.path.join(ROOT, src)):
            pytest.skip(f"{src} is not available")
    with serving_runs(tmp_path_factory, RUNS) as (base, logdir):
        LOGDIR["path"] = logdir
        yield base


def _value_is(frame, sel: str, value: str, timeout: float = 10000) -> None:
    frame.wait_for_function(
        f"(() => {{ const e = document.querySelector({sel!r}); return !!e && e.value === {value!r}; }})()",
        timeout=timeout,
    )


def _text_has(frame, sel: str, pattern: str, timeout: float = 10000) -> None:
    """Wait until the element's text matches the regular expression ``pattern``."""
    frame.wait_for_function(
        f"(() => {{ const e = document.querySelector({sel!r}); "
        f"return !!e && new RegExp({pattern!r}).test(e.textContent); }})()",
        timeout=timeout,
    )


def _open(page, base, hash_="#attention"):
    page.goto(base + "/" + hash_)
    return plugin_frame(page)


def _open_run(frame, run):
    frame.wait_for_selector(f'#runs-table button[data-run="{run}"]', timeout=20000)
    frame.click(f'#runs-table button[data-run="{run}"]')
    _text_has(frame, "#trace-meta", re.escape(run + "/"), timeout=20000)


def test_runs_overview_is_the_landing_page(tb, page):
    frame = _open(page, tb)
    frame.wait_for_selector("#runs-table tbody tr", timeout=20000)
    rows = frame.eval_on_selector_all("#runs-table tbody tr", "rs => rs.map(r => r.dataset.run)")
    assert set(rows) == set(RUNS)
    att = {r["run"]: r["per_step"]["attention_time_us"] for r in get_json(tb + API + "/overview")["runs"]}
    assert rows == sorted(att, key=lambda r: -att[r])  # the most attention time per step first
    assert "ATTENTION PER STEP" in frame.inner_text("#runs-table thead").upper()
    text = frame.inner_text('#runs-table tr[data-run="llama_eager"]')
    assert "Use fused attention" in text and "~" in text  # the top finding, its gain an estimate
    shot(page, "e2e15_runs.png")


def test_advice_strip_click_through_and_url_state(tb, page):
    frame = _open(page, tb)
    _open_run(frame, "llama_eager")
    # the advice panel: the fused-attention finding with its estimated gain
    frame.wait_for_selector('#advice .finding[data-advice="fuse_attention"]', timeout=10000)
    gain = frame.inner_text('#advice .finding[data-advice="fuse_attention"] [data-testid="advice-gain"]')
    assert gain.startswith("~") and "saved" in gain
    assert "scaled_dot_product_attention" in frame.inner_text('#advice .finding[data-advice="fuse_attention"] pre.code')
    # the overview strip: step time, busy, idle, attention's share
    strip = frame.inner_text("#overview-strip")
    assert "STEP TIME" in strip.upper() and "GPU BUSY" in strip.upper() and "GPU IDLE" in strip.upper()
    assert re.search(r"\d+ % of busy", strip)
    shot(page, "e2e15_advice.png")
    if os.environ.get("TB_ATTENTION_UPDATE_SCREENSHOT") == "1":  # the README picture
        page.set_viewport_size({"width": 1400, "height": 1750})
        page.wait_for_timeout(800)
        shutil.copyfile(shot(page, "e2e15_readme.png"), os.path.join(ROOT, "docs", "screenshot.png"))
        page.set_viewport_size({"width": 1500, "height": 1000})
    # a phase of the finding -> the kernel table, filtered to that phase and direction
    link = (
        '#advice .finding[data-advice="fuse_attention"] .finding-links '
        'button[data-phase="softmax"][data-direction="backward"]'
    )
    frame.click(link)
    frame.wait_for_function(
        "document.querySelector('#kernel-phase').value === 'softmax' && "
        "document.querySelector('#kernel-direction').value === 'backward'",
        timeout=5000,
    )
    _text_has(frame, "#kernel-count", r"of \d+ kernels")
    phases = frame.eval_on_selector_all("#kernel-table tbody tr[data-id] td.kphase", "ts => ts.map(t => t.textContent)")
    assert phases and all("softmax" in p and "bwd" in p for p in phases)
    # the selection and the filter are in TensorBoard's URL hash and survive a reload
    assert "att.run=llama_eager" in page.url and "att.k.phase=softmax" in page.url
    assert page.url.split("#")[1].startswith("attention&")
    page.reload()
    frame = plugin_frame(page)
    _value_is(frame, "#trace-run", "llama_eager", timeout=20000)
    _value_is(frame, "#kernel-phase", "softmax")
    # search by op name
    frame.select_option("#kernel-phase", "")
    frame.select_option("#kernel-direction", "")
    frame.fill("#kernel-search", "aten::_softmax")
    frame.wait_for_function(
        "(() => { const ts = [...document.querySelectorAll("
        "'#kernel-table tbody tr[data-id] td.kop')];"
        " return ts.length > 0 && ts.every(t => t.textContent.includes('aten::_softmax')); })()",
        timeout=10000,
    )


def test_roofline_point_and_phase_bar_filter_the_kernel_table(tb, page):
    frame = _open(page, tb, "#attention&att.view=run&att.run=llama_eager")
    frame.wait_for_selector("#roofline-chart circle.pt", timeout=20000)
    frame.click("#roofline-chart circle.pt")
    # the point's kernel, named exactly (a chip beside the filters; its title the whole name)
    name = frame.wait_for_selector("#kernel-name-filter", timeout=5000).get_attribute("title")
    assert name and frame.eval_on_selector("#kernel-search", "e => e.value") == ""
    frame.wait_for_selector("#kernel-table tbody tr[data-id]", timeout=10000)
    names = frame.eval_on_selector_all("#kernel-table tbody tr[data-id] td.kname div", "ds => ds.map(d => d.title)")
    assert names and all(name == n for n in names)
    # the roofline keeps no keyboard ring after a mouse click
    assert frame.eval_on_selector(".roofline .focus-ring", "e => e.getAttribute('r')") == "0"
    frame.click('.phase-chart g.seg[data-phase="mask"][data-direction="forward"]')
    frame.wait_for_function("document.querySelector('#kernel-phase').value === 'mask'", timeout=5000)


def test_dark_mode_follows_tensorboard(tb, page):
    frame = _open(page, tb, "#attention&att.view=run&att.run=llama_eager")
    frame.wait_for_selector("#summary", timeout=20000)

    def bg():
        return frame.evaluate("getComputedStyle(document.body).backgroundColor")

    assert not frame.evaluate("document.body.classList.contains('tba-dark')")
    light = bg()
    page.evaluate("document.body.classList.add('dark-mode')")  # what TensorBoard's toggle does
    frame.wait_for_function("document.body.classList.contains('tba-dark')", timeout=5000)
    dark = bg()
    assert light != dark
    rgb = [int(x) for x in re.findall(r"\d+", dark)[:3]]
    assert sum(rgb) < 3 * 80
    shot(page, "e2e15_dark.png")
    page.evaluate("document.body.classList.remove('dark-mode')")
    frame.wait_for_function("!document.body.classList.contains('tba-dark')", timeout=5000)


def _all_tables_fit(frame) -> dict:
    """{table id: cells off-screen} for every data table on the page."""
    ids = frame.eval_on_selector_all("table.data", "ts => ts.map((t, i) => t.id || (t.id = 'tbl-' + i))")
    return {i: bad for i in ids if (bad := _offscreen(frame, "#" + i))}


def _offscreen(frame, table: str) -> list:
    """Header cells, and body cells' contents, that end right of the page (or of the table's
    scroll box, which would hide them behind a scrollbar)."""
    return frame.evaluate(f"""() => {{
        const w = document.documentElement.clientWidth;
        const t = document.querySelector('{table}');
        if (!t) return ['no table'];
        const box = t.parentElement.getBoundingClientRect();
        const right = Math.min(w, box.right) + 1;
        const out = [...t.querySelectorAll('thead th')]
            .filter(th => th.offsetParent !== null && th.getBoundingClientRect().right > right)
            .map(th => th.textContent);
        for (const el of t.querySelectorAll('tbody td > *, tbody th > *'))
            if (el.offsetParent !== null && el.getBoundingClientRect().right > right) out.push(el.textContent);
        return out; }}""")


def test_layout_at_1000_px(tb, browser):
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    try:
        frame = _open(page, tb)
        frame.wait_for_selector("#runs-table tbody tr", timeout=20000)
        assert _offscreen(frame, "#runs-table") == []
        _open_run(frame, "llama_eager")
        frame.wait_for_selector("#kernel-table tbody tr", timeout=20000)
        frame.wait_for_selector("#phase-table tbody tr", timeout=10000)
        for t in ("#kernel-table", "#phase-table"):
            assert _offscreen(frame, t) == [], t
        frame.wait_for_selector("#memory table.data", timeout=10000)
        assert _all_tables_fit(frame) == {}
        assert frame.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
        header = frame.evaluate("document.querySelector('.topbar').getBoundingClientRect().height")
        assert header < 0.15 * 900
        shot(page, "e2e15_1000.png")
        frame.click("#tab-compare")
        frame.wait_for_selector("#compare-table tbody tr", timeout=30000)
        for t in ("#compare-table", "#compare-totals", "#compare-sections", "#compare-groups"):
            assert _offscreen(frame, t) == [], t
        assert _all_tables_fit(frame) == {}
        shot(page, "e2e15_1000_compare.png")
    finally:
        page.close()


def test_timeline_draws_zooms_and_selects_a_kernel(tb, page):
    frame = _open(page, tb, "#attention&att.view=run&att.run=llama_eager")
    frame.wait_for_selector("#timeline-canvas", timeout=20000)
    _text_has(frame, ".timeline-status", r"kernels in \d+ marks", timeout=15000)
    frame.evaluate("document.getElementById('timeline').scrollIntoView()")
    # something is drawn: some pixels in the kernel row are not the background
    painted = frame.evaluate("""() => {
        const c = document.getElementById('timeline-canvas'); const g = c.getContext('2d');
        const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert painted > 1000
    before = frame.inner_text(".timeline-status")
    box = frame.eval_on_selector(
        "#timeline-canvas", "c => { const r = c.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }"
    )
    frame.hover("#timeline-canvas", position={"x": box[2] * 0.6, "y": 30})
    page.mouse.wheel(0, -600)
    frame.wait_for_function(f"document.querySelector('.timeline-status').textContent !== {before!r}", timeout=5000)
    # click the longest single kernel of the step: where the server says it is
    step = frame.evaluate("document.querySelector('#timeline-step').value")
    frame.click("#timeline-reset")
    sel = get_json(tb + API + "/runs")
    run = next(r for r in sel["runs"] if r["run"] == "llama_eager")
    width = int(box[2]) - 112
    st = next(s for s in get_json(tb + API + f"/timeline?run=llama_eager&width={width}")["steps"] if s["name"] == step)
    d = get_json(tb + API + f"/timeline?run=llama_eager&width={width}&t0={st['t0']}&t1={st['t1']}")
    lane = d["lanes"][0]
    r = lane["runs"]
    i = max((k for k in range(len(r["id"])) if r["id"][k] >= 0), key=lambda k: r["end"][k] - r["start"][k])
    x = 112 + (r["start"][i] + r["end"][i]) / 2 / (d["t1"] - d["t0"]) * width
    page.wait_for_timeout(600)
    frame.click("#timeline-canvas", position={"x": x, "y": 22 + 5 + 2 + 9})
    frame.wait_for_selector(f'#kernel-pinned .pinned-box[data-id="{r["id"][i]}"]', timeout=10000)
    name = get_json(tb + API + f"/kernel?run=llama_eager&id={r['id'][i]}")["kernel"]["name"]
    assert frame.eval_on_selector("#kernel-name-filter", "e => e.title") == name
    frame.wait_for_selector(f'#kernel-table tbody tr.selected[data-id="{r["id"][i]}"]', timeout=10000)
    assert run["files"]
    shot(page, "e2e15_timeline.png")


def test_compare_starts_from_the_current_run(tb, page):
    frame = _open(page, tb, "#attention&att.view=run&att.run=llama_eager")
    frame.wait_for_selector("#summary", timeout=20000)
    frame.click("#tab-compare")
    frame.wait_for_selector("#compare-verdict", timeout=30000)
    assert frame.eval_on_selector("#base-run", "e => e.value") == "llama_eager"
    assert frame.eval_on_selector("#new-run", "e => e.value") == "llama_sdpa"
    verdict = frame.inner_text("#compare-verdict")
    want = get_json(tb + API + "/compare?base=llama_eager&new=llama_sdpa")
    assert want["verdict"]["summary"] in verdict
    frame.wait_for_selector('#compare-sections tr[data-section="core"]', timeout=5000)
    assert "fused" in frame.inner_text('#compare-sections tr[data-section="core"][data-direction="forward"]')
    assert frame.locator("#compare-groups tbody tr").count() == len(want["kernel_groups"])
    fixed = frame.inner_text("#compare-advice .advice-diff-col.fixed")
    assert ("Use fused attention" in fixed) == ("fuse_attention" in want["advice"]["only_base"])
    assert "att.view=compare" in page.url and "att.n.run=llama_sdpa" in page.url
    shot(page, "e2e15_compare.png")


def test_incomplete_trace_is_said_first(tb, page):
    """A report of a file that ends early (``trace.truncated``; ``--allow-partial``'s
    ``trace.partial``) says so above every figure. The summary is the real one with the flag set:
    the sample traces are complete."""
    import json

    def truncated(route):
        resp = route.fetch()
        body = resp.json()
        if body.get("summary"):
            body["summary"]["trace"]["truncated"] = True
        route.fulfill(response=resp, body=json.dumps(body))

    page.route("**/data/plugin/attention/summary*", truncated)
    frame = _open(page, tb, "#attention&att.view=run&att.run=flash")
    frame.wait_for_selector("#status-incomplete", timeout=20000)
    assert "Incomplete trace" in frame.inner_text("#status-incomplete")
    # it comes before the figures
    assert frame.evaluate(
        "document.querySelector('#status-incomplete').compareDocumentPosition("
        "document.querySelector('#overview-strip')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )


def test_a_file_that_ends_early_is_shown_incomplete(tb, page):
    """A trace cut short (and old enough not to be still being written) is "incomplete": said so
    in the runs overview and the Trace view, with what to do, never shown as a trace without GPU
    kernels. (Runs last: it adds a run to the log directory.)"""
    import gzip
    import time

    data = gzip.decompress(
        open(os.path.join(ROOT, RUNS["flash"], os.listdir(os.path.join(ROOT, RUNS["flash"]))[0]), "rb").read()
    )
    d = os.path.join(LOGDIR["path"], "cut")
    os.makedirs(d)
    path = os.path.join(d, "w.1700000000000000000.pt.trace.json")
    with open(path, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    old = time.time() - 3600
    os.utime(path, (old, old))

    def state():
        runs = get_json(tb + API + "/runs")["runs"]
        return next((r["files"][0]["state"] for r in runs if r["run"] == "cut"), None)

    from tbutil import wait

    wait(lambda: state() == "incomplete", 60, "the cut trace marked incomplete")
    frame = _open(page, tb)
    frame.wait_for_selector('#runs-table tr[data-run="cut"] .badge.warn', timeout=20000)
    assert "incomplete" in frame.inner_text('#runs-table tr[data-run="cut"]')
    _open_run_view = '#runs-table button[data-run="cut"]'
    frame.click(_open_run_view)
    frame.wait_for_selector("#state-incomplete", timeout=20000)
    text = frame.inner_text("#state-incomplete")
    assert "truncated" in text and frame.locator("#state-incomplete #open-partial").count() == 1
    assert frame.locator("#overview-strip").count() == 0 and frame.locator("#state-failed").count() == 0
    assert "(incomplete)" in frame.inner_text("#trace-run")
    shot(page, "e2e15_incomplete.png")
