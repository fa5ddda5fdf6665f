#!/usr/bin/env bash
# Smoke test of the speed tools: SEQ_PROFILE's per-op table (printed only when asked, with the ops a
# training run calls and call counts that follow from its shape), bench/model_cost.py (the flop counts the speed-of-light
# rows divide by, and bench/torch_train.py's model flags) against hand-computed values, and
# bench/thread_scaling.sh on the smallest case (one row, one thread, the quickstart model) with every column
# filled in. No speed is asserted. thread_scaling.sh runs the release binaries (bin/, build/release/bench),
# so it runs only for BIN=bin; the ASan pass checks model_cost.py alone.
#
#   BIN=bin bash tests/test_bench_speed.sh
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-bin}
source tests/lib.sh || exit 2
test_scratch bench-speed

"$BIN/seqtrain" --config bench/configs/speed_rope.json --print-config > "$W/speed.json"
"$BIN/seqtrain" --config configs/quickstart.json --print-config > "$W/quick.json"
# speed_rope: d 256, 6 layers, q/k/v 256 -> 512, o 512 -> 256, MLP 256 <-> 1024, V 8192, T 512. Multiply-adds
# per token: 6 x (3*256*512 + 512*256 + 2*256*1024 + 512*(T+1)) + 256*8192; training = 6 x that (fwd + 2 bwd,
# 2 FLOPs each), the forward at context L = 2 x that with T = L
want_train=$(( 6 * (6 * (3*256*512 + 512*256 + 2*256*1024 + 512*513) + 256*8192) ))
want_fwd=$(( 2 * (6 * (3*256*512 + 512*256 + 2*256*1024 + 512*4097) + 256*8192) ))
got=$(python3 bench/model_cost.py train-flops < "$W/speed.json")
if [ "$got" = "$want_train" ]; then ok "model_cost.py train-flops = $want_train"; else not_ok "model_cost.py train-flops" "got $got, want $want_train"; fi
got=$(python3 bench/model_cost.py forward-flops 4096 < "$W/speed.json")
if [ "$got" = "$want_fwd" ]; then ok "model_cost.py forward-flops 4096 = $want_fwd"; else not_ok "model_cost.py forward-flops 4096" "got $got, want $want_fwd"; fi
want="--vocab 8192 --d-model 128 --layers 4 --heads 4 --head-dim 32 --mlp-ratio 4 --batch-size 16 --seq-len 128"
got=$(python3 bench/model_cost.py torch-args < "$W/quick.json")
if [ "$got" = "$want" ]; then ok "model_cost.py torch-args of the quickstart"; else not_ok "model_cost.py torch-args" "got '$got'"; fi
# a model torch_train.py cannot build is refused with its kinds named
"$BIN/seqtrain" --config configs/lm/cpu/kla.json --print-config > "$W/kla.json" 2>/dev/null
python3 bench/model_cost.py torch-args < "$W/kla.json" > /dev/null 2> "$W/err"; rc=$?
if [ "$rc" != 0 ] && grep -q "kla" "$W/err"; then ok "model_cost.py refuses a kla model, naming it"; else not_ok "model_cost.py on kla" "rc $rc: $(cat "$W/err")"; fi

# SEQ_PROFILE=1: a table on stderr at exit naming the ops; without it, none
A5=(--config configs/tasks/state/a5.json --set model.d_model=32 --set train.seq_len=16 --set train.batch_size=8
    --set data.task.train_len_min=16 --set data.task.train_len_max=16 --set data.task.test_len_min=16
    --set data.task.test_len_max=16 --set run.threads=1 --set train.steps=3 --set schedule.warmup_steps=0
    --set run.dir="$W" --quiet)
