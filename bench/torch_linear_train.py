#!/usr/bin/python3
"""PyTorch reference for bench/gpu_speed.sh's linear rows: seqtrain's GLA and Gated DeltaNet language models in
plain PyTorch, their recurrences in chunked form, trained on random tokens, eager or under torch.compile.

The model is the one a seqtrain config describes (its --print-config on stdin, as bench/fla_train.py reads it),
with seqtrain's parameter names and shapes (so its parameter count is --info's):
  x = wte[tokens]; per block: x += mixer(RMSNorm(x)); x += W_proj (silu(a) * b), [a | b] = W_fc RMSNorm(x)
  logits = RMSNorm(x) head^T (untied head; wte when tied), mean cross-entropy; RMSNorm eps 1e-6
  gla:            q, k, v = x W^T (conv > 1: silu(causal depthwise conv_K(...)) each)
                  log a = logsigmoid((x gk_proj1^T) gk_proj2^T + gk_bias) / gate_normalizer, per key channel
                  o = chunked S_t = diag(a_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(Dk)
  gated_deltanet: q, k, v = silu(conv_K(x W^T)) (conv <= 1: silu(x W^T)); q, k <- q / sqrt(|q|^2 + 1e-6) per head
                  beta = sigmoid(x b_proj^T) (x2 with allow_neg_eigval); g = -exp(A_log) softplus(x a_proj^T + dt_bias)
                  o = chunked S_t = e^g_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t / sqrt(Dk)
  both:           y = (RMSNorm_Dv(o) * o_norm [* silu(x g_proj^T)]) o_proj^T   (per head, the mixer's norm_eps)
The projections reading the block's input run as one matrix product (their weights concatenated), the short
convs of q, k and v as one depthwise conv. Init as seqtrain's: N(0, init_std) matrices and conv taps (mlp.proj
init_std / sqrt(2 n_layers)), zero gk_bias, unit norms, A = U(A_init_lo, A_init_hi), dt_bias = softplus^-1(dt)
with dt log-uniform in [dt_min, dt_max) and at least dt_init_floor.

The chunked forms (chunk = the config's mixer.chunk; T padded to whole chunks with tokens that change nothing):
  gla:   within a chunk, G = the cumulative log-decay (per key channel), A_ts = sum_c q_tc k_sc exp(G_tc - G_sc)
         (s <= t) as matrix products over sub-chunks of --sub-chunk tokens: the diagonal blocks with the
         per-channel weights explicitly, the blocks below them as (q (.) exp(G - G_f)) (k (.) exp(G_f - G))^T with
         G_f at the first token of the query's sub-chunk, so every exponent is <= 0; o = A v + (q (.) e^G) S and
         the state S' = diag(e^G_L) S + (k (.) e^(G_L - G))^T v carried from chunk to chunk.
  gated_deltanet: the WY / UT form: with Gam_ts = exp(G_t - G_s) (s <= t) and the strictly lower
         A_ts = beta_t (k_t . k_s) Gam_ts, one unit-triangular solve (I + A) [U | W] = [beta v | beta e^G k] for
         every chunk at once (torch.linalg.solve_triangular, in float32 under bf16); then from chunk to chunk
         u = U - W S, o = (q (.) e^G) S + ((q k^T) (.) Gam) u, S' = e^G_L S + (k (.) e^(G_L - G))^T u.
src/nn/linrec.c and src/nn/delta.c run the same chunks (docs/gpu.md). --self-test checks both against the
project's float64 reference (scripts/torch_ref: GLA's parallel (T, T) form, the delta rule's token-by-token
recurrence) and the whole model against torch_ref's (tests/test_torch_linear_train.sh).

Training: AdamW with the config's optim.lr, beta1, beta2, eps, weight_decay (on tensors of two or more
dimensions but wte: seqtrain's decay flags) and grad_clip; random tokens (B, T + 1), T predictions a row.
--precision fp32 = fp32 with TF32 off, tf32 = TF32 matmuls and convolutions (CUDA only), bf16 = autocast to
bfloat16 around the forward (fp32 master weights; the chunk states and decays stay fp32). --compile wraps the
model in torch.compile (torch >= 2.0); its compile time falls in the --warmup steps. Prints one line

    torch_linear_train: model=gla params=N device=D precision=P compile=0|1 tokens_per_s=X peak_mem_mib=M loss=L

with the median tokens/s of the timed steps and the peak memory: torch.cuda.max_memory_allocated on the GPU,
the process's peak resident set on the CPU.

    seqtrain --config bench/configs/speed_gla.json --print-config | \\
        python3 bench/torch_linear_train.py --device cuda --precision bf16 --batch-size 64 --seq-len 512 --compile
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RMSNORM_EPS = 1e-6  # the model's norms (the mixers' output norms take their norm_eps)
L2_EPS = 1e-6       # gated_deltanet's q, k normalisation


# ----------------------------------------------------------------------------
# the chunked recurrences

def state_dtype_(x):
    """The chunk states' and decays' dtype: float64 for float64 inputs (the self-test), float32 otherwise (bf16)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def to_chunks_(x, L):
    """(B, T, H, ...) -> (B, H, N, L, ...), T zero-padded to N whole chunks of L."""
    x = x.transpose(1, 2)
    pad = -x.shape[2] % L
    if pad:
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.reshape(x.shape[0], x.shape[1], -1, L, *x.shape[3:])


