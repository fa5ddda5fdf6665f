#!/usr/bin/python3
"""Outside reference for seqtrain's model: the same network rebuilt in PyTorch, in float64.

seqtrain's forward and backward passes are hand-written C in float32. This script rebuilds the model a
run describes (its resolved config.json: the `model` section and the mixer options) from the method
descriptions -- pre-norm decoder blocks, multi-head causal softmax attention with materialised (T, T)
score matrices, the position schemes as the papers define them -- loads a seqtrain checkpoint by
parameter name, and lets torch.autograd produce the gradients. Everything runs in float64, so the
reference is ~1e-15 accurate and any difference a comparison sees is the C side's float32 rounding
(or a bug). tests/test_torch_ref.c compares the C model against the dumps this script writes;
docs/reference_check.md describes the check and how to regenerate it.

Needs Debian's python3-torch and python3-numpy (run it with /usr/bin/python3). No `safetensors`
package: checkpoints are read with scripts/safetensors_read.py and dumps written by write_safetensors.

Usage:
    /usr/bin/python3 scripts/torch_reference.py --config RUN/config.json --model CKPT/model.safetensors \\
        --tokens tokens.npy --out ref.safetensors
        one reference dump: logits (B,T,V), loss (1,), grad.<name> for every parameter (all F32);
        tokens.npy is an integer array (B, T+1): inputs [:, :-1], targets [:, 1:] (-100 = ignored)
    /usr/bin/python3 scripts/torch_reference.py --make-case NAME [--make-case NAME ...] | --make-all
        regenerate committed cases under tests/data/torch_ref/NAME/: train a tiny seqtrain model for a
        few steps (bin/seqtrain must be built), copy its config.json and model.safetensors, write
        tokens.npy and ref.safetensors; --check-c also runs bin/seqeval --probe and prints the
        differences (a quick look before the C test)
    /usr/bin/python3 scripts/torch_reference.py --list-cases
    /usr/bin/python3 scripts/torch_reference.py --self-test-rfa
        checks the rfa reference without the C side (causality, mu = 0 heads, the unitary limit and every
        option against an element-by-element complex form, gradcheck, the large-nu limit, the rfa cases)
    /usr/bin/python3 scripts/torch_reference.py --self-test-kla
        checks the kla reference without the C side (the scan against a moment-form Kalman filter with
        gain and against the parallel Moebius/affine prefix scans of Theorems 1-2, the p = 0 convolution
        form of Theorem 3, causality, gradcheck of the layer under every option, the kla cases)

Model definition implemented here (names are seqtrain's parameter names):
    x = wte[tokens]
    per block l: x += mixer(norm(x));  x += mlp(norm(x))     (no MLP and no ln2 when mlp.kind = none)
      block kind (model.block, overridden per layer by model.layers[].block unless "inherit"):
      prenorm as above; fused: x += mixer(norm(x)) only (no ln2, no MLP: the mixer carries its own gate)
    logits = norm_f(x) @ W_head^T (+ head.bias), W_head = wte when tie_embeddings
    head autoencoder (MAD's AutoEncoder, mad/model/auto_encoder.py, global_pool 'last'): the code is x at
      the last position (no norm); x_t = code + posemb(t), posemb(t) = [sin(t w_i) | cos(t w_i)],
      w_i = exp(-i ln(10000) / (C/2 - 1)) for i < C/2 (zero last column for odd C); then
      x = gelu(norm(x) @ dec.fc1^T + b) and the same with norm2 / fc2, before norm_f and the head
    loss = mean cross-entropy over targets != -100
  norms: LayerNorm eps 1e-5 (bias optional), RMSNorm x / sqrt(mean(x^2) + 1e-6) * w (no bias)
  MLP: gelu (exact, erf) | relu with one hidden layer of round(ratio*C); swiglu: fc gives [a | b]
       (2*hidden rows), act = silu(a) * b
  attention: q, k, v = row blocks [q | k | v] of x @ wqkv^T (+ bqkv), H heads of D channels;
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
  rfa (Robust Filter Attention, docs/mixers.md section `rfa`, paper Algorithm 1 / App. D.1, E.2):
       H heads of D complex channels; q, k, v = row blocks of x @ wqkv^T (+ bqkv), each (2*H*D) with head h
       at [h*2D, h*2D + D) real parts and [h*2D + D, (h+1)*2D) imaginary parts. Per head:
       mu = softplus(raw) (exactly 0 on the first zero_decay_heads heads and on all with unitary),
       sigma~^2, eta^2, gamma^2, nu/D, tau = softplus(raw) + eps; nu = D * (nu/D), kappa = 1 + nu/D.
       Frequencies in conjugate pairs (channel 2m: +w'_m, 2m+1: -w'_m); w' = base^(-2m/D) in every head,
       or with spectral_coupling head h's slice base^(-(M-1-h*D/2-m)/M) of one bank, M = H*D/2; learned
       (`omega`, (H, D/2)) with learn_omega. q~, k~, v~ = e^{-iwt} (.) q, k, v (rotations, rotate_values);
       E = e^{-mu (i-j)}; V = sigma~^2 (1 - E^2) + eta^2 E^2 + gamma^2 (prior dle; flat: 1);
       s = Re(q~_i^H k~_j); R^2 = |q_i|^2 + E^2 |k_j|^2 - 2 E s; c = 1/(nu V) (mult_gate; else 1/nu);
       logits -tau log V - tau kappa log(1 + c R^2) (student) | -tau log V - tau c R^2 (gaussian) |
       tau s / sqrt(2D) (unitary); causal softmax over j <= i, A = softmax * E, m_i = sum_j A_ij v~_j,
       out = e^{+iwt} (.) m, y = out @ wo^T (+ bo) (out in the same per-head re/im layout).
       `--self-test-rfa` checks this implementation on its own (no C side needed).
  kla (Kalman Linear Attention, docs/mixers.md section `kla`; KLA paper eq. 7-9, Theorems 1-2, eq. 22-23,
       Algorithm 1, App. A), M = round(expand C) channels, S = d_state slots, K conv taps:
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
       Posterior-mean decoding only (model.mc_samples 1). `--self-test-kla` checks it on its own.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import safetensors_read  # noqa: E402  (scripts/safetensors_read.py)

DTYPE = torch.float64
LAYERNORM_EPS = 1e-5
RMSNORM_EPS = 1e-6
IGNORE_INDEX = -100

# the attention mixer's option defaults (docs/mixers.md); a run's config.json stores only what was set
ATTENTION_DEFAULTS = {
    "heads": 8, "head_dim": 0, "bias": False, "qk_norm": False, "window": 0, "pos": "rope",
    "rope_base": 10000.0, "rope_layout": "half", "decay_mode": "post_softmax", "damping": 0.05,
    "zero_decay_heads": 2, "fgate_bias_init": 3.0, "init_std": 0.02,
}

# the rfa mixer's option defaults (docs/mixers.md, section `rfa`)
RFA_DEFAULTS = {
    "heads": 8, "head_dim": 0, "bias": True, "spectral_coupling": False, "damping": 0.05,
    "zero_decay_heads": 2, "rope_base": 10000.0, "learn_omega": False, "kernel": "student",
    "prior": "dle", "mult_gate": True, "rotate_values": True, "rotations": True, "unitary": False,
    "sigma_tilde2_init": 0.1, "eta2_init": 1.0, "gamma2_init": 1.0, "nu_over_d_init": 4.0,
    "tau_init": 1.0, "eps": 1e-6,
}

# the kla mixer's option defaults (docs/mixers.md, section `kla`; KLA paper App. A)
KLA_DEFAULTS = {
    "d_state": 16, "expand": 1.0, "conv": 4, "sensors": "plain", "var_rank": 0, "qk_norm": True,
    "obs_var_min": 1e-4, "discretization": "ou", "process_noise": True, "p_init": 0.01, "p_min": 1e-7,
    "dt_min": 0.001, "dt_max": 0.1, "dt_floor": 1e-4, "gate": True, "skip": True, "skip_init": -1.0,
    "chunk": 64, "init_std": 0.02,
}

MIXER_DEFAULTS = {"attention": ATTENTION_DEFAULTS, "rfa": RFA_DEFAULTS, "kla": KLA_DEFAULTS}


# ----------------------------------------------------------------------------------------------------
# configuration

def layer_matches(spec, layer, n_layers):
    """Whether layer index `layer` is named by a model.layers[].at spec: "11", "-1", "0,2,4", "3-5"."""
    hit = False
    for item in spec.split(","):
        mo = re.fullmatch(r"\s*(-?\d+)(?:-(-?\d+))?\s*", item)
        if not mo:
            raise ValueError(f"model.layers[].at: {spec!r} is not a layer list")
        lo = int(mo.group(1))
        hi = int(mo.group(2)) if mo.group(2) is not None else lo
        lo, hi = (lo + n_layers if lo < 0 else lo), (hi + n_layers if hi < 0 else hi)
        if not (0 <= lo <= hi < n_layers):
            raise ValueError(f"model.layers[].at: {spec!r} names a layer outside 0..{n_layers - 1}")
        hit = hit or lo <= layer <= hi
    return hit


def layer_mixer(model_cfg, layer):
    """The mixer options of one layer: model.mixer with every matching override merged over it, in order
    (an override with a different "kind" replaces the options whole), then the defaults of its kind filled
    in. The result includes "kind"."""
    mix = dict(model_cfg.get("mixer", {"kind": "attention"}))
    for ov in model_cfg.get("layers", []):
        if not layer_matches(ov["at"], layer, model_cfg["n_layers"]):
            continue
        over = ov.get("mixer", {})
        if "kind" in over and over["kind"] != mix.get("kind"):
            mix = dict(over)
        else:
            mix.update(over)
    kind = mix.get("kind")
    if kind not in MIXER_DEFAULTS:
        raise ValueError(f"layer {layer}: mixer kind {kind!r} has no reference here")
    opts = dict(MIXER_DEFAULTS[kind])
    unknown = set(mix) - set(opts) - {"kind"}
    if unknown:
        raise ValueError(f"layer {layer}: unknown {kind} options {sorted(unknown)}")
    opts.update({k: v for k, v in mix.items() if k != "kind"})
    opts["kind"] = kind
    return opts


def mixer_spec(model_cfg, layer):
    """The resolved spec (AttentionSpec, RfaSpec or KlaSpec) of one layer's mixer."""
    opts = layer_mixer(model_cfg, layer)
    cls = {"attention": AttentionSpec, "rfa": RfaSpec, "kla": KlaSpec}[opts["kind"]]
    return cls(opts, model_cfg["d_model"])


