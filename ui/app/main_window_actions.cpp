// MainWindow's actions, menus, toolbar and the plan's file commands (New, Open, Save).
#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QFileDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QStatusBar>
#include <QToolBar>

#include "app/icons.h"
#include "app/main_window.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "plan/train_flags.h"

namespace lattice::ui {

namespace {

const Glyph kViewGlyphs[] = {Glyph::kPlan, Glyph::kLaunch, Glyph::kDashboard, Glyph::kHistory,
                             Glyph::kPlayground};

}  // namespace

void MainWindow::createActions() {
  viewGroup_ = new QActionGroup(this);
  const QString titles[] = {tr("&Plan"), tr("&Launch"), tr("&Dashboard"), tr("&History"),
                            tr("Play&ground")};
  for (int i = 0; i < kViewCount; i++) {
    auto* action = new QAction(titles[i], this);
    action->setObjectName("view-" + viewName(static_cast<View>(i)));
    action->setCheckable(true);
    action->setShortcut(QKeySequence(Qt::CTRL | static_cast<Qt::Key>(Qt::Key_1 + i)));
    action->setToolTip(tr("%1 (%2)").arg(QString(titles[i]).remove('&'),
                                         action->shortcut().toString(QKeySequence::NativeText)));
    viewGroup_->addAction(action);
    connect(action, &QAction::triggered, this, [this, i] { showView(static_cast<View>(i)); });
    viewActions_ << action;
  }
  viewActions_[0]->setChecked(true);

  suggestAction_ = new QAction(tr("&Suggest layouts…"), this);
  suggestAction_->setShortcut(Qt::CTRL | Qt::Key_G);
  connect(suggestAction_, &QAction::triggered, this, [this] {
    showView(View::kPlan);
    planView_->openSuggest();
  });
  startAction_ = new QAction(tr("&Start run"), this);
  startAction_->setShortcut(Qt::CTRL | Qt::Key_R);
  connect(startAction_, &QAction::triggered, this, [this] {
    showView(View::kLaunch);
    launchView_->startRun();
  });
  stopAction_ = new QAction(tr("S&top run"), this);
  stopAction_->setShortcut(Qt::CTRL | Qt::SHIFT | Qt::Key_R);
  stopAction_->setEnabled(false);
  connect(stopAction_, &QAction::triggered, launchView_, &LaunchView::stopRun);
  auto syncRunActions = [this] {
    startAction_->setEnabled(launchView_->startButton()->isEnabled());
    stopAction_->setEnabled(launchView_->isRunning());
  };
  connect(launchView_, &LaunchView::runningChanged, this, syncRunActions);
  connect(model_, &PlanModel::planChanged, this, syncRunActions);
  connect(launchView_->form(), &LaunchForm::settingsChanged, this, syncRunActions);
  syncRunActions();

  themeGroup_ = new QActionGroup(this);
  for (Theme theme : {Theme::kLight, Theme::kDark}) {
    auto* action = new QAction(theme == Theme::kDark ? tr("&Dark") : tr("&Light"), this);
    action->setCheckable(true);
    action->setChecked(theme == theme_);
    themeGroup_->addAction(action);
    connect(action, &QAction::triggered, this, [this, theme] { setTheme(theme); });
  }
}

void MainWindow::createMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New plan"), QKeySequence::New, this, &MainWindow::newPlan)
      ->setObjectName("new-plan");
  file->addAction(tr("&Open config…"), QKeySequence::Open, this, &MainWindow::openConfig);
  file->addAction(tr("&Save config"), QKeySequence::Save, this, [this] { saveConfig(false); });
  file->addAction(tr("Save config &as…"), QKeySequence::SaveAs, this, [this] { saveConfig(true); });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  quit->setMenuRole(QAction::QuitRole);

  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  undoAction_ = model_->undoStack()->createUndoAction(this, tr("&Undo"));
  undoAction_->setShortcut(QKeySequence::Undo);
  undoAction_->setObjectName("undo");
  redoAction_ = model_->undoStack()->createRedoAction(this, tr("&Redo"));
  // Every binding of the platform's Redo (QKeySequence(Redo) is only the first: Ctrl+Y where
  // Ctrl+Shift+Z follows), and Ctrl+Y everywhere.
  QList<QKeySequence> redoKeys = QKeySequence::keyBindings(QKeySequence::Redo);
  if (!redoKeys.contains(QKeySequence(Qt::CTRL | Qt::Key_Y)))
    redoKeys << QKeySequence(Qt::CTRL | Qt::Key_Y);
  redoAction_->setShortcuts(redoKeys);
  redoAction_->setObjectName("redo");
  edit->addAction(undoAction_);
  edit->addAction(redoAction_);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addActions(viewActions_);
  view->addSeparator();
  QMenu* theme = view->addMenu(tr("&Theme"));
  theme->addActions(themeGroup_->actions());

