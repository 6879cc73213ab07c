// The JSON of the plugin's routes (see docs/plugin.md and docs/report-schema.md).

export type LoadState = "waiting" | "queued" | "loading" | "ready" | "error";
export type Bound = "memory" | "compute" | "latency" | "unknown";

export type LoadStage = "starting" | "reading" | "analysing" | "memory" | "advice" | "indexing";

/** How far the analysis of a file has got (only while it runs). Bytes are of the file as stored:
 * compressed ones for a gzip file (basis "compressed"). */
export interface LoadProgress {
  stage: LoadStage;
  bytes_read: number;
  bytes_total: number | null;
  fraction: number | null;
  basis: "file" | "compressed";
}

export interface FileEntry {
  file: string;
  path: string;
  worker: string;
  span: string | null;
  size: number;
  mtime: number;
  state: LoadState;
  message: string | null;
  seconds: number | null;
  progress?: LoadProgress;
  device?: string | null;
  steps?: string[];
  attention_time_us?: number | null;
  notices?: string[];
}

export interface Run {
  run: string;
  files: FileEntry[];
  workers: { worker: string; spans: { span: string | null; index: number; file: string }[] }[];
  counts: Partial<Record<LoadState, number>>;
}

export interface Counts {
  waiting: number;
  queued: number;
  loading: number;
  ready: number;
  error: number;
  files: number;
}

export interface RunsResponse {
  logdir: string;
  runs: Run[];
  counts: Counts;
  scanned: boolean;
  scan_error: string | null;
  poll_secs: number;
}

export interface Selection {
  run: string;
  worker?: string | null;
  span?: string | null;
  file?: string | null;
  step?: string | null;
}

export interface Notice {
  code: string;
  message: string;
  fix: string;
}

export interface Device {
  id: number;
  name: string;
  key: string | null;
  label: string;
  peaks: { flops: Record<string, number | null>; memory_bandwidth: number | null };
  basis: string;
  peak_source: Record<string, number>;
  references: string[];
  num_sms: number | null;
  matched_by: string | null;
}

export interface Phase {
  phase: string;
  label: string;
  direction: "forward" | "backward";
  core: boolean;
  time_us: number;
  share: number | null;
  kernels: number;
  instances: number;
  flops: number | null;
  bytes: number | null;
  intensity: number | null;
  achieved_flops_per_s: number | null;
  achieved_bytes_per_s: number | null;
  compute_util: number | null;
  memory_util: number | null;
  bound: Bound;
  bound_time_us: Partial<Record<Bound, number>>;
  cost_coverage: number | null;
  estimated: boolean;
  top_kernels: { name: string; time_us: number }[];
}

export interface Step {
  name: string;
  ts: number;
  dur_us: number;
  gpu_time_us: number;
  attention_time_us: number;
}

/** Hardware counters joined to a kernel (docs/report-schema.md, "Measured counters"). */
export interface Measured {
  source: "ncu" | "cupti";
  file: string | null;
  dram_bytes: number | null;
  flops: number | null;
  dram_pct: number | null;
  tensor_pct: number | null;
  fma_pct: number | null;
  sm_pct: number | null;
  dur_us: number | null;
  tensor_flops: number | null;
  core_flops: number | null;
  row: number | null;
  replaces: string[];
}

export interface Measurements {
  source: "ncu" | "cupti" | null;
  file: string | null;
  kernels_joined: number;
  kernels_total: number;
  rows: number;
  match_rate: number | null;
  window: { steps: string[]; equal_windows: number; first_row: number | null; last_row: number | null } | null;
  notes: string[];
  ranges?: { index: number; name: string; op: string | null; measured: Measured }[];
  ranges_total?: { count: number; flops: number | null; dram_bytes: number | null };
}

