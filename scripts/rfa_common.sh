# Shared part of scripts/rfa_table{1,2,3}.sh (sourced, not run): settings, the run queue, resumable
# parallel training runs and the Markdown/CSV tables.
#
# A table script declares its rows (rfa_row), optionally a separator (rfa_separator), calls rfa_run_all
# and then rfa_render. Every row is one seqtrain run in $SEQ_OUT/runs/<id>/ whose final perplexity table
# (RUN_DIR/eval/ppl.csv, written by seqtrain at the end of training from eval.contexts) gives the row.
#
# Settings (environment):
#   SCALE=tiny|small|paper   tiny: a few steps of a 2-layer d32 model on the paper configs (pipeline check);
#                            small: configs/rfa/cpu/*.json; paper: configs/rfa/*.json       (default small)
#   SEQ_OUT=DIR                  output folder (default runs/rfa_tables/$SCALE)
#   JOBS=N                   runs trained at the same time, as separate processes (default: tiny nproc, else 1)
#   THREADS=N                run.threads of every run (default max(1, nproc / JOBS))
#   BIN=DIR                  where seqtrain is (default bin)
#   PROGRESS_EVERY=S         print the progress of running trainings every S seconds (default 60, 0 = off)
#   RFA_ROWS=ID,ID,...       train and show only these rows (ids as in the table script, e.g. b1_rope,b2_alibi:
#                            the attention baselines on a GPU build with BIN=build/cuda/bin --set run.device=cuda)
# Progress goes to stderr; the table goes to stdout and to $SEQ_OUT/<table>.md and $SEQ_OUT/<table>.csv.

set -u -o pipefail

RFA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RFA_NPROC=$(nproc 2>/dev/null || echo 2)

RFA_PROG=rfa
rfa_say() { printf '%s: %s\n' "$RFA_PROG" "$*" >&2; }
rfa_die() { printf '%s: error: %s\n' "$RFA_PROG" "$*" >&2; exit "${RFA_DIE_RC:-1}"; }

# an absolute path for a path given relative to the caller's working directory
rfa_abspath_() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }

# the words of a command, quoted for a shell where needed
rfa_print_cmd_() {
    local a out=""
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./=:,@+%-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
    done
    printf '%s\n' "${out# }"
}

# JSON string literal of $1 (paths for --set data.train=[...])
rfa_json_str() {
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}
    printf '"%s"' "$s"
}

# rfa_setup: read the settings, check the tools, cd to the repository root (after rfa_parse_opts). The scales
# a script knows are RFA_SCALES (default "tiny small paper"; mad_table.sh adds medium). tiny and medium are many
# short runs, so JOBS defaults to nproc there (medium: nproc / 2); medium's THREADS defaults to 2 whatever JOBS
# is, so that every machine of one CPU kind trains the same runs (the same bits) whatever its number of cores
# (2, not 1: the longest medium runs, Gated DeltaNet's fuzzy ICR and selective copy, took 21-23 minutes on 2
# threads of a busy 64-core Xeon, longer than the half hour the table has on one).
rfa_setup() {
    SCALE=${SCALE:-small}
    local sc=${RFA_SCALES:-tiny small paper}
    case " $sc " in *" $SCALE "*) ;; *) local l=${sc% *}
        RFA_DIE_RC=2 rfa_die "SCALE must be ${l// /, } or ${sc##* } (got '$SCALE')" ;; esac
    if [ -n "${SEQ_OUT:-}" ]; then RFA_OUT=$(rfa_abspath_ "$SEQ_OUT"); else RFA_OUT="$RFA_ROOT/runs/rfa_tables/$SCALE"; fi
    if [ -n "${BIN:-}" ]; then RFA_BIN=$(rfa_abspath_ "$BIN"); else RFA_BIN="$RFA_ROOT/bin"; fi
    case "$SCALE" in
        tiny) RFA_JOBS=${JOBS:-$RFA_NPROC} ;;
        medium) RFA_JOBS=${JOBS:-$(( RFA_NPROC > 1 ? RFA_NPROC / 2 : 1 ))} ;;
        *) RFA_JOBS=${JOBS:-1} ;;
    esac
    case "$RFA_JOBS" in ''|*[!0-9]*|0) RFA_DIE_RC=2 rfa_die "JOBS must be a positive integer (got '$RFA_JOBS')" ;; esac
    local t=$((RFA_NPROC / RFA_JOBS)); [ "$t" -ge 1 ] || t=1
    [ "$SCALE" = medium ] && t=2
    RFA_THREADS=${THREADS:-$t}
    case "$RFA_THREADS" in ''|*[!0-9]*) RFA_DIE_RC=2 rfa_die "THREADS must be a non-negative integer (got '$RFA_THREADS')" ;; esac
    RFA_PROGRESS_EVERY=${PROGRESS_EVERY:-60}
    # spinning OpenMP threads of several processes on the same cores slow each other down badly
    if [ "$RFA_JOBS" -gt 1 ]; then export OMP_WAIT_POLICY=passive; fi
    cd "$RFA_ROOT" || exit 1

    if [ ! -x "$RFA_BIN/seqtrain" ]; then
        if [ "$RFA_BIN" = "$RFA_ROOT/bin" ]; then
            rfa_say "bin/seqtrain is not built; running make tools"
            make -s tools >&2 || rfa_die "make tools failed"
        else
            rfa_die "$RFA_BIN/seqtrain not found (BIN=$RFA_BIN)"
        fi
    fi
    RFA_SEQTRAIN="$RFA_BIN/seqtrain"
    RFA_RUNS="$RFA_OUT/runs"
    RFA_LOGS="$RFA_OUT/logs"
}

