#!/usr/bin/env bash
# The trainer's per-step overhead on the small models of the task sweeps (not a test): for each case, the
# time of a real seqtrain step (everything the training loop does: generating the batch, forward,
# backward, clipping, AdamW, the log line) next to the pure forward + backward of the same model and batch
# (bench/step), measured in the same invocation with the same threads.
#
#   make tools benches && THREADS=2 bash bench/step_overhead.sh [> table.md]
#
# A real step's time is (elapsed_s at step STEPS - elapsed_s at step WARM) / (STEPS - WARM) from the run's
# log.jsonl (log_every 1, no evaluation or checkpoint inside that window); compute is bench/step's median.
# overhead = step / compute - 1. Settings: THREADS (default 2), STEPS (default 40), WARM (default 10),
# BIN (default bin), BENCH (default build/release/bench), CASES (default all, names below).
set -u -o pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}; STEPS=${STEPS:-40}; WARM=${WARM:-10}
BIN=${BIN:-bin}; BENCH=${BENCH:-build/release/bench}
for x in "$BIN/seqtrain" "$BENCH/step"; do
    [ -x "$x" ] || { echo "step_overhead.sh: $x not found (make tools benches)" >&2; exit 2; }
done
[ "$STEPS" -gt "$WARM" ] || { echo "step_overhead.sh: STEPS must be > WARM" >&2; exit 2; }
# name | config | overrides (';'-separated): the d = 128 task models, and one small state-tracking model
ALL=(
    'mad_icr_attention|configs/tasks/mad/icr.json|'
    'mad_icr_kla|configs/tasks/mad/icr.json|model.mixer={"kind":"kla","d_state":8}'
    'mad_compression_autoencoder|configs/tasks/mad/compression.json|'
    'mqar_T64_d128_attention|configs/tasks/mqar/zoology.json|train.seq_len=64;data.task.num_kv_pairs=4;train.batch_size=64'
    'mqar_T64_d128_kla|configs/tasks/mqar/zoology.json|train.seq_len=64;data.task.num_kv_pairs=4;train.batch_size=64;model.mixer={"kind":"kla","d_state":16};model.block=fused'
    'a5_T16_d64_attention|configs/tasks/state/a5.json|model.d_model=64;train.seq_len=16;data.task.train_len_min=16;data.task.train_len_max=16;data.task.test_len_min=16;data.task.test_len_max=16'
)
W=$(mktemp -d "${TMPDIR:-/tmp}/seqtrain-step-overhead.XXXXXX") || exit 1
trap 'rm -rf "$W"' EXIT
echo "Trainer step vs pure compute, $THREADS threads, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1);" \
     "steps $((WARM + 1))-$STEPS of a fresh run. Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
echo
echo "| case | B x T | parameters | seqtrain step (ms) | forward+backward (ms) | data (ms) | overhead |"
echo "|---|---|---:|---:|---:|---:|---:|"
rc=0
for spec in "${ALL[@]}"; do
    IFS='|' read -r name cfg sets <<< "$spec"
    if [ -n "${CASES:-}" ]; then case ",$CASES," in *",$name,"*) ;; *) continue ;; esac; fi
    args=(--config "$cfg" --set "run.threads=$THREADS")
    while IFS= read -r s; do [ -n "$s" ] && args+=(--set "$s"); done < <(tr ';' '\n' <<< "$sets")
    if ! "$BIN/seqtrain" "${args[@]}" --set "run.dir=$W" --set "run.name=$name" --set "train.steps=$STEPS" \
        --set train.log_every=1 --set train.eval_every=0 --set train.ckpt_every=0 --set train.stop_at_acc=0 --set train.patience=0 \
        --set data.task.test_examples=1 --quiet > "$W/$name.out" 2>&1; then
        echo "step_overhead.sh: $name: seqtrain failed:" >&2; tail -n 5 "$W/$name.out" >&2; rc=1; continue
    fi
    if ! "$BENCH/step" "${args[@]}" --reps 20 --warmup 3 --json "$W/$name.json" > "$W/$name.bench" 2>&1; then
        echo "step_overhead.sh: $name: bench/step failed:" >&2; tail -n 5 "$W/$name.bench" >&2; rc=1; continue
    fi
    python3 - "$W/$name/log.jsonl" "$W/$name.json" "$name" "$WARM" "$STEPS" <<'PY' || rc=1
import json, sys
log, bench, name, warm, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
el = {r["step"]: r["elapsed_s"] for r in map(json.loads, open(log)) if "elapsed_s" in r}
step_ms = 1e3 * (el[steps] - el[warm]) / (steps - warm)
b = json.load(open(bench))
print(f"| {name} | {b['B']} x {b['T']} | {b['params']:,} | {step_ms:.2f} | {b['compute_ms']:.2f} | {b['data_ms']:.3f} | "
      f"{100 * (step_ms / b['compute_ms'] - 1):+.1f}% |")
PY
done
exit "$rc"
