// Calibrate (docs/studio.md "Calibrate"): runs a short probe of the plan's layout on this
// machine through the Launch view's machinery (a few iterations, mock data, --profile), or takes
// a recorded run, fits the planner's efficiency and bandwidths to its phase times
// (lattice/calibration.h), shows the fitted values beside the defaults, saves them for the
// device and hands them to the plan, so that Suggest ranks with them.
// Non-goals: probing on a cluster (launch the probe there from the Launch view, then fit it
// here by name once its store is imported).
#pragma once

#include <QDialog>
#include <optional>

#include "lattice/calibration.h"
#include "launch/launch_command.h"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace lattice::ui {

class PlanModel;
class RunProcess;

class CalibrateDialog : public QDialog {
  Q_OBJECT

 public:
  explicit CalibrateDialog(PlanModel* model, QWidget* parent = nullptr);

  // The run store probes are recorded in and runs are read from (default: the Studio's).
  void setDatabase(const QString& path) { database_ = path; }
  // Where the probe finds `lattice` and mpirun (default: LaunchEnvironment::detect()).
  void setEnvironment(const LaunchEnvironment& environment) { environment_ = environment; }
  // Fits the recorded run `run` (id or name); true when it fitted, else statusText() says why.
  bool fitRun(const QString& run);
  // Launches the probe (--train-iters iterations(), --log-interval 1, --profile, mock data);
  // fitted() or failed() follows when it ends.
  void startProbe();

  const std::optional<Calibration>& calibration() const { return fitted_; }
  QTableWidget* table() const { return table_; }
  QString statusText() const;
  QString probeRunName() const { return probeRun_; }
  int iterations() const;

 signals:
  void fitted();
  void failed(const QString& why);
  void suggestRequested();

 private:
  void fail(const QString& why);
  void showCalibration(const Calibration& c);

  PlanModel* model_;
  LaunchEnvironment environment_;
  QString database_;
  QString probeRun_;
  std::optional<Calibration> fitted_;
  RunProcess* process_;
  QSpinBox* iterations_;
  QPushButton* probe_;
  QLineEdit* runName_;
  QPushButton* fit_;
  QPlainTextEdit* log_;
  QLabel* status_;
  QTableWidget* table_;
  QLabel* step_;
  QPushButton* suggest_;
  QPushButton* defaults_;
};

}  // namespace lattice::ui
