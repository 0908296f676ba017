// chatPrompt: the conversation through the chat template; the transcript's HTML.
#include "playground/chat_prompt.h"

#include <vector>

namespace lattice::ui {

Result<std::string> chatPrompt(const ChatTemplate& chat, const QList<ChatTurn>& turns) {
  std::vector<ChatMessage> messages;
  messages.reserve(static_cast<size_t>(turns.size()));
  for (const ChatTurn& t : turns) {
    // A turn's images come first, an `<image>` line each (LLaVA's data: "<image>\nText").
    std::string content;
    for (qsizetype i = 0; i < t.images.size(); i++) content += "<image>\n";
    messages.push_back({t.role.toStdString(), content + t.content.toStdString()});
  }
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

QString chatImageName(qsizetype turn, qsizetype image) {
  return QStringLiteral("turn%1-image%2").arg(turn).arg(image);
}

QString chatTranscriptHtml(const QList<ChatTurn>& turns, const QString& pendingReply) {
  auto block = [](const QString& role, const QString& content, const QString& images, bool faded) {
    QString text = content.toHtmlEscaped();
    text.replace('\n', QStringLiteral("<br>"));
    const QString name = role.isEmpty() ? role : role.left(1).toUpper() + role.mid(1);
    return QStringLiteral("<p style='margin-bottom:8px%1'><b>%2</b><br>%3%4</p>")
        .arg(faded ? QStringLiteral("; color:gray") : QString(), name.toHtmlEscaped(), images,
             text);
  };
  QString html;
  for (qsizetype i = 0; i < turns.size(); i++) {
    QString images;
    for (qsizetype k = 0; k < turns[i].images.size(); k++)
      images += QStringLiteral("<img src='%1' title='%2'> ")
                    .arg(chatImageName(i, k), turns[i].images[k].name.toHtmlEscaped());
    if (!images.isEmpty()) images += QStringLiteral("<br>");
    html += block(turns[i].role, turns[i].content, images, false);
  }
  if (!pendingReply.isNull())
    html += block(QStringLiteral("assistant"), pendingReply, QString(), true);
  return html;
}

}  // namespace lattice::ui
