// Empty, loading and error states, and the report's notices and warnings.

import { h, Child } from "../dom";
import * as fmt from "../format";
import type { Counts, FileEntry, Notice, RunsResponse, Summary } from "../types";
import { graphsSummary } from "../replay";
import { code, note } from "../widgets";

const PROFILE_SNIPPET = `import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    schedule=schedule(wait=1, warmup=1, active=2),
    on_trace_ready=tensorboard_trace_handler("runs/my_model"),
    record_shapes=True,   # FLOPs and bytes need input shapes
    with_stack=True,      # nn.Module scopes: attention modules and projections
) as prof:
    for step, batch in enumerate(loader):
        train_step(batch)
        prof.step()
        if step >= 4:
            break`;

export function noTraces(runs: RunsResponse | null): HTMLElement {
  return h("div", { class: "empty", id: "state-no-traces" },
    h("h2", null, "No profiler traces yet"),
    h("p", null, "The Attention tab shows where attention spends GPU time in PyTorch profiler traces. ",
      "Record one with torch.profiler and write it into the log directory:"),
    code(PROFILE_SNIPPET),
    h("p", null, "Then run ", h("code", null, "tensorboard --logdir runs"),
      ". Traces that appear while TensorBoard runs show up here within a few seconds. Files written with ",
      h("code", null, "prof.export_chrome_trace(\"trace.json\")"), " work too: put them in a sub-directory of the log directory (one directory is one run)."),
    runs ? h("p", { class: "muted" }, "Log directory: ", h("code", null, runs.logdir),
      runs.scan_error ? ` \u2014 ${runs.scan_error}` : null) : null,
    skippedLinks(runs));
}

/** Symlinks the plugin does not follow (it reads only files inside the log directory): named, so
 * that a log directory of links is not an empty tab without a reason. */
export function skippedLinks(runs: RunsResponse | null): HTMLElement | null {
  const links = runs?.skipped_links || [];
  if (!links.length) return null;
  return h("div", { class: "notice", id: "skipped-links" }, note("info", "Symbolic links are not followed",
    h("p", null, `The plugin reads only files inside the log directory, so ${links.length === 1 ? "this link was" : "these links were"} skipped: `,
      links.map((l, i) => [i ? ", " : "", h("code", null, l)]),
      ". Copy the traces into the log directory, or start TensorBoard with ", h("code", null, "--logdir"), " on the directory that holds them.")));
}

const STAGES: Record<string, string> = {
  starting: "Starting",
  reading: "Reading the trace",
  analysing: "Finding attention and costing kernels",
  memory: "Memory and data movement",
  advice: "Advice",
  indexing: "Indexing the kernel table",
};

/** One file being analysed: a progress bar of the bytes read, with the stage. */
export function fileProgress(f: FileEntry): HTMLElement {
  const p = f.progress;
  const stage = p ? STAGES[p.stage] || p.stage : "Waiting for a worker";
  const frac = p && p.fraction !== null && isFinite(p.fraction) ? Math.max(0, Math.min(1, p.fraction)) : null;
  // floor: "100 %" only once the whole file is read
  const pct = frac === null ? null : Math.floor(frac * 100);
  const total = p && p.bytes_total ? p.bytes_total : f.size;
  const compressed = p && p.basis === "compressed" ? " compressed" : "";
  const read = !p || p.stage === "starting" || p.stage === "reading"
    ? `${fmt.bytes(p ? p.bytes_read : 0)} of ${fmt.bytes(total)}${compressed}`
    : `file read (${fmt.bytes(total)}${compressed})`;
  const fill = h("span", { class: "load-bar-fill" });
  fill.style.width = `${(frac ?? 0) * 100}%`;
  const bar = h("span", {
    class: "load-bar", role: "progressbar", "aria-label": `Analysing ${f.path}`,
    "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": pct,
    "aria-valuetext": `${pct === null ? "" : `${pct} % read, `}${stage.toLowerCase()}`,
  }, fill);
  return h("div", { class: "file-progress", "data-file": f.path, "data-stage": p ? p.stage : "starting" },
    h("span", { class: "file-progress-name", title: f.path }, f.file),
    bar,
    h("span", { class: "file-progress-pct" }, pct === null ? "\u2026" : `${pct} %`),
    h("span", { class: "file-progress-stage" }, stage),
    h("span", { class: "muted" }, read));
}

