"""The `attention` mixer's reference: multi-head causal softmax attention with every position scheme.

Mirrors src/mixers/attention.c (options `att_check_` -> parse_spec, `att_params_` -> param_shapes,
`att_forward_` -> forward) and the kernel src/nn/attention.c, with the rotations of src/nn/rotary.c
(`rotary_sc_bank` -> spectral_bands). Here the (T, T) score matrices are materialised in float64.

Definition (names are seqtrain's parameter names, relative to blocks.L.mixer.):
  q, k, v = row blocks [q | k | v] of x @ wqkv^T (+ bqkv), H heads of D channels;
  optional QK-norm (RMS over D, eps 1e-6, weights q_norm/k_norm of shape (D,) shared by heads);
  then RoPE for rope/decayed_rope/sc_rope; scores s_ij = q_i.k_j / sqrt(D) + bias_ij over the
  causal (and sliding-window: i - W < j <= i) support; p = softmax_j(s); output sum_j w_ij v_j
  with w = p, or w = p * exp(-mu_h (i-j)) for the post-softmax decay; then @ wo^T (+ bo).
position schemes:
  none          no bias
  rope          rotate pairs (i, i+D/2) [half] or (2i, 2i+1) [interleaved] by t * base^(-2i/D)
  alibi         bias -m_h (i-j), m_h the slopes of Press et al. (2022) (non-power-of-two rule too)
  fox           bias F_i - F_j, F_t = sum_{s<=t} log sigmoid(x_s . fgate_w_h + fgate_b_h)
  decayed_rope  RoPE as above plus a per-head decay mu_h: post_softmax (not renormalised) or an
                additive logit bias -mu_h (i-j) (decay_mode "logits")
  sc_rope       one RoPE spectrum of M = H*D/2 frequencies base^(-2m/(H*D)), sorted slowest first
                and cut into H contiguous bands of D/2 (head 0 slowest; within a head pair i takes
                the band's i-th frequency, slowest first); decay as in decayed_rope
  decays (decayed_rope, sc_rope): mu_h = damping * max(band_h) of that same master spectrum, and
  mu_h = 0 for the first zero_decay_heads heads; decayed_rope keeps the usual per-head spectrum
  base^(-2i/D) for the rotation itself.
  path          PaTH (docs/mixers.md): w_t = l2norm_head(silu(conv3(x path_w1^T path_w2^T)))
                (rank path_rank, 32 when unset; 0: x path_w^T), beta_t = 2 sigmoid(x path_bw^T + path_bb) per
                head, H_s = I - beta_s w_s w_s^T and s_ij = q_i^T (H_i ... H_{j+1}) k_j / sqrt(D): here
                every (T, T) score is formed naively in float64, each key carried forward one H at a time
                (nothing of the C kernel's chunking)
  path_fox      path plus fox's bias F_i - F_j (same tensors as fox)

No self-test of its own: the attention cases are checked against the C model (tests/test_torch_ref.c),
and docs/reference_check.md lists the reference-side perturbations that those cases catch.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from . import selrope
from .common import DTYPE, rms_norm, rope, tiny_model

KIND = "attention"

# the attention mixer's option defaults (docs/mixers.md); a run's config.json stores only what was set
DEFAULTS = {
    "heads": 8, "head_dim": 0, "bias": False, "qk_norm": False, "qk_norm_eps": 1e-6, "qk_norm_scales": "shared",
    "window": 0, "pos": "rope",
    "rope_base": 10000.0, "rope_layout": "half", "decay_mode": "post_softmax", "damping": 0.05,
    "zero_decay_heads": 2, "fgate_bias_init": 3.0, "init_std": 0.02, "path_rank": -1, "path_chunk": 0,
    "selective_rope": {},
}

PATH_CONV_K = 3      # PaTH's short conv on w
PATH_L2_EPS = 1e-6   # FLA's l2norm: w / sqrt(|w|^2 + 1e-6)


def alibi_slopes(n_heads):
    """ALiBi head slopes (Press et al., 2022): for n a power of two the geometric sequence starting at
    2^(-8/n) with that ratio; otherwise the slopes of the largest power of two p < n, followed by every
    other slope (the 1st, 3rd, ...) of the 2p-head sequence until n slopes are taken."""
    def geometric(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    if n_heads & (n_heads - 1) == 0:
        return geometric(n_heads)
    p = 2 ** int(math.floor(math.log2(n_heads)))
    return geometric(p) + geometric(2 * p)[0::2][: n_heads - p]


def spectral_bands(n_heads, head_dim, base):
    """The spectrally coupled RoPE bank: the H*D/2 frequencies of one RoPE over H*D channels,
    base^(-2m/(H*D)), sorted ascending (slowest first) and cut into H contiguous bands of D/2.
    Returns an (H, D/2) float64 array; row h is head h's band, slowest first."""
    half = head_dim // 2
    master = n_heads * half
    spectrum = sorted(base ** (-2.0 * m / (2 * master)) for m in range(master))
    return np.array(spectrum, dtype=np.float64).reshape(n_heads, half)


