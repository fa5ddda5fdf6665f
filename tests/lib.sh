# What the shell tests share (sourced from the repository root, as they run): "ok - ..." / "not ok - ..."
# lines with their counts (tests/run_all.sh counts the lines), a scratch directory removed at exit unless
# KEEP is set, and the summary line whose status ends the test.
#   source tests/lib.sh || exit 2
#   test_scratch generate                  # W = a fresh directory /tmp/seqtrain-generate.XXXXXX
#   ok "what held"; not_ok "what failed" "what was seen instead"
#   test_done                              # the last command: "N passed, M failed"; fails if one failed
# the checks and runs most tests are written in
#   check "what holds" CMD...              # ok when CMD succeeds (its output discarded); DETAIL=... says more
#   check_status $? "what" "detail"        # ok when a status taken already is 0
#   run CMD...                             # stdout -> $OUT (default $W/out), stderr -> $ERR ($W/err), status -> $RC
#   expect_refused WHAT SECS SUB -- CMD... # CMD fails within SECS with one stderr line holding SUB
#   show FILE                              # its start on one line, for a message; md_rows FILE: a Markdown table's rows
# and the small-training helpers of the tests that train every mixer (wiki_shard, mixer_kinds, last_loss), and
# the kernel sets a build runs on this CPU (has_kernel_set, kernel_sets).
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
not_ok() { FAIL=$((FAIL + 1)); echo "not ok - $1 ($2)"; }
test_scratch() {
    W=$(mktemp -d "${TMPDIR:-/tmp}/seqtrain-$1.XXXXXX") || exit 2
    trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
}
test_done() {
    echo "$PASS passed, $FAIL failed" >&2
    [ "$FAIL" -eq 0 ]
}

# check WHAT CMD...: CMD's status decides, its output is discarded (conditions on files and outputs already
# produced); the failure line shows CMD, or $DETAIL when set (DETAIL is cleared after each check)
DETAIL=""
check() {
    local what=$1; shift
    if "$@" >/dev/null 2>&1; then ok "$what"; else not_ok "$what" "${DETAIL:-condition failed: $*}"; fi
    DETAIL=""
}
# check_status RC WHAT DETAIL: ok when the status RC (taken already) is 0
check_status() { if [ "$1" -eq 0 ]; then ok "$2"; else not_ok "$2" "$3"; fi; }
# run CMD...: stdout -> $OUT, stderr -> $ERR (default $W/out, $W/err), status -> $RC
run() { "$@" >"${OUT:-$W/out}" 2>"${ERR:-$W/err}"; RC=$?; }
# asan_build BINARY: 0 when BINARY is linked with AddressSanitizer (its shadow memory needs more address space
# than a `ulimit -v` leaves, and its quarantine makes a peak RSS say nothing of the program's own)
asan_build() { ldd "$1" 2>/dev/null | grep -q libasan; }
# vm_limited BINARY CMD...: CMD with 4 GB of address space (`ulimit -v`: a runaway allocation fails instead of
# taking the machine), or unlimited when BINARY is an ASan build, which cannot start under the limit
vm_limited() {
    local bin=$1; shift
    if asan_build "$bin"; then "$@"; else (ulimit -v 4000000; exec "$@"); fi
}
# show FILE: the first 400 bytes of FILE on one line (newlines shown as '|'), for a message
show() { head -c 400 "$1" | tr '\n' '|'; }
# expect_refused WHAT SECONDS SUBSTRING -- CMD...: CMD ends within SECONDS (not blocked, not unbounded) with status 1
# and one stderr line holding SUBSTRING
expect_refused() {
    local what=$1 secs=$2 sub=$3; shift 4
    timeout "$secs" "$@" >"$W/out" 2>"$W/err"; local rc=$?
    if [ "$rc" = 124 ]; then not_ok "$what" "still running after $secs s (blocked or unbounded)"
    elif [ "$rc" != 1 ]; then not_ok "$what" "exit $rc, stderr: $(show "$W/err")"
    elif [ "$(wc -l < "$W/err")" != 1 ] || ! grep -qF -- "$sub" "$W/err"; then
        not_ok "$what" "stderr lacks '$sub' or is not one line: $(show "$W/err")"
    else ok "$what"; fi
}
# md_rows [--all] FILE: the rows of the first Markdown table of FILE (after its header and rule), one per line,
# the cells trimmed and joined by '|' ("label|c1|c2|..."); with --all, of every table (each ends at a blank line)
md_rows() {
    local all=0
    [ "$1" = --all ] && { all=1; shift; }
    awk -F'|' -v all="$all" '
        /^\|---/ { on = 1; next }
        on && /^\|/ { s = ""; for (i = 2; i < NF; i++) { gsub(/^ +| +$/, "", $i); s = s (i > 2 ? "|" : "") $i }; print s; next }
        on && all && /^$/ { on = 0; next }
        on && !all { exit }' "$1"
}

# wiki_shard BINDIR LINES: $W/train.shard, the first LINES lines of WikiText-2's validation text tokenised
wiki_shard() {
    zstd -dc data/wikitext-2/wiki.valid.tokens.zst | head -n "$2" > "$W/train.txt"
    "$1/seqtok" encode --quiet --model data/tokenizer/wikitext2_bpe8192.model --input "$W/train.txt" \
        --output "$W/train.shard" > /dev/null
}
# mixer_kinds BINDIR CONFIG: the mixers this build has, from seqtrain's unknown-kind message ("... mixers:
# attention, rfa, ...)"); nothing when it lists none
mixer_kinds() {
    "$1/seqtrain" --config "$2" --check --set model.mixer.kind=no-such-mixer 2>&1 |
        sed -n 's/.*mixers: \(.*\))$/\1/p' | tr -d ','
}
# last_loss LOG: the loss on the last line of a log.jsonl, every digit (Python's repr)
last_loss() { python3 -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readlines()[-1])["loss"]))' "$1"; }

# has_kernel_set BINDIR SET: whether the build in BINDIR runs SET on this CPU. seqtrain checks SEQ_KERNELS before
# anything else and refuses a set the CPU lacks (a probe that never calls an nn op would accept avx512 on an
# AVX2-only CPU, and every test run with it would then fail on its first op)
has_kernel_set() { SEQ_KERNELS=$2 "$1/seqtrain" --help > /dev/null 2>&1; }
# kernel_sets BINDIR: every set it runs here, best first (the names bench/matmul and seqtrain print)
kernel_sets() {
    local k
    for k in avx512 avx2 generic; do has_kernel_set "$1" "$k" && echo "$k"; done
    return 0
}
