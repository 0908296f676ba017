// The GPU training loop of one rank (gpu_trainer.h): data as the CPU trainer reads it
// (train/data_feed.h), the rank's pipeline stage (GptModel per model chunk of its ModelShard) run
// by PipelineExecutor (pipeline/executor.h: 1F1B or interleaved 1F1B, gradient accumulation over
// micro-batches; PP 1 runs forward and backward of each micro-batch in turn), tensor and
// sequence parallelism inside the model (NCCL on the compute stream; the partial LayerNorm and
// bias gradients of --sequence-parallel are summed over TP there, before the data-parallel
// reduction and the norm), data-parallel reduction in buckets overlapped with backward on a
// side stream (optim/grad_reducer.h, one reducer per chunk; with --use-distributed-optimizer a
// reduce-scatter into the rank's optimizer shard of each bucket and an all-gather after the step),
// the tied word embedding's gradient summed over the embedding group (first and last stage), hidden
// and attention dropout with the CPU trainer's micro-batch seeds, the loss scaler shared with the
// CPU trainer (optim/grad_scaling.h; the overflow test is the op Ops::unscale_and_check),
// global-norm clipping over the model-parallel group (the world when distributed) and the CPU
// trainer's AdamW (optim/adamw.h) per chunk on the fp32 master weights: one multi-tensor step
// with the clipping folded in that also writes the 16-bit compute copy. Process groups as the CPU
// trainer's (parallel/groups.h): world = TP x DP x PP. Metrics, memory and checkpoints go to the
// same MetricsSink as a CPU run (same keys in the run store); checkpoints are the CPU engine's
// (gpu_checkpoint.h), saved when the CPU trainer saves. Nothing here has run on a GPU yet
// (docs/gpu.md).
#include "gpu/gpu_trainer.h"

#include <cuda_runtime_api.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>

#include "device/caching_allocator.h"
#include "device/capabilities.h"
#include "device/device.h"
#include "device/nvml_probe.h"
#include "gpu/gpu_checkpoint.h"
#include "lattice/dropout_hash.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "optim/grad_scaling.h"
#include "optim/optimizer_shard.h"
#include "parallel/device_comms.h"
#include "parallel/groups.h"
#include "parallel/model_chunks.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "train/data_feed.h"
#include "train/rank_reports.h"

namespace lattice::gpu {

namespace cu = kernels::cuda;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// " 1F1B", " interleaved 1F1B, 2 chunks" or "" (PP 1), for the run's description.
std::string pipeline_schedule_name(const TrainOptions& o) {
  const int pp = o.parallel.pipeline_model_parallel_size;
  const int v = o.parallel.num_layers_per_virtual_pipeline_stage;
  if (pp <= 1) return "";
  if (v <= 0) return " 1F1B";
  return " interleaved 1F1B, " + std::to_string(o.model.num_layers / (pp * v)) + " chunks";
}

double all_reduce_scalar(Comm& comm, double value, ReduceOp op = ReduceOp::kSum) {
  if (comm.size() > 1)
    if (Status s = comm.all_reduce(&value, 1, DType::kFloat64, op); !s)
      comm.abort("could not reduce a scalar: " + s.message(), 1);
  return value;
}

// DeviceState (gpu_checkpoint.h) over the loop's model and AdamW: copies on the device's
// compute stream, each waited for.
template <typename A>
class LoopState final : public DeviceState {
 public:
  LoopState(Device& device, GptModel<A>& model, AdamW<A>& adam)
      : device_(device), model_(model), adam_(adam) {}
  Status download_params(float* host) override {
    model_.download(host);
    return waited();
  }
  Status upload_params(const float* host) override {
    model_.upload(host);  // and the 16-bit copy
    return waited();
  }
  Status download_moments(size_t offset, size_t n, float* exp_avg, float* exp_avg_sq) override {
    const size_t at = adam_.shard().state_of(offset, n);
    if (at == OptimizerShard::npos) return not_owned(offset, n);
    copy(exp_avg, adam_.exp_avg().data() + at, n, CopyKind::kDeviceToHost);
    copy(exp_avg_sq, adam_.exp_avg_sq().data() + at, n, CopyKind::kDeviceToHost);
    return waited();
  }
  Status upload_moments(size_t offset, size_t n, const float* exp_avg,
                        const float* exp_avg_sq) override {
    const size_t at = adam_.shard().state_of(offset, n);
    if (at == OptimizerShard::npos) return not_owned(offset, n);
    copy(adam_.exp_avg().data() + at, exp_avg, n, CopyKind::kHostToDevice);
    copy(adam_.exp_avg_sq().data() + at, exp_avg_sq, n, CopyKind::kHostToDevice);
    return waited();
  }

