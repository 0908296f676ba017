// A writer process for test_studio_dashboard: logs `steps` steps of an existing running run
// into the run store, `interval_ms` apart, as the engine's rank 0 would (its own connection).
// usage: dashboard_writer DB RUN_ID STEPS INTERVAL_MS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lattice/storage/run_store.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DB RUN_ID STEPS INTERVAL_MS\n", argv[0]);
    return 2;
  }
  auto store = lattice::storage::RunStore::open(argv[1]);
  if (!store) {
    std::fprintf(stderr, "%s\n", store.status().message().c_str());
    return 1;
  }
  const std::int64_t run = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  const int interval_ms = std::atoi(argv[4]);
  for (int step = 1; step <= steps; step++) {
    // lm loss = 10 - step / 100: the test checks these exact values.
    const std::map<std::string, double> values = {{"lm loss", 10.0 - step / 100.0},
                                                  {"learning rate", 1e-4},
                                                  {"consumed samples", 8.0 * step}};
    if (auto s = (*store)->log_step(run, step, values); !s) {
      std::fprintf(stderr, "step %d: %s\n", step, s.message().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  return 0;
}
