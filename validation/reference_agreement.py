#!/usr/bin/env python3
"""How much of a CUDA-graph replay a candidate reference trace matches: by kernel name alone (the
alignment attention/graphs.py makes), and by name, grid and block (what graphs.matches counts when
analyze.find_reference looks for a reference beside the replay), on the recorded H200 traces of
tests/data. The table in benchmarks/RESULTS.md (fifth session) is this script's output.

    .venv/bin/python validation/reference_agreement.py
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tb_attention_plugin.analyze import load_trace  # noqa: E402
from tb_attention_plugin.attention import graphs  # noqa: E402
from tb_attention_plugin.trace.correlate import link  # noqa: E402

# (replay, candidate, whether it is the same step): the right references, then wrong ones
PAIRS = [
    ("ffn_block_b2_s2048_compiled_cudagraph", "ffn_block_b2_s2048_compiled", True),
    ("ffn_block_b2_s2048_compiled_cudagraph", "ffn_block_b2_s2048_eager", True),
    ("ffn_block_b2_s2048_eager_cudagraph", "ffn_block_b2_s2048_eager", True),
    ("decode_cuda_graph", "decode_eager", True),
    ("decode_cuda_graph_h7", "decode_eager_h7", True),
    ("decode_cuda_graph_rep_h7", "decode_eager_rep_h7", True),
    ("ffn_block_b2_s2048_eager_cudagraph", "ffn_block_b8_s4096_eager", False),
    ("ffn_block_b2_s2048_compiled_cudagraph", "t5_eager", False),
    ("ffn_block_b2_s2048_eager_cudagraph", "t5_eager", False),
    ("ffn_block_b2_s2048_eager_cudagraph", "llama_eager_h7", False),
    ("decode_cuda_graph", "t5_eager", False),
    ("decode_cuda_graph", "llama_eager_h7", False),
    ("decode_cuda_graph", "ffn_block_b2_s2048_eager", False),
    ("decode_cuda_graph_h7", "decode_eager_rep_h7", False),
]


def recorded(name: str) -> str:
    return glob.glob(os.path.join(REPO, "tests", "data", "*", name, "*.pt.trace.json*"))[0]


def by_name(trace, links, reference) -> int:
    """Replayed kernels the name alignment pairs with a kernel of the reference."""
    rep = graphs.replayed(trace, links)
    links = graphs._replace(links, gpu_op=np.where(rep, -1, links.gpu_op))
    per_group, _ = graphs._match_reference(trace, graphs._groups(trace, links, rep), reference, link(reference))
    return sum(len(m) for m in per_group)


def main() -> int:
    print("| replay | candidate | same step | replayed | by name | by name, grid and block |")
    print("|---|---|---|---|---|---|")
    for replay, candidate, same in PAIRS:
        trace = load_trace(recorded(replay))
        links = link(trace)
        reference = load_trace(recorded(candidate))
        n = int(graphs.replayed(trace, links).sum())
        named, launched = by_name(trace, links, reference), graphs.matches(trace, links, reference)
        share = f"{launched} ({launched / n:.0%})"
        print(f"| {replay} | {candidate} | {'yes' if same else 'no'} | {n} | {named} | {share} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
