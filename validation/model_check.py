"""Issue #23 on the H200 recordings of 2026-12-01: sites, the FFN boundary against its torch.compile twin, and
the FLOPs ledger against the math of each workload's recorded shapes.

    python validation/model_check.py            # print the tables (markdown)
    python validation/model_check.py --write    # rewrite them in validation/RESULTS-model.md

Inputs: the traces in tests/data/twins and tests/data/round3, the twins' manifest
(validation/twins/2026-12-01/manifest.json: unprofiled step times) and the round-3 meta files
(validation/round3/2026-12-01/meta: each workload's shapes). tests/test_model_recorded.py pins the same
comparisons; this script writes their figures down.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tb_attention_plugin.analyze import analyze_path  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
META = os.path.join(HERE, "round3", "2026-12-01", "meta")
MANIFEST = os.path.join(HERE, "twins", "2026-12-01", "manifest.json")
DOC = os.path.join(HERE, "RESULTS-model.md")
BEGIN, END = "<!-- tables: validation/model_check.py --write -->", "<!-- end of tables -->"


def report(run: str) -> dict:
    return analyze_path(sorted(glob.glob(os.path.join(DATA, run, "*.pt.trace.json*")))[0])


def meta(run: str) -> dict:
    with open(os.path.join(META, f"{run}.json")) as f:
        return json.load(f)


def _g(x: float) -> str:
    return f"{x:.4g}"


def boundary_table() -> list[str]:
    with open(MANIFEST) as f:
        pair = json.load(f)["pairs"]["ffn_boundary_compile"]
    e, c = report("twins/ffn_block_eager"), report("twins/ffn_block_compiled")
    steps = len(e["steps"])
    assert steps == len(c["steps"])
    out = [
        "### The FFN boundary against its torch.compile twin (pair `ffn_boundary_compile`)",
        "",
        f"FfnBoundaryBlock, {pair['problem']['shapes']['B']}x{pair['problem']['shapes']['S']}x"
        f"{pair['problem']['shapes']['hidden']} bf16, forward; per step (the traces' {steps} active steps averaged).",
        "",
        "| boundary role | eager µs | eager kernels | compiled µs | compiled kernels |",
        "|---|---:|---:|---:|---:|",
    ]
    er = {r["role"]: r for r in e["boundary"]["roles"]}
    cr = {r["role"]: r for r in c["boundary"]["roles"]}
    for role in ("o_proj", "residual_add", "norm", "add_norm"):
        a, b = er.get(role), cr.get(role)
        out.append(
            f"| {role} | {a['time_us'] / steps:.1f} | {a['kernels'] // steps} | " if a else f"| {role} | – | – | "
        )
        out[-1] += f"{b['time_us'] / steps:.1f} | {b['kernels'] // steps} |" if b else "– | – |"
    eb, cb = e["boundary"]["time_us"] / steps, c["boundary"]["time_us"] / steps
    out.append(f"| **boundary** | **{eb:.1f}** | | **{cb:.1f}** | |")
    measured_an = (er["residual_add"]["time_us"] + er["norm"]["time_us"] - cr["add_norm"]["time_us"]) / steps
    fus = {f["id"]: f for f in e["boundary"]["fusions"]}
    an = fus["add_norm"]["estimated_gain_us"] / steps
    allf = e["boundary"]["estimated_gain_us"] / steps
    p, x = pair["problem"], pair["fix"]
    out += [
        "",
        "| figure, per step | estimated (eager trace) | measured (twin) | estimate / measured |",
        "|---|---:|---:|---:|",
        f"| add+norm in one kernel (the fusion Inductor applied) | {an:.1f} µs | {measured_an:.1f} µs "
        f"(eager add + norm − compiled add_norm) | {an / measured_an:.2f} |",
        f"| every boundary fusion (epilogue + add_norm + prologue; Inductor applied only add_norm) | {allf:.1f} µs | "
        f"{eb - cb:.1f} µs (boundary time, eager − compiled) | {allf / (eb - cb):.2f} |",
        f"| GPU kernel time of the whole step | – | {p['gpu_kernel_ms_per_step'] * 1e3:.0f} → "
        f"{x['gpu_kernel_ms_per_step'] * 1e3:.0f} µs: "
        f"{pair['measured_gpu_kernel_saving_ms_per_step'] * 1e3:.0f} µs saved | – |",
        f"| step time (CUDA events, 12 unprofiled steps, median) | – | {p['step_ms_median'] * 1e3:.0f} → "
        f"{x['step_ms_median'] * 1e3:.0f} µs: {pair['measured_saving_ms_per_step'] * 1e3:+.0f} µs saved | – |",
    ]
    return out


def ledger_table() -> list[str]:
    rows = []
    # causal flash S=8192
    m = meta("r3_flash_fwdbwd_s8192")
    b, h, s, d = m["B"], m["H"], m["q_len"], m["D"]
    led = report("round3/r3_flash_fwdbwd_s8192")["flops_ledger"]
    dense = 4.0 * b * h * s * s * d * 3
    useful = 4.0 * b * h * d * s * (s + 1) / 2 * 3
    rows.append(
        (
            "r3_flash_fwdbwd_s8192 (causal, fwd+bwd)",
            f"useful {_g(useful)}, dense {_g(dense)}",
            f"useful {_g(led['useful'])}, executed {_g(led['executed'])}, dense {_g(led['dense'])}",
            f"useful/dense = {led['useful'] / led['dense']:.4f}; MFU useful {led['mfu']['useful']:.3f}",
        )
    )
    for run in ("r3_jagged_fwd", "r3_jagged_fwdbwd"):
        m = meta(run)
        true = sum(4.0 * n * n * m["H"] * m["D"] for n in m["lengths"]) * (3 if m["pass"] == "fwd+bwd" else 1)
        led = report(f"round3/{run}")["flops_ledger"]
        rows.append(
            (
                f"{run} (lengths {min(m['lengths'])}..{max(m['lengths'])}, not recorded)",
                f"Σ 4·Lᵢ²·H·D = {_g(true)}",
                f"bounds [{_g(led['useful_low'])}, {_g(led['useful'])}]",
                f"{led['useful_low'] / true - 1:+.1%} / {led['useful'] / true - 1:+.1%} of the truth; "
                "useful_exact false",
            )
        )
    m = meta("r3_lower_right_decode")
    b, h, sq, sk, d = m["B"], m["H"], m["q_len"], m["kv_len"], m["D"]
    (c,) = report("round3/r3_lower_right_decode")["flops_ledger"]["calls"]
    true = 4.0 * b * h * d * sum(sk - sq + 1 + i for i in range(sq))
    rows.append(
        (
            "r3_lower_right_decode (4 queries, 4096 keys)",
            f"useful {_g(true)} (top-left would be {_g(4.0 * b * h * d * 10)})",
            f"{c['mask']}: useful {_g(c['useful'])}, dense {_g(c['dense'])}",
            f"{c['useful'] / true - 1:+.2%}",
        )
    )
    m = meta("r3_flex_doc_fwdbwd")
    led = report("round3/r3_flex_doc_fwdbwd")["flops_ledger"]
    fwd = next(x for x in led["calls"] if x["direction"] == "forward")
    rows.append(
        (
            "r3_flex_doc_fwdbwd (5 documents, causal)",
            f"forward useful {_g(m['useful_flops_fwd'])}; {m['kv_blocks_partial'] + m['kv_blocks_full']} of "
            f"{m['kv_blocks_dense']} blocks visited",
            f"forward {_g(fwd['useful'])} ({fwd['executed_basis']})",
            f"upper bound, {fwd['useful'] / m['useful_flops_fwd']:.1f}x the truth; MFU withheld "
            f"(exceeds_peak: {', '.join(led.get('exceeds_peak') or [])})",
        )
    )
    out = [
        "### The FLOPs ledger against the math",
        "",
        "| trace | the math (run's shapes) | ledger | check |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b_} | {c_} | {d_} |" for a, b_, c_, d_ in rows]
    return out


NCU = os.path.join(HERE, "round3", "2026-12-01", "ncu")
TENSOR_OPS = (
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16.sum",
    "sm__ops_path_tensor_src_fp8.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
)
ATTENTION_KERNEL = ("flash_fwd", "flash_bwd", "fmha_cutlass", "_sdpa_", "flex_attention")
NCU_RUNS = (
    "r3_flash_fwdbwd_s8192",
    "r3_cudnn_fwd_s4096",
    "r3_cudnn_fwdbwd_s4096",
    "r3_efficient_block_fwdbwd",
    "r3_swa_sdpa_fwd",
    "r3_lower_right_decode",
    "r3_splitkv_decode_gqa",
    "r3_decode_compiled",
    "r3_jagged_fwd",
    "r3_jagged_fwdbwd",
    "r3_flex_doc_fwdbwd",
)


def ncu_table() -> list[str]:
    out = [
        "### Executed FLOPs against the Tensor Cores' count (Nsight Compute, `sm__ops_path_tensor_*`)",
        "",
        "| workload | ncu tensor ops of the attention kernels | ledger executed | ratio | ledger useful |",
        "|---|---:|---:|---:|---:|",
    ]
    for run in NCU_RUNS:
        with open(os.path.join(NCU, f"{run}.json")) as f:
            rows = json.load(f)["kernels"]
        hw = sum(
            sum(k.get(m) or 0 for m in TENSOR_OPS)
            for k in rows
            if any(p in str(k.get("Kernel Name") or "") for p in ATTENTION_KERNEL)
        )
        led = report(f"round3/{run}")["flops_ledger"]
        mark = "≤ " if led["executed_upper_bound"] else ""
        out.append(
            f"| {run} | {_g(hw)} | {mark}{_g(led['executed'])} | {led['executed'] / hw:.3f} | {_g(led['useful'])} |"
        )
    return out


def fp8_table() -> list[str]:
    """modern/fp8_attn_fwd: e4m3 _scaled_mm projections and bf16 cuDNN attention, each on its own roof."""
    rep = report("modern/fp8_attn_fwd")
    with gzip.open(os.path.join(HERE, "modern", "2026-12-01", "ncu", "fp8_attn_fwd.json.gz"), "rt") as f:
        rows = json.load(f)["kernels"]
    hw = {
        "fp8": sum(k.get("sm__ops_path_tensor_src_fp8.sum") or 0 for k in rows),
        "bf16": sum(k.get("sm__ops_path_tensor_src_bf16_dst_fp32.sum") or 0 for k in rows),
    }
    hfu = rep["flops_ledger"]["hfu"]
    out = [
        "### FP8 on its own roof (modern/fp8_attn_fwd: e4m3 `_scaled_mm` q/k/v/o, bf16 cuDNN attention)",
        "",
        "| roof | kernels | roof FLOP/s | FLOPs (ledger) | Tensor Cores' count (ncu) | time µs | utilisation |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in sorted(hfu["by_roof"].items()):
        h = _g(hw[name]) if name in hw else "–"
        out.append(
            f"| {name} | {r['kernels']} | {_g(r['peak_flops_per_s'])} | {_g(r['flops'])} | {h} | {r['time_us']:.1f} | "
            f"{r['utilization']:.3f} |"
        )
    span = f"{hfu['span_us']:.0f} µs"
    out += ["", f"Step HFU {hfu['value']:.3f} over a {span} span (every costed kernel on its own roof)."]
    return out


def sites_table() -> list[str]:
    out = [
        "### Sites",
        "",
        "| trace | site | calls | shape (b, h, sq, sk, d) | bound | roofline: intensity FLOP/B, side, share of roof |",
        "|---|---|---:|---|---|---|",
    ]
    for run in ("twins/t5_eager", "twins/t5_sdpa", "twins/video_spatial_temporal", "round3/r3_swin_fwdbwd"):
        for s in report(run)["sites"]:
            sh = s["shapes"][0]
            rf = s.get("roofline") or {}
            out.append(
                f"| {run.split('/')[1]} | `{s['name']}` | {s['calls']} | {sh['b']}, {sh['h']}, {sh['sq']}, {sh['sk']}, "
                f"{sh['d']} | {s['bound']} | {rf.get('intensity')}, {rf.get('side')}, {rf.get('roof_share')} |"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite the tables in {os.path.relpath(DOC, ROOT)}")
    a = ap.parse_args()
    text = "\n".join(
        sites_table() + [""] + boundary_table() + [""] + ledger_table() + [""] + ncu_table() + [""] + fp8_table()
    )
    if not a.write:
        print(text)
        return
    with open(DOC) as f:
        doc = f.read()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(DOC, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
