#!/usr/bin/env bash
# scripts/plot_rfa.sh on fabricated inputs: a diag.jsonl of 2 RFA layers x 3 steps x 4 heads (with a
# null value and a half-written last line, as a run still training leaves it), seqeval-format ppl.json
# files, one given as a file, one inside a run folder's eval/ and two in seqeval's default output folders
# (RUN/eval-test/, RUN/eval-valid-sliding/), log.jsonl files with validation lines (a null, a val_loss
# without val_ppl, a step logged twice by a resume), run folders whose config.json holds an rfa damping,
# and attention-map PNGs in seqeval's format. Checks that every PNG is written, starts with the PNG
# signature and has the size the script asks gnuplot for, and that bad input fails with a message that
# says what is wrong. tests/test_plot_rfa_run.sh draws every figure from real tiny runs.
#
# gnuplot is a dependency like the compilers: when it is missing this test installs it the way the
# Makefile does (scripts/install_deps.sh) and fails, saying so, if that is not possible. It never skips.
# KEEP=1 keeps its temp folder, to look at the figures.
set -u
cd "$(dirname "$0")/.." || exit 2
source tests/lib.sh || exit 2

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "test_plot_rfa.sh: gnuplot missing; installing it with scripts/install_deps.sh (as \`make deps\` does)"
    bash scripts/install_deps.sh
fi
if command -v gnuplot >/dev/null 2>&1; then ok "gnuplot is installed"; else
    not_ok "gnuplot is installed" "scripts/install_deps.sh could not install gnuplot-nox; run: apt-get install gnuplot-nox"
    test_done
    exit 1
fi

test_scratch plot
PLOT=scripts/plot_rfa.sh
QUANTS="mu sigma_tilde2 eta2 gamma2 alpha nu_over_d tau"

source tests/png_check.sh  # is_png FILE W H

mkdir -p "$W/run"
/usr/bin/python3 tests/plot_rfa_fixtures.py "$W"

# --help
"$PLOT" --help > "$W/help" 2>&1; rc=$?
check_status $rc "--help exits 0" "exit $rc"
n=0; for m in "params RUN_DIR" "ppl OUT.png" "val OUT.png" "damping OUT.png" "attn OUT.png MAP_DIR"; do
    grep -q "plot_rfa.sh $m" "$W/help" && n=$((n+1))
done
[ $n -eq 5 ]; check_status $? "--help shows all five modes" "$(head -c 300 "$W/help")"

# params, default layer (the deepest, 1) into RUN_DIR/plots
"$PLOT" params "$W/run" > "$W/out" 2> "$W/err"; rc=$?
check_status $rc "params RUN_DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
grep -q "incomplete last line" "$W/err"; check_status $? "params warns about the half-written last line" "$(head -c 300 "$W/err")"
for q in $QUANTS; do
    is_png "$W/run/plots/rfa_layer1_$q.png" 900 540
    check_status $? "params: rfa_layer1_$q.png is a 900x540 PNG" "$(ls "$W/run/plots" 2>&1 | tr '\n' ' ')"
done
[ "$(grep -c '^wrote ' "$W/out")" -eq 7 ]; check_status $? "params reports 7 files written" "$(cat "$W/out")"
tmps=$(find "$W/run/plots" -name '*.tmp'); [ -z "$tmps" ]; check_status $? "params leaves no .tmp files" "$tmps"

# params --layer 0 --out DIR
"$PLOT" params "$W/run" --layer 0 --out "$W/l0" > /dev/null 2> "$W/err"; rc=$?
check_status $rc "params --layer 0 --out DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
n=0; for q in $QUANTS; do is_png "$W/l0/rfa_layer0_$q.png" 900 540 && n=$((n+1)); done
[ $n -eq 7 ]; check_status $? "params --layer 0: 7 PNGs in DIR" "$n of 7: $(ls "$W/l0" 2>&1 | tr '\n' ' ')"

# ppl: a labelled ppl.json and a run folder (its eval/ppl.json)
"$PLOT" ppl "$W/ppl.png" "SC-RFA=$W/rfa-eval/ppl.json" "$W/rope" > "$W/out" 2> "$W/err"; rc=$?
check_status $rc "ppl OUT.png RESULT RUN_DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
is_png "$W/ppl.png" 900 540; check_status $? "ppl: OUT.png is a 900x540 PNG" "$(ls -l "$W/ppl.png" 2>&1)"
grep -q "wrote $W/ppl.png" "$W/out"; check_status $? "ppl reports the file" "$(cat "$W/out")"
"$PLOT" ppl "$W/ppl2.png" "$W/rfa-eval" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/ppl2.png" 900 540; check_status $? "ppl accepts a seqeval --out folder" "exit $rc: $(head -c 300 "$W/err")"

# ppl: a run folder evaluated by seqeval with its default --out (RUN/eval-test, RUN/eval-valid-sliding)
"$PLOT" ppl "$W/ppl3.png" "$W/evalrun" "$W/slidrun" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/ppl3.png" 900 540
check_status $? "ppl finds seqeval's default output folders RUN/eval-test/ and RUN/eval-*/" "exit $rc: $(head -c 300 "$W/err")"

# params --grid: one image, 900 wide, 250 pixels per row of 2 panels (7 quantities and the key: 4 rows)
"$PLOT" params "$W/run" --grid --out "$W/grid" > "$W/out" 2> "$W/err"; rc=$?
is_png "$W/grid/rfa_layer1_params.png" 900 1000
check_status $? "params --grid: rfa_layer1_params.png is a 900x1000 PNG" "exit $rc: $(head -c 300 "$W/err")"
[ "$(ls "$W/grid")" = rfa_layer1_params.png ]; check_status $? "params --grid writes that image only" "$(ls "$W/grid" | tr '\n' ' ')"

