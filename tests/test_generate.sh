#!/usr/bin/env bash
# seqeval --generate end to end on tiny trained runs (an attention model and a recurrent gla model): a seed
# reproduces a sampled text, greedy decoding is stable and ignores the seed, a batch of prompts decodes each
# prompt as it would alone (greedy), full attention caches slide, long prompts are cut from the left, and bad
# input stops with a message and a non-zero exit.
#   BIN=bin bash tests/test_generate.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
BIN=$(cd "$BIN" && pwd)
# one thread: a tiny model's token is a few microseconds of work in a dozen parallel regions, and on a busy
# shared machine every region's barrier can wait a scheduler slice for a descheduled second thread (measured
# here: 3 tokens/s on 2 threads, 3000 on one); test_model checks decoding on 2 threads
export OMP_NUM_THREADS=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch generate
# a bad invocation: non-zero exit and stderr naming the problem
refuses() {
    local what=$1 pattern=$2; shift 2
    run "$@"
    if [ "$RC" != 0 ] && grep -q -- "$pattern" "$W/err"; then ok "$what"
    else not_ok "$what" "exit $RC, stderr: $(head -c 300 "$W/err")"; fi
}

MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc "$ROOT/data/wikitext-2/wiki.valid.tokens.zst" | head -n 600 > "$W/train.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/train.txt" --output "$W/train.shard" >/dev/null
tiny() {  # tiny NAME MIXER-JSON [extra model keys]: a 12-step run in $W/runs/NAME
    cat > "$W/$1.json" <<JSON
{
  "run": {"dir": "$W/runs", "name": "$1", "seed": 5},
  "data": {"train": "$W/train.shard", "val": "$W/train.shard", "tokenizer": "$MODEL"},
  "model": {"d_model": 32, "n_layers": 2, "mixer": $2 ${3:-}},
  "train": {"batch_size": 4, "seq_len": 32, "steps": 12, "eval_every": 0, "ckpt_every": 12},
  "optim": {"lr": 3e-3},
  "eval": {"contexts": ""}
}
JSON
    "$BIN/seqtrain" --config "$W/$1.json" --quiet >"$W/train_$1.log" 2>&1
}
tiny att '{"kind": "attention", "heads": 2, "pos": "rope"}'
check "a tiny attention run trains" test -f "$W/runs/att/latest"
tiny gla '{"kind": "gla", "heads": 2}'
check "a tiny gla run trains" test -f "$W/runs/gla/latest"
tiny wide '{"kind": "attention", "heads": 2}' ', "vocab_size": 8200'
check "a tiny run with a padded vocabulary trains" test -f "$W/runs/wide/latest"
A="$W/runs/att"
EV="$BIN/seqeval"

# --- sampling: a seed reproduces the text
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --seed 3
check "sampling exits 0" test "$RC" = 0
cp "$W/out" "$W/s3a"
check "stdout starts with the prompt" grep -q "^The game was" "$W/s3a"
check "stderr reports tokens/s" grep -q "24 tokens generated .* tokens/s" "$W/err"
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --seed 3
check "the same seed gives the same text" cmp -s "$W/out" "$W/s3a"
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --seed 3 --threads 2
check "--threads 2 (over OMP_NUM_THREADS=1) is what it reports, with the same text" \
    eval 'grep -q ", 2 threads, " "$W/err" && cmp -s "$W/out" "$W/s3a"'
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --seed 4
check "another seed gives another text" eval '! cmp -s "$W/out" "$W/s3a"'

# --- greedy: stable, and the seed and top-k/top-p do not matter
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --temperature 0
cp "$W/out" "$W/g1"
check "greedy decoding exits 0 and continues the prompt" eval '[ "$RC" = 0 ] && [ "$(wc -c < "$W/g1")" -gt 14 ]'
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --temperature 0 --seed 9 --top-k 0 --top-p 1
check "greedy output is the same with another seed, top-k and top-p" cmp -s "$W/out" "$W/g1"
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 24 --top-k 1 --seed 11
check "top-k 1 is greedy" cmp -s "$W/out" "$W/g1"

