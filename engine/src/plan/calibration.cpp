// The planner's rates fitted to a probe run's phase times (lattice/calibration.h), and the
// calibration file that keeps them per device profile. Non-goals: reading the run store (see
// calibration_probe.cpp), fitting anything the step model does not have a term for.
#include "lattice/calibration.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "lattice/data.h"

namespace lattice {

namespace {

// Note [calibration fit]
// The probe's phases map onto the step model's terms (StepEstimate) of the same layout, all
// taken from one rank: the one with the most compute (forward + backward - TP collectives).
// Its peers' collectives and pipeline receives wait for it, so their TP, DP and pipeline times
// hold its extra compute as well, which the model counts once, in the slowest stage's compute;
// the slowest rank waits least, and its phases add up to at most the measured step. Terms:
//   compute    <- forward + backward - TP collectives (the model's compute is the slowest
//                 stage's, at peak x efficiency);
//   TP         <- the TP collectives the engine timed (--profile);
//   DP         <- data-parallel wait + the tied embedding's sum (the model's dp_comm_s: what
//                 backward did not hide);
//   pipeline   <- pipeline wait (the model's sends + 1F1B bubble);
//   optimizer  <- the optimizer phase.
// Compute is proportional to 1 / efficiency and the optimizer to 1 / memory bandwidth, each
// measured alone: those two are ratios (fitted = default x predicted / measured). The links
// are shared: on one machine TP, DP and the pipeline all use the intra-node bandwidth. Which
// terms a link drives is found by doubling it and seeing which terms move; its scale is then
// the least-squares fit (in seconds) of those terms to their measurements, a one-dimensional
// search over log(scale) in [1e-6, 1e6] (the terms are monotone in the scale, but the hidden
// DP share and the bubble make them non-linear). With both links in play, three alternating
// rounds. A term with no measurement (TP untimed, no pipeline, DP 1) leaves its link alone, and
// a link whose fit ends within 10^5 of the search's edge keeps its default (no bandwidth
// explains the times).

struct Terms {
  double compute = 0, tp = 0, dp = 0, pp = 0, optimizer = 0;
};

Terms predicted_terms(const RecordedRunPlan& plan, const ClusterSpec& cluster) {
  const StepEstimate s = estimate_step(plan.options, plan.layout, cluster, plan.memory);
  return {s.compute_s, s.tp_comm_s, s.dp_comm_s, s.pp_comm_s + s.pp_bubble_s, s.optimizer_s};
}

// The slowest rank's terms (Note [calibration fit]); TP is negative when it was needed but not
// recorded.
Terms measured_terms(const ProbeRun& probe, bool tp_needed) {
  const ProbePhases* slowest = nullptr;
  auto compute = [](const ProbePhases& r) {
    return r.forward + r.backward - std::max(r.tp_comm, 0.0);
  };
  for (const ProbePhases& r : probe.ranks)
    if (!slowest || compute(r) > compute(*slowest)) slowest = &r;
  if (!slowest) return {};
  const ProbePhases& r = *slowest;
  return {compute(r), r.tp_comm >= 0 ? r.tp_comm : (tp_needed ? -1.0 : 0.0),
          r.dp_comm + r.embedding_comm, r.pipeline_wait, r.optimizer};
}

// Minimises f over log(scale) in [-ln 1e6, ln 1e6]: a scan of 97 points (an eighth of a
// decade apart) finds the best region, since f is flat where a term is hidden (DP behind
// backward at high bandwidth) and a bracketing search alone would walk off along the flat part;
// golden-section search then refines between the best point's neighbours.
double best_scale(const std::function<double(double)>& f) {
  const double lo = -std::log(1e6), hi = std::log(1e6);
  constexpr int kPoints = 97;
  const double step = (hi - lo) / (kPoints - 1);
  int best = 0;
  double best_value = f(std::exp(lo));
  for (int i = 1; i < kPoints; i++) {
    const double v = f(std::exp(lo + i * step));
    if (v < best_value) best = i, best_value = v;
  }
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = lo + std::max(best - 1, 0) * step, b = lo + std::min(best + 1, kPoints - 1) * step;
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = f(std::exp(c)), fd = f(std::exp(d));
  for (int i = 0; i < 60; i++) {
    if (fc < fd) {
      b = d, d = c, fd = fc;
      c = b - g * (b - a);
      fc = f(std::exp(c));
    } else {
      a = c, c = d, fc = fd;
      d = a + g * (b - a);
      fd = f(std::exp(d));
    }
  }
  const double refined = (a + b) / 2;
  return std::exp(f(std::exp(refined)) <= best_value ? refined : lo + best * step);
}

// The link terms (TP, DP, pipeline) that have a measurement, as a list of (predicted, measured).
double link_residual(const Terms& p, const Terms& m, const Terms& uses) {
  double sum = 0;
  auto add = [&](double pred, double meas, double used) {
    if (used > 0 && meas >= 0) sum += (pred - meas) * (pred - meas);
  };
  add(p.tp, m.tp, uses.tp);
  add(p.dp, m.dp, uses.dp);
  add(p.pp, m.pp, uses.pp);
  return sum;
}

// Which link terms move when `bandwidth` doubles: 1 where they do. DP and the pipeline are
// judged by their traffic (all of DP's, the sends), which moves even where the model hides it
// (DP behind backward) or the bubble outweighs it.
Terms terms_using(const RecordedRunPlan& plan, ClusterSpec cluster, double DeviceSpec::*bandwidth) {
  const StepEstimate before = estimate_step(plan.options, plan.layout, cluster, plan.memory);
  cluster.device.*bandwidth *= 2;
  const StepEstimate after = estimate_step(plan.options, plan.layout, cluster, plan.memory);
  auto moved = [](double x, double y) {
    return std::abs(x - y) > 1e-12 * std::max(x, 1e-30) ? 1.0 : 0.0;
  };
  return {0, moved(before.tp_comm_s, after.tp_comm_s),
          moved(before.dp_comm_total_s, after.dp_comm_total_s),
          moved(before.pp_comm_s, after.pp_comm_s), 0};
}

bool any(const Terms& uses, const Terms& m) {
  return (uses.tp > 0 && m.tp >= 0) || (uses.dp > 0 && m.dp >= 0) || (uses.pp > 0 && m.pp >= 0);
}

std::string rate_text(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GB/s", bytes_per_second / 1e9);
  return buf;
}

}  // namespace

Result<Calibration> fit_calibration(const RecordedRunPlan& plan, const ClusterSpec& cluster,
                                    const ProbeRun& probe) {
  const Terms m = measured_terms(probe, plan.layout.tp > 1);
  if (!(m.compute > 0))
    return Status::invalid_argument("run " + probe.name +
                                    " recorded no forward and backward times to fit");
  if (plan.layout.tp > 1 && m.tp < 0)
    return Status::invalid_argument(
        "run " + probe.name +
        " has TP > 1 but recorded no tensor-parallel comm time: probe with --profile");
  Calibration c;
  c.device_key = cluster.device.key;
  c.device_name = cluster.device.name;
  c.default_compute_efficiency = cluster.compute_efficiency;
  c.default_intra_node_bandwidth = cluster.device.intra_node_bandwidth;
  c.default_inter_node_bandwidth = cluster.device.inter_node_bandwidth;
  c.default_memory_bandwidth = cluster.device.memory_bandwidth;
  c.probe_run = probe.name;
  c.world = plan.layout.world;
  c.tp = plan.layout.tp;
  c.cp = plan.layout.cp;
  c.pp = plan.layout.pp;
  c.dp = plan.layout.dp;
  c.measured_step_s = probe.step_time_s;
  c.predicted_before_s = estimate_step(plan.options, plan.layout, cluster, plan.memory).total_s;

  ClusterSpec fit = cluster;
  const Terms before = predicted_terms(plan, cluster);
  // Ratios for the terms measured alone (compute scales as 1 / efficiency, which may exceed 1
  // when the peak given is below what the kernels reach; the optimizer as 1 / bandwidth).
  fit.compute_efficiency = cluster.compute_efficiency * before.compute / m.compute;
  c.compute_fitted = true;
  if (before.optimizer > 0 && m.optimizer > 0) {
    fit.device.memory_bandwidth *= before.optimizer / m.optimizer;
    c.memory_fitted = true;
  }
  // The links, by least squares over the terms each drives (Note [calibration fit]).
  const Terms intra_uses = terms_using(plan, fit, &DeviceSpec::intra_node_bandwidth);
  const Terms inter_uses = terms_using(plan, fit, &DeviceSpec::inter_node_bandwidth);
  c.intra_fitted = any(intra_uses, m);
  c.inter_fitted = any(inter_uses, m);
  for (int round = 0; round < 3; round++) {
    for (auto [bandwidth, uses, fitted] :
         {std::tuple{&DeviceSpec::intra_node_bandwidth, intra_uses, c.intra_fitted},
          std::tuple{&DeviceSpec::inter_node_bandwidth, inter_uses, c.inter_fitted}}) {
      if (!fitted) continue;
      const double start = fit.device.*bandwidth;
      const double scale = best_scale([&](double s) {
        ClusterSpec trial = fit;
        trial.device.*bandwidth = start * s;
        return link_residual(predicted_terms(plan, trial), m, uses);
      });
      fit.device.*bandwidth = start * scale;
    }
    if (!(c.intra_fitted && c.inter_fitted)) break;
  }
  // A fit at the edge of the search found no bandwidth that explains the times (a pipeline wait
  // below the bubble the model gives, say): the default is kept rather than a link of zero or
  // infinite speed that would mislead every other layout.
  for (auto [bandwidth, fitted] : {std::pair{&DeviceSpec::intra_node_bandwidth, &c.intra_fitted},
                                   std::pair{&DeviceSpec::inter_node_bandwidth, &c.inter_fitted}}) {
    const double ratio = fit.device.*bandwidth / cluster.device.*bandwidth;
    if (*fitted && (ratio > 1e5 || ratio < 1e-5)) {
      fit.device.*bandwidth = cluster.device.*bandwidth;
      *fitted = false;
    }
  }
  c.compute_efficiency = fit.compute_efficiency;
  c.intra_node_bandwidth = fit.device.intra_node_bandwidth;
  c.inter_node_bandwidth = fit.device.inter_node_bandwidth;
  c.memory_bandwidth = fit.device.memory_bandwidth;
  c.predicted_after_s = estimate_step(plan.options, plan.layout, fit, plan.memory).total_s;
  return c;
}

std::string probe_mismatch(const TrainOptions& run, int run_world, const TrainOptions& planned,
                           int planned_world) {
  const ModelConfig &a = run.model, &b = planned.model;
  const struct {
    const char* flag;
    int64_t run, planned;
  } fields[] = {
      {"--num-layers", a.num_layers, b.num_layers},
      {"--hidden-size", a.hidden_size, b.hidden_size},
      {"--num-attention-heads", a.num_attention_heads, b.num_attention_heads},
      {"--seq-length", a.seq_length, b.seq_length},
  };
  for (const auto& f : fields)
    if (f.run != f.planned)
      return "a different model (" + std::string(f.flag) + " " + std::to_string(f.run) + ", not " +
             std::to_string(f.planned) + ")";
  if (a.vocab_size != b.vocab_size)
    return "a different vocabulary (" + std::to_string(a.vocab_size) + " ids, not " +
           std::to_string(b.vocab_size) + ")";
  if (planned_world > 0 && run_world != planned_world)
    return "it ran on " + std::to_string(run_world) + " ranks, the plan has " +
           std::to_string(planned_world);
  return "";
}

ClusterSpec apply_calibration(ClusterSpec cluster, const Calibration& c) {
  if (c.compute_fitted) cluster.compute_efficiency = c.compute_efficiency;
  if (c.intra_fitted) cluster.device.intra_node_bandwidth = c.intra_node_bandwidth;
  if (c.inter_fitted) cluster.device.inter_node_bandwidth = c.inter_node_bandwidth;
  if (c.memory_fitted) cluster.device.memory_bandwidth = c.memory_bandwidth;
  return cluster;
}

// Note [calibration per cluster]
// The fitted rates are a property of a device on a given cluster: the same H100s reach other
// link bandwidths behind another fabric, and another efficiency under another driver. A fit
// made with a cluster name is saved in that cluster's folder, <data dir>/calibration/<cluster
// name>/<device key>.json; a plan that names its cluster takes that file first and falls back
// to the device's own, <data dir>/calibration/<device key>.json, which a fit without a name
// writes (files of earlier versions are of that kind: they have no "cluster" field).
std::string calibration_path(const std::string& device_key, const std::string& cluster_name) {
  const std::string dir = default_data_dir() + "/calibration/";
  if (cluster_name.empty()) return dir + device_key + ".json";
  return dir + cluster_name + "/" + device_key + ".json";
}

std::vector<std::string> calibration_search_paths(const std::string& device_key,
                                                  const std::string& cluster_name) {
  std::vector<std::string> paths;
  if (!cluster_name.empty()) paths.push_back(calibration_path(device_key, cluster_name));
  paths.push_back(calibration_path(device_key));
  return paths;
}

std::string check_cluster_name(const std::string& name) {
  const bool plain = std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  });
  if (!name.empty() && plain && name.front() != '.') return "";
  return "cluster name '" + name +
         "' cannot name a folder: use letters, digits, '.', '_' and '-', not starting with '.'";
}

