// The training loop of one rank, written once for every device (trainer.h; docs/one-engine.md
// step 12): its model chunks run the pipeline schedule over its data-parallel slice of each
// global batch, gradients are summed over the data-parallel group in buckets, the gradient norm
// is taken over the model-parallel group, and every rank steps the same way. With one rank this
// is plain gradient accumulation. Everything lives in the device's memory; the host reads the
// losses and the loss scaler's overflow flag through copies, and stages micro-batches and
// checkpoints where the device's memory is not host memory. Deterministic: data, dropout and
// initialisation derive from --seed alone, and every kernel reduces in a fixed order for a
// fixed thread count.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>
#include <type_traits>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"
#include "core/host_memory.h"
#include "core/system_sampler.h"
#include "device/backends.h"
#include "device/ops.h"
#include "lattice/cpu_isa.h"
#include "lattice/dropout_hash.h"
#include "lattice/instability.h"
#include "lattice/kernels.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/grad_buckets.h"
#include "optim/grad_reducer.h"
#include "optim/grad_scaling.h"
#include "parallel/context_split.h"
#include "parallel/device_comms.h"
#include "parallel/groups.h"
#include "parallel/model_chunks.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "train/data_feed.h"
#include "train/host_memory_check.h"
#include "train/rank_reports.h"
#include "train/task_eval.h"
#include "train/trainer.h"

