#!/usr/bin/env bash
# Evaluation-speed benchmark (not a test): seqeval's tokens/s at one long context next to PyTorch's forward
# pass of the same model on the same machine, same threads, in one invocation.
#
#   bash bench/eval_speed.sh                     # CONTEXT=4096 WINDOWS=8 THREADS=2
#   SEQ_KERNELS=avx2 THREADS=16 bash bench/eval_speed.sh
#   AVX2_ONLY=1 bash bench/eval_speed.sh         # both sides held to AVX2 (bench/common.sh)
#   PAIRS=3 bash bench/eval_speed.sh             # 3 seqeval/PyTorch measurements alternating; medians
#
# Model: bench/configs/speed_rope.json (or CONFIG=...), initialised and trained for one step (the speed of a
# forward pass does not depend on the weights). seqeval scores 2 + WINDOWS non-overlapping windows of CONTEXT
# tokens of the WikiText-2 test split (--max-windows), timed from start to exit, and, separately, its first 2
# windows alone: two rows, the whole process (start-up, the first touch of the activation memory, the
# checkpoint's load: tokens scored / seconds) and its windows after those 2 (WINDOWS x CONTEXT tokens / the
# difference of the two times), which is what PyTorch's number counts. PyTorch: bench/torch_train.py --eval-context,
# single windows (B = 1) under torch.inference_mode with the loss computed, median window after 2 warmup
# windows, at its fastest attention formulation (sdpa on torch >= 2.0, the only one timed there; torch 1.13's
# baddbmm or matmul, probed) and the fastest BLAS / allocator of
# short probes like bench/train_speed.sh's (the system BLAS; OpenBLAS openmp if present, with its own core
# type, its AVX2 one and SkylakeX on an AVX-512 CPU; then glibc malloc with and without mmap). A speed-of-light
# row: the least forward work per token at that context (every Linear once, causal attention over the keys at
# or before each query, the head) at the fp32 peak bench/matmul measures.
# With PAIRS > 1, seqeval and PyTorch (its settings fixed to the ones chosen) are measured PAIRS times,
# alternating, and the table gives the medians, each ratio the median of the pairs' ratios: on a virtual
# machine the cores behind the CPUs come and go (two threads ran at one core's FMA rate for a second, then at
# two cores'), so one pair can land on either side of the target.
set -euo pipefail

