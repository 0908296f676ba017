// The Playground's chat mode: a conversation rendered with a built-in chat template is exactly
// the prompt Hugging Face's apply_chat_template writes (ChatML, Llama 3); on a real checkpoint
// (a tiny model trained by `lattice train` with Qwen 3's tokenizer, whose tokenizer_config.json
// carries its chat template), Send renders the system prompt and the turns with that template,
// generates the assistant's turn, and keeps the reply as the next turn of the conversation.
#include <QtTest/QtTest>

#include <QFile>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTextBrowser>

#include "common/process.h"
#include "lattice/tokenizer.h"
#include "playground/chat_prompt.h"
#include "playground/playground_view.h"
#include "playground/token_output.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QList<ChatTurn> kConversation = {{"system", "You are terse."},
                                       {"user", "Hi"},
                                       {"assistant", "Hello."},
                                       {"user", "Add 2 and 2."}};

QString rendered(const Result<std::string>& r) {
  if (!r) qFatal("render failed: %s", r.status().message().c_str());
  return QString::fromStdString(r.value());
}

TokenizerOptions qwen3() {
  TokenizerOptions t;
  t.type = "HuggingFaceTokenizer";
  t.model_file = hf_tokenizers_dir() + "/qwen3";
  return t;
}

}  // namespace

