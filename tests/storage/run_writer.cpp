// A writer process for test_run_store: one complete run, as `lattice train`'s rank 0 records
// one (its own process and connection): create it, mark it running, log STEPS steps of two
// keys INTERVAL_MS apart, finish it, close the store and exit 0.
// usage: run_writer DB NAME STEPS INTERVAL_MS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "lattice/storage/run_store.h"

namespace {

int fail(const char* what, const lattice::Status& s) {
  std::fprintf(stderr, "run_writer: %s: %s\n", what, s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DB NAME STEPS INTERVAL_MS\n", argv[0]);
    return 2;
  }
  using lattice::storage::RunStore;
  auto store = RunStore::open(argv[1]);
  if (!store) return fail("open", store.status());
  lattice::storage::NewRun run;
  run.name = argv[2];
  auto id = (*store)->create_run(run);
  if (!id) return fail("create_run", id.status());
  if (auto s = (*store)->mark_running(*id); !s) return fail("mark_running", s);
  const int steps = std::atoi(argv[3]);
  const int interval_ms = std::atoi(argv[4]);
  for (int step = 0; step < steps; step++) {
    // lm loss = step, consumed samples = 8 * step: the test checks the last ones.
    const std::map<std::string, double> values = {{"lm loss", double(step)},
                                                  {"consumed samples", 8.0 * step}};
    if (auto s = (*store)->log_step(*id, step, values); !s) return fail("log_step", s);
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  if (auto s = (*store)->finish(*id, lattice::storage::RunStatus::kFinished); !s)
    return fail("finish", s);
  return 0;
}
