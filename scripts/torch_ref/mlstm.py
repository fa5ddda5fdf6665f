"""The `mlstm` mixer's reference: xLSTM's mLSTM layer (NX-AI/xlstm, xlstm/blocks/mlstm/{layer,cell,backends}.py)
as a fused block without an MLP (xLSTM's mLSTM block: x += mlstm(norm(x))).

Mirrors src/mixers/mlstm.c (`ml_check_` -> parse_spec, `ml_params_` -> param_shapes, `ml_forward_` ->
forward); the C side runs the recurrence through the chunked engine src/nn/linrec.c. Written from
the upstream formulas (docs/mixers.md, Sources), not from the C code: the cell here is the parallel stabilised form
(xLSTM's parallel_stabilized_simple, a (T, T) matrix per head), the conv PyTorch's Conv1d, the outnorm
F.group_norm, as xLSTM builds them.

Definition (docs/mixers.md, section `mlstm`), I = ceil(proj_factor C / round_to) round_to inner channels,
H heads of D = I / H, K conv taps, blocks of bs = qkv_blocksize; names are seqtrain's parameter names,
relative to blocks.L.mixer.:
  [x_m | z] = x @ proj_up^T                                              (I, I columns)
  x_c = silu(Conv1d(x_m) + conv_b) causal depthwise (zero history; K = 0: x_c = x_m, no silu)
  q = blockdiag(x_c, q_proj), k = blockdiag(x_c, k_proj), v = blockdiag(x_m, v_proj)
      blockdiag(u, W)[g*bs + o] = sum_i W[g, o, i] u[g*bs + i]             (LinearHeadwiseExpand, no bias)
  i~ = [q | k | v] @ igate_w^T + igate_b,  f~ = [q | k | v] @ fgate_w^T + fgate_b     (one per head)
  per head: log D[t, s] = sum_{s < l <= t} logsigmoid(f~_l) + i~_s (s <= t), m_t = max_s log D[t, s],
      C = (q k^T / sqrt(D)) * exp(log D - m),  h_t = sum_s C[t, s] v_s / (max(|sum_s C[t, s]|, exp(-m_t)) + 1e-6)
  h = GroupNorm(h, H groups, weight outnorm, no bias, eps norm_eps) + skip * x_c     (MultiHeadLayerNorm)
  out = (h * silu(z)) @ proj_down^T

self_test() (`torch_reference.py --self-test mlstm`) checks the parallel form against the stabilised
recurrence of B.11 token by token (C, n, m with m before the first token = -inf), causality, float64
gradcheck of the layer under every option, each mlstm case end to end on random weights, and the defaults.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, check_layer_variants, t64

KIND = "mlstm"
OWNS_MLP = True     # xLSTM's mLSTM block has no MLP: model.block "auto" makes its layers fused (MixerOps.owns_mlp)

# the mlstm mixer's option defaults (docs/mixers.md, section `mlstm`; xLSTM's mLSTMLayerConfig / mLSTMCell)
DEFAULTS = {
    "heads": 4, "proj_factor": 2.0, "round_to": 64, "conv": 4, "qkv_blocksize": 4, "chunk": 64,
    "fgate_bias_lo": 3.0, "fgate_bias_hi": 6.0, "igate_bias_std": 0.1, "norm_eps": 1e-5,
}

CELL_EPS = 1e-6     # parallel_stabilized_simple's eps on the normaliser


class MlstmSpec:
    """The resolved options of one mlstm layer: I inner channels in H heads of D, a K-tap conv, q/k/v
    projections in I / bs blocks of bs."""

    kind = KIND

    def __init__(self, opts, d_model):
        self.opts = opts
        r = int(opts["round_to"])
        self.I = int(math.ceil(float(opts["proj_factor"]) * d_model / r)) * r   # xLSTM's UpProjConfigMixin
        self.H = int(opts["heads"])
        self.K = int(opts["conv"])
        self.bs = int(opts["qkv_blocksize"])
        if self.I % self.H or self.I % self.bs:
            raise ValueError(f"mlstm: heads {self.H} and qkv_blocksize {self.bs} must divide the inner width {self.I}")
        self.D = self.I // self.H
        self.G = self.I // self.bs
        self.eps = float(opts["norm_eps"])


def parse_spec(opts, d_model):
    """The layer's MlstmSpec from its resolved options (defaults filled in, "kind" included)."""
    return MlstmSpec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    I, H = spec.I, spec.H
    s = {"proj_up": (2 * I, C)}                      # rows [x_m | z]
    if spec.K:
        s["conv_w"] = (I, spec.K)                    # [:, K-1] multiplies the current token
        s["conv_b"] = (I,)
    for n in ("q_proj", "k_proj", "v_proj"):
        s[n] = (spec.G, spec.bs, spec.bs)            # (blocks, out, in) as LinearHeadwiseExpand.weight
    s["igate_w"] = (H, 3 * I)                        # columns [q | k | v]
    s["igate_b"] = (H,)
    s["fgate_w"] = (H, 3 * I)
    s["fgate_b"] = (H,)
    s["outnorm"] = (I,)
    s["skip"] = (I,)
    s["proj_down"] = (C, I)
    return s


