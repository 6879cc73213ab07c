// Timeline: per stream, the GPU kernels of a step over time, attention coloured by phase and each
// attention call bracketed above its kernels. Drawn on a canvas from /timeline, which merges
// kernels narrower than a pixel on the server (server/timeline.py), so a step of 100k kernels
// draws as fast as one of 100. Wheel zooms around the pointer, drag pans, hover names the kernel,
// click selects it in the kernel table. Arrow keys pan, +/- zoom, 0 resets.

import { api, ApiError } from "../api";
import { PHASE_ORDER, phaseColor, phaseLabel } from "../colors";
import { h, replace } from "../dom";
import * as fmt from "../format";
import type { Kernel, Selection, Summary, TimelineLane, TimelineResponse } from "../types";
import { shortName } from "../names";
import { hideTip, phaseTag, section, showTip, sourceTag } from "../widgets";
import * as states from "./states";

const LABEL_W = 112;
const AXIS_H = 22;
const CALL_H = 5;
const KERNEL_H = 18;
const LANE_H = CALL_H + KERNEL_H + 13;

interface Hit {
  lane: TimelineLane;
  i: number;
}

function cssVar(el: Element, name: string, fallback: string): string {
  const v = getComputedStyle(el).getPropertyValue(name).trim();
  return v || fallback;
}

export class Timeline {
  readonly el: HTMLElement;
  private canvas = h("canvas", { class: "timeline-canvas", id: "timeline-canvas", tabindex: 0, role: "img",
    "aria-label": "GPU kernels per stream over time; wheel or +/- to zoom, drag or arrow keys to pan, click a kernel to select it" });
  private status = h("div", { class: "muted small timeline-status", "aria-live": "polite" });
  private stepSel = h("select", { id: "timeline-step" });
  private body = h("div", { class: "timeline-body" });
  private data: TimelineResponse | null = null;
  private view: [number, number] | null = null;      // absolute µs window shown
  private full: [number, number] | null = null;      // the step's (or trace's) window
  private seq = 0;
  private fetchTimer: number | undefined;
  private drag: { x: number; view: [number, number]; moved: boolean } | null = null;
  private kernelCache = new Map<number, Kernel>();
  private hoverId = -1;

  /** ``comm``: "device:stream" of the streams that carry collective communication (the report's
   * ``streams``), labelled so. */
  /** ``summary``: the legend lists every phase the trace has (the server merges kernels narrower
   * than a pixel, so a short phase may have no mark of its own at the first zoom), and the steps'
   * CPU durations name the difference from the GPU window. */
  constructor(private sel: Selection, private onSelect: (k: Kernel) => void, private comm: Set<string> = new Set(),
    private summary?: Pick<Summary, "phases" | "steps">) {
    const reset = h("button", { type: "button", class: "btn", id: "timeline-reset" }, "Reset zoom");
    reset.addEventListener("click", () => this.setView(this.full));
    this.stepSel.addEventListener("change", () => this.pickStep(this.stepSel.value));
    this.el = section("Timeline", "timeline",
      h("p", { class: "section-help" },
        "GPU kernels per stream over one step: attention kernels coloured by phase, others grey; the bar above marks each attention call. Wheel to zoom, drag to pan, click a kernel to select it in the table. " +
        "A step's window runs from its first to its last GPU activity; the step time above is the profiler step's CPU range, which also holds the launch of its first kernel and the wait for its last, so the two differ."),
      h("div", { class: "controls" },
        h("label", { class: "field", for: "timeline-step" }, h("span", { class: "field-label" }, "Window"), this.stepSel),
        reset, h("span", { class: "grow" }), this.status),
      this.body);
    replace(this.body, h("p", { class: "muted" }, "Loading the timeline\u2026"));
    this.bind();
    void this.fetch(null);
    window.addEventListener("resize", this.onResize);
    // colours come from the theme's CSS variables: redraw when dark mode toggles
    this.themeObserver.observe(document.body, { attributes: true, attributeFilter: ["class"] });
  }

