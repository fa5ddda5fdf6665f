#!/usr/bin/python3
"""The fabricated inputs of tests/test_plot_rfa.sh, written into the folder DIR (plot_rfa_fixtures.py DIR; DIR/run
must exist): a diag.jsonl of 2 RFA layers x 3 steps x 4 heads with a null and a half-written last line,
seqeval-format ppl.json files in the places plot_rfa.sh looks, log.jsonl files with validation lines, run folders
whose config.json holds an rfa damping, and attention-map PNGs in seqeval's format (and a gray one)."""
import json, math, os, struct, sys, zlib
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
# log.jsonl: training lines, validation lines (one null, one with val_loss only, step 20 logged twice)
def log(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for d in lines: f.write(json.dumps(d) + "\n")
train = [{"step": s, "loss": 7.0 - s / 100, "lr": 1e-3, "tokens": 1024 * s} for s in (10, 20, 30, 40)]
log(os.path.join(w, "va", "log.jsonl"), train[:2] + [{"step": 20, "val_loss": 6.9, "val_ppl": 992.3, "val_tokens": 512},
    {"step": 20, "val_loss": 6.8, "val_ppl": 897.8, "val_tokens": 512}] + train[2:] +
    [{"step": 40, "val_loss": 6.1, "val_tokens": 512}, {"step": 60, "val_loss": None, "val_ppl": None}])
log(os.path.join(w, "vb", "log.jsonl"), train + [{"step": s, "val_loss": 7.0 - s / 50, "val_ppl": math.exp(7.0 - s / 50)} for s in (20, 40)])
log(os.path.join(w, "vtask", "log.jsonl"), train + [{"step": 40, "val_loss": 0.3, "val_acc": 0.9}])
log(os.path.join(w, "vnone", "log.jsonl"), train)
with open(os.path.join(w, "va", "config.json"), "w") as f: json.dump({"train": {"batch_size": 8, "seq_len": 128}}, f)
# run folders for damping: an rfa mixer's damping in config.json, the result in eval/ppl.json
def run(name, model):
    with open(os.path.join(w, name, "config.json"), "w") as f: json.dump({"model": model}, f)
for name, b in (("d5", 5.0), ("d05", 0.05)):
    ppl(os.path.join(w, name, "eval", "ppl.json"), "test perplexity by context (trained at 128)",
        [(128, 50.0 + b), (256, 52.0 + b), (512, 60.0 - b)])
    run(name, {"mixer": {"kind": "rfa", "damping": b}})
ppl(os.path.join(w, "dnone", "eval", "ppl.json"), "test perplexity by context", [(128, 50.0)])
run("dnone", {"mixer": {"kind": "attention", "pos": "rope"}})
ppl(os.path.join(w, "dtwo", "eval", "ppl.json"), "test perplexity by context", [(128, 50.0)])
run("dtwo", {"mixer": {"kind": "attention"}, "layers": [{"kind": "rfa", "damping": 0.5}, {"kind": "rfa", "damping": 5}]})
# attention maps as seqeval writes them (src/core/png.c): 8-bit RGB, filter 0 on every row, stored
# deflate blocks; layer 0 has 2 heads of 40 x 40, layer 1 one head; and a gray PNG that is refused
def png(path, w_, h_, ctype=2):
    ch = 3 if ctype == 2 else 1
    raw = b"".join(b"\0" + bytes((x * 7 + y * 3 + c) % 256 for x in range(w_) for c in range(ch)) for y in range(h_))
    def chunk(kind, body): return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w_, h_, 8, ctype, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 0)) + chunk(b"IEND", b""))
os.makedirs(os.path.join(w, "maps"))
for name in ("layer0_head0", "layer0_head1", "layer1_head0"): png(os.path.join(w, "maps", name + ".png"), 40, 40)
os.makedirs(os.path.join(w, "graymaps"))
png(os.path.join(w, "graymaps", "layer0_head0.png"), 40, 40, ctype=0)