def headwise(u, W):
    """xLSTM's LinearHeadwiseExpand without bias: u (..., G*bs) as G blocks, each through W[g] (bs_out, bs_in)."""
    G = W.shape[0]
    x = u.reshape(*u.shape[:-1], G, -1)
    return torch.einsum("...hd,hod->...ho", x, W).reshape(*u.shape[:-1], -1)


def parallel_stabilized(q, k, v, ig, fg):
    """xLSTM's parallel_stabilized_simple (row-wise stabilisation): q, k, v (B, H, T, D); ig, fg (B, H, T).
    Returns h (B, H, T, D) and the row maxima m (B, H, T)."""
    B, H, T, D = q.shape
    lf = F.logsigmoid(fg)
    cum = torch.cat([torch.zeros(B, H, 1, dtype=q.dtype), torch.cumsum(lf, dim=-1)], dim=-1)   # (B, H, T+1)
    ltr = torch.tril(torch.ones(T, T, dtype=torch.bool))
    logf = cum[..., 1:, None] - cum[..., None, 1:]                     # [t, s] = sum_{s < l <= t} lf_l
    logD = torch.where(ltr, logf + ig[..., None, :], torch.tensor(-math.inf, dtype=q.dtype))
    m, _ = torch.max(logD, dim=-1, keepdim=True)
    Cm = (q @ (k / math.sqrt(D)).transpose(-2, -1)) * torch.exp(logD - m)
    norm = torch.maximum(Cm.sum(dim=-1, keepdim=True).abs(), torch.exp(-m))
    return (Cm / (norm + CELL_EPS)) @ v, m.squeeze(-1)


def recurrent_stabilized(q, k, v, ig, fg, m0=-math.inf):
    """The stabilised recurrence of B.11 (xLSTM's recurrent_step_stabilized_simple) token by token, from C = 0,
    n = 0 and m = m0 (-inf: the parallel form's row maximum; xLSTM's step starts from 0). Same shapes."""
    B, H, T, D = q.shape
    Cs = torch.zeros(B, H, D, D, dtype=q.dtype)
    n = torch.zeros(B, H, D, dtype=q.dtype)
    m = torch.full((B, H), m0, dtype=q.dtype)
    hs = []
    for t in range(T):
        lf = F.logsigmoid(fg[..., t])
        m_new = torch.maximum(lf + m, ig[..., t])
        fa, ia = torch.exp(lf + m - m_new), torch.exp(ig[..., t] - m_new)
        ks = k[:, :, t] / math.sqrt(D)
        Cs = fa[..., None, None] * Cs + ia[..., None, None] * ks[..., :, None] * v[:, :, t, None, :]
        n = fa[..., None] * n + ia[..., None] * ks
        qt = q[:, :, t]
        num = torch.einsum("bhd,bhde->bhe", qt, Cs)
        den = torch.maximum((qt * n).sum(-1).abs(), torch.exp(-m_new)) + CELL_EPS
        hs.append(num / den[..., None])
        m = m_new
    return torch.stack(hs, dim=2)


