"""Write a copy of a trace with attention on its own timeline tracks (``tb-attention annotate``).

The copy opens in Perfetto and chrome://tracing like the original and shows, next to each GPU,
a process "Attention phases (GPU n)" with one thread per CUDA stream ("Attention phases (GPU 0,
stream 7)"). On it, on the GPU's time axis:

* one ``ph: "X"`` slice per **attention call** and direction (``attention: <scope>``), spanning
  its kernels on that stream, and nested inside it
* one slice per **contiguous run of same-phase attention kernels** (e.g. ``QK^T matmul``,
  ``softmax (backward)``): consecutive kernels of one call, phase and direction on one stream
  with no other kernel in between. ``--per-kernel`` makes one slice per kernel instead.

Each slice's ``args`` carry the phase, direction, bound (the phase rule of docs/cost-model.md
applied to the run's time-weighted utilisations), memory / compute utilisation, FLOPs, bytes,
GPU time, the number of kernels and their names.

The original bytes are never re-encoded: the file is streamed through (decompressed block by
block) and the new events are spliced in just before the ``]`` that closes ``traceEvents``, so
every original event, and every other top-level key, stays byte for byte as it was. Finding
that ``]`` takes one parse with the trace reader; neither pass holds the file in memory. The
output is gzip when its name ends in ``.gz``.
"""

from __future__ import annotations

import os
import secrets
import types
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional

from .attention.vocabulary import CORE_PHASES, PHASE_LABELS
from .jsonout import to_json
from .trace.reader import DEFAULT_MAX_BYTES, ByteSource, TraceParser, TraceReadError, TraceTruncated

_deflate_lib: types.ModuleType
try:  # ISA-L deflates several times faster than zlib at its low levels; same gzip format
    from isal import isal_zlib as _deflate_lib

    _LEVEL = 2
except ImportError:  # pragma: no cover
    _deflate_lib = zlib
    _LEVEL = 1

PID_BASE = 4_200_000  # above Linux's largest pid (2^22), so no real process has it
SORT_BASE = 5_000_000  # Kineto sorts GPU n at 5000000 + n; ours sorts next to it
PHASE_CAT, CALL_CAT = "attention.phase", "attention.call"


class AnnotateError(ValueError):
    """One-line, user-facing reason the annotated copy cannot be written."""


# ------------------------------------------------------------------------------ locating
class _Locator(TraceParser):
    """The reader's parser, remembering where ``traceEvents`` closes (absolute offset of its
    ``]`` in the decompressed stream) and whether it holds any entry."""

    def __init__(self, src: ByteSource):
        super().__init__(src)
        self.tagged = False  # every event's pid is read, whatever its kind
        self.close_at: Optional[int] = None
        self.entries = 0
        self.pids: set = set()

    def _events(self, on_events) -> None:
        before = self.events_seen + self.stats.get("skipped", 0)
        super()._events(on_events)
        self.close_at = self.offset + self.pos - 1
        self.entries = self.events_seen + self.stats.get("skipped", 0) - before


