"""Unfused dot-product attention → ``F.scaled_dot_product_attention``.

Premise: core attention runs as separate QK^T, scale, mask, softmax, dropout and PV kernels (outside
SDPA's math backend, which has its own rule) and is a dot product — softmax(QK^T)V, not additive
attention whose score is v·tanh(Wq + Uk) (a ``tanh`` among its kernels, or a score matmul that
contracts to one column) — and its scale/mask/softmax/dropout kernels are memory- or latency-bound
for at least 10 % of the unfused time.

Estimate (attention GPU time, whole trace): the time of what a fused kernel replaces — the unfused
kernels (not a position bias: SDPA still needs it), their score-sized casts and their copies of q, k,
v or the output — less the predicted time of the backend SDPA would pick for these inputs
(sdpa_choice.py: dtype, mask kind and dtype, head dim, dropout, fewer KV heads), per distinct call
shape, from the measured backend table. A float bias in another dtype than q/k (T5's
fp32 relative-position bias) sends SDPA to math: the finding then says to cast it, and its gain
is for the cast version; where no backend would be faster the rule is silent and says so.
"""

from __future__ import annotations

from typing import Any, Optional

from msgspec import UNSET

from ...attention import patterns as P
from ...attention.vocabulary import FUSABLE_PHASES
from ...formats import rounded as _r, us as _us
from ..base import (
    GPU,
    ITEMSIZE,
    MIN_SHARE,
    Finding,
    Rule,
    Silent,
    direction_short,
    group_kernels,
    main_dtype,
    pct0,
    phase_rows,
    total,
)
from ..equivalence import mask_facts, sdpa_line, softcap
from ..replay import WhatIf
from ..run import FUSED_BANDWIDTH_FRACTION, Run
from ..sdpa_choice import LABELS, Inputs, arch_of, choose, predict_once

ELEMENTWISE_SHARE = 0.10  # mem/latency-bound scale/mask/softmax/dropout time ≥ this share of unfused core
SDPA_CPU_US = 20.0  # unprofiled CPU time of one SDPA call (its dispatch and launch)
_HF_MODELS = ("Llama", "Mistral", "Qwen", "Gemma", "GPT2", "Bert", "Phi", "Falcon", "T5")
_ELEMENTWISE = ("scale", "mask", "softmax", "dropout")

FIX = """\
import torch.nn.functional as F
# q, k, v: [batch, heads, seq, head_dim]
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)        # the mask or bias the run applies
# is_causal=True instead only where the trace shows the mask is the causal one (a finding says so)
# Hugging Face: AutoModelForCausalLM.from_pretrained(name, attn_implementation="sdpa")
# nn.MultiheadAttention: mha(q, k, v, need_weights=False)"""


