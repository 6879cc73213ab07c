// Attention sites (report `sites`, model.py) with the FLOPs ledger (`flops_ledger`), and the FFN
// boundary (`boundary`, memory/boundary.py) shown beside the memory view.

import { Child, h } from "../dom";
import * as fmt from "../format";
import type { KernelFilter } from "../state";
import type { Boundary, FlopsLedger, Hfu, Mfu, Site, Summary } from "../types";
import { boundPill, locTag, section, SOURCE_HELP } from "../widgets";

const ROLE_LABELS: Record<string, string> = {
  layout: "layout copies", o_proj: "o_proj", residual_add: "residual add", norm: "norm",
  add_norm: "add+norm (one kernel)", other: "other",
};

export const pickSite = (s: Site): KernelFilter => ({ scope: "attention", site: s.name, phase: "", direction: "", bound: "", q: "" });

const INPUTS_SHOWN = 32; // recorded inputs of a call without geometry: cut, the whole list in the title

function shapeText(s: Site): string {
  const sh = s.shapes[0];
  if (!sh) return fmt.DASH;
  if (sh.sq === undefined) {
    const t = sh.inputs || fmt.DASH;
    return t.length > INPUTS_SHOWN ? `${t.slice(0, INPUTS_SHOWN)}\u2026` : t;
  }
  const heads = sh.hk !== sh.h ? `${sh.h}/${sh.hk}` : `${sh.h}`;
  return `B${sh.b} H${heads} ${sh.sq}\u00d7${sh.sk} D${sh.d}${sh.dv !== sh.d ? `/${sh.dv}` : ""}`;
}

/** A site's place on the roofline under its bound: intensity and the share of the roof on its side. */
function rooflineText(s: Site): HTMLElement | null {
  const r = s.roofline;
  if (!r || r.intensity === null || !r.side) return null;
  const i = r.intensity < 10 ? r.intensity.toFixed(1) : Math.round(r.intensity).toString();
  return h("div", { class: "muted small", title: "FLOPs per DRAM byte, the side of the ridge it sits on, and the share of that roof its kernels reach" },
    `${i} FLOP/B · ${r.side} side${r.roof_share !== null ? ` · ${fmt.pct(r.roof_share)} of roof` : ""}`);
}

/** The three MFU bases, marked as the ledger line marks them: useful \u2264 unless exact, executed ~
 * (an estimate) or \u2264 (an upper bound: Flex without block counts, varlen without lengths). */
function mfuText(m: Mfu, exact: boolean, upper: boolean): string {
  const u = m.useful !== null ? `${exact ? "" : "\u2264"}${fmt.pct(m.useful)}` : fmt.DASH;
  const x = m.executed !== null ? `${upper ? "\u2264" : "~"}${fmt.pct(m.executed)}` : fmt.DASH;
  return `${u} \u00b7 ${x} \u00b7 ${fmt.pct(m.dense)}`;
}

function ledgerText(led: FlopsLedger): Child {
  const over = new Set(led.exceeds_peak || []);
  const basis = (k: "useful" | "executed" | "dense") => over.has(k)
    ? "above the roof (the count includes work the kernels skip)"
    : `${k === "executed" ? (led.executed_upper_bound ? "\u2264" : "~") : k === "useful" && !led.useful_exact ? "\u2264" : ""}${fmt.pct(led.mfu[k])}`;
  const peaks = Object.entries(led.peaks).map(([k, v]) => `${k} ${fmt.flopRate(v)}`).join(", ");
  return h("p", { class: "section-help", id: "flops-ledger" },
    `FLOPs ledger: useful ${led.useful_exact ? "" : "\u2264"}${fmt.flops(led.useful)} (the pairs the mask keeps), executed ${led.executed_upper_bound ? "\u2264" : "~"}${fmt.flops(led.executed)} `
    + `(whole tiles; the backward's recomputed QK\u1d40), dense ${fmt.flops(led.dense)} (no mask). Attention MFU: useful ${basis("useful")}, `
    + `executed ${basis("executed")}, dense ${basis("dense")} of ${peaks || "the roof"}; HFU of the GPU span ~${fmt.pct(led.hfu.value)}`
    + `${roofsText(led.hfu)}.`);
}

