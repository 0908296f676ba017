// Thread control shared by OpenMP loops and OpenBLAS (the OpenMP build of OpenBLAS runs
// single-threaded when called inside one of our parallel regions).
#include <omp.h>
#include <unistd.h>

#include <cstdlib>

#include "gemm.h"
#include "lattice/kernels.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void);
}

namespace lattice::kernels {

void set_num_threads(int threads) {
  if (threads < 1) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() {
  return omp_get_max_threads();
}

const char* blas_core_name() {
  return openblas_get_corename();
}

void use_passive_openmp_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");  // the exec failed: run on as libgomp started, and say nothing
}

}  // namespace lattice::kernels
