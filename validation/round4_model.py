"""Round 4 of issue #23 ("Attention in its model"): what validation/RESULTS-model.md lists as still to record.

One process, items in priority order, a wall budget (an item is skipped when the time left is below its estimate;
what was recorded is written after every item, so a run stopped at its limit keeps it):

  a. ffn_*: the FFN-boundary twin (twins.FfnBoundaryBlock) on a GPU-bound step -- B 8, S 4096, eager vs
     torch.compile (profiled + timed) -- and at the twin's own size (B 2, S 2048) under CUDA graphs (eager captured
     by hand vs compile mode="reduce-overhead", with the plain eager/compiled steps timed again in the same session).
  b. jagged_*: jagged SDPA whose nested tensor is built inside the profiled step from its pieces (the pieces'
     shapes are then in the trace): lengths 512..3072 (round3's JAGGED_LENGTHS), fwd and fwd+bwd, by
     ``torch.nested.nested_tensor`` and by ``torch.nested.as_nested_tensor``.
  c. flex_*: FlexAttention with round3's causal + same-document mask, fwd+bwd: (1) the block mask built inside the
     step (as a user whose documents change per batch does) and no annotation; (2) the mask built once and the
     call annotated by the ``record_function`` convention below.  The true block counts are in the meta of both.
  d. fp8_*: a transformer block whose projections are e4m3 ``torch._scaled_mm`` (per-tensor scales, inputs
     quantised in the step) and its bf16 twin; after e, probes of FP8 attention itself (SDPA and compiled Flex on
     e4m3 q/k/v: recorded if torch accepts them, the error kept otherwise).
  e. ncu_*: Nsight Compute tensor-op counts of attention calls whose key length is not a multiple of the tile
     (flash and cuDNN: decode over 4000 keys, prefill over 4000 keys, the video twin's 16-frame temporal
     attention) and of one e4m3 _scaled_mm; each target also gets a profiler trace and a meta here.

Flex annotation convention (item c2), one ``torch.profiler.record_function`` around the flex_attention call::

    flex_blocks:partial=P,full=F,mask_bh=MBxMH,q_blocks=NQ,kv_blocks=NK,block=BQxBK

P and F are ``block_mask.kv_num_blocks.sum()`` and ``block_mask.full_kv_num_blocks.sum()`` (F=0 without full
blocks) over the mask's own [MB, MH, NQ] tensors; a mask built with B=None/H=None has MB = MH = 1 and is broadcast
over the call's batch and heads, so the call visits (P + F) * B * H / (MB * MH) blocks of BQ x BK.
The name holds no "attention"/"attn"/"flash" on purpose: the tool's default annotation pattern would take such a
record_function for an attention scope (and name the site after it) instead of the module around it.

Output, all under OUT: traces/<workload>/<workload>.<ts>.pt.trace.json.gz (TensorBoard layout, 1 warm-up + 2
active steps, record_shapes + with_stack), meta/<workload>.json (exact shapes, lengths, block counts, FLOPs,
unprofiled step times by CUDA events: median of TIMED steps, kernel time per step from the trace, status / error /
traceback), ncu/r4.ncu-rep + ncu/r4.csv (raw page) + ncu/status.jsonl, summary.json (items, status, wall) and
log.txt.

    python3 validation/round4_model.py --out OUT [--budget 200] [--only a,b] [--device cpu --small]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from functools import partial
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import workloads as W  # noqa: E402  (first: it imports the family modules below)

# isort: split
import round3_workloads as R  # noqa: E402
import twins as T  # noqa: E402
from modern_workloads import RMSNorm  # noqa: E402

from trace_workloads import env_info, kernels_from_trace, profile_steps, step_times_ms, sync  # noqa: E402

TIMED = 15
WARMUP = 3
ACTIVE = 2
FLEX_TAG = "flex_blocks"  # no "attention"/"attn" in it: the default annotation pattern would make it a scope
NCU_KERNELS = "regex:flash|fmha|sdpa|cudnn|attention|attn|gemm|nvjet|cutlass|xmma|scaled|sm90"
NCU_METRICS = [
    "gpu__time_duration.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16.sum",
    "sm__ops_path_tensor_src_fp8.sum",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
]
NCU_METRICS_FALLBACK = ["gpu__time_duration.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"]

T0 = time.time()
LOGF: Any = None


def log(msg: str) -> None:
    line = f"[round4 {time.time() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    if LOGF is not None:
        LOGF.write(line + "\n")
        LOGF.flush()


def cuda(device: str) -> bool:
    return device.startswith("cuda")


def dtype_of(device: str) -> torch.dtype:
    return torch.bfloat16 if cuda(device) else torch.float32


def write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def free(device: str) -> None:
    if cuda(device):
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# one workload: warm up, time unprofiled steps, profile, write its meta
# ---------------------------------------------------------------------------


class Ctx:
    def __init__(self, out: str, device: str, small: bool, info: dict):
        self.out, self.device, self.small, self.info = out, device, small, info
        self.records: list[dict] = []


def record(
    ctx: Ctx,
    name: str,
    step: Callable[[], Any],
    meta: dict,
    *,
    profile: bool = True,
    warmup: int = WARMUP,
    timed: int = TIMED,
) -> dict:
    """Warm up, time ``timed`` unprofiled steps (CUDA events), profile ACTIVE steps, write meta/<name>.json."""
    t0 = time.time()
    m: dict[str, Any] = {"workload": name, "status": "error", "env": ctx.info, **meta}
    try:
        for _ in range(warmup):
            step()
        sync(ctx.device)
        m["warmup_s"] = round(time.time() - t0, 2)
        ms = step_times_ms(step, timed, ctx.device)
        m["step_ms"] = ms
        m["step_ms_median"] = statistics.median(ms)
        m["step_ms_basis"] = "CUDA events around each unprofiled step" if cuda(ctx.device) else "host clock"
        if profile:
            tdir = os.path.join(ctx.out, "traces", name)
            files = profile_steps(step, tdir, name, ctx.device, active=ACTIVE)
            m["trace_files"] = [os.path.relpath(f, ctx.out) for f in files]
            m["active_steps"] = ACTIVE
            if files:
                ks = kernels_from_trace(files[-1])
                m["n_kernels"] = len(ks)
                m["gpu_kernel_ms_per_step"] = sum(k["dur_us"] or 0 for k in ks) / ACTIVE / 1e3
                by: dict[str, list] = {}
                for k in ks:
                    e = by.setdefault(k["name"], [0, 0.0])
                    e[0] += 1
                    e[1] += k["dur_us"] or 0
                m["kernels"] = {n: {"count": c, "us": round(u, 2)} for n, (c, u) in by.items()}
        m["status"] = "ok"
    except Exception as e:  # one workload failing must not stop the run
        m["error"] = f"{type(e).__name__}: {e}"[:3000]
        m["traceback"] = traceback.format_exc()[-6000:]
    m["wall_s"] = round(time.time() - t0, 2)
    write_json(os.path.join(ctx.out, "meta", f"{name}.json"), m)
    ctx.records.append({k: m.get(k) for k in ("workload", "status", "step_ms_median", "wall_s", "error")})
    log(
        f"{name}: {m['status']} step={m.get('step_ms_median', float('nan')):.3f}ms "
        f"kernel_ms/step={m.get('gpu_kernel_ms_per_step', float('nan')):.3f} wall={m['wall_s']}s"
        + (f" ERROR {m['error'][:200]}" if m["status"] != "ok" else "")
    )
    return m


def failed(ctx: Ctx, name: str, meta: dict, exc: BaseException) -> None:
    """A workload whose build failed: its meta still records what was asked and why it failed."""
    m = {"workload": name, "status": "error", "env": ctx.info, **meta}
    m["error"] = f"{type(exc).__name__}: {exc}"[:3000]
    m["traceback"] = traceback.format_exc()[-6000:]
    write_json(os.path.join(ctx.out, "meta", f"{name}.json"), m)
    ctx.records.append({"workload": name, "status": "error", "error": m["error"]})
    log(f"{name}: build FAILED {m['error'][:300]}")


# ---------------------------------------------------------------------------
# a. the FFN boundary on a GPU-bound step
# ---------------------------------------------------------------------------


def ffn_meta(B, S, hidden, heads, compiled, dt, **extra):
    return dict(
        kind="ffn_boundary_block",
        compiled=compiled,
        B=B,
        S=S,
        hidden=hidden,
        heads=heads,
        head_dim=hidden // heads,
        ffn=4 * hidden,
        dtype=W._dt_name(dt),
        causal=True,
        pass_="fwd",
        module="FfnBoundaryBlock/LlamaBlockAttention",
        **extra,
    )


def item_a_gpu_bound(ctx: Ctx) -> None:
    B, S = (8, 4096) if not ctx.small else (2, 64)
    for compiled in (False, True):
        name = f"ffn_block_b{B}_s{S}_{'compiled' if compiled else 'eager'}"
        try:
            wl = T.build_ffn_block(ctx.device, False, compiled=compiled, B=B, S=S, **_ffn_small(ctx))
        except Exception as e:
            failed(ctx, name, dict(B=B, S=S, compiled=compiled), e)
            continue
        wl.meta["twin_of"] = "ffn_block_eager/ffn_block_compiled (validation/twins.py) at a GPU-bound size"
        record(ctx, name, wl.step, wl.meta)
        del wl
        free(ctx.device)


def _ffn_small(ctx: Ctx) -> dict:
    return dict(hidden=64, heads=4) if ctx.small else {}


def _graphed(mod: nn.Module, x: torch.Tensor) -> Callable[[], Any]:
    """The eager module captured into one CUDA graph by hand (static input x): step() replays it."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            mod(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        out = mod(x)
    keep = (g, out)

    def step():
        keep[0].replay()
        return keep[1]

    return step


