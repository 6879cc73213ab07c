// Entry point: TensorBoard imports this ES module inside the plugin's iframe and calls render().

import "./styles.css";
import { api, ApiError, untilReady } from "./api";
import { h, replace } from "./dom";
import * as fmt from "./format";
import { setShortNames } from "./names";
import { KernelFilter, onHashState, readState, UrlState, View, writeState } from "./state";
import { followDarkMode } from "./theme";
import { Base, baseOf, onBase, TimeBase } from "./timebase";
import type { Kernel, RooflineResponse, Run, RunsResponse, Selection, Summary } from "./types";
import { renderAdvice } from "./views/advice";
import { renderReplay } from "./views/replay";
import { CompareView } from "./views/compare";
import { KernelTable } from "./views/kernels";
import { renderPhases } from "./views/phases";
import { renderSites } from "./views/sites";
import { renderRoofline, RooflineControls, ROOFLINE_HELP } from "./views/roofline";
import { RunsView } from "./views/runs";
import { fileOf, picker, resolve } from "./views/selectors";
import * as states from "./views/states";
import { renderStrip } from "./views/strip";
import { renderSummary } from "./views/summary";
import { renderMemory } from "./views/memory";
import { multiRankRuns, RanksView } from "./views/ranks";
import { Timeline } from "./views/timeline";
import { SectionBar, sectionTargets } from "./views/sectionbar";
import { section, withBase } from "./widgets";

const STORE_KEY = "tb-attention:v2";

function loadStored(): UrlState {
  try {
    return JSON.parse(window.sessionStorage.getItem(STORE_KEY) || "{}");
  } catch {
    return {};
  }
}

function runAttention(r: Run): number {
  return Math.max(-1, ...r.files.map((f) => (f.state === "ready" || f.state === "summarized" ? f.attention_time_us ?? 0 : -1)));
}

/** The run to land on: the most attention time among analysed runs, else the newest. */
export function bestRun(runs: RunsResponse): string | undefined {
  let best: Run | undefined;
  for (const r of runs.runs) if (runAttention(r) > 0 && (!best || runAttention(r) > runAttention(best))) best = r;
  if (best) return best.run;
  let newest: Run | undefined;
  const mt = (r: Run) => Math.max(0, ...r.files.map((f) => f.mtime || 0));
  for (const r of runs.runs) if (!newest || mt(r) > mt(newest)) newest = r;
  return newest?.run;
}

class App {
  private root = h("div", { class: "tba-app" });
  private header = h("header", { class: "topbar" });
  private pickerSlot = h("div", { class: "picker-slot" });
  private progressSlot = h("div", { class: "progress-slot" });
  private main = h("main", { class: "content", id: "content", tabindex: -1 });
  private runs: RunsResponse | null = null;
  private view: View | null = null;
  private sel: Selection | null = null;
  private kfilter: KernelFilter | undefined;
  private pair: { base?: Selection; next?: Selection } = {};
  private shownKey = "";
  private pickerKey = "";
  private seq = 0;
  private compare: CompareView | null = null;
  private ranks: RanksView | null = null;
  private tabRanks: HTMLButtonElement;
  private runsView: RunsView | null = null;
  private kernels: KernelTable | null = null;
  private roofCtl: RooflineControls = { scope: "attention", group: true };
  private timer: number | undefined;
  private tabRuns: HTMLButtonElement;
  private tabRun: HTMLButtonElement;
  private tabCompare: HTMLButtonElement;
  private download: HTMLAnchorElement;
  private annotated: HTMLAnchorElement;
  // a click-through keeps the kernel table's heading below the toolbar while the sections above
  // it finish loading (their heights change): until the user scrolls, or a few seconds
  private pinKernels = 0;
  private sectionsAbove: ResizeObserver | null = null;
  private sectionBar: SectionBar | null = null;
  private stickyWatch: ResizeObserver | null = null;
  // the Trace view's time base (#41): per step unless the URL says att.base=total
  private tb: TimeBase = "step";
  private baseSwitch: HTMLElement;
  private baseButtons: Record<TimeBase, HTMLButtonElement>;
  private lastRun: { sel: Selection; s: Summary } | null = null;

