"""The words shared by the report, the CLI and the dashboard: attention phases (their keys, labels,
colours, which are core attention, the order a layer runs them in), bounds and directions.

This is their one home. The engine stores a phase as its index in :data:`PHASES`; the JSON, the
text reports and the timeline tracks use :data:`PHASE_LABELS`; the dashboard imports
``frontend/src/vocabulary.ts``, generated from this module (``python -m
tb_attention_plugin.attention.vocabulary``; a test fails when it is stale). Adding a phase is
one :class:`Phase` entry here (then regenerate the TypeScript and the bundle), plus the tagger
rule that assigns it (docs/extending.md).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    key: str  # in the JSON and in URLs
    label: str  # shown to people (CLI, JSON "label", dashboard, timeline tracks)
    color: str  # the dashboard's colour for it
    core: bool = False  # core attention: what a fused kernel replaces (projections and layout are apart)


# The engine's phase codes are indexes into this tuple: append new phases, do not reorder.
_PHASES = (
    Phase("qkv_proj", "QKV projection", "#4e79a7"),
    Phase("qk_matmul", "QK^T matmul", "#f28e2b", core=True),
    Phase("scale", "scale", "#edc948", core=True),
    Phase("mask", "mask", "#b07aa1", core=True),
    Phase("softmax", "softmax", "#e15759", core=True),
    Phase("dropout", "dropout", "#ff9da7", core=True),
    Phase("pv_matmul", "PV matmul", "#59a14f", core=True),
    Phase("out_proj", "output projection", "#76b7b2"),
    Phase("fused_attention", "fused attention", "#9c6ade", core=True),
    Phase("rotary", "rotary embedding", "#9c755f"),
    Phase("layout", "layout / copies", "#bab0ac"),
    Phase("other", "other (in attention scope)", "#79706e"),
    # a bias added to the scores that depends on the query/key positions and the head: T5's
    # relative-position buckets looked up in a per-head table, Swin's relative-position table,
    # ALiBi; computed from position indices, not from q or k
    Phase("position_bias", "position bias", "#d37295", core=True),
    # additive (Bahdanau) attention's scores: v^T tanh(W q + U k), a broadcast add of the projected
    # queries and keys instead of a QK^T matmul
    Phase("additive_score", "additive score", "#86bcb6", core=True),
)
PHASES: tuple[str, ...] = tuple(p.key for p in _PHASES)
PHASE_INDEX: dict[str, int] = {p: i for i, p in enumerate(PHASES)}
PHASE_LABELS: dict[str, str] = {p.key: p.label for p in _PHASES}
PHASE_COLORS: dict[str, str] = {p.key: p.color for p in _PHASES}
CORE_PHASES: frozenset[str] = frozenset(p.key for p in _PHASES if p.core)
UNFUSED_CORE_PHASES: frozenset[str] = CORE_PHASES - {"fused_attention"}
# What one fused SDPA kernel replaces: the score matmul, its elementwise steps and PV. A position bias
# is still computed (and learned) beside it, and the kernel reads it as attn_mask.
FUSABLE_PHASES: frozenset[str] = frozenset({"qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul"})
# The operand each core matmul multiplies by: what a strided-copy finding says it copies.
MATMUL_OPERAND: dict[str, str] = {"qk_matmul": "K^T", "pv_matmul": "V"}
# The order a layer runs them in (comparisons list phases this way).
FLOW_ORDER: tuple[str, ...] = (
    "qkv_proj",
    "rotary",
    "qk_matmul",
    "additive_score",
    "scale",
    "position_bias",
    "mask",
    "softmax",
    "dropout",
    "pv_matmul",
    "fused_attention",
    "out_proj",
    "layout",
    "other",
)
NOT_ATTENTION = "none"  # the kernel-table filter value for kernels outside attention

BOUNDS: tuple[str, ...] = ("memory", "compute", "latency", "unknown")
BOUND_LABELS: dict[str, str] = {
    "memory": "memory-bound",
    "compute": "compute-bound",
    "latency": "latency-bound",
    "unknown": "unknown",
}
BOUND_COLORS: dict[str, str] = {"memory": "#0969da", "compute": "#1a7f37", "latency": "#bf8700", "unknown": "#6e7781"}

DIRECTIONS: tuple[str, ...] = ("forward", "backward")

TS_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "frontend", "src", "vocabulary.ts"
)


def typescript() -> str:
    """The source of ``frontend/src/vocabulary.ts``."""

    def const(name: str, value: object, ts_type: str) -> str:
        return f"export const {name}: {ts_type} = {json.dumps(value, ensure_ascii=False)};\n"

    return (
        "// Generated from tb_attention_plugin/attention/vocabulary.py by\n"
        "// `python -m tb_attention_plugin.attention.vocabulary`: edit that module, not this file.\n\n"
        + const("PHASE_ORDER", list(PHASES), "readonly string[]")
        + const("FLOW_ORDER", list(FLOW_ORDER), "readonly string[]")
        + const("CORE_PHASES", sorted(CORE_PHASES, key=PHASE_INDEX.__getitem__), "readonly string[]")
        + const("PHASE_LABELS", PHASE_LABELS, "Record<string, string>")
        + const("PHASE_COLORS", PHASE_COLORS, "Record<string, string>")
        + const("BOUNDS", list(BOUNDS), "readonly string[]")
        + const("BOUND_LABELS", BOUND_LABELS, "Record<string, string>")
        + const("BOUND_COLORS", BOUND_COLORS, "Record<string, string>")
        + const("DIRECTIONS", list(DIRECTIONS), "readonly string[]")
    )


def main(argv: list[str]) -> int:
    """Write frontend/src/vocabulary.ts (``--check``: exit 1 when it differs instead)."""
    text = typescript()
    try:
        with open(TS_PATH, encoding="utf-8") as f:
            same = f.read() == text
    except OSError:
        same = False
    if "--check" in argv:
        if not same:
            print(f"error: {TS_PATH} is stale: run python -m tb_attention_plugin.attention.vocabulary", file=sys.stderr)
        return 0 if same else 1
    if not same:
        with open(TS_PATH, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"{'wrote' if not same else 'unchanged:'} {TS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
