// The Ranks view: a run of many workers (one trace per rank) as one job — attention time per rank
// (stragglers marked), a rank × phase heatmap, the spread, communication beside attention, and two
// ranks compared. Data: the plugin's /ranks route (summaries kept with the report cache), so a
// 1024-rank job draws without opening any report; a rank opens in the trace view on click.

import "./ranks.css";
import { url } from "../api";
import { PHASE_ORDER, phaseLabel } from "../colors";
import { h, replace, s } from "../dom";
import * as fmt from "../format";
import type { RunsResponse, Selection } from "../types";
import { hideTip, section, showTip } from "../widgets";
import * as states from "./states";

type Phases = Record<string, Record<string, number>>;

export interface RankRow {
  rank: number | null;
  worker: string;
  span: string | null;
  file: string;
  path: string;
  device: string | null;
  attention_time_us: number;
  compute_busy_us: number | null;
  attention_share: number | null;
  phases: Phases;
  communication_us: number | null;
  communication: { busy_us: number | null; overlap_with_attention_us: number | null; kernels: number } | null;
}

export interface Straggler {
  rank: number | null;
  worker: string;
  file: string;
  attention_time_us: number;
  excess_us: number;
  excess_pct: number;
  phases: Record<string, Record<string, { time_us: number; median_us: number; excess_us: number; share_of_excess: number }>>;
}

export interface RanksResponse {
  state: "ready" | "partial";
  run: string;
  files: number;
  pending_count: number;
  ranks: RankRow[];
  stragglers: Straggler[];
  spread: { ranks: number; median_us: number | null; p90_us: number | null; max_us: number | null;
    max_over_median: number | null; threshold_us: number | null; communication_median_us: number | null };
  rule: { text: string; min_ranks: number };
  errors: { file: string; error: string }[];
  duplicate_ranks: number[];
  job: boolean;
  job_reason: string;
}

/** Runs whose traces state at least two distinct ranks (the server's ``job``, ranks/job.py): the
 * ones the Ranks view is for. Several traces of one rank (an eager trace beside its CUDA-graph
 * twin, a script profiled twice) are not a job. */
export function multiRankRuns(runs: RunsResponse): string[] {
  return runs.runs.filter((r) => r.job).map((r) => r.run);
}

const DIR_SHORT: Record<string, string> = { forward: "fwd", backward: "bwd" };
const TABLE_ROWS = 128;
const rankName = (r: { rank: number | null; worker: string }) => (r.rank === null ? r.worker : `rank ${r.rank}`);
const keyOf = (r: { file: string }) => r.file;

async function fetchRanks(run: string, signal?: AbortSignal): Promise<RanksResponse> {
  const r = await fetch(url("ranks", { run }), { credentials: "same-origin", signal, headers: { Accept: "application/json" } });
  const body = await r.json().catch(() => null);
  if (!r.ok || !body) throw new Error((body && body.error) || `HTTP ${r.status}`);
  return body as RanksResponse;
}

function phaseKeys(rows: RankRow[]): [string, string][] {
  const seen = new Set<string>();
  for (const r of rows) for (const [d, ps] of Object.entries(r.phases || {})) for (const p of Object.keys(ps)) seen.add(`${d}\u0000${p}`);
  const order = (k: string) => {
    const [d, p] = k.split("\u0000");
    return (d === "forward" ? 0 : 100) + (PHASE_ORDER.indexOf(p) + 1 || 99);
  };
  return [...seen].sort((a, b) => order(a) - order(b)).map((k) => k.split("\u0000") as [string, string]);
}

