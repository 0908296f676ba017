// The `lattice runs` subcommands, split over runs_command.cpp (dispatch, list, show, tag,
// rename, delete) and runs_export.cpp (export, compare); the helpers they share. Private to
// app/cli.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattice/flags.h"
#include "lattice/status.h"
#include "lattice/storage/run_store.h"

namespace lattice::cli::runs {

struct Subcommand {
  const char* name;
  const char* usage;    // after "lattice runs "
  const char* summary;  // one line for `lattice runs --help`
  const char* details;  // paragraphs for `lattice runs NAME --help`
  int (*run)(const Subcommand& self, const std::vector<std::string>& args);
};

// What every subcommand gets from its command line.
struct Invocation {
  std::string db;
  std::vector<std::string> positional;
};

// Parses `args` against `flags` plus --db; prints help for --help / -h, or each error.
// Returns an exit code to stop with (0 after help, 2 for bad usage), or nullopt to go on.
std::optional<int> parse_invocation(const Subcommand& command, const std::vector<std::string>& args,
                                    std::vector<FlagSpec> flags, Invocation* out);

// "lattice runs <name>: <message>" on stderr; returns `code`.
int fail(const Subcommand& command, const std::string& message, int code = 1);
// fail() with the command's usage line appended; returns 2.
int usage_error(const Subcommand& command, const std::string& message);

// The store at --db; errors name the flag and the file. A missing file is an error unless
// `create` (import makes the database it merges into; the others only read or edit runs, and
// a typo in --db must not leave an empty database behind).
Result<std::unique_ptr<storage::RunStore>> open_store(const std::string& db, bool create = false);

// The run a RUN argument names (id or unique name); an error says what was looked for and
// how to list the runs.
Result<storage::RunInfo> resolve_run(storage::RunStore& store, const std::string& run,
                                     const std::string& db);

// "run 3 ('gpt-small')"
std::string describe(const storage::RunInfo& run);

int export_command(const Subcommand& self, const std::vector<std::string>& args);
int compare_command(const Subcommand& self, const std::vector<std::string>& args);
// runs_estimate.cpp: `show`'s planned memory against the measured peaks and the measured
// pipeline bubble against (p - 1) / (v m).
void print_estimates(storage::RunStore& store, const storage::RunInfo& run);
// runs_system.cpp: `show`'s CPU use and resident memory per rank (and the GPU's, where recorded).
void print_system(storage::RunStore& store, const storage::RunInfo& run);
// `runs show`: the run's instability events (docs/studio.md "Instability"), when it has any.
void print_instability(storage::RunStore& store, const storage::RunInfo& run);
// runs_import.cpp
int import_command(const Subcommand& self, const std::vector<std::string>& args);

}  // namespace lattice::cli::runs
