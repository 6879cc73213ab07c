"""The advice rules against their twin runs: predicted vs measured saving per step, on each rule's basis.

    python validation/advice_twins.py                       # print the table (markdown)
    python validation/advice_twins.py --write               # rewrite the table in validation/advice_twins.md
    python validation/advice_twins.py --manifest DIR/manifest.json   # pairs recorded by validation/twins.py

A pair is a problem run and its fix run (validation/advice_twins.json; or the manifest validation/twins.py
writes). For each pair the problem trace is analysed and the rule's finding read:

* predicted: the finding's gain on the rule's basis, per step — ``gpu_gain_us`` (attention GPU time) or
  ``step_gain_us`` (wall-clock step time) — and the other figure beside it;
* measured, GPU basis: attention GPU time of the problem trace − of the fix trace, per step;
* measured, step basis: the unprofiled step time of the problem run − of the fix run (``step_ms_wall`` of the
  workload's meta, or the manifest's ``step_ms_median``);
* ratio = predicted / measured. The issue's bound is [0.75, 1.33] (launch_overhead: [0.3, 1.0], it claims
  the attention calls only). No finding where the twin measured a saving counts as a miss; a finding that
  predicts a gain where the twin measured a loss is the worst miss.

Held-out pairs (``held_out``) were used for no threshold, constant or table row and are reported apart.
A pair with ``compare: "as_is"`` (T5: its SDPA twin passes the fp32 bias as it is) is compared with the
finding's prediction for the code as written (``evidence.as_is``), not with the bias-cast fix it proposes.
``in_sample`` says where the prediction rests on a table row measured on the pair's own fix trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

PAIRS = os.path.join(HERE, "advice_twins.json")
DOC = os.path.join(HERE, "advice_twins.md")
BEGIN, END = "<!-- table: validation/advice_twins.py --write -->", "<!-- end of table -->"
# the table of the pairs validation/twins.py recorded (--manifest ... --write)
BEGIN_RECORDED = "<!-- recorded table: validation/advice_twins.py --manifest"
END_RECORDED = "<!-- end of recorded table -->"
BOUNDS = {"launch_overhead": (0.3, 1.0)}
# pairs whose problem run lacks the rule's premise (twins.py says why): the rule must stay silent on it
# (the DDP straggler's backwards overlap communication: slow_backward must not blame determinism)
PREMISE_ABSENT = {"ddp_straggler"}
# pairs whose problem run did not show the problem twins.py meant, by the trace's own kernels: the rule
# that owns what it did show is checked instead (and the intended rule is silent, rightly)
RULE_OF_PAIR = {
    # GQA + a float causal mask: torch 2.11 ran cuDNN with the mask (twins.py expected math); the fix
    # (is_causal=True) is the mask-as-causal case of slow_backend
    "math_fallback_to_flash": "slow_backend",
}
DEFAULT_BOUNDS = (0.75, 1.33)
# the suffix of a pair of a later held-out recording (twins.py groups heldout2, …: _h2 … _h8, _h8a, _h8b)
RECORDING_SUFFIX = re.compile(r"_h\d[a-z]?$")
# the rule names of validation/twins.py's manifest -> rule ids
LEAD_RULES = {
    "fused_attention": "fuse_attention",
    "math_fallback": "sdpa_math_backend",
    "dtype": "fp32_attention",
    "repeat_kv": "memory_traffic",
}


def _trace(path: str) -> str:
    from tb_attention_plugin.trace.files import expand_paths

    p = os.path.join(ROOT, path)
    return next(expand_paths([p]))[0] if os.path.isdir(p) else p


def _meta_step_us(meta_dir: Optional[str], run_dir: str) -> Optional[float]:
    if not meta_dir:
        return None
    name = os.path.basename(run_dir.rstrip("/"))
    for f in (os.path.join(ROOT, meta_dir, name + ".json"), os.path.join(ROOT, meta_dir, name + ".json.gz")):
        if os.path.exists(f):
            op = gzip.open if f.endswith(".gz") else open
            with op(f, "rt") as fh:
                m = json.load(fh)
            v = m.get("step_ms_wall")
            return float(v) * 1000.0 if v is not None else None
    return None


def _steps(rep: dict) -> int:
    return 1 if rep.get("step") is not None else max(1, len(rep.get("steps") or []))


def _finding(rep: dict, rule: str) -> Optional[dict]:
    for a in rep.get("advice") or []:
        if a["id"] == rule or (rule == "memory_traffic" and a["id"].startswith("memory_")):
            return a
    return None


def _premise_absent(pair: dict, basis: str) -> dict:
    """A run without the rule's premise (every rank of a job): right when the rule stays silent."""
    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.trace.files import expand_paths

    p = os.path.join(ROOT, pair["problem"])
    paths = [t[0] for t in expand_paths([p])] if os.path.isdir(p) else [p]
    fired = [os.path.basename(t) for t in paths if _finding(analyze_path(t), pair["rule"]) is not None]
    return {
        "pair": pair["name"],
        "rule": pair["rule"],
        "basis": basis,
        "predicted_us": None,
        "measured_us": None,
        "ratio": None,
        "bounds": BOUNDS.get(pair["rule"], DEFAULT_BOUNDS),
        "ok": not fired,
        "verdict": "fires where its premise is absent: " + ", ".join(fired)
        if fired
        else f"silent on the premise-absent run ({len(paths)} trace(s)): right",
        "other": {"gpu": (None, None), "step": (None, None)},
        "held_out": bool(pair.get("held_out")),
        "in_sample": pair.get("in_sample") or "",
        "reason": None,
    }


