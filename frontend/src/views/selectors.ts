// Run / worker / span / step pickers, shared by the run view and both sides of the comparison.

import { h } from "../dom";
import * as fmt from "../format";
import type { FileEntry, Run, RunsResponse, Selection } from "../types";

const STATE_SUFFIX: Record<string, string> = {
  waiting: " (waiting)",
  queued: " (queued)",
  loading: " (analysing\u2026)",
  error: " (failed)",
  incomplete: " (incomplete)",
  summarized: "",          // its rank summary is cached: the report loads when the file is picked
  ready: "",
};

export function fileOf(runs: RunsResponse | null, sel: Selection | null): FileEntry | null {
  if (!runs || !sel) return null;
  const run = runs.runs.find((r) => r.run === sel.run);
  if (!run) return null;
  return run.files.find((f) => f.file === sel.file) || null;
}

/** Pick a file for a run: the given worker/span if they exist, else the first worker's latest span. */
export function resolve(runs: RunsResponse, want: Selection | null, fallbackRun?: string): Selection | null {
  let run: Run | undefined = runs.runs.find((r) => r.run === want?.run);
  if (!run) run = runs.runs.find((r) => r.run === fallbackRun) || runs.runs[0];
  if (!run) return null;
  const sameRun = want && want.run === run.run;
  // a file named in the URL carries its worker and span
  const byFile = sameRun && want!.file ? run.workers.find((w) => w.spans.some((sp) => sp.file === want!.file)) : undefined;
  if (byFile && want) want = { ...want, worker: byFile.worker, span: byFile.spans.find((sp) => sp.file === want!.file)!.span };
  let worker = run.workers.find((w) => sameRun && w.worker === want!.worker);
  if (!worker) {
    const readyWorkers = run.workers.filter((w) => w.spans.some((sp) => run!.files.find((f) => f.file === sp.file)?.state === "ready"));
    worker = readyWorkers[0] || run.workers[0];
  }
  if (!worker) return null;
  let span = worker.spans.find((sp) => sameRun && want!.worker === worker!.worker && sp.span === (want!.span ?? null));
  if (!span) span = worker.spans[worker.spans.length - 1];
  const file = run.files.find((f) => f.file === span!.file);
  const keepStep = sameRun && want!.file === span.file && want!.step && file?.steps?.includes(want!.step);
  const out: Selection = { run: run.run, worker: worker.worker, span: span.span, file: span.file, step: keepStep ? want!.step : null };
  if (sameRun && want!.partial && (!want!.file || want!.file === span.file)) out.partial = true;   // the events before a cut
  return out;
}

/** A picker's select; ``full``: an option's whole text where the label shortens it (its title, and the
 * select's while it is picked). */
function mk(id: string, label: string, opts: [string, string][], value: string, onChange: (v: string) => void, disabled = false,
  full?: (v: string) => string): HTMLElement {
  const sel = h("select", { id, disabled: disabled || opts.length <= 1 });
  for (const [v, l] of opts) sel.appendChild(h("option", { value: v, title: full ? full(v) : null }, l));
  sel.value = value;
  if (full) sel.title = full(value);
  sel.addEventListener("change", () => onChange(sel.value));
  return h("label", { class: "field", for: id }, h("span", { class: "field-label" }, label), sel);
}

export function picker(runs: RunsResponse, sel: Selection, onChange: (s: Selection) => void, idPrefix: string): HTMLElement {
  const run = runs.runs.find((r) => r.run === sel.run)!;
  const runOpts: [string, string][] = runs.runs.map((r) => {
    const bad = r.files.length && r.files.every((f) => f.state === "error");
    const cut = r.files.length && r.files.every((f) => f.state === "incomplete");
    const pend = r.files.some((f) => f.state !== "ready" && f.state !== "error" && f.state !== "incomplete" && f.state !== "summarized");
    return [r.run, `${fmt.runLabel(r.run)}${bad ? " (failed)" : cut ? " (incomplete)" : pend ? " (loading)" : ""}`];
  });
  const worker = run.workers.find((w) => w.worker === sel.worker) || run.workers[0];
  const workerOpts: [string, string][] = run.workers.map((w) => [w.worker, w.worker]);
  const spanOpts: [string, string][] = worker.spans.map((sp) => {
    const f = run.files.find((x) => x.file === sp.file);
    return [sp.span ?? "", `${fmt.spanLabel(sp.span, sp.index, f?.mtime)}${STATE_SUFFIX[f?.state || "ready"]}`];
  });
  const file = run.files.find((f) => f.file === sel.file);
  const steps = file?.steps || [];
  const stepOpts: [string, string][] = [["", steps.length > 1 ? `all ${steps.length} steps` : steps.length ? "the 1 step" : "whole trace"], ...steps.map((s) => [s, s.replace("ProfilerStep#", "step ")] as [string, string])];
  return h("div", { class: "picker", role: "group", "aria-label": idPrefix === "base" ? "baseline trace" : idPrefix === "new" ? "new trace" : "trace" },
    mk(`${idPrefix}-run`, "Run", runOpts, sel.run, (v) => onChange({ run: v }), false, (v) => (v === "." ? "the log directory itself" : v)),
    mk(`${idPrefix}-worker`, "Worker", workerOpts, worker.worker, (v) => onChange({ run: sel.run, worker: v })),
    mk(`${idPrefix}-span`, "Span", spanOpts, sel.span ?? "", (v) => onChange({ run: sel.run, worker: worker.worker, span: v || null })),
    mk(`${idPrefix}-step`, "Step", stepOpts, sel.step ?? "", (v) => onChange({ ...sel, step: v || null }), !steps.length));
}
