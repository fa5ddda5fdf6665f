#!/usr/bin/env bash
# Figures for RFA runs, drawn with gnuplot (Debian package gnuplot-nox; `make deps` installs it).
#
#   scripts/plot_rfa.sh params RUN_DIR [--layer L] [--out DIR]
#       the per-head SDE parameters of one RFA layer against the training step, as in the paper's
#       Figs. 8-10: one PNG per quantity, one line per head, read from RUN_DIR/diag.jsonl (the trainer
#       appends {"step", "layer", "mu": [H], "sigma_tilde2", "eta2", "gamma2", "alpha", "nu_over_d",
#       "tau"} per RFA layer every log_every steps; docs/mixers.md "Diagnostics"). Default layer: the
#       deepest one present; default DIR: RUN_DIR/plots. Writes DIR/rfa_layer<L>_<quantity>.png.
#   scripts/plot_rfa.sh ppl OUT.png [LABEL=]RESULT ...
#       perplexity against context length (log2 axis), one line per run. RESULT is a ppl.json as
#       `bin/seqeval --out DIR` writes it (DIR/ppl.json), a folder holding one, or a run folder: its
#       eval/ppl.json (the trainer's final evaluation), else seqeval's default output RUN/eval-test/ppl.json,
#       else the first RUN/eval-*/ppl.json by name. LABEL defaults to the run's name (+ the eval-* suffix).
#
# JSON is turned into whitespace-separated tables by /usr/bin/python3 (standard library only), then
# gnuplot draws them; a PNG is written beside its final name and renamed, so it is never half-written.
# Values that are null (cJSON writes NaN and Inf so) are gaps in a line. A y axis turns logarithmic when
# its values are all positive and span more than a factor of 100 (perplexity: 10).
set -euo pipefail

usage() {
    sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$0"
}

die() { echo "plot_rfa.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in
    -h|--help|help) usage; exit 0 ;;
    params|ppl) mode=$1; shift ;;
    *) echo "plot_rfa.sh: unknown mode '$1' (params or ppl)" >&2; usage >&2; exit 2 ;;
esac

layer=""; out=""; args=()
if [ "$mode" = params ]; then
    while [ $# -gt 0 ]; do
        case "$1" in
            --layer) [ $# -ge 2 ] || die "--layer needs a layer index"; layer=$2; shift 2 ;;
            --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
            -h|--help) usage; exit 0 ;;
            -*) die "unknown option '$1' for params (--layer L, --out DIR)" ;;
            *) args+=("$1"); shift ;;
        esac
    done
    [ ${#args[@]} -eq 1 ] || die "params takes one RUN_DIR (got ${#args[@]}); see --help"
    [ -z "$layer" ] || [[ "$layer" =~ ^[0-9]+$ ]] || die "--layer '$layer' is not a layer index"
    [ -f "${args[0]}/diag.jsonl" ] || die "${args[0]}/diag.jsonl not found (is ${args[0]} a run of an RFA model?)"
    out=${out:-${args[0]}/plots}
else
    for a in "$@"; do
        if [ "$a" = --help ] || [ "$a" = -h ]; then usage; exit 0; fi
    done
    [ $# -ge 2 ] || die "ppl needs OUT.png and at least one RESULT; see --help"
    out=$1; shift
    case "$out" in *.png) ;; *) die "ppl: OUT '$out' should end in .png (the first argument is the image)" ;; esac
    args=("$@")
fi

PY=/usr/bin/python3
[ -x "$PY" ] || die "$PY not found: apt-get install python3"
command -v gnuplot >/dev/null 2>&1 ||
    die "gnuplot not found: install it with \`apt-get install gnuplot-nox\` (or \`make deps\`, which runs scripts/install_deps.sh)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot_rfa.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# the Python half writes $tmp/*.dat, $tmp/plot.gp (which draws into $tmp/) and $tmp/moves, the list of
# "drawn final" pairs; it exits non-zero with a message when the input is wrong
"$PY" - "$tmp" "$mode" "$layer" "$out" "${args[@]}" <<'PY'
import json, math, os, re, sys

tmp, mode, layer_arg, out = sys.argv[1:5]
args = sys.argv[5:]

def die(msg):
    sys.stderr.write("plot_rfa.sh: " + msg + "\n")
    sys.exit(1)

def gq(s):  # a gnuplot single-quoted string: only ' needs escaping, by doubling
    return "'" + str(s).replace("'", "''") + "'"

def num(v):
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)): return None
    return float(v) if math.isfinite(v) else None

def fmt(v):  # gnuplot breaks a line at NaN (a "missing" value would be bridged instead)
    return "NaN" if v is None else repr(v)

# tab10: distinct hues; past 10 heads the dash pattern changes too
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf"]

