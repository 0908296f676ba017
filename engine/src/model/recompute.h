// Which of a chunk's activations backward recomputes instead of keeping (Megatron's
// --recompute-granularity, --recompute-method, --recompute-num-layers), for the model
// (model/gpt.h) and the planner (plan/memory_estimate.cpp), which count the same buffers.
#pragma once

#include <string>
#include <vector>

namespace lattice {

struct RecomputePlan {
  // Per local layer: -1 kept; otherwise the first local layer of the group of consecutive
  // layers recomputed together from that layer's input (full recomputation).
  std::vector<int> group_start;
  int max_group = 0;  // layers in the largest group (scratch slots the model keeps)

  // "" | "full" | "selective", method "uniform" | "block", n = --recompute-num-layers.
  static RecomputePlan make(const std::string& granularity, const std::string& method, int n,
                            int num_local_layers);
  bool recomputed(int local_layer) const {
    return !group_start.empty() && group_start[local_layer] >= 0;
  }
};

}  // namespace lattice
