# The task sweeps' part of the library, on the run queue of scripts/lib/runq.sh (sourced, not run): the mixer
# rows of scripts/mqar_sweep.sh and scripts/state_tracking.sh, the decoding state size of a queued run, and the
# state-size sweeps of scripts/bla_mqar.sh and scripts/bla_regbench.sh (their queue and per-run CSV). A task
# run's result is RUN_DIR/eval/acc.json (json_acc).

source "$(dirname "${BASH_SOURCE[0]}")/runq.sh"

# job_acc ID: the test accuracy of run ID (4 decimals; nothing when it has none)
job_acc() { json_acc "$RUNS/$1/eval/acc.json"; }

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
    local i=${JOB_INDEX_[$1]:-}
    JOB_STATE=""
    [ -n "$i" ] || return 0
    job_args "$i"
    JOB_STATE=$("$SEQTRAIN" "${JOB_ARGV[@]}" --info 2>/dev/null | awk -F'|' -v w="${3:-0}" '
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

# job_layer_state ID: the main state term of job ID's first layer as `seqtrain --info` writes it, e.g.
# "GDN state: H·dk·dv = 2·24·48 = 2304" (for kla its λ, η: the count of the KLA paper's Table 12; the conv
# caches and the other layers left out): the per-layer state that state-matched rows compare; empty if --info
# fails
job_layer_state() {
    local i=${JOB_INDEX_[$1]:-}
    [ -n "$i" ] || return 0
    job_args "$i"
    "$SEQTRAIN" "${JOB_ARGV[@]}" --info 2>/dev/null | awk -F'|' '$2 ~ /^ *0 *$/ && NF >= 7 {
        s = $7; sub(/;.*/, "", s); sub(/^ +/, "", s); sub(/ +$/, "", s); print s; exit }'
}
# ----------------------------------------------------------------------------
# the mixer rows of the task sweeps

# The rows: id | label | model.mixer | further --set values separated by ';'. The mixer object merges into the
# config's attention mixer, or replaces it when its kind differs; the rfa row names the config's attention
# heads (mixer_rows HEADS), since its object replaces the attention one. KLA rows are fused blocks (no separate
# MLP; the MAD base config says prenorm, so the row says fused; KLA paper Table 12: d_state 16, expand 1). The
# linear family keeps its reference defaults (heads 4/8, FLA's gates and norms); mamba2 and mlstm are fused
# blocks too, mamba2 with 16-channel heads so that the sweeps' small widths hold whole heads. gla_rope is GLA
# with RoPE on q, k (the Selective RoPE paper's "RoPE" variant), gated_deltanet_neg the negative-eigenvalue
# GDN (Grazzi et al.: solves parity; a positive control there). A mixer added later is a line here; rows that
# only one script runs are its own, passed as mixer_rows HEADS ROW... . mixer_rows also sets MIXERS (default:
# every shared row; a script's own rows run when MIXERS names them) and refuses an unknown id.
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
    MIXER+=("${@:2}")
    for m in "${@:2}"; do all+="${m%%|*} "; done
    for m in $MIXERS; do mixer_field "$m" 1 >/dev/null || DIE_RC=2 die "unknown mixer '$m' (known: $all)"; done
}
# mixer_grid_md "COL ..." PREFIX CELL_FN MIXER...: a Markdown table with a row per MIXER (its label) and a
# column PREFIX<COL> per COL, each cell printed by `CELL_FN MIXER COL`
mixer_grid_md() {
    local cols=$1 pre=$2 fn=$3 m c; shift 3
    printf '| Mixer |'; for c in $cols; do printf ' %s%s |' "$pre" "$c"; done; echo
    printf '|---|'; for c in $cols; do printf -- '---:|'; done; echo
    for m in "$@"; do
        printf '| %s |' "$(mixer_field "$m" 2)"; for c in $cols; do printf ' %s |' "$("$fn" "$m" "$c")"; done; echo
    done
}
# field N (1 id, 2 label, 3 mixer JSON, 4 --set values) of the row with id $1
mixer_field() { local m; for m in "${MIXER[@]}"; do [ "${m%%|*}" = "$1" ] && { cut -d'|' -f"$2" <<< "$m"; return 0; }; done; return 1; }

# ----------------------------------------------------------------------------
# sweeps over state-size parameters (scripts/bla_mqar.sh, scripts/bla_regbench.sh)

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
