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
export { divisor, baseOf, onBase } from "./timebase";
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

test("without the engine's span the steps stand in for it, marked as an estimate; figures per step", () => {
  const s = { ...base, steps: [{ name: "a", dur_us: 600 }, { name: "b", dur_us: 400 }], gpu_busy_us: 300, attention_time_us: 250 };
  const c = m.context(s);
  assert.equal(c.totalSpanUs, 1000);
  assert.equal(c.spanUs, 500);
  assert.equal(c.spanEstimated, true);
  assert.equal(c.busyUs, 150);
  assert.equal(c.idleUs, 350);
  assert.equal(c.stepUs, 500);
  assert.equal(c.attentionUs, 125);
  assert.match(m.diagnosis(c), /^GPU idle ~70 %/);
});

test("one basis: per-step busy + idle = the step, busy is all GPU activity (communication too)", () => {
  // two steps of 56.5 ms (CPU ranges); the engine's totals over both: busy 22.4, idle 89.7, span 112.1 ms
  const s = { ...base, steps: [{ name: "a", dur_us: 56500 }, { name: "b", dur_us: 56500 }], gpu_busy_us: 22400,
    compute_busy_us: 19400, span_us: 112100, idle_us: 89700, attention_time_us: 3000,
    communication: { time_us: 5000, busy_us: 4000, overlap_with_compute_us: 1000, overlap_with_attention_us: 0, kernels: 4 } };
  const c = m.context(s);
  assert.equal(c.stepUs, 56500);
  assert.equal(c.busyUs, 11200);
  assert.equal(c.computeBusyUs, 9700);
  assert.equal(c.busyUs + c.idleUs, c.spanUs);
  assert.equal(c.spanUs, 56500);
  assert.equal(c.commUs, 2500);
  assert.equal(c.totalSpanUs, 112100);
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

test("advice is ranked by step time saved where known, else by its gain, unknown gains last by severity", () => {
  const a = (id, gain, severity, step) => ({ id, estimated_gain_us: gain, severity, step_gain_us: step });
  const ranked = m.rankAdvice([a("x", null, "high"), a("y", 10, "low"), a("z", 500, "medium", 20), a("w", null, "low"),
    a("v", 100, "high", 300)]);
  assert.deepEqual(ranked.map((r) => r.id), ["v", "z", "y", "x", "w"]);
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

test("a step-time gain is a share of the step, never of attention time; both figures shown", () => {
  const launch = { id: "launch_overhead", gain_basis: "step", estimated_gain_us: 1703.5, step_gain_us: 1703.5,
    gpu_gain_us: null, removable_us: 4804 };
  assert.equal(m.gainText(launch, { attentionUs: 281.3, spanUs: 8390, steps: 1 }),
    "~1.70 ms of step time saved (20 % of the step) \u00b7 acts on 4.80 ms of step time");
  const fuse = { id: "fuse_attention", gain_basis: "gpu", estimated_gain_us: 1370, gpu_gain_us: 1370,
    step_gain_us: 1200, removable_us: 2200 };
  assert.equal(m.gainText(fuse, { attentionUs: 4230, spanUs: 11600, steps: 1 }),
    "~1.37 ms of attention GPU time saved (32 % of attention time) \u00b7 ~1.20 ms of step time \u00b7 acts on 2.20 ms");
  // a report from before gain_basis: launch_overhead's gain was idle time
  const old = { id: "launch_overhead", estimated_gain_us: 1142.6, removable_us: 5855.8 };
  assert.match(m.gainText(old, { attentionUs: 1142.6, spanUs: 9310, steps: 1 }), /of step time saved \(12 % of the step\)/);
});

test("the time base: per step divides time figures by the profiled steps, never shares or counts (#41)", () => {
  const s = { ...base, steps: [{ name: "ProfilerStep#1", dur_us: 1000 }, { name: "ProfilerStep#2", dur_us: 1000 }],
    attention_time_us: 2000, attention_share: 0.4, attention_kernels: 10, span_us: 2000,
    bound_time_us: { compute: 500, memory: 1500, latency: 0, unknown: 0 },
    phases: [{ phase: "softmax", time_us: 800, share: 0.4, kernels: 4, compute_util: 0.3, top_kernels: [{ name: "k", time_us: 400 }] }],
    advice: [
      { id: "fuse_attention", estimated_gain_us: 1000, gpu_gain_us: 1000, step_gain_us: 600,
        per_step: { steps: 2, gpu_gain_us: 500, step_gain_us: 300, basis: "estimated" },
        evidence: { kernels: [{ name: "k", time_us: 400, calls: 8 }], phases: [{ phase: "softmax", time_us: 800 }] } },
      { id: "old", estimated_gain_us: 100 },
    ] };
  assert.equal(m.divisor(s), 2);
  assert.equal(m.divisor({ ...s, step: "ProfilerStep#1" }), 1);
  assert.equal(m.divisor({ ...s, steps: [] }), 1);
  const b = m.baseOf(s, "step");
  assert.equal(b.label, "per step (mean of 2 profiled steps)");
  assert.equal(b.n, 2);
  const p = m.onBase(s, b);
  assert.equal(p.attention_time_us, 1000);
  assert.equal(p.attention_share, 0.4);
  assert.equal(p.attention_kernels, 10);
  assert.deepEqual(p.bound_time_us, { compute: 250, memory: 750, latency: 0, unknown: 0 });
  assert.equal(p.phases[0].time_us, 400);
  assert.equal(p.phases[0].share, 0.4);
  assert.equal(p.phases[0].kernels, 4);
  assert.equal(p.phases[0].top_kernels[0].time_us, 200);
  assert.equal(p.steps, s.steps);
  assert.equal(p.advice[0].estimated_gain_us, 500);
  assert.equal(p.advice[0].step_gain_us, 300);
  assert.equal(p.advice[0].evidence.phases[0].time_us, 400);
  assert.equal(p.advice[0].evidence.kernels[0].time_us, 400);     // launches: the trace's, said so where drawn
  assert.equal(p.advice[1].estimated_gain_us, 100);                // no per_step block: over the trace, said so
  assert.equal(p.advice[1].overTrace, true);
  assert.match(m.gainText(p.advice[1], { attentionUs: 1000, spanUs: 1000, steps: 2, perStep: true }), /over the whole trace/);
  const t = m.baseOf(s, "total");
  assert.equal(t.label, "over the 2 profiled steps");
  assert.equal(m.onBase(s, t), s);
  const none = m.baseOf({ ...s, steps: [] }, "step");
  assert.equal(none.canSwitch, false);
  assert.equal(none.base, "total");
  assert.match(none.why, /no profiler step/);
});
