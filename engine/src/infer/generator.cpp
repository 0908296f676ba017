// Generator (infer.h): loading a model for inference and the generation loop. A group of
// sequences shares one key/value cache (one slot each): first every prompt token is run
// (prefill, in chunks of max_prefill_rows rows), then one row per live sequence per step until
// each has its tokens, its EOD or a stop string.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_model.h"
#include "core/host_memory.h"
#include "infer/infer_model.h"
#include "infer/sampling.h"
#include "lattice/infer.h"
#include "model/init_weights.h"

namespace lattice {

namespace {

namespace fs = std::filesystem;

Status load_checkpoint_weights(CheckpointReader& reader, InferenceModel& model) {
  std::vector<int64_t> shape;
  std::vector<float> global;
  for (const ParamTensor& t : model.layout().tensors()) {
    if (Status s = reader.read_global("model", t.name, shape, global); !s) return s;
    if (Status s = take_slice(t, shape, global, 0, t.numel, reader.model().vocab_size,
                              model.params() + t.offset, reader.path());
        !s)
      return s;
  }
  return Status::ok();
}

// This rank's slices of the Hugging Face model at `path`.
Status load_hf_weights(const std::string& path, const ModelConfig& config, InferenceModel& model) {
  return import_hf(path, config, model.layout(), model.params());
}

// The rules a model must meet to be split over `t` ranks, one sentence each.
Status check_tensor_parallel(const ModelConfig& m, int t) {
  std::string errors;
  for (const std::string& e : m.validate()) errors += (errors.empty() ? "" : "\n") + e;
  if (m.num_attention_heads % t != 0)
    errors += (errors.empty() ? "" : "\n") + std::string("--tensor-model-parallel-size ") +
              std::to_string(t) + " does not divide the model's " +
              std::to_string(m.num_attention_heads) + " attention heads";
  if (m.ffn() % t != 0)
    errors += (errors.empty() ? "" : "\n") + std::string("--tensor-model-parallel-size ") +
              std::to_string(t) + " does not divide the model's FFN width " +
              std::to_string(m.ffn());
  if (m.moe() && m.moe_ffn() % t != 0)
    errors += (errors.empty() ? "" : "\n") + std::string("--tensor-model-parallel-size ") +
              std::to_string(t) + " does not divide the model's expert FFN width " +
              std::to_string(m.moe_ffn()) + " (--moe-ffn-hidden-size)";
  if (m.kv_heads() % t != 0)
    errors += (errors.empty() ? "" : "\n") + std::string("--tensor-model-parallel-size ") +
              std::to_string(t) + " does not divide the model's " + std::to_string(m.kv_heads()) +
              " key/value heads (--num-query-groups)";
  return errors.empty() ? Status::ok() : Status::invalid_argument(errors);
}

// Where one sequence of a group stands.
struct Live {
  int index = 0;   // into the request list
  int length = 0;  // tokens so far (prompt + generated)
  bool done = false;
  size_t stop_at = std::string::npos;  // where a stop string starts in the generated text
  std::mt19937_64 rng;
};

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEod:
      return "eod";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kLength:
      break;
  }
  return "length";
}

Generator::Generator(std::unique_ptr<InferenceModel> model, int max_batch, int max_rows)
    : model_(std::move(model)),
      max_batch_(std::max(1, max_batch)),
      max_rows_(std::max({1, max_rows, max_batch})) {
  eod_ = model_->config().vocab_size - 1;
}

Generator::~Generator() = default;

const ModelConfig& Generator::config() const {
  return model_->config();
}
int Generator::context_length() const {
  return model_->config().max_positions();
}

void Generator::set_tokenizer(const Tokenizer* tokenizer) {
  tokenizer_ = tokenizer;
  eod_ = tokenizer ? tokenizer->eod() : model_->config().vocab_size - 1;
}

