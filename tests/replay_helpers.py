"""Helpers of the replay tests: replay results as the emitted script writes them (with chosen
times), and a synthetic trace of a jagged (varlen) SDPA call."""

from __future__ import annotations

import json
import os
from typing import Optional

from synth import BF16, SynthTrace

FLASH_VARLEN_KERNEL = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false>>"


def calls_of(trace_path: str) -> list[dict]:
    from tb_attention_plugin.analyze import analyze_path

    rep = analyze_path(str(trace_path))
    assert rep["status"] == "ok", rep
    return rep["replay"]["calls"]


def fake_replay(
    trace_path,
    times: dict[str, tuple[float, Optional[float]]],
    device: str = "NVIDIA H200",
    scaled_down: bool = False,
    name: Optional[str] = None,
    check: str = "ok",
) -> str:
    """Write ``<trace>.replay.json`` beside the trace: each backend in ``times`` ran in (forward,
    backward) µs of kernel time per call; the others refused."""
    calls = []
    for c in calls_of(trace_path):
        bs = []
        for be in c["backends"]:
            if be in times:
                f, b = times[be]
                rec = {
                    "backend": be,
                    "status": "ok",
                    "reason": None,
                    "forward": {"time_us": f * 1.05, "kernel_us": f, "times_us": [f * 1.05], "inner": 1},
                    "backward": {"time_us": b * 1.05, "kernel_us": b} if b is not None else None,
                    "error_vs_math": {"forward": 0.004, "backward": 0.006 if b is not None else None},
                    "check": "reference" if be == "math" else check,
                }
            else:
                rec = {"backend": be, "status": "refused", "reason": f"{be}: not supported for these inputs"}
            bs.append(rec)
        calls.append({"id": c["id"], "kind": c["kind"], "trace_backend": c["trace_backend"], "backends": bs})
    out = {
        "schema": 1,
        "tool": "tb-attention replay",
        "trace": os.path.basename(str(trace_path)),
        "scaled_down": scaled_down,
        "settings": {"device": "cuda", "warmup": 3, "repeats": 10},
        "device": {"name": device},
        "torch": "2.11.0+cu130",
        "calls": calls,
    }
    path = os.path.join(os.path.dirname(str(trace_path)), name or os.path.basename(str(trace_path)) + ".replay.json")
    with open(path, "w") as f:
        json.dump(out, f)
    return path


def varlen_trace(path, sequences: int = 4, total: int = 3000, longest: int = 1500, h: int = 16, d: int = 64) -> str:
    """One scaled_dot_product_attention call on nested (jagged) tensors, as PyTorch runs it: the flash
    kernel on the packed values [T, H, D] with sequence offsets [B + 1]."""
    t = SynthTrace()
    with t.step(1):
        with t.module("JaggedAttention_0"):
            with t.op("aten::scaled_dot_product_attention", dims=[[], [], [], [], [], [], [], []]):
                qd = [total, h, d]
                st = [h * d, d, 1]
                with t.op(
                    "aten::_flash_attention_forward",
                    dims=[qd, qd, qd, [sequences + 1], [sequences + 1], [], [], [], [], [], [], [], [], [], []],
                    types=[BF16] * 3 + ["int", "int"] + ["Scalar"] * 5 + ["Scalar"] + [""] * 4,
                    concrete=["", "", "", "", "", str(longest), str(longest), "0.", "True", "False", "0.125"]
                    + [""] * 4,
                    strides=[st, st, st, [1], [1]] + [[] for _ in range(10)],
                ):
                    t.kernel(FLASH_VARLEN_KERNEL, dur=250.0)
    return t.write(path)


def amp_trace(path) -> str:
    """An HF-style eager attention call recorded under torch.autocast(bf16): the QK^T matmul gets fp32
    inputs (rotary promoted q and k) and runs its bmm in bf16, as the trace's ops say."""
    from synth import BF16, F32, SynthTrace

    t = SynthTrace()
    q, kt, s, v = [2, 8, 256, 64], [2, 8, 64, 256], [2, 8, 256, 256], [2, 8, 256, 64]
    with t.module("LlamaAttention_0"):
        with t.op("aten::matmul", dims=[q, kt], types=[F32, F32]):
            with t.op("aten::_to_copy", dims=[q], types=[F32]):
                t.kernel("void at::native::vectorized_elementwise_kernel<4, bfloat16_copy_kernel_cuda>", dur=2)
            with t.op("aten::bmm", dims=[[16, 256, 64], [16, 64, 256]], types=[BF16, BF16]):
                t.kernel("nvjet_tst_64x64_64x4_1x1_v_bz_TNN", dur=5)
        with t.op("aten::_softmax", dims=[s, [], []], types=[BF16, "Scalar", "Scalar"], concrete=["", "-1", "False"]):
            t.kernel("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8>", dur=3)
        with t.op("aten::matmul", dims=[s, v], types=[BF16, BF16]):
            with t.op("aten::bmm", dims=[[16, 256, 256], [16, 256, 64]], types=[BF16, BF16]):
                t.kernel("nvjet_tst_64x64_64x4_1x1_v_bz_NNN", dur=5)
    return t.write(path)
