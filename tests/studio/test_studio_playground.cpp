// The Playground on a real checkpoint: a tiny model trained by `lattice train` (one process,
// recorded in a run store) is offered in the run list, loads off the UI thread, and greedily
// generates, token by token, exactly what `lattice generate --top-k 1` prints (also with a
// tokenizer that puts a BOS first, tests/common/tiny_tokenizer.h); Stop ends a
// generation early; a missing, corrupt or tokenizer-less checkpoint is an error in the view,
// which stays usable; the same model as GPT-2 weights loads from the file and its config.json.
// The engine's cancel flag is checked on a random model.
#include <QtTest/QtTest>

#include <QComboBox>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <atomic>

#include "app/main_window.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/tiny_tokenizer.h"
#include "history/history_view.h"
#include "lattice/infer.h"
#include "playground/playground_io.h"
#include "playground/playground_view.h"
#include "playground/token_output.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QStringList kArch = {"--num-layers",          "2", "--hidden-size", "64",
                           "--num-attention-heads", "4", "--seq-length",  "256"};
const QString kPrompt = QStringLiteral("1 2 3 4");
constexpr int kTokens = 20;
// A long request, for Stop to end early: the context (256) less the prompt, so that a stop
// that lands late still leaves the output a prefix of what the CLI generates for as many.
constexpr int kLongTokens = 250;

PlaygroundRequest greedy(int tokens) {
  PlaygroundRequest r;
  r.prompt = kPrompt;
  r.tokens = tokens;
  r.topK = 1;
  r.stopAtEod = true;
  return r;
}

void setRequest(PlaygroundView& view, const PlaygroundRequest& r) {
  PlaygroundSettings s = view.settings();
  s.request = r;
  view.setSettings(s);
}

// Generates and waits for the end; returns how it ended ("length", "cancelled", ...).
QString generateAndWait(PlaygroundView& view, bool stopAtOnce = false) {
  QSignalSpy ended(&view, &PlaygroundView::generationEnded);
  view.generate();
  if (stopAtOnce) view.stop();
  if (!ended.wait(10000)) return QStringLiteral("timed out");
  return ended.at(0).at(0).toString();
}

}  // namespace

