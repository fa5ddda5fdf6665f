"""The `mamba` mixer's reference: Mamba-1's selective SSM block (state-spaces/mamba's `Mamba` module,
mamba_ssm/modules/mamba_simple.py with its selective_scan_ref; flash-linear-attention's fla/layers/mamba.py
slow_forward computes the same) as a fused block without an MLP (FLA's MambaBlock: x += mamba(norm(x))).

Mirrors src/mixers/mamba.c (`mamba_check_` -> parse_spec, `mamba_params_` -> param_shapes, `mamba_forward_`
-> forward); the C side runs the recurrence through the chunked engine src/nn/linrec.c. Written from the upstream
formulas (docs/mixers.md, section `mamba`), not from the C code: the scan here is the plain sequential one, token
by token, with each channel's state h (N,) as selective_scan_ref writes it.

Definition, Di = floor(expand C) inner channels, N = d_state, R = dt_rank (0: ceil(C / 16)), K = conv; names are
seqtrain's parameter names, relative to blocks.L.mixer.:
  [xi | z] = x @ in_proj^T                                            (Di, Di columns)
  u = silu(conv_b + sum_j conv_w[:, j] xi_{t-K+1+j})                  (zero history; no conv_b without conv_bias)
  [dt_low | B | C] = u @ x_proj^T                                     (R, N, N columns)
  dt = softplus(dt_low @ dt_proj^T + dt_bias),  A = -exp(A_log)       (Di,), (Di, N)
  per channel d:  h_t = exp(dt_t A_d) * h_{t-1} + dt_t B_t u_t  (N,), h_0 = 0;  y_t = C_t . h_t + D_d u_t
  out = (y * silu(z)) @ out_proj^T

self_test() (`torch_reference.py --self-test mamba`) checks the sequential scan against the unrolled (T, T)
form y_t = sum_{s<=t} (C_t * exp(A sum_{s<l<=t} dt_l) * dt_s B_s) . 1 u_s + D u_t, causality, float64 gradcheck
of the layer under every option, and each mamba case end to end on random weights.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, check_layer_variants, softplus, t64

KIND = "mamba"
OWNS_MLP = True     # FLA's MambaBlock has no MLP: model.block "auto" makes its layers fused (MixerOps.owns_mlp)

# the mamba mixer's option defaults (docs/mixers.md, section `mamba`; mamba_ssm's Mamba / FLA's MambaConfig)
DEFAULTS = {
    "d_state": 16, "expand": 2.0, "dt_rank": 0, "conv": 4, "conv_bias": True, "chunk": 8,
    "dt_min": 0.001, "dt_max": 0.1, "dt_init_floor": 1e-4, "dt_init": "random", "dt_scale": 1.0,
    "init_std": 0.02, "rescale_prenorm_residual": False,
}


class MambaSpec:
    """The resolved options of one mamba layer: Di inner channels with N states each, a rank-R step-size
    projection, a K-tap conv over the Di channels of x."""

    kind = KIND

    def __init__(self, opts, d_model):
        self.opts = opts
        self.Di = int(math.floor(float(opts["expand"]) * d_model + 1e-9))
        if self.Di < 1:
            raise ValueError(f"mamba: expand {opts['expand']} gives no inner channels")
        self.N = int(opts["d_state"])
        self.R = int(opts["dt_rank"]) or math.ceil(d_model / 16)
        self.K = int(opts["conv"])
        self.conv_bias = bool(opts["conv_bias"])


def parse_spec(opts, d_model):
    """The layer's MambaSpec from its resolved options (defaults filled in, "kind" included)."""
    return MambaSpec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {"in_proj": (2 * spec.Di, C),                      # rows [x | z]
              "conv_w": (spec.Di, spec.K)}                      # [:, K-1] multiplies the current token
    if spec.conv_bias:
        shapes["conv_b"] = (spec.Di,)
    shapes["x_proj"] = (spec.R + 2 * spec.N, spec.Di)           # rows [dt_low | B | C]
    shapes["dt_proj"] = (spec.Di, spec.R)
    shapes["dt_bias"] = (spec.Di,)                              # dt_proj's bias
    shapes["A_log"] = (spec.Di, spec.N)
    shapes["D"] = (spec.Di,)
    shapes["out_proj"] = (C, spec.Di)
    return shapes


