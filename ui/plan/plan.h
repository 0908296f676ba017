// The document the Plan view edits: `lattice train`'s options plus the cluster they run on.
// Plain values with no Qt object behind them, so undo commands copy them and tests build them.
// Non-goals: launch settings (data, run name; see launch/launch_command.h).
#pragma once

#include <QString>

#include "lattice/plan.h"
#include "lattice/train_options.h"

namespace lattice::ui {

// Keys of ClusterSettings::device.
inline constexpr const char* kDeviceCpu = "cpu";        // this machine's CPU
inline constexpr const char* kDeviceCustom = "custom";  // the custom_* fields below

struct ClusterSettings {
  // The cluster's name, under which Calibrate saves its fitted rates (Note [calibration per
  // cluster] in engine/src/plan/calibration.cpp); empty: they are saved for the device.
  QString name;
  int nodes = 1;
  int devices_per_node = 1;
  // "cpu", "custom", or a known_devices() key ("h100", "h100-pcie", "h200", "a100-80gb",
  // "a100-40gb").
  QString device = kDeviceCpu;
  // The custom device, in the units a datasheet gives them.
  double custom_memory_gib = 80;
  double custom_tflops = 400;          // dense peak in the training precision
  double custom_intra_node_gbs = 300;  // GB/s per device, one direction
  double custom_inter_node_gbs = 25;   // GB/s per device, one direction
  double custom_memory_gbs = 2000;     // GB/s of device memory

  int world() const { return nodes * devices_per_node; }
  bool operator==(const ClusterSettings&) const = default;
};

struct Plan {
  TrainOptions options;
  ClusterSettings cluster;
};
// Equal flags (train_options_json) and cluster.
bool samePlan(const Plan& a, const Plan& b);

// Derived fields the engine's parser sets (parse_train_flags): the model's vocabulary from a
// NullTokenizer's --vocab-size (plus the EOD id). A file tokenizer's vocabulary is read from
// its files when they exist (else left as it was). --global-batch-size 0 stays 0: it needs
// the world (normalizePlan).
void normalizeOptions(TrainOptions& options);
// normalizeOptions, and --global-batch-size 0 (not given) as Megatron's default for the plan's
// cluster, micro-batch x DP (with_default_global_batch).
void normalizePlan(Plan& plan);

// "fp32", "bf16", "fp16" or "fp64" (training_precision) and its setter.
QString precisionOf(const TrainOptions& options);
void setPrecision(TrainOptions& options, const QString& precision);

// The cluster as the engine's planner takes it. `cpuGflops` is this machine's measured SGEMM
// rate (0: not measured yet, a modest default is used and the caller says so).
ClusterSpec clusterSpec(const ClusterSettings& cluster, const QString& precision, double cpuGflops);

// The Studio's default plan: the demo model (resources/configs/demo.json) on this machine.
Plan defaultPlan();

}  // namespace lattice::ui
