// Each parallel layout of the one GPT model (model/gpt.h) against the same model's whole run in
// one process (every build, no GPU), as tests/parallel/test_parallel_equivalence compares the
// trainer's layouts. The reference is GptModel<R> from the host constructor (TP 1, no sequence
// parallelism, nothing recomputed, on host_device()), R = fp32 for the fp32, bf16 and fp16
// layouts and fp64 for the fp64 ones; each layout's chunks start from the slices of its weights
// (by global name and index, checkpoint_format::SliceMap), and their token losses and every
// parameter gradient must equal its losses and the slices of its gradients (normwise relative
// error 1e-5 per tensor in fp32). Every model runs on a CPU device (device/cpu_device.h) through
// its op lists (device/ops.h cpu_ops): what this pins is the model's plumbing over layouts, not
// the CUDA kernels (tests/kernels/cuda/test_cuda_* and tests/device/test_cuda_op_list check those
// against the CPU's). One micro-batch at TP 2, this program rerun as two MPI ranks (--worker), each
// rank's shard against the whole run: it pins where the reductions sit (row-parallel outputs,
// column-parallel input gradients, the vocabulary-parallel embedding, LM head and cross-entropy)
// and that the replicated biases and the position embedding enter once; repeated with hidden and
// attention dropout, whose masks are keyed by global layer and element, so every layout drops the
// whole run's elements. At TP 1 only what differs from the whole run is compared: 16-bit compute,
// recomputation (an fp32 or fp64 TP 1 step that keeps everything is the whole run itself).
// GptModel<bf16> and GptModel<fp16> run the same flow over the CPU device's 16-bit op lists
// (the CPU kernels on widened copies, results rounded back) against the fp32 whole run: within
// the GPU tests' 16-bit tolerances (loss 2e-2, gradients 5e-2; fp16 under a loss scale of 2^10,
// as training runs it), at TP 1 and, for fp16, at TP 2 (16-bit all-reduces). And the fp16 model
// passes an overflow on: at a loss scale of 2^32 the fp16 loss gradient is inf, and every
// parameter gradient it reaches is non-finite, where the fp32 model's stay finite (docs/gpu.md,
// note "fp16 overflow").
// Pipeline parallelism: PipelineExecutor (engine/src/pipeline/executor.cpp, over the CPU
// device's side streams and channel communicators from Device::make_comm: MpiComm's stream-ordered
// sends and receives, Note [CPU stream order]) runs a 1F1B iteration of eight
// micro-batches over PP 2 stages (even, and one + three layers; with dropout; in bf16 and
// fp16), TP 2 x PP 2 (four ranks), and the interleaved schedule with two chunks per rank at
// PP 2 and PP 4 (eight micro-batches reach its steady state); the last stage's token losses,
// every chunk's gradients (the tied word embedding summed over the embedding group, as the
// trainer does) and the forward-only losses equal the whole run's, micro-batch by micro-batch
// in one process with the same per-micro-batch dropout seeds (masks keyed by the global layer
// index). The boundary messages (16 KB) are above Open MPI's shared-memory eager limit, so a
// host send completes only once received, as an NCCL send: an order that could deadlock on the
// device hangs here (both directions on one channel, or the wrap-around on the activation
// channel at PP 4, were checked to hang).
// Sequence parallelism: at TP 2 (fp32, fp32 with dropout, also of a one-sequence micro-batch
// whose rows split mid-sequence, bf16 with dropout, fp16 under a loss scale) one step's
// sequence-parallel shards equal the whole run (their LayerNorm and row-parallel bias gradients
// summed over TP after the last micro-batch), and so does TP 2 x PP 2 with dropout (stages
// exchange R = N/2 rows). A missing TP sum of the LayerNorm gradients and a dropout mask without
// the row0 * C offset were each checked to fail these. The activations of a sequence-parallel
// model take the bytes of the rows it no longer holds less than without it.
// fp64 (step 9 of docs/one-engine.md): GptModel<double> on the CPU device's fp64 op list
// against the fp64 whole run within 1e-12, at TP 1 (full uniform and block; with and without
// dropout), TP 2 with dropout, TP 2 + SP with dropout (kept, full) and PP 2 (also with dropout).
// Selective recomputation keeps what recomputing nothing keeps (Note [selective recomputation]).
// Full recomputation (docs/gpu.md#recomputation): the same comparisons with the layout
// recomputing (uniform and block, at TP 1 and TP 2, with dropout, over PP 2 with several
// micro-batches sharing the scratch), against the whole run, which keeps everything; a bf16
// model that recomputes gives bit-identical losses and gradients to one that does not (the
// recomputed ln1 rounds as the fused forward's); and the activation memory category shrinks by
// exactly the layers no longer kept per slot. A recomputation with the slot's dropout seed
// shifted by one, one that stops a layer short of its group's top, and scratch-free allocation
// broken (recomputed layers still allocated per slot) were each checked to fail these cases.
#include <QtTest/QtTest>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "checkpoint/checkpoint_format.h"
#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "lattice/layout.h"
#include "model/gpt.h"
#include "parallel/groups.h"
#include "parallel/model_chunks.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"

using namespace lattice;

