"""Build the table of measured SDPA backend rates that advice/ predicts backend times from.

    python validation/backend_table.py            # rewrite tb_attention_plugin/advice/data/sdpa_backends.json
    python validation/backend_table.py --check    # exit 1 when the file differs from what the traces give

Source: the H200 validation traces ``validation/traces/sdpa_{flash,efficient,cudnn,math}_{fwd,fwdbwd}_*``
(one step each of F.scaled_dot_product_attention under ``sdpa_kernel(<backend>)``, B4 H16 S2048, D64 and
D128, bf16, causal and full; shapes and versions in ``validation/raw/2026-11-30/meta/<workload>.json``).
Every backend ran the same shapes, so the rates compare backends and nothing else.

Second source (2026-12-02): the sweep of validation/backend_sweep.py, run on the H200
(``validation/results/backend_sweep/<date>/backend_sweep.json``): S 256…8192, head dims 32…256, small and
full batches, bool masks and float biases (broadcast over the batch or not, with and without their
gradient), timed the same way (all the kernels a call launches, from a profiler pass). Its rows carry
``source: "sweep"``; advice interpolates between the rows nearest a call (advice/sdpa_choice.py).

Per (backend, pass, mask, head dim) a row gives the GPU time of all that backend's kernels in that pass
(the main kernel and its helpers: dot(dO, O), dq conversion, memsets) from the report's
``attention_backends``, and the rate it achieved on the attention FLOPs of that pass:
forward 4·B·H·Sq·Sk·D (half of it when causal), backward 2.5× the forward. The rate is what advice/
divides a call's FLOPs by to predict its time on another backend (docs/advice.md, *Backend table*).
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

OUT = os.path.join(ROOT, "tb_attention_plugin", "advice", "data", "sdpa_backends.json")
TRACES = os.path.join(HERE, "traces")
META = os.path.join(HERE, "raw", "2026-11-30", "meta")
BACKENDS = ("flash", "efficient", "cudnn", "math")
SWEEPS = os.path.join(HERE, "results", "backend_sweep")
# the sweep's mask names -> the table's (kind, a slice per batch and head)
SWEEP_MASKS = {
    "none": ("none", False),
    "causal": ("causal", False),
    "bool": ("bool", False),
    "float_1hss": ("float", False),
    "float_bhss": ("float", True),
    "float_1hss_grad": ("float_grad", False),
    "float_bhss_grad": ("float_grad", True),
}


def _workloads() -> list[str]:
    return sorted(
        d for d in os.listdir(TRACES) if d.startswith("sdpa_") and d.split("_")[1] in BACKENDS and "_fwd" in d
    )


def _row_inputs(meta: dict) -> dict:
    """B, H, S, D from the workload's description (the meta's own fields where it has them)."""
    desc = meta["description"]
    words = desc.replace(",", " ").split()

    def num(prefix: str, default: int) -> int:
        for w in words:
            if w.startswith(prefix) and w[len(prefix) :].isdigit():
                return int(w[len(prefix) :])
        return default

    return {"b": num("B", 4), "h": num("H", 16), "s": num("S", 2048), "d": num("D", 64)}


def sweep_rows() -> tuple[list[dict], list[str], dict]:
    """The table rows of every recorded sweep (validation/backend_sweep.py), the files they came from and
    the first one's environment."""
    from tb_attention_plugin.advice.sdpa_choice import BACKWARD_FLOP_RATIO, Inputs

    rows, files, env = [], [], {}
    if not os.path.isdir(SWEEPS):
        return rows, files, env
    for date in sorted(os.listdir(SWEEPS)):
        path = os.path.join(SWEEPS, date, "backend_sweep.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            sw = json.load(f)
        files.append(os.path.relpath(path, ROOT))
        env = env or sw.get("env") or {}
        for r in sw.get("rows") or []:
            if not r.get("time_us") or r["mask"] not in SWEEP_MASKS:
                continue
            kind, batched = SWEEP_MASKS[r["mask"]]
            x = Inputs(
                None,
                r["b"],
                r["h"],
                r["h"],
                r["sq"],
                r["sk"],
                r["d"],
                r["d"],
                mask="causal" if kind == "causal" else "none",
            )
            fl = x.fwd_flops() * (BACKWARD_FLOP_RATIO if r["pass"] == "backward" else 1.0)
            row = {
                "backend": r["backend"],
                "pass": r["pass"],
                "mask": kind,
                "dtype": {"bfloat16": "bf16", "float16": "fp16"}.get(r["dtype"], r["dtype"]),
                "d": r["d"],
                "b": r["b"],
                "h": r["h"],
                "sq": r["sq"],
                "sk": r["sk"],
                "time_us": round(r["time_us"], 3),
                "flops": fl,
                "tflops": round(fl / (r["time_us"] * 1e-6) / 1e12, 2),
                "workload": f"sweep {date} S{r['sq']} D{r['d']} B{r['b']} H{r['h']} {r['mask']}",
                "source": "sweep",
            }
            if kind in ("bool", "float", "float_grad"):
                row["mask_batched"] = batched
            rows.append(row)
    return rows, files, env


def build() -> dict:
    from tb_attention_plugin.advice.sdpa_choice import BACKWARD_FLOP_RATIO, Inputs
    from tb_attention_plugin.analyze import analyze_path
    from tb_attention_plugin.trace.files import expand_paths

    rows = []
    env = None
    for w in _workloads():
        with open(os.path.join(META, w + ".json")) as f:
            meta = json.load(f)
        env = env or meta.get("env")
        path = next(p for p, _ in expand_paths([os.path.join(TRACES, w)]))
        rep = analyze_path(path)
        shp = _row_inputs(meta)
        causal = bool(meta.get("causal"))
        b_, h, s, d = shp["b"], shp["h"], shp["s"], shp["d"]
        # the FLOPs the table's reader (advice/sdpa_choice.py) divides by these rates: one count for both
        fwd_flops = Inputs(None, b_, h, h, s, s, d, d, mask="causal" if causal else "none").fwd_flops()
        for b in rep.get("attention_backends") or []:
            if b["backend"] != meta["backend"]:
                continue
            passes = [("forward", b["forward_us"], fwd_flops)]
            if meta["pass"] == "fwd+bwd":
                passes.append(("backward", b["backward_us"], BACKWARD_FLOP_RATIO * fwd_flops))
            for pas, t, fl in passes:
                if not t:
                    continue
                rows.append(
                    {
                        "backend": b["backend"],
                        "pass": pas,
                        "mask": "causal" if causal else "none",
                        "dtype": meta["dtype"],
                        "d": shp["d"],
                        "b": shp["b"],
                        "h": shp["h"],
                        "sq": shp["s"],
                        "sk": shp["s"],
                        "time_us": round(t, 3),
                        "flops": fl,
                        "tflops": round(fl / (t * 1e-6) / 1e12, 2),
                        "workload": w,
                    }
                )
    for r in rows:
        r["source"] = "traces"
    swept, sweep_files, sweep_env = sweep_rows()
    rows += swept
    # a pass measured twice (the forward of the fwd and of the fwd+bwd workload): both rows kept;
    # the lookup interpolates between the rows nearest a call
    rows.sort(key=lambda r: (r["backend"], r["pass"], r["mask"], r["d"], r["sq"], r["b"], r["workload"]))
    return {
        "about": (
            "Measured SDPA backend rates (attention FLOPs per second of all the backend's kernels in a pass). "
            "Built by validation/backend_table.py from the H200 validation traces and backend sweeps; used by "
            "tb_attention_plugin/advice to predict a call's time on another backend."
        ),
        "families": [
            {
                "arch": "sm_90",
                "measured_on": "NVIDIA H200 SXM (132 SMs)",
                # the SMs the sweep's GPU had: advice's wave efficiency counts blocks against them
                "sm_count": sweep_env.get("sm_count") or 132,
                "env": {k: (env or {}).get(k) for k in ("torch", "cuda_runtime", "cudnn", "gpu")},
                "source": "; ".join(["validation/traces/sdpa_* with validation/raw/2026-11-30/meta/", *sweep_files]),
                "rows": rows,
            }
        ],
    }


def main() -> int:
    os.environ.setdefault("TB_ATTENTION_CACHE_DIR", os.path.join(ROOT, "tests", "_artifacts", "backend-table-cache"))
    table = build()
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if "--check" in sys.argv:
        with open(OUT) as f:
            same = f.read() == text
        print("sdpa_backends.json", "matches the traces" if same else "differs from the traces")
        return 0 if same else 1
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT, len(table["families"][0]["rows"]), "rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
