"""The `rfa` mixer's reference: Robust Filter Attention (RFA, M1) and SC-RFA (M2) with the paper's ablations.

Mirrors src/mixers/rfa.c (options `rfa_check_` -> parse_spec, `rfa_params_` -> param_shapes, the per-head
coefficients `rfa_head_` -> coefficients, `rfa_forward_` -> forward), which runs on the attention kernel
src/nn/attention.c (AttnFilter logits). Here it is a dense T x T float64 computation written from
Algorithm 1 of the RFA paper (App. D.1, E.2) and the contract in docs/mixers.md (section `rfa`), not
from the C code.

Definition (names are seqtrain's parameter names, relative to blocks.L.mixer.):
  H heads of D complex channels; q, k, v = row blocks of x @ wqkv^T (+ bqkv), each (2*H*D) with head h
  at [h*2D, h*2D + D) real parts and [h*2D + D, (h+1)*2D) imaginary parts. Per head:
  mu, sigma~^2, eta^2, gamma^2, tau = softplus(raw) + eps (Algorithm 1; mu exactly 0 on the first
  zero_decay_heads heads and on all with unitary); nu = D * (softplus(raw) + eps) (nu_form "ratio") or
  D * softplus(raw) + 2 + eps ("authors", the authors' code); kappa = (nu + D) / D.
  Frequencies in conjugate pairs (channel 2m: +w'_m, 2m+1: -w'_m); w' = base^(-2m/D) in every head,
  or with spectral_coupling head h's slice base^(-(M-1-h*D/2-m)/M) of one bank, M = H*D/2; learned
  (`omega`, (H, D/2)) with learn_omega. q~, k~, v~ = e^{-iwt} (.) q, k, v (rotations, rotate_values);
  E = e^{-mu (i-j)}; V = sigma~^2 (1 - E^2) + eta^2 E^2 + gamma^2 (prior dle; flat: 1);
  s = Re(q~_i^H k~_j); R^2 = |q_i|^2 + E^2 |k_j|^2 - 2 E s; c = 1/(nu V) (mult_gate; else 1/nu);
  logits -tau log V - tau kappa log(1 + c R^2) (student) | -tau log V - tau c R^2 (gaussian) |
  tau s / sqrt(D) (unitary, rotation_scale "sqrt_d"; sqrt(2D) with "sqrt_2d"); causal softmax over j <= i, A = softmax * E, m_i = sum_j A_ij v~_j,
  out = e^{+iwt} (.) m, y = out @ wo^T (+ bo) (out in the same per-head re/im layout).

self_test() (`torch_reference.py --self-test rfa`) checks this implementation on its own: causality,
the mu = 0 heads, the unitary limit and every option against an element-by-element complex form
(loops), float64 gradcheck, the large-nu limit, and every rfa case end to end on random weights.
"""
import math

import numpy as np
import torch

from .common import DTYPE, SelfChecks, causal_shift, gradcheck_layer, inv_softplus, softplus, tiny_model

KIND = "rfa"

# the rfa mixer's option defaults (docs/mixers.md, section `rfa`)
DEFAULTS = {
    "heads": 8, "head_dim": 0, "bias": True, "spectral_coupling": False, "damping": 0.05,
    "zero_decay_heads": 2, "rope_base": 10000.0, "learn_omega": False, "kernel": "student",
    "prior": "dle", "mult_gate": True, "rotate_values": True, "rotations": True, "unitary": False,
    "sigma_tilde2_init": 0.1, "eta2_init": 1.0, "gamma2_init": 1.0, "nu_over_d_init": 4.0,
    "tau_init": 1.0, "eps": 1e-6, "rotation_scale": "sqrt_d", "nu_form": "ratio",
}


