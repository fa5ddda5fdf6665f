# The run queue of every sweep script (sourced, not run): the settings, the options, a queue of seqtrain runs
# trained JOBS at a time and resumable, and the results of the runs. scripts/lib/ppl_table.sh (perplexity
# tables of language models) and scripts/lib/tasks.sh (the task sweeps' mixer rows and state sizes) build on it.
#
# A sweep script sets USAGE, sources this file (or one of those two), then
#   parse_opts "$@"            --help, --set KEY=VALUE (EXTRA_SETS), --dry-run (DRY_RUN); parse_opts --args
#                              keeps the other words in ARGS, parse_opts refuses them
#   setup runs/NAME [SCALES [MEDIUM_THREADS]]   the settings below; cd to the repository root
#   job ID ARG...              queue seqtrain ARG... as the run $RUNS/ID (run.dir, run.name, run.threads added)
#   run_jobs; rc=$?            train every run not finished yet (--dry-run: print the plan, exit 0)
#   exit_if_interrupted        after Ctrl-C or a TERM, whose trainings stopped with a checkpoint
# and reads the results: job_rc, json_acc, job_ppl.
#
# A run is one seqtrain run directory; it is finished when its final evaluation is there: eval/acc.json with
# an accuracy for a task run (data.task), eval/ppl.csv with a finite perplexity at every eval.contexts length
# for a language model. Every run's configuration is resolved first (seqtrain --print-config: a bad key fails
# there, before hours of training). A run directory whose config.json differs from it (the keys threads, dir
# and name aside) is never touched, a finished one is reused, one with a checkpoint is resumed (seqtrain
# --resume, or just evaluated again when only its evaluation is missing), any other is trained afresh. Two
# scripts may share runs (the same SEQ_OUT): a lock on the run directory makes the second one wait.
#
# Settings (environment):
#   SCALE=NAME         one of the script's scales (default small)
#   SEQ_OUT=DIR        output folder (default runs/NAME/$SCALE): runs/<id>/, logs/<id>.log and the tables
#   JOBS=N             runs trained at the same time, each its own process (default: tiny nproc, medium
#                      nproc / THREADS, else 1); with JOBS > 1 OMP_WAIT_POLICY=passive is set
#   THREADS=N          run.threads of every run (default: medium the script's MEDIUM_THREADS, else nproc / JOBS,
#                      at least 1); a run's numbers are the same only on the same kind of CPU with the same
#                      THREADS (docs/training.md#determinism)
#   BIN=DIR            where seqtrain and seqeval are (default bin; built with make tools when missing)
#   PROGRESS_EVERY=S   print the running trainings' progress every S seconds (default 60, 0 = off)
# Progress goes to stderr, tables to stdout.

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NPROC=$(nproc 2>/dev/null || echo 2)
PROG=$(basename "$0" .sh)

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit "${DIE_RC:-1}"; }

# an absolute path for a path given relative to the caller's working directory
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }

# the words of a command, quoted for a shell where needed
print_cmd() {
    local a out=""
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./=:,@+%-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
    done
    printf '%s\n' "${out# }"
}

# ----------------------------------------------------------------------------
# options and settings

EXTRA_SETS=(); DRY_RUN=0; ARGS=(); CMD_WORDS_=""
# parse_opts [--args] "$@": -h/--help (prints $USAGE), --set K=V, --dry-run; with --args the other words go to
# ARGS, without they are refused (exit 2). The words are kept in order for cmdline.
parse_opts() {
    local keep=0
    [ "${1:-}" = --args ] && { keep=1; shift; }
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) echo "$USAGE"; exit 0 ;;
            --set) [ $# -ge 2 ] || DIE_RC=2 die "--set needs KEY=VALUE"
                   EXTRA_SETS+=("$2"); CMD_WORDS_+=" --set $2"; shift 2 ;;
            --set=*) EXTRA_SETS+=("${1#--set=}"); CMD_WORDS_+=" --set ${1#--set=}"; shift ;;
            --dry-run) DRY_RUN=1; shift ;;
            -*) echo "$USAGE" >&2; DIE_RC=2 die "unknown option '$1'" ;;
            *) [ "$keep" = 1 ] || { echo "$USAGE" >&2; DIE_RC=2 die "unexpected argument '$1'"; }
               ARGS+=("$1"); CMD_WORDS_+=" $1"; shift ;;
        esac
    done
}

