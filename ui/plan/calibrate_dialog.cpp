// CalibrateDialog: the probe through buildLaunchCommand, RunProcess, RunWatcher and
// cluster_job.h (the Launch view's machinery, on this machine or the Launch view's cluster
// target), the fit through the engine's calibration (the same as `lattice plan --calibrate`).
#include "plan/calibrate_dialog.h"

#include <QComboBox>
#include <QDateTime>
#include <QDialogButtonBox>
#include <QDir>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRandomGenerator>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "lattice/layout.h"
#include "lattice/run_estimate.h"
#include "launch/cluster_job.h"
#include "launch/launch_command.h"
#include "launch/run_process.h"
#include "plan/plan_model.h"

namespace lattice::ui {

namespace {

QString gbs(double bytesPerSecond) {
  return QStringLiteral("%1 GB/s").arg(bytesPerSecond / 1e9, 0, 'g', 3);
}

QString ms(double seconds) {
  return QStringLiteral("%1 ms").arg(seconds * 1e3, 0, 'f', 1);
}

}  // namespace

CalibrateDialog::CalibrateDialog(PlanModel* model, QWidget* parent)
    : QDialog(parent),
      model_(model),
      environment_(LaunchEnvironment::detect()),
      database_(environment_.defaultDatabase),
      process_(new RunProcess(this)),
      watcher_(new RunWatcher(this)) {
  setWindowTitle(tr("Calibrate the planner"));
  setObjectName("calibrate-dialog");
  resize(720, 560);
  auto* column = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("The planner estimates a step from the device's peak rate times an efficiency and "
         "from link bandwidths. A probe runs a few iterations of this layout (mock data, "
         "<tt>--profile</tt>) here or on the Launch view's cluster; its measured phase times "
         "(forward and backward, TP "
         "collectives, pipeline wait, data-parallel wait, optimizer) fit those terms, which are "
         "then saved for the plan's cluster and device and used by the estimate and by Suggest."),
      this);
  intro->setWordWrap(true);
  column->addWidget(intro);

  auto* form = new QFormLayout;
  target_ = new QComboBox(this);
  target_->setObjectName("probe-target");
  target_->addItem(tr("This machine"));
  target_->addItem(QString());
  setLaunchSettings(launch_);
  form->addRow(tr("Probe on:"), target_);
  auto* probeRow = new QHBoxLayout;
  iterations_ = new QSpinBox(this);
  iterations_->setRange(2, 100);
  iterations_->setValue(6);
  iterations_->setSuffix(tr(" iterations"));
  probe_ = new QPushButton(tr("Run probe"), this);
  probe_->setObjectName("run-probe");
  cancel_ = new QPushButton(tr("Cancel probe"), this);
  cancel_->setObjectName("cancel-probe");
  cancel_->setEnabled(false);
  probeRow->addWidget(iterations_);
  probeRow->addWidget(probe_);
  probeRow->addWidget(cancel_);
  probeRow->addStretch(1);
  form->addRow(tr("Probe this layout:"), probeRow);
  auto* runRow = new QHBoxLayout;
  runName_ = new QLineEdit(this);
  runName_->setPlaceholderText(tr("name or id of a run recorded with --profile"));
  fit_ = new QPushButton(tr("Fit"), this);
  runRow->addWidget(runName_, 1);
  runRow->addWidget(fit_);
  form->addRow(tr("Or fit a recorded run:"), runRow);
  const QString cluster = model_->plan().cluster.name;
  const QString device = QString::fromStdString(model_->analysis().defaultCluster.device.key);
  auto* savedFor = new QLabel(
      cluster.isEmpty()
          ? tr("device %1 on any cluster (name the cluster in the Plan's Cluster section to "
               "keep one per cluster)")
                .arg(device)
          : tr("cluster <b>%1</b>, device %2").arg(cluster.toHtmlEscaped(), device),
      this);
  savedFor->setObjectName("saved-for");
  savedFor->setWordWrap(true);
  form->addRow(tr("Saved for:"), savedFor);
  column->addLayout(form);

