// Run-store benchmark: sustained metric rows/s written (one transaction per step) while a
// second connection tails every 50 ms, then the latency of tailing and of a 2000-bucket
// down-sampled query on the resulting database, then the two group-commit writers (log_steps
// of 10 steps, and log_step with the 2 ms commit window lattice train uses). Prints a table;
// not a test.
// Usage: lattice-bench-run-store [db path] [rows, default 10000000] [keys per step, 20]
//        [no-reader]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lattice/storage/run_store.h"

using lattice::storage::RunStore;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5))];
}

[[noreturn]] void die(const lattice::Status& s) {
  std::fprintf(stderr, "bench_run_store: %s\n", s.message().c_str());
  std::exit(1);
}

std::unique_ptr<RunStore> open(const std::string& path) {
  auto store = RunStore::open(path);
  if (!store) die(store.status());
  return std::move(store.value());
}

// A second connection tailing one run's rows every 50 ms on its own thread, as the Studio
// does, recording each poll's latency and the rows it got.
class Tailer {
 public:
  Tailer(const std::string& path, std::int64_t run, bool enabled, std::vector<double>* poll_ms,
         std::int64_t* rows)
      : thread_([=, this] {
          auto store = open(path);
          std::int64_t last = 0;
          while (enabled && !stop_.load()) {
            const auto t0 = Clock::now();
            auto got = store->rows_after(last, run);
            if (!got) die(got.status());
            poll_ms->push_back(ms_since(t0));
            *rows += static_cast<std::int64_t>(got->size());
            if (!got->empty()) last = got->back().id;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~Tailer() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/tmp/lattice-bench-run-store.db";
  const std::int64_t rows = argc > 2 ? std::atoll(argv[2]) : 10'000'000;
  const int keys = argc > 3 ? std::atoi(argv[3]) : 20;
  const bool with_reader = !(argc > 4 && std::string(argv[4]) == "no-reader");
  const std::int64_t steps = rows / keys;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);

  auto writer = open(path);
  lattice::storage::NewRun spec;
  spec.name = "bench";
  const std::int64_t run = writer->create_run(spec).value();
  if (auto s = writer->mark_running(run); !s) die(s);
  std::vector<std::string> names;
  for (int k = 0; k < keys; ++k) names.push_back("metric/key" + std::to_string(k));

  // The tailing reader: a second connection polling every 50 ms, as the Studio does.
  std::vector<double> live_tail_ms;
  std::int64_t live_rows = 0;
  Tailer tailer(path, run, with_reader, &live_tail_ms, &live_rows);

  std::map<std::string, double> values;
  const auto t_write = Clock::now();
  auto t_window = t_write;
  double worst_window_rate = 1e300;
  const std::int64_t window_steps = std::max<std::int64_t>(1, 1'000'000 / keys);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (int k = 0; k < keys; ++k) {
      values[names[k]] = std::sin(0.001 * step + k) + (step % 5000 == 0 ? 10 : 0);
    }
    if (auto s = writer->log_step(run, step, values); !s) die(s);
    if ((step + 1) % window_steps == 0) {
      worst_window_rate =
          std::min(worst_window_rate, window_steps * keys / (ms_since(t_window) / 1e3));
      t_window = Clock::now();
    }
  }
  const double write_s = ms_since(t_write) / 1e3;
  tailer.stop();

  // Tail at rest: the newest step, as a poll right after one log_step would see it.
  auto store = open(path);
  std::int64_t last_id = store->rows_after(0, run, keys).value().back().id;
  for (auto rest = store->rows_after(last_id, run); !rest->empty();) {
    last_id = rest->back().id;
    rest = store->rows_after(last_id, run);
  }
  std::vector<double> tail_ms;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    auto got = store->rows_after(last_id - keys, run);
    tail_ms.push_back(ms_since(t0));
    if (!got || got->size() != static_cast<std::size_t>(keys)) die(got.status());
  }

