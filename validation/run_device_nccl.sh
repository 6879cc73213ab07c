#!/usr/bin/env bash
# Record the multi-GPU NCCL job of issue #24 (validation/nccl_job.py) on a box with several GPUs: DDP, FSDP2,
# tensor-parallel attention and a planted straggler, one torchrun launch each, one process per GPU.
#
#   bash validation/run_device_nccl.sh OUTDIR [BUDGET_S]
#
# N = every GPU the box has (at least 2; NCCL takes one GPU per process). With fewer than 2 GPUs it stops, unless
# NCCL_JOB_CPU=1: then a dry run on CPUs, 2 gloo processes (NCCL_JOB_NPROC to change) and tiny shapes.
# OUTDIR receives ddp.tgz, straggler.tgz, fsdp.tgz, tp.tgz (each: <run>/rank<R>.<ts>.pt.trace.json.gz and the
# manifest.json so far) and meta.tgz (traces/manifest.json, logs/, env.txt), rewritten after every piece so a run stopped
# at its limit keeps what it had: 5 files, each far under 16 MiB. BUDGET_S (default 540) counts from this
# script's start; each piece gets at most PIECE_S (default 150) seconds and what is left of the budget less a
# 10 s reserve; a piece with under 30 s left is recorded as skipped. Unpack with
#   python3 validation/unpack_nccl.py --date YYYY-MM-DD OUTDIR      (-> tests/data/nccl/<run>/, manifest.json)
#
# NVLink multicast stays off: a program that uses it can take the shared host's GPUs out of service. The three
# variables are exported here and checked again by nccl_job.py, which refuses to run if one is overridden.
set -u
OUTDIR=${1:?usage: run_device_nccl.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-540}
PIECE_S=${PIECE_S:-150}
T0=$(date +%s)
for kv in NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; do
  k=${kv%%=*} v=${kv#*=}
  if [ -n "${!k+x}" ] && [ "${!k}" != "$v" ]; then
    echo "error: run_device_nccl.sh: $k=${!k}: NVLink multicast must stay off ($k=$v)" >&2
    exit 2
  fi
  export "$k=$v"
done
case "${NCCL_ALGO:-}" in *[Nn][Vv][Ll][Ss]*) echo "error: run_device_nccl.sh: NCCL_ALGO=$NCCL_ALGO names NVLS" >&2; exit 2;; esac
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/tb_attention_nccl}
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/traces" "$OUTDIR"
cd "$(dirname "$0")/.."
since() { echo $(( $(date +%s) - T0 )); }

NGPU=$($PY -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
EXTRA=()
if [ "$NGPU" -ge 2 ]; then
  N=$NGPU
elif [ "${NCCL_JOB_CPU:-0}" = 1 ]; then
  N=${NCCL_JOB_NPROC:-2}
  EXTRA=(--device cpu --small --bf16)  # tiny shapes, and the bf16 and optimizer paths CUDA takes
  echo "dry run: $N gloo processes on CPUs (the box has $NGPU GPU(s))"
else
  echo "error: run_device_nccl.sh: $NGPU GPU(s): the NCCL job needs at least 2 (NCCL_JOB_CPU=1 for a CPU dry run)" >&2
  exit 2
fi
{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv 2>&1
  nvidia-smi topo -m 2>&1
  $PY -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda)
if torch.cuda.is_available():print("nccl",torch.cuda.nccl.version(),"gpus",torch.cuda.device_count(),torch.cuda.get_device_name(0))'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|CUDA_VISIBLE)' | sort
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt"

TR=$WORK/traces  # nccl_job.py writes each run's folder and manifest.json here
pack() {  # piece run
  ( cd "$TR" && tar czf "$OUTDIR/$1.tgz" $(ls -d manifest.json "$2" 2>/dev/null) )
  ( cd "$WORK" && tar czf "$OUTDIR/meta.tgz" $(ls -d traces/manifest.json 2>/dev/null) logs env.txt )
}
# piece: its profiled steps, and its own NCCL settings. The straggler's fast ranks wait for it inside their
# backward; NCCL_MIN_CTAS=32 makes their waiting all-reduce hold 32 SMs meanwhile, so the backward they run
# beside it is measurably slowed by the communication (the case the slow-backward advice must attribute).
run_piece() {  # piece steps [VAR=value ...]
  local piece=$1 steps=$2 run="${1}${N}_gpt_sdpa" left t rc
  shift 2
  left=$(( BUDGET - $(since) - 10 ))
  t=$(( left < PIECE_S ? left : PIECE_S ))
  if [ "$t" -lt 30 ]; then
    echo "$piece: skipped, ${left}s of the budget left"
    $PY validation/nccl_job.py --out "$TR" --piece "$piece" --name "$run" --world "$N" --skipped "${left}s left"
    pack "$piece" "$run"
    return
  fi
  echo "== $piece ($run): $N ranks, up to ${t}s, at $(since)s"
  env "$@" timeout -k 10 "$t" $PY -m torch.distributed.run --standalone --nproc-per-node="$N" \
    validation/nccl_job.py --piece "$piece" --out "$TR" --name "$run" --steps "$steps" "${EXTRA[@]}" \
    ${NCCL_JOB_ARGS:-} > "$WORK/logs/$piece.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    $PY validation/nccl_job.py --out "$TR" --piece "$piece" --name "$run" --world "$N" --mark-failed "$rc" \
      --launch-log "$WORK/logs/$piece.log"
  fi
  echo "$piece rc=$rc at $(since)s"; grep -E '^\[nccl_job\]|Error|error' "$WORK/logs/$piece.log" | head -20
  pack "$piece" "$run"
}
run_piece ddp 2
run_piece straggler 2 NCCL_MIN_CTAS=32
run_piece fsdp 1
run_piece tp 1
ls -la "$OUTDIR"
for f in "$OUTDIR"/*.tgz; do
  [ "$(stat -c %s "$f")" -gt $(( 16 * 1024 * 1024 )) ] && echo "warning: $f is over 16 MiB: it will not come back"
done
echo "total wall $(since)s"
