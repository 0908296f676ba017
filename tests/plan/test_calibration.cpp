// Calibrating the planner from a probe (issue 26, item 2): a real TP 2 probe of a tiny model
// under mpirun, its phase times read from the run store and fitted (Note [calibration fit] in
// engine/src/plan/calibration.cpp); the calibrated step estimate reproduces the measured step
// where the defaults do not, the saved file round-trips, `lattice plan --suggest` ranks with it
// and says so, a cluster's own file wins over the device's, and the refusals name what the
// probe lacks.
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>

#include "common/process.h"
#include "lattice/calibration.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/run_estimate.h"
#include "lattice/train_options.h"

using namespace lattice;

namespace {

// Enough work per step (tens of ms) that the phases stand above the timer's noise, small
// enough for six iterations in a few seconds on two cores.
const QStringList kModel = {"--num-layers",
                            "2",
                            "--hidden-size",
                            "128",
                            "--num-attention-heads",
                            "4",
                            "--seq-length",
                            "128",
                            "--max-position-embeddings",
                            "128",
                            "--micro-batch-size",
                            "2",
                            "--global-batch-size",
                            "8"};

// The calibrated step estimate must be within this share of the measured step. What the step
// model has no term for (the loss, the data, the untimed moments between phases) stays
// outside it; on a loaded 2-core machine the phases themselves vary by ~10 % between runs.
constexpr double kStepTolerance = 0.25;

QString text_of(const testing::Run& r) {
  return "exit " + QString::number(r.exit_code) + "\n" + r.out + "\n" + r.err;
}

}  // namespace

class CalibrationTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;
  QStringList env_;  // LATTICE_DATA_DIR in the temporary folder: the calibration lands there

  testing::Run lattice(const QStringList& args) {
    return testing::run_process(LATTICE_CLI_PATH, args, {}, 60000, env_);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
    env_ = {"LATTICE_DATA_DIR=" + dir_.path()};
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI: the probe runs TP 2");
#else
    // The probe: TP 2 on two ranks, --profile so that the TP collectives are timed.
    testing::Run probe = testing::run_mpi(
        2, LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--train-iters", "6", "--log-interval", "1",
                    "--threads", "1", "--profile", "--tensor-model-parallel-size", "2", "--db", db_,
                    "--run-name", "probe"} +
            kModel);
    QVERIFY2(probe.exit_code == 0, qPrintable(text_of(probe)));
    // DP 2: the gradient all-reduce, which the model hides behind backward at the default rate.
    testing::Run dp = testing::run_mpi(
        2, LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--train-iters", "6", "--log-interval", "1",
                    "--threads", "1", "--profile", "--db", db_, "--run-name", "dp2"} +
            kModel);
    QVERIFY2(dp.exit_code == 0, qPrintable(text_of(dp)));
    testing::Run one = testing::run_process(
        LATTICE_CLI_PATH, QStringList{"train", "--mock-data", "--train-iters", "1", "--threads",
                                      "1", "--db", db_, "--run-name", "one-step"} +
                              kModel);
    QVERIFY2(one.exit_code == 0, qPrintable(text_of(one)));
