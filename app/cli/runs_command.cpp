// lattice runs list | show: the run store from the command line (export, compare, tag, rename
// and delete arrive with the rest of the run-store issue).
#include <cstdio>
#include <ctime>
#include <iostream>

#include "commands.h"
#include "lattice/flags.h"
#include "lattice/run_record.h"
#include "lattice/storage/run_store.h"

namespace lattice::cli {

namespace {

std::string when(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string latest(const storage::RunInfo& r, const std::string& key, const char* format) {
  auto it = r.latest.find(key);
  if (it == r.latest.end()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, it->second);
  return buf;
}

Result<std::unique_ptr<storage::RunStore>> open_store(const std::string& db) {
  Result<std::unique_ptr<storage::RunStore>> s = storage::RunStore::open(db);
  if (!s) return Status::invalid_argument("--db " + db + ": " + s.status().message());
  return s;
}

}  // namespace

int runs_command(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: lattice runs <list|show> [flags]\n"
      "  list [--name S] [--tag T] [--status S]   runs with their latest metrics\n"
      "  show RUN                                  one run (id or name) in full\n"
      "every subcommand takes --db PATH (default $LATTICE_DATA_DIR/runs.sqlite)\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << usage;
    return args.empty() ? 2 : 0;
  }
  std::string db = default_run_db(), status;
  storage::RunFilter filter;
  std::vector<FlagSpec> specs = {{"db", "run database", &db}};
  if (args[0] == "list") {
    specs.push_back({"name", "only runs whose name contains this", &filter.name_contains});
    specs.push_back({"tag", "only runs with this tag", &filter.tag});
    specs.push_back(
        {"status", "created | running | finished | failed | killed | crashed", &status});
  } else if (args[0] != "show") {
    std::cerr << "lattice runs: unknown command '" << args[0] << "'\n" << usage;
    return 2;
  }
  std::vector<std::string> positional;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  std::vector<std::string> errors =
      parse_flags(rest, specs, &positional, "lattice runs " + args[0]);
  if (!status.empty()) {
    filter.status = storage::parse_run_status(status);
    if (!filter.status) errors.push_back("--status '" + status + "' is not a run status");
  }
  if (args[0] == "list" && !positional.empty()) errors.push_back("list takes no RUN");
  if (args[0] == "show" && positional.size() != 1) errors.push_back("show expects one RUN");
  for (const std::string& e : errors) print_error("runs " + args[0], e);
  if (!errors.empty()) return 2;

  Result<std::unique_ptr<storage::RunStore>> store = open_store(db);
  if (!store) {
    print_error("runs " + args[0], store.status().message());
    return 1;
  }
  if (args[0] == "show") filter = {};
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs(filter);
  if (!runs) {
    print_error("runs " + args[0], runs.status().message());
    return 1;
  }
  if (args[0] == "list") {
    std::printf("%5s  %-32s %-9s %7s %12s %12s  %-19s %s\n", "id", "name", "status", "step",
                "lm loss", "tokens/s", "started", "tags");
    for (const storage::RunInfo& r : *runs) {
      std::string tags;
      for (const std::string& t : r.tags) tags += (tags.empty() ? "" : ",") + t;
      std::printf("%5lld  %-32s %-9s %7s %12s %12s  %-19s %s\n", static_cast<long long>(r.id),
                  r.name.c_str(), storage::run_status_name(r.status),
                  r.latest_step ? std::to_string(*r.latest_step).c_str() : "-",
                  latest(r, "lm loss", "%.4f").c_str(),
                  latest(r, "tokens per second", "%.1f").c_str(),
                  r.started_at ? when(*r.started_at).c_str() : "-", tags.c_str());
    }
    return 0;
  }
  for (const storage::RunInfo& r : *runs) {
    if (r.name != positional[0] && std::to_string(r.id) != positional[0]) continue;
    std::printf(
        "run %lld: %s\n  status:      %s%s%s\n  host:        %s\n  command:     %s\n"
        "  parameters:  %lld\n  created:     %s\n",
        static_cast<long long>(r.id), r.name.c_str(), storage::run_status_name(r.status),
        r.error.empty() ? "" : " - ", r.error.c_str(), r.host.c_str(), r.command_line.c_str(),
        static_cast<long long>(r.parameter_count), when(r.created_at).c_str());
    if (r.ended_at) std::printf("  ended:       %s\n", when(*r.ended_at).c_str());
    std::printf("  latest metrics (step %s):\n",
                r.latest_step ? std::to_string(*r.latest_step).c_str() : "-");
    for (const auto& [key, value] : r.latest) std::printf("    %-26s %.6g\n", key.c_str(), value);
    std::printf("  config: %s\n", r.config_json.c_str());
    return 0;
  }
  print_error("runs show", "no run with id or name '" + positional[0] + "' in " + db);
  return 1;
}

}  // namespace lattice::cli
