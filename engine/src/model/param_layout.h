// Where every parameter of one model chunk lives in its flat arena. A chunk is the part of the
// model one rank holds for one (virtual) pipeline stage, split over tensor-parallel ranks
// (ModelShard). Layer-major order (embeddings, the chunk's layers, final norm) keeps every
// layer contiguous, so data-parallel buckets fill in backward order. Names are Megatron-core's
// global names (`decoder.layers.3.self_attention.linear_qkv.weight`), and each tensor records
// which slice of the global tensor it holds, so checkpoints and tests can reassemble it.
// The QKV weight is in Megatron's grouped layout: query group g's rows hold its NH/G query heads,
// then its key head, then its value head ((NH/G + 2) * HS rows; GPT-2's per-head [q|k|v] is G =
// NH), so a contiguous row range is a set of whole groups. The layer's tensors depend on the
// architecture (ModelConfig: norm biases, linear biases, SwiGLU's (2, F, C) FC1, the untied
// output_layer), so code finds them through LayerParams and the index accessors.
// Note [LoRA]: with ModelConfig::lora_rank > 0 each layer ends with its adapters (A (r, in),
// B (out, r) per target linear, Megatron-Bridge's names `...linear_qkv.adapter.linear_in.weight`
// for A and `.linear_out.weight` for B) and every other tensor is `frozen`. That one flag is the
// whole mechanism: the model makes no gradient for a frozen tensor (null gradient pointers:
// grad_layer, grad_at), the optimizer's pieces (optim/optimizer_shard.h) skip it (no moments, no
// update, not in the gradient norm) and a LoRA checkpoint stores the trainable tensors alone.
// The gradient arena holds the trained tensors alone (ParamTensor::grad_offset, grad_numel()),
// each on a 16-element boundary as in the parameter arena, so a run of trained tensors has the
// same relative offsets in both; a vision tower keeps its whole block at its own offsets (its
// code addresses both arenas alike). The data-parallel buckets never mix frozen and trained
// tensors (split_buckets, optim/grad_buckets.h) and the reducer skips the frozen ones, so a
// trained bucket is one range of each arena and only the adapters are reduced, one bucket per
// layer's run of them (docs/lora.md).
// Note [MoE layout]: an MoE layer (ModelConfig::is_moe_layer) has the dense layer's attention and
// norms, then instead of linear_fc1/linear_fc2 Megatron's SequentialMLP names:
// `mlp.router.weight` (E, C), then per expert e `mlp.experts.local_experts.e.linear_fc1.weight`
// (Fm', C) [.bias], `...linear_fc2.weight` (C, Fm) [.bias]: one tensor per expert, so a
// checkpoint names every expert as Megatron's does. Expert parallelism (ModelShard::ep_size)
// gives each rank a contiguous range of E / EP experts, still named by their global numbers
// (ParamLayout::expert takes the local index). Under tensor parallelism (expert TP = TP,
// Megatron's default) each expert's fc1 is split by rows and fc2 by columns as the dense MLP's;
// the router and fc2's bias are replicated, and their gradients are whole on every TP rank even
// with sequence parallelism (the MoE layer runs on the gathered rows: Note [MoE layer]). With
// expert TP 1 under TP (ModelShard::experts_whole) every expert is whole on its rank and the
// router's gradient is partial per TP rank (each routes its own rows), summed over TP. With an
// expert TP e between (ModelShard::moe_row_parts > 1) each expert is split over the e ranks of
// its expert-TP group as over TP (ModelShard::expert_tp_rank's slice), fc2's bias replicated
// there (counted in the norm by expert-TP rank 0), and the router's gradient is partial per
// group (its expert-TP rank 0 writes it), summed over TP.
// Note [vision tensors]: a vision-language model's pre chunk (ModelConfig::has_vision) holds
// the vision tower's tensors first, [0, vision_end_index()), before the word embedding, with
// HF CLIP's and LLaVA's names (`vision_model.encoder.layers.0.mlp.fc1.weight`,
// `multi_modal_projector.linear_1.weight`; vision_tensors()), split over the TP group as
// Megatron's LLaVA splits its vision model: qkv_proj and mlp.fc1 by output rows (whole heads),
// out_proj and mlp.fc2 by input columns, the projector's linear_1 by rows and linear_2 by
// columns (Note [tower tensor parallelism] in model/vision_encoder.cpp); the embeddings, the
// LayerNorms and the row-split linears' biases are whole on every TP rank. Each TP rank runs its
// share on all the micro-batch's images, so the whole tensors' gradients are whole and equal
// there (no reduction over TP). VisionEncoder indexes them in the same order and at the same
// offsets (the tower's tensors laid out from offset 0 by add()), so the tower runs straight on
// the model's arenas. Frozen: the encoder (not the projector)
// with --freeze-ViT or LoRA, the language model with --freeze-LM.
// LoRA under tensor parallelism: a column-parallel target (qkv, fc1) has A replicated and B
// split by output rows like W; a row-parallel one (proj, fc2) has A split by input columns like
// W and B replicated. The replicated half's gradient is a partial sum per TP rank
// (tp_partial_grad).
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
  // Context parallelism (the model's activations only: weights are whole on every CP rank):
  // this rank holds rows cp_split of each sequence (parallel/context_split.h).
  int cp_rank = 0, cp_size = 1;
  // Expert parallelism (Note [MoE layout]): this rank holds experts [ep_rank E/ep_size,
  // (ep_rank + 1) E/ep_size) of every MoE layer; the rest of the model is whole on every EP rank.
  int ep_rank = 0, ep_size = 1;
  // Expert tensor parallelism (--expert-tensor-parallel-size): 0, the default, splits each
  // expert over the TP ranks (expert TP = TP); 1 under TP > 1 keeps every expert whole and the
  // MoE layer runs on this rank's N / tp_size rows (Note [expert tensor parallelism 1] in
  // model/gpt_moe.cpp); a divisor e of tp_size between splits each expert over the e
  // consecutive TP ranks of this rank's expert-TP group, which routes N e / tp_size rows (Note
  // [expert tensor parallelism e]). Sizes that do not divide tp_size are not laid out.
  int etp_size = 0;

  int expert_tp_size() const { return etp_size > 0 ? etp_size : tp_size; }
  // This rank's place in its expert-TP group (the TP ranks [tp_rank - it, + expert_tp_size)).
  int expert_tp_rank() const { return tp_rank % expert_tp_size(); }
  // The parts a TP group's rows are routed in: one per expert-TP group (1 at expert TP = TP).
  int moe_row_parts() const { return expert_tp_size() < tp_size ? tp_size / expert_tp_size() : 1; }
  // The MoE layers' rows and experts are split as described for etp_size 1 under TP.
  bool experts_whole() const { return expert_tp_size() == 1 && tp_size > 1; }
  // The experts' grid differs from the dense one: their gradients are summed over the
  // expert-data group (ParamTensor::expert_parallel).
  bool expert_grid() const { return ep_size > 1 || expert_tp_size() != tp_size; }

  int num_layers(const ModelConfig& c) const {
    return (layer_end < 0 ? c.num_layers : layer_end) - layer_begin;
  }
};

