#!/usr/bin/env bash
# The whole test suite (what `make test` runs):
#   1. release build (-O3 -march=native -fopenmp): every C unit test and every shell test, then the C unit
#      tests again under every other kernel set this CPU supports (SEQ_KERNELS, src/core/cpu.h)
#   2. the same under ASan + UBSan (SANITIZE=1): memory errors and undefined behaviour fail the run (the shell
#      tests of the table and sweep scripts excepted: ASAN_SKIP below)
#   3. PORTABLE=1 (base -march=x86-64): no AVX instruction outside the avx2/avx512 copies of nn/, the C
#      unit tests under every kernel set, and the binaries on CPUs emulated by QEMU (tests/emulated_cpus.sh:
#      AMD Zen 3 without AVX-512, x86-64 without AVX)
#   4. the NO_OMP=1 and DEBUG=1 variants must build
#   5. MPI=1: data-parallel training with two ranks (tests/mpi/test_*.sh)
#   6. ARM64: every object compiles with Debian's aarch64 cross gcc (make CROSS=aarch64-linux-gnu objects)
#   7. the GPU backend (tests/gpu/run.sh): its kernels emulated on the CPU against the CPU path, everywhere; where
#      nvcc exists CUDA=1 must build (and the parity test runs on the GPU where there is one); without nvcc that
#      part is skipped with a message
# Each test prints "ok - ..." / "not ok - ..." lines; this script counts them over everything and
# ends with the line "N passed, N failed". A test program that dies without reporting counts as failed.
#
# `make check` (tests/run_all.sh --check) is the edit-test loop: step 1's release build, its C unit tests under
# the kernel set this CPU picks (JOBS at a time), and the command-line smoke tests (CHECK_SHELL below); nothing
# of steps 2-7.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
pass=0; fail=0
source tests/lib.sh || exit 2  # kernel_sets
mark=$SECONDS  # each count() line shows the seconds since the previous one: that test's time

count() {  # count() NAME RC LOGFILE
    local p f
    p=$(grep -c '^ok - ' "$3"); f=$(grep -c '^not ok - ' "$3")
    grep '^not ok - ' "$3" | sed "s|^|[$1] |"
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $1 exited with status $2 without reporting a failure:"; tail -n 20 "$3" | sed 's/^/    /'
        fail=$((fail + 1))
    fi
    printf '%-34s %4d ok  %3d not ok  (exit %d, %d s)\n' "$1" "$p" "$f" "$2" $((SECONDS - mark))
    mark=$SECONDS
}

unit_tests() {  # unit_tests NAME TESTDIR [SET]: every C unit test, with SEQ_KERNELS=SET when given
    local name=$1 tbin=$2 set=${3:-} t n
    for t in "$tbin"/test_*; do
        n=$(basename "$t")
        SEQ_KERNELS=$set "$t" > "$log_dir/$name-$n.log" 2>&1; count "$name/$n" $? "$log_dir/$name-$n.log"
    done
}

unit_tests_parallel() {  # unit_tests_parallel NAME TESTDIR: unit_tests, JOBS programs at a time, counted in order
    local name=$1 tbin=$2 t n running=0
    for t in "$tbin"/test_*; do
        n=$(basename "$t")
        ( "$t" > "$log_dir/$name-$n.log" 2>&1; echo $? > "$log_dir/$name-$n.rc" ) &
        running=$((running + 1))
        if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
    done
    wait
    for t in "$tbin"/test_*; do
        n=$(basename "$t")
        count "$name/$n" "$(cat "$log_dir/$name-$n.rc")" "$log_dir/$name-$n.log"
    done
}

build_variant() {  # build_variant NAME MAKE-ARGS...: 0 when tools and tests built
    local name=$1; shift
    echo "== $name: building"
    if ! make -s -j"$JOBS" "$@" tools tests > "$log_dir/build-$name.log" 2>&1; then
        echo "not ok - $name build failed:"; tail -n 40 "$log_dir/build-$name.log" | sed 's/^/    /'
        fail=$((fail + 1)); return 1
    fi
    pass=$((pass + 1)); echo "ok - $name build ($((SECONDS - mark)) s)"; mark=$SECONDS
}

run_variant() {  # run_variant NAME MAKE-ARGS...
    local name=$1; shift
    local bin tbin
    case "$name" in
        release) bin=bin; tbin=build/release/tests ;;
        asan)    bin=build/asan/bin; tbin=build/asan/tests ;;
    esac
    build_variant "$name" "$@" || return
    unit_tests "$name" "$tbin"
    for t in tests/test_*.sh; do
        local n; n=$(basename "$t" .sh)
        if [ "$name" = asan ] && [[ " $ASAN_SKIP " == *" $n "* ]]; then echo "skipped - asan/$n (see ASAN_SKIP)"; continue; fi
        BIN=$bin bash "$t" > "$log_dir/$name-$n.log" 2>&1; count "$name/$n" $? "$log_dir/$name-$n.log"
    done
}

