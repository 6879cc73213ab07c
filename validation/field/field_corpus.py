"""The field corpus: torch.profiler traces that other people recorded and published (tool test
suites, profile dumps, bug reports), and what an expert reads in each one.

``corpus.json`` lists the traces (repository, commit, path, licence, sha256); ``expectations/<id>.json``
says, from a reading of the trace itself and not from this tool's output, which kernels are
attention (phase, direction, family), which are not (collectives, norms, MoE GEMMs, fills), which
GEMMs are which projection, the device, and whether graphs replay. :func:`check` holds a report
against them; a disagreement is fixed in the engine or argued in the expectation file.

The traces are not in this repository (they are other projects' files): they are read from
``$TB_ATTENTION_FIELD_CORPUS``, else ``../shared/traces/field`` or ``../field`` beside the checkout.
``shared:`` paths are the public traces under ``../shared/traces``.

    python validation/field/field_corpus.py                 # the table of validation/field/RESULTS.md
    python validation/field/field_corpus.py --check         # and every disagreement
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from tb_attention_plugin.analyze import analyze_path  # noqa: E402
from tb_attention_plugin.options import Options  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "traces")


def roots() -> list[str]:
    """Where the corpus's traces may lie, first found first."""
    env = os.environ.get("TB_ATTENTION_FIELD_CORPUS")
    out = [env] if env else []
    return out + [os.path.join(SHARED, "field"), os.path.join(os.path.dirname(ROOT), "field")]


def entries() -> list[dict[str, Any]]:
    with open(os.path.join(HERE, "corpus.json"), encoding="utf-8") as f:
        data: list[dict[str, Any]] = json.load(f)
    return data


