// train() (lattice/train.h): the checks every run passes, the device and compute type it runs
// on (device/backends.h), then run_trainer (trainer.h); and the process-wide stop state that
// signals and --exit-duration-in-mins set.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "core/host_memory.h"
#include "device/backends.h"
#include "device/cpu_device.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/dtype.h"
#include "lattice/kernels.h"
#include "lattice/layout.h"
#include "lattice/tokenizer.h"
#include "lattice/train.h"
#include "parallel/groups.h"
#include "train/host_memory_check.h"
#include "train/trainer.h"

namespace lattice {

namespace {
std::atomic<bool> g_stop{false};
const char* const kOutOfMemoryAdvice =
    "; `lattice plan` with the same flags estimates each rank's memory by category";
// At static initialisation: the process's start, which --exit-duration-in-mins counts from
// (as Megatron, so that setup and checkpoint loading count against a job's time).
const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();
}  // namespace

void request_stop() {
  g_stop.store(true, std::memory_order_relaxed);
}
bool stop_requested() {
  return g_stop.load(std::memory_order_relaxed);
}

EarlyStop early_stop(const TrainOptions& options) {
  if (stop_requested()) return EarlyStop::kSignal;
  if (options.exit_duration_in_mins > 0 &&
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count() >=
          options.exit_duration_in_mins * 60)
    return EarlyStop::kExitDuration;
  return EarlyStop::kNone;
}

namespace {
// The GEMM that measures a CPU's peak: 1536^3, its operands made once; in float (SGEMM, through
// the linear layers' GEMM), or bf16 inputs with fp32 results through oneDNN's bf16 matmul.
class GemmProbe {
 public:
  GemmProbe(int threads, PeakGemm gemm) : gemm_(gemm), c_(static_cast<size_t>(kN) * kN) {
    const size_t n = c_.size();
    if (gemm_ == PeakGemm::kBf16) {
      a16_.assign(n, to_bf16(0.5f));
      b16_.assign(n, to_bf16(0.25f));
    } else {
      a_.assign(n, 0.5f);
      b_.assign(n, 0.25f);
    }
    kernels::set_num_threads(threads);
    run();  // warm-up
  }
  void run() {
    if (gemm_ == PeakGemm::kBf16)
      kernels::gemm_bf16(false, false, kN, kN, kN, a16_.data(), kN, b16_.data(), kN, 0.0f,
                         c_.data(), kN);
    else
      kernels::matmul_forward<float>(c_.data(), a_.data(), b_.data(), nullptr, kN, kN, kN);
  }
  // GFLOP/s of one run() that took `seconds`.
  static double gflops(double seconds) { return 2.0 * kN * kN * kN / seconds / 1e9; }

