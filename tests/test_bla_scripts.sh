#!/usr/bin/env bash
# scripts/bla_mqar.sh and scripts/bla_regbench.sh (the BLA paper's Figs. 3a-c and 4) end to end at SCALE=tiny:
# the per-run CSVs (one row per run, accuracies in [0, 1], decoding states equal to BLA Table 1's formulas
# exactly), the figure tables (a Pareto frontier that rises and ends at each line's best run), the PNGs
# (valid PNG headers of 900 x 540), that a second invocation reuses every run, the run counts of SCALE=paper
# (Table 2: 1,088 runs per seed; Table 3: 783 runs), a failed run reported as such, and the usage errors.
#   BIN=bin bash tests/test_bla_scripts.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
[ -x "$BIN/seqtrain" ] || { echo "test_bla_scripts.sh: $BIN/seqtrain not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
export BIN=$(cd "$BIN" && pwd)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export SCALE=tiny JOBS=2 THREADS=1
unset SEQ_OUT MIXERS DIMS HEADS LRS WDS SEEDS DIM EXPAND_KS BLA_EXPAND_KS BLA_MODES SWA_WINDOWS GSA_SLOTS RESOLUTIONS \
    RES_MODES RES_DIM WIN_MODES WIN_DIMS GLA_EXPAND_KS GDN_EXPAND_VS
source tests/lib.sh || exit 2
test_scratch bla-scripts
MQ="$ROOT/scripts/bla_mqar.sh"; RB="$ROOT/scripts/bla_regbench.sh"
source tests/png_check.sh  # is_png FILE [W H]
# a PNG file of 900 x 540 (the signature and the IHDR chunk)
png_ok() { is_png "$1" 900 540; }

# --- usage errors
for s in "$MQ" "$RB"; do
    n=$(basename "$s")
    check "$n --help exits 0 and describes the scales" eval '"$s" --help | grep -q "SCALE=tiny|small|paper"'
    check "$n: a bad SCALE exits 2 with a message" eval 'SCALE=huge SEQ_OUT=$W/x "$s" 2>&1 >/dev/null | grep -q "SCALE must be tiny, small or paper"; [ "${PIPESTATUS[0]}" = 2 ]'
    check "$n: an unknown mixer exits 2 with a message" eval 'MIXERS="bla lstm" SEQ_OUT=$W/x "$s" 2>&1 >/dev/null | grep -q "unknown mixer .lstm."; [ "${PIPESTATUS[0]}" = 2 ]'
    check "$n: an unknown option exits 2" eval 'SEQ_OUT=$W/x "$s" --frobnicate 2>/dev/null; [ $? = 2 ]'
done
check "bla_mqar.sh: a bad SEEDS exits 2" eval 'SEEDS=0 SEQ_OUT=$W/x "$MQ" 2>/dev/null; [ $? = 2 ]'

# --- SCALE=paper: the papers' grids (dry run, nothing trained)
# (the dry run quotes for the shell: \{\"kind\"...; the greps read it unquoted)
SCALE=paper SEQ_OUT=$W/p "$MQ" --dry-run 2>/dev/null | sed 's/\\//g' > "$W/pm"
check "bla_mqar.sh SCALE=paper is Table 2: 1,088 runs (4 d x 2 heads x 4 lr x 33 configurations + Figs. 3b/3c's 32)" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/mqar/bla.json " "$W/pm")" = 1088 ] && [ ! -d "$W/p/runs/bla_d32_h1_e0.5_M4_r2_lr1e-4_s1" ]'
check "... BLA rows at P = 2(2M-1) without decay, GLA/GDN/GSA rows with conv 4" eval '
    grep -q "\"kind\":\"bla\",\"heads\":2,\"modes\":64,\"resolution\":2,\"expand_k\":0.5}" "$W/pm" &&
    ! grep "kind\":\"bla" "$W/pm" | grep -q decay &&
    [ "$(grep -c "kind\":\"gla\".*\"conv\":4" "$W/pm")" = 96 ] && [ "$(grep -c "kind\":\"gsa\".*\"conv\":4" "$W/pm")" = 160 ] &&
    [ "$(grep -c "kind\":\"gated_deltanet\".*\"conv\":4" "$W/pm")" = 96 ]'
SCALE=paper SEQ_OUT=$W/p "$RB" --dry-run 2>/dev/null | sed 's/\\//g' > "$W/pr"
check "bla_regbench.sh SCALE=paper is Table 3: 783 runs (29 configurations x 3 lr x 3 wd x 3 seeds), no short conv" \
    eval '[ "$(grep -c "^$BIN/seqtrain --config configs/tasks/regbench/bla.json " "$W/pr")" = 783 ] && [ "$(grep -c "conv\":[1-9]" "$W/pr")" = 0 ] && [ "$(grep -c "kind\":\"gated_deltanet\".*\"conv\":0" "$W/pr")" = 108 ]'
