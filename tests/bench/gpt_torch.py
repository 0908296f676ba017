#!/usr/bin/python3
"""PyTorch CPU reference for Lattice's training-throughput benchmark.

A small GPT-2 written to match Lattice's model (Megatron-style) as closely as plain PyTorch
allows: pre-LayerNorm blocks, learned position embeddings, fused QKV Linear(C, 3C) with bias,
causal softmax attention, GELU (tanh approximation) MLP of width 4C, a final LayerNorm and an
LM head tied to the word embedding (no bias). Dropout (default 0.1) sits where Megatron puts
it: after the embeddings, on the attention probabilities, and on the output of each
attention and MLP projection before the residual add.

Training: AdamW(lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on weight matrices
and embeddings only), gradient-norm clipping at 1.0, cross-entropy over B x T on random
tokens drawn from a fixed seed. Warm-up steps are not timed; the timed steps' median gives
tokens/s. The last line printed is

    RESULT {"impl":"pytorch","config":"A","tokens_per_s":...,"step_ms_median":...,
            "threads":2,"params":...,"peak_rss_mib":...}

(on one line). Run it with Debian's /usr/bin/python3, which has python3-torch; for example

    /usr/bin/python3 tests/bench/gpt_torch.py --config A --threads 2 --steps 10

Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE first for a fair figure (train_vs_pytorch.sh
does): PyTorch's fp32 Linear layers run on the system OpenBLAS.
"""

import argparse
import ctypes
import json
import math
import os
import re
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "A": dict(layers=4, hidden=256, heads=4, vocab=8192, seq=128, micro_batch=8),
    "B": dict(layers=12, hidden=768, heads=12, vocab=50304, seq=256, micro_batch=4),
    "L": dict(layers=4, hidden=256, heads=4, vocab=8192, seq=2048, micro_batch=1),
}
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0; absent in 1.13


# ----------------------------------------------------------------------------------------
# Model


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, max_seq, dropout, use_sdpa):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)  # fused Q, K, V with bias
        self.proj = nn.Linear(hidden, hidden)  # output projection
        self.dropout = dropout
        self.use_sdpa = use_sdpa
        # True above the diagonal: the future positions a query may not see.
        mask = torch.triu(torch.ones(max_seq, max_seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("future", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if self.use_sdpa:
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, T)
            scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
            probs = F.softmax(scores, dim=-1)
            probs = F.dropout(probs, self.dropout, self.training)
            y = probs @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)  # output projection

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, hidden, heads, max_seq, dropout, use_sdpa):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = CausalSelfAttention(hidden, heads, max_seq, dropout, use_sdpa)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = MLP(hidden)
        self.drop = nn.Dropout(dropout)  # hidden dropout

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        x = x + self.drop(self.mlp(self.ln2(x)))
        return x


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, seq, dropout, use_sdpa):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)  # word embedding, also the LM head
        self.wpe = nn.Embedding(seq, hidden)  # learned positions
        self.drop = nn.Dropout(dropout)  # embedding dropout
        self.blocks = nn.ModuleList(
            Block(hidden, heads, seq, dropout, use_sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        self._init_weights(layers)

    def _init_weights(self, layers, std=0.02):
        # Megatron: weights ~ N(0, std); output projections ~ N(0, std / sqrt(2 L));
        # biases 0; LayerNorm weight 1, bias 0 (nn.LayerNorm's default).
        out_std = std / math.sqrt(2.0 * layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, 0.0, out_std)
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return x @ self.wte.weight.t()  # tied LM head, no bias: (B, T, V)


# ----------------------------------------------------------------------------------------
# Helpers


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(PRESETS), default=None,
                    help="preset model and batch (explicit flags below override it); A if "
                    "no model flag is given")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--micro-batch", type=int)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps (default 2)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads and OpenBLAS threads (default: CPUs available)")
    ap.add_argument("--dropout", type=float, default=0.1,
                    help="embedding, attention-probability and hidden dropout (default 0.1)")
    ap.add_argument("--sdpa", action="store_true",
                    help="use F.scaled_dot_product_attention (PyTorch >= 2.0 only)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    model_flags = ("layers", "hidden", "heads", "vocab", "seq", "micro_batch")
    if args.config is None and all(getattr(args, f) is None for f in model_flags):
        args.config = "A"
    preset = PRESETS.get(args.config, {})
    for f in model_flags:
        if getattr(args, f) is None:
            if f not in preset:
                ap.error(f"--{f.replace('_', '-')} is required without --config")
            setattr(args, f, preset[f])
        elif args.config is not None and getattr(args, f) != preset[f]:
            args.config += "*"  # a preset with an override: label it as such
    if args.config is None:
        args.config = "custom"
    if args.hidden % args.heads:
        ap.error("--hidden must be a multiple of --heads")
    if args.steps < 1 or args.warmup_steps < 0:
        ap.error("--steps must be >= 1 and --warmup-steps >= 0")
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0))
    if args.sdpa and not HAVE_SDPA:
        ap.error(f"--sdpa: torch {torch.__version__} has no "
                 "torch.nn.functional.scaled_dot_product_attention (added in PyTorch 2.0)")
    return args