std::string calibration_json(const Calibration& c, int indent) {
  nlohmann::json j;
  j["device_key"] = c.device_key;
  j["device_name"] = c.device_name;
  if (!c.cluster_name.empty()) j["cluster"] = c.cluster_name;
  j["fitted"] = {{"compute_efficiency", c.compute_efficiency},
                 {"intra_node_bandwidth", c.intra_node_bandwidth},
                 {"inter_node_bandwidth", c.inter_node_bandwidth},
                 {"memory_bandwidth", c.memory_bandwidth}};
  j["measured"] = {{"compute_efficiency", c.compute_fitted},
                   {"intra_node_bandwidth", c.intra_fitted},
                   {"inter_node_bandwidth", c.inter_fitted},
                   {"memory_bandwidth", c.memory_fitted}};
  j["defaults"] = {{"compute_efficiency", c.default_compute_efficiency},
                   {"intra_node_bandwidth", c.default_intra_node_bandwidth},
                   {"inter_node_bandwidth", c.default_inter_node_bandwidth},
                   {"memory_bandwidth", c.default_memory_bandwidth}};
  j["probe"] = {{"run", c.probe_run},
                {"world", c.world},
                {"tp", c.tp},
                {"cp", c.cp},
                {"pp", c.pp},
                {"dp", c.dp},
                {"measured_step_s", c.measured_step_s},
                {"predicted_before_s", c.predicted_before_s},
                {"predicted_after_s", c.predicted_after_s}};
  return j.dump(indent);
}

