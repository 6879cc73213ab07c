// Two traces side by side, per phase and direction (e.g. the flash vs the math SDPA backend).

import { api, ApiError, untilReady } from "../api";
import { phaseColor } from "../colors";
import { h, s, replace } from "../dom";
import * as fmt from "../format";
import type { CompareGroupSide, CompareResponse, CompareRow, CompareSideInfo, RunsResponse, Selection } from "../types";
import { boundPill, estBadge, hideTip, phaseTag, section, showTip, utilCell } from "../widgets";
import { picker, resolve } from "./selectors";
import * as states from "./states";

const TOTAL_ROWS: [string, string][] = [
  ["attention_time_us", "Attention time"],
  ["forward_time_us", "forward"],
  ["backward_time_us", "backward"],
  ["core_attention_time_us", "core attention"],
  ["fused_time_us", "fused core"],
  ["unfused_core_time_us", "unfused core"],
  ["projection_time_us", "projections"],
  ["gpu_time_us", "GPU time (all kernels)"],
];

function deltaCell(d: number | null, speedup: number | null): HTMLElement {
  if (d === null) return h("td", { class: "num" }, fmt.DASH);
  const cls = Math.abs(d) < 1e-9 ? "" : d < 0 ? "better" : "worse";
  let note: string | null = null;
  if (speedup !== null && isFinite(speedup) && speedup > 0 && Math.abs(speedup - 1) > 0.005) {
    note = speedup > 1 ? `${fmt.ratio(speedup)} faster` : `${fmt.ratio(1 / speedup)} slower`;
  }
  return h("td", { class: `num delta ${cls}` }, fmt.signedTime(d), note ? h("span", { class: "muted small delta-note" }, ` (${note})`) : null);
}

function chart(rows: CompareRow[]): SVGElement {
  const W = 1000;
  const LW = 230;
  const BH = 11;
  const RH = 34;
  const max = Math.max(...rows.map((r) => Math.max(r.base?.time_us || 0, r.new?.time_us || 0)), 1e-9);
  const height = rows.length * RH + 10;
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, class: "chart compare-chart", role: "img", "aria-label": "time per phase: baseline and new" });
  rows.forEach((r, i) => {
    const y = 6 + i * RH;
    svg.appendChild(s("text", { x: LW - 10, y: y + BH + 4, class: "row-label", "text-anchor": "end" }, `${r.label} \u00b7 ${r.direction === "forward" ? "fwd" : "bwd"}`));
    const sides: ["base" | "new", number][] = [["base", 0], ["new", BH + 2]];
    for (const [side, dy] of sides) {
      const v = r[side]?.time_us || 0;
      if (!v) {
        svg.appendChild(s("text", { x: LW + 2, y: y + dy + BH - 1, class: "bar-label" }, `${side === "base" ? "baseline" : "new"}: none`));
        continue;
      }
      const w = (v / max) * (W - LW - 120);
      const rect = s("rect", { x: LW, y: y + dy, width: Math.max(w, v ? 1 : 0), height: BH, rx: 2,
        fill: phaseColor(r.phase), class: side === "base" ? "bar-base" : "bar-new" });
      rect.addEventListener("mousemove", (ev) => {
        const e = ev as MouseEvent;
        showTip(e.pageX, e.pageY, h("div", null, h("div", { class: "tip-title" }, `${r.label} \u00b7 ${r.direction}`),
          `${side === "base" ? "baseline" : "new"}: ${fmt.time(v)}`));
      });
      rect.addEventListener("mouseleave", hideTip);
      svg.appendChild(rect);
      svg.appendChild(s("text", { x: LW + w + 6, y: y + dy + BH - 1, class: "bar-label" }, `${side === "base" ? "base" : "new"} ${fmt.time(v)}`));
    }
  });
  return svg;
}

