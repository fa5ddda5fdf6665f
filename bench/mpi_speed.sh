#!/usr/bin/env bash
# Data-parallel benchmark (not a test): training tokens/s of bench/configs/speed_rope.json (6 layers, d 256,
# T 512) with one process against MPI ranks on the same machine and the same total threads, and the
# gradient all-reduce's share of a step (log.jsonl's allreduce_s against the step's wall time).
#
#   bash bench/mpi_speed.sh                       # TOTAL_THREADS=$(nproc) RANKS_LIST="1 2" STEPS=8
#   TOTAL_THREADS=16 RANKS_LIST="1 2 4" bash bench/mpi_speed.sh
#
# A step is GRAD_ACCUM (default 4) micro-batches of 8 / GRAD_ACCUM... windows: the same 8 x 512 tokens for
# every row, shared by the ranks. tokens/s and the all-reduce share are medians over the steps after the
# first 2. Builds the MPI variant (make MPI=1), or brings it up to date.
set -euo pipefail

cd "$(dirname "$0")/.."
TOTAL_THREADS=${TOTAL_THREADS:-$(nproc)}
RANKS_LIST=${RANKS_LIST:-"1 2"}
STEPS=${STEPS:-8}
GRAD_ACCUM=${GRAD_ACCUM:-4}
CONFIG=${CONFIG:-bench/configs/speed_rope.json}
PY=${PY:-python3}
MPI_BIN=build/release-mpi/bin
RUN_DIR=$(mktemp -d /tmp/seqtrain_mpi.XXXXXX)
trap 'rm -rf "$RUN_DIR"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

source bench/common.sh
bench_setup mpi_speed "$CONFIG, $STEPS steps of $GRAD_ACCUM micro-batches, $TOTAL_THREADS threads in all"
make -s -j"$(nproc)" MPI=1 tools >&2  # up to date with the sources (make does nothing when it is)
batch=$(( $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["batch_size"])' "$CONFIG") / GRAD_ACCUM ))
[ "$batch" -ge 1 ] || { echo "mpi_speed: GRAD_ACCUM $GRAD_ACCUM is larger than the config's batch" >&2; exit 2; }

echo
echo "| processes | threads each | kernels | tokens/s | vs 1 process | all-reduce share of a step | all-reduce ms |"
echo "|---|---|---|---|---|---|---|"
base=""
for ranks in $RANKS_LIST; do
    th=$(( TOTAL_THREADS / ranks ))
    [ "$th" -ge 1 ] || continue
    rm -rf "$RUN_DIR/r"
    args=(--config "$CONFIG" --set run.dir="$RUN_DIR" --set run.name=r --set train.steps="$STEPS"
          --set train.grad_accum="$GRAD_ACCUM" --set train.batch_size="$batch" --set run.threads="$th" --quiet)
    if [ "$ranks" = 1 ]; then
        OMP_NUM_THREADS=$th "$MPI_BIN/seqtrain" "${args[@]}" > "$RUN_DIR/out" 2>&1 || { cat "$RUN_DIR/out" >&2; exit 1; }
    else
        # --map-by slot:PE=th gives each rank th cores of its own (mpirun's default binds a rank to one core)
        mpirun --oversubscribe -np "$ranks" --map-by "slot:PE=$th" -x OMP_NUM_THREADS="$th" \
            "$MPI_BIN/seqtrain" "${args[@]}" > "$RUN_DIR/out" 2>&1 || { cat "$RUN_DIR/out" >&2; exit 1; }
    fi
    kset=$(kernels_of "$RUN_DIR/out")
    read -r tps share ms < <("$PY" -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["step"] > 2 and "tokens_per_s" in r]
tps = statistics.median(r["tokens_per_s"] for r in rows)
red = [r.get("allreduce_s", 0.0) for r in rows]
step_s = [r["tokens"] / r["step"] / r["tokens_per_s"] for r in rows]
print("%.1f %.1f %.2f" % (tps, 100 * statistics.median(a / s for a, s in zip(red, step_s)), 1000 * statistics.median(red)))' \
        "$RUN_DIR/r/log.jsonl")
    base=${base:-$tps}
    "$PY" -c '
import sys
ranks, th, kset, tps, base, share, ms = sys.argv[1:8]
print(f"| {ranks} | {th} | {kset} | {float(tps):.0f} | {float(tps) / float(base):.2f}x | {share}% | {ms} |")' \
        "$ranks" "$th" "${kset:-?}" "$tps" "$base" "$share" "$ms"
done