def from_chunks_(o, T):
    """(B, H, N, L, D) -> (B, T, H, D), the padding dropped."""
    B, H, N, L, D = o.shape
    return o.reshape(B, H, N * L, D)[:, :, :T].transpose(1, 2)


def causal_exp_(d, tri):
    """exp(d) where tri (s <= t) holds, 0 elsewhere (the exponent masked first, so no inf appears)."""
    return torch.exp(d.masked_fill(~tri, float("-inf")))


def gla_chunked(q, k, v, g, chunk, sub):
    """o (B, T, H, Dv) of S_t = diag(e^g_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t; q already scaled.
    q, k, g (B, T, H, Dk), v (B, T, H, Dv); chunks of `chunk` tokens, `sub`-token sub-chunks inside
    (chunk % sub = 0)."""
    B, T, H, Dk = q.shape
    L, S, sd = chunk, sub, state_dtype_(q)
    NS = L // S
    q, k, v = (to_chunks_(t, L) for t in (q, k, v))
    G = to_chunks_(g.to(sd), L).cumsum(3)                                 # (B, H, N, L, Dk)
    N, dev = q.shape[2], q.device
    # diagonal sub-blocks: the per-channel weights exp(G_t - G_s), s <= t, explicitly
    qs, ks, Gs = (t.reshape(B, H, N, NS, S, Dk) for t in (q, k, G))
    tri = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
    w = causal_exp_(Gs.unsqueeze(-2) - Gs.unsqueeze(-3), tri.unsqueeze(-1))  # (B, H, N, NS, S_t, S_s, Dk)
    a_diag = (qs.unsqueeze(-2) * ks.unsqueeze(-3) * w).sum(-1)           # (B, H, N, NS, S, S)
    # blocks below the diagonal: factored at G_f, the first token of the query's sub-chunk
    Gf = Gs[..., :1, :]                                                   # (B, H, N, NS, 1, Dk)
    qt = qs * torch.exp(Gs - Gf)
    before = torch.arange(L, device=dev).view(1, L) < torch.arange(0, L, S, device=dev).view(NS, 1)  # s < f
    kt = k.unsqueeze(3) * causal_exp_(Gf - G.unsqueeze(3), before.unsqueeze(-1))  # (B, H, N, NS, L, Dk)
    a = (qt @ kt.transpose(-1, -2)).view(B, H, N, NS, S, NS, S)
    a = a + a_diag.unsqueeze(-2) * torch.eye(NS, dtype=a_diag.dtype, device=dev).view(NS, 1, NS, 1)
    o = a.view(B, H, N, L, L) @ v
    # between chunks: the state each chunk starts from, then its contribution to every token of the chunk
    GL = G[..., -1:, :]                                                   # (B, H, N, 1, Dk)
    kv = (k * torch.exp(GL - G)).transpose(-1, -2) @ v                    # (B, H, N, Dk, Dv)
    carry = torch.exp(GL).transpose(-1, -2)                               # (B, H, N, Dk, 1)
    st = torch.zeros(B, H, Dk, v.shape[-1], dtype=sd, device=dev)
    states = []
    for n in range(N):
        states.append(st)
        st = carry[:, :, n] * st + kv[:, :, n]
    o = o + (q * torch.exp(G)) @ torch.stack(states, 2)
    return from_chunks_(o, T)


