"""torch_ref: seqtrain's model rebuilt in PyTorch, in float64, as an outside reference for the C model.

One module per mixer family, as src/mixers is split, so a mixer's C and its reference read side by side:

  common.py     precision and constants, the config's layer helpers (model.layers overrides, block kinds),
                rms_norm, rope, softplus, the safetensors writer, self-test helpers   (src/model, src/nn)
  attention.py  the `attention` mixer and its position schemes             (src/mixers/attention.c)
  rfa.py        the `rfa` mixer (Robust Filter Attention) and its self-test (src/mixers/rfa.c)
  kla.py        the `kla` mixer (Kalman Linear Attention), its scan and self-test
                                                                            (src/mixers/kla.c, src/nn/kalman.c)
  mixers.py     the registry kind -> module, and the interface every mixer module provides
                                                                            (src/mixers/registry.c)
  model.py      the model around the mixers (embedding, blocks, MLP, heads, loss), param_shapes, the dump
                                                                            (src/model/model.c)
  cases.py      the committed cases under tests/data/torch_ref/ (gathered from the mixer modules' CASES),
                the self-tests' run of each case on random weights, make_case and the bin/seqeval comparison
  selftest.py   the mixers' self-tests, given what of the whole reference they use

The imports go one way, each at the top of its module: common <- the mixer modules <- mixers <- model <-
cases <- selftest (tests/test_scripts_lib.sh checks that there is no circle).

scripts/torch_reference.py is the command line; docs/reference_check.md describes the check and how to
add a mixer's reference module and cases. Needs Debian's python3-torch and python3-numpy (/usr/bin/python3).
"""
from .cases import CASE_DIR, CASES, VOCAB, case_tokens, compare_with_seqeval, make_case
from .common import DTYPE, read_safetensors, write_safetensors
from .mixers import MIXERS, layer_block, layer_has_mlp, layer_mixer, mixer_param_shapes, mixer_spec
from .model import Reference, param_shapes, reference_dump, run_reference
from .selftest import self_tests

__all__ = ["CASE_DIR", "CASES", "VOCAB", "case_tokens", "compare_with_seqeval", "make_case", "DTYPE",
           "read_safetensors", "write_safetensors", "MIXERS", "layer_block", "layer_has_mlp", "layer_mixer",
           "mixer_param_shapes", "mixer_spec", "self_tests", "Reference", "param_shapes", "reference_dump",
           "run_reference"]
