#!/usr/bin/env bash
# The KLA paper's figures that need trained models, drawn with gnuplot from runs trained here:
#   Fig. 3b    OU against ZOH discretisation of the process noise, by depth (stacked fused KLA blocks), on
#              Selective Copy: test accuracy by depth, and the test loss over training of every run
#   Fig. 5b    the posterior variance along one Selective Copy example (a KLA layer's readout variance
#              sum_s q^2 / lambda, per channel and averaged), with the tokens to copy marked
#   Figs. 11-13 (App. E.5) Kalman attention maps of four channels on Selective Copy, In-Context Recall and
#              Memorization: each channel's matrix P with y_mean = P v (seqeval --attention-map on a kla layer)
# (Fig. 1a, the fewest layers that solve A5 by sequence length, is a table of scripts/state_tracking.sh: its
# A5_LENS sweep; Fig. 5a and Fig. 6a are scripts/mad_table.sh and SETTING=kla_long scripts/mqar_sweep.sh.)
#
#   scripts/kla_figures.sh [--set KEY=VALUE ...] [--dry-run]
#
# Every run is a KLA model of fused blocks (mixer {"kind": "kla", "d_state": 8}: Table 11's MAD state) trained by
# the KLA paper's MAD protocol, configs/tasks/mad/kla_protocol/<task>.json (Table 10: AdamW lr 1e-3 constant, wd 0,
# clip 5, batch 172), with the scale's overrides; the ZOH runs differ only in model.mixer.discretization.
#
# Settings (environment):
#   SCALE=tiny|small|paper   (default small)
#       tiny:  d 16, T 32 (Selective Copy with 4 tokens to copy), 4 steps of 8 examples (pipeline check: the
#              figures mean nothing)
#       small: d 64, batch 64, 1,280 training examples (memorization its 256), 256 test examples, 20 epochs,
#              Selective Copy and ICR at T 128 (16 tokens to copy), memorization at T 32; an evaluation
#              every epoch (the curves), no early stop
#       paper: the configs as they are (d 128, T 256 for Selective Copy, up to 750 epochs with patience 70)
#   DEPTHS="1 2 4"   the depths of Fig. 3b (default 1 2 4; tiny 1 2). The paper does not list its depths.
#   CHANNELS="0 16 32 48"   the channels drawn in the attention maps (default four evenly spaced; the paper
#                    draws four random ones)
#   SEQ_OUT=DIR      output folder (default runs/tasks/kla_figures/$SCALE): runs/, logs/, the figures
#                    fig3b.png, fig5b.png, attn_<task>.png and their data (fig3b.tsv, fig3b_curves.tsv,
#                    fig5b.tsv, maps/)
#   JOBS=N, THREADS=N, BIN=DIR, PROGRESS_EVERY=S   as scripts/mqar_sweep.sh
# Resumable: finished runs (RUN_DIR/eval/acc.json) are reused; the figures are drawn again each time.
# Needs gnuplot (Debian package gnuplot-nox, installed by scripts/install_deps.sh) and python3.
set -u -o pipefail
USAGE=$(sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//')

source "$(dirname "${BASH_SOURCE[0]}")/lib/runq.sh"
parse_opts "$@"
setup runs/tasks/kla_figures
[ "$DRY_RUN" = 1 ] || command -v gnuplot > /dev/null 2>&1 ||
    die "gnuplot not found: apt-get install gnuplot-nox (or scripts/install_deps.sh)"
case "$SCALE" in tiny) depths="1 2" ;; *) depths="1 2 4" ;; esac
DEPTHS=${DEPTHS:-$depths}
for d in $DEPTHS; do case "$d" in ''|*[!0-9]*|0) DIE_RC=2 die "DEPTHS must be positive integers (got '$DEPTHS')" ;; esac; done

KLA='{"kind": "kla", "d_state": 8'
# the scale's overrides of a task's config
scale_sets() {
    case "$SCALE" in
        tiny)
            printf '%s\n' model.d_model=16 train.batch_size=8 train.steps=4 train.eval_every=2 train.patience=0 \
                train.ckpt_every=0 data.task.train_examples=32 data.task.test_examples=8 train.seq_len=32
            [ "$1" = selective_copy ] && echo data.task.n_copy=4 ;;
        small)
            printf '%s\n' model.d_model=64 train.batch_size=64 train.epochs=20 train.patience=0 data.task.test_examples=256
            if [ "$1" = memorization ]; then echo train.eval_every=4
            else printf '%s\n' data.task.train_examples=1280 train.seq_len=128 train.eval_every=20; fi ;;
    esac
}
queue() {  # queue ID TASK DISCRETIZATION DEPTH
    local args=(--config "configs/tasks/mad/kla_protocol/$2.json" --set "model.mixer=$KLA, \"discretization\": \"$3\"}"
                --set "model.n_layers=$4") s
    while IFS= read -r s; do [ -n "$s" ] && args+=(--set "$s"); done < <(scale_sets "$2")
    for s in "${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}"; do args+=(--set "$s"); done
    job "$1" "${args[@]}"
}
for disc in ou zoh; do for d in $DEPTHS; do queue "selective_copy_${disc}_L$d" selective_copy "$disc" "$d"; done; done
queue selective_copy_ou_L1 selective_copy ou 1
queue icr_ou_L1 icr ou 1
queue memorization_ou_L1 memorization ou 1
say "SCALE=$SCALE: ${#JOB_IDS[@]} runs (Fig. 3b depths: $DEPTHS), $NJOBS at a time, $THREADS threads each; output in $OUTD"
run_jobs; rc=$?
exit_if_interrupted