  constructor() {
    const url = readState();
    const st = url.view || url.sel ? url : loadStored();
    this.view = st.view || null;
    this.sel = st.sel || null;
    this.kfilter = st.k;
    this.pair = { base: st.base, next: st.next };
    this.tb = st.tb || "step";
    const baseBtn = (v: TimeBase, label: string) => {
      const b = h("button", { type: "button", class: "tab", role: "radio", id: `base-${v}`, "data-base": v }, label);
      b.addEventListener("click", () => this.setBase(v));
      b.addEventListener("keydown", (e) => {
        if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"].includes(e.key)) return;
        e.preventDefault();
        const other: TimeBase = v === "step" ? "total" : "step";
        this.setBase(other);
        this.baseButtons[other].focus();
      });
      return b;
    };
    this.baseButtons = { step: baseBtn("step", "per step"), total: baseBtn("total", "total") };
    this.baseSwitch = h("div", { class: "tabs base-switch", id: "base-switch", role: "radiogroup", "aria-label": "time base of the figures", hidden: true },
      this.baseButtons.step, this.baseButtons.total);
    this.tabRuns = h("button", { type: "button", class: "tab", id: "tab-runs", hidden: true }, "Runs");
    this.tabRun = h("button", { type: "button", class: "tab", id: "tab-run" }, "Trace");
    this.tabCompare = h("button", { type: "button", class: "tab", id: "tab-compare" }, "Compare");
    this.tabRuns.addEventListener("click", () => this.setView("runs"));
    this.tabRun.addEventListener("click", () => this.setView("run"));
    this.tabCompare.addEventListener("click", () => this.setView("compare"));
    this.tabRanks = h("button", { type: "button", class: "tab", id: "tab-ranks", hidden: true, title: "the ranks of a multi-GPU job side by side" }, "Ranks");
    this.tabRanks.addEventListener("click", () => this.setView("ranks"));
    this.download = h("a", { class: "btn link", id: "download-report", download: "", hidden: true, title: "the full report of this trace as JSON (tb-attention analyze -f json)" }, "Report");
    this.annotated = h("a", { class: "btn link", id: "download-annotated", download: "", hidden: true, title: "this trace with attention calls and phases as timeline tracks, for Perfetto (tb-attention annotate)" }, "Annotated trace");
    this.header.append(
      h("div", { class: "brand" }, h("span", { class: "logo", "aria-hidden": "true" }), h("span", null, "Attention")),
      h("nav", { class: "tabs", "aria-label": "views" }, this.tabRuns, this.tabRun, this.tabCompare, this.tabRanks),
      this.pickerSlot,
      this.baseSwitch,
      h("span", { class: "grow" }),
      this.annotated,
      this.download);
    // TensorBoard's plugin_entry.html sets <base href="/data/plugin/attention/">: a bare "#content"
    // link would navigate the iframe away from the tab, so the skip link focuses the content itself
    const skip = h("a", { class: "skip", href: "#content" }, "Skip to content");
    skip.addEventListener("click", (e) => {
      e.preventDefault();
      this.main.focus();
      this.main.scrollIntoView();
    });
    this.root.append(skip, this.header, this.progressSlot, this.main);
    // the sticky toolbar's height (one row at 1500 px, two at 1000) and, on the Trace view, the
    // section bar's below it: what scrolled-to sections keep clear of (CSS scroll-margin-top)
    const setTop = () => this.setTop();
    if (typeof ResizeObserver !== "undefined") {
      this.stickyWatch = new ResizeObserver(setTop);
      this.stickyWatch.observe(this.header);
    }
    window.addEventListener("resize", setTop);
    const unpin = () => { this.pinKernels = 0; };
    for (const ev of ["wheel", "touchmove", "keydown", "mousedown"]) window.addEventListener(ev, unpin, { passive: true, capture: true });
  }

  mount(): void {
    document.body.classList.add("tba-body");
    followDarkMode(document.body);
    document.body.appendChild(this.root);
    this.setTop();
    onHashState((st) => this.applyUrl(st));
    this.updateTabs();
    replace(this.main, states.pending("loading", "Looking for traces in the log directory", null));
    void this.poll();
  }

  /** How far from the top of the viewport the sticky bars end: the toolbar (where it is sticky:
   * not in a short window) and the Trace view's section bar. */
  private stickyBottom(): number {
    const bar = this.sectionBar?.el.isConnected ? this.sectionBar.el.offsetHeight : 0;
    return (getComputedStyle(this.header).position === "sticky" ? this.header.offsetHeight : 0) + bar;
  }

