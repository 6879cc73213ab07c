"""Regenerate the CPU traces with memory events used by tests/test_memory.py.

    .venv/bin/python tests/data/memory/make_traces.py

Naive (eager matmul-softmax-dropout-matmul) and SDPA attention, fp32, B1 H2 D16, causal, at
S=64 and S=128, one training forward each, profiled on the CPU with profile_memory=True,
record_shapes=True, with_stack=True (CPU allocations are [memory] events with Device Type 0).
"""

import gzip
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
B, H, D = 1, 2, 16


class NaiveAttention(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.h, self.d = h, e // h
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(e, e, bias=False) for _ in range(4))
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        b, s, e = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        probs = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, e)
        return self.out_proj(out)


class SdpaAttention(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.h, self.d = h, e // h
        self.qkv = nn.Linear(e, 3 * e, bias=False)
        self.out_proj = nn.Linear(e, e, bias=False)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, e))


def main():
    torch.manual_seed(0)
    for impl, cls in (("naive", NaiveAttention), ("sdpa", SdpaAttention)):
        for s in (64, 128):
            mod = cls(H * D, H).train()
            x = torch.randn(B, s, H * D)
            mod(x)
            with profile(
                activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, profile_memory=True
            ) as p:
                out = mod(x)
                del out
            tmp = os.path.join(HERE, f"_{impl}.json")
            p.export_chrome_trace(tmp)
            with open(tmp) as f:
                data = json.load(f)
            os.remove(tmp)
            dst = os.path.join(HERE, f"cpu_{impl}_s{s}.json.gz")
            with gzip.GzipFile(dst, "wb", mtime=0) as f:
                f.write(json.dumps(data, separators=(",", ":")).encode())
            print(dst, os.path.getsize(dst), file=sys.stderr)


if __name__ == "__main__":
    main()