Result<std::unique_ptr<Generator>> Generator::load(const InferenceOptions& o, Comm* tp) {
  const int t = tp ? tp->size() : 1;
  if (!o.load.empty() && !o.load_hf.empty())
    return Status::invalid_argument("--load and --load-hf both name a model; give one");
  if (o.load.empty() && o.load_hf.empty())
    return Status::invalid_argument(
        "no model: give --load DIR (a Lattice checkpoint) or --load-hf PATH (a Hugging Face "
        "model)");
  ModelConfig m = o.model;
  std::unique_ptr<CheckpointReader> reader;
  if (!o.load.empty()) {
    Result<CheckpointRef> ref = resolve_checkpoint(o.load, o.ckpt_step);
    if (!ref) return ref.status();
    Result<std::unique_ptr<CheckpointReader>> opened = CheckpointReader::open(ref->path);
    if (!opened) return opened.status();
    reader = std::move(*opened);
    m = reader->model();
  } else {
    std::error_code ec;
    if (!fs::exists(o.load_hf, ec))
      return Status::invalid_argument("--load-hf " + o.load_hf + ": no such file or directory");
  }
  m.tensor_model_parallel_size = t;
  m.attention_dropout = m.hidden_dropout = 0.0f;
  if (Status s = check_tensor_parallel(m, t); !s) return s;
  auto model = std::make_unique<InferenceModel>(m, tp);
  const Status loaded =
      reader ? load_checkpoint_weights(*reader, *model) : load_hf_weights(o.load_hf, m, *model);
  if (!loaded) return loaded;
  return std::unique_ptr<Generator>(
      new Generator(std::move(model), o.max_batch_size, o.max_prefill_rows));
}

std::unique_ptr<Generator> Generator::random(const ModelConfig& config, uint64_t seed, Comm* tp,
                                             int max_batch_size) {
  ModelConfig m = config;
  m.tensor_model_parallel_size = tp ? tp->size() : 1;
  m.attention_dropout = m.hidden_dropout = 0.0f;
  auto model = std::make_unique<InferenceModel>(m, tp);
  // The training model's initialisation of the same shard: the same weights whatever the
  // layout (model/init_weights.h).
  if (const size_t failed = init_arena(m, model->layout(), seed, model->params()); failed > 0)
    throw OutOfMemory(MemoryCategory::kWorkspace, failed);
  return std::unique_ptr<Generator>(new Generator(std::move(model), max_batch_size, 256));
}

std::unique_ptr<Generator> Generator::from_weights(const ModelConfig& config, const float* params,
                                                   int max_batch_size) {
  const ParamLayout whole(config);
  ModelConfig m = config;
  m.tensor_model_parallel_size = 1;
  m.attention_dropout = m.hidden_dropout = 0.0f;
  auto model = std::make_unique<InferenceModel>(m, nullptr);
  // By name: the inference arena need not order its tensors as the training one does.
  for (const ParamTensor& t : model->layout().tensors()) {
    const auto& from = whole.tensors();
    const auto it = std::find_if(from.begin(), from.end(),
                                 [&](const ParamTensor& w) { return w.name == t.name; });
    assert(it != from.end());
    // The vocabulary's padding depends on the tensor-parallel size (padded rows are never read
    // for a real id): the embedding's and an untied output layer's common rows.
    assert(it->numel == t.numel ||
           (t.shape.size() == 2 && it->shape == std::vector<int64_t>{it->shape[0], t.shape[1]}));
    const size_t n = std::min(it->numel, t.numel);
    std::copy(params + it->offset, params + it->offset + n, model->params() + t.offset);
  }
  return std::unique_ptr<Generator>(new Generator(std::move(model), max_batch_size, 256));
}

