// Generated from tb_attention_plugin/attention/vocabulary.py by
// `python -m tb_attention_plugin.attention.vocabulary`: edit that module, not this file.

export const PHASE_ORDER: readonly string[] = ["qkv_proj", "qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "out_proj", "fused_attention", "rotary", "layout", "other", "position_bias", "additive_score"];
export const FLOW_ORDER: readonly string[] = ["qkv_proj", "rotary", "qk_matmul", "additive_score", "scale", "position_bias", "mask", "softmax", "dropout", "pv_matmul", "fused_attention", "out_proj", "layout", "other"];
export const CORE_PHASES: readonly string[] = ["qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "fused_attention", "position_bias", "additive_score"];
export const PHASE_LABELS: Record<string, string> = {"qkv_proj": "QKV projection", "qk_matmul": "QK^T matmul", "scale": "scale", "mask": "mask", "softmax": "softmax", "dropout": "dropout", "pv_matmul": "PV matmul", "out_proj": "output projection", "fused_attention": "fused attention", "rotary": "rotary embedding", "layout": "layout / copies", "other": "other (in attention scope)", "position_bias": "position bias", "additive_score": "additive score"};
export const PHASE_COLORS: Record<string, string> = {"qkv_proj": "#4e79a7", "qk_matmul": "#f28e2b", "scale": "#edc948", "mask": "#b07aa1", "softmax": "#e15759", "dropout": "#ff9da7", "pv_matmul": "#59a14f", "out_proj": "#76b7b2", "fused_attention": "#9c6ade", "rotary": "#9c755f", "layout": "#bab0ac", "other": "#79706e", "position_bias": "#d37295", "additive_score": "#86bcb6"};
export const BOUNDS: readonly string[] = ["memory", "compute", "latency", "unknown"];
export const BOUND_LABELS: Record<string, string> = {"memory": "memory-bound", "compute": "compute-bound", "latency": "latency-bound", "unknown": "unknown"};
export const BOUND_COLORS: Record<string, string> = {"memory": "#0969da", "compute": "#1a7f37", "latency": "#bf8700", "unknown": "#6e7781"};
export const DIRECTIONS: readonly string[] = ["forward", "backward"];
