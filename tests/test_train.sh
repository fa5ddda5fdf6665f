#!/usr/bin/env bash
# The trainer end to end on a tiny model: a run, its log and checkpoints, bit-identical resume (after
# --stop-after and after a real SIGINT), determinism by seed, refusal to overwrite a run, seqeval on the
# trained run (tables and their agreement with the trainer's own final evaluation), and --probe dumps.
#   BIN=bin bash tests/test_train.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
BIN=$(cd "$BIN" && pwd)
export OMP_NUM_THREADS=2
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch train
losses() {  # the training-loss lines of a log without the timing fields, which differ between runs
    grep '"loss"' "$1" | sed 's/, "tokens_per_s.*//'
}

MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc "$ROOT/data/wikitext-2/wiki.valid.tokens.zst" | head -n 1200 > "$W/train.txt"
zstd -dc "$ROOT/data/wikitext-2/wiki.test.tokens.zst" | head -n 300 > "$W/val.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/train.txt" --output "$W/train.shard" >/dev/null
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/val.txt" --output "$W/val.shard" >/dev/null
cat > "$W/tiny.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5},
  "data": {"train": "$W/train.shard", "val": "$W/val.shard", "test": "$W/val.shard"},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 4, "seq_len": 32, "grad_accum": 2, "steps": 24, "eval_every": 8, "eval_batches": 3,
            "ckpt_every": 8, "keep_last": 2},
  "optim": {"lr": 3e-3, "weight_decay": 0.1, "groups": [{"match": "*.ln*", "lr_mult": 0.5}]},
  "schedule": {"kind": "onecycle", "pct_start": 0.1, "cycle_momentum": true},
  "eval": {"contexts": "32,64", "split": "val", "max_windows": 12}
}
JSON

# --- an uninterrupted run
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=a
check "a 24-step run finishes (exit 0)" test "$RC" = 0
A="$W/runs/a"
check "the run directory holds config.json, log.jsonl, latest and the eval tables" \
    test -f "$A/config.json" -a -f "$A/log.jsonl" -a -f "$A/latest" -a -f "$A/eval/ppl.md" -a -f "$A/eval/positions_64.csv"
check "keep_last 2: only ckpt-16 and ckpt-24 remain" \
    eval '[ "$(cd "$A" && ls -d ckpt-* | tr "\n" " ")" = "ckpt-00000016 ckpt-00000024 " ]'
check "latest names ckpt-00000024" grep -qx "ckpt-00000024" "$A/latest"
check "log has 24 training lines" eval '[ "$(grep -c "\"loss\"" "$A/log.jsonl")" = 24 ]'
check "log has validation at steps 8, 16, 24" \
    eval '[ "$(grep -o "\"step\": [0-9]*, \"val_loss\"" "$A/log.jsonl" | grep -o "[0-9]*" | tr "\n" " ")" = "8 16 24 " ]'
check "the loss decreased over the run" python3 -c '
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if "\"loss\"" in x]
assert l[-1]["loss"] < l[0]["loss"] - 0.5, (l[0]["loss"], l[-1]["loss"])' "$A/log.jsonl"
check "onecycle: lr rises then falls, beta1 cycles (0.95 -> 0.85 -> 0.95)" python3 -c '
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if "\"loss\"" in x]
lr = [x["lr"] for x in l]; b1 = [x["beta1"] for x in l]
top = lr.index(max(lr))
assert 0 < top < len(lr) - 1 and lr[0] < lr[top] and lr[-1] < lr[0], lr
assert abs(b1[0] - 0.95) < 1e-6 and abs(b1[top] - 0.85) < 1e-3 and b1[-1] > 0.94, b1' "$A/log.jsonl"
check "state.json records step, cursor, optimizer t and the resolved config" python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["step"] == 24 and s["optim_t"] == 24 and s["total_steps"] == 24 and "window" in s and "epoch" in s
assert s["config"]["train"]["grad_accum"] == 2' "$A/ckpt-00000024/state.json"
check "model.safetensors reads with the stdlib reader (wte 8192 x 32)" eval \
    'python3 "$ROOT/scripts/safetensors_read.py" "$A/ckpt-00000024/model.safetensors" | grep -qP "^wte\t\[8192, 32\]\tF32"'
n_params=$(python3 "$ROOT/scripts/safetensors_read.py" "$A/ckpt-00000024/model.safetensors" | grep -cP '\tF32\t')
n_moments=$(python3 "$ROOT/scripts/safetensors_read.py" "$A/ckpt-00000024/optim.safetensors" | grep -cP '^[mv]\..*\tF32\t')
check "optim.safetensors holds m.* and v.* of all $n_params parameters" test "$n_moments" = "$((2 * n_params))" -a "$n_params" -gt 10

# --- the same seed gives the same run
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=a2
check "same config and seed: identical loss curve" diff <(losses "$A/log.jsonl") <(losses "$W/runs/a2/log.jsonl")
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=a3 --set run.seed=6
check "another seed: a different loss curve" eval '! diff -q <(losses "$A/log.jsonl") <(losses "$W/runs/a3/log.jsonl")'

