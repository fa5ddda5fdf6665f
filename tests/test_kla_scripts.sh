#!/usr/bin/env bash
# scripts/kla_figures.sh and scripts/kla_lm.sh at SCALE=tiny (seconds): the figures are PNGs drawn from the
# data files the script writes (Fig. 3b's accuracy by depth and test-loss curves, Fig. 5b's variance table, the
# attention maps' matrices), a second call reuses every run, the usage errors; kla_lm.sh's table has its 14
# rows (Table 4 and Fig. 1b at 45M and 180M), and at the other scales every row scores the whole test split
# (eval.max_windows 0) with its own config.
#   BIN=bin bash tests/test_kla_scripts.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
for t in seqtrain seqeval; do
    [ -x "$BIN/$t" ] || { echo "test_kla_scripts.sh: $BIN/$t not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
done
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1 PROGRESS_EVERY=0
unset SEQ_OUT ROWS DEPTHS CHANNELS
source tests/lib.sh || exit 2
test_scratch kla-scripts
F="$ROOT/scripts/kla_figures.sh"
L="$ROOT/scripts/kla_lm.sh"
O="$W/fig"
source tests/png_check.sh  # is_png FILE [W H]

# --- kla_figures.sh
check "kla_figures.sh --help exits 0 and names the figures" eval '"$F" --help | grep -q "Fig. 3b" && "$F" --help | grep -q "Fig. 5b"'
check "a bad DEPTHS exits 2" eval 'DEPTHS="1 x" SEQ_OUT=$O "$F" --dry-run 2>/dev/null; [ $? = 2 ]'
SEQ_OUT=$O "$F" --dry-run > "$W/dry" 2>/dev/null
check "--dry-run plans 6 runs (OU and ZOH at depths 1, 2; ICR and memorization) and trains nothing" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mad/kla_protocol/" "$W/dry")" = 6 ] && [ ! -d "$O/runs/icr_ou_L1" ]'
SEQ_OUT=$O "$F" > "$W/f.out" 2> "$W/f.err"; rc=$?
check "kla_figures.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
for p in fig3b fig5b attn_selective_copy attn_icr attn_memorization; do
    check "$p.png is a PNG" is_png "$O/$p.png"
done
check "fig3b.tsv: depths 1 and 2, OU and ZOH accuracies in [0, 1]" python3 -c '
import sys
rows = [l.split() for l in open(sys.argv[1])]
assert rows[0] == ["depth", "ou", "zoh"] and [r[0] for r in rows[1:]] == ["1", "2"], rows
assert all(0 <= float(x) <= 1 for r in rows[1:] for x in r[1:]), rows' "$O/fig3b.tsv"
check "the ZOH runs differ from the OU runs only in the discretisation" python3 -c '
import json, sys
a = json.load(open(sys.argv[1] + "/selective_copy_ou_L2/config.json"))
b = json.load(open(sys.argv[1] + "/selective_copy_zoh_L2/config.json"))
assert a["model"]["mixer"]["discretization"] == "ou" and b["model"]["mixer"]["discretization"] == "zoh"
b["model"]["mixer"]["discretization"] = "ou"; a["run"]["name"] = b["run"]["name"] = ""
assert a == b and a["model"]["n_layers"] == 2' "$O/runs"
check "fig3b_curves.tsv: the test loss at steps 2 and 4 of each of the 4 runs" python3 -c '
import sys
blocks = [b for b in open(sys.argv[1]).read().split("\n\n\n") if b.strip()]
assert len(blocks) == 4, len(blocks)
for b in blocks:
    pts = [l.split() for l in b.splitlines() if l and not l.startswith("#")]
    assert [p[0] for p in pts] == ["2", "4"] and all(float(p[1]) > 0 for p in pts), b' "$O/fig3b_curves.tsv"
check "fig5b.tsv: 32 positions, the mean of the 16 channels' positive variances" python3 -c '
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
assert rows[0][:4] == ["position", "input", "target", "mean"] and len(rows[0]) == 4 + 16 and len(rows) == 33
for r in rows[1:]:
    v = [float(x) for x in r[4:]]
    assert min(v) > 0 and abs(sum(v) / 16 - float(r[3])) < 1e-4 * float(r[3]), r' "$O/fig5b.tsv"
check "attention maps: 4 channels per task, 32 x 32, nan exactly above the diagonal" python3 -c '
import glob, sys
for t in ("selective_copy", "icr", "memorization"):
    fs = sorted(glob.glob(sys.argv[1] + "/maps/" + t + "/layer0_head*.tsv"))
    assert len(fs) == 4, (t, fs)
    for f in fs:
        rows = [l.split() for l in open(f)]
        assert len(rows) == 32 and all(len(r) == 32 for r in rows)
        assert all((x == "nan") == (j > i) for i, r in enumerate(rows) for j, x in enumerate(r)), f' "$O"
