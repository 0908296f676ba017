// The Playground's images on a real vision-language checkpoint: a tiny LLaVA-style model trained
// by `lattice train` on the mock image-text stream (a solid-colour image whose colour the
// caption's first token names) as test_vlm_generate.sh trains it. A file dropped on the prompt
// (a QDropEvent carrying its URL) is attached, shown in the strip, removable, and carried by the
// next request; the greedy continuation with it is exactly what `lattice generate --image` prints
// for the same prompt, and another image gives another continuation. Refused with a sentence: a
// drop on a text model, a file that is not an image (named), more images than the prompt holds.
// Chat mode keeps a message's images in its turn and shows them in the transcript.
#include <QtTest/QtTest>

#include <QFile>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QToolButton>

#include "common/process.h"
#include "common/tiny_model.h"
#include "playground/chat_prompt.h"
#include "playground/playground_view.h"
#include "playground/token_output.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QStringList kVlm =
    QStringList{"--num-layers", "2",  "--hidden-size", "32", "--num-attention-heads", "4",
                "--seq-length", "16", "--vocab-size",  "15"} +
    testing::qt_args(testing::tiny_tower_flags(1));
const QString kPrompt = QStringLiteral("<image>");
constexpr int kTokens = 6;

// Drops `files` on `target` as a file manager does: enter, then drop.
void dropFiles(QWidget* target, const QStringList& files) {
  QMimeData mime;
  QList<QUrl> urls;
  for (const QString& f : files) urls << QUrl::fromLocalFile(f);
  mime.setUrls(urls);
  const QPoint at = target->rect().center();
  QDragEnterEvent enter(at, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  QVERIFY(enter.isAccepted());
  QDropEvent drop(QPointF(at), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &drop);
  QVERIFY(drop.isAccepted());
}

QByteArray fileBytes(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

}  // namespace

class TestStudioPlaygroundImages : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString file(const QString& name) const { return dir_.filePath(name); }

  bool load(PlaygroundView& view, const QString& path) {
    QSignalSpy loaded(&view, &PlaygroundView::modelLoaded);
    view.openCheckpoint(path);
    return loaded.wait(20000);
  }

  static void setGreedy(PlaygroundView& view) {
    PlaygroundSettings s = view.settings();
    s.request.prompt = kPrompt;
    s.request.tokens = kTokens;
    s.request.temperature = 0;
    s.request.stopAtEod = false;
    view.setSettings(s);
  }

  static QString generateAndWait(PlaygroundView& view) {
    QSignalSpy ended(&view, &PlaygroundView::generationEnded);
    view.generate();
    if (!ended.wait(20000)) return QStringLiteral("timed out");
    return ended.at(0).at(0).toString();
  }

  // `lattice generate --image IMAGE`'s greedy output for kPrompt.
  QString cliOutput(const QString& image) {
    testing::Run g = testing::run_process(
        LATTICE_CLI_PATH, {"generate", "--load", file("vlm"), "--prompt", kPrompt,
                           "--tokens-to-generate", QString::number(kTokens), "--temperature", "0",
                           "--ignore-eod", "--image", image, "--threads", "1"});
    if (g.exit_code != 0) qFatal("lattice generate failed: %s", qPrintable(g.err));
    return g.out.trimmed();
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
    qputenv("LATTICE_DATA_DIR", file("data").toUtf8());
    // The mock stream's palette: colour 0 red, 2 blue (their captions start with 1 and 3).
    for (auto [name, colour] : {std::pair{"red.png", QColor(220, 40, 40)},
                                {"blue.png", QColor(40, 80, 220)},
                                {"green.jpg", QColor(40, 180, 60)}}) {
      QImage image(20, 20, QImage::Format_RGB32);
      image.fill(colour);
      QVERIFY(image.save(file(name)));
    }
    QFile corrupt(file("corrupt.png"));
    QVERIFY(corrupt.open(QIODevice::WriteOnly));
    corrupt.write("not an image");
    corrupt.close();
    testing::Run t = testing::run_process(LATTICE_CLI_PATH, QStringList{"train",
                                                                        "--mock-data",
                                                                        "--micro-batch-size",
                                                                        "4",
                                                                        "--global-batch-size",
                                                                        "8",
                                                                        "--train-iters",
                                                                        "60",
                                                                        "--lr",
                                                                        "1e-2",
                                                                        "--no-db",
                                                                        "--eval-iters",
                                                                        "0",
                                                                        "--hidden-dropout",
                                                                        "0",
                                                                        "--attention-dropout",
                                                                        "0",
                                                                        "--save",
                                                                        file("vlm"),
                                                                        "--threads",
                                                                        "1"} +
                                                                kVlm);
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    testing::Run text = testing::run_process(LATTICE_CLI_PATH, {"train",
                                                                "--mock-data",
                                                                "--num-layers",
                                                                "1",
                                                                "--hidden-size",
                                                                "32",
                                                                "--num-attention-heads",
                                                                "4",
                                                                "--seq-length",
                                                                "16",
                                                                "--vocab-size",
                                                                "15",
                                                                "--micro-batch-size",
                                                                "2",
                                                                "--train-iters",
                                                                "1",
                                                                "--no-db",
                                                                "--eval-iters",
                                                                "0",
                                                                "--save",
                                                                file("text"),
                                                                "--threads",
                                                                "1"});
    QVERIFY2(text.exit_code == 0, qPrintable(text.err));
  }

  void a_dropped_image_is_attached_and_sent() {
    PlaygroundView view;
    view.show();
    QVERIFY(load(view, file("vlm")));
    QVERIFY2(view.modelText().contains("vision 16x16 (4 tokens an image)"),
             qPrintable(view.modelText()));
    QVERIFY(view.attachButton()->isEnabled());
    setGreedy(view);
    dropFiles(view.promptEdit()->viewport(), {file("red.png")});
    QVERIFY2(view.errorText().isEmpty(), qPrintable(view.errorText()));
    QCOMPARE(view.attachedImages().size(), 1);
    QCOMPARE(view.attachedImages()[0].name, file("red.png"));
    QVERIFY(view.imageStrip()->isVisible());
    QCOMPARE(view.imageStrip()->findChildren<QToolButton*>("playgroundRemoveImage").size(), 1);
    QCOMPARE(view.promptEdit()->toPlainText(), kPrompt);  // the path was not pasted
    // The request built for the next generation carries the file's bytes.
    const PlaygroundRequest r = view.request();
    QCOMPARE(r.images.size(), 1);
    QCOMPARE(r.images[0].bytes, fileBytes(file("red.png")));

    const QString red = cliOutput(file("red.png"));
    QVERIFY2(red.startsWith("<image>1 "), qPrintable(red));  // the caption of red
    QCOMPARE(generateAndWait(view), QString("length"));
    QCOMPARE(view.output()->text(), red);
    QCOMPARE(view.attachedImages().size(), 1);  // completion mode keeps the prompt and its images

    // Removed with its button; another image (dropped on the view, not the prompt) gives
    // `lattice generate`'s other continuation.
    view.imageStrip()->findChild<QToolButton*>("playgroundRemoveImage")->click();
    QVERIFY(view.attachedImages().isEmpty());
    QVERIFY(!view.imageStrip()->isVisible());
    QVERIFY(view.request().images.isEmpty());
    dropFiles(&view, {file("blue.png")});
    QCOMPARE(view.attachedImages().size(), 1);
    const QString blue = cliOutput(file("blue.png"));
    QVERIFY2(blue.startsWith("<image>3 "), qPrintable(blue));
    QCOMPARE(generateAndWait(view), QString("length"));
    QCOMPARE(view.output()->text(), blue);
  }

  void refusals_name_the_reason() {
    PlaygroundView view;
    view.show();
    // Before any model, and on a text model: no vision tower, nothing attached.
    QVERIFY(!view.attachImages({file("red.png")}));
    QVERIFY2(view.errorText().contains("vision-language checkpoint"), qPrintable(view.errorText()));
    QVERIFY(load(view, file("text")));
    QVERIFY(!view.attachButton()->isEnabled());
    dropFiles(view.promptEdit()->viewport(), {file("red.png")});
    QVERIFY2(view.errorText().contains("no vision tower"), qPrintable(view.errorText()));
    QVERIFY(view.attachedImages().isEmpty());

    QVERIFY(load(view, file("vlm")));
    QVERIFY(view.errorText().isEmpty());
    // A file that does not decode is named; the good one beside it is attached.
    dropFiles(view.promptEdit()->viewport(), {file("corrupt.png"), file("green.jpg")});
    QVERIFY2(view.errorText().contains("corrupt.png"), qPrintable(view.errorText()));
    QCOMPARE(view.attachedImages().size(), 1);
    // The context of 16 holds 3 images of 4 tokens and some text: a fourth is refused.
    QVERIFY(view.attachImages({file("red.png"), file("blue.png")}));
    QVERIFY(!view.attachImages({file("red.png")}));
    QVERIFY2(view.errorText().contains("at most 3 images"), qPrintable(view.errorText()));
    QCOMPARE(view.attachedImages().size(), 3);
  }

  void chat_turns_keep_their_images() {
    // The rendered conversation gives each image an `<image>` line before its turn's text.
    Result<ChatTemplate> chatml = ChatTemplate::builtin("chatml");
    QVERIFY(chatml.is_ok());
    const PromptImage red{file("red.png"), fileBytes(file("red.png"))};
    Result<std::string> text = chatPrompt(*chatml, {{"user", "What colour?", {red, red}}});
    QVERIFY(text.is_ok());
    QCOMPARE(QString::fromStdString(*text),
             QString("<|im_start|>user\n<image>\n<image>\nWhat colour?<|im_end|>\n"
                     "<|im_start|>assistant\n"));

    PlaygroundView view;
    view.show();
    QVERIFY(load(view, file("vlm")));
    view.setMode(PlaygroundView::Mode::kChat);
    dropFiles(view.promptEdit()->viewport(), {file("red.png")});
    QCOMPARE(view.attachedImages().size(), 1);
    QCOMPARE(view.request().images.size(), 0);  // chat mode: the turn carries them
    view.promptEdit()->setPlainText("What colour?");
    QSignalSpy ended(&view, &PlaygroundView::generationEnded);
    view.generate();
    // The images were decoded and placed; NullTokenizer cannot encode the template's words.
    QVERIFY(ended.wait(20000));
    QVERIFY2(view.errorText().contains("not a token id"), qPrintable(view.errorText()));
    QCOMPARE(view.conversation().size(), 1);
    QCOMPARE(view.conversation()[0].images.size(), 1);
    QCOMPARE(view.conversation()[0].images[0].bytes, red.bytes);
    QVERIFY(view.attachedImages().isEmpty());  // sent with the message
    QVERIFY(!view.imageStrip()->isVisible());
    QVERIFY(view.request().chat.back().images == view.conversation()[0].images);
    // The transcript shows the image, a thumbnail held by its document.
    QVERIFY2(view.chatLog()->toHtml().contains(chatImageName(0, 0)),
             qPrintable(view.chatLog()->toHtml()));
    const QVariant thumb = view.chatLog()->document()->resource(QTextDocument::ImageResource,
                                                                QUrl(chatImageName(0, 0)));
    QCOMPARE(thumb.value<QImage>().height(), 64);
  }
};

QTEST_MAIN(TestStudioPlaygroundImages)
#include "test_studio_playground_images.moc"
