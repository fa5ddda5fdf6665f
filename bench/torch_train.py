#!/usr/bin/python3
"""PyTorch fp32 reference for bench/train_speed.sh: the seqtrain benchmark model, trained on random tokens.

Model (same shapes and ops as bench/configs/speed_rope.json): token embedding (V, C), n_layers pre-LN blocks
  x += Wo · attn(rope(Wq·ln1(x)), rope(Wk·ln1(x)), Wv·ln1(x))   q/k/v: C -> H·D = 2C, no bias; Wo: 2C -> C
  x += W2 · gelu_erf(W1 · ln2(x) + b1) + b2                       C -> 4C -> C
then a final LayerNorm (with bias) and the tied head (logits = x · E^T), mean cross-entropy, global grad-norm
clip 1.0, AdamW. RoPE uses the half layout: channel pairs (i, i + D/2), omega_i = base^(-2i/D).

Attention is the masked matmul -> softmax -> matmul formulation (baddbmm or matmul), or on torch >= 2.0 the
fused F.scaled_dot_product_attention (sdpa; torch 1.13 has none); the --attn / --qkv variants pick between
equivalent formulations (all exact), auto times each for a few steps and keeps the fastest. BLAS choice (OpenBLAS build, OPENBLAS_CORETYPE) is made by the caller's
environment before this process starts.

Prints one line:  torch_train: tokens_per_s=<median over the timed steps> best=<fastest step> ...
With --flops it prints the model's least training work instead (train_flops_per_token, see below) and exits.
With --eval-context L it times forward passes of single L-token windows (B = 1, inference mode, loss
included) instead of training: bench/eval_speed.sh compares them with seqeval.

With --device cuda (bench/gpu_speed.sh) the model trains on the GPU: --precision fp32 (PyTorch's default: no TF32
matmuls), tf32 (TF32 matmuls and convolutions) or bf16 (autocast to bfloat16 around the forward, fp32 master
weights, as seqtrain's run.precision bf16), --compile wraps the model in torch.compile (its compile time is spent
in the warmup steps, not timed); each step ends with torch.cuda.synchronize() so its time is the GPU's, and
the result line adds peak_mem_mib (torch.cuda.max_memory_allocated over the run) and device=<GPU name>.
"""
import argparse
import contextlib
import math
import os
import statistics
import time

import model_cost  # bench/model_cost.py, beside this script
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, D, ratio, fused_qkv, attn):
        super().__init__()
        self.H, self.D, self.fused, self.attn = H, D, fused_qkv, attn
        self.ln1 = nn.LayerNorm(C)
        if fused_qkv:
            self.qkv = nn.Linear(C, 3 * H * D, bias=False)
        else:
            self.q = nn.Linear(C, H * D, bias=False)
            self.k = nn.Linear(C, H * D, bias=False)
            self.v = nn.Linear(C, H * D, bias=False)
        self.o = nn.Linear(H * D, C, bias=False)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, int(round(ratio * C)))
        self.proj = nn.Linear(int(round(ratio * C)), C)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, D = self.H, self.D
        h = self.ln1(x)
        if self.fused:
            q, k, v = self.qkv(h).split(H * D, dim=-1)
        else:
            q, k, v = self.q(h), self.k(h), self.v(h)
        # (B, T, H·D) -> (B, H, T, D)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        q, k = rope_half(q, cos, sin), rope_half(k, cos, sin)
        scale = 1.0 / math.sqrt(D)
        if self.attn == "baddbmm":
            # scores = mask + scale · q k^T in one BLAS call (mask is 0 / -inf, broadcast over B·H)
            qf = q.reshape(B * H, T, D)
            kf = k.reshape(B * H, T, D)
            s = torch.baddbmm(mask, qf, kf.transpose(1, 2), beta=1.0, alpha=scale)
            p = torch.softmax(s, dim=-1)
            y = torch.bmm(p, v.reshape(B * H, T, D)).view(B, H, T, D)
        elif self.attn == "sdpa":
            # torch >= 2.0: the fused scaled_dot_product_attention (its flash / memory-efficient CPU kernels)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # "matmul": scale q, matmul, masked_fill
            s = (q * scale) @ k.transpose(-2, -1)
            s = s.masked_fill(mask != 0, float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, H * D)
        x = x + self.o(y)
        x = x + self.proj(F.gelu(self.fc(self.ln2(x))))  # exact (erf) GELU
        return x


