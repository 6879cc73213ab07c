"""Flags: the repeated or avoidable memory traffic inside attention (KV cache grown by ``cat``,
K/V repeated per head, SDPA math-backend copies, casts of the scores, layout copies in every
call, host<->device transfers and syncs, materialised S×S scores), each with its evidence."""

from __future__ import annotations

from math import prod
from typing import Optional

from ..attention import patterns as P
from ..attention.vocabulary import MATMUL_OPERAND
from ..formats import fmt_bytes, rounded, shape_text, us
from .outputs import short_name

MAX_COPY_FLAGS = 6
# only copies inside the math backend's own op: the fused backends' dispatcher
# (aten::scaled_dot_product_attention itself) also pads, expands or makes inputs contiguous
_SDPA_MATH = ("aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_attention_math_for_mps")


def _copy_flag(g: dict, n_calls: Optional[int]) -> Optional[dict]:
    """A flag for one copy group, or None when the evidence does not support one.

    * ``kv_cache_cat``: a ``cat`` along the sequence whose result is the K/V the call attends over
      (grown from a cache) — one call is evidence enough.
    * ``kv_expand``: K/V repeated per query head (repeat_kv, repeat_interleave) — copies the whole
      K/V every call by construction.
    * ``sdpa_math_copies``: copies inside SDPA's math backend (it expands / casts K/V).
    * ``score_cast``: a dtype cast of a score-sized (B·H·Sq·Sk) tensor.
    * ``repeated_copy``: a layout copy or cast of the same shape in two or more attention calls
      (e.g. ``contiguous()`` of K every layer).
    """
    shape = g["shape"]
    if not shape or (isinstance(shape[0], int) and prod(shape) < 2):
        return None
    cost = (
        f"{g['calls']} calls, {us(g['gpu_time_us'])} GPU, {us(g['cpu_time_us'])} CPU, "
        f"{fmt_bytes(g['bytes'])} moved" + (" (estimated)" if g["bytes_estimated"] else "")
    )
    where = f"in {P.PHASE_LABELS.get(g['phase'], g['phase'])} ({g['direction']})"
    shp = "×".join(str(x) for x in shape) if isinstance(shape[0], int) else shape_text(shape)
    every = f"{g['instances']} of {n_calls} attention calls" if n_calls else f"{g['instances']} attention calls"
    base = {
        "calls": g["calls"],
        "time_us": g["gpu_time_us"],
        "bytes": g["bytes"],
        "op": g["op"],
        "shape": shape,
        "phase": g["phase"],
        "direction": g["direction"],
        "within": g["within"],
        "instances": g["instances"],
        "kernel_ids": list(g.get("kernel_ids") or ()),
    }
    if g["kind"] == "kv_concat":
        return dict(
            base,
            code="kv_cache_cat",
            severity="warning",
            message=f"the KV cache grows by {g['op']} {where}: every step copies the whole cache",
            evidence=f"{g['detail']}; {cost}",
            fix="preallocate a static KV cache (transformers' StaticCache, or a [B, H, max_len, D] buffer "
            "written in place with index_copy_ / slice assignment) and attend over its prefix",
        )
    if g["within"] in _SDPA_MATH and g["kind"] in ("kv_expand", "cast", "copy", "materialize"):
        return dict(
            base,
            code="sdpa_math_copies",
            severity="warning",
            message=f"SDPA's math backend copies [{shp}] ({g['detail'] or g['kind']}) {where}",
            evidence=f"{g['op']} [{shp}] ({g['detail'] or g['kind']}) inside {g['within']}: {cost}",
            fix="let scaled_dot_product_attention pick a fused backend (flash / memory-efficient / cuDNN): "
            "check the inputs it rejects (dtype, head dim, mask, enable_gqa) with "
            "torch.backends.cuda.sdp_kernel / sdpa_kernel",
        )
    if g["kind"] == "kv_expand":
        return dict(
            base,
            code="kv_expand",
            severity="warning",
            message=f"{g['op']} [{shp}] {g['detail']} {where}",
            evidence=f"{cost}; in {every}",
            fix="let the kernel share KV heads: scaled_dot_product_attention(..., enable_gqa=True) or a "
            "GQA-aware kernel (FlashAttention) instead of repeating K/V per query head",
        )
    if g["kind"] == "cast" and g.get("score_sized"):
        return dict(
            base,
            code="score_cast",
            severity="warning",
            message=f"{g['op']} casts the attention scores ({g['detail']}) {where}",
            evidence=f"[{shp}] in {every}; {cost}",
            fix="a fused kernel keeps the softmax in fp32 registers: use scaled_dot_product_attention "
            "instead of softmax(..., dtype=float32).to(dtype) on materialised scores",
        )
    if g["instances"] >= 2 and g["kind"] in ("materialize", "cast"):
        if g["kind"] == "cast":
            what = f"casts ({g['detail']})"
            fix = (
                "the same tensor is cast in every call: store it in the compute dtype once (model.to(dtype), a "
                "bf16 cache) instead of casting per call (autocast recasts fp32 weights on every forward)"
            )
        else:
            what = "materialises a strided (transposed) view"
            if g["within"] and short_name(g["within"]) in ("matmul", "bmm", "einsum"):
                # name the operand the copied matmul has: K^T for the score matmul, V for PV
                operand = MATMUL_OPERAND.get(g["phase"], "operand")
                fix = (
                    f"torch.matmul copies its strided {operand} into a contiguous buffer before the bmm: "
                    "scaled_dot_product_attention reads strided q/k/v in place"
                )
            else:
                fix = (
                    "write the layout the consumer wants in the producer (e.g. project straight into "
                    "[B, S, 3, H, D]) and pass strided tensors on: scaled_dot_product_attention accepts "
                    "non-contiguous q/k/v, so .contiguous() / .reshape() copies are not needed"
                )
        return dict(
            base,
            code="repeated_copy",
            severity="warning",
            message=f"{g['op']}" + (f" in {g['within']}" if g["within"] else "") + f" [{shp}] {what} {where}, "
            f"in {every}",
            evidence=cost + ("; its input is not contiguous" if g["noncontiguous_input"] else ""),
            fix=fix,
        )
    return None


