// Expert parallelism on a device whose memory is not host memory (Note [expert parallelism] in
// model/gpt_moe.cpp), run on the CPU: a CpuDevice with host addressing off, registered as the
// backend a --device cuda run trains on (as test_checkpoint_staged), so that the MoE layers take
// a GPU's path: the (EP, E) counts reach the host by one copy per layer forward and the backward
// reuses that copy, the all-to-alls' rows are regrouped by device copies, and the aux loss and
// the per-expert load are copied to the host. Specifies that three fp32 iterations of
//   "ep2"      EP 2 on 2 ranks (DP 2) with token dropping (uneven and empty blocks),
//   "ep2pp2"   EP 2 x PP 2 on 4 ranks (two micro-batches in flight on each stage, so each
//              activation set must keep its own host counts),
//   "ep2tp2"   EP 2 x TP 2 (sequence parallel) x DP 2 on 4 ranks with full recomputation (the
//              recomputed forward reads the counts anew)
//   "etp1"     EP 2 x TP 2 x DP 2 with expert TP 1 and no sequence parallelism on 4 ranks (Note
//              [expert tensor parallelism 1]: each TP rank's rows all-gathered by device copies
//              of the communicator, the route counts summed over TP)
//   "etp2"     EP 2 x TP 4 with expert TP 2 on 4 ranks (Note [expert tensor parallelism e]: the
//              groups' zero-padded rows summed over TP, the route weights' gradient over the
//              expert-TP group, the route counts of each group's rank 0 over TP)
// train bit for bit as the plain CPU device: every lm loss, grad norm, moe aux loss and per-expert
// load, and the checkpoint written after the last iteration byte for byte (the parameters and the
// optimizer's moments, so every gradient that reached them).
#include <QtTest/QtTest>

#include <cstdint>
#include <cstdio>
#include <ostream>

#include "common/staged_runs.h"
#include "common/tiny_model.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

// 4 layers, MoE on layers 0 and 2 (4 experts, top-2, a large load-balancing loss), micro-batches
// of one sequence, 4 a step: test_expert_parallel.sh's model in fp32.
Result<TrainOptions> options_for(const std::string& run) {
  TrainOptions o = testing::cuda_ready_options();
  o.model = testing::tiny_config(4, 32, 4, 16, 256);
  o.model.num_experts = 4;
  o.model.moe_router_topk = 2;
  o.model.moe_aux_loss_coeff = 0.5f;
  o.model.moe_layer_freq = 2;
  o.micro_batch_size = 1;
  o.global_batch_size = 4;
  o.train_iters = 3;
  o.log_interval = 1;  // the per-expert load on every iteration
  o.optim.lr = 1e-2f;
  o.threads = 1;
  o.seed = 5;
  o.device = "cpu";
  o.parallel.expert_model_parallel_size = 2;
  if (run == "ep2") {
    o.model.moe_expert_capacity_factor = 1.0f;
  } else if (run == "ep2pp2") {
    o.parallel.pipeline_model_parallel_size = 2;
  } else if (run == "ep2tp2") {
    o.model.tensor_model_parallel_size = 2;
    o.parallel.sequence_parallel = true;
    o.parallel.recompute_granularity = "full";
    o.parallel.recompute_method = "uniform";
    o.parallel.recompute_num_layers = 1;
  } else if (run == "etp1") {
    o.model.tensor_model_parallel_size = 2;
    o.parallel.expert_tensor_parallel_size = 1;
  } else if (run == "etp2") {
    o.model.tensor_model_parallel_size = 4;
    o.parallel.expert_tensor_parallel_size = 2;
  }
  return o;
}

int ranks_of(const QString& run) {
  return run == "ep2" ? 2 : 4;
}

// Rank 0's figures, exact ("%a"): per iteration its lm loss, grad norm and moe aux loss, and
// each MoE layer's routes per expert.
void figure_lines(const IterationMetrics& m, std::ostream& out) {
  char line[160];
  std::snprintf(line, sizeof line, "iteration %d loss %a norm %a aux %a\n", m.iteration, m.lm_loss,
                m.grad_norm, m.moe_aux_loss);
  out << line;
  for (const auto& [layer, routes] : m.moe_expert_load) {
    out << "load " << m.iteration << " layer " << layer << ":";
    for (int64_t r : routes) out << ' ' << r;
    out << '\n';
  }
}

}  // namespace

class ExpertParallelStaged : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void staged_device_trains_expert_parallel_as_the_cpu_data() {
    QTest::addColumn<QString>("run");
    QTest::newRow("EP 2, token dropping") << "ep2";
    QTest::newRow("EP 2 x PP 2") << "ep2pp2";
    QTest::newRow("EP 2 x TP 2, sequence parallel, full recomputation") << "ep2tp2";
    QTest::newRow("EP 2 x TP 2, expert TP 1") << "etp1";
    QTest::newRow("EP 2 x TP 4, expert TP 2") << "etp2";
  }
  void staged_device_trains_expert_parallel_as_the_cpu() {
    QFETCH(QString, run);
    const QString plain = testing::staged_worker_figures(dir_, run, "plain", ranks_of(run));
    const QString staged = testing::staged_worker_figures(dir_, run, "staged", ranks_of(run));
    QVERIFY(!plain.isEmpty());
    // Not vacuous: three iterations with an aux loss and both MoE layers' load on each.
    QCOMPARE(plain.count("iteration "), 3);
    QVERIFY2(!plain.contains("aux nan"), qPrintable(plain));
    QCOMPARE(plain.count("load "), 3 * 2);
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
  return testing::staged_test_main<ExpertParallelStaged>(argc, argv, options_for, figure_lines);
}
#include "test_expert_parallel_staged.moc"