def locate(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[int, int, set]:
    """(offset of the ``]`` closing traceEvents, number of entries in it, pids in use)."""
    try:
        src = ByteSource(path, max_bytes)  # a directory, a pipe, a missing file: one line
    except TraceReadError as e:
        raise AnnotateError(str(e)) from None
    try:
        p = _Locator(src)
        pids: set = set()

        def on_events(evs):
            pids.update({e.pid for e in evs})

        p.parse(on_events)
        if src.truncated or p.close_at is None:
            raise AnnotateError(
                "truncated: the file ends before the closing ']' of traceEvents; it may still be "
                "being written (annotate needs the whole file)"
            )
    except TraceTruncated as e:
        raise AnnotateError(f"truncated: {e} (annotate needs the whole file)") from None
    except TraceReadError as e:
        raise AnnotateError(str(e)) from None
    finally:
        src.close()
    return p.close_at, p.entries, pids


# ------------------------------------------------------------------------------ the new events
_ROW_FIELDS = (
    "id",
    "name",
    "ts",
    "dur_us",
    "device",
    "stream",
    "attention",
    "phase",
    "direction",
    "instance",
    "scope",
    "flops",
    "bytes",
    "compute_util",
    "memory_util",
    "bound",
)


def _bound(rows: list[dict]) -> str:
    """The bound of most of a run's time, by its kernels' own bounds (roofline/classify.py is the
    one classifier; this module stays free of numpy)."""
    by: dict[str, float] = {}
    for r in rows:
        by[r["bound"] or "unknown"] = by.get(r["bound"] or "unknown", 0.0) + (r["dur_us"] or 0.0)
    return max(by, key=by.__getitem__) if by else "unknown"


def _ns(us) -> int:
    """Trace microseconds -> integer nanoseconds, as viewers read them: epoch-based timestamps
    (~5e12 µs) leave a double only nanosecond precision, so spans are computed in integers."""
    return int(round((us or 0.0) * 1000.0))


class _Run:
    __slots__ = ("key", "ts", "end", "rows")

    def __init__(self, key, row):
        self.key = key
        self.ts = _ns(row["ts"])
        self.end = self.ts + _ns(row["dur_us"])
        self.rows = [row]

    def add(self, row):
        self.rows.append(row)
        self.end = max(self.end, _ns(row["ts"]) + _ns(row["dur_us"]))


def _summary_args(rows: list[dict]) -> dict:
    t = sum(r["dur_us"] or 0.0 for r in rows)
    known = [r for r in rows if r["memory_util"] is not None and (r["dur_us"] or 0) > 0]
    kt = sum(r["dur_us"] for r in known)
    cu = sum((r["compute_util"] or 0.0) * r["dur_us"] for r in known) / kt if kt > 0 else None
    mu = sum(r["memory_util"] * r["dur_us"] for r in known) / kt if kt > 0 else None
    fl = sum(r["flops"] for r in known if r["flops"] is not None) if known else None
    by = sum(r["bytes"] for r in known if r["bytes"] is not None) if known else None
    names: dict = {}
    for r in rows:
        names[r["name"]] = names.get(r["name"], 0.0) + (r["dur_us"] or 0.0)
    top = [n for n, _ in sorted(names.items(), key=lambda x: -x[1])[:3]]
    return {
        "bound": _bound(rows),
        "memory_util": None if mu is None else round(mu, 4),
        "compute_util": None if cu is None else round(cu, 4),
        "flops": None if fl is None else float(f"{fl:.4g}"),
        "bytes": None if by is None else float(f"{by:.4g}"),
        "gpu_time_us": round(t, 3),
        "kernels": len(rows),
        "kernel_names": top,
        "cost_coverage": round(kt / t, 4) if t > 0 else None,
        "first_kernel_id": rows[0]["id"],
        "last_kernel_id": rows[-1]["id"],
    }


def build_events(rows: Iterable[dict], used_pids: Iterable = (), per_kernel: bool = False) -> tuple[list[dict], dict]:
    """The events to add, from the report's kernel rows (all of them, attention or not: a
    non-attention kernel between two attention kernels ends a run). Returns (events, stats)."""
    streams: dict = {}
    for r in rows:
        streams.setdefault((r["device"], r["stream"]), []).append({k: r.get(k) for k in _ROW_FIELDS})
    used = {p for p in used_pids if isinstance(p, int)}
    devices = sorted({d for d, _ in streams if d is not None}, key=lambda d: (not isinstance(d, int), d))
    pid_of: dict[Any, int] = {}
    for d in devices:
        pid = PID_BASE + (d if isinstance(d, int) else 0)
        while pid in used or pid in pid_of.values():
            pid += 1000
        pid_of[d] = pid
    events: list[dict] = []
    stats = {"phase_spans": 0, "call_spans": 0, "tracks": 0, "kernels": 0}
    named_pids = set()
    for (dev, stream), ks in sorted(streams.items(), key=lambda x: (str(x[0][0]), str(x[0][1]))):
        if not any(k["attention"] for k in ks):
            continue
        ks.sort(key=lambda r: (r["ts"], r["id"]))
        pid = pid_of.get(dev, PID_BASE)
        tid = stream if isinstance(stream, int) else 0
        if pid not in named_pids:
            named_pids.add(pid)
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"Attention phases (GPU {dev})"},
                }
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_labels",
                    "pid": pid,
                    "tid": 0,
                    "args": {"labels": f"tb-attention, GPU {dev}"},
                }
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": SORT_BASE + (dev if isinstance(dev, int) else 0)},
                }
            )
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"Attention phases (GPU {dev}, stream {stream})"},
            }
        )
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        stats["tracks"] += 1
        # runs of same (call, direction, phase); calls of same (call, direction)
        runs: list[_Run] = []
        cur: Optional[_Run] = None
        for k in ks:
            if not k["attention"]:
                cur = None
                continue
            key = (k["instance"], k["direction"], k["phase"])
            if cur is not None and cur.key == key and not per_kernel:
                cur.add(k)
            else:
                cur = _Run(key, k)
                runs.append(cur)
        # nest: a run never ends after the next one starts (timestamps are rounded in traces)
        for a, b in zip(runs, runs[1:]):
            if a.end > b.ts:
                a.end = b.ts
        calls: list[list[_Run]] = []
        for run in runs:
            if calls and calls[-1][-1].key[:2] == run.key[:2]:
                calls[-1].append(run)
            else:
                calls.append([run])
        for group in calls:
            inst, direction, _ = group[0].key
            rows_all = [r for run in group for r in run.rows]
            scope = rows_all[0]["scope"] or "attention"
            t0 = group[0].ts
            t1 = max(run.end for run in group)
            phases: dict = {}
            for r in rows_all:
                phases[r["phase"]] = round(phases.get(r["phase"], 0.0) + (r["dur_us"] or 0.0), 3)
            inst = int(inst) if isinstance(inst, float) and inst == inst else inst
            args = {"instance": inst, "scope": scope, "direction": direction, "phases_us": phases}
            args.update(_summary_args(rows_all))
            events.append(
                {
                    "ph": "X",
                    "cat": CALL_CAT,
                    "name": f"attention: {scope}" + (" (backward)" if direction == "backward" else ""),
                    "pid": pid,
                    "tid": tid,
                    "ts": t0 / 1000.0,
                    "dur": max(t1 - t0, 0) / 1000.0,
                    "args": args,
                }
            )
            stats["call_spans"] += 1
            for run in group:
                _, _, phase = run.key
                label = PHASE_LABELS.get(phase, phase or "attention")
                args = {
                    "phase": phase,
                    "label": label,
                    "direction": direction,
                    "core": phase in CORE_PHASES,
                    "instance": inst,
                    "scope": scope,
                }
                args.update(_summary_args(run.rows))
                events.append(
                    {
                        "ph": "X",
                        "cat": PHASE_CAT,
                        "name": label + (" (backward)" if direction == "backward" else ""),
                        "pid": pid,
                        "tid": tid,
                        "ts": run.ts / 1000.0,
                        "dur": max(run.end - run.ts, 0) / 1000.0,
                        "args": args,
                    }
                )
                stats["phase_spans"] += 1
                stats["kernels"] += len(run.rows)
    return events, stats


