#!/usr/bin/env bash
# --resume trusts nothing it reads (issue 24 item 2): every field of state.json is checked (type, range,
# integer-ness, agreement with the checkpoint directory's name, the model/optimizer files' step and the data
# cursor) before log.jsonl is touched, and a config.json edited in the run directory is refused, naming the
# changed keys, unless the change is given explicitly with --resume RUN --set key=value (then it is printed,
# config.json rewritten and a "resumed_with_changes" line logged).
#   BIN=bin bash tests/test_resume_checks.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
BIN=$(cd "$BIN" && pwd)
export OMP_NUM_THREADS=2
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch resume

MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc "$ROOT/data/wikitext-2/wiki.valid.tokens.zst" | head -n 400 > "$W/train.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/train.txt" --output "$W/train.shard" >/dev/null
cat > "$W/tiny.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5},
  "data": {"train": "$W/train.shard", "val": "$W/train.shard"},
  "model": {"d_model": 16, "n_layers": 1, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 2, "seq_len": 16, "steps": 8, "ckpt_every": 4, "keep_last": 3, "eval_batches": 2},
  "optim": {"lr": 2e-3},
  "eval": {"contexts": "16", "split": "val", "max_windows": 2}
}
JSON
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=base --stop-after 4
check "fixture: a run stopped at step 4 (exit 130, ckpt-00000004)" test "$RC" = 130 -a -d "$W/runs/base/ckpt-00000004"
B="$W/runs/base"
S="$B/ckpt-00000004/state.json"

# bad_state WHAT SUBSTRING PYTHON-EDIT: a copy of the run with state.json edited; --resume must fail with one
# line naming state.json and SUBSTRING, and leave log.jsonl byte for byte as it was
n=0
bad_state() {
    local what=$1 sub=$2 edit=$3 r
    n=$((n + 1)); r="$W/runs/s$n"
    cp -r "$B" "$r"
    python3 -c "
import json, sys
p = sys.argv[1]; s = json.load(open(p))
$edit
open(p, 'w').write(json.dumps(s) if not isinstance(s, str) else s)" "$r/ckpt-00000004/state.json"
    cp "$r/log.jsonl" "$W/log.before"
    run "$BIN/seqtrain" --resume "$r" --quiet
    if [ "$RC" != 1 ]; then not_ok "state.json $what: refused" "exit $RC, stderr: $(show "$W/err")"
    elif [ "$(wc -l < "$W/err")" != 1 ] || ! grep -qF "state.json" "$W/err" || ! grep -qF -- "$sub" "$W/err"; then
        not_ok "state.json $what: one line naming state.json and '$sub'" "$(show "$W/err")"
    elif ! cmp -s "$W/log.before" "$r/log.jsonl"; then not_ok "state.json $what: log.jsonl untouched" "it changed"
    else ok "state.json $what: refused naming the field, log.jsonl untouched"; fi
}
bad_state "step -3" "'step' is -3" "s['step'] = -3"
bad_state "step 1e300" "'step'" "s['step'] = 1e300"
bad_state "step 2.5" "not an integer" "s['step'] = 2.5"
bad_state "step \"4\" (a string)" "must be an integer" "s['step'] = '4'"
bad_state "step 100 of 8" "beyond total_steps" "s['step'] = 100; s['optim_t'] = 100"
bad_state "step 2 inside ckpt-00000004" "ckpt-00000004" "s['step'] = 2; s['optim_t'] = 2"
bad_state "epoch -1" "'epoch' is -1" "s['epoch'] = -1"
bad_state "epoch 3 (not where 4 steps leave the data)" "'epoch'" "s['epoch'] = 3"
bad_state "window 1e20" "'window'" "s['window'] = 1e20"
bad_state "optim_t -1" "'optim_t'" "s['optim_t'] = -1"
bad_state "optim_t 3 at step 4" "'optim_t' is 3" "s['optim_t'] = 3"
bad_state "total_steps 0" "'total_steps'" "s['total_steps'] = 0"
bad_state "total_steps 9 (the config gives 8)" "'total_steps'" "s['total_steps'] = 9"
bad_state "tokens NaN-ish (-5)" "'tokens'" "s['tokens'] = -5"
bad_state "elapsed_s a string" "'elapsed_s'" "s['elapsed_s'] = 'x'"
bad_state "threads 0" "'threads'" "s['threads'] = 0"
bad_state "ranks 0" "'ranks'" "s['ranks'] = 0"
bad_state "ranks 1.5" "'ranks'" "s['ranks'] = 1.5"
bad_state "stopped_early 1 (not a boolean)" "'stopped_early'" "s['stopped_early'] = 1"
bad_state "best_step without best_metric" "'best_metric'" "s['best_step'] = 2"
bad_state "best_step 6 after step 4" "'best_step'" "s['best_step'] = 6; s['best_metric'] = 1.5"
bad_state "best_metric a string" "'best_metric'" "s['best_step'] = 2; s['best_metric'] = 'x'"
bad_state "step missing" "'step' is missing" "del s['step']"
bad_state "a list at the top level" "JSON object" "s = [1]"
bad_state "not JSON" "not valid JSON" "s = '{\"step\": '"
bad_state "config a string" "'config'" "s['config'] = 'x'"