struct ParamTensor {
  std::string name;            // global name
  std::vector<int64_t> shape;  // this rank's shape
  size_t offset = 0;           // in elements from the arena's start
  size_t numel = 0;
  // In elements from the gradient arena's start (Note [LoRA]): offset when nothing is frozen;
  // kNoGradient for a frozen tensor of the language model, which has no gradient there.
  size_t grad_offset = 0;
  static constexpr size_t kNoGradient = static_cast<size_t>(-1);
  bool decay = true;  // weight decay applies (false for biases, norms)
  // Slice of the global tensor: the global shape, and along split_dim (-1: none) this rank
  // holds [split_begin, split_begin + shape[split_dim]).
  std::vector<int64_t> global_shape;
  int split_dim = -1;
  int64_t split_begin = 0;
  // Counted once in the global gradient norm: false for copies that another rank also holds
  // (tensor-parallel replicas on tp_rank > 0, the last stage's tied word embedding).
  bool counts_in_norm = true;
  // Its gradient is partial per tensor-parallel rank and is summed over the TP group: with
  // sequence parallelism the LayerNorms and row-parallel biases (they see only their sequence
  // slice); LoRA's replicated adapter halves (Note [LoRA]).
  bool sequence_parallel_grad = false;
  // Not trained: no gradient, no optimizer state (Note [LoRA]: the base model under LoRA).
  bool frozen = false;
  // One of this rank's experts on an expert grid of its own (ModelShard::expert_grid: EP > 1 or
  // expert TP other than TP): its gradient is summed over the expert-data group, not the
  // data-parallel one, and the gradient norm sums its square over the expert-parallel group
  // (every expert counted once).
  bool expert_parallel = false;
};

// The word embedding and an untied output layer: their rows are the padded vocabulary,
// padding rows beyond the tokenizer's (Note [vocabulary padding rows], hf_tensors.cpp).
bool is_vocabulary_table(const std::string& name);

