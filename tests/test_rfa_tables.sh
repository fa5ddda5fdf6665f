#!/usr/bin/env bash
# The RFA paper table scripts end to end at SCALE=tiny (a few optimizer steps of a 2-layer d32 model per
# row): scripts/rfa_table1.sh (B1-B4, M1, M2, M2.1-M2.6), rfa_table2.sh (M2 at 5 dampings) and
# rfa_table3.sh (B1, B2, M1, M2 on a second corpus: here the bundled WikiText-2 folder). Checks the rows,
# their order and labels, the columns, that every cell is a finite perplexity, the CSV, that finished runs
# are reused, that an interrupted run is resumed (bit-identical), that a run directory with another
# configuration is left alone, and the usage errors (table 3 without a corpus).
#   BIN=bin bash tests/test_rfa_tables.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
for t in seqtrain seqeval; do
    [ -x "$BIN/$t" ] || { echo "test_rfa_tables.sh: $BIN/$t not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
done
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1 PROGRESS_EVERY=0
unset SEQ_OUT
source tests/lib.sh || exit 2
test_scratch rfa-tables
T1="$ROOT/scripts/rfa_table1.sh"; T2="$ROOT/scripts/rfa_table2.sh"; T3="$ROOT/scripts/rfa_table3.sh"
# the bundled WikiText-2 shards: the scripts make them when a run needs them, but the B1 command below is
# run straight from --dry-run's output (a fresh clone has no build/data yet)
if [ ! -f "$ROOT/build/data/wikitext2/test.shard" ]; then
    make -s -C "$ROOT" data > /dev/null || { echo "test_rfa_tables.sh: make data failed" >&2; exit 2; }
fi
O="$W/out"

# the label column of a table
labels() { md_rows "$1" | cut -d'|' -f1; }
# is row LABEL of table FILE four finite positive perplexities?
finite_row() {
    md_rows "$1" | awk -F'|' -v l="$2" '$1 == l { n++; if (NF != 5) exit 1; for (i = 2; i <= 5; i++) if ($i !~ /^[0-9]+\.[0-9]+$/ || $i + 0 <= 0) exit 1 }
                                    END { exit n == 1 ? 0 : 1 }'
}
row_of() { md_rows "$1" | awk -F'|' -v l="$2" '$1 == l { print; exit }' | cut -d'|' -f2-; }

# --- usage errors
"$T3" > "$W/out3" 2> "$W/err3"; rc=$?
check "rfa_table3.sh without a corpus exits 2" test "$rc" = 2
check "... and says BabyLM is not bundled and what to pass" \
    eval 'grep -q "no corpus given" "$W/err3" && grep -q "BabyLM" "$W/err3" && grep -q "not bundled" "$W/err3" && grep -q "build/data/wikitext2" "$W/err3"'
check "rfa_table3.sh --help exits 0 and explains the corpus and that BabyLM is not bundled" \
    eval '"$T3" --help > "$W/help3" && grep -q "BabyLM" "$W/help3" && grep -q "NOT bundled" "$W/help3" && grep -q "CORPUS" "$W/help3"'
check "rfa_table3.sh with a corpus that does not exist exits 2" eval 'SEQ_OUT=$O "$T3" "$W/nowhere" 2>/dev/null; [ $? = 2 ]'
check "rfa_table1.sh --help exits 0 and lists the scales" eval '"$T1" --help | grep -q "SCALE=small"'
check "a bad SCALE exits 2" eval 'SCALE=huge SEQ_OUT=$O "$T1" 2>/dev/null; [ $? = 2 ]'
check "an unknown option exits 2" eval 'SEQ_OUT=$O "$T2" --frobnicate 2>/dev/null; [ $? = 2 ]'

# --- an interrupted run, made by running the script's own command for B1 with --stop-after 2
SEQ_OUT=$O "$T1" --dry-run > "$W/dry" 2> "$W/dry.err"
check "--dry-run lists 12 fresh runs and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config " "$W/dry")" = 12 ] && [ ! -d "$O/runs/b1_rope" ]'
b1_cmd=$(grep "configs/rfa/b1_rope.json" "$W/dry")
eval "$b1_cmd --stop-after 2 --quiet" > /dev/null 2>&1; rc=$?
check "B1 stopped after 2 of its 4 steps with a checkpoint (exit 130)" test "$rc" = 130 -a -f "$O/runs/b1_rope/ckpt-00000002/state.json"

