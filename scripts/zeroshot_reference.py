#!/usr/bin/python3
"""Outside reference for seqeval --zeroshot: the same checkpoint scored in PyTorch (float64).

Independent of the C side in everything but the network definition, which it imports from
scripts/torch_ref/ (the reference tests/test_torch_ref.c checks the C model against): it reads the
data/eval files, builds the lm-evaluation-harness prompts (docs/zeroshot.md), tokenises with Debian's
python3-sentencepiece, truncates from the left, and scores each (context, continuation) request on its own
(no batching, no padding) with a float64 forward. For every choice it writes the token counts, a hash of
the token ids, the continuation's log-likelihood and whether greedy decoding reproduces it;
tests/test_zeroshot.c recomputes all of that in C and compares (ids exactly, log-likelihoods at 1e-4
relative), so the check runs without torch.

Needs /usr/bin/python3 with python3-torch, python3-numpy and python3-sentencepiece (Debian packages).

Usage:
    /usr/bin/python3 scripts/zeroshot_reference.py --run RUN_DIR [--tasks all] [--limit 50] --out ref.tsv
    /usr/bin/python3 scripts/zeroshot_reference.py --make-case
        retrain the tiny committed checkpoint (bin/seqtrain must be built: d_model 16, 2 attention layers,
        context 64, 150 steps of WikiText-2) into tests/data/zeroshot/ and write its reference ref.tsv
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402

from torch_ref import Reference, read_safetensors  # noqa: E402  (scripts/torch_ref/: the network)

CASE_DIR = os.path.join(REPO, "tests", "data", "zeroshot")
TOKENIZER = os.path.join(REPO, "data", "tokenizer", "wikitext2_bpe8192.model")

# name -> (file, shape): "mc" one context and the choices as continuations, "partial" one context per
# option and a shared continuation, "cloze" LAMBADA
TASKS = {
    "lambada": ("lambada_openai.jsonl.zst", "cloze"),
    "hellaswag": ("hellaswag_val.txt.zst", "mc"),
    "piqa": ("piqa.jsonl.zst", "mc"),
    "arc_easy": ("arc_easy.jsonl.zst", "mc"),
    "arc_challenge": ("arc_challenge.jsonl.zst", "mc"),
    "winogrande": ("winogrande.jsonl.zst", "partial"),
    "openbookqa": ("openbook_qa.jsonl.zst", "mc"),
    "boolq": ("boolq.jsonl.zst", "mc"),
    "copa": ("copa.jsonl.zst", "mc"),
    "siqa": ("siqa.jsonl.zst", "mc"),
    "winograd_wsc": ("winograd_wsc.jsonl.zst", "partial"),
}


# ----------------------------------------------------------------------------------------------------
# the sets, in the harness's prompt formats

def read_lines(path):
    out = subprocess.run(["zstd", "-dc", path], check=True, stdout=subprocess.PIPE).stdout
    return out.decode("utf-8").split("\n")[:-1]


def hellaswag_preprocess(text):
    """lm-evaluation-harness's hellaswag preprocess (the packaged text has no tags left; kept for fidelity)."""
    import re
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    while "  " in text:
        text = text.replace("  ", " ")
    return text


def task_items(name, eval_dir, limit):
    """[(contexts, continuations, choice texts, gold)] of the first `limit` items."""
    fname, shape = TASKS[name]
    lines = read_lines(os.path.join(eval_dir, fname))
    items = []
    if name == "hellaswag":
        for k in range(0, len(lines), 6):
            ctx = hellaswag_preprocess(lines[k])
            ends = [hellaswag_preprocess(x) for x in lines[k + 2:k + 6]]
            items.append(([ctx] * 4, [" " + x for x in ends], ends, int(lines[k + 1])))
            if len(items) == limit:
                break
        return items
    for line in lines:
        if not line:
            continue
        d = json.loads(line)
        if shape == "cloze":
            items.append(([d["context"]], [" " + d["continuation"]], [d["continuation"]], 0))
        elif shape == "partial":
            opts = d["context_options"]
            items.append((opts, [" " + d["continuation"]] * len(opts), [d["continuation"]] * len(opts), d["gold"]))
        else:
            q, ch = d["query"], list(d["choices"])
            if name == "piqa":        # "Question: goal\n" -> "Question: goal\nAnswer:"
                ctx = q + "Answer:" if q.endswith("\n") else q + "\nAnswer:"
            elif name.startswith("arc_"):
                ctx = q + "\nAnswer:"
            elif name == "boolq":     # "Passage: p\nQuestion: q?" -> "p\nQuestion: q?\nAnswer:"
                ctx = (q[len("Passage: "):] if q.startswith("Passage: ") else q) + "\nAnswer:"
            elif name == "copa":      # "premise, because" -> "premise because" (harness: premise[:-1] + " because")
                head, _, conn = q.rpartition(" ")
                ctx = (head[:-1] if head.endswith(",") else head) + " " + conn
            elif name == "siqa":      # letter choices -> "Q: context question\nA:" + " answer"
                c = q[q.index("Context: ") + 9:q.index("\nQuestion: ")]
                qq = q[q.index("\nQuestion: ") + 11:q.index("\nChoices:\n")]
                rows = q[q.index("\nChoices:\n") + 10:].split("\n")
                ch = [rows[i][3:] for i in range(len(ch))]
                ctx = f"Q: {c} {qq}\nA:"
            else:
                ctx = q
            items.append(([ctx] * len(ch), [" " + x for x in ch], ch, d["gold"]))
        if len(items) == limit:
            break
    return items


