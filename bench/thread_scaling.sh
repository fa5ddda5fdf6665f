#!/usr/bin/env bash
# Thread-scaling benchmark (not a test): seqtrain's training tokens/s on bench/configs/speed_rope.json at
# 1, 2, 4, ... threads, with the machine's measured fp32 peak at each count, the share of that peak spent on
# the model's least training work (bench/torch_train.py --flops), and the matmul kernel's share of peak over
# the model's 15 Linear shapes (build/release/bench/matmul).
#
#   bash bench/thread_scaling.sh                      # THREADS_LIST="1 2 4 8 16" STEPS=8
#   SEQ_KERNELS=avx2 THREADS_LIST="1 2 4" bash bench/thread_scaling.sh
#
# tokens/s is the median of log.jsonl's per-step tokens_per_s after the first 2 steps. Needs no PyTorch.
set -euo pipefail

cd "$(dirname "$0")/.."
THREADS_LIST=${THREADS_LIST:-"1 2 4 8 16"}
STEPS=${STEPS:-8}
CONFIG=${CONFIG:-bench/configs/speed_rope.json}
PY=${PY:-python3}
RUN_DIR=$(mktemp -d /tmp/seqtrain_scaling.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT

source bench/common.sh
bench_setup thread_scaling "$CONFIG, $STEPS steps"
# the least training work per token of the benchmark model (bench/model_cost.py: no PyTorch needed)
FLOPS_TOK=$(bin/seqtrain --config "$CONFIG" --print-config | "$PY" bench/model_cost.py train-flops)

echo
echo "| threads | kernels | seqtrain tokens/s | speed-up vs the first row | fp32 peak (GFLOP/s) | share of peak on the least work | matmul, 15 shapes: % of peak |"
echo "|---|---|---|---|---|---|---|"
base=""
for th in $THREADS_LIST; do
    rm -rf "$RUN_DIR/r"
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$th" bin/seqtrain --config "$CONFIG" --set run.dir="$RUN_DIR" \
        --set run.name=r --set train.steps="$STEPS" --set schedule.warmup_steps=0 --set run.threads="$th" --quiet > "$RUN_DIR/out" 2>&1 \
        || { cat "$RUN_DIR/out" >&2; exit 1; }
    kset=$(kernels_of "$RUN_DIR/out")
    tps=$("$PY" -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("%.1f" % statistics.median([r["tokens_per_s"] for r in rows if r["step"] > 2 and "tokens_per_s" in r]))' "$RUN_DIR/r/log.jsonl")
    mm=$(OMP_NUM_THREADS="$th" build/release/bench/matmul)
    peak=$(echo "$mm" | sed -n 's/.*measured fp32 FMA peak \([0-9.]*\) GFLOP\/s.*/\1/p')
    mmpct=$(echo "$mm" | sed -n 's/^total .* \([0-9.]*%\)$/\1/p')
    base=${base:-$tps}
    "$PY" -c '
import sys
th, kset, tps, base, peak, flops, mm = sys.argv[1:8]
tps, base, peak, flops = float(tps), float(base), float(peak), float(flops)
print(f"| {th} | {kset} | {tps:.0f} | {tps / base:.2f}x | {peak:.0f} | {100 * tps * flops / (peak * 1e9):.1f}% | {mm} |")' \
        "$th" "${kset:-?}" "$tps" "$base" "$peak" "$FLOPS_TOK" "$mmpct"
done
