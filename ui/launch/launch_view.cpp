// LaunchView: rebuilds the command on every plan or settings change; runs it; follows the run
// in the store.
#include "launch/launch_view.h"

#include <QClipboard>
#include <QEvent>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTextDocument>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "launch/cluster_job.h"
#include "launch/launch_form.h"
#include "launch/run_process.h"
#include "plan/form_section.h"
#include "plan/plan_model.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

constexpr int kConsoleLines = 20000;
constexpr int kPreviewLines = 14;

}  // namespace

LaunchView::LaunchView(PlanModel* model, LaunchEnvironment env, QWidget* parent)
    : QWidget(parent),
      model_(model),
      env_(std::move(env)),
      form_(new LaunchForm),
      process_(new RunProcess(this)) {
  auto* box = new QHBoxLayout(this);
  box->setContentsMargins(6, 6, 6, 6);
  auto* columns = new QSplitter(Qt::Horizontal, this);
  auto* scroll = new QScrollArea(columns);
  scroll->setWidget(form_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setMinimumWidth(360);
  auto* right = new QWidget(columns);
  auto* column = new QVBoxLayout(right);
  column->setContentsMargins(0, 0, 0, 0);
  column->addWidget(commandBox());
  column->addWidget(consoleBox(), 1);
  columns->addWidget(scroll);
  columns->addWidget(right);
  columns->setStretchFactor(1, 1);
  columns->setSizes({420, 860});
  columns->setChildrenCollapsible(false);
  box->addWidget(columns);

  connect(model_, &PlanModel::planChanged, this, &LaunchView::rebuild);
  connect(form_, &LaunchForm::settingsChanged, this, &LaunchView::rebuild);
  connect(start_, &QPushButton::clicked, this, &LaunchView::startRun);
  connect(stop_, &QPushButton::clicked, this, &LaunchView::stopRun);
  connect(process_, &RunProcess::output, this, [this](const QString& text) {
    if (const QString job = submittedJobId(text); !job.isEmpty()) jobId_ = job;
    appendConsole(text);
  });
  connect(process_, &RunProcess::stepStarted, this,
          [this](int, const QString& line) { appendConsole("$ " + line + "\n"); });
  connect(process_, &RunProcess::finished, this, [this](int, bool ok, const QString& summary) {
    state_->setText(summary);
    appendConsole("[studio] " + summary + "\n");
    if (ok && QFileInfo::exists(savedIn_ + "/latest_checkpointed_iteration.txt"))
      appendConsole(tr("[studio] The model is saved in %1: try it in the Playground (the run is "
                       "in its list), or with `lattice generate --load %1`.\n")
                        .arg(savedIn_));
    watcher_.finish();
    importJobStore();
    jobId_.clear();
    form_->newRunName();
    rebuild();
    emit runningChanged(false);
    emit runEnded(ok, summary);
  });
  connect(&watcher_, &RunWatcher::runAppeared, this, [this](const RunSnapshot& run) {
    emit runRecorded(command_.database, run, !command_.importInto.isEmpty());
  });
  connect(&watcher_, &RunWatcher::runUpdated, this, &LaunchView::showRun);
  rebuild();
}

QWidget* LaunchView::commandBox() {
  auto* group = new QGroupBox(tr("Command"), this);
  auto* column = new QVBoxLayout(group);
  preview_ = new QPlainTextEdit(group);
  preview_->setObjectName("command-preview");
  preview_->setReadOnly(true);
  preview_->setLineWrapMode(QPlainTextEdit::NoWrap);
  preview_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  column->addWidget(preview_);
  problems_ = new QLabel(group);
  problems_->setObjectName("launch-problems");
  problems_->setWordWrap(true);
  problems_->setTextFormat(Qt::RichText);
  column->addWidget(problems_);
  auto* row = new QHBoxLayout;
  auto* copy = new QPushButton(tr("Copy command"), group);
  connect(copy, &QPushButton::clicked, this,
          [this] { QGuiApplication::clipboard()->setText(command_.displayText()); });
  start_ = new QPushButton(tr("Start"), group);
  start_->setObjectName("start");
  start_->setDefault(true);
  stop_ = new QPushButton(tr("Stop"), group);
  stop_->setObjectName("stop");
  stop_->setEnabled(false);
  stop_->setToolTip(tr("Stop after the current iteration (SIGUSR1 to mpirun, which passes it to "
                       "every rank): the ranks save with --save and record the run as killed. "
                       "Terminated after %1 s, killed after %2 s if still running")
                        .arg(RunProcess::kGraceMs / 1000)
                        .arg((RunProcess::kGraceMs + RunProcess::kKillMs) / 1000));
  state_ = new QLabel(tr("Not started."), group);
  state_->setObjectName("run-state");
  state_->setWordWrap(true);  // a long end summary wraps instead of widening the window
  row->addWidget(copy);
  state_->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  row->addWidget(state_, 1);
  row->addWidget(start_);
  row->addWidget(stop_);
  column->addLayout(row);
  return group;
}

QWidget* LaunchView::consoleBox() {
  auto* group = new QGroupBox(tr("Console"), this);
  auto* column = new QVBoxLayout(group);
  record_ = new QLabel(tr("The run appears in the run store once its ranks start."), group);
  record_->setObjectName("run-record");
  record_->setWordWrap(true);
  record_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  column->addWidget(record_);
  console_ = new QPlainTextEdit(group);
  console_->setObjectName("console");
  console_->setReadOnly(true);
  console_->setMaximumBlockCount(kConsoleLines);
  console_->setLineWrapMode(QPlainTextEdit::WidgetWidth);  // Megatron's lines are long
  console_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  console_->setPlaceholderText(tr("Output of lattice train appears here."));
  script_ = new QPlainTextEdit(group);
  script_->setObjectName("batch-script");
  script_->setReadOnly(true);
  script_->setLineWrapMode(QPlainTextEdit::NoWrap);
  script_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  tabs_ = new QTabWidget(group);
  tabs_->setDocumentMode(true);
  tabs_->addTab(console_, tr("Output"));
  tabs_->addTab(script_, tr("Batch script"));
  tabs_->setTabToolTip(1, tr("The script lattice launch writes into the output directory and "
                             "submits with sbatch"));
  column->addWidget(tabs_, 1);
  return group;
}

void LaunchView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuild();
}