  QMenu* plan = menuBar()->addMenu(tr("&Plan"));
  plan->addAction(suggestAction_);
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(startAction_);
  run->addAction(stopAction_);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Lattice Studio"), this, [this] {
    QMessageBox::about(this, tr("About Lattice Studio"),
                       tr("<b>Lattice Studio</b><p>Plan a tensor × pipeline × data parallel "
                          "layout, see what it costs, and launch it with "
                          "<code>lattice train</code>.</p>"));
  });
}

void MainWindow::createToolBar() {
  QToolBar* bar = addToolBar(tr("Main"));
  bar->setObjectName("main-toolbar");
  bar->setMovable(false);
  bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  bar->setIconSize(QSize(20, 20));
  bar->addActions(viewActions_);
  bar->addSeparator();
  bar->addAction(undoAction_);
  bar->addAction(redoAction_);
  bar->addSeparator();
  bar->addAction(suggestAction_);
  bar->addAction(startAction_);
  bar->addAction(stopAction_);
  refreshIcons();
}

void MainWindow::refreshIcons() {
  const QPalette& p = palette();
  for (int i = 0; i < viewActions_.size(); i++)
    viewActions_[i]->setIcon(glyphIcon(kViewGlyphs[i], p));
  if (undoAction_) undoAction_->setIcon(glyphIcon(Glyph::kUndo, p));
  if (redoAction_) redoAction_->setIcon(glyphIcon(Glyph::kRedo, p));
  if (suggestAction_) suggestAction_->setIcon(glyphIcon(Glyph::kSuggest, p));
  if (startAction_) startAction_->setIcon(glyphIcon(Glyph::kLaunch, p));
  if (stopAction_) stopAction_->setIcon(glyphIcon(Glyph::kStop, p));
}

// New keeps what it replaces: a plan with unsaved changes is saved, discarded or kept as the
// user answers, and New itself is one undoable step.
void MainWindow::newPlan() {
  if (!model_->undoStack()->isClean()) {
    QMessageBox box(QMessageBox::Question, tr("New plan"),
                    tr("The plan has changes that are not saved in a configuration file. Save "
                       "them before starting a new plan?"),
                    QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, this);
    box.setObjectName("unsaved-plan");
    box.setInformativeText(tr("Discard keeps them one Undo away."));
    box.setDefaultButton(QMessageBox::Cancel);
    switch (box.exec()) {
      case QMessageBox::Save:
        saveConfig(false);
        if (!model_->undoStack()->isClean()) return;  // not saved: keep the plan
        break;
      case QMessageBox::Discard:
        break;
      default:
        return;
    }
  }
  model_->replacePlan(defaultPlan(), tr("New plan"));
  model_->undoStack()->setClean();
  configPath_.clear();
  updateTitle();
  showView(View::kPlan);
}

bool MainWindow::openConfigFile(const QString& path, QString* error) {
  Result<TrainOptions> options = readConfigFile(path);
  if (!options) {
    if (error) *error = QString::fromStdString(options.status().message());
    return false;
  }
  Plan next = model_->plan();
  next.options = *options;
  model_->replacePlan(next, tr("Open %1").arg(path));
  LaunchForm* launch = launchView_->form();
  launch->setSettings(launchSettingsFrom(*options, launch->settings()));
  configPath_ = path;
  model_->undoStack()->setClean();
  updateTitle();
  return true;
}

bool MainWindow::saveConfigFile(const QString& path, QString* error) {
  // With the Launch view's data and extra flags: `lattice train --config` then trains what
  // Start would (a plan whose flags do not parse is written as it is).
  Result<TrainOptions> run =
      runConfiguration(model_->plan(), launchView_->form()->settings(), launchView_->environment());
  const Status s = writeConfigFile(path, run ? *run : model_->plan().options);
  if (!s) {
    if (error) *error = QString::fromStdString(s.message());
    return false;
  }
  configPath_ = path;
  model_->undoStack()->setClean();
  updateTitle();
  return true;
}

void MainWindow::openConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open run configuration"), configPath_,
                                                    tr("Run configuration (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!openConfigFile(path, &error))
    QMessageBox::warning(this, tr("Cannot open the configuration"), error);
  else
    statusBar()->showMessage(tr("Opened %1").arg(path), 5000);
}

void MainWindow::saveConfig(bool askForName) {
  QString path = configPath_;
  if (askForName || path.isEmpty())
    path = QFileDialog::getSaveFileName(this, tr("Save run configuration"),
                                        path.isEmpty() ? QStringLiteral("run.json") : path,
                                        tr("Run configuration (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!saveConfigFile(path, &error))
    QMessageBox::warning(this, tr("Cannot save the configuration"), error);
  else
    statusBar()->showMessage(tr("Saved %1 (lattice train --config %1)").arg(path), 5000);
}

}  // namespace lattice::ui
