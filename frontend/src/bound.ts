// Words for the bounds. "latency" is one JSON value for three causes (engine field latency_cause):
// the page names the cause in labels, the legend and the reasons.

import { BOUND_LABELS } from "./colors";
import type { LatencyCause } from "./types";

export const CAUSE_LABELS: Record<string, string> = {
  launch: "launch",
  occupancy: "low occupancy",
  stalled: "stalled",
};

export const CAUSE_HELP: Record<string, string> = {
  launch: "short kernel: launch overhead and the ramp-up of a tiny grid take most of its time",
  occupancy: "too few blocks or warps to fill the GPU (small grid or low occupancy)",
  stalled: "a full grid that reaches neither roof: stalls on memory latency, dependencies or synchronisation",
};

/** What "latency-bound" means on this page (the phase, roofline and legend texts use it). */
export const LATENCY_DEFINITION =
  "latency-bound when it reaches neither roof; the cause is named where the engine records it: launch (short kernels), " +
  "low occupancy (too few blocks or warps) or stalled (a full grid that still waits on memory latency or dependencies)";

export function boundLabel(bound: string | null | undefined, cause?: LatencyCause | string | null): string {
  const b = bound || "unknown";
  const base = BOUND_LABELS[b] || b;
  if (b === "latency" && cause && CAUSE_LABELS[cause]) return `${base} (${CAUSE_LABELS[cause]})`;
  return base;
}

export function boundTitle(reason: string | null | undefined, cause?: LatencyCause | string | null): string | null {
  const parts: string[] = [];
  if (cause && CAUSE_HELP[cause]) parts.push(`${CAUSE_LABELS[cause]}: ${CAUSE_HELP[cause]}`);
  if (reason) parts.push(reason);
  return parts.length ? parts.join("\n") : null;
}

/** What "latency-bound" means for one kernel or phase, in words: neither roof was reached (with
 * the utilisations, and the threshold that counts as reaching one) and the cause. Shown beside the
 * label, so that "latency-bound (stalled)" on a long FlashAttention kernel is not read as "small". */
export function latencyWhy(cause: string | null | undefined, computeUtil: number | null | undefined,
  memoryUtil: number | null | undefined, roofReached: number | null | undefined, estimated = false): string {
  const p = (x: number | null | undefined) => (x === null || x === undefined || !isFinite(x) ? "?" : `${estimated ? "~" : ""}${Math.round(x * 100)} %`);
  const utils = computeUtil !== undefined || memoryUtil !== undefined ? ` (compute ${p(computeUtil)}, memory ${p(memoryUtil)} of peak` +
    `${roofReached ? `; a roof counts as reached at ${Math.round(roofReached * 100)} %` : ""})` : "";
  const why = cause && CAUSE_HELP[cause] ? `; ${CAUSE_LABELS[cause]}: ${CAUSE_HELP[cause]}` : "";
  return `neither roof reached${utils}${why}`;
}
