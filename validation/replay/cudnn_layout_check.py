"""Is the replay's cuDNN backward mismatch (validation/REPLAY.md) torch's, or the replay's?

Runs SDPA backward under cuDNN and math on the same inputs, with q/k/v contiguous [B,H,S,D] and as
views of the [B,S,H,D] (or packed [B,S,3,H,D]) projections models make, and prints each gradient's
max error relative to math. Device only; prints one line per case.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))


def inputs(layout, B, H, KVH, S, D):
    if layout == "bhsd":
        q = torch.randn(B, H, S, D, device=dev, dtype=dt)
        k = torch.randn(B, KVH, S, D, device=dev, dtype=dt)
        v = torch.randn(B, KVH, S, D, device=dev, dtype=dt)
    elif layout == "bshd":
        q = torch.randn(B, S, H, D, device=dev, dtype=dt).transpose(1, 2)
        k = torch.randn(B, S, KVH, D, device=dev, dtype=dt).transpose(1, 2)
        v = torch.randn(B, S, KVH, D, device=dev, dtype=dt).transpose(1, 2)
    elif layout == "q_bshd_kv_bhsd":
        q = torch.randn(B, S, H, D, device=dev, dtype=dt).transpose(1, 2)
        k = torch.randn(B, KVH, S, D, device=dev, dtype=dt)
        v = torch.randn(B, KVH, S, D, device=dev, dtype=dt)
    else:  # packed qkv [B,S,3,H,D]
        qkv = torch.randn(B, S, 3, H, D, device=dev, dtype=dt)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    return [t.detach().requires_grad_(True) for t in (q, k, v)]


def run(backend, ins, go, **kw):
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(*ins, **kw)
    return [out.detach()] + list(torch.autograd.grad(out, ins, go))


cases = [
    ("bhsd", 4, 16, 16, 2048, 64, {"is_causal": True}),
    ("bshd", 4, 16, 16, 2048, 64, {"is_causal": True}),
    ("packed", 4, 16, 16, 2048, 64, {"is_causal": True}),
    ("q_bshd_kv_bhsd", 2, 16, 16, 2048, 128, {"is_causal": True}),
    ("q_bshd_kv_bhsd", 2, 16, 4, 2048, 128, {"is_causal": True, "enable_gqa": True}),
    ("bhsd", 2, 16, 4, 2048, 128, {"is_causal": True, "enable_gqa": True}),
    ("bhsd", 2, 16, 16, 2048, 128, {"mask": True}),
    ("q_bshd_kv_bhsd", 2, 16, 16, 2048, 128, {"mask": True}),
]
for layout, B, H, KVH, S, D, kw in cases:
    kw = dict(kw)
    if kw.pop("mask", False):
        keep = torch.ones(S, S, device=dev, dtype=torch.bool).tril()
        kw["attn_mask"] = torch.zeros(B, 1, S, S, device=dev, dtype=dt).masked_fill(~keep, torch.finfo(dt).min)
    ins = inputs(layout, B, H, KVH, S, D)
    go = torch.randn(B, H, S, D, device=dev, dtype=dt)
    ref = run(SDPBackend.MATH, ins, go, **kw)
    try:
        got = run(SDPBackend.CUDNN_ATTENTION, ins, go, **kw)
        errs = [float((a.float() - b.float()).abs().max() / b.float().abs().max()) for a, b in zip(got, ref)]
        res = " ".join(f"{n}={e:.3g}" for n, e in zip(("out", "dq", "dk", "dv"), errs))
    except RuntimeError as e:
        res = f"refused: {str(e)[:120]}"
    strides = [tuple(t.stride()) for t in ins]
    print(f"{layout:15s} B{B} H{H} KVH{KVH} S{S} D{D} {sorted(kw)} strides={strides}: {res}", flush=True)
