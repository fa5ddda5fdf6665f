"""The `kla` mixer's reference: Kalman Linear Attention in the fused Mamba-style block of the KLA paper.

Mirrors src/mixers/kla.c (options `kla_check_` -> parse_spec, `kla_params_` -> param_shapes,
`kla_dynamics_` -> dynamics, `kla_forward_` -> forward) and its scan src/nn/kalman.c (-> scan). Written
from the KLA paper, not from the C code: the discretised OU prior (eq. 7-8), the evidence model (eq. 9),
the information-form filter in its state-expanded matrix form (App. A eq. 22-23), read out as
y = sum_s q_s H / Lambda (Algorithm 1), inside the fused block of App. A.

Definition (docs/mixers.md section `kla`), M = round(expand C) channels, S = d_state slots, K conv taps;
names are seqtrain's parameter names, relative to blocks.L.mixer.:
  [z | gate] = x @ in_proj^T; u = silu(b + sum_j conv_w[:, j] z_{t-K+1+j}) (zero history);
  plain: [v | l | k | q] = u @ sensor_proj^T (M, M, S, S); mamba: v = u, [r | k | q] (R, S, S),
  l = r @ var_expand^T + var_expand_b; k, q L2-normalised over S (qk_norm, norm floor 1e-12);
  Lambda^v = 1 / (softplus(l) + obs_var_min); a = e^{lambda_log}, Delta = softplus(delta) + 1e-7,
  abar = e^{-a Delta}, p = max(process_noise, p_min), pbar = p/(2a)(1 - e^{-2a Delta}) (ou) | p Delta
  (zoh) | 0 (no process noise); per (m, s) from Lambda_0 = 1, H_0 = 0 with A2 = max(abar^2, 1e-12),
  Pn = max(pbar, 1e-12), Phi = k_s^2 Lambda^v_m:
    Lambda_t = ((1 + Pn Phi) Lambda_{t-1} + A2 Phi) / (Pn Lambda_{t-1} + A2)
    H_t = abar / (A2 + Pn Lambda_{t-1}) H_{t-1} + k_s Lambda^v_m v_m
  y_m = sum_s q_s H_t / Lambda_t (+ lambda_skip u_m) (* silu(gate_m)); out = y @ out_proj^T.
  Posterior-mean decoding only (model.mc_samples 1).

self_test() (`torch_reference.py --self-test kla`) checks it on its own: the scan against a textbook
moment-form Kalman filter (moment_form) and against the parallel Moebius/affine prefix scans of
Theorems 1-2 (parallel_scan), the p = 0 convolution form of Theorem 3, causality, gradcheck of the
layer under every option, and every case with a kla layer end to end on random weights.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, check_layer_variants, softplus, t64

KIND = "kla"
OWNS_MLP = True     # a fused block: model.block "auto" gives its layers no ln2 / MLP (MixerOps.owns_mlp)

# the kla mixer's option defaults (docs/mixers.md, section `kla`; KLA paper App. A)
DEFAULTS = {
    "d_state": 16, "expand": 1.0, "conv": 4, "sensors": "plain", "var_rank": 0, "qk_norm": True,
    "obs_var_min": 1e-4, "discretization": "ou", "process_noise": True, "p_init": 0.01, "p_min": 1e-7,
    "dt_min": 0.001, "dt_max": 0.1, "dt_floor": 1e-4, "gate": True, "skip": True, "skip_init": -1.0,
    "chunk": 64, "init_std": 0.02,
}


class KlaSpec:
    """The resolved options of one kla (Kalman Linear Attention) layer.

    M = round(expand * C) channels, S = d_state slots per channel, K conv taps; sensors "plain" projects
    [v | logvar | k | q] (2M + 2S rows) from u, "mamba" takes v = u and projects [r | k | q] (R + 2S
    rows) with the log-variance r W_ve^T + b_ve of rank R = var_rank (0: ceil(C / 8))."""

    kind = KIND

    def __init__(self, opts, d_model):
        self.opts = opts
        self.M = int(math.floor(float(opts["expand"]) * d_model + 0.5))
        self.S = int(opts["d_state"])
        self.K = int(opts["conv"])
        if self.M < 1 or self.S < 1 or self.K < 1:
            raise ValueError(f"kla: M {self.M}, S {self.S}, K {self.K}")
        for key, allowed in (("sensors", ("plain", "mamba")), ("discretization", ("ou", "zoh"))):
            if opts[key] not in allowed:
                raise ValueError(f"kla: {key} {opts[key]!r} (one of {', '.join(allowed)})")
        self.mamba = opts["sensors"] == "mamba"
        self.zoh = opts["discretization"] == "zoh"
        self.R = int(opts["var_rank"]) or -(-d_model // 8)
        self.noise = bool(opts["process_noise"])
        self.gate = bool(opts["gate"])
        self.skip = bool(opts["skip"])
        self.Ns = self.R + 2 * self.S if self.mamba else 2 * self.M + 2 * self.S


def parse_spec(opts, d_model):
    """The layer's KlaSpec from its resolved options (defaults filled in, "kind" included)."""
    return KlaSpec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {}
    M, S = spec.M, spec.S
    shapes["in_proj"] = ((2 if spec.gate else 1) * M, C)   # rows [z | gate]
    shapes["conv_w"] = (M, spec.K)                          # [:, K-1] multiplies the current token
    shapes["conv_b"] = (M,)
    shapes["sensor_proj"] = (spec.Ns, M)
    if spec.mamba:
        shapes["var_expand"] = (M, spec.R)
        shapes["var_expand_b"] = (M,)
    shapes["lambda_log"] = (M, S)
    if spec.noise:
        shapes["process_noise"] = (M, S)
    shapes["delta"] = (M, S)
    if spec.skip:
        shapes["lambda_skip"] = (1,)
    shapes["out_proj"] = (C, M)
    return shapes


