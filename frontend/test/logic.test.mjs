// Pure logic of the dashboard, run in Node (node --test): the overview strip's figures and
// diagnosis, the advice ranking, the span label, the bound wording. The modules are bundled from
// src/ with esbuild (in memory) and imported from a data: URL; nothing touches a DOM.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as esbuild from "esbuild";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const entry = `
export { context, diagnosis, share, IDLE_DIAGNOSIS } from "./views/strip";
export { rankAdvice, gainText } from "./views/advice";
export { spanLabel, spanDate } from "./format";
export { boundLabel } from "./bound";
export { unknownCostAdvice, graphsSummary } from "./replay";
`;
const out = await esbuild.build({
  stdin: { contents: entry, resolveDir: join(here, "..", "src"), loader: "ts" },
  bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "silent",
  loader: { ".css": "empty" },
});
const m = await import("data:text/javascript;base64," + Buffer.from(out.outputFiles[0].contents).toString("base64"));

const base = { steps: [], step: null, gpu_busy_us: 0, attention_time_us: 0 };

test("a GPU idle most of the step is called CPU/launch-bound", () => {
  const s = { ...base, steps: [{ name: "ProfilerStep#1", dur_us: 1000 }], gpu_busy_us: 200, attention_time_us: 150,
    span_us: 1000, idle_us: 800, compute_busy_us: 200 };
  const c = m.context(s);
  assert.equal(c.idleUs, 800);
  assert.equal(c.spanEstimated, false);
  assert.equal(m.diagnosis(c), "GPU idle 80 % of the step: CPU/launch-bound; attention is not the bottleneck");
});

test("without the engine's span the steps stand in for it, marked as an estimate", () => {
  const s = { ...base, steps: [{ name: "a", dur_us: 600 }, { name: "b", dur_us: 400 }], gpu_busy_us: 300, attention_time_us: 250 };
  const c = m.context(s);
  assert.equal(c.spanUs, 1000);
  assert.equal(c.spanEstimated, true);
  assert.equal(c.idleUs, 700);
  assert.equal(c.stepUs, 500);
  assert.match(m.diagnosis(c), /^GPU idle ~70 %/);
});

test("idle at the threshold is not a diagnosis; small attention is", () => {
  const c = m.context({ ...base, span_us: 1000, idle_us: 1000 * m.IDLE_DIAGNOSIS, gpu_busy_us: 500, attention_time_us: 20 });
  assert.equal(m.diagnosis(c), "Attention is 4 % of GPU work: making it faster gains at most that much");
  const none = m.context({ ...base, span_us: 1000, idle_us: 100, gpu_busy_us: 900, attention_time_us: 300 });
  assert.equal(m.diagnosis(none), null);
});

test("shares use the union of attention intervals when the engine gives it", () => {
  const c = m.context({ ...base, gpu_busy_us: 100, compute_busy_us: 100, attention_time_us: 150, attention_busy_us: 90,
    span_us: 100, idle_us: 0 });
  assert.equal(c.attentionUs, 150);
  assert.equal(c.attentionBusyUs, 90);
  assert.ok(c.attentionBusyUs <= c.busyUs);
});

test("no impossible share: above 100 % or without a basis is unknown", () => {
  assert.equal(m.share(150, 100), null);
  assert.equal(m.share(5, 0), null);
  assert.equal(m.share(null, 10), null);
  assert.equal(m.share(100, 100), 1);
  // GPU work longer than the steps' CPU ranges: the steps are no basis for idle time
  const c = m.context({ ...base, steps: [{ name: "a", dur_us: 100 }], gpu_busy_us: 300, attention_time_us: 200 });
  assert.equal(c.spanUs, null);
  assert.equal(c.idleUs, null);
  assert.equal(m.diagnosis(c), null);
});

test("advice is ranked by estimated gain, unknown gains last by severity", () => {
  const a = (id, gain, severity) => ({ id, estimated_gain_us: gain, severity });
  const ranked = m.rankAdvice([a("x", null, "high"), a("y", 10, "low"), a("z", 500, "medium"), a("w", null, "low")]);
  assert.deepEqual(ranked.map((r) => r.id), ["z", "y", "x", "w"]);
});

test("one span format: a date from the span's timestamp, else the file's time", () => {
  const ns = "1796026345253248264";
  assert.ok(m.spanDate(ns) && m.spanDate(ns).getUTCFullYear() === 2026);
  assert.ok(m.spanDate("1796026345253") && m.spanDate("1796026345253").getUTCFullYear() === 2026);   // ms
  assert.equal(m.spanDate("12345"), null);
  const fromSpan = m.spanLabel(ns, 2);
  const fromFile = m.spanLabel("12345", 3, 1.7e9);
  const shape = /^#\d+ \u00b7 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/;
  assert.match(fromSpan, shape);
  assert.match(fromFile, shape);
  assert.equal(m.spanLabel(null, 4), "#4");
});

test("latency names its cause", () => {
  assert.equal(m.boundLabel("latency", "occupancy"), "latency-bound (low occupancy)");
  assert.equal(m.boundLabel("latency", null), "latency-bound");
  assert.equal(m.boundLabel("memory", "launch"), "memory-bound");
});

const replayTrace = { record_shapes: true, with_stack: true };
const replayGraphs = { launches: 1, replayed_kernels: 193, attributed: { reference: 0, structure: 76, none: 117 },
  reference: null, reference_kind: null };

test("kernels without cost: record_shapes is advised only when the trace lacks shapes", () => {
  assert.match(m.unknownCostAdvice({ trace: { record_shapes: false }, graphs: null }), /record_shapes=True/);
  const replay = m.unknownCostAdvice({ trace: replayTrace, graphs: replayGraphs });
  assert.doesNotMatch(replay, /record_shapes/);
  assert.match(replay, /replayed from CUDA graphs without CPU context have no shapes \(193 in this trace\)/);
  assert.match(replay, /--reference/);
  // shapes recorded, nothing replayed: no flag to advise
  assert.doesNotMatch(m.unknownCostAdvice({ trace: replayTrace, graphs: null }), /record_shapes|--reference/);
  // every replayed kernel got its context from a reference: --reference is not advised again
  const done = { ...replayGraphs, attributed: { reference: 193, structure: 0, none: 0 }, reference: "eager.json", reference_kind: "eager" };
  assert.doesNotMatch(m.unknownCostAdvice({ trace: replayTrace, graphs: done }), /--reference/);
});

test("the graphs block in one line", () => {
  assert.equal(m.graphsSummary(replayGraphs),
    "193 kernels replayed by 1 CUDA-graph launch; context: 76 by their place around attention kernels, 117 by name only.");
  const cap = { ...replayGraphs, launches: 2, attributed: { reference: 193, structure: 0, none: 0 }, reference: "capture", reference_kind: "capture" };
  assert.equal(m.graphsSummary(cap), "193 kernels replayed by 2 CUDA-graph launches; context: 193 from the trace's own graph capture.");
});

test("a gain from GPU idle time is a share of the step, never of attention time", () => {
  const launch = { id: "launch_overhead", estimated_gain_us: 1142.6, removable_us: 5855.8 };
  assert.equal(m.gainText(launch, { attentionUs: 1142.6, spanUs: 9310, steps: 1 }),
    "~1.14 ms saved (12 % of the step) \u00b7 acts on 5.86 ms of GPU idle time");
  const fuse = { id: "fuse_attention", estimated_gain_us: 1370, removable_us: 2200 };
  assert.equal(m.gainText(fuse, { attentionUs: 4230, spanUs: 11600, steps: 1 }),
    "~1.37 ms saved (32 % of attention time) \u00b7 acts on 2.20 ms");
});
