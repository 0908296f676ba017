// nvml_probe (device/nvml_probe.h): the few NVML entry points the system metrics read, declared
// here with NVML's C signatures (nvml.h is not needed to build) and resolved with dlsym.
#include "device/nvml_probe.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <memory>

namespace lattice {

namespace {

// NVML's types, as nvml.h declares them: nvmlReturn_t is an enum whose NVML_SUCCESS is 0;
// nvmlDevice_t is an opaque pointer; NVML_TEMPERATURE_GPU is sensor 0.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu, memory;  // % of the last sample period
};
struct NvmlMemory {
  unsigned long long total, free, used;  // bytes
};
constexpr int kNvmlTemperatureGpu = 0;

struct Nvml {
  void* library = nullptr;
  NvmlDevice device = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned int*) = nullptr;             // milliwatts
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;  // degrees C
  bool initialized = false;

  ~Nvml() {
    if (initialized) shutdown();
    if (library) dlclose(library);
  }
};

template <typename F>
bool resolve(void* library, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  return *out != nullptr;
}

}  // namespace

SystemSampler::GpuProbe nvml_probe(std::string* why) {
  auto nvml = std::make_shared<Nvml>();
  nvml->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml->library) {
    *why = "libnvidia-ml.so.1 could not be loaded (" + std::string(dlerror()) + ")";
    return {};
  }
  if (!resolve(nvml->library, "nvmlInit_v2", &nvml->init) ||
      !resolve(nvml->library, "nvmlShutdown", &nvml->shutdown) ||
      !resolve(nvml->library, "nvmlDeviceGetHandleByPciBusId_v2", &nvml->handle_by_pci_bus_id) ||
      !resolve(nvml->library, "nvmlDeviceGetUtilizationRates", &nvml->utilization) ||
      !resolve(nvml->library, "nvmlDeviceGetMemoryInfo", &nvml->memory) ||
      !resolve(nvml->library, "nvmlDeviceGetPowerUsage", &nvml->power) ||
      !resolve(nvml->library, "nvmlDeviceGetTemperature", &nvml->temperature)) {
    *why = "libnvidia-ml.so.1 lacks an entry point (" + std::string(dlerror()) + ")";
    return {};
  }
  if (NvmlReturn r = nvml->init(); r != 0) {
    *why = "nvmlInit_v2 returned " + std::to_string(r);
    return {};
  }
  nvml->initialized = true;
  int ordinal = 0;
  char bus_id[64] = {};
  if (cudaGetDevice(&ordinal) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal) != cudaSuccess) {
    *why = "the CUDA device's PCI bus id could not be read";
    return {};
  }
  if (NvmlReturn r = nvml->handle_by_pci_bus_id(bus_id, &nvml->device); r != 0) {
    *why = "NVML has no device at PCI bus id " + std::string(bus_id) + " (code " +
           std::to_string(r) + ")";
    return {};
  }
  // A field NVML cannot read on this device (power on some boards) fails the reading: the
  // metrics are recorded together or not at all.
  return [nvml](SystemMetrics& m) {
    NvmlUtilization u{};
    NvmlMemory mem{};
    unsigned int milliwatts = 0, celsius = 0;
    if (nvml->utilization(nvml->device, &u) != 0 || nvml->memory(nvml->device, &mem) != 0 ||
        nvml->power(nvml->device, &milliwatts) != 0 ||
        nvml->temperature(nvml->device, kNvmlTemperatureGpu, &celsius) != 0)
      return false;
    m.gpu_utilization = u.gpu;
    m.gpu_memory_used = static_cast<double>(mem.used);
    m.gpu_power_watts = milliwatts / 1000.0;
    m.gpu_temperature_c = celsius;
    return true;
  };
}

}  // namespace lattice
