// Mixtral (Hugging Face MixtralForCausalLM) through real `lattice` processes: a tiny MoE model
// with Llama's attention (GQA with 2 groups, RoPE, RMSNorm, untied head, no biases) and 4 SwiGLU
// experts, top-2, in every layer, trained 2 steps and saved with --save-hf and --save. The files
// are transformers' (every tensor name and shape, config.json's keys); `lattice ckpt export-hf`
// of the checkpoint writes the same bytes; `lattice ckpt import-hf` and export again, and
// --load-hf with no model flag and --save-hf again, give every byte back. MoE models that
// Mixtral cannot express (experts in every other layer) are refused before training, and
// `lattice generate` of the Mixtral files writes the checkpoint's text, as does the checkpoint
// at TP 2 (two MPI ranks where the MPI communicator is built).
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "common/files.h"
#include "common/process.h"

namespace {

using lattice::testing::lm_losses;
using lattice::testing::Run;
using lattice::testing::run_lattice;

constexpr int kLayers = 2, kHidden = 64, kGroups = 2, kExperts = 4, kExpertWidth = 48;
constexpr int kVocab = 256;  // --vocab-size 255 and EOD: no padding row

const QStringList kMixtral = {"--num-layers",
                              QString::number(kLayers),
                              "--hidden-size",
                              QString::number(kHidden),
                              "--num-attention-heads",
                              "4",
                              "--ffn-hidden-size",
                              "96",
                              "--moe-ffn-hidden-size",
                              QString::number(kExpertWidth),
                              "--seq-length",
                              "32",
                              "--vocab-size",
                              QString::number(kVocab - 1),
                              "--position-embedding-type",
                              "rope",
                              "--rotary-base",
                              "500000",
                              "--normalization",
                              "RMSNorm",
                              "--swiglu",
                              "--group-query-attention",
                              "--num-query-groups",
                              QString::number(kGroups),
                              "--untie-embeddings-and-output-weights",
                              "--disable-bias-linear",
                              "--attention-dropout",
                              "0",
                              "--hidden-dropout",
                              "0",
                              "--num-experts",
                              QString::number(kExperts),
                              "--moe-router-topk",
                              "2",
                              "--moe-aux-loss-coeff",
                              "0.01"};

// Steps that leave the weights as loaded (lr 0), so a save must give the loaded bytes.
const QStringList kFrozen = {
    "--mock-data", "--train-iters",  "1", "--eval-iters", "0", "--lr", "0", "--min-lr",
    "0",           "--log-interval", "1", "--threads",    "2"};

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

// MixtralForCausalLM's state dict for the model above, as transformers names and shapes it.
std::map<std::string, std::vector<int64_t>> mixtral_tensors() {
  const int64_t C = kHidden, KV = kGroups * (kHidden / 4), F = kExpertWidth;
  std::map<std::string, std::vector<int64_t>> out = {{"model.embed_tokens.weight", {kVocab, C}},
                                                     {"model.norm.weight", {C}},
                                                     {"lm_head.weight", {kVocab, C}}};
  for (int l = 0; l < kLayers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out[p + "input_layernorm.weight"] = {C};
    out[p + "post_attention_layernorm.weight"] = {C};
    out[p + "self_attn.q_proj.weight"] = {C, C};
    out[p + "self_attn.k_proj.weight"] = {KV, C};
    out[p + "self_attn.v_proj.weight"] = {KV, C};
    out[p + "self_attn.o_proj.weight"] = {C, C};
    out[p + "block_sparse_moe.gate.weight"] = {kExperts, C};
    for (int e = 0; e < kExperts; e++) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      out[x + "w1.weight"] = {F, C};
      out[x + "w2.weight"] = {C, F};
      out[x + "w3.weight"] = {F, C};
    }
  }
  return out;
}

}  // namespace

