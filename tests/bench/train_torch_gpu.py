#!/usr/bin/env python3
"""PyTorch bf16 training peer for lattice-bench-train-gpu (tests/gpu/run.sh runs both).

The same GPT-2 models as the Lattice benchmark (124M and 355M at seq 1024, the 1.3B of 24
layers, hidden 2048, 16 heads at seq 2048; vocabulary 50257 padded to 50304), built as Lattice
builds them: pre-LayerNorm blocks, learned position embeddings, fused QKV with bias, causal
attention, GELU (tanh) MLP of width 4h, final LayerNorm, LM head tied to the word embedding,
no dropout. Training as Lattice's --bf16: fp32 parameters (the master weights) and fp32
gradients, bf16 compute under torch.autocast, AdamW (fused where available, lr 1e-4, weight
decay 0.01 on matrices and embeddings), clipping at 1.0. Attention is
F.scaled_dot_product_attention (flash attention on H100/H200). --compile adds torch.compile.

FLOPs per iteration use Megatron's count, as Lattice does:
    3 * B * s * (L * (8h^2 + 4hF + 2sh) + 2hV)
and MFU is against the dense bf16 peak (--peak-tflops, 989 for H100 / H200). The first two
steps are warm-up; the median of the rest gives the figures. One line per model:

    RESULT {"impl":"pytorch","model":"124m","step_ms_median":...,"tokens_per_s":...,
            "tflops":...,"mfu":...}
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {  # name: (layers, hidden, heads, seq, micro batch) -- as bench_train_gpu.cpp
    "124m": (12, 768, 12, 1024, 16),
    "355m": (24, 1024, 16, 1024, 8),
    "1.3b": (24, 2048, 16, 2048, 4),
}
VOCAB, PADDED_VOCAB = 50257, 50304


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: flash attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.x: the T x T scores in memory
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)
        std, out_std = 0.02, 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, out_std if ("proj" in name or "fc2" in name) else std)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied head, (B, T, padded V)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def flops_per_iteration(layers, h, seq, batch):
    per_token = layers * (8 * h * h + 4 * h * 4 * h + 2 * seq * h) + 2 * h * PADDED_VOCAB
    return 3.0 * batch * seq * per_token


def run(name, steps, compile_model, peak):
    layers, h, heads, seq, batch = MODELS[name]
    torch.manual_seed(1234)
    model = GPT(layers, h, heads, seq).cuda()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    kwargs = {"fused": True} if "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8, **kwargs)
    step_fn = torch.compile(model) if compile_model and hasattr(torch, "compile") else model
    gen = torch.Generator(device="cuda").manual_seed(1)
    times = []
    for step in range(steps):
        tokens = torch.randint(0, VOCAB, (batch, seq + 1), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"  step {step + 1}: {times[-1] * 1e3:.1f} ms, loss {loss.item():.4f}",
              file=sys.stderr)
    s = statistics.median(times[2:])
    flops = flops_per_iteration(layers, h, seq, batch)
    result = {"impl": "pytorch", "model": name, "micro_batch": batch, "seq": seq,
              "step_ms_median": s * 1e3, "tokens_per_s": batch * seq / s,
              "tflops": flops / s / 1e12, "mfu": flops / s / (peak * 1e12),
              "compile": compile_model, "torch": torch.__version__,
              "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}
    print("RESULT " + json.dumps(result), flush=True)
    del model, opt, step_fn
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=list(MODELS), action="append")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("train_torch_gpu.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 77
    for name in args.model or list(MODELS):
        run(name, max(3, args.steps), args.compile, args.peak_tflops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
