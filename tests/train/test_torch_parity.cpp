// Lattice's GPT-2 against an independent PyTorch implementation of Hugging Face GPT-2
// (gpt2_reference.py, float64): the same weights (exchanged as a GPT-2 safetensors file)
// and tokens must give the same loss and the same gradient for every tensor. Skipped
// where Debian's python3-torch is not installed (installers/install-deps.sh --tests). Runs once
// per copy of the CPU kernels (generic x86-64, AVX2, AVX-512; Note [CPU dispatch],
// kernels/cpu/README.md); a copy this CPU cannot run is reported as skipped, by name.
#include <QtTest/QtTest>

#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/safetensors.h"
#include "common/cpu_isa_rows.h"
#include "common/grad_check.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "lattice/cpu_gemm.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

using namespace lattice;
using testing::kPython;
using testing::rows_json;
using testing::torch_available;

namespace {}  // namespace

class TorchParity : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase_data() { testing::add_cpu_isa_rows(); }
  // Run again with LATTICE_CPU_GEMM set to each other way (test_torch_parity_onednn, ..._split):
  // the request must be one this build serves, or that run would check OpenBLAS twice.
  void initTestCase() {
    QVERIFY2(kernels::cpu_gemm_env_error().empty(), kernels::cpu_gemm_env_error().c_str());
  }
  void init() {
    const QString unavailable = testing::select_row_isa();
    if (!unavailable.isEmpty()) QSKIP(qPrintable(unavailable));
  }

  void loss_and_every_gradient_match_pytorch_gpt2() {
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    kernels::set_num_threads(2);
    // Vocabulary 128, a multiple of 128: no padding rows, which GPT-2 files do not hold.
    ModelConfig c = testing::tiny_config(2, 32, 4, 16, 128);
    c.init_method_std = 0.1f;
    const int B = 2, N = B * c.seq_length;
    GptModel<float> model(c, B);
    model.init_weights(21);
    const auto noise = testing::random_vector(model.arena_size(), 22, 0.05);
    for (size_t i = 0; i < model.arena_size(); i++)
      model.params()[i] += static_cast<float>(noise[i]);
    std::vector<int32_t> tokens(N), targets(N);
    for (int i = 0; i < N; i++)
      tokens[i] = (i * 37 + 11) % c.vocab_size, targets[i] = (i * 53 + 7) % c.vocab_size;

    // Lattice in double from exactly the float weights that the file holds.
    GptModel<double> exact(c, B);
    std::copy(model.params(), model.params() + model.arena_size(), exact.params());
    GptActivations<double> acts(c, B);
    exact.zero_grads();
    const double loss = exact.forward(acts, tokens.data(), targets.data(), 0, 1.0f / N);
    exact.backward(acts);
    GptActivations<float> acts_f(c, B);
    const double loss_f = model.forward(acts_f, tokens.data(), targets.data(), 0, 0.0f);

    QTemporaryDir dir;
    const std::string weights = dir.filePath("w.safetensors").toStdString();
    const std::string ours = dir.filePath("ours.safetensors").toStdString();
    const std::string theirs = dir.filePath("torch.safetensors").toStdString();
    const std::string spec = dir.filePath("tokens.json").toStdString();
    QVERIFY(export_hf_gpt2(weights, c, model.layout(), model.params()).is_ok());
    std::vector<float> grads(exact.grads(), exact.grads() + exact.arena_size());
    QVERIFY(export_hf_gpt2(ours, c, model.layout(), grads.data()).is_ok());
    {
      auto rows = [&](const std::vector<int32_t>& ids) {
        std::string text = "[";
        for (int b = 0; b < B; b++) {
          text += b ? ",[" : "[";
          for (int t = 0; t < c.seq_length; t++) {  // no "," + ...: GCC 12's -Wrestrict
            if (t) text += ',';
            text += std::to_string(ids[b * c.seq_length + t]);
          }
          text += "]";
        }
        return text + "]";
      };
      std::ofstream(spec) << "{\"heads\": " << c.num_attention_heads
                          << ", \"tokens\": " << rows(tokens) << ", \"targets\": " << rows(targets)
                          << "}";
    }
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/gpt2_reference.py",
                              QString::fromStdString(weights), QString::fromStdString(spec),
                              QString::fromStdString(theirs)},
                             {}, 120000);
    QVERIFY2(py.exit_code == 0, qPrintable(py.err));
    const QJsonObject result = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const double torch_loss = result["loss"].toDouble();
    QVERIFY2(std::abs(loss - torch_loss) <= 1e-9 * torch_loss,
             qPrintable(QString("loss: lattice (double) %1, pytorch %2")
                            .arg(loss, 0, 'g', 17)
                            .arg(torch_loss, 0, 'g', 17)));
    QVERIFY2(std::abs(loss_f - torch_loss) <= 1e-5 * torch_loss,
             qPrintable(QString("loss: lattice (float) %1, pytorch %2")
                            .arg(loss_f, 0, 'g', 10)
                            .arg(torch_loss, 0, 'g', 10)));

    auto a = safetensors::File::open(ours), b = safetensors::File::open(theirs);
    QVERIFY2(a.is_ok() && b.is_ok(), "cannot read the gradient files");
    int compared = 0;
    for (const safetensors::TensorInfo& t : a->tensors()) {
      const safetensors::TensorInfo* u = b->find(t.name);
      QVERIFY2(u, ("pytorch has no gradient for " + t.name).c_str());
      QVERIFY2(u->shape == t.shape, ("shape of " + t.name).c_str());
      std::vector<float> ga(t.numel), gb(t.numel);
      QVERIFY(a->read_float(t, ga.data()).is_ok() && b->read_float(*u, gb.data()).is_ok());
      float scale = 0;
      for (float g : gb) scale = std::max(scale, std::abs(g));
      for (size_t i = 0; i < t.numel; i++) {
        const double tol = 1e-5 * scale + 1e-9;
        QVERIFY2(std::abs(ga[i] - gb[i]) <= tol,
                 qPrintable(QString("d loss / d %1[%2]: lattice %3, pytorch %4 (tolerance %5)")
                                .arg(QString::fromStdString(t.name))
                                .arg(i)
                                .arg(ga[i], 0, 'g', 9)
                                .arg(gb[i], 0, 'g', 9)
                                .arg(tol)));
      }
      compared++;
    }
    QCOMPARE(compared, 4 + 12 * c.num_layers);
  }
};

QTEST_GUILESS_MAIN(TorchParity)
#include "test_torch_parity.moc"
