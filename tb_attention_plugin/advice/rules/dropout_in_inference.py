"""Dropout active in a trace without a backward pass → ``model.eval()``.

Premise: dropout kernels, or SDPA calls with ``dropout_p > 0``, in a trace without any backward pass.
Estimate (attention GPU time, whole trace): the dropout kernels' time; for SDPA's in-kernel dropout
the call's time less its predicted time without dropout on the backend the dispatcher then picks
(the measured table has no dropout rows: the prediction is the no-dropout rate). The step figure
replays the step without the dropout kernels and their launches.
"""

from __future__ import annotations

from typing import Any, Optional

from ...attention import patterns as P
from ...formats import rounded as _r, us as _us
from ..base import GPU, Finding, Rule, Silent, group_kernels, pct0, total
from ..replay import WhatIf
from ..run import Run
from ..sdpa_choice import Inputs, arch_of, choose, inputs_of_call, predict_once

FIX = """\
model.eval()                       # nn.Dropout becomes the identity
with torch.inference_mode():
    out = model(x)
# in hand-written attention:
out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)"""


def _num(text: str) -> str:
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


def dropout_ops(run: Run, rows: list[dict]) -> list[dict]:
    if run.trace is None or run.links is None or not rows:
        return []
    R, names, gop = run.trace.ranges, run.trace.strings, run.links.gpu_op
    found: dict = {}
    for k in rows:
        r = int(gop[k["id"]]) if k["id"] < len(gop) else -1
        while r >= 0:
            nm = names[R["name"][r]]
            if P.short_op(nm) in P.DROPOUT_OPS:
                args = run.op_args(r)
                p = _num(args[1].value) if len(args) > 1 else ""
                tr = args[2].value if len(args) > 2 else ""
                key = (nm, p, tr)
                found[key] = found.get(key, 0) + 1
                break
            r = int(run.links.parent[r])
    return [{"op": a, "p": b or "?", "train": c or "?", "calls": n} for (a, b, c), n in found.items()]


def check(run: Run) -> Any:
    if run.has_backward:
        return Silent("the trace has a backward pass: dropout belongs to training")
    rows = [k for k in run.k if k["phase"] == "dropout" and (k["dur_us"] or 0) > 0]
    ops = dropout_ops(run, rows)
    sdpa_p = [c for c in run.sdpa_calls() if (c["shapes"] or {}).get("dropout_p") and c["kernel_ids"]]
    if not rows and not sdpa_p:
        return Silent("no dropout kernels and no SDPA call with dropout_p > 0")
    t = total(rows)
    w = WhatIf(removed={k["id"] for k in rows})
    m = run.replay
    if m is not None:  # each dropout op's CPU time goes too
        launched = m.launches([k["id"] for k in rows]).tolist()
        w.cpu_saved.extend((la, DROPOUT_CPU_US) for la in launched if la == la)  # NaN: not replayed
    gain: Optional[float] = t
    detail = "This trace has no backward pass, yet attention applies dropout"
    ev: dict[str, Any] = {"time_us": _r(t), "kernels": group_kernels(rows), "ops": ops}
    if rows:
        detail += f": {len(rows)} dropout kernels take {_us(t)} ({pct0(t / run.att_time)} of attention time)"
    removable = t
    if sdpa_p:
        ps = sorted({c["shapes"]["dropout_p"] for c in sdpa_p})
        plist = ", ".join(f"{p:g}" for p in ps)
        detail += (
            ("; " if rows else ": ") + f"{len(sdpa_p)} SDPA call(s) pass dropout_p={plist}"
            " (the fused kernel generates random numbers and cannot use its fastest path)"
        )
        ev["sdpa_dropout_p"] = ps
        arch = arch_of(run)
        sdpa_t = sdpa_new = 0.0
        ok = True
        for c in sdpa_p:
            cr = run.call_rows(c)
            ct = total(cr)
            x = inputs_of_call(c, False)
            if x is None:
                ok = False
                break
            x0 = Inputs(**dict(x.__dict__, dropout_p=0.0))
            be, _ = choose(x0, arch)
            p = predict_once(be, "forward", x0, run, arch)
            if p is None:
                ok = False
                break
            sdpa_t += ct
            sdpa_new += min(ct, p.time_us)
            for k in cr:
                w.dur[k["id"]] = (k["dur_us"] or 0.0) * (min(ct, p.time_us) / ct if ct else 1.0)
        removable += sdpa_t
        if ok:
            gain = t + sdpa_t - sdpa_new
            ev["sdpa_without_dropout_us"] = _r(sdpa_new)
        elif not rows:
            gain = None
    if ops:
        detail += "; recorded: " + ", ".join(f"{o['op']}(p={o['p']}, train={o['train']}) x{o['calls']}" for o in ops)
    detail += ". If this is inference, dropout only adds noise and time."
    return Finding(
        detail=detail,
        evidence=ev,
        how=(
            "Call model.eval() before inference (nn.Dropout becomes the identity) and run under "
            "torch.inference_mode(); for F.scaled_dot_product_attention pass dropout_p=self.p if "
            "self.training else 0.0."
        ),
        removable_us=min(removable, run.att_time),
        gpu_gain_us=gain,
        what_if=w,
    )


DROPOUT_CPU_US = 8.0  # unprofiled CPU time of one native_dropout op (its RNG setup and launch)

RULE = Rule(
    id="dropout_in_inference",
    title="Dropout active without a backward pass",
    premise="dropout kernels, or SDPA calls with dropout_p > 0, in a trace without any backward pass",
    basis=GPU,
    estimate=(
        "µs of attention GPU time over the trace: the dropout kernels' time (+ SDPA calls − their predicted time "
        "without dropout); the step figure also drops the dropout ops' launches"
    ),
    fix=FIX,
    twin="dropout_train_to_eval",
    absent=("gpt4l_naive_train", "naive_bf16_s2048_d64_fwdbwd"),
    check=check,
)
