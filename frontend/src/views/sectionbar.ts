// The Trace view's section bar: a sticky row of jump links, one per section of the page, the
// section being read highlighted. An IntersectionObserver watches a one-pixel line just below the
// sticky bars (root: this document, the plugin's iframe, not TensorBoard's page): a section
// crossing it is the one being read.

import { h } from "../dom";

/** The page's sections in page order, with the label of their link. */
export const SECTIONS: [string, string][] = [
  ["overview-strip", "Overview"],
  ["advice", "Advice"],
  ["replay", "Replay"],
  ["summary", "Summary"],
  ["phases", "Phases"],
  ["sites", "Sites"],
  ["roofline", "Roofline"],
  ["timeline", "Timeline"],
  ["kernels", "Kernels"],
  ["memory", "Memory"],
];

export interface SectionTarget {
  id: string;
  label: string;
  el: HTMLElement;          // what is scrolled to and watched (the memory view's slot before it loads)
}

const LINE_GAP = 12;        // the line watched: this far below the sticky bars

export class SectionBar {
  readonly el: HTMLElement;
  private links = new Map<string, HTMLButtonElement>();
  private io: IntersectionObserver | null = null;
  // a link clicked: highlighted until the page scrolls on (a short last section never reaches the line)
  private held: { id: string; line: string | null } | null = null;
  private current: string | null = null;

  /** ``stickyBottom``: how far from the top of the viewport the sticky bars end, this bar included. */
  constructor(private targets: SectionTarget[], private stickyBottom: () => number) {
    this.el = h("nav", { class: "section-bar", id: "section-bar", "aria-label": "sections of this page" });
    for (const t of targets) {
      const b = h("button", { type: "button", class: "section-link", "data-target": t.id, title: `jump to ${t.label}` }, t.label);
      b.addEventListener("click", () => this.go(t.id));
      this.links.set(t.id, b);
      this.el.appendChild(b);
    }
  }

  /** Start (or restart, after a resize) watching the line below the sticky bars. */
  observe(): void {
    this.io?.disconnect();
    if (typeof IntersectionObserver === "undefined" || !this.el.isConnected) return;
    const top = Math.round(this.stickyBottom() + LINE_GAP);
    const below = Math.max(0, document.documentElement.clientHeight - top - 1);
    this.io = new IntersectionObserver(() => this.update(), { root: document, rootMargin: `-${top}px 0px -${below}px 0px`, threshold: 0 });
    for (const t of this.targets) this.io.observe(t.el);
  }

  destroy(): void {
    this.io?.disconnect();
    this.io = null;
  }

  /** Scroll a section to just below the sticky bars and highlight its link. */
  go(id: string): void {
    const t = this.targets.find((x) => x.id === id);
    if (!t) return;
    t.el.scrollIntoView({ block: "start", behavior: "auto" });
    this.held = { id, line: this.atLine() };
    this.mark(id);
  }

  /** The section under the line: the one crossing it, else the last one above it, else the first. */
  private atLine(): string | null {
    const y = this.stickyBottom() + LINE_GAP;
    let above: string | null = null;
    for (const t of this.targets) {
      const r = t.el.getBoundingClientRect();
      if (r.height === 0) continue;
      if (r.top <= y && r.bottom > y) return t.id;
      if (r.top <= y) above = t.id;
    }
    return above ?? this.targets[0]?.id ?? null;
  }

  private update(): void {
    const line = this.atLine();
    if (this.held && line === this.held.line) return;      // still where the click left the page
    this.held = null;
    this.mark(line);
  }

  private mark(id: string | null): void {
    if (id === this.current) return;
    this.current = id;
    for (const [k, b] of this.links) {
      if (k === id) b.setAttribute("aria-current", "true");
      else b.removeAttribute("aria-current");
    }
  }
}

/** The sections present on the page (``main``'s children with their ids; the memory view's slot). */
export function sectionTargets(main: HTMLElement, memorySlot: HTMLElement | null): SectionTarget[] {
  const out: SectionTarget[] = [];
  for (const [id, label] of SECTIONS) {
    const el = id === "memory" ? memorySlot : (Array.from(main.children).find((c) => c.id === id) as HTMLElement | undefined) || null;
    if (el) out.push({ id, label, el });
  }
  return out;
}
