#!/usr/bin/env bash
# State tracking: (a) A5 word problem — for each mixer and sequence length the fewest layers in 1..L_MAX whose
# best seed reaches >= 90% test accuracy (the KLA paper's criterion: solved in >= 1 of 5 seeds; its Fig. 1a,
# after Merrill et al. 2024, is that number against the sequence length); (b) parity length generalisation — train at length TRAIN_LEN, test accuracy by
# test length (one evaluation per length: a copy of the run directory whose config.json has
# data.task.test_len_min = test_len_max = train.seq_len = L, scored by `seqeval --run COPY --task`).
#
#   scripts/state_tracking.sh [--set KEY=VALUE ...] [--dry-run]
#
# Settings (environment):
#   SCALE=tiny|small|medium|paper   (default small)
#       tiny:  A5 length 8, layers 1-2, 2 seeds, d 32; parity train 8, test 8,16,32; 4 steps (pipeline check)
#       small: A5 length 16, layers 1-3, 2 seeds, d 64, 20,000 examples x 4 epochs; parity d 64 train 128,
#              test 128,256,384,512, 20,000 examples x 2 epochs
#       medium: a table that separates mixers in about 13 minutes on 16 cores: rows attn_rope kla mamba2 gla
#              gated_deltanet gated_deltanet_neg unless MIXERS says otherwise (the last is the parity control:
#              negative eigenvalues, Grazzi et al.); A5 length 16, layers 1-2, 2 seeds, d 128, 20,000 examples x
#              20 epochs (6,250 steps of 64) at lr 1e-3 (a5.json's constant schedule, wd 0, clip 5); parity d 64
#              trained at 64 on 20,000 examples x 2 epochs (625 steps of 64), lr 1e-3, wd 1e-6 (the Selective
#              RoPE paper's App. B.2.2 optimizer; parity.json's cosine), test 64,128,256,512; JOBS defaults
#              to nproc (THREADS 1)
#       paper: A5 lengths 16 32 64 128 (Fig. 1a's sweep; the paper names no lengths, these are ours), layers
#              1-4, 5 seeds, configs/tasks/state/a5.json as it is: the KLA paper's
#              G.5 / Table 10 (d_model 1024, lr 3e-4 constant, wd 0, clip 5, up to 500 epochs of 100,000
#              examples with early stopping at patience 50 epochs: train.patience on the test loss,
#              evaluated once an epoch); parity as the config (train 128, test 128,256,384,512)
#       small and tiny keep a5.json's optimizer and shrink the model (d 64, d 32) and the budget above
#   L_MAX=N SEEDS=N TRAIN_LEN=N TEST_LENS="128 512"   override the scale's values (TRAIN_LEN: parity's
#                training length)
#   A5_LENS="16 32 64"   the A5 sequence lengths (tiny 8, small and medium 16: one length, where Fig. 1a sweeps
#                them; paper the sweep above). With more than one, the runs are named ..._T<length> and a5.md
#                ends with Fig. 1a's table: the fewest layers by mixer and length
#   PARITY_SEEDS="555 666"  parity: one run per run.seed value, each cell the mean over them (default: one run
#                    with the config's seed; the Selective RoPE paper's App. B.2.2 uses 555 666 777 888 999)
#   PARTS="a5 parity"   only these of the two tables (default both)
#   MIXERS="attn_rope rfa"    only these rows (ids of mixer_rows in scripts/lib/tasks.sh, and this script's
#                    parity-only rows attn_rope_1l, attn_selrope_1l: one softmax attention layer with RoPE, or
#                    with Selective RoPE instead (pos none), the Selective RoPE paper's 1-layer Transformer of
#                    Fig. 8; A5 skips them, its depth is the sweep's)
#   SEQ_OUT=DIR      output folder (default runs/tasks/state/$SCALE); runs in SEQ_OUT/runs, logs in SEQ_OUT/logs
#   JOBS, THREADS, BIN, PROGRESS_EVERY   as scripts/mqar_sweep.sh
# Resumable: finished runs and per-length evaluations are reused. Tables to stdout and SEQ_OUT/a5.md|csv,
# SEQ_OUT/parity.md|csv.
# The parity runs train with train.seq_len = TRAIN_LEN and test length TRAIN_LEN (the in-distribution
# accuracy in RUN_DIR/eval/acc.json); the longer lengths are only scored afterwards, so no training step
# pads to the longest test length (the result is the same: the models are causal).
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')