def check(run: Run) -> Any:
    math_ids = run.math_kernel_ids()
    # what a fused kernel replaces (not a position bias: it is still computed, and read as attn_mask)
    rows = [k for k in run.k if k.phase in FUSABLE_PHASES and k.id not in math_ids]
    unfused = total(rows)
    if unfused <= 0:
        return Silent("no unfused core attention (QK^T, softmax, PV as separate kernels) outside SDPA")
    if unfused < MIN_SHARE * run.att_time:
        return Silent(f"unfused core attention is {_us(unfused)}, under 1 % of attention time")
    qk = [k for k in rows if k.phase == "qk_matmul"]
    if not qk and not any(k.phase == "pv_matmul" for k in rows):
        return Silent("no QK^T or PV matmul: not the matmul-softmax-matmul pattern")
    capped = softcap(run.k) if qk and not any((k.get("cost_detail") or {}).get("n") == 1 for k in qk) else None
    if capped:
        return Silent(
            f"the scores are soft-capped ({capped}): no SDPA backend computes that, so SDPA would change the "
            "model; FlexAttention with the soft-cap as its score_mod is the fused option that keeps it"
        )
    additive = _additive(run, qk)
    if additive:
        return Silent(f"additive attention ({additive}): not a dot product, SDPA does not compute it")
    copies = _score_copies(run, rows, math_ids)
    operand_copies = _operand_copies(run, rows, math_ids, {k.id for k in copies})
    copies += operand_copies
    slow = [k for k in rows if k.phase in _ELEMENTWISE and k.bound in ("memory", "latency")]
    slow_t = total(slow)
    if slow_t < ELEMENTWISE_SHARE * unfused:
        return Silent(
            f"its memory/latency-bound scale/mask/softmax/dropout kernels take {_us(slow_t)}, under 10 % of "
            f"the unfused {_us(unfused)}: little for a fused kernel to remove"
        )
    dtype = main_dtype(k for k in rows if k.phase in ("qk_matmul", "pv_matmul"))
    core_t = unfused
    if copies:  # score-sized casts and copies between QK^T and PV: a fused kernel never makes them
        rows = rows + copies
        unfused = total(rows)
    mask = _mask_kind(run, rows)
    # a learned bias broadcast over the batch gets its gradient summed over the batch in the backward:
    # SDPA's backward hands back the same per-batch gradient, so that reduction stays after the fix
    bias_grad_sums = _bias_grad_sums(run, rows) if mask.get("requires_grad") else []
    if bias_grad_sums:
        kept = {k["id"] for k in bias_grad_sums}
        rows = [k for k in rows if k["id"] not in kept]
        core_t -= total(bias_grad_sums)
        unfused = total(rows)
    x, shape_flops = _inputs(run, rows, dtype, mask)
    fwd_fl = sum(shape_flops.values())
    arch = arch_of(run)
    t_fwd = total(k for k in rows if k.direction == "forward")
    t_bwd = unfused - t_fwd
    # the backend SDPA would pick as the code is (a mismatched float bias: math), and after the cast
    as_is, passed = choose(x, arch) if x is not None else (None, {})
    fixed_x = x
    fix_notes: list[str] = []  # what to change in the bias so that a fused backend takes it
    mismatched = mask["kind"] == "float" and bool(mask.get("dtype")) and bool(dtype) and mask.get("dtype") != dtype
    if x is not None and mismatched:
        fixed_x = Inputs(**dict(fixed_x.__dict__, mask_dtype=dtype))
        fix_notes.append(f"the float bias added to the scores is {mask['dtype']} while q/k are {dtype}: cast it")
    if x is not None and mask["kind"] == "float" and mask.get("strided"):
        fixed_x = Inputs(**dict(fixed_x.__dict__, mask_strided=False))
        fix_notes.append("its last dim is not contiguous, which mem-efficient refuses: pass bias.contiguous()")
    cast_note = "; ".join(fix_notes) or None
    be, passed_fixed = choose(fixed_x, arch) if fixed_x is not None else (None, {})
    if be == "math":  # no fused kernel for these inputs, even with the bias fixed: nothing to fuse
        return Silent(
            "SDPA would run its math backend for these inputs (no fused kernel: "
            + "; ".join(f"{LABELS[b]}: {w}" for b, w in passed_fixed.items())
            + ")"
        )
    pred = _predict_all(run, fixed_x, shape_flops, mask, t_fwd > 0, t_bwd > 0, arch)
    if pred is None:
        return Silent("the fused time cannot be predicted: no FLOPs or no peak for this GPU")
    fused_us, notes = pred
    sums_after = _bias_grad_sums_after(run, bias_grad_sums, shape_flops, mask, fixed_x)
    bias_copy = _bias_copy_us(run, mask, operand_copies) if mask.get("strided") else 0.0
    more_sums = max(0.0, sums_after - total(bias_grad_sums))  # per call after the fix, not per stack
    added = [w for w, t in ((SUMS_WORDS, more_sums), (COPY_WORDS, bias_copy)) if t > 0]
    if added:
        fused_us += more_sums + bias_copy
        notes.append(f"+ ~{_us(more_sums + bias_copy)} the fix adds: " + ", ".join(added))
    gain = unfused - fused_us
    as_is_ev: Optional[dict] = None
    if cast_note is not None and as_is is not None:
        if as_is == "math":  # as written, SDPA brings no fused kernel: no gain to claim for it
            as_is_ev = {"backend": "math", "predicted_us": None, "gain_us": 0.0}
        else:
            p0 = _predict_all(run, x, shape_flops, mask, t_fwd > 0, t_bwd > 0, arch)
            as_is_ev = {
                "backend": as_is,
                "predicted_us": _r(p0[0]) if p0 else None,
                "gain_us": _r(unfused - p0[0]) if p0 else None,
            }
    if gain < MIN_SHARE * run.att_time:
        return Silent(
            f"SDPA would run {LABELS.get(be or '', be)} here ({'; '.join(notes)}): ~{_us(fused_us)} against the "
            f"unfused {_us(unfused)}, no faster" + (f" ({cast_note})" if cast_note else "")
        )
    ctx = " ".join({(k.get("module_path") or "") + " " + (k.get("scope") or "") for k in rows})
    how = _how(rows, mask, ctx, mismatched, dtype)
    phases = phase_rows(rows)
    worst = sorted((p for p in phases if p["phase"] in _ELEMENTWISE), key=lambda p: -p["time_us"])[:3]
    detail = (
        f"Core attention runs as {len(rows) - len(copies)} separate kernels taking {_us(core_t)}"
        + (
            f", plus {len(copies)} casts/copies of the scores or of q, k, v and the output ({_us(unfused - core_t)})"
            if copies
            else ""
        )
        + f" ({pct0(unfused / run.att_time)} of attention time); the scale/mask/softmax/dropout kernels alone take "
        f"{_us(slow_t)} and are memory- or latency-bound: "
        + ", ".join(
            f"{p['phase']} {direction_short(p['direction'])} {_us(p['time_us'])} at {pct0(p['memory_util'])} "
            "of bandwidth"
            for p in worst
        )
        + ". A fused kernel keeps the score matrix on chip and skips these round trips through memory. "
        f"For these inputs ({_inputs_text(fixed_x, mask)}) SDPA would pick {LABELS.get(be or '', be)}"
        + (f" (passing over {', '.join(f'{LABELS[b]}: {w}' for b, w in passed_fixed.items())})" if passed_fixed else "")
        + f": ~{_us(fused_us)} ({'; '.join(notes)})."
    )
    if cast_note:
        as_is_text = (
            "passed as it is, SDPA would run its math backend: no fused kernel, no gain"
            if as_is_ev and as_is_ev["backend"] == "math"
            else f"passed as it is: {LABELS.get(as_is or '', as_is)}, "
            f"~{as_is_ev['predicted_us'] if as_is_ev else '?'} µs"
        )
        detail += f" The bias needs changing first: {cast_note} ({as_is_text})."
    return Finding(
        detail=detail,
        evidence={
            "time_us": _r(unfused),
            "core_time_us": _r(core_t),
            "score_copies_us": _r(unfused - core_t - total(operand_copies)),
            "operand_copies_us": _r(total(operand_copies)),
            "memory_or_latency_bound_elementwise_us": _r(slow_t),
            "share_of_attention": _r(unfused / run.att_time, 4),
            "phases": phases,
            "kernels": group_kernels(slow),
            "matmul_flops_forward": fwd_fl or None,
            "dtype": dtype,
            "mask": mask,
            "predicted_backend": be,
            "passed_over": passed_fixed,
            "fused_estimate_us": _r(fused_us),
            "bias_grad_sum_us": _r(total(bias_grad_sums)),
            "bias_grad_sum_after_us": _r(sums_after),
            "bias_contiguous_copy_us": _r(bias_copy),
            "prediction": notes,
            "as_is": as_is_ev,
        },
        how=how,
        fix_code=_fix_code(rows, mask, mismatched, dtype, fixed_x),
        removable_us=unfused,
        gpu_gain_us=gain,
        what_if=_what_if(run, rows, fused_us, unfused),
    )