# --- stop and resume: bit-identical
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=b --stop-after 11
check "--stop-after 11 exits 130 with a checkpoint at step 11" test "$RC" = 130 -a -d "$W/runs/b/ckpt-00000011"
check "the stop message names the resume command" grep -q "seqtrain --resume $W/runs/b" "$W/out"
run "$BIN/seqtrain" --resume "$W/runs/b" --quiet
check "--resume finishes (exit 0)" test "$RC" = 0
check "resumed run: loss curve bit-identical to the uninterrupted one" \
    diff <(losses "$A/log.jsonl") <(losses "$W/runs/b/log.jsonl")
check "resumed run: validation losses identical" diff <(grep val_ "$A/log.jsonl") <(grep val_ "$W/runs/b/log.jsonl")
check "resumed run: final parameters identical" \
    cmp "$A/ckpt-00000024/model.safetensors" "$W/runs/b/ckpt-00000024/model.safetensors"
check "resumed run: final tables identical" cmp "$A/eval/ppl.csv" "$W/runs/b/eval/ppl.csv"

# --- a real Ctrl-C
"$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=c --set train.steps=100000 --set train.ckpt_every=0 \
    >"$W/out" 2>"$W/err" &
pid=$!
for _ in $(seq 100); do sleep 0.1; grep -q '"step": 3,' "$W/runs/c/log.jsonl" 2>/dev/null && break; done
kill -INT $pid
wait $pid
RC=$?
check "SIGINT: exit 130" test "$RC" = 130
check "SIGINT: a complete checkpoint that latest names" test -f "$W/runs/c/$(cat "$W/runs/c/latest" 2>/dev/null)/state.json"
check "SIGINT: no temporary checkpoint left" eval '! ls -d "$W"/runs/c/*.tmp.* 2>/dev/null'
check "SIGINT: the message says it was interrupted" grep -q "interrupted" "$W/out"

# --- refusals
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=a
check "a new run into a directory with checkpoints is refused, naming --resume" \
    eval '[ "$RC" = 1 ] && grep -q -- "--resume" "$W/err"'
run "$BIN/seqtrain" --resume "$A" --set train.steps=5
check "--resume --set train.steps=5 of a run at step 24 is refused (state.json's step is beyond it)" \
    eval '[ "$RC" = 1 ] && grep -q "beyond the 5 steps" "$W/err"'
run "$BIN/seqtrain" --resume "$W/nothing"
check "--resume of a missing run fails with one line" eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ]'

# --- seqeval on the trained run
run "$BIN/seqeval" --run "$A" --data valid --context 32,64 --max-windows 12 --out "$W/ev"
check "seqeval --run --data valid: exit 0 and the tables" \
    test "$RC" = 0 -a -f "$W/ev/ppl.json" -a -f "$W/ev/positions_32.csv"
check "seqeval agrees with the trainer's own final evaluation (same windows)" \
    diff <(cut -d, -f1-5 "$A/eval/ppl.csv") <(cut -d, -f1-5 "$W/ev/ppl.csv")
check "seqeval on a run without run.threads uses OMP_NUM_THREADS (tests run with 2)" \
    grep -q ", 2 threads, " "$W/err"
# --threads overrides the run's run.threads (here set in a copy of the run's config) and gives the same numbers
cp -r "$A" "$W/a1"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["run"]["threads"] = 1; json.dump(c, open(sys.argv[1], "w"))' \
    "$W/a1/config.json"
run "$BIN/seqeval" --run "$W/a1" --data valid --context 32,64 --max-windows 12 --out "$W/ev-t1"
check "seqeval takes run.threads = 1 from the run's config" grep -q ", 1 thread, " "$W/err"
run "$BIN/seqeval" --run "$W/a1" --data valid --context 32,64 --max-windows 12 --threads 3 --out "$W/ev-t3"
check "seqeval --threads 3 overrides run.threads = 1" grep -q ", 3 threads, " "$W/err"
check "1 and 3 threads give the same table" diff <(cut -d, -f1-5 "$W/ev-t1/ppl.csv") <(cut -d, -f1-5 "$W/ev-t3/ppl.csv")
run "$BIN/seqeval" --run "$W/a1" --data valid --context 32 --threads 0
check "seqeval --threads 0 is refused naming the option" eval '[ "$RC" != 0 ] && grep -q -- "--threads" "$W/err"'
run "$BIN/seqeval" --run "$A" --data "$W/val.shard" --context 64 --stride 16 --max-windows 8 --out "$W/ev2"
check "sliding windows: 8 windows score 64 + 7*16 = 176 tokens" grep -q "^64,8,176," "$W/ev2/ppl.csv"
check "per-position curve: positions 0..63 of the first window, 48..63 of the others" python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
c = {int(r["position"]): int(r["count"]) for r in rows}
assert c[0] == 1 and c[47] == 1 and c[48] == 8 and c[63] == 8, c' "$W/ev2/positions_64.csv"
python3 - "$W/probe.npy" <<'PY'
import struct, sys
rows = [[(7 * r + 3 * t) % 8000 + 5 for t in range(17)] for r in range(2)]
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 17), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    for r in rows:
        f.write(struct.pack("<17i", *r))
