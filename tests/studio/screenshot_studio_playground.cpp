// Not a test: renders the Playground for docs/studio.md. It opens a run's checkpoint from the
// run store, generates from a prompt, and saves the window once the text is in, as
// `lattice-studio --screenshot` saves the other views (offscreen, no saved settings). With
// --chat, the prompt is sent as a message in the chat mode (after --system), once per --chat
// given plus the prompt's own turn. With --image, the files are attached to the prompt (to
// the prompt's own turn in chat mode) as a drop would attach them.
// usage: screenshot_studio_playground OUT.png --db DB --run RUN --prompt TEXT
//        [--tokens N] [--temperature T] [--top-p P] [--seed S] [--theme light|dark]
//        [--chat [--system TEXT] [--turn TEXT]...] [--image FILE]...
#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QPlainTextEdit>
#include <QTimer>
#include <cstdio>

#include "app/main_window.h"
#include "app/screenshot.h"
#include "lattice/storage/run_store.h"
#include "playground/playground_view.h"
#include "wait_for.h"

using namespace lattice::ui;

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addPositionalArgument("out", "The PNG to write.");
  const QCommandLineOption db("db", "The run store.", "PATH"), run("run", "Run id or name.", "RUN"),
      prompt("prompt", "The prompt.", "TEXT"), tokens("tokens", "Tokens.", "N", "48"),
      temperature("temperature", "Temperature.", "T", "0.8"), topP("top-p", "Top-p.", "P", "0.9"),
      seed("seed", "Seed.", "S", "7"), theme("theme", "light or dark.", "THEME", "light"),
      chat("chat", "Chat mode: send the prompt as a message."),
      system("system", "Chat mode: the system prompt.", "TEXT"),
      turn("turn", "Chat mode: a message sent before the prompt.", "TEXT"),
      image("image", "An image attached to the prompt.", "FILE");
  parser.addOptions(
      {db, run, prompt, tokens, temperature, topP, seed, theme, chat, system, turn, image});
  parser.process(app);
  if (parser.positionalArguments().size() != 1 || !parser.isSet(db) || !parser.isSet(run)) {
    std::fprintf(stderr, "%s", qPrintable(parser.helpText()));
    return 2;
  }
  auto store = lattice::storage::RunStore::open(parser.value(db).toStdString());
  if (!store) return std::fprintf(stderr, "%s\n", store.status().message().c_str()), 1;
  auto info = (*store)->find_run(parser.value(run).toStdString());
  if (!info) return std::fprintf(stderr, "%s\n", info.status().message().c_str()), 1;

  MainWindow::Options options;
  options.useSettings = false;
  options.measureCpu = false;
  options.database = parser.value(db);
  MainWindow window(options);
  window.setTheme(themeFromName(parser.value(theme)));
  window.resize(1280, 800);
  window.showView(MainWindow::View::kPlayground);
  window.show();
  PlaygroundView* view = window.playgroundView();
  PlaygroundSettings s = view->settings();
  s.request.prompt = parser.value(prompt);
  s.request.tokens = parser.value(tokens).toInt();
  s.request.temperature = parser.value(temperature).toDouble();
  s.request.topP = parser.value(topP).toDouble();
  s.request.seed = parser.value(seed).toULongLong();
  view->setSettings(s);
  view->openRun(info->id);
  if (!waitFor(view, &PlaygroundView::modelLoaded, 60)) {
    std::fprintf(stderr, "the checkpoint did not load: %s\n", qPrintable(view->errorText()));
    return 1;
  }
  if (parser.isSet(chat)) {
    view->setMode(PlaygroundView::Mode::kChat);
    view->setSystemPrompt(parser.value(system));
    const QStringList messages = parser.values(turn) << parser.value(prompt);
    for (qsizetype i = 0; i < messages.size(); i++) {
      view->promptEdit()->setPlainText(messages[i]);
      if (i + 1 == messages.size() && parser.isSet(image) &&
          !view->attachImages(parser.values(image)))
        return std::fprintf(stderr, "%s\n", qPrintable(view->errorText())), 1;
      view->generate();
      if (!view->isGenerating())  // refused: no chat template, nothing to send
        return std::fprintf(stderr, "%s\n", qPrintable(view->errorText())), 1;
      if (!waitFor(view, &PlaygroundView::generationEnded, 120)) return 1;
    }
  } else {
    if (parser.isSet(image) && !view->attachImages(parser.values(image)))
      return std::fprintf(stderr, "%s\n", qPrintable(view->errorText())), 1;
    view->generate();
    if (!waitFor(view, &PlaygroundView::generationEnded, 120)) return 1;
  }
  const lattice::Status saved = saveScreenshot(window, MainWindow::View::kPlayground,
                                               QSize(1280, 800), parser.positionalArguments()[0]);
  if (!saved) return std::fprintf(stderr, "%s\n", saved.message().c_str()), 1;
  std::printf("%s\n", qPrintable(view->statsText()));
  return 0;
}
