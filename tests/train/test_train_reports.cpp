// What `lattice train` reports about its own speed, on one rank and (with MPI) two: each
// rank's time per phase is per iteration (the mean since the previous report, as Megatron's
// --timing-log-level), on the console and in the run store, so that the phases of one rank fit
// inside one iteration; and the done line's share of the measured SGEMM peak divides one rank's
// rate by one rank's peak; a vision-language run with its language model frozen and a LoRA run
// count the FLOPs the planner counts (the tower's and the adapters' added, the frozen weights'
// gradients not); a run without a peak (CPU bf16) claims none.
#include <QtTest/QtTest>

#include <QRegularExpression>
#include <QTemporaryDir>
#include <QThread>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/tiny_model.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/layout.h"
#include "lattice/model_config.h"
#include "lattice/plan.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"

namespace {

using lattice::testing::Run;

// Reports at iterations 1, 5 and 10: the one at 10 covers iterations 6..10 exactly as the
// progress line at 10 does, so their times compare one to one. The validation after iteration
// 5 (20 forward-only batches, most of a step's time per iteration of the interval) falls in
// that interval too and must not count as a phase of it.
const QStringList kRun =
    QString(
        "train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 64 --vocab-size 255 --micro-batch-size 2 --global-batch-size 8 "
        "--train-iters 10 --log-interval 5 --eval-iters 20 --eval-interval 5 --threads 1 "
        "--timing-log-level 1")
        .split(' ');
constexpr int kIterations = 10, kReportedFrom = 6;

// A two-step run of a small model on one thread, for the done line's FLOPs.
const std::vector<std::string> kSmall = {
    "--mock-data", "--num-layers",        "2",  "--hidden-size", "64",  "--num-attention-heads",
    "4",           "--seq-length",        "64", "--vocab-size",  "255", "--micro-batch-size",
    "2",           "--global-batch-size", "4",  "--train-iters", "4",   "--eval-iters",
    "0",           "--threads",           "1"};

// One rank's phases fit in its iterations, and only rank 0 times them: the other ranks start
// an iteration when they leave the previous one's last collective, up to a descheduled rank's
// delay apart on a loaded machine, and the printed figures are rounded to 0.1 ms. 25 % and
// 0.5 ms cover both, well below the factor of 5 of an interval's sum or the ~1.8 of counting
// the validation.
constexpr double kSlack = 1.25, kSlackMs = 0.5;

double number(const QString& text, const QString& pattern) {
  const QRegularExpressionMatch m = QRegularExpression(pattern).match(text);
  return m.hasMatch() ? m.captured(1).toDouble() : -1;
}

// The phase times of `rank` on the console at the last log line, summed (ms): forward,
// backward, pipeline wait, embedding comm, data-parallel comm, optimizer (tp-comm is part of
// the first two).
double console_phase_sum(const QString& out, int rank) {
  const QRegularExpression line(QString(R"(\[Rank %1\] [^\n]* times \(ms\)([^\n]*))").arg(rank));
  QString last;
  for (auto it = line.globalMatch(out); it.hasNext();) last = it.next().captured(1);
  if (last.isEmpty()) return -1;
  double sum = 0;
  for (const char* phase :
       {"forward", "backward", "pipeline-wait", "embedding-comm", "dp-comm", "optimizer"}) {
    const double v = number(last, QString(R"(\| %1: ([0-9.]+) )").arg(phase));
    if (v < 0) return -1;
    sum += v;
  }
  return sum;
}

}  // namespace