def delta_chunked(q, k, v, beta, g, chunk):
    """o (B, T, H, Dv) of S_t = e^g_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t; q already
    scaled. q, k (B, T, H, Dk), v (B, T, H, Dv), beta, g (B, T, H); chunks of `chunk` tokens."""
    B, T, H, Dk = q.shape
    Dv, L, sd = v.shape[-1], chunk, state_dtype_(q)
    q, k, v = (to_chunks_(t, L) for t in (q, k, v))
    beta = to_chunks_(beta.unsqueeze(-1), L)                              # (B, H, N, L, 1)
    G = to_chunks_(g.to(sd).unsqueeze(-1), L).cumsum(3)                   # (B, H, N, L, 1)
    N, dev = q.shape[2], q.device
    tri = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    gam = causal_exp_(G - G.transpose(-1, -2), tri)                       # (B, H, N, L, L): exp(G_t - G_s), s <= t
    e = torch.exp(G)
    # (I + A) [U | W] = [beta v | beta e k], A strictly lower: one solve for every chunk, never forming the inverse
    a = (beta * (k @ k.transpose(-1, -2)) * gam).tril(-1)
    rhs = torch.cat([beta * v, beta * e * k], dim=-1)
    uw = torch.linalg.solve_triangular(a.to(sd), rhs.to(sd), upper=False, unitriangular=True)
    u0, w = uw.split([Dv, Dk], dim=-1)
    eL = e[..., -1:, :]                                                   # (B, H, N, 1, 1)
    kf = k * torch.exp(G[..., -1:, :] - G)
    st = torch.zeros(B, H, Dk, Dv, dtype=sd, device=dev)
    states, us = [], []
    for n in range(N):
        states.append(st)
        un = u0[:, :, n] - w[:, :, n] @ st
        us.append(un)
        st = eL[:, :, n] * st + kf[:, :, n].transpose(-1, -2) @ un
    p = (q @ k.transpose(-1, -2)) * gam
    o = (q * e) @ torch.stack(states, 2) + p @ torch.stack(us, 2)
    return from_chunks_(o, T)


# ----------------------------------------------------------------------------
# the layers and the model (parameter names and shapes as seqtrain's)

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def short_conv(u, w):
    """silu of the causal depthwise conv: out_t[c] = sum_j w[c, j] u_{t-K+1+j}[c], zeros before t = 0.
    u (B, T, W), w (W, K)."""
    K = w.shape[1]
    y = F.conv1d(u.transpose(1, 2), w.unsqueeze(1), padding=K - 1, groups=w.shape[0])
    return F.silu(y[..., :u.shape[1]].transpose(1, 2))


def width_(expand, C):
    return int(math.floor(float(expand) * C + 0.5))