  log_ = new QPlainTextEdit(this);
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(200);
  log_->setMaximumHeight(110);
  log_->setVisible(false);
  column->addWidget(log_);
  status_ = new QLabel(this);
  status_->setObjectName("calibrate-status");
  status_->setWordWrap(true);
  column->addWidget(status_);

  table_ = new QTableWidget(4, 3, this);
  table_->setHorizontalHeaderLabels({tr("default"), tr("fitted"), tr("from")});
  table_->setVerticalHeaderLabels({tr("compute efficiency"), tr("intra-node bandwidth"),
                                   tr("inter-node bandwidth"), tr("memory bandwidth")});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  column->addWidget(table_, 1);
  step_ = new QLabel(this);
  step_->setObjectName("calibrate-step");
  step_->setWordWrap(true);
  column->addWidget(step_);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  suggest_ = buttons->addButton(tr("Suggest with it…"), QDialogButtonBox::ActionRole);
  defaults_ = buttons->addButton(tr("Use the defaults"), QDialogButtonBox::ResetRole);
  suggest_->setEnabled(false);
  defaults_->setEnabled(model_->calibration().has_value());
  column->addWidget(buttons);
  if (model_->analysis().calibrated) showCalibration(*model_->calibration());

  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(probe_, &QPushButton::clicked, this, &CalibrateDialog::startProbe);
  connect(fit_, &QPushButton::clicked, this, [this] { fitRun(runName_->text().trimmed()); });
  connect(suggest_, &QPushButton::clicked, this, [this] {
    emit suggestRequested();
    accept();
  });
  connect(defaults_, &QPushButton::clicked, this, [this] {
    model_->setCalibration(std::nullopt);
    defaults_->setEnabled(false);
    status_->setText(tr("The plan uses the planner's defaults again (the saved file stays)."));
  });
  connect(cancel_, &QPushButton::clicked, this, &CalibrateDialog::cancelProbe);
  connect(process_, &RunProcess::output, log_, [this](const QString& text) {
    if (const QString job = submittedJobId(text); !job.isEmpty()) jobId_ = job;
    log_->moveCursor(QTextCursor::End);
    log_->insertPlainText(text);
  });
  connect(process_, &RunProcess::stepStarted, log_, [this](int, const QString& line) {
    log_->moveCursor(QTextCursor::End);
    log_->insertPlainText("$ " + line + "\n");
  });
  connect(process_, &RunProcess::finished, this,
          [this](int, bool ok, const QString& summary) { probeEnded(ok, summary); });
  connect(watcher_, &RunWatcher::runUpdated, this, &CalibrateDialog::showProgress);
}

void CalibrateDialog::setLaunchSettings(const LaunchSettings& settings) {
  launch_ = settings;
  auto* items = qobject_cast<QStandardItemModel*>(target_->model());
  QStandardItem* cluster = items->item(1);
  switch (settings.target) {
    case launch::Target::kSlurm:
      cluster->setText(
          settings.partition.trimmed().isEmpty()
              ? tr("The cluster: a Slurm job")
              : tr("The cluster: a Slurm job on partition %1").arg(settings.partition.trimmed()));
      break;
    case launch::Target::kHostfile:
      cluster->setText(tr("The cluster: the hosts of %1").arg(settings.hostfile.trimmed()));
      break;
    case launch::Target::kLocal:
      cluster->setText(tr("The cluster (choose Slurm or a hostfile in the Launch view)"));
      break;
  }
  const bool available = settings.target != launch::Target::kLocal;
  cluster->setEnabled(available);
  if (!available) target_->setCurrentIndex(0);
}

void CalibrateDialog::setTarget(Target target) {
  const bool cluster = target == Target::kCluster && launch_.target != launch::Target::kLocal;
  target_->setCurrentIndex(cluster ? 1 : 0);
}

CalibrateDialog::Target CalibrateDialog::target() const {
  return target_->currentIndex() == 1 ? Target::kCluster : Target::kThisMachine;
}

bool CalibrateDialog::isProbing() const {
  return process_->isRunning();
}