if SEQ_PROFILE=1 "$BIN/seqtrain" "${A5[@]}" --set run.name=p > "$W/p.out" 2> "$W/p.err" \
   && grep -q '^SEQ_PROFILE: nn ops, [a-z0-9]* kernels' "$W/p.err" \
   && grep -qE '^matmul_forward +[1-9][0-9]* +[0-9.]+ +[0-9.]+%$' "$W/p.err" \
   && grep -qE '^attention_forward +[1-9][0-9]* ' "$W/p.err" && grep -q '^all ops ' "$W/p.err"; then
    ok "SEQ_PROFILE=1 prints the per-op table (matmul_forward, attention_forward, all ops)"
else
    not_ok "SEQ_PROFILE=1 table" "$(head -n 5 "$W/p.err")"
fi
# embedding_forward runs once per training step (3) and once per evaluation batch: at least 3 calls
n=$(sed -n 's/^embedding_forward  *\([0-9]*\) .*/\1/p' "$W/p.err")
if [ -n "$n" ] && [ "$n" -ge 3 ]; then ok "SEQ_PROFILE counts embedding_forward's calls ($n >= 3 steps)"; else not_ok "SEQ_PROFILE call count" "embedding_forward: '$n'"; fi
"$BIN/seqtrain" "${A5[@]}" --set run.name=q > "$W/q.out" 2> "$W/q.err"
if ! grep -q 'SEQ_PROFILE' "$W/q.err"; then ok "no table without SEQ_PROFILE"; else not_ok "no table without SEQ_PROFILE" "printed one"; fi

if [ "$BIN" = bin ]; then
    if THREADS_LIST=1 STEPS=4 CONFIG=configs/quickstart.json bash bench/thread_scaling.sh > "$W/t.md" 2> "$W/t.err"; then
        ok "thread_scaling.sh runs (1 thread, quickstart, 4 steps)"
    else
        not_ok "thread_scaling.sh runs" "$(tail -n 3 "$W/t.err")"
    fi
    # | 1 | <set> | <tok/s> | 1.00x | <peak> | <share>% | <matmul>% |
    if grep -qE '^\| 1 \| (avx512|avx2|generic) \| [0-9]+ \| 1\.00x \| [0-9]+ \| [0-9.]+% \| [0-9.]+% \|$' "$W/t.md"; then
        ok "thread_scaling.sh prints a full row for 1 thread"
    else
        not_ok "thread_scaling.sh row" "$(tail -n 2 "$W/t.md")"
    fi