def _reset_then(make: Callable[[], Any]) -> Any:
    """Dynamo's caches cleared first: the same module compiled again in another mode must not reuse the
    default-mode entry."""
    torch._dynamo.reset()
    return make()


def item_a_graphs(ctx: Ctx) -> None:
    """The twin's own size (B 2, S 2048) with the host out of the step: eager captured in a CUDA graph vs compile
    mode="reduce-overhead"; the plain eager and compiled steps timed again here for the same-session baseline."""
    B, S, hidden, heads = (2, 2048, 1024, 16) if not ctx.small else (1, 32, 64, 4)
    dt = dtype_of(ctx.device)
    torch.manual_seed(0)
    mod = T.FfnBoundaryBlock(hidden, heads).to(device=ctx.device, dtype=dt).eval()
    x = torch.randn(B, S, hidden, device=ctx.device, dtype=dt)

    def plain(fn):
        def step():
            with torch.no_grad():
                return fn(x)

        return step

    variants: list[tuple[str, Callable[[], Callable[[], Any]], bool, str]] = [
        ("eager", lambda: plain(mod), False, "none"),
        ("compiled", lambda: plain(torch.compile(mod)), True, "none"),
    ]
    if cuda(ctx.device):
        variants += [
            ("eager_cudagraph", lambda: _graphed(mod, x), False, "torch.cuda.CUDAGraph captured by hand"),
            (
                "compiled_cudagraph",
                lambda: _reset_then(lambda: plain(torch.compile(mod, mode="reduce-overhead"))),
                True,
                'torch.compile(mode="reduce-overhead")',
            ),
        ]
    for tag, make, compiled, graphs in variants:
        name = f"ffn_block_b{B}_s{S}_{tag}"
        meta = ffn_meta(B, S, hidden, heads, compiled, dt, cuda_graphs=graphs)
        meta["twin_of"] = "ffn_block_eager/ffn_block_compiled (validation/twins.py), same size"
        try:
            step = make()
        except Exception as e:
            failed(ctx, name, meta, e)
            continue
        # the graphed traces have no module scope (replays); the plain ones are the twins' again
        record(ctx, name, step, meta)
        del step
    free(ctx.device)


