// PlaygroundView: its widgets, the checkpoint list and the settings (loading and generating
// are in playground_view_run.cpp).
#include "playground/playground_view.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpressionValidator>
#include <QShortcut>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QTabBar>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "playground/token_output.h"

namespace lattice::ui {

namespace {

constexpr int kPathRole = Qt::UserRole;
constexpr int kRunRole = Qt::UserRole + 1;

}  // namespace

PlaygroundView::PlaygroundView(QWidget* parent)
    : QWidget(parent), session_(new PlaygroundSession(this)) {
  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->setChildrenCollapsible(false);
  splitter->addWidget(buildSamplingPanel());
  splitter->addWidget(buildPromptPanel());
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({300, 900});
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(buildCheckpointBar());
  layout->addWidget(error_);
  layout->addWidget(splitter, 1);
  setSettings(PlaygroundSettings{});
  connectSession();
  connect(&runsReader_, &QFutureWatcher<RunCheckpointsRead>::finished, this,
          &PlaygroundView::onRunsRead);
  showError({});
  updateButtons();
  updateStats();
}

QWidget* PlaygroundView::buildCheckpointBar() {
  auto* bar = new QWidget(this);
  checkpoints_ = new QComboBox(bar);
  checkpoints_->setObjectName(QStringLiteral("playgroundCheckpoint"));
  checkpoints_->setToolTip(
      tr("The runs of the run store that saved a checkpoint, and the "
         "directories opened here"));
  checkpoints_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  checkpoints_->setMinimumContentsLength(40);
  connect(checkpoints_, &QComboBox::activated, this, &PlaygroundView::onSelectionChanged);
  auto* open = new QPushButton(tr("Open directory…"), bar);
  open->setToolTip(tr("A --save directory (its latest checkpoint) or one iter_NNNNNNN directory"));
  connect(open, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Open a checkpoint directory"), loaded_.isEmpty() ? QDir::homePath() : loaded_);
    if (!dir.isEmpty()) openCheckpoint(dir);
  });
  auto* openHf = new QPushButton(tr("Open GPT-2 file…"), bar);
  openHf->setToolTip(
      tr("Hugging Face GPT-2 weights (.safetensors); the model comes from the file and the "
         "config.json beside it"));
  connect(openHf, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(
        this, tr("Open GPT-2 weights"), loaded_.isEmpty() ? QDir::homePath() : loaded_,
        tr("safetensors (*.safetensors)"));
    if (!file.isEmpty()) openCheckpoint(file);
  });
  auto* reload = new QPushButton(tr("Reload"), bar);
  reload->setToolTip(tr("Read the run list again and reload the checkpoint (its latest save)"));
  connect(reload, &QPushButton::clicked, this, [this] {
    refreshRuns();
    if (!asked_.isEmpty()) loadPath(asked_);
  });
  model_ = new QLabel(bar);
  model_->setObjectName(QStringLiteral("playgroundModel"));
  model_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  model_->setWordWrap(true);
  error_ = new QLabel(this);
  error_->setObjectName(QStringLiteral("playgroundError"));
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral("color: #d9453a;"));

  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel(tr("Checkpoint:"), bar));
  row->addWidget(checkpoints_, 1);
  row->addWidget(open);
  row->addWidget(openHf);
  row->addWidget(reload);
  auto* layout = new QVBoxLayout(bar);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(row);
  layout->addWidget(model_);
  return bar;
}

