#!/usr/bin/env bash
# Figures for RFA runs, drawn with gnuplot (Debian package gnuplot-nox; `make deps` installs it). Each mode
# is one of the RFA paper's figures (App. F) drawn from what seqtrain and seqeval write into a run folder.
#
#   scripts/plot_rfa.sh params RUN_DIR [--layer L] [--out DIR] [--grid]
#       the per-head SDE parameters of one RFA layer against the training step, as in the paper's
#       Figs. 8-10: one PNG per quantity, one line per head, read from RUN_DIR/diag.jsonl (the trainer
#       appends {"step", "layer", "mu": [H], "sigma_tilde2", "eta2", "gamma2", "alpha", "nu_over_d",
#       "tau"} per RFA layer every log_every steps; docs/mixers.md "Diagnostics"). Default layer: the
#       deepest one present; default DIR: RUN_DIR/plots. Writes DIR/rfa_layer<L>_<quantity>.png, or with
#       --grid one image DIR/rfa_layer<L>_params.png with a panel per quantity.
#   scripts/plot_rfa.sh ppl OUT.png [LABEL=]RESULT ...
#       perplexity against context length (log2 axis), one line per run (Fig. 6b). RESULT is a ppl.json as
#       `bin/seqeval --out DIR` writes it (DIR/ppl.json), a folder holding one, or a run folder: its
#       eval/ppl.json (the trainer's final evaluation), else seqeval's default output RUN/eval-test/ppl.json,
#       else the first RUN/eval-*/ppl.json by name. LABEL defaults to the run's name (+ the eval-* suffix).
#   scripts/plot_rfa.sh val OUT.png [LABEL=]RUN ...
#       validation perplexity against the training step, one line per run (Fig. 6a). RUN is a run folder
#       or its log.jsonl: the trainer's {"step", "val_ppl"} lines, one every train.eval_every steps. LABEL
#       defaults to the run folder's name.
#   scripts/plot_rfa.sh damping OUT.png [LABEL=]RUN_DIR ...
#       perplexity against context length for SC-RFA runs that differ in the damping b (Fig. 7;
#       scripts/rfa_table2.sh's runs): each line is labelled "b = <model.mixer.damping>" from the run's
#       config.json (the rfa layers' damping, which must be one value per run) and the lines are sorted
#       by b; the results are found as for ppl.
#   scripts/plot_rfa.sh attn OUT.png MAP_DIR [--layer L] [--cols N] [--px N] [--run RUN_DIR]
#       the attention maps of one layer's heads side by side (Figs. 11-14), from the per-head PNGs
#       `bin/seqeval --run RUN_DIR --context L --attention-map MAP_DIR` writes (MAP_DIR/layer<l>_head<h>.png:
#       query rows top to bottom, key columns left to right; for RFA the unattenuated weights, as the paper
#       plots them). Default layer: the only one in MAP_DIR; --cols panels per row (default min(heads, 4)),
#       each map averaged down in blocks to at most --px x --px pixels (default 256; smaller gives a smaller
#       file) and drawn in a 300-pixel panel. --run RUN_DIR adds each head's last logged decay mu
#       (RUN_DIR/diag.jsonl) to its panel title.
#
# JSON is turned into whitespace-separated tables (and PNG maps into raw RGB) by /usr/bin/python3 (standard
# library only), then gnuplot draws them; a PNG is written beside its final name and renamed, so it is never
# half-written. Values that are null (cJSON writes NaN and Inf so) are gaps in a line. A y axis turns
# logarithmic when its values are all positive and span more than a factor of 100 (perplexity: 10).
set -euo pipefail

usage() {
    sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$0"
}

die() { echo "plot_rfa.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in
    -h|--help|help) usage; exit 0 ;;
    params|ppl|val|damping|attn) mode=$1; shift ;;
    *) echo "plot_rfa.sh: unknown mode '$1' (params, ppl, val, damping or attn)" >&2; usage >&2; exit 2 ;;
esac