namespace {

// Two layers, hidden 128, 4 heads (2 per TP rank), vocabulary 250 (padded 256 at TP 1 and 2);
// with_dropout: hidden and attention dropout 0.1 (the step then runs with a dropout seed).
ModelConfig config(int tp, bool with_dropout = false) {
  ModelConfig c = testing::tiny_config(2, 128, 4, 16, 250);
  c.tensor_model_parallel_size = tp;
  c.hidden_dropout = with_dropout ? 0.1f : 0.0f;
  c.attention_dropout = with_dropout ? 0.1f : 0.0f;
  return c;
}
constexpr uint64_t kDropoutSeed = 0x5eed0fd20b;

// Tolerances of compare_one_step: fp32 against fp32, or a 16-bit layout against fp32.
struct Tolerance {
  double losses = 1e-5, grads = 1e-5;
};
constexpr Tolerance kHalfTolerance{2e-2, 5e-2};  // as tests/train/test_gpu_training.cpp
// An fp64 layout against the fp64 whole run: the same ops in double, summed in another order
// only where the layout splits a sum (a TP rank's partial products before the all-reduce, the
// row-parallel bias added inside rank 0's GEMM at TP > 1 without SP).
constexpr Tolerance kDoubleTolerance{1e-12, 1e-12};

// The whole run's type for a layout of GptModel<A>: GptModel<double> for A = double, else fp32.
template <typename A>
using Ref = accum_t<A>;

template <typename X>
double relative_error(const X* got, const X* want, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = std::max(scale, std::abs(double(want[i])));
  for (size_t i = 0; i < n; i++) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(scale, 1e-30);
}

// "<what>: relative error <e> > <tolerance>", in three significant digits (std::to_string
// would print the fp64 tolerance 1e-12 as 0.000000).
std::string beyond(const std::string& what, double e, double tolerance) {
  char text[64];
  std::snprintf(text, sizeof text, ": relative error %.3g > %.3g", e, tolerance);
  return what + text;
}

// Megatron starts biases at zero, where a bias added twice would go unnoticed: give every
// bias a value of its global element (so replicas on the TP ranks agree).
template <typename R>
void give_biases_values(GptModel<R>& m) {
  for (const ParamTensor& t : m.layout().tensors()) {
    if (t.name.size() < 5 || t.name.compare(t.name.size() - 5, 5, ".bias") != 0) continue;
    const checkpoint_format::SliceMap map{t.global_shape, t.split_dim, t.split_begin,
                                          t.split_dim >= 0 ? t.shape[t.split_dim] : 0};
    for (size_t i = 0; i < t.numel; i++)
      m.params()[t.offset + i] =
          static_cast<R>(0.02f * std::sin(0.7f * static_cast<float>(map.global_index(i))));
  }
}

// The layout of the reference run: c at TP 1 (sequence parallelism and recomputation are the
// shard's and the plan's, which the whole run does not take).
ModelConfig whole_config_of(const ModelConfig& c) {
  ModelConfig whole = c;
  whole.tensor_model_parallel_size = 1;
  return whole;
}

// The reference of every comparison: the whole model of whole_config on host_device() (the host
// constructor) in R, on micro-batches of B sequences, from init_weights(7) with
// give_biases_values, its gradients zeroed.
template <typename R>
Result<std::unique_ptr<GptModel<R>>> whole_model(const ModelConfig& whole_config, int B) {
  auto whole = std::make_unique<GptModel<R>>(whole_config, B);
  if (Status s = whole->init_weights(7); !s) return s;
  give_biases_values(*whole);
  whole->zero_grads();
  return whole;
}

// Element i of a chunk's tensor t, from the whole model's arena (by global name and index).
template <typename R>
R whole_value(const GptModel<R>& whole, const R* arena, const ParamTensor& t, size_t i) {
  const ParamTensor* g = whole.layout().find(t.name);
  const checkpoint_format::SliceMap map{t.global_shape, t.split_dim, t.split_begin,
                                        t.split_dim >= 0 ? t.shape[t.split_dim] : 0};
  return arena[g->offset + map.global_index(i)];
}

// A chunk's part of one of the whole model's arenas (params() or grads()), in the chunk's
// layout order (alignment gaps zero).
template <typename R>
std::vector<R> slice_of(const GptModel<R>& whole, const R* arena, const ParamLayout& chunk) {
  std::vector<R> part(chunk.total_numel(), 0);
  for (const ParamTensor& t : chunk.tensors())
    for (size_t i = 0; i < t.numel; i++) part[t.offset + i] = whole_value(whole, arena, t, i);
  return part;
}

// "" or the first tensor of a chunk (layout order) whose gradient in `grads` (the chunk's
// arena) is farther than `tolerance` from the slice of the whole model's.
template <typename R>
std::string compare_grads(const GptModel<R>& whole, const ParamLayout& chunk, const R* grads,
                          double tolerance) {
  const std::vector<R> want = slice_of(whole, whole.grads(), chunk);
  for (const ParamTensor& t : chunk.tensors()) {
    const double e = relative_error(grads + t.offset, want.data() + t.offset, t.numel);
    if (!(e <= tolerance)) return beyond("d " + t.name, e, tolerance);
  }
  return "";
}

// "" or the first difference (token losses, then each tensor's gradient, in layout order)
// between one forward and backward of GptModel<A> on `shard` and the whole run's on the same
// weights and tokens, the layout's loss gradient multiplied by loss_scale (its gradients
// divided by it before the comparison). tp: the TP communicator (null at TP 1). B: sequences
// in the micro-batch. recompute: the layout's plan (the whole run keeps everything).
template <typename A = float>
std::string compare_one_step(const ModelConfig& c, const ModelShard& shard, Comm* tp,
                             Tolerance tolerance = {}, float loss_scale = 1.0f, int B = 2,
                             const RecomputePlan& recompute = {}) {
  const int N = B * c.seq_length;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = (i * 37 + 11) % c.vocab_size;
    targets[i] = (i * 53 + 5) % c.vocab_size;
  }
  const ModelConfig whole_config = whole_config_of(c);
  auto made_whole = whole_model<Ref<A>>(whole_config, B);
  if (!made_whole) return "whole run: " + made_whole.status().message();
  GptModel<Ref<A>>& whole = **made_whole;
  GptActivations<Ref<A>> want(whole_config, B);
  // The iteration's last micro-batch: sequence-parallel gradients are summed over TP.
  whole.set_final_backward(true);
  if (std::isnan(whole.forward(want, tokens.data(), targets.data(), kDropoutSeed, 1.0f / N)))
    return "whole run: " + host_device().synchronize(host_device().compute()).message();
  whole.backward(want);
  if (Status s = host_device().synchronize(host_device().compute()); !s)
    return "whole run: " + s.message();

