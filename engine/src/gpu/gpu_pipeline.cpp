// GpuPipeline (gpu_pipeline.h): the schedule's actions as queued device work, ordered across the
// compute, activation and gradient streams by events (Note [GPU pipeline streams]).
#include "gpu/gpu_pipeline.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>

#include "parallel/nccl_comm.h"
#include "pipeline/schedule.h"

namespace lattice::gpu {

namespace {
cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t as_event(void* e) {
  return static_cast<cudaEvent_t>(e);
}

Status send_boundary(Comm& comm, const void* data, size_t count, DType type, int peer,
                     void* stream) {
#if LATTICE_HAVE_NCCL
  return send_on_stream(comm, data, count, type, peer, as_stream(stream));
#else
  (void)comm, (void)data, (void)count, (void)type, (void)peer, (void)stream;
  return Status::invalid_argument("pipeline parallelism on GPUs needs NCCL and MPI in the build");
#endif
}

Status recv_boundary(Comm& comm, void* data, size_t count, DType type, int peer, void* stream) {
#if LATTICE_HAVE_NCCL
  return recv_on_stream(comm, data, count, type, peer, as_stream(stream));
#else
  (void)comm, (void)data, (void)count, (void)type, (void)peer, (void)stream;
  return Status::invalid_argument("pipeline parallelism on GPUs needs NCCL and MPI in the build");
#endif
}
}  // namespace

int pipeline_slots(int stages, int stage, int chunks, int micro_batches) {
  std::vector<int> live(chunks, 0), most(chunks, 0);
  for (const PipelineAction& a : pipeline_schedule(stages, stage, chunks, micro_batches)) {
    live[a.chunk] += a.kind == PipelineAction::kForward ? 1 : -1;
    most[a.chunk] = std::max(most[a.chunk], live[a.chunk]);
  }
  return std::max(1, *std::max_element(most.begin(), most.end()));
}

template <typename A>
GpuPipeline<A>::GpuPipeline(std::vector<GpuGpt<A>*> chunks, cu::Context& ctx,
                            const PipelineComms& comms, int stages, int stage)
    : chunks_(std::move(chunks)), ctx_(ctx), stages_(stages), stage_(stage) {
  activations_.comm = comms.activations;
  gradients_.comm = comms.gradients;
  activations_wrap_.comm = comms.activations_wrap;
  gradients_wrap_.comm = comms.gradients_wrap;
}

template <typename A>
Result<std::unique_ptr<GpuPipeline<A>>> GpuPipeline<A>::create(std::vector<GpuGpt<A>*> chunks,
                                                               cu::Context& ctx,
                                                               const PipelineComms& comms,
                                                               int stages, int stage) {
  const bool interleaved = chunks.size() > 1;
  if (chunks.empty()) return Status::internal("GpuPipeline: no model chunk");
  if (stages > 1 && (!comms.activations || !comms.gradients))
    return Status::internal("GpuPipeline: pipeline stages without their communicators");
  if (interleaved && (stages == 1 || !comms.activations_wrap || !comms.gradients_wrap))
    return Status::internal("GpuPipeline: interleaved stages without the wrap-around channels");
  std::unique_ptr<GpuPipeline<A>> p(
      new GpuPipeline<A>(std::move(chunks), ctx, comms, stages, stage));
  if (Status s = p->make_streams(); !s) return s;
  return p;
}

template <typename A>
Status GpuPipeline<A>::make_streams() {
  const size_t chunks = chunks_.size();
  output_sent_.resize(chunks);
  input_grad_sent_.resize(chunks);
  free_slots_.resize(chunks);
  auto event = [](void*& e) {
    cudaEvent_t made = nullptr;
    const bool ok = cudaEventCreateWithFlags(&made, cudaEventDisableTiming) == cudaSuccess;
    e = made;
    return ok;
  };
  if (!event(scratch_event_)) return Status::internal("GpuPipeline: cudaEventCreate failed");
  for (size_t c = 0; c < chunks; c++) {
    const int count = chunks_[c]->slot_count();
    output_sent_[c].assign(count, nullptr);
    input_grad_sent_[c].assign(count, nullptr);
    for (int s = 0; s < count; s++)
      if (!event(output_sent_[c][s]) || !event(input_grad_sent_[c][s]))
        return Status::internal("GpuPipeline: cudaEventCreate failed");
  }
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_}) {
    if (!channel->comm) continue;
    cudaStream_t made = nullptr;
    if (cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking) != cudaSuccess)
      return Status::internal("GpuPipeline: cudaStreamCreate failed");
    channel->stream = made;
  }
  return Status::ok();
}

template <typename A>
GpuPipeline<A>::~GpuPipeline() {
  // Nothing queued may still use the events or streams (the trainer synchronises the Context
  // after every iteration, and join() made it wait for both streams).
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) {
      cudaStreamSynchronize(as_stream(channel->stream));
      cudaStreamDestroy(as_stream(channel->stream));
    }
  if (scratch_event_) cudaEventDestroy(as_event(scratch_event_));
  for (auto* events : {&output_sent_, &input_grad_sent_})
    for (auto& per_chunk : *events)
      for (void* e : per_chunk)
        if (e) cudaEventDestroy(as_event(e));
}

