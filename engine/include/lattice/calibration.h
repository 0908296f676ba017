// Calibrating the planner from a probe run (issue 26, item 2; docs/design-notes.md
// #calibrating-the-planner): the step-time model's rates (the GEMMs' achieved share of peak, the
// intra- and inter-node link bandwidths, the memory bandwidth of the optimizer step) fitted so
// that its terms reproduce the phase times a short run of a layout measured, saved per device
// profile and applied to later plans and searches. Shared by `lattice plan --calibrate` and the
// Studio's Plan view. Non-goals: fitting the memory estimate, per-op models, network contention.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lattice/plan.h"
#include "lattice/run_estimate.h"
#include "lattice/status.h"

namespace lattice {

// One rank's phase times per iteration, averaged over the probe's reports after its first
// iteration (which pays for first touches of memory). Seconds; tp_comm < 0: not recorded (the
// engine times TP collectives only with --profile or on a device with cheap marks).
struct ProbePhases {
  int rank = 0;
  double forward = 0, backward = 0, pipeline_wait = 0, dp_comm = 0, optimizer = 0;
  double embedding_comm = 0;  // the tied word embedding's sum between the end stages
  double tp_comm = -1;
};

// What a probe run recorded, read from the run store (read_probe_run).
struct ProbeRun {
  std::string name;         // the run's name in the store
  std::string config_json;  // `lattice train`'s flags as recorded
  int world_size = 1;
  double step_time_s = 0;          // mean "step time" over the iterations after the first
  int64_t timed_steps = 0;         // how many iterations that mean covers
  double peak_flops_per_rank = 0;  // "TFLOP/s per device" / "MFU" as the run measured; 0: none
  std::vector<ProbePhases> ranks;  // every rank, in rank order
};

// Reads run `run` (id or name) from the run store at `db_path`. An error, in one sentence, for
// an unknown run, a run with no step times after its first iteration (it must run at least two
// iterations), or no per-rank phase times.
Result<ProbeRun> read_probe_run(const std::string& db_path, const std::string& run);

// Why a probe recorded with `run` options cannot calibrate a plan of `planned` on
// `planned_world` ranks, in words ("--num-layers 2, not 4"; "it ran on 2 ranks, the plan has
// 4"); empty when it can. Layers, hidden size, heads, sequence and vocabulary must match, and
// the world:
// the fit compares the probe with the estimate of its own layout.
std::string probe_mismatch(const TrainOptions& run, int run_world, const TrainOptions& planned,
                           int planned_world);

// The fitted rates of one device profile, and where they came from.
struct Calibration {
  std::string device_key;   // the DeviceSpec::key it applies to ("cpu", "h100", ...)
  std::string device_name;  // as the probe's cluster named it
  // The cluster it was measured on (`--cluster-name`, the Studio's cluster name); empty: saved
  // for the device on any cluster (Note [calibration per cluster] in calibration.cpp).
  std::string cluster_name;
  // Fitted values (each replaces the planner's default when its term was measured; a term the
  // probe did not exercise keeps the default and its flag stays false).
  double compute_efficiency = 0.5;  // achieved / peak FLOP rate of the step's compute
  double intra_node_bandwidth = 0;  // bytes/s
  double inter_node_bandwidth = 0;  // bytes/s
  double memory_bandwidth = 0;      // bytes/s, the optimizer step's rate
  bool compute_fitted = false, intra_fitted = false, inter_fitted = false, memory_fitted = false;
  // The defaults the fit started from (what an uncalibrated plan uses), for comparison.
  double default_compute_efficiency = 0.5, default_intra_node_bandwidth = 0,
         default_inter_node_bandwidth = 0, default_memory_bandwidth = 0;
  // The probe: run name, layout, and its measured step beside the planner's estimate for the
  // same layout before and after the fit.
  std::string probe_run;
  int world = 1, tp = 1, cp = 1, pp = 1, dp = 1;
  double measured_step_s = 0, predicted_before_s = 0, predicted_after_s = 0;
};

// Fits the rates of `cluster` (the probe's cluster with the planner's defaults) to `probe`,
// whose configuration `plan` was estimated from (plan_recorded_run). Note [calibration fit] in
// calibration.cpp states the rules. An error when the probe measured no compute time.
Result<Calibration> fit_calibration(const RecordedRunPlan& plan, const ClusterSpec& cluster,
                                    const ProbeRun& probe);

// `cluster` with the calibration's fitted values in place of the defaults (those not fitted
// are left as they are). The caller checks that the device keys match.
ClusterSpec apply_calibration(ClusterSpec cluster, const Calibration& calibration);

// The file a calibration lives in: <data dir>/calibration/<device key>.json for the device on
// any cluster, <data dir>/calibration/<cluster name>/<device key>.json for one cluster's
// (default_data_dir(): $LATTICE_DATA_DIR, else $XDG_DATA_HOME/lattice, else
// ~/.local/share/lattice). The cluster name must pass check_cluster_name.
std::string calibration_path(const std::string& device_key, const std::string& cluster_name = "");
// The files a plan on `cluster_name` (may be empty) looks for a calibration of `device_key` in,
// first match wins: the cluster's own, then the device's (Note [calibration per cluster]).
std::vector<std::string> calibration_search_paths(const std::string& device_key,
                                                  const std::string& cluster_name);
// Why `name` cannot name a cluster (it becomes a folder name), in one sentence; empty when it
// can: letters, digits, '.', '_' and '-', not starting with '.'.
std::string check_cluster_name(const std::string& name);
// {"device_key", "device_name", "cluster" (absent: any cluster), "fitted": {...}, "defaults":
// {...}, "measured": {"compute_efficiency": bool, ...}, "probe": {"run", "world", "tp", "cp", "pp",
// "dp", "measured_step_s", "predicted_before_s", "predicted_after_s"}}
std::string calibration_json(const Calibration& calibration, int indent = 2);
Result<Calibration> parse_calibration_json(const std::string& text, const std::string& source);
// Atomic write (temporary file, rename); creates the folder.
Status save_calibration(const std::string& path, const Calibration& calibration);
// nullopt when the file does not exist; an error naming the file when it cannot be parsed.
Result<std::optional<Calibration>> load_calibration(const std::string& path);

// "compute efficiency 0.31 (default 0.50), intra-node 4.1 GB/s (default 9.8 GB/s), ..."
// one line per value, as `lattice plan --calibrate` and the Studio print them.
std::vector<std::string> calibration_lines(const Calibration& calibration);

}  // namespace lattice
