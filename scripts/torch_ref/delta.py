"""The delta-rule family's reference: `deltanet` and `gated_deltanet` (flash-linear-attention's DeltaNet and
GatedDeltaNet layers).

Mirrors src/mixers/delta.c (`delta_check_` -> parse_spec, `delta_params_` -> param_shapes, `delta_forward_` ->
forward); the C recurrence is src/nn/delta.c (chunkwise, WY / UT form). Written from
the upstream formulas (docs/mixers.md, Sources), not from the C code: the recurrence here is the plain
sequential delta rule, token by token (fla/ops/delta_rule/naive.py, fla/ops/gated_delta_rule/naive.py):

  S' = a_t S_{t-1},  v'_t = beta_t (v_t - S'^T k_t),  S_t = S' + k_t v'_t^T,  o_t = S_t^T q_t / sqrt(Dk)
  (= a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T; a = 1 for deltanet)

Definition (docs/mixers.md), names relative to blocks.L.mixer.:
  q, k, v = silu(conv(x q_proj^T)), ... with depthwise causal convs q_conv1d, k_conv1d, v_conv1d (HK or HV, K),
            no bias; conv 0 or 1: silu(x q_proj^T) ...
  q, k <- q / sqrt(|q|^2 + 1e-6) per head (FLA's l2norm)
  beta = sigmoid(x b_proj^T) (x2 with allow_neg_eigval)
  gated: g = -exp(A_log) softplus(x a_proj^T + dt_bias), a = exp(g)
  y = (RMSNorm_Dv(o) * o_norm [* silu(x g_proj^T)]) o_proj^T

self_test() (`torch_reference.py --self-test deltanet`) checks the sequential recurrence against the
explicit product form S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T and against the (T, T)
transition-product form o_t = sum_s q_t^T (prod_{s<l<=t} a_l (I - beta_l k_l k_l^T)) beta_s k_s v_s^T.
"""
import math
import types

import numpy as np
import torch
import torch.nn.functional as F

from . import selrope
from .common import DTYPE, SelfChecks, conv_shapes, conv_taps, project, rms_norm, softplus, t64, tiny_model

L2_EPS = 1e-6
_COMMON = {"heads": 4, "expand_k": 1.0, "conv": 4, "allow_neg_eigval": False, "chunk": 32, "norm_eps": 1e-5,
           "init_std": 0.02}
DEFAULTS_BY_KIND = {
    "deltanet": dict(_COMMON, use_gate=False, expand_v=1.0),
    "gated_deltanet": dict(_COMMON, use_gate=True, expand_v=2.0, A_init_lo=0.0, A_init_hi=16.0, dt_min=0.001,
                           dt_max=0.1, dt_init_floor=1e-4, selective_rope={}),
}


class DeltaSpec:
    """The resolved options of one deltanet / gated_deltanet layer: H heads of Dk key and Dv value channels."""

    def __init__(self, kind, opts, d_model):
        self.kind = kind
        self.opts = opts
        self.gated = kind == "gated_deltanet"
        self.H = int(opts["heads"])
        self.HK = int(math.floor(float(opts["expand_k"]) * d_model + 0.5))
        self.HV = int(math.floor(float(opts["expand_v"]) * d_model + 0.5))
        if self.HK < self.H or self.HK % self.H or self.HV < self.H or self.HV % self.H:
            raise ValueError(f"{kind}: widths {self.HK}, {self.HV} not multiples of heads {self.H}")
        self.Dk, self.Dv = self.HK // self.H, self.HV // self.H
        self.K = conv_taps(opts)
        self.neg = bool(opts["allow_neg_eigval"])
        self.use_gate = bool(opts["use_gate"])
        self.eps = float(opts["norm_eps"])
        self.sr = selrope.SelRopeSpec(opts.get("selective_rope"), d_model, self.H, self.Dk)   # gated_deltanet only


def _param_shapes(spec, C):
    s = {"q_proj": (spec.HK, C), "k_proj": (spec.HK, C), "v_proj": (spec.HV, C)}
    s.update(conv_shapes(spec.HK, spec.HV, spec.K))
    s["b_proj"] = (spec.H, C)
    if spec.gated:
        s.update({"a_proj": (spec.H, C), "A_log": (spec.H,), "dt_bias": (spec.H,)})
    if spec.use_gate:
        s["g_proj"] = (spec.HV, C)
    s["o_norm"] = (spec.Dv,)
    s["o_proj"] = (C, spec.HV)
    s.update(selrope.param_shapes(spec.sr))
    return s


def l2norm(x):
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + L2_EPS)


def sequential(q, k, v, beta, g):
    """The delta rule token by token; q already scaled. q, k (B,T,H,Dk), v (B,T,H,Dv), beta, g (B,T,H) or g None."""
    B, T, H, Dk = q.shape
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=DTYPE)
    out = []
    for t in range(T):
        if g is not None:
            S = torch.exp(g[:, t]).view(B, H, 1, 1) * S
        kt = k[:, t]
        vnew = beta[:, t].unsqueeze(-1) * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt.unsqueeze(-1) * vnew.unsqueeze(-2)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, dim=1)


def product_form(q, k, v, beta, g):
    """The same as explicit matrices: S_t = a_t (I - beta k k^T) S_{t-1} + beta k v^T (the self-test's second opinion)."""
    B, T, H, Dk = q.shape
    eye = torch.eye(Dk, dtype=DTYPE)
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=DTYPE)
    out = []
    for t in range(T):
        kt, bt = k[:, t], beta[:, t].view(B, H, 1, 1)
        a = torch.exp(g[:, t]).view(B, H, 1, 1) if g is not None else 1.0
        Mt = a * (eye - bt * kt.unsqueeze(-1) * kt.unsqueeze(-2))
        S = Mt @ S + bt * kt.unsqueeze(-1) * v[:, t].unsqueeze(-2)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, dim=1)