  CpuDevice device;
  auto made = GptModel<A>::create(c, B, device, shard, tp, recompute);
  if (!made) return made.status().message();
  GptModel<A>& m = **made;
  auto acts = m.new_activations();
  if (!acts) return acts.status().message();
  m.upload(slice_of(whole, whole.params(), m.layout()).data());
  m.zero_grads();
  m.set_final_backward(true);
  m.forward(**acts, tokens.data(), targets.data(), kDropoutSeed, loss_scale / N);
  m.backward(**acts);
  if (Status s = device.synchronize(device.compute()); !s) return s.message();
  for (size_t i = 0; i < m.arena_size(); i++) m.grads()[i] /= loss_scale;  // a power of two: exact

  if (double e = relative_error((*acts)->losses, want.losses, N); !(e <= tolerance.losses))
    return beyond("token losses", e, tolerance.losses);
  return compare_grads(whole, m.layout(), m.grads(), tolerance.grads);
}

// The tensors of GptModel<A>'s gradient arena that hold an inf or NaN after one step with the
// loss gradient scaled by loss_scale / N (names, in layout order).
template <typename A>
std::vector<std::string> non_finite_grads(const ModelConfig& c, float loss_scale) {
  const int B = 2, N = B * c.seq_length;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = (i * 37 + 11) % c.vocab_size;
    targets[i] = (i * 53 + 5) % c.vocab_size;
  }
  CpuDevice device;
  auto made = GptModel<A>::create(c, B, device);
  if (!made) return {"create: " + made.status().message()};
  GptModel<A>& m = **made;
  auto acts = m.new_activations();
  if (!acts) return {"new_activations: " + acts.status().message()};
  if (Status s = m.init_weights(7); !s) return {"init_weights: " + s.message()};
  m.zero_grads();
  m.forward(**acts, tokens.data(), targets.data(), 0, loss_scale / N);
  m.backward(**acts);
  std::vector<std::string> names;
  for (const ParamTensor& t : m.layout().tensors())
    for (size_t i = 0; i < t.numel; i++)
      if (!std::isfinite(m.grads()[t.offset + i])) {
        names.push_back(t.name);
        break;
      }
  return names;
}

// --recompute-granularity full with method and n for a chunk of `layers` layers.
RecomputePlan full(const std::string& method, int n, int layers) {
  return RecomputePlan::make("full", method, n, layers);
}

// Losses and gradients of one training step of a TP 1 GptModel<A>, or an error.
template <typename A>
struct StepResult {
  std::vector<Ref<A>> losses, grads;
  std::string error;
};
template <typename A>
StepResult<A> one_step(const ModelConfig& c, const RecomputePlan& recompute) {
  const int B = 2, N = B * c.seq_length;
  auto weights = whole_model<Ref<A>>(c, B);  // c is TP 1: the layout of the model below
  if (!weights) return {{}, {}, weights.status().message()};
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = (i * 37 + 11) % c.vocab_size;
    targets[i] = (i * 53 + 5) % c.vocab_size;
  }
  CpuDevice device;
  auto made = GptModel<A>::create(c, B, device, ModelShard{}, nullptr, recompute);
  if (!made) return {{}, {}, made.status().message()};
  GptModel<A>& m = **made;
  auto made_acts = m.new_activations();
  if (!made_acts) return {{}, {}, made_acts.status().message()};
  GptActivations<A>& acts = **made_acts;
  m.upload((*weights)->params());
  m.zero_grads();
  m.forward(acts, tokens.data(), targets.data(), kDropoutSeed, 1.0f / N);
  m.backward(acts);
  if (Status s = device.synchronize(device.compute()); !s) return {{}, {}, s.message()};
  return {std::vector<Ref<A>>(acts.losses, acts.losses + N),
          std::vector<Ref<A>>(m.grads(), m.grads() + m.arena_size()), ""};
}

// Bytes of `category` (activations by default) after creating a TP 1 GptModel<A> and the
// activations of `in_flight` micro-batches.
template <typename A>
size_t activation_bytes(const ModelConfig& c, int in_flight, const RecomputePlan& recompute,
                        MemoryCategory category = MemoryCategory::kActivations) {
  CpuDevice device;
  auto made = GptModel<A>::create(c, 2, device, ModelShard{}, nullptr, recompute);
  if (!made) return 0;
  std::vector<std::unique_ptr<GptActivations<A>>> held;
  for (int i = 0; i < in_flight; i++) {
    auto acts = (*made)->new_activations();
    if (!acts) return 0;
    held.push_back(std::move(*acts));
  }
  return device.usage(category).current;
}

RecomputePlan selective(int layers) {
  return RecomputePlan::make("selective", "", 0, layers);
}

// `layers` layers (at least four: two per stage at PP 2), otherwise as config(tp, with_dropout).
ModelConfig pipeline_config(int tp, int layers, bool with_dropout) {
  ModelConfig c = testing::tiny_config(std::max(4, layers), 128, 4, 16, 250);
  c.tensor_model_parallel_size = tp;
  c.hidden_dropout = with_dropout ? 0.1f : 0.0f;
  c.attention_dropout = with_dropout ? 0.1f : 0.0f;
  return c;
}

// Micro-batch mb's dropout seed (each micro-batch its own, as the trainers derive them).
uint64_t micro_batch_seed(int mb) {
  return kDropoutSeed + 1000003ull * static_cast<uint64_t>(mb);
}

