// Runs overview: one row per run (its default trace), the landing page when a log directory holds
// several runs. Sorted by attention time per profiled step (the Trace view's default base), so the run worth a look comes first; a click opens it.

import { api, ApiError } from "../api";
import { BOUND_COLORS, BOUND_LABELS } from "../colors";
import { h, replace } from "../dom";
import * as fmt from "../format";
import type { OverviewJob, OverviewRow } from "../types";
import type { View } from "../state";
import { phaseTag, section } from "../widgets";
import { isStepBasis } from "./advice";
import * as states from "./states";

const BOUNDS = ["compute", "memory", "latency", "unknown"] as const;

function boundMix(r: OverviewRow): HTMLElement {
  const bt = r.bound_time_us;
  const total = bt ? BOUNDS.reduce((a, b) => a + (bt[b] || 0), 0) : 0;
  const bar = h("div", { class: "split mix", role: "img",
    "aria-label": bt ? BOUNDS.map((b) => `${b} ${fmt.time(bt[b])}`).join(", ") : "no attention" });
  if (bt && total > 0) {
    for (const b of BOUNDS) {
      if (!bt[b]) continue;
      const seg = h("span", { class: "split-seg", title: `${BOUND_LABELS[b]}: ${fmt.time(bt[b])} (${fmt.pct(bt[b] / total, 0)})` });
      seg.style.width = `${(bt[b] / total) * 100}%`;
      seg.style.background = BOUND_COLORS[b];
      bar.appendChild(seg);
    }
  }
  let top = "";
  if (bt && total > 0) {
    const best = BOUNDS.reduce((x, y) => ((bt[y] || 0) > (bt[x] || 0) ? y : x));
    top = `${fmt.pct(bt[best] / total, 0)} ${best}`;
  }
  return h("div", { class: "mix-cell" }, h("span", { class: "small" }, top || fmt.DASH), bar);
}

export type OpenRun = (run: string, opts?: { partial?: boolean; view?: View }) => void;

/** A job's line under its name: its ranks, and the stragglers the Ranks view's rule finds (the
 * row's figures are one rank's, the trace the Trace view opens). */
function jobLine(r: OverviewRow, j: OverviewJob, onOpen: OpenRun): HTMLElement {
  const ranks = h("button", { type: "button", class: "linkish ranks-link", "data-run": r.run, title: "open this job in the Ranks view" },
    `job of ${j.ranks} rank${j.ranks === 1 ? "" : "s"}`);
  ranks.addEventListener("click", () => onOpen(r.run, { view: "ranks" }));
  const st = j.stragglers;
  const mark = st.length
    ? h("span", { class: "badge straggler", "data-testid": "straggler", title: st.map((x) => `rank ${x.rank ?? "?"} (${x.worker}): +${x.excess_pct.toFixed(1)} % attention time over the median`).join("\n") },
      `straggler${st.length > 1 ? "s" : ""}: ${st.slice(0, 3).map((x) => `rank ${x.rank ?? "?"} +${x.excess_pct.toFixed(0)} %`).join(", ")}${st.length > 3 ? ` +${st.length - 3} more` : ""}`)
    : h("span", { class: "muted" }, j.state === "partial" ? " (ranks still loading)" : j.ranks < j.min_ranks ? "" : " \u00b7 no straggler");
  return h("div", { class: "small job-line", "data-testid": "job-line",
    title: "the row's figures are one rank's: the trace the Trace view opens (the first worker's); the Ranks view compares them all" },
  ranks, " ", mark);
}

/** A run's attention time per profiled step (the overview's per_step block, steps.per_step), else its total. */
export function attentionPerStep(r: OverviewRow): number | undefined {
  return r.per_step ? r.per_step.attention_time_us : r.attention_time_us;
}

/** The top finding's gain per step where the report has its per_step block, else over the trace (said). */
function topGain(a: NonNullable<OverviewRow["top_advice"]>): string {
  const step = isStepBasis(a);
  const ps = a.per_step;
  const per = ps ? (step ? ps.step_gain_us : ps.gpu_gain_us) : null;
  const what = step ? " of step time" : " of attention GPU time";
  return per !== null && per !== undefined ? ` (${fmt.est(fmt.time(per), true)}${what} per step)`
    : ` (${fmt.est(fmt.time(a.estimated_gain_us), true)}${what} over the trace)`;
}