# the step the optimizer file records must agree too (a state.json copied from another checkpoint)
r="$W/runs/optstep"; cp -r "$B" "$r"
python3 - "$r/ckpt-00000004/optim.safetensors" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
i = b.find(b'"step":"4"')
assert i > 0
b[i:i + 10] = b'"step":"3"'
open(p, 'wb').write(b)
PY
cp "$r/log.jsonl" "$W/log.before"
run "$BIN/seqtrain" --resume "$r" --quiet
check "optim.safetensors recording step 3 under a state.json of step 4: refused naming both, log untouched" \
    eval '[ "$RC" = 1 ] && grep -q "optim.safetensors records step 3" "$W/err" && cmp -s "$W/log.before" "$r/log.jsonl"'

# a NaN or an infinity in a checkpoint's tensors: refused naming the file and the tensor, log untouched (it
# would train NaNs from the first step, and call this checkpoint "the last good" one when it stops)
poison() {  # poison RUN FILE VALUE: the last element of the file's last tensor in data order becomes VALUE
    python3 - "$1/ckpt-00000004/$2" "$3" <<'PY'
import json, struct, sys
p, v = sys.argv[1], float(sys.argv[2])
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
name, t = max(((k, t) for k, t in h.items() if k != '__metadata__'), key=lambda kt: kt[1]['data_offsets'][1])
o = 8 + n + t['data_offsets'][1] - 4
b[o:o + 4] = struct.pack('<f', v)
open(p, 'wb').write(b)
print(name)
PY
}
for f in "model.safetensors nan" "optim.safetensors inf"; do
    set -- $f
    r="$W/runs/poison_$1"; cp -r "$B" "$r"
    name=$(poison "$r" "$1" "$2"); name=${name#[mv].}
    cp "$r/log.jsonl" "$W/log.before"
    run "$BIN/seqtrain" --resume "$r" --quiet
    said=0
    grep -qF "ckpt-00000004/$1: " "$W/err" && grep -qF "'$name' holds a non-finite value ($2 " "$W/err" &&
        grep -qF "the checkpoint cannot be resumed" "$W/err" && said=1
    DETAIL="exit $RC, stderr: $(show "$W/err")"
    check "a $2 in $1 ('$name'): refused naming the file and the tensor, log untouched" \
        eval '[ "$RC" = 1 ] && [ "$said" = 1 ] && cmp -s "$W/log.before" "$r/log.jsonl"'
done

# a FIFO as state.json never blocks
r="$W/runs/fifo"; cp -r "$B" "$r"; rm "$r/ckpt-00000004/state.json"; mkfifo "$r/ckpt-00000004/state.json"
run timeout 20 "$BIN/seqtrain" --resume "$r" --quiet
check "a FIFO as state.json is refused at once (not a regular file)" \
    eval '[ "$RC" = 1 ] && grep -q "not a regular file" "$W/err"'

# an edited config.json: refused naming the keys, unless given with --set
r="$W/runs/edited"; cp -r "$B" "$r"
python3 - "$r/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["optim"]["lr"] = 0.5; c["train"]["eval_batches"] = 7
open(p, "w").write(json.dumps(c, indent=2))
PY
cp "$r/log.jsonl" "$W/log.before"
run "$BIN/seqtrain" --resume "$r" --quiet
check "config.json edited (optim.lr 0.002 -> 0.5, train.eval_batches): refused, one line naming both keys" \
    eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ] && grep -q "optim.lr (0.002 in the checkpoint, 0.5 now)" "$W/err" && grep -q "train.eval_batches" "$W/err"'
