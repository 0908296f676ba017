// Instability caught and acted on (docs/studio.md "Instability"): a non-finite loss or
// gradient norm, and loss and gradient-norm spikes, each a z-score against a trailing window of
// the last good iterations. Every rank holds the same all-reduced loss and norm, so every rank
// decides the same without communicating. The run store keeps each event as metric keys at its
// iteration; the CLI and the Studio read them back with instability_events().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice {

namespace storage {
class RunStore;
}

// What --on-spike does at an event: warn (a console line), skip (the optimizer does not step
// on that iteration, counted as skipped), stop (save with --save, end the run with an error) or
// rollback (end this run at the event, and `lattice train` goes on from the latest checkpoint in
// --save without the batches from it to the spike: Note [rollback] in app/cli/train_rollback.h).
enum class SpikeAction { kWarn = 0, kSkip = 1, kStop = 2, kRollback = 3 };
const char* spike_action_name(SpikeAction action);  // "warn", "skip", "stop", "rollback"

struct InstabilityEvent {
  enum Kind { kNonFinite, kLossSpike, kGradNormSpike };
  Kind kind = kNonFinite;
  int64_t iteration = 0;
  double value = 0;           // the loss or the norm (NaN/Inf for kNonFinite: the bad one)
  double mean = 0, std = 0;   // the window's (0 for kNonFinite)
  double z = 0;               // (value - mean) / std (0 for kNonFinite)
  int window = 0;             // the values the window held
  SpikeAction action = SpikeAction::kWarn;
};
// "non-finite loss or grad norm", "loss spike", "grad norm spike"
const char* instability_kind_name(InstabilityEvent::Kind kind);

// One sentence: "loss spike at iteration 37: 9.8 against 3.1 ± 0.2 over the last 50 (z 33.5)".
std::string describe(const InstabilityEvent& e);

// Decides, per iteration, from the global loss and gradient norm. A value is a spike when its
// z-score against the mean and (population) standard deviation of the last `window` good
// iterations exceeds `z_threshold`, once the window holds at least window / 2 values; only
// upward moves count (a falling loss is progress). An iteration with any event does not enter
// the windows, so one spike does not widen the band that judges the next.
class SpikeDetector {
 public:
  SpikeDetector(int window, double z_threshold);
  std::vector<InstabilityEvent> check(int64_t iteration, double loss, double grad_norm);
  int window_size() const { return static_cast<int>(losses_.size()); }

 private:
  int window_;
  double z_threshold_;
  std::deque<double> losses_, norms_;
};

// The run store's keys of one event, at its iteration: "<kind> value", "<kind> z",
// "<kind> mean", "<kind> std", "<kind> window" and "instability action" (SpikeAction's number).
std::map<std::string, double> instability_values(const InstabilityEvent& e);
// Every key instability_values writes for any kind (to read them back).
std::vector<std::string> instability_keys();
// The events of a run from its keys: series[key] = (step, value) points, as the store's
// series() reads them. By iteration, then kind.
std::vector<InstabilityEvent> instability_events(
    const std::map<std::string, std::vector<std::pair<int64_t, double>>>& series);

// The same, read from a run store (every point of instability_keys()).
Result<std::vector<InstabilityEvent>> read_instability_events(storage::RunStore& store,
                                                              int64_t run_id);

}  // namespace lattice
