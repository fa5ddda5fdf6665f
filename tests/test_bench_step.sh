#!/usr/bin/env bash
# Smoke test of bench/step (pure forward + backward time of a run config's model and batch) and of
# bench/step_overhead.sh (seqtrain's real step time next to it) on the smallest case: the table row is
# there with positive times, the overhead column is step / compute - 1 of the printed times, bench/step's
# JSON matches the config's shapes, and bad arguments fail with status 2. No speed is asserted.
#
#   BIN=bin bash tests/test_bench_step.sh              (release build; BIN=build/asan/bin for ASan)
#
# The bench is built here (run_all.sh builds tools and tests, not benches), with the make flags of BIN's variant.
set -u
cd "$(dirname "$0")/.." || exit 2
BENCH_TEST=test_bench_step.sh source tests/bench_build.sh
STEP=build/$variant/bench/step
source tests/lib.sh || exit 2
test_scratch bench-step
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
make -s "${flags[@]}" "$STEP" >/dev/null 2>&1 || { echo "not ok - make $STEP"; echo "0 passed, 1 failed" >&2; exit 1; }

A5=(--config configs/tasks/state/a5.json --set model.d_model=32 --set train.seq_len=16 --set train.batch_size=8
    --set data.task.train_len_min=16 --set data.task.train_len_max=16 --set data.task.test_len_min=16
    --set data.task.test_len_max=16 --set run.threads=1)
if "$STEP" "${A5[@]}" --reps 3 --warmup 1 --json "$W/a5.json" > "$W/out" 2>&1; then ok "bench/step runs on the a5 config"
else not_ok "bench/step runs on the a5 config" "$(tail -n 3 "$W/out")"; fi
if python3 - "$W/a5.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
assert b["B"] == 8 and b["T"] == 16 and b["threads"] == 1 and b["params"] > 0, b
assert b["compute_ms"] > 0 and b["data_ms"] >= 0, b
PY
then ok "bench/step JSON: B 8, T 16, 1 thread, positive compute time"; else not_ok "bench/step JSON" "$(cat "$W/a5.json")"; fi
"$STEP" --reps 3 > /dev/null 2> "$W/err"; rc=$?
if [ "$rc" = 2 ] && grep -q "config" "$W/err"; then ok "no --config: status 2 naming it"; else not_ok "no --config" "rc $rc"; fi
"$STEP" "${A5[@]}" --reps 0 > /dev/null 2> "$W/err"; rc=$?
if [ "$rc" = 2 ] && grep -q "reps" "$W/err"; then ok "--reps 0: status 2 naming it"; else not_ok "--reps 0" "rc $rc"; fi

CASES=a5_T16_d64_attention THREADS=1 STEPS=6 WARM=2 BIN=$BIN BENCH=build/$variant/bench bash bench/step_overhead.sh > "$W/t.md" 2> "$W/t.err"
rc=$?
if [ "$rc" = 0 ]; then ok "step_overhead.sh finishes"; else not_ok "step_overhead.sh finishes" "rc $rc: $(tail -n 3 "$W/t.err")"; fi
if python3 - "$W/t.md" <<'PY'
import sys
rows = [l for l in open(sys.argv[1]) if l.startswith("| a5_T16_d64_attention |")]
assert len(rows) == 1, rows
c = [x.strip() for x in rows[0].split("|")[1:-1]]
step, comp, over = float(c[3]), float(c[4]), float(c[6].rstrip("%"))
assert step > 0 and comp > 0, c
assert abs(over - 100 * (step / comp - 1)) < 0.1 + 100 * 0.01 / comp, (over, step, comp)
PY
then ok "the a5 row: positive times, overhead = step / compute - 1 (to the printed rounding)"
else not_ok "the a5 row" "$(cat "$W/t.md")"; fi
test_done