def openblas():
    """The OpenBLAS library this process loaded (through torch), or None."""
    for name in ("libopenblas.so.0", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            pass
    return None


def build_info_line():
    """The BLAS / oneDNN / CPU-capability facts from torch.__config__.show(), on one line."""
    facts = []
    for line in torch.__config__.show().splitlines():
        line = line.strip(" -")
        if "MKL-DNN" in line or "oneDNN" in line or "CPU capability" in line:
            facts.append(line)
        facts += re.findall(r"\b(?:BLAS_INFO|LAPACK_INFO)=[^,\s]*", line)
    return "; ".join(facts)


def megatron_flops(args):
    """Training FLOPs per step as Megatron (and Lattice) count them, no recomputation."""
    B, s, L, h, V = args.micro_batch, args.seq, args.layers, args.hidden, args.vocab
    return 72.0 * B * s * L * h * h * (1 + s / (12.0 * h) + V / (12.0 * L * h))


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    blas = openblas()
    if blas is not None:
        # torch.set_num_threads does not reach OpenBLAS's own pthread pool.
        blas.openblas_set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}"
          + (f", OpenBLAS core {blas.openblas_get_corename().decode()}" if blas else ""))
    print(f"build: {build_info_line()}")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"env: {var}={os.environ[var]}")

    model = GPT(args.layers, args.hidden, args.heads, args.vocab, args.seq, args.dropout,
                args.sdpa)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())  # the tied head counted once

    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, LayerNorm
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.999), eps=1e-8)

    print(f"config {args.config}: layers {args.layers}, hidden {args.hidden}, heads "
          f"{args.heads}, vocab {args.vocab}, seq {args.seq}, micro-batch {args.micro_batch}, "
          f"dropout {args.dropout}, attention {'sdpa' if args.sdpa else 'explicit'}, "
          f"params {n_params:,}")

    gen = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.micro_batch * args.seq
    flops = megatron_flops(args)
    times = []
    for step in range(args.warmup_steps + args.steps):
        batch = torch.randint(0, args.vocab, (args.micro_batch, args.seq + 1), generator=gen)
        inputs, targets = batch[:, :-1], batch[:, 1:]

        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0

        timed = step >= args.warmup_steps
        if timed:
            times.append(dt)
        print(f"{'step' if timed else 'warmup'} {step + 1:3d}: {dt * 1e3:9.1f} ms  "
              f"{tokens_per_step / dt:9.1f} tok/s  {flops / dt / 1e9:7.1f} GFLOP/s  "
              f"loss {loss.item():.4f}  grad-norm {grad_norm.item():.3f}", flush=True)

    median = statistics.median(times)
    result = {
        "impl": "pytorch",
        "config": args.config,
        "tokens_per_s": round(tokens_per_step / median, 2),
        "step_ms_median": round(median * 1e3, 3),
        "threads": torch.get_num_threads(),
        "params": n_params,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print("RESULT " + json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
