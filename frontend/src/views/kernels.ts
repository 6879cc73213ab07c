// Kernel table: server-side filter (phase, direction, bound, text), sort and pagination. Two
// modes: one row per kernel (name, phase, direction; the default: views/kernelgroups.ts) or one
// row per launch. Column headers are buttons; every kernel and module name is rendered as text.

import { api, ApiError } from "../api";
import { PHASE_ORDER, phaseLabel } from "../colors";
import { debounce, h, replace } from "../dom";
import * as fmt from "../format";
import type { KernelFilter } from "../state";
import type { Kernel, KernelGroup, KernelGroupsResponse, KernelsResponse, Selection } from "../types";
import { boundPill, estBadge, measuredBadge, phaseTag, utilCell } from "../widgets";
import { latencyWhy } from "../bound";
import { shortName } from "../names";
import * as states from "./states";
import { graphBadge } from "../replay";
import { details, nameCell, opCell } from "./kerneldetails";
import { Col, GROUP_COLS, GROUP_DESC_FIRST, groupCells, groupDetails, sortFor } from "./kernelgroups";

/** "kernels": one row per kernel (name, phase, direction); "launches": one row per launch. */
export type KernelRows = "kernels" | "launches";

export interface KernelQuery {
  offset: number;
  limit: number;
  sort: string;
  order: "asc" | "desc";
  phase: string;
  direction: string;
  bound: string;
  scope: string;
  q: string;
  site: string;
  name: string;           // exactly this kernel (a click-through): a chip, not the search box
  kid: string;            // a kernel id standing for ``name`` (the URL carries it: /kernels?name_of=)
  rows: KernelRows;
}

export function defaultQuery(hasAttention: boolean): KernelQuery {
  return { offset: 0, limit: 50, sort: "total_us", order: "desc", phase: "", direction: "", bound: "",
    scope: hasAttention ? "attention" : "all", q: "", name: "", kid: "", site: "", rows: "kernels" };
}

type Page = KernelsResponse | KernelGroupsResponse;

const COLS: Col[] = [
  { key: "name", label: "Kernel", sort: "name" },
  { key: "op", label: "Op", sort: "op", title: "the CPU op that launched it" },
  { key: "phase", label: "Phase", sort: "phase" },
  { key: "dur_us", label: "Duration", num: true, sort: "dur_us" },
  { key: "flops", label: "FLOPs", num: true, sort: "flops", opt: true },
  { key: "achieved_flops_per_s", label: "FLOP/s", num: true, sort: "achieved_flops_per_s", title: "achieved FLOP/s", opt: true },
  { key: "achieved_bytes_per_s", label: "Bandwidth", num: true, sort: "achieved_bytes_per_s", title: "achieved bytes/s", opt: true },
  { key: "compute_util", label: "Compute", num: true, sort: "compute_util", title: "compute utilisation (of the dtype's peak)" },
  { key: "memory_util", label: "Memory", num: true, sort: "memory_util", title: "memory-bandwidth utilisation" },
  { key: "bound", label: "Bound", sort: "bound" },
];

const MODULE_COL: Col = { key: "module_path", label: "Module", sort: "module_path", title: "nn.Module path" };

const DESC_FIRST = new Set(["dur_us", "flops", "achieved_flops_per_s", "achieved_bytes_per_s", "compute_util", "memory_util"]);

export class KernelTable {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private q: KernelQuery;
  private seq = 0;
  private expanded = new Set<number>();
  private last: Page | null = null;
  private searchInput: HTMLInputElement;
  private controls: HTMLElement;
  private lastFacetsShown = false;
  private pinned = h("div", { class: "pinned", id: "kernel-pinned" });
  private pinnedId: number | null = null;

  private openFirst = false;

  constructor(private sel: Selection, hasAttention: boolean, initial: KernelFilter | undefined,
    private onFilter: (f: KernelFilter) => void = () => undefined, private onLoaded: () => void = () => undefined) {
    this.q = { ...defaultQuery(hasAttention), ...clean(initial) };
    this.q.sort = sortFor(this.q.sort, this.q.rows === "kernels");
    this.el = h("div", { class: "kernels" });
    this.body = h("div", { class: "kernels-body", "aria-live": "polite", "aria-busy": "false" });
    this.searchInput = h("input", { type: "search", id: "kernel-search", placeholder: "kernel, op or module name (e.g. aten::softmax)", value: this.q.q, "aria-label": "search kernels" });
    this.searchInput.addEventListener("input", debounce(() => this.set({ q: this.searchInput.value.trim(), offset: 0 }), 250));
    this.controls = h("div", { class: "controls" });
    this.el.append(this.controls, this.pinned, this.body);
    this.renderControls(null);
    void this.load();
  }

