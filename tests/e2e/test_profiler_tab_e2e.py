"""The profiler tab PyTorch users lost (issue #41) in a real TensorBoard, as a user sees it (Debian's
chromium driven by Playwright): the Trace view's sticky section bar (a click scrolls its section
into view, scrolling moves the highlight), the kernel table grouped by kernel (fewer rows than
launches, the same total time; sortable; every launch one toggle away), the source file:line never
cut at 1000 and 1500 px in light and dark, run names shortened from the hash side.

Runs: the eager Hugging Face Llama step of validation/traces (H200; sources, sites and advice with
their kernels' source lines) and the naive bf16 sample in a run directory named like its file.
Screenshots go to tests/_artifacts/.
"""

from __future__ import annotations

import math
import os
from urllib.parse import urlencode

import pytest
from tbutil import CHROMIUM, get_json, new_page, plugin_frame, serving_runs, shot, trace_view_ready

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

API = "/data/plugin/attention"
EAGER = "llama_eager"
LONG_RUN = "naive_bf16_s2048_fwd_rank0.1796022790297793763.pt.trace.json.gz"
RUNS = {EAGER: "validation/traces/hf_llama_eager_fwdbwd", LONG_RUN: "sample_traces/naive_bf16_s2048_fwd"}
SECTIONS = [
    "overview-strip",
    "advice",
    "replay",
    "summary",
    "phases",
    "sites",
    "roofline",
    "timeline",
    "kernels",
    "memory",
]
GROUP_ROWS = "#kernel-table tbody tr.group-row"
CURRENT = "document.querySelector('#section-bar [aria-current=\"true\"]')?.dataset.target || null"


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
    return trace_view_ready(frame, run)


def _dark(page, frame):
    page.evaluate("document.body.classList.add('dark-mode')")
    frame.wait_for_function("document.body.classList.contains('tba-dark')", timeout=5000)


def _settled(frame):
    """The roofline and the memory view drawn: the sections above the kernels keep their height."""
    frame.wait_for_selector("#roofline-chart circle.pt", timeout=20000)
    frame.wait_for_selector("#memory", timeout=20000)
    frame.wait_for_timeout(300)


def _launches(tb, run=EAGER, **q) -> dict:
    return get_json(tb + API + "/kernels?" + urlencode({"run": run, "limit": 1000, **q}))


def test_the_kernel_table_groups_launches_by_kernel(tb, page):
    launches = _launches(tb)
    n, total = launches["total"], launches["total_time_us"]
    frame = _trace(page, tb)
    assert frame.eval_on_selector("#kernel-rows", "e => e.value") == "kernels"  # the default
    assert frame.get_attribute("#kernel-table", "data-rows") == "kernels"
    rows = frame.eval_on_selector_all(
        GROUP_ROWS, "rs => rs.map(r => [+r.dataset.calls, +r.dataset.totalUs, r.querySelector('td.kname div').title])"
    )
    assert 0 < len(rows) < n, (len(rows), n)  # one row per kernel, not per launch
    assert sum(r[0] for r in rows) == n
    assert math.isclose(sum(r[1] for r in rows), total, rel_tol=1e-6), (sum(r[1] for r in rows), total)
    assert math.isclose(float(frame.get_attribute("#kernel-count", "data-total-us")), total, rel_tol=1e-9)
    assert f"({n} launches)" in frame.inner_text("#kernel-count")
    # Tensor Cores: the matmuls on the bf16 roof; the cell says how it was decided
    tc = frame.eval_on_selector_all(
        GROUP_ROWS,
        "rs => rs.map(r => [r.querySelector('td.ktc').textContent,"
        " r.querySelector('td.kphase').textContent,"
        " r.querySelector('td.ktc').title])",
    )
    yes = [t for t in tc if t[0] == "yes"]
    assert yes and all(any(p in t[1] for p in ("QKV", "QK^T", "PV", "output")) for t in yes), yes
    assert all("matmul-like or fused attention" in t[2] and "bf16" in t[2] for t in yes)
    shot(page, "e2e41_grouped.png")
    # sorting by any column, on the server
    frame.click('#kernel-table button[data-sort="calls"]')
    frame.wait_for_selector('#kernel-table th[aria-sort="descending"] button[data-sort="calls"]', timeout=10000)
    calls = frame.eval_on_selector_all(GROUP_ROWS, "rs => rs.map(r => +r.dataset.calls)")
    assert calls == sorted(calls, reverse=True) and calls[0] > 1
    frame.click('#kernel-table button[data-sort="calls"]')
    frame.wait_for_selector('#kernel-table th[aria-sort="ascending"] button[data-sort="calls"]', timeout=10000)
    calls = frame.eval_on_selector_all(GROUP_ROWS, "rs => rs.map(r => +r.dataset.calls)")
    assert calls == sorted(calls)
    frame.click('#kernel-table button[data-sort="tensor_core"]')
    frame.wait_for_selector('#kernel-table th[aria-sort="descending"] button[data-sort="tensor_core"]', timeout=10000)
    col = frame.eval_on_selector_all(GROUP_ROWS, "rs => rs.map(r => r.querySelector('td.ktc').textContent)")
    assert col[: len(yes)] == ["yes"] * len(yes), col
    frame.click('#kernel-table button[data-sort="occupancy_pct"]')
    frame.wait_for_selector('#kernel-table th[aria-sort="descending"] button[data-sort="occupancy_pct"]', timeout=10000)
    occ = frame.eval_on_selector_all(GROUP_ROWS + " td.kocc", "ts => ts.map(t => parseFloat(t.textContent))")
    assert occ and occ == sorted(occ, reverse=True)
    # every launch, one toggle away (and in the URL)
    frame.select_option("#kernel-rows", "launches")
    frame.wait_for_selector('#kernel-table[data-rows="launches"]', timeout=10000)
    assert f"of {n} kernels" in frame.inner_text("#kernel-count")
    assert frame.locator("#kernel-table tbody tr[data-id]").count() == min(n, 50)
    assert "att.k.rows=launches" in page.url
    # a group's details list its launches
    frame.select_option("#kernel-rows", "kernels")
    frame.wait_for_selector('#kernel-table[data-rows="kernels"]', timeout=10000)
    frame.click('#kernel-table button[data-sort="calls"]')
    frame.wait_for_selector('#kernel-table th[aria-sort="descending"] button[data-sort="calls"]', timeout=10000)
    first = frame.eval_on_selector(GROUP_ROWS, "r => [+r.dataset.calls, r.querySelector('td.kname div').title]")
    frame.click(GROUP_ROWS + " button.expander")
    frame.click("#kernel-table tr.details button.group-launches")
    frame.wait_for_selector('#kernel-table[data-rows="launches"]', timeout=10000)
    assert frame.get_attribute("#kernel-name-filter", "title") == first[1]
    frame.wait_for_function(f"document.querySelectorAll('#kernel-table tbody tr[data-id]').length === {first[0]}")


