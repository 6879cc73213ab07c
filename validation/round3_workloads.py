"""Round 3 of the validation set (issues #18, #19, #23): what the earlier recordings lack.

cuDNN SDPA backward (pre/main/post pass), flash at S=8192, jagged (nested-tensor) SDPA, split-KV GQA decode,
Inductor kernels (fused softmax, fused elementwise chains, a compiled KV-cache decode step with and without CUDA
graphs), FlexAttention with a document mask and its block counts, and eager models whose attention uses rolls and
broadcast biases (Swin window attention, T5 relative-position bias, additive/Bahdanau attention).

Same contract as ``workloads.py``; ``workloads.py`` appends these specs under the family ``round3``.  Every attention
computation sits in an ``nn.Module`` whose class name contains ``Attention`` (module truth for the tagger).  The
builders are also used by ``twins.py`` (issue #19's problem/fix runs), so the twins and the ncu rows share code.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from modern_workloads import DecodeModel, _dtype, _rope, build_decode_graph

from workloads import Spec, Workload, _cuda, _dt_name, _rand, _train_or_infer, _zero_grads, sdpa_kernel_ctx

# ---------------------------------------------------------------------------
# SDPA inside a module: backends, long sequence, split-KV decode, GQA layouts, masks
# ---------------------------------------------------------------------------


class SdpaCoreAttention(nn.Module):
    """F.scaled_dot_product_attention on given q/k/v under a chosen backend (None: PyTorch picks).

    ``kv_layout``: "gqa" passes fewer K/V heads with enable_gqa=True; "repeat_kv" expands them first as HF's
    ``repeat_kv`` does (expand + reshape: a copy).  ``pad_to``: zero-pad the head dim to this size before SDPA and
    slice the output back (the head-dim padding fix), keeping the softmax scale of the true head dim."""

    def __init__(self, backend: Optional[str], causal: bool, kv_layout: str = "same", pad_to: int = 0, p: float = 0.0):
        super().__init__()
        self.backend, self.causal, self.kv_layout, self.pad_to, self.p = backend, causal, kv_layout, pad_to, p

    def forward(self, q, k, v, mask=None):
        d = q.shape[-1]
        gqa = self.kv_layout == "gqa" and q.shape[1] != k.shape[1]
        if self.kv_layout == "repeat_kv" and q.shape[1] != k.shape[1]:
            rep = q.shape[1] // k.shape[1]
            b, kvh, s, dd = k.shape
            k = k[:, :, None].expand(b, kvh, rep, s, dd).reshape(b, kvh * rep, s, dd)
            v = v[:, :, None].expand(b, kvh, rep, s, dd).reshape(b, kvh * rep, s, dd)
        if self.pad_to and self.pad_to > d:
            q, k, v = (F.pad(t, (0, self.pad_to - d)) for t in (q, k, v))
        kw: dict[str, Any] = dict(dropout_p=self.p if self.training else 0.0, scale=1.0 / math.sqrt(d))
        if mask is not None:
            kw["attn_mask"] = mask
        else:
            kw["is_causal"] = self.causal
        if gqa:
            kw["enable_gqa"] = True
        with sdpa_kernel_ctx(self.backend):
            o = F.scaled_dot_product_attention(q, k, v, **kw)
        return o[..., :d] if self.pad_to and self.pad_to > d else o


def build_sdpa_core(
    device,
    small,
    *,
    backend,
    B=2,
    H=16,
    KVH=0,
    S=4096,
    Sq=0,
    D=128,
    causal=True,
    bwd=True,
    dtype="bf16",
    kv_layout="same",
    pad_to=0,
    mask="none",
    window=0,
):
    """q [B,H,Sq,D], k/v [B,KVH,S,D] (KVH=0: H; Sq=0: S).  mask: none | additive_causal (a float causal mask) |
    sliding (bool causal & window) | lower_right (torch.nn.attention.bias.causal_lower_right)."""
    KVH, Sq = KVH or H, Sq or S
    if small:
        B, H, KVH, S, Sq, D = 1, 4, (2 if KVH < H else 4), 64, (1 if Sq < S else 64), 16
        Sq = min(Sq, S) if Sq != 1 else 1
        window = min(window, 16)
        pad_to = 24 if pad_to else 0
    if not _cuda(device):
        backend = None
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    if not _cuda(device) and dt != torch.float32:
        dt = torch.float32
    mod = SdpaCoreAttention(backend, causal, kv_layout, pad_to)
    q = _rand((B, H, Sq, D), dt, device, bwd)
    k = _rand((B, KVH, S, D), dt, device, bwd)
    v = _rand((B, KVH, S, D), dt, device, bwd)
    m = None
    if mask == "additive_causal":
        m = torch.zeros(Sq, S, dtype=dt, device=device).masked_fill(
            torch.ones(Sq, S, dtype=torch.bool, device=device).triu(1 + S - Sq), float("-inf")
        )
    elif mask == "sliding":
        i = torch.arange(Sq, device=device)[:, None] + (S - Sq)
        j = torch.arange(S, device=device)[None]
        m = (j <= i) & (i - j < window)
    elif mask == "lower_right":
        from torch.nn.attention.bias import causal_lower_right

        m = causal_lower_right(Sq, S)
    step = _train_or_infer(mod, lambda: mod(q, k, v, m), bwd, (q, k, v))
    meta = dict(
        kind="sdpa_module",
        backend=backend or "default",
        B=B,
        H=H,
        KVH=KVH,
        q_len=Sq,
        kv_len=S,
        D=D,
        padded_head_dim=pad_to or None,
        dtype=_dt_name(dt),
        causal=causal if mask == "none" else None,
        mask=mask,
        window=window or None,
        kv_layout=kv_layout,
        gqa=H != KVH,
        pass_="fwd+bwd" if bwd else "fwd",
        module="SdpaCoreAttention",
    )
    return Workload("", step, meta, keep=[mod, q, k, v, m])


class BlockAttention(nn.Module):
    """A small attention block: qkv projection -> SDPA (backend chosen) -> out projection."""

    def __init__(self, embed: int, heads: int, backend: Optional[str], causal=True, pad_to=0, p=0.0):
        super().__init__()
        self.h, self.d = heads, embed // heads
        self.qkv = nn.Linear(embed, 3 * embed, bias=False)
        self.o_proj = nn.Linear(embed, embed, bias=False)
        self.core = SdpaCoreAttention(backend, causal, pad_to=pad_to, p=p)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        return self.o_proj(self.core(q, k, v).transpose(1, 2).reshape(b, s, e))


def build_block(device, small, *, backend, B=2, H=16, S=4096, D=128, bwd=True, dtype="bf16", pad_to=0):
    if small:
        B, H, S, D = 1, 2, 64, 16
        pad_to = 24 if pad_to else 0
    if not _cuda(device):
        backend = None
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype] if _cuda(device) else torch.float32
    mod = BlockAttention(H * D, H, backend, pad_to=pad_to).to(device=device, dtype=dt).train(bwd)
    x = _rand((B, S, H * D), dt, device, bwd)
    step = _train_or_infer(mod, lambda: mod(x), bwd, (x,))
    meta = dict(
        kind="attention_block",
        backend=backend or "default",
        B=B,
        H=H,
        S=S,
        D=D,
        padded_head_dim=pad_to or None,
        dtype=_dt_name(dt),
        causal=True,
        pass_="fwd+bwd" if bwd else "fwd",
        module="BlockAttention/SdpaCoreAttention",
    )
    return Workload("", step, meta, keep=[mod, x])


# ---------------------------------------------------------------------------
# jagged (nested tensor) SDPA
# ---------------------------------------------------------------------------

JAGGED_LENGTHS = [512, 896, 1280, 1664, 2048, 2432, 2816, 3072]


class JaggedAttention(nn.Module):
    """qkv projection of a jagged nested tensor [B, j, E] -> SDPA on [B, H, j, D] (flash varlen with cu_seqlens on
    CUDA) -> out projection."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.h, self.d = heads, embed // heads
        self.q_proj = nn.Linear(embed, embed, bias=False)
        self.k_proj = nn.Linear(embed, embed, bias=False)
        self.v_proj = nn.Linear(embed, embed, bias=False)
        self.o_proj = nn.Linear(embed, embed, bias=False)

    def forward(self, x):
        b = x.size(0)

        def heads(t):
            return t.unflatten(-1, [self.h, self.d]).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.o_proj(o.transpose(1, 2).flatten(-2)) if b else o


