"""What SDPA's dispatcher picks for T5-like inputs on this GPU (the fuse_attention rule's premise):
a float relative-position bias [1, H, S, S] that requires grad (a learned bias) or not, with and
without dropout. Prints torch._fused_sdp_choice and which backends refuse, with their warnings."""

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
names = {
    int(getattr(SDPBackend, n)): n
    for n in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "OVERRIDEABLE")
    if hasattr(SDPBackend, n)
}
for S in (128, 512):
    for grad in (False, True):
        for p in (0.0, 0.1):
            q, k, v = (
                torch.randn(4, 8, S, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
            )
            bias = torch.randn(1, 8, S, S, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            choice = int(torch._fused_sdp_choice(q, k, v, bias, p, False, scale=1.0))
            refused = {}
            for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
                with warnings.catch_warnings(record=True) as w, sdpa_kernel([b]):
                    warnings.simplefilter("always")
                    try:
                        F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p, scale=1.0).sum().backward()
                    except RuntimeError:
                        refused[b.name] = "; ".join(str(x.message)[:160] for x in w)[:400]
            print(f"S={S} bias_requires_grad={grad} dropout={p}: picks {names.get(choice, choice)}; refused: {refused}")
