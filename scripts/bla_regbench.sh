#!/usr/bin/env bash
# The BLA paper's RegBench experiment (§4.2, Fig. 4 and Table 3 of App. D.2) on
# configs/tasks/regbench/bla.json: in-context learning of regular languages, 5,000 training DFAs (one per
# training example: data.task.train_examples = 5000, each example a new random DFA from the train split's
# stream), 1,000 test examples (held-out DFAs), T 512, d 128, 4 layers, 4 heads, batch 32, 60 epochs, AdamW,
# cosine to 0 after 2,000 warmup steps. Test accuracy against decoding state size, best over
# lr x wd x seed, one line per mixer, no short conv anywhere: BLA with decay at token resolutions
# P/(2M-1) in RESOLUTIONS, SWA (attention with a window), GLA (state: expand_k), GDN (expand_v), GSA (slots)
# and full attention.
#
#   scripts/bla_regbench.sh [--set KEY=VALUE ...] [--dry-run]
#
# Settings (environment):
#   SCALE=tiny|small|paper   (default small)
#       tiny:  T 32, 64 examples, 4 steps of 16; d 16, 2 layers, 2 heads; BLA M 2,4 at resolutions 1,2; SWA w
#              4,8; GSA S 3; GLA/GDN expansion 1; lr 3e-3 (pipeline check, meaningless numbers)
#       small: a CPU-sized subset: T 128 (not 512), d 64, 4 layers, 4 heads, the 5,000 DFAs x 4 epochs
#              (625 steps of batch 32), warmup 60 steps, 500 test examples; lr 1e-3,3e-3; wd 0.01; 1 seed;
#              BLA M 4,8,16 at resolutions 1,2 (slots 7-31: BLA's step time grows with them, M 32 with decay
#              costs 13x attention's at this size); SWA w 8,16,32,64; GSA S 7,15,31; GLA expand_k 1,2,4; GDN
#              expand_v 1,2,4; full attention. 40 runs
#       paper: Table 3: lr 1e-4,3e-4,1e-3; wd 0,0.01,0.5; 3 seeds; SWA log2 w in 3..6; BLA log2 M in 3..6
#              with P = 1,2,4 x (2M-1); GSA S 15,31,63,127 (the table gives the range [15..127]); GLA
#              expand_k 1,2,4,8; GDN expand_v 1,2,4,8 (the paper's text; Table 3 stops at GLA); full
#              attention. 29 configurations x 27 = 783 runs
#   LRS="1e-3" WDS="0 0.01" SEEDS=N HEADS=N DIM=N     the grid and the model (HEADS must divide every width)
#   BLA_MODES="8 16" RESOLUTIONS="1 2" SWA_WINDOWS="8 16" GSA_SLOTS="15 31" GLA_EXPAND_KS="1 2"
#   GDN_EXPAND_VS="1 2"                                the state-size parameters
#   MIXERS="bla swa gla gdn gsa attention"   only these rows (default all)
#   SEQ_OUT=DIR      output folder (default runs/tasks/bla_regbench/$SCALE); runs in SEQ_OUT/runs, logs in SEQ_OUT/logs
#   JOBS=N       runs trained at the same time (default: tiny nproc, else 1); OMP_WAIT_POLICY=passive if > 1
#   THREADS=N    run.threads of every run (default max(1, nproc / JOBS))
#   BIN=DIR      where seqtrain is (default bin)
#   PROGRESS_EVERY=S   print the running trainings' progress every S seconds (default 60, 0 = off)
# Resumable: finished runs (RUN_DIR/eval/acc.json) are reused, interrupted ones resumed from their
# checkpoint; run the same command again after Ctrl-C.
# Accuracy is the final test accuracy over the whole test split (RUN_DIR/eval/acc.json): the fraction of
# next-token predictions equal to the generated next token. (The RegBench paper scores whether the
# prediction is a valid continuation under the DFA, which is at least this; seqtrain does not report that
# yet.) State = floats per sequence over all layers from `seqtrain --info` (SWA: min(w, T) positions).
# Output in SEQ_OUT: bla_regbench_runs.csv (one row per run: id, sweep, line, mixer, state_param,
# state_value, resolution, lr, wd, seed, state_floats, accuracy) and fig4_state.md|csv|png (best accuracy
# per line and state size, log2 state axis); the Markdown also goes to stdout.
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')

source "$(dirname "${BASH_SOURCE[0]}")/lib/tasks.sh"  # the run queue, the state-size sweeps
parse_opts "$@"
sweep_mixers "bla swa gla gdn gsa attention"
setup runs/tasks/bla_regbench
CFG=configs/tasks/regbench/bla.json

case "$SCALE" in
    tiny)  lrs="3e-3"; wds="0.01"; seeds=1; heads=2; dim=16; modes="2 4"; res="1 2"; wins="4 8"; slots="3"
           geks="1"; gevs="1" ;;
    small) lrs="1e-3 3e-3"; wds="0.01"; seeds=1; heads=4; dim=64; modes="4 8 16"; res="1 2"; wins="8 16 32 64"
           slots="7 15 31"; geks="1 2 4"; gevs="1 2 4" ;;
    paper) lrs="1e-4 3e-4 1e-3"; wds="0 0.01 0.5"; seeds=3; heads=4; dim=128; modes="8 16 32 64"; res="1 2 4"
           wins="8 16 32 64"; slots="15 31 63 127"; geks="1 2 4 8"; gevs="1 2 4 8" ;;