DT_EPS = 1e-7        # Delta = softplus(delta) + 1e-7
NORM_EPS = 1e-12     # k / max(|k|, eps)
FLOOR = 1e-12        # the scan's floor on abar^2 and pbar


def dynamics(P, prefix, spec):
    """The time-invariant discrete dynamics of a kla layer, each (M, S) (KLA paper eq. 7-8, Table 2):
    the OU process dz = -a z dt + noise, a = exp(lambda_log) > 0, step Delta = softplus(delta) + 1e-7,
    abar = e^{-a Delta}; process noise p = max(process_noise, p_min) (seqtrain and the authors' code take
    the raw parameter as the diffusion variance: eq. 8 writes p^2) discretised exactly,
    pbar = p / (2a) (1 - e^{-2a Delta}) ("ou"), or pbar = p Delta ("zoh"); pbar = 0 without process noise."""
    o = spec.opts
    a = torch.exp(P[prefix + "lambda_log"])
    dt = softplus(P[prefix + "delta"]) + DT_EPS
    abar = torch.exp(-a * dt)
    if not spec.noise:
        return abar, torch.zeros_like(abar)
    p = torch.clamp_min(P[prefix + "process_noise"], float(o["p_min"]))
    pbar = p * dt if spec.zoh else p / (2 * a) * (1 - torch.exp(-2 * a * dt))
    return abar, pbar