  /** The filters as they stand (for the URL). */
  filter(): KernelFilter {
    const q = this.q;
    // a kernel with an id goes into the URL as its id: a templated C++ name can be kilobytes
    return { phase: q.phase, direction: q.direction, bound: q.bound, scope: q.scope, q: q.q, name: q.kid ? "" : q.name, kid: q.kid, site: q.site,
      rows: q.rows === "launches" ? "launches" : "" };
  }

  /** Filter from elsewhere (a phase bar, a roofline point, a finding): back to page one.
   * ``openFirst``: expand the first row's details (a phase's "why latency-bound": the longest
   * such kernel's evidence). */
  apply(f: KernelFilter, openFirst = false): void {
    this.openFirst = openFirst;
    this.q = { ...this.q, phase: "", direction: "", bound: "", q: "", name: "", kid: "", site: "", ...clean(f), offset: 0 };
    this.searchInput.value = this.q.q;
    this.renderControls(this.last);
    this.unpin();
    this.onFilter(this.filter());
    void this.load();
  }

  /** Show one kernel (picked on the timeline) above the table, with its details, and list its
   * namesakes below, one row per launch (the picked one highlighted). */
  pin(k: Kernel): void {
    this.pinnedId = k.id;
    const close = h("button", { type: "button", class: "btn", title: "clear the selection" }, "Clear");
    close.addEventListener("click", () => this.unpin());
    replace(this.pinned, h("div", { class: "pinned-box", "data-id": k.id },
      h("div", { class: "pinned-head" }, h("strong", null, "Selected kernel"), h("span", { class: "muted small" }, ` #${k.id} · ${fmt.time(k.dur_us)}`),
        h("span", { class: "grow" }), close),
      details(k)));
    this.q = { ...this.q, phase: "", direction: "", bound: "", site: "", q: "", name: k.name, kid: String(k.id), scope: k.attention ? "attention" : "all", offset: 0,
      ...this.rowsPatch("launches") };
    this.searchInput.value = "";
    this.renderControls(this.last);
    this.onFilter(this.filter());
    void this.load();
  }

  private unpin(): void {
    this.pinnedId = null;
    replace(this.pinned);
  }

  private set(patch: Partial<KernelQuery>): void {
    this.q = { ...this.q, ...patch };
    if ("phase" in patch || "direction" in patch || "bound" in patch || "scope" in patch || "q" in patch || "name" in patch || "kid" in patch || "site" in patch
      || "rows" in patch) this.onFilter(this.filter());
    void this.load();
  }

  /** The query's change for showing ``rows``: the sort that stands for the current one, page one. */
  private rowsPatch(rows: KernelRows): Partial<KernelQuery> {
    if (rows === this.q.rows) return {};
    this.expanded.clear();          // a group's id is its longest launch's: not the same row
    return { rows, sort: sortFor(this.q.sort, rows === "kernels"), offset: 0 };
  }

  /** A group's launches, one row each (its details' button). */
  private showLaunches(g: KernelGroup): void {
    this.set({ ...this.rowsPatch("launches"), name: g.name, kid: String(g.id), phase: g.phase || "", direction: g.attention ? g.direction : "", offset: 0 });
    this.renderControls(this.last);
  }

  /** The toggle between one row per kernel and one row per launch. */
  private rowsSelect(): HTMLElement {
    const sel = h("select", { id: "kernel-rows", title: "one row per kernel (name, phase and direction: calls, total, mean, min and max time), or every launch" },
      h("option", { value: "kernels" }, "one per kernel"), h("option", { value: "launches" }, "every launch"));
    sel.value = this.q.rows;
    sel.addEventListener("change", () => this.set(this.rowsPatch(sel.value === "launches" ? "launches" : "kernels")));
    return h("label", { class: "field", for: "kernel-rows" }, h("span", { class: "field-label" }, "Rows"), sel);
  }

  private mkSelect(id: string, label: string, value: string, opts: [string, string][], key: keyof KernelQuery): HTMLElement {
    const sel = h("select", { id });
    for (const [v, l] of opts) sel.appendChild(h("option", { value: v }, l));
    sel.value = value;
    sel.addEventListener("change", () => this.set({ [key]: sel.value, offset: 0 } as Partial<KernelQuery>));
    return h("label", { class: "field", for: id }, h("span", { class: "field-label" }, label), sel);
  }