# check_scale [SCALES]: SCALE (default small) is one of SCALES (default "tiny small paper"), else exit 2 with
# "SCALE must be S1, S2 or S3 (got 'X')"
check_scale() {
    local sc=${1:-tiny small paper}
    SCALE=${SCALE:-small}
    case " $sc " in *" $SCALE "*) return 0 ;; esac
    local l=${sc% *}
    DIE_RC=2 die "SCALE must be ${l// /, } or ${sc##* } (got '$SCALE')"
}

# setup BASE [SCALES [MEDIUM_THREADS]]: read the settings (above; SEQ_OUT defaults to BASE/$SCALE), check the
# build, cd to the repository root. tiny is many short runs: JOBS defaults to nproc. medium is many short runs of
# a fixed thread count (MEDIUM_THREADS, default 1): THREADS defaults to it and JOBS to nproc / THREADS, so that
# every machine of one CPU kind trains the same runs (the same bits) whatever its number of cores.
setup() {
    check_scale "${2:-}"
    if [ -n "${SEQ_OUT:-}" ]; then OUTD=$(abspath "$SEQ_OUT"); else OUTD="$ROOT/$1/$SCALE"; fi
    if [ -n "${BIN:-}" ]; then BIND=$(abspath "$BIN"); else BIND="$ROOT/bin"; fi
    case "$SCALE" in
        tiny) NJOBS=${JOBS:-$NPROC} ;;
        medium) THREADS=${THREADS:-${3:-1}}
                case "$THREADS" in ''|*[!0-9]*|0) DIE_RC=2 die "THREADS must be a positive integer at SCALE=medium (got '$THREADS')" ;; esac
                local j=$((NPROC / THREADS)); [ "$j" -ge 1 ] || j=1; NJOBS=${JOBS:-$j} ;;
        *) NJOBS=${JOBS:-1} ;;
    esac
    case "$NJOBS" in ''|*[!0-9]*|0) DIE_RC=2 die "JOBS must be a positive integer (got '$NJOBS')" ;; esac
    local t=$((NPROC / NJOBS)); [ "$t" -ge 1 ] || t=1
    THREADS=${THREADS:-$t}
    case "$THREADS" in ''|*[!0-9]*) DIE_RC=2 die "THREADS must be a non-negative integer (got '$THREADS')" ;; esac
    PROGRESS_EVERY=${PROGRESS_EVERY:-60}
    # spinning OpenMP threads of several processes on the same cores slow each other down badly
    if [ "$NJOBS" -gt 1 ]; then export OMP_WAIT_POLICY=passive; fi
    cd "$ROOT" || exit 1
    if [ ! -x "$BIND/seqtrain" ]; then
        [ "$BIND" = "$ROOT/bin" ] || die "$BIND/seqtrain not found (BIN=$BIND)"
        say "bin/seqtrain is not built; running make tools"
        make -s tools >&2 || die "make tools failed"
    fi
    SEQTRAIN="$BIND/seqtrain"; SEQEVAL="$BIND/seqeval"; RUNS="$OUTD/runs"; LOGS="$OUTD/logs"
}

# ----------------------------------------------------------------------------
# provenance of a table

# cmdline VAR...: the command that reproduces this invocation: SCALE, each VAR the caller's environment sets
# (not the script's defaults), the script and its arguments
cmdline() {
    local s="SCALE=$SCALE" v
    for v in "$@"; do [ -n "$(printenv "$v")" ] && s+=" $v=\"$(printenv "$v")\""; done
    printf '%s\n' "$s scripts/$PROG.sh$CMD_WORDS_"
}