# --- a batch of prompts: each greedy text as when decoded alone
printf 'The game was\nIn 1998 , the band released its second album\nHe\n' > "$W/prompts.txt"
run "$EV" --run "$A" --generate --prompt-file "$W/prompts.txt" --max-new 24 --temperature 0
check "a prompt file gives one block per prompt" eval '[ "$RC" = 0 ] && [ "$(grep -c "^=== prompt" "$W/out")" = 3 ]'
check "a batch reports 3 x 24 tokens" grep -q "72 tokens generated (3 x 24)" "$W/err"
sed -n '/^=== prompt 1 ===$/,/^=== prompt 2 ===$/p' "$W/out" | sed '1d;$d' > "$W/b1"
check "prompt 1 of the batch = the same prompt alone (greedy)" cmp -s "$W/b1" "$W/g1"
run2() { "$EV" --run "$A" --generate --prompt-file "$W/prompts.txt" --max-new 24 --temperature 0 2>/dev/null; }
run2 | sed -n '/^=== prompt 3 ===$/,$p' | sed '1d' > "$W/b3"
"$EV" --run "$A" --generate --prompt "He" --max-new 24 --temperature 0 > "$W/h1" 2>/dev/null
check "prompt 3 (shorter than the others) of the batch = alone (greedy)" cmp -s "$W/b3" "$W/h1"

# --- a prompt file is generated in batches of --batch prompts: the same greedy texts, and memory that of a batch
run "$EV" --run "$A" --generate --prompt-file "$W/prompts.txt" --max-new 24 --temperature 0 --batch 2
check "--batch 2 over 3 prompts: two batches, said on stderr" grep -q "3 prompts in 2 batches of at most 2" "$W/err"
run2 > "$W/one_batch"
check "... and the same greedy texts as one batch" cmp -s "$W/out" "$W/one_batch"
python3 -c "print('\\n'.join(['The game'] * 20000))" > "$W/many.txt"
rss_of() {  # rss_of CMD...: peak RSS of CMD in MB into $W/rss, its status returned
    python3 -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1] + ".err", "w"), timeout=300)
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024))
sys.exit(rc)' "$W/rss" "$@"
}
if asan_build "$EV"; then
    ok "20,000 prompts run in batches: peak memory (skipped: ASan build, whose quarantine holds freed batches)"
else
    rss_of "$EV" --run "$A" --generate --prompt-file "$W/prompts.txt" --max-new 2 --temperature 0; RSS3=$(cat "$W/rss")
    rss_of "$EV" --run "$A" --generate --prompt-file "$W/many.txt" --max-new 2 --temperature 0; RC=$?; RSS=$(cat "$W/rss")
    DETAIL="exit $RC, peak RSS $RSS MB against $RSS3 MB for 3 prompts: $(show "$W/rss.err")"
    check "20,000 prompts run in batches: peak memory within 100 MB of 3 prompts'" \
        eval '[ "$RC" = 0 ] && [ "$RSS" -le $((RSS3 + 100)) ]'
fi

# --- lengths: full caches slide, long prompts are cut, recurrent models never fill up
run "$EV" --run "$A" --generate --prompt "The game was" --max-new 40 --context 16 --seed 2
# 3 + 40 tokens: full at 16, then every 8 tokens (at 16, 24, 32, 40)
check "attention caches of 16 positions slide 4 times during 40 new tokens" \
    eval '[ "$RC" = 0 ] && grep -q "filled up 4 times: re-encoded the last 8 tokens" "$W/err"'
run "$EV" --run "$A" --generate --prompt "$(head -c 2000 "$W/train.txt" | tr '\n' ' ')" --max-new 4 --seed 2
check "a prompt longer than the context (32) keeps its last 32 tokens" \
    eval '[ "$RC" = 0 ] && grep -q "longer than the context of 32 tokens: kept the last 32" "$W/err"'
