// One colour per phase, used by every chart, legend and table of the dashboard.

export const PHASE_ORDER = ["qkv_proj", "qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul",
  "out_proj", "fused_attention", "rotary", "layout", "other"];

export const PHASE_COLORS: Record<string, string> = {
  qkv_proj: "#4e79a7",
  qk_matmul: "#f28e2b",
  scale: "#edc948",
  mask: "#b07aa1",
  softmax: "#e15759",
  dropout: "#ff9da7",
  pv_matmul: "#59a14f",
  out_proj: "#76b7b2",
  fused_attention: "#9c6ade",
  rotary: "#9c755f",
  layout: "#bab0ac",
  other: "#79706e",
};

export const PHASE_LABELS: Record<string, string> = {
  qkv_proj: "QKV projection",
  qk_matmul: "QK\u1d40 matmul",
  scale: "scale",
  mask: "mask",
  softmax: "softmax",
  dropout: "dropout",
  pv_matmul: "PV matmul",
  out_proj: "output projection",
  fused_attention: "fused attention",
  rotary: "rotary embedding",
  layout: "layout / copies",
  other: "other (in scope)",
};

export const BOUND_COLORS: Record<string, string> = {
  compute: "#1a7f37",
  memory: "#0969da",
  latency: "#bf8700",
  unknown: "#6e7781",
};

export const BOUND_LABELS: Record<string, string> = {
  compute: "compute-bound",
  memory: "memory-bound",
  latency: "latency-bound",
  unknown: "unknown",
};

export function phaseColor(p: string | null | undefined): string {
  return (p && PHASE_COLORS[p]) || "#a0a0a0";
}

export function phaseLabel(p: string | null | undefined): string {
  if (!p) return "not attention";
  return PHASE_LABELS[p] || p;
}