class RfaSpec:
    """The resolved options and fixed constants of one rfa (Robust Filter Attention) layer.

    H heads of D complex channels each (head_dim, default C/H; D even: conjugate frequency pairs).
    omega: (H, D/2) the frequencies w'_{h,m} (fixed ones, or the init of the learned `omega` tensor):
        RFA   (spectral_coupling false): every head the RoPE spectrum base^(-2m/D)
        SC-RFA (spectral_coupling true): one bank of M = H*D/2 frequencies base^(-i/M), head h gets
               base^(-(M-1-h*D/2-m)/M) (slowest first, head 0 slowest)
    zero_decay: (H,) bool, heads whose mu is exactly 0 (the first zero_decay_heads; all with unitary).
    mu_init: (H,) damping * max_m of the SC band of head h (0 on zero-decay heads); only an init value,
        the forward pass takes mu from the checkpoint's sde_mu."""

    kind = KIND
    SDE = ("sde_mu", "sde_sigma", "sde_eta", "sde_gamma", "sde_nu", "sde_tau")

    def __init__(self, opts, d_model):
        self.opts = opts
        self.H = int(opts["heads"])
        if self.H < 1:
            raise ValueError(f"rfa: heads {self.H}")
        self.D = int(opts["head_dim"]) or d_model // self.H
        if not opts["head_dim"] and d_model % self.H:
            raise ValueError(f"rfa: heads {self.H} does not divide d_model {d_model}")
        if self.D < 2 or self.D % 2:
            raise ValueError(f"rfa: {self.D} complex channels per head; needs an even number (conjugate pairs)")
        self.HD = self.H * self.D          # complex channels over all heads (2*HD reals)
        for key, allowed in (("kernel", ("student", "gaussian")), ("prior", ("dle", "flat")),
                             ("rotation_scale", ("sqrt_d", "sqrt_2d")), ("nu_form", ("ratio", "authors"))):
            if opts[key] not in allowed:
                raise ValueError(f"rfa: {key} {opts[key]!r} (one of {', '.join(allowed)})")
        self.bias = bool(opts["bias"])
        self.eps = float(opts["eps"])
        self.unitary = bool(opts["unitary"])
        # the width Re(q~^H k~) is divided by the root of in the unitary limit: D complex channels or 2D reals
        self.rot_width = self.D if opts["rotation_scale"] == "sqrt_d" else 2 * self.D
        self.nu_authors = opts["nu_form"] == "authors"
        half, base = self.D // 2, float(opts["rope_base"])
        M = self.H * half
        sc = np.array([[base ** (-(M - 1 - h * half - m) / M) for m in range(half)] for h in range(self.H)])
        std = np.array([[base ** (-2.0 * m / self.D) for m in range(half)] for _ in range(self.H)])
        self.omega = sc if opts["spectral_coupling"] else std
        self.zero_decay = np.zeros(self.H, dtype=bool)
        self.zero_decay[: max(0, min(int(opts["zero_decay_heads"]), self.H))] = True
        if self.unitary:
            self.zero_decay[:] = True
        self.mu_init = np.where(self.zero_decay, 0.0, float(opts["damping"]) * sc.max(axis=1))


