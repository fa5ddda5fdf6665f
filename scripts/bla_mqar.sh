#!/usr/bin/env bash
# The BLA paper's MQAR experiments (§4.1 and Table 2 of App. D.1) on configs/tasks/mqar/bla.json
# (T 512, 64 key-value pairs, V 8192, batch 32, AdamW, wd 1e-2, cosine to 0 with 10% warmup, 32 epochs of
# 100,000 examples, 3,000 test examples, 2 layers):
#   Fig. 3a  Pareto frontier of test accuracy against decoding state size, best over lr x seed x the
#            state-size parameters: BLA (no decay, resolution 2: P = 2(2M-1)), SWA (attention with a window),
#            GLA, GDN and GSA (these three with a short conv of 4 taps, which the paper found they need), and
#            full attention (window >= T) as the positive control
#   Fig. 3b  BLA accuracy against the token resolution P/(2M-1) at fixed M and d
#   Fig. 3c  BLA (M modes) against SWA with the matched window w = 2M-1 as d grows
#
#   scripts/bla_mqar.sh [--set KEY=VALUE ...] [--dry-run]
#
# Settings (environment):
#   SCALE=tiny|small|paper   (default small)
#       tiny:  T 32, 4 pairs, V 64, 4 steps of 16 examples; d 16; BLA M 2,4; SWA w 4,8; GSA S 3,7; expand_k 1;
#              Fig. 3b resolutions 1,2 at M 2, d 16; Fig. 3c M 2 (w 3) at d 16,32 (pipeline check,
#              meaningless numbers)
#       small: a CPU-sized subset: T 64, 4 pairs, V 256 (not the paper's T 512 / 64 pairs / V 8192: at T 128
#              with 16 pairs full attention stays near chance for this budget), 64,000 train / 1,000 test
#              examples x 1 epoch (2,000 steps of batch 32), evaluation every 200 steps with Zoology's stop
#              at 0.99; heads 1; d 64,128; lr 1e-3,3e-3 (at 3e-3 alone full attention stayed at 0.23 on the
#              16-core Xeon, and attention solves Zoology's T 64 at 1e-3: issue 21's probe); 1 seed; BLA M
#              2,4,8,16 (expand_k 1); SWA w 4,8,16,32; GLA/GDN expand_k 0.5,1,2; GSA S 3,7,15,31; Fig. 3b
#              resolutions 1,1.5,2,3,4 at M 4, d 64; Fig. 3c M 4 (w 7) at d 32,64,128. 92 runs
#       paper: Table 2: d 32,64,128,256; heads 1,2; lr 1e-4,3e-4,1e-3,3e-3; expand_k 0.5,1,2 (BLA, GLA, GDN);
#              SWA log2 w in 3..8; GSA log2(S+1) in 3..7; BLA log2 M in 2..6 with P = 2(2M-1); the config's
#              examples, epochs and batch; 1 seed (the paper sweeps seeds but does not say how many: SEEDS=N
#              multiplies the count). Fig. 3b resolutions 1,1.5,2,3,4 at M 16, d 128, Fig. 3c M 16 (w 31)
#              at every d (M, d and the resolutions of Figs. 3b/3c are our choice: the paper does not give
#              them), both with heads 1 and expand_k 1. 1,088 runs per seed
#   DIMS="64 128" HEADS="1 2" LRS="1e-3 3e-3" SEEDS=N EXPAND_KS="0.5 1 2"   the Fig. 3a grid (EXPAND_KS is
#       GLA's and GDN's state-size parameter; BLA_EXPAND_KS, default EXPAND_KS at paper scale, 1 otherwise, BLA's)
#   BLA_MODES="4 8" SWA_WINDOWS="8 16" GSA_SLOTS="7 15"          the state-size parameters of Fig. 3a
#   RESOLUTIONS="1 2 4" RES_MODES=M RES_DIM=d                    Fig. 3b
#   WIN_MODES=M WIN_DIMS="32 64"                                 Fig. 3c (SWA window 2M-1)
#   MIXERS="bla swa gla gdn gsa attention"   only these rows of Fig. 3a (default all; Figs. 3b/3c need bla,
#       Fig. 3c also swa). Rows gla, gdn and gsa set the mixer option "conv": 4
#   SEQ_OUT=DIR      output folder (default runs/tasks/bla_mqar/$SCALE); runs in SEQ_OUT/runs, logs in SEQ_OUT/logs
#   JOBS=N       runs trained at the same time (default: tiny nproc, else 1); OMP_WAIT_POLICY=passive if > 1
#   THREADS=N    run.threads of every run (default max(1, nproc / JOBS))
#   BIN=DIR      where seqtrain is (default bin)
#   PROGRESS_EVERY=S   print the running trainings' progress every S seconds (default 60, 0 = off)
# Resumable: finished runs (RUN_DIR/eval/acc.json) are reused, interrupted ones resumed from their
# checkpoint; run the same command again after Ctrl-C. A run shared by two figures is trained once.
# Accuracy is the final test accuracy over the whole test split (RUN_DIR/eval/acc.json; with the cosine
# schedule to 0 the end of training). State = floats per sequence over all layers from `seqtrain --info`.
# Output in SEQ_OUT: bla_mqar_runs.csv (one row per run: id, sweep tags a/b/c, line, mixer, d_model, heads,
# expand_k, state_param, state_value, resolution, lr, wd (empty: the config's 0.01), seed, state_floats,
# accuracy); fig3a_pareto.md|csv|png
# (frontier per mixer, log2 state axis, and the smallest state reaching 0.5/0.9/0.99), fig3b_resolution.md|
# csv|png, fig3c_dim.md|csv|png; the Markdown also goes to stdout.
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')

