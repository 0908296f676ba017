// Fine-tuning from History: the command a fine-tune of a recorded run makes (the base run's
// model and layout flags, --load <its save directory> --finetune, the SFT dataset, LoRA's flags
// or none for a full fine-tune), the dataset check that names a missing loss mask, the dialog
// on a real run store, and the base of a fine-tune found from the records alone (History's
// "Compare with base" selecting both runs side by side); end to end, a real base run's
// fine-tune started from the dialog through the Launch view, recorded and matched to its base.
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "app/main_window.h"
#include "common/process.h"
#include "history/compare_panel.h"
#include "history/finetune_base.h"
#include "history/finetune_dialog.h"
#include "history/history_view.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"
#include "launch/finetune_command.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/plan_analysis.h"
#include "plan/plan_model.h"
#include "plan/train_flags.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

// What `lattice train` records for a small 2-rank (TP 2) GPT run with these extra flags:
// the engine's own parser and train_options_json.
std::string recordedConfig(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--num-layers",
                                    "3",
                                    "--hidden-size",
                                    "96",
                                    "--num-attention-heads",
                                    "4",
                                    "--seq-length",
                                    "64",
                                    "--max-position-embeddings",
                                    "64",
                                    "--micro-batch-size",
                                    "2",
                                    "--tensor-model-parallel-size",
                                    "2",
                                    "--train-iters",
                                    "400",
                                    "--lr",
                                    "6e-4",
                                    "--lr-warmup-iters",
                                    "40",
                                    "--tokenizer-type",
                                    "NullTokenizer",
                                    "--vocab-size",
                                    "300"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  Result<TrainOptions> options = parse_train_flags(flags);
  if (!options) qFatal("the test's flags do not parse: %s", options.status().message().c_str());
  return train_options_json(*options);
}

// The recorded options as History's dialog reads them back.
TrainOptions options(const std::string& json) {
  Result<TrainOptions> o = optionsFromJson(json);
  if (!o) qFatal("the recorded configuration does not read back: %s", o.status().message().c_str());
  return *o;
}

void touch(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(path));
}

// An indexed dataset's files (the fine-tune only checks that they exist before the engine
// reads them); with `mask`, the SFT loss mask beside them.
void writeDataset(const QString& prefix, bool mask) {
  touch(prefix + ".bin");
  touch(prefix + ".idx");
  if (mask) {
    touch(prefix + "_loss_mask.bin");
    touch(prefix + "_loss_mask.idx");
  }
}

// A save directory holding a checkpoint at `iteration`, as far as History looks.
void writeCheckpointMarker(const QString& dir, int iteration) {
  QDir().mkpath(dir);
  QFile f(dir + "/latest_checkpointed_iteration.txt");
  if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write in %s", qPrintable(dir));
  f.write(QByteArray::number(iteration));
}

LaunchEnvironment testEnvironment(const QString& dir) {
  LaunchEnvironment env;
  env.lattice = "/opt/lattice/bin/lattice";
  env.mpirun = "/usr/bin/mpirun";
  env.cores = 2;
  env.dataDir = dir;
  env.defaultDatabase = dir + "/runs.sqlite";
  return env;
}

// The `lattice train` arguments of a command (after "train", under mpirun or not).
QStringList trainArguments(const LaunchCommand& cmd) {
  if (cmd.steps.empty()) return {};
  const QStringList& args = cmd.steps.back().arguments;
  const qsizetype at = args.indexOf("train");
  return at < 0 ? QStringList() : args.mid(at + 1);
}

QString valueOf(const QStringList& args, const QString& flag) {
  const qsizetype at = args.indexOf(flag);
  return at >= 0 && at + 1 < args.size() ? args[at + 1] : QString();
}

// Whether this build's engine knows a flag; until the SFT and LoRA options land in
// `lattice train`, it refuses --sft and --lora-*, and the command says so.
bool engineKnows(const std::string& flag, const std::string& value = {}) {
  std::vector<std::string> args = {"--mock-data", flag};
  if (!value.empty()) args.push_back(value);
  return parse_train_flags(args).is_ok();
}

