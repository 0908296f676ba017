// AdamW over a model chunk's flat arena on a device (docs/one-engine.md 3.7, step 7): Megatron's
// parameter groups (no weight decay on biases and norms), the learning-rate schedule, global-norm
// clipping folded into the step, and moments for the arena part the rank owns
// (optimizer_shard.h: the whole arena, or with the distributed optimizer this data-parallel
// rank's shard), packed piece after piece. Its step is one multi-tensor Ops::adamw_update, which
// also refreshes the 16-bit compute copy of a bf16 or fp16 run. The trainer makes one per chunk
// on the rank's device (create); offline checkpoint tools use the host constructor (a CPU
// device of its own over host arenas). Not thread-safe (one per chunk of a rank).
//
// Note [master weights in the optimizer]. A 16-bit training run keeps no whole fp32 master
// arena (MasterWeights::kInOptimizer in model/gpt.h): its AdamW holds the fp32 master of the
// pieces it updates, packed like the moments, as Megatron's mixed-precision optimizer does. A
// trained parameter costs 2 bytes of weights + 4 of gradients + 12 of optimizer state, and with
// the distributed optimizer, whose pieces are the rank's shards, 2 + 4 + 12 / DP. A frozen
// tensor (LoRA's base, --freeze-LM, --freeze-ViT) has no piece and no master: its 16-bit copy
// is all there is (2 bytes). The step writes the pieces of the master and of the 16-bit copy;
// the distributed optimizer's GradReducer::gather_params all-gathers the 16-bit copy (half the
// bytes of the master). Whole-arena views of the master exist only for a moment: a checkpoint
// save or an export gathers the pieces bucket by bucket (GradReducer::gather_master) over the
// frozen tensors' widened 16-bit values, a load rounds a host arena into the 16-bit copy and
// fills the pieces from it (load_master); the initialisation goes a tensor at a time
// (GptModel::init_weights).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "device/ops.h"
#include "lattice/status.h"
#include "lattice/train_options.h"
#include "model/param_layout.h"
#include "optim/optimizer_shard.h"

namespace lattice {

class Device;

// Megatron's OptimizerParamScheduler, counted in optimizer steps already taken: iteration i
// (1-based) trains with learning_rate(config, i - 1, ...). Linear warm-up from 0 to lr over
// lr_warmup_iters (so with warm-up the first iteration's lr is 0, as in Megatron), then decay
// to min_lr at decay_iters, min_lr after.
double learning_rate(const OptimizerConfig& config, int steps_taken, int decay_iters);

// Megatron's clip_grad_norm: the factor gradients are scaled by (1 when no clipping applies).
double clip_coefficient(double norm, float clip_grad);

// Which gradients AdamW::sum_squares takes.
enum class NormPart { kAll, kDense, kExperts };

// A: the compute type (float, double; bf16 and fp16 with float masters). Pointers to weights,
// gradients and moments are the device's memory.
template <typename A>
class AdamW {
 public:
  using G = accum_t<A>;  // master weights, gradients, moments

