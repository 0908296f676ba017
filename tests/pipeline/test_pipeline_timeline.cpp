// The pipeline timeline as the Studio reads it back from the run store
// (docs/design-notes.md#pipeline-timeline): on every reported iteration each rank's forward and
// backward boxes per micro-batch and virtual stage, in the order of the repository's schedule
// (1F1B, interleaved 1F1B, gradient accumulation), never overlapping on one rank, and causal
// across stages on the shared clock of one machine; plus the optimizer step.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <algorithm>
#include <map>
#include <tuple>

#include "common/process.h"
#include "lattice/storage/run_store.h"
#include "pipeline/schedule.h"

using lattice::storage::TimelineEvent;

namespace {

using lattice::testing::Run;

// Micro batch 1, so --global-batch-size is the number of micro-batches (DP 1).
const QStringList kModel = {"--mock-data", "--hidden-size",      "32", "--num-attention-heads",
                            "2",           "--seq-length",       "16", "--vocab-size",
                            "127",         "--micro-batch-size", "1",  "--eval-iters",
                            "0",           "--threads",          "1"};

QString joined(const std::vector<int64_t>& steps) {
  QStringList words;
  for (int64_t s : steps) words << QString::number(s);
  return words.join(' ');
}

bool is_compute(const TimelineEvent& e) {
  return e.kind == "forward" || e.kind == "backward";
}

QString describe(const TimelineEvent& e) {
  return QString("rank %1 %2 stage %3 micro-batch %4 [%5, %6] s")
      .arg(e.rank)
      .arg(e.kind.c_str())
      .arg(e.stage)
      .arg(e.microbatch)
      .arg(e.start_s, 0, 'g', 9)
      .arg(e.end_s, 0, 'g', 9);
}

}  // namespace