def _fix_code(rows: list[Any], mask: dict, cast: bool, dtype: Optional[str], x: Optional[Inputs]) -> str:
    """The SDPA call that replaces this run's eager attention and computes the same thing: its mask or
    bias kept (is_causal only for a mask the trace shows causal), dropout where it drops, GQA where
    K/V have fewer heads."""
    kind = mask["kind"]
    m = "causal" if kind == "causal" else ("tensor" if kind in ("bool", "float") else "none")
    line = sdpa_line(
        m,
        gqa=x is not None and x.hk != x.h,
        dropout=any(k["phase"] == "dropout" for k in rows),
        mask_cast=dtype if cast else None,
    )
    if kind == "float" and mask.get("strided"):
        line = line.replace("attn_mask=mask", "attn_mask=mask.contiguous()")
    return "import torch.nn.functional as F\n# q, k, v: [batch, heads, seq, head_dim]\n" + line


def _score_copies(run: Run, rows: list[Any], math_ids: set) -> list[Any]:
    """Layout kernels (casts, copies) of the same attention calls that move a score-sized tensor
    (B·H·Sq·Sk elements, read and written): the fp32 softmax upcast and its cast back, and their
    backward. SDPA keeps the scores on chip, so they go with the unfused kernels."""
    score: dict = {}
    for k in rows:
        if k["phase"] == "qk_matmul" and k["direction"] == "forward":
            cd = k.get("cost_detail") or {}
            if {"m", "n"} <= set(cd):
                score[k["instance"]] = max(score.get(k["instance"], 0), cd.get("batch", 1) * cd["m"] * cd["n"])
    out = []
    for k in run.k:
        if k.phase != "layout" or k.id in math_ids or k.instance not in score:
            continue
        if (k.bytes or 0) >= 2.0 * score[k.instance]:  # ≥ 1 byte per score element each way
            out.append(k)
    return out