std::int64_t addRun(storage::RunStore& store, const std::string& name, const std::string& config,
                    int steps, double loss) {
  storage::NewRun run;
  run.name = name;
  run.host = "testhost";
  run.config_json = config;
  run.layout = {2, 1, 1};
  run.world_size = 2;
  const std::int64_t id = store.create_run(run).value();
  if (!store.mark_running(id)) qFatal("cannot start %s", name.c_str());
  for (int step = 1; step <= steps; ++step)
    if (!store.log_step(id, step, {{"lm loss", loss + 0.01 * (steps - step)}}))
      qFatal("cannot log %s", name.c_str());
  if (!store.finish(id, storage::RunStatus::kFinished, ""))
    qFatal("cannot finish %s", name.c_str());
  return id;
}

}  // namespace

class TestStudioFineTune : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString path(const QString& name) const { return dir_.filePath(name); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // A full-parameter SFT fine-tune: the base run's model, layout and tokenizer flags, the
  // checkpoint loaded weights-only, the fine-tune's length, LR and save directory, --sft, and
  // no LoRA flag; two ranks (the base run's world) under mpirun.
  void fullFineTuneCommand() {
    const QString data = path("chat"), ckpt = path("base-ckpt"), save = path("ft-full");
    writeDataset(data, true);
    TrainOptions base = options(recordedConfig({"--save", ckpt.toStdString()}));
    base.cpu_isa = "avx2";  // as `lattice train` records it: resolved on the base's machine
    FineTuneSettings s;
    s.checkpoint = ckpt;
    s.dataPath = data;
    s.iterations = 50;
    s.lr = 2e-5;
    s.saveDir = save;
    s.runName = "base-sft";
    const FineTuneLaunch ft = fineTuneLaunch(base, 2, ClusterSettings{}, LaunchSettings{}, s);
    QVERIFY2(ft.errors.isEmpty(), qPrintable(ft.errors.join('\n')));
    const LaunchEnvironment env = testEnvironment(dir_.path());
    Plan plan = ft.plan;
    normalizePlan(plan);
    const LaunchCommand cmd = buildLaunchCommand(plan, analyzePlan(plan, 0), ft.settings, env);
    QCOMPARE(cmd.ranks, 2);
    const QStringList args = trainArguments(cmd);
    QVERIFY2(!args.isEmpty(), qPrintable(cmd.displayText()));
    QCOMPARE(valueOf(args, "--num-layers"), QString("3"));
    QCOMPARE(valueOf(args, "--hidden-size"), QString("96"));
    QCOMPARE(valueOf(args, "--tensor-model-parallel-size"), QString("2"));
    QCOMPARE(valueOf(args, "--tokenizer-type"), QString("NullTokenizer"));
    QCOMPARE(valueOf(args, "--vocab-size"), QString("300"));
    QCOMPARE(valueOf(args, "--data-path"), data);
    QCOMPARE(valueOf(args, "--load"), ckpt);
    QVERIFY(args.contains("--finetune"));
    QCOMPARE(valueOf(args, "--save"), save);
    QCOMPARE(valueOf(args, "--train-iters"), QString("50"));
    QCOMPARE(valueOf(args, "--lr").toDouble(), 2e-5);
    QCOMPARE(valueOf(args, "--run-name"), QString("base-sft"));
    QVERIFY2(!args.contains("--lr-warmup-iters"), "the base run's warm-up is not the fine-tune's");
    QVERIFY(args.contains("--sft"));
    for (const QString& a : args) QVERIFY2(!a.startsWith("--lora"), qPrintable(a));
    QVERIFY(!args.contains("--mock-data"));
    QVERIFY2(!args.contains("--cpu-isa"), "the fine-tune's machine picks its own kernels");
    // The engine's verdict on the flags is the command's: until `lattice train` has --sft,
    // the Start button stays disabled with its message.
    const bool sftKnown = engineKnows("--sft");
    QCOMPARE(cmd.canStart(), sftKnown);
    if (!sftKnown)
      QVERIFY2(cmd.errors.join(' ').contains("--sft"), qPrintable(cmd.errors.join('\n')));
  }

