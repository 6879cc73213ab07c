// Advice: the report's findings (advice.py), ranked by the GPU time they would save, each with its
// evidence, the fix, and links to the phases and kernels it is about (a click filters the kernel
// table). Gains are estimates under the finding's stated assumption: they always carry "~".

import { phaseLabel } from "../colors";
import { h, Child } from "../dom";
import * as fmt from "../format";
import type { Advice, AdviceEvidence, Summary } from "../types";
import type { KernelFilter } from "../state";
import { boundPill, phaseTag, section, sourceTag } from "../widgets";
import { shortName } from "../names";
import { context, share } from "./strip";

const SEVERITY_RANK: Record<string, number> = { high: 0, medium: 1, low: 2 };

/** Largest estimated gain first; findings without a number after those with one, by severity. */
export function rankAdvice(items: Advice[]): Advice[] {
  return items.slice().sort((a, b) => {
    const ga = a.estimated_gain_us ?? -1;
    const gb = b.estimated_gain_us ?? -1;
    if (ga !== gb) return gb - ga;
    return (SEVERITY_RANK[a.severity] ?? 3) - (SEVERITY_RANK[b.severity] ?? 3);
  });
}

// findings whose removable time is GPU idle time between kernels, not attention kernel time
// (docs/report-schema.md, removable_us): their gain is no part of attention time, so it is given as
// a share of the step (or trace span) instead
export const IDLE_TIME_FINDINGS = new Set(["launch_overhead"]);

export interface GainBasis { attentionUs: number; spanUs: number | null; steps: number }

export function gainText(a: Advice, basis: GainBasis): string {
  if (a.estimated_gain_us === null || a.estimated_gain_us === undefined) return "gain not estimated";
  const idle = IDLE_TIME_FINDINGS.has(a.id);
  const r = idle ? share(a.estimated_gain_us, basis.spanUs) : share(a.estimated_gain_us, basis.attentionUs);
  const of = idle ? `of the ${basis.steps ? "step" + (basis.steps > 1 ? "s" : "") : "trace"}` : "of attention time";
  const part = r !== null ? ` (${fmt.pct(r, 0)} ${of})` : "";
  const acts = a.removable_us ? ` \u00b7 acts on ${fmt.time(a.removable_us)}${idle ? " of GPU idle time" : ""}` : "";
  return `${fmt.est(fmt.time(a.estimated_gain_us), true)} saved${part}${acts}`;
}

/** Evidence values that are not phases or kernels: short "key: value" lines. */
function otherEvidence(a: Advice): [string, string][] {
  const out: [string, string][] = [];
  for (const [k, v] of Object.entries(a.evidence || {})) {
    if (k === "phases" || k === "kernels" || v === null || v === undefined) continue;
    let text: string;
    if (typeof v === "number") text = k.endsWith("_us") ? fmt.time(v) : k.startsWith("share") ? fmt.pct(v) : String(v);
    else if (typeof v === "string" || typeof v === "boolean") text = String(v);
    else text = JSON.stringify(v);
    if (text.length > 400) text = `${text.slice(0, 400)}\u2026`;
    out.push([k.replace(/_/g, " "), text]);
  }
  return out;
}

function link(label: Child, title: string, onClick: () => void, attrs: Record<string, string> = {}): HTMLElement {
  const b = h("button", { type: "button", class: "linkish", title, ...attrs }, label);
  b.addEventListener("click", onClick);
  return b;
}

function finding(a: Advice, basis: GainBasis, onPick: (f: KernelFilter) => void): HTMLElement {
  const ev = (a.evidence || {}) as AdviceEvidence;
  const phases = ev.phases || [];
  const kernels = ev.kernels || [];
  const other = otherEvidence(a);
  return h("article", { class: `finding sev-${a.severity}`, "data-advice": a.id },
    h("header", { class: "finding-head" },
      h("span", { class: `badge sev sev-${a.severity}` }, a.severity),
      h("h3", null, a.title),
      h("span", { class: "grow" }),
      h("span", { class: "gain", "data-testid": "advice-gain", title: "GPU time this change would save in this trace, under the finding's assumption (an estimate)" },
        gainText(a, basis))),
    h("p", { class: "finding-detail" }, a.detail),
    phases.length ? h("div", { class: "finding-links" }, h("span", { class: "muted small" }, "Phases:"),
      phases.map((p) => link([phaseTag(p.phase, `${phaseLabel(p.phase)} ${p.direction === "backward" ? "bwd" : "fwd"}`), ` ${fmt.time(p.time_us)}`],
        "show these kernels in the kernel table",
        () => onPick({ phase: p.phase, direction: p.direction, scope: "attention", q: "", bound: "" }),
        { "data-phase": p.phase, "data-direction": p.direction }))) : null,
    kernels.length ? h("div", { class: "finding-kernels" },
      h("div", { class: "muted small" }, "Longest kernels:"),
      h("ul", null, kernels.map((k) => h("li", null,
        link(h("span", { class: "mono ellipsis", title: k.name }, shortName(k.name)), "show this kernel in the kernel table",
          () => onPick({ name: k.name, q: "", phase: k.phase || "", direction: k.direction || "", scope: k.phase ? "attention" : "all", bound: "" })),
        h("span", { class: "muted small" }, ` ${fmt.time(k.time_us)}${k.calls ? ` \u00b7 ${fmt.count(k.calls)} call${k.calls > 1 ? "s" : ""}` : ""} `),
        k.bound ? boundPill(k.bound) : null,
        k.source ? sourceTag(k.source, "small") : null)))) : null,
    other.length ? h("details", { class: "finding-evidence" }, h("summary", null, "Evidence"),
      h("dl", { class: "kv" }, other.map(([k, v]) => [h("dt", null, k), h("dd", { class: "mono small" }, v)]))) : null,
    h("div", { class: "finding-fix" }, h("div", { class: "muted small" }, "Fix"), h("pre", { class: "code fix" }, h("code", null, a.how))));
}

function gainBasis(s: Summary): GainBasis {
  const c = context(s);
  return { attentionUs: s.attention_time_us || 0, spanUs: c.spanUs, steps: c.steps };
}

export function renderAdvice(s: Summary, onPick: (f: KernelFilter) => void): HTMLElement | null {
  const items = s.advice;
  if (!items) return null;       // an older report without the block
  const ranked = rankAdvice(items);
  const help = h("p", { class: "section-help" },
    "What to change, ranked by the GPU time each change would save in this trace. Gains marked ~ are estimates under the stated assumption; click a phase or kernel to see its kernels below.");
  if (!ranked.length) {
    return section("Advice", "advice", h("p", { class: "muted", "data-testid": "advice-empty" },
      "No finding: none of the advice rules has evidence in this trace (see docs/advice.md for what is checked)."));
  }
  return section("Advice", "advice", help,
    h("div", { class: "findings" }, ranked.map((a) => finding(a, gainBasis(s), onPick))));
}
