"""Gated Slot Attention's reference: `gsa` (flash-linear-attention's GatedSlotAttention layer).

Mirrors src/mixers/gsa.c (`gsa_check_` -> parse_spec, `gsa_params_` -> param_shapes, `gsa_forward_` -> forward);
the C recurrences are two passes of src/nn/linrec.c (the first with the value-side decay LINREC_VCHANNEL).
Written from the upstream formulas (docs/mixers.md, Sources), not from the C code: both slot states are
updated token by token (fla/ops/gsa/naive.py):

  f_t = logsigmoid(x f_proj^T) / gate_logit_normalizer  (H heads of M slots),   s_t = 1 - exp(f_t)
  Hk_t = Hk_{t-1} diag(exp f_t) + k_t s_t^T  (Dk, M),   p_t = softmax_M(Hk_t^T q_t)          (scale 1)
  Hv_t = diag(exp f_t) Hv_{t-1} + s_t v_t^T  (M, Dv),   o_t = Hv_t^T p_t

Definition (docs/mixers.md), names relative to blocks.L.mixer.:
  q, k = phi(x q_proj^T), phi(x k_proj^T) with phi swish (x sigmoid x) | relu | identity;  v = silu(x v_proj^T)
  conv K > 1: each projection through silu(conv_K(.)) first, q_conv1d, k_conv1d, v_conv1d (FLA's use_short_conv)
  y = (RMSNorm over all H D channels (silu(o)) * g_norm) o_proj^T;  without the norm o_proj(silu(o))

self_test() (`torch_reference.py --self-test gsa`) checks the sequential recurrences against the explicit
(T, T) form ok_t[m] = sum_{j<=t} (q_t . k_j) s_j[m] exp(F_t[m] - F_j[m]), o_t = sum_{j<=t} sum_m p_t[m] s_j[m]
exp(F_t[m] - F_j[m]) v_j with F the cumulative log forget gates.
"""
import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, SelfChecks, conv_shapes, conv_taps, project, rms_norm, t64, tiny_model

DEFAULTS = {"heads": 4, "head_dim": 0, "num_slots": 64, "gate_logit_normalizer": 8.0, "feature_map": "swish",
            "norm": True, "norm_eps": 1e-6, "conv": 0, "chunk": 16, "init_std": 0.02}
FMAPS = {"swish": F.silu, "relu": F.relu, "identity": lambda u: u}


class GsaSpec:
    """The resolved options of one gsa layer: H heads of D key and value channels, M slots."""

    def __init__(self, opts, d_model):
        self.kind = "gsa"
        self.opts = opts
        self.H = int(opts["heads"])
        hd = int(opts["head_dim"])
        if hd == 0:
            if d_model % self.H:
                raise ValueError(f"gsa: heads {self.H} do not divide d_model {d_model}; set head_dim")
            hd = d_model // self.H
        self.D, self.M = hd, int(opts["num_slots"])
        if opts["feature_map"] not in FMAPS:
            raise ValueError(f"gsa: feature_map {opts['feature_map']!r} (swish|relu|identity)")
        self.fmap = FMAPS[opts["feature_map"]]
        self.normalizer = float(opts["gate_logit_normalizer"])
        self.norm = bool(opts["norm"])
        self.eps = float(opts["norm_eps"])
        self.K = conv_taps(opts)


def param_shapes(spec, C):
    HD, HM = spec.H * spec.D, spec.H * spec.M
    s = {"q_proj": (HD, C), "k_proj": (HD, C), "v_proj": (HD, C)}
    s.update(conv_shapes(HD, HD, spec.K))
    s["f_proj"] = (HM, C)
    if spec.norm:
        s["g_norm"] = (HD,)
    s["o_proj"] = (C, HD)
    return s


