#include "param_layout.h"

#include <algorithm>

namespace lattice {

ParamLayout::ParamLayout(const ModelConfig& c, const ModelShard& shard) : shard_(shard) {
  if (shard_.layer_end < 0) shard_.layer_end = c.num_layers;
  const int64_t C = c.hidden_size, F = c.ffn(), W = c.qkv_width();
  const bool sp = shard_.sequence_parallel, layer_norm = !c.rms_norm(), bias = c.linear_bias();
  if (shard_.pre && c.has_vision()) {
    add_vision(c.vision);
    vision_end_ = static_cast<int>(tensors_.size());
  }
  if (shard_.pre) {
    word_embedding_ = static_cast<int>(tensors_.size());
    add("embedding.word_embeddings.weight", {c.padded_vocab_size(), C}, true, 0);
    if (c.learned_positions()) {
      position_embedding_ = static_cast<int>(tensors_.size());
      add("embedding.position_embeddings.weight", {c.max_positions(), C}, true, -1);
    }
  }
  first_layer_ = static_cast<int>(tensors_.size());
  // FC1 of SwiGLU is (2, F, C): gate and up, each split over TP, so a rank's slice (2, F/t, C)
  // is its gate rows then its up rows, one GEMM's weight (Megatron's linear_fc1 layout).
  const std::vector<int64_t> fc1 = c.swiglu ? std::vector<int64_t>{2, F, C} : std::vector{F, C};
  const std::vector<int64_t> fc1_b = c.swiglu ? std::vector<int64_t>{2, F} : std::vector{F};
  const int fc1_split = c.swiglu ? 1 : 0;
  for (auto& kind : slot_) std::fill(std::begin(kind), std::end(kind), -1);
  bool seen[2] = {false, false};  // a dense, an MoE layer laid out (their slots recorded)
  const int64_t E = c.num_experts, Fm = c.moe_ffn();
  for (int l = shard_.layer_begin; l < shard_.layer_end; l++) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    const bool moe = c.is_moe_layer(l);
    const int start = static_cast<int>(tensors_.size());
    layer_first_.push_back(start);
    moe_.push_back(moe);
    // Adds one tensor of the layer; the first layer of each kind records where each slot lies.
    auto put = [&](Slot which, const char* name, std::vector<int64_t> shape, bool decay, int split,
                   bool sequence_parallel_grad = false) {
      if (!seen[moe]) slot_[moe][which] = static_cast<int>(tensors_.size()) - start;
      add(p + name, std::move(shape), decay, split, sequence_parallel_grad);
    };
    put(kLn1W, "input_layernorm.weight", {C}, false, -1, sp);
    if (layer_norm) put(kLn1B, "input_layernorm.bias", {C}, false, -1, sp);
    put(kQkvW, "self_attention.linear_qkv.weight", {W, C}, true, 0);
    if (c.qkv_bias()) put(kQkvB, "self_attention.linear_qkv.bias", {W}, false, 0);
    put(kProjW, "self_attention.linear_proj.weight", {C, C}, true, 1);
    if (bias) put(kProjB, "self_attention.linear_proj.bias", {C}, false, -1, sp);
    put(kLn2W, "pre_mlp_layernorm.weight", {C}, false, -1, sp);
    if (layer_norm) put(kLn2B, "pre_mlp_layernorm.bias", {C}, false, -1, sp);
    if (moe) {  // Note [MoE layout]: each expert split over expert TP as the dense MLP over TP
      // With an expert TP below TP each expert-TP group routes its own rows: the router's
      // gradient is partial (Note [expert tensor parallelism e] in gpt_moe.cpp).
      put(kRouterW, "mlp.router.weight", {E, C}, true, -1, shard_.moe_row_parts() > 1);
      const std::vector<int64_t> up =
          c.swiglu ? std::vector<int64_t>{2, Fm, C} : std::vector<int64_t>{Fm, C};
      const std::vector<int64_t> up_b = c.swiglu ? std::vector<int64_t>{2, Fm} : std::vector{Fm};
      // Expert parallelism: this rank's E / EP experts, named by their global numbers.
      const int64_t local = E / shard_.ep_size, first = local * shard_.ep_rank;
      const size_t experts_begin = tensors_.size();
      // Split over the expert TP group (expert TP 1 under TP: whole on this rank, each tensor
      // counted in the norm here; replicated ones counted by expert-TP rank 0).
      const int parts = shard_.expert_tp_size(), part = shard_.expert_tp_rank();
      for (int64_t e = first; e < first + local; e++) {
        const std::string x = p + "mlp.experts.local_experts." + std::to_string(e) + ".";
        add(x + "linear_fc1.weight", up, true, fc1_split, false, parts, part);
        if (bias) add(x + "linear_fc1.bias", up_b, false, fc1_split, false, parts, part);
        add(x + "linear_fc2.weight", {C, Fm}, true, 1, false, parts, part);
        if (bias) add(x + "linear_fc2.bias", {C}, false, -1, false, parts, part);
      }
      for (size_t i = experts_begin; i < tensors_.size(); i++)
        tensors_[i].expert_parallel = shard_.expert_grid();
      per_expert_ = bias ? 4 : 2;
    } else {
      put(kFc1W, "mlp.linear_fc1.weight", fc1, true, fc1_split);
      if (bias) put(kFc1B, "mlp.linear_fc1.bias", fc1_b, false, fc1_split);
      put(kFc2W, "mlp.linear_fc2.weight", {C, F}, true, 1);
      if (bias) put(kFc2B, "mlp.linear_fc2.bias", {C}, false, -1, sp);
    }
    // Note [LoRA]: A (r, in), B (out, r); the replicated half's gradient summed over TP.
    const int64_t r = c.lora_rank;
    auto adapter = [&](Slot a, Slot b, const std::string& linear, std::vector<int64_t> a_shape,
                       int a_split, std::vector<int64_t> b_shape, int b_split) {
      if (!c.lora_targets(linear.substr(linear.find('.') + 1))) return;
      put(a, (linear + ".adapter.linear_in.weight").c_str(), std::move(a_shape), true, a_split,
          a_split < 0);
      put(b, (linear + ".adapter.linear_out.weight").c_str(), std::move(b_shape), true, b_split,
          b_split < 0);
    };
    const std::vector<int64_t> fc1_lb =
        c.swiglu ? std::vector<int64_t>{2, F, r} : std::vector{F, r};
    adapter(kQkvLA, kQkvLB, "self_attention.linear_qkv", {r, C}, -1, {W, r}, 0);
    adapter(kProjLA, kProjLB, "self_attention.linear_proj", {r, C}, 1, {C, r}, -1);
    adapter(kFc1LA, kFc1LB, "mlp.linear_fc1", {r, C}, -1, fc1_lb, fc1_split);
    adapter(kFc2LA, kFc2LB, "mlp.linear_fc2", {r, F}, 1, {C, r}, -1);
    seen[moe] = true;
  }
  layer_first_.push_back(static_cast<int>(tensors_.size()));
  if (shard_.post) {
    final_norm_ = static_cast<int>(tensors_.size());
    add("decoder.final_layernorm.weight", {C}, false, -1, sp);
    if (layer_norm) {
      final_norm_bias_ = static_cast<int>(tensors_.size());
      add("decoder.final_layernorm.bias", {C}, false, -1, sp);
    }
    if (!c.tied_output()) {
      output_ = static_cast<int>(tensors_.size());
      add("output_layer.weight", {c.padded_vocab_size(), C}, true, 0);
    } else if (!shard_.pre) {
      // The tied LM head on a later stage: a copy of the first stage's word embedding, kept
      // equal by summing the two gradients (ARCHITECTURE.md "embedding group").
      word_embedding_ = static_cast<int>(tensors_.size());
      add("embedding.word_embeddings.weight", {c.padded_vocab_size(), C}, true, 0);
      tensors_.back().counts_in_norm = false;
      output_ = word_embedding_;
    } else {
      output_ = word_embedding_;
    }
  }
  const auto is_projector = [](const ParamTensor& t) {
    return t.name.rfind("multi_modal_projector.", 0) == 0;
  };
  for (int i = 0; i < static_cast<int>(tensors_.size()); i++) {
    ParamTensor& t = tensors_[i];
    if (i < vision_end_) {  // Note [vision tensors]: the projector always trains
      t.frozen = !is_projector(t) && (c.freeze_vision || c.lora());
    } else if (c.lora()) {  // Note [LoRA]: everything but the adapters is frozen
      t.frozen = t.name.find(".adapter.") == std::string::npos;
    } else {
      t.frozen = c.freeze_lm;
    }
    has_frozen_ = has_frozen_ || t.frozen;
  }
  // Note [LoRA]: the gradient arena, the tower's block as it is, then the trained tensors.
  size_t g = 0;
  for (int i = 0; i < static_cast<int>(tensors_.size()); i++) {
    ParamTensor& t = tensors_[i];
    if (i >= vision_end_ && t.frozen) {
      t.grad_offset = ParamTensor::kNoGradient;
      continue;
    }
    t.grad_offset = i < vision_end_ ? t.offset : (g + 15) / 16 * 16;
    g = t.grad_offset + t.numel;
  }
  // The arena ends where the last trained bucket's range does (split_buckets): at the last
  // tensor's end when it trains, else on the alignment boundary where the frozen ones begin.
  const bool last_trains = !tensors_.empty() && !tensors_.back().frozen;
  grad_total_ = last_trains ? g : (g + 15) / 16 * 16;
}