  private width(): number {
    return Math.max(200, Math.floor((this.body.clientWidth || 900)));
  }

  private bind(): void {
    const c = this.canvas;
    c.addEventListener("wheel", (ev) => {
      if (!this.view) return;
      ev.preventDefault();
      const f = Math.exp(Math.sign(ev.deltaY) * Math.min(Math.abs(ev.deltaY), 300) / 300);
      this.zoomAt(this.xToTime(ev.offsetX), f);
    }, { passive: false });
    c.addEventListener("mousedown", (ev) => {
      if (!this.view) return;
      this.drag = { x: ev.clientX, view: [this.view[0], this.view[1]], moved: false };
    });
    window.addEventListener("mouseup", this.onMouseUp);
    window.addEventListener("mousemove", this.onMouseMove);
    c.addEventListener("mousemove", (ev) => {
      if (this.drag?.moved) return;
      this.hover(ev.offsetX, ev.offsetY, ev.pageX, ev.pageY);
    });
    c.addEventListener("mouseleave", () => {
      hideTip();
      this.hoverId = -1;
    });
    c.addEventListener("keydown", (ev) => this.onKey(ev));
  }

  /** The page replaced this view (another run): stop listening to the window. */
  private gone(): boolean {
    if (this.el.isConnected || !this.data) return false;
    window.removeEventListener("resize", this.onResize);
    window.removeEventListener("mouseup", this.onMouseUp);
    window.removeEventListener("mousemove", this.onMouseMove);
    this.themeObserver.disconnect();
    window.clearTimeout(this.fetchTimer);
    return true;
  }

  private themeObserver = new MutationObserver(() => { if (!this.gone()) this.draw(); });

  private onResize = (): void => {
    if (!this.gone()) this.scheduleFetch(50);
  };

  private onMouseUp = (ev: MouseEvent): void => {
    const c = this.canvas;
    const d = this.drag;
    this.drag = null;
    if (d && !d.moved && ev.target === c) this.click(ev.offsetX, ev.offsetY);
  };

  private onMouseMove = (ev: MouseEvent): void => {
    const d = this.drag;
    if (!d || !this.view) return;
    const dx = ev.clientX - d.x;
    if (Math.abs(dx) > 2) d.moved = true;
    if (!d.moved) return;
    const us = ((d.view[1] - d.view[0]) / this.plotW()) * dx;
    this.setView([d.view[0] - us, d.view[1] - us], false);
  };

  private onKey(ev: KeyboardEvent): void {
    if (!this.view) return;
    const span = this.view[1] - this.view[0];
    const mid = (this.view[0] + this.view[1]) / 2;
    if (ev.key === "+" || ev.key === "=") this.zoomAt(mid, 0.5);
    else if (ev.key === "-") this.zoomAt(mid, 2);
    else if (ev.key === "ArrowLeft") this.setView([this.view[0] - span / 5, this.view[1] - span / 5]);
    else if (ev.key === "ArrowRight") this.setView([this.view[0] + span / 5, this.view[1] + span / 5]);
    else if (ev.key === "0") this.setView(this.full);
    else return;
    ev.preventDefault();
  }

  private plotW(): number {
    return Math.max(50, this.canvas.clientWidth - LABEL_W);
  }

  private xToTime(x: number): number {
    const [a, b] = this.view!;
    return a + ((x - LABEL_W) / this.plotW()) * (b - a);
  }

  private zoomAt(t: number, f: number): void {
    const [a, b] = this.view!;
    const minSpan = 0.5;    // µs
    let na = t - (t - a) * f;
    let nb = t + (b - t) * f;
    if (nb - na < minSpan) {
      na = t - minSpan / 2;
      nb = t + minSpan / 2;
    }
    this.setView([na, nb]);
  }

  private setView(v: [number, number] | null, fetchNow = true): void {
    if (!v) return;
    this.view = v;
    this.draw();
    this.scheduleFetch(fetchNow ? 120 : 200);
  }

