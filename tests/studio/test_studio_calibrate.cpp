// The Plan view's Calibrate (issue 26, item 2; docs/studio.md "Calibrate"), offscreen: pressing
// Calibrate next to Suggest and fitting a prepared real run shows the fitted values beside the
// defaults, saves them for the device, recalibrates the plan's estimate, and Suggest then ranks
// with them; a run of another model is refused in words; and the dialog's own probe (a real
// one-rank `lattice train --profile` through the Launch machinery) is fitted when it ends; on
// the Launch view's cluster target (a hostfile of this machine under the real mpirun) the probe
// runs there and its fit is saved for the plan's named cluster, which a plan of that name then
// loads before the device's file.
#include <unistd.h>

#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "common/process.h"
#include "lattice/calibration.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "plan/calibrate_dialog.h"
#include "plan/cost_panel.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "plan/suggest_dialog.h"
#include "plan/suggest_model.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

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
                            "4"};

Plan planOf(const QStringList& flags) {
  std::vector<std::string> args;
  for (const QString& f : QStringList{"--mock-data"} + flags) args.push_back(f.toStdString());
  Plan p;
  p.options = parse_train_flags(args).value();
  p.cluster.nodes = 1;
  p.cluster.devices_per_node = 1;
  p.cluster.device = kDeviceCpu;
  return p;
}

// The dialog a button opened (open() shows it at once; the events are processed first).
template <typename T>
T* findDialog(QWidget* parent) {
  for (int i = 0; i < 100; i++) {
    if (T* found = parent->findChild<T*>()) return found;
    QTest::qWait(50);
  }
  return nullptr;
}

QPushButton* buttonWithText(QWidget* parent, const QString& text) {
  for (QPushButton* b : parent->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  return nullptr;
}

}  // namespace

