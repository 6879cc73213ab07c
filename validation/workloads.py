"""Validation workloads for tb-attention.

Each workload is a named builder ``build(device, small) -> Workload``. The
returned object carries a ``step()`` callable (one forward, or one
forward+backward) plus metadata (shapes, dtype, what it exercises).  The same
builders are used by ``trace_workloads.py`` (torch.profiler traces) and by
``ncu_step.py`` (one step under Nsight Compute), so the kernels seen in a trace
and in the ncu rows of the same workload come from identical code.

``small=True`` shrinks every shape so the module can be smoke-tested on a CPU;
real measurements always use ``small=False`` on CUDA.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

if __name__ == "__main__":  # the family modules import this file as `workloads`: let them find this one
    sys.modules.setdefault("workloads", sys.modules[__name__])

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Workload:
    name: str
    step: Callable[[], Any]
    meta: dict[str, Any]
    profile_memory: bool = False
    # objects kept alive for the lifetime of the workload (modules, tensors)
    keep: list[Any] = field(default_factory=list)


@dataclass
class Spec:
    name: str
    family: str
    builder: Callable[..., Workload]
    kwargs: dict[str, Any]
    description: str
    needs_cuda: bool = False
    profile_memory: bool = False
    # lower = measured first by ncu when device time is short
    ncu_priority: int = 50


# ---------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------


class NaiveAttention(nn.Module):
    """Explicit attention: q/k/v proj -> QK^T -> scale -> causal mask ->
    softmax -> dropout -> PV -> out_proj."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.1, causal: bool = True):
        super().__init__()
        self.h = num_heads
        self.d = embed_dim // num_heads
        self.causal = causal
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, e = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = scores / math.sqrt(self.d)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(b, s, e)
        return self.out_proj(out)


