// The communicators a rank's device work goes through (docs/one-engine.md step 12): made by the
// device (Device::make_comm: a split of the host group on the CPU, NCCL on CUDA) over the host
// groups of parallel/groups.h, one per use, so the model's tensor-parallel collectives, the
// pipeline's channels, the data-parallel reducers and the tied-embedding sum never match each
// other's messages. The host groups stay for scalars (loss, norm, stop decisions) and reports.
#pragma once

#include <memory>
#include <vector>

#include "lattice/comm.h"
#include "parallel/groups.h"

namespace lattice {

class Device;

struct DeviceComms {
  // Null where the group has one rank (and the embedding one off the first and last stage).
  // dp: over the data-parallel x context-parallel group (ProcessGroups::data_context), where
  // the dense gradients are reduced; the data-parallel group itself when CP is 1.
  std::unique_ptr<Comm> tp, dp, embedding;
  // CP > 1 only: the context-parallel group, over which ring attention passes the keys and
  // values (parallel/ring_attention.h) and MoE layers sum their route counts.
  std::unique_ptr<Comm> cp;
  // ParallelLayout::expert_grid only: the expert-parallel group (the MoE token all-to-all) and
  // the expert-data group (where the experts' gradients are summed).
  std::unique_ptr<Comm> expert, expert_data;
  // An expert TP strictly between 1 and TP only: the expert-tensor-parallel group.
  std::unique_ptr<Comm> expert_tensor;
  // PP > 1: activations, gradients and, interleaved, their wrap-around channels (Note
  // [pipeline streams], pipeline/executor.h); empty at PP 1.
  std::vector<std::unique_ptr<Comm>> pipeline;
  Comm* channel(size_t i) const { return i < pipeline.size() ? pipeline[i].get() : nullptr; }
};

// Collective over the world: every rank makes its TP communicator, then DP, CP, the pipeline
// channels, the embedding one and the expert ones, so each group's members reach each make_comm in
// the same order (ncclCommInitRank waits only for its own group's ranks).
Result<DeviceComms> make_device_comms(Device& device, const ProcessGroups& groups);

}  // namespace lattice