# ---------------------------------------------------------------------------
# b. jagged SDPA, nested tensor built inside the step
# ---------------------------------------------------------------------------


def _jagged_step(mod: nn.Module, pieces: list, builder: str, bwd: bool) -> Callable[[], Any]:
    """A step that builds the nested tensor from its pieces (recorded: aten::cat of the pieces' shapes), then runs
    the module; fwd+bwd with a fixed upstream gradient, or a no_grad forward."""
    state: dict[str, Any] = {}

    def build():
        if builder == "nested_tensor":
            return torch.nested.nested_tensor(pieces, layout=torch.jagged, requires_grad=bwd)
        return torch.nested.as_nested_tensor(pieces, layout=torch.jagged)

    def step_bwd():
        for p in mod.parameters():
            p.grad = None
        out = mod(build()).values()
        g = state.get("g")
        if g is None:
            g = state["g"] = torch.randn_like(out)
        out.backward(g)
        return out

    def step_fwd():
        with torch.no_grad():
            return mod(build())

    return step_bwd if bwd else step_fwd


def item_b_jagged(ctx: Ctx) -> None:
    H, D, lens = (16, 64, list(R.JAGGED_LENGTHS)) if not ctx.small else (2, 16, [8, 24, 40])
    dt = dtype_of(ctx.device)
    E = H * D
    for builder, bwd in (("nested_tensor", False), ("nested_tensor", True), ("as_nested_tensor", False)):
        name = f"jagged_build_{'nt' if builder == 'nested_tensor' else 'asnt'}_{'fwdbwd' if bwd else 'fwd'}"
        meta = dict(
            kind="jagged_sdpa",
            layout="torch.jagged",
            built_in_step=f"torch.nested.{builder}(pieces, layout=torch.jagged)",
            lengths=lens,
            offsets=[0] + [sum(lens[: i + 1]) for i in range(len(lens))],
            total_tokens=sum(lens),
            B=len(lens),
            H=H,
            D=D,
            E=E,
            dtype=W._dt_name(dt),
            causal=False,
            useful_flops_fwd=sum(4 * n * n * H * D for n in lens),
            pass_="fwd+bwd" if bwd else "fwd",
            module="JaggedAttention",
        )
        try:
            torch.manual_seed(0)
            mod = R.JaggedAttention(E, H).to(device=ctx.device, dtype=dt).train(bwd)
            pieces = [torch.randn(n, E, device=ctx.device, dtype=dt) for n in lens]
            step = _jagged_step(mod, pieces, builder, bwd)
        except Exception as e:
            failed(ctx, name, meta, e)
            continue
        record(ctx, name, step, meta)
        del mod, pieces, step
    free(ctx.device)


