#!/usr/bin/env python3
"""Read a .safetensors file (seqtrain checkpoints, or any other) without the `safetensors` package.

Usage:
    python3 scripts/safetensors_read.py FILE [--torch]
prints one line per tensor: name, shape, dtype, mean, std (population std, over all elements), then
the metadata. --torch also converts every tensor to a torch.Tensor and checks it equals the array.

As a module:
    from safetensors_read import load
    tensors, metadata = load("run/ckpt-00000500/model.safetensors")            # numpy arrays (lists without numpy)
    tensors, metadata = load(path, framework="torch")                          # torch tensors

Only the standard library is required; numpy and torch are used when importable. The reader
validates the file the way the reference implementation does (header bounds, dtypes, shapes against
data_offsets, tensors tiling the data section exactly), so it doubles as a format check.
"""
import json
import math
import struct
import sys

HEADER_MAX = 100 << 20

# dtype -> (bytes, struct code, numpy dtype name)
DTYPES = {
    "F64": (8, "d", "<f8"), "F32": (4, "f", "<f4"), "F16": (2, "e", "<f2"), "BF16": (2, None, None),
    "I64": (8, "q", "<i8"), "I32": (4, "i", "<i4"), "I16": (2, "h", "<i2"), "I8": (1, "b", "i1"),
    "U64": (8, "Q", "<u8"), "U32": (4, "I", "<u4"), "U16": (2, "H", "<u2"), "U8": (1, "B", "u1"),
    "BOOL": (1, "?", "?"),
}

try:
    import numpy as np
except ImportError:  # the reader still works, returning flat lists
    np = None


class FormatError(ValueError):
    pass


def read_header(path):
    """(header dict without __metadata__, metadata dict, data bytes)"""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise FormatError(f"{path}: {len(blob)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > HEADER_MAX:
        raise FormatError(f"{path}: header length {n} over the {HEADER_MAX}-byte limit")
    if 8 + n > len(blob):
        raise FormatError(f"{path}: truncated: header length {n} but the file has {len(blob)} bytes")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as ex:
        raise FormatError(f"{path}: header is not valid JSON: {ex}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    if not all(isinstance(v, str) for v in meta.values()):
        raise FormatError(f"{path}: metadata values must be strings")
    data = memoryview(blob)[8 + n:]
    spans = []
    for name, info in header.items():
        dt = info.get("dtype")
        if dt not in DTYPES:
            raise FormatError(f"{path}: tensor {name!r} has unknown dtype {dt!r}")
        shape, (b, e) = info["shape"], info["data_offsets"]
        if e - b != math.prod(shape) * DTYPES[dt][0]:
            raise FormatError(f"{path}: tensor {name!r}: data_offsets do not match its shape")
        spans.append((b, e, name))
    expect = 0
    for b, e, name in sorted(spans):
        if b != expect:
            raise FormatError(f"{path}: tensor {name!r} overlaps or leaves a gap (begin {b}, expected {expect})")
        expect = e
    if expect != len(data):
        raise FormatError(f"{path}: data section is {len(data)} bytes, tensors cover {expect}")
    return header, meta, data


def load(path, framework="numpy"):
    """dict name -> array (numpy, torch, or flat list when numpy is missing), and the metadata"""
    header, meta, data = read_header(path)
    out = {}
    for name, info in header.items():
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        raw = data[b:e]
        if np is not None and DTYPES[dt][2] is not None:
            arr = np.frombuffer(raw, dtype=DTYPES[dt][2]).reshape(shape)
        elif DTYPES[dt][1] is not None:
            arr = list(struct.unpack("<%d%s" % (math.prod(shape), DTYPES[dt][1]), raw))
        else:
            raise FormatError(f"{path}: tensor {name!r}: {dt} needs numpy or torch here")
        if framework == "torch":
            import torch
            arr = torch.from_numpy(arr.copy()) if np is not None else torch.tensor(arr).reshape(shape)
        out[name] = arr
    return out, meta


def mean_std(values):
    """population mean and std in double precision"""
    if np is not None:
        a = np.asarray(values, dtype=np.float64)
        return (float(a.mean()), float(a.std())) if a.size else (0.0, 0.0)
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    m = math.fsum(values) / n
    return m, math.sqrt(math.fsum((v - m) ** 2 for v in values) / n)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        tensors, meta = load(args[0])
    except (OSError, FormatError, KeyError, TypeError, ValueError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    header, _, _ = read_header(args[0])
    for name, arr in tensors.items():
        info = header[name]
        m, s = mean_std(arr)
        print(f"{name}\t{list(info['shape'])}\t{info['dtype']}\tmean={m:.9g}\tstd={s:.9g}")
    for k, v in meta.items():
        print(f"meta\t{k}\t{v}")
    if "--torch" in argv:
        import torch
        tt, _ = load(args[0], framework="torch")
        for name, t in tt.items():
            ref = torch.as_tensor(np.array(tensors[name])) if np is not None else torch.tensor(tensors[name])
            if list(t.shape) != header[name]["shape"] or not torch.equal(t.reshape(-1), ref.reshape(-1)):
                print(f"error: torch tensor {name} differs", file=sys.stderr)
                return 1
        print(f"torch\t{len(tt)} tensors ok")
    return 0


if __name__ == "__main__":
    try:
        rc = main(sys.argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`... | head`): stop quietly as cat does, with 128 + SIGPIPE. stdout is
        # pointed at /dev/null first so that Python's own flush at exit raises nothing more.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 141
    sys.exit(rc)
