"""TensorBoard imports every installed plugin when it starts: the Attention tab must not pull the
analysis engine into TensorBoard's process (a worker imports it when it analyses a trace)."""

import json
import os
import subprocess
import sys

from helpers import ROOT

ENGINE = (
    "tb_attention_plugin.report",
    "tb_attention_plugin.analyze",
    "tb_attention_plugin.compare",
    "tb_attention_plugin.memory",
    "tb_attention_plugin.advice",
    "tb_attention_plugin.annotate",
    "tb_attention_plugin.roofline.cost",
    "tb_attention_plugin.roofline.measured",
    "tb_attention_plugin.trace.records",
    "tb_attention_plugin.attention.tagger",
)


def test_importing_the_plugin_leaves_the_engine_out():
    code = (
        "import json, sys; import tb_attention_plugin.plugin; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tb_attention_plugin'))))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = set(json.loads(r.stdout))
    assert "tb_attention_plugin.server.loader" in loaded  # the check sees what it should
    assert not loaded & set(ENGINE), sorted(loaded & set(ENGINE))
