"""Where does the replay's cuDNN backward mismatch come from? (validation/REPLAY.md)

Builds the emitted script's calls (validation/replay/emitted/replay.py) and compares cuDNN's gradients
with math's: fresh, per gradient, on contiguous clones, and after the timed runs the script makes.
"""

import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location(
    "rp", sys.argv[1] if len(sys.argv) > 1 else "validation/replay/emitted/replay.py"
)
rp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rp)
calls = {c["id"]: c for c in rp.PAYLOAD["calls"]}
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())


def grads(call, be, ins=None):
    fn = call.runner(be, check=True)
    with torch.enable_grad():
        out = fn()
        go = rp._grad_out(torch, out, seed=1)
        ins = ins or call.inputs_for(be)
        return out, torch.autograd.grad(out, ins, go, allow_unused=True)


for cid in ("flex-bc9b8dc7a2", "eager-2c7b7eb579", "sdpa-f506719957"):
    call = rp.Call(torch, calls[cid], "cuda", True)
    ins = call.inputs_for("cudnn")
    print(
        cid,
        "is_causal",
        call.is_causal,
        "attn_mask",
        call.attn_mask is not None,
        "gqa",
        call.gqa,
        "strides",
        [tuple(t.stride()) for t in ins],
        "storage",
        [t.untyped_storage().nbytes() for t in ins],
    )
    ro, rg = grads(call, "math")
    co, cg = grads(call, "cudnn")
    print("  fresh  out", rp._rel_err(torch, co, ro), "grads", [rp._rel_err(torch, a, b) for a, b in zip(cg, rg)])
    print("  grad strides cudnn", [tuple(g.stride()) for g in cg], "math", [tuple(g.stride()) for g in rg])
    print("  out strides cudnn", tuple(co.stride()), "math", tuple(ro.stride()))
    (q, k, v), kw = call.sdpa_args(check=True)
    qc, kc, vc = (t.detach().contiguous().requires_grad_(True) for t in (q, k, v))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    outs = {}
    for be in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel([be]):
            o = torch.nn.functional.scaled_dot_product_attention(qc, kc, vc, **kw)
        outs[be] = torch.autograd.grad(o, (qc, kc, vc), rp._grad_out(torch, o, seed=1))
    print(
        "  contiguous clones grads",
        [rp._rel_err(torch, a, b) for a, b in zip(outs[SDPBackend.CUDNN_ATTENTION], outs[SDPBackend.MATH])],
    )
    # same strided inputs, SDPA called directly with the replay's kwargs
    outs = {}
    for be in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel([be]):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
        outs[be] = torch.autograd.grad(o, ins, rp._grad_out(torch, o, seed=1))
    print(
        "  direct strided grads",
        [rp._rel_err(torch, a, b) for a, b in zip(outs[SDPBackend.CUDNN_ATTENTION], outs[SDPBackend.MATH])],
        "kw",
        sorted(kw),
    )
    print(
        "  q is_contiguous",
        q.is_contiguous(),
        "q storage offset",
        q.storage_offset(),
        "k",
        tuple(k.shape),
        tuple(k.stride()),
    )
