#!/usr/bin/env python3
"""Held-out traces for issue #40 (recorded 2026-12-08, after the replay and safe-advice changes):

* ``hf_gqa_amp_eager_train`` / ``hf_gqa_amp_sdpa_train`` — a small Llama (16 query heads over 4 KV
  heads) trained under ``torch.autocast(bf16)`` with fp32 weights (AMP), eager attention and its
  SDPA twin: rotary promotes q and k to fp32, so the eager matmuls get fp32 inputs that autocast
  casts to bf16 — the case a replay used to rebuild in fp32;
* ``bert_padded_fp16_sdpa`` — a BERT encoder in fp16 inference on SDPA with a key-padding mask,
  lengths uniform in 64..512 of 512: score-shaped once expanded, never causal.

    python3 validation/amp_workloads.py OUTDIR [--small]     # --small: CPU-sized, to test the script

Each workload writes ``OUTDIR/<name>/<name>.<ns>.pt.trace.json.gz`` (tensorboard_trace_handler) and
``OUTDIR/<name>/meta.json`` (shapes, the real token count, median step time of 10 CUDA-event steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def _llama(attn: str, small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    dev = "cuda" if not small else "cpu"
    hidden, heads, kv, layers, seq, batch = (1024, 16, 4, 2, 1024, 4) if not small else (64, 4, 2, 1, 32, 2)
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        num_hidden_layers=layers,
        vocab_size=8192 if not small else 256,
        max_position_embeddings=seq,
        attn_implementation=attn,
    )
    model = LlamaForCausalLM(cfg).to(dev)  # fp32 weights: AMP
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    amp = torch.bfloat16

    def step() -> None:
        with torch.autocast(dev, dtype=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv,
        "layers": layers,
        "seq": seq,
        "batch": batch,
        "autocast": "bf16",
        "attn_implementation": attn,
    }


def _bert_padded(small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    from transformers import BertConfig, BertModel

    dev = "cuda" if not small else "cpu"
    hidden, heads, layers, seq, batch = (512, 8, 6, 512, 32) if not small else (64, 4, 1, 32, 4)
    cfg = BertConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_hidden_layers=layers,
        intermediate_size=hidden * 4,
        max_position_embeddings=seq,
        attn_implementation="sdpa",
    )
    dt = torch.float16 if not small else torch.float32
    model = BertModel(cfg).to(dev, dt).eval()
    g = torch.Generator().manual_seed(0)
    lo = 64 if not small else 8
    lengths = torch.randint(lo, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.long).to(dev)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)

    def step() -> None:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    return step, {
        "hidden": hidden,
        "heads": heads,
        "layers": layers,
        "seq": seq,
        "batch": batch,
        "dtype": "fp16",
        "real_tokens": int(lengths.sum()),
        "token_slots": batch * seq,
    }


WORKLOADS: dict[str, Callable[[bool], tuple[Callable[[], None], dict[str, Any]]]] = {
    "hf_gqa_amp_eager_train": lambda small: _llama("eager", small),
    "hf_gqa_amp_sdpa_train": lambda small: _llama("sdpa", small),
    "bert_padded_fp16_sdpa": _bert_padded,
}


def _step_ms(step: Callable[[], None], cuda: bool) -> float:
    times = []
    for _ in range(10):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            import time

            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def record(name: str, out: str, small: bool) -> None:
    step, meta = WORKLOADS[name](small)
    cuda = not small
    for _ in range(3):  # warm-up outside the profiler (cuBLAS/cuDNN plans)
        step()
    if cuda:
        torch.cuda.synchronize()
    meta["step_ms_median"] = _step_ms(step, cuda)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(
        activities=acts,
        schedule=schedule(wait=1, warmup=1, active=2),
        record_shapes=True,
        with_stack=True,
        on_trace_ready=tensorboard_trace_handler(d, worker_name=name, use_gzip=True),
    ) as p:
        for _ in range(4):
            step()
            p.step()
    meta.update(device=torch.cuda.get_device_name(0) if cuda else "cpu", torch=torch.__version__)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: {meta}", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    for name in WORKLOADS:
        if a.only and name not in a.only.split(","):
            continue
        try:
            record(name, a.out, a.small)
        except Exception as e:  # noqa: BLE001 - one workload's failure never stops the others
            print(f"{name}: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
