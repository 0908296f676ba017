// Thread control shared by OpenMP loops and OpenBLAS (the OpenMP build of OpenBLAS runs
// single-threaded when called inside one of our parallel regions).
#include <omp.h>

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

}  // namespace lattice::kernels
