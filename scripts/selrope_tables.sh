#!/usr/bin/env bash
# The Selective RoPE paper's experiments (§4 and App. B) as tables, each part run by the
# project's own table script with the paper's rows and settings (the runs, their resuming and the tables are
# those scripts'; this one only chooses what they run):
#   mqar   MQAR in the Zoology setting (Fig. 7): GLA without position, with RoPE (the complex forget gate) and
#          with Selective RoPE; attention (RoPE) as the positive control          -> scripts/mqar_sweep.sh
#   mad    the MAD table rows (§4.1, App. B.2.1): GLA with NoPE, RoPE and Selective RoPE, Gated DeltaNet ±
#          Selective RoPE in the paper's MAD model (d 128, 8 heads, [mixer, swiglu] x 2; GLA expand_k 1,
#          Selective RoPE rank 32); attention (RoPE) as the reference row             -> scripts/mad_table.sh
#   state  parity trained at one length and scored at longer ones (Fig. 8, the DeltaProduct / Grazzi et al.
#          setup of App. B.2.2: lr 1e-3, wd 1e-6, cosine) and the A5 word problem (the permutation
#          composition task seqtrain has; the paper runs A3 with a 2-layer DeltaNet, which seqtrain lacks):
#          GLA (± RoPE, + Selective RoPE), GDN ± Selective RoPE, FoX ± Selective RoPE, one softmax attention
#          layer with RoPE or with Selective RoPE (the paper's 1-layer Transformer; parity only), and GDN with
#          negative eigenvalues (β ∈ (0, 2), which solves parity) as the positive control
#                                                                                  -> scripts/state_tracking.sh
#   lm     perplexity by context length on WikiText-2 for GLA / GDN / FoX ± Selective RoPE (§4.3 at CPU size;
#          configs/lm/selrope/*_370m.json hold the paper's 370M recipe)            -> scripts/selrope_lm.sh
#
#   scripts/selrope_tables.sh [PART ...] [--set KEY=VALUE ...] [--dry-run]
#
# PART: mqar, mad, state, lm (default all four, in that order). --set values go to every run of every part
# named; --dry-run lists the runs still to do and trains nothing.
# Settings (environment):
#   SCALE=tiny|small|paper   (default small)
#       tiny:  every part at its script's tiny scale (pipeline check, meaningless numbers): MQAR d 16 at
#              lr 1e-3 and 1e-2, MAD all six tasks, state parity train 8 / A5 length 8 with 1 layer and 1
#              seed (parity also the 1-layer Selective RoPE attention), LM 4 steps of a d 32 model
#       small: CPU-sized (one run at a time on 1 thread of a shared 2-core Xeon: MQAR, MAD and state about
#              an hour together, LM about 15 minutes a row):
#              MQAR Zoology T 64, 4 pairs, V 8192, d 64, lr 1e-3 only, 1,250 steps of batch 64, rows
#              attention, GLA, GLA + Selective RoPE; MAD at mad_table.sh's small scale (640 examples x 10
#              epochs), lr 1e-3, tasks ICR and selective copy, rows GLA ± Selective RoPE; parity trained
#              at length 32 and scored at 32, 64, 128 (d 64, 2 layers, 20,000 examples x 2 epochs), rows GLA,
#              GDN and FoX, each ± Selective RoPE, and GDN with negative eigenvalues; A5 (at
#              length 16, 1-2 layers, 1 seed) only with STATE_PARTS="a5 parity"; LM: the six rows on
#              configs/lm/cpu (d 128, 4 layers, T 256, 1 epoch of WikiText-2: 690 steps), scored at L 256-2048
#       paper: MQAR Zoology T 64-512, d 64-512, the paper's lr grid (8 values evenly spaced from 1e-3 to
#              1e-2, App. B.2.3); MAD the full MAD protocol (3 lr x 2 wd) over all 66 task settings of MAD's
#              benchmark (VARIANTS=all: each task's difficulty variants, App. B.2.1; a cell the mean over
#              a task's settings); parity by App. B.2.2 (2,000,000 training sequences of length 128, 100
#              epochs of batch 4096, lr 1e-3, wd 1e-6, cosine, scored at 128-512 on 500,000 sequences, seeds
#              555 666 777 888 999, each cell their mean) and A5 length 128 as state_tracking.sh's paper
#              scale; LM the 370M configs (35B tokens; the data there is WikiText-2: FineWeb and the Mistral
#              tokenizer are not bundled)
#       Where the default (small) departs from the paper: MAD at the baseline settings only (no variants),
#              640 examples x 10 epochs, lr 1e-3, two tasks, GLA ± Selective RoPE; parity 20,000 examples x 2
#              epochs of batch 64 at length 32, one seed (the config's), no 1-layer attention rows.
#              SCALE=paper selects the paper's protocol for every part
#   MQAR_MIXERS, MQAR_LRS, MQAR_DIMS   override the MQAR rows (ids of mixer_rows in scripts/lib/tasks.sh), lr grid, widths
#   MAD_ROWS=a,b MAD_TASKS=a,b MAD_LRS="a b" MAD_VARIANTS=base|all   override the MAD rows (ids of
#                 scripts/mad_table.sh), tasks, lrs, task settings (paper all, else base)
#   STATE_MIXERS, STATE_PARTS="a5 parity", PARITY_SEEDS="555 666"   override the state-tracking rows, tables
#                 and parity seeds (run.seed values)
#   LM_ROWS=a,b   only these LM rows (ids: gla gla_selrope gdn gdn_selrope fox fox_selrope)
#   SEQ_OUT=DIR   output folder (default runs/selrope/$SCALE); part P in SEQ_OUT/P (its runs, logs and tables)
#   JOBS, THREADS, BIN   passed to every part's script (default: tiny nproc jobs, else 1)
# Resumable: every part's script reuses finished runs and resumes interrupted ones; run the same command
# again. Tables (Markdown + CSV, also on stdout): SEQ_OUT/mqar/mqar_zoology_T<T>.md|csv,
# SEQ_OUT/mad/mad_table.md|csv, SEQ_OUT/state/parity.md|csv and a5.md|csv, SEQ_OUT/lm/selrope_lm.md|csv.
# Exit status: 0 every part finished, 1 some run failed, 2 bad usage.
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')
source "$(dirname "${BASH_SOURCE[0]}")/lib/runq.sh"  # say, die, the options and SCALE