  private setTop(): void {
    const root = document.documentElement.style;
    root.setProperty("--topbar-h", `${this.header.offsetHeight}px`);
    root.setProperty("--sticky-h", `${this.stickyBottom()}px`);
    this.sectionBar?.observe();
  }

  private dropSectionBar(): void {
    if (this.sectionBar) this.stickyWatch?.unobserve(this.sectionBar.el);
    this.sectionBar?.destroy();
    this.sectionBar = null;
  }

  /** A link followed in the open tab (the hash changed): show what it names. */
  private applyUrl(st: UrlState): void {
    this.view = st.view || this.view;
    if (st.sel) this.sel = st.sel;
    this.kfilter = st.k;
    this.pair = { base: st.base, next: st.next };
    this.tb = st.tb || "step";
    this.dropViews();
    this.seq++;
    this.updateTabs();
    if (this.runs) this.onRuns(this.runs);
  }

  /** Forget what the current view drew (the next render builds it again for the new state). */
  private dropViews(): void {
    this.dropSectionBar();
    this.setTop();
    this.shownKey = "";
    this.pickerKey = "";
    this.compare = null;
    this.runsView = null;
    this.ranks?.destroy();
    this.ranks = null;
  }

  private store(): void {
    const st: UrlState = { view: this.view || undefined, sel: this.sel || undefined, k: this.kfilter,
      base: this.pair.base, next: this.pair.next, tb: this.tb === "total" ? "total" : undefined };
    writeState(st);
    try {
      window.sessionStorage.setItem(STORE_KEY, JSON.stringify(st));
    } catch {
      /* private mode: nothing to keep */
    }
  }

  private updateTabs(): void {
    const several = (this.runs?.runs.length || 0) > 1;
    this.tabRuns.hidden = !several;
    this.tabRanks.hidden = !(this.runs && multiRankRuns(this.runs).length) && this.view !== "ranks";
    this.tabRanks.title = this.runs && multiRankRuns(this.runs).length ? "the ranks of a multi-GPU job side by side"
      : "no run here is a job of several ranks";
    for (const [b, v] of [[this.tabRuns, "runs"], [this.tabRun, "run"], [this.tabCompare, "compare"], [this.tabRanks, "ranks"]] as [HTMLButtonElement, View][]) {
      b.setAttribute("aria-pressed", this.view === v ? "true" : "false");
      b.classList.toggle("active", this.view === v);
    }
  }

  /** The switch's state for the shown trace: its base, disabled with the reason where the trace
   * has one step or none (then its figures are totals). */
  private updateBaseSwitch(b: Base | null): void {
    this.baseSwitch.hidden = this.view !== "run" || !b;
    if (!b) return;
    this.baseSwitch.title = b.why;
    this.baseSwitch.setAttribute("aria-disabled", b.canSwitch ? "false" : "true");
    for (const v of ["step", "total"] as TimeBase[]) {
      const btn = this.baseButtons[v];
      const on = b.base === v;
      btn.setAttribute("aria-checked", on ? "true" : "false");
      btn.classList.toggle("active", on);
      btn.disabled = !b.canSwitch;
      btn.tabIndex = on ? 0 : -1;
      btn.title = b.why;
    }
  }

  private setBase(v: TimeBase): void {
    if (this.tb === v) return;
    this.tb = v;
    this.store();
    const last = this.lastRun;
    if (!last || this.view !== "run") return;
    const y = window.scrollY;
    this.renderRun(last.sel, last.s, ++this.seq);
    window.scrollTo(0, y);
  }

  private setView(v: View): void {
    if (this.view === v) return;
    this.view = v;
    this.dropViews();
    if (v !== "compare") this.pair = {};
    this.updateTabs();
    this.store();
    if (v !== "run") this.updateBaseSwitch(null);
    if (this.runs) this.onRuns(this.runs);
  }

  private async poll(): Promise<void> {
    window.clearTimeout(this.timer);
    let next = 10000;
    try {
      const runs = await api.runs();
      this.onRuns(runs);
      const c = runs.counts;
      const pending = c.waiting + c.queued + c.loading;
      next = pending ? 1500 : runs.runs.length ? 10000 : 2000;
    } catch (e) {
      replace(this.progressSlot, states.apiError(e instanceof ApiError ? e.message : "cannot reach TensorBoard"));
      next = 5000;
    }
    this.timer = window.setTimeout(() => void this.poll(), next);
  }

