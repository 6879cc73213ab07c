// The JSON of the plugin's routes (see docs/plugin.md and docs/report-schema.md).

/** "incomplete": the file ends early and stayed so past the grace period (server/loader.py).
 * "summarized": a file of a run of many workers whose rank summary was cached; its report is
 * loaded when a route first asks for it (the file's attention_time_us, device and notices come
 * from that summary; no steps). */
export type LoadState = "waiting" | "queued" | "loading" | "ready" | "error" | "incomplete" | "summarized";
export type Bound = "memory" | "compute" | "latency" | "unknown";
/** Why a latency-bound kernel reached neither roof (engine field ``latency_cause``). */
export type LatencyCause = "launch" | "occupancy" | "stalled" | null;

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
  /** The file ends early (held back while it may grow, or incomplete): ``partial=1`` analyses
   * the events before the cut. */
  truncated?: boolean;
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
  /** At least two distinct ranks (ranks/job.py): the Ranks view is for these runs. */
  job: boolean;
  job_reason: string;
}

export interface Counts {
  waiting: number;
  queued: number;
  loading: number;
  ready: number;
  error: number;
  incomplete?: number;
  summarized?: number;
  files: number;
}

export interface RunsResponse {
  logdir: string;
  runs: Run[];
  counts: Counts;
  scanned: boolean;
  scan_error: string | null;
  skipped_links?: string[];       // symlinked directories / files leading out of the logdir: not read
  poll_secs: number;
}

export interface Selection {
  run: string;
  worker?: string | null;
  span?: string | null;
  file?: string | null;
  step?: string | null;
  /** The events before the cut of a truncated file (the route parameter ``partial=1``). */
  partial?: boolean;
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
  /** Table peaks a kernel with exact FLOPs beat, raised to the highest achieved rate
   * (docs/report-schema.md, device; docs/cost-model.md, "No utilisation above 1"). */
  roof_adjustments?: RoofAdjustment[];
}