# what the fix adds for a learned bias, in the prediction's notes
SUMS_WORDS = "the bias gradient summed over the batch once per call"
COPY_WORDS = "the bias made contiguous once per step"
OPERAND_COPY_SLACK = 0.05  # a copy's bytes within 5 % of reading and writing one q/k/v/output tensor


def _operand_copies(run: Run, rows: list[Any], math_ids: set, taken: set) -> list[Any]:
    """Layout kernels (copies) of the same attention calls that move one q, k, v or output tensor (read
    and written): the copies eager matmuls make of transposed q/k views, and the output's transpose back
    to [B, S, H, D], forward and backward. The fused kernels read strided q/k/v and write the output in
    [B, S, H, D] memory (its transpose back is then no copy), so they go with the unfused kernels
    (the T5 twins: every such copy was gone in the SDPA run)."""
    sizes: dict = {}
    for k in rows:
        cd = k.get("cost_detail") or {}
        if k["direction"] != "forward" or not {"m", "n", "k"} <= set(cd):
            continue
        b = cd.get("batch", 1)
        item = ITEMSIZE.get(k.get("dtype") or "", 2)
        # QK^T reads q [b, m, k] and k [b, n, k]; PV reads v [b, k, n] and writes the output [b, m, n]
        if k["phase"] == "qk_matmul":
            new = {item * b * cd["m"] * cd["k"], item * b * cd["n"] * cd["k"]}
        elif k["phase"] == "pv_matmul":
            new = {item * b * cd["k"] * cd["n"], item * b * cd["m"] * cd["n"]}
        else:
            continue
        sizes.setdefault(k["instance"], set()).update(new)
    out = []
    for k in run.k:
        if k.phase != "layout" or k.id in math_ids or k.id in taken or k.instance not in sizes:
            continue
        nb = k.bytes or 0
        if any(abs(nb - 2.0 * s) <= OPERAND_COPY_SLACK * 2.0 * s for s in sizes[k.instance]):
            out.append(k)
    return out


def _bias_grad_sums(run: Run, rows: list[Any]) -> list[Any]:
    """The backward's reductions of the mask phase (``sum``): a bias broadcast over the batch
    summing its gradient, which SDPA's backward leaves to autograd as well."""
    out = []
    for k in rows:
        if k["phase"] != "mask" or k["direction"] != "backward":
            continue
        r = run.op_of(k["id"])
        if r >= 0 and P.short_op(run.op_name(r)) == "sum":
            out.append(k)
    return out


