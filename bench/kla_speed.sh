#!/usr/bin/env bash
# KLA speed and memory at the issue's sizes (not a test): build/release/bench/kla, forward + backward of the
# kla mixer next to softmax attention at T = 512, 2048, 4096, 8192 in one run on the same threads (tokens/s,
# the attention/kla time ratio, the crossover length), then the chunked backward's activation memory against
# its bound with the peak RSS of a fresh process per checkpoint interval. Writes one Markdown section.
#
#   bash bench/kla_speed.sh                       # to stdout
#   bash bench/kla_speed.sh OUT.md                # to a file (replaced whole; docs/results/kla.md quotes one)
#   THREADS=16 B=4 D=256 REPS=5 TS=512,2048,4096,8192 MEM_T=8192 bash bench/kla_speed.sh OUT.md
#
# Defaults: THREADS = nproc, B = 4, D = 256 (d_model), REPS = 3, WARMUP = 2, TS = 512,2048,4096,8192,
# MEM_T = the largest of TS, KLA / ATTENTION = bench/kla's default specs (kla d_state 16, mamba sensors;
# attention 4 heads x 64, RoPE). JSON=PREFIX also keeps PREFIX.speed.json and PREFIX.memory.json.
# Attention at the largest T takes most of the time; on 2 cores use TS=512,1024,2048 D=128.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
B=${B:-4}
D=${D:-256}
REPS=${REPS:-3}
WARMUP=${WARMUP:-2}
TS=${TS:-512,2048,4096,8192}   # the issue's 512, 2048, 8192 plus 4096, which brackets the crossover more tightly
MEM_T=${MEM_T:-$(tr ',' '\n' <<< "$TS" | sort -n | tail -n 1)}
KLA=${KLA:-}
ATTENTION=${ATTENTION:-}
OUT=${1:-}
BENCH_DEFAULT=build/release/bench/kla
BENCH=${BENCH:-$BENCH_DEFAULT}   # another build of bench/kla.c, e.g. one made for another machine

# the default build is brought up to date with the sources (make does nothing when it is); a BENCH given is run as it is
if [ "$BENCH" = "$BENCH_DEFAULT" ]; then make -s -j"$(nproc)" "$BENCH" >&2; fi
[ -x "$BENCH" ] || { echo "$0: $BENCH is not an executable" >&2; exit 2; }
specs=()
[ -n "$KLA" ] && specs+=(--kla "$KLA")
[ -n "$ATTENTION" ] && specs+=(--attention "$ATTENTION")
speed_json=(); mem_json=()
if [ -n "${JSON:-}" ]; then speed_json=(--json "$JSON.speed.json"); mem_json=(--json "$JSON.memory.json"); fi
common=(--B "$B" --d "$D" "${specs[@]}")
speed_cmd=("$BENCH" --T "$TS" --reps "$REPS" --warmup "$WARMUP" "${common[@]}" "${speed_json[@]}")
mem_cmd=("$BENCH" --memory --T "$MEM_T" "${common[@]}" "${mem_json[@]}")

section() {
    echo "# KLA vs softmax attention: speed and memory"
    echo
    local commit=unknown
    if commit=$(git rev-parse --short HEAD 2>/dev/null); then git diff --quiet HEAD || commit="$commit (dirty)"; fi
    echo "$(date -u +%Y-%m-%d), commit $commit,"\
         "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), nproc $(nproc), OMP_NUM_THREADS=$THREADS,"\
         "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo '```'
    echo "OMP_NUM_THREADS=$THREADS ${speed_cmd[*]}"
    echo "OMP_NUM_THREADS=$THREADS ${mem_cmd[*]}"
    echo '```'
    echo
    OMP_NUM_THREADS=$THREADS "${speed_cmd[@]}" | sed 's/^## /## Speed: /'
    echo
    OMP_NUM_THREADS=$THREADS "${mem_cmd[@]}" | sed 's/^## /## Memory: /'
}

if [ -n "$OUT" ]; then
    mkdir -p "$(dirname "$OUT")"
    section > "$OUT.tmp"   # a failed run leaves the previous results in place
    mv "$OUT.tmp" "$OUT"
    echo "kla_speed: wrote $OUT" >&2
else
    section
fi
