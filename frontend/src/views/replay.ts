// What-if replay (replay/, docs/replay.md): the trace's distinct attention calls, the script that
// times each under every backend on the user's GPU (a download, as the annotated trace is), and the
// backends a replay beside the trace measured. Times are per call; the trace's backend is marked.

import { h } from "../dom";
import * as fmt from "../format";
import type { ReplayCall, ReplayedBackend, Selection, Summary } from "../types";
import { section } from "../widgets";

const dims = (x: number[] | null | undefined): string => (x && x.length ? x.join("\u00d7") : "?");

function flags(c: ReplayCall): string {
  const f: string[] = [];
  if (c.causal) f.push("causal");
  if (c.enable_gqa) f.push("GQA");
  if (c.dropout_p) f.push(`dropout ${c.dropout_p}`);
  if (c.mask) f.push(`mask ${String(c.mask.kind ?? "")}`);
  const kv = (c.detail || {}).kv_len;
  if (typeof kv === "number") f.push(`KV ${fmt.count(kv)}`);
  return f.join(", ") || "\u2013";
}

function backendRow(c: ReplayCall, r: ReplayedBackend): HTMLElement {
  const rp = c.replayed!;
  const k = rp.basis === "kernel";
  const fwd = k ? r.kernel_forward_us : r.forward_us;
  const bwd = k ? r.kernel_backward_us : r.backward_us;
  const cur = rp.backends.find((b) => b.backend === rp.trace_backend && b.total_us);
  const ratio = cur && cur.total_us && r.total_us ? cur.total_us / r.total_us : null;
  const err = r.error_vs_math ? Math.max(r.error_vs_math.forward ?? 0, r.error_vs_math.backward ?? 0) : null;
  const mine = r.backend === rp.trace_backend;
  return h("tr", { "data-backend": r.backend, class: mine ? "replay-own" : "" },
    h("td", null, r.label, mine ? h("span", { class: "muted small" }, " (the trace's)") : null),
    h("td", null, r.status),
    h("td", { class: "num" }, fwd !== null ? fmt.time(fwd) : ""),
    h("td", { class: "num" }, bwd !== null ? fmt.time(bwd) : ""),
    h("td", { class: "num" }, r.total_us !== null ? fmt.time(r.total_us) : ""),
    h("td", { class: "num" }, ratio !== null ? `${ratio.toFixed(2)}\u00d7` : ""),
    h("td", { class: "small" }, r.status === "ok" ? (err !== null ? `err ${err.toPrecision(2)}${r.check && r.check !== "ok" ? ` ${r.check}` : ""}` : "") : r.reason || ""));
}

function callBlock(c: ReplayCall): HTMLElement {
  const per = c.per_call_us || { forward: null, backward: null };
  const head = h("p", { class: "replay-call" },
    h("code", null, c.id), ` ${c.kind} \u00b7 q ${dims(c.q_shape)} \u00b7 k ${dims(c.k_shape)} \u00b7 ${c.dtype ?? "?"} \u00b7 ${flags(c)}`,
    h("span", { class: "muted small" }, ` \u00b7 ${fmt.count(c.count)} call${c.count > 1 ? "s" : ""} (call ${c.instances.slice(0, 4).join(", ")}${c.instances.length > 4 ? "\u2026" : ""})`,
      ` \u00b7 in the trace: ${c.trace_backend ?? "?"} ${fmt.time(per.forward)}${per.backward ? ` + ${fmt.time(per.backward)} bwd` : ""} per call`));
  const rp = c.replayed;
  if (!rp) return h("div", { class: "replay-entry", "data-call": c.id }, head);
  return h("div", { class: "replay-entry", "data-call": c.id }, head,
    h("div", { class: "table-wrap" }, h("table", { class: "data replay-table" },
      h("thead", null, h("tr", null, ["backend", "status", "fwd", "bwd", "total", "vs the trace's", "error vs math / why not"].map((x) => h("th", null, x)))),
      h("tbody", null, rp.backends.map((r) => backendRow(c, r))))),
    h("p", { class: "muted small" }, rp.basis === "kernel" ? "kernel time per call (the trace's measure)" : "CUDA-event time per call"));
}

export function renderReplay(s: Summary, sel: Selection, scriptUrl: string): HTMLElement | null {
  const b = s.replay;
  if (!b || !b.calls.length) return null;
  const m = b.measured;
  const link = h("a", { class: "btn link", id: "download-replay", href: scriptUrl, download: "",
    title: "a self-contained PyTorch script (shapes only) that rebuilds these calls and times them under every backend (tb-attention replay --emit)" }, "Replay script");
  const help = h("p", { class: "section-help" },
    `${b.calls.length} distinct attention call${b.calls.length > 1 ? "s" : ""} of this trace ${b.calls.length > 1 ? "can be rebuilt from their" : "can be rebuilt from its"} recorded shapes. `,
    "Download the script, run it on the machine with the GPU, and put the .replay.json it writes beside the trace: ",
    "the advice then uses the measured times instead of estimates.");
  const status = m ? h("p", { class: m.used_for_advice ? "" : "muted" },
    `Replayed on ${m.device ?? "?"} (torch ${m.torch ?? "?"}, ${b.file}): ${m.calls_matched} of ${b.calls.length} calls.`,
    m.used_for_advice ? "" : ` Not used for the advice: ${m.not_used_because ?? ""}.`) : null;
  void sel;
  return section("Replay", "replay", help, h("div", { class: "replay-actions" }, link), status,
    b.calls.map((c) => callBlock(c)));
}
