"""The linear-attention family's reference: `linear_attn`, `retnet` and `gla` (flash-linear-attention's
LinearAttention, MultiScaleRetention and GatedLinearAttention layers).

Mirrors src/mixers/linear.c (`lin_check_` -> parse_spec, `lin_params_` -> param_shapes, `lin_forward_` ->
forward); the recurrence itself is src/nn/linrec.c. Written from the upstream formulas (docs/mixers.md, Sources), not
from the C code: the recurrence S_t = diag(a_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(Dk) in its
parallel (T, T) form per head, o = ((q k^T / sqrt(Dk)) * D) v with D[t, s] = prod_{s < l <= t} a_l for
s <= t (1 for linear_attn, gamma_h^(t - s) for retnet, per key channel inside the dot product for gla),
where the C side runs chunks of it with a state in between.

Definition (docs/mixers.md), names relative to blocks.L.mixer.:
  q, k = x q_proj^T, x k_proj^T (H heads of Dk), v = x v_proj^T (H heads of Dv);
  conv K > 1 (gla, retnet): q, k, v = silu(conv_K(...)) with q_conv1d, k_conv1d, v_conv1d first (FLA's use_short_conv)
  linear_attn: q, k <- phi(q), phi(k) (identity | elu + 1 | relu | hadamard (q fmap_q.w1^T + b1) * (q w2^T + b2));
               normalize: o / (q . sum_{s<=t} k_s / sqrt(Dk) + 1e-10)
  retnet: q, k rotated (RoPE, half-split pairs, base rope_base), a = gamma_h = 1 - 2^(-5-h)
  rotate (linear_attn, gla; always on in retnet): the complex forget gate, q, k rotated as retnet's after phi
  gla: log a_t = logsigmoid((x gk_proj1^T) gk_proj2^T + gk_bias) / gate_normalizer, per key channel
       (with rotate one per rotated pair, channels c and c + Dk/2 sharing it)
  y = (RMSNorm_Dv(o) * o_norm [* silu(x g_proj^T)]) o_proj^T

self_test() (`torch_reference.py --self-test linear_attn`) checks the parallel forms against the plain
sequential recurrence for all three kinds.
"""
import math
import types

import numpy as np
import torch
import torch.nn.functional as F

from . import selrope
from .common import DTYPE, SelfChecks, conv_shapes, conv_taps, project, rms_norm, rope, tiny_model

_COMMON = {"heads": 4, "expand_k": 1.0, "expand_v": 1.0, "chunk": 64, "norm_eps": 1e-6, "init_std": 0.02}
DEFAULTS_BY_KIND = {
    "linear_attn": dict(_COMMON, feature_map="hadamard", normalize=False, norm_eps=1e-5, rotate=False,
                        rope_base=10000.0),
    "retnet": dict(_COMMON, heads=8, expand_v=2.0, output_gate=True, rope_base=10000.0, conv=0),
    "gla": dict(_COMMON, expand_k=0.5, output_gate=True, gate_rank=16, gate_normalizer=16.0, chunk=16, rotate=False,
                rope_base=10000.0, conv=0, selective_rope={}),
}


class LinSpec:
    """The resolved options of one linear_attn / retnet / gla layer: H heads of Dk key and Dv value channels."""

    def __init__(self, kind, opts, d_model):
        self.kind = kind
        self.opts = opts
        self.H = int(opts["heads"])
        self.HK = int(math.floor(float(opts["expand_k"]) * d_model + 0.5))
        self.HV = int(math.floor(float(opts["expand_v"]) * d_model + 0.5))
        self.Dk, self.Dv = self.HK // self.H, self.HV // self.H
        self.fmap = opts.get("feature_map", "identity")
        self.normalize = bool(opts.get("normalize", False))
        self.output_gate = bool(opts.get("output_gate", False))
        self.gate_rank = int(opts.get("gate_rank", 0))
        self.eps = float(opts["norm_eps"])
        self.rotate = kind == "retnet" or bool(opts.get("rotate", False))   # the complex forget gate
        self.sr = selrope.SelRopeSpec(opts.get("selective_rope"), d_model, self.H, self.Dk)   # gla only
        self.K = conv_taps(opts)                                                               # gla, retnet


