// apply_hf_model (train_options.h): the model flags of a GPT-2 safetensors file, so that
// --load-hf and `lattice ckpt import-hf` need none, and the ones given are checked against it.
#include <string>
#include <vector>

#include "checkpoint/hf_gpt2_config.h"
#include "lattice/train_options.h"

namespace lattice {

Status apply_hf_model(const std::string& path, TrainOptions& o) {
  Result<HfGpt2Shape> read = read_hf_gpt2_shape(path);
  if (!read) return read.status();
  const HfGpt2Shape& file = *read;
  ModelConfig& m = o.model;
  std::vector<std::string> errors;
  // The flag's value from the file when not given; else it must be the file's. `value` is 0
  // when the file lacks the tensor (import_hf_gpt2 then names it).
  auto take = [&](const std::string& flag, int& target, int value, const std::string& what) {
    if (value <= 0) return;
    if (!o.given(flag)) {
      target = value;
    } else if (target != value) {
      errors.push_back("--" + flag + " " + std::to_string(target) + " disagrees with " + path +
                       ", which has " + std::to_string(value) + " " + what);
    }
  };
  take("num-layers", m.num_layers, file.num_layers, "layers");
  take("hidden-size", m.hidden_size, file.hidden_size, "as hidden size (wte.weight's columns)");
  take("max-position-embeddings", m.max_position_embeddings, file.max_positions,
       "positions (wpe.weight's rows)");
  if (!o.given("seq-length") && file.max_positions > 0) m.seq_length = file.max_positions;

  // --ffn-hidden-size 0 means 4 * --hidden-size; the effective size is what must agree.
  if (file.ffn_hidden_size > 0) {
    if (!o.given("ffn-hidden-size")) {
      m.ffn_hidden_size = file.ffn_hidden_size == 4 * m.hidden_size ? 0 : file.ffn_hidden_size;
    } else if (m.ffn() != file.ffn_hidden_size) {
      errors.push_back("--ffn-hidden-size " + std::to_string(m.ffn()) + " disagrees with " + path +
                       ", which has MLP size " + std::to_string(file.ffn_hidden_size) +
                       " (h.0.mlp.c_fc.weight's columns)");
    }
  }

  // With NullTokenizer the model has --vocab-size + 1 ids (EOD = --vocab-size, as Megatron);
  // another tokenizer brings its own vocabulary, which the import checks against the file.
  if (o.tokenizer.type == "NullTokenizer" && file.vocab_size > 0) {
    if (!o.given("vocab-size")) {
      o.tokenizer.vocab_size = file.vocab_size - 1;
      m.vocab_size = file.vocab_size;
    } else if (o.tokenizer.vocab_size + 1 != file.vocab_size) {
      errors.push_back(
          "--vocab-size " + std::to_string(o.tokenizer.vocab_size) +
          " gives NullTokenizer's model " + std::to_string(o.tokenizer.vocab_size + 1) +
          " ids (EOD = --vocab-size) but " + path + " has " + std::to_string(file.vocab_size) +
          " (wte.weight's rows): pass --vocab-size " + std::to_string(file.vocab_size - 1) +
          " or leave it out");
    }
  }

  if (file.num_attention_heads > 0) {
    if (!o.given("num-attention-heads")) {
      m.num_attention_heads = file.num_attention_heads;
    } else if (m.num_attention_heads != file.num_attention_heads) {
      errors.push_back("--num-attention-heads " + std::to_string(m.num_attention_heads) +
                       " disagrees with " + file.config_path + ", which gives n_head " +
                       std::to_string(file.num_attention_heads));
    }
  } else if (!o.given("num-attention-heads")) {
    errors.push_back(
        path + " does not say how many attention heads the model has (no tensor shape does): " +
        (file.config_path.empty() ? "put its Hugging Face config.json (with n_head) beside it"
                                  : file.config_path + " has no n_head; add it") +
        ", or pass --num-attention-heads");
  }

  if (errors.empty()) return Status::ok();
  std::string message;
  for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
  return Status::invalid_argument(message);
}

}  // namespace lattice
