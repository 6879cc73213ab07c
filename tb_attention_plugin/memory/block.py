"""The ``memory`` block of a report: its parts put together, with the assumptions they rest on."""

from __future__ import annotations

from ..trace.correlate import Links
from ..trace.records import Trace
from .allocations import attention_spans, device_entries
from .calls import instance_shapes
from .context import TraceContext, step_window
from .flags import memory_flags
from .footprint import GQA_GROUPS, MLA_LATENT_DIM, MLA_ROPE_DIM, kv_footprint
from .movement import data_movement

HOW_TO_RECORD = (
    "profile with torch.profiler.profile(..., profile_memory=True, record_shapes=True, "
    "with_stack=True): allocations are then recorded as [memory] events"
)


def memory_report(trace: Trace, links: Links, tagging, attr, report: dict) -> dict:
    """The ``memory`` block of a report (see docs/report-schema.md). ``attr`` (the cost attribution) is
    not used yet; the signature is the one report.py calls."""
    ctx = TraceContext(trace, links, tagging)
    window = step_window(trace, report)
    shapes = instance_shapes(ctx, window)
    M = trace.memory
    n_mem = len(M["ts"])
    spans = attention_spans(ctx, window)
    out: dict = {
        "recorded": bool(n_mem),
        "notice": None
        if n_mem
        else {
            "code": "no_memory_events",
            "message": "no memory events in this trace: allocations are unknown",
            "fix": HOW_TO_RECORD,
        },
        "devices": [],
        "primary": None,
        "attention_spans": spans,
    }
    if n_mem:
        out["devices"] = device_entries(ctx, shapes, window)
        if out["devices"]:
            out["primary"] = out["devices"][0]["device"]
    out["footprint"] = kv_footprint(ctx, shapes, report, window)
    out["data_movement"] = data_movement(ctx, shapes, report, window)
    out["flags"] = memory_flags(out, shapes)
    # the copies' GPU activities go to the advice (advice/rules/memory_traffic.py, the report's
    # "memory_kernels"), not into the JSON: a flag's kernels can be many
    kernels: dict[str, list[int]] = {}
    for f in out["flags"]:
        ids = f.pop("kernel_ids", None)
        if ids:
            kernels.setdefault(f["code"], []).extend(ids)
    for g in out["data_movement"].get("copies") or []:
        g.pop("kernel_ids", None)
    out["_kernel_ids"] = kernels
    out["assumptions"] = {
        "gpu_events": "only Device Type 1 (CUDA) events count for a GPU; CPU events (type 0) are reported as "
        "the 'cpu' device, separately",
        "attribution": "an event belongs to the innermost CPU range on its thread at its timestamp; backward "
        "ranges carry the attention call and phase of the forward op they differentiate",
        "maker_op": "an allocation is matched to the innermost op around it whose inferred output has its size "
        "(CUDA sizes rounded up to 512 B; a large-pool block may be up to 1 MiB larger), then to the "
        "outermost enclosing op that returns the same tensor",
        "mla": f"MLA-style latent KV as in DeepSeek-V2: {MLA_LATENT_DIM}-dim compressed latent + {MLA_ROPE_DIM}-dim "
        "decoupled RoPE key per token and layer, at the K/V dtype",
        "gqa": f"GQA alternative: {GQA_GROUPS} KV heads (when the model has more query heads); MQA: 1 KV head",
    }
    return out