def build_jagged(device, small, *, H=16, D=64, bwd=False, lengths=None):
    lens = list(lengths or JAGGED_LENGTHS)
    if small:
        H, D, lens = 2, 16, [8, 24, 40]
    dt = torch.bfloat16 if _cuda(device) else torch.float32
    E = H * D
    mod = JaggedAttention(E, H).to(device=device, dtype=dt).train(bwd)
    x = torch.nested.nested_tensor(
        [torch.randn(n, E) for n in lens], layout=torch.jagged, device=device, dtype=dt, requires_grad=bwd
    )
    state: dict[str, Any] = {}

    def fwd():
        return mod(x)

    if bwd:

        def step():
            _zero_grads(mod, x)
            out = fwd().values()
            g = state.get("g")
            if g is None:
                g = state["g"] = torch.randn_like(out)
            out.backward(g)
            return out
    else:

        def step():
            with torch.no_grad():
                return fwd()

    meta = dict(
        kind="jagged_sdpa",
        layout="torch.jagged",
        lengths=lens,
        offsets=[0] + [sum(lens[: i + 1]) for i in range(len(lens))],
        total_tokens=sum(lens),
        B=len(lens),
        H=H,
        D=D,
        dtype=_dt_name(dt),
        causal=False,
        useful_flops_fwd=sum(4 * n * n * H * D for n in lens),
        pass_="fwd+bwd" if bwd else "fwd",
        module="JaggedAttention",
    )
    return Workload("", step, meta, keep=[mod, x])