source "$(dirname "${BASH_SOURCE[0]}")/lib/tasks.sh"  # the run queue, the state-size sweeps
parse_opts "$@"
sweep_mixers "bla swa gla gdn gsa attention"
setup runs/tasks/bla_mqar
CFG=configs/tasks/mqar/bla.json

case "$SCALE" in
    tiny)  dims="16"; heads="1"; lrs="3e-3"; seeds=1; eks="1"; beks="1"; modes="2 4"; wins="4 8"; slots="3 7"
           res="1 2"; resm=2; resd=16; winm=2; wind="16 32" ;;
    small) dims="64 128"; heads="1"; lrs="1e-3 3e-3"; seeds=1; eks="0.5 1 2"; beks="1"; modes="2 4 8 16"
           wins="4 8 16 32"; slots="3 7 15 31"; res="1 1.5 2 3 4"; resm=4; resd=64; winm=4; wind="32 64 128" ;;
    paper) dims="32 64 128 256"; heads="1 2"; lrs="1e-4 3e-4 1e-3 3e-3"; seeds=1; eks="0.5 1 2"; beks=""
           modes="4 8 16 32 64"; wins="8 16 32 64 128 256"; slots="7 15 31 63 127"; res="1 1.5 2 3 4"
           resm=16; resd=128; winm=16; wind="32 64 128 256" ;;
esac
DIMS=${DIMS:-$dims}; HEADS=${HEADS:-$heads}; LRS=${LRS:-$lrs}; SEEDS=${SEEDS:-$seeds}
EXPAND_KS=${EXPAND_KS:-$eks}; BLA_EXPAND_KS=${BLA_EXPAND_KS:-${beks:-$EXPAND_KS}}
BLA_MODES=${BLA_MODES:-$modes}; SWA_WINDOWS=${SWA_WINDOWS:-$wins}; GSA_SLOTS=${GSA_SLOTS:-$slots}
RESOLUTIONS=${RESOLUTIONS:-$res}; RES_MODES=${RES_MODES:-$resm}; RES_DIM=${RES_DIM:-$resd}
WIN_MODES=${WIN_MODES:-$winm}; WIN_DIMS=${WIN_DIMS:-$wind}
case "$SEEDS" in ''|*[!0-9]*|0) DIE_RC=2 die "SEEDS must be a positive integer (got '$SEEDS')" ;; esac
for v in RES_MODES WIN_MODES RES_DIM; do
    case "${!v}" in ''|*[!0-9]*|0) DIE_RC=2 die "$v must be a positive integer (got '${!v}')" ;; esac
done

scale_sets() {
    case "$SCALE" in
        tiny)  printf '%s\n' data.task.vocab=64 data.task.num_kv_pairs=4 data.task.train_examples=64 \
                   data.task.test_examples=32 train.batch_size=16 train.steps=4 train.seq_len=32 ;;
        small) printf '%s\n' data.task.vocab=256 data.task.num_kv_pairs=4 data.task.train_examples=64000 \
                   data.task.test_examples=1000 train.epochs=1 train.seq_len=64 ;;
    esac
}
T=$(sweep_seq_len) || exit 1

label_of() {
    case "$1" in
        bla) echo "BLA" ;; swa) echo "SWA" ;; gla) echo "GLA (conv 4)" ;; gdn) echo "GDN (conv 4)" ;;
        gsa) echo "GSA (conv 4)" ;; attention) echo "Attention (full)" ;;
    esac
}
# queue TAG MIXER D HEADS EXPAND_K PARAM VALUE RESOLUTION JSON: one configuration, every lr and seed
queue() {
    local base="${2}_d${3}_h${4}_e${5}_${6}${7}" win=0
    [ -n "$8" ] && base+="_r${8}"
    [ "$2" = swa ] && win=$7
    sweep_queue "$1" "$base" "$(label_of "$2")" "$2,$3,$4,$5,$6,$7,$8" "$win" "model.mixer=$9" "model.d_model=$3"
}
bla_js() { echo "{\"kind\":\"bla\",\"heads\":$1,\"modes\":$2,\"resolution\":$3,\"expand_k\":$4}"; }
swa_js() { echo "{\"kind\":\"attention\",\"heads\":$1,\"window\":$2}"; }

