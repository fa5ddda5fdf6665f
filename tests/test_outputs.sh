#!/usr/bin/env bash
# Outputs never write through a device, a FIFO or a link, and never destroy an input (issue 53 item 1): seqtok
# encode/decode and seqtrain's run directory refuse such a target, naming it, and leave it as it was.
#   BIN=bin bash tests/test_outputs.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
BIN=$(cd "$BIN" && pwd)
export OMP_NUM_THREADS=2
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch outputs
MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc data/wikitext-2/wiki.valid.tokens.zst | head -n 300 > "$W/t.txt"
cp "$W/t.txt" "$W/t.keep"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/t.shard" > /dev/null

# --- a device or a FIFO as the output: refused, and still a device or a FIFO (as root, a rename over a copy of
# /dev/null's node would have replaced it with a regular file, as it would /dev/null itself)
mkfifo "$W/fifo"
expect_refused "encode --output FIFO: refused" 20 "fifo: is a FIFO (named pipe), not a regular file" -- \
    "$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/fifo"
check "... and the FIFO is still a FIFO" test -p "$W/fifo"
expect_refused "decode --output FIFO: refused at once, not blocked" 20 "fifo: is a FIFO" -- \
    "$BIN/seqtok" decode --model "$MODEL" --input "$W/t.shard" --output "$W/fifo"
if mknod "$W/null" c 1 3 2>/dev/null; then
    expect_refused "encode --output a character device (/dev/null's numbers): refused" 20 "null: is a character device" -- \
        "$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/null"
    check "... and the device is still a character device" test -c "$W/null"
else
    ok "encode --output a character device (skipped: mknod needs root)"
fi

# --- the output is one of the inputs: refused, the input unchanged
expect_refused "encode --input X --output X: refused" 20 "is also an input" -- \
    "$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/t.txt"
check "... and X is untouched" cmp -s "$W/t.txt" "$W/t.keep"
ln -s t.txt "$W/alias.shard"
expect_refused "encode --output a link to the input: refused" 20 "is also an input" -- \
    "$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/alias.shard"
check "... and the input is untouched" cmp -s "$W/t.txt" "$W/t.keep"
expect_refused "decode --output the shard it reads: refused" 20 "is also an input" -- \
    "$BIN/seqtok" decode --model "$MODEL" --input "$W/t.shard" --output "$W/t.shard"
cp "$W/t.txt" "$W/p.model"
expect_refused "train --model-prefix whose .model is the input: refused" 20 "is also the --input" -- \
    "$BIN/seqtok" train --input "$W/p.model" --model-prefix "$W/p" --vocab-size 300
check "... and the input is untouched" cmp -s "$W/p.model" "$W/t.keep"

# --- a symbolic link planted in a run directory: never followed
printf 'precious\n' > "$W/victim"
cat > "$W/tiny.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5},
  "data": {"train": "$W/t.shard"},
  "model": {"d_model": 16, "n_layers": 1, "mixer": {"kind": "attention", "heads": 2}},
  "train": {"batch_size": 2, "seq_len": 16, "steps": 2, "ckpt_every": 2}
}
JSON
for f in log.jsonl config.json; do
    rm -rf "$W/runs"; mkdir -p "$W/runs/r"; ln -s "$W/victim" "$W/runs/r/$f"
    run timeout 60 "$BIN/seqtrain" --config "$W/tiny.json" --set run.name=r --quiet
    DETAIL="exit $RC, stderr: $(show "$W/err")"
    check "a $f link planted in the run directory: refused" \
        eval '[ "$RC" = 1 ] && grep -q "error: .*/r/$f: is a symbolic link; refusing to write through it" "$W/err"'
    check "... and the file it points to keeps its bytes" eval '[ "$(cat "$W/victim")" = precious ]'
done
rm -rf "$W/runs"
run "$BIN/seqtrain" --config "$W/tiny.json" --set run.name=r --quiet
check_status "$RC" "the run trains where nothing is planted" "exit $RC: $(show "$W/err")"
test_done
