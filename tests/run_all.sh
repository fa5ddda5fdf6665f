#!/usr/bin/env bash
# The whole test suite (what `make test` runs):
#   1. release build (-O3 -march=native -fopenmp): every C unit test and every shell test
#   2. the same under ASan + UBSan (SANITIZE=1): memory errors and undefined behaviour fail the run
#   3. the NO_OMP=1 and DEBUG=1 variants must build
# Each test prints "ok - ..." / "not ok - ..." lines; this script counts them over everything and
# ends with the line "N passed, N failed". A test program that dies without reporting counts as failed.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
pass=0; fail=0

count() {  # count() NAME RC LOGFILE
    local p f
    p=$(grep -c '^ok - ' "$3"); f=$(grep -c '^not ok - ' "$3")
    grep '^not ok - ' "$3" | sed "s|^|[$1] |"
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $1 exited with status $2 without reporting a failure:"; tail -n 20 "$3" | sed 's/^/    /'
        fail=$((fail + 1))
    fi
    printf '%-34s %4d ok  %3d not ok  (exit %d)\n' "$1" "$p" "$f" "$2"
}

run_variant() {  # run_variant NAME MAKE-ARGS...
    local name=$1; shift
    local bin tbin
    case "$name" in
        release) bin=bin; tbin=build/release/tests ;;
        asan)    bin=build/asan/bin; tbin=build/asan/tests ;;
    esac
    echo "== $name: building"
    if ! make -s -j"$JOBS" "$@" tools tests > "$log_dir/build-$name.log" 2>&1; then
        echo "not ok - $name build failed:"; tail -n 40 "$log_dir/build-$name.log" | sed 's/^/    /'
        fail=$((fail + 1)); return
    fi
    pass=$((pass + 1)); echo "ok - $name build"
    for t in "$tbin"/test_*; do
        local n; n=$(basename "$t")
        "$t" > "$log_dir/$name-$n.log" 2>&1; count "$name/$n" $? "$log_dir/$name-$n.log"
    done
    for t in tests/test_*.sh; do
        local n; n=$(basename "$t" .sh)
        BIN=$bin bash "$t" > "$log_dir/$name-$n.log" 2>&1; count "$name/$n" $? "$log_dir/$name-$n.log"
    done
}

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
run_variant release
run_variant asan SANITIZE=1
for v in NO_OMP DEBUG; do
    if make -s -j"$JOBS" "$v=1" tools > "$log_dir/build-$v.log" 2>&1; then
        pass=$((pass + 1)); echo "ok - $v=1 build"
    else
        fail=$((fail + 1)); echo "not ok - $v=1 build:"; tail -n 20 "$log_dir/build-$v.log" | sed 's/^/    /'
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