def parse_spec(opts, d_model):
    """The layer's RfaSpec from its resolved options (defaults filled in, "kind" included)."""
    return RfaSpec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {}
    H, R = spec.H, 2 * spec.HD          # R: real rows of one of q, k, v
    shapes["wqkv"] = (3 * R, C)
    if spec.bias:
        shapes["bqkv"] = (3 * R,)
    shapes["wo"] = (C, R)
    if spec.bias:
        shapes["bo"] = (C,)
    for name in RfaSpec.SDE:
        shapes[name] = (H,)
    if spec.opts["learn_omega"]:
        shapes["omega"] = (H, spec.D // 2)
    return shapes


def coefficients(P, prefix, spec):
    """The per-head SDE coefficients of an rfa layer, each (H,), and the frequencies w' (H, D/2):
    positive ones as softplus(raw) + eps, mu included (Algorithm 1), except that mu is exactly 0 (raw
    unused, so its gradient is 0) on the zero-decay heads and on every head with `unitary`; nu = D *
    (softplus(raw) + eps) (nu_form ratio) or D * softplus(raw) + 2 + eps (authors); kappa = (nu + D) / D."""
    eps = spec.eps
    zero = torch.as_tensor(spec.zero_decay)
    if zero.all():
        mu = torch.zeros(spec.H, dtype=DTYPE)
    else:
        mu = torch.where(zero, torch.zeros(spec.H, dtype=DTYPE), softplus(P[prefix + "sde_mu"]) + eps)
    if spec.nu_authors:
        nu = spec.D * softplus(P[prefix + "sde_nu"]) + 2.0 + eps
    else:
        nu = spec.D * (softplus(P[prefix + "sde_nu"]) + eps)
    omega = P[prefix + "omega"] if spec.opts["learn_omega"] else torch.as_tensor(spec.omega, dtype=DTYPE)
    return {
        "mu": mu,
        "sigma_tilde2": softplus(P[prefix + "sde_sigma"]) + eps,
        "eta2": softplus(P[prefix + "sde_eta"]) + eps,
        "gamma2": softplus(P[prefix + "sde_gamma"]) + eps,
        "nu_over_d": nu / spec.D,
        "nu": nu,
        "kappa": (nu + spec.D) / spec.D,
        "tau": softplus(P[prefix + "sde_tau"]) + eps,
        "omega": omega,
    }


def complex_rotate(re, im, angle, sign):
    """(re + i im) * e^{sign i angle}, elementwise."""
    cos, sin = torch.cos(angle), sign * torch.sin(angle)
    return re * cos - im * sin, re * sin + im * cos


def forward(x, P, prefix, spec):
    """One rfa mixer (docs/mixers.md, section `rfa`; paper Algorithm 1) on the normalised input x (B, T, C),
    with materialised (T, T) matrices per head. Complex vectors are kept as (real, imaginary) pairs of
    real tensors (B, H, T, D)."""
    B, T, _ = x.shape
    H, D, R = spec.H, spec.D, 2 * spec.HD
    o = spec.opts
    qkv = x @ P[prefix + "wqkv"].T
    if spec.bias:
        qkv = qkv + P[prefix + "bqkv"]

    def split(block):
        # (B, T, 2HD) in the per-head layout [re_0 (D) | im_0 (D) | re_1 | im_1 ...] -> re, im (B, H, T, D)
        z = block.reshape(B, T, H, 2, D).permute(3, 0, 2, 1, 4)
        return z[0], z[1]

    (qr, qi), (kr, ki), (vr, vi) = (split(qkv[..., n * R:(n + 1) * R]) for n in range(3))
    c = coefficients(P, prefix, spec)

    # rotations by e^{-i w t}, conjugate pairs: complex channel 2m turns at +w'_m, 2m+1 at -w'_m
    w = torch.stack([c["omega"], -c["omega"]], dim=-1).reshape(H, 1, D)
    angle = torch.arange(T, dtype=DTYPE).view(1, T, 1) * w                   # (H, T, D): w_c * t
    if o["rotations"]:
        qr_, qi_ = complex_rotate(qr, qi, angle, -1.0)
        kr_, ki_ = complex_rotate(kr, ki, angle, -1.0)
    else:
        qr_, qi_, kr_, ki_ = qr, qi, kr, ki
    rot_v = o["rotations"] and o["rotate_values"]
    vr_, vi_ = complex_rotate(vr, vi, angle, -1.0) if rot_v else (vr, vi)

    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    visible = j <= i
    lag = (i - j).clamp(min=0).to(DTYPE)                                     # Delta (0 above the diagonal)
    head = lambda t: t.view(H, 1, 1)                                         # noqa: E731  (H,) -> (H, 1, 1)
    E = torch.exp(-head(c["mu"]) * lag)                                      # (H, T, T); 1 where mu = 0
    E2 = E * E
    s = torch.einsum("bhid,bhjd->bhij", qr_, kr_) + torch.einsum("bhid,bhjd->bhij", qi_, ki_)  # Re(q~^H k~)
    tau = head(c["tau"])
    if spec.unitary:
        logits = tau * s / math.sqrt(spec.rot_width)
    else:
        if o["prior"] == "dle":
            Vd = head(c["sigma_tilde2"]) * (1 - E2) + head(c["eta2"]) * E2 + head(c["gamma2"])
        else:
            Vd = torch.ones(H, T, T, dtype=DTYPE)
        a = -tau * torch.log(Vd)
        gate = 1.0 / (head(c["nu"]) * Vd) if o["mult_gate"] else 1.0 / head(c["nu"])
        qn = (qr * qr + qi * qi).sum(-1)                                     # (B, H, T) |q_i|^2
        kn = (kr * kr + ki * ki).sum(-1)
        R2 = qn.unsqueeze(-1) + E2 * kn.unsqueeze(-2) - 2 * E * s
        if o["kernel"] == "student":
            logits = a - tau * head(c["kappa"]) * torch.log1p(gate * R2)
        else:
            logits = a - tau * gate * R2
    logits = logits.masked_fill(~visible, float("-inf"))
    A = torch.softmax(logits, dim=-1) * E                                    # A = A_hat (.) E
    mr = torch.einsum("bhij,bhjd->bhid", A, vr_)
    mi = torch.einsum("bhij,bhjd->bhid", A, vi_)
    outr, outi = complex_rotate(mr, mi, angle, +1.0) if rot_v else (mr, mi)
    out = torch.stack([outr, outi]).permute(1, 3, 2, 0, 4).reshape(B, T, R)  # back to the per-head layout
    y = out @ P[prefix + "wo"].T
    if spec.bias:
        y = y + P[prefix + "bo"]
    return y


# ----------------------------------------------------------------------------------------------------
# self-test (no C side needed)

def tiny_spec(C=8, **opts):
    """An RfaSpec for a tiny test layer: heads 2, damping 0.3, base 10 (fast turns over short T)."""
    o = dict(DEFAULTS)
    o.update({"heads": 2, "damping": 0.3, "rope_base": 10.0, "zero_decay_heads": 1})
    o.update(opts)
    o["kind"] = KIND
    return RfaSpec(o, C)


def random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one rfa layer: projections at a scale that makes attention far
    from uniform, SDE raws around their inits (mu around damping * max band), omega around its init."""
    g = np.random.default_rng(seed)
    o, H = spec.opts, spec.H
    P = {}
    for name, shape in param_shapes(spec, C).items():
        if name in ("wqkv", "wo"):
            v = g.normal(0, 0.6, shape)
        elif name in ("bqkv", "bo"):
            v = g.normal(0, 0.2, shape)
        elif name == "omega":
            v = spec.omega * (1 + 0.2 * g.uniform(-1, 1, shape))
        else:
            init = {"sde_mu": np.maximum(spec.mu_init, 0.05), "sde_sigma": o["sigma_tilde2_init"],
                    "sde_eta": o["eta2_init"], "sde_gamma": o["gamma2_init"], "sde_nu": o["nu_over_d_init"],
                    "sde_tau": o["tau_init"]}[name]
            v = np.log(np.expm1(np.broadcast_to(init, (H,)))) + g.uniform(-0.5, 0.5, H)
        P[prefix + name] = torch.tensor(v, dtype=DTYPE, requires_grad=True)
    return P


def loops(x, P, spec):
    """The rfa layer written a second way, element by element with torch's complex dtype: rotate q, k, v
    by e^{-i w t} (w: +w', -w' per conjugate pair), R^2 as the residual |q~_i - E k~_j|^2 of the rotated
    vectors (not the expanded form), per-(i, j) logits, softmax over j <= i, weights A = softmax * E on
    the rotated values, turn back by e^{+i w t}, project. With `unitary` it is plain causal softmax
    attention on the rotated complex vectors, tau Re(q~^H k~) / sqrt(2D)."""
    B, T, _ = x.shape
    H, D, o = spec.H, spec.D, spec.opts
    qkv = x @ P["wqkv"].T + (P["bqkv"] if spec.bias else 0)
    z = qkv.reshape(B, T, 3, H, 2, D)
    zc = torch.complex(z[..., 0, :], z[..., 1, :])                      # (B, T, 3, H, D)
    freqs = torch.stack([P.get("omega", torch.as_tensor(spec.omega, dtype=DTYPE))] * 2, -1)
    freqs = (freqs * torch.tensor([1.0, -1.0], dtype=DTYPE)).reshape(H, D)
    if not o["rotations"]:
        freqs = freqs * 0
    t = torch.arange(T, dtype=DTYPE).view(T, 1, 1)
    phase = torch.polar(torch.ones(T, H, D, dtype=DTYPE), t * freqs)     # e^{+i w t}  (T, H, D)
    vphase = phase if o["rotate_values"] else torch.ones_like(phase)
    q, k = (zc[:, :, n] * phase.conj() for n in range(2))              # (B, T, H, D)
    v = zc[:, :, 2] * vphase.conj()
    sp = lambda n: softplus(P[n]) + spec.eps                            # noqa: E731
    tau, s2, e2, g2 = sp("sde_tau"), sp("sde_sigma"), sp("sde_eta"), sp("sde_gamma")
    out = torch.zeros(B, T, H, D, dtype=zc.dtype)
    for h in range(H):
        mu = 0.0 if spec.zero_decay[h] else softplus(P["sde_mu"][h]) + spec.eps
        # the authors' nu = d softplus(nu') + 2 + eps, or nu / d = softplus(nu') + eps
        nu = D * softplus(P["sde_nu"][h]) + 2 + spec.eps if spec.nu_authors else D * sp("sde_nu")[h]
        kappa = (nu + D) / D
        for b in range(B):
            for i in range(T):
                logit, weight = [], []
                for j in range(i + 1):
                    E = torch.exp(-mu * torch.tensor(float(i - j), dtype=DTYPE))
                    if spec.unitary:
                        logit.append(tau[h] * (q[b, i, h].conj() * k[b, j, h]).sum().real
                                      / math.sqrt(D if o["rotation_scale"] == "sqrt_d" else 2 * D))
                    else:
                        V = s2[h] * (1 - E * E) + e2[h] * E * E + g2[h] if o["prior"] == "dle" else 1.0
                        r2 = (q[b, i, h] - E * k[b, j, h]).abs().pow(2).sum()
                        cg = 1 / (nu * V) if o["mult_gate"] else 1 / nu
                        pen = kappa * torch.log(1 + cg * r2) if o["kernel"] == "student" else cg * r2
                        logit.append(-tau[h] * torch.log(torch.as_tensor(V, dtype=DTYPE)) - tau[h] * pen)
                    weight.append(E)
                A = torch.softmax(torch.stack(logit), dim=0) * torch.stack(weight)
                out[b, i, h] = vphase[i, h] * (A.to(zc.dtype).unsqueeze(-1) * v[b, : i + 1, h]).sum(0)
    flat = torch.stack([out.real, out.imag], dim=3).reshape(B, T, 2 * H * D)
    return flat @ P["wo"].T + (P["bo"] if spec.bias else 0)


def self_test(whole):
    """Checks of the rfa reference on its own: causality, mu = 0 heads, the unitary limit against an
    independent complex implementation, gradcheck, the large-nu limit of the student kernel, and every
    rfa CASE built end to end on random weights (through whole: selftest.WHOLE). Returns the number of
    failures."""
    torch.manual_seed(0)
    report = SelfChecks()

    C = 8
    variants = {
        "rfa (student, dle)": {},
        "sc_rfa": {"spectral_coupling": True},
        "gaussian+flat": {"spectral_coupling": True, "kernel": "gaussian", "prior": "flat"},
        "no mult_gate, no rotate_values": {"mult_gate": False, "rotate_values": False},
        "no rotations": {"rotations": False, "heads": 3, "head_dim": 2},
        "unitary": {"unitary": True},
        "unitary, rotation_scale sqrt_2d": {"unitary": True, "rotation_scale": "sqrt_2d"},
        "nu_form authors": {"nu_form": "authors", "head_dim": 4},
        "learn_omega, bias off, head_dim 6": {"learn_omega": True, "bias": False, "head_dim": 6,
                                               "zero_decay_heads": 0, "spectral_coupling": True},
    }
    x_all = torch.randn(2, 12, C, dtype=DTYPE)

    # (a) causality: changing the input at t changes no output before t (and does change outputs from t)
    for name, opts in variants.items():
        spec = tiny_spec(C, **opts)
        P = random_params(spec, C, 1)
        worst, moved = causal_shift(lambda x: forward(x, P, "", spec), x_all, (0, 5, 11))
        report(worst == 0.0 and moved, f"(a) causal: {name}: max|dy| before t = {worst:.1e}, outputs at t move")

    # (b) mu = 0 heads: finite outputs and gradients, exactly zero gradient of their raw sde_mu, the raw
    # value unused, no 1/mu anywhere (a head at mu -> 0 tends to the mu = 0 head), long T stays finite
    for name, opts in (("zero_decay_heads 1 of 2", {}), ("all heads zero-decay (zero_decay_heads 2)",
                       {"zero_decay_heads": 2}), ("unitary", {"unitary": True})):
        spec = tiny_spec(C, **opts)
        P = random_params(spec, C, 2)
        x = torch.randn(2, 40, C, dtype=DTYPE, requires_grad=True)
        y = forward(x, P, "", spec)
        (y * torch.randn_like(y)).sum().backward()
        grads = [x.grad] + [p.grad for p in P.values() if p.grad is not None]
        finite = bool(torch.isfinite(y).all()) and all(bool(torch.isfinite(g).all()) for g in grads)
        gmu = P["sde_mu"].grad
        zero_ok = gmu is None or bool((gmu[torch.as_tensor(spec.zero_decay)] == 0).all())
        with torch.no_grad():
            P2 = dict(P)
            raw = P["sde_mu"].detach().clone()
            raw[torch.as_tensor(spec.zero_decay)] = 30.0
            P2["sde_mu"] = raw
            same = bool((forward(x, P2, "", spec) == y).all())
        report(finite and zero_ok and same,
               f"(b) mu=0: {name}: y and grads finite (T=40), grad sde_mu on mu=0 heads == 0, raw mu there unused")
    # (eps 0: mu = softplus(raw) + eps would otherwise put the learned head at mu >= eps)
    spec0, spec1 = tiny_spec(C, zero_decay_heads=1, eps=0.0), tiny_spec(C, zero_decay_heads=0, eps=0.0)
    P = random_params(spec0, C, 3)
    with torch.no_grad():
        P1 = dict(P)
        raw = P["sde_mu"].detach().clone()
        raw[0] = inv_softplus(1e-9)
        P1["sde_mu"] = raw
        d = float((forward(x_all, P, "", spec0) - forward(x_all, P1, "", spec1)).abs().max())
    report(d < 1e-7, f"(b) mu -> 0: head 0 at mu = 1e-9 vs mu = 0 exactly: max|dy| = {d:.1e}")

    # (c) unitary + rotations + rotate_values == plain softmax attention on rotated complex vectors
    for name, opts in (("bias on", {}), ("bias off, sc, head_dim 4, 3 heads",
                                         {"bias": False, "spectral_coupling": True, "head_dim": 4, "heads": 3}),
                       ("learn_omega", {"learn_omega": True})):
        spec = tiny_spec(C, unitary=True, **opts)
        P = random_params(spec, C, 4)
        with torch.no_grad():
            a, b = forward(x_all, P, "", spec), loops(x_all, P, spec)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"(c) unitary == complex softmax attention on rotated q, k, v ({name}): "
                          f"max|dy|/max|y| = {d:.1e}")
    # (c') every variant against the same element-by-element complex form (R^2 as |q~ - E k~|^2)
    for name, opts in variants.items():
        spec = tiny_spec(C, **opts)
        P = random_params(spec, C, 9)
        with torch.no_grad():
            a, b = forward(x_all, P, "", spec), loops(x_all, P, spec)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"(c') {name} == element-by-element complex form: max|dy|/max|y| = {d:.1e}")

    # (d) gradcheck in float64 w.r.t. the input and the sde_* (and omega) parameters
    for name, opts in variants.items():
        spec = tiny_spec(4, **{**opts, "head_dim": 2, "heads": opts.get("heads", 2)})
        P = random_params(spec, 4, 5)
        names = [n for n in list(RfaSpec.SDE) + ["omega"] if n in P]
        ok = gradcheck_layer(forward, spec, P, torch.randn(1, 6, 4, dtype=DTYPE, requires_grad=True), names)
        report(ok, f"(d) gradcheck: {name} (x, {', '.join(names)})")

    # (e) student with nu/D -> inf: kappa log(1 + R^2/(nu V)) -> R^2/(D V), the gaussian kernel's
    # a - tau c R^2 at nu = D (nu/D = 1), difference O(D/nu)
    spec_s = tiny_spec(C, spectral_coupling=True)
    spec_g = tiny_spec(C, spectral_coupling=True, kernel="gaussian")
    P = random_params(spec_s, C, 6)
    diffs = []
    with torch.no_grad():
        Pg = dict(P)
        Pg["sde_nu"] = torch.full((2,), inv_softplus(1.0 - spec_g.eps), dtype=DTYPE)
        yg = forward(x_all, Pg, "", spec_g)
        for n in (1e2, 1e4, 1e6):
            Ps = dict(P)
            Ps["sde_nu"] = torch.full((2,), n, dtype=DTYPE)
            diffs.append(float((forward(x_all, Ps, "", spec_s) - yg).abs().max() / yg.abs().max()))
    rate = diffs[1] / diffs[2]
    report(diffs[2] < 1e-5 and 30 < rate < 300,
           "(e) student at nu/D = 1e2, 1e4, 1e6 -> gaussian at nu/D = 1: max|dy|/max|y| = "
           + ", ".join(f"{d:.1e}" for d in diffs) + f" (O(1/nu): ratio {rate:.0f})")

    # (f) every rfa CASE: parameter names/shapes, the full model forward/backward on random weights
    for name, case_model in whole.CASES.items():
        if case_model["mixer"]["kind"] != KIND:
            continue
        model, shapes, dump = whole.case_on_random_weights(name, case_model, KIND, random_params)
        finite = all(np.isfinite(v).all() for v in dump.values())
        # per head, which SDE gradients the spec's formulas make exactly zero: mu and sigma~^2 on mu = 0
        # heads (E = 1, so 1 - E^2 = 0), sigma/eta/gamma with a flat prior, all but tau when unitary
        zeros_ok = True
        for l in range(model["n_layers"]):
            spec = whole.mixer_spec(model, l)
            o, z = spec.opts, spec.zero_decay
            none, every = np.zeros(spec.H, bool), np.ones(spec.H, bool)
            flat = every if (spec.unitary or o["prior"] == "flat") else none
            expect = {"sde_mu": z, "sde_sigma": z | flat, "sde_eta": flat, "sde_gamma": flat,
                      "sde_nu": every if spec.unitary else none, "sde_tau": none}
            # without the gate, a mu = 0 head's V = eta^2 + gamma^2 is the same at every lag, so the softmax
            # cancels it: those gradients are 0 analytically, in float64 0 or ~1e-18 by rounding (not checked)
            skip = z if not o["mult_gate"] else none
            for n, zero in expect.items():
                g = dump[f"grad.blocks.{l}.mixer.{n}"]
                free = skip if n in ("sde_eta", "sde_gamma") else none
                zeros_ok &= bool((g[zero & ~free] == 0).all() and (g[~zero & ~free] != 0).all())
            if o["learn_omega"]:
                zeros_ok &= bool((dump[f"grad.blocks.{l}.mixer.omega"] != 0).all())
        spec = whole.mixer_spec(model, 0)
        names = [n.split("mixer.")[1] for n in shapes if n.startswith("blocks.0.mixer.")]
        report(finite and zeros_ok,
               f"(f) case {name}: H={spec.H} D={spec.D} ({int(spec.zero_decay.sum())} mu=0), mixer tensors "
               f"{' '.join(names)}; loss {dump['loss'][0]:.4f}; finite; SDE grads zero exactly where implied")

    # (h) the parameter maps on their own: mu = softplus(raw) + eps on the decaying heads (Algorithm 1);
    # rotation_scale sqrt_2d at tau sqrt(2) == sqrt_d at tau; nu_form authors at raw r == ratio at
    # softplus(r') = softplus(r) + 2 / D (the same nu, hence kappa and the gate)
    spec = tiny_spec(C, eps=1e-3)
    P = random_params(spec, C, 12)
    with torch.no_grad():
        c = coefficients(P, "", spec)
        want = torch.stack([torch.zeros((), dtype=DTYPE), softplus(P["sde_mu"][1]) + 1e-3])
        d_mu = float((c["mu"] - want).abs().max())
    report(d_mu < 1e-15 and float(c["mu"][1]) > 1e-3,
           f"(h) mu = softplus(raw) + eps on the decaying head, 0 on the zero-decay head: max|d| = {d_mu:.1e}")
    s1, s2 = tiny_spec(C, unitary=True), tiny_spec(C, unitary=True, rotation_scale="sqrt_2d")
    P = random_params(s1, C, 13)
    with torch.no_grad():
        P2 = dict(P)
        tau = softplus(P["sde_tau"]) + s1.eps
        P2["sde_tau"] = torch.log(torch.expm1(math.sqrt(2.0) * tau - s1.eps))
        d = float((forward(x_all, P, "", s1) - forward(x_all, P2, "", s2)).abs().max())
    report(d < 1e-12, f"(h) unitary: sqrt_2d at tau sqrt(2) == sqrt_d at tau: max|dy| = {d:.1e}")
    sa, sr = tiny_spec(C, nu_form="authors"), tiny_spec(C)
    P = random_params(sa, C, 14)
    with torch.no_grad():
        ca = coefficients(P, "", sa)
        want = sa.D * softplus(P["sde_nu"]) + 2 + sa.eps
        Pr = dict(P)
        Pr["sde_nu"] = torch.log(torch.expm1(softplus(P["sde_nu"]) + (2.0 + sa.eps) / sa.D - sa.eps))
        d_nu = float((ca["nu"] - want).abs().max())
        d = float((forward(x_all, P, "", sa) - forward(x_all, Pr, "", sr)).abs().max())
    report(d_nu < 1e-12 and d < 1e-12 and float(ca["kappa"].min()) > 1 + 2 / sa.D,
           f"(h) nu_form authors: nu = D softplus + 2 + eps (max|d| {d_nu:.1e}), == ratio at the same nu "
           f"(max|dy| {d:.1e}), kappa > 1 + 2/D")

    # (g) defaults: {"kind": "rfa"} alone resolves to the spec's table
    spec = whole.mixer_spec({"d_model": 16, "n_layers": 1, "mixer": {"kind": "rfa"}}, 0)
    report(spec.H == 8 and spec.D == 2 and spec.bias and not spec.unitary and spec.eps == 1e-6
           and list(spec.zero_decay) == [True, True] + [False] * 6 and spec.opts["kernel"] == "student"
           and spec.opts["prior"] == "dle" and abs(spec.omega[0, 0] - 1.0) < 1e-15,
           "(g) defaults: heads 8, D = C/H = 2, bias on, 2 zero-decay heads, student/dle, eps 1e-6, w' = 1")
    return report.summary("rfa")


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _rfa_model(heads=2, mixer=None, **extra):
    """A tiny rfa model (the rfa mixer has no init_std: its projections use the complex Rayleigh init)."""
    return tiny_model({"kind": KIND, "heads": heads, **(mixer or {})}, **extra)


# SC-RFA (M2) settings the ablation cases start from, as the paper's ablations start from M2
_SC = {"spectral_coupling": True, "zero_decay_heads": 1, "damping": 0.2, "rope_base": 100}

CASES = {
    "rfa": _rfa_model(heads=4),
    "sc_rfa": _rfa_model(heads=4, mixer={**_SC, "head_dim": 4}),
    "rfa_gaussian_flat": _rfa_model(heads=4, mixer={**_SC, "kernel": "gaussian", "prior": "flat"}),
    "rfa_nogate_novrot": _rfa_model(
        heads=4, mixer={**_SC, "head_dim": 6, "mult_gate": False, "rotate_values": False, "eps": 1e-3}),
    "rfa_norot": _rfa_model(
        heads=3, mixer={"head_dim": 4, "rotations": False, "zero_decay_heads": 1, "damping": 0.3,
                        "sigma_tilde2_init": 0.5, "eta2_init": 0.2, "gamma2_init": 0.5}),
    "rfa_unitary": _rfa_model(heads=2, mixer={"unitary": True, "rope_base": 100, "tau_init": 2.0}),
    "rfa_unitary_sqrt_2d": _rfa_model(
        heads=2, mixer={"unitary": True, "rotation_scale": "sqrt_2d", "rope_base": 100, "tau_init": 2.0}),
    "rfa_nu_authors": _rfa_model(heads=2, mixer={**_SC, "head_dim": 4, "nu_form": "authors", "nu_over_d_init": 1.5}),
    "rfa_learn_omega_bias_off": _rfa_model(
        heads=2, mixer={**_SC, "learn_omega": True, "bias": False, "zero_decay_heads": 0,
                        "nu_over_d_init": 1.0, "tau_init": 1.5}),
}
