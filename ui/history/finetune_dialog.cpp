// FineTuneDialog: the form, and the command rebuilt on every change.
#include "history/finetune_dialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "plan/form_section.h"
#include "plan/plan_analysis.h"
#include "plan/train_flags.h"
#include "playground/playground_io.h"

namespace lattice::ui {

FineTuneDialog::FineTuneDialog(const storage::RunInfo& base, const LaunchSettings& current,
                               const ClusterSettings& cluster, LaunchEnvironment env,
                               QWidget* parent)
    : QDialog(parent), base_(base), current_(current), cluster_(cluster), env_(std::move(env)) {
  setObjectName(QStringLiteral("fineTuneDialog"));
  setWindowTitle(tr("Fine-tune '%1'").arg(QString::fromStdString(base.name)));
  if (Result<TrainOptions> o = optionsFromJson(base.config_json); o)
    baseOptions_ = *o;
  else
    baseOptionsProblem_ = tr("The run's recorded settings do not parse: %1")
                              .arg(QString::fromStdString(o.status().message()));

  const QString checkpoint = runSaveDir(base);
  const int iteration = checkpoint.isEmpty() ? -1 : checkpointIteration(checkpoint);
  auto* from = new QLabel(
      iteration >= 0
          ? tr("From run <b>%1</b>'s checkpoint at iteration %2, in %3. The model, layout and "
               "tokenizer stay the run's; the optimizer and the iteration count start afresh "
               "(--finetune).")
                .arg(QString::fromStdString(base.name).toHtmlEscaped())
                .arg(iteration)
                .arg(checkpoint.toHtmlEscaped())
          : tr("Run <b>%1</b> has no checkpoint in its save directory.")
                .arg(QString::fromStdString(base.name).toHtmlEscaped()),
      this);
  from->setWordWrap(true);

  preview_ = new QPlainTextEdit(this);
  preview_->setObjectName(QStringLiteral("fineTunePreview"));
  preview_->setReadOnly(true);
  preview_->setLineWrapMode(QPlainTextEdit::NoWrap);
  preview_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  preview_->setMinimumHeight(preview_->fontMetrics().lineSpacing() * 7);
  problems_ = new QLabel(this);
  problems_->setObjectName(QStringLiteral("fineTuneProblems"));
  problems_->setWordWrap(true);
  problems_->setTextFormat(Qt::RichText);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
  open_ = buttons->addButton(tr("Open in Launch"), QDialogButtonBox::AcceptRole);
  open_->setToolTip(tr("Put the fine-tune in the Plan and Launch views, to review it there"));
  start_ = buttons->addButton(tr("Start"), QDialogButtonBox::AcceptRole);
  start_->setObjectName(QStringLiteral("fineTuneStart"));
  start_->setDefault(true);
  connect(open_, &QPushButton::clicked, this, [this] { startWanted_ = false; });
  connect(start_, &QPushButton::clicked, this, [this] { startWanted_ = true; });
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

  auto* columns = new QHBoxLayout;
  auto* left = new QVBoxLayout;
  left->addWidget(dataGroup());
  left->addWidget(runGroup());
  left->addStretch(1);
  columns->addLayout(left, 1);
  columns->addWidget(methodGroup(), 1, Qt::AlignTop);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(from);
  layout->addLayout(columns);
  layout->addWidget(new QLabel(tr("Command"), this));
  layout->addWidget(preview_, 1);
  layout->addWidget(problems_);
  layout->addWidget(buttons);

  FineTuneSettings s;
  s.checkpoint = checkpoint;
  s.lr = std::min(1e-5, static_cast<double>(baseOptions_.optim.lr));
  s.runName = QString::fromStdString(base.name) + QStringLiteral("-sft");
  setFineTuneSettings(s);
  resize(900, 720);
}

QGroupBox* FineTuneDialog::dataGroup() {
  auto* group = new QGroupBox(tr("Dataset"), this);
  dataPath_ = new QLineEdit(group);
  dataPath_->setObjectName(QStringLiteral("fineTuneData"));
  dataPath_->setPlaceholderText(tr("prefix written by `lattice data preprocess`"));
  auto* browse = new QToolButton(group);
  browse->setText(QStringLiteral("…"));
  browse->setToolTip(tr("Choose the dataset's .bin or .idx file"));
  connect(browse, &QToolButton::clicked, this, [this] {
    QString path = QFileDialog::getOpenFileName(this, tr("Choose a dataset"),
                                                QFileInfo(dataPath_->text()).absolutePath(),
                                                tr("Indexed dataset (*.bin *.idx)"));
    if (path.isEmpty()) return;
    if (path.endsWith(".bin") || path.endsWith(".idx")) path.chop(4);
    if (path.endsWith("_loss_mask")) path.chop(10);  // the mask's sibling is the dataset
    dataPath_->setText(path);
  });
  auto* row = new QHBoxLayout;
  row->addWidget(dataPath_, 1);
  row->addWidget(browse);
  sft_ = new QCheckBox(tr("SFT: loss on the assistant's tokens only (--sft)"), group);
  sft_->setObjectName(QStringLiteral("fineTuneSft"));
  sft_->setToolTip(
      tr("Needs the loss mask that `lattice data preprocess` writes for chat data "
         "beside the tokens: {prefix}_loss_mask.bin and .idx"));
  auto* column = new QVBoxLayout(group);
  column->addLayout(row);
  column->addWidget(sft_);
  connect(dataPath_, &QLineEdit::textChanged, this, &FineTuneDialog::rebuild);
  connect(sft_, &QCheckBox::toggled, this, &FineTuneDialog::rebuild);
  return group;
}

QGroupBox* FineTuneDialog::methodGroup() {
  auto* group = new QGroupBox(tr("Method"), this);
  full_ = new QRadioButton(tr("Full parameters"), group);
  full_->setObjectName(QStringLiteral("fineTuneFull"));
  lora_ = new QRadioButton(tr("LoRA adapters (base weights frozen)"), group);
  lora_->setObjectName(QStringLiteral("fineTuneLora"));
  loraRows_ = new QWidget(group);
  auto* form = new QFormLayout(loraRows_);
  form->setContentsMargins(20, 0, 0, 0);
  rank_ = new QSpinBox(loraRows_);
  rank_->setObjectName(QStringLiteral("fineTuneRank"));
  rank_->setRange(1, 4096);
  alpha_ = new QDoubleSpinBox(loraRows_);
  alpha_->setObjectName(QStringLiteral("fineTuneAlpha"));
  alpha_->setRange(0.01, 100000);
  alpha_->setDecimals(2);
  alpha_->setToolTip(tr("The adapters' output is scaled by alpha / rank"));
  dropout_ = new QDoubleSpinBox(loraRows_);
  dropout_->setObjectName(QStringLiteral("fineTuneDropout"));
  dropout_->setRange(0, 0.9);
  dropout_->setSingleStep(0.05);
  dropout_->setDecimals(2);
  auto* modules = new QVBoxLayout;
  for (const QString& m : kLoraTargetModules) {
    auto* box = new QCheckBox(m, loraRows_);
    box->setObjectName(QStringLiteral("fineTuneTarget_") + m);
    modules->addWidget(box);
    targets_ << box;
    connect(box, &QCheckBox::toggled, this, &FineTuneDialog::rebuild);
  }
  form->addRow(tr("Rank (--lora-rank)"), rank_);
  form->addRow(tr("Alpha (--lora-alpha)"), alpha_);
  form->addRow(tr("Modules"), modules);
  form->addRow(tr("Dropout (--lora-dropout)"), dropout_);
  auto* column = new QVBoxLayout(group);
  column->addWidget(full_);
  column->addWidget(lora_);
  column->addWidget(loraRows_);
  connect(lora_, &QRadioButton::toggled, this, &FineTuneDialog::rebuild);
  connect(rank_, &QSpinBox::valueChanged, this, &FineTuneDialog::rebuild);
  connect(alpha_, &QDoubleSpinBox::valueChanged, this, &FineTuneDialog::rebuild);
  connect(dropout_, &QDoubleSpinBox::valueChanged, this, &FineTuneDialog::rebuild);
  return group;
}

QGroupBox* FineTuneDialog::runGroup() {
  auto* group = new QGroupBox(tr("Run"), this);
  iterations_ = new QSpinBox(group);
  iterations_->setObjectName(QStringLiteral("fineTuneIterations"));
  iterations_->setRange(1, 100000000);
  lr_ = new QLineEdit(group);
  lr_->setObjectName(QStringLiteral("fineTuneLr"));
  lr_->setToolTip(
      tr("Peak learning rate (--lr), e.g. 1e-5; no warm-up, decayed over the "
         "fine-tune's iterations as the base run's --lr-decay-style"));
  runName_ = new QLineEdit(group);
  runName_->setObjectName(QStringLiteral("fineTuneRunName"));
  saveDir_ = new QLineEdit(group);
  saveDir_->setObjectName(QStringLiteral("fineTuneSave"));
  saveDir_->setToolTip(tr("--save: where the fine-tuned model is written (empty: nowhere)"));
  auto* form = new QFormLayout(group);
  form->addRow(tr("Iterations"), iterations_);
  form->addRow(tr("Learning rate"), lr_);
  form->addRow(tr("Run name"), runName_);
  form->addRow(tr("Save in"), saveDir_);
  connect(iterations_, &QSpinBox::valueChanged, this, &FineTuneDialog::rebuild);
  connect(lr_, &QLineEdit::textChanged, this, &FineTuneDialog::rebuild);
  connect(runName_, &QLineEdit::textChanged, this, [this] {
    updateSaveDir();
    rebuild();
  });
  connect(saveDir_, &QLineEdit::textChanged, this, &FineTuneDialog::rebuild);
  return group;
}

// The proposed save directory follows the run name (a directory of the run's own, as the
// Launch view's), until the user writes another.
void FineTuneDialog::updateSaveDir() {
  const QString proposed = checkpointDirectory(current_, env_, runName_->text().trimmed());
  if (saveDir_->text() == autoSaveDir_) saveDir_->setText(proposed);
  autoSaveDir_ = proposed;
}

FineTuneSettings FineTuneDialog::fineTuneSettings() const {
  FineTuneSettings s;
  s.checkpoint = runSaveDir(base_);
  s.dataPath = dataPath_->text().trimmed();
  s.sft = sft_->isChecked();
  s.loraRank = lora_->isChecked() ? rank_->value() : 0;
  s.loraAlpha = alpha_->value();
  s.loraTargets.clear();
  for (QCheckBox* box : targets_)
    if (box->isChecked()) s.loraTargets << box->text();
  s.loraDropout = dropout_->value();
  s.iterations = iterations_->value();
  s.lr = lr_->text().trimmed().toDouble();  // 0 when unreadable: rebuild() says so
  s.runName = runName_->text().trimmed();
  s.saveDir = saveDir_->text().trimmed();
  return s;
}

void FineTuneDialog::setFineTuneSettings(const FineTuneSettings& s) {
  const QSignalBlocker a(dataPath_), b(sft_), c(lora_), d(rank_), e(alpha_), f(dropout_),
      g(iterations_), h(lr_), i(runName_), j(saveDir_);
  dataPath_->setText(s.dataPath);
  sft_->setChecked(s.sft);
  (s.loraRank > 0 ? lora_ : full_)->setChecked(true);
  rank_->setValue(s.loraRank > 0 ? s.loraRank : 8);
  alpha_->setValue(s.loraAlpha);
  for (QCheckBox* box : targets_) {
    const QSignalBlocker k(box);
    box->setChecked(s.loraTargets.contains(box->text()));
  }
  dropout_->setValue(s.loraDropout);
  iterations_->setValue(s.iterations);
  lr_->setText(QString::number(s.lr));
  runName_->setText(s.runName);
  autoSaveDir_ = checkpointDirectory(current_, env_, s.runName);
  saveDir_->setText(s.saveDir.isEmpty() ? autoSaveDir_ : s.saveDir);
  rebuild();
}

void FineTuneDialog::rebuild() {
  loraRows_->setEnabled(lora_->isChecked());
  const FineTuneSettings s = fineTuneSettings();
  launch_ = fineTuneLaunch(baseOptions_, base_.world_size, cluster_, current_, s);
  if (!baseOptionsProblem_.isEmpty()) launch_.errors.prepend(baseOptionsProblem_);
  if (!(s.lr > 0))
    launch_.errors << tr("Learning rate '%1' is not a positive number.").arg(lr_->text());
  Plan plan = launch_.plan;
  normalizePlan(plan);
  command_ = buildLaunchCommand(plan, analyzePlan(plan, 0), launch_.settings, env_);
  preview_->setPlainText(command_.displayText(80));
  const QString red = errorColor(palette()).name();
  QStringList lines;
  QStringList errors = launch_.errors;
  for (const QString& e : command_.errors)
    if (!errors.contains(e)) errors << e;  // the dataset check is the engine's too
  for (const QString& e : errors)
    lines << QStringLiteral("<span style='color:%1'>✗ %2</span>").arg(red, e.toHtmlEscaped());
  for (const QString& n : command_.notes) lines << "• " + n.toHtmlEscaped();
  problems_->setText(lines.join("<br>"));
  problems_->setVisible(!lines.isEmpty());
  const bool ok = launch_.errors.isEmpty();
  open_->setEnabled(ok);
  start_->setEnabled(ok && command_.canStart());
}

QString FineTuneDialog::problemsText() const {
  QStringList errors = launch_.errors;
  for (const QString& e : command_.errors)
    if (!errors.contains(e)) errors << e;
  return errors.join('\n');
}

}  // namespace lattice::ui
