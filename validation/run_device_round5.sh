#!/usr/bin/env bash
# Issue #40 on a GPU (2026-12-08): record the held-out traces of validation/amp_workloads.py (an AMP GQA
# training pair and a padded BERT encoder), then replay the attention calls of the issue's trace kinds
# under every backend and collect the results.
#
#   bash validation/run_device_round5.sh OUTDIR [BUDGET_S]
#
# The package's own dependencies (msgspec, isal) come from wheels in .device_wheels/ (pip download, carried
# with the working tree: the GPU machine has torch and transformers but no network). OUTDIR receives
# amp_traces.tgz (the recorded traces and their meta.json), replay_results.tgz (json/*.replay.json, the
# script, its calls, the log) and replay.log.
set -u
OUT=${1:?usage: run_device_round5.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-300}
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/tb_attention_round5}
rm -rf "$WORK"; mkdir -p "$WORK/json" "$OUT"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}
python3 -m pip install -q --no-index --find-links .device_wheels --target "$WORK/deps" msgspec isal 2>&1 | tail -2
export PYTHONPATH=$PWD:$WORK/deps
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version(),torch.cuda.get_device_name(0),"transformers",transformers.__version__)'
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt"
timeout 300 python3 validation/amp_workloads.py "$WORK/amp" 2>&1 | grep -v USDT | tee "$WORK/amp.log"
tar czf "$OUT/amp_traces.tgz" -C "$WORK" amp amp.log env.txt
TRACES=(
  "$WORK/amp/hf_gqa_amp_eager_train"
  "$WORK/amp/bert_padded_fp16_sdpa"
  validation/traces/hf_llama_eager_fwdbwd
  validation/traces/decode_gqa_flash
  tests/data/twins/t5_eager_h8
  validation/traces/naive_fp32_s2048_d64_fwd
)
python3 -m tb_attention_plugin.cli replay "${TRACES[@]}" --no-cache --emit "$WORK/replay.py" 2>&1 | tail -3
python3 -m tb_attention_plugin.cli replay "${TRACES[@]}" --no-cache --list --format json > "$WORK/calls.json"
timeout $((BUDGET + 120)) python3 "$WORK/replay.py" --all --out-dir "$WORK/json" --budget-s "$BUDGET" \
  --repeats 10 --warmup 3 2>&1 | tee "$WORK/replay.log"
echo "replay rc=${PIPESTATUS[0]}" | tee -a "$WORK/replay.log"
tar czf "$OUT/replay_results.tgz" -C "$WORK" json replay.py calls.json replay.log env.txt
cp "$WORK/replay.log" "$OUT/"
ls -la "$OUT"