Result<Calibration> parse_calibration_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::invalid_argument(source + " is not a JSON object");
  Calibration c;
  try {
    c.device_key = j.at("device_key").get<std::string>();
    c.device_name = j.value("device_name", std::string());
    c.cluster_name = j.value("cluster", std::string());
    const nlohmann::json &f = j.at("fitted"), &m = j.at("measured"), &d = j.at("defaults"),
                         &p = j.at("probe");
    c.compute_efficiency = f.at("compute_efficiency").get<double>();
    c.intra_node_bandwidth = f.at("intra_node_bandwidth").get<double>();
    c.inter_node_bandwidth = f.at("inter_node_bandwidth").get<double>();
    c.memory_bandwidth = f.at("memory_bandwidth").get<double>();
    c.compute_fitted = m.at("compute_efficiency").get<bool>();
    c.intra_fitted = m.at("intra_node_bandwidth").get<bool>();
    c.inter_fitted = m.at("inter_node_bandwidth").get<bool>();
    c.memory_fitted = m.at("memory_bandwidth").get<bool>();
    c.default_compute_efficiency = d.at("compute_efficiency").get<double>();
    c.default_intra_node_bandwidth = d.at("intra_node_bandwidth").get<double>();
    c.default_inter_node_bandwidth = d.at("inter_node_bandwidth").get<double>();
    c.default_memory_bandwidth = d.at("memory_bandwidth").get<double>();
    c.probe_run = p.at("run").get<std::string>();
    c.world = p.at("world").get<int>();
    c.tp = p.at("tp").get<int>();
    c.cp = p.value("cp", 1);
    c.pp = p.at("pp").get<int>();
    c.dp = p.at("dp").get<int>();
    c.measured_step_s = p.at("measured_step_s").get<double>();
    c.predicted_before_s = p.at("predicted_before_s").get<double>();
    c.predicted_after_s = p.at("predicted_after_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(source + " is not a planner calibration: " + e.what());
  }
  const bool positive = c.compute_efficiency > 0 && c.intra_node_bandwidth > 0 &&
                        c.inter_node_bandwidth > 0 && c.memory_bandwidth > 0;
  if (!positive) return Status::invalid_argument(source + " holds a rate that is not positive");
  return c;
}

