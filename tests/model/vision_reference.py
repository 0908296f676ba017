#!/usr/bin/python3
"""Independent float64 reference for test_vision_parity: a CLIP vision transformer and LLaVA-1.5's
projector in PyTorch, written from HF transformers' CLIPVisionModel / LlavaMultiModalProjector
definitions rather than from Lattice's code:

  embeddings   Conv2d(Cin, C, kernel P, stride P) (bias only with "patch_bias"), flattened to
               (B, Np, C) in row-major patch order; a class embedding prepended when "class_token";
               + the learned position embedding (T, C)
  pre norm     LayerNorm (eps 1e-5): HF's vision_model.pre_layrnorm; hidden_states[0]
  layer        h = h + out_proj(attn(layer_norm1(h))); h = h + fc2(quick_gelu(fc1(layer_norm2(h))));
               attention over all T rows (no mask), scale HS^-0.5; quick_gelu(x) = x sigmoid(1.702 x);
               hidden_states[i] = layer i's output
  selected     hidden_states[select_layer] (LLaVA's mm_vision_select_layer), the class token's row
               dropped (LLaVA's "patch" feature)
  projector    linear_2(gelu(linear_1(features))), gelu exact (torch.nn.GELU())
  loss         sum(out * R), R fixed

The fused QKV weight (3C, C) is in Lattice's documented grouped layout: head h owns rows
[3 HS h, 3 HS (h + 1)), its query, then key, then value (HS rows each); the bias likewise.

usage: vision_reference.py SPEC.json
  SPEC {"config": {...}, "batch": B, "params": {name: [...]}, "images": [...], "R": [...]}
Prints one JSON line: {"out": [...], "d_images": [...], "grads": {name: [...]}} (float64; a
parameter the loss does not reach has zero gradient).
"""
import json
import sys

import torch
import torch.nn.functional as F


def shapes_of(c):
    """Every tensor's shape, HF CLIP / LLaVA names."""
    Cin, Hi, Wi, P = c["channels"], c["img_h"], c["img_w"], c["patch"]
    C, L, H, Fh = c["hidden"], c["layers"], c["lm_hidden"], c["ffn"]
    T = (Hi // P) * (Wi // P) + (1 if c["class_token"] else 0)
    shapes = {}
    emb = "vision_model.embeddings."
    shapes[emb + "patch_embedding.weight"] = (C, Cin, P, P)
    if c["patch_bias"]:
        shapes[emb + "patch_embedding.bias"] = (C,)
    if c["class_token"]:
        shapes[emb + "class_embedding"] = (C,)
    shapes[emb + "position_embedding.weight"] = (T, C)
    shapes["vision_model.pre_layrnorm.weight"] = (C,)
    shapes["vision_model.pre_layrnorm.bias"] = (C,)
    for l in range(L):
        p = f"vision_model.encoder.layers.{l}."
        shapes.update({p + "layer_norm1.weight": (C,), p + "layer_norm1.bias": (C,),
                       p + "self_attn.qkv_proj.weight": (3 * C, C),
                       p + "self_attn.qkv_proj.bias": (3 * C,),
                       p + "self_attn.out_proj.weight": (C, C), p + "self_attn.out_proj.bias": (C,),
                       p + "layer_norm2.weight": (C,), p + "layer_norm2.bias": (C,),
                       p + "mlp.fc1.weight": (Fh, C), p + "mlp.fc1.bias": (Fh,),
                       p + "mlp.fc2.weight": (C, Fh), p + "mlp.fc2.bias": (C,)})
    shapes.update({"multi_modal_projector.linear_1.weight": (H, C),
                   "multi_modal_projector.linear_1.bias": (H,),
                   "multi_modal_projector.linear_2.weight": (H, H),
                   "multi_modal_projector.linear_2.bias": (H,)})
    return shapes


def tower(w, c, images):
    """The projected patch features (B, Np, H) of images (B, Cin, Hi, Wi)."""
    B = images.shape[0]
    P, C, NH, L = c["patch"], c["hidden"], c["heads"], c["layers"]
    HS = C // NH
    emb = "vision_model.embeddings."
    x = F.conv2d(images, w[emb + "patch_embedding.weight"],
                 w.get(emb + "patch_embedding.bias"), stride=P)  # (B, C, Hi/P, Wi/P)
    x = x.flatten(2).transpose(1, 2)  # (B, Np, C)
    if c["class_token"]:
        x = torch.cat([w[emb + "class_embedding"].expand(B, 1, C), x], dim=1)
    T = x.shape[1]
    x = x + w[emb + "position_embedding.weight"]
    h = F.layer_norm(x, (C,), w["vision_model.pre_layrnorm.weight"],
                     w["vision_model.pre_layrnorm.bias"], eps=1e-5)
    hidden_states = [h]
    for l in range(L):
        p = f"vision_model.encoder.layers.{l}."
        y = F.layer_norm(h, (C,), w[p + "layer_norm1.weight"], w[p + "layer_norm1.bias"], eps=1e-5)
        qkv = F.linear(y, w[p + "self_attn.qkv_proj.weight"], w[p + "self_attn.qkv_proj.bias"])
        qkv = qkv.reshape(B, T, NH, 3, HS)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS)
        scores = q @ k.transpose(-1, -2) * HS ** -0.5
        att = torch.softmax(scores, dim=-1) @ v  # (B, NH, T, HS)
        att = att.transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(att, w[p + "self_attn.out_proj.weight"], w[p + "self_attn.out_proj.bias"])
        y = F.layer_norm(h, (C,), w[p + "layer_norm2.weight"], w[p + "layer_norm2.bias"], eps=1e-5)
        y = F.linear(y, w[p + "mlp.fc1.weight"], w[p + "mlp.fc1.bias"])
        y = y * torch.sigmoid(1.702 * y)
        h = h + F.linear(y, w[p + "mlp.fc2.weight"], w[p + "mlp.fc2.bias"])
        hidden_states.append(h)
    feat = hidden_states[c["select_layer"]]
    if c["class_token"]:
        feat = feat[:, 1:]
    out = F.linear(feat, w["multi_modal_projector.linear_1.weight"],
                   w["multi_modal_projector.linear_1.bias"])
    out = F.gelu(out)
    return F.linear(out, w["multi_modal_projector.linear_2.weight"],
                    w["multi_modal_projector.linear_2.bias"])


def main():
    spec = json.load(open(sys.argv[1]))
    c = spec["config"]
    B = spec["batch"]
    w = {}
    for name, shape in shapes_of(c).items():
        w[name] = torch.tensor(spec["params"][name], dtype=torch.float64).reshape(shape)
        w[name].requires_grad_(True)
    images = torch.tensor(spec["images"], dtype=torch.float64).reshape(
        B, c["channels"], c["img_h"], c["img_w"])
    images.requires_grad_(True)
    R = torch.tensor(spec["R"], dtype=torch.float64)
    out = tower(w, c, images)
    loss = (out.reshape(-1) * R).sum()
    loss.backward()
    grads = {}
    for name, t in w.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        grads[name] = g.reshape(-1).tolist()
    print(json.dumps({"out": out.detach().reshape(-1).tolist(),
                      "d_images": images.grad.reshape(-1).tolist(), "grads": grads}))


if __name__ == "__main__":
    main()
