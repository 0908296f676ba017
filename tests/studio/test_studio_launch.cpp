// The Launch view builds the exact `lattice train` command of a plan (mpirun for more than one
// rank, the options this machine needs, every blocking problem listed), and, with MPI, runs a
// tiny plan on 2 ranks to completion with the run appearing in the run store.
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "app/main_window.h"
#include "common/process.h"
#include "common/studio_plans.h"
#include "dashboard/dashboard_view.h"
#include "history/history_view.h"
#include "history/run_table_model.h"
#include "lattice/storage/run_store.h"
#include "launch/launch_command.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "launch/run_process.h"
#include "plan/plan_model.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

LaunchEnvironment testEnvironment(const QString& dir) {
  LaunchEnvironment env;
  env.lattice = LATTICE_CLI_PATH;
#ifdef LATTICE_MPIEXEC
  env.mpirun = LATTICE_MPIEXEC;
#else
  env.mpirun = "/usr/bin/mpirun";
#endif
  env.cores = 2;
  env.root = false;
  env.dataDir = dir;
  env.defaultDatabase = dir + "/runs.sqlite";
  return env;
}

LaunchSettings mockData(const QString& runName) {
  LaunchSettings s;
  s.data = DataSource::kMock;
  s.runName = runName;
  return s;
}

}  // namespace

