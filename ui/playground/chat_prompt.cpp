// chatPrompt: the conversation through the chat template; the transcript's HTML.
#include "playground/chat_prompt.h"

#include <vector>

namespace lattice::ui {

Result<std::string> chatPrompt(const ChatTemplate& chat, const QList<ChatTurn>& turns) {
  std::vector<ChatMessage> messages;
  messages.reserve(static_cast<size_t>(turns.size()));
  for (const ChatTurn& t : turns)
    messages.push_back({t.role.toStdString(), t.content.toStdString()});
  return chat.render(messages, /*add_generation_prompt=*/true);
}

QStringList chatStops(const ChatTemplate& chat) {
  QStringList stops;
  for (const std::string& s : chat.end_of_turn())
    if (!s.empty() && !stops.contains(QString::fromStdString(s)))
      stops << QString::fromStdString(s);
  if (!chat.eos_token().empty() && !stops.contains(QString::fromStdString(chat.eos_token())))
    stops << QString::fromStdString(chat.eos_token());
  return stops;
}

QString chatTranscriptHtml(const QList<ChatTurn>& turns, const QString& pendingReply) {
  auto block = [](const QString& role, const QString& content, bool faded) {
    QString text = content.toHtmlEscaped();
    text.replace('\n', QStringLiteral("<br>"));
    const QString name = role.isEmpty() ? role : role.left(1).toUpper() + role.mid(1);
    return QStringLiteral("<p style='margin-bottom:8px%1'><b>%2</b><br>%3</p>")
        .arg(faded ? QStringLiteral("; color:gray") : QString(), name.toHtmlEscaped(), text);
  };
  QString html;
  for (const ChatTurn& t : turns) html += block(t.role, t.content, false);
  if (!pendingReply.isNull()) html += block(QStringLiteral("assistant"), pendingReply, true);
  return html;
}

}  // namespace lattice::ui