# --- Table 1
SEQ_OUT=$O "$T1" > "$W/t1.md" 2> "$W/t1.err"; rc=$?
check "rfa_table1.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$W/t1.err" | tail -n 30
check "the Markdown on stdout is SEQ_OUT/table1.md" cmp -s "$W/t1.md" "$O/table1.md"
check "columns: Model and L = 32, 64, 128, 256 (1x-8x the training length)" grep -qx '| Model | L=32 | L=64 | L=128 | L=256 |' "$W/t1.md"
printf '%s\n' "RoPE (B1)" "ALiBi (B2)" "Decayed RoPE (B3)" "SC-RoPE (B4)" "RFA (M1)" "SC-RFA (M2)" \
    "**Structural Ablations (Relative to M2)**" "Gaussian NLL (M2.1)" "Flat Prior (M2.2)" "No Mult. Gate (M2.3)" \
    "No Value Rot. (M2.4)" "No Rotations (M2.5)" "Pure Rotation (M2.6)" > "$W/want1"
check "rows in the paper's order and labels, with the ablation separator" diff "$W/want1" <(labels "$W/t1.md")
for l in "RoPE (B1)" "ALiBi (B2)" "Decayed RoPE (B3)" "SC-RoPE (B4)"; do
    check "table 1: $l has 4 finite perplexities" finite_row "$W/t1.md" "$l"
done
for l in "RFA (M1)" "SC-RFA (M2)" "Gaussian NLL (M2.1)" "Flat Prior (M2.2)" "No Mult. Gate (M2.3)" \
         "No Value Rot. (M2.4)" "No Rotations (M2.5)" "Pure Rotation (M2.6)"; do
    check "table 1: $l has 4 finite perplexities" finite_row "$W/t1.md" "$l"
done
check "table1.csv: header and 12 rows of 6 fields with the same numbers as the Markdown" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["id", "model", "ppl_32", "ppl_64", "ppl_128", "ppl_256"], r[0]
assert len(r) == 13 and all(len(x) == 6 for x in r), r
md = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:6]] for l in open(sys.argv[2]) if l.startswith("| ") and "(" in l}
for x in r[1:]:
    assert md[x[1]] == x[2:], (x, md.get(x[1]))
    assert all(float(v) > 0 for v in x[2:])' "$O/table1.csv" "$W/t1.md"
check "the interrupted B1 was resumed, not restarted" grep -q "resuming" "$O/logs/b1_rope.log"
b1_resumed=$(row_of "$W/t1.md" "RoPE (B1)")
check "each row's run directory holds its eval table" eval '[ "$(ls "$O"/runs/*/eval/ppl.csv | wc -l)" = 12 ]'
check "rfa rows trained the rfa mixer with the SDE optimizer group" \
    eval 'grep -q "\"kind\":.\"rfa\"" "$O/runs/m2_6_pure_rotation/config.json" && grep -q "\"unitary\":.true" "$O/runs/m2_6_pure_rotation/config.json" && grep -q "mixer.sde_" "$O/runs/m1_rfa/config.json"'

# --- a second call reuses every finished run
SEQ_OUT=$O "$T1" > "$W/t1b.md" 2> "$W/t1b.err"; rc=$?
check "a second rfa_table1.sh reuses all 12 finished runs" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/t1b.err")" = 12 ] && ! grep -q ": training" "$W/t1b.err"'
check "... and prints the same table" diff <(md_rows "$W/t1.md") <(md_rows "$W/t1b.md")
# a finished run without its eval table (interrupted during the final evaluation) is re-evaluated
rm -rf "$O/runs/b2_alibi/eval"
SEQ_OUT=$O "$T1" > "$W/t1c.md" 2> "$W/t1c.err"; rc=$?
check "a run whose eval table is missing is resumed (re-evaluated) to the same numbers" \
    eval '[ "$rc" = 0 ] && grep -q "b2_alibi: resuming" "$W/t1c.err" && diff <(md_rows "$W/t1.md") <(md_rows "$W/t1c.md")'
# the resumed B1 equals an uninterrupted B1
SEQ_OUT="$W/fresh" "$T1" --dry-run > "$W/dry2" 2>/dev/null
eval "$(grep "configs/rfa/b1_rope.json" "$W/dry2") --quiet" > /dev/null 2>&1
check "the resumed B1 has the perplexities of an uninterrupted B1 (bit-identical resume)" \
    test "$(cut -d, -f1,5 "$W/fresh/runs/b1_rope/eval/ppl.csv")" = "$(cut -d, -f1,5 "$O/runs/b1_rope/eval/ppl.csv")"
# another configuration in the same SEQ_OUT: every run directory is left alone
SEQ_OUT=$O "$T1" --set train.steps=5 > "$W/t1d.md" 2> "$W/t1d.err"; rc=$?
check "another configuration over finished runs: exit 1, nothing trained, differences shown" \
    eval '[ "$rc" = 1 ] && [ "$(grep -c "holds a run with another configuration" "$W/t1d.err")" = 12 ] && ! grep -q ": training" "$W/t1d.err" && grep -q "\"steps\"" "$W/t1d.err"'