QWidget* PlaygroundView::buildSamplingPanel() {
  auto* box = new QGroupBox(tr("Sampling"), this);
  tokensToGenerate_ = new QSpinBox(box);
  tokensToGenerate_->setRange(1, 100000);
  tokensToGenerate_->setToolTip(
      tr("Tokens to generate (fewer at the end of document, the stop text or the context end)"));
  temperature_ = new QDoubleSpinBox(box);
  temperature_->setRange(0.0, 10.0);
  temperature_->setSingleStep(0.05);
  temperature_->setDecimals(2);
  temperature_->setToolTip(tr("Divide the logits by this before sampling; 0 is greedy"));
  topK_ = new QSpinBox(box);
  topK_->setRange(0, 1000000);
  topK_->setSpecialValueText(tr("off"));
  topK_->setToolTip(tr("Sample among the K most likely tokens (1: greedy)"));
  topP_ = new QDoubleSpinBox(box);
  topP_->setRange(0.0, 1.0);
  topP_->setSingleStep(0.05);
  topP_->setDecimals(2);
  topP_->setSpecialValueText(tr("off"));
  topP_->setToolTip(tr("Sample among the most likely tokens holding this probability"));
  seed_ = new QLineEdit(box);
  seed_->setValidator(new QRegularExpressionValidator(QRegularExpression("\\d{1,19}"), seed_));
  seed_->setToolTip(tr("Random seed of the sampling: the same seed draws the same text"));
  stopAtEod_ = new QCheckBox(tr("Stop at end of document"), box);
  stopText_ = new QLineEdit(box);
  stopText_->setPlaceholderText(tr("none"));
  stopText_->setToolTip(tr("End the continuation where this text appears (it is cut off)"));
  colour_ = new QCheckBox(tr("Shade tokens by probability"), box);
  colour_->setToolTip(
      tr("Green: the model found the token likely; red: unlikely. Hover a token "
         "for its id and log-probability."));
  connect(colour_, &QCheckBox::toggled, this, [this](bool on) { output_->setColoured(on); });

  auto* form = new QFormLayout(box);
  form->addRow(tr("Tokens to generate"), tokensToGenerate_);
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-k"), topK_);
  form->addRow(tr("Top-p"), topP_);
  form->addRow(tr("Seed"), seed_);
  form->addRow(tr("Stop text"), stopText_);
  form->addRow(stopAtEod_);
  form->addRow(colour_);
  legend_ = new QLabel(box);
  legend_->setObjectName(QStringLiteral("playgroundLegend"));
  legend_->setToolTip(tr("Each generated token's probability under the model (temperature 1)"));
  updateLegend();
  form->addRow(legend_);
  connect(colour_, &QCheckBox::toggled, legend_, &QWidget::setVisible);
  auto* hint = new QLabel(tr("Temperature 0 or top-k 1 is greedy. The shading is the model's "
                             "own probability of each token (temperature 1, unfiltered)."),
                          box);
  hint->setWordWrap(true);
  hint->setForegroundRole(QPalette::PlaceholderText);
  form->addRow(hint);
  return box;
}

