// A Hugging Face GPT-2 file as a user brings it: `lattice ckpt import-hf` and --load-hf read
// the model from the file's tensors and the config.json beside it, so no model flag is needed;
// a model flag given must agree with the file (the error names both values); without heads
// anywhere the error says what to pass. The file comes from a tiny `lattice train --save-hf`
// whose every size differs from the flags' defaults, so a size not read from the file shows.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include "common/process.h"

namespace {

using lattice::testing::Run;

Run run_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args);
}

// 3 layers, hidden 96, 6 heads, MLP 160, 48 positions, NullTokenizer --vocab-size 300 (301
// ids): no value is `lattice train`'s default.
const QStringList kModel = {"--num-layers",      "3",   "--hidden-size",         "96",
                            "--ffn-hidden-size", "160", "--num-attention-heads", "6",
                            "--seq-length",      "48",  "--vocab-size",          "300"};
const char* const kInspected = "3 layers, hidden 96, 6 heads, ffn 160, seq 48, vocab 301";

// GPT-2's config.json as Hugging Face writes it for that model.
QJsonObject hf_config() {
  return {{"model_type", "gpt2"},
          {"n_layer", 3},
          {"n_embd", 96},
          {"n_head", 6},
          {"n_inner", 160},
          {"n_positions", 48},
          {"n_ctx", 48},
          {"vocab_size", 301},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"}};
}

QJsonObject read_json(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object()
                                     : QJsonObject();
}

// Every key of hf_config() with its value in the config.json at `path`, or what differs.
QString differs_from_hf_config(const QString& path) {
  const QJsonObject written = read_json(path);
  if (written.isEmpty()) return path + " is missing or not a JSON object";
  const QJsonObject expected = hf_config();
  for (auto it = expected.begin(); it != expected.end(); ++it)
    if (written.value(it.key()) != it.value())
      return path + ": " + it.key() + " is " +
             QJsonDocument(QJsonObject{{"v", written.value(it.key())}})
                 .toJson(QJsonDocument::Compact);
  return {};
}

bool write_json(const QString& path, const QJsonObject& json) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly) && f.write(QJsonDocument(json).toJson()) > 0;
}

}  // namespace

