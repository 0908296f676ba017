// Packed sequences (Note [packed sequences] in engine/src/model/gpt_layer.cpp, issue 24): a
// micro-batch whose sequences pack several documents, passed with their positions, gives every
// document's tokens the losses and parameter gradients the document gets alone. GptModel<double>
// on the CPU device, GPT-2 (learned positions, LayerNorm, GELU) and a Llama-shaped model (RoPE,
// RMSNorm, SwiGLU, two key/value groups), without and with selective and full recomputation;
// repeated as two MPI ranks at TP 2, with and without sequence parallelism (the position
// embedding added to each rank's rows by position). "Alone" is one run per document with the
// document at the start of a sequence (positions 0..len-1, no positions passed, so the plain
// causal model) and the dlogits of every other token zeroed before the backward, so its
// gradients are those of the document's losses only; their sum over the documents must be the
// packed run's gradients. And positions 0..T-1 for every sequence give the model without
// positions bit for bit.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "lattice/layout.h"
#include "model/gpt.h"
#include "parallel/groups.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

// Two layers, hidden 32, 4 heads (2 per TP rank), sequences of 16, vocabulary 50.
ModelConfig gpt2_config(int tp) {
  ModelConfig c = testing::tiny_config(2, 32, 4, 16, 50);
  c.tensor_model_parallel_size = tp;
  c.init_method_std = 0.2f;  // large enough that attention is far from uniform
  return c;
}

// The same sizes as a Llama: RoPE, RMSNorm, SwiGLU, no biases, 2 key/value groups.
ModelConfig llama_config(int tp) {
  ModelConfig c = gpt2_config(tp);
  c.position_embedding_type = "rope";
  c.normalization = "RMSNorm";
  c.swiglu = true;
  c.disable_bias_linear = true;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.untie_embeddings_and_output_weights = true;
  return c;
}

// One document of a micro-batch: its sequence, first row in it and length.
struct Document {
  int sequence, start, length;
};

// Two sequences of 16: three documents, and one of a single token before one of 15.
const std::vector<Document> kDocuments = {{0, 0, 6}, {0, 6, 7}, {0, 13, 3}, {1, 0, 1}, {1, 1, 15}};

// normwise |got - want| / |want|.
double relative_error(const double* got, const double* want, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; i++) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Runs one model's steps on (B, T) token ids; the whole check of the file header.
class PackedCheck {
 public:
  PackedCheck(const ModelConfig& c, const ModelShard& shard, Comm* tp, const RecomputePlan& plan)
      : c_(c), shard_(shard), tp_(tp), plan_(plan) {}

  std::string run() {
    const int B = 2, T = c_.seq_length, N = B * T;
    auto made = GptModel<double>::create(c_, B, device_, shard_, tp_, plan_);
    if (!made) return made.status().message();
    GptModel<double>& m = **made;
    auto made_acts = m.new_activations();
    if (!made_acts) return made_acts.status().message();
    GptActivations<double>& acts = **made_acts;
    if (Status s = m.init_weights(17); !s) return s.message();
    // The vocabulary columns of this rank's logits (the output layer's rows).
    const ParamTensor& head = m.layout().tensors()[m.layout().output_index()];
    vt_ = static_cast<int>(head.numel / static_cast<size_t>(c_.hidden_size));

    std::vector<int32_t> tokens(N), targets(N), positions(N);
    for (int i = 0; i < N; i++) {
      tokens[i] = (i * 37 + 11) % c_.vocab_size;
      targets[i] = (i * 53 + 5) % c_.vocab_size;
    }
    for (const Document& d : kDocuments)
      for (int p = 0; p < d.length; p++) positions[d.sequence * T + d.start + p] = p;

    // The packed micro-batch.
    m.zero_grads();
    m.set_final_backward(true);
    m.forward(acts, tokens.data(), targets.data(), 0, 1.0f, positions.data());
    m.backward(acts);
    if (Status s = device_.synchronize(device_.compute()); !s) return s.message();
    const std::vector<double> packed_losses(acts.losses, acts.losses + N);
    const std::vector<double> packed_grads(m.grads(), m.grads() + m.arena_size());

    // Each document alone at the start of sequence 0 (the other rows are filler whose
    // dlogits are zeroed), gradients accumulated over the documents.
    m.zero_grads();
    for (const Document& d : kDocuments) {
      std::vector<int32_t> alone_tokens(tokens), alone_targets(targets);
      for (int p = 0; p < d.length; p++) {
        alone_tokens[p] = tokens[d.sequence * T + d.start + p];
        alone_targets[p] = targets[d.sequence * T + d.start + p];
      }
      m.forward(acts, alone_tokens.data(), alone_targets.data(), 0, 1.0f);
      if (Status s = device_.synchronize(device_.compute()); !s) return s.message();
      for (int p = 0; p < d.length; p++) {
        const int row = d.sequence * T + d.start + p;
        const double got = packed_losses[row], want = acts.losses[p];
        if (!(std::abs(got - want) <= 1e-12 * (1 + std::abs(want))))
          return QString("token loss of sequence %1 row %2: packed %3, alone %4 (tolerance 1e-12)")
              .arg(d.sequence)
              .arg(d.start + p)
              .arg(got, 0, 'g', 17)
              .arg(want, 0, 'g', 17)
              .toStdString();
      }
      std::memset(acts.logits_accum + static_cast<size_t>(d.length) * vt_, 0,
                  static_cast<size_t>(N - d.length) * vt_ * sizeof(double));
      // Sequence-parallel gradients are summed over TP once, after the last backward.
      m.set_final_backward(&d == &kDocuments.back());
      m.backward(acts);
    }
    m.set_final_backward(true);
    if (Status s = device_.synchronize(device_.compute()); !s) return s.message();
    for (const ParamTensor& t : m.layout().tensors()) {
      const double e =
          relative_error(packed_grads.data() + t.offset, m.grads() + t.offset, t.numel);
      if (!(e <= 1e-10))
        return t.name + " gradient: packed vs. documents alone, relative error " +
               std::to_string(e) + " (tolerance 1e-10)";
    }

    // Positions 0..T-1 everywhere: the model without positions, bit for bit.
    for (int i = 0; i < N; i++) positions[i] = i % T;
    m.zero_grads();
    m.forward(acts, tokens.data(), targets.data(), 0, 1.0f, positions.data());
    m.backward(acts);
    if (Status s = device_.synchronize(device_.compute()); !s) return s.message();
    const std::vector<double> counted_losses(acts.losses, acts.losses + N);
    const std::vector<double> counted_grads(m.grads(), m.grads() + m.arena_size());
    m.zero_grads();
    m.forward(acts, tokens.data(), targets.data(), 0, 1.0f);
    m.backward(acts);
    if (Status s = device_.synchronize(device_.compute()); !s) return s.message();
    if (std::memcmp(counted_losses.data(), acts.losses, N * sizeof(double)) != 0)
      return "positions 0..T-1 change the token losses";
    if (std::memcmp(counted_grads.data(), m.grads(), m.arena_size() * sizeof(double)) != 0)
      return "positions 0..T-1 change the gradients";
    return "";
  }

