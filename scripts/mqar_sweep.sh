#!/usr/bin/env bash
# MQAR (Zoology multi-query associative recall): test accuracy vs model width for a list of mixers, the
# best over a learning-rate grid (Zoology protocol, docs/tasks.md; with SEEDS > 1 the
# best over the grid of the mean over the seeds): one table per (setting, sequence length), rows = mixers,
# columns = d_model.
#
#   scripts/mqar_sweep.sh [--set KEY=VALUE ...] [--dry-run]
#
# Settings (environment):
#   SETTING=zoology|kla_long|bla   configs/tasks/mqar/$SETTING.json (default zoology)
#       zoology:  V 8192, T/N = 64/4, 128/8, 256/16, 512/64 (one table per T), 100,000 / 3,000 examples
#       kla_long: V 256, T 2048, N 64, 12,800 / 1,280 examples (KLA paper Fig. 6a / Table 9; N is not
#                 given there, 64 is our choice), trained by the KLA paper's protocol (Tables 10, 12):
#                 lr 1e-3 without schedule, wd 0, clip 5, up to 750 epochs with early stopping at patience
#                 70 epochs (train.patience on the test loss, evaluated once an epoch at paper scale),
#                 batch by width (64, 32, 16 at d 64, 128, 256)
#       bla:      V 8192, T 512, N 64 (BLA paper Fig. 3a / Table 2: 32 epochs, batch 32, wd 0.01)
#   SCALE=tiny|small|medium|paper   (default small)
#       tiny:  d 16,32; lr 1e-3,3e-3; T 16, N 2, V 64, 4 steps of 16 examples (pipeline check, meaningless numbers)
#       small: d 64,128; lr 2.15e-3,1e-2 (the upper half of Zoology's grid: short runs favour large rates);
#              zoology at T 64 only; 20,000 train / 1,000 test examples,
#              4 epochs (1,250 steps), batch 64 (a CPU-sized version; kla_long/bla keep their T, N and V);
#              evaluations every 200 steps, stopping at 0.99 (Zoology's early stop). At most about 80 s (d 64) and
#              3 min (d 128) per zoology attention run on 2 cores
#       medium: zoology only, a table that separates mixers in about 18 minutes on 16 cores: rows attn_rope
#              kla gla gated_deltanet mamba2 unless MIXERS says otherwise (attention the positive control; the
#              others KLA Fig. 6a's); d 64,128; lr 3e-4,1e-3; T 64, N 4, 20,000 train / 1,000 test examples,
#              8 epochs (2,500 steps) of batch 64, Zoology's early stop at 0.99 (evaluations every 200 steps);
#              2 threads a run, JOBS nproc / 2, the d 128 runs queued first
#       paper: d 64,128,256,512; lr logspace(-4,-2,4); the config's examples and epochs; Zoology's batch
#              size by T (512 for T <= 128, 256, 128, 64 for T = 256, 512, 1024; 32 for T = 2048).
#              kla_long: the KLA paper's Table 12: d 64,128,256 with batch 64,32,16; lr 1e-3; 5 seeds
#       kla_long's rows (every scale, unless MIXERS says otherwise): Table 12's state-matched models, 2
#              blocks each: kla (d_state 16, expand 1: 2·d·16 floats a layer), mamba_t12 (Mamba-1, d_state 16,
#              expand 2: 2d·16), gdn_t12 (Gated DeltaNet, expand_k 0.75, expand_v 1.5, d/32 heads: 2,304,
#              4,608, 9,216 at d 64, 128, 256, "the next-largest feasible"), gla_t12 (GLA, 4 heads, expand_v
#              1, expand_k 128/d: 2·d·16 floats; Table 12 prints expand_k 64/d, whose state is half its own
#              State Size column). Each (row, d)'s state per layer (seqtrain --info) is printed before the
#              runs and in the tables. Widths outside Table 12 (tiny, DIMS) follow the same formulas
#       kla_long at small and tiny: lr 1e-3 and one seed (small: d 64,128 with batch 64,32 as at paper, the
#              config's 12,800 training examples, 1,000 test examples, 4 epochs; tiny as above)
#   DIMS="64 128" LRS="1e-3 3e-3" TS="64 128"   override the scale's widths / lr grid / zoology lengths
#   SEEDS=N      seeds 1..N per (mixer, d, lr) (run.seed; default 1, kla_long at paper 5); N > 1 names the
#                runs ..._s<seed> and makes each cell the mean over the seeds
#   MIXERS="attn_rope rfa"                      only these rows (ids of mixer_rows in scripts/lib/tasks.sh)
#   SEQ_OUT=DIR      output folder (default runs/tasks/mqar/$SCALE); runs in SEQ_OUT/runs, logs in SEQ_OUT/logs
#   JOBS=N       runs trained at the same time (default: tiny nproc, medium nproc / THREADS, else 1);
#                OMP_WAIT_POLICY=passive if > 1
#   THREADS=N    run.threads of every run (default: medium 2, else max(1, nproc / JOBS)); a run's numbers are
#                the same only on the same kind of CPU with the same THREADS (docs/training.md#determinism)
#   BIN=DIR      where seqtrain is (default bin)
#   PROGRESS_EVERY=S   print the running trainings' progress every S seconds (default 60, 0 = off)
# Resumable: finished runs (RUN_DIR/eval/acc.json) are reused, interrupted ones resumed from their
# checkpoint; run the same command again after Ctrl-C. The tables go to stdout and to
# SEQ_OUT/mqar_<setting>_T<T>.md and .csv (with a second table: accuracy vs decoding state size, also in
# SEQ_OUT/mqar_<setting>_T<T>_state.csv); every single run (mixer, d, lr, accuracy) to SEQ_OUT/mqar_<setting>_runs.csv.
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')