namespace lattice {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "(0.5, 0.5, 0.5)": a per-channel image mean or std, for messages.
std::string channels(const std::array<float, 3>& x) {
  char text[64];
  std::snprintf(text, sizeof text, "(%g, %g, %g)", x[0], x[1], x[2]);
  return text;
}

// Fault injection for tests (docs/studio.md "Instability"): LATTICE_INJECT_SPIKE=N multiplies
// iteration N's gradients by 1000 (a grad-norm spike; clipping keeps the update sane),
// LATTICE_INJECT_NAN=N makes iteration N's gradients NaN. 0 when unset.
int injected_iteration(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

SpikeAction spike_action(const std::string& on_spike) {
  return on_spike == "skip"       ? SpikeAction::kSkip
         : on_spike == "stop"     ? SpikeAction::kStop
         : on_spike == "rollback" ? SpikeAction::kRollback
                                  : SpikeAction::kWarn;
}

std::string exit_duration_message(int iteration, double minutes) {
  std::ostringstream s;
  s << "exiting after iteration " << iteration << " (--exit-duration-in-mins " << minutes << ")";
  return s.str();
}

// The compute type's words: "fp32", "bf16 with fp32 master weights and grads", ...
template <typename T>
const char* precision_name(const TrainOptions& o) {
  if constexpr (std::is_same_v<T, double>) return "fp64";
  if constexpr (std::is_same_v<T, bf16>) return "bf16 with fp32 master weights and grads";
  if constexpr (std::is_same_v<T, fp16>)
    return "fp16 with fp32 master weights and grads, loss scaling";
  return o.fp16 ? "fp16 loss scaling over fp32 arithmetic" : "fp32";
}

template <typename T>
std::string describe(const TrainOptions& o, const ParallelLayout& layout, const Device& device) {
  const ModelConfig& m = o.model;
  std::ostringstream s;
  s << "GPT " << m.num_layers << " layers, hidden " << m.hidden_size << ", ffn " << m.ffn() << ", "
    << m.num_attention_heads << " heads, seq " << m.seq_length << ", vocab " << m.vocab_size
    << " (padded " << m.padded_vocab_size() << ")";
  if (m.has_vision()) {
    const VisionConfig& v = m.vision;
    s << "; vision tower " << m.vision_model_type << " " << v.num_layers << " layers, hidden "
      << v.hidden_size << ", " << v.img_h << "x" << v.img_w << " images in " << v.patch_dim
      << "px patches (" << v.patches() << " tokens each)";
    if (m.freeze_lm || m.freeze_vision)
      s << ", frozen: " << (m.freeze_lm ? "language model" : "")
        << (m.freeze_lm && m.freeze_vision ? " and " : "") << (m.freeze_vision ? "encoder" : "");
  }
  s << "; micro batch " << o.micro_batch_size << " x " << o.num_micro_batches() / layout.dp
    << " x DP " << layout.dp << " = global batch " << o.global_batch_size << "; ";
  if (layout.world > 1) {
    s << layout.world << " ranks (TP " << layout.tp << ", PP " << layout.pp;
    if (layout.vpp > 1) s << " x " << layout.vpp << " virtual";
    s << ", DP " << layout.dp << (o.parallel.sequence_parallel ? ", sequence parallel" : "")
      << (o.parallel.use_distributed_optimizer ? ", distributed optimizer" : "") << "), ";
  }
  if (!o.parallel.recompute_granularity.empty())
    s << o.parallel.recompute_granularity << " recomputation, ";
  s << device.describe() << ", " << precision_name<T>(o);
  return s.str();
}

template <typename T>
class Trainer {
 public:
  // device: this rank's (train() made it); backend: where it came from (null: the CPU).
  Trainer(const TrainOptions& o, ModelConfig mc, ProcessGroups& g, MetricsSink& sink,
          std::unique_ptr<Device> device, const DeviceBackend* backend)
      : o_(o),
        mc_(std::move(mc)),
        g_(g),
        sink_(sink),
        backend_(backend),
        scaling_(o),
        spikes_(o.spike_window, o.spike_z) {
    rank_.device = std::move(device);
  }
  Result<TrainSummary> run();

 private:
  Status build_model();
  Status fill_weights(GptModel<T>& chunk, AdamW<T>& adam);
  // skipped: the optimizer did not step (inf/NaN gradients on some rank, or --on-spike skip or
  // stop at one of `events`, the iteration's instability).
  Status step(int it, double& loss, double& norm, double lr, bool& skipped,
              std::vector<InstabilityEvent>& events);
  Status finish_gradients();
  // The mean validation loss; for SFT `targets` receives the number of loss targets it
  // averaged over (0: nothing to average, and the loss is meaningless).
  Result<double> validate(const SampleSource& source, int64_t& position, int64_t& targets);
  Status load(TrainState& state) { return load_rank_checkpoint(rank_, g_, o_, sink_, state); }
  Status save(const TrainState& state);
  Status save_hf() { return save_rank_hf(rank_, g_, o_, mc_, sink_); }
  // Iterations whose rank reports (and pipeline timeline) rank 0 gathers.
  bool reported(int it) const { return it == 1 || it % o_.log_interval == 0; }
  // Every rank's report on rank 0: phase times since the previous report divided by
  // `iterations` (the iterations they cover: per-iteration means, as Megatron normalises its
  // timers by the log interval; 1 for the summary's whole-run totals).
  std::vector<RankReport> gather_reports(bool with_timeline, int iterations);
  void add_box(TimelineBox::Kind kind, Clock::time_point t0, Clock::time_point t1) {
    if (timeline_.on()) timeline_.add(kind, g_.coord.pp, -1, t0, t1);
  }
  double all_reduce_scalar(double value, Comm& comm, ReduceOp op = ReduceOp::kSum);
  void fail_collectively(const Status& s);

  const TrainOptions& o_;
  ModelConfig mc_;
  ProcessGroups& g_;
  MetricsSink& sink_;
  const DeviceBackend* backend_;
  GradScaling scaling_;   // --fp16's loss scaler (disabled: scale 1)
  SpikeDetector spikes_;  // the same decisions on every rank (lattice/instability.h)
  RankModel<T> rank_;
  std::unique_ptr<PipelineExecutor<T>> executor_;  // made after rank_, gone before it
  IterationTimeline timeline_;                     // on during reported iterations
  // (M, N) every micro-batch's token losses on the last stage, in device memory, and the loss
  // scaler's overflow flag (1) there; read on the host after a copy.
  accum_t<T>* device_losses_ = nullptr;
  float* device_found_inf_ = nullptr;
  std::vector<accum_t<T>> losses_;  // the host's copy of device_losses_
  // The host's copy of the losses (the ranks that report the loss: tensor-parallel rank 0 of
  // the last stage), then the sum of their per-micro-batch means; with per_token (SFT) the
  // plain sum of the token losses (the ignored tokens' are 0).
  Result<double> loss_sum(int micro_batches, bool per_token = false);
  // SFT: the number of loss targets in the global batch at `position` of `source` (Note [SFT
  // loss normalisation]); every rank counts its data-parallel slice and the data-parallel group
  // sums.
  int64_t global_targets(const SampleSource& source, int64_t position);
  bool sft() const { return data_.train->has_loss_mask(); }
  bool reports_loss() const { return g_.last_stage() && g_.coord.tp == 0; }
  // Micro-batch `mb` of the batch at `position` of `source` into the slot's device buffers
  // (B, T): written in place on a host-addressable device, else staged and copied on compute.
  // Each of tokens, targets and positions may be null (the executor's Loader: a middle stage
  // of a packed run asks for positions only; positions only when it packs).
  // first: the first virtual stage's activations (the executor's Loader), where a
  // vision-language model's images go (GptModel::load_images) after the tokens.
  Status load_micro_batch(const SampleSource& source, int64_t position, int mb, int32_t* tokens,
                          int32_t* targets, int32_t* positions = nullptr,
                          GptActivations<T>* first = nullptr);
  // After an iteration or an evaluation: the host waits for the device, then the pipeline's
  // phase times and boxes and the chunks' op times are read from the marks.
  Status collect_marks();
  DataSources data_;
  std::vector<int32_t> sample_, staged_tokens_, staged_targets_, staged_positions_;
  std::vector<float> images_;   // (B I, Cin, img_h, img_w) a vision-language micro-batch's images
  std::vector<int32_t> split_;  // context parallelism: one tensor's rows of this CP rank
  int64_t consumed_ = 0;
  double moe_aux_loss_ = std::numeric_limits<double>::quiet_NaN();  // step()'s, MoE models
  std::vector<double> moe_load_;  // (num_layers, E) step()'s routes per expert on this rank
  // The iteration's routes per expert summed over every rank (a collective), by MoE layer.
  std::map<int, std::vector<int64_t>> moe_expert_load();
  double optimizer_seconds_ = 0;
  PhaseTimes reported_;  // totals at the previous report
  int reported_at_ = 0;  // the iteration of the previous report (or where --load resumed)
  PhaseTimes totals_;
  SystemSampler system_;  // CPU use between reports, memory at each
};

template <typename T>
double Trainer<T>::all_reduce_scalar(double value, Comm& comm, ReduceOp op) {
  if (comm.size() > 1)
    if (Status s = comm.all_reduce(&value, 1, DType::kFloat64, op); !s)
      comm.abort("could not reduce a scalar: " + s.message(), 1);
  return value;
}

// Every rank routed its own tokens over all E experts (data, context and expert-parallel ranks
// hold different tokens; each stage its own layers; tensor-parallel ranks count once), so the
// world's sum is the iteration's load. Exact in float64 below 2^53 routes.
template <typename T>
std::map<int, std::vector<int64_t>> Trainer<T>::moe_expert_load() {
  std::vector<double> sum = moe_load_;
  if (g_.world->size() > 1 && !sum.empty())
    if (Status s = g_.world->all_reduce(sum.data(), sum.size(), DType::kFloat64, ReduceOp::kSum);
        !s)
      g_.world->abort("could not reduce the experts' load: " + s.message(), 1);
  std::map<int, std::vector<int64_t>> load;
  const int E = mc_.num_experts;
  for (int l = 0; l < mc_.num_layers && !sum.empty(); l++)
    if (mc_.is_moe_layer(l))
      load[l] = std::vector<int64_t>(sum.begin() + static_cast<size_t>(l) * E,
                                     sum.begin() + static_cast<size_t>(l + 1) * E);
  return load;
}

// A chunk's first weights: Megatron's initialisation or --load-hf's slices (a later --load
// replaces them), into the master arena, or in a 16-bit run (Note [master weights in the
// optimizer]) into the compute copy and the optimizer's pieces.
template <typename T>
Status Trainer<T>::fill_weights(GptModel<T>& chunk, AdamW<T>& adam) {
  using G = accum_t<T>;
  if (o_.load_hf.empty())
    return chunk.init_weights(o_.seed, [&adam](size_t offset, const G* values, size_t n) {
      return adam.load_master(values, offset, n);
    });
  // This chunk's slices of the whole file, in the arena's type (fp64 runs widen).
  std::vector<G> arena;
  host_assign(arena, chunk.arena_size(), MemoryCategory::kWeights);
  std::vector<float> widened;
  float* slices = nullptr;
  if constexpr (std::is_same_v<G, float>) {
    slices = arena.data();
  } else {
    host_assign(widened, chunk.arena_size(), MemoryCategory::kWeights);
    slices = widened.data();
  }
  if (Status s = import_hf(o_.load_hf, mc_, chunk.layout(), slices); !s)
    return Status::invalid_argument("--load-hf: " + s.message());
  if constexpr (!std::is_same_v<G, float>) std::copy(widened.begin(), widened.end(), arena.begin());
  chunk.upload(arena.data());
  if (!chunk.params())
    if (Status s = adam.load_master(arena.data(), 0, arena.size()); !s) return s;
  return rank_.device->error();
}

template <typename T>
Status Trainer<T>::build_model() {
  const ParallelLayout& L = g_.layout;
  const ParallelOptions& par = o_.parallel;
  // Dense gradients are reduced (and the distributed optimizer sharded) over DP x CP: every CP
  // rank's gradient is its rows' share (Note [context parallelism] in model/gpt_layer.cpp).
  const int reduce_ranks = L.dp * L.cp;
  const size_t bucket = ddp_bucket_elems(par, reduce_ranks);
  // Note [master weights in the optimizer] (optim/adamw.h): a 16-bit run's master is its
  // optimizers'.
  constexpr bool master_in_optimizer = !std::is_same_v<T, accum_t<T>>;
  Device& device = *rank_.device;
  // Every chunk's data-parallel collectives on one side stream, in the order backward ends the
  // buckets (optim/grad_reducer.h).
  Result<Stream*> dp_stream = device.new_stream("data-parallel");
  if (!dp_stream) return dp_stream.status();
  Result<DeviceComms> comms = make_device_comms(device, g_);
  if (!comms) return comms.status();
  rank_.comms = std::move(*comms);
  for (int c = 0; c < L.vpp; c++) {
    ModelShard shard = shard_of(L, g_.coord, c, par.sequence_parallel);
    shard.cp_rank = g_.coord.cp;
    shard.cp_size = L.cp;
    // Expert parallelism: this rank's experts of each MoE layer (Note [expert parallelism] in
    // model/gpt_moe.cpp); their tokens move over the EP group.
    shard.ep_rank = g_.expert_coord.ep;
    shard.ep_size = L.ep;
    // Expert TP: 1 under TP whole experts (Note [expert tensor parallelism 1]), between 1 and
    // TP split over expert-TP groups (Note [expert tensor parallelism e]).
    shard.etp_size = L.etp;
    const RecomputePlan plan = RecomputePlan::make(par.recompute_granularity, par.recompute_method,
                                                   par.recompute_num_layers, shard.num_layers(mc_));
    Result<std::unique_ptr<GptModel<T>>> chunk = GptModel<T>::create(
        mc_, o_.micro_batch_size, device, shard, rank_.comms.tp.get(), plan, rank_.comms.cp.get(),
        rank_.comms.expert.get(), rank_.comms.expert_tensor.get(),
        master_in_optimizer ? MasterWeights::kInOptimizer : MasterWeights::kWhole);
    if (!chunk) return chunk.status();
    (*chunk)->set_op_times(o_.profile || device.capabilities().cheap_marks);
    rank_.chunks.push_back(std::move(*chunk));
  }
  for (auto& chunk : rank_.chunks) {
    // The distributed optimizer gathers the weights the kernels read (a 16-bit run's copy; an
    // fp32 or fp64 run's master).
    Result<std::unique_ptr<GradReducer<accum_t<T>>>> buckets = GradReducer<accum_t<T>>::create(
        device, **dp_stream, chunk->layout(), rank_.comms.dp.get(), par.use_distributed_optimizer,
        bucket, chunk->grads(), chunk->compute_params(), dtype_of<T>(),
        rank_.comms.expert_data.get());
    if (!buckets) return buckets.status();
    // The chunk's optimizer shard is cut as its reducer's buckets (optimizer_shard.h).
    Result<std::unique_ptr<AdamW<T>>> adam =
        AdamW<T>::create(device,
                         optimizer_shard(o_, chunk->layout(), reduce_ranks, g_.data_context->rank(),
                                         g_.expert_data->size(), g_.expert_data->rank()),
                         o_.optim, master_in_optimizer);
    if (!adam) return adam.status();
    if (Status s = fill_weights(*chunk, **adam); !s) return s;
    rank_.optimizers.push_back(std::move(*adam));
    // The tied word embedding of a multi-stage pipeline is summed over the embedding group
    // first (finish_gradients), so backward does not release its bucket.
    const int skip = g_.in_embedding_group() ? chunk->layout().word_embedding_index() : -1;
    GradReducer<accum_t<T>>* b = buckets->get();
    Comm* world = g_.world;
    chunk->set_grads_ready([b, skip, world](int first, int last) {
      for (int i = first; i < last; i++)
        if (i != skip)
          if (Status s = b->mark_ready(i, i + 1); !s)
            world->abort("data-parallel gradient reduction failed: " + s.message(), 1);
    });
    rank_.buckets.push_back(std::move(*buckets));
  }
  std::vector<GptModel<T>*> chunks;
  for (auto& c : rank_.chunks) chunks.push_back(c.get());
  const DeviceComms& c = rank_.comms;
  const PipelineComms channels{c.channel(0), c.channel(1), c.channel(2), c.channel(3)};
  const int M = o_.num_micro_batches() / L.dp;
  Result<std::unique_ptr<PipelineExecutor<T>>> executor = PipelineExecutor<T>::create(
      chunks, device, channels, L.pp, g_.coord.pp, chunk_peaks(L.pp, g_.coord.pp, L.vpp, M));
  if (!executor) return executor.status();
  executor_ = std::move(*executor);
  // This rank's rows: T / CP of each sequence.
  const size_t N = static_cast<size_t>(o_.micro_batch_size) * mc_.seq_length / L.cp;
  device_losses_ = static_cast<accum_t<T>*>(
      device.allocate(N * M * sizeof(accum_t<T>), MemoryCategory::kWorkspace));
  if (!device_losses_)
    return device.out_of_memory(MemoryCategory::kWorkspace, N * M * sizeof(accum_t<T>));
  device_found_inf_ =
      static_cast<float*>(device.allocate(sizeof(float), MemoryCategory::kWorkspace));
  if (!device_found_inf_) return device.out_of_memory(MemoryCategory::kWorkspace, sizeof(float));
  host_assign(losses_, N * M, MemoryCategory::kWorkspace);
  // Staged whole sequences (B, T): on a device the host cannot write, and under context
  // parallelism, whose ranks keep their rows of them.
  const size_t whole = static_cast<size_t>(o_.micro_batch_size) * mc_.seq_length;
  if (!device.capabilities().host_addressable || L.cp > 1) {
    staged_tokens_.assign(whole, 0);
    staged_targets_.assign(whole, 0);
  }
  staged_positions_.assign(o_.sft_packing ? whole : 0, 0);  // checked on the host before use
  if (L.cp > 1) split_.assign(N, 0);
  // --sft-packing: every stage's attention reads the micro-batch's positions (Note [packed
  // sequences] in gpt_layer.cpp), so the executor asks for them on every chunk.
  executor_->set_packed_sequences(o_.sft_packing);
  return device.synchronize(device.compute());
}

template <typename T>
Status Trainer<T>::load_micro_batch(const SampleSource& source, int64_t position, int mb,
                                    int32_t* tokens, int32_t* targets, int32_t* positions,
                                    GptActivations<T>* first) {
  // The ranks of a tensor-parallel group read the same micro-batch: their data-parallel rank's.
  Device& device = *rank_.device;
  const ParallelLayout& L = g_.layout;
  const bool staged = !device.capabilities().host_addressable || L.cp > 1;
  if (first && mc_.has_vision()) {  // Note [image rows] in model/gpt_vision.cpp
    if (Status s = load_micro_batch(source, position, mb, tokens, targets, positions); !s) return s;
    if (Status s = fill_micro_batch_images(source, position, mb, o_.micro_batch_size, L.dp,
                                           g_.coord.dp, images_.data());
        !s)
      return s;
    // The tokens as written: in place on a host-addressable device, else the staging.
    const int32_t* host_tokens = staged ? staged_tokens_.data() : tokens;
    return rank_.chunks[0]->load_images(*first, host_tokens, images_.data());
  }
  int32_t* host_positions = positions ? staged_positions_.data() : nullptr;
  if (Status s = fill_micro_batch(
          source, position, mb, o_.micro_batch_size, L.dp, g_.coord.dp, mc_.vocab_size, sample_,
          staged && tokens ? staged_tokens_.data() : tokens,
          staged && targets ? staged_targets_.data() : targets, host_positions);
      !s)
    return s;
  if (host_positions) {
    const std::string bad =
        packed_positions_error(host_positions, o_.micro_batch_size, mc_.seq_length);
    if (!bad.empty()) return Status::invalid_argument("packed sample positions: " + bad);
  }
  // From pageable host memory: read before copy() returns, so the staging may be reused.
  // Context parallelism: this CP rank's rows of each sequence (context_split.h), the packed
  // positions with them (Note [context parallelism] in model/gpt_layer.cpp).
  const int B = o_.micro_batch_size, S = mc_.seq_length;
  const size_t bytes = static_cast<size_t>(B) * S / L.cp * sizeof(int32_t);
  const auto upload = [&](int32_t* to, const std::vector<int32_t>& from) {
    if (!to) return;
    const int32_t* rows = from.data();
    if (L.cp > 1) {
      cp_split(split_.data(), from.data(), B, S, 1, g_.coord.cp, L.cp);
      rows = split_.data();
    }
    device.copy(to, rows, bytes, CopyKind::kHostToDevice, device.compute());
  };
  if (staged) {
    upload(tokens, staged_tokens_);
    upload(targets, staged_targets_);
  }
  upload(positions, staged_positions_);
  return Status::ok();
}

template <typename T>
Result<double> Trainer<T>::loss_sum(int micro_batches, bool per_token) {
  if (!reports_loss()) return 0.0;
  Device& device = *rank_.device;
  device.copy(losses_.data(), device_losses_, losses_.size() * sizeof(accum_t<T>),
              CopyKind::kDeviceToHost, device.compute());
  if (Status s = device.synchronize(device.compute()); !s) return s;
  // Each micro-batch's mean over its tokens, then their sum (the schedule's order does not
  // matter: rows are by micro-batch).
  const size_t N = losses_.size() / static_cast<size_t>(micro_batches);
  double total = 0;
  if (per_token) {
    for (size_t i = 0; i < N * micro_batches; i++) total += static_cast<double>(losses_[i]);
    return total;
  }
  for (int mb = 0; mb < micro_batches; mb++) {
    double sum = 0;
    for (size_t i = 0; i < N; i++) sum += static_cast<double>(losses_[mb * N + i]);
    total += sum / static_cast<double>(N);
  }
  return total;
}

// Note [SFT loss normalisation]: with a loss mask the loss is Megatron's per-token loss over the
// global batch, sum of the target tokens' losses / number of targets in the whole global batch
// (every micro-batch of every data-parallel rank), so any layout and any split of the batch into
// micro-batches gives the same loss and gradients. The count must be known before the first
// micro-batch's backward (it is in grad_scale = loss_scale / count), so every rank reads the
// masks of its data-parallel slice on the host before the schedule (memory-mapped, cheap next to
// a step) and the data-parallel group sums the counts: one scalar all-reduce, rather than every
// rank reading the whole global batch. Pretraining keeps its B * T * M * DP, bit for bit.
template <typename T>
int64_t Trainer<T>::global_targets(const SampleSource& source, int64_t position) {
  const ParallelLayout& L = g_.layout;
  const int M = o_.num_micro_batches() / L.dp;
  const auto mine = static_cast<double>(
      count_targets(source, position, M, o_.micro_batch_size, L.dp, g_.coord.dp));
  return static_cast<int64_t>(all_reduce_scalar(mine, *g_.dp));
}

template <typename T>
Status Trainer<T>::collect_marks() {
  Device& device = *rank_.device;
  if (Status s = device.synchronize(device.compute()); !s) return s;
  executor_->collect_times(&timeline_);
  for (auto& chunk : rank_.chunks) chunk->collect_op_times();
  device.reset_marks();
  return Status::ok();
}

template <typename T>
Status Trainer<T>::finish_gradients() {
  if (g_.in_embedding_group()) {
    // Sum the word-embedding gradient of the first and last stage (they are one tensor).
    GptModel<T>& chunk = g_.first_stage() ? *rank_.chunks.front() : *rank_.chunks.back();
    const int index = chunk.layout().word_embedding_index();
    const ParamTensor& t = chunk.layout().tensors()[index];
    // A frozen embedding (LoRA, --freeze-LM) has no gradient on either stage: nothing to sum.
    if (!t.frozen) {
      const auto t0 = Clock::now();
      if (Status s = rank_.comms.embedding->all_reduce(chunk.grads() + t.grad_offset, t.numel,
                                                       dtype_of<accum_t<T>>(), ReduceOp::kSum,
                                                       rank_.device->compute());
          !s)
        return s;
      totals_.embedding_comm += seconds_since(t0);
      add_box(TimelineBox::kEmbeddingComm, t0, Clock::now());
    }
    GradReducer<accum_t<T>>& b = g_.first_stage() ? *rank_.buckets.front() : *rank_.buckets.back();
    if (Status s = b.mark_ready(index, index + 1); !s) return s;
  }
  const auto t0 = Clock::now();
  for (auto& b : rank_.buckets)
    if (Status s = b->finish(); !s) return s;
  totals_.dp_comm += seconds_since(t0);
  if (g_.layout.dp > 1) add_box(TimelineBox::kDpComm, t0, Clock::now());
  return Status::ok();
}

template <typename T>
Status Trainer<T>::step(int it, double& loss, double& norm, double lr, bool& skipped,
                        std::vector<InstabilityEvent>& events) {
  const ParallelLayout& L = g_.layout;
  const int M = o_.num_micro_batches() / L.dp, B = o_.micro_batch_size;
  // The loss scale is a power of two (dynamic) or the user's --loss-scale: with fp32
  // arithmetic a power of two scales every gradient exactly, so --fp16 on the CPU trains as
  // fp32 does until an overflow.
  const double loss_scale = scaling_.loss_scale();
  const bool per_token = sft();  // Note [SFT loss normalisation]
  const int64_t targets = per_token ? global_targets(*data_.train, consumed_) : 0;
  if (per_token && targets == 0) {
    // Nothing to learn from: no step, no NaN; the data moves on as after any iteration.
    if (g_.world->rank() == 0)
      sink_.on_message("iteration " + std::to_string(it) +
                       ": every target of the global batch is masked (no assistant tokens in its " +
                       std::to_string(o_.global_batch_size) + " samples); the step is skipped");
    loss = 0, norm = 0, skipped = true;
    return Status::ok();
  }
  const double denominator =
      per_token ? static_cast<double>(targets) : static_cast<double>(B) * mc_.seq_length * M * L.dp;
  // The kernels take grad_scale as a float: 1 / count rounds (a power of two, B*T*M*DP, does
  // not); --fp64 corrects the rounding after backward, so its gradients are the exact mean's.
  const float grad_scale = static_cast<float>(loss_scale / denominator) *
                           (it == injected_iteration("LATTICE_INJECT_SPIKE") ? 1000.0f : 1.0f);
  for (size_t c = 0; c < rank_.chunks.size(); c++) {
    rank_.chunks[c]->zero_grads();
    rank_.buckets[c]->start_iteration();
  }
  const int dp_rank = g_.coord.dp;
  auto load = [&](int mb, int32_t* tokens, int32_t* targets, int32_t* positions,
                  GptActivations<T>* first) {
    return load_micro_batch(*data_.train, consumed_, mb, tokens, targets, positions, first);
  };
  // Dropout masks follow the micro-batch's place in the global batch, so they match one
  // process running the whole batch (data-parallel rank r's micro-batch m is global m*DP+r).
  auto seed = [&](int mb) { return kernels::dropout_key(o_.seed, it, mb * L.dp + dp_rank, 0); };
  if (Status s = executor_->train(M, load, seed, grad_scale, device_losses_); !s) return s;
  if (Status s = collect_marks(); !s) return s;
  if (Status s = finish_gradients(); !s) return s;
  Device& device = *rank_.device;
  if (it == injected_iteration("LATTICE_INJECT_NAN")) {
    const accum_t<T> nan = NAN;
    device.copy(rank_.chunks[0]->grads(), &nan, sizeof nan, CopyKind::kHostToDevice,
                device.compute());
  }
  if constexpr (std::is_same_v<accum_t<T>, double>) {
    const double exact = loss_scale / denominator;
    const double used = static_cast<float>(exact);
    if (per_token && used != exact)
      for (auto& c : rank_.chunks)  // scales the gradients (the flag is the scaler's business)
        device.template ops<T>()->unscale_and_check(c->grads(), c->grad_size(), exact / used,
                                                    device_found_inf_);
  }
  // The loss lives on the last stage: its tensor-parallel rank 0 of every data-parallel
  // replica contributes its share, and every rank learns the mean (before the update: the
  // spike detector reads it).
  Result<double> losses = loss_sum(M, per_token);
  if (!losses) return losses.status();
  // Under context parallelism every CP rank reports its rows (as many as any other's): the mean
  // of their means is the sequence's.
  loss = per_token ? all_reduce_scalar(*losses, *g_.world) / static_cast<double>(targets)
                   : all_reduce_scalar(*losses / (static_cast<double>(M) * L.dp * L.cp), *g_.world);
  if (mc_.moe()) {  // every stage's MoE layers, every data-parallel replica's micro-batches
    double aux = 0;
    for (auto& c : rank_.chunks) aux += c->take_moe_aux_loss_sum();
    // Counted once per expert-TP group: at expert TP = TP once per TP group; with whole experts
    // (expert TP 1 under TP) each TP rank has routed its own rows, a part of the sum (Note
    // [expert tensor parallelism 1]), with expert TP e each group of e TP ranks.
    if (g_.coord.tp % std::min(L.etp, L.tp) != 0) aux = 0;
    moe_aux_loss_ = all_reduce_scalar(aux / (static_cast<double>(M) * L.dp), *g_.world);
    moe_load_.assign(static_cast<size_t>(mc_.num_layers) * mc_.num_experts, 0.0);
    for (auto& c : rank_.chunks) c->take_moe_load(moe_load_);
    if (g_.coord.tp != 0) std::fill(moe_load_.begin(), moe_load_.end(), 0.0);  // as aux
  }

  const auto t0 = Clock::now();
  skipped = false;
  if (scaling_.enabled()) {
    // The overflow test is the op (ops.h unscale_and_check) over each chunk's whole arena,
    // its flag in device memory.
    Ops<T>& ops = *device.template ops<T>();
    device.zero(device_found_inf_, sizeof(float), device.compute());
    for (auto& c : rank_.chunks)
      ops.unscale_and_check(c->grads(), c->grad_size(), static_cast<accum_t<T>>(1.0 / loss_scale),
                            device_found_inf_);
    float found_inf = 0;
    device.copy(&found_inf, device_found_inf_, sizeof found_inf, CopyKind::kDeviceToHost,
                device.compute());
    if (Status s = device.synchronize(device.compute()); !s) return s;
    Result<bool> skip = scaling_.agree(found_inf > 0, *g_.world);
    if (!skip) return skip.status();
    skipped = *skip;
  }
  // Global norm: each parameter counted once over the model-parallel group; with the
  // distributed optimizer each data-parallel rank holds a shard, so sum over the world (an
  // expert-parallel expert's shards over its expert-data group: once too). Without it, under
  // expert parallelism each EP rank holds other experts: their squares are summed over the EP
  // group first; with whole experts (expert TP 1 under TP) that sum is the stage's experts,
  // added by tensor-parallel rank 0 alone; with expert TP e by the TP ranks of the first
  // expert-TP group (their slices of the stage's experts).
  const bool distributed = o_.parallel.use_distributed_optimizer && g_.layout.dp * g_.layout.cp > 1;
  const bool experts_apart = mc_.moe() && g_.layout.expert_grid() && !distributed;
  double squares = 0, expert_squares = 0;
  for (size_t c = 0; c < rank_.chunks.size(); c++) {
    squares += rank_.optimizers[c]->sum_squares(rank_.chunks[c]->grads(),
                                                experts_apart ? NormPart::kDense : NormPart::kAll);
    if (experts_apart)
      expert_squares +=
          rank_.optimizers[c]->sum_squares(rank_.chunks[c]->grads(), NormPart::kExperts);
  }
  if (experts_apart) {
    expert_squares = all_reduce_scalar(expert_squares, *g_.expert);
    if (g_.coord.tp < g_.layout.etp) squares += expert_squares;
  }
  Comm& norm_group = distributed ? *g_.world : *g_.model;
  norm = std::sqrt(all_reduce_scalar(squares, norm_group));
  // Instability, the same on every rank (all-reduced loss and norm); an --fp16 overflow is the
  // scaler's, not an event. skip and stop leave the weights as they are.
  if (!skipped) events = spikes_.check(it, loss, norm);
  for (InstabilityEvent& e : events) e.action = spike_action(o_.on_spike);
  skipped = skipped || (!events.empty() && events[0].action != SpikeAction::kWarn);
  // fp32 without a scaler: a non-finite norm skips the step as well (every rank sees the
  // same all-reduced norm).
  skipped = skipped || !std::isfinite(norm);
  if (!skipped) {
    const double coeff = clip_coefficient(norm, o_.optim.clip_grad);
    for (size_t c = 0; c < rank_.chunks.size(); c++) {
      GptModel<T>& m = *rank_.chunks[c];
      // A 16-bit run's step also rounds the updated weights into the compute copy.
      T* copy = std::is_same_v<T, accum_t<T>> ? nullptr : m.compute_params();
      rank_.optimizers[c]->update(m.params(), m.grads(), lr, coeff, copy);
    }
  }
  totals_.optimizer += seconds_since(t0);
  const auto t1 = Clock::now();
  add_box(TimelineBox::kOptimizer, t0, t1);
  if (!skipped)
    for (size_t c = 0; c < rank_.buckets.size(); c++) {
      // The step rounded each owner's pieces into the 16-bit copy; the gather moves that copy.
      if (Status s = rank_.buckets[c]->gather_params(); !s) return s;
    }
  totals_.dp_comm += seconds_since(t1);
  if (g_.layout.dp > 1 && o_.parallel.use_distributed_optimizer)
    add_box(TimelineBox::kDpComm, t1, Clock::now());
  return Status::ok();
}

template <typename T>
Result<double> Trainer<T>::validate(const SampleSource& source, int64_t& position,
                                    int64_t& targets) {
  const ParallelLayout& L = g_.layout;
  const int M = o_.num_micro_batches() / L.dp;
  const bool per_token = source.has_loss_mask();  // Note [SFT loss normalisation]
  double sum = 0;
  targets = 0;
  for (int it = 0; it < o_.eval_iters; it++) {
    if (per_token) targets += global_targets(source, position);
    auto load = [&](int mb, int32_t* tokens, int32_t* targets, int32_t* positions,
                    GptActivations<T>* first) {
      return load_micro_batch(source, position, mb, tokens, targets, positions, first);
    };
    if (Status s = executor_->evaluate(M, load, device_losses_); !s) return s;
    if (Status s = collect_marks(); !s) return s;
    Result<double> losses = loss_sum(M, per_token);
    if (!losses) return losses.status();
    sum += *losses;
    position += o_.global_batch_size;
  }
  if (per_token) {
    const double total = all_reduce_scalar(sum, *g_.world);
    return targets > 0 ? total / static_cast<double>(targets) : 0.0;
  }
  return all_reduce_scalar(sum / (static_cast<double>(o_.eval_iters) * M * L.dp * L.cp), *g_.world);
}

template <typename T>
std::vector<RankReport> Trainer<T>::gather_reports(bool with_timeline, int iterations) {
  // Phase times per iteration since the previous report, memory now, bytes so far and,
  // with_timeline, the boxes of the iteration just run, gathered to rank 0 (rank_reports.h).
  const PipelineTimes& pt = executor_->times();
  totals_.forward = pt.forward;
  totals_.backward = pt.backward;
  totals_.pipeline_wait = pt.wait;
  double tp_comm = 0;
  for (auto& c : rank_.chunks) tp_comm += c->profiler().seconds(Op::kTensorParallelComm);
  totals_.tp_comm = tp_comm;
  // The model's memory is the device's, by category: the activations at their high-water mark
  // (the executor's slots for the micro-batches in flight; the recomputation scratch).
  // Everything else (optimizer moments, reduce-scatter buffers, losses) is on the device too.
  const Device& device = *rank_.device;
  MemoryReport mem = device.memory();
  mem.activations = device.usage(MemoryCategory::kActivations).peak;
  RankSample mine;
  mine.memory = mem;
  mine.times = per_iteration(totals_, reported_, iterations);
  reported_ = totals_;
  const DeviceComms& comms = rank_.comms;
  mine.tp_bytes = traffic_bytes(comms.tp.get());
  mine.dp_bytes = traffic_bytes(comms.dp.get());
  for (const auto& channel : comms.pipeline) mine.pp_bytes += traffic_bytes(channel.get());
  mine.embedding_bytes = traffic_bytes(comms.embedding.get());
  mine.system = system_.sample();
  if (with_timeline) {
    mine.timeline = &timeline_;
    mine.timeline_capacity =
        IterationTimeline::capacity(g_.layout.vpp, o_.num_micro_batches() / g_.layout.dp);
  }
  return gather_rank_reports(*g_.world, g_.layout, mine);
}

template <typename T>
Status Trainer<T>::save(const TrainState& state) {
  set_comm_activity("the checkpoint save at iteration " + std::to_string(state.iteration));
  Result<SavedCheckpoint> saved = save_rank_checkpoint(rank_, g_, o_, mc_, state);
  if (!saved) return saved.status();
  if (g_.world->rank() == 0) {
    for (const std::string& note : saved->notes)
      sink_.on_message("--save " + o_.save + ": " + note);
    sink_.on_checkpoint(state.iteration, saved->path, saved->bytes, saved->seconds);
  }
  return Status::ok();
}

template <typename T>
Result<TrainSummary> Trainer<T>::run() {
  const ParallelLayout& L = g_.layout;
  Comm& world = *g_.world;
  const bool rank0 = world.rank() == 0;
  if (std::string error = kernels::select_cpu_isa(o_.cpu_isa); !error.empty())
    return Status::invalid_argument(error);
  const int threads = threads_per_rank(o_, world);
  kernels::set_num_threads(threads);
  set_comm_activity("the start of the run");

  // Rank 0 builds the cached sample indices first; the others then read them.
  if (!rank0) world.barrier();
  Result<DataSources> data = open_data(o_, mc_);
  if (rank0) world.barrier();
  if (!data) return data.status();
  data_ = std::move(*data);
  sample_.assign(mc_.seq_length + 1, 0);
  std::string image_norm_note;
  if (mc_.has_vision()) {  // the tower encodes the most images any sample carries
    mc_.vision.images_per_sample = std::max(1, data_.train->images_per_sample());
    // The checkpoint records the data's normalisation for generation (docs/vision.md). The run
    // trains on it even where --load-hf's preprocessor_config.json gave another (noted below).
    const VisionConfig given = mc_.vision;
    mc_.vision.image_mean = data_.train->image_mean();
    mc_.vision.image_std = data_.train->image_std();
    mc_.vision.image_norm_assumed = false;
    if (!o_.load_hf.empty() && !given.image_norm_assumed &&
        (given.image_mean != mc_.vision.image_mean || given.image_std != mc_.vision.image_std))
      image_norm_note = "note: the training images' mean " + channels(mc_.vision.image_mean) +
                        " and std " + channels(mc_.vision.image_std) + " differ from " +
                        o_.load_hf + "'s preprocessor_config.json (mean " +
                        channels(given.image_mean) + ", std " + channels(given.image_std) +
                        "): the run trains on, and its checkpoints record, the data's";
    const VisionConfig& v = mc_.vision;
    images_.assign(static_cast<size_t>(o_.micro_batch_size) * v.images_per_sample * v.num_channels *
                       v.img_h * v.img_w,
                   0.0f);
  }
  Result<TrainingTasks> tasks = TrainingTasks::open(o_, mc_);  // --eval-tasks (task_eval.h)
  if (!tasks) return tasks.status();

  Device& device = *rank_.device;
  RunStart start;
  start.description = describe<T>(o_, L, device);
  start.parameters = mc_.num_parameters();
  if (mc_.has_vision())  // the tower's (Note [vision tensors] in model/param_layout.h)
    for (const ParamTensor& t : ParamLayout::vision_tensors(mc_.vision))
      start.parameters += static_cast<int64_t>(t.numel);
  start.threads = threads;
  start.ranks = g_.world->size();
  // MFU's denominator: the device's peak in the compute type (the CPU: the rate of the GEMM the
  // type multiplies with, cpu_peak_gemm, measured by every rank at once, so that ranks sharing
  // cores are measured sharing them).
  if (Status s = device.measure_peak(*g_.world, dtype_of<T>()); !s) return s;
  start.peak_gflops = device.peak_flops(dtype_of<T>()) / 1e9;
  start.blas_core = device.blas_name();
  if (!backend_) start.peak_gemm = peak_gemm_name(cpu_peak_gemm(dtype_of<T>()));
  if (rank0) sink_.on_start(start);
  if (rank0 && !image_norm_note.empty()) sink_.on_message(image_norm_note);
  if (rank0 && start.peak_gflops <= 0)
    sink_.on_message("no peak rate known for " + device.describe() + ": MFU is reported as 0");
  if (backend_ && backend_->probe) {
    std::string why;
    if (SystemSampler::GpuProbe probe = backend_->probe(&why))
      system_.set_gpu_probe(std::move(probe));
    else if (rank0)
      sink_.on_message("NVML is not available: " + why +
                       "; GPU utilization, memory, power and temperature are not recorded");
  }

  if (Status s = build_model(); !s) return s;
  if (rank0 && !o_.load_hf.empty())
    sink_.on_message(std::string("loaded ") + hf_architecture_name(hf_architecture_of(mc_)) +
                     " weights from " + o_.load_hf);
  TrainState state;
  if (!o_.load.empty() || !o_.pretrained_checkpoint.empty())
    if (Status s = load(state); !s) return s;

  const int T_ = mc_.seq_length;
  const int decay_iters = o_.optim.lr_decay_iters > 0 ? o_.optim.lr_decay_iters : o_.train_iters;
  // The model's FLOPs of the global batch as the planner counts them (Megatron's, less frozen
  // weight gradients, plus a vision tower's), per rank for the per-device figures.
  TrainOptions counted = o_;
  counted.model = mc_;
  const double flops = model_flops_per_iteration(counted, L) / L.world;

  TrainSummary summary;
  summary.peak_gflops = start.peak_gflops;
  summary.peak_gemm = start.peak_gemm;
  consumed_ = state.consumed_samples;
  int64_t valid_consumed = state.valid_consumed;
  int nan_iterations = state.nan_iterations, skipped = state.skipped_iterations,
      steps = state.steps_taken;
  int saved_iteration = -1;
  // A checkpoint of an --fp16 run carries the scaler (none: state.loss_scale is 0). Resuming
  // a dynamic scale from one that has none restarts the scale; said, as Megatron warns.
  scaling_.restore(
      {state.loss_scale, state.loss_scale_growth_tracker, state.loss_scale_hysteresis_tracker});
  if (rank0 && !o_.load.empty() && !o_.finetune && scaling_.enabled() && o_.loss_scale <= 0 &&
      state.loss_scale <= 0) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", o_.initial_loss_scale);
    sink_.on_message("warning: the checkpoint in --load " + o_.load +
                     " holds no loss scale (it was saved without --fp16); the dynamic loss "
                     "scale starts again at --initial-loss-scale " +
                     scale);
  }
  auto progress = [&](int iteration) {
    TrainState s{iteration, consumed_, valid_consumed, steps, skipped, nan_iterations};
    const LossScaler::State scaler = scaling_.state();
    s.loss_scale = scaler.scale;
    s.loss_scale_growth_tracker = scaler.growth_tracker;
    s.loss_scale_hysteresis_tracker = scaler.hysteresis_tracker;
    return s;
  };
  double timed_seconds = 0;
  int timed_iterations = 0;
  // Each op's totals so far, and the optimizer phase's; the difference over a timed iteration
  // adds to summary.timed_ops (validation passes between iterations stay out).
  std::vector<const Profiler*> profilers;
  for (auto& c : rank_.chunks) profilers.push_back(&c->profiler());
  auto ops_now = [&] { return op_totals(profilers, totals_.optimizer); };
  summary.timed_ops = ops_now();
  for (OpTime& t : summary.timed_ops) t.seconds = 0, t.calls = 0;

  auto report_tasks = [&](int iteration) -> Status {
    if (tasks->empty()) return Status::ok();
    set_comm_activity("the --eval-tasks scoring at iteration " + std::to_string(iteration));
    return tasks->report(rank_, g_, o_, mc_, iteration, sink_);
  };
  auto report_validation = [&](const SampleSource* source, int64_t& position, const char* split,
                               int iteration, bool at_end) -> Status {
    set_comm_activity(std::string("the ") + (at_end ? "final " : "") + split +
                      " evaluation at iteration " + std::to_string(iteration));
    int64_t targets = 0;
    Result<double> loss = validate(*source, position, targets);
    if (!loss) return loss.status();
    if (source->has_loss_mask() && targets == 0) {  // Note [SFT loss normalisation]
      if (rank0)
        sink_.on_message("the " + std::string(split) + " evaluation at iteration " +
                         std::to_string(iteration) +
                         " saw no loss targets (every token masked); no validation loss");
      return Status::ok();
    }
    ValidationMetrics v;
    v.iteration = iteration;
    v.split = split;
    v.end_of_training = at_end;
    v.lm_loss = *loss;
    v.perplexity = std::exp(std::min(20.0, v.lm_loss));
    summary.validations.push_back(v);
    if (rank0) sink_.on_validation(v);
    return Status::ok();
  };

  const auto run_start = Clock::now();
  int last = state.iteration;
  reported_at_ = state.iteration;
  const std::vector<int> skip_list = o_.skip_iterations();
  for (int it = state.iteration + 1; !o_.skip_train && it <= o_.train_iters; it++) {
    set_comm_activity("iteration " + std::to_string(it));
    if (std::binary_search(skip_list.begin(), skip_list.end(), it)) {
      // --iterations-to-skip: the batch is consumed untrained (Megatron's dummy step); the
      // learning rate follows the optimizer steps taken, so it does not move either.
      consumed_ += o_.global_batch_size;
      skipped++;
      last = it;
      if (rank0)
        sink_.on_message("iteration " + std::to_string(it) + " skipped (--iterations-to-skip): " +
                         std::to_string(o_.global_batch_size) + " samples not trained on");
      continue;
    }
    // A signal or the time limit on any rank stops every rank at the same iteration.
    const auto stop =
        static_cast<EarlyStop>(all_reduce_scalar(double(early_stop(o_)), world, ReduceOp::kMax));
    if (stop == EarlyStop::kSignal) {
      request_stop();  // on every rank, not only those asked: run_training reads it
      if (!o_.save.empty() && saved_iteration != it - 1)
        if (Status s = save(progress(it - 1)); !s) return s;
      return Status::internal("stopped by a signal before iteration " + std::to_string(it));
    }
    if (stop == EarlyStop::kExitDuration) {  // saved after the loop, as for --exit-interval
      if (rank0) sink_.on_message(exit_duration_message(it - 1, o_.exit_duration_in_mins));
      break;
    }
    const std::vector<OpTime> ops_at_start = ops_now();
    const auto t0 = Clock::now();
    if (reported(it))
      timeline_.begin(t0, IterationTimeline::capacity(L.vpp, o_.num_micro_batches() / L.dp));
    const double lr = learning_rate(o_.optim, steps, decay_iters);
    double loss = 0, norm = 0;
    bool skipped_step = false;
    std::vector<InstabilityEvent> events;
    const Status stepped = step(it, loss, norm, lr, skipped_step, events);
    timeline_.end();
    if (!stepped) return stepped;
    if (rank0)
      for (const InstabilityEvent& e : events) sink_.on_instability(e);
    if (!events.empty() && events[0].action == SpikeAction::kStop) {
      // The weights are those of iteration it - 1 (the step was not taken): saved as such.
      std::string saved;
      if (!o_.save.empty()) {
        if (saved_iteration != it - 1)
          if (Status s = save(progress(it - 1)); !s) return s;
        saved = "; the checkpoint of iteration " + std::to_string(it - 1) + " is in " + o_.save;
      }
      return Status::internal(describe(events[0]) + "; stopped by --on-spike stop" + saved);
    }
    if (!events.empty() && events[0].action == SpikeAction::kRollback) {
      // Nothing is saved: the run goes back to a checkpoint from before the spike (the caller's
      // Note [rollback]); the summary says where the spike was.
      summary.rollback_at = it;
      summary.rollback_reason = describe(events[0]);
      summary.total_seconds = seconds_since(run_start);
      return summary;
    }
    if (!skipped_step)
      steps++;
    else
      skipped++;  // the optimizer did not step
    if (!std::isfinite(loss)) nan_iterations++;
    consumed_ += o_.global_batch_size;
    const double seconds = seconds_since(t0);
    if (it > 1 || o_.train_iters == 1) {
      timed_seconds += seconds;
      timed_iterations++;
      add_op_times(summary.timed_ops, ops_now(), ops_at_start);
    }
    IterationMetrics m;
    m.iteration = it;
    m.train_iters = o_.train_iters;
    m.consumed_samples = consumed_;
    m.global_batch_size = o_.global_batch_size;
    m.lm_loss = loss;
    m.learning_rate = lr;
    m.grad_norm = norm;
    m.skipped_iterations = skipped;
    m.loss_scale = scaling_.loss_scale();  // after this iteration's update, as Megatron logs
    m.nan_iterations = nan_iterations;
    m.step_seconds = seconds;
    m.tokens_per_second = static_cast<double>(o_.global_batch_size) * T_ / seconds;
    m.tflops_per_device = flops / seconds / 1e12;
    m.mfu = start.peak_gflops > 0 ? flops / seconds / 1e9 / start.peak_gflops : 0;
    m.moe_aux_loss = moe_aux_loss_;
    if (mc_.moe() && reported(it)) m.moe_expert_load = moe_expert_load();
    summary.losses.push_back(loss);
    summary.grad_norms.push_back(norm);
    if (rank0) sink_.on_iteration(m);
    if (reported(it)) {
      std::vector<RankReport> reports = gather_reports(true, it - reported_at_);
      reported_at_ = it;
      if (rank0) sink_.on_rank_reports(it, reports);
    }
    if (data_.valid && o_.eval_iters > 0 && it % o_.eval_interval == 0)
      if (Status s = report_validation(data_.valid.get(), valid_consumed, "valid", it, false); !s)
        return s;
    if (it % o_.eval_interval == 0)
      if (Status s = report_tasks(it); !s) return s;
    last = it;
    const bool exiting = o_.exit_interval > 0 && it % o_.exit_interval == 0 && it < o_.train_iters;
    if (!o_.save.empty() && ((o_.save_interval > 0 && it % o_.save_interval == 0) || exiting)) {
      if (Status s = save(progress(it)); !s) return s;
      saved_iteration = it;
    }
    if (exiting) {
      if (rank0)
        sink_.on_message("exiting after iteration " + std::to_string(it) + " (--exit-interval " +
                         std::to_string(o_.exit_interval) + ")");
      break;
    }
  }
  summary.total_seconds = seconds_since(run_start);
  set_comm_activity("the end of the run");
  // --skip-train: the loop did not run; the end-of-training evaluations run at the loaded
  // iteration.
  const bool finished = last == o_.train_iters || o_.skip_train;
  const int at = o_.skip_train ? last : o_.train_iters;
  const bool evaluated_at_last = o_.train_iters % o_.eval_interval == 0 || last == state.iteration;
  if (!o_.save.empty() && saved_iteration != last && last > state.iteration)
    if (Status s = save(progress(last)); !s) return s;
  if (finished && (o_.skip_train || !evaluated_at_last))
    if (Status s = report_tasks(at); !s) return s;
  if (finished && o_.eval_iters > 0) {
    if (data_.valid && (o_.skip_train || !evaluated_at_last))
      if (Status s = report_validation(data_.valid.get(), valid_consumed, "valid", at, true); !s)
        return s;
    int64_t test_position = 0;
    if (data_.test)
      if (Status s = report_validation(data_.test.get(), test_position, "test", at, true); !s)
        return s;
  }
  if (timed_iterations > 0) {
    summary.tokens_per_second =
        static_cast<double>(o_.global_batch_size) * T_ * timed_iterations / timed_seconds;
    summary.gflops_per_rank = flops * timed_iterations / timed_seconds / 1e9;  // flops: per rank
  }
  reported_ = PhaseTimes{};
  summary.ranks = gather_reports(false, 1);  // whole-run totals
  if (rank0) summary.memory = summary.ranks[0].memory;
  {
    const std::vector<OpTime> ops = ops_now();
    summary.op_times.assign(ops.begin(), ops.end() - 1);  // the model's ops, whole run
    summary.timed_seconds = timed_seconds;
    summary.timed_iterations = timed_iterations;
  }
  if (!o_.save_hf.empty())
    if (Status s = save_hf(); !s) return s;
  if (rank0) sink_.on_end(summary);
  return summary;
}

}  // namespace

template <typename A>
Result<TrainSummary> run_trainer(const TrainOptions& options, const ModelConfig& model,
                                 ProcessGroups& groups, MetricsSink& sink,
                                 std::unique_ptr<Device> device, const DeviceBackend* backend) {
  return Trainer<A>(options, model, groups, sink, std::move(device), backend).run();
}

template Result<TrainSummary> run_trainer<float>(const TrainOptions&, const ModelConfig&,
                                                 ProcessGroups&, MetricsSink&,
                                                 std::unique_ptr<Device>, const DeviceBackend*);
template Result<TrainSummary> run_trainer<double>(const TrainOptions&, const ModelConfig&,
                                                  ProcessGroups&, MetricsSink&,
                                                  std::unique_ptr<Device>, const DeviceBackend*);
template Result<TrainSummary> run_trainer<bf16>(const TrainOptions&, const ModelConfig&,
                                                ProcessGroups&, MetricsSink&,
                                                std::unique_ptr<Device>, const DeviceBackend*);
template Result<TrainSummary> run_trainer<fp16>(const TrainOptions&, const ModelConfig&,
                                                ProcessGroups&, MetricsSink&,
                                                std::unique_ptr<Device>, const DeviceBackend*);

}  // namespace lattice