esac
LRS=${LRS:-$lrs}; WDS=${WDS:-$wds}; SEEDS=${SEEDS:-$seeds}; HEADS=${HEADS:-$heads}; DIM=${DIM:-$dim}
BLA_MODES=${BLA_MODES:-$modes}; RESOLUTIONS=${RESOLUTIONS:-$res}; SWA_WINDOWS=${SWA_WINDOWS:-$wins}
GSA_SLOTS=${GSA_SLOTS:-$slots}; GLA_EXPAND_KS=${GLA_EXPAND_KS:-$geks}; GDN_EXPAND_VS=${GDN_EXPAND_VS:-$gevs}
for v in SEEDS HEADS DIM; do
    case "${!v}" in ''|*[!0-9]*|0) DIE_RC=2 die "$v must be a positive integer (got '${!v}')" ;; esac
done
[ -n "$WDS" ] || DIE_RC=2 die "WDS must list at least one weight decay"

scale_sets() {
    echo "model.d_model=$DIM"
    case "$SCALE" in
        tiny)  printf '%s\n' model.n_layers=2 data.task.train_examples=64 data.task.test_examples=16 \
                   train.batch_size=16 train.steps=4 train.seq_len=32 schedule.warmup_steps=1 ;;
        small) printf '%s\n' data.task.test_examples=500 train.epochs=4 train.seq_len=128 schedule.warmup_steps=60 ;;
    esac
}
T=$(sweep_seq_len) || exit 1

# queue MIXER LABEL PARAM VALUE RESOLUTION WINDOW JSON: one configuration, every lr, wd and seed
queue() {
    local base="${1}_${3}${4}"; [ -n "$5" ] && base+="_r${5}"
    sweep_queue fig4 "$base" "$2" "$1,$3,$4,$5" "$6" "model.mixer=$7"
}
H=$HEADS
if sweep_has bla; then for r in $RESOLUTIONS; do for M in $BLA_MODES; do
    queue bla "BLA (decay, resolution $r)" M "$M" "$r" 0 \
        "{\"kind\":\"bla\",\"heads\":$H,\"modes\":$M,\"resolution\":$r,\"decay\":true}"
done; done; fi
if sweep_has swa; then for w in $SWA_WINDOWS; do
    queue swa SWA w "$w" "" "$w" "{\"kind\":\"attention\",\"heads\":$H,\"window\":$w}"; done; fi
if sweep_has gla; then for e in $GLA_EXPAND_KS; do
    queue gla GLA expand_k "$e" "" 0 "{\"kind\":\"gla\",\"heads\":$H,\"expand_k\":$e}"; done; fi
if sweep_has gdn; then for e in $GDN_EXPAND_VS; do
    queue gdn GDN expand_v "$e" "" 0 "{\"kind\":\"gated_deltanet\",\"heads\":$H,\"expand_v\":$e,\"conv\":0}"; done; fi
if sweep_has gsa; then for S in $GSA_SLOTS; do
    queue gsa GSA S "$S" "" 0 "{\"kind\":\"gsa\",\"heads\":$H,\"num_slots\":$S}"; done; fi
if sweep_has attention; then queue attention "Attention (full)" w "$T" "" 0 "{\"kind\":\"attention\",\"heads\":$H,\"window\":0}"; fi
say "SCALE=$SCALE, T=$T, d $DIM, $H heads: ${#JOB_IDS[@]} runs (mixers: $MIXERS; lr: $LRS; wd: $WDS; $SEEDS seed(s)), $NJOBS at a time, $THREADS threads each; output in $OUTD"
run_jobs; rc=$?
exit_if_interrupted

runs="$OUTD/bla_regbench_runs.csv"
sweep_csv "$runs" "mixer,state_param,state_value,resolution"
commit=$(commit_of)
CMDLINE=$(cmdline MIXERS LRS WDS SEEDS HEADS DIM BLA_MODES RESOLUTIONS SWA_WINDOWS \
    GSA_SLOTS GLA_EXPAND_KS GDN_EXPAND_VS)
where="RegBench T = $T, d $DIM, SCALE=$SCALE$([ "$SCALE" = paper ] || echo ", not the paper's T 512 / d 128 / 60-epoch budget")"
python3 "$ROOT/scripts/state_tables.py" "$runs" "$OUTD/fig4_state" --x state_floats --tag fig4 --logx \
    --xlabel "state (floats)" --title "Fig. 4: test accuracy vs decoding state size ($where)" \
    --ptitle "Fig. 4: RegBench accuracy vs state (T $T, d $DIM, SCALE=$SCALE)" \
    --note "Best over lr x wd x seed for each configuration; no short conv. Runs: \`$CMDLINE\` (commit $commit); every run in $(basename "$runs")." || rc=1
exit "$rc"