PY
run "$BIN/seqeval" --run "$A" --probe "$W/probe.npy" --out "$W/probe.safetensors"
python3 "$ROOT/scripts/safetensors_read.py" "$W/probe.safetensors" > "$W/probe.txt" 2>&1
check "--probe writes logits (2, 16, 8192)" grep -qP "^logits\t\[2, 16, 8192\]" "$W/probe.txt"
check "--probe writes the loss and every gradient" eval \
    'grep -qP "^loss\t" "$W/probe.txt" && [ "$(grep -c "^grad\." "$W/probe.txt")" = "$n_params" ]'
# --- attention maps: one PNG per head of the chosen layer, each row of the map a softmax (checked on the PNG
# size and signature here; the weights themselves are tested in test_attention_filter/test_rfa)
run "$BIN/seqeval" --run "$A" --data valid --context 48 --attention-map "$W/maps"
check "--attention-map: exit 0, one PNG per head of the last layer" \
    eval '[ "$RC" = 0 ] && [ -f "$W/maps/layer1_head0.png" ] && [ -f "$W/maps/layer1_head1.png" ] && [ ! -f "$W/maps/layer1_head2.png" ]'
check "--attention-map: the files are 48 x 48 PNGs" python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR", b[:16]
assert struct.unpack(">II", b[16:24]) == (48, 48)' "$W/maps/layer1_head0.png"
check "--attention-map: the message gives the PNG size of a 48-token map (not downsampled)" \
    grep -q "layer1_head0.png (48 x 48 PNG: the 48 x 48 weights, one pixel each)" "$W/out"
# a context longer than the 1024-pixel limit: the PNG is downsampled, and the message must say so and give its size
run "$BIN/seqeval" --run "$A" --data valid --context 1100 --attention-map "$W/mapsbig" --layer 0
check "--attention-map at context 1100 says the PNG is 1024 x 1024, downsampled from 1100 x 1100 weights" \
    eval '[ "$RC" = 0 ] && grep -q "layer0_head0.png (1024 x 1024 PNG: the 1100 x 1100 weights downsampled" "$W/out"'
check "--attention-map at context 1100 writes a 1024 x 1024 PNG" python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
assert struct.unpack(">II", b[16:24]) == (1024, 1024)' "$W/mapsbig/layer0_head0.png"
run "$BIN/seqeval" --run "$A" --data valid --context 48 --attention-map "$W/maps0" --layer 0
check "--attention-map --layer 0 writes layer0_head*.png" test -f "$W/maps0/layer0_head1.png"
run "$BIN/seqeval" --run "$A" --data valid --context 48 --attention-map "$W/maps5" --layer 5
check "--attention-map --layer 5 on a 2-layer model is refused in one line naming --layer" \
    eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ] && grep -q -- "--layer" "$W/err"'
run "$BIN/seqeval" --run "$A" --data valid --context 0
check "seqeval --context 0 is refused in one line" eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ]'

# --- run.device cuda in this build (no CUDA backend: tests/gpu/run.sh tests the backend): seqtrain and seqeval
# refuse it in one line naming `make CUDA=1` before writing anything; seqeval takes a run's run.device unless
# --device says otherwise
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=cu --set run.device=cuda
check "seqtrain --set run.device=cuda without CUDA: refused in one line naming make CUDA=1, no run directory" \
    eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ] && grep -q "make CUDA=1" "$W/err" && [ ! -e "$W/runs/cu" ]'
run "$BIN/seqeval" --run "$A" --data valid --context 32 --max-windows 4 --device cuda --out "$W/ev-cu"
check "seqeval --device cuda without CUDA: refused in one line naming make CUDA=1 and --device cpu, nothing written" \
    eval '[ "$RC" = 1 ] && [ "$(wc -l < "$W/err")" = 1 ] && grep -q "make CUDA=1" "$W/err" && grep -q -- "--device cpu" "$W/err" && [ ! -e "$W/ev-cu" ]'
run "$BIN/seqeval" --run "$A" --task --device gpu
check "seqeval --device gpu is refused naming the option and its values" \
    eval '[ "$RC" = 1 ] && grep -q -- "--device: \"gpu\" is not cpu or cuda" "$W/err"'
cp -r "$A" "$W/runs/acu" && sed -i 's/"device":\t"cpu"/"device":\t"cuda"/' "$W/runs/acu/config.json"
check "fixture: a copy of the run whose config.json says run.device cuda" grep -qP '"device":\t"cuda"' "$W/runs/acu/config.json"
run "$BIN/seqeval" --run "$W/runs/acu" --probe "$W/probe.npy" --out "$W/probe-acu.safetensors"
check "seqeval takes the run's run.device: cuda, refused here naming --device cpu" \
    eval '[ "$RC" = 1 ] && grep -q -- "--device cpu" "$W/err" && [ ! -e "$W/probe-acu.safetensors" ]'
