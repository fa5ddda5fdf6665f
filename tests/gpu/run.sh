#!/usr/bin/env bash
# `make test-cuda` (and the last step of `make test`): the GPU backend against the CPU.
#   1. everywhere, on the backend's kernels emulated on the CPU (tests/gpu/emu/): the parity test
#      (tests/gpu/test_gpu_parity.c: logits, loss, every gradient, 6 AdamW steps, bit-identical repeats; fp32),
#      then training runs through seqtrain (below);
#   2. where nvcc exists: the CUDA build (make CUDA=1) and the parity test on the GPU (fp32 and tf32); without a
#      GPU it runs only what needs none (the refusals) and says "skipped";
#   3. with a GPU: the training runs again on it.
# The training runs: a run on the CPU and the same run with run.device cuda give the same loss curve and
# checkpoints with the same header; a GPU run stopped and resumed is bit-identical to one that was not; a GPU
# run finishes on the CPU and a CPU run on the GPU, each on its device's curve; tf32 and bf16 stay near fp32
# (bf16 also across a stop and resume, bit-identically).
#   bash tests/gpu/run.sh      (from the repository root; SEQ_JOBS=N compile jobs, default 2; SEQ_NVCC=path;
#                               SEQ_GPU_ONLY=1 skips part 1, for a GPU machine whose emulated run happened elsewhere)
set -u
JOBS=${SEQ_JOBS:-2}
W=$(mktemp -d "${TMPDIR:-/tmp}/seqtrain-cuda.XXXXXX") || exit 2
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PASS=0; FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
not_ok() { FAIL=$((FAIL + 1)); echo "not ok - $1 ($2)"; }
check() { local what=$1; shift; if "$@" >"$W/check.out" 2>&1; then ok "$what"; else not_ok "$what" "$(tail -3 "$W/check.out" | tr '\n' ' ')"; fi; }
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

# training_runs LABEL BIN: the CLI checks with BIN/seqtrain, whose run.device cuda is the backend under test
training_runs() {
    local L=$1 B=$2 R="$W/runs-$1"
    train() { OMP_NUM_THREADS=2 "$B/seqtrain" "$@" --quiet >>"$W/train.log" 2>&1; }
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
    train --config "$W/tiny.json" --set run.name=gpu --set run.device=cuda
    check "$L: a 12-step run with run.device cuda (fp32) finishes" test -f "$R/gpu/ckpt-00000012/model.safetensors"
    check "$L: its loss curve is the CPU run's (rel 1e-3)" cmp_losses "$R/gpu/log.jsonl" "$R/cpu/log.jsonl" 1e-3
    local f
    for f in model optim; do
        check "$L: its $f.safetensors has the CPU run's header (names, shapes, offsets)" \
            eval '[ "$(header "$R/gpu/ckpt-00000012/$f.safetensors")" = "$(header "$R/cpu/ckpt-00000012/$f.safetensors")" ]'
    done
    train --config "$W/tiny.json" --set run.name=gpu2 --set run.device=cuda --stop-after 6
    train --resume "$R/gpu2"
    check "$L: stopped at 6 and resumed, the curve is bit-identical" \
        eval '[ "$(losses "$R/gpu2/log.jsonl")" = "$(losses "$R/gpu/log.jsonl")" ]'
    train --config "$W/tiny.json" --set run.name=g2c --set run.device=cuda --stop-after 6
    train --resume "$R/g2c" --set run.device=cpu
    check "$L: a GPU run resumes on the CPU and finishes" test -f "$R/g2c/ckpt-00000012/model.safetensors"
    check "$L: ... on the GPU run's curve (rel 1e-3)" cmp_losses "$R/g2c/log.jsonl" "$R/gpu/log.jsonl" 1e-3
    train --config "$W/tiny.json" --set run.name=c2g --stop-after 6
    train --resume "$R/c2g" --set run.device=cuda
    check "$L: a CPU run resumes on the GPU and finishes" test -f "$R/c2g/ckpt-00000012/model.safetensors"
    check "$L: ... on the CPU run's curve (rel 1e-3)" cmp_losses "$R/c2g/log.jsonl" "$R/cpu/log.jsonl" 1e-3
    train --config "$W/tiny.json" --set run.name=tf32 --set run.device=cuda --set run.precision=tf32
    check "$L: tf32: the curve stays within rel 3e-2 of the CPU's" cmp_losses "$R/tf32/log.jsonl" "$R/cpu/log.jsonl" 3e-2
    train --config "$W/tiny.json" --set run.name=bf16 --set run.device=cuda --set run.precision=bf16 --stop-after 6
    train --resume "$R/bf16"
    check "$L: bf16 (stopped at 6, resumed): the curve stays within rel 3e-2 of the CPU's" \
        cmp_losses "$R/bf16/log.jsonl" "$R/cpu/log.jsonl" 3e-2
    train --config "$W/tiny.json" --set run.name=bf16b --set run.device=cuda --set run.precision=bf16
    check "$L: bf16: stopped and resumed, the curve is bit-identical" \
        eval '[ "$(losses "$R/bf16/log.jsonl")" = "$(losses "$R/bf16b/log.jsonl")" ]'
}

finish() { echo "$PASS passed, $FAIL failed (tests/gpu/run.sh)"; [ "$FAIL" = 0 ]; exit; }

EMU=build/release/tests-gpuemu
if [ -n "${SEQ_GPU_ONLY:-}" ]; then
    echo "# SEQ_GPU_ONLY: the emulated part is skipped"
elif make -j"$JOBS" "$EMU/test_gpu_emulated" "$EMU/seqtrain" >"$W/make.log" 2>&1; then
    ok "the emulated GPU backend builds"
    OMP_NUM_THREADS=1 "$EMU/test_gpu_emulated" || FAIL=$((FAIL + 1))
    training_runs emulated "$EMU"
else
    not_ok "the emulated GPU backend builds" "$(tail -5 "$W/make.log" | tr '\n' ' ')"
fi
NVCC=${SEQ_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
    echo "skipped - make CUDA=1: no nvcc (not on PATH, not $NVCC): the CUDA backend cannot be built here"
    finish
fi
PARITY=build/release/tests-cuda/gpu/test_gpu_parity
if ! make CUDA=1 NVCC="$NVCC" -j"$JOBS" tools "$PARITY" >"$W/make.log" 2>&1; then
    not_ok "make CUDA=1 builds" "$(tail -5 "$W/make.log" | tr '\n' ' ')"
    finish
fi
ok "make CUDA=1 builds build/cuda/bin/seqtrain, seqeval, seqtok and the parity test"
"$PARITY"
rc=$?
[ "$rc" = 77 ] && finish   # no GPU: the parity test said so
[ "$rc" = 0 ] || FAIL=$((FAIL + 1))
training_runs cuda build/cuda/bin
finish