def _merge_shapes(flags: list[dict]) -> list[dict]:
    """One flag per (code, op, within, phase, direction): copies of one layer at several K/V
    lengths (decode steps) are the same finding."""
    out: dict = {}
    for f in flags:
        # score casts are one finding wherever they are; others per op and place
        key = (
            (f["code"],)
            if f["code"] == "score_cast"
            else (f["code"], f["op"], f.get("within"), f["phase"], f["direction"])
        )
        g = out.get(key)
        if g is None:
            out[key] = dict(f, shapes=1)
            continue
        g["shapes"] += 1
        g["calls"] += f["calls"]
        g["instances"] = (g.get("instances") or 0) + (f.get("instances") or 0)
        g["time_us"] = rounded((g["time_us"] or 0) + (f["time_us"] or 0))
        g["bytes"] = (g["bytes"] or 0) + (f["bytes"] or 0)
        g["kernel_ids"] = list(g.get("kernel_ids") or ()) + list(f.get("kernel_ids") or ())
    for g in out.values():
        if g["shapes"] > 1:
            more = "place(s)" if g["code"] == "score_cast" else "shape(s)"
            g["evidence"] += (
                f"; the same in {g['shapes'] - 1} more {more}: "
                f"{g['calls']} calls, {us(g['time_us'])} GPU, {fmt_bytes(g['bytes'])} in all"
            )
    return list(out.values())


