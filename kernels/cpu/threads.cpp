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

void bound_openmp_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  // The program's own path, not /proc/self/exe: the kernel names a process after the file it
  // executes, and ps, top, pgrep -x and tests must go on seeing "lattice", not "exe".
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof path) - 1) return;
  path[n] = '\0';
  if (setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1) != 0) return;
  execv(path, argv);
  unsetenv("GOMP_SPINCOUNT");  // the exec failed (a rebuilt or deleted binary): run on as
                               // libgomp started, and say nothing
}

}  // namespace lattice::kernels
