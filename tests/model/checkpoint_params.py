#!/usr/bin/env python3
"""Compares the model tensors of two Lattice checkpoints saved under any layouts.

usage: checkpoint_params.py A B TOL  (A, B: iter_NNNNNNN directories)
Each tensor is assembled whole from its pieces (metadata.json: split_dim / split_begin /
split_size for tensor-parallel slices, flat_begin / flat_end for ranges of a slice), then every
element must agree within TOL of the tensor's largest magnitude (at least 1e-3). F32 only.
Exits non-zero naming the first tensor that differs; prints the largest difference otherwise.
"""
import array, json, os, sys

def model_tensors(ckpt):
    """Every model tensor of a checkpoint directory, whole, by name."""
    meta = json.load(open(os.path.join(ckpt, "metadata.json")))
    files, whole = {}, {}
    for p in meta["pieces"]:
        if p["kind"] != "model":
            continue
        if p["file"] not in files:
            raw = open(os.path.join(ckpt, p["file"]), "rb").read()
            n = int.from_bytes(raw[:8], "little")
            files[p["file"]] = (json.loads(raw[8:8 + n]), raw[8 + n:])
        header, data = files[p["file"]]
        h = header[p["key"]]
        if h["dtype"] != "F32":
            sys.exit(f"{p['key']}: dtype {h['dtype']}, this check reads F32")
        values = array.array("f", data[h["data_offsets"][0]:h["data_offsets"][1]])
        shape = p["global_shape"]
        dim = p["split_dim"]
        local = list(shape)
        if dim >= 0:
            local[dim] = p["split_size"]
        t = whole.setdefault(p["name"], [None] * _numel(shape))
        # values: the flat range [flat_begin, flat_end) of the local slice
        for i, v in enumerate(values):
            flat = p["flat_begin"] + i
            idx = _unflat(flat, local)
            if dim >= 0:
                idx[dim] += p["split_begin"]
            t[_flat(idx, shape)] = v
    return whole

def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n

def _unflat(i, shape):
    idx = []
    for s in reversed(shape):
        idx.append(i % s)
        i //= s
    return idx[::-1]

def _flat(idx, shape):
    i = 0
    for x, s in zip(idx, shape):
        i = i * s + x
    return i

a, b = model_tensors(sys.argv[1]), model_tensors(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"the checkpoints name different tensors: {sorted(set(a) ^ set(b))[:5]}")
worst = 0.0
for name in a:
    x, y = a[name], b[name]
    if None in x or None in y:
        sys.exit(f"{name}: not every element was saved")
    scale = max(1e-3, max(abs(v) for v in x))
    err = max(abs(u - v) for u, v in zip(x, y)) / scale
    worst = max(worst, err)
    if err > float(sys.argv[3]):
        sys.exit(f"{name}: differs by {err:.3g} of its largest magnitude (over {sys.argv[3]})")
print(f"{len(a)} tensors, largest difference {worst:.3g} of a tensor's largest magnitude")
