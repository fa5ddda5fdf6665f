#!/usr/bin/env bash
# `make test-cuda` (and the last step of `make test`): the GPU backend against the CPU.
#   1. everywhere, on the backend's kernels emulated on the CPU (tests/gpu/emu/): the parity test
#      (tests/gpu/test_gpu_parity.c: logits, loss, every gradient, 6 AdamW steps, bit-identical repeats; fp32 and bf16),
#      the linear-recurrence engine against nn/linrec.c (tests/gpu/test_gpu_linrec.c), the delta-rule engine against
#      nn/delta.c (tests/gpu/test_gpu_delta.c), KLA's Kalman scan against nn/kalman.c (tests/gpu/test_gpu_kalman.c)
#      and the linear family's ops
#      against their nn/ twins (tests/gpu/test_gpu_ops.c), recurrent decoding on the GPU against the host's decoder
#      (tests/gpu/test_gpu_decode.c: every mixer with a GPU step, greedy generation), then training runs through
#      seqtrain (below);
#   2. where nvcc exists: the CUDA build (make CUDA=1), the parity test on the GPU (fp32, tf32 and bf16) and the
#      kernels' tests (linear recurrence, delta rule, ops); without a GPU they run only what needs none (the
#      refusals) and say "skipped";
#   3. with a GPU: the training runs again on it.
# The training runs: a run on the CPU and the same run with run.device cuda give the same loss curve and
# checkpoints with the same header; a GPU run stopped and resumed is bit-identical to one that was not; a GPU
# run finishes on the CPU and a CPU run on the GPU, each on its device's curve; tf32 and bf16 stay near fp32
# (bf16 also across a stop and resume, bit-identically).
# Evaluation on the GPU: the GPU run's validation (on the GPU, as its SEQ_PROFILE table shows) gives the CPU
# run's validation losses and accuracies; seqeval --device cuda on one checkpoint gives --device cpu's
# perplexity tables (contexts up to one window of 4096, and sliding windows), per-position curves and --task
# accuracy, and its --probe dump (logits, loss, every gradient) is the CPU's for every position scheme.
# The linear family and the state-space mixers (linear_runs): gla, retnet, linear_attn, gsa, deltanet,
# gated_deltanet (also with selective_rope), mamba2, mlstm, kla and a hybrid
# (attention, then gla) each train on the GPU on the CPU's curve, resume bit-identically, move between the
# devices both ways (on the emulator: gla, gated_deltanet and the hybrid, LINEAR_MOVES), and give the CPU's
# perplexity, per-position curves and --probe.
#   bash tests/gpu/run.sh      (from the repository root; SEQ_JOBS=N compile jobs, default 2; SEQ_NVCC=path;
#                               SEQ_GPU_ONLY=1 skips part 1, for a GPU machine whose emulated run happened elsewhere)
set -u
JOBS=${SEQ_JOBS:-2}
source tests/lib.sh || exit 2  # ok, not_ok, test_scratch
test_scratch cuda
# check_measured WHAT CMD...: check, with CMD's first line of output (a comparison's measured differences) on its
# "ok" line
check_measured() {
    local what=$1; shift
    if "$@" >"$W/check.out" 2>&1; then
        [ -s "$W/check.out" ] && what="$what [$(head -1 "$W/check.out")]"
        ok "$what"
    else
        not_ok "$what" "$(tail -3 "$W/check.out" | tr '\n' ' ')"
    fi
}
losses() { grep '"loss"' "$1" | sed 's/, "tokens_per_s.*//'; }
header() { python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; sys.stdout.write(f.read(n).decode())' "$1"; }
cmp_losses() {  # cmp_losses LOG REFERENCE_LOG TOL: every step's loss within relative TOL
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"loss"' in x]
b = [json.loads(x)["loss"] for x in open(sys.argv[2]) if '"loss"' in x]
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("worst relative loss difference %.3e" % worst)
assert worst <= float(sys.argv[3]), worst
PY
}

cmp_val() {  # cmp_val LOG REFERENCE_LOG TOL: the validation lines' losses within relative TOL, their accuracies
    # within one supervised position (a prediction may flip at a near-tie of two logits), the same token counts
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(x) for x in open(sys.argv[1]) if '"val_loss"' in x]
b = [json.loads(x) for x in open(sys.argv[2]) if '"val_loss"' in x]
assert len(a) == len(b) == 2, (len(a), len(b))
worst = max(abs(x["val_loss"] - y["val_loss"]) / abs(y["val_loss"]) for x, y in zip(a, b))
acc = max(abs(x["val_acc"] - y["val_acc"]) * y["val_tokens"] for x, y in zip(a, b))
print("worst relative validation loss difference %.3e, accuracy %.0f positions" % (worst, acc))
assert all(x["val_tokens"] == y["val_tokens"] and x["step"] == y["step"] for x, y in zip(a, b))
assert worst <= float(sys.argv[3]) and acc <= 1 + 1e-9, (worst, acc)
PY
}
# the tolerances of one model on two devices (tests/gpu/test_gpu_parity.c): fp32 2e-4 of a tensor's largest
# magnitude, the loss a tenth of that
cmp_ppl() {  # cmp_ppl DIR REFERENCE_DIR: seqeval's ppl.json and positions_<L>.csv of the same checkpoint
    python3 - "$1" "$2" <<'PY'
import csv, json, sys
a, b = (json.load(open(d + "/ppl.json"))["results"] for d in sys.argv[1:3])
assert [(x["context"], x["windows"], x["tokens"]) for x in a] == [(x["context"], x["windows"], x["tokens"]) for x in b]
worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
curve = 0
for r in b:
    pa, pb = ([(int(x["position"]), int(x["count"]), float(x["loss"])) for x in csv.DictReader(open(
        "%s/positions_%d.csv" % (d, r["context"])))] for d in sys.argv[1:3])
    assert [x[:2] for x in pa] == [x[:2] for x in pb], r["context"]
    curve = max(curve, max(abs(x[2] - y[2]) for x, y in zip(pa, pb)) / max(abs(y[2]) for y in pb))
print("contexts %s: worst relative loss difference %.3e, per-position curves %.3e" % (
    ",".join(str(x["context"]) for x in b), worst, curve))
assert worst <= 2e-5 and curve <= 2e-4, (worst, curve)
PY
}
cmp_task() {  # cmp_task OUT REFERENCE_OUT [any]: seqeval --task's JSON lines; "any" takes a checkpoint that predicts none
    python3 - "$1" "$2" "${3:-}" <<'PY'
import json, sys
a, b = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3])
assert b["accuracy"] > 0 or sys.argv[3] == "any", b  # some predictions right: the GPU's argmax must find them
d = abs(a["loss"] - b["loss"]) / abs(b["loss"])
flips = abs(a["accuracy"] - b["accuracy"]) * b["positions"]
print("loss %.9g vs %.9g (relative %.3e), accuracy %.6f vs %.6f" % (a["loss"], b["loss"], d, a["accuracy"], b["accuracy"]))
assert a["positions"] == b["positions"] and d <= 2e-5 and flips <= 1 + 1e-9, (d, flips)
PY
}
cmp_probe() {  # cmp_probe DUMP REFERENCE_DUMP TOL: the same tensors, each within TOL of its largest magnitude
    PYTHONPATH=scripts python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
from safetensors_read import read_header  # checks the format; numpy is not needed
def load(path):  # {name: (shape, flat floats)} of an F32 safetensors file, and its metadata
    header, meta, data = read_header(path)
    out = {}
    for k, t in header.items():
        assert t["dtype"] == "F32", (k, t["dtype"])
        o0, o1 = t["data_offsets"]
        out[k] = (t["shape"], struct.unpack("<%df" % ((o1 - o0) // 4), data[o0:o1]))
    return out, meta
a, ma = load(sys.argv[1])
b, mb = load(sys.argv[2])
assert ma == mb and sorted(a) == sorted(b) and "logits" in b and "loss" in b, (ma, mb, sorted(a)[:4], sorted(b)[:4])
assert sum(k.startswith("grad.") for k in b) == len(b) - 2
rel = {}
for k in b:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    scale = max(abs(y) for y in b[k][1])
    rel[k] = max(abs(x - y) for x, y in zip(a[k][1], b[k][1])) / (scale if scale > 0 else 1.0)
g = max((v, k) for k, v in rel.items() if k.startswith("grad."))
print("logits %.3e, loss %.3e, worst of %d gradients %.3e (%s)" % (rel["logits"], rel["loss"], len(b) - 2, g[0], g[1]))
bad = {k: v for k, v in rel.items() if not v <= float(sys.argv[3])}
assert not bad, bad
PY
}

# train ARGS...: seqtrain of the calling function's BIN ($B) on ARGS, quiet, its output in train.log
train() { OMP_NUM_THREADS=2 "$B/seqtrain" "$@" --quiet >>"$W/train.log" 2>&1; }

# training_runs LABEL BIN: the CLI checks with BIN/seqtrain, whose run.device cuda is the backend under test
training_runs() {
    local L=$1 B=$2 R="$W/runs-$1"
    sed "s|@RUNS@|$R|" > "$W/tiny.json" <<'JSON'
{
  "run": {"dir": "@RUNS@", "seed": 3, "precision": "fp32"},
  "data": {"task": {"kind": "mqar", "vocab": 128, "num_kv_pairs": 4, "train_examples": 500, "test_examples": 16}},
  "model": {"d_model": 32, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"seq_len": 32, "batch_size": 4, "grad_accum": 2, "steps": 12, "eval_every": 6, "ckpt_every": 6},
  "optim": {"lr": 3e-3, "grad_clip": 1.0, "groups": [{"match": "*.ln*", "lr_mult": 0.5}]},
  "schedule": {"kind": "cosine", "warmup_steps": 2}
}
JSON
    train --config "$W/tiny.json" --set run.name=cpu
    SEQ_PROFILE=1 OMP_NUM_THREADS=2 "$B/seqtrain" --config "$W/tiny.json" --set run.name=gpu --set run.device=cuda \
        --quiet >>"$W/train.log" 2>"$W/gpu-prof.txt"
    check_measured "$L: a 12-step run with run.device cuda (fp32) finishes" test -f "$R/gpu/ckpt-00000012/model.safetensors"
    check_measured "$L: its loss curve is the CPU run's (rel 1e-3)" cmp_losses "$R/gpu/log.jsonl" "$R/cpu/log.jsonl" 1e-3
    check_measured "$L: its validation losses are the CPU run's (rel 1e-3), accuracies within one position" \
        cmp_val "$R/gpu/log.jsonl" "$R/cpu/log.jsonl" 1e-3
    # the predictions of validation at steps 6 and 12 and of the final evaluation, 4 batches of the 16 test
    # examples each, ran on the GPU
    check_measured "$L: ... computed on the GPU (SEQ_PROFILE: 12 eval.argmax calls)" \
        grep -qE '^eval\.argmax +12 ' "$W/gpu-prof.txt"
    local f
    for f in model optim; do
        check_measured "$L: its $f.safetensors has the CPU run's header (names, shapes, offsets)" \
            eval '[ "$(header "$R/gpu/ckpt-00000012/$f.safetensors")" = "$(header "$R/cpu/ckpt-00000012/$f.safetensors")" ]'
    done
    train --config "$W/tiny.json" --set run.name=gpu2 --set run.device=cuda --stop-after 6
    train --resume "$R/gpu2"
    check_measured "$L: stopped at 6 and resumed, the curve is bit-identical" \
        eval '[ "$(losses "$R/gpu2/log.jsonl")" = "$(losses "$R/gpu/log.jsonl")" ]'
    train --config "$W/tiny.json" --set run.name=g2c --set run.device=cuda --stop-after 6
    train --resume "$R/g2c" --set run.device=cpu
    check_measured "$L: a GPU run resumes on the CPU and finishes" test -f "$R/g2c/ckpt-00000012/model.safetensors"
    check_measured "$L: ... on the GPU run's curve (rel 1e-3)" cmp_losses "$R/g2c/log.jsonl" "$R/gpu/log.jsonl" 1e-3
    train --config "$W/tiny.json" --set run.name=c2g --stop-after 6
    train --resume "$R/c2g" --set run.device=cuda
    check_measured "$L: a CPU run resumes on the GPU and finishes" test -f "$R/c2g/ckpt-00000012/model.safetensors"
    check_measured "$L: ... on the CPU run's curve (rel 1e-3)" cmp_losses "$R/c2g/log.jsonl" "$R/cpu/log.jsonl" 1e-3
    train --config "$W/tiny.json" --set run.name=tf32 --set run.device=cuda --set run.precision=tf32
    check_measured "$L: tf32: the curve stays within rel 3e-2 of the CPU's" cmp_losses "$R/tf32/log.jsonl" "$R/cpu/log.jsonl" 3e-2
    train --config "$W/tiny.json" --set run.name=bf16 --set run.device=cuda --set run.precision=bf16 --stop-after 6
    train --resume "$R/bf16"
    check_measured "$L: bf16 (stopped at 6, resumed): the curve stays within rel 3e-2 of the CPU's" \
        cmp_losses "$R/bf16/log.jsonl" "$R/cpu/log.jsonl" 3e-2
    train --config "$W/tiny.json" --set run.name=bf16b --set run.device=cuda --set run.precision=bf16
    check_measured "$L: bf16: stopped and resumed, the curve is bit-identical" \
        eval '[ "$(losses "$R/bf16/log.jsonl")" = "$(losses "$R/bf16b/log.jsonl")" ]'
    # --task's accuracy on a checkpoint that predicts some of the values (12 steps predict none): 1000 CPU steps
    train --config "$W/tiny.json" --set run.name=acc --set data.task.train_examples=20000 --set train.steps=1000 \
        --set train.eval_every=0 --set train.ckpt_every=0
    # every other position scheme the GPU takes, for --probe (the gpu run is rope): 4 CPU steps each
    local s
    for s in "${!SCHEMES[@]}"; do
        # shellcheck disable=SC2086  # the scheme's --set arguments, split on purpose
        train --config "$W/tiny.json" --set run.name="pos-$s" --set train.steps=4 --set train.eval_every=0 \
            --set train.ckpt_every=0 ${SCHEMES[$s]}
    done
    seqeval_runs "$L" "$B" "$R/gpu" "$R/acc" "$R"
}

# the position schemes of the probe parity (item 4 of issue 23) besides the gpu run's rope, as --set arguments;
# the probe's T = 40 puts window 24 across two key tiles
declare -A SCHEMES=(
    [none]="--set model.mixer.pos=none"
    [alibi]="--set model.mixer.pos=alibi"
    [fox]="--set model.mixer.pos=fox --set model.mixer.bias=true"
    [decayed_rope]="--set model.mixer.pos=decayed_rope --set model.mixer.zero_decay_heads=1"
    [sc_rope_logits]="--set model.mixer.pos=sc_rope --set model.mixer.decay_mode=logits"
    [sc_rope_interleaved]="--set model.mixer.pos=sc_rope --set model.mixer.rope_layout=interleaved"
    [window]="--set model.mixer.window=24"
    [fox_window]="--set model.mixer.pos=fox --set model.mixer.window=24"
    [qk_norm]="--set model.mixer.qk_norm=true"
    [selrope_fox]="--set model.mixer.pos=fox --set model.mixer.selective_rope={\"enabled\":true,\"use_gate\":true}"
)

# seqeval_runs LABEL BIN RUN TASK_RUN RUNS: BIN/seqeval --device cuda against --device cpu on RUN's last
# checkpoint (fp32), --task on TASK_RUN's, --probe on RUN's (pos rope) and on RUNS/pos-<scheme>'s, in fp32 and,
# on a real GPU, tf32 and bf16 (the emulator has no TF32 rounding)
seqeval_runs() {
    local L=$1 B=$2 RUN=$3 TASK_RUN=$4 RUNS=$5 E="$W/eval-$1" d LONG=4096
    # the emulator runs attention's O(T^2) work on one core: its single long window is 600 tokens
    [ "$L" = emulated ] && LONG=600
    mkdir -p "$E"
    # perplexity data: 4200 tokens of the task's 128-token vocabulary (one window of 4096, B = 1),
    # and a probe batch (3, 41): T = 40 is one partial 64-row query block and a partial 32-key tile
    python3 - "$E" <<'PY'
import random, struct, sys
r = random.Random(7)
open(sys.argv[1] + "/tokens.u16", "wb").write(struct.pack("<4200H", *(r.randrange(128) for _ in range(4200))))
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 41), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
body = struct.pack("<123i", *(r.randrange(128) for _ in range(123)))
open(sys.argv[1] + "/probe.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + body)
PY
    for d in cpu cuda; do
        OMP_NUM_THREADS=2 "$B/seqeval" --run "$RUN" --device "$d" --data "$E/tokens.u16" --format raw_u16 \
            --vocab 128 --context 16,40,$LONG --max-windows 40 --out "$E/ppl-$d" >"$E/ppl-$d.out" 2>"$E/ppl-$d.err"
        OMP_NUM_THREADS=2 "$B/seqeval" --run "$RUN" --device "$d" --data "$E/tokens.u16" --format raw_u16 \
            --vocab 128 --context 40 --stride 8 --max-windows 64 --out "$E/slide-$d" >"$E/slide-$d.out" 2>&1
        OMP_NUM_THREADS=2 "$B/seqeval" --run "$TASK_RUN" --device "$d" --task >"$E/task-$d.out" 2>"$E/task-$d.err"
    done
    check_measured "$L: seqeval --device cuda runs on the GPU (it names the device)" grep -q "^seqeval: device " "$E/ppl-cuda.err"
    check_measured "$L: seqeval --device cuda: perplexity at contexts 16, 40 (16 windows a forward) and $LONG (one) is the CPU's" \
        cmp_ppl "$E/ppl-cuda" "$E/ppl-cpu"
    check_measured "$L: ... and with sliding windows (context 40, stride 8: only the last 8 positions count)" \
        cmp_ppl "$E/slide-cuda" "$E/slide-cpu"
    check_measured "$L: seqeval --device cuda --task: the CPU's loss and accuracy" cmp_task "$E/task-cuda.out" "$E/task-cpu.out"
    # --probe on each scheme's checkpoint
    local s r
    for s in rope "${!SCHEMES[@]}"; do
        r="$RUNS/pos-$s"
        [ "$s" = rope ] && r=$RUN
        probe_runs "$L" "$B" "$r" "$s"
    done
}

# probe_runs LABEL BIN RUN NAME: seqeval --probe on RUN's checkpoint: logits, loss and every gradient on the GPU
# against the CPU's dump, in fp32 and, on a real GPU, tf32 and bf16, with test_gpu_parity's tolerances (of a
# tensor's largest magnitude). The probe batch is seqeval_runs' (eval-LABEL/probe.npy).
probe_runs() {
    local L=$1 B=$2 r=$3 s=$4 E="$W/eval-$1" precs="fp32:2e-4" p
    [ "$L" = emulated ] || precs="fp32:2e-4 tf32:3e-2 bf16:3e-2"
    probe() { OMP_NUM_THREADS=2 "$B/seqeval" --run "$r" --probe "$E/probe.npy" --out "$E/probe-$s-$1.safetensors" \
        "${@:2}" >"$E/probe-$s-$1.out" 2>&1; }
    probe cpu --device cpu
    for p in $precs; do
        probe "${p%:*}" --device cuda --precision "${p%:*}"
        check_measured "$L: seqeval --probe, $s, ${p%:*} on the GPU: logits, loss and every gradient within ${p#*:} of the CPU's" \
            cmp_probe "$E/probe-$s-${p%:*}.safetensors" "$E/probe-$s-cpu.safetensors" "${p#*:}"
    done
}

# linear_runs LABEL BIN: the linear family and the state-space mixers (gpu/linear.cu, gsa.cu, deltanet.cu,
# mamba2.cu, mlstm.cu; mamba2 and mlstm each in its fused block) on the GPU with BIN's tools, on training_runs' tiny
# config with each mixer in place of attention (and a hybrid: attention, then gla): a 12-step GPU run on the CPU
# run's curve, stopped at 6 and resumed bit-identical, moved between the devices at step 6 both ways (each on its
# curve; LINEAR_MOVES on the emulator), seqeval --device cuda's perplexity and --probe against the CPU's; gla also in bf16
declare -A LINEAR=(
    [gla]="--set model.mixer={\"kind\":\"gla\",\"heads\":2,\"conv\":4}"
    [retnet]="--set model.mixer={\"kind\":\"retnet\",\"heads\":2}"
    [linear_attn]="--set model.mixer={\"kind\":\"linear_attn\",\"heads\":2,\"feature_map\":\"elu\",\"normalize\":true,\"rotate\":true}"
    [gsa]="--set model.mixer={\"kind\":\"gsa\",\"heads\":2,\"num_slots\":8}"
    [deltanet]="--set model.mixer={\"kind\":\"deltanet\",\"heads\":2,\"chunk\":16}"
    [gated_deltanet]="--set model.mixer={\"kind\":\"gated_deltanet\",\"heads\":2,\"conv\":4}"
    [mamba2]="--set model.mixer={\"kind\":\"mamba2\",\"d_state\":16,\"head_dim\":16,\"chunk\":16}"
    [mlstm]="--set model.mixer={\"kind\":\"mlstm\",\"heads\":2,\"round_to\":16,\"chunk\":16}"
    [gdn_selrope]="--set model.mixer={\"kind\":\"gated_deltanet\",\"heads\":2,\"selective_rope\":{\"enabled\":true,\"use_gate\":true}}"
    [kla]="--set model.mixer={\"kind\":\"kla\",\"d_state\":8,\"chunk\":16}"
    [hybrid]="--set model.layers=[{\"at\":\"1\",\"mixer\":{\"kind\":\"gla\",\"heads\":2}}]"
)
# the mixers whose emulated runs also stop and resume and move between the devices: one of each engine (the chunked
# linear recurrence, the delta rule) and the hybrid. Resuming and moving go through the checkpoint, the same for every
# mixer, and each mixer's kernels are checked bit-identical on a repeat by test_gpu_parity, so on the emulator (CI's
# time) the others train once beside the CPU; on a GPU every mixer does all of it
LINEAR_MOVES="gla gated_deltanet hybrid"
linear_runs() {
    local -  # set -f below stays in here
    set -f   # the hybrid's --set holds [ ]: no pathname expansion when the arguments split
    local L=$1 B=$2 R="$W/runs-$1" E="$W/eval-$1" k r d
    for k in "${!LINEAR[@]}"; do
        r="$R/lin-$k"
        # one device's runs beside the other's (the emulated GPU keeps one core busy, the CPU's run the other);
        # nothing else runs in the background here, so `wait` waits for these
        # shellcheck disable=SC2086  # the mixer's --set arguments, split on purpose
        {
            train --config "$W/tiny.json" --set run.name="lin-$k-cpu" ${LINEAR[$k]} &
            train --config "$W/tiny.json" --set run.name="lin-$k" --set run.device=cuda ${LINEAR[$k]} &
            wait
        }
        check_measured "$L: $k: a 12-step GPU run (fp32) is on the CPU run's curve (rel 1e-3)" \
            cmp_losses "$r/log.jsonl" "$r-cpu/log.jsonl" 1e-3
        if [ "$L" != emulated ] || [[ " $LINEAR_MOVES " == *" $k "* ]]; then
            # shellcheck disable=SC2086
            {
                train --config "$W/tiny.json" --set run.name="lin-$k-2" --set run.device=cuda --stop-after 6 ${LINEAR[$k]} &
                train --config "$W/tiny.json" --set run.name="lin-$k-c2g" --stop-after 6 ${LINEAR[$k]} &
                wait
            }
            cp -r "$r-2" "$r-g2c"
            train --resume "$r-2" &
            train --resume "$r-g2c" --set run.device=cpu &
            train --resume "$r-c2g" --set run.device=cuda &
            wait
            check_measured "$L: $k: stopped at 6 and resumed, the curve is bit-identical" \
                eval '[ "$(losses "$r-2/log.jsonl")" = "$(losses "$r/log.jsonl")" ] && [ -n "$(losses "$r/log.jsonl")" ]'
            check_measured "$L: $k: a GPU run stopped at 6 finishes on the CPU, on the GPU run's curve (rel 1e-3)" \
                cmp_losses "$r-g2c/log.jsonl" "$r/log.jsonl" 1e-3
            check_measured "$L: $k: a CPU run stopped at 6 finishes on the GPU, on the CPU run's curve (rel 1e-3)" \
                cmp_losses "$r-c2g/log.jsonl" "$r-cpu/log.jsonl" 1e-3
        fi
        for d in cpu cuda; do
            OMP_NUM_THREADS=2 "$B/seqeval" --run "$r" --device "$d" --data "$E/tokens.u16" --format raw_u16 \
                --vocab 128 --context 16,40 --max-windows 40 --out "$E/lin-$k-$d" >"$E/lin-$k-$d.out" 2>&1 &
        done
        wait
        check_measured "$L: $k: seqeval --device cuda: perplexity and per-position curves at contexts 16, 40 are the CPU's" \
            cmp_ppl "$E/lin-$k-cuda" "$E/lin-$k-cpu"
        # the task's loss on the mixer's logits (12 steps predict no value yet: the argmax is checked on attention's)
        for d in cpu cuda; do
            OMP_NUM_THREADS=2 "$B/seqeval" --run "$r" --device "$d" --task >"$E/lin-$k-task-$d.out" 2>&1 &
        done
        wait
        check_measured "$L: $k: seqeval --device cuda --task: the CPU's loss and accuracy" \
            cmp_task "$E/lin-$k-task-cuda.out" "$E/lin-$k-task-cpu.out" any
        probe_runs "$L" "$B" "$r" "lin-$k"
    done
    # shellcheck disable=SC2086
    train --config "$W/tiny.json" --set run.name=lin-gla-bf16 --set run.device=cuda --set run.precision=bf16 ${LINEAR[gla]}
    check_measured "$L: gla: bf16: the curve stays within rel 3e-2 of the CPU's" \
        cmp_losses "$R/lin-gla-bf16/log.jsonl" "$R/lin-gla-cpu/log.jsonl" 3e-2
}

finish() { echo "$PASS passed, $FAIL failed (tests/gpu/run.sh)"; [ "$FAIL" = 0 ]; exit; }

EMU=build/release/tests-gpuemu
if [ -n "${SEQ_GPU_ONLY:-}" ]; then
    echo "# SEQ_GPU_ONLY: the emulated part is skipped"
elif make -j"$JOBS" "$EMU/test_gpu_emulated" "$EMU/test_gpu_linrec" "$EMU/test_gpu_delta" "$EMU/test_gpu_ops" \
        "$EMU/test_gpu_decode" "$EMU/test_gpu_kalman" "$EMU/seqtrain" "$EMU/seqeval" \
        >"$W/make.log" 2>&1; then
    ok "the emulated GPU backend builds"
    # the parity test (single-threaded, the longest) beside the kernels' tests and the training runs
    OMP_NUM_THREADS=1 "$EMU/test_gpu_emulated" >"$W/emulated.out" 2>&1 &
    emu_pid=$!
    for t in test_gpu_linrec test_gpu_delta test_gpu_ops test_gpu_decode test_gpu_kalman; do OMP_NUM_THREADS=1 "$EMU/$t" || FAIL=$((FAIL + 1)); done
    training_runs emulated "$EMU"
    wait "$emu_pid" || FAIL=$((FAIL + 1))
    cat "$W/emulated.out"
    linear_runs emulated "$EMU"
else
    not_ok "the emulated GPU backend builds" "$(tail -5 "$W/make.log" | tr '\n' ' ')"
fi
NVCC=${SEQ_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
    echo "skipped - make CUDA=1: no nvcc (not on PATH, not $NVCC): the CUDA backend cannot be built here"
    finish
fi
PARITY=build/release/tests-cuda/gpu/test_gpu_parity
KERNELS="build/release/tests-cuda/gpu/test_gpu_linrec build/release/tests-cuda/gpu/test_gpu_delta build/release/tests-cuda/gpu/test_gpu_ops
    build/release/tests-cuda/gpu/test_gpu_decode build/release/tests-cuda/gpu/test_gpu_kalman"
# shellcheck disable=SC2086  # the kernels' test programs, split on purpose
if ! make CUDA=1 NVCC="$NVCC" -j"$JOBS" tools "$PARITY" $KERNELS >"$W/make.log" 2>&1; then
    not_ok "make CUDA=1 builds" "$(tail -5 "$W/make.log" | tr '\n' ' ')"
    finish
fi
ok "make CUDA=1 builds build/cuda/bin/seqtrain, seqeval, seqtok, the parity test and the kernels' tests"
for t in $KERNELS; do
    "$t"
    rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || FAIL=$((FAIL + 1))  # 77: no GPU (the program said so)
done
"$PARITY"
rc=$?
[ "$rc" = 77 ] && finish   # no GPU: the parity test said so
[ "$rc" = 0 ] || FAIL=$((FAIL + 1))
training_runs cuda build/cuda/bin
linear_runs cuda build/cuda/bin
finish