function median(xs: number[]): number {
  if (!xs.length) return 0;
  const v = [...xs].sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/** Attention per rank above, communication per rank below, each on its own scale: communication
 * (a gloo all-reduce, waits for other ranks) is often many times attention, and on one axis it
 * squashed the attention bars flat. */
function barChart(d: RanksResponse, flagged: Set<string>, open: (r: RankRow) => void): SVGElement {
  const rows = d.ranks;
  const comm = rows.some((r) => (r.communication_us || 0) > 0);
  const W = 1000, L = 78, B = 26, T = 8, PH = 150, CH = comm ? 70 : 0, GAP = comm ? 26 : 0;
  const H = T + PH + GAP + CH + B;
  const maxA = Math.max(1e-9, ...rows.map((r) => r.attention_time_us || 0), d.spread.threshold_us || 0);
  const maxC = Math.max(1e-9, ...rows.map((r) => r.communication_us || 0));
  const ya = (v: number) => T + PH * (1 - v / maxA);
  const c0 = T + PH + GAP;
  const yc = (v: number) => c0 + CH * (1 - v / maxC);
  const slot = (W - L - 8) / Math.max(rows.length, 1);
  const bw = Math.max(Math.min(slot * 0.7, 60), 0.4);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart rank-chart", id: "rank-chart", role: "img",
    "aria-label": `attention and communication time of ${rows.length} ranks, in rank order, each on its own scale; ${d.stragglers.length} straggler(s)` });
  for (const f of [0, 0.5, 1]) {
    svg.appendChild(s("line", { x1: L, x2: W - 8, y1: ya(maxA * f), y2: ya(maxA * f), class: "grid" }));
    svg.appendChild(s("text", { x: L - 6, y: ya(maxA * f) + 4, class: "axis-label", "text-anchor": "end" }, fmt.time(maxA * f)));
  }
  for (const f of comm ? [0, 1] : []) {
    svg.appendChild(s("line", { x1: L, x2: W - 8, y1: yc(maxC * f), y2: yc(maxC * f), class: "grid" }));
    svg.appendChild(s("text", { x: L - 6, y: yc(maxC * f) + 4, class: "axis-label", "text-anchor": "end" }, fmt.time(maxC * f)));
  }
  svg.appendChild(s("text", { x: L + 4, y: T + 10, class: "axis-title panel-title" }, "attention"));
  if (comm) svg.appendChild(s("text", { x: L + 4, y: c0 - 6, class: "axis-title panel-title" }, "communication"));
  rows.forEach((r, i) => {
    const x = L + i * slot + (slot - bw) / 2;
    const straggler = flagged.has(keyOf(r));
    svg.appendChild(s("rect", { x, y: ya(r.attention_time_us || 0), width: bw,
      height: Math.max(0, T + PH - ya(r.attention_time_us || 0)), class: `bar-att${straggler ? " straggler" : ""}`,
      "data-i": i, "data-rank": r.rank ?? "", "data-straggler": straggler ? "1" : "0" }));
    if (comm) {
      svg.appendChild(s("rect", { x, y: yc(r.communication_us || 0), width: bw,
        height: Math.max(0, c0 + CH - yc(r.communication_us || 0)), class: "bar-comm", "data-i": i }));
    }
  });
  // one set of listeners for all bars (a 1024-rank job has 2048 of them)
  delegate(svg, (i) => {
    const r = rows[i];
    return h("div", null, h("div", { class: "tip-title" }, `${rankName(r)} \u00b7 ${r.worker}`),
      h("div", null, `attention ${fmt.time(r.attention_time_us)} (${fmt.pct(r.attention_share)} of compute busy)`),
      h("div", null, `communication ${fmt.time(r.communication_us)}`),
      flagged.has(keyOf(r)) ? h("div", { class: "badge-straggler" }, "straggler") : null,
      h("div", { class: "muted" }, "click: open this rank's trace"));
  }, (i) => open(rows[i]));
  if (d.spread.median_us) svg.appendChild(s("line", { x1: L, x2: W - 8, y1: ya(d.spread.median_us), y2: ya(d.spread.median_us), class: "median-line" }));
  if (d.spread.threshold_us) svg.appendChild(s("line", { x1: L, x2: W - 8, y1: ya(d.spread.threshold_us), y2: ya(d.spread.threshold_us), class: "threshold-line" }));
  rankAxis(svg, rows, L, slot, H - 8);
  return svg;
}

/** Rank numbers under a chart's columns (at most ~16 labels: every n-th rank on a big job). */
function rankAxis(svg: SVGElement, rows: RankRow[], L: number, slot: number, y: number): void {
  const step = Math.max(1, Math.ceil(rows.length / 16));
  rows.forEach((r, i) => {
    if (i % step === 0) svg.appendChild(s("text", { x: L + (i + 0.5) * slot, y, class: "axis-label rank-label", "text-anchor": "middle" }, r.rank ?? "?"));
  });
  svg.appendChild(s("text", { x: L - 6, y, class: "axis-label", "text-anchor": "end" }, "rank"));
}

