// A vision-language model on a device whose memory is not host memory (docs/vision.md), run on
// the CPU: a CpuDevice with host addressing off, registered as the backend a --device cuda run
// trains on (tests/common/staged_backend.h, as test_expert_parallel_staged), so that the tower
// and the splice take a GPU's path: the micro-batch's images and token ids reach the device by
// copies, the image rows are found and filled there (Note [image rows] in model/gpt_vision.cpp),
// and the tower's parameters and gradients live in the device arenas. Specifies that three
// fp32 iterations of
//   "one"        one process (two micro-batches a step)
//   "dp2"        DP 2 with the distributed optimizer and full recomputation of the decoder
//   "pp2"        PP 2 (the tower on the first stage; 1F1B with two micro-batches in flight, so
//                the tower re-runs its forward for the older one's backward)
//   "tp2pp2"     TP 2 (sequence parallel) x PP 2 on 4 ranks
//   "projector"  --freeze-LM --freeze-ViT (LLaVA's stage 1: the projector alone trains)
// train bit for bit as the plain CPU device: every lm loss and grad norm, and the checkpoint
// written after the last iteration byte for byte (the parameters and the optimizer's moments,
// so every gradient that reached them, the tower's included).
#include <QtTest/QtTest>

#include <cstdio>
#include <ostream>

#include "common/staged_runs.h"
#include "common/tiny_model.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

// test_vlm_layouts.sh's model in fp32: 4 layers of hidden 32, a 2-layer CLIP tower of hidden 16
// on 16x16 images in 8x8 patches, on the mock image-text stream.
Result<TrainOptions> options_for(const std::string& run) {
  std::vector<std::string> flags = {"--mock-data",
                                    "--num-layers",
                                    "4",
                                    "--hidden-size",
                                    "32",
                                    "--num-attention-heads",
                                    "4",
                                    "--seq-length",
                                    "16",
                                    "--vocab-size",
                                    "255",
                                    "--micro-batch-size",
                                    "2",
                                    "--global-batch-size",
                                    "8",
                                    "--train-iters",
                                    "3",
                                    "--log-interval",
                                    "1",
                                    "--lr",
                                    "1e-2",
                                    "--no-db",
                                    "--eval-iters",
                                    "0",
                                    "--hidden-dropout",
                                    "0",
                                    "--attention-dropout",
                                    "0",
                                    "--seed",
                                    "7",
                                    "--threads",
                                    "1"};
  const std::vector<std::string> tower = testing::tiny_tower_flags(2);
  flags.insert(flags.end(), tower.begin(), tower.end());
  const std::map<std::string, std::vector<std::string>> layouts = {
      {"one", {}},
      {"dp2",
       {"--use-distributed-optimizer", "--recompute-granularity", "full", "--recompute-method",
        "uniform", "--recompute-num-layers", "1"}},
      {"pp2", {"--pipeline-model-parallel-size", "2"}},
      {"tp2pp2",
       {"--tensor-model-parallel-size", "2", "--sequence-parallel",
        "--pipeline-model-parallel-size", "2"}},
      {"projector", {"--freeze-LM", "--freeze-ViT"}}};
  const auto& extra = layouts.at(run);
  flags.insert(flags.end(), extra.begin(), extra.end());
  return parse_train_flags(flags);
}

int ranks_of(const QString& run) {
  return run == "tp2pp2" ? 4 : run == "dp2" || run == "pp2" ? 2 : 1;
}

// Rank 0's figures, exact ("%a"): per iteration its lm loss and grad norm.
void figure_lines(const IterationMetrics& m, std::ostream& out) {
  char line[128];
  std::snprintf(line, sizeof line, "iteration %d loss %a norm %a\n", m.iteration, m.lm_loss,
                m.grad_norm);
  out << line;
}

}  // namespace

class VlmStaged : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void staged_device_trains_a_vision_language_model_as_the_cpu_data() {
    QTest::addColumn<QString>("run");
    QTest::newRow("one process") << "one";
    QTest::newRow("DP 2, distributed optimizer, full recomputation") << "dp2";
    QTest::newRow("PP 2") << "pp2";
    QTest::newRow("TP 2 (sequence parallel) x PP 2") << "tp2pp2";
    QTest::newRow("projector only") << "projector";
  }
  void staged_device_trains_a_vision_language_model_as_the_cpu() {
    QFETCH(QString, run);
    const QString plain = testing::staged_worker_figures(dir_, run, "plain", ranks_of(run));
    const QString staged = testing::staged_worker_figures(dir_, run, "staged", ranks_of(run));
    QVERIFY(!plain.isEmpty());
    QCOMPARE(plain.count("iteration "), 3);  // not vacuous: three iterations with figures
    QVERIFY2(!plain.contains("nan"), qPrintable(plain));
    QCOMPARE(staged, plain);
    // The checkpoints: every rank's file, byte for byte.
    const std::string base = dir_.filePath(run).toStdString();
    testing::verify_same_checkpoint_files(base + "/plain/ckpt/iter_0000003",
                                          base + "/staged/ckpt/iter_0000003");
  }

 private:
  QTemporaryDir dir_;
};

int main(int argc, char** argv) {
  return testing::staged_test_main<VlmStaged>(argc, argv, options_for, figure_lines);
}
#include "test_vlm_staged.moc"
