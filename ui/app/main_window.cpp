// MainWindow: views, settings, status, close.
#include "app/main_window.h"

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QFileInfo>
#include <QLabel>
#include <QMessageBox>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>

#include "app/icons.h"
#include "app/studio_settings.h"
#include "dashboard/dashboard_view.h"
#include "history/finetune_dialog.h"
#include "history/history_view.h"
#include "lattice/train.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/model_presets.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "plan/text_format.h"
#include "playground/playground_io.h"
#include "playground/playground_view.h"

namespace lattice::ui {

namespace {

const char* const kViewNames[] = {"plan", "launch", "dashboard", "history", "playground"};

}  // namespace

MainWindow::MainWindow(const Options& options, QWidget* parent)
    : QMainWindow(parent),
      options_(options),
      environment_(options.environment ? *options.environment : LaunchEnvironment::detect()),
      model_(new PlanModel(this)),
      stack_(new QStackedWidget(this)) {
  setObjectName("main-window");
  setWindowIcon(appIcon());
  setCentralWidget(stack_);
  createViews();
  createActions();
  createMenus();
  createToolBar();
  planSummary_ = new QLabel(this);
  planSummary_->setObjectName("plan-summary");
  statusBar()->addPermanentWidget(planSummary_);
  connect(model_, &PlanModel::planChanged, this, &MainWindow::updateStatus);
  // The device's saved calibration (docs/studio.md "Calibrate"); tests and screenshots, which
  // use no settings, start from the planner's defaults.
  if (options_.useSettings) model_->setUseSavedCalibrations(true);
  connect(model_->undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateTitle);
  connect(&cpuMeasure_, &QFutureWatcher<double>::finished, this, [this] {
    const double gflops = cpuMeasure_.result();
    model_->setCpuGflops(gflops);
    if (options_.useSettings) {
      QSettings settings;
      saveCpuGflops(settings, gflops);
    }
    statusBar()->showMessage(tr("This machine's SGEMM rate: %1 GFLOP/s").arg(gflops, 0, 'f', 1),
                             5000);
  });
  resize(1280, 800);
  if (options_.useSettings) restoreSettings();
  if (!options_.database.isEmpty()) {
    LaunchSettings launch = launchView_->form()->settings();
    launch.database = options_.database;
    launchView_->form()->setSettings(launch);
  }
  useDatabase(database(), StoreAccess::kReadWrite);
  updateStatus();
  updateTitle();
  if (options_.measureCpu && model_->cpuGflops() <= 0) measureCpu();
}

MainWindow::~MainWindow() {
  cpuMeasure_.waitForFinished();
}

void MainWindow::createViews() {
  planView_ = new PlanView(model_, stack_);
  launchView_ = new LaunchView(model_, environment_, stack_);
  planView_->setLaunchContext(environment_, [this] { return launchView_->form()->settings(); });
  dashboard_ = new DashboardView(stack_);
  history_ = new HistoryView(stack_);
  playground_ = new PlaygroundView(stack_);
  for (QWidget* view : {static_cast<QWidget*>(planView_), static_cast<QWidget*>(launchView_),
                        static_cast<QWidget*>(dashboard_), static_cast<QWidget*>(history_),
                        static_cast<QWidget*>(playground_)})
    stack_->addWidget(view);

  // A launched run opens in the Dashboard as soon as the store has it (the Launch view's
  // console stays one Ctrl+2 away) and appears in History: read-only when the store is a
  // cluster job's own, which the job writes.
  connect(launchView_, &LaunchView::runRecorded, this,
          [this](const QString& database, const RunSnapshot& run, bool jobStore) {
            useDatabase(database, jobStore ? StoreAccess::kReadOnly : StoreAccess::kReadWrite);
            showRuns({run.id});
            showView(View::kDashboard);
            statusBar()->showMessage(tr("Run '%1' is in the run store").arg(run.name), 5000);
          });
  connect(history_, &HistoryView::openInDashboard, this, [this](const QList<qint64>& ids) {
    dashboard_->showRuns(ids);
    showView(View::kDashboard);
  });
  connect(history_, &HistoryView::openInPlayground, this, [this](qint64 id) {
    playground_->openRun(id);
    showView(View::kPlayground);
  });
  connect(history_, &HistoryView::fineTuneRequested, this, [this](const storage::RunInfo& base) {
    // Recorded beside its base run: History finds the base in the same store.
    LaunchSettings current = launchView_->form()->settings();
    if (history_->access() == StoreAccess::kReadWrite && !history_->database().isEmpty())
      current.database = history_->database();
    FineTuneDialog dialog(base, current, model_->plan().cluster, environment_, this);
    if (dialog.exec() == QDialog::Accepted) applyFineTune(dialog.launch(), dialog.startWanted());
  });
  connect(dashboard_, &DashboardView::problem, this,
          [this](const QString& message) { statusBar()->showMessage(message, 8000); });
  // A cluster job's views follow its own store while it runs; once its runs are merged into
  // the local history, the views come back to it, and History edits again.
  connect(launchView_, &LaunchView::jobImported, this,
          [this](const QString& database, qint64 runId) {
            useDatabase(database, StoreAccess::kReadWrite);
            if (runId > 0) showRuns({runId});
          });
  connect(launchView_, &LaunchView::runEnded, this,
          [this](bool, const QString& summary) { statusBar()->showMessage(summary, 8000); });
}

QString MainWindow::database() const {
  if (!options_.database.isEmpty()) return options_.database;
  const QString field = launchView_->form()->settings().database;
  if (!field.isEmpty()) return field;
  return environment_.defaultDatabase;
}

void MainWindow::applyFineTune(const FineTuneLaunch& fineTune, bool start) {
  model_->replacePlan(fineTune.plan, tr("Fine-tune"));
  launchView_->form()->setSettings(fineTune.settings);
  showView(View::kLaunch);
  if (start) launchView_->startRun();
}

void MainWindow::useDatabase(const QString& path, StoreAccess access) {
  if (dashboard_->database() != path) dashboard_->setDatabase(path);
  if (history_->database() != path || history_->access() != access)
    history_->setDatabase(path, access);
  if (playground_->database() != path) playground_->setDatabase(path);
}

void MainWindow::showRuns(const QList<qint64>& runIds) {
  dashboard_->showRuns(runIds);
  history_->selectRuns(runIds);
}

void MainWindow::showView(View view) {
  const int index = static_cast<int>(view);
  stack_->setCurrentIndex(index);
  if (index < viewActions_.size()) viewActions_[index]->setChecked(true);
  // The plan's summary belongs to the views that edit and launch the plan; beside a run on the
  // Dashboard or in History it read as that run's layout.
  if (planSummary_) planSummary_->setVisible(view == View::kPlan || view == View::kLaunch);
}

MainWindow::View MainWindow::currentView() const {
  return static_cast<View>(stack_->currentIndex());
}

std::optional<MainWindow::View> MainWindow::viewFromName(const QString& name) {
  for (int i = 0; i < kViewCount; i++)
    if (name.compare(QLatin1String(kViewNames[i]), Qt::CaseInsensitive) == 0)
      return static_cast<View>(i);
  return std::nullopt;
}

QString MainWindow::viewName(View view) {
  return QString::fromLatin1(kViewNames[static_cast<int>(view)]);
}

void MainWindow::setTheme(Theme theme) {
  theme_ = theme;
  applyTheme(theme);
  if (themeGroup_) themeGroup_->actions()[theme == Theme::kDark ? 1 : 0]->setChecked(true);
}

void MainWindow::changeEvent(QEvent* event) {
  QMainWindow::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) refreshIcons();
}