Status Generator::check(const GenerationRequest& r) const {
  const int T = context_length(), V = config().vocab_size;
  if (r.prompt.empty()) return Status::invalid_argument("the prompt is empty (no tokens)");
  if (static_cast<int>(r.prompt.size()) > T)
    return Status::invalid_argument("the prompt has " + std::to_string(r.prompt.size()) +
                                    " tokens; the model's context is " + std::to_string(T));
  const ModelConfig& m = config();
  size_t placeholders = 0;
  for (int32_t id : r.prompt) {
    if (m.has_vision() && id == m.image_token_id()) {
      placeholders++;
      continue;
    }
    // NullTokenizer reads a prompt as ids and gives -1 for a word that is not one.
    if (id == -1 && tokenizer_ && tokenizer_->type() == "NullTokenizer")
      return Status::invalid_argument(
          "the prompt holds a word that is not a token id; this model has no tokenizer "
          "(NullTokenizer, as with --mock-data), so a prompt is token ids separated by spaces, "
          "e.g. \"3 17 42\"");
    if (id < 0 || id >= V)
      return Status::invalid_argument("token id " + std::to_string(id) +
                                      " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  if (!r.images.empty() && !m.has_vision())
    return Status::invalid_argument(
        "images given, but the model has no vision tower (a text model); drop the images");
  if (m.has_vision()) {
    const VisionConfig& v = m.vision;
    const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
    const size_t Np = v.patches();
    if (r.images.size() % pixels != 0)
      return Status::invalid_argument("the images hold " + std::to_string(r.images.size()) +
                                      " values, not a multiple of one image's " +
                                      std::to_string(pixels));
    const size_t images = r.images.size() / pixels;
    if (placeholders != images * Np)
      return Status::invalid_argument("the prompt has " + std::to_string(placeholders) +
                                      " image placeholder tokens for " + std::to_string(images) +
                                      " image(s) of " + std::to_string(Np) + " patches each");
  }
  if (r.tokens_to_generate < 0)
    return Status::invalid_argument("tokens to generate must be 0 or more, not " +
                                    std::to_string(r.tokens_to_generate));
  if (r.top_logprobs < 0)
    return Status::invalid_argument("top log-probabilities must be 0 or more, not " +
                                    std::to_string(r.top_logprobs));
  const SamplingParams& p = r.sampling;
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    return Status::invalid_argument("temperature must be a finite number >= 0 (0: greedy)");
  if (p.top_k < 0) return Status::invalid_argument("top-k must be >= 0 (0: off, 1: greedy)");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f))
    return Status::invalid_argument("top-p must lie in [0, 1] (0: off)");
  if (!r.stop.empty() && !tokenizer_)
    return Status::invalid_argument("stop strings need a tokenizer");
  for (const std::string& s : r.stop)
    if (s.empty()) return Status::invalid_argument("a stop string is empty");
  return Status::ok();
}

Result<std::vector<uint8_t>> Generator::ask_cancel(const Cancel& cancel,
                                                   const std::vector<int>& indices) {
  std::vector<uint8_t> ended(indices.size(), 0);
  Comm* tp = model_->tp();
  if (cancel && (!tp || tp->rank() == 0))
    for (size_t i = 0; i < indices.size(); i++) ended[i] = cancel(indices[i]) ? 1 : 0;
  if (tp && tp->size() > 1 && !ended.empty())
    if (Status s = tp->broadcast(ended.data(), ended.size(), DType::kUInt8, 0); !s) return s;
  return ended;
}

Result<std::vector<GenerationResult>> Generator::generate(
    const std::vector<GenerationRequest>& requests, const OnToken& on_token, const Cancel& cancel) {
  for (size_t i = 0; i < requests.size(); i++)
    if (Status s = check(requests[i]); !s)
      return Status::invalid_argument(
          (requests.size() > 1 ? "prompt " + std::to_string(i + 1) + ": " : std::string()) +
          s.message());
  std::vector<GenerationResult> results(requests.size());
  for (size_t first = 0; first < requests.size(); first += max_batch_) {
    const size_t count = std::min(requests.size() - first, static_cast<size_t>(max_batch_));
    if (Status s = generate_group(requests, first, count, results, on_token, cancel); !s) return s;
  }
  return results;
}

