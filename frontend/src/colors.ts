// Phase and bound colours and labels for every chart, legend and table of the dashboard. The
// values come from the one vocabulary (tb_attention_plugin/attention/vocabulary.py, generated
// into vocabulary.ts): the dashboard says what the CLI and the JSON say.

import { BOUND_COLORS, BOUND_LABELS, PHASE_COLORS, PHASE_LABELS, PHASE_ORDER } from "./vocabulary";

export { BOUND_COLORS, BOUND_LABELS, PHASE_COLORS, PHASE_LABELS, PHASE_ORDER };

export function phaseColor(p: string | null | undefined): string {
  return (p && PHASE_COLORS[p]) || "#a0a0a0";
}

export function phaseLabel(p: string | null | undefined): string {
  if (!p) return "not attention";
  return PHASE_LABELS[p] || p;
}