// Note [vision tensors]: split dims 0 (output rows) and 1 (input columns) as the language
// model's column- and row-parallel linears; -1 whole on every TP rank.
void ParamLayout::add_vision(const VisionConfig& v) {
  const int64_t C = v.hidden_size, F = v.ffn(), H = v.lm_hidden_size, P = v.patch_dim;
  const std::string emb = "vision_model.embeddings.";
  add(emb + "patch_embedding.weight", {C, v.num_channels, P, P}, true, -1);
  if (v.patch_bias) add(emb + "patch_embedding.bias", {C}, false, -1);
  if (v.class_token) add(emb + "class_embedding", {C}, false, -1);  // 1-D: no decay (Megatron)
  add(emb + "position_embedding.weight", {v.seq_length(), C}, true, -1);
  add("vision_model.pre_layrnorm.weight", {C}, false, -1);  // HF CLIP's spelling
  add("vision_model.pre_layrnorm.bias", {C}, false, -1);
  for (int l = 0; l < v.num_layers; l++) {
    const std::string p = "vision_model.encoder.layers." + std::to_string(l) + ".";
    add(p + "layer_norm1.weight", {C}, false, -1);
    add(p + "layer_norm1.bias", {C}, false, -1);
    add(p + "self_attn.qkv_proj.weight", {3 * C, C}, true, 0);
    add(p + "self_attn.qkv_proj.bias", {3 * C}, false, 0);
    add(p + "self_attn.out_proj.weight", {C, C}, true, 1);
    add(p + "self_attn.out_proj.bias", {C}, false, -1);
    add(p + "layer_norm2.weight", {C}, false, -1);
    add(p + "layer_norm2.bias", {C}, false, -1);
    add(p + "mlp.fc1.weight", {F, C}, true, 0);
    add(p + "mlp.fc1.bias", {F}, false, 0);
    add(p + "mlp.fc2.weight", {C, F}, true, 1);
    add(p + "mlp.fc2.bias", {C}, false, -1);
  }
  add("multi_modal_projector.linear_1.weight", {H, C}, true, 0);
  add("multi_modal_projector.linear_1.bias", {H}, false, 0);
  add("multi_modal_projector.linear_2.weight", {H, H}, true, 1);
  add("multi_modal_projector.linear_2.bias", {H}, false, -1);
}