class StudioCalibrate : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
    // The calibration file goes to <data dir>/calibration/cpu.json: here, not the user's.
    qputenv("LATTICE_DATA_DIR", dir_.path().toUtf8());
    testing::Run prepared = testing::run_process(
        LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--train-iters", "5", "--log-interval", "1",
                    "--threads", "2", "--profile", "--db", db_, "--run-name", "prepared"} +
            kModel);
    QVERIFY2(prepared.exit_code == 0, qPrintable(prepared.out + prepared.err));
  }

  void calibrateFitsAPreparedRunAndSuggestRanksWithIt() {
    PlanModel model;
    model.resetPlan(planOf(kModel));
    model.setCpuGflops(20);
    QVERIFY(model.isValid());
    QVERIFY(!model.analysis().calibrated);
    const double before = model.analysis().step->total_s;
    PlanView view(&model);
    view.resize(1280, 800);
    view.show();

    QPushButton* calibrate = buttonWithText(view.costPanel(), "Calibrate…");
    QVERIFY(calibrate);
    QVERIFY(calibrate->isEnabled());
    QTest::mouseClick(calibrate, Qt::LeftButton);
    CalibrateDialog* dialog = findDialog<CalibrateDialog>(&view);
    QVERIFY(dialog);
    dialog->setDatabase(db_);
    QVERIFY2(dialog->fitRun("prepared"), qPrintable(dialog->statusText()));

    const Calibration c = *dialog->calibration();
    QCOMPARE(c.device_key, std::string("cpu"));
    QVERIFY(c.compute_fitted && c.memory_fitted);
    // The table: defaults beside the fitted values, and where each came from.
    QCOMPARE(dialog->table()->item(0, 0)->text(), QString::number(0.5, 'g', 3));
    QCOMPARE(dialog->table()->item(0, 1)->text(), QString::number(c.compute_efficiency, 'g', 3));
    QCOMPARE(dialog->table()->item(0, 2)->text(), QString("measured"));
    QCOMPARE(dialog->table()->item(2, 2)->text(), QString("default kept"));  // one machine
    // Saved for the device, and the plan's estimate is the calibrated one.
    const std::optional<Calibration> saved =
        load_calibration(dir_.filePath("calibration/cpu.json").toStdString()).value();
    QVERIFY(saved.has_value());
    QCOMPARE(saved->compute_efficiency, c.compute_efficiency);
    QVERIFY(model.analysis().calibrated);
    QCOMPARE(model.analysis().cluster.compute_efficiency, c.compute_efficiency);
    QVERIFY(model.analysis().step->total_s != before);
    QCOMPARE(model.analysis().step->total_s, c.predicted_after_s);
    QLabel* step = view.costPanel()->findChild<QLabel*>("step");
    QVERIFY2(step->text().contains("calibrated from run prepared"), qPrintable(step->text()));

    // Suggest with it: the dialog's ranking is suggest_layouts on the calibrated cluster.
    QPushButton* suggest = buttonWithText(dialog, "Suggest with it…");
    QVERIFY(suggest && suggest->isEnabled());
    QTest::mouseClick(suggest, Qt::LeftButton);
    SuggestDialog* ranking = findDialog<SuggestDialog>(&view);
    QVERIFY(ranking);
    QTRY_VERIFY_WITH_TIMEOUT(ranking->tableModel()->rowCount() > 0, 20000);
    TrainOptions base = with_default_global_batch(model.plan().options, 1);
    base.device = "cpu";
    const std::vector<LayoutCandidate> expected =
        suggest_layouts(base, model.analysis().cluster, 50);
    QVERIFY(!expected.empty());
    const LayoutCandidate& top = ranking->tableModel()->candidate(0);
    QCOMPARE(top.step.tokens_per_second, expected[0].step.tokens_per_second);
    const std::vector<LayoutCandidate> uncalibrated =
        suggest_layouts(base, model.analysis().defaultCluster, 50);
    QVERIFY(top.step.tokens_per_second != uncalibrated[0].step.tokens_per_second);

    // A plan of another model cannot take this run's fit.
    Plan other = planOf(kModel);
    other.options.model.num_layers = 4;
    model.resetPlan(other);
    CalibrateDialog second(&model);
    second.setDatabase(db_);
    QVERIFY(!second.fitRun("prepared"));
    QVERIFY2(second.statusText().contains("a different model (--num-layers 2, not 4)"),
             qPrintable(second.statusText()));
  }

  // Run probe: the Launch machinery starts a one-rank `lattice train --profile` of the plan, and
  // the dialog fits it when it ends.
  void runProbeLaunchesAndFitsAProbe() {
    PlanModel model;
    model.resetPlan(planOf(kModel));
    model.setCpuGflops(20);
    CalibrateDialog dialog(&model);
    LaunchEnvironment env;
    env.lattice = LATTICE_CLI_PATH;
    env.cores = 2;
    env.dataDir = dir_.path();
    env.defaultDatabase = db_;
    dialog.setEnvironment(env);
    dialog.setDatabase(db_);
    QSignalSpy fitted(&dialog, &CalibrateDialog::fitted);
    QSignalSpy failed(&dialog, &CalibrateDialog::failed);
    dialog.startProbe();
    QTRY_VERIFY_WITH_TIMEOUT(fitted.count() + failed.count() > 0, 50000);
    QVERIFY2(fitted.count() == 1, qPrintable(dialog.statusText()));
    QCOMPARE(QString::fromStdString(dialog.calibration()->probe_run), dialog.probeRunName());
    QCOMPARE(dialog.calibration()->world, 1);
    QVERIFY(model.analysis().calibrated);
  }

  // Probe on the cluster: the target the Launch view holds (a hostfile naming this machine,
  // 2 ranks) runs the probe through mpirun --hostfile; the fit is saved for the plan's cluster
  // "lab" (calibration/lab/cpu.json, the device's file untouched), changes the estimate, and a
  // plan named "lab" later loads it, while a plan with no name, or another, loads the device's.
  void clusterProbeIsSavedForTheNamedCluster() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI: the cluster probe runs under mpirun");