// "" or the first difference between a pipeline iteration of GptModel<A> chunks (this rank's,
// run by PipelineExecutor) and the whole run in Ref<A> over every micro-batch in one process, each
// micro-batch with its own dropout seed (micro_batch_seed) on both sides. The pipeline's loss
// gradient is multiplied by loss_scale (its gradients divided by it before comparing).
// recompute_method, recompute_n: the chunks' full recomputation ("" none). packed: every
// sequence packs three documents (Note [packed sequences]), their positions loaded on every
// stage (set_packed_sequences) and given to the whole run.
template <typename A = float>
std::string compare_pipeline(const ModelConfig& c, const ProcessGroups& groups,
                             Tolerance tolerance = {}, float loss_scale = 1.0f,
                             bool sequence_parallel = false,
                             const std::string& recompute_method = "", int recompute_n = 0,
                             bool packed = false) {
  const int B = 2, N = B * c.seq_length, M = 8;
  const ParallelLayout& L = groups.layout;
  const float grad_scale = 1.0f / (static_cast<float>(N) * M);
  const ModelConfig whole_config = whole_config_of(c);
  auto made_whole = whole_model<Ref<A>>(whole_config, B);
  if (!made_whole) return "whole run: " + made_whole.status().message();
  GptModel<Ref<A>>& whole = **made_whole;
  std::vector<int32_t> tokens(static_cast<size_t>(N) * M), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    tokens[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);
    targets[i] = static_cast<int32_t>((i * 53 + 5) % c.vocab_size);
  }
  // Documents [0, cut), [cut, 9), [9, T) with the cut moving over sequences and micro-batches.
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); i++) {
    const int t = static_cast<int>(i % c.seq_length),
              cut = 1 + static_cast<int>(i / c.seq_length) % 7;
    positions[i] = t < cut ? t : t < 9 ? t - cut : t - 9;
  }
  std::vector<Ref<A>> want_losses(tokens.size());
  GptActivations<Ref<A>> acts(whole_config, B);
  for (int mb = 0; mb < M; mb++) {
    if (std::isnan(whole.forward(acts, tokens.data() + mb * N, targets.data() + mb * N,
                                 micro_batch_seed(mb), grad_scale,
                                 packed ? positions.data() + mb * N : nullptr)))
      return "whole run: " + host_device().synchronize(host_device().compute()).message();
    std::copy(acts.losses, acts.losses + N, want_losses.begin() + mb * N);
    whole.backward(acts);
  }
  if (Status s = host_device().synchronize(host_device().compute()); !s)
    return "whole run: " + s.message();

  const int chunks = L.vpp;
  const std::vector<int> in_flight = chunk_peaks(L.pp, groups.coord.pp, chunks, M);
  CpuDevice device;
  std::vector<std::unique_ptr<GptModel<A>>> models;
  std::vector<GptModel<A>*> chunk_models;
  for (int chunk = 0; chunk < chunks; chunk++) {
    const ModelShard shard = shard_of(L, groups.coord, chunk, sequence_parallel);
    const RecomputePlan plan = recompute_method.empty()
                                   ? RecomputePlan{}
                                   : full(recompute_method, recompute_n, shard.num_layers(c));
    auto made = GptModel<A>::create(c, B, device, shard, groups.tp.get(), plan);
    if (!made) return made.status().message();
    GptModel<A>& m = **made;
    m.upload(slice_of(whole, whole.params(), m.layout()).data());
    m.zero_grads();
    chunk_models.push_back(&m);
    models.push_back(std::move(*made));
  }
  // One communicator per channel (Note [pipeline streams]), made by the device.
  std::vector<std::unique_ptr<Comm>> comms;
  for (int i = 0; i < (chunks > 1 ? 4 : 2); i++) {
    Result<std::unique_ptr<Comm>> comm = device.make_comm(*groups.pp);
    if (!comm) return comm.status().message();
    comms.push_back(std::move(*comm));
  }
  PipelineComms channels;
  channels.activations = comms[0].get();
  channels.gradients = comms[1].get();
  if (chunks > 1) {
    channels.activations_wrap = comms[2].get();
    channels.gradients_wrap = comms[3].get();
  }
  auto pipeline =
      PipelineExecutor<A>::create(chunk_models, device, channels, L.pp, groups.coord.pp, in_flight);
  if (!pipeline) return pipeline.status().message();
  (*pipeline)->set_packed_sequences(packed);
  int position_loads = 0;
  auto load = [&](int mb, int32_t* d_tokens, int32_t* d_targets, int32_t* d_positions,
                  lattice::GptActivations<A>*) {
    const size_t bytes = N * sizeof(int32_t);
    if (d_tokens)
      device.copy(d_tokens, tokens.data() + mb * N, bytes, CopyKind::kHostToDevice,
                  device.compute());
    if (d_targets)
      device.copy(d_targets, targets.data() + mb * N, bytes, CopyKind::kHostToDevice,
                  device.compute());
    if (d_positions) {
      device.copy(d_positions, positions.data() + mb * N, bytes, CopyKind::kHostToDevice,
                  device.compute());
      position_loads++;
    }
    return Status::ok();
  };
  std::vector<Ref<A>> losses(tokens.size(), 0), eval_losses(tokens.size(), 0);
  if (Status s =
          (*pipeline)->train(M, load, micro_batch_seed, loss_scale * grad_scale, losses.data());
      !s)
    return s.message();
  if (Status s = (*pipeline)->evaluate(M, load, eval_losses.data()); !s) return s.message();
  if (Status s = device.synchronize(device.compute()); !s) return s.message();
  // Packed: every chunk of every micro-batch, in training and in evaluation, got positions.
  if (position_loads != (packed ? 2 * M * chunks : 0))
    return "positions loaded " + std::to_string(position_loads) + " times, expected " +
           std::to_string(packed ? 2 * M * chunks : 0);
  for (auto& m : models)  // a power of two: exact
    for (size_t i = 0; i < m->arena_size(); i++) m->grads()[i] /= loss_scale;
  // The tied word embedding: the first stage's gradient (embedding) plus the last stage's
  // copy's (LM head), as the trainer sums them over the embedding group.
  if (groups.in_embedding_group()) {
    GptModel<A>& m = groups.first_stage() ? *chunk_models.front() : *chunk_models.back();
    const ParamTensor& t = m.layout().tensors()[m.layout().word_embedding_index()];
    if (Status s = groups.embedding->all_reduce(m.grads() + t.offset, t.numel, dtype_of<Ref<A>>(),
                                                ReduceOp::kSum);
        !s)
      return s.message();
  }
  if (groups.last_stage()) {
    if (double e = relative_error(losses.data(), want_losses.data(), losses.size());
        !(e <= tolerance.losses))
      return beyond("token losses", e, tolerance.losses);
    // Without dropout the forward-only losses are the training ones.
    if (c.hidden_dropout == 0 && c.attention_dropout == 0)
      if (double e = relative_error(eval_losses.data(), want_losses.data(), losses.size());
          !(e <= tolerance.losses))
        return beyond("forward-only token losses", e, tolerance.losses);
  }
  for (int chunk = 0; chunk < chunks; chunk++) {
    const GptModel<A>& m = *chunk_models[chunk];
    if (std::string d = compare_grads(whole, m.layout(), m.grads(), tolerance.grads); !d.empty())
      return "stage " + std::to_string(groups.coord.pp) + " chunk " + std::to_string(chunk) + " " +
             d;
  }
  return "";
}

