// Published model sizes for the Plan view's preset list: GPT-2 (Radford et al. 2019, the
// Hugging Face configs), GPT-3 (Brown et al. 2020, table 2.1, with the head counts and the
// 5120 hidden size Megatron-LM's examples use), and the demo model of `lattice demo`.
#pragma once

#include <QString>
#include <vector>

#include "lattice/train_options.h"

namespace lattice::ui {

struct ModelPreset {
  QString name;
  int num_layers = 0, hidden_size = 0, num_attention_heads = 0, seq_length = 0;
  int vocab_size = 0;  // --vocab-size of a NullTokenizer: the model has one more id (EOD)
  int micro_batch_size = 1, global_batch_size = 1;
};

// Demo model first, then GPT-2 124M ... GPT-3 175B.
const std::vector<ModelPreset>& modelPresets();
// Sets the architecture, sequence length, vocabulary and batch sizes; keeps parallelism,
// precision, data and optimizer settings.
void applyPreset(TrainOptions& options, const ModelPreset& preset);
// Index into modelPresets() of the preset whose architecture `options` has, or -1.
int presetIndexOf(const TrainOptions& options);

// The embedded demo configuration (resources/configs/demo.json, the one `lattice demo`
// trains) with a NullTokenizer of the demo corpus's vocabulary (4096 ids).
TrainOptions demoOptions();

}  // namespace lattice::ui
