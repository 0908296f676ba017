// Presenting recorded runs outside the store: a run's history as CSV or JSON (`lattice runs
// export`), and the settings that differ between runs (`lattice runs compare`; the Studio's
// comparison view reads the same). Pure functions of what RunStore read; no SQLite here.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lattice/storage/run_store.h"

namespace lattice::storage {

// One row per step that logged anything: the step, then one column per metric key (sorted by
// name), then one column per rank and memory category ("memory rank 0 peak", bytes). An empty
// cell is a key not logged at that step; a logged NaN is "nan". When a step logged a key
// twice the later value wins. Numbers are the shortest text that reads back exactly.
void write_run_csv(const RunHistory& history, std::ostream& out);

// {"run": the run record with its "config" object, "metrics": {key: {"steps": [...],
// "values": [...]}}, "memory": [{"step", "rank", bytes by category}], "checkpoints": [...]}.
// NaN and infinite values are null (JSON has no such numbers). A stored config that is not
// valid JSON appears as the string "config_text" instead of "config".
void write_run_json(const RunHistory& history, std::ostream& out);

// A setting that is not the same in every run: its dotted path in the config JSON
// ("optimizer.lr") and each run's value as JSON text, nullopt where that run's config lacks it.
// With CompareOptions::include_equal the list holds equal settings too, with differs false.
struct SettingDifference {
  std::string setting;
  std::vector<std::optional<std::string>> values;  // one per run, in the order given
  bool differs = true;
};

struct ConfigComparison {
  std::size_t compared = 0;                    // settings found in at least one run's config
  std::vector<SettingDifference> differences;  // sorted by path
};

struct CompareOptions {
  // Also list the settings every run has alike (the Studio's "Show all settings").
  bool include_equal = false;
};

// Compares the runs' configs: objects key by key at any depth, arrays and scalars as whole
// values. A config that is not valid JSON counts as one setting "(config)" holding its text.
ConfigComparison compare_configs(const std::vector<RunInfo>& runs,
                                 const CompareOptions& options = {});

}  // namespace lattice::storage
