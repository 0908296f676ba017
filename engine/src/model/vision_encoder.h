// VisionEncoder: the vision tower of a LLaVA-style model (issue 27) over a device's op list: a
// CLIP-style ViT (patch embedding as im2col + GEMM, class token, learned positions, the
// pre-LayerNorm, pre-norm transformer layers with bidirectional attention and a quick_gelu MLP)
// and LLaVA-1.5's MLP projector (Linear - exact GELU - Linear) into the language model's width.
// Forward and backward of one batch of images, parameter gradients accumulated; on its own
// arenas (tests) or on a GptModel's (which splices the projected tokens into the language
// model's sequence: Note [image rows] in gpt_vision.cpp). In fp32, fp64, bf16 or fp16: a 16-bit
// tower keeps its activations in A and its gradients, LayerNorm statistics and the attention's
// log-sum-exps in G, as the language model does (Note [tower precision] in gpt_vision.cpp).
// Under tensor parallelism each rank runs its share of the heads, the MLP's width and the
// projector's width (Note [tower tensor parallelism] in vision_encoder.cpp). Non-goal: dropout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "device/device.h"
#include "device/device_blocks.h"
#include "device/ops.h"
#include "lattice/status.h"
#include "lattice/vision_config.h"
#include "model/param_layout.h"

namespace lattice {

// One layer's parameters (pointers into an arena of parameters or gradients).
template <typename X>
struct VisionLayerParams {
  X* ln1_w;   // (C)
  X* ln1_b;   // (C)
  X* qkv_w;   // (3C, C), rows in kernels.h's grouped layout: head h's [q | k | v], HS rows each
  X* qkv_b;   // (3C)
  X* proj_w;  // (C, C)
  X* proj_b;  // (C)
  X* ln2_w;   // (C)
  X* ln2_b;   // (C)
  X* fc1_w;   // (F, C)
  X* fc1_b;   // (F)
  X* fc2_w;   // (C, F)
  X* fc2_b;   // (C)
};

// One rank's place in a tensor-parallel group (Note [tower tensor parallelism] in
// vision_encoder.cpp): `sum` adds `count` elements of device memory over the group in place
// (GptModel's tensor-parallel all-reduce); a group of one needs none.
template <typename A>
struct TowerParallel {
  int rank = 0, size = 1;
  std::function<void(A* data, size_t count)> sum;
};

// A: the compute type (an op list with the block attention and the vision ops); G = accum_t<A>.
template <typename A>
class VisionEncoder {
 public:
  using G = accum_t<A>;
  // The tower for batches of at most `batch` images on `device` (its memory is sized for them).
  // Errors: a config that validate() refuses, a device whose op list for A lacks the ops, out of
  // memory, a TP size that does not divide the heads, the MLP's width or the projector's.
  // own_params false: the parameters and gradients are another arena's (a GptModel's pre chunk,
  // Note [vision tensors] in param_layout.h), given by bind() before the first forward; true
  // (tests) only where A is G. `tp`: this rank's share of the tower (whole by default).
  static Result<std::unique_ptr<VisionEncoder>> create(const VisionConfig& config, int batch,
                                                       Device& device, bool own_params = true,
                                                       TowerParallel<A> tp = {});
  // Runs on `params` and accumulates gradients into `grads`, device memory laid out as tensors()
  // (a frozen encoder's gradients there are never written: backward(..., false)).
  void bind(A* params, G* grads) {
    params_ = params;
    grads_ = grads;
  }

  const VisionConfig& config() const { return config_; }
  // Every tensor, HF CLIP / LLaVA names ("vision_model.encoder.layers.0.mlp.fc1.weight",
  // "multi_modal_projector.linear_1.weight"), this rank's shares, offsets into params() and
  // grads().
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Elements of the tower's arena: its tensors and their 16-element alignment gaps
  // (ParamLayout::vision_arena_numel).
  size_t num_params() const { return num_params_; }
  A* params() { return params_; }  // (num_params) device memory
  G* grads() { return grads_; }    // (num_params) device memory
  void zero_grads();
  // normal(0, init_method_std) matrices and embeddings, zero biases, unit norm weights, from
  // `seed` (as init_weights.cpp's rule; output projections not rescaled). Waits.
  Status init_weights(uint64_t seed);

  int max_images() const { return max_images_; }  // the create() batch
  int images() const { return B_; }               // B: the last forward's (max_images before)
  int tokens() const { return B_ * Np_; }         // rows of the output: B images x Np patches
  // out (B, Np, H) = projector(encoder(images (B, Cin, img_h, img_w))) for the first B = count
  // images (1 <= count <= max_images; -1: max_images), device memory that stays valid until the
  // next forward; the activations are kept for backward(), which runs on the same B. A smaller
  // batch costs less (every op runs on B images) in the same memory.
  const A* forward(const A* images, int count = -1);
  // Given d_out (B, Np, H), B the last forward's: parameter gradients += (layers past
  // --vision-select-layer get none); d_images (B, Cin, img_h, img_w), when non-null, written.
  // encoder false (a frozen encoder, --freeze-ViT): the projector's gradients alone, the
  // encoder's left untouched and d_images not written.
  void backward(const A* d_out, A* d_images, bool encoder = true);

