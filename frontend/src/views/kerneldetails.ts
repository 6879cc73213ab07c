// A kernel launch's cells and details, shared by the kernel table's two modes (every launch; one
// row per kernel, whose longest launch stands for it: views/kernelgroups.ts).

import { boundLabel, CAUSE_HELP, latencyWhy } from "../bound";
import { Child, h } from "../dom";
import * as fmt from "../format";
import { shortName } from "../names";
import { GRAPH_LABELS, TAG_SOURCE_LABELS } from "../replay";
import type { Kernel, Source } from "../types";
import { boundPill, estBadge, kv, measuredBadge, measuredText, sourceTag } from "../widgets";

export function sourceText(src: Source | null | undefined): string {
  if (!src) return "";
  return `${src.file}${src.line ? `:${src.line}` : ""}`;
}

/** The kernel's name cell: the short name, the whole one in the title. */
export function nameCell(name: string, short: string | null | undefined): HTMLElement {
  return h("td", { class: "kname" }, h("div", { class: "mono ellipsis", title: name }, shortName(name, short)));
}

/** The op cell: the launching op, its module path and its source (the file:line never cut). */
export function opCell(k: Kernel): HTMLElement {
  return h("td", { class: "kop" },
    h("div", { class: "mono ellipsis small", title: k.op || "" }, k.op || fmt.DASH),
    k.module_path ? h("div", { class: "muted small ellipsis", title: k.module_path }, k.module_path) : null,
    k.source ? sourceTag(k.source, "small") : null);
}

export function details(k: Kernel): HTMLElement {
  const cd = k.cost_detail ? Object.entries(k.cost_detail).map(([a, b]) => `${a}=${typeof b === "object" ? JSON.stringify(b) : String(b)}`).join(", ") : null;
  const short = shortName(k.name, k.short_name);
  return h("div", { class: "kernel-details" },
    h("div", { class: "mono kernel-short" }, short),
    short !== k.name ? h("details", { class: "full-name" }, h("summary", null, `full name (${fmt.count(k.name.length)} characters)`),
      h("div", { class: "mono wrap small" }, k.name)) : null,
    kv([
      ["bound", [boundPill(k.bound, null, k.latency_cause), " ", k.bound_reason]],
      ...(k.bound === "latency" ? [["latency-bound means", latencyWhy(k.latency_cause, k.compute_util, k.memory_util, null, k.estimated)] as [string, Child]] : []),
      ...(k.source ? [["source", [sourceTag(k.source), h("span", { class: "muted small" }, ` ${sourceText(k.source)}`)]] as [string, Child]] : []),
      ...(k.measured ? [["counters", [measuredBadge(k.measured), " ", measuredText(k.measured)]] as [string, Child]] : []),
      ["op / cost op", `${k.op || fmt.DASH} / ${k.cost_op || fmt.DASH}`],
      ["module", k.module_path || fmt.DASH],
      ["attention scope", k.scope ? `${k.scope} (${TAG_SOURCE_LABELS[k.tag_source || ""] || k.tag_source || "?"})`
        : k.attention && k.tag_source ? `by ${TAG_SOURCE_LABELS[k.tag_source] || k.tag_source}` : fmt.DASH],
      ...(k.graph ? [["CUDA graph", GRAPH_LABELS[k.graph]] as [string, Child]] : []),
      ["shapes", fmt.shape(k.shapes)],
      ["cost inputs", cd || fmt.DASH],
      ["dtype / roof", `${k.dtype || fmt.DASH} / ${k.peak ? `${k.peak} ${fmt.flopRate(k.peak_flops_per_s)}` : fmt.DASH}`],
      ["FLOPs / bytes", [`${fmt.cost(fmt.flops(k.flops), k.estimated, k.upper_bound)} / ${fmt.cost(fmt.bytes(k.bytes), k.estimated, k.upper_bound)} \u00b7 ${fmt.intensity(k.intensity)}`, estBadge(k.estimated),
        k.cost_share !== null && k.cost_share < 1 ? ` (${fmt.pct(k.cost_share)} of the op's cost)` : ""]],
      ["launch", k.grid ? `grid [${k.grid.join(", ")}] \u00b7 block [${(k.block || []).join(", ")}] \u00b7 occupancy ${k.occupancy_pct ?? fmt.DASH} %`
        + `${k.occupancy_source ? ` (${k.occupancy_source})` : ""}${k.waves !== null && k.waves !== undefined ? ` \u00b7 ${k.waves.toFixed(2)} waves` : ""}` : k.kind],
      ...(k.upper_bound ? [["cost", "FLOPs and bytes are a dense upper bound (the mask's sparsity is not in the trace): utilisations are upper bounds"] as [string, Child]] : []),
      ...(k.bound === "latency" && k.latency_cause ? [["latency cause", `${boundLabel(k.bound, k.latency_cause)}: ${CAUSE_HELP[k.latency_cause] || ""}`] as [string, Child]] : []),
      ["step / stream", `${k.step || fmt.DASH} / device ${k.device}, stream ${k.stream}`],
    ]));
}