class AttentionSpec:
    """The resolved options and fixed (non-learned) constants of one attention layer."""

    kind = KIND

    def __init__(self, opts, d_model):
        self.opts = opts
        self.H = int(opts["heads"])
        self.D = int(opts["head_dim"]) or d_model // self.H
        if not opts["head_dim"] and d_model % self.H:
            raise ValueError(f"heads {self.H} does not divide d_model {d_model}")
        self.HD = self.H * self.D
        self.pos = opts["pos"]
        self.window = int(opts["window"])
        self.rotary = self.pos in ("rope", "decayed_rope", "sc_rope")
        self.path = self.pos in ("path", "path_fox")
        self.fgate = self.pos in ("fox", "path_fox")
        rank = int(opts["path_rank"])
        self.sr = selrope.SelRopeSpec(opts.get("selective_rope"), d_model, self.H, self.D)   # with pos none | fox
        self.R = 32 if rank < 0 else rank
        half = self.D // 2
        base = float(opts["rope_base"])
        self.freqs = None    # (H, D/2) angular frequency of each rotated pair
        self.slopes = None   # (H,) linear logit bias slopes
        self.decays = None   # (H,) post-softmax decays
        if self.rotary:
            standard = np.array([base ** (-2.0 * i / self.D) for i in range(half)])
            self.freqs = np.tile(standard, (self.H, 1))
        if self.pos == "alibi":
            self.slopes = np.array(alibi_slopes(self.H))
        if self.pos in ("decayed_rope", "sc_rope"):
            bands = spectral_bands(self.H, self.D, base)
            mu = float(opts["damping"]) * bands.max(axis=1)
            mu[: int(opts["zero_decay_heads"])] = 0.0
            if self.pos == "sc_rope":
                self.freqs = bands
            if opts["decay_mode"] == "logits":
                self.slopes = mu
            else:
                self.decays = mu


def parse_spec(opts, d_model):
    """The layer's AttentionSpec from its resolved options (defaults filled in, "kind" included)."""
    return AttentionSpec(opts, d_model)


def param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {}
    shapes["wqkv"] = (3 * spec.HD, C)
    if spec.opts["bias"]:
        shapes["bqkv"] = (3 * spec.HD,)
    shapes["wo"] = (C, spec.HD)
    if spec.opts["bias"]:
        shapes["bo"] = (C,)
    if spec.opts["qk_norm"]:
        n = spec.HD if spec.opts["qk_norm_scales"] == "per_head" else spec.D
        shapes["q_norm"] = (n,)
        shapes["k_norm"] = (n,)
    if spec.fgate:
        shapes["fgate_w"] = (spec.H, C)
        shapes["fgate_b"] = (spec.H,)
    if spec.path:
        if spec.R > 0:
            shapes["path_w1"] = (spec.R, C)
            shapes["path_w2"] = (spec.HD, spec.R)
        else:
            shapes["path_w"] = (spec.HD, C)
        shapes["path_conv"] = (spec.HD, PATH_CONV_K)
        shapes["path_bw"] = (spec.H, C)
        shapes["path_bb"] = (spec.H,)
    shapes.update(selrope.param_shapes(spec.sr))
    return shapes


