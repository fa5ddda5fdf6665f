"""The reference model around the mixers: token embedding, pre-norm or fused blocks, norms, MLP, the
lm and autoencoder heads, the loss, and the dump of logits, loss and every parameter's gradient.

Mirrors src/model/model.c (`model_build`'s parameter table -> param_shapes, `model_forward_` ->
Reference.forward, `ae_forward_` -> Reference.autoencoder_decode), with the norms of src/nn/norm.c and the
heads of src/nn/heads.c. Reaches the mixers only through torch_ref.mixers (parse_spec, param_shapes,
forward of the layer's kind), so a new mixer needs nothing here.

Model definition implemented here (names are seqtrain's parameter names):
    x = wte[tokens]
    per block l: x += mixer(norm(x));  x += mlp(norm(x))     (no MLP and no ln2 when mlp.kind = none)
      block kind (model.block, overridden per layer by model.layers[].block unless "inherit"):
      prenorm as above; fused: x += mixer(norm(x)) only (no ln2, no MLP: the mixer carries its own gate);
      auto: fused for a mixer that owns its MLP (its module's OWNS_MLP: kla), prenorm otherwise
    logits = norm_f(x) @ W_head^T (+ head.bias), W_head = wte when tie_embeddings
    head autoencoder (MAD's AutoEncoder, mad/model/auto_encoder.py, global_pool 'last'): the code is x at
      the last position (no norm); x_t = code + posemb(t), posemb(t) = [sin(t w_i) | cos(t w_i)],
      w_i = exp(-i ln(10000) / (C/2 - 1)) for i < C/2 (zero last column for odd C); then
      x = gelu(norm(x) @ dec.fc1^T + b) and the same with norm2 / fc2, before norm_f and the head
    loss = mean cross-entropy over targets != -100
  norms: LayerNorm eps 1e-5 (bias optional), RMSNorm x / sqrt(mean(x^2) + 1e-6) * w (no bias)
  MLP: gelu (exact, erf) | relu with one hidden layer of round(ratio*C); swiglu: fc gives [a | b]
       (2*hidden rows), act = silu(a) * b
  mixers: see each mixer's module (attention.py, rfa.py, kla.py, ...), registered in mixers.py.
"""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import DTYPE, IGNORE_INDEX, LAYERNORM_EPS, RMSNORM_EPS, read_safetensors, rms_norm, write_safetensors
from .mixers import layer_has_mlp, mixer_forward, mixer_param_shapes, mixer_spec


def param_shapes(model_cfg, vocab):
    """Every parameter's name and shape, as the model definition above implies them (in forward order);
    each layer's mixer tensors come from its module's param_shapes."""
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
            x = x + mixer_forward(self.norm(x, p + "ln1"), P, p + "mixer.", spec)
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


def run_reference(config_path, model_path, tokens_path, out_path):
    """One reference dump (--config/--model/--tokens/--out): F32 safetensors of logits, loss, grad.<name>."""
    with open(config_path) as f:
        config = json.load(f)
    tensors, _ = read_safetensors(model_path)
    tokens = np.load(tokens_path)
    dump = reference_dump(config, tensors, tokens)
    write_safetensors(out_path, dump, {"format": "seqtrain-torch-reference", "precision": "float64",
                                       "torch": torch.__version__})
    print(f"wrote {out_path}: logits {tuple(dump['logits'].shape)}, loss {dump['loss'][0]:.9f}, "
          f"{len(dump) - 2} gradients")
    return dump