# options of params and attn; the other modes take OUT.png and then their inputs
layer=""; out=""; grid=0; cols=""; run=""; px=""; args=()
if [ "$mode" = params ] || [ "$mode" = attn ]; then
    while [ $# -gt 0 ]; do
        case "$1" in
            --layer) [ $# -ge 2 ] || die "--layer needs a layer index"; layer=$2; shift 2 ;;
            --out) [ "$mode" = params ] || die "attn: --out is params' option (attn writes OUT.png)"
                   [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
            --grid) [ "$mode" = params ] || die "attn: --grid is params' option"; grid=1; shift ;;
            --cols) [ "$mode" = attn ] || die "params: --cols is attn's option"
                    [ $# -ge 2 ] || die "--cols needs a number"; cols=$2; shift 2 ;;
            --px) [ "$mode" = attn ] || die "params: --px is attn's option"
                  [ $# -ge 2 ] || die "--px needs a number of pixels"; px=$2; shift 2 ;;
            --run) [ "$mode" = attn ] || die "params: --run is attn's option (params takes RUN_DIR)"
                   [ $# -ge 2 ] || die "--run needs a run folder"; run=$2; shift 2 ;;
            -h|--help) usage; exit 0 ;;
            -*) [ "$mode" = params ] && die "unknown option '$1' for params (--layer L, --out DIR, --grid)"
                die "unknown option '$1' for attn (--layer L, --cols N, --px N, --run RUN_DIR)" ;;
            *) args+=("$1"); shift ;;
        esac
    done
    [ -z "$layer" ] || [[ "$layer" =~ ^[0-9]+$ ]] || die "--layer '$layer' is not a layer index"
    [ -z "$cols" ] || [[ "$cols" =~ ^[1-9][0-9]*$ ]] || die "--cols '$cols' is not a positive number"
    [ -z "$px" ] || { [[ "$px" =~ ^[1-9][0-9]*$ ]] && [ "$px" -ge 16 ] && [ "$px" -le 1024 ]; } ||
        die "--px '$px' is not a number of pixels from 16 to 1024"
fi
if [ "$mode" = params ]; then
    [ ${#args[@]} -eq 1 ] || die "params takes one RUN_DIR (got ${#args[@]}); see --help"
    [ -f "${args[0]}/diag.jsonl" ] || die "${args[0]}/diag.jsonl not found (is ${args[0]} a run of an RFA model?)"
    out=${out:-${args[0]}/plots}
elif [ "$mode" = attn ]; then
    [ ${#args[@]} -eq 2 ] || die "attn takes OUT.png and one MAP_DIR (got ${#args[@]} arguments); see --help"
    out=${args[0]}; args=("${args[1]}")
    [ -d "${args[0]}" ] || die "${args[0]}: no such folder (make it with bin/seqeval ... --attention-map DIR)"
    [ -z "$run" ] || [ -f "$run/diag.jsonl" ] || die "--run: $run/diag.jsonl not found (is $run a run of an RFA model?)"
else
    for a in "$@"; do
        if [ "$a" = --help ] || [ "$a" = -h ]; then usage; exit 0; fi
    done
    [ $# -ge 2 ] || die "$mode needs OUT.png and at least one input; see --help"
    out=$1; shift
    args=("$@")
fi
if [ "$mode" != params ]; then
    case "$out" in *.png) ;; *) die "$mode: OUT '$out' should end in .png (the first argument is the image)" ;; esac
fi

PY=/usr/bin/python3
[ -x "$PY" ] || die "$PY not found: apt-get install python3"
command -v gnuplot >/dev/null 2>&1 ||
    die "gnuplot not found: install it with \`apt-get install gnuplot-nox\` (or \`make deps\`, which runs scripts/install_deps.sh)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot_rfa.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# the Python half writes $tmp/*.dat (and *.rgb), $tmp/plot.gp (which draws into $tmp/) and $tmp/moves, the
# list of "drawn final" pairs; it exits non-zero with a message when the input is wrong
"$PY" "$(dirname "$0")/plot_rfa.py" "$tmp" "$mode" "$layer" "$out" "$grid" "$cols" "$run" "$px" "${args[@]}"

gnuplot "$tmp/plot.gp" 2>"$tmp/gnuplot.err" || { cat "$tmp/gnuplot.err" >&2; die "gnuplot failed"; }
# gnuplot's warnings (not errors) still go to the user
[ -s "$tmp/gnuplot.err" ] && cat "$tmp/gnuplot.err" >&2
while IFS=$'\t' read -r drawn final; do
    [ -s "$drawn" ] || die "gnuplot drew nothing into $drawn"
    dir=$(dirname "$final")
    [ -d "$dir" ] || die "$dir: no such folder"
    # copy next to the final name, then rename: the PNG appears whole or not at all
    cp "$drawn" "$final.tmp" && mv -f "$final.tmp" "$final"
    echo "wrote $final"
done < "$tmp/moves"
