# mypy: ignore-errors
# The body of the script that `tb-attention replay --emit` writes (replay/emit.py puts the calls of a
# trace, as JSON, in front of it). It must run where only torch is installed: it imports nothing
# from tb-attention, reads no file and needs no model code, weights or data — only shapes.
"""Replay the attention calls of a PyTorch profiler trace under every backend that accepts them.

Each call is rebuilt with random inputs of the recorded shapes, strides, dtypes and flags and timed
(CUDA events, warm-up, median of repeats) under: SDPA's flash, mem-efficient, cuDNN and math
backends (torch.nn.attention.sdpa_kernel), the eager pattern as recorded, FlexAttention (compiled)
with the equivalent mask, and torch.compile of the eager pattern — forward, and backward where the
trace had it. Each backend's output (and gradients) are compared with the math backend's; a
backend that refuses the inputs is recorded with its reason. Kernel time (the sum of GPU kernel
durations, the measure of the trace) comes from one torch.profiler pass per call.

Results: ``<trace file>.replay.json`` per trace (in --out-dir); put it beside the trace and
``tb-attention analyze`` uses the measured times in its advice.

    python THIS_SCRIPT.py                 # on the machine with the GPU
    python THIS_SCRIPT.py --list          # what it would run
    python THIS_SCRIPT.py --device cpu --scale-down   # test the script's logic at tiny shapes
"""

import argparse
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
import warnings

PAYLOAD = None  # the calls: replay/emit.py writes them here

REPLAY_SCHEMA = 1
LABELS = {
    "flash": "SDPA FlashAttention",
    "efficient": "SDPA mem-efficient",
    "cudnn": "SDPA cuDNN",
    "math": "SDPA math",
    "eager": "eager (as recorded)",
    "compiled": "torch.compile (eager pattern)",
    "flex": "FlexAttention (compiled)",
}
COMPILED = ("flex", "compiled")
TOLERANCE = {"bf16": 4e-2, "fp16": 1e-2, "fp32": 5e-3, "fp64": 1e-6}  # max |x - math| / max |math|
DEFAULT_BUDGET_S = 75.0  # the default run (the calls carrying most of the time) ends in about a minute
DEFAULT_SHARE = 0.8  # the default calls: the longest ones up to this share of the trace's attention time...
DEFAULT_MAX_CALLS = 6  # ...and at most this many
# what one backend of one call costs, for the estimate the script prints (seconds; measured on an H100:
# warm-up, 10 repeats of >= 1 ms and the profiler pass; a compiled backend adds its compilation)
SECONDS_PER_BACKEND = {"compiled": 20.0, "flex": 20.0}
SECONDS_PER_BACKEND_DEFAULT = 1.5


class Refused(Exception):
    """The backend does not accept these inputs (the reason is its own message)."""


def _one_line(s, n=300):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--scale-down", action="store_true", help="tiny shapes, to test the script (results are marked)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    ap.add_argument("--repeats", type=int, default=10, help="timed measurements; the median is kept (default 10)")
    ap.add_argument(
        "--min-time-ms", type=float, default=1.0, help="each measurement repeats the call until it lasts this long"
    )
    ap.add_argument("--backends", default="", help="comma list (flash,efficient,cudnn,math,eager,compiled,flex)")
    ap.add_argument("--calls", default="", help="comma list of call ids (default: all)")
    ap.add_argument("--no-compile", action="store_true", help="skip FlexAttention and torch.compile")
    ap.add_argument("--no-profile", action="store_true", help="skip the torch.profiler pass (no kernel times)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no call or backend after this many seconds, so the run ends within one measurement of it "
        f"(default {DEFAULT_BUDGET_S:g} s for the calls picked by default, none with --all; 0: none)",
    )
    ap.add_argument(
        "--all",
        action="store_true",
        help="every call (default: the calls that carry most of the trace's attention time, about a minute's work)",
    )
    ap.add_argument("--out-dir", default=".", help="where the .replay.json files go (default: here)")
    ap.add_argument("--list", action="store_true", help="print the calls and exit")
    ap.add_argument(
        "--isolate",
        choices=("auto", "yes", "no"),
        default="auto",
        help="run each call in a process of its own (auto: on a GPU): a CUDA fault in one backend (an illegal "
        "memory access poisons the process's CUDA context) then costs that backend only, not the calls after it",
    )
    ap.add_argument("--child-json", help=argparse.SUPPRESS)  # a child of --isolate: its results go here
    ap.add_argument("--crash-on", help=argparse.SUPPRESS)  # tests of --isolate: this backend ends the process
    return ap.parse_args(argv)


# ------------------------------------------------------------------ shapes


def _layout_order(shape, stride):
    """Dims from outermost to innermost as the recorded strides lay them out."""
    n = len(shape)
    if not stride or len(stride) != n:
        return list(range(n))
    return sorted(range(n), key=lambda i: (-stride[i], -i if shape[i] == 1 else i))


def _contiguous_in(shape, order, zero=()):
    st = [0] * len(shape)
    acc = 1
    for i in reversed(order):
        if i in zero:
            st[i] = 0
            continue
        st[i] = acc
        acc *= max(1, shape[i])
    return st