function table(d: CompareResponse): HTMLElement {
  const thead = h("thead", null,
    h("tr", null,
      h("th", { scope: "col", rowspan: 2 }, "Operation"),
      h("th", { scope: "colgroup", colspan: 4, class: "side-base" }, "Baseline"),
      h("th", { scope: "colgroup", colspan: 4, class: "side-new" }, "New"),
      h("th", { scope: "col", rowspan: 2, class: "num" }, "\u0394 time")),
    h("tr", null,
      ...["GPU time", "Bottleneck", "Memory", "Compute", "GPU time", "Bottleneck", "Memory", "Compute"].map((t, i) =>
        h("th", { scope: "col", class: `${i % 4 === 1 ? "" : "num"} ${i < 4 ? "side-base" : "side-new"}`,
          title: i % 4 === 0 ? "the sum of the phase's kernel durations" : i % 4 === 2 ? "memory-bandwidth utilisation" : i % 4 === 3 ? "compute utilisation" : null }, t))));
  const tbody = h("tbody");
  for (const dir of ["forward", "backward"]) {
    const rows = d.phases.filter((r) => r.direction === dir);
    if (!rows.length) continue;
    tbody.appendChild(h("tr", { class: "group" }, h("th", { scope: "rowgroup", colspan: 10 }, dir === "forward" ? "Forward" : "Backward")));
    for (const r of rows) {
      const side = (x: CompareRow["base"]) => x
        ? [h("td", { class: "num" }, fmt.time(x.time_us)), h("td", { class: "cbound" }, boundPill(x.bound, null, x.latency_cause, true), estBadge(x.estimated)),
          h("td", { class: "num" }, utilCell(x.memory_util, x.estimated)), h("td", { class: "num" }, utilCell(x.compute_util, x.estimated))]
        : [h("td", { class: "num muted", colspan: 4 }, "not present")];
      tbody.appendChild(h("tr", { "data-phase": r.phase, "data-direction": r.direction },
        h("th", { scope: "row" }, phaseTag(r.phase, r.label)), ...side(r.base), ...side(r.new), deltaCell(r.delta, r.speedup)));
    }
  }
  return h("div", { class: "table-wrap" }, h("table", { class: "data compare-table", id: "compare-table" },
    h("caption", { class: "sr-only" }, "per-phase comparison"), thead, tbody));
}

function totals(d: CompareResponse): HTMLElement {
  const tbody = h("tbody");
  for (const [k, label] of TOTAL_ROWS) {
    const t = d.totals[k];
    if (!t) continue;
    tbody.appendChild(h("tr", null, h("th", { scope: "row" }, label), h("td", { class: "num" }, fmt.time(t.base)),
      h("td", { class: "num" }, fmt.time(t.new)), deltaCell(t.delta, t.speedup)));
  }
  const sh = d.totals["attention_share"];
  if (sh) tbody.appendChild(h("tr", null, h("th", { scope: "row" }, "attention share of compute busy time"),
    h("td", { class: "num" }, fmt.pct(sh.base)), h("td", { class: "num" }, fmt.pct(sh.new)), h("td", { class: "num" }, "")));
  return h("div", { class: "table-wrap" }, h("table", { class: "data totals-table", id: "compare-totals" },
    h("thead", null, h("tr", null, h("th", { scope: "col" }, ""), h("th", { scope: "col", class: "num" }, "Baseline"),
      h("th", { scope: "col", class: "num" }, "New"), h("th", { scope: "col", class: "num" }, "\u0394"))), tbody));
}

function backends(side: CompareSideInfo | undefined): string | null {
  return side && side.backend ? side.backend : null;
}

function verdict(d: CompareResponse, b: Selection, n: Selection): HTMLElement | null {
  const v = d.verdict;
  if (!v) return null;
  const cls = v.faster === "new" ? "better" : v.faster === "base" ? "worse" : "";
  const bb = backends(d.base);
  const nb = backends(d.new);
  return h("div", { class: `verdict ${cls}`, id: "compare-verdict", role: "status" },
    h("div", { class: "verdict-line" }, v.summary),
    h("div", { class: "muted small" }, `baseline ${label(b)}${bb ? ` (${bb})` : ""} \u00b7 new ${label(n)}${nb ? ` (${nb})` : ""}`,
      d.normalization ? ` \u00b7 ${d.normalization.mode === "per_step" ? `per step (${d.normalization.base_steps} vs ${d.normalization.new_steps} steps)` : "totals"}` : ""));
}