class TestStudioLaunch : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  void oneRankRunsLatticeDirectly() {
    QTemporaryDir dir;
    const Plan plan = defaultPlan();
    const LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), mockData("r1"), testEnvironment(dir.path()));
    QVERIFY2(cmd.canStart(), qPrintable(cmd.errors.join('\n')));
    QCOMPARE(cmd.steps.size(), size_t{1});
    QCOMPARE(cmd.steps[0].program, QString(LATTICE_CLI_PATH));
    const QStringList& args = cmd.steps[0].arguments;
    QCOMPARE(args.front(), QString("train"));
    QVERIFY(args.contains("--mock-data"));
    QCOMPARE(args[args.indexOf("--run-name") + 1], QString("r1"));
    QCOMPARE(args[args.indexOf("--num-layers") + 1], QString("4"));
    QVERIFY2(!args.contains("--db"), "the default database needs no flag");
  }

  void moreRanksRunUnderMpirunWithWhatThisMachineNeeds() {
    QTemporaryDir dir;
    Plan plan = defaultPlan();
    plan.cluster.devices_per_node = 4;
    plan.options.micro_batch_size = 4;
    LaunchEnvironment env = testEnvironment(dir.path());
    env.root = true;
    const LaunchCommand cmd = buildLaunchCommand(plan, analyzePlan(plan, 0), mockData("r4"), env);
    QVERIFY2(cmd.canStart(), qPrintable(cmd.errors.join('\n')));
    const LaunchStep& step = cmd.steps.back();
    QCOMPARE(step.program, env.mpirun);
    const QStringList& a = step.arguments;
    QVERIFY(a.contains("--allow-run-as-root"));
    QVERIFY2(a.contains("--oversubscribe"), "4 ranks on 2 cores need --oversubscribe");
    QVERIFY2(a.indexOf("odls_base_sigkill_timeout") > 0 &&
                 a[a.indexOf("odls_base_sigkill_timeout") - 1] == "--mca" &&
                 a[a.indexOf("odls_base_sigkill_timeout") + 1].toInt() >= 30,
             "ranks need time to save and record the run after a stop");
    QCOMPARE(a[a.indexOf("-n") + 1], QString("4"));
    QCOMPARE(a[a.indexOf("-n") + 2], env.lattice);
    QCOMPARE(a[a.indexOf("-n") + 3], QString("train"));
    // What the view shows is what runs: every argument appears, quoted for a shell.
    const QString text = cmd.displayText();
    for (const QString& arg : a) QVERIFY2(text.contains(shellQuote(arg)), qPrintable(arg));
  }

  void everyBlockingProblemIsListed() {
    QTemporaryDir dir;
    Plan plan = defaultPlan();
    plan.options.model.tensor_model_parallel_size = 3;  // does not divide 4 heads
    setPrecision(plan.options, "bf16");
    LaunchSettings s = mockData("bad");
    s.data = DataSource::kDataset;
    s.dataPath = dir.filePath("missing_text_document");
    const LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QVERIFY(!cmd.canStart());
    const QString all = cmd.errors.join('\n');
    QVERIFY2(all.contains("The plan has"), qPrintable(all));
    QVERIFY2(all.contains("bf16 needs a GPU"), qPrintable(all));
    QVERIFY2(all.contains("missing_text_document.bin"), qPrintable(all));
  }

  void aSlurmTargetSubmitsThroughLatticeLaunchAndShowsTheScript() {
    QTemporaryDir dir;
    Plan plan = defaultPlan();
    plan.cluster.nodes = 4;
    plan.cluster.devices_per_node = 8;
    plan.cluster.device = "h100";
    plan.options.micro_batch_size = 1;
    plan.options.global_batch_size = 32;
    LaunchSettings s = mockData("big");
    s.target = launch::Target::kSlurm;
    s.outputDir = dir.filePath("job");
    s.partition = "gpu";
    s.timeLimit = "12:00:00";
    const LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QVERIFY2(cmd.canStart(), qPrintable(cmd.errors.join('\n')));
    QCOMPARE(cmd.steps.size(), size_t{1});
    const QStringList& a = cmd.steps[0].arguments;
    QCOMPARE(cmd.steps[0].program, QString(LATTICE_CLI_PATH));
    QCOMPARE(a.mid(0, 3), (QStringList{"launch", "--target", "slurm"}));
    QCOMPARE(a[a.indexOf("--world-size") + 1], QString("32"));
    QCOMPARE(a[a.indexOf("--device") + 1], QString("cuda"));
    QVERIFY2(!a.contains("--db"), "the job records its run in its own output directory");
    for (const char* line :
         {"#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
          "#SBATCH --partition=gpu", "#SBATCH --time=12:00:00"})
      QVERIFY2(cmd.script.contains(line), qPrintable(line + QString("\n") + cmd.script));
    QCOMPARE(cmd.database, dir.filePath("job/runs.sqlite"));
    QCOMPARE(cmd.importInto, dir.filePath("runs.sqlite"));

    s.timeLimit = "twelve hours";
    s.outputDir.clear();
    plan.cluster.nodes = 3;  // 24 ranks: the layout no longer fits the batch
    const LaunchCommand bad =
        buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QVERIFY(!bad.canStart());
    QVERIFY2(bad.errors.join('\n').contains("--time"), qPrintable(bad.errors.join('\n')));
  }

  void aHostfileTargetNeedsTheFileAndSlotsForItsRanks() {
    QTemporaryDir dir;
    Plan plan = defaultPlan();
    plan.cluster.nodes = 2;
    plan.cluster.devices_per_node = 2;
    plan.options.micro_batch_size = 4;
    LaunchSettings s = mockData("hosts");
    s.target = launch::Target::kHostfile;
    s.hostfile = dir.filePath("missing-hosts");
    LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QVERIFY2(cmd.errors.join('\n').contains("missing-hosts"), qPrintable(cmd.errors.join('\n')));
    QFile hosts(dir.filePath("hosts"));
    QVERIFY(hosts.open(QIODevice::WriteOnly));
    hosts.write("node1 slots=2\nnode2 slots=2\n");
    hosts.close();
    s.hostfile = hosts.fileName();
    cmd = buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QVERIFY2(cmd.canStart(), qPrintable(cmd.errors.join('\n')));
    const QStringList& a = cmd.steps.back().arguments;
    QCOMPARE(a[a.indexOf("--hostfile") + 1], hosts.fileName());
    QVERIFY2(a.contains("train"), qPrintable(a.join(' ')));
  }

  void theDemoCorpusIsBuiltFirstWhenMissing() {
    QTemporaryDir dir;
    const Plan plan = defaultPlan();
    LaunchSettings s;  // demo corpus
    const LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), s, testEnvironment(dir.path()));
    QCOMPARE(cmd.steps.size(), size_t{2});
    QCOMPARE(cmd.steps[0].arguments, QStringList({"data", "demo"}));
    QVERIFY(cmd.steps[1].arguments.contains("GPTSentencePieceTokenizer"));
  }

  // Issue 29: extra flags with --save persisted, so the next run wrote into the checkpoint
  // directory of the one before.
  void aNewRunNeverWritesIntoAnotherRunsCheckpoints() {
    QTemporaryDir dir;
    const Plan plan = defaultPlan();
    const LaunchEnvironment env = testEnvironment(dir.path());
    const QString save = dir.filePath("ckpt");
    LaunchSettings s = mockData("second");
    s.extraFlags = "--save " + save;
    QVERIFY2(buildLaunchCommand(plan, analyzePlan(plan, 0), s, env).canStart(),
             "a directory without a checkpoint is free to use");

    QVERIFY(QDir().mkpath(save));
    QFile latest(save + "/latest_checkpointed_iteration.txt");
    QVERIFY(latest.open(QIODevice::WriteOnly));
    latest.write("20\n");
    latest.close();
    const LaunchCommand blocked = buildLaunchCommand(plan, analyzePlan(plan, 0), s, env);
    QVERIFY(!blocked.canStart());
    const QString why = blocked.errors.join('\n');
    QVERIFY2(why.contains("--save " + save) && why.contains("iteration 20") &&
                 why.contains("--load " + save),
             qPrintable(why));

    s.extraFlags = "--save " + save + " --load " + save;  // the user resumes that run
    const LaunchCommand resumed = buildLaunchCommand(plan, analyzePlan(plan, 0), s, env);
    QVERIFY2(resumed.canStart(), qPrintable(resumed.errors.join('\n')));
  }

  void theCheckpointsOptionSavesEachRunInADirectoryOfItsOwn() {
    QTemporaryDir dir;
    const Plan plan = defaultPlan();
    const LaunchEnvironment env = testEnvironment(dir.path());
    LaunchSettings s = mockData("run a/1");
    s.saveCheckpoints = true;
    auto saveOf = [](const LaunchCommand& cmd) {
      const QStringList& a = cmd.steps.back().arguments;
      return a.contains("--save") ? a[a.indexOf("--save") + 1] : QString();
    };
    const LaunchCommand a = buildLaunchCommand(plan, analyzePlan(plan, 0), s, env);
    QVERIFY2(a.canStart(), qPrintable(a.errors.join('\n')));
    QCOMPARE(saveOf(a), dir.filePath("checkpoints/run_a_1"));
    s.runName = "run-b";
    QCOMPARE(saveOf(buildLaunchCommand(plan, analyzePlan(plan, 0), s, env)),
             dir.filePath("checkpoints/run-b"));
    // The demo (`lattice-studio --demo`) keeps its models where `lattice demo` does.
    LaunchSettings demo = s;
    demo.checkpointsFolder = "demo";
    QCOMPARE(saveOf(buildLaunchCommand(plan, analyzePlan(plan, 0), demo, env)),
             dir.filePath("demo/run-b"));
    s.target = launch::Target::kSlurm;
    s.outputDir = dir.filePath("job");
    QCOMPARE(checkpointDirectory(s, env, "run-b"), dir.filePath("job/checkpoints"));

    // A run name used before: its directory is taken.
    s = mockData("run-b");
    s.saveCheckpoints = true;
    QVERIFY(QDir().mkpath(dir.filePath("checkpoints/run-b")));
    QFile latest(dir.filePath("checkpoints/run-b/latest_checkpointed_iteration.txt"));
    QVERIFY(latest.open(QIODevice::WriteOnly));
    latest.write("3\n");
    latest.close();
    const LaunchCommand again = buildLaunchCommand(plan, analyzePlan(plan, 0), s, env);
    QVERIFY(!again.canStart());
    QVERIFY2(again.errors.join('\n').contains("run name 'run-b' was used before"),
             qPrintable(again.errors.join('\n')));
  }

  // The sequence in the view: a run saves through the extra flags, ends, and the next
  // Start (the same flags, also after a restart) is refused until the user resumes or saves in
  // a directory of the run's own.
  void aRunThatSavedBlocksTheNextUntilTheUserResumesOrSavesElsewhere() {
    QTemporaryDir dir;
    PlanModel model;
    LaunchView view(&model, testEnvironment(dir.path()));
    const QString save = dir.filePath("ckpt");
    LaunchSettings s = mockData("first");
    s.extraFlags = "--train-iters 2 --eval-iters 0 --save " + save;
    s.database = dir.filePath("studio.sqlite");
    view.form()->setSettings(s);
    QVERIFY2(view.command().canStart(), qPrintable(view.command().errors.join('\n')));
    QSignalSpy ended(&view, &LaunchView::runEnded);
    view.startRun();
    QVERIFY2(ended.wait(120000), "the run did not end within 120 s");
    auto* console = view.findChild<QPlainTextEdit*>("console");
    QVERIFY2(ended.front().at(0).toBool(), qPrintable(console->toPlainText().right(3000)));
    QVERIFY(QFile::exists(save + "/latest_checkpointed_iteration.txt"));

    QVERIFY2(!view.startButton()->isEnabled(),
             "the next run would write into 'first's checkpoints");
    QVERIFY2(view.command().errors.join('\n').contains("--load " + save),
             qPrintable(view.command().errors.join('\n')));
    QVERIFY(view.findChild<QLabel*>("launch-problems")->text().contains(save));

    LaunchView restarted(&model, testEnvironment(dir.path()));  // the same saved settings
    restarted.form()->setSettings(view.form()->settings());
    QVERIFY(!restarted.startButton()->isEnabled());

    LaunchSettings own = view.form()->settings();
    own.extraFlags = "--train-iters 2 --eval-iters 0";
    own.saveCheckpoints = true;
    view.form()->setSettings(own);
    QVERIFY2(view.startButton()->isEnabled(), qPrintable(view.command().errors.join('\n')));
    const QStringList& a = view.command().steps.back().arguments;
    QCOMPARE(a[a.indexOf("--save") + 1],
             dir.filePath("checkpoints/" + view.form()->settings().runName));
  }

  void aTinyPlanOnTwoRanksRunsToCompletionAndAppearsInTheStore() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    lattice::testing::put_mpi_environment();  // the launched mpirun inherits it
    QTemporaryDir dir;
    // The whole window: the launched run must open in the Dashboard and appear in History.
    MainWindow::Options options;
    options.useSettings = false;
    options.measureCpu = false;
    options.environment = testEnvironment(dir.path());
    MainWindow window(options);
    lattice::testing::tinyTwoRankPlan(*window.planModel());
    QVERIFY(window.planModel()->isValid());
    LaunchView& view = *window.launchView();
    LaunchSettings s = mockData("studio-launch-test");
    s.extraFlags = "--train-iters 4 --log-interval 1 --eval-iters 0";
    s.database = dir.filePath("studio.sqlite");
    view.form()->setSettings(s);
    QVERIFY2(view.command().canStart(), qPrintable(view.command().errors.join('\n')));
    QSignalSpy recorded(&view, &LaunchView::runRecorded);
    QSignalSpy ended(&view, &LaunchView::runEnded);
    view.startRun();
    QVERIFY(view.isRunning());
    QVERIFY2(ended.wait(240000), "the run did not end within 240 s");
    auto* console = view.findChild<QPlainTextEdit*>("console");
    QVERIFY2(ended.front().at(0).toBool(), qPrintable(console->toPlainText().right(3000)));
    QVERIFY2(console->toPlainText().contains("iteration"), "the console shows training output");
    if (recorded.isEmpty()) QVERIFY(recorded.wait(5000));
    Result<std::unique_ptr<storage::RunStore> > store =
        storage::RunStore::open(dir.filePath("studio.sqlite").toStdString());
    QVERIFY(store);
    Result<storage::RunInfo> run = (*store)->find_run("studio-launch-test");
    QVERIFY2(run, "the run is in the store");
    QCOMPARE(QString(storage::run_status_name(run->status)), QString("finished"));
    QCOMPARE(run->world_size, 2);
    QCOMPARE(run->layout.dp, 2);
    QCOMPARE(window.currentView(), MainWindow::View::kDashboard);
    QCOMPARE(window.dashboardView()->runs(), QList<qint64>{run->id});
    QCOMPARE(window.dashboardView()->database(), dir.filePath("studio.sqlite"));
    // A run on this machine is recorded in the local history, which History edits.
    QVERIFY(!recorded.front().at(2).toBool());
    QCOMPARE(window.historyView()->access(), StoreAccess::kReadWrite);
    window.historyView()->refresh();
    QTRY_VERIFY_WITH_TIMEOUT(window.historyView()->tableModel()->rowOfRun(run->id) >= 0, 10000);
    QCOMPARE(window.historyView()->selectedRuns(), QList<qint64>{run->id});
