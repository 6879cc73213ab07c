// The kernel table grouped by kernel (its default mode): one row per (kernel name, phase,
// direction) from /kernels?group=1 (server/groups.py), with calls, total, mean, min and max time,
// Tensor Core use, mean occupancy and the bound holding most of its time. The longest launch
// stands for the group: its op, source and details.

import { BOUND_LABELS } from "../colors";
import { Child, h } from "../dom";
import * as fmt from "../format";
import type { KernelGroup } from "../types";
import { boundPill, phaseTag } from "../widgets";
import { graphBadge } from "../replay";
import { details, nameCell, opCell } from "./kerneldetails";

export interface Col {
  key: string;
  label: string;
  num?: boolean;
  sort?: string;
  title?: string;
  opt?: boolean;        // dropped first on narrow screens (the row's details keep it)
}

/** How Tensor Core use is decided, for the column's and the cells' titles. */
export const TENSOR_CORE_HELP = "Tensor Cores: decided from the roof each launch is measured against (its peak): the roofline " +
  "classifier gives a matrix-engine (Tensor Core) peak only to a matmul-like or fused attention kernel whose dtype is bf16, " +
  "fp16, tf32 (fp32 matmuls on TF32), fp8 or int8; elementwise work on bf16/fp16 tensors runs on the fp32 vector roof, " +
  "copies and fills have no arithmetic roof (\u2014)";

const MATRIX_PEAKS = new Set(["bf16", "fp16", "tf32", "fp8", "int8", "fp64_tensor"]);

export const GROUP_COLS: Col[] = [
  { key: "name", label: "Kernel", sort: "name" },
  { key: "op", label: "Op", sort: "op", title: "the CPU op that launched the longest launch" },
  { key: "phase", label: "Phase", sort: "phase" },
  { key: "calls", label: "Calls", num: true, sort: "calls", title: "launches" },
  { key: "total_us", label: "Total", num: true, sort: "total_us", title: "total time of its launches" },
  { key: "mean_us", label: "Mean", num: true, sort: "mean_us", title: "mean time of a launch" },
  { key: "min_us", label: "Min", num: true, sort: "min_us", title: "shortest launch", opt: true },
  { key: "max_us", label: "Max", num: true, sort: "max_us", title: "longest launch", opt: true },
  { key: "tensor_core", label: "Tensor Cores", sort: "tensor_core", title: TENSOR_CORE_HELP },
  { key: "occupancy_pct", label: "Occu\u00adpancy", num: true, sort: "occupancy_pct", title: "mean occupancy of its launches" },
  { key: "bound", label: "Bound", sort: "bound", title: "the bound holding most of its time" },
];

export const GROUP_DESC_FIRST = new Set(["total_us", "calls", "mean_us", "min_us", "max_us", "tensor_core", "occupancy_pct"]);

const GROUP_SORT = new Set(GROUP_COLS.map((c) => c.sort || c.key).concat(["module_path", "direction"]));
const GROUP_ONLY = new Set(["total_us", "calls", "mean_us", "min_us", "max_us", "tensor_core"]);

/** ``sort`` where the mode has it, else the time (a group's total, a launch's duration). */
export function sortFor(sort: string, grouped: boolean): string {
  if (grouped) return GROUP_SORT.has(sort) ? sort : "total_us";
  return GROUP_ONLY.has(sort) ? "dur_us" : sort;
}

function counted(m: Record<string, number>): string {
  return Object.entries(m).map(([k, n]) => (n > 1 ? `${k} \u00d7${n}` : k)).join(", ") || fmt.DASH;
}

/** "yes", "no", "3 of 8" or a dash (no arithmetic roof), and why, for a group's launches. */
export function tensorCores(g: Pick<KernelGroup, "tensor_core_calls" | "roof_calls" | "peaks" | "dtypes">): { text: string; title: string } {
  const roofs = `roof ${counted(g.peaks)}; dtype ${counted(g.dtypes)}`;
  if (!g.roof_calls) return { text: fmt.DASH, title: `no arithmetic roof (data movement): Tensor Cores do not apply (${roofs})\n${TENSOR_CORE_HELP}` };
  const tc = g.tensor_core_calls;
  const matrix = Object.keys(g.peaks).filter((p) => MATRIX_PEAKS.has(p));
  const text = tc === 0 ? "no" : tc === g.roof_calls ? "yes" : `${tc} of ${g.roof_calls}`;
  const why = tc === 0 ? "no: on a vector roof" : `${text}: on the ${matrix.join(", ")} matrix-engine roof`;
  return { text, title: `Tensor Cores ${why} (${roofs})\n${TENSOR_CORE_HELP}` };
}

