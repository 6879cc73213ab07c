"""cuDNN SDPA backward: does a second backward with the gradient in another layout reuse the first's plan?

The replay's timed backward passes a gradient shaped like the output (randn_like: the output's
[B,S,H,D]-ordered strides when q is a view of [B,S,H,D]); its numerics check then passes a contiguous
one. Fresh, each is right (cudnn_replay_debug.py). This runs them in both orders, and checks each
against math. Device only.
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
dev, dt = "cuda", torch.bfloat16
B, H, S, D = 4, 16, 2048, 64


def make(seed):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(B, S, H, D, device=dev, dtype=dt).transpose(1, 2).requires_grad_(True) for _ in range(3))
    return q, k, v


def grads(be, ins, layout, seed=1):
    with sdpa_kernel([be]):
        o = F.scaled_dot_product_attention(*ins, is_causal=True)
    g = torch.Generator(device=dev).manual_seed(seed)
    go = torch.randn(o.shape, generator=g, device=dev, dtype=dt)  # contiguous [B,H,S,D]
    if layout == "like_out":
        go = torch.empty_like(o).copy_(go)  # the same values in the output's strides
    return torch.autograd.grad(o, ins, go)


def err(a, b):
    return [round(float((x.float() - y.float()).abs().max() / y.float().abs().max()), 4) for x, y in zip(a, b)]


# one order per process: cuDNN's plans are cached per process
order = tuple(sys.argv[1].split(","))
ins = make(0)
ref = grads(SDPBackend.MATH, ins, "contiguous")
res = [(layout, err(grads(SDPBackend.CUDNN_ATTENTION, ins, layout), ref)) for layout in order]
print("order", order, "->", res, flush=True)
