// Advice: the report's findings (advice/), ranked by the step time they would save where it was
// estimated (else by their own gain), each with both figures (attention GPU time, step time), its
// evidence, the fix, and links to the phases and kernels it is about (a click filters the kernel
// table). Gains are estimates under the finding's stated assumption and carry "~", unless a replay
// beside the trace measured the GPU figure (evidence.gain_source "measured": said, without "~"). With
// no finding, the panel lists what each rule checked and why it stayed silent (advice_checks).

import { phaseLabel } from "../colors";
import { h, Child } from "../dom";
import * as fmt from "../format";
import type { Base } from "../timebase";
import type { Advice, AdviceCheck, AdviceEvidence, Summary } from "../types";
import type { KernelFilter } from "../state";
import { boundPill, phaseTag, section, sourceTag } from "../widgets";
import { shortName } from "../names";
import { context, share } from "./strip";

const SEVERITY_RANK: Record<string, number> = { high: 0, medium: 1, low: 2 };

/** The figure a finding ranks by: step time saved where it was estimated, else its own gain. */
export function rankValue(a: Advice): number | null {
  const v = a.step_gain_us ?? a.estimated_gain_us;
  return v === undefined ? null : v;
}

/** Most step time saved first (advice/registry.py rank_key); findings without a number after those
 * with one, by severity. */
export function rankAdvice(items: Advice[]): Advice[] {
  return items.slice().sort((a, b) => {
    const ga = rankValue(a) ?? -1;
    const gb = rankValue(b) ?? -1;
    if (ga !== gb) return gb - ga;
    return (SEVERITY_RANK[a.severity] ?? 3) - (SEVERITY_RANK[b.severity] ?? 3);
  });
}

// findings of a report from before gain_basis whose gain was GPU idle time, not attention time
export const IDLE_TIME_FINDINGS = new Set(["launch_overhead"]);

/** Whether a finding's gain is wall-clock step time (gain_basis "step"). */
export function isStepBasis(a: { id: string; gain_basis?: string | null }): boolean {
  return a.gain_basis ? a.gain_basis === "step" : IDLE_TIME_FINDINGS.has(a.id);
}

export interface GainBasis { attentionUs: number; spanUs: number | null; steps: number; perStep?: boolean }

/** "~1.37 ms of attention GPU time saved (32 % of attention time) · ~1.20 ms of step time · acts on
 * 2.20 ms": the gain on its basis with its share, the other figure beside it. */