run "$BIN/seqeval" --run "$W/runs/acu" --device cpu --data valid --context 32,64 --max-windows 12 --out "$W/ev-acu"
check "... and with --device cpu evaluates it on the CPU: the original run's tables" \
    eval '[ "$RC" = 0 ] && diff "$W/ev/ppl.csv" "$W/ev-acu/ppl.csv"'


# --- rfa: per-head diagnostics in diag.jsonl every log_every steps, identical after an interrupted run resumes
# (the same tiny config with the rfa mixer: a --set would merge into the attention options)
sed 's/"mixer": {"kind": "attention", "heads": 2, "pos": "rope"}/"mixer": {"kind": "rfa", "heads": 4, "zero_decay_heads": 1}/' \
    "$W/tiny.json" > "$W/rfa.json"
RFA_SET=(--set train.steps=6 --set train.log_every=2 --set train.eval_every=0 --set train.ckpt_every=0)
run "$BIN/seqtrain" --config "$W/rfa.json" --quiet --set run.name=rfa_a "${RFA_SET[@]}"
check "rfa run finishes (exit 0)" test "$RC" = 0
check "diag.jsonl: 2 layers x steps 2, 4, 6, each with 7 per-head arrays of 4; mu = 0 exactly in head 0" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["step"], r["layer"]) for r in rows] == [(s, l) for s in (2, 4, 6) for l in (0, 1)], rows
for r in rows:
    for k in ("mu", "sigma_tilde2", "eta2", "gamma2", "alpha", "nu_over_d", "tau"):
        assert len(r[k]) == 4, (k, r[k])
    assert r["mu"][0] == 0 and r["mu"][1] > 0
    assert all(abs(a - (e - s)) < 1e-9 for a, e, s in zip(r["alpha"], r["eta2"], r["sigma_tilde2"]))' "$W/runs/rfa_a/diag.jsonl"
run "$BIN/seqtrain" --config "$W/rfa.json" --quiet --set run.name=rfa_b "${RFA_SET[@]}" --stop-after 3
run "$BIN/seqtrain" --resume "$W/runs/rfa_b" --quiet
check "rfa: diag.jsonl after --stop-after 3 and --resume equals the uninterrupted run's" \
    cmp "$W/runs/rfa_a/diag.jsonl" "$W/runs/rfa_b/diag.jsonl"

# --- a synthetic task (data.task): examples generated in-process, accuracy on its test split
cat > "$W/mqar.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 1},
  "data": {"task": {"kind": "mqar", "vocab": 64, "num_kv_pairs": 4, "train_examples": 4096, "test_examples": 128}},
  "model": {"d_model": 64, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 32, "seq_len": 64, "steps": 160, "eval_every": 80, "log_every": 20, "ckpt_every": 80},
  "optim": {"lr": 3e-3, "weight_decay": 0.1},
  "schedule": {"kind": "cosine", "warmup_steps": 20}
}
JSON
run "$BIN/seqtrain" --config "$W/mqar.json" --check
check "task --check: prints the task's vocab and split sizes" grep -q "task        mqar: vocab 64, 4096 train / 128 test examples" "$W/out"
check "--check: prints the run's length (160 steps of 32 x 64 tokens over 4096 examples = 1.25 epochs)" \
    grep -q "^training    160 steps x 2048 tokens = 3.28e+05 tokens, 1.25 epochs of data.train$" "$W/out"
run "$BIN/seqtrain" --config "$W/mqar.json" --set train.steps=0 --set train.epochs=0.5 --check
check "--check: train.epochs 0.5 of 4096 examples in batches of 32 is 64 steps" \
    grep -q "^training    64 steps x 2048 tokens = 1.31e+05 tokens, 0.50 epochs of data.train$" "$W/out"
run "$BIN/seqtrain" --config "$W/mqar.json" --info
check "--info: per-layer KV cache of 2 x 64 floats per token, 8192 at T = 64, as Table 1's H(dk+dv)·T" \
    eval 'grep -q "^| 0 | attention | 16384 | 128 per token (KV cache) | 8192 | KV cache: H(dk+dv)·T = 2·(32+32)·64 = 8192 |\$" "$W/out" && grep -q "^| all | | | | 16384 | Table 1 counts 16384 |" "$W/out"'
