# What the shell tests share (sourced from the repository root, as they run): "ok - ..." / "not ok - ..."
# lines with their counts (tests/run_all.sh counts the lines), a scratch directory removed at exit unless
# KEEP is set, and the summary line whose status ends the test.
#   source tests/lib.sh || exit 2
#   test_scratch generate                  # W = a fresh directory /tmp/seqtrain-generate.XXXXXX
#   ok "what held"; not_ok "what failed" "what was seen instead"
#   test_done                              # the last command: "N passed, M failed"; fails if one failed
# and the small-training helpers of the tests that train every mixer (wiki_shard, mixer_kinds, last_loss).
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