def scan_sequential(u, dt, A, Bm, Cm, D):
    """The selective scan token by token (selective_scan_ref). u, dt (B, T, Di); A (Di, N); Bm, Cm (B, T, N);
    D (Di,). Per channel: h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t, y_t = C_t . h_t + D u_t. Returns y (B, T, Di)."""
    Bsz, T, Di = u.shape
    h = torch.zeros(Bsz, Di, A.shape[1], dtype=u.dtype)
    ys = []
    for t in range(T):
        dA = torch.exp(dt[:, t, :, None] * A)                                       # (B, Di, N)
        h = dA * h + (dt[:, t] * u[:, t])[..., None] * Bm[:, t, None, :]
        ys.append((h * Cm[:, t, None, :]).sum(-1) + D * u[:, t])
    return torch.stack(ys, 1)


def scan_quadratic(u, dt, A, Bm, Cm, D):
    """The same unrolled: y_t = sum_{s<=t} sum_n C_tn exp(A_n sum_{s<l<=t} dt_l) dt_s B_sn u_s + D u_t."""
    T = u.shape[1]
    cum = torch.cumsum(dt, dim=1)                                                   # (B, T, Di)
    seg = cum.unsqueeze(2) - cum.unsqueeze(1)                                       # (B, t, s, Di)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, T, T, 1, 1)
    L = torch.exp(torch.where(mask, seg.unsqueeze(-1) * A, torch.full_like(seg.unsqueeze(-1) * A, -math.inf)))
    w = torch.einsum("btsdn,btn,bsn->btsd", L, Cm, Bm)
    return torch.einsum("btsd,bsd->btd", w, dt * u) + D * u


def forward(x, P, prefix, spec, scan=scan_sequential):
    """One mamba mixer on the normalised input x (B, T, C) (the definition in the module docstring)."""
    Bsz, T, _ = x.shape
    Di, N, R, K = spec.Di, spec.N, spec.R, spec.K
    proj = x @ P[prefix + "in_proj"].T
    xi, z = proj[..., :Di], proj[..., Di:]
    # causal depthwise convolution: out_t[c] = b[c] + sum_j w[c, j] in_{t - (K-1) + j}[c]
    pad = torch.cat([torch.zeros(Bsz, K - 1, Di, dtype=x.dtype), xi], dim=1)
    conv = sum(P[prefix + "conv_w"][:, j] * pad[:, j:j + T] for j in range(K))
    if spec.conv_bias:
        conv = conv + P[prefix + "conv_b"]
    u = F.silu(conv)
    sel = u @ P[prefix + "x_proj"].T
    dt_low, Bm, Cm = sel[..., :R], sel[..., R:R + N], sel[..., R + N:]
    dt = softplus(dt_low @ P[prefix + "dt_proj"].T + P[prefix + "dt_bias"])
    A = -torch.exp(P[prefix + "A_log"])
    y = scan(u, dt, A, Bm, Cm, P[prefix + "D"])
    return (y * F.silu(z)) @ P[prefix + "out_proj"].T


# ----------------------------------------------------------------------------------------------------
# self-test (no C side needed)

def tiny_spec(C=8, **opts):
    """A MambaSpec for a tiny test layer: C 8 -> d_inner 16, d_state 3, conv 3, dt_rank auto (1)."""
    o = dict(DEFAULTS)
    o.update({"d_state": 3, "conv": 3})
    o.update(opts)
    o["kind"] = KIND
    return MambaSpec(o, C)


def random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one mamba layer, away from the init: matrices N(0, 0.5), dt =
    softplus(dt_bias) in [0.1, 1] before the projection's part, -A in [0.3, 3], D in [0.5, 1.5]."""
    g = np.random.default_rng(seed)
    P = {}
    for name, shape in param_shapes(spec, C).items():
        if name == "dt_bias":
            v = np.log(np.expm1(g.uniform(0.1, 1.0, shape)))
        elif name == "A_log":
            v = np.log(g.uniform(0.3, 3.0, shape))
        elif name == "D":
            v = g.uniform(0.5, 1.5, shape)
        else:
            v = 0.5 * g.normal(size=shape)
        P[prefix + name] = torch.tensor(v, dtype=DTYPE, requires_grad=True)
    return P