def _bias_grad_sums_after(
    run: Run, sums: list[Any], flops: dict[Shape, float], mask: dict, x: Optional[Inputs]
) -> float:
    """The bias-gradient reductions after the fix: SDPA hands back each call's bias gradient at the
    call's batch, and autograd sums each one (the twin shows one reduction per call where eager T5,
    which broadcasts its bias once per stack, made one per stack). Each call with a learned bias
    costs one reduction at its score shape, timed by the trace's own reductions at that shape."""
    if not sums or x is None:
        return 0.0
    per_shape: dict[tuple[int, int], list[float]] = {}
    for k in sums:
        r = run.op_of(k["id"])
        t = [a for a in run.op_args(r) if a.is_tensor and len(a.dims) >= 2]
        if t:
            per_shape.setdefault((int(t[0].dims[-2]), int(t[0].dims[-1])), []).append(float(k["dur_us"] or 0.0))
    out = 0.0
    for shp, fl in flops.items():
        got = per_shape.get((shp[1], shp[2]))
        if not got or [shp[1], shp[2]] not in mask.get("learned_bias_shapes", []):
            continue
        calls = fl / max(1.0, _full_flops(_at_shape(x, shp, mask)))
        out += calls * sum(got) / len(got)
    return out


def _bias_copy_us(run: Run, mask: dict, operand_copies: list[Any]) -> float:
    """The fix's ``bias.contiguous()``: one strided copy per bias tensor per step (read and
    written), at the µs per byte of the trace's own strided copies of q, k, v (else at the fused
    kernels' share of the bandwidth)."""
    shp = mask.get("shape") or []
    item = 4 if mask.get("dtype") == "fp32" else 2
    heads = int(shp[1]) if len(shp) == 4 else 1
    # the position-bias tensors (T5's cross-attention adds a zero bias, contiguous already)
    shapes = mask.get("learned_bias_shapes") or mask.get("bias_shapes") or []
    nbytes = sum(2.0 * item * heads * sq * sk for sq, sk in shapes) * max(1, run.steps)
    moved = sum(float(k["bytes"] or 0.0) for k in operand_copies)
    if moved > 0:
        return nbytes * total(operand_copies) / moved
    return nbytes / (FUSED_BANDWIDTH_FRACTION * run.bw) * 1e6 if run.bw else 0.0


def _additive(run: Run, qk: list[Any]) -> Optional[str]:
    """Why this is additive attention (a tanh in the attention kernels, or a score matmul with one
    output column), or None for a dot product."""
    seen: set = set()  # each (op, cost op, kernel) once: every step repeats them
    for k in run.k:
        key = (k.op, k.cost_op, k.name)
        if key in seen:
            continue
        seen.add(key)
        op = (k.op or "") + " " + (k.cost_op or "")
        if "tanh" in op.lower() or "tanh" in (k.name or "").lower():
            return f"a tanh ({k.op or 'kernel'}) in the attention scope"
    for k in qk:
        cd = k.get("cost_detail") or {}
        if cd.get("n") == 1:
            return "the score matmul contracts to one column (v·tanh(Wq + Uk))"
    return None


