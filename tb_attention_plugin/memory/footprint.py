"""The K/V footprint from shapes alone: K/V bytes of every attention call (what a KV cache holds
at these shapes), per step, and what MHA, GQA, MQA and an MLA-style latent cache would hold."""

from __future__ import annotations

import re
from collections import Counter
from math import prod

import numpy as np

from ..attention import patterns as P
from ..formats import rounded
from ..trace.records import OP
from .calls import call_start, fused_bytes, kv_bytes
from .context import TraceContext

# MLA (DeepSeek-V2): per token and layer a 512-dim compressed KV latent plus a 64-dim decoupled
# RoPE key, shared by all heads, stored at the K/V dtype.
MLA_LATENT_DIM = 512
MLA_ROPE_DIM = 64
GQA_GROUPS = 8  # the GQA alternative keeps 8 KV heads (Llama-2/3 70B style)


def no_shapes_message(report: dict) -> str:
    """Why no attention call has K/V shapes. The flag is advised only when the file says it was not
    recorded: a trace with shapes whose calls have none got its kernels from CUDA-graph replays (no
    CPU op, see attention/graphs.py) or holds no attention op whose inputs say K/V."""
    base = "no attention call with recorded K/V shapes"
    if not (report.get("trace") or {}).get("record_shapes"):
        return f"{base} (profile with record_shapes=True)"
    g = report.get("graphs") or {}
    att = g.get("attributed") or {}
    if att.get("structure", 0) + att.get("none", 0):
        return (
            f"{base}: the attention kernels were replayed from CUDA graphs and have no CPU op "
            "(pass --reference EAGER_TRACE)"
        )
    return f"{base}: shapes were recorded, but no SDPA op or QK/PV matmul gave K/V inputs"


def kv_footprint(ctx: TraceContext, shapes: dict, report: dict, window) -> dict:
    """K/V bytes per call from shapes, per step, and what other KV layouts would hold."""
    if not shapes:
        return {
            "calls": 0,
            "layers": [],
            "kv_bytes": None,
            "basis": None,
            "alternatives": [],
            "message": no_shapes_message(report),
        }
    R = ctx.R
    steps = []
    for r in np.flatnonzero(ctx.kind == 1).tolist():  # ANNOTATION
        nm = ctx.name(r)
        if nm.startswith("ProfilerStep#"):
            steps.append((int(R["ts_ns"][r]), int(ctx.end_ns[r]), nm))
    steps.sort()
    by_step: dict = {}
    starts = np.asarray([a for a, _, _ in steps], dtype=np.int64)
    for i in shapes:
        t0 = call_start(ctx, i)
        k = int(np.searchsorted(starts, t0, side="right")) - 1 if len(starts) else -1
        st = k if k >= 0 and steps[k][0] <= t0 <= steps[k][1] else None
        by_step.setdefault(st, []).append(i)
    if steps and any(k is not None for k in by_step):
        best = max((k for k in by_step if k is not None), key=lambda k: sum(kv_bytes(shapes[i]) for i in by_step[k]))
        basis_calls = by_step[best]
        basis = f"{steps[best][2]} (the step with the most K/V)"
    else:
        basis_calls = list(shapes)
        basis = "all calls in the trace"
    layers: dict = {}
    for i, s in shapes.items():
        scope = ctx.tag.instances.get(i, {}).get("name")
        key = (re.sub(r"_\d+$", "", scope or ""),) + tuple(s[k] for k in ("b", "h", "hk", "sq", "d", "dv", "dtype"))
        g = layers.get(key)
        sk_min = s["sk"]
        if g is not None and s["sk"] > g["shapes"]["sk"]:
            # decode steps of one layer differ only in the K/V length: the longest gives the figures
            sk_min, calls, scopes = g["shapes"]["sk_min"], g["calls"], g["_scopes"]
            g = None
        elif g is not None:
            g["shapes"]["sk_min"] = min(g["shapes"]["sk_min"], s["sk"])
        else:
            calls, scopes = 0, set()
        if g is None:
            fb = fused_bytes(s)
            g = layers[key] = {
                "scope": scope,
                "calls": calls,
                "_scopes": scopes,
                "source": s["op"],
                "kv_source": s["kv_source"],
                "shapes": dict({k: s[k] for k in ("b", "h", "hk", "sq", "sk", "d", "dv", "dtype")}, sk_min=sk_min),
                "heads_known": s["heads_known"],
                "kv_bytes_per_call": kv_bytes(s),
                "k_bytes": fb["k"],
                "v_bytes": fb["v"],
                "q_bytes": fb["q"],
                "out_bytes": fb["out"],
                "logsumexp_bytes": fb["logsumexp"],
                "fused_activation_bytes": fb["working_set"],
                "score_matrix_bytes": s["score_numel"] * s["itemsize"] if s["sq"] > 1 else 0,
                "score_shape": s["score_shape"],
            }
            sxs = _score_tensors(ctx, i, s)
            g["score_tensors"] = len(sxs)
            g["score_tensor_bytes"] = sum(b for b, _ in sxs)
            g["score_tensor_dtypes"] = dict(Counter(d for _, d in sxs))
            g["unfused_activation_bytes"] = g["fused_activation_bytes"] + g["score_tensor_bytes"]
        g["calls"] += 1
        g["_scopes"].add(scope)
    for key, g in layers.items():
        if len(g.pop("_scopes")) > 1:
            g["scope"] = key[0]
    kv_total = sum(kv_bytes(shapes[i]) for i in basis_calls)
    alts = _alternatives([shapes[i] for i in basis_calls])
    return {
        "calls": len(shapes),
        "basis": basis,
        "basis_calls": len(basis_calls),
        "kv_bytes": kv_total,
        "layers": sorted(layers.values(), key=lambda g: -g["kv_bytes_per_call"] * g["calls"])[:50],
        "alternatives": alts,
        "message": None,
    }


