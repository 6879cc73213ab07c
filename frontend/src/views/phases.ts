// Phase breakdown: a stacked bar per direction, and the table
// operation | latency | bottleneck | memory-bandwidth utilisation | compute utilisation.

import { PHASE_ORDER, phaseColor } from "../colors";
import { h, s } from "../dom";
import * as fmt from "../format";
import type { Phase, Summary } from "../types";
import type { KernelFilter } from "../state";
import { CAUSE_LABELS, LATENCY_DEFINITION, latencyWhy } from "../bound";
import { shortName } from "../names";
import { boundPill, estBadge, hideTip, phaseTag, section, showTip, sourceTag, utilCell } from "../widgets";

const W = 1000;
const LABEL_W = 96;
const RIGHT = 16;
const ROW_H = 30;
const GAP = 14;

function niceStep(max: number, target = 6): number {
  const raw = max / target;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

export type PickPhase = (f: KernelFilter) => void;

const pickOf = (p: Phase): KernelFilter => ({ phase: p.phase, direction: p.direction, scope: "attention", q: "", bound: "" });

export function phaseChart(phases: Phase[], onPick?: PickPhase): SVGElement {
  const dirs = (["forward", "backward"] as const).filter((d) => phases.some((p) => p.direction === d));
  const totals = dirs.map((d) => phases.filter((p) => p.direction === d).reduce((a, p) => a + (p.time_us || 0), 0));
  const max = Math.max(...totals, 1e-9);
  const plotW = W - LABEL_W - RIGHT;
  const height = dirs.length * (ROW_H + GAP) + 28;
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, class: "chart phase-chart", role: "img",
    "aria-label": `attention time by phase: ${dirs.map((d, i) => `${d} ${fmt.time(totals[i])}`).join(", ")}` });
  // grid and axis
  const step = niceStep(max);
  for (let t = 0; t <= max * 1.0001; t += step) {
    const x = LABEL_W + (t / max) * plotW;
    svg.appendChild(s("line", { x1: x, x2: x, y1: 4, y2: height - 22, class: "grid" }));
    svg.appendChild(s("text", { x, y: height - 6, class: "axis-label", "text-anchor": "middle" }, fmt.time(t)));
  }
  dirs.forEach((d, i) => {
    const y = 4 + i * (ROW_H + GAP);
    svg.appendChild(s("text", { x: LABEL_W - 10, y: y + ROW_H / 2 + 4, class: "row-label", "text-anchor": "end" }, d));
    let x = LABEL_W;
    const rows = phases.filter((p) => p.direction === d)
      .sort((a, b) => PHASE_ORDER.indexOf(a.phase) - PHASE_ORDER.indexOf(b.phase));
    for (const p of rows) {
      const w = ((p.time_us || 0) / max) * plotW;
      if (w <= 0) continue;
      const g = s("g", { class: "seg", "data-phase": p.phase, "data-direction": p.direction });
      if (onPick) g.addEventListener("click", () => { hideTip(); onPick(pickOf(p)); });
      const rect = s("rect", { x, y, width: Math.max(w, 0.5), height: ROW_H, fill: phaseColor(p.phase), rx: 2 });
      g.appendChild(rect);
      g.appendChild(s("title", null, `${p.label} (${d}): ${fmt.time(p.time_us)}, ${fmt.pct(p.share)} of attention`));
      if (w > 70) {
        g.appendChild(s("text", { x: x + 6, y: y + ROW_H / 2 + 4, class: "seg-label" }, w > 150 ? `${p.label} ${fmt.time(p.time_us)}` : fmt.time(p.time_us)));
      }
      g.addEventListener("mousemove", (ev) => {
        const e = ev as MouseEvent;
        showTip(e.pageX, e.pageY, phaseTip(p));
      });
      g.addEventListener("mouseleave", hideTip);
      svg.appendChild(g);
      x += w;
    }
    svg.appendChild(s("text", { x: Math.min(x + 6, W - RIGHT), y: y + ROW_H / 2 + 4, class: "total-label",
      "text-anchor": x + 80 > W ? "end" : "start" }, x + 80 > W ? "" : fmt.time(totals[i])));
  });
  return svg;
}

function phaseTip(p: Phase): HTMLElement {
  return h("div", null,
    h("div", { class: "tip-title" }, phaseTag(p.phase, `${p.label} \u00b7 ${p.direction}`)),
    h("div", null, `${fmt.time(p.time_us)} \u00b7 ${fmt.pct(p.share)} of attention \u00b7 ${fmt.count(p.kernels)} kernels`),
    h("div", null, `compute ${fmt.est(fmt.pct(p.compute_util), p.estimated)} \u00b7 memory ${fmt.est(fmt.pct(p.memory_util), p.estimated)} \u00b7 ${p.bound}`),
    p.top_kernels.length ? h("div", { class: "tip-sub mono" }, `longest: ${shortName(p.top_kernels[0].name)}`) : null,
    (p.sources || []).length ? h("div", null, (p.sources || []).map((x) =>
      h("div", null, sourceTag(x), ` \u00b7 ${fmt.time(x.time_us)}`))) : null,
    h("div", { class: "tip-sub" }, "click to list its kernels"));
}

