// `lattice plan --calibrate` and the saved calibration behind `lattice plan` and `--suggest`
// (plan_calibration.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lattice/plan.h"
#include "lattice/train_options.h"

namespace lattice::cli {

struct CalibrateRequest {
  std::string run;  // id or name in the run store
  std::string db;   // empty: default_run_db()
  std::string device = "cpu";
  int nodes = 0;             // 0: one machine
  double peak_gflops = 0;    // CPU: 0 takes the probe's measured peak, else measures SGEMM
  double efficiency = 0.5;   // the default the fit starts from (and prints beside its value)
  std::string file;          // empty: calibration_path(device key, cluster_name)
  std::string cluster_name;  // empty: saved for the device on any cluster
  bool json = false;
  // The options the caller plans, when it gave train flags, and its world size (0: any).
  std::optional<TrainOptions> planned;
  int world = 0;
};
// Fits, saves, prints; returns the exit code.
int calibrate_from_run(const CalibrateRequest& request);

// Applies the calibration saved for cluster.device on `cluster_name` (the cluster's own, else
// the device's: calibration_search_paths), or `file` when not empty, to `cluster`; returns the
// sentence that says so and names the file, empty when there is none. Unreadable or mismatched
// files go to `errors`.
std::string use_saved_calibration(ClusterSpec& cluster, const std::string& file,
                                  const std::string& cluster_name,
                                  std::vector<std::string>& errors);

}  // namespace lattice::cli