def _mask_kind(run: Run, rows: list[Any]) -> dict[str, Any]:
    """The mask the eager code applies, from its mask-phase ops: none, causal, bool, or a float mask
    or bias (per head: a bias such as a relative-position bias) and its dtype."""
    masks = [k for k in rows if k["phase"] == "mask"]
    if not masks:
        return {"kind": "none"}
    seen: dict[str, Any] = {
        "kind": "bool",
        "detail": "mask kernels without recorded inputs: a mask tensor, kept as attn_mask",
    }
    for k in masks:
        r = run.op_of(k["id"])
        if r < 0:
            continue
        name = P.short_op(run.op_name(r))
        args = [a for a in run.op_args(r) if a.is_tensor]
        if name in ("masked_fill", "masked_fill_", "where"):
            return _shown_causal(run, args, name, {"kind": "bool", "detail": f"{name} with a bool mask"})
        if name in ("add", "add_") and len(args) >= 2:
            s, m = args[0], args[1]
            if m.dtype == "bool":
                return {"kind": "bool", "detail": "a bool mask added"}
            per_head = len(m.dims) == 4 and m.dims[1] > 1
            if per_head:
                strided = bool(m.strides) and m.strides[-1] != 1 and m.dims[-1] > 1
                # a bias that gets a gradient (its producer's backward ran: a learned bias in training)
                grad = run.has_backward and any(
                    x["phase"] == "position_bias" and x["direction"] == "backward" for x in run.k
                )
                # the score shapes a per-head bias is added at: a learned bias is one tensor per shape
                # (T5: the encoder's and the decoder's self-attention); calls of other shapes (its
                # cross-attention) add no learned bias, so nothing there asks for a bias gradient
                biased = sorted(
                    {
                        (int(a[1].dims[-2]), int(a[1].dims[-1]))
                        for x in masks
                        if (rx := run.op_of(x["id"])) >= 0
                        and P.short_op(run.op_name(rx)) in ("add", "add_")
                        and len(a := [t for t in run.op_args(rx) if t.is_tensor]) >= 2
                        and len(a[1].dims) == 4
                        and a[1].dims[1] > 1
                    }
                )
                # …and learned only at the shapes its position-bias ops computed (the [Sq, Sk] relative
                # positions): T5's cross-attention adds a zero bias that asks for no gradient
                learned = {
                    (int(t.dims[0]), int(t.dims[1]))
                    for x in run.k
                    if x["phase"] == "position_bias" and x["direction"] == "forward" and (rx := run.op_of(x["id"])) >= 0
                    for t in run.op_args(rx)
                    if t.is_tensor and len(t.dims) == 2
                }
                grad_shapes = [b for b in biased if b in learned] if grad and learned else biased
                return {
                    "bias_shapes": [list(b) for b in biased],
                    "learned_bias_shapes": [list(b) for b in grad_shapes] if grad else [],
                    "kind": "float",
                    "dtype": m.dtype,
                    "shape": list(m.dims),
                    "strided": strided,
                    "requires_grad": grad,
                    "detail": f"a per-head {m.dtype} bias {list(m.dims)} added to the {s.dtype} scores"
                    + (f" (strides {list(m.strides or ())}: last dim not contiguous)" if strided else "")
                    + (" that is learned (its gradient is computed)" if grad else ""),
                }
            seen = _shown_causal(
                run,
                args,
                "add",
                {
                    "kind": "float",
                    "dtype": m.dtype,
                    "shape": list(m.dims),
                    "detail": f"a {m.dtype} mask {list(m.dims)} broadcast over heads",
                },
            )
    return seen


def _shown_causal(run: Run, args: list[Any], name: str, otherwise: dict[str, Any]) -> dict[str, Any]:
    """The mask as causal where the trace shows it is the causal one (equivalence.py), else as the
    tensor it is (kept as attn_mask: an encoder's padding mask stays a padding mask)."""
    scores = next((a.dims for a in args if len(a.dims) >= 2), None)
    mshape = tuple(args[1].dims) if len(args) > 1 else None
    if scores is None:
        return dict(otherwise, detail=otherwise["detail"] + " (not shown causal: kept as attn_mask)")
    facts = mask_facts(run, int(scores[-2]), int(scores[-1]), mshape)
    if facts.causal:
        return {"kind": "causal", "detail": f"{name}: the causal mask ({facts.reason})"}
    return dict(otherwise, detail=otherwise["detail"] + f" kept as attn_mask ({facts.reason})")


Shape = tuple[int, int, int, int]  # (batch·heads, Sq, Sk, head dim) of one call's QK^T