# commit_of [DIR...]: the checkout's short commit, noting uncommitted changes in the DIRs
commit_of() {
    local c l="" d n=0
    c=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ $# -gt 0 ] && [ -n "$(git -C "$ROOT" status --porcelain -- "$@" 2>/dev/null)" ]; then
        for d in "$@"; do
            n=$((n + 1))
            if [ "$n" = 1 ]; then l="$d/"; elif [ "$n" = $# ]; then l+=" or $d/"; else l+=", $d/"; fi
        done
        c+=" (with uncommitted changes in $l)"
    fi
    printf '%s\n' "$c"
}

cpu_name() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1; }

# run_host: the CPU and the thread count of the runs (a run's bits depend on both)
run_host() { printf '%s, THREADS=%s per run' "$(cpu_name)" "$THREADS"; }

# generated_by "DIR ..." VAR...: the provenance line under a table: the command (cmdline VAR...), the date,
# the commit (commit_of DIR...), the CPU and the settings of the queue
generated_by() {
    local dirs=$1 host; shift
    host=$(cpu_name)
    # shellcheck disable=SC2086  # DIRs are words
    echo "Generated by \`$(cmdline "$@")\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(commit_of $dirs);" \
         "${host:-unknown CPU}, $NPROC cores, JOBS=$NJOBS, THREADS=$THREADS."
}

# ----------------------------------------------------------------------------
# results of a run

# cfg_get FILE KEY: the value of a key of a section of a resolved config (seqtrain --print-config), unquoted
cfg_get() {
    awk -v k="$2" 'BEGIN { FS = "\t" } $3 == "\"" k "\":" { v = $4; sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }' "$1"
}
# cfg_task_ FILE: data.task.kind of a resolved config (none, or nothing, for a language model)
cfg_task_() {
    awk 'BEGIN { FS = "\t" } $3 == "\"task\":" { on = 1; next }
         on && $4 == "\"kind\":" { v = $5; sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }' "$1"
}

# json_acc FILE [FORMAT]: the "accuracy" of a JSON file such as RUN_DIR/eval/acc.json, printf'd with FORMAT
# (default %.4f); nothing when the file or a number is missing
json_acc() {
    [ -f "$1" ] || return 0
    sed -n 's/.*"accuracy": *\([-+0-9.eE]*\).*/\1/p' "$1" | awk -v f="${2:-%.4f}" 'NF && $1 + 0 == $1 { printf f "\n", $1; exit }'
}

# job_ppl ID L: the test perplexity at context L of run ID (RUN_DIR/eval/ppl.csv; nothing when missing)
job_ppl() { [ -f "$RUNS/$1/eval/ppl.csv" ] && awk -F, -v L="$2" 'NR > 1 && $1 == L { printf "%.2f", $5; exit }' "$RUNS/$1/eval/ppl.csv"; }

# job_rc ID: how run ID ended in this invocation: 0 (it has its result), 130/143 (interrupted), invalid
# (its config does not resolve), conflict (its run directory holds another configuration), incomplete, the
# exit status of a failed training, or nothing (not run)
job_rc() { cat "$STATE_DIR/$1.rc" 2>/dev/null; }

# does RUN_DIR hold a complete checkpoint?
has_ckpt_() {
    [ -f "$1/latest" ] && return 0
    compgen -G "$1/ckpt-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]" >/dev/null
}

# is_done_ RUN_DIR CFG: does RUN_DIR hold the final evaluation of the run the resolved config CFG describes?
is_done_() {
    case "$(cfg_task_ "$2")" in
        ""|none) ;;
        *) [ -n "$(json_acc "$1/eval/acc.json")" ]; return ;;
    esac
    [ -f "$1/eval/ppl.csv" ] || return 1
    awk -F, -v want="$(cfg_get "$2" contexts)" '
        BEGIN { n = split(want, w, ","); for (i = 1; i <= n; i++) need[w[i]] = 1 }
        NR > 1 && ($1 in need) && $5 + 0 == $5 && $5 != "nan" && $5 != "inf" && $5 > 0 { delete need[$1] }
        END { for (k in need) exit 1; exit 0 }' "$1/eval/ppl.csv"
}