class SdpaAttention(nn.Module):
    """Same projections as NaiveAttention, attention via F.scaled_dot_product_attention."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, causal: bool = True):
        super().__init__()
        self.h = num_heads
        self.d = embed_dim // num_heads
        self.causal = causal
        self.p = dropout
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=self.causal)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, e))


class LlamaLikeAttention(nn.Module):
    """Decode-step attention with a preallocated KV cache and GQA.

    One new token per sequence: project q/k/v, write k/v into the cache at
    position ``pos``, attend over cache[:pos+1], project out.
    """

    def __init__(
        self,
        hidden: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        batch: int,
        dtype,
        device,
        backend: str,
    ):
        super().__init__()
        self.h, self.kvh, self.d = n_heads, n_kv_heads, head_dim
        self.backend = backend
        self.q_proj = nn.Linear(hidden, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, n_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, n_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, hidden, bias=False)
        self.register_buffer(
            "k_cache", torch.randn(batch, n_kv_heads, max_len, head_dim, dtype=dtype, device=device) * 0.5
        )
        self.register_buffer(
            "v_cache", torch.randn(batch, n_kv_heads, max_len, head_dim, dtype=dtype, device=device) * 0.5
        )
        # "expand": backend cannot do GQA natively -> repeat_interleave k/v first
        self.expand_kv = False

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        b = x.shape[0]
        q = self.q_proj(x).view(b, 1, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, 1, self.kvh, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, 1, self.kvh, self.d).transpose(1, 2)
        self.k_cache[:, :, pos : pos + 1].copy_(k)
        self.v_cache[:, :, pos : pos + 1].copy_(v)
        keys = self.k_cache[:, :, : pos + 1]
        vals = self.v_cache[:, :, : pos + 1]
        gqa = self.h != self.kvh
        if gqa and self.expand_kv:
            rep = self.h // self.kvh
            keys = keys.repeat_interleave(rep, dim=1)
            vals = vals.repeat_interleave(rep, dim=1)
            gqa = False
        with sdpa_kernel_ctx(self.backend):
            if gqa:
                out = F.scaled_dot_product_attention(q, keys, vals, enable_gqa=True)
            else:
                out = F.scaled_dot_product_attention(q, keys, vals)
        return self.o_proj(out.transpose(1, 2).reshape(b, 1, self.h * self.d))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.net(x)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
    "cudnn": "CUDNN_ATTENTION",
}


def sdpa_kernel_ctx(backend: Optional[str]):
    import contextlib

    if backend is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, _BACKENDS[backend]))


def _cuda(device) -> bool:
    return str(device).startswith("cuda")


def _dt_name(dt: torch.dtype) -> str:
    """The dtype as the meta records it ("bfloat16" for torch.bfloat16)."""
    return str(dt).replace("torch.", "")


def _sync(device):
    if _cuda(device):
        torch.cuda.synchronize()


def _rand(shape, dtype, device, requires_grad=False):
    t = torch.randn(*shape, dtype=dtype, device=device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _fwd_bwd(module_out_fn, params_holder=None):
    """Wrap a forward into forward+backward with a fixed upstream gradient."""
    state: dict[str, Any] = {}

    def step():
        out = module_out_fn()
        g = state.get("g")
        if g is None or g.shape != out.shape:
            g = state["g"] = torch.randn_like(out)
        out.backward(g)
        return out

    return step


def _zero_grads(*mods_or_tensors):
    for m in mods_or_tensors:
        if isinstance(m, nn.Module):
            for p in m.parameters():
                p.grad = None
        elif isinstance(m, torch.Tensor):
            m.grad = None


def _train_or_infer(mod: nn.Module, fwd, bwd: bool, leaves: tuple = ()):
    """step(): forward+backward with a fixed upstream gradient (grads cleared first), or a no_grad forward."""
    if bwd:
        inner = _fwd_bwd(fwd)

        def step():
            _zero_grads(mod, *leaves)
            return inner()

        return step

    def infer():
        with torch.no_grad():
            return fwd()

    return infer


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------


def build_naive(device, small, *, dtype, B, H, S, D, causal=True, dropout=0.1, bwd=False):
    if small:
        B, H, S, D = 1, 2, min(S, 64), min(D, 16)
    dt = DTYPES[dtype]
    E = H * D
    mod = NaiveAttention(E, H, dropout=dropout, causal=causal).to(device=device, dtype=dt)
    mod.train()
    x = _rand((B, S, E), dt, device, requires_grad=bwd)

    step = _train_or_infer(mod, lambda: mod(x), bwd, (x,))

    meta = dict(
        kind="naive",
        B=B,
        H=H,
        S=S,
        D=D,
        E=E,
        dtype=dtype,
        causal=causal,
        dropout=dropout,
        pass_="fwd+bwd" if bwd else "fwd",
        module="NaiveAttention",
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
    )
    return Workload("", step, meta, keep=[mod, x])


def build_sdpa(device, small, *, backend, dtype="bf16", B=4, H=16, S=2048, D=64, causal=True, bwd=False):
    if small:
        B, H, S, D = 1, 2, min(S, 64), min(D, 16)
    dt = DTYPES[dtype]
    q = _rand((B, H, S, D), dt, device, bwd)
    k = _rand((B, H, S, D), dt, device, bwd)
    v = _rand((B, H, S, D), dt, device, bwd)
    gout = torch.randn(B, H, S, D, dtype=dt, device=device)

    def fwd():
        with sdpa_kernel_ctx(backend), torch.profiler.record_function(f"sdpa_{backend}"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    if bwd:

        def step():
            _zero_grads(q, k, v)
            out = fwd()
            out.backward(gout)
            return out
    else:

        def step():
            with torch.no_grad():
                return fwd()

    meta = dict(
        kind="sdpa",
        backend=backend,
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=dtype,
        causal=causal,
        pass_="fwd+bwd" if bwd else "fwd",
        record_function=f"sdpa_{backend}",
    )
    return Workload("", step, meta, keep=[q, k, v, gout])


def build_decode(device, small, *, backend, B=8, H=32, KVH=8, D=128, KV=8192, dtype="bf16"):
    hidden = H * D
    if small:
        B, H, KVH, D, KV = 2, 4, (1 if KVH < H else 4), 16, 64
        hidden = H * D
    dt = DTYPES[dtype]
    mod = LlamaLikeAttention(hidden, H, KVH, D, KV, B, dt, device, backend).to(device=device, dtype=dt).eval()
    x = torch.randn(B, 1, hidden, dtype=dt, device=device)
    pos = KV - 1
    chosen = backend

    def step():
        with torch.no_grad():
            return mod(x, pos)

    # probe: does this backend accept GQA?  fall back per the plan
    fallback_note = None
    try:
        step()
        _sync(device)
    except RuntimeError as e:  # backend rejected the inputs
        fallback_note = f"{backend} rejected enable_gqa ({str(e).splitlines()[0][:200]})"
        if backend == "flash":
            mod.backend = chosen = "efficient"
            try:
                step()
                _sync(device)
            except RuntimeError:
                mod.expand_kv = True
                fallback_note += "; efficient rejected enable_gqa too -> repeat_interleave k/v"
                step()
                _sync(device)
        else:
            mod.expand_kv = True
            fallback_note += "; using repeat_interleave k/v"
            step()
            _sync(device)
    meta = dict(
        kind="decode",
        backend_requested=backend,
        backend=chosen,
        B=B,
        H=H,
        KVH=KVH,
        D=D,
        kv_len=KV,
        q_len=1,
        dtype=dtype,
        gqa=H != KVH,
        expand_kv=mod.expand_kv,
        fallback=fallback_note,
        module="LlamaLikeAttention",
        pass_="fwd",
    )
    return Workload("", step, meta, keep=[mod, x])


def build_compiled_naive(device, small, *, dtype="bf16", B=4, H=16, S=2048, D=64, bwd=False):
    if small:
        B, H, S, D = 1, 2, 64, 16
    dt = DTYPES[dtype]
    E = H * D
    mod = NaiveAttention(E, H, dropout=0.1, causal=True).to(device=device, dtype=dt).train()
    cmod = torch.compile(mod)
    x = _rand((B, S, E), dt, device, requires_grad=bwd)
    step = _train_or_infer(mod, lambda: cmod(x), bwd, (x,))

    meta = dict(
        kind="compiled_naive",
        compiler="inductor",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=dtype,
        causal=True,
        dropout=0.1,
        pass_="fwd+bwd" if bwd else "fwd",
        module="NaiveAttention",
    )
    return Workload("", step, meta, keep=[mod, cmod, x])


def build_mha(device, small, *, dtype, need_weights, L=512, N=16, E=1024, heads=16):
    if small:
        L, N, E, heads = 16, 2, 64, 4
    dt = DTYPES[dtype]
    mod = nn.MultiheadAttention(E, heads, batch_first=True).to(device=device, dtype=dt).eval()
    x = torch.randn(N, L, E, dtype=dt, device=device)

    def step():
        with torch.no_grad():
            return mod(x, x, x, need_weights=need_weights)

    meta = dict(
        kind="mha",
        L=L,
        N=N,
        E=E,
        heads=heads,
        dtype=dtype,
        need_weights=need_weights,
        batch_first=True,
        mode="eval,no_grad",
        pass_="fwd",
        module="MultiheadAttention",
    )
    return Workload("", step, meta, keep=[mod, x])


def build_hf_llama(device, small, *, attn, bwd=False, hidden=2048, heads=16, kv_heads=4, seq=2048, batch=2, layers=1):
    from transformers import LlamaConfig, LlamaModel

    inter = int(hidden * 2.75)
    if small:
        hidden, heads, kv_heads, seq, batch, inter = 64, 4, 2, 32, 1, 128
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        vocab_size=256,
        max_position_embeddings=max(seq, 4096),
        attn_implementation=attn,
        use_cache=False,
    )
    dev_dtype = torch.bfloat16 if not small or str(device).startswith("cuda") else torch.float32
    model = LlamaModel(cfg).to(device=device, dtype=dev_dtype)
    model.train(bwd)
    emb = _rand((batch, seq, hidden), dev_dtype, device, requires_grad=bwd)

    def fwd():
        return model(inputs_embeds=emb, use_cache=False).last_hidden_state

    step = _train_or_infer(model, fwd, bwd, (emb,))

    meta = dict(
        kind="hf_llama",
        attn_implementation=attn,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=inter,
        seq=seq,
        batch=batch,
        layers=layers,
        dtype=str(dev_dtype).replace("torch.", ""),
        pass_="fwd+bwd" if bwd else "fwd",
        module="LlamaModel/LlamaDecoderLayer/LlamaAttention",
        causal=True,
        mask=(
            "4D additive causal mask built by transformers"
            if attn == "eager"
            else "transformers decides (None -> is_causal=True when possible)"
        ),
    )
    try:
        import transformers

        meta["transformers"] = transformers.__version__
    except Exception:  # pragma: no cover
        pass
    return Workload("", step, meta, keep=[model, emb])


def build_mem(device, small, *, impl, S, B=2, H=16, D=64, dtype="bf16"):
    if small:
        B, H, S, D = 1, 2, min(S, 64) if S <= 1024 else 128, 16
    dt = DTYPES[dtype]
    E = H * D
    if impl == "naive":
        mod = NaiveAttention(E, H, dropout=0.1, causal=True)
        backend = None
    else:
        mod = SdpaAttention(E, H, dropout=0.0, causal=True)
        backend = "flash" if str(device).startswith("cuda") else None
    mod = mod.to(device=device, dtype=dt).train()
    x = torch.randn(B, S, E, dtype=dt, device=device)

    def step():
        # forward with autograd on (training forward: activations are kept
        # until the output is dropped at the end of the step)
        with sdpa_kernel_ctx(backend):
            out = mod(x)
        return out.sum()

    meta = dict(
        kind="memory",
        impl=impl,
        module=type(mod).__name__,
        backend=backend or "n/a",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=dtype,
        causal=True,
        pass_="fwd (grad enabled, no backward)",
        profile_memory=True,
        score_bytes_per_tensor=B * H * S * S * torch.tensor([], dtype=dt).element_size(),
    )
    return Workload("", step, meta, keep=[mod, x])


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def _specs() -> list[Spec]:
    s: list[Spec] = []

    def add(name, family, builder, desc, prio, needs_cuda=False, profile_memory=False, **kw):
        s.append(
            Spec(
                name, family, builder, kw, desc, needs_cuda=needs_cuda, profile_memory=profile_memory, ncu_priority=prio
            )
        )

    # --- SDPA backends: B4 H16 S2048 D64 bf16, fwd and fwd+bwd, causal and full
    for be in ("flash", "efficient", "cudnn", "math"):
        for bwd in (False, True):
            for causal in (True, False):
                name = f"sdpa_{be}_{'fwdbwd' if bwd else 'fwd'}_{'causal' if causal else 'full'}"
                prio = 10 if not bwd else 20
                if be == "math":
                    prio += 5
                add(
                    name,
                    "sdpa",
                    build_sdpa,
                    f"F.scaled_dot_product_attention backend={be} B4 H16 S2048 D64 bf16 "
                    f"{'causal' if causal else 'non-causal'} {'fwd+bwd' if bwd else 'fwd'}",
                    prio,
                    needs_cuda=be != "math",
                    backend=be,
                    causal=causal,
                    bwd=bwd,
                )
    for be in ("flash", "cudnn"):
        add(
            f"sdpa_{be}_fwdbwd_causal_d128",
            "sdpa",
            build_sdpa,
            f"F.sdpa backend={be} B4 H16 S2048 D128 bf16 causal fwd+bwd",
            22,
            needs_cuda=True,
            backend=be,
            causal=True,
            bwd=True,
            D=128,
        )

    # --- naive attention: 8 (S, D, dtype) combos fwd + one fwd+bwd
    naive = [
        # name, dtype, B, H, S, D, causal
        ("naive_fp32_s512_d64", "fp32", 8, 16, 512, 64, False),
        ("naive_fp16_s512_d64", "fp16", 8, 16, 512, 64, True),
        ("naive_bf16_s2048_d128", "bf16", 1, 32, 2048, 128, True),
        ("naive_bf16_s2048_d64", "bf16", 4, 16, 2048, 64, True),
        ("naive_fp32_s2048_d64", "fp32", 4, 16, 2048, 64, True),
        ("naive_fp16_s2048_d128", "fp16", 1, 32, 2048, 128, True),
        ("naive_bf16_s4096_d64", "bf16", 1, 16, 4096, 64, True),
        ("naive_fp32_s4096_d128", "fp32", 1, 8, 4096, 128, True),
    ]
    for name, dt, B, H, S, D, causal in naive:
        add(
            name + "_fwd",
            "naive",
            build_naive,
            f"NaiveAttention {dt} B{B} H{H} S{S} D{D} {'causal' if causal else 'non-causal'} dropout0.1 fwd",
            15 if name in ("naive_bf16_s2048_d64", "naive_fp32_s2048_d64", "naive_bf16_s2048_d128") else 30,
            dtype=dt,
            B=B,
            H=H,
            S=S,
            D=D,
            causal=causal,
        )
    add(
        "naive_bf16_s2048_d64_fwdbwd",
        "naive",
        build_naive,
        "NaiveAttention bf16 B4 H16 S2048 D64 causal dropout0.1 fwd+bwd",
        25,
        dtype="bf16",
        B=4,
        H=16,
        S=2048,
        D=64,
        causal=True,
        bwd=True,
    )

    # --- decode with KV cache (LlamaLikeAttention)
    add(
        "decode_gqa_math",
        "decode",
        build_decode,
        "decode 1 token, KV 8192, 32 q heads / 8 kv heads, D128 bf16 B8, math backend enable_gqa=True",
        12,
        needs_cuda=False,
        backend="math",
        KVH=8,
        KV=8192,
    )
    add(
        "decode_gqa_flash",
        "decode",
        build_decode,
        "decode 1 token, KV 8192, 32 q heads / 8 kv heads, D128 bf16 B8, flash backend enable_gqa=True "
        "(falls back to efficient if rejected)",
        12,
        needs_cuda=True,
        backend="flash",
        KVH=8,
        KV=8192,
    )
    add(
        "decode_mha_flash",
        "decode",
        build_decode,
        "decode 1 token, KV 4096, 32 heads (MHA), D128 bf16 B8, flash backend",
        14,
        needs_cuda=True,
        backend="flash",
        KVH=32,
        KV=4096,
    )
    add(
        "decode_mha_math",
        "decode",
        build_decode,
        "decode 1 token, KV 4096, 32 heads (MHA), D128 bf16 B8, math backend",
        32,
        needs_cuda=False,
        backend="math",
        KVH=32,
        KV=4096,
    )

    # --- torch.compile'd naive attention
    add(
        "compiled_naive_fwd",
        "compile",
        build_compiled_naive,
        "torch.compile(NaiveAttention) inductor bf16 B4 H16 S2048 D64 causal dropout0.1 fwd",
        18,
        needs_cuda=True,
    )
    add(
        "compiled_naive_fwdbwd",
        "compile",
        build_compiled_naive,
        "torch.compile(NaiveAttention) inductor bf16 B4 H16 S2048 D64 causal dropout0.1 fwd+bwd",
        28,
        needs_cuda=True,
        bwd=True,
    )

    # --- nn.MultiheadAttention
    for dt in ("fp32", "bf16"):
        for nw in (True, False):
            add(
                f"mha_{dt}_{'needw' if nw else 'noweights'}",
                "mha",
                build_mha,
                f"nn.MultiheadAttention {dt} L512 N16 E1024 16 heads batch_first eval no_grad need_weights={nw}",
                26,
                dtype=dt,
                need_weights=nw,
            )

    # --- Hugging Face Llama (1 decoder layer, random weights)
    for attn in ("eager", "sdpa"):
        for bwd in (False, True):
            add(
                f"hf_llama_{attn}_{'fwdbwd' if bwd else 'fwd'}",
                "hf",
                build_hf_llama,
                f"transformers LlamaModel 1 layer hidden2048 16 heads 4 kv heads seq2048 batch2 bf16 "
                f"attn_implementation={attn} {'fwd+bwd' if bwd else 'fwd'}",
                35 if not bwd else 45,
                attn=attn,
                bwd=bwd,
            )

    # --- memory (profile_memory=True)
    for impl in ("naive", "flash"):
        for S in (1024, 4096):
            add(
                f"mem_{impl}_s{S}",
                "memory",
                build_mem,
                f"{'NaiveAttention' if impl == 'naive' else 'SdpaAttention(flash)'} bf16 B2 H16 S{S} D64 causal "
                f"training forward, profile_memory=True",
                40,
                profile_memory=True,
                impl=impl,
                S=S,
            )

    # --- attention as run in late 2026 (issue #12): flex, FP8, MLA+MoE, CUDA-graph decode
    from modern_workloads import specs as modern_specs

    s += modern_specs()

    # --- round 3 (issues #18, #19, #23): cuDNN bwd, long flash, jagged, split-KV, Inductor, rolls and biases
    from round3_workloads import specs as round3_specs

    s += round3_specs()
    return s


SPECS: dict[str, Spec] = {sp.name: sp for sp in _specs()}
FAMILIES: list[str] = ["sdpa", "naive", "decode", "mha", "memory", "compile", "hf", "modern", "round3"]


def build(name: str, device: str = "cuda", small: bool = False) -> Workload:
    sp = SPECS[name]
    wl = sp.builder(device, small, **sp.kwargs)
    wl.name = name
    wl.profile_memory = sp.profile_memory
    wl.meta = dict(wl.meta)
    wl.meta.update(workload=name, family=sp.family, description=sp.description, small=small, device=str(device))
    if "pass_" in wl.meta:
        wl.meta["pass"] = wl.meta.pop("pass_")
    return wl


def names(family: Optional[str] = None) -> list[str]:
    return [n for n, sp in SPECS.items() if family is None or sp.family == family]


if __name__ == "__main__":
    for n, sp in SPECS.items():
        print(f"{n:34s} {sp.family:8s} prio={sp.ncu_priority:3d} {sp.description}")
    print(len(SPECS), "workloads")