def layer_block(model_cfg, layer):
    """The block kind of one layer, "prenorm" or "fused": model.block, then every matching
    model.layers[] override that names a block other than "inherit", in order."""
    block = model_cfg.get("block", "prenorm")
    for ov in model_cfg.get("layers", []):
        b = ov.get("block", "inherit")
        if b != "inherit" and layer_matches(ov["at"], layer, model_cfg["n_layers"]):
            block = b
    if block not in ("prenorm", "fused"):
        raise ValueError(f"layer {layer}: block {block!r} has no reference here")
    return block


def layer_has_mlp(model_cfg, layer):
    """A prenorm block has an MLP (and ln2) unless mlp.kind is none; a fused block never has one."""
    return model_cfg["mlp"]["kind"] != "none" and layer_block(model_cfg, layer) == "prenorm"


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

    kind = "attention"

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

    kind = "rfa"
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
        for key, allowed in (("kernel", ("student", "gaussian")), ("prior", ("dle", "flat"))):
            if opts[key] not in allowed:
                raise ValueError(f"rfa: {key} {opts[key]!r} (one of {', '.join(allowed)})")
        self.bias = bool(opts["bias"])
        self.eps = float(opts["eps"])
        self.unitary = bool(opts["unitary"])
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


class KlaSpec:
    """The resolved options of one kla (Kalman Linear Attention) layer.

    M = round(expand * C) channels, S = d_state slots per channel, K conv taps; sensors "plain" projects
    [v | logvar | k | q] (2M + 2S rows) from u, "mamba" takes v = u and projects [r | k | q] (R + 2S
    rows) with the log-variance r W_ve^T + b_ve of rank R = var_rank (0: ceil(C / 8))."""

    kind = "kla"

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


def mixer_param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    shapes = {}
    if spec.kind == "kla":
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
    if spec.kind == "rfa":
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
    shapes["wqkv"] = (3 * spec.HD, C)
    if spec.opts["bias"]:
        shapes["bqkv"] = (3 * spec.HD,)
    shapes["wo"] = (C, spec.HD)
    if spec.opts["bias"]:
        shapes["bo"] = (C,)
    if spec.opts["qk_norm"]:
        shapes["q_norm"] = (spec.D,)
        shapes["k_norm"] = (spec.D,)
    if spec.pos == "fox":
        shapes["fgate_w"] = (spec.H, C)
        shapes["fgate_b"] = (spec.H,)
    return shapes


def param_shapes(model_cfg, vocab):
    """Every parameter's name and shape, as the model definition above implies them (in forward order)."""
    C, L = model_cfg["d_model"], model_cfg["n_layers"]
    rms = model_cfg["norm"] == "rmsnorm"
    norm_bias = model_cfg.get("norm_bias", True) and not rms
    mlp = model_cfg["mlp"]
    hidden = int(math.floor(mlp["ratio"] * C + 0.5))
    fc_rows = 2 * hidden if mlp["kind"] == "swiglu" else hidden
    shapes = {"wte": (vocab, C)}
    for l in range(L):
        p = f"blocks.{l}."
        shapes[p + "ln1.weight"] = (C,)
        if norm_bias:
            shapes[p + "ln1.bias"] = (C,)
        for name, shape in mixer_param_shapes(mixer_spec(model_cfg, l), C).items():
            shapes[p + "mixer." + name] = shape
        if layer_has_mlp(model_cfg, l):
            shapes[p + "ln2.weight"] = (C,)
            if norm_bias:
                shapes[p + "ln2.bias"] = (C,)
            shapes[p + "mlp.fc.weight"] = (fc_rows, C)
            if mlp.get("bias", True):
                shapes[p + "mlp.fc.bias"] = (fc_rows,)
            shapes[p + "mlp.proj.weight"] = (C, hidden)
            if mlp.get("bias", True):
                shapes[p + "mlp.proj.bias"] = (C,)
    if model_cfg.get("head", "lm") == "autoencoder":
        for n in ("1", "2"):
            shapes[f"dec.norm{n}.weight"] = (C,)
            if norm_bias:
                shapes[f"dec.norm{n}.bias"] = (C,)
            shapes[f"dec.fc{n}.weight"] = (C, C)
            shapes[f"dec.fc{n}.bias"] = (C,)
    shapes["lnf.weight"] = (C,)
    if norm_bias:
        shapes["lnf.bias"] = (C,)
    if not model_cfg.get("tie_embeddings", True):
        shapes["head.weight"] = (vocab, C)
    if model_cfg.get("head_bias", False):
        shapes["head.bias"] = (vocab,)
    return shapes