  // 2000 buckets over one key's full step range (steps points).
  std::vector<double> down_ms;
  std::size_t buckets = 0;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    auto got = store->downsample(run, names[0], 0, steps - 1, 2000);
    down_ms.push_back(ms_since(t0));
    if (!got) die(got.status());
    buckets = got->size();
  }
  const auto t_range = Clock::now();
  const auto range = store->series(run, names[0], steps / 2, steps / 2 + 9999).value();
  const double range_ms = ms_since(t_range);

  // Group commit: the same rows, 10 steps per transaction (log_steps), no reader.
  lattice::storage::NewRun grouped_spec;
  grouped_spec.name = "bench-grouped";
  const std::int64_t grouped = writer->create_run(grouped_spec).value();
  if (auto s = writer->mark_running(grouped); !s) die(s);
  const std::int64_t grouped_steps = std::min<std::int64_t>(steps, 1'000'000 / keys);
  std::vector<lattice::storage::StepRecord> batch(10);
  const auto t_grouped = Clock::now();
  for (std::int64_t step = 0; step < grouped_steps; step += 10) {
    for (int i = 0; i < 10; ++i) {
      batch[i].step = step + i;
      for (int k = 0; k < keys; ++k) batch[i].values[names[k]] = std::sin(0.001 * (step + i) + k);
    }
    if (auto s = writer->log_steps(grouped, batch); !s) die(s);
  }
  const double grouped_s = ms_since(t_grouped) / 1e3;

  // Group commit by time: log_step per step with a 2 ms commit window (as lattice train
  // records), the reader tailing again.
  lattice::storage::NewRun window_spec;
  window_spec.name = "bench-window";
  const std::int64_t windowed = writer->create_run(window_spec).value();
  if (auto s = writer->mark_running(windowed); !s) die(s);
  writer->set_commit_window(std::chrono::milliseconds(2));
  std::vector<double> window_tail_ms;
  std::int64_t window_tail_rows = 0;
  Tailer window_tailer(path, windowed, with_reader, &window_tail_ms, &window_tail_rows);
  const auto t_window_run = Clock::now();
  for (std::int64_t step = 0; step < grouped_steps; ++step) {
    for (int k = 0; k < keys; ++k) values[names[k]] = std::sin(0.001 * step + k);
    if (auto s = writer->log_step(windowed, step, values); !s) die(s);
  }
  if (auto s = writer->flush(); !s) die(s);
  const double window_s = ms_since(t_window_run) / 1e3;
  window_tailer.stop();
  if (with_reader && window_tail_rows % keys != 0) {
    die(lattice::Status::internal("the tailing reader saw a partial step"));
  }

  std::printf("run store benchmark: %lld rows (%lld steps x %d keys), db %s, %.0f MiB\n",
              static_cast<long long>(steps * keys), static_cast<long long>(steps), keys,
              path.c_str(), std::filesystem::file_size(path) / 1048576.0);
  std::printf("| measure | value | target |\n|---|---|---|\n");
  std::printf(
      "| write, sustained (reader tailing every 50 ms) | %.0f rows/s (%.0f steps/s) | "
      ">= 250000 rows/s |\n",
      steps * keys / write_s, steps / write_s);
  if (steps >= window_steps) {
    std::printf("| write, slowest 1M-row window | %.0f rows/s | |\n", worst_window_rate);
  }
  std::printf("| write, 10 steps per transaction (log_steps, %lld rows) | %.0f rows/s | |\n",
              static_cast<long long>(grouped_steps * keys), grouped_steps * keys / grouped_s);
  std::printf(
      "| write, log_step with a 2 ms commit window (%lld rows, reader tailing every 50 ms) | "
      "%.0f rows/s | >= 250000 rows/s |\n",
      static_cast<long long>(grouped_steps * keys), grouped_steps * keys / window_s);
  std::printf(
      "| live tail during writes (%zu polls, %.0f rows/poll) | median %.3f ms, p99 "
      "%.3f ms, max %.3f ms | |\n",
      live_tail_ms.size(), double(live_rows) / std::max<std::size_t>(1, live_tail_ms.size()),
      percentile(live_tail_ms, 0.5), percentile(live_tail_ms, 0.99), percentile(live_tail_ms, 1.0));
  std::printf("| rows after id (newest step, %d rows) | median %.3f ms, p99 %.3f ms | <= 2 ms |\n",
              keys, percentile(tail_ms, 0.5), percentile(tail_ms, 0.99));
  std::printf(
      "| down-sampled, 2000 buckets over %lld points (%zu buckets) | median %.1f ms, "
      "max %.1f ms | <= 50 ms |\n",
      static_cast<long long>(steps), buckets, percentile(down_ms, 0.5), percentile(down_ms, 1.0));
  std::printf("| range of 10000 steps of one key | %.2f ms (%zu points) | |\n", range_ms,
              range.size());
  return 0;
}
