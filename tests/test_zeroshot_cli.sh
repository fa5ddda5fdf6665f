#!/usr/bin/env bash
# seqeval --zeroshot end to end on the committed tiny checkpoint (tests/data/zeroshot, as a run directory):
# the three tables and their content, --out, --limit, the paper's column order, the progress line, bad input
# (unknown task with did-you-mean, a tokenizer that is not the run's, missing sets, no --run), and
# scripts/zeroshot_table.sh over two runs.
#   BIN=bin bash tests/test_zeroshot_cli.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
export OMP_NUM_THREADS=2
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch zeroshot
refused() {  # refused WHAT NEEDLE CMD...: non-zero exit and NEEDLE in stderr
    local what=$1 needle=$2; shift 2
    run "$@"
    if [ "$RC" -ne 0 ] && grep -qF -- "$needle" "$W/err"; then ok "$what"
    else not_ok "$what" "rc $RC, stderr: $(head -c 300 "$W/err")"; fi
}

# the committed checkpoint as a run: config.json and one checkpoint
for r in a b; do
    mkdir -p "$W/$r/ckpt-00000150"
    cp tests/data/zeroshot/config.json "$W/$r/"
    cp tests/data/zeroshot/model.safetensors "$W/$r/ckpt-00000150/"
done

run "$BIN/seqeval" --run "$W/a" --zeroshot piqa,lambada,copa --limit 5
check "--zeroshot piqa,lambada,copa --limit 5 succeeds" test "$RC" -eq 0
for f in zeroshot.md zeroshot.csv zeroshot.json; do check "writes RUN/eval-zeroshot/$f" test -s "$W/a/eval-zeroshot/$f"; done
check "stdout: Table 4's header, the paper's tasks first, then Average, then the extras" \
    grep -q '^| Model | LAMB. | PIQA | Average (2 tasks) | COPA |$' "$W/out"
check "stdout: the metric row" grep -q '^| | acc ↑ | acc ↑ | acc ↑ | acc ↑ |$' "$W/out"
check "stdout: a row for the model" grep -q '^| a | ' "$W/out"
check "stderr: a progress line with items/s" grep -q 'piqa .* 5/5 items .*items/s' "$W/err"
check "the per-task table has items, of, chance" grep -q '^| piqa | 5 | 1838 | acc | ' "$W/a/eval-zeroshot/zeroshot.md"
check "zeroshot.csv: a header and 3 tasks" test "$(wc -l < "$W/a/eval-zeroshot/zeroshot.csv")" -eq 4
check "zeroshot.csv: lambada has a perplexity and no acc_norm" \
    grep -qE '^a,lambada,LAMB\.,acc,5,5153,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,,,0\.0000,[0-9.]+,' "$W/a/eval-zeroshot/zeroshot.csv"
check "zeroshot.json parses, 3 tasks, acc_norm of lambada null, chance of piqa 0.5" python3 -c "
import json, sys
d = json.load(open('$W/a/eval-zeroshot/zeroshot.json'))
t = {x['task']: x for x in d['tasks']}
sys.exit(not (len(t) == 3 and t['lambada']['acc_norm'] is None and t['piqa']['chance'] == 0.5 and t['copa']['items'] == 5))"

run "$BIN/seqeval" --run "$W/b" --zeroshot copa --out "$W/copa_all"
check "--out DIR, no --limit: every item (copa: 100)" grep -q '^b,copa,COPA,acc,100,100,' "$W/copa_all/zeroshot.csv"
# the same items score the same whatever other tasks run with them
a_piqa=$(grep '^a,piqa,' "$W/a/eval-zeroshot/zeroshot.csv" | cut -d, -f5-13)
run "$BIN/seqeval" --run "$W/b" --zeroshot piqa --limit 5
check "a task's numbers do not depend on the other tasks of the call" \
    test "$(grep '^b,piqa,' "$W/b/eval-zeroshot/zeroshot.csv" | cut -d, -f5-13)" = "$a_piqa"

run bash scripts/zeroshot_table.sh "$W/a" "$W/b"
check "zeroshot_table.sh: succeeds on two runs" test "$RC" -eq 0
check "zeroshot_table.sh: a row per run" test "$(grep -c "^| $W/[ab] |" "$W/out")" -eq 2
check "zeroshot_table.sh: the chance row" grep -q '^| chance | 0.00 | 50.00 |' "$W/out"
run "$BIN/seqeval" --run "$W/b" --zeroshot piqa,arc_easy --limit 2 --out "$W/p"
run bash scripts/zeroshot_table.sh "$W/p"
check "zeroshot_table.sh: a --out folder, paper tasks only: one Average column" \
    grep -q '^| Model | PIQA | Arc-E | Average |$' "$W/out"