// The pipeline side: this process is one of tp x pp MPI ranks; chunks > 1: the interleaved
// schedule, one layer per chunk; first > 0: the first stage holds `first` layers of four
// (--decoder-first-pipeline-num-layers), the others share the rest. variant: "fp32", "dropout"
// (fp32 with hidden and attention dropout 0.1), "sp-dropout" (that with sequence parallelism),
// "bf16" or "fp16" (at a loss scale of 2^10); "uniform" (fp32, full recomputation of each
// chunk's layers in uniform groups of 2) or "block-dropout" (fp32 with dropout, the first layer
// of each stage recomputed by block); "fp64" (GptModel<double> against the fp64 whole run within
// 1e-12) or "fp64-dropout" (that with dropout);
// "fp64-packed" (fp64 of packed sequences) or "sp-packed" (fp32 of packed sequences with
// sequence parallelism).
int pipeline_worker(int tp, int pp, int chunks, int first, const std::string& variant) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "pipeline worker: %s\n", world.status().message().c_str());
    return 1;
  }
  std::string error;
  {  // the communicators go before MPI does
    TrainOptions o;
    o.model =
        pipeline_config(tp, pp * chunks,
                        variant == "dropout" || variant == "sp-dropout" ||
                            variant == "block-dropout" || variant == "fp64-dropout");
    o.parallel.pipeline_model_parallel_size = pp;
    if (chunks > 1) o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    o.parallel.decoder_first_pipeline_num_layers = first;
    o.micro_batch_size = 2;
    o.global_batch_size = 16;
    Result<ParallelLayout> layout = make_layout(o, (*world)->size());
    if (!layout) {
      error = layout.status().message();
    } else if (Result<ProcessGroups> groups = make_process_groups(**world, *layout); !groups) {
      error = groups.status().message();
    } else if (first > 0 && groups->first_stage() &&
               shard_of(groups->layout, groups->coord, 0, false).num_layers(o.model) != first) {
      error = "the first stage does not hold --decoder-first-pipeline-num-layers layers";
    } else if (variant == "bf16") {
      error = compare_pipeline<bf16>(o.model, *groups, kHalfTolerance);
    } else if (variant == "fp16") {
      error = compare_pipeline<fp16>(o.model, *groups, kHalfTolerance, 1024.0f);
    } else if (variant == "fp32" || variant == "dropout") {
      error = compare_pipeline(o.model, *groups);
    } else if (variant == "sp-dropout") {
      error = compare_pipeline(o.model, *groups, Tolerance{}, 1.0f, true);
    } else if (variant == "uniform") {
      error = compare_pipeline(o.model, *groups, {}, 1.0f, false, "uniform", 2);
    } else if (variant == "block-dropout") {
      error = compare_pipeline(o.model, *groups, {}, 1.0f, false, "block", 1);
    } else if (variant == "fp64") {
      error = compare_pipeline<double>(o.model, *groups, kDoubleTolerance);
    } else if (variant == "fp64-dropout") {
      error = compare_pipeline<double>(o.model, *groups, kDoubleTolerance);
    } else if (variant == "fp64-packed") {
      error =
          compare_pipeline<double>(o.model, *groups, kDoubleTolerance, 1.0f, false, "", 0, true);
    } else if (variant == "sp-packed") {
      error = compare_pipeline(o.model, *groups, Tolerance{}, 1.0f, true, "", 0, true);
    } else {
      error = "unknown variant " + variant;
    }
    if (!error.empty()) error = variant + ": " + error;
  }
  return testing::end_worker(*world, error);
}

// The TP 2 side: this process is one of two MPI ranks.
int worker() {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  std::string error;
  {  // the communicators go before MPI does
    TrainOptions o;
    o.model = config(2);
    o.micro_batch_size = 2;
    o.global_batch_size = 2;
    Result<ParallelLayout> layout = make_layout(o, (*world)->size());
    if (!layout) {
      error = layout.status().message();
    } else if (Result<ProcessGroups> groups = make_process_groups(**world, *layout); !groups) {
      error = groups.status().message();
    } else {
      const ModelShard shard = shard_of(groups->layout, groups->coord, 0, false);
      error = compare_one_step(o.model, shard, groups->tp.get());
      if (!error.empty()) {
        error = "fp32: " + error;
      } else if (error = compare_one_step(config(2, true), shard, groups->tp.get());
                 !error.empty()) {
        error = "fp32 with dropout: " + error;
      } else if (error = compare_one_step<fp16>(o.model, shard, groups->tp.get(), kHalfTolerance,
                                                1024.0f);
                 !error.empty()) {
        error = "fp16: " + error;
      } else if (error = compare_one_step(o.model, shard, groups->tp.get(), {}, 1.0f, 2,
                                          full("uniform", 1, 2));
                 !error.empty()) {
        error = "fp32, full uniform 1: " + error;
      } else if (error = compare_one_step(config(2, true), shard, groups->tp.get(), {}, 1.0f, 2,
                                          full("block", 1, 2));
                 !error.empty()) {
        error = "fp32 with dropout, full block 1: " + error;
      } else if (error = compare_one_step<double>(config(2, true), shard, groups->tp.get(),
                                                  kDoubleTolerance);
                 !error.empty()) {
        error = "fp64 with dropout: " + error;
      }
    }
  }
  return testing::end_worker(*world, error);
}

