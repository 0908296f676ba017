// lattice runs: the run store from the command line. This file dispatches and holds list,
// show, tag, rename and delete (export and compare are in runs_export.cpp). Nothing here
// writes anywhere but the run database.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "lattice/run_record.h"
#include "runs_subcommands.h"

namespace lattice::cli {
namespace runs {

std::optional<int> parse_invocation(const Subcommand& command, const std::vector<std::string>& args,
                                    std::vector<FlagSpec> flags, Invocation* out) {
  out->db = default_run_db();
  flags.insert(flags.begin(), {"db", "the run database", &out->db});
  if (std::any_of(args.begin(), args.end(),
                  [](const std::string& a) { return a == "--help" || a == "-h"; })) {
    std::cout << "usage: lattice runs " << command.usage << "\n\n"
              << command.details << "\n\nflags:\n"
              << flags_help(flags);
    return 0;
  }
  const std::vector<std::string> errors =
      parse_flags(args, flags, &out->positional, std::string("lattice runs ") + command.name);
  for (const std::string& e : errors) print_error(std::string("runs ") + command.name, e);
  if (!errors.empty()) return 2;
  return std::nullopt;
}

int fail(const Subcommand& command, const std::string& message, int code) {
  print_error(std::string("runs ") + command.name, message);
  return code;
}

int usage_error(const Subcommand& command, const std::string& message) {
  return fail(command,
              message + "; usage: lattice runs " + command.usage + " (`lattice runs " +
                  command.name + " --help` explains)",
              2);
}

Result<std::unique_ptr<storage::RunStore>> open_store(const std::string& db, bool create) {
  std::error_code ec;
  if (!create && !std::filesystem::exists(db, ec)) {
    return Status::invalid_argument("--db " + db +
                                    ": no run database there yet; `lattice train` records its "
                                    "runs into it (--db chooses another file)");
  }
  Result<std::unique_ptr<storage::RunStore>> s = storage::RunStore::open(db);
  if (!s) return Status::invalid_argument("--db " + db + ": " + s.status().message());
  return s;
}

Result<storage::RunInfo> resolve_run(storage::RunStore& store, const std::string& run,
                                     const std::string& db) {
  Result<storage::RunInfo> found = store.find_run(run);
  if (found) return found;
  return Status::invalid_argument(found.status().message() + "; `lattice runs list --db " + db +
                                  "` lists the runs with their ids and names");
}

std::string describe(const storage::RunInfo& run) {
  return "run " + std::to_string(run.id) + " ('" + run.name + "')";
}

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

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string steps_text(std::int64_t steps) {
  return std::to_string(steps) + (steps == 1 ? " step" : " steps");
}

// The list's "from" column: "PARENT@STEP" for a resumed run ("-@STEP" when the parent was
// deleted since), "-" for a run that started afresh.
std::string resumed_text(const storage::RunInfo& r) {
  if (!r.resume_step) return "-";
  return (r.parent_run_id ? std::to_string(*r.parent_run_id) : std::string("-")) + "@" +
         std::to_string(*r.resume_step);
}

// `runs show`'s lineage lines: where the run resumed, then each run of its lineage with the
// steps it keeps and the tail the next run discarded (RunStore::run_lineage).
Status print_lineage(storage::RunStore& store, const storage::RunInfo& r) {
  if (!r.resume_step) return Status::ok();
  if (!r.parent_run_id) {
    std::printf("  resumed:     at step %lld, from a run since deleted\n",
                static_cast<long long>(*r.resume_step));
    return Status::ok();
  }
  Result<std::vector<storage::LineageLink>> lineage = store.run_lineage(r.id);
  if (!lineage) return lineage.status();
  if (lineage->size() < 2) return Status::ok();  // only a hand-edited file loops
  const storage::LineageLink& parent = (*lineage)[lineage->size() - 2];
  std::printf("  resumed:     from run %lld ('%s') at step %lld\n",
              static_cast<long long>(parent.run_id), parent.name.c_str(),
              static_cast<long long>(*r.resume_step));
  std::printf("  lineage:     %zu runs, oldest first\n", lineage->size());
  for (const storage::LineageLink& link : *lineage) {
    const std::string first = link.resumed_at ? std::to_string(*link.resumed_at + 1) : "";
    std::string kept = link.kept_until
                           ? (first.empty() ? "steps up to " : "steps " + first + " to ") +
                                 std::to_string(*link.kept_until)
                           : "steps from " + first;
    if (link.kept_until && link.last_step && *link.last_step > *link.kept_until)
      kept += ", steps " + std::to_string(*link.kept_until + 1) + " to " +
              std::to_string(*link.last_step) + " discarded";
    std::printf("    run %lld ('%s'): %s\n", static_cast<long long>(link.run_id), link.name.c_str(),
                kept.c_str());
  }
  return Status::ok();
}

int list_command(const Subcommand& self, const std::vector<std::string>& args) {
  storage::RunFilter filter;
  filter.with_config = false;  // the table shows none of it
  std::string status;
  Invocation in;
  if (auto stop = parse_invocation(
          self, args,
          {{"name", "only runs whose name contains this", &filter.name_contains},
           {"tag", "only runs with this tag", &filter.tag},
           {"status", "created | running | finished | failed | killed | crashed", &status}},
          &in)) {
    return *stop;
  }
  if (!status.empty()) {
    filter.status = storage::parse_run_status(status);
    if (!filter.status) return usage_error(self, "--status '" + status + "' is not a run status");
  }
  if (!in.positional.empty()) return usage_error(self, "list takes no RUN");
  std::error_code ec;
  if (in.db == default_run_db() && !std::filesystem::exists(in.db, ec)) {
    // A new machine: nothing recorded yet is not an error, and nothing is created.
    std::printf("no runs recorded yet: `lattice train` records its runs into %s\n", in.db.c_str());
    return 0;
  }
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs(filter);
  if (!runs) return fail(self, runs.status().message());
  std::printf("%5s  %-32s %-9s %7s %12s %12s  %-19s %-10s %s\n", "id", "name", "status", "step",
              "lm loss", "tokens/s", "started", "from", "tags");
  for (const storage::RunInfo& r : *runs) {
    std::printf("%5lld  %-32s %-9s %7s %12s %12s  %-19s %-10s %s\n", static_cast<long long>(r.id),
                r.name.c_str(), storage::run_status_name(r.status),
                r.latest_step ? std::to_string(*r.latest_step).c_str() : "-",
                latest(r, "lm loss", "%.4f").c_str(),
                latest(r, "tokens per second", "%.1f").c_str(),
                r.started_at ? when(*r.started_at).c_str() : "-", resumed_text(r).c_str(),
                joined(r.tags, ",").c_str());
  }
  return 0;
}

int show_command(const Subcommand& self, const std::vector<std::string>& args) {
  Invocation in;
  if (auto stop = parse_invocation(self, args, {}, &in)) return *stop;
  if (in.positional.size() != 1) return usage_error(self, "show expects one RUN");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  Result<storage::RunInfo> run = resolve_run(**store, in.positional[0], in.db);
  if (!run) return fail(self, run.status().message());
  Result<std::int64_t> steps = (*store)->logged_steps(run->id);
  if (!steps) return fail(self, steps.status().message());
  const storage::RunInfo& r = *run;
  std::printf(
      "run %lld: %s\n  status:      %s%s%s\n  host:        %s\n  command:     %s\n"
      "  layout:      tp %d, pp %d, dp %d (world size %d)\n  parameters:  %lld\n"
      "  tags:        %s\n  steps:       %lld logged\n  created:     %s\n",
      static_cast<long long>(r.id), r.name.c_str(), storage::run_status_name(r.status),
      r.error.empty() ? "" : " - ", r.error.c_str(), r.host.c_str(), r.command_line.c_str(),
      r.layout.tp, r.layout.pp, r.layout.dp, r.world_size,
      static_cast<long long>(r.parameter_count),
      r.tags.empty() ? "-" : joined(r.tags, ", ").c_str(), static_cast<long long>(*steps),
      when(r.created_at).c_str());
  if (r.ended_at) std::printf("  ended:       %s\n", when(*r.ended_at).c_str());
  if (Status s = print_lineage(**store, r); !s) return fail(self, s.message());
  std::printf("  latest metrics (step %s):\n",
              r.latest_step ? std::to_string(*r.latest_step).c_str() : "-");
  for (const auto& [key, value] : r.latest) std::printf("    %-26s %.6g\n", key.c_str(), value);
  print_estimates(**store, r);
  print_system(**store, r);
  print_instability(**store, r);
  std::printf("  config: %s\n", r.config_json.c_str());
  return 0;
}

int tag_command(const Subcommand& self, const std::vector<std::string>& args) {
  bool remove = false;
  Invocation in;
  if (auto stop = parse_invocation(
          self, args, {{"remove", "remove the tags instead of adding them", &remove}}, &in)) {
    return *stop;
  }
  if (in.positional.size() < 2) return usage_error(self, "tag expects a RUN and at least one TAG");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  Result<storage::RunInfo> run = resolve_run(**store, in.positional[0], in.db);
  if (!run) return fail(self, run.status().message());
  const std::vector<std::string> tags(in.positional.begin() + 1, in.positional.end());
  const Status changed =
      remove ? (*store)->remove_tags(run->id, tags) : (*store)->add_tags(run->id, tags);
  if (!changed) return fail(self, changed.message());
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs();
  if (!runs) return fail(self, runs.status().message());
  for (const storage::RunInfo& r : *runs) {
    if (r.id != run->id) continue;
    std::printf("%s tags: %s\n", describe(r).c_str(),
                r.tags.empty() ? "(none)" : joined(r.tags, ", ").c_str());
  }
  return 0;
}

int rename_command(const Subcommand& self, const std::vector<std::string>& args) {
  Invocation in;
  if (auto stop = parse_invocation(self, args, {}, &in)) return *stop;
  if (in.positional.size() != 2) return usage_error(self, "rename expects a RUN and a NEWNAME");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  Result<storage::RunInfo> run = resolve_run(**store, in.positional[0], in.db);
  if (!run) return fail(self, run.status().message());
  if (Status s = (*store)->rename_run(run->id, in.positional[1]); !s)
    return fail(self, s.message());
  std::printf("renamed run %lld from '%s' to '%s'\n", static_cast<long long>(run->id),
              run->name.c_str(), in.positional[1].c_str());
  return 0;
}

bool confirmed(const std::string& question) {
  std::cerr << question << " [y/N] " << std::flush;
  std::string answer;
  if (!std::getline(std::cin, answer)) return false;
  std::transform(answer.begin(), answer.end(), answer.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return answer == "y" || answer == "yes";
}

int delete_command(const Subcommand& self, const std::vector<std::string>& args) {
  bool yes = false;
  Invocation in;
  if (auto stop = parse_invocation(self, args, {{"yes", "delete without asking", &yes}}, &in)) {
    return *stop;
  }
  if (in.positional.empty()) return usage_error(self, "delete expects at least one RUN");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db);
  if (!store) return fail(self, store.status().message());
  // Every RUN is resolved before anything is deleted: one unknown name deletes nothing.
  std::vector<std::pair<storage::RunInfo, std::int64_t>> doomed;  // run, steps logged
  for (const std::string& name : in.positional) {
    Result<storage::RunInfo> run = resolve_run(**store, name, in.db);
    if (!run) return fail(self, run.status().message());
    if (std::any_of(doomed.begin(), doomed.end(),
                    [&](const auto& d) { return d.first.id == run->id; })) {
      continue;
    }
    Result<std::int64_t> steps = (*store)->logged_steps(run->id);
    if (!steps) return fail(self, steps.status().message());
    doomed.emplace_back(*run, *steps);
  }
  if (!yes && !isatty(STDIN_FILENO)) {
    std::string what;
    for (const auto& [run, steps] : doomed) {
      what += (what.empty() ? "" : ", ") + describe(run) + " with " + steps_text(steps);
    }
    return fail(self, "not deleting " + what +
                          ": standard input is not a terminal to ask on; pass --yes to delete "
                          "without asking");
  }
  int failures = 0;
  for (const auto& [run, steps] : doomed) {
    const std::string what = describe(run) + " (" + steps_text(steps) + ")";
    if (!yes && !confirmed("delete " + what + "?")) {
      std::printf("kept %s\n", what.c_str());
      continue;
    }
    if (Status s = (*store)->delete_run(run.id); !s) {
      fail(self, s.message());
      ++failures;
      continue;
    }
    std::printf("deleted %s\n", what.c_str());
  }
  return failures ? 1 : 0;
}

constexpr Subcommand kSubcommands[] = {
    {"list", "list [--name S] [--tag T] [--status S]", "runs with their latest metrics",
     "Lists the runs, oldest first, with their latest step, loss and throughput, and for a run\n"
     "resumed from a checkpoint of another (`lattice train --load`) that run's id and the\n"
     "step (from: 3@200). A running run whose heartbeat is over a minute old is shown as crashed.",
     list_command},
    {"show", "show RUN", "one run in full",
     "Shows one run: status, host, command line, layout, tags, how many steps it logged, the\n"
     "run it resumed from and at which step, with its whole lineage (each run's kept steps and\n"
     "the discarded tail the next one did again), its latest metrics, each rank's planned memory "
     "per category (`lattice plan`'s estimate for\n"
     "the run's configuration and layout) against its measured peak, with the gaps over 10 %\n"
     "and 4 MiB named; with a pipeline, each stage's measured bubble (wait / compute per\n"
     "recorded iteration) beside the analytic (p-1)/(v m); the slow ranks (compute over 1.5x\n"
     "their stage peers'), the stage the others wait on and, for a failed run, the rank the\n"
     "others waited for; and its full configuration.",
     show_command},
    {"export", "export RUN --format csv|json [--output FILE]",
     "every logged step, validation point and memory sample",
     "Writes everything the run logged to FILE, or to standard output.\n"
     "  csv:  one row per step; a column per metric key (validation losses included), then one\n"
     "        per rank and memory category in bytes. An empty cell is a key not logged then.\n"
     "  json: the run record with its configuration, every series as steps and values, the\n"
     "        memory samples per rank and the checkpoints.",
     export_command},
    {"compare", "compare RUN RUN...", "the settings that differ, final metrics side by side",
     "Compares the configurations of two or more runs and prints the settings that differ,\n"
     "then every run's final (latest) metrics side by side.",
     compare_command},
    {"import", "import PATH... [--db DB]", "merge another run database's runs into this one",
     "Copies every run of each PATH (a cluster job's runs.sqlite, another machine's history)\n"
     "into the run database with everything it logged: metrics, memory, timeline, log events,\n"
     "checkpoints, tags and configuration. Importing the same file again keeps one copy of\n"
     "each run, and updates a copy whose run progressed since (more steps, a new status). A\n"
     "run whose name is taken here is imported as 'name (2)'. PATH is only read.",
     import_command},
    {"tag", "tag RUN TAG... [--remove]", "add tags to a run (or remove them)",
     "Adds the tags to the run (tags it already has are kept once), or with --remove takes\n"
     "them off. Prints the run's tags afterwards.",
     tag_command},
    {"rename", "rename RUN NEWNAME", "give a run another (unique) name",
     "Renames the run. Names are unique in a database: a name another run has is refused.",
     rename_command},
    {"delete", "delete RUN... [--yes]", "delete runs and everything they logged",
     "Deletes each run with every row it logged (metrics, memory, timeline, logs, checkpoint\n"
     "records), one transaction per run. Asks for each run on a terminal; without a terminal\n"
     "(a script) it refuses unless --yes is given. A run that is still running is refused.",
     delete_command},
};

void print_usage(std::ostream& out) {
  out << "usage: lattice runs <command> [flags]\n\ncommands:\n";
  for (const Subcommand& c : kSubcommands) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-46s %s\n", c.usage, c.summary);
    out << line;
  }
  out << "\nRUN is a run's id or its unique name (`lattice runs list` shows both). Every command\n"
         "takes --db PATH (default $LATTICE_DATA_DIR/runs.sqlite); `lattice runs COMMAND --help`\n"
         "describes one command.\n";
}

}  // namespace
}  // namespace runs

int runs_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    runs::print_usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  for (const runs::Subcommand& c : runs::kSubcommands) {
    if (args[0] == c.name) return c.run(c, std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::cerr << "lattice runs: unknown command '" << args[0] << "'\n";
  runs::print_usage(std::cerr);
  return 2;
}

}  // namespace lattice::cli
