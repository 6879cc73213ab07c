// Roofline: log-log achieved FLOP/s over arithmetic intensity, the device's memory roof and one
// compute roof per dtype in use, one point per kernel or kernel group, coloured by phase.
// Hover or focus the chart and use the arrow keys to read the points.

import { PHASE_ORDER, phaseColor, phaseLabel } from "../colors";
import { h, s, replace } from "../dom";
import * as fmt from "../format";
import type { RoofAdjustment, RooflinePoint, RooflineResponse, Summary } from "../types";
import { unknownCostAdvice } from "../replay";
import type { KernelFilter } from "../state";
import { LATENCY_DEFINITION, latencyWhy } from "../bound";
import { shortName } from "../names";
import { boundPill, estBadge, hideTip, measuredBadge, measuredText, phaseTag, showTip, sourceTag } from "../widgets";

const W = 1000;
const H = 520;
const M = { l: 78, r: 170, t: 18, b: 52 };

function decadeRange(lo: number, hi: number): [number, number] {
  return [Math.pow(10, Math.floor(Math.log10(lo))), Math.pow(10, Math.ceil(Math.log10(hi)))];
}

export function pointTip(p: RooflinePoint, roofReached?: number | null): HTMLElement {
  return h("div", { class: "roof-tip" },
    h("div", { class: "tip-title mono" }, shortName(p.name, p.short_name)),
    h("div", null, phaseTag(p.phase, `${phaseLabel(p.phase)} \u00b7 ${p.direction}`),
      p.count > 1 ? h("span", { class: "muted" }, ` \u00b7 ${fmt.count(p.count)} kernels`) : null),
    h("table", { class: "tip-table" }, h("tbody", null,
      row("time", fmt.time(p.time_us)),
      row("shapes", fmt.shape(p.shapes)),
      row("op", p.cost_op || p.op || fmt.DASH),
      row("FLOPs", fmt.cost(fmt.flops(p.flops), p.estimated, p.upper_bound)),
      row("bytes", fmt.cost(fmt.bytes(p.bytes), p.estimated, p.upper_bound)),
      row("intensity", fmt.est(fmt.intensity(p.intensity), p.estimated)),
      row("achieved", `${fmt.cost(fmt.flopRate(p.achieved_flops_per_s), p.estimated, p.upper_bound)} \u00b7 ${fmt.cost(fmt.byteRate(p.achieved_bytes_per_s), p.estimated, p.upper_bound)}`),
      row(`compute util.${p.peak ? ` (${p.peak})` : ""}`, fmt.cost(fmt.pct(p.compute_util), p.estimated, p.upper_bound && !p.measured)),
      row("memory util.", fmt.cost(fmt.pct(p.memory_util), p.estimated, p.upper_bound && !p.measured)),
      p.measured ? row("measured", p.count > 1 ? `${measuredText(p.measured)} (longest kernel)` : measuredText(p.measured)) : null,
    )),
    h("div", null, boundPill(p.bound, null, p.latency_cause), estBadge(p.estimated), measuredBadge(p.measured)),
    p.bound === "latency" ? h("div", { class: "tip-sub" }, `latency-bound: ${latencyWhy(p.latency_cause, p.compute_util, p.memory_util, roofReached, p.estimated)}`) : null,
    p.source ? h("div", null, sourceTag(p.source)) : null,
    h("div", { class: "tip-sub" }, p.count > 1 ? `longest kernel: ${p.bound_reason}` : p.bound_reason),
    h("div", { class: "tip-sub" }, "click or Enter: list its kernels"));
}

function row(k: string, v: string): HTMLElement {
  return h("tr", null, h("th", { scope: "row" }, k), h("td", null, v));
}

