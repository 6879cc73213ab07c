// Summary cards: device and peaks, GPU time, attention time and share, forward vs backward,
// fused vs unfused core attention, time by bound.

import { CAUSE_LABELS, LATENCY_DEFINITION } from "../bound";
import { BOUND_COLORS, BOUND_LABELS } from "../colors";
import { h, Child } from "../dom";
import * as fmt from "../format";
import type { Base } from "../timebase";
import type { Device, Summary } from "../types";
import { section } from "../widgets";

const PEAK_ORDER = ["bf16", "fp16", "tf32", "fp32", "fp8", "fp64"];

/** bf16 and fp16 usually share a peak: one line "bf16/fp16 802 TFLOP/s". */
function mergePeaks(keys: string[], flops: Record<string, number | null>): [string, number | null][] {
  const out: [string, number | null][] = [];
  for (const k of keys) {
    const same = out.find(([, v]) => v === flops[k]);
    if (same) same[0] = `${same[0]}/${k}`;
    else out.push([k, flops[k]]);
  }
  return out;
}

/** A peak line's mark when the roof was raised above the table (device.roof_adjustments). */
function raised(d: Device, key: string): Child {
  const adj = (d.roof_adjustments || []).filter((a) => key.split("/").includes(a.peak) || (key === "memory_bandwidth" && a.peak.startsWith("memory")));
  if (!adj.length) return null;
  return h("span", { class: "badge warn raised", title: adj.map((a) => a.reason).join("\n") }, "raised");
}

/** The adjustments in words, under the peaks: which roof, from what, and why. */
function adjustmentsNote(d: Device): Child {
  const adj = d.roof_adjustments || [];
  if (!adj.length) return null;
  return h("div", { class: "stat-sub roof-adjustments", "data-testid": "roof-adjustments" },
    adj.map((a) => h("details", { "data-peak": a.peak }, h("summary", null, `${a.peak} raised from ${fmt.peakRate(a.peak, a.from)}`),
      h("span", { class: "muted" }, a.reason))));
}

function card(label: string, value: Child, sub?: Child, extra?: Child, testid?: string): HTMLElement {
  return h("div", { class: "stat", "data-testid": testid || null },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value" }, value),
    sub ? h("div", { class: "stat-sub" }, sub) : null,
    extra || null);
}

/** A thin stacked bar of labelled parts. */
function split(parts: { label: string; value: number; color: string }[]): HTMLElement {
  const total = parts.reduce((a, p) => a + (p.value || 0), 0);
  const bar = h("div", { class: "split", role: "img",
    "aria-label": parts.map((p) => `${p.label} ${fmt.time(p.value)}`).join(", ") });
  if (total > 0) {
    for (const p of parts) {
      if (!p.value) continue;
      const seg = h("span", { class: "split-seg", title: `${p.label}: ${fmt.time(p.value)} (${fmt.pct(p.value / total)})` });
      seg.style.width = `${(p.value / total) * 100}%`;
      seg.style.background = p.color;
      bar.appendChild(seg);
    }
  }
  return bar;
}

/** ``b``: the time base the summary's figures are on (timebase.onBase), said under GPU busy time. */
export function renderSummary(s: Summary, b?: Base): HTMLElement {
  const d = s.device;
  const peaks = d ? PEAK_ORDER.filter((k) => d.peaks.flops[k]).slice(0, 4) : [];
  const deviceCard = h("div", { class: "stat device", "data-testid": "device" },
    h("div", { class: "stat-label" }, "Device"),
    h("div", { class: "stat-value small" }, d ? d.label || d.name : "unknown"),
    d ? h("div", { class: "stat-sub" },
      h("span", { class: `badge basis-${(d.basis || "unknown").split("+")[0]}`, title: (d.references || []).join("\n") || null },
        `${d.basis} peaks${(d.roof_adjustments || []).length ? `, ${(d.roof_adjustments || []).length} raised` : ""}`),
      d.key ? null : h("span", { class: "badge warn" }, "not in the device table")) : null,
    d ? h("ul", { class: "peaks" },
      mergePeaks(peaks, d.peaks.flops).map(([k, v]) => h("li", null, h("span", { class: "muted" }, k), " ", fmt.flopRate(v), raised(d, k))),
      h("li", null, h("span", { class: "muted" }, "memory"), " ", fmt.byteRate(d.peaks.memory_bandwidth), raised(d, "memory_bandwidth"))) : null,
    d ? adjustmentsNote(d) : null);

  const fwdBwd = split([
    { label: "forward", value: s.forward_time_us, color: "#4e79a7" },
    { label: "backward", value: s.backward_time_us, color: "#f28e2b" },
  ]);
  const fused = split([
    { label: "fused core", value: s.fused_time_us, color: "#9c6ade" },
    { label: "unfused core", value: s.unfused_core_time_us, color: "#e15759" },
    { label: "projections", value: s.projection_time_us, color: "#76b7b2" },
    { label: "other", value: Math.max(0, s.attention_time_us - s.fused_time_us - s.unfused_core_time_us - s.projection_time_us), color: "#bab0ac" },
  ]);
  const bounds = (["compute", "memory", "latency", "unknown"] as const);
  const boundBar = split(bounds.map((b) => ({ label: BOUND_LABELS[b], value: s.bound_time_us?.[b] || 0, color: BOUND_COLORS[b] })));
  const stepNote = b ? b.label : s.step ? `step ${s.step}` : s.steps.length > 1 ? `total over ${s.steps.length} profiled steps` : s.steps.length ? "1 profiled step" : "whole trace";

  const grid = h("div", { class: "stats" },
    deviceCard,
    card("GPU busy time", fmt.time(s.gpu_busy_us),
      [`sum of GPU activity ${fmt.time(s.gpu_time_us)}`, h("br"), `kernels ${fmt.time(s.kernel_time_us)} \u00b7 ${stepNote}`], null, "gpu-busy"),
    card("Attention time", fmt.time(s.attention_time_us),
      [h("strong", { "data-testid": "attention-share" }, fmt.pct(s.attention_share)),
        h("span", { title: "attention busy time over the union of compute-stream GPU activity (communication apart)" },
          " of compute busy time"), " \u00b7 ",
        `${fmt.count(s.attention_kernels)} kernels, ${fmt.count(s.instances)} calls`],
      shareBar(s.attention_share), "attention-time"),
    card("Forward vs backward", [fmt.time(s.forward_time_us), h("span", { class: "vs" }, " / "), fmt.time(s.backward_time_us)],
      legend([["forward", "#4e79a7"], ["backward", "#f28e2b"]]), fwdBwd, "fwd-bwd"),
    card("Fused vs unfused core", [fmt.time(s.fused_time_us), h("span", { class: "vs" }, " / "), fmt.time(s.unfused_core_time_us)],
      [legend([["fused", "#9c6ade"], ["unfused", "#e15759"], ["projections", "#76b7b2"], ["other", "#bab0ac"]]), backendLine(s)], fused, "fused"),
    card("Attention time by bound", topBound(s),
      [legend(bounds.map((b) => [`${b} ${fmt.time(s.bound_time_us?.[b])}`, BOUND_COLORS[b],
        b === "latency" ? `latency: ${LATENCY_DEFINITION}` : undefined] as [string, string, string?])), causeLine(s)], boundBar, "bounds"));
  return section("Summary", "summary", grid, measurementsNote(s));
}

