// The planner's figures for a LLaVA-style vision tower (issue 27): its parameter count, what of
// it trains, the activation buffers VisionEncoder keeps and the images' input buffers, and its
// FLOPs per image, counted from the same shapes as model/vision_encoder.cpp (test_planner_vision
// checks them against a VisionEncoder on the CPU device, test_parallel_memory against training).
// Its scratch (kWorkspace) too, beside MoE's dispatch buffers and the language model's own
// (Note [workspace in the plan] in memory_estimate.cpp). Non-goal: pipeline parallelism of the tower (it sits whole on the first stage).
//
// Note [vision tower in the plan]: the training wiring puts the tower on the first pipeline
// stage (the pre chunk), split over TP (Note [tower tensor parallelism] in
// model/vision_encoder.cpp: each TP rank holds and runs its share of the heads, the MLP and the
// projector, and the embeddings, LayerNorms and row-split biases whole), and trains its
// parameters with the language model's: the stage's
// weights and grads categories count them all (the tower keeps its block of the gradient arena
// whatever is frozen: Note [LoRA] in model/param_layout.h), the optimizer
// state the trained ones (the projector always, the encoder unless --freeze-ViT or LoRA; the
// distributed optimizer shards them over DP x CP like the rest). Under CP a rank's tower runs on
// its block of ceil(B / CP) of the micro-batch's images, the patches all-gathered over CP and
// their gradient reduce-scattered (Note [images under context parallelism] in
// model/gpt_vision.cpp). The encoder takes its
// activation buffers once: micro-batches in flight share them, a backward re-running the
// tower's forward when another micro-batch ran it since (Note [image rows] in
// model/gpt_vision.cpp); each micro-batch in flight holds its own images and row maps, alive as
// long as the first model chunk's (pipeline/schedule.h chunk_peaks). The projected image tokens
// replace Np of the --seq-length positions: the language model's activations and FLOPs are
// unchanged. The tower computes in the run's compute type (Note [tower precision] in
// model/gpt_vision.cpp): its activations take A's bytes, its statistics and log-sum-exps G's.
#include <algorithm>
#include <string>

#include "lattice/kernels.h"
#include "lattice/plan.h"
#include "model/param_layout.h"
#include "pipeline/schedule.h"

