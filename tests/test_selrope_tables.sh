#!/usr/bin/env bash
# scripts/selrope_tables.sh (the Selective RoPE paper's experiments: MQAR, MAD, state tracking, LM perplexity by
# context length) end to end at SCALE=tiny: every part's table (rows, columns, cells that are accuracies in
# [0, 1] or finite perplexities, the CSVs), that the Selective RoPE rows train the option and the others do not,
# that a second invocation reuses every run and prints the same tables, the run counts of --dry-run at tiny and
# paper scale (the paper's 8-value MQAR lr grid, the 370M LM configs), the 370M configs' recipe,
# and the usage errors.
#   BIN=bin bash tests/test_selrope_tables.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
[ -x "$BIN/seqtrain" ] || { echo "test_selrope_tables.sh: $BIN/seqtrain not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1 PROGRESS_EVERY=0
unset SEQ_OUT MQAR_MIXERS MQAR_LRS MQAR_DIMS MAD_ROWS MAD_TASKS MAD_LRS MAD_VARIANTS STATE_MIXERS STATE_PARTS LM_ROWS ROWS \
    TASKS MIXERS LRS DIMS TS SEEDS L_MAX A5_LEN TRAIN_LEN TEST_LENS PARTS PROTOCOL SETTING VARIANTS PARITY_SEEDS
source tests/lib.sh || exit 2
test_scratch selrope-tables
S="$ROOT/scripts/selrope_tables.sh"
O="$W/out"
if [ ! -f "$ROOT/build/data/wikitext2/test.shard" ]; then
    make -s -C "$ROOT" data > /dev/null || { echo "test_selrope_tables.sh: make data failed" >&2; exit 2; }
fi
# table FILE has the labels LABEL... in order and NCOL cells each matching the regex RE (one or two columns of
# text first when SKIP is 1 or 2)
table_ok() {  # table_ok FILE SKIP NCOL RE LABEL...
    local f=$1 skip=$2 n=$3 re=$4; shift 4
    [ "$(md_rows "$f" | cut -d'|' -f1)" = "$(printf '%s\n' "$@")" ] || return 1
    md_rows "$f" | awk -F'|' -v s="$skip" -v n="$n" -v re="$re" '{ if (NF != s + n) exit 1; for (i = s + 1; i <= s + n; i++) if ($i !~ re) exit 1 }'
}
ACC='^[01]\.[0-9]+$'; PPL='^[0-9]+\.[0-9][0-9]$'

# --- usage
check "--help exits 0 and names the parts and scales" eval '"$S" --help | grep -q "SCALE=tiny|small|paper" && "$S" --help | grep -q "PART: mqar, mad, state, lm"'
check "a bad SCALE exits 2" eval 'SCALE=huge SEQ_OUT=$O "$S" 2>/dev/null; [ $? = 2 ]'
check "an unknown part exits 2" eval 'SEQ_OUT=$O "$S" copying 2>/dev/null; [ $? = 2 ]'
check "an unknown MQAR row exits 2" eval 'MQAR_MIXERS=lstm SEQ_OUT=$O "$S" mqar 2>/dev/null; [ $? = 2 ]'
check "an unknown LM row exits 2" eval 'LM_ROWS=mamba SEQ_OUT=$O "$S" lm 2>/dev/null; [ $? = 2 ]'
check "a bad STATE_PARTS exits 2" eval 'STATE_PARTS=s5 SEQ_OUT=$O "$S" state 2>/dev/null; [ $? = 2 ]'
check "... and none of them trained anything" test ! -e "$O/mqar/runs/zoology_T16_gla_d16_lr1e-3"

# --- what the scales run
SEQ_OUT=$O "$S" --dry-run > "$W/dry" 2> "$W/dry.err"
# MQAR 4 rows x 2 lr; MAD 5 rows x 6 tasks; state 4 rows x (A5 1 layer + parity) + the 1-layer row's parity; LM 6 rows
check "tiny --dry-run lists 53 runs (MQAR 8, MAD 30, state 9, LM 6) and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config " "$W/dry")" = 53 ] && [ ! -d "$O/mqar/runs/zoology_T16_gla_d16_lr1e-3" ] && [ ! -d "$O/lm/runs" ]'
check "the state-tracking runs take the paper's lr 1e-3 and wd 1e-6" \
    eval '[ "$(grep "configs/tasks/state/" "$W/dry" | grep -c -- "--set optim.lr=1e-3 --set optim.weight_decay=1e-6")" = 9 ]'