# ---------------------------------------------------------------------------
# c. Flex with a document mask: block counts
# ---------------------------------------------------------------------------


def flex_tag(bm, B: int, H: int) -> tuple[str, dict]:
    """The annotation of the convention in the module docstring, and the true counts for the meta."""
    kv = bm.kv_num_blocks
    p = int(kv.sum().item())
    f = int(bm.full_kv_num_blocks.sum().item()) if bm.full_kv_num_blocks is not None else 0
    mb, mh, nq = (int(s) for s in kv.shape)
    nk = int(bm.kv_indices.shape[-1])
    bq, bk = (int(s) for s in bm.BLOCK_SIZE)
    tag = f"{FLEX_TAG}:partial={p},full={f},mask_bh={mb}x{mh},q_blocks={nq},kv_blocks={nk},block={bq}x{bk}"
    scale = B * H // (mb * mh)
    counts = dict(
        kv_blocks_partial=p,
        kv_blocks_full=f,
        mask_shape=[mb, mh, nq],
        kv_indices_shape=[int(s) for s in bm.kv_indices.shape],
        q_blocks=nq,
        kv_blocks=nk,
        block_size=[bq, bk],
        blocks_visited_per_call=(p + f) * scale,
        blocks_dense_per_call=nq * nk * B * H,
        partial_blocks_per_call=p * scale,
        full_blocks_per_call=f * scale,
        sparsity_pct=float(bm.sparsity()),
    )
    return tag, counts


class AnnotatedDocumentFlexAttention(R.DocumentFlexAttention):
    """round3's DocumentFlexAttention with the flex call inside the record_function of the convention."""

    tag = FLEX_TAG

    def forward(self, x, block_mask):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        with torch.profiler.record_function(self.tag):
            o = self.flex(q, k, v, block_mask=block_mask)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, e))


def item_c_flex(ctx: Ctx) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, D, docs = (2, 16, 64, list(R.FLEX_DOCS)) if not ctx.small else (1, 2, 16, [128, 64, 64])
    S = sum(docs)
    dt = dtype_of(ctx.device)
    doc_id = torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(docs)]).to(ctx.device)

    def doc_causal(b, h, qi, ki):
        return (qi >= ki) & (doc_id[qi] == doc_id[ki])

    base = dict(
        kind="flex",
        B=B,
        H=H,
        S=S,
        D=D,
        dtype=W._dt_name(dt),
        mask="causal & same document",
        documents=docs,
        useful_flops_fwd=sum(2 * n * (n + 1) * H * D for n in docs) * B,
        dense_flops_fwd=4 * S * S * H * D * B,
        pass_="fwd+bwd",
        module="DocumentFlexAttention",
        annotation_convention=f"{FLEX_TAG}:partial=P,full=F,mask_bh=MBxMH,q_blocks=NQ,kv_blocks=NK,block=BQxBK",
    )
    bwd = cuda(ctx.device)  # Flex has no backward on a CPU: the dry run does the forward
    base["pass_"] = "fwd+bwd" if bwd else "fwd"
    cflex = torch.compile(flex_attention, dynamic=False)
    for variant in ("mask_in_step", "annotated"):
        name = f"flex_doc_{'fwdbwd' if bwd else 'fwd'}_{variant}"
        meta = dict(base)
        try:
            torch.manual_seed(0)
            bm = create_block_mask(doc_causal, None, None, S, S, device=ctx.device)
            tag, counts = flex_tag(bm, B, H)
            meta.update(counts)
            if variant == "annotated":
                mod = AnnotatedDocumentFlexAttention(H * D, H, cflex)
                mod.tag = tag
                meta["annotation"] = tag
                meta["mask_built"] = "once, before the steps"
            else:
                mod = R.DocumentFlexAttention(H * D, H, cflex)
                meta["annotation"] = None
                meta["mask_built"] = "create_block_mask(doc_causal, None, None, S, S) inside every step"
            mod = mod.to(device=ctx.device, dtype=dt).train(bwd)
            x = W._rand((B, S, H * D), dt, ctx.device, bwd)
            if variant == "annotated":
                fwd = partial(mod, x, bm)
            else:

                def fwd(mod=mod, x=x):
                    return mod(x, create_block_mask(doc_causal, None, None, S, S, device=ctx.device))

            step = W._train_or_infer(mod, fwd, bwd, (x,))
        except Exception as e:
            failed(ctx, name, meta, e)
            continue
        record(ctx, name, step, meta)
        del mod, x, step
    free(ctx.device)


