#!/usr/bin/python3
"""The Python half of scripts/plot_rfa.sh (run by it, not on its own): reads what seqtrain and seqeval wrote
into run folders, writes the tables gnuplot draws and the gnuplot program.

    plot_rfa.py TMP MODE LAYER OUT GRID COLS RUN PX ARG...

MODE is plot_rfa.sh's (params, ppl, val, damping or attn), LAYER, GRID ("1" or "0"), COLS, RUN and PX its
options as given ("" when not), OUT the image (params: the folder), ARG... the inputs. It writes TMP/*.dat
(and *.rgb), TMP/plot.gp (which draws into TMP/) and TMP/moves, the "drawn final" pairs plot_rfa.sh then
renames into place; it exits non-zero with a message when the input is wrong. Standard library only.
"""
import json, math, os, re, struct, sys, zlib

tmp, mode, layer_arg, out, grid, cols_arg, run_arg, px_arg = sys.argv[1:9]
args = sys.argv[9:]

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

# tab10: distinct hues; past 10 lines the dash pattern changes too
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf"]

def style(i):
    return "lc rgb %s dt %d lw 2" % (gq(COLORS[i % 10]), 1 + i // 10)

def head(w=900, h=540, indexed=False):
    """The terminal: cairo's antialiased truecolour PNG, or (indexed) libgd's palette PNG first, for figures
    of many panels and lines, which cairo's antialiasing makes 5x larger (a 7-panel grid: ~160 KB, not ~33 KB)."""
    first, second = ("png", "pngcairo") if indexed else ("pngcairo", "png")
    term = {"pngcairo": "pngcairo size %d,%d font 'sans,10' noenhanced" % (w, h),
            "png": "png size %d,%d font 'sans,%d' noenhanced" % (w, h, 9 if indexed else 10)}
    return ["if (strstrt(' ' . GPVAL_TERMINALS . ' ', ' %s ') > 0) {" % first,
            "    set terminal " + term[first],
            "} else {",
            "    set terminal " + term[second],
            "}"]

LOOK = ["set grid xtics ytics lt 1 lw 1 lc rgb '#e5e5e5'", "set border lc rgb '#444444'"]  # again after each reset

def y_log(values, factor):
    v = [x for x in values if x is not None]
    return bool(v) and min(v) > 0 and max(v) / min(v) > factor

def split_label(spec):  # "LABEL=PATH" unless PATH itself exists
    if "=" in spec and not os.path.exists(spec):
        return spec.split("=", 1)
    return None, spec

def read_jsonl(path, what):
    """The JSON objects of a .jsonl file; a half-written last line (a run still writing) is skipped."""
    with open(path) as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip(): lines.pop()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip(): continue
        try:
            d = json.loads(line)
        except ValueError as e:
            if i == len(lines) - 1:
                sys.stderr.write("plot_rfa.sh: %s:%d: skipping an incomplete last line\n" % (path, i + 1))
                continue
            die("%s:%d: not JSON: %s" % (path, i + 1, e))
        if not isinstance(d, dict) or not isinstance(d.get("step"), int):
            die("%s:%d: need an object with an integer \"step\" (%s)" % (path, i + 1, what))
        rows.append(d)
    return rows

def diag_rows(run):
    """RUN/diag.jsonl's lines (each needs an integer "layer" too) and the layers present."""
    path = os.path.join(run, "diag.jsonl")
    rows = read_jsonl(path, "a diag.jsonl line")
    for d in rows:
        if not isinstance(d.get("layer"), int): die("%s: a line without an integer \"layer\"" % path)
    if not rows: die(path + ": no diagnostics yet (the trainer writes a line per RFA layer every log_every steps)")
    return path, rows, sorted({d["layer"] for d in rows})

def find_ppl(where):
    """The ppl.json of a RESULT argument: the file, or the one a folder holds (see --help)."""
    if os.path.isdir(where):
        # the folder itself (seqeval --out DIR), the trainer's eval/, then seqeval's default output
        # folders RUN/eval-<data>[-sliding]: eval-test first, then the others by name
        tries = [os.path.join(where, "ppl.json"), os.path.join(where, "eval", "ppl.json"),
                 os.path.join(where, "eval-test", "ppl.json")]
        tries += sorted(os.path.join(where, n, "ppl.json") for n in os.listdir(where)
                        if n.startswith("eval-") and n != "eval-test")
        found = [t for t in tries if os.path.isfile(t)]
        if not found: die("%s: no ppl.json here nor in eval/ or eval-*/ (tried %s)" % (where, ", ".join(tries)))
        return found[0]
    if os.path.isfile(where): return where
    die("%s: no such file or folder" % where)

def ppl_label(path):  # the run's name (+ the eval-* suffix) for a ppl.json
    parent = os.path.dirname(os.path.abspath(path))
    pname, gname = os.path.basename(parent), os.path.basename(os.path.dirname(parent))
    if os.path.basename(path) != "ppl.json": return re.sub(r"\.json$", "", os.path.basename(path))
    if pname == "eval": return gname
    if pname.startswith("eval-"): return gname + " " + pname[5:]
    return pname

def read_ppl(path):
    """[(context, ppl)] and the "data" description of a seqeval ppl.json."""
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
    return sorted(pts), str(d.get("data", ""))

def out_dir_ok(path):
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        die("%s: no such folder" % os.path.dirname(os.path.abspath(path)))

def draw_ppl(runs, title_extra=""):
    """Perplexity against context length, one line per (label, [(context, ppl)], data) in runs."""
    # "test perplexity by context (trained at 128)", maybe after "RUN: ": the split and the training length
    splits = {m.group(1) if m else None for m in (re.search(r"(?:^|: )(\S+) perplexity by context", w) for _, _, w in runs)}
    trained = {m.group(1) if m else None for m in (re.search(r"trained at (\d+)", w) for _, _, w in runs)}
    split = splits.pop() if len(splits) == 1 else None
    split = split if split in ("test", "valid", "val") else None  # seqeval --data FILE names a path there
    title = (split[:1].upper() + split[1:] + " perplexity" if split else "Perplexity") + " by context length" + title_extra
    ctxs = sorted({c for _, pts, _ in runs for c, _ in pts})
    allv = []
    for i, (label, pts, _) in enumerate(runs):
        with open(os.path.join(tmp, "ppl%d.dat" % i), "w") as f:
            f.write("# context ppl\n")
            for c, p in pts:
                allv.append(p)
                f.write("%d %s\n" % (c, fmt(p)))
    drawn_at = os.path.join(tmp, "ppl.png")
    gp = head() + LOOK + ["set output " + gq(drawn_at), "set title " + gq(title),
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
    return gp, [(drawn_at, out)]

def rfa_damping(run):
    """The damping b of a run's rfa layers (model.mixer and any rfa entry of model.layers), from config.json."""
    path = os.path.join(run, "config.json")
    if not os.path.isfile(path): die("%s: not found (damping needs run folders, to read b from)" % path)
    try:
        with open(path) as f:
            model = json.load(f).get("model", {})
    except ValueError as e:
        die("%s: not JSON: %s" % (path, e))
    found = set()
    def walk(o):
        if isinstance(o, dict):
            if o.get("kind") == "rfa" and num(o.get("damping")) is not None: found.add(float(o["damping"]))
            for v in o.values(): walk(v)
        elif isinstance(o, list):
            for v in o: walk(v)
    walk(model)
    if not found: die("%s: no rfa mixer with a damping in \"model\" (damping compares SC-RFA runs)" % path)
    if len(found) > 1: die("%s: rfa layers with different dampings (%s); give one b per run" %
                           (path, ", ".join("%g" % b for b in sorted(found))))
    return found.pop()

def png_read(path):
    """(width, height, rows of RGB bytes) of a PNG as seqeval --attention-map writes it: 8-bit RGB, no
    interlacing, filter type 0 (None) on every row (src/core/png.h); anything else is refused."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n": die("%s: not a PNG" % path)
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR" and n == 13: ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT": idat.append(body)
        elif kind == b"IEND": break
        pos += 12 + n
    if ihdr is None: die("%s: a PNG without IHDR" % path)
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype != 2 or interlace:
        die("%s: not an 8-bit RGB PNG without interlacing (what seqeval --attention-map writes)" % path)
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        die("%s: bad image data: %s" % (path, e))
    stride = 3 * w
    if len(raw) != h * (stride + 1): die("%s: %d bytes of image data, expected %d" % (path, len(raw), h * (stride + 1)))
    if any(raw[y * (stride + 1)] for y in range(h)):
        die("%s: rows with a PNG filter (seqeval writes none; this reader undoes none)" % path)
    return w, h, [raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)] for y in range(h)]

def shrink(w, h, rows, most):
    """Block means of an RGB image (rows of 3w bytes) so that no side exceeds most pixels."""
    k = max(1, -(-max(w, h) // most))  # ceil: blocks of k x k pixels (the last ones may be smaller)
    if k == 1: return w, h, rows
    ow, oh = -(-w // k), -(-h // k)
    out = []
    for oy in range(oh):
        band = rows[oy * k:(oy + 1) * k]
        col = [sum(v) for v in zip(*band)]  # sums over the band's rows, 3w values
        line = bytearray()
        for ox in range(ow):
            x0, x1 = ox * k, min(w, (ox + 1) * k)
            n = (x1 - x0) * len(band)
            for c in range(3):
                line.append(round(sum(col[3 * x0 + c:3 * x1:3]) / n))
        out.append(bytes(line))
    return ow, oh, out

gp, moves = [], []

if mode == "params":
    run = args[0]
    path, rows, layers = diag_rows(run)
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
    panels = []
    for key, title, ylabel in QUANT:
        series = [by_step[s].get(key) for s in steps]
        present = [v for v in series if isinstance(v, list)]
        if not present:
            sys.stderr.write("plot_rfa.sh: %s: no \"%s\" for layer %d, not drawn\n" % (path, key, layer))
            continue
        H = len(present[0])
        if any(len(v) != H for v in present):
            die("%s: \"%s\" of layer %d changes length between steps" % (path, key, layer))
        table = [[num(x) for x in v] if isinstance(v, list) else [None] * H for v in series]
        allv = [x for vals in table for x in vals]
        logy = y_log(allv, 100)
        if key == "mu" and not logy and y_log([x for x in allv if x], 100):
            # the decays span decades but the zero-decay heads sit at mu = 0 exactly: a log axis without them
            logy, title = True, title + " (log axis; heads with mu = 0 not drawn)"
            table = [[x if x else None for x in vals] for vals in table]
        dat = os.path.join(tmp, key + ".dat")
        with open(dat, "w") as f:
            f.write("# step " + " ".join("head%d" % h for h in range(H)) + "\n")
            for s, vals in zip(steps, table):
                f.write("%d %s\n" % (s, " ".join(fmt(x) for x in vals)))
        panel = ["reset"] + LOOK + ["set title " + gq(title if grid == "1" else "%s, layer %d" % (title, layer)),
                 "set xlabel 'step'", "set ylabel " + gq(ylabel),
                 "set logscale y" if logy else "unset logscale y"]
        # a grid has one key for all panels (the heads' colours are the same in each): its own panel below
        panel.append("set key outside right top" if grid != "1" else "unset key")
        if key == "alpha":  # the sign of alpha is the regime (> 0 integrative, < 0 diffusive): show 0
            panel += ["set yrange [*<0:0<*]", "unset logscale y",
                      "set arrow from graph 0, first 0 to graph 1, first 0 nohead dt 2 lc rgb '#444444'"]
        w = "linespoints pt 7 ps 0.6" if len(steps) <= 12 else "lines"
        panel.append("plot " + ", \\\n     ".join(
            "%s using 1:%d with %s %s title 'head %d'" % (gq(dat), h + 2, w, style(h), h) for h in range(H)))
        panels.append((key, panel))
    if not panels: die("%s: layer %d has none of the quantities to plot" % (path, layer))
    if grid == "1":
        name = "rfa_layer%d_params.png" % layer
        drawn_at = os.path.join(tmp, name)
        nrow = len(panels) // 2 + 1  # and a cell for the key
        gp += head(900, 250 * nrow, indexed=True) + ["set output " + gq(drawn_at),
               "set multiplot layout %d,2 title %s" % (nrow, gq("SDE parameters of RFA layer %d (%s)" % (layer, run)))]
        for _, panel in panels: gp += panel
        H = max(len(v) for d in by_step.values() for v in d.values() if isinstance(v, list))
        # the key: lines of nothing (NaN) in a panel without border or axes, the grid's last cell
        gp += ["reset", "unset border", "unset tics", "unset grid", "set xrange [0:1]", "set yrange [0:1]",
               "set key center center box maxrows %d" % ((H + 1) // 2),
               "plot " + ", ".join("NaN with lines %s title 'head %d'" % (style(h), h) for h in range(H))]
        gp += ["unset multiplot", "unset output"]
        moves.append((drawn_at, os.path.join(out, name)))
    else:
        gp += head()
        for key, panel in panels:  # panel[0] is "reset", which keeps the terminal
            name = "rfa_layer%d_%s.png" % (layer, key)
            drawn_at = os.path.join(tmp, name)
            gp += panel[:1] + ["set output " + gq(drawn_at)] + panel[1:] + ["unset output"]
            moves.append((drawn_at, os.path.join(out, name)))
elif mode == "ppl":
    out_dir_ok(out)
    runs = []
    for spec in args:
        label, where = split_label(spec)
        path = find_ppl(where)
        pts, data = read_ppl(path)
        runs.append((label or ppl_label(path), pts, data))
    gp, moves = draw_ppl(runs)
elif mode == "damping":
    out_dir_ok(out)
    runs = []
    for spec in args:
        label, where = split_label(spec)
        if not os.path.isdir(where): die("%s: not a run folder (damping reads b from RUN_DIR/config.json)" % where)
        b = rfa_damping(where)
        pts, data = read_ppl(find_ppl(where))
        runs.append((b, label or "b = %g" % b, pts, data))
    runs.sort(key=lambda r: r[0])
    gp, moves = draw_ppl([r[1:] for r in runs], ", by SC-RFA damping b")
elif mode == "val":
    out_dir_ok(out)
    runs, allv, shapes = [], [], set()
    for spec in args:
        label, where = split_label(spec)
        path = os.path.join(where, "log.jsonl") if os.path.isdir(where) else where
        if not os.path.isfile(path): die("%s: no such file (val reads a run's log.jsonl)" % path)
        run_dir = os.path.dirname(os.path.abspath(path))
        by_step = {}
        for d in read_jsonl(path, "a log.jsonl line"):
            if "val_acc" in d: die("%s: a task run (val_acc lines): it has no validation perplexity" % path)
            if "val_ppl" in d or "val_loss" in d:  # a resumed run may log a step twice: the later line wins
                p = num(d.get("val_ppl"))
                if p is None and num(d.get("val_loss")) is not None: p = math.exp(min(d["val_loss"], 700.0))
                by_step[d["step"]] = p
        if not by_step:
            die("%s: no validation lines (the trainer writes one every train.eval_every steps when data.val is set)" % path)
        try:  # the tokens of a step, for the axis label, when the runs agree on it
            with open(os.path.join(run_dir, "config.json")) as f:
                tr = json.load(f).get("train", {})
            shapes.add((tr.get("batch_size"), tr.get("seq_len")))
        except (OSError, ValueError):
            shapes.add(None)
        pts = sorted(by_step.items())
        allv += [p for _, p in pts]
        runs.append((label or os.path.basename(run_dir), pts))
    for i, (label, pts) in enumerate(runs):
        with open(os.path.join(tmp, "val%d.dat" % i), "w") as f:
            f.write("# step val_ppl\n")
            for s, p in pts: f.write("%d %s\n" % (s, fmt(p)))
    shape = shapes.pop() if len(shapes) == 1 else None
    xlabel = "step" + (" (%s x %s tokens)" % shape if shape and None not in shape else "")
    drawn_at = os.path.join(tmp, "val.png")
    gp = head() + LOOK + ["set output " + gq(drawn_at), "set title 'Validation perplexity over training'",
         "set xlabel " + gq(xlabel), "set ylabel 'validation perplexity'",
         "set logscale y" if y_log(allv, 10) else "unset logscale y", "set key top right"]
    gp.append("plot " + ", \\\n     ".join(
        "%s using 1:2 with linespoints pt 7 ps 0.6 %s title %s" % (gq(os.path.join(tmp, "val%d.dat" % i)), style(i), gq(label))
        for i, (label, _) in enumerate(runs)))
    gp.append("unset output")
    moves = [(drawn_at, out)]
else:  # attn
    out_dir_ok(out)
    mapdir = args[0]
    found = {}
    for n in os.listdir(mapdir):
        m = re.fullmatch(r"layer(\d+)_head(\d+)\.png", n)
        if m: found.setdefault(int(m.group(1)), {})[int(m.group(2))] = os.path.join(mapdir, n)
    if not found: die("%s: no layer<l>_head<h>.png (bin/seqeval --attention-map DIR writes them)" % mapdir)
    if layer_arg:
        layer = int(layer_arg)
        if layer not in found: die("--layer %d: no maps of it in %s (layers present: %s)" %
                                   (layer, mapdir, ", ".join(map(str, sorted(found)))))
    elif len(found) > 1:
        die("%s holds the maps of layers %s: choose one with --layer" % (mapdir, ", ".join(map(str, sorted(found)))))
    else:
        layer = next(iter(found))
    heads = sorted(found[layer])
    mu = {}
    if run_arg:  # each head's decay at the last step logged for this layer
        path, rows, layers = diag_rows(run_arg)
        last = [d for d in rows if d["layer"] == layer]
        if not last: die("--run: %s has no line for layer %d (layers present: %s)" % (path, layer, ", ".join(map(str, layers))))
        vals = last[-1].get("mu")
        if not isinstance(vals, list): die("--run: %s: no \"mu\" for layer %d" % (path, layer))
        mu = {h: num(v) for h, v in enumerate(vals)}
    ncol = int(cols_arg) if cols_arg else min(len(heads), 4)
    nrow = -(-len(heads) // ncol)
    sides = set()
    gp += head(300 * ncol, 40 + 300 * nrow)
    drawn_at = os.path.join(tmp, "attn.png")
    gp += ["set output " + gq(drawn_at),
           "set multiplot layout %d,%d title %s" % (nrow, ncol, gq("Attention maps, layer %d (%s)" % (layer, mapdir)))]
    for h in heads:
        w0, h0, rows = png_read(found[layer][h])
        sides.add((w0, h0))
        w, hh, rows = shrink(w0, h0, rows, int(px_arg or 256))
        raw = os.path.join(tmp, "head%d.rgb" % h)
        with open(raw, "wb") as f:
            for r in rows: f.write(r)
        title = "head %d" % h + (", mu = %.3g" % mu[h] if mu.get(h) is not None else "")
        gp += ["reset", "set title " + gq(title), "unset key", "unset xtics", "unset ytics", "set size ratio -1",
               "set border lc rgb '#444444'", "set xrange [-0.5:%g]" % (w - 0.5), "set yrange [-0.5:%g]" % (hh - 0.5),
               "plot %s binary array=(%d,%d) flipy format='%%uchar' with rgbimage" % (gq(raw), w, hh)]
    if len(sides) > 1: die("%s: the maps of layer %d have different sizes %s" % (mapdir, layer, sorted(sides)))
    gp += ["unset multiplot", "unset output"]
    moves = [(drawn_at, out)]

with open(os.path.join(tmp, "plot.gp"), "w") as f:
    f.write("\n".join(gp) + "\n")
with open(os.path.join(tmp, "moves"), "w") as f:
    for a, b in moves: f.write(a + "\t" + b + "\n")
