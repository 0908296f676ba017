// The Launch view's Slurm target on a real single-node cluster (slurm_cluster.sh starts it and
// always stops it): a tiny plan of 2 ranks is submitted from the Studio (offscreen), followed
// to completion, merged into the local store, and its losses equal, bit for bit, those of the
// same flags run directly under mpirun -n 2; Stop on a running job cancels it with scancel,
// and the run arrives in the local store as killed with a checkpoint saved; the Plan view's
// Calibrate probes on the same target, imports the job's store and saves the fit for the
// plan's named cluster. Skipped (not passed) where no cluster can start: not root, or Slurm
// not installed.
#include <QApplication>
#include <QFileInfo>
#include <QPlainTextEdit>
#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "common/process.h"
#include "common/studio_plans.h"
#include "lattice/calibration.h"
#include "lattice/storage/run_store.h"
#include "launch/launch_command.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/calibrate_dialog.h"
#include "plan/plan_model.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QString kClusterScript = QStringLiteral(LATTICE_SOURCE_DIR "/tests/cluster/slurm_cluster.sh");

LaunchEnvironment clusterEnvironment(const QString& dir) {
  LaunchEnvironment env;
  env.lattice = LATTICE_CLI_PATH;
  env.mpirun = LATTICE_MPIEXEC;
  env.cores = 2;
  env.root = true;
  env.dataDir = dir;
  env.defaultDatabase = dir + "/home.sqlite";
  return env;
}

LaunchSettings slurmSettings(const QString& runName, const QString& outputDir, int iterations) {
  LaunchSettings s;
  s.data = DataSource::kMock;
  s.runName = runName;
  s.target = launch::Target::kSlurm;
  s.outputDir = outputDir;
  s.extraFlags = QStringLiteral("--train-iters %1 --log-interval 1 --eval-iters 0 --threads 1")
                     .arg(iterations);
  return s;
}

// Read-only, as the Studio follows a job: opening read-write would create a job's store that
// does not exist yet (in WAL mode), and the job, which asks for the rollback journal, could
// then not switch it while this test polls ("database is locked").
std::vector<storage::StepValue> losses(const QString& db, const QString& run) {
  if (QFileInfo(db).size() == 0) return {};
  storage::OpenOptions options;
  options.read_only = true;
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(db.toStdString(), options);
  if (!store) return {};
  Result<storage::RunInfo> info = (*store)->find_run(run.toStdString());
  if (!info) return {};
  Result<std::vector<storage::StepValue>> s = (*store)->series(info->id, "lm loss", 0, 1 << 30);
  return s ? *s : std::vector<storage::StepValue>{};
}

}  // namespace

