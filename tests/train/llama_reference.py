#!/usr/bin/python3
"""Independent Llama reference for test_llama_parity: Hugging Face LlamaForCausalLM semantics in
PyTorch float64, written from the model's definition rather than from Lattice's code:

  RMSNorm          x * rsqrt(mean(x^2) + eps) * w
  RoPE             q * cos + rotate_half(q) * sin on the first rotary_dim dims of each query and
                   key head (rotate_half(x) = cat(-x2, x1)); inv_freq = 1 / theta^(2i/d) held in
                   float32 and the angles t * inv_freq in float32, as Hugging Face computes them;
                   cos and sin of those angles in float64
  attention        causal softmax(q k^T / sqrt(head_dim)) v, query head h reading key/value head
                   h // (heads / groups) (repeat_kv)
  MLP              down(silu(gate(x)) * up(x))
  head             an untied lm_head, or the word embedding when tied

The tensors are Megatron-core's, as Lattice names them (the parameters are those tensors; q, k and
v are views of the grouped linear_qkv rows: per query group its heads/groups query heads, then its
key head, then its value head; linear_fc1 is (2, F, C) = gate, up). Training: torch.optim.AdamW
(decoupled weight decay on matrices and embeddings only, as Megatron), gradient norm clipped as
torch.nn.utils.clip_grad_norm_, constant learning rate, the mean token cross-entropy.

usage: llama_reference.py WEIGHTS.safetensors SPEC.json OUT.safetensors
  WEIGHTS  the initial weights, F32
  SPEC     {"config": {...}, "optim": {...}, "steps": [{"tokens": [[...]], "targets": [[...]]}],
            "generate": {"prompt": [...], "tokens": n}}   ("generate" optional)
  OUT      the weights after every step, F32, same names
Prints one JSON line: {"losses": [...], "grad_norms": [...], "generated": [...]}, generated being
the greedy continuation of the prompt from the initial weights (argmax over the vocabulary).

usage: llama_reference.py --hf-loss MODEL_DIR TOKENS.json
  MODEL_DIR  a Hugging Face model directory as `lattice train --save-hf` writes it: config.json
             and model.safetensors (F32) with transformers' names (model.embed_tokens,
             model.layers.N.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
             post_attention_layernorm, model.norm, lm_head)
  TOKENS     {"tokens": [[...]], "targets": [[...]]}
Prints one JSON line: {"loss": ...}, the mean cross-entropy of the targets under that model, by
a forward written as transformers' LlamaForCausalLM / Qwen2ForCausalLM compute it (nn.Linear
projections, q/k/v viewed head-major, repeat_kv), independently of the Megatron-named forward
above: what proves Lattice's export mapping.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


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
        tensors[name] = t.reshape(info["shape"]).double()
    return tensors


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = tensors[name].detach().float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama3_scaled(inv_freq, scaling):
    """transformers' _compute_llama3_parameters (Llama 3.1's rope_scaling), as written there."""
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rope_tables(T, dim, theta, scaling=None):
    # inv_freq in float32 as Hugging Face holds it, rounded from float64 (Hugging Face's float32
    # power can differ from the rounded value by one unit in the last place).
    inv_freq = (1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))).float()
    if scaling is not None:
        inv_freq = llama3_scaled(inv_freq, scaling)
    angles = torch.outer(torch.arange(T, dtype=torch.int64).float(), inv_freq)  # float32
    emb = torch.cat((angles, angles), dim=-1).double()
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin, dim):  # x (B, heads, T, head_dim)
    rot, passed = x[..., :dim], x[..., dim:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, passed), dim=-1)


def forward(p, c, tokens):
    B, T = tokens.shape
    C, NH, G = c["hidden"], c["heads"], c["groups"]
    HS, Q = C // NH, NH // G
    x = p["embedding.word_embeddings.weight"][tokens]
    cos, sin = rope_tables(T, c["rotary_dim"], c["rotary_base"])
    for l in range(c["layers"]):
        pre = f"decoder.layers.{l}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], c["eps"])
        w = p[pre + "self_attention.linear_qkv.weight"].reshape(G, Q + 2, HS, C)
        b = p.get(pre + "self_attention.linear_qkv.bias")
        b = b.reshape(G, Q + 2, HS) if b is not None else None

        def project(rows, bias):  # rows (heads, HS, C) -> (B, heads, T, HS)
            y = torch.einsum("btc,hdc->bhtd", h, rows)
            return y + bias[None, :, None, :] if bias is not None else y

        q = project(w[:, :Q].reshape(NH, HS, C), b[:, :Q].reshape(NH, HS) if b is not None else None)
        k = project(w[:, Q], b[:, Q] if b is not None else None)
        v = project(w[:, Q + 1], b[:, Q + 1] if b is not None else None)
        q = apply_rope(q, cos, sin, c["rotary_dim"])
        k = apply_rope(k, cos, sin, c["rotary_dim"])
        k = k.repeat_interleave(Q, dim=1)  # repeat_kv: query head h reads group h // Q
        v = v.repeat_interleave(Q, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HS)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        att = att.transpose(1, 2).reshape(B, T, C)
        x = x + att @ p[pre + "self_attention.linear_proj.weight"].T
        h = rms_norm(x, p[pre + "pre_mlp_layernorm.weight"], c["eps"])
        gate, up = p[pre + "mlp.linear_fc1.weight"]
        x = x + (F.silu(h @ gate.T) * (h @ up.T)) @ p[pre + "mlp.linear_fc2.weight"].T
    x = rms_norm(x, p["decoder.final_layernorm.weight"], c["eps"])
    head = p.get("output_layer.weight", p["embedding.word_embeddings.weight"])
    return x @ head.T


def hf_linear(p, x, name):  # nn.Linear: x W^T + b
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if name + ".bias" in p else y


def hf_llama_mlp(p, pre, h, cfg=None):
    """LlamaMLP: down_proj(silu(gate_proj(h)) * up_proj(h))."""
    gate = F.silu(hf_linear(p, h, pre + "mlp.gate_proj"))
    return hf_linear(p, gate * hf_linear(p, h, pre + "mlp.up_proj"), pre + "mlp.down_proj")


def hf_forward(p, cfg, tokens, mlp=hf_llama_mlp):
    """LlamaForCausalLM's forward over Hugging Face's tensor names and config.json keys; `mlp`
    (p, "model.layers.N.", h) -> the MLP's output (hf_loss's mlp with cfg bound)."""
    B, T = tokens.shape
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or NH
    HS = cfg.get("head_dim") or C // NH
    eps = cfg.get("rms_norm_eps", 1e-6)
    scaling = cfg.get("rope_scaling")
    assert scaling is None or scaling["rope_type"] == "llama3", scaling
    assert cfg.get("partial_rotary_factor", 1.0) == 1.0
    cos, sin = rope_tables(T, HS, cfg.get("rope_theta", 10000.0), scaling)

    def linear(x, name):
        return hf_linear(p, x, name)

    def repeat_kv(x, n_rep):  # transformers' repeat_kv: (B, KV, T, HS) -> (B, KV * n_rep, T, HS)
        b, kv, t, d = x.shape
        return x[:, :, None, :, :].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)

    x = p["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = linear(h, pre + "self_attn.q_proj").view(B, T, NH, HS).transpose(1, 2)
        k = linear(h, pre + "self_attn.k_proj").view(B, T, KV, HS).transpose(1, 2)
        v = linear(h, pre + "self_attn.v_proj").view(B, T, KV, HS).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, NH // KV), repeat_kv(v, NH // KV)
        scores = q @ k.transpose(2, 3) / math.sqrt(HS)
        causal = torch.full((T, T), float("-inf"), dtype=scores.dtype).triu(1)
        att = (scores + causal).softmax(-1) @ v
        x = x + linear(att.transpose(1, 2).reshape(B, T, NH * HS), pre + "self_attn.o_proj")
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        x = x + mlp(p, pre, h)
    x = rms_norm(x, p["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    assert tied == ("lm_head.weight" not in p), "lm_head.weight must be there exactly when untied"
    return x @ (p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]).T


def hf_loss(model_dir, tokens_path, model_types=("llama", "qwen2"), mlp=hf_llama_mlp):
    cfg = json.load(open(model_dir + "/config.json"))
    assert cfg["model_type"] in model_types, cfg["model_type"]
    p = read_safetensors(model_dir + "/model.safetensors")
    spec = json.load(open(tokens_path))
    tokens, targets = torch.tensor(spec["tokens"]), torch.tensor(spec["targets"])
    with torch.no_grad():
        logits = hf_forward(p, cfg, tokens, lambda p, pre, h: mlp(p, pre, h, cfg))
    assert logits.shape[-1] == cfg["vocab_size"]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    print(json.dumps({"loss": loss.item()}))


def main():
    if sys.argv[1] == "--hf-loss":
        hf_loss(sys.argv[2], sys.argv[3])
        return
    weights, spec_path, out = sys.argv[1:4]
    spec = json.load(open(spec_path))
    c, o = spec["config"], spec["optim"]
    params = {k: torch.nn.Parameter(v) for k, v in read_safetensors(weights).items()}
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    generated = []
    if "generate" in spec:  # greedy decoding from the initial weights, the whole prefix each time
        seq = list(spec["generate"]["prompt"])
        with torch.no_grad():
            for _ in range(spec["generate"]["tokens"]):
                logits = forward(params, c, torch.tensor([seq]))
                seq.append(int(logits[0, -1, :c["vocab"]].argmax()))
        generated = seq[len(spec["generate"]["prompt"]):]
    losses, norms = [], []
    for step in spec["steps"]:
        tokens = torch.tensor(step["tokens"])
        targets = torch.tensor(step["targets"])
        opt.zero_grad()
        logits = forward(params, c, tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    write_safetensors(out, params)
    print(json.dumps({"losses": losses, "grad_norms": norms, "generated": generated}))


if __name__ == "__main__":
    main()