  // LoRA: --lora-rank, --lora-alpha, the chosen modules in one comma list, --lora-dropout.
  void loraFineTuneCommand() {
    const QString data = path("chat"), ckpt = path("base-ckpt");
    writeDataset(data, true);
    const TrainOptions base = options(recordedConfig({"--save", ckpt.toStdString()}));
    FineTuneSettings s;
    s.checkpoint = ckpt;
    s.dataPath = data;
    s.loraRank = 8;
    s.loraAlpha = 16;
    s.loraTargets = {"linear_qkv", "linear_fc1"};
    s.loraDropout = 0.05;
    s.saveDir = path("ft-lora");
    const FineTuneLaunch ft = fineTuneLaunch(base, 2, ClusterSettings{}, LaunchSettings{}, s);
    QVERIFY2(ft.errors.isEmpty(), qPrintable(ft.errors.join('\n')));
    Plan plan = ft.plan;
    normalizePlan(plan);
    const LaunchCommand cmd =
        buildLaunchCommand(plan, analyzePlan(plan, 0), ft.settings, testEnvironment(dir_.path()));
    const QStringList args = trainArguments(cmd);
    QCOMPARE(valueOf(args, "--lora-rank"), QString("8"));
    QCOMPARE(valueOf(args, "--lora-alpha").toFloat(), 16.0f);
    QCOMPARE(valueOf(args, "--lora-target-modules"), QString("linear_qkv,linear_fc1"));
    QCOMPARE(valueOf(args, "--lora-dropout").toFloat(), 0.05f);
    QCOMPARE(valueOf(args, "--load"), ckpt);
    QVERIFY(args.contains("--finetune"));
    QVERIFY(args.contains("--sft"));
    // The Plan's estimate is LoRA's: AdamW moments for the adapters alone, so less optimizer
    // memory than the full-parameter fine-tune of the same base.
    const PlanAnalysis lora = analyzePlan(plan, 0);
    FineTuneSettings full_settings = s;
    full_settings.loraRank = 0;
    Plan full = fineTuneLaunch(base, 2, ClusterSettings{}, LaunchSettings{}, full_settings).plan;
    normalizePlan(full);
    const PlanAnalysis whole = analyzePlan(full, 0);
    QVERIFY(lora.memory && whole.memory);
    const StageEstimate& a = lora.memory->stages[0];
    const StageEstimate& b = whole.memory->stages[0];
    QVERIFY2(a.trainable_parameters > 0 && a.trainable_parameters < b.trainable_parameters / 5,
             qPrintable(QString("trainable %1 vs %2")
                            .arg(a.trainable_parameters)
                            .arg(b.trainable_parameters)));
    QVERIFY2(a.optimizer_bytes < b.optimizer_bytes / 5,
             qPrintable(QString("optimizer bytes %1 vs %2").arg(a.optimizer_bytes).arg(b.optimizer_bytes)));
    // Without SFT and without dropout: neither flag.
    s.sft = false;
    s.loraDropout = 0;
    Plan plain = fineTuneLaunch(base, 2, ClusterSettings{}, LaunchSettings{}, s).plan;
    normalizePlan(plain);
    const QStringList plain_args = trainArguments(buildLaunchCommand(
        plain, analyzePlan(plain, 0), ft.settings, testEnvironment(dir_.path())));
    QCOMPARE(valueOf(plain_args, "--lora-rank"), QString("8"));
    QVERIFY(!plain_args.contains("--sft"));
    QVERIFY(!plain_args.contains("--lora-dropout"));
    s.loraTargets.clear();
    QVERIFY(fineTuneLaunch(base, 2, {}, {}, s).errors.join(' ').contains("--lora-target-modules"));
  }

  // A dataset without its loss mask is refused for SFT with the reason and the files named;
  // without SFT it trains on every token; a missing dataset and saving over the base run's
  // checkpoints are refused too.
  void datasetAndSaveChecks() {
    const QString plain = path("plain");
    writeDataset(plain, false);
    const QString problem = sftDatasetProblem(plain, true);
    QVERIFY2(problem.contains(plain + "_loss_mask.bin") && problem.contains("--sft"),
             qPrintable(problem));
    QVERIFY(sftDatasetProblem(plain, false).isEmpty());
    QVERIFY(sftDatasetProblem(path("nothing"), false).contains("nothing.bin"));
    const TrainOptions base = options(recordedConfig({}));
    FineTuneSettings s;
    s.checkpoint = path("base-ckpt");
    s.dataPath = plain;
    s.sft = false;
    s.saveDir = path("base-ckpt/");
    QVERIFY(fineTuneLaunch(base, 2, {}, {}, s).errors.join(' ').contains("overwrite"));
  }

