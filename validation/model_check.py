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


def _g(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


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


# -- round 4 (validation/round4_model.py; unpacked by validation/unpack_round4.py) ------------------
R4 = os.path.join(HERE, "round4")


def r4_dir() -> str | None:
    """The latest round-4 recording (validation/round4/<date>), if any."""
    dates = sorted(d for d in glob.glob(os.path.join(R4, "*")) if os.path.isdir(os.path.join(d, "meta")))
    return dates[-1] if dates else None


def r4_meta(w: str) -> dict | None:
    d = r4_dir()
    p = os.path.join(d, "meta", f"{w}.json") if d else ""
    if not d or not os.path.exists(p):
        return None
    with open(p) as f:
        m = json.load(f)
    return m if m.get("status") == "ok" else None


def r4_report(w: str) -> dict | None:
    files = sorted(glob.glob(os.path.join(DATA, "round4", w, "*.pt.trace.json*")))
    return analyze_path(files[0]) if files else None


def r4_ncu() -> dict[str, list[dict]]:
    """The round-4 Nsight Compute rows per target (the NVTX range each step ran in)."""
    d = r4_dir()
    paths = [os.path.join(d, "ncu", n) for n in ("r4.csv", "r4.csv.gz")] if d else []
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return {}
    sys.path.insert(0, HERE)
    import ncu_csv

    with (gzip.open if paths[0].endswith(".gz") else open)(paths[0], "rt", errors="replace") as f:
        table = ncu_csv.parse(f.read(), base_units=True)
    col = ncu_csv.nvtx_column(table.columns)
    out: dict[str, list[dict]] = {}
    for r in table.rows:
        cell = str(r.get(col) or "") if col else ""
        hit = [n for n in _R4_NCU_TARGETS if n in cell]
        if hit:
            out.setdefault(max(hit, key=len), []).append(r)
    return out


_R4_NCU_TARGETS = [f"ncu_{b}_{s}" for s in ("decode_k4000", "prefill_k4000", "temporal16") for b in ("flash", "cudnn")]
_R4_NCU_TARGETS.append("ncu_fp8_scaled_mm")


def r4_boundary_table() -> list[str]:
    """The FFN-boundary estimate of the eager trace against the measured twin, on the GPU-bound step (B 8, S 4096)
    and at the twin's size with the host out of the step (CUDA graphs)."""
    out = [
        "### Round 4: the FFN boundary on a GPU-bound step and under CUDA graphs",
        "",
        "| pair | add+norm estimate µs/step | measured add+norm µs/step (traces) | GPU kernel ms/step | "
        "step ms (CUDA events, median) | kernel saving µs | step saving µs | step / kernel saving |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    pairs = [
        ("B8 S4096 eager → compiled", "ffn_block_b8_s4096_eager", "ffn_block_b8_s4096_compiled", None),
        ("B2 S2048 eager → compiled", "ffn_block_b2_s2048_eager", "ffn_block_b2_s2048_compiled", None),
        (
            "B2 S2048 eager CUDA graph → compiled reduce-overhead",
            "ffn_block_b2_s2048_eager_cudagraph",
            "ffn_block_b2_s2048_compiled_cudagraph",
            "ffn_block_b2_s2048_eager",
        ),
    ]
    for label, a, b, est_from in pairs:
        ma, mb = r4_meta(a), r4_meta(b)
        ra, rb = r4_report(est_from or a), r4_report(b)
        if not (ma and mb and ra):
            out.append(f"| {label} | not recorded | | | | | | |")
            continue
        steps = len(ra["steps"]) or 1
        fus = {f["id"]: f for f in ra["boundary"]["fusions"]}
        est = fus["add_norm"]["estimated_gain_us"] / steps if "add_norm" in fus else float("nan")
        meas = "–"
        if rb is not None and est_from is None:
            er = {r["role"]: r for r in ra["boundary"]["roles"]}
            cr = {r["role"]: r for r in rb["boundary"]["roles"]}
            if {"residual_add", "norm"} <= set(er) and "add_norm" in cr:
                meas = (
                    f"{(er['residual_add']['time_us'] + er['norm']['time_us'] - cr['add_norm']['time_us']) / steps:.1f}"
                )
        ka, kb = ma.get("gpu_kernel_ms_per_step"), mb.get("gpu_kernel_ms_per_step")
        sa, sb = ma["step_ms_median"], mb["step_ms_median"]
        saving, ksaving = (sa - sb) * 1e3, (ka - kb) * 1e3
        out.append(
            f"| {label} | {est:.1f} | {meas} | {ka:.3f} → {kb:.3f} | {sa:.3f} → {sb:.3f} | {ksaving:+.0f} | "
            f"{saving:+.0f} | {saving / ksaving:.2f} |"
        )
    return out


def r4_ledger_table() -> list[str]:
    out = [
        "### Round 4: the ledger where the trace now carries the lengths / block counts",
        "",
        "| workload | the math (run's meta) | ledger | check |",
        "|---|---|---|---|",
    ]
    for w in ("jagged_build_nt_fwd", "jagged_build_nt_fwdbwd", "jagged_build_asnt_fwd"):
        m, r = r4_meta(w), r4_report(w)
        if not (m and r):
            out.append(f"| {w} | not recorded | | |")
            continue
        led = r["flops_ledger"]
        steps = max(len(r["steps"]), 1)
        true = m["useful_flops_fwd"] * (3 if m["pass_"] == "fwd+bwd" else 1) * steps
        lengths = sorted({str((c.get("shapes") or {}).get("lengths")) for c in led["calls"]})
        out.append(
            f"| {w} | Σ 4·Lᵢ²·H·D = {_g(true)} ({steps} steps) | useful {_g(led['useful'])}, lengths "
            f"{'/'.join(lengths)}, useful_exact {led['useful_exact']} | {led['useful'] / true - 1:+.2%} |"
        )
    for w in ("flex_doc_fwdbwd_mask_in_step", "flex_doc_fwdbwd_annotated"):
        m, r = r4_meta(w), r4_report(w)
        if not (m and r):
            out.append(f"| {w} | not recorded | | |")
            continue
        led = r["flops_ledger"]
        fwd = [c for c in led["calls"] if c["direction"] == "forward"]
        steps = max(len(fwd), 1)
        visited = m["blocks_visited_per_call"]
        executed = visited * m["block_size"][0] * m["block_size"][1] * 4 * m["D"] * (1 + 3.5)
        f0 = fwd[0] if fwd else {}
        out.append(
            f"| {w} | forward useful {_g(m['useful_flops_fwd'])}; {m['kv_blocks_partial']}+{m['kv_blocks_full']} of "
            f"{m['q_blocks'] * m['kv_blocks']} blocks; executed {_g(executed)}/call (blocks, fwd+bwd) | "
            f"executed {_g(led['executed'] / steps)}/call ({f0.get('executed_basis')}); forward useful "
            f"[{_g(f0.get('useful_low'))}, {_g(f0.get('useful'))}] | "
            f"executed {led['executed'] / steps / executed:.3f}x the blocks' count |"
        )
    return out


def r4_fp8_table() -> list[str]:
    out = [
        "### Round 4: an FP8 block (e4m3 `_scaled_mm` projections) and its bf16 twin",
        "",
        "| workload | step ms (CUDA events) | HFU | per roof: utilisation (kernels, FLOPs) |",
        "|---|---:|---:|---|",
    ]
    for w in ("fp8_block_fwd_e4m3", "fp8_block_fwd_bf16", "fp8_attn_sdpa_e4m3", "fp8_attn_flex_e4m3"):
        m, r = r4_meta(w), r4_report(w)
        if not (m and r):
            d = r4_dir()
            p = os.path.join(d, "meta", f"{w}.json") if d else ""
            err = json.load(open(p)).get("error", "")[:120] if p and os.path.exists(p) else ""
            out.append(f"| {w} | not recorded{': ' + err if err else ''} | | |")
            continue
        hfu = r["flops_ledger"]["hfu"]
        roofs = "; ".join(
            f"{k} {v['utilization']:.3f} ({v['kernels']}, {_g(v['flops'])})" for k, v in sorted(hfu["by_roof"].items())
        )
        out.append(f"| {w} | {m['step_ms_median']:.3f} | {hfu['value']} | {roofs} |")
    return out


def r4_ncu_table() -> list[str]:
    rows = r4_ncu()
    out = [
        "### Round 4: executed FLOPs where the key length is not a multiple of the tile (Nsight Compute)",
        "",
        "| target | shape (b, h, sq, sk, d) | ncu tensor ops | ledger executed | ratio | ledger basis |",
        "|---|---|---:|---:|---:|---|",
    ]
    for w in _R4_NCU_TARGETS:
        m, r = r4_meta(w), r4_report(w)
        ks = rows.get(w, [])
        hw = sum(sum(float(k.get(x) or 0) for x in TENSOR_OPS) for k in ks)
        if not (m and r and ks):
            out.append(f"| {w} | not recorded (meta {bool(m)}, trace {bool(r)}, ncu rows {len(ks)}) | | | | |")
            continue
        if w == "ncu_fp8_scaled_mm":
            out.append(
                f"| {w} | M {m['M']}, N {m['N']}, K {m['K']} | {_g(hw)} | 2·M·N·K = {_g(m['flops_math'])} | "
                f"{m['flops_math'] / hw:.3f} | the math |"
            )
            continue
        led = r["flops_ledger"]
        steps = max(len([c for c in led["calls"] if c["direction"] == "forward"]), 1)
        c0 = led["calls"][0] if led["calls"] else {}
        shp = f"{m['B']}, {m['H']}, {m['Sq']}, {m['Sk']}, {m['D']}"
        out.append(
            f"| {w} | {shp} | {_g(hw)} | {_g(led['executed'] / steps)} | {led['executed'] / steps / hw:.3f} | "
            f"{c0.get('executed_basis')} |"
        )
    return out


def round4_tables() -> list[str]:
    """The round-4 tables; one that cannot be built (a workload missing a figure) says why instead."""
    if r4_dir() is None:
        return []
    d = os.path.relpath(r4_dir() or "", ROOT)
    out = [f"Round 4 ({d}, validation/round4_model.py)", ""]
    for t in (r4_boundary_table, r4_ledger_table, r4_fp8_table, r4_ncu_table):
        try:
            out += [*t(), ""]
        except (TypeError, KeyError, ValueError, ZeroDivisionError) as e:
            out += [f"{t.__name__}: not built ({type(e).__name__}: {e})", ""]
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
    ).rstrip()
    r4 = round4_tables()
    if r4:
        text += "\n\n" + "\n".join(r4).rstrip()
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
