// The run in context: step time, GPU busy and idle, attention's share of each, communication, and
// a one-line diagnosis. A run whose GPU idles most of the step is CPU- or launch-bound, and then
// attention kernels are not what limits it, however they look on the roofline.

import { h, Child } from "../dom";
import * as fmt from "../format";
import type { Summary } from "../types";
import { divisor } from "../timebase";

export const IDLE_DIAGNOSIS = 0.5;         // idle share of the span above which the diagnosis says so
export const SMALL_ATTENTION = 0.1;        // attention share of GPU work below which it is not the lever

export interface Context {
  // Every time below is PER STEP (the trace's totals divided by its profiled steps) unless named total.
  stepUs: number | null;         // mean profiled step (CPU range), or the GPU span per step when that is longer
  steps: number;
  spanUs: number | null;         // the step the shares are of: busy + idle = spanUs
  spanEstimated: boolean;        // from the steps' CPU ranges, not the GPU's first-to-last activity
  busyUs: number;                // GPU busy: the union of all GPU activity (gpu_busy_us), as in the summary and ranks
  computeBusyUs: number | null;  // of which compute (communication apart: compute_busy_us)
  idleUs: number | null;         // stepUs - busyUs
  attentionUs: number;
  attentionBusyUs: number;       // union of attention intervals (= attentionUs unless they overlap on several streams)
  commUs: number | null;
  commOverlapUs: number | null;
  totalSpanUs: number | null;    // the whole trace: what a finding's gain (over the trace) is a share of
  totalAttentionUs: number;
}

export function context(s: Summary): Context {
  const steps = s.step ? s.steps.filter((x) => x.name === s.step) : s.steps;
  const n = divisor(s);   // the report's totals cover these steps
  const stepSum = steps.reduce((a, x) => a + (x.dur_us || 0), 0);
  const per = (v: number | null | undefined): number | null => (v === null || v === undefined ? null : v / n);
  let span: number | null = s.span_us ?? null;
  let est = false;
  if (span === null && stepSum > 0) {
    span = stepSum;
    est = true;
  }
  if (est && span !== null && span < s.gpu_busy_us) span = null;    // GPU work outlasting the steps' CPU ranges: no basis
  const busy = s.gpu_busy_us / n;
  // the step: the mean profiled step, or the GPU span per step when the GPU ran longer
  let step: number | null = span === null ? null : span / n;
  if (steps.length && stepSum > 0 && !est) step = Math.max(stepSum / steps.length, step ?? 0);
  if (step !== null && step < busy) step = busy;
  const c = s.communication;
  return {
    stepUs: steps.length ? Math.max(stepSum / steps.length, step ?? 0) : null, steps: steps.length,
    spanUs: step, spanEstimated: est && span !== null, busyUs: busy,
    computeBusyUs: per(s.compute_busy_us), idleUs: step === null ? null : Math.max(0, step - busy),
    attentionUs: (s.attention_time_us || 0) / n,
    attentionBusyUs: (s.attention_busy_us ?? s.attention_time_us ?? 0) / n,
    commUs: c ? c.time_us / n : null, commOverlapUs: c ? c.overlap_with_compute_us / n : null,
    totalSpanUs: span, totalAttentionUs: s.attention_time_us || 0,
  };
}

/** part / whole, or null when it has no basis or would exceed 1 (attention kernels overlapping on
 * several streams in a report without ``attention_busy_us``): never an impossible share. */
export function share(part: number | null | undefined, whole: number | null | undefined): number | null {
  if (part === null || part === undefined || !whole || whole <= 0) return null;
  const r = part / whole;
  return r >= 0 && r <= 1 + 1e-9 ? Math.min(1, r) : null;
}

/** One line that says what limits the run, or null when nothing stands out. */
export function diagnosis(c: Context): string | null {
  const idleShare = share(c.idleUs, c.spanUs);
  if (idleShare !== null && idleShare > IDLE_DIAGNOSIS) {
    const idle = fmt.pct(idleShare, 0);
    return `GPU idle ${c.spanEstimated ? "~" : ""}${idle} of the ${c.steps ? "step" : "trace"}: CPU/launch-bound; attention is not the bottleneck`;
  }
  const ofBusy = share(c.attentionBusyUs, c.computeBusyUs ?? c.busyUs);   // of the model's work, communication apart
  if (ofBusy !== null && ofBusy < SMALL_ATTENTION) {
    return `Attention is ${fmt.pct(ofBusy, 0)} of GPU work: making it faster gains at most that much`;
  }
  const ofSpan = share(c.attentionBusyUs, c.spanUs);
  if (ofSpan !== null && ofSpan > 0.5) {
    return `Attention takes ${fmt.pct(ofSpan, 0)} of the ${c.steps ? "step" : "trace"}: it is the place to optimise`;
  }
  return null;
}