// Activation bytes of a TP 2 GptModel<float> of config(2) and one micro-batch's activations on
// this rank, with or without sequence parallelism.
size_t activation_bytes(const ModelShard& shard, Comm* tp, std::string& error) {
  CpuDevice device;
  auto made = GptModel<float>::create(config(2), 2, device, shard, tp);
  if (!made) {
    error = made.status().message();
    return 0;
  }
  auto acts = (*made)->new_activations();
  if (!acts) error = acts.status().message();
  return device.usage(MemoryCategory::kActivations).current;
}

// The TP 2 sequence-parallel side: this process is one of two MPI ranks.
int sp_worker() {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "sp worker: %s\n", world.status().message().c_str());
    return 1;
  }
  std::string error;
  {  // the communicators go before MPI does
    TrainOptions o;
    o.model = config(2);
    o.parallel.sequence_parallel = true;
    o.micro_batch_size = 2;
    o.global_batch_size = 2;
    Result<ParallelLayout> layout = make_layout(o, (*world)->size());
    if (!layout) {
      error = layout.status().message();
    } else if (Result<ProcessGroups> groups = make_process_groups(**world, *layout); !groups) {
      error = groups.status().message();
    } else {
      const ModelShard sp = shard_of(groups->layout, groups->coord, 0, true);
      Comm* tp = groups->tp.get();
      if (!sp.sequence_parallel) error = "shard_of made no sequence-parallel shard";
      if (error.empty() && !(error = compare_one_step(o.model, sp, tp)).empty())
        error = "fp32: " + error;
      if (error.empty() && !(error = compare_one_step(config(2, true), sp, tp)).empty())
        error = "fp32 with dropout: " + error;
      // One sequence: each rank's rows are half of it (positions 0-7 or 8-15).
      if (error.empty() &&
          !(error = compare_one_step(config(2, true), sp, tp, {}, 1.0f, 1)).empty())
        error = "fp32 with dropout, one sequence: " + error;
      if (error.empty() &&
          !(error = compare_one_step<bf16>(config(2, true), sp, tp, kHalfTolerance)).empty())
        error = "bf16 with dropout: " + error;
      if (error.empty() &&
          !(error = compare_one_step<fp16>(o.model, sp, tp, kHalfTolerance, 1024.0f)).empty())
        error = "fp16: " + error;
      // Full recomputation over sequence-parallel rows: the recomputed group re-runs the
      // all-gathers and reduce-scatters of its forward.
      if (error.empty() &&
          !(error = compare_one_step(config(2, true), sp, tp, {}, 1.0f, 2, full("uniform", 1, 2)))
               .empty())
        error = "with dropout and full recomputation: " + error;
      if (error.empty() &&
          !(error = compare_one_step<double>(config(2, true), sp, tp, kDoubleTolerance)).empty())
        error = "fp64 with dropout: " + error;
      if (error.empty() &&
          !(error = compare_one_step<double>(config(2, true), sp, tp, kDoubleTolerance, 1.0f, 2,
                                             full("uniform", 1, 2)))
               .empty())
        error = "fp64 with dropout and full recomputation: " + error;
      if (error.empty()) {
        // Without SP minus with it: the rows [R, N) of the residual stream (L+1 of them), of
        // each layer's ln1, res_mid, ln2 and their four statistics, and of lnf and its two.
        const ModelConfig c = config(2);
        const size_t N = 2 * c.seq_length, R = N / 2, C = c.hidden_size, L = c.num_layers;
        const size_t saved =
            sizeof(float) * ((L + 1) * (N - R) * C + L * (3 * (N - R) * C + 4 * (N - R)) +
                             (N - R) * C + 2 * (N - R));
        ModelShard plain = sp;
        plain.sequence_parallel = false;
        const size_t with = activation_bytes(sp, tp, error);
        const size_t without = activation_bytes(plain, tp, error);
        if (error.empty() && without - with != saved)
          error = "activation bytes with sequence parallelism " + std::to_string(with) +
                  ", without " + std::to_string(without) + ": expected " + std::to_string(saved) +
                  " fewer";
      }
    }
  }
  return testing::end_worker(*world, error);
}

}  // namespace

class GptLayouts : public QObject {
  Q_OBJECT

#ifdef LATTICE_MPIEXEC
  // Reruns this program as `ranks` MPI ranks with `args` (one of the workers above) and
  // expects every rank to exit 0; `what` names the layout in the failure, with their output.
  static void expect_workers(int ranks, const QStringList& args, const QString& what) {
    static const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    const testing::Run run = testing::run_mpi(ranks, self, args, {}, ranks > 2 ? 180000 : 120000);
    QVERIFY2(run.exit_code == 0, qPrintable(what + ": " + run.err + run.out));
  }
  // --pipeline-worker's arguments (pipeline_worker()): TP, PP, chunks per rank, uneven first stage,
  // variant.
  static QStringList pipeline_args(int tp, int pp, int chunks, int uneven, const char* variant) {
    return {"--pipeline-worker",     QString::number(tp),     QString::number(pp),
            QString::number(chunks), QString::number(uneven), variant};
  }
#endif

 private slots:
  // The 16-bit dropout ops: the same masks on rounded activations.
  void tp1_bf16_step_with_dropout_is_within_bf16_tolerance() {
    const std::string d =
        compare_one_step<bf16>(config(1, true), ModelShard{}, nullptr, kHalfTolerance);
    QVERIFY2(d.empty(), ("bf16 with dropout: " + d).c_str());
  }

  void tp1_bf16_step_is_within_bf16_tolerance() {
    const std::string d = compare_one_step<bf16>(config(1), ModelShard{}, nullptr, kHalfTolerance);
    QVERIFY2(d.empty(), ("bf16: " + d).c_str());
  }

