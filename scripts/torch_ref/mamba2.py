"""The `mamba2` mixer's reference: Mamba2's SSD layer (flash-linear-attention's Mamba2 layer, torch_forward)
as a fused block without an MLP (FLA's Mamba2Block: x += mamba2(norm(x))).

Mirrors src/mixers/mamba2.c (`mamba2_check_` -> parse_spec, `mamba2_params_` -> param_shapes,
`mamba2_forward_` -> forward); the C side runs the recurrence through the chunked engine src/nn/linrec.c.
Written from the upstream formulas (docs/mixers.md, Sources), not from the C code: the recurrence here is the plain
sequential one, token by token, with each head's state S (P x N) as the reference writes it.

Definition (docs/mixers.md, section `mamba2`), Di = floor(expand C) inner channels, H = Di / P heads of
P = head_dim channels, G = n_groups groups of N = d_state, CD = Di + 2 G N; names are seqtrain's parameter
names, relative to blocks.L.mixer.:
  [z | xBC | dt_raw] = x @ in_proj^T                                   (Di, CD, H columns)
  xBC = silu(conv_b + sum_j conv_w[:, j] xBC_{t-K+1+j})                (zero history; no conv_b without conv_bias)
  [x | B | C] = xBC (Di, G N, G N); head h uses group h // (H / G) of B and C
  dt = softplus(dt_raw + dt_bias) (the clamp to (0, inf) is the identity),  A = -exp(A_log)
  per head h:  S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T  (P x N, S_0 = 0),  y_t = S_t C_t + D_h x_t
  y = RMSNormGated(y, z): u = y * silu(z), each group of Di / G channels u / sqrt(mean(u^2) + norm_eps),
      times norm_w (Di,)  (norm_before_gate=False)
  out = y @ out_proj^T

self_test() (`torch_reference.py --self-test mamba2`) checks the sequential recurrence against the SSD
"attention" (T, T) form y = (L * (C B^T)) (dt x) + D x with L[t, s] = exp(sum_{s < l <= t} dt_l A), the
grouping of B/C against an explicitly per-head copy, causality, float64 gradcheck of the layer under every
option, and each mamba2 case end to end on random weights.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, check_layer_variants, softplus, t64

KIND = "mamba2"
OWNS_MLP = True     # FLA's Mamba2 block has no MLP: model.block "auto" makes its layers fused (MixerOps.owns_mlp)

# the mamba2 mixer's option defaults (docs/mixers.md, section `mamba2`; FLA Mamba2Config)
DEFAULTS = {
    "d_state": 128, "expand": 2.0, "head_dim": 64, "n_groups": 1, "conv": 4, "conv_bias": True, "chunk": 64,
    "A_init_lo": 1.0, "A_init_hi": 16.0, "dt_min": 0.001, "dt_max": 0.1, "dt_init_floor": 1e-4,
    "norm_eps": 1e-5, "init_std": 0.02, "rescale_prenorm_residual": True,
}


class Mamba2Spec:
    """The resolved options of one mamba2 layer: Di inner channels in H heads of P, G groups of N-long B and C,
    a K-tap conv over the CD = Di + 2 G N channels [x | B | C]."""

    kind = KIND

    def __init__(self, opts, d_model):
        self.opts = opts
        self.Di = int(math.floor(float(opts["expand"]) * d_model + 1e-9))
        self.P = int(opts["head_dim"])
        if self.Di < 1 or self.Di % self.P:
            raise ValueError(f"mamba2: head_dim {self.P} does not divide d_inner {self.Di}")
        self.H = self.Di // self.P
        self.G = int(opts["n_groups"])
        if self.H % self.G:
            raise ValueError(f"mamba2: n_groups {self.G} does not divide the {self.H} heads")
        self.N = int(opts["d_state"])
        self.K = int(opts["conv"])
        self.CD = self.Di + 2 * self.G * self.N
        self.conv_bias = bool(opts["conv_bias"])
        self.eps = float(opts["norm_eps"])


def parse_spec(opts, d_model):
    """The layer's Mamba2Spec from its resolved options (defaults filled in, "kind" included)."""
    return Mamba2Spec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {"in_proj": (spec.Di + spec.CD + spec.H, C),     # rows [z | xBC | dt_raw]
              "conv_w": (spec.CD, spec.K)}                     # [:, K-1] multiplies the current token
    if spec.conv_bias:
        shapes["conv_b"] = (spec.CD,)
    shapes["dt_bias"] = (spec.H,)
    shapes["A_log"] = (spec.H,)
    shapes["D"] = (spec.H,)
    shapes["norm_w"] = (spec.Di,)
    shapes["out_proj"] = (C, spec.Di)
    return shapes


def head_groups(spec):
    """The group of B and C each head reads: h // (H / G) (H / G consecutive heads share one group)."""
    return torch.arange(spec.H) // (spec.H // spec.G)


