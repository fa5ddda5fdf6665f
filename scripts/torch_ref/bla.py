"""Blurry Window Attention's reference: `bla` (the BLA paper; it has no public code).

Mirrors src/mixers/bla.c (`bla_check_` -> parse_spec, `bla_params_` -> param_shapes, `bla_forward_` -> forward).
Written from the paper's equations, not from the C code (which runs the slots as two passes of the linear-recurrence
engine, src/nn/bla.c). The forward is Algorithm 1 token by token:

  A[s, 0] = 1 / S, A[s, m] = 2 cos(m w s) / S, B[s, 0] = 0, B[s, m] = 2 sin(m w s) / S   (eq. 12, w = 2 pi / S, S = 2M - 1)
  interpolate_t = cos(t modes) A^T + sin(t modes) B^T,   modes = (2 pi / P) [0, ..., M - 1]  (eq. 17)
  Kt = Kt + k_t (x) interpolate_t,  Vt likewise;  with decay (section 3.3) Kt = (1 - interpolate_t) Kt + ...
  o_t = softmax(q_t Kt / sqrt(Dk) + M_BLA) Vt,   M_BLA[s] = 0 if t >= round(s P / S) else -inf   (eq. 14)

Definition (docs/mixers.md), names relative to blocks.L.mixer.:
  q, k, v = row slices of x wqkv^T (H Dk, H Dk, H Dv); with conv K > 1: silu(depthwise causal conv over all three)
  y = o wo^T

self_test() (`torch_reference.py --self-test bla`) checks Algorithm 3 (chunked: per chunk the interpolated keys and
values times the weights, a cumulative sum over the chunk, plus the state carried from the previous chunk) and
Algorithm 2 at P = 2M - 1 (the cos/sin states of eq. 5 rotated each step, read by lag through A and B) against
Algorithm 1, and the exactness claims: P = L = 2M - 1 without decay is causal softmax attention, P = 2M - 1 with
decay is sliding-window attention of 2M - 1 positions.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, conv_taps, short_conv, t64, tiny_model

DEFAULTS = {"heads": 1, "modes": 8, "period": 0.0, "resolution": 0.0, "decay": False, "conv": 0, "expand_k": 1.0,
            "expand_v": 1.0, "chunk": 16, "init_std": 0.02}


class BlaSpec:
    """The resolved options of one bla layer: H heads of Dk key and Dv value channels, M modes, period P."""

    def __init__(self, opts, d_model):
        self.kind = "bla"
        self.opts = opts
        self.H, self.M = int(opts["heads"]), int(opts["modes"])
        self.HK = int(round(float(opts["expand_k"]) * d_model))
        self.HV = int(round(float(opts["expand_v"]) * d_model))
        if self.HK % self.H or self.HV % self.H:
            raise ValueError(f"bla: heads {self.H} do not divide the widths {self.HK}, {self.HV}")
        self.Dk, self.Dv = self.HK // self.H, self.HV // self.H
        self.S = 2 * self.M - 1
        period, res = float(opts["period"]), float(opts["resolution"])
        if period > 0 and res > 0:
            raise ValueError("bla: set period or resolution, not both")
        self.P = period if period > 0 else (res if res > 0 else 2.0) * self.S
        if self.P < self.S:
            raise ValueError(f"bla: period {self.P} is shorter than 2M - 1 = {self.S}")
        self.decay = bool(opts["decay"])
        self.K = conv_taps(opts)


def param_shapes(spec, C):
    s = {"wqkv": (2 * spec.HK + spec.HV, C)}
    if spec.K:
        s["conv1d"] = (2 * spec.HK + spec.HV, spec.K)
    s["wo"] = (C, spec.HV)
    return s


def interpolation(M, P, ts):
    """Eq. 12 and 17: the interpolation weights (len(ts), S) of positions ts, through A and B."""
    S = 2 * M - 1
    m = torch.arange(M, dtype=DTYPE)
    s = torch.arange(S, dtype=DTYPE)
    A = torch.where(m == 0, torch.full((S, M), 1.0 / S, dtype=DTYPE), 2 * torch.cos(torch.outer(s, m) * 2 * math.pi / S) / S)
    B = torch.where(m == 0, torch.zeros(S, M, dtype=DTYPE), 2 * torch.sin(torch.outer(s, m) * 2 * math.pi / S) / S)
    modes = 2 * math.pi / P * m
    t = torch.as_tensor(ts, dtype=DTYPE)
    return torch.cos(torch.outer(t, modes)) @ A.T + torch.sin(torch.outer(t, modes)) @ B.T


def dilated_time(M, P):
    S = 2 * M - 1
    return torch.round(torch.arange(S, dtype=DTYPE) / S * P)  # torch.round: ties to even


def recurrent(q, k, v, M, P, decay):
    """Algorithm 1. q, k (B,T,H,Dk), v (B,T,H,Dv) -> o (B,T,H,Dv)."""
    Bb, T, H, Dk = q.shape
    S = 2 * M - 1
    c = interpolation(M, P, range(T))                                             # (T,S)
    dil = dilated_time(M, P)
    Kt = torch.zeros(Bb, H, S, Dk, dtype=DTYPE)
    Vt = torch.zeros(Bb, H, S, v.shape[-1], dtype=DTYPE)
    out = []
    for t in range(T):
        keep = (1.0 - c[t]).view(1, 1, S, 1) if decay else 1.0
        Kt = keep * Kt + c[t].view(1, 1, S, 1) * k[:, t].unsqueeze(2)
        Vt = keep * Vt + c[t].view(1, 1, S, 1) * v[:, t].unsqueeze(2)
        mask = torch.where(t >= dil, 0.0, -math.inf).to(DTYPE)
        p = torch.softmax(torch.einsum("bhd,bhsd->bhs", q[:, t], Kt) / math.sqrt(Dk) + mask, dim=-1)
        out.append(torch.einsum("bhs,bhsv->bhv", p, Vt))
    return torch.stack(out, dim=1)


def chunked(q, k, v, M, P, C):
    """Algorithm 3 (no decay): per chunk, the weights times k and v, a cumulative sum over the chunk plus the
    carried state, then the masked softmax read of every position."""
    Bb, T, H, Dk = q.shape
    S = 2 * M - 1
    dil = dilated_time(M, P)
    Kp = torch.zeros(Bb, H, S, Dk, dtype=DTYPE)
    Vp = torch.zeros(Bb, H, S, v.shape[-1], dtype=DTYPE)
    out = []
    for t0 in range(0, T, C):
        ts = range(t0, min(T, t0 + C))
        c = interpolation(M, P, ts)                                                # (L,S)
        Kc = Kp.unsqueeze(1) + torch.cumsum(torch.einsum("ls,blhd->blhsd", c, k[:, t0:t0 + len(ts)]), dim=1)
        Vc = Vp.unsqueeze(1) + torch.cumsum(torch.einsum("ls,blhd->blhsd", c, v[:, t0:t0 + len(ts)]), dim=1)
        Kp, Vp = Kc[:, -1], Vc[:, -1]
        mask = torch.where(torch.as_tensor(list(ts), dtype=DTYPE).unsqueeze(1) >= dil, 0.0, -math.inf).to(DTYPE)
        sc = torch.einsum("blhd,blhsd->blhs", q[:, t0:t0 + len(ts)], Kc) / math.sqrt(Dk) + mask.view(1, len(ts), 1, S)
        out.append(torch.einsum("blhs,blhsv->blhv", torch.softmax(sc, dim=-1), Vc))
    return torch.cat(out, dim=1)


def convolution_form(q, k, v, M):
    """Algorithm 2 at P = 2M - 1: the cos/sin states of eq. 5, read by lag through A and B (eq. 13)."""
    Bb, T, H, Dk = q.shape
    S = 2 * M - 1
    w = 2 * math.pi / S
    m = torch.arange(M, dtype=DTYPE)
    cs, sn = torch.cos(m * w).view(1, 1, M, 1), torch.sin(m * w).view(1, 1, M, 1)
    s = torch.arange(S, dtype=DTYPE)
    A = torch.where(m == 0, torch.full((S, M), 1.0 / S, dtype=DTYPE), 2 * torch.cos(torch.outer(s, m) * w) / S)
    B = torch.where(m == 0, torch.zeros(S, M, dtype=DTYPE), 2 * torch.sin(torch.outer(s, m) * w) / S)
    Kc = torch.zeros(Bb, H, M, Dk, dtype=DTYPE)
    Ks = torch.zeros_like(Kc)
    Vc = torch.zeros(Bb, H, M, v.shape[-1], dtype=DTYPE)
    Vs = torch.zeros_like(Vc)
    out = []
    for t in range(T):
        Kc, Ks = cs * Kc - sn * Ks + k[:, t].unsqueeze(2), sn * Kc + cs * Ks
        Vc, Vs = cs * Vc - sn * Vs + v[:, t].unsqueeze(2), sn * Vc + cs * Vs
        Kt = torch.einsum("sm,bhmd->bhsd", A, Kc) + torch.einsum("sm,bhmd->bhsd", B, Ks)
        Vt = torch.einsum("sm,bhmd->bhsd", A, Vc) + torch.einsum("sm,bhmd->bhsd", B, Vs)
        mask = torch.where(t >= s, 0.0, -math.inf).to(DTYPE)
        p = torch.softmax(torch.einsum("bhd,bhsd->bhs", q[:, t], Kt) / math.sqrt(Dk) + mask, dim=-1)
        out.append(torch.einsum("bhs,bhsv->bhv", p, Vt))
    return torch.stack(out, dim=1)


def softmax_attention(q, k, v, window=0):
    """Causal softmax attention (window > 0: the last `window` positions, the query's own included)."""
    T, Dk = q.shape[1], q.shape[-1]
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    hide = (j > i) | ((i - j >= window) if window else torch.zeros(T, T, dtype=torch.bool))
    sc = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(Dk)
    sc = sc.masked_fill(hide, -math.inf)
    return torch.einsum("bhij,bjhv->bihv", torch.softmax(sc, dim=-1), v)


def forward(x, P, prefix, spec):
    Bb, T, C = x.shape
    H = spec.H
    u = x @ P[prefix + "wqkv"].T
    if spec.K:
        u = short_conv(u, P[prefix + "conv1d"])
    q = u[..., :spec.HK].reshape(Bb, T, H, spec.Dk)
    k = u[..., spec.HK:2 * spec.HK].reshape(Bb, T, H, spec.Dk)
    v = u[..., 2 * spec.HK:].reshape(Bb, T, H, spec.Dv)
    o = recurrent(q, k, v, spec.M, spec.P, spec.decay).reshape(Bb, T, spec.HV)
    return o @ P[prefix + "wo"].T


def self_test(whole):
    report = SelfChecks()
    rng = np.random.default_rng(12)
    Bb, T, H, Dk, Dv = 2, 23, 2, 4, 5
    q, k, v = (t64(rng.normal(size=(Bb, T, H, d))) for d in (Dk, Dk, Dv))
    for M, P in ((3, 10.0), (4, 7.0), (3, 7.5)):
        a, b = recurrent(q, k, v, M, P, False), chunked(q, k, v, M, P, 6)
        d = float((a - b).abs().max() / a.abs().max())
        report(d < 1e-12, f"M {M}, P {P:g}: Algorithm 3 (chunks of 6) == Algorithm 1 (max rel diff {d:.1e})")
    a, b = recurrent(q, k, v, 3, 5.0, False), convolution_form(q, k, v, 3)
    d = float((a - b).abs().max() / a.abs().max())
    report(d < 1e-12, f"P = 2M - 1: Algorithm 2 (convolution form) == Algorithm 1 (max rel diff {d:.1e})")
    M = 4
    S = 2 * M - 1
    a, b = recurrent(q[:, :S], k[:, :S], v[:, :S], M, S, False), softmax_attention(q[:, :S], k[:, :S], v[:, :S])
    d = float((a - b).abs().max() / b.abs().max())
    report(d < 1e-12, f"P = L = 2M - 1 = {S}, no decay: BLA == causal softmax attention (max rel diff {d:.1e})")
    a, b = recurrent(q, k, v, M, S, True), softmax_attention(q, k, v, window=S)
    d = float((a - b).abs().max() / b.abs().max())
    report(d < 1e-12, f"P = 2M - 1 = {S}, decay, L = {T}: BLA == sliding-window attention of {S} (max rel diff {d:.1e})")
    return report.summary("bla")


KIND = "bla"
CASES = {
    "bla": tiny_model({"kind": "bla", "heads": 2, "modes": 3, "chunk": 5}),
    "bla_decay_conv_expand": tiny_model({"kind": "bla", "heads": 2, "modes": 4, "period": 9.5, "decay": True,
                                         "conv": 3, "expand_k": 0.5, "expand_v": 1.5, "chunk": 7}),
}


def parse_spec(opts, d_model):
    return BlaSpec(opts, d_model)