def _scale_down(call):
    """A copy of the call at tiny shapes with the same layouts (dims in the same memory order)."""
    c = json.loads(json.dumps(call))
    kind = c["kind"]
    det = c.get("detail") or {}

    def resize(key, new):
        old, st = c[key], c.get(key.replace("shape", "stride"))
        zero = {i for i, s in enumerate(st or []) if s == 0 and old[i] != 1}
        c[key.replace("shape", "stride")] = _contiguous_in(new, _layout_order(old, st), zero)
        c[key] = new

    if kind in ("sdpa", "decode", "flex") or (kind == "eager" and len(c["q_shape"]) == 4):
        b, h, sq, d = c["q_shape"]
        hk, sk, dv = c["k_shape"][1], c["k_shape"][2], c["v_shape"][3]
        nb, nh = 1, 2
        nhk = nh if hk == h else 1
        nsq = sq if sq <= 16 else 32
        nsk = nsq if sk == sq else max(nsq, min(sk, 64))
        nd, ndv = min(d, 16), min(dv, 16)
        resize("q_shape", [nb, nh, nsq, nd])
        resize("k_shape", [nb, nhk, nsk, nd])
        resize("v_shape", [nb, nhk, nsk, ndv])
        dims = {"b": (b, nb), "h": (h, nh), "sq": (sq, nsq), "sk": (sk, nsk)}
        if det.get("kv_heads"):  # repeat_kv before an eager call: 2 query heads over 1 K/V head
            det["kv_heads"] = 1
        if "kv_len" in det:
            det["kv_len"], det["q_len"] = nsk, nsq
    elif kind == "eager":  # [B*H, S, D]
        bh, sq, d = c["q_shape"]
        sk, dv = c["k_shape"][1], c["v_shape"][2]
        nsq = sq if sq <= 16 else 32
        nsk = nsq if sk == sq else max(nsq, min(sk, 64))
        resize("q_shape", [2, nsq, min(d, 16)])
        resize("k_shape", [2, nsk, min(d, 16)])
        resize("v_shape", [2, nsk, min(dv, 16)])
        dims = {"b": (bh, 2), "h": (bh, 2), "sq": (sq, nsq), "sk": (sk, nsk)}
    elif kind == "varlen":
        n = min(det["sequences"], 3)
        mq, mk = min(det.get("max_q") or 16, 16), min(det.get("max_k") or 16, 16)
        tq, tk = n * mq - (n - 1) * (mq // 2), n * mk - (n - 1) * (mk // 2)
        nh, nhk = 2, 2 if det["kv_heads"] == det["heads"] else 1
        hd = min(det["head_dim"], 16)
        lead = [1] if len(c["q_shape"]) == 4 else []
        resize("q_shape", lead + [tq, nh, hd])
        resize("k_shape", lead + [tk, nhk, hd])
        resize("v_shape", lead + [tk, nhk, hd])
        det.update(sequences=n, total_q=tq, total_k=tk, max_q=mq, max_k=mk, heads=nh, kv_heads=nhk, head_dim=hd)
        dims = {}
    elif kind == "mha":
        first = 0 if det.get("batch_first") else 1
        shp = list(c["q_shape"])
        s_dim = 1 - first
        shp[first], shp[s_dim], shp[2] = 1, min(shp[s_dim], 16), 16
        for key in ("q_shape", "k_shape", "v_shape"):
            resize(key, list(shp))
        det["embed_dim"], det["num_heads"] = 16, 2
        dims = {}
    else:
        raise Refused(f"cannot scale down a {kind} call")
    m = c.get("mask")
    if m and m.get("shape") and dims and m.get("kind") != "block":
        old = m["shape"]
        new = list(old)
        pos = {-1: "sk", -2: "sq", -3: "h", -4: "b"}
        for i in range(1, min(len(old), 4) + 1):
            if old[-i] != 1:
                new[-i] = dims[pos[-i]][1]
        zero = {i for i, s in enumerate(m.get("stride") or []) if s == 0 and old[i] != 1}
        m["stride"] = _contiguous_in(new, _layout_order(old, m.get("stride")), zero)
        m["shape"] = new
    if kind == "flex":
        bm = det.get("block_mask") or {}
        if bm.get("mask_mod") == "sliding_window":
            bm["window"] = max(2, min(bm.get("window") or 8, 8))
        bm.pop("q_block", None)
        bm.pop("kv_block", None)
    c["scaled_down"] = True
    return c


# ------------------------------------------------------------------ the calls as torch code


class Call:
    """One call's inputs and its backends as closures over them."""

    def __init__(self, torch, spec, device, grad):
        self.torch, self.spec, self.device, self.grad = torch, spec, device, grad
        self.dt = _dtype(torch, spec["dtype"])
        self.kind = spec["kind"]
        self.det = spec.get("detail") or {}
        self.tensors = []  # the inputs gradients are taken for
        self.kg = self.vg = None  # K/V with the KV heads as recorded (GQA), where the eager form repeats them
        self._build()

    # inputs with the recorded strides: a buffer as long as the strides address, viewed
    def tensor(self, shape, stride, dtype=None, grad=False, fill="randn"):
        torch = self.torch
        dtype = dtype or self.dt
        if not stride or len(stride) != len(shape):
            stride = _contiguous_in(shape, list(range(len(shape))))
        size = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride)) if all(shape) else 0
        if dtype.is_floating_point:
            base = torch.randn(max(size, 1), device=self.device, dtype=dtype)
        else:
            base = torch.zeros(max(size, 1), device=self.device, dtype=dtype)
        x = base.as_strided(shape, stride).detach()
        if grad:
            x.requires_grad_(True)
        return x

    def _keep(self, sq, sk, device, bottom_right):
        torch = self.torch
        i = torch.arange(sq, device=device).view(-1, 1)
        j = torch.arange(sk, device=device).view(1, -1)
        return j <= i + (sk - sq if bottom_right else 0)

    def _mask_tensor(self, m, sq, sk):
        """The recorded mask's shape, strides and dtype, filled with a causal mask where the trace shows
        it is one, else keeping everything (its values are not recorded). bool: True = keep for SDPA,
        True = masked for masked_fill; float: additive."""
        torch = self.torch
        dt = _dtype(torch, m.get("dtype") or "bool")
        shape, stride = m["shape"], m.get("stride")
        mq, mk = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1] if shape else 1)
        if (mq, mk) == (sq, sk) and m.get("kind") == "causal_tensor":  # shown causal in the trace
            keep = self._keep(sq, sk, self.device, sq != sk)
        else:  # a key-padding or any other mask: its values are not recorded, keep everything
            keep = torch.ones(mq, mk, dtype=torch.bool, device=self.device)
        x = self.tensor(shape, stride, dtype=dt)
        full = keep.expand(*shape[:-2], mq, mk) if len(shape) >= 2 else keep.view(-1)
        if dt == torch.bool:
            val = ~full if m.get("apply") == "masked_fill" else full
        else:
            val = torch.zeros(full.shape, device=self.device, dtype=dt).masked_fill(~full, torch.finfo(dt).min)
        with torch.no_grad():
            if _is_dense(shape, stride):
                x.copy_(val)
            else:  # an expanded (stride 0) mask: write once through a dense view of its storage
                x = val.to(dt).contiguous().as_strided(shape, _dense_stride_like(shape, stride))
        return x

    def _build(self):
        s, torch = self.spec, self.torch
        g = self.grad
        if self.kind == "mha":
            self._build_mha()
            return
        if self.kind == "varlen":
            self._build_varlen()
            return
        self.q = self.tensor(s["q_shape"], s.get("q_stride"), grad=g)
        self.k = self.tensor(s["k_shape"], s.get("k_stride"), grad=g)
        self.v = self.tensor(s["v_shape"], s.get("v_stride"), grad=g)
        self.tensors = [self.q, self.k, self.v]
        self.kg = self.vg = None
        hk = self.det.get("kv_heads")
        if (
            self.kind == "eager"
            and hk
            and len(s["k_shape"]) == 4
            and s["k_shape"][1] % hk == 0
            and hk < s["k_shape"][1]
        ):
            # K/V were repeated per query head (repeat_kv) before QK^T: the SDPA and Flex alternatives
            # take the hk heads with enable_gqa=True (what attn_implementation="sdpa" runs); the eager
            # pattern's k, v hold the same values repeated
            b_, h_, sk_, d_ = s["k_shape"]
            self.kg = self.tensor([b_, hk, sk_, d_], None, grad=g)
            self.vg = self.tensor([b_, hk, sk_, s["v_shape"][3]], None, grad=g)
            with torch.no_grad():
                self.k.copy_(self.kg.repeat_interleave(h_ // hk, 1))
                self.v.copy_(self.vg.repeat_interleave(h_ // hk, 1))
        self.sq, self.sk = s["q_shape"][-2], s["k_shape"][-2]
        m = s.get("mask")
        self.mask = None
        if m and m.get("kind") != "block" and m.get("shape"):
            self.mask = self._mask_tensor(m, self.sq, self.sk)
        self.scale = s.get("scale")
        if self.scale is None and self.kind == "eager":
            self.scale = self.det.get("assumed_scale")
        self.dropout = float(s.get("dropout_p") or 0.0)
        self.gqa = (bool(s.get("enable_gqa")) and s["q_shape"][1] != s["k_shape"][1] and len(s["q_shape"]) == 4) or (
            self.kg is not None
        )
        # what the SDPA and Flex alternatives run: causal when the call is causal or the trace shows its
        # mask is the causal one, else the mask as attn_mask (never a padding mask made causal)
        bm = self.det.get("block_mask") or {}
        self.mask_mod = bm.get("mask_mod")
        causal_mask = self.mask is not None and (s.get("mask") or {}).get("kind") == "causal_tensor"
        self.is_causal = bool(s.get("causal")) and self.mask is None or causal_mask
        if self.kind == "flex":
            self.is_causal = self.mask_mod == "causal"
        self.window = bm.get("window") if self.mask_mod == "sliding_window" else None
        self.attn_mask = None
        if self.mask is not None and not self.is_causal:
            m2 = dict(m, apply="sdpa")
            self.attn_mask = self._mask_tensor(m2, self.sq, self.sk) if m.get("apply") == "masked_fill" else self.mask
        if self.window is not None:
            keep = self._keep(self.sq, self.sk, self.device, False)
            i = torch.arange(self.sq, device=self.device).view(-1, 1)
            j = torch.arange(self.sk, device=self.device).view(1, -1)
            self.attn_mask = keep & (i - j < self.window)

    def _build_varlen(self):
        s, torch, det = self.spec, self.torch, self.det
        n, tq, tk = det["sequences"], det["total_q"], det["total_k"]
        h, hk, d = det["heads"], det["kv_heads"], det["head_dim"]

        # the recorded lengths where the trace has them, else spread between its shortest and longest
        def lens(side, total):
            got = det.get(f"lengths_{side}")
            longest = det.get(f"max_{side}") or -(-total // n)
            return list(got) if got else _lengths(n, total, longest, det.get(f"min_{side}"))

        self.lens_q = lens("q", tq)
        self.lens_k = lens("k", tk) if tk != tq else list(self.lens_q)
        dev = self.device
        self.off_q = torch.tensor([0] + _cumsum(self.lens_q), device=dev, dtype=torch.int64)
        self.off_k = torch.tensor([0] + _cumsum(self.lens_k), device=dev, dtype=torch.int64)
        g = self.grad
        self.qv = self.tensor([tq, h, d], None, grad=g)
        self.kv = self.tensor([tk, hk, d], None, grad=g)
        self.vv = self.tensor([tk, hk, d], None, grad=g)
        self.tensors = [self.qv, self.kv, self.vv]
        self.is_causal = bool(s.get("causal"))
        self.scale = s.get("scale")
        self.dropout = float(s.get("dropout_p") or 0.0)
        self.gqa = h != hk
        self.mask_mod = None
        self.window = None

    def njt(self):
        torch = self.torch
        nt = torch.nested.nested_tensor_from_jagged
        q = nt(self.qv, self.off_q).transpose(1, 2)
        k = nt(self.kv, self.off_k).transpose(1, 2)
        v = nt(self.vv, self.off_k).transpose(1, 2)
        return q, k, v

    def _build_mha(self):
        s, torch, det = self.spec, self.torch, self.det
        e, h = det["embed_dim"], det["num_heads"]
        mod = torch.nn.MultiheadAttention(
            e,
            h,
            dropout=float(s.get("dropout_p") or 0.0),
            bias=bool(det.get("bias", True)),
            batch_first=bool(det.get("batch_first")),
            device=self.device,
            dtype=self.dt,
        )
        mod.train(self.grad)
        if not self.grad:
            mod.requires_grad_(False)
        self.mod = mod
        self.x = self.tensor(s["q_shape"], s.get("q_stride"), grad=self.grad)
        if det.get("self_attention", True):
            self.kx = self.vx = self.x
        else:
            self.kx = self.tensor(s["k_shape"], s.get("k_stride"), grad=self.grad)
            self.vx = self.tensor(s["v_shape"], s.get("v_stride"), grad=self.grad)
        self.tensors = [self.x] + ([p for p in mod.parameters()] if self.grad else [])
        self.need_weights = bool(det.get("need_weights"))
        m = s.get("mask")
        self.mask = None
        if m and m.get("shape"):
            self.mask = self._mask_tensor(dict(m, apply="masked_fill"), m["shape"][-2], m["shape"][-1])

    # ---- the backends: each returns a function that runs the call once and returns its output

    def inputs_for(self, backend):
        """The tensors a backend's output depends on (gradients are taken for them)."""
        if self.kg is not None and backend not in ("eager", "compiled"):
            return [self.q, self.kg, self.vg]
        return self.tensors

    def sdpa_args(self, check=False):
        q, k, v = self.q, self.k, self.v
        if self.kg is not None:
            k, v = self.kg, self.vg
        if q.dim() == 3:  # [B*H, S, D] eager operands: one batch of B*H heads
            q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        kw = {"dropout_p": 0.0 if check else self.dropout, "is_causal": self.is_causal}
        if self.attn_mask is not None:
            am = self.attn_mask
            kw["attn_mask"] = am.unsqueeze(0) if am.dim() == 3 and q.dim() == 4 and self.q.dim() == 3 else am
        if self.scale is not None:
            kw["scale"] = self.scale
        if self.gqa:
            kw["enable_gqa"] = True
        return (q, k, v), kw

    def runner(self, backend, check=False):
        """The backend as a closure; under torch.autocast where the trace's call ran under it (its
        inputs recorded in fp32, its matmuls in bf16/fp16): the replay runs what ran."""
        fn = self._runner(backend, check)
        amp = self.spec.get("autocast")
        if not amp:
            return fn
        torch = self.torch
        dt, dev = _dtype(torch, amp), ("cuda" if str(self.device).startswith("cuda") else "cpu")

        def under_autocast():
            with torch.autocast(dev, dtype=dt):
                return fn()

        return under_autocast

    def _runner(self, backend, check=False):
        torch = self.torch
        F = torch.nn.functional
        if self.kind == "mha":
            return self._mha_runner(backend, check)
        if backend in ("flash", "efficient", "cudnn", "math"):
            if self.kind == "varlen":
                return self._varlen_runner(backend, check)
            be = _sdpa_backend(torch, backend)
            (q, k, v), kw = self.sdpa_args(check)
            if kw.get("enable_gqa") and backend == "efficient" and k.shape[-3] != q.shape[-3]:
                # mem-efficient takes no enable_gqa: K/V repeated per query head, as a model does for it
                rep = q.shape[-3] // k.shape[-3]
                k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
                kw = dict(kw, enable_gqa=False)

            def fn():
                with _sdpa_kernel(torch, be):
                    return F.scaled_dot_product_attention(q, k, v, **kw)

            return fn
        if backend == "eager":
            if self.kind != "eager":
                raise Refused("no eager pattern was recorded for this call")
            steps = self.det["steps"]
            q, k, v, mask = self.q, self.k, self.v, self.mask
            drop = not check

            def fn():
                return _eager(torch, steps, q, k, v, mask, drop)

            return fn
        if backend == "compiled":
            if self.kind != "eager":
                raise Refused("no eager pattern was recorded for this call")
            steps = self.det["steps"]
            drop = not check and any(st["op"] == "dropout" and st.get("p") for st in steps)
            comp = _compiled(
                torch, ("eager", json.dumps(steps), drop), lambda q, k, v, m: _eager(torch, steps, q, k, v, m, drop)
            )
            q, k, v, mask = self.q, self.k, self.v, self.mask

            def fn():
                return comp(q, k, v, mask)

            return fn
        if backend == "flex":
            return self._flex_runner(check)
        raise Refused(f"unknown backend {backend}")

    def _varlen_runner(self, backend, check):
        """Packed sequences: flash and mem-efficient run the varlen ops the trace records (their
        offsets as recorded, causal or not); cuDNN through scaled_dot_product_attention on nested
        tensors (which takes no is_causal); math is SDPA's math backend per sequence."""
        torch = self.torch
        F = torch.nn.functional
        drop = 0.0 if check else self.dropout
        qv, kv, vv = self.qv, self.kv, self.vv
        oq, ok = self.off_q.to(torch.int32), self.off_k.to(torch.int32)
        mq, mk = max(self.lens_q), max(self.lens_k)
        kw = {} if self.scale is None else {"scale": self.scale}
        causal = self.is_causal
        if backend == "flash":
            op = torch.ops.aten._flash_attention_forward

            def fn():
                return op(qv, kv, vv, oq, ok, mq, mk, drop, causal, False, **kw)[0]

            return fn
        if backend == "efficient":
            op = torch.ops.aten._efficient_attention_forward
            q1, k1, v1 = qv.unsqueeze(0), kv.unsqueeze(0), vv.unsqueeze(0)
            lse = bool(self.grad)

            def fn():
                return op(q1, k1, v1, None, oq, ok, mq, mk, drop, 1 if causal else 0, lse, **kw)[0][0]

            return fn
        if backend == "cudnn":
            if causal:
                raise Refused("scaled_dot_product_attention on nested tensors takes no is_causal=True")
            be = _sdpa_backend(torch, "cudnn")
            q, k, v = self.njt()
            kw2 = dict(kw, dropout_p=drop)

            def fn():
                with _sdpa_kernel(torch, be):
                    return F.scaled_dot_product_attention(q, k, v, **kw2).values()

            return fn
        be = _sdpa_backend(torch, "math")
        rq = list(zip(self.off_q.tolist()[:-1], self.off_q.tolist()[1:]))
        rk = list(zip(self.off_k.tolist()[:-1], self.off_k.tolist()[1:]))
        rep = qv.shape[1] // kv.shape[1]

        def fn():
            outs = []
            with _sdpa_kernel(torch, be):
                for (a, b), (c, d) in zip(rq, rk):
                    q = qv[a:b].transpose(0, 1).unsqueeze(0)
                    k = kv[c:d].transpose(0, 1).unsqueeze(0)
                    v = vv[c:d].transpose(0, 1).unsqueeze(0)
                    if rep > 1:
                        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
                    outs.append(F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=causal, **kw)[0])
            return torch.cat([o.transpose(0, 1) for o in outs], 0)

        return fn

    def _flex_runner(self, check):
        torch = self.torch
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            raise Refused(f"FlexAttention is not in torch {torch.__version__}: {e}") from None
        if self.dropout and not check:
            raise Refused(f"FlexAttention has no dropout (the call has dropout_p={self.dropout:g})")
        comp = _compiled(torch, ("flex",), flex_attention)
        if self.kind == "varlen":
            return self._flex_varlen(comp, create_block_mask)
        q, k, v = self.q, self.k, self.v
        if self.kg is not None:
            k, v = self.kg, self.vg
        if q.dim() == 3:
            q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        sq, sk = q.shape[-2], k.shape[-2]
        mod = None
        if self.is_causal or self.mask_mod == "causal":
            off = 0

            def mod(b, h, qi, ki):
                return qi + off >= ki

        elif self.window is not None:
            w = self.window

            def mod(b, h, qi, ki):
                return (qi >= ki) & (qi - ki < w)

        elif self.attn_mask is not None:
            keep = self.attn_mask
            if keep.dtype != torch.bool:
                keep = keep == 0
            while keep.dim() < 4:
                keep = keep.unsqueeze(0)
            kb, kh = keep.shape[0], keep.shape[1]

            def mod(b, h, qi, ki):
                return keep[b if kb > 1 else 0, h if kh > 1 else 0, qi, ki]

        bm = None
        if mod is not None:
            det = self.det.get("block_mask") or {}
            kw = {}
            if det.get("q_block") and det.get("q_block") == det.get("kv_block") and not self.spec.get("scaled_down"):
                kw["BLOCK_SIZE"] = det["q_block"]
            bm = create_block_mask(mod, None, None, sq, sk, device=q.device, **kw)
        kw = {}
        if self.scale is not None:
            kw["scale"] = self.scale
        if self.gqa or q.shape[1] != k.shape[1]:
            kw["enable_gqa"] = True

        def fn():
            return comp(q, k, v, block_mask=bm, **kw)

        return fn

    def _flex_varlen(self, comp, create_block_mask):
        torch = self.torch
        doc_q = torch.repeat_interleave(
            torch.arange(len(self.lens_q), device=self.device), torch.tensor(self.lens_q, device=self.device)
        )
        doc_k = torch.repeat_interleave(
            torch.arange(len(self.lens_k), device=self.device), torch.tensor(self.lens_k, device=self.device)
        )
        oq, ok = self.off_q, self.off_k
        causal = self.is_causal

        def mod(b, h, qi, ki):
            same = doc_q[qi] == doc_k[ki]
            if causal:
                return same & (qi - oq[doc_q[qi]] >= ki - ok[doc_k[ki]])
            return same

        tq, tk = self.qv.shape[0], self.kv.shape[0]
        bm = create_block_mask(mod, None, None, tq, tk, device=self.qv.device)
        q = self.qv.transpose(0, 1).unsqueeze(0)
        k = self.kv.transpose(0, 1).unsqueeze(0)
        v = self.vv.transpose(0, 1).unsqueeze(0)
        kw = {"enable_gqa": True} if self.gqa else {}
        if self.scale is not None:
            kw["scale"] = self.scale

        def fn():
            return comp(q, k, v, block_mask=bm, **kw)[0].transpose(0, 1)

        return fn

    def _mha_runner(self, backend, check):
        torch = self.torch
        mod, x, kx, vx, mask = self.mod, self.x, self.kx, self.vx, self.mask
        if backend == "flex":
            raise Refused("nn.MultiheadAttention has no FlexAttention path")
        if backend in ("eager", "compiled"):
            nw = self.need_weights
            m = mod
            if backend == "compiled":
                m = _compiled(torch, ("mha", id(mod)), mod)

            def fn():
                return m(x, kx, vx, need_weights=nw, attn_mask=mask)[0]

            return fn
        be = _sdpa_backend(torch, backend)

        def fn():
            with _sdpa_kernel(torch, be):
                return mod(x, kx, vx, need_weights=False, attn_mask=mask)[0]

        return fn


def _is_dense(shape, stride):
    if not stride:
        return True
    return all(s != 0 or n == 1 for n, s in zip(shape, stride))


def _dense_stride_like(shape, stride):
    """The recorded strides with the stride-0 (expanded) dims kept at 0 over a contiguous buffer of
    the full shape (writes go through the full tensor, reads see the same values)."""
    full = _contiguous_in(shape, list(range(len(shape))))
    return [0 if (s == 0 and n != 1) else f for n, s, f in zip(shape, stride, full)]


def _lengths(n, total, longest, shortest=None):
    """n sequence lengths summing to ``total`` with the longest ``longest`` (the lengths themselves
    are not recorded): spread evenly from the shortest (when the trace has it, else 2 x mean -
    longest) up to longest, then nudged to the total; when that would go below one token, one
    sequence of the longest and the rest equal."""
    longest = max(1, min(longest, total))
    if n <= 1:
        return [total]
    lo = float(shortest) if shortest and 1 <= shortest <= longest else 2.0 * total / n - longest
    if lo >= 1:
        xs = [int(round(lo + (longest - lo) * i / (n - 1))) for i in range(n)]
        xs[-1] = longest
        diff = total - sum(xs)
        i = 0
        first = 1 if shortest and n > 2 else 0  # a recorded shortest stays as it is
        while diff and i < 4 * n * (abs(diff) + 1):
            j = first + i % (n - 1 - first)
            step = 1 if diff > 0 else -1
            if 1 <= xs[j] + step <= longest:
                xs[j] += step
                diff -= step
            i += 1
        if not diff:
            return xs
    rest = total - longest
    base, extra = divmod(rest, n - 1)
    return [longest] + [max(0, base + (1 if i < extra else 0)) for i in range(n - 1)]


def _cumsum(xs):
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out


def _dtype(torch, name):
    return {
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp32": torch.float32,
        "fp64": torch.float64,
        "bool": torch.bool,
        "int32": torch.int32,
        "int64": torch.int64,
        "int8": torch.int8,
        "uint8": torch.uint8,
    }.get(name or "fp32", torch.float32)


def _sdpa_backend(torch, name):
    try:
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        raise Refused(f"torch.nn.attention.sdpa_kernel is not in torch {torch.__version__}: {e}") from None
    attr = {
        "flash": "FLASH_ATTENTION",
        "efficient": "EFFICIENT_ATTENTION",
        "cudnn": "CUDNN_ATTENTION",
        "math": "MATH",
    }[name]
    if not hasattr(SDPBackend, attr):
        raise Refused(f"SDPBackend.{attr} is not in torch {torch.__version__}")
    return getattr(SDPBackend, attr)


def _sdpa_kernel(torch, be):
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel([be])


_COMPILED = {}


def _compiled(torch, key, fn):
    c = _COMPILED.get(key)
    if c is None:
        c = _COMPILED[key] = torch.compile(fn, dynamic=False)
    return c


def _eager(torch, steps, q, k, v, mask, dropout=True):
    """The recorded matmul -> ... -> matmul steps (replay/calls.py writes them)."""
    F = torch.nn.functional
    x = None
    for st in steps:
        op = st["op"]
        if op == "qk":
            kt = k.transpose(-2, -1)
            if st.get("bias") and mask is not None:
                x = torch.baddbmm(mask, q, kt, alpha=st.get("alpha", 1.0))
            else:
                x = torch.matmul(q, kt)
        elif op == "mask_build":  # the call built its mask itself (ones -> triu): so does the replay
            base = torch.ones(st["shape"], dtype=_dtype(torch, st.get("dtype") or "bool"), device=q.device)
            mask = base.triu(st.get("diagonal", 0)) if st["fn"] == "triu" else base.tril(st.get("diagonal", 0))
        elif op == "scale":
            x = x / st["value"] if st["fn"] == "div" else x * st["value"]
        elif op == "mask" and mask is not None:
            if st["fn"] == "masked_fill":
                x = x.masked_fill(mask, float(st.get("value") or "-inf"))
            elif st["fn"] == "where":
                x = torch.where(mask, x, float("-inf"))
            else:
                x = x + mask
        elif op == "softmax":
            x = torch.softmax(x, -1, dtype=_dtype(torch, st["dtype"]) if st.get("dtype") else None)
        elif op == "cast":
            x = x.to(_dtype(torch, st["dtype"]))
        elif op == "dropout":
            x = F.dropout(x, st["p"] if dropout else 0.0, training=st.get("train", True))
        elif op == "pv":
            x = torch.matmul(x.to(v.dtype) if x.dtype != v.dtype else x, v)
    return x


# ------------------------------------------------------------------ timing


class Timer:
    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.startswith("cuda")

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def once(self, fn, inner):
        if self.cuda:
            s = self.torch.cuda.Event(enable_timing=True)
            e = self.torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                fn()
            e.record()
            e.synchronize()
            return s.elapsed_time(e) * 1000.0 / inner
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t0) * 1e6 / inner

    def measure(self, fn, warmup, repeats, min_ms):
        for _ in range(max(0, warmup)):
            fn()
        self.sync()
        t1 = self.once(fn, 1)
        inner = max(1, min(50, int(math.ceil(min_ms * 1000.0 / max(t1, 1.0)))))
        times = [self.once(fn, inner) for _ in range(max(1, repeats))]
        return {"time_us": round(statistics.median(times), 3), "times_us": [round(t, 3) for t in times], "inner": inner}


def _backward_fn(torch, fwd, inputs, grad_out_like):
    """A function running one backward of the call (the forward ran once, outside the timing); when
    the graph cannot be run twice, each backward re-runs the forward first (untimed is impossible
    then: the time includes it, and ``with_forward`` says so)."""
    out = fwd()
    go = torch.randn_like(out) if not out.is_nested else None
    if out.is_nested:
        go = torch.nested.nested_tensor_from_jagged(torch.randn_like(out.values()), out.offsets())
    ins = [t for t in inputs if t.requires_grad]
    state = {"out": out, "with_forward": False}

    def bwd():
        if state["with_forward"]:
            state["out"] = fwd()
        try:
            return torch.autograd.grad(state["out"], ins, go, retain_graph=True, allow_unused=True)
        except RuntimeError:
            if state["with_forward"]:
                raise
            state["with_forward"] = True
            state["out"] = fwd()
            return torch.autograd.grad(state["out"], ins, go, retain_graph=True, allow_unused=True)

    return bwd, state


def _rel_err(torch, a, b):
    if a is None or b is None:
        return None
    if getattr(a, "is_nested", False):
        a = a.values()
    if getattr(b, "is_nested", False):
        b = b.values()
    a, b = a.float(), b.float()
    if a.shape != b.shape:
        try:
            a = a.reshape(b.shape)
        except RuntimeError:
            return None
    den = b.abs().max().item()
    if not math.isfinite(den):
        return None
    return float((a - b).abs().max().item() / max(den, 1e-6))


def _reason(e, caught):
    """A refusal's reason: SDPA's warnings say why each backend could not run."""
    msgs = []
    for w in caught:
        m = _one_line(re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", str(w.message)), 240)
        if m and m not in msgs and "deprecated" not in m.lower():
            msgs.append(m)
    text = _one_line(e, 200)
    if msgs:
        text = "; ".join(msgs[:4]) + (f" ({text})" if text and "No available kernel" not in text else "")
    return _one_line(text, 600)


def _refusal(e):
    s = str(e)
    return isinstance(e, (Refused, NotImplementedError)) or any(
        x in s
        for x in (
            "No available kernel",
            "No viable backend",
            "not supported",
            "does not support",
            "Unsupported",
            "expected",
        )
    )


# ------------------------------------------------------------------ one call


def _child_args(args, cid, backends, t_start):
    """The command line of a child process running one call's ``backends`` with this run's settings."""
    cmd = [sys.executable, os.path.abspath(__file__), "--calls", cid, "--backends", ",".join(backends)]
    cmd += ["--device", args.device, "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    cmd += ["--min-time-ms", str(args.min_time_ms)]
    for flag in ("scale_down", "no_compile", "no_profile"):
        if getattr(args, flag):
            cmd.append("--" + flag.replace("_", "-"))
    if args.budget_s:  # what is left of it: the child counts from its own start
        cmd += ["--budget-s", str(max(0.001, args.budget_s - (time.time() - t_start)))]
    if args.crash_on:
        cmd += ["--crash-on", args.crash_on]
    return cmd


def _run_child(spec, backends, args, t_start):
    """(the call's record, None) from a child process, or (None, why) when the process died."""
    import subprocess

    fd, path = tempfile.mkstemp(suffix=".json", prefix="replay-child-")
    os.close(fd)
    try:
        cmd = _child_args(args, spec["id"], backends, t_start) + ["--child-json", path]
        limit = (args.budget_s + 600) if args.budget_s else None
        try:
            p = subprocess.run(cmd, stdout=sys.stdout, stderr=subprocess.PIPE, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return None, f"the process ran past {limit:g} s"
        if p.stderr:
            sys.stderr.write(p.stderr)
        try:
            with open(path) as f:
                got = json.load(f)
        except (OSError, ValueError):
            got = None
        if p.returncode == 0 and got and spec["id"] in got:
            return got[spec["id"]], None
        lines = [x for x in (p.stderr or "").splitlines() if x.strip()]
        err = next((x for x in reversed(lines) if "Error" in x or "error" in x), lines[-1] if lines else "")
        return None, _one_line(f"the process died (exit {p.returncode}): {err}", 240)
    finally:
        try:
            os.remove(path)
        except OSError:
            pass


def _isolated_call(spec, only, wanted, args, t_start):
    """One call's ``only`` backends in a child process; when it dies (a CUDA fault poisons the
    process), each of those backends again in a process of its own, so the fault costs one backend."""
    backends = [b for b in spec.get("backends") or [] if b in only and (not wanted or b in wanted)]
    rec, why = _run_child(spec, backends, args, t_start)
    if rec is not None:
        return rec
    print(f"    ({spec['id']}: {why}; each backend again in its own process)", flush=True)
    out = {"id": spec["id"], "kind": spec["kind"], "backends": []}
    for b in backends:
        r, why_b = _run_child(spec, [b], args, t_start)
        if r is None:
            out["backends"].append({"backend": b, "label": LABELS.get(b, b), "status": "error", "reason": why_b})
            continue
        for k, v in r.items():
            if k == "backends":
                out["backends"] += v
            elif k not in out or out[k] is None:
                out[k] = v
    return out


def run_call(torch, spec, args, t_start, wanted, only=None):
    """One call under its backends (``only``: the subset to run now; the others are left out)."""
    dev = args.device
    grad = "backward" in (spec.get("directions") or [])
    timer = Timer(torch, dev)
    if args.scale_down:
        spec = _scale_down(spec)
    rec = {
        "id": spec["id"],
        "kind": spec["kind"],
        "trace_backend": spec.get("trace_backend"),
        "directions": spec.get("directions"),
        "shapes": {k: spec.get(k) for k in ("q_shape", "k_shape", "v_shape")},
        "backends": [],
    }
    try:
        call = Call(torch, spec, dev, grad)
    except Exception as e:  # noqa: BLE001 - the inputs could not be built: every backend says why
        rec["error"] = _one_line(f"{type(e).__name__}: {e}")
        return rec
    ref_out, ref_grads = _reference(torch, call, grad)
    backends = [b for b in spec.get("backends") or [] if (not wanted or b in wanted) and (only is None or b in only)]
    prof_runs = []
    for be in backends:
        e = {"backend": be, "label": LABELS.get(be, be), "status": "ok", "reason": None}
        rec["backends"].append(e)
        if args.crash_on == be:  # tests of --isolate: a fault that ends the process, as a CUDA one does
            print(f"replay: --crash-on {be}: ending the process", file=sys.stderr, flush=True)
            os._exit(3)
        if args.budget_s and time.time() - t_start > args.budget_s:
            e.update(status="skipped", reason=f"time budget spent (--budget-s {args.budget_s:g})")
            continue
        if be in COMPILED and args.no_compile:
            e.update(status="skipped", reason="--no-compile")
            continue
        t0 = time.time()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    fwd = call.runner(be)
                    ctx = torch.enable_grad() if grad else torch.no_grad()
                    with ctx:
                        out = fwd()  # the first run: compiles, and refuses unsupported inputs
                        e["first_run_s"] = round(time.time() - t0, 3)
                        e["forward"] = timer.measure(fwd, args.warmup, args.repeats, args.min_time_ms)
                        bwd = None
                        if grad:
                            bwd, state = _backward_fn(torch, fwd, call.inputs_for(be), out)
                            e["backward"] = timer.measure(bwd, args.warmup, args.repeats, args.min_time_ms)
                            if state["with_forward"]:  # each backward re-ran the forward: take it out
                                b_ = e["backward"]
                                b_["includes_forward"] = True
                                b_["time_us_with_forward"] = b_["time_us"]
                                b_["time_us"] = round(max(0.0, b_["time_us"] - e["forward"]["time_us"]), 3)
                except Exception as ex:  # noqa: BLE001
                    if _refusal(ex):
                        e.update(status="refused", reason=_reason(ex, caught))
                    else:
                        e.update(status="error", reason=_one_line(f"{type(ex).__name__}: {ex}"))
                    e.pop("forward", None)
                    e.pop("backward", None)
                    _free(torch, dev)
                    continue
            prof_runs.append((be, fwd, bwd))
            e["error_vs_math"], e["check"] = _check(torch, call, be, grad, ref_out, ref_grads)
        except Exception as ex:  # noqa: BLE001 - one backend's failure never stops the others
            e.update(status="error", reason=_one_line(f"{type(ex).__name__}: {ex}"))
        finally:
            e["wall_s"] = round(time.time() - t0, 3)
    if prof_runs and dev.startswith("cuda") and not args.no_profile:
        try:
            kt = _profile(torch, prof_runs, grad)
            for e in rec["backends"]:
                for d in ("forward", "backward"):
                    k = kt.get(f"{e['backend']}:{d}")
                    if k is not None and e.get(d):
                        e[d]["kernel_us"], e[d]["kernels"] = k
                b_, f_ = e.get("backward") or {}, e.get("forward") or {}
                if b_.get("includes_forward") and b_.get("kernel_us") is not None and f_.get("kernel_us") is not None:
                    b_["kernel_us"] = round(max(0.0, b_["kernel_us"] - f_["kernel_us"]), 3)
        except Exception as ex:  # noqa: BLE001 - kernel times are extra; the event times stand
            rec["profile_error"] = _one_line(f"{type(ex).__name__}: {ex}")
    del call
    _free(torch, dev)
    return rec


def _free(torch, dev):
    """Return cached GPU memory between calls. A CUDA fault of an earlier kernel (asynchronous) can
    surface here: it must not lose the results measured before it (the backend that caused it is
    found by --isolate)."""
    if dev.startswith("cuda"):
        try:
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            print(f"    (freeing GPU memory failed: {_one_line(f'{type(e).__name__}: {e}', 160)})", flush=True)


def _reference(torch, call, grad):
    """The math backend's output (and gradients) at dropout 0, what every backend is checked against."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = call.runner("math", check=True)
            with torch.enable_grad() if grad else torch.no_grad():
                out = fn()
                grads = None
                if grad:
                    go = _grad_out(torch, out, seed=1)
                    ins = [t for t in call.inputs_for("math") if t.requires_grad]
                    grads = torch.autograd.grad(out, ins, go, allow_unused=True)
        return out.detach(), grads
    except Exception:  # noqa: BLE001 - no reference: errors stay null
        return None, None


def _grad_out(torch, out, seed):
    g = torch.Generator(device=out.device if not out.is_nested else out.values().device).manual_seed(seed)
    if out.is_nested:
        vals = out.values()
        return torch.nested.nested_tensor_from_jagged(
            torch.randn(vals.shape, generator=g, device=vals.device, dtype=vals.dtype), out.offsets()
        )
    # In the output's own strides, as the timed backward's randn_like has them: torch 2.11's cuDNN
    # backward reuses a plan made for one gradient layout on the next call's other layout and returns
    # wrong gradients (validation/replay/cudnn_grad_out_layout.py), so a check in another layout than
    # the timed runs would report a mismatch the model never sees.
    values = torch.randn(out.shape, generator=g, device=out.device, dtype=out.dtype)
    return torch.empty_like(out).copy_(values)


def _check(torch, call, be, grad, ref_out, ref_grads):
    if ref_out is None:
        return None, None
    if be == "math":
        return {"forward": 0.0, "backward": 0.0 if grad else None}, "reference"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = call.runner(be, check=True)
        with torch.enable_grad() if grad else torch.no_grad():
            out = fn()
            ef = _rel_err(torch, out, ref_out)
            eb = None
            if grad and ref_grads is not None:
                go = _grad_out(torch, out, seed=1)
                ins = [t for t in call.inputs_for(be) if t.requires_grad]
                gs = torch.autograd.grad(out, ins, go, allow_unused=True)
                errs = [_rel_err(torch, a, b) for a, b in zip(gs, ref_grads) if a is not None and b is not None]
                errs = [x for x in errs if x is not None]
                eb = max(errs) if errs else None
    tol = TOLERANCE.get(call.spec.get("dtype"), 1e-2)
    if call.kind == "mha":
        tol *= 2  # projections before and after attention add their own rounding
    worst = max(x for x in (ef, eb) if x is not None) if (ef is not None or eb is not None) else None
    verdict = None if worst is None else "ok" if worst <= tol else "mismatch"
    return {"forward": _r(ef), "backward": _r(eb), "tolerance": tol}, verdict


def _r(x):
    return None if x is None else float(f"{x:.3g}")


def _profile(torch, runs, grad, iters=3):
    """Kernel time per backend and direction: one profiler pass, each run in a labelled range;
    every GPU activity launched inside a range counts for it (backward kernels are launched on
    autograd's thread, inside the same range in time)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for be, fwd, bwd in runs:
            for d, fn in (("forward", fwd), ("backward", bwd)):
                if fn is None:
                    continue
                with torch.enable_grad() if grad else torch.no_grad():
                    fn()
                    torch.cuda.synchronize()
                    with record_function(f"replay::{be}:{d}"):
                        for _ in range(iters):
                            fn()
                        torch.cuda.synchronize()
    return profiled_kernel_times(prof, iters)


def profiled_kernel_times(prof, iters, prefix="replay::"):
    """:func:`kernel_times` of a finished torch.profiler session (its chrome trace, through a
    temporary file: the profiler exports no events otherwise). validation/backend_sweep.py times
    its rows with this too."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            data = json.load(f)
    finally:
        os.remove(path)
    return kernel_times(data.get("traceEvents", data) if isinstance(data, dict) else data, iters, prefix)


def kernel_times(evs, iters, prefix="replay::"):
    """``{label: (kernel µs per iteration, kernels per iteration)}`` from a chrome trace's events:
    each GPU activity counts for the ``<prefix><label>`` range its launch (runtime or driver call,
    matched by correlation id) falls in."""
    ranges, launch, gpu = [], {}, []
    for e in evs:
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat", ""), e.get("name", "")
        if cat == "user_annotation" and name.startswith(prefix):
            ranges.append((name[len(prefix) :], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launch[c] = float(e["ts"])
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = (e.get("args") or {}).get("correlation")
            gpu.append((c, float(e.get("dur", 0))))
    ranges.sort(key=lambda x: x[1])
    out = {}
    for c, dur in gpu:
        t = launch.get(c)
        if t is None:
            continue
        for label, a, b in ranges:
            if a <= t <= b:
                acc = out.setdefault(label, [0.0, 0])
                acc[0] += dur
                acc[1] += 1
                break
    return {k: (round(v[0] / iters, 3), round(v[1] / iters, 2)) for k, v in out.items()}


# ------------------------------------------------------------------ main


def _environment(torch, dev):
    env = {"torch": torch.__version__, "python": platform.python_version(), "host": platform.node()}
    if dev.startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env["device"] = {"name": p.name, "capability": [p.major, p.minor], "sms": p.multi_processor_count}
        env["cuda"] = torch.version.cuda
        try:
            env["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            env["cudnn"] = None
    else:
        env["device"] = {"name": f"cpu ({platform.processor() or platform.machine()})"}
    return env


def _print_table(recs):
    for r in recs:
        print(f"{r['id']}  {r['kind']}  (trace: {r.get('trace_backend') or '?'})")
        if r.get("error"):
            print(f"    error: {r['error']}")
        for e in r["backends"]:
            f, b = e.get("forward") or {}, e.get("backward") or {}
            err = e.get("error_vs_math") or {}
            t = f"fwd {f.get('time_us', float('nan')):10.1f} us" if f else " " * 17
            t += f"  bwd {b.get('time_us', float('nan')):10.1f} us" if b else ""
            extra = e.get("reason") or ""
            if e["status"] == "ok":
                extra = f"err {err.get('forward')}/{err.get('backward')} {e.get('check') or ''}"
            print(f"    {e['backend']:9s} {e['status']:8s} {t}  {extra}")


def main(argv=None, payload=None):
    payload = payload if payload is not None else PAYLOAD
    args = parse_args(argv)
    calls = {c["id"]: c for c in payload["calls"]}
    pick = [x for x in args.calls.split(",") if x]
    wanted = {x for x in args.backends.split(",") if x}
    if not pick and not args.all and not args.child_json:
        by_id = {c["id"]: c for c in payload["calls"]}
        pick = sorted(
            {cid for tr in payload["traces"] for cid in default_calls([by_id[c] for c in tr["calls"] if c in by_id])}
        )
    if args.budget_s is None:
        args.budget_s = 0.0 if (args.all or args.child_json or args.calls) else DEFAULT_BUDGET_S
    chosen = [c for c in payload["calls"] if not pick or c["id"] in pick]
    if args.list:
        for c in payload["calls"]:
            print(
                f"{c['id']}  {c['kind']:7s} x{c['count']}  q{c['q_shape']} k{c['k_shape']}  {c['dtype']}  "
                f"{','.join(c['directions'])}  backends: {','.join(c['backends'])}"
                + ("" if c in chosen else "  (not run by default: --all)")
            )
        print(
            f"estimated: ~{estimate_s(chosen, wanted, args):.0f} s for {len(chosen)} of {len(payload['calls'])} calls"
        )
        return 0
    try:
        import torch
    except ImportError:
        print("error: torch is not installed here: run this script where PyTorch and the GPU are", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "error: no CUDA GPU here (torch.cuda.is_available() is False): run this script on the machine with "
            "the GPU (or --device cpu --scale-down to test the script itself)",
            file=sys.stderr,
        )
        return 2
    for attr in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        try:  # every distinct shape compiles anew: let them all
            if hasattr(torch._dynamo.config, attr):
                setattr(torch._dynamo.config, attr, 1024)
        except Exception:  # noqa: BLE001
            pass
    torch.manual_seed(0)
    env = _environment(torch, args.device)
    t_start = time.time()
    recs = {}
    isolate = not args.child_json and (
        args.isolate == "yes" or (args.isolate == "auto" and args.device.startswith("cuda"))
    )
    total_s = estimate_s(chosen, wanted, args)
    if not args.child_json:
        print(
            f"replay: {len(chosen)} of {len(calls)} calls, ~{total_s:.0f} s estimated"
            + (f", --budget-s {args.budget_s:g}" if args.budget_s else "")
            + ("" if len(chosen) == len(calls) else " (--all for every call)"),
            file=sys.stderr,
            flush=True,
        )
    done = 0
    # two passes: every call's backends that need no compilation first, then FlexAttention and
    # torch.compile (their compile time would otherwise spend --budget-s before the others ran)
    for only in ([b for b in LABELS if b not in COMPILED], list(COMPILED)):
        for cid, spec in calls.items():
            if pick and cid not in pick:
                continue
            if not any(b in only for b in spec.get("backends") or []):
                continue
            if args.budget_s and time.time() - t_start > args.budget_s:  # a promise: no new work after it
                rec = {
                    "id": cid,
                    "kind": spec["kind"],
                    "backends": [
                        {"backend": b, "label": LABELS.get(b, b), "status": "skipped", "reason": _spent(args)}
                        for b in spec.get("backends") or []
                        if b in only and (not wanted or b in wanted)
                    ],
                }
            elif isolate:
                rec = _isolated_call(spec, only, wanted, args, t_start)
            else:
                try:
                    rec = run_call(torch, spec, args, t_start, wanted, only)
                except Exception as e:  # noqa: BLE001
                    rec = {
                        "id": cid,
                        "kind": spec["kind"],
                        "backends": [],
                        "error": _one_line(f"{type(e).__name__}: {e}"),
                    }
                    traceback.print_exc()
            _merge(recs, cid, rec)
            if not args.child_json:
                done += 1
                _progress(rec, done, len(chosen) * 2, t_start, total_s, args)
                # each call's result on disk as soon as it is measured: a killed run keeps what it measured
                _write(payload, recs, calls, args, env, t_start, complete=False)
    if args.child_json:  # a child of --isolate: the parent prints and writes
        with open(args.child_json, "w") as f:
            json.dump(recs, f)
        return 0
    _print_table(recs.values())
    for p in _write(payload, recs, calls, args, env, t_start, complete=True):
        print(f"wrote {p}")
    return 0


def default_calls(calls):
    """The calls of one trace a run without --all replays: the longest by the trace's time, until
    they carry DEFAULT_SHARE of it, at most DEFAULT_MAX_CALLS."""
    ranked = sorted(calls, key=lambda c: -(c.get("trace_time_us") or 0.0))
    total = sum(c.get("trace_time_us") or 0.0 for c in calls)
    out, got = [], 0.0
    for c in ranked:
        if len(out) >= DEFAULT_MAX_CALLS or (total and got >= DEFAULT_SHARE * total):
            break
        out.append(c["id"])
        got += c.get("trace_time_us") or 0.0
    return out


def estimate_s(calls, wanted, args):
    """Seconds the run is expected to take (the budget caps it)."""
    t = 0.0
    for c in calls:
        for b in c.get("backends") or []:
            if wanted and b not in wanted:
                continue
            if b in COMPILED and args.no_compile:
                continue
            t += SECONDS_PER_BACKEND.get(b, SECONDS_PER_BACKEND_DEFAULT) * (
                2 if "backward" in (c.get("directions") or []) else 1
            )
    return min(t, args.budget_s) if args.budget_s else t


def _spent(args):
    return f"time budget spent (--budget-s {args.budget_s:g})"


def _merge(recs, cid, rec):
    if cid in recs:
        recs[cid]["backends"] += rec["backends"]
        for k in ("error", "profile_error"):
            if rec.get(k):
                recs[cid][k] = rec[k]
    else:
        recs[cid] = rec


def _progress(rec, done, passes, t_start, total_s, args):
    """One line per call and pass: what each backend did, and the time left."""
    el = time.time() - t_start
    left = max(0.0, total_s - el) if total_s else 0.0
    if args.budget_s:
        left = min(left, max(0.0, args.budget_s - el))
    what = ", ".join(
        f"{e['backend']} {e['status']}"
        + (f" {e['forward']['time_us']:.0f} us" if e.get("status") == "ok" and e.get("forward") else "")
        for e in rec.get("backends") or []
    )
    print(
        f"replay: [{el:5.1f} s] {rec['id']} {rec['kind']}: {what or 'nothing to run'}; ~{left:.0f} s left",
        file=sys.stderr,
        flush=True,
    )


def _write(payload, recs, calls, args, env, t_start, complete):
    """Every trace's .replay.json with the calls measured so far (``complete``: the run ended)."""
    for cid, rec in recs.items():  # the backends in the call's own order
        order = {b: i for i, b in enumerate(calls[cid].get("backends") or [])}
        rec["backends"].sort(key=lambda e: order.get(e["backend"], 99))
    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    for tr in payload["traces"]:
        out = {
            "schema": REPLAY_SCHEMA,
            "tool": "tb-attention replay",
            "trace": tr["file"],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "scaled_down": bool(args.scale_down),
            "complete": complete,
            "settings": {
                "device": args.device,
                "warmup": args.warmup,
                "repeats": args.repeats,
                "min_time_ms": args.min_time_ms,
                "profiled": args.device.startswith("cuda") and not args.no_profile,
                "budget_s": args.budget_s or None,
                "all_calls": bool(args.all),
            },
            **env,
            "wall_s": round(time.time() - t_start, 2),
            "calls": [recs[c] for c in tr["calls"] if c in recs],
        }
        path = os.path.join(args.out_dir, os.path.basename(tr["file"]) + ".replay.json")
        tmp = path + ".part"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, path)  # never a half-written file
        written.append(path)
    return written


if __name__ == "__main__":
    sys.exit(main())
