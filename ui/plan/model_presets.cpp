// Preset table and the embedded demo configuration (read from the Qt resource that holds
// resources/configs/demo.json, the same file `lattice demo` embeds).
#include "plan/model_presets.h"

#include <QFile>

#include "plan/plan.h"
#include "plan/train_flags.h"

namespace lattice::ui {

namespace {

// The demo corpus's SentencePiece vocabulary (`lattice data demo`'s default) less the EOD id
// that a NullTokenizer adds.
constexpr int kDemoVocab = 4096 - 1;
// GPT-2's 50257 tokens: 50256 BPE tokens and <|endoftext|>.
constexpr int kGpt2Vocab = 50256;

TrainOptions readDemoOptions() {
  QFile file(QStringLiteral(":/configs/demo.json"));
  TrainOptions options;
  if (file.open(QIODevice::ReadOnly)) {
    Result<TrainOptions> parsed = optionsFromJson(file.readAll().toStdString());
    if (parsed) options = *parsed;
  }
  options.tokenizer = null_tokenizer(kDemoVocab);
  normalizeOptions(options);
  return options;
}

// The Llama family's common architecture (Hugging Face's LlamaForCausalLM and its relatives):
// RoPE, RMSNorm, a SwiGLU MLP of `ffn`, `groups` key/value heads, an untied output layer and
// no biases. `vocab` is config.json's vocab_size, the embedding's rows (the NullTokenizer
// preset adds the EOD id back).
ModelPreset llama(const QString& name, int layers, int hidden, int heads, int groups, int ffn,
                  int vocab, float theta, float epsilon, int seq, int global_batch) {
  ModelPreset p;
  p.name = name;
  p.num_layers = layers;
  p.hidden_size = hidden;
  p.num_attention_heads = heads;
  p.seq_length = seq;
  p.vocab_size = vocab - 1;
  p.micro_batch_size = 1;
  p.global_batch_size = global_batch;
  p.ffn_hidden_size = ffn;
  p.num_query_groups = groups;
  p.position_embedding_type = "rope";
  p.rotary_base = theta;
  p.normalization = "RMSNorm";
  p.norm_epsilon = epsilon;
  p.swiglu = true;
  p.untie_embeddings_and_output_weights = true;
  p.disable_bias_linear = true;
  return p;
}

// From each model's config.json (num_hidden_layers, hidden_size, num_attention_heads,
// num_key_value_heads, intermediate_size, vocab_size, rope_theta, rms_norm_eps,
// tie_word_embeddings false; Qwen2's q/k/v biases). The sequence length is the pre-training
// length, not max_position_embeddings (131072 for Llama 3.1 and Qwen2.5, 32768 for Mistral:
// the context after long-context extension); with RoPE it changes no parameter. Llama 3.1's
// "llama3" rope_scaling of the frequencies and Mistral's sliding window are not modelled: at
// Mistral's 4096 tokens the 4096-token window is the whole causal attention. Global batches:
// Llama 3 405B's 16M tokens (2048 x 8192, Dubey et al. 2024); for the others, whose batch is
// not published, about 4M tokens.
std::vector<ModelPreset> llamaPresets() {
  return {
      llama("Llama 3 8B", 32, 4096, 32, 8, 14336, 128256, 500000.0f, 1e-5f, 8192, 512),
      llama("Llama 3 70B", 80, 8192, 64, 8, 28672, 128256, 500000.0f, 1e-5f, 8192, 512),
      llama("Llama 3.1 405B", 126, 16384, 128, 8, 53248, 128256, 500000.0f, 1e-5f, 8192, 2048),
      [] {
        ModelPreset qwen =
            llama("Qwen2.5 7B", 28, 3584, 28, 4, 18944, 152064, 1000000.0f, 1e-6f, 4096, 1024);
        qwen.add_qkv_bias = true;  // Qwen2: q_proj, k_proj, v_proj have biases, o_proj not
        return qwen;
      }(),
      llama("Mistral 7B v0.1", 32, 4096, 32, 8, 14336, 32000, 10000.0f, 1e-5f, 4096, 1024),
  };
}

std::vector<ModelPreset> makePresets() {
  const TrainOptions demo = demoOptions();
  const ModelConfig& m = demo.model;
  std::vector<ModelPreset> presets = {
      {"Demo model (lattice demo)", m.num_layers, m.hidden_size, m.num_attention_heads,
       m.seq_length, kDemoVocab, demo.micro_batch_size, demo.global_batch_size},
      {"GPT-2 124M", 12, 768, 12, 1024, kGpt2Vocab, 4, 512},
      {"GPT-2 355M", 24, 1024, 16, 1024, kGpt2Vocab, 4, 512},
      {"GPT-2 774M", 36, 1280, 20, 1024, kGpt2Vocab, 2, 512},
      {"GPT-2 1.5B", 48, 1600, 25, 1024, kGpt2Vocab, 1, 512},
      {"GPT-3 1.3B", 24, 2048, 16, 2048, kGpt2Vocab, 1, 512},
      {"GPT-3 2.7B", 32, 2560, 32, 2048, kGpt2Vocab, 1, 512},
      {"GPT-3 6.7B", 32, 4096, 32, 2048, kGpt2Vocab, 1, 1024},
      {"GPT-3 13B", 40, 5120, 40, 2048, kGpt2Vocab, 1, 1024},
      {"GPT-3 175B", 96, 12288, 96, 2048, kGpt2Vocab, 1, 1536},
  };
  for (ModelPreset& p : llamaPresets()) presets.push_back(std::move(p));
  return presets;
}

}  // namespace

TrainOptions demoOptions() {
  static const TrainOptions demo = readDemoOptions();
  return demo;
}

const std::vector<ModelPreset>& modelPresets() {
  static const std::vector<ModelPreset> presets = makePresets();
  return presets;
}

void applyPreset(TrainOptions& o, const ModelPreset& p) {
  ModelConfig& m = o.model;
  m.num_layers = p.num_layers;
  m.hidden_size = p.hidden_size;
  m.ffn_hidden_size = p.ffn_hidden_size;
  m.num_attention_heads = p.num_attention_heads;
  m.seq_length = p.seq_length;
  m.max_position_embeddings = 0;
  m.group_query_attention = p.num_query_groups > 0;
  m.num_query_groups = p.num_query_groups > 0 ? p.num_query_groups : ModelConfig{}.num_query_groups;
  m.position_embedding_type = p.position_embedding_type;
  m.rotary_base = p.rotary_base;
  m.rotary_percent = 1.0f;
  m.normalization = p.normalization;
  m.norm_epsilon = p.norm_epsilon;
  m.swiglu = p.swiglu;
  m.untie_embeddings_and_output_weights = p.untie_embeddings_and_output_weights;
  m.disable_bias_linear = p.disable_bias_linear;
  m.add_qkv_bias = p.add_qkv_bias;
  o.tokenizer = null_tokenizer(p.vocab_size);
  o.micro_batch_size = p.micro_batch_size;
  o.global_batch_size = p.global_batch_size;
  normalizeOptions(o);
}

namespace {

// The architecture of `m` is the preset's (presetIndexOf's rule).
bool hasArchitecture(const ModelConfig& m, const ModelPreset& p) {
  const int ffn = p.ffn_hidden_size > 0 ? p.ffn_hidden_size : 4 * p.hidden_size;
  const bool rope = p.position_embedding_type == "rope";
  const bool gqa = p.num_query_groups > 0;
  return m.num_layers == p.num_layers && m.hidden_size == p.hidden_size && m.ffn() == ffn &&
         m.num_attention_heads == p.num_attention_heads && m.seq_length == p.seq_length &&
         m.max_positions() == p.seq_length && m.group_query_attention == gqa &&
         (!gqa || m.num_query_groups == p.num_query_groups) &&
         m.position_embedding_type == p.position_embedding_type &&
         (!rope || (m.rotary_base == p.rotary_base && m.rotary_percent == 1.0f)) &&
         m.normalization == p.normalization && m.norm_epsilon == p.norm_epsilon &&
         m.swiglu == p.swiglu &&
         m.untie_embeddings_and_output_weights == p.untie_embeddings_and_output_weights &&
         m.disable_bias_linear == p.disable_bias_linear && m.add_qkv_bias == p.add_qkv_bias;
}

}  // namespace

int presetIndexOf(const TrainOptions& o) {
  const std::vector<ModelPreset>& presets = modelPresets();
  for (size_t i = 0; i < presets.size(); i++)
    if (hasArchitecture(o.model, presets[i]) && o.model.vocab_size == presets[i].vocab_size + 1)
      return static_cast<int>(i);
  return -1;
}

}  // namespace lattice::ui
