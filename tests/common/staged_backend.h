// The CPU device with host addressing off (CpuDeviceOptions::host_addressable), registered as
// the backend a --device cuda run trains on (device/backends.h): the engine then takes every
// path a GPU takes where device memory is not host memory (staged copies, counts read back,
// device communicators), on the CPU, bit for bit comparable with the plain CPU run. `bf16`: whether
// it offers the CPU's bf16 op lists to runs (they exist for tests). Its memory is still
// host memory, so a host read that should have been a copy goes unnoticed here.
#pragma once

#include <memory>
#include <string>

#include "device/backends.h"
#include "device/cpu_device.h"

namespace lattice::testing {

template <bool bf16 = false>
const DeviceBackend* staged_backend() {
  static const DeviceBackend backend{
      [] {
        Capabilities c = cpu_capabilities();
        c.host_addressable = false;
        c.bf16 = bf16;
        return c;
      },
      [] { return std::string(); },
      []() -> Result<std::unique_ptr<Device>> {
        CpuDeviceOptions options;
        options.host_addressable = false;
        return std::unique_ptr<Device>(std::make_unique<CpuDevice>(options));
      },
      nullptr};
  return &backend;
}

}  // namespace lattice::testing
