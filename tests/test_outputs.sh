#!/usr/bin/env bash
# Outputs never write through a device, a FIFO or a link, and never destroy an input (issue 53 item 1): seqtok
# encode/decode and seqtrain's run directory refuse such a target, naming it, and leave it as it was. One writer
# per run directory (item 2): a second seqtrain on a run in use stops at once naming the holder, a killed one
# leaves nothing locked, and a run.name that leaves run.dir or a run path too long for its files is refused.
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
cp "$W/t.shard" "$W/d.shard"
expect_refused "decode --output the shard it reads: refused" 20 "is also an input" -- \
    "$BIN/seqtok" decode --model "$MODEL" --input "$W/d.shard" --output "$W/d.shard"
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

# --- one writer per run directory: runs held stopped (SIGSTOP) while others try their directories
cat > "$W/long.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5},
  "data": {"train": "$W/t.shard"},
  "model": {"d_model": 16, "n_layers": 1, "mixer": {"kind": "attention", "heads": 2}},
  "train": {"batch_size": 2, "seq_len": 16, "steps": 1000000, "ckpt_every": 5, "log_every": 1}
}
JSON
"$BIN/seqtrain" --config "$W/long.json" --set run.name=busy --quiet > /dev/null 2>&1 &
BUSY=$!
for _ in $(seq 300); do [ -d "$W/runs/busy/ckpt-00000005" ] && break; sleep 0.05; done
kill -STOP "$BUSY"
cp "$W/runs/busy/log.jsonl" "$W/busy.log"
expect_refused "--resume of a run in use: refused at once, naming the holder" 20 "pid $BUSY on host $(hostname)" -- \
    "$BIN/seqtrain" --resume "$W/runs/busy" --quiet
check "... naming the run directory" grep -qF "$W/runs/busy is in use by another process" "$W/err"
check "... and the run's log is untouched" cmp -s "$W/busy.log" "$W/runs/busy/log.jsonl"
# no checkpoint before a million steps: the lock alone stops the second fresh run
"$BIN/seqtrain" --config "$W/long.json" --set run.name=fresh --set train.ckpt_every=1000000 --quiet \
    > /dev/null 2> "$W/fresh.err" &
FRESH=$!
for _ in $(seq 300); do [ -s "$W/runs/fresh/lock" ] && break; sleep 0.05; done
kill -STOP "$FRESH"
expect_refused "a fresh run with the same run.name as one in use: refused at once" 20 "pid $FRESH on host" -- \
    "$BIN/seqtrain" --config "$W/long.json" --set run.name=fresh --quiet
kill -CONT "$FRESH"
sleep 0.5
kill -INT "$FRESH"
wait "$FRESH"; RC=$?
n=$(grep -c '"loss"' "$W/runs/fresh/log.jsonl")
last=$(grep '"loss"' "$W/runs/fresh/log.jsonl" | tail -n 1 | sed 's/^{"step": \([0-9]*\),.*/\1/')
DETAIL="exit $RC, $n loss lines, the last of step $last: $(show "$W/fresh.err")"
check "the first run, continued, stops on SIGINT (exit 130) with its whole log (a line for every step)" \
    eval '[ "$RC" = 130 ] && [ "$n" -ge 1 ] && [ "$n" = "$last" ]'
kill -KILL "$BUSY"; wait "$BUSY" 2>/dev/null
run "$BIN/seqtrain" --resume "$W/runs/busy" --quiet --stop-after 3
DETAIL="exit $RC: $(show "$W/err")"
check "a killed run's lock is gone with it: --resume continues it (to --stop-after 3: exit 130)" test "$RC" = 130

# --- run.name must be a folder of run.dir; the run path must leave room for its files
expect_refused "run.name \"../../x\" (leaves run.dir): refused" 20 'run.name "../../x" is not a folder name' -- \
    "$BIN/seqtrain" --config "$W/tiny.json" --set "run.dir=$W/runs/a" --set run.name=../../x --quiet
check "... and nothing is written outside run.dir" test ! -e "$W/x"
expect_refused "run.name \"..\": refused" 20 'run.name ".." is not a folder name' -- \
    "$BIN/seqtrain" --config "$W/tiny.json" --set run.name=.. --quiet
D470=$(printf 'd%.0s' $(seq 470))
expect_refused "a run path of over 1 KB (run.dir and run.name of 470 bytes each): refused up front, the reason whole" \
    20 "choose a shorter run.dir or run.name" -- \
    "$BIN/seqtrain" --config "$W/tiny.json" --set "run.dir=$W/$D470" --set "run.name=$D470" --quiet
check "... before anything is written" test ! -e "$W/$D470"
test_done
