// How the History view writes a recorded run for people: status, layout, times, durations and
// metric values. Shared by the runs table and the compare panel; no store access here.
#pragma once

#include <QString>
#include <optional>
#include <string>

#include "lattice/storage/run_store.h"

namespace lattice::ui {

// The metric keys the engine's RunRecorder logs that the History view shows.
inline constexpr const char* kLossKey = "lm loss";
inline constexpr const char* kValidationLossKey = "validation lm loss";
inline constexpr const char* kTokensKey = "tokens per second";

QString runStatusText(storage::RunStatus status);      // "running", "crashed", ...
QString runLayoutText(const storage::Layout& layout);  // "2×1×4" (TP×PP×DP)
QString runStartText(const storage::RunInfo& run);     // "2026-12-02 15:08", "-" if not started
// Seconds from start to end, or to `now` while running (crashed: to the last heartbeat).
std::optional<double> runDurationSeconds(const storage::RunInfo& run, double now);
QString durationText(double seconds);  // "42 s", "3 min 20 s", "2 h 05 min"
// The latest value of `key`, or nullopt when the run never logged it.
std::optional<double> latestMetric(const storage::RunInfo& run, const char* key);
QString lossText(std::optional<double> loss);      // "2.3456", "-"
QString tokensText(std::optional<double> tokens);  // "12,345", "-"

}  // namespace lattice::ui
