// The planner's figures for a LLaVA-style vision tower (issue 27): its parameter count, the
// activation buffers VisionEncoder keeps for one micro-batch's images, and its FLOPs per image,
// counted from the same shapes as model/vision_encoder.cpp (test_planner_vision checks them
// against a VisionEncoder on the CPU device). Non-goals: the tower's scratch buffers, the
// images' input buffer, tensor or pipeline parallelism of the tower (it has none).
//
// Note [vision tower in the plan]: the training wiring puts the tower on the first pipeline
// stage (the pre chunk), whole on every TP rank (each TP rank runs it; its gradients are whole
// there), and trains its parameters with the language model's replicated tensors: the stage's
// weights, grads and optimizer categories count them (the distributed optimizer shards them over
// DP x CP like the rest). Per micro-batch the encoder runs on micro-batch x 1 images and keeps
// its activations until that micro-batch's backward, so they are alive as long as the first
// model chunk's (pipeline/schedule.h chunk_peaks). The projected image tokens replace Np of the
// --seq-length positions: the language model's activations and FLOPs are unchanged. The tower
// computes in fp32 (double in an fp64 run); 16-bit runs with a tower are refused by training.
#include <algorithm>

#include "lattice/plan.h"
#include "model/param_layout.h"

namespace lattice {

namespace {

// The tower's shapes (vision_encoder.cpp's names): Cin channels, Np patches of K = Cin P P
// pixels, T = Np (+ 1 class token) rows of width C, NH heads, MLP width F, L layers of which R
// run, H the language model's width.
struct VisionShape {
  double Cin, Np, K, T, C, NH, F, H, L, R;
};
VisionShape vision_shape(const VisionConfig& v) {
  const double P = v.patch_dim;
  return {static_cast<double>(v.num_channels),
          static_cast<double>(v.patches()),
          v.num_channels * P * P,
          static_cast<double>(v.seq_length()),
          static_cast<double>(v.hidden_size),
          static_cast<double>(v.num_attention_heads),
          static_cast<double>(v.ffn()),
          static_cast<double>(v.lm_hidden_size),
          static_cast<double>(v.num_layers),
          static_cast<double>(v.layers_run())};
}

// The elements the tower adds to the pre chunk's arena (Note [vision tensors] in
// model/param_layout.h): its tensors and their alignment gaps, as the memory counts them.
int64_t vision_parameters(const VisionConfig& v) {
  return static_cast<int64_t>(ParamLayout::vision_arena_numel(v));
}

// Elements of VisionEncoder::allocate's activation buffers for B images (M = B Np patch rows,
// N = B T encoder rows, R layers run): the patches (M, K), the embeddings (N, C) and with a
// class token the patch GEMM's own output (M, C), the pre-LayerNorm's mean and rstd (2N), the
// R + 1 hidden states (N, C); per layer run ln1, atty, res_mid, ln2 (N, C), qkv (N, 3C), the two
// LayerNorms' statistics (2 x 2N), the log-sum-exps (N, NH), fc1 and its activation (N, F); with
// a class token the selected patch rows (M, C); the projector's three (M, H).
double vision_activation_elements(const VisionShape& s, double B) {
  const double M = B * s.Np, N = B * s.T, R = s.R;
  const bool cls = s.T > s.Np;
  return M * s.K + N * s.C + (cls ? M * s.C : 0) + 2 * N + (R + 1) * N * s.C +
         R * (N * (4 * s.C + 3 * s.C + s.NH + 2 * s.F) + 4 * N) + (cls ? M * s.C : 0) + 3 * M * s.H;
}

// Forward FLOPs of one image: the patch GEMM 2 Np K C; per layer run QKV 2 T C 3C, out_proj
// 2 T C C, fc1 and fc2 2 T C F each, attention 4 T^2 C (scores and the weighted sum); the
// projector 2 Np C H + 2 Np H H. Norms, activations and biases are left out, as in Megatron's
// count of the language model.
double vision_forward_flops(const VisionShape& s) {
  const double layer = 2 * s.T * s.C * (3 * s.C + s.C + 2 * s.F) + 4 * s.T * s.T * s.C;
  return 2 * s.Np * s.K * s.C + s.R * layer + 2 * s.Np * s.C * s.H + 2 * s.Np * s.H * s.H;
}

}  // namespace

bool has_vision_tower(const TrainOptions& o) {
  return !o.vision_model_type.empty();
}

VisionEstimate estimate_vision(const TrainOptions& o) {
  VisionEstimate e;
  if (!has_vision_tower(o)) return e;
  const VisionConfig v = o.vision_config();
  const VisionShape s = vision_shape(v);
  const double element = o.fp64 ? 8 : 4;  // Note [vision tower in the plan]: fp32 compute
  constexpr int kImagesPerSample = 1;
  e.parameters = vision_parameters(v);
  e.layers_run = v.layers_run();
  e.images_per_micro_batch = o.micro_batch_size * kImagesPerSample;
  e.activation_bytes_per_micro_batch =
      static_cast<size_t>(element * vision_activation_elements(s, e.images_per_micro_batch));
  e.forward_flops_per_image = vision_forward_flops(s);
  e.flops_per_iteration =
      3 * e.forward_flops_per_image * static_cast<double>(o.global_batch_size) * kImagesPerSample;
  return e;
}

}  // namespace lattice