Status save_calibration(const std::string& path, const Calibration& c) {
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  if (ec)
    return Status::io_error("cannot create " + target.parent_path().string() + ": " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << calibration_json(c) << "\n";
    if (!out) return Status::io_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) return Status::io_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::ok();
}

Result<std::optional<Calibration>> load_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (!std::filesystem::exists(path)) return std::optional<Calibration>();
    return Status::io_error("cannot read " + path);
  }
  std::stringstream text;
  text << in.rdbuf();
  Result<Calibration> c = parse_calibration_json(text.str(), path);
  if (!c) return c.status();
  return std::optional<Calibration>(*c);
}

std::vector<std::string> calibration_lines(const Calibration& c) {
  char buf[200];
  std::vector<std::string> out;
  auto note = [](bool fitted) {
    return fitted ? "" : ", default kept: not measured, or no value fits the times";
  };
  std::snprintf(buf, sizeof buf, "compute efficiency   %.3g (default %.3g%s)", c.compute_efficiency,
                c.default_compute_efficiency, note(c.compute_fitted));
  out.push_back(buf);
  std::snprintf(buf, sizeof buf, "intra-node bandwidth %s (default %s%s)",
                rate_text(c.intra_node_bandwidth).c_str(),
                rate_text(c.default_intra_node_bandwidth).c_str(), note(c.intra_fitted));
  out.push_back(buf);
  std::snprintf(buf, sizeof buf, "inter-node bandwidth %s (default %s%s)",
                rate_text(c.inter_node_bandwidth).c_str(),
                rate_text(c.default_inter_node_bandwidth).c_str(), note(c.inter_fitted));
  out.push_back(buf);
  std::snprintf(buf, sizeof buf, "memory bandwidth     %s (default %s%s)",
                rate_text(c.memory_bandwidth).c_str(),
                rate_text(c.default_memory_bandwidth).c_str(), note(c.memory_fitted));
  out.push_back(buf);
  std::snprintf(buf, sizeof buf,
                "probe %s (world %d: TP %d, CP %d, PP %d, DP %d): measured step %.1f ms, "
                "estimate %.1f ms before, %.1f ms calibrated",
                c.probe_run.c_str(), c.world, c.tp, c.cp, c.pp, c.dp, c.measured_step_s * 1e3,
                c.predicted_before_s * 1e3, c.predicted_after_s * 1e3);
  out.push_back(buf);
  return out;
}

}  // namespace lattice