class TrainReports : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Runs kRun on `ranks` ranks into its own database and checks the phase times and the done
  // line against the run's own step times.
  void check(int ranks) {
    const QString db = dir_.filePath(QString("runs-%1.sqlite").arg(ranks));
    const QStringList args = kRun + QStringList{"--db", db, "--run-name", "reported"};
    const Run r = lattice::testing::run_lattice(ranks, args);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));

    // Console: the progress line at iteration 10 gives the mean iteration time over 6..10.
    const double iteration_ms =
        number(r.out, QString(R"(iteration +%1/ *%1 \|[^\n]*elapsed time per iteration \(ms\): )"
                              R"(([0-9.]+))")
                          .arg(kIterations));
    QVERIFY2(iteration_ms > 0, qPrintable(r.out));
    for (int rank = 0; rank < ranks; rank++) {
      const double phases_ms = console_phase_sum(r.out, rank);
      QVERIFY2(phases_ms >= 0, qPrintable(r.out));
      QVERIFY2(phases_ms <= kSlack * iteration_ms + kSlackMs && phases_ms >= 0.3 * iteration_ms,
               qPrintable(QString("console, rank %1: phases sum to %2 ms per iteration, an "
                                  "iteration takes %3 ms")
                              .arg(rank)
                              .arg(phases_ms)
                              .arg(iteration_ms)));
    }

    // Run store: the same report, in seconds, against the recorded step times of 6..10.
    auto store = lattice::storage::RunStore::open(db.toStdString());
    QVERIFY2(store, store.status().message().c_str());
    auto run = (*store)->find_run("reported");
    QVERIFY2(run, run.status().message().c_str());
    auto steps = (*store)->series(run->id, "step time", kReportedFrom, kIterations);
    QVERIFY2(steps && steps->size() == kIterations - kReportedFrom + 1, "step times 6..10");
    double step_s = 0;
    for (const auto& p : *steps) step_s += p.value / steps->size();
    for (int rank = 0; rank < ranks; rank++) {
      double phases_s = 0;
      for (const char* key : {"forward time", "backward time", "pipeline wait time",
                              "data-parallel comm time", "optimizer time"}) {
        const std::string name = "rank " + std::to_string(rank) + " " + key;
        auto points = (*store)->series(run->id, name, kIterations, kIterations);
        QVERIFY2(points && points->size() == 1, name.c_str());
        phases_s += points->front().value;
      }
      QVERIFY2(phases_s <= kSlack * step_s && phases_s >= 0.3 * step_s,
               qPrintable(QString("run store, rank %1: phases sum to %2 s per iteration at step "
                                  "%3, an iteration takes %4 s")
                              .arg(rank)
                              .arg(phases_s)
                              .arg(kIterations)
                              .arg(step_s)));
    }

    // The done line: one rank's GFLOP/s is the job's model FLOPs rate (its tokens/s times
    // Megatron's FLOPs per token) over the ranks, and its share is that over the peak, which
    // each rank measured on its own threads.
    const QRegularExpressionMatch done =
        QRegularExpression(R"(done: [^\n]* s; ([0-9.]+) tokens/s, ([0-9.]+) GFLOP/s per rank = )"
                           R"(([0-9.]+)% of the measured SGEMM peak)")
            .match(r.out);
    QVERIFY2(done.hasMatch(), qPrintable(r.out));
    const double tokens_per_s = done.captured(1).toDouble(), per_rank = done.captured(2).toDouble(),
                 share = done.captured(3).toDouble();
    const double peak = number(r.out, R"(measured SGEMM peak: ([0-9.]+) GFLOP/s)");
    QVERIFY2(peak > 0, qPrintable(r.out));
    std::vector<std::string> words;
    for (const QString& a : kRun.mid(1)) words.push_back(a.toStdString());
    auto options = lattice::parse_train_flags(words);
    QVERIFY2(options, options.status().message().c_str());
    const double tokens_per_iteration =
        double(options->global_batch_size) * options->model.seq_length;
    const double expected =
        tokens_per_s / tokens_per_iteration *
        lattice::flops_per_iteration(options->model, options->global_batch_size) / ranks / 1e9;
    QVERIFY2(std::abs(per_rank - expected) <= 0.01 * expected + 0.1,
             qPrintable(QString("%1 ranks: the done line says %2 GFLOP/s per rank, the job's "
                                "rate over its ranks is %3")
                            .arg(ranks)
                            .arg(per_rank)
                            .arg(expected)));
    QVERIFY2(std::abs(share - 100 * expected / peak) <= 0.01 * share + 0.1,
             qPrintable(QString("%1 ranks: the done line says %2 % of the peak, one rank's rate "
                                "over one rank's peak is %3 %")
                            .arg(ranks)
                            .arg(share)
                            .arg(100 * expected / peak)));
  }

  // Trains `words` on one rank: the done line's GFLOP/s is its tokens/s times the planner's
  // model_flops_per_iteration per token, which is below `share` of Megatron's plain count for
  // the language model (flops_per_iteration, what the trainer used before).
  void done_line_counts_as_the_planner(const std::vector<std::string>& words, const char* db,
                                       double share) {
    auto options = lattice::parse_train_flags(words);
    QVERIFY2(options, options.status().message().c_str());
    auto layout = lattice::make_layout(*options, 1);
    QVERIFY2(layout, layout.status().message().c_str());
    const double counted = lattice::model_flops_per_iteration(*options, *layout),
                 plain = lattice::flops_per_iteration(options->model, options->global_batch_size);
    QVERIFY2(counted < share * plain,
             qPrintable(QString("counted %1, plain %2").arg(counted).arg(plain)));
    QStringList args = {"train", "--db", dir_.filePath(db)};
    for (const std::string& w : words) args << QString::fromStdString(w);
    const Run r = lattice::testing::run_lattice(1, args);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    const QRegularExpressionMatch done =
        QRegularExpression(R"(done: [^\n]* s; ([0-9.]+) tokens/s, ([0-9.]+) GFLOP/s per rank)")
            .match(r.out);
    QVERIFY2(done.hasMatch(), qPrintable(r.out));
    const double tokens_per_s = done.captured(1).toDouble(), per_rank = done.captured(2).toDouble();
    const double expected = tokens_per_s /
                            (double(options->global_batch_size) * options->model.seq_length) *
                            counted / 1e9;
    QVERIFY2(std::abs(per_rank - expected) <= 0.01 * expected + 0.1,
             qPrintable(QString("the done line says %1 GFLOP/s, the planner's count gives %2 "
                                "(Megatron's language-model count alone %3)")
                            .arg(per_rank)
                            .arg(expected)
                            .arg(expected * plain / counted)));
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void one_rank_reports_per_iteration() { check(1); }

  // The done line's GFLOP/s of a LLaVA-style run with --freeze-LM: model_flops_per_iteration
  // (the planner's count), which here is about 0.7 of Megatron's count for the language model
  // alone (no weight gradients in the frozen layers; the tiny tower adds little). The trainer
  // used that plain count before.
  void a_frozen_vision_language_run_counts_as_the_planner() {
    std::vector<std::string> words = kSmall;
    words.push_back("--freeze-LM");
    for (const std::string& w : lattice::testing::tiny_tower_flags(1)) words.push_back(w);
    done_line_counts_as_the_planner(words, "runs-vlm.sqlite", 0.8);
  }

  // A LoRA run on every linear (Note [FLOPs with frozen weights] in plan/memory_estimate.cpp):
  // the frozen base makes no weight gradients and the rank-8 adapters add a little, so the
  // planner's count is about 0.82 of full training's here (the attention products, large at
  // s = h, keep their whole backward).
  void a_lora_run_counts_as_the_planner() {
    std::vector<std::string> words = kSmall;
    for (const char* w : {"--lora-rank", "8"}) words.push_back(w);
    done_line_counts_as_the_planner(words, "runs-lora.sqlite", 0.85);
  }

  void two_ranks_report_per_iteration_and_per_rank() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    check(2);
#endif
  }

  // Four ranks of one thread on a machine with fewer than four cores share its cores, and the
  // peak they are measured against must say so: each rank's is about its share of one rank's
  // alone (half here), taken with every rank measuring at once. Timed one rank at a time, or
  // while the others were still setting up, it read anything from half to all of one rank's
  // alone (116-192 GFLOP/s where one rank alone reads 220), and the MFU of one run swung
  // from 35 % to 65 % with it.
  void ranks_sharing_cores_share_the_measured_peak() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    if (QThread::idealThreadCount() >= 4) QSKIP("four ranks do not share cores here");
    QStringList args = {"train", "--db", dir_.filePath("runs-peak.sqlite")};
    for (const std::string& w : kSmall) args << QString::fromStdString(w);
    args[args.indexOf("--global-batch-size") + 1] = "8";  // DP 4 x micro-batch 2
    const Run alone = lattice::testing::run_lattice(1, args);
    QVERIFY2(alone.exit_code == 0, qPrintable(alone.out + alone.err));
    const Run shared = lattice::testing::run_lattice(4, args);
    QVERIFY2(shared.exit_code == 0, qPrintable(shared.out + shared.err));
    const QString peak = R"(measured SGEMM peak: ([0-9.]+) GFLOP/s on 1 thread)";
    const double one = number(alone.out, peak + " \\(");
    const double each = number(shared.out, peak + " per rank, the 4 ranks measuring at once");
    QVERIFY2(one > 0, qPrintable(alone.out));
    QVERIFY2(each > 0, qPrintable(shared.out));
    // 4 ranks on at most 3 cores: at most 3/4 of one rank's alone, and far more than nothing.
    QVERIFY2(
        each < 0.8 * one && each > 0.1 * one,
        qPrintable(
            QString("each of 4 ranks measured %1 GFLOP/s, one rank alone %2").arg(each).arg(one)));
