// Plan values: normalisation as the engine's parser does it, precision, the cluster handed to
// the planner, and the default plan.
#include "plan/plan.h"

#include <algorithm>

#include "lattice/layout.h"
#include "lattice/tokenizer.h"
#include "plan/model_presets.h"

namespace lattice::ui {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// Until this machine's SGEMM rate is measured (a second, off the UI thread): a modest figure
// so that the CPU device's step time is not zero.
constexpr double kUnmeasuredCpuGflops = 50;

}  // namespace

bool samePlan(const Plan& a, const Plan& b) {
  return a.cluster == b.cluster && train_options_json(a.options) == train_options_json(b.options) &&
         a.options.model.vocab_size == b.options.model.vocab_size;
}

void normalizeOptions(TrainOptions& o) {
  if (o.tokenizer.type == "NullTokenizer") {
    o.model.vocab_size = o.tokenizer.vocab_size + 1;
  } else if (o.model.vocab_size <= 0) {
    Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(o.tokenizer);
    if (t) o.model.vocab_size = (*t)->vocab_size();
  }
}

void normalizePlan(Plan& plan) {
  normalizeOptions(plan.options);
  plan.options = with_default_global_batch(plan.options, plan.cluster.world());
}

QString precisionOf(const TrainOptions& o) {
  return QString::fromStdString(training_precision(o));
}

void setPrecision(TrainOptions& o, const QString& precision) {
  o.bf16 = precision == QLatin1String("bf16");
  o.fp16 = precision == QLatin1String("fp16");
  o.fp64 = precision == QLatin1String("fp64");
}

ClusterSpec clusterSpec(const ClusterSettings& c, const QString& precision, double cpuGflops) {
  ClusterSpec spec;
  spec.nodes = std::max(c.nodes, 1);
  spec.devices_per_node = std::max(c.devices_per_node, 1);
  if (c.device == QLatin1String(kDeviceCpu)) {
    spec.device =
        this_machine_cpu(cpuGflops > 0 ? cpuGflops : kUnmeasuredCpuGflops, spec.devices_per_node);
  } else if (c.device == QLatin1String(kDeviceCustom)) {
    spec.device.name = "custom device";
    spec.device.key = kDeviceCustom;
    spec.device.memory_bytes = c.custom_memory_gib * kGiB;
    spec.device.peak_flops = c.custom_tflops * 1e12;
    spec.device.intra_node_bandwidth = c.custom_intra_node_gbs * 1e9;
    spec.device.inter_node_bandwidth = c.custom_inter_node_gbs * 1e9;
    spec.device.memory_bandwidth = c.custom_memory_gbs * 1e9;
  } else if (std::optional<DeviceSpec> d =
                 find_device(c.device.toStdString(), precision.toStdString())) {
    spec.device = *d;
  } else {  // a key from a newer table: behave as the custom device
    ClusterSettings custom = c;
    custom.device = kDeviceCustom;
    return clusterSpec(custom, precision, cpuGflops);
  }
  return spec;
}

Plan defaultPlan() {
  Plan p;
  p.options = demoOptions();
  return p;
}

}  // namespace lattice::ui
