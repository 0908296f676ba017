// Plans the Studio tests launch, built through PlanModel::edit as a user's edits would be.
// For tests linked with lattice_ui only.
#pragma once

#include "plan/plan_model.h"

namespace lattice::testing {

// The demo plan made tiny, on one node of 2 devices (DP 2): a valid plan that trains in
// seconds on 2 ranks (callers check PlanModel::isValid()).
inline void tinyTwoRankPlan(ui::PlanModel& model) {
  model.edit("2 ranks", [](ui::Plan& p) {
    p.cluster.devices_per_node = 2;
    p.options.model.num_layers = 2;
    p.options.model.hidden_size = 64;
    p.options.model.seq_length = 32;
  });
}

// The demo plan made tiny on one device: `lattice train` runs directly (no mpirun) and trains
// in about a second.
inline void tinyOneRankPlan(ui::PlanModel& model) {
  model.edit("1 rank", [](ui::Plan& p) {
    p.cluster.nodes = 1;
    p.cluster.devices_per_node = 1;
    p.options.model.num_layers = 2;
    p.options.model.hidden_size = 64;
    p.options.model.seq_length = 32;
  });
}

}  // namespace lattice::testing
