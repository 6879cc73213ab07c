"""One vocabulary (tb_attention_plugin/attention/vocabulary.py): the dashboard's generated copy is
current, and no other module writes its own phase list or labels again."""

from __future__ import annotations

import os
import re

from helpers import ROOT
from tb_attention_plugin.attention import patterns as P, vocabulary as V


def test_the_dashboards_copy_is_generated_from_the_module():
    with open(V.TS_PATH, encoding="utf-8") as f:
        assert f.read() == V.typescript(), (
            "frontend/src/vocabulary.ts is stale: python -m tb_attention_plugin.attention.vocabulary, then rebuild"
        )


def test_the_vocabulary_is_complete_and_consistent():
    assert set(V.PHASE_LABELS) == set(V.PHASE_COLORS) == set(V.PHASES) == set(V.FLOW_ORDER)
    assert len(V.FLOW_ORDER) == len(V.PHASES) and V.CORE_PHASES <= set(V.PHASES)
    assert V.UNFUSED_CORE_PHASES == V.CORE_PHASES - {"fused_attention"}
    assert set(V.BOUND_LABELS) == set(V.BOUND_COLORS) == set(V.BOUNDS)
    assert len(set(V.PHASE_COLORS.values())) == len(V.PHASES)  # a colour tells phases apart
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in list(V.PHASE_COLORS.values()) + list(V.BOUND_COLORS.values()))
    # the engine's users see the same objects through patterns
    assert P.PHASES is V.PHASES and P.PHASE_LABELS is V.PHASE_LABELS and P.CORE_PHASES is V.CORE_PHASES


# A phase key followed by a label or colour: a mapping of the vocabulary written out again.
_MAPPING = re.compile(r"""["']?\b(qkv_proj|qk_matmul|pv_matmul|out_proj|fused_attention)\b["']?\s*:\s*["'#]""")


def test_no_other_module_writes_the_vocabulary_again():
    found = []
    for top in ("tb_attention_plugin", os.path.join("frontend", "src")):
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if x not in ("__pycache__", "static", "node_modules")]
            for f in files:
                path = os.path.join(d, f)
                if not f.endswith((".py", ".ts")) or path in (V.__file__, V.TS_PATH):
                    continue
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        if _MAPPING.search(line):
                            found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()[:80]}")
    assert not found, "phase labels/colours defined outside attention/vocabulary.py:\n" + "\n".join(found)


def test_the_check_would_see_a_copy():
    assert _MAPPING.search('  qkv_proj: "#4e79a7",') and _MAPPING.search('{"qk_matmul": "QK^T matmul"}')
    assert not _MAPPING.search('if phase == "qkv_proj":')
