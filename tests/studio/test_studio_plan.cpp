// The Plan view's model and form: validation messages land next to the field they concern and
// block Launch; every edit is one undo step and undo restores the plan before it; presets,
// configuration files and flags round-trip through the engine's parser.
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QLabel>
#include <QLayout>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include "app/main_window.h"
#include "app/studio_settings.h"
#include "lattice/storage/run_store.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/form_section.h"
#include "plan/model_presets.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "plan/text_format.h"
#include "plan/train_flags.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

MainWindow::Options quietWindow() {
  MainWindow::Options o;
  o.useSettings = false;
  o.measureCpu = false;
  LaunchEnvironment env;
  env.lattice = LATTICE_CLI_PATH;
  env.mpirun = "/usr/bin/mpirun";
  env.cores = 2;
  env.dataDir = QDir::tempPath();
  env.defaultDatabase = QDir::temp().filePath("runs.sqlite");
  o.environment = env;
  return o;
}

QString describe(const QWidget* w) {
  if (!w->objectName().isEmpty()) return w->objectName();
  if (auto* label = qobject_cast<const QLabel*>(w)) return "label '" + label->text() + "'";
  for (const QWidget* child : w->findChildren<QWidget*>())
    if (!child->objectName().isEmpty() && !child->objectName().startsWith("qt_"))
      return child->objectName();
  return w->metaObject()->className();
}

// The rows of the Plan form drawn lower than they need (0 px: gone from sight though Tab still
// reaches them) or over another row, as "Cluster: device is 0 px high, needs 22".
QStringList squeezedRows(QWidget* root) {
  QStringList problems;
  for (FormSection* section : root->findChildren<FormSection*>()) {
    QList<QWidget*> shown;
    QLayout* layout = section->layout();
    for (int i = 0; i < layout->count(); i++)
      if (QWidget* w = layout->itemAt(i)->widget(); w && w->isVisibleTo(section)) shown << w;
    for (int i = 0; i < shown.size(); i++) {
      QWidget* w = shown[i];
      const int needed =
          w->hasHeightForWidth() ? w->heightForWidth(w->width()) : w->minimumSizeHint().height();
      if (w->height() < needed)
        problems << QString("%1: %2 is %3 px high, needs %4")
                        .arg(section->title(), describe(w))
                        .arg(w->height())
                        .arg(needed);
      for (int j = i + 1; j < shown.size(); j++)
        if (w->geometry().intersects(shown[j]->geometry()))
          problems << QString("%1: %2 overlaps %3")
                          .arg(section->title(), describe(w), describe(shown[j]));
    }
  }
  return problems;
}

QString errorText(QWidget* root, const QString& field) {
  auto* label = root->findChild<QLabel*>(FormSection::errorLabelName(field));
  if (!label || !label->isVisibleTo(root)) return {};
  return label->text();
}

}  // namespace

