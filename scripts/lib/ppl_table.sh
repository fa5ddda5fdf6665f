# Perplexity tables of language models, on the run queue of scripts/lib/runq.sh (sourced, not run): the rows of
# scripts/rfa_table{1,2,3}.sh, kla_lm.sh and selrope_lm.sh. Every row is one run whose final perplexity table
# (RUN_DIR/eval/ppl.csv, written by seqtrain at the end of training from eval.contexts) gives the row; the table
# goes to stdout and to $SEQ_OUT/<table>.md and <table>.csv.
#
# A table script sets USAGE, sources this file, calls parse_opts and setup (runq.sh), declares its rows
# (ppl_row or ppl_rows_select, optionally ppl_separator) and ends with ppl_main. What a row trains at each
# scale comes from three hooks a script may redefine before its rows: ppl_config_path (the config file of a
# config name), ppl_scale_sets (the scale's overrides for a mixer kind) and ppl_scale_note with PPL_DATA_NOTE
# (what the table says about its scale and data). The defaults are the RFA tables' (configs/rfa/).
#
# Settings (environment), besides runq.sh's:
#   RFA_ROWS=ID,ID,...   train and show only these rows (ids as in the table script, e.g. b1_rope,b2_alibi: the
#                        attention baselines on a GPU build with BIN=build/cuda/bin --set run.device=cuda)

source "$(dirname "${BASH_SOURCE[0]}")/runq.sh"

PPL_IDS=(); PPL_LABELS=(); PPL_CSVKEYS=(); PPL_SEP_AT=(); DATA_SETS=()

# the bundled WikiText-2 shards (made by `make data`) when a config needs them
need_wikitext2() {
    local d="$ROOT/build/data/wikitext2"
    if [ ! -f "$d/train.shard" ] || [ ! -f "$d/valid.shard" ] || [ ! -f "$d/test.shard" ]; then
        say "the WikiText-2 shards are missing in build/data/wikitext2/; running make data"
        make -s data >&2 || die "make data failed"
    fi
}

# hook: the config file of a config name at the current scale
ppl_config_path() {
    case "$SCALE" in
        small) printf 'configs/rfa/cpu/%s.json\n' "$1" ;;
        *)     printf 'configs/rfa/%s.json\n' "$1" ;;
    esac
}

# hook: the scale's overrides for a mixer kind (attention|rfa), one --set value per line
ppl_scale_sets() {
    [ "$SCALE" = tiny ] || return 0
    # 2 layers of d32 with 2 heads, 4 steps of 2 x 32 tokens, validated on one batch, evaluated at 1x..8x
    # the training length on 2 windows per length: seconds for all rows (also under ASan), meaningless numbers
    printf '%s\n' model.d_model=32 model.n_layers=2 model.mixer.heads=2 model.mixer.zero_decay_heads=1 \
        train.batch_size=2 train.seq_len=32 train.steps=4 train.eval_every=0 train.eval_batches=1 \
        train.ckpt_every=0 eval.contexts=32,64,128,256 eval.max_windows=2
    # d -> 2d -> d (H·D = 64 real channels): attention's head_dim counts real channels (2·32/2 = 32 per
    # head); rfa's counts complex ones, and its default C/H = 16 complex (32 real) per head already is 2d
    if [ "$1" = attention ]; then echo model.mixer.head_dim=32; fi
}

# hook: the lines under a table's title that say what its scale is, and the remark after the data line
ppl_scale_note() {  # ppl_scale_note TRAIN_LEN "L1,L2,..."
    case "$SCALE" in
        paper) echo "Scale \`paper\`: the paper protocol (configs/rfa/*.json), trained at T = $1, test perplexity at L = ${2//,/, }." ;;
        small) echo "Scale \`small\`: CPU-sized configs (configs/rfa/cpu/*.json: 4 layers, d = 128, 1 epoch), trained at T = $1;" \
                    "L = ${2//,/, } are 1×, 2×, 4×, 8× the training length, as the paper's 512–4096 are for T = 512." ;;
        tiny)  echo "Scale \`tiny\`: a pipeline check (2 layers, d = 32, 4 steps, T = $1, L = ${2//,/, }, 2 windows per length); the numbers mean nothing." ;;
    esac
}
PPL_DATA_NOTE="Perplexities are not comparable with the paper's (WikiText-103 / BabyLM, GPT-2 BPE)."

# ppl_row ID LABEL CONFIG_NAME KIND [CSV_KEY [SET...]]: a row of the table, the run ID trained from
# CONFIG_NAME (ppl_config_path) with the scale's overrides for KIND, DATA_SETS, the --set values SET... and the
# command line's --set values
ppl_row() {
    local id=$1 label=$2 cfg=$3 kind=$4 key=${5:-$2} v
    shift 4; [ $# -gt 0 ] && shift
    if [ -n "${RFA_ROWS:-}" ] && [[ ",$RFA_ROWS," != *",$id,"* ]]; then return 0; fi
    PPL_IDS+=("$id"); PPL_LABELS+=("$label"); PPL_CSVKEYS+=("$key")
    local args=(--config "$(ppl_config_path "$cfg")")
    while IFS= read -r v; do [ -n "$v" ] && args+=(--set "$v"); done < <(ppl_scale_sets "$kind")
    for v in "${DATA_SETS[@]+"${DATA_SETS[@]}"}" "$@" "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$v"); done
    job "$id" "${args[@]}"
}

