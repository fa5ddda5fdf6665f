#!/usr/bin/env python3
"""Tables and gnuplot figures from a per-run CSV of a task sweep (scripts/bla_mqar.sh, scripts/bla_regbench.sh).

    state_tables.py RUNS.csv OUT_PREFIX --x COLUMN [--tag TAG] [--frontier] [--logx] [--wide]
                    --title TEXT --xlabel TEXT [--note TEXT] [--ptitle TEXT]

RUNS.csv has a header with at least the columns id, sweep (space-separated tags), line (the series label),
accuracy, and COLUMN; rows with an empty accuracy or COLUMN (runs that failed or did not run) are skipped.
For every (line, x) the best accuracy over the runs with that tag is kept (the best over lr, seed and any
other setting with the same x: the papers' "best over the sweep"). With --frontier each line keeps only the
points that beat every smaller x (the Pareto frontier of accuracy against state size), and the Markdown gets
a second table: the smallest x at which each line reaches accuracy 0.5, 0.9 and 0.99.

Writes OUT_PREFIX.md (Markdown, long form: line, x, accuracy, best run; --wide: rows = x, columns = lines),
OUT_PREFIX.csv (line, x, accuracy, run) and OUT_PREFIX.png (accuracy against x, one line per series, log2
x axis with --logx), drawn by gnuplot into a temporary file and renamed, so never half-written. Prints the
Markdown. Exit 1 with a message when the CSV lacks a column, 2 on bad usage.
"""
import argparse, csv, math, os, subprocess, sys, tempfile

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf"]
THRESH = (0.5, 0.9, 0.99)


def die(msg):
    sys.stderr.write("state_tables.py: " + msg + "\n")
    sys.exit(1)


def gq(s):
    return "'" + str(s).replace("'", "''") + "'"


