"""Pieces every module of the reference shares: precision and constants, the config's layer helpers, the
small maths the mixers and the model both use, the safetensors writer, and the self-test helpers.

Mirrors, on the C side: src/model/model.c's layer resolution (`layer_matches_`, `layer_mixer_json_`, the
block option of `layer_fused_`, whose "auto" mixers.layer_block resolves), src/nn/norm.c (RMSNorm),
src/nn/rotary.c (RoPE), src/mixers/mixer_kit.h (softplus), src/ckpt/safetensors.c (the file format).
Written from the method descriptions, not from the C code: everything here computes in float64 (DTYPE),
so the reference's own error is ~1e-15.

Conventions of the package: a layer's parameters live in one dict P {full name: float64 leaf tensor}; a
mixer reads its own through `prefix` ("blocks.L.mixer."), so the names are seqtrain's parameter names.
"""
import json
import os
import re
import struct
import sys

import numpy as np
import torch

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # scripts/
REPO = os.path.dirname(SCRIPTS)
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
import safetensors_read  # noqa: E402  (scripts/safetensors_read.py)

DTYPE = torch.float64
LAYERNORM_EPS = 1e-5
RMSNORM_EPS = 1e-6
IGNORE_INDEX = -100


# ----------------------------------------------------------------------------------------------------
# configuration (model.layers overrides, block kinds)

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


def layer_mixer_options(model_cfg, layer):
    """The mixer options one layer's config gives, before the kind's defaults: model.mixer with every
    matching model.layers[] override merged over it, in order (an override with a different "kind"
    replaces the options whole). Includes "kind". mixers.layer_mixer fills in the defaults."""
    mix = dict(model_cfg.get("mixer", {"kind": "attention"}))
    for ov in model_cfg.get("layers", []):
        if not layer_matches(ov["at"], layer, model_cfg["n_layers"]):
            continue
        over = ov.get("mixer", {})
        if "kind" in over and over["kind"] != mix.get("kind"):
            mix = dict(over)
        else:
            mix.update(over)
    return mix


def layer_block_option(model_cfg, layer):
    """The block option of one layer, "auto", "prenorm" or "fused": model.block, then every matching
    model.layers[] override that names a block other than "inherit", in order. mixers.layer_block
    resolves "auto" through the layer's mixer."""
    block = model_cfg.get("block", "prenorm")
    for ov in model_cfg.get("layers", []):
        b = ov.get("block", "inherit")
        if b != "inherit" and layer_matches(ov["at"], layer, model_cfg["n_layers"]):
            block = b
    if block not in ("auto", "prenorm", "fused"):
        raise ValueError(f"layer {layer}: block {block!r} has no reference here")
    return block


# ----------------------------------------------------------------------------------------------------
# shared maths

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


def short_conv(u, w):
    """silu of the causal depthwise conv (FLA's ShortConvolution, no bias): out_t[c] = sum_j w[c, j] u_{t-(K-1)+j}[c]
    (zeros before t = 0). u (B, T, W), w (W, K)."""
    B, T, Cc = u.shape
    K = w.shape[1]
    pad = torch.cat([torch.zeros(B, K - 1, Cc, dtype=u.dtype), u], dim=1)
    return torch.nn.functional.silu(sum(w[:, j] * pad[:, j:j + T] for j in range(K)))


def conv_taps(opts):
    """The taps of a mixer's `conv` key: 0 or 1 (or no key) -> 0, no conv."""
    k = int(opts.get("conv", 0))
    return k if k > 1 else 0


def conv_shapes(HK, HV, K):
    """The short convs' tensors q_conv1d, k_conv1d (HK, K), v_conv1d (HV, K); none without a conv (K = 0)."""
    return {"q_conv1d": (HK, K), "k_conv1d": (HK, K), "v_conv1d": (HV, K)} if K else {}