class PipelineTimeline : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Trains run `name` (ranks 1: without mpirun) and returns its timeline steps; QVERIFY-style
  // failures leave `steps` empty.
  void train(const QString& name, int ranks, const QStringList& flags,
             std::vector<int64_t>& steps) {
    const QStringList args = QStringList{"train"} + kModel + flags +
                             QStringList{"--db", dir_.filePath("runs.sqlite"), "--run-name", name};
    Run r;
    if (ranks == 1) {
      r = lattice::testing::run_process(LATTICE_CLI_PATH, args);
    } else {
#ifdef LATTICE_MPIEXEC
      r = lattice::testing::run_lattice(ranks, args);
#endif
    }
    QVERIFY2(r.exit_code == 0,
             qPrintable(
                 QString("%1 failed (%2):\n%3\n%4").arg(name).arg(r.exit_code).arg(r.out, r.err)));
    auto store = lattice::storage::RunStore::open(dir_.filePath("runs.sqlite").toStdString());
    QVERIFY2(store, store.status().message().c_str());
    auto run = (*store)->find_run(name.toStdString());
    QVERIFY2(run, run.status().message().c_str());
    auto found = (*store)->timeline_steps(run->id);
    QVERIFY2(found, found.status().message().c_str());
    steps = *found;
  }

  std::vector<TimelineEvent> timeline(const QString& name, int64_t step) {
    auto store = lattice::storage::RunStore::open(dir_.filePath("runs.sqlite").toStdString());
    if (!store) return {};
    auto run = (*store)->find_run(name.toStdString());
    if (!run) return {};
    auto events = (*store)->timeline(run->id, step);
    return events ? *events : std::vector<TimelineEvent>{};
  }

  // What every layout must satisfy, for `ranks` pipeline ranks of `chunks` model chunks over
  // `micro_batches`: each virtual stage has one forward and one backward box per micro-batch
  // on the rank that holds it; each rank ran its boxes in pipeline_schedule's order without
  // overlap and ends with one optimizer box; forward of stage s+1 starts after forward of s
  // ends, backward of s starts after backward of s+1 ends (one machine: one clock).
  void check_step(const std::vector<TimelineEvent>& events, int ranks, int chunks,
                  int micro_batches, const QString& where) {
    QVERIFY2(!events.empty(), qPrintable(where + ": no timeline events"));
    std::map<std::tuple<std::string, int, int>, TimelineEvent> box;  // (kind, stage, mb)
    std::map<int, std::vector<TimelineEvent>> by_rank;
    for (const TimelineEvent& e : events) {
      QVERIFY2(e.rank >= 0 && e.rank < ranks, qPrintable(where + ": " + describe(e)));
      QVERIFY2(e.start_s >= 0 && e.end_s >= e.start_s,
               qPrintable(where + ": box with negative time or length: " + describe(e)));
      by_rank[e.rank].push_back(e);
      if (!is_compute(e)) continue;
      QVERIFY2(e.stage % ranks == e.rank && e.stage < ranks * chunks,
               qPrintable(where + ": stage not held by its rank: " + describe(e)));
      QVERIFY2(e.microbatch >= 0 && e.microbatch < micro_batches,
               qPrintable(where + ": " + describe(e)));
      QVERIFY2(box.emplace(std::make_tuple(e.kind, e.stage, e.microbatch), e).second,
               qPrintable(where + ": two boxes for " + describe(e)));
    }
    QCOMPARE(static_cast<int>(box.size()), 2 * ranks * chunks * micro_batches);
    QCOMPARE(static_cast<int>(by_rank.size()), ranks);

    for (auto& [rank, list] : by_rank) {
      std::stable_sort(
          list.begin(), list.end(),
          [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_s < b.start_s; });
      std::string order;
      int optimizer = 0;
      for (size_t i = 0; i < list.size(); i++) {
        const TimelineEvent& e = list[i];
        if (i > 0)
          QVERIFY2(e.start_s >= list[i - 1].end_s,
                   qPrintable(QString("%1: boxes overlap: %2 and %3")
                                  .arg(where, describe(list[i - 1]), describe(e))));
        if (e.kind == "optimizer") {
          optimizer++;
          QCOMPARE(e.microbatch, -1);
        }
        if (!is_compute(e)) continue;
        if (!order.empty()) order += ' ';
        order += e.kind == "forward" ? 'F' : 'B';
        order += std::to_string(e.stage / ranks) + '.' + std::to_string(e.microbatch);
      }
      const std::string want =
          lattice::schedule_string(lattice::pipeline_schedule(ranks, rank, chunks, micro_batches));
      QVERIFY2(order == want, qPrintable(QString("%1: rank %2 ran %3, schedule says %4")
                                             .arg(where)
                                             .arg(rank)
                                             .arg(order.c_str(), want.c_str())));
      QVERIFY2(
          optimizer == 1,
          qPrintable(
              QString("%1: rank %2 has %3 optimizer boxes").arg(where).arg(rank).arg(optimizer)));
      QVERIFY2(list.back().kind != "forward" && list.back().kind != "backward",
               qPrintable(where + ": the optimizer step is not after the last backward"));
    }

    const int last = ranks * chunks - 1;
    for (int s = 0; s < last; s++)
      for (int mb = 0; mb < micro_batches; mb++) {
        const TimelineEvent& f0 = box.at({"forward", s, mb});
        const TimelineEvent& f1 = box.at({"forward", s + 1, mb});
        QVERIFY2(f1.start_s >= f0.end_s, qPrintable(where + ": " + describe(f1) +
                                                    " starts before " + describe(f0) + " ends"));
        const TimelineEvent& b1 = box.at({"backward", s + 1, mb});
        const TimelineEvent& b0 = box.at({"backward", s, mb});
        QVERIFY2(b0.start_s >= b1.end_s, qPrintable(where + ": " + describe(b0) +
                                                    " starts before " + describe(b1) + " ends"));
      }
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
  }

  // 2 ranks, PP 2, 4 micro-batches: Megatron's 1F1B on both stages, on every reported step.
  void one_f_one_b_on_two_stages() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#endif
    std::vector<int64_t> steps;
    train("pp2", 2,
          {"--num-layers", "2", "--pipeline-model-parallel-size", "2", "--global-batch-size", "4",
           "--train-iters", "2", "--log-interval", "1"},
          steps);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(joined(steps), QString("1 2"));
    for (int64_t step : steps) {
      const std::vector<TimelineEvent> events = timeline("pp2", step);
      check_step(events, 2, 1, 4, QString("pp2 step %1").arg(step));
      if (QTest::currentTestFailed()) return;
      // Pinned, whatever the schedule function says: stage 0 warms up one forward.
      std::vector<TimelineEvent> stage0;
      for (const TimelineEvent& e : events)
        if (e.rank == 0 && is_compute(e)) stage0.push_back(e);
      std::stable_sort(stage0.begin(), stage0.end(),
                       [](const auto& a, const auto& b) { return a.start_s < b.start_s; });
      QString order;
      for (const TimelineEvent& e : stage0)
        order += QString("%1%2 ").arg(e.kind == "forward" ? "F" : "B").arg(e.microbatch);
      QCOMPARE(order.trimmed(), QString("F0 F1 B0 F2 B1 F3 B2 B3"));
      // Stage 1 receives every activation and is the only one to wait on forward receives.
      int waits = 0;
      for (const TimelineEvent& e : events)
        if (e.kind == "pipeline wait" && e.rank == 1 && e.microbatch >= 0) waits++;
      QVERIFY2(waits >= 4, qPrintable(QString("stage 1 has %1 pipeline-wait boxes").arg(waits)));
    }
  }

  // Issue 29: the sum of the tied word-embedding gradient over the first and last stage (the
  // embedding group) was boxed and timed as data-parallel communication. It is pipeline-
  // embedding communication: its own box and its own timer, also without any DP.
  void the_tied_embedding_all_reduce_is_embedding_communication() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#endif
    std::vector<int64_t> steps;
    train("embedding", 2,
          {"--num-layers", "2", "--pipeline-model-parallel-size", "2", "--global-batch-size", "2",
           "--train-iters", "2", "--log-interval", "1"},
          steps);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(joined(steps), QString("1 2"));
    for (int64_t step : steps) {
      std::map<std::pair<int, std::string>, int> boxes;  // (rank, kind) -> count
      for (const TimelineEvent& e : timeline("embedding", step)) boxes[{e.rank, e.kind}]++;
      for (int rank : {0, 1}) {
        const int embedding = boxes[std::make_pair(rank, std::string("embedding comm"))];
        const int dp = boxes[std::make_pair(rank, std::string("dp comm"))];
        QVERIFY2(embedding == 1, qPrintable(QString("step %1 rank %2: %3 embedding comm boxes")
                                                .arg(step)
                                                .arg(rank)
                                                .arg(embedding)));
        QVERIFY2(dp == 0, qPrintable(QString("step %1 rank %2: %3 dp comm boxes with DP 1")
                                         .arg(step)
                                         .arg(rank)
                                         .arg(dp)));
      }
    }
    auto store = lattice::storage::RunStore::open(dir_.filePath("runs.sqlite").toStdString());
    QVERIFY(store);
    auto run = (*store)->find_run("embedding");
    QVERIFY(run);
    for (const char* key : {"rank 0 embedding comm time", "rank 1 embedding comm time"}) {
      const auto it = run->latest.find(key);
      QVERIFY2(it != run->latest.end() && it->second > 0, key);
    }
  }

  // PP 2 with 2 virtual stages per rank: four lanes, rank r holding stages r and r + 2.
  void interleaved_has_a_lane_per_virtual_stage() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#endif
    std::vector<int64_t> steps;
    train("interleaved", 2,
          {"--num-layers", "4", "--pipeline-model-parallel-size", "2",
           "--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "4",
           "--train-iters", "1", "--log-interval", "1"},
          steps);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(joined(steps), QString("1"));
    const std::vector<TimelineEvent> events = timeline("interleaved", 1);
    std::map<int, int> forwards;  // stage -> forward boxes
    for (const TimelineEvent& e : events)
      if (e.kind == "forward") forwards[e.stage]++;
    QString lanes;
    for (const auto& [stage, count] : forwards) lanes += QString("%1:%2 ").arg(stage).arg(count);
    QCOMPARE(lanes.trimmed(), QString("0:4 1:4 2:4 3:4"));
    check_step(events, 2, 2, 4, "interleaved step 1");
  }

  // One process: gradient accumulation over 2 micro-batches, recorded after iteration 1 and
  // at every --log-interval (2), not on iteration 3.
  void one_process_accumulates() {
    std::vector<int64_t> steps;
    train("single", 1,
          {"--num-layers", "2", "--global-batch-size", "2", "--train-iters", "3", "--log-interval",
           "2"},
          steps);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(joined(steps), QString("1 2"));
    for (int64_t step : steps) {
      const std::vector<TimelineEvent> events = timeline("single", step);
      std::map<std::string, int> kinds;
      for (const TimelineEvent& e : events) {
        kinds[e.kind]++;
        QCOMPARE(e.rank, 0);
        QCOMPARE(e.stage, 0);
      }
      QCOMPARE(kinds["forward"], 2);
      QCOMPARE(kinds["backward"], 2);
      QCOMPARE(kinds["optimizer"], 1);
      check_step(events, 1, 1, 2, QString("single step %1").arg(step));
    }
  }
};

QTEST_GUILESS_MAIN(PipelineTimeline)
#include "test_pipeline_timeline.moc"
