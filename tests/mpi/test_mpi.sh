#!/usr/bin/env bash
# Data-parallel training over MPI (make MPI=1) on one machine, two ranks:
#   - 2 (and 3) ranks give the loss curve of one process accumulating the same micro-batches (1e-6
#     relative), and the same validation and final perplexity; a rerun is bit-identical
#   - --resume with the same ranks is bit-identical to an uninterrupted run; with other ranks it works and
#     says the curve differs from then on
#   - seqeval under mpirun scores the windows in shares and agrees with one process
#   - failures end the whole job with one message naming the rank, never a hang: a rank that cannot read
#     its data, ranks that see different data, ranks started with another configuration (optim.lr, run.seed,
#     data.shuffle, --stop-after: named), a rank killed mid-run (mpirun ends the job; the newest checkpoint
#     stays complete and resumable), grad_accum not a multiple of the ranks
#   - the plain build refuses to run as one of several MPI processes
#   MPI_BIN=build/release-mpi/bin BIN=bin bash tests/mpi/test_mpi.sh     (run from the repository root)
set -u
ROOT=$(pwd)
MPI_BIN=$(cd "${MPI_BIN:-build/release-mpi/bin}" && pwd)
BIN=$(cd "${BIN:-bin}" && pwd)
source tests/lib.sh || exit 2
test_scratch mpi
# root may start MPI jobs here (CI runs as root); one thread per rank; no hang ever: 120 s at most a job
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPIRUN=(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2)
losses() { grep '"loss"' "$1" | sed 's/, "tokens_per_s.*//'; }
field() {  # field LOG KEY: the KEY values of a log.jsonl's lines that have it
    python3 -c 'import json,sys; print(*[d[sys.argv[2]] for d in map(json.loads, open(sys.argv[1])) if sys.argv[2] in d])' "$@"
}
# the largest relative difference between two lists of numbers (field() outputs)
reldiff() { python3 -c 'import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]
assert len(a) == len(b) and a, (len(a), len(b))
print(max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(a, b)))' "$1" "$2"; }
below() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$1" "$2"; }

MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc "$ROOT/data/wikitext-2/wiki.valid.tokens.zst" | head -n 1200 > "$W/train.txt"
zstd -dc "$ROOT/data/wikitext-2/wiki.test.tokens.zst" | head -n 300 > "$W/val.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/train.txt" --output "$W/train.shard" >/dev/null
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/val.txt" --output "$W/val.shard" >/dev/null
cat > "$W/tiny.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5, "threads": 1},
  "data": {"train": "$W/train.shard", "val": "$W/val.shard", "test": "$W/val.shard"},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 4, "seq_len": 32, "grad_accum": 4, "steps": 16, "eval_every": 8, "eval_batches": 5,
            "ckpt_every": 8, "keep_last": 3},
  "optim": {"lr": 3e-3, "weight_decay": 0.1},
  "schedule": {"kind": "cosine", "warmup_steps": 2},
  "eval": {"contexts": "32,64", "split": "val", "max_windows": 13}
}
JSON

# --- one process against two ranks
run "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=one
check "one process (MPI build, no mpirun) trains (exit 0)" test "$RC" = 0
run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --set run.name=two
check "2 ranks train (exit 0)" test "$RC" = 0
check "2 ranks: the banner says 2 ranks x 1 thread" grep -q "2 ranks x 1 thread" "$W/out"
check "2 ranks: one banner, not one per rank" eval '[ "$(grep -c "^seqtrain: " "$W/out")" = 1 ]'
O="$W/runs/one"; T="$W/runs/two"
d=$(reldiff "$(field "$O/log.jsonl" loss)" "$(field "$T/log.jsonl" loss)")
check "2 ranks: every step's loss equals one process's to 1e-6 relative (largest difference $d)" below "$d" 1e-6
d=$(reldiff "$(field "$O/log.jsonl" grad_norm)" "$(field "$T/log.jsonl" grad_norm)")
check "2 ranks: every step's gradient norm equals one process's to 1e-5 relative ($d)" below "$d" 1e-5
d=$(reldiff "$(field "$O/log.jsonl" val_loss)" "$(field "$T/log.jsonl" val_loss)")
check "2 ranks: the validation losses (steps 8, 16) equal one process's to 1e-6 ($d)" below "$d" 1e-6
check "2 ranks: the validation counts the same tokens" \
    test "$(field "$O/log.jsonl" val_tokens)" = "$(field "$T/log.jsonl" val_tokens)"