# the paper's state tracking (App. B.2.2) for a row of free depth and the 1-layer one: parity x seeds 555-999
# with its budget; A5 x 1-4 layers x 5 seeds of the first only (the paper scale's default has 10 rows)
SCALE=paper STATE_MIXERS="gla attn_selrope_1l" SEQ_OUT=$W/paper "$S" state --dry-run > "$W/drys" 2> /dev/null
check "paper state --dry-run: parity 10 runs (2 rows x 5 seeds) with App. B.2.2's budget, A5 20, no 1-layer A5 row" \
    eval '[ "$(grep -c "configs/tasks/state/parity.json " "$W/drys")" = 10 ] && [ "$(grep -c "configs/tasks/state/a5.json " "$W/drys")" = 20 ] &&
          [ "$(grep "configs/tasks/state/parity.json " "$W/drys" | grep -c -- "--set run.seed=[5-9][5-9][5-9] .*--set data.task.train_examples=2000000 --set data.task.test_examples=500000 --set train.batch_size=4096 --set train.epochs=100 ")" = 10 ] &&
          grep -q "run.name=parity_attn_selrope_1l_s999 " "$W/drys" && ! grep -q "run.name=a5_attn_.*_1l_" "$W/drys"'
SCALE=paper MAD_TASKS=memorization MAD_LRS=1e-3 SEQ_OUT=$W/paper "$S" mad --dry-run > "$W/drym" 2> /dev/null
check "paper MAD --dry-run: 7 rows (GLA NoPE, RoPE, Selective RoPE among them) x memorization's 6 settings x 2 wd" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mad/memorization.json " "$W/drym")" = 84 ] &&
          grep -q "run.name=gla_rope__memorization-v8192__lr1e-3_wd0.1 " "$W/drym" && grep -q "run.name=attn_none__memorization__lr1e-3_wd0 " "$W/drym"'
SCALE=paper SEQ_OUT=$W/paper "$S" mqar lm --dry-run > "$W/dryp" 2> "$W/dryp.err"
check "paper --dry-run: MQAR 4 rows x d 64-512 x T 64-512 x the 8-value lr grid (512 runs), LM the three 370M configs" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mqar/zoology.json " "$W/dryp")" = 512 ] &&
          [ "$(grep -c "optim.lr=4.86e-3 " "$W/dryp")" = 64 ] &&
          [ "$(grep -c "^$BIN/seqtrain --config configs/lm/selrope/gla_370m.json " "$W/dryp")" = 2 ] &&
          [ "$(grep -c "^$BIN/seqtrain --config configs/lm/selrope/gated_deltanet_370m.json " "$W/dryp")" = 2 ] &&
          [ "$(grep -c "^$BIN/seqtrain --config configs/lm/selrope/fox_370m.json " "$W/dryp")" = 2 ]'
# the 370M recipe (resolved, not built: building a 376M model takes half a minute here): 24 x d1024, T 4096,
# 8 x 16 sequences per step for 66,758 steps (35B tokens), AdamW 0.9/0.95, wd 0.1, clip 1, cosine, warmup 10%
recipe_ok() {  # recipe_ok CONFIG_NAME MIXER_KIND
    "$BIN/seqtrain" --config "configs/lm/selrope/$1_370m.json" --set model.mixer.selective_rope.enabled=true --print-config |
        python3 -c '
import json, sys
c = json.load(sys.stdin); m, t, o, s = c["model"], c["train"], c["optim"], c["schedule"]
assert (m["d_model"], m["n_layers"], t["seq_len"], t["batch_size"] * t["grad_accum"], t["steps"]) == (1024, 24, 4096, 128, 66758), (m, t)
assert (o["beta1"], o["beta2"], o["weight_decay"], o["grad_clip"], s["kind"], s["warmup_frac"]) == (0.9, 0.95, 0.1, 1.0, "cosine", 0.1), (o, s)
assert m["mixer"]["selective_rope"]["enabled"] is True and m["mixer"]["kind"] == sys.argv[1], m["mixer"]' "$2"
}
check "configs/lm/selrope/gla_370m.json resolves to the paper's recipe (with Selective RoPE too)" recipe_ok gla gla
check "configs/lm/selrope/gated_deltanet_370m.json likewise" recipe_ok gated_deltanet gated_deltanet
check "configs/lm/selrope/fox_370m.json likewise, attention with pos fox" \
    eval 'recipe_ok fox attention && "$BIN/seqtrain" --config configs/lm/selrope/fox_370m.json --print-config | grep -q "\"pos\":.\"fox\""'

# --- the tables
SEQ_OUT=$O "$S" > "$W/t.md" 2> "$W/t.err"; rc=$?
check "selrope_tables.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$W/t.err" | tail -n 30
check "MQAR: the 4 rows, one accuracy each (d 16)" table_ok "$O/mqar/mqar_zoology_T16.md" 1 1 "$ACC" \
    "Attention (RoPE)" "GLA" "GLA + RoPE (complex forget gate)" "GLA + Selective RoPE"
check "MQAR CSV: header and 4 rows with the best lr" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert r[0] == ["mixer", "label", "acc_d16", "lr_d16"] and [x[0] for x in r[1:]] == ["attn_rope", "gla", "gla_rope", "gla_selrope"], r
assert all(0 <= float(x[2]) <= 1 and x[3] in ("1e-3", "1e-2") for x in r[1:]), r' "$O/mqar/mqar_zoology_T16.csv"
check "MAD: the 5 rows, six tasks and the average" table_ok "$O/mad/mad_table.md" 1 7 "$ACC" \
    "Attention (RoPE)" "GLA" "GLA + Selective RoPE" "Gated DeltaNet" "Gated DeltaNet + Selective RoPE"
