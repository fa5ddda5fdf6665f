#!/usr/bin/env bash
# RFA training speed relative to the RoPE baseline (not a test), in one invocation on the same machine and
# threads: the bench/configs/speed_rope.json model (6 layers, d=256, 8 heads, d->2d->d, B=8, T=512) with
# its attention mixer (B1 RoPE), then with the rfa mixer in the same widths (8 heads x 32 complex channels
# = 512 reals): M1 (RFA) and M2 (SC-RFA). The paper's PyTorch RFA trains ~2x slower than SDPA attention
# (App. D.3); the target here is <= 1.3x the RoPE step time.
#
#   bash bench/rfa_speed.sh                 # STEPS=10 THREADS=2
#
# tokens/s per run: the median of log.jsonl's per-step tokens_per_s after the first 2 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10}
THREADS=${THREADS:-2}
CONFIG=bench/configs/speed_rope.json
RUN_DIR=$(mktemp -d /tmp/seqtrain_rfa_speed.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT
if [ "$STEPS" -le 3 ]; then echo "rfa_speed: STEPS must be > 3 (the first 2 steps are not timed)" >&2; exit 1; fi
make -s -j"$(nproc)" tools >&2  # up to date with the sources (make does nothing when it is)
[ -f build/data/wikitext2/train.shard ] || make data

echo "rfa_speed: $(lscpu | sed -n 's/^Model name: *//p'), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rfa_speed: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $STEPS steps, $THREADS threads"

median_tps() {  # median tokens_per_s of log.jsonl after step 2
    /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
v = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(f"{statistics.median(v[2:]):.1f}")
PY
}

run() {  # run NAME SET-ARGS...
    local name=$1; shift
    env -u OPENBLAS_CORETYPE bin/seqtrain --config "$CONFIG" --quiet --set run.dir="$RUN_DIR" --set run.name="$name" \
        --set run.threads="$THREADS" --set train.steps="$STEPS" "$@" > "$RUN_DIR/$name.out"
    median_tps "$RUN_DIR/$name/log.jsonl"
}

rope=$(run rope)
# the config's mixer has only kind, heads and head_dim (RoPE, no bias are the attention defaults), so
# these overrides give the rfa mixer at the same widths: 32 complex channels = 64 reals per head
m1=$(run rfa_m1 --set model.mixer.kind=rfa --set model.mixer.head_dim=32)
m2=$(run rfa_m2 --set model.mixer.kind=rfa --set model.mixer.head_dim=32 --set model.mixer.spectral_coupling=true)
echo
echo "| mixer | tokens/s | step time vs RoPE |"
echo "|---|---:|---:|"
for row in "RoPE (B1) $rope" "RFA (M1) $m1" "SC-RFA (M2) $m2"; do
    tps=${row##* }; name=${row% *}
    echo "| $name | $tps | $(/usr/bin/python3 -c "print(f'{$rope / $tps:.2f}x')") |"
done