Status Generator::generate_group(const std::vector<GenerationRequest>& requests, size_t first,
                                 size_t count, std::vector<GenerationResult>& results,
                                 const OnToken& on_token, const Cancel& cancel) {
  InferenceModel& model = *model_;
  model.reserve(static_cast<int>(count), max_rows_);
  const int V = config().vocab_size, T = context_length();
  std::vector<Live> live(count);
  SamplingScratch scratch;
  for (size_t s = 0; s < count; s++) {
    live[s].index = static_cast<int>(first + s);
    live[s].length = static_cast<int>(requests[first + s].prompt.size());
    live[s].rng.seed(requests[first + s].sampling.seed);
    GenerationResult& res = results[first + s];
    res = GenerationResult{};
    if (requests[first + s].prompt_logprobs) {
      res.prompt_logprobs.assign(requests[first + s].prompt.size() - 1, 0.0f);
      if (requests[first + s].top_logprobs > 0)
        res.prompt_top_logprobs.resize(requests[first + s].prompt.size() - 1);
    }
    if (requests[first + s].tokens_to_generate == 0) live[s].done = true;
  }
  // Sequence s ends now, cancelled, if it has not ended.
  auto cancelled = [&](size_t s) {
    if (live[s].done) return;
    results[first + s].finish = FinishReason::kCancelled;
    live[s].done = true;
  };
  {  // cancelled before it starts: no tokens
    std::vector<int> indices(count);
    for (size_t s = 0; s < count; s++) indices[s] = live[s].index;
    Result<std::vector<uint8_t>> ended = ask_cancel(cancel, indices);
    if (!ended) return ended.status();
    for (size_t s = 0; s < count; s++)
      if ((*ended)[s]) cancelled(s);
  }
  // Takes the next token of slot s from its logits (padded V; only real ids are drawn).
  auto advance = [&](size_t s, const float* logits) {
    Live& q = live[s];
    const GenerationRequest& req = requests[q.index];
    GenerationResult& res = results[q.index];
    const int32_t token = sample_token(logits, V, req.sampling, q.rng, scratch);
    const float logprob = req.logprobs ? token_logprob(logits, V, token) : 0.0f;
    res.tokens.push_back(token);
    if (req.logprobs) res.logprobs.push_back(logprob);
    if (req.logprobs && req.top_logprobs > 0) {
      res.top_logprobs.emplace_back();
      top_token_logprobs(logits, V, req.top_logprobs, res.top_logprobs.back(), scratch);
    }
    q.length++;
    if (on_token) on_token(q.index, token, logprob);
    if (req.stop_at_eod && token == eod_) {
      res.finish = FinishReason::kEod;
      q.done = true;
    } else if (!req.stop.empty()) {
      const std::string text = tokenizer_->decode(res.tokens);
      for (const std::string& stop : req.stop)
        if (size_t at = text.find(stop); at != std::string::npos) {
          q.stop_at = std::min(q.stop_at, at);
          res.finish = FinishReason::kStop;
          q.done = true;
        }
    }
    // Length: asked-for tokens, or the context is full (the new token has no position).
    if (!q.done && (static_cast<int>(res.tokens.size()) >= req.tokens_to_generate || q.length >= T))
      q.done = true;
  };

  // Prefill: every prompt token as a row, in chunks; logits for each prompt's last row (and
  // every row when its prompt's log-probabilities are wanted).
  std::vector<int32_t> tokens, slots, positions, logit_rows;
  struct Origin {
    int slot, position;
  };
  std::vector<Origin> origins;
  // Note [image rows at inference] (infer_model.cpp): each request's projected patches
  // (I Np, C), and per prefill row its patch (null on text rows).
  // Note [one tower run per image]: requests of a group often carry the same image (each choice
  // of a multiple-choice question is a request with the question's images; clients of the server
  // ask about one picture several times). An image whose pixels equal, bit for bit, one already
  // encoded in this group takes that image's patches, which the tower would have computed
  // again exactly; so a question's tower runs once, not once per choice.
  const ModelConfig& mc = config();
  std::vector<std::vector<float>> patches(count);
  std::vector<const float*> image_rows;
  bool any_image = false;
  if (mc.has_vision()) {
    const VisionConfig& v = mc.vision;
    const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
    const size_t rows = static_cast<size_t>(v.patches()) * mc.hidden_size;
    struct Encoded {
      const float* image;   // its pixels, in a request of this group
      size_t slot, offset;  // its patches: patches[slot] from offset
    };
    std::vector<Encoded> encoded;
    for (size_t s = 0; s < count; s++) {
      const std::vector<float>& images = requests[first + s].images;
      for (size_t i = 0; i < images.size() / pixels; i++) {
        const float* image = images.data() + i * pixels;
        const auto same = std::find_if(encoded.begin(), encoded.end(), [&](const Encoded& e) {
          return std::memcmp(e.image, image, pixels * sizeof(float)) == 0;
        });
        const size_t at = patches[s].size();
        if (same != encoded.end()) {
          // Through a copy: the source may be this very vector, which the insert reallocates.
          const float* src = patches[same->slot].data() + same->offset;
          const std::vector<float> from(src, src + rows);
          patches[s].insert(patches[s].end(), from.begin(), from.end());
        } else {
          const float* out = model.encode_image(image);
          patches[s].insert(patches[s].end(), out, out + rows);
          encoded.push_back({image, s, at});
        }
        any_image = true;
      }
    }
  }
  auto flush = [&]() {
    const float* logits =
        model.forward(tokens.data(), slots.data(), positions.data(),
                      static_cast<int>(tokens.size()), logit_rows.data(),
                      static_cast<int>(logit_rows.size()), any_image ? image_rows.data() : nullptr);
    for (size_t i = 0; i < logit_rows.size(); i++) {
      const float* row = logits + i * static_cast<size_t>(model.padded_vocab());
      const Origin o = origins[i];
      const GenerationRequest& req = requests[first + o.slot];
      const int n = static_cast<int>(req.prompt.size());
      // An image placeholder is not a token the model predicts: no log-probability (0).
      if (req.prompt_logprobs && o.position + 1 < n && req.prompt[o.position + 1] < V) {
        GenerationResult& res = results[first + o.slot];
        res.prompt_logprobs[o.position] = token_logprob(row, V, req.prompt[o.position + 1]);
        if (req.top_logprobs > 0)
          top_token_logprobs(row, V, req.top_logprobs, res.prompt_top_logprobs[o.position],
                             scratch);
      }
      if (o.position == n - 1 && !live[o.slot].done) advance(o.slot, row);
    }
    tokens.clear();
    slots.clear();
    positions.clear();
    logit_rows.clear();
    origins.clear();
    image_rows.clear();
  };
  for (size_t s = 0; s < count; s++) {
    if (live[s].done && results[first + s].finish == FinishReason::kCancelled) continue;
    const GenerationRequest& req = requests[first + s];
    const int n = static_cast<int>(req.prompt.size());
    size_t patch = 0;  // the next of this request's patches
    for (int p = 0; p < n; p++) {
      if (static_cast<int>(tokens.size()) == max_rows_) flush();
      if (req.prompt_logprobs || p == n - 1) {
        logit_rows.push_back(static_cast<int32_t>(tokens.size()));
        origins.push_back({static_cast<int>(s), p});
      }
      tokens.push_back(req.prompt[p]);
      const bool image = mc.has_vision() && req.prompt[p] == mc.image_token_id();
      image_rows.push_back(image ? patches[s].data() + patch++ * mc.hidden_size : nullptr);
      slots.push_back(static_cast<int32_t>(s));
      positions.push_back(p);
    }
  }
  if (!tokens.empty()) flush();

  // Decoding: one row per live sequence, its newest token at the next position.
  std::vector<size_t> active;
  std::vector<int> indices;
  for (;;) {
    active.clear();
    indices.clear();
    for (size_t s = 0; s < count; s++)
      if (!live[s].done) {
        active.push_back(s);
        indices.push_back(live[s].index);
      }
    if (active.empty()) break;
    Result<std::vector<uint8_t>> ended = ask_cancel(cancel, indices);
    if (!ended) return ended.status();
    size_t kept = 0;
    for (size_t i = 0; i < active.size(); i++)
      if ((*ended)[i])
        cancelled(active[i]);
      else
        active[kept++] = active[i];
    active.resize(kept);
    if (active.empty()) break;
    tokens.resize(active.size());
    slots.resize(active.size());
    positions.resize(active.size());
    logit_rows.resize(active.size());
    for (size_t i = 0; i < active.size(); i++) {
      const size_t s = active[i];
      tokens[i] = results[first + s].tokens.back();
      slots[i] = static_cast<int32_t>(s);
      positions[i] = live[s].length - 1;
      logit_rows[i] = static_cast<int32_t>(i);
    }
    const float* logits = model.forward(tokens.data(), slots.data(), positions.data(),
                                        static_cast<int>(active.size()), logit_rows.data(),
                                        static_cast<int>(active.size()));
    for (size_t i = 0; i < active.size(); i++)
      advance(active[i], logits + i * static_cast<size_t>(model.padded_vocab()));
  }
  tokens.clear();
  slots.clear();
  positions.clear();
  logit_rows.clear();

  if (tokenizer_)
    for (size_t s = 0; s < count; s++) {
      GenerationResult& res = results[first + s];
      std::vector<int32_t> ids = res.tokens;
      if (res.finish == FinishReason::kEod && !ids.empty()) ids.pop_back();
      res.text = tokenizer_->decode(ids);
      if (live[s].stop_at != std::string::npos) res.text.resize(live[s].stop_at);
    }
  return Status::ok();
}

}  // namespace lattice
