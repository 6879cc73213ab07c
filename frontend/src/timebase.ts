// The Trace view's time base (#41): per step (the default) or the totals over the profiled steps.
// A report's figures are totals over its profiled steps; per step divides each time figure by the
// same divisor as tb_attention_plugin/steps.py ``divisor`` (the strip's context). Ratios, shares,
// utilisations and bounds are the same on either base. A trace with no profiler step has only
// totals (divisor 1): then the switch is off and the figures say "whole trace".

import type { Advice, Summary } from "./types";

export type TimeBase = "step" | "total";

/** How many steps the report's totals cover (steps.py divisor): 1 for a selected step. */
export function divisor(s: Pick<Summary, "step" | "steps">): number {
  if (s.step) return 1;
  return Math.max(1, (s.steps || []).length);
}

export interface Base {
  base: TimeBase;        // the base the figures are on
  n: number;             // the divisor (1 on totals)
  steps: number;         // the report's profiled steps (divisor)
  canSwitch: boolean;    // whether per step differs from total
  label: string;         // "per step (mean of 2 profiled steps)", "over the 2 profiled steps", "whole trace"
  why: string;           // the switch's tooltip
}

export function baseOf(s: Pick<Summary, "step" | "steps">, want: TimeBase): Base {
  const steps = divisor(s);
  if (s.step) {
    return { base: "total", n: 1, steps: 1, canSwitch: false, label: `step ${s.step}`,
      why: `one profiled step (${s.step}) is selected: its figures are per step already` };
  }
  if (!(s.steps || []).length) {
    return { base: "total", n: 1, steps: 1, canSwitch: false, label: "whole trace (no profiler step in this trace: totals)",
      why: "this trace has no profiler step (ProfilerStep#N): its figures are totals over the whole trace" };
  }
  if (steps === 1) {
    return { base: "total", n: 1, steps: 1, canSwitch: false, label: "one profiled step",
      why: "this trace has one profiled step: per step and total are the same" };
  }
  const why = "per step: each time figure divided by the profiled steps; total: over all of them together";
  return want === "total"
    ? { base: "total", n: 1, steps, canSwitch: true, label: `over the ${steps} profiled steps`, why }
    : { base: "step", n: steps, steps, canSwitch: true, label: `per step (mean of ${steps} profiled steps)`, why };
}

/** Divide every number under a key ending in "_us" (and the numbers of such a key's object). */
function scaleDeep(v: unknown, n: number, inUs: boolean): unknown {
  if (typeof v === "number") return inUs ? v / n : v;
  if (Array.isArray(v)) return v.map((x) => scaleDeep(x, n, inUs));
  if (v && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      out[k] = k === "per_step" ? x : scaleDeep(x, n, inUs || k.endsWith("_us"));
    }
    return out;
  }
  return v;
}

/** A finding on the base: its ``per_step`` block where the report has one; ``overTrace`` where
 * it has none (its figures stay the trace's totals and say so). */
function scaleAdvice(a: Advice, n: number): Advice & { overTrace?: boolean } {
  const ps = a.per_step;
  if (!ps) return { ...a, overTrace: true };
  const out = scaleDeep(a, n, false) as Advice;
  // its longest kernels keep their launches' totals (a time beside a call count): said where drawn
  if (a.evidence && out.evidence && "kernels" in a.evidence) (out.evidence as Record<string, unknown>).kernels = (a.evidence as Record<string, unknown>).kernels;
  out.gpu_gain_us = ps.gpu_gain_us ?? out.gpu_gain_us;
  out.step_gain_us = ps.step_gain_us ?? out.step_gain_us;
  return out;
}

const KEEP = new Set(["steps", "streams", "communication", "trace", "device", "devices", "measurements", "replay", "graphs",
  "flops_ledger", "notices", "warnings", "thresholds", "advice_checks"]);

/** The summary on the base: time figures of the summary, phases, sites, boundary and advice
 * divided by ``b.n``; everything else (counts, shares, utilisations, bounds) as it is. */
export function onBase(s: Summary, b: Base): Summary {
  if (b.n === 1) return s;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s)) {
    if (KEEP.has(k)) out[k] = v;
    else if (k === "advice") out[k] = (v as Advice[] | undefined)?.map((a) => scaleAdvice(a, b.n));
    else out[k] = scaleDeep(v, b.n, k.endsWith("_us"));
  }
  return out as unknown as Summary;
}