  // On `device`: the moments (shard.state_numel each, kOptimizer) and the norm's one double
  // (kWorkspace) allocated there, the moments zeroed on its compute stream. Errors: the device's
  // out-of-memory sentence; a device without an op list for A.
  // holds_master (16-bit A only): the optimizer keeps the fp32 master of its pieces (Note
  // [master weights in the optimizer]), allocated there too (kOptimizer), uninitialised until
  // load_master.
  static Result<std::unique_ptr<AdamW>> create(Device& device, OptimizerShard shard,
                                               const OptimizerConfig& config,
                                               bool holds_master = false);
  // On the host, over a CPU device of its own: owned = the arena ranges this optimizer updates
  // (empty: the whole arena; GradReducer::owned_ranges with the distributed optimizer). Throws
  // OutOfMemory (kOptimizer) when the moments do not fit, as the host arenas do.
  AdamW(const ParamLayout& layout, const OptimizerConfig& config,
        const std::vector<ArenaRange>& owned = {});
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  const OptimizerShard& shard() const { return shard_; }
  // Sum of squared gradients over the owned pieces that count in the global norm (each
  // parameter once over the model-parallel group; ParamTensor::counts_in_norm), piece by piece
  // in a fixed order. grads (arena numel). Waits for the device's compute stream. part: all
  // of them, or only those of expert-parallel experts (ParamTensor::expert_parallel, whose
  // squares the trainer sums over the EP group) or only the others.
  double sum_squares(const G* grads, NormPart part = NormPart::kAll);
  // One AdamW step on the owned elements with the gradients scaled by clip_coeff (when < 1) on
  // the way in; the gradients themselves are not written. compute_copy (arena numel), when
  // set, receives the updated owned weights rounded to A (the 16-bit copy; null for float and
  // double). params: the master arena (arena numel), or null when the optimizer holds the
  // master (holds_master). Queued on the compute stream.
  void update(G* params, const G* grads, double lr, double clip_coeff, A* compute_copy = nullptr);
  // One process holding everything: norm, clip, step. Returns the norm before clipping; a
  // non-finite norm (inf/NaN gradients) skips the step: nothing changes.
  double step(G* params, const G* grads, double lr);

  int steps_taken() const { return step_; }
  void set_steps_taken(int steps) { step_ = steps; }  // restoring a checkpoint
  // The owned part of each tensor: arena [offset, offset + numel) and its moments, for
  // checkpoints (device memory: host memory on the CPU). One per piece of shard(), in order.
  struct StateView {
    size_t offset, numel;
    G* exp_avg;     // (numel)
    G* exp_avg_sq;  // (numel)
  };
  std::vector<StateView> state_views();
  size_t bytes() const { return (master_ ? 3 : 2) * shard_.state_numel * sizeof(G); }
  // The packed moments (shard().state_numel each), device memory.
  std::span<G> exp_avg() { return {m_, shard_.state_numel}; }
  std::span<G> exp_avg_sq() { return {v_, shard_.state_numel}; }
  std::span<const G> exp_avg() const { return {m_, shard_.state_numel}; }
  std::span<const G> exp_avg_sq() const { return {v_, shard_.state_numel}; }
  // The packed fp32 master of the pieces (shard().state_numel), device memory; empty unless the
  // optimizer holds the master (create's holds_master).
  std::span<const G> master() const { return {master_, master_ ? shard_.state_numel : 0}; }
  // Fills that master's elements of arena [offset, offset + n) from `values` (host memory, n):
  // a load (the whole arena) or an initialisation (a tensor at a time). Waits; the device's
  // error.
  Status load_master(const G* values, size_t offset, size_t n);

 private:
  // own: the host constructor's device (null for create), device: where everything lives.
  // Allocates; m_, v_ or norm_ stay null when the device is out of memory.
  AdamW(std::unique_ptr<Device> own, Device* device, OptimizerShard shard,
        const OptimizerConfig& config, bool holds_master);
  bool allocated() const { return m_ && v_ && norm_ && (master_ || !holds_master_); }

  std::unique_ptr<Device> own_device_;
  Device& device_;
  Ops<A>* ops_;  // device_.ops<A>()
  OptimizerShard shard_;
  OptimizerConfig config_;
  G* m_ = nullptr;  // (state_numel) first moments
  G* v_ = nullptr;  // (state_numel) second moments
  bool holds_master_ = false;
  G* master_ = nullptr;                 // (state_numel) fp32 master of the pieces, or null
  double* norm_ = nullptr;              // (1) sum_squares' result
  std::vector<AdamWSpan<A>> spans_;     // update()'s descriptors, one per piece
  std::vector<const G*> norm_tensors_;  // sum_squares' pieces (counts_in_norm)
  std::vector<size_t> norm_sizes_;
  int step_ = 0;
};

}  // namespace lattice
