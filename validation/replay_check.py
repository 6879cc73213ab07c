#!/usr/bin/env python3
"""Issue #20's check of the what-if replay against the world: validation/REPLAY.md.

For every trace of LISTFILE (validation/replay_traces.txt), with the replay JSONs that
validation/replay_run.sh collected on the GPU:

1. the replayed kernel time of the backend the trace used, per call and direction, against that
   call's kernel time in the trace (within --tolerance, 15 %);
2. for each ``BACKEND=TWIN`` of its line, the replayed kernel time of BACKEND against the kernel
   time of the same call in the twin trace, which ran on BACKEND (an A/B twin).

    python3 validation/replay_check.py validation/replay_traces.txt OUTDIR [--out validation/REPLAY.md]
    python3 validation/replay_check.py --traces validation/replay_traces.txt   # the trace files, one a line

OUTDIR is replay_run.sh's: ``OUTDIR/json/*.replay.json`` (or the JSONs themselves, or its tarball).
Needs the package (numpy, msgspec), not torch or a GPU.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TOLERANCE = 0.15


def read_list(path: str) -> list[dict]:
    """[{label, trace, twins: {backend: trace}}] with the paths resolved to trace files."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) < 2:
                raise SystemExit(f"error: {path}:{n}: expected 'LABEL TRACE [BACKEND=TWIN ...]'")
            twins = {}
            for p in parts[2:]:
                be, _, t = p.partition("=")
                if not t:
                    raise SystemExit(f"error: {path}:{n}: '{p}' is not BACKEND=TWIN")
                twins[be] = trace_file(t, path, n)
            out.append({"label": parts[0], "trace": trace_file(parts[1], path, n), "twins": twins})
    return out


def trace_file(p: str, listfile: str, n: int) -> str:
    full = p if os.path.isabs(p) else os.path.join(ROOT, p)
    if os.path.isdir(full):
        found = sorted(
            f
            for f in glob.glob(os.path.join(full, "*.json*"))
            if f.endswith((".json", ".json.gz")) and not f.endswith(".replay.json")
        )
        if not found:
            raise SystemExit(f"error: {listfile}:{n}: no trace file in {p}")
        return found[0]
    if not os.path.isfile(full):
        raise SystemExit(f"error: {listfile}:{n}: {p}: no such trace")
    return full


def replay_jsons(results: str) -> dict[str, dict]:
    """Replay JSONs by the trace file name they are for."""
    if results.endswith((".tgz", ".tar.gz")):
        d = tempfile.mkdtemp(prefix="replay-check-")
        with tarfile.open(results) as t:
            t.extractall(d, filter="data")
        results = d
    out = {}
    for f in glob.glob(os.path.join(results, "**", "*.replay.json"), recursive=True):
        with open(f) as fh:
            data = json.load(fh)
        out[data.get("trace") or os.path.basename(f)[: -len(".replay.json")]] = data
    return out


def calls(trace: str) -> list[dict]:
    from tb_attention_plugin.analyze import analyze_path

    rep = analyze_path(trace)
    if rep.get("status") != "ok":
        raise SystemExit(f"error: {trace}: {rep.get('error')}")
    return rep["replay"]["calls"]


def replayed(call: dict, data: dict | None) -> dict | None:
    from tb_attention_plugin.replay.results import summarize

    if not data:
        return None
    rec = next((r for r in data.get("calls") or [] if r.get("id") == call["id"]), None)
    return summarize(rec, call) if rec else None


def _row(rp: dict | None, backend: str) -> dict | None:
    if rp is None:
        return None
    return next((r for r in rp["backends"] if r["backend"] == backend), None)


def _times(r: dict | None, basis: str) -> tuple:
    if r is None or r["status"] != "ok":
        return None, None
    if basis == "kernel" and r["kernel_forward_us"] is not None:
        return r["kernel_forward_us"], r["kernel_backward_us"]
    return r["forward_us"], r["backward_us"]


def _cmp(got, want, tol) -> tuple[str, bool | None]:
    if got is None or not want:
        return "–", None
    ratio = got / want
    return f"{ratio:.3f}", abs(ratio - 1.0) <= tol