def _param_shapes(spec, C):
    s = {"q_proj": (spec.HK, C), "k_proj": (spec.HK, C), "v_proj": (spec.HV, C)}
    s.update(conv_shapes(spec.HK, spec.HV, spec.K))
    if spec.kind == "linear_attn" and spec.fmap == "hadamard":
        for w in ("q", "k"):
            for i in ("1", "2"):
                s[f"fmap_{w}.w{i}"] = (spec.Dk, spec.Dk)
                s[f"fmap_{w}.b{i}"] = (spec.Dk,)
        # declaration order is w1, b1, w2, b2 per map
        s = {k: s[k] for k in ["q_proj", "k_proj", "v_proj"] +
             [f"fmap_{w}.{p}" for w in ("q", "k") for p in ("w1", "b1", "w2", "b2")]}
    if spec.output_gate:
        s["g_proj"] = (spec.HV, C)
    if spec.kind == "gla":
        s["gk_proj1"] = (spec.gate_rank, C)
        gw = spec.HK // 2 if spec.rotate else spec.HK        # rotate: one gate per rotated pair
        s["gk_proj2"] = (gw, spec.gate_rank)
        s["gk_bias"] = (gw,)
    s["o_norm"] = (spec.Dv,)
    s["o_proj"] = (C, spec.HV)
    s.update(selrope.param_shapes(spec.sr))
    return s


def _feature_map(x, P, prefix, which, spec):
    if spec.kind != "linear_attn" or spec.fmap == "identity":
        return x
    if spec.fmap == "elu":
        return F.elu(x) + 1
    if spec.fmap == "relu":
        return torch.relu(x)
    p = f"{prefix}fmap_{which}."
    return (x @ P[p + "w1"].T + P[p + "b1"]) * (x @ P[p + "w2"].T + P[p + "b2"])


def log_decays(x, P, prefix, spec, T):
    """log a: None (linear_attn), (H,) constants (retnet) or (B, T, H, Dk) (gla)."""
    if spec.kind == "retnet":
        return torch.tensor([math.log(1 - 2.0 ** (-5 - h)) for h in range(spec.H)], dtype=DTYPE)
    if spec.kind == "gla":
        B = x.shape[0]
        pre = (x @ P[prefix + "gk_proj1"].T) @ P[prefix + "gk_proj2"].T + P[prefix + "gk_bias"]
        g = F.logsigmoid(pre) / float(spec.opts["gate_normalizer"])
        if spec.rotate:   # the pair (c, c + Dk/2) shares its gate: the complex decay a e^{iw}
            g = g.view(B, T, spec.H, spec.Dk // 2).repeat(1, 1, 1, 2)
        return g.view(B, T, spec.H, spec.Dk)
    return None


def parallel(q, k, v, g, kind):
    """o (B, T, H, Dv) of the recurrence in its parallel form; q already scaled. Returns (o, q . sum k)."""
    B, T, H, Dk = q.shape
    t = torch.arange(T, dtype=DTYPE)
    causal = (t.view(T, 1) >= t.view(1, T)).to(DTYPE)                          # [t, s]
    if kind == "gla":
        G = torch.cumsum(g, dim=1)                                               # (B, T, H, Dk)
        diff = G.unsqueeze(2) - G.unsqueeze(1)                                   # (B, t, s, H, Dk)
        w = torch.exp(torch.where(causal.view(1, T, T, 1, 1) > 0, diff, torch.full_like(diff, -math.inf)))
        A = torch.einsum("bthd,bshd,btshd->bhts", q, k, w)
    else:
        A = torch.einsum("bthd,bshd->bhts", q, k) * causal
        if g is not None:                                                        # retnet: gamma^(t - s)
            A = A * torch.exp(g.view(1, H, 1, 1) * (t.view(T, 1) - t.view(1, T)).clamp(min=0)) * causal
    return torch.einsum("bhts,bshd->bthd", A, v), A.sum(dim=-1).transpose(1, 2)


def sequential(q, k, v, g, kind):
    """The same recurrence token by token (the self-test's second opinion)."""
    B, T, H, Dk = q.shape
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=DTYPE)
    out = []
    for t in range(T):
        if kind == "gla":
            S = torch.exp(g[:, t]).unsqueeze(-1) * S
        elif g is not None:
            S = torch.exp(g).view(1, H, 1, 1) * S
        S = S + k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, dim=1)