class TestStudioChat : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString ckpt() const { return dir_.filePath("ckpt"); }

  // Sends `message` in chat mode and waits for the reply; returns how it ended.
  static QString send(PlaygroundView& view, const QString& message) {
    view.promptEdit()->setPlainText(message);
    QSignalSpy ended(&view, &PlaygroundView::generationEnded);
    view.generate();
    if (!ended.wait(30000)) return QStringLiteral("timed out");
    return ended.at(0).at(0).toString();
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
  }

  // ChatML as Hugging Face writes it (Qwen's and many others' template), and Llama 3's headers.
  void builtin_templates_render_the_conversation() {
    Result<ChatTemplate> chatml = ChatTemplate::builtin("chatml");
    QVERIFY2(chatml.is_ok(), chatml.status().message().c_str());
    QCOMPARE(rendered(chatPrompt(*chatml, kConversation)),
             QString("<|im_start|>system\nYou are terse.<|im_end|>\n"
                     "<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\nHello.<|im_end|>\n"
                     "<|im_start|>user\nAdd 2 and 2.<|im_end|>\n"
                     "<|im_start|>assistant\n"));
    QVERIFY(chatStops(*chatml).contains("<|im_end|>"));
    Result<ChatTemplate> llama3 = ChatTemplate::builtin("llama3");
    QVERIFY2(llama3.is_ok(), llama3.status().message().c_str());
    const QString text = rendered(chatPrompt(*llama3, kConversation.mid(1, 1)));
    QVERIFY2(text.contains("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>") &&
                 text.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\n"),
             qPrintable(text));
    QVERIFY(chatStops(*llama3).contains("<|eot_id|>"));
    // The transcript names each role and escapes the text.
    const QString html = chatTranscriptHtml({{"user", "a < b"}}, QStringLiteral("…"));
    QVERIFY2(html.contains("<b>User</b>") && html.contains("a &lt; b") &&
                 html.contains("<b>Assistant</b>"),
             qPrintable(html));
  }

  void chat_mode_on_a_checkpoint() {
    const TokenizerOptions tok = qwen3();
    if (!QFileInfo::exists(QString::fromStdString(tok.model_file + "/tokenizer_config.json")))
      QSKIP("Qwen 3's tokenizer is not installed (installers/fetch-hf-tokenizers.sh)");
    // A few hundred lines in Qwen 3's tokens (mock data would be NullTokenizer ids), and one
    // iteration of a 1-layer model on them: the checkpoint records the tokenizer.
    const QString text = dir_.filePath("lines.txt"), prefix = dir_.filePath("qwen");
    {
      QFile f(text);
      QVERIFY(f.open(QIODevice::WriteOnly));
      for (int i = 0; i < 200; ++i)
        f.write(QString("Line %1: the quick brown fox jumps over the lazy dog.\n").arg(i).toUtf8());
    }
    const QString model = QString::fromStdString(tok.model_file);
    testing::Run p = testing::run_process(
        LATTICE_CLI_PATH, {"data", "preprocess", "--input", text, "--input-format", "lines",
                           "--output-prefix", prefix, "--tokenizer-type", "HuggingFaceTokenizer",
                           "--tokenizer-model", model, "--append-eod"});
    QVERIFY2(p.exit_code == 0, qPrintable(p.err));
    testing::Run t = testing::run_process(LATTICE_CLI_PATH, {"train",
                                                             "--data-path",
                                                             prefix + "_text_document",
                                                             "--tokenizer-type",
                                                             "HuggingFaceTokenizer",
                                                             "--tokenizer-model",
                                                             model,
                                                             "--num-layers",
                                                             "1",
                                                             "--hidden-size",
                                                             "32",
                                                             "--num-attention-heads",
                                                             "2",
                                                             "--seq-length",
                                                             "128",
                                                             "--micro-batch-size",
                                                             "1",
                                                             "--train-iters",
                                                             "1",
                                                             "--eval-iters",
                                                             "0",
                                                             "--save",
                                                             ckpt(),
                                                             "--no-db",
                                                             "--threads",
                                                             "1"});
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    Result<ChatTemplate> chat = chat_template_for(tok);
    QVERIFY2(chat.is_ok(), chat.status().message().c_str());

    PlaygroundView view;
    view.show();
    QSignalSpy loaded(&view, &PlaygroundView::modelLoaded);
    view.openCheckpoint(ckpt());
    QVERIFY(loaded.wait(30000));
    view.setMode(PlaygroundView::Mode::kChat);
    QCOMPARE(view.generateButton()->text(), QString("Send"));
    QVERIFY2(view.chatTemplateText().contains(QString::fromStdString(chat->name())),
             qPrintable(view.chatTemplateText()));
    PlaygroundSettings s = view.settings();
    s.request.tokens = 6;
    s.request.topK = 1;
    view.setSettings(s);
    view.setSystemPrompt("Be brief.");

    const QString ended = send(view, "Hi");
    QVERIFY2(ended == "length" || ended == "eod" || ended == "stop", qPrintable(ended));
    QCOMPARE(view.conversation().size(), 2);
    QCOMPARE(view.conversation()[0], (ChatTurn{"user", "Hi"}));
    QCOMPARE(view.conversation()[1].role, QString("assistant"));
    const QString prompt = rendered(chatPrompt(*chat, {{"system", "Be brief."}, {"user", "Hi"}}));
    // The model read the rendered conversation and continued the assistant's turn.
    QCOMPARE(view.output()->text(), prompt + view.conversation()[1].content);
    QVERIFY(view.promptEdit()->toPlainText().isEmpty());
    QVERIFY(view.chatLog()->toPlainText().contains("Be brief."));

    // The next turn carries the reply.
    const ChatTurn reply = view.conversation()[1];
    const QString again = send(view, "Again");
    QVERIFY2(again == "length" || again == "eod" || again == "stop",
             qPrintable(again + ": " + view.errorText()));
    QCOMPARE(view.conversation().size(), 4);
    const QString second = rendered(
        chatPrompt(*chat, {{"system", "Be brief."}, {"user", "Hi"}, reply, {"user", "Again"}}));
    QVERIFY2(view.output()->text().startsWith(second), qPrintable(view.output()->text()));

    // An empty message with nothing unanswered sends nothing.
    view.promptEdit()->clear();
    view.generate();
    QVERIFY(!view.isGenerating());
    QVERIFY(view.errorText().contains("message"));
    view.newChat();
    QVERIFY(view.conversation().isEmpty());
  }
};

QTEST_MAIN(TestStudioChat)
#include "test_studio_chat.moc"
