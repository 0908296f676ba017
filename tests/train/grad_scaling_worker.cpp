// Loss-scaler agreement over ranks (ctest test_grad_scaling_mpi, label mpi): under mpirun
// every rank unscales its own gradients and calls GradScaling::agree, the function the
// trainers call after data-parallel reduction. The last rank alone finds an inf at
// iterations 2 and 3 and a NaN at iteration 6; every rank must skip exactly those steps, and
// the scale must halve at the second overflow (hysteresis 2) and again at the third, while
// the skipped count and clean steps stay the same on every rank. Exit 0 when all agree.
#include <cmath>
#include <cstdio>
#include <vector>

#include "lattice/comm.h"
#include "optim/grad_scaling.h"

using namespace lattice;

int main() {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "%s\n", world.status().message().c_str());
    return 1;
  }
  Comm& comm = **world;
  const int rank = comm.rank(), last = comm.size() - 1;
  LossScalerOptions so;
  so.initial_scale = 1024;
  so.hysteresis = 2;
  so.growth_interval = 1000;
  GradScaling scaling(true, so);
  // iteration -> (skip expected, scale after the update)
  const struct {
    bool skip;
    double scale;
  } want[] = {{false, 1024}, {true, 1024}, {true, 512}, {false, 512},
              {false, 512},  {true, 256},  {false, 256}};
  int failures = 0, steps = 0;
  for (int it = 1; it <= 7; it++) {
    std::vector<float> grads(257, 0.25f * static_cast<float>(scaling.loss_scale()));
    if (rank == last && (it == 2 || it == 3)) grads[100] = INFINITY;
    if (rank == last && it == 6) grads[0] = std::nanf("");
    const bool local = unscale_and_check(grads.data(), grads.size(), 1.0 / scaling.loss_scale());
    Result<bool> skip = scaling.agree(local, comm);
    if (!skip) {
      std::fprintf(stderr, "rank %d: %s\n", rank, skip.status().message().c_str());
      return 1;
    }
    if (!*skip) steps++;
    if (*skip != want[it - 1].skip || scaling.loss_scale() != want[it - 1].scale) {
      std::fprintf(stderr, "rank %d iteration %d: skip %d scale %g, expected skip %d scale %g\n",
                   rank, it, int(*skip), scaling.loss_scale(), int(want[it - 1].skip),
                   want[it - 1].scale);
      failures++;
    }
    if (!*skip && grads[5] != 0.25f) {
      std::fprintf(stderr, "rank %d iteration %d: unscaled grad %g, expected 0.25\n", rank, it,
                   grads[5]);
      failures++;
    }
  }
  if (scaling.skipped_steps() != 3 || steps != 4) {
    std::fprintf(stderr, "rank %d: %llu skipped and %d steps, expected 3 and 4\n", rank,
                 static_cast<unsigned long long>(scaling.skipped_steps()), steps);
    failures++;
  }
  // Every rank's verdict, summed: the job passes only when all of them do.
  double bad = failures;
  if (comm.size() > 1) (void)comm.all_reduce(&bad, 1, DType::kFloat64, ReduceOp::kSum);
  if (rank == 0)
    std::printf("%d ranks: loss-scaler agreement %s\n", comm.size(), bad == 0 ? "ok" : "FAILED");
  finalize_comm();
  return bad == 0 ? 0 : 1;
}