bool LaunchView::isRunning() const {
  return process_->isRunning();
}

void LaunchView::rebuild() {
  const Plan& plan = model_->plan();
  LaunchSettings settings = form_->settings();
  command_ = buildLaunchCommand(plan, model_->analysis(), settings, env_);
  preview_->setPlainText(command_.displayText());
  if (script_->toPlainText() != command_.script) {
    script_->setPlainText(command_.script);
    // A new script is worth a look before Start; the output matters again once running.
    if (!command_.script.isEmpty() && !process_->isRunning()) tabs_->setCurrentWidget(script_);
  }
  tabs_->setTabVisible(tabs_->indexOf(script_), !command_.script.isEmpty());
  // As tall as the command, up to kPreviewLines; the console takes the rest.
  const int shown = std::min(preview_->document()->lineCount(), kPreviewLines);
  preview_->setFixedHeight(
      preview_->fontMetrics().lineSpacing() * shown +
      2 * (preview_->frameWidth() + static_cast<int>(preview_->document()->documentMargin())) +
      preview_->horizontalScrollBar()->sizeHint().height());
  // Blocking problems in the error colour, notes in the text colour.
  QStringList lines;
  const QString red = errorColor(palette()).name();
  for (const QString& e : command_.errors)
    lines << QStringLiteral("<span style='color:%1'>✗ %2</span>").arg(red, e.toHtmlEscaped());
  for (const QString& n : command_.notes) lines << "• " + n.toHtmlEscaped();
  problems_->setText(lines.join("<br>"));
  problems_->setVisible(!lines.isEmpty());
  const bool running = process_->isRunning();
  start_->setEnabled(!running && command_.canStart());
  start_->setToolTip(command_.canStart() ? tr("Start the run (Ctrl+R)")
                                         : tr("Fix the problems listed above first"));
  stop_->setEnabled(running);
  if (command_.target == launch::Target::kSlurm)
    form_->setTargetSummary(
        tr("%1 ranks as one Slurm job on %2 (%3).")
            .arg(command_.ranks)
            .arg(plural(plan.cluster.nodes, "node", "nodes"),
                 plural(plan.cluster.devices_per_node, "rank", "ranks") + tr(" per node")));
  else if (command_.target == launch::Target::kHostfile)
    form_->setTargetSummary(tr("%1 ranks on the first %2 of the hostfile, %3 each.")
                                .arg(command_.ranks)
                                .arg(plural(plan.cluster.nodes, "host", "hosts"),
                                     plural(plan.cluster.devices_per_node, "rank", "ranks")));
  else
    form_->setTargetSummary(
        command_.ranks == 1
            ? tr("1 rank: lattice runs directly, on all %1 cores.").arg(env_.cores)
            : tr("%1 ranks (the plan's %2 × %3) under mpirun on this machine's %4 cores.")
                  .arg(command_.ranks)
                  .arg(plural(plan.cluster.nodes, "node", "nodes"),
                       plural(plan.cluster.devices_per_node, "device", "devices"))
                  .arg(env_.cores));
}