def scan(v, prec, k, q, abar, pbar):
    """The information-form Kalman filter of KLA, sequentially, in the state-expanded matrix form of the
    paper (App. A eq. 22-23; Theorems 1-2 for one slot). Per batch row, channel m (of M) and slot s (of S):
        Phi_t    = k_t[s]^2 Lambda^v_t[m]
        Lambda_t = ((1 + P Phi_t) Lambda_{t-1} + A^2 Phi_t) / (P Lambda_{t-1} + A^2)       (Moebius, eq. 22)
        H_t      = abar / (A^2 + P Lambda_{t-1}) H_{t-1} + k_t[s] Lambda^v_t[m] v_t[m]   (affine, eq. 23)
        y_t[m]   = sum_s q_t[s] H_t / Lambda_t,   yvar_t[m] = sum_s q_t[s]^2 / Lambda_t   (Algorithm 1, l. 12-14)
    from Lambda_0 = 1, H_0 = 0, with A^2 = max(abar^2, 1e-12) and P = max(pbar, 1e-12) (the floors that
    keep the no-process-noise ablation finite). v, prec (B, T, M); k, q (B, T, S); abar, pbar (M, S).
    Returns y, yvar (B, T, M)."""
    B, T, M = v.shape
    S = k.shape[-1]
    A2 = torch.clamp_min(abar * abar, FLOOR)
    Pn = torch.clamp_min(pbar, FLOOR)
    lam = torch.ones(B, M, S, dtype=v.dtype)
    H = torch.zeros(B, M, S, dtype=v.dtype)
    ys, yvars = [], []
    for t in range(T):
        kt, qt = k[:, t].unsqueeze(1), q[:, t].unsqueeze(1)             # (B, 1, S)
        Lv = prec[:, t].unsqueeze(-1)                                    # (B, M, 1)
        Phi = kt * kt * Lv
        den = Pn * lam + A2
        lam_new = ((1 + Pn * Phi) * lam + A2 * Phi) / den
        H = abar / den * H + kt * (Lv * v[:, t].unsqueeze(-1))
        lam = lam_new
        ys.append((qt * H / lam).sum(-1))
        yvars.append((qt * qt / lam).sum(-1))
    return torch.stack(ys, 1), torch.stack(yvars, 1)


def forward(x, P, prefix, spec):
    """One kla mixer (the fused Mamba-style block of the KLA paper, App. A / Figure 7 / Algorithm 1) on
    the normalised input x (B, T, C):
        [z | gate] = x W_in^T;  u = silu(causal depthwise conv_K(z) + b)     (K taps, zero history)
        plain: [v | l | k | q] = u W_s^T;   mamba: v = u, [r | k | q] = u W_s^T, l = r W_ve^T + b_ve
        k, q <- k / |k|, q / |q| (qk_norm);  Lambda^v = 1 / (softplus(l) + obs_var_min)
        y = scan(v, Lambda^v, k, q, abar, pbar) + lambda_skip u;  y <- y silu(gate);  out = y W_out^T"""
    B, T, _ = x.shape
    M, S, K, o = spec.M, spec.S, spec.K, spec.opts
    zg = x @ P[prefix + "in_proj"].T
    z = zg[..., :M]
    # causal depthwise convolution: zc_t[m] = b[m] + sum_j w[m, j] z_{t - (K-1) + j}[m]
    zpad = torch.cat([torch.zeros(B, K - 1, M, dtype=x.dtype), z], dim=1)
    zc = P[prefix + "conv_b"] + sum(P[prefix + "conv_w"][:, j] * zpad[:, j:j + T] for j in range(K))
    u = F.silu(zc)
    sens = u @ P[prefix + "sensor_proj"].T
    if spec.mamba:
        R = spec.R
        v = u
        logvar = sens[..., :R] @ P[prefix + "var_expand"].T + P[prefix + "var_expand_b"]
        k, q = sens[..., R:R + S], sens[..., R + S:R + 2 * S]
    else:
        v, logvar = sens[..., :M], sens[..., M:2 * M]
        k, q = sens[..., 2 * M:2 * M + S], sens[..., 2 * M + S:]
    if o["qk_norm"]:
        k = k / k.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
        q = q / q.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
    prec = 1.0 / (softplus(logvar) + float(o["obs_var_min"]))
    abar, pbar = dynamics(P, prefix, spec)
    y, _ = scan(v, prec, k, q, abar, pbar)
    if spec.skip:
        y = y + P[prefix + "lambda_skip"] * u
    if spec.gate:
        y = y * F.silu(zg[..., M:])
    return y @ P[prefix + "out_proj"].T


# ----------------------------------------------------------------------------------------------------
# self-test (no C side needed)

def tiny_spec(C=4, **opts):
    """A KlaSpec for a tiny test layer: d_state 3, conv 3."""
    o = dict(DEFAULTS)
    o.update({"d_state": 3, "conv": 3})
    o.update(opts)
    o["kind"] = KIND
    return KlaSpec(o, C)


