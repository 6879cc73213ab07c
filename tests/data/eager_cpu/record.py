# ruff: noqa: E501  (kernel names as CUDA writes them, one literal each)
"""Record the CPU side of eager attention blocks whose labels issue #18 found wrong, as torch records
them (torch.profiler, record_shapes=True, with_stack=True, on the CPU), then give every op that
would launch a CUDA kernel one kernel, as Kineto links them (a cudaLaunchKernel inside the op, a
kernel with its correlation id) on an H200. The CPU side (ops, shapes, dtypes, modules, Python
frames) is torch's own; only the kernel names and durations are made up (a name by op, a duration
from the op's bytes at 3 TB/s, at least 2 µs).

    python tests/data/eager_cpu/record.py      # rewrites the *.pt.trace.json.gz beside this file

Models (mirroring validation/round3_workloads.py and transformers' T5Attention):
* swin_block (and _fwdbwd, a training step): a shifted-window Swin block (7x7 windows of 49 tokens, head dim 32, relative-position
  bias table gathered and broadcast-added, the shift mask broadcast over the batch, torch.roll).
* t5_attention: T5's encoder self-attention with the bidirectional relative-position bucket bias,
  and the decoder's causal self-attention (unidirectional bucket: a neg), as transformers computes
  them (scores first, then compute_bias, then scores += bias), eager softmax in fp32;
  t5_attention_bias_first computes the bias before the scores.
* additive_attention: Bahdanau attention, v^T tanh(W q + U k) with a broadcast add.
* upcast_attention: bf16 eager attention whose softmax is upcast to fp32 and cast back, with a
  second, no-op .to(float32) and dropout at p=0 (they allocate nothing): the S x S tensors of mixed
  dtypes the memory block counts.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
H200 = {
    "id": 0,
    "name": "NVIDIA H200",
    "totalGlobalMem": 150109880320,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}


class SwinWindowAttention(nn.Module):
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


class T5Attention(nn.Module):
    """transformers' T5Attention (eager), without cache and pruning: its op sequence."""

    def __init__(
        self, d_model=512, d_kv=64, n_heads=8, is_decoder=False, has_relative_attention_bias=True, bias_first=False
    ):
        super().__init__()
        self.bias_first = bias_first  # compute the bias before the scores (the order some versions use)
        self.is_decoder, self.has_relative_attention_bias = is_decoder, has_relative_attention_bias
        self.relative_attention_num_buckets, self.relative_attention_max_distance = 32, 128
        self.d_model, self.key_value_proj_dim, self.n_heads = d_model, d_kv, n_heads
        self.inner_dim = n_heads * d_kv
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None):
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position,
            bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        values = self.relative_attention_bias(relative_position_bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        q = self.q(hidden_states).view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        k = self.k(hidden_states).view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        v = self.v(hidden_states).view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        if position_bias is None and self.bias_first:
            position_bias = self.compute_bias(seq_length, k.shape[-2], device=q.device)
            if mask is not None:
                position_bias = position_bias + mask[:, :, :, : k.shape[-2]]
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(seq_length, k.shape[-2], device=scores.device)
            if mask is not None:
                position_bias = position_bias + mask[:, :, :, : k.shape[-2]]
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = nn.functional.dropout(attn_weights, p=0.0, training=self.training)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)
        return self.o(attn_output), position_bias


class T5Layers(nn.Module):
    def __init__(self, bias_first=False):
        super().__init__()
        self.enc = T5Attention(is_decoder=False, bias_first=bias_first)
        self.dec = T5Attention(is_decoder=True, bias_first=bias_first)

    def forward(self, x, y):
        e, _ = self.enc(x)
        s = y.shape[1]
        causal = torch.full((s, s), torch.finfo(y.dtype).min, dtype=y.dtype).triu(1)[None, None]
        d, _ = self.dec(y, mask=causal)
        return e.sum() + d.sum()