THRESH=0.9

source "$(dirname "${BASH_SOURCE[0]}")/lib/tasks.sh"  # the run queue, the mixer rows
parse_opts "$@"
setup runs/tasks/state "tiny small medium paper"
case "$SCALE" in
    tiny)  lmax=2; seeds=2; a5lens=8;  trlen=8;   tlens="8 16 32" ;;
    small) lmax=3; seeds=2; a5lens=16; trlen=128; tlens="128 256 384 512" ;;
    medium) lmax=2; seeds=2; a5lens=16; trlen=64; tlens="64 128 256 512"
            MIXERS=${MIXERS:-attn_rope kla mamba2 gla gated_deltanet gated_deltanet_neg} ;;
    paper) lmax=4; seeds=5; a5lens="16 32 64 128"; trlen=128; tlens="128 256 384 512" ;;
esac
[ -z "${A5_LEN:-}" ] || DIE_RC=2 die "A5_LEN: no such setting; the A5 lengths are A5_LENS (a list, e.g. A5_LENS=\"$A5_LEN\")"
L_MAX=${L_MAX:-$lmax}; SEEDS=${SEEDS:-$seeds}; A5_LENS=${A5_LENS:-$a5lens}; TRAIN_LEN=${TRAIN_LEN:-$trlen}; TEST_LENS=${TEST_LENS:-$tlens}
PARTS=${PARTS:-a5 parity}
for v in L_MAX SEEDS TRAIN_LEN; do
    case "${!v}" in ''|*[!0-9]*|0) DIE_RC=2 die "$v must be a positive integer (got '${!v}')" ;; esac
done
for n in $A5_LENS; do case "$n" in *[!0-9]*|0) DIE_RC=2 die "A5_LENS must be positive integers (got '$A5_LENS')" ;; esac; done
[ -n "${A5_LENS// /}" ] || DIE_RC=2 die "A5_LENS names no length"
# the A5 run id of (mixer, layers, seed, length): the length in it only when A5_LENS has several
a5_id() { local id="a5_$1_L$2_s$3"; [ "$(wc -w <<< "$A5_LENS")" -gt 1 ] && id+="_T$4"; echo "$id"; }
for p in $PARTS; do case "$p" in a5|parity) ;; *) DIE_RC=2 die "PARTS names a5 and parity only (got '$p')" ;; esac; done
has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
# parity-only rows of a fixed depth (MIXERS must name them)
FIXED_DEPTH_ROWS=(
    'attn_rope_1l|Attention (RoPE), 1 layer|{"kind":"attention","pos":"rope"}|model.n_layers=1'
    'attn_selrope_1l|Attention + Selective RoPE, 1 layer|{"kind":"attention","pos":"none","selective_rope":{"enabled":true}}|model.n_layers=1'
)
mixer_rows 2 "${FIXED_DEPTH_ROWS[@]}"  # the state configs' attention has 2 heads
# whether row $1 sets its own depth (A5 sweeps the depth, so it leaves such rows out)
fixed_depth() { case "$(mixer_field "$1" 4)" in *model.n_layers=*) return 0 ;; esac; return 1; }
for s in ${PARITY_SEEDS:-}; do case "$s" in *[!0-9]*) DIE_RC=2 die "PARITY_SEEDS must be integers (got '$PARITY_SEEDS')" ;; esac; done
# the parity run ids of row $1: one per PARITY_SEEDS value, or one
parity_ids() { local s; if [ -z "${PARITY_SEEDS:-}" ]; then echo "parity_$1"; else for s in $PARITY_SEEDS; do echo "parity_$1_s$s"; done; fi; }