def rope_half(x, cos, sin):
    """Rotary embedding, half layout: pairs (i, i + D/2). cos/sin: (T, D/2)."""
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2], x[..., d2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LM(nn.Module):
    def __init__(self, V, C, L, H, D, ratio, T, fused_qkv, attn, rope_base=10000.0):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(C, H, D, ratio, fused_qkv, attn) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        inv = rope_base ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2.0 / D)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cos(ang).float())
        self.register_buffer("sin", torch.sin(ang).float())
        # additive causal mask: 0 on/below the diagonal, -inf above (sdpa needs none)
        mask = torch.zeros(1, 1) if attn == "sdpa" else torch.full((T, T), float("-inf")).triu(1)
        self.register_buffer("mask", mask)

    def forward(self, idx, targets):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        logits = self.lnf(x) @ self.emb.weight.t()  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run(args, fused, attn, steps, warmup):
    """Trains `warmup + steps` steps; returns the per-step tokens/s of the timed steps."""
    torch.manual_seed(1337)
    m = LM(args.vocab, args.d_model, args.layers, args.heads, args.head_dim, args.mlp_ratio, args.seq_len,
           fused, attn).to(args.device)
    # weight decay on matrices only, like seqtrain's default grouping
    decay = [p for n, p in m.named_parameters() if p.dim() >= 2 and not n.startswith("emb")]
    other = [p for n, p in m.named_parameters() if not (p.dim() >= 2 and not n.startswith("emb"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, foreach=args.foreach)
    g = torch.Generator().manual_seed(0)
    B, T = args.batch_size, args.seq_len
    cuda = args.device == "cuda"
    step_fn = torch.compile(m) if args.compile else m
    rates = []
    for step in range(warmup + steps):
        tok = torch.randint(0, args.vocab, (B, T + 1), generator=g).to(args.device)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        # no autocast context at all off the GPU: a CPU-only torch (Debian's 1.13) fails on entering even a
        # disabled CUDA autocast ("Torch not compiled with CUDA enabled")
        bf16 = cuda and args.precision == "bf16"
        with torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = step_fn(tok[:, :-1].contiguous(), tok[:, 1:].contiguous())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= warmup:
            rates.append(B * T / dt)
    return rates


def eval_rates(args, fused, attn):
    """Forward passes of B = 1 windows of args.eval_context tokens, no autograd (what seqeval does per window):
    the per-window tokens/s of the timed windows."""
    torch.manual_seed(1337)
    L = args.eval_context
    m = LM(args.vocab, args.d_model, args.layers, args.heads, args.head_dim, args.mlp_ratio, L, fused, attn)
    m.eval()
    g = torch.Generator().manual_seed(0)
    rates = []
    with torch.inference_mode():
        for w in range(args.warmup + args.steps):
            tok = torch.randint(0, args.vocab, (1, L + 1), generator=g)
            t0 = time.perf_counter()
            m(tok[:, :-1].contiguous(), tok[:, 1:].contiguous())
            dt = time.perf_counter() - t0
            if w >= args.warmup:
                rates.append(L / dt)
    return rates


def eval_rates_probe(args, fused, attn):
    """eval_rates with a short count: one warmup and --probe-steps timed windows."""
    short = argparse.Namespace(**vars(args))
    short.warmup, short.steps = 1, args.probe_steps
    return eval_rates(short, fused, attn)


def train_flops_per_token(args):
    """The least fp32 work of one training step per token (bench/model_cost.py says what it counts)."""
    return model_cost.train_flops_per_token(args.d_model, args.heads * args.head_dim, int(round(args.mlp_ratio * args.d_model)),
                                            args.layers, args.vocab, args.seq_len)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--mlp-ratio", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--qkv", choices=["fused", "separate", "auto"], default="auto")
    ap.add_argument("--attn", choices=["baddbmm", "matmul", "sdpa", "auto"], default="auto",
                    help="attention formulation; auto times each (sdpa only on torch >= 2.0) and keeps the fastest")
    ap.add_argument("--foreach", type=int, default=1, help="AdamW foreach (multi-tensor) implementation")
    ap.add_argument("--probe-steps", type=int, default=2, help="timed steps per variant when choosing (auto)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="with --device cuda: fp32 (no TF32 matmuls), tf32, or bf16 autocast")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (the warmup steps compile it)")
    ap.add_argument("--flops", action="store_true", help="print train_flops_per_token for the model and exit")
    ap.add_argument("--eval-context", type=int, default=0,
                    help="time forward passes of one window of this many tokens (B = 1, no grad) instead of training;"
                         " --steps windows after --warmup")
    args = ap.parse_args()
    if args.flops:
        print(f"torch_train: train_flops_per_token={train_flops_per_token(args):.0f}")
        return

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    if args.device == "cuda":
        if args.eval_context:
            ap.error("--eval-context times the CPU only")
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"

    have_sdpa = hasattr(F, "scaled_dot_product_attention")
    if args.attn == "sdpa" and not have_sdpa:
        ap.error(f"--attn sdpa needs torch >= 2.0 (this is {torch.__version__})")
    attns = ["baddbmm", "matmul"] + (["sdpa"] if have_sdpa else [])
    variants = [(f, a) for f in ([True, False] if args.qkv == "auto" else [args.qkv == "fused"])
                for a in (attns if args.attn == "auto" else [args.attn])]
    if len(variants) > 1:
        probe = {}
        for f, a in variants:
            if args.eval_context:
                probe[(f, a)] = statistics.median(eval_rates_probe(args, f, a))
            else:
                probe[(f, a)] = statistics.median(run(args, f, a, args.probe_steps, 1))
            print(f"torch_train: probe qkv={'fused' if f else 'separate'} attn={a}: {probe[(f, a)]:.0f} tok/s",
                  flush=True)
        fused, attn = max(probe, key=probe.get)
    else:
        fused, attn = variants[0]

    rates = eval_rates(args, fused, attn) if args.eval_context else run(args, fused, attn, args.steps, args.warmup)
    blas = os.environ.get("LD_LIBRARY_PATH", "system libblas") or "system libblas"
    what = f"eval_context={args.eval_context} " if args.eval_context else ""
    if args.device == "cuda":
        what += (f"device={torch.cuda.get_device_name().replace(' ', '_')} precision={args.precision} "
                 f"compile={int(args.compile)} peak_mem_mib={torch.cuda.max_memory_allocated() / 2**20:.0f} ")
    print(f"torch_train: {what}tokens_per_s={statistics.median(rates):.1f} best={max(rates):.1f} steps={len(rates)} "
          f"threads={torch.get_num_threads()} qkv={'fused' if fused else 'separate'} attn={attn} "
          f"foreach={args.foreach} torch={torch.__version__} blas={blas} "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}", flush=True)


if __name__ == "__main__":
    main()
