// System metrics (issue 26 item 8, lattice/system_metrics.h): the sampler's readings follow
// what the process does (memory touched, a core kept busy), and a real multi-rank run records
// every rank's CPU use and resident memory, which `lattice runs show` summarizes per rank.
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest/QtTest>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "common/process.h"
#include "core/system_sampler.h"
#include "lattice/storage/run_store.h"

using namespace lattice;

namespace {

constexpr double kMiB = 1024.0 * 1024;

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

class SystemMetricsTest : public QObject {
  Q_OBJECT
 private slots:
  void the_resident_set_grows_by_the_memory_touched() {
    SystemSampler sampler;
    const SystemMetrics before = sampler.sample();
    const size_t bytes = 256u << 20;
    std::vector<char> block(bytes);  // value-initialized: every page written
    std::memset(block.data(), 1, bytes);
    const SystemMetrics after = sampler.sample();
    QVERIFY2(after.rss_bytes - before.rss_bytes > 0.9 * bytes,
             qPrintable(QString("rss %1 MiB -> %2 MiB after touching 256 MiB")
                            .arg(before.rss_bytes / kMiB)
                            .arg(after.rss_bytes / kMiB)));
    QVERIFY2(after.peak_rss_bytes >= after.rss_bytes * 0.99,
             qPrintable(QString("peak %1 MiB under rss %2 MiB")
                            .arg(after.peak_rss_bytes / kMiB)
                            .arg(after.rss_bytes / kMiB)));
    QCOMPARE(block[bytes - 1], char(1));
  }

  void cpu_use_rises_over_a_busy_loop_and_stays_low_over_a_sleep() {
    SystemSampler sampler;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const SystemMetrics asleep = sampler.sample();
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    volatile double sink = 0;
    while (std::chrono::steady_clock::now() < end) sink = sink + 1.0;
    const SystemMetrics busy = sampler.sample();
    // One thread spinning is 100 % of one core on an idle machine; 40 % leaves room for two
    // other busy processes on this 2-core machine.
    QVERIFY2(asleep.cpu_percent >= 0 && asleep.cpu_percent < 10,
             qPrintable(QString("%1 % while asleep").arg(asleep.cpu_percent)));
    QVERIFY2(busy.cpu_percent > 40 && busy.cpu_percent < 110,
             qPrintable(QString("%1 % while spinning one thread").arg(busy.cpu_percent)));
    QVERIFY(busy.cpu_cores >= 1 && busy.cpu_cores <= sysconf(_SC_NPROCESSORS_ONLN));
    QVERIFY(!busy.has_gpu);
  }