  // The dialog on a recorded run: its command follows the form (full, then LoRA), a missing
  // mask blocks it with the message, and MainWindow puts the accepted fine-tune in the Plan and
  // Launch views.
  void dialogAndLaunchView() {
    const QString ckpt = path("dialog-ckpt"), data = path("dialog-chat");
    writeCheckpointMarker(ckpt, 400);
    writeDataset(data, true);
    writeDataset(path("dialog-plain"), false);
    storage::RunInfo base;
    base.id = 1;
    base.name = "tiny-base";
    base.world_size = 2;
    base.config_json = recordedConfig({"--save", ckpt.toStdString()});
    MainWindow::Options o;
    o.useSettings = false;
    o.measureCpu = false;
    o.environment = testEnvironment(dir_.path());
    o.database = path("dialog.sqlite");
    MainWindow window(o);
    LaunchSettings current = window.launchView()->form()->settings();
    current.database = o.database;  // as MainWindow opens it: the store History shows
    FineTuneDialog dialog(base, current, window.planModel()->plan().cluster, *o.environment);
    auto* dataEdit = dialog.findChild<QLineEdit*>("fineTuneData");
    auto* preview = dialog.findChild<QPlainTextEdit*>("fineTunePreview");
    QVERIFY(dataEdit && preview);
    dataEdit->setText(path("dialog-plain"));
    QVERIFY2(dialog.problemsText().contains("loss mask"), qPrintable(dialog.problemsText()));
    QVERIFY(!dialog.findChild<QPushButton*>("fineTuneStart")->isEnabled());
    dataEdit->setText(data);
    QVERIFY2(dialog.launch().errors.isEmpty(), qPrintable(dialog.problemsText()));
    QVERIFY(preview->toPlainText().contains("--load " + ckpt));
    QVERIFY(preview->toPlainText().contains("--finetune"));
    QVERIFY(!preview->toPlainText().contains("--lora-rank"));
    dialog.findChild<QRadioButton*>("fineTuneLora")->setChecked(true);
    dialog.findChild<QCheckBox*>("fineTuneTarget_linear_fc2")->setChecked(false);
    QCOMPARE(valueOf(trainArguments(dialog.command()), "--lora-target-modules"),
             QString("linear_qkv,linear_proj,linear_fc1"));
    QCOMPARE(valueOf(trainArguments(dialog.command()), "--lora-rank"), QString("8"));
    dialog.findChild<QSpinBox*>("fineTuneIterations")->setValue(30);
    QCOMPARE(valueOf(trainArguments(dialog.command()), "--train-iters"), QString("30"));
    // The save directory follows the run name until edited.
    dialog.findChild<QLineEdit*>("fineTuneRunName")->setText("tiny-lora");
    QCOMPARE(valueOf(trainArguments(dialog.command()), "--save"),
             checkpointDirectory(LaunchSettings{}, *o.environment, "tiny-lora"));

    window.applyFineTune(dialog.launch(), false);
    QCOMPARE(window.currentView(), MainWindow::View::kLaunch);
    QCOMPARE(window.planModel()->plan().options.train_iters, 30);
    QVERIFY(window.planModel()->plan().options.finetune);
    const QStringList launched = trainArguments(window.launchView()->command());
    QCOMPARE(launched, trainArguments(dialog.command()));
    QCOMPARE(valueOf(launched, "--db"), o.database);  // recorded beside the base run
  }