 private:
  static Status not_owned(size_t offset, size_t n) {
    return Status::internal("checkpoint copy of the moments of arena elements [" +
                            std::to_string(offset) + ", +" + std::to_string(n) +
                            "): not one piece of this rank's optimizer shard");
  }
  void copy(float* dst, const float* src, size_t n, CopyKind kind) {
    device_.copy(dst, src, n * sizeof(float), kind, device_.compute());
  }
  Status waited() {
    const Status s = device_.synchronize(device_.compute());
    return s ? s : Status::internal("checkpoint copy on the device: " + s.message());
  }
  Device& device_;
  GptModel<A>& model_;
  AdamW<A>& adam_;
};

// This rank's CUDA device (make_cuda_device: local rank % devices) and the parts of it that
// the loss copies and the 16-bit refresh after the gather still take (cuda_device_parts).
struct GpuDevice {
  std::unique_ptr<Device> device;
  cu::Context* ctx = nullptr;          // the device's: its stream is device->compute()
  CachingAllocator* memory = nullptr;  // the device's: what device->allocate() takes from
  int index = 0;
  std::string name;
};

Result<GpuDevice> open_device() {
  Result<std::unique_ptr<Device>> made = make_cuda_device();
  if (!made) return made.status();
  GpuDevice d;
  d.device = std::move(*made);
  const CudaDeviceParts parts = cuda_device_parts(*d.device);
  d.ctx = parts.context;
  d.memory = parts.memory;
  d.index = parts.index;
  d.name = parts.name;
  return d;
}

// The training loop, templated on the compute type (float: fp32; bf16: --bf16; fp16: --fp16).
template <typename A>
class GpuLoop {
 public:
  GpuLoop(const TrainOptions& o, const ModelConfig& mc, Comm& world, MetricsSink& sink,
          GpuDevice& device)
      : o_(o), mc_(mc), world_(world), sink_(sink), dev_(device), scaling_(o) {}
  Result<TrainSummary> run();

 private:
  Status setup();
  Status make_groups();
  Status load_micro_batch(const SampleSource& source, int64_t position, int mb, int32_t* tokens,
                          int32_t* targets);
  Status sum_tied_embedding();
  Result<double> validate(const SampleSource& source, int64_t& position);
  Status step(int it, double lr, double& loss, double& norm, bool& skipped);
  // The host waits for the compute stream (watched: Device::synchronize); its first error.
  Status synchronize() { return device().synchronize(device().compute()); }
  Device& device() { return *dev_.device; }
  Status save(const TrainState& state);
  // Reads the iteration's marks (phase times, timeline boxes, per-op times) once the compute
  // stream has been synchronised, then lets the device reuse them.
  void collect_marks();
  // This rank's report at iteration `it` (phase times per iteration since the previous
  // report), gathered to rank 0 (train/rank_reports.h). Collective over the world.
  std::vector<RankReport> gather_reports(int iterations, bool with_timeline);
  std::vector<OpTime> ops_now() const;
  bool reported(int it) const { return it == 1 || it % o_.log_interval == 0; }

  const TrainOptions& o_;
  ModelConfig mc_;
  Comm& world_;
  MetricsSink& sink_;
  GpuDevice& dev_;
  GradScaling scaling_;
  // One model chunk of this rank: chunk c holds virtual stage c * PP + pp (one chunk without
  // interleaving), with its optimizer and their checkpoint view.
  struct Chunk {
    std::unique_ptr<GptModel<A>> model;
    std::unique_ptr<AdamW<A>> adam;
    std::unique_ptr<LoopState<A>> state;
  };
  // The chunk whose word embedding is tied over the embedding group: the first stage's first
  // chunk (the input embedding) or the last stage's last chunk (the LM head's copy).
  GptModel<A>& embedding_chunk() {
    return groups_.first_stage() ? *chunks_.front().model : *chunks_.back().model;
  }
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  std::vector<DeviceState*> device_states() const {
    std::vector<DeviceState*> states;
    for (const Chunk& c : chunks_) states.push_back(c.state.get());
    return states;
  }