check "SCALE=small: bla_mqar.sh 92 runs at T 64, bla_regbench.sh 40 runs at T 128 (the counts the usage states)" eval '
    [ "$(SCALE=small SEQ_OUT=$W/s "$MQ" --dry-run 2>/dev/null | grep -c "train.seq_len=64 ")" = 92 ] &&
    [ "$(SCALE=small SEQ_OUT=$W/s "$RB" --dry-run 2>/dev/null | grep -c "train.seq_len=128 ")" = 40 ] &&
    "$MQ" --help | grep -q "92 runs" && "$RB" --help | grep -q "40 runs"'
check "configs/tasks/regbench/bla.json: 5,000 DFAs, T 512, d 128, 4 layers, 4 heads, batch 32, 60 epochs, 2,000 warmup steps" python3 -c '
import json, subprocess, sys
c = json.loads(subprocess.run([sys.argv[1], "--config", "configs/tasks/regbench/bla.json", "--print-config"],
                              capture_output=True, text=True, check=True).stdout)
t, m = c["data"]["task"], c["model"]
assert (t["kind"], t["train_examples"]) == ("regbench", 5000), t
assert (c["train"]["seq_len"], c["train"]["batch_size"], c["train"]["epochs"]) == (512, 32, 60), c["train"]
assert (m["d_model"], m["n_layers"], m["mixer"]["heads"]) == (128, 4, 4), m
assert (c["schedule"]["kind"], c["schedule"]["warmup_steps"], c["schedule"]["min_lr_frac"]) == ("cosine", 2000, 0)' "$BIN/seqtrain"

# --- bla_mqar.sh SCALE=tiny (the rows that run today: gla and gsa need their conv option)
O="$W/mq"
MIXERS="bla swa gdn attention" SEQ_OUT=$O "$MQ" > "$W/m.md" 2> "$W/m.err"; rc=$?
check "bla_mqar.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || tail -n 20 "$W/m.err" | sed 's/^/    /'
check "bla_mqar.sh trained 10 runs (6 for Fig. 3a, 1 more for 3b, 3 more for 3c; shared runs once)" \
    eval '[ "$(grep -c ": training" "$W/m.err")" = 10 ] && [ "$(ls -d "$O"/runs/*/eval | wc -l)" = 10 ]'
check "bla_mqar.sh wrote the tables, CSVs and PNGs" eval 'for f in bla_mqar_runs.csv fig3a_pareto.md fig3a_pareto.csv fig3b_resolution.md fig3b_resolution.csv fig3c_dim.md fig3c_dim.csv; do [ -s "$O/$f" ] || exit 1; done'
for p in fig3a_pareto fig3b_resolution fig3c_dim; do check "$p.png is a 900 x 540 PNG" png_ok "$O/$p.png"; done
check "the Markdown on stdout is the three tables" eval 'diff <(cat "$O/fig3a_pareto.md"; echo; cat "$O/fig3b_resolution.md"; echo; cat "$O/fig3c_dim.md") "$W/m.md"'
check "runs CSV: 10 runs, accuracies in [0,1], states = Table 1 (2 layers; BLA 2 H(dk+dv)(2M-1), SWA 2(2d min(w,T)), GDN 2(H dk dv + conv cache), attention 2(2dT))" python3 -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
assert len(r) == 10, len(r)
T = 32
for x in r:
    assert 0 <= float(x["accuracy"]) <= 1, x
    d, h, e, v = int(x["d_model"]), int(x["heads"]), float(x["expand_k"]), int(x["state_value"])
    want = {"bla": lambda: 2 * int(e * d + d) * (2 * v - 1),
            "swa": lambda: 2 * 2 * d * min(v, T),
            "gdn": lambda: 2 * (int(e * d) * 2 * d + (2 * int(e * d) + 2 * d) * 3),
            "attention": lambda: 2 * 2 * d * T}[x["mixer"]]()
    assert int(x["state_floats"]) == want, (x["id"], x["state_floats"], want)
tags = {x["id"]: x["sweep"] for x in r}
assert tags["bla_d16_h1_e1_M2_r2_lr3e-3_s1"] == "a b c", tags
assert tags["bla_d16_h1_e1_M2_r1_lr3e-3_s1"] == "b" and tags["swa_d32_h1_e1_w3_lr3e-3_s1"] == "c", tags' "$O/bla_mqar_runs.csv"
check "Fig. 3a frontier: per line, states and accuracies strictly rise, and the last point is the line's best run" python3 -c '
import csv, sys
runs = [x for x in csv.DictReader(open(sys.argv[1])) if "a" in x["sweep"].split()]
fr = list(csv.DictReader(open(sys.argv[2])))
lines = {x["line"] for x in runs}
assert {x["line"] for x in fr} == lines == {"BLA", "SWA", "GDN (conv 4)", "Attention (full)"}, lines
for ln in lines:
    pts = [(float(x["state_floats"]), float(x["accuracy"])) for x in fr if x["line"] == ln]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(pts, pts[1:])), (ln, pts)
    best = max(float(x["accuracy"]) for x in runs if x["line"] == ln)
    assert abs(pts[-1][1] - best) < 5e-5, (ln, pts, best)
    assert pts[0][0] == min(float(x["state_floats"]) for x in runs if x["line"] == ln), (ln, pts)' \
    "$O/bla_mqar_runs.csv" "$O/fig3a_pareto.csv"