function heatmap(d: RanksResponse, keys: [string, string][], open: (r: RankRow) => void): SVGElement {
  const rows = d.ranks;
  const W = 1000, L = 190, RH = 18, T = 4, B = 22;
  const H = T + keys.length * RH + 6 + B;
  const slot = (W - L - 8) / Math.max(rows.length, 1);
  const meds = keys.map(([dir, p]) => median(rows.map((r) => r.phases?.[dir]?.[p] || 0)));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart heat-chart", id: "rank-heatmap", role: "img",
    "aria-label": "time of each phase on each rank relative to the phase's median over the ranks" });
  keys.forEach(([dir, p], j) => {
    const yy = T + j * RH;
    svg.appendChild(s("text", { x: L - 8, y: yy + RH - 5, class: "row-label", "text-anchor": "end" }, `${phaseLabel(p)} \u00b7 ${DIR_SHORT[dir] || dir}`));
    rows.forEach((r, i) => {
      const v = r.phases?.[dir]?.[p] || 0;
      const ratio = meds[j] > 0 ? v / meds[j] : v > 0 ? 2 : 1;
      // within 1 % of the median: neutral grey; slower: red, full at 1.5x; faster: blue, full at 0.5x
      const t = Math.max(-1, Math.min(1, (ratio - 1) / 0.5));
      const color = Math.abs(t) < 0.02 ? "rgba(140, 149, 159, 0.15)"
        : t > 0 ? `rgba(207, 34, 46, ${0.1 + 0.85 * t})` : `rgba(9, 105, 218, ${0.1 + 0.85 * -t})`;
      svg.appendChild(s("rect", { x: L + i * slot, y: yy, width: Math.max(slot - (slot > 3 ? 1 : 0), 0.4), height: RH - 2,
        fill: color, class: "cell", "data-i": i + j * rows.length }));
    });
  });
  rankAxis(svg, rows, L, slot, H - 6);
  delegate(svg, (k) => {
    const i = k % rows.length;
    const j = Math.floor(k / rows.length);
    const [dir, p] = keys[j];
    const r = rows[i];
    const v = r.phases?.[dir]?.[p] || 0;
    const ratio = meds[j] > 0 ? v / meds[j] : null;
    return h("div", null, h("div", { class: "tip-title" }, `${rankName(r)} \u00b7 ${phaseLabel(p)} ${DIR_SHORT[dir] || dir}`),
      `${fmt.time(v)}${ratio === null ? "" : ` (${fmt.ratio(ratio)} the median ${fmt.time(meds[j])})`}`);
  }, (k) => open(rows[k % rows.length]));
  return svg;
}

/** Tooltip and click for the rects of a chart that carry ``data-i``: one listener per chart. */
function delegate(svg: SVGElement, tip: (i: number) => HTMLElement, click: (i: number) => void): void {
  const index = (ev: Event): number | null => {
    const v = (ev.target as Element | null)?.getAttribute?.("data-i");
    return v === null || v === undefined ? null : Number(v);
  };
  svg.addEventListener("mousemove", (ev) => {
    const i = index(ev);
    if (i === null) { hideTip(); return; }
    const e = ev as MouseEvent;
    showTip(e.pageX, e.pageY, tip(i));
  });
  svg.addEventListener("mouseleave", hideTip);
  svg.addEventListener("click", (ev) => {
    const i = index(ev);
    if (i !== null) { hideTip(); click(i); }
  });
}

function stat(k: string, v: string): HTMLElement {
  return h("div", { class: "stat" }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));
}

function spreadCard(d: RanksResponse): HTMLElement {
  const sp = d.spread;
  const list = d.stragglers.length
    ? h("ul", { id: "straggler-list" }, d.stragglers.map((st) => h("li", null, h("strong", null, rankName(st)), ` (${st.worker}): ${fmt.time(st.attention_time_us)}, +${st.excess_pct.toFixed(1)} % over the median \u2014 `,
      Object.entries(st.phases).flatMap(([dir, ps]) => Object.entries(ps).map(([p, x]) => `${phaseLabel(p)} ${DIR_SHORT[dir] || dir} +${fmt.time(x.excess_us)} (${(100 * x.share_of_excess).toFixed(0)} %)`)).join(", ") || "no single phase stands out")))
    : h("p", { class: "muted", id: "straggler-list" }, sp.ranks < d.rule.min_ranks ? `Stragglers are not judged with fewer than ${d.rule.min_ranks} ranks.` : "No straggler.");
  return section("Spread over ranks", "ranks-spread-section",
    h("div", { class: "ranks-spread" },
      stat("ranks", String(sp.ranks)), stat("median attention", fmt.time(sp.median_us)), stat("p90", fmt.time(sp.p90_us)),
      stat("max", fmt.time(sp.max_us)), stat("max / median", sp.max_over_median ? `${sp.max_over_median.toFixed(2)}\u00d7` : fmt.DASH),
      stat("median communication", fmt.time(sp.communication_median_us)), stat("stragglers", String(d.stragglers.length))),
    h("p", { class: "section-help" }, `A straggler: ${d.rule.text}. Each lists the phases that explain its excess over the median.`),
    list,
    d.duplicate_ranks.length ? h("p", { class: "muted", id: "duplicate-ranks" }, `Several traces for rank(s) ${d.duplicate_ranks.slice(0, 20).join(", ")} (several profiling windows?); each is shown.`) : null,
    d.errors.length ? h("div", { class: "note note-error" }, h("div", { class: "note-title" }, `${d.errors.length} trace(s) failed`),
      h("ul", null, d.errors.slice(0, 20).map((e) => h("li", null, h("code", null, e.file), `: ${e.error}`)))) : null);
}

