// Supervised fine-tuning (--sft) against an independent PyTorch reference (sft_reference.py,
// float64): a tiny GPT-2 trained five AdamW steps with `lattice train --sft --fp64` on a chat
// dataset with a loss mask (written here with the indexed-dataset writer: prompts masked,
// answers trained, conversations longer than a sample truncated, shorter ones padded) gives the
// reference's losses and grad norms, the loss being Megatron's per-token mean over the whole
// global batch. The same run on 8 ranks (TP 2 x PP 2 x DP 2, fewer micro-batches per rank) gives
// the same losses: the normalisation does not depend on the layout. --sft-packing equals the
// reference running each packed conversation alone (packed attention and positions). Also: a
// missing loss mask and a global batch without targets are reported clearly. Skipped where
// python3-torch is missing.
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>
#include <random>

#include "checkpoint/hf_gpt2.h"
#include "common/grad_check.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "data/indexed_dataset.h"
#include "lattice/storage/run_store.h"
#include "model/gpt.h"

using namespace lattice;
using testing::kPython;
using testing::rows_json;
using testing::torch_available;

namespace {

constexpr int kSteps = 5, kSeq = 16, kGlobalBatch = 8, kVocab = 128;

struct Conversation {
  std::vector<int32_t> tokens, mask;
};

// Conversations of the given lengths (by default seven of 6 to 40 tokens): a masked prompt, an
// answer, some a second turn (a masked user part inside), one longer than a sample (truncated),
// the third with no answer at all.
std::vector<Conversation> make_conversations(std::vector<int> lengths = {9, 40, 6, 17, 23, 12,
                                                                         30}) {
  std::mt19937 rng(7);
  std::vector<Conversation> out;
  for (int c = 0; c < static_cast<int>(lengths.size()); c++) {
    Conversation v;
    const int n = lengths[c], prompt = 2 + c % 4;
    for (int t = 0; t < n; t++) {
      v.tokens.push_back(static_cast<int32_t>(rng() % (kVocab - 1)));
      const bool second_user_turn = c % 3 == 1 && t >= n / 2 && t < n / 2 + 3;
      v.mask.push_back(c == 2 ? 0 : (t >= prompt && !second_user_turn) ? 1 : 0);
    }
    out.push_back(std::move(v));
  }
  return out;
}

void write_dataset(const std::string& prefix, const std::vector<Conversation>& conversations,
                   bool with_mask) {
  auto tokens = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
  QVERIFY(tokens.is_ok());
  for (const Conversation& c : conversations) {
    QVERIFY((*tokens)->add_sequence(c.tokens).is_ok());
    (*tokens)->end_document();
  }
  QVERIFY((*tokens)->finish().is_ok());
  if (!with_mask) return;
  auto mask = IndexedDatasetBuilder::create(prefix + "_loss_mask", TokenDtype::kU8);
  QVERIFY(mask.is_ok());
  for (const Conversation& c : conversations) {
    QVERIFY((*mask)->add_sequence(c.mask).is_ok());
    (*mask)->end_document();
  }
  QVERIFY((*mask)->finish().is_ok());
}

QJsonArray to_json(const std::vector<int32_t>& v) {
  QJsonArray a;
  for (int32_t x : v) a.append(x);
  return a;
}

}  // namespace

