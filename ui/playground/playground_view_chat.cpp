// PlaygroundView's chat mode: the system prompt, the template in use, the transcript, and a
// user turn started from the message box. The rendering itself is the session's (chat_prompt.h).
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QTabBar>
#include <QTextBrowser>

#include "playground/chat_prompt.h"
#include "playground/image_attachments.h"
#include "playground/playground_view.h"
#include "playground/token_output.h"

namespace lattice::ui {

namespace {
constexpr int kTranscriptImageHeight = 64;
}  // namespace

QWidget* PlaygroundView::buildChatBar(QWidget* parent) {
  chatBar_ = new QWidget(parent);
  system_ = new QLineEdit(chatBar_);
  system_->setObjectName(QStringLiteral("playgroundSystem"));
  system_->setPlaceholderText(tr("System prompt (optional)"));
  templateLabel_ = new QLabel(chatBar_);
  templateLabel_->setObjectName(QStringLiteral("playgroundChatTemplate"));
  auto* fresh = new QPushButton(tr("New chat"), chatBar_);
  fresh->setToolTip(tr("Forget the conversation"));
  connect(fresh, &QPushButton::clicked, this, &PlaygroundView::newChat);
  auto* row = new QHBoxLayout(chatBar_);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(system_, 1);
  row->addWidget(templateLabel_);
  row->addWidget(fresh);
  setMode(Mode::kCompletion);
  return chatBar_;
}

void PlaygroundView::setMode(Mode mode) {
  mode_ = mode;
  if (modeBar_ && modeBar_->currentIndex() != (mode == Mode::kChat ? 1 : 0)) {
    const QSignalBlocker block(modeBar_);
    modeBar_->setCurrentIndex(mode == Mode::kChat ? 1 : 0);
  }
  const bool chat = mode == Mode::kChat;
  chatBar_->setVisible(chat);
  chatLog_->setVisible(chat);
  updateModeTexts();
}

void PlaygroundView::updateModeTexts() {
  const bool chat = mode_ == Mode::kChat;
  prompt_->setPlaceholderText(chat ? tr("Type a message; Ctrl+Enter sends")
                                   : tr("Type a prompt; Ctrl+Enter generates"));
  generateButton_->setText(chat ? tr("Send") : tr("Generate"));
  generateButton_->setToolTip(chat ? tr("Send the message as the user's turn (Ctrl+Enter)")
                                   : tr("Continue the prompt (Ctrl+Enter)"));
  output_->setPlaceholderText(chat ? tr("The conversation as the model reads it (rendered with "
                                        "the chat template) and the reply as it is generated.")
                                   : tr("The prompt and its continuation appear here as they "
                                        "are generated."));
  templateLabel_->setText(chatTemplateText());
  templateLabel_->setToolTip(chatProblem_);
}

QString PlaygroundView::chatTemplateText() const {
  if (loaded_.isEmpty()) return tr("no model");
  if (chatTemplate_.isEmpty()) return tr("no chat template");
  return chatTemplate_;  // "built-in chat template 'default'", a tokenizer_config.json, ...
}

void PlaygroundView::setSystemPrompt(const QString& text) {
  system_->setText(text);
}

void PlaygroundView::newChat() {
  if (generating_) stop();
  conversation_.clear();
  pendingReply_ = QString();
  updateChatLog();
}

bool PlaygroundView::startChatTurn() {
  if (!chatProblem_.isEmpty()) {
    showError(tr("This checkpoint has no chat template: %1").arg(chatProblem_));
    return false;
  }
  const QString message = prompt_->toPlainText().trimmed();
  const bool unanswered = !conversation_.isEmpty() && conversation_.back().role == "user";
  if (message.isEmpty() && attachments_.isEmpty() && !unanswered) {
    showError(tr("Type a message first."));
    return false;
  }
  if (!message.isEmpty() || !attachments_.isEmpty()) {
    // The attached images go with the message and stay in its turn, for every later request.
    conversation_ << ChatTurn{QStringLiteral("user"), message, attachments_};
    prompt_->clear();
    attachments_.clear();
    updateImageStrip();
  }
  chatGeneration_ = true;
  pendingReply_ = QStringLiteral("");  // not null: a reply is under way
  updateChatLog();
  return true;
}

void PlaygroundView::updateChatLog() {
  QList<ChatTurn> shown;
  if (!system_->text().trimmed().isEmpty())
    shown << ChatTurn{QStringLiteral("system"), system_->text().trimmed()};
  shown << conversation_;
  for (qsizetype i = 0; i < shown.size(); i++)
    for (qsizetype k = 0; k < shown[i].images.size(); k++)
      chatLog_->document()->addResource(
          QTextDocument::ImageResource, QUrl(chatImageName(i, k)),
          promptThumbnail(shown[i].images[k], kTranscriptImageHeight));
  chatLog_->setHtml(chatTranscriptHtml(shown, pendingReply_));
  chatLog_->verticalScrollBar()->setValue(chatLog_->verticalScrollBar()->maximum());
}

}  // namespace lattice::ui