 private:
  VisionEncoder(const VisionConfig& config, int batch, Device& device, Ops<A>& ops,
                TowerParallel<A> tp);
  // Sums a partial (rows, width) result over the TP group (nothing in a group of one).
  void tp_sum(A* data, size_t count) {
    if (tp_.size > 1) tp_.sum(data, count);
  }
  // The bias a row-split linear adds: TP rank 0's alone, so that it enters the sum once.
  const A* row_split_bias(const A* bias) const { return tp_.rank == 0 ? bias : nullptr; }
  Status allocate(bool own_params);
  template <typename X>
  X* tensor(X* arena, int index) const {
    return index < 0 ? nullptr : arena + tensors_[index].offset;
  }
  template <typename X>
  VisionLayerParams<X> layer(X* arena, int l) const;
  void layer_forward(int l);
  void layer_backward(int l);
  void projector_forward();
  void projector_backward(const A* d_out, bool encoder);
  void attention_forward(int l);
  void attention_backward(int l, A* d_qkv, const A* d_atty);
  Stream& compute() { return device_.compute(); }

  VisionConfig config_;
  Device& device_;
  Ops<A>& ops_;
  int max_images_;  // the batch the buffers are sized for
  int B_;           // the images of the last forward (max_images_ before the first)
  TowerParallel<A> tp_;
  // This rank's shares (Note [tower tensor parallelism]): NHt = NH / TP heads of HS, so Ct =
  // NHt HS attention columns, Ft = F / TP MLP columns, Ht = H / TP projector columns.
  int Cin_, Np_, T_, C_, NH_, HS_, F_, H_, K_, L_, Lrun_, NHt_, Ct_, Ft_, Ht_;
  size_t N_;  // B T rows of the encoder (the buffers below hold max_images T rows)

  std::vector<ParamTensor> tensors_;
  size_t num_params_ = 0;
  // Indices into tensors_: -1 where absent.
  int patch_w_ = -1, patch_b_ = -1, cls_ = -1, pos_ = -1, pre_w_ = -1, pre_b_ = -1;
  int first_layer_ = -1, proj1_w_ = -1, proj1_b_ = -1, proj2_w_ = -1, proj2_b_ = -1;

  DeviceBlocks blocks_;
  A* params_ = nullptr;  // (num_params)
  G* grads_ = nullptr;   // (num_params)
  // Activations of the last forward.
  const A* images_ = nullptr;  // (B, Cin, img_h, img_w) the caller's
  A* cols_ = nullptr;          // (B Np, K) the patches, K = Cin P P
  A* patch_out_ = nullptr;     // (B Np, C) the patch GEMM's output (with a class token)
  A* x0_ = nullptr;            // (B, T, C) embeddings: patches (and class) + positions
  G* pre_mean_ = nullptr;      // (N)
  G* pre_rstd_ = nullptr;      // (N)
  A* hidden_ = nullptr;        // (Lrun + 1, B, T, C) layer l's input; [Lrun] the selected state
  A* ln1_ = nullptr;           // (Lrun, N, C)
  G* ln1_stats_ = nullptr;     // (Lrun, 2, N) mean, rstd
  A* qkv_ = nullptr;           // (Lrun, N, 3 Ct) this rank's heads
  A* atty_ = nullptr;          // (Lrun, N, Ct)
  G* lse_ = nullptr;           // (Lrun, B, NHt, T) the attention's log-sum-exp
  A* res_mid_ = nullptr;       // (Lrun, N, C)
  A* ln2_ = nullptr;           // (Lrun, N, C)
  G* ln2_stats_ = nullptr;     // (Lrun, 2, N)
  A* fc1_ = nullptr;           // (Lrun, N, Ft) before the activation
  A* act_ = nullptr;           // (Lrun, N, Ft)
  A* features_ = nullptr;      // (B Np, C) the selected state's patch rows (in hidden_ without
                               // a class token, where the last forward's B puts them)
  A* p1_ = nullptr;            // (B Np, Ht) the projector's first GEMM
  A* p1_act_ = nullptr;        // (B Np, Ht)
  A* out_ = nullptr;           // (B Np, H) whole (summed over TP)
  // Scratch of both directions.
  A* kv_ = nullptr;           // (N, 2 Ct) the keys and values packed (attention_kv_pack)
  G* d_kv_ = nullptr;         // (N, 2 Ct)
  G* delta_ = nullptr;        // (B, NHt, T)
  G* workspace_ = nullptr;    // attention_block_workspace_elems
  G* att_acc_ = nullptr;      // (N, Ct) 16-bit A: the attention's output merged in G
  G* d_qkv_acc_ = nullptr;    // (N, 3 Ct) 16-bit A: the attention's input gradient in G
  int32_t* q_pos_ = nullptr;  // (T) all T - 1: every key visible (Note [bidirectional attention])
  int32_t* k_pos_ = nullptr;  // (T) 0 .. T - 1
  A* d_h_ = nullptr;          // (N, C) the residual stream's gradient
  A* d_c_ = nullptr;          // (N, C) a LayerNorm input's gradient / scratch
  A* d_c2_ = nullptr;         // (N, C) scratch
  A* d_f_ = nullptr;          // (N, max(Ft, 3 Ct)) scratch
  A* d_p_ = nullptr;          // (B Np, max(Ht, K)) scratch
};

}  // namespace lattice
