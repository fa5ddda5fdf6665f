#!/usr/bin/env bash
# Training-speed benchmark (not a test): seqtrain vs PyTorch fp32 on the same model, same threads, same
# machine, in one invocation.
#
#   bash bench/train_speed.sh            # STEPS=12 THREADS=2 by default
#   STEPS=20 bash bench/train_speed.sh
#   PAIRS=5 bash bench/train_speed.sh    # 5 seqtrain/PyTorch runs alternating; the table gives the medians
#   SEQ_KERNELS=avx2 bash bench/train_speed.sh     # seqtrain's AVX2 kernels (e.g. on an AVX-512 CPU)
#   CONFIG=configs/quickstart.json bash bench/train_speed.sh   # the quickstart model (any attention + GELU one)
#   AVX2_ONLY=1 bash bench/train_speed.sh          # an AVX-512 CPU standing in for an AVX2-only one: both sides
#                                                  # held to AVX2 (bench/common.sh says how)
#
# Model: bench/configs/speed_rope.json (6 layers, d=256, 8 heads x 64 = 2d attention width, RoPE, GELU MLP
# 4x, V=8192, tied head, B=8, T=512). seqtrain's tokens/s is the median of log.jsonl's per-step tokens_per_s
# over the steps after the first 2. bench/torch_train.py trains the same model on random tokens and reports
# the median per-step tokens/s after 2 warmup steps.
#
# PyTorch gets its best setting: Debian's torch calls whatever libblas.so.3 it finds, so the script probes
# every BLAS build present (system libblas.so.3, OpenBLAS openmp and pthread builds via LD_LIBRARY_PATH)
# with OPENBLAS_CORETYPE unset (OpenBLAS's pick for the CPU), its AVX2 kernels (=Zen on AMD, =Haswell on Intel:
# OpenBLAS's own pick, e.g. Cooperlake on a Zen 4, is not always its fastest) and =SkylakeX (only on a CPU
# with AVX-512: elsewhere SkylakeX kernels die of an illegal instruction; a probe that fails for any reason is
# reported and skipped), keeps the fastest, then probes memory allocators with it (glibc
# malloc as it comes, glibc with mmap off, tcmalloc and jemalloc when installed), keeps the fastest, and lets
# torch_train.py pick its fastest attention formulation. seqtrain uses no BLAS and runs with OPENBLAS_CORETYPE
# removed from its environment (it allocates once, so the allocator does not matter to it).
#
# Prints a Markdown table (implementation, threads, tokens/s, ratio) with a speed-of-light row: the model's
# least training work (bench/model_cost.py train-flops) at the fp32 peak measured by build/release/bench/matmul, i.e.
# the tokens/s no implementation can beat here; then the matmul kernel's % of that peak at the model's shapes.
set -euo pipefail

cd "$(dirname "$0")/.."
STEPS=${STEPS:-12}
THREADS=${THREADS:-2}
PAIRS=${PAIRS:-1}
CONFIG=${CONFIG:-bench/configs/speed_rope.json}
LIBDIR=/usr/lib/x86_64-linux-gnu
RUN_DIR=$(mktemp -d /tmp/seqtrain_speed.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT

if [ "$STEPS" -le 3 ]; then echo "train_speed: STEPS must be > 3 (the first 2 steps are not timed)" >&2; exit 1; fi
case "$PAIRS" in ''|*[!0-9]*|0) echo "train_speed: PAIRS must be a whole number >= 1 (got '$PAIRS')" >&2; exit 1;; esac

# ---- build and data ------------------------------------------------------------------------------------
source bench/common.sh
torch_python  # PY: Debian's python3 with python3-torch, else python3 on PATH (a pyenv python3 may shadow the first)
bench_setup train_speed "$STEPS steps, $THREADS threads"

# torch_train.py's model flags from the resolved config (an attention + GELU-MLP model with a tied head, as the
# two configs this script is meant for; the shapes are what matter for speed)
TORCH_MODEL=$(bin/seqtrain --config "$CONFIG" --print-config | "$PY" bench/model_cost.py torch-args)
echo "train_speed: model $CONFIG: $TORCH_MODEL"

# ---- seqtrain ------------------------------------------------------------------------------------------
# seq_run N: one seqtrain run (run dir seqtrain_N); sets SEQ_TPS (median step) and SEQ_BEST (fastest step)
seq_run() {
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" bin/seqtrain --config "$CONFIG" \
        --set run.dir="$RUN_DIR" --set run.name="seqtrain_$1" --set train.steps="$STEPS" \
        --set run.threads="$THREADS" >"$RUN_DIR/seqtrain.out" 2>&1 \
        || { cat "$RUN_DIR/seqtrain.out" >&2; exit 1; }
    read -r SEQ_TPS SEQ_BEST < <("$PY" - "$RUN_DIR/seqtrain_$1/log.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tps = [r['tokens_per_s'] for r in rows if r['step'] > 2 and 'tokens_per_s' in r]
print(f"{statistics.median(tps):.1f} {max(tps):.1f}")
EOF
)
}
echo "train_speed: seqtrain ..."
seq_run 1
KSET=$(kernels_of "$RUN_DIR/seqtrain.out")
echo "train_speed: seqtrain median tokens/s = $SEQ_TPS (fastest step $SEQ_BEST), ${KSET:-?} kernels"

