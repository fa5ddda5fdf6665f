#!/usr/bin/env bash
# No hangs, bounded work on hostile input (issue 24 item 4): a FIFO (or any non-regular file) as a shard, a
# config, a config's "base" or a checkpoint file is refused at once instead of blocking; --config /dev/zero
# and a config over 16 MiB are refused; config loading is linear (a 64,000-item list, two files of 64,000
# keys merged) and a --set key path is capped at 64 segments; seqtok encode cuts a very long line into
# bounded pieces (4 MB in seconds, same token count as SentencePiece on the whole line when the line has
# spaces, and the shard decodes back to the line byte for byte).
#   BIN=bin bash tests/test_bounded_input.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
BIN=$(cd "$BIN" && pwd)
export OMP_NUM_THREADS=2
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch bounded
MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"

# --- FIFOs and devices never block
mkfifo "$W/fifo.shard" "$W/fifo.json" "$W/fifo.npy" "$W/fifo.model"
expect_refused "seqtok info on a FIFO: refused at once, naming it" 10 "is a FIFO (named pipe), not a regular file" -- \
    "$BIN/seqtok" info "$W/fifo.shard"
expect_refused "seqeval --data on a FIFO: refused at once" 10 "not a regular file" -- \
    "$BIN/seqeval" --plan --context 16 --data "$W/fifo.shard"
printf 'hello world\n' > "$W/t.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/t.txt" --output "$W/t.shard" >/dev/null
cat > "$W/child.json" <<JSON
{"base": "fifo.json", "data": {"train": "$W/t.shard"}}
JSON
cat > "$W/fifo_data.json" <<JSON
{"data": {"train": "$W/fifo.shard"}, "model": {"d_model": 16, "n_layers": 1, "mixer": {"kind": "attention", "heads": 2}},
 "train": {"batch_size": 1, "seq_len": 4, "steps": 1}}
JSON
expect_refused "seqtrain --check with a FIFO as config base: refused at once" 10 "fifo.json: is a FIFO" -- \
    "$BIN/seqtrain" --config "$W/child.json" --check
expect_refused "seqtrain --check with a FIFO as --config: refused at once" 10 "is a FIFO" -- \
    "$BIN/seqtrain" --config "$W/fifo.json" --check
expect_refused "seqtrain --check with a FIFO as data.train: refused at once" 10 "fifo.shard: is a FIFO" -- \
    "$BIN/seqtrain" --config "$W/fifo_data.json" --check
expect_refused "seqtok encode with a FIFO as --model: refused at once" 10 "fifo.model: is a FIFO" -- \
    "$BIN/seqtok" encode --quiet --model "$W/fifo.model" --input "$W/t.txt" --output "$W/x.shard"
expect_refused "--config /dev/zero: refused at once (a character device)" 10 "is a character device, not a regular file" -- \
    "$BIN/seqtrain" --config /dev/zero --check
python3 -c "
import sys
open(sys.argv[1], 'w').write('{\"run\": {\"name\": \"x\"}' + ' ' * (17 << 20) + '}')" "$W/huge.json"
expect_refused "a 17 MiB config: refused (larger than 16 MiB)" 20 "larger than 16 MiB" -- \
    "$BIN/seqtrain" --config "$W/huge.json" --check

# --- config handling is linear (a lookup of each value in a list would be quadratic: seconds at these sizes)
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
json.dump({"run": {"name": "x"}, "unused": list(range(64000))}, open(w + "/list.json", "w"))
json.dump({"unused": {"k%d" % i: i for i in range(64000)}}, open(w + "/keys_base.json", "w"))
json.dump({"base": "keys_base.json", "unused": {"k%d" % i: -i for i in range(64000)}}, open(w + "/keys.json", "w"))
PY
expect_refused "a 64,000-item list loads in well under 5 s (then its key is unknown)" 5 "unknown key 'unused'" -- \
    "$BIN/seqtrain" --config "$W/list.json" --check
expect_refused "two files of 64,000 keys merge in well under 5 s" 5 "unknown key 'unused'" -- \
    "$BIN/seqtrain" --config "$W/keys.json" --check
K=$(python3 -c "print('.'.join(['a'] * 8000))")
expect_refused "--set with a key of 8,000 dotted names: refused at once (at most 64)" 5 "at most 64" -- \
    "$BIN/seqtrain" --config "$W/list.json" --set "$K=1" --check
K=$(python3 -c "print('.'.join(['a'] * 60))")
echo '{"run": {"name": "x"}}' > "$W/small.json"
expect_refused "--set with a key of 60 names is walked as usual (unknown key 'a')" 5 "unknown key 'a'" -- \
    "$BIN/seqtrain" --config "$W/small.json" --set "$K=1" --check

# --- a base named again is loaded once: 20 files each naming the next twice (2^20 loads when each mention loaded)
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
for i in range(20):
    json.dump({"base": ["b%d.json" % (i + 1)] * 2} if i < 19 else {"unused": 1}, open("%s/b%d.json" % (w, i), "w"))