# ----------------------------------------------------------------------------------------------------
# the model

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, freqs, layout):
    """Rotate (B, T, H, D) by position t: pair (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), angle
    t * freqs[h, i]; pairs (i, i + D/2) for layout "half", (2i, 2i+1) for "interleaved"."""
    B, T, H, D = x.shape
    t = torch.arange(T, dtype=DTYPE).view(T, 1, 1)
    angle = t * torch.as_tensor(freqs, dtype=DTYPE).view(1, H, D // 2)  # (T, H, D/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    if layout == "half":
        x0, x1 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    if layout == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(B, T, H, D)
    raise ValueError(f"rope_layout {layout!r}")


def attention(x, P, prefix, spec):
    """One attention mixer on the normalised input x (B, T, C), with plain materialised (T, T) matrices."""
    B, T, _ = x.shape
    H, D, HD = spec.H, spec.D, spec.HD
    qkv = x @ P[prefix + "wqkv"].T
    if spec.opts["bias"]:
        qkv = qkv + P[prefix + "bqkv"]
    q, k, v = (qkv[..., i * HD:(i + 1) * HD].reshape(B, T, H, D) for i in range(3))
    if spec.opts["qk_norm"]:
        q = rms_norm(q, P[prefix + "q_norm"], RMSNORM_EPS)
        k = rms_norm(k, P[prefix + "k_norm"], RMSNORM_EPS)
    if spec.rotary:
        q = rope(q, spec.freqs, spec.opts["rope_layout"])
        k = rope(k, spec.freqs, spec.opts["rope_layout"])
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)          # (B, H, T, T)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    dist = (i - j).to(DTYPE)                                                 # i - j
    visible = j <= i
    if spec.window > 0:
        visible = visible & (i - j < spec.window)
    if spec.slopes is not None:
        scores = scores - torch.as_tensor(spec.slopes, dtype=DTYPE).view(1, H, 1, 1) * dist
    if spec.pos == "fox":
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


def softplus(x):
    """log(1 + e^x), exactly (no threshold), stable for large |x|; derivative sigmoid(x)."""
    return torch.logaddexp(x, torch.zeros_like(x))


def rfa_coefficients(P, prefix, spec):
    """The per-head SDE coefficients of an rfa layer, each (H,), and the frequencies w' (H, D/2):
    positive ones as softplus(raw) + eps; mu = softplus(raw) (no eps), exactly 0 (raw unused, so its
    gradient is 0) on the zero-decay heads and on every head with `unitary`; nu = D * (nu/D)."""
    eps = spec.eps
    zero = torch.as_tensor(spec.zero_decay)
    if zero.all():
        mu = torch.zeros(spec.H, dtype=DTYPE)
    else:
        mu = torch.where(zero, torch.zeros(spec.H, dtype=DTYPE), softplus(P[prefix + "sde_mu"]))
    nu_over_d = softplus(P[prefix + "sde_nu"]) + eps
    omega = P[prefix + "omega"] if spec.opts["learn_omega"] else torch.as_tensor(spec.omega, dtype=DTYPE)
    return {
        "mu": mu,
        "sigma_tilde2": softplus(P[prefix + "sde_sigma"]) + eps,
        "eta2": softplus(P[prefix + "sde_eta"]) + eps,
        "gamma2": softplus(P[prefix + "sde_gamma"]) + eps,
        "nu_over_d": nu_over_d,
        "nu": spec.D * nu_over_d,
        "kappa": 1.0 + nu_over_d,
        "tau": softplus(P[prefix + "sde_tau"]) + eps,
        "omega": omega,
    }


def complex_rotate(re, im, angle, sign):
    """(re + i im) * e^{sign i angle}, elementwise."""
    cos, sin = torch.cos(angle), sign * torch.sin(angle)
    return re * cos - im * sin, re * sin + im * cos


def rfa(x, P, prefix, spec):
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
    c = rfa_coefficients(P, prefix, spec)

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
        logits = tau * s / math.sqrt(2 * D)
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


KLA_DT_EPS = 1e-7        # Delta = softplus(delta) + 1e-7
KLA_NORM_EPS = 1e-12     # k / max(|k|, eps)
KLA_FLOOR = 1e-12        # the scan's floor on abar^2 and pbar


def kla_dynamics(P, prefix, spec):
    """The time-invariant discrete dynamics of a kla layer, each (M, S) (KLA paper eq. 7-8, Table 2):
    the OU process dz = -a z dt + noise, a = exp(lambda_log) > 0, step Delta = softplus(delta) + 1e-7,
    abar = e^{-a Delta}; process noise p = max(process_noise, p_min) (seqtrain and the authors' code take
    the raw parameter as the diffusion variance: eq. 8 writes p^2) discretised exactly,
    pbar = p / (2a) (1 - e^{-2a Delta}) ("ou"), or pbar = p Delta ("zoh"); pbar = 0 without process noise."""
    o = spec.opts
    a = torch.exp(P[prefix + "lambda_log"])
    dt = softplus(P[prefix + "delta"]) + KLA_DT_EPS
    abar = torch.exp(-a * dt)
    if not spec.noise:
        return abar, torch.zeros_like(abar)
    p = torch.clamp_min(P[prefix + "process_noise"], float(o["p_min"]))
    pbar = p * dt if spec.zoh else p / (2 * a) * (1 - torch.exp(-2 * a * dt))
    return abar, pbar


def kla_scan(v, prec, k, q, abar, pbar):
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
    A2 = torch.clamp_min(abar * abar, KLA_FLOOR)
    Pn = torch.clamp_min(pbar, KLA_FLOOR)
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


def kla(x, P, prefix, spec):
    """One kla mixer (the fused Mamba-style block of the KLA paper, App. A / Figure 7 / Algorithm 1) on
    the normalised input x (B, T, C):
        [z | gate] = x W_in^T;  u = silu(causal depthwise conv_K(z) + b)     (K taps, zero history)
        plain: [v | l | k | q] = u W_s^T;   mamba: v = u, [r | k | q] = u W_s^T, l = r W_ve^T + b_ve
        k, q <- k / |k|, q / |q| (qk_norm);  Lambda^v = 1 / (softplus(l) + obs_var_min)
        y = kla_scan(v, Lambda^v, k, q, abar, pbar) + lambda_skip u;  y <- y silu(gate);  out = y W_out^T"""
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
        k = k / k.norm(dim=-1, keepdim=True).clamp_min(KLA_NORM_EPS)
        q = q / q.norm(dim=-1, keepdim=True).clamp_min(KLA_NORM_EPS)
    prec = 1.0 / (softplus(logvar) + float(o["obs_var_min"]))
    abar, pbar = kla_dynamics(P, prefix, spec)
    y, _ = kla_scan(v, prec, k, q, abar, pbar)
    if spec.skip:
        y = y + P[prefix + "lambda_skip"] * u
    if spec.gate:
        y = y * F.silu(zg[..., M:])
    return y @ P[prefix + "out_proj"].T


MIXERS = {"attention": attention, "rfa": rfa, "kla": kla}