refused "zeroshot_table.sh: a folder that is not a run" "not a run directory" bash scripts/zeroshot_table.sh "$W/none"

refused "unknown task: did-you-mean" "did you mean 'hellaswag'" "$BIN/seqeval" --run "$W/a" --zeroshot helaswag
refused "--zeroshot needs --run" "--zeroshot needs --run" "$BIN/seqeval" --zeroshot piqa --plan
refused "missing sets name --eval-data" "--eval-data" "$BIN/seqeval" --run "$W/a" --zeroshot piqa --eval-data "$W/nosets"
# hostile set files (issue 53): a FIFO, a .zst that expands a thousandfold, an endless line; each refused at
# once, naming the file (timeout: a FIFO blocked the read for ever, the others grew until the kernel's killer)
mkdir -p "$W/hostile"
mkfifo "$W/hostile/piqa.jsonl.zst"
timeout 20 "$BIN/seqeval" --run "$W/a" --zeroshot piqa --eval-data "$W/hostile" > "$W/out" 2> "$W/err"; RC=$?
DETAIL="exit $RC, stderr: $(show "$W/err")"
check "a FIFO as a set file: refused at once" \
    eval '[ "$RC" = 1 ] && grep -q "piqa.jsonl.zst: is a FIFO (named pipe), not a regular file" "$W/err"'
rm "$W/hostile/piqa.jsonl.zst"
yes '{"query": "Q: a?", "choices": ["b", "c"], "gold": 0}' | head -c 300M | zstd -q -1 -o "$W/hostile/piqa.jsonl.zst"
vm_limited "$BIN/seqeval" timeout 60 "$BIN/seqeval" --run "$W/a" --zeroshot piqa --eval-data "$W/hostile" > "$W/out" \
    2> "$W/err"; RC=$?
DETAIL="exit $RC, stderr: $(show "$W/err"), $(stat -c %s "$W/hostile/piqa.jsonl.zst") bytes compressed"
check "a set of $(( $(stat -c %s "$W/hostile/piqa.jsonl.zst") / 1024 )) KB compressed, 300 MB decoded: refused (more than 256 MiB)" \
    eval '[ "$RC" = 1 ] && grep -q "piqa.jsonl.zst: holds more than 256 MiB of text" "$W/err"'
rm "$W/hostile/piqa.jsonl.zst"
head -c 2000000 /dev/zero | tr '\0' a | zstd -q -o "$W/hostile/piqa.jsonl.zst"
vm_limited "$BIN/seqeval" timeout 60 "$BIN/seqeval" --run "$W/a" --zeroshot piqa --eval-data "$W/hostile" > "$W/out" \
    2> "$W/err"; RC=$?
DETAIL="exit $RC, stderr: $(show "$W/err")"
check "a set whose line is 2 MB: refused, naming file and line (at most 1 MiB a line)" \
    eval '[ "$RC" = 1 ] && grep -q "piqa.jsonl.zst: line 1 is longer than 1048576 bytes" "$W/err"'
rm "$W/hostile/piqa.jsonl.zst"
printf '{"query": "Q: a?", "choices": ["b", "c"], "gold": 0.7}\n' > "$W/hostile/piqa.jsonl.zst"
refused "\"gold\": 0.7 (not an index): refused, naming file and line" 'piqa.jsonl.zst:1: needs an integer field "gold"' \
    "$BIN/seqeval" --run "$W/a" --zeroshot piqa --eval-data "$W/hostile"
# a tokenizer that is not the run's: another vocabulary
zstd -dc data/wikitext-2/wiki.valid.tokens.zst | head -n 400 > "$W/small.txt"
"$BIN/seqtok" train --input "$W/small.txt" --model-prefix "$W/tok" --vocab-size 400 --model-type bpe >/dev/null 2>&1
refused "a tokenizer with another vocabulary is refused" "not trained with this tokenizer" \
    "$BIN/seqeval" --run "$W/a" --zeroshot piqa --tokenizer "$W/tok.model"
refused "a run without data.tokenizer and no --tokenizer" "--tokenizer" \
    "$BIN/seqeval" --run "$W/a" --zeroshot piqa --tokenizer ""

test_done