# val: a run folder (with its config: the x label gets B x T) and a labelled log.jsonl
"$PLOT" val "$W/val.png" "$W/va" "B=$W/vb/log.jsonl" > "$W/out" 2> "$W/err"; rc=$?
is_png "$W/val.png" 900 540; check_status $? "val OUT.png RUN LABEL=LOG succeeds with a 900x540 PNG" "exit $rc: $(head -c 300 "$W/err")"

# damping: run folders, lines sorted by b whatever the order given
"$PLOT" damping "$W/damp1.png" "$W/d5" "$W/d05" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/damp1.png" 900 540; check_status $? "damping OUT.png RUN RUN succeeds with a 900x540 PNG" "exit $rc: $(head -c 300 "$W/err")"
"$PLOT" damping "$W/damp2.png" "$W/d05" "$W/d5" > /dev/null 2>&1
cmp -s "$W/damp1.png" "$W/damp2.png"; check_status $? "damping sorts the runs by b (the same image for either order)" "the images differ"

# attn: the panels of one layer, 300 pixels each (+ 40 for the title)
"$PLOT" attn "$W/attn.png" "$W/maps" --layer 0 > "$W/out" 2> "$W/err"; rc=$?
is_png "$W/attn.png" 600 340; check_status $? "attn --layer 0: 2 heads side by side, a 600x340 PNG" "exit $rc: $(head -c 300 "$W/err")"
"$PLOT" attn "$W/attn1.png" "$W/maps" --layer 1 --px 16 > /dev/null 2> "$W/err"; rc=$?
is_png "$W/attn1.png" 300 340; check_status $? "attn --layer 1 --px 16: one head, a 300x340 PNG" "exit $rc: $(head -c 300 "$W/err")"
"$PLOT" attn "$W/attn2.png" "$W/maps" --layer 0 --cols 1 --run "$W/run" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/attn2.png" 300 640; check_status $? "attn --cols 1 --run RUN: the heads one under the other" "exit $rc: $(head -c 300 "$W/err")"

# bad input: a non-zero exit and a message that names the problem
expect_fail() {  # expect_fail WHAT NEEDLE ARGS...
    local what=$1 needle=$2; shift 2
    "$PLOT" "$@" > /dev/null 2> "$W/err"; local rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$needle" "$W/err"; then ok "$what"
    else not_ok "$what" "exit $rc, stderr: $(head -c 300 "$W/err")"; fi
}
expect_fail "params --layer 5 fails, listing the layers present" "layers present: 0, 1" params "$W/run" --layer 5
expect_fail "params without diag.jsonl fails" "$W/l0/diag.jsonl not found" params "$W/l0"
expect_fail "params --layer x is refused" "not a layer index" params "$W/run" --layer x
expect_fail "ppl with a missing result fails" "$W/nope.json: no such file" ppl "$W/p.png" "$W/nope.json"
expect_fail "ppl of a folder without ppl.json fails" "no ppl.json here" ppl "$W/p.png" "$W/run"
expect_fail "ppl needs OUT.png first" "should end in .png" ppl "$W/rfa-eval/ppl.json" "$W/rope"
expect_fail "ppl into a missing folder fails" "$W/none: no such folder" ppl "$W/none/p.png" "$W/rope"
echo '{"results": []}' > "$W/empty.json"
expect_fail "ppl of a JSON without results fails" "seqeval's ppl.json" ppl "$W/p.png" "$W/empty.json"
expect_fail "an unknown mode fails" "unknown mode" heads "$W/run"
expect_fail "val of a log without validation lines fails" "no validation lines" val "$W/p.png" "$W/vnone"
expect_fail "val of a task run fails" "a task run" val "$W/p.png" "$W/vtask"
expect_fail "val of a folder without log.jsonl fails" "$W/maps/log.jsonl: no such file" val "$W/p.png" "$W/maps"
expect_fail "damping of a run without an rfa mixer fails" "no rfa mixer" damping "$W/p.png" "$W/dnone"
expect_fail "damping of a run with two dampings fails, naming them" "different dampings (0.5, 5)" damping "$W/p.png" "$W/dtwo"
expect_fail "damping of a ppl.json (not a run folder) fails" "not a run folder" damping "$W/p.png" "$W/rfa-eval/ppl.json"
expect_fail "attn of maps of two layers needs --layer" "layers 0, 1: choose one with --layer" attn "$W/p.png" "$W/maps"
expect_fail "attn --layer 4 fails, listing the layers present" "layers present: 0, 1" attn "$W/p.png" "$W/maps" --layer 4
expect_fail "attn --px 8 is refused" "from 16 to 1024" attn "$W/p.png" "$W/maps" --layer 0 --px 8
expect_fail "attn --cols 0 is refused" "not a positive number" attn "$W/p.png" "$W/maps" --layer 0 --cols 0
expect_fail "attn of a gray PNG fails" "not an 8-bit RGB PNG" attn "$W/p.png" "$W/graymaps"
expect_fail "attn of a folder without maps fails" "no layer<l>_head<h>.png" attn "$W/p.png" "$W/run"
expect_fail "attn --run without diag.jsonl fails" "diag.jsonl not found" attn "$W/p.png" "$W/maps" --layer 0 --run "$W/maps"
expect_fail "params --cols is refused (attn's option)" "attn's option" params "$W/run" --cols 2
[ ! -e "$W/p.png" ]; check_status $? "failed runs write no image" "$W/p.png exists"

test_done