class Reference:
    """The model a run's `model` config section describes, with float64 parameters loaded by name."""

    def __init__(self, model_cfg, tensors):
        self.cfg = model_cfg
        if model_cfg.get("mc_samples", 1) != 1:
            raise ValueError("model.mc_samples > 1 (KLA+ posterior sampling) has no reference here")
        vocab = int(tensors["wte"].shape[0])
        if model_cfg.get("vocab_size", 0) and model_cfg["vocab_size"] != vocab:
            raise ValueError("model.vocab_size differs from the checkpoint's wte")
        shapes = param_shapes(model_cfg, vocab)
        missing = sorted(set(shapes) - set(tensors))
        extra = sorted(set(tensors) - set(shapes))
        if missing or extra:
            raise ValueError(f"checkpoint does not match the config: missing {missing}, unexpected {extra}")
        for name, shape in shapes.items():
            if tuple(tensors[name].shape) != shape:
                raise ValueError(f"{name}: checkpoint shape {tuple(tensors[name].shape)}, config implies {shape}")
        self.names = list(shapes)
        self.P = {n: torch.tensor(np.asarray(tensors[n], dtype=np.float64), dtype=DTYPE, requires_grad=True)
                  for n in self.names}
        self.specs = [mixer_spec(model_cfg, l) for l in range(model_cfg["n_layers"])]
        self.has_mlp = [layer_has_mlp(model_cfg, l) for l in range(model_cfg["n_layers"])]

    def norm(self, x, prefix):
        P = self.P
        if self.cfg["norm"] == "rmsnorm":
            return rms_norm(x, P[prefix + ".weight"], RMSNORM_EPS)
        bias = P.get(prefix + ".bias")
        return F.layer_norm(x, (x.shape[-1],), P[prefix + ".weight"], bias, eps=LAYERNORM_EPS)

    def mlp(self, x, prefix):
        P, kind = self.P, self.cfg["mlp"]["kind"]
        h = x @ P[prefix + "fc.weight"].T
        if prefix + "fc.bias" in P:
            h = h + P[prefix + "fc.bias"]
        if kind == "gelu":
            a = F.gelu(h)  # exact erf form
        elif kind == "relu":
            a = F.relu(h)
        elif kind == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            a = F.silu(gate) * up
        else:
            raise ValueError(f"mlp.kind {kind!r}")
        y = a @ P[prefix + "proj.weight"].T
        if prefix + "proj.bias" in P:
            y = y + P[prefix + "proj.bias"]
        return y

    def autoencoder_decode(self, x):
        """MAD's decoder: every position from the last position's vector plus a sin-cos position code."""
        P = self.P
        B, T, C = x.shape
        half = C // 2
        i = torch.arange(half, dtype=DTYPE)
        w = torch.exp(-math.log(10000.0) * i / (half - 1)) if half > 1 else torch.ones(1, dtype=DTYPE)
        ang = torch.arange(T, dtype=DTYPE)[:, None] * w[None, :]
        pe = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)
        if C % 2:
            pe = torch.cat([pe, torch.zeros(T, 1, dtype=DTYPE)], dim=1)
        h = x[:, -1:, :] + pe[None]
        for n in ("1", "2"):
            h = F.gelu(self.norm(h, f"dec.norm{n}") @ P[f"dec.fc{n}.weight"].T + P[f"dec.fc{n}.bias"])
        return h

    def forward(self, inputs):
        P = self.P
        x = P["wte"][inputs]
        for l, spec in enumerate(self.specs):
            p = f"blocks.{l}."
            x = x + MIXERS[spec.kind](self.norm(x, p + "ln1"), P, p + "mixer.", spec)
            if self.has_mlp[l]:
                x = x + self.mlp(self.norm(x, p + "ln2"), p + "mlp.")
        if self.cfg.get("head", "lm") == "autoencoder":
            x = self.autoencoder_decode(x)
        x = self.norm(x, "lnf")
        head = P["wte"] if self.cfg.get("tie_embeddings", True) else P["head.weight"]
        logits = x @ head.T
        if "head.bias" in P:
            logits = logits + P["head.bias"]
        return logits


def reference_dump(config, model_tensors, tokens):
    """{logits, loss, grad.<name>} as float64 numpy arrays for tokens (B, T+1)."""
    model = Reference(config["model"], model_tensors)
    tok = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    inputs, targets = tok[:, :-1], tok[:, 1:]
    logits = model.forward(inputs)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    loss.backward()
    out = {"logits": logits.detach().numpy(), "loss": np.array([loss.item()])}
    for n in model.names:
        g = model.P[n].grad
        out["grad." + n] = (g if g is not None else torch.zeros_like(model.P[n])).numpy()
    return out


# ----------------------------------------------------------------------------------------------------
# files

def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """Write {name: array} as safetensors: u64 LE header length, JSON header padded with spaces to 8-byte
    alignment, then the raw little-endian tensors back to back in the given order."""
    np_dtype = {"F32": "<f4", "F64": "<f8"}[dtype]
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(np.asarray(arr, dtype=np_dtype)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def run_reference(config_path, model_path, tokens_path, out_path):
    with open(config_path) as f:
        config = json.load(f)
    tensors, _ = safetensors_read.load(model_path)
    tokens = np.load(tokens_path)
    dump = reference_dump(config, tensors, tokens)
    write_safetensors(out_path, dump, {"format": "seqtrain-torch-reference", "precision": "float64",
                                       "torch": torch.__version__})
    print(f"wrote {out_path}: logits {tuple(dump['logits'].shape)}, loss {dump['loss'][0]:.9f}, "
          f"{len(dump) - 2} gradients")
    return dump


# ----------------------------------------------------------------------------------------------------
# committed cases (tests/data/torch_ref/NAME)

CASE_DIR = os.path.join(REPO, "tests", "data", "torch_ref")
VOCAB = 64          # raw_u16 data with ids < VOCAB
B_PROBE, T_PROBE = 2, 24


def _model(d_model=16, heads=2, mixer=None, **extra):
    m = {"d_model": d_model, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": "attention", "heads": heads, "init_std": 0.3, **(mixer or {})}}
    m.update(extra)
    return m


def _rfa_model(heads=2, mixer=None, **extra):
    """A tiny rfa model (the rfa mixer has no init_std: its projections use the complex Rayleigh init)."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": "rfa", "heads": heads, **(mixer or {})}}
    m.update(extra)
    return m


def _kla_model(mixer=None, **extra):
    """A tiny all-KLA model: 2 fused blocks (x += kla(norm(x)), no MLP), d_model 16, d_state 4. The
    dynamics start away from the defaults (larger Delta and process noise, so abar ~ 0.6-0.95 and the
    Moebius denominator is far from abar^2 over T = 24) and the 3 training steps move every SSM
    parameter off its init, so the lambda_log / delta / process_noise gradients are well above the
    tolerance. The projections start at N(0, 0.3) (the mixer's init_std; 0.02 by default) so that the
    sensors, and hence Lambda^v, k and q, vary strongly from token to token."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3, "block": "fused",
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": {"kind": "kla", "d_state": 4, "init_std": 0.3, "p_init": 0.5, "dt_min": 0.05, "dt_max": 0.5,
                   **(mixer or {})}}
    m.update(extra)
    return m


# SC-RFA (M2) settings the ablation cases start from, as the paper's ablations start from M2
_SC = {"spectral_coupling": True, "zero_decay_heads": 1, "damping": 0.2, "rope_base": 100}

# every case: the `model` section of a tiny run (2 layers, d_model 16, 2-4 heads)
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
    "hybrid_alibi_layer1_nomlp": _model(
        heads=4, mixer={"pos": "rope"}, mlp={"kind": "none"},
        layers=[{"at": "1", "mixer": {"pos": "alibi", "heads": 2}}]),
    # rfa: Robust Filter Attention (docs/mixers.md, section `rfa`)
    "rfa": _rfa_model(heads=4),
    "sc_rfa": _rfa_model(heads=4, mixer={**_SC, "head_dim": 4}),
    "rfa_gaussian_flat": _rfa_model(heads=4, mixer={**_SC, "kernel": "gaussian", "prior": "flat"}),
    "rfa_nogate_novrot": _rfa_model(
        heads=4, mixer={**_SC, "head_dim": 6, "mult_gate": False, "rotate_values": False, "eps": 1e-3}),
    "rfa_norot": _rfa_model(
        heads=3, mixer={"head_dim": 4, "rotations": False, "zero_decay_heads": 1, "damping": 0.3,
                        "sigma_tilde2_init": 0.5, "eta2_init": 0.2, "gamma2_init": 0.5}),
    "rfa_unitary": _rfa_model(heads=2, mixer={"unitary": True, "rope_base": 100, "tau_init": 2.0}),
    "rfa_learn_omega_bias_off": _rfa_model(
        heads=2, mixer={**_SC, "learn_omega": True, "bias": False, "zero_decay_heads": 0,
                        "nu_over_d_init": 1.0, "tau_init": 1.5}),
    # kla: Kalman Linear Attention in fused blocks (docs/mixers.md, section `kla`)
    "kla_plain": _kla_model(),
    "kla_mamba_zoh": _kla_model(
        mixer={"sensors": "mamba", "discretization": "zoh", "qk_norm": False, "expand": 1.5, "conv": 3,
               "obs_var_min": 0.05, "skip_init": 0.5}, norm="rmsnorm", tie_embeddings=False),
    "kla_nonoise": _kla_model(
        mixer={"process_noise": False, "gate": False, "dt_min": 0.01, "dt_max": 0.1, "d_state": 3}),
    # MAD's compression backbone: the blocks encode, the last position is decoded at every position
    "autoencoder_swiglu_rmsnorm": _model(
        mixer={"pos": "rope"}, head="autoencoder", norm="rmsnorm", tie_embeddings=False, head_bias=True,
        mlp={"kind": "swiglu", "ratio": 1.5, "bias": False}),
    # a GPT stack with a last KLA layer: 2 attention prenorm blocks (gelu MLP), then a fused kla block
    "gpt_kla": _model(
        n_layers=3, layers=[{"at": "-1", "block": "fused",
                             "mixer": {"kind": "kla", "d_state": 4, "expand": 2, "skip": False, "init_std": 0.3,
                                       "p_init": 0.3, "dt_min": 0.02, "dt_max": 0.3}}]),
}


