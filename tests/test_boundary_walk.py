"""memory/boundary.walk, whole-array, against the per-kernel loop it replaced (kept here as the
reference), on random kernel tables: several streams, ties in start times, calls interleaved,
backward kernels, missing bytes and reads, Triton and eager roles."""

from __future__ import annotations

import math
import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tb_attention_plugin.memory import boundary as B
from tb_attention_plugin.model import Call
from tb_attention_plugin.roofline.roles import is_matrix_kernel
from tb_attention_plugin.table import Coded, KernelTable

NAMES = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)",
    "triton_red_fused_add_mean_mul_pow_rsqrt_0",
    "triton_red_fused_mean_pow_rsqrt_1",
    "triton_poi_fused_add_2",
    "triton_poi_fused_mul_silu_3",
    "void at::native::elementwise_kernel<128, 2>(int, at::native::add_kernel)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
    "void at::native::unrolled_elementwise_kernel<copy>",
    None,
]
OPS = ["aten::mm", "aten::addmm", "aten::add", "aten::add_", "aten::layer_norm", "aten::rms_norm", "aten::mul", None]
MODULES = ["LlamaRMSNorm", "nn.Module: LayerNorm_0", "Linear", None]
PHASES = ["qk_matmul", "softmax", "pv_matmul", "fused_attention", "out_proj", "layout", "mask", None]


def _reference(kt, calls, attr):
    """The per-kernel loop memory/boundary.walk ran before it was whole-array (same rules)."""
    n = len(kt)
    ts, dur, nbytes = kt.num("ts"), np.nan_to_num(kt.num("dur_us")), kt.num("bytes")
    ids = np.asarray(kt.columns["id"], dtype=np.int64)
    reads = np.full(n, np.nan)
    ok = (ids >= 0) & (ids < len(attr.reads))
    reads[ok] = np.asarray(attr.reads, dtype=np.float64)[ids[ok]]
    kind_c, kind_v = kt.codes("kind")
    ph_c, ph_v = kt.codes("phase")
    dir_c, dir_v = kt.codes("direction")
    nm_c, nm_v = kt.codes("name")
    op_c, op_v = kt.codes("cost_op")
    md_c, md_v = kt.codes("module")
    inst = kt.num("instance")
    dev = np.asarray(kt.columns["device"], dtype=np.int64)
    stream = np.asarray(kt.columns["stream"], dtype=np.int64)
    is_kernel = np.asarray([v == "kernel" for v in kind_v], dtype=bool)[kind_c]
    streams = {}
    for a, b in sorted(set(zip(dev.tolist(), stream.tolist()))):
        m = np.flatnonzero((dev == a) & (stream == b) & is_kernel)
        streams[(a, b)] = m[np.argsort(ts[m], kind="stable")].tolist()

    def matmul(r):
        name = str(nm_v[nm_c[r]] or "")
        if op_v[op_c[r]] in B.MATMUL_OPS:
            return True
        return is_matrix_kernel(name) and "attention" not in name.split("(", 1)[0].lower()

    def role_of(r):
        o, name, module = op_v[op_c[r]] or "", str(nm_v[nm_c[r]] or ""), md_v[md_c[r]]
        if name.startswith("triton_"):
            fused = name.split("fused", 1)[-1]
            normish = bool(B._NORM.search(fused)) or ("mean" in fused and "pow" in fused)
            if normish and "add" in fused:
                return "add_norm"
            if normish:
                return "norm"
            return "residual_add" if re.search(r"(^|_)add(_|$)", fused) else "other"
        if B._NORM_OPS.search(o) or (module and B._NORM.search(module)):
            return "norm"
        return "residual_add" if o in B._ADD_OPS else "other"

    def ntn(x):
        return 0.0 if x != x else (math.copysign(1.7976931348623157e308, x) if math.isinf(x) else x)

    out = []
    for c in calls:
        core = [
            int(r)
            for r in c.rows.tolist()
            if ph_v[ph_c[r]] in B._OUTPUT and dir_v[dir_c[r]] != "backward" and is_kernel[r]
        ]
        if not core:
            continue
        last = max(core, key=lambda r: ts[r] + dur[r])
        st = streams[(int(dev[last]), int(stream[last]))]
        at = st.index(last)
        items, state, nxt, complete = [], "before", None, False
        for r in st[at + 1 : at + 1 + B.MAX_BOUNDARY_KERNELS]:
            iv = inst[r]
            mine = iv == iv and int(iv) == c.call
            ph = ph_v[ph_c[r]]
            if dir_v[dir_c[r]] == "backward" or (not mine and ph in B._CORE):
                break
            if state == "before":
                if matmul(r):
                    role, state = "o_proj", "oproj"
                elif mine and ph == "out_proj":
                    role = "o_proj"
                elif mine and ph == "layout":
                    role = "layout"
                else:
                    role = "other"
            elif state == "oproj":
                if (mine and ph == "out_proj") or (matmul(r) and mine):
                    role = "o_proj"
                elif matmul(r):
                    nxt, complete = r, True
                    break
                else:
                    state, role = "after", role_of(r)
            else:
                if matmul(r):
                    nxt, complete = r, True
                    break
                role = role_of(r)
            if not items or items[-1][0] != role:
                items.append([role, 0, 0.0, 0.0, 0.0, 0.0, True])
            it = items[-1]
            b, rd = float(nbytes[r]), float(reads[r])
            it[1] += 1
            it[2] += float(dur[r])
            it[3] += 0.0 if b != b else b
            it[4] += 0.0 if rd != rd else rd
            it[5] = 0.0 if b != b else max(b - ntn(rd), 0.0)
            it[6] = it[6] and b == b
        out.append(
            {
                "call": c.call,
                "items": [tuple(it[:6]) for it in items],
                "next": None if nxt is None else (nm_v[nm_c[nxt]], op_v[op_c[nxt]], md_v[md_c[nxt]]),
                "complete": complete and any(it[0] == "o_proj" for it in items),
                "costed": all(it[6] for it in items),
            }
        )
    return out


