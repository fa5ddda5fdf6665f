#!/usr/bin/env bash
# The MAD synthetic-LM suite (Poli et al. 2024; KLA paper Fig. 5a) as one table: rows = sequence mixers,
# columns = the six MAD tasks and their average. Two protocols (PROTOCOL=mad|kla): MAD-Lab's (each cell the
# best test accuracy over the lr x wd grid, as MAD reports it; configs/tasks/mad/<task>.json) and the KLA
# paper's own (Table 10, App. F.1.2 / G.3: each cell the mean over 5 seeds at lr 1e-3;
# configs/tasks/mad/kla_protocol/<task>.json). Every (mixer, task, lr, wd[, seed]) is one seqtrain run in
# $SEQ_OUT/runs/<mixer>__<task>__lr<lr>_wd<wd>[_s<seed>]/ whose final accuracy is RUN_DIR/eval/acc.json.
# Resumable: finished runs are reused, interrupted ones resumed (run the same command again).
# The run queue, locking, resuming and settings come from scripts/lib/runq.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib/runq.sh"
# SCALE=medium's rows when ROWS is not given: the positive control (attention) and the KLA paper's Fig. 5a /
# Table 6 mixers that fit its half hour (kla_plus costs 10x kla)
MAD_MEDIUM_ROWS=attn_rope,kla,kla_p0,gla,gdn

USAGE="usage: scripts/mad_table.sh [--set KEY=VALUE ...] [--dry-run]

Trains every (mixer, task, lr, wd) run of the MAD table that is not finished yet, then prints the table
(Markdown on stdout, and SEQ_OUT/mad_table.md, SEQ_OUT/mad_table.csv).