export interface Summary {
  path: string;
  status: string;
  trace: { events: number; bytes: number; format: string; record_shapes: boolean; with_stack: boolean;
    profile_memory: boolean; distributed: unknown; base_time_ns: number | null };
  device: Device | null;
  devices: Device[];
  steps: Step[];
  step: string | null;
  gpu_time_us: number;
  gpu_busy_us: number;
  kernel_time_us: number;
  attention_time_us: number;
  attention_share: number | null;
  core_attention_time_us: number;
  projection_time_us: number;
  forward_time_us: number;
  backward_time_us: number;
  fused_time_us: number;
  unfused_core_time_us: number;
  attention_kernels: number;
  instances: number;
  bound_time_us: Record<Bound, number>;
  phases: Phase[];
  notices: Notice[];
  warnings: string[];
  thresholds: { roof_reached: number };
  measurements?: Measurements | null;
}

export interface Kernel {
  id: number;
  name: string;
  kind: string;
  ts: number;
  dur_us: number;
  device: number;
  stream: number;
  step: string | null;
  attention: boolean;
  phase: string | null;
  direction: string;
  core: boolean;
  tag_source: string | null;
  instance: number | null;
  scope: string | null;
  op: string | null;
  cost_op: string | null;
  module: string | null;
  module_path: string | null;
  dtype: string | null;
  flops: number | null;
  bytes: number | null;
  intensity: number | null;
  achieved_flops_per_s: number | null;
  achieved_bytes_per_s: number | null;
  peak: string | null;
  peak_flops_per_s: number | null;
  compute_util: number | null;
  memory_util: number | null;
  bound: Bound;
  bound_reason: string;
  estimated: boolean;
  cost_share: number | null;
  grid: number[] | null;
  block: number[] | null;
  occupancy_pct: number | null;
  shapes?: (number[] | null)[];
  cost_detail?: Record<string, unknown>;
  measured?: Measured | null;
}

export interface KernelsResponse {
  total: number;
  total_time_us: number;
  all: number;
  offset: number;
  limit: number;
  sort: string;
  order: "asc" | "desc";
  rows: Kernel[];
  facets: { phase: string[]; direction: string[]; bound: string[]; kind: string[] };
}

export interface RooflinePoint {
  name: string;
  phase: string | null;
  direction: string;
  dtype: string | null;
  peak: string | null;
  bound: Bound;
  bound_reason: string;
  module_path: string | null;
  op: string | null;
  cost_op: string | null;
  shapes: (number[] | null)[] | null;
  cost_detail: Record<string, unknown> | null;
  estimated: boolean;
  id: number | null;
  kind: string;
  count: number;
  time_us: number;
  flops: number;
  bytes: number;
  intensity: number;
  achieved_flops_per_s: number;
  achieved_bytes_per_s: number;
  compute_util: number | null;
  memory_util: number | null;
  measured?: Measured | null;
}

export interface RooflineResponse {
  device: { name: string; label: string; key: string | null; basis: string; num_sms: number | null };
  roofs: { memory_bandwidth: number | null; compute: Record<string, number> };
  all_compute_roofs: Record<string, number>;
  grouped: boolean;
  scope: string;
  points: RooflinePoint[];
  omitted: { unknown_cost: number; unknown_cost_time_us: number; zero_flops: number; zero_flops_time_us: number; over_limit: number };
  thresholds: { roof_reached: number } | null;
}

export interface CompareSide {
  time_us: number;
  share: number | null;
  kernels: number;
  instances: number;
  flops: number | null;
  bytes: number | null;
  achieved_flops_per_s: number | null;
  achieved_bytes_per_s: number | null;
  compute_util: number | null;
  memory_util: number | null;
  bound: Bound;
  estimated: boolean;
  cost_coverage: number | null;
}

export interface CompareRow {
  phase: string;
  direction: string;
  label: string;
  core: boolean;
  base: CompareSide | null;
  new: CompareSide | null;
  delta: number | null;
  ratio: number | null;
  speedup: number | null;
}

export interface CompareResponse {
  phases: CompareRow[];
  totals: Record<string, { base: number | null; new: number | null; delta: number | null; ratio: number | null; speedup: number | null }>;
  devices: { base: { label: string; name: string; basis: string } | null; new: { label: string; name: string; basis: string } | null };
  notes: string[];
  selection: { base: Selection; new: Selection };
}
