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

Model definition implemented here (names are seqtrain's parameter names):
    x = wte[tokens]
    per block l: x += mixer(norm(x));  x += mlp(norm(x))     (no MLP and no ln2 when mlp.kind = none)
    logits = norm_f(x) @ W_head^T (+ head.bias), W_head = wte when tie_embeddings
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
    (an override with a different "kind" replaces the options whole), then the defaults filled in."""
    mix = dict(model_cfg.get("mixer", {"kind": "attention"}))
    for ov in model_cfg.get("layers", []):
        if not layer_matches(ov["at"], layer, model_cfg["n_layers"]):
            continue
        over = ov.get("mixer", {})
        if "kind" in over and over["kind"] != mix.get("kind"):
            mix = dict(over)
        else:
            mix.update(over)
    if mix.get("kind") != "attention":
        raise ValueError(f"layer {layer}: mixer kind {mix.get('kind')!r} has no reference here")
    opts = dict(ATTENTION_DEFAULTS)
    unknown = set(mix) - set(opts) - {"kind"}
    if unknown:
        raise ValueError(f"layer {layer}: unknown attention options {sorted(unknown)}")
    opts.update({k: v for k, v in mix.items() if k != "kind"})
    return opts


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
        att = AttentionSpec(layer_mixer(model_cfg, l), C)
        shapes[p + "mixer.wqkv"] = (3 * att.HD, C)
        if att.opts["bias"]:
            shapes[p + "mixer.bqkv"] = (3 * att.HD,)
        shapes[p + "mixer.wo"] = (C, att.HD)
        if att.opts["bias"]:
            shapes[p + "mixer.bo"] = (C,)
        if att.opts["qk_norm"]:
            shapes[p + "mixer.q_norm"] = (att.D,)
            shapes[p + "mixer.k_norm"] = (att.D,)
        if att.pos == "fox":
            shapes[p + "mixer.fgate_w"] = (att.H, C)
            shapes[p + "mixer.fgate_b"] = (att.H,)
        if mlp["kind"] != "none":
            shapes[p + "ln2.weight"] = (C,)
            if norm_bias:
                shapes[p + "ln2.bias"] = (C,)
            shapes[p + "mlp.fc.weight"] = (fc_rows, C)
            if mlp.get("bias", True):
                shapes[p + "mlp.fc.bias"] = (fc_rows,)
            shapes[p + "mlp.proj.weight"] = (C, hidden)
            if mlp.get("bias", True):
                shapes[p + "mlp.proj.bias"] = (C,)
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


class Reference:
    """The model a run's `model` config section describes, with float64 parameters loaded by name."""

    def __init__(self, model_cfg, tensors):
        self.cfg = model_cfg
        if model_cfg.get("block", "prenorm") != "prenorm":
            raise ValueError(f"block {model_cfg['block']!r} has no reference here")
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
        C = model_cfg["d_model"]
        self.specs = [AttentionSpec(layer_mixer(model_cfg, l), C) for l in range(model_cfg["n_layers"])]

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

    def forward(self, inputs):
        P = self.P
        x = P["wte"][inputs]
        for l, spec in enumerate(self.specs):
            p = f"blocks.{l}."
            x = x + attention(self.norm(x, p + "ln1"), P, p + "mixer.", spec)
            if self.cfg["mlp"]["kind"] != "none":
                x = x + self.mlp(self.norm(x, p + "ln2"), p + "mlp.")
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
    args = ap.parse_args(argv[1:])
    torch.set_num_threads(1)
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