# a source's file:line against its cell: its text, whether it overflows its own box, and whether
# an ancestor up to the cell (or list item) clips it
_LOCS = """sel => [...document.querySelectorAll(sel)].map(el => {
  const r = el.getBoundingClientRect();
  const cell = el.closest('td, th, li');
  const clips = [];
  for (let a = el.parentElement; a; a = a.parentElement) {
    const cs = getComputedStyle(a);
    const ar = a.getBoundingClientRect();
    if ((a === cell || cs.overflowX !== 'visible') && (ar.left > r.left + 0.5 || ar.right < r.right - 0.5))
      clips.push(a.className || a.tagName);
    if (a === cell) break;
  }
  return {text: el.textContent, sw: el.scrollWidth, cw: el.clientWidth, w: r.width, clips}; })"""


def _expected_locs(tb) -> set:
    def loc(path: str, line) -> str:
        return f"{path.split('/')[-1]}{':' + str(line) if line else ''}"

    out = {loc(k["source"]["file"], k["source"]["line"]) for k in _launches(tb)["rows"] if k.get("source")}
    s = get_json(tb + API + "/summary?" + urlencode({"run": EAGER}))["summary"]
    out |= {st["source"].split("/")[-1] for st in s.get("sites") or [] if st.get("source")}
    for a in s.get("advice") or []:
        for k in (a.get("evidence") or {}).get("kernels") or []:
            if k.get("source"):
                out.add(loc(k["source"]["file"], k["source"]["line"]))
    return out


def _check_locs(frame, expected: set, where: str) -> None:
    for sel in ("#kernel-table td.kop .source-loc", "#site-table .source-loc", "#advice .finding-kernels .source-loc"):
        locs = frame.evaluate(_LOCS, sel)
        assert locs, f"{where}: no {sel}"
        for x in locs:
            assert x["text"] in expected, (where, sel, x)  # the whole file:line, nothing cut from it
            assert x["sw"] <= x["cw"] and x["w"] > 0, (where, sel, x)
            assert not x["clips"], (where, sel, x)