#else
    for (const QString& word : QString(LATTICE_MPI_ENV).split(' ', Qt::SkipEmptyParts))
      qputenv(word.section('=', 0, 0).toUtf8(), word.section('=', 1).toUtf8());
    Plan plan = planOf(kModel);
    plan.cluster.devices_per_node = 2;
    plan.cluster.name = "lab";
    PlanModel model;
    model.resetPlan(plan);
    model.setCpuGflops(20);
    QVERIFY(model.isValid());
    const double before = model.analysis().step->total_s;
    const QString deviceFile = dir_.filePath("calibration/cpu.json");
    QFile device(deviceFile);
    QVERIFY(device.open(QIODevice::ReadOnly));  // written by the slots above
    const QByteArray deviceBefore = device.readAll();
    device.close();

    const QString hostfile = dir_.filePath("hosts");
    QFile hosts(hostfile);
    QVERIFY(hosts.open(QIODevice::WriteOnly));
    hosts.write("localhost slots=2\n");
    hosts.close();
    LaunchSettings launch;
    launch.target = launch::Target::kHostfile;
    launch.hostfile = hostfile;
    LaunchEnvironment env;
    env.lattice = LATTICE_CLI_PATH;
    env.mpirun = LATTICE_MPIEXEC;
    env.cores = 2;
    env.root = geteuid() == 0;
    env.dataDir = dir_.path();
    env.defaultDatabase = db_;

    CalibrateDialog dialog(&model);
    dialog.setEnvironment(env);
    dialog.setDatabase(db_);
    QComboBox* target = dialog.findChild<QComboBox*>("probe-target");
    QVERIFY(target);
    dialog.setTarget(CalibrateDialog::Target::kCluster);  // offered only with a cluster target
    QCOMPARE(dialog.target(), CalibrateDialog::Target::kThisMachine);
    dialog.setLaunchSettings(launch);
    QVERIFY2(target->itemText(1).contains(hostfile), qPrintable(target->itemText(1)));
    dialog.setTarget(CalibrateDialog::Target::kCluster);
    QCOMPARE(dialog.target(), CalibrateDialog::Target::kCluster);
    QSignalSpy fitted(&dialog, &CalibrateDialog::fitted);
    QSignalSpy failed(&dialog, &CalibrateDialog::failed);
    dialog.startProbe();
    QVERIFY2(dialog.isProbing(), qPrintable(dialog.statusText()));
    QTRY_VERIFY_WITH_TIMEOUT(fitted.count() + failed.count() > 0, 60000);
    const QString log = dialog.findChild<QPlainTextEdit*>()->toPlainText();
    QVERIFY2(fitted.count() == 1, qPrintable(dialog.statusText() + "\n" + log));
    QVERIFY2(log.contains("--hostfile " + hostfile), qPrintable(log));

    const Calibration c = *dialog.calibration();
    QCOMPARE(QString::fromStdString(c.probe_run), dialog.probeRunName());
    QCOMPARE(c.world, 2);
    QCOMPARE(c.dp, 2);
    QCOMPARE(QString::fromStdString(c.cluster_name), QString("lab"));
    const QString labFile = dir_.filePath("calibration/lab/cpu.json");
    QVERIFY2(dialog.statusText().contains(labFile), qPrintable(dialog.statusText()));
    const std::optional<Calibration> saved = load_calibration(labFile.toStdString()).value();
    QVERIFY(saved.has_value());
    QCOMPARE(saved->probe_run, c.probe_run);
    QVERIFY(device.open(QIODevice::ReadOnly));
    QCOMPARE(device.readAll(), deviceBefore);
    device.close();
    QVERIFY(model.analysis().calibrated);
    QCOMPARE(model.analysis().step->total_s, c.predicted_after_s);
    QVERIFY(model.analysis().step->total_s != before);

    // Saved calibrations: the cluster's own file first, else the device's.
    const std::optional<Calibration> byDevice = load_calibration(deviceFile.toStdString()).value();
    for (const auto& [name, probe] :
         {std::pair{QString("lab"), c.probe_run}, std::pair{QString(), byDevice->probe_run},
          std::pair{QString("other"), byDevice->probe_run}}) {
      Plan named = plan;
      named.cluster.name = name;
      PlanModel later;
      later.resetPlan(named);
      later.setUseSavedCalibrations(true);
      QVERIFY2(later.calibration().has_value(), qPrintable(name));
      QCOMPARE(QString::fromStdString(later.calibration()->probe_run),
               QString::fromStdString(probe));
    }
#endif
  }
};

QTEST_MAIN(StudioCalibrate)
#include "test_studio_calibrate.moc"
