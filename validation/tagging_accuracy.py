"""Tagging precision and recall by time on the recorded traces, against module truth.

Truth for a GPU kernel: the CPU context that launched it lies inside an ``nn.Module`` of one of
the workload's attention classes (for a backward kernel: the forward op it differentiates does).
That context is read from the trace's own records (with_stack module scopes, autograd links),
independently of the tagger's heuristics. A CUDA-graph replay has no such records: its truth is
the eager trace's, kernel by kernel, and only when the two kernel sequences are name for name
identical (the replay of a captured step runs the captured kernels in the captured order).

    python validation/tagging_accuracy.py            # table for tests/data/modern and tests/data/ddp2
"""

from __future__ import annotations

import glob
import os
import re
import sys
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tb_attention_plugin.analyze import analyze_path  # noqa: E402
from tb_attention_plugin.options import Options  # noqa: E402
from tb_attention_plugin.trace.correlate import link  # noqa: E402
from tb_attention_plugin.trace.records import KERNEL, MODULE, load_trace  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
# the attention module classes of each recorded workload (validation/modern_workloads.py, ddp_trace.py)
ATTENTION_CLASSES = re.compile(
    r"^(FlexSelfAttention|LlamaAttention|DeepseekV3Attention|MLAttention|FP8Attention|"
    r"DecodeAttention|CausalSelfAttention)$"
)
# (name, trace dir, reference dir for --reference, truth dir when the trace's own records cannot give it)
CASES = [
    ("flex_causal_fwdbwd", "modern/flex_causal_fwdbwd", None, None),
    ("flex_swa_fwdbwd", "modern/flex_swa_fwdbwd", None, None),
    ("hf_llama_flex_fwdbwd", "modern/hf_llama_flex_fwdbwd", None, None),
    ("hf_deepseek_v3_fwdbwd", "modern/hf_deepseek_v3_fwdbwd", None, None),
    ("mla_moe_hand_fwdbwd", "modern/mla_moe_hand_fwdbwd", None, None),
    ("fp8_attn_fwd", "modern/fp8_attn_fwd", None, None),
    ("decode_graph_eager", "modern/decode_graph_eager", None, None),
    (
        "decode_graph_replay --reference eager",
        "modern/decode_graph_replay",
        "modern/decode_graph_eager",
        "modern/decode_graph_eager",
    ),
    ("decode_graph_replay (structure only)", "modern/decode_graph_replay", None, "modern/decode_graph_eager"),
    ("decode_graph_capture (own capture)", "modern/decode_graph_capture", None, "modern/decode_graph_eager"),
    ("ddp2_gpt_sdpa rank0", "ddp2/ddp2_gpt_sdpa/rank0", None, None),
    ("ddp2_gpt_sdpa rank1", "ddp2/ddp2_gpt_sdpa/rank1", None, None),
]


def trace_file(spec: str) -> str:
    """tests/data/<spec>/*.pt.trace.json.gz, or tests/data/<dir>/<prefix>*.pt.trace.json.gz."""
    path = os.path.join(DATA, spec)
    hits = (
        sorted(glob.glob(os.path.join(path, "*.pt.trace.json.gz")))
        if os.path.isdir(path)
        else sorted(glob.glob(path + "*.pt.trace.json.gz"))
    )
    if not hits:
        raise FileNotFoundError(spec)
    return hits[0]


def module_truth(path: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per GPU kernel in start order: names, truth (bool), durations."""
    t = load_trace(path)
    L = link(t)
    R, G = t.ranges, t.gpu
    is_att_mod = np.zeros(len(R["kind"]), dtype=bool)
    mods = np.flatnonzero(R["kind"] == MODULE)
    for r in mods.tolist():
        nm = t.strings[R["name"][r]]
        cls = re.sub(r"_\d+$", "", nm.split(":", 1)[1].strip() if ":" in nm else nm)
        is_att_mod[r] = bool(ATTENTION_CLASSES.match(cls))
    memo: dict[int, bool] = {}

    def inside(r: int) -> bool:
        if r < 0:
            return False
        if r in memo:
            return memo[r]
        v = bool(is_att_mod[r]) or any(is_att_mod[a] for a in L.ancestors(r))
        memo[r] = v
        return v

    ks = np.flatnonzero(G["kind"] == KERNEL)
    ks = ks[np.argsort(G["ts_ns"][ks], kind="stable")]
    truth = np.zeros(len(ks), dtype=bool)
    for i, k in enumerate(ks.tolist()):
        r = int(L.gpu_parent[k])
        if r < 0:
            continue
        br = int(L.backward_root[r])
        if br >= 0:
            r = int(L.forward_of[br])
        truth[i] = inside(r)
    return [t.strings[i] for i in G["name"][ks].tolist()], truth, G["dur"][ks].astype(float)


def measure(trace: str, reference: Optional[str], truth_from: Optional[str]) -> dict:
    rep = analyze_path(trace, Options(reference=reference))
    if rep.get("status") != "ok":
        raise RuntimeError(rep.get("error"))
    ks = sorted((k for k in rep["kernels"] if k["kind"] == "kernel"), key=lambda k: (k["ts"], k["id"]))
    names = [k["name"] for k in ks]
    tagged = np.array([bool(k["attention"]) for k in ks])
    dur = np.array([k["dur_us"] for k in ks], dtype=float)
    own_names, truth, _ = module_truth(trace)
    if own_names != names:
        raise RuntimeError(f"{trace}: kernel order differs between the report and the records")
    if truth_from:
        # the replayed kernels are the truth trace's, one for one (kernels the file launched
        # outside the graph, before the capture say, keep the truth of its own records)
        t_names, t_truth, _ = module_truth(truth_from)
        m = len(t_names)
        at = next((i for i in range(len(names) - m + 1) if names[i : i + m] == t_names), None)
        if at is None:
            raise RuntimeError(f"{trace}: kernel sequence differs from {truth_from}")
        truth = truth.copy()
        truth[at : at + m] = t_truth
    tp = float(dur[tagged & truth].sum())
    return {
        "precision": tp / float(dur[tagged].sum()) if tagged.any() else None,
        "recall": tp / float(dur[truth].sum()) if truth.any() else None,
        "attention_us": float(dur[truth].sum()),
        "gpu_us": float(dur.sum()),
        "kernels": len(ks),
        "false_positive_us": float(dur[tagged & ~truth].sum()),
        "missed_us": float(dur[~tagged & truth].sum()),
    }


def main() -> int:
    print("| trace | kernels | attention (truth) µs | GPU µs | precision | recall | false pos. µs | missed µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, tr, ref, truth in CASES:
        m = measure(trace_file(tr), trace_file(ref) if ref else None, trace_file(truth) if truth else None)
        print(
            f"| {name} | {m['kernels']} | {m['attention_us']:.0f} | {m['gpu_us']:.0f} | {m['precision']:.3f} | "
            f"{m['recall']:.3f} | {m['false_positive_us']:.1f} | {m['missed_us']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
