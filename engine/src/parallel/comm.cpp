// The communicator's entry points (comm.h): which world this process belongs to (MPI when a
// launcher started it and MPI is built in, else a world of one).
// MPI itself lives in mpi_comm.cpp only.
#include <cstdlib>
#include <utility>

#include "lattice/comm.h"
#if LATTICE_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace lattice {
namespace {

class CompletedRequest final : public CommRequest {
 public:
  explicit CompletedRequest(Status status) : status_(std::move(status)) {}
  Status wait() override { return status_; }
  bool test() override { return true; }

 private:
  Status status_;
};

}  // namespace

std::unique_ptr<CommRequest> completed_request(Status status) {
  return std::make_unique<CompletedRequest>(std::move(status));
}

// The launchers' own variables: OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers
// (OpenMPI 5, srun --mpi=pmix) set PMIX_RANK; MPICH's hydra and srun --mpi=pmi2 set PMI_RANK
// and PMI_SIZE. SLURM_PROCID alone does not count: a batch script has it too, and a program
// run by srun without PMI could not join a multi-rank world anyway.
bool launched_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Result<std::unique_ptr<Comm>> make_world_comm() {
  if (!launched_by_mpi_launcher()) return make_local_comm();
#if LATTICE_HAVE_MPI
  return make_mpi_world_comm();
#else
  return Status::invalid_argument(
      "this process was started by an MPI launcher (mpirun / srun), but this build of Lattice "
      "has no MPI: install Open MPI with installers/install-deps.sh (openmpi-bin, "
      "libopenmpi-dev), then reconfigure with cmake -DLATTICE_WITH_MPI=ON and rebuild");
#endif
}

void finalize_comm() {
#if LATTICE_HAVE_MPI
  finalize_mpi();
#endif
}

}  // namespace lattice