 private:
  ModelConfig c_;
  ModelShard shard_;
  Comm* tp_;
  RecomputePlan plan_;
  CpuDevice device_;
  int vt_ = 0;
};

// Both models, plain and under each recomputation, on `shard`; "" or the first failure.
std::string check_all(int tp, const ModelShard& shard, Comm* comm) {
  const std::pair<const char*, RecomputePlan> plans[] = {
      {"", RecomputePlan{}},
      {"selective recomputation, ", RecomputePlan::make("selective", "", 0, 2)},
      {"full recomputation, ", RecomputePlan::make("full", "uniform", 1, 2)},
  };
  for (const auto& [name, config] :
       {std::pair{"GPT-2", gpt2_config(tp)}, std::pair{"Llama", llama_config(tp)}})
    for (const auto& [plan_name, plan] : plans) {
      const std::string error = PackedCheck(config, shard, comm, plan).run();
      if (!error.empty()) return std::string(name) + ", " + plan_name + error;
    }
  return "";
}

// Two MPI ranks at TP 2 (with sequence parallelism when sp).
int tp_worker(bool sp) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  std::string error;
  {  // the communicators go before MPI does
    TrainOptions o;
    o.model = gpt2_config(2);
    o.parallel.sequence_parallel = sp;
    o.micro_batch_size = 2;
    o.global_batch_size = 2;
    Result<ParallelLayout> layout = make_layout(o, (*world)->size());
    if (!layout) {
      error = layout.status().message();
    } else if (Result<ProcessGroups> groups = make_process_groups(**world, *layout); !groups) {
      error = groups.status().message();
    } else {
      const ModelShard shard = shard_of(groups->layout, groups->coord, 0, sp);
      error = check_all(2, shard, groups->tp.get());
    }
  }
  return testing::end_worker(*world, error);
}

}  // namespace

class GptPacked : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { kernels::set_num_threads(2); }

  void packed_documents_train_as_documents_alone() {
    const std::string error = check_all(1, ModelShard{}, nullptr);
    QVERIFY2(error.empty(), error.c_str());
  }

  // Positions that are not contiguous documents are refused with a sentence naming the token.
  void positions_of_broken_documents_are_refused() {
    const ModelConfig c = gpt2_config(1);
    CpuDevice device;
    auto made = GptModel<double>::create(c, 1, device);
    QVERIFY(bool(made));
    auto acts = (*made)->new_activations();
    QVERIFY(bool(acts));
    std::vector<int32_t> tokens(c.seq_length, 1), positions(c.seq_length);
    for (int t = 0; t < c.seq_length; t++) positions[t] = t;
    positions[5] = 7;
    try {
      (*made)->forward(**acts, tokens.data(), tokens.data(), 0, 0.0f, positions.data());
      QFAIL("positions 0 1 2 3 4 7 were accepted");
    } catch (const std::invalid_argument& e) {
      const std::string want = "sequence 0 token 5 has position 7 after 4";
      QVERIFY2(std::string(e.what()).find(want) != std::string::npos, e.what());
    }
    QCOMPARE(packed_positions_error(positions.data() + 6, 1, 3),
             std::string("packed positions: sequence 0 token 0 has position 6 after the sequence "
                         "start; a document's positions start at 0 and count up by one"));
  }

#ifdef LATTICE_MPIEXEC
  void tp2_packed_documents_train_as_documents_alone() {
    for (const char* mode : {"--tp-worker", "--sp-worker"}) {
      static const QString self =
          QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
      const testing::Run run = testing::run_mpi(2, self, {mode}, {}, 120000);
      QVERIFY2(run.exit_code == 0, qPrintable(QString(mode) + ": " + run.err + run.out));
    }
  }
#endif
};

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--tp-worker") return tp_worker(false);
  if (argc == 2 && std::string(argv[1]) == "--sp-worker") return tp_worker(true);
  GptPacked test;
  return QTest::qExec(&test, argc, argv);
}
#include "test_gpt_packed.moc"
