// Small model configurations for tests: the few fields a test cares about, the rest at the
// ModelConfig defaults. Dropout is off unless the test turns it on.
#pragma once

#include "lattice/model_config.h"
#include "lattice/train_options.h"

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

// A --device cuda run of two layers that the CUDA backend accepts as it is (head size 64, an MLP
// slice that is a multiple of 8, mock data, one iteration, no validation; 2 micro-batches, so
// DP 1 and DP 2 both fit): the base the capability and --device tests change one flag of.
inline TrainOptions cuda_ready_options() {
  TrainOptions o;
  o.model = tiny_config(2, 128, 2, 64, 256);  // head size 64
  o.tokenizer.vocab_size = 255;
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 1;
  o.mock_data = true;
  o.eval_iters = 0;
  o.device = "cuda";
  return o;
}

}  // namespace lattice::testing