  private renderControls(r: Page | null): void {
    const facets = r?.facets;
    const phases = PHASE_ORDER.filter((p) => !facets || facets.phase.includes(p));
    const searchField = h("label", { class: "field grow", for: "kernel-search" }, h("span", { class: "field-label" }, "Search"), this.searchInput);
    let chip: HTMLElement | null = null;
    if (this.q.name || this.q.kid) {
      const x = h("button", { type: "button", class: "chip-x", title: "show every kernel again", "aria-label": "clear the kernel filter" }, "\u00d7");
      x.addEventListener("click", () => { this.set({ name: "", kid: "", offset: 0 }); this.renderControls(this.last); this.unpin(); });
      chip = h("div", { class: "field" }, h("span", { class: "field-label" }, "Kernel"),
        h("span", { class: "chip", id: "kernel-name-filter", title: this.q.name || `kernel #${this.q.kid}`, "data-kid": this.q.kid || null },
          h("span", { class: "mono ellipsis" }, this.q.name ? shortName(this.q.name) : `kernel #${this.q.kid}`), x));
    }
    replace(this.controls,
      this.rowsSelect(),
      this.mkSelect("kernel-scope", "Kernels", this.q.scope, [["attention", "attention"], ["all", "all GPU activity"], ["other", "outside attention"]], "scope"),
      this.mkSelect("kernel-phase", "Phase", this.q.phase, [["", "all phases"], ...phases.map((p) => [p, phaseLabel(p)] as [string, string])], "phase"),
      this.mkSelect("kernel-direction", "Direction", this.q.direction, [["", "both"], ["forward", "forward"], ["backward", "backward"]], "direction"),
      this.mkSelect("kernel-bound", "Bound", this.q.bound, [["", "any"], ["compute", "compute"], ["memory", "memory"], ["latency", "latency (any cause)"], ["unknown", "unknown"]], "bound"),
      this.siteChip(),
      chip, searchField);
  }

  /** The site filter set from the Sites table, with a button that clears it. */
  private siteChip(): HTMLElement | null {
    if (!this.q.site) return null;
    const clear = h("button", { type: "button", class: "btn", id: "kernel-site-clear", title: "show the kernels of every site" }, "\u00d7");
    clear.addEventListener("click", () => {
      this.set({ site: "", offset: 0 });
      this.renderControls(this.last);
    });
    return h("span", { class: "field site-filter", id: "kernel-site" }, h("span", { class: "field-label" }, "Site"),
      h("span", { class: "mono small ellipsis", title: this.q.site }, this.q.site), clear);
  }

