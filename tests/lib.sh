# What the shell tests share (sourced from the repository root, as they run): "ok - ..." / "not ok - ..."
# lines with their counts (tests/run_all.sh counts the lines), a scratch directory removed at exit unless
# KEEP is set, and the summary line whose status ends the test.
#   source tests/lib.sh || exit 2
#   test_scratch generate                  # W = a fresh directory /tmp/seqtrain-generate.XXXXXX
#   ok "what held"; not_ok "what failed" "what was seen instead"
#   test_done                              # the last command: "N passed, M failed"; fails if one failed
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
