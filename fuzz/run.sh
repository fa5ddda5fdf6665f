#!/usr/bin/env bash
# Run every libFuzzer harness (build/fuzz/fuzz_<target>, `make fuzz-build`) SECONDS seconds, one after the
# other, on its committed seed corpus fuzz/corpus/<target>/ (read only: new inputs go to
# build/fuzz/corpus/<target>/). Prints one line per harness: runs (execs), execs/s, corpus size. A crash,
# leak, sanitizer report or timeout stops with status 1; the input is kept as build/fuzz/crash-<target>-*.
#   bash fuzz/run.sh SECONDS [TARGET...]        (what `make fuzz SECONDS=N` runs)
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in fuzz/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t#fuzz_}"); done
fi
status=0
for t in "${targets[@]}"; do
    bin=build/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "fuzz: $bin not built (make fuzz-build)" >&2; exit 2; }
    mkdir -p "build/fuzz/corpus/$t"
    log=build/fuzz/$t.log
    # -max_len: configs with a base and --sets, shard and safetensors headers all fit; -timeout: a single
    # input taking 10 s is a hang; -rss_limit_mb: memory bounded by the input
    "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="build/fuzz/crash-$t-" "build/fuzz/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1
    rc=$?
    runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    speed=$(grep -ao 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        echo "ok - fuzz $t: ${runs:-?} execs in ${secs} s (${speed:-?}/s, $cov), no finding"
    else
        echo "not ok - fuzz $t: exit $rc after ${runs:-?} execs; see $log and build/fuzz/crash-$t-*"
        grep -aE 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -n 5 | sed 's/^/    /'
        status=1
    fi
done
exit $status
