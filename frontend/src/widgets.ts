// Small shared pieces: tooltip, badges, bound pills, utilisation bars, sections.

import { boundLabel, boundTitle } from "./bound";
import { BOUND_COLORS, phaseColor, phaseLabel } from "./colors";
import { append, Child, h, replace } from "./dom";
import * as fmt from "./format";
import type { LatencyCause, Measured, Source } from "./types";

let tip: HTMLElement | null = null;

function tipEl(): HTMLElement {
  if (!tip) {
    tip = h("div", { class: "tooltip", role: "tooltip", id: "tba-tooltip", hidden: true });
    document.body.appendChild(tip);
  }
  return tip;
}

/** Show the tooltip near (x, y) in page coordinates. */
export function showTip(x: number, y: number, ...content: Child[]): void {
  const t = tipEl();
  replace(t, ...content);
  t.hidden = false;
  const pad = 14;
  const w = t.offsetWidth;
  const hgt = t.offsetHeight;
  const vw = document.documentElement.clientWidth + window.scrollX;
  const vh = document.documentElement.clientHeight + window.scrollY;
  let left = x + pad;
  let top = y + pad;
  if (left + w > vw - 4) left = Math.max(window.scrollX + 4, x - w - pad);
  if (top + hgt > vh - 4) top = Math.max(window.scrollY + 4, y - hgt - pad);
  t.style.left = `${left}px`;
  t.style.top = `${top}px`;
}

export function hideTip(): void {
  if (tip) tip.hidden = true;
}

export function estBadge(estimated: boolean | null | undefined): Child {
  return estimated
    ? h("span", { class: "badge est", title: "estimated: FLOPs from a per-element estimate, or an op's cost split over several kernels" }, "est.")
    : null;
}

const SOURCE_LABEL: Record<string, string> = { ncu: "Nsight Compute", cupti: "CUPTI" };

/** The counters in words: "Nsight Compute (run.ncu.csv): DRAM 81 %, tensor pipe 43 %, FMA pipe 12 %". */
export function measuredText(m: Measured | null | undefined): string {
  if (!m) return "";
  const pct = (v: number | null) => (v === null || v === undefined ? "n/a" : `${v.toFixed(0)} %`);
  const parts: string[] = [];
  if (m.dram_pct !== null || m.tensor_pct !== null || m.fma_pct !== null) {
    parts.push(`DRAM ${pct(m.dram_pct)}, tensor pipe ${pct(m.tensor_pct)}, FMA pipe ${pct(m.fma_pct)}`);
  }
  if (m.dram_bytes !== null) parts.push(`${fmt.bytes(m.dram_bytes)} DRAM traffic`);
  if (m.flops !== null) parts.push(`${fmt.flops(m.flops)} executed`);
  const src = `${SOURCE_LABEL[m.source] || m.source}${m.file ? ` (${m.file})` : ""}`;
  return `${src}: ${parts.join(" \u00b7 ") || "no usable counter"}`;
}

/** "measured": the row's utilisations and bound come from hardware counters. */
export function measuredBadge(m: Measured | null | undefined): Child {
  return m
    ? h("span", { class: "badge basis-measured measured", title: `measured by ${measuredText(m)}` }, "measured")
    : null;
}

/** A bound as a coloured pill; ``short`` drops "-bound" (tables whose column says "Bound"). */
export function boundPill(bound: string | null | undefined, reason?: string | null, cause?: LatencyCause | string | null,
  short = false): HTMLElement {
  const b = bound || "unknown";
  const label = boundLabel(b, cause);
  const el = h("span", { class: `pill bound-${b}`, title: boundTitle(reason, b === "latency" ? cause : null) || label,
    "data-cause": b === "latency" && cause ? cause : null }, short ? label.replace("-bound", "") : label);
  el.style.setProperty("--c", BOUND_COLORS[b] || "#6e7781");
  return el;
}