function compareTable(a: RankRow, b: RankRow, keys: [string, string][]): HTMLElement {
  const tbody = h("tbody");
  const row = (label: string, va: number | null, vb: number | null) => {
    const dlt = va !== null && vb !== null ? vb - va : null;
    tbody.appendChild(h("tr", null, h("th", { scope: "row" }, label), h("td", { class: "num" }, fmt.time(va)), h("td", { class: "num" }, fmt.time(vb)),
      h("td", { class: `num ${dlt === null || Math.abs(dlt) < 1e-9 ? "" : dlt < 0 ? "better" : "worse"}` }, fmt.signedTime(dlt))));
  };
  row("attention", a.attention_time_us, b.attention_time_us);
  row("compute busy", a.compute_busy_us, b.compute_busy_us);
  row("communication", a.communication_us, b.communication_us);
  for (const [dir, p] of keys) row(`${phaseLabel(p)} \u00b7 ${DIR_SHORT[dir] || dir}`, a.phases?.[dir]?.[p] ?? 0, b.phases?.[dir]?.[p] ?? 0);
  return h("div", { class: "table-wrap" }, h("table", { class: "data ranks-compare", id: "ranks-compare-table" },
    h("thead", null, h("tr", null, h("th", { scope: "col" }, ""), h("th", { scope: "col", class: "num" }, rankName(a)),
      h("th", { scope: "col", class: "num" }, rankName(b)), h("th", { scope: "col", class: "num" }, "\u0394"))), tbody));
}

export class RanksView {
  readonly el = h("div", { class: "ranks", id: "ranks-view" });
  private head = h("div", { class: "card ranks-pick" });
  private out = h("div", { class: "ranks-out" });
  private run: string | null = null;
  private seq = 0;
  private timer: number | undefined;
  private cmp: [string | null, string | null] = [null, null];

  private asked: string | null;       // the run the view was opened from, when it is not a job: said so, not swapped

  constructor(runs: RunsResponse, private open: (sel: Selection) => void, run?: string,
    private onPickRun: (run: string) => void = () => undefined) {
    this.el.append(this.head, this.out);
    this.asked = run && !multiRankRuns(runs).includes(run) ? run : null;
    this.update(runs, run);
  }

  update(runs: RunsResponse, want?: string): void {
    const multi = multiRankRuns(runs);
    if (this.asked !== null && !this.run) {
      const r = runs.runs.find((x) => x.run === this.asked);
      if (r && !r.job) {
        this.notAJob(r.run, r.job_reason, r.workers.length, multi);
        return;
      }
      this.asked = null;       // it became a job (its ranks were read)
    }
    const run = want && multi.includes(want) ? want : this.run && multi.includes(this.run) ? this.run : multi[0] || null;
    const counts = JSON.stringify(runs.runs.find((r) => r.run === run)?.counts || {});
    const changed = run !== this.run || counts !== this.el.dataset.counts;
    this.el.dataset.counts = counts;
    if (run !== this.run) this.cmp = [null, null];
    this.run = run;
    this.renderHead(multi);
    if (!run) {
      replace(this.out, h("div", { class: "card" }, h("p", { class: "muted" }, "No run here has several workers (ranks). The Ranks view compares the traces of one multi-GPU job: one file per rank in one directory.")));
      return;
    }
    if (changed) void this.load();
  }

