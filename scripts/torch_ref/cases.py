"""The committed cases under tests/data/torch_ref/NAME: their definitions, gathered from the mixer
modules, the probe tokens, the check the mixers' self-tests run on their cases (each case's model on random
weights through the whole reference), and the regeneration (train a tiny seqtrain model, write the
reference dump).

Mirrors nothing in src/: it drives bin/seqtrain and bin/seqeval; tests/test_torch_ref.c is the C side that
reads what make_case writes. A case is the `model` section of a tiny run (d_model 16, 2-3 layers); the
run around it (data, 3 AdamW steps at lr 0.05, one thread) is make_case's. Each mixer module contributes
the cases of its kind (its CASES dict, gathered in registry order); the cases here are those about the
model around the mixers (a head kind, a stack mixing kinds). docs/reference_check.md lists every case.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from .common import IGNORE_INDEX, REPO, read_safetensors, tiny_model
from .mixers import MIXERS, layer_block, mixer_spec
from .model import param_shapes, reference_dump, run_reference

CASE_DIR = os.path.join(REPO, "tests", "data", "torch_ref")
VOCAB = 64          # raw_u16 data with ids < VOCAB
B_PROBE, T_PROBE = 2, 24

# cases about the model around the mixers, after the mixers' own
MODEL_CASES = {
    # MAD's compression backbone: the blocks encode, the last position is decoded at every position
    "autoencoder_swiglu_rmsnorm": tiny_model(
        {"kind": "attention", "heads": 2, "init_std": 0.3, "pos": "rope"},
        head="autoencoder", norm="rmsnorm", tie_embeddings=False, head_bias=True,
        mlp={"kind": "swiglu", "ratio": 1.5, "bias": False}),
    # a GPT stack with a last KLA layer: 2 attention prenorm blocks (gelu MLP), then a fused kla block
    "gpt_kla": tiny_model(
        {"kind": "attention", "heads": 2, "init_std": 0.3},
        n_layers=3, layers=[{"at": "-1", "block": "fused",
                             "mixer": {"kind": "kla", "d_state": 4, "expand": 2, "skip": False, "init_std": 0.3,
                                       "p_init": 0.3, "dt_min": 0.02, "dt_max": 0.3}}]),
}


def gather_cases():
    """Every case: each registered mixer module's CASES (registry order), then MODEL_CASES. A name
    defined twice is an error."""
    cases, where = {}, {}
    sources = [(mod.__name__, getattr(mod, "CASES", {})) for mod in MIXERS.values()] + [(__name__, MODEL_CASES)]
    for src, defs in sources:
        for name, model in defs.items():
            if name in cases:
                raise ValueError(f"case {name!r} is defined in both {where[name]} and {src}")
            cases[name], where[name] = model, src
    return cases


# every case: the `model` section of a tiny run (2 layers, d_model 16, 2-4 heads)
CASES = gather_cases()


def case_tokens(name):
    """tokens (B=2, T+1=25) for a case: row 0 random ids (with 0 and VOCAB-1 present), row 1 a repeated
    pattern whose last target is the ignore index -100 (so the mean runs over 47 of 48 positions)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    tok = rng.integers(0, VOCAB, size=(B_PROBE, T_PROBE + 1)).astype(np.int64)
    tok[0, 3], tok[0, 11] = 0, VOCAB - 1
    tok[1, :8] = tok[1, 8:16] = tok[1, 16:24] = rng.integers(0, VOCAB, size=8)
    tok[1, -1] = IGNORE_INDEX
    return tok


# ----------------------------------------------------------------------------------------------------
# the mixer self-tests' check of their cases on random weights (no seqtrain, no committed files)

def case_model_section(case_model):
    """A case's `model` section as seqtrain's resolved config.json would hold it (the model-level defaults
    filled in: block "auto", so a layer whose mixer owns its MLP is fused)."""
    return {"vocab_size": 0, "block": "auto", "norm": "layernorm", "norm_bias": True, "layers": [],
            "tie_embeddings": True, "head_bias": False, **case_model}


def case_mixer_kinds(case_model):
    """The mixer kinds a case's model uses (model.mixer and every model.layers[] override that names one)."""
    return {case_model["mixer"]["kind"]} | {ov.get("mixer", {}).get("kind") for ov in case_model.get("layers", [])}


def case_on_random_weights(name, case_model, kind, random_params):
    """A case's model on random weights through the whole reference: (model, shapes, dump). model is the
    case's `model` section with the defaults filled in, shapes {name: shape} of its parameters, dump the
    forward and backward on the case's probe tokens (model.reference_dump: loss, logits, every gradient).
    The mixer tensors of each `kind` layer L come from random_params(spec, d_model, 8 + L, "blocks.L.mixer."),
    every other tensor from N(0, 0.3^2) (norm weights 1 + N(0, 0.1^2)), drawn in parameter order."""
    model = case_model_section(case_model)
    shapes = param_shapes(model, VOCAB)
    kinds = [mixer_spec(model, l).kind for l in range(model["n_layers"])]
    g = np.random.default_rng(7)
    tensors = {}
    for pname, shape in shapes.items():
        if ".mixer." in pname and kinds[int(pname.split(".")[1])] == kind:
            continue
        if pname.endswith("weight") and ("ln" in pname):
            tensors[pname] = 1 + 0.1 * g.normal(size=shape)
        else:
            tensors[pname] = 0.3 * g.normal(size=shape)
    for l in range(model["n_layers"]):
        if kinds[l] == kind:
            for pname, t in random_params(mixer_spec(model, l), model["d_model"], 8 + l, f"blocks.{l}.mixer.").items():
                tensors[pname] = t.detach().numpy()
    return model, shapes, reference_dump({"model": model}, tensors, case_tokens(name))


