// Settings, groups, group statistics and parallel coordinates of many runs (run_sweep.h).
//
// Note "aligned steps": runs of a sweep log the same steps, but not always all of them (a run
// stopped early, a seed that crashed, runs of different --train-iters). A group's curve takes
// the union of its runs' steps; at each step the mean is over the runs that logged that step,
// so a short run pulls the mean only where it has points, and the band (min-max or +-1 std) is
// drawn only where two or more runs meet: a band of one run would be a line that says nothing.
// No interpolation between steps: runs that log at different intervals meet at the steps they
// share, and elsewhere the mean is of fewer runs, as `runs` says.
#include "lattice/storage/run_sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace lattice::storage {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void flatten(const nlohmann::json& j, const std::string& path, RunSettings* out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [key, value] : j.items()) {
      flatten(value, path.empty() ? key : path + "." + key, out);
    }
    return;
  }
  (*out)[path.empty() ? "(config)" : path] = j.dump();
}

// Values in display order: numbers by magnitude, then the rest by text.
bool value_before(const std::string& a, const std::string& b) {
  const std::optional<double> x = setting_number(a), y = setting_number(b);
  if (x && y) return *x < *y || (*x == *y && a < b);
  if (x || y) return x.has_value();
  return a < b;
}

// Note "flat settings": the settings straight from the parser's events, without building
// the JSON tree first: at 10,000 runs the tree was most of the parse (and of the memory it
// touched). Each leaf's text is what the tree's dump() gives: the same lexer reads the number
// or string, and nlohmann formats it the same way. Anything this handler does not take on (a
// top level that is not an object, a non-empty array, a key given twice, invalid JSON) makes
// it decline, and run_settings parses the tree as before.
class FlatSettings {
 public:
  using json = nlohmann::json;
  explicit FlatSettings(RunSettings* out) : out_(out) {}