def style(i):
    return "lc rgb %s dt %d lw 2" % (gq(COLORS[i % 10]), 1 + i // 10)

HEAD = [
    "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {",
    "    set terminal pngcairo size 900,540 font 'sans,10' noenhanced",
    "} else {",
    "    set terminal png size 900,540 noenhanced",
    "}",
]
LOOK = ["set grid xtics ytics lt 1 lw 1 lc rgb '#e5e5e5'", "set border lc rgb '#444444'"]  # again after each reset

def y_log(values, factor):
    v = [x for x in values if x is not None]
    return bool(v) and min(v) > 0 and max(v) / min(v) > factor

gp, moves = list(HEAD), []

if mode == "params":
    run = args[0]
    path = os.path.join(run, "diag.jsonl")
    rows = []
    with open(path) as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip(): lines.pop()
    for i, line in enumerate(lines):
        if not line.strip(): continue
        try:
            d = json.loads(line)
        except ValueError as e:
            if i == len(lines) - 1:  # a run still writing: its last line may be cut short
                sys.stderr.write("plot_rfa.sh: %s:%d: skipping an incomplete last line\n" % (path, i + 1))
                continue
            die("%s:%d: not JSON: %s" % (path, i + 1, e))
        if not isinstance(d, dict) or not isinstance(d.get("step"), int) or not isinstance(d.get("layer"), int):
            die("%s:%d: need an object with integer \"step\" and \"layer\"" % (path, i + 1))
        rows.append(d)
    if not rows: die(path + ": no diagnostics yet (the trainer writes a line per RFA layer every log_every steps)")
    layers = sorted({d["layer"] for d in rows})
    layer = int(layer_arg) if layer_arg else layers[-1]
    if layer not in layers:
        die("--layer %d: not in %s (layers present: %s)" % (layer, path, ", ".join(map(str, layers))))
    by_step = {}
    for d in rows:  # a resumed run may log a step twice: the later line wins
        if d["layer"] == layer: by_step[d["step"]] = d
    steps = sorted(by_step)
    QUANT = [  # key, title (the paper's Figs. 8-10), y label
        ("eta2", "Key measurement noise variance (eta^2)", "eta^2"),
        ("gamma2", "Query measurement noise variance (gamma^2)", "gamma^2"),
        ("sigma_tilde2", "Steady-state process variance (sigma~^2)", "sigma~^2"),
        ("mu", "decay mu", "mu"),
        ("alpha", "alpha = eta^2 - sigma~^2 (regime)", "alpha"),
        ("nu_over_d", "robustness nu/d", "nu/d"),
        ("tau", "inverse temperature tau", "tau"),
    ]
    os.makedirs(out, exist_ok=True)
    drawn = 0
    for key, title, ylabel in QUANT:
        series = [by_step[s].get(key) for s in steps]
        present = [v for v in series if isinstance(v, list)]
        if not present:
            sys.stderr.write("plot_rfa.sh: %s: no \"%s\" for layer %d, not drawn\n" % (path, key, layer))
            continue
        H = len(present[0])
        if any(len(v) != H for v in present):
            die("%s: \"%s\" of layer %d changes length between steps" % (path, key, layer))
        dat = os.path.join(tmp, key + ".dat")
        allv = []
        with open(dat, "w") as f:
            f.write("# step " + " ".join("head%d" % h for h in range(H)) + "\n")
            for s, v in zip(steps, series):
                vals = [num(x) for x in v] if isinstance(v, list) else [None] * H
                allv += vals
                f.write("%d %s\n" % (s, " ".join(fmt(x) for x in vals)))
        name = "rfa_layer%d_%s.png" % (layer, key)
        drawn_at = os.path.join(tmp, name)
        gp += ["reset"] + LOOK + ["set output " + gq(drawn_at),
               "set title " + gq("%s, layer %d" % (title, layer)),
               "set xlabel 'step'", "set ylabel " + gq(ylabel),
               "set key outside right top",
               "set logscale y" if y_log(allv, 100) else "unset logscale y"]
        if key == "alpha":  # the sign of alpha is the regime (> 0 integrative, < 0 diffusive): show 0
            gp += ["set yrange [*<0:0<*]", "unset logscale y",
                   "set arrow from graph 0, first 0 to graph 1, first 0 nohead dt 2 lc rgb '#444444'"]
        w = "linespoints pt 7 ps 0.6" if len(steps) <= 30 else "lines"
        gp.append("plot " + ", \\\n     ".join(
            "%s using 1:%d with %s %s title 'head %d'" % (gq(dat), h + 2, w, style(h), h) for h in range(H)))
        gp.append("unset output")
        moves.append((drawn_at, os.path.join(out, name)))
        drawn += 1
    if not drawn: die("%s: layer %d has none of the quantities to plot" % (path, layer))
else:
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        die("%s: no such folder" % os.path.dirname(os.path.abspath(out)))
    runs = []
    for spec in args:
        label, where = None, spec
        if "=" in spec and not os.path.exists(spec):
            label, where = spec.split("=", 1)
        if os.path.isdir(where):
            # the folder itself (seqeval --out DIR), the trainer's eval/, then seqeval's default output
            # folders RUN/eval-<data>[-sliding]: eval-test first, then the others by name
            tries = [os.path.join(where, "ppl.json"), os.path.join(where, "eval", "ppl.json"),
                     os.path.join(where, "eval-test", "ppl.json")]
            tries += sorted(os.path.join(where, n, "ppl.json") for n in os.listdir(where)
                            if n.startswith("eval-") and n != "eval-test")
            found = [t for t in tries if os.path.isfile(t)]
            if not found: die("%s: no ppl.json here nor in eval/ or eval-*/ (tried %s)" % (where, ", ".join(tries)))
            path = found[0]
        elif os.path.isfile(where):
            path = where
        else:
            die("%s: no such file or folder" % where)
        if not label:
            parent = os.path.dirname(os.path.abspath(path))
            pname, gname = os.path.basename(parent), os.path.basename(os.path.dirname(parent))
            if os.path.basename(path) != "ppl.json": label = re.sub(r"\.json$", "", os.path.basename(path))
            elif pname == "eval": label = gname
            elif pname.startswith("eval-"): label = gname + " " + pname[5:]
            else: label = pname
        try:
            with open(path) as f:
                d = json.load(f)
        except ValueError as e:
            die("%s: not JSON: %s" % (path, e))
        res = d.get("results") if isinstance(d, dict) else None
        if not isinstance(res, list) or not res:
            die("%s: need {\"data\": ..., \"results\": [{\"context\": L, \"ppl\": P}, ...]} (seqeval's ppl.json)" % path)
        pts = []
        for r in res:
            if not isinstance(r, dict) or not isinstance(r.get("context"), int) or "ppl" not in r:
                die("%s: every result needs an integer \"context\" and a \"ppl\"" % path)
            pts.append((r["context"], num(r["ppl"])))
        runs.append((label, sorted(pts), str(d.get("data", ""))))
    # "test perplexity by context (trained at 128)", maybe after "RUN: ": the split and the training length
    splits = {m.group(1) if m else None for m in (re.search(r"(?:^|: )(\S+) perplexity by context", w) for _, _, w in runs)}
    trained = {m.group(1) if m else None for m in (re.search(r"trained at (\d+)", w) for _, _, w in runs)}
    split = splits.pop() if len(splits) == 1 else None
    split = split if split in ("test", "valid", "val") else None  # seqeval --data FILE names a path there
    title = (split[:1].upper() + split[1:] + " perplexity" if split else "Perplexity") + " by context length"
    ctxs = sorted({c for _, pts, _ in runs for c, _ in pts})
    allv = []
    for i, (label, pts, _) in enumerate(runs):
        with open(os.path.join(tmp, "ppl%d.dat" % i), "w") as f:
            f.write("# context ppl\n")
            for c, p in pts:
                allv.append(p)
                f.write("%d %s\n" % (c, fmt(p)))
    drawn_at = os.path.join(tmp, "ppl.png")
    gp += LOOK + ["set output " + gq(drawn_at), "set title " + gq(title),
           "set xlabel 'context length (tokens)'", "set ylabel 'perplexity'",
           "set logscale x 2", "set logscale y" if y_log(allv, 10) else "unset logscale y",
           "set xtics (" + ", ".join("'%d' %d" % (c, c) for c in ctxs) + ")",
           "set xrange [%g:%g]" % (ctxs[0] / 1.25, ctxs[-1] * 1.25),
           "set key top left"]
    if len(trained) == 1 and None not in trained:
        n = int(next(iter(trained)))  # every run trained at the same length: mark where extrapolation starts
        gp += ["set arrow from %d, graph 0 to %d, graph 1 nohead dt 2 lc rgb '#888888'" % (n, n),
               "set label %s at %d, graph 0.04 left offset 0.5, 0 tc rgb '#666666'" % (gq("trained at %d" % n), n)]
    gp.append("plot " + ", \\\n     ".join(
        "%s using 1:2 with linespoints pt 7 ps 0.8 %s title %s" % (gq(os.path.join(tmp, "ppl%d.dat" % i)), style(i), gq(label))
        for i, (label, _, _) in enumerate(runs)))
    gp.append("unset output")
    moves.append((drawn_at, out))

with open(os.path.join(tmp, "plot.gp"), "w") as f:
    f.write("\n".join(gp) + "\n")
with open(os.path.join(tmp, "moves"), "w") as f:
    for a, b in moves: f.write(a + "\t" + b + "\n")
PY

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