source "$(dirname "${BASH_SOURCE[0]}")/lib/tasks.sh"  # the run queue, the mixer rows
parse_opts "$@"
setup runs/tasks/mqar "tiny small medium paper" 2  # medium: 2 threads a run (its d 128 runs are the longest)
SETTING=${SETTING:-zoology}
CFG="configs/tasks/mqar/$SETTING.json"
[ -f "$CFG" ] || DIE_RC=2 die "SETTING must be zoology, kla_long or bla (no $CFG)"
[ "$SCALE" != medium ] || [ "$SETTING" = zoology ] ||
    DIE_RC=2 die "SCALE=medium is the zoology setting's (kla_long and bla runs are 8-20x the tokens of a T 64 run)"

case "$SCALE" in
    tiny)  dims="16 32"; lrs="1e-3 3e-3"; ts="16" ;;
    small) dims="64 128"; lrs="2.15e-3 1e-2"; ts="64" ;;
    medium) dims="64 128"; lrs="3e-4 1e-3"; ts="64"; MIXERS=${MIXERS:-attn_rope kla gla gated_deltanet mamba2} ;;
    paper) dims="64 128 256 512"; lrs="1e-4 4.64e-4 2.15e-3 1e-2"; ts="64 128 256 512" ;;
esac
seeds=1
if [ "$SETTING" = kla_long ]; then  # the KLA paper's Table 10 lr, Table 12 widths, G.1 seeds
    lrs="1e-3"
    case "$SCALE" in paper) dims="64 128 256"; seeds=5 ;; small) dims="64 128" ;; esac
fi
DIMS=${DIMS:-$dims}; LRS=${LRS:-$lrs}; SEEDS=${SEEDS:-$seeds}
case "$SEEDS" in ''|*[!0-9]*|0) DIE_RC=2 die "SEEDS must be a positive integer (got '$SEEDS')" ;; esac
# the run id of (T, mixer, d, lr, seed): ..._s<seed> only with SEEDS > 1
run_id() { local id="${SETTING}_T$1_$2_d$3_lr$4"; [ "$SEEDS" -gt 1 ] && id+="_s$5"; echo "$id"; }
if [ "$SETTING" = zoology ]; then TS=${TS:-$ts}
else TS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["seq_len"])' "$CFG"); fi
[ "$SCALE" = tiny ] && TS=16
# the KLA paper's Table 12 baselines (kla_long), state-matched to kla (2·d·16 floats a layer) at every width
# d by t12_sets; kla itself is the shared row (d_state 16, expand 1)
T12_ROWS=(
    'mamba_t12|Mamba (Table 12: d_state 16, expand 2)|{"kind":"mamba","d_state":16,"expand":2}|model.block=fused'
    'gdn_t12|Gated DeltaNet (Table 12: expand_k 0.75, expand_v 1.5, d/32 heads)|{"kind":"gated_deltanet","expand_k":0.75,"expand_v":1.5}|'
    'gla_t12|GLA (Table 12 state: 4 heads, expand_k 128/d, expand_v 1)|{"kind":"gla","heads":4,"expand_v":1}|'
)
# t12_sets ID d: the width-dependent --set values of a Table 12 row (nothing for the other rows)
t12_sets() {
    case "$1" in
        gdn_t12) echo "model.mixer.heads=$(($2 >= 64 ? $2 / 32 : 1))" ;;
        gla_t12) echo "model.mixer.expand_k=$(awk -v d="$2" 'BEGIN { print 128 / d }')" ;;
    esac
}
[ "$SETTING" = kla_long ] && MIXERS=${MIXERS:-kla mamba_t12 gdn_t12 gla_t12}
mixer_rows 1 "${T12_ROWS[@]}"  # the zoology config's attention has 1 head