def case_tokens(name):
    """tokens (B=2, T+1=25) for a case: row 0 random ids (with 0 and VOCAB-1 present), row 1 a repeated
    pattern whose last target is the ignore index -100 (so the mean runs over 47 of 48 positions)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    tok = rng.integers(0, VOCAB, size=(B_PROBE, T_PROBE + 1)).astype(np.int64)
    tok[0, 3], tok[0, 11] = 0, VOCAB - 1
    tok[1, :8] = tok[1, 8:16] = tok[1, 16:24] = rng.integers(0, VOCAB, size=8)
    tok[1, -1] = IGNORE_INDEX
    return tok


def make_case(name, check_c=False):
    """Train the case's tiny model for 3 steps with bin/seqtrain, copy its config.json and newest
    checkpoint into tests/data/torch_ref/NAME/, write tokens.npy and the reference ref.safetensors."""
    seqtrain = os.path.join(REPO, "bin", "seqtrain")
    if not os.access(seqtrain, os.X_OK):
        raise SystemExit(f"{seqtrain} is missing: run `make` first")
    out_dir = os.path.join(CASE_DIR, name)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torch_ref_") as tmp:
        rng = np.random.default_rng(12345)
        rng.integers(0, VOCAB, size=20000).astype("<u2").tofile(os.path.join(tmp, "train.u16"))
        run_cfg = {
            "run": {"name": name, "dir": "runs", "seed": 7, "threads": 1},
            "data": {"train": "train.u16", "format": "raw_u16", "vocab_size": VOCAB},
            "model": CASES[name],
            "train": {"batch_size": 4, "seq_len": 32, "steps": 3},
            "optim": {"lr": 0.05, "grad_clip": 0},
            "schedule": {"kind": "constant"},
        }
        with open(os.path.join(tmp, "case.json"), "w") as f:
            json.dump(run_cfg, f, indent=1)
        subprocess.run([seqtrain, "--config", "case.json"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        run_dir = os.path.join(tmp, "runs", name)
        with open(os.path.join(run_dir, "latest")) as f:
            ckpt = f.read().strip()
        shutil.copyfile(os.path.join(run_dir, "config.json"), os.path.join(out_dir, "config.json"))
        shutil.copyfile(os.path.join(run_dir, ckpt, "model.safetensors"), os.path.join(out_dir, "model.safetensors"))
    np.save(os.path.join(out_dir, "tokens.npy"), case_tokens(name))
    dump = run_reference(os.path.join(out_dir, "config.json"), os.path.join(out_dir, "model.safetensors"),
                         os.path.join(out_dir, "tokens.npy"), os.path.join(out_dir, "ref.safetensors"))
    if check_c:
        compare_with_seqeval(out_dir, dump)


def compare_with_seqeval(case_dir, dump):
    """Run bin/seqeval --probe on a case and print the largest differences from the reference."""
    with tempfile.TemporaryDirectory(prefix="torch_ref_probe_") as tmp:
        run = os.path.join(tmp, "run")
        ck = os.path.join(run, "ckpt-00000001")
        os.makedirs(ck)
        shutil.copyfile(os.path.join(case_dir, "config.json"), os.path.join(run, "config.json"))
        shutil.copyfile(os.path.join(case_dir, "model.safetensors"), os.path.join(ck, "model.safetensors"))
        with open(os.path.join(run, "latest"), "w") as f:
            f.write("ckpt-00000001\n")
        probe = os.path.join(tmp, "probe.safetensors")
        subprocess.run([os.path.join(REPO, "bin", "seqeval"), "--run", run, "--probe",
                        os.path.join(case_dir, "tokens.npy"), "--out", probe], check=True, stdout=subprocess.DEVNULL)
        c, _ = safetensors_read.load(probe)
    worst = []
    for name, ref in dump.items():
        diff = np.abs(np.asarray(c[name], dtype=np.float64) - ref)
        worst.append((float(diff.max() / max(np.abs(ref).max(), 1e-30)), float(diff.max()), name))
    worst.sort(reverse=True)
    for scaled, absolute, name in worst[:3]:
        print(f"  seqeval vs reference: {name}: max|diff| {absolute:.3g} = {scaled:.3g} x max|ref|")


# ----------------------------------------------------------------------------------------------------
# self-check of the rfa reference (no C side needed)

def inv_softplus(y):
    return float(np.log(np.expm1(y)))


def causal_shift(layer, x_all, ts):
    """(worst change of any output before t, whether every output at t moved) when the input at t is
    perturbed, for each t in ts: a causal layer gives (0, True)"""
    with torch.no_grad():
        y = layer(x_all)
        worst, moved = 0.0, True
        for t in ts:
            x2 = x_all.clone()
            x2[:, t] += torch.randn(x_all.shape[0], x_all.shape[2], dtype=DTYPE)
            y2 = layer(x2)
            worst = max(worst, float((y2[:, :t] - y[:, :t]).abs().max()) if t else 0.0)
            moved = moved and float((y2[:, t] - y[:, t]).abs().min()) > 0
    return worst, moved


def gradcheck_ok(fn, inputs):
    """torch.autograd.gradcheck in float64 at the tolerances the self-tests use; False (and the reason
    printed) instead of an exception"""
    try:
        return torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    except RuntimeError as e:
        print(str(e)[:2000])
        return False


def rfa_test_spec(C=8, **opts):
    """An RfaSpec for a tiny test layer: heads 2, damping 0.3, base 10 (fast turns over short T)."""
    o = dict(RFA_DEFAULTS)
    o.update({"heads": 2, "damping": 0.3, "rope_base": 10.0, "zero_decay_heads": 1})
    o.update(opts)
    o["kind"] = "rfa"
    return RfaSpec(o, C)


def rfa_random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one rfa layer: projections at a scale that makes attention far
    from uniform, SDE raws around their inits (mu around damping * max band), omega around its init."""
    g = np.random.default_rng(seed)
    o, H = spec.opts, spec.H
    P = {}
    for name, shape in mixer_param_shapes(spec, C).items():
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