def project(x, P, prefix, name, K, without=None):
    """Stream `name` (q, k or v) of x (B, T, C): silu(conv_K(x name_proj^T)) with the taps name_conv1d when K
    (FLA's use_short_conv), else without(x name_proj^T) (None: the projection itself)."""
    u = x @ P[prefix + name + "_proj"].T
    if K:
        return short_conv(u, P[prefix + name + "_conv1d"])
    return without(u) if without else u


def softplus(x):
    """log(1 + e^x), exactly (no threshold), stable for large |x|; derivative sigmoid(x)."""
    return torch.logaddexp(x, torch.zeros_like(x))


def inv_softplus(y):
    return float(np.log(np.expm1(y)))


# ----------------------------------------------------------------------------------------------------
# files

def read_safetensors(path):
    """({name: numpy array}, metadata) of a .safetensors file (scripts/safetensors_read.py, no package)."""
    return safetensors_read.load(path)


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


# ----------------------------------------------------------------------------------------------------
# committed cases: the `model` section most cases start from

def tiny_model(mixer, **extra):
    """The `model` section of a tiny case: d_model 16, 2 layers, init_std 0.3, a gelu MLP of ratio 1 and
    the given mixer options; `extra` sets or overrides model keys (n_layers, norm, layers, ...)."""
    m = {"d_model": 16, "n_layers": 2, "init_std": 0.3,
         "mlp": {"kind": "gelu", "ratio": 1},
         "mixer": mixer}
    m.update(extra)
    return m


# ----------------------------------------------------------------------------------------------------
# self-test helpers (a mixer module's optional self_test(whole))

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


def t64(a):
    """An array (or number) as a float64 tensor: the self-tests' inputs drawn with numpy."""
    return torch.tensor(a, dtype=DTYPE)


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


def gradcheck_layer(forward, spec, P, x, names=None):
    """gradcheck_ok of a mixer's forward(x, P, "", spec) w.r.t. the input x and the tensors of P in names
    (every tensor of P by default; the others stay fixed)"""
    names = list(P) if names is None else names

    def fn(x, *vals):
        return forward(x, {**P, **dict(zip(names, vals))}, "", spec)
    return gradcheck_ok(fn, (x, *[P[n] for n in names]))


def check_layer_variants(report, forward, tiny_spec, random_params, variants, alt, tags, C=8, grad_T=6,
                         relative=False, what="sequential == (T, T) form"):
    """The layer checks of a mixer, per variant (name -> tiny_spec options) at width C: tags[0] forward(..., **alt)
    equals the default form to 1e-12 (max|dy|, or max|dy|/max|y| with relative; skipped when alt is None, a mixer
    with one form), tags[1] causality, tags[2] gradcheck in float64 w.r.t. the input and every parameter (T grad_T)"""
    x_all = torch.randn(2, 10, C, dtype=DTYPE)
    for name, opts in variants.items():
        spec = tiny_spec(C, **opts)
        P = random_params(spec, C, 1)
        if alt is not None:
            with torch.no_grad():
                y = forward(x_all, P, "", spec)
                d = float((y - forward(x_all, P, "", spec, **alt)).abs().max())
                if relative:
                    d /= float(y.abs().max())
            report(d < 1e-12, f"({tags[0]}) layer, {name}: {what}, max|dy|{'/max|y|' if relative else ''} {d:.1e}")
        worst, moved = causal_shift(lambda x: forward(x, P, "", spec), x_all, (0, 4, 9))
        report(worst == 0.0 and moved, f"({tags[1]}) causal: {name}: max|dy| before t = {worst:.1e}, outputs at t move")
    for name, opts in variants.items():
        spec = tiny_spec(C, **opts)
        P = random_params(spec, C, 5)
        ok = gradcheck_layer(forward, spec, P, torch.randn(1, grad_T, C, dtype=DTYPE, requires_grad=True))
        report(ok, f"({tags[2]}) gradcheck: {name} (x, {', '.join(P)})")