  private onRuns(runs: RunsResponse): void {
    this.runs = runs;
    const allFiles = runs.runs.flatMap((r) => r.files);
    replace(this.progressSlot, states.progress(runs.counts, allFiles));
    if (!runs.runs.length) {
      this.sel = null;
      this.pickerKey = "";
      this.shownKey = "none";
      replace(this.pickerSlot);
      this.download.hidden = true;
      this.annotated.hidden = true;
      this.updateTabs();
      replace(this.main, states.noTraces(runs));
      return;
    }
    // the landing view: the runs overview when there are several runs, else the one run's trace
    if (!this.view) this.view = runs.runs.length > 1 ? "runs" : "run";
    if (this.view === "runs" && runs.runs.length < 2) this.view = "run";
    this.updateTabs();
    if (this.view === "runs") {
      replace(this.pickerSlot);
      this.download.hidden = true;
      this.annotated.hidden = true;
      if (!this.runsView) {
        this.runsView = new RunsView((run, opts) => this.openRun(run, opts));
        replace(this.main, this.runsView.el);
      }
      this.store();
      void this.runsView.refresh();
      return;
    }
    if (this.view === "ranks") {
      replace(this.pickerSlot);
      this.download.hidden = true;
      this.annotated.hidden = true;
      if (!this.ranks) {
        // a rank opens in the trace view; a run that is not a job is said so, never swapped for another
        this.ranks = new RanksView(runs, (sel) => { this.sel = sel; this.kfilter = undefined; this.setView("run"); }, this.sel?.run,
          (run) => { this.sel = resolve(runs, { run }); this.store(); });
        replace(this.main, this.ranks.el);
      } else {
        this.ranks.update(runs);
      }
      this.store();
      return;
    }
    if (this.view === "compare") {
      replace(this.pickerSlot);
      this.download.hidden = true;
      this.annotated.hidden = true;
      if (!this.compare) {
        const current = resolve(runs, this.sel, bestRun(runs));
        this.compare = new CompareView(runs, current, this.pair, (b, n) => {
          this.pair = { base: b, next: n };
          this.store();
        });
        replace(this.main, this.compare.el);
      } else {
        this.compare.update(runs);
      }
      return;
    }
    this.sel = resolve(runs, this.sel, bestRun(runs));     // a run gone from the log directory: the best one
    const cur = fileOf(runs, this.sel);
    if (this.sel?.partial && cur && cur.state === "ready" && !cur.truncated) this.sel = { ...this.sel, partial: undefined };
    this.store();
    this.renderPicker();
    const f = fileOf(runs, this.sel);
    const key = JSON.stringify([this.sel, f?.state, f?.size, f?.mtime]);
    if (key !== this.shownKey) {
      this.shownKey = key;
      void this.loadRun();
    }
  }

  private openRun(run: string, opts: { partial?: boolean; view?: View } = {}): void {
    if (!this.runs) return;
    this.sel = resolve(this.runs, { run });
    if (opts.partial && this.sel) this.sel = { ...this.sel, partial: true };
    this.kfilter = undefined;
    this.setView(opts.view || "run");
  }

  /** The events before the cut of a truncated file (the CLI's --allow-partial), marked partial. */
  private openPartial(): void {
    if (!this.sel || !this.runs) return;
    this.sel = { ...this.sel, partial: true };
    this.store();
    this.shownKey = "";
    this.onRuns(this.runs);
  }

  private renderPicker(): void {
    if (!this.runs || !this.sel) return;
    const key = JSON.stringify([this.sel, this.runs.runs.map((r) => [r.run, r.files.map((f) => [f.file, f.state, f.steps])])]);
    if (key === this.pickerKey) return;
    const hadFocus = this.pickerSlot.contains(document.activeElement) ? (document.activeElement as HTMLElement).id : null;
    this.pickerKey = key;
    replace(this.pickerSlot, picker(this.runs, this.sel, (s) => this.select(s), "trace"));
    if (hadFocus) (document.getElementById(hadFocus) as HTMLElement | null)?.focus();
    const f = fileOf(this.runs, this.sel);
    this.download.hidden = !(f && f.state === "ready");
    this.download.href = api.reportUrl(this.sel);
    this.annotated.hidden = this.download.hidden;
    this.annotated.href = api.annotatedUrl(this.sel);
  }