run "$BIN/seqtrain" --config "$W/mqar.json" --quiet --set run.name=mq
check "task run finishes (exit 0)" test "$RC" = 0
check "task run: val_acc logged at steps 80 and 160, and eval/acc.json (512 supervised positions)" python3 -c '
import json, sys
v = [json.loads(l) for l in open(sys.argv[1] + "/log.jsonl") if "val_acc" in l]
assert [x["step"] for x in v] == [80, 160], v
a = json.load(open(sys.argv[1] + "/eval/acc.json"))
assert a["task"] == "mqar" and a["positions"] == 128 * 4 and abs(a["accuracy"] - v[-1]["val_acc"]) < 1e-6, (a, v)
# chance is 1/32 (the value half of the vocabulary); attention learns well above it in 160 steps
assert a["accuracy"] > 0.1, a' "$W/runs/mq"
run "$BIN/seqeval" --run "$W/runs/mq" --task
check "seqeval --task reproduces the trainer's accuracy" python3 -c '
import json, sys
a = json.load(open(sys.argv[1])); b = json.loads(open(sys.argv[2]).read())
assert a["accuracy"] == b["accuracy"] and a["positions"] == b["positions"], (a, b)' "$W/runs/mq/eval/acc.json" "$W/out"
run "$BIN/seqtrain" --config "$W/mqar.json" --quiet --set run.name=mq2 --stop-after 100
run "$BIN/seqtrain" --resume "$W/runs/mq2" --quiet
check "task run: interrupted at 100 and resumed, the loss curve is bit-identical" \
    cmp <(losses "$W/runs/mq/log.jsonl") <(losses "$W/runs/mq2/log.jsonl")
# early stop (train.stop_at_acc): a threshold the uninterrupted run reached at its step-80 evaluation
acc80=$(python3 -c 'import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if "val_acc" in l][0]["val_acc"])' "$W/runs/mq/log.jsonl")
run "$BIN/seqtrain" --config "$W/mqar.json" --quiet --set run.name=mq3 --set train.stop_at_acc=$acc80
check "stop_at_acc $acc80: stops at the step-80 evaluation, exit 0, final checkpoint and eval/acc.json" python3 -c '
import json, os, sys
d = sys.argv[1]
log = [json.loads(l) for l in open(d + "/log.jsonl")]
assert max(x["step"] for x in log) == 80, log[-3:]
assert log[-1] == {"step": 80, "stopped_early": True, "val_acc": float(sys.argv[2])}, log[-1]
st = json.load(open(d + "/ckpt-00000080/state.json"))
assert st["stopped_early"] is True and st["step"] == 80
assert os.path.exists(d + "/eval/acc.json")' "$W/runs/mq3" "$acc80"
check "... its losses are the uninterrupted run's first 80" cmp <(losses "$W/runs/mq/log.jsonl" | head -n 4) <(losses "$W/runs/mq3/log.jsonl")
test "$RC" = 0 || not_ok "stop_at_acc run exit status" "$RC"
run "$BIN/seqtrain" --resume "$W/runs/mq3" --quiet
check "resuming an early-stopped run trains nothing (exit 0)" \
    eval '[ "$RC" = 0 ] && grep -q "stopped early at step 80 of 160" "$W/out" && [ "$(grep -c "\"loss\"" "$W/runs/mq3/log.jsonl")" = 4 ]'
run "$BIN/seqtrain" --config "$W/mqar.json" --set train.stop_at_acc=0.99 --set train.eval_every=0 --check
check "stop_at_acc without train.eval_every is refused, saying what to set" \
    eval '[ "$RC" = 1 ] && grep -q "train.stop_at_acc" "$W/err" && grep -q "eval_every" "$W/err"'
# early stop by patience (train.patience, the KLA paper's protocol): 256 examples of batch 32 = 8 steps an epoch,
# an evaluation every epoch; the model overfits, so the test loss turns up early and the accuracy later. The
# stopping step is predicted from a run without patience (the same steps up to there), for both metrics.
cat > "$W/pat.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 1},
  "data": {"task": {"kind": "mqar", "vocab": 64, "num_kv_pairs": 4, "train_examples": 256, "test_examples": 128}},
  "model": {"d_model": 64, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"batch_size": 32, "seq_len": 64, "steps": 200, "eval_every": 8, "log_every": 8, "ckpt_every": 0},
  "optim": {"lr": 3e-3, "weight_decay": 0},
  "schedule": {"kind": "constant"}
}
JSON
run "$BIN/seqtrain" --config "$W/pat.json" --quiet --set run.name=pat0
predict() {  # predict LOG METRIC PATIENCE_STEPS: the step where patience stops (the rule of train.patience)
    python3 -c '
import json, sys
log, metric, ps = sys.argv[1], sys.argv[2], int(sys.argv[3])
ev = [json.loads(l) for l in open(log) if "val_loss" in l]
best = None
for d in ev[:-1]:  # the last evaluation ends the run anyway
    v = d["val_loss"] if metric == "loss" else d["val_acc"]
    if best is None or (v < best[0] if metric == "loss" else v > best[0]):
        best = (v, d["step"])
    elif d["step"] - best[1] >= ps:
        print(d["step"], best[1]); sys.exit(0)
print("none")' "$@"
}
for metric in loss acc; do
    read -r stop best < <(predict "$W/runs/pat0/log.jsonl" $metric 24)
    if [ "$stop" = none ]; then not_ok "patience 3 epochs on $metric: the reference run gives a stop before step 200" "no stop"; continue; fi
    run "$BIN/seqtrain" --config "$W/pat.json" --quiet --set run.name=pat_$metric --set train.patience=3 \
        --set train.patience_metric=$metric
    check "patience 3 epochs (24 steps) on the test $metric: stops at step $stop (best at $best), exit 0, checkpoint and eval/acc.json" python3 -c '
