#!/usr/bin/env bash
# scripts/plot_rfa.sh on fabricated inputs: a diag.jsonl of 2 RFA layers x 3 steps x 4 heads (with a
# null value and a half-written last line, as a run still training leaves it) and seqeval-format ppl.json
# files, one given as a file, one inside a run folder's eval/ and two in seqeval's default output folders
# (RUN/eval-test/, RUN/eval-valid-sliding/). Checks that every PNG is written, starts with the PNG
# signature and has the size the script asks gnuplot for, and that bad input fails with a message that
# says what is wrong.
#
# gnuplot is a dependency like the compilers: when it is missing this test installs it the way the
# Makefile does (scripts/install_deps.sh) and fails, saying so, if that is not possible. It never skips.
# KEEP=1 keeps its temp folder, to look at the figures.
set -u
cd "$(dirname "$0")/.." || exit 2
pass=0; fail=0
ok()     { echo "ok - $1"; pass=$((pass+1)); }
not_ok() { echo "not ok - $1 ($2)"; fail=$((fail+1)); }
check()  { if [ "$1" -eq 0 ]; then ok "$2"; else not_ok "$2" "$3"; fi; }

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "test_plot_rfa.sh: gnuplot missing; installing it with scripts/install_deps.sh (as \`make deps\` does)"
    bash scripts/install_deps.sh
fi
if command -v gnuplot >/dev/null 2>&1; then ok "gnuplot is installed"; else
    not_ok "gnuplot is installed" "scripts/install_deps.sh could not install gnuplot-nox; run: apt-get install gnuplot-nox"
    echo "$pass passed, $fail failed" >&2
    exit 1
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/seqtrain-plot.XXXXXX") || exit 2
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PLOT=scripts/plot_rfa.sh
QUANTS="mu sigma_tilde2 eta2 gamma2 alpha nu_over_d tau"

# is_png FILE W H: the signature, an IHDR first, and that width and height
is_png() {
    [ -s "$1" ] || return 1
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
    [ "$(head -c 16 "$1" | tail -c 4)" = IHDR ] || return 1
    local wh; wh=$(head -c 24 "$1" | tail -c 8 | od -An -tu1 | tr -s ' ' | sed 's/^ //')
    [ "$wh" = "$(printf '0 0 %d %d 0 0 %d %d' $(($2 >> 8)) $(($2 & 255)) $(($3 >> 8)) $(($3 & 255)))" ]
}

mkdir -p "$W/run"
/usr/bin/python3 - "$W" <<'PY'
import json, math, os, sys
w = sys.argv[1]
with open(os.path.join(w, "run", "diag.jsonl"), "w") as f:
    for step in (0, 100, 200):
        for layer in (0, 1):
            H = 4
            eta2 = [1.0 + 0.1 * h + 0.001 * step for h in range(H)]
            s2 = [0.1 * (h + 1) * (1 + step / 400) for h in range(H)]
            d = {"step": step, "layer": layer,
                 "mu": [0.0 if h < 2 else 0.01 * h for h in range(H)], "sigma_tilde2": s2,
                 "eta2": eta2, "gamma2": [1.0 - 0.05 * h for h in range(H)],
                 "alpha": [e - s for e, s in zip(eta2, s2)],
                 "nu_over_d": [4.0 + 0.5 * h for h in range(H)], "tau": [1.0 + 0.2 * h for h in range(H)]}
            if step == 100 and layer == 1: d["tau"][2] = None  # cJSON writes a NaN so: a gap in the line
            f.write(json.dumps(d) + "\n")
    f.write('{"step": 300, "layer": 0, "mu": [0.0, 0.0')  # still being written
def ppl(path, data, pts):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    res = [{"context": c, "windows": 64, "tokens": 64 * c, "loss": math.log(p), "ppl": p} for c, p in pts]
    with open(path, "w") as f: json.dump({"data": data, "results": res}, f)
ppl(os.path.join(w, "rfa-eval", "ppl.json"), "runs/m1: test perplexity by context (trained at 128)",
    [(128, 44.3), (256, 43.1), (512, 42.8), (1024, 42.9)])