check "2 ranks: 16 training lines, written once" eval '[ "$(grep -c "\"loss\"" "$T/log.jsonl")" = 16 ]'
check "2 ranks: the state records ranks 2" grep -q '"ranks":	2' "$T/ckpt-00000016/state.json"
ppl() { python3 -c 'import json,sys; print(*[r["ppl"] for r in json.load(open(sys.argv[1]))["results"]])' "$1"; }
d=$(reldiff "$(ppl "$O/eval/ppl.json")" "$(ppl "$T/eval/ppl.json")")
check "2 ranks: the final perplexity table equals one process's to 1e-6 ($d)" below "$d" 1e-6
check "2 ranks: the tables count the same tokens" \
    test "$(cut -d, -f1-3 "$O/eval/ppl.csv")" = "$(cut -d, -f1-3 "$T/eval/ppl.csv")"

# three ranks: slices of unequal length (the parameter count is not a multiple of 3)
run "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=one3 --set train.grad_accum=3 --set train.steps=6
run timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 3 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet \
    --set run.name=three --set train.grad_accum=3 --set train.steps=6
check "3 ranks train (exit 0)" test "$RC" = 0
d=$(reldiff "$(field "$W/runs/one3/log.jsonl" loss)" "$(field "$W/runs/three/log.jsonl" loss)")
check "3 ranks: every step's loss equals one process's to 1e-6 relative ($d)" below "$d" 1e-6

run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=two_again
check "2 ranks twice: bit-identical loss curves" test "$(losses "$T/log.jsonl")" = "$(losses "$W/runs/two_again/log.jsonl")"
check "2 ranks twice: bit-identical checkpoints" cmp "$T/ckpt-00000016/model.safetensors" "$W/runs/two_again/ckpt-00000016/model.safetensors"

# --- resume
run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=r2 --stop-after 5
check "2 ranks, --stop-after 5: exit 130 with a checkpoint" test "$RC" = 130 -a -f "$W/runs/r2/ckpt-00000005/state.json"
run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --resume "$W/runs/r2" --quiet
check "2 ranks resume with 2 ranks (exit 0)" test "$RC" = 0
check "resume with the same ranks: bit-identical to the uninterrupted 2-rank run" \
    test "$(losses "$T/log.jsonl")" = "$(losses "$W/runs/r2/log.jsonl")"
check "resume with the same ranks: no note about ranks" eval '! grep -q "MPI ranks" "$W/err"'
run "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=r1 --stop-after 6
run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --resume "$W/runs/r1" --quiet
check "one process resumed by 2 ranks finishes (exit 0)" test "$RC" = 0
check "...and says the curve differs in rounding from then on" grep -q "trained by 1 process (MPI ranks) and resumes with 2" "$W/err"
d=$(reldiff "$(field "$O/log.jsonl" loss)" "$(field "$W/runs/r1/log.jsonl" loss)")
check "...and its losses stay within 1e-6 of one process's ($d)" below "$d" 1e-6

# --- seqeval shares the windows
run "$MPI_BIN/seqeval" --run "$O" --data val --context 32,64 --out "$W/ev1"
run "${MPIRUN[@]}" "$MPI_BIN/seqeval" --run "$O" --data val --context 32,64 --out "$W/ev2"
check "seqeval with 2 ranks (exit 0)" test "$RC" = 0
d=$(reldiff "$(ppl "$W/ev1/ppl.json")" "$(ppl "$W/ev2/ppl.json")")
check "seqeval with 2 ranks: perplexities equal one process's to 1e-6 ($d)" below "$d" 1e-6
check "seqeval with 2 ranks: the same windows and tokens" test "$(cut -d, -f1-3 "$W/ev1/ppl.csv")" = "$(cut -d, -f1-3 "$W/ev2/ppl.csv")"
run "${MPIRUN[@]}" "$MPI_BIN/seqeval" --run "$O" --zeroshot piqa
check "seqeval --zeroshot under 2 ranks is refused naming the mode" eval '[ "$RC" = 1 ] && grep -q "zeroshot runs in one process" "$W/err"'

# --- failures: one message naming the rank, never a hang (the timeout above would give 124)
run "${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=ga --set train.grad_accum=3
check "grad_accum 3 with 2 ranks: exit 1" test "$RC" = 1
check "...naming train.grad_accum and the ranks, once" \
    eval 'grep -q "train.grad_accum is 3, not a multiple of the 2 MPI ranks" "$W/err" && [ "$(grep -c "error:" "$W/err")" = 1 ]'
run timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet \
    --set run.name=bad : -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=bad \
    --set "data.train=$W/missing.shard"