QString CalibrateDialog::statusText() const {
  return status_->text();
}
int CalibrateDialog::iterations() const {
  return iterations_->value();
}

void CalibrateDialog::fail(const QString& why) {
  status_->setText(why);
  emit failed(why);
}

void CalibrateDialog::startProbe() {
  if (isProbing()) return;
  const PlanAnalysis& a = model_->analysis();
  if (!a.valid() || !a.layout) return fail(tr("Fix the plan's errors first."));
  const bool onCluster = target() == Target::kCluster;
  if (onCluster && launch_.target == launch::Target::kLocal)
    return fail(
        tr("The Launch view's target is this machine: choose Slurm or a hostfile there "
           "to probe on the cluster."));
  // The cluster's settings as the Launch view holds them (hosts, network, partition, account,
  // time limit, launcher); the run's own settings are the probe's.
  LaunchSettings s = onCluster ? launch_ : LaunchSettings{};
  s.data = DataSource::kMock;
  // A random suffix as default_run_name's: two probes started in the same second (one here,
  // one on the cluster; or a second click) must not share a name, which the run store refuses.
  probeRun_ = QStringLiteral("calibrate-%1-%2")
                  .arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")))
                  .arg(QRandomGenerator::global()->bounded(0x10000), 4, 16, QLatin1Char('0'));
  s.runName = probeRun_;
  s.database = database_;
  s.tags = {QStringLiteral("calibration")};
  s.saveCheckpoints = false;
  s.extraFlags =
      QStringLiteral("--train-iters %1 --log-interval 1 --profile").arg(iterations_->value());
  if (!s.outputDir.trimmed().isEmpty())  // a Slurm job's directory of its own
    s.outputDir = QDir(s.outputDir.trimmed()).filePath(probeRun_);
  command_ = buildLaunchCommand(model_->plan(), a, s, environment_);
  if (!command_.canStart()) return fail(command_.errors.join(' '));
  log_->clear();
  log_->setVisible(true);
  jobId_.clear();
  cancelled_ = false;
  probe_->setEnabled(false);
  target_->setEnabled(false);
  cancel_->setEnabled(true);
  status_->setText(tr("Probing %1 on %2 ranks (%3)…")
                       .arg(probeRun_)
                       .arg(command_.ranks)
                       .arg(target_->currentText()));
  process_->start(command_);
  watcher_->watch(command_.database, probeRun_);
}

void CalibrateDialog::cancelProbe() {
  if (!isProbing()) return;
  cancelled_ = true;
  status_->setText(tr("Cancelling the probe…"));
  if (command_.target == launch::Target::kSlurm && !jobId_.isEmpty()) {
    // `lattice launch` sees the job end and exits; the probe ends then.
    ui::cancelJob(environment_.lattice, jobId_, this, [this](const QString& text) {
      log_->moveCursor(QTextCursor::End);
      log_->insertPlainText(text);
    });
    return;
  }
  process_->stop();
}

void CalibrateDialog::showProgress(const RunSnapshot& run) {
  if (!isProbing() || run.latestStep < 0) return;
  status_->setText(tr("Probing %1: iteration %2 of %3 (%4).")
                       .arg(run.name)
                       .arg(run.latestStep)
                       .arg(iterations_->value())
                       .arg(run.status));
}

void CalibrateDialog::probeEnded(bool ok, const QString& summary) {
  watcher_->finish();
  probe_->setEnabled(true);
  target_->setEnabled(true);
  cancel_->setEnabled(false);
  if (cancelled_) return fail(tr("The probe was cancelled: %1").arg(summary));
  if (!ok) return fail(tr("The probe failed: %1").arg(summary));
  if (command_.importInto.isEmpty()) {  // recorded in database_ itself
    fitRun(probeRun_);
    return;
  }
  // A Slurm job recorded the probe in its own store: merge it into database_, then fit.
  status_->setText(tr("Importing the job's runs from %1…").arg(command_.database));
  auto* importing = new QFutureWatcher<JobImport>(this);
  connect(importing, &QFutureWatcher<JobImport>::finished, this, [this, importing] {
    const JobImport imported = importing->result();
    importing->deleteLater();
    log_->moveCursor(QTextCursor::End);
    log_->insertPlainText(imported.message + "\n");
    if (!imported.ok) return fail(imported.message);
    fitRun(imported.localName);
  });
  const QString source = command_.database, target = command_.importInto, name = probeRun_;
  importing->setFuture(
      QtConcurrent::run([source, target, name] { return importJobRuns(source, target, name); }));
}