RFA_EXTRA_SETS=(); RFA_DATA_SETS=(); RFA_DRY_RUN=0; RFA_POSITIONAL=()
RFA_IDS=(); RFA_LABELS=(); RFA_CSVKEYS=(); RFA_CONFIGS=(); RFA_KINDS=(); RFA_ROWSETS=(); RFA_SEP_AT=()

# rfa_parse_opts PROG "$@": --help (prints $RFA_USAGE), --set K=V, --dry-run; other arguments go to
# RFA_POSITIONAL. The command line is recorded in RFA_CMDLINE for the table's provenance line.
rfa_parse_opts() {
    RFA_PROG=$1; shift
    RFA_CMDLINE="scripts/$RFA_PROG.sh"
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) echo "$RFA_USAGE"; exit 0 ;;
            --set) [ $# -ge 2 ] || RFA_DIE_RC=2 rfa_die "--set needs KEY=VALUE"
                   RFA_EXTRA_SETS+=("$2"); RFA_CMDLINE+=" --set $2"; shift 2 ;;
            --set=*) RFA_EXTRA_SETS+=("${1#--set=}"); RFA_CMDLINE+=" --set ${1#--set=}"; shift ;;
            --dry-run) RFA_DRY_RUN=1; shift ;;
            -*) echo "$RFA_USAGE" >&2; RFA_DIE_RC=2 rfa_die "unknown option '$1'" ;;
            *) RFA_POSITIONAL+=("$1"); RFA_CMDLINE+=" $1"; shift ;;
        esac
    done
}

# the bundled WikiText-2 shards (made by `make data`) when a config needs them
rfa_need_wikitext2() {
    local d="$RFA_ROOT/build/data/wikitext2"
    if [ ! -f "$d/train.shard" ] || [ ! -f "$d/valid.shard" ] || [ ! -f "$d/test.shard" ]; then
        rfa_say "the WikiText-2 shards are missing in build/data/wikitext2/; running make data"
        make -s data >&2 || rfa_die "make data failed"
    fi
}

# config file of a config name at the current scale
rfa_config_path() {
    case "$SCALE" in
        small) printf 'configs/rfa/cpu/%s.json\n' "$1" ;;
        *)     printf 'configs/rfa/%s.json\n' "$1" ;;
    esac
}

