"""The small GPT of the job recordings (validation/ddp_trace.py, validation/nccl_job.py): causal SDPA
self-attention, a GELU MLP, learned positions.

One model for every job so that the DDP, FSDP2, tensor-parallel and straggler traces differ only in how the
job runs it. ``split_qkv=True`` gives the attention separate ``q``/``k``/``v``/``o`` projections (what
``torch.distributed.tensor.parallel``'s column/row plans shard); otherwise one fused ``qkv`` and a ``proj``
(the layout of the traces recorded before). The attention takes its head count from the projection's
output width over the head dimension, so a tensor-parallel rank runs its own share of the heads.
``slow=True`` runs this copy's attention on SDPA's math backend (a straggler rank of ddp_trace.py).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    # the class name is what validation/tagging_accuracy.py reads as the attention module of these traces
    def __init__(self, d: int, h: int, slow: bool = False, split_qkv: bool = False):
        super().__init__()
        if d % h:
            raise ValueError(f"width {d} is not a multiple of the {h} heads")
        self.head_dim = d // h
        self.slow = slow
        self.split_qkv = split_qkv
        if split_qkv:
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        else:
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        hd = self.head_dim
        if self.split_qkv:
            q, k, v = (p(x).view(b, s, -1, hd).transpose(1, 2) for p in (self.q, self.k, self.v))
        else:
            q, k, v = self.qkv(x).view(b, s, 3, -1, hd).permute(2, 0, 3, 1, 4).unbind(0)
        if self.slow:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, s, -1)
        return self.o(y) if self.split_qkv else self.proj(y)


class Block(nn.Module):
    def __init__(self, d: int, h: int, slow: bool = False, split_qkv: bool = False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, h, slow, split_qkv)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, h: int, layers: int, slow: bool = False, split_qkv: bool = False):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)  # ``seq`` is the longest sequence the model takes
        self.h = nn.ModuleList(Block(d, h, slow, split_qkv) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))
