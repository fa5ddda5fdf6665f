#!/usr/bin/env bash
# Every mode of scripts/plot_rfa.sh on what real tiny runs leave, not on fabricated files (that is
# tests/test_plot_rfa.sh): two SC-RFA runs of a 2-layer d32 model (8 steps, validated and logged every 2)
# that differ in the damping b, and seqeval's attention maps of one of them. Draws the paper's figures from
# them -- Fig. 6a (val), Fig. 6b (ppl), Fig. 7 (damping), Figs. 8-10 (params, one PNG per quantity and
# --grid) and Figs. 11-14 (attn) -- and checks that each PNG exists, is a PNG of the size the script asks
# gnuplot for, and is not empty, and that damping orders its lines by b.
#
# Without gnuplot this test skips with a message (tests/test_plot_rfa.sh is the one that insists on it).
#   BIN=bin bash tests/test_plot_rfa_run.sh     (run from the repository root)
set -u
BIN=${BIN:-bin}
ROOT=$(pwd)
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "test_plot_rfa_run.sh: skipped: gnuplot is not installed (apt-get install gnuplot-nox, or make deps)"
    exit 0
fi
for t in seqtrain seqeval seqtok; do
    [ -x "$BIN/$t" ] || { echo "test_plot_rfa_run.sh: $BIN/$t not found (run from the repo root after make tools, or set BIN)" >&2; exit 2; }
done
BIN=$(cd "$BIN" && pwd)
export OMP_NUM_THREADS=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
source tests/lib.sh || exit 2
test_scratch plotrun
PLOT="$ROOT/scripts/plot_rfa.sh"

source "$ROOT/tests/png_check.sh"  # is_png FILE W H

MODEL="$ROOT/data/tokenizer/wikitext2_bpe8192.model"
zstd -dc "$ROOT/data/wikitext-2/wiki.valid.tokens.zst" | head -n 600 > "$W/train.txt"
zstd -dc "$ROOT/data/wikitext-2/wiki.test.tokens.zst" | head -n 300 > "$W/val.txt"
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/train.txt" --output "$W/train.shard" >/dev/null
"$BIN/seqtok" encode --quiet --model "$MODEL" --input "$W/val.txt" --output "$W/val.shard" >/dev/null
# the RFA paper's SC-RFA config (its SDE optimizer group included) at a size that trains in a second
for b in 0.5 0.005; do
    "$BIN/seqtrain" --config "$ROOT/configs/rfa/m2_sc_rfa.json" --quiet \
        --set "run.dir=$W/runs" --set "run.name=b$b" --set run.threads=1 \
        --set "data.train=[\"$W/train.shard\"]" --set "data.val=[\"$W/val.shard\"]" \
        --set "data.test=[\"$W/val.shard\"]" \
        --set model.d_model=32 --set model.n_layers=2 --set model.mixer.heads=2 \
        --set model.mixer.zero_decay_heads=1 --set "model.mixer.damping=$b" \
        --set train.batch_size=2 --set train.seq_len=32 --set train.epochs=0 --set train.steps=8 \
        --set train.eval_every=2 --set train.eval_batches=2 --set train.log_every=2 --set train.ckpt_every=0 \
        --set eval.contexts=32,64 --set eval.max_windows=2 > "$W/train-$b.out" 2>&1
    check "a tiny SC-RFA run with b = $b trains, validates and evaluates" \
        test -s "$W/runs/b$b/diag.jsonl" -a -s "$W/runs/b$b/eval/ppl.json" -a "$(grep -c val_ppl "$W/runs/b$b/log.jsonl")" = 4
done
R="$W/runs/b0.5"
"$BIN/seqeval" --run "$R" --data "$W/val.shard" --context 64 --attention-map "$W/maps" > "$W/maps.out" 2>&1
check "seqeval --attention-map writes the last layer's 2 head maps" test -s "$W/maps/layer1_head0.png" -a -s "$W/maps/layer1_head1.png"

# plot MODE ARGS...: run the script, its stdout in $W/out, stderr in $W/err, status in RC
plot() { bash "$PLOT" "$@" > "$W/out" 2> "$W/err"; RC=$?; }
# drew WHAT FILE W H: the script succeeded, said so, and FILE is a W x H PNG
drew() {
    if [ "$RC" = 0 ] && grep -qxF "wrote $2" "$W/out" && is_png "$2" "$3" "$4"; then ok "$1"
    else not_ok "$1" "exit $RC, $(ls -l "$2" 2>&1), stderr: $(head -c 300 "$W/err")"; fi
}

plot params "$R"
for q in mu sigma_tilde2 eta2 gamma2 alpha nu_over_d tau; do
    drew "params (Figs. 8-10): rfa_layer1_$q.png" "$R/plots/rfa_layer1_$q.png" 900 540
done
plot params "$R" --grid --layer 0 --out "$W/grid"
drew "params --grid: one 900 x 1000 image of the 7 quantities and the key" "$W/grid/rfa_layer0_params.png" 900 1000
plot val "$W/val.png" "$R" "small-b=$W/runs/b0.005/log.jsonl"
drew "val (Fig. 6a) of a run folder and a labelled log.jsonl" "$W/val.png" 900 540
plot ppl "$W/ppl.png" "$R" "$W/runs/b0.005"
drew "ppl (Fig. 6b) of two run folders" "$W/ppl.png" 900 540
plot damping "$W/damping.png" "$R" "$W/runs/b0.005"
drew "damping (Fig. 7) of two run folders" "$W/damping.png" 900 540
plot attn "$W/attn.png" "$W/maps" --run "$R"
drew "attn (Figs. 11-14): 2 heads side by side, mu in the titles" "$W/attn.png" 600 340
plot attn "$W/attn1.png" "$W/maps" --cols 1 --px 32
drew "attn --cols 1 --px 32: the heads one under the other" "$W/attn1.png" 300 640

plot damping "$W/damping2.png" "$W/runs/b0.005" "$R"
check "damping draws the same image whatever the order of the runs (lines sorted by b)" cmp -s "$W/damping.png" "$W/damping2.png"
plot damping "$W/bad.png" "$W/maps"
check "damping of a folder without config.json fails, naming it" eval '[ "$RC" = 1 ] && grep -q "config.json: not found" "$W/err"'

test_done