def evaluate(pair: dict) -> dict:
    from tb_attention_plugin.advice.registry import BY_ID
    from tb_attention_plugin.analyze import analyze_path

    rule = pair["rule"]
    basis = BY_ID[rule].basis
    if pair.get("premise_absent"):
        return _premise_absent(pair, basis)
    prob = analyze_path(_trace(pair["problem"]))
    fix = analyze_path(_trace(pair["fix"])) if pair.get("fix") else None
    n_p = _steps(prob)
    f = _finding(prob, rule)
    check = next((c for c in prob.get("advice_checks") or [] if c["id"] == rule), {})
    pred_gpu = pred_step = None
    if f is not None:
        pred_gpu, pred_step = f.get("gpu_gain_us"), f.get("step_gain_us")
        alt = pair.get("alternative")
        as_is = f["evidence"].get("as_is") if isinstance(f.get("evidence"), dict) else None
        if pair.get("compare") == "as_is" and as_is:  # the twin ran the fix as written (no bias cast)
            pred_gpu = as_is.get("gain_us")
        if alt and rule == "slow_backend":
            a = (f["evidence"].get("alternatives") or {}).get(alt)
            pred_gpu = a["gain_us"] if a else None
        pred_gpu = pred_gpu / n_p if pred_gpu is not None else None
        pred_step = pred_step / n_p if pred_step is not None else None
    meas_gpu = None
    if fix is not None:
        meas_gpu = prob["attention_time_us"] / n_p - fix["attention_time_us"] / _steps(fix)
    meas_step = pair.get("measured_step_us")
    if meas_step is None and fix is not None:
        a, b = _meta_step_us(pair.get("meta"), pair["problem"]), _meta_step_us(pair.get("meta"), pair["fix"])
        meas_step = a - b if a is not None and b is not None else None
    pred = pred_gpu if basis == "gpu" else pred_step
    meas = meas_gpu if basis == "gpu" else meas_step
    ratio = pred / meas if pred is not None and meas else None
    lo, hi = BOUNDS.get(rule, DEFAULT_BOUNDS)
    if f is None:
        verdict = "silent" + (" (right: the fix is slower)" if meas is not None and meas <= 0 else "")
        ok = meas is not None and meas <= 0
    elif pred is not None and pred <= 0:
        ok = meas is not None and meas <= 0
        verdict = "predicts no gain as written" + (" (right: the fix is slower)" if ok else " (the twin gained)")
    elif meas is not None and meas <= 0:
        verdict, ok = "predicts a gain where the twin measured a loss", False
    elif ratio is None:
        verdict, ok = "no figure on its basis", False
    else:
        ok = lo <= ratio <= hi
        verdict = "within" if ok else ("over" if ratio > hi else "under")
    return {
        "pair": pair["name"],
        "rule": rule,
        "basis": basis,
        "predicted_us": pred,
        "measured_us": meas,
        "ratio": ratio,
        "bounds": (lo, hi),
        "ok": ok,
        "verdict": verdict,
        "other": {"gpu": (pred_gpu, meas_gpu), "step": (pred_step, meas_step)},
        "held_out": bool(pair.get("held_out")),
        "in_sample": pair.get("in_sample") or "",
        "reason": check.get("reason"),
    }


