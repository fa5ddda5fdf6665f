"""Selective RoPE (the Selective RoPE paper; docs/mixers.md): the `selective_rope` option block of gla,
gated_deltanet and attention, shared by their references (linear.py, delta.py, attention.py).

Mirrors src/mixers/selrope.c (options, tensors) and src/nn/selrope.c (angles, rotation); written from the
reference's definition:
  xn    = x / sqrt(|x_h|^2 + 1e-6) per head chunk x_h of C/H channels of the layer input
  p     = (xn phi_w1^T) phi_w2^T                                   low rank (rank phi_proj_rank)
        | phi_scale_h (phi_w_hr / |phi_w_hr|) . xn_h               full_rank (weight norm per row)
  a     = act(conv4(p)) with conv (no bias; act none | silu)
        | p_t - p_{t-1}   skip_conv (the authors': the first difference in place of the conv)
        | p               conv false, skip_conv false
  f     = a; f += exp(phi_bias) (use_bias)
  phi   = f * sigmoid(xn gate_w^T + gate_b) (use_gate, one gate per head)
  Theta = temperature * cumsum_t phi;   temperature rope: temp_max / theta^(2r/Dk) (theta >= 1), or rfa
          tan(p/2) over p = linspace(0, theta pi, Dk/2), scaled to max temp_max (0 < theta < 1)
  q, k  rotated by Theta in half-split pairs (r, r + Dk/2)
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE

DEFAULTS = {"enabled": False, "phi_proj_rank": 16, "full_rank": False, "conv": True, "conv_act": "none",
            "skip_conv": False, "use_bias": False, "use_gate": False, "temp_type": "rope", "temp_theta": 500000.0,
            "temp_max": 1.0}
CONV_K = 4
L2_EPS = 1e-6


class SelRopeSpec:
    """The resolved block for a mixer of H heads with key head size Dk at width C (enabled False: nothing)."""

    def __init__(self, opts, C, H, Dk):
        opts = dict(DEFAULTS, **(opts or {}))
        unknown = set(opts) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"selective_rope: unknown options {sorted(unknown)}")
        self.opts = opts
        self.enabled = bool(opts["enabled"])
        self.C, self.H, self.Dk, self.R = C, H, Dk, Dk // 2
        self.Dh = C // H
        self.rank = int(opts["phi_proj_rank"])
        self.full_rank = bool(opts["full_rank"])
        self.temp = temperature(opts["temp_type"], float(opts["temp_theta"]), Dk, float(opts["temp_max"]))


def temperature(kind, theta, Dk, temp_max):
    """(Dk/2,) the fixed temperature spectrum, in the authors' ranges (rope theta >= 1, rfa 0 < theta < 1)."""
    R = Dk // 2
    if kind == "rfa":
        if not 0 < theta < 1 or R < 2:
            raise ValueError(f"selective_rope: rfa temperatures need 0 < theta < 1 and Dk >= 4 (theta {theta}, Dk {Dk})")
        p = np.linspace(0.0, theta * math.pi, R)
        t = np.sqrt((1 - np.cos(p)) / (1 + np.cos(p)))
        return temp_max * t / t.max()
    if theta < 1:
        raise ValueError(f"selective_rope: rope temperatures need theta >= 1 (theta {theta})")
    return temp_max / theta ** (2.0 * np.arange(R) / Dk)


def has_conv(sr):
    """whether the block convolves phi (conv, and not skip_conv, which replaces the conv)."""
    return bool(sr.opts["conv"]) and not sr.opts["skip_conv"]


def param_shapes(sr):
    """The block's tensors, names relative to the mixer (selective_rope.*), in declaration order."""
    if not sr.enabled:
        return {}
    p, HR = "selective_rope.", sr.H * sr.R
    s = {}
    if sr.full_rank:
        s[p + "phi_w"], s[p + "phi_scale"] = (HR, sr.Dh), (sr.H,)
    else:
        s[p + "phi_w1"], s[p + "phi_w2"] = (sr.rank, sr.C), (HR, sr.rank)
    if has_conv(sr):
        s[p + "phi_conv"] = (HR, CONV_K)
    if sr.opts["use_bias"]:
        s[p + "phi_bias"] = (HR,)
    if sr.opts["use_gate"]:
        s[p + "gate_w"], s[p + "gate_b"] = (sr.H, sr.C), (sr.H,)
    return s


def angles(x, P, prefix, sr):
    """Theta (B, T, H, R) of the layer input x (B, T, C)."""
    B, T, C = x.shape
    H, R, Dh = sr.H, sr.R, sr.Dh
    p = prefix + "selective_rope."
    xh = x.reshape(B, T, H, Dh)
    xn = (xh / torch.sqrt((xh * xh).sum(-1, keepdim=True) + L2_EPS)).reshape(B, T, C)
    if sr.full_rank:
        W = P[p + "phi_w"].reshape(H, R, Dh)
        W = P[p + "phi_scale"].view(H, 1, 1) * W / W.norm(dim=-1, keepdim=True)
        phi = torch.einsum("bthd,hrd->bthr", xn.reshape(B, T, H, Dh), W).reshape(B, T, H * R)
    else:
        phi = (xn @ P[p + "phi_w1"].T) @ P[p + "phi_w2"].T
    if has_conv(sr):
        w = P[p + "phi_conv"]
        pad = torch.cat([torch.zeros(B, CONV_K - 1, H * R, dtype=phi.dtype), phi], dim=1)
        phi = sum(w[:, j] * pad[:, j:j + T] for j in range(CONV_K))
        if sr.opts["conv_act"] == "silu":
            phi = F.silu(phi)
    elif sr.opts["skip_conv"]:
        phi = phi - torch.cat([torch.zeros(B, 1, H * R, dtype=phi.dtype), phi[:, :-1]], dim=1)
    if sr.opts["use_bias"]:
        phi = phi + torch.exp(P[p + "phi_bias"])
    phi = phi.reshape(B, T, H, R)
    if sr.opts["use_gate"]:
        phi = phi * torch.sigmoid(xn @ P[p + "gate_w"].T + P[p + "gate_b"]).unsqueeze(-1)
    return torch.as_tensor(sr.temp, dtype=DTYPE) * torch.cumsum(phi, dim=1)


def rotate(q, theta):
    """q (B, T, H, 2R) rotated by theta (B, T, H, R) in half-split pairs (r, r + R)."""
    R = theta.shape[-1]
    c, s = torch.cos(theta), torch.sin(theta)
    q0, q1 = q[..., :R], q[..., R:]
    return torch.cat([q0 * c - q1 * s, q0 * s + q1 * c], dim=-1)


def apply(q, k, x, P, prefix, sr):
    """q, k (B, T, H, Dk) rotated by the block's angles of x (unchanged when the block is off)."""
    if not sr.enabled:
        return q, k
    theta = angles(x, P, prefix, sr)
    return rotate(q, theta), rotate(k, theta)