# Shell tests the ASan pass leaves to the release pass: they test the table and sweep scripts (scripts/), whose
# runs go through the same seqtrain/seqeval paths as test_train, test_cli and the C unit tests, which ASan does
# run, so under ASan they would add minutes of CI's time for no path of their own (test_kernel_sets: 36 short
# trainings whose per-set kernels the C unit tests already run under ASan; test_torch_linear_train: a PyTorch
# script, for which seqtrain only prints configs and parameter counts)
ASAN_SKIP="test_task_sweeps test_selrope_tables test_mad_table test_bla_scripts test_rfa_tables test_kla_scripts
           test_plot_rfa test_plot_rfa_run test_bench_speed test_kernel_sets test_torch_linear_train"
ASAN_SKIP=$(echo $ASAN_SKIP)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# --check: the command-line smoke tests (the tools' options, errors and round trips; the include layers; the docs
# against the program)
CHECK_SHELL="test_cli test_layers test_docs test_scripts_lib"
if [ "${1:-}" = --check ]; then
    if build_variant release; then
        unit_tests_parallel release build/release/tests
        for n in $CHECK_SHELL; do
            BIN=bin bash "tests/$n.sh" > "$log_dir/release-$n.log" 2>&1; count "release/$n" $? "$log_dir/release-$n.log"
        done
    fi
    echo "total $SECONDS s"
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
fi
run_variant release
default_set=$(kernel_sets bin | head -n 1)  # what auto picks: the best one
for k in $(kernel_sets bin); do
    [ "$k" = "$default_set" ] || unit_tests "release[$k]" build/release/tests "$k"
done
run_variant asan SANITIZE=1

# PORTABLE=1: runs on any x86-64. Only the avx2/avx512 copies of nn/ may hold AVX instructions (ymm/zmm
# registers); every other object, the generic copy included, is baseline x86-64
if [ "$(uname -m)" = x86_64 ] && build_variant portable PORTABLE=1; then
    pdir=build/release-portable
    bad=$(for o in $(find "$pdir/obj" -name '*.o' ! -path '*/nn-avx2/*' ! -path '*/nn-avx512/*'); do
              objdump -d --no-show-raw-insn "$o" | grep -qE '%[yz]mm[0-9]' && echo "$o"; done)
    if [ -z "$bad" ]; then
        pass=$((pass + 1)); echo "ok - portable: no AVX instruction outside nn-avx2/ and nn-avx512/"
    else
        fail=$((fail + 1)); echo "not ok - portable: AVX instructions in baseline objects:"; echo "$bad" | sed 's/^/    /'
    fi
    for k in $(kernel_sets "$pdir/bin"); do unit_tests "portable[$k]" "$pdir/tests" "$k"; done
    # the same binaries on an emulated AVX2-only CPU (AMD Zen 3) and an emulated x86-64 without AVX
    PDIR=$pdir bash tests/emulated_cpus.sh > "$log_dir/emulated.log" 2>&1
    count portable/emulated_cpus $? "$log_dir/emulated.log"
fi
for v in NO_OMP DEBUG; do
    if make -s -j"$JOBS" "$v=1" tools > "$log_dir/build-$v.log" 2>&1; then
        pass=$((pass + 1)); echo "ok - $v=1 build"
    else
        fail=$((fail + 1)); echo "not ok - $v=1 build:"; tail -n 20 "$log_dir/build-$v.log" | sed 's/^/    /'
    fi
done
# MPI=1: two ranks on this machine against one process (tests/mpi/test_*.sh); Open MPI is installed by the
# build when missing
echo "== mpi: building"
if make -s -j"$JOBS" MPI=1 tools > "$log_dir/build-mpi.log" 2>&1; then
    pass=$((pass + 1)); echo "ok - MPI=1 build"
    for t in tests/mpi/test_*.sh; do
        n=$(basename "$t" .sh)
        MPI_BIN=build/release-mpi/bin BIN=bin bash "$t" > "$log_dir/mpi-$n.log" 2>&1
        count "mpi/$n" $? "$log_dir/mpi-$n.log"
    done
else
    fail=$((fail + 1)); echo "not ok - MPI=1 build:"; tail -n 20 "$log_dir/build-mpi.log" | sed 's/^/    /'
fi
# ARM64: every object compiles with Debian's cross gcc (installed when missing), the generic kernel set only.
# Debian 12's gcc 12 for aarch64 once crashed on one of our loops (an internal compiler error no x86 build shows)
if [ "$(uname -m)" = x86_64 ]; then
    if bash scripts/install_deps.sh gcc-aarch64-linux-gnu g++-aarch64-linux-gnu > "$log_dir/build-arm64.log" 2>&1 &&
       make -s -j"$JOBS" CROSS=aarch64-linux-gnu WERROR=1 objects >> "$log_dir/build-arm64.log" 2>&1; then
        pass=$((pass + 1)); echo "ok - CROSS=aarch64-linux-gnu: every object compiles for ARM64"
    else
        fail=$((fail + 1)); echo "not ok - CROSS=aarch64-linux-gnu objects:"; tail -n 20 "$log_dir/build-arm64.log" | sed 's/^/    /'
    fi
fi
SEQ_JOBS=$JOBS bash tests/gpu/run.sh > "$log_dir/cuda.log" 2>&1; count cuda $? "$log_dir/cuda.log"
grep '^skipped' "$log_dir/cuda.log"
echo "total $SECONDS s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