  // The base of a fine-tune, from the records: the newest run before it that saved into the
  // directory it loaded; none for a resume (no --finetune) or a base this store lacks.
  void baseFromRecords() {
    const std::string ckpt = path("lineage-ckpt").toStdString();
    std::vector<storage::RunInfo> runs(4);
    runs[0].id = 1;  // saved elsewhere
    runs[0].config_json = recordedConfig({"--save", path("other").toStdString()});
    runs[1].id = 2;  // the base
    runs[1].config_json = recordedConfig({"--save", ckpt});
    runs[2].id = 3;  // the fine-tune
    runs[2].config_json = recordedConfig({"--load", ckpt, "--finetune"});
    runs[3].id = 4;  // a later run into the same directory is not its base
    runs[3].config_json = recordedConfig({"--save", ckpt, "--load", ckpt});
    auto config = [&](qint64 id) { return runs[static_cast<size_t>(id - 1)].config_json; };
    QCOMPARE(fineTuneCheckpoint(runs[2]), QString::fromStdString(ckpt));
    QCOMPARE(fineTuneBase(runs[2], runs, config), std::optional<qint64>(2));
    QCOMPARE(fineTuneBase(runs[3], runs, config), std::optional<qint64>());  // a resume
    QCOMPARE(fineTuneBase(runs[1], runs, config), std::optional<qint64>());
    std::vector<storage::RunInfo> withoutBase = {runs[0], runs[2]};
    QCOMPARE(fineTuneBase(runs[2], withoutBase, config), std::optional<qint64>());
  }

  // History on a real store: "Fine-tune from this checkpoint…" is offered on a run that saved,
  // "Compare with base" on its fine-tune, selecting both in the Compare tab.
  void compareWithBaseInHistory() {
    const QString db = path("history.sqlite");
    const std::string ckpt = path("history-ckpt").toStdString();
    std::int64_t baseId = 0, ftId = 0;
    {
      auto store = std::move(storage::RunStore::open(db.toStdString()).value());
      addRun(*store, "unrelated", recordedConfig({}), 5, 3.0);
      baseId = addRun(*store, "base", recordedConfig({"--save", ckpt}), 20, 2.5);
      ftId = addRun(*store, "base-sft", recordedConfig({"--load", ckpt, "--finetune"}), 10, 1.5);
    }
    HistoryView view;
    view.resize(1100, 700);
    view.show();
    QSignalSpy parsed(&view, &HistoryView::settingsParsed);
    view.setDatabase(db);
    QVERIFY(parsed.wait(10000));
    QCOMPARE(view.baseRunOf(ftId), std::optional<qint64>(baseId));
    view.selectRuns({baseId});
    QVERIFY(view.fineTuneAction()->isEnabled());
    QVERIFY(!view.compareBaseAction()->isEnabled());
    std::vector<storage::RunInfo> asked;
    connect(&view, &HistoryView::fineTuneRequested, this,
            [&](const storage::RunInfo& run) { asked.push_back(run); });
    view.fineTuneAction()->trigger();
    QCOMPARE(asked.size(), size_t(1));
    const storage::RunInfo& requested = asked[0];
    QCOMPARE(requested.id, baseId);
    QVERIFY(requested.config_json.find("history-ckpt") != std::string::npos);
    view.selectRuns({ftId});
    QVERIFY(view.compareBaseAction()->isEnabled());
    view.compareBaseAction()->trigger();
    QCOMPARE(view.selectedRuns().size(), 2);
    QVERIFY(view.selectedRuns().contains(baseId) && view.selectedRuns().contains(ftId));
    QCOMPARE(view.analysisTabs()->currentIndex(), int(HistoryView::kCompareTab));
    QVERIFY(view.comparePanel()->isVisible());
    // The panel's columns: the base first (oldest), then the fine-tune.
    const QTableWidget* metrics = view.comparePanel()->metricsTable();
    QCOMPARE(metrics->columnCount(), 2);
    QCOMPARE(metrics->horizontalHeaderItem(0)->text(), QString("base"));
    QCOMPARE(metrics->horizontalHeaderItem(1)->text(), QString("base-sft"));
  }