class AdditiveAttention(nn.Module):
    def __init__(self, dq: int, dk: int, a: int):
        super().__init__()
        self.W_q = nn.Linear(dq, a, bias=False)
        self.U_k = nn.Linear(dk, a, bias=False)
        self.v = nn.Linear(a, 1, bias=False)

    def forward(self, q, k, vals):
        e = self.v(torch.tanh(self.W_q(q)[:, :, None, :] + self.U_k(k)[:, None, :, :])).squeeze(-1)
        return torch.softmax(e, dim=-1) @ vals


class UpcastAttention(nn.Module):
    """Eager attention as transformers writes it: softmax upcast to fp32 and cast back, dropout at
    p=0 (no allocation), and a second .to(float32) of a tensor that is fp32 already (a no-op)."""

    def __init__(self, dim=256, heads=4):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d)  # bf16, bf16
        p = torch.softmax(scores.to(torch.float32), dim=-1)  # fp32 copy, fp32 softmax
        p = p.to(torch.float32)  # already fp32: returns p, allocates nothing
        p = nn.functional.dropout(p, p=0.0, training=True).type_as(v)  # p=0: nothing; back to bf16
        return self.out(torch.matmul(p, v).transpose(1, 2).reshape(b, s, c))


# -- recording ------------------------------------------------------------------------------
VIEW_OPS = {
    "aten::view",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::permute",
    "aten::transpose",
    "aten::t",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::expand",
    "aten::expand_as",
    "aten::as_strided",
    "aten::slice",
    "aten::select",
    "aten::unbind",
    "aten::detach",
    "aten::alias",
    "aten::_unsafe_view",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::lift_fresh",
    "aten::numpy_T",
    "aten::flatten",
    "aten::split",
    "aten::chunk",
    "aten::narrow",
    "aten::result_type",
    "aten::to",
    "aten::type_as",
    "aten::contiguous",
    "aten::dropout",
    "aten::matmul",
    "aten::linear",
    "aten::softmax",
    "aten::_has_compatible_shallow_copy_type",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::is_nonzero",
    "aten::size",
    "aten::stride",
    "aten::dim",
}
KERNEL_NAMES = {
    "aten::mm": "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_TNT",
    "aten::addmm": "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_bias_TNT",
    "aten::bmm": "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_NNT",
    "aten::_softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "aten::native_layer_norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)",
    "aten::roll": "void at::native::roll_cuda_kernel<float>(float const*, float*, long, long, long, long, long, long)",
    "aten::index": "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> > >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> > const&, bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> > >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> > const&, bool)::{lambda(int)#1})",
    "aten::index_select": "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "aten::cat": "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<4u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
    "aten::embedding": "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "aten::sum": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)",
}
COPY = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})"


def _elementwise(op: str) -> str:
    fn = op.split("::")[-1].rstrip("_").capitalize()
    return f"void at::native::vectorized_elementwise_kernel<4, at::native::{fn}Functor<float>, std::array<char*, 3> >(int, at::native::{fn}Functor<float>, std::array<char*, 3>)"


def _bytes(args: dict) -> float:
    n = 0
    for dims, ty in zip(args.get("Input Dims") or [], args.get("Input type") or []):
        if isinstance(dims, list) and dims and all(isinstance(x, int) for x in dims):
            e = 1
            for x in dims:
                e *= x
            n += e * (8 if "long" in str(ty) else 2 if "Half" in str(ty) or "BFloat16" in str(ty) else 4)
    return float(n)


def _has_tensor(args: dict) -> bool:
    """An input with dimensions: ops on 0-dim scalars only (CPU's wrapped-number copies) launch nothing."""
    return any(
        isinstance(d, list) and len(d) > 0 and all(isinstance(x, int) for x in d) for d in args.get("Input Dims") or []
    )


