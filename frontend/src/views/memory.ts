// Memory and data movement: the allocation curve over the trace with attention calls shaded,
// what held the peak inside attention, allocations per phase, core attention vs a fused kernel,
// the K/V footprint and its GQA/MQA/MLA alternatives, copies and transfers, and the flags.
// Data from /memory (the report's `memory` block, docs/report-schema.md). Names are text only.

import { PHASE_ORDER, phaseColor, phaseLabel } from "../colors";
import { Child, h, replace, s, select } from "../dom";
import * as fmt from "../format";
import type { Boundary } from "../types";
import { hideTip, note, phaseTag, section, showTip } from "../widgets";
import { renderBoundary } from "./sites";

// ---------------------------------------------------------------- the JSON of /memory

export interface MemHeld {
  op: string | null;
  alloc_op: string | null;
  shape: number[] | null;
  dtype: string | null;
  output: string | null;
  score_matrix: boolean;
  phase: string | null;
  direction: string;
  attention: boolean;
  count: number;
  bytes: number;
  share: number | null;
}

export interface MemPeak {
  ts: number;
  total_allocated_bytes: number;
  in_attention: boolean;
  phase: string | null;
  direction: string;
  scope: string | null;
  op: string | null;
  live_allocs: number;
  live_bytes: number;
  attention_bytes: number;
  score_bytes: number;
  before_window_bytes: number;
  held_by: MemHeld[];
  held_by_groups: number;
}

export interface MemPhase {
  phase: string;
  label: string;
  direction: string;
  allocs: number;
  frees: number;
  alloc_bytes: number;
  free_bytes: number;
  net_bytes: number;
  score_allocs: number;
  score_bytes: number;
  largest: (Pick<MemHeld, "op" | "alloc_op" | "shape" | "dtype" | "output" | "score_matrix"> & { bytes: number }) | null;
}

export interface Shapes {
  b: number; h: number; hk: number; sq: number; sk: number; d: number; dv: number; dtype: string | null; sk_min?: number;
}

export interface MemCall {
  scope: string | null;
  calls: number;
  shapes: Shapes | null;
  fused_path: boolean | null;
  core_peak_bytes: number | null;
  call_peak_bytes: number;
  score_allocs: number;
  score_matrix_bytes?: number;
  fused_alloc_bytes?: number;
  fused_working_set_bytes?: number;
}

export interface MemDevice {
  device: string;
  device_type: string;
  events: number;
  allocs: number;
  frees: number;
  alloc_bytes: number;
  free_bytes: number;
  peak_allocated_bytes: number;
  peak_ts: number | null;
  peak_reserved_bytes: number | null;
  attention: { events: number; allocs: number; frees: number; alloc_bytes: number; free_bytes: number; share_of_alloc_bytes: number | null };
  phases: MemPhase[];
  score_matrices: { allocs: number; bytes: number; max_bytes: number };
  attention_peak: MemPeak | null;
  peak?: MemPeak;
  calls: MemCall[];
  curve: { ts: number[]; allocated: number[]; reserved: number[] | null; points: number; downsampled: boolean };
}

export interface Layer {
  scope: string | null;
  calls: number;
  kv_source: string;
  shapes: Shapes;
  heads_known: boolean;
  kv_bytes_per_call: number;
  fused_activation_bytes: number;
  score_matrix_bytes: number;
  score_tensors: number;
  score_tensor_bytes: number;              // the S×S tensors one call allocates, each at its own dtype
  score_tensor_dtypes: Record<string, number>;
  unfused_activation_bytes: number;
}

export interface Alternative { name: string; kv_heads: number | number[] | null; bytes: number; saving: number | null; ratio: number | null }

export interface Copy {
  op: string;
  within: string | null;
  phase: string;
  direction: string;
  kind: string;
  shape: number[] | number[][] | null;
  dtype: string | null;
  calls: number;
  instances: number;
  cpu_time_us: number | null;
  gpu_time_us: number | null;
  kernels: number;
  bytes: number | null;
  bytes_estimated: boolean;
  detail: string | null;
}

export interface Transfer {
  name: string;
  kind: string;
  copy: string | null;
  host_device: boolean;
  phase: string;
  direction: string;
  op: string | null;
  calls: number;
  time_us: number | null;
  bytes: number;
}

export interface Flag {
  code: string;
  severity: string;
  message: string;
  evidence: string;
  fix: string;
}

export interface MemoryBlock {
  recorded: boolean;
  notice: { code: string; message: string; fix: string } | null;
  primary: string | null;
  devices: MemDevice[];
  attention_spans: { ts: number; end: number; direction: string; instance: number; scope: string | null }[];
  footprint: { calls: number; basis: string | null; basis_calls?: number; kv_bytes: number | null; layers: Layer[]; alternatives: Alternative[]; message: string | null };
  data_movement: {
    note?: string | null;            // why the figures are incomplete (CUDA-graph replays without a reference)
    copies: Copy[];
    copy_groups: number;
    allocator_ops: Record<string, number>;
    allocator_calls: number;
    transfers: Transfer[];
    totals: { copy_calls: number; copy_gpu_time_us: number | null; copy_bytes: number; transfer_calls: number; transfer_time_us: number | null;
      transfer_bytes: number; host_device_bytes: number; share_of_attention_time: number | null };
  };
  flags: Flag[];
  assumptions: Record<string, string>;
  error?: string;
}