# the --set values of the scale for sequence length T and width d
scale_sets() {
    local T=$1 d=$2 N
    case "$SCALE" in
        tiny) printf '%s\n' data.task.vocab=64 data.task.num_kv_pairs=2 data.task.train_examples=64 \
                  data.task.test_examples=32 train.batch_size=16 train.steps=4 train.seq_len=16 ;;
        *)
            if [ "$SETTING" = zoology ]; then
                case "$T" in 64) N=4 ;; 128) N=8 ;; 256) N=16 ;; 512) N=64 ;; *) N=$((T / 16)) ;; esac
                printf '%s\n' "train.seq_len=$T" "data.task.num_kv_pairs=$N"
                if [ "$SCALE" = paper ]; then
                    if [ "$T" -le 128 ]; then echo train.batch_size=512; elif [ "$T" -le 256 ]; then echo train.batch_size=256
                    elif [ "$T" -le 512 ]; then echo train.batch_size=128; else echo train.batch_size=64; fi
                fi
            fi
            if [ "$SCALE" = medium ]; then
                printf '%s\n' data.task.train_examples=20000 data.task.test_examples=1000 train.batch_size=64 train.epochs=8
            fi
            if [ "$SCALE" = small ]; then
                printf '%s\n' data.task.test_examples=1000 train.epochs=4
                # kla_long keeps its 12,800 training examples (Table 9) and the batch by width below
                [ "$SETTING" = kla_long ] || printf '%s\n' data.task.train_examples=20000 train.batch_size=64
            fi
            if [ "$SETTING" = kla_long ]; then  # Table 12: batch 64, 32, 16 at d 64, 128, 256
                local b=""
                case "$d" in 64) b=64 ;; 128) b=32 ;; 256) b=16 ;; esac
                [ -n "$b" ] && echo "train.batch_size=$b"
                # an evaluation (and patience check) once an epoch of the 12,800 examples at that batch
                [ -n "$b" ] && [ "$SCALE" = paper ] && echo "train.eval_every=$((12800 / b))"
            fi ;;
    esac
}

# queued widest first: with JOBS runs at a time the long runs start early and the short ones fill the end
for T in $TS; do for d in $(printf '%s\n' $DIMS | sort -rn); do for m in $MIXERS; do for lr in $LRS; do for ((sd = 1; sd <= SEEDS; sd++)); do
    args=(--config "$CFG" --set "model.mixer=$(mixer_field "$m" 3)")
    while IFS= read -r s; do [ -n "$s" ] && args+=(--set "$s"); done < <(mixer_field "$m" 4 | tr ';' '\n')
    while IFS= read -r s; do [ -n "$s" ] && args+=(--set "$s"); done < <(scale_sets "$T" "$d"; t12_sets "$m" "$d")
    args+=(--set "model.d_model=$d" --set "optim.lr=$lr")
    [ "$SEEDS" -gt 1 ] && args+=(--set "run.seed=$sd")
    for s in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$s"); done
    job "$(run_id "$T" "$m" "$d" "$lr" "$sd")" "${args[@]}"
done; done; done; done; done
say "$SETTING, SCALE=$SCALE: ${#JOB_IDS[@]} runs (T: $TS; mixers: $MIXERS; d: $DIMS; lr: $LRS; seeds: $SEEDS), $NJOBS at a time, $THREADS threads each; output in $OUTD"
# kla_long: the state per layer of every (mixer, d) (the state-matched comparison of KLA's Table 12), before
# any training
declare -A LAYER_STATE=()
[ "$SETTING" = kla_long ] && for T in $TS; do for d in $DIMS; do for m in $MIXERS; do
    LAYER_STATE[$T,$m,$d]=$(job_layer_state "$(run_id "$T" "$m" "$d" "${LRS%% *}" 1)")
    say "state per layer, $m at d $d: ${LAYER_STATE[$T,$m,$d]:-(seqtrain --info failed)}"
done; done; done
run_jobs; rc=$?
exit_if_interrupted