def forward(x, P, prefix, spec, cell=None):
    """One mlstm mixer (xLSTM's mLSTMLayer) on the normalised input x (B, T, C); see the module docstring.
    cell (default: the parallel form) maps q, k, v (B, H, T, D), ig, fg (B, H, T) to h (B, H, T, D)."""
    B, T, C = x.shape
    I, H, D, K = spec.I, spec.H, spec.D, spec.K
    inner = x @ P[prefix + "proj_up"].T
    xm, z = inner[..., :I], inner[..., I:]
    if K:
        w = P[prefix + "conv_w"].unsqueeze(1)                                   # (I, 1, K)
        xc = F.silu(F.conv1d(xm.transpose(1, 2), w, P[prefix + "conv_b"], padding=K - 1, groups=I)[..., :T]
                    .transpose(1, 2))
    else:
        xc = xm
    q, k, v = headwise(xc, P[prefix + "q_proj"]), headwise(xc, P[prefix + "k_proj"]), headwise(xm, P[prefix + "v_proj"])
    cat = torch.cat([q, k, v], dim=-1)
    ig = (cat @ P[prefix + "igate_w"].T + P[prefix + "igate_b"]).transpose(1, 2)          # (B, H, T)
    fg = (cat @ P[prefix + "fgate_w"].T + P[prefix + "fgate_b"]).transpose(1, 2)
    heads = [t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v)]
    h = cell(*heads, ig, fg) if cell else parallel_stabilized(*heads, ig, fg)[0]
    h = F.group_norm(h.transpose(1, 2).reshape(B * T, I), H, P[prefix + "outnorm"], None, spec.eps).view(B, T, I)
    h = h + P[prefix + "skip"] * xc
    return (h * F.silu(z)) @ P[prefix + "proj_down"].T


# ----------------------------------------------------------------------------------------------------
# self-test

def tiny_spec(C=8, **opts):
    o = dict(DEFAULTS, kind=KIND, round_to=1)
    o.update(opts)
    return MlstmSpec(o, C)


def random_params(spec, C, seed, prefix=""):
    """Random float64 parameters of one layer, gate weights nonzero and input-gate biases spread so that both
    branches of the normaliser's max occur."""
    g = np.random.default_rng(seed)
    P = {}
    for name, shape in param_shapes(spec, C).items():
        if name in ("outnorm", "skip"):
            v = 1 + 0.2 * g.normal(size=shape)
        elif name == "igate_b":
            v = 1.5 * g.normal(size=shape)
        elif name == "fgate_b":
            v = 1 + 1.5 * g.normal(size=shape)
        else:
            v = 0.4 * g.normal(size=shape)
        P[prefix + name] = torch.tensor(v, dtype=DTYPE, requires_grad=True)
    return P