export function rooflineChart(data: RooflineResponse, onPick?: (f: KernelFilter) => void, adjustments: RoofAdjustment[] = []): HTMLElement {
  const roofReached = data.thresholds?.roof_reached ?? null;
  const pts = data.points.filter((p) => p.intensity > 0 && p.achieved_flops_per_s > 0);
  const bw = data.roofs.memory_bandwidth || null;
  const roofs = Object.entries(data.roofs.compute || {}).filter(([, v]) => v && v > 0) as [string, number][];
  roofs.sort((a, b) => b[1] - a[1]);
  const xs = pts.map((p) => p.intensity);
  const ys = pts.map((p) => p.achieved_flops_per_s);
  if (bw) for (const [, v] of roofs) xs.push(v / bw);
  const maxRoof = roofs.length ? roofs[0][1] : Math.max(...ys, 1);
  let [x0, x1] = decadeRange(Math.min(...xs, 1) / 1.5, Math.max(...xs, 10) * 1.5);
  let [y0, y1] = decadeRange(Math.max(Math.min(...ys, maxRoof) / 1.5, maxRoof / 1e7), maxRoof * 1.5);
  if (x1 / x0 < 100) x1 = x0 * 100;
  if (y1 / y0 < 100) y0 = y1 / 100;
  const pw = W - M.l - M.r;
  const ph = H - M.t - M.b;
  const X = (v: number) => M.l + ((Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0))) * pw;
  const Y = (v: number) => M.t + ph - ((Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * ph;

  const live = h("div", { class: "sr-only", "aria-live": "polite" });
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart roofline", tabindex: 0, role: "img", id: "roofline-chart",
    "aria-label": `Roofline of ${data.device.label || data.device.name}: ${pts.length} points. Use the arrow keys to step through them, longest first; Enter lists the kernels of the point.` });
  const defs = s("defs", null, s("clipPath", { id: "roof-clip" }, s("rect", { x: M.l, y: M.t, width: pw, height: ph })));
  svg.appendChild(defs);
  // grid: decades
  for (let e = Math.round(Math.log10(x0)); e <= Math.round(Math.log10(x1)); e++) {
    const v = Math.pow(10, e);
    svg.appendChild(s("line", { x1: X(v), x2: X(v), y1: M.t, y2: M.t + ph, class: "grid" }));
    svg.appendChild(s("text", { x: X(v), y: M.t + ph + 18, class: "axis-label", "text-anchor": "middle" }, fmt.tick(v)));
  }
  for (let e = Math.round(Math.log10(y0)); e <= Math.round(Math.log10(y1)); e++) {
    const v = Math.pow(10, e);
    svg.appendChild(s("line", { x1: M.l, x2: M.l + pw, y1: Y(v), y2: Y(v), class: "grid" }));
    svg.appendChild(s("text", { x: M.l - 8, y: Y(v) + 4, class: "axis-label", "text-anchor": "end" }, fmt.tick(v)));
  }
  svg.appendChild(s("rect", { x: M.l, y: M.t, width: pw, height: ph, class: "frame" }));
  svg.appendChild(s("text", { x: M.l + pw / 2, y: H - 8, class: "axis-title", "text-anchor": "middle" }, "arithmetic intensity (FLOP/byte)"));
  svg.appendChild(s("text", { x: 16, y: M.t + ph / 2, class: "axis-title", "text-anchor": "middle",
    transform: `rotate(-90 16 ${M.t + ph / 2})` }, "achieved FLOP/s"));

  // roofs
  const roofG = s("g", { "clip-path": "url(#roof-clip)" });
  svg.appendChild(roofG);
  if (bw) {
    const top = roofs.length ? roofs[0][1] : y1;
    const xa = Math.max(x0, y0 / bw);
    const xb = Math.min(x1, top / bw);
    roofG.appendChild(s("line", { x1: X(xa), y1: Y(bw * xa), x2: X(xb), y2: Y(bw * xb), class: "roof memory-roof" }));
    // The label sits above the slanted roof (where no kernel can be) at the place along it with the
    // fewest points nearby; a halo keeps it readable if one is there anyway.
    const label = `memory ${fmt.byteRate(bw)}`;
    const labelPx = 7 * label.length;
    const angle = (Math.atan2(Y(bw * xa * 10) - Y(bw * xa), X(xa * 10) - X(xa)) * 180) / Math.PI;
    const rad = (angle * Math.PI) / 180;
    let best = Math.max(xa * 3, x0 * 3);
    let bestN = Infinity;
    for (let f = 1.5; xa * f * 1.0 < xb; f *= 1.6) {
      const lx = xa * f;
      const ex = X(lx) + labelPx * Math.cos(rad);
      if (ex > X(xb) - 4) break;
      const n = pts.filter((p) => {
        const px = X(p.intensity);
        const py = Y(p.achieved_flops_per_s);
        if (px < X(lx) - 8 || px > ex + 8) return false;
        const lineY = Y(bw * lx) + (px - X(lx)) * Math.tan(rad);
        return py > lineY - 26 && py < lineY + 14;
      }).length;
      if (n < bestN) {
        bestN = n;
        best = lx;
      }
    }
    svg.appendChild(s("text", { x: X(best), y: Y(bw * best) - 8, class: "roof-label halo", transform: `rotate(${angle} ${X(best)} ${Y(bw * best) - 8})` },
      label));
  }
  roofs.forEach(([k, v], i) => {
    const xr = bw ? v / bw : x0;
    roofG.appendChild(s("line", { x1: X(Math.max(xr, x0)), y1: Y(v), x2: X(x1), y2: Y(v), class: `roof compute-roof${i ? " secondary" : ""}` }));
    const adj = adjustments.find((a) => a.peak === k);
    const label = s("text", { x: M.l + pw + 6, y: Y(v) + 4, class: `roof-label${adj ? " raised" : ""}`, "data-peak": k }, `${k} ${fmt.flopRate(v)}`);
    if (adj) {
      label.appendChild(s("tspan", { x: M.l + pw + 6, dy: 14, class: "roof-sub" }, `raised from ${fmt.flopRate(adj.from)}`));
      label.appendChild(s("title", null, adj.reason));
    }
    svg.appendChild(label);
    if (bw) svg.appendChild(s("circle", { cx: X(xr), cy: Y(v), r: 2.5, class: "ridge" }));
  });

  // points, longest first so that short ones stay visible on top
  const tmax = Math.max(...pts.map((p) => p.time_us), 1e-9);
  const order = pts.slice().sort((a, b) => b.time_us - a.time_us);
  const ptsG = s("g", { class: "points" });
  svg.appendChild(ptsG);
  const circles: SVGElement[] = [];
  order.forEach((p, i) => {
    const r = 3 + 9 * Math.sqrt(p.time_us / tmax);
    const c = s("circle", { cx: X(p.intensity), cy: Y(p.achieved_flops_per_s), r, fill: phaseColor(p.phase), class: "pt",
      "data-phase": p.phase || "", "data-index": i });
    c.addEventListener("mouseenter", (ev) => {
      const e = ev as MouseEvent;
      showTip(e.pageX, e.pageY, pointTip(p, roofReached));
    });
    c.addEventListener("mousemove", (ev) => {
      const e = ev as MouseEvent;
      showTip(e.pageX, e.pageY, pointTip(p, roofReached));
    });
    c.addEventListener("mouseleave", hideTip);
    if (onPick) c.addEventListener("click", () => pick(p));
    circles.push(c);
    ptsG.appendChild(c);
  });
  // a point opens its kernels: by exact name (a chip above the table), its phase and direction
  function pick(p: RooflinePoint): void {
    if (!onPick) return;
    hideTip();
    onPick({ name: p.name, kid: String(p.name_id ?? p.id ?? ""), q: "", phase: p.phase || "", direction: p.phase ? p.direction : "", scope: p.phase ? "attention" : "all", bound: "" });
  }
  const ring = s("circle", { r: 0, class: "focus-ring", "aria-hidden": "true" });
  svg.appendChild(ring);

  // keyboard: arrows step through points (longest first)
  let cur = -1;
  const focusPoint = (i: number) => {
    if (!order.length) return;
    cur = (i + order.length) % order.length;
    const c = circles[cur];
    const p = order[cur];
    ring.setAttribute("cx", c.getAttribute("cx") || "0");
    ring.setAttribute("cy", c.getAttribute("cy") || "0");
    ring.setAttribute("r", String(Number(c.getAttribute("r")) + 4));
    const box = c.getBoundingClientRect();
    showTip(box.right + window.scrollX, box.bottom + window.scrollY, pointTip(p, roofReached));
    live.textContent = `${cur + 1} of ${order.length}: ${shortName(p.name, p.short_name)}, ${phaseLabel(p.phase)} ${p.direction}, ${fmt.time(p.time_us)}, ${fmt.flopRate(p.achieved_flops_per_s)}, ${p.bound}; Enter lists its kernels`;
  };
  svg.addEventListener("keydown", (ev) => {
    const e = ev as KeyboardEvent;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") { focusPoint(cur + 1); e.preventDefault(); }
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") { focusPoint(cur - 1); e.preventDefault(); }
    else if (e.key === "Home") { focusPoint(0); e.preventDefault(); }
    else if (e.key === "End") { focusPoint(order.length - 1); e.preventDefault(); }
    else if ((e.key === "Enter" || e.key === " ") && cur >= 0 && onPick) { pick(order[cur]); e.preventDefault(); }
    else if (e.key === "Escape") { hideTip(); ring.setAttribute("r", "0"); cur = -1; }
  });
  const clearRing = () => { ring.setAttribute("r", "0"); cur = -1; };
  svg.addEventListener("blur", () => { hideTip(); clearRing(); });
  svg.addEventListener("mousemove", clearRing);
  svg.addEventListener("mousedown", (ev) => { ev.preventDefault(); clearRing(); });

  const present = PHASE_ORDER.filter((ph) => pts.some((p) => p.phase === ph));
  const legend = h("div", { class: "legend" }, present.map((ph) => phaseTag(ph)),
    pts.some((p) => !p.phase) ? phaseTag(null, "not attention") : null,
    h("span", { class: "muted" }, "\u00b7 point area \u221d GPU time \u00b7 click a point (or Enter on the focused one) to list its kernels"));
  return h("div", { class: "roofline-wrap" }, legend, svg, live);
}