def _judge(f, b, want_f, want_b, tol: float) -> tuple[str, str, str]:
    """The forward and backward ratios (replay / trace) and the verdict: pass when the forward is within
    ``tol`` and so is the backward (or it has none to compare), FAIL when either is off, else not run."""
    rf, okf = _cmp(f, want_f, tol)
    rb, okb = _cmp(b, want_b, tol)
    verdict = "pass" if okf and okb in (True, None) else "FAIL" if okf is False or okb is False else "not run"
    return rf, rb, verdict


def _us(x) -> str:
    return "–" if x is None else f"{x:,.1f}"


def twin_call(twin_calls: list[dict], call: dict) -> dict | None:
    """The twin's call at the same query shape and dtype (the K/V heads may differ: repeat_kv vs
    enable_gqa), the longest if several."""
    same = [c for c in twin_calls if c["q_shape"] == call["q_shape"] and c["dtype"] == call["dtype"]]
    return max(same, key=lambda c: c["trace_time_us"], default=None)


def check(entries: list[dict], results: dict[str, dict], tol: float) -> tuple[list[list], list[list], list[str]]:
    own, alt, notes = [], [], []
    twin_cache: dict[str, list[dict]] = {}
    for e in entries:
        name = os.path.basename(e["trace"])
        data = results.get(name)
        if data is None:
            notes.append(f"{e['label']}: no replay JSON for {name}")
        if data is not None and data.get("scaled_down"):
            notes.append(f"{e['label']}: the replay ran at scaled-down shapes (--scale-down): not compared")
            data = None
        for c in calls(e["trace"]):
            rp = replayed(c, data)
            basis = rp["basis"] if rp else "kernel"
            per = c["per_call_us"]
            r = _row(rp, c["trace_backend"])
            f, b = _times(r, basis)
            rf, rb, verdict = _judge(f, b, per["forward"], per.get("backward"), tol)
            if r is not None and r["status"] != "ok":
                notes.append(
                    f"{e['label']} {c['id']}: the trace's backend {c['trace_backend']} {r['status']}: {r['reason']}"
                )
            own.append(
                [
                    e["label"],
                    c["id"],
                    c["kind"],
                    c["trace_backend"],
                    _us(per["forward"]),
                    _us(f),
                    rf,
                    _us(per.get("backward")),
                    _us(b),
                    rb,
                    basis,
                    verdict,
                ]
            )
            for be, twin in e["twins"].items():
                tc = twin_cache.get(twin)
                if tc is None:
                    tc = twin_cache[twin] = calls(twin)
                t = twin_call(tc, c)
                r2 = _row(rp, be)
                f2, b2 = _times(r2, basis)
                if t is None:
                    notes.append(f"{e['label']}: {os.path.basename(twin)} has no call at q {c['q_shape']} {c['dtype']}")
                    continue
                if t["trace_backend"] != be:
                    notes.append(f"{e['label']}: the twin {os.path.basename(twin)} ran {t['trace_backend']}, not {be}")
                tp = t["per_call_us"]
                rf2, rb2, v2 = _judge(f2, b2, tp["forward"], tp.get("backward") if per.get("backward") else None, tol)
                if r2 is not None and r2["status"] != "ok":
                    notes.append(f"{e['label']} {c['id']}: {be} {r2['status']}: {r2['reason']}")
                alt.append(
                    [
                        e["label"],
                        be,
                        os.path.basename(os.path.dirname(twin)),
                        _us(tp["forward"]),
                        _us(f2),
                        rf2,
                        _us(tp.get("backward")),
                        _us(b2),
                        rb2,
                        v2,
                    ]
                )
    return own, alt, notes


def table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def numerics(results: dict[str, dict]) -> list[list]:
    """One row per backend that ran: its errors against math and the script's verdict."""
    rows = []
    for name, d in results.items():
        for c in d.get("calls") or []:
            for b in c.get("backends") or []:
                if b.get("status") != "ok" or b.get("check") in (None, "reference"):
                    continue
                err = b.get("error_vs_math") or {}
                rows.append(
                    [
                        name.split(".")[0],
                        c["id"],
                        b["backend"],
                        err.get("forward", "–"),
                        err.get("backward") if err.get("backward") is not None else "–",
                        err.get("tolerance", "–"),
                        b["check"],
                    ]
                )
    return rows


