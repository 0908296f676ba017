// GpuPipeline (gpu_pipeline.h): the schedule's actions as queued device work, ordered across the
// compute stream and the channels' side streams by the device's events (Note [GPU pipeline
// streams]).
#include "gpu/gpu_pipeline.h"

#include <algorithm>
#include <type_traits>

#include "pipeline/schedule.h"

namespace lattice::gpu {

int pipeline_slots(int stages, int stage, int chunks, int micro_batches) {
  std::vector<int> live(chunks, 0), most(chunks, 0);
  for (const PipelineAction& a : pipeline_schedule(stages, stage, chunks, micro_batches)) {
    live[a.chunk] += a.kind == PipelineAction::kForward ? 1 : -1;
    most[a.chunk] = std::max(most[a.chunk], live[a.chunk]);
  }
  return std::max(1, *std::max_element(most.begin(), most.end()));
}

template <typename A>
GpuPipeline<A>::GpuPipeline(std::vector<GptModel<A>*> chunks, Device& device,
                            const PipelineComms& comms, int stages, int stage)
    : chunks_(std::move(chunks)), device_(device), stages_(stages), stage_(stage) {
  activations_.comm = comms.activations;
  gradients_.comm = comms.gradients;
  activations_wrap_.comm = comms.activations_wrap;
  gradients_wrap_.comm = comms.gradients_wrap;
}

template <typename A>
Result<std::unique_ptr<GpuPipeline<A>>> GpuPipeline<A>::create(std::vector<GptModel<A>*> chunks,
                                                               Device& device,
                                                               const PipelineComms& comms,
                                                               int stages, int stage, int slots) {
  const bool interleaved = chunks.size() > 1;
  if (chunks.empty()) return Status::internal("GpuPipeline: no model chunk");
  if (stages > 1 && (!comms.activations || !comms.gradients))
    return Status::internal("GpuPipeline: pipeline stages without their communicators");
  if (interleaved && (stages == 1 || !comms.activations_wrap || !comms.gradients_wrap))
    return Status::internal("GpuPipeline: interleaved stages without the wrap-around channels");
  std::unique_ptr<GpuPipeline<A>> p(
      new GpuPipeline<A>(std::move(chunks), device, comms, stages, stage));
  if (Status s = p->make_slots(slots); !s) return s;
  if (Status s = p->make_streams(); !s) return s;
  return p;
}

template <typename A>
Status GpuPipeline<A>::make_slots(int slots) {
  slots_.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); c++)
    for (int s = 0; s < std::max(1, slots); s++) {
      Result<std::unique_ptr<GptActivations<A>>> made = chunks_[c]->new_activations();
      if (!made) return made.status();
      slots_[c].push_back(std::move(*made));
    }
  return Status::ok();
}

template <typename A>
Status GpuPipeline<A>::make_streams() {
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
GpuPipeline<A>::~GpuPipeline() {
  // The streams belong to the device; nothing queued on them may outlive the slots they read
  // and write (the trainer synchronises the compute stream after every iteration, and join()
  // made it wait for every channel).
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) (void)device_.synchronize(*channel->stream);
}

template <typename A>
int GpuPipeline<A>::acquire(int c) {
  // Slots are handed out as the schedule frees them; pipeline_slots() sized the pool.
  std::vector<int>& free = free_slots_[c];
  if (free.empty()) return -1;
  const int s = free.back();
  free.pop_back();
  return s;
}