  private async load(): Promise<void> {
    const my = ++this.seq;
    this.body.setAttribute("aria-busy", "true");
    const params: Record<string, string | number | null> = {
      offset: this.q.offset, limit: this.q.limit, sort: sortFor(this.q.sort, this.q.rows === "kernels"), order: this.q.order,
      phase: this.q.phase || null, direction: this.q.direction || null, bound: this.q.bound || null,
      scope: this.q.scope, q: this.q.q || null, name: this.q.kid ? null : this.q.name || null, name_of: this.q.kid || null, site: this.q.site || null,
    };
    const grouped = this.q.rows === "kernels";
    try {
      for (let i = 0; i < 600; i++) {
        const r = grouped ? await api.kernelGroups(this.sel, params) : await api.kernels(this.sel, params);
        if (my !== this.seq) return;
        if (r.kind === "pending") {
          replace(this.body, h("p", { class: "muted" }, "Loading the kernel table\u2026"));
          await new Promise((res) => window.setTimeout(res, 1000));
          if (my !== this.seq) return;
          continue;
        }
        if (r.kind === "failed") {
          replace(this.body, states.failed(r.message, this.sel.file));
          return;
        }
        this.last = r.data;
        const named = this.q.kid && typeof r.data.named === "string" && r.data.named !== this.q.name;
        if (named) this.q = { ...this.q, name: r.data.named as string };   // the chip shows the name the id stands for
        if (!this.lastFacetsShown || named) {
          this.renderControls(r.data);
          this.lastFacetsShown = true;
        }
        if (this.openFirst && r.data.rows.length) this.expanded.add(r.data.rows[0].id);
        this.openFirst = false;
        this.renderTable(r.data);
        this.onLoaded();
        return;
      }
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.body, states.apiError(e instanceof ApiError ? e.message : String(e)));
    } finally {
      if (my === this.seq) this.body.setAttribute("aria-busy", "false");
    }
  }

  private sortButton(c: Col, prefix = ""): HTMLElement {
    const active = this.q.sort === c.sort;
    const btn = h("button", { type: "button", class: `sort${active ? " active" : ""}`, title: c.title ? `sort by ${c.title}` : `sort by ${c.label.toLowerCase()}`, "data-sort": c.sort || "" },
      c.label, h("span", { class: "arrow", "aria-hidden": "true" }, active ? (this.q.order === "asc" ? "\u25b2" : "\u25bc") : "\u25b4\u25be"));
    btn.addEventListener("click", () => {
      const key = c.sort || c.key;
      const descFirst = DESC_FIRST.has(key) || (this.q.rows === "kernels" && GROUP_DESC_FIRST.has(key));
      const order = this.q.sort === key ? (this.q.order === "asc" ? "desc" : "asc") : (descFirst ? "desc" : "asc");
      this.set({ sort: key, order, offset: 0 });
      window.setTimeout(() => (this.el.querySelector(`button[data-sort="${key}"]`) as HTMLElement | null)?.focus(), 0);
    });
    return prefix ? h("span", { class: "sort-extra" }, prefix, btn) : btn;
  }

  private header(cols: Col[]): HTMLElement {
    const tr = h("tr", null, h("th", { scope: "col", class: "expander-col" }, h("span", { class: "sr-only" }, "details")));
    for (const c of cols) {
      const extra = c.key === "op" ? MODULE_COL : null;
      const active = this.q.sort === c.sort || (extra !== null && this.q.sort === extra.sort);
      const th = h("th", { scope: "col", class: `${c.num ? "num" : ""}${c.opt ? " opt" : ""} col-${c.key}`,
        "aria-sort": active ? (this.q.order === "asc" ? "ascending" : "descending") : "none" });
      th.appendChild(this.sortButton(c));
      if (extra) th.appendChild(this.sortButton(extra, " \u00b7 "));      // the module path shares the op's column
      tr.appendChild(th);
    }
    return h("thead", null, tr);
  }

  /** The expander of a row (launch or group) and its details' id. */
  private expander(id: number): { toggle: HTMLButtonElement; open: boolean; detailsId: string } {
    const open = this.expanded.has(id);
    const detailsId = `kdet-${id}`;
    const toggle = h("button", { type: "button", class: "expander", "aria-expanded": open ? "true" : "false", "aria-controls": detailsId,
      title: open ? "hide details" : "show details" }, h("span", { "aria-hidden": "true" }, open ? "\u25be" : "\u25b8"), h("span", { class: "sr-only" }, "details"));
    toggle.addEventListener("click", () => {
      if (this.expanded.has(id)) this.expanded.delete(id);
      else this.expanded.add(id);
      if (this.last) this.renderTable(this.last);
      (this.body.querySelector(`button[aria-controls="${detailsId}"]`) as HTMLElement | null)?.focus();
    });
    return { toggle, open, detailsId };
  }

  /** The bound: a button that opens the row's evidence (the reason and the utilisations). */
  private whyButton(toggle: HTMLButtonElement, open: boolean, detailsId: string, pill: HTMLElement, title: string): HTMLElement {
    const why = h("button", { type: "button", class: "linkish bound-why", "aria-controls": detailsId, "aria-expanded": open ? "true" : "false", title }, pill);
    why.addEventListener("click", () => toggle.click());
    return why;
  }

  private launchRows(rows: Kernel[], tbody: HTMLElement): void {
    for (const k of rows) {
      const { toggle, open, detailsId } = this.expander(k.id);
      const why = this.whyButton(toggle, open, detailsId, boundPill(k.bound, k.bound_reason, k.latency_cause, true),
        `${k.bound === "latency" ? latencyWhy(k.latency_cause, k.compute_util, k.memory_util, null, k.estimated) + "\n" : ""}${k.bound_reason}\n(click: the evidence)`);
      tbody.appendChild(h("tr", { "data-id": k.id, class: k.id === this.pinnedId ? "selected" : null },
        h("td", { class: "expander-col" }, toggle),
        nameCell(k.name, k.short_name),
        opCell(k),
        h("td", { class: "kphase" }, k.attention ? [phaseTag(k.phase), h("span", { class: "dir" }, k.direction === "forward" ? "fwd" : "bwd")]
          : h("span", { class: "muted" }, k.kind === "kernel" ? "\u2014" : k.kind), graphBadge(k)),
        h("td", { class: "num" }, fmt.time(k.dur_us)),
        h("td", { class: "num opt" }, fmt.cost(fmt.flops(k.flops), k.estimated, k.upper_bound)),
        h("td", { class: "num opt" }, fmt.cost(fmt.flopRate(k.achieved_flops_per_s ?? k.upper_bound_flops_per_s ?? null), k.estimated, k.upper_bound)),
        h("td", { class: "num opt" }, fmt.cost(fmt.byteRate(k.achieved_bytes_per_s ?? k.upper_bound_bytes_per_s ?? null), k.estimated, k.upper_bound)),
        h("td", { class: "num" }, utilCell(k.compute_util, k.estimated, !!k.upper_bound)),
        h("td", { class: "num" }, utilCell(k.memory_util, k.estimated, !!k.upper_bound)),
        h("td", { class: "kbound" }, why, estBadge(k.estimated), measuredBadge(k.measured)),
      ));
      if (open) tbody.appendChild(h("tr", { class: "details", id: detailsId }, h("td", { colspan: COLS.length + 1 }, details(k))));
    }
  }

  private groupRows(rows: KernelGroup[], tbody: HTMLElement): void {
    for (const g of rows) {
      const { toggle, open, detailsId } = this.expander(g.id);
      tbody.appendChild(h("tr", { "data-id": g.id, "data-calls": g.calls, "data-total-us": g.total_us, class: "group-row" },
        h("td", { class: "expander-col" }, toggle),
        ...groupCells(g, (pill, title) => this.whyButton(toggle, open, detailsId, pill, title))));
      if (open) {
        tbody.appendChild(h("tr", { class: "details", id: detailsId },
          h("td", { colspan: GROUP_COLS.length + 1 }, groupDetails(g, (x) => this.showLaunches(x)))));
      }
    }
  }

  private renderTable(r: Page): void {
    const tbody = h("tbody");
    const grouped = isGroups(r);
    if (isGroups(r)) this.groupRows(r.rows, tbody);
    else this.launchRows(r.rows, tbody);
    const table = h("table", { class: `data kernel-table${grouped ? " grouped" : ""}`, id: "kernel-table", "data-rows": grouped ? "kernels" : "launches" },
      h("caption", { class: "sr-only" }, grouped ? "GPU kernels, one row per kernel" : "GPU kernel launches"), this.header(grouped ? GROUP_COLS : COLS), tbody);
    replace(this.body, r.rows.length ? h("div", { class: "table-wrap" }, table) : h("p", { class: "muted empty-table" },
      this.q.scope === "attention" && !this.q.q && !this.q.phase ? "No attention kernels in this trace." : "No kernel matches these filters."),
    this.pager(r));
  }

  private pager(r: Page): HTMLElement {
    const from = r.total ? r.offset + 1 : 0;
    const to = Math.min(r.offset + r.limit, r.total);
    const prev = h("button", { type: "button", class: "btn", disabled: r.offset <= 0 }, "\u2039 Previous");
    prev.addEventListener("click", () => this.set({ offset: Math.max(0, r.offset - r.limit) }));
    const next = h("button", { type: "button", class: "btn", disabled: r.offset + r.limit >= r.total }, "Next \u203a");
    next.addEventListener("click", () => this.set({ offset: r.offset + r.limit }));
    const size = h("select", { id: "kernel-page-size", "aria-label": "rows per page" },
      ["25", "50", "100", "250"].map((n) => h("option", { value: n }, `${n} rows`)));
    size.value = String(r.limit);
    size.addEventListener("change", () => this.set({ limit: Number(size.value), offset: 0 }));
    const launches = isGroups(r) ? ` (${fmt.count(r.launches)} launch${r.launches === 1 ? "" : "es"})` : "";
    return h("div", { class: "pager" },
      h("span", { class: "muted", id: "kernel-count", "data-total-us": r.total_time_us },
        r.total ? `${fmt.count(from)}\u2013${fmt.count(to)} of ${fmt.count(r.total)} kernels${launches} \u00b7 ${fmt.time(r.total_time_us)}` : "no kernel matches"),
      h("span", { class: "grow" }), size, prev, next);
  }
}

function isGroups(r: Page): r is KernelGroupsResponse {
  return (r as KernelGroupsResponse).grouped === true;
}

function clean(f: KernelFilter | undefined): Partial<KernelQuery> {
  const out: Partial<KernelQuery> = {};
  if (!f) return out;
  for (const key of ["phase", "direction", "bound", "q", "name", "site"] as const) if (typeof f[key] === "string") out[key] = f[key] as string;
  if (f.scope === "attention" || f.scope === "all" || f.scope === "other") out.scope = f.scope;
  if (typeof f.kid === "string") out.kid = /^\d{1,15}$/.test(f.kid) ? f.kid : "";
  if (f.rows === "launches" || f.rows === "kernels") out.rows = f.rows;
  return out;
}
