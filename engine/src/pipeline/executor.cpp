// PipelineExecutor (executor.h): the schedule's actions as queued device work, ordered across
// the compute stream and the channels' side streams by the device's events (Note [pipeline
// streams]).
#include "pipeline/executor.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <type_traits>

#include "core/profiler.h"
#include "pipeline/schedule.h"

namespace lattice {

namespace {
// Fault injection for the slow-rank tests (docs/studio.md, "Slow and stuck ranks"):
// LATTICE_SLOW_FORWARD_MS=N makes every training forward of this process N ms longer, as a
// slower CPU or GPU would (set it on one rank: `mpirun -n 1 env LATTICE_SLOW_FORWARD_MS=40
// lattice train ... : -n 3 lattice train ...`). The host sleeps after queueing the forward.
double slow_forward_seconds() {
  static const double seconds = [] {
    const char* v = std::getenv("LATTICE_SLOW_FORWARD_MS");
    return v ? std::max(0.0, std::atof(v)) / 1e3 : 0.0;
  }();
  return seconds;
}
}  // namespace

template <typename A>
PipelineExecutor<A>::PipelineExecutor(std::vector<GptModel<A>*> chunks, Device& device,
                                      const PipelineComms& comms, int stages, int stage)
    : chunks_(std::move(chunks)), device_(device), stages_(stages), stage_(stage) {
  activations_.comm = comms.activations;
  gradients_.comm = comms.gradients;
  activations_wrap_.comm = comms.activations_wrap;
  gradients_wrap_.comm = comms.gradients_wrap;
}

template <typename A>
Result<std::unique_ptr<PipelineExecutor<A>>> PipelineExecutor<A>::create(
    std::vector<GptModel<A>*> chunks, Device& device, const PipelineComms& comms, int stages,
    int stage, const std::vector<int>& slots) {
  const bool interleaved = chunks.size() > 1;
  if (chunks.empty()) return Status::internal("PipelineExecutor: no model chunk");
  if (slots.size() != chunks.size())
    return Status::internal("PipelineExecutor: " + std::to_string(slots.size()) +
                            " slot counts for " + std::to_string(chunks.size()) + " chunks");
  if (stages > 1 && (!comms.activations || !comms.gradients))
    return Status::internal("PipelineExecutor: pipeline stages without their communicators");
  if (interleaved && (stages == 1 || !comms.activations_wrap || !comms.gradients_wrap))
    return Status::internal(
        "PipelineExecutor: interleaved stages without the wrap-around channels");
  std::unique_ptr<PipelineExecutor<A>> p(
      new PipelineExecutor<A>(std::move(chunks), device, comms, stages, stage));
  if (Status s = p->make_slots(slots); !s) return s;
  if (Status s = p->make_streams(); !s) return s;
  return p;
}

template <typename A>
Status PipelineExecutor<A>::make_slots(const std::vector<int>& slots) {
  slots_.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); c++)
    for (int s = 0; s < std::max(1, slots[c]); s++) {
      Result<std::unique_ptr<GptActivations<A>>> made = chunks_[c]->new_activations();
      if (!made) return made.status();
      slots_[c].push_back(std::move(*made));
    }
  return Status::ok();
}

template <typename A>
Status PipelineExecutor<A>::make_streams() {
  const size_t chunks = chunks_.size();
  output_sent_.resize(chunks);
  input_grad_sent_.resize(chunks);
  free_slots_.resize(chunks);
  for (size_t c = 0; c < chunks; c++) {
    output_sent_[c].assign(slot_count(c), Event{});
    input_grad_sent_[c].assign(slot_count(c), Event{});
  }
  const std::pair<Channel*, const char*> named[] = {
      {&activations_, "pipeline activations"},
      {&gradients_, "pipeline gradients"},
      {&activations_wrap_, "pipeline activations (wrap-around)"},
      {&gradients_wrap_, "pipeline gradients (wrap-around)"}};
  for (const auto& [channel, name] : named) {
    if (!channel->comm) continue;
    Result<Stream*> made = device_.new_stream(name);
    if (!made) return made.status();
    channel->stream = *made;
  }
  return Status::ok();
}