/** Latency-bound attention time by cause, when the engine records it. */
function causeLine(s: Summary): Child {
  const parts = Object.entries(s.latency_cause_time_us || {}).filter(([, v]) => (v || 0) > 0);
  if (!parts.length) return null;
  return h("div", { class: "small muted cause-line", "data-testid": "latency-causes", title: LATENCY_DEFINITION },
    "latency: ", parts.map(([k, v]) => `${CAUSE_LABELS[k] || k} ${fmt.time(v)}`).join(" \u00b7 "));
}

/** Core attention by implementation (flash, cuDNN, math, eager...), when the engine names them. */
function backendLine(s: Summary): Child {
  const rows = s.attention_backends || [];
  if (!rows.length) return null;
  return h("div", { class: "small muted", "data-testid": "backends", title: rows.map((r) => `${r.label}: ${fmt.time(r.time_us)}`).join("\n") },
    `backend: ${rows.map((r) => r.label).join(" + ")}`);
}

/** Which kernels carry hardware counters (an ncu export beside the trace, CUPTI ranges in it). */
function measurementsNote(s: Summary): Child {
  const m = s.measurements;
  if (!m || !m.source) return null;
  const src = m.source === "ncu" ? `Nsight Compute export ${m.file || ""}` : "CUPTI counter ranges in the trace";
  const text = m.ranges
    ? `${src}: ${fmt.count(m.rows)} ranges without a kernel timeline (${fmt.flops(m.ranges_total?.flops ?? null)} counted); see the report's measurements.ranges.`
    : `${src}: ${fmt.count(m.kernels_joined)} of ${fmt.count(m.kernels_total)} kernels measured`
      + `${m.window && m.window.steps.length ? ` (${m.window.steps.join(", ")})` : ""}; their utilisations and bounds come from the counters.`;
  return h("p", { class: "muted small", "data-testid": "measurements" },
    h("span", { class: "badge basis-measured" }, "measured"), " ", text, m.notes.length ? ` ${m.notes.join(" ")}` : "");
}

function shareBar(share: number | null): HTMLElement {
  const bar = h("div", { class: "split", role: "img", "aria-label": `attention share ${fmt.pct(share)}` });
  const seg = h("span", { class: "split-seg" });
  seg.style.width = `${Math.min(1, share || 0) * 100}%`;
  seg.style.background = "#9c6ade";
  bar.appendChild(seg);
  return bar;
}

function legend(items: [string, string, string?][]): HTMLElement {
  return h("span", { class: "mini-legend" }, items.map(([l, c, title]) => {
    const sw = h("span", { class: "dot", "aria-hidden": "true" });
    sw.style.background = c;
    return h("span", { title: title || null }, sw, l);
  }));
}

function topBound(s: Summary): string {
  const bt = s.bound_time_us || ({} as Record<string, number>);
  let best = "unknown";
  let v = -1;
  for (const b of ["compute", "memory", "latency", "unknown"]) {
    if ((bt as Record<string, number>)[b] > v) {
      v = (bt as Record<string, number>)[b];
      best = b;
    }
  }
  if (!s.attention_time_us || v <= 0) return fmt.DASH;
  return `${fmt.pct(v / s.attention_time_us, 0)} ${best}`;
}