def path_scores(q, k, w, beta):
    """PaTH's raw logits q_i^T (H_i ... H_{j+1}) k_j for j <= i (0 above the diagonal), H_s = I - beta_s w_s w_s^T.
    q, k, w (B, T, H, D), beta (B, T, H); returns (B, H, T, T). Each key is carried forward through
    H_{j+1}, H_{j+2}, ... one Householder at a time (O(T^2 D), differentiable)."""
    B, T, H, D = q.shape
    rows = []
    for j in range(T):
        u = k[:, j]                                                          # (B, H, D)
        col = [torch.zeros(B, H, dtype=q.dtype)] * j
        for i in range(j, T):
            if i > j:
                wi = w[:, i]
                u = u - beta[:, i].unsqueeze(-1) * (wi * u).sum(-1, keepdim=True) * wi
            col.append((q[:, i] * u).sum(-1))
        rows.append(torch.stack(col, dim=-1))                                # (B, H, T) over i
    return torch.stack(rows, dim=-1)                                         # (B, H, T_i, T_j)


def path_w_beta(x, P, prefix, spec):
    """PaTH's w (B, T, H, D) and beta (B, T, H) from the mixer input x (B, T, C)."""
    B, T, _ = x.shape
    u = x @ P[prefix + "path_w1"].T @ P[prefix + "path_w2"].T if spec.R > 0 else x @ P[prefix + "path_w"].T
    cw = P[prefix + "path_conv"]                                             # (HD, K) depthwise causal
    K = cw.shape[1]
    pad = torch.cat([torch.zeros(B, K - 1, spec.HD, dtype=u.dtype), u], dim=1)
    w = F.silu(sum(cw[:, j] * pad[:, j:j + T] for j in range(K))).reshape(B, T, spec.H, spec.D)
    w = w / torch.sqrt((w * w).sum(-1, keepdim=True) + PATH_L2_EPS)
    beta = 2 * torch.sigmoid(x @ P[prefix + "path_bw"].T + P[prefix + "path_bb"])
    return w, beta


def forward(x, P, prefix, spec):
    """One attention mixer on the normalised input x (B, T, C), with plain materialised (T, T) matrices."""
    B, T, _ = x.shape
    H, D, HD = spec.H, spec.D, spec.HD
    qkv = x @ P[prefix + "wqkv"].T
    if spec.opts["bias"]:
        qkv = qkv + P[prefix + "bqkv"]
    q, k, v = (qkv[..., i * HD:(i + 1) * HD].reshape(B, T, H, D) for i in range(3))
    q, k = selrope.apply(q, k, x, P, prefix, spec.sr)     # the authors' order: rotate, then qk_norm
    if spec.opts["qk_norm"]:
        # per head over D channels; scales (D,) shared by the heads or (H*D,) one set per head
        eps, wshape = float(spec.opts["qk_norm_eps"]), (H, D) if spec.opts["qk_norm_scales"] == "per_head" else (D,)
        q = rms_norm(q, P[prefix + "q_norm"].reshape(wshape), eps)
        k = rms_norm(k, P[prefix + "k_norm"].reshape(wshape), eps)
    if spec.rotary:
        q = rope(q, spec.freqs, spec.opts["rope_layout"])
        k = rope(k, spec.freqs, spec.opts["rope_layout"])
    if spec.path:
        w, beta = path_w_beta(x, P, prefix, spec)
        scores = path_scores(q, k, w, beta) / math.sqrt(D)                   # (B, H, T, T)
    else:
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)      # (B, H, T, T)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    dist = (i - j).to(DTYPE)                                                 # i - j
    visible = j <= i
    if spec.window > 0:
        visible = visible & (i - j < spec.window)
    if spec.slopes is not None:
        scores = scores - torch.as_tensor(spec.slopes, dtype=DTYPE).view(1, H, 1, 1) * dist
    if spec.fgate:
        gate = x @ P[prefix + "fgate_w"].T + P[prefix + "fgate_b"]          # (B, T, H)
        cum = torch.cumsum(F.logsigmoid(gate), dim=1).transpose(1, 2)        # (B, H, T): F_t
        scores = scores + cum.unsqueeze(-1) - cum.unsqueeze(-2)              # F_i - F_j
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if spec.decays is not None:
        factor = torch.exp(-torch.as_tensor(spec.decays, dtype=DTYPE).view(1, H, 1, 1) * dist.clamp(min=0))
        weights = weights * factor                                           # not renormalised
    out = torch.einsum("bhij,bjhd->bihd", weights, v).reshape(B, T, HD)
    y = out @ P[prefix + "wo"].T
    if spec.opts["bias"]:
        y = y + P[prefix + "bo"]
    return y


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME; docs/reference_check.md says what each exercises)