export interface MemoryResponse {
  memory: MemoryBlock | null;
  boundary?: Boundary | null;
  attention_time_us: number | null;
}

// ---------------------------------------------------------------- helpers

const W = 1000;
const CH = 300;
const M = { l: 78, r: 18, t: 14, b: 40 };
const ROWS_SHOWN = 12;
const FWD_SHADE = "#9c6ade";
const BWD_SHADE = "#4e79a7";
const OUTSIDE = "#c9ced4";
const BEFORE = "#e6e9ed";

function niceStep(max: number, target = 5): number {
  const raw = max / target;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** A step for a byte axis in binary units: 1, 2 or 5 (x 10^n) KiB, MiB or GiB, so that the
 * labels read "256 MiB", "1 GiB" like the rest of the view. */
function niceByteStep(max: number, target = 5): number {
  const raw = Math.max(max / target, 1);
  const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(raw) / Math.log(1024))));
  return niceStep(raw * target / unit, target) * unit;
}

function shapeText(sh: number[] | number[][] | null | undefined): string {
  if (!sh || !sh.length) return fmt.DASH;
  if (Array.isArray(sh[0])) return (sh as number[][]).map((x) => `[${x.join(", ")}]`).join(" + ");
  return `[${(sh as number[]).join(", ")}]`;
}

function shapesText(x: Shapes | null): string {
  if (!x) return fmt.DASH;
  const sk = x.sk_min !== undefined && x.sk_min !== x.sk ? `${x.sk_min}\u2013${x.sk}` : `${x.sk}`;
  return `B${x.b} H${x.h}${x.hk !== x.h ? `/KV${x.hk}` : ""} Sq${x.sq} Sk${sk} D${x.d} ${x.dtype || ""}`;
}

function dirShort(d: string): string {
  return d === "backward" ? "bwd" : "fwd";
}

function th(text: string, num = false): HTMLElement {
  return h("th", { scope: "col", class: num ? "num" : null }, text);
}

function table(id: string, caption: string, headers: HTMLElement[], rows: HTMLElement[]): HTMLElement {
  return h("div", { class: "table-wrap" }, h("table", { class: "data mem-table", id },
    h("caption", { class: "sr-only" }, caption), h("thead", null, h("tr", null, headers)), h("tbody", null, rows)));
}

function scoreBadge(on: boolean): Child {
  return on ? h("span", { class: "badge warn", title: "an S\u00d7S score-sized tensor (B\u00b7H\u00b7Sq\u00b7Sk elements)" }, "S\u00d7S") : null;
}

function opCell(op: string | null, alloc: string | null, output: string | null): HTMLElement {
  const sub = alloc && alloc !== op ? `allocated in ${alloc}` : null;
  return h("td", { class: "mono small", title: output ? `output: ${output}` : null }, op || fmt.DASH,
    sub ? h("div", { class: "muted" }, sub) : null);
}

// ---------------------------------------------------------------- allocation curve