 private:
  static constexpr int kN = 1536;
  PeakGemm gemm_;
  std::vector<float> a_, b_, c_;
  std::vector<bf16> a16_, b16_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

PeakGemm cpu_peak_gemm(DType compute) {
  if (compute == DType::kFloat32 || compute == DType::kFloat64) return PeakGemm::kSgemm;
  if (compute != DType::kBFloat16) return PeakGemm::kNone;
  switch (kernels::bf16_gemm()) {
    case kernels::Bf16Gemm::onednn:
      return PeakGemm::kBf16;
    case kernels::Bf16Gemm::widened:
      return PeakGemm::kSgemm;
    case kernels::Bf16Gemm::none:
      break;
  }
  return PeakGemm::kNone;
}

const char* peak_gemm_name(PeakGemm gemm) {
  switch (gemm) {
    case PeakGemm::kSgemm:
      return "SGEMM";
    case PeakGemm::kBf16:
      return "bf16 GEMM";
    case PeakGemm::kNone:
      break;
  }
  return "none";
}

double measure_gemm_gflops(int threads, PeakGemm gemm, double min_seconds) {
  if (gemm == PeakGemm::kNone) return 0;
  GemmProbe probe(threads, gemm);
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 4 || seconds_since(start) < min_seconds; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    probe.run();
    best = std::max(best, GemmProbe::gflops(seconds_since(t0)));
  }
  return best;
}

double measure_sgemm_gflops(int threads, double min_seconds) {
  return measure_gemm_gflops(threads, PeakGemm::kSgemm, min_seconds);
}

Result<double> measure_shared_gemm_gflops(int threads, Comm& ranks, PeakGemm gemm,
                                          double min_seconds) {
  if (gemm == PeakGemm::kNone) return 0.0;
  GemmProbe probe(threads, gemm);
  double best = 0, elapsed = 0;
  // Every rank sees the same slowest times, so all agree on when to stop.
  for (int round = 0; round < 4 || elapsed < min_seconds; round++) {
    if (Status s = ranks.barrier(); !s) return s;
    const auto t0 = std::chrono::steady_clock::now();
    probe.run();
    double slowest = seconds_since(t0);
    if (Status s = ranks.all_reduce(&slowest, 1, DType::kFloat64, ReduceOp::kMax); !s) return s;
    best = std::max(best, GemmProbe::gflops(slowest));
    elapsed += slowest;
  }
  return best;
}

Result<TrainSummary> train(const TrainOptions& given, Comm& world, MetricsSink& sink) {
  const TrainOptions o = with_default_global_batch(given, world.size());
  ModelConfig mc = o.model;
  if (o.tokenizer.type != "NullTokenizer") {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer) return tokenizer.status();
    mc.vocab_size = (*tokenizer)->vocab_size();
  }
  TrainOptions options = o;
  options.model = mc;
  // The device: the registered backend's (device/backends.h) for --device cuda, and for
  // --device auto when it runs these options here; else the CPU's.
  const DeviceBackend* backend = nullptr;
  if (o.device != "cpu") {
    const DeviceBackend* registered = device_backend();
    std::string why;
    if (!registered) {
      why = "this program has no GPU trainer";
    } else if (o.device != "cuda") {
      why = unavailable(*registered, options, world.size());
    }
    if (why.empty())
      backend = registered;
    else if (o.device == "cuda")
      return Status::invalid_argument(
          "--device cuda: " + why +
          " (`lattice train --device cuda` runs lattice-gpu, built with -DLATTICE_WITH_CUDA=ON; "
          "docs/gpu.md)");
    else if (registered && world.rank() == 0)
      sink.on_message("--device auto: training on the CPU: " + why);
  }
  const Capabilities caps = backend ? backend->capabilities() : cpu_capabilities();
  if (std::vector<std::string> e = refusals(options, world.size(), caps); !e.empty()) {
    std::string text;
    for (const std::string& line : e) text += (text.empty() ? "" : "\n") + line;
    return Status::invalid_argument(text);
  }
  Result<ParallelLayout> layout = make_layout(options, world.size());
  if (!layout) return layout.status();
  Result<ProcessGroups> groups = make_process_groups(world, *layout, options.model.tied_output());
  if (!groups) return groups.status();
  // The plan's memory is host memory only where the device's is.
  if (!o.skip_memory_check && caps.host_addressable)
    if (Status s = check_host_memory(options, *layout, world); !s) return s;
  Result<std::unique_ptr<Device>> device =
      backend ? backend->make() : Result<std::unique_ptr<Device>>(std::make_unique<CpuDevice>());
  if (!device) return device.status();
  // An allocation that fails (core/host_memory.h) ends this rank's run with its category and
  // size; run_training records the run as failed and ends the other ranks.
  try {
    // The compute type: 16-bit where the device offers it (on the CPU --fp16 is fp32
    // arithmetic with the loss scaler), fp64 for verification runs, else fp32.
    std::unique_ptr<Device> d = std::move(*device);
    if (o.bf16 && caps.bf16)
      return run_trainer<bf16>(options, mc, *groups, sink, std::move(d), backend);
    if (o.fp16 && caps.fp16)
      return run_trainer<fp16>(options, mc, *groups, sink, std::move(d), backend);
    if (o.fp64) return run_trainer<double>(options, mc, *groups, sink, std::move(d), backend);
    return run_trainer<float>(options, mc, *groups, sink, std::move(d), backend);
  } catch (const OutOfMemory& e) {
    return Status::resource_exhausted(std::string(e.what()) + kOutOfMemoryAdvice);
  } catch (const std::bad_alloc&) {
    return Status::resource_exhausted(std::string("out of memory outside the model's memory ") +
                                      "categories (data indices, buffers)" + kOutOfMemoryAdvice);
  }
}

Result<TrainSummary> train(const TrainOptions& o, MetricsSink& sink) {
  std::unique_ptr<Comm> local = make_local_comm();
  return train(o, *local, sink);
}

}  // namespace lattice
