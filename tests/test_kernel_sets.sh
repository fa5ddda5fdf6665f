#!/usr/bin/env bash
# Every kernel set this CPU runs (SEQ_KERNELS: avx512, avx2, generic) trains every mixer to the same losses:
# 3 steps on one thread per mixer and set. The unit tests compare each op's sets on small shapes; this catches
# what only a whole model's shapes reach (the AVX2 matmul once planned a 516-row weight-gradient tile, 6 rows
# more than its pack buffer, and its losses drifted from avx512's by 2.5e-3 after 3 steps).
#   - attention models: bit for bit (the matmul, attention, norm and activation kernels of every set use one
#     fma order), at d 128 so the MLP's weight gradient is a 512-row packed transposed-A matmul over a whole
#     256-step K block;
#   - every other mixer: within 1e-4 of the first set's loss (their recurrence kernels reduce in vector
#     lanes per set: float rounding, measured up to 4e-6 apart).
#   BIN=bin bash tests/test_kernel_sets.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch sets

wiki_shard "$BIN" 600
cat > "$W/base.json" <<JSON
{
  "run": {"dir": "$W/runs", "seed": 5, "threads": 1},
  "data": {"train": "$W/train.shard"},
  "model": {"d_model": 64, "n_layers": 2, "mixer": {"kind": "attention"}},
  "train": {"batch_size": 8, "seq_len": 32, "steps": 3, "eval_every": 0, "ckpt_every": 0},
  "optim": {"lr": 3e-3}
}
JSON

mixers=$(mixer_kinds "$BIN" "$W/base.json")
[ -n "$mixers" ] || not_ok "the list of mixers" "seqtrain's unknown-kind message did not list them"
for m in $mixers; do
    extra=()
    [ "$m" = attention ] && extra=(--set model.d_model=128)
    sets=""; losses=""; failed=""
    for k in avx512 avx2 generic; do
        SEQ_KERNELS=$k "$BIN/seqtrain" --config "$W/base.json" --quiet --set run.name="$m-$k" \
            --set model.mixer.kind="$m" "${extra[@]}" >"$W/out" 2>"$W/err"
        rc=$?
        if [ "$rc" != 0 ]; then
            grep -q "SEQ_KERNELS=$k" "$W/err" && continue  # a set this CPU lacks
            failed="$k exited $rc: $(head -c 200 "$W/err")"; continue
        fi
        sets="$sets $k"; losses="$losses $(last_loss "$W/runs/$m-$k/log.jsonl")"
    done
    if [ -n "$failed" ]; then not_ok "$m under every kernel set" "$failed"; continue; fi
    tol=1e-4; [ "$m" = attention ] && tol=0
    if python3 - "$tol" $losses <<'PY'
import sys
tol = float(sys.argv[1]); l = [float(x) for x in sys.argv[2:]]
sys.exit(0 if all(abs(x - l[0]) <= tol for x in l) else 1)
PY
    then
        n=$(echo $sets | wc -w)
        if [ "$n" -ge 2 ] || [ "$(uname -m)" != x86_64 ]; then
            ok "$m: losses after 3 steps under$sets agree (tolerance $tol):$losses"
        else
            not_ok "$m under every kernel set" "only$sets ran on this x86-64 CPU"
        fi
    else
        not_ok "$m: losses after 3 steps under$sets differ by more than $tol" "$losses"
    fi
done
test_done