def _coded(values):
    vocab = list(dict.fromkeys(values))
    return Coded(np.asarray([vocab.index(v) for v in values]), vocab)


def _table(rng: random.Random, n: int):
    """A random kernel table and its attention calls: runs of one call's kernels, often followed
    by a boundary as a block runs it (layout copy, projection GEMM, add, norm, next GEMM), with
    random kernels between, on a few streams, start times mostly in row order with ties."""
    rows: list[dict] = []
    call = 0

    def row(phase, instance, direction, name=None, op=None):
        rows.append(
            {
                "phase": phase,
                "instance": instance,
                "direction": direction,
                "name": name if name is not None else rng.choice(NAMES),
                "op": op if op is not None else rng.choice(OPS),
            }
        )

    gemm, add, norm = NAMES[0], NAMES[7], NAMES[9]
    while len(rows) < n:
        call += 1
        direction = "backward" if rng.random() < 0.15 else "forward"
        for _ in range(rng.randint(1, 8)):
            mine = rng.random() < 0.8
            phase = rng.choice(PHASES) if mine else rng.choice([None, None, "qk_matmul", "fused_attention"])
            instance = float(call) if mine else (float(call + 1) if rng.random() < 0.3 else math.nan)
            row(phase, instance, direction if rng.random() < 0.9 else "backward")
        if rng.random() < 0.7:  # the block's boundary, each part perhaps missing
            if rng.random() < 0.5:
                row("layout", float(call), direction, NAMES[10], "aten::copy_")
            row("out_proj" if rng.random() < 0.5 else None, float(call), direction, gemm, "aten::mm")
            if rng.random() < 0.3:
                row("out_proj", float(call), direction, NAMES[6], "aten::mul")
            row(None, math.nan, direction, rng.choice([add, NAMES[5]]), "aten::add")
            row(None, math.nan, direction, rng.choice([norm, NAMES[4], NAMES[3]]), rng.choice(["aten::rms_norm", None]))
            row(None, math.nan, direction, gemm, "aten::mm")
    rows = rows[:n]
    ts = np.cumsum([rng.choice([0.0, 1.0, 1.0, 2.0]) for _ in range(n)])
    if rng.random() < 0.5:  # some out of row order
        swap = rng.sample(range(n), n // 10)
        ts[swap] = ts[swap[::-1]]
    cols = {
        "ts": ts,
        "dur_us": np.asarray([rng.choice([rng.random() * 10, 0.0, math.nan]) for _ in range(n)]),
        "bytes": np.asarray([rng.choice([rng.random() * 1e6, math.nan, 4096.0, 4096.0]) for _ in range(n)]),
        "id": np.asarray([rng.randint(-1, n) for _ in range(n)]),
        "kind": _coded([rng.choice(["kernel"] * 19 + ["memcpy"]) for _ in range(n)]),
        "phase": _coded([r["phase"] for r in rows]),
        "direction": _coded([r["direction"] for r in rows]),
        "name": _coded([r["name"] for r in rows]),
        "cost_op": _coded([r["op"] for r in rows]),
        "module": _coded([rng.choice(MODULES) for _ in range(n)]),
        "instance": np.asarray([r["instance"] for r in rows]),
        "device": np.asarray([rng.choice([0] * 9 + [1]) for _ in range(n)]),
        "stream": np.asarray([rng.choice([7] * 9 + [13]) for _ in range(n)]),
    }
    kt = KernelTable(cols)
    inst = cols["instance"]
    calls = []
    for c in range(1, call + 1):
        r = np.flatnonzero(inst == c)
        if len(r):
            calls.append(Call(c, np.asarray(rng.sample(r.tolist(), len(r))), site=c % 3))  # any row order
    reads = np.asarray([rng.choice([rng.random() * 1e6, math.nan, math.inf, 1024.0]) for _ in range(n)])
    return kt, calls, SimpleNamespace(reads=reads)


@pytest.mark.parametrize("seed", range(12))
def test_walk_matches_the_per_kernel_loop(seed):
    rng = random.Random(seed)
    kt, calls, attr = _table(rng, rng.choice([40, 300, 2000]))
    got = [
        {
            "call": w["call"],
            "items": [(it.role, it.kernels, it.time_us, it.bytes, it.reads, it.last_writes) for it in w["items"]],
            "next": None if w["next"] is None else (w["next"]["name"], w["next"]["op"], w["next"]["module"]),
            "complete": w["complete"],
            "costed": w["costed"],
        }
        for w in B.walk(kt, calls, attr)
    ]
    want = _reference(kt, calls, attr)
    assert want
    assert [w["call"] for w in got] == [w["call"] for w in want]
    assert got == want


def test_walk_sees_every_role_and_both_endings():
    """Across the random tables, every role, complete and cut walks, and a next matmul occur:
    the comparison above is not between two empty lists."""
    roles, complete, cut = set(), 0, 0
    for seed in range(12):
        rng = random.Random(seed)
        kt, calls, attr = _table(rng, rng.choice([40, 300, 2000]))
        for w in _reference(kt, calls, attr):
            roles |= {it[0] for it in w["items"]}
            complete += w["complete"]
            cut += not w["complete"]
    assert roles == set(B.ROLES)
    assert complete > 10 and cut > 10