/** FlexAttention calls' block masks (ledger calls' ``shapes.block``): the grid, and the blocks visited and
 * full per batch·head where a ``flex_blocks:`` annotation recorded them; without them the executed count
 * is an upper bound (every block of the grid), and the line says how to record them. */
function flexText(led: FlopsLedger): HTMLElement | null {
  const blocks = led.calls.map((c) => c.shapes?.block).filter((b): b is NonNullable<typeof b> => !!b);
  if (!blocks.length) return null;
  const seen = new Map<string, number>();
  for (const b of blocks) {
    const grid = `${fmt.count(b.blocks)} blocks of ${b.q_block}×${b.kv_block}`;
    const key = b.visited !== undefined
      ? `${grid}: ${fmt.count(b.visited)} visited per batch·head${b.full !== null && b.full !== undefined ? ` (${fmt.count(b.full)} full)` : ""}, from the ${b.source || "trace"}`
      : `${grid}: blocks visited not recorded, executed FLOPs an upper bound (record them with tb_attention_plugin.roofline.ledger.flex_blocks_name(block_mask) as a record_function name)`;
    seen.set(key, (seen.get(key) || 0) + 1);
  }
  return h("p", { class: "section-help", id: "flex-blocks" },
    `Flex block masks: ${[...seen].map(([k, n]) => `${k} (${fmt.count(n)} call${n === 1 ? "" : "s"})`).join("; ")}.`);
}

/** Each dtype's kernels on their own roof, where a trace has more than one (FP8 GEMMs beside bf16). */
function roofsText(hfu: Hfu): string {
  const roofs = Object.entries(hfu.by_roof || {}).filter(([, r]) => r.utilization !== null && r.flops > 0);
  if (roofs.length < 2) return "";
  return ` (per roof, in their kernels' time: ${roofs.map(([k, r]) => `${k} ~${fmt.pct(r.utilization)} of ${fmt.flopRate(r.peak_flops_per_s)}`).join(", ")})`;
}

export function renderSites(sm: Summary, onPick: (f: KernelFilter) => void): HTMLElement | null {
  const sites = sm.sites || [];
  if (!sites.length) return null;
  const led = sm.flops_ledger || null;
  const exact = new Map((led?.sites || []).map((x) => [x.site, x.useful_exact]));
  const upper = new Map((led?.sites || []).map((x) => [x.site, x.executed_upper_bound]));
  const thead = h("thead", null, h("tr", null,
    // forward and backward sit under the time, and MFU's three bases under one short heading:
    // the table fits a 1000 px window (the e2e tests' narrowest layout)
    ...["Site", "Calls", "Time", "Share", "Shape", "Backend", "Bound", "MFU", "Top finding"].map((c, i) =>
      h("th", { scope: "col", class: i >= 1 && i <= 3 ? "num" : null,
        title: c === "MFU" ? "model FLOPs utilisation of the roof: useful (the pairs the mask keeps) \u00b7 executed (whole tiles) \u00b7 dense (no mask)" : null },
      c === "MFU" ? ["MFU", h("div", { class: "th-sub" }, "useful \u00b7 exec. \u00b7 dense")] : c))));
  const tbody = h("tbody");
  for (const s of sites) {
    // a long module path breaks after its slashes, not inside a class name
    const parts = s.name.split("/").flatMap((x, i, all) => (i < all.length - 1 ? [`${x}/`, h("wbr")] : [x]));
    const name = h("button", { type: "button", class: "linkish mono", title: `show the kernels of ${s.name}` }, ...parts);
    name.addEventListener("click", () => onPick(pickSite(s)));
    tbody.appendChild(h("tr", { "data-site": s.id },
      h("th", { scope: "row" }, name, s.source ? h("div", { class: "source small", title: `${s.source}: ${SOURCE_HELP}` }, locTag(s.source.split("/").pop() || s.source)) : null),
      h("td", { class: "num" }, fmt.count(s.calls)),
      h("td", { class: "num" }, fmt.time(s.time_us),
        h("div", { class: "muted small" }, `fwd ${fmt.time(s.forward_us)}`),
        s.backward_us ? h("div", { class: "muted small" }, `bwd ${fmt.time(s.backward_us)}`) : null),
      h("td", { class: "num" }, fmt.pct(s.share)),
      h("td", { class: "small site-shape", title: s.shapes[0]?.inputs || null }, shapeText(s), s.shapes[0]?.mask ? h("div", { class: "muted small" }, s.shapes[0].mask) : null),
      h("td", null, s.backends.map((b) => b.label).join(" + ") || fmt.DASH),
      h("td", null, boundPill(s.bound, null, null, true), rooflineText(s)),
      h("td", { class: "small" }, mfuText(s.mfu, exact.get(s.id) ?? true, upper.get(s.id) ?? false)),
      h("td", { class: "small" }, s.top_finding ? `${s.top_finding.title} (${s.top_finding.severity})` : ""),
    ));
  }
  return section("Attention sites", "sites",
    h("p", { class: "section-help" }, "Attention calls grouped by the place in the model that makes them (the module path with repeated layers "
      + "folded to *, else the record_function name, source line or op). Click a site to list its kernels."),
    h("div", { class: "table-wrap" }, h("table", { class: "data site-table", id: "site-table" },
      h("caption", { class: "sr-only" }, "Attention sites"), thead, tbody)),
    led && led.useful !== null ? ledgerText(led) : null,
    led ? flexText(led) : null);
}