def _forward(x, P, prefix, spec):
    B, T, C = x.shape
    H, Dk, Dv = spec.H, spec.Dk, spec.Dv
    q = _feature_map(project(x, P, prefix, "q", spec.K).view(B, T, H, Dk), P, prefix, "q", spec)
    k = _feature_map(project(x, P, prefix, "k", spec.K).view(B, T, H, Dk), P, prefix, "k", spec)
    v = project(x, P, prefix, "v", spec.K).view(B, T, H, Dv)
    if spec.rotate:
        base = float(spec.opts["rope_base"])
        freqs = np.tile(base ** (-np.arange(0, Dk, 2) / Dk), (H, 1))
        q, k = rope(q, freqs, "half"), rope(k, freqs, "half")
    q, k = selrope.apply(q, k, x, P, prefix, spec.sr)     # gla: right after the projections
    o, den = parallel(q / math.sqrt(Dk), k, v, log_decays(x, P, prefix, spec, T), spec.kind)
    if spec.normalize:
        o = o / (den.unsqueeze(-1) + 1e-10)
    o = rms_norm(o, P[prefix + "o_norm"], spec.eps)
    if spec.output_gate:
        o = o * F.silu((x @ P[prefix + "g_proj"].T).view(B, T, H, Dv))
    return o.reshape(B, T, H * Dv) @ P[prefix + "o_proj"].T


def _self_test(whole):
    report = SelfChecks()
    g = np.random.default_rng(5)
    B, T, H, Dk, Dv = 2, 19, 3, 4, 5
    t64 = lambda a: torch.tensor(a, dtype=DTYPE)                                 # noqa: E731
    q, k, v = t64(g.normal(size=(B, T, H, Dk))), t64(g.normal(size=(B, T, H, Dk))), t64(g.normal(size=(B, T, H, Dv)))
    cases = {"linear_attn": None, "retnet": t64(np.log(1 - 2.0 ** (-5 - np.arange(H)))),
             "gla": t64(-g.uniform(0.01, 2.0, size=(B, T, H, Dk)))}
    for kind, lg in cases.items():
        a, _ = parallel(q, k, v, lg, kind)
        b = sequential(q, k, v, lg, kind)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"{kind}: parallel form == sequential recurrence (max rel diff {d:.1e})")
    return report.summary("linear")


def _namespace(kind, cases, doc):
    ns = types.SimpleNamespace(
        KIND=kind, DEFAULTS=DEFAULTS_BY_KIND[kind], CASES=cases, __name__=f"torch_ref.linear[{kind}]", __doc__=doc,
        parse_spec=lambda opts, d_model: LinSpec(kind, opts, d_model), param_shapes=_param_shapes, forward=_forward)
    if kind == "linear_attn":
        ns.self_test = _self_test
    return ns


LINEAR_ATTN = _namespace("linear_attn", {
    "linear_attn_hadamard": tiny_model({"kind": "linear_attn", "heads": 2, "init_std": 0.3}),
    "linear_attn_elu_normalize": tiny_model({"kind": "linear_attn", "heads": 2, "feature_map": "elu",
                                             "normalize": True, "init_std": 0.3}, norm="rmsnorm"),
    "linear_attn_rotate": tiny_model({"kind": "linear_attn", "heads": 2, "feature_map": "relu", "rotate": True,
                                      "rope_base": 50.0, "init_std": 0.3}),
}, "linear attention (FLA LinearAttention)")
RETNET = _namespace("retnet", {
    "retnet": tiny_model({"kind": "retnet", "heads": 2, "init_std": 0.3}),
    "retnet_conv": tiny_model({"kind": "retnet", "heads": 2, "init_std": 0.3, "conv": 3}),
}, "RetNet multi-scale retention")
GLA = _namespace("gla", {
    "gla": tiny_model({"kind": "gla", "heads": 2, "gate_rank": 4, "gate_normalizer": 4, "init_std": 0.3},
                      norm="rmsnorm"),
    "gla_conv": tiny_model({"kind": "gla", "heads": 2, "gate_rank": 4, "gate_normalizer": 4, "init_std": 0.3,
                            "conv": 4}),
    "gla_rotate": tiny_model({"kind": "gla", "heads": 2, "gate_rank": 4, "gate_normalizer": 4, "rotate": True,
                              "rope_base": 100.0, "init_std": 0.3}),
    "gla_selrope": tiny_model({"kind": "gla", "heads": 2, "gate_rank": 4, "gate_normalizer": 4, "init_std": 0.3,
                               "selective_rope": {"enabled": True, "phi_proj_rank": 4, "use_bias": True,
                                                  "temp_theta": 100.0}}),
    "gla_selrope_full_rank": tiny_model({"kind": "gla", "heads": 2, "gate_rank": 4, "gate_normalizer": 4,
                                         "init_std": 0.3, "expand_k": 1,
                                         "selective_rope": {"enabled": True, "full_rank": True,
                                                            "skip_conv": True, "use_gate": True,
                                                            "temp_type": "rfa", "temp_theta": 0.6}}),
}, "gated linear attention")