def _inputs(run: Run, rows: list[Any], dtype: Optional[str], mask: dict) -> tuple[Optional[Inputs], dict[Shape, float]]:
    """The dispatcher's inputs of the equivalent SDPA call (the first call's shapes) and the forward
    matmul FLOPs of each distinct call shape (an encoder-decoder has three: its calls run at very
    different rates)."""
    per_inst: dict[tuple, Shape] = {}
    flops: dict[Shape, float] = {}
    first: Optional[dict] = None
    pending: list[tuple[tuple, float]] = []
    for k in rows:
        if k["direction"] == "forward" and k["phase"] in ("qk_matmul", "pv_matmul") and k["flops"]:
            cd = k.get("cost_detail") or {}
            key = (k["instance"], k["phase"])
            if {"m", "n", "k"} <= set(cd) and key not in per_inst and k["phase"] == "qk_matmul":
                per_inst[key] = (int(cd.get("batch", 1)), int(cd["m"]), int(cd["n"]), int(cd["k"]))
                first = first or cd
            pending.append(((k["instance"], "qk_matmul"), float(k["flops"])))
    if first is None:
        return None, {}
    for key, fl in pending:  # a call's PV FLOPs go with its QK^T's shape
        shp = per_inst.get(key) or (int(first.get("batch", 1)), int(first["m"]), int(first["n"]), int(first["k"]))
        flops[shp] = flops.get(shp, 0.0) + fl
    x = Inputs(
        dtype=dtype,
        b=1,
        h=int(first.get("batch", 1)),
        hk=int(first.get("batch", 1)),
        sq=int(first["m"]),
        sk=int(first["n"]),
        d=int(first["k"]),
        dv=int(first["k"]),
        mask="causal" if mask["kind"] == "causal" and first["m"] == first["n"] else mask["kind"],
        mask_dtype=mask.get("dtype") if mask["kind"] == "float" else None,
        mask_strided=bool(mask.get("strided")),
        mask_grad=bool(mask.get("requires_grad")),
        mask_batched=len(mask.get("shape") or ()) == 4 and mask["shape"][0] > 1 and mask["shape"][1] > 1,
        dropout_p=0.1 if any(k["phase"] == "dropout" for k in rows) else 0.0,
        enable_gqa=None,
        backward=run.has_backward,
    )
    return x, flops


def _at_shape(x: Inputs, shp: Shape, mask: dict) -> Inputs:
    """``x`` at another call shape: a causal mask stays causal on square calls only (SDPA's is_causal
    with Sq ≠ Sk is another alignment; the fused kernel then reads no mask); a learned bias's gradient
    is asked for only at the score shapes the bias was added at."""
    bh, sq, sk, d = shp
    kind = x.mask if x.mask in ("bool", "float") else ("causal" if mask["kind"] == "causal" and sq == sk else "none")
    grad = x.mask_grad and (not mask.get("bias_shapes") or [sq, sk] in mask.get("learned_bias_shapes", []))
    return Inputs(**dict(x.__dict__, h=bh, hk=bh, sq=sq, sk=sk, d=d, dv=d, mask=kind, mask_grad=grad))


def _predict_all(
    run: Run, x: Optional[Inputs], flops: dict[Shape, float], mask: dict, fwd: bool, bwd: bool, arch: Any
) -> Optional[tuple[float, list[str]]]:
    """The fused time of all the calls with inputs ``x``: per distinct call shape, on the backend the
    dispatcher picks for it (a cross-attention without the learned bias may take cuDNN where the
    self-attention takes mem-efficient), the trace's forward FLOPs at that shape (half when causal:
    the fused kernel skips the masked half) at the backend's measured rate there, and the backward's."""
    if x is None or not flops:
        return None
    out, notes = 0.0, []
    for shp, fl in sorted(flops.items(), key=lambda e: -e[1]):
        xs = _at_shape(x, shp, mask)
        bs = choose(xs, arch)[0]
        scale = fl / max(1.0, _full_flops(xs))  # the calls of this shape, as multiples of one call
        for pas, on in (("forward", fwd), ("backward", bwd)):
            if not on:
                continue
            p = predict_once(bs, pas, xs, run, arch)
            if p is None:
                return None
            out += p.time_us * scale
            if p.note not in notes:
                notes.append(p.note)
    if len(flops) > 1:
        notes.insert(0, f"{len(flops)} call shapes, each at its own rate")
    return out, notes


def _full_flops(x: Inputs) -> float:
    return 2.0 * x.b * x.h * x.sq * x.sk * (x.d + x.dv)


def _inputs_text(x: Optional[Inputs], mask: dict) -> str:
    if x is None:
        return "shapes not recorded"
    m = {"none": "no mask", "causal": "causal", "bool": "a bool mask", "float": f"a {x.mask_dtype} float mask"}
    return f"{x.dtype}, head dim {x.d}, {m.get(x.mask, x.mask)}" + (", dropout" if x.dropout_p else "")


