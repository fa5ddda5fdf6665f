#!/usr/bin/env bash
# PORTABLE=1's binaries on CPUs this machine is not: QEMU's user mode runs them as
#   - EPYC-Milan: AMD Zen 3, AVX2 + FMA and no AVX-512 (the CPU of the issue "Fast on every CPU")
#   - qemu64: the x86-64 baseline, SSE2 and no AVX at all
# and says
#   - the emulator enforces the model's instruction set (controls: an AVX-512 instruction dies with SIGILL
#     under EPYC-Milan, an AVX2 one under qemu64), so an instruction beyond the CPU cannot pass unseen;
#   - each binary picks the best set the emulated CPU has by itself (avx2, generic), prints it, and refuses a
#     set the CPU lacks with a message naming the sets it has;
#   - every mixer trains 2 steps under the emulated CPU to the bits the same binary gives natively with the
#     same kernel set (SEQ_KERNELS), so the emulated run did the same arithmetic;
#   - the C unit tests pass under EPYC-Milan with the kernels it picks (the list below). QEMU also faults the
#     masked-out lanes of VMASKMOVPS, which AMD documents as allowed to fault: this caught groupnorm's
#     gate loops, which gcc turned into masked loads of a NULL z.
# QEMU emulates, it does not time: speed on such CPUs is docs/results/speed.md's business. qemu-user is
# installed from Debian when missing.
#   PDIR=build/release-portable bash tests/emulated_cpus.sh     (run from the repository root)
set -u
PDIR=${PDIR:-build/release-portable}
PDIR=$(cd "$PDIR" && pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
source tests/lib.sh || exit 2
test_scratch emulated
ulimit -c 0  # the controls die of SIGILL on purpose: no core file

if ! command -v qemu-x86_64 >/dev/null 2>&1; then
    bash scripts/install_deps.sh qemu-user > "$W/install.log" 2>&1 ||
        { not_ok "qemu-user installed" "$(tail -n 3 "$W/install.log")"; test_done; exit; }
fi
# QEMU warns about every CPUID feature of the model that TCG lacks (pcid, rdseed, ...); none is one of ours.
# EMU_TIMEOUT=S in the environment stops the program after S seconds (exit 124)
emu() {
    local cpu=$1; shift
    ${EMU_TIMEOUT:+timeout "$EMU_TIMEOUT"} qemu-x86_64 -cpu "$cpu" "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2)
}

# --- controls: the emulated CPUs lack what they should
cat > "$W/probe.c" <<'C'
#include <immintrin.h>
#include <stdio.h>
__attribute__((target("avx2,fma"))) static float avx2_(float *a) {
    __m256 x = _mm256_loadu_ps(a);
    _mm256_storeu_ps(a, _mm256_fmadd_ps(x, x, x));
    return a[3];
}
__attribute__((target("avx512f"))) static float avx512_(float *a) {
    __m512 x = _mm512_loadu_ps(a);
    _mm512_storeu_ps(a, _mm512_fmadd_ps(x, x, x));
    return a[3];
}
int main(int argc, char **argv) {
    float a[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    printf("%g\n", argv[1][0] == '5' ? avx512_(a) : avx2_(a));
    return argc == 2 ? 0 : 1;
}
C
if ${CC:-gcc} -O1 "$W/probe.c" -o "$W/probe" 2> "$W/cc.log"; then
    emu EPYC-Milan "$W/probe" 2 > "$W/out" 2>&1; rc=$?
    check "control: an AVX2 FMA runs under EPYC-Milan (exit $rc)" test "$rc" = 0 -a "$(head -n 1 "$W/out")" = 20
    emu EPYC-Milan "$W/probe" 512 > /dev/null 2>&1; rc=$?
    check "control: an AVX-512 instruction dies with SIGILL under EPYC-Milan (exit $rc)" test "$rc" = 132
    emu qemu64 "$W/probe" 2 > /dev/null 2>&1; rc=$?
    check "control: an AVX2 instruction dies with SIGILL under qemu64 (exit $rc)" test "$rc" = 132
else
    not_ok "the control probe compiles" "$(head -n 3 "$W/cc.log")"
fi

# --- the set each CPU gets
for spec in "EPYC-Milan avx2 avx512" "qemu64 generic avx2"; do
    read -r cpu best lacking <<< "$spec"
    SEQ_KERNELS=$lacking emu "$cpu" "$PDIR/bin/seqtrain" --help > /dev/null 2> "$W/err"; rc=$?
    if [ "$rc" = 1 ] && grep -q "kernel set $lacking is not available here (.*this CPU and build: .*$best" "$W/err"; then
        ok "$cpu: SEQ_KERNELS=$lacking refused, naming the sets it has: $(tail -n 1 "$W/err" | cut -c1-160)"
    else
        not_ok "$cpu: SEQ_KERNELS=$lacking refused with the sets it has" "exit $rc: $(head -c 300 "$W/err")"
    fi
done

# --- every mixer, 2 steps, emulated against native with the same kernel set. The tokens are random ids below
# 256 in a raw shard: with the WikiText tokenizer's 8192 ids the head and its cross-entropy would take most of
# each emulated run (docs/results/speed_rounds.md has the times)
python3 -c 'import random, struct, sys; r = random.Random(5)
open(sys.argv[1], "wb").write(struct.pack("<8192H", *(r.randrange(256) for _ in range(8192))))' "$W/train.u16"
cat > "$W/base.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 3, "threads": 1},
  "data": {"train": "$W/train.u16", "format": "raw_u16", "vocab_size": 256},
  "model": {"d_model": 32, "n_layers": 1, "mixer": {"kind": "attention"}},
  "train": {"batch_size": 2, "seq_len": 32, "steps": 2, "eval_every": 0, "ckpt_every": 0},
  "optim": {"lr": 3e-3}
}
JSON
mixers=$(mixer_kinds "$PDIR/bin" "$W/base.json")
[ -n "$mixers" ] || not_ok "the list of mixers" "seqtrain's unknown-kind message did not list them"
train_one() {  # train_one CPU|native SET MIXER: prints "loss kernels-line" of its run
    local cpu=$1 set=$2 m=$3 name="$1-$2-$3" pre=()
    [ "$cpu" = native ] && export SEQ_KERNELS=$set || { unset SEQ_KERNELS; pre=(emu "$cpu"); }
    "${pre[@]}" "$PDIR/bin/seqtrain" --config "$W/base.json" --set run.name="$name" --set model.mixer.kind="$m" \
        > "$W/$name.out" 2> "$W/$name.err" || { echo "exit $? $(head -c 200 "$W/$name.err")"; return; }
    echo "$(last_loss "$W/runs/$name/log.jsonl") $(grep -o '[a-z0-9]* kernels$' "$W/$name.out")"
}
export -f train_one last_loss emu
export W PDIR
# every mixer under EPYC-Milan; attention and gla under qemu64 (the generic set is the same C for every CPU,
# and QEMU runs it 4-6x slower than the AVX2 code: built for baseline x86-64, it calls libm's fmaf for every
# fused multiply-add, where the native build's generic copy has vfmadd instructions)
phase=$SECONDS
for spec in "EPYC-Milan avx2 $mixers" "qemu64 generic attention gla"; do
    read -r cpu set ms <<< "$spec"
    # the emulated runs (the slow ones) JOBS at a time
    printf '%s\n' $ms | xargs -P "$JOBS" -I{} bash -c "train_one $cpu $set {} > \"\$W/res-$cpu-{}\""
    # a host without the set (an x86-64 without AVX2 running this test) has no native run to compare with
    native=1; has_kernel_set "$PDIR/bin" "$set" || native=0
    for m in $ms; do
        emu_res=$(cat "$W/res-$cpu-$m"); nat_res=""
        [ "$native" = 1 ] && nat_res=$(train_one native "$set" "$m")
        if [ "$native" = 0 ] && [[ "$emu_res" =~ ^[0-9.]+\ $set\ kernels$ ]]; then
            ok "$cpu: $m trains 2 steps with the $set kernels it picked (loss ${emu_res%% *}; this host has no $set to compare)"
        elif [ "$emu_res" = "$nat_res" ] && [ "${emu_res#* }" = "$set kernels" ]; then
            ok "$cpu: $m trains 2 steps with the $set kernels it picked, to the native run's bits (loss ${emu_res%% *})"
        else
            not_ok "$cpu: $m, emulated = native ($set)" "emulated: $emu_res; native: $nat_res"
        fi
    done
done

echo "# the mixers' runs, emulated and native: $((SECONDS - phase)) s"

# --- a run resumed on a CPU that lacks its kernels: it goes on, and the note says why it cannot be bit-identical
if ! has_kernel_set "$PDIR/bin" avx2; then
    echo "skipped - the resume on qemu64 (this host has no avx2 to train the run with)"
else
    SEQ_KERNELS=avx2 "$PDIR/bin/seqtrain" --config "$W/base.json" --quiet --set run.name=moved > /dev/null 2>&1
    cp -r "$W/runs/moved" "$W/runs/kept"
    emu qemu64 "$PDIR/bin/seqtrain" --resume "$W/runs/moved" --set train.steps=3 --quiet > "$W/out" 2> "$W/err"; rc=$?
    if [ "$rc" = 0 ] && grep -q "used the avx2 kernels and resumes with generic; .* (this CPU lacks the avx2 kernels)" "$W/err"; then
        ok "qemu64: an avx2 run resumes with generic and says this CPU lacks the avx2 kernels"
    else
        not_ok "qemu64: an avx2 run resumes with generic, with the note" "exit $rc: $(grep -v '^resuming' "$W/err" | head -c 300)"
    fi
    SEQ_KERNELS=generic "$PDIR/bin/seqtrain" --resume "$W/runs/kept" --set train.steps=3 --quiet > "$W/out" 2> "$W/err"
    if grep -q "used the avx2 kernels and resumes with generic; .* (set SEQ_KERNELS=avx2 for that)" "$W/err"; then
        ok "native: the same resume with SEQ_KERNELS=generic names SEQ_KERNELS=avx2 as the way to bit-identical"
    else
        not_ok "native: the resume note names SEQ_KERNELS=avx2" "$(head -c 300 "$W/err")"
    fi
fi

# --- the C unit tests under EPYC-Milan (avx2, as it picks). Left out: test_model (its huge-page check reads
# /proc/self/smaps, which under QEMU describes the emulator's mappings, not the program's) and test_zeroshot
# (no kernel of its own; 170 s emulated)
units=$(cd "$PDIR/tests" && ls test_* | grep -v -x -e test_model -e test_zeroshot)
# one OpenMP thread each, JOBS at a time: emulated threads that wait for each other spin slowly. Each program
# gets EMU_UNIT_BUDGET seconds, since how fast QEMU emulates these FMAs depends on the host by an order of
# magnitude (docs/results/speed_rounds.md). A program stopped by the budget passes on the checks it printed
# (every one ok, at least one), since the same program runs whole on the same kernels in portable[avx2]; a
# program stopped before its first check (a slow host) runs once more with four times the budget, so a slow
# host is no failure
EMU_UNIT_BUDGET=${EMU_UNIT_BUDGET:-20}
export EMU_UNIT_BUDGET
run_unit() {  # run_unit PROGRAM: writes unit-PROGRAM.{log,err} and .rc ("exit-status seconds budget")
    local t0=$SECONDS budget rc
    for budget in "$EMU_UNIT_BUDGET" $((4 * EMU_UNIT_BUDGET)); do
        OMP_NUM_THREADS=1 EMU_TIMEOUT=$budget emu EPYC-Milan "$PDIR/tests/$1" > "$W/unit-$1.log" 2> "$W/unit-$1.err"
        rc=$?
        [ "$rc" = 124 ] && ! grep -q '^ok - ' "$W/unit-$1.log" || break
    done
    echo "$rc $((SECONDS - t0)) $budget" > "$W/unit-$1.rc"
}
export -f run_unit
phase=$SECONDS
printf '%s\n' $units | xargs -P "$JOBS" -I{} bash -c 'run_unit {}'
echo "# the unit tests under EPYC-Milan, $JOBS at a time: $((SECONDS - phase)) s"
for u in $units; do
    read -r rc secs budget < "$W/unit-$u.rc"; summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$W/unit-$u.err" | tail -n 1)
    nok=$(grep -c '^ok - ' "$W/unit-$u.log")
    if [ "$rc" = 0 ] && [ -n "$summary" ] && ! grep -q '^not ok' "$W/unit-$u.log"; then
        ok "EPYC-Milan: $u ($summary, $secs s)"
    elif [ "$rc" = 124 ] && [ "$nok" -gt 0 ] && ! grep -q '^not ok' "$W/unit-$u.log"; then
        ok "EPYC-Milan: $u ($nok checks passed before the ${budget} s budget ended; all of it runs in portable[avx2])"
    else
        not_ok "EPYC-Milan: $u" "exit $rc, $summary: $(cat "$W/unit-$u.log" "$W/unit-$u.err" | grep -m 3 -e '^not ok' -e 'signal' | tr '\n' ' ')"
    fi
done
test_done
