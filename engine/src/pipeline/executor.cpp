#include "pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/host_memory.h"
#include "device/cpu_device.h"
#include "pipeline/schedule.h"

namespace lattice {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}
enum Direction { kActivation = 0, kGradient = 1 };

// Fault injection for the slow-rank tests (docs/studio.md, "Slow and stuck ranks"):
// LATTICE_SLOW_FORWARD_MS=N makes every forward of this process N ms longer, as a slower CPU or
// GPU would (set it on one rank: `mpirun -n 1 env LATTICE_SLOW_FORWARD_MS=40 lattice train ...
// : -n 3 lattice train ...`).
double slow_forward_seconds() {
  static const double seconds = [] {
    const char* v = std::getenv("LATTICE_SLOW_FORWARD_MS");
    return v ? std::max(0.0, std::atof(v)) / 1e3 : 0.0;
  }();
  return seconds;
}
}  // namespace

const char* timeline_kind_name(TimelineBox::Kind kind) {
  static const char* const names[TimelineBox::kKinds] = {"forward", "backward",  "pipeline wait",
                                                         "dp comm", "optimizer", "embedding comm"};
  assert(kind >= 0 && kind < TimelineBox::kKinds);
  return names[kind];
}

template <typename T>
Result<std::unique_ptr<PipelineExecutor<T>>> PipelineExecutor<T>::create(std::vector<Model*> chunks,
                                                                         Device& device, Comm* pp,
                                                                         int stages, int stage) {
  Result<Stream*> sends = device.new_stream("pipeline sends");
  if (!sends) return sends.status();
  if (!(*sends)->queue())
    return Status::internal(
        "the pipeline executor sends through a CPU side stream's "
        "queue; " +
        device.describe() + " has none");
  return std::unique_ptr<PipelineExecutor>(
      new PipelineExecutor(std::move(chunks), device, **sends, pp, stages, stage));
}

template <typename T>
PipelineExecutor<T>::PipelineExecutor(std::vector<Model*> chunks, Device& device, Stream& sends,
                                      Comm* pp, int stages, int stage)
    : chunks_(std::move(chunks)),
      device_(device),
      sends_(sends),
      pp_(pp),
      stages_(stages),
      stage_(stage) {
  pools_.resize(chunks_.size());
  const size_t N = static_cast<size_t>(chunks_[0]->B()) * chunks_[0]->T();
  host_assign(tokens_, N, MemoryCategory::kActivations);
  host_assign(targets_, N, MemoryCategory::kActivations);
  host_assign(losses_, N, MemoryCategory::kActivations);
}

template <typename T>
int PipelineExecutor<T>::tag(int virtual_stage, int micro_batch, int direction) const {
  const int virtual_stages = stages_ * static_cast<int>(chunks_.size());
  return (micro_batch * virtual_stages + virtual_stage) * 2 + direction;
}

template <typename T>
Result<typename PipelineExecutor<T>::Activations*> PipelineExecutor<T>::acquire(int chunk) {
  Pool& pool = pools_[chunk];
  if (pool.free.empty()) {
    Result<std::unique_ptr<Activations>> made = chunks_[chunk]->new_activations();
    if (!made) return made.status();
    pool.all.push_back(std::move(*made));
    pool.free.push_back(pool.all.back().get());
  }
  Activations* acts = pool.free.back();
  pool.free.pop_back();
  return acts;
}

template <typename T>
void PipelineExecutor<T>::release(int chunk, Activations* acts) {
  pools_[chunk].free.push_back(acts);
}

template <typename T>
size_t PipelineExecutor<T>::buffer_bytes() const {
  size_t bytes = 0;
  for (const auto& o : outgoing_) bytes += o->data.capacity() * sizeof(T);
  return bytes;
}

template <typename T>
Status PipelineExecutor<T>::send(const T* data, size_t count, int peer, int tag) {
  // Reuse a buffer whose send has completed; keep the others alive until they do.
  Outgoing* slot = nullptr;
  for (auto& o : outgoing_)
    if (device_.completed(o->sent)) {
      slot = o.get();
      break;
    }
  if (Status s = device_.error(); !s) return s;
  if (!slot) {
    outgoing_.push_back(std::make_unique<Outgoing>());
    slot = outgoing_.back().get();
  }
  slot->data.assign(data, data + count);
  sends_.queue()->push(pp_->isend(slot->data.data(), count, dtype_of<T>(), peer, tag));
  slot->sent = device_.record(sends_);
  return Status::ok();
}

template <typename T>
Status PipelineExecutor<T>::receive(T* data, size_t count, int peer, int virtual_stage,
                                    int micro_batch, int direction) {
  const auto t0 = Clock::now();
  Status s =
      pp_->recv(data, count, dtype_of<T>(), peer, tag(virtual_stage, micro_batch, direction));
  const auto t1 = Clock::now();
  times_.wait += seconds_between(t0, t1);
  if (recording()) timeline_->add(TimelineBox::kPipelineWait, virtual_stage, micro_batch, t0, t1);
  return s;
}

template <typename T>
Status PipelineExecutor<T>::drain_sends() {
  const auto t0 = Clock::now();
  if (Status s = device_.synchronize(sends_); !s) return s;
  const auto t1 = Clock::now();
  times_.wait += seconds_between(t0, t1);
  if (recording() && stages_ > 1) timeline_->add(TimelineBox::kPipelineWait, stage_, -1, t0, t1);
  return Status::ok();
}