def kernel_rows(report: dict) -> Iterator[dict]:
    """All kernel rows of a report (a KernelTable or a list of dicts)."""
    kt = report.get("kernels") or []
    if hasattr(kt, "rows") and hasattr(kt, "columns"):
        n = len(kt)
        for s in range(0, n, 8192):
            yield from kt.rows(slice(s, min(s + 8192, n)))
    else:
        yield from kt


# ------------------------------------------------------------------------------ writing
def splice(
    path: str, close_at: int, entries: int, events: list[dict], compress: bool, max_bytes: int = DEFAULT_MAX_BYTES
) -> Iterator[bytes]:
    """The annotated file as byte chunks: the original stream with ``events`` inserted before
    offset ``close_at`` (the ``]`` of traceEvents); gzip-compressed when ``compress``."""
    insert = b""
    if events:
        body = b",\n".join(to_json(e) for e in events)
        insert = (b",\n" if entries else b"\n") + body + b"\n"
    comp = _deflate_lib.compressobj(_LEVEL, zlib.DEFLATED, 31) if compress else None

    def out(b: bytes) -> bytes:
        return comp.compress(b) if comp is not None else b

    try:
        src = ByteSource(path, max_bytes)
    except TraceReadError as e:
        raise AnnotateError(str(e)) from None
    try:
        pos = 0
        done = False
        while True:
            data = src.read()
            if not data:
                break
            if not done and pos + len(data) > close_at:
                cut = close_at - pos
                chunk = out(data[:cut]) + out(insert) + out(data[cut:])
                done = True
            else:
                chunk = out(data)
            pos += len(data)
            if chunk:
                yield chunk
        if not done:
            raise AnnotateError("the trace changed while it was being annotated")
    finally:
        src.close()
    if comp is not None:
        yield comp.flush()


def _new_file(folder: str) -> tuple[int, str]:
    """A new file for the output, opened for writing under a temporary name beside it. Created
    with mode 0666 less the umask, as any file a program writes (tempfile.mkstemp's are 0600,
    which left the annotated trace unreadable to the group and to a TensorBoard run by another
    user); O_EXCL, so an existing file is never reused."""
    while True:
        tmp = os.path.join(folder, f".tb-attention-{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def annotate_file(
    src: str,
    dst: str,
    report: Optional[dict] = None,
    per_kernel: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    analyze: Optional[Callable[[str], dict]] = None,
) -> dict:
    """Write ``dst``: ``src`` plus the attention tracks. ``report`` is the analysis of ``src``
    (``analyze(src)`` gives it when absent). Returns counts. Raises :class:`AnnotateError`."""
    try:
        if os.path.exists(dst) and os.path.samefile(src, dst):
            raise AnnotateError("the output would overwrite the input trace; choose another -o")
    except OSError:
        pass
    close_at, entries, pids = locate(src, max_bytes)
    if report is None:
        if analyze is None:
            raise AnnotateError("no analysis to annotate with")
        report = analyze(src)
    if report.get("status") != "ok":
        raise AnnotateError(report.get("error") or "the trace could not be analysed")
    events, stats = build_events(kernel_rows(report), pids, per_kernel)
    compress = dst.endswith(".gz")
    d = os.path.dirname(os.path.abspath(dst))
    fd, tmp = _new_file(d)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in splice(src, close_at, entries, events, compress, max_bytes):
                f.write(chunk)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    stats["events_added"] = len(events)
    stats["original_entries"] = entries
    return stats


def annotated_name(name: str) -> str:
    """Download name of the annotated copy: ``x.pt.trace.json.gz`` -> ``x.attention.pt.trace.json.gz``."""
    for suf in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suf):
            return name[: -len(suf)] + ".attention" + suf
    return name + ".attention.json"


__all__ = ["AnnotateError", "annotate_file", "annotated_name", "build_events", "kernel_rows", "locate", "splice"]
