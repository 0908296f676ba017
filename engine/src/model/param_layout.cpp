#include "param_layout.h"

#include <algorithm>

namespace lattice {

ParamLayout::ParamLayout(const ModelConfig& c, const ModelShard& shard) : shard_(shard) {
  if (shard_.layer_end < 0) shard_.layer_end = c.num_layers;
  const int64_t C = c.hidden_size, F = c.ffn();
  const bool sp = shard_.sequence_parallel;
  if (shard_.pre) {
    word_embedding_ = static_cast<int>(tensors_.size());
    add("embedding.word_embeddings.weight", {c.padded_vocab_size(), C}, true, 0);
    position_embedding_ = static_cast<int>(tensors_.size());
    add("embedding.position_embeddings.weight", {c.max_positions(), C}, true, -1);
  }
  first_layer_ = static_cast<int>(tensors_.size());
  for (int l = shard_.layer_begin; l < shard_.layer_end; l++) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, false, -1, sp);
    add(p + "input_layernorm.bias", {C}, false, -1, sp);
    add(p + "self_attention.linear_qkv.weight", {3 * C, C}, true, 0);
    add(p + "self_attention.linear_qkv.bias", {3 * C}, false, 0);
    add(p + "self_attention.linear_proj.weight", {C, C}, true, 1);
    add(p + "self_attention.linear_proj.bias", {C}, false, -1, sp);
    add(p + "pre_mlp_layernorm.weight", {C}, false, -1, sp);
    add(p + "pre_mlp_layernorm.bias", {C}, false, -1, sp);
    add(p + "mlp.linear_fc1.weight", {F, C}, true, 0);
    add(p + "mlp.linear_fc1.bias", {F}, false, 0);
    add(p + "mlp.linear_fc2.weight", {C, F}, true, 1);
    add(p + "mlp.linear_fc2.bias", {C}, false, -1, sp);
  }
  if (shard_.post) {
    final_norm_ = static_cast<int>(tensors_.size());
    add("decoder.final_layernorm.weight", {C}, false, -1, sp);
    add("decoder.final_layernorm.bias", {C}, false, -1, sp);
    if (!shard_.pre) {
      // The tied LM head on a later stage: a copy of the first stage's word embedding, kept
      // equal by summing the two gradients (ARCHITECTURE.md "embedding group").
      word_embedding_ = static_cast<int>(tensors_.size());
      add("embedding.word_embeddings.weight", {c.padded_vocab_size(), C}, true, 0);
      tensors_.back().counts_in_norm = false;
    }
  }
}

void ParamLayout::add(std::string name, std::vector<int64_t> global_shape, bool decay,
                      int split_dim, bool sequence_parallel_grad) {
  ParamTensor t;
  t.name = std::move(name);
  t.global_shape = global_shape;
  t.shape = global_shape;
  t.decay = decay;
  t.split_dim = shard_.tp_size > 1 ? split_dim : -1;
  if (t.split_dim >= 0) {
    t.shape[t.split_dim] = global_shape[t.split_dim] / shard_.tp_size;
    t.split_begin = t.shape[t.split_dim] * shard_.tp_rank;
  } else {
    t.counts_in_norm = shard_.tp_rank == 0;
  }
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
// Calls copy(slice offset, global offset, count) for each contiguous run of slice t.
template <typename Copy>
void for_each_run(const ParamTensor& t, Copy copy) {
  if (t.split_dim < 0) {
    copy(0, 0, t.numel);
  } else if (t.split_dim == 0) {
    const size_t row = t.shape.size() > 1 ? static_cast<size_t>(t.shape[1]) : 1;
    copy(0, static_cast<size_t>(t.split_begin) * row, t.numel);
  } else {  // columns of a 2-D tensor
    const size_t rows = t.shape[0], width = t.shape[1], cols = t.global_shape[1];
    for (size_t r = 0; r < rows; r++) copy(r * width, r * cols + t.split_begin, width);
  }
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

}  // namespace lattice
