#!/usr/bin/env bash
# Record round 4 (issues #19, #20) on a GPU box, in one command:
#   1. issue #20's replay of validation/replay_traces.txt (emitted beforehand, where the package runs, with
#      `bash validation/replay_run.sh --emit-only validation/replay/emitted validation/replay_traces.txt`;
#      the emitted dir travels with the working tree);
#   2. the SDPA backend sweep (validation/backend_sweep.py) that advice's backend table is built from;
#   3. the fourth held-out twin set (validation/twins.py --group heldout4).
#
#   bash validation/run_device_round4.sh OUTDIR [BUDGET_S]
#   PHASES="sweep twins" bash validation/run_device_round4.sh OUTDIR [BUDGET_S]   # some of the phases
#
# PHASES (default "replay sweep twins"; also sweep2/sweep3: the second and third grids, twins5 … twins8: the
# fifth to eighth held-out sets).
# OUTDIR receives replay_results.tgz (+ replay.log, env.txt), sweep.tgz / sweep2.tgz, twins_h4.tgz /
# twins_h5.tgz and console.tgz;
# each phase has its own share of BUDGET_S (default 540) and a hard timeout, and what a phase wrote is kept
# when a later one fails. Unpack: python3 validation/unpack_round4.py --date YYYY-MM-DD OUTDIR
set -u
OUTDIR=${1:?usage: run_device_round4.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-540}
T0=$(date +%s)
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}
cd "$(dirname "$0")/.."
WORK=/tmp/tb_attention_round4
rm -rf "$WORK" && mkdir -p "$WORK/logs" "$WORK/sweep" "$WORK/twins" "$OUTDIR"
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  python3 -c 'import torch,transformers,triton;print(torch.__version__,transformers.__version__,triton.__version__)'
} > "$WORK/logs/env.txt" 2>&1
cat "$WORK/logs/env.txt"
pack() { tar czf "$OUTDIR/console.tgz" -C "$WORK" logs; }
PHASES=" ${PHASES:-replay sweep twins} "
on() { case "$PHASES" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# 1. replay (the jagged calls were not checked end to end last time): ~60-120 s
if on replay; then
  bash validation/replay_run.sh --run-only validation/replay/emitted "$OUTDIR" "${REPLAY_BUDGET:-150}" > "$WORK/logs/replay.txt" 2>&1
  echo "replay rc=$? at $(( $(date +%s) - T0 ))s"; tail -5 "$WORK/logs/replay.txt"; pack
fi

# 2. backend sweep(s): grid 1 (phase sweep) and grid 2 (phase sweep2), each capped at 220 s
sweep() {  # phase grid
  local sw=$(( $(left) - 120 )); [ "$sw" -gt 220 ] && sw=220
  on "$1" && [ "$sw" -gt 20 ] || return 0
  mkdir -p "$WORK/$1"
  timeout -k 5 $(( sw + 60 )) python3 validation/backend_sweep.py "$WORK/$1" --grid "$2" --budget-s "$sw" \
    > "$WORK/logs/$1.txt" 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - T0 ))s"; tail -3 "$WORK/logs/$1.txt"
  tar czf "$OUTDIR/$1.tgz" -C "$WORK" "$1" "logs/$1.txt"
}
sweep sweep 1
sweep sweep2 2
sweep sweep3 3
pack

# 3. held-out twins: set 4 (phase twins) and set 5 (phase twins5), with what is left less a margin
twins() {  # phase group tarball
  local tw=$(( $(left) - 20 ))
  on "$1" && [ "$tw" -gt 20 ] || return 0
  mkdir -p "$WORK/$1"
  timeout -k 5 "$tw" python3 validation/twins.py --out "$WORK/$1" --group "$2" --deadline $(( $(date +%s) + tw - 25 )) \
    > "$WORK/logs/twins_$2.txt" 2>&1
  echo "twins $2 rc=$? at $(( $(date +%s) - T0 ))s"; grep '^\[twins\]' "$WORK/logs/twins_$2.txt"
  python3 validation/twins.py --out "$WORK/$1" --manifest > "$WORK/logs/twins_manifest_$2.txt" 2>&1
  tar czf "$OUTDIR/$3" -C "$WORK" --transform "s#^$1#twins#" "$1"
}
twins twins heldout4 twins_h4.tgz
twins twins5 heldout5 twins_h5.tgz
twins twins6 heldout6 twins_h6.tgz
twins twins7 heldout7 twins_h7.tgz
twins twins8 heldout8 twins_h8.tgz
pack
ls -la "$OUTDIR"
echo "total wall $(( $(date +%s) - T0 ))s"
