// Which GPU a rank uses: its rank among the ranks of its machine, as the launcher tells it
// (Open MPI, Slurm, MPICH / Hydra), modulo the devices present. Pure environment logic,
// so it is tested without a GPU (tests/device/test_device_memory.cpp).
#pragma once

#include <functional>
#include <string>

namespace lattice {

// The node-local rank from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID or
// PMI_LOCAL_RANK (first one set wins); -1 when none is set or its value is not a number >= 0.
// getenv is injectable for tests.
int local_rank_from_environment(const std::function<const char*(const char*)>& getenv_fn = nullptr);

// The device for that local rank: local_rank % devices (0 without a launcher). devices > 0.
int device_for_local_rank(int local_rank, int devices);

}  // namespace lattice