# ---------------------------------------------------------------------------
# Inductor: compiled eager attention (fused softmax) with a rotary/scale/residual chain; compiled decode steps
# ---------------------------------------------------------------------------


class RotaryEagerAttention(nn.Module):
    """Eager attention written out: q/k/v proj -> rotary on q,k -> scale -> QK^T -> softmax -> PV -> o_proj ->
    + residual.  Compiled, Inductor fuses the rotary/scale chain and the softmax into Triton kernels."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.h, self.d = heads, embed // heads
        self.q_proj = nn.Linear(embed, embed, bias=False)
        self.k_proj = nn.Linear(embed, embed, bias=False)
        self.v_proj = nn.Linear(embed, embed, bias=False)
        self.o_proj = nn.Linear(embed, embed, bias=False)

    def forward(self, x, cos, sin):
        b, s, e = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        q = _rope(q, cos, sin) * (self.d**-0.5)
        k = _rope(k, cos, sin)
        p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, s, e)
        return x + self.o_proj(o)


def build_inductor_attn(device, small, *, B=2, H=16, S=2048, D=64, compiled=True):
    from modern_workloads import _rope_tables

    if small:
        B, H, S, D = 1, 2, 64, 16
    dt = _dtype(device, small)
    mod = RotaryEagerAttention(H * D, H).to(device=device, dtype=dt).eval()
    cos, sin = _rope_tables(S, D, device, dt)
    fn = torch.compile(mod) if compiled else mod
    x = torch.randn(B, S, H * D, device=device, dtype=dt)

    def step():
        with torch.no_grad():
            return fn(x, cos, sin)

    meta = dict(
        kind="inductor_attention" if compiled else "eager_attention",
        compiler="inductor" if compiled else None,
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=_dt_name(dt),
        causal=False,
        fused="rotary+scale (q,k), softmax, residual add" if compiled else None,
        pass_="fwd",
        module="RotaryEagerAttention",
    )
    return Workload("", step, meta, keep=[mod, fn, x, cos, sin])


DECODE_SHAPES = dict(layers=2, hidden=2048, heads=16, kv_heads=4, head_dim=128, max_len=4096, batch=8)


def build_decode_step(device, small, *, mode, **shapes):
    """The GQA decode step of modern_workloads.DecodeModel (index_copy_ of one position into a static KV cache +
    SDPA enable_gqa), 2 layers.  mode: eager | graph (torch.cuda.graph replay) | compile (torch.compile, default
    mode: no CUDA graphs) | compile_ro (torch.compile mode="reduce-overhead": CUDA graphs via cudagraph trees).
    shapes: any of DECODE_SHAPES' keys, in place of its values."""
    if mode in ("eager", "graph"):
        wl = build_decode_graph(
            device, small, mode="eager" if mode == "eager" else "replay", **{**DECODE_SHAPES, **shapes}
        )
        wl.meta["mode"] = mode if _cuda(device) else "eager (cpu)"
        wl.meta["reference_workload"] = None
        return wl
    sh = {**DECODE_SHAPES, **shapes}
    if small:
        sh.update(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, max_len=64, batch=2)
    dt = _dtype(device, small)
    torch.manual_seed(0)
    model = (
        DecodeModel(
            sh["layers"],
            sh["hidden"],
            sh["heads"],
            sh["kv_heads"],
            sh["head_dim"],
            sh["max_len"],
            sh["batch"],
            device,
            dt,
        )
        .to(device=device, dtype=dt)
        .eval()
    )
    cmode = "reduce-overhead" if mode == "compile_ro" and _cuda(device) else "default"
    cm = torch.compile(model, mode=cmode)
    x = torch.randn(sh["batch"], 1, sh["hidden"], device=device, dtype=dt)
    pos = torch.tensor([sh["max_len"] // 2], device=device, dtype=torch.long)

    def step():
        with torch.no_grad():
            return cm(x, pos)

    meta = dict(
        kind="decode_compiled",
        mode=mode,
        torch_compile_mode=cmode,
        cuda_graphs=cmode == "reduce-overhead",
        # its replayed kernels carry no shapes: analysed with the run compiled without graphs as --reference
        reference_workload="r3_decode_compiled" if cmode == "reduce-overhead" else None,
        kv_len=sh["max_len"],
        q_len=1,
        dtype=_dt_name(dt),
        pass_="fwd",
        module="DecodeModel/DecodeLayer/DecodeAttention",
        kv_write="index_copy_ of one position per layer into k_cache/v_cache [B, KVH, max_len, D]",
        **{k: v for k, v in sh.items() if k != "max_len"},
    )
    return Workload("", step, meta, keep=[model, cm, x, pos])


# ---------------------------------------------------------------------------
# FlexAttention with a document mask
# ---------------------------------------------------------------------------


class DocumentFlexAttention(nn.Module):
    """qkv projection -> compiled flex_attention with a causal + same-document BlockMask -> out projection."""

    def __init__(self, embed: int, heads: int, compiled_flex: Any):
        super().__init__()
        self.h, self.d = heads, embed // heads
        self.qkv = nn.Linear(embed, 3 * embed, bias=False)
        self.o_proj = nn.Linear(embed, embed, bias=False)
        self.flex = compiled_flex

    def forward(self, x, block_mask):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        return self.o_proj(self.flex(q, k, v, block_mask=block_mask).transpose(1, 2).reshape(b, s, e))


FLEX_DOCS = [1024, 512, 1536, 256, 768]  # document lengths packed into one 4096-token row


def build_flex_doc(device, small, *, B=2, H=16, D=64, bwd=True, docs=None):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    docs = list(docs or FLEX_DOCS)
    if small:
        H, D, docs, B = 2, 16, [128, 64, 64], 1
    S = sum(docs)
    dt = _dtype(device, small)
    doc_id = torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(docs)]).to(device)

    def doc_causal(b, h, qi, ki):
        return (qi >= ki) & (doc_id[qi] == doc_id[ki])

    bm = create_block_mask(doc_causal, None, None, S, S, device=device)
    cflex = torch.compile(flex_attention, dynamic=False)
    mod = DocumentFlexAttention(H * D, H, cflex).to(device=device, dtype=dt).train(bwd)
    x = _rand((B, S, H * D), dt, device, bwd)
    step = _train_or_infer(mod, lambda: mod(x, bm), bwd, (x,))
    kvn = bm.kv_num_blocks.sum().item()
    full = bm.full_kv_num_blocks.sum().item() if bm.full_kv_num_blocks is not None else None
    nq = math.ceil(S / bm.BLOCK_SIZE[0])
    nk = math.ceil(S / bm.BLOCK_SIZE[1])
    meta = dict(
        kind="flex",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=_dt_name(dt),
        mask="causal & same document",
        documents=docs,
        block_size=list(bm.BLOCK_SIZE),
        kv_blocks_partial=kvn,
        kv_blocks_full=full,
        kv_blocks_dense=nq * nk,
        sparsity_pct=float(bm.sparsity()),
        useful_flops_fwd=sum(2 * n * (n + 1) * H * D for n in docs) * B,
        pass_="fwd+bwd" if bwd else "fwd",
        module="DocumentFlexAttention",
        note="block mask built once at build time (static documents); counts are of that mask, B/H broadcast",
    )
    return Workload("", step, meta, keep=[mod, x, bm, cflex, doc_id])