# ---- PyTorch: find its fastest BLAS and allocator settings ---------------------------------------------
# each BLAS candidate: "LD_LIBRARY_PATH|OPENBLAS_CORETYPE" (empty library path = the system's libblas.so.3)
blas_candidates openblas-openmp openblas-pthread
if [ ${#candidates[@]} -eq 1 ]; then
    echo "train_speed: WARNING: no OpenBLAS found (apt-get install libopenblas0-openmp); torch uses $(readlink -f $LIBDIR/libblas.so.3)" >&2
fi
# each allocator candidate: one VAR=value for torch's environment (empty: glibc malloc as it comes). glibc
# serves the step's large tensors with fresh mmap()s and unmaps them when they are freed, so every step
# page-faults and zeroes its activations again (a large share of its CPU time goes to the kernel); an allocator that
# keeps freed memory avoids that (PyTorch's CPU performance guide recommends tcmalloc or jemalloc). glibc's
# own tunables do it without extra packages; tcmalloc and jemalloc are tried when installed
# (apt-get install libtcmalloc-minimal4 libjemalloc2).
allocators=("" "$GLIBC_NO_MMAP")
for so in libtcmalloc_minimal.so.4 libjemalloc.so.2; do
    if [ -f "$LIBDIR/$so" ]; then allocators+=("LD_PRELOAD=$LIBDIR/$so"); fi
done

# short probes with a fixed formulation (fused qkv, baddbmm attention): the BLAS first (with glibc's mmap off,
# so that the page faults of the default, which vary from run to run, do not pick the BLAS), then the allocator
# with that BLAS
best_tps=0 best=""
for c in "${candidates[@]}"; do
    lib=${c%%|*} ct=${c#*|}
    tps=$(torch_run "$lib" "$ct" "$GLIBC_NO_MMAP" --qkv fused --attn baddbmm --warmup 1 --steps 2 | tps_of)
    echo "train_speed: torch probe blas=${lib:-system $(readlink -f $LIBDIR/libblas.so.3)} OPENBLAS_CORETYPE=${ct:-unset}${AVX2_NOTE}: ${tps:-failed} tok/s"
    if [ -n "$tps" ] && faster "$tps" "$best_tps"; then best_tps=$tps best=$c; fi
done
lib=${best%%|*} ct=${best#*|}
best_tps=0 alloc=""
for a in "${allocators[@]}"; do
    tps=$(torch_run "$lib" "$ct" "$a" --qkv fused --attn baddbmm --warmup 3 --steps 2 | tps_of)
    echo "train_speed: torch probe allocator ${a:-glibc malloc (default)}: ${tps:-failed} tok/s"
    if [ -n "$tps" ] && faster "$tps" "$best_tps"; then best_tps=$tps alloc=$a; fi
done
echo "train_speed: torch best: ${lib:-system libblas.so.3}, OPENBLAS_CORETYPE=${ct:-unset}${AVX2_NOTE}, allocator ${alloc:-glibc malloc}; full run ..."
TORCH_LINE=$(torch_run "$lib" "$ct" "$alloc" --qkv auto --attn auto --warmup 2 --steps $((STEPS - 2)))
echo "$TORCH_LINE"
TORCH_TPS=$(echo "$TORCH_LINE" | tps_of)
if [ -z "$TORCH_TPS" ]; then
    echo "train_speed: PyTorch's run failed; to see why, run: $PY bench/torch_train.py --threads $THREADS $TORCH_MODEL --steps 2" >&2
    exit 1
fi
TORCH_BEST=$(echo "$TORCH_LINE" | sed -n 's/.* best=\([0-9.]*\).*/\1/p')
QKV=$(echo "$TORCH_LINE" | sed -n 's/.* qkv=\([a-z]*\).*/\1/p') ATTN=$(echo "$TORCH_LINE" | sed -n 's/.* attn=\([a-z]*\).*/\1/p')

# ---- more pairs: seqtrain and PyTorch (its formulation fixed to the one chosen above) alternating ----------
# with PAIRS > 1 the table gives the medians over the pairs, the ratio the median pair's: both sides move
# between runs on a shared machine, so a single pair can land on either side of a target
PAIR_LOG="$SEQ_TPS $TORCH_TPS $SEQ_BEST $TORCH_BEST"
for p in $(seq 2 "$PAIRS"); do
    seq_run "$p"
    line=$(torch_run "$lib" "$ct" "$alloc" --qkv "$QKV" --attn "$ATTN" --warmup 2 --steps $((STEPS - 2)))
    t=$(echo "$line" | tps_of) tb=$(echo "$line" | sed -n 's/.* best=\([0-9.]*\).*/\1/p')
    [ -n "$t" ] || { echo "train_speed: PyTorch's run of pair $p failed" >&2; exit 1; }
    echo "train_speed: pair $p: seqtrain $SEQ_TPS, PyTorch $t tokens/s (median steps)"
    PAIR_LOG="$PAIR_LOG
$SEQ_TPS $t $SEQ_BEST $tb"
done
read -r SEQ_TPS TORCH_TPS SEQ_BEST TORCH_BEST RATIO RATIO_BEST < <(echo "$PAIR_LOG" | pair_medians 0/1 2/3)
case "$alloc" in
    "") ALLOC_DESC="glibc malloc";;
    GLIBC_TUNABLES=*) ALLOC_DESC="glibc malloc, mmap_max=0";;
    *) ALLOC_DESC=$(basename "${alloc#LD_PRELOAD=}");;
esac
TORCH_DESC="PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) fp32 ($(basename "${lib:-libblas}"), OPENBLAS_CORETYPE=${ct:-unset}${AVX2_NOTE}, $ALLOC_DESC, $(echo "$TORCH_LINE" | sed -n 's/.*\(qkv=[a-z]*\) \(attn=[a-z]*\).*/\1, \2/p'))"

# ---- speed of light: the model's least training work at the machine's measured fp32 peak ---------------
FLOPS_TOK=$(bin/seqtrain --config "$CONFIG" --print-config | "$PY" bench/model_cost.py train-flops)
MATMUL_OUT=$(env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" build/release/bench/matmul)
PEAK=$(peak_of "$MATMUL_OUT")

# ---- table ---------------------------------------------------------------------------------------------
echo
# tokens/s = median step; "fastest step" is shown too because a shared machine makes medians noisy
if [ "$PAIRS" -gt 1 ]; then echo "medians over $PAIRS alternating pairs; a ratio is the median of the pairs' ratios:"; echo; fi
echo "| implementation | threads | tokens/s (median step) | ratio | fastest step tokens/s | ratio |"
echo "|---|---|---|---|---|---|"
"$PY" - "$SEQ_TPS" "$TORCH_TPS" "$SEQ_BEST" "$TORCH_BEST" "$THREADS" "$TORCH_DESC" "$FLOPS_TOK" "$PEAK" "${KSET:-?}" \
    "$RATIO" "$RATIO_BEST" "$PAIRS" <<'EOF'
import sys
seq, torch_, seq_b, torch_b = map(float, sys.argv[1:5])
th, desc, kset = sys.argv[5], sys.argv[6], sys.argv[9]
flops, peak = float(sys.argv[7]), float(sys.argv[8]) * 1e9
ratio, ratio_b, pairs = float(sys.argv[10]), float(sys.argv[11]), int(sys.argv[12])
sol = peak / flops  # tokens/s if every FLOP of the least work ran at the peak
print(f"| seqtrain (C11 + OpenMP, fp32, {kset} kernels) | {th} | {seq:.0f} | {ratio:.2f}x | {seq_b:.0f} | {ratio_b:.2f}x |")
print(f"| {desc} | {th} | {torch_:.0f} | 1.00x | {torch_b:.0f} | 1.00x |")
print(f"| speed of light: {flops / 1e6:.1f} MFLOP/token at the measured peak ({peak / 1e9:.1f} GFLOP/s) | {th} "
      f"| {sol:.0f} | {sol / torch_:.2f}x | {sol:.0f} | {sol / torch_b:.2f}x |")
print()
print(f"share of the measured fp32 peak spent on the least work: seqtrain {100 * seq * flops / peak:.1f}% "
      f"(fastest step {100 * seq_b * flops / peak:.1f}%), PyTorch {100 * torch_ * flops / peak:.1f}% "
      f"(fastest step {100 * torch_b * flops / peak:.1f}%)")
EOF
echo
echo "targets (issue 'Fast on every CPU'): AVX2-only CPU, 2 threads: >= 1.5x PyTorch and >= 55% of the speed of light;"
echo "AVX-512 CPU, 16 threads: >= 1.6x PyTorch"

# ---- matmul kernel vs peak -----------------------------------------------------------------------------
echo
echo "matmul kernel (build/release/bench/matmul, OMP_NUM_THREADS=$THREADS):"
echo '```'
echo "$MATMUL_OUT"
echo '```'
