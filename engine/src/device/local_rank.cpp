// local_rank.h: the launcher's node-local rank, and the device it maps to.
#include "device/local_rank.h"

#include <cstdlib>

namespace lattice {

int local_rank_from_environment(const std::function<const char*(const char*)>& getenv_fn) {
  static const char* const kVariables[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                           "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
  for (const char* name : kVariables) {
    const char* value = getenv_fn ? getenv_fn(name) : std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end != '\0' || rank < 0) return -1;
    return static_cast<int>(rank);
  }
  return -1;
}

int device_for_local_rank(int local_rank, int devices) {
  return local_rank < 0 ? 0 : local_rank % devices;
}

}  // namespace lattice