GP="$OUTD/gp"; mkdir -p "$GP" "$OUTD/maps"
commit=$(commit_of)
# gnuplot without its note on the maps' hidden (NaN) half; the exit status is gnuplot's
plot_() { gnuplot "$1" 2> >(grep -v 'matrix contains missing or undefined values' >&2); }
# the pngcairo terminal where gnuplot has it, else libgd's png
term() { printf 'if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) { set terminal pngcairo size %s font "sans,9" noenhanced } else { set terminal png size %s noenhanced }\n' "$1" "$1"; }

# --- Fig. 3b: accuracy by depth, OU and ZOH; the test loss curves
python3 - "$RUNS" "$OUTD" $DEPTHS <<'PY' || rc=1
import json, os, sys
runs, out, depths = sys.argv[1], sys.argv[2], [int(d) for d in sys.argv[3:]]
def acc(run):
    try: return "%.6f" % json.load(open(os.path.join(runs, run, "eval", "acc.json")))["accuracy"]
    except (OSError, ValueError, KeyError): return "nan"
with open(os.path.join(out, "fig3b.tsv"), "w") as f:
    f.write("depth\tou\tzoh\n")
    for d in depths:
        f.write("%d\t%s\t%s\n" % (d, acc("selective_copy_ou_L%d" % d), acc("selective_copy_zoh_L%d" % d)))
# one block per run (gnuplot index), in DEPTHS order, OU then ZOH
with open(os.path.join(out, "fig3b_curves.tsv"), "w") as f:
    for disc in ("ou", "zoh"):
        for d in depths:
            f.write("# %s L%d\n" % (disc, d))
            try:
                for line in open(os.path.join(runs, "selective_copy_%s_L%d" % (disc, d), "log.jsonl")):
                    r = json.loads(line)
                    if "val_loss" in r and r["val_loss"] is not None:
                        f.write("%d\t%.6g\n" % (r["step"], r["val_loss"]))
            except OSError:
                f.write("0\tnan\n")
            f.write("\n\n")
PY
{
    term 1000,420
    echo "set output '$OUTD/fig3b.png'"
    echo "set multiplot layout 1,2 title 'KLA Fig. 3b: OU vs ZOH discretisation on Selective Copy (SCALE=$SCALE, commit $commit)'"
    echo "set xlabel 'fused KLA blocks'; set ylabel 'test accuracy'; set key bottom left; set grid"
    echo "set xtics ($(for d in $DEPTHS; do printf '"%s" %s,' "$d" "$d"; done | sed 's/,$//')); set logscale x 2"
    echo "plot '$OUTD/fig3b.tsv' using 1:2 with linespoints lw 2 pt 7 title 'OU', '' using 1:3 with linespoints lw 2 pt 5 dt 2 title 'ZOH'"
    echo "unset logscale x; set xtics auto; set xlabel 'step'; set ylabel 'test loss'; set key top right"
    printf "plot "
    i=0; sep=""
    for disc in ou zoh; do for d in $DEPTHS; do
        dt=1; [ "$disc" = zoh ] && dt=2
        printf "%s'%s' index %d using 1:2 with lines lw 1.5 dt %d title '%s L%s'" "$sep" "$OUTD/fig3b_curves.tsv" "$i" "$dt" "${disc^^}" "$d"
        sep=", "; i=$((i + 1))
    done; done
    echo
    echo "unset multiplot"
} > "$GP/fig3b.gp"
plot_ "$GP/fig3b.gp" || rc=1

# --- Fig. 5b: the posterior variance along the first Selective Copy test example (the one-block OU run)
if [ -f "$RUNS/selective_copy_ou_L1/eval/acc.json" ]; then
    "$SEQEVAL" --run "$RUNS/selective_copy_ou_L1" --task --posterior-var "$OUTD/fig5b.tsv" > /dev/null || rc=1
