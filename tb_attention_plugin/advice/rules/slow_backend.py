"""A fused SDPA backend far below what another backend reaches at the same shapes.

Premise: SDPA calls ran a fused backend (flash, mem-efficient or cuDNN, from the op tree; not
FlexAttention, not math) at shapes in the measured table's range (Sq·Sk ≥ 512², where the
kernels are compute-bound), and another backend these inputs allow is predicted at least 2×
faster (sdpa_choice.py: the measured rate of that backend on this GPU family, per pass, head dim and
mask kind). Typical: mem-efficient (chosen by sdpa_kernel(EFFICIENT_ATTENTION), or because an
attn_mask tensor ruled flash out) where flash or cuDNN would run.

Estimate (attention GPU time, whole trace): the calls' kernel time less the faster backend's
predicted time, per pass.
"""

from __future__ import annotations

from typing import Any

from ...formats import rounded as _r, us as _us
from ..base import GPU, Finding, Rule, Silent, group_kernels, phase_rows, total
from ..equivalence import mask_facts, sdpa_line
from ..replay import WhatIf
from ..run import Run
from ..sdpa_choice import LABELS, SDP_ENUM, Prediction, arch_of, choose, inputs_of_call, predict_once, rate, why_not

FASTER = 2.0  # another backend predicted this many times faster ("far below"; flash vs cuDNN on the H200, 1.5x, is not)
MIN_SCORES = 512 * 512  # Sq·Sk below this: the table's compute-bound rates do not apply
FUSED = ("flash", "efficient", "cudnn")

FIX = """\
from torch.nn.attention import SDPBackend, sdpa_kernel
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):   # the faster backends first
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # the same mask (is_causal=True only for one
                                                                    # the trace shows is the causal mask)"""


