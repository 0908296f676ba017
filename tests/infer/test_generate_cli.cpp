// `lattice generate` as a user meets it: a tiny model trained for a few steps under TP 2 x
// PP 2 (mpirun -n 4) generates the same text whether it is loaded directly into one process,
// resharded to one process first, exported as GPT-2 safetensors (--load-hf), or split over two
// tensor-parallel ranks; bad input gets one sentence naming the flag or file.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include "common/process.h"

namespace {

using lattice::testing::Run;
using lattice::testing::run_lattice;

const QStringList kArch = {"--num-layers",          "2", "--hidden-size", "64",
                           "--num-attention-heads", "4", "--seq-length",  "32"};
const QStringList kPrompts = {"--prompt",
                              "1 2 3 4",
                              "--prompt",
                              "100 7",
                              "--prompt",
                              "9 9 9 9 9 9 9 9 9 9",
                              "--tokens-to-generate",
                              "12"};

}  // namespace

class GenerateCli : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString ckpt() const { return dir_.filePath("ckpt"); }

  QString generate(int ranks, const QStringList& model, const QStringList& sampling) {
    Run r = run_lattice(ranks, QStringList{"generate"} + model + kPrompts + sampling);
    if (r.exit_code != 0) qWarning("%s", qPrintable(r.err));
    return r.exit_code == 0 ? r.out : "failed: " + r.err;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    Run t = run_lattice(4, QStringList{"train",
                                       "--mock-data",
                                       "--vocab-size",
                                       "300",
                                       "--micro-batch-size",
                                       "2",
                                       "--global-batch-size",
                                       "4",
                                       "--train-iters",
                                       "4",
                                       "--lr",
                                       "1e-2",
                                       "--eval-iters",
                                       "0",
                                       "--tensor-model-parallel-size",
                                       "2",
                                       "--pipeline-model-parallel-size",
                                       "2",
                                       "--save",
                                       ckpt(),
                                       "--db",
                                       dir_.filePath("runs.sqlite"),
                                       "--threads",
                                       "1"} +
                               kArch);
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    Run r = run_lattice(
        1, {"ckpt", "reshard", ckpt(), dir_.filePath("tp1"), "--tensor-model-parallel-size", "1",
            "--pipeline-model-parallel-size", "1"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    Run e = run_lattice(1, {"ckpt", "export-hf", ckpt(), dir_.filePath("model.safetensors")});
    QVERIFY2(e.exit_code == 0, qPrintable(e.err));
  }

  // Greedy and sampled, every way of loading the TP 2 x PP 2 checkpoint says the same.
  void every_layout_generates_the_same() {
    const QStringList hf =
        QStringList{"--load-hf", dir_.filePath("model.safetensors"), "--vocab-size", "300"} + kArch;
    for (const QStringList& sampling :
         {QStringList{"--top-k", "1"}, QStringList{"--temperature", "0.9", "--seed", "5"},
          QStringList{"--top-p", "0.8", "--seed", "6"}}) {
      const QString direct = generate(1, {"--load", ckpt()}, sampling);
      QVERIFY2(!direct.startsWith("failed"), qPrintable(direct));
      QCOMPARE(direct.count('\n'), 3);
      QCOMPARE(generate(1, {"--load", dir_.filePath("tp1")}, sampling), direct);
      QCOMPARE(generate(1, hf, sampling), direct);
      QCOMPARE(generate(2, {"--load", ckpt(), "--tensor-model-parallel-size", "2"}, sampling),
               direct);
    }
    // The seed matters when sampling.
    QVERIFY(generate(1, {"--load", ckpt()}, {"--temperature", "1.5", "--seed", "1"}) !=
            generate(1, {"--load", ckpt()}, {"--temperature", "1.5", "--seed", "2"}));
  }

  void prompts_from_stdin_and_streaming() {
    Run r =
        run_lattice(1, {"generate", "--load", ckpt(), "--top-k", "1", "--tokens-to-generate", "5"},
                    "1 2 3\n4 5\n");
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.startsWith("[1] 1 2 3 ") && r.out.contains("\n[2] 4 5 "), qPrintable(r.out));
    Run s = run_lattice(1, {"generate", "--load", ckpt(), "--top-k", "1", "--tokens-to-generate",
                            "5", "--stream", "--prompt", "1 2 3"});
    QVERIFY2(s.exit_code == 0, qPrintable(s.err));
    QCOMPARE(s.out, r.out.section('\n', 0, 0).mid(4) + "\n");
  }

  // A stop string ends the text where it starts, streamed or not, with the prompt's spacing
  // kept (the NullTokenizer puts a space between ids) and nothing of the stop string printed.
  void a_stop_string_cuts_the_text_streamed_or_not() {
    const QStringList base{"generate", "--load",   ckpt(), "--top-k", "1", "--tokens-to-generate",
                           "8",        "--prompt", "1 2 3"};
    Run full = run_lattice(1, base);
    QVERIFY2(full.exit_code == 0, qPrintable(full.err));
    const QStringList words = full.out.trimmed().split(' ');
    QCOMPARE(words.size(), 3 + 8);
    // The 5th and 6th generated ids, as the text shows them.
    const QString stop = " " + words[7] + " " + words[8];
    const int at = full.out.indexOf(stop, QString("1 2 3").size());
    QVERIFY(at > 0);
    const QString want = full.out.left(at) + "\n";
    for (const QStringList& extra : {QStringList{}, QStringList{"--stream"}}) {
      Run r = run_lattice(1, base + QStringList{"--stop", stop} + extra);
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      QVERIFY2(r.out == want, qPrintable(extra.join(' ') + ": got '" + r.out + "', want '" + want +
                                         "' (stop '" + stop + "')"));
    }
  }

  void bad_input_is_one_sentence_naming_the_flag_or_file() {
    const struct {
      QStringList args;
      const char* says;
    } cases[] = {
        {{"--load", dir_.filePath("missing"), "--prompt", "1"}, "missing: no such directory"},
        {{"--load-hf", dir_.filePath("none.safetensors"), "--prompt", "1"}, "none.safetensors"},
        {{"--load", ckpt(), "--prompt", QString("5 ").repeated(40).trimmed()}, "context is 32"},
        {{"--load", ckpt(), "--prompt", "1", "--top-p", "2"}, "--top-p"},
        // A mock-data model has no tokenizer: its prompts are ids, and a word is refused (it
        // once passed as id -1, the text model's stand-in for no image token).
        {{"--load", ckpt(), "--prompt", "5 hello 7"},
         "--prompt 1: the prompt holds a word that "
         "is not a token id"},
        {{"--load", ckpt(), "--prompt", "5 5000"}, "token id 5000 is outside the vocabulary"},
        {{"--load", ckpt(), "--prompt", "1", "--temperature", "-1"}, "--temperature"},
        {{"--load", ckpt(), "--prompt", "1", "--tokens-to-generate", "x"}, "--tokens-to-generate"},
        {{"--prompt", "1"}, "--load"},
        {QStringList{"--load-hf", dir_.filePath("model.safetensors"), "--vocab-size", "300",
                     "--prompt", "1", "--num-layers", "2", "--hidden-size", "32",
                     "--num-attention-heads", "4", "--seq-length", "32"},
         "--hidden-size"},
    };
    for (const auto& c : cases) {
      Run r = run_lattice(1, QStringList{"generate"} + c.args);
      QVERIFY2(r.exit_code == 1 || r.exit_code == 2,
               qPrintable(c.args.join(' ') + " exited " + QString::number(r.exit_code)));
      QVERIFY2(r.err.contains(c.says), qPrintable(c.args.join(' ') + ": " + r.err));
      QVERIFY2(r.err.startsWith("lattice generate: "), qPrintable(r.err));
    }
  }
};

QTEST_GUILESS_MAIN(GenerateCli)
#include "test_generate_cli.moc"
