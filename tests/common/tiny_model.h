// Small model configurations for tests: the few fields a test cares about, the rest at the
// ModelConfig defaults. Dropout is off unless the test turns it on.
#pragma once

#include "lattice/model_config.h"

namespace lattice::testing {

inline ModelConfig tiny_config(int layers, int hidden, int heads, int seq, int vocab) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.seq_length = seq;
  c.vocab_size = vocab;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

}  // namespace lattice::testing
