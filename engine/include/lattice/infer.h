// Text generation from a trained model (docs/inference.md): a Generator holds one
// tensor-parallel shard of the model and a key/value cache, and turns batches of prompts
// (token ids, of different lengths) into continuations with per-sequence sampling settings.
// It loads a Lattice checkpoint saved under any layout (the checkpoint reader assembles each
// global tensor; this rank keeps its slice) or a GPT-2 safetensors file.
// Thread safety: one thread at a time per Generator. With tensor parallelism every rank of
// the group calls generate() with the same requests (collective); the results are identical
// on every rank. Non-goals: pipeline-parallel inference, beam search, paged caches.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lattice/comm.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

// How the next token is drawn. Greedy (arg-max) when temperature <= 0 or top_k == 1; else
// logits / temperature, then top-k (top_k > 0) or nucleus (top_p > 0: the smallest set of
// most likely tokens whose probability reaches top_p, at least one token), then a draw from
// a generator seeded by `seed` alone, so a sequence's result does not depend on what it is
// batched with.
struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 0.0f;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, at least one, at most the context length
  int tokens_to_generate = 64;  // fewer when the context fills up
  SamplingParams sampling;
  bool stop_at_eod = true;        // end at the tokenizer's end-of-document token
  std::vector<std::string> stop;  // end once the generated text contains one (needs a tokenizer)
  bool logprobs = true;           // log-probability of each generated token (a pass over V)
  bool prompt_logprobs = false;   // also the log-probability of prompt tokens 1..n-1
  // The most likely `top_logprobs` tokens of each position whose log-probability is reported
  // (generated tokens with `logprobs`, prompt tokens with `prompt_logprobs`); 0: none.
  int top_logprobs = 0;
  // A vision-language model's images (I, Cin, img_h, img_w), normalised as in training
  // (data/image_preprocess.h): image i fills the prompt's i-th run of Np placeholder ids
  // (ModelConfig::image_token_id, Note [image rows] in model/gpt_vision.cpp).
  std::vector<float> images;
};

// One alternative at a position: a token and its log-probability under the model (T = 1).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// kCancelled: generate()'s cancel callback ended the sequence before it ended otherwise.
enum class FinishReason { kLength, kEod, kStop, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "length", "eod", "stop", "cancelled"

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (an ending EOD included)
  std::vector<float> logprobs;  // (tokens) log p(token | before) under the model (T = 1), if asked
  std::vector<float> prompt_logprobs;  // (prompt - 1) when asked
  // With top_logprobs > 0: the most likely tokens of each reported position, most likely
  // first (ties: lower id first), as (tokens) and (prompt - 1).
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  FinishReason finish = FinishReason::kLength;
  // With a tokenizer: the generated text, without an ending EOD and cut before a stop string.
  std::string text;
};

struct InferenceOptions {
  std::string load;            // --load: a save directory (its latest checkpoint) or an iter_ dir
  int ckpt_step = 0;           // --ckpt-step: that iteration of --load instead of the latest
  std::string load_hf;         // --load-hf: a Hugging Face model; the architecture is `model`
  ModelConfig model;           // with load_hf; a checkpoint brings its own
  int max_batch_size = 32;     // sequences decoded together (key/value cache slots)
  int max_prefill_rows = 256;  // prompt tokens per forward pass
};

class InferenceModel;

class Generator {
 public:
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Collective over `tp` (null: one process). A checkpoint's model shape comes from its
  // metadata; the tensor-parallel size is tp's. Errors name the file, the tensor or the flag.
  static Result<std::unique_ptr<Generator>> load(const InferenceOptions& options, Comm* tp);
  // Random weights (Megatron's initialisation with `seed`), for tests and benchmarks.
  static std::unique_ptr<Generator> random(const ModelConfig& config, uint64_t seed, Comm* tp,
                                           int max_batch_size = 32);
  // One process's generator on given weights: `params` holds the whole model in
  // ParamLayout(config)'s arena order (what gather_full_params gives rank 0), copied.
  static std::unique_ptr<Generator> from_weights(const ModelConfig& config, const float* params,
                                                 int max_batch_size = 32);

  const ModelConfig& config() const;
  int context_length() const;  // positions the model knows (--max-position-embeddings)
  // Used for stop strings, result text and the EOD id (else the model's last real id,
  // NullTokenizer's EOD). Not owned; must outlive the generator's use.
  void set_tokenizer(const Tokenizer* tokenizer);
  int32_t eod() const { return eod_; }

  // Why `request` cannot run, naming the field, or ok.
  Status check(const GenerationRequest& request) const;
  // Called for each new token of sequence `index` as soon as it is chosen (streaming).
  using OnToken = std::function<void(int index, int32_t token, float logprob)>;
  // Whether sequence `index` should end now (a caller's stop button, a client that left).
  using Cancel = std::function<bool(int index)>;
  // Generates every request (in groups of max_batch_size). Collective under TP.
  // `cancel` is asked before each decoding step for every unfinished sequence, and before each
  // group for the requests in it: a sequence it ends finishes with FinishReason::kCancelled
  // and the tokens it has (none when it had not started); the others go on. Under TP only
  // tensor-parallel rank 0 asks and broadcasts the answers (one small broadcast per step, on
  // every TP rank whether or not it passes a cancel), so every rank ends the same sequences
  // at the same step.
  Result<std::vector<GenerationResult>> generate(const std::vector<GenerationRequest>& requests,
                                                 const OnToken& on_token = {},
                                                 const Cancel& cancel = {});

  // The model behind the generator (its weights and forward), for tests and benchmarks.
  InferenceModel& model() { return *model_; }

 private:
  Generator(std::unique_ptr<InferenceModel> model, int max_batch, int max_rows);
  Status generate_group(const std::vector<GenerationRequest>& requests, size_t first, size_t count,
                        std::vector<GenerationResult>& results, const OnToken& on_token,
                        const Cancel& cancel);
  // Which of `indices` `cancel` ends now (1 each), asked on TP rank 0 and broadcast to the
  // others. Collective under TP.
  Result<std::vector<uint8_t>> ask_cancel(const Cancel& cancel, const std::vector<int>& indices);

  std::unique_ptr<InferenceModel> model_;
  const Tokenizer* tokenizer_ = nullptr;
  int32_t eod_ = -1;
  int max_batch_, max_rows_;
};

// The tokenizer a checkpoint was trained with (its recorded --tokenizer-type, --vocab-file,
// --merge-file, --tokenizer-model, --vocab-size), from `load` (as InferenceOptions::load).
Result<TokenizerOptions> checkpoint_tokenizer(const std::string& load, int ckpt_step);

// Every rank of `comm` leaves with root's `requests` (collective; TP serving and generate).
Status broadcast_requests(Comm& comm, std::vector<GenerationRequest>& requests, int root);

}  // namespace lattice