def _fmt(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v / 1000:.3f}" if abs(v) >= 100 else f"{v / 1000:.4f}"


def table(rows: list[dict]) -> str:
    head = (
        "| pair | rule | basis | predicted ms/step | measured ms/step | ratio | verdict | other basis (pred / meas) "
        "| in sample |\n|---|---|---|---|---|---|---|---|---|"
    )
    out = []
    for held in (False, True):
        sel = [r for r in rows if r["held_out"] == held]
        if not sel:
            continue
        out.append(f"\n**{'Held out' if held else 'Tuning set'}** ({sum(r['ok'] for r in sel)} of {len(sel)} within)\n")
        out.append(head)
        for r in sel:
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
            ob = "step" if r["basis"] == "gpu" else "gpu"
            op, om = r["other"][ob]
            out.append(
                f"| {r['pair']} | {r['rule']} | {r['basis']} | {_fmt(r['predicted_us'])} | {_fmt(r['measured_us'])} | "
                f"{ratio} | {r['verdict']} | "
                f"{ob}: {_fmt(op)} / {_fmt(om)} | {r['in_sample']} |"
            )
    return "\n".join(out) + "\n"


def _twin_trace(base: str, rel: str) -> str:
    """A manifest's trace, relative to ROOT: beside the manifest where it was recorded, else in
    tests/data/twins, where validation/unpack_round3.py puts the traces (the tests read them)."""
    from tb_attention_plugin.trace.files import expand_paths

    for cand in (os.path.join(base, rel), os.path.join(ROOT, "tests", "data", "twins", rel)):
        if os.path.isfile(cand) or (os.path.isdir(cand) and next(expand_paths([cand]), None)):
            return os.path.relpath(cand, ROOT)
    raise SystemExit(f"error: {rel}: no such twin trace beside {base} or in tests/data/twins")


def _run_trace(base: str, run: dict) -> str:
    """A run's trace (one file), or its directory for a job of several ranks."""
    if run.get("ranks"):
        return _twin_trace(base, run["dir"])
    return _twin_trace(base, run["trace_files"][0])


