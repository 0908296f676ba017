// CalibrateDialog: the probe through buildLaunchCommand and RunProcess (the Launch view's
// machinery), the fit through the engine's calibration (the same as `lattice plan --calibrate`).
#include "plan/calibrate_dialog.h"

#include <QDateTime>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include "lattice/layout.h"
#include "lattice/run_estimate.h"
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
      process_(new RunProcess(this)) {
  setWindowTitle(tr("Calibrate the planner"));
  setObjectName("calibrate-dialog");
  resize(720, 560);
  auto* column = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("The planner estimates a step from the device's peak rate times an efficiency and "
         "from link bandwidths. A probe runs a few iterations of this layout here (mock data, "
         "<tt>--profile</tt>); its measured phase times (forward and backward, TP "
         "collectives, pipeline wait, data-parallel wait, optimizer) fit those terms, which are "
         "then saved for the device and used by the estimate and by Suggest."),
      this);
  intro->setWordWrap(true);
  column->addWidget(intro);

  auto* form = new QFormLayout;
  auto* probeRow = new QHBoxLayout;
  iterations_ = new QSpinBox(this);
  iterations_->setRange(2, 100);
  iterations_->setValue(6);
  iterations_->setSuffix(tr(" iterations"));
  probe_ = new QPushButton(tr("Run probe"), this);
  probe_->setObjectName("run-probe");
  probeRow->addWidget(iterations_);
  probeRow->addWidget(probe_);
  probeRow->addStretch(1);
  form->addRow(tr("Probe this layout here:"), probeRow);
  auto* runRow = new QHBoxLayout;
  runName_ = new QLineEdit(this);
  runName_->setPlaceholderText(tr("name or id of a run recorded with --profile"));
  fit_ = new QPushButton(tr("Fit"), this);
  runRow->addWidget(runName_, 1);
  runRow->addWidget(fit_);
  form->addRow(tr("Or fit a recorded run:"), runRow);
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
  connect(process_, &RunProcess::output, log_, [this](const QString& text) {
    log_->moveCursor(QTextCursor::End);
    log_->insertPlainText(text);
  });
  connect(process_, &RunProcess::finished, this, [this](int, bool ok, const QString& summary) {
    probe_->setEnabled(true);
    if (!ok) return fail(tr("The probe failed: %1").arg(summary));
    fitRun(probeRun_);
  });
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
  const PlanAnalysis& a = model_->analysis();
  if (!a.valid() || !a.layout) return fail(tr("Fix the plan's errors first."));
  LaunchSettings s;
  s.data = DataSource::kMock;
  probeRun_ = QStringLiteral("calibrate-%1")
                  .arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
  s.runName = probeRun_;
  s.database = database_;
  s.tags = {QStringLiteral("calibration")};
  s.extraFlags =
      QStringLiteral("--train-iters %1 --log-interval 1 --profile").arg(iterations_->value());
  const LaunchCommand command = buildLaunchCommand(model_->plan(), a, s, environment_);
  if (!command.canStart()) return fail(command.errors.join(' '));
  log_->clear();
  log_->setVisible(true);
  probe_->setEnabled(false);
  status_->setText(tr("Probing %1 on %2 ranks…").arg(probeRun_).arg(command.ranks));
  process_->start(command);
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
  const std::string path = calibration_path(c->device_key);
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
