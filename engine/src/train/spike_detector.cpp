// SpikeDetector, and the run store's keys of an instability event (lattice/instability.h).
#include <cmath>
#include <cstdio>
#include <numeric>

#include "lattice/instability.h"

namespace lattice {

namespace {

const InstabilityEvent::Kind kKinds[] = {InstabilityEvent::kNonFinite, InstabilityEvent::kLossSpike,
                                         InstabilityEvent::kGradNormSpike};
const char* const kFields[] = {"value", "z", "mean", "std", "window"};
constexpr const char* kActionKey = "instability action";

struct MeanStd {
  double mean = 0, std = 0;
};
MeanStd mean_std(const std::deque<double>& v) {
  const double n = static_cast<double>(v.size());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  return {mean, std::sqrt(squares / n)};
}

}  // namespace

const char* spike_action_name(SpikeAction action) {
  switch (action) {
    case SpikeAction::kSkip: return "skip";
    case SpikeAction::kStop: return "stop";
    case SpikeAction::kRollback: return "rollback";
    default: return "warn";
  }
}

const char* instability_kind_name(InstabilityEvent::Kind kind) {
  switch (kind) {
    case InstabilityEvent::kLossSpike: return "loss spike";
    case InstabilityEvent::kGradNormSpike: return "grad norm spike";
    default: return "non-finite loss or grad norm";
  }
}

std::string describe(const InstabilityEvent& e) {
  char s[256];
  if (e.kind == InstabilityEvent::kNonFinite)
    std::snprintf(s, sizeof s, "%s at iteration %lld (%g)", instability_kind_name(e.kind),
                  static_cast<long long>(e.iteration), e.value);
  else
    std::snprintf(s, sizeof s, "%s at iteration %lld: %.4g against %.4g ± %.2g over the last %d (z %.1f)",
                  instability_kind_name(e.kind), static_cast<long long>(e.iteration), e.value,
                  e.mean, e.std, e.window, e.z);
  return s;
}

SpikeDetector::SpikeDetector(int window, double z_threshold)
    : window_(window), z_threshold_(z_threshold) {}

std::vector<InstabilityEvent> SpikeDetector::check(int64_t iteration, double loss,
                                                   double grad_norm) {
  std::vector<InstabilityEvent> events;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    InstabilityEvent e;
    e.iteration = iteration;
    e.value = std::isfinite(loss) ? grad_norm : loss;
    events.push_back(e);
    return events;
  }
  // Note [spike warm-up]: half a window before judging, so that the first iterations' fast
  // descent (and its large spread) sets the band rather than being judged by two values.
  const bool judging = window_ >= 2 && static_cast<int>(losses_.size()) >= (window_ + 1) / 2;
  auto judge = [&](const std::deque<double>& past, double value, InstabilityEvent::Kind kind) {
    if (!judging) return;
    const MeanStd m = mean_std(past);
    // A flat window (std 0) flags any rise; it needs an exactly constant series, which
    // training does not give.
    const double z = m.std > 0 ? (value - m.mean) / m.std : (value > m.mean ? INFINITY : 0.0);
    if (!(z > z_threshold_)) return;
    events.push_back({kind, iteration, value, m.mean, m.std, z, static_cast<int>(past.size())});
  };
  judge(losses_, loss, InstabilityEvent::kLossSpike);
  judge(norms_, grad_norm, InstabilityEvent::kGradNormSpike);
  if (!events.empty() || window_ < 1) return events;
  losses_.push_back(loss);
  norms_.push_back(grad_norm);
  if (static_cast<int>(losses_.size()) > window_) {
    losses_.pop_front();
    norms_.pop_front();
  }
  return events;
}

std::map<std::string, double> instability_values(const InstabilityEvent& e) {
  const std::string k = instability_kind_name(e.kind);
  std::map<std::string, double> v = {{k + " value", e.value},
                                     {kActionKey, static_cast<double>(e.action)}};
  if (e.kind == InstabilityEvent::kNonFinite) return v;
  v[k + " z"] = e.z;
  v[k + " mean"] = e.mean;
  v[k + " std"] = e.std;
  v[k + " window"] = e.window;
  return v;
}

std::vector<std::string> instability_keys() {
  std::vector<std::string> keys = {kActionKey};
  for (InstabilityEvent::Kind kind : kKinds)
    for (const char* f : kFields) keys.push_back(std::string(instability_kind_name(kind)) + " " + f);
  return keys;
}

std::vector<InstabilityEvent> instability_events(
    const std::map<std::string, std::vector<std::pair<int64_t, double>>>& series) {
  // (iteration, kind) -> field -> value
  std::map<std::pair<int64_t, int>, std::map<std::string, double>> found;
  std::map<int64_t, double> actions;
  if (auto a = series.find(kActionKey); a != series.end())
    for (const auto& [step, value] : a->second) actions[step] = value;
  for (InstabilityEvent::Kind kind : kKinds)
    for (const char* f : kFields) {
      auto s = series.find(std::string(instability_kind_name(kind)) + " " + f);
      if (s == series.end()) continue;
      for (const auto& [step, value] : s->second) found[{step, kind}][f] = value;
    }
  std::vector<InstabilityEvent> events;
  for (const auto& [at, fields] : found) {
    if (!fields.count("value")) continue;  // "value" marks an event of that kind
    InstabilityEvent e;
    e.iteration = at.first;
    e.kind = static_cast<InstabilityEvent::Kind>(at.second);
    auto get = [&](const char* f) {
      auto it = fields.find(f);
      return it == fields.end() ? 0.0 : it->second;
    };
    e.value = get("value");
    e.z = get("z");
    e.mean = get("mean");
    e.std = get("std");
    e.window = static_cast<int>(get("window"));
    if (auto a = actions.find(e.iteration); a != actions.end())
      e.action = static_cast<SpikeAction>(static_cast<int>(a->second));
    events.push_back(e);
  }
  return events;
}

}  // namespace lattice