void LaunchView::startRun() {
  rebuild();
  if (!command_.canStart() || process_->isRunning()) return;
  console_->clear();
  tabs_->setCurrentWidget(console_);
  record_->setText(tr("Waiting for run '%1' in %2…").arg(command_.runName, command_.database));
  state_->setText(tr("Running…"));
  const QStringList& train = command_.steps.back().arguments;
  const qsizetype save = train.indexOf(QStringLiteral("--save"));
  savedIn_ = save >= 0 && save + 1 < train.size() ? train[save + 1] : QString();
  process_->start(command_);
  watcher_.watch(command_.database, command_.runName);
  start_->setEnabled(false);
  stop_->setEnabled(true);
  emit runningChanged(true);
}

void LaunchView::stopRun() {
  state_->setText(tr("Stopping…"));
  if (command_.target == launch::Target::kSlurm && !jobId_.isEmpty()) {
    cancelJob();  // lattice launch keeps following the job to its end
    return;
  }
  process_->stop();
}

void LaunchView::cancelJob() {
  ui::cancelJob(env_.lattice, jobId_, this, [this](const QString& text) {
    appendConsole(text.startsWith('$') ? text : "[studio] " + text);
  });
}

// The job's run store into the local one, off the UI thread (History shows it on its next
// refresh).
void LaunchView::importJobStore() {
  if (command_.importInto.isEmpty() || !QFileInfo::exists(command_.database)) return;
  const QString source = command_.database, target = command_.importInto, name = command_.runName;
  auto* watcher = new QFutureWatcher<JobImport>(this);
  connect(watcher, &QFutureWatcher<JobImport>::finished, this, [this, watcher, target] {
    const JobImport imported = watcher->result();
    appendConsole("[studio] " + imported.message + "\n");
    emit jobImported(target, imported.runId);
    watcher->deleteLater();
  });
  watcher->setFuture(
      QtConcurrent::run([source, target, name] { return importJobRuns(source, target, name); }));
}

void LaunchView::appendConsole(const QString& text) {
  QScrollBar* bar = console_->verticalScrollBar();
  const bool follow = bar->value() == bar->maximum();
  QTextCursor cursor(console_->document());
  cursor.movePosition(QTextCursor::End);
  cursor.insertText(text);
  if (follow) bar->setValue(bar->maximum());
}

void LaunchView::showRun(const RunSnapshot& run) {
  QString text =
      tr("Run '%1' (#%2) in %3: %4").arg(run.name).arg(run.id).arg(command_.database, run.status);
  if (run.latestStep >= 0) text += tr(", step %1").arg(run.latestStep);
  if (!run.error.isEmpty()) text += " — " + run.error;
  record_->setText(text);
}

}  // namespace lattice::ui
