// lattice runs export | compare: a run's whole history as CSV or JSON, and several runs'
// differing settings and final metrics side by side. The formats live in storage
// (lattice/storage/run_export.h); this file handles flags, files and the tables.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>

#include "commands.h"
#include "lattice/storage/run_export.h"
#include "runs_subcommands.h"

namespace lattice::cli::runs {
namespace {

// Left-aligned columns, two spaces apart; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += ' ' + row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 1, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string metric_text(const storage::RunInfo& run, const std::string& key) {
  auto it = run.latest.find(key);
  if (it == run.latest.end()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", it->second);
  return buf;
}

}  // namespace

int export_command(const Subcommand& self, const std::vector<std::string>& args) {
  std::string format, output;
  Invocation in;
  if (auto stop = parse_invocation(self, args,
                                   {{"format", "csv or json", &format},
                                    {"output", "write to this file instead of stdout", &output}},
                                   &in)) {
    return *stop;
  }
  if (in.positional.size() != 1) return usage_error(self, "export expects one RUN");
  if (format != "csv" && format != "json") {
    return usage_error(self, format.empty() ? "--format is required: csv or json"
                                            : "--format '" + format + "' is not csv or json");
  }
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  Result<storage::RunInfo> run = resolve_run(**store, in.positional[0], in.db);
  if (!run) return fail(self, run.status().message());
  Result<storage::RunHistory> history = (*store)->history(run->id);
  if (!history) return fail(self, history.status().message());

  std::ofstream file;
  if (!output.empty()) {
    file.open(output, std::ios::binary | std::ios::trunc);
    if (!file) return fail(self, "--output " + output + ": cannot write: " + std::strerror(errno));
  }
  std::ostream& out = output.empty() ? std::cout : file;
  if (format == "csv") {
    storage::write_run_csv(*history, out);
  } else {
    storage::write_run_json(*history, out);
  }
  out.flush();
  if (!out) {
    return fail(self, (output.empty() ? std::string("standard output") : "--output " + output) +
                          ": the write failed (disk full?)");
  }
  if (!output.empty()) {
    std::size_t points = 0;
    for (const storage::KeySeries& s : history->metrics) points += s.points.size();
    std::printf("wrote %s to %s: %zu metric keys, %zu points, %zu memory samples\n",
                describe(*run).c_str(), output.c_str(), history->metrics.size(), points,
                history->memory.size());
  }
  return 0;
}

int compare_command(const Subcommand& self, const std::vector<std::string>& args) {
  Invocation in;
  if (auto stop = parse_invocation(self, args, {}, &in)) return *stop;
  if (in.positional.size() < 2) return usage_error(self, "compare expects two or more RUNs");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  std::vector<storage::RunInfo> runs;
  for (const std::string& name : in.positional) {
    Result<storage::RunInfo> run = resolve_run(**store, name, in.db);
    if (!run) return fail(self, run.status().message());
    runs.push_back(*run);
  }
  std::vector<std::string> header = {""};
  for (const storage::RunInfo& r : runs) header.push_back(r.name);

  const storage::ConfigComparison config = storage::compare_configs(runs);
  if (config.differences.empty()) {
    std::printf("settings: all %zu the same\n", config.compared);
  } else {
    std::printf("settings that differ (%zu of %zu):\n", config.differences.size(), config.compared);
    std::vector<std::vector<std::string>> rows = {header};
    rows[0][0] = "setting";
    for (const storage::SettingDifference& d : config.differences) {
      rows.push_back({d.setting});
      for (const auto& v : d.values) rows.back().push_back(v.value_or("(unset)"));
    }
    print_table(rows);
  }

  std::printf("\nfinal metrics:\n");
  std::vector<std::vector<std::string>> rows = {header};
  rows[0][0] = "metric";
  rows.push_back({"status"});
  rows.push_back({"step"});
  for (const storage::RunInfo& r : runs) {
    rows[1].push_back(storage::run_status_name(r.status));
    rows[2].push_back(r.latest_step ? std::to_string(*r.latest_step) : "-");
  }
  std::set<std::string> keys;
  for (const storage::RunInfo& r : runs) {
    for (const auto& entry : r.latest) keys.insert(entry.first);
  }
  for (const std::string& key : keys) {
    rows.push_back({key});
    for (const storage::RunInfo& r : runs) rows.back().push_back(metric_text(r, key));
  }
  print_table(rows);
  return 0;
}

}  // namespace lattice::cli::runs