PY
expect_refused "20 files each naming the next twice load in well under 5 s (each once)" 5 "unknown key 'unused'" -- \
    "$BIN/seqtrain" --config "$W/b0.json" --check

# --- seqtok encode: a line is at most 64 MiB (/dev/zero is one endless line of NULs), and a SIGTERM inside a
# long line ends it at once (the line comes from a FIFO whose writer holds it open, so the read waits)
vm_limited "$BIN/seqtok" timeout 30 "$BIN/seqtok" encode --quiet --model "$MODEL" --input /dev/zero \
    --output "$W/zero.shard" > "$W/out" 2> "$W/err"; RC=$?
DETAIL="exit $RC, stderr: $(show "$W/err")"
check "encode --input /dev/zero: refused at the 64 MiB line cap, naming file and line" \
    eval '[ "$RC" = 1 ] && grep -q "/dev/zero: line 1 is longer than 67108864 bytes" "$W/err"'
mkfifo "$W/long.fifo"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/long.fifo" --output "$W/long.shard" > /dev/null 2> "$W/term.err" &
ENC=$!
{ head -c 8000000 /dev/zero | tr '\0' a; exec sleep 60; } > "$W/long.fifo" &
WRITER=$!
for _ in $(seq 200); do compgen -G "$W/long.shard.tmp.*" > /dev/null && break; sleep 0.05; done
sleep 1
kill -TERM "$ENC"
timeout 10 tail --pid="$ENC" -f /dev/null; gone=$?
kill -KILL "$ENC" 2>/dev/null; wait "$ENC"; RC=$?
kill "$WRITER" 2>/dev/null; wait "$WRITER" 2>/dev/null
DETAIL="ended within 10 s: $([ "$gone" = 0 ] && echo yes || echo no), exit $RC, stderr: $(show "$W/term.err")"
check "SIGTERM inside a long line: encode ends at once (exit 1, not written, no temporary left)" \
    eval '[ "$gone" = 0 ] && [ "$RC" = 1 ] && grep -q "interrupted; $W/long.shard not written" "$W/term.err" &&
          ! compgen -G "$W/long.shard*" > /dev/null'

# --- seqtok encode: one very long line is cut into pieces of at most 64 KiB
zstd -dc "$ROOT/data/wikitext-2/wiki.train.tokens.zst" | head -c 300000 | tr '\n' ' ' > "$W/line300k.txt"
echo >> "$W/line300k.txt"
python3 -c "
import sys
s = open(sys.argv[1]).read().rstrip('\n')
open(sys.argv[2], 'w').write((s * 14)[:4000000] + '\n')
import random
random.seed(1)
open(sys.argv[3], 'w').write(''.join(random.choice('abcdefg\u00e9\u20ac\u65e5') for _ in range(200000)) + '\n')
" "$W/line300k.txt" "$W/line4m.txt" "$W/nospace.txt"
enc_check() {  # enc_check WHAT FILE SECONDS MAX-RSS-MB
    local what=$1 f=$2 secs=$3 mb=$4 t0 t1 rss
    t0=$(date +%s.%N)
    if ! python3 -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[3:], stdout=subprocess.DEVNULL, timeout=float(sys.argv[2]))
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024))
sys.exit(rc)' "$W/rss" "$secs" "$BIN/seqtok" encode --quiet --model "$MODEL" --input "$f" --output "$f.shard" 2>"$W/err"; then
        not_ok "encode $what within $secs s" "$(show "$W/err")"; return
    fi
    t1=$(date +%s.%N)
    rss=$(cat "$W/rss")
    if [ "$rss" -gt "$mb" ]; then not_ok "encode $what in at most $mb MB" "peak RSS $rss MB"
    elif "$BIN/seqtok" decode --model "$MODEL" --input "$f.shard" | cmp -s - "$f"; then
        ok "encode $what within $secs s ($(python3 -c "print('%.1f' % ($t1 - $t0))") s) and $mb MB ($rss MB), decodes back byte for byte"
    else not_ok "encode $what: decodes back byte for byte" "differs"; fi
}
# ASan's build runs several times slower, and a suite on a shared machine slower still: its limits are 3x, still
# below what a quadratic encoder would take
MB=250 S=1
case "$BIN" in *asan*) MB=600 S=3 ;; esac
enc_check "one line of 4 MB" "$W/line4m.txt" $((15 * S)) $MB
enc_check "one line of 200,000 characters without a space" "$W/nospace.txt" $((10 * S)) $MB
enc_check "one line of 300 KB" "$W/line300k.txt" $((10 * S)) $MB
if command -v spm_encode >/dev/null; then
    want=$(spm_encode --model "$MODEL" --output_format=id < "$W/line300k.txt" | wc -w)
    got=$("$BIN/seqtok" info "$W/line300k.txt.shard" | awk '$1 == "tokens" {print $2}')
    if [ "$got" = "$((want + 1))" ]; then ok "300 KB line in pieces: as many tokens as SentencePiece on the whole line ($want + EOS)"
    else not_ok "300 KB line in pieces: as many tokens as SentencePiece on the whole line" "$got vs $want + 1"; fi
fi

test_done