/** The FFN boundary beside the memory view: what runs from attention's output to the next matmul. Sizes
 * in binary units, as the rest of the Memory view and the CLI's boundary line. */
export function renderBoundary(b: Boundary | null | undefined): HTMLElement | null {
  if (!b || !b.complete_calls) return null;
  const rows = b.roles.map((r) => h("tr", null,
    h("th", { scope: "row" }, ROLE_LABELS[r.role] || r.role),
    h("td", { class: "num" }, fmt.count(r.kernels)),
    h("td", { class: "num" }, fmt.time(r.time_us)),
    h("td", { class: "num" }, fmt.memBytes(r.bytes))));
  const fus = b.fusions.map((f) => h("tr", null,
    h("th", { scope: "row" }, f.label),
    h("td", { class: "num" }, fmt.count(f.calls)),
    h("td", { class: "num" }, `~${fmt.time(f.estimated_gain_us)}`),
    h("td", { class: "num" }, fmt.time(f.removable_us)),
    h("td", { class: "num" }, `~${fmt.memBytes(f.removable_bytes)}`)));
  return h("div", { class: "boundary", id: "boundary" },
    h("h3", { class: "mem-sub" }, "FFN boundary: attention's output to the next matmul"),
    h("p", { class: "section-help" }, `${fmt.count(b.complete_calls)} forward attention call(s) (of ${fmt.count(b.calls)} followed to the next matmul): ${fmt.time(b.time_us)} and ${fmt.memBytes(b.bytes)} from the output `
      + `projection through the residual add and the norm to the next matmul. With every fusion below, ~${fmt.time(b.estimated_gain_us)} and `
      + `~${fmt.memBytes(b.removable_bytes)} less (estimates: the bytes a fused kernel still moves at ${fmt.pct(b.bandwidth_fraction, 0)} of DRAM bandwidth).`),
    h("div", { class: "table-wrap" }, h("table", { class: "data boundary-table" },
      h("caption", { class: "sr-only" }, "FFN boundary kernels by role"),
      h("thead", null, h("tr", null, ...["Role", "Kernels", "Time", "Bytes"].map((c, i) => h("th", { scope: "col", class: i ? "num" : null }, c)))),
      h("tbody", null, rows))),
    fus.length ? h("div", { class: "table-wrap" }, h("table", { class: "data boundary-fusions" },
      h("caption", { class: "sr-only" }, "Fusions that would remove boundary traffic"),
      h("thead", null, h("tr", null, ...["Fusion", "Calls", "Est. gain", "Acts on", "Bytes removed"].map((c, i) => h("th", { scope: "col", class: i ? "num" : null }, c)))),
      h("tbody", null, fus))) : null);
}