class TestStudioSlurm : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    lattice::testing::put_mpi_environment();
    qputenv("OMP_NUM_THREADS", "1");
    const lattice::testing::Run started =
        lattice::testing::run_process("bash", {kClusterScript, "start", cluster_.filePath("c")});
    QVERIFY2(started.exit_code == 0, qPrintable(started.out + started.err));
    qputenv("SLURM_CONF", cluster_.filePath("c/slurm.conf").toUtf8());
    clusterUp_ = true;
  }

  void cleanupTestCase() {
    if (!clusterUp_) return;
    lattice::testing::run_process("scancel", {"--user=root"});
    lattice::testing::run_process("bash", {kClusterScript, "stop", cluster_.filePath("c")});
  }

  void aJobSubmittedFromTheStudioEqualsMpirunDirectly() {
    QTemporaryDir dir;
    PlanModel model;
    lattice::testing::tinyTwoRankPlan(model);
    QVERIFY(model.isValid());
    LaunchView view(&model, clusterEnvironment(dir.path()));
    view.form()->setSettings(slurmSettings("studio-slurm", dir.filePath("job"), 6));
    const LaunchCommand& cmd = view.command();
    QVERIFY2(cmd.canStart(), qPrintable(cmd.errors.join('\n')));
    QVERIFY2(cmd.script.contains("#SBATCH --ntasks-per-node=2"), qPrintable(cmd.script));
    QCOMPARE(cmd.database, dir.filePath("job/runs.sqlite"));
    QCOMPARE(cmd.importInto, dir.filePath("home.sqlite"));
    QSignalSpy recorded(&view, &LaunchView::runRecorded);
    QSignalSpy ended(&view, &LaunchView::runEnded);
    QSignalSpy imported(&view, &LaunchView::jobImported);
    view.startRun();
    QVERIFY2(ended.wait(180000), "the job did not end within 180 s");
    const QString console = view.findChild<QPlainTextEdit*>("console")->toPlainText();
    QVERIFY2(ended.front().at(0).toBool(), qPrintable(console.right(3000)));
    QVERIFY2(console.contains("COMPLETED"), qPrintable(console.right(3000)));
    if (recorded.isEmpty()) QVERIFY(recorded.wait(10000));
    if (imported.isEmpty()) QVERIFY(imported.wait(10000));
    // The run was reported in the job's own store, marked as such: the views read it only.
    QCOMPARE(recorded.front().at(0).toString(), dir.filePath("job/runs.sqlite"));
    QVERIFY2(recorded.front().at(2).toBool(), "the job's store must be reported as the job's");

    // The same flags, run directly: the local command of the same plan.
    LaunchSettings local = slurmSettings("direct", {}, 6);
    local.target = launch::Target::kLocal;
    const LaunchCommand direct =
        buildLaunchCommand(model.plan(), model.analysis(), local, clusterEnvironment(dir.path()));
    QStringList args = direct.steps.back().arguments;
    args = args.mid(args.indexOf("train"));
    args << "--db" << dir.filePath("direct.sqlite");
    const lattice::testing::Run r = lattice::testing::run_lattice(2, args);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err.right(2000)));

    // The import names the local store and the launched run's id there (the views come back).
    QCOMPARE(imported.front().at(0).toString(), dir.filePath("home.sqlite"));
    {
      Result<std::unique_ptr<storage::RunStore>> home =
          storage::RunStore::open(dir.filePath("home.sqlite").toStdString());
      QVERIFY(home);
      Result<storage::RunInfo> run = (*home)->find_run("studio-slurm");
      QVERIFY(run);
      QCOMPARE(imported.front().at(1).toLongLong(), run->id);
    }

    const auto want = losses(dir.filePath("direct.sqlite"), "direct");
    const auto got = losses(dir.filePath("home.sqlite"), "studio-slurm");
    QCOMPARE(want.size(), size_t{6});
    QCOMPARE(got.size(), want.size());
    for (size_t i = 0; i < want.size(); i++)
      QVERIFY2(got[i].step == want[i].step && got[i].value == want[i].value,
               qPrintable(QString("step %1: Slurm job %2, mpirun %3")
                              .arg(want[i].step)
                              .arg(got[i].value, 0, 'g', 17)
                              .arg(want[i].value, 0, 'g', 17)));
  }

  void stopCancelsTheJobAndTheRunArrivesKilled() {
    QTemporaryDir dir;
    PlanModel model;
    lattice::testing::tinyTwoRankPlan(model);
    QVERIFY(model.isValid());
    LaunchView view(&model, clusterEnvironment(dir.path()));
    view.form()->setSettings(slurmSettings("studio-cancel", dir.filePath("job"), 5000));
    QVERIFY2(view.command().canStart(), qPrintable(view.command().errors.join('\n')));
    QSignalSpy ended(&view, &LaunchView::runEnded);
    QSignalSpy imported(&view, &LaunchView::jobImported);
    view.startRun();
    const QString jobStore = dir.filePath("job/runs.sqlite");
    QTRY_VERIFY_WITH_TIMEOUT(losses(jobStore, "studio-cancel").size() >= 3, 120000);
    view.stopRun();
    QVERIFY2(ended.wait(120000), "the cancelled job was not followed to its end");
    const QString console = view.findChild<QPlainTextEdit*>("console")->toPlainText();
    QVERIFY2(console.contains("CANCELLED"), qPrintable(console.right(3000)));
    if (imported.isEmpty()) QVERIFY(imported.wait(10000));
    Result<std::unique_ptr<storage::RunStore>> home =
        storage::RunStore::open(dir.filePath("home.sqlite").toStdString());
    QVERIFY(home);
    Result<storage::RunInfo> run = (*home)->find_run("studio-cancel");
    QVERIFY2(run, "the cancelled run was imported");
    QCOMPARE(QString(storage::run_status_name(run->status)), QString("killed"));
    QVERIFY2(QFileInfo::exists(dir.filePath("job/checkpoints/latest_checkpointed_iteration.txt")),
             "the cancelled job saved a checkpoint");
  }

  // Calibrate on the cluster: the Launch view's Slurm settings submit the probe as a job (its
  // output directory under theirs), the dialog follows it, merges the job's store into the
  // local one and fits the probe from there, saved for the plan's cluster "slurm-lab".
  void calibrateProbesOnTheSlurmTarget() {
    QTemporaryDir dir;
    qputenv("LATTICE_DATA_DIR", dir.path().toUtf8());  // the calibration file lands here
    PlanModel model;
    lattice::testing::tinyTwoRankPlan(model);
    model.edit("name", [](Plan& p) { p.cluster.name = "slurm-lab"; });
    QVERIFY(model.isValid());
    const double before = model.analysis().step->total_s;
    CalibrateDialog dialog(&model);
    dialog.setEnvironment(clusterEnvironment(dir.path()));
    dialog.setDatabase(dir.filePath("home.sqlite"));
    dialog.setLaunchSettings(slurmSettings("launch-view-run", dir.filePath("jobs"), 6));
    dialog.setTarget(CalibrateDialog::Target::kCluster);
    QSignalSpy fitted(&dialog, &CalibrateDialog::fitted);
    QSignalSpy failed(&dialog, &CalibrateDialog::failed);
    dialog.startProbe();
    QTRY_VERIFY_WITH_TIMEOUT(fitted.count() + failed.count() > 0, 180000);
    const QString log = dialog.findChild<QPlainTextEdit*>()->toPlainText();
    QVERIFY2(fitted.count() == 1, qPrintable(dialog.statusText() + "\n" + log.right(3000)));
    QVERIFY2(log.contains("submitted batch job") && log.contains("Imported the job's runs into"),
             qPrintable(log.right(3000)));
    const QString probe = dialog.probeRunName();
    QVERIFY(QFileInfo::exists(dir.filePath("jobs/" + probe + "/runs.sqlite")));
    {
      Result<std::unique_ptr<storage::RunStore>> home =
          storage::RunStore::open(dir.filePath("home.sqlite").toStdString());
      QVERIFY(home);
      QVERIFY2((*home)->find_run(probe.toStdString()), "the probe was imported");
    }
    const Calibration c = *dialog.calibration();
    QCOMPARE(c.world, 2);
    const std::optional<Calibration> saved =
        load_calibration(dir.filePath("calibration/slurm-lab/cpu.json").toStdString()).value();
    QVERIFY(saved.has_value());
    QCOMPARE(QString::fromStdString(saved->probe_run), probe);
    QCOMPARE(QString::fromStdString(saved->cluster_name), QString("slurm-lab"));
    QVERIFY(model.analysis().calibrated);
    QVERIFY(model.analysis().step->total_s != before);
  }

 private:
  QTemporaryDir cluster_;
  bool clusterUp_ = false;
};

// ctest reports exit 77 as skipped: no cluster can start here (the reason is printed).
int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QProcess check;
  check.setProcessChannelMode(QProcess::ForwardedChannels);
  check.start("bash", {kClusterScript, "check"});
  if (!check.waitForFinished(30000) || check.exitCode() == 77) return 77;
  TestStudioSlurm test;
  return QTest::qExec(&test, argc, argv);
}
#include "test_studio_slurm.moc"
