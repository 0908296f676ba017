// The planner's device table (NVIDIA's published figures) and this machine's CPU described as a
// device from a measured SGEMM rate and a measured copy rate
// (docs/design-notes.md#planner-step-time-and-layout-search). Non-goals: probing GPUs (the
// CPU build has no CUDA), network discovery.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "lattice/plan.h"

namespace lattice {

namespace {

constexpr double kMiB = 1024.0 * 1024;

// One row of the table: peak dense rates per precision, TFLOP/s.
struct GpuRow {
  const char* name;
  const char* key;
  double memory_mib;    // total as nvidia-smi reports it
  double bf16_tflops;   // dense tensor-core bf16 / fp16 (no sparsity)
  double fp32_tflops;   // CUDA-core fp32 (not TF32)
  double fp64_tflops;   // fp64 tensor core
  double nvlink_gb_s;   // per GPU, one direction
  double network_gb_s;  // per GPU, one direction (one InfiniBand NIC per GPU)
  double hbm_gb_s;      // memory bandwidth
};

// Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM5: bf16 1,979 TFLOP/s with sparsity =
// 989 dense, fp32 67, fp64 tensor 67, HBM3 3.35 TB/s, NVLink 900 GB/s bidirectional);
// NVIDIA H100 datasheet, PCIe column (bf16 1,513 with sparsity = 756 dense, fp32 51, fp64
// tensor 51, HBM2e 2 TB/s; its NVLink bridge joins pairs only, so a ring over a node's GPUs
// runs at PCIe Gen5 x16, 64 GB/s one direction); NVIDIA H200 datasheet (same compute as
// H100 SXM, 141 GB HBM3e at 4.8 TB/s); NVIDIA A100 datasheet (SXM4: bf16 312 dense, fp32 19.5, fp64
// tensor 19.5, HBM2e 2,039 GB/s (80GB) / HBM2 1,555 GB/s (40GB), NVLink 600 GB/s bidirectional).
// Networks as in DGX H100 / H200 (8 x ConnectX-7 NDR 400 Gb/s: 50 GB/s per GPU) and DGX A100 (8 x
// HDR 200 Gb/s: 25 GB/s).
constexpr GpuRow kGpus[] = {
    {"H100 SXM 80GB", "h100", 81559, 989, 67, 67, 450, 50, 3350},
    {"H100 PCIe 80GB", "h100-pcie", 81559, 756, 51, 51, 64, 50, 2000},
    {"H200 SXM 141GB", "h200", 143771, 989, 67, 67, 450, 50, 4800},
    {"A100 SXM 80GB", "a100-80gb", 81920, 312, 19.5, 19.5, 300, 25, 2039},
    {"A100 SXM 40GB", "a100-40gb", 40960, 312, 19.5, 19.5, 300, 25, 1555},
};

// Ethernet between CPU machines, one direction: 10 GbE assumed.
constexpr double kCpuNetworkBytesPerSecond = 1.25e9;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

double copy_rate_once() {
  const size_t n = 32 << 20;  // bytes: beyond the private caches, most of a shared L3
  std::vector<char> src(n, 1), dst(n, 0);
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, n / s);  // the first pass faults the pages in
    src[rep] = dst[n - 1 - rep];                // keep the copies observable
  }
  return best;
}

}  // namespace

std::vector<DeviceSpec> known_devices(const std::string& precision) {
  std::vector<DeviceSpec> out;
  for (const GpuRow& g : kGpus) {
    DeviceSpec d;
    d.name = g.name;
    d.key = g.key;
    d.memory_bytes = g.memory_mib * kMiB;
    const double tflops = precision == "fp32"   ? g.fp32_tflops
                          : precision == "fp64" ? g.fp64_tflops
                                                : g.bf16_tflops;
    d.peak_flops = tflops * 1e12;
    d.intra_node_bandwidth = g.nvlink_gb_s * 1e9;
    d.inter_node_bandwidth = g.network_gb_s * 1e9;
    d.memory_bandwidth = g.hbm_gb_s * 1e9;
    out.push_back(d);
  }
  return out;
}

std::optional<DeviceSpec> find_device(const std::string& name, const std::string& precision) {
  const std::string wanted = lower(name);
  for (const DeviceSpec& d : known_devices(precision))
    if (lower(d.key) == wanted || lower(d.name) == wanted) return d;
  return std::nullopt;
}

// CUDA names: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
// "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB".
// The PCIe and NVL boards of a family have lower clocks than its SXM board, so the family
// alone does not decide; a board the table lacks (H100 NVL) gets no entry rather than the
// SXM figures.
std::optional<DeviceSpec> device_for_gpu_name(const std::string& cuda_name,
                                              const std::string& precision) {
  const std::string n = lower(cuda_name);
  const auto has = [&](const char* part) { return n.find(part) != std::string::npos; };
  const char* key = nullptr;
  if (has("h200")) {
    key = has("nvl") ? nullptr : "h200";
  } else if (has("h100")) {
    key = has("nvl") ? nullptr : has("pcie") ? "h100-pcie" : "h100";
  } else if (has("a100")) {  // PCIe and SXM A100s share the dense peak; the memory differs
    key = has("40gb") ? "a100-40gb" : "a100-80gb";
  }
  if (!key) return std::nullopt;
  return find_device(key, precision);
}

double measure_copy_bandwidth() {
  static const double rate = copy_rate_once();  // thread-safe initialisation
  return rate;
}

// MPI ranks on one machine exchange data through shared memory; with Open MPI's single-copy
// path (CMA, as the benchmarks run it) the receiver copies straight from the sender's buffer,
// so one transfer moves at the copy rate. The optimizer streams its state at the copy rate
// counted as traffic (read + write = twice the bytes copied).
std::string engine_device(const DeviceSpec& device) {
  return device.key == "cpu" ? "cpu" : "cuda";
}

TrainOptions planned_options(const TrainOptions& options, const ClusterSpec& cluster) {
  TrainOptions o = options;
  o.device = engine_device(cluster.device);
  if (o.device == "cpu" && o.threads <= 0) o.threads = shared_cpu_threads(cluster.devices_per_node);
  return o;
}

int shared_cpu_threads(int ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(ranks, 1));
}

DeviceSpec this_machine_cpu(double measured_sgemm_gflops, int ranks_per_node) {
  const int ranks = std::max(ranks_per_node, 1);
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  const double page_size = static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double copy = measure_copy_bandwidth();
  DeviceSpec d;
  d.name = ranks > 1 ? "this machine's CPU (1/" + std::to_string(ranks) + " per rank)"
                     : "this machine's CPU";
  d.key = "cpu";
  d.memory_bytes = pages * page_size / ranks;
  d.peak_flops = measured_sgemm_gflops * 1e9 / ranks;
  d.intra_node_bandwidth = copy;
  d.inter_node_bandwidth = kCpuNetworkBytesPerSecond;
  d.memory_bandwidth = 2 * copy / ranks;
  return d;
}

}  // namespace lattice