# the scale's overrides for a mixer kind (attention|rfa), one --set value per line
rfa_scale_sets_() {
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

# rfa_row ID LABEL CONFIG_NAME KIND [CSV_KEY [SET...]]: a row of the table, trained from CONFIG_NAME
# (configs/rfa[/cpu]/CONFIG_NAME.json) with the extra --set values SET...
rfa_row() {
    local id=$1 label=$2 cfg=$3 kind=$4 key=${5:-$2}
    shift 4; [ $# -gt 0 ] && shift
    if [ -n "${RFA_ROWS:-}" ] && [[ ",$RFA_ROWS," != *",$id,"* ]]; then return 0; fi
    RFA_IDS+=("$id"); RFA_LABELS+=("$label"); RFA_CSVKEYS+=("$key"); RFA_CONFIGS+=("$cfg"); RFA_KINDS+=("$kind")
    local s="" v
    for v in "$@"; do s+="$v"$'\n'; done
    RFA_ROWSETS+=("$s")
}

# rfa_rows_select ROW...: each ROW "id|label|config name|kind|csv key[|set...]" (rfa_row's arguments); the
# caller's setting ROWS=id,... must name only these (exit 2 otherwise) and keeps only them (default all)
rfa_rows_select() {
    local known="" r id
    local -a f
    for r in "$@"; do known+="${r%%|*} "; done
    for id in ${ROWS//,/ }; do
        case " $known" in *" $id "*) ;; *) RFA_DIE_RC=2 rfa_die "ROWS: unknown row '$id' (known: $known)" ;; esac
    done
    for r in "$@"; do
        IFS='|' read -ra f <<< "$r"
        [ -z "${ROWS:-}" ] || case ",$ROWS," in *",${f[0]},"*) ;; *) continue ;; esac
        rfa_row "${f[@]}"
    done
}

# rfa_main TABLE TITLE: train the rows (rfa_run_all), render the table (rows = models) and exit with the table
# scripts' status: 0 every row has its numbers, 1 some row failed, 130/143 interrupted (--dry-run: 0 after the plan)
rfa_main() {
    local rc
    rfa_run_all; rc=$?
    [ "$RFA_DRY_RUN" = 1 ] && exit 0
    rfa_render "$1" Model model "$2" || rc=1
    [ "$RFA_INTERRUPTED" != 0 ] && { rfa_say "interrupted; run the same command again to resume"; exit "$RFA_INTERRUPTED"; }
    [ "$rc" = 0 ] || { rfa_say "$RFA_FAILED of ${#RFA_IDS[@]} rows have no result"; exit 1; }
    exit 0
}

# a separator line (e.g. "Structural Ablations (Relative to M2)") before the next row
rfa_separator() { RFA_SEP_AT+=("${#RFA_IDS[@]}:$1"); }

# the seqtrain arguments of row i (a fresh run), into the array RFA_ARGS
rfa_args_() {
    local i=$1 v
    RFA_ARGS=(--config "$(rfa_config_path "${RFA_CONFIGS[$i]}")")
    while IFS= read -r v; do [ -n "$v" ] && RFA_ARGS+=(--set "$v"); done < <(rfa_scale_sets_ "${RFA_KINDS[$i]}")
    for v in "${RFA_DATA_SETS[@]+"${RFA_DATA_SETS[@]}"}"; do RFA_ARGS+=(--set "$v"); done
    while IFS= read -r v; do [ -n "$v" ] && RFA_ARGS+=(--set "$v"); done <<< "${RFA_ROWSETS[$i]}"
    for v in "${RFA_EXTRA_SETS[@]+"${RFA_EXTRA_SETS[@]}"}"; do RFA_ARGS+=(--set "$v"); done
    RFA_ARGS+=(--set "run.dir=$RFA_RUNS" --set "run.name=${RFA_IDS[$i]}" --set "run.threads=$RFA_THREADS")
}

# a resolved config without the keys that may differ between invocations of the same run
rfa_cfg_key_() { grep -Ev $'^\t\t"(threads|dir|name)":' "$1"; }

# value of a key of a section in a resolved config (quotes removed), e.g. rfa_cfg_get FILE contexts
rfa_cfg_get() {
    awk -v k="$2" 'BEGIN { FS = "\t" } $3 == "\"" k "\":" { v = $4; sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }' "$1"
}

# does RUN_DIR hold a complete checkpoint?
rfa_has_ckpt_() {
    [ -f "$1/latest" ] && return 0
    compgen -G "$1/ckpt-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]" >/dev/null
}