#endif
  }

  void stopEndsTheRunAndTheStoreSaysKilled() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    lattice::testing::put_mpi_environment();  // the launched mpirun inherits it
    QTemporaryDir dir;
    PlanModel model;
    lattice::testing::tinyTwoRankPlan(model);
    QVERIFY(model.isValid());
    LaunchView view(&model, testEnvironment(dir.path()));
    LaunchSettings s = mockData("studio-stop-test");
    s.extraFlags = "--train-iters 1000000 --log-interval 1 --eval-iters 0";
    s.database = dir.filePath("studio.sqlite");
    view.form()->setSettings(s);
    QSignalSpy recorded(&view, &LaunchView::runRecorded);
    QSignalSpy ended(&view, &LaunchView::runEnded);
    view.startRun();
    QVERIFY2(recorded.wait(60000), "the run did not appear in the store within 60 s");
    QTest::qWait(1500);  // a few iterations
    QElapsedTimer stopping;
    stopping.start();
    view.stopRun();
    QVERIFY2(ended.wait(RunProcess::kGraceMs + RunProcess::kKillMs + 10000), "Stop did not end it");
    qInfo("stopped in %lld ms", static_cast<long long>(stopping.elapsed()));
    QVERIFY(!view.isRunning());
    // Issue 29: a clean stop took 15 s (mpirun waited out its kill timeout until the Studio
    // killed it) and ended in mpirun's notice that it aborted the job.
    const QString console = view.findChild<QPlainTextEdit*>("console")->toPlainText();
    QVERIFY2(stopping.elapsed() < RunProcess::kGraceMs,
             qPrintable("Stop had to escalate:\n" + console.right(2000)));
    QVERIFY2(console.contains("stopped by a signal before iteration"),
             qPrintable(console.right(2000)));
    QVERIFY2(!console.contains("aborted") && !console.contains("non-zero"),
             qPrintable(console.right(2000)));
    const QString state = view.findChild<QLabel*>("run-state")->text();
    QVERIFY2(state.startsWith("Stopped in"), qPrintable(state));
    Result<std::unique_ptr<storage::RunStore> > store =
        storage::RunStore::open(dir.filePath("studio.sqlite").toStdString());
    QVERIFY(store);
    Result<storage::RunInfo> run = (*store)->find_run("studio-stop-test");
    QVERIFY(run);
    // The ranks got the stop request from mpirun, agreed on a stop and rank 0 marked it killed.
    QCOMPARE(QString(storage::run_status_name(run->status)), QString("killed"));
#endif
  }
};

QTEST_MAIN(TestStudioLaunch)
#include "test_studio_launch.moc"
