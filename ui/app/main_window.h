// lattice-studio's main window: the five views in a stack, menus, toolbar, status bar and
// shortcuts; the plan's file commands; QSettings persistence. The views own their panels;
// this class only wires them (actions and menus are built in main_window_actions.cpp).
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>
#include <optional>

#include "app/theme.h"
#include "history/history_io.h"
#include "launch/launch_command.h"

class QActionGroup;
class QLabel;
class QStackedWidget;

namespace lattice::ui {

class DashboardView;
class HistoryView;
class LaunchView;
class PlanModel;
class PlanView;
class PlaygroundView;
struct FineTuneLaunch;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  enum class View { kPlan, kLaunch, kDashboard, kHistory, kPlayground };
  static constexpr int kViewCount = 5;

  struct Options {
    bool useSettings = true;  // false: neither read nor write QSettings (screenshots, tests)
    bool measureCpu = true;   // measure this machine's SGEMM rate once, in the background
    std::optional<LaunchEnvironment> environment;  // default: LaunchEnvironment::detect()
    QString database;  // the run store to read and launch into; empty: the default one
  };

  explicit MainWindow(const Options& options, QWidget* parent = nullptr);
  MainWindow() : MainWindow(Options{}) {}
  ~MainWindow() override;

  PlanModel* planModel() const { return model_; }
  PlanView* planView() const { return planView_; }
  LaunchView* launchView() const { return launchView_; }
  DashboardView* dashboardView() const { return dashboard_; }
  HistoryView* historyView() const { return history_; }
  PlaygroundView* playgroundView() const { return playground_; }

  // The run store the Dashboard and History read: --db, else the Launch view's database
  // field, else `lattice train`'s default.
  QString database() const;
  // Shows these runs in the Dashboard (overlaid) and selects them in History.
  void showRuns(const QList<qint64>& runIds);

  void showView(View view);
  View currentView() const;
  static std::optional<View> viewFromName(const QString& name);  // "plan", "launch", ...
  static QString viewName(View view);

  void setTheme(Theme theme);
  Theme theme() const { return theme_; }

  // Opens a run configuration as the plan (undoable); false with a message on error.
  bool openConfigFile(const QString& path, QString* error = nullptr);
  bool saveConfigFile(const QString& path, QString* error = nullptr);

  // Puts a fine-tune (History's "Fine-tune from this checkpoint…") in the Plan and Launch views
  // as one undoable plan change, shows the Launch view, and starts it when `start` and the
  // command can start.
  void applyFineTune(const FineTuneLaunch& fineTune, bool start);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void createViews();
  void createActions();
  void createMenus();
  void createToolBar();
  void refreshIcons();
  void newPlan();
  void openConfig();
  void saveConfig(bool askForName);
  void restoreSettings();
  void saveSettings();
  void measureCpu();
  void updateStatus();
  void updateTitle();
  // Points the Dashboard, History and Playground at `path`. kReadOnly: a running cluster job's
  // own store, which History shows without its edits until the job is imported.
  void useDatabase(const QString& path, StoreAccess access);

  Options options_;
  LaunchEnvironment environment_;  // options_.environment, or this machine's, detected once
  PlanModel* model_;
  QStackedWidget* stack_;
  PlanView* planView_ = nullptr;
  LaunchView* launchView_ = nullptr;
  DashboardView* dashboard_ = nullptr;
  HistoryView* history_ = nullptr;
  PlaygroundView* playground_ = nullptr;
  QList<QAction*> viewActions_;
  QActionGroup* viewGroup_ = nullptr;
  QActionGroup* themeGroup_ = nullptr;
  QAction* undoAction_ = nullptr;
  QAction* redoAction_ = nullptr;
  QAction* suggestAction_ = nullptr;
  QAction* startAction_ = nullptr;
  QAction* stopAction_ = nullptr;
  QLabel* planSummary_ = nullptr;
  QString configPath_;
  Theme theme_ = Theme::kLight;
  QFutureWatcher<double> cpuMeasure_;
};

}  // namespace lattice::ui