namespace lattice {

namespace {

// The tower's shapes (vision_encoder.cpp's names): Cin channels, Np patches of K = Cin P P
// pixels, T = Np (+ 1 class token) rows of width C, NH heads, MLP width F, L layers of which R
// run, H the language model's width; t the TP size, which splits the heads, F and H.
struct VisionShape {
  double Cin, Np, K, T, C, NH, F, H, L, R, t;
};
VisionShape vision_shape(const VisionConfig& v, int tp) {
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
          static_cast<double>(v.layers_run()),
          static_cast<double>(tp)};
}

// Bytes of the compute type A and of G = accum_t<A> (model/gpt.h).
struct TowerBytes {
  double a = 4, g = 4;
};

// Bytes of VisionEncoder::allocate's activation buffers on one TP rank for B images (M = B Np
// patch rows, N = B T encoder rows, R layers run; Ct = C / t, Ft = F / t, Ht = H / t its
// shares). In A: the patches (M, K), the embeddings (N, C) and with a class token the patch
// GEMM's own output (M, C), the R + 1 hidden states (N, C); per layer run ln1, res_mid, ln2
// (N, C), atty (N, Ct), qkv (N, 3 Ct), fc1 and its activation (N, Ft); with a class token the
// selected patch rows (M, C); the projector's first GEMM and its activation (M, Ht) and its
// output (M, H). In G: the pre-LayerNorm's mean and rstd (2N); per layer run the two
// LayerNorms' statistics (2 x 2N) and the log-sum-exps of the rank's heads (N, NH / t).
double vision_activation_bytes(const VisionShape& s, double B, TowerBytes e) {
  const double M = B * s.Np, N = B * s.T, R = s.R;
  const double Ct = s.C / s.t, Ft = s.F / s.t, Ht = s.H / s.t;
  const bool cls = s.T > s.Np;
  const double a = M * s.K + N * s.C + (cls ? M * s.C : 0) + (R + 1) * N * s.C +
                   R * N * (3 * s.C + 4 * Ct + 2 * Ft) + (cls ? M * s.C : 0) + M * (2 * Ht + s.H);
  const double g = 2 * N + R * (N * s.NH / s.t + 4 * N);
  return e.a * a + e.g * g;
}

// Bytes of the tower's scratch (kWorkspace) on one TP rank, once per model:
// VisionEncoder::allocate's for B images (M = B Np patch rows, N = B T encoder rows; Ct, Ft, Ht
// the rank's shares). In A: the attention's K and V (N, 2 Ct), the backward's (N, C) row
// gradients d_h, d_c, d_c2, (N, max(Ft, 3 Ct)) and (M, max(Ht, K)). In G: the keys' and values'
// gradient (N, 2 Ct), delta (N, NH / t), the block attention's workspace
// (kernels::attention_block_workspace_elems per thread on the CPU, none on CUDA)
// and, in 16 bits, the attention's merged output (N, Ct) and input gradient (N, 3 Ct). And the
// int32 positions (2T). `threads`: the CPU kernels' thread count.
double encoder_workspace_bytes(const VisionShape& s, double B, TowerBytes e, bool cuda,
                               double threads) {
  const double M = B * s.Np, N = B * s.T, HS = s.C / s.NH;
  const double Ct = s.C / s.t, Ft = s.F / s.t, Ht = s.H / s.t;
  const int T = static_cast<int>(s.T);
  const double attention =
      cuda ? 0 : threads * kernels::attention_block_workspace_elems(T, T, static_cast<int>(HS));
  const bool sixteen_bit = e.a < e.g;
  return e.a * (2 * N * Ct + 3 * N * s.C + N * std::max(Ft, 3 * Ct) + M * std::max(Ht, s.K)) +
         e.g * (2 * N * Ct + N * s.NH / s.t + attention + (sixteen_bit ? 4 * N * Ct : 0)) +
         sizeof(int32_t) * 2 * s.T;
}

// Forward FLOPs of one image by part: the patch GEMM 2 Np K C; per layer run QKV 2 T C 3C,
// out_proj 2 T C C, fc1 and fc2 2 T C F each, attention 4 T^2 C (scores and the weighted sum);
// the projector's two GEMMs 2 Np C H and 2 Np H H. Norms, activations and biases are left out,
// as in Megatron's count of the language model.
struct VisionFlops {
  double patch, layers, projector1, projector2;
  double forward() const { return patch + layers + projector1 + projector2; }
};
VisionFlops vision_forward_flops(const VisionShape& s) {
  const double layer = 2 * s.T * s.C * (3 * s.C + s.C + 2 * s.F) + 4 * s.T * s.T * s.C;
  return {2 * s.Np * s.K * s.C, s.R * layer, 2 * s.Np * s.C * s.H, 2 * s.Np * s.H * s.H};
}
// One TP rank's share (Note [tower tensor parallelism]): the layers and the projector split t
// ways, the patch GEMM whole on every rank.
VisionFlops rank_share(VisionFlops f, double t) {
  return {f.patch, f.layers / t, f.projector1 / t, f.projector2 / t};
}

// Forward and backward of one image as VisionEncoder::backward runs them: a GEMM's backward is
// twice its forward (input and weight gradients), the patch GEMM's its weight gradient alone
// (no image gradient); a frozen encoder runs no backward and the projector's first GEMM its
// weight gradient alone (projector_backward with encoder false).
double vision_training_flops(const VisionFlops& f, bool encoder_trains) {
  const double backward =
      2 * f.projector2 +
      (encoder_trains ? 2 * f.projector1 + 2 * f.layers + f.patch : f.projector1);
  return f.forward() + backward;
}

// A TP rank's elements of the projector and of the encoder (ParamLayout::vision_tensors,
// without the alignment gaps: the optimizer's moments are per tensor), and of both those every
// TP rank holds whole.
struct VisionNumel {
  int64_t projector = 0, encoder = 0, whole = 0;
};
VisionNumel vision_numel(const VisionConfig& v, int tp) {
  VisionNumel n;
  for (const ParamTensor& t : ParamLayout::vision_tensors(v, 0, tp)) {
    (t.name.rfind("multi_modal_projector.", 0) == 0 ? n.projector : n.encoder) +=
        static_cast<int64_t>(t.numel);
    if (t.split_dim < 0) n.whole += static_cast<int64_t>(t.numel);
  }
  return n;
}

// Note [tower re-runs]: micro-batches in flight share the tower's buffers, so the backward of a
// micro-batch whose images were not the tower's last forward re-runs that forward first
// (GptModel::vision_backward). The tower sits in the first stage's first model chunk; walking
// that rank's schedule (pipeline_schedule, chunk 0) counts the re-runs: none without
// pipelining (each forward is followed by its backward), every backward's with 1F1B warm-up
// once more than one micro-batch is in flight.
int tower_reruns(const ParallelLayout& layout, int micro_batches) {
  int owner = -1, reruns = 0;
  for (const PipelineAction& a : pipeline_schedule(layout.pp, 0, layout.vpp, micro_batches)) {
    if (a.chunk != 0) continue;
    if (a.kind == PipelineAction::kBackward && owner != a.micro_batch) reruns++;
    owner = a.micro_batch;
  }
  return reruns;
}

}  // namespace

bool has_vision_tower(const TrainOptions& o) {
  return !o.vision_model_type.empty();
}

