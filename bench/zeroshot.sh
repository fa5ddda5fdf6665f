#!/usr/bin/env bash
# Zero-shot evaluation speed (not a test): seqeval --zeroshot's items/s per task for the CPU-size LM configs,
# on this machine, in one invocation.
#
#   bash bench/zeroshot.sh                                   # CONFIGS="gpt kla" TASKS=paper LIMIT=200 THREADS=2
#   CONFIGS="gpt gla" LIMIT=500 THREADS=16 bash bench/zeroshot.sh
#
# Each model is configs/lm/cpu/<name>.json trained for one step in a temporary folder (the speed of a forward
# pass does not depend on the weights; context = its train.seq_len, 256). seqeval scores the first LIMIT items
# of each task; the seconds per task are the ones zeroshot.csv records (tokenising and scoring, from the first
# item to the last; loading the set excluded). An item costs one batched forward of its choices, so items/s
# falls with the number of choices and their length (HellaSwag: 4 long endings; BoolQ: 2 choices after a
# passage truncated to the context).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIGS=${CONFIGS:-gpt kla}
TASKS=${TASKS:-paper}
LIMIT=${LIMIT:-200}
THREADS=${THREADS:-2}
make -s -j"$(nproc)" tools >&2  # up to date with the sources (make does nothing when it is)
[ -f build/data/wikitext2/train.shard ] || make data
DIR=$(mktemp -d /tmp/zeroshot_bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
echo "zeroshot: $(lscpu | sed -n 's/^Model name: *//p'), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "zeroshot: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), tasks $TASKS, $LIMIT items each, $THREADS threads"
echo
echo "| model | task | items | seconds | items/s |"
echo "|---|---|---:|---:|---:|"
for c in $CONFIGS; do
    OMP_NUM_THREADS=$THREADS bin/seqtrain --config "configs/lm/cpu/$c.json" --set run.dir="$DIR" --set run.name="$c" \
        --set train.steps=1 --set train.ckpt_every=0 --set train.eval_every=0 --set 'eval.contexts=""' \
        --set run.threads="$THREADS" --quiet > "$DIR/$c.train" 2>&1 || { cat "$DIR/$c.train" >&2; exit 1; }
    OMP_NUM_THREADS=$THREADS bin/seqeval --run "$DIR/$c" --zeroshot "$TASKS" --limit "$LIMIT" > "$DIR/$c.eval" 2>&1 \
        || { cat "$DIR/$c.eval" >&2; exit 1; }
    # zeroshot.csv: task is field 2, items 5, seconds 17
    awk -F, -v m="$c" 'NR > 1 { n += $5; s += $17; printf "| %s | %s | %d | %.2f | %.1f |\n", m, $2, $5, $17, $5 / $17 }
        END { printf "| %s | all | %d | %.2f | %.1f |\n", m, n, s, n / s }' "$DIR/$c/eval-zeroshot/zeroshot.csv"
done