SEQ_OUT=$O "$F" > /dev/null 2> "$W/f2.err"; rc=$?
check "a second call reuses all 6 runs and draws the figures again" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/f2.err")" = 6 ]'

# --- kla_lm.sh
check "kla_lm.sh --help exits 0" eval '"$L" --help | grep -q "whole test split"'
check "an unknown row exits 2" eval 'ROWS=nope SEQ_OUT=$W/lm "$L" --dry-run 2>/dev/null; [ $? = 2 ]'
for sc in small paper; do
    SCALE=$sc SEQ_OUT=$W/lm_$sc "$L" --dry-run > "$W/dry_$sc" 2>/dev/null
    check "kla_lm.sh SCALE=$sc --dry-run: 14 rows, each with eval.max_windows=0" \
        eval '[ "$(grep -c "^$BIN/seqtrain --config " "$W/dry_$sc")" = 14 ] && [ "$(grep -c -- "--set eval.max_windows=0 " "$W/dry_$sc")" = 14 ]'
done
rows="gpt mamba gdn kla gpt_kla gpt_mamba gpt_gdn"
check "kla_lm.sh SCALE=paper: each row id X trains configs/X_45m.json, X_180m configs/X_180m.json" \
    eval 'for r in $rows; do grep -q -- "--config configs/${r}_45m.json .*run.name=$r " "$W/dry_paper" &&
                            grep -q -- "--config configs/${r}_180m.json .*run.name=${r}_180m " "$W/dry_paper" || exit 1; done'
check "kla_lm.sh SCALE=small: each row id X trains configs/lm/cpu/X.json" \
    eval 'for r in $rows; do for x in $r ${r}_180m; do
              grep -q -- "--config configs/lm/cpu/$x.json .*run.name=$x " "$W/dry_small" || exit 1; done; done'
SEQ_OUT=$W/lm "$L" > "$W/lm.md" 2> "$W/lm.err"; rc=$?
check "kla_lm.sh SCALE=tiny finishes (exit 0) with the 14 rows' perplexities at L = 32 .. 256" \
    eval '[ "$rc" = 0 ] && grep -q "^| Model | L=32 | L=64 | L=128 | L=256 |" "$W/lm.md" &&
          [ "$(grep -cE "^\| (GPT|Mamba|GDN|KLA)[^|]* \|( [0-9.]+ \|){4}\$" "$W/lm.md")" = 14 ]'
check "kla_lm.sh SCALE=tiny: the hybrids' last layer is the named mixer, the others attention" python3 -c '
import json, sys
for r, kind in (("gpt_kla", "kla"), ("gpt_mamba", "mamba"), ("gpt_gdn", "gated_deltanet"), ("gpt_gdn_180m", "gated_deltanet")):
    m = json.load(open(sys.argv[1] + "/" + r + "/config.json"))["model"]
    assert m["mixer"]["kind"] == "attention" and [l["mixer"]["kind"] for l in m["layers"]] == [kind], (r, m)' "$W/lm/runs"

# --- seqeval's views on those runs: the refusals
R="$O/runs/icr_ou_L1"
"$BIN/seqeval" --run "$R" --task --attention-map "$W/m" --heads 99 > /dev/null 2> "$W/e1"; rc=$?
check "--heads past the layer's channels is refused in one line naming --heads" \
    eval '[ "$rc" = 1 ] && [ "$(wc -l < "$W/e1")" = 1 ] && grep -q -- "--heads: 99" "$W/e1"'
"$BIN/seqeval" --run "$R" --task --heads 1 > /dev/null 2> "$W/e2"; rc=$?
check "--heads without --attention-map is refused" eval '[ "$rc" = 1 ] && grep -q -- "--attention-map" "$W/e2"'
"$BIN/seqeval" --run "$W/lm/runs/gpt" --data test --context 32 --posterior-var "$W/v.tsv" > /dev/null 2> "$W/e3"; rc=$?
check "--posterior-var on an attention layer is refused, naming the mixer" \
    eval '[ "$rc" = 1 ] && grep -q "no posterior" "$W/e3" && grep -q attention "$W/e3" && [ ! -e "$W/v.tsv" ]'
"$BIN/seqeval" --run "$W/lm/runs/gpt" --task --posterior-var "$W/v.tsv" > /dev/null 2> "$W/e4"; rc=$?
check "--task on a run trained on shards is refused" eval '[ "$rc" = 1 ] && grep -q "data.task" "$W/e4"'
"$BIN/seqeval" --run "$W/lm/runs/kla" --data test --context 32 --posterior-var "$W/v.tsv" --layer 0 > /dev/null 2>&1; rc=$?
check "--posterior-var on a kla language model's first 32 test tokens: 32 rows of the 32 channels" \
    eval '[ "$rc" = 0 ] && [ "$(wc -l < "$W/v.tsv")" = 33 ] && [ "$(head -n 1 "$W/v.tsv" | wc -w)" = 36 ]'

test_done