  /** Opened from a run that is not a job: say which run and why, offer the jobs there are. */
  private notAJob(run: string, reason: string, workers: number, multi: string[]): void {
    this.head.hidden = true;
    const pick = multi.map((m) => {
      const b = h("button", { type: "button", class: "btn", "data-run": m, title: m }, `Open ${fmt.runLabel(m)}`);
      b.addEventListener("click", () => {
        this.asked = null;
        this.run = m;
        this.onPickRun(m);
        this.renderHead(multi);
        void this.load();
      });
      return b;
    });
    replace(this.out, h("div", { class: "card", id: "ranks-not-a-job" },
      h("h2", null, `\u201c${run === "." ? "(log directory)" : run}\u201d is not a job of several ranks`),
      h("p", null, workers > 1 ? `Its ${workers} traces: ${reason}.` : "It holds one trace."),
      h("p", { class: "muted" }, "The Ranks view compares the ranks of one multi-GPU job: one trace per rank in one directory, each stating its rank (torch.distributed's distributedInfo, or rank<N> in the file name)."),
      multi.length ? h("p", null, "Jobs in this log directory: ", pick) : h("p", { class: "muted" }, "No run in this log directory is a job of several ranks.")));
  }

  destroy(): void {
    window.clearTimeout(this.timer);
    this.seq++;
  }

  private renderHead(multi: string[]): void {
    this.head.hidden = false;
    const sel = h("select", { id: "ranks-run", disabled: multi.length <= 1 });
    for (const r of multi) sel.appendChild(h("option", { value: r, title: r }, fmt.runLabel(r)));
    if (this.run) sel.value = this.run;
    sel.addEventListener("change", () => { this.run = sel.value; this.cmp = [null, null]; void this.load(); });
    replace(this.head, h("label", { class: "field", for: "ranks-run" }, h("span", { class: "field-label" }, "Run"), sel));
  }

  private openRank(r: RankRow): void {
    if (this.run === null) return;
    this.open({ run: this.run, worker: r.worker, span: r.span, file: r.file, step: null });
  }