@pytest.mark.parametrize("dark", [False, True])
@pytest.mark.parametrize("width", [1500, 1000])
def test_the_source_file_and_line_are_never_cut(tb, browser, width, dark):
    expected = _expected_locs(tb)
    assert expected and all(":" in e for e in expected), expected
    page = new_page(browser, width, 900)
    try:
        frame = _trace(page, tb)
        _settled(frame)
        if dark:
            _dark(page, frame)
        tag = f"{width}_{'dark' if dark else 'light'}"
        _check_locs(frame, expected, f"{tag} grouped")
        # the long kernel names are what is cut, whole in their title
        cut = frame.eval_on_selector_all(
            "#kernel-table td.kname div", "ds => ds.filter(d => d.scrollWidth > d.clientWidth).map(d => d.title.length)"
        )
        assert cut, "no kernel name is cut"
        frame.evaluate("document.getElementById('kernels').scrollIntoView()")
        shot(page, f"e2e41_sources_{tag}.png")
        frame.select_option("#kernel-rows", "launches")
        frame.wait_for_selector('#kernel-table[data-rows="launches"]', timeout=10000)
        _check_locs(frame, expected, f"{tag} launches")
        frame.click("#kernel-table tbody tr[data-id] button.expander")  # an open row's details too
        frame.wait_for_selector("#kernel-table tr.details", timeout=5000)
        _check_locs(frame, expected, f"{tag} launches, details open")
        assert frame.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
    finally:
        page.close()
    assert not page.errors, page.errors


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


# where a section sits against the sticky bars
_PLACE = """id => {
  const bar = document.getElementById('section-bar').getBoundingClientRect();
  const top = document.querySelector('header.topbar').getBoundingClientRect();
  const el = document.getElementById(id).getBoundingClientRect();
  return {bar: bar.bottom, barTop: bar.top, topbar: top.bottom, top: el.top, bottom: el.bottom,
          vh: document.documentElement.clientHeight, y: window.scrollY}; }"""


@pytest.mark.parametrize("dark", [False, True])
def test_the_section_bar_jumps_to_a_section_and_follows_the_scroll(tb, browser, dark):
    page = new_page(browser, 1500, 900)
    try:
        frame = _trace(page, tb)
        _settled(frame)
        if dark:
            _dark(page, frame)
        links = frame.eval_on_selector_all("#section-bar button.section-link", "bs => bs.map(b => b.dataset.target)")
        assert links == SECTIONS
        assert frame.evaluate(CURRENT) == "overview-strip"
        for target in ("kernels", "sites", "phases", "timeline"):
            frame.click(f'#section-bar button[data-target="{target}"]')
            frame.wait_for_function(f"({CURRENT}) === {target!r}", timeout=5000)
            p = frame.evaluate(_PLACE, target)
            assert abs(p["barTop"] - p["topbar"]) <= 1, p  # the bar sticks right below the toolbar
            assert p["bar"] - 1 <= p["top"] <= p["bar"] + 20, (target, p)  # the section just below it
        # the last section: in view and highlighted even where the page ends before it reaches the top
        frame.click('#section-bar button[data-target="memory"]')
        frame.wait_for_function(f"({CURRENT}) === 'memory'", timeout=5000)
        p = frame.evaluate(_PLACE, "memory")
        assert p["bar"] - 1 <= p["top"] < p["vh"], p
        shot(page, f"e2e41_section_bar_{'dark' if dark else 'light'}.png")
        # scrolling (the wheel, a scrollbar) moves the highlight to the section under the bars
        frame.evaluate("window.scrollTo(0, 0)")
        frame.wait_for_function(f"({CURRENT}) === 'overview-strip'", timeout=5000)
        seen = [frame.evaluate(CURRENT)]
        for _ in range(80):
            frame.hover("#section-bar", position={"x": 5, "y": 5})
            page.mouse.wheel(0, 400)
            page.wait_for_timeout(60)
            cur = frame.evaluate(CURRENT)
            if seen[-1] != cur:
                seen.append(cur)
            if cur == "kernels":
                break
        assert seen[:2] == ["overview-strip", "advice"] and seen[-1] == "kernels", seen
        assert [s for s in SECTIONS if s in seen] == seen  # in page order, none skipped back
        frame.evaluate("document.getElementById('roofline').scrollIntoView()")
        frame.wait_for_function(f"({CURRENT}) === 'roofline'", timeout=5000)
        # the theme: an opaque bar in the theme's colours, the highlighted link in its accent
        look = frame.evaluate(
            """() => { const b = document.getElementById('section-bar'); const cs = getComputedStyle(document.body);
            const a = document.querySelector('#section-bar [aria-current="true"]');
            const probe = document.createElement('span'); probe.style.color = cs.getPropertyValue('--accent');
            document.body.append(probe);
            const accent = getComputedStyle(probe).color; probe.remove();
            return {bg: getComputedStyle(b).backgroundColor, pageBg: getComputedStyle(document.body).backgroundColor,
                    link: getComputedStyle(a).color, accent}; }"""
        )
        assert look["bg"] == look["pageBg"] and "rgba" not in look["bg"], look
        assert look["link"] == look["accent"], look
        assert look["bg"] == ("rgb(30, 30, 30)" if dark else "rgb(246, 247, 249)"), look
    finally:
        page.close()
    assert not page.errors, page.errors
