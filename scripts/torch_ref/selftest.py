"""The mixers' self-tests (scripts/torch_reference.py --self-test KIND): each registered mixer module's
optional self_test(whole), given `whole`, what of the reference around the mixers a self-test may use.

A mixer's self-test checks its module on its own and, end to end, every case with a layer of its kind on
random weights; for that it needs the registry (mixer_spec), every case (cases.CASES, some from other modules
or about the model) and the whole model (cases.case_on_random_weights). Those import the mixer modules, so a
mixer module cannot import them: they reach its self_test as the argument `whole`, and the imports of the
package stay one way.

Mirrors nothing in src/ (the C side's checks are tests/test_*.c).
"""
import functools
import types

from . import cases
from .mixers import MIXERS, mixer_spec

# what of the whole reference a mixer's self_test(whole) may use
WHOLE = types.SimpleNamespace(mixer_spec=mixer_spec, CASES=cases.CASES,
                              case_on_random_weights=cases.case_on_random_weights,
                              check_cases_on_random_weights=cases.check_cases_on_random_weights)


def self_tests():
    """{kind: its self-test, a function of no argument returning the number of failures} of every registered
    mixer that has one, in registry order."""
    return {kind: functools.partial(mod.self_test, WHOLE) for kind, mod in MIXERS.items()
            if callable(getattr(mod, "self_test", None))}
