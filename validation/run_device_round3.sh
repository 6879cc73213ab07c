#!/usr/bin/env bash
# Record round 3 (issues #18, #19, #23) on a GPU box: the advice twins (validation/twins.py), then the `round3`
# family of workloads.py (traces + Nsight Compute within the budget).
#
#   bash validation/run_device_round3.sh OUTDIR [BUDGET_S]
#
# OUTDIR receives twins_a.tgz, twins_b.tgz (twin traces, result.json per run, manifest.json), results_meta.tgz
# (meta/, ncu/ rows, logs), traces_a.tgz/traces_b.tgz (the round3 traces are in traces_b) and console.tgz; tarballs
# are rewritten after every phase so a run stopped at its limit keeps what it had.  BUDGET_S (default 520) counts
# from this script's start; the twins get ~190 s of it (eager ~115 s, compile ~45 s, ddp ~30 s), round3 traces
# until 300 s, ncu the rest.  Unpack with: python3 validation/unpack_round3.py --date YYYY-MM-DD OUTDIR
set -u
OUTDIR=${1:?usage: run_device_round3.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-520}
T0=$(date +%s.%N)
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/tb_attn_inductor_cache}
WORK=${WORK:-/tmp/tb_attention_round3}
TW=${WORK}_twins  # outside WORK: run_all packs all of WORK but traces/ into results_meta.tgz
rm -rf "$WORK" "$TW"
mkdir -p "$WORK/logs" "$TW" "$OUTDIR"
cd "$(dirname "$0")/.."
since() { python3 -c "import time;print(round(time.time()-$T0,1))"; }
at() { python3 -c "print($T0+$1)"; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  python3 -c 'import torch,transformers,triton;print(torch.__version__,transformers.__version__,triton.__version__)'
  python3 -c 'import torch;print("cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version(),torch.cuda.get_device_name(0))'
  ncu --version
} > "$WORK/logs/env.txt" 2>&1
cat "$WORK/logs/env.txt"

pack_twins() {
  python3 validation/twins.py --out "$TW" --manifest > "$WORK/logs/twins_manifest.txt" 2>&1
  ( cd "$TW" && ls -d */ 2>/dev/null | sed 's#/$##' ) > "$WORK/twin_dirs.txt"
  n=$(wc -l < "$WORK/twin_dirs.txt"); h=$(( (n + 1) / 2 ))
  head -n "$h" "$WORK/twin_dirs.txt" | tar czf "$OUTDIR/twins_a.tgz" -C "$TW" manifest.json -T -
  tail -n +"$((h + 1))" "$WORK/twin_dirs.txt" | tar czf "$OUTDIR/twins_b.tgz" -C "$TW" manifest.json -T -
  tar czf "$OUTDIR/console.tgz" -C "$WORK" logs
}
# twins: one process per group, each with a deadline (no new run after it) and a hard timeout
run_twins() {  # group deadline_s timeout_s
  # shellcheck disable=SC2086  # TWINS_ARGS (e.g. "--small --device cpu" for a local dry run) splits on purpose
  timeout -k 5 "$3" python3 validation/twins.py --out "$TW" --group "$1" --deadline "$(at "$2")" ${TWINS_ARGS:-} \
    > "$WORK/logs/twins_$1.log" 2>&1
  echo "twins $1 rc=$? at $(since)s"; grep '^\[twins\]' "$WORK/logs/twins_$1.log"
  pack_twins
}
run_twins eager 110 135
run_twins compile 160 $(python3 -c "print(max(20,int(185-($(since)))))")
run_twins ddp 185 $(python3 -c "print(max(20,int(215-($(since)))))")
cat "$WORK/logs/twins_manifest.txt"

python3 validation/run_all.py --out "$WORK" --tar-dir "$OUTDIR" --budget "$BUDGET" --t0 "$T0" --families round3 \
  --skip-ceilings --no-generate --trace-until 300 --family-timeout 130 --max-kernels 80 --batch-kernels 160 "${@:3}" \
  2>&1 | tee "$WORK/logs/console.txt"
tar czf "$OUTDIR/console.tgz" -C "$WORK" logs
ls -la "$OUTDIR"
echo "total wall $(since)s"
