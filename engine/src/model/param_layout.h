// Where every parameter lives in the flat arena. Layer-major order (embeddings, layer 0 ...
// layer L-1, final norm) keeps a pipeline stage's parameters contiguous. Names follow
// Megatron-core (`decoder.layers.3.self_attention.linear_qkv.weight`); the QKV weight is in
// Megatron's per-head layout: rows [h*3*HS, (h+1)*3*HS) hold head h's q, k, v.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/model_config.h"

namespace lattice {

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in elements from the arena's start
  size_t numel = 0;
  bool decay = true;  // weight decay applies (false for biases, norms)
};

// Pointers into one arena for one transformer layer, shapes in comments.
template <typename T>
struct LayerParams {
  T* ln1_w;   // (C)
  T* ln1_b;   // (C)
  T* qkv_w;   // (3C, C), per-head [q|k|v]
  T* qkv_b;   // (3C)
  T* proj_w;  // (C, C)
  T* proj_b;  // (C)
  T* ln2_w;   // (C)
  T* ln2_b;   // (C)
  T* fc1_w;   // (F, C)
  T* fc1_b;   // (F)
  T* fc2_w;   // (C, F)
  T* fc2_b;   // (C)
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t total_numel() const { return total_; }
  const ParamTensor* find(const std::string& name) const;

  // Indices into tensors() of the embedding pair, of layer l's twelve tensors, of the final norm.
  static constexpr int kPerLayer = 12;
  int word_embedding_index() const { return 0; }
  int position_embedding_index() const { return 1; }
  int layer_index(int layer) const { return 2 + layer * kPerLayer; }
  int final_norm_index() const { return static_cast<int>(tensors_.size()) - 2; }

  template <typename T>
  LayerParams<T> layer(T* arena, int l) const {
    T* p[kPerLayer];
    for (int i = 0; i < kPerLayer; i++) p[i] = arena + tensors_[layer_index(l) + i].offset;
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
  }

 private:
  void add(std::string name, std::vector<int64_t> shape, bool decay);
  std::vector<ParamTensor> tensors_;
  size_t total_ = 0;
};

}  // namespace lattice