// Between a tensor's slice (t.numel, row-major in t.shape) and its global tensor (row-major in
// t.global_shape): the one place that knows how a split along split_dim lays out. Used to draw
// a slice (init_weights), take one from a whole file (--load-hf) and put one back (gathering
// the whole model).
template <typename T>
void slice_from_global(const ParamTensor& t, const T* global, T* slice);
template <typename T>
void slice_to_global(const ParamTensor& t, const T* slice, T* global);

// Pointers into one arena for one transformer layer; t = tp_size, shapes local, W = qkv_width,
// F' = 2F with SwiGLU (gate and up), else F. A tensor the architecture has not is null: the
// norms' biases with RMSNorm, the linear biases with --disable-bias-linear (QKV's kept by
// --add-qkv-bias).
template <typename T>
struct LayerParams {
  T* ln1_w;   // (C)
  T* ln1_b;   // (C) or null
  T* qkv_w;   // (W/t, C), grouped [q..q|k|v] per query group
  T* qkv_b;   // (W/t) or null
  T* proj_w;  // (C, C/t)
  T* proj_b;  // (C) or null
  T* ln2_w;   // (C)
  T* ln2_b;   // (C) or null
  T* fc1_w;   // (F'/t, C)
  T* fc1_b;   // (F'/t) or null
  T* fc2_w;   // (C, F/t)
  T* fc2_b;   // (C) or null
  // LoRA adapters (Note [LoRA]; r = lora_rank), null where the linear is not a target.
  T* qkv_la;   // (r, C) A
  T* qkv_lb;   // (W/t, r) B
  T* proj_la;  // (r, C/t)
  T* proj_lb;  // (C, r)
  T* fc1_la;   // (r, C)
  T* fc1_lb;   // (F'/t, r)
  T* fc2_la;   // (r, F/t)
  T* fc2_lb;   // (C, r)
  // An MoE layer (Note [MoE layout]): the router (E, C); fc1_* and fc2_* are null there and
  // each expert's are ParamLayout::expert's. Null in a dense layer.
  T* router_w;
};