Settings (environment):
  PROTOCOL=mad|kla        (default mad)
      mad: MAD-Lab's protocol (Poli et al. 2024): configs/tasks/mad/*.json, 2 x [mixer, SwiGLU], best over an
           lr x wd grid, one seed (the scales below)
      kla: the KLA paper's own protocol (Table 10, App. F.1.2 / G.3): configs/tasks/mad/kla_protocol/*.json:
           ONE block (model.block auto: fused for kla, [mixer, SwiGLU] for the others), batch 172, AdamW lr 1e-3
           with no schedule, wd 0, clip 5, up to 750 epochs with early stopping at patience 70 epochs
           (train.patience on the test loss, evaluated about once an epoch: the paper names no metric), the
           compression decoder [240, 120] (model.ae_width1/2), the mean over seeds 1-5 (run.seed; the data
           seed is fixed); a run is scored on its last model.
           SCALE paper: as the configs, 5 seeds; small: 640 training examples (memorization its 256),
           38 epochs (1/20 of 750; fewer than the patience, so no evaluation or early stop), 2 seeds; tiny:
           as PROTOCOL=mad's tiny, 2 seeds. Grid: lr {1e-3} x wd {0}
  SCALE=tiny|small|medium|paper  (default small)  (the values below are PROTOCOL=mad's)
      paper: the MAD protocol: configs/tasks/mad/*.json as they are (d 128, 2 x [mixer, swiglu], 12,800 train /
             1,280 test examples, batch 128, 200 epochs, cosine to 1e-6), grid lr {1e-4, 5e-4, 1e-3} x wd {0, 0.1}
      small: CPU-sized: 1/20 of the training examples (640; memorization keeps its 256) and 1/20 of the
             epochs (10), 1,280 test examples, the paper model; grid lr {5e-4, 1e-3} x wd {0}
      medium: a table that separates mixers in about half an hour on 16 cores (PROTOCOL=mad only): the paper
             model and data, batch 32, lr 2e-3 (100 warmup steps, cosine to 1e-6), wd 0; steps: ICR, noisy and
             fuzzy ICR 3,200 (8 epochs), selective copy 1,200 (3), memorization 800 (100 epochs of 256),
             compression 1,600 (4); an evaluation on 256 test examples every 200 steps, stopping at 0.99
             (Zoology's early stop); scored on the 1,280 test examples. Rows by default: $MAD_MEDIUM_ROWS.
             JOBS defaults to nproc / 2 (THREADS 2)
      tiny:  pipeline check (CI): d 32, batch 4, 2 steps, 8 train / 8 test examples, sequences of at most
             64 tokens; grid lr {1e-3} x wd {0}; the numbers mean nothing
  ROWS=id,id,...          only these mixer rows (default all): $(printf '%s ' attn_none attn_rope attn_alibi attn_fox rfa sc_rfa kla kla_p0 kla_plus gla gla_rope gla_selrope gdn gdn_selrope mamba mlstm)
  TASKS=t,t,...           only these task columns (default all six)
  VARIANTS=base|all       (PROTOCOL=mad; default base) base: each task at its baseline setting (the configs);
                          all: MAD's benchmark, each task also at its difficulty variants, one change at a
                          time (MAD-Lab's configs/tasks/*.yml, as the Selective RoPE paper's App. B.2.1 runs it:
                          66 task settings): vocabulary (ICR, fuzzy ICR, selective copy, compression 32, 64, 128;
                          noisy ICR 48, 80, 144; memorization 512 to 8192), sequence length (ICR, noisy and fuzzy
                          ICR 256, 512, 1024; selective copy 512, 1024; compression 64, 128, 256), training
                          examples (6400, 3200, 1600, 800; not memorization), noise fraction (noisy ICR 0.4, 0.6,
                          0.8), tokens to copy (selective copy 32, 64, 96). A cell is then the mean over the task's
                          settings of the best over the grid, as MAD scores a task
  LRS='a b' WDS='a b'     override the scale's lr / wd grid
  SEEDS=N                 seeds 1..N (PROTOCOL=kla, as SEEDS of the other task sweeps; PROTOCOL=mad trains one run
                          per grid point with the config's seed)
  SEQ_OUT=DIR                 output folder (default runs/mad_table/\$SCALE, with PROTOCOL=kla runs/mad_table/kla_\$SCALE)
  JOBS=N, THREADS=N, BIN=DIR, PROGRESS_EVERY=S   as in scripts/lib/runq.sh (OMP_WAIT_POLICY=passive when JOBS>1)
Options:
  --set KEY=VALUE         extra override for every run (after the row's)
  --dry-run               list the seqtrain commands of the runs still to do; train nothing

Compression trains MAD's encoder + MLP-decoder backbone (configs/tasks/mad/compression.json: model.head
autoencoder): the sequence is encoded by the same blocks, and every token is reconstructed from the last
position's vector."

# --- the rows: id | label | mixer JSON (merged over base.json's {"kind": "attention", "heads": 8}; a mixer
# of another kind replaces it) | further --set values separated by ';'. The kla rows follow the KLA paper's
# MAD setting (App. G.3: d_state 8, expand 1, so a state of 2 x 128 x 8 = 2048 floats per layer) inside
# MAD's [mixer, swiglu] x 2 scaffold like every row; kla_p0 is its Table 6 ablation (process noise 0),
# kla_plus its probabilistic decoding KLA+ (App. G.2: 10 Monte Carlo samples; 10x the compute of kla).
# The mamba and mlstm rows are Fig. 5a's other two baselines at App. G.3's Table 11 (d_model 128: Mamba d_state 16,
# expand 1, a state of 128 x 16 = 2048; mLSTM 16 heads, proj_factor 2, whose matrix memory is 16 x 16 x 16 = 4096
# floats here, not the table's 2048: H and proj_factor as given do not give the table's count).
# The rfa rows take the RFA configs' optimizer group of the SDE parameters (configs/rfa/m1_rfa.json).
MAD_RFA_GROUPS='optim.groups=[{"match": "blocks.*.mixer.sde_*", "lr": 5e-4, "beta1": 0.0, "eps": 1e-7, "clip": 1e-4}]'
# The gla and gdn rows are the Selective RoPE paper's MAD setting (docs/mixers.md, Selective RoPE: 8 heads,
# GLA expand_k = expand_v = 1, gate normaliser 16, gate rank 16; Selective RoPE of rank 32, conv without
# activation, θ 500000, temp_max 1: the option's defaults otherwise); GDN keeps its defaults but for 8 heads.
MAD_GLA='{"kind": "gla", "heads": 8, "expand_k": 1, "expand_v": 1, "gate_normalizer": 16, "gate_rank": 16'
MAD_SELROPE='"selective_rope": {"enabled": true, "phi_proj_rank": 32}'
MAD_MIXERS=(
    'attn_none|Attention (no PE)|{"kind": "attention", "pos": "none"}|'
    'attn_rope|Attention (RoPE)|{"kind": "attention", "pos": "rope"}|'
    'attn_alibi|Attention (ALiBi)|{"kind": "attention", "pos": "alibi"}|'
    'attn_fox|Attention (FoX)|{"kind": "attention", "pos": "fox"}|'
    "rfa|RFA|{\"kind\": \"rfa\"}|$MAD_RFA_GROUPS"
    "sc_rfa|SC-RFA|{\"kind\": \"rfa\", \"spectral_coupling\": true, \"damping\": 0.05}|$MAD_RFA_GROUPS"
    'kla|KLA|{"kind": "kla", "d_state": 8}|'
    'kla_p0|KLA (p = 0)|{"kind": "kla", "d_state": 8, "process_noise": false}|'
    'kla_plus|KLA+|{"kind": "kla", "d_state": 8}|model.mc_samples=10'
    "gla|GLA|$MAD_GLA}|"
    "gla_rope|GLA + RoPE|$MAD_GLA, \"rotate\": true}|"
    "gla_selrope|GLA + Selective RoPE|$MAD_GLA, $MAD_SELROPE}|"
    'gdn|Gated DeltaNet|{"kind": "gated_deltanet", "heads": 8}|'
    "gdn_selrope|Gated DeltaNet + Selective RoPE|{\"kind\": \"gated_deltanet\", \"heads\": 8, $MAD_SELROPE}|"
    'mamba|Mamba|{"kind": "mamba", "d_state": 16, "expand": 1}|'
    'mlstm|mLSTM|{"kind": "mlstm", "heads": 16, "proj_factor": 2}|'
)
# --- the columns: task | label
MAD_TASKS=(
    'icr|ICR'
    'noisy_icr|Noisy ICR'
    'fuzzy_icr|Fuzzy ICR'
    'selective_copy|Sel. Copy'
    'memorization|Memorization'
    'compression|Compression'
)

parse_opts "$@"
SCALE=${SCALE:-small}
PROTOCOL=${PROTOCOL:-mad}
case "$PROTOCOL" in mad|kla) ;; *) DIE_RC=2 die "PROTOCOL must be mad or kla (got '$PROTOCOL')" ;; esac
if [ "$SCALE" = medium ]; then
    [ "$PROTOCOL" = mad ] || DIE_RC=2 die "SCALE=medium is PROTOCOL=mad's (no budget was probed for PROTOCOL=kla)"
    ROWS=${ROWS:-$MAD_MEDIUM_ROWS}
fi
[ -n "${SEQ_OUT:-}" ] || [ "$PROTOCOL" != kla ] || SEQ_OUT="$ROOT/runs/mad_table/kla_$SCALE"
setup runs/mad_table "tiny small medium paper" 2  # medium: 2 threads a run
if [ "$PROTOCOL" = kla ]; then
    # Table 10: lr 1e-3, wd 0, no grid; the mean over seeds (G.1: 5 seeds)
    MAD_LRS=${LRS:-"1e-3"}; MAD_WDS=${WDS:-"0"}
    case "$SCALE" in paper) nseeds_=${SEEDS:-5} ;; *) nseeds_=${SEEDS:-2} ;; esac
    case "$nseeds_" in ''|*[!0-9]*|0) DIE_RC=2 die "SEEDS must be a positive integer (got '$nseeds_')" ;; esac
    MAD_SEEDS=$(seq -s ' ' 1 "$nseeds_")
else
    case "$SCALE" in
        paper) MAD_LRS=${LRS:-"1e-4 5e-4 1e-3"}; MAD_WDS=${WDS:-"0 0.1"} ;;
        small) MAD_LRS=${LRS:-"5e-4 1e-3"};      MAD_WDS=${WDS:-"0"} ;;
        medium) MAD_LRS=${LRS:-"2e-3"};          MAD_WDS=${WDS:-"0"} ;;
        tiny)  MAD_LRS=${LRS:-"1e-3"};           MAD_WDS=${WDS:-"0"} ;;
    esac
    [ -z "${SEEDS:-}" ] || DIE_RC=2 die "SEEDS is for PROTOCOL=kla (PROTOCOL=mad trains one run per grid point)"
    MAD_SEEDS=""
fi

VARIANTS=${VARIANTS:-base}
case "$VARIANTS" in base) ;; all) [ "$PROTOCOL" = mad ] || DIE_RC=2 die "VARIANTS=all is PROTOCOL=mad's (MAD's benchmark)" ;;
    *) DIE_RC=2 die "VARIANTS must be base or all (got '$VARIANTS')" ;; esac
# the settings of a task, one a line: "base", then with VARIANTS=all its difficulty variants as NAME=KEY=VALUE
# (MAD-Lab's configs/tasks/<task>.yml: the baseline with one change at a time)
mad_variants_() {
    local k v n
    echo base
    [ "$VARIANTS" = all ] || return 0
    case "$1" in
        noisy_icr) v="48 80 144" ;; memorization) v="512 1024 2048 4096 8192" ;; *) v="32 64 128" ;;
    esac
    for k in $v; do echo "v$k=data.task.vocab=$k"; done
    case "$1" in
        icr|noisy_icr|fuzzy_icr) v="256 512 1024" ;; selective_copy) v="512 1024" ;; compression) v="64 128 256" ;; *) v="" ;;
    esac
    for k in $v; do echo "T$k=train.seq_len=$k"; done
    [ "$1" = memorization ] || for n in 6400 3200 1600 800; do echo "n$n=data.task.train_examples=$n"; done
    [ "$1" = noisy_icr ] && for k in 0.4 0.6 0.8; do echo "noise$k=data.task.frac_noise=$k"; done
    [ "$1" = selective_copy ] && for k in 32 64 96; do echo "copy$k=data.task.n_copy=$k"; done
    return 0
}
# the run id of (row, task, variant, lr, wd[, seed]): the baseline keeps the plain task name
mad_id_() {
    local id="$1__$2"
    [ "$3" = base ] || id+="-$3"
    id+="__lr$4_wd$5"; [ -z "${6:-}" ] || id+="_s$6"
    echo "$id"
}
# the config of a task
mad_config_() {
    if [ "$PROTOCOL" = kla ]; then printf 'configs/tasks/mad/kla_protocol/%s.json\n' "$1"
    else printf 'configs/tasks/mad/%s.json\n' "$1"; fi
}
# the scale's overrides for a task
mad_scale_sets_() {
    case "$SCALE" in
        small)
            [ "$1" = memorization ] || echo data.task.train_examples=640
            # kla: 38 epochs cannot reach 70 epochs of patience; no evaluation before the final one
            if [ "$PROTOCOL" = kla ]; then printf '%s\n' train.epochs=38 train.patience=0 train.eval_every=0
            else echo train.epochs=10; fi ;;
        medium)
            printf '%s\n' train.batch_size=32 schedule.warmup_steps=100 train.eval_every=200 train.eval_batches=8 \
                train.stop_at_acc=0.99
            case "$1" in  # 12,800 examples (memorization 256) / batch 32: 400 (8) steps an epoch
                selective_copy) echo train.epochs=3 ;; memorization) echo train.epochs=100 ;;
                compression) echo train.epochs=4 ;; *) echo train.epochs=8 ;;
            esac ;;
        tiny)
            printf '%s\n' model.d_model=32 train.batch_size=4 train.steps=2 train.ckpt_every=0 \
                data.task.train_examples=8 data.task.test_examples=8
            [ "$PROTOCOL" = kla ] && printf '%s\n' train.patience=0 train.eval_every=0
            # the KLA compression decoder's [240, 120] is for d 128; tiny keeps MAD's (d_model, d_model)
            [ "$PROTOCOL" = kla ] && [ "$1" = compression ] && printf '%s\n' model.ae_width1=0 model.ae_width2=0
            # VARIANTS=all copies up to 96 tokens: selective copy keeps its 256 there
            case "$1" in memorization|compression) ;; selective_copy) [ "$VARIANTS" = all ] || echo train.seq_len=64 ;;
                *) echo train.seq_len=64 ;; esac ;;
    esac
}
# --- the runs
mad_in_list_() { [ -z "$2" ] && return 0; case ",$2," in *",$1,"*) return 0 ;; esac; return 1; }
MAD_ROW_IDS=(); MAD_ROW_LABELS=(); MAD_COL_IDS=(); MAD_COL_LABELS=()
for m in "${MAD_MIXERS[@]}"; do
    IFS='|' read -r mid mlabel mjson mextra <<< "$m"
    mad_in_list_ "$mid" "${ROWS:-}" || continue
    MAD_ROW_IDS+=("$mid"); MAD_ROW_LABELS+=("$mlabel")
done
for t in "${MAD_TASKS[@]}"; do
    IFS='|' read -r tid tlabel <<< "$t"
    mad_in_list_ "$tid" "${TASKS:-}" || continue
    MAD_COL_IDS+=("$tid"); MAD_COL_LABELS+=("$tlabel")
done
[ "${#MAD_ROW_IDS[@]}" -gt 0 ] || DIE_RC=2 die "ROWS='${ROWS:-}' selects no row"
[ "${#MAD_COL_IDS[@]}" -gt 0 ] || DIE_RC=2 die "TASKS='${TASKS:-}' selects no task"
# mad_job ID TASK SET...: queue run ID of TASK: its config, the scale's overrides, SET..., the command line's --set
MAD_JOB_TASKS=()
mad_job() {
    local id=$1 task=$2 x args; shift 2
    args=(--config "$(mad_config_ "$task")")
    while IFS= read -r x; do [ -n "$x" ] && args+=(--set "$x"); done < <(mad_scale_sets_ "$task")
    for x in "$@" "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$x"); done
    job "$id" "${args[@]}"
    MAD_JOB_TASKS+=("$task")
}
for m in "${MAD_MIXERS[@]}"; do
    IFS='|' read -r mid mlabel mjson mextra <<< "$m"
    mad_in_list_ "$mid" "${ROWS:-}" || continue
    extra=()
    while IFS= read -r x; do [ -n "$x" ] && extra+=("$x"); done < <(tr ';' '\n' <<< "$mextra")
    for tid in "${MAD_COL_IDS[@]}"; do while IFS= read -r var; do
        vset=(); [ "$var" = base ] || vset=("${var#*=}")
        for lr in $MAD_LRS; do
            minfrac=$(awk -v l="$lr" 'BEGIN { f = 1e-6 / l; if (f > 1) f = 1; printf "%.6g", f }')
            for wd in $MAD_WDS; do
                if [ "$PROTOCOL" = kla ]; then  # constant lr: no min_lr_frac; one run per seed
                    for seed in $MAD_SEEDS; do
                        mad_job "$(mad_id_ "$mid" "$tid" "${var%%=*}" "$lr" "$wd" "$seed")" "$tid" \
                            "model.mixer=$mjson" "optim.lr=$lr" "optim.weight_decay=$wd" "run.seed=$seed" \
                            "${extra[@]+"${extra[@]}"}"
                    done
                else
                    mad_job "$(mad_id_ "$mid" "$tid" "${var%%=*}" "$lr" "$wd")" "$tid" \
                        "model.mixer=$mjson" "optim.lr=$lr" "optim.weight_decay=$wd" "schedule.min_lr_frac=$minfrac" \
                        "${vset[@]+"${vset[@]}"}" "${extra[@]+"${extra[@]}"}"
                fi
            done
        done
    done < <(mad_variants_ "$tid"); done
done

# start the long runs first: selective copy, then the recall tasks (compression and memorization are short)
JOB_ORDER=()
for t in selective_copy fuzzy_icr noisy_icr icr other; do
    for ((i = 0; i < ${#JOB_IDS[@]}; i++)); do
        case "${MAD_JOB_TASKS[$i]}" in selective_copy|fuzzy_icr|noisy_icr|icr) [ "${MAD_JOB_TASKS[$i]}" = "$t" ] ;; *) [ "$t" = other ] ;; esac &&
            JOB_ORDER+=("$i")
    done
done
run_jobs; rc=$?

# --- the table: per (mixer, task) the best over the grid of the accuracy (PROTOCOL=kla: of the mean over the
# seeds); the average over the tasks of a row
mad_render() {
    local md="$OUTD/mad_table.md" csv="$OUTD/mad_table.csv" r c lr wd id a acc best n k cells sum cnt avg
    local ngrid nseed seed ssum sn
    nseed=$(wc -w <<< "$MAD_SEEDS"); [ "$nseed" -gt 0 ] || nseed=1
    ngrid=$(( $(wc -w <<< "$MAD_LRS") * $(wc -w <<< "$MAD_WDS") * nseed ))
    local -a rowcells=() csvrows=()
    for ((r = 0; r < ${#MAD_ROW_IDS[@]}; r++)); do
        cells=""; sum=0; cnt=0
        local csvline="${MAD_ROW_IDS[$r]},\"${MAD_ROW_LABELS[$r]}\""
        for c in "${MAD_COL_IDS[@]}"; do
            # per setting of the task the best over the grid; the cell their mean (with VARIANTS=base one setting)
            n=0; local vsum=0 vn=0 nv=0 var
            while IFS= read -r var; do
                nv=$((nv + 1)); best=""
                for lr in $MAD_LRS; do for wd in $MAD_WDS; do
                    ssum=0; sn=0
                    for seed in ${MAD_SEEDS:-none}; do
                        [ "$seed" = none ] && seed=""
                        id=$(mad_id_ "${MAD_ROW_IDS[$r]}" "$c" "${var%%=*}" "$lr" "$wd" "$seed")
                        [ "$(job_rc "$id")" = 0 ] || continue
                        a=$(json_acc "$RUNS/$id/eval/acc.json" %.6f); [ -n "$a" ] || continue
                        n=$((n + 1)); sn=$((sn + 1)); ssum=$(awk -v s="$ssum" -v a="$a" 'BEGIN { printf "%.8f", s + a }')
                    done
                    [ "$sn" -gt 0 ] || continue
                    acc=$(awk -v s="$ssum" -v n="$sn" 'BEGIN { printf "%.8f", s / n }')
                    if [ -z "$best" ] || awk -v a="$acc" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$acc; fi
                done; done
                [ -n "$best" ] || continue
                vsum=$(awk -v s="$vsum" -v a="$best" 'BEGIN { printf "%.8f", s + a }'); vn=$((vn + 1))
            done < <(mad_variants_ "$c")
            best=""; [ "$vn" -gt 0 ] && best=$(awk -v s="$vsum" -v n="$vn" 'BEGIN { printf "%.8f", s / n }')
            if [ -z "$best" ]; then
                cells+=" — |"; csvline+=","
            else
                k=$(printf '%.4f' "$best")
                sum=$(awk -v s="$sum" -v a="$best" 'BEGIN { printf "%.8f", s + a }'); cnt=$((cnt + 1))
                if [ "$n" -lt $((ngrid * nv)) ]; then cells+=" $k ($n/$((ngrid * nv))) |"; else cells+=" $k |"; fi
                csvline+=",$k"
            fi
        done
        if [ "$cnt" = "${#MAD_COL_IDS[@]}" ]; then
            avg=$(awk -v s="$sum" -v n="$cnt" 'BEGIN { printf "%.4f", s / n }'); cells+=" $avg |"; csvline+=",$avg"
        else
            cells+=" — |"; csvline+=","
        fi
        rowcells+=("| ${MAD_ROW_LABELS[$r]} |$cells"); csvrows+=("$csvline")
    done
    {
        if [ "$PROTOCOL" = kla ]; then
            echo "**MAD synthetic LM suite, the KLA paper's protocol.** Test accuracy (fraction of supervised positions), the mean over seeds {${MAD_SEEDS// /, }}."
            echo
            echo "Protocol \`kla\` (KLA paper Table 10, App. F.1.2 / G.3; configs/tasks/mad/kla_protocol/*.json): one block (fused for KLA, [mixer, SwiGLU] otherwise), d 128, batch 172, AdamW lr 1e-3 constant, wd 0, clip 5, up to 750 epochs with early stopping at patience 70 epochs (on the test loss, evaluated every 75 steps, memorization every 15; scored on the last model), compression decoder [240, 120]."
            case "$SCALE" in
                paper) echo "Scale \`paper\`: the configs as they are (12,800 train / 1,280 test examples)." ;;
                small) echo "Scale \`small\`: CPU-sized: 640 training examples (memorization 256), 38 epochs (so no early stop), 1,280 test examples." ;;
                tiny)  echo "Scale \`tiny\`: a pipeline check (d 32, 2 steps of batch 4, 8 test examples, sequences ≤ 64); the numbers mean nothing." ;;
            esac
        else
        echo "**MAD synthetic LM suite.** Test accuracy (fraction of supervised positions), best over the lr × wd grid."
        echo
        echo "Protocol \`mad\` (MAD-Lab, Poli et al. 2024; configs/tasks/mad/*.json)."
        case "$SCALE" in
            paper) echo "Scale \`paper\`: the MAD protocol (configs/tasks/mad/*.json: d 128, 2 × [mixer, SwiGLU], 12,800 train / 1,280 test examples, batch 128, 200 epochs, cosine to 1e-6)." ;;
            small) echo "Scale \`small\`: CPU-sized: the paper model, 640 training examples (memorization 256), 10 epochs, batch 128, 1,280 test examples." ;;
            medium) echo "Scale \`medium\`: the paper model and data (12,800 train / 1,280 test examples, memorization 256), batch 32, 100 warmup steps then cosine to 1e-6; 3,200 steps (ICR, noisy ICR, fuzzy ICR), 1,200 (selective copy), 800 (memorization), 1,600 (compression), stopping early at the first evaluation (256 test examples, every 200 steps) at ≥ 0.99." ;;
            tiny)  echo "Scale \`tiny\`: a pipeline check (d 32, 2 steps of batch 4, 8 test examples, sequences ≤ 64); the numbers mean nothing." ;;
        esac
        fi
        if [ "$VARIANTS" = all ]; then
            echo "Every task at its baseline and its MAD difficulty variants (66 settings over the six tasks): a cell is the mean over the task's settings of the best over the grid (lr ∈ {${MAD_LRS// /, }} × wd ∈ {${MAD_WDS// /, }}); a cell with fewer finished runs than settings × grid shows (k/n). Average over the tasks of the row."
        else
            echo "Grid: lr ∈ {${MAD_LRS// /, }} × wd ∈ {${MAD_WDS// /, }}${MAD_SEEDS:+ × seeds {${MAD_SEEDS// /, }\}} ($ngrid runs per cell; a cell with fewer finished runs shows (k/$ngrid)). Average over the tasks of the row."
        fi
        generated_by "src configs scripts" PROTOCOL ROWS TASKS WDS LRS SEEDS VARIANTS
        echo
        printf '| Mixer |'; for c in "${MAD_COL_LABELS[@]}"; do printf ' %s |' "$c"; done; echo ' Avg |'
        printf '|---|'; for c in "${MAD_COL_LABELS[@]}"; do printf -- '---:|'; done; printf -- '---:|\n'
        for r in "${rowcells[@]}"; do echo "$r"; done
        echo
        echo "Compression is trained with MAD's autoencoder backbone (model.head autoencoder: every token decoded from the last position's vector)."
        local failed=() i
        for ((i = 0; i < ${#JOB_IDS[@]}; i++)); do
            [ "$(job_rc "${JOB_IDS[$i]}")" = 0 ] || failed+=("${JOB_IDS[$i]}")
        done
        if [ "${#failed[@]}" -gt 0 ]; then echo; echo "Runs without a result: ${failed[*]} (logs in $LOGS/)."; fi
    } > "$md"
    {
        printf 'id,mixer'; for c in "${MAD_COL_IDS[@]}"; do printf ',%s' "$c"; done; echo ',average'
        for r in "${csvrows[@]}"; do echo "$r"; done
    } > "$csv"
    cat "$md"
    say "table written to $md and $csv"
}
mad_render || rc=1
exit_if_interrupted
exit "$rc"
