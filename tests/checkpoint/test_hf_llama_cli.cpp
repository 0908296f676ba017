// Llama-family Hugging Face files as a user meets them, through real `lattice` processes: train
// with --save-hf DIR, start again from DIR with no model flag (the architecture read from
// DIR/config.json), import and export through `lattice ckpt`, and the same save from a
// TP 2 x PP 2 MPI job, whose untied output layer is gathered from the last stage. Flags that
// disagree with the file and models with no Hugging Face form are refused before training.
#include <QtTest/QtTest>

#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>

#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "common/process.h"

namespace {

using lattice::testing::Run;
using lattice::testing::run_lattice;

// Llama 3's architecture, tiny: GQA with 2 groups, untied head, no biases; --vocab-size 255 (256
// ids with EOD) so that no padding row exists; 32 positions.
const QStringList kLlama = {"--num-layers",
                            "2",
                            "--hidden-size",
                            "64",
                            "--num-attention-heads",
                            "4",
                            "--ffn-hidden-size",
                            "96",
                            "--seq-length",
                            "32",
                            "--vocab-size",
                            "255",
                            "--position-embedding-type",
                            "rope",
                            "--rotary-base",
                            "500000",
                            "--normalization",
                            "RMSNorm",
                            "--swiglu",
                            "--group-query-attention",
                            "--num-query-groups",
                            "2",
                            "--untie-embeddings-and-output-weights",
                            "--disable-bias-linear",
                            "--attention-dropout",
                            "0",
                            "--hidden-dropout",
                            "0"};

// Training steps that leave the weights as loaded (lr 0), so a save must give the loaded bytes.
const QStringList kFrozen = {
    "--mock-data", "--train-iters",  "1", "--eval-iters", "0", "--lr", "0", "--min-lr",
    "0",           "--log-interval", "1", "--threads",    "1"};

using lattice::testing::lm_losses;

// The first tensor whose bytes differ between the models in directories a and b, or "".
QString first_difference(const QString& a, const QString& b) {
  auto x = lattice::safetensors::File::open((a + "/model.safetensors").toStdString());
  auto y = lattice::safetensors::File::open((b + "/model.safetensors").toStdString());
  if (!x || !y) return "cannot open " + a + " or " + b;
  if (x->tensors().size() != y->tensors().size())
    return QString("%1 holds %2 tensors, %3 holds %4")
        .arg(a)
        .arg(x->tensors().size())
        .arg(b)
        .arg(y->tensors().size());
  for (const auto& t : x->tensors()) {
    const auto* u = y->find(t.name);
    if (!u) return QString::fromStdString(t.name) + " is missing from " + b;
    const auto p = x->bytes(t), q = y->bytes(*u);
    if (t.dtype != u->dtype || t.shape != u->shape ||
        !std::equal(p.begin(), p.end(), q.begin(), q.end()))
      return QString::fromStdString(t.name) + " differs";
  }
  return {};
}

}  // namespace