import json, os, sys
d, stop, best, metric = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
log = [json.loads(l) for l in open(d + "/log.jsonl")]
assert max(x["step"] for x in log) == stop, log[-3:]
last = log[-1]
assert last["stopped_early"] is True and last["step"] == stop and last["best_step"] == best and last["patience"] == 3, last
st = json.load(open(d + "/ckpt-%08d/state.json" % stop))
assert st["stopped_early"] is True and st["best_step"] == best
assert os.path.exists(d + "/eval/acc.json")' "$W/runs/pat_$metric" "$stop" "$best" $metric
    test "$RC" = 0 || not_ok "patience run ($metric) exit status" "$RC"
    check "... its losses are the run's without patience up to step $stop" \
        cmp <(losses "$W/runs/pat0/log.jsonl" | head -n $((stop / 8))) <(losses "$W/runs/pat_$metric/log.jsonl")
done
# the best evaluation so far is in the checkpoint: stopped after the loss's best and resumed, the run stops where it
# would have
read -r stop best < <(predict "$W/runs/pat0/log.jsonl" loss 24)
run "$BIN/seqtrain" --config "$W/pat.json" --quiet --set run.name=pat_r --set train.patience=3 --stop-after $((best + 8))
run "$BIN/seqtrain" --resume "$W/runs/pat_r" --quiet
check "patience: stopped at step $((best + 8)) (after the best, $best) and resumed, it stops at $stop with the same losses" \
    eval '[ "$RC" = 0 ] && [ -n "$stop" ] && cmp <(losses "$W/runs/pat_loss/log.jsonl") <(losses "$W/runs/pat_r/log.jsonl")'
run "$BIN/seqtrain" --config "$W/pat.json" --set train.patience=3 --set train.eval_every=0 --check
check "patience without train.eval_every is refused, saying what to set" \
    eval '[ "$RC" = 1 ] && grep -q "train.patience" "$W/err" && grep -q "eval_every" "$W/err"'
run "$BIN/seqtrain" --config "$W/tiny.json" --set train.patience=3 --set train.patience_metric=acc --check
check "patience on acc for a run on shards (no accuracy) is refused" \
    eval '[ "$RC" = 1 ] && grep -q "train.patience_metric" "$W/err"'
run "$BIN/seqtrain" --config "$W/tiny.json" --set train.patience=3 --set 'data.val=[]' --set eval.split=test --check
check "patience without validation data is refused, naming data.val" \
    eval '[ "$RC" = 1 ] && grep -q "train.patience" "$W/err" && grep -q "data.val" "$W/err"'
