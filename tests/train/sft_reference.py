#!/usr/bin/python3
"""Independent SFT reference for test_sft_parity: supervised fine-tuning of Hugging Face GPT-2
(gpt2_reference.py's float64 forward) on conversations with a loss mask, written from the
definition rather than from Lattice's code:

  samples   sample i of the run is conversation i mod n (in order, no shuffle, as Megatron's
            SFTDataset), its first seq_length + 1 tokens, padded with token 0 (mask 0);
            inputs x[0..T-1], targets x[t+1] where mask[t+1] else ignore_index
  packing   ("packing": true) sample i is pack i mod the number of packs: consecutive
            conversations (each cut to seq_length + 1 tokens) taken greedily while they fit in
            seq_length + 1; each conversation of a pack is run on its own (its own positions,
            no attention to the others), which is what packed attention must equal
  loss      Megatron's per-token loss: the summed cross-entropy of the global batch's targets
            over their number (all micro-batches and data-parallel ranks alike)
  training  torch.optim.AdamW, decoupled weight decay on matrices and embeddings only (as
            Megatron), gradient norm clipped as torch.nn.utils.clip_grad_norm_, constant lr

usage: sft_reference.py WEIGHTS.safetensors SPEC.json
  WEIGHTS  GPT-2 tensors, F32
  SPEC     {"heads": NH, "seq_length": T, "global_batch": G, "steps": S,
            "conversations": [{"tokens": [...], "mask": [...]}, ...],
            "valid_conversations": [...]  (optional: the held-out split, evaluated at the end)
            "optim": {"lr", "beta1", "beta2", "eps", "weight_decay", "clip_grad"}}
Prints one JSON line: {"losses": [...], "grad_norms": [...], "targets": [...], "valid_loss": x}.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import forward, read_safetensors  # noqa: E402

IGNORE = -100


def sample(conversation, T):
    tokens = conversation["tokens"][:T + 1]
    mask = conversation["mask"][:T + 1]
    pad = T + 1 - len(tokens)
    tokens = tokens + [0] * pad
    mask = mask + [0] * pad
    targets = [tokens[t + 1] if mask[t + 1] else IGNORE for t in range(T)]
    return tokens[:T], targets


def packs(conversations, T):
    """Greedy in-order packs of conversation indices, each pack at most T + 1 tokens."""
    out, filled = [], 0
    for i, c in enumerate(conversations):
        n = min(len(c["tokens"]), T + 1)
        if not out or filled + n > T + 1:
            out.append([])
            filled = 0
        out[-1].append(i)
        filled += n
    return out


def packed_loss(params, conversations, pack, T, heads):
    """Summed masked cross-entropy of one pack, each conversation run alone; and its targets."""
    total, count = 0.0, 0
    for i in pack:
        tokens = conversations[i]["tokens"][:T + 1]
        mask = conversations[i]["mask"][:T + 1]
        if len(tokens) < 2:
            continue
        targets = torch.tensor([[tokens[t + 1] if mask[t + 1] else IGNORE
                                 for t in range(len(tokens) - 1)]])
        logits = forward(params, torch.tensor([tokens[:-1]]), heads)
        total = total + F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                        ignore_index=IGNORE, reduction="sum")
        count += int((targets != IGNORE).sum())
    return total, count


def main():
    weights, spec_path = sys.argv[1:3]
    spec = json.load(open(spec_path))
    o, T, G = spec["optim"], spec["seq_length"], spec["global_batch"]
    conversations = spec["conversations"]
    params = {k: torch.nn.Parameter(v) for k, v in read_safetensors(weights).items()}
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, norms, counts = [], [], []
    packed = packs(conversations, T) if spec.get("packing") else None
    for step in range(spec["steps"]):
        if packed:
            opt.zero_grad()
            loss, count = 0.0, 0
            for i in range(step * G, (step + 1) * G):
                pack_loss, pack_count = packed_loss(params, conversations, packed[i % len(packed)],
                                                    T, spec["heads"])
                loss, count = loss + pack_loss, count + pack_count
            loss = loss / count
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
            opt.step()
            losses.append(loss.item())
            norms.append(norm.item())
            counts.append(count)
            continue
        rows = [sample(conversations[i % len(conversations)], T)
                for i in range(step * G, (step + 1) * G)]
        tokens = torch.tensor([r[0] for r in rows])
        targets = torch.tensor([r[1] for r in rows])
        count = int((targets != IGNORE).sum())
        opt.zero_grad()
        logits = forward(params, tokens, spec["heads"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE, reduction="sum") / count
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        counts.append(count)
    out = {"losses": losses, "grad_norms": norms, "targets": counts}
    if "valid_conversations" in spec:  # one global batch of the held-out split, after training
        held = spec["valid_conversations"]
        rows = [sample(held[i % len(held)], T) for i in range(G)]
        targets = torch.tensor([r[1] for r in rows])
        with torch.no_grad():
            logits = forward(params, torch.tensor([r[0] for r in rows]), spec["heads"])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=IGNORE, reduction="sum")
        out["valid_loss"] = loss.item() / int((targets != IGNORE).sum())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