  private scheduleFetch(ms: number): void {
    window.clearTimeout(this.fetchTimer);
    if (this.gone()) return;
    this.fetchTimer = window.setTimeout(() => void this.fetch(this.view), ms);
  }

  private pickStep(v: string): void {
    const d = this.data;
    if (!d) return;
    if (v === "") this.full = [d.extent[0], d.extent[1]];
    else {
      const st = d.steps.find((x) => x.name === v);
      if (!st) return;
      this.full = [st.t0, st.t1];
    }
    this.setView(this.full);
  }

  private async fetch(win: [number, number] | null): Promise<void> {
    const my = ++this.seq;
    const width = Math.max(100, this.width() - LABEL_W);
    try {
      const r = await api.timeline(this.sel, { t0: win ? win[0] : null, t1: win ? win[1] : null, width });
      if (my !== this.seq) return;
      if (r.kind === "pending") {
        this.fetchTimer = window.setTimeout(() => void this.fetch(win), 1000);
        return;
      }
      if (r.kind === "failed") {
        replace(this.body, states.failed(r.message, this.sel.file));
        return;
      }
      const first = !this.data;
      this.data = r.data;
      if (first) this.initWindow(r.data);
      else this.draw();
    } catch (e) {
      if (my !== this.seq) return;
      replace(this.body, states.apiError(e instanceof ApiError ? e.message : String(e)));
    }
  }

  private initWindow(d: TimelineResponse): void {
    const cpu = new Map((this.summary?.steps || []).map((x) => [x.name, x.dur_us]));
    const opts: [string, string][] = d.steps.map((s) => {
      const c = cpu.get(s.name);
      return [s.name, `${s.name.replace("ProfilerStep#", "step ")} \u00b7 GPU work ${fmt.time(s.t1 - s.t0)}${c ? ` (step ${fmt.time(c)})` : ""}`];
    });
    opts.push(["", `whole trace (${fmt.time(d.extent[1] - d.extent[0])})`]);
    replace(this.stepSel, opts.map(([v, l]) => h("option", { value: v }, l)));
    this.stepSel.disabled = opts.length <= 1;
    if (!d.lanes.length) {
      replace(this.body, h("p", { class: "muted" }, "No GPU activity in this trace."));
      return;
    }
    replace(this.body, this.canvas, this.legend(d));
    const st = d.steps[0];
    this.stepSel.value = st ? st.name : "";
    this.full = st ? [st.t0, st.t1] : [d.extent[0], d.extent[1]];
    this.view = this.full;
    if (st) void this.fetch(this.view);
    else this.draw();
  }

  private legend(d: TimelineResponse): HTMLElement {
    const inTrace = new Set((this.summary?.phases || []).map((p) => p.phase));
    const present = this.summary
      ? PHASE_ORDER.filter((p) => inTrace.has(p) && d.categories.includes(p))
      : d.categories.filter((_, i) => d.lanes.some((l) => l.runs.cat.includes(i)));
    const other = h("span", { class: "phase-tag" }, h("span", { class: "dot tl-other-dot", "aria-hidden": "true" }), "not attention");
    return h("div", { class: "legend" }, present.map((p) => phaseTag(p)), other,
      h("span", { class: "phase-tag" }, h("span", { class: "tl-call-swatch", "aria-hidden": "true" }), "attention call"));
  }

