// `lattice runs show`: the run's instability events, one line each (iteration, kind, value,
// z-score against the window's mean ± std, what --on-spike did).
#include <cstdio>

#include "lattice/instability.h"
#include "lattice/storage/run_store.h"
#include "runs_subcommands.h"

namespace lattice::cli::runs {

void print_instability(storage::RunStore& store, const storage::RunInfo& run) {
  Result<std::vector<InstabilityEvent>> events = read_instability_events(store, run.id);
  if (!events) {
    std::printf("  instability: unreadable (%s)\n", events.status().message().c_str());
    return;
  }
  if (events->empty()) return;
  std::printf("  instability (%zu events; iteration, kind, value, z against mean ± std, action):\n",
              events->size());
  for (const InstabilityEvent& e : *events) {
    if (e.kind == InstabilityEvent::kNonFinite)
      std::printf("    %6lld  %-28s %-10g %-32s %s\n", static_cast<long long>(e.iteration),
                  instability_kind_name(e.kind), e.value, "-", spike_action_name(e.action));
    else
      std::printf("    %6lld  %-28s %-10.4g z %-8.1f against %.4g ± %.2g (%d)  %s\n",
                  static_cast<long long>(e.iteration), instability_kind_name(e.kind), e.value, e.z,
                  e.mean, e.std, e.window, spike_action_name(e.action));
  }
}

}  // namespace lattice::cli::runs