  private async load(): Promise<void> {
    const my = ++this.seq;
    window.clearTimeout(this.timer);
    const run = this.run;
    if (run === null) return;
    try {
      const d = await fetchRanks(run);
      if (my !== this.seq) return;
      this.render(d);
      if (d.state === "partial") this.timer = window.setTimeout(() => { if (my === this.seq) void this.load(); }, 1500);
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.out, states.apiError(e instanceof Error ? e.message : String(e)));
    }
  }

  private render(d: RanksResponse): void {
    const flagged = new Set(d.stragglers.map((st) => st.file));
    const keys = phaseKeys(d.ranks);
    const open = (r: RankRow) => this.openRank(r);
    const partial = d.state === "partial"
      ? h("div", { class: "note", role: "status", id: "ranks-partial" }, `${d.ranks.length + d.errors.length} of ${d.files} traces summarised; the rest are being analysed (tb-attention summarize LOGDIR does it ahead of time).`)
      : null;
    if (!d.ranks.length) {
      replace(this.out, partial, d.errors.length ? spreadCard(d) : states.pending("loading", "Summarising the ranks", null));
      return;
    }
    replace(this.out, partial, spreadCard(d),
      section("Attention per rank", "ranks-bars", h("p", { class: "section-help" }, "Attention time of each rank in rank order, and below it (on its own scale) communication; dashed: the median, dotted red: the straggler threshold. Click a rank to open its trace."),
        h("div", { class: "rank-legend" }, h("span", null, h("span", { class: "sw", style: "background:#9c6ade" }), "attention"),
          h("span", null, h("span", { class: "sw", style: "background:#cf222e" }), "straggler"), h("span", null, h("span", { class: "sw", style: "background:#8c959f" }), "communication")),
        barChart(d, flagged, open)),
      keys.length ? section("Phases per rank", "ranks-heat", h("p", { class: "section-help" }, "Each cell: a phase on a rank, against that phase's median over the ranks (grey: within 1 % of the median; red: slower, full at 1.5\u00d7; blue: faster, full at 0.5\u00d7)."), heatmap(d, keys, open)) : null,
      this.compareSection(d, keys, flagged),
      this.table(d, flagged));
  }

  private compareSection(d: RanksResponse, keys: [string, string][], flagged: Set<string>): HTMLElement {
    const rows = d.ranks;
    const byKey = new Map(rows.map((r) => [keyOf(r), r]));
    const med = median(rows.map((r) => r.attention_time_us));
    const typical = [...rows].sort((a, b) => Math.abs(a.attention_time_us - med) - Math.abs(b.attention_time_us - med))[0];
    const worst = rows.find((r) => flagged.has(keyOf(r))) || [...rows].sort((a, b) => b.attention_time_us - a.attention_time_us)[0];
    let a = (this.cmp[0] && byKey.get(this.cmp[0])) || typical;
    let b = (this.cmp[1] && byKey.get(this.cmp[1])) || worst;
    // two ranks (or the slowest one nearest the median): never a rank against itself by default
    if (!this.cmp[0] && keyOf(a) === keyOf(b) && rows.length > 1) {
      a = [...rows].filter((r) => keyOf(r) !== keyOf(b))
        .sort((x, y) => Math.abs(x.attention_time_us - med) - Math.abs(y.attention_time_us - med))[0];
    }
    const body = h("div");
    const mk = (id: string, label: string, cur: RankRow, set: (r: RankRow) => void) => {
      const sel = h("select", { id });
      for (const r of rows) sel.appendChild(h("option", { value: keyOf(r) }, `${rankName(r)}${flagged.has(keyOf(r)) ? " (straggler)" : ""}`));
      sel.value = keyOf(cur);
      sel.addEventListener("change", () => { const r = byKey.get(sel.value); if (r) set(r); });
      return h("label", { class: "field", for: id }, h("span", { class: "field-label" }, label), sel);
    };
    const draw = () => {
      this.cmp = [keyOf(a), keyOf(b)];
      replace(body, compareTable(a, b, keys));
    };
    const pick = h("div", { class: "ranks-compare-pick" },
      mk("ranks-cmp-a", "Rank", a, (r) => { a = r; draw(); }), mk("ranks-cmp-b", "against", b, (r) => { b = r; draw(); }));
    draw();
    return section("Compare two ranks", "ranks-compare-section", pick, body);
  }

  private table(d: RanksResponse, flagged: Set<string>, all = false): HTMLElement {
    const tbody = h("tbody");
    // a long job: the first TABLE_ROWS ranks and the stragglers, the rest on demand
    const shown = all || d.ranks.length <= TABLE_ROWS ? d.ranks
      : d.ranks.filter((r, i) => i < TABLE_ROWS || flagged.has(keyOf(r)));
    for (const r of shown) {
      const st = flagged.has(keyOf(r));
      const btn = h("button", { type: "button", class: "btn", "data-rank": r.rank ?? "" }, "Open");
      btn.addEventListener("click", () => this.openRank(r));
      tbody.appendChild(h("tr", { class: st ? "straggler" : null, "data-rank": r.rank ?? "" },
        h("th", { scope: "row" }, r.rank ?? "?"), h("td", { class: "worker" }, h("div", { class: "ellipsis", title: r.worker }, r.worker)),
        h("td", { class: "num" }, fmt.time(r.attention_time_us)),
        h("td", { class: "num" }, fmt.time(r.compute_busy_us)), h("td", { class: "num" }, fmt.pct(r.attention_share)),
        h("td", { class: "num" }, fmt.time(r.communication_us)), h("td", { class: "num" }, fmt.time(r.communication?.overlap_with_attention_us)),
        h("td", null, st ? h("span", { class: "badge-straggler" }, "straggler") : ""), h("td", null, btn)));
    }
    let more: HTMLElement | null = null;
    if (shown.length < d.ranks.length) {
      more = h("button", { type: "button", class: "btn", id: "ranks-show-all" }, `Show all ${d.ranks.length} ranks`);
      more.addEventListener("click", () => {
        const el = document.getElementById("ranks-table-section");
        el?.replaceWith(this.table(d, flagged, true));
      });
    }
    return section("Ranks", "ranks-table-section", h("div", { class: "table-wrap" }, h("table", { class: "data ranks-table", id: "ranks-table" },
      h("thead", null, h("tr", null, ...["Rank", "Worker", "Attention", "Compute busy", "Share", "Comm.", "Comm. \u2229 attention", "", ""].map((t, i) =>
        h("th", { scope: "col", class: i >= 2 && i <= 6 ? "num" : null,
          title: i === 5 ? "communication time (NCCL/gloo kernels)" : i === 6 ? "communication overlapped with attention" : null }, t)))), tbody)),
      more ? h("p", { class: "muted" }, `${shown.length} of ${d.ranks.length} ranks shown (the first ${TABLE_ROWS} and the stragglers). `, more) : null);
  }
}