scale_sets() {  # scale_sets a5|parity
    case "$SCALE" in
        tiny)  printf '%s\n' model.d_model=32 data.task.train_examples=64 data.task.test_examples=16 train.batch_size=16 train.steps=4 ;;
        small) printf '%s\n' model.d_model=64 data.task.train_examples=20000 data.task.test_examples=500
               if [ "$1" = a5 ]; then echo train.epochs=4; else echo train.epochs=2; fi ;;
        medium) printf '%s\n' data.task.train_examples=20000 data.task.test_examples=500 optim.lr=1e-3
               if [ "$1" = a5 ]; then printf '%s\n' model.d_model=128 train.epochs=20
               else printf '%s\n' model.d_model=64 train.epochs=2 optim.weight_decay=1e-6; fi ;;
    esac
}
mixer_sets() {
    echo "model.mixer=$(mixer_field "$1" 3)"
    mixer_field "$1" 4 | tr ';' '\n'
}
add_sets() { local s; while IFS= read -r s; do [ -n "$s" ] && args+=(--set "$s"); done; }

# queued longest first (A5 at the most layers, then fewer, then parity), so the job slots stay full to the end
if has_part a5; then for n in $(printf '%s\n' $A5_LENS | sort -rn); do for ((L = L_MAX; L >= 1; L--)); do for m in $MIXERS; do for ((s = 1; s <= SEEDS; s++)); do
    fixed_depth "$m" && continue
    args=(--config configs/tasks/state/a5.json)
    add_sets < <(mixer_sets "$m"); add_sets < <(scale_sets a5)
    args+=(--set "model.n_layers=$L" --set "run.seed=$s" --set "train.seq_len=$n")
    for k in train_len_min train_len_max test_len_min test_len_max; do args+=(--set "data.task.$k=$n"); done
    for x in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$x"); done
    job "$(a5_id "$m" "$L" "$s" "$n")" "${args[@]}"
done; done; done; done; fi
if has_part parity; then for m in $MIXERS; do for id in $(parity_ids "$m"); do
    args=(--config configs/tasks/state/parity.json)
    add_sets < <(mixer_sets "$m"); add_sets < <(scale_sets parity)
    args+=(--set "train.seq_len=$TRAIN_LEN")
    for k in train_len_min train_len_max test_len_min test_len_max; do args+=(--set "data.task.$k=$TRAIN_LEN"); done
    [ "$id" = "parity_$m" ] || args+=(--set "run.seed=${id##*_s}")
    for x in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$x"); done
    job "$id" "${args[@]}"
done; done; fi
what=""
has_part a5 && what="A5 at length ${A5_LENS// /,}, layers 1-$L_MAX, $SEEDS seeds"
has_part parity && what+="${what:+; }parity train $TRAIN_LEN, test ${TEST_LENS// /,}${PARITY_SEEDS:+, seeds ${PARITY_SEEDS// /,}}"
say "SCALE=$SCALE: ${#JOB_IDS[@]} runs ($what), $NJOBS at a time, $THREADS threads each; output in $OUTD"
run_jobs; rc=$?
exit_if_interrupted

# parity accuracy of run ID at test length L (cached in RUN_DIR/eval/len_L.json)
len_acc() {
    local id=$1 L=$2 d="$RUNS/$1" c="$OUTD/evalcopy/$1_L$2" j="$RUNS/$1/eval/len_$2.json"
    [ -f "$d/eval/acc.json" ] || return 1
    if [ ! -s "$j" ]; then
        rm -rf "$c"; mkdir -p "$OUTD/evalcopy"; cp -r "$d" "$c" || return 1
        python3 - "$c/config.json" "$L" <<'PY' || return 1
import json, sys
p, L = sys.argv[1], int(sys.argv[2])
c = json.load(open(p))
t = c["data"]["task"]
t["test_len_min"] = t["test_len_max"] = L
c["train"]["seq_len"] = max(L, t["train_len_max"])
json.dump(c, open(p, "w"), indent=1)
PY
        "$SEQEVAL" --run "$c" --task 2>>"$LOGS/$1.log" | grep '"accuracy"' | tail -n 1 > "$j.tmp" && [ -s "$j.tmp" ] && mv "$j.tmp" "$j" || { rm -f "$j.tmp"; return 1; }
        rm -rf "$c"
    fi
    local a; a=$(json_acc "$j"); [ -n "$a" ] && echo "$a"   # fails when there is no accuracy
}

