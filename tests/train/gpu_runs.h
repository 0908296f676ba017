// The small training runs the GPU trainer's tests compare across engines and layouts
// (test_gpu_training, test_gpu_tensor_parallel): head size 64, a vocabulary of 256 (padded to
// 256 at TP 1 and TP 2, so every layout draws the same initial weights), 2 micro-batches of 2.
#pragma once

#include "common/tiny_model.h"
#include "lattice/train_options.h"

namespace lattice::testing {

// Three iterations on mock data; threads: the CPU engine's per rank.
inline TrainOptions small_gpu_run(int threads) {
  TrainOptions o;
  o.model = tiny_config(2, 128, 2, 64, 255);  // head size 64
  o.tokenizer.vocab_size = 255;
  o.model.vocab_size = 256;  // NullTokenizer: --vocab-size + 1
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 3;
  o.mock_data = true;
  o.eval_iters = 0;
  o.threads = threads;
  o.optim.lr = 1e-3f;
  return o;
}

// Six iterations with warm-up and cosine decay, so that a resumed run must continue the
// learning-rate schedule as well as the data and the optimizer.
inline TrainOptions resumable_gpu_run(int threads) {
  TrainOptions o = small_gpu_run(threads);
  o.train_iters = 6;
  o.optim.lr_warmup_iters = 2;
  o.optim.lr_decay_style = "cosine";
  return o;
}

}  // namespace lattice::testing
