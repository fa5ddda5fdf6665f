#!/usr/bin/env bash
# Smoke test of bench/kla (the KLA vs attention speed and memory benchmark) at tiny sizes: both mixers at
# T = 64, 128 (d 32, one repeat) and the --memory mode at T = 128 with chunks 1, 16, 128. Checks that every
# expected table row is there once with positive numbers, that tokens/s = B T / time and the ratio column
# agree with the times (in the --json output, at full precision), that the crossover is stated, that the
# memory table's act floats equal the stated bound with checkpoints 2 B M S ceil(T/chunk), and that bad
# arguments fail with status 2 and a message. Numbers are not compared with any expected speed.
#
#   BIN=bin bash tests/test_bench_kla.sh              (release build; BIN=build/asan/bin for ASan)
#
# The bench is built here (run_all.sh builds tools and tests, not benches): build/<variant>/bench/kla with
# the make flags of BIN's variant.
set -u
cd "$(dirname "$0")/.." || exit 2
BENCH_TEST=test_bench_kla.sh source tests/bench_build.sh
KLA=build/$variant/bench/kla
source tests/lib.sh || exit 2
test_scratch bench-kla
export OMP_NUM_THREADS=2 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

if make -s "${flags[@]}" "$KLA" > "$W/build.log" 2>&1; then ok "build $KLA"; else
    not_ok "build $KLA" "$(tail -n 5 "$W/build.log" | tr '\n' ' ')"
    test_done
    exit 1
fi

# are cells FROM..TO of the row starting with KEY1|KEY2 in FILE positive numbers, the row present once,
# with NCELLS cells?  (pos_row FILE KEY NCELLS FROM TO)
pos_row() {
    md_rows --all "$1" | awk -F'|' -v k="$2" -v n="$3" -v a="$4" -v b="$5" '
        index($0, k "|") == 1 { c++; if (NF != n) bad = 1; for (i = a; i <= b; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/ || $i + 0 <= 0) bad = 1 }
        END { exit (c == 1 && !bad) ? 0 : 1 }'
}

# ----------------------------------------------------------------------------
# speed
S="$W/speed.md"
if "$KLA" --T 128,64 --d 32 --B 2 --reps 1 --warmup 1 --json "$W/speed.json" > "$S" 2> "$W/speed.err"; then
    ok "speed run exits 0"
else
    not_ok "speed run exits 0" "$(tail -n 3 "$W/speed.err" | tr '\n' ' ')"
fi
for m in kla attention; do
    for T in 64 128; do
        if pos_row "$S" "$m|$T" 7 3 7; then ok "speed row $m T=$T: 5 positive numbers"; else
            not_ok "speed row $m T=$T: 5 positive numbers" "$(grep "^| $m | $T |" "$S")"; fi
    done
done
for T in 64 128; do
    if pos_row "$S" "$T" 4 2 4; then ok "ratio row T=$T: tokens/s of both and attention/kla positive"; else
        not_ok "ratio row T=$T: tokens/s of both and attention/kla positive" "$(grep "^| $T |" "$S")"; fi
done
n=$(md_rows --all "$S" | wc -l)
[ "$n" -eq 6 ] && ok "speed tables have 4 + 2 rows" || not_ok "speed tables have 4 + 2 rows" "$n rows"
# T ascending although given as 128,64
order=$(md_rows --all "$S" | awk -F'|' '$1 == "kla" { printf "%s ", $2 }')
[ "$order" = "64 128 " ] && ok "rows in ascending T" || not_ok "rows in ascending T" "$order"
grep -Eq '^crossover: (below the smallest T|above the largest T|kla becomes faster than attention at T ~ [0-9]+)' "$S" \
    && ok "crossover line" || not_ok "crossover line" "$(grep crossover "$S")"
grep -Eq '^time ~ T\^p .*kla p = -?[0-9.]+, attention p = -?[0-9.]+$' "$S" \
    && ok "scaling exponents line" || not_ok "scaling exponents line" "$(grep 'T^p' "$S")"
grep -q '^threads 2, B=2, d_model=32' "$S" && ok "header names threads, B, d_model" || not_ok "header" "$(sed -n 3p "$S")"
if python3 - "$W/speed.json" > "$W/py.log" 2>&1 <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "kla_speed" and d["B"] == 2 and d["d_model"] == 32 and d["threads"] == 2, d
rows = {(r["mixer"], r["T"]): r for r in d["rows"]}
assert sorted(rows) == [("attention", 64), ("attention", 128), ("kla", 64), ("kla", 128)], sorted(rows)
for (m, T), r in rows.items():
    assert r["ms"] > 0 and r["fwd_ms"] > 0 and r["bwd_ms"] > 0 and r["act_floats"] > 0, r
    assert abs(r["tokens_per_s"] - 2 * T / (r["ms"] * 1e-3)) <= 1e-6 * r["tokens_per_s"], r