def self_test(whole):
    """Checks of the mamba reference on its own, and its cases through whole (selftest.WHOLE); returns the
    number of failures."""
    report = SelfChecks()
    torch.manual_seed(0)
    g = np.random.default_rng(3)

    # (a) the sequential scan == its unrolled (T, T) form, with decays from ~0.97 down to e^-6 per token
    Bsz, T, Di, N = 2, 17, 3, 4
    u, dt = t64(g.normal(size=(Bsz, T, Di))), t64(g.uniform(0.05, 2.0, size=(Bsz, T, Di)))
    Bm, Cm = t64(g.normal(size=(Bsz, T, N))), t64(g.normal(size=(Bsz, T, N)))
    A, D = t64(-g.uniform(0.5, 3.0, size=(Di, N))), t64(g.uniform(0.5, 1.5, size=Di))
    ys, yq = scan_sequential(u, dt, A, Bm, Cm, D), scan_quadratic(u, dt, A, Bm, Cm, D)
    d = float((ys - yq).abs().max() / yq.abs().max())
    report(d < 1e-12, f"(a) sequential selective scan == unrolled (T, T) form: max|dy|/max|y| {d:.1e}")

    variants = {
        "defaults (dt_rank auto, conv bias)": {},
        "dt_rank 3, conv 2 without bias": {"dt_rank": 3, "conv": 2, "conv_bias": False},
        "expand 1.5, d_state 2, conv 1": {"expand": 1.5, "d_state": 2, "conv": 1},
    }
    # (b) the whole layer with either form, (c) causality, (d) gradcheck in float64
    check_layer_variants(report, forward, tiny_spec, random_params, variants, {"scan": scan_quadratic}, "bcd")

    # (e) every mamba CASE: parameter names/shapes (no ln2/MLP: fused blocks), the full model forward and
    # backward on random weights, every SSM parameter with a nonzero gradient
    whole.check_cases_on_random_weights(report, "e", KIND, random_params, ("A_log", "dt_bias", "dt_proj", "D"),
                                        "SSM gradients all nonzero")

    # (f) defaults: {"kind": "mamba"} at d_model 128 resolves to mamba_ssm's Mamba(d_model=128)
    spec = whole.mixer_spec({"d_model": 128, "n_layers": 1, "mixer": {"kind": "mamba"}}, 0)
    report(spec.Di == 256 and spec.N == 16 and spec.R == 8 and spec.K == 4 and spec.conv_bias,
           "(f) defaults at d_model 128: d_inner 256, d_state 16, dt_rank ceil(128/16) = 8, conv 4 with bias")
    return report.summary("mamba")


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _mamba_model(mixer=None, **extra):
    """A tiny all-mamba model: 2 fused blocks (x += mamba(norm(x)), no MLP: block "auto" with OWNS_MLP),
    d_model 16 -> d_inner 32, d_state 4, dt_rank auto (1). Chunk 5, so the probe's T = 24 and the training
    windows' 32 are not multiples of it. dt starts in [0.1, 0.6] (with -A = 1..4 the decays exp(dt A) span
    0.09 .. 0.9 per token) and the projections at N(0, 0.3), so every path carries gradient well above the
    tolerance."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": KIND, "d_state": 4, "chunk": 5, "init_std": 0.3, "dt_min": 0.1, "dt_max": 0.6,
                   **(mixer or {})}}
    m.update(extra)
    return m


CASES = {
    "mamba": _mamba_model(),
    "mamba_rank3_nobias_rmsnorm": _mamba_model(
        mixer={"dt_rank": 3, "conv": 3, "conv_bias": False, "expand": 1.5, "chunk": 64, "dt_init": "constant",
               "dt_scale": 0.5, "rescale_prenorm_residual": True},
        norm="rmsnorm", tie_embeddings=False),
}