class TestStudioPlayground : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString ckpt() const { return dir_.filePath("ckpt"); }
  QString db() const { return dir_.filePath("runs.sqlite"); }
  QString expected_;      // `lattice generate`'s greedy output for kPrompt, kTokens tokens
  QString expectedLong_;  // the same for kLongTokens tokens

  bool load(PlaygroundView& view, const QString& path) {
    QSignalSpy loaded(&view, &PlaygroundView::modelLoaded);
    view.openCheckpoint(path);
    return loaded.wait(10000);
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
    testing::Run t = testing::run_process(LATTICE_CLI_PATH, QStringList{"train",
                                                                        "--mock-data",
                                                                        "--vocab-size",
                                                                        "300",
                                                                        "--micro-batch-size",
                                                                        "2",
                                                                        "--global-batch-size",
                                                                        "2",
                                                                        "--train-iters",
                                                                        "2",
                                                                        "--lr",
                                                                        "1e-4",
                                                                        "--init-method-std",
                                                                        "0.3",
                                                                        "--eval-iters",
                                                                        "0",
                                                                        "--save",
                                                                        ckpt(),
                                                                        "--db",
                                                                        db(),
                                                                        "--run-name",
                                                                        "tiny",
                                                                        "--threads",
                                                                        "1"} +
                                                                kArch);
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    for (auto [tokens, text] : {std::pair{kTokens, &expected_}, {kLongTokens, &expectedLong_}}) {
      testing::Run g = testing::run_process(
          LATTICE_CLI_PATH, {"generate", "--load", ckpt(), "--top-k", "1", "--tokens-to-generate",
                             QString::number(tokens), "--prompt", kPrompt, "--threads", "1"});
      QVERIFY2(g.exit_code == 0, qPrintable(g.err));
      *text = g.out.trimmed();
    }
    QVERIFY(expectedLong_.startsWith(expected_));
    // Enough distinct tokens that a wrong position or a repeated token would show.
    const QStringList ids = expected_.split(' ');
    QVERIFY2(QSet<QString>(ids.begin(), ids.end()).size() > 8, qPrintable(expected_));
  }

  void the_run_list_offers_the_runs_checkpoint() {
    PlaygroundView view;
    QSignalSpy read(&view, &PlaygroundView::runsRead);
    view.setDatabase(db());
    QVERIFY(read.wait(5000));
    QComboBox* list = view.checkpointList();
    QCOMPARE(list->count(), 2);  // the prompt to choose, and the run
    QCOMPARE(list->itemText(1), QStringLiteral("tiny · iteration 2"));
    QCOMPARE(list->itemData(1).toString(), ckpt());
    QSignalSpy loaded(&view, &PlaygroundView::modelLoaded);
    view.openRun(1);
    QVERIFY(loaded.wait(10000));
    QCOMPARE(view.loadedCheckpoint(), ckpt());
    QCOMPARE(list->currentIndex(), 1);
    for (const char* part :
         {"2 layers", "hidden 64", "4 heads", "context 256", "NullTokenizer", "iteration 2"})
      QVERIFY2(view.modelText().contains(part), qPrintable(view.modelText()));
  }

  // Tokens arrive one by one and add up to what `lattice generate` prints.
  void greedy_streams_the_clis_text() {
    PlaygroundView view;
    view.show();
    QVERIFY(!view.generateButton()->isEnabled());  // nothing loaded yet
    QVERIFY(load(view, ckpt()));
    setRequest(view, greedy(kTokens));
    QStringList seen;  // the output after each change
    connect(view.output(), &QTextEdit::textChanged, this,
            [&] { seen << view.output()->toPlainText(); });
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected_);
    QCOMPARE(view.output()->toPlainText(), expected_);
    // One piece per token: had the streamed text disagreed with the final one, finish() would
    // have replaced it with one piece.
    QCOMPARE(view.output()->tokenCount(), kTokens);
    // Streamed: at least one change per token, each growing the text.
    QVERIFY2(seen.size() >= kTokens, qPrintable(QString::number(seen.size())));
    for (int i = 1; i < seen.size(); i++)
      if (!seen[i - 1].isEmpty()) QVERIFY(seen[i].startsWith(seen[i - 1]));
    QVERIFY2(view.statsText().contains(QStringLiteral("%1 tokens").arg(kTokens)) &&
                 view.statsText().contains("tokens/s") &&
                 view.statsText().contains("first token") &&
                 view.statsText().contains("ended: length"),
             qPrintable(view.statsText()));
    QVERIFY(view.errorText().isEmpty());
    // The model stays loaded: a second generation gives the same text.
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected_);
    // A stop text (the 6th generated id) ends it there and is cut off. (Not compared with
    // `lattice generate --stop`: with the NullTokenizer it joins prompt and continuation
    // without the space between them.)
    const QString stop = " " + expected_.split(' ')[4 + 5];
    PlaygroundRequest r = greedy(kTokens);
    r.stop = stop;
    setRequest(view, r);
    QCOMPARE(generateAndWait(view), QStringLiteral("stop"));
    QCOMPARE(view.output()->text(), expected_.left(expected_.indexOf(stop, kPrompt.size())));
    QVERIFY(expected_.startsWith(view.output()->text() + stop));
  }

  void stop_ends_the_generation_early() {
    PlaygroundView view;
    view.show();
    QVERIFY(load(view, ckpt()));
    setRequest(view, greedy(kLongTokens));
    QSignalSpy ended(&view, &PlaygroundView::generationEnded);
    view.generate();
    QVERIFY(view.stopButton()->isEnabled());
    QVERIFY(!view.generateButton()->isEnabled());
    view.stopButton()->click();
    QVERIFY(ended.wait(10000));
    QCOMPARE(ended.at(0).at(0).toString(), QStringLiteral("cancelled"));
    QVERIFY2(view.output()->tokenCount() < kLongTokens, qPrintable(view.statsText()));
    // However many tokens came before the stop landed, they are the greedy output's first ones
    // (compared with as many as were asked for, not with the short reference).
    QVERIFY2(expectedLong_.startsWith(view.output()->text()),
             qPrintable(view.output()->text() + "\nis not a prefix of\n" + expectedLong_));
    QVERIFY(view.generateButton()->isEnabled());
    QVERIFY(!view.stopButton()->isEnabled());
    setRequest(view, greedy(kTokens));
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected_);
  }

  void bad_checkpoints_are_errors_in_the_view() {
    // A corrupt weights file, and a tokenizer whose files are gone.
    const QString corrupt = dir_.filePath("corrupt"), noTokenizer = dir_.filePath("notok");
    for (const QString& copy : {corrupt, noTokenizer}) {
      QVERIFY(QDir().mkpath(copy + "/iter_0000002"));
      for (const char* f : {"metadata.json", "rank_00000.safetensors"})
        QVERIFY(QFile::copy(ckpt() + "/iter_0000002/" + f, copy + "/iter_0000002/" + f));
      QVERIFY(QFile::copy(ckpt() + "/latest_checkpointed_iteration.txt",
                          copy + "/latest_checkpointed_iteration.txt"));
    }
    QFile weights(corrupt + "/iter_0000002/rank_00000.safetensors");
    QVERIFY(weights.resize(weights.size() / 2));
    QFile meta(noTokenizer + "/iter_0000002/metadata.json");
    QVERIFY(meta.open(QIODevice::ReadOnly));
    QJsonObject json = QJsonDocument::fromJson(meta.readAll()).object();
    meta.close();
    QJsonObject config = json["config"].toObject();
    QCOMPARE(config["tokenizer-type"].toString(), QStringLiteral("NullTokenizer"));
    config["tokenizer-type"] = "GPT2BPETokenizer";
    config["vocab-file"] = "/nonexistent/vocab.json";
    config["merge-file"] = "/nonexistent/merges.txt";
    json["config"] = config;
    QVERIFY(meta.open(QIODevice::WriteOnly | QIODevice::Truncate));
    meta.write(QJsonDocument(json).toJson());
    meta.close();

    PlaygroundView view;
    view.show();
    const struct {
      QString path;
      const char* says;
    } cases[] = {{dir_.filePath("missing"), "missing"},
                 {dir_.path(), "latest_checkpointed_iteration"},
                 {corrupt, "rank_00000.safetensors"},
                 {noTokenizer, "tokenizer"}};
    for (const auto& c : cases) {
      QSignalSpy failed(&view, &PlaygroundView::modelFailed);
      view.openCheckpoint(c.path);
      QVERIFY2(failed.wait(10000), qPrintable(c.path));
      QVERIFY2(view.errorText().contains(c.path) && view.errorText().contains(c.says),
               qPrintable(view.errorText()));
      QVERIFY(view.loadedCheckpoint().isEmpty());
      QVERIFY(!view.generateButton()->isEnabled());
      view.generate();  // refused quietly, no crash
    }
    // Still usable: a good checkpoint loads and generates, and the error is gone.
    QVERIFY(load(view, ckpt()));
    QVERIFY(view.errorText().isEmpty());
    setRequest(view, greedy(kTokens));
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected_);
  }

  // Completion mode encodes the prompt as `lattice generate` does: with the BOS of a tokenizer
  // that has one (here a tiny tokenizer.json whose template puts "<|endoftext|>" first), so the
  // greedy text is the CLI's.
  void completion_puts_the_tokenizers_bos_first_as_generate() {
    const QString tokenizer = QString::fromStdString(
        testing::tiny_tokenizer(dir_, "bos-tokenizer", testing::with_bos_template));
    const QString lines = dir_.filePath("bos-lines.txt"), prefix = dir_.filePath("bos");
    {
      QFile f(lines);
      QVERIFY(f.open(QIODevice::WriteOnly));
      for (int i = 0; i < 50; ++i) f.write(QString("abc ca %1 cab, bac.\n").arg(i).toUtf8());
    }
    const QStringList tok = {"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
                             tokenizer};
    testing::Run p = testing::run_process(
        LATTICE_CLI_PATH, QStringList{"data", "preprocess", "--input", lines, "--input-format",
                                      "lines", "--output-prefix", prefix} +
                              tok);
    QVERIFY2(p.exit_code == 0, qPrintable(p.err));
    const QString bosCkpt = dir_.filePath("bos-ckpt");
    testing::Run t = testing::run_process(LATTICE_CLI_PATH, QStringList{"train",
                                                                        "--data-path",
                                                                        prefix + "_text_document",
                                                                        "--num-layers",
                                                                        "1",
                                                                        "--hidden-size",
                                                                        "32",
                                                                        "--num-attention-heads",
                                                                        "2",
                                                                        "--seq-length",
                                                                        "32",
                                                                        "--micro-batch-size",
                                                                        "1",
                                                                        "--train-iters",
                                                                        "1",
                                                                        "--init-method-std",
                                                                        "0.3",
                                                                        "--eval-iters",
                                                                        "0",
                                                                        "--save",
                                                                        bosCkpt,
                                                                        "--no-db",
                                                                        "--threads",
                                                                        "1"} +
                                                                tok);
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    const QString prompt = QStringLiteral("abc ca");
    testing::Run g = testing::run_process(
        LATTICE_CLI_PATH, {"generate", "--load", bosCkpt, "--top-k", "1", "--tokens-to-generate",
                           QString::number(kTokens), "--prompt", prompt, "--threads", "1"});
    QVERIFY2(g.exit_code == 0, qPrintable(g.err));
    const QString expected = g.out.trimmed();
    QVERIFY2(expected.startsWith("<|endoftext|>" + prompt), qPrintable(expected));  // the BOS
    PlaygroundView view;
    view.show();
    QVERIFY(load(view, bosCkpt));
    PlaygroundRequest r = greedy(kTokens);
    r.prompt = prompt;
    setRequest(view, r);
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected);
  }

  void a_gpt2_file_loads_with_the_model_its_config_json_gives() {
    // The checkpoint as Hugging Face GPT-2 weights, with no model flags anywhere: the tensors
    // give the sizes and config.json beside the file (export writes it) the heads.
    const QString hfDir = dir_.filePath("hf");
    QVERIFY(QDir().mkpath(hfDir));
    const QString weights = hfDir + "/model.safetensors";
    testing::Run e = testing::run_process(LATTICE_CLI_PATH, {"ckpt", "export-hf", ckpt(), weights});
    QVERIFY2(e.exit_code == 0, qPrintable(e.err));
    // Without the config.json the heads are in no tensor: the error says where they come from.
    QVERIFY(QFile::rename(hfDir + "/config.json", hfDir + "/config.json.away"));
    PlaygroundView view;
    view.show();
    QSignalSpy failed(&view, &PlaygroundView::modelFailed);
    view.openCheckpoint(weights);
    QVERIFY(failed.wait(10000));
    QVERIFY2(view.errorText().contains("config.json") && view.errorText().contains("heads"),
             qPrintable(view.errorText()));
    QVERIFY(QFile::rename(hfDir + "/config.json.away", hfDir + "/config.json"));
    QVERIFY(load(view, weights));
    QVERIFY(view.errorText().isEmpty());
    QCOMPARE(view.loadedCheckpoint(), QFileInfo(weights).absoluteFilePath());
    setRequest(view, greedy(kTokens));
    QCOMPARE(generateAndWait(view), QStringLiteral("length"));
    QCOMPARE(view.output()->text(), expected_);
  }

  void settings_persist() {
    const QString ini = dir_.filePath("settings.ini");
    PlaygroundSettings s;
    s.request = greedy(33);
    s.request.temperature = 0.7;
    s.request.topP = 0.9;
    s.request.seed = 987654321012ULL;
    s.request.stop = "\n\n";
    s.request.stopAtEod = false;
    s.checkpoint = ckpt();
    s.colourTokens = false;
    {
      QSettings settings(ini, QSettings::IniFormat);
      savePlaygroundSettings(settings, s);
    }
    QSettings settings(ini, QSettings::IniFormat);
    const PlaygroundSettings back = loadPlaygroundSettings(settings);
    QCOMPARE(back.request.tokens, 33);
    QCOMPARE(back.request.temperature, 0.7);
    QCOMPARE(back.request.seed, 987654321012ULL);
    QCOMPARE(back.request.stop, QStringLiteral("\n\n"));
    QCOMPARE(back.request.stopAtEod, false);
    QCOMPARE(back.checkpoint, ckpt());
    QCOMPARE(back.colourTokens, false);
    // The view shows them, and loads the checkpoint once shown.
    PlaygroundView view;
    view.setSettings(back);
    const PlaygroundRequest r = view.request();
    QCOMPARE(r.prompt, kPrompt);
    QCOMPARE(r.topP, 0.9);
    QCOMPARE(r.seed, 987654321012ULL);
    QSignalSpy loaded(&view, &PlaygroundView::modelLoaded);
    view.show();
    QVERIFY(loaded.wait(10000));
    QCOMPARE(view.settings().checkpoint, ckpt());
  }

  // History's "Open in Playground" shows the view with the run's checkpoint loaded.
  void history_opens_a_run_in_the_playground() {
    MainWindow::Options options;
    options.useSettings = false;
    options.measureCpu = false;
    options.database = db();
    MainWindow window(options);
    window.show();
    QCOMPARE(MainWindow::viewFromName("playground"), MainWindow::View::kPlayground);
    QSignalSpy loaded(window.playgroundView(), &PlaygroundView::modelLoaded);
    emit window.historyView()->openInPlayground(1);
    QCOMPARE(window.currentView(), MainWindow::View::kPlayground);
    QVERIFY(loaded.wait(10000));
    QCOMPARE(window.playgroundView()->loadedCheckpoint(), ckpt());
  }

  // The engine's cancel callback: true after the third token, the sequence ends there.
  void generator_cancel_flag_ends_a_sequence() {
    ModelConfig c = testing::tiny_config(2, 64, 4, 64, 200);
    std::unique_ptr<Generator> gen = Generator::random(c, 7, nullptr);
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.tokens_to_generate = 40;
    r.sampling.temperature = 0.0f;
    r.stop_at_eod = false;
    bool cancel = false;
    int seen = 0;
    auto stop = [&cancel](int) { return cancel; };
    auto out = gen->generate(
        {r}, [&](int, int32_t, float) { cancel = ++seen == 3; }, stop);
    QVERIFY(out.is_ok());
    QCOMPARE(int((*out)[0].tokens.size()), 3);
    QCOMPARE((*out)[0].finish, FinishReason::kCancelled);
    QCOMPARE(QString(finish_reason_name(FinishReason::kCancelled)), QStringLiteral("cancelled"));
    cancel = false;  // lowered, the same request runs to its length
    out = gen->generate({r}, {}, stop);
    QCOMPARE(int((*out)[0].tokens.size()), 40);
    QCOMPARE((*out)[0].finish, FinishReason::kLength);
  }

  void utf8_pieces_end_on_whole_characters() {
    const std::string euro = "a\xE2\x82\xAC";  // "a€"
    QCOMPARE(completeUtf8Length(euro), size_t(4));
    QCOMPARE(completeUtf8Length(euro.substr(0, 3)), size_t(1));
    QCOMPARE(completeUtf8Length(euro.substr(0, 2)), size_t(1));
    QCOMPARE(completeUtf8Length("abc"), size_t(3));
    QCOMPARE(completeUtf8Length(""), size_t(0));
  }
};

QTEST_MAIN(TestStudioPlayground)
#include "test_studio_playground.moc"