  bool null() { return leaf("null"); }
  bool boolean(bool v) { return leaf(v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) { return leaf(std::to_string(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return leaf(std::to_string(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return leaf(json(v).dump()); }
  bool string(json::string_t& v) { return leaf(json(std::move(v)).dump()); }
  bool binary(json::binary_t&) { return false; }
  bool start_object(std::size_t) {
    if (in_array_ || (!paths_.empty() && !key_pending_)) return false;  // in an array
    std::string path = paths_.empty() ? std::string() : key_path();
    // A key given twice, once for an object: the tree keeps the later value only.
    if (!paths_.empty() && (out_->count(path) > 0 || !objects_.insert(path).second)) return false;
    paths_.push_back(std::move(path));
    key_pending_ = false;
    empty_.push_back(true);
    return true;
  }
  bool key(json::string_t& k) {
    empty_.back() = false;
    key_ = std::move(k);
    key_pending_ = true;
    return true;
  }
  bool end_object() {
    const bool empty = empty_.back();
    const std::string path = std::move(paths_.back());
    paths_.pop_back();
    empty_.pop_back();
    if (empty && !paths_.empty()) return insert(path, "{}");  // {} as a value
    return true;
  }
  bool start_array(std::size_t) {
    if (!key_pending_ || in_array_) return false;  // at the top, or nested in an array
    in_array_ = true;
    return true;
  }
  bool end_array() {  // only an empty array gets here: an element declines
    in_array_ = false;
    return leaf("[]");
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  std::string key_path() const { return paths_.back().empty() ? key_ : paths_.back() + "." + key_; }
  bool leaf(std::string text) {
    if (!key_pending_ || (in_array_ && text != "[]")) return false;  // top level, array element
    key_pending_ = false;
    return insert(key_path(), std::move(text));
  }
  bool insert(const std::string& path, std::string text) {
    if (!objects_.empty() && objects_.count(path) > 0 && text != "{}") return false;
    return out_->emplace(path, std::move(text)).second;  // a key given twice declines
  }

  RunSettings* out_;
  std::vector<std::string> paths_;  // the dotted path of each open object
  std::vector<bool> empty_;         // whether each open object has had no key yet
  std::set<std::string> objects_;   // the paths of the nested objects seen
  std::string key_;
  bool key_pending_ = false;  // a key was read, its value not yet
  bool in_array_ = false;
};

}  // namespace

RunSettings run_settings(const std::string& config_json) {
  RunSettings settings;
  {
    FlatSettings flat(&settings);
    if (nlohmann::json::sax_parse(config_json, &flat)) return settings;
    settings.clear();
  }
  const nlohmann::json config =
      nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    settings["(config)"] = config_json;
  } else if (!(config.is_object() && config.empty())) {
    flatten(config, "", &settings);
  }
  return settings;
}

std::string setting_text(std::string_view json) {
  if (json.size() >= 2 && json.front() == '"' && json.back() == '"') {
    const nlohmann::json s = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (s.is_string()) return s.get<std::string>();
  }
  return std::string(json);
}

std::optional<double> setting_number(std::string_view json) {
  if (json.empty() || json.front() == '"') return std::nullopt;
  double v = 0;
  const char* end = json.data() + json.size();
  const auto [ptr, ec] = std::from_chars(json.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<SettingGroup> group_by_value(const std::vector<std::optional<std::string>>& values) {
  std::map<std::string, std::vector<std::size_t>, bool (*)(const std::string&, const std::string&)>
      by_value(&value_before);
  std::vector<std::size_t> unset;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i])
      by_value[*values[i]].push_back(i);
    else
      unset.push_back(i);
  }
  std::vector<SettingGroup> groups;
  for (auto& [value, members] : by_value) groups.push_back({value, std::move(members)});
  if (!unset.empty()) groups.push_back({std::nullopt, std::move(unset)});
  return groups;
}

GroupCurve group_curve(const std::vector<std::vector<StepValue>>& runs) {
  // step -> each run's value there (the later of two points at one step).
  std::map<std::int64_t, std::vector<double>> at;
  for (const std::vector<StepValue>& points : runs) {
    for (std::size_t i = 0; i < points.size(); ++i) {
      const bool repeated = i + 1 < points.size() && points[i + 1].step == points[i].step;
      if (repeated || std::isnan(points[i].value)) continue;
      at[points[i].step].push_back(points[i].value);
    }
  }
  GroupCurve c;
  for (const auto& [step, values] : at) {
    const double n = static_cast<double>(values.size());
    double sum = 0;
    for (double v : values) sum += v;
    const double mean = sum / n;
    double squares = 0;
    for (double v : values) squares += (v - mean) * (v - mean);
    const bool spread = values.size() >= 2;
    c.steps.push_back(step);
    c.mean.push_back(mean);
    c.stddev.push_back(spread ? std::sqrt(squares / (n - 1)) : kNaN);
    c.min.push_back(spread ? *std::min_element(values.begin(), values.end()) : kNaN);
    c.max.push_back(spread ? *std::max_element(values.begin(), values.end()) : kNaN);
    c.runs.push_back(static_cast<int>(values.size()));
  }
  return c;
}

ParallelCoordinates parallel_coordinates(const std::vector<AxisColumn>& columns) {
  const std::size_t run_count = columns.empty() ? 0 : columns.front().values.size();
  ParallelCoordinates pc;
  pc.lines.assign(run_count, std::vector<double>(columns.size(), kNaN));
  for (std::size_t a = 0; a < columns.size(); ++a) {
    const AxisColumn& column = columns[a];
    ParallelAxis axis;
    axis.name = column.name;
    std::vector<double> numbers(run_count, kNaN);
    bool any = false;
    for (std::size_t r = 0; r < run_count && r < column.values.size(); ++r) {
      if (!column.values[r]) continue;
      const std::optional<double> v = setting_number(*column.values[r]);
      if (!v) axis.categorical = true;
      if (v) numbers[r] = *v;
      if (v && !any) axis.low = axis.high = *v;
      if (v) axis.low = std::min(axis.low, *v), axis.high = std::max(axis.high, *v);
      any = any || v.has_value();
    }
    if (axis.categorical) {
      std::set<std::string, bool (*)(const std::string&, const std::string&)> distinct(
          &value_before);
      for (const std::optional<std::string>& v : column.values)
        if (v) distinct.insert(*v);
      axis.categories.assign(distinct.begin(), distinct.end());
      axis.low = axis.high = 0;
      const double last = static_cast<double>(axis.categories.size() - 1);
      for (std::size_t r = 0; r < run_count && r < column.values.size(); ++r) {
        if (!column.values[r]) continue;
        const auto at = std::lower_bound(axis.categories.begin(), axis.categories.end(),
                                         *column.values[r], &value_before);
        const double index = static_cast<double>(at - axis.categories.begin());
        pc.lines[r][a] = last > 0 ? index / last : 0.5;
      }
    } else if (any) {
      axis.log_scale = axis.low > 0 && axis.high >= 100 * axis.low;
      const auto scaled = [&](double v) { return axis.log_scale ? std::log10(v) : v; };
      const double low = scaled(axis.low), span = scaled(axis.high) - low;
      for (std::size_t r = 0; r < run_count; ++r) {
        if (std::isnan(numbers[r])) continue;
        pc.lines[r][a] = span > 0 ? (scaled(numbers[r]) - low) / span : 0.5;
      }
    }
    pc.axes.push_back(std::move(axis));
  }
  return pc;
}

}  // namespace lattice::storage