cd "$(dirname "$0")/.."
CONTEXT=${CONTEXT:-4096}
WINDOWS=${WINDOWS:-8}
THREADS=${THREADS:-2}
PAIRS=${PAIRS:-1}
CONFIG=${CONFIG:-bench/configs/speed_rope.json}
LIBDIR=/usr/lib/x86_64-linux-gnu
case "$PAIRS" in ''|*[!0-9]*|0) echo "eval_speed: PAIRS must be a whole number >= 1 (got '$PAIRS')" >&2; exit 1;; esac
RUN_DIR=$(mktemp -d /tmp/seqeval_speed.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT

source bench/common.sh
torch_python  # PY: Debian's python3 with python3-torch, else python3 on PATH (a pyenv python3 may shadow the first)
bench_setup eval_speed "context $CONTEXT, $WINDOWS windows, $THREADS threads"

TORCH_MODEL=$(bin/seqtrain --config "$CONFIG" --print-config | "$PY" bench/model_cost.py torch-args)
# where torch has sdpa, only it is timed (the q/k/v layouts are still probed): the formulations that hold every
# head's (T, T) logits are several times slower at long contexts, and probing them costs minutes on few threads
# (docs/results/speed_rounds.md, "Measurements moved from code comments")
if "$PY" -c 'import sys, torch.nn.functional as F; sys.exit(not hasattr(F, "scaled_dot_product_attention"))' 2>/dev/null; then
    TORCH_MODEL="$TORCH_MODEL --attn sdpa"
fi
# the least forward work per token at this context (bench/model_cost.py says what it counts)
FLOPS_TOK=$(bin/seqtrain --config "$CONFIG" --print-config | "$PY" bench/model_cost.py forward-flops "$CONTEXT")

# ---- seqeval -------------------------------------------------------------------------------------------
# seconds of `seqeval --max-windows N` from start to exit
seqeval_time() {
    local t0 t1
    t0=$(date +%s.%N)
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" bin/seqeval --run "$RUN_DIR/m" --data test --context "$CONTEXT" \
        --max-windows "$1" --out "$RUN_DIR/eval" > "$RUN_DIR/eval.out" 2>&1 || { cat "$RUN_DIR/eval.out" >&2; exit 1; }
    t1=$(date +%s.%N)
    "$PY" -c "print($t1 - $t0)"
}
env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" bin/seqtrain --config "$CONFIG" --set run.dir="$RUN_DIR" \
    --set run.name=m --set train.steps=1 --set train.ckpt_every=0 --set schedule.warmup_steps=0 --set run.threads="$THREADS" \
    --set data.test=build/data/wikitext2/test.shard --quiet > "$RUN_DIR/train.out" 2>&1 \
    || { cat "$RUN_DIR/train.out" >&2; exit 1; }
# one measurement: SEQ_TPS (the whole process) and SEQ_WARM_TPS (the windows after the first 2)
seqeval_measure() {
    local t_warm t_all tokens
    t_warm=$(seqeval_time 2)
    t_all=$(seqeval_time $((2 + WINDOWS)))
    KSET=$(kernels_of "$RUN_DIR/eval.out")
    tokens=$(sed -n "s/.*context $CONTEXT: \([0-9]*\) tokens.*/\1/p" "$RUN_DIR/eval.out")
    [ "$tokens" = $(((2 + WINDOWS) * CONTEXT)) ] || { echo "eval_speed: seqeval scored $tokens tokens, not $((2 + WINDOWS)) windows of $CONTEXT (too little test data for WINDOWS=$WINDOWS?)" >&2; exit 1; }
    "$PY" -c "import sys; sys.exit(not $t_all > $t_warm)" || { echo "eval_speed: $((2 + WINDOWS)) windows took no longer than the first 2 ($t_all s, $t_warm s): too little work to time; raise WINDOWS or CONTEXT" >&2; exit 1; }
    SEQ_TPS=$("$PY" -c "print(f'{$tokens / $t_all:.1f}')")
    SEQ_WARM_TPS=$("$PY" -c "print(f'{$WINDOWS * $CONTEXT / ($t_all - $t_warm):.1f}')")
    echo "eval_speed: seqeval $tokens tokens in $("$PY" -c "print(f'{$t_all:.2f}')") s = $SEQ_TPS tok/s (the first 2 windows alone: $("$PY" -c "print(f'{$t_warm:.2f}')") s; after them $SEQ_WARM_TPS tok/s), ${KSET:-?} kernels"
}
seqeval_measure

# ---- PyTorch -------------------------------------------------------------------------------------------
# short probes (one window after one warmup) choose the BLAS build and OpenBLAS core type, then the allocator;
# the full run uses the fastest of each
probe_tps() { torch_run "$1" "$2" "$3" --eval-context "$CONTEXT" --warmup 1 --steps 1 | tps_of; }
blas_candidates openblas-openmp
best_tps=0 best="|"
for c in "${candidates[@]}"; do
    lib=${c%%|*} ct=${c#*|}
    tps=$(probe_tps "$lib" "$ct" "")
    echo "eval_speed: torch probe blas=${lib:-system} OPENBLAS_CORETYPE=${ct:-unset}${AVX2_NOTE}: ${tps:-failed} tok/s"
    if [ -n "$tps" ] && faster "$tps" "$best_tps"; then best_tps=$tps best=$c; fi
done
lib=${best%%|*} ct=${best#*|} alloc="" best_tps=0
for a in "" "$GLIBC_NO_MMAP"; do
    tps=$(probe_tps "$lib" "$ct" "$a")
    echo "eval_speed: torch probe allocator ${a:-glibc malloc (default)}: ${tps:-failed} tok/s"
    if [ -n "$tps" ] && faster "$tps" "$best_tps"; then best_tps=$tps alloc=$a; fi
done
best_line=$(torch_run "$lib" "$ct" "$alloc" --eval-context "$CONTEXT" --warmup 2 --steps "$WINDOWS")
echo "$best_line"
best_tps=$(echo "$best_line" | tps_of)
[ -n "$best_line" ] || { echo "eval_speed: PyTorch did not run; to see why, run: $PY bench/torch_train.py --threads $THREADS $TORCH_MODEL --eval-context $CONTEXT --steps 1" >&2; exit 1; }
# ---- more pairs: seqeval and PyTorch (its q/k/v layout and attention fixed to the ones chosen) alternating
PAIR_LOG="$SEQ_WARM_TPS $SEQ_TPS $best_tps"
QKV=$(echo "$best_line" | sed -n 's/.* qkv=\([a-z]*\).*/\1/p') ATTN=$(echo "$best_line" | sed -n 's/.* attn=\([a-z]*\).*/\1/p')
for p in $(seq 2 "$PAIRS"); do
    seqeval_measure
    t=$(torch_run "$lib" "$ct" "$alloc" --eval-context "$CONTEXT" --warmup 2 --steps "$WINDOWS" --qkv "$QKV" --attn "$ATTN" | tps_of)
    [ -n "$t" ] || { echo "eval_speed: PyTorch's run of pair $p failed" >&2; exit 1; }
    echo "eval_speed: pair $p: seqeval after 2 windows $SEQ_WARM_TPS, whole process $SEQ_TPS, PyTorch $t tok/s"
    PAIR_LOG="$PAIR_LOG
$SEQ_WARM_TPS $SEQ_TPS $t"
done
# medians over the pairs (one pair: its numbers), each ratio the median of the pairs' ratios
read -r SEQ_WARM_TPS SEQ_TPS best_tps RATIO_WARM RATIO_ALL < <(echo "$PAIR_LOG" | pair_medians 0/2 1/2)
TORCH_DESC="PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) fp32 ($(echo "$best_line" | sed -n 's/.*\(attn=[a-z]*\).* blas=\([^ ]*\).*/\1, \2/p'), OPENBLAS_CORETYPE=${ct:-unset}${AVX2_NOTE}, glibc malloc${alloc:+, mmap_max=0})"

PEAK=$(peak_of "$(env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" build/release/bench/matmul)")

echo
if [ "$PAIRS" -gt 1 ]; then echo "medians over $PAIRS alternating pairs; a ratio is the median of the pairs' ratios:"; echo; fi
echo "| implementation (context $CONTEXT, B = 1) | threads | tokens/s | ratio | share of the fp32 peak |"
echo "|---|---|---|---|---|"
"$PY" - "$SEQ_TPS" "$best_tps" "$THREADS" "${KSET:-?}" "$TORCH_DESC" "$FLOPS_TOK" "$PEAK" "$SEQ_WARM_TPS" "$WINDOWS" \
    "$RATIO_WARM" "$RATIO_ALL" <<'EOF'
import sys
seq, torch_ = float(sys.argv[1]), float(sys.argv[2])
th, kset, desc = sys.argv[3], sys.argv[4], sys.argv[5]
flops, peak = float(sys.argv[6]), float(sys.argv[7]) * 1e9
warm, nwin = float(sys.argv[8]), int(sys.argv[9])
ratio_warm, ratio_all = float(sys.argv[10]), float(sys.argv[11])
sol = peak / flops
print(f"| seqeval (C11 + OpenMP, fp32, {kset} kernels), its {nwin} windows after the first 2 | {th} | {warm:.0f} "
      f"| {ratio_warm:.2f}x | {100 * warm / sol:.1f}% |")
print(f"| seqeval, the whole process ({nwin + 2} windows, start-up included) | {th} | {seq:.0f} | {ratio_all:.2f}x "
      f"| {100 * seq / sol:.1f}% |")
print(f"| {desc} | {th} | {torch_:.0f} | 1.00x | {100 * torch_ / sol:.1f}% |")
print(f"| speed of light: {flops / 1e6:.1f} MFLOP/token at the measured peak ({peak / 1e9:.1f} GFLOP/s) | {th} "
      f"| {sol:.0f} | {sol / torch_:.2f}x | 100% |")
EOF
echo
echo "target (issue 'Fast on every CPU'): seqeval at context 4096 >= 2x PyTorch's forward (the first row: both sides after 2 warm-up windows)"