def _how(rows: list[Any], mask: dict, ctx: str, cast: bool, dtype: Optional[str]) -> str:
    phases = {k["phase"] for k in rows}
    args = "q, k, v"
    if "dropout" in phases:
        args += ", dropout_p=p if self.training else 0.0"
    text = (
        f"Replace the explicit matmul → softmax → matmul with torch.nn.functional.scaled_dot_product_attention({args})"
    )
    if mask["kind"] == "float" and mask.get("bias_shapes") is not None:
        fixed = (f".to({dtype})" if cast and dtype else "") + (".contiguous()" if mask.get("strided") else "")
        text += f" plus attn_mask=bias{fixed} (the per-head bias the run adds)"
    elif mask["kind"] == "causal":
        text += f" plus is_causal=True ({mask['detail']})"
    elif "mask" in phases:
        text += f" plus attn_mask=mask, the mask this run applies ({mask['detail']})"
    text += "; it dispatches to FlashAttention, memory-efficient or cuDNN kernels."
    if cast and dtype:
        text += f" Cast the bias to the inputs' dtype ({dtype}) once: a mismatched float mask sends SDPA to math."
    if mask["kind"] == "float" and mask.get("strided"):
        text += (
            " Make the bias contiguous once (it is a permuted view): mem-efficient refuses a mask whose last dim is "
            "strided, and a learned bias rules out cuDNN in training, which leaves only math."
        )
    if "MultiheadAttention" in ctx:
        text = (
            "nn.MultiheadAttention runs the unfused path when it must return the attention weights: call it "
            "with need_weights=False (and batch_first=True) so it uses scaled_dot_product_attention. " + text
        )
    elif "eager_attention_forward" in ctx or any(m in ctx for m in _HF_MODELS):
        text = (
            'Hugging Face models: load with attn_implementation="sdpa" (or "flash_attention_2") instead of '
            '"eager". ' + text
        )
    return text


def _what_if(run: Run, rows: list[Any], fused_us: float, unfused: float) -> WhatIf:
    """Each (call, direction)'s unfused kernels become one kernel of its share of the fused time, and
    the CPU time of launching them becomes one SDPA call's."""
    w = WhatIf()
    m = run.replay
    if m is not None:  # calls: runs of one instance's kernels in launch order (a module keeps its
        # instance across steps); the unfused kernels of each call become one kernel
        by_id = {k.id: k for k in rows}
        placed = (k for k in run.k if k.instance is not None and k.instance is not UNSET)
        calls = m.calls({k.id: (k.instance, k.direction) for k in placed})
        groups = [[by_id[i] for i in c if i in by_id] for c in calls]
        groups = [g for g in groups if g]
    else:
        acc: dict = {}
        for k in rows:
            acc.setdefault((k["instance"], k["direction"]), []).append(k)
        groups = list(acc.values())
    for ks in groups:
        ks.sort(key=lambda k: k.ts or 0.0)
        t = total(ks)
        w.dur[ks[0].id] = fused_us * t / unfused if unfused else 0.0
        w.removed.update(k.id for k in ks[1:])
    if m is not None and groups:  # every call's launch CPU at once (thousands of calls on a long trace)
        l0 = m.launches([ks[0].id for ks in groups])
        l1 = m.launches([ks[-1].id for ks in groups])
        cpu = m.cpu_us_between(l0, l1)
        for a, b, c in zip(l0.tolist(), l1.tolist(), cpu.tolist()):
            if a == a and b == b:  # both launches replayed (NaN otherwise)
                w.cpu_saved.append((b, max(0.0, c - SDPA_CPU_US)))
    return w


RULE = Rule(
    id="fuse_attention",
    title="Use fused attention (scaled_dot_product_attention)",
    premise=(
        "dot-product core attention as separate QK^T / scale / mask / softmax / dropout / PV kernels (not SDPA's "
        "math backend; no tanh score), its elementwise kernels memory- or latency-bound for ≥ 10 % of the unfused "
        "time, and the backend SDPA would pick predicted faster by ≥ 1 % of attention time"
    ),
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: unfused core time − the predicted time of the backend SDPA would "
        "pick (measured backend table); the step figure replays the step with the kernels and their launches replaced"
    ),
    fix=FIX,
    twin="llama_eager_to_sdpa",
    absent=("sdpa_flash_fwdbwd_causal", "sdpa_cudnn_fwd_full", "sdpa_math_s2048_fwd", "mha_bf16_noweights"),
    check=check,
)