  void the_wire_form_round_trips() {
    SystemMetrics m;
    m.cpu_percent = 151.5;
    m.cpu_cores = 6;
    m.rss_bytes = 3e8;
    m.peak_rss_bytes = 4e8;
    m.has_gpu = true;
    m.gpu_utilization = 97;
    m.gpu_memory_used = 7e10;
    m.gpu_power_watts = 612.5;
    m.gpu_temperature_c = 66;
    double wire[kSystemMetricsFields];
    pack_system_metrics(m, wire);
    const SystemMetrics back = unpack_system_metrics(wire);
    QCOMPARE(back.cpu_percent, m.cpu_percent);
    QCOMPARE(back.cpu_cores, m.cpu_cores);
    QCOMPARE(back.rss_bytes, m.rss_bytes);
    QCOMPARE(back.peak_rss_bytes, m.peak_rss_bytes);
    QCOMPARE(back.has_gpu, true);
    QCOMPARE(back.gpu_utilization, m.gpu_utilization);
    QCOMPARE(back.gpu_memory_used, m.gpu_memory_used);
    QCOMPARE(back.gpu_power_watts, m.gpu_power_watts);
    QCOMPARE(back.gpu_temperature_c, m.gpu_temperature_c);
  }

#ifdef LATTICE_MPIEXEC
  void every_rank_of_a_real_run_records_its_cpu_and_memory() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    // DP 2 x PP 2 on 4 ranks, logged every 2 of 6 iterations (and iteration 1).
    const testing::Run run = testing::run_mpi(
        4, LATTICE_CLI_PATH,
        QString("train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                "--seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 8 "
                "--pipeline-model-parallel-size 2 --train-iters 6 --log-interval 2 "
                "--eval-iters 0 --threads 1 --run-name system")
                .split(' ') +
            QStringList{"--db", db});
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    auto store = std::move(storage::RunStore::open(db.toStdString()).value());
    const storage::RunInfo info = store->find_run("system").value();
    const double cores = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
    std::vector<std::vector<double>> cpu_of_rank;
    for (int rank = 0; rank < 4; rank++) {
      const std::string p = "rank " + std::to_string(rank) + " ";
      auto series = [&](const char* key) {
        return store->series(info.id, p + key, 0, std::numeric_limits<int64_t>::max()).value();
      };
      const std::vector<storage::StepValue> cpu = series(kCpuPercentKey), rss = series(kRssKey),
                                            peak = series(kPeakRssKey),
                                            allowed = series(kCpuCoresKey);
      // Reports at iterations 1, 2, 4 and 6.
      QCOMPARE(cpu.size(), size_t{4});
      QCOMPARE(rss.size(), size_t{4});
      QCOMPARE(peak.size(), size_t{4});
      QCOMPARE(allowed.size(), size_t{4});
      for (size_t i = 0; i < cpu.size(); i++) {
        const QString where = QString("rank %1 at step %2").arg(rank).arg(cpu[i].step);
        QVERIFY2(cpu[i].value >= 0 && cpu[i].value <= 100 * cores,
                 qPrintable(where + QString(": cpu %1 %").arg(cpu[i].value)));
        QVERIFY2(rss[i].value > 10 * kMiB && rss[i].value < physical_memory_bytes(),
                 qPrintable(where + QString(": rss %1 MiB").arg(rss[i].value / kMiB)));
        QVERIFY2(peak[i].value >= rss[i].value * 0.99,
                 qPrintable(where + QString(": peak rss %1 MiB under rss %2 MiB")
                                        .arg(peak[i].value / kMiB)
                                        .arg(rss[i].value / kMiB)));
        QVERIFY2(allowed[i].value >= 1 && allowed[i].value <= cores,
                 qPrintable(where + QString(": %1 cores").arg(allowed[i].value)));
      }
      cpu_of_rank.emplace_back();
      for (const storage::StepValue& v : cpu) cpu_of_rank.back().push_back(v.value);
      // A rank that trains uses some CPU over an interval of iterations.
      QVERIFY2(cpu.back().value > 1,
               qPrintable(QString("rank %1: %2 %").arg(rank).arg(cpu.back().value)));
      // No NVML on the CPU engine: no GPU keys.
      QVERIFY(series(kGpuUtilizationKey).empty());
    }
    // Each rank's own readings: four processes' CPU times over four intervals do not agree to
    // the last bit (a gather that copied one rank's record to all would make them equal).
    QVERIFY2(cpu_of_rank[1] != cpu_of_rank[0] || cpu_of_rank[2] != cpu_of_rank[0] ||
                 cpu_of_rank[3] != cpu_of_rank[0],
             "every rank recorded rank 0's CPU readings");
    const testing::Run show =
        testing::run_process(LATTICE_CLI_PATH, {"runs", "show", "system", "--db", db});
    QVERIFY2(show.exit_code == 0, qPrintable(show.err));
    QVERIFY2(show.out.contains("  system (per rank, docs/studio.md \"System metrics\"):\n"),
             qPrintable(show.out));
    for (int rank = 0; rank < 4; rank++) {
      const QRegularExpression line(
          QString(
              "\n +%1 +[0-9.]+ % \\( *[0-9.]+ % of +[0-9]+ cores\\) +[0-9.]+ MiB +[0-9.]+ MiB\n")
              .arg(rank));
      QVERIFY2(line.match(show.out).hasMatch(), qPrintable(show.out));
    }
  }
#endif
};

QTEST_GUILESS_MAIN(SystemMetricsTest)
#include "test_system_metrics.moc"