ppl(os.path.join(w, "rope", "eval", "ppl.json"), "test perplexity by context (trained at 128)",
    [(128, 44.0), (256, 45.9), (512, 120.5), (1024, 610.0)])
# run folders that hold only what `bin/seqeval --run RUN` writes by default: RUN/eval-<data>[-sliding]/
ppl(os.path.join(w, "evalrun", "eval-test", "ppl.json"), "evalrun: test perplexity by context (trained at 128)",
    [(128, 45.0), (256, 44.1), (512, 44.0)])
ppl(os.path.join(w, "slidrun", "eval-valid-sliding", "ppl.json"), "slidrun: valid perplexity by context",
    [(128, 46.0), (256, 45.1)])
PY

# --help
"$PLOT" --help > "$W/help" 2>&1; rc=$?
check $rc "--help exits 0" "exit $rc"
grep -q "plot_rfa.sh params RUN_DIR" "$W/help" && grep -q "plot_rfa.sh ppl OUT.png" "$W/help"
check $? "--help shows both modes" "$(head -c 300 "$W/help")"

# params, default layer (the deepest, 1) into RUN_DIR/plots
"$PLOT" params "$W/run" > "$W/out" 2> "$W/err"; rc=$?
check $rc "params RUN_DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
grep -q "incomplete last line" "$W/err"; check $? "params warns about the half-written last line" "$(head -c 300 "$W/err")"
for q in $QUANTS; do
    is_png "$W/run/plots/rfa_layer1_$q.png" 900 540
    check $? "params: rfa_layer1_$q.png is a 900x540 PNG" "$(ls "$W/run/plots" 2>&1 | tr '\n' ' ')"
done
[ "$(grep -c '^wrote ' "$W/out")" -eq 7 ]; check $? "params reports 7 files written" "$(cat "$W/out")"
tmps=$(find "$W/run/plots" -name '*.tmp'); [ -z "$tmps" ]; check $? "params leaves no .tmp files" "$tmps"

# params --layer 0 --out DIR
"$PLOT" params "$W/run" --layer 0 --out "$W/l0" > /dev/null 2> "$W/err"; rc=$?
check $rc "params --layer 0 --out DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
n=0; for q in $QUANTS; do is_png "$W/l0/rfa_layer0_$q.png" 900 540 && n=$((n+1)); done
[ $n -eq 7 ]; check $? "params --layer 0: 7 PNGs in DIR" "$n of 7: $(ls "$W/l0" 2>&1 | tr '\n' ' ')"

# ppl: a labelled ppl.json and a run folder (its eval/ppl.json)
"$PLOT" ppl "$W/ppl.png" "SC-RFA=$W/rfa-eval/ppl.json" "$W/rope" > "$W/out" 2> "$W/err"; rc=$?
check $rc "ppl OUT.png RESULT RUN_DIR succeeds" "exit $rc: $(head -c 400 "$W/err")"
is_png "$W/ppl.png" 900 540; check $? "ppl: OUT.png is a 900x540 PNG" "$(ls -l "$W/ppl.png" 2>&1)"
grep -q "wrote $W/ppl.png" "$W/out"; check $? "ppl reports the file" "$(cat "$W/out")"
"$PLOT" ppl "$W/ppl2.png" "$W/rfa-eval" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/ppl2.png" 900 540; check $? "ppl accepts a seqeval --out folder" "exit $rc: $(head -c 300 "$W/err")"

# ppl: a run folder evaluated by seqeval with its default --out (RUN/eval-test, RUN/eval-valid-sliding)
"$PLOT" ppl "$W/ppl3.png" "$W/evalrun" "$W/slidrun" > /dev/null 2> "$W/err"; rc=$?
is_png "$W/ppl3.png" 900 540
check $? "ppl finds seqeval's default output folders RUN/eval-test/ and RUN/eval-*/" "exit $rc: $(head -c 300 "$W/err")"

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
[ ! -e "$W/p.png" ]; check $? "failed runs write no image" "$W/p.png exists"

echo "$pass passed, $fail failed" >&2
[ "$fail" -eq 0 ]