export function progress(counts: Counts | null | undefined, files: FileEntry[] = []): HTMLElement | null {
  if (!counts || !counts.files) return null;
  const pending = counts.waiting + counts.queued + counts.loading;
  if (!pending) return null;
  const done = counts.ready + counts.error + (counts.incomplete || 0) + (counts.summarized || 0);
  const bar = h("progress", { max: counts.files, value: done, "aria-label": "traces analysed" });
  const loading = files.filter((f) => f.state === "loading" || f.progress);
  // Only the counts are a live region: the bars change at every poll and would be read out each time.
  return h("div", { class: "progress", id: "load-progress" },
    h("span", { class: "spinner", "aria-hidden": "true" }),
    h("span", { role: "status", "aria-live": "polite" }, `Analysing traces: ${done} of ${counts.files} done`,
      counts.loading ? `, ${counts.loading} loading` : "",
      counts.queued ? `, ${counts.queued} queued` : "",
      counts.waiting ? `, ${counts.waiting} waiting for the file to be complete` : "",
      counts.error ? ` (${counts.error} failed)` : "",
      counts.incomplete ? ` (${counts.incomplete} incomplete)` : ""),
    bar,
    loading.length ? h("div", { class: "file-progress-list" }, loading.map(fileProgress)) : null);
}

/** The button that opens the events before the cut of a truncated file (``partial=1``). */
export function partialButton(onPartial: () => void, id = "open-partial"): HTMLElement {
  const b = h("button", { type: "button", class: "btn primary", id,
    title: "analyse the events the file holds up to where it ends, as tb-attention analyze --allow-partial does; every figure is marked partial" },
  "Show the events before the cut");
  b.addEventListener("click", onPartial);
  return b;
}

export function pending(state: string, message: string | null, file: string | null | undefined, onPartial?: () => void): HTMLElement {
  const what: Record<string, string> = {
    queued: "Queued for analysis",
    summarized: "Opening the trace",
    loading: "Analysing the trace",
    waiting: "Waiting for the file to be completely written",
  };
  return h("div", { class: "empty loading", role: "status", "aria-live": "polite", id: "state-loading" },
    h("span", { class: "spinner big", "aria-hidden": "true" }),
    h("h2", null, `${what[state] || "Loading"}\u2026`),
    file ? h("p", { class: "muted" }, file) : null,
    message ? h("p", { class: "muted" }, message) : null,
    h("p", { class: "muted" }, "Big traces take a while; the page updates by itself."),
    onPartial ? h("p", null, "The file ends early for now. ", partialButton(onPartial), " (marked partial; the whole file is analysed once it is complete)") : null);
}

export function failed(message: string, file: string | null | undefined): HTMLElement {
  return h("div", { class: "empty failed", id: "state-failed" },
    note("error", "This trace could not be analysed",
      file ? h("p", null, h("code", null, file)) : null,
      h("p", { class: "error-text" }, message),
      h("p", { class: "muted" }, "Other traces are not affected. If the file is still being written it is analysed again when it changes.")));
}

/** A file that ends early (still being written, or cut short): not an analysis error, and not a
 * trace without GPU kernels. */
export function incomplete(message: string | null, file: string | null | undefined, onPartial?: () => void): HTMLElement {
  // the reader's message ends with the CLI's hint; here the button is the way
  const text = (message || "").replace(/\s*\(--allow-partial analyses the events before the cut\)\s*$/, "");
  return h("div", { class: "empty incomplete", id: "state-incomplete" },
    note("warn", "Incomplete trace: the file ends early",
      file ? h("p", null, h("code", null, file)) : null,
      text ? h("p", { class: "error-text" }, text) : null,
      h("p", null, "The profiler may still be writing it, or it was cut short (a killed job, a full disk). It is analysed again as soon as it changes."),
      onPartial ? h("p", null, partialButton(onPartial), " ", h("span", { class: "muted" }, "Every figure then covers only the part of the run before the cut and is marked partial."))
        : h("p", null, "To look at the events before the cut now: ", h("code", null, `tb-attention analyze --allow-partial ${file || "FILE"}`), ".")));
}