# the tables: cell = best test accuracy over the lr grid (and the lr in the CSV); with SEEDS > 1 the best
# over the grid of the mean over the seeds
allcsv="$OUTD/mqar_${SETTING}_runs.csv"
echo "setting,T,mixer,d_model,lr,accuracy,seed" > "$allcsv"
# mean_acc T M D LR: the mean accuracy over the seeds with a result (empty if none); LOG=1 also adds
# each run to the runs CSV
mean_acc() {
    local sd a sum=0 n=0
    for ((sd = 1; sd <= SEEDS; sd++)); do
        a=$(job_acc "$(run_id "$1" "$2" "$3" "$4" "$sd")"); [ -n "$a" ] || continue
        [ "${LOG:-0}" = 1 ] && echo "$SETTING,$1,$2,$3,$4,$a,$sd" >> "$allcsv"
        sum=$(awk -v s="$sum" -v a="$a" 'BEGIN { printf "%.8f", s + a }'); n=$((n + 1))
    done
    [ "$n" -gt 0 ] && awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.4f\n", s / n }'
}
commit=$(commit_of)
# the number of the state per layer of (mixer $1, width $2) at the current T
layer_state_cell() { local x=${LAYER_STATE[$T,$1,$2]:-}; printf '%s' "${x##*= }"; }
CMDLINE="SETTING=$SETTING $(cmdline MIXERS DIMS LRS TS SEEDS)"
for T in $TS; do
    md="$OUTD/mqar_${SETTING}_T${T}.md"; csv="$OUTD/mqar_${SETTING}_T${T}.csv"
    {
        if [ "$SEEDS" -gt 1 ]; then
            echo "**MQAR ($SETTING, T = $T, SCALE=$SCALE).** Test accuracy, the mean over seeds 1–$SEEDS, best over lr ∈ {${LRS// /, }}; rows = mixers, columns = d_model."
        else
            echo "**MQAR ($SETTING, T = $T, SCALE=$SCALE).** Test accuracy, best over lr ∈ {${LRS// /, }}; rows = mixers, columns = d_model."
        fi
        echo
        printf '| Mixer |'; for d in $DIMS; do printf ' d=%s |' "$d"; done; echo
        printf '|---|'; for d in $DIMS; do printf -- '---|'; done; echo
    } > "$md"
    { printf 'mixer,label'; for d in $DIMS; do printf ',acc_d%s,lr_d%s' "$d" "$d"; done; echo; } > "$csv"
    for m in $MIXERS; do
        label=$(mixer_field "$m" 2); line="| $label |"; cline="$m,\"$label\""
        for d in $DIMS; do
            best=""; blr=""
            for lr in $LRS; do
                a=$(LOG=1 mean_acc "$T" "$m" "$d" "$lr")
                if [ -n "$a" ] && { [ -z "$best" ] || awk -v a="$a" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then best=$a; blr=$lr; fi
            done
            line+=" ${best:-—} |"; cline+=",${best},${blr}"
        done
        echo "$line" >> "$md"; echo "$cline" >> "$csv"
    done
    # kla_long: the state per layer of every (mixer, d), Table 12's matching
    [ "$SETTING" = kla_long ] && {
        echo
        echo "State per layer (\`seqtrain --info\`: the recurrent state of one layer, kla's λ and η as KLA Table 12 counts them; conv caches left out):"
        echo
        mixer_grid_md "$DIMS" d= layer_state_cell $MIXERS
    } >> "$md"
    # accuracy vs state size (BLA Fig. 3a / KLA Fig. 6a): the decoding state of every (mixer, d), in floats
    # over all layers at this T, from seqtrain --info (a KV cache grows with T; a recurrent state does not)
    {
        echo
        echo "Accuracy vs decoding state size (floats per sequence, all layers, at T = $T; \`seqtrain --info\`), sorted by state:"
        echo
        echo "| Mixer | d_model | state | accuracy |"
        echo "|---|---:|---:|---:|"
    } >> "$md"
    scsv="$OUTD/mqar_${SETTING}_T${T}_state.csv"
    echo "mixer,d_model,state_floats,accuracy" > "$scsv"
    for m in $MIXERS; do for d in $DIMS; do
        st=$(job_state "$(run_id "$T" "$m" "$d" "${LRS%% *}" 1)")
        best=""
        for lr in $LRS; do
            a=$(mean_acc "$T" "$m" "$d" "$lr")
            if [ -n "$a" ] && { [ -z "$best" ] || awk -v a="$a" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then best=$a; fi
        done
        echo "$m,$d,$st,$best" >> "$scsv"
        printf '%s\t| %s | %s | %s | %s |\n' "${st:-0}" "$(mixer_field "$m" 2)" "$d" "${st:-—}" "${best:-—}"
    done; done | sort -n -s -k1,1 | cut -f2- >> "$md"
    echo >> "$md"
    echo "Runs: \`$CMDLINE\` (commit $commit; $(run_host)); per-run accuracies in $(basename "$allcsv"), state sizes in $(basename "$scsv")." >> "$md"
    cat "$md"; echo
done
exit "$rc"