function sectionsTable(d: CompareResponse): HTMLElement | null {
  const rows = d.sections || [];
  if (!rows.length) return null;
  const impl = (x: { implementation?: string } | null) => x && x.implementation ? h("span", { class: `badge impl-${x.implementation}` }, x.implementation) : null;
  const tbody = h("tbody");
  for (const r of rows) {
    tbody.appendChild(h("tr", { "data-section": r.section, "data-direction": r.direction },
      h("th", { scope: "row" }, h("div", null, `${r.label} \u00b7 ${r.direction === "forward" ? "fwd" : "bwd"}`),
        h("div", { class: "muted small" }, r.summary)),
      h("td", { class: "num" }, r.base ? fmt.time(r.base.time_us) : fmt.DASH, impl(r.base),
        r.base ? h("div", { class: "muted small" }, `${fmt.count(r.base.kernels)} kernels`) : null),
      h("td", { class: "num" }, r.new ? fmt.time(r.new.time_us) : fmt.DASH, impl(r.new),
        r.new ? h("div", { class: "muted small" }, `${fmt.count(r.new.kernels)} kernels`) : null),
      deltaCell(r.delta, r.speedup)));
  }
  return h("div", { class: "table-wrap" }, h("table", { class: "data sections-table", id: "compare-sections" },
    h("caption", { class: "sr-only" }, "the same work matched across implementations"),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Work"), h("th", { scope: "col", class: "num" }, "Baseline"),
      h("th", { scope: "col", class: "num" }, "New"), h("th", { scope: "col", class: "num" }, "\u0394"))), tbody));
}

function groupsTable(d: CompareResponse): HTMLElement | null {
  const rows = d.kernel_groups || [];
  if (!rows.length) return null;
  const side = (x: CompareGroupSide | null) =>
    x ? [fmt.time(x.time_us), x.calls !== null ? h("div", { class: "muted small" }, `${fmt.count(x.calls)} calls`) : null] : [fmt.DASH];
  const tbody = h("tbody");
  for (const g of rows) {
    const names = (g.base?.names || []).concat(g.new?.names || []);
    tbody.appendChild(h("tr", { "data-group": g.group },
      h("th", { scope: "row" }, h("div", { class: "mono ellipsis", title: names.join("\n") || g.group }, g.group),
        h("div", { class: "small" }, phaseTag(g.phase, `${g.label} \u00b7 ${g.direction === "forward" ? "fwd" : "bwd"}`))),
      h("td", { class: "num" }, ...side(g.base)),
      h("td", { class: "num" }, ...side(g.new)),
      deltaCell(g.delta, g.speedup)));
  }
  return h("div", { class: "table-wrap" }, h("table", { class: "data groups-table", id: "compare-groups" },
    h("caption", { class: "sr-only" }, "kernel groups"),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Kernel group"), h("th", { scope: "col", class: "num" }, "Baseline"),
      h("th", { scope: "col", class: "num" }, "New"), h("th", { scope: "col", class: "num" }, "\u0394"))), tbody));
}

function adviceDiff(d: CompareResponse): HTMLElement | null {
  const a = d.advice;
  if (!a) return null;
  const byId = (list: typeof a.base, id: string) => list.find((x) => x.id === id);
  const item = (x: { id: string; title: string; estimated_gain_us: number | null } | undefined, id: string) =>
    h("li", { "data-advice": id }, x ? x.title : id,
      x && x.estimated_gain_us ? h("span", { class: "muted" }, ` (${fmt.est(fmt.time(x.estimated_gain_us), true)} at stake)`) : null);
  const both = a.new.filter((x) => !a.only_new.includes(x.id));
  const block = (title: string, cls: string, items: HTMLElement[], empty: string) =>
    h("div", { class: `advice-diff-col ${cls}` }, h("div", { class: "side-title" }, title),
      items.length ? h("ul", null, items) : h("p", { class: "muted small" }, empty));
  return h("div", { class: "advice-diff", id: "compare-advice" },
    block("Fixed in the new run", "fixed", a.only_base.map((id) => item(byId(a.base, id), id)), "nothing the baseline was advised is gone"),
    block("New in the new run", "new", a.only_new.map((id) => item(byId(a.new, id), id)), "no new finding"),
    block("In both", "both", both.map((x) => item(x, x.id)), "none"));
}

export class CompareView {
  readonly el = h("div", { class: "compare", id: "compare-view" });
  private pickers = h("div", { class: "compare-pickers card" });
  private out = h("div", { class: "compare-out" });
  private seq = 0;
  base: Selection | null = null;
  next: Selection | null = null;

