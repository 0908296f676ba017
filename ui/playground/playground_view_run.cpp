// PlaygroundView: loading checkpoints and generating through the session, and the figures
// shown while tokens arrive.
#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>

#include "plan/text_format.h"
#include "playground/playground_view.h"
#include "playground/token_output.h"

namespace lattice::ui {

namespace {

QString describe(const ModelSummary& m) {
  QString text = QObject::tr(
                     "%1 parameters · %2 layers · hidden %3 · %4 heads · context %5 · "
                     "vocabulary %6 · %7")
                     .arg(humanCount(static_cast<double>(m.parameters)))
                     .arg(m.layers)
                     .arg(m.hidden)
                     .arg(m.heads)
                     .arg(m.context)
                     .arg(m.vocab)
                     .arg(m.tokenizer);
  if (m.imageTokens > 0)
    text += QObject::tr(" · vision %1x%1 (%2 tokens an image)").arg(m.imageSize).arg(m.imageTokens);
  if (m.iteration >= 0) text += QObject::tr(" · iteration %1").arg(m.iteration);
  return text + QObject::tr(" · loaded in %1 s").arg(m.seconds, 0, 'f', 2);
}

}  // namespace

void PlaygroundView::connectSession() {
  connect(session_, &PlaygroundSession::loaded, this, [this](const ModelSummary& m) {
    loads_--;
    if (m.path != asked_) return;  // a newer load is queued
    loaded_ = m.path;
    chatTemplate_ = m.chatTemplate;
    chatProblem_ = m.chatProblem;
    maxImages_ = m.maxImages;
    imageTokens_ = m.imageTokens;
    imageProblem_ = m.imageProblem;
    updateImageStrip();
    updateModeTexts();
    model_->setText(describe(m));
    model_->setToolTip(QFileInfo(m.path).absoluteFilePath());
    updateButtons();
    emit modelLoaded(m.path);
  });
  connect(session_, &PlaygroundSession::loadFailed, this,
          [this](const QString& path, const QString& message) {
            loads_--;
            if (path != asked_) return;
            loaded_.clear();
            maxImages_ = imageTokens_ = 0;
            updateImageStrip();
            model_->setText(tr("No model loaded."));
            showError(tr("Cannot load %1: %2").arg(path, message));
            updateButtons();
            emit modelFailed(message);
          });
  connect(session_, &PlaygroundSession::started, this,
          [this](quint64 number, const QString& promptText, int promptTokens) {
            if (number != generation_) return;
            promptTokens_ = promptTokens;
            output_->start(promptText);
            updateStats();
          });
  connect(session_, &PlaygroundSession::tokenGenerated, this,
          [this](quint64 number, const QString& text, int id, double logprob, double ms) {
            if (number != generation_) return;
            tokens_++;
            if (firstMs_ < 0) firstMs_ = ms;
            lastMs_ = ms;
            output_->appendToken(text, id, logprob);
            if (chatGeneration_) {
              pendingReply_ += text;
              updateChatLog();
            }
            updateStats();
          });
  connect(session_, &PlaygroundSession::generated, this,
          [this](quint64 number, const GenerationSummary& s) {
            if (number != generation_) return;
            generating_ = false;
            output_->finish(s.text);
            if (chatGeneration_) {
              conversation_ << ChatTurn{QStringLiteral("assistant"), s.reply};
              chatGeneration_ = false;
              pendingReply_ = QString();
              updateChatLog();
            }
            tokens_ = s.tokens;
            finish_ = s.finish;
            updateButtons();
            updateStats();
            emit generationEnded(s.finish);
          });
  connect(session_, &PlaygroundSession::generationFailed, this,
          [this](quint64 number, const QString& message) {
            if (number != generation_) return;
            generating_ = false;
            chatGeneration_ = false;  // the user's turn stays: Send again retries it
            pendingReply_ = QString();
            updateChatLog();
            finish_.clear();
            showError(message);
            updateButtons();
            updateStats();
            emit generationEnded(QStringLiteral("error"));
          });
}

void PlaygroundView::openCheckpoint(const QString& path) {
  const QString dir = QFileInfo(path).absoluteFilePath();
  if (indexOfPath(dir) < 0) {
    if (!directories_.contains(dir)) directories_.append(dir);
    const int iteration = checkpointIteration(dir);
    checkpoints_->addItem(iteration >= 0 ? tr("%1 · iteration %2").arg(dir).arg(iteration) : dir,
                          dir);
    checkpoints_->setItemData(checkpoints_->count() - 1, dir, Qt::ToolTipRole);
  }
  checkpoints_->setCurrentIndex(indexOfPath(dir));
  loadPath(dir);
}

void PlaygroundView::loadPath(const QString& path) {
  if (generating_) stop();
  asked_ = path;
  loaded_.clear();
  loads_++;
  showError({});
  model_->setText(tr("Loading %1…").arg(path));
  session_->load(path);
  updateButtons();
}

void PlaygroundView::generate() {
  if (generating_ || loads_ > 0) return;
  if (loaded_.isEmpty()) {
    showError(tr("Choose a checkpoint first: a run from the list, or Open directory…"));
    return;
  }
  showError({});
  if (mode_ == Mode::kChat && !startChatTurn()) return;
  tokens_ = 0;
  promptTokens_ = 0;
  firstMs_ = -1;
  lastMs_ = 0;
  finish_.clear();
  generating_ = true;
  output_->start(QString());
  generation_ = session_->generate(request());
  updateButtons();
  updateStats();
}

void PlaygroundView::stop() {
  if (generating_) session_->stop();
}

void PlaygroundView::showError(const QString& text) {
  error_->setText(text);
  error_->setVisible(!text.isEmpty());
}

QString PlaygroundView::modelText() const {
  return model_->text();
}
QString PlaygroundView::errorText() const {
  return error_->text();
}
QString PlaygroundView::statsText() const {
  return stats_->text();
}

void PlaygroundView::updateButtons() {
  generateButton_->setEnabled(!generating_ && loads_ == 0 && !loaded_.isEmpty());
  stopButton_->setEnabled(generating_);
  if (asked_.isEmpty() && loads_ == 0 && model_->text().isEmpty())
    model_->setText(tr("No model loaded: choose a run's checkpoint or open a directory."));
}

void PlaygroundView::updateStats() {
  if (!generating_ && finish_.isEmpty()) {
    stats_->setText(QString());
    return;
  }
  QStringList parts;
  parts << plural(tokens_, "token", "tokens");
  if (tokens_ >= 2 && lastMs_ > firstMs_)
    parts << tr("%1 tokens/s").arg((tokens_ - 1) * 1000.0 / (lastMs_ - firstMs_), 0, 'f', 1);
  if (firstMs_ >= 0) parts << tr("first token %1 ms").arg(firstMs_, 0, 'f', 0);
  if (promptTokens_ > 0) parts << tr("prompt: %1").arg(plural(promptTokens_, "token", "tokens"));
  parts << (generating_ ? tr("generating…") : tr("ended: %1").arg(finish_));
  stats_->setText(parts.join(QStringLiteral(" · ")));
}

}  // namespace lattice::ui
