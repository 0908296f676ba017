// The CUDA backend as train() sees it (device/backends.h): registered by lattice-gpu.
#include "device/backends.h"
#include "device/nvml_probe.h"
#include "lattice/cuda_kernels.h"

namespace lattice {

void register_cuda_backend() {
  static const DeviceBackend backend{
      &cuda_capabilities,
      [] {
        return kernels::cuda::device_count() == 0
                   ? std::string("no CUDA device visible to this process")
                   : std::string();
      },
      &make_cuda_device, &nvml_probe};
  register_device_backend(&backend);
}

}  // namespace lattice
