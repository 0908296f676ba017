// Pipeline schedules as specifications: every micro-batch's forward and backward appear once
// per chunk in a causal order, 1F1B warms up pp - rank - 1 micro-batches, the interleaved
// order is Megatron's, and no combination of stages, chunks and micro-batches can deadlock
// when sends never block (the executor's rule) — checked by simulating all ranks at once.
#include <QtTest/QtTest>

#include <map>
#include <set>

#include "pipeline/schedule.h"

using lattice::pipeline_schedule;
using lattice::PipelineAction;

namespace {

// Runs every rank's schedule step by step; returns "" or why it cannot finish. F of virtual
// stage s needs s-1's activation of that micro-batch; B of s needs s+1's gradient.
QString simulate(int stages, int chunks, int micro_batches) {
  std::vector<std::vector<PipelineAction>> plan(stages);
  for (int r = 0; r < stages; r++) plan[r] = pipeline_schedule(stages, r, chunks, micro_batches);
  const int last = stages * chunks - 1;
  std::set<std::pair<int, int>> activations, gradients;  // (virtual stage, micro-batch) sent
  std::vector<size_t> next(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < stages; r++) {
      while (next[r] < plan[r].size()) {
        const PipelineAction& a = plan[r][next[r]];
        const int s = a.chunk * stages + r;
        if (a.kind == PipelineAction::kForward) {
          if (s > 0 && !activations.count({s - 1, a.micro_batch})) break;
          activations.insert({s, a.micro_batch});
        } else {
          if (s < last && !gradients.count({s + 1, a.micro_batch})) break;
          if (!activations.count({s, a.micro_batch})) return "backward before forward";
          gradients.insert({s, a.micro_batch});
        }
        next[r]++;
        progress = true;
      }
    }
  }
  for (int r = 0; r < stages; r++)
    if (next[r] < plan[r].size())
      return QString("rank %1 stuck at action %2 (%3)")
          .arg(r)
          .arg(next[r])
          .arg(QString::fromStdString(lattice::schedule_string(plan[r])));
  return "";
}

}  // namespace

class PipelineSchedule : public QObject {
  Q_OBJECT
 private slots:
  void no_pipeline_is_gradient_accumulation() {
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(1, 0, 1, 3))),
             QString("F0.0 B0.0 F0.1 B0.1 F0.2 B0.2"));
  }

  void one_f_one_b_warms_up_by_stage() {
    // 4 stages, 6 micro-batches: rank 0 runs 3 forwards first, the last rank none.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 0, 1, 6))),
             QString("F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5"));
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 3, 1, 6))),
             QString("F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5"));
    // Fewer micro-batches than stages: all forwards, then all backwards.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(4, 0, 1, 2))),
             QString("F0.0 F0.1 B0.0 B0.1"));
  }

  void interleaved_order_is_megatrons() {
    // pp 2, 2 chunks, 4 micro-batches, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards in
    // groups of pp micro-batches per chunk; backwards run the chunks in reverse.
    QCOMPARE(QString::fromStdString(lattice::schedule_string(pipeline_schedule(2, 0, 2, 4))),
             QString("F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 "
                     "B0.2 B0.3"));
  }

  void every_pass_once_forward_first() {
    for (int stages : {1, 2, 3, 4})
      for (int chunks : {1, 2, 3})
        for (int m : {1, 2, 4, 6, 8, 12}) {
          if (stages == 1 && chunks > 1) continue;
          if (chunks > 1 && m % stages != 0) continue;
          for (int r = 0; r < stages; r++) {
            std::map<std::pair<int, int>, int> seen;  // (chunk, mb) -> 1 after F, 2 after B
            for (const PipelineAction& a : pipeline_schedule(stages, r, chunks, m)) {
              int& state = seen[{a.chunk, a.micro_batch}];
              QVERIFY2(state == (a.kind == PipelineAction::kForward ? 0 : 1),
                       qPrintable(QString("pp %1 chunks %2 m %3 rank %4: chunk %5 mb %6 out of "
                                          "order")
                                      .arg(stages)
                                      .arg(chunks)
                                      .arg(m)
                                      .arg(r)
                                      .arg(a.chunk)
                                      .arg(a.micro_batch)));
              state++;
            }
            QCOMPARE(static_cast<int>(seen.size()), chunks * m);
            for (const auto& [key, state] : seen) QCOMPARE(state, 2);
          }
        }
  }

  void no_schedule_deadlocks() {
    for (int stages : {2, 3, 4, 8})
      for (int chunks : {1, 2, 4})
        for (int m : {1, 2, 3, 4, 8, 16}) {
          if (chunks > 1 && m % stages != 0) continue;
          const QString why = simulate(stages, chunks, m);
          QVERIFY2(
              why.isEmpty(),
              qPrintable(
                  QString("pp %1 chunks %2 m %3: %4").arg(stages).arg(chunks).arg(m).arg(why)));
        }
  }

  // chunk_peaks is each chunk's high-water mark of live micro-batches in the schedule itself.
  void chunk_peaks_are_each_chunks_most_in_flight() {
    for (int stages : {1, 2, 3, 4, 8})
      for (int chunks : {1, 2, 3, 4})
        for (int m : {1, 2, 3, 4, 8, 12, 16, 24}) {
          if (chunks > 1 && (m % stages != 0 || stages == 1)) continue;
          for (int r = 0; r < stages; r++) {
            std::vector<int> live(chunks, 0), peak(chunks, 0);
            for (const PipelineAction& a : pipeline_schedule(stages, r, chunks, m)) {
              live[a.chunk] += a.kind == PipelineAction::kForward ? 1 : -1;
              peak[a.chunk] = std::max(peak[a.chunk], live[a.chunk]);
            }
            QVERIFY2(
                lattice::chunk_peaks(stages, r, chunks, m) == peak,
                qPrintable(
                    QString("pp %1 rank %2 chunks %3 m %4").arg(stages).arg(r).arg(chunks).arg(m)));
          }
        }
  }

  void one_f_one_b_bounds_micro_batches_in_flight() {
    // The first stage holds at most pp micro-batches' activations (ARCHITECTURE.md memory).
    for (int stages : {2, 4})
      for (int r = 0; r < stages; r++) {
        int live = 0, peak = 0;
        for (const PipelineAction& a : pipeline_schedule(stages, r, 1, 16)) {
          live += a.kind == PipelineAction::kForward ? 1 : -1;
          peak = std::max(peak, live);
        }
        QCOMPARE(peak, stages - r);
      }
  }
};

QTEST_GUILESS_MAIN(PipelineSchedule)
#include "test_pipeline_schedule.moc"
