#!/usr/bin/python3
"""Independent GPT-2 reference for test_torch_parity: Hugging Face GPT-2 semantics in
PyTorch float64, written from the GPT-2 definition (Conv1D: y = x @ W + b; c_attn columns
are [Q | K | V]; "gelu_new" tanh GELU; LayerNorm eps 1e-5; LM head tied to wte).

usage: gpt2_reference.py WEIGHTS.safetensors TOKENS_JSON GRADS_OUT.safetensors
  WEIGHTS    GPT-2 tensors in F32 (as `lattice train --save-hf` writes them)
  TOKENS     {"heads": NH, "tokens": [[...], ...], "targets": [[...], ...]}
  GRADS_OUT  d(mean token loss)/d(weight) for every tensor, F32, same names
Prints one JSON line: {"loss": <mean cross-entropy>}.
"""
import json
import math
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=torch.float32)
        tensors[name] = t.reshape(info["shape"]).to(torch.float64)
    return tensors


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        raw = tensors[name].to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, tokens, heads):
    B, T = tokens.shape
    C = p["wte.weight"].shape[1]
    hs = C // heads
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    layers = sum(1 for k in p if k.endswith(".ln_1.weight"))
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for i in range(layers):
        h = f"h.{i}."
        a = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        m = gelu_new(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].T


def main():
    weights_path, tokens_path, grads_path = sys.argv[1:4]
    params = read_safetensors(weights_path)
    for t in params.values():
        t.requires_grad_(True)
    with open(tokens_path) as f:
        spec = json.load(f)
    tokens = torch.tensor(spec["tokens"], dtype=torch.long)
    targets = torch.tensor(spec["targets"], dtype=torch.long)
    logits = forward(params, tokens, spec["heads"])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))
    loss.backward()
    write_safetensors(grads_path, {name: t.grad for name, t in params.items()})
    print(json.dumps({"loss": loss.item()}))


if __name__ == "__main__":
    main()