# ----------------------------------------------------------------------------------------------------
# tokens

class Tokens:
    """The run's SentencePiece model twice: as is (a text start gets the dummy prefix, as seqtok encode
    encodes a line) and without the dummy prefix (a continuation: " word" -> the ids it has in running
    text). The second is the model proto with a NormalizerSpec holding add_dummy_prefix = false appended,
    which protobuf merges over the model's own."""

    def __init__(self, path):
        self.sp = spm.SentencePieceProcessor(model_file=path)
        proto = self.sp.serialized_model_proto()
        self.cont = spm.SentencePieceProcessor(model_proto=proto + b"\x1a\x02\x18\x00")
        self.eos = self.sp.eos_id()

    def request(self, ctx, cont, max_context):
        """(ids kept, n_ctx, n_cont, n_scored, truncated) as the harness forms a request."""
        k = len(ctx.rstrip())
        cont = ctx[k:] + cont        # trailing whitespace of the context belongs to the continuation
        ctx = ctx[:k]
        if not ctx:                  # empty context: condition on EOS (it precedes every line in training)
            c_ids, t_ids = [self.eos], self.sp.encode(cont)
        else:
            c_ids, t_ids = self.sp.encode(ctx), self.cont.encode(cont)
        ids = c_ids + t_ids
        kept = ids[-(max_context + 1):]
        return kept, len(c_ids), len(t_ids), min(len(t_ids), len(kept) - 1), len(kept) < len(ids)


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for v in ids:
        for b in range(4):
            h ^= (v >> (8 * b)) & 0xFF
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


# ----------------------------------------------------------------------------------------------------
# scoring

def score(model, ids, n_scored):
    """(log-likelihood of the last n_scored tokens, greedy) from one float64 forward of ids[:-1]."""
    with torch.no_grad():
        logits = model.forward(torch.tensor([ids[:-1]], dtype=torch.int64))[0]
        logp = torch.log_softmax(logits, dim=-1)
    tg = torch.tensor(ids[1:], dtype=torch.int64)
    first = len(ids) - 1 - n_scored
    ll = logp[first:].gather(1, tg[first:, None]).sum().item()
    greedy = bool((logits[first:].argmax(dim=-1) == tg[first:]).all())
    return ll, greedy


