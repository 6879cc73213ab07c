// Client of the plugin's JSON routes. Every request goes to the plugin's own origin, relative to
// this module (…/data/plugin/attention/index.js), so nothing ever leaves TensorBoard.

import type { CompareResponse, Counts, Kernel, KernelGroupsResponse, KernelsResponse, OverviewRow, RooflineResponse, RunsResponse, Selection,
  SummaryResponse, TimelineResponse } from "./types";
import type { MemoryResponse } from "./views/memory";

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export type Result<T> =
  | { kind: "ready"; data: T }
  | { kind: "pending"; state: string; message: string | null; counts?: Counts }
  | { kind: "failed"; message: string; incomplete?: boolean };

let base: URL | null = null;

function baseUrl(): URL {
  if (!base) base = new URL("./", import.meta.url);
  return base;
}

export function url(route: string, params: Record<string, string | number | boolean | null | undefined> = {}): string {
  const u = new URL(route, baseUrl());
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") continue;
    u.searchParams.set(k, String(v));
  }
  return u.toString();
}

async function getJson(route: string, params: Record<string, string | number | boolean | null | undefined>, signal?: AbortSignal): Promise<{ status: number; body: any }> {
  const r = await fetch(url(route, params), { credentials: "same-origin", signal, headers: { Accept: "application/json" } });
  let body: any = null;
  try {
    body = await r.json();
  } catch {
    throw new ApiError(r.status, `unexpected answer from the server (HTTP ${r.status})`);
  }
  if (r.status >= 400) throw new ApiError(r.status, (body && body.error) || `HTTP ${r.status}`);
  return { status: r.status, body };
}

async function getResult<T>(route: string, params: Record<string, any>, signal?: AbortSignal): Promise<Result<T>> {
  const { status, body } = await getJson(route, params, signal);
  if (status === 202) return { kind: "pending", state: body.state, message: body.message ?? null, counts: body.counts };
  if (body.state === "incomplete") return { kind: "failed", message: body.error || "the file ends early", incomplete: true };
  if (body.state === "error") {
    const msg = body.error || (body.errors ? Object.entries(body.errors).map(([k, v]) => `${k}: ${v}`).join("; ") : "analysis failed");
    return { kind: "failed", message: msg };
  }
  return { kind: "ready", data: body as T };
}

export function selParams(sel: Selection, prefix = ""): Record<string, string | null | undefined> {
  const runKey = prefix ? prefix.replace(/_$/, "") : "run";
  return {
    [runKey]: sel.run,
    [`${prefix}worker`]: sel.worker,
    [`${prefix}span`]: sel.span,
    [`${prefix}file`]: sel.file,
    [`${prefix}step`]: sel.step,
    [`${prefix}partial`]: sel.partial ? "1" : null,
  };
}

export const api = {
  runs: (signal?: AbortSignal) => getJson("runs", {}, signal).then((r) => r.body as RunsResponse),
  summary: (sel: Selection, signal?: AbortSignal) => getResult<SummaryResponse>("summary", selParams(sel), signal),
  kernels: (sel: Selection, q: Record<string, string | number | null>, signal?: AbortSignal) =>
    getResult<KernelsResponse>("kernels", { ...selParams(sel), ...q }, signal),
  kernelGroups: (sel: Selection, q: Record<string, string | number | null>, signal?: AbortSignal) =>
    getResult<KernelGroupsResponse>("kernels", { ...selParams(sel), ...q, group: 1 }, signal),
  roofline: (sel: Selection, q: Record<string, string | number | null>, signal?: AbortSignal) =>
    getResult<RooflineResponse>("roofline", { ...selParams(sel), ...q }, signal),
  compare: (base: Selection, next: Selection, signal?: AbortSignal) =>
    getResult<CompareResponse>("compare", { ...selParams(base, "base_"), ...selParams(next, "new_") }, signal),
  reportUrl: (sel: Selection) => url("report", selParams(sel)),
  memory: (sel: Selection, signal?: AbortSignal) => getResult<MemoryResponse>("memory", selParams(sel), signal),
  annotatedUrl: (sel: Selection) => url("annotated", selParams(sel)),
  replayScriptUrl: (sel: Selection) => url("replay_script", selParams(sel)),
  overview: (signal?: AbortSignal) => getJson("overview", {}, signal).then((r) => r.body as { runs: OverviewRow[] }),
  timeline: (sel: Selection, q: { t0?: number | null; t1?: number | null; width: number }, signal?: AbortSignal) =>
    getResult<TimelineResponse>("timeline", { ...selParams(sel), t0: q.t0, t1: q.t1, width: q.width }, signal),
  kernel: (sel: Selection, id: number, signal?: AbortSignal) =>
    getResult<{ kernel: Kernel }>("kernel", { ...selParams(sel), id }, signal),
};

/** Call ``fn`` until it is no longer pending (the server answers 202 while a trace loads). */
export async function untilReady<T>(fn: () => Promise<Result<T>>, onPending: (r: Result<T>) => void,
  isCurrent: () => boolean, intervalMs = 1000, maxTries = 3600): Promise<Result<T> | null> {
  for (let i = 0; i < maxTries; i++) {
    const r = await fn();
    if (!isCurrent()) return null;
    if (r.kind !== "pending") return r;
    onPending(r);
    await new Promise((res) => window.setTimeout(res, intervalMs));
    if (!isCurrent()) return null;
  }
  return null;
}