bool CalibrateDialog::fitRun(const QString& run) {
  if (run.isEmpty()) {
    fail(tr("Name a recorded run to fit."));
    return false;
  }
  Result<ProbeRun> probe = read_probe_run(database_.toStdString(), run.toStdString());
  if (!probe) {
    fail(tr("Run %1: %2").arg(run, QString::fromStdString(probe.status().message())));
    return false;
  }
  Result<RecordedRunPlan> recorded = plan_recorded_run(probe->config_json, probe->world_size);
  if (!recorded) {
    fail(tr("Run %1: %2").arg(run, QString::fromStdString(recorded.status().message())));
    return false;
  }
  const Plan& plan = model_->plan();
  const std::string why =
      probe_mismatch(recorded->options, probe->world_size, plan.options, plan.cluster.world());
  if (!why.empty()) {
    fail(tr("Run %1 cannot calibrate this plan: %2.").arg(run, QString::fromStdString(why)));
    return false;
  }
  Result<Calibration> c = fit_calibration(*recorded, model_->analysis().defaultCluster, *probe);
  if (!c) {
    fail(QString::fromStdString(c.status().message()));
    return false;
  }
  // Saved for the plan's cluster (Note [calibration per cluster]), else for the device.
  c->cluster_name = plan.cluster.name.toStdString();
  const std::string path = calibration_path(c->device_key, c->cluster_name);
  if (Status saved = save_calibration(path, *c); !saved) {
    fail(QString::fromStdString(saved.message()));
    return false;
  }
  fitted_ = *c;
  model_->setCalibration(*c);
  showCalibration(*c);
  status_->setText(tr("Fitted to run %1 (%2 timed iterations) and saved to %3.")
                       .arg(QString::fromStdString(probe->name))
                       .arg(probe->timed_steps)
                       .arg(QString::fromStdString(path)));
  emit fitted();
  return true;
}

void CalibrateDialog::showCalibration(const Calibration& c) {
  const QString measured = tr("measured"), kept = tr("default kept");
  const struct {
    QString before, after;
    bool fitted;
  } rows[] = {
      {QString::number(c.default_compute_efficiency, 'g', 3),
       QString::number(c.compute_efficiency, 'g', 3), c.compute_fitted},
      {gbs(c.default_intra_node_bandwidth), gbs(c.intra_node_bandwidth), c.intra_fitted},
      {gbs(c.default_inter_node_bandwidth), gbs(c.inter_node_bandwidth), c.inter_fitted},
      {gbs(c.default_memory_bandwidth), gbs(c.memory_bandwidth), c.memory_fitted},
  };
  for (int r = 0; r < 4; r++) {
    table_->setItem(r, 0, new QTableWidgetItem(rows[r].before));
    table_->setItem(r, 1, new QTableWidgetItem(rows[r].after));
    table_->setItem(r, 2, new QTableWidgetItem(rows[r].fitted ? measured : kept));
  }
  step_->setText(
      tr("Probe %1 (TP %2, CP %3, PP %4, DP %5): measured step <b>%6</b>; the "
         "planner's estimate %7 with the defaults, <b>%8</b> calibrated.")
          .arg(QString::fromStdString(c.probe_run).toHtmlEscaped())
          .arg(c.tp)
          .arg(c.cp)
          .arg(c.pp)
          .arg(c.dp)
          .arg(ms(c.measured_step_s), ms(c.predicted_before_s), ms(c.predicted_after_s)));
  suggest_->setEnabled(true);
  defaults_->setEnabled(true);
}

}  // namespace lattice::ui
