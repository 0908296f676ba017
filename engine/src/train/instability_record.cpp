// read_instability_events: a run's instability events read back from the run store
// (lattice/instability.h).
#include <limits>

#include "lattice/instability.h"
#include "lattice/storage/run_store.h"

namespace lattice {

Result<std::vector<InstabilityEvent>> read_instability_events(storage::RunStore& store,
                                                              int64_t run_id) {
  std::map<std::string, std::vector<std::pair<int64_t, double>>> series;
  for (const std::string& key : instability_keys()) {
    Result<std::vector<storage::StepValue>> points =
        store.series(run_id, key, 0, std::numeric_limits<int64_t>::max());
    if (!points) return points.status();
    for (const storage::StepValue& p : *points) series[key].push_back({p.step, p.value});
  }
  return instability_events(series);
}

}  // namespace lattice