# ---------------------------------------------------------------------------
# d. FP8: e4m3 _scaled_mm projections; FP8 attention probes
# ---------------------------------------------------------------------------

E4M3 = getattr(torch, "float8_e4m3fn", None)
E4M3_MAX = 448.0


class Fp8Linear(nn.Module):
    """y = x W^T by torch._scaled_mm in e4m3: W quantised once (per-tensor scale), x quantised in every call from
    its amax (per-tensor), bf16 out.  On a CPU dry run the same arithmetic in fp32 (no _scaled_mm)."""

    def __init__(self, fin: int, fout: int, device: str, dt: torch.dtype):
        super().__init__()
        w = torch.randn(fout, fin, device=device, dtype=torch.float32) / math.sqrt(fin)
        self.fin, self.fout, self.dt, self.fp8 = fin, fout, dt, cuda(device) and E4M3 is not None
        ws = (w.abs().amax() / E4M3_MAX).clamp(min=1e-12)
        self.register_buffer("w_scale", ws.float().reshape(()))
        self.register_buffer("w", (w / ws).to(E4M3) if self.fp8 else w.to(dt))

    def forward(self, x):
        x2 = x.reshape(-1, self.fin)
        if not self.fp8:
            return (x2 @ self.w.t()).reshape(*x.shape[:-1], self.fout)
        sa = (x2.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
        xq = (x2 / sa).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)  # the cast does not saturate: >448 would be NaN
        y = torch._scaled_mm(xq, self.w.t(), scale_a=sa, scale_b=self.w_scale, out_dtype=self.dt)
        return y.reshape(*x.shape[:-1], self.fout)


def _linear_maker(fp8: bool, device: str, dt: torch.dtype) -> Callable[[int, int], nn.Module]:
    """Fp8Linear, or for the bf16 twin an nn.Linear made on the device in its dtype (no CPU init of ~1 GB)."""
    if fp8:
        return lambda i, o: Fp8Linear(i, o, device, dt)
    return lambda i, o: nn.Linear(i, o, bias=False, device=device, dtype=dt)


class Fp8Attention(nn.Module):
    """q/k/v/o projections as Fp8Linear (or nn.Linear for the bf16 twin), causal SDPA in bf16 between them."""

    def __init__(self, hidden: int, heads: int, fp8: bool, device: str, dt: torch.dtype):
        super().__init__()
        self.h = heads
        mk = _linear_maker(fp8, device, dt)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (mk(hidden, hidden) for _ in range(4))

    def forward(self, x):
        b, s, e = x.shape

        def heads(t):
            return t.view(b, s, self.h, e // self.h).transpose(1, 2)

        o = F.scaled_dot_product_attention(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)), is_causal=True
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, s, e))


