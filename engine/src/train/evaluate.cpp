// `lattice eval`: a model's loss over the first samples of a dataset, read in order.
#include <algorithm>
#include <cmath>

#include "checkpoint/hf_model.h"
#include "core/host_memory.h"
#include "data/indexed_dataset.h"
#include "device/cpu_device.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "model/gpt.h"

namespace lattice {

namespace {

Result<EvalResult> evaluate(const TrainOptions& o, int64_t num_samples) {
  ModelConfig mc = o.model;
  if (o.tokenizer.type != "NullTokenizer") {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer) return tokenizer.status();
    mc.vocab_size = (*tokenizer)->vocab_size();
  }
  if (o.data_path.size() != 1)
    return Status::invalid_argument("lattice eval takes exactly one --data-path PREFIX");
  Result<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::open(o.data_path[0]);
  if (!opened) return opened.status();
  const IndexedDataset& data = **opened;
  const int T = mc.seq_length, B = o.micro_batch_size;
  // Sample i covers tokens [i*T, i*T + T] of the concatenation, so n samples need n*T + 1.
  const int64_t available =
      data.num_tokens() > 0 ? (static_cast<int64_t>(data.num_tokens()) - 1) / T : 0;
  if (num_samples > available)
    return Status::invalid_argument("--eval-iters " + std::to_string(num_samples) + " asks for " +
                                    std::to_string(num_samples) + " samples of " +
                                    std::to_string(T + 1) + " tokens but " + o.data_path[0] +
                                    " holds only " + std::to_string(available));
  kernels::set_num_threads(o.threads > 0 ? o.threads : 0);
  CpuDevice device;
  Result<std::unique_ptr<GptModel<float>>> made = GptModel<float>::create(mc, B, device);
  if (!made) return made.status();
  GptModel<float>& model = **made;
  if (!o.load_hf.empty()) {
    std::vector<float> weights;
    host_assign(weights, model.arena_size(), MemoryCategory::kWeights);
    if (Status s = import_hf(o.load_hf, mc, model.layout(), weights.data()); !s)
      return Status::invalid_argument("--load-hf: " + s.message());
    model.upload(weights.data());
  } else if (Status s = model.init_weights(o.seed); !s) {
    return s;
  }
  Result<std::unique_ptr<GptActivations<float>>> acts = model.new_activations();
  if (!acts) return acts.status();
  std::vector<float> losses(static_cast<size_t>(B) * T);
  std::vector<int32_t> window(static_cast<size_t>(T) + 1), inputs(static_cast<size_t>(B) * T, 0),
      targets(static_cast<size_t>(B) * T, 0);
  // Walks the sequences in index order; `seq`/`offset` is the read position.
  size_t seq = 0, offset = 0;
  const auto lengths = data.sequence_lengths();
  auto read_tokens = [&](int32_t* out, size_t count) {
    while (count > 0) {
      while (offset == static_cast<size_t>(lengths[seq])) seq++, offset = 0;
      const size_t take = std::min(count, static_cast<size_t>(lengths[seq]) - offset);
      data.read(seq, offset, take, out);
      out += take, offset += take, count -= take;
    }
  };
  read_tokens(window.data(), 1);
  EvalResult r;
  double sum = 0;
  for (int64_t done = 0; done < num_samples;) {
    const int n = static_cast<int>(std::min<int64_t>(B, num_samples - done));
    for (int b = 0; b < n; b++) {
      read_tokens(window.data() + 1, T);  // window[0] is the previous sample's last token
      for (int t = 0; t <= T; t++)
        if (window[t] < 0 || window[t] >= mc.vocab_size)
          return Status::invalid_argument(o.data_path[0] + " holds token id " +
                                          std::to_string(window[t]) +
                                          ", outside the model's "
                                          "vocabulary of " +
                                          std::to_string(mc.vocab_size));
      std::copy(window.begin(), window.begin() + T, inputs.begin() + static_cast<size_t>(b) * T);
      std::copy(window.begin() + 1, window.end(), targets.begin() + static_cast<size_t>(b) * T);
      window[0] = window[T];
    }
    model.forward(**acts, inputs.data(), targets.data(), 0, 0.0f);
    // The last batch may hold fewer than B samples: only their tokens count.
    device.copy(losses.data(), (*acts)->losses, sizeof(float) * n * T, CopyKind::kDeviceToHost,
                device.compute());
    if (Status s = device.synchronize(device.compute()); !s) return s;
    for (int i = 0; i < n * T; i++) sum += losses[i];
    done += n;
    r.tokens += static_cast<int64_t>(n) * T;
  }
  r.samples = num_samples;
  r.lm_loss = r.tokens > 0 ? sum / r.tokens : 0.0;
  r.perplexity = std::exp(std::min(20.0, r.lm_loss));
  return r;
}

}  // namespace

Result<EvalResult> evaluate_sequential(const TrainOptions& o, int64_t num_samples) {
  try {
    return evaluate(o, num_samples);
  } catch (const OutOfMemory& e) {  // core/host_memory.h: the model's buffers
    return Status::resource_exhausted(e.what());
  }
}

}  // namespace lattice
