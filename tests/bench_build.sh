# Shared by the benchmark smoke tests (sourced, not run; run_all.sh runs only tests/test_*.sh): BIN's build
# variant, so that a test builds and runs the bench of the same variant (run_all.sh builds tools and tests,
# not benches). Sets BIN (default bin), variant (release | asan | debug | noomp) and flags (its make flags);
# the sourcing test names itself in BENCH_TEST for the error message.
BIN=${BIN:-bin}
case "$BIN" in
    bin|./bin|bin/) variant=release; flags=() ;;
    build/asan/bin*) variant=asan; flags=(SANITIZE=1) ;;
    build/debug/bin*) variant=debug; flags=(DEBUG=1) ;;
    build/noomp/bin*) variant=noomp; flags=(NO_OMP=1) ;;
    *) echo "$BENCH_TEST: unknown BIN $BIN (bin, build/asan/bin, build/debug/bin, build/noomp/bin)" >&2; exit 2 ;;
esac