class HfLlamaCli : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }
  QString trained() const { return dir_.filePath("trained"); }  // the model --save-hf wrote
  Run train(int ranks, const QStringList& args) {
    return run_lattice(ranks, QStringList{"train", "--db", db()} + args);
  }
  // Both start from `model` and keep it (lr 0): TP 2 x PP 2 must gather every slice back to the
  // same bytes as one process.
  void check_parallel_save(const QString& model, const QString& name) {
    const QString one = dir_.filePath(name + "-one"), four = dir_.filePath(name + "-tp2pp2");
    const QStringList from =
        kFrozen +
        QStringList{"--load-hf", model, "--micro-batch-size", "1", "--global-batch-size", "2"};
    const Run a = train(1, from + QStringList{"--save-hf", one});
    QVERIFY2(a.exit_code == 0, qPrintable(a.err));
    const Run b = train(
        4, from + QStringList{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                              "2", "--sequence-parallel", "--save-hf", four});
    QVERIFY2(b.exit_code == 0, qPrintable(b.out + b.err));
    QString diff = first_difference(one, four);
    QVERIFY2(diff.isEmpty(), qPrintable(name + ": " + diff));
    diff = first_difference(model, four);
    QVERIFY2(diff.isEmpty(), qPrintable(name + ": " + diff));
    const QList<double> la = lm_losses(a.out), lb = lm_losses(b.out);
    QVERIFY2(la.size() == 1 && lb.size() == 1 && std::abs(la[0] - lb[0]) <= 1e-5 * la[0],
             qPrintable(a.out + b.out));
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    const Run made =
        train(1, kLlama + QStringList{"--mock-data", "--train-iters", "4", "--eval-iters", "0",
                                      "--lr", "1e-2", "--threads", "2", "--save-hf", trained()});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    QVERIFY2(made.out.contains("saved Llama weights to " + trained()), qPrintable(made.out));
    for (const char* file : {"config.json", "model.safetensors"})
      QVERIFY2(QFile::exists(trained() + "/" + file), file);
  }

  void load_hf_reads_the_architecture_from_config_json() {
    // No model flag: everything comes from trained()/config.json; lr 0 keeps the weights, so the
    // save has the loaded bytes.
    const QString again = dir_.filePath("again");
    const Run loaded = train(1, kFrozen + QStringList{"--load-hf", trained(), "--save-hf", again});
    QVERIFY2(loaded.exit_code == 0, qPrintable(loaded.err));
    QVERIFY2(loaded.out.contains("loaded Llama weights from " + trained()), qPrintable(loaded.out));
    const QString diff = first_difference(trained(), again);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    QVERIFY(lattice::testing::slurp((trained() + "/config.json").toStdString()) ==
            lattice::testing::slurp((again + "/config.json").toStdString()));
    // The trained weights score better on mock data than a fresh initialisation.
    const Run fresh = train(1, kFrozen + kLlama);
    QVERIFY2(fresh.exit_code == 0, qPrintable(fresh.err));
    QVERIFY2(!lm_losses(loaded.out).isEmpty() &&
                 lm_losses(loaded.out).first() < lm_losses(fresh.out).first(),
             qPrintable(loaded.out + fresh.out));
  }

  void ckpt_import_and_export_keep_every_byte() {
    const QString ck = dir_.filePath("imported"), back = dir_.filePath("exported");
    const Run imported = run_lattice(1, {"ckpt", "import-hf", trained(), ck});
    QVERIFY2(imported.exit_code == 0, qPrintable(imported.err));
    const Run inspect = run_lattice(1, {"ckpt", "inspect", ck});
    QVERIFY2(inspect.out.contains("output_layer.weight"), qPrintable(inspect.out));
    const Run exported = run_lattice(1, {"ckpt", "export-hf", ck, back});
    QVERIFY2(exported.exit_code == 0, qPrintable(exported.err));
    QVERIFY2(exported.out.contains("(Llama)"), qPrintable(exported.out));
    const QString diff = first_difference(trained(), back);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    // BF16 on request: half the bytes, each value its nearest bfloat16.
    const QString half = dir_.filePath("bf16");
    const Run bf16 = run_lattice(1, {"ckpt", "export-hf", ck, half, "--hf-dtype", "bf16"});
    QVERIFY2(bf16.exit_code == 0, qPrintable(bf16.err));
    auto f32 = lattice::safetensors::File::open((back + "/model.safetensors").toStdString());
    auto b16 = lattice::safetensors::File::open((half + "/model.safetensors").toStdString());
    QVERIFY(f32 && b16);
    for (const auto& t : f32->tensors()) {
      const auto* u = b16->find(t.name);
      QVERIFY2(u && u->dtype == lattice::safetensors::Dtype::kBF16, t.name.c_str());
      std::vector<float> a(t.numel), b(t.numel);
      QVERIFY(f32->read_float(t, a.data()) && b16->read_float(*u, b.data()));
      for (size_t i = 0; i < a.size(); i++)
        QVERIFY2(
            b[i] == lattice::safetensors::bf16_to_float(lattice::safetensors::float_to_bf16(a[i])),
            qPrintable(QString("%1[%2]").arg(t.name.c_str()).arg(i)));
    }
  }

  void tensor_and_pipeline_parallel_save_equals_one_process() {
    // The untied output layer is gathered from the last stage.
    check_parallel_save(trained(), "llama");
    // Qwen2's shape (QKV bias, tied head: the last stage's copy of the embedding is not saved),
    // with 2 query groups so that TP 2 splits them.
    const QString qwen2 = dir_.filePath("qwen2");
    QStringList model = kLlama;
    model.removeAll("--untie-embeddings-and-output-weights");
    const Run made =
        train(1, model + QStringList{"--add-qkv-bias", "--mock-data", "--train-iters", "2",
                                     "--eval-iters", "0", "--lr", "1e-2", "--save-hf", qwen2});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    QVERIFY2(
        lattice::testing::slurp((qwen2 + "/config.json").toStdString()).find("Qwen2ForCausalLM") !=
            std::string::npos,
        "not written as Qwen2");
    check_parallel_save(qwen2, "qwen2");
  }

  void disagreeing_flags_and_inexpressible_models_are_refused_before_training() {
    const Run wrong = train(1, kFrozen + QStringList{"--load-hf", trained(), "--num-layers", "3",
                                                     "--normalization", "LayerNorm"});
    QCOMPARE(wrong.exit_code, 2);
    const QString config = trained() + "/config.json";
    for (const QString& part : {"--load-hf: --num-layers 3 disagrees with " + config +
                                    ", which gives num_hidden_layers 2",
                                "--load-hf: --normalization LayerNorm disagrees with " + config +
                                    ", which is a Llama-family model (RMSNorm)"})
      QVERIFY2(wrong.err.contains(part), qPrintable(wrong.err));
    QStringList layernorm = kLlama;
    layernorm[layernorm.indexOf("RMSNorm")] = "LayerNorm";
    const Run refused =
        train(1, layernorm + kFrozen + QStringList{"--save-hf", dir_.filePath("never")});
    QCOMPARE(refused.exit_code, 2);
    QVERIFY2(refused.err.contains("--save-hf: --normalization LayerNorm: Hugging Face's Llama "
                                  "family uses RMSNorm"),
             qPrintable(refused.err));
    QVERIFY(!lm_losses(refused.out).size());
  }
};

QTEST_GUILESS_MAIN(HfLlamaCli)
#include "test_hf_llama_cli.moc"
