#!/usr/bin/python3
"""Independent mixture-of-experts reference for test_moe_parity: a decoder in PyTorch float64 whose
MLPs are Megatron-core MoE layers (megatron/core/transformer/moe: router.py TopKRouter,
moe_utils.py topk_routing_with_score_function, apply_router_token_dropping,
switch_load_balancing_loss_func), written from those definitions rather than from Lattice's code:

  router           logits = x W_router^T (no bias), over the B*T tokens of the micro-batch
  routing          Megatron's default (no pre-softmax): the k largest logits, their softmax
                   (= softmax over all experts renormalised over the k, Mixtral's rule)
  token dropping   with a capacity factor f: capacity = ceil(N k / E * f); when it is at most N,
                   each expert keeps the `capacity` tokens of largest routing probability
                   (torch.topk over the tokens, drop policy "probs"); dropped probs become 0
  experts          SequentialMLP: expert e's MLP on its tokens, the output scattered back weighted
                   by the routing probability and summed over the token's experts
  aux loss         scores = softmax(logits) over all experts, tokens_per_expert = the top-k map
                   before dropping; coeff * E / (k N^2) * sum_e tokens_per_expert[e] * sum_n
                   scores[n, e], added to the loss (one micro-batch, so Megatron's 1 / num
                   micro-batches scaling is 1)

The dense parts: Llama style (RMSNorm, RoPE, SwiGLU experts, no biases, untied head; the helpers of
llama_reference.py) or GPT-2 style (LayerNorm, learned positions, GELU (tanh) experts with biases,
tied head). Training: torch.optim.AdamW (decay on matrices and embeddings only), gradient norm
clipped as torch.nn.utils.clip_grad_norm_, constant learning rate.

usage: moe_reference.py WEIGHTS.safetensors SPEC.json
  WEIGHTS  the initial weights, F32, Megatron-core names
  SPEC     {"config": {...}, "optim": {...}, "steps": [{"tokens": [[...]], "targets": [[...]]}]}
Prints one JSON line: {"losses": [...], "aux_losses": [...], "grad_norms": [...],
"weights": {name: [flat float64 values after the last step]}}; losses are the cross-entropy
alone, aux_losses the load-balancing loss summed over layers (their sum is what is trained).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import apply_rope, read_safetensors, rms_norm, rope_tables  # noqa: E402


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def expert_mlp(p, name, x, c):
    def linear(y, which):  # SwiGLU's linear_fc1 is (2, F, C) = gate, up: rows [gate | up]
        w = p[name + which + ".weight"]
        out = y @ w.reshape(-1, w.shape[-1]).T
        b = p.get(name + which + ".bias")
        return out + b.reshape(-1) if b is not None else out

    h = linear(x, "linear_fc1")
    if c["swiglu"]:
        gate, up = h.chunk(2, dim=-1)
        a = F.silu(gate) * up
    else:
        a = gelu_tanh(h)
    return linear(a, "linear_fc2")


def moe(p, pre, h, c):
    """One MoE MLP over h (B, T, C); returns (output, aux loss)."""
    B, T, C = h.shape
    x = h.reshape(-1, C)
    N, E, k = x.shape[0], c["experts"], c["topk"]
    logits = x @ p[pre + "mlp.router.weight"].T
    top_logits, top_idx = torch.topk(logits, k=k, dim=1)
    probs = torch.softmax(top_logits, dim=-1)
    routing_probs = torch.zeros_like(logits).scatter(1, top_idx, probs)
    routing_map = torch.zeros_like(logits).int().scatter(1, top_idx, 1).bool()
    aux = torch.zeros((), dtype=torch.float64)
    if c["aux_coeff"] > 0:
        scores = torch.softmax(logits, dim=-1)
        _, aux_idx = torch.topk(scores, k=k, dim=1)
        tokens_per_expert = torch.zeros_like(logits).scatter(1, aux_idx, 1).sum(0)
        aux = torch.sum(scores.sum(0) * tokens_per_expert) * (E * c["aux_coeff"] / (k * N * N))
    if c["capacity_factor"] > 0:
        capacity = math.ceil((N * k / E) * c["capacity_factor"])
        if capacity <= N:
            _, keep = torch.topk(routing_probs, k=capacity, dim=0, sorted=False)
            mask = torch.zeros_like(routing_probs).scatter(0, keep, 1).bool()
            routing_map = routing_map & mask
            routing_probs = routing_probs * routing_map
    out = torch.zeros_like(x)
    for e in range(E):
        rows = routing_map[:, e].nonzero(as_tuple=True)[0]
        if rows.numel() == 0:
            continue
        y = expert_mlp(p, f"{pre}mlp.experts.local_experts.{e}.", x[rows], c)
        out = out.index_add(0, rows, routing_probs[rows, e, None] * y)
    return out.reshape(B, T, C), aux


def norm(p, name, x, c):
    if c["rms"]:
        return rms_norm(x, p[name + ".weight"], c["eps"])
    return F.layer_norm(x, x.shape[-1:], p[name + ".weight"], p[name + ".bias"], 1e-5)


def forward(p, c, tokens):
    """Returns (logits, summed aux loss)."""
    return decoder(p, c, p["embedding.word_embeddings.weight"][tokens])


def decoder(p, c, x):
    """From the input embeddings x (B, T, C) (before the position embedding): (logits, summed aux
    loss)."""
    B, T, C = x.shape
    NH, G = c["heads"], c["groups"]
    HS, Q = C // NH, NH // G
    if "embedding.position_embeddings.weight" in p:
        x = x + p["embedding.position_embeddings.weight"][:T]
    rope = c["rotary_dim"] > 0
    if rope:
        cos, sin = rope_tables(T, c["rotary_dim"], c["rotary_base"])
    aux_total = torch.zeros((), dtype=torch.float64)
    for l in range(c["layers"]):
        pre = f"decoder.layers.{l}."
        h = norm(p, pre + "input_layernorm", x, c)
        w = p[pre + "self_attention.linear_qkv.weight"].reshape(G, Q + 2, HS, C)
        b = p.get(pre + "self_attention.linear_qkv.bias")
        b = b.reshape(G, Q + 2, HS) if b is not None else None

        def project(rows, bias):  # rows (heads, HS, C) -> (B, heads, T, HS)
            y = torch.einsum("btc,hdc->bhtd", h, rows)
            return y + bias[None, :, None, :] if bias is not None else y

        q = project(w[:, :Q].reshape(NH, HS, C), b[:, :Q].reshape(NH, HS) if b is not None else None)
        k = project(w[:, Q], b[:, Q] if b is not None else None)
        v = project(w[:, Q + 1], b[:, Q + 1] if b is not None else None)
        if rope:
            q = apply_rope(q, cos, sin, c["rotary_dim"])
            k = apply_rope(k, cos, sin, c["rotary_dim"])
        k = k.repeat_interleave(Q, dim=1)
        v = v.repeat_interleave(Q, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HS)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        att = att.transpose(1, 2).reshape(B, T, C) @ p[pre + "self_attention.linear_proj.weight"].T
        if pre + "self_attention.linear_proj.bias" in p:
            att = att + p[pre + "self_attention.linear_proj.bias"]
        x = x + att
        h = norm(p, pre + "pre_mlp_layernorm", x, c)
        if c["experts"] > 0 and l % c["layer_freq"] == 0:
            y, aux = moe(p, pre, h, c)
            aux_total = aux_total + aux
        else:
            y = expert_mlp(p, pre + "mlp.", h, c)
        x = x + y
    x = norm(p, "decoder.final_layernorm", x, c)
    head = p.get("output_layer.weight", p["embedding.word_embeddings.weight"])
    return x @ head.T, aux_total


def main():
    weights, spec_path = sys.argv[1:3]
    spec = json.load(open(spec_path))
    c, o = spec["config"], spec["optim"]
    params = {k: torch.nn.Parameter(v) for k, v in read_safetensors(weights).items()}
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, aux_losses, norms = [], [], []
    for step in spec["steps"]:
        tokens = torch.tensor(step["tokens"])
        targets = torch.tensor(step["targets"])
        opt.zero_grad()
        logits, aux = forward(params, c, tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        (loss + aux).backward()
        norm_ = torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        opt.step()
        losses.append(loss.item())
        aux_losses.append(aux.item())
        norms.append(norm_.item())
    out = {name: v.detach().reshape(-1).tolist() for name, v in params.items()}
    print(json.dumps({"losses": losses, "aux_losses": aux_losses, "grad_norms": norms,
                      "weights": out}))


if __name__ == "__main__":
    main()