  void tp1_fp16_step_under_a_loss_scale_is_within_bf16_tolerance() {
    const std::string d =
        compare_one_step<fp16>(config(1), ModelShard{}, nullptr, kHalfTolerance, 1024.0f);
    QVERIFY2(d.empty(), ("fp16: " + d).c_str());
  }

  // Full recomputation: the recomputed activations are the forward's (the slot's dropout masks,
  // the group boundaries of the plan), uniform (groups of 1 and of 2) and block.
  void tp1_full_recompute_step_matches_the_whole_run() {
    using Method = std::pair<const char*, int>;
    for (const auto& [method, n] :
         {Method{"uniform", 1}, Method{"uniform", 2}, Method{"block", 1}}) {
      for (bool dropout : {false, true}) {
        const std::string d = compare_one_step(config(1, dropout), ModelShard{}, nullptr, {}, 1.0f,
                                               2, full(method, n, 2));
        QVERIFY2(d.empty(), qPrintable(QString("%1 %2%3: %4")
                                           .arg(method)
                                           .arg(n)
                                           .arg(dropout ? " with dropout" : "")
                                           .arg(d.c_str())));
      }
    }
  }

  void tp1_bf16_full_recompute_step_is_within_bf16_tolerance() {
    const std::string d = compare_one_step<bf16>(config(1, true), ModelShard{}, nullptr,
                                                 kHalfTolerance, 1.0f, 2, full("uniform", 1, 2));
    QVERIFY2(d.empty(), ("bf16, full uniform 1: " + d).c_str());
  }

  // The recomputed ln1 is a plain LayerNorm of the stored residual, the forward's a fused
  // residual add and LayerNorm that normalises the rounded sum: in bf16 and fp16 the two agree
  // bit for bit, and so does everything after them.
  void a_16_bit_recompute_step_equals_the_step_without_recomputation_bitwise() {
    ModelConfig c = pipeline_config(1, 4, true);
    const StepResult<bf16> bf16_plain = one_step<bf16>(c, {});
    const StepResult<bf16> bf16_uniform = one_step<bf16>(c, full("uniform", 2, 4));
    const StepResult<fp16> fp16_plain = one_step<fp16>(c, {});
    const StepResult<fp16> fp16_block = one_step<fp16>(c, full("block", 3, 4));
    for (const std::string* e :
         {&bf16_plain.error, &bf16_uniform.error, &fp16_plain.error, &fp16_block.error})
      QVERIFY2(e->empty(), e->c_str());
    QVERIFY2(bf16_plain.losses == bf16_uniform.losses, "bf16: token losses differ");
    QVERIFY2(bf16_plain.grads == bf16_uniform.grads, "bf16: gradients differ");
    QVERIFY2(fp16_plain.losses == fp16_block.losses, "fp16: token losses differ");
    QVERIFY2(fp16_plain.grads == fp16_block.grads, "fp16: gradients differ");
  }

  // Per slot a recomputed layer keeps nothing beyond residual[l]; the max_group layers of
  // scratch are shared by the slots.
  void full_recompute_shrinks_the_activation_category() {
    const ModelConfig c = config(1);  // two layers
    const size_t N = 2 * c.seq_length, C = c.hidden_size, F = c.ffn();
    // What the device's attention keeps for its backward: the log-sum-exps (B, NH, T).
    const size_t saved =
        cpu_ops<float>().attention_saved_elems(2, c.seq_length, c.num_attention_heads);
    const size_t a = sizeof(float);
    // ln1, qkv (3), atty, res_mid, ln2; fc1, gelu; the two LayerNorms' mean and rstd; saved.
    const size_t layer = (7 * N * C + 2 * N * F) * a + (4 * N + saved) * sizeof(float);
    const size_t kept = activation_bytes<float>(c, 3, {});
    QVERIFY(kept > 0);
    // uniform 1: 3 slots x 2 layers kept -> 1 layer of scratch.
    QCOMPARE(activation_bytes<float>(c, 3, full("uniform", 1, 2)), kept - 5 * layer);
    // uniform 2: one group of 2 -> 2 layers of scratch.
    QCOMPARE(activation_bytes<float>(c, 3, full("uniform", 2, 2)), kept - 4 * layer);
    // block 1: layer 0 recomputed (1 layer of scratch), layer 1 kept per slot.
    QCOMPARE(activation_bytes<float>(c, 3, full("block", 1, 2)), kept - 2 * layer);
    QCOMPARE(saved, size_t(2 * c.num_attention_heads * c.seq_length));
    // Selective recomputation has nothing to drop (Note [selective recomputation]): the same
    // activations and workspace as recomputing nothing.
    QCOMPARE(activation_bytes<float>(c, 3, selective(2)), kept);
    const size_t workspace = activation_bytes<float>(c, 3, {}, MemoryCategory::kWorkspace);
    QCOMPARE(activation_bytes<float>(c, 3, selective(2), MemoryCategory::kWorkspace), workspace);
  }

  // GptModel<double> on the CPU device's fp64 op list (--fp64) against the fp64 whole run that
  // keeps everything: with and without dropout, fully recomputed (uniform and block). (A TP 1
  // fp32 or fp64 step that recomputes nothing is the whole run itself: there is no such case.)
  void tp1_fp64_step_matches_the_fp64_whole_run() {
    const std::pair<const char*, RecomputePlan> plans[] = {
        {"full uniform 1", full("uniform", 1, 2)},
        {"full block 1", full("block", 1, 2)}};
    for (const auto& [name, plan] : plans) {
      for (bool dropout : {false, true}) {
        const std::string d = compare_one_step<double>(config(1, dropout), ModelShard{}, nullptr,
                                                       kDoubleTolerance, 1.0f, 2, plan);
        QVERIFY2(d.empty(), qPrintable(QString("fp64, %1%2: %3")
                                           .arg(name)
                                           .arg(dropout ? " with dropout" : "")
                                           .arg(d.c_str())));
      }
    }
  }