class SftParity : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::vector<Conversation> conversations_ = make_conversations();

  QString path(const char* name) const { return dir_.filePath(name); }

  // `lattice train --sft` over the dataset at `prefix` on `ranks` processes; its run's "lm loss"
  // and "grad norm" series from the run store (empty, with a warning, when it failed).
  testing::Run train(const QString& name, int ranks, const QString& prefix,
                     const QStringList& extra, QList<double>* losses, QList<double>* norms,
                     QList<double>* valid = nullptr) {
    const QStringList args = QStringList{"train",
                                         "--sft",
                                         "--data-path",
                                         prefix,
                                         "--split",
                                         "100,0,0",
                                         "--load-hf",
                                         path("init.safetensors"),
                                         "--fp64",
                                         "--num-layers",
                                         "2",
                                         "--hidden-size",
                                         "32",
                                         "--num-attention-heads",
                                         "4",
                                         "--seq-length",
                                         QString::number(kSeq),
                                         "--vocab-size",
                                         QString::number(kVocab - 1),
                                         "--make-vocab-size-divisible-by",
                                         "64",
                                         "--micro-batch-size",
                                         "2",
                                         "--global-batch-size",
                                         QString::number(kGlobalBatch),
                                         "--train-iters",
                                         QString::number(kSteps),
                                         "--lr",
                                         "3e-3",
                                         "--lr-decay-style",
                                         "constant",
                                         "--weight-decay",
                                         "0.01",
                                         "--clip-grad",
                                         "1.0",
                                         "--hidden-dropout",
                                         "0",
                                         "--attention-dropout",
                                         "0",
                                         "--eval-iters",
                                         "0",
                                         "--log-interval",
                                         "1",
                                         "--threads",
                                         "1",
                                         "--db",
                                         path("runs.sqlite"),
                                         "--run-name",
                                         name} +
                             extra;
    const testing::Run r = testing::run_lattice(ranks, args);
    if (r.exit_code != 0 || !losses) return r;
    auto store = storage::RunStore::open(path("runs.sqlite").toStdString());
    if (!store) return r;
    auto run = (*store)->find_run(name.toStdString());
    if (!run) return r;
    auto history = (*store)->history(run->id);
    if (!history) return r;
    for (const auto& series : history->metrics) {
      if (series.key == "lm loss")
        for (const auto& p : series.points) losses->append(p.value);
      if (series.key == "grad norm" && norms)
        for (const auto& p : series.points) norms->append(p.value);
      if (series.key == "validation lm loss" && valid)
        for (const auto& p : series.points) valid->append(p.value);
    }
    return r;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    // The initial weights: a Lattice GPT-2 init, perturbed, as a GPT-2 file both sides read.
    ModelConfig c = testing::tiny_config(2, 32, 4, kSeq, kVocab);
    c.init_method_std = 0.1f;
    GptModel<float> model(c, 1);
    model.init_weights(3);
    const auto noise = testing::random_vector(model.arena_size(), 4, 0.05);
    for (size_t i = 0; i < model.arena_size(); i++)
      model.params()[i] += static_cast<float>(noise[i]);
    QVERIFY(
        export_hf_gpt2(path("init.safetensors").toStdString(), c, model.layout(), model.params())
            .is_ok());
    write_dataset(path("chat").toStdString(), conversations_, true);
    write_dataset(path("plain").toStdString(), conversations_, false);
  }

  void sft_losses_match_a_float64_pytorch_reference() {
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    // Validation: --split 6,1,0 holds conversation 6 out (a run of its own below).
    QJsonArray convs, train_convs, valid_convs;
    for (size_t i = 0; i < conversations_.size(); i++) {
      const QJsonObject c{{"tokens", to_json(conversations_[i].tokens)},
                          {"mask", to_json(conversations_[i].mask)}};
      convs.append(c);
      (i < 6 ? train_convs : valid_convs).append(c);
    }
    // Lattice holds the optimizer's hyperparameters as floats (OptimizerConfig): the reference
    // gets the same values.
    auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
    const QJsonObject optim{{"lr", f32(3e-3)},           {"beta1", f32(0.9)},
                            {"beta2", f32(0.999)},       {"eps", f32(1e-8)},
                            {"weight_decay", f32(0.01)}, {"clip_grad", f32(1.0)}};
    const QJsonObject spec{
        {"heads", 4},      {"seq_length", kSeq},     {"global_batch", kGlobalBatch},
        {"steps", kSteps}, {"conversations", convs}, {"optim", optim}};
    QJsonObject split_spec = spec;
    split_spec["conversations"] = train_convs;
    split_spec["valid_conversations"] = valid_convs;
    auto reference = [&](const QJsonObject& which, const char* name) {
      QFile f(path(name));
      if (!f.open(QIODevice::WriteOnly)) return QJsonObject{};
      f.write(QJsonDocument(which).toJson());
      f.close();
      const testing::Run py =
          testing::run_process(kPython,
                               {QString(LATTICE_SOURCE_DIR) + "/tests/train/sft_reference.py",
                                path("init.safetensors"), path(name)},
                               {}, 120000);
      if (py.exit_code != 0) qWarning("sft_reference.py failed: %s", qPrintable(py.err));
      return QJsonDocument::fromJson(py.out.toUtf8()).object();
    };
    const QJsonObject ref = reference(spec, "spec.json");
    const QJsonArray ref_losses = ref["losses"].toArray(), ref_norms = ref["grad_norms"].toArray();
    QCOMPARE(ref_losses.size(), kSteps);

    QList<double> losses, norms;
    const testing::Run r = train("sft-1", 1, path("chat"), {}, &losses, &norms);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    QCOMPARE(losses.size(), kSteps);
    QCOMPARE(norms.size(), kSteps);
    for (int i = 0; i < kSteps; i++) {
      const double want = ref_losses[i].toDouble(), got = losses[i];
      const double rel = std::abs(got - want) / want;
      qInfo("step %d: loss lattice %.17g pytorch %.17g (rel %.2g); grad norm %.17g vs %.17g", i + 1,
            got, want, rel, norms[i], ref_norms[i].toDouble());
      QVERIFY2(rel <= 1e-10, qPrintable(QString("step %1 loss: lattice --fp64 %2, pytorch %3 "
                                                "(relative %4 > 1e-10)")
                                            .arg(i + 1)
                                            .arg(got, 0, 'g', 17)
                                            .arg(want, 0, 'g', 17)
                                            .arg(rel)));
      const double nrel = std::abs(norms[i] - ref_norms[i].toDouble()) / ref_norms[i].toDouble();
      QVERIFY2(nrel <= 1e-10, qPrintable(QString("step %1 grad norm: lattice %2, pytorch %3")
                                             .arg(i + 1)
                                             .arg(norms[i], 0, 'g', 17)
                                             .arg(ref_norms[i].toDouble(), 0, 'g', 17)));
    }
    // The validation loss after the last step: the masked mean over a global batch of the
    // held-out conversation.
    const QJsonObject ref_split = reference(split_spec, "split.json");
    QVERIFY(ref_split.contains("valid_loss"));
    QList<double> split_losses, valid;
    const testing::Run v =
        train("sft-valid", 1, path("chat"),
              {"--split", "6,1,0", "--eval-interval", QString::number(kSteps), "--eval-iters", "1"},
              &split_losses, nullptr, &valid);
    QVERIFY2(v.exit_code == 0, qPrintable(v.out + v.err));
    QVERIFY(!valid.isEmpty());
    const double want = ref_split["valid_loss"].toDouble();
    qInfo("validation loss: lattice %.17g pytorch %.17g", valid[0], want);
    QVERIFY2(std::abs(valid[0] - want) <= 1e-10 * want,
             qPrintable(QString("validation loss: lattice %1, pytorch %2")
                            .arg(valid[0], 0, 'g', 17)
                            .arg(want, 0, 'g', 17)));
  }

  void tp2_pp2_dp2_gives_the_single_rank_losses() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    QList<double> one, eight, norms1, norms8;
    testing::Run r = train("sft-ref", 1, path("chat"), {}, &one, &norms1);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    r = train("sft-8", 8, path("chat"),
              {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}, &eight,
              &norms8);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    QCOMPARE(eight.size(), kSteps);
    QCOMPARE(one.size(), kSteps);
    for (int i = 0; i < kSteps; i++) {
      const double rel = std::abs(eight[i] - one[i]) / one[i];
      qInfo("step %d: loss 1 rank %.17g, TP2 PP2 DP2 %.17g (rel %.2g)", i + 1, one[i], eight[i],
            rel);
      QVERIFY2(rel <= 1e-10, qPrintable(QString("step %1: TP 2 x PP 2 x DP 2 loss %2, one rank "
                                                "%3 (relative %4 > 1e-10)")
                                            .arg(i + 1)
                                            .arg(eight[i], 0, 'g', 17)
                                            .arg(one[i], 0, 'g', 17)
                                            .arg(rel)));
      QVERIFY2(std::abs(norms8[i] - norms1[i]) <= 1e-10 * norms1[i],
               qPrintable(
                   QString("step %1 grad norm %2 vs %3").arg(i + 1).arg(norms8[i]).arg(norms1[i])));
    }