run "$EV" --run "$W/runs/gla" --generate --prompt "The game was" --max-new 80 --seed 2
check "a gla run generates 80 tokens past its context of 32 without sliding" \
    eval '[ "$RC" = 0 ] && grep -q "80 tokens generated" "$W/err" && ! grep -q "filled up" "$W/err"'

# --- bad input
refuses "an empty prompt is refused" "prompt is empty" "$EV" --run "$A" --generate --prompt ""
refuses "top-p 0 is refused" "outside (0, 1]" "$EV" --run "$A" --generate --prompt "a" --top-p 0
refuses "top-p 1.5 is refused" "outside (0, 1]" "$EV" --run "$A" --generate --prompt "a" --top-p 1.5
refuses "a negative temperature is refused" "temperature: -1" "$EV" --run "$A" --generate --prompt "a" --temperature -1
refuses "a negative top-k is refused" "top-k: -1 is out of range" "$EV" --run "$A" --generate --prompt "a" --top-k -1
refuses "--device other than cpu or cuda is refused" '--device: "gpu" is not cpu or cuda' "$EV" --run "$A" --generate \
    --prompt "a" --device gpu
# the plain build has no GPU backend: --device cuda says so (a CUDA=1 build decodes there: tests/gpu/test_gpu_decode.c)
if ! grep -q cudaMalloc "$BIN/seqeval"; then
    refuses "--device cuda without a CUDA build is refused" "device cuda" "$EV" --run "$A" --generate --prompt "a" \
        --device cuda
fi
refuses "no prompt is refused" "needs --prompt TEXT or --prompt-file" "$EV" --run "$A" --generate
refuses "both --prompt and --prompt-file are refused" "one of them" "$EV" --run "$A" --generate --prompt a \
    --prompt-file "$W/prompts.txt"
printf 'one\n\nthree\n' > "$W/blank.txt"
refuses "a blank line in a prompt file is refused" "line 2 is empty" "$EV" --run "$A" --generate --prompt-file "$W/blank.txt"
refuses "a missing prompt file is refused" "No such file" "$EV" --run "$A" --generate --prompt-file "$W/none.txt"
refuses "a run whose vocabulary does not match its tokenizer is refused" "vocabulary of 8200 tokens but the tokenizer" \
    "$EV" --run "$W/runs/wide" --generate --prompt "a"
printf 'one\nt\000wo\n' > "$W/nul.txt"
refuses "a NUL in a prompt file is refused, naming the line" "nul.txt: line 2 holds a NUL byte" \
    "$EV" --run "$A" --generate --prompt-file "$W/nul.txt"
printf 'one\ncaf\351\n' > "$W/latin1.txt"
refuses "invalid UTF-8 in a prompt file is refused, naming line and byte" "latin1.txt: line 2, byte 4: invalid UTF-8 (0xe9)" \
    "$EV" --run "$A" --generate --prompt-file "$W/latin1.txt"
refuses "invalid UTF-8 in --prompt is refused" "--prompt, byte 4: invalid UTF-8 (0xe9)" \
    "$EV" --run "$A" --generate --prompt "$(printf 'caf\351')"
for p in "--prompt The" "--prompt-file $W/prompts.txt"; do
    "$EV" --run "$A" --generate $p --max-new 4 --temperature 0 > /dev/full 2> "$W/err"; RC=$?
    DETAIL="exit $RC, stderr: $(show "$W/err")"
    check "--generate $(echo "$p" | cut -d' ' -f1) > /dev/full: exit 1, saying the write failed" \
        eval '[ "$RC" = 1 ] && grep -q "cannot write the generated text to stdout: No space left on device" "$W/err"'
done
refuses "max-new 0 is refused" "max-new: 0 is out of range" "$EV" --run "$A" --generate --prompt "a" --max-new 0
run "$EV" --generate --help
check "seqeval --generate --help lists the options" eval '[ "$RC" = 0 ] && grep -q -- "--top-p" "$W/out"'
run "$EV" --help
check "seqeval --help mentions --generate" grep -q -- "--generate" "$W/out"

test_done