template <typename A>
Status GpuPipeline<A>::forward_one(int c, int mb, int s, const Loader& load, uint64_t dropout_seed,
                                   float grad_scale, accum_t<A>* losses) {
  GptModel<A>& model = *chunks_[c];
  GptActivations<A>& slot = *slots_[c][s];
  const DType type = dtype_of<A>();  // the boundary tensors are of the compute type
  Stream& compute = device_.compute();
  // The slot's output may still be on its way to the next stage from its previous use.
  device_.wait(compute, output_sent_[c][s]);
  if (first_virtual(c) || last_virtual(c))
    if (Status st = load(mb, slot.tokens, slot.targets); !st) return st;
  if (!first_virtual(c)) {
    // Into residual[0], once compute is done with the slot's previous micro-batch.
    Channel& in = input_channel(c);
    follow(*in.stream, compute);
    const int prev = (stage_ + stages_ - 1) % stages_;
    if (Status st = in.comm->recv(slot.residual, model.boundary_elems(), type, prev, *in.stream);
        !st)
      return st;
    const Mark w0 = timing_ ? device_.mark(compute) : Mark{};
    follow(compute, *in.stream);
    if (timing_)
      phases_.push_back(
          {TimelineBox::kPipelineWait, virtual_stage(c), mb, w0, device_.mark(compute)});
  }
  const Mark f0 = timing_ ? device_.mark(compute) : Mark{};
  model.forward_stage(slot, grad_scale, dropout_seed);
  if (timing_)
    phases_.push_back({TimelineBox::kForward, virtual_stage(c), mb, f0, device_.mark(compute)});
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
Status GpuPipeline<A>::backward_one(int c, int mb, int s, int micro_batches) {
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
    const Mark w0 = timing_ ? device_.mark(compute) : Mark{};
    follow(compute, *in.stream);
    if (timing_)
      phases_.push_back(
          {TimelineBox::kPipelineWait, virtual_stage(c), mb, w0, device_.mark(compute)});
  }
  // input_grad may still be on its way to the previous stage from the slot's previous use.
  device_.wait(compute, input_grad_sent_[c][s]);
  // A chunk's gradients are final after its last micro-batch's backward (the schedule runs a
  // chunk's backwards in micro-batch order): only then may data-parallel reductions start.
  model.set_final_backward(mb == micro_batches - 1);
  const Mark b0 = timing_ ? device_.mark(compute) : Mark{};
  model.backward_stage(slot);
  if (timing_)
    phases_.push_back({TimelineBox::kBackward, virtual_stage(c), mb, b0, device_.mark(compute)});
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
Status GpuPipeline<A>::join() {
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) follow(device_.compute(), *channel->stream);
  return Status::ok();
}

template <typename A>
Status GpuPipeline<A>::train(int micro_batches, const Loader& load,
                             const std::function<uint64_t(int)>& dropout_seed, float grad_scale,
                             accum_t<A>* losses) {
  const int chunks = static_cast<int>(chunks_.size());
  in_flight_.assign(chunks, std::vector<int>(micro_batches, -1));
  timing_ = true;
  phases_.clear();
  origin_ = device_.mark(device_.compute());
  for (int c = 0; c < chunks; c++) {
    free_slots_[c].clear();
    for (int s = slot_count(c) - 1; s >= 0; s--) free_slots_[c].push_back(s);
  }
  for (const PipelineAction& a : pipeline_schedule(stages_, stage_, chunks, micro_batches)) {
    const int c = a.chunk, mb = a.micro_batch;
    if (a.kind == PipelineAction::kForward) {
      const int s = acquire(c);
      if (s < 0)
        return Status::internal("GpuPipeline: more micro-batches in flight than slots (" +
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
  timing_ = false;
  return join();
}

template <typename A>
void GpuPipeline<A>::collect_times(IterationTimeline* timeline) {
  const bool boxes = timeline && timeline->on();
  for (const TimedPhase& p : phases_) {
    const double seconds = device_.seconds(p.from, p.to);
    if (!(seconds >= 0)) continue;  // unreadable (not synchronised): counted nowhere
    double& total = p.kind == TimelineBox::kForward    ? times_.forward
                    : p.kind == TimelineBox::kBackward ? times_.backward
                                                       : times_.wait;
    total += seconds;
    if (boxes) {
      const double start = device_.seconds(origin_, p.from);
      timeline->add_seconds(p.kind, p.stage, p.micro_batch, start, start + seconds);
    }
  }
  phases_.clear();
}

template <typename A>
Status GpuPipeline<A>::evaluate(int micro_batches, const Loader& load, accum_t<A>* losses) {
  // Micro-batch by micro-batch through slot 0: a valid order on every rank (a stage's input
  // comes from the previous stage's forward of the same micro-batch).
  for (int mb = 0; mb < micro_batches; mb++)
    for (int c = 0; c < static_cast<int>(chunks_.size()); c++)
      if (Status st = forward_one(c, mb, 0, load, 0, 0.0f, losses); !st) return st;
  return join();
}

template class GpuPipeline<float>;
template class GpuPipeline<double>;
template class GpuPipeline<bf16>;
template class GpuPipeline<fp16>;

}  // namespace lattice::gpu