def load_pairs(manifest: Optional[str]) -> list[dict]:
    if manifest is None:
        with open(PAIRS) as f:
            return list(json.load(f)["pairs"])
    from tb_attention_plugin.advice.registry import BY_ID

    with open(manifest) as f:
        m = json.load(f)
    base = os.path.dirname(os.path.abspath(manifest))
    pairs = []
    for name, p in (m.get("pairs") or {}).items():
        rule = p.get("rule", "").split(" ")[0]
        rule = RULE_OF_PAIR.get(name, LEAD_RULES.get(rule, rule))
        prob, fix = p.get("problem") or {}, p.get("fix") or {}
        if not prob.get("trace_files") and not prob.get("ranks"):
            continue
        if rule not in BY_ID:  # a pair of issue #23's checks (ffn_boundary, flops_ledger), not an advice rule's
            continue
        pairs.append(
            {
                "name": name,
                "rule": rule,
                "problem": _run_trace(base, prob),
                "fix": _run_trace(base, fix) if fix else None,
                # a run without its fix checks the premise: the rule must stay silent on it
                "premise_absent": not fix or name in PREMISE_ABSENT,
                "measured_step_us": (p["measured_saving_ms_per_step"] * 1000.0)
                if p.get("measured_saving_ms_per_step") is not None
                else None,
                # the first recording's two, chosen before it; every pair of the later recordings (_h2 …),
                # each written after the rules were changed against the ones before
                "held_out": name in ("t5_eager_to_sdpa", "prefill_repeat_kv_to_gqa")
                or RECORDING_SUFFIX.search(name) is not None,
                "compare": "as_is" if name == "t5_eager_to_sdpa" else None,
                "alternative": {
                    "memeff_to_flash": "flash",
                    "memeff_to_cudnn": "cudnn",
                    "math_fallback_to_flash": "cudnn (is_causal)",  # its fix ran cuDNN (is_causal=True)
                }.get(RECORDING_SUFFIX.sub("", name)),
            }
        )
    return pairs


VERDICTS = os.path.join(ROOT, "tb_attention_plugin", "advice", "data", "twin_verdicts.json")


def twin_verdicts() -> dict:
    """Per rule, what the twin pair it cites says of its gain: ``{rule: {pair, ratio, verdict, ok}}``.
    A finding cites its twin only where ``ok`` (the prediction within the rule's window): a pair that
    validates only the rule's silence, or that the rule misses, is no validation of a gain."""
    import glob

    from tb_attention_plugin.advice.registry import RULES

    pairs = {p["name"]: p for p in load_pairs(None)}
    for m in sorted(glob.glob(os.path.join(HERE, "twins", "*", "manifest.json"))):
        for p in load_pairs(m):
            pairs.setdefault(p["name"], p)
    out = {}
    for rule in RULES:
        p = pairs.get(rule.twin or "")
        if p is None or not all(os.path.exists(os.path.join(ROOT, p[k])) for k in ("problem", "fix") if p.get(k)):
            out[rule.id] = {"pair": rule.twin, "ratio": None, "verdict": "not recorded", "ok": False}
            continue
        r = evaluate(p)
        ok = bool(r["ok"]) and not r["verdict"].startswith("silent")
        ratio = round(r["ratio"], 3) if r.get("ratio") is not None else None
        out[rule.id] = {"pair": rule.twin, "ratio": ratio, "verdict": r["verdict"], "ok": ok}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", help="validation/twins.py's manifest.json instead of validation/advice_twins.json")
    ap.add_argument("--write", action="store_true", help="rewrite the table in validation/advice_twins.md")
    ap.add_argument(
        "--write-verdicts", action="store_true", help="rewrite tb_attention_plugin/advice/data/twin_verdicts.json"
    )
    a = ap.parse_args(argv)
    os.environ.setdefault("TB_ATTENTION_CACHE_DIR", os.path.join(ROOT, "tests", "_artifacts", "twins-cache"))
    if a.write_verdicts:
        with open(VERDICTS, "w") as f:
            json.dump(twin_verdicts(), f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote", VERDICTS)
        return 0
    rows = [evaluate(p) for p in load_pairs(a.manifest)]
    text = table(rows)
    if a.write:
        with open(DOC) as f:
            doc = f.read()
        if a.manifest:  # each recording has its own table, marked with its manifest's path
            begin = f"{BEGIN_RECORDED} {os.path.relpath(os.path.abspath(a.manifest), ROOT)} --write -->"
            i = doc.index(begin)
            j = doc.index(END_RECORDED, i)
        else:
            i, j = doc.index(BEGIN), doc.index(END)
        i = doc.index("-->", i) + len("-->")
        with open(DOC, "w") as f:
            f.write(doc[:i] + "\n" + text + doc[j:])
        print("wrote", DOC)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