export function runsTable(rows: OverviewRow[], onOpen: OpenRun): HTMLElement {
  const sorted = rows.slice().sort((a, b) => (attentionPerStep(b) ?? -1) - (attentionPerStep(a) ?? -1) || a.run.localeCompare(b.run));
  const tbody = h("tbody");
  for (const r of sorted) {
    const open = h("button", { type: "button", class: "linkish run-link", title: `open ${r.run} in the Trace view`, "data-run": r.run },
      fmt.runLabel(r.run));
    open.addEventListener("click", () => onOpen(r.run));
    const ready = r.state === "ready";
    let partial: HTMLElement | null = null;
    if (r.state === "incomplete") {
      partial = h("button", { type: "button", class: "btn small-btn", "data-run": r.run, "data-action": "partial",
        title: "analyse the events before the cut (marked partial)" }, "Show the events before the cut");
      partial.addEventListener("click", () => onOpen(r.run, { partial: true }));
    }
    const cut = (r.message || "the file ends early").replace(/\s*\(--allow-partial analyses the events before the cut\)\s*$/, "");
    tbody.appendChild(h("tr", { "data-run": r.run, class: r.job?.stragglers.length ? "has-straggler" : null },
      h("th", { scope: "row" }, h("div", { class: "ellipsis run-name" }, open),
        h("div", { class: "muted small ellipsis run-file", title: r.file }, `${fmt.runLabel(r.file)}${r.files > 1 ? ` (+${r.files - 1})` : ""}`),
        r.job ? jobLine(r, r.job, onOpen) : null),
      ready ? h("td", { class: "small" }, r.device || fmt.DASH) : h("td", { colspan: 6, class: "muted" },
        r.state === "error" ? `failed: ${r.message || ""}`
          : r.state === "incomplete" ? [h("span", { class: "badge warn" }, "incomplete"), ` ${cut} `, partial]
            : r.state === "summarized" ? "summarized (a job of many ranks: see its Ranks view; a rank's report loads when it is opened)"
            : `${r.state}\u2026`),
      ready ? h("td", { class: "num", title: r.per_step ? `total ${fmt.time(r.attention_time_us)} over ${fmt.count(r.steps ?? 0)} profiled step${r.steps === 1 ? "" : "s"}` : null },
        fmt.time(attentionPerStep(r))) : null,
      ready ? h("td", { class: "num" }, fmt.pct(r.attention_share)) : null,
      ready ? h("td", null, r.top_phase ? [phaseTag(r.top_phase.phase, `${r.top_phase.label} ${r.top_phase.direction === "backward" ? "bwd" : "fwd"}`),
        h("span", { class: "muted small nowrap" }, ` ${fmt.pct(r.top_phase.share, 0)}`)] : h("span", { class: "muted" }, fmt.DASH)) : null,
      ready ? h("td", null, boundMix(r)) : null,
      ready ? h("td", { class: "small" }, r.top_advice
        ? [h("span", { class: `badge sev sev-${r.top_advice.severity}` }, r.top_advice.severity), " ", r.top_advice.title,
          r.top_advice.estimated_gain_us ? h("span", { class: "muted" }, topGain(r.top_advice)) : null,
          (r.advice || 0) > 1 ? h("span", { class: "muted" }, ` +${(r.advice || 0) - 1} more`) : null]
        : h("span", { class: "muted" }, "none")) : null,
      h("td", { class: "small" }, (r.partial ? [h("span", { class: "badge warn" }, "incomplete")] : []).concat(
        (r.notices || []).map((n) => h("span", { class: "badge", title: n.message }, n.code.replace(/_/g, " ")))))));
  }
  return h("div", { class: "table-wrap" }, h("table", { class: "data runs-table", id: "runs-table" },
    h("caption", { class: "sr-only" }, "runs in the log directory"),
    h("thead", null, h("tr", null,
      h("th", { scope: "col" }, "Run"), h("th", { scope: "col" }, "Device"), h("th", { scope: "col", class: "num", title: "attention time per profiled step (a trace without profiler steps: its total); the rows are ranked by it" }, "Attention per step"),
      h("th", { scope: "col", class: "num", title: "attention busy time / compute busy time (communication apart)" }, "Share"), h("th", { scope: "col" }, "Top phase"),
      h("th", { scope: "col" }, "Bound mix"), h("th", { scope: "col" }, "Top advice"), h("th", { scope: "col" }, "Notices"))),
    tbody));
}

export class RunsView {
  readonly el = h("div", { id: "runs-view" });
  private body = h("div");
  private seq = 0;
  private shown = "";

  constructor(private onOpen: OpenRun) {
    this.el.appendChild(section("Runs", "runs",
      h("p", { class: "section-help" }, "One row per run (its latest trace), the most attention time first. Click a run to open it."),
      this.body));
    replace(this.body, h("p", { class: "muted" }, "Loading\u2026"));
  }

  async refresh(): Promise<void> {
    const my = ++this.seq;
    try {
      const d = await api.overview();
      if (my !== this.seq) return;
      const key = JSON.stringify(d.runs);
      if (key === this.shown) return;      // polled every few seconds: keep focus and hover when nothing changed
      this.shown = key;
      const focused = this.body.contains(document.activeElement) ? (document.activeElement as HTMLElement).dataset.run : undefined;
      replace(this.body, runsTable(d.runs, this.onOpen));
      if (focused !== undefined) (this.body.querySelector(`button[data-run="${CSS.escape(focused)}"]`) as HTMLElement | null)?.focus();
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.body, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }
}