class LinearMixer(nn.Module):
    """gla or gated_deltanet on a block's normalised input (B, T, C); its options are the config's model.mixer."""

    def __init__(self, mix, C, sub):
        super().__init__()
        self.kind, self.mix, self.sub = mix["kind"], mix, sub
        self.H, self.HK, self.HV = int(mix["heads"]), width_(mix["expand_k"], C), width_(mix["expand_v"], C)
        self.Dk, self.Dv = self.HK // self.H, self.HV // self.H
        self.K = int(mix["conv"]) if int(mix["conv"]) > 1 else 0
        self.gated_out = bool(mix["output_gate"] if self.kind == "gla" else mix["use_gate"])
        std = float(mix["init_std"])
        normal = lambda *shape: nn.Parameter(torch.randn(*shape) * std)  # noqa: E731
        self.q_proj, self.k_proj, self.v_proj = normal(self.HK, C), normal(self.HK, C), normal(self.HV, C)
        if self.K:
            self.q_conv1d, self.k_conv1d = normal(self.HK, self.K), normal(self.HK, self.K)
            self.v_conv1d = normal(self.HV, self.K)
        if self.gated_out:
            self.g_proj = normal(self.HV, C)
        if self.kind == "gla":
            self.gk_proj1 = normal(int(mix["gate_rank"]), C)
            self.gk_proj2 = normal(self.HK, int(mix["gate_rank"]))
            self.gk_bias = nn.Parameter(torch.zeros(self.HK))
        else:
            H = self.H
            self.b_proj, self.a_proj = normal(H, C), normal(H, C)
            A = torch.empty(H).uniform_(float(mix["A_init_lo"]), float(mix["A_init_hi"]))
            self.A_log = nn.Parameter(torch.log(A.clamp(min=torch.finfo(torch.float32).tiny)))
            lo, hi = math.log(float(mix["dt_min"])), math.log(float(mix["dt_max"]))
            dt = torch.exp(torch.empty(H, dtype=torch.float64).uniform_(lo, hi)).clamp(min=float(mix["dt_init_floor"]))
            self.dt_bias = nn.Parameter((dt + torch.log(-torch.expm1(-dt))).float())  # softplus^-1(dt)
        self.o_norm = nn.Parameter(torch.ones(self.Dv))
        self.o_proj = normal(C, self.HV)

    def forward(self, x):
        B, T, _ = x.shape
        H, Dk, Dv, HK, HV = self.H, self.Dk, self.Dv, self.HK, self.HV
        gla = self.kind == "gla"
        # every projection of x as one matrix product
        heads = [self.q_proj, self.k_proj, self.v_proj] + ([self.g_proj] if self.gated_out else [])
        heads += [self.gk_proj1] if gla else [self.b_proj, self.a_proj]
        y = F.linear(x, torch.cat(heads))
        qkv, rest = y[..., :2 * HK + HV], y[..., 2 * HK + HV:]
        if self.K:
            qkv = short_conv(qkv, torch.cat([self.q_conv1d, self.k_conv1d, self.v_conv1d]))
        elif not gla:
            qkv = F.silu(qkv)
        q, k, v = qkv.split([HK, HK, HV], dim=-1)
        q, k, v = q.reshape(B, T, H, Dk), k.reshape(B, T, H, Dk), v.reshape(B, T, H, Dv)
        gate, rest = (rest[..., :HV], rest[..., HV:]) if self.gated_out else (None, rest)
        if gla:
            lg = F.logsigmoid(F.linear(rest, self.gk_proj2, self.gk_bias)) / float(self.mix["gate_normalizer"])
            o = gla_chunked(q / math.sqrt(Dk), k, v, lg.reshape(B, T, H, Dk), int(self.mix["chunk"]), self.sub)
        else:
            l2 = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + L2_EPS)  # noqa: E731
            bpre, apre = rest.split([H, H], dim=-1)
            beta = torch.sigmoid(bpre) * (2.0 if self.mix["allow_neg_eigval"] else 1.0)
            g = -torch.exp(self.A_log) * F.softplus(apre + self.dt_bias)
            o = delta_chunked(l2(q) / math.sqrt(Dk), l2(k), v, beta, g, int(self.mix["chunk"]))
        o = rms_norm(o, self.o_norm, float(self.mix["norm_eps"]))
        if gate is not None:
            o = o * F.silu(gate.reshape(B, T, H, Dv))
        return F.linear(o.reshape(B, T, HV), self.o_proj)