export interface RooflineControls {
  scope: string;
  group: boolean;
}

export const ROOFLINE_HELP = "Each point is a kernel (or all kernels of one name and phase): achieved FLOP/s over FLOPs per byte moved. " +
  "Under the slanted memory roof a kernel is limited by bandwidth, under a flat compute roof by math throughput; a kernel is " + LATENCY_DEFINITION + ".";

export function renderRoofline(el: HTMLElement, data: RooflineResponse, ctl: RooflineControls, onChange: (c: RooflineControls) => void,
  onPick?: (f: KernelFilter) => void, summary?: Pick<Summary, "trace" | "graphs" | "device">): void {
  // every adjustment is listed under the chart; those of a compute roof in use also label it
  const allAdj = summary?.device?.roof_adjustments || [];
  const adjustments = allAdj.filter((a) => data.roofs.compute[a.peak]);
  const scopeSel = h("select", { id: "roof-scope" },
    h("option", { value: "attention" }, "attention kernels"),
    h("option", { value: "all" }, "all kernels"));
  scopeSel.value = ctl.scope;
  scopeSel.addEventListener("change", () => onChange({ ...ctl, scope: scopeSel.value }));
  const groupBox = h("input", { type: "checkbox", id: "roof-group" });
  groupBox.checked = ctl.group;
  groupBox.addEventListener("change", () => onChange({ ...ctl, group: groupBox.checked }));
  const controls = h("div", { class: "controls" },
    h("label", { class: "field", for: "roof-scope" }, h("span", { class: "field-label" }, "Show"), scopeSel),
    h("label", { class: "check", for: "roof-group" }, groupBox, "one point per kernel name and phase"));
  const om = data.omitted;
  const notes: string[] = [];
  if (om.unknown_cost) notes.push(`${fmt.count(om.unknown_cost)} kernels (${fmt.time(om.unknown_cost_time_us)}) not plotted: FLOPs or bytes unknown`);
  if (om.zero_flops) notes.push(`${fmt.count(om.zero_flops)} kernels (${fmt.time(om.zero_flops_time_us)}) without FLOPs (copies, fills) not plotted`);
  if (om.over_limit) notes.push(`${fmt.count(om.over_limit)} shortest points left out`);
  const hasPts = data.points.length > 0;
  replace(el,
    controls,
    hasPts ? rooflineChart(data, onPick, adjustments) : h("p", { class: "muted empty-chart" }, "No kernel with known FLOPs and bytes to plot.",
      om.unknown_cost ? unknownCostAdvice(summary) : ""),
    notes.length ? h("p", { class: "muted small" }, notes.join(" \u00b7 ")) : null,
    allAdj.length ? h("p", { class: "muted small", id: "roof-adjustments-note" }, "Roofs raised above the device table: ",
      allAdj.map((a, i) => [i ? "; " : "", h("strong", null, `${a.peak} ${fmt.peakRate(a.peak, a.from)} \u2192 ${fmt.peakRate(a.peak, a.to)}`), ` (${a.reason})`]), ".") : null,
    !data.roofs.memory_bandwidth ? h("p", { class: "muted small" }, "The device's peaks are unknown: roofs are not drawn.") : null);
}