  private select(s: Selection): void {
    if (!this.runs) return;
    const runChanged = s.run !== this.sel?.run;
    this.sel = resolve(this.runs, s);
    if (runChanged) this.kfilter = undefined;
    this.store();
    this.renderPicker();
    this.shownKey = "";
    this.onRuns(this.runs);
  }

  private async loadRun(): Promise<void> {
    const my = ++this.seq;
    const sel = this.sel;
    this.lastRun = null;
    this.updateBaseSwitch(null);
    if (!sel || !this.runs) return;
    const f = fileOf(this.runs, sel);
    const partial = () => this.openPartial();
    if (f && f.state === "incomplete" && !sel.partial) {
      replace(this.main, states.incomplete(f.message, f.path, partial));
      return; // analysed again when the file changes; the /runs poll notices
    }
    // "summarized": only its rank summary is loaded; asking for its summary below loads the report
    if (f && f.state !== "ready" && f.state !== "error" && f.state !== "summarized" && !(sel.partial && f.truncated)) {
      replace(this.main, states.pending(f.state, f.message, f.file, f.truncated ? partial : undefined));
      return; // the next /runs poll reloads once the state changes
    }
    try {
      const r = await untilReady(() => api.summary(sel), (p) => {
        if (p.kind === "pending") replace(this.main, states.pending(p.state, p.message, sel.file));
      }, () => my === this.seq);
      if (!r || my !== this.seq) return;
      if (r.kind === "failed") {
        replace(this.main, r.incomplete ? states.incomplete(r.message, f ? f.path : sel.file, partial) : states.failed(r.message, f ? f.path : sel.file));
        return;
      }
      if (r.kind !== "ready") return;
      setShortNames(r.data.short_names);
      this.lastRun = { sel, s: r.data.summary };
      this.renderRun(sel, r.data.summary, my);
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.main, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }

  /** Filter the kernel table (from a phase, a roofline point or a finding) and bring it into view;
   * ``evidence``: open the first row's details (the bound's reason). */
  private showKernels(f: KernelFilter, evidence = false): void {
    if (!this.kernels) return;
    this.kernels.apply(f, evidence);
    this.revealKernels();
  }

  private pickKernel(k: Kernel): void {
    if (!this.kernels) return;
    this.kernels.pin(k);
    this.revealKernels();
  }

  /** Scroll the kernel table's heading and filters to just below the sticky toolbar, and keep
   * them there while the sections above finish drawing (until the user scrolls, or 4 s). */
  private revealKernels(): void {
    const el = document.getElementById("kernels");
    if (!el) return;
    el.scrollIntoView({ block: "start", behavior: "auto" });
    (document.getElementById("kernel-search") as HTMLElement | null)?.focus({ preventScroll: true });
    this.pinKernels = Date.now() + 4000;
  }

  private keepKernelsInView(): void {
    if (!this.pinKernels || Date.now() > this.pinKernels) return;
    const el = document.getElementById("kernels");
    if (!el) return;
    const top = el.getBoundingClientRect().top;
    const want = this.stickyBottom() + 8;
    if (Math.abs(top - want) > 2) el.scrollIntoView({ block: "start", behavior: "auto" });
  }

  /** Watch the sections above the kernel table: when one changes height (a chart arrives), a
   * pinned click-through scrolls back to the table. */
  private watchAbove(): void {
    this.sectionsAbove?.disconnect();
    if (typeof ResizeObserver === "undefined") return;
    this.sectionsAbove = new ResizeObserver(() => this.keepKernelsInView());
    for (const c of Array.from(this.main.children)) {
      if ((c as HTMLElement).id === "kernels") break;
      this.sectionsAbove.observe(c);
    }
    const k = document.getElementById("kernels");
    if (k) this.sectionsAbove.observe(k);
  }

  private renderRun(sel: Selection, s: Summary, my: number): void {
    const b = baseOf(s, this.tb);
    const sb = onBase(s, b);      // the summary, phases, sites and advice on the base; the rest per launch
    this.updateBaseSwitch(b);
    const hasAttention = (s.attention_kernels || 0) > 0;
    const roofEl = h("div", { class: "roof-body" }, h("p", { class: "muted" }, "Loading the roofline\u2026"));
    const memEl = h("div", { class: "mem-slot" }, h("p", { class: "muted" }, "Loading the memory analysis\u2026"));
    const pick = (f: KernelFilter) => this.showKernels(f);
    this.kernels = new KernelTable(sel, hasAttention, this.kfilter, (f) => {
      this.kfilter = f;
      this.store();
    }, () => this.keepKernelsInView());
    const meta = h("p", { class: "trace-meta muted", id: "trace-meta" },
      h("code", null, s.path),
      sel.partial ? h("span", { class: "badge warn", id: "partial-badge", title: "the events before the cut of a truncated file" }, "partial") : null,
      ` \u00b7 ${fmt.count(s.trace.events)} events \u00b7 ${fmt.bytes(s.trace.bytes)} \u00b7 ${s.trace.format}`,
      s.trace.record_shapes ? "" : " \u00b7 no shapes", s.trace.with_stack ? "" : " \u00b7 no stack");
    const noGpu = s.notices.some((n) => n.code === "no_gpu_kernels");
    const comm = new Set((s.streams || []).filter((x) => x.communication).map((x) => `${x.device}:${x.stream}`));
    const timeline = noGpu ? null : new Timeline(sel, (k) => this.pickKernel(k), comm, s);
    replace(this.main,
      meta,
      states.notices(s),
      noGpu ? null : renderStrip(s),
      hasAttention ? withBase(renderAdvice(sb, pick, b), b) : null,
      hasAttention ? renderReplay(s, sel, api.replayScriptUrl(sel)) : null,
      noGpu ? null : withBase(renderSummary(sb, b), b),
      hasAttention ? withBase(renderPhases(sb, pick, (f) => this.showKernels(f, true)), b) : null,
      hasAttention ? withBase(renderSites(sb, pick), b) : null,
      hasAttention ? section("Roofline", "roofline", h("p", { class: "section-help" }, ROOFLINE_HELP), roofEl) : null,
      timeline ? timeline.el : null,
      noGpu ? null : section("Kernels", "kernels", this.kernels.el),
      memEl);
    this.showSectionBar(memEl);
    if (hasAttention) void this.loadRoofline(sel, roofEl, my, s);
    void this.loadMemory(sel, memEl, my);
    this.watchAbove();
    if (this.kfilter && Object.entries(this.kfilter).some(([k, v]) => k !== "rows" && v && v !== "attention")) {
      window.setTimeout(() => { if (my === this.seq) this.revealKernels(); }, 50);     // a shared link to a filtered table
    }
  }

  /** The sticky bar of jump links above the page's sections. */
  private showSectionBar(memEl: HTMLElement): void {
    this.dropSectionBar();
    const bar = new SectionBar(sectionTargets(this.main, memEl), () => this.stickyBottom());
    this.sectionBar = bar;
    this.main.prepend(bar.el);
    this.stickyWatch?.observe(bar.el);
    this.setTop();
  }

  private async loadMemory(sel: Selection, el: HTMLElement, my: number): Promise<void> {
    try {
      const r = await untilReady(() => api.memory(sel), () => undefined, () => my === this.seq);
      if (!r || my !== this.seq) return;
      if (r.kind === "failed") {
        replace(el, states.failed(r.message, sel.file));
        return;
      }
      if (r.kind !== "ready") return;
      replace(el, renderMemory(r.data));
    } catch (e) {
      if (my !== this.seq) return;
      replace(el, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }

  private async loadRoofline(sel: Selection, el: HTMLElement, my: number, s?: Summary): Promise<void> {
    const ctl = this.roofCtl;
    try {
      const r = await untilReady(() => api.roofline(sel, { scope: ctl.scope, group: ctl.group ? 1 : 0 }), () => undefined, () => my === this.seq);
      if (!r || my !== this.seq) return;
      if (r.kind === "failed") {
        replace(el, states.failed(r.message, sel.file));
        return;
      }
      if (r.kind !== "ready") return;
      renderRoofline(el, r.data as RooflineResponse, ctl, (c) => {
        this.roofCtl = c;
        void this.loadRoofline(sel, el, my, s).then(() => (document.getElementById(c.scope !== ctl.scope ? "roof-scope" : "roof-group") as HTMLElement | null)?.focus());
      }, (f) => this.showKernels(f), s);
    } catch (e) {
      if (my !== this.seq) return;
      replace(el, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }
}

let app: App | null = null;

export function render(): void {
  if (app) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = new URL("./index.css", import.meta.url).toString();
  document.head.appendChild(link);
  const meta = document.createElement("meta");
  meta.name = "viewport";
  meta.content = "width=device-width, initial-scale=1";
  document.head.appendChild(meta);
  app = new App();
  app.mount();
}
