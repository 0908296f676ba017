// Which copy of the kernels runs: the vector width its ISA region was built for, so that a
// dispatcher calling the wrong copy shows (test_kernel_gradients). That the region's code really
// uses those registers is check_baseline_code.sh's part (tests/kernels).
#include "isa_region.h"

LATTICE_ISA_BEGIN

int vector_bytes() {
  return LATTICE_ISA_VEC_BYTES;
}

LATTICE_ISA_END
