#!/usr/bin/env bash
# Record round 4 of issue #23 (validation/round4_model.py) on a GPU box.
#
#   bash validation/run_device_round4_model.sh OUTDIR [BUDGET_S]
#
# OUTDIR receives env.txt, console.txt and everything round4_model.py writes (traces/, meta/, ncu/, summary.json,
# log.txt; summary.json and meta/ are rewritten after every item).  BUDGET_S (default 200) is the wall budget of
# the Python run, counted from its start: an item whose estimate does not fit in what is left is skipped; a hard
# timeout of BUDGET_S + 40 s stops it if an item overruns (what was written stays).  Local dry run of the control
# flow:  ROUND4_ARGS="--device cpu --small" bash validation/run_device_round4_model.sh /tmp/r4 600
set -u
OUTDIR=${1:?usage: run_device_round4_model.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-200}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache_r4}
mkdir -p "$OUTDIR"
cd "$(dirname "$0")/.."
T0=$(date +%s)
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv 2>&1
  $PY -c 'import torch,transformers,triton;print(torch.__version__,transformers.__version__,triton.__version__)' 2>&1
  $PY -c 'import torch;print("cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version())' 2>&1
  ncu --version 2>&1 | tail -1
  git log -1 --format='%H %s' 2>/dev/null
} > "$OUTDIR/env.txt" 2>&1
cat "$OUTDIR/env.txt"
# shellcheck disable=SC2086  # ROUND4_ARGS splits on purpose
timeout -k 5 $((BUDGET + 40)) $PY validation/round4_model.py --out "$OUTDIR" --budget "$BUDGET" ${ROUND4_ARGS:-} \
  2>&1 | tee "$OUTDIR/console.txt" | grep --line-buffered '^\[round4'
echo "rc=${PIPESTATUS[0]} total wall $(( $(date +%s) - T0 ))s"
du -sh "$OUTDIR" 2>/dev/null
