// The CSV and JSON exports of a run's history and the comparison of run configs
// (run_export.h). Series are streamed point by point: a run may hold millions of them.
#include "lattice/storage/run_export.h"

#include "lattice/storage/run_sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace lattice::storage {
namespace {

// The shortest text that reads back as exactly v: "0.1", "3", "nan", "inf", "-inf".
std::string number_text(double v) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::string json_number(double v) {
  return std::isfinite(v) ? number_text(v) : "null";
}

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

constexpr const char* kMemoryCategories[] = {"weights",     "grads",     "optimizer_state",
                                             "activations", "workspace", "peak"};

std::int64_t memory_bytes(const MemorySample& m, int category) {
  const std::int64_t bytes[] = {m.weights,     m.grads,     m.optimizer_state,
                                m.activations, m.workspace, m.peak};
  return bytes[category];
}

nlohmann::json optional_time(const std::optional<double>& t) {
  return t ? nlohmann::json(*t) : nlohmann::json(nullptr);
}

nlohmann::json run_record(const RunInfo& r) {
  nlohmann::json j = {
      {"id", r.id},
      {"name", r.name},
      {"status", run_status_name(r.status)},
      {"created_at", r.created_at},
      {"started_at", optional_time(r.started_at)},
      {"ended_at", optional_time(r.ended_at)},
      {"heartbeat_at", optional_time(r.heartbeat_at)},
      {"host", r.host},
      {"command_line", r.command_line},
      {"layout", {{"tp", r.layout.tp}, {"pp", r.layout.pp}, {"dp", r.layout.dp}}},
      {"world_size", r.world_size},
      {"parameter_count", r.parameter_count},
      {"tags", r.tags},
      {"notes", r.notes},
      {"error", r.error},
  };
  j["latest_step"] = r.latest_step ? nlohmann::json(*r.latest_step) : nlohmann::json(nullptr);
  nlohmann::json latest = nlohmann::json::object();
  for (const auto& [key, value] : r.latest) {
    latest[key] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  j["latest"] = std::move(latest);
  nlohmann::json config = nlohmann::json::parse(r.config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    j["config_text"] = r.config_json;
  } else {
    j["config"] = std::move(config);
  }
  return j;
}

}  // namespace

void write_run_csv(const RunHistory& h, std::ostream& out) {
  std::set<int> ranks;
  std::vector<std::int64_t> steps;
  for (const StepMemory& m : h.memory) {
    ranks.insert(m.sample.rank);
    steps.push_back(m.step);
  }
  for (const KeySeries& s : h.metrics) {
    for (const StepValue& p : s.points) steps.push_back(p.step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());

  out << "step";
  for (const KeySeries& s : h.metrics) out << ',' << csv_field(s.key);
  for (int rank : ranks) {
    for (const char* category : kMemoryCategories) {
      out << ",memory rank " << rank << ' ' << category;
    }
  }
  out << '\n';
  // Every series is in step order: one cursor per series walks along with the rows.
  std::vector<std::size_t> next(h.metrics.size(), 0);
  std::size_t next_memory = 0;
  std::map<int, const MemorySample*> memory_at_step;
  for (std::int64_t step : steps) {
    out << step;
    for (std::size_t k = 0; k < h.metrics.size(); ++k) {
      const std::vector<StepValue>& points = h.metrics[k].points;
      const StepValue* value = nullptr;
      for (; next[k] < points.size() && points[next[k]].step == step; ++next[k]) {
        value = &points[next[k]];
      }
      out << ',';
      if (value) out << number_text(value->value);
    }
    memory_at_step.clear();
    for (; next_memory < h.memory.size() && h.memory[next_memory].step == step; ++next_memory) {
      memory_at_step[h.memory[next_memory].sample.rank] = &h.memory[next_memory].sample;
    }
    for (int rank : ranks) {
      auto it = memory_at_step.find(rank);
      for (int c = 0; c < static_cast<int>(std::size(kMemoryCategories)); ++c) {
        out << ',';
        if (it != memory_at_step.end()) out << memory_bytes(*it->second, c);
      }
    }
    out << '\n';
  }
}

void write_run_json(const RunHistory& h, std::ostream& out) {
  out << "{\n  \"run\": " << run_record(h.run).dump() << ",\n  \"metrics\": {";
  for (std::size_t k = 0; k < h.metrics.size(); ++k) {
    const KeySeries& s = h.metrics[k];
    out << (k ? ",\n    " : "\n    ") << json_string(s.key) << ": {\"steps\": [";
    for (std::size_t i = 0; i < s.points.size(); ++i) out << (i ? "," : "") << s.points[i].step;
    out << "], \"values\": [";
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      out << (i ? "," : "") << json_number(s.points[i].value);
    }
    out << "]}";
  }
  out << (h.metrics.empty() ? "},\n  \"memory\": [" : "\n  },\n  \"memory\": [");
  for (std::size_t i = 0; i < h.memory.size(); ++i) {
    const StepMemory& m = h.memory[i];
    out << (i ? ",\n    " : "\n    ") << "{\"step\": " << m.step << ", \"rank\": " << m.sample.rank;
    for (int c = 0; c < static_cast<int>(std::size(kMemoryCategories)); ++c) {
      out << ", \"" << kMemoryCategories[c] << "\": " << memory_bytes(m.sample, c);
    }
    out << '}';
  }
  out << (h.memory.empty() ? "],\n  \"checkpoints\": [" : "\n  ],\n  \"checkpoints\": [");
  for (std::size_t i = 0; i < h.checkpoints.size(); ++i) {
    const CheckpointInfo& c = h.checkpoints[i];
    out << (i ? ",\n    " : "\n    ") << "{\"step\": " << c.step
        << ", \"path\": " << json_string(c.path) << ", \"bytes\": " << c.bytes
        << ", \"created_at\": " << json_number(c.created_at) << '}';
  }
  out << (h.checkpoints.empty() ? "]\n}\n" : "\n  ]\n}\n");
}

ConfigComparison compare_configs(const std::vector<RunInfo>& runs, const CompareOptions& options) {
  std::vector<std::map<std::string, std::string>> settings;
  std::set<std::string> paths;
  for (const RunInfo& run : runs) {
    settings.push_back(run_settings(run.config_json));
    for (const auto& entry : settings.back()) paths.insert(entry.first);
  }
  ConfigComparison comparison;
  comparison.compared = paths.size();
  for (const std::string& path : paths) {
    SettingDifference d{path, {}};
    for (const auto& s : settings) {
      auto it = s.find(path);
      d.values.push_back(it == s.end() ? std::nullopt : std::optional<std::string>(it->second));
    }
    d.differs = !std::all_of(d.values.begin(), d.values.end(),
                             [&](const auto& v) { return v == d.values.front(); });
    if (d.differs || options.include_equal) comparison.differences.push_back(std::move(d));
  }
  return comparison;
}

}  // namespace lattice::storage