# is RUN_DIR/eval/ppl.csv a complete table for the contexts "L1,L2,..." with finite perplexities?
rfa_is_done_() {
    local csv="$1/eval/ppl.csv"
    [ -f "$csv" ] || return 1
    awk -F, -v want="$2" '
        BEGIN { n = split(want, w, ","); for (i = 1; i <= n; i++) need[w[i]] = 1 }
        NR > 1 && ($1 in need) && $5 + 0 == $5 && $5 != "nan" && $5 != "inf" && $5 > 0 { delete need[$1] }
        END { for (k in need) exit 1; exit 0 }' "$csv"
}

# perplexity of context L in RUN_DIR/eval/ppl.csv (empty when missing)
rfa_ppl_() { [ -f "$1/eval/ppl.csv" ] && awk -F, -v L="$2" 'NR > 1 && $1 == L { printf "%.2f", $5; exit }' "$1/eval/ppl.csv"; }

# the state of row i: done | resume | fresh | conflict | invalid (resolved config in $RFA_STATE/<id>.cfg)
rfa_state_() {
    local i=$1 id=${RFA_IDS[$1]} d="$RFA_RUNS/${RFA_IDS[$1]}"
    [ -s "$RFA_STATE/$id.cfg" ] || { echo invalid; return; }
    if rfa_has_ckpt_ "$d"; then
        if [ ! -f "$d/config.json" ] || ! cmp -s <(rfa_cfg_key_ "$d/config.json") <(rfa_cfg_key_ "$RFA_STATE/$id.cfg"); then
            echo conflict; return
        fi
        if rfa_is_done_ "$d" "$(rfa_cfg_get "$RFA_STATE/$id.cfg" contexts)"; then echo done; else echo resume; fi
    else
        echo fresh
    fi
}

# the result of row I's finished run RUN_DIR for the progress line (a sourcing script may redefine it,
# as scripts/mad_table.sh does for accuracy)
rfa_result_() {  # rfa_result_ I RUN_DIR
    local c ppl="" L
    IFS=, read -ra c <<< "$(rfa_cfg_get "$RFA_STATE/${RFA_IDS[$1]}.cfg" contexts)"
    for L in "${c[@]}"; do ppl+=" L=$L $(rfa_ppl_ "$2" "$L")"; done
    printf 'test ppl%s' "$ppl"
}

# one row, run in the background: lock the run directory (another table script may train the same run),
# then train it (or resume it, or just re-evaluate a finished one); the outcome goes to $RFA_STATE/<id>.rc
rfa_worker_() {
    local i=$1 tag=$2 id=${RFA_IDS[$1]} d="$RFA_RUNS/${RFA_IDS[$1]}" log="$RFA_LOGS/${RFA_IDS[$1]}.log" st rc t0
    # outlive Ctrl-C and a TERM to the process group, to record how the training ended (seqtrain installs
    # its own handlers: it writes a checkpoint and exits 130/143)
    trap '' INT TERM
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$RFA_RUNS/.$id.lock"
        if ! flock -n 9; then
            rfa_say "$tag $id: another process is training this run; waiting for it"
            flock 9
        fi
    fi
    st=$(rfa_state_ "$i")
    case "$st" in
        done) rfa_say "$tag $id: finished earlier, reused ($d)"; echo 0 > "$RFA_STATE/$id.rc"; return 0 ;;
        conflict) echo conflict > "$RFA_STATE/$id.rc"; return 0 ;;
        resume) rfa_say "$tag $id: resuming ${RFA_LABELS[$i]} (log: $log)"
                "$RFA_SEQTRAIN" --resume "$d" >>"$log" 2>&1 & ;;
        *) rfa_args_ "$i"
           rfa_say "$tag $id: training ${RFA_LABELS[$i]} (log: $log)"
           echo "\$ $(rfa_print_cmd_ "$RFA_SEQTRAIN" "${RFA_ARGS[@]}")" >>"$log"
           "$RFA_SEQTRAIN" "${RFA_ARGS[@]}" >>"$log" 2>&1 & ;;
    esac
    echo $! > "$RFA_STATE/$id.pid"
    t0=$SECONDS
    wait $!; rc=$?
    rm -f "$RFA_STATE/$id.pid"
    if [ "$rc" = 0 ] && ! rfa_is_done_ "$d" "$(rfa_cfg_get "$RFA_STATE/$id.cfg" contexts)"; then rc=incomplete; fi
    echo "$rc" > "$RFA_STATE/$id.rc"
    if [ "$rc" = 0 ]; then
        rfa_say "$tag $id: done in $((SECONDS - t0))s; $(rfa_result_ "$i" "$d")"
    elif [ "$rc" = 130 ] || [ "$rc" = 143 ]; then
        rfa_say "$tag $id: stopped with a checkpoint (exit $rc); run the same command again to resume"
        return "$rc"   # tells rfa_run_all to start nothing more
    else
        rfa_say "$tag $id: FAILED (exit $rc) after $((SECONDS - t0))s; end of $log:"
        tail -n 5 "$log" | sed 's/^/    /' >&2
    fi
}

