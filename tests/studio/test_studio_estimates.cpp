// The Dashboard's "Estimate and measurement" page on real `lattice train` runs in a real run
// store (issue 26, items 1 and 4): each rank's planned memory is the Plan view's estimate for the
// run's configuration, drawn beside the measured peaks; a real gap is named in words; a record
// without a configuration says so; and a PP 2 run's measured bubble honours the bound the 1F1B
// schedule's dependencies put on it (Note [pipeline wait] in lattice/run_estimate.h).
#include <qcustomplot.h>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <map>

#include "common/process.h"
#include "dashboard/dashboard_view.h"
#include "dashboard/estimate_charts.h"
#include "dashboard/rank_bars_chart.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/run_estimate.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

constexpr double kMiB = 1024.0 * 1024;

// A tiny model of tens of MiB of activations, which the planner counts to the byte on the CPU
// engine; a record of it whose activations are 30 % over is a gap the card must name.
const QStringList kSizedModel = {"--num-layers",
                                 "2",
                                 "--hidden-size",
                                 "128",
                                 "--num-attention-heads",
                                 "4",
                                 "--seq-length",
                                 "256",
                                 "--max-position-embeddings",
                                 "256",
                                 "--micro-batch-size",
                                 "4"};
// PP 2 with 8 micro-batches per iteration: analytic bubble (2 - 1) / (1 * 8).
const QStringList kPipelineModel = {"--num-layers",
                                    "4",
                                    "--hidden-size",
                                    "64",
                                    "--num-attention-heads",
                                    "4",
                                    "--seq-length",
                                    "64",
                                    "--max-position-embeddings",
                                    "64",
                                    "--micro-batch-size",
                                    "2",
                                    "--global-batch-size",
                                    "16",
                                    "--pipeline-model-parallel-size",
                                    "2"};

QString text_of(const testing::Run& r) {
  return "exit " + QString::number(r.exit_code) + "\n" + r.out + "\n" + r.err;
}

std::vector<std::string> to_std(const QStringList& args) {
  std::vector<std::string> out;
  for (const QString& a : args) out.push_back(a.toStdString());
  return out;
}

double bar_value(QCPBars* bars, int key_index) {
  auto it = bars->data()->constBegin() + key_index;
  return it->value;
}

}  // namespace