  void an_fp16_overflow_reaches_every_gradient_it_feeds() {
    // 2^32 / 32 tokens: the fp32 loss gradient is up to 2^27, beyond fp16's 65504.
    const float scale = 4294967296.0f;
    const std::vector<std::string> fp32 = non_finite_grads<float>(config(1), scale);
    QVERIFY2(fp32.empty(), qPrintable(QString("fp32 overflowed at 2^32: %1 tensors, first %2")
                                          .arg(fp32.size())
                                          .arg(fp32.empty() ? "" : fp32[0].c_str())));
    const std::vector<std::string> half = non_finite_grads<fp16>(config(1), scale);
    // Every tensor: the inf enters at the LM head and flows through the whole backward.
    const size_t tensors = ParamLayout(config(1), ModelShard{}).tensors().size();
    QVERIFY2(half.size() == tensors,
             qPrintable(QString("fp16 at 2^32: %1 of %2 gradient tensors non-finite")
                            .arg(half.size())
                            .arg(tensors)));
  }

#ifdef LATTICE_MPIEXEC
  void tp2_step_matches_the_whole_run() {
    expect_workers(2, {"--worker"}, "TP 2");
  }

  void pp2_iteration_matches_the_whole_run() {
    expect_workers(2, pipeline_args(1, 2, 1, 0, "fp32"), "PP 2");
  }

  // Each micro-batch's dropout seed reaches its forward and its backward (several micro-batches
  // in flight, so a slot must keep its own), and the second stage keys its masks by the global
  // layer index, as the whole run does.
  void pp2_iteration_with_dropout_matches_the_whole_run() {
    expect_workers(2, pipeline_args(1, 2, 1, 0, "dropout"), "PP 2 with dropout");
  }

  // 16-bit stages: the boundary tensors travel in the compute type (bf16, fp16).
  void pp2_bf16_and_fp16_iterations_are_within_16_bit_tolerance() {
    for (const char* variant : {"bf16", "fp16"}) {
      expect_workers(2, pipeline_args(1, 2, 1, 0, variant), QString("PP 2 ") + variant);
      if (QTest::currentTestFailed()) return;
    }
  }

  void tp2_pp2_iteration_matches_the_whole_run() {
    expect_workers(4, pipeline_args(2, 2, 1, 0, "fp32"), "TP 2 x PP 2");
  }

  // Sequence parallelism at TP 2: fp32, fp32 with dropout (also of one sequence), bf16 with
  // dropout, fp16 and fp64 (kept, full) shards against the whole run, and the
  // activation bytes it saves.
  void tp2_sequence_parallel_step_matches_the_whole_run() {
    expect_workers(2, {"--sp-worker"}, "TP 2 + SP");
  }

  // Stages exchange this rank's R rows; the masks of each rank's rows are the whole model's.
  void tp2_pp2_sequence_parallel_iteration_with_dropout_matches_the_whole_run() {
    expect_workers(4, pipeline_args(2, 2, 1, 0, "sp-dropout"), "TP 2 x PP 2 + SP with dropout");
  }

  void uneven_pp2_iteration_matches_the_whole_run() {
    // One layer on the first stage, three on the second.
    expect_workers(2, pipeline_args(1, 2, 1, 1, "fp32"), "PP 2, 1 + 3 layers");
  }

  // Several micro-batches in flight share the recompute scratch: each backward recomputes its
  // own slot's activations with its own dropout seed.
  void pp2_iteration_with_full_recompute_matches_the_whole_run() {
    for (const char* variant : {"uniform", "block-dropout"}) {
      expect_workers(2, pipeline_args(1, 2, 1, 0, variant), QString("PP 2 ") + variant);
      if (QTest::currentTestFailed()) return;
    }
    expect_workers(4, pipeline_args(2, 2, 1, 0, "uniform"), "TP 2 x PP 2 uniform");
    if (QTest::currentTestFailed()) return;
    // Interleaved: each chunk (one layer) has its own plan and scratch.
    expect_workers(2, pipeline_args(1, 2, 2, 0, "uniform"), "PP 2 x 2 chunks uniform");
  }

  // fp64 stages against the fp64 whole run: the boundary tensors travel in double; with dropout,
  // each micro-batch's backward recomputes its probabilities with its own dropout key.
  void pp2_fp64_iteration_matches_the_fp64_whole_run() {
    for (const char* variant : {"fp64", "fp64-dropout"}) {
      expect_workers(2, pipeline_args(1, 2, 1, 0, variant), QString("PP 2 ") + variant);
      if (QTest::currentTestFailed()) return;
    }
  }

  void interleaved_pp2_iteration_matches_the_whole_run() {
    expect_workers(2, pipeline_args(1, 2, 2, 0, "fp32"), "PP 2 x 2 chunks");
  }

  void interleaved_pp4_iteration_matches_the_whole_run() {
    expect_workers(4, pipeline_args(1, 4, 2, 0, "fp32"), "PP 4 x 2 chunks");
  }

  // Packed sequences (Note [packed sequences]): every virtual stage, the middle ones included,
  // loads the micro-batch's positions and masks its attention by document, as the whole run.
  void packed_pipeline_iterations_match_the_whole_run() {
    expect_workers(2, pipeline_args(1, 2, 2, 0, "fp64-packed"), "PP 2 x 2 chunks, packed");
    if (QTest::currentTestFailed()) return;
    expect_workers(4, pipeline_args(2, 2, 1, 0, "sp-packed"), "TP 2 x PP 2 + SP, packed");
  }
#endif
};

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--worker") return worker();
  if (argc == 2 && std::string(argv[1]) == "--sp-worker") return sp_worker();
  if (argc == 7 && std::string(argv[1]) == "--pipeline-worker")
    return pipeline_worker(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
                           std::atoi(argv[5]), argv[6]);
  GptLayouts test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_gpt_layouts.moc"
