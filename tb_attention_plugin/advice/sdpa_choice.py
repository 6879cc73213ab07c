"""Which SDPA backend PyTorch would pick for given inputs, and how long it would take.

**The choice** follows PyTorch's dispatcher (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
``select_sdp_backend``): backends are tried in priority order and the first whose filters all pass
runs. On sm_90 / sm_100 with cuDNN > 9.15 (the torch 2.11 wheels: the H200 traces of
validation/ ran cuDNN whenever it was allowed) the order is cuDNN, flash, mem-efficient, math;
elsewhere flash, mem-efficient, math. The filters modelled, per backend:

* flash: fp16/bf16; no ``attn_mask`` tensor; q, k, v head dims equal and ≤ 256; ``is_causal`` only
  with Sq == Sk; fewer KV heads only with ``enable_gqa=True``; sm_80 and newer;
* mem-efficient: fp16/bf16/fp32; head dims a multiple of 8 (fp16/bf16) or 4 (fp32), q and k equal;
  any mask; fewer KV heads only with ``enable_gqa=True``;
* cuDNN: fp16/bf16; head dims a multiple of 8 and ≤ 256 on sm_90 (≤ 128 for a backward, or
  192/128, 256/256); ``dropout_p`` a multiple of 1/16; key length ≠ 1; not in deterministic mode;
* math: always.

A float ``attn_mask`` of another dtype than the query (an fp32 relative-position bias with bf16
q/k/v, as T5's) is taken to send SDPA to math (validation twin ``t5_bias``).

**The time** of a pass on a backend is the pass's attention FLOPs (forward 4·B·H·Sq·Sk·D, half of it
causal; backward 2.5×) divided by the rate that backend reached on this GPU family in the measured
table (data/sdpa_backends.json, built by validation/backend_table.py from the H200 traces), at the
nearest head dim and the same mask kind (causal or not), or the bytes of q, k, v and the output at
80 % of the bandwidth if that is longer (decode). Without a table row for the GPU family the rate is
35 % of the dtype's Tensor-Core peak (60 % of the fp32 peak for fp32 on mem-efficient), and the
prediction says so.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from ..roofline import ledger as L
from ..roofline.devices import sm_limits
from .run import FUSED_BANDWIDTH_FRACTION, Run

BACKWARD_FLOP_RATIO = 2.5
LABELS = {"flash": "FlashAttention", "efficient": "mem-efficient", "cudnn": "cuDNN", "math": "math"}
SDP_ENUM = {
    "flash": "SDPBackend.FLASH_ATTENTION",
    "efficient": "SDPBackend.EFFICIENT_ATTENTION",
    "cudnn": "SDPBackend.CUDNN_ATTENTION",
    "math": "SDPBackend.MATH",
}
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sdpa_backends.json")


@dataclass(frozen=True)
class Inputs:
    """What SDPA's dispatcher looks at. ``mask``: "none", "causal" (is_causal=True), "bool" or
    "float" (an attn_mask tensor); ``mask_dtype`` for a float one."""

    dtype: Optional[str]
    b: int
    h: int
    hk: int
    sq: int
    sk: int
    d: int
    dv: int
    mask: str = "none"
    mask_dtype: Optional[str] = None
    # an attn_mask tensor whose last dim is not contiguous (a bias permuted from [Sq, Sk, H], as T5's):
    # mem-efficient takes none; one that requires grad (a learned bias in training): cuDNN takes none.
    # Both measured on the H200 (torch 2.11, validation/sdpa_choice_probe.py; the T5 SDPA twin ran math)
    mask_strided: bool = False
    mask_grad: bool = False
    # a mask with its own slice per batch and head ([B, H, Sq, Sk]), not broadcast over the batch
    mask_batched: bool = False
    dropout_p: float = 0.0
    enable_gqa: Optional[bool] = None
    backward: bool = False

    @property
    def causal(self) -> bool:
        return self.mask == "causal"

    def fwd_flops(self) -> float:
        """The forward's FLOPs as the measured table counts them (validation/backend_table.py uses
        this): every pair at the ledger's FLOPs per pair, half of them when causal and square (not
        the exact kept pairs: the rates were measured with this count)."""
        f = L.pair_flops(self.d, self.dv) * self.b * self.h * self.sq * self.sk
        return f * (0.5 if self.causal and self.sq == self.sk else 1.0)

    def io_bytes(self, itemsize: int = 2) -> float:
        return itemsize * (
            self.b * self.h * self.sq * (self.d + self.dv) + self.b * self.hk * self.sk * (self.d + self.dv)
        )


def arch_of(run: Run) -> Optional[str]:
    lim = sm_limits({}, run.device_key)
    return lim.arch if lim is not None else None


def priority(arch: Optional[str]) -> tuple[str, ...]:
    if arch in ("sm_90", "sm_100"):
        return ("cudnn", "flash", "efficient", "math")
    return ("flash", "efficient", "math")


def why_not(backend: str, x: Inputs, arch: Optional[str]) -> Optional[str]:
    """Why ``backend`` would not run these inputs, or None when it would."""
    half = x.dtype in ("fp16", "bf16")
    gqa_ok = x.h == x.hk or x.enable_gqa is True
    if backend == "math":
        return None
    if x.mask == "float" and x.mask_dtype and x.dtype and x.mask_dtype != x.dtype:
        return f"a {x.mask_dtype} attn_mask for {x.dtype} inputs: only the math backend mixes them"
    if backend == "flash":
        if not half:
            return f"{x.dtype} inputs (flash needs fp16/bf16)"
        if x.mask in ("bool", "float"):
            return "an attn_mask tensor (flash takes none; is_causal=True for a causal mask)"
        if not (x.d == x.dv and x.d <= 256):
            return f"head dims {x.d}/{x.dv} (flash needs them equal and ≤ 256)"
        if x.causal and x.sq != x.sk:
            return "is_causal with Sq ≠ Sk"
        if not gqa_ok:
            return f"{x.h} query / {x.hk} KV heads without enable_gqa=True"
        return None
    if backend == "efficient":
        if x.dtype not in ("fp16", "bf16", "fp32"):
            return f"{x.dtype} inputs"
        if x.mask in ("bool", "float") and x.mask_strided:
            return "an attn_mask whose last dim is not contiguous (stride ≠ 1)"
        align = 8 if half else 4
        if x.d % align or x.dv % align:
            return f"head dims {x.d}/{x.dv} not a multiple of {align}"
        if not gqa_ok:
            return f"{x.h} query / {x.hk} KV heads without enable_gqa=True"
        return None
    if backend == "cudnn":
        if not half:
            return f"{x.dtype} inputs (cuDNN needs fp16/bf16)"
        if x.mask in ("bool", "float") and x.mask_grad and x.backward:
            return "an attn_mask that requires grad (cuDNN computes no mask gradient)"
        if x.d % 8 or x.dv % 8:
            return f"head dims {x.d}/{x.dv} not a multiple of 8"
        limit = 256 if arch in ("sm_90", "sm_100") else 128
        if x.d > limit or x.dv > limit:
            return f"head dim above {limit}"
        if x.backward and not (max(x.d, x.dv) <= 128 or (x.d, x.dv) in ((192, 128), (256, 256))):
            return f"a backward with head dims {x.d}/{x.dv}"
        if x.dropout_p and (x.dropout_p * 16) != int(x.dropout_p * 16):
            return f"dropout_p={x.dropout_p:g} (cuDNN needs a multiple of 1/16)"
        if x.sk == 1:
            return "key length 1"
        return None
    return "unknown backend"


def choose(x: Inputs, arch: Optional[str]) -> tuple[str, dict[str, str]]:
    """The backend the dispatcher picks, and why each backend before it was passed over."""
    passed: dict[str, str] = {}
    for be in priority(arch):
        w = why_not(be, x, arch)
        if w is None:
            return be, passed
        passed[be] = w
    return "math", passed


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    with open(_DATA) as f:
        data: dict[str, Any] = json.load(f)
    return data


def _rows(arch: Optional[str]) -> list[dict[str, Any]]:
    for fam in table().get("families") or []:
        if fam.get("arch") == arch:
            rows: list[dict[str, Any]] = fam.get("rows") or []
            return rows
    return []


@dataclass
class Prediction:
    time_us: float
    source: str  # "table" | "peak fraction"
    note: str  # how it was predicted, in words
    bound: str  # "compute" | "bandwidth"


# the rows a mask kind falls back to when the table has none of its own, nearest first: a bias read
# (and its gradient written) costs more than no mask, and a causal kernel skips half the tiles
MASK_FALLBACK = {
    "float_grad": ("float_grad", "float", "bool", "none"),
    "float": ("float", "bool", "none"),
    "bool": ("bool", "float", "none"),
    "causal": ("causal",),
    "none": ("none",),
}
NEAREST_ROWS = 4  # the table rows a rate is interpolated from (inverse-distance weights)


def table_mask(x: Inputs) -> str:
    """The table's mask kind of these inputs: none, causal, bool, float or float_grad (a bias whose
    gradient the backward computes)."""
    if x.mask == "float" and x.mask_grad and x.backward:
        return "float_grad"
    return x.mask


def rate(backend: str, pas: str, x: Inputs, arch: Optional[str]) -> Optional[tuple[float, dict[str, Any]]]:
    """The measured FLOP rate (FLOP/s, on this call's FLOPs) of ``backend`` in pass ``pas`` at these
    inputs, and the rows it comes from.

    The rows: the table's of the same backend, pass, dtype and mask kind (else the nearest kind), at
    the smallest measured head dim at or above the call's — kernels are built for a few head dims and
    pad a head dim up to the next one (the sweep shows it: cuDNN runs D 80 and D 104 in the time of
    D 128, flash D 104 slower than D 128), so the call costs what the row costs per query-key pair —
    interpolated (inverse-distance weights) over the :data:`NEAREST_ROWS` nearest in query length, key
    length and batch·heads, in octaves (a small batch leaves SMs idle: its time per pair is higher)."""
    dt = "bf16" if x.dtype in ("bf16", "fp16") else x.dtype
    return _rate(backend, pas, dt, table_mask(x), x.d, x.sq, x.sk, x.b * x.h, x.mask_batched, arch)


def _distance(r: dict[str, Any], sq: int, sk: int, bh: int) -> float:
    """How far a table row is from a call, in octaves of query length, key length and batch·heads."""
    return (
        abs(math.log2(max(1, r["sq"]) / max(1, sq)))
        + abs(math.log2(max(1, r["sk"]) / max(1, sk)))
        + abs(math.log2(max(1, r["b"] * r["h"]) / max(1, bh)))
    )


@functools.lru_cache(maxsize=4096)  # a trace repeats its calls every step: one look per distinct key
def _rate(
    backend: str,
    pas: str,
    dt: Optional[str],
    kind: str,
    d: int,
    sq: int,
    sk: int,
    bh: int,
    batched: bool,
    arch: Optional[str],
) -> Optional[tuple[float, dict[str, Any]]]:
    rows = [r for r in _rows(arch) if r["backend"] == backend and r["pass"] == pas and r["dtype"] == dt]
    if not rows:
        return None
    same: list[dict[str, Any]] = []
    for k in MASK_FALLBACK.get(kind, (kind,)):
        same = [r for r in rows if r["mask"] == k]
        if same:
            break
    same = same or rows
    if kind in ("float", "float_grad", "bool"):  # a bias per batch and head, or broadcast over the batch
        same = [r for r in same if bool(r.get("mask_batched")) == batched] or same
    dims = sorted({r["d"] for r in same})
    dc = next((e for e in dims if e >= d), dims[-1])
    near = sorted((r for r in same if r["d"] == dc), key=lambda r: _distance(r, sq, sk, bh))[:NEAREST_ROWS]
    dist = [_distance(r, sq, sk, bh) for r in near]
    weights = [1.0 / (e + 0.05) ** 2 for e in dist]
    # a row's time per query-key pair, on the call's FLOPs (a head dim above every row's: time ∝ head dim),
    # at the call's wave efficiency (a grid of fewer blocks than SMs runs one wave in the time of a full
    # one) and on whole tiles (a call of 96 keys costs what 128 cost on a kernel of 64-key tiles)
    per_flop = min(1.0, d / dc)
    sms = _sm_count(arch)
    call_eff = wave_efficiency(backend, pas, bh, sq, sk, sms) / tile_padding(backend, pas, sq, sk)
    rates = [
        r["flops"]
        * per_flop
        / (r["time_us"] * 1e-6)
        * call_eff
        * tile_padding(backend, pas, r["sq"], r["sk"])
        / wave_efficiency(backend, pas, r["b"] * r["h"], r["sq"], r["sk"], sms)
        for r in near
    ]
    rt = sum(w * e for w, e in zip(weights, rates)) / sum(weights)
    r0 = near[0]
    return rt, {
        "d": dc,
        "mask": r0["mask"],
        "sq": r0["sq"],
        "sk": r0["sk"],
        "bh": r0["b"] * r0["h"],
        "exact": dist[0] == 0.0 and dc == d,
        "workloads": [r["workload"] for r in near],
        "tflops": round(rt / 1e12, 1),
    }


# the rows of one thread block of the fused kernels (FlashAttention-2/3 and cuDNN on sm_90: 128 query rows
# forward, 128 key rows backward; mem-efficient: 64): the grid is batch·heads × ceil(length / tile)
BLOCK_ROWS = {"flash": 128, "cudnn": 128, "efficient": 64}


def wave_efficiency(backend: str, pas: str, bh: int, sq: int, sk: int, sms: int) -> float:
    """The share of the SMs' block slots a call's grid fills, over its waves (1 for a grid of many
    waves; blocks / SMs for a grid smaller than one wave): the forward's grid runs over query tiles,
    the backward's over key tiles."""
    tile = BLOCK_ROWS.get(backend, 128)
    blocks = max(1, bh) * -(-max(1, sq if pas == "forward" else sk) // tile)
    waves = -(-blocks // max(1, sms))
    return blocks / (waves * sms)


# (query rows, key rows) of one tile, per backend and pass: the forward's thread block owns a query tile
# and loops over key tiles, the backward's owns a key tile and loops over query tiles. Mem-efficient's are
# in its kernel names (fmha_cutlassF_..._64x64, fmha_cutlassB_..._64x64); 64 keys is the smallest tile
# of the others, so a partial tile is never over-counted there
TILE_ROWS = {
    ("efficient", "forward"): (64, 64),
    ("efficient", "backward"): (64, 64),
    ("flash", "forward"): (BLOCK_ROWS["flash"], 64),
    ("flash", "backward"): (64, BLOCK_ROWS["flash"]),
    ("cudnn", "forward"): (BLOCK_ROWS["cudnn"], 64),
    ("cudnn", "backward"): (64, BLOCK_ROWS["cudnn"]),
}


def tile_padding(backend: str, pas: str, sq: int, sk: int) -> float:
    """The query-key pairs a call's tiles compute over the pairs it has (≥ 1): a length over one tile
    that is not a multiple of it leaves a partial last tile, which costs a whole one. A length under
    one tile is left as it is: short queries (decode) are bound by the bytes of k and v, and their
    kernels pack heads or split the keys instead of computing an empty tile."""

    def padded(n: int, tile: int) -> int:
        return n if n <= tile else -(-n // tile) * tile

    tq, tk = TILE_ROWS.get((backend, pas), (1, 1))
    sq, sk = max(1, sq), max(1, sk)
    return padded(sq, tq) * padded(sk, tk) / (sq * sk)


def _sm_count(arch: Optional[str]) -> int:
    for fam in table().get("families") or []:
        if fam.get("arch") == arch and fam.get("sm_count"):
            return int(fam["sm_count"])
    return 132


# the table's mask kinds (table_mask) in the prediction's note
MASK_WORDS = {
    "causal": "causal",
    "none": "no mask",
    "bool": "a bool mask",
    "float": "a float bias",
    "float_grad": "a float bias with its gradient",
}


def predict(backend: str, pas: str, x: Inputs, run: Run, arch: Optional[str]) -> Optional[Prediction]:
    """The predicted GPU time of one call's pass on ``backend``."""
    fl = x.fwd_flops() * (BACKWARD_FLOP_RATIO if pas == "backward" else 1.0)
    it = 4 if x.dtype == "fp32" else 2
    io = x.io_bytes(it) * (2.0 if pas == "backward" else 1.0)
    got = rate(backend, pas, x, arch)
    if got is not None:
        rt, src = got
        t = fl / rt
        mask_words = MASK_WORDS.get(src["mask"], src["mask"])
        note = f"{LABELS.get(backend, backend)} {pas} at {src['tflops']:g} TFLOP/s (measured table: " + (
            "at these shapes)"
            if src["exact"]
            else f"rows nearest S {src['sq']}x{src['sk']}, D {src['d']}, {src['bh']} batch·heads, {mask_words})"
        )
        source = "table"
    else:
        peak_name, peak, frac = run.fused_peak(x.dtype)
        if not peak or backend == "math":
            return None
        t = fl / (frac * peak)
        note = f"{LABELS.get(backend, backend)} {pas} at {frac:.0%} of the {peak_name} peak (no measured table row)"
        source = "peak fraction"
    bound = "compute"
    if run.bw:
        tb = io / (FUSED_BANDWIDTH_FRACTION * run.bw)
        if tb > t:
            t, bound = tb, "bandwidth"
            note = (
                f"{LABELS.get(backend, backend)} {pas}: q, k, v and the output moved at "
                f"{FUSED_BANDWIDTH_FRACTION:.0%} of the memory bandwidth (bandwidth-bound)"
            )
    return Prediction(t * 1e6, source, note, bound)


def predict_once(backend: str, pas: str, x: Inputs, run: Run, arch: Optional[str]) -> Optional[Prediction]:
    """:func:`predict`, once per distinct inputs of a run: every step of a trace repeats its calls."""
    key = (backend, pas, x, arch)
    if key not in run.predictions:
        run.predictions[key] = predict(backend, pas, x, run, arch)
    got: Optional[Prediction] = run.predictions[key]
    return got


def inputs_of_call(c: dict[str, Any], backward: bool) -> Optional[Inputs]:
    """The dispatcher's inputs of a recorded SDPA call (run.sdpa_calls)."""
    s = c.get("shapes")
    if not s:
        return None
    mask, batched = "none", False
    md = c.get("mask_dtype")
    if s.get("mask_bytes"):
        mask = "bool" if md == "bool" else "float"
        # the bytes its strides address: a slice per batch and head, or broadcast over one of them
        item = {"bool": 1, "fp32": 4}.get(md or "", 2)
        batched = int(s["b"]) > 1 and s["mask_bytes"] >= item * int(s["b"]) * int(s["h"]) * int(s["sq"]) * int(s["sk"])
    elif s.get("causal"):
        mask = "causal"
    return Inputs(
        dtype=s.get("dtype"),
        b=int(s["b"]),
        h=int(s["h"]),
        hk=int(s["hk"]),
        sq=int(s["sq"]),
        sk=int(s["sk"]),
        d=int(s["d"]),
        dv=int(s["dv"]),
        mask=mask,
        mask_dtype=md if mask == "float" else None,
        mask_batched=batched,
        dropout_p=float(s.get("dropout_p") or 0.0),
        enable_gqa=c.get("enable_gqa"),
        backward=backward,
    )
