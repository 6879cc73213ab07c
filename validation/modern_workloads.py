"""Attention as teams run it in late 2026 (issue #12): FlexAttention, HF Llama on flex, DeepSeek-V3-style MLA + MoE,
FP8 `_scaled_mm` projections, and a GQA decode step replayed from a CUDA graph next to the same step run eager.

Same contract as ``workloads.py`` (a builder returning ``Workload(step, meta)``); ``workloads.py`` appends these
specs under the family ``modern`` so ``trace_workloads.py``, ``ncu_step.py`` and ``run_all.py`` treat them like the
others.  Every attention computation sits inside an ``nn.Module`` whose class name contains ``Attention`` (or is HF's
attention class), so the module scopes of an eager trace give the ground truth the tagger is scored against.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from workloads import Spec, Workload, _cuda, _dt_name, _rand, _sync, _train_or_infer


def _dtype(device: str, small: bool) -> torch.dtype:
    return torch.bfloat16 if _cuda(device) else torch.float32


# ---------------------------------------------------------------------------
# FlexAttention
# ---------------------------------------------------------------------------


class FlexSelfAttention(nn.Module):
    """qkv projection -> block mask (per call, as with per-batch document masks) -> compiled flex_attention -> out."""

    def __init__(self, embed: int, heads: int, window: int, compiled_flex: Any):
        super().__init__()
        self.h, self.d, self.window = heads, embed // heads, window
        self.qkv = nn.Linear(embed, 3 * embed, bias=False)
        self.out_proj = nn.Linear(embed, embed, bias=False)
        self.flex = compiled_flex

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import create_block_mask

        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        w = self.window

        def causal(b_, h_, qi, ki):
            return qi >= ki

        def sliding(b_, h_, qi, ki):
            return (qi >= ki) & (qi - ki < w)

        mask = create_block_mask(sliding if w else causal, None, None, s, s, device=x.device)
        o = self.flex(q, k, v, block_mask=mask)
        return self.out_proj(o.transpose(1, 2).reshape(b, s, e))


def build_flex(device, small, *, window=0, B=4, H=16, S=2048, D=64, bwd=True):
    from torch.nn.attention.flex_attention import flex_attention

    if small:
        B, H, S, D = 1, 2, 256, 16
    dt = _dtype(device, small)
    cflex = torch.compile(flex_attention, dynamic=False)
    mod = FlexSelfAttention(H * D, H, window, cflex).to(device=device, dtype=dt).train(bwd)
    x = _rand((B, S, H * D), dt, device, requires_grad=bwd)
    step = _train_or_infer(mod, lambda: mod(x), bwd, (x,))

    meta = dict(
        kind="flex",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=_dt_name(dt),
        causal=True,
        window=window or None,
        mask=f"sliding window {window}" if window else "causal",
        pass_="fwd+bwd" if bwd else "fwd",
        module="FlexSelfAttention",
        note="create_block_mask runs inside the module every call; flex_attention compiled alone",
    )
    return Workload("", step, meta, keep=[mod, x, cflex])


def build_hf_llama_flex(device, small, *, bwd=True, hidden=1024, heads=16, kv_heads=4, seq=1024, batch=2, layers=2):
    from transformers import LlamaConfig, LlamaModel

    inter = int(hidden * 2.75)
    if small:
        hidden, heads, kv_heads, seq, batch, inter = 64, 4, 2, 128, 1, 128
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        vocab_size=256,
        max_position_embeddings=max(seq, 4096),
        attn_implementation="flex_attention",
        use_cache=False,
    )
    dt = _dtype(device, small)
    model = LlamaModel(cfg).to(device=device, dtype=dt).train(bwd)
    emb = _rand((batch, seq, hidden), dt, device, requires_grad=bwd)

    def fwd():
        return model(inputs_embeds=emb, use_cache=False).last_hidden_state

    step = _train_or_infer(model, fwd, bwd, (emb,))

    import transformers

    meta = dict(
        kind="hf_llama",
        attn_implementation=model.config._attn_implementation,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        seq=seq,
        batch=batch,
        layers=layers,
        dtype=_dt_name(dt),
        pass_="fwd+bwd" if bwd else "fwd",
        causal=True,
        module="LlamaModel/LlamaDecoderLayer/LlamaAttention",
        transformers=transformers.__version__,
    )
    return Workload("", step, meta, keep=[model, emb])


# ---------------------------------------------------------------------------
# MLA + MoE (DeepSeek-V3 style)
# ---------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype) * self.weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class MLAttention(nn.Module):
    """Multi-head latent attention as in DeepSeek-V2/V3: q down (q_lora) -> norm -> q up to heads x (nope + rope);
    kv down to (kv_lora + rope) -> split -> norm -> kv up to heads x (nope + v); rope on the rope part only; SDPA
    with q/k head dim nope+rope and v head dim v; out projection."""

    def __init__(self, hidden: int, heads: int, q_lora: int, kv_lora: int, nope: int, rope: int, vdim: int):
        super().__init__()
        self.h, self.nope, self.rope, self.vdim, self.kv_lora = heads, nope, rope, vdim, kv_lora
        self.q_a_proj = nn.Linear(hidden, q_lora, bias=False)
        self.q_a_layernorm = RMSNorm(q_lora)
        self.q_b_proj = nn.Linear(q_lora, heads * (nope + rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, kv_lora + rope, bias=False)
        self.kv_a_layernorm = RMSNorm(kv_lora)
        self.kv_b_proj = nn.Linear(kv_lora, heads * (nope + vdim), bias=False)
        self.o_proj = nn.Linear(heads * vdim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, s, self.h, self.nope + self.rope)
        q = q.transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_pe = ckv.split([self.kv_lora, self.rope], dim=-1)
        k_pe = k_pe.view(b, s, 1, self.rope).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(b, s, self.h, self.nope + self.vdim).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.vdim], dim=-1)
        q_pe, k_pe = _rope(q_pe, cos, sin), _rope(k_pe, cos, sin)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(-1, self.h, -1, -1)), dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.h * self.vdim))


class Expert(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TopKRouter(nn.Module):
    """Sigmoid scores + bias-corrected top-k as in DeepSeek-V3 (no group limit here)."""

    def __init__(self, hidden: int, experts: int, k: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, hidden) * hidden**-0.5)
        self.register_buffer("e_score_correction_bias", torch.zeros(experts))
        self.k = k

    def forward(self, x: torch.Tensor):
        scores = torch.sigmoid(F.linear(x.float(), self.weight.float()))
        idx = torch.topk(scores + self.e_score_correction_bias, self.k, dim=-1).indices
        w = scores.gather(-1, idx)
        return idx, (w / w.sum(-1, keepdim=True)).to(x.dtype)


class MoE(nn.Module):
    """Routed experts via sort -> gather -> per-expert GEMMs -> weighted scatter-add, plus one shared expert."""

    def __init__(self, hidden: int, inter: int, experts: int, k: int):
        super().__init__()
        self.gate = TopKRouter(hidden, experts, k)
        self.experts = nn.ModuleList(Expert(hidden, inter) for _ in range(experts))
        self.shared_experts = Expert(hidden, inter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        idx, w = self.gate(t)
        flat = idx.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        tok = order // idx.shape[1]
        xs = t.index_select(0, tok)
        ws = w.flatten().index_select(0, order).unsqueeze(-1)
        out = torch.zeros_like(t)
        start = 0
        for e, n in enumerate(counts):
            if n:
                y = self.experts[e](xs[start : start + n]) * ws[start : start + n]
                out = out.index_add(0, tok[start : start + n], y)
            start += n
        return (out + self.shared_experts(t)).view(shape)


class DecoderLayerMLA(nn.Module):
    def __init__(self, hidden, heads, q_lora, kv_lora, nope, rope, vdim, inter, experts, k, moe: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = MLAttention(hidden, heads, q_lora, kv_lora, nope, rope, vdim)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MoE(hidden, inter, experts, k) if moe else Expert(hidden, 4 * inter)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def _rope_tables(seq: int, dim: int, device, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    f = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    e = torch.cat((f, f), dim=-1)
    return e.cos().to(dtype), e.sin().to(dtype)


def build_mla_moe_hand(device, small, *, bwd=True, hidden=1024, heads=16, layers=2, seq=1024, batch=2):
    q_lora, kv_lora, nope, rope, vdim, inter, experts, k = 384, 256, 64, 32, 64, 256, 16, 4
    if small:
        hidden, heads, seq, batch, q_lora, kv_lora, nope, rope, vdim, inter, experts, k = (
            64,
            2,
            32,
            1,
            32,
            16,
            8,
            8,
            8,
            16,
            4,
            2,
        )
    dt = _dtype(device, small)
    mods = (
        nn.ModuleList(
            DecoderLayerMLA(hidden, heads, q_lora, kv_lora, nope, rope, vdim, inter, experts, k, moe=i > 0)
            for i in range(layers)
        )
        .to(device=device, dtype=dt)
        .train(bwd)
    )
    cos, sin = _rope_tables(seq, rope, device, dt)
    x = _rand((batch, seq, hidden), dt, device, requires_grad=bwd)

    def fwd():
        h = x
        for m in mods:
            h = m(h, cos, sin)
        return h

    step = _train_or_infer(mods, fwd, bwd, (x,))

    meta = dict(
        kind="mla_moe",
        impl="hand-written",
        hidden=hidden,
        heads=heads,
        layers=layers,
        seq=seq,
        batch=batch,
        q_lora_rank=q_lora,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=vdim,
        moe_intermediate=inter,
        n_routed_experts=experts,
        top_k=k,
        n_shared_experts=1,
        dtype=_dt_name(dt),
        pass_="fwd+bwd" if bwd else "fwd",
        causal=True,
        module="DecoderLayerMLA/MLAttention (attention), MoE/TopKRouter/Expert (not attention)",
    )
    return Workload("", step, meta, keep=[mods, x, cos, sin])


def build_hf_deepseek_v3(device, small, *, bwd=True, hidden=1024, heads=16, layers=2, seq=1024, batch=2):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    kw = dict(
        vocab_size=1024,
        hidden_size=hidden,
        intermediate_size=2048,
        moe_intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        n_shared_experts=1,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        q_lora_rank=384,
        kv_lora_rank=256,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
        max_position_embeddings=4096,
        use_cache=False,
        attn_implementation="sdpa",
    )
    if small:
        kw.update(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=128,
            moe_intermediate_size=16,
            num_attention_heads=2,
            num_key_value_heads=2,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
        )
        seq, batch = 32, 1
    cfg = DeepseekV3Config(**kw)
    dt = _dtype(device, small)
    model = DeepseekV3ForCausalLM(cfg).to(device=device, dtype=dt).train(bwd)
    ids = torch.randint(0, kw["vocab_size"], (batch, seq), device=device)

    def fwd():
        return model(input_ids=ids, use_cache=False).logits

    step = _train_or_infer(model, fwd, bwd)

    import transformers

    meta = dict(
        kind="mla_moe",
        impl="transformers DeepseekV3ForCausalLM",
        config=kw,
        seq=seq,
        batch=batch,
        attn_implementation=model.config._attn_implementation,
        dtype=_dt_name(dt),
        pass_="fwd+bwd" if bwd else "fwd",
        causal=True,
        transformers=transformers.__version__,
        module="DeepseekV3DecoderLayer/DeepseekV3Attention (attention), DeepseekV3MoE (not attention)",
    )
    return Workload("", step, meta, keep=[model, ids])


# ---------------------------------------------------------------------------
# FP8 projections
# ---------------------------------------------------------------------------

E4M3_MAX = 448.0


class FP8Linear(nn.Module):
    """Per-tensor dynamic scaling: amax -> scale -> cast to e4m3 for the activation; weight pre-quantised once
    (as inference stacks store it); ``torch._scaled_mm`` with bf16 output."""

    def __init__(self, fin: int, fout: int, device, dtype):
        super().__init__()
        w = torch.randn(fout, fin, device=device, dtype=torch.float32) * fin**-0.5
        self.use_fp8 = str(device).startswith("cuda")
        if self.use_fp8:
            ws = E4M3_MAX / w.abs().amax()
            self.register_buffer("w8", (w * ws).to(torch.float8_e4m3fn))
            self.register_buffer("w_scale_inv", (1.0 / ws).reshape(()).float())
        else:  # CPU smoke test: same module structure, plain matmul
            self.register_buffer("w8", w.to(dtype))
            self.register_buffer("w_scale_inv", torch.ones((), device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if not self.use_fp8:
            return (x2 @ self.w8.t()).view(*shape[:-1], -1)
        amax = x2.abs().amax().float().clamp(min=1e-12)
        scale = E4M3_MAX / amax
        x8 = (x2.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(
            x8, self.w8.t(), scale_a=(1.0 / scale).reshape(()), scale_b=self.w_scale_inv, out_dtype=torch.bfloat16
        )
        return y.view(*shape[:-1], -1)


class FP8Attention(nn.Module):
    def __init__(self, embed: int, heads: int, device, dtype):
        super().__init__()
        self.h, self.d = heads, embed // heads
        self.q_proj = FP8Linear(embed, embed, device, dtype)
        self.k_proj = FP8Linear(embed, embed, device, dtype)
        self.v_proj = FP8Linear(embed, embed, device, dtype)
        self.o_proj = FP8Linear(embed, embed, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, e = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, e))


def build_fp8_attn(device, small, *, B=4, S=2048, H=16, D=128):
    if small:
        B, S, H, D = 1, 32, 2, 16
    dt = _dtype(device, small)
    mod = FP8Attention(H * D, H, device, dt).eval()
    x = _rand((B, S, H * D), dt, device)

    def step():
        with torch.no_grad():
            return mod(x)

    meta = dict(
        kind="fp8_attention",
        B=B,
        S=S,
        H=H,
        D=D,
        dtype="bf16 activations, e4m3 GEMM inputs, bf16 out",
        scaling="per-tensor dynamic (amax) for activations, static for weights",
        causal=True,
        pass_="fwd",
        module="FP8Attention/FP8Linear",
    )
    return Workload("", step, meta, keep=[mod, x])


# ---------------------------------------------------------------------------
# GQA decode step: eager, CUDA-graph replay, CUDA-graph capture
# ---------------------------------------------------------------------------


class DecodeAttention(nn.Module):
    """One-token GQA attention over a static KV cache: q/k/v proj, rope, index_copy_ into the cache, SDPA."""

    def __init__(self, hidden, heads, kv_heads, head_dim, max_len, batch, device, dtype):
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.register_buffer("k_cache", torch.randn(batch, kv_heads, max_len, head_dim, device=device, dtype=dtype))
        self.register_buffer("v_cache", torch.randn(batch, kv_heads, max_len, head_dim, device=device, dtype=dtype))

    def forward(self, x, pos, cos, sin):
        b = x.shape[0]
        q = self.q_proj(x).view(b, 1, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, 1, self.kvh, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, 1, self.kvh, self.d).transpose(1, 2)
        c, s = cos.index_select(0, pos), sin.index_select(0, pos)
        q, k = _rope(q, c, s), _rope(k, c, s)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        o = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, 1, self.h * self.d))


class DecodeMLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecodeLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, max_len, batch, device, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = DecodeAttention(hidden, heads, kv_heads, head_dim, max_len, batch, device, dtype)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = DecodeMLP(hidden, int(hidden * 2.75))

    def forward(self, x, pos, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), pos, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecodeModel(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, head_dim, max_len, batch, device, dtype):
        super().__init__()
        self.layers = nn.ModuleList(
            DecodeLayer(hidden, heads, kv_heads, head_dim, max_len, batch, device, dtype) for _ in range(layers)
        )
        self.norm = RMSNorm(hidden)
        cos, sin = _rope_tables(max_len, head_dim, device, dtype)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x, pos):
        for layer in self.layers:
            x = layer(x, pos, self.cos, self.sin)
        return self.norm(x)


def build_decode_graph(
    device, small, *, mode, layers=4, hidden=2048, heads=16, kv_heads=4, head_dim=128, max_len=4096, batch=8
):
    """mode: eager (the reference), replay (graph captured once at build, step = replay), capture (step captures a
    fresh graph then replays it: the capture-time trace)."""
    if small:
        layers, hidden, heads, kv_heads, head_dim, max_len, batch = 2, 64, 4, 2, 16, 64, 2
    dt = _dtype(device, small)
    torch.manual_seed(0)
    model = (
        DecodeModel(layers, hidden, heads, kv_heads, head_dim, max_len, batch, device, dt)
        .to(device=device, dtype=dt)
        .eval()
    )
    x = torch.randn(batch, 1, hidden, device=device, dtype=dt)
    pos = torch.tensor([max_len // 2], device=device, dtype=torch.long)
    cuda = str(device).startswith("cuda")

    def eager():
        with torch.no_grad():
            return model(x, pos)

    keep: list[Any] = [model, x, pos]
    if mode == "eager" or not cuda:
        step = eager
    else:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                eager()
        torch.cuda.current_stream().wait_stream(s)
        _sync(device)
        pool = torch.cuda.graph_pool_handle()

        def capture():
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                eager()
            return g

        if mode == "replay":
            g = capture()
            keep.append(g)

            def step():
                g.replay()
        else:  # capture

            def step():
                g2 = capture()
                g2.replay()
                keep.append(g2)
                if len(keep) > 8:
                    del keep[3:-2]

    meta = dict(
        kind="decode_graph",
        mode=mode if cuda else "eager (cpu)",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_len=max_len,
        batch=batch,
        q_len=1,
        dtype=_dt_name(dt),
        pass_="fwd",
        module="DecodeModel/DecodeLayer/DecodeAttention",
        graph="torch.cuda.CUDAGraph" if cuda else None,
        # how a user analyses the replay: tb-attention analyze REPLAY --reference EAGER
        reference_workload="decode_graph_eager" if mode == "replay" else None,
    )
    return Workload("", step, meta, keep=keep)


def specs() -> list[Spec]:
    s: list[Spec] = []

    def add(name, builder, desc, prio, needs_cuda=True, **kw):
        s.append(Spec(name, "modern", builder, kw, desc, needs_cuda=needs_cuda, ncu_priority=prio))

    add(
        "decode_graph_eager",
        build_decode_graph,
        "GQA decode step, 4 layers hidden2048 16/4 heads D128 KV4096 B8 bf16, eager (reference)",
        3,
        mode="eager",
    )
    add(
        "decode_graph_replay",
        build_decode_graph,
        "the same decode step captured once in a CUDA graph, profiled during replay",
        3,
        mode="replay",
    )
    add("flex_causal_fwdbwd", build_flex, "compiled flex_attention causal, B4 H16 S2048 D64 bf16 fwd+bwd", 5)
    add(
        "flex_swa_fwdbwd",
        build_flex,
        "compiled flex_attention causal sliding window 256, B4 H16 S2048 D64 bf16 fwd+bwd",
        6,
        window=256,
    )
    add(
        "fp8_attn_fwd",
        build_fp8_attn,
        "attention block with e4m3 torch._scaled_mm q/k/v/o projections "
        "(dynamic per-tensor amax scaling), SDPA causal, B4 S2048 H16 D128, fwd",
        4,
    )
    add(
        "mla_moe_hand_fwdbwd",
        build_mla_moe_hand,
        "hand-written DeepSeek-V3-style MLA + top-4-of-16 MoE, 2 layers hidden1024 seq1024 B2 bf16 fwd+bwd",
        8,
    )
    add(
        "hf_deepseek_v3_fwdbwd",
        build_hf_deepseek_v3,
        "transformers DeepseekV3ForCausalLM small config "
        "(2 layers, 1 dense + 1 MoE, MLA q_lora384 kv_lora256), seq1024 B2 bf16 sdpa fwd+bwd",
        9,
    )
    add(
        "hf_llama_flex_fwdbwd",
        build_hf_llama_flex,
        "transformers LlamaModel 2 layers hidden1024 16/4 heads "
        "seq1024 B2 bf16 attn_implementation=flex_attention fwd+bwd",
        7,
    )
    add(
        "decode_graph_capture",
        build_decode_graph,
        "the same decode step: capture a fresh CUDA graph and replay it inside the profiled step (capture-time trace)",
        60,
        mode="capture",
    )
    return s