class RMSNorm(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return rms_norm(x, self.weight, RMSNORM_EPS)


class SwiGLU(nn.Module):
    def __init__(self, C, hidden, bias, std, std_res):
        super().__init__()
        self.fc, self.proj = nn.Linear(C, 2 * hidden, bias=bias), nn.Linear(hidden, C, bias=bias)
        for lin, s in ((self.fc, std), (self.proj, std_res)):
            nn.init.normal_(lin.weight, std=s)
            if bias:
                nn.init.zeros_(lin.bias)

    def forward(self, x):
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.proj(F.silu(a) * b)


class Block(nn.Module):
    def __init__(self, m, sub):
        super().__init__()
        C, std = m["d_model"], float(m["init_std"])
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.mixer = LinearMixer(m["mixer"], C, sub)
        self.mlp = SwiGLU(C, width_(m["mlp"]["ratio"], C), bool(m["mlp"]["bias"]), std,
                          std / math.sqrt(2 * m["n_layers"]))

    def forward(self, x):
        x = x + self.mixer(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LinearLM(nn.Module):
    def __init__(self, m, vocab, sub):
        super().__init__()
        std = float(m["init_std"])
        self.wte = nn.Parameter(torch.randn(vocab, m["d_model"]) * std)
        self.blocks = nn.ModuleList(Block(m, sub) for _ in range(m["n_layers"]))
        self.lnf = RMSNorm(m["d_model"])
        self.head = None if m["tie_embeddings"] else nn.Linear(m["d_model"], vocab, bias=False)
        if self.head is not None:
            nn.init.normal_(self.head.weight, std=std)

    def logits(self, idx):
        x = self.wte[idx]
        for b in self.blocks:
            x = b(x)
        return F.linear(self.lnf(x), self.wte if self.head is None else self.head.weight)

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def model_check(cfg, sub):
    """The config's model section, or exit naming the first key this reference does not build."""
    m = cfg["model"]
    mix = m["mixer"]
    refuse = [("model.mixer.kind", mix["kind"], mix["kind"] in ("gla", "gated_deltanet"), "gla or gated_deltanet"),
              ("model.norm", m["norm"], m["norm"] == "rmsnorm", "rmsnorm"),
              ("model.mlp.kind", m["mlp"]["kind"], m["mlp"]["kind"] == "swiglu", "swiglu"),
              ("model.layers", m["layers"], not m["layers"], "[] (one mixer for every layer)"),
              ("model.block", m["block"], m["block"] in ("auto", "prenorm"), "auto or prenorm"),
              ("model.head", m["head"], m["head"] == "lm", "lm"),
              ("model.head_bias", m["head_bias"], not m["head_bias"], "false"),
              ("model.mixer.selective_rope.enabled", mix.get("selective_rope", {}).get("enabled"),
               not mix.get("selective_rope", {}).get("enabled"), "false"),
              ("model.mixer.rotate", mix.get("rotate"), not mix.get("rotate"), "false"),
              ("model.mixer.chunk", mix.get("chunk"), mix["kind"] != "gla" or int(mix.get("chunk", 0)) % sub == 0,
               f"a multiple of --sub-chunk {sub} for gla")]
    for key, val, good, allowed in refuse:
        if not good:
            sys.exit(f"torch_linear_train: {key} = {json.dumps(val)} has no reference here (allowed: {allowed}); "
                     "pass another config or --set it")
    return m


def decay_groups(model, cfg):
    """AdamW's groups: weight decay on tensors of two or more dimensions but wte (seqtrain's decay flags)."""
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.dim() >= 2 and n != "wte"]
    other = [p for n, p in named if not (p.dim() >= 2 and n != "wte")]
    return [{"params": decay, "weight_decay": float(cfg["optim"]["weight_decay"])},
            {"params": other, "weight_decay": 0.0}]


# ----------------------------------------------------------------------------
# self-test: the chunked forms against scripts/torch_ref on the same weights

def rel_diff_(a, b):
    """max |a - b| / max |b|"""
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def check_mixer_(report, ref, m, args):
    """The chunked layer against torch_ref's (forward, every gradient, float32), and the bare recurrence under
    decays too strong for any factor of a whole chunk. ref: the torch_ref package."""
    kind, C, T, chunk, sub = m["mixer"]["kind"], m["d_model"], args.seq_len, int(m["mixer"]["chunk"]), args.sub_chunk
    torch.manual_seed(3)
    layer = LinearMixer(m["mixer"], C, sub).double()
    with torch.no_grad():  # weights well away from the init, and strong decays, so that every term counts
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() >= 2 else 1.0))
        if kind == "gla":
            layer.gk_bias.uniform_(-6.0, 2.0)
        else:
            layer.A_log.uniform_(-1.0, 1.0)
    x = torch.randn(2, T, C, dtype=torch.float64, requires_grad=True)
    P = {n: p.detach().clone().requires_grad_(True) for n, p in layer.named_parameters()}
    y_ref, y = ref.mixers.mixer_forward(x, P, "", ref.mixer_spec(m, 0)), layer(x)
    d = rel_diff_(y, y_ref)
    what = "the (T, T) parallel form" if kind == "gla" else "the token-by-token delta rule"
    report(d < 1e-12, f"{kind} float64, T {T}, chunk {chunk}, sub-chunk {sub}: chunked layer == torch_ref's, {what} "
                      f"(max rel diff {d:.1e} < 1e-12)")
    r = torch.randn_like(y_ref)
    g_ref = torch.autograd.grad((y_ref * r).sum(), [x, *P.values()])
    g = torch.autograd.grad((y * r).sum(), [x, *layer.parameters()])
    d = max(rel_diff_(a, b) for a, b in zip(g, g_ref))
    report(d < 1e-10, f"{kind} float64: gradients of x and of {', '.join(P)} == the reference's "
                      f"(max rel diff {d:.1e} < 1e-10)")
    with torch.no_grad():
        d = rel_diff_(layer.float()(x.detach().float()), y_ref)
    report(d < 1e-4, f"{kind} float32: chunked layer == the float64 reference (max rel diff {d:.1e} < 1e-4)")
    # log-decays of -8 to -16 (gla) or -50 to -150 (gated_deltanet) a token: e^-G over a chunk overflows float32,
    # so a factor like it would give inf; every exponent here must stay <= 0
    B, H, D = 2, 2, 8
    q, k, v = (torch.randn(B, T, H, D, dtype=torch.float64) for _ in range(3))
    if kind == "gla":
        lg = -torch.empty(B, T, H, D, dtype=torch.float64).uniform_(8.0, 16.0)
        o_ref = ref.linear.parallel(q, k, v, lg, "gla")[0]
        o = gla_chunked(q.float(), k.float(), v.float(), lg.float(), chunk, sub)
    else:
        k = k / k.norm(dim=-1, keepdim=True)
        beta = torch.rand(B, T, H, dtype=torch.float64)
        lg = -torch.empty(B, T, H, dtype=torch.float64).uniform_(50.0, 150.0)
        o_ref = ref.delta.sequential(q, k, v, beta, lg)
        o = delta_chunked(q.float(), k.float(), v.float(), beta.float(), lg.float(), chunk)
    d = rel_diff_(o, o_ref)
    report(bool(torch.isfinite(o).all()) and d < 1e-5,
           f"{kind} float32, strong decays: the chunked recurrence is finite and == torch_ref's "
           f"(max rel diff {d:.1e} < 1e-5)")