check "MAD CSV: 5 rows of 7 numbers" python3 -c '
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
assert [x[0] for x in r[1:]] == ["attn_rope", "gla", "gla_selrope", "gdn", "gdn_selrope"] and all(len(x) == 9 for x in r), r' "$O/mad/mad_table.csv"
STATE_ROWS=("GLA" "GLA + Selective RoPE" "Gated DeltaNet (β ∈ (0, 2))" "Attention (FoX) + Selective RoPE")
check "parity: the 5 rows, accuracies at 3 test lengths" table_ok "$O/state/parity.md" 1 3 "$ACC" "${STATE_ROWS[@]}" \
    "Attention + Selective RoPE, 1 layer"
check "A5: the 4 rows, fewest layers and the accuracy at 1 layer" table_ok "$O/state/a5.md" 2 1 "$ACC" "${STATE_ROWS[@]}"
check "state CSVs: parity 5 x 3 accuracies, A5 4 rows" python3 -c '
import csv, sys
p = list(csv.reader(open(sys.argv[1]))); a = list(csv.reader(open(sys.argv[2])))
assert p[0] == ["mixer", "label", "acc_L8", "acc_L16", "acc_L32"] and len(p) == 6 and all(0 <= float(v) <= 1 for x in p[1:] for v in x[2:]), p
assert [x[0] for x in a[1:]] == ["gla", "gla_selrope", "gated_deltanet_neg", "attn_fox_selrope"], a' "$O/state/parity.csv" "$O/state/a5.csv"
check "LM: the 6 rows, finite perplexities at L = 32-256" table_ok "$O/lm/selrope_lm.md" 1 4 "$PPL" \
    "GLA (NoPE)" "GLA + Selective RoPE" "Gated DeltaNet (NoPE)" "Gated DeltaNet + Selective RoPE" "FoX (NoPE)" "FoX + Selective RoPE"
check "LM CSV: header and 6 rows" eval 'head -n 1 "$O/lm/selrope_lm.csv" | grep -qx "id,model,ppl_32,ppl_64,ppl_128,ppl_256" && [ "$(wc -l < "$O/lm/selrope_lm.csv")" = 7 ]'
check "stdout holds every table" eval 'for f in mqar/mqar_zoology_T16.md mad/mad_table.md state/parity.md state/a5.md lm/selrope_lm.md; do
    grep -qF "$(head -n 1 "$O/$f")" "$W/t.md" || exit 1; done'
# Selective RoPE in exactly the rows that name it (the resolved config of each run)
on() { grep -A1 '"selective_rope":' "$1" | grep -q '"enabled":.true'; }
check "Selective RoPE is on in the selrope rows and off in the others" \
    eval 'on "$O/mqar/runs/zoology_T16_gla_selrope_d16_lr1e-3/config.json" && ! on "$O/mqar/runs/zoology_T16_gla_d16_lr1e-3/config.json" &&
          on "$O/mad/runs/gdn_selrope__icr__lr1e-3_wd0/config.json" && ! on "$O/mad/runs/gdn__icr__lr1e-3_wd0/config.json" &&
          on "$O/state/runs/parity_attn_fox_selrope/config.json" && ! on "$O/state/runs/parity_gla/config.json" &&
          on "$O/lm/runs/fox_selrope/config.json" && ! on "$O/lm/runs/fox/config.json" && grep -q "\"pos\":.\"fox\"" "$O/lm/runs/fox_selrope/config.json"'
check "the GLA + RoPE row rotates (the complex forget gate)" grep -q '"rotate":.true' "$O/mqar/runs/zoology_T16_gla_rope_d16_lr1e-3/config.json"
check "the 1-layer row: one attention layer, no fixed position scheme, Selective RoPE on" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["model"]
assert m["n_layers"] == 1 and m["mixer"]["kind"] == "attention" and m["mixer"]["pos"] == "none", m
assert m["mixer"]["selective_rope"]["enabled"] is True, m' "$O/state/runs/parity_attn_selrope_1l/config.json"

# --- a second call reuses every run
SEQ_OUT=$O "$S" > "$W/t2.md" 2> "$W/t2.err"; rc=$?
check "a second call reuses all 53 runs and trains none" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/t2.err")" = 53 ] && ! grep -q ": training" "$W/t2.err"'
check "... and prints the same tables" eval 'diff <(grep "^|" "$W/t.md") <(grep "^|" "$W/t2.md")'
# one part alone, with its own row override
MQAR_MIXERS="gla_selrope" SEQ_OUT=$O "$S" mqar > "$W/t3.md" 2> "$W/t3.err"; rc=$?
check "one part with MQAR_MIXERS reruns nothing and tables that row only" \
    eval '[ "$rc" = 0 ] && ! grep -q ": training" "$W/t3.err" && [ "$(md_rows "$O/mqar/mqar_zoology_T16.md" | cut -d"|" -f1)" = "GLA + Selective RoPE" ] && ! grep -q "MAD synthetic" "$W/t3.md"'

test_done