QWidget* PlaygroundView::buildPromptPanel() {
  auto* panel = new QWidget(this);
  prompt_ = new QPlainTextEdit(panel);
  prompt_->setObjectName(QStringLiteral("playgroundPrompt"));
  prompt_->setPlaceholderText(tr("Type a prompt; Ctrl+Enter generates"));
  generateButton_ = new QPushButton(tr("Generate"), panel);
  generateButton_->setObjectName(QStringLiteral("playgroundGenerate"));
  generateButton_->setToolTip(tr("Continue the prompt (Ctrl+Enter)"));
  generateButton_->setDefault(true);
  connect(generateButton_, &QPushButton::clicked, this, &PlaygroundView::generate);
  stopButton_ = new QPushButton(tr("Stop"), panel);
  stopButton_->setObjectName(QStringLiteral("playgroundStop"));
  stopButton_->setToolTip(tr("End the generation after the current token (Esc)"));
  connect(stopButton_, &QPushButton::clicked, this, &PlaygroundView::stop);
  for (const QKeySequence& keys :
       {QKeySequence(Qt::CTRL | Qt::Key_Return), QKeySequence(Qt::CTRL | Qt::Key_Enter)}) {
    auto* shortcut = new QShortcut(keys, this, this, &PlaygroundView::generate);
    shortcut->setContext(Qt::WidgetWithChildrenShortcut);
  }
  auto* escape = new QShortcut(QKeySequence(Qt::Key_Escape), this, this, &PlaygroundView::stop);
  escape->setContext(Qt::WidgetWithChildrenShortcut);
  output_ = new TokenOutput(panel);
  output_->setObjectName(QStringLiteral("playgroundOutput"));
  output_->setPlaceholderText(
      tr("The prompt and its continuation appear here as they are "
         "generated."));
  for (QWidget* text : {static_cast<QWidget*>(prompt_), static_cast<QWidget*>(output_)}) {
    QFont font = text->font();
    font.setPointSizeF(font.pointSizeF() * 1.15);
    text->setFont(font);
  }
  stats_ = new QLabel(panel);
  stats_->setObjectName(QStringLiteral("playgroundStats"));
  stats_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(generateButton_);
  buttons->addWidget(stopButton_);
  buttons->addStretch(1);
  buttons->addWidget(stats_);
  chatLog_ = new QTextBrowser(panel);
  chatLog_->setObjectName(QStringLiteral("playgroundChatLog"));
  chatLog_->setPlaceholderText(tr("The conversation appears here, one turn after another."));
  auto* split = new QSplitter(Qt::Vertical, panel);
  split->setChildrenCollapsible(false);
  auto* promptBox = new QWidget(panel);  // the attached images above the prompt
  auto* promptLayout = new QVBoxLayout(promptBox);
  promptLayout->setContentsMargins(0, 0, 0, 0);
  promptLayout->setSpacing(2);
  promptLayout->addWidget(buildImageStrip(promptBox));
  promptLayout->addWidget(prompt_, 1);
  split->addWidget(chatLog_);
  split->addWidget(promptBox);
  split->addWidget(output_);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(2, 2);
  split->setSizes({360, 120, 480});
  modeBar_ = new QTabBar(panel);
  modeBar_->setObjectName(QStringLiteral("playgroundMode"));
  modeBar_->addTab(tr("Completion"));
  modeBar_->addTab(tr("Chat"));
  modeBar_->setTabToolTip(0, tr("Continue the prompt as typed"));
  modeBar_->setTabToolTip(1, tr("Role-tagged turns rendered with the checkpoint's chat template"));
  connect(modeBar_, &QTabBar::currentChanged, this,
          [this](int index) { setMode(index == 1 ? Mode::kChat : Mode::kCompletion); });
  buttons->insertWidget(2, attachButton_);
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(modeBar_);
  layout->addWidget(buildChatBar(panel));
  layout->addWidget(split, 1);
  layout->addLayout(buttons);
  return panel;
}

// The shading's key: a swatch per probability, as the output paints it on this palette.
void PlaygroundView::updateLegend() {
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  QString key = tr("p:");
  for (double p : {0.001, 0.01, 0.05, 0.2, 1.0})
    key += QStringLiteral(" <span style=\"background-color:%1\">&nbsp;%2%&nbsp;</span>")
               .arg(probabilityColor(std::log(p), dark).name())
               .arg(p * 100, 0, 'f', p < 0.01 ? 1 : 0);
  legend_->setText(key);
}

void PlaygroundView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) updateLegend();
}

void PlaygroundView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (!isAncestorOf(QApplication::focusWidget())) prompt_->setFocus();
  refreshRuns();
  if (!pending_.isEmpty() && asked_.isEmpty()) openCheckpoint(pending_);
  pending_.clear();
}

// ---- the checkpoint list -------------------------------------------------------------

void PlaygroundView::setDatabase(const QString& path) {
  database_ = path;
  runs_.clear();
  refreshRuns();
}

void PlaygroundView::refreshRuns() {
  if (runsReader_.isRunning()) {
    rereadWanted_ = true;
    return;
  }
  const QString database = database_;
  runsReader_.setFuture(QtConcurrent::run([database] { return readRunCheckpoints(database); }));
}

