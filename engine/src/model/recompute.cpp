// RecomputePlan::make (recompute.h).
#include "model/recompute.h"

#include <algorithm>

namespace lattice {

RecomputePlan RecomputePlan::make(const std::string& granularity, const std::string& method, int n,
                                  int num_local_layers) {
  RecomputePlan plan;
  if (granularity != "full") return plan;  // "selective" keeps everything (gpt_layer.cpp's
                                            // Note [selective recomputation])
  plan.group_start.assign(num_local_layers, -1);
  if (method == "uniform") {
    // Megatron's uniform method: the chunk's layers in groups of n, each group recomputed
    // from its input.
    for (int l = 0; l < num_local_layers; l++) plan.group_start[l] = l / n * n;
    plan.max_group = std::min(n, num_local_layers);
  } else {
    // block: the first n layers of the chunk recomputed one by one, the rest kept.
    for (int l = 0; l < std::min(n, num_local_layers); l++) plan.group_start[l] = l;
    plan.max_group = std::min(n, num_local_layers) > 0 ? 1 : 0;
  }
  return plan;
}

}  // namespace lattice