  private draw(): void {
    const d = this.data;
    const v = this.view;
    if (!d || !v || !this.canvas.isConnected) return;
    const c = this.canvas;
    const cssW = this.body.clientWidth || 900;
    const cssH = AXIS_H + d.lanes.length * LANE_H + 4;
    const dpr = window.devicePixelRatio || 1;
    c.style.width = `${cssW}px`;
    c.style.height = `${cssH}px`;
    if (c.width !== Math.round(cssW * dpr) || c.height !== Math.round(cssH * dpr)) {
      c.width = Math.round(cssW * dpr);
      c.height = Math.round(cssH * dpr);
    }
    const g = c.getContext("2d");
    if (!g) return;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    const text = cssVar(c, "--text", "#1f2328");
    const muted = cssVar(c, "--muted", "#59636e");
    const grid = cssVar(c, "--grid", "#eaeef2");
    const otherCol = cssVar(c, "--tl-other", "#c4c9cf");
    const callCol = cssVar(c, "--tl-call", "#6e40c9");
    g.clearRect(0, 0, cssW, cssH);
    const pw = cssW - LABEL_W;
    const [a, b] = v;
    const X = (t: number) => LABEL_W + ((t - a) / (b - a)) * pw;
    // axis: about one tick per 110 px
    g.font = "11px sans-serif";
    g.fillStyle = muted;
    g.strokeStyle = grid;
    const span = b - a;
    const raw = span / Math.max(1, pw / 110);
    const p10 = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p10).find((s) => s >= raw) || 10 * p10;
    const base = this.full ? this.full[0] : a;
    for (let t = Math.ceil((a - base) / step) * step; t <= b - base; t += step) {
      const x = X(base + t);
      g.beginPath();
      g.moveTo(x + 0.5, AXIS_H - 4);
      g.lineTo(x + 0.5, cssH);
      g.stroke();
      g.fillText(fmt.time(t), x + 3, 12);
    }
    // where each step's GPU work starts
    g.save();
    g.setLineDash([3, 3]);
    g.strokeStyle = muted;
    for (const st of d.steps) {
      const x = X(st.t0);
      if (x < LABEL_W || x > cssW) continue;
      g.beginPath();
      g.moveTo(x + 0.5, AXIS_H - 6);
      g.lineTo(x + 0.5, cssH);
      g.stroke();
    }
    g.restore();
    const rel = d.t0;      // the answer's times are relative to its t0
    d.lanes.forEach((lane, li) => {
      const y = AXIS_H + li * LANE_H;
      g.fillStyle = text;
      const isComm = this.comm.has(`${lane.device}:${lane.stream}`);
      g.fillText(`${d.lanes.some((l) => l.device !== lane.device) ? `GPU ${lane.device} ` : ""}stream ${lane.stream}${isComm ? " \u00b7 comm" : ""}`, 6, y + CALL_H + 11);
      g.fillStyle = muted;
      // in the window, as the status line counts them (not the whole trace's: a step view of a
      // two-step trace would read 760 over the status line's 380)
      g.fillText(`${fmt.count(lane.kernels)} kernels`, 6, y + CALL_H + 24);
      g.save();
      g.beginPath();
      g.rect(LABEL_W, y, pw, LANE_H);
      g.clip();
      const cl = lane.calls;
      g.fillStyle = callCol;
      for (let i = 0; i < cl.start.length; i++) {
        const x0 = X(rel + cl.start[i]);
        const x1 = X(rel + cl.end[i]);
        g.fillRect(x0, y + 1, Math.max(1, x1 - x0), CALL_H - 1);
      }
      const r = lane.runs;
      for (let i = 0; i < r.start.length; i++) {
        const x0 = X(rel + r.start[i]);
        const x1 = X(rel + r.end[i]);
        if (x1 < LABEL_W || x0 > cssW) continue;
        const cat = r.cat[i];
        g.fillStyle = cat < 0 ? otherCol : phaseColor(d.categories[cat]);
        const w = Math.max(1, x1 - x0);
        g.fillRect(x0, y + CALL_H + 2, w, KERNEL_H);
        if (r.id[i] >= 0 && r.id[i] === this.hoverId) {
          g.strokeStyle = text;
          g.lineWidth = 1.5;
          g.strokeRect(x0, y + CALL_H + 2, w, KERNEL_H);
          g.lineWidth = 1;
        }
      }
      g.restore();
      g.strokeStyle = grid;
      g.beginPath();
      g.moveTo(0, y + LANE_H - 0.5);
      g.lineTo(cssW, y + LANE_H - 0.5);
      g.stroke();
    });
    const shown = d.lanes.reduce((s2, l) => s2 + l.runs.start.length, 0);
    const kernels = d.lanes.reduce((s2, l) => s2 + l.kernels, 0);
    this.status.textContent = `${fmt.time(b - a)} shown \u00b7 ${fmt.count(kernels)} kernels in ${fmt.count(shown)} marks`;
  }

  private hit(x: number, y: number): Hit | null {
    const d = this.data;
    if (!d || !this.view || x < LABEL_W) return null;
    const li = Math.floor((y - AXIS_H) / LANE_H);
    const lane = d.lanes[li];
    if (!lane) return null;
    const t = this.xToTime(x) - d.t0;
    const tol = ((this.view[1] - this.view[0]) / this.plotW()) * 2;
    const r = lane.runs;
    let best = -1;
    let bestD = Infinity;
    for (let i = 0; i < r.start.length; i++) {
      const dd = t < r.start[i] ? r.start[i] - t : t > r.end[i] ? t - r.end[i] : 0;
      if (dd < bestD) {
        bestD = dd;
        best = i;
      }
    }
    return best >= 0 && bestD <= tol ? { lane, i: best } : null;
  }

  private async kernel(id: number): Promise<Kernel | null> {
    const k = this.kernelCache.get(id);
    if (k) return k;
    const r = await api.kernel(this.sel, id);
    if (r.kind !== "ready") return null;
    this.kernelCache.set(id, r.data.kernel);
    return r.data.kernel;
  }

  private hover(x: number, y: number, px: number, py: number): void {
    const hit = this.hit(x, y);
    const d = this.data;
    if (!hit || !d) {
      hideTip();
      if (this.hoverId !== -1) {
        this.hoverId = -1;
        this.draw();
      }
      this.canvas.style.cursor = "default";
      return;
    }
    const r = hit.lane.runs;
    const i = hit.i;
    const cat = r.cat[i];
    const dur = r.end[i] - r.start[i];
    const id = r.id[i];
    this.canvas.style.cursor = id >= 0 ? "pointer" : "default";
    if (id !== this.hoverId) {
      this.hoverId = id;
      this.draw();
    }
    if (id < 0) {
      showTip(px, py, h("div", null,
        h("div", { class: "tip-title" }, `${fmt.count(r.n[i])} kernels (zoom in to separate them)`),
        h("div", null, `${fmt.time(r.busy[i])} busy over ${fmt.time(dur)}`),
        h("div", null, "mostly ", cat < 0 ? "outside attention" : phaseTag(d.categories[cat]))));
      return;
    }
    const known = this.kernelCache.get(id);
    const render = (k: Kernel | null) => showTip(px, py, h("div", null,
      h("div", { class: "tip-title mono" }, k ? shortName(k.name, k.short_name) : `kernel ${id}`),
      h("div", null, cat < 0 ? "outside attention" : phaseTag(d.categories[cat], `${phaseLabel(d.categories[cat])}${k ? ` \u00b7 ${k.direction}` : ""}`),
        ` \u00b7 ${fmt.time(k ? k.dur_us : dur)}`),
      k && k.op ? h("div", { class: "muted" }, `op ${k.op}${k.module_path ? ` \u00b7 ${k.module_path}` : ""}`) : null,
      k && k.source ? h("div", null, sourceTag(k.source)) : null,
      h("div", { class: "tip-sub" }, "click to select it in the kernel table")));
    render(known || null);
    if (!known) void this.kernel(id).then((k) => { if (k && this.hoverId === id) render(k); });
  }

  private click(x: number, y: number): void {
    const hit = this.hit(x, y);
    if (!hit) return;
    const id = hit.lane.runs.id[hit.i];
    if (id < 0) {
      // a merged run: zoom onto it
      const d = this.data!;
      const r = hit.lane.runs;
      const a = d.t0 + r.start[hit.i];
      const b = d.t0 + r.end[hit.i];
      const pad = (b - a) * 0.2 + 1;
      this.setView([a - pad, b + pad]);
      return;
    }
    void this.kernel(id).then((k) => { if (k) { hideTip(); this.onSelect(k); } });
  }
}