template <typename A>
PipelineExecutor<A>::~PipelineExecutor() {
  // The streams belong to the device; nothing queued on them may outlive the slots they read
  // and write (the trainer synchronises the compute stream after every iteration, and join()
  // made it wait for every channel).
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) (void)device_.synchronize(*channel->stream);
}

template <typename A>
int PipelineExecutor<A>::acquire(int c) {
  // Slots are handed out as the schedule frees them; the caller sized the pool (chunk_peaks).
  std::vector<int>& free = free_slots_[c];
  if (free.empty()) return -1;
  const int s = free.back();
  free.pop_back();
  return s;
}

template <typename A>
Status PipelineExecutor<A>::forward_one(int c, int mb, int s, const Loader& load,
                                        uint64_t dropout_seed, float grad_scale,
                                        accum_t<A>* losses) {
  GptModel<A>& model = *chunks_[c];
  GptActivations<A>& slot = *slots_[c][s];
  const DType type = dtype_of<A>();  // the boundary tensors are of the compute type
  Stream& compute = device_.compute();
  // The slot's output may still be on its way to the next stage from its previous use.
  device_.wait(compute, output_sent_[c][s]);
  slot.packed = packed_;
  const bool ends = first_virtual(c) || last_virtual(c);
  if (ends || packed_) {
    ScopedOp op(&model.profiler(), Op::kData);  // the host's part: reading and queueing
    if (Status st = load(mb, ends ? slot.tokens : nullptr, ends ? slot.targets : nullptr,
                         packed_ ? slot.positions : nullptr, first_virtual(c) ? &slot : nullptr);
        !st)
      return st;
  }
  if (!first_virtual(c)) {
    // Into residual[0], once compute is done with the slot's previous micro-batch.
    Channel& in = input_channel(c);
    follow(*in.stream, compute);
    const int prev = (stage_ + stages_ - 1) % stages_;
    if (Status st = in.comm->recv(slot.residual, model.boundary_elems(), type, prev, *in.stream);
        !st)
      return st;
    const Mark w0 = mark_if_timing();
    follow(compute, *in.stream);
    add_phase(TimelineBox::kPipelineWait, virtual_stage(c), mb, w0);
  }
  const Mark f0 = mark_if_timing();
  model.forward_stage(slot, grad_scale, dropout_seed);
  if (grad_scale > 0 && slow_forward_seconds() > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(slow_forward_seconds()));
  add_phase(TimelineBox::kForward, virtual_stage(c), mb, f0);
  if (last_virtual(c)) {
    const size_t N = static_cast<size_t>(model.B()) * model.T();
    device_.copy(losses + static_cast<size_t>(mb) * N, slot.losses, N * sizeof(accum_t<A>),
                 CopyKind::kDeviceToDevice, compute);
    return Status::ok();
  }
  Channel& out = output_channel();
  follow(*out.stream, compute);
  const int next = (stage_ + 1) % stages_;
  if (Status st =
          out.comm->send(model.output(slot), model.boundary_elems(), type, next, *out.stream);
      !st)
    return st;
  output_sent_[c][s] = device_.record(*out.stream);
  return Status::ok();
}

template <typename A>
Status PipelineExecutor<A>::backward_one(int c, int mb, int s, int micro_batches) {
  GptModel<A>& model = *chunks_[c];
  GptActivations<A>& slot = *slots_[c][s];
  const DType type = dtype_of<A>();  // the boundary tensors are of the compute type
  Stream& compute = device_.compute();
  if (!last_virtual(c)) {
    // Into output_grad, which the slot's previous backward has already read (compute order).
    Channel& in = output_grad_channel();
    follow(*in.stream, compute);
    const int next = (stage_ + 1) % stages_;
    if (Status st = in.comm->recv(slot.output_grad, model.boundary_elems(), type, next, *in.stream);
        !st)
      return st;
    const Mark w0 = mark_if_timing();
    follow(compute, *in.stream);
    add_phase(TimelineBox::kPipelineWait, virtual_stage(c), mb, w0);
  }
  // input_grad may still be on its way to the previous stage from the slot's previous use.
  device_.wait(compute, input_grad_sent_[c][s]);
  // A chunk's gradients are final after its last micro-batch's backward (the schedule runs a
  // chunk's backwards in micro-batch order): only then may data-parallel reductions start.
  model.set_final_backward(mb == micro_batches - 1);
  const Mark b0 = mark_if_timing();
  model.backward_stage(slot);
  add_phase(TimelineBox::kBackward, virtual_stage(c), mb, b0);
  model.set_final_backward(false);
  if (first_virtual(c)) return Status::ok();
  Channel& out = input_grad_channel();
  follow(*out.stream, compute);
  const int prev = (stage_ + stages_ - 1) % stages_;
  if (Status st = out.comm->send(slot.input_grad, model.boundary_elems(), type, prev, *out.stream);
      !st)
    return st;
  input_grad_sent_[c][s] = device_.record(*out.stream);
  return Status::ok();
}