def rfa_loops(x, P, spec):
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
    tau, s2, e2, g2, nud = sp("sde_tau"), sp("sde_sigma"), sp("sde_eta"), sp("sde_gamma"), sp("sde_nu")
    out = torch.zeros(B, T, H, D, dtype=zc.dtype)
    for h in range(H):
        mu = 0.0 if spec.zero_decay[h] else softplus(P["sde_mu"][h])
        nu = D * nud[h]
        for b in range(B):
            for i in range(T):
                logit, weight = [], []
                for j in range(i + 1):
                    E = torch.exp(-mu * torch.tensor(float(i - j), dtype=DTYPE))
                    if spec.unitary:
                        logit.append(tau[h] * (q[b, i, h].conj() * k[b, j, h]).sum().real / math.sqrt(2 * D))
                    else:
                        V = s2[h] * (1 - E * E) + e2[h] * E * E + g2[h] if o["prior"] == "dle" else 1.0
                        r2 = (q[b, i, h] - E * k[b, j, h]).abs().pow(2).sum()
                        cg = 1 / (nu * V) if o["mult_gate"] else 1 / nu
                        pen = (1 + nud[h]) * torch.log(1 + cg * r2) if o["kernel"] == "student" else cg * r2
                        logit.append(-tau[h] * torch.log(torch.as_tensor(V, dtype=DTYPE)) - tau[h] * pen)
                    weight.append(E)
                A = torch.softmax(torch.stack(logit), dim=0) * torch.stack(weight)
                out[b, i, h] = vphase[i, h] * (A.to(zc.dtype).unsqueeze(-1) * v[b, : i + 1, h]).sum(0)
    flat = torch.stack([out.real, out.imag], dim=3).reshape(B, T, 2 * H * D)
    return flat @ P["wo"].T + (P["bo"] if spec.bias else 0)


class SelfChecks:
    """A mixer reference's self-test: report(ok, what) prints one ok / not ok line and keeps the failures;
    summary(name) prints the count and returns it (the self-test's result)."""

    def __init__(self):
        self.fails = []

    def __call__(self, ok, what):
        print(f"{'ok' if ok else 'not ok'}  {what}")
        if not ok:
            self.fails.append(what)

    def summary(self, name):
        print(f"{len(self.fails)} failure(s)" if self.fails else f"all {name} self-checks passed")
        return len(self.fails)


def self_test_rfa():
    """Checks of the rfa reference on its own: causality, mu = 0 heads, the unitary limit against an
    independent complex implementation, gradcheck, the large-nu limit of the student kernel, and every
    rfa CASE built end to end on random weights. Returns the number of failures."""
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
        "learn_omega, bias off, head_dim 6": {"learn_omega": True, "bias": False, "head_dim": 6,
                                               "zero_decay_heads": 0, "spectral_coupling": True},
    }
    x_all = torch.randn(2, 12, C, dtype=DTYPE)

    # (a) causality: changing the input at t changes no output before t (and does change outputs from t)
    for name, opts in variants.items():
        spec = rfa_test_spec(C, **opts)
        P = rfa_random_params(spec, C, 1)
        worst, moved = causal_shift(lambda x: rfa(x, P, "", spec), x_all, (0, 5, 11))
        report(worst == 0.0 and moved, f"(a) causal: {name}: max|dy| before t = {worst:.1e}, outputs at t move")

    # (b) mu = 0 heads: finite outputs and gradients, exactly zero gradient of their raw sde_mu, the raw
    # value unused, no 1/mu anywhere (a head at mu -> 0 tends to the mu = 0 head), long T stays finite
    for name, opts in (("zero_decay_heads 1 of 2", {}), ("all heads zero-decay (zero_decay_heads 2)",
                       {"zero_decay_heads": 2}), ("unitary", {"unitary": True})):
        spec = rfa_test_spec(C, **opts)
        P = rfa_random_params(spec, C, 2)
        x = torch.randn(2, 40, C, dtype=DTYPE, requires_grad=True)
        y = rfa(x, P, "", spec)
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
            same = bool((rfa(x, P2, "", spec) == y).all())
        report(finite and zero_ok and same,
               f"(b) mu=0: {name}: y and grads finite (T=40), grad sde_mu on mu=0 heads == 0, raw mu there unused")
    spec0, spec1 = rfa_test_spec(C, zero_decay_heads=1), rfa_test_spec(C, zero_decay_heads=0)
    P = rfa_random_params(spec0, C, 3)
    with torch.no_grad():
        P1 = dict(P)
        raw = P["sde_mu"].detach().clone()
        raw[0] = inv_softplus(1e-9)
        P1["sde_mu"] = raw
        d = float((rfa(x_all, P, "", spec0) - rfa(x_all, P1, "", spec1)).abs().max())
    report(d < 1e-7, f"(b) mu -> 0: head 0 at mu = 1e-9 vs mu = 0 exactly: max|dy| = {d:.1e}")

    # (c) unitary + rotations + rotate_values == plain softmax attention on rotated complex vectors
    for name, opts in (("bias on", {}), ("bias off, sc, head_dim 4, 3 heads",
                                         {"bias": False, "spectral_coupling": True, "head_dim": 4, "heads": 3}),
                       ("learn_omega", {"learn_omega": True})):
        spec = rfa_test_spec(C, unitary=True, **opts)
        P = rfa_random_params(spec, C, 4)
        with torch.no_grad():
            a, b = rfa(x_all, P, "", spec), rfa_loops(x_all, P, spec)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"(c) unitary == complex softmax attention on rotated q, k, v ({name}): "
                          f"max|dy|/max|y| = {d:.1e}")
    # (c') every variant against the same element-by-element complex form (R^2 as |q~ - E k~|^2)
    for name, opts in variants.items():
        spec = rfa_test_spec(C, **opts)
        P = rfa_random_params(spec, C, 9)
        with torch.no_grad():
            a, b = rfa(x_all, P, "", spec), rfa_loops(x_all, P, spec)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"(c') {name} == element-by-element complex form: max|dy|/max|y| = {d:.1e}")

    # (d) gradcheck in float64 w.r.t. the input and the sde_* (and omega) parameters
    for name, opts in variants.items():
        spec = rfa_test_spec(4, **{**opts, "head_dim": 2, "heads": opts.get("heads", 2)})
        P = rfa_random_params(spec, 4, 5)
        names = [n for n in list(RfaSpec.SDE) + ["omega"] if n in P]
        x = torch.randn(1, 6, 4, dtype=DTYPE, requires_grad=True)

        def fn(x, *vals):
            Q = dict(P)
            Q.update(dict(zip(names, vals)))
            return rfa(x, Q, "", spec)
        ok = gradcheck_ok(fn, (x, *[P[n] for n in names]))
        report(ok, f"(d) gradcheck: {name} (x, {', '.join(names)})")

    # (e) student with nu/D -> inf: kappa log(1 + R^2/(nu V)) -> R^2/(D V), the gaussian kernel's
    # a - tau c R^2 at nu = D (nu/D = 1), difference O(D/nu)
    spec_s = rfa_test_spec(C, spectral_coupling=True)
    spec_g = rfa_test_spec(C, spectral_coupling=True, kernel="gaussian")
    P = rfa_random_params(spec_s, C, 6)
    diffs = []
    with torch.no_grad():
        Pg = dict(P)
        Pg["sde_nu"] = torch.full((2,), inv_softplus(1.0 - spec_g.eps), dtype=DTYPE)
        yg = rfa(x_all, Pg, "", spec_g)
        for n in (1e2, 1e4, 1e6):
            Ps = dict(P)
            Ps["sde_nu"] = torch.full((2,), n, dtype=DTYPE)
            diffs.append(float((rfa(x_all, Ps, "", spec_s) - yg).abs().max() / yg.abs().max()))
    rate = diffs[1] / diffs[2]
    report(diffs[2] < 1e-5 and 30 < rate < 300,
           "(e) student at nu/D = 1e2, 1e4, 1e6 -> gaussian at nu/D = 1: max|dy|/max|y| = "
           + ", ".join(f"{d:.1e}" for d in diffs) + f" (O(1/nu): ratio {rate:.0f})")

    # (f) every rfa CASE: parameter names/shapes, the full model forward/backward on random weights
    for name, case_model in CASES.items():
        if case_model["mixer"]["kind"] != "rfa":
            continue
        # the model section as seqtrain's resolved config.json would hold it (model-level defaults)
        model = {"vocab_size": 0, "block": "prenorm", "norm": "layernorm", "norm_bias": True, "layers": [],
                 "tie_embeddings": True, "head_bias": False, **case_model}
        shapes = param_shapes(model, VOCAB)
        g = np.random.default_rng(7)
        tensors = {}
        for pname, shape in shapes.items():
            if ".mixer." in pname:
                continue
            if pname.endswith("weight") and ("ln" in pname):
                tensors[pname] = 1 + 0.1 * g.normal(size=shape)
            else:
                tensors[pname] = 0.3 * g.normal(size=shape)
        for l in range(model["n_layers"]):
            spec = mixer_spec(model, l)
            for pname, t in rfa_random_params(spec, model["d_model"], 8 + l, f"blocks.{l}.mixer.").items():
                tensors[pname] = t.detach().numpy()
        dump = reference_dump({"model": model}, tensors, case_tokens(name))
        finite = all(np.isfinite(v).all() for v in dump.values())
        # per head, which SDE gradients the spec's formulas make exactly zero: mu and sigma~^2 on mu = 0
        # heads (E = 1, so 1 - E^2 = 0), sigma/eta/gamma with a flat prior, all but tau when unitary
        zeros_ok = True
        for l in range(model["n_layers"]):
            spec = mixer_spec(model, l)
            o, z = spec.opts, spec.zero_decay
            none, every = np.zeros(spec.H, bool), np.ones(spec.H, bool)
            flat = every if (spec.unitary or o["prior"] == "flat") else none
            expect = {"sde_mu": z, "sde_sigma": z | flat, "sde_eta": flat, "sde_gamma": flat,
                      "sde_nu": every if spec.unitary else none, "sde_tau": none}
            for n, zero in expect.items():
                g = dump[f"grad.blocks.{l}.mixer.{n}"]
                zeros_ok &= bool((g[zero] == 0).all() and (g[~zero] != 0).all())
            if o["learn_omega"]:
                zeros_ok &= bool((dump[f"grad.blocks.{l}.mixer.omega"] != 0).all())
        spec = mixer_spec(model, 0)
        names = [n.split("mixer.")[1] for n in shapes if n.startswith("blocks.0.mixer.")]
        report(finite and zeros_ok,
               f"(f) case {name}: H={spec.H} D={spec.D} ({int(spec.zero_decay.sum())} mu=0), mixer tensors "
               f"{' '.join(names)}; loss {dump['loss'][0]:.4f}; finite; SDE grads zero exactly where implied")

    # (g) defaults: {"kind": "rfa"} alone resolves to the spec's table
    spec = mixer_spec({"d_model": 16, "n_layers": 1, "mixer": {"kind": "rfa"}}, 0)
    report(spec.H == 8 and spec.D == 2 and spec.bias and not spec.unitary and spec.eps == 1e-6
           and list(spec.zero_decay) == [True, True] + [False] * 6 and spec.opts["kernel"] == "student"
           and spec.opts["prior"] == "dle" and abs(spec.omega[0, 0] - 1.0) < 1e-15,
           "(g) defaults: heads 8, D = C/H = 2, bias on, 2 zero-decay heads, student/dle, eps 1e-6, w' = 1")
    return report.summary("rfa")


