// Where every parameter of one model chunk lives in its flat arena. A chunk is the part of the
// model one rank holds for one (virtual) pipeline stage, split over tensor-parallel ranks
// (ModelShard). Layer-major order (embeddings, the chunk's layers, final norm) keeps every
// layer contiguous, so data-parallel buckets fill in backward order. Names are Megatron-core's
// global names (`decoder.layers.3.self_attention.linear_qkv.weight`), and each tensor records
// which slice of the global tensor it holds, so checkpoints and tests can reassemble it.
// The QKV weight is in Megatron's per-head layout: rows [h*3*HS, (h+1)*3*HS) hold head h's
// q, k, v, so a contiguous row range is a set of whole heads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/model_config.h"

namespace lattice {

// Which part of the model a chunk holds. The default is the whole model on one rank.
struct ModelShard {
  int tp_rank = 0, tp_size = 1;
  int layer_begin = 0, layer_end = -1;  // global layers [begin, end); -1: num_layers
  bool pre = true;                      // word + position embeddings (first virtual stage)
  bool post = true;                     // final LayerNorm + LM head (last virtual stage)
  bool sequence_parallel = false;

  int num_layers(const ModelConfig& c) const {
    return (layer_end < 0 ? c.num_layers : layer_end) - layer_begin;
  }
};

struct ParamTensor {
  std::string name;            // global name
  std::vector<int64_t> shape;  // this rank's shape
  size_t offset = 0;           // in elements from the arena's start
  size_t numel = 0;
  bool decay = true;  // weight decay applies (false for biases, norms)
  // Slice of the global tensor: the global shape, and along split_dim (-1: none) this rank
  // holds [split_begin, split_begin + shape[split_dim]).
  std::vector<int64_t> global_shape;
  int split_dim = -1;
  int64_t split_begin = 0;
  // Counted once in the global gradient norm: false for copies that another rank also holds
  // (tensor-parallel replicas on tp_rank > 0, the last stage's tied word embedding).
  bool counts_in_norm = true;
  // Its gradient is partial per tensor-parallel rank (sequence parallelism: LayerNorms and
  // row-parallel biases see only their sequence slice) and is summed over the TP group.
  bool sequence_parallel_grad = false;
};

// Between a tensor's slice (t.numel, row-major in t.shape) and its global tensor (row-major in
// t.global_shape): the one place that knows how a split along split_dim lays out. Used to draw
// a slice (init_weights), take one from a whole file (--load-hf) and put one back (gathering
// the whole model).
template <typename T>
void slice_from_global(const ParamTensor& t, const T* global, T* slice);
template <typename T>
void slice_to_global(const ParamTensor& t, const T* slice, T* global);

// Pointers into one arena for one transformer layer; t = tp_size, shapes local.
template <typename T>
struct LayerParams {
  T* ln1_w;   // (C)
  T* ln1_b;   // (C)
  T* qkv_w;   // (3C/t, C), per-head [q|k|v]
  T* qkv_b;   // (3C/t)
  T* proj_w;  // (C, C/t)
  T* proj_b;  // (C)
  T* ln2_w;   // (C)
  T* ln2_b;   // (C)
  T* fc1_w;   // (F/t, C)
  T* fc1_b;   // (F/t)
  T* fc2_w;   // (C, F/t)
  T* fc2_b;   // (C)
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config, const ModelShard& shard = {});

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t total_numel() const { return total_; }
  const ParamTensor* find(const std::string& name) const;
  const ModelShard& shard() const { return shard_; }

  // Indices into tensors(); -1 where this chunk does not hold the tensor. word_embedding is
  // the input embedding on a pre chunk and the tied LM head's copy on a post-only chunk.
  static constexpr int kPerLayer = 12;
  int word_embedding_index() const { return word_embedding_; }
  int position_embedding_index() const { return position_embedding_; }
  int layer_index(int local_layer) const { return first_layer_ + local_layer * kPerLayer; }
  int final_norm_index() const { return final_norm_; }

  template <typename T>
  LayerParams<T> layer(T* arena, int local_layer) const {
    T* p[kPerLayer];
    for (int i = 0; i < kPerLayer; i++)
      p[i] = arena + tensors_[layer_index(local_layer) + i].offset;
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
  }

 private:
  // split_dim -1: replicated over TP; 0 / 1: rows / columns split evenly over TP.
  void add(std::string name, std::vector<int64_t> global_shape, bool decay, int split_dim,
           bool sequence_parallel_grad = false);
  ModelShard shard_;
  std::vector<ParamTensor> tensors_;
  size_t total_ = 0;
  int word_embedding_ = -1, position_embedding_ = -1, first_layer_ = 0, final_norm_ = -1;
};

}  // namespace lattice
