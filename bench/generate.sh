#!/usr/bin/env bash
# Generation speed (not a test): build/release/bench/generate, tokens/s of token-by-token decoding with 128 and
# 2048 tokens already in the context, for the RoPE model and the kla model of the CPU-size LM configs (random
# weights: speed does not depend on them), in one invocation on the same threads. An attention layer reads its
# whole key/value cache per token; a recurrent (kla) layer's step costs the same at any context. Writes one
# Markdown section.
#
#   bash bench/generate.sh                              # to stdout
#   bash bench/generate.sh docs/results/generate.md
#   THREADS=2 CONTEXTS=128,2048 TOKENS=32 REPS=3 BATCH=1 CONFIGS="configs/lm/cpu/gpt.json configs/lm/cpu/kla.json" \
#       bash bench/generate.sh OUT.md
#
# Defaults: THREADS = 1 (one sequence's token is little work: on a shared machine a second thread's barriers
# cost more than they save; set THREADS=2 to see), CONTEXTS = 128,2048, TOKENS = 32, REPS = 3, BATCH = 1.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-1}
CONTEXTS=${CONTEXTS:-128,2048}
TOKENS=${TOKENS:-32}
REPS=${REPS:-3}
BATCH=${BATCH:-1}
CONFIGS=${CONFIGS:-configs/lm/cpu/gpt.json configs/lm/cpu/kla.json}
OUT=${1:-}
BENCH_DEFAULT=build/release/bench/generate
BENCH=${BENCH:-$BENCH_DEFAULT}

# the default build is brought up to date with the sources (make does nothing when it is); a BENCH given is run as it is
if [ "$BENCH" = "$BENCH_DEFAULT" ]; then make -s -j"$(nproc)" "$BENCH" >&2; fi
[ -x "$BENCH" ] || { echo "$0: $BENCH is not an executable" >&2; exit 2; }
args=(--contexts "$CONTEXTS" --tokens "$TOKENS" --reps "$REPS" --batch "$BATCH")

section() {
    echo "# Generation speed"
    echo
    local commit=unknown
    if commit=$(git rev-parse --short HEAD 2>/dev/null); then git diff --quiet HEAD || commit="$commit (dirty)"; fi
    echo "$(date -u +%Y-%m-%d), commit $commit,"\
         "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), nproc $(nproc), OMP_NUM_THREADS=$THREADS,"\
         "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo '```'
    local first=1 c
    for c in $CONFIGS; do
        echo "OMP_NUM_THREADS=$THREADS $BENCH --config $c ${args[*]}${first:+ --header}"
        first=
    done
    echo '```'
    echo
    echo "Tokens/s of decoding one sequence token by token (\`model_decoder_step\` and greedy sampling) with"\
         "the context already holding 128 or 2048 tokens, random weights (speed does not depend on them). An"\
         "attention layer's step reads its whole key/value cache, so its cost grows with the context; a kla layer"\
         "carries an O(1) state and costs the same at any context. The rest of a step (projections, MLP, the"\
         "head over 8192 tokens) is the same at both contexts. Regenerate with \`bash bench/generate.sh"\
         "docs/results/generate.md\`; on a shared machine the numbers move with the load (above)."
    echo
    first=1
    for c in $CONFIGS; do
        OMP_NUM_THREADS=$THREADS "$BENCH" --config "$c" "${args[@]}" ${first:+--header}
        first=
    done
}

if [ -n "$OUT" ]; then
    mkdir -p "$(dirname "$OUT")"
    section > "$OUT.tmp"   # a failed run leaves the previous results in place
    mv "$OUT.tmp" "$OUT"
    echo "generate: wrote $OUT" >&2
else
    section
fi
