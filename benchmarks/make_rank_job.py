#!/usr/bin/env python3
"""Make an N-rank job (one trace per rank, as a multi-GPU run writes them) from real rank traces.

Rank ``r`` is a copy of source ``r % len(sources)`` with:

* ``distributedInfo`` rewritten: ``{"backend": "nccl", "rank": r, "world_size": N}`` (other keys of
  the source's kept);
* a file name as ``torch.profiler.tensorboard_trace_handler`` writes it,
  ``{hostname}_{pid}.{span}.pt.trace.json[.gz]``: host ``node{r // 8}``, a pid drawn from the seed,
  so the names' order is not the ranks' order (as in a real job);
* its attention kernels (the engine's own tagging of the source) stretched by a per-rank factor
  ``1 ± jitter`` (uniform, seeded), and by ``slowdown`` on the straggler rank(s); every later GPU
  activity of the same device is shifted by the time added before it (a GPU runs its work in
  order), GPU annotation ranges are stretched over what they contain, and the ``ac2g`` flow ends
  move with their kernels. CPU events are untouched (the host does not wait for the GPU).

Default sources: ``tests/data/ddp2/*`` (two ranks of a real DDP run on H200s) when present, else
the single-rank H200 trace ``sample_traces/gpt4l_sdpa_train``.

    python benchmarks/make_rank_job.py --ranks 8 --straggler 5 --out /tmp/job8
    python benchmarks/make_rank_job.py --ranks 256 --gzip --out /tmp/job256 --source big.pt.trace.json
"""

from __future__ import annotations

import argparse
import bisect
import glob
import gzip
import os
import random
import sys
from typing import Optional

import msgspec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
SPAN_CATS = frozenset({"gpu_user_annotation"})


def default_sources() -> list[str]:
    ddp = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "ddp2", "**", "*.pt.trace.json*"), recursive=True))
    if ddp:
        return ddp
    return sorted(glob.glob(os.path.join(ROOT, "sample_traces", "gpt4l_sdpa_train", "*.pt.trace.json*")))


def _load(path: str) -> dict:
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        return msgspec.json.decode(f.read())


def attention_kernels(path: str) -> set:
    """(device, ts in ns) of the source's attention GPU activities, by the engine's own tagging."""
    sys.path.insert(0, ROOT)
    from tb_attention_plugin.analyze import analyze_path

    rep = analyze_path(path, cache=None)
    if rep.get("status") != "ok":
        raise SystemExit(f"error: {path}: {rep.get('error')}")
    out = set()
    for row in rep["kernels"]:
        if row.get("attention"):
            out.add((row.get("device"), round(float(row["ts"]) * 1000)))
    return out


def _device(e: dict) -> object:
    a = e.get("args") or {}
    return a.get("device", e.get("pid"))


def stretch(trace: dict, attention: set, factor: float) -> int:
    """Stretch the attention kernels by ``factor``, shift what follows on each device (in place).
    Returns the number of kernels stretched."""
    events = trace.get("traceEvents") or []
    added: dict = {}  # device -> ([start ts], [cumulative µs added up to and incl.])
    per_dev: dict = {}
    for e in events:
        if e.get("cat") in GPU_CATS and e.get("ph") == "X":
            if (_device(e), round(float(e["ts"]) * 1000)) in attention:
                per_dev.setdefault(_device(e), []).append(e)
    n = 0
    for dev, ks in per_dev.items():
        ks.sort(key=lambda e: e["ts"])
        starts, cum, total = [], [], 0.0
        for e in ks:
            extra = float(e.get("dur") or 0.0) * (factor - 1.0)
            starts.append(float(e["ts"]))
            total += extra
            cum.append(total)
            n += 1
        added[dev] = (starts, cum)

    def shift(dev, t: float, inclusive: bool = False) -> float:
        """Time added by stretched kernels that started before ``t`` on ``dev``."""
        s = added.get(dev)
        if not s:
            return 0.0
        i = (bisect.bisect_right if inclusive else bisect.bisect_left)(s[0], t)
        return s[1][i - 1] if i else 0.0

    gpu_pids = {e.get("pid") for e in events if e.get("cat") in GPU_CATS}
    for e in events:
        cat, ph = e.get("cat"), e.get("ph")
        if ph == "X" and cat in GPU_CATS:
            dev, ts, dur = _device(e), float(e["ts"]), float(e.get("dur") or 0.0)
            if (dev, round(ts * 1000)) in attention:
                e["dur"] = round(dur * factor, 3)
            e["ts"] = round(ts + shift(dev, ts), 3)
        elif ph == "X" and cat in SPAN_CATS:
            dev, ts, dur = e.get("pid"), float(e["ts"]), float(e.get("dur") or 0.0)
            start = ts + shift(dev, ts)
            end = ts + dur + shift(dev, ts + dur, inclusive=True)
            e["ts"], e["dur"] = round(start, 3), round(max(end - start, 0.0), 3)
        elif cat == "ac2g" and ph == "f" and e.get("pid") in gpu_pids:
            ts = float(e["ts"])
            e["ts"] = round(ts + shift(e.get("pid"), ts), 3)
    return n


def make_job(
    out: str,
    ranks: int,
    sources: Optional[list[str]] = None,
    stragglers: tuple = (),
    slowdown: float = 1.3,
    jitter: float = 0.01,
    seed: int = 0,
    gz: bool = False,
    gpus_per_node: int = 8,
) -> list[str]:
    """Write the job into ``out``; returns the file paths in rank order."""
    sources = sources or default_sources()
    if not sources:
        raise SystemExit("error: no source traces (tests/data/ddp2 or sample_traces/gpt4l_sdpa_train)")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    att = {s: attention_kernels(s) for s in sources}
    raw = {s: _load(s) for s in sources}
    enc = msgspec.json.Encoder()
    paths = []
    base_span = 1796022794211767299
    for r in range(ranks):
        src = sources[r % len(sources)]
        factor = 1.0 + rng.uniform(-jitter, jitter) if jitter else 1.0
        pid = rng.randrange(1000, 99999)
        if r in stragglers:
            factor *= slowdown
        trace = raw[src] if factor == 1.0 else _load(src)
        if factor != 1.0:
            stretch(trace, att[src], factor)
        dist = dict(trace.get("distributedInfo") or {})
        dist.update({"backend": dist.get("backend", "nccl"), "rank": r, "world_size": ranks})
        trace["distributedInfo"] = dist
        name = f"node{r // gpus_per_node}_{pid}.{base_span + r}.pt.trace.json" + (".gz" if gz else "")
        p = os.path.join(out, name)
        body = enc.encode(trace)
        if gz:
            with gzip.open(p, "wb", compresslevel=1) as f:
                f.write(body)
        else:
            with open(p, "wb") as f:
                f.write(body)
        paths.append(p)
    return paths


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--source", action="append", help="source rank trace (repeat for several; default: see above)")
    ap.add_argument("--straggler", type=int, action="append", default=[], help="rank whose attention is slowed")
    ap.add_argument("--slowdown", type=float, default=1.3, help="attention kernel factor on the straggler (1.3)")
    ap.add_argument("--jitter", type=float, default=0.01, help="per-rank attention factor 1 ± jitter (0.01)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true")
    a = ap.parse_args(argv)
    paths = make_job(a.out, a.ranks, a.source, tuple(a.straggler), a.slowdown, a.jitter, a.seed, a.gzip)
    print(f"wrote {len(paths)} rank traces to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
