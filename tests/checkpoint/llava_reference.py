#!/usr/bin/python3
"""Independent float64 reference for test_hf_llava: the loss of a Hugging Face LLaVA model
(LlavaForConditionalGeneration) computed from its files alone, the tensor names, shapes and
config.json keys of transformers' checkpoints, written from transformers' definitions (not from
Lattice's code, and not through Lattice's names: nothing of vision_reference.py or
llama_reference.py but read_safetensors is used):

  CLIPVisionEmbeddings   Conv2d(patch_embedding, stride patch_size, no bias) -> (B, Np, C) in
                         row-major patch order; class_embedding prepended; + position_embedding
  pre_layrnorm           LayerNorm(layer_norm_eps): hidden_states[0]
  CLIPEncoderLayer       h += out_proj(attn(layer_norm1(h))), q_proj scaled by HS^-0.5, separate
                         q/k/v heads of HS columns, no mask; h += fc2(act(fc1(layer_norm2(h)))),
                         act = vision_config.hidden_act (quick_gelu: x sigmoid(1.702 x));
                         hidden_states[i] = layer i's output
  LLaVA features         hidden_states[vision_feature_layer]; "default" drops the class row
  projector              linear_2(gelu(linear_1(x))), exact GELU (projector_hidden_act "gelu")
  inputs_embeds          embed_tokens of the text ids; the rows whose id is image_token_index take
                         the image features in order (masked_scatter)
  LlamaForCausalLM       RMSNorm (rms_norm_eps), RoPE (rope_theta, rotate_half), GQA
                         (num_key_value_heads), SwiGLU MLP (down(silu(gate) * up)), causal
                         attention, norm, lm_head (embed_tokens when tie_word_embeddings)
  GPT2LMHeadModel        (text_config model_type gpt2) + wpe; LayerNorm (layer_norm_epsilon);
                         Conv1D weights (in, out); c_attn's columns [Q | K | V]; gelu_new (tanh);
                         ln_f; the head tied to wte
  loss                   sum of cross-entropies over targets != -1, / (B T); with SPEC's
                         "padding_columns" K, over the logits and K more columns, each the mean
                         of the real logits (what a model whose vocabulary is padded by K rows,
                         each the mean of the real rows, computes)

Also a module: tests/infer/eval_tasks_reference.py scores multiple-choice questions with images
through load, image_features, embed and logits_of.

usage: llava_reference.py MODEL_DIR SPEC.json
  SPEC {"tokens": [[...]], "targets": [[...]], "images": [flat (B, Cin, H, W)],
  "padding_columns": K (optional, 0)}  (one image per sequence). Prints one JSON line
  {"loss": x, "loss_without_padding": y} (y is x when K is 0).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from llama_reference import read_safetensors  # noqa: E402


def act(name, x):
    if name == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return F.gelu(x)
    raise ValueError(name)


def clip_features(p, vc, select, images):
    pre = "vision_tower.vision_model."
    C, NH, P = vc["hidden_size"], vc["num_attention_heads"], vc["patch_size"]
    eps = vc.get("layer_norm_eps", 1e-5)
    HS = C // NH
    B = images.shape[0]
    x = F.conv2d(images, p[pre + "embeddings.patch_embedding.weight"], stride=P)
    x = x.flatten(2).transpose(1, 2)
    cls = p[pre + "embeddings.class_embedding"].expand(B, 1, C)
    x = torch.cat([cls, x], dim=1) + p[pre + "embeddings.position_embedding.weight"]
    x = F.layer_norm(x, (C,), p[pre + "pre_layrnorm.weight"], p[pre + "pre_layrnorm.bias"], eps)
    states = [x]
    T = x.shape[1]
    for l in range(vc["num_hidden_layers"]):
        e = pre + f"encoder.layers.{l}."
        lin = lambda name, h: F.linear(h, p[e + name + ".weight"], p[e + name + ".bias"])
        h = F.layer_norm(x, (C,), p[e + "layer_norm1.weight"], p[e + "layer_norm1.bias"], eps)
        heads = lambda t: t.view(B, T, NH, HS).transpose(1, 2)
        q = heads(lin("self_attn.q_proj", h) * HS ** -0.5)
        k = heads(lin("self_attn.k_proj", h))
        v = heads(lin("self_attn.v_proj", h))
        a = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        x = x + lin("self_attn.out_proj", a.transpose(1, 2).reshape(B, T, C))
        h = F.layer_norm(x, (C,), p[e + "layer_norm2.weight"], p[e + "layer_norm2.bias"], eps)
        x = x + lin("mlp.fc2", act(vc.get("hidden_act", "quick_gelu"), lin("mlp.fc1", h)))
        states.append(x)
    return states[select]


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def llama_logits(p, tc, x):
    pre = "language_model.model."
    B, T, C = x.shape
    NH, G = tc["num_attention_heads"], tc.get("num_key_value_heads", tc["num_attention_heads"])
    HS, eps = C // NH, tc["rms_norm_eps"]
    inv = 1.0 / (tc.get("rope_theta", 10000.0) ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(t):
        return torch.cat([-t[..., HS // 2:], t[..., :HS // 2]], dim=-1)

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(tc["num_hidden_layers"]):
        e = pre + f"layers.{l}."
        w = lambda name: p[e + name + ".weight"]
        h = rms(x, w("input_layernorm"), eps)
        q = F.linear(h, w("self_attn.q_proj")).view(B, T, NH, HS).transpose(1, 2)
        k = F.linear(h, w("self_attn.k_proj")).view(B, T, G, HS).transpose(1, 2)
        v = F.linear(h, w("self_attn.v_proj")).view(B, T, G, HS).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // G, dim=1), v.repeat_interleave(NH // G, dim=1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HS) + mask, dim=-1) @ v
        x = x + F.linear(a.transpose(1, 2).reshape(B, T, C), w("self_attn.o_proj"))
        h = rms(x, w("post_attention_layernorm"), eps)
        x = x + F.linear(F.silu(F.linear(h, w("mlp.gate_proj"))) * F.linear(h, w("mlp.up_proj")),
                         w("mlp.down_proj"))
    x = rms(x, p[pre + "norm.weight"], eps)
    head = p[pre + "embed_tokens.weight"] if tc.get("tie_word_embeddings", False) \
        else p["language_model.lm_head.weight"]
    return F.linear(x, head)


def gpt2_logits(p, tc, x):
    pre = "language_model.transformer."
    B, T, C = x.shape
    NH, eps = tc["n_head"], tc.get("layer_norm_epsilon", 1e-5)
    HS = C // NH
    x = x + p[pre + "wpe.weight"][:T]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(tc["n_layer"]):
        e = pre + f"h.{l}."
        conv = lambda name, h: h @ p[e + name + ".weight"] + p[e + name + ".bias"]  # Conv1D
        ln = lambda name, h: F.layer_norm(h, (C,), p[e + name + ".weight"],
                                          p[e + name + ".bias"], eps)
        q, k, v = conv("attn.c_attn", ln("ln_1", x)).split(C, dim=-1)
        heads = lambda t: t.view(B, T, NH, HS).transpose(1, 2)
        a = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(HS) + mask,
                          dim=-1) @ heads(v)
        x = x + conv("attn.c_proj", a.transpose(1, 2).reshape(B, T, C))
        h = conv("mlp.c_fc", ln("ln_2", x))
        assert tc.get("activation_function", "gelu_new") == "gelu_new"
        x = x + conv("mlp.c_proj", F.gelu(h, approximate="tanh"))
    x = F.layer_norm(x, (C,), p[pre + "ln_f.weight"], p[pre + "ln_f.bias"], eps)
    return F.linear(x, p[pre + "wte.weight"])  # GPT2LMHeadModel ties lm_head to wte


def load(model_dir):
    """config.json and model.safetensors (float64) of a LLaVA model directory."""
    config = json.load(open(os.path.join(model_dir, "config.json")))
    assert config["model_type"] == "llava"
    p = {k: t.to(torch.float64)
         for k, t in read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    return config, p


def image_features(p, config, images):
    """The projected features (N, Np, H) of images (N, Cin, S, S), already normalised."""
    features = clip_features(p, config["vision_config"], config["vision_feature_layer"], images)
    if config["vision_feature_select_strategy"] == "default":
        features = features[:, 1:]
    mm = "multi_modal_projector."
    features = F.linear(features, p[mm + "linear_1.weight"], p[mm + "linear_1.bias"])
    features = act(config["projector_hidden_act"], features)
    return F.linear(features, p[mm + "linear_2.weight"], p[mm + "linear_2.bias"])


def embed(p, config, tokens, features):
    """inputs_embeds (B, T, H) of tokens (B, T): the word embedding of each text id; the rows of
    image_token_index take features[b] (rows in order) of sequence b."""
    gpt2 = config["text_config"]["model_type"] == "gpt2"
    table = p["language_model.transformer.wte.weight" if gpt2
              else "language_model.model.embed_tokens.weight"]
    is_image = tokens == config["image_token_index"]
    x = table[torch.where(is_image, 0, tokens)]
    rows = []
    for b in range(tokens.shape[0]):
        n = int(is_image[b].sum())
        rows.append(x[b].masked_scatter(is_image[b].unsqueeze(-1), features[b][:n]))
    return torch.stack(rows)


def logits_of(p, config, inputs_embeds):
    """The language model's logits (B, T, V) of inputs_embeds (B, T, H)."""
    tc = config["text_config"]
    return (gpt2_logits if tc["model_type"] == "gpt2" else llama_logits)(p, tc, inputs_embeds)


def main():
    model_dir, spec_path = sys.argv[1:3]
    config, p = load(model_dir)
    vc = config["vision_config"]
    spec = json.load(open(spec_path))
    tokens, targets = torch.tensor(spec["tokens"]), torch.tensor(spec["targets"])
    B, T = tokens.shape
    S = vc["image_size"]
    images = torch.tensor(spec["images"], dtype=torch.float64).reshape(
        B, vc.get("num_channels", 3), S, S)
    features = image_features(p, config, images)
    logits = logits_of(p, config, embed(p, config, tokens, features))

    def loss(logits):
        return (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                ignore_index=-1, reduction="sum") / (B * T)).item()
    pad = spec.get("padding_columns", 0)
    # Each padding column's logit: the mean of the real ones (a padding row is the mean of the
    # real rows: Note [vocabulary padding rows] in hf_tensors.cpp).
    padded = torch.cat([logits, logits.mean(dim=-1, keepdim=True).expand(B, T, pad)], dim=-1)
    print(json.dumps({"loss": loss(padded), "loss_without_padding": loss(logits)}))


if __name__ == "__main__":
    main()
