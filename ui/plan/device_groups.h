// Which group of each kind holds every rank, read from the engine's group lists
// (ParallelLayout::tensor_groups() and the others, lattice/layout.h): the layout canvas's
// highlights and the device description use them, so the Studio never recomputes Megatron's
// rank order. Non-goal: the combined groups (data-context, tensor-model, ...).
#pragma once

#include <array>
#include <vector>

#include "lattice/layout.h"

namespace lattice::ui {

// In the order the device description lists them.
enum class GroupKind { kTensor, kContext, kExpert, kData, kPipeline, kExpertData };
inline constexpr int kGroupKinds = 6;

class DeviceGroups {
 public:
  DeviceGroups() = default;
  explicit DeviceGroups(const ParallelLayout& layout);

  bool empty() const { return index_[0].empty(); }
  // The ranks of the `kind` group that holds `rank`, ascending; empty for a rank outside the
  // world.
  const std::vector<int>& groupOf(GroupKind kind, int rank) const;
  bool sameGroup(GroupKind kind, int a, int b) const;

 private:
  std::array<std::vector<std::vector<int>>, kGroupKinds> groups_;
  std::array<std::vector<int>, kGroupKinds> index_;  // [kind][rank]: the group's index
};

}  // namespace lattice::ui