def check_model_(report, ref, m, cfg, args, V=64):
    """The whole model's parameter table and logits against torch_ref's, and a few AdamW steps on one batch."""
    kind, T = m["mixer"]["kind"], args.seq_len
    torch.manual_seed(4)
    lm = LinearLM(m, V, args.sub_chunk).double()
    tensors = {n: p.detach().numpy() for n, p in lm.named_parameters()}
    want = ref.param_shapes(m, V)
    got = {n: tuple(t.shape) for n, t in tensors.items()}
    report(got == want, f"{kind} model: parameter names and shapes == torch_ref.param_shapes ({len(want)} tensors)")
    if got == want:
        tok = torch.randint(0, V, (2, T))
        d = rel_diff_(lm.logits(tok), ref.Reference(m, tensors).forward(tok))
        report(d < 1e-12, f"{kind} model float64: logits == torch_ref.Reference's (max rel diff {d:.1e} < 1e-12)")
    torch.manual_seed(5)
    lm = LinearLM(m, V, args.sub_chunk)
    opt = torch.optim.AdamW(decay_groups(lm, cfg), lr=1e-2)
    tok = torch.randint(0, V, (2, T + 1))
    losses = []
    for _ in range(6):
        loss = lm(tok[:, :-1], tok[:, 1:])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), float(cfg["optim"]["grad_clip"]))
        opt.step()
        losses.append(loss.item())
    good = all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] - 0.1
    report(good, f"{kind} model float32: 6 AdamW steps on one batch lower the loss by > 0.1 "
                 f"({' '.join(f'{v:.3f}' for v in losses)})")