commit=$(commit_of)
CMDLINE=$(cmdline MIXERS PARTS L_MAX SEEDS A5_LENS TRAIN_LEN TEST_LENS PARITY_SEEDS)
# (a) A5: per length the fewest layers and the best-seed accuracy per depth; with several lengths Fig. 1a's table
if has_part a5; then
md="$OUTD/a5.md"; csv="$OUTD/a5.csv"
: > "$md"
{ printf 'mixer,label,length,fewest_layers'; for ((L = 1; L <= L_MAX; L++)); do printf ',best_acc_L%d' "$L"; done; echo; } > "$csv"
declare -A FEWEST=()
for n in $A5_LENS; do
{
    [ -s "$md" ] && echo
    echo "**A5 word problem (length $n, SCALE=$SCALE).** Fewest layers whose best of $SEEDS seeds reaches ≥ 90% test accuracy (> $L_MAX: none up to $L_MAX); then the best-seed accuracy per depth."
    echo
    printf '| Mixer | fewest layers |'; for ((L = 1; L <= L_MAX; L++)); do printf ' L=%d |' "$L"; done; echo
    printf '|---|---|'; for ((L = 1; L <= L_MAX; L++)); do printf -- '---|'; done; echo
} >> "$md"
for m in $MIXERS; do
    fixed_depth "$m" && continue
    label=$(mixer_field "$m" 2); fewest=""; cells=""; ccells=""
    for ((L = 1; L <= L_MAX; L++)); do
        best=""
        for ((s = 1; s <= SEEDS; s++)); do
            a=$(job_acc "$(a5_id "$m" "$L" "$s" "$n")")
            if [ -n "$a" ] && { [ -z "$best" ] || awk -v a="$a" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then best=$a; fi
        done
        cells+=" ${best:-—} |"; ccells+=",$best"
        if [ -z "$fewest" ] && [ -n "$best" ] && awk -v a="$best" -v t="$THRESH" 'BEGIN { exit !(a >= t) }'; then fewest=$L; fi
    done
    FEWEST[$m,$n]=${fewest:->$L_MAX}
    echo "| $label | ${fewest:->$L_MAX} |$cells" >> "$md"; echo "$m,\"$label\",$n,${fewest:->$L_MAX}$ccells" >> "$csv"
done
done
if [ "$(wc -w <<< "$A5_LENS")" -gt 1 ]; then
    fewest_cell() { printf '%s' "${FEWEST[$1,$2]}"; }
    rows=(); for m in $MIXERS; do fixed_depth "$m" || rows+=("$m"); done
    {
        echo
        echo "**Fig. 1a: fewest layers that solve A5 (≥ 90%, best of $SEEDS seeds), by sequence length** (> $L_MAX: none up to $L_MAX)."
        echo
        mixer_grid_md "$A5_LENS" T= fewest_cell "${rows[@]}"
    } >> "$md"
fi
echo >> "$md"; echo "Runs: \`$CMDLINE\` (commit $commit; $(run_host))." >> "$md"
cat "$md"; echo
fi

# (b) parity
has_part parity || exit "$rc"
md="$OUTD/parity.md"; csv="$OUTD/parity.csv"
{
    echo "**Parity length generalisation (trained at length $TRAIN_LEN, SCALE=$SCALE).** Test accuracy at each test length${PARITY_SEEDS:+, the mean over seeds {${PARITY_SEEDS// /, }\}}."
    echo
    printf '| Mixer |'; for L in $TEST_LENS; do printf ' L=%s |' "$L"; done; echo
    printf '|---|'; for L in $TEST_LENS; do printf -- '---|'; done; echo
} > "$md"
{ printf 'mixer,label'; for L in $TEST_LENS; do printf ',acc_L%s' "$L"; done; echo; } > "$csv"
for m in $MIXERS; do
    label=$(mixer_field "$m" 2); line="| $label |"; cline="$m,\"$label\""
    for L in $TEST_LENS; do
        sum=0; n=0; a=""
        for id in $(parity_ids "$m"); do
            x=$(len_acc "$id" "$L") || { rc=1; say "$id: evaluation at length $L failed"; continue; }
            sum=$(awk -v s="$sum" -v x="$x" 'BEGIN { printf "%.8f", s + x }'); n=$((n + 1))
        done
        [ "$n" -gt 0 ] && a=$(awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.4f", s / n }')
        line+=" ${a:-—} |"; cline+=",$a"
    done
    echo "$line" >> "$md"; echo "$cline" >> "$csv"
done
echo >> "$md"; echo "Runs: \`$CMDLINE\` (commit $commit; $(run_host))." >> "$md"
cat "$md"
exit "$rc"