# ----------------------------------------------------------------------------------------------------
# self-check of the kla reference (no C side needed)

def kla_test_spec(C=4, **opts):
    """A KlaSpec for a tiny test layer: d_state 3, conv 3."""
    o = dict(KLA_DEFAULTS)
    o.update({"d_state": 3, "conv": 3})
    o.update(opts)
    o["kind"] = "kla"
    return KlaSpec(o, C)


def kla_random_params(spec, C, seed, prefix=""):
    """Random float64 leaf tensors for one kla layer, away from the init: projections N(0, 0.5), a =
    e^{lambda_log} in [0.4, 2.7], Delta in [0.05, 0.6], p in [0.1, 1], lambda_skip in [-1.5, 0.5]."""
    g = np.random.default_rng(seed)
    P = {}
    for name, shape in mixer_param_shapes(spec, C).items():
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


def kla_moment_form(v, prec, k, q, abar, pbar):
    """The textbook (moment-form) Kalman filter of the same model, element by element with Python floats:
    prior z_0 ~ N(0, 1); predict mu- = abar mu, P- = abar^2 P + pbar; update with the gain
    G = P- k / (k^2 P- + 1/Lambda^v): mu = mu- + G (v - k mu-), P = (1 - G k) P-; y = sum_s q mu,
    yvar = sum_s q^2 P. Same shapes as kla_scan."""
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


def kla_parallel(v, prec, k, q, abar, pbar):
    """The scan of Theorems 1-2 as parallel prefix scans (Hillis-Steele, log2 T rounds): the precision by
    composing the 2x2 Moebius matrices M_t = [[1 + pbar phi_t, abar^2 phi_t], [pbar, abar^2]] (eq. 17),
    lambda_t = M_{1:t}(lambda_0); then the information mean by composing the affine maps (f_t, b_t),
    f_t = abar / (abar^2 + pbar lambda_{t-1}), b_t = k_t Lambda^v_t v_t (eq. 19, Corollary 2.1). No floors
    (pbar > 0 here). Returns y, yvar like kla_scan."""
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