check "... the message shows the explicit form (--set 'optim.lr=0.5')" grep -qF -- "--set 'optim.lr=0.5'" "$W/err"
check "... and log.jsonl is untouched" cmp -s "$W/log.before" "$r/log.jsonl"
run "$BIN/seqtrain" --resume "$r" --quiet --set optim.lr=0.5
check "only one of the two changes given with --set: still refused, naming the other" \
    eval '[ "$RC" = 1 ] && grep -q "train.eval_batches" "$W/err" && ! grep -q "optim.lr (" "$W/err"'
run "$BIN/seqtrain" --resume "$r" --quiet --set optim.lr=0.5 --set train.eval_batches=7
check "both changes given with --set: the run continues to step 8 (exit 0)" test "$RC" = 0
check "... the changes are printed" grep -q "resuming with a changed config (--set): optim.lr (0.002 in the checkpoint, 0.5 now)" "$W/out"
check "... and logged in log.jsonl" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ch = [r for r in rows if "resumed_with_changes" in r]
assert len(ch) == 1 and ch[0]["step"] == 4, ch
c = ch[0]["resumed_with_changes"]
assert c["optim.lr"] == {"checkpoint": 0.002, "now": 0.5} and c["train.eval_batches"]["now"] == 7, c
assert [r["step"] for r in rows if "loss" in r] == list(range(1, 9))' "$r/log.jsonl"
check "... the final checkpoint stores the new lr" python3 -c '
import json, sys
assert json.load(open(sys.argv[1]))["config"]["optim"]["lr"] == 0.5' "$r/ckpt-00000008/state.json"

# a --set without an edited config.json is an explicit change too; the step count may change with it
r="$W/runs/longer"; cp -r "$B" "$r"
run "$BIN/seqtrain" --resume "$r" --quiet --set train.steps=12
check "--resume --set train.steps=12 continues to step 12 (exit 0)" \
    eval '[ "$RC" = 0 ] && [ -d "$r/ckpt-00000012" ] && grep -q "train.steps (8 in the checkpoint, 12 now)" "$W/out"'
check "... config.json now says 12 steps" python3 -c '
import json, sys
assert json.load(open(sys.argv[1]))["train"]["steps"] == 12' "$r/config.json"
r="$W/runs/shorter"; cp -r "$B" "$r"
run "$BIN/seqtrain" --resume "$r" --quiet --set train.steps=3
check "--resume --set train.steps=3 (below the checkpoint's step 4) is refused" \
    eval '[ "$RC" = 1 ] && grep -q "beyond the 3 steps" "$W/err"'

# the untouched run still resumes and finishes
run "$BIN/seqtrain" --resume "$B" --quiet
check "the unedited run resumes and finishes (exit 0), with no resumed_with_changes line" \
    eval '[ "$RC" = 0 ] && ! grep -q resumed_with_changes "$B/log.jsonl"'

test_done