  // End to end, one rank: a real base run that saves; its fine-tune (full parameters, no SFT:
  // flags every `lattice train` knows) put in the Launch view and started as a plan's run;
  // the run is recorded with --load and --finetune, and History finds its base.
  void startedFineTuneFindsItsBase() {
    const QString db = path("e2e.sqlite"), ckpt = path("e2e-base"), text = path("e2e.txt");
    const QString prefix = path("e2e");
    {
      QFile f(text);  // NullTokenizer documents: ids below the vocabulary, one a line
      QVERIFY(f.open(QIODevice::WriteOnly));
      for (int i = 0; i < 300; ++i)
        f.write(QString("%1 %2 %3 7 8 9\n").arg(i % 200).arg(i % 13).arg(i % 7).toUtf8());
    }
    testing::Run p = testing::run_process(
        LATTICE_CLI_PATH,
        {"data", "preprocess", "--input", text, "--input-format", "lines", "--output-prefix",
         prefix, "--tokenizer-type", "NullTokenizer", "--vocab-size", "300", "--append-eod"});
    QVERIFY2(p.exit_code == 0, qPrintable(p.err));
    const QStringList model = {"--num-layers",          "1", "--hidden-size",  "32",
                               "--num-attention-heads", "2", "--seq-length",   "32",
                               "--micro-batch-size",    "2", "--threads",      "1",
                               "--eval-iters",          "0", "--log-interval", "1"};
    testing::Run b = testing::run_process(
        LATTICE_CLI_PATH,
        QStringList{"train", "--mock-data", "--vocab-size", "300", "--train-iters", "4", "--save",
                    ckpt, "--db", db, "--run-name", "e2e-base"} +
            model);
    QVERIFY2(b.exit_code == 0, qPrintable(b.err));

    MainWindow::Options o;
    o.useSettings = false;
    o.measureCpu = false;
    o.database = db;
    LaunchEnvironment env = LaunchEnvironment::detect();
    env.lattice = LATTICE_CLI_PATH;
    o.environment = env;
    MainWindow window(o);
    window.show();
    HistoryView* history = window.historyView();
    QTRY_VERIFY_WITH_TIMEOUT(history->tableModel()->rowCount() == 1, 10000);
    const storage::RunInfo baseRow = history->tableModel()->runs().front();
    QTRY_VERIFY_WITH_TIMEOUT(history->tableModel()->settings(baseRow.id) != nullptr, 10000);
    storage::RunInfo base = baseRow;
    base.config_json = history->tableModel()->settings(baseRow.id)->config_json;

    LaunchSettings current = window.launchView()->form()->settings();
    current.database = db;
    FineTuneDialog dialog(base, current, window.planModel()->plan().cluster,
                          window.launchView()->environment());
    FineTuneSettings s = dialog.fineTuneSettings();
    s.dataPath = prefix + "_text_document";
    s.sft = false;
    s.iterations = 3;
    s.lr = 1e-4;
    s.runName = "e2e-base-ft";
    s.saveDir = path("e2e-ft");
    dialog.setFineTuneSettings(s);
    QVERIFY2(dialog.command().canStart(), qPrintable(dialog.problemsText()));
    LaunchView& launch = *window.launchView();
    QSignalSpy ended(&launch, &LaunchView::runEnded);
    window.applyFineTune(dialog.launch(), true);
    QVERIFY2(launch.isRunning(), qPrintable(launch.command().errors.join('\n')));
    QVERIFY2(ended.wait(90000), "the fine-tune did not end within 90 s");
    auto* console = launch.findChild<QPlainTextEdit*>("console");
    QVERIFY2(ended.front().at(0).toBool(), qPrintable(console->toPlainText().right(3000)));
    QVERIFY(console->toPlainText().contains("--finetune"));

    history->refresh();
    QTRY_VERIFY_WITH_TIMEOUT(history->tableModel()->rowCount() == 2, 10000);
    qint64 ftId = 0;
    for (const storage::RunInfo& r : history->tableModel()->runs())
      if (r.name == "e2e-base-ft") ftId = r.id;
    QVERIFY(ftId > 0);
    QTRY_VERIFY_WITH_TIMEOUT(history->baseRunOf(ftId) == std::optional<qint64>(baseRow.id), 10000);
    QVERIFY(QFileInfo::exists(path("e2e-ft") + "/latest_checkpointed_iteration.txt"));
  }
};

QTEST_MAIN(TestStudioFineTune)
#include "test_studio_finetune.moc"