def check(run: Run) -> Any:
    calls = [c for c in run.sdpa_calls() if c["backend"] in FUSED and c["kernel_ids"]]
    if not calls:
        return Silent("no SDPA call on a fused backend (flash, mem-efficient, cuDNN)")
    arch = arch_of(run)
    if not any(rate(b, "forward", _probe(), arch) for b in FUSED):
        return Silent(f"no measured backend table for this GPU family ({arch or run.device or 'unknown'})")
    hits: dict = {}
    outside = 0
    evidence: set[str] = set()  # what shows a call's mask tensor is the causal one
    not_shown: set[str] = set()  # why a score-shaped mask tensor is not shown causal
    # every step repeats its calls: the inputs, the alternatives and each (alternative, pass)'s
    # prediction are worked out once per distinct call; only the kernel times are per call
    inputs: dict[tuple, tuple] = {}
    plans: dict[tuple, Any] = {}
    for c in calls:
        rows = run.call_rows(c)
        bwd = any(k["direction"] == "backward" for k in rows)
        now = c["backend"]
        ck = (id(c.get("shapes")), c.get("mask_dtype"), c.get("enable_gqa"), now, bwd)
        got = inputs.get(ck)
        if got is None:
            x = inputs_of_call(c, bwd)
            # is_causal only where the trace shows the mask is the causal one (never an encoder's padding)
            facts = mask_facts(run, x.sq, x.sk, c.get("mask_shape")) if x is not None else None
            causal = x is not None and _score_shaped_mask(c, x) and facts is not None and facts.causal
            opts = _options(now, x, arch, causal) if x is not None else []
            got = inputs[ck] = (x, opts)
            if facts is not None and causal:
                evidence.add(facts.reason)
            elif facts is not None and _score_shaped_mask(c, x):
                not_shown.add(facts.reason)
        x, opts = got
        if x is None:
            continue
        if x.sq * x.sk < MIN_SCORES:
            outside += 1
            continue
        t = {p: total(k for k in rows if k["direction"] == p) for p in ("forward", "backward")}
        for ai, (alt, xa) in enumerate(opts):
            pred = {}
            for pas, tt in t.items():
                if tt <= 0:
                    continue
                pk = (ck, ai, pas)
                plan = plans.get(pk, _UNSEEN)
                if plan is _UNSEEN:
                    plan = plans[pk] = _plan(now, alt, pas, x, xa, run, arch)
                if plan is None:
                    break
                p, f, note = plan
                pred[pas] = p if f is None else Prediction(tt * f, "table", note, "compute")
            else:
                if not pred:
                    continue
                t_alt = sum(p.time_us for p in pred.values())
                t_now = sum(t[p] for p in pred)
                if t_alt < t_now:  # every faster alternative is listed; the rule fires on one FASTER × faster
                    key = (now, alt, xa is not x)
                    e = hits.setdefault(
                        key,
                        {
                            "calls": 0,
                            "now_us": 0.0,
                            "alt_us": 0.0,
                            "notes": set(),
                            "rows": [],
                            "passes": {},
                            "needs_causal": xa is not x,
                            "inputs": x,
                        },
                    )
                    e["calls"] += 1
                    e["now_us"] += t_now
                    e["alt_us"] += t_alt
                    e["rows"] += rows
                    e["notes"].update(p.note for p in pred.values())
                    for pas, p in pred.items():
                        pp = e["passes"].setdefault(pas, {"now_us": 0.0, "alt_us": 0.0})
                        pp["now_us"] += t[pas]
                        pp["alt_us"] += p.time_us
    hits_fast = {k: e for k, e in hits.items() if e["alt_us"] * FASTER <= e["now_us"]}
    if not hits_fast:
        if outside == len(calls):
            return Silent("every fused SDPA call is smaller than the measured table's range (Sq·Sk < 512²)")
        why = f"no other backend these inputs allow is predicted {FASTER:g}× faster than the one that ran"
        if not_shown:  # a mask tensor that may be causal, but the trace does not show it is
            why += f"; is_causal=True was not weighed, as it would change the result: {sorted(not_shown)[0]}"
        return Silent(why)
    # per backend that ran, the best alternative
    best: dict = {}
    for (now, alt, _causal), e in hits_fast.items():
        if now not in best or e["now_us"] - e["alt_us"] > best[now][1]["now_us"] - best[now][1]["alt_us"]:
            best[now] = (alt, e)
    (now, (alt, e)) = max(best.items(), key=lambda kv: kv[1][1]["now_us"] - kv[1][1]["alt_us"])
    alternatives = {
        a + (" (is_causal)" if c else ""): {
            "predicted_us": _r(v["alt_us"]),
            "gain_us": _r(v["now_us"] - v["alt_us"]),
            "calls": v["calls"],
        }
        for (n, a, c), v in hits.items()
        if n == now
    }
    gain = e["now_us"] - e["alt_us"]
    default, passed = choose(e["inputs"], arch)
    if e["needs_causal"]:
        why = (
            "an attn_mask tensor is passed: every backend computes the masked scores of a mask tensor"
            + (f" and it rules out {LABELS[alt]}" if why_not(alt, e["inputs"], arch) is not None else "")
            + "; the trace shows it is the causal mask, and is_causal=True skips the masked half"
        )
    elif default == alt:
        why = (
            f"the dispatcher would pick {LABELS[alt]} for these inputs, so {LABELS[now]} was forced "
            f"(sdpa_kernel({SDP_ENUM[now]}) or enable_{'flash' if alt == 'flash' else 'cudnn'}_sdp(False))"
        )
    else:
        why = f"the dispatcher picks {LABELS.get(default, default)} first" + (
            f" ({'; '.join(f'{LABELS[b]}: {w}' for b, w in passed.items())})" if passed else ""
        )
    per = "; ".join(
        f"{pas} {_us(v['now_us'])} now vs ~{_us(v['alt_us'])} ({v['now_us'] / v['alt_us']:.1f}x)"
        for pas, v in e["passes"].items()
        if v["alt_us"]
    )
    same = alt == now  # the same backend with is_causal=True instead of the mask tensor
    speedup = e["now_us"] / e["alt_us"]
    if same:
        title = f"Causal mask passed as a tensor: is_causal=True would be ~{speedup:.1f}x faster on {LABELS[now]}"
        detail = (
            f"{e['calls']} SDPA call(s) ran on {LABELS[now]} with an attn_mask tensor of the score's shape "
            f"({_us(e['now_us'])}), and the trace shows it is the causal mask ({'; '.join(sorted(evidence))}): "
            f"is_causal=True lets {LABELS[now]} skip the masked half and not read the mask: {per} "
            f"({'; '.join(sorted(e['notes']))})."
        )
        how = (
            "Pass is_causal=True instead of the causal attn_mask tensor (HF models: build no 4D causal mask "
            "when there is no padding)."
        )
    else:
        title = f"Slow SDPA backend: {LABELS[now]} where {LABELS[alt]} is ~{speedup:.1f}x faster"
        detail = (
            f"{e['calls']} SDPA call(s) ran on {LABELS[now]} ({_us(e['now_us'])}); at these shapes {LABELS[alt]} "
            f"reaches a higher rate on this GPU family: {per} ({'; '.join(sorted(e['notes']))}). "
            f"Why {LABELS[now]} ran: {why}."
        )
        how = (
            f"Run {LABELS[alt]}: `with torch.nn.attention.sdpa_kernel([{SDP_ENUM[alt]}]):` around the attention "
            "(it raises, with the reason, if these inputs rule it out)"
            + ("; pass is_causal=True instead of the causal attn_mask tensor" if e["needs_causal"] else "")
            + (
                f"; remove the sdpa_kernel({SDP_ENUM[now]}) / enable_*_sdp(False) that forced {LABELS[now]}"
                if default == alt and not e["needs_causal"]
                else ""
            )
            + "."
        )
    w = WhatIf()
    ratio = e["alt_us"] / e["now_us"] if e["now_us"] else 1.0
    for k in e["rows"]:
        w.dur[k["id"]] = (k["dur_us"] or 0.0) * ratio
    x0 = e["inputs"]
    mask = (
        "causal" if e["needs_causal"] or x0.mask == "causal" else ("tensor" if x0.mask in ("bool", "float") else "none")
    )
    fix = (
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        f"with sdpa_kernel([{SDP_ENUM[alt]}]):\n"
        f"    {sdpa_line(mask, gqa=x0.h != x0.hk, dropout=bool(x0.dropout_p))}"
    )
    return Finding(
        detail=detail,
        title=title,
        fix_code=fix,
        evidence={
            "backend": now,
            "faster_backend": alt,
            "calls": e["calls"],
            "time_us": _r(e["now_us"]),
            "predicted_us": _r(e["alt_us"]),
            "alternatives": alternatives,
            "passes": {p: {k: _r(v) for k, v in d.items()} for p, d in e["passes"].items()},
            "prediction": sorted(e["notes"]),
            "why": why,
            "causal_mask_evidence": sorted(evidence) if e["needs_causal"] else None,
            "call_is_causal": x0.mask == "causal",
            "phases": phase_rows(e["rows"]),
            "kernels": group_kernels(e["rows"]),
        },
        how=how,
        removable_us=e["now_us"],
        gpu_gain_us=gain,
        what_if=w,
    )


