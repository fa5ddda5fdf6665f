#!/usr/bin/env bash
# `make test-cuda` (and the last step of `make test`): the GPU backend against the CPU.
#   1. everywhere: the backend's kernels emulated on the CPU (tests/gpu/emu/) through the parity test
#      (tests/gpu/test_gpu_parity.c): logits, loss, every gradient, 6 AdamW steps, bit-identical repeats (fp32);
#   2. where nvcc exists: the CUDA build (make CUDA=1) and the parity test on the GPU (fp32 and tf32), which
#      runs only what needs no GPU (the refusals) and says "skipped" when there is none;
#   3. with a GPU: training runs through the CLI on both devices: the same loss curve, the same checkpoint
#      layout, a bit-identical --resume on the GPU, and a run continued on the other device both ways.
#   bash tests/gpu/run.sh      (from the repository root; SEQ_JOBS=N compile jobs, default 2; SEQ_NVCC=path)
set -u
JOBS=${SEQ_JOBS:-2}
EMU=build/release/tests-gpuemu/test_gpu_emulated
make -j"$JOBS" "$EMU" >/dev/null || { echo "not ok - the emulated GPU backend builds"; exit 1; }
echo "ok - the emulated GPU backend builds"
OMP_NUM_THREADS=1 "$EMU" || exit 1
NVCC=${SEQ_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
    echo "skipped - make CUDA=1: no nvcc (not on PATH, not $NVCC): the CUDA backend cannot be built here"
    exit 0
fi
BIN=build/cuda/bin
PARITY=build/release/tests-cuda/gpu/test_gpu_parity
make CUDA=1 NVCC="$NVCC" -j"$JOBS" tools "$PARITY" >/dev/null || { echo "not ok - make CUDA=1 builds"; exit 1; }
echo "ok - make CUDA=1 builds $BIN/seqtrain, seqeval, seqtok and the parity test"
"$PARITY"
rc=$?
[ "$rc" = 77 ] && exit 0  # no GPU: the parity test said so
[ "$rc" = 0 ] || exit 1

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
W=$(mktemp -d "${TMPDIR:-/tmp}/seqtrain-cuda.XXXXXX") || exit 2
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PASS=0; FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
not_ok() { FAIL=$((FAIL + 1)); echo "not ok - $1 ($2)"; }
check() { local what=$1; shift; if "$@" >"$W/check.out" 2>&1; then ok "$what"; else not_ok "$what" "$(tail -3 "$W/check.out" | tr '\n' ' ')"; fi; }
train() { "$BIN/seqtrain" "$@" --quiet >>"$W/train.log" 2>&1; }
losses() { grep '"loss"' "$1" | sed 's/, "tokens_per_s.*//'; }
cat > "$W/tiny.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 3, "precision": "fp32"},
  "data": {"task": {"kind": "mqar", "vocab": 256, "num_kv_pairs": 4, "train_examples": 2000, "test_examples": 64}},
  "model": {"d_model": 64, "n_layers": 2, "mixer": {"kind": "attention", "heads": 2, "pos": "rope"}},
  "train": {"seq_len": 64, "batch_size": 16, "grad_accum": 2, "steps": 12, "eval_every": 6, "ckpt_every": 6},
  "optim": {"lr": 3e-3, "grad_clip": 1.0, "groups": [{"match": "*.ln*", "lr_mult": 0.5}]},
  "schedule": {"kind": "cosine", "warmup_steps": 2}
}
JSON
R="$W/runs"
train --config "$W/tiny.json" --set run.name=cpu
check "a 12-step run on the CPU" test -f "$R/cpu/latest"
train --config "$W/tiny.json" --set run.name=gpu --set run.device=cuda
check "the same run on the GPU (run.device cuda, fp32)" test -f "$R/gpu/latest"
# fp32 on both: the curves differ by rounding only (relative 1e-3 over 12 steps of Adam)
cmp_losses() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"loss"' in x]
b = [json.loads(x)["loss"] for x in open(sys.argv[2]) if '"loss"' in x]
tol = float(sys.argv[3])
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("worst relative loss difference %.3e" % worst)
assert worst <= tol, worst
PY
}
check "the GPU's loss curve is the CPU's (rel 1e-3)" cmp_losses "$R/gpu/log.jsonl" "$R/cpu/log.jsonl" 1e-3
header() { python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; sys.stdout.write(f.read(n).decode())' "$1"; }
for f in model optim; do
    check "$f.safetensors of the GPU run has the CPU run's header (names, shapes, offsets)" \
        eval '[ "$(header "$R/gpu/ckpt-00000012/$f.safetensors")" = "$(header "$R/cpu/ckpt-00000012/$f.safetensors")" ]'
done
# a bit-identical resume on the GPU
train --config "$W/tiny.json" --set run.name=gpu2 --set run.device=cuda --stop-after 6
train --resume "$R/gpu2"
check "--resume on the GPU continues bit-identically" eval '[ "$(losses "$R/gpu2/log.jsonl")" = "$(losses "$R/gpu/log.jsonl")" ]'
# GPU -> CPU and CPU -> GPU
train --config "$W/tiny.json" --set run.name=g2c --set run.device=cuda --stop-after 6
train --resume "$R/g2c" --set run.device=cpu
check "a GPU run resumes on the CPU and finishes" test -f "$R/g2c/ckpt-00000012/model.safetensors"
check "its curve is the GPU's (rel 1e-3)" cmp_losses "$R/g2c/log.jsonl" "$R/gpu/log.jsonl" 1e-3
train --config "$W/tiny.json" --set run.name=c2g --stop-after 6
train --resume "$R/c2g" --set run.device=cuda
check "a CPU run resumes on the GPU and finishes" test -f "$R/c2g/ckpt-00000012/model.safetensors"
check "its curve is the CPU's (rel 1e-3)" cmp_losses "$R/c2g/log.jsonl" "$R/cpu/log.jsonl" 1e-3
train --config "$W/tiny.json" --set run.name=tf32 --set run.device=cuda --set run.precision=tf32
check "tf32: the curve is the CPU's within rel 3e-2" cmp_losses "$R/tf32/log.jsonl" "$R/cpu/log.jsonl" 3e-2
echo "$PASS passed, $FAIL failed (tests/gpu/run.sh)"
[ "$FAIL" = 0 ]
