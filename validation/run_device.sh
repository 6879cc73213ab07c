#!/usr/bin/env bash
# Produce the validation set on a GPU box (traces + Nsight Compute + metadata).
#
#   bash validation/run_device.sh OUTDIR [BUDGET_S]
#
# OUTDIR receives the tarballs (results_meta.tgz, traces_a.tgz, traces_b.tgz,
# ncu_reports_*.tgz); they are re-written after every phase, so a run killed at a
# time limit still leaves what it had.  BUDGET_S (default 480) is the time the
# run gives itself, counted from this script's start; it starts no work that its
# estimate says would pass it.  Needs: python3 with torch (CUDA), transformers,
# triton; ncu on PATH (Nsight Compute, --clock-control none is used).
set -u
OUTDIR=${1:?usage: run_device.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-480}
T0=$(date +%s.%N)
export PYTHONUNBUFFERED=1
# keep inductor's compile workers out of ncu's way and the caches local
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}
WORK=${WORK:-/tmp/tb_attention_validation}
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$OUTDIR"
cd "$(dirname "$0")/.."
{
  date -u
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,temperature.gpu --format=csv
  python3 -c 'import torch,transformers,triton;print(torch.__version__,transformers.__version__,triton.__version__)'
  python3 -c 'import torch;print("cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version(),torch.cuda.get_device_name(0))'
  ncu --version
  uname -a
} > "$WORK/logs/env.txt" 2>&1
cat "$WORK/logs/env.txt"
python3 validation/run_all.py --out "$WORK" --tar-dir "$OUTDIR" --budget "$BUDGET" --t0 "$T0" "${@:3}" 2>&1 \
  | tee "$WORK/logs/console.txt"
# final pack of the console log too
tar czf "$OUTDIR/console.tgz" -C "$WORK" logs/console.txt logs/env.txt 2>/dev/null
ls -la "$OUTDIR"
echo "total wall $(python3 -c "import time;print(round(time.time()-$T0,1))")s"