template <typename T>
Result<double> PipelineExecutor<T>::mean_loss(const Activations& acts) {
  device_.copy(losses_.data(), acts.losses, losses_.size() * sizeof(accum_t<T>),
               CopyKind::kDeviceToHost, device_.compute());
  if (Status s = device_.synchronize(device_.compute()); !s) return s;
  double sum = 0;
  for (accum_t<T> l : losses_) sum += static_cast<double>(l);
  return sum / static_cast<double>(losses_.size());
}

template <typename T>
Status PipelineExecutor<T>::forward_one(int c, int mb, const Loader& load, uint64_t seed,
                                        float grad_scale, double& loss_sum, Activations* acts) {
  Model& model = *chunks_[c];
  const int virtual_stage = c * stages_ + stage_;
  const int prev = (stage_ + stages_ - 1) % stages_, next = (stage_ + 1) % stages_;
  const size_t token_bytes = tokens_.size() * sizeof(int32_t);
  if (first_virtual(c) || last_virtual(c)) {
    ScopedOp op(&model.profiler(), Op::kData);
    if (Status s = load(mb, tokens_.data(), targets_.data()); !s) return s;
    if (first_virtual(c))
      device_.copy(acts->tokens, tokens_.data(), token_bytes, CopyKind::kHostToDevice,
                   device_.compute());
    if (last_virtual(c))
      device_.copy(acts->targets, targets_.data(), token_bytes, CopyKind::kHostToDevice,
                   device_.compute());
  }
  if (!first_virtual(c))
    if (Status s =
            receive(acts->residual, model.boundary_elems(), prev, virtual_stage, mb, kActivation);
        !s)
      return s;
  const auto t0 = Clock::now();
  model.forward_stage(*acts, grad_scale, seed);
  if (grad_scale > 0 && slow_forward_seconds() > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(slow_forward_seconds()));
  const auto t1 = Clock::now();
  times_.forward += seconds_between(t0, t1);
  if (recording()) timeline_->add(TimelineBox::kForward, virtual_stage, mb, t0, t1);
  if (last_virtual(c)) {
    Result<double> loss = mean_loss(*acts);
    if (!loss) return loss.status();
    loss_sum += *loss;
  } else if (Status s = send(model.output(*acts), model.boundary_elems(), next,
                             tag(virtual_stage + 1, mb, kActivation));
             !s) {
    return s;
  }
  return device_.error();
}

template <typename T>
void PipelineExecutor<T>::collect_op_times() {
  for (Model* chunk : chunks_) chunk->collect_op_times();
  device_.reset_marks();
}

template <typename T>
Result<double> PipelineExecutor<T>::train(int micro_batches, const Loader& load,
                                          const std::function<uint64_t(int)>& dropout_seed,
                                          float grad_scale) {
  const int chunks = static_cast<int>(chunks_.size());
  in_flight_.assign(chunks, std::vector<Activations*>(micro_batches, nullptr));
  double loss_sum = 0;
  const int prev = (stage_ + stages_ - 1) % stages_, next = (stage_ + 1) % stages_;
  for (const PipelineAction& a : pipeline_schedule(stages_, stage_, chunks, micro_batches)) {
    const int c = a.chunk, mb = a.micro_batch;
    Model& model = *chunks_[c];
    const int virtual_stage = c * stages_ + stage_;
    if (a.kind == PipelineAction::kForward) {
      Result<Activations*> acts = acquire(c);
      if (!acts) return acts.status();
      in_flight_[c][mb] = *acts;
      if (Status s = forward_one(c, mb, load, dropout_seed(mb), grad_scale, loss_sum, *acts); !s)
        return s;
      continue;
    }
    Activations* acts = in_flight_[c][mb];
    if (!last_virtual(c))
      if (Status s = receive(acts->output_grad, model.boundary_elems(), next, virtual_stage, mb,
                             kGradient);
          !s)
        return s;
    // Gradients of a chunk are final after its last micro-batch's backward: only then may
    // data-parallel buckets start (the schedule runs each chunk's backwards in order).
    model.set_final_backward(mb == micro_batches - 1);
    const auto t0 = Clock::now();
    model.backward_stage(*acts);
    const auto t1 = Clock::now();
    times_.backward += seconds_between(t0, t1);
    if (recording()) timeline_->add(TimelineBox::kBackward, virtual_stage, mb, t0, t1);
    model.set_final_backward(false);
    if (!first_virtual(c))
      if (Status s = send(acts->input_grad, model.boundary_elems(), prev,
                          tag(virtual_stage - 1, mb, kGradient));
          !s)
        return s;
    release(c, acts);
    in_flight_[c][mb] = nullptr;
  }
  if (Status s = drain_sends(); !s) return s;
  collect_op_times();
  if (Status s = device_.error(); !s) return s;
  return loss_sum;
}

template <typename T>
Result<double> PipelineExecutor<T>::evaluate(int micro_batches, const Loader& load) {
  const PipelineTimes training = times_;  // restored: validation is not a training phase
  double loss_sum = 0;
  const int chunks = static_cast<int>(chunks_.size());
  // Micro-batch by micro-batch, chunk by chunk: a valid order on every rank, since a chunk's
  // input comes from a lower virtual stage of the same micro-batch.
  for (int mb = 0; mb < micro_batches; mb++)
    for (int c = 0; c < chunks; c++) {
      Result<Activations*> acts = acquire(c);
      if (!acts) return acts.status();
      Status s = forward_one(c, mb, load, 0, 0.0f, loss_sum, *acts);
      release(c, *acts);
      if (!s) return s;
    }
  if (Status s = drain_sends(); !s) return s;
  collect_op_times();
  times_ = training;
  return loss_sum;
}

template class PipelineExecutor<float>;
template class PipelineExecutor<double>;

}  // namespace lattice