# result_ I: the result of run I for its progress line
result_() {
    local id=${JOB_IDS[$1]} cfg="$STATE_DIR/${JOB_IDS[$1]}.cfg" c L ppl=""
    case "$(cfg_task_ "$cfg")" in
        ""|none) ;;
        *) printf 'test accuracy %s' "$(json_acc "$RUNS/$id/eval/acc.json")"; return ;;
    esac
    IFS=, read -ra c <<< "$(cfg_get "$cfg" contexts)"
    for L in "${c[@]}"; do ppl+=" L=$L $(job_ppl "$id" "$L")"; done
    printf 'test ppl%s' "$ppl"
}

# ----------------------------------------------------------------------------
# the queue

JOB_IDS=(); JOB_ARGS=(); declare -A JOB_INDEX_=()
# job ID ARG...: queue a run, seqtrain ARG... (without run.dir, run.name, run.threads). Queueing an ID again
# with the same arguments is a no-op (a run shared by two figures is trained once); with others, an error.
job() {
    local id=$1 s="" a; shift
    for a in "$@"; do s+="$a"$'\n'; done
    if [ -n "${JOB_INDEX_[$id]+x}" ]; then
        [ "${JOB_ARGS[${JOB_INDEX_[$id]}]}" = "$s" ] || die "run $id queued twice with different arguments"
        return 0
    fi
    JOB_INDEX_[$id]=${#JOB_IDS[@]}; JOB_IDS+=("$id"); JOB_ARGS+=("$s")
}

# job_args I: the queued arguments of run I, into the array JOB_ARGV
job_args() {
    local a
    JOB_ARGV=()
    while IFS= read -r a; do [ -n "$a" ] && JOB_ARGV+=("$a"); done <<< "${JOB_ARGS[$1]}"
}

# the seqtrain arguments of a fresh run I, into JOB_ARGV
train_args_() {
    job_args "$1"
    JOB_ARGV+=(--set "run.dir=$RUNS" --set "run.name=${JOB_IDS[$1]}" --set "run.threads=$THREADS")
}

# a resolved config without the keys that may differ between invocations of the same run
cfg_key_() { grep -Ev $'^\t\t"(threads|dir|name)":' "$1"; }

# the state of run I: done | resume | fresh | conflict | invalid (its resolved config in $STATE_DIR/<id>.cfg)
state_() {
    local id=${JOB_IDS[$1]} d="$RUNS/${JOB_IDS[$1]}"
    local cfg="$STATE_DIR/$id.cfg"
    [ -s "$cfg" ] || { echo invalid; return; }
    if has_ckpt_ "$d" || is_done_ "$d" "$cfg"; then
        if [ ! -f "$d/config.json" ] || ! cmp -s <(cfg_key_ "$d/config.json") <(cfg_key_ "$cfg"); then
            echo conflict; return
        fi
        if is_done_ "$d" "$cfg"; then echo done; else echo resume; fi
    else
        echo fresh
    fi
}

# one run, in the background: lock the run directory (another script may train the same run), then train it
# (or resume it, or just evaluate a finished one again); the outcome goes to $STATE_DIR/<id>.rc
worker_() {
    local i=$1 tag=$2 id=${JOB_IDS[$1]} d="$RUNS/${JOB_IDS[$1]}" log="$LOGS/${JOB_IDS[$1]}.log" st rc t0
    # outlive Ctrl-C and a TERM to the process group, to record how the training ended (seqtrain installs
    # its own handlers: it writes a checkpoint and exits 130/143)
    trap '' INT TERM
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$RUNS/.$id.lock"
        if ! flock -n 9; then
            say "$tag $id: another process is training this run; waiting for it"
            flock 9
        fi
    fi
    st=$(state_ "$i")
    case "$st" in
        done) say "$tag $id: finished earlier, reused ($d)"; echo 0 > "$STATE_DIR/$id.rc"; return 0 ;;
        conflict) echo conflict > "$STATE_DIR/$id.rc"; return 0 ;;
        resume) say "$tag $id: resuming (log: $log)"
                "$SEQTRAIN" --resume "$d" >>"$log" 2>&1 & ;;
        *) train_args_ "$i"
           say "$tag $id: training (log: $log)"
           echo "\$ $(print_cmd "$SEQTRAIN" "${JOB_ARGV[@]}")" >>"$log"
           "$SEQTRAIN" "${JOB_ARGV[@]}" >>"$log" 2>&1 & ;;
    esac
    echo $! > "$STATE_DIR/$id.pid"
    t0=$SECONDS
    wait $!; rc=$?
    rm -f "$STATE_DIR/$id.pid"
    if [ "$rc" = 0 ] && ! is_done_ "$d" "$STATE_DIR/$id.cfg"; then rc=incomplete; fi
    echo "$rc" > "$STATE_DIR/$id.rc"
    if [ "$rc" = 0 ]; then
        say "$tag $id: done in $((SECONDS - t0))s; $(result_ "$i")"
    elif [ "$rc" = 130 ] || [ "$rc" = 143 ]; then
        say "$tag $id: stopped with a checkpoint (exit $rc); run the same command again to resume"
        return "$rc"   # tells run_jobs to start nothing more
    else
        say "$tag $id: FAILED (exit $rc) after $((SECONDS - t0))s; end of $log:"
        tail -n 5 "$log" | sed 's/^/    /' >&2
    fi
}

