// Calibrate (docs/studio.md "Calibrate"): runs a short probe of the plan's layout through the
// Launch view's machinery (a few iterations, mock data, --profile) on this machine or on the
// Launch view's cluster target (Slurm or a hostfile; a Slurm job's store is imported when it
// ends), or takes a recorded run, fits the planner's efficiency and bandwidths to its phase
// times (lattice/calibration.h), shows the fitted values beside the defaults, saves them for
// the plan's cluster and device and hands them to the plan, so that Suggest ranks with them.
// Non-goals: submitting or following jobs itself (RunProcess, cluster_job.h do).
#pragma once

#include <QDialog>
#include <optional>

#include "lattice/calibration.h"
#include "launch/launch_command.h"
#include "launch/run_watcher.h"

class QComboBox;
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
  // The Launch view's settings: their cluster target (Slurm or hostfile, with its partition,
  // hosts, network) is the probe's second choice of target; a local target offers none.
  void setLaunchSettings(const LaunchSettings& settings);
  enum class Target { kThisMachine, kCluster };
  // kCluster only where the Launch view's target is a cluster (else this machine stays).
  void setTarget(Target target);
  Target target() const;
  // Fits the recorded run `run` (id or name); true when it fitted, else statusText() says why.
  bool fitRun(const QString& run);
  // Launches the probe (--train-iters iterations(), --log-interval 1, --profile, mock data) on
  // target(); fitted() or failed() follows when it ends (after the import of a Slurm job).
  void startProbe();
  // Stops the probe: cancels a submitted Slurm job, else stops the ranks; failed() follows.
  void cancelProbe();
  bool isProbing() const;

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
  void probeEnded(bool ok, const QString& summary);
  void showProgress(const RunSnapshot& run);

  PlanModel* model_;
  LaunchEnvironment environment_;
  LaunchSettings launch_;  // the Launch view's, for the cluster target
  QString database_;
  QString probeRun_;
  LaunchCommand command_;  // the probe's, while it runs
  QString jobId_;          // its Slurm job, once submitted
  bool cancelled_ = false;
  std::optional<Calibration> fitted_;
  RunProcess* process_;
  RunWatcher* watcher_;
  QComboBox* target_;
  QSpinBox* iterations_;
  QPushButton* probe_;
  QPushButton* cancel_;
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
