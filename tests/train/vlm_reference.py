#!/usr/bin/python3
"""Independent float64 reference for test_vlm_parity: a LLaVA-style vision-language model in
PyTorch, from LLaVA's definition (LlavaForConditionalGeneration) rather than from Lattice's code:
the CLIP tower and projector of tests/model/vision_reference.py, the decoder of
moe_reference.py (GPT-2 or Llama style, Megatron-core names), joined as LLaVA joins them:

  inputs_embeds   the word embedding of every text token; each image's projected patches,
                  in order, at the rows of its placeholder tokens (a sequence's k-th placeholder
                  row takes patch k of its images; patches past the sequence's end are unused);
                  then the decoder adds its position embedding (GPT-2) or rotates (Llama)
  loss            the sum of token cross-entropies over the targets that are not -1, / B T
                  (Lattice's host forward: the mean over every row, ignored rows 0)
  training        torch.optim.AdamW (decay on tensors of 2+ dimensions), the gradient norm
                  clipped over the trained tensors, constant learning rate; "frozen" tensors
                  (--freeze-LM, --freeze-ViT) do not train

usage: vlm_reference.py WEIGHTS.safetensors SPEC.json
  SPEC {"config": {... decoder ...}, "vision": {... tower ...}, "image_token": id,
        "images_per_sample": I, "frozen": [names], "optim": {...},
        "steps": [{"tokens": [[...]], "targets": [[...]], "images": [flat (B I, Cin, H, W)]}]}
Prints one JSON line: {"losses": [...], "grad_norms": [...], "weights": {name: [...]}}.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "model"))
from llama_reference import read_safetensors  # noqa: E402
from moe_reference import decoder  # noqa: E402
from vision_reference import tower  # noqa: E402


def main():
    weights, spec_path = sys.argv[1:3]
    spec = json.load(open(spec_path))
    c, v, o = spec["config"], spec["vision"], spec["optim"]
    image_token, I = spec["image_token"], spec["images_per_sample"]
    frozen = set(spec["frozen"])
    params = {k: torch.nn.Parameter(t, requires_grad=k not in frozen)
              for k, t in read_safetensors(weights).items()}
    trained = [t for t in params.values() if t.requires_grad]
    decay = [t for t in trained if t.dim() >= 2]
    no_decay = [t for t in trained if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, norms = [], []
    for step in spec["steps"]:
        tokens = torch.tensor(step["tokens"])
        targets = torch.tensor(step["targets"])
        B, T = tokens.shape
        images = torch.tensor(step["images"], dtype=torch.float64).reshape(
            B * I, v["channels"], v["img_h"], v["img_w"])
        opt.zero_grad()
        patches = tower(params, v, images).reshape(B, -1, c["hidden"])  # (B, I Np, H)
        is_image = tokens == image_token
        text = torch.where(is_image, torch.zeros_like(tokens), tokens)
        rows = []
        for b in range(B):
            x = params["embedding.word_embeddings.weight"][text[b]]
            where = is_image[b].nonzero(as_tuple=True)[0]
            x = x.index_put((where,), patches[b, :where.numel()])
            rows.append(x)
        logits, _ = decoder(params, c, torch.stack(rows))
        token_losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                       ignore_index=-1, reduction="none")
        loss = token_losses.sum() / (B * T)
        loss.backward()
        norm_ = torch.nn.utils.clip_grad_norm_(trained, o["clip_grad"])
        opt.step()
        losses.append(loss.item())
        norms.append(norm_.item())
    out = {name: t.detach().reshape(-1).tolist() for name, t in params.items()}
    print(json.dumps({"losses": losses, "grad_norms": norms, "weights": out}))


if __name__ == "__main__":
    main()