class Fp8Block(nn.Module):
    """A Llama-like block (RMSNorm, attention, RMSNorm, SiLU-gated FFN) whose seven projections are FP8."""

    def __init__(self, hidden: int, heads: int, ffn: int, fp8: bool, device: str, dt: torch.dtype):
        super().__init__()
        mk = _linear_maker(fp8, device, dt)
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = Fp8Attention(hidden, heads, fp8, device, dt)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj, self.up_proj, self.down_proj = mk(hidden, ffn), mk(hidden, ffn), mk(ffn, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def item_d_fp8(ctx: Ctx) -> None:
    B, S, hidden, heads, ffn = (4, 2048, 4096, 32, 16384) if not ctx.small else (1, 32, 64, 4, 128)
    dt = dtype_of(ctx.device)
    M = B * S
    mms = [("q_proj", M, hidden, hidden), ("k_proj", M, hidden, hidden), ("v_proj", M, hidden, hidden)]
    mms += [("o_proj", M, hidden, hidden), ("gate_proj", M, ffn, hidden), ("up_proj", M, ffn, hidden)]
    mms += [("down_proj", M, hidden, ffn)]
    D = hidden // heads
    attn_dense = 4 * B * heads * S * S * D
    attn_useful = 2 * B * heads * S * (S + 1) * D
    for fp8 in (True, False):
        name = f"fp8_block_fwd_{'e4m3' if fp8 else 'bf16'}"
        meta = dict(
            kind="fp8_block" if fp8 else "bf16_block",
            B=B,
            S=S,
            hidden=hidden,
            heads=heads,
            head_dim=D,
            ffn=ffn,
            dtype=W._dt_name(dt),
            projections="e4m3 torch._scaled_mm, per-tensor scales, bf16 out" if fp8 else "bf16 nn.Linear",
            fp8_active=bool(fp8 and cuda(ctx.device) and E4M3 is not None),
            attention="bf16 SDPA is_causal=True (flash)",
            matmuls=[dict(name=n, M=m, N=nn_, K=k, flops=2 * m * nn_ * k) for n, m, nn_, k in mms],
            matmul_flops=sum(2 * m * nn_ * k for _, m, nn_, k in mms),
            attention_flops_useful=attn_useful,
            attention_flops_dense=attn_dense,
            roof_e4m3_scaled_mm_tflops_measured=1467,
            causal=True,
            pass_="fwd",
            module="Fp8Block/Fp8Attention",
        )
        try:
            torch.manual_seed(0)
            mod = Fp8Block(hidden, heads, ffn, fp8, ctx.device, dt).eval()
            # not mod.to(dtype=...): float8 counts as floating point, so it would cast the e4m3 weights (and their
            # fp32 scales) to bf16; only the norms and the bf16 twin's nn.Linear layers are moved and cast
            for sub in mod.modules():
                if isinstance(sub, (RMSNorm, nn.Linear)):
                    sub.to(device=ctx.device, dtype=dt)
            x = torch.randn(B, S, hidden, device=ctx.device, dtype=dt)

            def step(mod=mod, x=x):
                with torch.no_grad():
                    return mod(x)

        except Exception as e:
            failed(ctx, name, meta, e)
            continue
        record(ctx, name, step, meta)
        del mod, x, step
        free(ctx.device)


def item_d_fp8_attention(ctx: Ctx) -> None:
    """FP8 attention itself: does torch run e4m3 q/k/v?  SDPA (whatever backend it picks) and compiled Flex.  Run
    last: an unsupported path is expected to raise, but one that faults would poison the CUDA context."""
    dt = dtype_of(ctx.device)
    if not cuda(ctx.device) or E4M3 is None:
        log("fp8 attention probes: CUDA only, skipped")
        return
    Bq, Hq, Sq, Dq = 4, 32, 2048, 128
    q, k, v = (torch.randn(Bq, Hq, Sq, Dq, device=ctx.device, dtype=dt).to(E4M3) for _ in range(3))
    from torch.nn.attention.flex_attention import flex_attention

    probes: list[tuple[str, Callable[[], Any]]] = [
        ("fp8_attn_sdpa_e4m3", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    ]
    cflex = torch.compile(flex_attention, dynamic=False)
    probes.append(("fp8_attn_flex_e4m3", lambda: cflex(q, k, v)))
    for name, fn in probes:
        meta = dict(
            kind="fp8_attention_probe",
            B=Bq,
            H=Hq,
            S=Sq,
            D=Dq,
            dtype="float8_e4m3fn",
            causal=name.endswith("sdpa_e4m3"),
            flops_dense=4 * Bq * Hq * Sq * Sq * Dq,
            module="FP8 attention probe (no module)",
        )
        try:
            with torch.no_grad():
                fn()
            sync(ctx.device)
        except Exception as e:
            failed(ctx, name, meta, e)
            continue

        def step(fn=fn):
            with torch.no_grad():
                return fn()

        record(ctx, name, step, meta)
    free(ctx.device)


# ---------------------------------------------------------------------------
# e. Nsight Compute: tensor-op counts where the key length is not a multiple of the tile
# ---------------------------------------------------------------------------


def ncu_targets(device: str, small: bool) -> dict[str, tuple[Callable[[], Any], dict]]:
    """name -> (step, meta); inputs made here, so a step is only the measured call(s)."""
    dt = dtype_of(device)
    out: dict[str, tuple[Callable[[], Any], dict]] = {}
    shapes = {
        "decode_k4000": dict(B=8, H=16, Sq=1, Sk=4000, D=128, causal=False),
        "prefill_k4000": dict(B=1, H=16, Sq=4000, Sk=4000, D=128, causal=False),
        "temporal16": dict(B=512, H=8, Sq=16, Sk=16, D=64, causal=False),
    }
    if small:
        shapes = {k: dict(v, B=1, H=2, Sq=min(v["Sq"], 8), Sk=min(v["Sk"], 40), D=16) for k, v in shapes.items()}
    for sname, s in shapes.items():
        for backend in ("flash", "cudnn"):
            q = torch.randn(s["B"], s["H"], s["Sq"], s["D"], device=device, dtype=dt)
            k = torch.randn(s["B"], s["H"], s["Sk"], s["D"], device=device, dtype=dt)
            v = torch.randn_like(k)
            be = backend if cuda(device) else None

            def step(q=q, k=k, v=v, be=be, causal=s["causal"]):
                with torch.no_grad(), W.sdpa_kernel_ctx(be):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            meta = dict(
                kind="sdpa_core",
                backend=backend,
                dtype=W._dt_name(dt),
                pass_="fwd",
                flops_math=4 * s["B"] * s["H"] * s["Sq"] * s["Sk"] * s["D"],
                note="key length not a multiple of the kernel's key tile",
                **s,
            )
            out[f"ncu_{backend}_{sname}"] = (step, meta)
    # one e4m3 GEMM of the FP8 block (its up_proj): the fp8 tensor-op count against 2*M*N*K
    M, N, K = (8192, 16384, 4096) if not small else (32, 64, 32)
    lin = Fp8Linear(K, N, device, dt)
    x = torch.randn(M, K, device=device, dtype=dt)

    def mm_step():
        with torch.no_grad():
            return lin(x)

    out["ncu_fp8_scaled_mm"] = (
        mm_step,
        dict(kind="fp8_scaled_mm", M=M, N=N, K=K, flops_math=2 * M * N * K, dtype="float8_e4m3fn", out="bfloat16"),
    )
    return out


def ncu_child(out: str, device: str, small: bool, names: list[str]) -> int:
    """Inside ncu: each target warmed up, then one step between cudaProfilerStart/Stop in an NVTX range."""
    status = os.path.join(out, "ncu", "status.jsonl")
    os.makedirs(os.path.dirname(status), exist_ok=True)
    targets = ncu_targets(device, small)
    cudart = torch.cuda.cudart() if cuda(device) else None
    for name in names:
        rec: dict[str, Any] = {"workload": name, "status": "error", "t": time.time()}
        try:
            step, meta = targets[name]
            for _ in range(3):
                step()
            sync(device)
            if cudart is not None:
                cudart.cudaProfilerStart()
                torch.cuda.nvtx.range_push(name)
            step()
            sync(device)
            if cudart is not None:
                torch.cuda.nvtx.range_pop()
                cudart.cudaProfilerStop()
            rec.update(status="ok", meta=meta)
        except Exception as e:
            if cudart is not None:
                try:
                    cudart.cudaProfilerStop()
                except Exception:
                    pass
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            rec["traceback"] = traceback.format_exc()[-3000:]
        with open(status, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        print(f"[round4 ncu child] {name}: {rec['status']} {rec.get('error', '')[:200]}", flush=True)
    return 0


def sh(cmd: list[str], timeout: float, logpath: str) -> int:
    """Run cmd in its own process group (killed as a group on timeout), output appended to logpath."""
    with open(logpath, "a") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            lf.write(f"TIMEOUT after {timeout:.0f}s, process group {p.pid} killed\n")
            return 124


def item_e_ncu(ctx: Ctx, deadline: float) -> None:
    targets = ncu_targets(ctx.device, ctx.small)
    # the same calls as profiler traces + metas (cheap), so the ledger can be joined with the ncu rows
    for name, (step, meta) in targets.items():
        if time.time() > deadline - 25:
            log(f"{name}: trace skipped (budget)")
            break
        record(ctx, name, step, dict(meta, ncu_target=True), timed=12)
    del targets
    free(ctx.device)
    names = list(ncu_targets_names(ctx))
    ncu_dir = os.path.join(ctx.out, "ncu")
    os.makedirs(ncu_dir, exist_ok=True)
    logp = os.path.join(ncu_dir, "ncu.log")
    child = [sys.executable, os.path.abspath(__file__), "--ncu-child", "--out", ctx.out, "--targets", ",".join(names)]
    if ctx.small:
        child += ["--small"]
    if not cuda(ctx.device):
        child += ["--device", "cpu"]
        rc = sh(child, deadline - time.time(), logp)
        log(f"ncu (dry run, no ncu on a CPU): child rc={rc}")
        return
    rep = os.path.join(ncu_dir, "r4")
    for metrics in (NCU_METRICS, NCU_METRICS_FALLBACK):
        left = deadline - time.time() - 10
        if left < 15:
            log("ncu skipped (budget)")
            return
        if os.path.exists(os.path.join(ncu_dir, "status.jsonl")):
            os.remove(os.path.join(ncu_dir, "status.jsonl"))
        cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--replay-mode", "kernel"]
        cmd += ["--target-processes", "application-only", "--nvtx", "-k", NCU_KERNELS, "--launch-count", "40"]
        cmd += ["-f", "-o", rep, "--metrics", ",".join(metrics)] + child
        t = time.time()
        rc = sh(cmd, left, logp)
        log(f"ncu rc={rc} {time.time() - t:.1f}s metrics={len(metrics)}")
        if os.path.exists(rep + ".ncu-rep"):
            exp = ["ncu", "--import", rep + ".ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]
            exp += ["--print-kernel-base", "demangled"]
            with open(rep + ".csv", "w") as f:
                e = subprocess.run(exp, stdout=f, stderr=subprocess.PIPE, text=True, timeout=60)
            log(f"ncu export rc={e.returncode} {os.path.getsize(rep + '.csv')} bytes {e.stderr[-300:]}")
            if rc == 0:
                return
        else:
            log(f"ncu wrote no report (rc={rc}); see ncu/ncu.log")


def ncu_targets_names(ctx: Ctx) -> list[str]:
    names = []
    for s in ("decode_k4000", "prefill_k4000", "temporal16"):
        names += [f"ncu_flash_{s}", f"ncu_cudnn_{s}"]
    return names + ["ncu_fp8_scaled_mm"]


# ---------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------

# (key, function, estimated seconds on an H200 with a cold Inductor cache)
ITEMS: list[tuple[str, Callable[..., None], float]] = [
    ("a_gpu_bound", item_a_gpu_bound, 35),
    ("a_graphs", item_a_graphs, 35),
    ("b_jagged", item_b_jagged, 8),
    ("c_flex", item_c_flex, 40),
    ("d_fp8", item_d_fp8, 20),
    ("e_ncu", item_e_ncu, 45),
    ("d_fp8_attention", item_d_fp8_attention, 15),
]


def main(argv=None) -> int:
    global LOGF
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=200.0, help="seconds of wall from this process's start")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a CPU dry run of the control flow)")
    ap.add_argument("--only", default="", help="comma list of item keys or their letters (a,b,c,d,e)")
    ap.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--targets", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    if a.ncu_child:
        return ncu_child(a.out, a.device, a.small, [n for n in a.targets.split(",") if n])
    os.makedirs(a.out, exist_ok=True)
    LOGF = open(os.path.join(a.out, "log.txt"), "a")
    deadline = T0 + a.budget
    info = env_info()
    ctx = Ctx(a.out, a.device, a.small, info)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    summary: dict[str, Any] = {"env": info, "budget_s": a.budget, "device": a.device, "small": a.small, "items": []}
    log(f"start device={a.device} small={a.small} budget={a.budget}s torch={torch.__version__}")
    for key, fn, est in ITEMS:
        if only and key not in only and key[0] not in only:
            continue
        left = deadline - time.time()
        it: dict[str, Any] = {"item": key, "estimate_s": est}
        if left < est * (0.3 if a.small else 1.0):
            it["status"] = "skipped (budget)"
            log(f"{key}: skipped, {left:.0f}s left < ~{est}s")
        else:
            t = time.time()
            n0 = len(ctx.records)
            try:
                torch._dynamo.reset()  # each item compiles afresh (as the twins' own processes did), static shapes
                fn(ctx, deadline) if key == "e_ncu" else fn(ctx)
                it["status"] = "done"
            except Exception as e:  # an item failing outside its workloads: logged, the run goes on
                it["status"] = "error"
                it["error"] = f"{type(e).__name__}: {e}"[:3000]
                it["traceback"] = traceback.format_exc()[-6000:]
                log(f"{key}: FAILED {it['error'][:300]}")
            it["wall_s"] = round(time.time() - t, 1)
            it["workloads"] = ctx.records[n0:]
            free(a.device)
        summary["items"].append(it)
        summary["wall_s"] = round(time.time() - T0, 1)
        write_json(os.path.join(a.out, "summary.json"), summary)
    log(f"done in {time.time() - T0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