function occupancy(g: KernelGroup): HTMLElement {
  if (g.occupancy_pct === null) return h("td", { class: "num muted", title: "no occupancy recorded or computed for its launches" }, fmt.DASH);
  const src = g.longest.occupancy_source ? ` (${g.longest.occupancy_source})` : "";
  return h("td", { class: "num kocc", title: `mean occupancy of ${fmt.count(g.occupancy_calls)} launch${g.occupancy_calls === 1 ? "" : "es"}${src}` },
    `${g.occupancy_pct.toFixed(g.occupancy_pct >= 10 ? 0 : 1)} %`);
}

function boundTitle(g: KernelGroup): string {
  const parts = Object.entries(g.bound_time_us).map(([b, t]) => `${BOUND_LABELS[b] || b} ${fmt.time(t)}`);
  return `time by bound: ${parts.join(", ") || fmt.DASH}\nlongest launch: ${g.longest.bound_reason}\n(click: the evidence)`;
}

/** The cells of a group's row after the expander; ``why`` opens its details. */
export function groupCells(g: KernelGroup, why: (pill: HTMLElement, title: string) => HTMLElement): Child[] {
  const k = g.longest;
  const tc = tensorCores(g);
  const time = fmt.time;
  return [
    nameCell(g.name, g.short_name),
    opCell(k),
    h("td", { class: "kphase" }, g.attention ? [phaseTag(g.phase), h("span", { class: "dir" }, g.direction === "forward" ? "fwd" : "bwd")]
      : h("span", { class: "muted" }, g.kind === "kernel" ? "\u2014" : g.kind), graphBadge(k)),
    h("td", { class: "num kcalls" }, fmt.count(g.calls)),
    h("td", { class: "num ktotal", title: g.share !== null ? `${fmt.pct(g.share)} of the listed kernels' time` : null }, time(g.total_us)),
    h("td", { class: "num kmean", title: `min ${time(g.min_us)} \u00b7 max ${time(g.max_us)}` }, time(g.mean_us)),
    h("td", { class: "num opt kmin" }, time(g.min_us)),
    h("td", { class: "num opt kmax" }, time(g.max_us)),
    h("td", { class: `ktc tc-${tc.text === "yes" ? "yes" : tc.text === "no" ? "no" : "part"}`, title: tc.title }, tc.text),
    occupancy(g),
    h("td", { class: "kbound" }, why(boundPill(g.bound, null, g.bound === "latency" ? k.latency_cause : null, true), boundTitle(g))),
  ];
}

/** A group's details: its figures in a line, a button listing its launches, the longest launch's details. */
export function groupDetails(g: KernelGroup, onLaunches: (g: KernelGroup) => void): HTMLElement {
  const list = h("button", { type: "button", class: "btn small-btn group-launches", title: "list this kernel's launches, one row each" },
    `List its ${fmt.count(g.calls)} launch${g.calls === 1 ? "" : "es"}`);
  list.addEventListener("click", () => onLaunches(g));
  const tc = tensorCores(g);
  return h("div", { class: "group-details" },
    h("p", { class: "small group-line" },
      `${fmt.count(g.calls)} launch${g.calls === 1 ? "" : "es"} \u00b7 ${fmt.time(g.total_us)} in all \u00b7 mean ${fmt.time(g.mean_us)} `
      + `(${fmt.time(g.min_us)}\u2013${fmt.time(g.max_us)}) \u00b7 Tensor Cores ${tc.text} \u00b7 ${counted(g.peaks)} roof `,
      list),
    h("div", { class: "muted small group-longest" }, "Its longest launch:"),
    details(g.longest));
}
