// What launch.cpp and slurm.cpp share; private to engine/src/launch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lattice/launch.h"

namespace lattice::launch::internal {

// The last value of --name in `args` (as "--name V" or "--name=V"), if any.
std::optional<std::string> flag_value(const std::vector<std::string>& args,
                                      const std::string& name);
// `args` without any --name and its value.
std::vector<std::string> without_flag(const std::vector<std::string>& args,
                                      const std::string& name);
// The batch script of a validated Slurm spec (slurm.cpp).
LaunchPlan slurm_plan(const LaunchSpec& spec);

}  // namespace lattice::launch::internal