  /** Starts from the run being viewed (``current``) as the baseline, against the next run with
   * the most attention time; a pair from the URL wins. */
  constructor(private runs: RunsResponse, current: Selection | null, pair: { base?: Selection; next?: Selection },
    private onChange: (base: Selection, next: Selection) => void = () => undefined) {
    this.el.append(this.pickers, this.out);
    this.base = resolve(runs, pair.base || current);
    if (pair.next) this.next = resolve(runs, pair.next);
    else {
      // the sibling run: the longest common name prefix (llama_eager -> llama_sdpa), then the most attention time
      const me = this.base?.run || "";
      const common = (x: string) => { let i = 0; while (i < x.length && i < me.length && x[i] === me[i]) i++; return i; };
      const others = runs.runs.filter((r) => r.run !== me);
      others.sort((a, b) => common(b.run) - common(a.run) || runAttention(b) - runAttention(a));
      this.next = resolve(runs, null, others[0]?.run ?? this.base?.run);
    }
    this.update(runs);
  }

  update(runs: RunsResponse): void {
    this.runs = runs;
    if (!runs.runs.length) {
      replace(this.pickers);
      replace(this.out, states.noTraces(runs));
      return;
    }
    const b = resolve(runs, this.base);
    const n = resolve(runs, this.next);
    const changed = JSON.stringify(b) !== JSON.stringify(this.base) || JSON.stringify(n) !== JSON.stringify(this.next) || !this.out.childNodes.length;
    this.base = b;
    this.next = n;
    this.renderPickers();
    if (changed) void this.load();
  }

  private renderPickers(): void {
    if (!this.base || !this.next) return;
    replace(this.pickers,
      h("div", { class: "side" }, h("div", { class: "side-title side-base" }, "Baseline"),
        picker(this.runs, this.base, (s) => { this.base = resolve(this.runs, s); this.renderPickers(); void this.load(); }, "base")),
      h("div", { class: "side" }, h("div", { class: "side-title side-new" }, "New"),
        picker(this.runs, this.next, (s) => { this.next = resolve(this.runs, s); this.renderPickers(); void this.load(); }, "new")));
  }

  private async load(): Promise<void> {
    const my = ++this.seq;
    if (!this.base || !this.next) return;
    const b = this.base;
    const n = this.next;
    this.onChange(b, n);
    try {
      const r = await untilReady(() => api.compare(b, n), (p) => {
        if (p.kind === "pending") replace(this.out, states.pending(p.state, p.message, null));
      }, () => my === this.seq);
      if (!r || my !== this.seq) return;
      if (r.kind === "failed") {
        replace(this.out, states.failed(r.message, null));
        return;
      }
      if (r.kind !== "ready") return;
      const d = r.data;
      const devNote = d.devices.base && d.devices.new ? `${d.devices.base.label} vs ${d.devices.new.label}` : "";
      const sections = sectionsTable(d);
      const groups = groupsTable(d);
      const adv = adviceDiff(d);
      replace(this.out,
        verdict(d, b, n),
        d.notes.length ? h("div", { class: "notices" }, d.notes.map((t) => h("div", { class: "note note-warn", role: "status" }, t))) : null,
        section("Totals", "compare-totals-section", h("p", { class: "section-help" }, `${label(b)} (baseline) vs ${label(n)} (new). ${devNote}`), totals(d)),
        sections ? section("Matched work", "compare-matched", h("p", { class: "section-help" },
          "The same work in both runs, whatever kernels implement it: core attention (one fused kernel, or QK\u1d40 + scale + mask + softmax + dropout + PV), the projections, the rest."), sections) : null,
        adv ? section("Advice", "compare-advice-section", h("p", { class: "section-help" }, "Findings of each run: what the change fixed, what is new."), adv) : null,
        section("Per phase", "compare-phases", chart(d.phases), table(d)),
        groups ? section("Kernel groups", "compare-groups-section", h("p", { class: "section-help" },
          "Attention kernels grouped by name without tile and template parameters, per phase and direction; the longest first."), groups) : null);
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.out, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }
}

function runAttention(r: RunsResponse["runs"][number]): number {
  return Math.max(0, ...r.files.map((f) => f.attention_time_us || 0));
}

function label(sel: Selection): string {
  return `${sel.run}${sel.step ? ` ${sel.step}` : ""}`;
}