VisionEstimate estimate_vision(const TrainOptions& o) {
  VisionEstimate e;
  if (!has_vision_tower(o)) return e;
  const VisionConfig v = o.vision_config();
  const int tp = std::max(1, o.model.tensor_model_parallel_size);
  const VisionShape s = vision_shape(v, tp);
  // Note [vision tower in the plan]: the run's compute type (the CPU runs --fp16 in fp32).
  const std::string precision = compute_precision(o);
  const bool sixteen_bit = precision == "bf16" || precision == "fp16";
  const TowerBytes bytes{sixteen_bit           ? 2.0
                         : precision == "fp64" ? 8.0
                                               : 4.0,
                         precision == "fp64" ? 8.0 : 4.0};
  constexpr int kImagesPerSample = 1;
  // Note [images under context parallelism] in model/gpt_vision.cpp: a CP rank encodes a block
  // of ceil(images / CP) of each micro-batch's images.
  const int cp = std::max(1, o.parallel.context_parallel_size);
  e.parameters = static_cast<int64_t>(ParamLayout::vision_arena_numel(v, tp));
  e.layers_run = v.layers_run();
  e.images_per_micro_batch = o.micro_batch_size * kImagesPerSample;
  e.images_per_rank = (e.images_per_micro_batch + cp - 1) / cp;
  // Note [vision tensors] in model/param_layout.h: the projector always trains.
  e.encoder_trains = !o.model.freeze_vision && !o.model.lora();
  const VisionNumel numel = vision_numel(v, tp);
  e.replicated_parameters = numel.whole;
  e.trained_parameters = numel.projector + (e.encoder_trains ? numel.encoder : 0);
  const double B = e.images_per_rank;
  e.activation_bytes_per_micro_batch = static_cast<size_t>(vision_activation_bytes(s, B, bytes));
  // GptModel::new_activations: images (B I, Cin, img_h, img_w) in the compute type (every CP
  // rank holds the micro-batch's images); image_slot and embed_tokens (N) and image_rows (B I Np)
  // in int32, N = B --seq-length / CP rows (the rank's).
  const double all = e.images_per_micro_batch;
  const double rows = static_cast<double>(o.micro_batch_size) * (o.model.seq_length / cp);
  e.input_bytes_per_micro_batch = static_cast<size_t>(bytes.a * all * s.Cin * v.img_h * v.img_w +
                                                      sizeof(int32_t) * (2 * rows + all * s.Np));
  // The splice's buffers (Note [image rows] in model/gpt_vision.cpp): the projected patches'
  // gradient (CP B' Np, H) in A, B' = images_per_rank, and under CP the gathered patches as much.
  const bool cuda = o.device == "cuda";
  e.encoder_workspace_bytes = static_cast<size_t>(encoder_workspace_bytes(
      s, B, bytes, cuda, planned_cpu_threads(o)));
  const double patches = bytes.a * cp * B * s.Np * s.H;
  e.workspace_bytes = e.encoder_workspace_bytes + static_cast<size_t>(patches * (cp > 1 ? 2 : 1));
  // The all-gather of the patches forward and the reduce-scatter of their gradient backward.
  if (cp > 1) e.cp_bytes_per_micro_batch = 2 * patches;
  const VisionFlops f = vision_forward_flops(s);
  e.forward_flops_per_image = f.forward();
  e.training_flops_per_image = vision_training_flops(f, e.encoder_trains);
  const VisionFlops share = rank_share(f, s.t);
  e.rank_forward_flops_per_image = share.forward();
  e.rank_training_flops_per_image = vision_training_flops(share, e.encoder_trains);
  // Note [tower tensor parallelism]: forward, out_proj's and fc2's (T, C) and the projector's
  // (Np, H) partial sums; backward with the encoder training, fc1's and qkv_proj's (T, C) input
  // gradients and linear_1's (Np, C).
  if (tp > 1) {
    e.tp_forward_bytes_per_image = bytes.a * (2 * s.R * s.T * s.C + s.Np * s.H);
    e.tp_backward_bytes_per_image =
        e.encoder_trains ? bytes.a * (2 * s.R * s.T * s.C + s.Np * s.C) : 0;
  }
  e.flops_per_iteration =
      e.training_flops_per_image * static_cast<double>(o.global_batch_size) * kImagesPerSample;
  return e;
}

VisionEstimate estimate_vision(const TrainOptions& o, const ParallelLayout& layout) {
  VisionEstimate e = estimate_vision(o);
  if (!has_vision_tower(o)) return e;
  const int64_t micro_batches =
      o.global_batch_size / (static_cast<int64_t>(o.micro_batch_size) * layout.dp);
  e.reruns_per_iteration = tower_reruns(layout, static_cast<int>(micro_batches));
  // Every data-parallel rank's first stage re-runs as many.
  e.flops_per_iteration += static_cast<double>(e.reruns_per_iteration) * layout.dp *
                           e.images_per_micro_batch * e.forward_flops_per_image;
  return e;
}

}  // namespace lattice