check "... and the runs still hold their results" eval '[ "$(grep -c "\"step\": 4," "$O/runs/b3_decayed_rope/log.jsonl")" -ge 1 ] && [ -f "$O/runs/b3_decayed_rope/eval/ppl.csv" ]'

# --- Table 2
SEQ_OUT=$O "$T2" > "$W/t2.md" 2> "$W/t2.err"; rc=$?
check "rfa_table2.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$W/t2.err" | tail -n 30
check "table 2 columns: Damping (b) and L = 32-256" grep -qx '| Damping (b) | L=32 | L=64 | L=128 | L=256 |' "$W/t2.md"
check "table 2 rows: b = 5e-4, 5e-3, 5e-2, 5e-1, 5 in order" \
    diff <(printf '%s\n' "5×10⁻⁴" "5×10⁻³" "5×10⁻²" "5×10⁻¹" "5×10⁰") <(labels "$W/t2.md")
for l in "5×10⁻⁴" "5×10⁻³" "5×10⁻²" "5×10⁻¹" "5×10⁰"; do
    check "table 2: b = $l has 4 finite perplexities" finite_row "$W/t2.md" "$l"
done
check "table2.csv: damping values as numbers" \
    diff <(cut -d, -f2 "$O/table2.csv") <(printf '%s\n' damping 0.0005 0.005 0.05 0.5 5)
check "b = 5e-2 is M2 of table 1, reused" \
    eval 'grep -q "m2_sc_rfa: finished earlier, reused" "$W/t2.err" && [ "$(row_of "$W/t2.md" "5×10⁻²")" = "$(row_of "$W/t1.md" "SC-RFA (M2)")" ]'
check "the damping reached the mixer (b = 5 in its resolved config)" grep -q '"damping":.5,' "$O/runs/m2_sc_rfa_b5/config.json"

# --- Table 3 on the bundled WikiText-2 as the "second corpus"
SEQ_OUT=$O "$T3" build/data/wikitext2 > "$W/t3.md" 2> "$W/t3.err"; rc=$?
check "rfa_table3.sh build/data/wikitext2 finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$W/t3.err" | tail -n 30
check "the table goes to SEQ_OUT/table3-wikitext2.md and .csv" eval 'cmp -s "$W/t3.md" "$O/table3-wikitext2.md" && [ -f "$O/table3-wikitext2.csv" ]'
check "table 3 columns" grep -qx '| Model | L=32 | L=64 | L=128 | L=256 |' "$W/t3.md"
check "table 3 rows: B1, B2, M1, M2" diff <(printf '%s\n' "RoPE (B1)" "ALiBi (B2)" "RFA (M1)" "SC-RFA (M2)") <(labels "$W/t3.md")
for l in "RoPE (B1)" "ALiBi (B2)" "RFA (M1)" "SC-RFA (M2)"; do
    check "table 3: $l has 4 finite perplexities" finite_row "$W/t3.md" "$l"
done
check "table 3 trained on the corpus given (its own run directories, data from the folder)" \
    eval 'grep -q "$ROOT/build/data/wikitext2/train.shard" "$O/runs-wikitext2/b1_rope/config.json" && grep -q "\"tokenizer\":.\"\"" "$O/runs-wikitext2/b1_rope/config.json"'
check "same data, same runs: table 3's B1 equals table 1's B1 (the uninterrupted value)" \
    test "$(row_of "$W/t3.md" "RoPE (B1)")" = "$b1_resumed"
# a corpus .json (relative paths are relative to the file)
mkdir -p "$W/corpus"
cat > "$W/corpus/c.json" <<JSON
{"name": "Test Corpus", "data": {"train": "$ROOT/build/data/wikitext2/train.shard", "test": "$ROOT/build/data/wikitext2/test.shard"}}
JSON
SEQ_OUT=$O "$T3" "$W/corpus/c.json" --set run.seed=7 --dry-run > "$W/dry3" 2>&1; rc=$?
check "a corpus .json: its data, no val, no tokenizer check, the --set passed on" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "data.val=\[\]" "$W/dry3")" = 4 ] && grep -q "run.seed=7" "$W/dry3" && grep -q "run.dir=$O/runs-c " "$W/dry3"'
echo '{"data": {"train": "x.shard", "tset": "y"}}' > "$W/corpus/bad.json"
check "a corpus .json with an unknown key exits 2 naming it" \
    eval 'SEQ_OUT=$O "$T3" "$W/corpus/bad.json" 2> "$W/bad.err"; [ $? = 2 ] && grep -q "tset" "$W/bad.err"'

test_done