def _model(heads=2, mixer=None, **extra):
    """A tiny attention model: common.tiny_model with an attention mixer of `heads` heads, init_std 0.3."""
    return tiny_model({"kind": KIND, "heads": heads, "init_std": 0.3, **(mixer or {})}, **extra)


CASES = {
    "rope": _model(mixer={"pos": "rope"}),
    "rope_interleaved_qknorm_bias": _model(
        heads=4, mixer={"pos": "rope", "rope_layout": "interleaved", "qk_norm": True, "bias": True,
                        "rope_base": 500}),
    "nope_rmsnorm_untied_headbias": _model(
        mixer={"pos": "none"}, norm="rmsnorm", tie_embeddings=False, head_bias=True),
    "alibi3_swiglu": _model(heads=3, mixer={"pos": "alibi", "head_dim": 4},
                           mlp={"kind": "swiglu", "ratio": 1.5, "bias": False}),
    "fox_window": _model(heads=2, mixer={"pos": "fox", "window": 5, "fgate_bias_init": 1.0}),
    "decayed_rope_post_softmax_2c": _model(
        heads=2, mixer={"pos": "decayed_rope", "head_dim": 16, "decay_mode": "post_softmax",
                        "zero_decay_heads": 1, "damping": 0.2, "rope_base": 100}),
    "decayed_rope_logits": _model(
        heads=4, mixer={"pos": "decayed_rope", "decay_mode": "logits", "zero_decay_heads": 1,
                        "damping": 0.3, "rope_base": 100}),
    "sc_rope": _model(
        heads=4, mixer={"pos": "sc_rope", "zero_decay_heads": 1, "damping": 0.2, "rope_base": 100,
                        "window": 9}),
    "relu_nobias_layernorm_nobias": _model(mixer={"pos": "rope"}, norm_bias=False,
                                           mlp={"kind": "relu", "ratio": 1, "bias": False}),
    "path": _model(heads=2, mixer={"pos": "path", "path_rank": 4, "path_chunk": 5}),
    "path_fox_rank0_qknorm": _model(heads=2, mixer={"pos": "path_fox", "path_rank": 0, "qk_norm": True,
                                                    "fgate_bias_init": 1.0, "path_chunk": 7}),
    "fox_qknorm_per_head_eps": _model(heads=2, mixer={"pos": "fox", "qk_norm": True, "qk_norm_scales": "per_head",
                                                      "qk_norm_eps": 1e-5, "fgate_bias_init": 1.0}),
    "fox_selrope": _model(heads=2, mixer={"pos": "fox", "fgate_bias_init": 1.0,
                                          "selective_rope": {"enabled": True, "phi_proj_rank": 4, "use_bias": True,
                                                             "temp_theta": 100.0}}),
    "nope_selrope_qknorm_full_rank": _model(heads=2, mixer={"pos": "none", "qk_norm": True,
                                                            "selective_rope": {"enabled": True, "full_rank": True,
                                                                               "use_gate": True,
                                                                               "conv_act": "silu"}}),
    "hybrid_alibi_layer1_nomlp": _model(
        heads=4, mixer={"pos": "rope"}, mlp={"kind": "none"},
        layers=[{"at": "1", "mixer": {"pos": "alibi", "heads": 2}}]),
}