# Fig. 3a
for d in $DIMS; do for h in $HEADS; do
    if sweep_has bla; then for M in $BLA_MODES; do for ek in $BLA_EXPAND_KS; do
        queue a bla "$d" "$h" "$ek" M "$M" 2 "$(bla_js "$h" "$M" 2 "$ek")"; done; done; fi
    if sweep_has swa; then for w in $SWA_WINDOWS; do queue a swa "$d" "$h" 1 w "$w" "" "$(swa_js "$h" "$w")"; done; fi
    for m in gla gdn; do sweep_has "$m" || continue
        kind=gla; [ "$m" = gdn ] && kind=gated_deltanet
        for ek in $EXPAND_KS; do
            queue a "$m" "$d" "$h" "$ek" expand_k "$ek" "" "{\"kind\":\"$kind\",\"heads\":$h,\"expand_k\":$ek,\"conv\":4}"
        done
    done
    if sweep_has gsa; then for S in $GSA_SLOTS; do
        queue a gsa "$d" "$h" 1 S "$S" "" "{\"kind\":\"gsa\",\"heads\":$h,\"num_slots\":$S,\"conv\":4}"; done; fi
    if sweep_has attention; then queue a attention "$d" "$h" 1 w "$T" "" "$(swa_js "$h" 0)"; fi
done; done
# Fig. 3b: resolution sweep
if sweep_has bla; then for r in $RESOLUTIONS; do
    queue b bla "$RES_DIM" 1 1 M "$RES_MODES" "$r" "$(bla_js 1 "$RES_MODES" "$r" 1)"; done; fi
# Fig. 3c: matched window 2M-1 as d grows
if sweep_has bla; then for d in $WIN_DIMS; do
    queue c bla "$d" 1 1 M "$WIN_MODES" 2 "$(bla_js 1 "$WIN_MODES" 2 1)"
    if sweep_has swa; then queue c swa "$d" 1 1 w $((2 * WIN_MODES - 1)) "" "$(swa_js 1 $((2 * WIN_MODES - 1)))"; fi
done; fi
[ "${#JOB_IDS[@]}" -gt 0 ] || DIE_RC=2 die "nothing to run (MIXERS='$MIXERS')"
say "SCALE=$SCALE, T=$T: ${#JOB_IDS[@]} runs (mixers: $MIXERS; d: $DIMS; heads: $HEADS; lr: $LRS; $SEEDS seed(s)), $NJOBS at a time, $THREADS threads each; output in $OUTD"
run_jobs; rc=$?
exit_if_interrupted

# the per-run CSV (a run that failed has an empty accuracy; its state is still given when --info works)
runs="$OUTD/bla_mqar_runs.csv"
sweep_csv "$runs" "mixer,d_model,heads,expand_k,state_param,state_value,resolution"
commit=$(commit_of)
CMDLINE=$(cmdline MIXERS DIMS HEADS LRS SEEDS EXPAND_KS BLA_EXPAND_KS BLA_MODES SWA_WINDOWS \
    GSA_SLOTS RESOLUTIONS RES_MODES RES_DIM WIN_MODES WIN_DIMS)
where="MQAR T = $T, SCALE=$SCALE$([ "$SCALE" = paper ] || echo ", not the paper's T 512 / 64 pairs / V 8192 budget")"
prov="Runs: \`$CMDLINE\` (commit $commit); every run in $(basename "$runs")."
PY=(python3 "$ROOT/scripts/state_tables.py" "$runs")
"${PY[@]}" "$OUTD/fig3a_pareto" --x state_floats --tag a --frontier --logx --xlabel "state (floats)" \
    --title "Fig. 3a: test accuracy vs decoding state size, Pareto frontier per mixer ($where)" \
    --ptitle "Fig. 3a: MQAR accuracy vs state, Pareto frontier (T $T, SCALE=$SCALE)" \
    --note "Best over lr x seed x d x heads x expand_k x the state-size parameter; a point is kept when it beats every smaller state of its mixer. $prov" || rc=1
echo
if sweep_has bla; then
    "${PY[@]}" "$OUTD/fig3b_resolution" --x resolution --tag b --wide --xlabel "token resolution P/(2M-1)" \
        --title "Fig. 3b: BLA accuracy vs token resolution (M $RES_MODES, d $RES_DIM, 1 head; $where)" \
        --ptitle "Fig. 3b: BLA vs token resolution (M $RES_MODES, d $RES_DIM, T $T, SCALE=$SCALE)" \
        --note "Best over lr x seed. $prov" || rc=1
    echo
    "${PY[@]}" "$OUTD/fig3c_dim" --x d_model --tag c --wide --logx --xlabel "d_model" \
        --title "Fig. 3c: BLA (M $WIN_MODES, resolution 2) vs SWA (window $((2 * WIN_MODES - 1))) as d grows ($where)" \
        --ptitle "Fig. 3c: BLA (M $WIN_MODES) vs SWA (w $((2 * WIN_MODES - 1))) by d (T $T, SCALE=$SCALE)" \
        --note "Best over lr x seed, 1 head. $prov" || rc=1
fi
exit "$rc"