export function phaseTag(phase: string | null | undefined, label?: string | null): HTMLElement {
  const dot = h("span", { class: "dot", "aria-hidden": "true" });
  dot.style.background = phaseColor(phase);
  return h("span", { class: "phase-tag" }, dot, label || phaseLabel(phase));
}

/** A utilisation: the percentage and a thin bar (capped at 100 %; above shows a marker). */
export function utilCell(u: number | null | undefined, estimated = false, upper = false): HTMLElement {
  const wrap = h("span", { class: "util", title: upper ? "an upper bound: the FLOPs and bytes are a dense upper bound (e.g. FlexAttention's block mask is not in the trace)" : null });
  const text = fmt.est(fmt.pct(u), estimated && !upper);
  append(wrap, [h("span", { class: "num" }, upper && text !== fmt.DASH ? `\u2264${text}` : text)]);
  if (u !== null && u !== undefined && isFinite(u)) {
    const bar = h("span", { class: "util-bar", "aria-hidden": "true" });
    const fill = h("span", { class: `util-fill${u > 1 ? " over" : ""}` });
    fill.style.width = `${Math.max(0, Math.min(1, u)) * 100}%`;
    bar.appendChild(fill);
    wrap.appendChild(bar);
  }
  return wrap;
}

export function section(title: string, id: string, ...children: Child[]): HTMLElement {
  const hid = `${id}-title`;
  return h("section", { class: "card", id, "aria-labelledby": hid },
    h("h2", { id: hid }, title), ...children);
}

/** A section's time base beside its heading (#41): "per step (mean of 2 profiled steps)". */
export function withBase<T extends HTMLElement | null>(el: T, b: { label: string; base: string }): T {
  const h2 = el?.querySelector("h2");
  if (h2) h2.append(h("span", { class: "base-tag", "data-testid": "base-tag", "data-base": b.base }, ` \u00b7 ${b.label}`));
  return el;
}

export function note(kind: "info" | "warn" | "error", title: string, ...body: Child[]): HTMLElement {
  return h("div", { class: `note note-${kind}`, role: kind === "error" ? "alert" : "status" },
    h("div", { class: "note-title" }, title), ...body);
}

export function code(text: string): HTMLElement {
  return h("pre", { class: "code" }, h("code", null, text));
}

export function kv(rows: [string, Child][]): HTMLElement {
  const dl = h("dl", { class: "kv" });
  for (const [k, v] of rows) {
    append(dl, [h("dt", null, k), h("dd", null, v)]);
  }
  return dl;
}

/** What a source line is, once for every place that shows one. */
export const SOURCE_HELP = "the innermost function of your (or the model's) code around the op that launched the kernel " +
  "(for a backward kernel: its forward op); the line is where that function starts, as the profiler records function entries, not call lines";

/** "modeling_llama.py:191": a source's file name and line, the part of a source never cut. */
export function sourceLoc(file: string, line?: number | null): string {
  return `${file.split("/").pop() || file}${line ? `:${line}` : ""}`;
}

/** A "file:line" that is never cut (a narrow cell cuts the names beside it instead). */
export function locTag(where: string): HTMLElement {
  return h("span", { class: "source-loc" }, where);
}

/** A source line as text (not a link: the file is on the machine that ran the model):
 * "eager_attention_forward · modeling_llama.py:191", the whole path in the title. Where it is
 * narrow, the function is cut with an ellipsis; the file and line stay whole. */
export function sourceTag(src: Source, cls = ""): HTMLElement {
  return h("span", { class: `source ${cls}`.trim(), "data-function": src.function || null,
    title: `${src.file}${src.line ? `:${src.line}` : ""}${src.function ? ` (${src.function})` : ""}: ${SOURCE_HELP}` },
  src.function ? [h("span", { class: "source-fn" }, src.function), h("span", { class: "source-sep" }, " \u00b7 ")] : null,
  locTag(sourceLoc(src.file, src.line)));
}
