// The Playground's model and its worker thread: a Generator (engine/include/lattice/infer.h,
// one process, TP 1) with the tokenizer the checkpoint recorded, loaded once and kept while
// the same checkpoint stays selected. Loads and generations run off the UI thread, one at a
// time in the order asked; each generated token is signalled as soon as it is chosen, with
// the text it adds (whole UTF-8 characters only) and its log-probability. Signals arrive
// queued on the thread that owns the session.
#pragma once

#include <QByteArray>
#include <QList>
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <atomic>
#include <memory>

namespace lattice::ui {

// An image attached to a prompt (a vision-language model's, image_attachments.h): the file as
// read, PNG or JPEG, decoded when the generation runs.
struct PromptImage {
  QString name;      // the file it came from, for messages and tooltips
  QByteArray bytes;  // the file's contents
  bool operator==(const PromptImage&) const = default;
};

// One turn of a chat (the Playground's chat mode, chat_prompt.h).
struct ChatTurn {
  QString role;  // "system", "user" or "assistant"
  QString content;
  QList<PromptImage> images =
      {};  // a user turn's images: an `<image>` line each before the content
  bool operator==(const ChatTurn&) const = default;
};

// What a load brought: the checkpoint, its model shape and tokenizer.
struct ModelSummary {
  QString path;        // as asked: a save directory or an iter_NNNNNNN directory
  int iteration = -1;  // the checkpoint's iteration (-1: unknown)
  int layers = 0, hidden = 0, heads = 0, context = 0, vocab = 0;
  qint64 parameters = 0;
  QString tokenizer;  // its --tokenizer-type
  // The chat template the chat mode renders with (chat_template_for: the tokenizer's own, else
  // a built-in); empty with chatProblem saying why there is none.
  QString chatTemplate, chatProblem;
  // Images: how many a prompt can hold (each takes imageTokens of the context); 0 with
  // imageProblem saying why the model takes none (no vision tower).
  int maxImages = 0, imageTokens = 0, imageSize = 0;
  QString imageProblem;
  double seconds = 0;  // time to load
};

struct PlaygroundRequest {
  QString prompt;   // completion mode: tokenized as `lattice generate` (its BOS first, if any)
  int tokens = 64;  // tokens to generate (fewer at EOD, the stop text, the context end)
  double temperature = 1.0;  // 0: greedy
  int topK = 0;              // 0: off; 1: greedy
  double topP = 0.0;         // 0: off
  quint64 seed = 1234;
  bool stopAtEod = true;
  QString stop;  // end at this text; empty: none
  // Chat mode when not empty: the prompt is these turns rendered with the checkpoint's chat
  // template (ending with the assistant's header), and the template's end-of-turn texts stop
  // the reply; `prompt` is not used.
  QList<ChatTurn> chat;
  // Completion mode: the images the prompt's `<image>` markers stand for, in order (a prompt
  // without a marker gets "<image>\n" first), as `lattice generate --image`. Chat mode: the
  // turns carry their own.
  QList<PromptImage> images;
};

struct GenerationSummary {
  QString promptText;  // the prompt as the tokenizer decodes it
  QString text;        // the prompt's text and the continuation, as `lattice generate` prints it
  int tokens = 0;      // generated ids, an ending EOD included
  int promptTokens = 0;
  double firstTokenMs = 0;  // from the start to the first token (the prompt's prefill)
  double elapsedMs = 0;
  QString finish;  // "length", "eod", "stop" or "cancelled"
  QString reply;   // the continuation alone, without an ending EOD and cut before a stop text
};

class PlaygroundSession : public QObject {
  Q_OBJECT

 public:
  explicit PlaygroundSession(QObject* parent = nullptr);
  ~PlaygroundSession() override;  // cancels a generation and waits for the worker

  // Loads a checkpoint in place of the current model (a generation under way is stopped);
  // loaded() or loadFailed() follow.
  void load(const QString& path);
  // Starts a generation with the model loaded by then; returns its number, which every
  // following signal of it carries: started(), tokenGenerated() per token, then generated()
  // or generationFailed().
  quint64 generate(const PlaygroundRequest& request);
  // Ends the running generation before its next token (generated() follows, "cancelled").
  void stop();

 signals:
  void loaded(const lattice::ui::ModelSummary& model);
  void loadFailed(const QString& path, const QString& message);
  void started(quint64 generation, const QString& promptText, int promptTokens);
  // `text`: what the token adds to the output (may be empty: part of a UTF-8 character, or
  // the end-of-document token); `ms`: since the generation started.
  void tokenGenerated(quint64 generation, const QString& text, int id, double logprob, double ms);
  void generated(quint64 generation, const lattice::ui::GenerationSummary& summary);
  void generationFailed(quint64 generation, const QString& message);

 private:
  struct State;  // the generator and tokenizer; touched by the worker thread only
  std::shared_ptr<State> state_;
  std::shared_ptr<std::atomic<bool>> cancel_;  // the latest generation's
  quint64 generations_ = 0;
  QThreadPool pool_;  // one thread: tasks run in the order they were asked
};

// The length of the longest prefix of `text` that ends on a whole UTF-8 character.
size_t completeUtf8Length(const std::string& text);

}  // namespace lattice::ui
