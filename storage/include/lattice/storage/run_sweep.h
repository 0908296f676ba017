// Many runs at once (a hyper-parameter sweep): a run's settings as flat paths, runs grouped by
// the value of one setting, the mean and spread of a group's curves over its runs (seeds), and
// the axes and lines of a parallel-coordinates view of settings against final metrics. Pure
// functions of what RunStore read; no SQLite and no Qt here. The Studio's History draws them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/storage/run_store.h"

namespace lattice::storage {

// Setting path -> value as JSON text ({"lr": 0.0003, "seed": 3} -> "lr" -> "0.0003"); nested
// objects become dotted paths. A config that is not valid JSON is one setting "(config)".
using RunSettings = std::map<std::string, std::string>;
RunSettings run_settings(const std::string& config_json);

// A setting's JSON text as a person reads it: strings without their quotes ("\"cosine\"" ->
// "cosine"), numbers and the rest as they are.
std::string setting_text(std::string_view json);
// The number a JSON text holds, when it is one (finite); "0.0003" -> 3e-4, "\"x\"" -> nullopt.
std::optional<double> setting_number(std::string_view json);

// The runs that share a value of the setting. Groups are ordered by value: numbers by
// magnitude, then other values by text, then the runs that lack the setting (value nullopt).
struct SettingGroup {
  std::optional<std::string> value;  // the JSON text of the setting
  std::vector<std::size_t> members;  // indices into the values given, ascending
};
// values[i]: run i's value of the setting (JSON text), nullopt when its config lacks it.
std::vector<SettingGroup> group_by_value(const std::vector<std::optional<std::string>>& values);

// One group's curve over the steps its runs logged (Note "aligned steps"): at every step any
// run logged, the mean over the runs that logged it, and the spread where two or more did.
struct GroupCurve {
  std::vector<std::int64_t> steps;  // ascending
  std::vector<double> mean;         // (steps)
  std::vector<double> stddev;       // (steps) sample standard deviation (n - 1); NaN if n < 2
  std::vector<double> min, max;     // (steps) NaN if n < 2
  std::vector<int> runs;            // (steps) n: the runs with a value at the step
};
// Note "aligned steps": each run's points in step order (RunStore::series); a step logged twice
// by one run counts its later value; NaN points are left out (a diverged seed does not turn its
// group's mean into NaN, and `runs` says how many counted).
GroupCurve group_curve(const std::vector<std::vector<StepValue>>& runs);

// Parallel coordinates: one vertical axis per setting or metric, one polyline per run.
struct ParallelAxis {
  std::string name;
  bool categorical = false;             // some value is not a number: one tick per distinct value
  bool log_scale = false;               // positive numbers spanning 100x or more
  double low = 0, high = 0;             // numeric: the smallest and largest value
  std::vector<std::string> categories;  // categorical: the values (JSON text), bottom to top
};
struct AxisColumn {
  std::string name;
  std::vector<std::optional<std::string>> values;  // (runs) JSON text; nullopt: missing
};
struct ParallelCoordinates {
  std::vector<ParallelAxis> axes;          // (axes) in the order of the columns given
  std::vector<std::vector<double>> lines;  // (runs, axes) 0 bottom .. 1 top; NaN missing
};
// Numeric axes map [low, high] to [0, 1] (a single value sits at 0.5); categories are spread
// evenly, a single one at 0.5. Every column holds one value per run.
ParallelCoordinates parallel_coordinates(const std::vector<AxisColumn>& columns);

}  // namespace lattice::storage
