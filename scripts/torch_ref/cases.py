"""The committed cases under tests/data/torch_ref/NAME: their definitions, gathered from the mixer
modules, the probe tokens, and the regeneration (train a tiny seqtrain model, write the reference dump).

Mirrors nothing in src/: it drives bin/seqtrain and bin/seqeval; tests/test_torch_ref.c is the C side that
reads what make_case writes. A case is the `model` section of a tiny run (d_model 16, 2-3 layers); the
run around it (data, 3 AdamW steps at lr 0.05, one thread) is make_case's. Each mixer module contributes
the cases of its kind (its CASES dict, gathered in registry order); the cases here are those about the
model around the mixers (a head kind, a stack mixing kinds). docs/reference_check.md lists every case.
"""
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from .common import IGNORE_INDEX, REPO, read_safetensors, tiny_model
from .mixers import MIXERS
from .model import run_reference

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