/** Under a latency-bound phase's pill: what the label means here, and a link to the evidence. */
function whyLine(p: Phase, roof: number | undefined, onWhy?: PickPhase): HTMLElement {
  const text = latencyWhy(p.latency_cause, p.compute_util, p.memory_util, roof, p.estimated);
  const short = `neither roof reached${p.latency_cause ? ` \u00b7 ${CAUSE_LABELS[p.latency_cause] || p.latency_cause}` : ""}`;
  const link = onWhy ? h("button", { type: "button", class: "linkish why-link", "data-phase": p.phase, "data-direction": p.direction,
    title: "list this phase's latency-bound kernels, the longest one's evidence open" }, "evidence") : null;
  if (link && onWhy) link.addEventListener("click", () => onWhy({ ...pickOf(p), bound: "latency" }));
  return h("div", { class: "why small muted", title: text }, short, link ? [" \u00b7 ", link] : null);
}

function legend(phases: Phase[]): HTMLElement {
  const present = PHASE_ORDER.filter((ph) => phases.some((p) => p.phase === ph));
  return h("div", { class: "legend", "aria-label": "phase colours" },
    present.map((ph) => phaseTag(ph, phases.find((p) => p.phase === ph)?.label)));
}

/** "latency-bound time by cause: launch 12 µs, stalled 300 µs" (the pill's tooltip). */
export function causeText(t: Partial<Record<string, number>> | undefined): string | null {
  const parts = Object.entries(t || {}).filter(([, v]) => (v || 0) > 0).map(([k, v]) => `${CAUSE_LABELS[k] || k} ${fmt.time(v)}`);
  return parts.length ? `latency-bound time by cause: ${parts.join(", ")}` : null;
}

/** ``onWhy``: the kernels of a latency-bound phase that are latency-bound, the longest one's
 * evidence open. ``roof``: the utilisation that counts as reaching a roof. */
export function phaseTable(phases: Phase[], caption = "Attention phases", onPick?: PickPhase, onWhy?: PickPhase,
  roof?: number): HTMLElement {
  const thead = h("thead", null, h("tr", null,
    h("th", { scope: "col" }, "Operation"),
    h("th", { scope: "col", class: "num", title: "GPU time: the sum of the phase's kernel durations" }, "GPU time"),
    h("th", { scope: "col", class: "num", title: "share of attention GPU time" }, "Share"),
    h("th", { scope: "col" }, "Bottleneck"),
    h("th", { scope: "col", class: "num", title: "memory-bandwidth utilisation (time-weighted, of the device's peak)" }, "Memory BW"),
    h("th", { scope: "col", class: "num", title: "compute utilisation (time-weighted, of the dtype's peak)" }, "Compute"),
    h("th", { scope: "col", class: "num", title: "achieved FLOP/s and bytes/s" }, "Achieved"),
    h("th", { scope: "col", class: "num" }, "Kernels"),
  ));
  const tbody = h("tbody");
  for (const d of ["forward", "backward"]) {
    const rows = phases.filter((p) => p.direction === d);
    if (!rows.length) continue;
    const total = rows.reduce((a, p) => a + (p.time_us || 0), 0);
    tbody.appendChild(h("tr", { class: "group" },
      h("th", { scope: "rowgroup", colspan: 8 }, `${d === "forward" ? "Forward" : "Backward"} \u00b7 ${fmt.time(total)}`)));
    for (const p of rows) {
      const cov = p.cost_coverage !== null && p.cost_coverage < 0.999
        ? h("span", { class: "badge", title: "share of this phase's time whose FLOPs and bytes are known" }, `${fmt.pct(p.cost_coverage, 0)} costed`) : null;
      const name: HTMLElement = onPick ? h("button", { type: "button", class: "linkish", title: "show these kernels in the kernel table" }, phaseTag(p.phase, p.label))
        : phaseTag(p.phase, p.label);
      if (onPick) name.addEventListener("click", () => onPick(pickOf(p)));
      tbody.appendChild(h("tr", { "data-phase": p.phase, "data-direction": p.direction },
        h("th", { scope: "row" }, name, p.core ? null : h("span", { class: "badge subtle" }, "non-core")),
        h("td", { class: "num" }, fmt.time(p.time_us)),
        h("td", { class: "num" }, fmt.pct(p.share)),
        h("td", { class: "pbound" }, boundPill(p.bound, causeText(p.latency_cause_time_us), p.latency_cause), estBadge(p.estimated), cov,
          p.bound === "latency" ? whyLine(p, roof, onWhy) : null),
        h("td", { class: "num" }, utilCell(p.memory_util, p.estimated)),
        h("td", { class: "num" }, utilCell(p.compute_util, p.estimated)),
        h("td", { class: "num small" }, fmt.est(fmt.flopRate(p.achieved_flops_per_s), p.estimated), h("br"),
          fmt.est(fmt.byteRate(p.achieved_bytes_per_s), p.estimated)),
        h("td", { class: "num" }, fmt.count(p.kernels)),
      ));
    }
  }
  return h("div", { class: "table-wrap" }, h("table", { class: "data phase-table", id: "phase-table" },
    h("caption", { class: "sr-only" }, caption), thead, tbody));
}

export function renderPhases(sm: Summary, onPick?: PickPhase, onWhy?: PickPhase): HTMLElement {
  const phases = sm.phases || [];
  if (!phases.length) {
    return section("Phase breakdown", "phases", h("p", { class: "muted" }, "No attention phases in this trace."));
  }
  const roof = sm.thresholds?.roof_reached;
  return section("Phase breakdown", "phases",
    h("p", { class: "section-help", id: "bound-definition" }, "Attention GPU time by phase and direction. A phase is compute- or memory-bound when its time-weighted utilisation of that roof reaches ",
      roof !== undefined ? fmt.pct(roof, 0) : "the threshold", `; ${LATENCY_DEFINITION}. Values marked ~ or est. are estimates. Click a bar or a phase to list its kernels.`),
    legend(phases),
    phaseChart(phases, onPick),
    phaseTable(phases, "Attention phases", onPick, onWhy, roof));
}
