// DeviceGroups: the engine's group lists indexed by rank.
#include "plan/device_groups.h"

namespace lattice::ui {

DeviceGroups::DeviceGroups(const ParallelLayout& l) {
  groups_ = {l.tensor_groups(), l.context_groups(),  l.expert_groups(),
             l.data_groups(),   l.pipeline_groups(), l.expert_data_groups()};
  for (int k = 0; k < kGroupKinds; k++) {
    index_[k].assign(l.world, -1);
    for (size_t g = 0; g < groups_[k].size(); g++)
      for (int rank : groups_[k][g])
        if (rank >= 0 && rank < l.world) index_[k][rank] = static_cast<int>(g);
  }
}

const std::vector<int>& DeviceGroups::groupOf(GroupKind kind, int rank) const {
  static const std::vector<int> kNone;
  const std::vector<int>& index = index_[static_cast<int>(kind)];
  if (rank < 0 || rank >= static_cast<int>(index.size()) || index[rank] < 0) return kNone;
  return groups_[static_cast<int>(kind)][index[rank]];
}

bool DeviceGroups::sameGroup(GroupKind kind, int a, int b) const {
  const std::vector<int>& index = index_[static_cast<int>(kind)];
  const int n = static_cast<int>(index.size());
  return a >= 0 && b >= 0 && a < n && b < n && index[a] >= 0 && index[a] == index[b];
}

}  // namespace lattice::ui