def xfmt(v):
    return ("%d" % v) if float(v).is_integer() else ("%g" % v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs"); ap.add_argument("prefix")
    ap.add_argument("--x", required=True); ap.add_argument("--tag", default="")
    ap.add_argument("--frontier", action="store_true"); ap.add_argument("--logx", action="store_true")
    ap.add_argument("--wide", action="store_true")
    ap.add_argument("--title", required=True); ap.add_argument("--xlabel", required=True)
    ap.add_argument("--note", default="")
    ap.add_argument("--ptitle", default="", help="the PNG's title (default --title)")
    a = ap.parse_args()
    try:
        rows = list(csv.DictReader(open(a.runs, newline="")))
        header = csv.DictReader(open(a.runs, newline="")).fieldnames or []
    except OSError as e:
        die("%s: %s" % (a.runs, e))
    for c in ("id", "sweep", "line", "accuracy", a.x):
        if c not in header:
            die("%s: no column '%s' (columns: %s)" % (a.runs, c, ", ".join(header)))
    best, order, seen = {}, [], []  # (line, x) -> (accuracy, id)
    for r in rows:
        if a.tag and a.tag not in r["sweep"].split():
            continue
        if r["line"] not in seen:
            seen.append(r["line"])
        try:
            acc, x = float(r["accuracy"]), float(r[a.x])
        except ValueError:
            continue  # failed or missing run: no point
        if r["line"] not in order:
            order.append(r["line"])
        k = (r["line"], x)
        if k not in best or acc > best[k][0]:
            best[k] = (acc, r["id"])
    lines = []
    for ln in order:
        pts = sorted((x, acc, rid) for (l, x), (acc, rid) in best.items() if l == ln)
        if a.frontier:
            keep, top = [], -1.0
            for p in pts:
                if p[1] > top:
                    keep.append(p); top = p[1]
            pts = keep
        lines.append((ln, pts))
    md = ["**%s.**%s" % (a.title, (" " + a.note) if a.note else ""), ""]
    if a.wide:
        xs = sorted({x for _, pts in lines for x, _, _ in pts})
        md.append("| %s | %s |" % (a.xlabel, " | ".join(ln for ln, _ in lines)))
        md.append("|---:|" + "---:|" * len(lines))
        for x in xs:
            cells = []
            for _, pts in lines:
                v = [acc for px, acc, _ in pts if px == x]
                cells.append("%.4f" % v[0] if v else "—")
            md.append("| %s | %s |" % (xfmt(x), " | ".join(cells)))
    else:
        md.append("| Line | %s | accuracy | best run |" % a.xlabel)
        md.append("|---|---:|---:|---|")
        for ln, pts in lines:
            for x, acc, rid in pts:
                md.append("| %s | %s | %.4f | %s |" % (ln, xfmt(x), acc, rid))
    if a.frontier:
        md += ["", "Smallest %s at which each line reaches the accuracy (— = never):" % a.xlabel, "",
               "| Line | " + " | ".join("≥ %g" % t for t in THRESH) + " |", "|---|" + "---:|" * len(THRESH)]
        for ln, pts in lines:
            cells = []
            for t in THRESH:
                v = [x for x, acc, _ in pts if acc >= t]
                cells.append(xfmt(min(v)) if v else "—")
            md.append("| %s | %s |" % (ln, " | ".join(cells)))
    missing = [ln for ln in seen if ln not in order]
    if missing:
        md += ["", "No finished run (failed or not run yet; see the logs): %s." % ", ".join(missing)]
    with open(a.prefix + ".md.tmp", "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(a.prefix + ".md.tmp", a.prefix + ".md")
    with open(a.prefix + ".csv.tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["line", a.x, "accuracy", "run"])
        for ln, pts in lines:
            for x, acc, rid in pts:
                w.writerow([ln, xfmt(x), "%.4f" % acc, rid])
    os.replace(a.prefix + ".csv.tmp", a.prefix + ".csv")
    print("\n".join(md))
    plot(a, lines)


def plot(a, lines):
    if subprocess.run(["sh", "-c", "command -v gnuplot"], stdout=subprocess.DEVNULL).returncode != 0:
        die("gnuplot not found: install it with `apt-get install gnuplot-nox` (or `make deps`)")
    tmp = tempfile.mkdtemp(prefix="state_tables.")
    try:
        gp = ["if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {",
              "    set terminal pngcairo size 900,540 font 'sans,10' noenhanced",
              "} else {", "    set terminal png size 900,540 noenhanced", "}",
              "set grid xtics ytics lt 1 lw 1 lc rgb '#e5e5e5'", "set border lc rgb '#444444'",
              "set output " + gq(os.path.join(tmp, "out.png")), "set title " + gq(a.ptitle or a.title),
              "set xlabel " + gq(a.xlabel + (" (log2)" if a.logx else "")), "set ylabel 'accuracy'",
              "set yrange [0:1.02]", "set key outside right top"]
        xs = [x for _, pts in lines for x, _, _ in pts]
        if a.logx and xs and min(xs) > 0:
            gp.append("set logscale x 2")
            gp.append("set xrange [%g:%g]" % (min(xs) / 1.4, max(xs) * 1.4))
        elif xs:
            span = (max(xs) - min(xs)) or 1.0
            gp.append("set xrange [%g:%g]" % (min(xs) - 0.05 * span, max(xs) + 0.05 * span))
        plots = []
        for i, (ln, pts) in enumerate(lines):
            if not pts:
                continue
            dat = os.path.join(tmp, "l%d.dat" % i)
            with open(dat, "w") as f:
                for x, acc, _ in pts:
                    f.write("%r %r\n" % (x, acc))
            style = "lc rgb %s dt %d lw 2" % (gq(COLORS[i % 10]), 1 + i // 10)
            if a.frontier:  # the frontier: the best accuracy reached up to each state size, as steps
                plots.append("%s using 1:2 with points pt 7 ps 0.9 %s title %s" % (gq(dat), style, gq(ln)))
                plots.append("%s using 1:2 with steps %s notitle" % (gq(dat), style))
            else:
                plots.append("%s using 1:2 with linespoints pt 7 ps 0.9 %s title %s" % (gq(dat), style, gq(ln)))
        if not plots:  # nothing finished: an empty frame that says so
            gp += ["set label 'no finished runs' at graph 0.5, 0.5 center", "set xrange [1:2]",
                   "plot NaN notitle"]
        else:
            gp.append("plot " + ", \\\n     ".join(plots))
        gp.append("unset output")
        with open(os.path.join(tmp, "plot.gp"), "w") as f:
            f.write("\n".join(gp) + "\n")
        r = subprocess.run(["gnuplot", os.path.join(tmp, "plot.gp")], stderr=subprocess.PIPE, text=True)
        if r.returncode != 0 or not os.path.getsize(os.path.join(tmp, "out.png")):
            sys.stderr.write(r.stderr)
            die("gnuplot failed")
        with open(os.path.join(tmp, "out.png"), "rb") as f, open(a.prefix + ".png.tmp", "wb") as g:
            g.write(f.read())
        os.replace(a.prefix + ".png.tmp", a.prefix + ".png")
    finally:
        for n in os.listdir(tmp):
            os.remove(os.path.join(tmp, n))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