def expectation(trace_id: str) -> dict[str, Any]:
    with open(os.path.join(HERE, "expectations", f"{trace_id}.json"), encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def _resolve(rel: str) -> Optional[str]:
    if rel.startswith("shared:"):
        p = os.path.join(SHARED, rel[len("shared:") :])
        return p if os.path.exists(p) else None
    for r in roots():
        p = os.path.join(r, rel)
        if os.path.exists(p):
            return p
    return None


@dataclass
class Located:
    trace: str  # the file analysed
    reference: Optional[str]  # --reference (a capture or eager trace of the same step), if the entry has one


def locate(entry: dict[str, Any]) -> Optional[Located]:
    """The entry's files on this machine, or None when the corpus is not here."""
    main = _resolve(entry["files"][0])
    if main is None:
        return None
    ref = entry.get("reference")
    return Located(main, _resolve(ref) if ref else None)


def analyze(entry: dict[str, Any], where: Located) -> dict[str, Any]:
    opts = Options(reference=where.reference) if where.reference else Options()
    rep: dict[str, Any] = analyze_path(where.trace, opts)
    return rep


def _kernels(rep: dict[str, Any]) -> list[dict[str, Any]]:
    return [k for k in rep.get("kernels") or [] if k.get("kind") in ("kernel", "memcpy", "memset")]


@dataclass
class Launch:
    """What the trace says around one kernel's launch: every CPU range around it, innermost first,
    one a line, and its innermost op's recorded input dims (JSON, as Kineto writes them)."""

    ranges: str
    dims: str


def launches(path: str) -> dict[int, Launch]:
    """Per GPU activity id, its :class:`Launch`, read from the trace itself (``range_re``,
    ``input_dims_re``)."""
    from tb_attention_plugin.trace.correlate import link
    from tb_attention_plugin.trace.records import load_trace

    tr = load_trace(path)
    links = link(tr)
    names, rname, sig, parent = tr.strings, tr.ranges["name"], tr.ranges["sig"], links.parent
    memo: dict[int, str] = {}
    out: dict[int, Launch] = {}
    for g, (r, op) in enumerate(zip(links.gpu_parent.tolist(), links.gpu_op.tolist())):
        if r < 0:
            continue
        text = memo.get(r)
        if text is None:
            chain, x = [], r
            while x >= 0:
                chain.append(names[rname[x]])
                x = int(parent[x])
            text = memo[r] = "\n".join(chain)
        dims = ""
        if op >= 0 and sig[op] >= 0:
            raw = tr.signatures[int(sig[op])].dims
            dims = json.dumps(json.loads(raw)) if raw else ""
        out[g] = Launch(text, dims)
    return out


def _ranges_text(k: dict[str, Any], launch: Optional[Launch]) -> str:
    """The CPU ranges around a kernel's launch, one a line, as the trace names them."""
    lines = [str(k.get(f) or "") for f in ("scope", "op", "cost_op")]
    lines += [f"nn.Module: {m}" for m in str(k.get("module_path") or "").split("/") if m]
    return "\n".join(lines) + "\n" + (launch.ranges if launch else "")


def _matching(rows: list[dict[str, Any]], rule: dict[str, Any], ctx: dict[int, Launch]) -> list[dict[str, Any]]:
    """The kernels a rule speaks of: ``kernel_re`` on the name, ``op_re`` on the innermost launching
    op, ``range_re`` on the ranges around the launch (scope and module path), ``input_dims_re`` on the
    launching op's recorded input dims."""
    kre = re.compile(rule["kernel_re"]) if rule.get("kernel_re") else None
    ore = re.compile(rule["op_re"]) if rule.get("op_re") else None
    rre = re.compile(rule["range_re"], re.M) if rule.get("range_re") else None
    dre = re.compile(rule["input_dims_re"]) if rule.get("input_dims_re") else None
    out = []
    for k in rows:
        if kre and not kre.search(k.get("name") or ""):
            continue
        if ore and not ore.search(k.get("op") or ""):
            continue
        launch = ctx.get(int(k["id"]))
        if rre and not rre.search(_ranges_text(k, launch)):
            continue
        if dre and not dre.search(launch.dims if launch else ""):
            continue
        out.append(k)
    return out


def _summarise(bad: list[dict[str, Any]], field: str) -> str:
    seen: dict[Any, int] = {}
    for k in bad:
        seen[k.get(field)] = seen.get(k.get(field), 0) + 1
    return ", ".join(f"{v}× {key}" for key, v in sorted(seen.items(), key=lambda kv: -kv[1]))


def _phases(rule: dict[str, Any]) -> list[str]:
    """The phases a rule allows: one, or a list where the reading allows either (a cast inside the
    position-bias computation is the bias's or a layout copy)."""
    p = rule["phase"]
    return list(p) if isinstance(p, list) else [p]


def _device_matches(known_as: str, d: dict[str, Any]) -> bool:
    """Whether the table entry found names the GPU the reader named: its model token (A100, MI300X,
    GP100, 2080) in the entry's key or label."""
    tokens = re.findall(r"[A-Z]*\d+[A-Z]*", known_as.upper())
    model = next((t for t in tokens if re.search(r"[A-Z]", t) or len(t) >= 4), None)
    text = f"{d.get('key') or ''} {d.get('label') or ''}".upper().replace(" ", "")
    return model is not None and model in text


def check(exp: dict[str, Any], rep: dict[str, Any], ctx: Optional[dict[int, Launch]] = None) -> list[str]:
    """Every way the report disagrees with what an expert reads in the trace. ``ctx``: each kernel's
    :class:`Launch` (:func:`launches`), for rules with ``range_re`` or ``input_dims_re``."""
    ctx = ctx or {}
    out: list[str] = []
    if rep.get("status") != "ok":
        return [f"analysis failed: {rep.get('error')}"]
    rows = _kernels(rep)
    dev = exp.get("device") or {}
    if exp.get("gpu_kernels", True) and dev.get("known_as"):
        d = rep.get("device") or {}
        if not d.get("key"):
            out.append(f"device unknown, expected {dev['known_as']}")
        elif not _device_matches(str(dev["known_as"]), d):
            out.append(f"device {d.get('key')} ({d.get('label')}), expected {dev['known_as']}")
    if "graph_replays" in exp:
        g = rep.get("graphs") or {}
        replayed = bool(g.get("replayed_kernels"))
        if replayed != bool(exp["graph_replays"]):
            out.append(f"graph replays {'seen' if replayed else 'not seen'}, expected {exp['graph_replays']}")
    if "has_attention" in exp:
        has = bool(rep.get("attention_kernels"))
        if has != bool(exp["has_attention"]):
            out.append(f"attention {'found' if has else 'not found'}, expected {exp['has_attention']}")
    for rule in (exp.get("attention") or []) + (exp.get("attention_scoped") or []):
        hit = _matching(rows, rule, ctx)
        if not hit:
            out.append(f"no kernel matches the attention rule {rule['kernel_re']!r}")
            continue
        missed = [k for k in hit if not k.get("attention")]
        if missed:
            out.append(f"{len(missed)} of {len(hit)} {rule['kernel_re']!r} not attention")
        if rule.get("phase"):
            wrong = [k for k in hit if k.get("attention") and k.get("phase") not in _phases(rule)]
            if wrong:
                out.append(f"{rule['kernel_re']!r}: phase {_summarise(wrong, 'phase')}, expected {rule['phase']}")
        if rule.get("direction"):
            wrong = [k for k in hit if k.get("attention") and k.get("direction") != rule["direction"]]
            if wrong:
                out.append(f"{rule['kernel_re']!r}: {_summarise(wrong, 'direction')}, expected {rule['direction']}")
    # every fused attention family named: a backend row for it, none of them "other fused kernel"
    fused_rules = (
        [r for r in (exp.get("attention") or []) if "fused_attention" in _phases(r)]
        if any("phase" in r for r in exp.get("attention") or [])
        else []
    )
    if fused_rules and any(_matching(rows, r, ctx) for r in fused_rules):
        backs = rep.get("attention_backends") or []
        if not backs:
            out.append("no attention backend named although fused attention kernels ran")
        unnamed = [b for b in backs if b.get("backend") == "fused_other" and not b.get("family")]
        if unnamed:
            out.append(f"fused kernels of no known family: {unnamed[0].get('time_us')} µs 'other fused kernel'")
    for rule in (exp.get("not_attention") or []) + (exp.get("not_attention_scoped") or []):
        hit = _matching(rows, rule, ctx)
        if not hit:
            out.append(f"no kernel matches the not-attention rule {rule['kernel_re']!r}")
            continue
        wrong = [k for k in hit if k.get("attention")]
        if wrong:
            out.append(f"{len(wrong)} of {len(hit)} {rule['kernel_re']!r} tagged {_summarise(wrong, 'phase')}")
    for rule in (exp.get("projections") or []) + (exp.get("projections_scoped") or []):
        hit = _matching(rows, rule, ctx)
        if not hit:
            out.append(f"no kernel matches the projection rule {rule['kernel_re']!r}")
            continue
        wrong = [k for k in hit if not k.get("attention") or k.get("phase") not in _phases(rule)]
        if wrong:
            got = [dict(k, phase=k.get("phase") if k.get("attention") else "not attention") for k in wrong]
            out.append(
                f"{len(wrong)} of {len(hit)} {rule['kernel_re']!r}: {_summarise(got, 'phase')}, "
                f"expected {rule['phase']}"
            )
        if rule.get("direction"):
            wrong = [k for k in hit if k.get("direction") != rule["direction"]]
            if wrong:
                out.append(f"{rule['kernel_re']!r}: {_summarise(wrong, 'direction')}, expected {rule['direction']}")
    return out


def row(entry: dict[str, Any], rep: dict[str, Any]) -> dict[str, Any]:
    """One line of the corpus table: what the analysis says of the trace."""
    backs = rep.get("attention_backends") or []
    total = sum(b.get("time_us") or 0 for b in backs)
    backend = " + ".join(b["label"] for b in backs if total and (b.get("time_us") or 0) >= 0.05 * total) or "none"
    d = rep.get("device") or {}
    g = rep.get("graphs") or {}
    return {
        "id": entry["id"],
        "device": d.get("key") or "unknown",
        "gpu_ms": round((rep.get("gpu_time_us") or 0) / 1000, 2),
        "attention_ms": round((rep.get("attention_time_us") or 0) / 1000, 3),
        "share": rep.get("attention_share"),
        "backend": backend,
        "replayed": g.get("replayed_kernels") or 0,
    }


def main(argv: list[str]) -> int:
    show = "--check" in argv
    notes = "--notes" in argv  # what an expert says of each trace, below the table
    print("| trace | device | GPU ms | attention ms | share | backend | replayed | disagreements |")
    print("|---|---|---|---|---|---|---|---:|")
    bad = 0
    said: list[str] = []
    for e in entries():
        where = locate(e)
        if where is None:
            print(f"| {e['id']} | (not here) | | | | | | |")
            continue
        rep = analyze(e, where)
        exp = expectation(e["id"])
        problems = check(exp, rep, launches(where.trace))
        bad += bool(problems)
        r = row(e, rep)
        share = f"{100 * r['share']:.1f} %" if r["share"] is not None else "–"
        print(
            f"| {r['id']} | {r['device']} | {r['gpu_ms']} | {r['attention_ms']} | {share} | {r['backend']} "
            f"| {r['replayed']} | {len(problems)} |"
        )
        if show:
            for p in problems:
                print(f"|   | | | | | | | {p} |")
        said.append(f"- **{e['id']}** ({e['repository']}): {exp.get('expert_note', '').strip()}")
    if notes:
        print("\nWhat an expert reads in each trace (from its expectation file):\n")
        print("\n".join(said))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