def ssd_sequential(xh, dt, A, Bh, Ch, D):
    """The SSD recurrence token by token. xh (B, T, H, P); dt (B, T, H); A, D (H,); Bh, Ch (B, T, H, N) (each
    head's own B and C). Per head: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T (P x N), y_t = S_t C_t + D x_t.
    Returns y (B, T, H, P)."""
    Bsz, T, H, P = xh.shape
    N = Bh.shape[-1]
    S = torch.zeros(Bsz, H, P, N, dtype=xh.dtype)
    ys = []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)                                           # (B, H)
        S = decay[..., None, None] * S + (dt[:, t, :, None] * xh[:, t]).unsqueeze(-1) * Bh[:, t].unsqueeze(-2)
        ys.append((S * Ch[:, t].unsqueeze(-2)).sum(-1) + D[:, None] * xh[:, t])
    return torch.stack(ys, 1)


def ssd_quadratic(xh, dt, A, Bh, Ch, D):
    """The same as the (T, T) "attention" form of the SSD paper: y = (L * (C B^T)) (dt x) + D x per head, with
    L[t, s] = exp(sum_{s < l <= t} dt_l A) for s <= t, 0 above the diagonal."""
    T = xh.shape[1]
    cum = torch.cumsum(dt * A, dim=1)                                             # (B, T, H)
    seg = cum.unsqueeze(2) - cum.unsqueeze(1)                                     # (B, t, s, H)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, T, T, 1)
    L = torch.where(mask, torch.exp(torch.where(mask, seg, torch.zeros_like(seg))), torch.zeros_like(seg))
    scores = torch.einsum("bthn,bshn->btsh", Ch, Bh) * L
    return torch.einsum("btsh,bshp->bthp", scores, dt.unsqueeze(-1) * xh) + D[:, None] * xh