export interface RoofAdjustment {
  peak: string;                 // a FLOP key or "memory_bandwidth"
  from: number;
  to: number;
  evidence?: "recorded" | "exact_flops" | "measured_dram";
  to_basis?: "datasheet" | "achieved";
  reason: string;
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
  latency_cause?: LatencyCause;
  latency_cause_time_us?: Partial<Record<string, number>>;
  sources?: (Source & { time_us: number })[];
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

/** A finding of the report's ``advice`` block (docs/report-schema.md#advice). */
export interface AdvicePhase {
  phase: string;
  direction: string;
  time_us: number;
  kernels?: number;
  memory_util?: number | null;
  compute_util?: number | null;
  bound_time_us?: Partial<Record<Bound, number>>;
}

export interface AdviceKernel {
  name: string;
  phase: string | null;
  direction: string;
  calls?: number;
  time_us: number;
  bound?: Bound;
  memory_util?: number | null;
  compute_util?: number | null;
  source?: Source | null;
}

/** The evidence keys every rule may give. */
export interface AdviceEvidence {
  time_us?: number;
  share_of_attention?: number;
  gain_source?: "measured";          // the gain comes from a replay beside the trace (replay/findings.py)
  phases?: AdvicePhase[];
  kernels?: AdviceKernel[];
}

export interface Advice {
  id: string;
  severity: "high" | "medium" | "low";
  title: string;
  detail: string;
  /** The numbers (docs/report-schema.md#advice); rule-specific keys beside these (read as AdviceEvidence). */
  evidence: Record<string, unknown>;
  estimated_gain_us: number | null;
  removable_us?: number | null;
  how: string;
  /** "gpu": estimated_gain_us is attention GPU time saved; "step": wall-clock step time saved. */
  gain_basis?: "gpu" | "step";
  /** Both figures, each null where it cannot be estimated (docs/report-schema.md#advice). */
  gpu_gain_us?: number | null;
  step_gain_us?: number | null;
  /** The fix as code, and the twin pair that validates the rule. */
  fix_code?: string;
  /** The twin pair that confirms the rule's gain within its window; null where it does not (then see twin_check). */
  twin?: string | null;
  twin_check?: { pair: string | null; ratio: number | null; verdict: string; ok: boolean } | null;
  /** The savings per profiled step, and whether the GPU figure was measured (a replay) or estimated. */
  per_step?: { steps: number; gpu_gain_us: number | null; step_gain_us: number | null; basis: "measured" | "estimated" };
}

/** One rule of ``advice_checks``: whether it fired, and why not. */
export interface AdviceCheck {
  id: string;
  title: string;
  basis: "gpu" | "step";
  twin: string | null;
  fired: boolean;
  reason: string | null;
  findings?: string[];
}

export interface BackendRow {
  backend: string;
  /** the attention library a "library" or "other fused" row's kernels belong to ("FlashAttention-3"), else null */
  family?: string | null;
  label: string;
  time_us: number;
  kernels: number;
  forward_us: number;
  backward_us: number;
}

/** The innermost user frame that launched a kernel (recorded with with_stack=True). */
export interface Source {
  file: string;
  line: number | null;
  function?: string | null;
}

export interface Communication {
  time_us: number;
  busy_us: number;
  overlap_with_compute_us: number;
  overlap_with_attention_us: number;
  kernels: number;
}

export interface StreamRow {
  device: number;
  stream: number;
  busy_us: number;
  kernels: number;
  communication: boolean;
}

export interface Summary {
  path: string;
  status: string;
  span_us?: number | null;
  idle_us?: number | null;
  compute_busy_us?: number | null;
  communication?: Communication | null;
  streams?: StreamRow[];
  advice?: Advice[];
  advice_checks?: AdviceCheck[];
  attention_busy_us?: number | null;
  latency_cause_time_us?: Partial<Record<string, number>>;
  attention_backends?: BackendRow[];
  graphs?: GraphsBlock | null;
  trace: { events: number; bytes: number; format: string; record_shapes: boolean; with_stack: boolean;
    truncated?: boolean; partial?: boolean;
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
  sites?: Site[];
  flops_ledger?: FlopsLedger | null;
  boundary?: Boundary | null;
  replay?: ReplayBlock | null;
}

/** Attention MFU on each basis (model.py): null when unknown or when the count exceeds the roof. */
export interface Mfu {
  useful: number | null;
  executed: number | null;
  dense: number | null;
}

export interface SiteShape {
  b?: number;
  h?: number;
  hk?: number;
  sq?: number;
  sk?: number;
  d?: number;
  dv?: number;
  mask?: string;
  inputs?: string;                   // no geometry: the longest core kernel's recorded inputs
  calls: number;
}

/** One attention site (report ``sites``): the calls one place of the model makes. */
export interface Site {
  id: number;
  name: string;
  kind: "annotation" | "module" | "source" | "op";
  calls: number;
  layers: number | null;
  time_us: number | null;
  forward_us: number | null;
  backward_us: number | null;
  core_us: number | null;
  share: number | null;
  kernels: number;
  shapes: SiteShape[];
  dtype: string | null;
  backends: { backend: string; label: string; time_us: number | null }[];
  bound: Bound;
  bound_time_us: Partial<Record<Bound, number>>;
  flops: number | null;
  bytes: number | null;
  cost_coverage: number | null;
  useful: number | null;
  executed: number | null;
  dense: number | null;
  mfu: Mfu;
  /** where the site sits on the roofline: FLOPs per DRAM byte, the roof's side of the ridge, and the
   * share of that roof its kernels reach (two sites of one bound label can sit far apart) */
  roofline: { intensity: number | null; side: "memory" | "compute" | null; roof_share: number | null } | null;
  source: string | null;
  top_finding: { id: string; severity: string; title: string } | null;
}

/** One dtype's roof in the HFU: its kernels' FLOPs against that roof (FP8 on its own measured roof). */
export interface HfuRoof {
  peak_flops_per_s: number;
  kernels: number;
  flops: number;
  time_us: number;
  roof_time_us: number;
  utilization: number | null;
}

export interface Hfu {
  value: number | null;
  flops: number | null;
  roof_time_us: number | null;
  span_us: number | null;
  by_roof?: Record<string, HfuRoof>;
  exceeds_peak?: boolean;
  upper_bound?: boolean;
  note?: string;
}

/** The ledger's totals over a set of calls: the whole trace, one site, one step. */
export interface LedgerTotals {
  useful: number | null;
  executed: number | null;
  dense: number | null;
  useful_exact: boolean;
  executed_upper_bound: boolean;
  useful_low?: number;
  time_us: number | null;
  costed_time_us: number | null;
  mfu: Mfu;
  exceeds_peak?: string[];
}

export type LedgerSite = LedgerTotals & { site: number };

export type LedgerStep = LedgerTotals & { name: string, hfu: Hfu };

export interface LedgerCall {
  call: number;
  site: number;
  direction: "forward" | "backward";
  step: string | null;
  backend: string | null;
  op: string | null;
  shapes: { b: number; h: number; hk: number; sq: number; sk: number; d: number; dv: number;
    lengths?: string; total_q?: number | null; total_k?: number | null;
    block?: { q_block: number; kv_block: number; blocks: number | null;
      visited?: number; full?: number | null; source?: string } } | null;
  mask: string | null;
  useful: number | null;
  useful_low?: number;
  executed: number | null;
  dense: number | null;
  useful_exact: boolean;
  executed_basis: string | null;
  tile: number[] | null;
  time_us: number | null;
  peak_flops_per_s: number | null;
  mfu: Mfu;
  exceeds_peak?: string[];
}

/** The FLOPs ledger (report ``flops_ledger``; docs/cost-model.md, *The FLOPs ledger*). */
export type FlopsLedger = LedgerTotals & {
  hfu: Hfu,
  peaks: Record<string, number>,
  formula: string,
  estimated: boolean,
  sites: LedgerSite[],
  steps: LedgerStep[],
  calls_total: number,
  calls: LedgerCall[],
};

export interface BoundaryItem {
  role: string;
  kernels: number;
  time_us: number | null;
  bytes: number | null;
}

export interface BoundaryFusion {
  id: string;
  label: string;
  calls: number;
  removable_bytes: number | null;
  removable_us: number | null;
  estimated_gain_us: number | null;
}

export interface BoundaryCall {
  call: number;
  site: number;
  complete: boolean;
  costed: boolean;
  next: { name: string | null; op: string | null; module: string | null } | null;
  bytes: number | null;
  time_us: number | null;
  removable_bytes: number | null;
  estimated_gain_us: number | null;
  items: BoundaryItem[];
  fusions: string[];
}

/** The FFN boundary (report ``boundary``; memory/boundary.py): attention's output to the next matmul. */
export interface Boundary {
  calls: number;
  complete_calls: number;
  bytes: number | null;
  time_us: number | null;
  removable_bytes: number | null;
  removable_us: number | null;
  estimated_gain_us: number | null;
  estimated: boolean;
  bandwidth: number | null;
  bandwidth_fraction: number;
  roles: BoundaryItem[];
  fusions: BoundaryFusion[];
  calls_listed: number;
  per_call: BoundaryCall[];
}

/** What-if replay (replay/, docs/report-schema.md#replay): the distinct attention calls a replay
 * script rebuilds, and the backend times of a ``*.replay.json`` beside the trace. */
export interface ReplayBlock {
  calls: ReplayCall[];
  omitted: number;
  unsupported: { scope: string; reason: string; calls: number }[];
  file: string | null;
  measured: ReplayMeasured | null;
  warnings: string[];
}

export interface ReplayCall {
  id: string;
  kind: "sdpa" | "decode" | "varlen" | "eager" | "mha" | "flex";
  op: string;
  q_shape: number[];
  k_shape: number[];
  v_shape: number[];
  q_stride: number[] | null;
  k_stride: number[] | null;
  v_stride: number[] | null;
  dtype: string | null;
  causal: boolean | null;
  dropout_p: number;
  scale: number | null;
  enable_gqa: boolean;
  mask: Record<string, unknown> | null;
  directions: string[];
  count: number;
  trace_time_us: number;
  backends: string[];
  trace_backend: string | null;
  per_call_us: { forward: number | null; backward: number | null };
  instances: number[];
  detail: Record<string, unknown>;
  notes: string[];
  replayed?: ReplayedCall;
}

export interface ReplayedCall {
  basis: "kernel" | "event";
  trace_backend: string | null;
  backends: ReplayedBackend[];
  best: string | null;
  speedup: number | null;
  error?: string;
}

export interface ReplayedBackend {
  backend: string;
  label: string;
  status: "ok" | "refused" | "error" | "skipped";
  reason: string | null;
  forward_us: number | null;
  backward_us: number | null;
  kernel_forward_us: number | null;
  kernel_backward_us: number | null;
  error_vs_math: { forward: number | null; backward: number | null } | null;
  check: string | null;
  first_run_s: number | null;
  total_us: number | null;
}

export interface ReplayMeasured {
  device: string | null;
  torch: string | null;
  cuda: string | null;
  created: string | null;
  scaled_down: boolean;
  calls_matched: number;
  calls_in_file: number;
  unmatched_ids: string[];
  used_for_advice: boolean;
  not_used_because: string | null;
}

/** CUDA-graph replays (attention/graphs.py): how the replayed kernels got their CPU context. */
export interface GraphsBlock {
  launches: number;
  replayed_kernels: number;
  attributed: { reference: number; structure: number; none: number };
  reference: string | null;          // path of the reference trace, "capture" for the trace's own capture
  reference_kind: "eager" | "capture" | null;
}

/** How a kernel replayed from a CUDA graph got its context; null when it was not replayed. */
export type GraphAttribution = "reference" | "structure" | "none" | null;

export interface Kernel {
  id: number;
  name: string;
  /** ``name`` as the page shows it: the CLI's shortening (server/names.py). */
  short_name: string;
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
  site?: string | null;
  op: string | null;
  cost_op: string | null;
  module: string | null;
  module_path: string | null;
  dtype: string | null;
  flops: number | null;
  bytes: number | null;
  intensity: number | null;
  achieved_flops_per_s: number | null;   // null for dense upper bounds: see upper_bound_*_per_s
  achieved_bytes_per_s: number | null;
  upper_bound_flops_per_s?: number | null;  // a dense upper bound's rates (FlexAttention): "≤", never achieved
  upper_bound_bytes_per_s?: number | null;
  peak: string | null;
  peak_flops_per_s: number | null;
  compute_util: number | null;
  memory_util: number | null;              // null for a bytes-model miss (bytes_over_roof)
  bytes_over_roof?: number | null;          // estimated DRAM traffic over the roof: the bytes estimate is too high
  bound: Bound;
  bound_reason: string;
  latency_cause?: LatencyCause;
  source?: Source | null;
  estimated: boolean;
  upper_bound?: boolean;
  graph?: GraphAttribution;
  occupancy_source?: "recorded" | "theoretical" | null;
  waves?: number | null;
  cost_share: number | null;
  grid: number[] | null;
  block: number[] | null;
  occupancy_pct: number | null;
  shapes?: (number[] | null)[];
  cost_detail?: Record<string, unknown>;
  measured?: Measured | null;
}

export interface KernelsResponse {
  /** the kernel name ``name_of=<id>`` resolved to */
  named?: string;
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

/** One row of the kernel table grouped by kernel (``/kernels?group=1``, server/groups.py): the
 * launches of one (kernel name, phase, direction). */
export interface KernelGroup {
  /** the longest launch's id (one per group) */
  id: number;
  name: string;
  short_name: string;
  kind: string;
  attention: boolean;
  phase: string | null;
  direction: string;
  calls: number;
  total_us: number;
  mean_us: number;
  min_us: number;
  max_us: number;
  share: number | null;
  /** launches on a matrix-engine (Tensor Core) roof, of ``roof_calls`` with an arithmetic roof */
  tensor_core_calls: number;
  roof_calls: number;
  /** launches per roof (``peak``) and per dtype */
  peaks: Record<string, number>;
  dtypes: Record<string, number>;
  occupancy_pct: number | null;
  occupancy_calls: number;
  /** the bound holding most of the group's time */
  bound: Bound;
  bound_time_us: Partial<Record<Bound, number>>;
  /** the longest launch: its source, op and details stand for the group */
  longest: Kernel;
}

export interface KernelGroupsResponse {
  /** the kernel name ``name_of=<id>`` resolved to */
  named?: string;
  grouped: boolean;
  total: number;
  launches: number;
  total_time_us: number;
  all: number;
  offset: number;
  limit: number;
  sort: string;
  order: "asc" | "desc";
  rows: KernelGroup[];
  facets: { phase: string[]; direction: string[]; bound: string[]; kind: string[] };
}

export interface RooflinePoint {
  name: string;
  short_name: string;
  phase: string | null;
  direction: string;
  dtype: string | null;
  peak: string | null;
  bound: Bound;
  bound_reason: string;
  latency_cause?: LatencyCause;
  source?: Source | null;
  module_path: string | null;
  op: string | null;
  cost_op: string | null;
  shapes: (number[] | null)[] | null;
  cost_detail: Record<string, unknown> | null;
  estimated: boolean;
  upper_bound?: boolean;           // FLOPs and bytes are a dense upper bound: figures carry "\u2264"
  id: number | null;
  /** a kernel of this name (a group's longest launch): ``/kernels?name_of=`` */
  name_id?: number | null;
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
  latency_cause: LatencyCause;
  latency_cause_time_us: Partial<Record<string, number>>;
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

export interface CompareDelta {
  base: number | null;
  new: number | null;
  delta: number | null;
  delta_pct?: number | null;
  ratio: number | null;
  speedup: number | null;
}

export interface CompareSectionSide {
  time_us: number;
  kernels: number;
  parts: { phase: string; label: string; time_us: number; bound: Bound }[];
  fused_time_us?: number;
  unfused_time_us?: number;
  implementation?: "fused" | "unfused" | "mixed";
}

export interface CompareSection {
  section: string;
  direction: string;
  label: string;
  summary: string;
  base: CompareSectionSide | null;
  new: CompareSectionSide | null;
  delta: number | null;
  delta_pct: number | null;
  ratio: number | null;
  speedup: number | null;
}

export interface CompareGroupSide {
  time_us: number;
  calls: number | null;
  names: string[];
  distinct_names: number;
}

export interface CompareGroup {
  group: string;
  phase: string;
  label: string;
  direction: string;
  base: CompareGroupSide | null;
  new: CompareGroupSide | null;
  delta: number | null;
  delta_pct: number | null;
  ratio: number | null;
  speedup: number | null;
}

export interface CompareAdviceItem {
  id: string;
  title: string;
  estimated_gain_us: number | null;
  severity?: string;
  gain_basis?: "gpu" | "step" | null;
  gpu_gain_us?: number | null;
  step_gain_us?: number | null;
}

/** The step-time side of a comparison's verdict (compare._step_change). */
export interface CompareStep {
  span_us: CompareDelta;
  idle_us: { base: number | null; new: number | null; delta: number | null; delta_pct: number | null };
  changed: boolean;
  faster: "new" | "base" | null;
  not_attention: boolean;
}

export interface CompareSideInfo {
  label: string;
  paths: string[];
  traces: number;
  steps: number;
  step: string | null;
  device: { label: string; name: string; basis: string } | null;
  backend?: string | null;
  partial?: boolean;
  kernel_groups_source?: string;
}

export interface CompareResponse {
  base?: CompareSideInfo;
  new?: CompareSideInfo;
  verdict?: { attention_time_us: CompareDelta; faster: "new" | "base" | "same" | null; summary: string; step?: CompareStep };
  normalization?: { mode: string; unit: string; base_steps: number; new_steps: number; base_divisor: number; new_divisor: number };
  sections?: CompareSection[];
  kernel_groups?: CompareGroup[];
  advice?: { base: CompareAdviceItem[]; new: CompareAdviceItem[]; only_base: string[]; only_new: string[] };
  backends?: { base: BackendRow[]; new: BackendRow[]; base_label: string; new_label: string; changed: boolean };
  phases: CompareRow[];
  totals: Record<string, CompareDelta>;
  devices: { base: { label: string; name: string; basis: string } | null; new: { label: string; name: string; basis: string } | null };
  notes: string[];
  selection: { base: Selection; new: Selection };
}

/** /overview: one row per run (server/overview.py). */
export interface OverviewRow {
  run: string;
  file: string;
  files: number;
  state: LoadState;
  message: string | null;
  status?: string;
  device?: string | null;
  steps?: number;
  attention_time_us?: number;
  attention_share?: number | null;
  gpu_busy_us?: number | null;
  compute_busy_us?: number | null;
  span_us?: number | null;
  idle_us?: number | null;
  top_phase?: { phase: string; label: string; direction: string; time_us: number; share: number | null } | null;
  bound_time_us?: Record<Bound, number>;
  notices?: { code: string; message: string }[];
  advice?: number;
  /** The same figures per step, on the strip's one basis (busy + idle = step). */
  per_step?: { steps: number; step_us: number | null; gpu_busy_us: number; compute_busy_us: number | null;
    idle_us: number | null; attention_time_us: number };
  top_advice?: { id: string; title: string; severity: string; estimated_gain_us: number | null;
    gain_basis?: "gpu" | "step" | null; step_gain_us?: number | null;
    per_step?: { steps: number; gpu_gain_us: number | null; step_gain_us: number | null; basis: "measured" | "estimated" } | null } | null;
  partial?: boolean;
  job?: OverviewJob;
}

/** A multi-rank run's line in the overview (server/overview.py, job_row): the Ranks view's rule. */
export interface OverviewJob {
  state: "ready" | "partial";
  ranks: number;
  median_us: number | null;
  max_us: number | null;
  max_over_median: number | null;
  min_ranks: number;
  stragglers: { rank: number | null; worker: string; excess_pct: number }[];
  errors: number;
}

/** /summary: the report without its kernel rows, and the page's names of the kernels it names. */
export interface SummaryResponse {
  state: "ready";
  selection: Selection;
  seconds: number | null;
  summary: Summary;
  short_names: Record<string, string>;
}

/** /timeline: runs of GPU activity per lane (device, stream), times relative to t0 (server/timeline.py). */
export interface TimelineLane {
  device: number;
  stream: number;
  kernels: number;
  kernels_total: number;
  busy_us: number;
  attention_us: number;
  runs: { start: number[]; end: number[]; cat: number[]; n: number[]; id: number[]; busy: number[] };
  calls: { start: number[]; end: number[]; n: number[] };
}

export interface TimelineResponse {
  t0: number;
  t1: number;
  width: number;
  px_us: number;
  extent: [number, number];
  categories: string[];
  lanes: TimelineLane[];
  steps: { name: string; t0: number; t1: number; kernels: number }[];
}