run "$BIN/seqtrain" --config "$W/mqar.json" --set 'data.train=["x.shard"]' --check
check "data.task with data.train is refused, naming both" eval '[ "$RC" = 1 ] && grep -q "data.task" "$W/err" && grep -q "data.train" "$W/err"'
run "$BIN/seqtrain" --config "$W/mqar.json" --set data.task.num_kv_pairs=40 --check
check "a task option out of range is refused naming it" eval '[ "$RC" = 1 ] && grep -q "num_kv_pairs" "$W/err"'
run "$BIN/seqtrain" --config "$W/mqar.json" --set data.task.kind=none --check
check "no task and no data.train: refused, saying what to set" eval '[ "$RC" = 1 ] && grep -q "data.train" "$W/err" && grep -q "data.task" "$W/err"'
# --- divergence and non-finite numbers (issue 24): the trainer stops naming the step and the last good
# checkpoint, never writes a checkpoint holding NaN/Inf, every JSON file stays valid JSON (null for
# non-finite numbers), and seqeval refuses NaN weights
strict_json() {  # strict_json FILE...: every line (.jsonl) or the whole file (.json) parses without NaN/Infinity
    python3 -c '
import json, sys
def bad(c): raise ValueError("non-JSON constant " + c)
for f in sys.argv[1:]:
    text = open(f).read()
    docs = text.splitlines() if f.endswith(".jsonl") else [text]
    for d in docs:
        if d.strip(): json.loads(d, parse_constant=bad)' "$@"
}
all_finite() {  # all_finite FILE.safetensors...: no NaN or Inf in any tensor
    python3 -c '
import math, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
from safetensors_read import load
for f in sys.argv[2:]:
    t, _ = load(f)
    for k, v in t.items():
        assert all(math.isfinite(x) for x in v), (f, k)' "$ROOT" "$@"
}
poison() {  # poison FILE.safetensors PREFIX VALUE: every F32 tensor whose name starts with PREFIX set to VALUE
    python3 -c '
import json, struct, sys
path, prefix, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    for name, t in hdr.items():
        if name != "__metadata__" and name.startswith(prefix):
            b, e = t["data_offsets"]
            f.seek(8 + n + b)
            f.write(struct.pack("<f", value) * ((e - b) // 4))' "$@"
}
DIV="--quiet --set optim.lr=10 --set optim.weight_decay=10 --set schedule.kind=constant --set train.grad_accum=1"
# shellcheck disable=SC2086
run "$BIN/seqtrain" --config "$W/tiny.json" $DIV --set run.name=div --set train.eval_every=4 --set train.ckpt_every=2
check "lr 10, weight decay 10: stops (exit 1) on the non-finite step, naming it and the last good checkpoint" \
    eval '[ "$RC" = 1 ] && grep -Eq "step [0-9]+: the (loss|gradient norm) is not finite" "$W/err" &&
          grep -q "last good checkpoint is $W/runs/div/ckpt-0000000[0-9]" "$W/err"'
check "... the diverged run's log.jsonl is valid JSON, with val_ppl null where exp(loss) overflowed" \
    eval 'strict_json "$W/runs/div/log.jsonl" && grep -q "\"val_ppl\": null" "$W/runs/div/log.jsonl"'
check "... its checkpoints hold finite numbers only" eval 'all_finite "$W"/runs/div/ckpt-*/*.safetensors'
# a damaged optimizer state (negative second moments): the loss of the next step is still finite, its update
# makes every parameter NaN; no checkpoint may record that
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=nanu --set train.steps=6 --set train.ckpt_every=1 \
    --set train.eval_every=0 --set train.grad_accum=1 --stop-after 3
cp -r "$W/runs/nanu" "$W/runs/nanw-generic"
poison "$W/runs/nanu/ckpt-00000003/optim.safetensors" v. -1
run "$BIN/seqtrain" --resume "$W/runs/nanu" --quiet
check "NaN parameters after an update: exit 1, the tensor named, no checkpoint written, latest stays ckpt-3" \
    eval '[ "$RC" = 1 ] && grep -q "step 4: parameter .* holds a non-finite value" "$W/err" &&
          grep -q "no checkpoint written" "$W/err" && [ ! -e "$W/runs/nanu/ckpt-00000004" ] &&
          grep -qx ckpt-00000003 "$W/runs/nanu/latest"'
# a checkpoint holding NaN weights is refused on resume, naming the file and the tensor, and nothing is trained
poison "$W/runs/nanw-generic/ckpt-00000003/model.safetensors" blocks.0 nan
run "$BIN/seqtrain" --resume "$W/runs/nanw-generic" --quiet
check "--resume of a checkpoint with NaN weights: refused, naming model.safetensors and the tensor" \
    eval '[ "$RC" = 1 ] && grep -q "model.safetensors: parameter .blocks\.0\..* holds a non-finite value" "$W/err" &&
          [ ! -e "$W/runs/nanw-generic/ckpt-00000004" ] && grep -qx ckpt-00000003 "$W/runs/nanw-generic/latest"'
# non-finite values reach the attention kernels (the plain C ones' exp once converted NaN to int, undefined
# behaviour that aborted the UBSan build): diverging through the generic kernels ends in the trainer's clean stop
# shellcheck disable=SC2086
SEQ_KERNELS=generic run "$BIN/seqtrain" --config "$W/tiny.json" $DIV --set run.name=div-generic --set train.eval_every=0 \
    --set train.ckpt_every=0
check "lr 10 through the generic attention kernels: the non-finite stop (exit 1, naming the step)" \
    eval '[ "$RC" = 1 ] && grep -Eq "step [0-9]+: the (loss|gradient norm) is not finite" "$W/err"'
# seqeval on NaN weights
cp -r "$A" "$W/runs/nanw"
poison "$W/runs/nanw/ckpt-00000024/model.safetensors" blocks.1 nan
run "$BIN/seqeval" --run "$W/runs/nanw" --data valid --context 32 --max-windows 4 --out "$W/ev-nan"
check "seqeval on NaN weights fails (exit 1) naming the run, the tensor and what is wrong" \
    eval '[ "$RC" = 1 ] && grep -q "$W/runs/nanw" "$W/err" && grep -q "tensor .blocks\.1" "$W/err" &&
          grep -q "non-finite" "$W/err" && [ ! -e "$W/ev-nan/ppl.json" ]'
check "the JSON tables of a healthy run are strict JSON (ppl.json, log.jsonl, state.json)" \
    strict_json "$A/eval/ppl.json" "$A/log.jsonl" "$A/ckpt-00000024/state.json" "$W/ev/ppl.json"

# --- a link to a device (/dev/full) planted as log.jsonl, ppl.json or acc.json is refused, never written through
# (issue 53); write errors themselves (a full disk) are tests/test_files.c's, on /dev/full's descriptor
mkdir -p "$W/runs/full" && ln -s /dev/full "$W/runs/full/log.jsonl"
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=full --set train.steps=2
check "a log.jsonl link to /dev/full: exit 1, naming log.jsonl and the reason" \
    eval '[ "$RC" = 1 ] && grep -q "$W/runs/full/log.jsonl: is a symbolic link; refusing to write through it" "$W/err"'
mkdir -p "$W/ev-full" && ln -s /dev/full "$W/ev-full/ppl.json"
run "$BIN/seqeval" --run "$A" --data valid --context 32 --max-windows 4 --out "$W/ev-full"
check "seqeval: a ppl.json link to /dev/full: exit 1, naming ppl.json" \
    eval '[ "$RC" = 1 ] && grep -q "$W/ev-full/ppl.json: is a symbolic link" "$W/err"'
mkdir -p "$W/runs/mqfull/eval" && ln -s /dev/full "$W/runs/mqfull/eval/acc.json"
run "$BIN/seqtrain" --config "$W/mqar.json" --quiet --set run.name=mqfull --set train.steps=2 --set train.eval_every=0 \
    --set schedule.warmup_steps=0
check "an acc.json link to /dev/full: exit 1, naming acc.json" \
    eval '[ "$RC" = 1 ] && grep -q "$W/runs/mqfull/eval/acc.json: is a symbolic link" "$W/err"'

# --- everything validated up front (issue 24): --check fails where the run would fail at start-up or at its end
for bad in "abc,-5,,0:abc" "32,-5:-5" "32,,64:" "0:0" "32,64x:64x"; do
    ctx=${bad%%:*} item=${bad#*:}
    run "$BIN/seqtrain" --config "$W/tiny.json" --set "eval.contexts=\"$ctx\"" --check
    check "--check: eval.contexts \"$ctx\" fails, naming eval.contexts and the entry \"$item\"" \
        eval '[ "$RC" = 1 ] && grep -qF "eval.contexts: entry" "$W/err" && grep -qF "(\"$item\")" "$W/err"'
done
run "$BIN/seqtrain" --config "$W/tiny.json" --set eval.contexts='"32,64"' --check
check "--check: eval.contexts \"32,64\" passes" test "$RC" = 0
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=badctx --set eval.contexts='"32,x"'
check "a run with a bad eval.contexts fails before step 1 (no run directory)" \
    eval '[ "$RC" = 1 ] && grep -q "eval.contexts" "$W/err" && [ ! -e "$W/runs/badctx" ]'
run "$BIN/seqtrain" --config "$W/tiny.json" --set 'data.test=[]' --set eval.split=test --check
check "--check: eval.split test with an empty data.test fails, naming both" \
    eval '[ "$RC" = 1 ] && grep -q "eval.split" "$W/err" && grep -q "data.test is empty" "$W/err"'
run "$BIN/seqtrain" --config "$W/tiny.json" --set schedule='{"kind": "wsd", "warmup_steps": 20, "decay_frac": 0.5}' --check
check "--check: a wsd warmup overlapping its decay (20 + 12 of 24 steps) fails, naming the keys" \
    eval '[ "$RC" = 1 ] && grep -q "warmup_steps" "$W/err" && grep -q "decay_frac" "$W/err" && grep -q "schedule" "$W/err"'
run "$BIN/seqtrain" --config "$W/tiny.json" --set schedule='{"kind": "wsd", "warmup_steps": 4, "decay_frac": 0.5}' --check
check "--check: a wsd warmup before its decay (4 + 12 of 24 steps) passes" test "$RC" = 0
# grad_accum x batch_size x seq_len inside each key's range but over 2^31 - 1 tokens: refused up front
# (it overflowed int in the step's token count: UBSan)
run "$BIN/seqtrain" --config "$W/tiny.json" --set train.grad_accum=1048576 --set train.batch_size=64 --check
check "--check: 1048576 x 64 x 32 tokens per step fails, naming the three keys" \
    eval '[ "$RC" = 1 ] && grep -q "train.grad_accum x train.batch_size x train.seq_len" "$W/err"'

# --- the final checkpoint comes before the final validation: a damaged data.val read only at the end
# (train.eval_every 0) fails the run but keeps the trained model
cp "$W/val.shard" "$W/bad-val.shard"
printf '\377\377\377\377\377\377\377\377' | dd of="$W/bad-val.shard" bs=1 seek=$(($(stat -c %s "$W/val.shard") / 2)) \
    conv=notrunc 2>/dev/null
run "$BIN/seqtrain" --config "$W/tiny.json" --quiet --set run.name=badval --set "data.val=\"$W/bad-val.shard\"" \
    --set train.eval_every=0 --set train.steps=6
check "a damaged data.val at the end: exit 1 naming the shard, with ckpt-00000006 written and latest" \
    eval '[ "$RC" = 1 ] && grep -q "bad-val.shard" "$W/err" && grep -qx ckpt-00000006 "$W/runs/badval/latest" &&
          [ -f "$W/runs/badval/ckpt-00000006/model.safetensors" ]'

test_done