parse_opts --args "$@"
for p in "${ARGS[@]+"${ARGS[@]}"}"; do
    case "$p" in mqar|mad|state|lm) ;; *) echo "$USAGE" >&2; DIE_RC=2 die "unknown argument '$p' (parts: mqar mad state lm)" ;; esac
done
PARTS=("${ARGS[@]+"${ARGS[@]}"}"); SETS=(); DRY=()
[ "${#PARTS[@]}" -gt 0 ] || PARTS=(mqar mad state lm)
for x in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do SETS+=(--set "$x"); done
[ "$DRY_RUN" = 0 ] || DRY=(--dry-run)
check_scale
if [ -n "${SEQ_OUT:-}" ]; then OUTD=$(abspath "$SEQ_OUT"); else OUTD="$ROOT/runs/selrope/$SCALE"; fi
export SCALE

# the paper's MQAR grid: 8 learning rates evenly spaced from 1e-3 to 1e-2 (App. B.2.3)
PAPER_LRS="1e-3 2.29e-3 3.57e-3 4.86e-3 6.14e-3 7.43e-3 8.71e-3 1e-2"
case "$SCALE" in
    tiny)  mq_m="attn_rope gla gla_rope gla_selrope"; mq_lr="1e-3 1e-2"; mq_d=16
           mad_rows=attn_rope,gla,gla_selrope,gdn,gdn_selrope; mad_tasks=""; mad_lrs=""; mad_var=base
           st_m="gla gla_selrope gated_deltanet_neg attn_fox_selrope attn_selrope_1l"; st_parts="a5 parity"; st=(L_MAX=1 SEEDS=1)
           par_seeds="" ;;
    small) mq_m="attn_rope gla gla_selrope"; mq_lr="1e-3"; mq_d=64
           mad_rows=gla,gla_selrope; mad_tasks=icr,selective_copy; mad_lrs="1e-3"; mad_var=base; par_seeds=""
           st_m="gla gla_selrope gated_deltanet gated_deltanet_selrope gated_deltanet_neg attn_fox attn_fox_selrope"
           st_parts="parity"; st=(TRAIN_LEN=32 "TEST_LENS=32 64 128" A5_LENS=16 L_MAX=2 SEEDS=1) ;;
    paper) mq_m="attn_rope gla gla_rope gla_selrope"; mq_lr=$PAPER_LRS; mq_d=""
           mad_rows=attn_none,attn_rope,gla,gla_rope,gla_selrope,gdn,gdn_selrope; mad_tasks=""; mad_lrs=""; mad_var=all
           st_m="gla gla_rope gla_selrope gated_deltanet gated_deltanet_selrope gated_deltanet_neg attn_fox attn_fox_selrope"
           st_m+=" attn_rope_1l attn_selrope_1l"; st_parts="parity a5"; st=(A5_LENS=128); par_seeds="555 666 777 888 999" ;;