def transition_form(q, k, v, beta, g):
    """o_t = sum_{s<=t} q_t^T (M_t ... M_{s+1}) beta_s k_s v_s^T with M_l = a_l (I - beta_l k_l k_l^T)."""
    B, T, H, Dk = q.shape
    eye = torch.eye(Dk, dtype=DTYPE)
    M = [(torch.exp(g[:, t]).view(B, H, 1, 1) if g is not None else 1.0) *
         (eye - beta[:, t].view(B, H, 1, 1) * k[:, t].unsqueeze(-1) * k[:, t].unsqueeze(-2)) for t in range(T)]
    out = []
    for t in range(T):
        o = torch.zeros(B, H, v.shape[-1], dtype=DTYPE)
        P = eye.expand(B, H, Dk, Dk)
        for s in range(t, -1, -1):
            w = torch.einsum("bhk,bhkj->bhj", q[:, t], P)              # q_t^T M_t ... M_{s+1}
            o = o + (w * k[:, s]).sum(-1, keepdim=True) * beta[:, s].view(B, H, 1) * v[:, s]
            P = P @ M[s]
        out.append(o)
    return torch.stack(out, dim=1)


def _forward(x, P, prefix, spec):
    B, T, C = x.shape
    H, Dk, Dv = spec.H, spec.Dk, spec.Dv

    def stream(name):
        return project(x, P, prefix, name, spec.K, F.silu)

    # selective_rope: after the convs and silu, before the L2 norms
    q, k = selrope.apply(stream("q").view(B, T, H, Dk), stream("k").view(B, T, H, Dk), x, P, prefix, spec.sr)
    q, k = l2norm(q), l2norm(k)
    v = stream("v").view(B, T, H, Dv)
    beta = torch.sigmoid(x @ P[prefix + "b_proj"].T) * (2.0 if spec.neg else 1.0)
    g = None
    if spec.gated:
        g = -torch.exp(P[prefix + "A_log"]) * softplus(x @ P[prefix + "a_proj"].T + P[prefix + "dt_bias"])
    o = sequential(q / math.sqrt(Dk), k, v, beta, g)
    o = rms_norm(o, P[prefix + "o_norm"], spec.eps)
    if spec.use_gate:
        o = o * F.silu((x @ P[prefix + "g_proj"].T).view(B, T, H, Dv))
    return o.reshape(B, T, H * Dv) @ P[prefix + "o_proj"].T


def _self_test(whole):
    report = SelfChecks()
    rng = np.random.default_rng(7)
    B, T, H, Dk, Dv = 2, 9, 3, 4, 5
    q, k = l2norm(t64(rng.normal(size=(B, T, H, Dk)))), l2norm(t64(rng.normal(size=(B, T, H, Dk))))
    v = t64(rng.normal(size=(B, T, H, Dv)))
    for neg in (False, True):
        beta = t64(rng.uniform(0.01, 1.99 if neg else 0.99, size=(B, T, H)))
        for g in (None, t64(-rng.uniform(0.01, 2.0, size=(B, T, H)))):
            a = sequential(q, k, v, beta, g)
            for name, fn in (("product", product_form), ("transition", transition_form)):
                b = fn(q, k, v, beta, g)
                d = float((a - b).abs().max() / b.abs().max())
                report(d < 1e-12, f"beta {'(0,2)' if neg else '(0,1)'}, {'gated' if g is not None else 'no decay'}: "
                                  f"sequential == {name} form (max rel diff {d:.1e})")
    return report.summary("delta")


def _namespace(kind, cases, doc):
    ns = types.SimpleNamespace(
        KIND=kind, DEFAULTS=DEFAULTS_BY_KIND[kind], CASES=cases, __name__=f"torch_ref.delta[{kind}]", __doc__=doc,
        parse_spec=lambda opts, d_model: DeltaSpec(kind, opts, d_model), param_shapes=_param_shapes,
        forward=_forward)
    if kind == "deltanet":
        ns.self_test = _self_test
    return ns


DELTANET = _namespace("deltanet", {
    "deltanet": tiny_model({"kind": "deltanet", "heads": 2, "init_std": 0.3, "chunk": 5}),
}, "DeltaNet (FLA DeltaNet)")
GATED_DELTANET = _namespace("gated_deltanet", {
    "gated_deltanet_neg": tiny_model({"kind": "gated_deltanet", "heads": 2, "init_std": 0.3, "chunk": 7,
                                      "allow_neg_eigval": True, "conv": 3, "A_init_lo": 0.5, "A_init_hi": 4},
                                     norm="rmsnorm"),
    "gated_deltanet_selrope": tiny_model({"kind": "gated_deltanet", "heads": 2, "init_std": 0.3, "chunk": 7,
                                          "A_init_lo": 0.5, "A_init_hi": 4,
                                          "selective_rope": {"enabled": True, "phi_proj_rank": 4, "use_bias": True,
                                                             "use_gate": True, "skip_conv": True,
                                                             "temp_theta": 100.0}}),
    "gated_deltanet_selrope_full_rank": tiny_model({"kind": "gated_deltanet", "heads": 2, "init_std": 0.3,
                                                    "conv": 0, "selective_rope": {"enabled": True, "full_rank": True,
                                                                                  "conv_act": "silu",
                                                                                  "temp_type": "rfa",
                                                                                  "temp_theta": 0.75}}),
}, "Gated DeltaNet (FLA GatedDeltaNet)")
