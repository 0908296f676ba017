#!/usr/bin/python3
"""Independent Mixtral reference for test_llama_parity's hf_export_of_a_mixtral_like_model case:
Hugging Face MixtralForCausalLM semantics in PyTorch float64, over transformers' tensor names
and config.json keys. Attention, norms and head are LlamaForCausalLM's (llama_reference.py's
hf_forward); each layer's MLP is MixtralSparseMoeBlock, written from its definition:

  router           router_logits = gate(h)  (block_sparse_moe.gate.weight (E, C), no bias)
  routing          routing_weights = softmax(router_logits) over all num_local_experts, the
                   num_experts_per_tok largest, divided by their sum
  experts          expert e: w2(silu(w1(x)) * w3(x)) on the tokens routed to it, multiplied by
                   the token's routing weight for e and summed into the token's output (index_add)

transformers computes the router's softmax in float32 even in a float64 model; here it is float64,
like everything else (that cast only rounds). Mixtral drops no tokens and adds no load-balancing
loss to the logits.

usage: mixtral_reference.py --hf-loss MODEL_DIR TOKENS.json
  MODEL_DIR  config.json (model_type mixtral) and model.safetensors (F32)
  TOKENS     {"tokens": [[...]], "targets": [[...]]}
Prints one JSON line: {"loss": ...}, the mean cross-entropy of the targets under that model.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import hf_linear, hf_loss  # noqa: E402


def mixtral_moe(p, pre, h, cfg):
    """MixtralSparseMoeBlock over h (B, T, C)."""
    B, T, C = h.shape
    x = h.reshape(-1, C)
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    moe = pre + "block_sparse_moe."
    router_logits = hf_linear(p, x, moe + "gate")
    routing_weights = F.softmax(router_logits, dim=1)
    routing_weights, selected_experts = torch.topk(routing_weights, k, dim=-1)
    routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    expert_mask = F.one_hot(selected_experts, num_classes=E).permute(2, 1, 0)  # (E, k, N)
    for e in range(E):
        idx, top_x = torch.where(expert_mask[e])
        if top_x.numel() == 0:
            continue
        name = f"{moe}experts.{e}."
        y = x[top_x]
        y = hf_linear(p, F.silu(hf_linear(p, y, name + "w1")) * hf_linear(p, y, name + "w3"),
                      name + "w2")
        out.index_add_(0, top_x, y * routing_weights[top_x, idx, None])
    return out.reshape(B, T, C)


def main():
    assert sys.argv[1] == "--hf-loss", __doc__
    hf_loss(sys.argv[2], sys.argv[3], model_types=("mixtral",), mlp=mixtral_moe)


if __name__ == "__main__":
    main()
