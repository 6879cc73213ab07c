"""One time base (issue #41) in a real TensorBoard: the Trace view's figures are per step by default
(the summary's attention time is the report's total over its 2 profiled steps, halved, and its
sections say "per step"), a toolbar switch shows the totals and keeps ``att.base=total`` in the URL
through a reload, and the advice's top gain follows the base. A trace without profiler steps keeps
its totals, with the switch disabled and a tooltip saying why.

Runs: the naive GPT training sample (2 profiled steps) and the seed MHA trace (no profiler step).
"""

from __future__ import annotations

import os
from urllib.parse import urlencode

import pytest
from tbutil import CHROMIUM, get_json, plugin_frame, serving_runs, shot

pytestmark = pytest.mark.e2e

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

API = "/data/plugin/attention"
RUN = "gpt4l_naive_train"
NO_STEP = "seed_mha"
RUNS = {RUN: "sample_traces/gpt4l_naive_train", NO_STEP: "sample_traces/seed_mha"}
ATT = '[data-testid="attention-time"] .stat-value'
TOP_GAIN = '#advice .finding [data-testid="advice-gain"]'
CHECKED = "id => document.getElementById(id).getAttribute('aria-checked') === 'true'"


def fmt_time(us: float) -> str:
    """frontend/src/format.ts time(): three significant digits, in s, ms or µs."""

    def sig(x: float) -> str:
        if x == 0:
            return "0"
        a = abs(x)
        if a >= 100:
            return f"{x:.0f}"
        if a >= 10:
            return f"{x:.1f}"
        if a >= 1:
            return f"{x:.2f}"
        return f"{x:.3g}"

    a = abs(us)
    if a >= 1e6:
        return f"{sig(us / 1e6)} s"
    if a >= 1e3:
        return f"{sig(us / 1e3)} ms"
    return f"{sig(us)} \u00b5s"


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    for src in RUNS.values():
        if not os.path.isdir(os.path.join(os.path.dirname(__file__), "..", "..", src)):
            pytest.skip(f"{src} is not available")
    with serving_runs(tmp_path_factory, RUNS) as (base, _):
        yield base


def _trace(page, base, run=RUN, extra=""):
    page.goto(base + "/#attention&" + urlencode({"att.view": "run", "att.run": run}) + extra)
    frame = plugin_frame(page)
    frame.wait_for_function(
        "r => { const s = document.getElementById('trace-run'); return s && s.value === r"
        " && document.querySelector('[data-testid=\"attention-time\"]'); }",
        arg=run,
        timeout=30000,
    )
    return frame


def test_per_step_by_default_switch_to_total_kept_in_url(tb, page):
    summary = get_json(f"{tb}{API}/summary?run={RUN}")["summary"]
    assert len(summary["steps"]) == 2 and summary["step"] is None
    total = summary["attention_time_us"]
    frame = _trace(page, tb)
    # per step by default: half the total, and the sections say so
    assert frame.inner_text(ATT).strip() == fmt_time(total / 2)
    assert frame.get_attribute("#base-step", "aria-checked") == "true"
    assert frame.get_attribute("#base-total", "aria-checked") == "false"
    tags = frame.eval_on_selector_all('[data-testid="base-tag"]', "els => els.map(e => e.textContent)")
    assert len(tags) >= 3 and all("per step (mean of 2 profiled steps)" in t for t in tags), tags
    assert "per step (mean of 2 profiled steps)" in frame.inner_text('[data-testid="gpu-busy"]')
    assert "att.base" not in page.url
    gain_step = frame.inner_text(TOP_GAIN)
    top = frame.get_attribute("#advice .finding", "data-advice")
    finding = next(a for a in summary["advice"] if a["id"] == top)
    shot(page, "time_base_step.png")

    # the switch (keyboard: an arrow key moves the radio): totals, in the URL
    frame.focus("#base-step")
    page.keyboard.press("ArrowRight")
    frame.wait_for_function(CHECKED, arg="base-total", timeout=5000)
    assert frame.inner_text(ATT).strip() == fmt_time(total)
    assert "att.base=total" in page.url
    assert "over the 2 profiled steps" in frame.inner_text("#summary h2")
    gain_total = frame.inner_text(TOP_GAIN)
    assert gain_total != gain_step
    assert fmt_time(finding["estimated_gain_us"]) in gain_total
    if finding.get("per_step"):
        ps = finding["per_step"]
        per = ps["step_gain_us"] if finding.get("gain_basis") == "step" else ps["gpu_gain_us"]
        if per is not None:
            assert fmt_time(per) in gain_step or fmt_time(finding["estimated_gain_us"] / 2) in gain_step
    shot(page, "time_base_total.png")

    # a reload keeps the totals
    page.reload()
    frame = plugin_frame(page)
    frame.wait_for_selector(ATT, timeout=30000)
    assert frame.get_attribute("#base-total", "aria-checked") == "true"
    assert frame.inner_text(ATT).strip() == fmt_time(total)

    # and back to per step: the key leaves the URL
    frame.click("#base-step")
    frame.wait_for_function(CHECKED, arg="base-step", timeout=5000)
    assert frame.inner_text(ATT).strip() == fmt_time(total / 2)
    assert "att.base" not in page.url
    assert not page.errors


def test_no_profiler_step_keeps_totals_switch_disabled(tb, page):
    summary = get_json(f"{tb}{API}/summary?run={NO_STEP}")["summary"]
    assert not summary["steps"]
    frame = _trace(page, tb, NO_STEP, "&att.base=total")
    assert frame.inner_text(ATT).strip() == fmt_time(summary["attention_time_us"])
    assert frame.is_disabled("#base-step") and frame.is_disabled("#base-total")
    assert "no profiler step" in (frame.get_attribute("#base-switch", "title") or "")
    assert "whole trace" in frame.inner_text("#summary h2")
    # dark theme: the switch is drawn there too
    page.evaluate("document.body.classList.add('dark-mode')")
    frame.wait_for_function("document.body.classList.contains('tba-dark')", timeout=5000)
    assert frame.is_visible("#base-switch")
    shot(page, "time_base_no_step_dark.png")
    assert not page.errors