def sequential(q, k, v, f):
    """Both passes token by token. q, k (B,T,H,Dk), v (B,T,H,Dv), f (B,T,H,M) the log forget gates."""
    B, T, H, Dk = q.shape
    M, Dv = f.shape[-1], v.shape[-1]
    s = 1.0 - torch.exp(f)
    Hk = torch.zeros(B, H, Dk, M, dtype=DTYPE)
    Hv = torch.zeros(B, H, M, Dv, dtype=DTYPE)
    out = []
    for t in range(T):
        a = torch.exp(f[:, t])                                                  # (B,H,M)
        Hk = Hk * a.unsqueeze(-2) + k[:, t].unsqueeze(-1) * s[:, t].unsqueeze(-2)
        p = torch.softmax(torch.einsum("bhkm,bhk->bhm", Hk, q[:, t]), dim=-1)
        Hv = Hv * a.unsqueeze(-1) + s[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        out.append(torch.einsum("bhmv,bhm->bhv", Hv, p))
    return torch.stack(out, dim=1)


def explicit_form(q, k, v, f):
    """The same as (T, T) sums with the decays exp(F_t - F_j) written out (the self-test's second opinion)."""
    T = q.shape[1]
    s = 1.0 - torch.exp(f)
    Fc = torch.cumsum(f, dim=1)
    out = []
    for t in range(T):
        w = torch.exp(Fc[:, t:t + 1] - Fc[:, :t + 1]) * s[:, :t + 1]            # (B,j,H,M): s_j exp(F_t - F_j)
        qk = torch.einsum("bhk,bjhk->bjh", q[:, t], k[:, :t + 1])
        p = torch.softmax((qk.unsqueeze(-1) * w).sum(1), dim=-1)                 # (B,H,M)
        out.append(torch.einsum("bhm,bjhm,bjhv->bhv", p, w, v[:, :t + 1]))
    return torch.stack(out, dim=1)


def forward(x, P, prefix, spec):
    B, T, C = x.shape
    H, D, M = spec.H, spec.D, spec.M
    q = spec.fmap(project(x, P, prefix, "q", spec.K)).view(B, T, H, D)
    k = spec.fmap(project(x, P, prefix, "k", spec.K)).view(B, T, H, D)
    v = F.silu(project(x, P, prefix, "v", spec.K)).view(B, T, H, D)
    f = (F.logsigmoid(x @ P[prefix + "f_proj"].T) / spec.normalizer).view(B, T, H, M)
    o = F.silu(sequential(q, k, v, f).reshape(B, T, H * D))
    if spec.norm:
        o = rms_norm(o, P[prefix + "g_norm"], spec.eps)
    return o @ P[prefix + "o_proj"].T


def self_test(whole):
    report = SelfChecks()
    rng = np.random.default_rng(11)
    B, T, H, Dk, Dv, M = 2, 9, 3, 4, 5, 6
    q, k, v = (t64(rng.normal(size=(B, T, H, d))) for d in (Dk, Dk, Dv))
    for lo in (0.01, 1.0):
        f = t64(-rng.uniform(lo, 2.0 * lo + 0.5, size=(B, T, H, M)))
        a, b = sequential(q, k, v, f), explicit_form(q, k, v, f)
        d = float((a - b).abs().max() / b.abs().max())
        report(d < 1e-12, f"log forget gates in [-{2 * lo + 0.5:g}, -{lo:g}]: sequential == explicit (T, T) form "
                          f"(max rel diff {d:.1e})")
    # causality: changing the last token changes only the last output
    f = t64(-rng.uniform(0.01, 1.0, size=(B, T, H, M)))
    o1 = sequential(q, k, v, f)
    q2 = q.clone()
    q2[:, -1] += 1.0
    o2 = sequential(q2, k, v, f)
    report(bool(torch.equal(o1[:, :-1], o2[:, :-1])), "causal: a change at the last token leaves earlier outputs")
    return report.summary("gsa")


KIND = "gsa"
CASES = {
    "gsa": tiny_model({"kind": "gsa", "heads": 2, "num_slots": 6, "init_std": 0.3, "chunk": 5}),
    "gsa_relu_nonorm": tiny_model({"kind": "gsa", "heads": 4, "head_dim": 3, "num_slots": 5, "feature_map": "relu",
                                   "norm": False, "gate_logit_normalizer": 2, "init_std": 0.3, "chunk": 7},
                                  norm="rmsnorm"),
    "gsa_conv": tiny_model({"kind": "gsa", "heads": 2, "num_slots": 6, "init_std": 0.3, "chunk": 5, "conv": 4}),
}


def parse_spec(opts, d_model):
    return GsaSpec(opts, d_model)

