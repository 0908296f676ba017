// The Playground's chat mode as plain functions: a conversation of role-tagged turns rendered
// with the checkpoint tokenizer's chat template (data/chat_template.h: the tokenizer_config.json
// template of a Hugging Face tokenizer, else a built-in one) into the prompt the model
// continues, ending with the header of the assistant's next turn; the texts that end that turn;
// and the conversation as the transcript shows it.
#pragma once

#include <QList>
#include <QString>
#include <QStringList>

#include "data/chat_template.h"
#include "lattice/status.h"
#include "playground/playground_session.h"

namespace lattice::ui {

// The prompt for the assistant's next turn: `turns` as `chat` renders them with the generation
// prompt, each image of a turn an `<image>` line before its content (Hugging Face's
// apply_chat_template(add_generation_prompt=True, tokenize=False)).
Result<std::string> chatPrompt(const ChatTemplate& chat, const QList<ChatTurn>& turns);

// The texts that end the assistant's turn (the template's end-of-turn tokens and its EOS as
// text), for the generation's stop list; the tokenizer's EOD ends it too (stop at EOD).
QStringList chatStops(const ChatTemplate& chat);

// The conversation as HTML for the transcript: one block per turn, the role in bold, a turn's
// images as <img> of chatImageName(turn, image) (resources the transcript's document holds).
QString chatImageName(qsizetype turn, qsizetype image);
QString chatTranscriptHtml(const QList<ChatTurn>& turns, const QString& pendingReply = {});

}  // namespace lattice::ui
