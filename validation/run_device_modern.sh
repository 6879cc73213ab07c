#!/usr/bin/env bash
# Record the issue #12/#13 workloads on a GPU box: the 2-rank DDP traces, the `modern` family of workloads.py
# (flex, FP8, MLA+MoE, CUDA-graph decode eager/replay/capture) and Nsight Compute on them.
#
#   bash validation/run_device_modern.sh OUTDIR [BUDGET_S]
#
# OUTDIR receives ddp2.tgz, results_meta.tgz, traces_b.tgz (the modern traces) and console.tgz; tarballs are
# rewritten after every phase so a run stopped at its limit keeps what it had.  BUDGET_S (default 500) counts from
# this script's start.
set -u
OUTDIR=${1:?usage: run_device_modern.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-500}
T0=$(date +%s.%N)
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}
WORK=${WORK:-/tmp/tb_attention_modern}
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$OUTDIR"
cd "$(dirname "$0")/.."
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  python3 -c 'import torch,transformers,triton;print(torch.__version__,transformers.__version__,triton.__version__)'
  python3 -c 'import torch;print("cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version(),torch.cuda.get_device_name(0))'
  python3 -c 'import transformers as t; print("DeepseekV3", hasattr(t, "DeepseekV3ForCausalLM"))'
  ncu --version
} > "$WORK/logs/env.txt" 2>&1
cat "$WORK/logs/env.txt"
timeout 120 python3 validation/ddp_trace.py --out "$WORK/ddp" --steps 2 > "$WORK/logs/ddp.log" 2>&1
echo "ddp rc=$?"; grep -v USDT "$WORK/logs/ddp.log" | tail -5
tar czf "$OUTDIR/ddp2.tgz" -C "$WORK" ddp logs/ddp.log
python3 validation/run_all.py --out "$WORK" --tar-dir "$OUTDIR" --budget "$BUDGET" --t0 "$T0" --families modern \
  --skip-ceilings --no-generate --trace-until 290 --family-timeout 300 --max-kernels 80 --batch-kernels 160 "${@:3}" \
  2>&1 | tee "$WORK/logs/console.txt"
tar czf "$OUTDIR/console.tgz" -C "$WORK" logs
ls -la "$OUTDIR"
echo "total wall $(python3 -c "import time;print(round(time.time()-$T0,1))")s"