def evaluate(run_config, tensors, tok_path, eval_dir, tasks, limit, out, max_context=None):
    model = Reference(run_config["model"], tensors)
    T = max_context or run_config["train"]["seq_len"]
    tok = Tokens(tok_path)
    with open(out, "w") as f:
        f.write(f"# seqtrain zero-shot reference: scripts/zeroshot_reference.py, float64 torch {torch.__version__}, "
                f"context {T}, first {limit} items per task\n")
        f.write("task\titem\tchoice\tn_ctx\tn_cont\tn_scored\tids_fnv1a64\tll\tgreedy\n")
        for name in tasks:
            items = task_items(name, eval_dir, limit)
            acc = acc_n = 0
            lls = []
            for i, (ctxs, conts, texts, gold) in enumerate(items):
                res = []
                for c, (ctx, cont) in enumerate(zip(ctxs, conts)):
                    ids, n_ctx, n_cont, n_sc, _ = tok.request(ctx, cont, T)
                    ll, greedy = score(model, ids, n_sc)
                    res.append((ll, greedy))
                    f.write(f"{name}\t{i}\t{c}\t{n_ctx}\t{n_cont}\t{n_sc}\t{fnv1a64(ids):016x}\t{ll:.9g}\t"
                            f"{int(greedy)}\n")
                ll = np.array([r[0] for r in res])
                if TASKS[name][1] == "cloze":
                    acc += res[0][1]
                    lls.append(ll[0])
                else:
                    nb = np.array([max(len(t.encode("utf-8")), 1) for t in texts], dtype=np.float64)
                    acc += int(np.argmax(ll)) == gold
                    acc_n += int(np.argmax(ll / nb)) == gold
            n = len(items)
            extra = f"ppl {math.exp(-np.mean(lls)):.4f}" if lls else f"acc_norm {acc_n / n:.4f}"
            print(f"{name:14s} {n:4d} items  acc {acc / n:.4f}  {extra}")
    print(f"wrote {out}")


def load_run(run):
    with open(os.path.join(run, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(run, "latest")) as f:
        ckpt = f.read().strip()
    tensors, _ = read_safetensors(os.path.join(run, ckpt, "model.safetensors"))
    return cfg, tensors


def make_case(limit):
    """Retrain the tiny committed checkpoint and write its reference (tests/data/zeroshot/)."""
    seqtrain = os.path.join(REPO, "bin", "seqtrain")
    if not os.access(seqtrain, os.X_OK):
        raise SystemExit(f"{seqtrain} is missing: run `make` first")
    os.makedirs(CASE_DIR, exist_ok=True)
    sets = ["run.name=zs_tiny", "model.d_model=16", "model.n_layers=2", "model.mixer.heads=2", "model.mlp.ratio=2",
            "train.seq_len=64", "train.batch_size=8", "train.steps=150", "train.eval_every=0", "train.ckpt_every=0",
            "run.threads=1", "optim.lr=1e-2", "eval.contexts=\"64\""]
    with tempfile.TemporaryDirectory(prefix="zeroshot_ref_") as tmp:
        args = [seqtrain, "--config", os.path.join(REPO, "configs", "quickstart.json")]
        for s in sets + [f"run.dir={tmp}"]:
            args += ["--set", s]
        subprocess.run(args, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        run = os.path.join(tmp, "zs_tiny")
        cfg, tensors = load_run(run)
        with open(os.path.join(run, "latest")) as f:
            ckpt = f.read().strip()
        # the resolved config, its run.dir (the temporary folder) put back to the default
        with open(os.path.join(run, "config.json")) as f:
            text = f.read()
        with open(os.path.join(CASE_DIR, "config.json"), "w") as f:
            f.write(text.replace(json.dumps(tmp), '"runs"'))
        shutil.copyfile(os.path.join(run, ckpt, "model.safetensors"), os.path.join(CASE_DIR, "model.safetensors"))
    evaluate(cfg, tensors, TOKENIZER, os.path.join(REPO, "data", "eval"), list(TASKS), limit,
             os.path.join(CASE_DIR, "ref.tsv"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="a seqtrain run directory (config.json and its newest checkpoint)")
    ap.add_argument("--tokenizer", help="SentencePiece .model (default: the run's data.tokenizer)")
    ap.add_argument("--eval-data", default=os.path.join(REPO, "data", "eval"), help="folder of the sets")
    ap.add_argument("--tasks", default="all", help="comma-separated task names, or all")
    ap.add_argument("--limit", type=int, default=50, help="items per task (default 50)")
    ap.add_argument("--out", help="the dump to write (.tsv)")
    ap.add_argument("--make-case", action="store_true", help="retrain and rewrite tests/data/zeroshot/")
    args = ap.parse_args(argv[1:])
    torch.set_num_threads(1)
    if args.make_case:
        make_case(args.limit)
        return 0
    if not args.run or not args.out:
        ap.error("--run and --out are required (or --make-case)")
    tasks = list(TASKS) if args.tasks == "all" else args.tasks.split(",")
    for t in tasks:
        if t not in TASKS:
            ap.error(f"unknown task {t!r}; tasks: {', '.join(TASKS)}")
    cfg, tensors = load_run(args.run)
    tok = args.tokenizer or cfg["data"]["tokenizer"]
    evaluate(cfg, tensors, tok, args.eval_data, tasks, args.limit, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