check "a rank that cannot read its data: exit 1, no hang" test "$RC" = 1
check "...the message names rank 1 and the file" grep -q "rank 1 of 2: .*missing.shard" "$W/err"
check "...and nothing was written to the run directory" test ! -e "$W/runs/bad/log.jsonl"
# the same configuration, other data: data.train "train.shard" in each rank's own working directory
head -n 600 "$W/train.txt" > "$W/half.txt"
mkdir -p "$W/a" "$W/b"
cp "$W/train.shard" "$W/a/train.shard"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/half.txt" --output "$W/b/train.shard" >/dev/null
diff_data=(--quiet --set run.name=diff --set train.steps=0 --set train.epochs=1 --set data.train=train.shard)
run timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 1 -wdir "$W/a" "$MPI_BIN/seqtrain" --config "$W/tiny.json" \
    "${diff_data[@]}" : -np 1 -wdir "$W/b" "$MPI_BIN/seqtrain" --config "$W/tiny.json" "${diff_data[@]}"
check "ranks that see different training data: exit 1, no hang" test "$RC" = 1
check "...the message says the ranks' data differ" grep -q "rank 1 of 2: its data or model differ from rank 0's" "$W/err"
check "...before writing anything" test ! -e "$W/runs/diff"

# ranks started with another configuration (each value valid): refused before anything is written, naming the key
for kv in optim.lr=0.001 run.seed=6 data.shuffle=false; do
    name=cfg-${kv%%=*}
    run timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" \
        --quiet --set "run.name=$name" : -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet \
        --set "run.name=$name" --set "$kv"
    check "a rank started with --set $kv: exit 1" test "$RC" = 1
    DETAIL="stderr: $(show "$W/err")"
    check "...the message names rank 1, ${kv%%=*} and both values" \
        grep -q "rank 1 of 2: its configuration differs from rank 0's: ${kv%%=*} (${kv#*=} here, .* on rank 0)" "$W/err"
    check "...before writing anything" test ! -e "$W/runs/$name"
done
# and the options that decide where a run stops: a rank stopping alone would leave the others waiting
run timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet \
    --set run.name=cfg-stop --stop-after 2 : -np 1 "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet \
    --set run.name=cfg-stop
DETAIL="exit $RC, stderr: $(show "$W/err")"
check "a rank started without rank 0's --stop-after 2: exit 1 naming --stop-after, nothing written" \
    eval '[ "$RC" = 1 ] && grep -q "rank 1 of 2: .*--stop-after (0 here, 2 on rank 0)" "$W/err" && [ ! -e "$W/runs/cfg-stop" ]'

# SIGUSR1 to mpirun reaches every rank: they stop after the same step and rank 0 writes the checkpoint
"${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=usr1 --set train.steps=4000 \
    --set train.eval_every=0 >"$W/out" 2>"$W/err" &
job=$!
for _ in $(seq 1 600); do [ "$(grep -c '"loss"' "$W/runs/usr1/log.jsonl" 2>/dev/null)" -ge 2 ] && break; sleep 0.1; done
kill -USR1 "$(pgrep -P "$job" -x mpirun || pgrep -x mpirun | head -n 1)"
wait "$job"; RC=$?
check "SIGUSR1 to mpirun: the job exits 138" test "$RC" = 138
last=$(field "$W/runs/usr1/log.jsonl" step | tr ' ' '\n' | tail -n 1)
check "...with the checkpoint of its last logged step ($last)" grep -qx "ckpt-$(printf %08d "$last")" "$W/runs/usr1/latest"
check "...and says how to continue" grep -q "checkpoint written. Continue with: seqtrain --resume" "$W/out"

# a rank killed mid-run: mpirun ends the job; every checkpoint left is complete and the run resumes
"${MPIRUN[@]}" "$MPI_BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=killed --set train.steps=4000 \
    --set train.ckpt_every=20 --set train.eval_every=0 >"$W/out" 2>"$W/err" &
job=$!
for _ in $(seq 1 600); do [ -f "$W/runs/killed/latest" ] && break; sleep 0.1; done
victim=$(for p in $(pgrep -f "run.name=killed"); do [ "$(ps -o comm= -p "$p")" = seqtrain ] && echo "$p"; done | tail -n 1)
kill -9 "$victim" 2>/dev/null
t0=$(date +%s); wait "$job"; RC=$?; t1=$(date +%s)
check "a rank killed with SIGKILL: the job ends (status $RC, not 0, not the timeout's 124) in $((t1 - t0)) s" \
    test "$RC" != 0 -a "$RC" != 124 -a $((t1 - t0)) -le 30
check "...and no rank is left running" eval '[ -z "$(pgrep -f "run.name=killed")" ]'
run "$MPI_BIN/seqtrain" --resume "$W/runs/killed" --quiet --stop-after 1
check "...its newest checkpoint is complete: the run resumes (exit 130 after one more step)" test "$RC" = 130

# --- the plain build as one of several MPI processes
run "${MPIRUN[@]}" "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=plain
check "the plain build under mpirun -np 2 stops (exit 1)" test "$RC" = 1
check "...saying it was built without MPI and how to build it" grep -q "built without MPI.*make MPI=1" "$W/err"
check "...before writing anything" test ! -e "$W/runs/plain"

test_done