class TestStudioPlan : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  void defaultPlanIsTheDemoAndValid() {
    PlanModel model;
    QVERIFY2(model.isValid(),
             qPrintable(model.analysis().errors.empty() ? QString()
                                                        : model.analysis().errors.front().message));
    QCOMPARE(presetIndexOf(model.plan().options), 0);
    QCOMPARE(model.plan().options.model.vocab_size, 4096);
    QVERIFY(model.analysis().memory.has_value());
  }

  // The status bar's summary is the plan's: it says so and shows with the Plan and Launch views
  // only (beside a run on the Dashboard it read as that run's layout).
  void thePlanSummaryShowsWithThePlanOnly() {
    MainWindow window(quietWindow());
    auto* summary = window.findChild<QLabel*>("plan-summary");
    QVERIFY(summary);
    QVERIFY2(summary->text().startsWith("Plan: Demo model"), qPrintable(summary->text()));
    for (MainWindow::View view : {MainWindow::View::kDashboard, MainWindow::View::kHistory,
                                  MainWindow::View::kPlayground}) {
      window.showView(view);
      QVERIFY(summary->isHidden());
    }
    window.showView(MainWindow::View::kLaunch);
    QVERIFY(!summary->isHidden());
    window.showView(MainWindow::View::kPlan);
    QVERIFY(!summary->isHidden());
  }

  void tpThatDoesNotDivideTheHeadsShowsTheErrorAndDisablesLaunch() {
    MainWindow window(quietWindow());
    window.show();
    auto* tp = window.findChild<QSpinBox*>("tensor-model-parallel-size");
    QVERIFY(tp);
    QPushButton* start = window.launchView()->startButton();
    QVERIFY2(start->isEnabled(), "the demo plan should be launchable");

    tp->setValue(3);  // the demo model has 4 heads
    const QString message = errorText(&window, "tensor-model-parallel-size");
    QVERIFY2(message.contains("--tensor-model-parallel-size 3 does not divide "
                              "--num-attention-heads 4"),
             qPrintable("error label under TP says: '" + message + "'"));
    QVERIFY2(!window.planModel()->isValid(), "the plan must be invalid");
    QVERIFY2(!start->isEnabled(), "Start must be disabled while the plan is invalid");

    tp->setValue(1);
    QVERIFY(errorText(&window, "tensor-model-parallel-size").isEmpty());
    QVERIFY(start->isEnabled());
  }

  // Issue 29: typing 3 into TP and pressing Tab showed the messages and drew another row of the
  // form 0 px high (Pipeline parallel, Device, Precision or Micro batch, by the sequence).
  void everyRowStaysVisibleThroughInvalidAndValidEdits() {
    MainWindow window(quietWindow());
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    auto type = [&](const QString& field, const QString& text, Qt::Key key) {
      auto* spin = window.findChild<QSpinBox*>(field);
      QVERIFY2(spin, qPrintable(field));
      spin->setFocus();
      spin->selectAll();
      QTest::keyClicks(spin, text);
      QTest::keyClick(spin, key);
      QCOMPARE(spin->value(), text.toInt());
    };
    auto edit = [&](const std::function<void(Plan&)>& change) {
      window.planModel()->edit("test edit", change);
    };
    const std::vector<std::pair<QString, std::function<void()>>> steps = {
        {"TP 3, Tab", [&] { type("tensor-model-parallel-size", "3", Qt::Key_Tab); }},
        {"PP 2, Enter", [&] { type("pipeline-model-parallel-size", "2", Qt::Key_Return); }},
        {"micro batch 3, Tab", [&] { type("micro-batch-size", "3", Qt::Key_Tab); }},
        {"bf16", [&] { edit([](Plan& p) { setPrecision(p.options, "bf16"); }); }},
        {"custom device", [&] { edit([](Plan& p) { p.cluster.device = kDeviceCustom; }); }},
        {"TP 1, Enter", [&] { type("tensor-model-parallel-size", "1", Qt::Key_Return); }},
        {"PP 1, Tab", [&] { type("pipeline-model-parallel-size", "1", Qt::Key_Tab); }},
        {"micro batch 8, Enter", [&] { type("micro-batch-size", "8", Qt::Key_Return); }},
        {"fp32 on the CPU",
         [&] {
           edit([](Plan& p) {
             setPrecision(p.options, "fp32");
             p.cluster.device = kDeviceCpu;
           });
         }},
        {"TP 3 again, Tab", [&] { type("tensor-model-parallel-size", "3", Qt::Key_Tab); }}};
    for (const auto& [name, step] : steps) {
      step();
      if (QTest::currentTestFailed()) return;
      QApplication::processEvents();
      const QStringList squeezed = squeezedRows(window.planView());
      QVERIFY2(squeezed.isEmpty(), qPrintable("after " + name + ": " + squeezed.join("; ")));
    }
    QVERIFY2(!window.planModel()->isValid(), "the last step leaves TP 3, which is invalid");
  }

  // The Vision tower section: its checkbox switches --vision-model-type clip on and shows the
  // sizes (hidden while off) and the planner's figures; a size edit reaches the flags a launch
  // passes and is one undo step.
  void theVisionTowerSectionSetsTheTowerAndShowsItsFigures() {
    MainWindow window(quietWindow());
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    auto* on = window.findChild<QCheckBox*>("vision-model-type");
    auto* width = window.findChild<QSpinBox*>("vision-hidden-size");
    auto* note = window.findChild<QLabel*>("vision-figures");
    QVERIFY(on && width && note);
    QVERIFY(!on->isChecked());
    QVERIFY(!width->isVisibleTo(window.planView()));
    on->click();
    PlanModel* model = window.planModel();
    QCOMPARE(model->plan().options.vision_model_type, std::string("clip"));
    QVERIFY2(model->isValid(),
             qPrintable(model->isValid() ? QString() : model->analysis().errors[0].message));
    QVERIFY(width->isVisibleTo(window.planView()));
    const VisionEstimate v = estimate_vision(
        with_default_global_batch(model->plan().options, model->plan().cluster.world()));
    QVERIFY2(note->text().startsWith(humanCount(static_cast<double>(v.parameters)) +
                                     " parameters per stage 0 rank"),
             qPrintable(note->text()));
    width->setValue(64);
    QCOMPARE(model->plan().options.vision.hidden_size, 64);
    const QStringList flags = changedTrainFlags(model->plan().options);
    QVERIFY2(flags.join(' ').contains("--vision-model-type clip") &&
                 flags.join(' ').contains("--vision-hidden-size 64"),
             qPrintable(flags.join(' ')));
    QApplication::processEvents();
    const QStringList squeezed = squeezedRows(window.planView());
    QVERIFY2(squeezed.isEmpty(), qPrintable(squeezed.join("; ")));
    window.findChild<QAction*>("undo")->trigger();
    QCOMPARE(model->plan().options.vision.hidden_size, 32);
    on->click();
    QVERIFY(model->plan().options.vision_model_type.empty());
    QVERIFY(!width->isVisibleTo(window.planView()));
  }

  void worldSizeErrorsGoToTheDevicesRow() {
    MainWindow window(quietWindow());
    window.show();
    window.findChild<QSpinBox*>("pipeline-model-parallel-size")->setValue(2);
    QVERIFY2(errorText(&window, "world").contains("is not a multiple of"),
             qPrintable(errorText(&window, "world")));
    window.findChild<QSpinBox*>("devices-per-node")->setValue(2);
    QVERIFY(errorText(&window, "world").isEmpty());
    QVERIFY(window.planModel()->isValid());
  }

  void undoRestoresThePreviousPlan() {
    PlanModel model;
    const Plan before = model.plan();
    model.edit("Set TP", [](Plan& p) { p.options.model.tensor_model_parallel_size = 2; });
    model.edit("Set devices", [](Plan& p) { p.cluster.devices_per_node = 8; });
    QCOMPARE(model.undoStack()->count(), 2);
    model.undoStack()->undo();
    QCOMPARE(model.plan().cluster.devices_per_node, 1);
    QCOMPARE(model.plan().options.model.tensor_model_parallel_size, 2);
    model.undoStack()->undo();
    QVERIFY2(samePlan(model.plan(), before), "two undos must give back the first plan");
    model.undoStack()->redo();
    QCOMPARE(model.plan().options.model.tensor_model_parallel_size, 2);
  }

  void undoAfterAPresetRestoresTheModel() {
    PlanModel model;
    const Plan before = model.plan();
    Plan gpt3 = model.plan();
    applyPreset(gpt3.options, modelPresets()[9]);
    model.replacePlan(gpt3, "Preset GPT-3 175B");
    QCOMPARE(model.plan().options.model.num_layers, 96);
    model.undoStack()->undo();
    QVERIFY(samePlan(model.plan(), before));
  }

  void quickEditsOfOneFieldAreOneUndoStep() {
    PlanModel model;
    for (int layers : {5, 6, 7})
      model.edit(
          "Set layers", [&](Plan& p) { p.options.model.num_layers = layers; }, "num-layers");
    QCOMPARE(model.undoStack()->count(), 1);
    model.undoStack()->undo();
    QCOMPARE(model.plan().options.model.num_layers, 4);
  }

  void anEditThatChangesNothingIsNoUndoStep() {
    PlanModel model;
    model.edit("Set layers", [](Plan& p) { p.options.model.num_layers = 4; });
    QCOMPARE(model.undoStack()->count(), 0);
  }

  void undoActionOfTheWindowUndoesAFormEdit() {
    MainWindow window(quietWindow());
    auto* heads = window.findChild<QSpinBox*>("num-attention-heads");
    heads->setValue(8);
    QCOMPARE(window.planModel()->plan().options.model.num_attention_heads, 8);
    auto* undo = window.findChild<QAction*>("undo");
    QVERIFY(undo && undo->isEnabled());
    undo->trigger();
    QCOMPARE(window.planModel()->plan().options.model.num_attention_heads, 4);
    QCOMPARE(heads->value(), 4);  // the form follows the model
  }

  // Issue 29: the field's own line edit took Ctrl+Z although it had nothing to undo.
  void ctrlZUndoesThePlanWhileAFormFieldHasFocus() {
    MainWindow window(quietWindow());
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    auto* tp = window.findChild<QSpinBox*>("tensor-model-parallel-size");
    tp->setFocus();
    tp->selectAll();
    QTest::keyClicks(tp, "2");
    QTest::keyClick(tp, Qt::Key_Return);
    QCOMPARE(window.planModel()->plan().options.model.tensor_model_parallel_size, 2);
    QVERIFY(tp->hasFocus());

    QTest::keyClick(tp, Qt::Key_Z, Qt::ControlModifier);
    QCOMPARE(window.planModel()->plan().options.model.tensor_model_parallel_size, 1);
    QCOMPARE(tp->value(), 1);
    QTest::keyClick(tp, Qt::Key_Z, Qt::ControlModifier | Qt::ShiftModifier);
    QCOMPARE(window.planModel()->plan().options.model.tensor_model_parallel_size, 2);

    // Typing not yet committed is the field's to undo first; then the plan's.
    tp->selectAll();
    QTest::keyClicks(tp, "4");
    QTest::keyClick(tp, Qt::Key_Z, Qt::ControlModifier);
    QCOMPARE(tp->text(), QString("2"));
    QCOMPARE(window.planModel()->plan().options.model.tensor_model_parallel_size, 2);
    QTest::keyClick(tp, Qt::Key_Z, Qt::ControlModifier);
    QCOMPARE(window.planModel()->plan().options.model.tensor_model_parallel_size, 1);
  }

  // Issue 29: Ctrl+N replaced a modified plan without asking and emptied the undo history.
  void newPlanAsksBeforeDiscardingAModifiedPlan() {
    MainWindow window(quietWindow());
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    auto* layers = window.findChild<QSpinBox*>("num-layers");
    layers->setValue(6);
    QVERIFY(window.isWindowModified());
    QString asked;  // the question's text, empty when none came
    // Ctrl+N, and `answer` to the question it may ask.
    auto pressCtrlN = [&](QMessageBox::StandardButton answer) {
      window.activateWindow();  // again, once a question has closed (offscreen does not)
      QVERIFY(QTest::qWaitForWindowActive(&window));
      asked.clear();
      QTimer::singleShot(0, &window, [&asked, answer] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        asked = box->text();
        box->button(answer)->click();
      });
      QTest::keyClick(&window, Qt::Key_N, Qt::ControlModifier);
      QApplication::processEvents();
    };

    pressCtrlN(QMessageBox::Cancel);
    QVERIFY2(asked.contains("not saved"), qPrintable("asked: '" + asked + "'"));
    QCOMPARE(layers->value(), 6);  // Cancel keeps the plan

    pressCtrlN(QMessageBox::Discard);
    QVERIFY2(!asked.isEmpty(), "Ctrl+N must ask before discarding the modified plan");
    QVERIFY(samePlan(window.planModel()->plan(), [] {
      Plan p = defaultPlan();
      normalizeOptions(p.options);
      return p;
    }()));
    QVERIFY(!window.isWindowModified());
    window.findChild<QAction*>("undo")->trigger();  // the discarded plan is one Undo away
    QCOMPARE(layers->value(), 6);

    window.findChild<QAction*>("redo")->trigger();
    pressCtrlN(QMessageBox::Cancel);  // the new plan is unmodified: nothing to ask
    QVERIFY2(asked.isEmpty(), qPrintable("asked although nothing was modified: " + asked));
  }

  void everyMessageMapsToTheFlagItNames() {
    QCOMPARE(fieldOfMessage("--tensor-model-parallel-size 3 does not divide "
                            "--num-attention-heads 16"),
             QString("tensor-model-parallel-size"));
    QCOMPARE(fieldOfMessage("world size 6 (--world-size, or the ranks started) is not a multiple"),
             QString("world"));
    QCOMPARE(fieldOfMessage("--bf16, --fp16 and --fp64 exclude each other"), QString("precision"));
    QCOMPARE(fieldOfMessage("no flag here"), QString());
  }

  void configFilesRoundTripThroughTheEngineParser() {
    QTemporaryDir dir;
    Plan plan = defaultPlan();
    applyPreset(plan.options, modelPresets()[1]);
    plan.options.model.tensor_model_parallel_size = 2;
    plan.options.parallel.sequence_parallel = true;
    plan.options.parallel.recompute_granularity = "selective";
    setPrecision(plan.options, "bf16");
    const QString path = dir.filePath("run.json");
    QVERIFY(writeConfigFile(path, plan.options));
    Result<TrainOptions> back = readConfigFile(path);
    QVERIFY2(back, back ? "" : back.status().message().c_str());
    QCOMPARE(QString::fromStdString(train_options_json(*back)),
             QString::fromStdString(train_options_json(plan.options)));
    // `lattice train --config` reads the same file (parse_train_flags is its parser).
    Result<TrainOptions> engine = parse_train_flags({"--config", path.toStdString()});
    QVERIFY(engine);
    QCOMPARE(engine->model.hidden_size, 768);
  }

  void savedConfigTrainsWhatStartWouldAndOpensBack() {
    QTemporaryDir dir;
    const QString path = dir.filePath("plan.json");
    {
      MainWindow window(quietWindow());
      window.findChild<QSpinBox*>("num-layers")->setValue(6);
      LaunchSettings launch = window.launchView()->form()->settings();
      launch.data = DataSource::kMock;
      launch.extraFlags = "--train-iters 7";
      window.launchView()->form()->setSettings(launch);
      QString error;
      QVERIFY2(window.saveConfigFile(path, &error), qPrintable(error));
      QVERIFY(!window.isWindowModified());
    }
    // `lattice train --config` reads it: layers from the plan, data and flags from Launch.
    Result<TrainOptions> engine = parse_train_flags({"--config", path.toStdString()});
    QVERIFY(engine);
    QCOMPARE(engine->model.num_layers, 6);
    QVERIFY(engine->mock_data);
    QCOMPARE(engine->train_iters, 7);
    QVERIFY(engine->validate(/*require_data=*/true).empty());

    MainWindow other(quietWindow());
    QString error;
    QVERIFY2(other.openConfigFile(path, &error), qPrintable(error));
    QCOMPARE(other.planModel()->plan().options.model.num_layers, 6);
    QCOMPARE(static_cast<int>(other.launchView()->form()->settings().data),
             static_cast<int>(DataSource::kMock));
    other.planModel()->undoStack()->undo();  // opening is one undoable step
    QCOMPARE(other.planModel()->plan().options.model.num_layers, 4);
  }

  void thePlanAndTheLaunchSettingsSurviveARestart() {
    QTemporaryDir dir;
    QSettings settings(dir.filePath("studio.ini"), QSettings::IniFormat);
    Plan plan = defaultPlan();
    applyPreset(plan.options, modelPresets()[7]);
    plan.cluster = {.name = {}, .nodes = 4, .devices_per_node = 8, .device = "a100-80gb"};
    plan.options.parallel.pipeline_model_parallel_size = 4;
    savePlan(settings, plan);
    LaunchSettings launch;
    launch.data = DataSource::kDataset;
    launch.dataPath = "/data/corpus_text_document";
    launch.tags = {"baseline", "tp2"};
    launch.extraFlags = "--train-iters 50";
    launch.saveCheckpoints = true;
    saveLaunchSettings(settings, launch);
    settings.sync();

    QSettings reread(dir.filePath("studio.ini"), QSettings::IniFormat);
    const std::optional<Plan> back = loadPlan(reread);
    QVERIFY(back.has_value());
    QVERIFY2(samePlan(*back, plan),
             qPrintable(QString::fromStdString(train_options_json(back->options))));
    const LaunchSettings l = loadLaunchSettings(reread);
    QCOMPARE(static_cast<int>(l.data), static_cast<int>(DataSource::kDataset));
    QCOMPARE(l.dataPath, launch.dataPath);
    QCOMPARE(l.tags, launch.tags);
    QCOMPARE(l.extraFlags, launch.extraFlags);
    QVERIFY(l.saveCheckpoints);
  }

  // Issue 29: the window could not be made narrower than 1075 px (a Dashboard showing runs:
  // 1550 px with three). Every view, with runs shown, fits in 800 px.
  void theWindowShrinksTo800PixelsOnEveryView() {
    QTemporaryDir dir;
    MainWindow::Options options = quietWindow();
    options.database = dir.filePath("runs.sqlite");
    QList<qint64> runs;
    {
      Result<std::unique_ptr<storage::RunStore>> store =
          storage::RunStore::open(options.database.toStdString());
      QVERIFY(store);
      for (int i = 0; i < 3; i++) {
        const QString save = dir.filePath(QString("checkpoints/run-20261203-190229-a%1").arg(i));
        QVERIFY(QDir().mkpath(save));
        QFile latest(save + "/latest_checkpointed_iteration.txt");
        QVERIFY(latest.open(QIODevice::WriteOnly) && latest.write("20\n") > 0);
        storage::NewRun r;
        r.name = QString("run-20261203-190229-a%1").arg(i).toStdString();
        r.host = "host";
        r.config_json = "{\"seq-length\": 64, \"save\": \"" + save.toStdString() + "\"}";
        Result<int64_t> id = (*store)->create_run(r);
        QVERIFY(id && (*store)->mark_running(*id));
        for (int step = 1; step <= 20; step++)
          QVERIFY((*store)->log_step(*id, step, {{"lm loss", 5.0 - step * 0.1}}, {}));
        runs << *id;
      }
    }
    MainWindow window(options);
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    window.showRuns(runs);
    for (int v = 0; v < MainWindow::kViewCount; v++) {
      const auto view = static_cast<MainWindow::View>(v);
      window.showView(view);
      QTest::qWait(300);  // the Dashboard's and History's reads, the Playground's list
      window.resize(800, 600);
      QApplication::processEvents();
      QVERIFY2(window.width() <= 800,
               qPrintable(QString("%1 view: the window stays %2 px wide (minimum %3 px)")
                              .arg(MainWindow::viewName(view))
                              .arg(window.width())
                              .arg(window.minimumSizeHint().width())));
      window.resize(1280, 800);
    }
  }

  void changedFlagsParseBackToTheSameOptions() {
    Plan plan = defaultPlan();
    plan.options.parallel.pipeline_model_parallel_size = 2;
    plan.options.parallel.use_distributed_optimizer = true;
    plan.options.optim.lr = 3e-4f;
    std::vector<std::string> args;
    for (const QString& f : changedTrainFlags(plan.options)) args.push_back(f.toStdString());
    Result<TrainOptions> back = parse_train_flags(args);
    QVERIFY(back);
    QCOMPARE(QString::fromStdString(train_options_json(*back)),
             QString::fromStdString(train_options_json(plan.options)));
  }
};

QTEST_MAIN(TestStudioPlan)
#include "test_studio_plan.moc"