void MainWindow::restoreSettings() {
  QSettings settings;
  if (std::optional<Plan> plan = loadPlan(settings)) model_->resetPlan(*plan);
  launchView_->form()->setSettings(loadLaunchSettings(settings));
  playground_->setSettings(loadPlaygroundSettings(settings));
  model_->setCpuGflops(loadCpuGflops(settings));
  setTheme(loadTheme(settings));
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  planView_->restoreState(settings.value("window/plan_view").toByteArray());
  configPath_ = settings.value("plan/config_path").toString();
  if (const auto view = viewFromName(settings.value("window/view").toString())) showView(*view);
}

void MainWindow::saveSettings() {
  QSettings settings;
  savePlan(settings, model_->plan());
  saveLaunchSettings(settings, launchView_->form()->settings());
  savePlaygroundSettings(settings, playground_->settings());
  saveTheme(settings, theme_);
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  settings.setValue("window/plan_view", planView_->saveState());
  settings.setValue("window/view", viewName(currentView()));
  settings.setValue("plan/config_path", configPath_);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (launchView_->isRunning()) {
    const auto answer =
        QMessageBox::question(this, tr("A run is in progress"),
                              tr("Quitting stops the run (SIGTERM to its ranks). Quit anyway?"),
                              QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
  }
  if (options_.useSettings) saveSettings();
  event->accept();
}

void MainWindow::measureCpu() {
  if (cpuMeasure_.isRunning()) return;
  const int threads = QThread::idealThreadCount();
  statusBar()->showMessage(tr("Measuring this machine's SGEMM rate…"));
  cpuMeasure_.setFuture(QtConcurrent::run([threads] { return measure_sgemm_gflops(threads); }));
}

void MainWindow::updateStatus() {
  const Plan& plan = model_->plan();
  const PlanAnalysis& a = model_->analysis();
  const int preset = presetIndexOf(plan.options);
  QString text = tr("Plan: ") + (preset >= 0 ? modelPresets()[preset].name : tr("custom model"));
  if (a.parameters > 0) text += tr(" · %1 parameters").arg(humanCount(a.parameters));
  text += " · " + plural(plan.cluster.world(), "device", "devices");
  if (!a.valid()) {
    text += " · " + plural(static_cast<long long>(a.errors.size()), "error", "errors");
  } else if (a.layout) {
    text += tr(" · TP %1 × PP %2 × DP %3").arg(a.layout->tp).arg(a.layout->pp).arg(a.layout->dp);
    text += a.fits ? tr(" · fits") : tr(" · does not fit");
  }
  planSummary_->setText(text);
  if (suggestAction_) suggestAction_->setEnabled(a.parameters > 0);
}

void MainWindow::updateTitle() {
  const QString name =
      configPath_.isEmpty() ? tr("untitled plan") : QFileInfo(configPath_).fileName();
  setWindowTitle(tr("%1[*] — Lattice Studio").arg(name));
  setWindowModified(!model_->undoStack()->isClean());
}

}  // namespace lattice::ui