def memory_flags(mem: dict, shapes: dict) -> list[dict]:
    """Repeated or avoidable memory traffic, each with the evidence in hand."""
    flags = []
    dm = mem["data_movement"]
    n_calls = len(shapes) or None
    copy_flags = [f for f in (_copy_flag(g, n_calls) for g in dm["copies"]) if f is not None]
    copy_flags.sort(key=lambda f: (-(f["time_us"] or 0), -(f["bytes"] or 0)))
    copy_flags = _merge_shapes(copy_flags)
    math = [f for f in copy_flags if f["code"] == "sdpa_math_copies"]
    if len(math) > 1:
        copy_flags = [f for f in copy_flags if f["code"] != "sdpa_math_copies"]
        copy_flags.insert(
            0,
            {
                "code": "sdpa_math_copies",
                "severity": "warning",
                "message": f"SDPA's math backend copies K/V and scores inside attention ({len(math)} kinds of copies)",
                "evidence": "; ".join(f["evidence"] for f in math[:4])
                + (f"; and {len(math) - 4} more" if len(math) > 4 else ""),
                "fix": math[0]["fix"],
                "calls": sum(f["calls"] for f in math),
                "time_us": rounded(sum(f["time_us"] or 0 for f in math)),
                "bytes": sum(f["bytes"] or 0 for f in math),
                "op": math[0]["op"],
                "shape": math[0]["shape"],
                "phase": math[0]["phase"],
                "direction": math[0]["direction"],
            },
        )
    kept = [f for f in copy_flags if f["code"] != "repeated_copy"]
    rep = [f for f in copy_flags if f["code"] == "repeated_copy"]
    kept += rep[:MAX_COPY_FLAGS]
    if len(rep) > MAX_COPY_FLAGS:
        rest = rep[MAX_COPY_FLAGS:]
        kept.append(
            {
                "code": "repeated_copy",
                "severity": "info",
                "message": f"{len(rest)} more repeated copies inside attention",
                "evidence": f"{sum(f['calls'] for f in rest)} calls, {us(sum(f['time_us'] or 0 for f in rest))} "
                f"GPU, {fmt_bytes(sum(f['bytes'] or 0 for f in rest))}",
                "fix": "the data movement table lists them all (data_movement.copies in the JSON report)",
                "calls": sum(f["calls"] for f in rest),
                "time_us": rounded(sum(f["time_us"] or 0 for f in rest)),
                "bytes": sum(f["bytes"] or 0 for f in rest),
            }
        )
    flags += kept
    for g in dm["transfers"]:
        if g["host_device"]:
            flags.append(
                {
                    "code": "host_device_transfer",
                    "severity": "warning",
                    "message": f"{g['copy']} transfer inside attention ({P.PHASE_LABELS.get(g['phase'], g['phase'])}, "
                    f"{g['direction']})",
                    "evidence": f"{g['calls']} × '{g['name']}' in {g['instances']} attention calls, "
                    f"{us(g['time_us'])}, "
                    f"{fmt_bytes(g['bytes'])}",
                    "fix": "build masks / positions / scales on the device (torch.ones(..., device=q.device)) or once "
                    "outside the step; avoid .item() / .cpu() / .tolist() inside attention",
                    "calls": g["calls"],
                    "time_us": g["time_us"],
                    "bytes": g["bytes"],
                }
            )
    for s in dm["syncs"]:
        flags.append(
            {
                "code": "host_sync",
                "severity": "info",
                "message": f"{s['op']} inside attention waits for the GPU",
                "evidence": f"{s['calls']} calls in {s['instances']} attention calls, {us(s['cpu_time_us'])} CPU",
                "fix": "keep the value on the device, or read it once outside the attention loop",
                "calls": s["calls"],
                "time_us": None,
                "bytes": None,
            }
        )
    for d in mem["devices"]:
        sm = d.get("score_matrices") or {}
        if sm.get("allocs"):
            ex = (sm.get("examples") or [{}])[0]
            shp = "×".join(str(x) for x in ex.get("shape") or []) or "?"
            cmp = next(
                (
                    c
                    for c in d.get("calls") or []
                    if c.get("fused_alloc_bytes") is not None and (c.get("score_allocs") or 0) > 0
                ),
                None,
            )
            ev = (
                f"{sm['allocs']} score-matrix allocations on {d['device']} ({fmt_bytes(sm['bytes'])} in all, "
                f"largest {fmt_bytes(sm['max_bytes'])}, e.g. {ex.get('op')} [{shp}] {ex.get('dtype') or ''})"
            )
            if cmp is not None:
                ev += (
                    f"; core attention peaked at {fmt_bytes(cmp['core_peak_bytes'])} above its inputs vs "
                    f"{fmt_bytes(cmp['fused_alloc_bytes'])} (out + logsumexp) for a fused kernel"
                )
            flags.append(
                {
                    "code": "score_matrix",
                    "severity": "warning",
                    "device": d["device"],
                    "message": "unfused attention materialises the S×S score matrix",
                    "evidence": ev,
                    "fix": "use torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient backends "
                    "never allocate S×S) or attn_implementation='sdpa' / 'flash_attention_2' in transformers",
                    "calls": sm["allocs"],
                    "time_us": None,
                    "bytes": sm["bytes"],
                }
            )
    return flags
