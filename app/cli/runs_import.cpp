// lattice runs import: another run database (a cluster job's runs.sqlite) merged into this
// one through RunStore::import_runs, which keeps it idempotent.
#include <cstdio>

#include "runs_subcommands.h"

namespace lattice::cli::runs {

int import_command(const Subcommand& self, const std::vector<std::string>& args) {
  Invocation in;
  if (auto stop = parse_invocation(self, args, {}, &in)) return *stop;
  if (in.positional.empty()) return usage_error(self, "import expects at least one PATH");
  Result<std::unique_ptr<storage::RunStore>> store = open_store(in.db, /*create=*/true);
  if (!store) return fail(self, store.status().message());
  int failures = 0;
  for (const std::string& path : in.positional) {
    Result<storage::ImportReport> r = (*store)->import_runs(path);
    if (!r) {
      fail(self, r.status().message());
      ++failures;
      continue;
    }
    std::printf("%s: %d added, %d updated, %d unchanged\n", path.c_str(), r->added, r->updated,
                r->unchanged);
    for (const std::string& renamed : r->renamed)
      std::printf("  imported %s (the name is taken here)\n", renamed.c_str());
  }
  return failures ? 1 : 0;
}

}  // namespace lattice::cli::runs