#endif
  }

  // The fit on the probe's own layout: the calibrated estimate reproduces the measured step
  // within kStepTolerance and is closer than the default one (efficiency 0.5 of the SGEMM peak
  // is far above what a 128-wide model reaches); the compute term matches the measured forward +
  // backward - TP exactly (a ratio), and the TP link was measured.
  void theCalibratedEstimateReproducesTheProbesStep() {
    const ProbeRun probe = read_probe_run(db_.toStdString(), "probe").value();
    QCOMPARE(probe.world_size, 2);
    QCOMPARE(probe.ranks.size(), size_t{2});
    QVERIFY(probe.timed_steps == 5);
    QVERIFY2(probe.ranks[0].tp_comm > 0, "the probe timed no TP collectives");
    QVERIFY(probe.peak_flops_per_rank > 0);
    const RecordedRunPlan plan = plan_recorded_run(probe.config_json, probe.world_size).value();
    ClusterSpec cluster;
    cluster.devices_per_node = 2;
    cluster.device = this_machine_cpu(probe.peak_flops_per_rank * 2 / 1e9, 2);
    const Calibration c = fit_calibration(plan, cluster, probe).value();
    QVERIFY(c.compute_fitted && c.intra_fitted && c.memory_fitted);
    QVERIFY(!c.inter_fitted);  // one machine: nothing crossed a node
    QCOMPARE(c.inter_node_bandwidth, cluster.device.inter_node_bandwidth);

    const double measured = probe.step_time_s;
    const double before = std::abs(c.predicted_before_s - measured) / measured;
    const double after = std::abs(c.predicted_after_s - measured) / measured;
    qInfo(
        "measured step %.2f ms; estimate %.2f ms with the defaults (%.0f %% off), %.2f ms "
        "calibrated (%.1f %% off); efficiency %.3f, intra-node %.3g GB/s, memory %.3g GB/s",
        measured * 1e3, c.predicted_before_s * 1e3, before * 100, c.predicted_after_s * 1e3,
        after * 100, c.compute_efficiency, c.intra_node_bandwidth / 1e9, c.memory_bandwidth / 1e9);
    QVERIFY2(
        after < kStepTolerance,
        qPrintable(QString("calibrated estimate %1 % off the measured step").arg(after * 100)));
    // Closer than the defaults, unless the defaults happened to be right already.
    QVERIFY2(after < before || after < 0.05,
             "the calibrated estimate is no closer than the default");

    const StepEstimate fitted =
        estimate_step(plan.options, plan.layout, apply_calibration(cluster, c), plan.memory);
    // The slowest rank's terms (Note [calibration fit]).
    double compute = 0, tp = 0;
    for (const ProbePhases& r : probe.ranks)
      if (r.forward + r.backward - r.tp_comm > compute) {
        compute = r.forward + r.backward - r.tp_comm;
        tp = r.tp_comm;
      }
    QVERIFY2(std::abs(fitted.compute_s - compute) < 1e-9 * compute,
             qPrintable(QString("compute %1 s, measured %2 s").arg(fitted.compute_s).arg(compute)));
    // One link, one measured term on it: least squares lands on it.
    QVERIFY2(std::abs(fitted.tp_comm_s - tp) < 1e-3 * tp,
             qPrintable(QString("TP %1 s, measured %2 s").arg(fitted.tp_comm_s).arg(tp)));
  }

  // DP 2: the all-reduce's wait fits the intra-node link (the DP term is flat where backward
  // hides it, so the search must find the region where it shows), and the calibrated step is
  // within kStepTolerance.
  void aDataParallelProbeFitsTheReductionsLink() {
    const ProbeRun probe = read_probe_run(db_.toStdString(), "dp2").value();
    const RecordedRunPlan plan = plan_recorded_run(probe.config_json, probe.world_size).value();
    QCOMPARE(plan.layout.dp, 2);
    ClusterSpec cluster;
    cluster.devices_per_node = 2;
    cluster.device = this_machine_cpu(probe.peak_flops_per_rank * 2 / 1e9, 2);
    const Calibration c = fit_calibration(plan, cluster, probe).value();
    const double measured = probe.step_time_s;
    const double after = std::abs(c.predicted_after_s - measured) / measured;
    qInfo(
        "DP 2: measured step %.2f ms; estimate %.2f ms with the defaults, %.2f ms calibrated; "
        "intra-node %.3g GB/s (default %.3g)",
        measured * 1e3, c.predicted_before_s * 1e3, c.predicted_after_s * 1e3,
        c.intra_node_bandwidth / 1e9, c.default_intra_node_bandwidth / 1e9);
    QVERIFY2(c.intra_fitted, "the DP link was not fitted");
    QVERIFY2(
        after < kStepTolerance,
        qPrintable(QString("calibrated estimate %1 % off the measured step").arg(after * 100)));
  }

  // The file keeps every value: saved, loaded and printed again it is the same text.
  void theSavedCalibrationRoundTrips() {
    const ProbeRun probe = read_probe_run(db_.toStdString(), "probe").value();
    const RecordedRunPlan plan = plan_recorded_run(probe.config_json, 2).value();
    ClusterSpec cluster;
    cluster.devices_per_node = 2;
    cluster.device = this_machine_cpu(10, 2);
    const Calibration c = fit_calibration(plan, cluster, probe).value();
    const std::string path = dir_.filePath("round/trip.json").toStdString();
    QVERIFY(save_calibration(path, c).is_ok());
    const std::optional<Calibration> back = load_calibration(path).value();
    QVERIFY(back.has_value());
    QCOMPARE(QString::fromStdString(calibration_json(*back)),
             QString::fromStdString(calibration_json(c)));
    QCOMPARE(back->compute_efficiency, c.compute_efficiency);
    QVERIFY(!load_calibration(dir_.filePath("none.json").toStdString()).value().has_value());
    QFile bad(dir_.filePath("bad.json"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("{\"device_key\": \"cpu\"}");
    bad.close();
    Result<std::optional<Calibration>> broken = load_calibration(bad.fileName().toStdString());
    QVERIFY(!broken);
    QVERIFY2(QString::fromStdString(broken.status().message()).contains("bad.json"),
             broken.status().message().c_str());
  }

  // `lattice plan --calibrate` saves <data dir>/calibration/cpu.json; `--suggest` then says it
  // is calibrated, prints the fitted efficiency in its cluster, and ranks by the calibrated
  // estimates: its candidates' tokens/s are suggest_layouts' on the calibrated cluster, in the
  // same order; --no-calibration gives the defaults back.
  void suggestRanksWithTheSavedCalibration() {
    testing::Run fit = lattice({"plan", "--calibrate", "probe", "--db", db_});
    QVERIFY2(fit.exit_code == 0, qPrintable(text_of(fit)));
    QVERIFY2(fit.out.contains("compute efficiency") && fit.out.contains("intra-node bandwidth"),
             qPrintable(fit.out));
    const QString file = dir_.filePath("calibration/cpu.json");
    QVERIFY2(QFile::exists(file), qPrintable(fit.out));
    const Calibration saved = load_calibration(file.toStdString()).value().value();
    QCOMPARE(QString::fromStdString(saved.probe_run), QString("probe"));

    const QStringList suggest = QStringList{"plan", "--suggest",     "6",  "--world-size",
                                            "2",    "--peak-gflops", "20", "--mock-data"} +
                                kModel;
    testing::Run text = lattice(suggest);
    QVERIFY2(text.exit_code == 0, qPrintable(text_of(text)));
    QVERIFY2(text.out.startsWith("calibrated from run probe"), qPrintable(text.out));
    testing::Run calibrated = lattice(suggest + QStringList{"--json"});
    testing::Run plain = lattice(suggest + QStringList{"--json", "--no-calibration"});
    QVERIFY2(calibrated.exit_code == 0 && plain.exit_code == 0,
             qPrintable(text_of(calibrated) + text_of(plain)));
    const QJsonObject a = QJsonDocument::fromJson(calibrated.out.toUtf8()).object();
    const QJsonObject b = QJsonDocument::fromJson(plain.out.toUtf8()).object();
    QCOMPARE(a["cluster"].toObject()["compute_efficiency"].toDouble(), saved.compute_efficiency);
    QCOMPARE(b["cluster"].toObject()["compute_efficiency"].toDouble(), 0.5);

    // The same search in this process on the calibrated cluster: the same order and rates.
    std::vector<std::string> args;
    for (const QString& s : QStringList{"--mock-data"} + kModel) args.push_back(s.toStdString());
    TrainOptions base = parse_train_flags(args).value();
    const QJsonObject device = a["cluster"].toObject()["device"].toObject();
    ClusterSpec c;
    c.devices_per_node = 2;
    c.device = this_machine_cpu(20, 2);
    c.device.memory_bytes = device["memory_bytes"].toDouble();
    c = apply_calibration(c, saved);
    const std::vector<LayoutCandidate> list = suggest_layouts(base, c, 6);
    const QJsonArray got = a["candidates"].toArray();
    QCOMPARE(got.size(), qsizetype(list.size()));
    const QJsonArray defaults = b["candidates"].toArray();
    bool differs = false;
    for (int i = 0; i < got.size(); i++) {
      const QJsonObject k = got[i].toObject();
      QCOMPARE(k["tp"].toInt(), list[i].layout.tp);
      QCOMPARE(k["pp"].toInt(), list[i].layout.pp);
      QCOMPARE(k["micro_batch_size"].toInt(), list[i].options.micro_batch_size);
      const double rate = k["step"].toObject()["tokens_per_second"].toDouble();
      QVERIFY2(std::abs(rate - list[i].step.tokens_per_second) < 1e-6 * rate,
               qPrintable(QString("#%1: %2 tokens/s, in process %3")
                              .arg(i + 1)
                              .arg(rate)
                              .arg(list[i].step.tokens_per_second)));
      differs |=
          std::abs(rate -
                   defaults[i].toObject()["step"].toObject()["tokens_per_second"].toDouble()) >
          1e-6 * rate;
    }
    QVERIFY2(differs, "the calibrated ranking's rates equal the default ones");
  }

  // Per cluster (Note [calibration per cluster]): `--calibrate --cluster-name lab` saves
  // calibration/lab/cpu.json, which records the cluster; `lattice plan --cluster-name lab` takes
  // that file (its efficiency, edited here to tell the files apart, is the plan's) and names
  // it; a cluster with no file of its own, or no name, takes the device's file, as files of
  // earlier versions (no "cluster" field) are read; a name that cannot be a folder is refused.
  void aClusterNamePicksTheClustersCalibration() {
    testing::Run device = lattice({"plan", "--calibrate", "probe", "--db", db_});
    QVERIFY2(device.exit_code == 0, qPrintable(text_of(device)));
    testing::Run lab =
        lattice({"plan", "--calibrate", "probe", "--db", db_, "--cluster-name", "lab"});
    QVERIFY2(lab.exit_code == 0, qPrintable(text_of(lab)));
    const QString labFile = dir_.filePath("calibration/lab/cpu.json");
    QVERIFY2(lab.out.contains("saved to " + labFile) && lab.out.contains("--cluster-name lab"),
             qPrintable(lab.out));
    Calibration saved = load_calibration(labFile.toStdString()).value().value();
    QCOMPARE(QString::fromStdString(saved.cluster_name), QString("lab"));
    const Calibration deviceSaved =
        load_calibration(dir_.filePath("calibration/cpu.json").toStdString()).value().value();
    QVERIFY(deviceSaved.cluster_name.empty());
    saved.compute_efficiency = 0.0123;
    QVERIFY(save_calibration(labFile.toStdString(), saved));

    const QStringList plan =
        QStringList{"plan", "--world-size", "2", "--peak-gflops", "20", "--mock-data"} + kModel;
    auto efficiency = [&](const QStringList& more) {
      testing::Run r = lattice(plan + more + QStringList{"--json"});
      if (r.exit_code != 0) return -1.0;
      return QJsonDocument::fromJson(r.out.toUtf8())
          .object()["cluster"]
          .toObject()["compute_efficiency"]
          .toDouble();
    };
    QCOMPARE(efficiency({"--cluster-name", "lab"}), 0.0123);
    QCOMPARE(efficiency({"--cluster-name", "other"}), deviceSaved.compute_efficiency);
    QCOMPARE(efficiency({}), deviceSaved.compute_efficiency);

    testing::Run text = lattice(plan + QStringList{"--cluster-name", "lab"});
    QVERIFY2(text.out.contains("(" + labFile + ")"), qPrintable(text_of(text)));
    testing::Run other = lattice(plan + QStringList{"--cluster-name", "other"});
    QVERIFY2(other.out.contains("(" + dir_.filePath("calibration/cpu.json") + ")") &&
                 other.out.contains("no calibration of cluster other is saved"),
             qPrintable(text_of(other)));
    testing::Run bad = lattice(plan + QStringList{"--cluster-name", "a/b"});
    QCOMPARE(bad.exit_code, 2);
    QVERIFY2(bad.err.contains("--cluster-name: cluster name 'a/b' cannot name a folder"),
             qPrintable(bad.err));
  }

  // Refusals, one sentence each: a run with one iteration has no step after its first; a probe
  // of another model, vocabulary or world size; an unknown run.
  void probesThatCannotCalibrateAreRefused() {
    testing::Run one = lattice({"plan", "--calibrate", "one-step", "--db", db_});
    QCOMPARE(one.exit_code, 1);
    QVERIFY2(one.err.contains("at least 2 iterations"), qPrintable(one.err));
    testing::Run other =
        lattice({"plan", "--calibrate", "probe", "--db", db_, "--num-layers", "4", "--hidden-size",
                 "128", "--num-attention-heads", "4", "--seq-length", "128",
                 "--max-position-embeddings", "128", "--mock-data"});
    QCOMPARE(other.exit_code, 2);
    QVERIFY2(
        other.err.contains("cannot calibrate this plan: a different model (--num-layers 2, not 4)"),
        qPrintable(other.err));
    testing::Run vocabulary = lattice(QStringList{"plan", "--calibrate", "probe", "--db", db_,
                                                  "--mock-data", "--vocab-size", "1000"} +
                                      kModel);
    QCOMPARE(vocabulary.exit_code, 2);
    QVERIFY2(vocabulary.err.contains("a different vocabulary (513 ids, not 1001)"),
             qPrintable(vocabulary.err));
    testing::Run world = lattice(QStringList{"plan", "--calibrate", "probe", "--db", db_,
                                             "--world-size", "4", "--mock-data"} +
                                 kModel);
    QCOMPARE(world.exit_code, 2);
    QVERIFY2(world.err.contains("it ran on 2 ranks, the plan has 4"), qPrintable(world.err));
    testing::Run unknown = lattice({"plan", "--calibrate", "nope", "--db", db_});
    QCOMPARE(unknown.exit_code, 1);
    QVERIFY2(unknown.err.contains("nope"), qPrintable(unknown.err));
  }
};

QTEST_GUILESS_MAIN(CalibrationTest)
#include "test_calibration.moc"
