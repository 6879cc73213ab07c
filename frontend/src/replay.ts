// CUDA-graph replays in words (attention/graphs.py, docs/report-schema.md "CUDA-graph replays").
// A replayed kernel has no CPU op of its own: its context comes from a reference trace (exact), its
// place around an attention kernel (heuristic, no shapes, no cost) or its name alone. The tab says
// which, and gives the advice that fits the trace: --reference for replays, record_shapes=True only
// when the file says shapes were not recorded.

import { Child, h } from "./dom";
import * as fmt from "./format";
import type { GraphAttribution, GraphsBlock, Kernel, Summary } from "./types";

/** How the replayed kernel got its context, one line each (kernel details and badge titles). */
export const GRAPH_LABELS: Record<Exclude<GraphAttribution, null>, string> = {
  reference: "replayed from a CUDA graph; op, module, shapes and cost from the matching kernel of the reference trace (exact)",
  structure: "replayed from a CUDA graph; tagged by its place around an attention kernel (heuristic: no op, shapes or cost)",
  none: "replayed from a CUDA graph; no CPU context: tagged by its name only, no op, shapes or cost",
};

const GRAPH_BADGE: Record<Exclude<GraphAttribution, null>, string> = { reference: "graph \u00b7 ref", structure: "graph \u00b7 place", none: "graph" };

/** Why a kernel is attention (the report's ``tag_source``), in words. */
export const TAG_SOURCE_LABELS: Record<string, string> = {
  module: "nn.Module scope",
  function: "function name",
  annotation: "record_function annotation",
  sdpa_op: "SDPA op",
  pattern: "op name pattern",
  kernel_name: "kernel name",
  graph_reference: "CUDA-graph replay, context from the reference trace",
  graph_structure: "CUDA-graph replay, place around an attention kernel",
  compiled_structure: "compiled code (torch.compile), place around an attention kernel",
};

/** What the user passes, in TensorBoard and in the CLI, to give replayed kernels their context. */
export const REFERENCE_FIX = "pass --reference EAGER_TRACE to tb-attention (the same step run without the graph, or a trace of " +
  "the graph capture); in TensorBoard, keep that trace in the run's directory next to the replay";

/** A compact badge for kernel rows replayed from a CUDA graph (null for others). */
export function graphBadge(k: Pick<Kernel, "graph">): Child {
  if (!k.graph) return null;
  return h("span", { class: `badge graph graph-${k.graph}`, "data-graph": k.graph, title: GRAPH_LABELS[k.graph] }, GRAPH_BADGE[k.graph]);
}

/** Replayed kernels still lacking CPU context (heuristic or name only), 0 when none. */
export function missingContext(g: GraphsBlock | null | undefined): number {
  return g ? (g.attributed.structure || 0) + (g.attributed.none || 0) : 0;
}

/** The line under the roofline when kernels have no FLOPs or bytes: the advice that fits this trace. */
export function unknownCostAdvice(s: Pick<Summary, "trace" | "graphs"> | null | undefined): string {
  if (!s) return "";
  if (s.trace && !s.trace.record_shapes) return " Record input shapes (record_shapes=True) so that FLOPs and bytes can be computed.";
  if (missingContext(s.graphs)) {
    return ` Kernels replayed from CUDA graphs without CPU context have no shapes (${fmt.count(missingContext(s.graphs))} in this trace): ${REFERENCE_FIX}.`;
  }
  return " Shapes were recorded: each kernel's bound reason says what its cost lacks.";
}

/** One line on the graphs block: launches, replayed kernels and how they got their context. */
export function graphsSummary(g: GraphsBlock): string {
  const a = g.attributed;
  const parts = [
    a.reference ? `${fmt.count(a.reference)} from ${g.reference_kind === "capture" ? "the trace's own graph capture" : `the reference ${g.reference || ""}`.trim()}` : "",
    a.structure ? `${fmt.count(a.structure)} by their place around attention kernels` : "",
    a.none ? `${fmt.count(a.none)} by name only` : "",
  ].filter(Boolean);
  return `${fmt.count(g.replayed_kernels)} kernels replayed by ${fmt.count(g.launches)} CUDA-graph launch${g.launches === 1 ? "" : "es"}; ` +
    `context: ${parts.join(", ")}.`;
}