def self_test(cfg, args):
    """ok / not ok lines; returns the number of failures. cfg: a tiny resolved config (its chunk below T)."""
    # only the self-test needs the float64 reference (scripts/torch_ref, and numpy with it)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    import torch_ref
    fails = []

    def report(good, what):
        print(f"{'ok' if good else 'not ok'} - {what}")
        if not good:
            fails.append(what)

    m = model_check(cfg, args.sub_chunk)
    check_mixer_(report, torch_ref, m, args)
    check_model_(report, torch_ref, m, cfg, args)
    print(f"{len(fails)} failure(s)" if fails else f"all {m['mixer']['kind']} checks passed")
    return len(fails)


# ----------------------------------------------------------------------------
# training

def peak_mem_mib(cuda):
    if cuda:
        return torch.cuda.max_memory_allocated() >> 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10  # kB on Linux


def train(cfg, args):
    m = model_check(cfg, args.sub_chunk)
    cuda = args.device == "cuda"
    torch.manual_seed(int(cfg["run"]["seed"]))
    model = LinearLM(m, args.vocab, args.sub_chunk).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    o = cfg["optim"]
    opt = torch.optim.AdamW(decay_groups(model, cfg), lr=float(o["lr"]), betas=(float(o["beta1"]), float(o["beta2"])),
                            eps=float(o["eps"]), foreach=True)
    step_fn = torch.compile(model) if args.compile else model
    B, T = args.batch_size, args.seq_len
    g = torch.Generator().manual_seed(0)
    rates = []
    for step in range(args.warmup + args.steps):
        tok = torch.randint(0, args.vocab, (B, T + 1), generator=g).to(args.device)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        bf16 = args.precision == "bf16"
        with torch.autocast(args.device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = step_fn(tok[:, :-1], tok[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(o["grad_clip"]))
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step >= args.warmup:
            rates.append(B * T / (time.perf_counter() - t0))
    device = torch.cuda.get_device_name().replace(" ", "_") if cuda else "cpu"
    print(f"torch_linear_train: model={m['mixer']['kind']} params={n_params} device={device} "
          f"precision={args.precision} compile={int(args.compile)} chunk={m['mixer']['chunk']} "
          f"tokens_per_s={statistics.median(rates):.0f} peak_mem_mib={peak_mem_mib(cuda)} loss={loss.item():.4f} "
          f"torch={torch.__version__}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="fp32 (TF32 off), tf32 (TF32 matmuls, CUDA only) or bf16 autocast")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (they compile under --compile)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--sub-chunk", type=int, default=16, help="gla: tokens per sub-chunk inside a chunk")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2.0)")
    ap.add_argument("--params", action="store_true", help="print the model's parameter count and exit")
    ap.add_argument("--self-test", action="store_true",
                    help="check the chunked forms and the model against scripts/torch_ref on the CPU (a tiny config "
                         "on stdin, its chunk below --seq-len) and exit with the number of failures")
    args = ap.parse_args()
    if args.batch_size < 1 or args.seq_len < 1 or args.steps < 1 or args.warmup < 0 or args.sub_chunk < 1:
        ap.error("--batch-size, --seq-len, --steps and --sub-chunk must be >= 1, --warmup >= 0")
    if args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs torch >= 2.0 (this is {torch.__version__})")
    if args.device == "cpu" and args.precision == "tf32":
        ap.error("--precision tf32 is a CUDA matmul mode; on the CPU take fp32 or bf16")
    try:
        cfg = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        sys.exit(f"torch_linear_train: stdin is not a config ({e}): pipe `seqtrain --config X --print-config` into it")
    torch.set_num_threads(args.threads)
    if args.self_test:
        sys.exit(self_test(cfg, args))
    if args.params:
        m = model_check(cfg, args.sub_chunk)
        n = sum(p.numel() for p in LinearLM(m, args.vocab, args.sub_chunk).parameters())
        print(f"torch_linear_train: model={m['mixer']['kind']} params={n}")
        return
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    train(cfg, args)


if __name__ == "__main__":
    main()