esac

# the state-tracking runs take the paper's optimiser (App. B.2.2: lr 1e-3, wd 1e-6, cosine; the configs' own
# schedule is cosine with 10% warmup)
STATE_SETS=(--set optim.lr=1e-3 --set optim.weight_decay=1e-6)
# and at paper scale parity's budget (App. B.2.2: 2,000,000 sequences, 100 epochs of 4096, 500,000 test sequences)
PARITY_SETS=()
[ "$SCALE" = paper ] && PARITY_SETS=(--set data.task.train_examples=2000000 --set data.task.test_examples=500000
                                    --set train.batch_size=4096 --set train.epochs=100)
rc=0
part_run() {  # part_run NAME SCRIPT ENV... -- ARG...: run one part's script with the environment ENV...
    local name=$1 script=$2 r env=(); shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    say "part $name: ${env[*]+${env[*]}} scripts/$script $* ${SETS[*]+${SETS[*]}} ${DRY[*]+${DRY[*]}}"
    env "${env[@]+"${env[@]}"}" SEQ_OUT="$OUTD/$name" "$ROOT/scripts/$script" "$@" "${SETS[@]+"${SETS[@]}"}" \
        "${DRY[@]+"${DRY[@]}"}"; r=$?
    [ "$r" = 2 ] && exit 2
    [ "$r" = 0 ] || { say "part $name: exit $r"; rc=1; }
    echo
}
# VAR=value when value is not empty (the part's script keeps its own default otherwise)
opt() { [ -n "$2" ] && printf '%s\n' "$1=$2"; }
for p in "${PARTS[@]}"; do
    e=()
    case "$p" in
        mqar)  while IFS= read -r x; do e+=("$x"); done < <(opt DIMS "${MQAR_DIMS:-$mq_d}")
               part_run mqar mqar_sweep.sh SETTING=zoology MIXERS="${MQAR_MIXERS:-$mq_m}" LRS="${MQAR_LRS:-$mq_lr}" \
                   "${e[@]+"${e[@]}"}" -- ;;
        mad)   while IFS= read -r x; do e+=("$x"); done < <(opt TASKS "${MAD_TASKS:-$mad_tasks}"; opt LRS "${MAD_LRS:-$mad_lrs}")
               part_run mad mad_table.sh PROTOCOL=mad ROWS="${MAD_ROWS:-$mad_rows}" VARIANTS="${MAD_VARIANTS:-$mad_var}" \
                   "${e[@]+"${e[@]}"}" -- ;;
        state) for sp in ${STATE_PARTS:-$st_parts}; do  # one call per table: parity has its own budget and seeds
                   if [ "$sp" = parity ]; then
                       part_run state state_tracking.sh MIXERS="${STATE_MIXERS:-$st_m}" PARTS=parity \
                           PARITY_SEEDS="${PARITY_SEEDS:-$par_seeds}" "${st[@]+"${st[@]}"}" -- "${STATE_SETS[@]}" \
                           "${PARITY_SETS[@]+"${PARITY_SETS[@]}"}"
                   else
                       part_run state state_tracking.sh MIXERS="${STATE_MIXERS:-$st_m}" PARTS="$sp" \
                           "${st[@]+"${st[@]}"}" -- "${STATE_SETS[@]}"
                   fi
               done ;;
        lm)    while IFS= read -r x; do e+=("$x"); done < <(opt ROWS "${LM_ROWS:-}")
               part_run lm selrope_lm.sh "${e[@]+"${e[@]}"}" -- ;;
    esac
done
exit "$rc"
