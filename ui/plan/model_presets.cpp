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

std::vector<ModelPreset> makePresets() {
  const TrainOptions demo = demoOptions();
  const ModelConfig& m = demo.model;
  return {
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
  m.ffn_hidden_size = 0;
  m.num_attention_heads = p.num_attention_heads;
  m.seq_length = p.seq_length;
  m.max_position_embeddings = 0;
  o.tokenizer = null_tokenizer(p.vocab_size);
  o.micro_batch_size = p.micro_batch_size;
  o.global_batch_size = p.global_batch_size;
  normalizeOptions(o);
}

int presetIndexOf(const TrainOptions& o) {
  const std::vector<ModelPreset>& presets = modelPresets();
  const ModelConfig& m = o.model;
  for (size_t i = 0; i < presets.size(); i++) {
    const ModelPreset& p = presets[i];
    if (m.num_layers == p.num_layers && m.hidden_size == p.hidden_size &&
        m.ffn() == 4 * p.hidden_size && m.num_attention_heads == p.num_attention_heads &&
        m.seq_length == p.seq_length && m.max_positions() == p.seq_length &&
        m.vocab_size == p.vocab_size + 1)
      return static_cast<int>(i);
  }
  return -1;
}

}  // namespace lattice::ui