void PlaygroundView::onRunsRead() {
  const RunCheckpointsRead read = runsReader_.result();
  if (rereadWanted_) {
    rereadWanted_ = false;
    refreshRuns();
    return;
  }
  runs_ = read.runs;
  const QString selected = checkpoints_->currentData(kPathRole).toString();
  {
    const QSignalBlocker block(checkpoints_);
    checkpoints_->clear();
    checkpoints_->addItem(runs_.isEmpty() && directories_.isEmpty()
                              ? tr("No run in the run store saved a checkpoint: open a directory")
                              : tr("Choose a checkpoint…"),
                          QString());
    for (const RunCheckpoint& r : runs_) {
      checkpoints_->addItem(tr("%1 · iteration %2").arg(r.runName).arg(r.iteration), r.saveDir);
      checkpoints_->setItemData(checkpoints_->count() - 1, r.runId, kRunRole);
      checkpoints_->setItemData(checkpoints_->count() - 1, r.saveDir, Qt::ToolTipRole);
    }
    for (const QString& dir : directories_) {
      if (indexOfPath(dir) >= 0) continue;
      const int iteration = checkpointIteration(dir);
      checkpoints_->addItem(iteration >= 0 ? tr("%1 · iteration %2").arg(dir).arg(iteration) : dir,
                            dir);
      checkpoints_->setItemData(checkpoints_->count() - 1, dir, Qt::ToolTipRole);
    }
    const int again = indexOfPath(selected.isEmpty() ? asked_ : selected);
    checkpoints_->setCurrentIndex(std::max(0, again));
  }
  if (!read.problem.isEmpty()) showError(tr("The run store cannot be read: %1").arg(read.problem));
  if (pendingRun_ != 0) {
    for (int i = 1; i < checkpoints_->count(); i++)
      if (checkpoints_->itemData(i, kRunRole).toLongLong() == pendingRun_) {
        pendingRun_ = 0;
        checkpoints_->setCurrentIndex(i);
        onSelectionChanged();
        break;
      }
    if (pendingRun_ != 0) {
      showError(tr("Run %1 has no checkpoint on this machine (it was run without --save, or "
                   "its save directory is gone).")
                    .arg(pendingRun_));
      pendingRun_ = 0;
    }
  }
  emit runsRead();
}

int PlaygroundView::indexOfPath(const QString& path) const {
  if (path.isEmpty()) return -1;
  for (int i = 1; i < checkpoints_->count(); i++)
    if (checkpoints_->itemData(i, kPathRole).toString() == path) return i;
  return -1;
}

void PlaygroundView::openRun(qint64 runId) {
  pendingRun_ = runId;
  refreshRuns();
}

void PlaygroundView::onSelectionChanged() {
  const QString path = checkpoints_->currentData(kPathRole).toString();
  if (!path.isEmpty() && path != asked_) loadPath(path);
}

// ---- settings ------------------------------------------------------------------------

PlaygroundRequest PlaygroundView::request() const {
  PlaygroundRequest r;
  r.prompt = prompt_->toPlainText();
  r.tokens = tokensToGenerate_->value();
  r.temperature = temperature_->value();
  r.topK = topK_->value();
  r.topP = topP_->value();
  r.seed = seed_->text().toULongLong();
  r.stopAtEod = stopAtEod_->isChecked();
  r.stop = stopText_->text();
  if (mode_ == Mode::kCompletion) r.images = attachments_;
  if (mode_ == Mode::kChat) {
    if (!system_->text().trimmed().isEmpty())
      r.chat << ChatTurn{QStringLiteral("system"), system_->text().trimmed()};
    r.chat << conversation_;
  }
  return r;
}

PlaygroundSettings PlaygroundView::settings() const {
  PlaygroundSettings s;
  s.request = request();
  s.checkpoint = asked_.isEmpty() ? pending_ : asked_;
  s.colourTokens = colour_->isChecked();
  return s;
}

void PlaygroundView::setSettings(const PlaygroundSettings& s) {
  const PlaygroundRequest& r = s.request;
  prompt_->setPlainText(r.prompt);
  tokensToGenerate_->setValue(r.tokens);
  temperature_->setValue(r.temperature);
  topK_->setValue(r.topK);
  topP_->setValue(r.topP);
  seed_->setText(QString::number(r.seed));
  stopAtEod_->setChecked(r.stopAtEod);
  stopText_->setText(r.stop);
  colour_->setChecked(s.colourTokens);
  if (!s.checkpoint.isEmpty() && asked_.isEmpty()) {
    if (isVisible())
      openCheckpoint(s.checkpoint);
    else
      pending_ = s.checkpoint;
  }
}

}  // namespace lattice::ui