template <typename A>
void PipelineExecutor<A>::join() {
  const Mark w0 = mark_if_timing();
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) follow(device_.compute(), *channel->stream);
  if (stages_ > 1) add_phase(TimelineBox::kPipelineWait, stage_, -1, w0);
}

template <typename A>
Status PipelineExecutor<A>::train(int micro_batches, const Loader& load,
                                  const std::function<uint64_t(int)>& dropout_seed,
                                  float grad_scale, accum_t<A>* losses) {
  const int chunks = static_cast<int>(chunks_.size());
  in_flight_.assign(chunks, std::vector<int>(micro_batches, -1));
  timing_ = true;
  phases_.clear();
  origin_ = device_.mark(device_.compute());
  host_origin_ = std::chrono::steady_clock::now();
  for (int c = 0; c < chunks; c++) {
    free_slots_[c].clear();
    for (int s = slot_count(c) - 1; s >= 0; s--) free_slots_[c].push_back(s);
  }
  for (const PipelineAction& a : pipeline_schedule(stages_, stage_, chunks, micro_batches)) {
    const int c = a.chunk, mb = a.micro_batch;
    if (a.kind == PipelineAction::kForward) {
      const int s = acquire(c);
      if (s < 0)
        return Status::internal("PipelineExecutor: more micro-batches in flight than slots (" +
                                std::to_string(slot_count(c)) + ")");
      in_flight_[c][mb] = s;
      if (Status st = forward_one(c, mb, s, load, dropout_seed(mb), grad_scale, losses); !st)
        return st;
      continue;
    }
    const int s = in_flight_[c][mb];
    if (Status st = backward_one(c, mb, s, micro_batches); !st) return st;
    in_flight_[c][mb] = -1;
    free_slots_[c].push_back(s);
  }
  join();
  timing_ = false;
  return Status::ok();
}

template <typename A>
void PipelineExecutor<A>::collect_times(IterationTimeline* timeline) {
  const bool boxes = timeline && timeline->on();
  // The marks' seconds from origin_, shifted to the timeline's origin by the host clock.
  const double shift =
      boxes ? std::chrono::duration<double>(host_origin_ - timeline->origin()).count() : 0.0;
  for (const TimedPhase& p : phases_) {
    const double seconds = device_.seconds(p.from, p.to);
    if (!(seconds >= 0)) continue;  // unreadable (not synchronised): counted nowhere
    double& total = p.kind == TimelineBox::kForward    ? times_.forward
                    : p.kind == TimelineBox::kBackward ? times_.backward
                                                       : times_.wait;
    total += seconds;
    if (boxes) {
      const double start = shift + device_.seconds(origin_, p.from);
      timeline->add_seconds(p.kind, p.stage, p.micro_batch, start, start + seconds);
    }
  }
  phases_.clear();
}

template <typename A>
Status PipelineExecutor<A>::evaluate(int micro_batches, const Loader& load, accum_t<A>* losses) {
  // Micro-batch by micro-batch through slot 0: a valid order on every rank (a stage's input
  // comes from the previous stage's forward of the same micro-batch).
  for (int mb = 0; mb < micro_batches; mb++)
    for (int c = 0; c < static_cast<int>(chunks_.size()); c++)
      if (Status st = forward_one(c, mb, 0, load, 0, 0.0f, losses); !st) return st;
  join();
  return Status::ok();
}

template class PipelineExecutor<float>;
template class PipelineExecutor<double>;
template class PipelineExecutor<bf16>;
template class PipelineExecutor<fp16>;

}  // namespace lattice