#endif
  }

  // Context parallelism (CP 2: each rank holds 2 of 4 chunks of 4 tokens): the loss mask and,
  // packed, the document positions split with the tokens; the per-token count is the whole
  // sequence's. Losses and grad norms equal one rank's, masked and packed.
  void context_parallel_2_gives_the_single_rank_losses() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    const std::vector<Conversation> short_ones = make_conversations({5, 7, 4, 9, 6, 3, 8, 5});
    write_dataset(path("cp-packed").toStdString(), short_ones, true);
    const std::pair<QString, QStringList> cases[] = {{"chat", {}},
                                                     {"cp-packed", {"--sft-packing"}}};
    for (const auto& [data, extra] : cases) {
      QList<double> one, two, norms1, norms2;
      testing::Run r = train("cp-ref-" + data, 1, dir_.filePath(data), extra, &one, &norms1);
      QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
      r = train("cp2-" + data, 2, dir_.filePath(data),
                extra + QStringList{"--context-parallel-size", "2"}, &two, &norms2);
      QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
      QCOMPARE(one.size(), kSteps);
      QCOMPARE(two.size(), kSteps);
      for (int i = 0; i < kSteps; i++) {
        const double rel = std::abs(two[i] - one[i]) / one[i];
        qInfo("%s step %d: loss 1 rank %.17g, CP 2 %.17g (rel %.2g)", qPrintable(data), i + 1,
              one[i], two[i], rel);
        QVERIFY2(rel <= 1e-10, qPrintable(QString("%1 step %2: CP 2 loss %3, one rank %4")
                                              .arg(data)
                                              .arg(i + 1)
                                              .arg(two[i], 0, 'g', 17)
                                              .arg(one[i], 0, 'g', 17)));
        QVERIFY2(std::abs(norms2[i] - norms1[i]) <= 1e-10 * norms1[i],
                 qPrintable(QString("%1 step %2 grad norm %3 vs %4")
                                .arg(data)
                                .arg(i + 1)
                                .arg(norms2[i])
                                .arg(norms1[i])));
      }
    }