export function gainText(a: Advice, basis: GainBasis): string {
  if (a.estimated_gain_us === null || a.estimated_gain_us === undefined) {
    return a.step_gain_us ? `gain not estimated \u00b7 ${fmt.est(fmt.time(a.step_gain_us), true)} of step time` : "gain not estimated";
  }
  const step = isStepBasis(a);
  const r = step ? share(a.estimated_gain_us, basis.spanUs) : share(a.estimated_gain_us, basis.attentionUs);
  const of = step ? `of the ${basis.perStep ? "step" : basis.steps ? "step" + (basis.steps > 1 ? "s" : "") : "trace"}` : "of attention time";
  const what = step ? "of step time" : "of attention GPU time";
  const part = r !== null ? ` (${fmt.pct(r, 0)} ${of})` : "";
  const measured = (a.evidence as AdviceEvidence | undefined)?.gain_source === "measured";
  const other = step ? a.gpu_gain_us : a.step_gain_us;
  const otherMeasured = step && measured;
  const beside = other
    ? ` \u00b7 ${otherMeasured ? "measured: " : ""}${fmt.est(fmt.time(other), !otherMeasured)} ${step ? "of attention GPU time" : "of step time"}`
    : "";
  const acts = a.removable_us ? ` \u00b7 acts on ${fmt.time(a.removable_us)}${step ? " of step time" : ""}` : "";
  const own = !step && measured;
  // a finding without a per_step block on the per-step base keeps the trace's totals: said
  const over = (a as Advice & { overTrace?: boolean }).overTrace && basis.perStep ? " (over the whole trace)" : "";
  return `${own ? "measured: " : ""}${fmt.est(fmt.time(a.estimated_gain_us), !own)} ${what} saved${over}${part}${beside}${acts}`;
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
      h("span", { class: "gain", "data-testid": "advice-gain", title: isStepBasis(a)
        ? "wall-clock step time this change would save in this trace (the step replayed without the profiler), an estimate"
        : "attention GPU time this change would save in this trace, under the finding's assumption (an estimate); the step time beside it is the step replayed with the change" },
        gainText(a, basis))),
    h("p", { class: "finding-detail" }, a.detail,
      basis.perStep ? h("span", { class: "muted small", "data-testid": "detail-base" }, " (this text counts over the whole trace)") : null),
    phases.length ? h("div", { class: "finding-links" }, h("span", { class: "muted small" }, "Phases:"),
      phases.map((p) => link([phaseTag(p.phase, `${phaseLabel(p.phase)} ${p.direction === "backward" ? "bwd" : "fwd"}`), ` ${fmt.time(p.time_us)}`],
        "show these kernels in the kernel table",
        () => onPick({ phase: p.phase, direction: p.direction, scope: "attention", q: "", bound: "" }),
        { "data-phase": p.phase, "data-direction": p.direction }))) : null,
    kernels.length ? h("div", { class: "finding-kernels" },
      h("div", { class: "muted small" }, basis.perStep ? "Longest kernels (over the whole trace):" : "Longest kernels:"),
      h("ul", null, kernels.map((k) => h("li", null,
        link(h("span", { class: "mono ellipsis", title: k.name }, shortName(k.name)), "show this kernel in the kernel table",
          () => onPick({ name: k.name, q: "", phase: k.phase || "", direction: k.direction || "", scope: k.phase ? "attention" : "all", bound: "" })),
        h("span", { class: "muted small" }, ` ${fmt.time(k.time_us)}${k.calls ? ` \u00b7 ${fmt.count(k.calls)} call${k.calls > 1 ? "s" : ""}` : ""} `),
        k.bound ? boundPill(k.bound) : null,
        k.source ? sourceTag(k.source, "small") : null)))) : null,
    other.length ? h("details", { class: "finding-evidence" }, h("summary", null, "Evidence"),
      h("dl", { class: "kv" }, other.map(([k, v]) => [h("dt", null, k), h("dd", { class: "mono small" }, v)]))) : null,
    h("div", { class: "finding-fix" }, h("div", { class: "muted small" }, "Fix"), h("pre", { class: "code fix" }, h("code", null, a.how)),
      a.fix_code ? h("pre", { class: "code fix", "data-testid": "advice-fix-code" }, h("code", null, a.fix_code)) : null,
      a.twin ? h("div", { class: "muted small", "data-testid": "advice-twin" },
        `gain confirmed on a measured twin pair (${a.twin}: the slow and the fixed version of one model, both recorded)`) : null));
}

function gainBasis(s: Summary, b?: Base): GainBasis {
  const c = context(s);
  // on the per-step base ``s`` is already divided (timebase.onBase): its totals are one step's
  return { attentionUs: c.totalAttentionUs, spanUs: c.totalSpanUs, steps: c.steps, perStep: b?.base === "step" };
}

/** ``b``: the time base the findings' gains are on (timebase.onBase); without it, the trace's totals. */
export function renderAdvice(s: Summary, onPick: (f: KernelFilter) => void, b?: Base): HTMLElement | null {
  const items = s.advice;
  if (!items) return null;       // an older report without the block
  const ranked = rankAdvice(items);
  const steps = context(s).steps;
  // the strip above shows one step's mean, the gains are the trace's totals: say which
  const over = b ? ` Gains: ${b.label}${b.base === "step" ? ", as in the strip above" : b.canSwitch ? " together (the strip above shows one step)" : ""}.`
    : steps > 1 ? ` Gains are over the whole trace (its ${steps} profiled steps together, like the Summary's totals; the strip above shows one step).` : "";
  const help = h("p", { class: "section-help" },
    `What to change, ranked by the step time each change would save in this trace (else by its attention GPU time).${over} Gains marked ~ are estimates under the stated assumption; click a phase or kernel to see its kernels below.`);
  if (!ranked.length) {
    return section("Advice", "advice", h("p", { class: "muted", "data-testid": "advice-empty" },
      "No finding: none of the advice rules has evidence in this trace."), checkList(s.advice_checks || []));
  }
  return section("Advice", "advice", help,
    h("div", { class: "findings" }, ranked.map((a) => finding(a, gainBasis(s, b), onPick))));
}

/** What each rule looked at and why it stayed silent ("No finding"). */
export function checkList(checks: AdviceCheck[]): HTMLElement | null {
  if (!checks.length) return null;
  return h("ul", { class: "advice-checks small", "data-testid": "advice-checks" },
    checks.map((c) => h("li", { "data-check": c.id },
      h("span", { class: "mono" }, c.id), c.fired ? " fired" : `: ${c.reason || "not fired"}`)));
}
