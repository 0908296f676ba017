// `lattice plan --calibrate RUN`: fit the planner's rates to a probe run's phase times and save
// them for the device profile; and the saved calibration applied to later plans and searches
// (lattice/calibration.h, docs/studio.md "Calibrate"). Non-goals: running the probe (the
// Studio's Calibrate or `lattice train --profile` does).
#include "plan_calibration.h"

#include <cstdio>
#include <iostream>
#include <thread>

#include "commands.h"
#include "lattice/calibration.h"
#include "lattice/run_estimate.h"
#include "lattice/run_record.h"
#include "lattice/train.h"

namespace lattice::cli {

namespace {

constexpr const char* kCommand = "plan";

}  // namespace

int calibrate_from_run(const CalibrateRequest& r) {
  const std::string db = r.db.empty() ? default_run_db() : r.db;
  Result<ProbeRun> probe = read_probe_run(db, r.run);
  if (!probe) {
    print_error(kCommand, "--calibrate " + r.run + ": " + probe.status().message());
    return 1;
  }
  Result<RecordedRunPlan> plan = plan_recorded_run(probe->config_json, probe->world_size);
  if (!plan) {
    print_error(kCommand, "--calibrate " + r.run + ": " + plan.status().message());
    return 1;
  }
  if (r.planned) {
    // The world only where the caller gave one (--world-size or the cluster's shape).
    if (std::string why = probe_mismatch(plan->options, probe->world_size, *r.planned, r.world);
        !why.empty()) {
      print_error(kCommand, "--calibrate " + r.run + " cannot calibrate this plan: " + why);
      return 2;
    }
  }
  // The probe's cluster, as an uncalibrated plan of the same layout would describe it: its
  // ranks on one machine (the CPU's peak split between them) or the GPUs of --device.
  ClusterSpec cluster;
  cluster.compute_efficiency = r.efficiency;
  cluster.nodes = r.nodes > 0 ? r.nodes : 1;
  cluster.devices_per_node = probe->world_size / cluster.nodes;
  const std::string precision = training_precision(plan->options);
  if (r.device == "cpu" || r.device == "CPU") {
    double gflops = r.peak_gflops;
    if (gflops <= 0 && probe->peak_flops_per_rank > 0)
      gflops = probe->peak_flops_per_rank * cluster.devices_per_node / 1e9;
    if (gflops <= 0)
      gflops =
          measure_sgemm_gflops(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
    cluster.device = this_machine_cpu(gflops, cluster.devices_per_node);
  } else if (std::optional<DeviceSpec> d = find_device(r.device, precision)) {
    cluster.device = *d;
  } else {
    print_error(kCommand, "--device " + r.device + " is not a known device");
    return 2;
  }
  Result<Calibration> fitted = fit_calibration(*plan, cluster, *probe);
  if (!fitted) {
    print_error(kCommand, "--calibrate " + r.run + ": " + fitted.status().message());
    return 1;
  }
  fitted->cluster_name = r.cluster_name;
  const std::string path =
      r.file.empty() ? calibration_path(fitted->device_key, r.cluster_name) : r.file;
  if (Status s = save_calibration(path, *fitted); !s) {
    print_error(kCommand, s.message());
    return 1;
  }
  if (r.json) {
    std::cout << calibration_json(*fitted) << "\n";
    return 0;
  }
  std::cout << "calibration of " << fitted->device_name << " from run " << probe->name << " ("
            << probe->timed_steps << " timed iterations)\n";
  for (const std::string& line : calibration_lines(*fitted)) std::cout << "  " << line << "\n";
  std::cout << "saved to " << path << "; `lattice plan` and `--suggest` on --device "
            << fitted->device_key
            << (r.cluster_name.empty() ? std::string() : " with --cluster-name " + r.cluster_name)
            << " use it (--no-calibration: the defaults)\n";
  return 0;
}

std::string use_saved_calibration(ClusterSpec& cluster, const std::string& file,
                                  const std::string& cluster_name,
                                  std::vector<std::string>& errors) {
  const std::vector<std::string> paths =
      file.empty() ? calibration_search_paths(cluster.device.key, cluster_name)
                   : std::vector<std::string>{file};
  std::string path;
  Result<std::optional<Calibration>> saved = std::optional<Calibration>();
  for (const std::string& candidate : paths) {  // the first file that exists
    path = candidate;
    saved = load_calibration(path);
    if (!saved) {
      errors.push_back(saved.status().message());
      return "";
    }
    if (*saved) break;
  }
  if (!*saved) {
    if (!file.empty()) errors.push_back("--calibration " + file + " does not exist");
    return "";
  }
  const Calibration& c = **saved;
  if (c.device_key != cluster.device.key) {
    errors.push_back("--calibration " + path + " is for device " + c.device_key + ", not " +
                     cluster.device.key);
    return "";
  }
  cluster = apply_calibration(cluster, c);
  char buf[160];
  std::snprintf(buf, sizeof buf, "efficiency %.3g, links %.3g / %.3g GB/s, memory %.3g GB/s",
                cluster.compute_efficiency, cluster.device.intra_node_bandwidth / 1e9,
                cluster.device.inter_node_bandwidth / 1e9, cluster.device.memory_bandwidth / 1e9);
  // A plan that names its cluster says when it fell back to the device's file.
  const std::string fallback =
      !cluster_name.empty() && file.empty() && c.cluster_name != cluster_name
          ? "; no calibration of cluster " + cluster_name + " is saved, the device's is used"
          : "";
  return "calibrated from run " + c.probe_run + " (" + path + "): " + buf + fallback;
}

}  // namespace lattice::cli
