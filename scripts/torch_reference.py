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
    /usr/bin/python3 scripts/torch_reference.py --self-test KIND [--self-test KIND ...]   (KIND or all)
        checks a mixer's reference without the C side (the self_test() of torch_ref/KIND.py); all: every
        mixer that has one. --self-test-rfa and --self-test-kla are the same as --self-test rfa / kla:
      rfa: causality, mu = 0 heads, the unitary limit and every option against an element-by-element
        complex form, gradcheck, the large-nu limit, the rfa cases
      kla: the scan against a moment-form Kalman filter with gain and against the parallel
        Moebius/affine prefix scans of Theorems 1-2, the p = 0 convolution form of Theorem 3, causality,
        gradcheck of the layer under every option, the kla cases

The implementation is the package scripts/torch_ref/ (one module per mixer family, as src/mixers is
split; each module's docstring holds the definitions it implements and names the C file it mirrors):
    common.py (shared helpers), attention.py, rfa.py, kla.py (the mixers), mixers.py (the registry
    kind -> module), model.py (embedding, blocks, MLP, heads, loss, parameter shapes), cases.py (the
    committed cases and their regeneration), selftest.py (the mixers' self-tests).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402

import torch_ref  # noqa: E402  (scripts/torch_ref/)
from torch_ref import CASES, make_case, run_reference  # noqa: E402


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
    tests = torch_ref.self_tests()
    ap.add_argument("--self-test", action="append", default=[], metavar="KIND",
                    help=f"check one mixer's reference on its own, no C side (repeatable; KIND: "
                         f"{', '.join(tests)} or all)")
    ap.add_argument("--self-test-rfa", action="store_true",
                    help="check the rfa reference on its own (causality, mu = 0, unitary limit, gradcheck, ...)")
    ap.add_argument("--self-test-kla", action="store_true",
                    help="check the kla reference on its own (moment-form Kalman filter, parallel scans, gradcheck)")
    args = ap.parse_args(argv[1:])
    torch.set_num_threads(1)
    kinds = (["rfa"] if args.self_test_rfa else []) + (["kla"] if args.self_test_kla else [])
    for kind in args.self_test:
        if kind != "all" and kind not in tests:
            ap.error(f"--self-test {kind!r}: no self-test (kinds with one: {', '.join(tests)}, or all)")
        kinds += list(tests) if kind == "all" else [kind]
    if kinds:
        failures = 0
        for kind in dict.fromkeys(kinds):          # each once, in the order given
            failures += tests[kind]()
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