class HfMixtralCli : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }
  QString trained() const { return dir_.filePath("trained"); }  // --save-hf's
  QString checkpoint() const { return dir_.filePath("ckpt"); }  // --save's, same weights
  Run train(const QStringList& args) {
    return run_lattice(1, QStringList{"train", "--db", db()} + args);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    const Run made =
        train(kMixtral + QStringList{"--mock-data", "--train-iters", "2", "--eval-iters", "0",
                                     "--lr", "1e-2", "--threads", "2", "--save", checkpoint(),
                                     "--save-hf", trained()});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    QVERIFY2(made.out.contains("saved Mixtral weights to " + trained()), qPrintable(made.out));
  }

  void save_hf_writes_transformers_names_shapes_and_config() {
    auto file = lattice::safetensors::File::open((trained() + "/model.safetensors").toStdString());
    QVERIFY2(file, "cannot open the saved model.safetensors");
    std::map<std::string, std::vector<int64_t>> got;
    for (const auto& t : file->tensors()) {
      QVERIFY2(t.dtype == lattice::safetensors::Dtype::kF32, t.name.c_str());
      got[t.name] = t.shape;
    }
    const auto want = mixtral_tensors();
    for (const auto& [name, shape] : want)
      QVERIFY2(got.count(name) && got[name] == shape, ("missing or misshapen: " + name).c_str());
    for (const auto& [name, shape] : got)
      QVERIFY2(want.count(name), ("not a Mixtral tensor: " + name).c_str());

    const nlohmann::json c =
        nlohmann::json::parse(lattice::testing::slurp((trained() + "/config.json").toStdString()));
    QCOMPARE(c["architectures"], nlohmann::json::array({"MixtralForCausalLM"}));
    QCOMPARE(c["model_type"], "mixtral");
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, nlohmann::json>>{{"num_hidden_layers", kLayers},
                                                             {"hidden_size", kHidden},
                                                             {"intermediate_size", kExpertWidth},
                                                             {"num_attention_heads", 4},
                                                             {"num_key_value_heads", kGroups},
                                                             {"num_local_experts", kExperts},
                                                             {"num_experts_per_tok", 2},
                                                             {"router_aux_loss_coef", 0.01},
                                                             {"rope_theta", 500000.0},
                                                             {"rms_norm_eps", 1e-5},
                                                             {"vocab_size", kVocab},
                                                             {"hidden_act", "silu"},
                                                             {"tie_word_embeddings", false},
                                                             {"sliding_window", nullptr}})
      QVERIFY2(c.contains(key) && c[key] == value,
               (key + " is " + c.value(key, nlohmann::json("absent")).dump()).c_str());
  }

  void checkpoint_export_import_and_load_hf_keep_every_byte() {
    // The trained checkpoint exports to the bytes --save-hf wrote.
    const QString exported = dir_.filePath("exported");
    const Run a = run_lattice(1, {"ckpt", "export-hf", checkpoint(), exported});
    QVERIFY2(a.exit_code == 0, qPrintable(a.err));
    QVERIFY2(a.out.contains("(Mixtral)"), qPrintable(a.out));
    QString diff = first_difference(trained(), exported);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    // Imported (no model flag: config.json gives them) and exported again: the same bytes.
    const QString imported = dir_.filePath("imported"), back = dir_.filePath("back");
    const Run b = run_lattice(1, {"ckpt", "import-hf", trained(), imported});
    QVERIFY2(b.exit_code == 0, qPrintable(b.err));
    const Run inspect = run_lattice(1, {"ckpt", "inspect", imported});
    QVERIFY2(inspect.out.contains("mlp.experts.local_experts.3.linear_fc1.weight"),
             qPrintable(inspect.out));
    const Run c = run_lattice(1, {"ckpt", "export-hf", imported, back});
    QVERIFY2(c.exit_code == 0, qPrintable(c.err));
    diff = first_difference(trained(), back);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    QVERIFY(lattice::testing::slurp((trained() + "/config.json").toStdString()) ==
            lattice::testing::slurp((back + "/config.json").toStdString()));
    // --load-hf with no model flag trains the same MoE model (lr 0 keeps it).
    const QString again = dir_.filePath("again");
    const Run d = train(kFrozen + QStringList{"--load-hf", trained(), "--save-hf", again});
    QVERIFY2(d.exit_code == 0, qPrintable(d.err));
    QVERIFY2(d.out.contains("loaded Mixtral weights from " + trained()), qPrintable(d.out));
    QCOMPARE(lm_losses(d.out).size(), 1);
    diff = first_difference(trained(), again);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  void what_mixtral_cannot_express_is_refused_before_training() {
    // Experts in every other layer: Mixtral has them in every layer.
    const Run sparse =
        train(kMixtral + kFrozen +
              QStringList{"--moe-layer-freq", "2", "--save-hf", dir_.filePath("never")});
    QCOMPARE(sparse.exit_code, 2);
    QVERIFY2(sparse.err.contains("--save-hf: --moe-layer-freq 2: Hugging Face's Mixtral has "
                                 "experts in every layer (1)"),
             qPrintable(sparse.err));
    QVERIFY(lm_losses(sparse.out).isEmpty());
    // A file's experts must agree with the flags given.
    const Run wrong = train(kFrozen + QStringList{"--load-hf", trained(), "--num-experts", "8"});
    QCOMPARE(wrong.exit_code, 2);
    QVERIFY2(wrong.err.contains("--load-hf: --num-experts 8 disagrees with " + trained() +
                                "/config.json, which gives num_local_experts 4"),
             qPrintable(wrong.err));
  }

  // Generation runs the MoE layers (the logits against the training forward: test_generation):
  // the Mixtral files and the checkpoint of the same weights give the same text, greedy and
  // sampled, and so does the checkpoint split over two tensor-parallel ranks (each expert's
  // FC1 column- and FC2 row-parallel, the combine summed over TP).
  void generate_from_the_mixtral_files_as_from_the_checkpoint() {
    for (const QStringList& sampling :
         {QStringList{"--top-k", "1"}, QStringList{"--temperature", "0.9", "--seed", "5"}}) {
      const QStringList prompt =
          QStringList{"--prompt", "5 7 9", "--prompt", "200 3", "--tokens-to-generate", "12"} +
          sampling;
      const Run ckpt = run_lattice(1, QStringList{"generate", "--load", checkpoint()} + prompt);
      QVERIFY2(ckpt.exit_code == 0, qPrintable(ckpt.err));
      QCOMPARE(ckpt.out.count('\n'), 2);
      const Run hf = run_lattice(1, QStringList{"generate", "--load-hf", trained()} + prompt);
      QVERIFY2(hf.exit_code == 0, qPrintable(hf.err));
      QCOMPARE(hf.out, ckpt.out);
#ifdef LATTICE_MPIEXEC
      const Run tp2 = run_lattice(
          2, QStringList{"generate", "--load", checkpoint(), "--tensor-model-parallel-size", "2"} +
                 prompt);
      QVERIFY2(tp2.exit_code == 0, qPrintable(tp2.err));
      QCOMPARE(tp2.out, ckpt.out);
#endif
    }
  }
};

QTEST_GUILESS_MAIN(HfMixtralCli)
#include "test_hf_mixtral_cli.moc"