# every PROGRESS_EVERY seconds, the latest progress line of each running training
ticker_() {
    local f id line
    local -A last=()
    trap '' INT
    while sleep "$PROGRESS_EVERY" && kill -0 "$$" 2>/dev/null; do
        for f in "$STATE_DIR"/*.pid; do
            [ -f "$f" ] || continue
            id=$(basename "$f" .pid)
            line=$(tail -c 4000 "$LOGS/$id.log" 2>/dev/null | tr '\r' '\n' | grep -E '^(step|resuming)' | tail -n 1)
            [ "${last[$id]:-}" = "$line" ] && continue   # seqtrain writes a progress line every 10 s
            last[$id]=$line
            say "   ... $id: ${line:-starting}"
        done
    done
}

INTERRUPTED=0
on_signal_() {  # INT reaches the trainings from the terminal already; TERM is forwarded to them
    INTERRUPTED=$1
    if [ "$1" = 143 ]; then
        local f
        for f in "$STATE_DIR"/*.pid; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    fi
}

# wait_one_ PID...: wait for one of the running workers to end; its pid leaves RUNNING (a worker ended by a
# signal, 130/143, sets INTERRUPTED: Ctrl-C reaches the trainings, maybe not this script)
wait_one_() {
    local done_pid="" st p
    local -a left=()
    wait -n -p done_pid "${RUNNING[@]}"; st=$?
    [ -n "${done_pid:-}" ] || return 0   # interrupted by a signal: wait again
    if [ "$st" = 130 ] || [ "$st" = 143 ]; then INTERRUPTED=$st; fi
    for p in "${RUNNING[@]}"; do [ "$p" = "$done_pid" ] || left+=("$p"); done
    RUNNING=("${left[@]+"${left[@]}"}")
}

# run_jobs: every queued run that is not finished, JOBS at a time, started in the order JOB_ORDER when the
# script sets it (a permutation of the run indices 0..n-1: with runs of very different lengths, the long ones
# first keep every job slot busy to the end), else as queued. --dry-run: the state of every run, then the
# commands of those still to do on stdout, and exit 0. Returns 0 when every run has its result, else 1
# (JOBS_FAILED of them have none); after Ctrl-C or a TERM, INTERRUPTED is 130 or 143.
run_jobs() {
    local n=${#JOB_IDS[@]} i id st err
    STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/runq.XXXXXX") || die "cannot create a temporary folder"
    trap 'rm -rf "$STATE_DIR"' EXIT
    if [ "$DRY_RUN" = 0 ]; then mkdir -p "$RUNS" "$LOGS" || die "cannot create $OUTD"; fi
    say "SCALE=$SCALE SEQ_OUT=$OUTD JOBS=$NJOBS THREADS=$THREADS${OMP_WAIT_POLICY:+ OMP_WAIT_POLICY=$OMP_WAIT_POLICY}; $n runs"
    # resolve every config first: a bad key or a missing mixer fails here, before hours of training
    local -a states=()
    for ((i = 0; i < n; i++)); do
        id=${JOB_IDS[$i]}
        train_args_ "$i"
        if ! "$SEQTRAIN" "${JOB_ARGV[@]}" --print-config > "$STATE_DIR/$id.cfg" 2> "$STATE_DIR/$id.err"; then
            : > "$STATE_DIR/$id.cfg"
        fi
        if [ -s "$STATE_DIR/$id.cfg" ] && [ ! -e "$RUNS/$id" ]; then st=fresh; else st=$(state_ "$i"); fi
        states+=("$st")
        case "$st" in
            invalid) echo invalid > "$STATE_DIR/$id.rc"
                     err=$(head -n 3 "$STATE_DIR/$id.err")
                     say "[$((i + 1))/$n] $id: FAILED: invalid config, not run: $err"
                     [ "$DRY_RUN" = 1 ] || cp "$STATE_DIR/$id.err" "$LOGS/$id.log" ;;
            conflict) echo conflict > "$STATE_DIR/$id.rc"
                      say "[$((i + 1))/$n] $id: $RUNS/$id holds a run with another configuration; not touched" \
                          "(remove it, or use another SEQ_OUT). Differences (< existing, > wanted):"
                      diff <(cfg_key_ "$RUNS/$id/config.json" 2>/dev/null) <(cfg_key_ "$STATE_DIR/$id.cfg") \
                          | grep '^[<>]' | head -n 10 | sed 's/^/    /' >&2 ;;
            *) say "[$((i + 1))/$n] $id: $st" ;;
        esac
    done
    if [ "$DRY_RUN" = 1 ]; then
        for ((i = 0; i < n; i++)); do
            case "${states[$i]}" in
                fresh) train_args_ "$i"; print_cmd "$SEQTRAIN" "${JOB_ARGV[@]}" ;;
                resume) print_cmd "$SEQTRAIN" --resume "$RUNS/${JOB_IDS[$i]}" ;;
            esac
        done
        exit 0
    fi
    local ticker=""
    if [ "$PROGRESS_EVERY" != 0 ]; then ticker_ & ticker=$!; fi
    trap 'on_signal_ 130' INT
    trap 'on_signal_ 143' TERM
    local -a order=()
    RUNNING=()
    if [ -n "${JOB_ORDER+x}" ]; then order=("${JOB_ORDER[@]}"); else for ((i = 0; i < n; i++)); do order+=("$i"); done; fi
    for i in "${order[@]}"; do
        [ "$INTERRUPTED" = 0 ] || break
        case "${states[$i]}" in invalid|conflict) continue ;; esac
        while [ "${#RUNNING[@]}" -ge "$NJOBS" ]; do wait_one_; done
        [ "$INTERRUPTED" = 0 ] || break
        worker_ "$i" "[$((i + 1))/$n]" &
        RUNNING+=($!)
    done
    while [ "${#RUNNING[@]}" -gt 0 ]; do wait_one_; done   # wait returns early on a signal: wait again
    trap - INT TERM
    [ -n "$ticker" ] && { kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null; }
    JOBS_FAILED=0
    for ((i = 0; i < n; i++)); do
        [ "$(job_rc "${JOB_IDS[$i]}")" = 0 ] || JOBS_FAILED=$((JOBS_FAILED + 1))
    done
    [ "$INTERRUPTED" = 0 ] || say "interrupted; run the same command again to resume"
    [ "$JOBS_FAILED" = 0 ] || { say "$JOBS_FAILED of $n runs have no result"; return 1; }
}

# exit_if_interrupted: after run_jobs, end the script with 130/143 when Ctrl-C or a TERM stopped the trainings
exit_if_interrupted() { [ "$INTERRUPTED" = 0 ] || exit "$INTERRUPTED"; }