class StudioEstimates : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
  }

  // Item 1: the planned bars are estimate_memory of the run's flags for its layout (what the
  // Plan view and `lattice plan` show), the measured bars the run store's peaks. The CPU run
  // holds what the planner counts: the card says they agree. A record of the same configuration
  // whose activations came out 30 % over (as a device allocator's slack would make them) has the
  // gap named with both figures.
  void plannedMemoryIsThePlanViewsEstimateBesideTheMeasuredPeak() {
    testing::Run train = testing::run_process(
        LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--train-iters", "3", "--log-interval", "1",
                    "--threads", "2", "--db", db_, "--run-name", "sized"} +
            kSizedModel);
    QVERIFY2(train.exit_code == 0, qPrintable(text_of(train)));
    auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
    const storage::RunInfo run = store->find_run("sized").value();
    const std::vector<storage::StepMemory> peaks = store->memory_peaks(run.id).value();
    QCOMPARE(peaks.size(), size_t{1});

    TrainOptions options =
        parse_train_options(to_std(QStringList{"--mock-data", "--threads", "2"} + kSizedModel))
            .value();
    const ParallelLayout layout = make_layout(options, 1).value();
    const StageEstimate planned = estimate_memory(options, layout).stages[0];

    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db_);
    view.showRuns({run.id});
    view.setCurrentPage(DashboardView::kEstimatePage);
    EstimateChart* chart = view.estimateChart();
    QTRY_VERIFY_WITH_TIMEOUT(
        !chart->verdict().isEmpty() && chart->plannedBars()[0]->dataCount() == 1, 20000);
    const double plannedBytes[] = {
        double(planned.weight_bytes), double(planned.grad_bytes), double(planned.optimizer_bytes),
        double(planned.activation_bytes),
        double(planned.all_workspace_bytes() + planned.comm_buffer_bytes)};
    const double measuredBytes[] = {double(peaks[0].sample.weights), double(peaks[0].sample.grads),
                                    double(peaks[0].sample.optimizer_state),
                                    double(peaks[0].sample.activations),
                                    double(peaks[0].sample.workspace)};
    for (int k = 0; k < kPlannedCategories; k++) {
      QCOMPARE(bar_value(chart->plannedBars()[k], 0), plannedBytes[k] / kMiB);
      QCOMPARE(bar_value(chart->measuredBars()[k], 0), measuredBytes[k] / kMiB);
    }
    for (int k = 0; k < kPlannedCategories; k++) QCOMPARE(measuredBytes[k], plannedBytes[k]);
    QCOMPARE(chart->verdict(),
             QString("Estimate and measurement agree: no category is off by both 10 % and 4 MiB."));

    std::int64_t over = 0;
    const double activations = std::round(1.3 * plannedBytes[3]);
    {
      storage::NewRun r;
      r.name = "sized-over";
      r.config_json = run.config_json;
      r.layout = run.layout;
      r.world_size = run.world_size;
      over = store->create_run(r).value();
      QVERIFY(store->mark_running(over));
      storage::MemorySample m = peaks[0].sample;
      m.activations = static_cast<std::int64_t>(activations);
      QVERIFY(store->log_step(over, 1, {{"lm loss", 3.0}}, {m}));
      QVERIFY(store->finish(over, storage::RunStatus::kFinished));
    }
    view.showRuns({over});
    QTRY_VERIFY_WITH_TIMEOUT(chart->verdict().startsWith("activations"), 20000);
    QCOMPARE(bar_value(chart->measuredBars()[3], 0), activations / kMiB);
    const double gap = activations - plannedBytes[3];
    const QString sentence =
        QString(
            "activations %1 % %2 the estimate on pp 0 (rank 0: %3 MiB measured, %4 MiB "
            "planned)")
            .arg(std::round(std::abs(gap) / plannedBytes[3] * 100))
            .arg(gap > 0 ? "over" : "under")
            .arg(activations / kMiB, 0, 'f', 1)
            .arg(plannedBytes[3] / kMiB, 0, 'f', 1);
    QCOMPARE(chart->gaps(), QStringList{sentence});
    QVERIFY2(chart->verdict().contains(sentence), qPrintable(chart->verdict()));
  }

  // Item 1: a run record without a configuration (written by another tool) gets no estimate,
  // and the card says why instead of drawing a guess.
  void aRecordWithoutConfigurationSaysSoInsteadOfGuessing() {
    std::int64_t id = 0;
    {
      auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
      storage::NewRun bare;
      bare.name = "bare";
      id = store->create_run(bare).value();
      QVERIFY(store->mark_running(id));
      storage::MemorySample m;
      m.weights = 1 << 20;
      QVERIFY(store->log_step(id, 1, {{"lm loss", 3.0}}, {m}));
      QVERIFY(store->finish(id, storage::RunStatus::kFinished));
    }
    DashboardView view;
    view.setDatabase(db_);
    view.showRuns({id});
    view.setCurrentPage(DashboardView::kEstimatePage);
    QTRY_COMPARE_WITH_TIMEOUT(view.estimateChart()->verdict(),
                              QString("No estimate: the run record holds no configuration."),
                              20000);
    QCOMPARE(view.estimateChart()->plannedBars()[0]->dataCount(), 0);
  }

  // Item 3 in the Dashboard: the phase bars of a DP 2 record whose rank 1 computes twice as
  // long as rank 0 name it under the chart and on its tick, and the rank a failed run's error
  // names as absent is said too (the real slowed run is test_slow_ranks').
  void theSlowRankAndTheAbsentOneAreNamedUnderThePhaseBars() {
    std::int64_t id = 0;
    {
      auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
      storage::NewRun run;
      run.name = "slow rank 1";
      run.layout.dp = 2;
      run.world_size = 2;
      id = store->create_run(run).value();
      QVERIFY(store->mark_running(id));
      QVERIFY(store->log_step(id, 10,
                              {{"lm loss", 3.0},
                               {"rank 0 forward time", 0.040},
                               {"rank 0 backward time", 0.080},
                               {"rank 0 data-parallel comm time", 0.110},
                               {"rank 0 optimizer time", 0.002},
                               {"rank 1 forward time", 0.120},
                               {"rank 1 backward time", 0.130},
                               {"rank 1 data-parallel comm time", 0.001},
                               {"rank 1 optimizer time", 0.002}},
                              {}));
      QVERIFY(store->finish(id, storage::RunStatus::kFailed,
                            "rank 0 waited 3 s (--distributed-timeout-minutes 0.05) in the "
                            "data-parallel all-reduce of iteration 11 for rank 1 (its group: "
                            "data-parallel [0,1]); rank 1 did not arrive and did not answer: it "
                            "has ended (pid 5 on this machine); the job is ended"));
    }
    DashboardView view;
    view.setDatabase(db_);
    view.showRuns({id});
    view.setCurrentPage(DashboardView::kSystemPage);
    RankBarsChart* phases = view.phaseChart();
    QTRY_VERIFY_WITH_TIMEOUT(phases->rankCount() == 2, 20000);
    const QString said = phases->findingsText();
    QVERIFY2(said.startsWith("rank 1 is slow: 252 ms of compute per iteration against 122 ms on "
                             "the 1 other rank of pp 0 (2.1x); its data-parallel peers wait up "
                             "to 110 ms per iteration in the gradient reduction.\n"),
             qPrintable(said));
    QVERIFY2(said.endsWith("rank 1 is the one the others waited for (it did not arrive and did "
                           "not answer: it has ended; the run's error has the communication "
                           "watch's account)."),
             qPrintable(said));
    const QMap<double, QString> ticks =
        static_cast<QCPAxisTickerText*>(phases->plot()->xAxis->ticker().data())->ticks();
    QCOMPARE(ticks.value(1), QString("rank 1 (slow)"));
    QCOMPARE(ticks.value(0), QString("rank 0"));
  }

  // Item 4 on a real PP 2 run (2 ranks on one machine, one steady clock): per recorded
  // iteration, the page shows measure_pipeline_wait's share per stage beside (p-1)/(v m) =
  // 1/8, and each stage's wait is at least what the schedule's dependencies force, computed
  // from the iteration's own boxes:
  //  - pp 1 cannot start before pp 0's forward of micro-batch 0 has ended, and pp 0's last
  //    backward cannot start before pp 1's has ended, so the span holds pp 0's forward of
  //    micro-batch 0 and its backward of the last micro-batch outside pp 1's compute:
  //    wait(pp 1) >= F0(pp 0) + B_last(pp 0).
  //  - between the end of pp 0's forward of micro-batch 0 and the start of its backward, pp 1
  //    ran that micro-batch's forward and backward: wait(pp 0) >= F0(pp 1) + B0(pp 1) - what
  //    pp 0 computed in that interval.
  // Both bounds hold whatever the load, the imbalance between stages or the transfers cost:
  // they only add wait. 1 µs covers the rounding of the seconds stored as doubles.
  void theMeasuredBubbleOfAPp2RunHonoursTheScheduleBound() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    testing::Run train = testing::run_mpi(
        2, LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--train-iters", "12", "--log-interval", "3",
                    "--threads", "1", "--db", db_, "--run-name", "pp2"} +
            kPipelineModel);
    QVERIFY2(train.exit_code == 0, qPrintable(text_of(train)));
    auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
    const storage::RunInfo run = store->find_run("pp2").value();
    const std::vector<std::int64_t> steps = store->timeline_steps(run.id).value();
    QCOMPARE(steps, (std::vector<std::int64_t>{1, 3, 6, 9, 12}));

    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db_);
    view.showRuns({run.id});
    view.setCurrentPage(DashboardView::kEstimatePage);
    BubbleChart* chart = view.bubbleChart();
    QTRY_VERIFY_WITH_TIMEOUT(chart->stageCount() == 2 && chart->shares(1).size() == 5, 20000);
    QCOMPARE(chart->analytic(), 1.0 / 8);
    QVERIFY2(chart->verdict().contains("analytic (p−1)/(v·m) = 1/(1·8) = 12.5 %"),
             qPrintable(chart->verdict()));

    constexpr double kRounding = 1e-6;
    for (size_t i = 0; i < steps.size(); i++) {
      std::vector<TimedBox> boxes;
      std::map<std::tuple<int, std::string, int>, TimedBox> by;  // (pp, kind, micro-batch)
      // Held by name: a range-for over .value() of the temporary Result would read freed memory.
      const auto timeline = store->timeline(run.id, steps[i]);
      for (const storage::TimelineEvent& e : timeline.value()) {
        boxes.push_back({e.rank, e.stage, e.microbatch, e.kind, e.start_s, e.end_s});
        by[{e.rank, e.kind, e.microbatch}] = boxes.back();
      }
      const PipelineWait w = measure_pipeline_wait(1, 2, 1, steps[i], boxes);
      QCOMPARE(w.micro_batches, int64_t{8});
      QCOMPARE(w.stages.size(), size_t{2});
      for (int pp = 0; pp < 2; pp++) {
        QCOMPARE(chart->shares(pp)[int(i)].x(), double(steps[i]));
        QCOMPARE(chart->shares(pp)[int(i)].y(), w.stages[pp].share());
      }
      auto length = [&](int pp, const char* kind, int mb) {
        const TimedBox& b = by.at({pp, kind, mb});
        return b.end - b.start;
      };
      const double last_stage_bound = length(0, "forward", 0) + length(0, "backward", 7);
      QVERIFY2(w.stages[1].wait_s + kRounding >= last_stage_bound,
               qPrintable(QString("iteration %1: pp 1 waited %2 s, its dependencies force %3 s")
                              .arg(steps[i])
                              .arg(w.stages[1].wait_s)
                              .arg(last_stage_bound)));
      const double from = by.at({0, "forward", 0}).end, to = by.at({0, "backward", 0}).start;
      double inside = 0;
      for (const TimedBox& b : boxes)
        if (b.rank == 0 && (b.kind == "forward" || b.kind == "backward"))
          inside += std::max(0.0, std::min(b.end, to) - std::max(b.start, from));
      const double first_stage_bound = length(1, "forward", 0) + length(1, "backward", 0) - inside;
      QVERIFY2(w.stages[0].wait_s + kRounding >= first_stage_bound,
               qPrintable(QString("iteration %1: pp 0 waited %2 s, its dependencies force %3 s")
                              .arg(steps[i])
                              .arg(w.stages[0].wait_s)
                              .arg(first_stage_bound)));
      qInfo(
          "iteration %lld: pp 0 %.1f %%, pp 1 %.1f %% (bounds %.1f %%, %.1f %%), analytic %.1f %%",
          static_cast<long long>(steps[i]), w.stages[0].share() * 100, w.stages[1].share() * 100,
          first_stage_bound / w.stages[0].compute_s * 100,
          last_stage_bound / w.stages[1].compute_s * 100, w.analytic * 100);
    }