for q in d["ratios"]:
    want = rows[("attention", q["T"])]["ms"] / rows[("kla", q["T"])]["ms"]
    assert abs(q["attention_over_kla"] - want) <= 1e-9 * want, q
c = d["crossover"]
assert c["kind"] in ("below", "above", "interpolated"), c
assert (c["T"] is None) == (c["kind"] != "interpolated"), c
if c["kind"] == "interpolated": assert 64 <= c["T"] <= 128, c
PY
then ok "json: tokens/s = B T / time, ratio = attention/kla, crossover consistent"; else
    not_ok "json: tokens/s = B T / time, ratio = attention/kla, crossover consistent" "$(tail -n 2 "$W/py.log" | tr '\n' ' ')"
fi

# ----------------------------------------------------------------------------
# memory
Mf="$W/mem.md"
if "$KLA" --memory --T 128 --d 32 --B 2 --chunks 1,16,128 --json "$W/mem.json" > "$Mf" 2> "$W/mem.err"; then
    ok "memory run exits 0"
else
    not_ok "memory run exits 0" "$(tail -n 3 "$W/mem.err" | tr '\n' ' ')"
fi
# act, bound, checkpoint floats, act MiB, predicted and measured MiB positive (recompute MiB rounds to 0.0 at
# chunk 1; net = measured - overhead may be anything)
for c in 1 16 128; do
    if pos_row "$Mf" "$c" 9 2 5 && pos_row "$Mf" "$c" 9 7 8; then ok "memory row chunk=$c: positive numbers"; else
        not_ok "memory row chunk=$c: positive numbers" "$(grep "^| $c |" "$Mf")"; fi
done
if pos_row "$Mf" "attention" 9 2 2; then ok "memory row attention"; else not_ok "memory row attention" "$(grep '^| attention' "$Mf")"; fi
# act floats = bound floats, checkpoints = 2 B M S ceil(T/chunk) with M = d = 32 (expand 1), S = 16
if md_rows --all "$Mf" | awk -F'|' '$1 ~ /^[0-9]+$/ { n++; c = $1; ck = 2 * 2 * 32 * 16 * int((128 + c - 1) / c);
        if ($2 != $3 || $4 != ck) bad = 1; if (n > 1 && $2 >= prev) bad = 1; prev = $2 } END { exit (n == 3 && !bad) ? 0 : 1 }'; then
    ok "act floats = bound, checkpoints = 2 B M S ceil(T/chunk), act shrinks with chunk"
else
    not_ok "act floats = bound, checkpoints = 2 B M S ceil(T/chunk), act shrinks with chunk" "$(md_rows --all "$Mf" | tr '\n' ' ')"
fi
grep -q '^act_size equals the bound at every chunk$' "$Mf" && ok "memory verdict line" || not_ok "memory verdict line" "$(tail -n 1 "$Mf")"
if python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["M"] == 32 and d["S"] == 16 and len(d["memory"]) == 3
assert all(r["peak_rss_delta_mib"] > 0 and r["predicted_mib"] > 0 for r in d["memory"])' "$W/mem.json" 2> "$W/py.log"; then
    ok "memory json: M, S, 3 rows, positive peak RSS"
else
    not_ok "memory json: M, S, 3 rows, positive peak RSS" "$(tail -n 1 "$W/py.log")"
fi

# ----------------------------------------------------------------------------
# usage errors: status 2 and a message naming the problem
usage() {  # usage WHAT PATTERN ARGS...
    local what=$1 pat=$2; shift 2
    "$KLA" "$@" > "$W/u.out" 2> "$W/u.err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$pat" "$W/u.err"; then ok "usage error: $what"; else
        not_ok "usage error: $what" "status $rc, stderr: $(head -c 300 "$W/u.err")"; fi
}
usage "--T 0" "bad list" --T 0
usage "unknown option" "unknown option" --frobnicate 1
usage "not JSON" "not a JSON object" --kla '{"kind": '
usage "unknown mixer option" "chunkk" --kla '{"kind":"kla","chunkk":4}' --T 8
usage "--memory with two T" "one T" --memory --T 8,16
usage "repeated T" "repeated" --T 8,8
"$KLA" --help > "$W/h.out" 2>&1 && grep -q '^usage: kla' "$W/h.out" && ok "--help" || not_ok "--help" "$(head -n 2 "$W/h.out")"

test_done
