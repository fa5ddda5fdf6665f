#!/usr/bin/env bash
# The KLA paper's Table 4 layout for several runs side by side: zero-shot accuracy (%) per task (acc_norm
# for HellaSwag and ARC-Challenge, acc elsewhere), the average over the paper's eight tasks, and a last row
# with each task's chance level. Reads RUN/eval-zeroshot/zeroshot.csv (written by seqeval --zeroshot), or
# DIR/zeroshot.csv for a folder given to seqeval --zeroshot --out; a run without either is evaluated first.
#
#   scripts/zeroshot_table.sh RUN|DIR [RUN|DIR ...]    e.g. runs/lm_cpu/gpt runs/lm_cpu/kla
#   TASKS=all LIMIT=500 scripts/zeroshot_table.sh RUN  what a missing evaluation scores (default: paper, all items)
#   SE=1 scripts/zeroshot_table.sh RUN ...             each value as "value ± standard error"
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
TASKS=${TASKS:-paper}
LIMIT=${LIMIT:-0}
SE=${SE:-0}
if [ $# -eq 0 ]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
csvs=()
for run in "$@"; do
    run=${run%/}
    csv=$run/eval-zeroshot/zeroshot.csv
    [ -f "$run/zeroshot.csv" ] && csv=$run/zeroshot.csv   # a folder seqeval --zeroshot --out wrote
    if [ ! -f "$csv" ]; then
        [ -f "$run/config.json" ] || { echo "zeroshot_table.sh: $run is not a run directory (no config.json)" >&2; exit 1; }
        echo "zeroshot_table.sh: $run has no $csv: evaluating ($TASKS, limit $LIMIT)" >&2
        "$BIN/seqeval" --run "$run" --zeroshot "$TASKS" --limit "$LIMIT" > /dev/null
    fi
    csvs+=("$csv")
done
# columns: the paper's eight in its order, then the extra tasks, each where any run has it
awk -F, -v se="$SE" '
BEGIN {
    n = split("lambada hellaswag piqa arc_easy arc_challenge winogrande openbookqa boolq copa siqa winograd_wsc", order, " ")
    paper = 8
}
FNR == 1 { next }   # header
{
    run = FILENAME; sub(/\/zeroshot\.csv$/, "", run); sub(/\/eval-zeroshot$/, "", run)   # a row per run or folder
    if (!(run in seen)) { seen[run] = 1; models[++nm] = run }
    have[$2] = 1; col[$2] = $3; met[$2] = ($4 == "acc_norm" ? "accn" : "acc")
    v[run, $2] = $7; s[run, $2] = $8; items[run, $2] = $5; chance[$2] = $13
}
END {
    line = "| Model |"; sub2 = "| |"; sep = "|---|"
    np = 0
    for (i = 1; i <= n; i++) {
        t = order[i]
        if (i == paper + 1 && np) { line = line " Average |"; sub2 = sub2 " acc ↑ |"; sep = sep "---:|" }
        if (!(t in have)) continue
        if (i <= paper) np++
        line = line " " col[t] " |"; sub2 = sub2 " " met[t] " ↑ |"; sep = sep "---:|"
    }
    print line; print sep; print sub2
    for (m = 1; m <= nm; m++) {
        row = "| " models[m] " |"; sum = 0; k = 0
        for (i = 1; i <= n; i++) {
            t = order[i]
            if (i == paper + 1 && np) row = row sprintf(" %s |", k == np ? sprintf("%.2f", sum / k) : "—")
            if (!(t in have)) continue
            if ((models[m], t) in v && v[models[m], t] != "") {
                x = v[models[m], t]
                row = row (se ? sprintf(" %.2f ± %.2f |", x, s[models[m], t]) : sprintf(" %.2f |", x))
                if (i <= paper) { sum += x; k++ }
            } else row = row " — |"
        }
        print row
    }
    row = "| chance |"; sum = 0; k = 0
    for (i = 1; i <= n; i++) {
        t = order[i]
        if (i == paper + 1 && np) row = row sprintf(" %.2f |", sum / np)
        if (!(t in have)) continue
        row = row sprintf(" %.2f |", chance[t] == "" ? 0 : chance[t])
        if (i <= paper) { sum += chance[t]; k++ }
    }
    print row
    printf "\nItems scored per task:"
    for (i = 1; i <= n; i++) if (order[i] in have) printf " %s %s", order[i], items[models[1], order[i]]
    printf " (%s).\n", models[1]
}' "${csvs[@]}"