#endif
  }

  // Note [pipeline wait] on the ideal schedule: equal stages (forward 1, backward 1), free
  // transfers, p 2, m 4. Each stage computes 8 and idles 2 of the span of 10: exactly
  // (p - 1) / m = 25 %, the analytic figure, for both stages.
  void theIdealScheduleMeasuresExactlyTheAnalyticBubble() {
    auto box = [](int rank, const char* kind, int mb, double start) {
      return TimedBox{rank, rank, mb, kind, start, start + 1};
    };
    const std::vector<TimedBox> boxes = {
        box(0, "forward", 0, 0),  box(0, "forward", 1, 1),  box(0, "backward", 0, 3),
        box(0, "forward", 2, 4),  box(0, "backward", 1, 5), box(0, "forward", 3, 6),
        box(0, "backward", 2, 7), box(0, "backward", 3, 9), box(1, "pipeline wait", -1, 0),
        box(1, "forward", 0, 1),  box(1, "backward", 0, 2), box(1, "forward", 1, 3),
        box(1, "backward", 1, 4), box(1, "forward", 2, 5),  box(1, "backward", 2, 6),
        box(1, "forward", 3, 7),  box(1, "backward", 3, 8)};
    const PipelineWait w = measure_pipeline_wait(1, 2, 1, 1, boxes);
    QCOMPARE(w.micro_batches, int64_t{4});
    QCOMPARE(w.span_s, 10.0);
    QCOMPARE(w.analytic, 0.25);
    for (const StageWait& s : w.stages) {
      QCOMPARE(s.compute_s, 8.0);
      QCOMPARE(s.share(), 0.25);
    }
    QCOMPARE(w.stages[1].recorded_wait_s, 1.0);  // the rest of pp 1's wait is after its last box
  }
};

QTEST_MAIN(StudioEstimates)
#include "test_studio_estimates.moc"
