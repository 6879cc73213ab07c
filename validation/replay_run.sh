#!/usr/bin/env bash
# Issue #20's GPU check: replay the attention calls of the traces listed in LISTFILE under every
# backend on this machine's GPU, and collect the replay JSONs.
#
#   bash validation/replay_run.sh OUTDIR LISTFILE [BUDGET_S]   # emit and run here (GPU + the package's deps)
#   bash validation/replay_run.sh --emit-only DIR LISTFILE     # emit only (any machine): DIR/replay.py
#   bash validation/replay_run.sh --run-only DIR OUTDIR [BUDGET_S]   # run DIR/replay.py (torch only)
#
# The emitted script (tb-attention replay --emit) needs nothing but torch, so the device machine may
# lack the package's own dependencies: emit with --emit-only where they are, let DIR travel with the
# working tree, and --run-only it on the GPU. OUTDIR receives replay_results.tgz (json/<trace
# file>.replay.json, the log, the environment, the script and its calls), replay.log and env.txt. BUDGET_S (default 240): the script starts no backend after
# that many seconds (the run is cut at BUDGET_S + 120); FlexAttention and torch.compile run last, so the
# SDPA backends are never cut.
# Then, where the package runs: python3 validation/replay_check.py LISTFILE OUTDIR  (writes REPLAY.md)
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}

emit() {  # emit DIR LISTFILE
  local dir=$1 list=$2
  mkdir -p "$dir"
  mapfile -t traces < <($PY validation/replay_check.py --traces "$list") || return 2
  [ ${#traces[@]} -gt 0 ] || { echo "error: $list: no trace found" >&2; return 2; }
  PYTHONPATH=$PWD $PY -m tb_attention_plugin.cli replay "${traces[@]}" --no-cache --emit "$dir/replay.py" || return 2
  PYTHONPATH=$PWD $PY -m tb_attention_plugin.cli replay "${traces[@]}" --no-cache --list --format json >"$dir/calls.json"
  cp "$list" "$dir/traces.txt"
  $PY "$dir/replay.py" --list
}

run() {  # run DIR OUTDIR BUDGET
  # the results are made in WORK and OUTDIR gets three files (the device tool returns at most 8):
  # replay_results.tgz (json/*.replay.json, the log, env, the script and its calls), replay.log, env.txt
  local dir=$1 out=$2 budget=$3 t0 work=${WORK:-/tmp/tb_attn_replay}
  rm -rf "$work"
  mkdir -p "$work/json" "$out"
  t0=$(date +%s)
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
    $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))' 2>&1
  } >"$work/env.txt"
  cat "$work/env.txt"
  # the script's own limit is BUDGET; the wall clock gets compile and profiler slack beyond it
  timeout $((budget + 120)) $PY "$dir/replay.py" --out-dir "$work/json" --budget-s "$budget" --repeats 10 --warmup 3 \
    2>&1 | tee "$work/replay.log"
  local rc=${PIPESTATUS[0]}
  echo "replay rc=$rc wall $(( $(date +%s) - t0 ))s" | tee -a "$work/replay.log"
  cp "$dir/replay.py" "$dir/calls.json" "$dir/traces.txt" "$work/" 2>/dev/null
  tar czf "$out/replay_results.tgz" -C "$work" .
  cp "$work/replay.log" "$work/env.txt" "$out/"
  ls -la "$out" "$work/json"
  return "$rc"
}

case "${1:-}" in
  --emit-only) emit "${2:?DIR}" "${3:?LISTFILE}" ;;
  --run-only) run "${2:?DIR}" "${3:?OUTDIR}" "${4:-240}" ;;
  -h|--help|"") sed -n '2,18p' "$0"; exit 2 ;;
  *) out=$1; list=${2:?usage: replay_run.sh OUTDIR LISTFILE [BUDGET_S]}; emit "$out/emitted" "$list" && run "$out/emitted" "$out" "${3:-240}" ;;
esac