check "Fig. 3b: rows = resolutions 1, 2 (BLA M 2, d 16)" eval '[ "$(grep -c "^| [12] | [01]\.[0-9]* |$" "$O/fig3b_resolution.md")" = 2 ]'
check "Fig. 3c: rows = d 16, 32, columns BLA and SWA" eval 'grep -q "^| d_model | BLA | SWA |$" "$O/fig3c_dim.md" && [ "$(grep -c "^| \(16\|32\) | [01]\.[0-9]* | [01]\.[0-9]* |$" "$O/fig3c_dim.md")" = 2 ]'
MIXERS="bla swa gdn attention" SEQ_OUT=$O "$MQ" > "$W/m2.md" 2> "$W/m2.err"; rc=$?
check "a second bla_mqar.sh reuses all 10 runs and prints the same tables" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/m2.err")" = 10 ] && ! grep -q ": training" "$W/m2.err" && diff <(grep "^|" "$W/m.md") <(grep "^|" "$W/m2.md")'
MIXERS=bla BLA_MODES=0 RESOLUTIONS=1 WIN_DIMS=16 SEQ_OUT=$W/bad "$MQ" > "$W/b.md" 2> "$W/b.err"; rc=$?
check "a failing run (BLA M 0): exit 1, FAILED in the log, the table says no finished run" \
    eval '[ "$rc" = 1 ] && grep -q "FAILED" "$W/b.err" && grep -q "No finished run.*BLA" "$W/bad/fig3a_pareto.md" && png_ok "$W/bad/fig3a_pareto.png"'

# --- bla_regbench.sh SCALE=tiny (every row)
O="$W/rb"
SEQ_OUT=$O "$RB" > "$W/r.md" 2> "$W/r.err"; rc=$?
check "bla_regbench.sh SCALE=tiny finishes (exit 0)" test "$rc" = 0
[ "$rc" = 0 ] || tail -n 20 "$W/r.err" | sed 's/^/    /'
check "bla_regbench.sh wrote fig4_state.md, .csv and a 900 x 540 PNG" eval '[ -s "$O/fig4_state.md" ] && [ -s "$O/fig4_state.csv" ] && [ -s "$O/bla_regbench_runs.csv" ] && png_ok "$O/fig4_state.png"'
check "RegBench runs CSV: 10 runs, accuracies in [0,1], states = Table 1 (d 16, 2 heads, 2 layers, T 32; GDN without conv)" python3 -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
assert len(r) == 10, len(r)
d, H, T = 16, 2, 32
for x in r:
    assert 0 <= float(x["accuracy"]) <= 1 and x["wd"] == "0.01" and x["lr"] == "3e-3", x
    v = float(x["state_value"])
    want = {"bla": 2 * 2 * d * (2 * int(v) - 1), "swa": 2 * 2 * d * min(int(v), T),
            "gla": 2 * H * int(v * d / H) * (d // H), "gdn": 2 * H * (d // H) * int(v * d / H),
            "gsa": 2 * H * int(v) * 2 * (d // H), "attention": 2 * 2 * d * T}[x["mixer"]]
    assert int(x["state_floats"]) == want, (x["id"], x["state_floats"], want)
assert sorted({x["line"] for x in r}) == sorted(["BLA (decay, resolution 1)", "BLA (decay, resolution 2)", "SWA", "GLA",
                                                 "GDN", "GSA", "Attention (full)"])' "$O/bla_regbench_runs.csv"
check "Fig. 4 table: one row per configuration (best over lr x wd x seed), 10 rows" python3 -c '
import csv, sys
f = list(csv.DictReader(open(sys.argv[1])))
assert len(f) == 10 and all(0 <= float(x["accuracy"]) <= 1 for x in f), f' "$O/fig4_state.csv"
check "the BLA rows trained with decay, the GDN rows without conv" eval 'grep -q "\"decay\":.true" "$O/runs/bla_M2_r1_lr3e-3_wd0.01_s1/config.json" && grep -q "\"conv\":.0" "$O/runs/gdn_expand_v1_lr3e-3_wd0.01_s1/config.json"'
SEQ_OUT=$O "$RB" > "$W/r2.md" 2> "$W/r2.err"; rc=$?
check "a second bla_regbench.sh reuses all 10 runs and prints the same table" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "finished earlier, reused" "$W/r2.err")" = 10 ] && ! grep -q ": training" "$W/r2.err" && diff <(grep "^|" "$W/r.md") <(grep "^|" "$W/r2.md")'

test_done
