# Shared part of the task sweeps scripts/mqar_sweep.sh, scripts/state_tracking.sh, scripts/bla_mqar.sh and
# scripts/bla_regbench.sh (sourced, not run): the run queue, resumable parallel seqtrain runs whose result is
# RUN_DIR/eval/acc.json, decoding state sizes, the state-size sweeps' queue and per-run CSV, option parsing,
# setup and the mixer rows.
# The sourcing script sets PROG and ROOT first.

# A job is one seqtrain run in $RUNS/<id>/; it is finished when RUN_DIR/eval/acc.json exists. A run
# directory whose config.json differs from the job's resolved configuration (seqtrain --print-config; the
# keys threads, dir and name aside) is never touched (an error), a finished one is reused, one with a
# checkpoint but no acc.json is resumed, one without a checkpoint is trained afresh.
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit "${DIE_RC:-1}"; }
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
JOB_IDS=(); JOB_ARGS=(); declare -A JOB_INDEX_=()
# job ID ARG...: queue a run (seqtrain arguments without run.dir/run.name/run.threads). Queueing an ID again
# with the same arguments is a no-op (a run shared by two figures is trained once); with others, an error.
job() {
    local id=$1; shift; local s="" a; for a in "$@"; do s+="$a"$'\n'; done
    if [ -n "${JOB_INDEX_[$id]+x}" ]; then
        [ "${JOB_ARGS[${JOB_INDEX_[$id]}]}" = "$s" ] || die "run $id queued twice with different arguments"
        return 0
    fi
    JOB_INDEX_[$id]=${#JOB_IDS[@]}; JOB_IDS+=("$id"); JOB_ARGS+=("$s")
}
job_acc() { python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["accuracy"])' "$RUNS/$1/eval/acc.json" 2>/dev/null; }
# a resolved config without the keys that may differ between invocations of the same run
cfg_key_() { grep -Ev $'^\t\t"(threads|dir|name)":' "$1"; }
job_one_() {  # job_one_ INDEX: train/resume/reuse one run (in the background of run_jobs)
    local i=$1 id=${JOB_IDS[$1]} d="$RUNS/${JOB_IDS[$1]}" log="$LOGS/${JOB_IDS[$1]}.log" a args=()
    while IFS= read -r a; do [ -n "$a" ] && args+=("$a"); done <<< "${JOB_ARGS[$i]}"
    local cfg="$LOGS/$id.cfg"
    "$SEQTRAIN" "${args[@]}" --set "run.dir=$RUNS" --set "run.name=$id" --print-config > "$cfg" 2>>"$log" || return 2
    if [ -f "$d/config.json" ] && { [ -f "$d/latest" ] || [ -f "$d/eval/acc.json" ]; } &&
       ! cmp -s <(cfg_key_ "$d/config.json") <(cfg_key_ "$cfg"); then
        say "$id: $d holds a run with another configuration; left alone (use another SEQ_OUT):"
        diff <(cfg_key_ "$d/config.json") <(cfg_key_ "$cfg") | grep '^[<>]' | head -n 6 | sed 's/^/    /' >&2
        return 3
    fi
    if [ -f "$d/eval/acc.json" ]; then say "$id: finished earlier, reused"; return 0; fi
    if [ -f "$d/latest" ]; then
        say "$id: resuming (log: $log)"
        "$SEQTRAIN" --resume "$d" --quiet >>"$log" 2>&1 || return 1
    else
        rm -rf "$d"
        say "$id: training (log: $log)"
        { printf '$ %s' "$SEQTRAIN"; printf ' %q' "${args[@]}" --set "run.dir=$RUNS" --set "run.name=$id"; echo; } >>"$log"
        "$SEQTRAIN" "${args[@]}" --set "run.dir=$RUNS" --set "run.name=$id" --set "run.threads=$THREADS" \
            --quiet >>"$log" 2>&1 || return 1
    fi
    [ -f "$d/eval/acc.json" ] || return 1
    say "$id: done, test accuracy $(job_acc "$id")"
}
# job_state ID [KEY [WINDOW]]: the decoding state of job ID in floats per sequence over all layers (the sum of
# the per-layer rows of `seqtrain --info`: a KV cache at the run's T, a recurrent state whatever T), empty if
# --info fails; printed and left in JOB_STATE. With KEY it is cached under KEY (runs that differ only in lr or
# seed have the same state), which only helps when job_state runs in this shell, not in $(...). WINDOW > 0: the
# run's attention layers have that sliding window (BLA Table 1's SWA state H(dk + dv) min(w, L)). seqtrain
# --info already counts min(w, T) positions; a binary from before that (whose "at T" is per-token x T) is
# rescaled here, so older builds give the same table.
declare -A STATE_CACHE_=(); JOB_STATE=""
job_state() {
    if [ -n "${2:-}" ] && [ -n "${STATE_CACHE_[$2]+x}" ]; then JOB_STATE=${STATE_CACHE_[$2]}; printf '%s\n' "$JOB_STATE"; return 0; fi
    local i=${JOB_INDEX_[$1]:-} a args=()
    JOB_STATE=""
    [ -n "$i" ] || return 0
    while IFS= read -r a; do [ -n "$a" ] && args+=("$a"); done <<< "${JOB_ARGS[$i]}"
    JOB_STATE=$("$SEQTRAIN" "${args[@]}" --info 2>/dev/null | awk -F'|' -v w="${3:-0}" '
        /at T = [0-9]+/ { match($0, /at T = [0-9]+/); T = substr($0, RSTART + 7, RLENGTH - 7) + 0 }
        $2 ~ /^ *[0-9]+ *$/ && NF >= 7 {
            at = $6; gsub(/ /, "", at); at += 0
            if ($5 ~ /per token/) { pt = $5 + 0; if (w > 0 && w < T && at == pt * T) at = pt * w }
            tot += at; n++
        }
        END { if (n) printf "%.0f\n", tot }')
    [ -n "${2:-}" ] && STATE_CACHE_[$2]=$JOB_STATE
    printf '%s\n' "$JOB_STATE"
}
# run_host: the CPU and the thread count of the runs, for a table's provenance (a run's bits depend on both)
run_host() {
    printf '%s, THREADS=%s per run' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)" "$THREADS"
}
# run_jobs: every queued job, JOBS at a time; returns 1 if any failed
run_jobs() {
    mkdir -p "$RUNS" "$LOGS"
    local i n=${#JOB_IDS[@]} failed=0 pids=() rc
    if [ "$DRY_RUN" = 1 ]; then
        for ((i = 0; i < n; i++)); do
            local a args=(); while IFS= read -r a; do [ -n "$a" ] && args+=("$a"); done <<< "${JOB_ARGS[$i]}"
            printf '%s' "$SEQTRAIN"; printf ' %q' "${args[@]}" --set "run.dir=$RUNS" --set "run.name=${JOB_IDS[$i]}" --set "run.threads=$THREADS"; echo
        done
        return 0
    fi
    for ((i = 0; i < n; i++)); do
        while [ "$(jobs -rp | wc -l)" -ge "$NJOBS" ]; do wait -n; done
        ( job_one_ "$i"; echo $? > "$LOGS/${JOB_IDS[$i]}.rc" ) &
    done
    wait
    for ((i = 0; i < n; i++)); do
        rc=$(cat "$LOGS/${JOB_IDS[$i]}.rc" 2>/dev/null || echo 1)
        if [ "$rc" != 0 ]; then failed=$((failed + 1)); say "${JOB_IDS[$i]}: FAILED (rc $rc; log: $LOGS/${JOB_IDS[$i]}.log)"; fi
    done
    [ "$failed" = 0 ] || { say "$failed of $n runs failed"; return 1; }
}
# scale_check SCALE "S1 S2 ...": whether SCALE is one of the list; if not, the message "SCALE must be S1, S2 or
# S3 (got 'X')" on stdout (the scripts that know a scale call this one check)
scale_check() {
    case " $2 " in *" $1 "*) return 0 ;; esac
    local l=${2% *}; printf "SCALE must be %s or %s (got '%s')\n" "${l// /, }" "${2##* }" "$1"; return 1
}
# common settings: SCALE (one of $2, default "tiny small paper"), SEQ_OUT (default runs/tasks/$1/$SCALE), JOBS,
# THREADS, BIN. tiny runs nproc jobs at a time. medium is many short runs of a fixed thread count ($3, default
# 1): THREADS defaults to it and JOBS to nproc / THREADS, so every machine of one CPU kind trains the same runs
# (the same bits, training.md#determinism) whatever its number of cores
setup() {
    SCALE=${SCALE:-small}
    local msg; msg=$(scale_check "$SCALE" "${2:-tiny small paper}") || DIE_RC=2 die "$msg"
    if [ -n "${SEQ_OUT:-}" ]; then OUTD=$(abspath "$SEQ_OUT"); else OUTD="$ROOT/runs/tasks/$1/$SCALE"; fi
    if [ -n "${BIN:-}" ]; then BIND=$(abspath "$BIN"); else BIND="$ROOT/bin"; fi
    local np; np=$(nproc 2>/dev/null || echo 2)
    case "$SCALE" in
        tiny) NJOBS=${JOBS:-$np} ;;
        medium) THREADS=${THREADS:-${3:-1}}
                case "$THREADS" in ''|*[!0-9]*|0) DIE_RC=2 die "THREADS must be a positive integer at SCALE=medium (got '$THREADS')" ;; esac
                local j=$((np / THREADS)); [ "$j" -ge 1 ] || j=1; NJOBS=${JOBS:-$j} ;;
        *) NJOBS=${JOBS:-1} ;;
    esac
    case "$NJOBS" in ''|*[!0-9]*|0) DIE_RC=2 die "JOBS must be a positive integer (got '$NJOBS')" ;; esac
    local t=$((np / NJOBS)); [ "$t" -ge 1 ] || t=1
    THREADS=${THREADS:-$t}
    case "$THREADS" in ''|*[!0-9]*) DIE_RC=2 die "THREADS must be a non-negative integer (got '$THREADS')" ;; esac
    # spinning OpenMP threads of several processes on the same cores slow each other down badly
    if [ "$NJOBS" -gt 1 ]; then export OMP_WAIT_POLICY=passive; fi
    cd "$ROOT" || exit 1
    if [ ! -x "$BIND/seqtrain" ]; then
        [ "$BIND" = "$ROOT/bin" ] || die "$BIND/seqtrain not found"
        say "bin/seqtrain is not built; running make tools"; make -s tools >&2 || die "make tools failed"
    fi
    SEQTRAIN="$BIND/seqtrain"; SEQEVAL="$BIND/seqeval"; RUNS="$OUTD/runs"; LOGS="$OUTD/logs"
    mkdir -p "$RUNS" "$LOGS"
}
# ---- sweeps over state-size parameters (scripts/bla_mqar.sh, scripts/bla_regbench.sh) -----------------
# A sweep run has a base id (mixer and its settings), queued for every lr in LRS, wd in WDS (when WDS is set;
# else the config's weight decay) and seed 1..SEEDS, with tags naming the figures it belongs to.
declare -A SWEEP_META_=() SWEEP_TAGS_=() SWEEP_WIN_=() SWEEP_KEY_=()
# sweep_mixers "ID ...": the rows a sweep knows; MIXERS (default: all of them) must name only these (exit 2)
sweep_mixers() {
    local m
    MIXERS=${MIXERS:-$1}
    for m in $MIXERS; do case " $1 " in *" $m "*) ;; *) DIE_RC=2 die "unknown mixer '$m' (known: $1)" ;; esac; done
}
# sweep_has ID: whether MIXERS names row ID
sweep_has() { case " $MIXERS " in *" $1 "*) return 0 ;; esac; return 1; }
# sweep_seq_len: train.seq_len of $CFG with the caller's scale_sets applied
sweep_seq_len() {
    local x args=()
    while IFS= read -r x; do [ -n "$x" ] && args+=(--set "$x"); done < <(scale_sets)
    "$SEQTRAIN" --config "$CFG" "${args[@]}" --print-config 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["train"]["seq_len"])' || die "cannot resolve $CFG"
}
# sweep_queue TAG BASE LABEL META WINDOW SET...: queue BASE_lr<lr>[_wd<wd>]_s<seed> with --config $CFG, the
# --set values SET..., those of the caller's scale_sets, lr, wd, seed and the command line's --set values.
# LABEL is the run's line (series) in the figures; META its CSV fields (the caller's header, comma-separated,
# no commas inside); WINDOW > 0 the attention window (for job_state). A run queued again gains the tag.
sweep_queue() {
    local tag=$1 base=$2 label=$3 meta=$4 win=$5; shift 5
    local lr wd s id x args
    for lr in $LRS; do for wd in ${WDS:--}; do for ((s = 1; s <= SEEDS; s++)); do
        id="${base}_lr${lr}"; [ "$wd" = - ] || id+="_wd${wd}"; id+="_s${s}"
        args=(--config "$CFG")
        for x in "$@"; do args+=(--set "$x"); done
        while IFS= read -r x; do [ -n "$x" ] && args+=(--set "$x"); done < <(scale_sets)
        args+=(--set "optim.lr=$lr" --set "run.seed=$s")
        [ "$wd" = - ] || args+=(--set "optim.weight_decay=$wd")
        for x in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$x"); done
        job "$id" "${args[@]}"
        [ "$wd" = - ] && wd=""
        SWEEP_META_[$id]="\"$label\",$meta,$lr,$wd,$s"; SWEEP_WIN_[$id]=$win; SWEEP_KEY_[$id]=$base
        case " ${SWEEP_TAGS_[$id]:-} " in *" $tag "*) ;; *) SWEEP_TAGS_[$id]="${SWEEP_TAGS_[$id]:+${SWEEP_TAGS_[$id]} }$tag" ;; esac
    done; done; done
}
# sweep_csv FILE HEADER: one row per queued run, "id,sweep,line,HEADER,lr,wd,seed,state_floats,accuracy" (wd
# empty: the config's; accuracy empty: the run failed or has not run), written to FILE.tmp and renamed
sweep_csv() {
    local id
    {
        echo "id,sweep,line,$2,lr,wd,seed,state_floats,accuracy"
        for id in "${JOB_IDS[@]}"; do
            job_state "$id" "${SWEEP_KEY_[$id]}" "${SWEEP_WIN_[$id]}" > /dev/null
            echo "$id,${SWEEP_TAGS_[$id]},${SWEEP_META_[$id]},$JOB_STATE,$(job_acc "$id")"
        done
    } > "$1.tmp" && mv "$1.tmp" "$1"
}
# sweep_cmdline SCRIPT VAR...: the command that reproduces this invocation (SCALE, the VARs set in the
# environment, the --set values)
sweep_cmdline() {
    local s="SCALE=$SCALE" v x script=$1; shift
    for v in "$@"; do [ -n "$(printenv "$v")" ] && s+=" $v=\"$(printenv "$v")\""; done
    s+=" $script"; for x in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do s+=" --set $x"; done
    printf '%s\n' "$s"
}
DRY_RUN=0; EXTRA_SETS=()
parse_opts() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) echo "$USAGE"; exit 0 ;;
            --set) [ $# -ge 2 ] || DIE_RC=2 die "--set needs KEY=VALUE"; EXTRA_SETS+=("$2"); shift 2 ;;
            --set=*) EXTRA_SETS+=("${1#--set=}"); shift ;;
            --dry-run) DRY_RUN=1; shift ;;
            *) echo "$USAGE" >&2; DIE_RC=2 die "unknown argument '$1'" ;;
        esac
    done
}
# The mixer rows of both sweeps: id | label | model.mixer | further --set values separated by ';'. The mixer
# object merges into the config's attention mixer, or replaces it when its kind differs; the rfa row names
# the config's attention heads (mixer_rows HEADS), since its object replaces the attention one. KLA rows
# are fused blocks (no separate MLP; the MAD base config says prenorm, so the row says fused; KLA paper Table 12:
# d_state 16, expand 1). The linear family keeps its reference defaults (heads 4/8, FLA's gates and norms); mamba2 and mlstm
# are fused blocks too, mamba2 with 16-channel heads so that the sweeps' small widths hold whole heads. gla_rope is
# GLA with RoPE on q, k (the Selective RoPE paper's "RoPE" variant), gated_deltanet_neg the negative-eigenvalue
# GDN (Grazzi et al.: solves parity; a positive control there). A mixer added later is a line here. mixer_rows also sets MIXERS (default: every row) and refuses an unknown id.
mixer_rows() {
    MIXER=(
        'attn_rope|Attention (RoPE)|{"kind":"attention","pos":"rope"}|'
        'attn_nope|Attention (no position)|{"kind":"attention","pos":"none"}|'
        'attn_alibi|Attention (ALiBi)|{"kind":"attention","pos":"alibi"}|'
        'attn_path|Attention (PaTH)|{"kind":"attention","pos":"path"}|'
        'attn_path_fox|Attention (PaTH-FoX)|{"kind":"attention","pos":"path_fox"}|'
        "rfa|RFA|{\"kind\":\"rfa\",\"heads\":$1,\"zero_decay_heads\":1}|optim.groups=[{\"match\":\"blocks.*.mixer.sde_*\",\"lr\":5e-4,\"beta1\":0.0,\"eps\":1e-7,\"clip\":1e-4}]"
        'kla|KLA|{"kind":"kla","d_state":16}|model.block=fused'
        'linear_attn|Linear attention (elu+1, normalised)|{"kind":"linear_attn","feature_map":"elu","normalize":true}|'
        'retnet|RetNet|{"kind":"retnet"}|'
        'gla|GLA|{"kind":"gla"}|'
        'mamba2|Mamba2|{"kind":"mamba2","d_state":64,"head_dim":16}|model.block=fused'
        'mlstm|mLSTM (xLSTM)|{"kind":"mlstm"}|model.block=fused'
        'deltanet|DeltaNet|{"kind":"deltanet"}|'
        'gated_deltanet|Gated DeltaNet|{"kind":"gated_deltanet"}|'
        'gsa|GSA (gated slot attention)|{"kind":"gsa"}|'
        'bla|BLA (blurry window attention)|{"kind":"bla"}|'
        'bla_decay|BLA with decay|{"kind":"bla","decay":true}|'
        'gla_rope|GLA + RoPE (complex forget gate)|{"kind":"gla","rotate":true}|'
        'gla_selrope|GLA + Selective RoPE|{"kind":"gla","selective_rope":{"enabled":true}}|'
        'gated_deltanet_neg|Gated DeltaNet (β ∈ (0, 2))|{"kind":"gated_deltanet","allow_neg_eigval":true}|'
        'gated_deltanet_selrope|Gated DeltaNet + Selective RoPE|{"kind":"gated_deltanet","selective_rope":{"enabled":true}}|'
        'attn_fox|Attention (FoX)|{"kind":"attention","pos":"fox"}|'
        'attn_fox_selrope|Attention (FoX) + Selective RoPE|{"kind":"attention","pos":"fox","selective_rope":{"enabled":true}}|'
    )
    local m all=""
    for m in "${MIXER[@]}"; do all+="${m%%|*} "; done
    MIXERS=${MIXERS:-$all}
    for m in $MIXERS; do mixer_field "$m" 1 >/dev/null || DIE_RC=2 die "unknown mixer '$m' (known: $all)"; done
}
# field N (1 id, 2 label, 3 mixer JSON, 4 --set values) of the row with id $1
mixer_field() { local m; for m in "${MIXER[@]}"; do [ "${m%%|*}" = "$1" ] && { cut -d'|' -f"$2" <<< "$m"; return 0; }; done; return 1; }
# ---- end of the run queue ----------------------------------------------------------------------------