# ppl_rows_select ROW...: each ROW "id|label|config name|kind|csv key[|set...]" (ppl_row's arguments); the
# caller's setting ROWS=id,... must name only these (exit 2 otherwise) and keeps only them (default all)
ppl_rows_select() {
    local known="" r id
    local -a f
    for r in "$@"; do known+="${r%%|*} "; done
    for id in ${ROWS//,/ }; do
        case " $known" in *" $id "*) ;; *) DIE_RC=2 die "ROWS: unknown row '$id' (known: $known)" ;; esac
    done
    for r in "$@"; do
        IFS='|' read -ra f <<< "$r"
        [ -z "${ROWS:-}" ] || case ",$ROWS," in *",${f[0]},"*) ;; *) continue ;; esac
        ppl_row "${f[@]}"
    done
}

# a separator line (e.g. "Structural Ablations (Relative to M2)") before the next row
ppl_separator() { PPL_SEP_AT+=("${#PPL_IDS[@]}:$1"); }

# a short description of the data of a resolved config: "train X; val Y; test Z"
cfg_data_() {
    awk 'BEGIN { FS = "\t" } /^\t"data":/ { on = 1; next } on && /^\t}/ { exit }
         on && $3 ~ /^"(train|val|test)":$/ { k = $3; gsub(/[":]/, "", k); v = $4; sub(/,$/, "", v); gsub(/[]["]/, "", v)
                                              out = out (out ? "; " : "") k " " (v == "" ? "(none)" : v) }
         END { print out }' "$1"
}

# ppl_render NAME FIRST_COLUMN CSV_KEY_COLUMN TITLE [VAR...]: the table of every row (in declaration order,
# with the separators) as Markdown on stdout and in $SEQ_OUT/NAME.md, and as CSV in $SEQ_OUT/NAME.csv. Contexts
# and the training length come from the first row's resolved config; VAR... are the settings the provenance
# line names.
ppl_render() {
    local name=$1 col1=$2 keycol=$3 title=$4 n=${#PPL_IDS[@]} i j id L cell ppl cfg="" seq ctx c md csv
    shift 4
    for ((i = 0; i < n; i++)); do
        [ -s "$STATE_DIR/${PPL_IDS[$i]}.cfg" ] && { cfg="$STATE_DIR/${PPL_IDS[$i]}.cfg"; break; }
    done
    [ -n "$cfg" ] || { say "no valid config among the rows: no table"; return 1; }
    seq=$(cfg_get "$cfg" seq_len)
    ctx=$(cfg_get "$cfg" contexts)
    IFS=, read -ra c <<< "$ctx"
    md="$OUTD/$name.md"; csv="$OUTD/$name.csv"
    {
        echo "$title"
        echo
        ppl_scale_note "$seq" "$ctx"
        echo "Data: $(cfg_data_ "$cfg"). $PPL_DATA_NOTE"
        generated_by "src configs" "$@"
        echo
        printf '| %s |' "$col1"; for L in "${c[@]}"; do printf ' L=%s |' "$L"; done; echo
        printf '|---|'; for L in "${c[@]}"; do printf -- '---:|'; done; echo
        for ((i = 0; i < n; i++)); do
            for j in "${PPL_SEP_AT[@]+"${PPL_SEP_AT[@]}"}"; do
                if [ "${j%%:*}" = "$i" ]; then
                    printf '| **%s** |' "${j#*:}"; for L in "${c[@]}"; do printf ' |'; done; echo
                fi
            done
            id=${PPL_IDS[$i]}
            printf '| %s |' "${PPL_LABELS[$i]}"
            for L in "${c[@]}"; do
                case "$(job_rc "$id")" in
                    0) cell=$(job_ppl "$id" "$L") ;;
                    130|143) cell=interrupted ;;
                    invalid) cell="invalid config" ;;
                    conflict) cell="other config in run dir" ;;
                    "") cell="not run" ;;
                    *) cell=failed ;;
                esac
                printf ' %s |' "${cell:-missing}"
            done
            echo
        done
        local failed=()
        for ((i = 0; i < n; i++)); do
            [ "$(job_rc "${PPL_IDS[$i]}")" = 0 ] || failed+=("${PPL_IDS[$i]}")
        done
        if [ "${#failed[@]}" -gt 0 ]; then
            echo; echo "Without a result: ${failed[*]} (logs in $LOGS/)."
        fi
    } > "$md"
    {
        printf 'id,%s' "$keycol"; for L in "${c[@]}"; do printf ',ppl_%s' "$L"; done; echo
        for ((i = 0; i < n; i++)); do
            id=${PPL_IDS[$i]}
            printf '%s,%s' "$id" "${PPL_CSVKEYS[$i]}"
            for L in "${c[@]}"; do
                ppl=""
                [ "$(job_rc "$id")" = 0 ] && ppl=$(job_ppl "$id" "$L")
                printf ',%s' "$ppl"
            done
            echo
        done
    } > "$csv"
    cat "$md"
    say "table written to $md and $csv"
}

# ppl_main NAME TITLE [FIRST_COLUMN CSV_KEY_COLUMN [VAR...]]: train the rows (run_jobs), render the table
# (default columns Model and model) and exit with the table scripts' status: 0 every row has its numbers, 1 some
# row failed, 130/143 interrupted (--dry-run: 0 after the plan)
ppl_main() {
    local name=$1 title=$2 col1=${3:-Model} keycol=${4:-model} rc
    shift 2; [ $# -gt 0 ] && shift; [ $# -gt 0 ] && shift
    run_jobs; rc=$?
    ppl_render "$name" "$col1" "$keycol" "$title" "$@" || rc=1
    exit_if_interrupted
    exit "$rc"
}