fi
if [ -f "$OUTD/fig5b.tsv" ]; then
    # the copy token is the input before the first supervised position; the tokens to copy are the inputs
    # before it that are not the blank (the most frequent input); four channels of the layer besides the mean
    read -r copy_at ncols < <(python3 - "$OUTD/fig5b.tsv" "$OUTD/fig5b_marks.tsv" <<'PY'
import collections, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
head, body = rows[0], rows[1:]
tg = [int(r[2]) for r in body]; inp = [int(r[1]) for r in body]
first = next((i for i, t in enumerate(tg) if t != -100), len(tg))
copy_at = max(first - 1, 0)
blank = collections.Counter(inp[:copy_at]).most_common(1)[0][0] if copy_at else -1
with open(sys.argv[2], "w") as f:
    for i in range(copy_at):
        if inp[i] != blank: f.write("%d\n" % i)
print(copy_at, len(head))
PY
)
    nch=$((ncols - 4))
    {
        term 1000,380
        echo "set output '$OUTD/fig5b.png'"
        echo "set title 'KLA Fig. 5b: posterior variance along a Selective Copy example (1 fused block, SCALE=$SCALE, commit $commit)'"
        echo "set xlabel 'position'; set ylabel 'readout variance sum_s q^2/lambda'; set key outside right; set grid"
        echo "set arrow from $copy_at, graph 0 to $copy_at, graph 1 nohead dt 2 lw 1.5 lc rgb '#444444'"
        echo "set label 'copy token' at $copy_at, graph 0.95 offset 0.5,0"
        # the tokens to copy as grey bands behind the lines (objects, added below), with a key entry
        printf "plot 1/0 with boxes fs solid fc rgb '#dddddd' title 'token to copy'"
        for k in 0 1 2 3; do
            c=$((k * nch / 4)); printf ", '%s' using 1:%d with lines lw 1 title 'ch%d'" "$OUTD/fig5b.tsv" $((c + 5)) "$c"
        done
        printf ", '%s' using 1:4 with lines lw 2.5 lc rgb 'black' title 'mean'\n" "$OUTD/fig5b.tsv"
    } > "$GP/fig5b.gp"
    python3 - "$GP/fig5b.gp" "$OUTD/fig5b_marks.tsv" <<'PY'
import sys
gp, marks = sys.argv[1], sys.argv[2]
lines = open(gp).read().split("\n")
obj = ["set object rect from %s-0.5, graph 0 to %s+0.5, graph 1 fc rgb '#dddddd' fs solid 1.0 noborder behind" % (m.strip(), m.strip())
       for m in open(marks) if m.strip()]
i = next(k for k, l in enumerate(lines) if l.startswith("plot "))
open(gp, "w").write("\n".join(lines[:i] + obj + lines[i:]))
PY
    plot_ "$GP/fig5b.gp" || rc=1
fi

# --- Figs. 11-13: Kalman attention maps of four channels per task
for task in selective_copy icr memorization; do
    run="$RUNS/${task}_ou_L1"
    [ -f "$run/eval/acc.json" ] || continue
    M=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["model"]; print(round(c["d_model"] * c["mixer"].get("expand", 1)))' "$run/config.json")
    chans=${CHANNELS:-"0 $((M / 4)) $((M / 2)) $((3 * M / 4))"}
    "$SEQEVAL" --run "$run" --task --attention-map "$OUTD/maps/$task" --heads "${chans// /,}" --matrix > /dev/null || { rc=1; continue; }
    # the colour range: the 99.5th percentile of |P| over the four maps, symmetric about 0
    range=$(python3 - "$OUTD/maps/$task" $chans <<'PY'
import math, os, sys
vals = []
for c in sys.argv[2:]:
    for line in open(os.path.join(sys.argv[1], "layer0_head%s.tsv" % c)):
        vals += [abs(float(x)) for x in line.split() if x != "nan"]
vals.sort()
q = vals[min(len(vals) - 1, int(0.995 * (len(vals) - 1)))] if vals else 1.0
print("%.6g" % (q if q > 0 else 1.0))
PY
)
    T=$(head -n 1 "$OUTD/maps/$task/layer0_head${chans%% *}.tsv" | wc -w)
    {
        term 1100,320
        echo "set output '$OUTD/attn_$task.png'"
        echo "set multiplot layout 1,4 title 'Kalman attention maps, $task, 1 fused KLA block (SCALE=$SCALE, commit $commit): rows = output position, columns = input position'"
        echo "set palette defined (-1 '#2166ac', 0 '#f7f7f7', 1 '#b2182b'); set cbrange [-$range:$range]"
        echo "set xrange [-0.5:$T-0.5]; set yrange [$T-0.5:-0.5]; set size ratio 1; unset key; set tics out"
        for c in $chans; do
            echo "set title 'channel $c'; plot '$OUTD/maps/$task/layer0_head$c.tsv' matrix with image"
        done
        echo "unset multiplot"
    } > "$GP/attn_$task.gp"
    plot_ "$GP/attn_$task.gp" || rc=1
done

say "figures in $OUTD: $(cd "$OUTD" && ls -- *.png 2>/dev/null | tr '\n' ' ')"
[ "$rc" = 0 ] || { say "some runs or figures failed (logs in $LOGS)"; exit 1; }
exit 0