// One expert of an MoE layer (Fm = moe_ffn(), Fm' = 2 Fm with SwiGLU; t = the expert TP size,
// ModelShard::expert_tp_size: tp_size by default, 1 when ModelShard::experts_whole).
template <typename T>
struct ExpertParams {
  T* fc1_w;  // (Fm'/t, C)
  T* fc1_b;  // (Fm'/t) or null
  T* fc2_w;  // (C, Fm/t)
  T* fc2_b;  // (C) or null
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config, const ModelShard& shard = {});

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t total_numel() const { return total_; }
  // Elements of the gradient arena (Note [LoRA]): total_numel() when nothing is frozen.
  size_t grad_numel() const { return grad_total_; }
  const ParamTensor* find(const std::string& name) const;
  const ModelShard& shard() const { return shard_; }

  // Indices into tensors(); -1 where this chunk does not hold the tensor. word_embedding is
  // the input embedding on a pre chunk and the tied LM head's copy on a post-only chunk;
  // output is the LM head's weight on a post chunk: output_layer.weight when untied, else the
  // word embedding.
  int word_embedding_index() const { return word_embedding_; }
  int position_embedding_index() const { return position_embedding_; }
  // Layer l's tensors are [layer_index(l), layer_end_index(l)); an MoE layer has more.
  int layer_index(int local_layer) const { return layer_first_[local_layer]; }
  int layer_end_index(int local_layer) const { return layer_first_[local_layer + 1]; }
  // Whether local layer l is an MoE layer (ModelConfig::is_moe_layer of its global index).
  bool is_moe(int local_layer) const { return moe_[local_layer]; }
  // This rank's expert e (0 <= e < E / ep_size; global number ep_rank E / ep_size + e) of MoE
  // layer l (Note [MoE layout]).
  template <typename T>
  ExpertParams<T> expert(T* arena, int local_layer, int e) const {
    return expert_of(arena, local_layer, e, false);
  }
  template <typename T>
  ExpertParams<T> grad_expert(T* grads, int local_layer, int e) const {
    return expert_of(grads, local_layer, e, true);
  }
  // The vision tower's tensors (Note [vision tensors]): [0, this), 0 without one.
  int vision_end_index() const { return vision_end_; }
  // The tower's tensors for `v` on TP rank `tp_rank` of `tp_size`, laid out from offset 0 as a
  // pre chunk lays them out.
  static std::vector<ParamTensor> vision_tensors(const VisionConfig& v, int tp_rank = 0,
                                                 int tp_size = 1);
  // The elements they take of a pre chunk's arena on each TP rank (the next tensor starts
  // there): their sizes and alignment gaps.
  static size_t vision_arena_numel(const VisionConfig& v, int tp_size = 1);
  // The tensors before the first layer (the tower and the embeddings of a pre chunk): [0, this).
  int pre_tensors_end() const { return first_layer_; }
  int final_norm_index() const { return final_norm_; }
  int final_norm_bias_index() const { return final_norm_bias_; }
  int output_index() const { return output_; }

  template <typename T>
  LayerParams<T> layer(T* arena, int local_layer) const {
    return layer_of(arena, local_layer, false);
  }
  // The gradients' pointers: null for frozen tensors too (Note [LoRA]).
  template <typename T>
  LayerParams<T> grad_layer(T* grads, int local_layer) const {
    return layer_of(grads, local_layer, true);
  }
  // The tensor at `arena + offset` of index i, or null for index -1.
  template <typename T>
  T* at(T* arena, int index) const {
    return index < 0 ? nullptr : arena + tensors_[index].offset;
  }
  // Its gradient: null for index -1 and for a frozen tensor.
  template <typename T>
  T* grad_at(T* grads, int index) const {
    return index < 0 || tensors_[index].frozen ? nullptr : grads + tensors_[index].grad_offset;
  }
  // Whether any tensor is frozen (a LoRA layout), and the trainable elements.
  bool has_frozen() const { return has_frozen_; }
  size_t trainable_numel() const;

 private:
  // split_dim -1: replicated over TP; 0 / 1: rows / columns split evenly over TP. parts > 0:
  // over that many ranks instead, this rank being `part` (an expert over its expert-TP group).
  void add(std::string name, std::vector<int64_t> global_shape, bool decay, int split_dim,
           bool sequence_parallel_grad = false, int parts = 0, int part = 0);
  // LayerParams' members in order.
  enum Slot {
    kLn1W,
    kLn1B,
    kQkvW,
    kQkvB,
    kProjW,
    kProjB,
    kLn2W,
    kLn2B,
    kFc1W,
    kFc1B,
    kFc2W,
    kFc2B,
    kQkvLA,
    kQkvLB,
    kProjLA,
    kProjLB,
    kFc1LA,
    kFc1LB,
    kFc2LA,
    kFc2LB,
    kRouterW
  };
  static constexpr int kSlots = 21;
  template <typename T>
  LayerParams<T> layer_of(T* arena, int local_layer, bool grads) const {
    T* p[kSlots];
    const int* slot = slot_[moe_[local_layer] ? 1 : 0];
    for (int i = 0; i < kSlots; i++) {
      const ParamTensor* t = slot[i] < 0 ? nullptr : &tensors_[layer_index(local_layer) + slot[i]];
      p[i] = !t || (grads && t->frozen) ? nullptr : arena + (grads ? t->grad_offset : t->offset);
    }
    return {p[0],  p[1],  p[2],  p[3],  p[4],  p[5],  p[6],  p[7],  p[8],  p[9], p[10],
            p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20]};
  }
  template <typename T>
  ExpertParams<T> expert_of(T* arena, int local_layer, int e, bool grads) const {
    // The experts follow the router, per_expert_ tensors each: fc1 weight [, bias], fc2 weight
    // [, bias].
    const int first = layer_index(local_layer) + slot_[1][kRouterW] + 1 + e * per_expert_;
    auto at = [&](int i) {
      const ParamTensor& t = tensors_[first + i];
      return grads && t.frozen ? nullptr : arena + (grads ? t.grad_offset : t.offset);
    };
    const bool bias = per_expert_ == 4;
    return {at(0), bias ? at(1) : nullptr, at(bias ? 2 : 1), bias ? at(3) : nullptr};
  }
  ParamLayout() = default;
  // Note [vision tensors]: appends the tower's tensors (replicated over TP).
  void add_vision(const VisionConfig& v);
  ModelShard shard_;
  std::vector<ParamTensor> tensors_;
  size_t total_ = 0;
  int word_embedding_ = -1, position_embedding_ = -1, first_layer_ = 0, per_expert_ = 0;
  int vision_end_ = 0;
  std::vector<int> layer_first_;  // (L + 1) each local layer's first tensor, then the end
  std::vector<bool> moe_;         // (L) MoE layers
  int final_norm_ = -1, final_norm_bias_ = -1, output_ = -1;
  bool has_frozen_ = false;
  size_t grad_total_ = 0;
  // Each LayerParams member's index within a layer's tensors, or -1: [0] dense layers, [1] MoE.
  int slot_[2][kSlots];
};

}  // namespace lattice
