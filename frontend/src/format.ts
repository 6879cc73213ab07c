// Numbers with units. Unknown values (null) show as an em dash; estimated ones get a "~".

export const DASH = "\u2014";

function sig(x: number, digits = 3): string {
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 100) return x.toFixed(Math.max(0, digits - 3));
  if (a >= 10) return x.toFixed(Math.max(0, digits - 2));
  if (a >= 1) return x.toFixed(Math.max(0, digits - 1));
  return x.toPrecision(digits);
}

function scaled(x: number | null | undefined, units: [number, string][], digits = 3): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  for (const [f, u] of units) {
    if (Math.abs(x) >= f) return `${sig(x / f, digits)} ${u}`;
  }
  const [f, u] = units[units.length - 1];
  return `${sig(x / f, digits)} ${u}`;
}

/** Microseconds -> "12.3 µs", "4.56 ms", "1.23 s". */
export function time(us: number | null | undefined): string {
  if (us === null || us === undefined || !isFinite(us)) return DASH;
  const a = Math.abs(us);
  if (a >= 1e6) return `${sig(us / 1e6)} s`;
  if (a >= 1e3) return `${sig(us / 1e3)} ms`;
  return `${sig(us)} \u00b5s`;
}

export function flopRate(x: number | null | undefined): string {
  return scaled(x, [[1e15, "PFLOP/s"], [1e12, "TFLOP/s"], [1e9, "GFLOP/s"], [1e6, "MFLOP/s"], [1, "FLOP/s"]]);
}

export function byteRate(x: number | null | undefined): string {
  return scaled(x, [[1e12, "TB/s"], [1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"], [1, "B/s"]]);
}

export function flops(x: number | null | undefined): string {
  return scaled(x, [[1e15, "PFLOP"], [1e12, "TFLOP"], [1e9, "GFLOP"], [1e6, "MFLOP"], [1e3, "kFLOP"], [1, "FLOP"]]);
}

export function bytes(x: number | null | undefined): string {
  return scaled(x, [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"], [1, "B"]]);
}

export function intensity(x: number | null | undefined): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  return `${sig(x)} FLOP/B`;
}

/** A fraction as a percentage: 0.421 -> "42.1 %". */
export function pct(x: number | null | undefined, digits = 1): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  const p = x * 100;
  return `${p >= 100 || p === 0 ? p.toFixed(0) : p.toFixed(digits)} %`;
}

export function count(x: number | null | undefined): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  return Math.round(x).toLocaleString("en-US");
}

/** "~" in front of an estimated value. */
export function est(text: string, estimated: boolean | null | undefined): string {
  return estimated && text !== DASH ? `~${text}` : text;
}

/** A cost figure: "\u2264" when it rests on a dense upper bound (FlexAttention with an unknown
 * mask: FLOPs, bytes and the rates over the kernel's time), else "~" when estimated. */
export function cost(text: string, estimated: boolean | null | undefined, upperBound: boolean | null | undefined): string {
  return upperBound && text !== DASH ? `\u2264${text}` : est(text, estimated);
}

/** Input shapes of the cost op; non-tensor arguments (null) and scalars ([]) are left out. */
export function shape(s: (number[] | null)[] | null | undefined): string {
  const t = (s || []).filter((x) => x && x.length);
  if (!t.length) return DASH;
  return t.map((x) => `[${x!.join(", ")}]`).join(" ");
}

/** Compact axis labels for log scales: 1e-2 -> "0.01", 1e3 -> "1k", 1e12 -> "1T". */
export function tick(x: number): string {
  const units: [number, string][] = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [f, u] of units) if (x >= f) return `${+(x / f).toPrecision(3)}${u}`;
  return `${+x.toPrecision(3)}`;
}

/** A span as "#2 · 2026-11-30 08:12:25": one format for every run. The date is the span's own
 * timestamp when it is one (tensorboard_trace_handler writes epoch ns; µs, ms and s are read too),
 * else the file's modification time (``mtimeSec``), else only the index. */
export function spanLabel(span: string | null, index: number, mtimeSec?: number | null): string {
  const d = spanDate(span) ?? (mtimeSec ? new Date(mtimeSec * 1000) : null);
  if (!d) return `#${index}`;
  const pad = (n: number) => String(n).padStart(2, "0");
  return `#${index} \u00b7 ${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function spanDate(span: string | null): Date | null {
  if (!span || !/^\d+$/.test(span)) return null;
  const v = Number(span);
  for (const div of [1e6, 1e3, 1, 1e-3]) {          // ns, µs, ms, s -> ms
    const ms = v / div;
    if (ms >= 946684800000 && ms < 4102444800000) return new Date(ms);     // 2000..2100
  }
  return null;
}

export function fileSize(n: number | null | undefined): string {
  return bytes(n);
}

export function signedTime(us: number | null | undefined): string {
  if (us === null || us === undefined || !isFinite(us)) return DASH;
  return (us > 0 ? "+" : us < 0 ? "\u2212" : "\u00b1") + time(Math.abs(us));
}

export function ratio(x: number | null | undefined): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  return `${sig(x)}\u00d7`;
}

/** A peak of the device: bytes/s for the memory roof, FLOP/s for a dtype's. */
export function peakRate(peak: string, v: number | null | undefined): string {
  return peak.startsWith("memory") ? byteRate(v) : flopRate(v);
}

/** A size in binary units (KiB, MiB, GiB), as PyTorch's memory statistics and the CLI print
 * allocations: the Memory view uses these throughout. */
export function memBytes(x: number | null | undefined): string {
  if (x === null || x === undefined || !isFinite(x)) return DASH;
  const a = Math.abs(x);
  const units: [number, string][] = [[1024 ** 4, "TiB"], [1024 ** 3, "GiB"], [1024 ** 2, "MiB"], [1024, "KiB"]];
  for (const [f, u] of units) if (a >= f) return `${sig(x / f)} ${u}`;
  return `${Math.round(x)} B`;
}

// a trace file's suffix, and a numeric or hex tail after it (tensorboard_trace_handler's span: epoch ns)
const TRACE_SUFFIX = /(?:\.pt)?\.trace\.json(?:\.gz)?$|\.json(?:\.gz)?$/;
const HASH_TAIL = /[._-](?:\d{8,}|(?=[0-9a-f]*\d)[0-9a-f]{16,})$/i;

/** A run's (or trace file's) name as the page shows it: the meaningful head kept, the trace suffix
 * and a numeric hash after it dropped, marked by an ellipsis ("naive_bf16_s2048_fwd_rank0.17960227
 * 90297793763.pt.trace.json.gz" -> "naive_bf16_s2048_fwd_rank0…"); the whole name goes in the title.
 * "." (the log directory itself) is named so. */
export function runLabel(name: string): string {
  if (name === ".") return "(log directory)";
  let head = name.replace(TRACE_SUFFIX, "");
  for (let i = 0; i < 4 && HASH_TAIL.test(head); i++) head = head.replace(HASH_TAIL, "");
  return head && head !== name ? `${head}\u2026` : name;
}