export function allocationChart(dev: MemDevice, spans: MemoryBlock["attention_spans"]): HTMLElement {
  const c = dev.curve;
  const n = c.ts.length;
  const t0 = n ? c.ts[0] : 0;
  const t1 = n ? c.ts[n - 1] : 1;
  const span = Math.max(t1 - t0, 1e-3);
  // scale to the allocated curve; the reserved one only when it is on the same scale
  const amax = Math.max(...c.allocated, 1);
  const rmax = c.reserved ? Math.max(...c.reserved) : 0;
  const showReserved = !!c.reserved && rmax <= 1.6 * amax;
  const top = showReserved ? Math.max(amax, rmax) : amax;
  // when most of the memory was allocated before the trace, zoom on the part that moves
  const amin = Math.min(...c.allocated);
  const zoom = amin > 0.5 * top && top > amin;
  const vmin = zoom ? Math.floor((amin - (top - amin) * 0.15) / niceByteStep(top - amin)) * niceByteStep(top - amin) : 0;
  const vmax = zoom ? top + (top - amin) * 0.15 : top * 1.08;
  const pw = W - M.l - M.r;
  const ph = CH - M.t - M.b;
  const X = (t: number) => M.l + ((t - t0) / span) * pw;
  const Y = (v: number) => M.t + ph - ((v - vmin) / (vmax - vmin)) * ph;
  const live = h("div", { class: "sr-only", "aria-live": "polite" });
  const svg = s("svg", { viewBox: `0 0 ${W} ${CH}`, class: "chart mem-chart", tabindex: 0, role: "img", id: "mem-chart",
    "aria-label": `Memory allocated on ${dev.device} over ${fmt.time(span)}: peak ${fmt.memBytes(dev.peak_allocated_bytes)}` +
      `${dev.attention_peak ? `, ${fmt.memBytes(dev.attention_peak.total_allocated_bytes)} at the peak inside attention` : ""}. ` +
      "Attention calls are shaded. Use the left and right arrow keys to read the curve." });
  // attention spans (CPU time of each call, the clock of the memory events)
  const shades = s("g", { class: "mem-spans" });
  svg.appendChild(shades);
  for (const sp of spans) {
    if (sp.end < t0 || sp.ts > t1) continue;
    const a = X(Math.max(sp.ts, t0));
    const b = X(Math.min(sp.end, t1));
    const r = s("rect", { x: a, y: M.t, width: Math.max(b - a, 0.8), height: ph, fill: sp.direction === "backward" ? BWD_SHADE : FWD_SHADE,
      "fill-opacity": 0.12, class: `mem-span ${sp.direction}` });
    r.appendChild(s("title", null, `${sp.scope || "attention"} (${sp.direction}): ${fmt.time(sp.end - sp.ts)}`));
    shades.appendChild(r);
  }
  // grid and axes
  const vstep = niceByteStep(vmax - vmin);
  for (let v = vmin; v <= vmax + vstep * 1e-4; v += vstep) {
    svg.appendChild(s("line", { x1: M.l, x2: M.l + pw, y1: Y(v), y2: Y(v), class: "grid" }));
    svg.appendChild(s("text", { x: M.l - 8, y: Y(v) + 4, class: "axis-label", "text-anchor": "end" }, fmt.memBytes(v)));
  }
  const tstep = niceStep(span, 8);
  for (let t = 0; t <= span * 1.0001; t += tstep) {
    svg.appendChild(s("text", { x: X(t0 + t), y: CH - 20, class: "axis-label", "text-anchor": "middle" }, fmt.time(t)));
  }
  svg.appendChild(s("rect", { x: M.l, y: M.t, width: pw, height: ph, class: "frame" }));
  svg.appendChild(s("text", { x: M.l + pw / 2, y: CH - 4, class: "axis-title", "text-anchor": "middle" }, "time since the first memory event"));
  // the curves: allocation is a step function of the events
  const step = (vals: number[]) => {
    let d = "";
    for (let i = 0; i < n; i++) {
      const x = X(c.ts[i]);
      const y = Y(vals[i]);
      d += i === 0 ? `M${x.toFixed(2)},${y.toFixed(2)}` : `H${x.toFixed(2)}V${y.toFixed(2)}`;
    }
    return d;
  };
  if (c.reserved && showReserved && n) {
    svg.appendChild(s("path", { d: step(c.reserved), class: "mem-reserved", fill: "none", stroke: "#9aa4ae", "stroke-dasharray": "5 4", "stroke-width": 1.2 }));
  }
  if (n) svg.appendChild(s("path", { d: step(c.allocated), class: "mem-allocated", fill: "none", stroke: "#1f2328", "stroke-width": 1.6 }));
  // peaks
  const mark = (p: MemPeak | null | undefined, label: string, color: string, id: string) => {
    if (!p || p.ts < t0 || p.ts > t1) return;
    const x = X(p.ts);
    const y = Y(p.total_allocated_bytes);
    svg.appendChild(s("circle", { cx: x, cy: y, r: 4.5, fill: color, stroke: "#fff", "stroke-width": 1.5, id }));
    const text = `${label} ${fmt.memBytes(p.total_allocated_bytes)}`;
    const right = x > W - 220;
    // The label must not cross the curve: it goes above the highest point of the curve under its
    // width (the allocation often stays at the peak level after it), or below when no room is left.
    const tw = 6.5 * text.length + 12;
    const ta = t0 + ((right ? x - tw - M.l : x - M.l) / pw) * span;
    const tb = t0 + ((right ? x - M.l : x + tw - M.l) / pw) * span;
    let hi = p.total_allocated_bytes;
    for (let i = 0; i < n; i++) {
      const end = i + 1 < n ? c.ts[i + 1] : t1;
      if (end >= ta && c.ts[i] <= tb) hi = Math.max(hi, c.allocated[i]);
    }
    const above = Y(hi) - 8;
    let lo = Infinity;
    for (let i = 0; i < n; i++) {
      const end = i + 1 < n ? c.ts[i + 1] : t1;
      if (end >= ta && c.ts[i] <= tb) lo = Math.min(lo, c.allocated[i]);
    }
    const ly = above >= M.t + 12 ? above : Math.min(M.t + ph - 4, Y(Math.max(lo, vmin)) + 16);
    svg.appendChild(s("text", { x: right ? x - 8 : x + 8, y: ly, class: "bar-label halo", id: `${id}-label`,
      "text-anchor": right ? "end" : "start" }, text));
  };
  if (dev.peak && dev.attention_peak && dev.peak.ts !== dev.attention_peak.ts) mark(dev.peak, "peak", "#57606a", "mem-peak");
  mark(dev.attention_peak, "peak in attention", "#cf222e", "mem-attention-peak");
  // cursor: hover or arrow keys
  const cursor = s("line", { y1: M.t, y2: M.t + ph, stroke: "#57606a", "stroke-width": 1, visibility: "hidden", class: "mem-cursor" });
  svg.appendChild(cursor);
  const overlay = s("rect", { x: M.l, y: M.t, width: pw, height: ph, fill: "transparent" });
  svg.appendChild(overlay);
  const at = (t: number) => {
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (c.ts[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const tipFor = (i: number) => {
    const t = c.ts[i];
    const inside = spans.filter((sp) => sp.ts <= t && t <= sp.end);
    return h("div", null,
      h("div", { class: "tip-title" }, `${fmt.memBytes(c.allocated[i])} allocated`),
      h("div", null, `at ${fmt.time(t - t0)}${c.reserved ? ` \u00b7 ${fmt.memBytes(c.reserved[i])} reserved` : ""}`),
      inside.length ? h("div", { class: "tip-sub" }, `inside ${inside[0].scope || "attention"} (${inside[0].direction})`) :
        h("div", { class: "tip-sub" }, "outside attention"));
  };
  let idx = -1;
  const show = (i: number, px?: number, py?: number) => {
    idx = Math.max(0, Math.min(n - 1, i));
    const x = X(c.ts[idx]);
    cursor.setAttribute("x1", String(x));
    cursor.setAttribute("x2", String(x));
    cursor.setAttribute("visibility", "visible");
    if (px !== undefined && py !== undefined) {
      showTip(px, py, tipFor(idx));
    } else {
      const r = (svg as unknown as SVGSVGElement).getBoundingClientRect();
      showTip(window.scrollX + r.left + (x / W) * r.width, window.scrollY + r.top + (Y(c.allocated[idx]) / CH) * r.height, tipFor(idx));
    }
    live.textContent = `${fmt.memBytes(c.allocated[idx])} allocated at ${fmt.time(c.ts[idx] - t0)}`;
  };
  if (n) {
    overlay.addEventListener("mousemove", (ev) => {
      const e = ev as MouseEvent;
      const r = (svg as unknown as SVGSVGElement).getBoundingClientRect();
      const x = ((e.clientX - r.left) / r.width) * W;
      show(at(t0 + ((x - M.l) / pw) * span), e.pageX, e.pageY);
    });
    overlay.addEventListener("mouseleave", () => {
      hideTip();
      cursor.setAttribute("visibility", "hidden");
    });
    svg.addEventListener("keydown", (ev) => {
      const e = ev as KeyboardEvent;
      const stepN = Math.max(1, Math.round(n / 100));
      if (e.key === "ArrowRight") show(idx < 0 ? 0 : idx + stepN);
      else if (e.key === "ArrowLeft") show(idx < 0 ? n - 1 : idx - stepN);
      else if (e.key === "Home") show(0);
      else if (e.key === "End") show(n - 1);
      else if (e.key === "Escape") { hideTip(); cursor.setAttribute("visibility", "hidden"); return; }
      else return;
      e.preventDefault();
    });
    svg.addEventListener("blur", hideTip);
  }
  const legend = h("div", { class: "legend" },
    h("span", { class: "phase-tag" }, h("span", { class: "swatch-line", "aria-hidden": "true" }), "allocated"),
    c.reserved && showReserved ? h("span", { class: "phase-tag" }, h("span", { class: "swatch-line dashed", "aria-hidden": "true" }), "reserved") : null,
    c.reserved && !showReserved ? h("span", { class: "muted small" }, `reserved up to ${fmt.memBytes(rmax)} (off this scale)`) : null,
    legendBox(FWD_SHADE, "attention, forward"), legendBox(BWD_SHADE, "attention, backward"),
    zoom ? h("span", { class: "muted small" }, `the axis starts at ${fmt.memBytes(vmin)}`) : null,
    c.downsampled ? h("span", { class: "muted small" }, `${fmt.count(c.points)} events, drawn as ${fmt.count(n)} points (each bucket's min and max)`) : null);
  return h("div", { class: "mem-curve" }, legend, svg, live);
}

function legendBox(color: string, label: string): HTMLElement {
  const dot = h("span", { class: "dot", "aria-hidden": "true" });
  dot.style.background = color;
  dot.style.opacity = "0.35";
  return h("span", { class: "phase-tag" }, dot, label);
}

// ---------------------------------------------------------------- peak breakdown

function heldColor(g: MemHeld): string {
  return g.attention ? phaseColor(g.phase) : OUTSIDE;
}

export function peakBreakdown(pk: MemPeak): HTMLElement {
  const total = Math.max(pk.total_allocated_bytes, 1);
  const bar = h("div", { class: "split mem-split", role: "img", id: "mem-peak-bar",
    "aria-label": `what held ${fmt.memBytes(pk.total_allocated_bytes)}: ` +
      pk.held_by.map((g) => `${g.op || "?"} ${shapeText(g.shape)} ${fmt.memBytes(g.bytes)}`).join(", ") });
  const parts: [string, number, string][] = pk.held_by.map((g) => [
    `${g.op || "?"} ${shapeText(g.shape)} ${g.dtype || ""} (${g.attention ? `${phaseLabel(g.phase)}, ${g.direction}` : "outside attention"})`,
    g.bytes, heldColor(g)]);
  const rest = pk.live_bytes - pk.held_by.reduce((a, g) => a + g.bytes, 0);
  if (rest > 0) parts.push(["other live allocations", rest, OUTSIDE]);
  if (pk.before_window_bytes > 0) parts.push(["allocated before the trace (weights, inputs...)", pk.before_window_bytes, BEFORE]);
  for (const [label, v, color] of parts) {
    const seg = h("span", { class: "split-seg", title: `${label}: ${fmt.memBytes(v)} (${fmt.pct(v / total)})` });
    seg.style.width = `${(v / total) * 100}%`;
    seg.style.background = color;
    bar.appendChild(seg);
  }
  const rows = pk.held_by.map((g) => h("tr", { "data-score": g.score_matrix ? "1" : "0" },
    opCell(g.op, g.alloc_op, g.output),
    h("td", { class: "mono small" }, shapeText(g.shape), scoreBadge(g.score_matrix)),
    h("td", null, g.dtype || fmt.DASH),
    h("td", null, g.attention ? phaseTag(g.phase, `${phaseLabel(g.phase)} \u00b7 ${dirShort(g.direction)}`) : h("span", { class: "muted" }, "outside attention")),
    h("td", { class: "num" }, fmt.count(g.count)),
    h("td", { class: "num" }, fmt.memBytes(g.bytes)),
    h("td", { class: "num" }, fmt.pct(g.share))));
  if (pk.before_window_bytes > 0) {
    rows.push(h("tr", null, h("td", { class: "muted", colspan: 5 }, "allocated before the trace (weights, inputs, optimizer state...)"),
      h("td", { class: "num" }, fmt.memBytes(pk.before_window_bytes)), h("td", { class: "num" }, fmt.pct(pk.before_window_bytes / total))));
  }
  return h("div", { class: "mem-peak" },
    h("p", null, h("strong", null, fmt.memBytes(pk.total_allocated_bytes)), " allocated at the peak inside attention, during ",
      phaseTag(pk.phase, `${phaseLabel(pk.phase)} (${pk.direction})`),
      pk.op ? h("span", { class: "muted" }, ` in ${pk.op}`) : null,
      pk.score_bytes ? h("span", null, ` \u00b7 ${fmt.memBytes(pk.score_bytes)} of it in S\u00d7S score tensors`) : null),
    bar,
    table("mem-held-table", "What held the peak", [th("Op (maker)"), th("Shape"), th("Dtype"), th("Phase"), th("Count", true), th("Bytes", true), th("Share", true)], rows),
    pk.held_by_groups > pk.held_by.length ? h("p", { class: "muted small" }, `${pk.held_by_groups - pk.held_by.length} smaller groups not shown`) : null);
}

// ---------------------------------------------------------------- tables

function phaseRows(dev: MemDevice): HTMLElement {
  const rows = dev.phases.slice().sort((a, b) => (a.direction === b.direction ? 0 : a.direction === "forward" ? -1 : 1) ||
    PHASE_ORDER.indexOf(a.phase) - PHASE_ORDER.indexOf(b.phase));
  return table("mem-phase-table", "Allocations by attention phase", [th("Phase"), th("Dir"), th("Allocs", true), th("Allocated", true),
    th("Freed", true), th("Net", true), th("Largest allocation"), th("S\u00d7S", true)],
  rows.map((p) => h("tr", { "data-phase": p.phase, "data-direction": p.direction },
    h("th", { scope: "row" }, phaseTag(p.phase, p.label)),
    h("td", null, dirShort(p.direction)),
    h("td", { class: "num" }, fmt.count(p.allocs)),
    h("td", { class: "num" }, fmt.memBytes(p.alloc_bytes)),
    h("td", { class: "num" }, fmt.memBytes(p.free_bytes)),
    h("td", { class: "num" }, (p.net_bytes < 0 ? "\u2212" : "") + fmt.memBytes(Math.abs(p.net_bytes))),
    h("td", { class: "mono small" }, p.largest ? `${p.largest.op || "?"} ${shapeText(p.largest.shape)} ${fmt.memBytes(p.largest.bytes)}` : fmt.DASH,
      p.largest ? scoreBadge(p.largest.score_matrix) : null),
    h("td", { class: "num" }, p.score_allocs ? fmt.count(p.score_allocs) : fmt.DASH))));
}

function callRows(dev: MemDevice): HTMLElement | null {
  const calls = dev.calls.filter((c) => c.fused_alloc_bytes !== undefined && c.core_peak_bytes !== null);
  if (!calls.length) return null;
  return table("mem-call-table", "Core attention allocations vs a fused kernel", [th("Attention call"), th("Calls", true), th("Shapes"),
    th("Core peak above inputs", true), th("Fused kernel (out + lse)", true), th("Ratio", true), th("S\u00d7S allocs / call", true), th("One S\u00d7S", true)],
  calls.map((c) => h("tr", null,
    h("td", { class: "mono small" }, c.scope || fmt.DASH),
    h("td", { class: "num" }, fmt.count(c.calls)),
    h("td", { class: "mono small" }, shapesText(c.shapes)),
    h("td", { class: "num" }, fmt.memBytes(c.core_peak_bytes)),
    h("td", { class: "num" }, fmt.memBytes(c.fused_alloc_bytes)),
    h("td", { class: "num" }, c.fused_alloc_bytes ? fmt.ratio((c.core_peak_bytes || 0) / c.fused_alloc_bytes) : fmt.DASH),
    h("td", { class: "num" }, fmt.count(c.score_allocs)),
    h("td", { class: "num" }, fmt.memBytes(c.score_matrix_bytes)))));
}

export function alternativesChart(alts: Alternative[]): SVGElement {
  const rowH = 26;
  const labelW = 190;
  const height = alts.length * rowH + 8;
  const max = Math.max(...alts.map((a) => a.bytes), 1);
  const pw = W - labelW - 200;
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, class: "chart mem-alt-chart", role: "img", id: "mem-alt-chart",
    "aria-label": "K/V bytes under other layouts: " + alts.map((a) => `${a.name} ${fmt.memBytes(a.bytes)}`).join(", ") });
  alts.forEach((a, i) => {
    const y = 4 + i * rowH;
    const w = (a.bytes / max) * pw;
    svg.appendChild(s("text", { x: labelW - 10, y: y + rowH / 2 + 3, class: "row-label", "text-anchor": "end" }, a.name));
    const r = s("rect", { x: labelW, y: y + 4, width: Math.max(w, 1), height: rowH - 9, rx: 2, fill: a.name === "current" ? "#4e79a7" : "#9aa4ae" });
    r.appendChild(s("title", null, `${a.name}: ${fmt.memBytes(a.bytes)}${a.kv_heads !== null ? ` (${a.kv_heads} K/V heads)` : " (latent)"}`));
    svg.appendChild(r);
    const change = a.ratio === null || a.name === "current" ? "" : ` \u00b7 ${a.ratio < 1 ? "\u2212" : "+"}${fmt.pct(Math.abs(a.ratio - 1))}`;
    svg.appendChild(s("text", { x: labelW + w + 8, y: y + rowH / 2 + 3, class: "bar-label" }, `${fmt.memBytes(a.bytes)}${change}`));
  });
  return svg;
}

function footprint(mem: MemoryBlock): HTMLElement {
  const fp = mem.footprint;
  if (!fp.layers.length) return h("p", { class: "muted" }, fp.message || "No attention call with recorded K/V shapes.");
  const rows = fp.layers.map((l) => h("tr", null,
    h("td", { class: "mono small" }, l.scope || fmt.DASH),
    h("td", { class: "num" }, fmt.count(l.calls)),
    h("td", { class: "mono small" }, shapesText(l.shapes)),
    h("td", null, l.kv_source.replace(/_/g, " ")),
    h("td", { class: "num" }, fmt.memBytes(l.kv_bytes_per_call)),
    h("td", { class: "num" }, fmt.memBytes(l.fused_activation_bytes)),
    h("td", { class: "num" }, scoreTensors(l))));
  return h("div", { class: "mem-footprint" },
    h("p", null, h("strong", null, fmt.memBytes(fp.kv_bytes)), ` of K and V over ${fmt.count(fp.basis_calls || fp.calls)} attention calls (${fp.basis || "all calls"}): what a KV cache holds at these shapes.`),
    table("mem-kv-table", "K/V footprint per attention call", [th("Attention call"), th("Calls", true), th("Shapes"), th("K/V from"),
      th("K/V per call", true), th("Fused: q+k+v+out+lse", true), th("S\u00d7S tensors (unfused)", true)], rows),
    fp.alternatives.length > 1 ? h("div", null,
      h("h3", { class: "mem-sub" }, "The same K/V under other layouts"),
      alternativesChart(fp.alternatives),
      h("p", { class: "muted small" }, [mem.assumptions?.mla, mem.assumptions?.gqa].filter((x) => x).join(". ") + ".")) : null);
}

function movement(mem: MemoryBlock): HTMLElement {
  const dm = mem.data_movement;
  const t = dm.totals;
  const rows: HTMLElement[] = dm.copies.map((c) => h("tr", null,
    h("td", { class: "mono small" }, c.op, c.within ? h("div", { class: "muted" }, `in ${c.within}`) : null),
    h("td", null, c.kind.replace(/_/g, " "), c.detail && c.kind !== "internal" ? h("div", { class: "muted small" }, c.detail) : null),
    h("td", null, phaseTag(c.phase, `${phaseLabel(c.phase)} \u00b7 ${dirShort(c.direction)}`)),
    h("td", { class: "mono small" }, shapeText(c.shape)),
    h("td", { class: "num" }, fmt.count(c.calls)),
    h("td", { class: "num" }, fmt.count(c.instances)),
    h("td", { class: "num" }, fmt.time(c.gpu_time_us)),
    h("td", { class: "num" }, fmt.time(c.cpu_time_us)),
    h("td", { class: "num" }, fmt.est(fmt.memBytes(c.bytes), c.bytes_estimated))));
  for (const x of dm.transfers) {
    rows.push(h("tr", null,
      h("td", { class: "mono small" }, x.name, x.op ? h("div", { class: "muted" }, `by ${x.op}`) : null),
      h("td", null, x.kind, x.host_device ? h("span", { class: "badge warn" }, "host\u2194device") : null),
      h("td", null, phaseTag(x.phase, `${phaseLabel(x.phase)} \u00b7 ${dirShort(x.direction)}`)),
      h("td", null, fmt.DASH),
      h("td", { class: "num" }, fmt.count(x.calls)),
      h("td", { class: "num" }, fmt.DASH),
      h("td", { class: "num" }, fmt.time(x.time_us)),
      h("td", { class: "num" }, fmt.DASH),
      h("td", { class: "num" }, fmt.memBytes(x.bytes))));
  }
  const allocs = Object.entries(dm.allocator_ops || {}).map(([k, v]) => `${k} \u00d7${v}`).join(", ");
  return h("div", { class: "mem-movement" },
    h("p", null, `${fmt.count(t.copy_calls)} copies (${fmt.time(t.copy_gpu_time_us)} GPU, ${fmt.memBytes(t.copy_bytes)}) and `,
      `${fmt.count(t.transfer_calls)} memcpy/memset (${fmt.time(t.transfer_time_us)}, ${fmt.memBytes(t.transfer_bytes)}) inside attention`,
      t.share_of_attention_time !== null ? `: ${fmt.pct(t.share_of_attention_time)} of attention GPU time` : "", ".",
      allocs ? h("span", { class: "muted" }, ` Allocator calls: ${allocs}.`) : null),
    rows.length ? table("mem-copy-table", "Copies and transfers inside attention", [th("Op"), th("Kind"), th("Phase"), th("Shape"),
      th("Calls", true), th("Attn calls", true), th("GPU time", true), th("CPU time", true), th("Bytes", true)], rows.slice(0, ROWS_SHOWN))
      : h("p", { class: "muted" }, dm.note ? null : "No copies or transfers inside attention."),
    dm.note ? h("p", { class: "muted", "data-testid": "movement-note" }, `Incomplete: ${dm.note}.`) : null,
    rows.length > ROWS_SHOWN ? h("details", null, h("summary", null, `${rows.length - ROWS_SHOWN} more rows`),
      table("mem-copy-table-more", "More copies and transfers", [th("Op"), th("Kind"), th("Phase"), th("Shape"),
        th("Calls", true), th("Attn calls", true), th("GPU time", true), th("CPU time", true), th("Bytes", true)], rows.slice(ROWS_SHOWN))) : null,
    dm.copy_groups > dm.copies.length ? h("p", { class: "muted small" }, `${dm.copy_groups - dm.copies.length} smaller copy groups not shown`) : null);
}

const FLAGS_SHOWN = 3;

function flagItem(f: Flag): HTMLElement {
  return h("li", { "data-code": f.code },
    h("span", { class: `badge ${f.severity === "warning" ? "warn" : "subtle"}` }, f.code.replace(/_/g, " ")), " ",
    h("strong", null, f.message),
    h("div", { class: "small muted" }, f.evidence),
    h("div", { class: "small" }, h("strong", null, "Fix: "), f.fix));
}

function flags(mem: MemoryBlock): Child {
  const fl = mem.flags;
  if (!fl.length) return null;
  const warn = fl.some((f) => f.severity === "warning");
  return h("div", { class: "mem-flags", id: "mem-flags" }, note(warn ? "warn" : "info",
    `${fl.length} finding${fl.length > 1 ? "s" : ""} about memory and data movement inside attention`,
    h("ul", { class: "mem-flag-list" }, fl.slice(0, FLAGS_SHOWN).map(flagItem)),
    fl.length > FLAGS_SHOWN ? h("details", null, h("summary", null, `${fl.length - FLAGS_SHOWN} more`),
      h("ul", { class: "mem-flag-list" }, fl.slice(FLAGS_SHOWN).map(flagItem))) : null));
}

// ---------------------------------------------------------------- the section

function deviceBody(mem: MemoryBlock, dev: MemDevice): HTMLElement {
  const a = dev.attention;
  const stat = (label: string, value: Child, sub?: Child) => h("div", { class: "stat" },
    h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), sub ? h("div", { class: "stat-sub" }, sub) : null);
  return h("div", { class: "mem-device", "data-device": dev.device },
    h("div", { class: "stats" },
      stat("Peak allocated", fmt.memBytes(dev.peak_allocated_bytes), dev.peak_reserved_bytes !== null ? `reserved ${fmt.memBytes(dev.peak_reserved_bytes)}` : null),
      stat("Peak inside attention", dev.attention_peak ? fmt.memBytes(dev.attention_peak.total_allocated_bytes) : fmt.DASH,
        dev.attention_peak ? `${phaseLabel(dev.attention_peak.phase)} \u00b7 ${dev.attention_peak.direction}` : "no allocation inside attention"),
      stat("Allocated inside attention", fmt.memBytes(a.alloc_bytes), `${fmt.count(a.allocs)} allocations \u00b7 ${fmt.pct(a.share_of_alloc_bytes)} of all`),
      stat("S\u00d7S score allocations", fmt.count(dev.score_matrices.allocs),
        dev.score_matrices.allocs ? `${fmt.memBytes(dev.score_matrices.bytes)} \u00b7 largest ${fmt.memBytes(dev.score_matrices.max_bytes)}` : "none (fused or no scores)")),
    h("h3", { class: "mem-sub" }, "Allocated memory over the trace"),
    allocationChart(dev, mem.attention_spans),
    dev.attention_peak ? h("h3", { class: "mem-sub" }, "What held the peak inside attention") : null,
    dev.attention_peak ? peakBreakdown(dev.attention_peak) : null,
    dev.phases.length ? h("h3", { class: "mem-sub" }, "Allocations by phase") : null,
    dev.phases.length ? phaseRows(dev) : null,
    callRows(dev) ? h("h3", { class: "mem-sub" }, "Core attention vs a fused kernel at the same shapes") : null,
    callRows(dev));
}