# every PROGRESS_EVERY seconds, the latest progress line of each running training
rfa_ticker_() {
    local f id line
    local -A last=()
    trap '' INT
    while sleep "$RFA_PROGRESS_EVERY" && kill -0 "$$" 2>/dev/null; do
        for f in "$RFA_STATE"/*.pid; do
            [ -f "$f" ] || continue
            id=$(basename "$f" .pid)
            line=$(tail -c 4000 "$RFA_LOGS/$id.log" 2>/dev/null | tr '\r' '\n' | grep -E '^(step|resuming)' | tail -n 1)
            [ "${last[$id]:-}" = "$line" ] && continue   # seqtrain writes a progress line every 10 s
            last[$id]=$line
            rfa_say "   ... $id: ${line:-starting}"
        done
    done
}

RFA_INTERRUPTED=0
rfa_on_signal_() {  # INT reaches the trainings from the terminal already; TERM is forwarded to them
    RFA_INTERRUPTED=$1
    if [ "$1" = 143 ]; then
        local f
        for f in "$RFA_STATE"/*.pid; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    fi
}

# train every row that is not finished, JOBS at a time, started in the order RFA_ORDER when the script sets it (a
# permutation of the row indices 0..n-1: with runs of very different lengths, the long ones first keep every job
# slot busy to the end), else as declared. Returns 0 when every row has its table.
rfa_run_all() {
    local n=${#RFA_IDS[@]} i id st err
    RFA_STATE=$(mktemp -d "${TMPDIR:-/tmp}/rfa_tables.XXXXXX") || rfa_die "cannot create a temporary folder"
    trap 'rm -rf "$RFA_STATE"' EXIT
    if [ "$RFA_DRY_RUN" = 0 ]; then mkdir -p "$RFA_RUNS" "$RFA_LOGS" || rfa_die "cannot create $RFA_OUT"; fi
    rfa_say "SCALE=$SCALE SEQ_OUT=$RFA_OUT JOBS=$RFA_JOBS THREADS=$RFA_THREADS${OMP_WAIT_POLICY:+ OMP_WAIT_POLICY=$OMP_WAIT_POLICY}; $n runs"
    # resolve every config first: a bad key or a missing mixer fails here, before hours of training
    RFA_STATES=()
    for ((i = 0; i < n; i++)); do
        id=${RFA_IDS[$i]}
        rfa_args_ "$i"
        if ! "$RFA_SEQTRAIN" "${RFA_ARGS[@]}" --print-config > "$RFA_STATE/$id.cfg" 2> "$RFA_STATE/$id.err"; then
            : > "$RFA_STATE/$id.cfg"
        fi
        st=$(rfa_state_ "$i")
        RFA_STATES+=("$st")
        case "$st" in
            invalid) echo invalid > "$RFA_STATE/$id.rc"
                     err=$(head -n 3 "$RFA_STATE/$id.err")
                     rfa_say "[$((i + 1))/$n] $id: INVALID CONFIG, not run: $err"
                     [ "$RFA_DRY_RUN" = 1 ] || cp "$RFA_STATE/$id.err" "$RFA_LOGS/$id.log" ;;
            conflict) echo conflict > "$RFA_STATE/$id.rc"
                      rfa_say "[$((i + 1))/$n] $id: $RFA_RUNS/$id holds a run with another configuration; not touched" \
                          "(remove it, or use another SEQ_OUT). Differences (< existing, > wanted):"
                      diff <(rfa_cfg_key_ "$RFA_RUNS/$id/config.json" 2>/dev/null) <(rfa_cfg_key_ "$RFA_STATE/$id.cfg") \
                          | grep '^[<>]' | head -n 10 | sed 's/^/    /' >&2 ;;
            *) rfa_say "[$((i + 1))/$n] $id: $st" ;;
        esac
    done
    if [ "$RFA_DRY_RUN" = 1 ]; then
        for ((i = 0; i < n; i++)); do
            case "${RFA_STATES[$i]}" in
                fresh) rfa_args_ "$i"; rfa_print_cmd_ "$RFA_SEQTRAIN" "${RFA_ARGS[@]}" ;;
                resume) rfa_print_cmd_ "$RFA_SEQTRAIN" --resume "$RFA_RUNS/${RFA_IDS[$i]}" ;;
            esac
        done
        return 0
    fi
    local ticker=""
    if [ "$RFA_PROGRESS_EVERY" != 0 ]; then rfa_ticker_ & ticker=$!; fi
    trap 'rfa_on_signal_ 130' INT
    trap 'rfa_on_signal_ 143' TERM
    local -a running=() order=()
    local done_pid p st
    if [ -n "${RFA_ORDER+x}" ]; then order=("${RFA_ORDER[@]}"); else for ((i = 0; i < n; i++)); do order+=("$i"); done; fi
    for i in "${order[@]}"; do
        [ "$RFA_INTERRUPTED" = 0 ] || break
        case "${RFA_STATES[$i]}" in invalid|conflict) continue ;; esac
        while [ "${#running[@]}" -ge "$RFA_JOBS" ]; do
            done_pid=""
            wait -n -p done_pid "${running[@]}"; st=$?
            [ -n "${done_pid:-}" ] || continue   # interrupted by a signal
            # a training stopped by a signal (Ctrl-C reaches the trainings, maybe not this script)
            if [ "$st" = 130 ] || [ "$st" = 143 ]; then RFA_INTERRUPTED=$st; fi
            local -a left=()
            for p in "${running[@]}"; do [ "$p" = "${done_pid:-}" ] || left+=("$p"); done
            running=("${left[@]+"${left[@]}"}")
        done
        [ "$RFA_INTERRUPTED" = 0 ] || break
        rfa_worker_ "$i" "[$((i + 1))/$n]" &
        running+=($!)
    done
    while [ "${#running[@]}" -gt 0 ]; do   # wait returns early on a signal: wait again
        done_pid=""
        wait -n -p done_pid "${running[@]}"; st=$?
        [ -n "${done_pid:-}" ] || continue
        if [ "$st" = 130 ] || [ "$st" = 143 ]; then RFA_INTERRUPTED=$st; fi
        local -a left=()
        for p in "${running[@]}"; do [ "$p" = "${done_pid:-}" ] || left+=("$p"); done
        running=("${left[@]+"${left[@]}"}")
    done
    trap - INT TERM
    [ -n "$ticker" ] && { kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null; }
    local bad=0
    for ((i = 0; i < n; i++)); do
        id=${RFA_IDS[$i]}
        [ "$(cat "$RFA_STATE/$id.rc" 2>/dev/null)" = 0 ] || bad=$((bad + 1))
    done
    RFA_FAILED=$bad
    [ "$bad" = 0 ]
}

# the lines under a table's title that say what its scale is (a sourcing script may redefine it, as
# scripts/selrope_lm.sh does for its configs), and the remark after the data line
rfa_scale_note_() {  # rfa_scale_note_ TRAIN_LEN "L1,L2,..."
    case "$SCALE" in
        paper) echo "Scale \`paper\`: the paper protocol (configs/rfa/*.json), trained at T = $1, test perplexity at L = ${2//,/, }." ;;
        small) echo "Scale \`small\`: CPU-sized configs (configs/rfa/cpu/*.json: 4 layers, d = 128, 1 epoch), trained at T = $1;" \
                    "L = ${2//,/, } are 1×, 2×, 4×, 8× the training length, as the paper's 512–4096 are for T = 512." ;;
        tiny)  echo "Scale \`tiny\`: a pipeline check (2 layers, d = 32, 4 steps, T = $1, L = ${2//,/, }, 2 windows per length); the numbers mean nothing." ;;
    esac
}
RFA_DATA_NOTE="Perplexities are not comparable with the paper's (WikiText-103 / BabyLM, GPT-2 BPE)."

# rfa_render NAME FIRST_COLUMN CSV_KEY_COLUMN TITLE: the table of every row (in declaration order, with the
# separators) as Markdown on stdout and in $SEQ_OUT/NAME.md, and as CSV in $SEQ_OUT/NAME.csv. Contexts and the
# training length come from the first row's resolved config.
rfa_render() {
    local name=$1 col1=$2 keycol=$3 title=$4 n=${#RFA_IDS[@]} i j id L cell ppl cfg="" seq ctx c md csv
    for ((i = 0; i < n; i++)); do
        [ -s "$RFA_STATE/${RFA_IDS[$i]}.cfg" ] && { cfg="$RFA_STATE/${RFA_IDS[$i]}.cfg"; break; }
    done
    [ -n "$cfg" ] || { rfa_say "no valid config among the rows: no table"; return 1; }
    seq=$(rfa_cfg_get "$cfg" seq_len)
    ctx=$(rfa_cfg_get "$cfg" contexts)
    IFS=, read -ra c <<< "$ctx"
    local commit host
    commit=$(git -C "$RFA_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    [ -n "$(git -C "$RFA_ROOT" status --porcelain -- src configs 2>/dev/null)" ] && commit+=" (with uncommitted changes in src/ or configs/)"
    host=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
    md="$RFA_OUT/$name.md"; csv="$RFA_OUT/$name.csv"
    {
        echo "$title"
        echo
        rfa_scale_note_ "$seq" "$ctx"
        echo "Data: $(rfa_cfg_data_ "$cfg"). $RFA_DATA_NOTE"
        echo "Generated by \`SCALE=$SCALE $RFA_CMDLINE\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit;" \
             "${host:-unknown CPU}, $RFA_NPROC cores, JOBS=$RFA_JOBS, THREADS=$RFA_THREADS."
        echo
        printf '| %s |' "$col1"; for L in "${c[@]}"; do printf ' L=%s |' "$L"; done; echo
        printf '|---|'; for L in "${c[@]}"; do printf -- '---:|'; done; echo
        for ((i = 0; i < n; i++)); do
            for j in "${RFA_SEP_AT[@]+"${RFA_SEP_AT[@]}"}"; do
                if [ "${j%%:*}" = "$i" ]; then
                    printf '| **%s** |' "${j#*:}"; for L in "${c[@]}"; do printf ' |'; done; echo
                fi
            done
            id=${RFA_IDS[$i]}
            printf '| %s |' "${RFA_LABELS[$i]}"
            for L in "${c[@]}"; do
                case "$(cat "$RFA_STATE/$id.rc" 2>/dev/null)" in
                    0) cell=$(rfa_ppl_ "$RFA_RUNS/$id" "$L") ;;
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
            [ "$(cat "$RFA_STATE/${RFA_IDS[$i]}.rc" 2>/dev/null)" = 0 ] || failed+=("${RFA_IDS[$i]}")
        done
        if [ "${#failed[@]}" -gt 0 ]; then
            echo; echo "Without a result: ${failed[*]} (logs in $RFA_LOGS/)."
        fi
    } > "$md"
    {
        printf 'id,%s' "$keycol"; for L in "${c[@]}"; do printf ',ppl_%s' "$L"; done; echo
        for ((i = 0; i < n; i++)); do
            id=${RFA_IDS[$i]}
            printf '%s,%s' "$id" "${RFA_CSVKEYS[$i]}"
            for L in "${c[@]}"; do
                ppl=""
                [ "$(cat "$RFA_STATE/$id.rc" 2>/dev/null)" = 0 ] && ppl=$(rfa_ppl_ "$RFA_RUNS/$id" "$L")
                printf ',%s' "$ppl"
            done
            echo
        done
    } > "$csv"
    cat "$md"
    rfa_say "table written to $md and $csv"
}

# a short description of the data of a resolved config: "train X; val Y; test Z"
rfa_cfg_data_() {
    awk 'BEGIN { FS = "\t" } /^\t"data":/ { on = 1; next } on && /^\t}/ { exit }
         on && $3 ~ /^"(train|val|test)":$/ { k = $3; gsub(/[":]/, "", k); v = $4; sub(/,$/, "", v); gsub(/[]["]/, "", v)
                                              out = out (out ? "; " : "") k " " (v == "" ? "(none)" : v) }
         END { print out }' "$1"
}