def check_cases_on_random_weights(report, label, kind, random_params, grad_names, grads_what, every=True):
    """The self-test of a mixer that owns its MLP on every case with a `kind` layer (case_on_random_weights):
    each `kind` layer is a fused block, exactly the fused blocks lack ln2 and the MLP, the outputs and every
    gradient are finite, and the gradient of each mixer tensor named in grad_names is nonzero (every
    element, or with every=False at least one). One report line per case, "(label) case NAME: ...";
    grads_what says what the gradients are."""
    wanted = re.compile(rf"mixer\.({'|'.join(grad_names)})$")
    for name, case_model in CASES.items():
        if kind not in case_mixer_kinds(case_model):
            continue
        model, shapes, dump = case_on_random_weights(name, case_model, kind, random_params)
        layout_ok = True
        for l in range(model["n_layers"]):
            fused = layer_block(model, l) == "fused"
            layout_ok &= (f"blocks.{l}.ln2.weight" in shapes) == (not fused)
            layout_ok &= (f"blocks.{l}.mlp.fc.weight" in shapes) == (not fused)
            layout_ok &= fused or mixer_spec(model, l).kind != kind
        finite = all(np.isfinite(v).all() for v in dump.values())
        grads = [n for n in dump if wanted.search(n)]
        nonzero = all(((dump[n] != 0).all() if every else (dump[n] != 0).any()) for n in grads)
        report(finite and nonzero and layout_ok,
               f"({label}) case {name}: {len(shapes)} tensors, fused layers without ln2/mlp; "
               f"loss {dump['loss'][0]:.4f}; finite; {len(grads)} {grads_what}")


# ----------------------------------------------------------------------------------------------------
# regeneration

def make_case(name, check_c=False):
    """Train the case's tiny model for 3 steps with bin/seqtrain, copy its config.json and newest
    checkpoint into tests/data/torch_ref/NAME/, write tokens.npy and the reference ref.safetensors."""
    seqtrain = os.path.join(REPO, "bin", "seqtrain")
    if not os.access(seqtrain, os.X_OK):
        raise SystemExit(f"{seqtrain} is missing: run `make` first")
    out_dir = os.path.join(CASE_DIR, name)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torch_ref_") as tmp:
        rng = np.random.default_rng(12345)
        rng.integers(0, VOCAB, size=20000).astype("<u2").tofile(os.path.join(tmp, "train.u16"))
        run_cfg = {
            "run": {"name": name, "dir": "runs", "seed": 7, "threads": 1},
            "data": {"train": "train.u16", "format": "raw_u16", "vocab_size": VOCAB},
            "model": CASES[name],
            "train": {"batch_size": 4, "seq_len": 32, "steps": 3},
            "optim": {"lr": 0.05, "grad_clip": 0},
            "schedule": {"kind": "constant"},
        }
        with open(os.path.join(tmp, "case.json"), "w") as f:
            json.dump(run_cfg, f, indent=1)
        subprocess.run([seqtrain, "--config", "case.json"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        run_dir = os.path.join(tmp, "runs", name)
        with open(os.path.join(run_dir, "latest")) as f:
            ckpt = f.read().strip()
        shutil.copyfile(os.path.join(run_dir, "config.json"), os.path.join(out_dir, "config.json"))
        shutil.copyfile(os.path.join(run_dir, ckpt, "model.safetensors"), os.path.join(out_dir, "model.safetensors"))
    np.save(os.path.join(out_dir, "tokens.npy"), case_tokens(name))
    dump = run_reference(os.path.join(out_dir, "config.json"), os.path.join(out_dir, "model.safetensors"),
                         os.path.join(out_dir, "tokens.npy"), os.path.join(out_dir, "ref.safetensors"))
    if check_c:
        compare_with_seqeval(out_dir, dump)


def compare_with_seqeval(case_dir, dump):
    """Run bin/seqeval --probe on a case and print the largest differences from the reference."""
    with tempfile.TemporaryDirectory(prefix="torch_ref_probe_") as tmp:
        run = os.path.join(tmp, "run")
        ck = os.path.join(run, "ckpt-00000001")
        os.makedirs(ck)
        shutil.copyfile(os.path.join(case_dir, "config.json"), os.path.join(run, "config.json"))
        shutil.copyfile(os.path.join(case_dir, "model.safetensors"), os.path.join(ck, "model.safetensors"))
        with open(os.path.join(run, "latest"), "w") as f:
            f.write("ckpt-00000001\n")
        probe = os.path.join(tmp, "probe.safetensors")
        subprocess.run([os.path.join(REPO, "bin", "seqeval"), "--run", run, "--probe",
                        os.path.join(case_dir, "tokens.npy"), "--out", probe], check=True, stdout=subprocess.DEVNULL)
        c, _ = read_safetensors(probe)
    worst = []
    for name, ref in dump.items():
        diff = np.abs(np.asarray(c[name], dtype=np.float64) - ref)
        worst.append((float(diff.max() / max(np.abs(ref).max(), 1e-30)), float(diff.max()), name))
    worst.sort(reverse=True)
    for scaled, absolute, name in worst[:3]:
        print(f"  seqeval vs reference: {name}: max|diff| {absolute:.3g} = {scaled:.3g} x max|ref|")