size_t ParamLayout::vision_arena_numel(const VisionConfig& v, int tp_size) {
  ParamLayout layout;
  layout.shard_.tp_size = tp_size;  // every TP rank's share is the same size
  layout.add_vision(v);
  return (layout.total_ + 15) / 16 * 16;  // as add() aligns the tensor after them
}

std::vector<ParamTensor> ParamLayout::vision_tensors(const VisionConfig& v, int tp_rank,
                                                     int tp_size) {
  ParamLayout layout;
  layout.shard_.tp_rank = tp_rank;
  layout.shard_.tp_size = tp_size;
  layout.add_vision(v);
  return layout.tensors_;
}

size_t ParamLayout::trainable_numel() const {
  size_t n = 0;
  for (const ParamTensor& t : tensors_)
    if (!t.frozen) n += t.numel;
  return n;
}

void ParamLayout::add(std::string name, std::vector<int64_t> global_shape, bool decay,
                      int split_dim, bool sequence_parallel_grad, int parts, int part) {
  ParamTensor t;
  t.name = std::move(name);
  t.global_shape = global_shape;
  t.shape = global_shape;
  t.decay = decay;
  if (parts <= 0) {
    parts = shard_.tp_size;
    part = shard_.tp_rank;
  }
  t.split_dim = parts > 1 ? split_dim : -1;
  if (t.split_dim >= 0) {
    t.shape[t.split_dim] = global_shape[t.split_dim] / parts;
    t.split_begin = t.shape[t.split_dim] * part;
  } else {
    t.counts_in_norm = part == 0;
  }
  // Partial gradients exist only where there are several TP ranks.
  t.sequence_parallel_grad = sequence_parallel_grad && shard_.tp_size > 1;
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= static_cast<size_t>(d);
  // Each tensor starts on a 16-element boundary (64 bytes for float) for aligned SIMD.
  total_ = (total_ + 15) / 16 * 16;
  t.offset = total_;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const ParamTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
// Calls copy(slice offset, global offset, count) for each contiguous run of slice t: one run per
// index of the dimensions before split_dim, of shape[split_dim] x (the dimensions after it).
template <typename Copy>
void for_each_run(const ParamTensor& t, Copy copy) {
  if (t.split_dim < 0) {
    copy(0, 0, t.numel);
    return;
  }
  size_t outer = 1, inner = 1;
  for (int d = 0; d < t.split_dim; d++) outer *= static_cast<size_t>(t.shape[d]);
  for (size_t d = t.split_dim + 1; d < t.shape.size(); d++)
    inner *= static_cast<size_t>(t.shape[d]);
  const size_t run = static_cast<size_t>(t.shape[t.split_dim]) * inner;
  const size_t global_run = static_cast<size_t>(t.global_shape[t.split_dim]) * inner;
  const size_t begin = static_cast<size_t>(t.split_begin) * inner;
  for (size_t o = 0; o < outer; o++) copy(o * run, o * global_run + begin, run);
}
}  // namespace

template <typename T>
void slice_from_global(const ParamTensor& t, const T* global, T* slice) {
  for_each_run(t, [&](size_t s, size_t g, size_t n) { std::copy_n(global + g, n, slice + s); });
}

template <typename T>
void slice_to_global(const ParamTensor& t, const T* slice, T* global) {
  for_each_run(t, [&](size_t s, size_t g, size_t n) { std::copy_n(slice + s, n, global + g); });
}

template void slice_from_global<float>(const ParamTensor&, const float*, float*);
template void slice_from_global<double>(const ParamTensor&, const double*, double*);
template void slice_to_global<float>(const ParamTensor&, const float*, float*);
template void slice_to_global<double>(const ParamTensor&, const double*, double*);

bool is_vocabulary_table(const std::string& name) {
  return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
}

}  // namespace lattice
