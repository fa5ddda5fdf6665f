"""The registry of mixer references: kind -> module, and the only way model.py and cases.py reach a mixer.

Mirrors src/mixers/registry.c (the MIXERS_ list of MixerOps). Adding a mixer's reference is one module
torch_ref/<kind>.py plus one line in MIXERS below. The module defines (names fixed; see
docs/reference_check.md, "Adding a mixer's reference"):

  KIND                        str, the config's "kind" (the MIXERS key)
  DEFAULTS                    dict, every option of the kind with its default (docs/mixers.md); a run's
                              config.json stores only what was set, and an option not here is an error
  parse_spec(opts, d_model)   the layer's spec object from its resolved options (DEFAULTS filled in,
                              "kind" included); the spec has .kind == KIND and whatever the forward needs
  param_shapes(spec, C)       {name: shape} of the mixer's own parameters, names relative to
                              blocks.L.mixer., in the C side's declaration order
  forward(x, P, prefix, spec) the mixer on the normalised input x (B, T, C) float64, reading its
                              parameters as P[prefix + name]; returns (B, T, C)
  OWNS_MLP                    optional, default False: the mixer carries its own MLP (MixerOps.owns_mlp),
                              so model.block "auto" makes its layers fused blocks (kla)
  self_test(whole)            optional: checks of the reference on its own (no C side); prints ok / not ok
                              lines and returns the number of failures (common.SelfChecks). whole is the
                              reference around the mixers (selftest.WHOLE: mixer_spec, CASES, the cases on
                              random weights), which a mixer module cannot import: it imports the mixers
  CASES                       optional: {case name: the `model` section of a tiny run} for the committed
                              cases under tests/data/torch_ref/ (cases.py gathers them)
"""
from . import attention, bla, gsa, kla, mamba, mamba2, mlstm, rfa
from .linear import GLA, LINEAR_ATTN, RETNET
from .delta import DELTANET, GATED_DELTANET
from .common import layer_block_option, layer_mixer_options

# kind -> reference module, in the order of src/mixers/registry.c (also the order of the gathered cases)
MIXERS = {
    "attention": attention,
    "rfa": rfa,
    "kla": kla,
    "linear_attn": LINEAR_ATTN,
    "retnet": RETNET,
    "gla": GLA,
    "mamba": mamba,
    "mamba2": mamba2,
    "mlstm": mlstm,
    "deltanet": DELTANET,
    "gated_deltanet": GATED_DELTANET,
    "gsa": gsa,
    "bla": bla,
}

REQUIRED = ("KIND", "DEFAULTS", "parse_spec", "param_shapes", "forward")


def _check_registry():
    for kind, mod in MIXERS.items():
        missing = [n for n in REQUIRED if not hasattr(mod, n)]
        if missing:
            raise ImportError(f"torch_ref.mixers: module {mod.__name__} (kind {kind!r}) lacks {', '.join(missing)}")
        if mod.KIND != kind:
            raise ImportError(f"torch_ref.mixers: module {mod.__name__} has KIND {mod.KIND!r}, registered as {kind!r}")


_check_registry()


def module(kind):
    """The reference module of a mixer kind."""
    if kind not in MIXERS:
        raise ValueError(f"mixer kind {kind!r} has no reference here (references: {', '.join(MIXERS)})")
    return MIXERS[kind]


def layer_mixer(model_cfg, layer):
    """The mixer options of one layer: model.mixer with every matching override merged over it, in order
    (an override with a different "kind" replaces the options whole), then the defaults of its kind filled
    in. The result includes "kind"."""
    mix = layer_mixer_options(model_cfg, layer)
    kind = mix.get("kind")
    if kind not in MIXERS:
        raise ValueError(f"layer {layer}: mixer kind {kind!r} has no reference here")
    opts = dict(MIXERS[kind].DEFAULTS)
    unknown = set(mix) - set(opts) - {"kind"}
    if unknown:
        raise ValueError(f"layer {layer}: unknown {kind} options {sorted(unknown)}")
    opts.update({k: v for k, v in mix.items() if k != "kind"})
    opts["kind"] = kind
    return opts


def mixer_spec(model_cfg, layer):
    """The resolved spec of one layer's mixer (its module's parse_spec)."""
    opts = layer_mixer(model_cfg, layer)
    spec = MIXERS[opts["kind"]].parse_spec(opts, model_cfg["d_model"])
    if getattr(spec, "kind", None) != opts["kind"]:
        raise TypeError(f"{MIXERS[opts['kind']].__name__}.parse_spec: the spec's kind is not {opts['kind']!r}")
    return spec


def layer_block(model_cfg, layer):
    """The block kind of one layer, "prenorm" or "fused": its block option (common.layer_block_option),
    with "auto" fused for a mixer that owns its MLP (OWNS_MLP) and prenorm for every other."""
    block = layer_block_option(model_cfg, layer)
    if block == "auto":
        owns = getattr(MIXERS[layer_mixer(model_cfg, layer)["kind"]], "OWNS_MLP", False)
        block = "fused" if owns else "prenorm"
    return block


def layer_has_mlp(model_cfg, layer):
    """A prenorm block has an MLP (and ln2) unless mlp.kind is none; a fused block never has one."""
    return model_cfg["mlp"]["kind"] != "none" and layer_block(model_cfg, layer) == "prenorm"


def mixer_param_shapes(spec, C):
    """The mixer's own parameters, names relative to blocks.L.mixer., in declaration order."""
    return module(spec.kind).param_shapes(spec, C)


def mixer_forward(x, P, prefix, spec):
    """One mixer on the normalised input x (B, T, C), its parameters P[prefix + name]."""
    return module(spec.kind).forward(x, P, prefix, spec)