def _alternatives(calls: list[dict]) -> list[dict]:
    if not calls:
        return []
    cur = sum(kv_bytes(s) for s in calls)
    known = all(s["heads_known"] for s in calls)
    rows = [{"name": "current", "kv_heads": _heads_label(calls, "hk"), "bytes": cur, "saving": 0.0, "ratio": 1.0}]
    if not known:
        return rows
    mha = sum(s["b"] * s["h"] * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
    rows.append({"name": "MHA", "kv_heads": _heads_label(calls, "h"), "bytes": mha})
    if all(s["h"] > GQA_GROUPS and s["h"] % GQA_GROUPS == 0 for s in calls):
        g = sum(s["b"] * GQA_GROUPS * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
        rows.append({"name": f"GQA-{GQA_GROUPS}", "kv_heads": GQA_GROUPS, "bytes": g})
    mqa = sum(s["b"] * 1 * s["sk"] * (s["d"] + s["dv"]) * s["itemsize"] for s in calls)
    rows.append({"name": "MQA", "kv_heads": 1, "bytes": mqa})
    mla = sum(s["b"] * s["sk"] * (MLA_LATENT_DIM + MLA_ROPE_DIM) * s["itemsize"] for s in calls)
    rows.append({"name": f"MLA (latent {MLA_LATENT_DIM}+{MLA_ROPE_DIM})", "kv_heads": None, "bytes": mla})
    for r in rows:
        r["saving"] = rounded(1 - r["bytes"] / cur, 4) if cur else None
        r["ratio"] = rounded(r["bytes"] / cur, 4) if cur else None
    return rows


def _heads_label(calls, key):
    v = {s[key] for s in calls}
    return v.pop() if len(v) == 1 else sorted(v)


# Ops that return their input unchanged when they have nothing to do (a cast to the dtype it has,
# dropout at p=0 or in eval, contiguous of a contiguous tensor) and views: they allocate nothing
# themselves. When one does work, the op it calls (``_to_copy``, ``native_dropout``, ``clone``) is
# what allocates, and is counted.
_ALIASING = frozenset(
    {
        "to",
        "type_as",
        "contiguous",
        "dropout",
        "feature_dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "reshape",
        "view",
        "view_as",
        "expand",
        "expand_as",
        "_unsafe_view",
        "as_strided",
        "squeeze",
        "unsqueeze",
        "permute",
        "transpose",
        "t",
        "detach",
        "alias",
        "flatten",
        "unflatten",
        "narrow",
        "slice",
        "select",
        "unbind",
        "split",
        "chunk",
    }
)


def _score_tensors(ctx: TraceContext, inst: int, s: dict) -> list[tuple[int, str]]:
    """The score-sized tensors ([.., Sq, Sk]) one forward call allocates, as ``(bytes, dtype)``
    at each tensor's own dtype: the outputs of the ops that make a new tensor. Not in-place ops
    (``add_``, ``masked_fill_``: they write a tensor that exists), not an op that returns its input
    or a view of it (``.to`` of the dtype the tensor has, dropout at p=0, ``view``...): what the
    trace shows allocating, not one entry per phase of a template."""
    if s["sq"] <= 1:
        return []
    tag = ctx.tag
    R = ctx.R
    sel = np.flatnonzero((tag.range_instance == inst) & (ctx.kind == OP) & (ctx.L.backward_root < 0))
    # core attention, and its copies (a softmax upcast to fp32 and cast back is layout work)
    # (not PV: its output is [.., Sq, Dv], score-shaped only when Dv happens to equal Sk)
    core = ({P.PHASE_INDEX[p] for p in P.CORE_PHASES} | {P.PHASE_INDEX["layout"]}) - {P.PHASE_INDEX["pv_matmul"]}
    out: list[tuple[int, str]] = []
    counted: set = set()
    for r in sel[np.argsort(R["ts_ns"][sel], kind="stable")].tolist():
        if int(tag.range_phase[r]) not in core:
            continue
        # only the outermost op of a chain that returns the same tensor
        p = int(ctx.L.op_ancestor[r])
        if p >= 0 and int(tag.range_instance[p]) == inst and p in counted:
            counted.add(r)
            continue
        op = P.short_op(ctx.name(r))
        if op in _ALIASING or (op.endswith("_") and not op.endswith("__")):
            continue  # allocates nothing itself; what it calls, if anything, is counted
        hits = [
            o
            for o in ctx.outputs(r)
            if prod(o[0]) == s["score_numel"] and len(o[0]) >= 2 and o[0][-2:] == (s["sq"], s["sk"])
        ]
        if hits:
            out += [(prod(o[0]) * (o[2] or s["itemsize"]), o[1] or s["dtype"]) for o in hits]
            counted.add(r)
    return out