def self_test_kla():
    """Checks of the kla reference on its own: the scan against a moment-form Kalman filter and against
    the parallel Moebius/affine scans of Theorems 1-2, the p = 0 closed form (Theorem 3), causality,
    gradcheck of the layer, and every kla CASE end to end. Returns the number of failures."""
    torch.manual_seed(0)
    report = SelfChecks()

    g = np.random.default_rng(3)
    B, T, M, S = 2, 37, 3, 4
    t64 = lambda a: torch.tensor(a, dtype=DTYPE)                          # noqa: E731
    v, k, q = t64(g.normal(size=(B, T, M))), t64(g.normal(size=(B, T, S))), t64(g.normal(size=(B, T, S)))
    prec = t64(0.2 + 3 * g.uniform(size=(B, T, M)))
    abar, pbar = t64(0.5 + 0.49 * g.uniform(size=(M, S))), t64(0.01 + 0.5 * g.uniform(size=(M, S)))

    # (a) information form == moment form (the paper's Theorem 2 corollary: mu = eta / lambda)
    y, yv = kla_scan(v, prec, k, q, abar, pbar)
    ym, yvm = kla_moment_form(v, prec, k, q, abar, pbar)
    d, dv = float(np.abs(y.numpy() - ym).max()), float(np.abs(yv.numpy() - yvm).max())
    report(d < 1e-12 and dv < 1e-12, f"(a) information-form scan == moment-form Kalman filter (T={T}): "
                                      f"max|dy| {d:.1e}, max|dyvar| {dv:.1e}")
    # with tiny and large precisions (a near-ignored and a near-exact observation)
    prec2 = t64(np.exp(g.uniform(-8, 8, size=(B, T, M))))
    y, yv = kla_scan(v, prec2, k, q, abar, pbar)
    ym, yvm = kla_moment_form(v, prec2, k, q, abar, pbar)
    d = float(np.abs(y.numpy() - ym).max() / np.abs(ym).max())
    report(d < 1e-10, f"(a) same with Lambda^v over e^-8..e^8: max|dy|/max|y| {d:.1e}")

    # (b) sequential == the parallel Moebius (Theorem 1) and affine (Theorem 2) prefix scans
    y, yv = kla_scan(v, prec, k, q, abar, pbar)
    yp, yvp = kla_parallel(v, prec, k, q, abar, pbar)
    d = max(float((y - yp).abs().max()), float((yv - yvp).abs().max()))
    report(d < 1e-11, f"(b) sequential scan == parallel Moebius/affine prefix scans: max|diff| {d:.1e}")

    # (c) p = 0, abar and k time-invariant: Theorem 3's convolutions lambda_t = a^-2t + sum_j a^-2(t-j) phi_j,
    # eta_t = sum_j a^-(t-j) k Lambda^v_j v_j (the floor on pbar changes it by ~1e-12 relative)
    Tc = 12
    kc = t64(np.broadcast_to(g.normal(size=(1, 1, S)), (B, Tc, S)).copy())
    vc, pc = v[:, :Tc], prec[:, :Tc]
    y, _ = kla_scan(vc, pc, kc, q[:, :Tc], abar, torch.zeros_like(pbar))
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
    C = 4
    x_all = torch.randn(2, 10, C, dtype=DTYPE)
    # (d) causality
    for name, opts in variants.items():
        spec = kla_test_spec(C, **opts)
        P = kla_random_params(spec, C, 1)
        worst, moved = causal_shift(lambda x: kla(x, P, "", spec), x_all, (0, 4, 9))
        report(worst == 0.0 and moved, f"(d) causal: {name}: max|dy| before t = {worst:.1e}, outputs at t move")

    # (e) gradcheck in float64 w.r.t. the input and every parameter of the layer
    for name, opts in variants.items():
        spec = kla_test_spec(C, **opts)
        P = kla_random_params(spec, C, 5)
        names = list(P)
        x = torch.randn(1, 7, C, dtype=DTYPE, requires_grad=True)

        def fn(x, *vals):
            return kla(x, dict(zip(names, vals)), "", spec)
        ok = gradcheck_ok(fn, (x, *[P[n] for n in names]))
        report(ok, f"(e) gradcheck: {name} (x, {', '.join(names)})")

    # (f) every kla CASE: parameter names/shapes (no ln2/MLP in fused blocks), the full model forward and
    # backward on random weights, every SSM parameter with a nonzero gradient
    for name, case_model in CASES.items():
        kinds = {case_model["mixer"]["kind"]} | {ov.get("mixer", {}).get("kind") for ov in case_model.get("layers", [])}
        if "kla" not in kinds:
            continue
        model = {"vocab_size": 0, "block": "prenorm", "norm": "layernorm", "norm_bias": True, "layers": [],
                 "tie_embeddings": True, "head_bias": False, **case_model}
        shapes = param_shapes(model, VOCAB)
        g2 = np.random.default_rng(7)
        tensors = {}
        for pname, shape in shapes.items():
            if ".mixer." in pname and mixer_spec(model, int(pname.split(".")[1])).kind == "kla":
                continue
            if pname.endswith("weight") and ("ln" in pname):
                tensors[pname] = 1 + 0.1 * g2.normal(size=shape)
            else:
                tensors[pname] = 0.3 * g2.normal(size=shape)
        layout_ok = True
        for l in range(model["n_layers"]):
            spec = mixer_spec(model, l)
            fused = layer_block(model, l) == "fused"
            layout_ok &= (f"blocks.{l}.ln2.weight" in shapes) == (not fused)
            layout_ok &= (f"blocks.{l}.mlp.fc.weight" in shapes) == (not fused)
            if spec.kind == "kla":
                layout_ok &= fused
                for pname, t in kla_random_params(spec, model["d_model"], 8 + l, f"blocks.{l}.mixer.").items():
                    tensors[pname] = t.detach().numpy()
        dump = reference_dump({"model": model}, tensors, case_tokens(name))
        finite = all(np.isfinite(v).all() for v in dump.values())
        ssm = [n for n in dump if re.search(r"mixer\.(lambda_log|delta|process_noise|lambda_skip)$", n)]
        nonzero = all((dump[n] != 0).all() for n in ssm)
        report(finite and nonzero and layout_ok,
               f"(f) case {name}: {len(shapes)} tensors, fused layers without ln2/mlp; loss {dump['loss'][0]:.4f}; "
               f"finite; {len(ssm)} SSM gradients all nonzero")

    # (g) defaults: {"kind": "kla"} alone resolves to the schema's table
    spec = mixer_spec({"d_model": 16, "n_layers": 1, "mixer": {"kind": "kla"}}, 0)
    report(spec.M == 16 and spec.S == 16 and spec.K == 4 and not spec.mamba and not spec.zoh and spec.R == 2
           and spec.noise and spec.gate and spec.skip and spec.Ns == 64,
           "(g) defaults: M = C, S 16, K 4, plain, ou, process noise, gate, skip (Ns = 2M + 2S), R = ceil(C/8)")
    return report.summary("kla")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="a run's resolved config.json")
    ap.add_argument("--model", help="a seqtrain model.safetensors")
    ap.add_argument("--tokens", help="tokens.npy, integers (B, T+1)")
    ap.add_argument("--out", help="the reference dump to write (.safetensors)")
    ap.add_argument("--make-case", action="append", default=[], metavar="NAME",
                    help="regenerate tests/data/torch_ref/NAME (repeatable)")
    ap.add_argument("--make-all", action="store_true", help="regenerate every case")
    ap.add_argument("--list-cases", action="store_true", help="print the case names")
    ap.add_argument("--check-c", action="store_true", help="with --make-*: also compare bin/seqeval --probe")
    ap.add_argument("--self-test-rfa", action="store_true",
                    help="check the rfa reference on its own (causality, mu = 0, unitary limit, gradcheck, ...)")
    ap.add_argument("--self-test-kla", action="store_true",
                    help="check the kla reference on its own (moment-form Kalman filter, parallel scans, gradcheck)")
    args = ap.parse_args(argv[1:])
    torch.set_num_threads(1)
    if args.self_test_rfa or args.self_test_kla:
        failures = self_test_rfa() if args.self_test_rfa else 0
        failures += self_test_kla() if args.self_test_kla else 0
        return 1 if failures else 0
    if args.list_cases:
        print("\n".join(CASES))
        return 0
    names = list(CASES) if args.make_all else args.make_case
    if names:
        for n in names:
            if n not in CASES:
                ap.error(f"unknown case {n!r} (cases: {', '.join(CASES)})")
        for n in names:
            print(f"case {n}")
            make_case(n, args.check_c)
        return 0
    if not (args.config and args.model and args.tokens and args.out):
        ap.error("give --config, --model, --tokens and --out (or --make-case / --make-all)")
    run_reference(args.config, args.model, args.tokens, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
