// The selection in the URL: run, file, view, kernel filters and the compare pair live in the
// hash of TensorBoard's page (#attention&att.run=gpt&att.view=run...), so that a view survives a
// reload and can be shared. TensorBoard reads its own hash as "tab&key=value&...": our keys ride
// along under the "att." prefix and are written with replaceState (no hashchange, no history
// entry per click). Outside TensorBoard the iframe's own hash is used.

import type { TimeBase } from "./timebase";
import type { Selection } from "./types";

const PREFIX = "att.";

export type View = "runs" | "run" | "compare" | "ranks";

export interface KernelFilter {
  phase?: string;
  direction?: string;
  bound?: string;
  scope?: string;
  q?: string;
  site?: string;
  name?: string;           // exactly one kernel name (a click-through), shown as a chip, not in the search box
  kid?: string;            // instead of ``name``: the id of a kernel whose name it is (short URLs; /kernels?name_of=)
  rows?: string;           // "launches": every launch, one row each (else one row per kernel)
}

export interface UrlState {
  view?: View;
  sel?: Selection;
  k?: KernelFilter;
  base?: Selection;
  next?: Selection;
  tb?: TimeBase;           // the Trace view's time base: att.base=total (absent: per step)
}

function hostWindow(): Window {
  try {
    if (window.parent && window.parent !== window && window.parent.location.href) return window.parent;
  } catch {
    /* cross-origin parent */
  }
  return window;
}

function parts(hash: string): string[] {
  return hash.replace(/^#/, "").split("&").filter((p) => p.length);
}

const SEL_KEYS: (keyof Selection)[] = ["run", "worker", "span", "file", "step"];
const K_KEYS: (keyof KernelFilter)[] = ["phase", "direction", "bound", "scope", "q", "name", "kid", "site", "rows"];

function selFrom(m: Map<string, string>, prefix: string): Selection | undefined {
  const run = m.get(`${prefix}run`);
  if (run === undefined) return undefined;
  const s: Selection = { run };
  for (const k of SEL_KEYS) if (k !== "run" && m.has(`${prefix}${k}`)) (s as unknown as Record<string, unknown>)[k] = m.get(`${prefix}${k}`) || null;
  if (m.get(`${prefix}partial`) === "1") s.partial = true;
  return s;
}

/** The hash our keys were last read from or written to: a hashchange to anything else is a
 * link the user followed or edited (TensorBoard's own keys changing leave ours alone). */
let lastOurs = "";

function ours(hash: string): string {
  return parts(hash).filter((p) => p.startsWith(PREFIX)).join("&");
}

/** Call ``fn`` with the new state when the URL's hash changes to name another view, run or filter
 * (a shared link pasted into an open tab, the back button): writeState's own replaceState fires no
 * hashchange, and a change of TensorBoard's keys alone is ignored. */
export function onHashState(fn: (st: UrlState) => void): void {
  hostWindow().addEventListener("hashchange", () => {
    const now = ours(hostWindow().location.hash);
    if (now === lastOurs) return;
    lastOurs = now;
    fn(readState());
  });
}

export function readState(): UrlState {
  const m = new Map<string, string>();
  lastOurs = ours(hostWindow().location.hash);
  for (const p of parts(hostWindow().location.hash)) {
    if (!p.startsWith(PREFIX)) continue;
    const i = p.indexOf("=");
    if (i < 0) continue;
    try {
      m.set(decodeURIComponent(p.slice(PREFIX.length, i)), decodeURIComponent(p.slice(i + 1)));
    } catch {
      /* a malformed escape: ignore that key */
    }
  }
  const out: UrlState = {};
  const v = m.get("view");
  if (v === "runs" || v === "run" || v === "compare" || v === "ranks") out.view = v;
  out.sel = selFrom(m, "");
  out.base = selFrom(m, "b.");
  out.next = selFrom(m, "n.");
  const k: KernelFilter = {};
  for (const key of K_KEYS) if (m.has(`k.${key}`)) k[key] = m.get(`k.${key}`);
  if (Object.keys(k).length) out.k = k;
  if (m.get("base") === "total") out.tb = "total";
  return out;
}

export function writeState(st: UrlState): void {
  const w = hostWindow();
  const keep = parts(w.location.hash).filter((p) => !p.startsWith(PREFIX));
  // TensorBoard's tab is the one hash part without "=": keep ours open after a reload.
  if (w !== window && !keep.some((p) => !p.includes("="))) keep.unshift("attention");
  const add = (k: string, v: string | null | undefined) => {
    if (v === null || v === undefined || v === "") return;
    keep.push(`${PREFIX}${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  };
  if (st.view) add("view", st.view);
  const putSel = (s: Selection | undefined, prefix: string) => {
    if (!s) return;
    // the file names its worker and span: run, file and step are enough
    for (const k of s.file ? (["run", "file", "step"] as const) : SEL_KEYS) add(`${prefix}${k}`, s[k] as string | null | undefined);
    if (s.partial) add(`${prefix}partial`, "1");
  };
  putSel(st.sel, "");
  if (st.view === "compare") {
    putSel(st.base, "b.");
    putSel(st.next, "n.");
  }
  if (st.tb === "total") add("base", "total");
  if (st.k && st.view === "run") for (const key of K_KEYS) add(`k.${key}`, st.k[key]);
  const hash = keep.length ? `#${keep.join("&")}` : "";
  lastOurs = ours(hash);
  if (w.location.hash === hash || (!hash && !w.location.hash)) return;
  try {
    const u = new URL(w.location.href);
    u.hash = hash;
    w.history.replaceState(w.history.state, "", u.toString());
  } catch {
    /* a sandboxed page: the state just does not persist */
  }
}