function fig(label: string, value: Child, sub: Child, testid: string, title?: string): HTMLElement {
  return h("div", { class: "fig", "data-testid": testid, title: title || null },
    h("div", { class: "fig-label" }, label), h("div", { class: "fig-value" }, value), h("div", { class: "fig-sub" }, sub));
}

export function renderStrip(s: Summary): HTMLElement {
  const c = context(s);
  const span = c.spanUs;
  const e = (t: string) => (c.spanEstimated ? fmt.est(t, true) : t);
  const other = Math.max(0, c.busyUs - c.attentionBusyUs);
  const bar = h("div", { class: "split strip-bar", role: "img",
    "aria-label": `per step: attention ${fmt.time(c.attentionBusyUs)}, other GPU work ${fmt.time(other)}${c.idleUs !== null ? `, idle ${fmt.time(c.idleUs)}` : ""}` });
  const total = c.attentionBusyUs + other + (c.idleUs || 0);
  const seg = (v: number, cls: string, t: string) => {
    if (!(v > 0) || !(total > 0)) return;
    const el = h("span", { class: `split-seg ${cls}`, title: t });
    el.style.width = `${(v / total) * 100}%`;
    bar.appendChild(el);
  };
  seg(c.attentionBusyUs, "seg-attention", `attention ${fmt.time(c.attentionBusyUs)} per step`);
  seg(other, "seg-other", `other GPU work ${fmt.time(other)} per step`);
  seg(c.idleUs || 0, "seg-idle", `GPU idle ${fmt.time(c.idleUs)} per step`);
  const dx = diagnosis(c);
  const unit = c.steps ? "step" : "span";
  const perStep = c.steps > 1 ? " per step" : "";
  const comm = c.computeBusyUs !== null && c.commUs ? ` \u00b7 compute ${fmt.time(c.computeBusyUs)}` : "";
  return h("section", { class: "strip card", id: "overview-strip", "aria-label": "run overview" },
    h("div", { class: "figs" },
      fig(c.steps ? "Step time" : "Trace span", c.steps ? fmt.time(c.stepUs) : e(fmt.time(span)),
        c.steps ? `${c.steps} step${c.steps > 1 ? "s" : ""}${s.step ? "" : " profiled (mean)"}` : "first to last GPU activity", "strip-step",
        "busy + idle = this step; every figure of the strip is per step (the trace's totals divided by its steps)"),
      fig("GPU busy", fmt.time(c.busyUs),
        span ? [`${e(fmt.pct(share(c.busyUs, span), 0))} of the ${unit}${perStep}`, comm] : "span unknown", "strip-busy",
        "union of all GPU activity, communication included (the summary's GPU busy time); compute: communication apart"),
      fig("GPU idle", c.idleUs === null ? fmt.DASH : e(fmt.time(c.idleUs)),
        span && c.idleUs !== null ? `${e(fmt.pct(share(c.idleUs, span), 0))} of the ${unit}${perStep}` : "needs steps or the engine's span", "strip-idle",
        c.spanEstimated ? "estimated from the profiler steps' CPU ranges (the engine's GPU span is not in this report)" : "the step less GPU busy"),
      fig("Attention", fmt.time(c.attentionUs),
        [h("span", { "data-testid": "strip-att-busy" }, fmt.pct(share(c.attentionBusyUs, c.busyUs), 0)), " of busy \u00b7 ",
          e(fmt.pct(share(c.attentionBusyUs, span), 0)), " of the ", unit,
          c.steps > 1 ? ` \u00b7 total ${fmt.time(c.totalAttentionUs)}` : ""], "strip-attention"),
      fig("Communication", c.commUs === null ? fmt.DASH : fmt.time(c.commUs),
        c.commUs === null ? "not in this report" : c.commUs > 0 ? `${fmt.time(c.commOverlapUs)} overlapped with compute${perStep}` : "none recorded", "strip-comm")),
    bar,
    h("div", { class: "mini-legend strip-legend small" },
      h("span", null, h("span", { class: "dot seg-attention", "aria-hidden": "true" }), "attention"),
      h("span", null, h("span", { class: "dot seg-other", "aria-hidden": "true" }), "other GPU work"),
      h("span", null, h("span", { class: "dot seg-idle", "aria-hidden": "true" }), "GPU idle")),
    dx ? h("p", { class: "diagnosis", "data-testid": "diagnosis" }, dx) : null);
}
