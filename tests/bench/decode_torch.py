#!/usr/bin/python3
"""PyTorch CPU peer of lattice-bench-decode: greedy GPT-2 decoding with a key/value cache.

Loads the GPT-2 safetensors file that `lattice-bench-decode --save-hf FILE` wrote (Hugging
Face names, Conv1D weights stored (in, out)), builds the same prompts
((b * 131 + i * 7919) % vocab), runs the prompt once (prefill), then decodes one token per
sequence per step with cached keys and values, in plain torch (no transformers). Times the
decode steps after the first token, like the Lattice side, and prints

    first tokens: ...
    RESULT {"impl":"pytorch","batch":1,"tokens_per_s":...,"ms_per_step":...,"first":[...]}

Usage: decode_torch.py FILE --layers 12 --heads 12 --batch 1 --tokens 64 --threads 2
"""

import argparse
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data, dtype=np.float32, count=(b - a) // 4,
                                                   offset=a).reshape(info["shape"]).copy())
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    w = {k.removeprefix("transformer."): v for k, v in load_safetensors(a.file).items()}
    wte, wpe = w["wte.weight"], w["wpe.weight"]
    V, C = wte.shape
    H, D = a.heads, C // a.heads
    T = wpe.shape[0]

    def ln(x, name):
        return F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], 1e-5)

    def forward(ids, pos0, cache):
        # ids (B, S) at positions [pos0, pos0 + S); cache[l] = (k, v) each (B, H, pos0, D).
        B, S = ids.shape
        x = wte[ids] + wpe[pos0:pos0 + S]
        for l in range(a.layers):
            h = f"h.{l}."
            y = ln(x, h + "ln_1")
            qkv = torch.addmm(w[h + "attn.c_attn.bias"], y.view(-1, C), w[h + "attn.c_attn.weight"])
            q, k, v = qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], dim=2)
                v = torch.cat([cache[l][1], v], dim=2)
            cache[l] = (k, v)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            if S > 1:
                mask = torch.ones(S, k.shape[2], dtype=torch.bool).triu(k.shape[2] - S + 1)
                att = att.masked_fill(mask, float("-inf"))
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B * S, C)
            x = x + torch.addmm(w[h + "attn.c_proj.bias"], o, w[h + "attn.c_proj.weight"]).view(B, S, C)
            y = ln(x, h + "ln_2")
            f = F.gelu(torch.addmm(w[h + "mlp.c_fc.bias"], y.view(-1, C), w[h + "mlp.c_fc.weight"]),
                       approximate="tanh")
            x = x + torch.addmm(w[h + "mlp.c_proj.bias"], f, w[h + "mlp.c_proj.weight"]).view(B, S, C)
        x = ln(x[:, -1], "ln_f")
        return x @ wte.t()  # (B, V)

    ids = torch.tensor([[(b * 131 + i * 7919) % V for i in range(a.prompt_len)]
                        for b in range(a.batch)])
    best, best_ms, first = 0.0, 0.0, []
    with torch.inference_mode():
        for _ in range(a.repeats):
            cache = [None] * a.layers
            logits = forward(ids, 0, cache)
            tok = logits.argmax(-1)
            out = [tok]
            start = time.perf_counter()
            for step in range(1, a.tokens):
                logits = forward(tok.view(-1, 1), a.prompt_len + step - 1, cache)
                tok = logits.argmax(-1)
                out.append(tok)
            s = time.perf_counter() - start
            rate = a.batch * (a.tokens - 1) / s
            if rate > best:
                best, best_ms = rate, 1e3 * s / (a.tokens - 1)
            first = [int(t[0]) for t in out[:8]]
    print("first tokens:", " ".join(map(str, first)))
    print("RESULT " + json.dumps({"impl": "pytorch", "batch": a.batch, "threads": a.threads,
                                  "tokens_per_s": round(best, 2), "ms_per_step": round(best_ms, 3),
                                  "first": first}, separators=(",", ":")))


if __name__ == "__main__":
    main()