_UNSEEN = object()


def _plan(now: str, alt: str, pas: str, x: Any, xa: Any, run: Run, arch: Any) -> Any:
    """What one pass of one call predicts on ``alt`` (inputs ``xa``), apart from the call's own
    kernel time: None when the table has no row for it (the alternative is not compared); else
    (prediction, None, None), or (None, factor, note) when the prediction is the table's ratio
    between the two backends applied to the measured time (shape effects common to both cancel;
    rates are per FLOP of the table's convention: is_causal does half the work of the mask) -
    only where the table has a row of the running configuration: it has none with a mask tensor,
    whose reads make the running kernel slower than the table's unmasked row."""
    p = predict_once(alt, pas, xa, run, arch)
    if p is None or p.source != "table":
        return None
    r_now, r_alt = rate(now, pas, x, arch), rate(alt, pas, xa, arch)
    if r_now is not None and r_alt is not None and p.bound == "compute" and x.mask in ("none", "causal"):
        f = r_now[0] / r_alt[0] * xa.fwd_flops() / x.fwd_flops()
        note = (
            f"{p.note}; {LABELS[now]} {pas} at {r_now[1]['tflops']:g} TFLOP/s in the table: {f:.2f}x the measured time"
        )
        return None, f, note
    return p, None, None


def _score_shaped_mask(c: dict, x: Any) -> bool:
    """Whether the call's mask tensor holds a whole score matrix (Sq × Sk per batch or broadcast), as
    a causal mask does; a key-padding mask ([B, 1, 1, Sk]) is not one."""
    mb = (c.get("shapes") or {}).get("mask_bytes") or 0
    return x.mask in ("bool", "float") and x.sq == x.sk and mb >= x.sq * x.sk


def _options(now: str, x: Any, arch: Any, causal: bool) -> list[tuple[str, Any]]:
    """(backend, inputs) alternatives to the backend that ran: each other fused backend these inputs
    allow, and, for a mask tensor the trace shows is the causal mask (``causal``), each fused backend
    (the running one too) with it passed as is_causal=True, which skips the masked half that no
    backend skips for a tensor."""
    out = [(alt, x) for alt in FUSED if alt != now and why_not(alt, x, arch) is None]
    xc = _as_is_causal(x)
    if causal and xc is not x:
        out += [(alt, xc) for alt in FUSED if why_not(alt, xc, arch) is None]
    return out


def _probe() -> Any:
    from ..sdpa_choice import Inputs

    return Inputs(dtype="bf16", b=1, h=1, hk=1, sq=2048, sk=2048, d=64, dv=64)


def _as_is_causal(x: Any) -> Any:
    """The same call with its mask passed as is_causal (a causal attn_mask is the usual reason flash
    is ruled out)."""
    from ..sdpa_choice import Inputs

    if x.mask in ("bool", "float") and x.sq == x.sk:
        return Inputs(**dict(x.__dict__, mask="causal", mask_dtype=None))
    return x


RULE = Rule(
    id="slow_backend",
    title="Slow SDPA backend",
    premise=(
        "SDPA calls on a fused backend (flash, mem-efficient, cuDNN; not FlexAttention) at Sq·Sk ≥ 512², where "
        "another backend these inputs allow reaches ≥ 2× its speed in the measured table of this GPU family"
    ),
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: the calls' kernel time × (1 − the running backend's rate / the "
        "faster backend's rate, both from the measured table at the nearest head dim and mask kind)"
    ),
    fix=FIX,
    twin="memeff_to_flash",
    absent=("sdpa_flash_fwdbwd_causal", "sdpa_cudnn_fwdbwd_causal", "hf_llama_sdpa_fwdbwd", "flex_causal_fwdbwd"),
    check=check,
)