def forward(x, P, prefix, spec, ssd=ssd_sequential):
    """One mamba2 mixer on the normalised input x (B, T, C) (the definition in the module docstring)."""
    Bsz, T, _ = x.shape
    Di, H, Pd, N, G, K, CD = spec.Di, spec.H, spec.P, spec.N, spec.G, spec.K, spec.CD
    proj = x @ P[prefix + "in_proj"].T
    z, xbc, dt_raw = proj[..., :Di], proj[..., Di:Di + CD], proj[..., Di + CD:]
    # causal depthwise convolution: out_t[c] = b[c] + sum_j w[c, j] in_{t - (K-1) + j}[c]
    pad = torch.cat([torch.zeros(Bsz, K - 1, CD, dtype=x.dtype), xbc], dim=1)
    conv = sum(P[prefix + "conv_w"][:, j] * pad[:, j:j + T] for j in range(K))
    if spec.conv_bias:
        conv = conv + P[prefix + "conv_b"]
    u = F.silu(conv)
    xs, Bm, Cm = u[..., :Di], u[..., Di:Di + G * N], u[..., Di + G * N:]
    dt = softplus(dt_raw + P[prefix + "dt_bias"])
    A = -torch.exp(P[prefix + "A_log"])
    grp = head_groups(spec)
    Bh = Bm.reshape(Bsz, T, G, N)[:, :, grp]                                      # (B, T, H, N)
    Ch = Cm.reshape(Bsz, T, G, N)[:, :, grp]
    y = ssd(xs.reshape(Bsz, T, H, Pd), dt, A, Bh, Ch, P[prefix + "D"]).reshape(Bsz, T, Di)
    # RMSNormGated with norm_before_gate=False: gate, then RMSNorm over each group of Di / G channels
    g = (y * F.silu(z)).reshape(Bsz, T, G, Di // G)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + spec.eps)
    return (g.reshape(Bsz, T, Di) * P[prefix + "norm_w"]) @ P[prefix + "out_proj"].T


# ----------------------------------------------------------------------------------------------------
# self-test (no C side needed)

def tiny_spec(C=8, **opts):
    """A Mamba2Spec for a tiny test layer: C 8 -> d_inner 16, head_dim 4 (4 heads), d_state 3, conv 3."""
    o = dict(DEFAULTS)
    o.update({"head_dim": 4, "d_state": 3, "conv": 3})
    o.update(opts)
    o["kind"] = KIND
    return Mamba2Spec(o, C)


def random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one mamba2 layer, away from the init: projections N(0, 0.5), dt =
    softplus(dt_bias) in [0.1, 1], -A in [0.3, 3], D in [0.5, 1.5], norm_w 1 +- 0.2."""
    g = np.random.default_rng(seed)
    P = {}
    for name, shape in param_shapes(spec, C).items():
        if name == "dt_bias":
            v = np.log(np.expm1(g.uniform(0.1, 1.0, shape)))
        elif name == "A_log":
            v = np.log(g.uniform(0.3, 3.0, shape))
        elif name == "D":
            v = g.uniform(0.5, 1.5, shape)
        elif name == "norm_w":
            v = 1 + 0.2 * g.normal(size=shape)
        else:
            v = 0.5 * g.normal(size=shape)
        P[prefix + name] = torch.tensor(v, dtype=DTYPE, requires_grad=True)
    return P


def self_test(whole):
    """Checks of the mamba2 reference on its own, and its cases through whole (selftest.WHOLE); returns the
    number of failures."""
    report = SelfChecks()
    torch.manual_seed(0)
    g = np.random.default_rng(3)

    # (a) the sequential recurrence == the (T, T) SSD form, with decays from 0.95 down to e^-6 per token
    Bsz, T, H, Pd, N = 2, 17, 3, 4, 5
    xh, Bh, Ch = (t64(g.normal(size=(Bsz, T, H, d))) for d in (Pd, N, N))
    dt = t64(g.uniform(0.05, 2.0, size=(Bsz, T, H)))
    A, D = t64(-g.uniform(0.5, 3.0, size=H)), t64(g.uniform(0.5, 1.5, size=H))
    ys, yq = ssd_sequential(xh, dt, A, Bh, Ch, D), ssd_quadratic(xh, dt, A, Bh, Ch, D)
    d = float((ys - yq).abs().max() / yq.abs().max())
    report(d < 1e-12, f"(a) sequential SSD recurrence == (T, T) form (L * C B^T)(dt x) + D x: max|dy|/max|y| {d:.1e}")

    # (b) grouping: 2 groups over 4 heads = heads 0, 1 read group 0 and heads 2, 3 group 1 (explicit copies)
    spec = tiny_spec(n_groups=2)
    Bm = t64(g.normal(size=(1, 3, 2 * spec.N)))
    Bh = Bm.reshape(1, 3, 2, spec.N)[:, :, head_groups(spec)]
    want = torch.stack([Bm[..., :spec.N]] * 2 + [Bm[..., spec.N:]] * 2, dim=2)
    report(bool(torch.equal(Bh, want)), "(b) n_groups 2 over 4 heads: heads 0-1 read group 0, heads 2-3 group 1")

    variants = {
        "defaults (1 group, conv bias)": {},
        "2 groups, conv 2 without bias": {"n_groups": 2, "conv": 2, "conv_bias": False},
        "2 groups, expand 1.5, head_dim 3, conv 1": {"n_groups": 2, "expand": 1.5, "head_dim": 3, "conv": 1},
    }
    # (c) the whole layer with either form, (d) causality, (e) gradcheck in float64
    check_layer_variants(report, forward, tiny_spec, random_params, variants, {"ssd": ssd_quadratic}, "cde")

    # (f) every mamba2 CASE: parameter names/shapes (no ln2/MLP: fused blocks), the full model forward and
    # backward on random weights, every SSM parameter with a nonzero gradient
    whole.check_cases_on_random_weights(report, "f", KIND, random_params, ("A_log", "dt_bias", "D"),
                                        "SSM gradients all nonzero")

    # (g) defaults: {"kind": "mamba2"} at d_model 128 resolves to the schema's table
    spec = whole.mixer_spec({"d_model": 128, "n_layers": 1, "mixer": {"kind": "mamba2"}}, 0)
    report(spec.Di == 256 and spec.P == 64 and spec.H == 4 and spec.N == 128 and spec.G == 1 and spec.K == 4
           and spec.conv_bias and spec.CD == 512 and spec.eps == 1e-5,
           "(g) defaults at d_model 128: d_inner 256, head_dim 64 (4 heads), d_state 128, 1 group, conv 4 with bias")
    return report.summary("mamba2")


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _mamba2_model(mixer=None, **extra):
    """A tiny all-mamba2 model: 2 fused blocks (x += mamba2(norm(x)), no MLP: block "auto" with OWNS_MLP),
    d_model 16 -> d_inner 32, head_dim 8 (4 heads), d_state 4. Chunk 5, so the probe's T = 24 and the training
    windows' 32 are not multiples of it. The dynamics start away from FLA's defaults (dt in [0.1, 0.6] and
    -A in [0.5, 3], so exp(dt A) spans 0.2 .. 0.95 over T = 24) and the projections at N(0, 0.3), so every
    path carries gradient well above the tolerance."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": KIND, "head_dim": 8, "d_state": 4, "chunk": 5, "init_std": 0.3, "dt_min": 0.1,
                   "dt_max": 0.6, "A_init_lo": 0.5, "A_init_hi": 3.0, **(mixer or {})}}
    m.update(extra)
    return m


CASES = {
    "mamba2": _mamba2_model(),
    "mamba2_groups_nobias_rmsnorm": _mamba2_model(
        mixer={"n_groups": 2, "conv": 3, "conv_bias": False, "expand": 1.5, "head_dim": 6, "chunk": 64,
               "rescale_prenorm_residual": False, "norm_eps": 1e-3},
        norm="rmsnorm", tie_embeddings=False),
}