export function apiError(message: string): HTMLElement {
  return note("error", "The server answered with an error", h("p", { class: "error-text" }, message));
}

const NOTICE_TITLES: Record<string, string> = {
  no_gpu_kernels: "No GPU kernels in this trace",
  no_attention: "No attention found",
  no_shapes: "No input shapes recorded: FLOPs and bytes are unknown",
  no_stack: "No module scopes recorded",
  unknown_gpu: "Unknown GPU: no peaks, so no utilisation or bound",
  graph_replay: "Kernels replayed from CUDA graphs have no CPU context",
};

function extraFix(n: Notice, summary: Summary): Child {
  if (n.code === "unknown_gpu") {
    return h("p", null, "In TensorBoard, give the peaks through the environment before starting it, e.g. ",
      h("code", null, "TB_ATTENTION_PEAKS=bf16=312,fp32=19.5,memory=1.5 tensorboard --logdir runs"),
      " (TFLOP/s and TB/s), or a JSON file path in ", h("code", null, "TB_ATTENTION_PEAKS"), ".");
  }
  if (n.code === "graph_replay") {
    // the fix already says where the reference goes (in TensorBoard: the run's directory); say what was done
    return summary.graphs ? h("p", { class: "muted", "data-testid": "graphs-summary" }, graphsSummary(summary.graphs)) : null;
  }
  if (n.code === "no_attention") {
    return h("p", null, "In TensorBoard, the module and annotation patterns come from ",
      h("code", null, "TB_ATTENTION_MODULE_PATTERN"), " and ", h("code", null, "TB_ATTENTION_ANNOTATION_PATTERN"), ".");
  }
  return null;
}

/** A trace analysed only in part (the file ends early: Kineto still writing, or killed) or any
 * status other than "ok": said first, in words, so that no figure below is read as complete. */
export function statusNote(summary: Summary): HTMLElement | null {
  const t = summary.trace || ({} as Summary["trace"]);
  const partial = summary.status === "partial" || t.partial || t.truncated;
  if (partial) {
    return h("div", { class: "notice notice-incomplete", id: "status-incomplete", "data-status": summary.status },
      note("warn", "Incomplete trace",
        h("p", null, "Partial analysis. The file ends early (it may still be being written, or the profiler was stopped): the events before the cut were analysed, so times and counts below cover only part of the run."),
        h("p", null, h("strong", null, "How to fix: "), "let the profiler finish writing (", h("code", null, "prof.stop()"), " or the end of the ", h("code", null, "with profile(...)"), " block) and reload.")));
  }
  if (summary.status && summary.status !== "ok") {
    return h("div", { class: "notice notice-status", id: "status-other", "data-status": summary.status },
      note("warn", `Analysis status: ${summary.status}`, h("p", null, "This report is not a complete analysis; read its figures with care.")));
  }
  return null;
}

export function notices(summary: Summary): HTMLElement | null {
  const items: HTMLElement[] = [];
  const st = statusNote(summary);
  if (st) items.push(st);
  for (const n of summary.notices || []) {
    const kind = n.code === "no_stack" ? "info" : "warn";
    items.push(h("div", { class: `notice notice-${n.code}`, "data-code": n.code },
      note(kind, NOTICE_TITLES[n.code] || n.message,
        h("p", null, n.message),
        n.fix ? h("p", null, h("strong", null, "How to fix: "), n.fix) : null,
        extraFix(n, summary))));
  }
  // every replayed kernel has its context (a reference was used): say so, as information
  if (summary.graphs && !(summary.notices || []).some((n) => n.code === "graph_replay")) {
    items.push(h("div", { class: "notice notice-graphs", "data-code": "graphs" },
      note("info", "Kernels replayed from CUDA graphs", h("p", { "data-testid": "graphs-summary" }, graphsSummary(summary.graphs)))));
  }
  if (summary.warnings && summary.warnings.length) {
    items.push(note("info", `Reading this trace: ${summary.warnings.length} warning${summary.warnings.length > 1 ? "s" : ""}`,
      h("ul", null, summary.warnings.map((w) => h("li", null, w)))));
  }
  return items.length ? h("div", { class: "notices", id: "notices" }, items) : null;
}