def with_kernels(trace: dict) -> dict:
    """One kernel per op that launches one on CUDA: an op with a CUDA kernel of its own (KERNEL_NAMES:
    GEMMs, softmax, layer norm, roll, index, cat...; whatever it calls on the CPU launches nothing
    more), else a leaf op that is not a view and has a tensor input with dimensions."""
    ev = trace["traceEvents"]
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    ops.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    chosen = []
    by_tid: dict = {}
    for e in ops:
        by_tid.setdefault(e["tid"], []).append(e)
    for lst in by_tid.values():
        stack: list = []  # open ops, outermost first
        for i, e in enumerate(lst):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"]:
                stack.pop()
            inside_kernel_op = any(o["name"] in KERNEL_NAMES for o in stack)
            end = e["ts"] + e["dur"]
            leaf = not any(o["ts"] >= e["ts"] and o["ts"] + o["dur"] <= end for o in lst[i + 1 : i + 2])
            if not inside_kernel_op and (
                e["name"] in KERNEL_NAMES or (leaf and e["name"] not in VIEW_OPS and _has_tensor(e.get("args", {})))
            ):
                chosen.append(e)
            stack.append(e)
    chosen.sort(key=lambda e: e["ts"])
    gpu_t = min(e["ts"] for e in ev if "ts" in e) + 10.0
    corr = 1_000_000
    for e in chosen:
        corr += 1
        name = e["name"]
        kname = KERNEL_NAMES.get(name) or (
            COPY if name in ("aten::copy_", "aten::clone", "aten::_to_copy") else _elementwise(name)
        )
        ts_launch = e["ts"] + min(0.5, e["dur"] / 2)
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": e["pid"],
                "tid": e["tid"],
                "ts": ts_launch,
                "dur": min(0.4, e["dur"] / 4) or 0.1,
                "args": {"correlation": corr, "cbid": 211},
            }
        )
        dur = max(2.0, round(_bytes(e.get("args", {})) / 3e12 * 1e6, 3))
        gpu_t = max(gpu_t, ts_launch + 1.0)
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kname,
                "pid": 0,
                "tid": 7,
                "ts": round(gpu_t, 3),
                "dur": dur,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": corr,
                    "grid": [264, 1, 1],
                    "block": [256, 1, 1],
                    "registers per thread": 32,
                    "shared memory": 0,
                    "est. achieved occupancy %": 0,
                },
            }
        )
        gpu_t += dur + 0.5
    trace["deviceProperties"] = [H200]
    return trace


def record(name: str, model: nn.Module, *inputs, backward: bool = False) -> str:
    from torch.profiler import ProfilerActivity, profile

    if backward:  # a training step: forward, then backward of the output's sum
        model.train()
        model(*inputs).sum().backward()  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
            model(*inputs).sum().backward()
    else:
        model.eval()
        with torch.no_grad():
            model(*inputs)  # warm-up
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
                model(*inputs)
    raw = os.path.join(HERE, f"{name}.raw.json")
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        trace = json.load(f)
    os.remove(raw)
    out = os.path.join(HERE, f"{name}.pt.trace.json.gz")
    with gzip.open(out, "wt") as f:
        json.dump(with_kernels(trace), f)
    return out


def main() -> int:
    torch.manual_seed(0)
    made = [
        record("swin_block", SwinBlock(128, 4, 28), torch.randn(2, 28, 28, 128)),
        record("swin_block_fwdbwd", SwinBlock(128, 4, 28), torch.randn(2, 28, 28, 128), backward=True),
        record("t5_attention", T5Layers(), torch.randn(2, 64, 512), torch.randn(2, 32, 512)),
        record("t5_attention_bias_first", T5Layers(bias_first=True), torch.randn(2, 64, 512), torch.randn(2, 32, 512)),
        record(
            "additive_attention",
            AdditiveAttention(64, 64, 32),
            torch.randn(2, 16, 64),
            torch.randn(2, 24, 64),
            torch.randn(2, 24, 64),
        ),
        record(
            "upcast_attention", UpcastAttention().to(torch.bfloat16), torch.randn(2, 128, 256, dtype=torch.bfloat16)
        ),
    ]
    print("\n".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