class HfModelFlags : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }
  // DIR/model.safetensors with the config.json beside it, and a copy alone in another folder.
  QString weights() const { return dir_.filePath("hf/model.safetensors"); }
  QString bare() const { return dir_.filePath("bare/model.safetensors"); }

  // A copy of the weights beside `config` in a folder of its own.
  QString weights_with(const QString& folder, const QJsonObject& config) {
    QDir(dir_.path()).mkpath(folder);
    const QString path = dir_.filePath(folder + "/model.safetensors");
    QFile::copy(weights(), path);
    write_json(dir_.filePath(folder + "/config.json"), config);
    return path;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QDir(dir_.path()).mkpath("hf");
    QDir(dir_.path()).mkpath("bare");
    Run made = run_cli(QStringList{"train", "--mock-data", "--train-iters", "2", "--eval-iters",
                                   "0", "--threads", "2", "--db", db(), "--save-hf", weights()} +
                       kModel);
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    // --save-hf writes the config.json Hugging Face keeps beside the weights.
    const QString differs = differs_from_hf_config(dir_.filePath("hf/config.json"));
    QVERIFY2(differs.isEmpty(), qPrintable(differs));
    QVERIFY(QFile::copy(weights(), bare()));
  }

  void import_hf_needs_no_model_flag_beside_a_config_json() {
    const QString ck = dir_.filePath("imported");
    Run imported = run_cli({"ckpt", "import-hf", weights(), ck});
    QVERIFY2(imported.exit_code == 0, qPrintable(imported.err));
    Run inspect = run_cli({"ckpt", "inspect", ck});
    QVERIFY2(inspect.exit_code == 0, qPrintable(inspect.err));
    QVERIFY2(inspect.out.contains(kInspected), qPrintable(inspect.out));
    // Flags that agree with the file are accepted.
    Run agreeing =
        run_cli(QStringList{"ckpt", "import-hf", weights(), dir_.filePath("again")} + kModel);
    QVERIFY2(agreeing.exit_code == 0, qPrintable(agreeing.err));
  }

  // Export writes config.json beside the weights (replacing one there), so an exported model
  // imports again with no model flag.
  void export_hf_writes_the_config_json_that_import_reads() {
    const QString ck = dir_.filePath("to-export");
    QVERIFY(run_cli({"ckpt", "import-hf", weights(), ck}).exit_code == 0);
    QDir(dir_.path()).mkpath("exported");
    QVERIFY(write_json(dir_.filePath("exported/config.json"), {{"n_head", 2}}));
    const QString exported = dir_.filePath("exported/model.safetensors");
    Run e = run_cli({"ckpt", "export-hf", ck, exported});
    QVERIFY2(e.exit_code == 0, qPrintable(e.err));
    const QString differs = differs_from_hf_config(dir_.filePath("exported/config.json"));
    QVERIFY2(differs.isEmpty(), qPrintable(differs));
    QCOMPARE(read_json(dir_.filePath("exported/config.json"))["architectures"].toArray(),
             QJsonArray{"GPT2LMHeadModel"});
    QVERIFY(!QFileInfo::exists(dir_.filePath("exported/config.json.tmp")));
    const QString again = dir_.filePath("re-imported");
    Run imported = run_cli({"ckpt", "import-hf", exported, again});
    QVERIFY2(imported.exit_code == 0, qPrintable(imported.err));
    QVERIFY2(run_cli({"ckpt", "inspect", again}).out.contains(kInspected), qPrintable(again));
  }

  void a_model_flag_that_disagrees_with_the_file_names_both_values() {
    const struct {
      QStringList flags;
      QStringList says;
    } cases[] = {
        {{"--num-layers", "2"}, {"--num-layers 2", "model.safetensors", "has 3 layers"}},
        {{"--hidden-size", "64"}, {"--hidden-size 64", "has 96 as hidden size"}},
        {{"--ffn-hidden-size", "384"}, {"--ffn-hidden-size 384", "MLP size 160"}},
        {{"--max-position-embeddings", "64"}, {"--max-position-embeddings 64", "has 48 positions"}},
        {{"--vocab-size", "301"}, {"--vocab-size 301", "has 301", "pass --vocab-size 300"}},
        {{"--num-attention-heads", "4"}, {"--num-attention-heads 4", "config.json", "n_head 6"}},
    };
    for (const auto& c : cases) {
      Run r =
          run_cli(QStringList{"ckpt", "import-hf", weights(), dir_.filePath("refused")} + c.flags);
      QVERIFY2(r.exit_code == 2, qPrintable(c.flags.join(' ') + ": " + r.err));
      for (const QString& part : c.says)
        QVERIFY2(r.err.contains(part), qPrintable(c.flags.join(' ') + ": " + r.err));
    }
    QVERIFY(!QFileInfo::exists(dir_.filePath("refused")));
  }

  void a_config_json_that_disagrees_with_the_tensors_is_named() {
    QJsonObject wider = hf_config();
    wider["n_embd"] = 128;
    Run r = run_cli({"ckpt", "import-hf", weights_with("wider", wider), dir_.filePath("wider-ck")});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("config.json gives n_embd 128") && r.err.contains("96"),
             qPrintable(r.err));
    QJsonObject eps = hf_config();
    eps["layer_norm_epsilon"] = 1e-6;
    r = run_cli({"ckpt", "import-hf", weights_with("eps", eps), dir_.filePath("eps-ck")});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("layer_norm_epsilon 1e-06"), qPrintable(r.err));
  }

  void no_heads_anywhere_says_what_to_pass() {
    Run r = run_cli({"ckpt", "import-hf", bare(), dir_.filePath("headless")});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("attention heads") && r.err.contains("config.json") &&
                 r.err.contains("--num-attention-heads"),
             qPrintable(r.err));
    QJsonObject no_n_head = hf_config();
    no_n_head.remove("n_head");
    r = run_cli(
        {"ckpt", "import-hf", weights_with("no-n-head", no_n_head), dir_.filePath("headless2")});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("has no n_head") && r.err.contains("--num-attention-heads"),
             qPrintable(r.err));
    // The heads alone are enough: the rest is in the tensors.
    const QString ck = dir_.filePath("headed");
    Run given = run_cli({"ckpt", "import-hf", bare(), ck, "--num-attention-heads", "6"});
    QVERIFY2(given.exit_code == 0, qPrintable(given.err));
    QVERIFY2(run_cli({"ckpt", "inspect", ck}).out.contains(kInspected), qPrintable(ck));
  }

  void train_and_generate_with_load_hf_need_no_model_flag() {
    Run trained = run_cli({"train", "--mock-data", "--train-iters", "1", "--eval-iters", "0",
                           "--micro-batch-size", "1", "--threads", "2", "--db", db(), "--load-hf",
                           weights()});
    QVERIFY2(trained.exit_code == 0, qPrintable(trained.err));
    QVERIFY2(trained.out.contains("loaded GPT-2 weights from"), qPrintable(trained.out));
    Run refused = run_cli({"train", "--mock-data", "--train-iters", "1", "--db", db(), "--load-hf",
                           weights(), "--num-layers", "4"});
    QVERIFY(refused.exit_code != 0);
    QVERIFY2(refused.err.contains("--load-hf: --num-layers 4 disagrees with"),
             qPrintable(refused.err));

    const QStringList generate = {"generate", "--load-hf", weights(), "--prompt",
                                  "1 2 3",    "--top-k",   "1",       "--tokens-to-generate",
                                  "6",        "--threads", "2"};
    Run bare_flags = run_cli(generate);
    QVERIFY2(bare_flags.exit_code == 0, qPrintable(bare_flags.err));
    QCOMPARE(bare_flags.out.trimmed().split(' ').size(), 3 + 6);
    Run all_flags = run_cli(generate + kModel);
    QVERIFY2(all_flags.exit_code == 0, qPrintable(all_flags.err));
    QCOMPARE(bare_flags.out, all_flags.out);
  }
};

QTEST_GUILESS_MAIN(HfModelFlags)
#include "test_hf_model_flags.moc"