def render(entries, results, own, alt, notes, tol, listfile, results_path) -> str:
    envs = {(d.get("device") or {}).get("name"): d for d in results.values()}
    env = next(iter(envs.values()), {})
    dev = (env.get("device") or {}).get("name")
    settings = env.get("settings") or {}
    passed = sum(r[-1] == "pass" for r in own) + sum(r[-1] == "pass" for r in alt)
    total = sum(r[-1] != "not run" for r in own) + sum(r[-1] != "not run" for r in alt)
    lines = [
        "# What-if replay against the world (issue #20)",
        "",
        "Each trace's distinct attention calls were rebuilt from their recorded shapes, strides, dtypes and flags by "
        "the script of `tb-attention replay --emit` and timed on the GPU under every backend that accepts them "
        "(kernel time: the sum of the kernels' durations in one torch.profiler pass, the trace's own measure). "
        f"Checks, within {tol:.0%}: (1) the replayed time of the backend the trace used against that call's kernel "
        "time in the trace; (2) the replayed time of an alternative backend against the same call's kernel time in a "
        "twin trace that ran on it.",
        "",
        f"Device: {dev}, torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}; "
        f"warm-up {settings.get('warmup')}, median of {settings.get('repeats')}; replay wall time "
        + ", ".join(f"{d.get('wall_s')} s" for d in list(results.values())[:1])
        + f" (one script for all traces). Result: **{passed} of {total} checks within {tol:.0%}**.",
        "",
        "## Commands",
        "",
        "```",
        "bash validation/replay_run.sh --emit-only validation/replay/emitted " + os.path.relpath(listfile, ROOT),
        "bash validation/replay_run.sh --run-only validation/replay/emitted $OUT 240   # on the GPU",
        f"python3 validation/replay_check.py {os.path.relpath(listfile, ROOT)} {results_path}",
        "```",
        "",
        "## 1. The trace's backend, replayed vs the trace",
        "",
        table(
            [
                "trace",
                "call",
                "kind",
                "backend",
                "fwd trace µs",
                "fwd replay µs",
                "ratio",
                "bwd trace µs",
                "bwd replay µs",
                "ratio",
                "basis",
                "verdict",
            ],
            own,
        ),
        "",
        "## 2. The alternative backend, replayed vs the twin trace that ran it",
        "",
        table(
            [
                "trace",
                "backend",
                "twin",
                "fwd twin µs",
                "fwd replay µs",
                "ratio",
                "bwd twin µs",
                "bwd replay µs",
                "ratio",
                "verdict",
            ],
            alt,
        )
        if alt
        else "(no twins listed)",
        "",
        "## 3. Numerics: each backend against the math backend",
        "",
        "Max |x − math| / max |math| of the output and of the worst gradient, at dropout 0, against the script's "
        "tolerance for the dtype; a backend that fails it is never offered as an alternative.",
        "",
        table(["trace", "call", "backend", "fwd err", "bwd err", "tolerance", "verdict"], numerics(results)),
        "",
    ]
    findings = os.path.join(ROOT, "validation", "replay", "FINDINGS.md")
    if os.path.exists(findings):
        with open(findings) as f:
            lines += [f.read().rstrip(), ""]
    lines += [
        "## Notes",
        "",
    ]
    lines += [f"- {n}" for n in notes] or ["- none"]
    lines += [
        "",
        "What a replay cannot capture (docs/replay.md): the model's context — caches warmed or flushed by the ops "
        "around the call, overlap with other streams and communication, memory pressure and the allocator's state, "
        "clocks under the whole model's power draw — and values that are not recorded (masks, the scale of a "
        "Python float, the lengths of jagged sequences); those are filled as the notes of each call say.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("listfile")
    ap.add_argument("results", nargs="?")
    ap.add_argument("--traces", action="store_true", help="print the trace files of LISTFILE and exit")
    ap.add_argument("--out", default=os.path.join(ROOT, "validation", "REPLAY.md"))
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    a = ap.parse_args(argv)
    entries = read_list(a.listfile)
    if a.traces:
        for e in entries:
            print(e["trace"])
        return 0
    if not a.results:
        ap.error("RESULTS is required (replay_run.sh's OUTDIR)")
    results = replay_jsons(a.results)
    own, alt, notes = check(entries, results, a.tolerance)
    text = render(entries, results, own, alt, notes, a.tolerance, a.listfile, a.results)
    with open(a.out, "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