/** The "Memory and data movement" card. */
export function renderMemory(data: MemoryResponse): HTMLElement {
  const mem = data.memory;
  const help = h("p", { class: "section-help" },
    "Allocations recorded with profile_memory=True, each attributed to the attention phase that made it (backward to its forward phase), " +
    "the op and output shape that made it, and what a fused kernel would need at the same shapes. K/V footprint and copies come from shapes alone. " +
    "Sizes are in binary units (1 GiB = 1024\u00b3 bytes), as PyTorch's memory statistics and the CLI give them.");
  if (!mem) return section("Memory and data movement", "memory", help, h("p", { class: "muted" }, "No memory analysis in this report."));
  if (mem.error) return section("Memory and data movement", "memory", help, note("error", "The memory analysis failed", h("div", { class: "error-text" }, mem.error)));
  const body = h("div", { class: "mem-body" });
  const parts: Child[] = [help, flags(mem)];
  if (!mem.recorded) {
    parts.push(note("info", mem.notice ? mem.notice.message : "No memory events in this trace",
      h("div", null, "Record allocations with ", h("code", null, "profile_memory=True"), ":"),
      h("pre", { class: "code" }, h("code", null,
        "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n" +
        "                       profile_memory=True, record_shapes=True, with_stack=True)"))));
  } else if (mem.devices.length) {
    let current = mem.devices.find((d) => d.device === mem.primary) || mem.devices[0];
    const picker = mem.devices.length > 1
      ? h("div", { class: "controls" }, select("Device", mem.devices.map((d) => [d.device, `${d.device} (${fmt.count(d.events)} events)`]),
        current.device, (v) => {
          current = mem.devices.find((d) => d.device === v) || current;
          replace(body, deviceBody(mem, current));
        }, { id: "mem-device" }))
      : null;
    replace(body, deviceBody(mem, current));
    parts.push(picker, body);
  }
  parts.push(h("h3", { class: "mem-sub" }, "K/V footprint (from shapes)"), footprint(mem));
  parts.push(h("h3", { class: "mem-sub" }, "Data movement inside attention"), movement(mem));
  parts.push(renderBoundary(data.boundary));
  return section("Memory and data movement", "memory", ...parts);
}


/** "5 × 128 MiB", or with mixed dtypes "5, 512 MiB (3 bf16, 2 fp32)": the S×S tensors of one call. */
function scoreTensors(l: Layer): string {
  if (!l.score_tensors) return fmt.DASH;
  const dts = Object.entries(l.score_tensor_dtypes || {}).sort((a, b) => b[1] - a[1]);
  if (dts.length <= 1 && l.score_tensor_bytes === l.score_tensors * l.score_matrix_bytes) {
    return `${l.score_tensors} \u00d7 ${fmt.memBytes(l.score_matrix_bytes)}`;
  }
  return `${l.score_tensors}, ${fmt.memBytes(l.score_tensor_bytes)} (${dts.map(([d, n]) => `${n} ${d}`).join(", ")})`;
}