#endif
  }

  // --sft-packing: conversations of 3 to 9 tokens packed several to a sample of 17 tokens; the
  // reference runs each conversation of a pack on its own (its own positions, nothing seen of
  // the others), so equal losses show that packed attention and positions keep them apart.
  void packed_sft_losses_match_a_float64_pytorch_reference() {
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    const std::vector<Conversation> short_ones = make_conversations({5, 7, 4, 9, 6, 3, 8, 5});
    write_dataset(path("packed").toStdString(), short_ones, true);
    QJsonArray convs;
    for (const Conversation& c : short_ones)
      convs.append(QJsonObject{{"tokens", to_json(c.tokens)}, {"mask", to_json(c.mask)}});
    auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
    const QJsonObject optim{{"lr", f32(3e-3)},           {"beta1", f32(0.9)},
                            {"beta2", f32(0.999)},       {"eps", f32(1e-8)},
                            {"weight_decay", f32(0.01)}, {"clip_grad", f32(1.0)}};
    const QJsonObject spec{
        {"heads", 4},      {"seq_length", kSeq},     {"global_batch", kGlobalBatch},
        {"steps", kSteps}, {"conversations", convs}, {"optim", optim},
        {"packing", true}};
    QFile f(path("packed.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QJsonDocument(spec).toJson());
    f.close();
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/sft_reference.py",
                              path("init.safetensors"), path("packed.json")},
                             {}, 120000);
    QVERIFY2(py.exit_code == 0, qPrintable(py.err));
    const QJsonArray ref = QJsonDocument::fromJson(py.out.toUtf8()).object()["losses"].toArray();
    QCOMPARE(ref.size(), kSteps);
    QList<double> losses;
    const testing::Run r =
        train("sft-packed", 1, path("packed"), {"--sft-packing"}, &losses, nullptr);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    QCOMPARE(losses.size(), kSteps);
    for (int i = 0; i < kSteps; i++) {
      const double want = ref[i].toDouble(), rel = std::abs(losses[i] - want) / want;
      qInfo("packed step %d: loss lattice %.17g pytorch %.17g (rel %.2g)", i + 1, losses[i], want,
            rel);
      QVERIFY2(rel <= 1e-10, qPrintable(QString("packed step %1 loss: lattice %2, pytorch %3")
                                            .arg(i + 1)
                                            .arg(losses[i], 0, 'g', 17)
                                            .arg(want, 0, 'g', 17)));
    }
  }

  void a_missing_loss_mask_names_the_file() {
    const testing::Run r = train("sft-plain", 1, path("plain"), {}, nullptr, nullptr);
    QVERIFY(r.exit_code != 0);
    QVERIFY2(r.err.contains("plain_loss_mask.idx is missing") &&
                 r.err.contains("lattice data preprocess"),
             qPrintable(r.err));
  }

  void a_batch_without_targets_is_skipped_cleanly() {
    std::vector<Conversation> silent = conversations_;
    for (Conversation& c : silent) std::fill(c.mask.begin(), c.mask.end(), 0);
    write_dataset(path("silent").toStdString(), silent, true);
    QList<double> losses;
    const testing::Run r =
        train("sft-silent", 1, path("silent"), {"--train-iters", "1"}, &losses, nullptr);
    QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
    QVERIFY2((r.out + r.err).contains("every target of the global batch is masked"),
             qPrintable(r.out + r.err));
    for (double l : losses) QVERIFY2(std::isfinite(l), "a NaN loss was recorded");
  }
};

QTEST_GUILESS_MAIN(SftParity)
#include "test_sft_parity.moc"