  std::vector<Chunk> chunks_;
  std::unique_ptr<PipelineExecutor<A>> pipeline_;
  TrainState resumed_;        // where --load left the run (zero: a fresh run)
  ProcessGroups groups_;      // the CPU trainer's groups (MPI): norm, coordinates
  DeviceComms comms_;  // the device's (NCCL) TP, DP, pipeline-channel and embedding ones
  // Data-parallel reduction (DP > 1): one reducer per chunk over one side stream.
  Stream* dp_stream_ = nullptr;
  std::vector<std::unique_ptr<GradReducer<float>>> reducers_;
  DataSources data_;
  std::vector<int32_t> sample_, tokens_, targets_;  // host staging
  float* d_losses_ = nullptr;     // (M, N) every micro-batch's token losses (last stage)
  float* d_found_inf_ = nullptr;  // (1) the loss scaler's overflow flag (unscale_and_check)
  std::vector<float> losses_host_;
  int64_t consumed_ = 0;
  int steps_ = 0;
  PhaseTimes totals_;           // forward, backward and pipeline wait from the pipeline's marks
  PhaseTimes reported_;         // the totals at the previous rank report
  IterationTimeline timeline_;  // on during reported iterations
  SystemSampler system_;        // CPU, memory and (NVML) the device, at each rank report
  int reported_at_ = 0;  // the iteration of the previous rank report (or where --load resumed)
};

// The CPU trainer's process groups over the world (same rank order: tp fastest, then dp, then
// pp), and the device's communicators (Device::make_comm: NCCL) over the tensor-,
// data-parallel, pipeline (one per channel) and embedding ones. Collective over the world.
template <typename A>
Status GpuLoop<A>::make_groups() {
  Result<ParallelLayout> layout = make_layout(o_, world_.size());
  if (!layout) return layout.status();
  Result<ProcessGroups> groups = make_process_groups(world_, *layout);
  if (!groups) return groups.status();
  groups_ = std::move(*groups);
  Result<DeviceComms> comms = make_device_comms(device(), groups_);
  if (!comms) return comms.status();
  comms_ = std::move(*comms);
  return Status::ok();
}

template <typename A>
Status GpuLoop<A>::setup() {
  Result<DataSources> data = open_data(o_, mc_);
  if (!data) return data.status();
  data_ = std::move(*data);
  if (Status s = make_groups(); !s) return s;
  const ParallelLayout& L = groups_.layout;
  const int M = o_.num_micro_batches() / L.dp;
  // Activations for as many micro-batches as the schedule keeps in flight on this stage.
  const std::vector<int> in_flight = chunk_peaks(L.pp, groups_.coord.pp, L.vpp, M);
  std::vector<GptModel<A>*> models;
  for (int c = 0; c < L.vpp; c++) {
    Chunk chunk;
    const ModelShard shard = shard_of(L, groups_.coord, c, o_.parallel.sequence_parallel);
    const ParallelOptions& par = o_.parallel;
    const RecomputePlan plan = RecomputePlan::make(par.recompute_granularity, par.recompute_method,
                                                   par.recompute_num_layers, shard.num_layers(mc_));
    auto model = GptModel<A>::create(mc_, o_.micro_batch_size, device(), shard, comms_.tp.get(), plan);
    if (!model) return model.status();
    chunk.model = std::move(*model);
    GptModel<A>& m = *chunk.model;
    // Per-op times are two timing events per op on CUDA: only with --profile (the CPU's are
    // clock reads, always on).
    m.set_op_times(o_.profile);
    // The chunk's own optimizer shard, cut as its GradReducer's buckets (one reducer per chunk,
    // as in the CPU trainer), so the checkpointed moments of a distributed optimizer line up.
    auto adam = AdamW<A>::create(device(), optimizer_shard(o_, m.layout(), L.dp, groups_.coord.dp),
                                 o_.optim);
    if (!adam) return adam.status();
    chunk.adam = std::move(*adam);
    chunk.state = std::make_unique<LoopState<A>>(device(), m, *chunk.adam);
    models.push_back(&m);
    chunks_.push_back(std::move(chunk));
  }
  const DeviceComms& c = comms_;
  const PipelineComms channels{c.channel(0), c.channel(1), c.channel(2), c.channel(3)};
  auto pipeline =
      PipelineExecutor<A>::create(models, device(), channels, L.pp, groups_.coord.pp, in_flight);
  if (!pipeline) return pipeline.status();
  pipeline_ = std::move(*pipeline);
  // Megatron's initialisation drawn exactly as a CPU run draws it (so a GPU run starts from
  // the CPU run's weights), or --load-hf, then --load.
  Result<TrainState> restored = restore_gpu_state(o_, mc_, world_, device_states(), sink_);
  if (!restored) return restored.status();
  resumed_ = *restored;
  const size_t N = static_cast<size_t>(o_.micro_batch_size) * mc_.seq_length;
  d_losses_ =
      static_cast<float*>(dev_.memory->allocate(N * M * sizeof(float), MemoryCategory::kWorkspace));
  if (!d_losses_) return Status::internal("out of device memory for the micro-batch losses");
  d_found_inf_ = static_cast<float*>(device().allocate(sizeof(float), MemoryCategory::kWorkspace));
  if (!d_found_inf_) return device().out_of_memory(MemoryCategory::kWorkspace, sizeof(float));
  tokens_.resize(N);
  targets_.resize(N);
  losses_host_.resize(N * M);
  sample_.assign(mc_.seq_length + 1, 0);
  if (comms_.dp) {
    // One reducer per chunk (optim/grad_reducer.h), each over its chunk's buckets, the cut of
    // the chunk's optimizer shard (optimizer_shard: ddp_bucket_elems); every chunk's
    // collectives on one data-parallel side stream, in the order backward ends the buckets.
    Result<Stream*> stream = device().new_stream("data-parallel");
    if (!stream) return stream.status();
    dp_stream_ = *stream;
    const size_t bucket = ddp_bucket_elems(o_.parallel, groups_.layout.dp);
    for (Chunk& c : chunks_) {
      GptModel<A>& m = *c.model;
      auto made = GradReducer<float>::create(device(), *dp_stream_, m.layout(), comms_.dp.get(),
                                             o_.parallel.use_distributed_optimizer, bucket,
                                             m.grads(), m.params());
      if (!made) return made.status();
      reducers_.push_back(std::move(*made));
    }
    for (int c = 0; c < static_cast<int>(chunks_.size()); c++) {
      GptModel<A>* m = chunks_[c].model.get();
      GradReducer<float>* r = reducers_[c].get();
      Comm* world = &world_;
      // The tied word embedding of a multi-stage pipeline is summed over the embedding group
      // first (sum_tied_embedding, then mark_ready), as the CPU trainer's finish_gradients: with
      // the distributed optimizer the two stages' shards of it differ.
      const int skip = groups_.in_embedding_group() && m == &embedding_chunk()
                           ? m->layout().word_embedding_index()
                           : -1;
      m->set_grads_ready([r, skip, world](int begin, int end) {
        for (int i = begin; i < end; i++)
          if (i != skip)
            if (Status s = r->mark_ready(i, i + 1); !s)
              world->abort("data-parallel gradient reduction failed: " + s.message(), 1);
      });
    }
  }
  return synchronize();
}

template <typename A>
Status GpuLoop<A>::load_micro_batch(const SampleSource& source, int64_t position, int mb,
                                    int32_t* tokens, int32_t* targets) {
  // The ranks of a TP group read the same micro-batch: their data-parallel rank's (the
  // pipeline asks on the first and the last stage only).
  if (Status s = fill_micro_batch(source, position, mb, o_.micro_batch_size, groups_.layout.dp,
                                  groups_.coord.dp, mc_.vocab_size, sample_, tokens_.data(),
                                  targets_.data());
      !s)
    return s;
  // Pageable host memory: read before the copy returns, so the staging buffers may be reused.
  const size_t bytes = tokens_.size() * sizeof(int32_t);
  device().copy(tokens, tokens_.data(), bytes, CopyKind::kHostToDevice, device().compute());
  device().copy(targets, targets_.data(), bytes, CopyKind::kHostToDevice, device().compute());
  return Status::ok();
}

// The first stage's word embedding and the last stage's tied LM head are one tensor: their
// gradients are summed over the embedding group, as the CPU trainer's finish_gradients, on the
// compute stream; then the data-parallel reducer takes the tensor (setup() kept it back).
template <typename A>
Status GpuLoop<A>::sum_tied_embedding() {
  if (!groups_.in_embedding_group()) return Status::ok();
  GptModel<A>& m = embedding_chunk();
  const int index = m.layout().word_embedding_index();
  const ParamTensor& t = m.layout().tensors()[index];
  if (Status s = comms_.embedding->all_reduce(m.grads() + t.offset, t.numel, DType::kFloat32,
                                        ReduceOp::kSum, device().compute());
      !s)
    return s;
  if (!reducers_.empty())
    if (Status s =
            reducers_[groups_.first_stage() ? 0 : chunk_count() - 1]->mark_ready(index, index + 1);
        !s)
      return s;
  return Status::ok();
}

template <typename A>
Status GpuLoop<A>::step(int it, double lr, double& loss, double& norm, bool& skipped) {
  const int dp = groups_.layout.dp, M = o_.num_micro_batches() / dp;
  const size_t N = tokens_.size();
  const double loss_scale = scaling_.loss_scale();
  // Mean over the global batch's tokens, times the loss scale (a power of two for --fp16).
  const float grad_scale = static_cast<float>(loss_scale / (static_cast<double>(N) * M * dp));
  for (Chunk& c : chunks_) c.model->zero_grads();
  for (auto& r : reducers_) r->start_iteration();
  auto load = [this](int mb, int32_t* tokens, int32_t* targets) {
    return load_micro_batch(*data_.train, consumed_, mb, tokens, targets);
  };
  // The CPU trainer's dropout seed: the micro-batch's place in the global batch
  // (data-parallel rank r's micro-batch m is global m * DP + r), so masks match one process.
  const int dp_rank = groups_.coord.dp;
  auto seed = [&](int mb) { return kernels::dropout_key(o_.seed, it, mb * dp + dp_rank, 0); };
  if (Status s = pipeline_->train(M, load, seed, grad_scale, d_losses_); !s) return s;
  if (Status s = sum_tied_embedding(); !s) return s;
  for (auto& r : reducers_)
    if (Status s = r->finish(); !s) return s;
  if (Status s = synchronize(); !s) return s;
  const auto t0 = Clock::now();  // the optimizer phase (forward and backward: the pipeline's marks)
  // As the CPU trainer's step: the loss scaler's overflow test over each chunk's whole arena
  // first (the gradients unscaled in place; every rank agrees: agree() takes the max over the
  // world), then the global norm of the unscaled gradients, each parameter counted once over
  // the model-parallel group (TP x PP; the last stage's tied copy does not count): each chunk's
  // share, summed; the data-parallel replicas are equal after the reduction. With the
  // distributed optimizer each data-parallel rank holds the sums of its chunks' shards only, so
  // the squares add up over the world (as on the CPU), and every gradient is in some rank's
  // shard.
  skipped = false;
  if (scaling_.enabled()) {
    Ops<A>& ops = *device().template ops<A>();
    device().zero(d_found_inf_, sizeof(float), device().compute());
    const float inv_scale = static_cast<float>(1.0 / loss_scale);
    for (Chunk& c : chunks_)
      ops.unscale_and_check(c.model->grads(), c.model->arena_size(), inv_scale, d_found_inf_);
    float found_inf = 0;
    device().copy(&found_inf, d_found_inf_, sizeof found_inf, CopyKind::kDeviceToHost,
                  device().compute());
    if (Status s = synchronize(); !s) return s;
    Result<bool> skip = scaling_.agree(found_inf > 0, world_);
    if (!skip) return skip.status();
    skipped = *skip;
  }
  double mine = 0;
  for (Chunk& c : chunks_) mine += c.adam->sum_squares(c.model->grads());
  Comm& norm_group = o_.parallel.use_distributed_optimizer ? world_ : *groups_.model;
  norm = std::sqrt(all_reduce_scalar(norm_group, mine));
  skipped = skipped || !std::isfinite(norm);
  if (!skipped) {
    const double coeff = clip_coefficient(norm, o_.optim.clip_grad);
    for (Chunk& c : chunks_) {
      GptModel<A>& m = *c.model;
      A* copy = std::is_same_v<A, accum_t<A>> ? nullptr : m.compute_params();  // the 16-bit copy
      c.adam->update(m.params(), m.grads(), lr, coeff, copy);
    }
    steps_++;
    if (o_.parallel.use_distributed_optimizer)  // every rank's updated shards to every replica
      for (int c = 0; c < static_cast<int>(reducers_.size()); c++) {
        if (Status s = reducers_[c]->gather_params(); !s) return s;
        // The owners wrote their pieces' 16-bit values in the step; the rest come from the
        // gathered master weights (the same rounding of the same fp32 values).
        GptModel<A>& m = *chunks_[c].model;
        if constexpr (!std::is_same_v<A, float>)
          cu::convert(*dev_.ctx, m.compute_params(), m.params(), m.arena_size());
      }
  }
  const bool reports = groups_.coord.tp == 0 && groups_.last_stage();
  if (reports)
    cu::copy_to_host(losses_host_.data(), d_losses_, losses_host_.size() * sizeof(float));
  if (Status s = synchronize(); !s) return s;
  totals_.optimizer += seconds_since(t0);
  if (timeline_.on())
    timeline_.add(TimelineBox::kOptimizer, groups_.coord.pp, -1, t0, Clock::now());
  collect_marks();
  // The mean over the global batch: tp_rank 0 of each data-parallel replica's last stage
  // contributes (the TP ranks hold equal losses), as the CPU trainer reports it.
  double sum = 0;
  if (reports)
    for (float l : losses_host_) sum += l;
  loss = all_reduce_scalar(world_, reports ? sum / (static_cast<double>(N) * M * dp) : 0.0);
  return Status::ok();
}

template <typename A>
Result<double> GpuLoop<A>::validate(const SampleSource& source, int64_t& position) {
  const int dp = groups_.layout.dp, M = o_.num_micro_batches() / dp;
  const size_t N = tokens_.size();
  const bool reports = groups_.coord.tp == 0 && groups_.last_stage();  // as step()
  double sum = 0;
  for (int it = 0; it < o_.eval_iters; it++) {
    auto load = [&](int mb, int32_t* tokens, int32_t* targets) {
      return load_micro_batch(source, position, mb, tokens, targets);
    };
    if (Status s = pipeline_->evaluate(M, load, d_losses_); !s) return s;
    if (reports) {
      cu::copy_to_host(losses_host_.data(), d_losses_, losses_host_.size() * sizeof(float));
      for (float l : losses_host_) sum += l;
    }
    position += o_.global_batch_size;
  }
  if (Status s = synchronize(); !s) return s;
  collect_marks();
  return all_reduce_scalar(world_,
                           reports ? sum / (static_cast<double>(N) * M * o_.eval_iters * dp) : 0.0);
}

// As the CPU trainer's save (train/trainer.cpp): the checkpoint, then rank 0 reports it.
template <typename A>
Status GpuLoop<A>::save(const TrainState& state) {
  set_comm_activity("the checkpoint save at iteration " + std::to_string(state.iteration));
  Result<SavedCheckpoint> saved = save_gpu_checkpoint(o_, mc_, world_, state, device_states());
  if (!saved) return saved.status();
  if (world_.rank() == 0) {
    for (const std::string& note : saved->notes)
      sink_.on_message("--save " + o_.save + ": " + note);
    sink_.on_checkpoint(state.iteration, saved->path, saved->bytes, saved->seconds);
  }
  return Status::ok();
}

template <typename A>
void GpuLoop<A>::collect_marks() {
  pipeline_->collect_times(&timeline_);
  for (Chunk& c : chunks_) c.model->collect_op_times();
  device().reset_marks();
}

template <typename A>
std::vector<OpTime> GpuLoop<A>::ops_now() const {
  std::vector<const Profiler*> profilers;
  for (const Chunk& c : chunks_) profilers.push_back(&c.model->profiler());
  return op_totals(profilers, totals_.optimizer);
}

template <typename A>
std::vector<RankReport> GpuLoop<A>::gather_reports(int iterations, bool with_timeline) {
  PhaseTimes now = totals_;
  const PipelineTimes& pt = pipeline_->times();
  now.forward = pt.forward;
  now.backward = pt.backward;
  now.pipeline_wait = pt.wait;
  now.tp_comm = 0;  // with --profile: the model's tensor-parallel collectives
  for (const Chunk& c : chunks_)
    now.tp_comm += c.model->profiler().seconds(Op::kTensorParallelComm);
  for (const auto& reducer : reducers_) {
    now.dp_comm += reducer->stats().wait_seconds;
    // step() times the all-gather of the distributed optimizer with the optimizer; the CPU
    // trainer counts it as data-parallel communication only.
    now.optimizer -= reducer->stats().gather_seconds;
  }
  RankSample mine;
  mine.memory = memory_report_of(dev_.memory->stats());
  mine.times = per_iteration(now, reported_, iterations);
  reported_ = now;
  mine.tp_bytes = traffic_bytes(comms_.tp.get());
  mine.dp_bytes = traffic_bytes(comms_.dp.get());
  for (const auto& channel : comms_.pipeline) mine.pp_bytes += traffic_bytes(channel.get());
  mine.embedding_bytes = traffic_bytes(comms_.embedding.get());
  mine.system = system_.sample();
  if (with_timeline) {
    mine.timeline = &timeline_;
    mine.timeline_capacity =
        IterationTimeline::capacity(groups_.layout.vpp, o_.num_micro_batches() / groups_.layout.dp);
  }
  return gather_rank_reports(world_, groups_.layout, mine);
}

template <typename A>
Result<TrainSummary> GpuLoop<A>::run() {
  const bool rank0 = world_.rank() == 0;
  // Dense bf16 peak of the device (the MFU denominator, as Megatron reports it for bf16 and
  // fp16 runs alike): the planner's table entry for the board CUDA names; 0 for a board the
  // table lacks, so no MFU is reported.
  const double peak = device().peak_flops(DType::kBFloat16);
  RunStart start;
  std::ostringstream d;
  d << "GPT " << mc_.num_layers << " layers, hidden " << mc_.hidden_size << ", "
    << mc_.num_attention_heads << " heads, seq " << mc_.seq_length << ", vocab " << mc_.vocab_size
    << " (padded " << mc_.padded_vocab_size() << "); micro batch " << o_.micro_batch_size
    << ", global batch " << o_.global_batch_size << "; GPU " << dev_.name << " x " << world_.size()
    << " (TP " << o_.model.tensor_model_parallel_size << ", PP "
    << o_.parallel.pipeline_model_parallel_size << pipeline_schedule_name(o_) << ", DP "
    << world_.size() / std::max(1, o_.model.tensor_model_parallel_size *
                                       o_.parallel.pipeline_model_parallel_size)
    << (o_.parallel.sequence_parallel ? ", sequence parallel" : "")
    << (o_.parallel.use_distributed_optimizer ? ", distributed optimizer" : "") << "), "
    << (std::is_same_v<A, float>  ? "fp32"
        : std::is_same_v<A, fp16> ? "fp16 with fp32 master weights and grads, loss scaling"
                                  : "bf16 with fp32 master weights and grads");
  if (!o_.parallel.recompute_granularity.empty())  // as the CPU trainer's description
    d << ", " << o_.parallel.recompute_granularity << " recomputation";
  start.description = d.str();
  start.parameters = mc_.num_parameters();
  start.peak_gflops = peak / 1e9;
  start.blas_core = "cuBLASLt";
  if (rank0) sink_.on_start(start);
  if (peak == 0 && rank0)
    sink_.on_message("no peak rate known for " + dev_.name + ": MFU is reported as 0");
  if (Status s = setup(); !s) return s;
  std::string no_nvml;
  if (SystemSampler::GpuProbe probe = nvml_probe(&no_nvml))
    system_.set_gpu_probe(std::move(probe));
  else if (rank0)
    sink_.on_message("NVML is not available: " + no_nvml +
                     "; GPU utilization, memory, power and temperature are not recorded");

  const int decay_iters = o_.optim.lr_decay_iters > 0 ? o_.optim.lr_decay_iters : o_.train_iters;
  const double flops = flops_per_iteration(mc_, o_.global_batch_size) / world_.size();
  const int T = mc_.seq_length;
  TrainSummary summary;
  summary.peak_gflops = start.peak_gflops;
  // Where --load left the run (all zero for a fresh one), as the CPU trainer resumes.
  const TrainState& state = resumed_;
  consumed_ = state.consumed_samples;
  steps_ = state.steps_taken;
  for (Chunk& c : chunks_) c.adam->set_steps_taken(steps_);  // AdamW's bias correction
  int skipped_total = state.skipped_iterations, nan_iterations = state.nan_iterations;
  int64_t valid_consumed = state.valid_consumed;
  int last = state.iteration;  // the last iteration run (--exit-interval may stop early)
  int saved_iteration = -1;
  // A checkpoint of an --fp16 run carries the scaler (none: state.loss_scale is 0).
  scaling_.restore(
      {state.loss_scale, state.loss_scale_growth_tracker, state.loss_scale_hysteresis_tracker});
  auto progress = [&](int iteration) {
    TrainState s{iteration, consumed_, valid_consumed, steps_, skipped_total, nan_iterations};
    const LossScaler::State scaler = scaling_.state();
    s.loss_scale = scaler.scale;
    s.loss_scale_growth_tracker = scaler.growth_tracker;
    s.loss_scale_hysteresis_tracker = scaler.hysteresis_tracker;
    return s;
  };
  double timed_seconds = 0;
  int timed_iterations = 0;
  summary.timed_ops = ops_now();  // with --profile; zero below, as the CPU trainer's
  for (OpTime& t : summary.timed_ops) t.seconds = 0, t.calls = 0;
  auto report_validation = [&](const SampleSource& source, int64_t& position, const char* split,
                               int iteration, bool at_end) -> Status {
    set_comm_activity(std::string("the ") + (at_end ? "final " : "") + split +
                      " evaluation at iteration " + std::to_string(iteration));
    Result<double> v = validate(source, position);
    if (!v) return v.status();
    ValidationMetrics vm{iteration, split, at_end, *v, std::exp(std::min(20.0, *v))};
    summary.validations.push_back(vm);
    if (rank0) sink_.on_validation(vm);
    return Status::ok();
  };
  const auto run_start = Clock::now();
  reported_at_ = state.iteration;
  for (int it = state.iteration + 1; it <= o_.train_iters; it++) {
    set_comm_activity("iteration " + std::to_string(it));
    // A signal or the time limit on any rank stops every rank at the same iteration.
    const auto stop =
        static_cast<EarlyStop>(all_reduce_scalar(world_, double(early_stop(o_)), ReduceOp::kMax));
    if (stop == EarlyStop::kSignal) {
      request_stop();  // on every rank, not only those asked: run_training reads it
      if (!o_.save.empty() && saved_iteration != it - 1)
        if (Status s = save(progress(it - 1)); !s) return s;
      return Status::internal("stopped by a signal before iteration " + std::to_string(it));
    }
    if (stop == EarlyStop::kExitDuration) {  // saved after the loop, as for --exit-interval
      if (rank0) {
        std::ostringstream m;
        m << "exiting after iteration " << it - 1 << " (--exit-duration-in-mins "
          << o_.exit_duration_in_mins << ")";
        sink_.on_message(m.str());
      }
      break;
    }
    const std::vector<OpTime> ops_at_start = ops_now();
    const auto t0 = Clock::now();
    if (reported(it))
      timeline_.begin(t0, IterationTimeline::capacity(groups_.layout.vpp,
                                                      o_.num_micro_batches() / groups_.layout.dp));
    const double lr = learning_rate(o_.optim, steps_, decay_iters);
    double loss = 0, norm = 0;
    bool skipped = false;
    const Status stepped = step(it, lr, loss, norm, skipped);
    timeline_.end();
    if (!stepped) return stepped;
    if (skipped) skipped_total++;
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
    m.loss_scale = scaling_.loss_scale();
    m.skipped_iterations = skipped_total;
    m.nan_iterations = nan_iterations;
    m.step_seconds = seconds;
    m.tokens_per_second = static_cast<double>(o_.global_batch_size) * T / seconds;
    m.tflops_per_device = flops / seconds / 1e12;
    m.mfu = peak > 0 ? flops / seconds / peak : 0;
    summary.losses.push_back(loss);
    summary.grad_norms.push_back(norm);
    if (rank0) sink_.on_iteration(m);
    if (reported(it)) {
      // Every rank's memory, phase times per iteration since the previous report and this
      // iteration's timeline, gathered to rank 0 (train/rank_reports.h).
      std::vector<RankReport> reports = gather_reports(it - reported_at_, true);
      reported_at_ = it;
      if (rank0) {
        sink_.on_rank_reports(it, reports);
        if (it == 1) {
          const AllocatorStats st = dev_.memory->stats();
          char line[256];
          std::snprintf(line, sizeof line,
                        "device memory (rank 0): in use %.2f GiB, peak in use %.2f GiB, "
                        "reserved %.2f GiB (peak %.2f GiB), fragmentation %.1f MiB, "
                        "%llu allocations (%llu from the cache)",
                        st.in_use / 1073741824.0, st.peak_in_use / 1073741824.0,
                        st.reserved / 1073741824.0, st.peak_reserved / 1073741824.0,
                        st.fragmentation() / 1048576.0,
                        static_cast<unsigned long long>(st.allocations),
                        static_cast<unsigned long long>(st.cache_hits));
          sink_.on_message(line);
        }
      }
    }
    if (data_.valid && o_.eval_iters > 0 && it % o_.eval_interval == 0)
      if (Status s = report_validation(*data_.valid, valid_consumed, "valid", it, false); !s)
        return s;
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
  if (!o_.save.empty() && saved_iteration != last && last > state.iteration)
    if (Status s = save(progress(last)); !s) return s;
  // After the last iteration, as the CPU trainer: the validation split unless the last
  // iteration just ran it (or nothing ran since --load), then the test split from its start.
  if (last == o_.train_iters && o_.eval_iters > 0) {
    if (data_.valid && last > state.iteration && o_.train_iters % o_.eval_interval != 0)
      if (Status s = report_validation(*data_.valid, valid_consumed, "valid", o_.train_iters, true);
          !s)
        return s;
    int64_t test_position = 0;
    if (data_.test)
      if (Status s = report_validation(*data_.test, test_position, "test", o_.train_iters, true);
          !s)
        return s;
  }
  if (timed_iterations > 0) {
    summary.tokens_per_second =
        static_cast<double>(o_.global_batch_size) * T * timed_iterations / timed_seconds;
    summary.gflops_per_rank = flops * timed_iterations / timed_seconds / 1e9;  // flops: per rank
  }
  reported_ = PhaseTimes{};
  summary.ranks = gather_reports(1, false);  // whole-run totals
  if (rank0) summary.memory = summary.ranks[0].memory;
  {
    const std::vector<OpTime> ops = ops_now();
    summary.op_times.assign(ops.begin(), ops.end() - 1);  // the model's ops, whole run
    summary.timed_seconds = timed_seconds;
    summary.timed_iterations = timed_iterations;
  }
  if (!o_.save_hf.empty())
    if (Status s = save_gpu_hf(o_, mc_, world_, device_states(), sink_); !s) return s;
  if (rank0) sink_.on_end(summary);
  return summary;
}

// Why these options do not train on the GPU, one sentence each: the rules every device shares
// (layout_errors; the recomputation rules, TrainOptions::validate's, which train() does not
// run), then the CUDA backend's limits (capability_errors).
std::vector<std::string> refused_on_gpu(const TrainOptions& o, int world_size) {
  std::vector<std::string> e = layout_errors(o, world_size);
  for (std::string& r : o.parallel.recompute_errors()) e.push_back(std::move(r));
  for (std::string& c : capability_errors(o, cuda_capabilities())) e.push_back(std::move(c));
  return e;
}

}  // namespace

std::string gpu_unavailable(const TrainOptions& options, int world_size) {
  std::string why;
  for (const std::string& e : refused_on_gpu(options, world_size))
    why += (why.empty() ? "" : "; ") + e;
  if (why.empty() && cu::device_count() == 0) why = "no CUDA device visible to this process";
  return why;
}

Result<TrainSummary> train_on_gpu(const TrainOptions& o, const ModelConfig& mc, Comm& world,
                                  MetricsSink& sink) {
  if (std::vector<std::string> e = refused_on_gpu(o, world.size()); !e.empty()) {
    std::string text;
    for (const std::string& line : e) text += (text.empty() ? "" : "\n") + line;
    return Status::invalid_argument(text);
  }
  Result<GpuDevice> device = open_device();
  if (!device) return device.status();
  Result<TrainSummary> r = Status::internal("unreachable");
  if (o.bf16)
    r = GpuLoop<bf16>(o, mc, world, sink, *device).run();
  else if (o.fp16)
    r = GpuLoop<fp16>(o, mc, world, sink, *device).run();
  else
    r = GpuLoop<float>(o, mc, world, sink, *device).run();
  return r;
}

void register_gpu_trainer() {
  static const lattice::GpuTrainer entry{&gpu_unavailable, &train_on_gpu};
  set_gpu_trainer(&entry);
}

}  // namespace lattice::gpu