# ---------------------------------------------------------------------------
# eager models with rolls and broadcast biases
# ---------------------------------------------------------------------------


class SwinWindowAttention(nn.Module):
    """Window attention of Swin: qkv over 7x7 windows (49 tokens), head dim 32, relative-position bias gathered
    from a (2w-1)^2 x heads table and broadcast-added, plus the shifted-window mask broadcast over the batch."""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.h, self.d, self.w = heads, dim // heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        c = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", r[..., 0] * (2 * window - 1) + r[..., 1], persistent=False)

    def forward(self, x, mask):
        bw, n, c = x.shape
        q, k, v = self.qkv(x).view(bw, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.d**-0.5) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).unsqueeze(0)
        nw = mask.shape[0]
        attn = attn.view(bw // nw, nw, self.h, n, n) + mask[None, :, None]
        attn = torch.softmax(attn.view(bw, self.h, n, n), dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class SwinBlock(nn.Module):
    """Shifted-window block: norm -> roll(-shift) -> window partition -> SwinWindowAttention -> reverse -> roll back
    -> residual -> norm -> MLP -> residual."""

    def __init__(self, dim: int, heads: int, res: int, window: int = 7, shift: int = 3):
        super().__init__()
        self.res, self.w, self.shift = res, window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SwinWindowAttention(dim, heads, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        img = torch.zeros(1, res, res, 1)
        cnt = 0
        for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                img[:, hs, ws, :] = cnt
                cnt += 1
        mw = self._partition(img).squeeze(-1)
        m = mw[:, None, :] - mw[:, :, None]
        self.register_buffer("attn_mask", m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0), persistent=False)

    def _partition(self, x):
        b, h, w, c = x.shape
        x = x.view(b, h // self.w, self.w, w // self.w, self.w, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, self.w * self.w, c)

    def forward(self, x):
        b, h, w, c = x.shape
        y = torch.roll(self.norm1(x), shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = self.attn(self._partition(y), self.attn_mask.to(x.dtype))
        y = y.view(b, h // self.w, w // self.w, self.w, self.w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        x = x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        return x + self.mlp(self.norm2(x))


def build_swin(device, small, *, B=32, res=56, dim=128, heads=4, bwd=False):
    if small:
        B, res, dim, heads = 1, 14, 32, 1
    dt = _dtype(device, small)
    mod = SwinBlock(dim, heads, res).to(device=device, dtype=dt).train(bwd)
    x = _rand((B, res, res, dim), dt, device, bwd)
    step = _train_or_infer(mod, lambda: mod(x), bwd, (x,))
    meta = dict(
        kind="swin_window_attention",
        B=B,
        resolution=res,
        dim=dim,
        heads=heads,
        head_dim=dim // heads,
        window=7,
        window_tokens=49,
        shift=3,
        windows_per_image=(res // 7) ** 2,
        dtype=_dt_name(dt),
        bias="relative-position table gather (169 x heads) broadcast over windows; shift mask broadcast over batch",
        pass_="fwd+bwd" if bwd else "fwd",
        module="SwinBlock/SwinWindowAttention",
    )
    return Workload("", step, meta, keep=[mod, x])


def build_t5(
    device, small, *, attn="eager", bwd=False, batch=4, enc_len=512, dec_len=128, layers=2, contiguous_bias=False
):
    """transformers T5Model (encoder-decoder, random weights) with the relative-position bias of T5; attention
    modules are T5Attention (self: layer.0.SelfAttention, cross: layer.1.EncDecAttention). contiguous_bias:
    the bias made contiguous where it is computed (it is a permuted view: mem-efficient SDPA refuses it)."""
    from transformers import T5Config, T5Model

    kw = dict(
        vocab_size=1024,
        d_model=512,
        d_kv=64,
        d_ff=1024,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=8,
        relative_attention_num_buckets=32,
        dropout_rate=0.0,
        use_cache=False,
        attn_implementation=attn,
    )
    if small:
        kw.update(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_heads=4)
        batch, enc_len, dec_len = 1, 16, 8
    dt = _dtype(device, small)
    model = T5Model(T5Config(**kw)).to(device=device, dtype=dt).train(bwd)
    if contiguous_bias:
        for m in model.modules():
            if getattr(m, "has_relative_attention_bias", False):
                orig = m.compute_bias
                m.compute_bias = lambda *a, _o=orig, **k: _o(*a, **k).contiguous()
    ids = torch.randint(0, kw["vocab_size"], (batch, enc_len), device=device)
    dids = torch.randint(0, kw["vocab_size"], (batch, dec_len), device=device)
    step = _train_or_infer(
        model, lambda: model(input_ids=ids, decoder_input_ids=dids, use_cache=False).last_hidden_state, bwd
    )
    import transformers

    meta = dict(
        kind="t5",
        config=kw,
        attn_implementation=model.config._attn_implementation,
        batch=batch,
        enc_len=enc_len,
        dec_len=dec_len,
        dtype=_dt_name(dt),
        pass_="fwd+bwd" if bwd else "fwd",
        module="T5Model/T5Block/T5LayerSelfAttention|T5LayerCrossAttention/T5Attention",
        bias="relative-position bias (float, [1, H, q, k]) added to every self-attention layer's scores"
        + (", made contiguous where computed" if contiguous_bias else ""),
        transformers=transformers.__version__,
    )
    return Workload("", step, meta, keep=[model, ids, dids])


class AdditiveAttention(nn.Module):
    """Bahdanau attention: score = v^T tanh(W_q q_i + U_k k_j) (a broadcast add over [B, Tq, Tk, A], not a dot
    product), softmax over keys, weighted sum of values."""

    def __init__(self, dq: int, dk: int, a: int):
        super().__init__()
        self.W_q = nn.Linear(dq, a, bias=False)
        self.U_k = nn.Linear(dk, a, bias=False)
        self.v = nn.Linear(a, 1, bias=False)

    def forward(self, q, k, vals):
        e = self.v(torch.tanh(self.W_q(q)[:, :, None, :] + self.U_k(k)[:, None, :, :])).squeeze(-1)
        return torch.softmax(e, dim=-1) @ vals


def build_additive(device, small, *, B=8, Tq=128, Tk=256, E=512, A=256, bwd=False):
    if small:
        B, Tq, Tk, E, A = 1, 8, 16, 16, 8
    dt = _dtype(device, small)
    mod = AdditiveAttention(E, E, A).to(device=device, dtype=dt).train(bwd)
    q = _rand((B, Tq, E), dt, device, bwd)
    k = _rand((B, Tk, E), dt, device, bwd)
    step = _train_or_infer(mod, lambda: mod(q, k, k), bwd, (q, k))
    meta = dict(
        kind="additive_attention",
        B=B,
        Tq=Tq,
        Tk=Tk,
        E=E,
        attn_dim=A,
        dtype=_dt_name(dt),
        score="v^T tanh(W_q q + U_k k), broadcast add over [B, Tq, Tk, A]",
        pass_="fwd+bwd" if bwd else "fwd",
        module="AdditiveAttention",
    )
    return Workload("", step, meta, keep=[mod, q, k])


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def specs() -> list[Spec]:
    s: list[Spec] = []

    def add(name, builder, desc, prio, needs_cuda=True, **kw):
        s.append(Spec(name, "round3", builder, kw, desc, needs_cuda=needs_cuda, ncu_priority=prio))

    add(
        "r3_cudnn_fwdbwd_s4096",
        build_sdpa_core,
        "SdpaCoreAttention cuDNN B2 H16 S4096 D128 bf16 causal fwd+bwd",
        1,
        backend="cudnn",
        needs_cuda=False,
    )
    add(
        "r3_flash_fwdbwd_s8192",
        build_sdpa_core,
        "SdpaCoreAttention flash B1 H16 S8192 D128 bf16 causal fwd+bwd",
        1,
        backend="flash",
        B=1,
        S=8192,
        needs_cuda=False,
    )
    add(
        "r3_jagged_fwd",
        build_jagged,
        "JaggedAttention: nested jagged tensor, 8 sequences 512..3072, H16 D64 bf16, SDPA fwd",
        2,
        needs_cuda=False,
    )
    add(
        "r3_jagged_fwdbwd",
        build_jagged,
        "JaggedAttention: nested jagged tensor, 8 sequences 512..3072, H16 D64 bf16, SDPA fwd+bwd",
        2,
        bwd=True,
        needs_cuda=False,
    )
    add(
        "r3_splitkv_decode_gqa",
        build_sdpa_core,
        "SdpaCoreAttention flash decode: q 1 token, KV 16384, B8 H32 KVH8 D128 bf16 enable_gqa",
        2,
        backend="flash",
        B=8,
        H=32,
        KVH=8,
        S=16384,
        Sq=1,
        causal=False,
        bwd=False,
        kv_layout="gqa",
        needs_cuda=False,
    )
    add(
        "r3_inductor_attn_fwd",
        build_inductor_attn,
        "torch.compile(RotaryEagerAttention): rotary+scale, QK^T, softmax, PV, o_proj + residual; "
        "B2 H16 S2048 D64 bf16 fwd",
        3,
    )
    add(
        "r3_decode_compiled",
        build_decode_step,
        "torch.compile(DecodeModel) default mode (no CUDA graphs): 2 layers, index_copy_ KV write, GQA SDPA, "
        "hidden2048 16/4 heads D128 KV4096 B8 bf16",
        3,
        mode="compile",
    )
    add(
        "r3_decode_compiled_ro",
        build_decode_step,
        'the same decode step, torch.compile(mode="reduce-overhead") (cudagraph trees replay)',
        3,
        mode="compile_ro",
    )
    add(
        "r3_swin_fwd",
        build_swin,
        "SwinBlock: roll shift 3, 7x7 windows (49 tokens), head dim 32, rel-pos bias gather + broadcast add, "
        "B32 56x56 C128 4 heads bf16 fwd",
        4,
        needs_cuda=False,
    )
    add(
        "r3_t5_eager_fwd",
        build_t5,
        "transformers T5Model 2+2 layers d512 8 heads d_kv64, enc512 dec128 B4 bf16 eager fwd",
        4,
        needs_cuda=False,
    )
    add(
        "r3_additive_fwd",
        build_additive,
        "AdditiveAttention (Bahdanau) B8 Tq128 Tk256 E512 A256 bf16 fwd",
        5,
        needs_cuda=False,
    )
    add(
        "r3_flex_doc_fwdbwd",
        build_flex_doc,
        "DocumentFlexAttention: causal & document mask (docs 1024,512,1536,256,768 = 4096) B2 H16 D64 bf16 fwd+bwd",
        5,
    )
    add(
        "r3_efficient_block_fwdbwd",
        build_block,
        "BlockAttention mem-efficient B2 H16 S4096 D128 bf16 causal fwd+bwd (the slow-backend twin's problem)",
        6,
        backend="efficient",
        needs_cuda=False,
    )
    add(
        "r3_cudnn_fwd_s4096",
        build_sdpa_core,
        "SdpaCoreAttention cuDNN B2 H16 S4096 D128 bf16 causal fwd",
        7,
        backend="cudnn",
        bwd=False,
        needs_cuda=False,
    )
    add(
        "r3_swin_fwdbwd",
        build_swin,
        "SwinBlock as r3_swin_fwd, B8, fwd+bwd",
        8,
        B=8,
        bwd=True,
        needs_cuda=False,
    )
    add(
        "r3_t5_sdpa_fwd",
        build_t5,
        "transformers T5Model as r3_t5_eager_fwd with attn_implementation=sdpa",
        8,
        attn="sdpa",
        needs_cuda=False,
    )
    add(
        "r3_lower_right_decode",
        build_sdpa_core,
        "SdpaCoreAttention: q 4 tokens vs KV 4096 with causal_lower_right, B8 H32 D128 bf16 fwd",
        9,
        backend=None,
        B=8,
        H=32,
        S=4096,
        Sq=4,
        bwd=False,
        mask="lower_right",
        needs_cuda=False,
    )
    add(
        "r3_swa_sdpa_fwd",
        build_sdpa_core,
        "SdpaCoreAttention causal + sliding window 1024 (bool mask) B2 H16 S4096 D128 bf16 fwd",
        9,
        backend=None,
        bwd=False,
        mask="sliding",
        window=1024,
        needs_cuda=False,
    )
    return s