fi
# bench/common.sh's AVX2_ONLY: the avx2 kernels for seqtrain, and the speed of light from the peak of 256-bit FMAs
# (bench/matmul prints both peaks when the active set is narrower than the CPU's widest)
mm_out='kernel set avx2, threads 2, measured fp32 FMA peak 255.1 GFLOP/s (avx512 vectors)
peak with avx2 vectors: 128.6 GFLOP/s'
got=$(AVX2_ONLY=0 SEQ_KERNELS= bash -c 'source bench/common.sh; echo "$(peak_of "$1") ${SEQ_KERNELS:-auto}"' _ "$mm_out")
if [ "$got" = "255.1 auto" ]; then ok "bench/common.sh: the widest peak by default"; else not_ok "bench/common.sh default peak" "got '$got'"; fi
got=$(AVX2_ONLY=1 SEQ_KERNELS= bash -c 'source bench/common.sh; echo "$(peak_of "$1") $SEQ_KERNELS"' _ "$mm_out")
if [ "$got" = "128.6 avx2" ]; then ok "bench/common.sh: AVX2_ONLY=1 takes the 256-bit peak and the avx2 kernels"; else not_ok "bench/common.sh AVX2_ONLY" "got '$got'"; fi
# blas_candidates: the system BLAS plus each OpenBLAS build that is installed (a fake one here), with the core
# types to probe; under AVX2_ONLY only OpenBLAS's AVX2 core type
mkdir -p "$W/lib/openblas-openmp" && touch "$W/lib/openblas-openmp/libblas.so.3"
got=$(AVX2_ONLY=0 LIBDIR="$W/lib" bash -c 'source bench/common.sh; blas_candidates openblas-openmp openblas-pthread
      echo "${candidates[*]} / $AVX2_CORETYPE"')
want="| $W/lib/openblas-openmp| $W/lib/openblas-openmp|${got##* / }"
if grep -qw avx512f /proc/cpuinfo; then want="$want $W/lib/openblas-openmp|SkylakeX"; fi
if [ "${got% / *}" = "$want" ]; then ok "blas_candidates: system, then the installed build with its core types"
else not_ok "blas_candidates" "got '${got% / *}', want '$want'"; fi
got=$(AVX2_ONLY=1 LIBDIR="$W/lib" bash -c 'source bench/common.sh; blas_candidates openblas-openmp openblas-pthread
      echo "${candidates[*]} / $AVX2_CORETYPE"')
ct=${got##* / }
if [ "${got% / *}" = "|$ct $W/lib/openblas-openmp|$ct" ]; then ok "blas_candidates under AVX2_ONLY: the AVX2 core type only ($ct)"
else not_ok "blas_candidates AVX2_ONLY" "got '$got'"; fi
# torch_blas_check: a PyTorch on the system BLAS (the fake PY below answers "BLAS_INFO=generic" by exiting 0)
# with only the reference BLAS installed is refused, naming what to install; with an OpenBLAS build, or a
# PyTorch that brings its own BLAS (exit 1: not generic), it passes
mkdir -p "$W/ref/blas" && touch "$W/ref/blas/libblas.so.3" && ln -sf blas/libblas.so.3 "$W/ref/libblas.so.3"
printf '#!/bin/sh\nexit 0\n' > "$W/py_generic" && printf '#!/bin/sh\nexit 1\n' > "$W/py_mkl" && chmod +x "$W/py_generic" "$W/py_mkl"
blas_check() { LIBDIR="$1" PY="$2" bash -c 'source bench/common.sh; torch_blas_check; echo passed' 2>&1; }
got=$(blas_check "$W/ref" "$W/py_generic")
if [[ "$got" == *"reference BLAS"*"apt-get install libopenblas0-openmp"* ]] && [[ "$got" != *passed* ]]; then
    ok "torch_blas_check refuses the reference BLAS, naming the package to install"
else not_ok "torch_blas_check on the reference BLAS" "got '$got'"; fi
got=$(blas_check "$W/ref" "$W/py_mkl")
if [ "$got" = passed ]; then ok "torch_blas_check: a PyTorch with its own BLAS passes"; else not_ok "torch_blas_check own BLAS" "got '$got'"; fi
mkdir -p "$W/ref/openblas-pthread" && touch "$W/ref/openblas-pthread/libblas.so.3"
got=$(blas_check "$W/ref" "$W/py_generic")
if [ "$got" = passed ]; then ok "torch_blas_check: with an OpenBLAS build installed it passes"; else not_ok "torch_blas_check OpenBLAS" "got '$got'"; fi
# pair_medians: the median of each column over the pairs, then the median of each pair's ratio
got=$(printf '100 50 7\n300 100 9\n200 50 8\n' | PY=python3 bash -c 'source bench/common.sh; pair_medians 0/1 2/1')
if [ "$got" = "200.0 50.0 8.0 3.0 0.14" ]; then ok "pair_medians: column medians, then medians of the ratios"
else not_ok "pair_medians" "got '$got', want '200.0 50.0 8.0 3.0 0.14'"; fi
# eval_speed.sh refuses a bad PAIRS before any work
PAIRS=0 bash bench/eval_speed.sh > "$W/es.out" 2>&1; rc=$?
if [ "$rc" = 1 ] && grep -q "PAIRS must be a whole number >= 1 (got '0')" "$W/es.out"; then ok "eval_speed.sh refuses PAIRS=0"
else not_ok "eval_speed.sh PAIRS=0" "rc $rc: $(head -n 2 "$W/es.out")"; fi
test_done
