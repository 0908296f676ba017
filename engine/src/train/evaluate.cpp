// `lattice eval`: a model's loss over the first samples of a dataset, read in order, on the
// training model (GptModel<float> on the CPU). Text data: sample i is tokens [i*S, i*S + S] of
// the documents concatenated. Image-text data (`lattice data preprocess --images`) with a
// vision-language model: sample i is document i, as training's ImageTextSource makes it (Note
// [image-text samples]) and with its images spliced as training splices them (Note [image rows]
// in model/gpt_vision.cpp), the loss Megatron's per-token mean over the samples' targets (Note
// [SFT loss normalisation] in trainer.cpp). Non-goals: parallel layouts, 16-bit compute.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"
#include "core/host_memory.h"
#include "data/image_text_source.h"
#include "data/indexed_dataset.h"
#include "device/cpu_device.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "model/gpt.h"
#include "train/data_feed.h"

namespace lattice {

namespace {

// The model evaluated: --load's recorded architecture (--seq-length, when given, the sample
// length within its positions), else the flags with the tokenizer's vocabulary.
Result<ModelConfig> eval_model(const TrainOptions& o, std::unique_ptr<CheckpointReader>& reader) {
  if (o.load.empty()) {
    ModelConfig mc = o.model;
    if (o.tokenizer.type != "NullTokenizer") {
      Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
      if (!tokenizer) return tokenizer.status();
      mc.vocab_size = (*tokenizer)->vocab_size();
    }
    return mc;
  }
  Result<CheckpointRef> ref = resolve_checkpoint(o.load, o.ckpt_step);
  if (!ref) return ref.status();
  Result<std::unique_ptr<CheckpointReader>> opened = CheckpointReader::open(ref->path);
  if (!opened) return opened.status();
  reader = std::move(*opened);
  ModelConfig mc = reader->model();
  mc.tensor_model_parallel_size = 1;
  if (o.given("seq-length")) {
    if (o.model.seq_length > mc.max_positions())
      return Status::invalid_argument("--seq-length " + std::to_string(o.model.seq_length) +
                                      " exceeds the " + std::to_string(mc.max_positions()) +
                                      " positions of the model in " + reader->path());
    if (mc.max_position_embeddings == 0) mc.max_position_embeddings = mc.seq_length;
    mc.seq_length = o.model.seq_length;
  }
  return mc;
}

// Sample i: tokens [i*T, i*T + T] of `data`'s documents concatenated in index order.
Status evaluate_text(const TrainOptions& o, const ModelConfig& mc, CpuDevice& device,
                     GptModel<float>& model, int64_t num_samples, EvalResult& r) {
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
  r.lm_loss = r.tokens > 0 ? sum / r.tokens : 0.0;
  return Status::ok();
}

// Sample i: document i of the image-text dataset `source` (training's sample of it), its
// images through the tower; the loss is the mean over the samples' targets.
Status evaluate_image_text(const TrainOptions& o, const ModelConfig& mc, CpuDevice& device,
                           GptModel<float>& model, const SampleSource& source, int64_t num_samples,
                           EvalResult& r) {
  const int T = mc.seq_length, B = o.micro_batch_size;
  const VisionConfig& v = mc.vision;
  Result<std::unique_ptr<GptActivations<float>>> acts = model.new_activations();
  if (!acts) return acts.status();
  std::vector<float> losses(static_cast<size_t>(B) * T);
  std::vector<float> images(static_cast<size_t>(B) * v.images_per_sample * v.num_channels *
                            v.img_h * v.img_w);
  std::vector<int32_t> sample(static_cast<size_t>(T) + 1), inputs(static_cast<size_t>(B) * T),
      targets(static_cast<size_t>(B) * T);
  double sum = 0;
  for (int64_t done = 0; done < num_samples;) {
    // Samples done .. done + B - 1 (the last batch's extra ones wrap into the source and are
    // not counted), as the trainer's one data-parallel rank reads micro-batch 0 at `done`.
    const int n = static_cast<int>(std::min<int64_t>(B, num_samples - done));
    if (Status s = fill_micro_batch(source, done, 0, B, 1, 0, mc.vocab_size, sample, inputs.data(),
                                    targets.data());
        !s)
      return Status::invalid_argument(o.data_path[0] + ": " + s.message());
    if (Status s = fill_micro_batch_images(source, done, 0, B, 1, 0, images.data()); !s) return s;
    if (Status s = model.load_images(**acts, inputs.data(), images.data()); !s) return s;
    model.forward(**acts, inputs.data(), targets.data(), 0, 0.0f);
    device.copy(losses.data(), (*acts)->losses, sizeof(float) * n * T, CopyKind::kDeviceToHost,
                device.compute());
    if (Status s = device.synchronize(device.compute()); !s) return s;
    // An ignored target's loss is 0: the plain sum is the targets' (the trainer's per-token sum).
    for (int i = 0; i < n * T; i++) {
      sum += losses[i];
      r.tokens += targets[i] != kernels::kIgnoreIndex ? 1 : 0;
    }
    done += n;
  }
  if (r.tokens == 0)
    return Status::invalid_argument(o.data_path[0] + "'s first " + std::to_string(num_samples) +
                                    " documents hold no loss targets (every token masked)");
  r.lm_loss = sum / static_cast<double>(r.tokens);
  return Status::ok();
}

Result<EvalResult> evaluate(const TrainOptions& o, int64_t num_samples) {
  if (o.data_path.size() != 1)
    return Status::invalid_argument("lattice eval takes exactly one --data-path PREFIX");
  std::unique_ptr<CheckpointReader> reader;
  Result<ModelConfig> config = eval_model(o, reader);
  if (!config) return config.status();
  ModelConfig mc = *config;
  const std::string& prefix = o.data_path[0];
  const std::string meta = prefix + kImagesSuffix + ".json";
  std::error_code ec;
  const bool image_text = std::filesystem::exists(meta, ec);
  const std::string model_name = !o.load.empty() ? "the model in " + reader->path() : "the model";
  if (mc.has_vision() && !image_text)
    return Status::invalid_argument(
        "--data-path " + prefix + " is text-only (no " + meta + "), but " + model_name +
        " is a vision-language model: evaluate it on image-text data (`lattice data preprocess "
        "--images`, docs/data.md)");
  if (image_text && !mc.has_vision())
    return Status::invalid_argument("--data-path " + prefix + " is image-text data (" + meta +
                                    "), but " + model_name +
                                    " has no vision tower to see its images: evaluate a "
                                    "vision-language model on it, or a text model on text data");
  EvalResult r;
  std::unique_ptr<SampleSource> source;
  if (image_text) {  // the trainer's data path (train/data_feed.cpp), one split of every document
    Result<std::unique_ptr<ImageTextDataset>> opened = ImageTextDataset::open(prefix);
    if (!opened) return opened.status();
    const auto documents = static_cast<int64_t>((*opened)->size());
    if (num_samples > documents)
      return Status::invalid_argument("--eval-iters " + std::to_string(num_samples) + " asks for " +
                                      std::to_string(num_samples) +
                                      " image-text samples (one document each) but " + prefix +
                                      " holds only " + std::to_string(documents));
    Result<DataSplits> splits = build_image_text_splits({{1.0, prefix}}, "1,0,0", num_samples, 0,
                                                        0, image_text_options(mc, mc.vision));
    if (!splits) return splits.status();
    source = std::move(splits->train);
    mc.vision.images_per_sample = std::max(1, source->images_per_sample());
    if (!mc.vision.image_norm_assumed && (mc.vision.image_mean != source->image_mean() ||
                                          mc.vision.image_std != source->image_std()))
      r.note = "note: " + meta +
               " normalises images with another mean and std than the model trained on; its "
               "images are evaluated with the data's, as training would";
  }
  kernels::set_num_threads(o.threads > 0 ? o.threads : 0);
  CpuDevice device;
  const int B = o.micro_batch_size;
  Result<std::unique_ptr<GptModel<float>>> made = GptModel<float>::create(mc, B, device);
  if (!made) return made.status();
  GptModel<float>& model = **made;
  if (reader || !o.load_hf.empty()) {
    std::vector<float> weights;
    host_assign(weights, model.arena_size(), MemoryCategory::kWeights);
    if (reader) {
      Result<CheckpointRef> ref = resolve_checkpoint(o.load, o.ckpt_step);
      if (!ref) return ref.status();
      RankParts parts;
      parts.chunks.push_back({&model.layout(), weights.data()});
      if (Status s = load_checkpoint(*ref, parts, /*weights_only=*/true, nullptr); !s) return s;
    } else if (Status s = import_hf(o.load_hf, mc, model.layout(), weights.data()); !s) {
      return Status::invalid_argument("--load-hf: " + s.message());
    }
    model.upload(weights.data());
  } else if (Status s = model.init_weights(o.seed); !s) {
    return s;
  }
  if (Status s = source ? evaluate_image_text(o, mc, device, model, *source, num_samples, r)
                        : evaluate_text(o, mc, device, model, num_samples, r);
      !s)
    return s;
  r.samples = num_samples;
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