template <typename A>
void GpuPipeline<A>::follow(void* waiter, void* stream) {
  if (cudaEventRecord(as_event(scratch_event_), as_stream(stream)) != cudaSuccess ||
      cudaStreamWaitEvent(as_stream(waiter), as_event(scratch_event_), 0) != cudaSuccess)
    ctx_.record_error("GpuPipeline: ordering two streams failed (cudaEventRecord)");
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
                                   float grad_scale, float* losses) {
  GpuGpt<A>& model = *chunks_[c];
  GpuSlot<A>& slot = model.slot(s);
  const DType type = dtype_of<A>();  // the boundary tensors are of the compute type
  void* compute = ctx_.stream();
  // The slot's output may still be on its way to the next stage from its previous use.
  if (cudaStreamWaitEvent(as_stream(compute), as_event(output_sent_[c][s]), 0) != cudaSuccess)
    ctx_.record_error("GpuPipeline: cudaStreamWaitEvent failed");
  if (first_virtual(c) || last_virtual(c))
    if (Status st = load(mb, slot.tokens, slot.targets); !st) return st;
  if (!first_virtual(c)) {
    // Into residual[0], once compute is done with the slot's previous micro-batch.
    Channel& in = input_channel(c);
    follow(in.stream, compute);
    const int prev = (stage_ + stages_ - 1) % stages_;
    if (Status st =
            recv_boundary(*in.comm, slot.residual, model.boundary_elems(), type, prev, in.stream);
        !st)
      return st;
    follow(compute, in.stream);
  }
  model.forward_slot(s, grad_scale, dropout_seed);
  if (last_virtual(c)) {
    const size_t N = static_cast<size_t>(model.B()) * model.T();
    copy_device_async(ctx_, losses + static_cast<size_t>(mb) * N, slot.losses, N * sizeof(float));
    return Status::ok();
  }
  Channel& out = output_channel();
  follow(out.stream, compute);
  const int next = (stage_ + 1) % stages_;
  if (Status st =
          send_boundary(*out.comm, model.output(s), model.boundary_elems(), type, next, out.stream);
      !st)
    return st;
  if (cudaEventRecord(as_event(output_sent_[c][s]), as_stream(out.stream)) != cudaSuccess)
    ctx_.record_error("GpuPipeline: cudaEventRecord failed");
  return Status::ok();
}

template <typename A>
Status GpuPipeline<A>::backward_one(int c, int mb, int s, int micro_batches) {
  GpuGpt<A>& model = *chunks_[c];
  GpuSlot<A>& slot = model.slot(s);
  const DType type = dtype_of<A>();  // the boundary tensors are of the compute type
  void* compute = ctx_.stream();
  if (!last_virtual(c)) {
    // Into output_grad, which the slot's previous backward has already read (compute order).
    Channel& in = output_grad_channel();
    follow(in.stream, compute);
    const int next = (stage_ + 1) % stages_;
    if (Status st = recv_boundary(*in.comm, slot.output_grad, model.boundary_elems(), type, next,
                                  in.stream);
        !st)
      return st;
    follow(compute, in.stream);
  }
  // input_grad may still be on its way to the previous stage from the slot's previous use.
  if (cudaStreamWaitEvent(as_stream(compute), as_event(input_grad_sent_[c][s]), 0) != cudaSuccess)
    ctx_.record_error("GpuPipeline: cudaStreamWaitEvent failed");
  // A chunk's gradients are final after its last micro-batch's backward (the schedule runs a
  // chunk's backwards in micro-batch order): only then may data-parallel reductions start.
  model.set_final_backward(mb == micro_batches - 1);
  model.backward_slot(s);
  model.set_final_backward(false);
  if (first_virtual(c)) return Status::ok();
  Channel& out = input_grad_channel();
  follow(out.stream, compute);
  const int prev = (stage_ + stages_ - 1) % stages_;
  if (Status st =
          send_boundary(*out.comm, slot.input_grad, model.boundary_elems(), type, prev, out.stream);
      !st)
    return st;
  if (cudaEventRecord(as_event(input_grad_sent_[c][s]), as_stream(out.stream)) != cudaSuccess)
    ctx_.record_error("GpuPipeline: cudaEventRecord failed");
  return Status::ok();
}

template <typename A>
Status GpuPipeline<A>::join() {
  for (Channel* channel : {&activations_, &gradients_, &activations_wrap_, &gradients_wrap_})
    if (channel->stream) follow(ctx_.stream(), channel->stream);
  return Status::ok();
}

template <typename A>
Status GpuPipeline<A>::train(int micro_batches, const Loader& load,
                             const std::function<uint64_t(int)>& dropout_seed, float grad_scale,
                             float* losses) {
  const int chunks = static_cast<int>(chunks_.size());
  in_flight_.assign(chunks, std::vector<int>(micro_batches, -1));
  for (int c = 0; c < chunks; c++) {
    free_slots_[c].clear();
    for (int s = chunks_[c]->slot_count() - 1; s >= 0; s--) free_slots_[c].push_back(s);
  }
  for (const PipelineAction& a : pipeline_schedule(stages_, stage_, chunks, micro_batches)) {
    const int c = a.chunk, mb = a.micro_batch;
    if (a.kind == PipelineAction::kForward) {
      const int s = acquire(c);
      if (s < 0)
        return Status::internal("GpuPipeline: more micro-batches in flight than slots (" +
                                std::to_string(chunks_[c]->slot_count()) + ")");
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
  return join();
}

template <typename A>
Status GpuPipeline<A>::evaluate(int micro_batches, const Loader& load, float* losses) {
  // Micro-batch by micro-batch through slot 0: a valid order on every rank (a stage's input
  // comes from the previous stage's forward of the same micro-batch).
  for (int mb = 0; mb < micro_batches; mb++)
    for (int c = 0; c < static_cast<int>(chunks_.size()); c++)
      if (Status st = forward_one(c, mb, 0, load, 0, 0.0f, losses); !st) return st;
  return join();
}

template class GpuPipeline<float>;
template class GpuPipeline<bf16>;
template class GpuPipeline<fp16>;

}  // namespace lattice::gpu