def random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one kla layer, away from the init: projections N(0, 0.5), a =
    e^{lambda_log} in [0.4, 2.7], Delta in [0.05, 0.6], p in [0.1, 1], lambda_skip in [-1.5, 0.5]."""
    g = np.random.default_rng(seed)
    P = {}
    for name, shape in param_shapes(spec, C).items():
        if name == "lambda_log":
            v = g.uniform(-1, 1, shape)
        elif name == "delta":
            v = np.log(np.expm1(g.uniform(0.05, 0.6, shape)))
        elif name == "process_noise":
            v = g.uniform(0.1, 1.0, shape)
        elif name == "lambda_skip":
            v = g.uniform(-1.5, 0.5, shape)
        elif name in ("conv_b", "var_expand_b"):
            v = g.normal(0, 0.3, shape)
        else:
            v = g.normal(0, 0.5, shape)
        P[prefix + name] = torch.tensor(v, dtype=DTYPE, requires_grad=True)
    return P


def moment_form(v, prec, k, q, abar, pbar):
    """The textbook (moment-form) Kalman filter of the same model, element by element with Python floats:
    prior z_0 ~ N(0, 1); predict mu- = abar mu, P- = abar^2 P + pbar; update with the gain
    G = P- k / (k^2 P- + 1/Lambda^v): mu = mu- + G (v - k mu-), P = (1 - G k) P-; y = sum_s q mu,
    yvar = sum_s q^2 P. Same shapes as scan."""
    B, T, M = v.shape
    S = k.shape[-1]
    y, yv = np.zeros((B, T, M)), np.zeros((B, T, M))
    v, prec, k, q, abar, pbar = (t.detach().numpy() for t in (v, prec, k, q, abar, pbar))
    for b in range(B):
        for m in range(M):
            for s in range(S):
                mu, var, a, pn = 0.0, 1.0, float(abar[m, s]), float(pbar[m, s])
                for t in range(T):
                    kk = float(k[b, t, s])
                    mp, vp = a * mu, a * a * var + pn
                    gain = vp * kk / (kk * kk * vp + 1.0 / float(prec[b, t, m]))
                    mu, var = mp + gain * (float(v[b, t, m]) - kk * mp), (1.0 - gain * kk) * vp
                    y[b, t, m] += float(q[b, t, s]) * mu
                    yv[b, t, m] += float(q[b, t, s]) ** 2 * var
    return y, yv


def parallel_scan(v, prec, k, q, abar, pbar):
    """The scan of Theorems 1-2 as parallel prefix scans (Hillis-Steele, log2 T rounds): the precision by
    composing the 2x2 Moebius matrices M_t = [[1 + pbar phi_t, abar^2 phi_t], [pbar, abar^2]] (eq. 17),
    lambda_t = M_{1:t}(lambda_0); then the information mean by composing the affine maps (f_t, b_t),
    f_t = abar / (abar^2 + pbar lambda_{t-1}), b_t = k_t Lambda^v_t v_t (eq. 19, Corollary 2.1). No floors
    (pbar > 0 here). Returns y, yvar like scan."""
    B, T, M = v.shape
    phi = (k * k).unsqueeze(2) * prec.unsqueeze(-1)                       # (B, T, M, S)
    a2 = (abar * abar).expand_as(phi)
    pb = pbar.expand_as(phi)
    mats = torch.stack([torch.stack([1 + pb * phi, a2 * phi], -1), torch.stack([pb, a2], -1)], -2)
    step = 1
    while step < T:                                                       # inclusive scan: M_t ... M_1
        mats = torch.cat([mats[:, :step], mats[:, step:] @ mats[:, :-step]], dim=1)
        mats = mats / mats[..., :1, :1].abs()                             # a Moebius matrix up to scale
        step *= 2
    lam = (mats[..., 0, 0] + mats[..., 0, 1]) / (mats[..., 1, 0] + mats[..., 1, 1])   # lambda_0 = 1
    lam_prev = torch.cat([torch.ones_like(lam[:, :1]), lam[:, :-1]], dim=1)
    f = abar / (abar * abar + pbar * lam_prev)
    bt = k.unsqueeze(2) * (prec * v).unsqueeze(-1)
    step = 1
    while step < T:                                                       # (f2, b2) o (f1, b1) = (f2 f1, f2 b1 + b2)
        f, bt = (torch.cat([f[:, :step], f[:, step:] * f[:, :-step]], 1),
                 torch.cat([bt[:, :step], f[:, step:] * bt[:, :-step] + bt[:, step:]], 1))
        step *= 2
    eta = bt                                                              # eta_0 = 0
    return (q.unsqueeze(2) * eta / lam).sum(-1), (q.unsqueeze(2) ** 2 / lam).sum(-1)


def self_test(whole):
    """Checks of the kla reference on its own: the scan against a moment-form Kalman filter and against
    the parallel Moebius/affine scans of Theorems 1-2, the p = 0 closed form (Theorem 3), causality,
    gradcheck of the layer, and every kla CASE end to end (through whole: selftest.WHOLE). Returns the number
    of failures."""
    torch.manual_seed(0)
    report = SelfChecks()

    g = np.random.default_rng(3)
    B, T, M, S = 2, 37, 3, 4
    v, k, q = t64(g.normal(size=(B, T, M))), t64(g.normal(size=(B, T, S))), t64(g.normal(size=(B, T, S)))
    prec = t64(0.2 + 3 * g.uniform(size=(B, T, M)))
    abar, pbar = t64(0.5 + 0.49 * g.uniform(size=(M, S))), t64(0.01 + 0.5 * g.uniform(size=(M, S)))

    # (a) information form == moment form (the paper's Theorem 2 corollary: mu = eta / lambda)
    y, yv = scan(v, prec, k, q, abar, pbar)
    ym, yvm = moment_form(v, prec, k, q, abar, pbar)
    d, dv = float(np.abs(y.numpy() - ym).max()), float(np.abs(yv.numpy() - yvm).max())
    report(d < 1e-12 and dv < 1e-12, f"(a) information-form scan == moment-form Kalman filter (T={T}): "
                                      f"max|dy| {d:.1e}, max|dyvar| {dv:.1e}")
    # with tiny and large precisions (a near-ignored and a near-exact observation)
    prec2 = t64(np.exp(g.uniform(-8, 8, size=(B, T, M))))
    y, yv = scan(v, prec2, k, q, abar, pbar)
    ym, yvm = moment_form(v, prec2, k, q, abar, pbar)
    d = float(np.abs(y.numpy() - ym).max() / np.abs(ym).max())
    report(d < 1e-10, f"(a) same with Lambda^v over e^-8..e^8: max|dy|/max|y| {d:.1e}")

    # (b) sequential == the parallel Moebius (Theorem 1) and affine (Theorem 2) prefix scans
    y, yv = scan(v, prec, k, q, abar, pbar)
    yp, yvp = parallel_scan(v, prec, k, q, abar, pbar)
    d = max(float((y - yp).abs().max()), float((yv - yvp).abs().max()))
    report(d < 1e-11, f"(b) sequential scan == parallel Moebius/affine prefix scans: max|diff| {d:.1e}")

    # (c) p = 0, abar and k time-invariant: Theorem 3's convolutions lambda_t = a^-2t + sum_j a^-2(t-j) phi_j,
    # eta_t = sum_j a^-(t-j) k Lambda^v_j v_j (the floor on pbar changes it by ~1e-12 relative)
    Tc = 12
    kc = t64(np.broadcast_to(g.normal(size=(1, 1, S)), (B, Tc, S)).copy())
    vc, pc = v[:, :Tc], prec[:, :Tc]
    y, _ = scan(vc, pc, kc, q[:, :Tc], abar, torch.zeros_like(pbar))
    lam = torch.zeros(B, Tc, M, S, dtype=DTYPE)
    eta = torch.zeros(B, Tc, M, S, dtype=DTYPE)
    for t in range(Tc):
        lam[:, t] = abar ** (-2 * (t + 1))
        for j in range(t + 1):
            lam[:, t] += abar ** (-2 * (t - j)) * kc[:, j].unsqueeze(1) ** 2 * pc[:, j].unsqueeze(-1)
            eta[:, t] += abar ** (-(t - j)) * kc[:, j].unsqueeze(1) * (pc[:, j] * vc[:, j]).unsqueeze(-1)
    yc = (q[:, :Tc].unsqueeze(2) * eta / lam).sum(-1)
    d = float((y - yc).abs().max() / yc.abs().max())
    report(d < 1e-9, f"(c) pbar = 0, LTI: scan == Theorem 3's convolutions: max|dy|/max|y| {d:.1e}")

    variants = {
        "plain, ou": {},
        "mamba, zoh, no qk_norm, expand 1.5": {"sensors": "mamba", "discretization": "zoh", "qk_norm": False,
                                               "expand": 1.5},
        "mamba, var_rank 2, conv 1": {"sensors": "mamba", "var_rank": 2, "conv": 1},
        "no process noise": {"process_noise": False},
        "no gate, no skip, conv 4": {"gate": False, "skip": False, "conv": 4},
    }
    # (d) causality; (e) gradcheck in float64 w.r.t. the input and every parameter of the layer (one form: no
    # layer-level equality here, (a)-(c) checked the scan's)
    check_layer_variants(report, forward, tiny_spec, random_params, variants, None, " de", C=4, grad_T=7)

    # (f) every case with a kla layer: parameter names/shapes (no ln2/MLP in fused blocks), the full model
    # forward and backward on random weights, every SSM parameter with a nonzero gradient
    whole.check_cases_on_random_weights(report, "f", KIND, random_params,
                                        ("lambda_log", "delta", "process_noise", "lambda_skip"),
                                        "SSM gradients all nonzero")

    # (g) defaults: {"kind": "kla"} alone resolves to the schema's table
    spec = whole.mixer_spec({"d_model": 16, "n_layers": 1, "mixer": {"kind": "kla"}}, 0)
    report(spec.M == 16 and spec.S == 16 and spec.K == 4 and not spec.mamba and not spec.zoh and spec.R == 2
           and spec.noise and spec.gate and spec.skip and spec.Ns == 64,
           "(g) defaults: M = C, S 16, K 4, plain, ou, process noise, gate, skip (Ns = 2M + 2S), R = ceil(C/8)")
    return report.summary("kla")


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _kla_model(mixer=None, **extra):
    """A tiny all-KLA model: 2 fused blocks (x += kla(norm(x)), no MLP), d_model 16, d_state 4. The
    dynamics start away from the defaults (larger Delta and process noise, so abar ~ 0.6-0.95 and the
    Moebius denominator is far from abar^2 over T = 24) and the 3 training steps move every SSM
    parameter off its init, so the lambda_log / delta / process_noise gradients are well above the
    tolerance. The projections start at N(0, 0.3) (the mixer's init_std; 0.02 by default) so that the
    sensors, and hence Lambda^v, k and q, vary strongly from token to token."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3, "block": "fused",
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": KIND, "d_state": 4, "init_std": 0.3, "p_init": 0.5, "dt_min": 0.05, "dt_max": 0.5,
                   **(mixer or {})}}
    m.update(extra)
    return m


# (gpt_kla, a stack of attention blocks with a last kla block, is in cases.py with the other cases that
# mix kinds; the self-test above checks every case that has a kla layer)
CASES = {
    "kla_plain": _kla_model(),
    "kla_mamba_zoh": _kla_model(
        mixer={"sensors": "mamba", "discretization": "zoh", "qk_norm": False, "expand": 1.5, "conv": 3,
               "obs_var_min": 0.05, "skip_init": 0.5}, norm="rmsnorm", tie_embeddings=False),
    "kla_nonoise": _kla_model(
        mixer={"process_noise": False, "gate": False, "dt_min": 0.01, "dt_max": 0.1, "d_state": 3}),
}