def self_test(whole):
    """Checks of the mlstm reference on its own, and its cases through whole (selftest.WHOLE); returns the
    number of failures."""
    report = SelfChecks()
    torch.manual_seed(0)
    g = np.random.default_rng(3)

    # (a) the parallel form == the stabilised recurrence, with input gates from e^-8 to e^8 and forget gates
    # from sigmoid(-3) to sigmoid(5): the same h, and the row maxima are the recurrence's m
    Bsz, H, T, D = 2, 3, 17, 4
    q, k, v = (t64(g.normal(size=(Bsz, H, T, D))) for _ in range(3))
    ig, fg = t64(g.uniform(-8, 8, size=(Bsz, H, T))), t64(g.uniform(-3, 5, size=(Bsz, H, T)))
    hp, _ = parallel_stabilized(q, k, v, ig, fg)
    hr = recurrent_stabilized(q, k, v, ig, fg)
    d = float((hp - hr).abs().max() / hr.abs().max())
    report(d < 1e-12, f"(a) parallel stabilised form == B.11's recurrence (m_0 = -inf): max|dh|/max|h| {d:.1e}")
    # xLSTM's own step starts from m = 0: the same outputs wherever the floor exp(-m) is not active
    hr0 = recurrent_stabilized(q * 30, k, v, ig + 9, fg, m0=0.0)
    hp0, m = parallel_stabilized(q * 30, k, v, ig + 9, fg)
    d = float((hp0 - hr0).abs().max() / hr0.abs().max())
    report(d < 1e-9, f"(a) with m_0 = 0 (xLSTM's step) and input gates >= 1: same outputs, max|dh|/max|h| {d:.1e}")

    variants = {
        "defaults (4 heads, conv 4, blocks of 4)": {},
        "2 heads, conv 2, blocks of 8": {"heads": 2, "conv": 2, "qkv_blocksize": 8},
        "no conv, proj_factor 1.5 rounded to 8": {"conv": 0, "proj_factor": 1.5, "round_to": 8, "heads": 2},
    }
    # (b) the whole layer with either form of the cell; (c) causality; (d) gradcheck in float64
    check_layer_variants(report, forward, tiny_spec, random_params, variants, {"cell": recurrent_stabilized}, "bcd",
                         relative=True, what="parallel == recurrent cell")

    # (e) every mlstm CASE: parameter names/shapes (no ln2/MLP: fused blocks), the full model forward and
    # backward on random weights, every gate parameter with a nonzero gradient (in at least one element)
    whole.check_cases_on_random_weights(report, "e", KIND, random_params,
                                        ("igate_w", "igate_b", "fgate_w", "fgate_b", "skip"),
                                        "gate/skip gradients nonzero", every=False)

    # (f) defaults: {"kind": "mlstm"} at d_model 128 resolves to xLSTM's mLSTMLayerConfig
    spec = whole.mixer_spec({"d_model": 128, "n_layers": 1, "mixer": {"kind": "mlstm"}}, 0)
    s16 = whole.mixer_spec({"d_model": 16, "n_layers": 1, "mixer": {"kind": "mlstm"}}, 0)
    report(spec.I == 256 and spec.H == 4 and spec.D == 64 and spec.K == 4 and spec.bs == 4 and spec.eps == 1e-5
           and s16.I == 64,
           "(f) defaults at d_model 128: inner 256 (proj_factor 2), 4 heads of 64, conv 4, blocks of 4; "
           "d_model 16 rounds 32 up to 64")
    return report.summary("mlstm")


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _mlstm_model(mixer=None, **extra):
    """A tiny all-mlstm model: 2 fused blocks (x += mlstm(norm(x)), no MLP: block "auto" with OWNS_MLP),
    d_model 16. The gate weights start at zero (xLSTM's init) and the 3 training steps at lr 0.05 move them,
    so every gate path carries gradient; chunk 5, so neither the probe's T = 24 nor the training windows' 32
    is a multiple of it."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": KIND, "chunk": 5, **(mixer or {})}}
    m.update(extra)
    return m


CASES = {
    # inner 32 (no rounding), 4 heads of 8, conv 4, blocks of 4: the layer's defaults otherwise
    "mlstm": _mlstm_model({"round_to": 1}),
    # xLSTM's rounding (32 -> 64), 2 heads of 32, no conv, blocks of 8, faster forgetting (fgate biases
    # linspace(0, 2)) and input-gate biases N(0, 1); RMSNorm, untied head
    "mlstm_noconv_rounded": _mlstm_model(
        {"heads": 2, "conv": 0, "qkv_blocksize": 8, "fgate_bias_lo": 0.0, "fgate_bias_hi": 2.0,
         "igate_bias_std": 1.0, "chunk": 7}, norm="rmsnorm", tie_embeddings=False),
}
