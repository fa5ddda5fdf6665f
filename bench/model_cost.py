#!/usr/bin/python3
"""What the speed benchmarks need to know about a model, from its resolved seqtrain config (no torch needed).

    bin/seqtrain --config CONFIG --print-config | python3 bench/model_cost.py torch-args
        bench/torch_train.py's model flags for the same shapes (attention + GELU MLP models only)
    ... | python3 bench/model_cost.py train-flops        the least training work per token (FLOPs)
    ... | python3 bench/model_cost.py forward-flops L    the least forward work per token at context L

FLOPs count a multiply-add as 2. The least work: every Linear matmul of the forward once (training: plus its
two backward matmuls), causal attention over the keys at or before each query only ((T+1)/2 on average, the
masked half skipped), the tied head; nothing recomputed, elementwise work (norms, GELU, softmax, RoPE, Adam)
not counted. A lower bound on what any implementation computes, so (measured fp32 peak) / this = the tokens/s
no implementation can beat on the machine (the "speed of light" rows).
"""
import json
import sys


def forward_macs_per_token(C, HD, F, layers, vocab, context):
    """Multiply-adds of one token's forward pass: q k v (C -> HD each), o (HD -> C), fc + proj (C <-> F),
    q.k and p.v over (context + 1) / 2 keys on average, the head."""
    per_layer = 3 * C * HD + HD * C + 2 * C * F + 2 * HD * (context + 1) / 2
    return layers * per_layer + C * vocab


def train_flops_per_token(C, HD, F, layers, vocab, T):
    """Forward + the backward's two matmuls per forward one: 3x the forward, 2 FLOPs per multiply-add."""
    return 2 * 3 * forward_macs_per_token(C, HD, F, layers, vocab, T)


def shapes(cfg):
    m, mx = cfg["model"], cfg["model"]["mixer"]
    if mx["kind"] != "attention" or m["mlp"]["kind"] != "gelu":
        sys.exit("model_cost.py: the speed benchmarks model attention + GELU MLP only, not %s + %s"
                 % (mx["kind"], m["mlp"]["kind"]))
    C = m["d_model"]
    head_dim = mx["head_dim"] or C // mx["heads"]
    return dict(C=C, H=mx["heads"], D=head_dim, HD=mx["heads"] * head_dim, F=int(round(m["mlp"]["ratio"] * C)),
                ratio=m["mlp"]["ratio"], layers=m["n_layers"], vocab=m["vocab_size"] or 8192,
                B=cfg["train"]["batch_size"], T=cfg["train"]["seq_len"])


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("torch-args", "train-flops", "forward-flops"):
        sys.exit(__doc__)
    s = shapes(json.load(sys.stdin))
    if sys.argv[1] == "torch-args":
        print("--vocab %d --d-model %d --layers %d --heads %d --head-dim %d --mlp-ratio %g --batch-size %d --seq-len %d"
              % (s["vocab"], s["C"], s["layers"], s["H"], s["D"], s["ratio"], s["B"], s["T"]))
    elif sys.argv[1] == "train-flops":
        print("%.0f" % train_flops_per_token(s["C"], s["HD"], s["F"], s["layers"], s["vocab"], s["T"]))
    else:
        L = int(sys.argv[2])
        print("%.0f" % (2 * forward_macs_per_token(s["C"], s["HD"], s["F"], s["layers"], s["vocab"], L)))


if __name__ == "__main__":
    main()
