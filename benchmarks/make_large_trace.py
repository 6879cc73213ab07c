#!/usr/bin/env python3
"""Make a large, still-consistent Kineto trace by repeating the profiler steps of a real one.

The source trace is read whole (it is small); the output is written event by event, so making a
1 GB file needs little memory.

How the steps are repeated
--------------------------
* The *window* is [start of the first ``ProfilerStep#N``, end of the last one]. The *block* is every
  non-metadata event whose ``ts`` falls in the window, plus the GPU activities (and ``ac2g`` flow
  ends) outside it whose ``correlation`` belongs to a launch inside it.
* The block is written ``reps`` times. Copy ``k`` has every ``ts`` shifted by ``k * period``
  (``period`` = span of the block + ``--gap-us``), and every id that must stay unique offset by
  ``k * stride`` of its family: ``args["External id"]``, ``args["correlation"]`` and the ``ac2g``
  flow ``id`` (one family: the flow id *is* the correlation), the ``id`` of every other flow
  category (``fwdbwd`` ...), ``args["Python id"]``/``args["Python parent id"]``, ``args["Ev Idx"]``,
  ``args["Sequence number"]``, non-zero ``args["Record function id"]``. ``ProfilerStep#N`` is
  renumbered ``N + k * steps_in_block``. ``stride = max(value in the file) - min(value in the block)
  + 1``, so no copy collides with another or with the events outside the block.
* Only ids that belong to the block are offset: a ``Python parent id`` that points at a frame
  outside the block (``<module>``, the training loop) is kept, so the frame tree stays connected.
* Events outside the window are written once: those that enclose it (``<module>``, the profiler's
  ``Trace`` span) get their ``dur`` stretched over all copies; those after it (``Record Window End``,
  the profiler's stop frames) are moved behind the last copy and point at its ids.
* Metadata events (``ph: "M"``) and the top-level keys (``deviceProperties`` ...) are kept once.

Examples::

    python benchmarks/make_large_trace.py --target-mb 267            # ~267 MB, default source
    python benchmarks/make_large_trace.py --preset gpt12-ref         # the issue's reference case
    python benchmarks/make_large_trace.py --target-mb 1000 --gzip --out /tmp/big.pt.trace.json.gz
    python benchmarks/make_large_trace.py --reps 3 --verify --out /tmp/small.pt.trace.json

``--preset gpt12-ref`` is the issue's reference case ("a 12-layer GPT training trace from an H200
with shapes, stacks and memory events, its steps repeated 20 times: 893k events, 267 MB"): the
committed ``benchmarks/traces/gpt12_naive_train_mem.pt.trace.json.gz`` (made on an H200 by
``generate_gpt12_trace.py --attn naive``; 39,988 events, 13.1 MB, of which 12 MB in its two
profiler steps) repeated 22 times: 876k events in 263 MB.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, Optional

try:
    import orjson
except ImportError:  # pragma: no cover - plain json is slower but works
    orjson = None

_spaced = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode  # ", " and ": "


def _dumps_spaced(obj) -> bytes:
    return _spaced(obj).encode()


def _dumps_compact(obj) -> bytes:
    if orjson is not None:
        return orjson.dumps(obj)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# The source traces (and torch's export_chrome_trace) separate with ", " and ": "; keep that by
# default so that bytes per event (and so events per MB) stay those of a real trace.
_dumps = _dumps_spaced


def set_style(style: str) -> None:
    global _dumps
    _dumps = _dumps_compact if style == "compact" else _dumps_spaced


def _loads(b):
    return orjson.loads(b) if orjson is not None else json.loads(b)


HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "_work")
TRACES_ROOT = os.environ.get("TB_ATTENTION_TRACES", "/work/shared/traces")
# The committed 12-layer GPT trace (H200, torch 2.11, shapes + stacks + memory events, 2 profiler
# steps; made by generate_gpt12_trace.py --attn naive) comes first: it is the issue's reference
# source and works on a clean clone. The shared 4-layer traces remain as fallbacks.
REFERENCE_SOURCE = os.path.join(HERE, "traces", "gpt12_naive_train_mem.pt.trace.json.gz")
DEFAULT_SOURCES = [
    REFERENCE_SOURCE,
    os.path.join(TRACES_ROOT, "h200/gpt4l_naive_train/*.json.gz"),
    os.path.join(TRACES_ROOT, "h200/gpt4l_sdpa_train/*.json.gz"),
]
MB = 1_000_000  # sizes are in decimal megabytes of *uncompressed* JSON
PRESETS = {
    # The issue's reference: a 12-layer GPT training trace with memory events repeated to 267 MB
    # (the issue's 20 copies of its trace made 893k events; ours has fewer events per step, so 22
    # copies match the size and event count).
    "gpt12-ref": {"target_mb": 267, "source": REFERENCE_SOURCE, "name": "gpt12_ref"},
}

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# args keys -> id family. ac2g flow ids equal the correlation, so they share its family.
ARG_FAMILY = {
    "External id": "ext",
    "correlation": "corr",
    "Python id": "py",
    "Python parent id": "py",
    "Ev Idx": "evidx",
    "Sequence number": "seq",
    "Record function id": "rfid",
}
# Families whose block set is made only of values that *define* an id in the block (a parent id
# pointing outside the block must not be moved).
DEFINING_KEY = {"py": "Python id"}


def default_source() -> str:
    """The committed 12-layer trace, else the largest of the shared training traces."""
    if os.path.exists(REFERENCE_SOURCE):
        return REFERENCE_SOURCE
    best, best_size = None, -1
    for pattern in DEFAULT_SOURCES[1:]:
        for path in glob.glob(pattern):
            size = _uncompressed_size(path)
            if size > best_size:
                best, best_size = path, size
    if best is None:
        raise SystemExit(f"no default source trace found under {TRACES_ROOT}/h200; pass --source")
    return best


def _uncompressed_size(path: str) -> int:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        n = 0
        with gzip.open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
        return n
    return os.path.getsize(path)


def load_source(path: str) -> dict:
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = _loads(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystemExit(f"{path}: not a Chrome/Kineto trace (no traceEvents list)")
    return doc


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v) -> Optional[float]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    return None


def _flow_family(ev: dict) -> Optional[str]:
    if ev.get("ph") not in ("s", "f", "t"):
        return None
    cat = ev.get("cat")
    return "corr" if cat == "ac2g" else f"flow:{cat}"


def _ids(ev: dict) -> Iterable[tuple[str, str, Any]]:
    """(family, key, value) of every id-like field of an event (key '' = the flow ``id``)."""
    fam = _flow_family(ev)
    if fam is not None:
        for key in ("id", "bind_id"):
            if _is_int(ev.get(key)):
                yield fam, key, ev[key]
    args = ev.get("args")
    if isinstance(args, dict):
        for key, fam in ARG_FAMILY.items():
            v = args.get(key)
            if _is_int(v) and not (fam == "rfid" and v == 0):
                yield fam, key, v


class Plan:
    """What to repeat and how: computed once from the source."""

    def __init__(self, doc: dict, gap_us: float):
        events = doc["traceEvents"]
        self.doc = doc
        steps = [
            e
            for e in events
            if isinstance(e, dict)
            and e.get("ph") == "X"
            and isinstance(e.get("name"), str)
            and STEP_RE.match(e["name"])
            and _num(e.get("ts")) is not None
        ]
        # ProfilerStep ranges on the CPU; gpu_user_annotation copies of them (newer torch) are
        # renumbered too but do not define the window.
        cpu_steps = [e for e in steps if e.get("cat") in ("user_annotation", "cpu_op", "Operator", None)]
        steps = cpu_steps or steps
        if not steps:
            raise SystemExit(
                "the source has no ProfilerStep#N ranges: nothing to repeat "
                "(profile with a torch.profiler.schedule and call prof.step())"
            )
        self.w0 = min(e["ts"] for e in steps)
        self.w1 = max(e["ts"] + (_num(e.get("dur")) or 0) for e in steps)
        nums = sorted({int(STEP_RE.match(e["name"]).group(1)) for e in steps})
        self.step_numbers = nums
        self.n_steps = nums[-1] - nums[0] + 1
        self.int_ts = all(_is_int(e.get("ts")) for e in events if isinstance(e, dict) and e.get("ts") is not None)

        # 1. block membership
        in_block = [False] * len(events)
        block_corr = set()
        for i, e in enumerate(events):
            if not isinstance(e, dict) or e.get("ph") == "M":
                continue
            ts = _num(e.get("ts"))
            if ts is not None and self.w0 <= ts < self.w1:
                in_block[i] = True
                args = e.get("args")
                if isinstance(args, dict) and _is_int(args.get("correlation")):
                    block_corr.add(args["correlation"])
        for i, e in enumerate(events):  # GPU side of launches in the window that runs after it
            if in_block[i] or not isinstance(e, dict) or e.get("ph") == "M":
                continue
            ts = _num(e.get("ts"))
            if ts is None or ts < self.w1:
                continue
            corr = None
            args = e.get("args")
            if isinstance(args, dict) and _is_int(args.get("correlation")):
                corr = args["correlation"]
            elif e.get("cat") == "ac2g" and _is_int(e.get("id")):
                corr = e["id"]
            if corr is not None and corr in block_corr:
                in_block[i] = True
        self.in_block = in_block
        self.block_idx = [i for i, b in enumerate(in_block) if b]
        if not self.block_idx:
            raise SystemExit("no events inside the ProfilerStep window")

        # 2. block span and period
        end = self.w1
        for i in self.block_idx:
            e = events[i]
            end = max(end, e["ts"] + (_num(e.get("dur")) or 0))
        span = end - self.w0
        self.block_end = end
        period = span + gap_us * (1000 if self._ns_resolution() else 1)
        self.period = int(math.ceil(period))  # integral, so float timestamps keep 3 decimals

        # 3. id families: block sets and strides
        max_all: dict[str, int] = {}
        min_block: dict[str, int] = {}
        max_block: dict[str, int] = {}
        block_vals: dict[str, set] = {}
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                continue
            for fam, key, v in _ids(e):
                if v > max_all.get(fam, v - 1):
                    max_all[fam] = v
                if in_block[i]:
                    dk = DEFINING_KEY.get(fam)
                    if dk is not None and key != dk:
                        continue
                    block_vals.setdefault(fam, set()).add(v)
                    if v < min_block.get(fam, v + 1):
                        min_block[fam] = v
                    if v > max_block.get(fam, v - 1):
                        max_block[fam] = v
        self.block_vals = block_vals
        self.stride = {fam: max_all[fam] - min_block[fam] + 1 for fam in min_block}
        # values shared by the block and the events outside it (should be none); reported
        outside = {}
        for i, e in enumerate(events):
            if isinstance(e, dict) and not in_block[i]:
                for fam, key, v in _ids(e):
                    if fam in block_vals and v in block_vals[fam] and DEFINING_KEY.get(fam) in (None, key):
                        outside[fam] = outside.get(fam, 0) + 1
        self.shared_ids = outside

        # 4. the events outside the block
        self.enclosing = set()
        self.after = set()
        for i, e in enumerate(events):
            if in_block[i] or not isinstance(e, dict) or e.get("ph") == "M":
                continue
            ts = _num(e.get("ts"))
            if ts is None:
                continue
            dur = _num(e.get("dur"))
            if ts < self.w0 and dur is not None and ts + dur >= self.w1:
                self.enclosing.add(i)
            elif ts >= self.w1:
                self.after.add(i)

    def _ns_resolution(self) -> bool:
        # Kineto in µs writes ts like 5165769208898.508; ns-resolution traces use int ns ~1e18.
        return self.int_ts and self.w0 > 1e17

    # ------------------------------------------------------------------ rewriting
    def copy_event(self, e: dict, k: int, shift_ts: bool = True) -> dict:
        """Event ``e`` as it appears in copy ``k`` (ids of the block offset by ``k`` strides)."""
        if k == 0:
            return e
        out = dict(e)
        if shift_ts and _num(e.get("ts")) is not None:
            ts = e["ts"] + k * self.period
            out["ts"] = ts if self.int_ts else round(ts, 3)
        fam = _flow_family(e)
        if fam is not None and fam in self.stride:
            for key in ("id", "bind_id"):
                v = e.get(key)
                if _is_int(v) and v in self.block_vals[fam]:
                    out[key] = v + k * self.stride[fam]
        args = e.get("args")
        if isinstance(args, dict):
            new_args = None
            for key, fam in ARG_FAMILY.items():
                v = args.get(key)
                if not _is_int(v) or fam not in self.stride or (fam == "rfid" and v == 0):
                    continue
                if v in self.block_vals[fam]:
                    if new_args is None:
                        new_args = dict(args)
                    new_args[key] = v + k * self.stride[fam]
            if new_args is not None:
                out["args"] = new_args
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            m = STEP_RE.match(name)
            if m:
                out["name"] = f"ProfilerStep#{int(m.group(1)) + k * self.n_steps}"
        return out

    def outer_event(self, i: int, e: dict, reps: int) -> dict:
        if i in self.enclosing:
            out = dict(e)
            dur = e["dur"] + (reps - 1) * self.period
            out["dur"] = dur if _is_int(e["dur"]) and self.int_ts else round(dur, 3)
            return out
        if i in self.after and reps > 1:
            return self.copy_event(e, reps - 1)
        return e

    def iter_events(self, reps: int):
        """Every output event, in order: source order, with the block's copies where it starts."""
        events = self.doc["traceEvents"]
        block = [events[i] for i in self.block_idx]
        first = self.block_idx[0]
        for i, e in enumerate(events):
            if i == first:
                for k in range(reps):
                    for be in block:
                        yield self.copy_event(be, k)
            elif self.in_block[i]:
                continue
            elif isinstance(e, dict):
                yield self.outer_event(i, e, reps)
            else:
                yield e

    # ------------------------------------------------------------------ sizing
    def block_bytes(self, k: int) -> int:
        events = self.doc["traceEvents"]
        return sum(len(_dumps(self.copy_event(events[i], k))) + 2 for i in self.block_idx)

    def fixed_bytes(self) -> int:
        events = self.doc["traceEvents"]
        n = sum(len(_dumps(e)) + 2 for i, e in enumerate(events) if not self.in_block[i])
        n += sum(len(_dumps(v)) + len(k) + 4 for k, v in self.doc.items() if k != "traceEvents")
        return n + 32

    def reps_for(self, target_bytes: int) -> int:
        fixed = self.fixed_bytes()
        per = self.block_bytes(1)
        reps = max(1, round((target_bytes - fixed) / per))
        per = self.block_bytes(max(1, reps // 2))  # ids/timestamps get longer as k grows
        return max(1, round((target_bytes - fixed) / per))


def write_trace(plan: Plan, reps: int, out_path: str, use_gzip: bool, gzip_level: int = 6) -> dict:
    """Stream the repeated trace to ``out_path``; return counts."""
    os.makedirs(os.path.dirname(os.path.abspath(out_path)) or ".", exist_ok=True)
    tmp = out_path + ".part"
    raw = open(tmp, "wb")
    f = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=gzip_level, mtime=0) if use_gzip else raw
    n_events = 0
    n_bytes = 0
    buf: list[bytes] = []
    buffered = 0
    try:
        keys = list(plan.doc.keys())
        ti = keys.index("traceEvents")
        head = b"{" + b"".join(_dumps(k) + b":" + _dumps(plan.doc[k]) + b"," for k in keys[:ti])
        head += b'"traceEvents":[\n'
        f.write(head)
        n_bytes += len(head)
        sep = b""
        for ev in plan.iter_events(reps):
            b = sep + _dumps(ev)
            sep = b",\n"
            buf.append(b)
            buffered += len(b)
            n_events += 1
            if buffered >= 1 << 20:
                chunk = b"".join(buf)
                f.write(chunk)
                n_bytes += len(chunk)
                buf, buffered = [], 0
        tail = b"".join(buf) + b"\n]"
        tail += b"".join(b"," + _dumps(k) + b":" + _dumps(plan.doc[k]) for k in keys[ti + 1 :])
        tail += b"}\n"
        f.write(tail)
        n_bytes += len(tail)
    finally:
        if f is not raw:
            f.close()
        raw.close()
    os.replace(tmp, out_path)
    return {"events": n_events, "bytes_uncompressed": n_bytes, "bytes_on_disk": os.path.getsize(out_path)}


# ---------------------------------------------------------------------------- verification
def trace_counts(path: str) -> dict:
    """Consistency counters of a trace (loads it whole: meant for small/medium files).

    Every counter but ``events``/``steps`` counts a defect (duplicate ids, dangling links). Real
    traces have a few (Kineto writes duplicate thread names, flow ends whose start was dropped), so
    :func:`verify` compares an output with its source rather than with zero.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = _loads(raw)
    del raw
    ev = doc["traceEvents"]
    c = {"events": len(ev)}

    def dup(label, values):
        seen, dups = set(), 0
        for v in values:
            if v in seen:
                dups += 1
            seen.add(v)
        c[label] = dups
        return seen

    X = [e for e in ev if e.get("ph") == "X"]
    step_ranges = [e for e in X if e.get("cat") == "user_annotation" and STEP_RE.match(str(e.get("name")))]
    c["steps"] = len(step_ranges)
    dup("duplicate ProfilerStep names", [e["name"] for e in step_ranges])
    dup("duplicate Python ids", [e["args"]["Python id"] for e in X if "Python id" in (e.get("args") or {})])
    py_ids = {e["args"]["Python id"] for e in X if "Python id" in (e.get("args") or {})}
    c["Python parent ids naming no frame"] = sum(
        1
        for e in X
        if (e.get("args") or {}).get("Python parent id") is not None and e["args"]["Python parent id"] not in py_ids
    )
    dup("duplicate Ev Idx", [e["args"]["Ev Idx"] for e in X if "Ev Idx" in (e.get("args") or {})])
    launches = [
        e for e in X if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})
    ]
    corr = dup("duplicate launch correlations", [e["args"]["correlation"] for e in launches])
    gpu = [e for e in X if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    dup("duplicate GPU correlations", [e["args"]["correlation"] for e in gpu])
    c["GPU activities without a launch"] = sum(1 for e in gpu if e["args"].get("correlation") not in corr)
    ops = [e for e in X if e.get("cat") == "cpu_op"]
    ext_ops = dup(
        "duplicate cpu_op External ids",
        [e["args"]["External id"] for e in ops if "External id" in (e.get("args") or {})],
    )
    c["launches naming no cpu_op"] = sum(
        1 for e in launches if e["args"].get("External id") is not None and e["args"]["External id"] not in ext_ops
    )
    for cat in sorted({str(e.get("cat")) for e in ev if e.get("ph") in ("s", "f")}):
        s = dup(
            f"duplicate '{cat}' flow starts", [e["id"] for e in ev if e.get("ph") == "s" and str(e.get("cat")) == cat]
        )
        f_ids = dup(
            f"duplicate '{cat}' flow ends", [e["id"] for e in ev if e.get("ph") == "f" and str(e.get("cat")) == cat]
        )
        c[f"'{cat}' flow ends without a start"] = len(f_ids - s)
    fwd_seq = {}
    for e in ops:
        sn = (e.get("args") or {}).get("Sequence number")
        if sn is not None and e["name"].startswith("autograd::engine"):
            fwd_seq[sn] = fwd_seq.get(sn, 0) + 1
    c["duplicate backward sequence numbers"] = sum(n - 1 for n in fwd_seq.values())
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in step_ranges)
    c["overlapping ProfilerStep ranges"] = sum(1 for a, b in zip(steps, steps[1:]) if b[0] < a[1])
    c["metadata events"] = sum(1 for e in ev if e.get("ph") == "M")
    return c


def verify(out_path: str, source_path: str, reps: int) -> list[str]:
    """Defects of ``out_path`` that its source does not explain (empty list: consistent).

    A defect count may grow at most ``reps`` times its count in the source (the source's own
    defects are copied with its steps); one the source does not have must stay 0.
    """
    src, out = trace_counts(source_path), trace_counts(out_path)
    problems = []
    for key, n in out.items():
        if key in ("events", "steps"):
            continue
        allowed = src.get(key, 0) * (1 if key == "metadata events" else reps)
        if n > allowed:
            problems.append(f"{key}: {n} (source {src.get(key, 0)}, allowed {allowed})")
    if out["steps"] != src["steps"] * reps:
        problems.append(f"steps: {out['steps']}, expected {src['steps']} x {reps}")
    return problems


# ---------------------------------------------------------------------------- CLI
def default_out(source: str, reps: int, name: Optional[str], use_gzip: bool) -> str:
    stem = name or re.sub(r"(_rank\d+)?(\.\d+)?\.pt\.trace\.json(\.gz)?$|\.json(\.gz)?$", "", os.path.basename(source))
    return os.path.join(WORK, "traces", f"{stem}_x{reps}.pt.trace.json" + (".gz" if use_gzip else ""))


def make(
    source: Optional[str] = None,
    target_mb: Optional[float] = None,
    reps: Optional[int] = None,
    out: Optional[str] = None,
    use_gzip: bool = False,
    gap_us: float = 100.0,
    name: Optional[str] = None,
    reuse: bool = False,
    quiet: bool = False,
) -> dict:
    source = source or default_source()
    t0 = time.perf_counter()
    doc = load_source(source)
    plan = Plan(doc, gap_us)
    if reps is None:
        reps = plan.reps_for(int((target_mb or 267) * MB))
    out = out or default_out(source, reps, name, use_gzip)
    info = {
        "source": source,
        "out": out,
        "reps": reps,
        "steps_per_copy": plan.n_steps,
        "source_events": len(doc["traceEvents"]),
        "block_events": len(plan.block_idx),
        "period_us": plan.period,
        "strides": plan.stride,
        "shared_ids": plan.shared_ids,
        "source_memory_events": sum(
            1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("name") == "[memory]"
        ),
        "source_flags": {k: doc.get(k) for k in ("record_shapes", "with_stack", "profile_memory") if k in doc},
    }
    if reuse and os.path.exists(out):
        info.update(reused=True, bytes_on_disk=os.path.getsize(out))
        return info
    if not quiet:
        print(
            f"source {source}: {len(doc['traceEvents'])} events, steps "
            f"{plan.step_numbers}, block of {len(plan.block_idx)} events; writing {reps} copies "
            f"-> {out}",
            file=sys.stderr,
        )
    info.update(write_trace(plan, reps, out, use_gzip))
    info["seconds"] = round(time.perf_counter() - t0, 2)
    if not quiet:
        print(
            f"wrote {info['events']} events, {info['bytes_uncompressed'] / MB:.1f} MB uncompressed, "
            f"{info['bytes_on_disk'] / MB:.1f} MB on disk in {info['seconds']} s",
            file=sys.stderr,
        )
        if plan.shared_ids:
            print(f"note: ids shared between the steps and the events outside them: {plan.shared_ids}", file=sys.stderr)
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--source",
        help="real Kineto trace (.json or .json.gz) with ProfilerStep#N ranges "
        "(default: benchmarks/traces/gpt12_naive_train_mem.pt.trace.json.gz)",
    )
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--target-mb", type=float, help="approximate uncompressed size in MB (1e6 bytes); default 267")
    size.add_argument("--reps", type=int, help="number of copies of the steps (instead of --target-mb)")
    ap.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="gpt12-ref: the issue's reference case, the 12-layer GPT trace in benchmarks/traces repeated to ~267 MB",
    )
    ap.add_argument("--out", help="output path (default benchmarks/_work/traces/<source>_x<reps>.pt.trace.json[.gz])")
    ap.add_argument("--gzip", action="store_true", help="gzip the output")
    ap.add_argument("--gap-us", type=float, default=100.0, help="idle gap between copies (default 100 us)")
    ap.add_argument(
        "--style",
        choices=("spaced", "compact"),
        default="spaced",
        help="JSON separators: 'spaced' (', ' and ': ', like the source traces; default) "
        "or 'compact' (~15%% fewer bytes per event)",
    )
    ap.add_argument(
        "--verify",
        action="store_true",
        help="re-read the output and check ids/steps are "
        "consistent (loads the whole file: use on files up to a few hundred MB)",
    )
    ap.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    args = ap.parse_args(argv)

    set_style(args.style)
    name = None
    target = args.target_mb
    if args.preset:
        p = PRESETS[args.preset]
        name = p["name"]
        if target is None and args.reps is None:
            target = p["target_mb"]
        args.source = args.source or p["source"]
    info = make(args.source, target, args.reps, args.out, args.gzip, args.gap_us, name)
    rc = 0
    if args.verify:
        problems = verify(info["out"], info["source"], info["reps"])
        info["verify"] = problems or "ok"
        print("verify: " + ("ok" if not problems else "; ".join(problems)), file=sys.stderr)
        rc = 1 if problems else 0
    if args.json:
        print(json.dumps(info, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