#endif
  }

  // A CPU --bf16 run's MFU is against the GEMM it multiplies with (cpu_peak_gemm): oneDNN's bf16
  // matmul where the CPU has bf16 instructions, else the SGEMM its widened copies run
  // (LATTICE_CPU_BF16_GEMM=widened, which every CPU runs). Each run names its peak, measures a
  // positive one and reports its share of it; none says "no peak rate known".
  void a_bf16_run_measures_the_peak_of_the_gemm_it_runs() {
    struct Path {
      const char* env;
      const char* gemm;
    };
    const Path paths[] = {{"widened", "SGEMM"}, {"onednn", "bf16 GEMM"}};
    for (const Path& p : paths) {
      if (QString(p.env) == "onednn" && !lattice::kernels::onednn_bf16_missing().empty()) {
        qInfo("oneDNN bf16 not on this CPU: %s", lattice::kernels::onednn_bf16_missing().c_str());
        continue;
      }
      qputenv("LATTICE_CPU_BF16_GEMM", p.env);
      QStringList args = {"train", "--db", dir_.filePath(QString("runs-bf16-%1.sqlite").arg(p.env)),
                          "--bf16"};
      for (const std::string& w : kSmall) args << QString::fromStdString(w);
      const Run r = lattice::testing::run_lattice(1, args);
      qunsetenv("LATTICE_CPU_BF16_GEMM");
      QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
      const QString name = QString(p.gemm);
      const double peak =
          number(r.out, "measured " + name + " peak: ([0-9.]+) GFLOP/s on 1 thread \\(");
      QVERIFY2(peak > 0, qPrintable(p.env + QString(": ") + r.out));
      QVERIFY2(r.out.contains(QRegularExpression("> done: .* = [0-9.]+% of the measured " + name +
                                                 " peak")),
               qPrintable(r.out));
      QVERIFY2(!r.out.contains("no peak rate known"), qPrintable(r.out));
    }
  }
};

QTEST_GUILESS_MAIN(TrainReports)
#include "test_train_reports.moc"
