#!/usr/bin/env bash
# The libFuzzer harnesses (fuzz/, docs/fuzzing.md) build with clang and each runs a few seconds on its seed
# corpus without a finding. Skipped, with a message, when clang is not installed (`make fuzz` installs it) or
# under the ASan pass of `make test` (the harnesses carry their own ASan + UBSan; once is enough).
#   bash tests/test_fuzz.sh          FUZZ_SECONDS=N to run each harness longer (default 6)
set -u
cd "$(dirname "$0")/.."
case "${BIN:-bin}" in
    *asan*) echo "test_fuzz.sh: skipped under the ASan build (the harnesses run in the release pass)"; exit 0 ;;
esac
if ! command -v clang >/dev/null 2>&1; then
    echo "test_fuzz.sh: skipped: clang is not installed (apt-get install clang libclang-rt-dev, or make fuzz)"
    exit 0
fi
if ! make -s -j"${JOBS:-2}" fuzz-build > /tmp/seqfuzz-build.$$ 2>&1; then
    echo "not ok - fuzz harnesses build with clang:"; tail -n 20 /tmp/seqfuzz-build.$$ | sed 's/^/    /'
    rm -f /tmp/seqfuzz-build.$$
    exit 1
fi
rm -f /tmp/seqfuzz-build.$$
echo "ok - fuzz harnesses build with clang"
bash fuzz/run.sh "${FUZZ_SECONDS:-6}"
