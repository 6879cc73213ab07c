"""``tb-attention replay``: list a trace's distinct attention calls, emit the replay script, run it.

The calls come from the report (``replay.calls``, replay/block.py), so a cached analysis answers
``--list`` and ``--emit`` without reading the trace again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

from ..formats import text_table, us
from . import emit, runner
from .calls import LIST_KEYS, merge_call

LIST_SCHEMA = 1


def merged_calls(reports: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(distinct calls over the reports, counts and trace times summed; per trace its path and ids)."""
    calls: dict[str, dict[str, Any]] = {}
    traces = []
    for rep in reports:
        block = rep.get("replay") or {}
        cs = block.get("calls") or []
        traces.append({"path": rep.get("path"), "calls": [c["id"] for c in cs], "omitted": block.get("omitted", 0)})
        for c in cs:
            merge_call(calls, c)
    out = sorted(calls.values(), key=lambda c: (-c["trace_time_us"], c["id"]))
    return out, traces


def list_json(reports: list[dict[str, Any]]) -> dict[str, Any]:
    calls, traces = merged_calls(reports)
    return {"schema": LIST_SCHEMA, "calls": calls, "traces": traces}


LIST_HEADERS = ["id", "kind", "calls", "q", "k", "dtype", "flags", "dir", "backend", "per call fwd / bwd", "trace time"]


def _dims(shape: Any) -> str:
    return "x".join(str(x) for x in shape) if isinstance(shape, list) else "?"


def _flags(c: dict[str, Any]) -> str:
    f = []
    if c.get("causal"):
        f.append("causal")
    if c.get("enable_gqa"):
        f.append("gqa")
    if c.get("dropout_p"):
        f.append(f"dropout {c['dropout_p']:g}")
    m = c.get("mask")
    if m:
        f.append(f"mask {m.get('kind')} {_dims(m.get('shape'))}")
    det = c.get("detail") or {}
    if "kv_len" in det:
        f.append(f"kv {det['kv_len']}")
    if c["kind"] == "varlen":
        f.append(f"{det.get('sequences')} seqs, max {det.get('max_q')}")
    bm = det.get("block_mask") or {}
    if bm.get("mask_mod"):
        f.append(bm["mask_mod"] + (f" {bm['window']}" if bm.get("window") else ""))
    return ", ".join(f) or "-"


def list_text(reports: list[dict[str, Any]], width: Optional[int] = None) -> str:
    calls, traces = merged_calls(reports)
    out = []
    for rep, t in zip(reports, traces):
        n = len(t["calls"])
        out.append(
            f"{rep.get('path')}: {n} distinct attention call(s)"
            + (f", {t['omitted']} more not listed" if t["omitted"] else "")
        )
        for u in (rep.get("replay") or {}).get("unsupported") or []:
            out.append(f"  not replayable: {u['scope']} ({u['calls']}x): {u['reason']}")
    if calls:
        rows = []
        for c in calls:
            per = c.get("per_call_us") or {}
            rows.append(
                [
                    c["id"],
                    c["kind"],
                    c["count"],
                    _dims(c["q_shape"]),
                    _dims(c["k_shape"]),
                    c.get("dtype") or "?",
                    _flags(c),
                    "+".join("fwd" if d == "forward" else "bwd" for d in c["directions"]),
                    c.get("trace_backend") or "?",
                    us(per.get("forward")) + (f" / {us(per['backward'])}" if per.get("backward") else ""),
                    us(c["trace_time_us"]),
                ]
            )
        out.append("")
        out.append(
            text_table(
                LIST_HEADERS,
                rows,
                False,
                width,
                cut=(6,),
                wrap=(6,),
                drop=(7, 5, 4, 6),
            )
        )
    return "\n".join(out).rstrip() + "\n"


@dataclass(frozen=True)
class Written:
    """A replay script written: its calls and traces, and how long it takes (seconds: its default
    run, the calls carrying most of the time within its budget; and every call with --all)."""

    calls: int
    traces: int
    default_calls: int
    default_s: float
    all_s: float

    def sentence(self) -> str:
        return (
            f"by default it replays the {self.default_calls} call(s) that carry most of the attention time in "
            f"~{self.default_s:.0f} s; --all replays all {self.calls} in ~{self.all_s:.0f} s"
        )


def write_script(reports: list[dict[str, Any]], path: str) -> Written:
    """Write the replay script of the reports' calls."""
    pl = emit.payload([(str(rep.get("path")), (rep.get("replay") or {}).get("calls") or []) for rep in reports])
    text = emit.script(pl)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    by_id = {c["id"]: c for c in pl["calls"]}
    picked = {cid for tr in pl["traces"] for cid in runner.default_calls([by_id[c] for c in tr["calls"] if c in by_id])}
    dflt = argparse.Namespace(no_compile=False, budget_s=runner.DEFAULT_BUDGET_S)
    every = argparse.Namespace(no_compile=False, budget_s=0.0)
    return Written(
        calls=len(pl["calls"]),
        traces=len(pl["traces"]),
        default_calls=len(picked),
        default_s=runner.estimate_s([by_id[c] for c in picked], set(), dflt),
        all_s=runner.estimate_s(pl["calls"], set(), every),
    )


def gpu_problem(python: str = sys.executable) -> Optional[str]:
    """Why the replay cannot run here (no torch, no CUDA GPU), or None."""
    code = (
        "import sys\ntry:\n import torch\nexcept ImportError:\n sys.exit(3)\n"
        "sys.exit(0 if torch.cuda.is_available() else 4)\n"
    )
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot start {python}: {e}"
    if r.returncode == 3:
        return "PyTorch is not installed here"
    if r.returncode == 4:
        return "no CUDA GPU here (torch.cuda.is_available() is False)"
    if r.returncode:
        return f"checking for torch failed (exit {r.returncode})"
    return None


def run_script(script: str, reports: list[dict[str, Any]], extra: list[str]) -> tuple[int, list[str]]:
    """Run the script with this Python, then put each ``<trace>.replay.json`` beside its trace;
    (exit code, the files written)."""
    tmp = tempfile.mkdtemp(prefix="tb-attention-replay-")
    try:
        rc = subprocess.call([sys.executable, script, "--out-dir", tmp] + extra)
        placed = []
        for rep in reports:
            p = str(rep.get("path"))
            name = os.path.basename(p) + ".replay.json"
            src = os.path.join(tmp, name)
            if os.path.isfile(src):
                dst = os.path.join(os.path.dirname(os.path.abspath(p)), name)
                shutil.move(src, dst)
                placed.append(dst)
        return rc, placed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["LIST_KEYS", "gpu_problem", "list_json", "list_text", "merged_calls", "run_script", "write_script"]
